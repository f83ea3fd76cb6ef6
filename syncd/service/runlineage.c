/*
 * runlineage.c — a run's snapshots, claims and handoffs as the regions
 * list them, and the resume order derived from them (see runlineage.h;
 * the records themselves are engine/lineage.h's).
 *
 * Design notes.
 * - The listings of all healthy regions are merged: a region that missed
 *   a write (it was down, or someone deleted there) hides nothing.
 * - Facts come from keys, so the common case is three LISTs per region
 *   and no GET.  A manifest without a commit record in any region (its
 *   commit was cut short, or commits/ was lost) is read once to learn its
 *   generation and step: refs and commit records are an index, manifests
 *   the truth.
 * - A version-1 `handoff/<run>` (written before generations existed) is
 *   read as a handoff of generation 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/handoff.h"
#include "service/manifests.h"
#include "service/runlineage.h"
#include "store/layout.h"
#include "store/queue.h"

/* ---- scanning ---------------------------------------------------------- */

struct scan_ctx {
    struct runlineage_view *v;
    size_t cap, rcap;
    uint32_t bit;
    int err;
};

static struct runlineage_snap *snap_get(struct scan_ctx *c, const char *id)
{
    struct runlineage_view *v = c->v;
    for (size_t i = v->nsnaps; i-- > 0;) /* listings arrive sorted: the last is likely */
        if (!strcmp(v->snaps[i].id, id))
            return &v->snaps[i];
    if (v->nsnaps == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct runlineage_snap *p = realloc(v->snaps, cap * sizeof(*p));
        if (!p)
            return NULL;
        v->snaps = p;
        c->cap = cap;
    }
    struct runlineage_snap *s = &v->snaps[v->nsnaps++];
    memset(s, 0, sizeof(*s));
    snprintf(s->id, sizeof(s->id), "%s", id);
    s->step = -1;
    return s;
}

static int manifests_cb(void *ud, const char *key, uint64_t size)
{
    struct scan_ctx *c = ud;
    struct layout_key k;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_SNAPSHOT)
        return 0; /* not ours */
    struct runlineage_snap *s = snap_get(c, k.name);
    if (!s)
        return -ENOMEM;
    s->manifests |= c->bit;
    return 0;
}

static int rec_add(struct scan_ctx *c, const struct lineage_rec *rec)
{
    struct runlineage_view *v = c->v;
    for (size_t i = 0; i < v->nrecs; i++) {
        const struct lineage_rec *o = &v->recs[i];
        if (o->kind == rec->kind && o->gen == rec->gen && !strcmp(o->id, rec->id) &&
            !strcmp(o->tag, rec->tag))
            return 0;
    }
    if (v->nrecs == c->rcap) {
        size_t cap = c->rcap ? c->rcap * 2 : 8;
        struct lineage_rec *p = realloc(v->recs, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        v->recs = p;
        c->rcap = cap;
    }
    v->recs[v->nrecs++] = *rec;
    return 0;
}

static int records_cb(void *ud, const char *key, uint64_t size)
{
    struct scan_ctx *c = ud;
    struct lineage_rec rec;
    (void)size;
    if (layout_record_parse(key, &rec) < 0 || strcmp(rec.run, c->v->run))
        return 0;
    if (rec.kind == LINEAGE_FORGET) {
        /* Removed: it no longer counts for anything, generation included
         * (the newest snapshot of a run is never forgotten). */
        struct runlineage_snap *f = snap_get(c, rec.id);
        if (!f)
            return -ENOMEM;
        f->forgets |= c->bit;
        return 0;
    }
    if (rec.gen > c->v->gen)
        c->v->gen = rec.gen;
    if (rec.kind != LINEAGE_COMMIT)
        return rec_add(c, &rec);
    struct runlineage_snap *s = snap_get(c, rec.id);
    if (!s)
        return -ENOMEM;
    s->commits |= c->bit;
    s->gen = rec.gen;
    s->step = rec.step;
    s->known = true;
    return 0;
}

static int scan_list(struct scan_ctx *c, struct region *rg, enum layout_kind top, const char *run,
                     int (*cb)(void *, const char *, uint64_t))
{
    char prefix[REGION_KEY_MAX];
    int e = layout_prefix(top, run, prefix);
    if (e == 0)
        e = region_list(rg, prefix, cb, c);
    return e == -ENOENT ? 0 : e;
}

/* A version-1 handoff/<run>: generation 0. */
static int scan_legacy_handoff(struct scan_ctx *c, struct region *rg)
{
    char key[REGION_KEY_MAX];
    struct buf data = BUF_INIT;
    struct handoff h;
    int e = layout_key(LAYOUT_HANDOFF_V1, c->v->run, NULL, key);
    if (e == 0)
        e = region_get(rg, key, HANDOFF_MAX_BYTES, &data);
    if (e == 0 && handoff_parse(data.data, data.len, &h) == 0 && !strcmp(h.run, c->v->run)) {
        struct lineage_rec rec = {
            .kind = LINEAGE_HANDOFF, .gen = 0, .step = h.step, .time = h.time};
        snprintf(rec.run, sizeof(rec.run), "%s", h.run);
        snprintf(rec.id, sizeof(rec.id), "%s", h.id);
        snprintf(rec.host, sizeof(rec.host), "%s", h.host);
        c->v->legacy_handoff = true;
        e = rec_add(c, &rec);
    } else if (e == 0) {
        log_warn("region '%s': \"%s\" is damaged; ignoring it", rg->conf.name, key);
    }
    buf_free(&data);
    return e == -ENOENT ? 0 : e;
}

static int scan_region(struct scan_ctx *c, struct region *rg)
{
    int e = scan_list(c, rg, LAYOUT_SNAPSHOT, c->v->run, manifests_cb);
    if (e == 0)
        e = scan_list(c, rg, LAYOUT_COMMIT, c->v->run, records_cb);
    if (e == 0)
        e = scan_list(c, rg, LAYOUT_LINEAGE, c->v->run, records_cb);
    if (e == 0)
        e = scan_list(c, rg, LAYOUT_FORGET, c->v->run, records_cb);
    if (e == 0)
        e = scan_legacy_handoff(c, rg);
    return e;
}

/* Manifests no commit record describes: read them for gen and step. */
static void scan_fill_unknown(struct repo *r, struct runlineage_view *v)
{
    for (size_t i = 0; i < v->nsnaps; i++) {
        struct runlineage_snap *s = &v->snaps[i];
        struct manifest m;
        struct buf err = BUF_INIT;
        if (s->known || !s->manifests || s->forgets)
            continue;
        if (manifests_read(r, v->run, s->id, &m, NULL, &err) == 0) {
            s->gen = m.gen;
            s->step = m.step;
            s->known = true;
            if (s->gen > v->gen)
                v->gen = s->gen;
            manifest_free(&m);
        } else {
            log_warn("%s", buf_str(&err));
        }
        buf_free(&err);
    }
}

static int snap_id_cmp(const void *a, const void *b)
{
    return strcmp(((const struct runlineage_snap *)a)->id, ((const struct runlineage_snap *)b)->id);
}

/* "region 'a': why" for a region that did not answer, into why. */
static void scan_why(struct buf *why, const struct repo *r, struct region *const *regions, size_t i)
{
    const char *msg = repo_region_error(r, i) ? NULL : region_last_error(regions[i]);
    if (why->len)
        buf_puts(why, "; ");
    if (msg && msg[0])
        buf_puts(why, msg);
    else
        buf_printf(why, "region '%s': %s", repo_conf(r)->regions[i].name,
                   err_str(repo_region_error(r, i) ? repo_region_error(r, i) : -EIO));
}

int runlineage_scan(struct repo *r, struct region *const *regions, const char *run,
                    struct runlineage_view *ret, struct buf *err)
{
    struct scan_ctx c = {.v = ret};
    struct buf why = BUF_INIT;
    size_t listed = 0;
    memset(ret, 0, sizeof(*ret));
    if (manifest_run_check(run) < 0) {
        buf_printf(err, "run name \"%s\": use 1-256 characters from [A-Za-z0-9._-], not . or ..",
                   run);
        return -EINVAL;
    }
    snprintf(ret->run, sizeof(ret->run), "%s", run);
    for (size_t i = 0; i < repo_nregions(r); i++) {
        if (repo_region_error(r, i)) {
            scan_why(&why, r, regions, i);
            continue;
        }
        c.bit = 1u << i;
        int e = scan_region(&c, regions[i]);
        if (e == -ENOMEM) {
            buf_free(&why);
            runlineage_view_free(ret);
            return e;
        }
        if (e < 0) {
            log_error("%s", region_last_error(regions[i]));
            scan_why(&why, r, regions, i);
            if (regions == repo_regions(r)) /* another thread's handles: r is not ours to mark */
                repo_region_fail(r, i, e);
            continue;
        }
        listed++;
    }
    if (listed == 0) {
        buf_printf(err, "run '%s': no region could be listed (%s)", run, buf_str(&why));
        buf_free(&why);
        runlineage_view_free(ret);
        return CKS_E_QUORUM;
    }
    buf_free(&why);
    if (ret->nsnaps > 1)
        qsort(ret->snaps, ret->nsnaps, sizeof(*ret->snaps), snap_id_cmp);
    if (regions == repo_regions(r))
        scan_fill_unknown(r, ret);
    return 0;
}

void runlineage_view_free(struct runlineage_view *v)
{
    free(v->snaps);
    free(v->recs);
    memset(v, 0, sizeof(*v));
}

struct runlineage_snap *runlineage_find(struct runlineage_view *v, const char *id)
{
    struct runlineage_snap key;
    snprintf(key.id, sizeof(key.id), "%s", id);
    return v->nsnaps ? bsearch(&key, v->snaps, v->nsnaps, sizeof(key), snap_id_cmp) : NULL;
}

/* ---- resume order ------------------------------------------------------ */

struct cands {
    const char **ids, **why;
    size_t n, cap;
};

static void cand_add(struct cands *c, const char *id, const char *why)
{
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->ids[i], id))
            return;
    if (c->n < c->cap) {
        c->ids[c->n] = id;
        c->why[c->n++] = why;
    }
}

/* Snapshots of generation g (with a manifest somewhere), newest first. */
static void cand_snaps(struct cands *c, const struct runlineage_view *v, int64_t g)
{
    bool *used = calloc(v->nsnaps ? v->nsnaps : 1, sizeof(*used));
    if (!used)
        return;
    for (;;) {
        const struct runlineage_snap *best = NULL;
        size_t bi = 0;
        for (size_t i = 0; i < v->nsnaps; i++) {
            const struct runlineage_snap *s = &v->snaps[i];
            if (used[i] || !s->known || s->gen != g || !s->manifests || s->forgets)
                continue;
            if (!best || lineage_newer(s->step, s->id, best->step, best->id)) {
                best = s;
                bi = i;
            }
        }
        if (!best)
            break;
        used[bi] = true;
        cand_add(c, best->id, "the newest snapshot of the current generation");
    }
    free(used);
}

static void cand_handoffs(struct cands *c, const struct runlineage_view *v, int64_t g)
{
    const struct lineage_rec *best = NULL;
    for (size_t i = 0; i < v->nrecs; i++) {
        const struct lineage_rec *h = &v->recs[i];
        if (h->kind == LINEAGE_HANDOFF && h->gen == g &&
            (!best || lineage_newer(h->step, h->id, best->step, best->id)))
            best = h;
    }
    if (best)
        cand_add(c, best->id, "named by the handoff");
}

/* The snapshot a claim of generation g resumed from (its body says). */
static void cand_claims(struct repo *r, struct cands *c, struct runlineage_view *v, int64_t g)
{
    size_t cap = sizeof(v->bases) / sizeof(v->bases[0]);
    for (size_t i = 0; i < v->nrecs && v->nbases < cap; i++) {
        const struct lineage_rec *cl = &v->recs[i];
        char key[REGION_KEY_MAX];
        if (cl->kind != LINEAGE_CLAIM || cl->gen != g || layout_record(cl, key, sizeof(key)) < 0)
            continue;
        for (size_t k = 0; k < repo_nregions(r); k++) {
            struct buf data = BUF_INIT;
            struct lineage_rec body;
            int e = repo_region_error(r, k)
                        ? -EIO
                        : region_get(repo_region(r, k), key, LINEAGE_MAX_BYTES, &data);
            if (e == 0 && layout_record_read(key, data.data, data.len, &body) == 0) {
                buf_free(&data);
                if (body.id[0]) {
                    snprintf(v->bases[v->nbases], sizeof(v->bases[0]), "%s", body.id);
                    cand_add(c, v->bases[v->nbases++], "the snapshot the last claim resumed from");
                }
                break;
            }
            if (e == 0)
                log_warn("region '%s': claim \"%s\" is damaged", repo_region(r, k)->conf.name, key);
            buf_free(&data);
        }
    }
}

size_t runlineage_candidates(struct repo *r, struct runlineage_view *v, const char **ret_ids,
                             const char **ret_why, size_t cap)
{
    struct cands c = {.ids = ret_ids, .why = ret_why, .cap = cap};
    v->nbases = 0;
    for (int64_t g = v->gen; g >= 0 && c.n < cap; g--) {
        cand_handoffs(&c, v, g);
        cand_snaps(&c, v, g);
        cand_claims(r, &c, v, g);
    }
    return c.n;
}

/* ---- writing ----------------------------------------------------------- */

void runlineage_rec_init(struct lineage_rec *rec, enum lineage_kind kind, const char *run,
                         int64_t gen)
{
    const char *inst = getenv("CKPTSYNC_INSTANCE_TYPE");
    memset(rec, 0, sizeof(*rec));
    rec->kind = kind;
    rec->gen = gen;
    rec->step = -1;
    rec->time = (int64_t)time(NULL);
    snprintf(rec->run, sizeof(rec->run), "%s", run);
    if (gethostname(rec->host, sizeof(rec->host) - 1) < 0)
        snprintf(rec->host, sizeof(rec->host), "unknown");
    snprintf(rec->instance, sizeof(rec->instance), "%s", inst ? inst : "");
    if (kind == LINEAGE_CLAIM) {
        uint8_t raw[LINEAGE_CLAIM_HEX / 2];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
            memset(raw, 0, sizeof(raw)); /* runlineage_put still writes once: a clash only merges */
        hex_encode(raw, sizeof(raw), rec->tag);
    }
}

unsigned runlineage_put(struct repo *r, const struct lineage_rec *rec)
{
    char key[REGION_KEY_MAX];
    struct buf body = BUF_INIT;
    unsigned n = 0;
    if (layout_record(rec, key, sizeof(key)) < 0 || lineage_encode(rec, &body) < 0) {
        buf_free(&body);
        return 0;
    }
    REPO_FOR_HEALTHY(r, i) {
        int e = region_put(repo_region(r, i), key, body.data, body.len);
        if (e < 0)
            log_error("%s", region_last_error(repo_region(r, i)));
        else
            n++;
    }
    buf_free(&body);
    return n;
}

int runlineage_put_commit(struct region *rg, const struct manifest *m, const uint8_t *man,
                          size_t len)
{
    struct lineage_rec rec;
    char key[REGION_KEY_MAX];
    struct buf body = BUF_INIT;
    runlineage_rec_init(&rec, LINEAGE_COMMIT, m->run, m->gen);
    snprintf(rec.id, sizeof(rec.id), "%s", m->id);
    rec.step = m->step;
    if (m->host)
        snprintf(rec.host, sizeof(rec.host), "%s", m->host);
    snprintf(rec.instance, sizeof(rec.instance), "%s", m->instance ? m->instance : "");
    rec.time = m->time;
    hash_sha256(man, len, rec.manifest);
    int e = layout_record(&rec, key, sizeof(key));
    if (e == 0)
        e = lineage_encode(&rec, &body);
    if (e == 0)
        e = region_put(rg, key, body.data, body.len);
    buf_free(&body);
    return e;
}

/* ---- this instance's generation ----------------------------------------- */

static void gen_key(const char *run, char *key, size_t size)
{
    snprintf(key, size, "gen/%s", run);
}

int runlineage_gen_get(struct index_txn *t, const char *run, int64_t *ret)
{
    char key[16 + MANIFEST_MAX_FIELD], val[32], *end;
    gen_key(run, key, sizeof(key));
    int e = index_meta_get(t, key, val, sizeof(val));
    if (e < 0)
        return e;
    long long g = strtoll(val, &end, 10);
    if (*end || end == val || g < 0 || g > LINEAGE_GEN_MAX)
        return CKS_E_FORMAT;
    *ret = g;
    return 0;
}

static int gen_put(struct index_txn *t, const char *run, int64_t gen)
{
    char key[16 + MANIFEST_MAX_FIELD], val[32];
    gen_key(run, key, sizeof(key));
    snprintf(val, sizeof(val), "%lld", (long long)gen);
    return index_meta_put(t, key, val);
}

static int gen_local(struct repo *r, const char *run, int64_t *ret)
{
    struct index_txn *t;
    int e = index_txn_begin(repo_index(r), false, &t);
    if (e < 0)
        return e;
    e = runlineage_gen_get(t, run, ret);
    index_txn_abort(t);
    return e;
}

struct gen_queued {
    const char *run;
    uint64_t *v;
    size_t n, cap;
    int err;
};

static int gen_queued_cb(void *ud, const struct pending *p)
{
    struct gen_queued *q = ud;
    if (strcmp(p->run, q->run))
        return 0;
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 8;
        uint64_t *v = realloc(q->v, cap * sizeof(*v));
        if (!v)
            return q->err = -ENOMEM;
        q->v = v;
        q->cap = cap;
    }
    q->v[q->n++] = p->seq;
    return 0;
}

/* In t: the daemon's queued snapshot seq (store/queue.h) says generation
 * gen.  One whose manifest does not parse is left as it is (its region
 * workers refuse to load it anyway) rather than hold back the others. */
static int gen_rewrite(struct index_txn *t, uint64_t seq, int64_t gen, struct pending *p)
{
    struct manifest m;
    struct buf man = BUF_INIT, err = BUF_INIT;
    manifest_init(&m);
    int e = queue_pending_get(t, seq, p);
    if (e == 0 && manifest_parse(p->manifest, p->manifest_len, &m, &err) < 0) {
        log_error("pending snapshot %llu (%s): %s; its generation is left undecided",
                  (unsigned long long)seq, p->id, buf_str(&err));
        e = 1;
    }
    if (e == 0 && m.gen != gen) {
        m.gen = gen;
        if ((e = manifest_encode(&m, &man)) == 0) {
            p->manifest = man.data;
            p->manifest_len = man.len;
            e = queue_pending_put(t, p);
        }
    }
    manifest_free(&m);
    buf_free(&man);
    buf_free(&err);
    return e < 0 ? e : 0;
}

int runlineage_gen_record(struct index_txn *t, const char *run, int64_t gen, size_t *ret_n)
{
    struct gen_queued q = {.run = run};
    struct pending *p;
    int64_t had;
    int e = runlineage_gen_get(t, run, &had);
    *ret_n = 0;
    if (e != -ENOENT && e != CKS_E_FORMAT)
        return e;
    if (!(p = malloc(sizeof(*p)))) /* large */
        return -ENOMEM;
    e = queue_pending_foreach(t, gen_queued_cb, &q);
    if (e == 0 && q.err)
        e = q.err;
    for (size_t i = 0; i < q.n && e == 0; i++)
        e = gen_rewrite(t, q.v[i], gen, p);
    if (e == 0)
        e = gen_put(t, run, gen);
    if (e == 0)
        *ret_n = q.n;
    free(q.v);
    free(p);
    return e;
}

/* runlineage_gen_record in a transaction of its own; *ret what is recorded
 * (another thread's generation, when it recorded one first). */
static int gen_record_first(struct repo *r, const char *run, int64_t gen, int64_t *ret)
{
    struct index_txn *t;
    size_t n;
    int e = index_txn_begin(repo_index(r), true, &t);
    if (e < 0)
        return e;
    if ((e = runlineage_gen_record(t, run, gen, &n)) == 0)
        e = runlineage_gen_get(t, run, ret);
    if (e < 0) {
        index_txn_abort(t);
        return e;
    }
    if ((e = index_txn_commit(t)) == 0 && n)
        log_info("run '%s': generation %lld for the %zu snapshot(s) queued while no region "
                 "could be listed",
                 run, (long long)*ret, n);
    return e;
}

int runlineage_run_gen(struct repo *r, struct region *const *regions, const char *run, int64_t *ret,
                       struct buf *err)
{
    struct runlineage_view v;
    int e = gen_local(r, run, ret);
    if (e != -ENOENT && e != CKS_E_FORMAT)
        return e;
    /* Never a guess: without a listing the generation stays undecided and
     * nothing is recorded (see lineage.h). */
    if ((e = runlineage_scan(r, regions, run, &v, err)) < 0)
        return e;
    int64_t gen = v.gen;
    runlineage_view_free(&v);
    return gen_record_first(r, run, gen, ret);
}

int runlineage_region_gen(struct region *rg, const char *run, int64_t *ret, struct buf *err)
{
    struct runlineage_view v;
    struct scan_ctx c = {.v = &v, .bit = 1};
    memset(&v, 0, sizeof(v));
    snprintf(v.run, sizeof(v.run), "%s", run);
    int e = scan_region(&c, rg);
    if (e == 0)
        *ret = v.gen;
    else
        buf_printf(err, "run '%s': %s", run,
                   e == -ENOMEM || !region_last_error(rg)[0] ? err_str(e) : region_last_error(rg));
    runlineage_view_free(&v);
    return e;
}

/* ---- migration ----------------------------------------------------------- */

unsigned runlineage_handoff(struct repo *r, const char *run, const char *id, int64_t step)
{
    struct lineage_rec rec;
    struct buf err = BUF_INIT;
    int64_t gen;
    int e = runlineage_run_gen(r, repo_regions(r), run, &gen, &err);
    if (e < 0) {
        log_error("handoff of run '%s': %s", run, buf_str(&err)[0] ? buf_str(&err) : err_str(e));
        buf_free(&err);
        return 0;
    }
    buf_free(&err);
    runlineage_rec_init(&rec, LINEAGE_HANDOFF, run, gen);
    snprintf(rec.id, sizeof(rec.id), "%s", id);
    rec.step = step;
    return runlineage_put(r, &rec);
}

/* Snapshots the daemon queued undecided before (none recorded) take
 * gen - 1, the generation that was current when they were taken, as the
 * regions just showed. */
int runlineage_gen_claimed(struct repo *r, const char *run, int64_t gen)
{
    struct index_txn *t;
    size_t n;
    int e = index_txn_begin(repo_index(r), true, &t);
    if (e < 0)
        return e;
    if ((e = runlineage_gen_record(t, run, gen - 1, &n)) == 0)
        e = gen_put(t, run, gen);
    if (e < 0) {
        index_txn_abort(t);
        return e;
    }
    return index_txn_commit(t);
}

int runlineage_scan_all(struct repo *r, const char *run, struct runlineage_view *ret)
{
    struct buf err = BUF_INIT;
    int e = runlineage_scan(r, repo_regions(r), run, ret, &err);
    if (e < 0)
        log_error("%s", buf_str(&err));
    buf_free(&err);
    return e;
}

int runlineage_adopt(struct repo *r, const char *run, const char *base, int64_t base_step,
                     int64_t *ret_gen, bool *ret_handed_off)
{
    struct runlineage_view v;
    struct lineage_rec rec;
    int e = runlineage_scan_all(r, run, &v);
    if (e < 0)
        return e;
    *ret_handed_off = false;
    for (size_t i = 0; i < v.nrecs; i++)
        if (v.recs[i].kind == LINEAGE_HANDOFF && v.recs[i].gen == v.gen &&
            !strcmp(v.recs[i].id, base))
            *ret_handed_off = true;
    runlineage_rec_init(&rec, LINEAGE_CLAIM, run, v.gen + 1);
    snprintf(rec.id, sizeof(rec.id), "%s", base);
    rec.step = base_step;
    runlineage_view_free(&v);
    if (runlineage_put(r, &rec) == 0) {
        log_error("run '%s': no region took the claim of generation %lld", run, (long long)rec.gen);
        return CKS_E_QUORUM;
    }
    *ret_gen = rec.gen;
    return runlineage_gen_claimed(r, run, rec.gen);
}

/* ---- runs -------------------------------------------------------------- */

struct runs_ctx {
    char (*names)[MANIFEST_MAX_FIELD + 1];
    size_t n, cap;
};

static int runs_cb(void *ud, const char *key, uint64_t size)
{
    struct runs_ctx *c = ud;
    struct layout_key k;
    (void)size;
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_SNAPSHOT)
        return 0;
    for (size_t i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], k.dir))
            return 0;
    if (c->n < c->cap)
        memcpy(c->names[c->n++], k.dir, strlen(k.dir) + 1);
    return 0;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

int runlineage_runs(struct repo *r, char (*ret)[MANIFEST_MAX_FIELD + 1], size_t cap, size_t *ret_n)
{
    struct runs_ctx c = {.names = ret, .cap = cap};
    char prefix[REGION_KEY_MAX];
    layout_prefix(LAYOUT_SNAPSHOT, NULL, prefix);
    REPO_FOR_HEALTHY(r, i) {
        int e = region_list(repo_region(r, i), prefix, runs_cb, &c);
        if (e < 0 && e != -ENOENT) {
            log_error("%s", region_last_error(repo_region(r, i)));
            repo_region_fail(r, i, e);
        }
    }
    if (c.n > 1)
        qsort(ret, c.n, sizeof(*ret), name_cmp);
    *ret_n = c.n;
    return 0;
}
