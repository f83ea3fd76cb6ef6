/*
 * cli_fsck.c — `ckptsync fsck`: check the local index against the
 * snapshots it records.  Every chunk's refcount must equal the number of
 * times the index's snapshots reference it (their manifests come from the
 * daemon's pending table, or from the regions), and every pending
 * snapshot's pin folder must exist.  This is how the crash tests prove
 * that no chunk was counted twice.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/log.h"
#include "cli.h"
#include "service/queue.h"
#include "service/restore.h"

struct want {
    uint8_t id[HASH_LEN];
    uint64_t n;
};

struct fsck {
    struct repo *r;
    struct index_txn *t;
    struct mchunk *refs;       /* every reference of every snapshot */
    size_t nrefs, cap;
    uint64_t snapshots, problems;
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
    f->snapshots++;
    return 0;
}

struct pend_find {
    const char *run, *id;
    struct manifest *m;
    int found;
};

static int pend_find_cb(void *ud, const struct pending *p)
{
    struct pend_find *pf = ud;
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
    struct pend_find pf = {run, id, &m, 0};
    struct buf err = BUF_INIT;
    (void)s;
    queue_pending_foreach(f->t, pend_find_cb, &pf);
    if (pf.found != 1 && restore_find(f->r, run, id, &m, NULL, &err) < 0) {
        log_error("snapshot %s of run '%s': no manifest in the index or any region: %s", id, run,
                  buf_str(&err));
        f->problems++;
        buf_free(&err);
        return 0;
    }
    buf_free(&err);
    int e = fsck_add(f, &m);
    manifest_free(&m);
    return e;
}

static int ref_cmp(const void *a, const void *b)
{
    return memcmp(((const struct mchunk *)a)->id, ((const struct mchunk *)b)->id, HASH_LEN);
}

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
        f->problems++;
    }
    return 0;
}

int cmd_fsck(struct cli *c, int argc, char **argv)
{
    struct fsck f = {0};
    if (argc != 1) {
        bool help = argc == 2 && !strcmp(argv[1], "--help");
        fputs("usage: ckptsync fsck\nChecks the local index: every chunk's refcount against "
              "the snapshots that reference it.\n", help ? stdout : stderr);
        return help ? 0 : EXIT_USAGE;
    }
    if (cli_open_repo(c, 0, &f.r) < 0)
        return 1;
    int e = index_txn_begin(f.r->ix, false, &f.t);
    if (e == 0)
        e = index_snap_foreach(f.t, NULL, fsck_snap_cb, &f);
    if (e == 0) {
        qsort(f.refs, f.nrefs, sizeof(*f.refs), ref_cmp);
        e = index_chunk_foreach(f.t, fsck_chunk_cb, &f);
    }
    index_txn_abort(f.t);
    if (e < 0)
        log_error("fsck: %s", err_str(e));
    else if (!c->quiet)
        printf("fsck: %llu snapshots, %zu chunk references, %llu problems\n",
               (unsigned long long)f.snapshots, f.nrefs, (unsigned long long)f.problems);
    free(f.refs);
    return cli_close_repo(f.r, e < 0 || f.problems ? 1 : 0);
}
