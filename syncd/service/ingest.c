/*
 * ingest.c — from a completed unit to queued work, on its own thread.
 *
 * Design notes.
 * - Pin first, read second: every regular file is hardlinked into the pin
 *   folder before any byte is read, and read through the link.  Whatever
 *   the framework does to the original names afterwards (rotate, rename,
 *   delete), the inodes we snapshot stay until the regions have them.
 * - Torn files: identity (size, mtime, ctime) is taken before and after
 *   the read of each pinned file; a change restarts the whole unit, so a
 *   snapshot never mixes two versions of a checkpoint.  (Rewrites after
 *   the read are caught by the replicator's digest check on upload.)
 * - Files unchanged since an earlier snapshot are not read: the index maps
 *   their identity (index_file_key_of: dev, ino, size, mtime, ctime; the
 *   same key as the one-shot snapshot's) to their chunk list.  It is taken
 *   after the pin link is made, so the link is not a change; removing the
 *   pin once the snapshot is replicated moves ctime again, so a later
 *   snapshot of the same file reads it again: slower, never wrong (a
 *   rewrite in place that keeps size and mtime must not be taken for the
 *   old bytes).
 * - Everything the snapshot needs is written in one transaction: the
 *   pending record, the snapshot record with its refcounts, the file
 *   records, and for every region the chunks it lacks plus the publish
 *   entry.  A crash before it leaves a stale pin folder (removed at the
 *   next start); after it, the replicator resumes from the queue.
 * - Each chunk some region lacks is encoded here, once, and handed to the
 *   region workers through the replicator's object buffer
 *   (service/objbuf.h) while the unit is still being read: uploads start
 *   before the snapshot is committed, and no worker reads, hashes or
 *   compresses the chunk again.  A worker that finds its chunk no longer
 *   buffered (it fell behind) reads it back from the pin.
 * - Memory: one read buffer of two maximal chunks, one encoded object,
 *   the manifest; the buffer's budget is the replicator's.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "service/ingest.h"
#include "service/lineage.h"
#include "service/metrics.h"
#include "service/objbuf.h"
#include "service/pin.h"
#include "service/pool.h"
#include "service/queue.h"
#include "service/scan.h"
#include "service/snapshot.h"
#include "service/walk.h"

#define INGEST_MAX_JOBS 4096
#define INGEST_RACY_NS 20000000 /* 20 ms: several timestamp ticks */

struct cref { /* one chunk reference, with where its bytes are */
    uint8_t id[HASH_LEN];
    uint32_t len, file;
    uint64_t off;
    uint32_t fed; /* slots it was buffered for (ing_feed) */
    bool fresh;   /* no region had it when it was read */
};

struct ingester {
    struct repo *r;
    /* The ingest thread's own handles on the regions (the workers own
     * theirs): for reading a run's lineage, never for uploads. */
    struct region *regions[CONFIG_MAX_REGIONS];
    struct replicator *rp;
    struct metrics *m;
    char *root;
    int notify_fd;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    struct ingest_job *jobs;
    size_t njobs;
    bool running;
    struct ingest_done *done;
    size_t ndone, done_cap;
    /* the chunk pipeline (hash, lookup, encode, buffer) on the pool, with
     * each pool thread's encoder; njobs jobs applied in order through win */
    struct pool *pool;
    struct chunkobj_ctx *z;
    struct buf *objs;
    struct buf *envs; /* per pool thread: the sealed envelope (encrypted repositories) */
    struct ijob *ijobs;
    struct pool_job **jptr;
    size_t nijobs;
    struct pool_window win;
};

struct ing;

/* One chunk in flight on the pool. */
struct ijob {
    struct pool_job pj;
    struct ing *g;
    struct buf raw; /* a copy of its bytes */
    uint64_t off;
    unsigned width; /* from the file's metadata (scan_width), 0 = none */
    /* outcome */
    int err;
    uint8_t id[HASH_LEN];
    uint32_t fed;
    bool fresh;
};

/* Per-unit work state. */
struct ing {
    struct ingester *ig;
    const struct ingest_job *job;
    struct ingest_done *res;
    struct walk w;
    struct manifest m;
    struct buf pin;
    bool pinned;
    struct scan scan;
    struct cref *refs;
    size_t nrefs, refs_cap;
    uint32_t cur_file;
    struct index_file_key *keys; /* per manifest file, for the file records */
    struct stat *kept;           /* per walk entry: the identity of a file found
                                  * unchanged before pinning (st_ino 0: none) */
    uint8_t content[HASH_LEN];
    uint64_t queued_bytes;
    uint64_t new_bytes; /* of the distinct chunks no region had */
    uint32_t all;       /* slot bits of every region */
    int jfail;          /* first error of a job applied since the last drain */
};

/* ---- reading ----------------------------------------------------------- */

static int ing_ref(struct ing *g, const uint8_t id[HASH_LEN], uint32_t len, uint64_t off,
                   uint32_t fed, bool fresh)
{
    if (g->nrefs == g->refs_cap) {
        size_t cap = g->refs_cap ? g->refs_cap * 2 : 256;
        struct cref *v = realloc(g->refs, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        g->refs = v;
        g->refs_cap = cap;
    }
    struct cref *c = &g->refs[g->nrefs++];
    memcpy(c->id, id, HASH_LEN);
    c->len = len;
    c->file = g->cur_file;
    c->off = off;
    c->fed = fed;
    c->fresh = fresh;
    return manifest_add_chunk(&g->m, id, len);
}

/* Encodes a chunk some region lacks and hands it to the region workers
 * (this may wait while the fastest quorum catches up). */
static int ing_feed(struct ing *g, size_t thread, const uint8_t id[HASH_LEN], const uint8_t *data,
                    size_t len, unsigned width, uint32_t *ret_fed, bool *ret_fresh)
{
    struct chunkobj_ctx *z = &g->ig->z[thread];
    struct buf *obj = &g->ig->objs[thread];
    struct repo *r = g->ig->r;
    struct objbuf *ob = replicator_objbuf(g->ig->rp);
    struct index_chunk c = {0};
    struct index_txn *t;
    enum chunkobj_codec codec;
    int e = index_txn_begin(r->ix, false, &t);
    if (e < 0)
        return e;
    e = index_chunk_get(t, id, &c);
    index_txn_abort(t);
    if (e < 0 && e != -ENOENT)
        return e;
    uint32_t needs = g->all & ~(e == 0 ? c.presence : 0);
    if (!needs || objbuf_has(ob, id))
        return 0;
    *ret_fresh = e == -ENOENT || c.presence == 0;
    struct chunkobj_opts o = repo_chunk_opts(r);
    o.width = width;
    if ((e = chunkobj_encode(z, data, len, &o, obj, &codec)) < 0)
        return e;
    /* Sealed once here for every region (an encrypted repository), not by
     * each region worker: one AES-GCM pass per chunk instead of three. */
    char key[REGION_KEY_MAX];
    region_chunk_key(id, key);
    struct buf *env = &g->ig->envs[thread];
    int sealed = region_seal(g->ig->regions[0], key, obj->data, obj->len, env);
    if (sealed < 0)
        return sealed;
    const struct buf *put = sealed ? env : obj;
    if ((e = objbuf_put(ob, id, (uint8_t)codec, (uint32_t)len, put->data, put->len, needs,
                        sealed == 1)) < 0)
        return e;
    *ret_fed = needs;
    replicator_kick(g->ig->rp);
    return 0;
}

/* The job, on pool thread t: hash, then ing_feed. */
static void ijob_run(struct pool_job *pj, size_t t)
{
    struct ijob *j = (struct ijob *)pj;
    j->fed = 0;
    j->fresh = false;
    repo_chunk_id(j->g->ig->r, j->raw.data, j->raw.len, j->id);
    j->err = ing_feed(j->g, t, j->id, j->raw.data, j->raw.len, j->width, &j->fed, &j->fresh);
}

/* Waits for the oldest job and applies it (its reference, in order). */
static int ing_chunk_next(struct ing *g)
{
    struct ijob *j = (struct ijob *)pool_window_oldest(&g->ig->win);
    int e = j->err < 0 ? j->err : ing_ref(g, j->id, (uint32_t)j->raw.len, j->off, j->fed, j->fresh);
    return g->jfail ? g->jfail : (g->jfail = e);
}

/* Every job applied; the first error among them. */
static int ing_drain(struct ing *g)
{
    while (g->ig->win.count)
        ing_chunk_next(g);
    int e = g->jfail;
    g->jfail = 0;
    return e;
}

/* The scan's callback: the chunk goes to the pool as a job. */
static int ing_chunk(void *ud, const uint8_t *data, size_t len, uint64_t off)
{
    struct ing *g = ud;
    struct ingester *ig = g->ig;
    if (pool_window_full(&ig->win) && ing_chunk_next(g) < 0)
        return g->jfail;
    struct ijob *j = &ig->ijobs[pool_window_next(&ig->win)];
    buf_reset(&j->raw);
    if (buf_append(&j->raw, data, len) < 0)
        return -ENOMEM;
    j->off = off;
    j->width = scan_width(&g->scan, off, len);
    j->g = g;
    j->pj.run = ijob_run;
    pool_window_submit(&ig->win);
    return 0;
}

/* Chunks of an unchanged file from the index; 1 when found. */
static int ing_reuse(struct ing *g, const struct index_file_key *k, uint8_t digest[HASH_LEN])
{
    struct index_txn *t;
    struct mchunk *v = NULL;
    size_t n = 0;
    int e = index_txn_begin(g->ig->r->ix, false, &t);
    if (e < 0)
        return e;
    e = index_file_get(t, k, digest, &v, &n);
    index_txn_abort(t);
    if (e == -ENOENT)
        return 0;
    uint64_t off = 0;
    for (size_t i = 0; e == 0 && i < n; i++) {
        e = ing_ref(g, v[i].id, v[i].len, off, 0, false);
        off += v[i].len;
    }
    free(v);
    return e < 0 ? e : 1;
}

static int ing_open(struct ing *g, size_t k)
{
    struct buf p = BUF_INIT;
    if (g->pinned)
        buf_printf(&p, "%s/%zu", buf_str(&g->pin), k);
    else
        buf_printf(&p, "%s/%s", g->w.base, g->w.v[k].path);
    int fd = open(buf_str(&p), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
    if (fd < 0 && errno == EPERM)
        fd = open(buf_str(&p), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        fd = -errno;
        snprintf(g->res->msg, sizeof(g->res->msg), "opening \"%s\": %s", buf_str(&p),
                 strerror(-fd));
    }
    buf_free(&p);
    return fd;
}

/* A write in the same clock tick as the file's last one may leave mtime
 * and ctime unchanged (timestamps are coarse), so a file modified in the
 * last few milliseconds is given time to age before its identity is
 * trusted ("racy" files, as git calls them). */
static void ing_age(int fd, struct stat *st)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t age_ns = ((int64_t)now.tv_sec - st->st_mtim.tv_sec) * 1000000000 +
                     (now.tv_nsec - st->st_mtim.tv_nsec);
    if (age_ns >= 0 && age_ns < INGEST_RACY_NS) {
        struct timespec d = {0, INGEST_RACY_NS};
        nanosleep(&d, NULL);
        fstat(fd, st);
    }
}

static int ing_file(struct ing *g, size_t k)
{
    struct stat st1, st2;
    uint8_t digest[HASH_LEN];
    uint64_t got = 0;
    int e, fd = ing_open(g, k);
    if (fd < 0)
        return fd;
    if (fstat(fd, &st1) < 0) {
        e = -errno;
        goto out;
    }
    ing_age(fd, &st1);
    g->cur_file = (uint32_t)g->m.nfiles;
    if ((e = manifest_add_file(&g->m, MFILE_REG, g->w.v[k].path, st1.st_mode & 07777, NULL)) < 0)
        goto out;
    manifest_set_mtime(&g->m, st1.st_mtim.tv_sec, st1.st_mtim.tv_nsec);
    index_file_key_of(&st1, &g->keys[g->m.nfiles - 1]);
    e = ing_reuse(g, &g->keys[g->m.nfiles - 1], digest);
    if (e == 0) {
        e = scan_fd(&g->scan, fd, ing_chunk, g, &got, digest);
        int de = ing_drain(g); /* the file's references, in order */
        if (e == 0 || (e > CKS_E_BASE && de < 0))
            e = de;
        if (e == 0 &&
            (fstat(fd, &st2) < 0 || !index_file_same(&st1, &st2) || got != (uint64_t)st1.st_size))
            e = CKS_E_CHANGED;
    }
    if (e >= 0) {
        manifest_set_digest(&g->m, digest);
        g->res->files++;
        g->res->bytes += (uint64_t)st1.st_size;
        e = 0;
    }
out:
    close(fd);
    return e;
}

/* 1 when the index knows the file by this identity and every configured
 * region holds each of its chunks. */
static int ing_unchanged_file(struct ing *g, const struct stat *st)
{
    struct index_file_key k;
    struct index_txn *t;
    struct mchunk *v = NULL;
    uint8_t digest[HASH_LEN];
    size_t n = 0;
    index_file_key_of(st, &k);
    int e = index_txn_begin(g->ig->r->ix, false, &t);
    if (e < 0)
        return e;
    e = index_file_get(t, &k, digest, &v, &n);
    for (size_t i = 0; e == 0 && i < n; i++) {
        struct index_chunk c;
        if (index_chunk_get(t, v[i].id, &c) < 0 || (c.presence & g->all) != g->all)
            e = -ENOENT;
    }
    index_txn_abort(t);
    free(v);
    return e == 0 ? 1 : e == -ENOENT ? 0 : e;
}

/* A file found unchanged before pinning: its chunks from the index, not
 * read.  CKS_E_CHANGED if its record went meanwhile (the unit is taken
 * again, and then it is pinned and read). */
static int ing_kept_file(struct ing *g, size_t k)
{
    const struct stat *st = &g->kept[k];
    uint8_t digest[HASH_LEN];
    g->cur_file = (uint32_t)g->m.nfiles;
    int e = manifest_add_file(&g->m, MFILE_REG, g->w.v[k].path, st->st_mode & 07777, NULL);
    if (e < 0)
        return e;
    manifest_set_mtime(&g->m, st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
    index_file_key_of(st, &g->keys[g->m.nfiles - 1]);
    if ((e = ing_reuse(g, &g->keys[g->m.nfiles - 1], digest)) <= 0)
        return e < 0 ? e : CKS_E_CHANGED;
    manifest_set_digest(&g->m, digest);
    g->res->files++;
    g->res->bytes += (uint64_t)st->st_size;
    return 0;
}

/* ---- pinning ----------------------------------------------------------- */

static int ing_pin(struct ing *g)
{
    int e = pin_create(g->ig->root, g->m.id, &g->pin);
    if (e < 0)
        return e;
    g->pinned = true;
    if (!(g->kept = calloc(g->w.n ? g->w.n : 1, sizeof(*g->kept))))
        return -ENOMEM;
    for (size_t k = 0; k < g->w.n; k++) {
        struct buf src = BUF_INIT;
        struct stat st;
        if (g->w.v[k].type != MFILE_REG)
            continue;
        buf_printf(&src, "%s/%s", g->w.base, g->w.v[k].path);
        /* a file unchanged since its last snapshot, with every chunk in every
         * region, is not read: it needs no pin (and no pin link moving its
         * ctime, which is part of its identity) */
        if (lstat(buf_str(&src), &st) == 0 && S_ISREG(st.st_mode) && st.st_ino &&
            ing_unchanged_file(g, &st) == 1) {
            g->kept[k] = st;
            buf_free(&src);
            continue;
        }
        e = pin_link(buf_str(&g->pin), k, buf_str(&src));
        buf_free(&src);
        if (e == -EXDEV || e == -EPERM || e == -EMLINK) {
            log_warn("\"%s\": cannot pin its files (%s); reading them in place", g->job->unit,
                     strerror(-e));
            pin_remove(buf_str(&g->pin));
            g->pinned = false;
            return 0;
        }
        if (e < 0)
            return e == -ENOENT ? CKS_E_CHANGED : e; /* rotated away meanwhile */
    }
    return 0;
}

/* ---- the manifest ------------------------------------------------------ */

static int ing_manifest(struct ing *g)
{
    char host[256] = "unknown";
    const char *inst = getenv("CKPTSYNC_INSTANCE_TYPE");
    struct repo *r = g->ig->r;
    int e;
    manifest_init(&g->m);
    if ((e = snapshot_make_id(g->m.id, sizeof(g->m.id))) < 0)
        return e;
    gethostname(host, sizeof(host) - 1);
    g->m.step = g->job->step;
    g->m.time = (int64_t)time(NULL);
    g->m.chunk_min = r->params.chunk_min;
    g->m.chunk_avg = r->params.chunk_avg;
    g->m.chunk_max = r->params.chunk_max;
    g->m.normalization = r->params.normalization;
    if ((e = manifest_set_str(&g->m.run, g->job->run)) < 0 ||
        (e = manifest_set_str(&g->m.host, host)) < 0 ||
        (e = manifest_set_str(&g->m.root, g->w.v[0].path)) < 0)
        return e;
    if (inst && inst[0] && (e = manifest_set_str(&g->m.instance, inst)) < 0)
        return e;
    snapshot_parent(r, g->job->run, &g->m.parent);
    return lineage_run_gen(r, g->ig->regions, g->job->run, &g->m.gen);
}

static int ing_entries(struct ing *g)
{
    g->keys = calloc(g->w.n ? g->w.n : 1, sizeof(*g->keys));
    if (!g->keys)
        return -ENOMEM;
    for (size_t k = 0; k < g->w.n; k++) {
        const struct walk_entry *we = &g->w.v[k];
        int e =
            we->type == MFILE_REG
                ? (g->kept && g->kept[k].st_ino ? ing_kept_file(g, k) : ing_file(g, k))
                : manifest_add_file(&g->m, we->type, we->path, we->st.st_mode & 07777, we->link);
        if (e < 0)
            return e;
        if (we->type != MFILE_REG)
            manifest_set_mtime(&g->m, we->st.st_mtim.tv_sec, we->st.st_mtim.tv_nsec);
    }
    return 0;
}

/* What the unit holds, without id, time or host: equal digests mean an
 * unchanged unit. */
static void ing_content(struct ing *g)
{
    struct hash h;
    if (hash_init(&h) < 0) {
        memset(g->content, 0, sizeof(g->content));
        return;
    }
    for (size_t k = 0; k < g->m.nfiles; k++) {
        const struct mfile *f = &g->m.files[k];
        uint8_t head[1 + 4 + 8];
        head[0] = (uint8_t)f->type;
        memcpy(head + 1, &f->mode, 4);
        memcpy(head + 5, &f->size, 8);
        hash_update(&h, head, sizeof(head));
        hash_update(&h, f->path, strlen(f->path) + 1);
        if (f->link)
            hash_update(&h, f->link, strlen(f->link) + 1);
        hash_update(&h, f->digest, HASH_LEN);
    }
    hash_final(&h, g->content);
    hash_free(&h);
}

static void ing_unit_key(const char *unit, char key[96])
{
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    hash_sha256(unit, strlen(unit), d);
    hex_encode(d, 16, hex);
    snprintf(key, 96, "unit:%s", hex);
}

/* 1 when the unit's last snapshot has the same content and still exists. */
static int ing_unchanged(struct ing *g)
{
    struct index_txn *t;
    struct index_snap s;
    char key[96], val[256], hex[HASH_HEX_LEN + 1];
    int same = 0;
    ing_unit_key(g->job->unit, key);
    hex_encode(g->content, HASH_LEN, hex);
    if (index_txn_begin(g->ig->r->ix, false, &t) < 0)
        return 0;
    if (index_meta_get(t, key, val, sizeof(val)) == 0 && strlen(val) > HASH_HEX_LEN + 1 &&
        !strncmp(val, hex, HASH_HEX_LEN) &&
        index_snap_get(t, g->job->run, val + HASH_HEX_LEN + 1, &s) == 0) {
        snprintf(g->res->id, sizeof(g->res->id), "%.64s", val + HASH_HEX_LEN + 1);
        same = 1;
    }
    index_txn_abort(t);
    return same;
}

/* ---- the commit -------------------------------------------------------- */

static int cref_cmp(const void *a, const void *b)
{
    return memcmp(((const struct cref *)a)->id, ((const struct cref *)b)->id, HASH_LEN);
}

static int ing_enqueue(struct ing *g, struct index_txn *t, uint64_t seq)
{
    struct repo *r = g->ig->r;
    size_t out = 0;
    int e = 0;
    qsort(g->refs, g->nrefs, sizeof(*g->refs), cref_cmp);
    for (size_t k = 0; k < g->nrefs; k++)
        if (!out || memcmp(g->refs[out - 1].id, g->refs[k].id, HASH_LEN))
            g->refs[out++] = g->refs[k];
        else {
            g->refs[out - 1].fed |= g->refs[k].fed;
            g->refs[out - 1].fresh |= g->refs[k].fresh;
        }
    for (size_t k = 0; k < out && e == 0; k++) {
        struct index_chunk c = {0};
        bool fresh = false;
        int ge = index_chunk_get(t, g->refs[k].id, &c);
        if (ge < 0 && ge != -ENOENT)
            return ge;
        /* new: no region had it when it was read (the buffer may have
         * stored it since) */
        fresh = c.presence == 0 || g->refs[k].fresh;
        for (size_t i = 0; i < r->nregions && e == 0; i++) {
            struct qentry q = {.slot = r->regions[i]->slot,
                               .seq = seq,
                               .kind = QUEUE_CHUNK,
                               .file = g->refs[k].file,
                               .off = g->refs[k].off,
                               .len = g->refs[k].len};
            memcpy(q.id, g->refs[k].id, HASH_LEN);
            if (!((c.presence >> q.slot) & 1)) {
                e = queue_put(t, &q);
                g->queued_bytes += q.len;
            } else if ((g->refs[k].fed >> q.slot) & 1) {
                g->queued_bytes += q.len; /* work of this snapshot, done before its commit */
            }
        }
        g->res->new_chunks += fresh;
        g->new_bytes += fresh ? g->refs[k].len : 0;
    }
    for (size_t i = 0; i < r->nregions && e == 0; i++) {
        struct qentry q = {.slot = r->regions[i]->slot, .seq = seq, .kind = QUEUE_PUBLISH};
        e = queue_put(t, &q);
    }
    return e;
}

static int ing_records(struct ing *g, struct index_txn *t)
{
    struct index_snap s = {
        .step = g->m.step, .time = g->m.time, .bytes = g->res->bytes, .nfiles = g->m.nfiles};
    int e = 0;
    for (size_t i = 0; i < g->m.nchunks && e == 0; i++) {
        struct index_chunk c = {0};
        int ge = index_chunk_get(t, g->m.chunks[i].id, &c);
        if (ge < 0 && ge != -ENOENT)
            return ge;
        c.raw_len = g->m.chunks[i].len;
        c.refcount++;
        e = index_chunk_put(t, g->m.chunks[i].id, &c);
    }
    for (size_t k = 0; k < g->m.nfiles && e == 0; k++) {
        const struct mfile *f = &g->m.files[k];
        if (f->type == MFILE_REG)
            e = index_file_put(t, &g->keys[k], f->digest, &g->m.chunks[f->first_chunk],
                               (size_t)f->nchunks);
    }
    if (e == 0)
        e = index_snap_put(t, g->m.run, g->m.id, &s);
    return e;
}

static int ing_commit(struct ing *g)
{
    struct buf man = BUF_INIT;
    struct index_txn *t;
    struct pending *p = calloc(1, sizeof(*p));
    char key[96], val[256], hex[HASH_HEX_LEN + 1];
    uint64_t seq = 0;
    int e = p ? manifest_encode(&g->m, &man) : -ENOMEM;
    if (e == 0)
        e = index_txn_begin(g->ig->r->ix, true, &t);
    if (e < 0)
        goto out;
    e = queue_next_seq(t, &seq);
    if (e == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p->seq = seq;
        p->step = g->m.step;
        p->created_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        p->pinned = g->pinned;
        snprintf(p->id, sizeof(p->id), "%s", g->m.id);
        snprintf(p->run, sizeof(p->run), "%s", g->m.run);
        snprintf(p->unit, sizeof(p->unit), "%s", g->job->unit);
        snprintf(p->pin, sizeof(p->pin), "%s", g->pinned ? buf_str(&g->pin) : g->w.base);
        p->manifest = man.data;
        p->manifest_len = man.len;
    }
    if (e == 0)
        e = ing_records(g, t);
    if (e == 0)
        e = ing_enqueue(g, t, seq);
    if (e == 0) {
        p->queued_bytes = g->queued_bytes;
        e = queue_pending_put(t, p);
    }
    ing_unit_key(g->job->unit, key);
    hex_encode(g->content, HASH_LEN, hex);
    snprintf(val, sizeof(val), "%s %s", hex, g->m.id);
    if (e == 0)
        e = index_meta_put(t, key, val);
    if (e < 0) {
        index_txn_abort(t);
        goto out;
    }
    e = index_txn_commit(t);
    if (e == 0)
        g->res->seq = seq;
out:
    free(p);
    buf_free(&man);
    return e;
}

/* ---- one unit ---------------------------------------------------------- */

static void ing_reset(struct ing *g)
{
    if (g->pinned && g->res->seq == 0)
        pin_remove(buf_str(&g->pin));
    g->pinned = false;
    walk_free(&g->w);
    manifest_free(&g->m);
    free(g->keys);
    g->keys = NULL;
    free(g->kept);
    g->kept = NULL;
    g->nrefs = 0;
    g->queued_bytes = 0;
    g->new_bytes = 0;
}

static int ing_once(struct ing *g)
{
    struct buf path = BUF_INIT, err = BUF_INIT;
    int e = buf_printf(&path, "%s/%s", g->ig->root, g->job->unit);
    if (e == 0 && (e = walk_list(buf_str(&path), &g->w, &err)) < 0)
        snprintf(g->res->msg, sizeof(g->res->msg), "%s", buf_str(&err));
    buf_free(&path);
    buf_free(&err);
    if (e < 0)
        return e;
    if ((e = ing_manifest(g)) < 0 || (e = ing_pin(g)) < 0 || (e = ing_entries(g)) < 0)
        return e;
    ing_content(g);
    if (ing_unchanged(g)) {
        g->res->unchanged = true;
        return 0;
    }
    return ing_commit(g);
}

/* No unit is taken once the index failed a durable write (index.h): the
 * result says why, naming the index. */
static int ing_refused(struct ingester *ig, struct ingest_done *res)
{
    char why[sizeof(res->msg) - 80]; /* room for the text around it */
    if (!index_fatal(ig->r->ix, why, sizeof(why), NULL))
        return 0;
    snprintf(res->msg, sizeof(res->msg),
             "the daemon is degraded (%s): no unit is taken until "
             "it is restarted",
             why);
    return CKS_E_FATAL;
}

static void ing_run(struct ingester *ig, const struct ingest_job *job, struct ingest_done *res)
{
    struct ing g = {.ig = ig, .job = job, .res = res, .all = replicator_all_slots(ig->rp)};
    int e;
    memset(res, 0, sizeof(*res));
    res->ticket = job->ticket;
    snprintf(res->run, sizeof(res->run), "%s", job->run);
    snprintf(res->unit, sizeof(res->unit), "%s", job->unit);
    manifest_init(&g.m);
    if ((e = ing_refused(ig, res)) < 0 || (e = scan_init(&g.scan, &ig->r->cdc)) < 0)
        goto out;
    for (int attempt = 0; attempt < INGEST_RETRIES; attempt++) {
        e = ing_once(&g);
        if (e != CKS_E_CHANGED)
            break;
        char f[1024], unit[768];
        snprintf(f, sizeof(f), "event=reread run=%s unit=%s attempt=%d reason=changed", job->run,
                 log_quote(unit, sizeof(unit), job->unit), attempt + 1);
        log_event(LOG_LVL_WARN, f, "\"%s\" changed while it was read; taking it again", job->unit);
        metrics_reread(ig->m);
        ing_reset(&g);
        res->files = res->bytes = res->new_chunks = 0;
    }
    if (e < 0 && ing_refused(ig, res) < 0)
        e = CKS_E_FATAL; /* the index failed under this unit (its commit, a worker's) */
    if (e == 0 && !res->unchanged) {
        snprintf(res->id, sizeof(res->id), "%s", g.m.id);
        metrics_snapshot(ig->m, METRICS_SNAP_TAKEN, res->bytes, g.new_bytes, g.m.nchunks,
                         res->new_chunks);
    }
out:
    res->err = e;
    if (e < 0 && !res->msg[0])
        snprintf(res->msg, sizeof(res->msg), "%s", err_str(e));
    ing_reset(&g);
    scan_free(&g.scan);
    free(g.refs);
    buf_free(&g.pin);
}

/* ---- thread and queue -------------------------------------------------- */

/* Room for a result was reserved when its job was accepted
 * (ingester_submit), so no result is ever lost to a failed allocation. */
static void ig_finish(struct ingester *ig, const struct ingest_done *d)
{
    uint64_t one = 1;
    pthread_mutex_lock(&ig->mu);
    ig->done[ig->ndone++] = *d;
    ig->running = false;
    pthread_mutex_unlock(&ig->mu);
    if (write(ig->notify_fd, &one, sizeof(one)) < 0)
        (void)0;
}

static void ig_log(struct ingester *ig, const struct ingest_job *job, const struct ingest_done *d)
{
    char f[2048], unit[768], why[768];
    log_quote(unit, sizeof(unit), job->unit);
    if (d->err < 0) {
        metrics_snapshot(ig->m, METRICS_SNAP_FAILED, 0, 0, 0, 0);
        snprintf(f, sizeof(f), "event=snapshot_failed run=%s unit=%s reason=%s", job->run, unit,
                 log_quote(why, sizeof(why), d->msg));
        log_event(LOG_LVL_ERROR, f, "snapshot of \"%s\" failed: %s", job->unit, d->msg);
    } else if (d->unchanged) {
        metrics_snapshot(ig->m, METRICS_SNAP_UNCHANGED, 0, 0, 0, 0);
    } else {
        snprintf(f, sizeof(f),
                 "event=snapshot run=%s snapshot=%s unit=%s step=%lld files=%llu "
                 "bytes=%llu new_chunks=%llu",
                 job->run, d->id, unit, (long long)job->step, (unsigned long long)d->files,
                 (unsigned long long)d->bytes, (unsigned long long)d->new_chunks);
        log_event(LOG_LVL_INFO, f,
                  "snapshot %s of \"%s\": %llu files, %llu bytes, %llu new chunks "
                  "queued",
                  d->id, job->unit, (unsigned long long)d->files, (unsigned long long)d->bytes,
                  (unsigned long long)d->new_chunks);
    }
}

static void *ig_main(void *arg)
{
    struct ingester *ig = arg;
    struct ingest_job job;
    struct ingest_done *d = malloc(sizeof(*d));
    if (!d)
        return NULL;
    for (;;) {
        pthread_mutex_lock(&ig->mu);
        while (!ig->stop && ig->njobs == 0)
            pthread_cond_wait(&ig->cv, &ig->mu);
        if (ig->stop) {
            pthread_mutex_unlock(&ig->mu);
            break;
        }
        job = ig->jobs[0];
        memmove(ig->jobs, ig->jobs + 1, --ig->njobs * sizeof(*ig->jobs));
        ig->running = true;
        pthread_mutex_unlock(&ig->mu);
        replicator_ingesting(ig->rp, true);
        ing_run(ig, &job, d);
        replicator_ingesting(ig->rp, false); /* kicks the workers */
        ig_log(ig, &job, d);
        ig_finish(ig, d);
    }
    free(d);
    return NULL;
}

int ingester_new(struct repo *r, struct replicator *rp, struct metrics *m, const char *root,
                 int notify_fd, struct ingester **ret)
{
    struct ingester *ig = calloc(1, sizeof(*ig));
    if (!ig)
        return -ENOMEM;
    ig->r = r;
    ig->rp = rp;
    ig->m = m;
    ig->notify_fd = notify_fd;
    ig->root = strdup(root);
    ig->jobs = calloc(INGEST_MAX_JOBS, sizeof(*ig->jobs));
    pthread_mutex_init(&ig->mu, NULL);
    pthread_cond_init(&ig->cv, NULL);
    int pe = ig->root && ig->jobs ? pool_new(repo_workers(r), &ig->pool) : -ENOMEM;
    if (pe == 0) {
        /* two jobs a thread, each holding a chunk, within a quarter of the budget */
        size_t threads = pool_size(ig->pool);
        uint64_t cap = r->conf.memory / (4 * (uint64_t)r->params.chunk_max + 1);
        ig->nijobs = 2 * threads < cap ? 2 * threads : cap > 1 ? (size_t)cap : 1;
        ig->z = calloc(threads, sizeof(*ig->z));
        ig->objs = calloc(threads, sizeof(*ig->objs));
        ig->envs = calloc(threads, sizeof(*ig->envs));
        ig->ijobs = calloc(ig->nijobs, sizeof(*ig->ijobs));
        ig->jptr = calloc(ig->nijobs, sizeof(*ig->jptr));
        if (!ig->z || !ig->objs || !ig->envs || !ig->ijobs || !ig->jptr)
            pe = -ENOMEM;
    }
    if (pe < 0) {
        ingester_free(ig);
        return pe;
    }
    for (size_t k = 0; k < ig->nijobs; k++)
        ig->jptr[k] = &ig->ijobs[k].pj;
    pool_window_init(&ig->win, ig->pool, ig->jptr, ig->nijobs);
    for (size_t i = 0; i < r->nregions; i++) {
        struct buf err = BUF_INIT;
        int e = repo_region_clone(r, i, &ig->regions[i], &err);
        if (e < 0) {
            log_error("region '%s': %s", r->conf.regions[i].name, buf_str(&err));
            buf_free(&err);
            ingester_free(ig);
            return e;
        }
        buf_free(&err);
    }
    int e = pthread_create(&ig->th, NULL, ig_main, ig);
    if (e) {
        ingester_free(ig);
        return -e;
    }
    ig->started = true;
    *ret = ig;
    return 0;
}

void ingester_free(struct ingester *ig)
{
    if (!ig)
        return;
    pthread_mutex_lock(&ig->mu);
    ig->stop = true;
    pthread_cond_broadcast(&ig->cv);
    pthread_mutex_unlock(&ig->mu);
    if (ig->started)
        pthread_join(ig->th, NULL);
    pthread_cond_destroy(&ig->cv);
    pthread_mutex_destroy(&ig->mu);
    for (size_t i = 0; i < CONFIG_MAX_REGIONS; i++)
        region_free(ig->regions[i]);
    for (size_t t = 0; ig->pool && t < pool_size(ig->pool); t++) {
        if (ig->z)
            chunkobj_ctx_free(&ig->z[t]);
        if (ig->objs)
            buf_free(&ig->objs[t]);
        if (ig->envs)
            buf_free(&ig->envs[t]);
    }
    pool_free(ig->pool);
    free(ig->z);
    free(ig->objs);
    free(ig->envs);
    for (size_t k = 0; ig->ijobs && k < ig->nijobs; k++)
        buf_free(&ig->ijobs[k].raw);
    free(ig->ijobs);
    free(ig->jptr);
    free(ig->jobs);
    free(ig->done);
    free(ig->root);
    free(ig);
}

int ingester_submit(struct ingester *ig, const struct ingest_job *job)
{
    int e = 0;
    pthread_mutex_lock(&ig->mu);
    /* every job accepted, queued or running, has its result's room */
    size_t need = ig->ndone + ig->njobs + 2;
    if (need > ig->done_cap) {
        size_t cap = ig->done_cap ? ig->done_cap : 16;
        while (cap < need)
            cap *= 2;
        struct ingest_done *v = realloc(ig->done, cap * sizeof(*v));
        if (v) {
            ig->done = v;
            ig->done_cap = cap;
        } else {
            e = -ENOMEM;
        }
    }
    if (e == 0 && ig->njobs == INGEST_MAX_JOBS)
        e = -EAGAIN;
    else if (e == 0)
        ig->jobs[ig->njobs++] = *job;
    pthread_cond_broadcast(&ig->cv);
    pthread_mutex_unlock(&ig->mu);
    return e;
}

int ingester_poll(struct ingester *ig, struct ingest_done *ret)
{
    int got = 0;
    pthread_mutex_lock(&ig->mu);
    if (ig->ndone) {
        *ret = ig->done[0];
        memmove(ig->done, ig->done + 1, --ig->ndone * sizeof(*ig->done));
        got = 1;
    }
    pthread_mutex_unlock(&ig->mu);
    return got;
}

size_t ingester_busy(struct ingester *ig)
{
    pthread_mutex_lock(&ig->mu);
    size_t n = ig->njobs + ig->running;
    pthread_mutex_unlock(&ig->mu);
    return n;
}
