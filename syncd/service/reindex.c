/*
 * reindex.c — the local index rebuilt from the regions (see reindex.h).
 *
 * Design notes.
 * - Read everything first, write once: the listings and manifests are
 *   gathered in memory (a hash table keyed by chunk id, ~56 bytes a chunk),
 *   then applied in one write transaction.  Listing a big bucket takes
 *   minutes; holding LMDB's single writer that long would stall a running
 *   daemon, and a crash in the middle would leave a half-built index.
 * - The daemon's pending work is checked inside that transaction, so work
 *   queued while the regions were being read is seen too.
 * - The source region's listing comes first, so its sizes win; the other
 *   healthy regions' listings only add presence bits (and a size where the
 *   source lacks the chunk).  Stored sizes legitimately differ between
 *   regions (another instance, another zstd level), so a different size is
 *   no reason to doubt a listing.
 * - Chunk objects are never read: raw_len comes from the manifests, the
 *   codec from the sizes.  Only committed manifests are read, one GET each.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "ckptsync/format.h"
#include "service/catalog.h"
#include "service/runlineage.h"
#include "service/manifests.h"
#include "store/queue.h"
#include "service/reindex.h"
#include "store/layout.h"

#define RX_PROGRESS_EVERY 4096

/* ---- chunks: an open-addressing table keyed by id ---------------------- */

struct rx_chunk {
    uint8_t id[HASH_LEN];
    uint32_t raw_len, stored_len;
    uint32_t presence; /* slot bits */
    uint64_t refcount;
    uint8_t used;
    uint8_t codec; /* the old record's, where the sizes do not tell */
};

struct rx_table {
    struct rx_chunk *v;
    size_t cap, n; /* cap: a power of two */
};

static size_t rx_slot_of(const struct rx_table *t, const uint8_t id[HASH_LEN])
{
    uint64_t h;
    memcpy(&h, id, sizeof(h)); /* SHA-256: any 8 bytes are uniform */
    size_t k = (size_t)h & (t->cap - 1);
    while (t->v[k].used && memcmp(t->v[k].id, id, HASH_LEN))
        k = (k + 1) & (t->cap - 1);
    return k;
}

static int rx_grow(struct rx_table *t)
{
    struct rx_table n = {.cap = t->cap ? t->cap * 2 : (size_t)1 << 16};
    if (!(n.v = calloc(n.cap, sizeof(*n.v))))
        return -ENOMEM;
    for (size_t i = 0; i < t->cap; i++)
        if (t->v[i].used)
            n.v[rx_slot_of(&n, t->v[i].id)] = t->v[i];
    n.n = t->n;
    free(t->v);
    *t = n;
    return 0;
}

/* The entry of id; with add, a new zeroed one if absent (NULL: no memory). */
static struct rx_chunk *rx_get(struct rx_table *t, const uint8_t id[HASH_LEN], bool add)
{
    if (!t->cap && !add)
        return NULL;
    if ((t->n + 1) * 10 > t->cap * 7 && add && rx_grow(t) < 0)
        return NULL;
    struct rx_chunk *c = &t->v[rx_slot_of(t, id)];
    if (c->used || !add)
        return c->used ? c : NULL;
    memcpy(c->id, id, HASH_LEN);
    c->used = 1;
    t->n++;
    return c;
}

/* ---- snapshots ---------------------------------------------------------- */

struct rx_snap {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
    struct index_snap rec;
};

struct rx {
    struct repo *r;
    const struct reindex_opts *o;
    struct reindex_stats *st;
    struct buf *err;
    struct rx_table chunks;
    struct rx_snap *snaps; /* sorted by run, id (catalog order), then appended */
    size_t nsnaps, snaps_cap, nsorted;
    /* the listing under way */
    size_t cur;
    uint64_t ignored;
    char what[64 + CONFIG_NAME_MAX];
    /* the manifests */
    uint64_t done, total;
};

static void rx_progress(struct rx *x, const char *what, uint64_t done, uint64_t total)
{
    if (x->o->progress)
        x->o->progress(x->o->progress_ud, what, done, total);
}

static int rx_snap_cmp(const void *a, const void *b)
{
    const struct rx_snap *x = a, *y = b;
    int c = strcmp(x->run, y->run);
    return c ? c : strcmp(x->id, y->id);
}

static struct rx_snap *rx_snap_find(struct rx *x, const char *run, const char *id)
{
    struct rx_snap key;
    snprintf(key.run, sizeof(key.run), "%s", run);
    snprintf(key.id, sizeof(key.id), "%s", id);
    return x->nsorted ? bsearch(&key, x->snaps, x->nsorted, sizeof(key), rx_snap_cmp) : NULL;
}

static struct rx_snap *rx_snap_add(struct rx *x, const char *run, const char *id)
{
    if (x->nsnaps == x->snaps_cap) {
        size_t cap = x->snaps_cap ? x->snaps_cap * 2 : 64;
        struct rx_snap *v = realloc(x->snaps, cap * sizeof(*v));
        if (!v)
            return NULL;
        x->snaps = v;
        x->snaps_cap = cap;
    }
    struct rx_snap *s = &x->snaps[x->nsnaps++];
    memset(s, 0, sizeof(*s));
    snprintf(s->run, sizeof(s->run), "%s", run);
    snprintf(s->id, sizeof(s->id), "%s", id);
    return s;
}

/* The record's step, time, bytes and files, and the manifest's references
 * counted. */
static int rx_count_manifest(struct rx *x, const struct manifest *m, struct index_snap *rec)
{
    rec->step = m->step;
    rec->time = m->time;
    rec->nfiles = manifest_regular_files(m);
    rec->bytes = 0;
    for (size_t f = 0; f < m->nfiles; f++)
        if (m->files[f].type == MFILE_REG)
            rec->bytes += m->files[f].size;
    for (size_t k = 0; k < m->nchunks; k++) {
        struct rx_chunk *c = rx_get(&x->chunks, m->chunks[k].id, true);
        if (!c)
            return -ENOMEM;
        c->refcount++;
        c->raw_len = m->chunks[k].len;
    }
    return 0;
}

/* ---- the source region --------------------------------------------------- */

static int rx_pick_source(struct rx *x, size_t *ret)
{
    struct repo *r = x->r;
    for (size_t i = 0; i < repo_nregions(r); i++) {
        const char *name = repo_region(r, i)->conf.name;
        if (x->o->region ? strcmp(name, x->o->region) : repo_region_error(r, i) != 0)
            continue;
        if (repo_region_error(r, i)) {
            buf_printf(x->err, "region '%s' is not usable: %s", name,
                       region_last_error(repo_region(r, i))[0]
                           ? region_last_error(repo_region(r, i))
                           : err_str(repo_region_error(r, i)));
            return repo_region_error(r, i);
        }
        *ret = i;
        return 0;
    }
    if (!x->o->region) { /* repo_open leaves at least one healthy; a later failure may not */
        buf_printf(x->err, "no region is usable");
        return CKS_E_QUORUM;
    }
    buf_printf(x->err, "no region named '%s' in the configuration (regions:", x->o->region);
    for (size_t i = 0; i < repo_nregions(r); i++)
        buf_printf(x->err, "%s %s", i ? "," : "", repo_region(r, i)->conf.name);
    buf_printf(x->err, ")");
    return -ENOENT;
}

/* ---- listings of chunks/ ------------------------------------------------ */

static int rx_list_cb(void *ud, const char *key, uint64_t size)
{
    struct rx *x = ud;
    struct reindex_region_stats *rs = &x->st->region[x->cur];
    struct layout_key k;
    const uint8_t *id = k.id;

    /* a chunk's key (canonical: store/layout.h), and an object that can be
     * a chunk (header plus at least one byte): anything else (a temp file,
     * a torn or foreign object) is not one */
    if (layout_parse(key, &k) < 0 || k.kind != LAYOUT_CHUNK || size <= CKS_CHUNK_HEADER_LEN ||
        size > UINT32_MAX) {
        x->ignored++;
        return 0;
    }
    struct rx_chunk *c = rx_get(&x->chunks, id, true);
    if (!c)
        return -ENOMEM;
    if (!c->stored_len)
        c->stored_len = (uint32_t)size;
    c->presence |= 1u << repo_region(x->r, x->cur)->slot;
    rs->chunks++;
    rs->bytes += size;
    if (rs->chunks % RX_PROGRESS_EVERY == 0)
        rx_progress(x, x->what, rs->chunks, 0);
    return 0;
}

static int rx_list_region(struct rx *x, size_t i)
{
    struct region *rg = repo_region(x->r, i);
    struct reindex_region_stats *rs = &x->st->region[i];
    char prefix[REGION_KEY_MAX];
    x->cur = i;
    x->ignored = 0;
    snprintf(x->what, sizeof(x->what), "chunks in '%s'", rg->conf.name);
    layout_prefix(LAYOUT_CHUNK, NULL, prefix);
    int e = region_list(rg, prefix, rx_list_cb, x);
    if (e == -ENOENT) /* a dir region with nothing stored yet */
        e = 0;
    rx_progress(x, x->what, rs->chunks, rs->chunks);
    if (e == 0) {
        rs->listed = true;
        if (x->ignored)
            log_warn("region '%s': %llu object(s) under %s are not chunk objects; ignored",
                     rg->conf.name, (unsigned long long)x->ignored, prefix);
    } else if (e != -ENOMEM) {
        snprintf(rs->error, sizeof(rs->error), "%s", region_last_error(rg));
    }
    return e;
}

/* The source first (its failure fails the reindex), then every other
 * healthy region (a failure leaves its bits clear: the next snapshot asks
 * it, which is slower, never wrong). */
static int rx_list_all(struct rx *x)
{
    struct repo *r = x->r;
    size_t src = x->st->source;
    int e = rx_list_region(x, src);
    if (e < 0) {
        if (e != -ENOMEM)
            buf_printf(x->err, "listing the chunks of region '%s': %s",
                       repo_region(r, src)->conf.name, x->st->region[src].error);
        return e;
    }
    for (size_t i = 0; i < repo_nregions(r); i++) {
        if (i == src)
            continue;
        if (repo_region_error(r, i)) {
            snprintf(x->st->region[i].error, sizeof(x->st->region[i].error), "%s",
                     region_last_error(repo_region(r, i))[0] ? region_last_error(repo_region(r, i))
                                                             : err_str(repo_region_error(r, i)));
            continue;
        }
        if ((e = rx_list_region(x, i)) == -ENOMEM)
            return e;
        if (e < 0) {
            log_warn("%s; its chunks stay unconfirmed in the index", x->st->region[i].error);
            repo_region_fail(r, i, e);
        }
    }
    return 0;
}

/* ---- committed snapshots --------------------------------------------------- */

/* The manifest of (run, id): the source's copy first, else any region's. */
static int rx_manifest(struct rx *x, const struct runlineage_snap *ls, const char *run,
                       const char *id, struct manifest *m, struct buf *ferr)
{
    size_t src = x->st->source;
    if (repo_region_ok(x->r, src) && (ls->manifests >> src & 1) &&
        manifests_read_in(x->r, src, run, id, m) == 0)
        return 0;
    return catalog_find(x->r, run, id, m, NULL, ferr);
}

static int rx_snapshot(struct rx *x, struct runlineage_view *v, const char *run, const char *id)
{
    struct runlineage_snap *ls = runlineage_find(v, id);
    struct buf ferr = BUF_INIT;
    struct manifest m;
    /* where it is committed: its commit records decide; a snapshot with
     * none anywhere counts where its manifest is, as restore counts it */
    uint32_t where = ls ? (ls->commits ? ls->commits : ls->manifests) : 0;
    if (!where)
        return 0; /* gone between the catalog's listing and the run's */
    int e = rx_manifest(x, ls, run, id, &m, &ferr);
    if (e < 0 && e != -ENOMEM) {
        if (!x->o->force) {
            buf_printf(
                x->err,
                "snapshot %s of run '%s' is committed, but no region gives a valid "
                "manifest (%s); nothing was changed: repair it (verify --repair) or leave it "
                "out with --force",
                id, run, buf_str(&ferr));
        } else {
            log_warn("snapshot %s of run '%s': no region gives a valid manifest; left out", id,
                     run);
            x->st->skipped++;
            e = 0;
        }
        buf_free(&ferr);
        return e;
    }
    buf_free(&ferr);
    if (e < 0)
        return e;
    struct rx_snap *s = rx_snap_add(x, run, id);
    e = s ? rx_count_manifest(x, &m, &s->rec) : -ENOMEM;
    manifest_free(&m);
    if (e < 0)
        return e;
    for (size_t i = 0; i < repo_nregions(x->r); i++)
        if (where >> i & 1) {
            s->rec.committed |= 1u << repo_region(x->r, i)->slot;
            x->st->region[i].snapshots++;
        }
    return 0;
}

/* One run: its lineage view (one scan), then each snapshot's manifest. */
static int rx_run(struct rx *x, const struct catalog_snap *cs, size_t n)
{
    struct runlineage_view v;
    int e = runlineage_scan(x->r, repo_regions(x->r), cs[0].run, &v, x->err);
    if (e < 0)
        return e;
    for (size_t k = 0; k < n && e == 0; k++) {
        e = rx_snapshot(x, &v, cs[k].run, cs[k].id);
        rx_progress(x, "manifests", ++x->done, x->total);
    }
    runlineage_view_free(&v);
    return e;
}

static int rx_snapshots(struct rx *x)
{
    struct catalog_snap *cs = NULL;
    size_t n = 0;
    int e = catalog_snapshots(x->r, NULL, &cs, &n);
    if (e == -ENOENT)
        return 0;
    if (e < 0) {
        buf_printf(x->err, "listing the snapshots: %s", err_str(e));
        return e;
    }
    x->total = n;
    for (size_t k = 0, next; k < n && e == 0; k = next) {
        for (next = k; next < n && !strcmp(cs[next].run, cs[k].run); next++)
            ;
        e = rx_run(x, cs + k, next - k);
    }
    free(cs);
    x->nsorted = x->nsnaps; /* catalog order: sorted by run, then id */
    return e;
}

/* ---- applying: one write transaction ------------------------------------- */

struct rx_pend {
    struct rx *x;
    struct index_txn *t;
    uint64_t n;
    int err;
};

static int rx_pend_count(void *ud, const struct pending *p)
{
    (void)p;
    ((struct rx_pend *)ud)->n++;
    return 0;
}

/* A pending snapshot no region lists yet keeps its record (committed
 * nowhere), and its references count, as fsck expects. */
static int rx_pend_keep(void *ud, const struct pending *p)
{
    struct rx_pend *pc = ud;
    struct rx *x = pc->x;
    struct manifest m;
    struct index_snap old;
    if (rx_snap_find(x, p->run, p->id))
        return 0; /* committed somewhere: counted from the regions */
    if (manifest_parse(p->manifest, p->manifest_len, &m, NULL) < 0) {
        log_warn("the daemon's pending snapshot %s of run '%s' has a damaged manifest; its record "
                 "is not kept",
                 p->id, p->run);
        return 0;
    }
    struct rx_snap *s = rx_snap_add(x, p->run, p->id);
    int e = s ? rx_count_manifest(x, &m, &s->rec) : -ENOMEM;
    manifest_free(&m);
    if (e < 0)
        return pc->err = e;
    if (index_snap_get(pc->t, p->run, p->id, &old) == 0)
        memcpy(s->rec.manifest_digest, old.manifest_digest, HASH_LEN);
    s->rec.committed = 0;
    x->st->pending_kept++;
    return 0;
}

static int rx_pending(struct rx *x, struct index_txn *t)
{
    struct rx_pend pc = {.x = x, .t = t};
    uint64_t queued = 0;
    int e = queue_pending_foreach(t, rx_pend_count, &pc);
    for (unsigned slot = 0; e == 0 && slot < INDEX_MAX_REGIONS; slot++) {
        uint64_t chunks = 0, bytes = 0, oldest = 0;
        if ((e = queue_stats(t, slot, &chunks, &bytes, &oldest)) == -ENOENT)
            e = 0;
        queued += chunks;
    }
    if (e < 0 || (pc.n == 0 && queued == 0))
        return e;
    if (!x->o->force) {
        buf_printf(x->err,
                   "the daemon has pending work (%llu snapshot(s) not yet in every region, "
                   "%llu chunk upload(s) queued); reindex changed nothing: let it finish "
                   "(ckptsync flush) or pass --force",
                   (unsigned long long)pc.n, (unsigned long long)queued);
        return -EBUSY;
    }
    e = queue_pending_foreach(t, rx_pend_keep, &pc);
    return e < 0 ? e : pc.err;
}

struct rx_old {
    struct rx *x;
    struct rx_snap *gone; /* old snapshot records to delete */
    size_t ngone, cap;
    int err;
};

static int rx_old_snap_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct rx_old *o = ud;
    (void)s;
    if (rx_snap_find(o->x, run, id))
        return 0;
    if (o->ngone == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        struct rx_snap *v = realloc(o->gone, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        o->gone = v;
        o->cap = cap;
    }
    snprintf(o->gone[o->ngone].run, sizeof(o->gone[0].run), "%s", run);
    snprintf(o->gone[o->ngone].id, sizeof(o->gone[0].id), "%s", id);
    o->ngone++;
    return 0;
}

/* Every snapshot record: the old ones the regions do not confirm deleted
 * (collected first: a cursor is not walked while its table changes), the
 * new ones written. */
static int rx_put_snaps(struct rx *x, struct index_txn *t)
{
    struct rx_old o = {.x = x};
    qsort(x->snaps, x->nsnaps, sizeof(*x->snaps), rx_snap_cmp);
    x->nsorted = x->nsnaps;
    int e = index_snap_foreach(t, NULL, rx_old_snap_cb, &o);
    for (size_t k = 0; e == 0 && k < o.ngone; k++)
        e = index_snap_del(t, o.gone[k].run, o.gone[k].id);
    x->st->dropped_snapshots = o.ngone;
    free(o.gone);
    for (size_t k = 0; e == 0 && k < x->nsnaps; k++) {
        e = index_snap_put(t, x->snaps[k].run, x->snaps[k].id, &x->snaps[k].rec);
        x->st->runs += k == 0 || strcmp(x->snaps[k - 1].run, x->snaps[k].run);
    }
    x->st->snapshots = x->nsnaps;
    return e;
}

/* The old chunk records: what the manifests do not tell (raw_len of an
 * unreferenced chunk, a codec the sizes cannot give) is kept; a chunk no
 * region lists and nothing references keeps its record, presence cleared. */
static int rx_old_chunk_cb(void *ud, const uint8_t id[HASH_LEN], const struct index_chunk *c)
{
    struct rx_old *o = ud;
    struct rx_chunk *n = rx_get(&o->x->chunks, id, false);
    if (!n && c->presence == 0 && c->refcount == 0)
        return 0; /* already what the regions say */
    if (!n && !(n = rx_get(&o->x->chunks, id, true)))
        return -ENOMEM;
    if (!n->raw_len)
        n->raw_len = c->raw_len;
    if (!n->stored_len)
        n->stored_len = c->stored_len;
    n->codec = c->codec;
    o->x->st->dropped_chunks += n->presence == 0 && c->presence != 0;
    return 0;
}

static int rx_chunk_cmp(const void *a, const void *b)
{
    return memcmp(((const struct rx_chunk *)a)->id, ((const struct rx_chunk *)b)->id, HASH_LEN);
}

/* Writes every chunk record, in key order (the table is compacted and
 * sorted: no lookups after this). */
static int rx_put_chunks(struct rx *x, struct index_txn *t)
{
    struct rx_table *tb = &x->chunks;
    struct reindex_stats *st = x->st;
    size_t n = 0;
    int e = 0;
    for (size_t i = 0; i < tb->cap; i++)
        if (tb->v[i].used)
            tb->v[n++] = tb->v[i];
    qsort(tb->v, n, sizeof(*tb->v), rx_chunk_cmp);
    for (size_t i = 0; e == 0 && i < n; i++) {
        const struct rx_chunk *c = &tb->v[i];
        struct index_chunk rec = {.raw_len = c->raw_len,
                                  .stored_len = c->stored_len,
                                  .codec = c->codec,
                                  .presence = c->presence,
                                  .refcount = c->refcount};
        /* The writer keeps raw only when nothing shrinks the chunk; a
         * compressed one is zstd or planes, which the sizes do not tell
         * (the old record's word is kept; the codec is informational). */
        if (c->raw_len && c->stored_len && c->stored_len == c->raw_len + CKS_CHUNK_HEADER_LEN)
            rec.codec = CKS_CHUNK_CODEC_RAW;
        else if (c->raw_len && c->stored_len && rec.codec != CKS_CHUNK_CODEC_PLANES)
            rec.codec = CKS_CHUNK_CODEC_ZSTD;
        e = index_chunk_put(t, c->id, &rec);
        st->chunks += c->presence != 0;
        st->bytes += c->presence ? c->stored_len : 0;
        st->referenced += c->refcount != 0;
        st->unreferenced += c->presence && !c->refcount;
        st->missing += c->refcount && !c->presence;
        st->references += c->refcount;
    }
    tb->n = 0;
    memset(tb->v, 0, tb->cap * sizeof(*tb->v));
    return e;
}

static int rx_apply(struct rx *x)
{
    struct index_txn *t;
    struct rx_old o = {.x = x};
    int e = index_txn_begin(repo_index(x->r), true, &t);
    if (e < 0) {
        buf_printf(x->err, "opening an index transaction: %s", err_str(e));
        return e;
    }
    if ((e = rx_pending(x, t)) == 0 && (e = rx_put_snaps(x, t)) == 0 &&
        (e = index_chunk_foreach(t, rx_old_chunk_cb, &o)) == 0)
        e = rx_put_chunks(x, t);
    if (e < 0) {
        index_txn_abort(t);
        if (!buf_str(x->err)[0])
            buf_printf(x->err, "writing the index: %s", err_str(e));
        return e;
    }
    if ((e = index_txn_commit(t)) < 0)
        buf_printf(x->err,
                   "committing the index: %s (a durability failure: the old index is "
                   "left, or the new one)",
                   err_str(e));
    return e;
}

/* ---- entry point ---------------------------------------------------------- */

static double rx_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int reindex_run(struct repo *r, const struct reindex_opts *o, struct reindex_stats *ret,
                struct buf *err)
{
    struct rx x = {.r = r, .o = o, .st = ret, .err = err};
    double t0 = rx_now();
    memset(ret, 0, sizeof(*ret));
    int e = rx_pick_source(&x, &ret->source);
    if (e == 0)
        e = rx_list_all(&x);
    if (e == 0)
        e = rx_snapshots(&x);
    if (e == 0)
        e = rx_apply(&x);
    if (e == -ENOMEM && !buf_str(err)[0])
        buf_printf(err, "out of memory");
    free(x.chunks.v);
    free(x.snaps);
    ret->seconds = rx_now() - t0;
    return e;
}
