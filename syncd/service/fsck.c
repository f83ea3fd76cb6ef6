/*
 * fsck.c — the index consistency check (fsck.h).
 *
 * Design: one read transaction.  First every snapshot's chunk references
 * are gathered into one array (its manifest from the pending table, else
 * from a region), which is sorted; then every chunk record's refcount is
 * compared with the number of times its id occurs there (a binary search
 * for the first, then a count).  Memory: one struct mchunk per reference.
 */
#include "service/fsck.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "engine/hash.h"
#include "service/catalog.h"
#include "service/multinode.h"
#include "store/queue.h"

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
    manifest_free(&m);
    return e;
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
    index_txn_abort(f.t);
    ret->refs = f.nrefs;
    free(f.refs);
    return e;
}
