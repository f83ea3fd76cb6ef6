/*
 * gc.c — prune's protocol, both halves (see gc.h for the argument).
 *
 * Design notes.
 * - Everything prune writes is write-once and named so that no two writers
 *   pick the same key; a crash at any point leaves a state the next prune
 *   recognises from the listing alone (a mark without its intents record,
 *   a sweep without done, a done mark not yet cleaned up, a lease still
 *   held by a dead process of this host) and carries on from.
 * - References are the union over every healthy region: a chunk any
 *   region's retained manifest names is kept in every region.  A manifest
 *   no region can read stops the prune: what it names is unknown.
 * - Deletions are the only destructive step, and only of candidates that
 *   passed every check of the sweep; the local index forgets the deleted
 *   chunks' presence in that region in the same pass.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/lineage.h"
#include "service/gc.h"
#include "service/snapdrop.h"
#include "service/catalog.h"
#include "service/multinode.h"
#include "service/partgc.h"
#include "store/layout.h"
#include "store/recidx.h"

#define NAME_MAX_LEN 64
#define INDEX_BATCH 1000

/* gc/<mark>/<name>, intents/<name>, locks/prune/<12 digits>: this
 * module's names always form a key; one that did not would leave key ""
 * and every region call on it fails as an invalid key. */
static void gc_key(const char *mark, const char *name, char *key)
{
    layout_key(LAYOUT_GC, mark, name, key);
}

static void intent_key(const char *name, char *key)
{
    layout_key(LAYOUT_INTENT, NULL, name, key);
}

static void lease_key(int64_t n, char *key)
{
    char name[24];
    snprintf(name, sizeof(name), "%012lld", (long long)n);
    layout_key(LAYOUT_LEASE, NULL, name, key);
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds that also count while the machine is suspended. */
static double boottime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t now(void)
{
    return (int64_t)time(NULL);
}

static void self_host(char out[GC_FIELD_MAX + 1])
{
    char h[256] = "unknown";
    gethostname(h, sizeof(h) - 1);
    lineage_sanitise(h, out, GC_FIELD_MAX + 1);
}

static void rec_fill(struct gcrec *g, enum gc_kind kind, const char *mark)
{
    gcrec_init(g, kind);
    if (mark)
        snprintf(g->mark, sizeof(g->mark), "%s", mark);
    self_host(g->host);
    gc_boot_id(g->boot);
    g->time = now();
}

static int put_rec(struct region *rg, const char *key, const struct gcrec *g, bool create_only)
{
    struct buf b = BUF_INIT;
    int e = gcrec_encode(g, &b);
    if (e == 0)
        e = create_only ? region_put_new(rg, key, b.data, b.len)
                        : region_put(rg, key, b.data, b.len);
    buf_free(&b);
    return e;
}

/* Reads and parses a record; g must be freed whatever is returned. */
static int get_rec(struct region *rg, const char *key, struct gcrec *g)
{
    struct buf b = BUF_INIT;
    gcrec_init(g, GC_MARK);
    int e = region_get(rg, key, GC_MAX_BYTES, &b);
    if (e == 0 && (e = gcrec_parse(b.data, b.len, g)) < 0)
        region_set_error(rg, "region '%s': \"%s\" is damaged (%s)", rg->conf.name, key, err_str(e));
    buf_free(&b);
    return e;
}

/* ---- listings of gc/ ---------------------------------------------------- */

struct gc_mk {
    char mark[GC_MARK_LEN + 1];
    bool has_mark, has_intents, has_done;
    int64_t sweep_expires;       /* the latest sweep record's; -1 none */
    char (*names)[NAME_MAX_LEN]; /* every object under gc/<mark>/ */
    size_t nnames;
};

struct gc_list {
    struct gc_mk *v;
    size_t n;
    const char *only; /* list one mark only */
};

static void gc_list_free(struct gc_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].names);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int gc_list_cb(void *ud, const char *key, uint64_t size)
{
    struct gc_list *l = ud;
    struct layout_key lk;
    char mark[GC_MARK_LEN + 1];
    (void)size;
    if (layout_parse(key, &lk) < 0 || lk.kind != LAYOUT_GC || strlen(lk.dir) != GC_MARK_LEN ||
        strlen(lk.name) >= NAME_MAX_LEN)
        return 0; /* not ours */
    memcpy(mark, lk.dir, GC_MARK_LEN + 1);
    if (!gc_mark_check(mark) || (l->only && strcmp(mark, l->only)))
        return 0;
    struct gc_mk *k = NULL;
    for (size_t i = 0; i < l->n && !k; i++)
        if (!strcmp(l->v[i].mark, mark))
            k = &l->v[i];
    if (!k) {
        struct gc_mk *p = realloc(l->v, (l->n + 1) * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->v = p;
        k = &p[l->n++];
        memset(k, 0, sizeof(*k));
        memcpy(k->mark, mark, sizeof(mark));
        k->sweep_expires = -1;
    }
    const char *name = lk.name;
    int64_t exp;
    if (!strcmp(name, "mark"))
        k->has_mark = true;
    else if (!strcmp(name, "intents"))
        k->has_intents = true;
    else if (!strcmp(name, "done"))
        k->has_done = true;
    else if (gc_sweep_parse(name, &exp) == 0 && exp > k->sweep_expires)
        k->sweep_expires = exp;
    char(*p)[NAME_MAX_LEN] = realloc(k->names, (k->nnames + 1) * sizeof(*p));
    if (!p)
        return -ENOMEM;
    k->names = p;
    snprintf(p[k->nnames++], NAME_MAX_LEN, "%s", name);
    return 0;
}

static int mk_cmp(const void *a, const void *b)
{
    return strcmp(((const struct gc_mk *)a)->mark, ((const struct gc_mk *)b)->mark);
}

static int gc_list_read(struct region *rg, const char *only, struct gc_list *l)
{
    char prefix[REGION_KEY_MAX];
    memset(l, 0, sizeof(*l));
    l->only = only;
    int e = layout_prefix(LAYOUT_GC, only, prefix);
    if (e == 0)
        e = region_list(rg, prefix, gc_list_cb, l);
    if (e == -ENOENT)
        e = 0;
    if (e < 0)
        gc_list_free(l);
    else if (l->n > 1)
        qsort(l->v, l->n, sizeof(*l->v), mk_cmp);
    return e;
}

/* ---- writers ------------------------------------------------------------ */

void gc_cache_free(struct gc_cache *c)
{
    for (size_t i = 0; i < c->n; i++)
        gcrec_free(&c->marks[i]);
    free(c->marks);
    c->marks = NULL;
    c->n = 0;
}

int gc_intent_begin(struct region *rg, const struct config *conf, struct gc_intent *in)
{
    char key[REGION_KEY_MAX];
    struct gcrec g;
    rec_fill(&g, GC_INTENT, NULL);
    g.seq = (int64_t)getpid();
    g.expires = g.time + (int64_t)conf->intent_ttl;
    in->ttl = conf->intent_ttl;
    in->wall0 = g.time;
    int e = gc_intent_make(g.time, conf->intent_ttl, in->name);
    if (e < 0)
        return e;
    in->t0 = boottime();
    intent_key(in->name, key);
    if ((e = put_rec(rg, key, &g, false)) < 0)
        in->name[0] = 0;
    /* A put fails with -ENOENT only when the region itself is gone (a dir
     * region's folder): a region failure, not "no such object" — callers
     * read -ENOENT as "the snapshot is gone". */
    return e == -ENOENT ? -EIO : e;
}

void gc_intent_end(struct region *rg, struct gc_intent *in)
{
    char key[REGION_KEY_MAX];
    if (!in->name[0])
        return;
    intent_key(in->name, key);
    int e = region_del(rg, key);
    if (e < 0 && e != -ENOENT)
        log_warn("%s (prune waits for it to expire)", region_last_error(rg));
    in->name[0] = 0;
}

bool gc_intent_fresh(const struct gc_intent *in)
{
    double age = boottime() - in->t0, wall = (double)(now() - in->wall0);
    return in->name[0] && (wall > age ? wall : age) < (double)in->ttl / 2;
}

/* Test hook: CKPTSYNC_TEST_PRUNE_STOP_AFTER=N stops the process
 * (SIGSTOP) once a sweep has deleted N chunk objects, so that a test can
 * kill -9 a prune mid-way at a known point. */
static void test_stop_after_deletes(void)
{
    static unsigned long n;
    const char *v = getenv("CKPTSYNC_TEST_PRUNE_STOP_AFTER");
    if (v && ++n == strtoul(v, NULL, 10))
        raise(SIGSTOP);
}

/* The test hook of gc.h: stop here until continued. */
static void test_stop_before_publish(void)
{
    const char *v = getenv("CKPTSYNC_TEST_STOP_BEFORE_PUBLISH");
    if (v && !strcmp(v, "1"))
        raise(SIGSTOP);
}

bool gc_intent_publishable(const struct gc_intent *in)
{
    test_stop_before_publish();
    return gc_intent_fresh(in);
}

static const struct gcrec *cache_mark(struct region *rg, struct gc_cache *c, const char *mark,
                                      int *ret)
{
    char key[REGION_KEY_MAX];
    struct gcrec g;
    *ret = 0;
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->marks[i].mark, mark))
            return &c->marks[i];
    gc_key(mark, "mark", key);
    int e = get_rec(rg, key, &g);
    if (e == 0 && (g.kind != GC_MARK || strcmp(g.mark, mark)))
        e = CKS_E_FORMAT;
    struct gcrec *p = e == 0 ? realloc(c->marks, (c->n + 1) * sizeof(*p)) : NULL;
    if (!p) {
        gcrec_free(&g);
        *ret = e == 0 ? -ENOMEM : e;
        return NULL;
    }
    c->marks = p;
    p[c->n] = g;
    return &p[c->n++];
}

/* A writer's item against a mark's candidate, in the one order both are
 * sorted by (gcrec_chunk_cmp, presence_item_cmp). */
static int item_cand_cmp(const struct presence_item *a, const struct gc_chunk *b)
{
    struct gc_chunk k = {.recipe = a->recipe != 0};
    memcpy(k.id, a->id, HASH_LEN);
    if (a->recipe)
        memcpy(k.sig, a->sig, MANIFEST_RECIPE_SIG);
    return gcrec_chunk_cmp(&k, b);
}

int gc_writer_check(struct region *rg, struct gc_cache *cache, const struct config *conf,
                    const struct presence_item *items, size_t n, const char *run, const char *id,
                    uint8_t *recheck, char ret_waiting[GC_MARK_LEN + 1])
{
    struct gc_list l;
    int e = gc_list_read(rg, NULL, &l);
    for (size_t k = 0; e == 0 && k < l.n; k++) {
        struct gc_mk *mk = &l.v[k];
        if (!mk->has_mark)
            continue;
        const struct gcrec *m = cache_mark(rg, cache, mk->mark, &e);
        if (!m) {
            if (e == -ENOENT) /* cleaned up since the listing */
                e = 0;
            continue;
        }
        /* K: the snapshot's objects among the candidates (both sorted) */
        struct gcrec keep;
        rec_fill(&keep, GC_KEEP, mk->mark);
        snprintf(keep.snap.run, sizeof(keep.snap.run), "%s", run);
        snprintf(keep.snap.id, sizeof(keep.snap.id), "%s", id);
        size_t a = 0, b = 0;
        while (e == 0 && a < n && b < m->nchunks) {
            int c = item_cand_cmp(&items[a], &m->chunks[b]);
            if (c == 0)
                e = items[a].recipe ? gcrec_add_recipe(&keep, items[a].id, items[a].sig, 0)
                                    : gcrec_add_chunk(&keep, items[a].id, 0);
            a += c <= 0;
            b += c >= 0;
        }
        bool done = mk->has_done;
        if (e == 0 && keep.nchunks && !done) {
            char key[REGION_KEY_MAX], hex[17];
            struct gc_list again;
            char name[32];
            if ((e = gc_random_hex(hex)) == 0) {
                snprintf(name, sizeof(name), "keep.%s", hex);
                gc_key(mk->mark, name, key);
                e = put_rec(rg, key, &keep, false);
            }
            if (e == 0 && (e = gc_list_read(rg, mk->mark, &again)) == 0) {
                const struct gc_mk *now_mk = again.n ? &again.v[0] : NULL;
                done = now_mk && now_mk->has_done;
                if (!done && now_mk && now_mk->sweep_expires >= 0) {
                    if (now() <= now_mk->sweep_expires + (int64_t)conf->clock_skew) {
                        snprintf(ret_waiting, GC_MARK_LEN + 1, "%s", mk->mark);
                        e = -EAGAIN;
                    } else {
                        done = true; /* the sweeper died: what it deleted is confirmed again */
                    }
                }
                gc_list_free(&again);
            }
        }
        if (e == 0 && done && keep.nchunks) {
            for (size_t i = 0, j = 0; i < n && j < keep.nchunks;) {
                int c = item_cand_cmp(&items[i], &keep.chunks[j]);
                if (c == 0)
                    recheck[i] = 1;
                i += c <= 0;
                j += c >= 0;
            }
        }
        gcrec_free(&keep);
    }
    gc_list_free(&l);
    return e;
}

/* ---- prune: references -------------------------------------------------- */

struct snaplist {
    struct gc_snapref *v;
    size_t n, cap;
    const char *top; /* "snapshots/" or "forget/" */
};

static int snapref_cmp(const void *a, const void *b)
{
    const struct gc_snapref *x = a, *y = b;
    int c = strcmp(x->run, y->run);
    return c ? c : strcmp(x->id, y->id);
}

/* Copies src into dst[cap], cut at cap - 1 bytes (as snprintf would). */
static void copy_cut(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int snaplist_add(struct snaplist *l, const char *run, const char *id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct gc_snapref *p = realloc(l->v, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->v = p;
        l->cap = cap;
    }
    copy_cut(l->v[l->n].run, sizeof(l->v[0].run), run);
    copy_cut(l->v[l->n++].id, sizeof(l->v[0].id), id);
    return 0;
}

static void snaplist_sort(struct snaplist *l)
{
    size_t out = 0;
    if (l->n > 1)
        qsort(l->v, l->n, sizeof(*l->v), snapref_cmp);
    for (size_t i = 0; i < l->n; i++)
        if (!out || snapref_cmp(&l->v[out - 1], &l->v[i]))
            l->v[out++] = l->v[i];
    l->n = out;
}

static bool snaplist_has(const struct snaplist *l, const char *run, const char *id)
{
    struct gc_snapref k;
    snprintf(k.run, sizeof(k.run), "%s", run);
    snprintf(k.id, sizeof(k.id), "%s", id);
    return l->n && bsearch(&k, l->v, l->n, sizeof(k), snapref_cmp);
}

struct committed_ctx {
    const char *id;
    bool found;
};

static int committed_cb(void *ud, const char *key, uint64_t size)
{
    struct committed_ctx *c = ud;
    struct lineage_rec rec;
    (void)size;
    if (layout_record_parse(key, &rec) == 0 && rec.kind == LINEAGE_COMMIT && !strcmp(rec.id, c->id))
        c->found = true;
    return c->found ? 1 : 0;
}

/* 1 when some healthy region holds a commit record of the snapshot, 0
 * when none does, <0 when a listing failed. */
static int pr_committed(struct repo *r, const char *run, const char *id)
{
    char prefix[REGION_KEY_MAX];
    struct committed_ctx c = {.id = id};
    if (layout_prefix(LAYOUT_COMMIT, run, prefix) < 0)
        return 0; /* no key names such a run */
    for (size_t i = 0; i < repo_nregions(r) && !c.found; i++) {
        if (repo_region_error(r, i))
            continue;
        int e = region_list(repo_region(r, i), prefix, committed_cb, &c);
        if (e < 0 && e != -ENOENT)
            return e;
    }
    return c.found ? 1 : 0;
}

static int manifests_cb(void *ud, const char *key, uint64_t size)
{
    struct snaplist *l = ud;
    struct layout_key k;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_SNAPSHOT)
        return 0;
    return snaplist_add(l, k.dir, k.name);
}

static int forgets_cb(void *ud, const char *key, uint64_t size)
{
    struct snaplist *l = ud;
    struct lineage_rec rec;
    (void)size;
    if (layout_record_parse(key, &rec) < 0 || rec.kind != LINEAGE_FORGET)
        return 0;
    return snaplist_add(l, rec.run, rec.id);
}

/* A recipe object's key: recipes/<id>.<sig>. */
struct rref {
    uint8_t id[HASH_LEN];
    uint8_t sig[MANIFEST_RECIPE_SIG];
};

struct pr {
    struct repo *r;
    const struct gc_opts *o;
    struct gc_result *res;
    struct buf *err;
    int64_t grace;
    uint8_t (*refs)[HASH_LEN]; /* chunks/ objects named, sorted */
    size_t nrefs, refcap;
    struct rref *rrefs; /* recipes/ objects named, sorted */
    size_t nrrefs, rrefcap;
    struct snaplist seen;   /* manifests read, sorted */
    struct snaplist forgot; /* forgotten snapshots, sorted */
    /* lease */
    bool leased;
    int64_t lease_n, lease_expires;
};

static int id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, HASH_LEN);
}

static int rref_cmp(const void *a, const void *b)
{
    return memcmp(a, b, sizeof(struct rref));
}

static bool pr_referenced(const struct pr *p, const uint8_t id[HASH_LEN])
{
    return p->nrefs && bsearch(id, p->refs, p->nrefs, HASH_LEN, id_cmp);
}

/* Is the object (a chunk, or the recipe recipes/<id>.<sig>) named by a
 * manifest read? */
static bool pr_referenced_obj(const struct pr *p, const struct gc_chunk *c)
{
    struct rref k;
    if (!c->recipe)
        return pr_referenced(p, c->id);
    memcpy(k.id, c->id, HASH_LEN);
    memcpy(k.sig, c->sig, MANIFEST_RECIPE_SIG);
    return p->nrrefs && bsearch(&k, p->rrefs, p->nrrefs, sizeof(k), rref_cmp);
}

static int pr_add_ref(void *arg, const uint8_t id[HASH_LEN], uint32_t len, bool recipe,
                      const uint8_t sig[MANIFEST_RECIPE_SIG])
{
    struct pr *p = arg;
    (void)len;
    if (!recipe && p->nrefs == p->refcap) {
        size_t cap = p->refcap ? p->refcap * 2 : 1024;
        uint8_t(*v)[HASH_LEN] = realloc(p->refs, cap * HASH_LEN);
        if (!v)
            return -ENOMEM;
        p->refs = v;
        p->refcap = cap;
    } else if (recipe && p->nrrefs == p->rrefcap) {
        size_t cap = p->rrefcap ? p->rrefcap * 2 : 64;
        struct rref *v = realloc(p->rrefs, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        p->rrefs = v;
        p->rrefcap = cap;
    }
    if (!recipe) {
        memcpy(p->refs[p->nrefs++], id, HASH_LEN);
        return 0;
    }
    memcpy(p->rrefs[p->nrrefs].id, id, HASH_LEN);
    memcpy(p->rrefs[p->nrrefs++].sig, sig, MANIFEST_RECIPE_SIG);
    return 0;
}

/* A manifest's references: every object it needs (manifest_each_object):
 * its plain file chunks and (version 6) its k lines under chunks/, its
 * recipes under recipes/ (docs/deltas.md). */
static int pr_add_refs(struct pr *p, const struct manifest *m)
{
    return manifest_each_object(m, pr_add_ref, p);
}

static void pr_sort_refs(struct pr *p)
{
    size_t out = 0;
    if (p->nrefs > 1)
        qsort(p->refs, p->nrefs, HASH_LEN, id_cmp);
    for (size_t i = 0; i < p->nrefs; i++)
        if (!out || memcmp(p->refs[out - 1], p->refs[i], HASH_LEN))
            memmove(p->refs[out++], p->refs[i], HASH_LEN);
    p->nrefs = out;
    out = 0;
    if (p->nrrefs > 1)
        qsort(p->rrefs, p->nrrefs, sizeof(*p->rrefs), rref_cmp);
    for (size_t i = 0; i < p->nrrefs; i++)
        if (!out || rref_cmp(&p->rrefs[out - 1], &p->rrefs[i]))
            p->rrefs[out++] = p->rrefs[i];
    p->nrrefs = out;
}

/* Lists every healthy region's manifests and forget records and reads the
 * manifests not read yet: after it, refs names every chunk a retained
 * manifest listed anywhere names. */
static int pr_collect_manifests(struct pr *p)
{
    struct snaplist all = {0}, forgot = {0};
    char snaps[REGION_KEY_MAX], forgets[REGION_KEY_MAX];
    int e = 0;
    layout_prefix(LAYOUT_SNAPSHOT, NULL, snaps);
    layout_prefix(LAYOUT_FORGET, NULL, forgets);
    for (size_t i = 0; i < repo_nregions(p->r) && e == 0; i++) {
        if (repo_region_error(p->r, i))
            continue;
        e = region_list(repo_region(p->r, i), snaps, manifests_cb, &all);
        if (e == 0 || e == -ENOENT)
            e = region_list(repo_region(p->r, i), forgets, forgets_cb, &forgot);
        if (e == -ENOENT)
            e = 0;
        if (e < 0 && e != -ENOMEM) {
            buf_printf(p->err, "%s; prune needs every healthy region's listing",
                       region_last_error(repo_region(p->r, i)));
        }
    }
    snaplist_sort(&all);
    snaplist_sort(&forgot);
    size_t fresh = 0;
    for (size_t k = 0; e == 0 && k < all.n; k++)
        if (!snaplist_has(&forgot, all.v[k].run, all.v[k].id) &&
            !snaplist_has(&p->seen, all.v[k].run, all.v[k].id))
            fresh++;
    for (size_t k = 0, done = 0; e == 0 && k < all.n; k++) {
        const struct gc_snapref *s = &all.v[k];
        struct manifest m;
        struct buf ferr = BUF_INIT;
        if (snaplist_has(&forgot, s->run, s->id) || snaplist_has(&p->seen, s->run, s->id))
            continue;
        e = catalog_find(p->r, s->run, s->id, &m, NULL, &ferr);
        /* Unreadable everywhere and committed nowhere: a publish cut short
         * (a writer killed mid-PUT on a store whose PUTs are not atomic
         * leaves a partial object).  It is no reference: were the writer
         * alive, it holds an intent (no sweep runs past it), confirms its
         * chunks again and rewrites the manifest before its commit record,
         * and the sweep re-reads manifests after its sweep record. */
        if (e < 0 && e != -ENOMEM && pr_committed(p->r, s->run, s->id) == 0) {
            log_warn("prune: snapshot %s of run '%s' has no valid manifest and no commit record in "
                     "any region (a publish cut short); it references nothing: %s",
                     s->id, s->run, buf_str(&ferr));
            p->res->uncommitted++;
            e = 0;
        } else if (e < 0) {
            buf_printf(p->err,
                       "%s; prune stops, as it cannot tell which chunks that snapshot needs "
                       "(`ckptsync verify --repair` may restore it from another region; "
                       "`ckptsync forget` removes it)",
                       buf_str(&ferr));
        } else {
            e = pr_add_refs(p, &m);
            manifest_free(&m);
            if (e == 0)
                e = snaplist_add(&p->seen, s->run, s->id);
            p->res->manifests++;
        }
        buf_free(&ferr);
        if (p->o->progress)
            p->o->progress(p->o->progress_ud, "reading manifests", ++done, fresh);
        if (e == 0)
            snaplist_sort(&p->seen); /* small: kept sorted for snaplist_has */
    }
    if (e == 0) {
        pr_sort_refs(p);
        free(p->forgot.v);
        p->forgot = forgot;
        forgot.v = NULL;
        p->res->referenced = p->nrefs + p->nrrefs;
        p->res->forgotten = p->forgot.n;
    }
    free(all.v);
    free(forgot.v);
    return e;
}

static int pr_part_cb(void *ud, const struct manifest *m)
{
    return pr_add_refs(ud, m);
}

/* Every retained manifest's chunks, and the chunks of every part of a
 * multi-node step no region has committed yet (service/multinode.h: the
 * commit records are listed before the manifests). */
static int pr_collect(struct pr *p)
{
    struct multinode_roots roots = {0};
    int e = multinode_roots_begin(p->r, &roots);
    if (e < 0)
        buf_printf(p->err, "listing commit records: %s; prune needs every healthy region's listing",
                   err_str(e));
    if (e == 0)
        e = pr_collect_manifests(p);
    if (e == 0 && (e = multinode_roots_read(p->r, &roots, pr_part_cb, p, p->err)) < 0)
        buf_printf(p->err, "; prune stops, as it cannot tell which chunks that multi-node step's "
                           "part needs");
    if (e == 0) {
        pr_sort_refs(p);
        p->res->referenced = p->nrefs + p->nrrefs;
    }
    multinode_roots_free(&roots);
    return e;
}

/* ---- prune: the clocks -------------------------------------------------- */

static void utc_text(double t, char out[32])
{
    struct tm tm;
    time_t s = (time_t)t;
    if (gmtime_r(&s, &tm))
        strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else
        snprintf(out, 32, "%.0f", t);
}

/* Compares this host's clock with region i's (region_clock); 0 when they
 * agree within clock_skew (as far as the measurement can tell), else
 * CKS_E_CLOCK or the region's error, said in p->err and the region's
 * result. */
static int pr_clock_region(struct pr *p, size_t i)
{
    struct region *rg = repo_region(p->r, i);
    struct gc_region_result *rr = &p->res->region[i];
    struct region_clock c;
    uint64_t skew = repo_conf(p->r)->clock_skew;
    char mine[32], theirs[32];
    int e = region_clock(rg, &c);
    if (e == 0) {
        double off = c.store - c.local, apart = off < 0 ? -off : off;
        if (apart - c.error <= (double)skew)
            return 0;
        utc_text(c.local, mine);
        utc_text(c.store, theirs);
        snprintf(rr->msg, sizeof(rr->msg),
                 "region '%s': this host's clock reads %s and the store's %s: this host is %.0f s "
                 "%s (+-%.2f s), more than [prune] clock_skew (%llu s)",
                 rg->conf.name, mine, theirs, apart, off < 0 ? "ahead" : "behind", c.error,
                 (unsigned long long)skew);
        e = CKS_E_CLOCK;
    } else {
        snprintf(rr->msg, sizeof(rr->msg), "%s", region_last_error(rg));
    }
    rr->err = e;
    rr->state = "skipped";
    buf_printf(p->err, "%s%s", buf_str(p->err)[0] ? "; " : "", rr->msg);
    return e;
}

/* The README's "clocks must agree within clock_skew", checked: prune
 * expires other hosts' intents (and leases, sweeps, forget records) by
 * this host's clock, and a clock running ahead would expire an intent a
 * writer still publishes under.  Before anything is read or written, every
 * healthy region's clock is compared with ours; one that disagrees, or
 * cannot be read, stops the prune. */
static int pr_clocks(struct pr *p)
{
    int first = 0;
    bool skewed = false;
    REPO_FOR_HEALTHY(p->r, i) {
        int e = pr_clock_region(p, i);
        if (e < 0 && !first)
            first = e;
        skewed |= e == CKS_E_CLOCK;
    }
    if (skewed)
        buf_printf(p->err, "; prune expires other hosts' intents by this host's clock, so it "
                           "stops before deleting anything: correct the clock (NTP) of this host "
                           "or of the store");
    return skewed ? CKS_E_CLOCK : first;
}

/* ---- prune: the lease --------------------------------------------------- */

struct lease_scan {
    int64_t top;
    char top_key[REGION_KEY_MAX];
    int64_t olds[64];
    size_t nolds;
};

static int lease_cb(void *ud, const char *key, uint64_t size)
{
    struct lease_scan *s = ud;
    struct layout_key k;
    const char *n = k.name;
    int64_t v = 0;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_LEASE || strlen(n) != 12)
        return 0;
    for (int i = 0; i < 12; i++) {
        if (n[i] < '0' || n[i] > '9')
            return 0;
        v = v * 10 + (n[i] - '0');
    }
    if (s->top >= 0 && s->nolds < 64)
        s->olds[s->nolds++] = v < s->top ? v : s->top;
    if (v > s->top) {
        s->top = v;
        snprintf(s->top_key, sizeof(s->top_key), "%s", key);
    }
    return 0;
}

/* Writes lease number n (create-only where the store enforces it). */
static int lease_write(struct pr *p, int64_t n, bool release)
{
    struct region *rg = repo_region(p->r, 0);
    char key[REGION_KEY_MAX];
    struct gcrec g, back;
    rec_fill(&g, GC_LEASE, NULL);
    g.seq = (int64_t)getpid();
    g.expires = release ? -1 : g.time + (int64_t)repo_conf(p->r)->prune_lease;
    lease_key(n, key);
    bool strict = region_preconditions(rg) == 1;
    int e = put_rec(rg, key, &g, strict);
    if (e == 0 && !strict) {
        /* No create-only put: the last writer wins; read back after a
         * moment to see whether that is us (best effort, see gc.h). */
        sleep(1);
        if ((e = get_rec(rg, key, &back)) == 0 &&
            (back.seq != g.seq || back.time != g.time || strcmp(back.host, g.host)))
            e = -EEXIST;
        gcrec_free(&back);
    }
    if (e == 0) {
        p->lease_n = n;
        p->lease_expires = g.expires;
    }
    return e;
}

static int lease_acquire(struct pr *p)
{
    struct region *rg = repo_region(p->r, 0);
    struct lease_scan s = {.top = -1};
    struct gcrec cur;
    if (repo_region_error(p->r, 0)) {
        buf_printf(p->err, "region '%s' holds the prune lease and is unreachable: %s",
                   rg->conf.name, err_str(repo_region_error(p->r, 0)));
        return repo_region_error(p->r, 0);
    }
    char prefix[REGION_KEY_MAX];
    layout_prefix(LAYOUT_LEASE, NULL, prefix);
    int e = region_list(rg, prefix, lease_cb, &s);
    if (e < 0 && e != -ENOENT) {
        buf_printf(p->err, "%s", region_last_error(rg));
        return e;
    }
    if (s.top >= 0) {
        if ((e = get_rec(rg, s.top_key, &cur)) < 0 && e != CKS_E_FORMAT && e != -ENOENT) {
            buf_printf(p->err, "%s", region_last_error(rg));
            gcrec_free(&cur);
            return e;
        }
        uint64_t skew = repo_conf(p->r)->clock_skew;
        bool gone = e == 0 && cur.expires >= 0 && gc_owner_dead(&cur, skew);
        bool held = e == 0 && cur.expires >= 0 && now() <= cur.expires + (int64_t)skew && !gone;
        if (held) {
            snprintf(p->res->lease_holder, sizeof(p->res->lease_holder),
                     "host %s (pid %lld) since %lld, lease until %lld", cur.host,
                     (long long)cur.seq, (long long)cur.time, (long long)cur.expires);
            gcrec_free(&cur);
            buf_printf(p->err, "another prune holds the lease in region '%s': %s", rg->conf.name,
                       p->res->lease_holder);
            return CKS_E_BUSY;
        }
        if (e == 0 && cur.expires >= 0)
            log_info("taking over the prune lease of host %s (pid %lld): %s", cur.host,
                     (long long)cur.seq, gone ? "that process is gone" : "it expired");
        gcrec_free(&cur);
    }
    e = lease_write(p, s.top + 1, false);
    if (e == -EEXIST) {
        buf_printf(p->err, "another prune took the lease in region '%s' just now", rg->conf.name);
        return CKS_E_BUSY;
    }
    if (e < 0) {
        buf_printf(p->err, "%s", region_last_error(rg));
        return e;
    }
    p->leased = true;
    for (size_t i = 0; i < s.nolds; i++) { /* the numbers before ours are history */
        char key[REGION_KEY_MAX];
        lease_key(s.olds[i], key);
        if (s.olds[i] < s.top)
            region_del(rg, key);
    }
    return 0;
}

/* Renews the lease when half of it is used; CKS_E_BUSY when it was lost. */
static int lease_renew(struct pr *p)
{
    if (!p->leased || now() < p->lease_expires - (int64_t)repo_conf(p->r)->prune_lease / 2)
        return 0;
    int e = lease_write(p, p->lease_n + 1, false);
    if (e == -EEXIST) {
        p->leased = false;
        buf_printf(p->err, "the prune lease was taken over by another instance; stopping");
        return CKS_E_BUSY;
    }
    return e;
}

static void lease_release(struct pr *p)
{
    if (p->leased && lease_write(p, p->lease_n + 1, true) < 0)
        log_warn("releasing the prune lease: %s (it expires by itself)",
                 region_last_error(repo_region(p->r, 0)));
    p->leased = false;
}

/* ---- prune: one region -------------------------------------------------- */

struct intents {
    char (*v)[GC_INTENT_MAX + 1];
    size_t n;
};

static int intents_cb(void *ud, const char *key, uint64_t size)
{
    struct intents *l = ud;
    struct layout_key k;
    int64_t t;
    uint64_t ttl;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_INTENT ||
        gc_intent_parse(k.name, &t, &ttl) < 0)
        return 0;
    char(*p)[GC_INTENT_MAX + 1] = realloc(l->v, (l->n + 1) * sizeof(*p));
    if (!p)
        return -ENOMEM;
    l->v = p;
    snprintf(p[l->n++], GC_INTENT_MAX + 1, "%.*s", GC_INTENT_MAX, k.name); /* checked: fits */
    return 0;
}

static int intents_list(struct region *rg, struct intents *l)
{
    char prefix[REGION_KEY_MAX];
    memset(l, 0, sizeof(*l));
    layout_prefix(LAYOUT_INTENT, NULL, prefix);
    int e = region_list(rg, prefix, intents_cb, l);
    return e == -ENOENT ? 0 : e;
}

/* Is the intent (named in a mark's record) still one a writer may
 * publish under?  Gone from the listing, expired, or written by a process
 * of this host that is no longer running: no. */
static bool intent_alive(struct pr *p, struct region *rg, const struct intents *listed,
                         const char *name)
{
    int64_t t;
    uint64_t ttl;
    bool there = false;
    for (size_t i = 0; i < listed->n && !there; i++)
        there = !strcmp(listed->v[i], name);
    if (!there || gc_intent_parse(name, &t, &ttl) < 0)
        return false;
    if (now() > t + (int64_t)ttl + (int64_t)repo_conf(p->r)->clock_skew)
        return false;
    char key[REGION_KEY_MAX];
    struct gcrec g;
    intent_key(name, key);
    bool dead = get_rec(rg, key, &g) == 0 && g.kind == GC_INTENT &&
                gc_owner_dead(&g, repo_conf(p->r)->clock_skew);
    gcrec_free(&g);
    if (dead && !p->o->dry_run && region_del(rg, key) == 0)
        log_info("region '%s': removed intent %s of a process that is gone", rg->conf.name, name);
    return !dead;
}

/* How many of rec's intents are alive; the first one's name in what. */
static size_t intents_alive(struct pr *p, struct region *rg, const struct gcrec *rec, char *what,
                            size_t cap)
{
    struct intents now_listed;
    size_t alive = 0;
    if (intents_list(rg, &now_listed) < 0) {
        snprintf(what, cap, "the intents could not be listed");
        return 1;
    }
    for (size_t i = 0; i < rec->nintents; i++)
        if (intent_alive(p, rg, &now_listed, rec->intents[i]) && alive++ == 0)
            snprintf(what, cap, "writer intent %s", rec->intents[i]);
    free(now_listed.v);
    return alive;
}

/* Intents no writer publishes under any more — expired, or of a process
 * of this host that is gone (killed, crashed) — are deleted, so that
 * intents/ does not grow with every crash.  Errors are left for next time. */
static void intents_reap(struct pr *p, struct region *rg)
{
    struct intents l;
    if (p->o->dry_run || intents_list(rg, &l) < 0)
        return;
    for (size_t k = 0; k < l.n; k++) {
        int64_t t;
        uint64_t ttl;
        char key[REGION_KEY_MAX];
        intent_key(l.v[k], key);
        if (gc_intent_parse(l.v[k], &t, &ttl) == 0 &&
            now() > t + (int64_t)ttl + (int64_t)repo_conf(p->r)->clock_skew)
            region_del(rg, key);
        else
            (void)intent_alive(p, rg, &l, l.v[k]); /* deletes a dead process's */
    }
    free(l.v);
}

static int write_intents_rec(struct region *rg, const char *mark, enum gc_kind kind)
{
    char key[REGION_KEY_MAX];
    struct intents l;
    struct gcrec g;
    int e = intents_list(rg, &l);
    rec_fill(&g, kind, mark);
    for (size_t i = 0; e == 0 && i < l.n; i++)
        e = gcrec_add_intent(&g, l.v[i]);
    gc_key(mark, kind == GC_DONE ? "done" : "intents", key);
    if (e == 0)
        e = put_rec(rg, key, &g, false);
    gcrec_free(&g);
    free(l.v);
    return e;
}

static int del_counted(struct pr *p, size_t i, const char *key, uint64_t *counter)
{
    if (p->o->dry_run) {
        (*counter)++;
        return 0;
    }
    int e = region_del(repo_region(p->r, i), key);
    if (e == 0)
        (*counter)++;
    return e == -ENOENT ? 0 : e;
}

/* Removes gc/<mark>/: the mark record first, so that a crash half-way
 * leaves objects the next prune recognises as orphans. */
static int mark_cleanup(struct pr *p, size_t i, const struct gc_mk *mk)
{
    struct gc_region_result *rr = &p->res->region[i];
    char key[REGION_KEY_MAX];
    int e = 0;
    if (mk->has_mark) {
        gc_key(mk->mark, "mark", key);
        e = del_counted(p, i, key, &rr->records_deleted);
    }
    for (size_t k = 0; e == 0 && k < mk->nnames; k++) {
        if (!strcmp(mk->names[k], "mark"))
            continue;
        gc_key(mk->mark, mk->names[k], key);
        e = del_counted(p, i, key, &rr->records_deleted);
    }
    return e;
}

/* Clears region slot's presence bit for the deleted objects: a chunk's
 * (index_chunk), a recipe's (store/recidx). */
static int index_forget(struct pr *p, size_t i, const struct gc_chunk **objs, size_t n)
{
    struct index_txn *t = NULL;
    uint32_t bit = 1u << repo_region(p->r, i)->slot;
    int e = n ? index_txn_begin(repo_index(p->r), true, &t) : 0;
    for (size_t k = 0; n && e == 0 && k < n; k++) {
        struct index_chunk c;
        if (objs[k]->recipe) { /* a damaged record is fsck's to name */
            if ((e = recidx_presence(t, objs[k]->id, objs[k]->sig, 0, bit)) == CKS_E_FORMAT)
                e = 0;
            continue;
        }
        int g = index_chunk_get(t, objs[k]->id, &c);
        if (g == 0 && (c.presence & bit)) {
            c.presence &= ~bit;
            e = index_chunk_put(t, objs[k]->id, &c);
        } else if (g < 0 && g != -ENOENT) {
            e = g;
        }
    }
    if (n && e == 0)
        return index_txn_commit(t);
    if (n)
        index_txn_abort(t);
    return e;
}

static int sweep_record(struct pr *p, struct region *rg, const char *mark, int64_t *ret_expires)
{
    char key[REGION_KEY_MAX], hex[17], name[64];
    struct gcrec g;
    rec_fill(&g, GC_SWEEP, mark);
    g.expires = g.time + (int64_t)repo_conf(p->r)->prune_lease;
    int e = gc_random_hex(hex);
    snprintf(name, sizeof(name), "sweep.%lld.%s", (long long)g.expires, hex);
    gc_key(mark, name, key);
    if (e == 0 && (e = put_rec(rg, key, &g, false)) == 0)
        *ret_expires = g.expires;
    return e;
}

/* S2's keep records: adds the chunks every gc/<mark>/keep.* names to
 * *kept (a writer active at the mark names there what it published) and
 * sorts them.  A keep record that cannot be read could name anything, so
 * the sweep stops: an error. */
static int sweep_kept(struct region *rg, const char *mark, struct gcrec *kept)
{
    char key[REGION_KEY_MAX];
    struct gc_list l = {0};
    int e = gc_list_read(rg, mark, &l);
    for (size_t k = 0; e == 0 && l.n && k < l.v[0].nnames; k++) {
        struct gcrec g;
        if (strncmp(l.v[0].names[k], "keep.", 5))
            continue;
        gc_key(mark, l.v[0].names[k], key);
        int ge = get_rec(rg, key, &g);
        if (ge == 0 && g.kind == GC_KEEP) {
            for (size_t c = 0; e == 0 && c < g.nchunks; c++)
                e = g.chunks[c].recipe ? gcrec_add_recipe(kept, g.chunks[c].id, g.chunks[c].sig, 0)
                                       : gcrec_add_chunk(kept, g.chunks[c].id, 0);
        } else if (ge != -ENOENT) {
            /* a keep we cannot read could name anything: keep everything */
            log_warn("%s; the sweep of mark %s stops", region_last_error(rg), mark);
            e = ge < 0 ? ge : CKS_E_FORMAT;
        }
        gcrec_free(&g);
    }
    gcrec_sort_chunks(kept);
    gc_list_free(&l);
    return e;
}

/* chunks/<id>, or recipes/<id>.<sig> for a recipe candidate. */
static void cand_key(const struct gc_chunk *c, char *key)
{
    if (c->recipe)
        layout_recipe(c->id, c->sig, key);
    else
        layout_chunk(c->id, key);
}

/* S1-S3 of one mark (gc.h). */
static int mark_sweep(struct pr *p, size_t i, const struct gc_mk *mk)
{
    struct region *rg = repo_region(p->r, i);
    struct gc_region_result *rr = &p->res->region[i];
    char key[REGION_KEY_MAX];
    struct gcrec m, kept;
    int64_t expires = 0;
    const struct gc_chunk **batch = NULL; /* deleted: into m.chunks */
    size_t nbatch = 0;

    gcrec_init(&kept, GC_KEEP);
    gc_key(mk->mark, "mark", key);
    int e = get_rec(rg, key, &m);
    if (e == 0 && (m.kind != GC_MARK || strcmp(m.mark, mk->mark)))
        e = CKS_E_FORMAT;
    if (e == 0)
        e = sweep_record(p, rg, mk->mark, &expires);
    if (e == 0)
        e = pr_collect(p); /* manifests published since: after the sweep record */
    if (e == 0)
        e = sweep_kept(rg, mk->mark, &kept);
    if (e == 0)
        batch = malloc(INDEX_BATCH * sizeof(*batch));
    if (e == 0 && !batch)
        e = -ENOMEM;
    for (size_t c = 0; e == 0 && c < m.nchunks; c++) {
        const struct gc_chunk *ch = &m.chunks[c];
        if (pr_referenced_obj(p, ch) || gcrec_has_object(&kept, ch->id, ch->recipe, ch->sig)) {
            rr->kept++;
            continue;
        }
        /* stop deleting well before writers may think the sweep dead */
        if (now() >= expires - (int64_t)repo_conf(p->r)->prune_lease / 2 &&
            ((e = sweep_record(p, rg, mk->mark, &expires)) < 0 || (e = lease_renew(p)) < 0))
            break;
        cand_key(ch, key);
        if ((e = region_del(rg, key)) == 0 || e == -ENOENT) {
            rr->deleted++;
            rr->deleted_bytes += ch->size;
            batch[nbatch++] = ch;
            e = 0;
            test_stop_after_deletes();
        }
        if (e == 0 && nbatch == INDEX_BATCH) {
            e = index_forget(p, i, batch, nbatch);
            nbatch = 0;
        }
        if (p->o->progress && (c % 256 == 0 || c + 1 == m.nchunks))
            p->o->progress(p->o->progress_ud, "deleting chunks", c + 1, m.nchunks);
    }
    if (e == 0)
        e = index_forget(p, i, batch, nbatch);
    if (e == 0)
        e = write_intents_rec(rg, mk->mark, GC_DONE);
    if (e == 0) {
        rr->state = "swept";
        snprintf(rr->mark, sizeof(rr->mark), "%s", mk->mark);
    }
    free(batch);
    gcrec_free(&m);
    gcrec_free(&kept);
    return e;
}

/* S0: may mark mk be swept now?  Fills rr->waiting when not. */
static bool mark_ready(struct pr *p, size_t i, const struct gc_mk *mk)
{
    struct region *rg = repo_region(p->r, i);
    struct gc_region_result *rr = &p->res->region[i];
    char key[REGION_KEY_MAX];
    struct gcrec g;
    int64_t age = now() - gc_mark_time(mk->mark);
    if (age < p->grace) {
        snprintf(rr->waiting, sizeof(rr->waiting), "the grace period: %lld s more",
                 (long long)(p->grace - age));
        return false;
    }
    gc_key(mk->mark, "intents", key);
    if (get_rec(rg, key, &g) < 0 || g.kind != GC_INTENTS) {
        snprintf(rr->waiting, sizeof(rr->waiting), "%s", region_last_error(rg));
        gcrec_free(&g);
        return false;
    }
    char what[160] = "";
    size_t alive = intents_alive(p, rg, &g, what, sizeof(what));
    gcrec_free(&g);
    if (alive) {
        snprintf(rr->waiting, sizeof(rr->waiting),
                 "%zu writer(s) active when the mark was made (%s)", alive, what);
        return false;
    }
    return true;
}

static int mark_done_cleanup(struct pr *p, size_t i, const struct gc_mk *mk)
{
    struct region *rg = repo_region(p->r, i);
    char key[REGION_KEY_MAX], what[160];
    struct gcrec g;
    gc_key(mk->mark, "done", key);
    int e = get_rec(rg, key, &g);
    if (e == 0 && g.kind == GC_DONE && intents_alive(p, rg, &g, what, sizeof(what)) == 0)
        e = mark_cleanup(p, i, mk);
    else if (e == CKS_E_FORMAT || e == CKS_E_DIGEST || e == CKS_E_VERSION)
        e = 0; /* left alone: a writer treats the mark as done either way */
    gcrec_free(&g);
    return e;
}

/* chunks/xx/<hex> listed in the region and referenced by nothing. */
struct cand_ctx {
    struct pr *p;
    struct gcrec *m;
    struct gc_region_result *rr;
};

/* A listed chunks/ or recipes/ key no manifest read names: a candidate. */
static int chunks_cb(void *ud, const char *key, uint64_t size)
{
    struct cand_ctx *c = ud;
    struct layout_key k;
    struct gc_chunk cand = {0};
    if (layout_parse(key, &k) < 0 || (k.kind != LAYOUT_CHUNK && k.kind != LAYOUT_RECIPE))
        return 0;
    memcpy(cand.id, k.id, HASH_LEN);
    cand.recipe = k.kind == LAYOUT_RECIPE;
    if (cand.recipe)
        memcpy(cand.sig, k.sig, MANIFEST_RECIPE_SIG);
    c->rr->chunks++;
    c->rr->chunk_bytes += size;
    if (pr_referenced_obj(c->p, &cand) || c->m->nchunks >= GC_MAX_ITEMS)
        return 0;
    c->rr->marked++;
    c->rr->marked_bytes += size;
    return cand.recipe ? gcrec_add_recipe(c->m, cand.id, cand.sig, size)
                       : gcrec_add_chunk(c->m, cand.id, size);
}

/* P1-P2: a new mark; swept at once when it is ready (grace 0, no writer). */
static int mark_new(struct pr *p, size_t i)
{
    struct region *rg = repo_region(p->r, i);
    struct gc_region_result *rr = &p->res->region[i];
    char key[REGION_KEY_MAX];
    struct gcrec m;
    struct gc_mk mk = {0};
    rec_fill(&m, GC_MARK, NULL);
    struct cand_ctx c = {.p = p, .m = &m, .rr = rr};
    int e = gc_mark_make(m.mark);
    char prefix[REGION_KEY_MAX];
    layout_prefix(LAYOUT_CHUNK, NULL, prefix);
    if (e == 0)
        e = region_list(rg, prefix, chunks_cb, &c);
    if (e == 0 || e == -ENOENT) { /* recipe objects are candidates too */
        layout_prefix(LAYOUT_RECIPE, NULL, prefix);
        e = region_list(rg, prefix, chunks_cb, &c);
    }
    if (e == -ENOENT)
        e = 0;
    for (size_t k = 0; e == 0 && k < p->seen.n; k++)
        e = gcrec_add_snap(&m, p->seen.v[k].run, p->seen.v[k].id);
    gcrec_sort_chunks(&m);
    if (e < 0 || m.nchunks == 0 || p->o->dry_run) {
        rr->state = e < 0 ? "skipped" : m.nchunks ? "would mark" : "clean";
        gcrec_free(&m);
        return e;
    }
    gc_key(m.mark, "mark", key);
    if ((e = put_rec(rg, key, &m, false)) == 0)
        e = write_intents_rec(rg, m.mark, GC_INTENTS);
    if (e == 0) {
        rr->state = "marked";
        snprintf(rr->mark, sizeof(rr->mark), "%s", m.mark);
        memcpy(mk.mark, m.mark, sizeof(mk.mark));
        mk.has_mark = mk.has_intents = true;
        if (mark_ready(p, i, &mk))
            e = mark_sweep(p, i, &mk);
        else
            rr->state = "waiting";
    }
    gcrec_free(&m);
    return e;
}

/* Forgotten snapshots: commit records, then the manifest. */
struct keys {
    char (*v)[REGION_KEY_MAX];
    size_t n;
};

static int commits_cb(void *ud, const char *key, uint64_t size)
{
    struct keys *k = ud;
    (void)size;
    char(*p)[REGION_KEY_MAX] = realloc(k->v, (k->n + 1) * sizeof(*p));
    if (!p)
        return -ENOMEM;
    k->v = p;
    snprintf(p[k->n++], REGION_KEY_MAX, "%s", key);
    return 0;
}

static int region_forgotten(struct pr *p, size_t i)
{
    struct region *rg = repo_region(p->r, i);
    struct gc_region_result *rr = &p->res->region[i];
    char key[REGION_KEY_MAX], run[MANIFEST_MAX_FIELD + 1] = "";
    struct keys commits = {0};
    int e = 0;
    for (size_t k = 0; e == 0 && k < p->forgot.n; k++) {
        const struct gc_snapref *s = &p->forgot.v[k];
        if (strcmp(run, s->run)) { /* one listing of commits/<run>/ per run */
            snprintf(run, sizeof(run), "%s", s->run);
            commits.n = 0;
            layout_prefix(LAYOUT_COMMIT, run, key); /* a listed manifest's run: valid */
            if ((e = region_list(rg, key, commits_cb, &commits)) == -ENOENT)
                e = 0;
        }
        for (size_t c = 0; e == 0 && c < commits.n; c++) {
            struct lineage_rec rec;
            if (layout_record_parse(commits.v[c], &rec) == 0 && !strcmp(rec.id, s->id))
                e = del_counted(p, i, commits.v[c], &rr->records_deleted);
        }
        layout_snapshot(s->run, s->id, key); /* a listed forget record's: valid */
        int h = e == 0 ? region_has(rg, key) : 0;
        if (h == 1)
            e = del_counted(p, i, key, &rr->snapshots_deleted);
        else if (h < 0)
            e = h;
    }
    free(commits.v);
    return e;
}

/* Forget records go last, once no region lists their manifest and they
 * are older than any writer that may still publish the snapshot. */
static int forget_records_done(struct pr *p)
{
    for (size_t i = 0; i < repo_nregions(p->r); i++)
        if (repo_region_error(p->r, i))
            return 0; /* a region we cannot see may still hold the manifest */
    for (size_t i = 0; i < repo_nregions(p->r); i++) {
        struct region *rg = repo_region(p->r, i);
        struct keys fk = {0};
        char prefix[REGION_KEY_MAX];
        layout_prefix(LAYOUT_FORGET, NULL, prefix);
        int e = region_list(rg, prefix, commits_cb, &fk);
        for (size_t k = 0; e == 0 && k < fk.n; k++) {
            struct lineage_rec rec;
            struct buf b = BUF_INIT;
            char mkey[REGION_KEY_MAX];
            if (layout_record_parse(fk.v[k], &rec) < 0 || rec.kind != LINEAGE_FORGET)
                continue;
            layout_snapshot(rec.run, rec.id, mkey); /* rec: a parsed record's key, valid */
            bool listed = false;
            for (size_t j = 0; j < repo_nregions(p->r) && !listed; j++)
                listed = region_has(repo_region(p->r, j), mkey) != 0;
            if (!listed && region_get(rg, fk.v[k], LINEAGE_MAX_BYTES, &b) == 0 &&
                layout_record_read(fk.v[k], b.data, b.len, &rec) == 0 &&
                now() - rec.time >
                    (int64_t)(repo_conf(p->r)->intent_ttl + repo_conf(p->r)->clock_skew))
                e = del_counted(p, i, fk.v[k], &p->res->region[i].records_deleted);
            buf_free(&b);
        }
        free(fk.v);
        if (e < 0 && e != -ENOENT)
            return e;
    }
    return 0;
}

/* The region's litter (region_tidy).  A temporary is removed once it is
 * older than any writer's put can be and still count: intent_ttl (a writer
 * publishes nothing under an intent older than half of it) plus
 * clock_skew (its mtime is the store's clock), whatever --grace says.
 * Failing to tidy is logged, not a failed prune. */
static void region_litter(struct pr *p, size_t i)
{
    struct region *rg = repo_region(p->r, i);
    struct region_tidy st = {0};
    uint64_t age = repo_conf(p->r)->intent_ttl + repo_conf(p->r)->clock_skew;
    if (region_tidy(rg, age, &st) < 0)
        log_warn("%s", region_last_error(rg));
    p->res->region[i].litter_deleted += st.temps + st.folders;
    if (st.temps + st.folders)
        log_info("region '%s': removed %llu stale temporary file(s) and %llu empty mark folder(s)",
                 rg->conf.name, (unsigned long long)st.temps, (unsigned long long)st.folders);
}

static int region_prune(struct pr *p, size_t i)
{
    struct region *rg = repo_region(p->r, i);
    struct gc_region_result *rr = &p->res->region[i];
    struct gc_list l = {0};
    bool live = false;
    uint64_t req0 = rg->requests;
    rr->state = "clean";
    intents_reap(p, rg);
    int e = region_forgotten(p, i);
    if (e == 0)
        e = partgc_region(p->r, i, now(), p->o->dry_run, &rr->parts_deleted, p->err);
    if (e == 0)
        e = gc_list_read(rg, NULL, &l);
    for (size_t k = 0; e == 0 && k < l.n; k++) {
        const struct gc_mk *mk = &l.v[k];
        if (!mk->has_mark) {
            if (!p->o->dry_run)
                e = mark_cleanup(p, i, mk); /* orphans of an interrupted cleanup */
        } else if (mk->has_done) {
            if (!p->o->dry_run)
                e = mark_done_cleanup(p, i, mk);
        } else if (p->o->dry_run) {
            live = true;
            rr->state = "marked";
            snprintf(rr->mark, sizeof(rr->mark), "%s", mk->mark);
        } else {
            snprintf(rr->mark, sizeof(rr->mark), "%s", mk->mark);
            if (!mk->has_intents && (e = write_intents_rec(rg, mk->mark, GC_INTENTS)) < 0)
                break; /* a crash came between the mark and its intents: list them now */
            if (mark_ready(p, i, mk)) {
                e = mark_sweep(p, i, mk);
            } else {
                live = true;
                rr->state = "waiting";
            }
        }
        if (e == 0)
            e = lease_renew(p);
    }
    gc_list_free(&l);
    if (e == 0 && !live && strcmp(rr->state, "swept"))
        e = mark_new(p, i);
    if (e == 0 && !p->o->dry_run)
        region_litter(p, i);
    if (e < 0) {
        rr->err = e;
        snprintf(rr->msg, sizeof(rr->msg), "%s", rg->errmsg[0] ? rg->errmsg : err_str(e));
        rr->state = "skipped";
    }
    rr->requests += rg->requests - req0;
    return e;
}

/* The local index lets go of the forgotten snapshots it knows, while
 * their manifests are still there to tell their references. */
static void pr_drop_forgotten(struct pr *p)
{
    for (size_t k = 0; k < p->forgot.n; k++)
        snapdrop_forgotten(p->r, p->forgot.v[k].run, p->forgot.v[k].id);
}

static int pr_run(struct repo *r, const struct gc_opts *o, struct gc_result *res, struct buf *err,
                  bool lease)
{
    struct pr p = {.r = r, .o = o, .res = res, .err = err};
    double t0 = mono();
    uint64_t req0[CONFIG_MAX_REGIONS];
    int e = 0, first = 0;
    memset(res, 0, sizeof(*res));
    res->nregions = repo_nregions(r);
    p.grace = o->grace >= 0 ? o->grace : (int64_t)repo_conf(r)->prune_grace;
    for (size_t i = 0; i < repo_nregions(r); i++) {
        req0[i] = repo_region(r, i)->requests;
        res->region[i].state = repo_region_error(r, i) ? "skipped" : "clean";
        if (repo_region_error(r, i)) {
            res->region[i].err = repo_region_error(r, i);
            snprintf(res->region[i].msg, sizeof(res->region[i].msg), "%s",
                     region_last_error(repo_region(r, i))[0] ? region_last_error(repo_region(r, i))
                                                             : err_str(repo_region_error(r, i)));
        }
    }
    if ((e = pr_clocks(&p)) < 0 || (lease && (e = lease_acquire(&p)) < 0))
        goto out;
    if ((e = pr_collect(&p)) < 0)
        goto out;
    if (!o->dry_run)
        pr_drop_forgotten(&p);
    REPO_FOR_HEALTHY(r, i) {
        int re = region_prune(&p, i);
        if (re == CKS_E_BUSY || re == CKS_E_FATAL) {
            /* fatal: deleting what the index can no longer record would
             * leave it claiming chunks the regions dropped (store/index.h) */
            e = re;
            break;
        }
        if (re < 0 && !first)
            first = re;
    }
    if (e == 0 && !o->dry_run && !first)
        e = forget_records_done(&p);
    if (e == 0 && first) {
        e = first;
        for (size_t i = 0; i < repo_nregions(r); i++)
            if (res->region[i].err && repo_region_ok(r, i))
                buf_printf(err, "%sregion '%s': %s", buf_str(err)[0] ? "; " : "",
                           repo_region(r, i)->conf.name, res->region[i].msg);
    }
out:
    lease_release(&p);
    for (size_t i = 0; i < repo_nregions(r); i++)
        res->region[i].requests = repo_region(r, i)->requests - req0[i];
    res->seconds = mono() - t0;
    free(p.refs);
    free(p.rrefs);
    free(p.seen.v);
    free(p.forgot.v);
    return e;
}

int gc_prune(struct repo *r, const struct gc_opts *o, struct gc_result *res, struct buf *err)
{
    return pr_run(r, o, res, err, !o->dry_run);
}
