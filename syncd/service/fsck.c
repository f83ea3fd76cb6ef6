/*
 * fsck.c — the index consistency check (fsck.h).
 *
 * Design: one read transaction.  First every snapshot's chunk references
 * are gathered into one array (its manifest from the pending table, else
 * from a region), which is sorted; then every chunk record's refcount is
 * compared with the number of times its id occurs there (a binary search
 * for the first, then a count).  Memory: one struct mchunk per reference.
 *
 * Recipes (version 6, docs/deltas.md): each snapshot's r lines are
 * compared with the index's record of the same recipes/<id>.<sig> key,
 * where it has one (store/recidx: written by this instance's writers) —
 * the chunk's length and every base with its length must be the r
 * line's — and every recipe record must decode.  The index keeps no
 * refcount of recipes, and fsck reads no object: a recipe object lost
 * from a region is verify's to name.
 */
#include "service/fsck.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/hash.h"
#include "service/catalog.h"
#include "service/multinode.h"
#include "store/layout.h"
#include "store/queue.h"
#include "store/recidx.h"

struct fsck {
    struct repo *r;
    struct index_txn *t;
    struct mchunk *refs; /* every reference of every snapshot */
    size_t nrefs, cap;
    struct fsck_result *res;
};

static int fsck_add(struct fsck *f, const struct manifest *m)
{
    if (f->nrefs + m->nchunks > f->cap) {
        size_t cap = (f->nrefs + m->nchunks) * 2;
        struct mchunk *v = realloc(f->refs, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        f->refs = v;
        f->cap = cap;
    }
    memcpy(f->refs + f->nrefs, m->chunks, m->nchunks * sizeof(*m->chunks));
    f->nrefs += m->nchunks;
    f->res->snapshots++;
    return 0;
}

struct fsck_pend {
    const char *run, *id;
    struct manifest *m;
    int found; /* 1 parsed, -1 present but unparsable, 0 absent */
};

static int fsck_pend_cb(void *ud, const struct pending *p)
{
    struct fsck_pend *pf = ud;
    struct stat st;
    if (strcmp(p->run, pf->run) || strcmp(p->id, pf->id))
        return 0;
    if (p->pinned && stat(p->pin, &st) < 0)
        log_error("pending snapshot %s: pin folder \"%s\" is missing", p->id, p->pin);
    pf->found = manifest_parse(p->manifest, p->manifest_len, pf->m, NULL) == 0 ? 1 : -1;
    return 1;
}

static int fsck_ref_cmp(const void *a, const void *b);

/* The plaintext length of base id of m: its extra's, or (sorted file
 * chunks cs[0 .. n)) a file chunk's; 0 when m does not name it. */
static uint32_t fsck_base_len(const struct manifest *m, const struct mchunk *cs, size_t n,
                              const uint8_t id[HASH_LEN])
{
    const struct mextra *x = manifest_extra(m, id);
    const struct mchunk *c = n ? bsearch(id, cs, n, sizeof(*cs), fsck_ref_cmp) : NULL;
    return x ? x->len : c ? c->len : 0;
}

/* What differs between r line x of m and the index's record rec of it,
 * or NULL. */
static const char *fsck_recipe_diff(const struct manifest *m, const struct mchunk *cs, size_t n,
                                    const struct mextra *x, const struct recidx *rec)
{
    if (rec->raw_len != x->len)
        return "the chunk's length";
    if (rec->nbases != x->nbases)
        return "the number of bases";
    for (size_t k = 0; k < rec->nbases; k++) {
        const struct mbase *b = NULL;
        for (uint32_t j = 0; !b && j < x->nbases; j++)
            if (!memcmp(m->bases[x->first_base + j].id, rec->base[k].id, HASH_LEN))
                b = &m->bases[x->first_base + j];
        if (!b)
            return "a base";
        if (fsck_base_len(m, cs, n, b->id) != rec->base[k].len)
            return "a base's length";
    }
    return NULL;
}

/* The r lines of snapshot id's manifest m against the index's records. */
static int fsck_recipes(struct fsck *f, const char *run, const char *id, const struct manifest *m)
{
    struct mchunk *cs = NULL;
    char key[LAYOUT_KEY_MAX];
    if (m->nextras && m->nchunks) {
        if (!(cs = malloc(m->nchunks * sizeof(*cs))))
            return -ENOMEM;
        memcpy(cs, m->chunks, m->nchunks * sizeof(*cs));
        qsort(cs, m->nchunks, sizeof(*cs), fsck_ref_cmp);
    }
    for (size_t k = 0; k < m->nextras; k++) {
        const struct mextra *x = &m->extras[k];
        struct recidx rec;
        if (!x->recipe)
            continue;
        f->res->recipe_refs++;
        if (recidx_get(f->t, x->id, x->sig, &rec) < 0)
            continue; /* unknown here (another instance wrote it), or damaged: fsck_recidx_cb */
        const char *what = fsck_recipe_diff(m, cs, m->nchunks, x, &rec);
        if (!what)
            continue;
        layout_recipe(x->id, x->sig, key);
        log_error("recipe \"%s\": the index's record disagrees with snapshot %s of run '%s' about "
                  "%s",
                  key, id, run, what);
        f->res->problems++;
    }
    free(cs);
    return 0;
}

static int fsck_snap_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct fsck *f = ud;
    struct manifest m;
    struct fsck_pend pf = {run, id, &m, 0};
    struct buf err = BUF_INIT;
    queue_pending_foreach(f->t, fsck_pend_cb, &pf);
    if (pf.found != 1 && catalog_find(f->r, run, id, &m, NULL, &err) < 0 &&
        multinode_find(f->r, run, s->step, id, &m, &err) < 0) { /* a node's part of a step */
        log_error("snapshot %s of run '%s': no manifest in the index or any region: %s", id, run,
                  buf_str(&err));
        f->res->problems++;
        buf_free(&err);
        return 0;
    }
    buf_free(&err);
    int e = fsck_add(f, &m);
    if (e == 0)
        e = fsck_recipes(f, run, id, &m);
    manifest_free(&m);
    return e;
}

/* A recipe record: it must decode, at a depth the readers accept. */
static int fsck_recidx_cb(void *ud, const uint8_t *id, const struct recidx *r, int e)
{
    struct fsck *f = ud;
    char key[LAYOUT_KEY_MAX] = "(a key of the wrong length)";
    f->res->recipes++;
    if (e == 0 && r->depth >= 1 && r->depth <= MANIFEST_MAX_DEPTH)
        return 0;
    if (id)
        layout_recipe(id, r->sig, key);
    log_error("recipe \"%s\": the index's record is damaged (%s)", key,
              e < 0 ? err_str(e) : "depth out of range");
    f->res->problems++;
    return 0;
}

static int fsck_ref_cmp(const void *a, const void *b)
{
    return memcmp(((const struct mchunk *)a)->id, ((const struct mchunk *)b)->id, HASH_LEN);
}

/* How many times the (sorted) references name id. */
static uint64_t fsck_expected(const struct fsck *f, const uint8_t id[HASH_LEN])
{
    size_t lo = 0, hi = f->nrefs;
    while (lo < hi) { /* first reference >= id */
        size_t mid = lo + (hi - lo) / 2;
        if (memcmp(f->refs[mid].id, id, HASH_LEN) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t n = 0;
    while (lo + n < f->nrefs && !memcmp(f->refs[lo + n].id, id, HASH_LEN))
        n++;
    return n;
}

static int fsck_chunk_cb(void *ud, const uint8_t id[HASH_LEN], const struct index_chunk *c)
{
    struct fsck *f = ud;
    uint64_t want = fsck_expected(f, id);
    if (c->refcount != want) {
        char hex[HASH_HEX_LEN + 1];
        hex_encode(id, HASH_LEN, hex);
        log_error("chunk %s: refcount %llu, but the snapshots reference it %llu times", hex,
                  (unsigned long long)c->refcount, (unsigned long long)want);
        f->res->problems++;
    }
    return 0;
}

int fsck_run(struct repo *r, struct fsck_result *ret)
{
    struct fsck f = {.r = r, .res = ret};
    memset(ret, 0, sizeof(*ret));
    int e = index_txn_begin(repo_index(r), false, &f.t);
    if (e < 0)
        return e;
    e = index_snap_foreach(f.t, NULL, fsck_snap_cb, &f);
    if (e == 0) {
        if (f.nrefs) /* qsort(NULL, 0, ...) is undefined */
            qsort(f.refs, f.nrefs, sizeof(*f.refs), fsck_ref_cmp);
        e = index_chunk_foreach(f.t, fsck_chunk_cb, &f);
    }
    if (e == 0)
        e = recidx_all(f.t, fsck_recidx_cb, &f);
    index_txn_abort(f.t);
    ret->refs = f.nrefs;
    free(f.refs);
    return e;
}
