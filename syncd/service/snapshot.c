/*
 * snapshot.c — ingest: walk -> read -> FastCDC -> SHA-256 -> dedup lookup
 * -> zstd -> put to each region -> index -> manifest -> latest ref.
 *
 * Design notes.
 * - Each byte is read once (service/scan.c): the whole-file digest and the
 *   chunk ids come from the same buffer.
 * - A chunk is compressed only if some region lacks it, and at most once.
 *   Before uploading we ask the region (has): another instance may have
 *   stored the chunk already, and a HEAD is far cheaper than a PUT.
 * - Chunk presence is committed in the index one transaction per chunk,
 *   right after the chunk is durable in the regions: a crash loses at most
 *   the knowledge of one chunk, which the next run re-learns with `has`.
 * - Refcounts move only when the snapshot record is first created, in the
 *   same transaction, so a retried commit never counts a chunk twice.
 * - A file is identified by (dev, ino, size, mtime, ctime); when that
 *   matches the index and every healthy region holds its chunks, the file
 *   is not read again.  A file whose identity changes between open and the
 *   end of the read is read again, up to SNAPSHOT_RETRIES times.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "service/gc.h"
#include "service/lineage.h"
#include "service/pool.h"
#include "service/presence.h"
#include "service/scan.h"
#include "service/snapshot.h"
#include "service/walk.h"

/* A pool thread's own things: region handles (a struct region is
 * single-threaded; thread 0 uses the repo's) and an encoder. */
struct sworker {
    struct region *rg[CONFIG_MAX_REGIONS];
    struct region *own[CONFIG_MAX_REGIONS];
    struct chunkobj_ctx z;
    struct buf obj;
    struct buf env; /* obj sealed once for every region (encrypted repositories) */
};

struct snap;

/* One chunk in flight. */
struct sjob {
    struct pool_job pj;
    struct snap *s;
    struct buf raw;   /* a copy of the chunk's bytes */
    unsigned width;   /* from the file's metadata (scan_width), 0 = none */
    uint32_t healthy; /* region indices it may use (bits) */
    /* outcome */
    int err;
    char msg[256];
    uint8_t id[HASH_LEN];
    struct index_chunk was, c;
    uint32_t before;
    int rerr[CONFIG_MAX_REGIONS];
    char rmsg[CONFIG_MAX_REGIONS][512];
    uint64_t objects_put[CONFIG_MAX_REGIONS], bytes_put[CONFIG_MAX_REGIONS];
};

struct snap {
    struct repo *r;
    const struct snapshot_opts *o;
    struct snapshot_result *res;
    struct buf *err;
    struct walk w;
    struct manifest m;
    struct scan scan;
    struct chunkobj_ctx z;
    struct buf obj;         /* the encoded object of the current chunk */
    struct mchunk *fchunks; /* chunks of the file being read */
    size_t nfchunks, fchunks_cap;
    uint64_t done;
    struct seen *seen; /* chunks this snapshot confirmed, per region */
    size_t nseen, seen_cap;
    /* prune's protocol (service/gc.h): what this snapshot relies on in each
     * region is covered by an intent written before the first look */
    struct gc_intent intent[CONFIG_MAX_REGIONS];
    struct gc_cache gcc[CONFIG_MAX_REGIONS];
    /* the chunk pipeline: njobs jobs, applied in order through win */
    struct pool *pool;
    struct sworker *wk;
    size_t nwk;
    struct sjob *jobs;
    size_t njobs;
    struct pool_job **jptr; /* &jobs[k].pj, for the window */
    struct pool_window win;
    int jfail; /* the first error of a job applied since the last drain */
};

/* A chunk this snapshot uploaded or found in the regions of mask (slot
 * bits): those need no second look before the commit. */
struct seen {
    uint8_t id[HASH_LEN];
    uint32_t mask;
};

/* ---- per region bookkeeping ------------------------------------------ */

/* Region i leaves the snapshot, for the reason msg. */
static void snap_region_fail_msg(struct snap *s, size_t i, int e, const char *msg)
{
    struct snapshot_region_result *rr = &s->res->region[i];
    if (rr->err == 0) {
        rr->err = e;
        snprintf(rr->msg, sizeof(rr->msg), "%s", msg);
        log_error("%s", rr->msg);
    }
    repo_region_fail(s->r, i, e);
}

static void snap_region_fail(struct snap *s, size_t i, int e)
{
    snap_region_fail_msg(s, i, e, region_last_error(s->r->regions[i]));
}

static uint32_t snap_healthy_mask(const struct snap *s)
{
    uint32_t mask = 0;
    for (size_t i = 0; i < s->r->nregions; i++)
        if (!s->r->health[i])
            mask |= 1u << s->r->regions[i]->slot;
    return mask;
}

/* ---- chunks ------------------------------------------------------------ */

/* A chunk's work (hash, index lookup, encode, HAS and PUT in every
 * region, index record) runs as a job on the pool (service/pool.h),
 * several chunks at once; its outcome is applied on the calling thread in
 * the file's chunk order, so the manifest and the result are those a
 * single thread would produce. */

static int snap_encode_once(struct sjob *j, struct sworker *w, struct index_chunk *c)
{
    enum chunkobj_codec codec;
    if (w->obj.len)
        return 0;
    struct chunkobj_opts o = repo_chunk_opts(j->s->r);
    o.width = j->width;
    int e = chunkobj_encode(&w->z, j->raw.data, j->raw.len, &o, &w->obj, &codec);
    if (e < 0) {
        snprintf(j->msg, sizeof(j->msg), "compressing a chunk: %s", err_str(e));
        return e;
    }
    c->codec = (uint8_t)codec;
    c->stored_len = (uint32_t)w->obj.len;
    return 0;
}

/* Records the outcome of ops on c: present regions get their bit, failed
 * regions leave this job (and, when it is applied, the snapshot).
 * Returns how many regions said "absent". */
static size_t snap_chunk_outcome(struct sjob *j, struct sworker *w, struct region_op *ops, size_t n,
                                 const size_t *which, struct index_chunk *c)
{
    size_t absent = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = which[k];
        if (ops[k].ret < 0) {
            j->rerr[i] = ops[k].ret;
            snprintf(j->rmsg[i], sizeof(j->rmsg[i]), "%s", region_last_error(w->rg[i]));
            j->healthy &= ~(1u << i);
        } else if (ops[k].kind == REGION_OP_HAS && ops[k].ret == 0) {
            absent++;
        } else {
            c->presence |= 1u << w->rg[i]->slot;
            if (ops[k].kind == REGION_OP_PUT) {
                j->objects_put[i]++;
                j->bytes_put[i] += ops[k].len;
            }
        }
    }
    return absent;
}

/* Makes the chunk present in every region the job may use: ask the
 * regions that the index does not know to hold it, then upload to those
 * that lack it.  j->before gets the presence the chunk had before any
 * upload: 0 means no region had it, a new chunk. */
static int snap_chunk_upload(struct sjob *j, struct sworker *w, struct index_chunk *c)
{
    struct region_op ops[CONFIG_MAX_REGIONS];
    size_t which[CONFIG_MAX_REGIONS], n = 0;
    char key[REGION_KEY_MAX];
    size_t nregions = j->s->r->nregions;
    int e;

    region_chunk_key(j->id, key);
    buf_reset(&w->obj);
    for (size_t i = 0; i < nregions; i++)
        if ((j->healthy >> i & 1) && !(c->presence & (1u << w->rg[i]->slot))) {
            ops[n] = (struct region_op){.rg = w->rg[i], .kind = REGION_OP_HAS, .key = key};
            which[n++] = i;
        }
    /* Encode before asking, so an object of the wrong size (an upload cut
     * short on a store that is not atomic) counts as absent. */
    if (n && (e = snap_encode_once(j, w, c)) < 0)
        return e;
    for (size_t k = 0; k < n; k++)
        ops[k].len = w->obj.len;
    region_batch(ops, n);
    size_t absent = snap_chunk_outcome(j, w, ops, n, which, c);
    j->before = c->presence;
    if (absent == 0)
        return 0;
    /* An encrypted repository: one seal for every region that lacks it. */
    int sealed = region_seal(w->rg[which[0]], key, w->obj.data, w->obj.len, &w->env);
    if (sealed < 0) {
        snprintf(j->msg, sizeof(j->msg), "sealing a chunk: %s", err_str(sealed));
        return sealed;
    }
    const struct buf *put = sealed ? &w->env : &w->obj;
    size_t m = 0;
    for (size_t k = 0; k < n; k++)
        if (ops[k].kind == REGION_OP_HAS && ops[k].ret == 0) {
            ops[m] = (struct region_op){.rg = ops[k].rg,
                                        .kind = REGION_OP_PUT,
                                        .key = key,
                                        .data = put->data,
                                        .len = put->len,
                                        .sealed = sealed == 1};
            which[m++] = which[k];
        }
    region_batch(ops, m);
    snap_chunk_outcome(j, w, ops, m, which, c);
    return 0;
}

static int snap_chunk_record(struct sjob *j, const struct index_chunk *c)
{
    struct index_txn *t;
    int e = index_txn_begin(j->s->r->ix, true, &t);
    if (e == 0 && (e = index_chunk_put(t, j->id, c)) < 0)
        index_txn_abort(t);
    else if (e == 0)
        e = index_txn_commit(t);
    if (e < 0)
        snprintf(j->msg, sizeof(j->msg), "recording a chunk in the index: %s", err_str(e));
    return e;
}

/* The job itself, on pool thread t. */
static void sjob_run(struct pool_job *pj, size_t t)
{
    struct sjob *j = (struct sjob *)pj;
    struct snap *s = j->s;
    struct sworker *w = &s->wk[t];
    struct index_chunk c = {0};
    struct index_txn *t_;
    int e;

    repo_chunk_id(j->s->r, j->raw.data, j->raw.len, j->id);
    if ((e = index_txn_begin(s->r->ix, false, &t_)) < 0)
        goto out;
    e = index_chunk_get(t_, j->id, &c);
    index_txn_abort(t_);
    if (e < 0 && e != -ENOENT)
        goto out;
    if (e == -ENOENT) {
        memset(&c, 0, sizeof(c));
        c.raw_len = (uint32_t)j->raw.len;
    }
    j->was = c;
    if ((e = snap_chunk_upload(j, w, &c)) < 0)
        goto out;
    j->c = c;
    e = memcmp(&j->was, &c, sizeof(c)) != 0 ? snap_chunk_record(j, &c) : 0;
out:
    j->err = e;
}

static int snap_seen(struct snap *s, const uint8_t id[HASH_LEN], uint32_t mask)
{
    if (!mask)
        return 0;
    if (s->nseen == s->seen_cap) {
        size_t cap = s->seen_cap ? s->seen_cap * 2 : 256;
        struct seen *v = realloc(s->seen, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->seen = v;
        s->seen_cap = cap;
    }
    memcpy(s->seen[s->nseen].id, id, HASH_LEN);
    s->seen[s->nseen++].mask = mask;
    return 0;
}

/* Applies the oldest job's outcome, in order, on the calling thread. */
static int snap_chunk_apply(struct snap *s, struct sjob *j)
{
    int e = j->err;
    for (size_t i = 0; i < s->r->nregions; i++) {
        s->res->region[i].objects_put += j->objects_put[i];
        s->res->region[i].bytes_put += j->bytes_put[i];
        if (j->rerr[i])
            snap_region_fail_msg(s, i, j->rerr[i], j->rmsg[i]);
    }
    if (e < 0) {
        if (!buf_str(s->err)[0] && j->msg[0])
            buf_printf(s->err, "%s", j->msg);
        return e;
    }
    const struct index_chunk *c = &j->c;
    if (j->before == 0 && c->presence != 0) {
        s->res->new_chunks++;
        s->res->new_bytes += j->raw.len;
        s->res->stored_bytes += c->stored_len;
    }
    if ((e = snap_seen(s, j->id, c->presence & ~j->was.presence)) < 0)
        return e;
    if (s->nfchunks == s->fchunks_cap) {
        size_t cap = s->fchunks_cap ? s->fchunks_cap * 2 : 64;
        struct mchunk *v = realloc(s->fchunks, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        s->fchunks = v;
        s->fchunks_cap = cap;
    }
    memcpy(s->fchunks[s->nfchunks].id, j->id, HASH_LEN);
    s->fchunks[s->nfchunks++].len = (uint32_t)j->raw.len;
    s->done += j->raw.len;
    if (s->o->progress)
        s->o->progress(s->o->progress_ud, s->done, s->w.bytes);
    return 0;
}

/* Waits for the oldest job in flight and applies it. */
static int snap_chunk_next(struct snap *s)
{
    struct sjob *j = (struct sjob *)pool_window_oldest(&s->win);
    int e = snap_chunk_apply(s, j);
    return s->jfail ? s->jfail : (s->jfail = e);
}

/* Every job in flight done and applied; the first error among them. */
static int snap_drain(struct snap *s)
{
    while (s->win.count)
        snap_chunk_next(s);
    int e = s->jfail;
    s->jfail = 0;
    return e;
}

/* The scan's callback: hands the chunk to the pool, applying the oldest
 * job first when every job slot is in flight. */
static int snap_chunk(void *ud, const uint8_t *data, size_t len, uint64_t off)
{
    struct snap *s = ud;
    if (pool_window_full(&s->win) && snap_chunk_next(s) < 0)
        return s->jfail;
    struct sjob *j = &s->jobs[pool_window_next(&s->win)];
    buf_reset(&j->raw);
    if (buf_append(&j->raw, data, len) < 0)
        return -ENOMEM;
    j->width = scan_width(&s->scan, off, len);
    j->s = s;
    j->err = 0;
    j->msg[0] = 0;
    j->healthy = 0;
    for (size_t i = 0; i < s->r->nregions; i++) {
        j->rerr[i] = 0;
        j->objects_put[i] = j->bytes_put[i] = 0;
        if (!s->r->health[i])
            j->healthy |= 1u << i;
    }
    j->pj.run = sjob_run;
    pool_window_submit(&s->win);
    return 0;
}

/* ---- files ------------------------------------------------------------- */

/* The file's chunks from the index, if it is unchanged and every healthy
 * region holds every one of them.  Returns 1 when reused. */
static int snap_file_reuse(struct snap *s, const struct index_file_key *k, uint8_t digest[HASH_LEN])
{
    struct index_txn *t;
    struct mchunk *v = NULL;
    size_t n = 0;
    uint32_t need = snap_healthy_mask(s);
    int e = index_txn_begin(s->r->ix, false, &t);
    if (e < 0)
        return e;
    e = index_file_get(t, k, digest, &v, &n);
    for (size_t i = 0; e == 0 && i < n; i++) {
        struct index_chunk c;
        if (index_chunk_get(t, v[i].id, &c) < 0 || (c.presence & need) != need)
            e = -ENOENT;
    }
    index_txn_abort(t);
    if (e < 0) {
        free(v);
        return e == -ENOENT ? 0 : e;
    }
    free(s->fchunks);
    s->fchunks = v;
    s->nfchunks = s->fchunks_cap = n;
    s->done += k->size;
    return 1;
}

static int snap_record_file(struct snap *s, const struct index_file_key *k, const uint8_t *digest)
{
    struct index_txn *t;
    int e = index_txn_begin(s->r->ix, true, &t);
    if (e == 0 && (e = index_file_put(t, k, digest, s->fchunks, s->nfchunks)) < 0)
        index_txn_abort(t);
    else if (e == 0)
        e = index_txn_commit(t);
    return e;
}

static int snap_open(struct snap *s, const char *rel)
{
    struct buf path = BUF_INIT;
    int fd = -ENOMEM;
    if (buf_printf(&path, "%s/%s", s->w.base, rel) == 0) {
        fd = open(buf_str(&path), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);
        if (fd < 0 && errno == EPERM)
            fd = open(buf_str(&path), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            fd = -errno;
            buf_printf(s->err, "opening \"%s\": %s", buf_str(&path), strerror(errno));
        }
    }
    buf_free(&path);
    return fd;
}

/* One attempt at a file: 0 done, CKS_E_CHANGED to try again. */
static int snap_file_once(struct snap *s, const struct walk_entry *we, struct stat *ret_st,
                          uint8_t digest[HASH_LEN])
{
    struct stat st1, st2;
    struct index_file_key k;
    uint64_t got = 0;
    int e, fd = snap_open(s, we->path);

    if (fd < 0)
        return fd;
    s->nfchunks = 0;
    if (fstat(fd, &st1) < 0) {
        e = -errno;
        goto out;
    }
    index_file_key_of(&st1, &k);
    if ((e = snap_file_reuse(s, &k, digest)) < 0)
        goto out;
    if (e == 1) {
        s->res->files_unchanged++;
        goto out_ok;
    }
    uint64_t done0 = s->done;
    e = scan_fd(&s->scan, fd, snap_chunk, s, &got, digest);
    int de = snap_drain(s); /* every chunk of the file applied, in order */
    if (e == 0 || (e > CKS_E_BASE && de < 0))
        e = de;
    if (e < 0) {
        if (e > CKS_E_BASE && !buf_str(s->err)[0])
            buf_printf(s->err, "reading \"%s/%s\": %s", s->w.base, we->path, err_str(e));
        goto out;
    }
    if (fstat(fd, &st2) < 0 || !index_file_same(&st1, &st2) || got != (uint64_t)st1.st_size) {
        s->done = done0;
        e = CKS_E_CHANGED;
        goto out;
    }
    if ((e = snap_record_file(s, &k, digest)) < 0) {
        buf_printf(s->err, "recording \"%s\" in the index: %s", we->path, err_str(e));
        goto out;
    }
out_ok:
    *ret_st = st1;
    e = 0;
out:
    close(fd);
    return e;
}

static int snap_file(struct snap *s, const struct walk_entry *we)
{
    uint8_t digest[HASH_LEN];
    struct stat st = we->st;
    int e = CKS_E_CHANGED;

    for (int attempt = 0; attempt < SNAPSHOT_RETRIES && e == CKS_E_CHANGED; attempt++) {
        e = snap_file_once(s, we, &st, digest);
        if (e == CKS_E_CHANGED)
            log_warn("\"%s/%s\" changed while it was read; reading it again", s->w.base, we->path);
    }
    if (e == CKS_E_CHANGED)
        buf_printf(s->err, "\"%s/%s\" kept changing while it was read (%d attempts)", s->w.base,
                   we->path, SNAPSHOT_RETRIES);
    if (e < 0)
        return e;
    if ((e = manifest_add_file(&s->m, MFILE_REG, we->path, st.st_mode & 07777, NULL)) < 0)
        return e;
    manifest_set_mtime(&s->m, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    for (size_t i = 0; i < s->nfchunks; i++)
        if ((e = manifest_add_chunk(&s->m, s->fchunks[i].id, s->fchunks[i].len)) < 0)
            return e;
    manifest_set_digest(&s->m, digest);
    s->res->files++;
    s->res->bytes += (uint64_t)st.st_size;
    s->res->chunks += s->nfchunks;
    return 0;
}

static int snap_entries(struct snap *s)
{
    for (size_t i = 0; i < s->w.n; i++) {
        const struct walk_entry *we = &s->w.v[i];
        int e = 0;
        if (we->type == MFILE_REG) {
            e = snap_file(s, we);
        } else {
            e = manifest_add_file(&s->m, we->type, we->path, we->st.st_mode & 07777, we->link);
            if (e == 0)
                manifest_set_mtime(&s->m, we->st.st_mtim.tv_sec, we->st.st_mtim.tv_nsec);
            s->res->dirs += we->type == MFILE_DIR;
            s->res->links += we->type == MFILE_LINK;
        }
        if (e < 0)
            return e;
        if (repo_healthy(s->r) == 0) {
            buf_printf(s->err, "every region failed");
            return CKS_E_QUORUM;
        }
    }
    return 0;
}

/* ---- confirming presence ------------------------------------------------ */

static int seen_cmp(const void *a, const void *b)
{
    return memcmp(((const struct seen *)a)->id, ((const struct seen *)b)->id, HASH_LEN);
}

/* The manifest's distinct chunks (presence_items), each with the slots
 * this snapshot confirmed it in (ret_masks, from the sorted seen list). */
static int snap_distinct(struct snap *s, struct presence_item **ret, uint32_t **ret_masks,
                         size_t *ret_n, uint64_t *ret_estimate)
{
    size_t k = 0;
    int e = presence_items(s->r->ix, &s->m, ret, ret_n, ret_estimate);
    if (e < 0)
        return e;
    uint32_t *masks = calloc(*ret_n ? *ret_n : 1, sizeof(*masks));
    if (!masks) {
        free(*ret);
        return -ENOMEM;
    }
    if (s->nseen > 1)
        qsort(s->seen, s->nseen, sizeof(*s->seen), seen_cmp);
    for (size_t i = 0; i < *ret_n; i++) {
        const uint8_t *id = (*ret)[i].id;
        while (k < s->nseen && memcmp(s->seen[k].id, id, HASH_LEN) < 0)
            k++;
        for (; k < s->nseen && !memcmp(s->seen[k].id, id, HASH_LEN); k++)
            masks[i] |= s->seen[k].mask;
    }
    *ret_masks = masks;
    return 0;
}

/* Uploads a chunk a region turned out to lack, read again from the
 * source and checked against its id. */
static int snap_reupload(struct snap *s, size_t i, const uint8_t id[HASH_LEN])
{
    size_t file;
    uint64_t off;
    uint32_t len;
    uint8_t got[HASH_LEN];
    char key[REGION_KEY_MAX];
    int e = manifest_chunk_at(&s->m, id, &file, &off, &len);
    if (e < 0)
        return e;
    const char *path = s->m.files[file].path;
    uint8_t *data = malloc(len ? len : 1);
    if (!data)
        return -ENOMEM;
    int fd = snap_open(s, path);
    ssize_t n = fd < 0 ? -1 : pread(fd, data, len, (off_t)off);
    e = fd < 0 ? fd : n < 0 ? -errno : 0;
    if (fd >= 0)
        close(fd);
    if (e == 0) {
        repo_chunk_id(s->r, data, (size_t)n, got);
        if ((size_t)n != len || memcmp(got, id, HASH_LEN)) {
            buf_printf(s->err, "\"%s/%s\" changed during the snapshot; take it again", s->w.base,
                       path);
            e = CKS_E_CHANGED;
        }
    }
    enum chunkobj_codec codec;
    struct chunkobj_opts o = repo_chunk_opts(s->r);
    if (e == 0 && (e = chunkobj_encode(&s->z, data, len, &o, &s->obj, &codec)) < 0)
        buf_printf(s->err, "compressing a chunk: %s", err_str(e));
    free(data);
    region_chunk_key(id, key);
    if (e == 0 && (e = region_put(s->r->regions[i], key, s->obj.data, s->obj.len)) < 0)
        snap_region_fail(s, i, e);
    if (e == 0) {
        s->res->region[i].objects_put++;
        s->res->region[i].bytes_put += s->obj.len;
    }
    return e;
}

/* Sets (on) or clears the presence bit of region i for a chunk. */
static int snap_presence_bit(struct snap *s, size_t i, const uint8_t id[HASH_LEN], bool on)
{
    struct index_txn *t;
    struct index_chunk c;
    uint32_t bit = 1u << s->r->regions[i]->slot;
    int e = index_txn_begin(s->r->ix, true, &t);
    if (e < 0)
        return e;
    if ((e = index_chunk_get(t, id, &c)) == 0) {
        c.presence = on ? c.presence | bit : c.presence & ~bit;
        e = index_chunk_put(t, id, &c);
    }
    if (e < 0) { /* -ENOENT: the index does not know it, nothing to change */
        index_txn_abort(t);
        return e == -ENOENT ? 0 : e;
    }
    return index_txn_commit(t);
}

/* One region: ask for what this snapshot did not see there, and upload
 * what is missing.  A region error leaves the region out of the commit;
 * a source that changed fails the snapshot. */
/* W1 of service/gc.h for region i: which chunks prune's marks make us
 * confirm again (recheck), waiting while a sweep that may delete some of
 * them runs.  An intent too old to publish under is replaced first, and
 * then everything is confirmed again (*ret_all). */
static int snap_gc_check(struct snap *s, size_t i, const struct presence_item *all, size_t n,
                         uint8_t *recheck, bool *ret_all)
{
    struct region *rg = s->r->regions[i];
    char waiting[GC_MARK_LEN + 1] = "";
    bool told = false;
    *ret_all = false;
    if (!gc_intent_fresh(&s->intent[i])) {
        gc_intent_end(rg, &s->intent[i]);
        int e = gc_intent_begin(rg, &s->r->conf, &s->intent[i]);
        if (e < 0)
            return e;
        *ret_all = true;
    }
    for (;;) {
        int e = gc_writer_check(rg, &s->gcc[i], &s->r->conf, all, n, s->m.run, s->m.id, recheck,
                                waiting);
        if (e != -EAGAIN)
            return e;
        if (!told)
            log_info("region '%s': a prune is deleting chunks this snapshot uses (mark %s); "
                     "waiting for it to finish, then uploading them again",
                     rg->conf.name, waiting);
        told = true;
        sleep(2);
    }
}

static int snap_confirm_region(struct snap *s, size_t i, struct presence_item *all,
                               const uint32_t *masks, size_t n, uint64_t estimate)
{
    uint32_t bit = 1u << s->r->regions[i]->slot;
    struct presence_stats st = {0};
    size_t m = 0;
    bool everything;
    struct presence_item *ask = malloc((n ? n : 1) * sizeof(*ask));
    uint8_t *recheck = calloc(n ? n : 1, 1);
    int e = ask && recheck ? snap_gc_check(s, i, all, n, recheck, &everything) : -ENOMEM;
    if (e < 0 && e != -ENOMEM) {
        snap_region_fail(s, i, e);
        free(ask);
        free(recheck);
        return 0;
    }
    if (e < 0) {
        free(ask);
        free(recheck);
        return e;
    }
    for (size_t k = 0; k < n; k++)
        if (everything || recheck[k] || !(masks[k] & bit))
            ask[m++] = all[k];
    free(recheck);
    e = presence_confirm(s->r->regions[i], ask, m, estimate, &st);
    if (e < 0) {
        snap_region_fail(s, i, e);
        e = 0;
        m = 0;
    }
    if (e == 0 && st.missing)
        log_warn("region '%s': %llu chunk(s) of this snapshot are gone although the index recorded "
                 "them there; uploading them again",
                 s->r->regions[i]->conf.name, (unsigned long long)st.missing);
    for (size_t k = 0; e == 0 && k < m && !s->r->health[i]; k++) {
        if (!ask[k].missing)
            continue;
        if ((e = snap_presence_bit(s, i, ask[k].id, false)) == 0 &&
            (e = snap_reupload(s, i, ask[k].id)) == 0)
            e = snap_presence_bit(s, i, ask[k].id, true);
        if (e < 0 && e != CKS_E_CHANGED && s->r->health[i]) /* the region failed: leave it out */
            e = 0;
    }
    s->res->confirm_asked += st.asked;
    s->res->confirm_heads += st.heads;
    s->res->confirm_listed += st.listed;
    s->res->confirm_missing += st.missing;
    free(ask);
    return e;
}

/* Before the commit: every healthy region holds every chunk of the
 * manifest, confirmed by the region during this snapshot. */
static int snap_confirm(struct snap *s)
{
    struct presence_item *all;
    uint32_t *masks;
    uint64_t estimate;
    size_t n;
    int e = snap_distinct(s, &all, &masks, &n, &estimate);
    if (e < 0)
        return e;
    for (size_t i = 0; e == 0 && i < s->r->nregions; i++)
        if (!s->r->health[i])
            e = snap_confirm_region(s, i, all, masks, n, estimate);
    free(all);
    free(masks);
    if (e == 0 && repo_healthy(s->r) == 0) {
        buf_printf(s->err, "every region failed");
        e = CKS_E_QUORUM;
    }
    return e;
}

/* ---- commit ------------------------------------------------------------ */

int snapshot_make_id(char *id, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    uint32_t rnd;
    char stamp[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return -EIO;
    snprintf(id, cap, "%s.%06ldZ-%08x", stamp, ts.tv_nsec / 1000, rnd);
    return 0;
}

/* The parent: this instance's newest snapshot of the run (the index
 * knows; informational, so no region is asked). */
struct parent_acc {
    struct index_snap best;
    char id[MANIFEST_ID_MAX + 1];
};

static int parent_cb(void *ud, const char *run, const char *id, const struct index_snap *rec)
{
    struct parent_acc *a = ud;
    (void)run;
    if (!a->id[0] || lineage_newer(rec->step, id, a->best.step, a->id)) {
        a->best = *rec;
        snprintf(a->id, sizeof(a->id), "%s", id);
    }
    return 0;
}

void snapshot_parent(struct repo *r, const char *run, char **ret_parent)
{
    struct parent_acc a = {0};
    struct index_txn *t;
    if (index_txn_begin(r->ix, false, &t) < 0)
        return;
    index_snap_foreach(t, run, parent_cb, &a);
    index_txn_abort(t);
    if (a.id[0])
        manifest_set_str(ret_parent, a.id);
}

static int snap_init_manifest(struct snap *s)
{
    struct manifest *m = &s->m;
    char host[256] = "unknown";
    int e;

    if ((e = snapshot_make_id(m->id, sizeof(m->id))) < 0)
        return e;
    gethostname(host, sizeof(host) - 1);
    m->step = s->o->step;
    m->time = (int64_t)time(NULL);
    m->chunk_min = s->r->params.chunk_min;
    m->chunk_avg = s->r->params.chunk_avg;
    m->chunk_max = s->r->params.chunk_max;
    m->normalization = s->r->params.normalization;
    if ((e = manifest_set_str(&m->run, s->o->run)) < 0 ||
        (e = manifest_set_str(&m->host, host)) < 0 ||
        (e = manifest_set_str(&m->root, s->w.v[0].path)) < 0)
        return e;
    if (s->o->instance && (e = manifest_set_str(&m->instance, s->o->instance)) < 0)
        return e;
    snapshot_parent(s->r, s->o->run, &m->parent);
    return lineage_run_gen(s->r, s->r->regions, s->o->run, &m->gen);
}

static int snap_record(struct snap *s, uint32_t committed, bool create)
{
    struct index_txn *t;
    struct index_snap rec = {0};
    int e = index_txn_begin(s->r->ix, true, &t);
    if (e < 0)
        return e;
    if (!create) {
        if ((e = index_snap_get(t, s->m.run, s->m.id, &rec)) < 0)
            goto fail;
        rec.committed = committed;
        e = index_snap_put(t, s->m.run, s->m.id, &rec);
        goto done;
    }
    rec.step = s->m.step;
    rec.time = s->m.time;
    rec.bytes = s->res->bytes;
    rec.nfiles = s->m.nfiles;
    for (size_t i = 0; i < s->m.nchunks && e == 0; i++) {
        struct index_chunk c;
        if ((e = index_chunk_get(t, s->m.chunks[i].id, &c)) == 0) {
            c.refcount++;
            e = index_chunk_put(t, s->m.chunks[i].id, &c);
        }
    }
    if (e == 0)
        e = index_snap_put(t, s->m.run, s->m.id, &rec);
done:
    if (e == 0)
        return index_txn_commit(t);
fail:
    index_txn_abort(t);
    return e;
}

int snapshot_publish(struct region *rg, const struct manifest *m, const uint8_t *man, size_t len)
{
    char key[REGION_KEY_MAX];
    snprintf(key, sizeof(key), "snapshots/%s/%s", m->run, m->id);
    int e = region_put(rg, key, man, len);
    if (e == 0)
        e = lineage_put_commit(rg, m, man, len);
    return e;
}

static int snap_commit(struct snap *s)
{
    struct buf man = BUF_INIT;
    uint32_t committed = 0;
    int e = manifest_encode(&s->m, &man);

    if (e < 0) {
        buf_printf(s->err, "encoding the manifest: %s", err_str(e));
        goto out;
    }
    if ((e = snap_record(s, 0, true)) < 0) {
        buf_printf(s->err, "recording the snapshot in the index: %s", err_str(e));
        goto out;
    }
    for (size_t i = 0; i < s->r->nregions; i++) {
        if (s->r->health[i])
            continue;
        e = snapshot_publish(s->r->regions[i], &s->m, man.data, man.len);
        if (e < 0) {
            snap_region_fail(s, i, e);
            continue;
        }
        committed |= 1u << s->r->regions[i]->slot;
        s->res->committed++;
    }
    if ((e = snap_record(s, committed, false)) < 0)
        buf_printf(s->err, "recording the snapshot's regions in the index: %s", err_str(e));
out:
    buf_free(&man);
    return e;
}

/* ---- entry point ------------------------------------------------------- */

/* The scan buffer, and the pool with its threads' region handles and
 * job ring: two jobs a thread, within the memory budget. */
static int snap_setup(struct snap *s)
{
    struct repo *r = s->r;
    int e = scan_init(&s->scan, &r->cdc);
    if (e == 0)
        e = pool_new(repo_workers(r), &s->pool);
    if (e < 0)
        return e;
    s->nwk = pool_size(s->pool);
    uint64_t cap = r->conf.memory / (2 * (uint64_t)r->params.chunk_max + 1);
    s->njobs = 2 * s->nwk;
    if (s->njobs > cap)
        s->njobs = cap > 1 ? (size_t)cap : 1;
    s->wk = calloc(s->nwk, sizeof(*s->wk));
    s->jobs = calloc(s->njobs, sizeof(*s->jobs));
    s->jptr = calloc(s->njobs, sizeof(*s->jptr));
    if (!s->wk || !s->jobs || !s->jptr)
        return -ENOMEM;
    for (size_t k = 0; k < s->njobs; k++)
        s->jptr[k] = &s->jobs[k].pj;
    pool_window_init(&s->win, s->pool, s->jptr, s->njobs);
    for (size_t t = 0; t < s->nwk; t++)
        for (size_t i = 0; i < r->nregions; i++) {
            s->wk[t].rg[i] = r->regions[i];
            if (t == 0 || r->health[i])
                continue;
            if ((e = repo_region_clone(r, i, &s->wk[t].own[i], s->err)) < 0)
                return e;
            s->wk[t].rg[i] = s->wk[t].own[i];
        }
    return 0;
}

/* W0 of service/gc.h: an intent in every healthy region before the first
 * chunk is looked up there.  A region that cannot take one leaves. */
static int snap_intents(struct snap *s)
{
    for (size_t i = 0; i < s->r->nregions; i++) {
        if (s->r->health[i])
            continue;
        int e = gc_intent_begin(s->r->regions[i], &s->r->conf, &s->intent[i]);
        if (e < 0)
            snap_region_fail(s, i, e);
    }
    if (repo_healthy(s->r) == 0) {
        buf_printf(s->err, "every region failed");
        return CKS_E_QUORUM;
    }
    return 0;
}

static void snap_teardown(struct snap *s)
{
    if (s->pool)
        snap_drain(s); /* jobs in flight use what follows */
    for (size_t i = 0; i < s->r->nregions; i++) {
        gc_intent_end(s->r->regions[i], &s->intent[i]); /* published, or never will be */
        gc_cache_free(&s->gcc[i]);
    }
    walk_free(&s->w);
    manifest_free(&s->m);
    scan_free(&s->scan);
    chunkobj_ctx_free(&s->z);
    buf_free(&s->obj);
    free(s->fchunks);
    free(s->seen);
    pool_free(s->pool);
    for (size_t t = 0; s->wk && t < s->nwk; t++) {
        for (size_t i = 0; i < CONFIG_MAX_REGIONS; i++)
            region_free(s->wk[t].own[i]);
        chunkobj_ctx_free(&s->wk[t].z);
        buf_free(&s->wk[t].obj);
        buf_free(&s->wk[t].env);
    }
    free(s->wk);
    for (size_t k = 0; s->jobs && k < s->njobs; k++)
        buf_free(&s->jobs[k].raw);
    free(s->jobs);
    free(s->jptr);
}

/* Regions that failed before the snapshot began (repo_open): their
 * error was logged there, so it is recorded here, not logged again. */
static void snap_note_unhealthy(struct snap *s)
{
    for (size_t i = 0; i < s->r->nregions; i++) {
        struct snapshot_region_result *rr = &s->res->region[i];
        if (s->r->health[i] && rr->err == 0) {
            rr->err = s->r->health[i];
            snprintf(rr->msg, sizeof(rr->msg), "%s", region_last_error(s->r->regions[i]));
        }
    }
}

int snapshot_take(struct repo *r, const struct snapshot_opts *o, struct snapshot_result *ret,
                  struct buf *err)
{
    struct snap s = {.r = r, .o = o, .res = ret, .err = err};
    int e;

    memset(ret, 0, sizeof(*ret));
    ret->nregions = r->nregions;
    manifest_init(&s.m);
    if (manifest_run_check(o->run) < 0) {
        buf_printf(err, "run name \"%s\": use 1-256 characters from [A-Za-z0-9._-], not . or ..",
                   o->run);
        return -EINVAL;
    }
    snap_note_unhealthy(&s);
    if ((e = walk_list(o->path, &s.w, err)) < 0 || (e = snap_setup(&s)) < 0 ||
        (e = snap_init_manifest(&s)) < 0 || (e = snap_intents(&s)) < 0 ||
        (e = snap_entries(&s)) < 0 || (e = snap_confirm(&s)) < 0 || (e = snap_commit(&s)) < 0)
        goto out;
    memcpy(ret->id, s.m.id, sizeof(ret->id));
    snprintf(ret->root, sizeof(ret->root), "%s", s.m.root);
    ret->durable = ret->committed >= r->conf.quorum;
    e = ret->committed == r->nregions ? 0 : ret->durable ? 1 : CKS_E_QUORUM;
out:
    if (e < 0 && e != CKS_E_QUORUM && !buf_str(err)[0])
        buf_printf(err, "%s", err_str(e));
    snap_teardown(&s);
    return e;
}
