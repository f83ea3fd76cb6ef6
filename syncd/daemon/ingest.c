/*
 * ingest.c — from a completed unit to queued work, on its own thread.
 *
 * Design notes.
 * - Pin first, read second: every regular file is hardlinked into the pin
 *   folder before any byte is read, and read through the link.  Whatever
 *   the framework does to the original names afterwards (rotate, rename,
 *   delete), the inodes we snapshot stay until the regions have them.
 * - The reading (walk, identity, reuse, the manifest) is the reading core
 *   (service/ingcore.c), the one `ckptsync snapshot` uses; this file pins,
 *   feeds the object buffer and commits.
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
 *   old bytes).  Such a file, when every region holds each of its chunks
 *   by the index's word, is not pinned at all (ing_pin: the link would
 *   move its ctime).  If a region lost those chunks after all (another
 *   instance sharing the regions forgot and pruned the snapshot that
 *   stored them, or a lifecycle rule deleted them), the region worker's
 *   confirmation before the publish pins the file then, when its identity
 *   still maps to the manifest's digest (daemon/latepin.h), and uploads
 *   the chunks again from that link; a file changed or gone by then drops
 *   the snapshot for a retake.  Chosen over pinning every file: its link
 *   moves ctime, so an unchanged file would no longer be known by its
 *   identity and be read again in every unit (or be taken by an identity
 *   from before its link); the late pin costs nothing unless chunks were
 *   lost, and then the same identity test ingest made.
 * - Everything the snapshot needs is written in one transaction: the
 *   pending record, the snapshot record with its refcounts, the file
 *   records, and for every region the chunks it lacks plus the publish
 *   entry.  A crash before it leaves a stale pin folder (removed at the
 *   next start); after it, the replicator resumes from the queue.
 * - Each chunk some region lacks is encoded here, once, and handed to the
 *   region workers through the replicator's object buffer
 *   (daemon/objbuf.h) while the unit is still being read: uploads start
 *   before the snapshot is committed, and no worker reads, hashes or
 *   compresses the chunk again.  A worker that finds its chunk no longer
 *   buffered (it fell behind) reads it back from the pin.
 * - Derived bf16 (issue 27, docs/deltas.md "The daemon writes recipes"):
 *   service/dwrite is called as `ckptsync snapshot` calls it, on the
 *   pinned files: dwrite_match before the read, dwrite_defer in ing_feed
 *   (a deferred chunk is not fed), dwrite_finish before the commit.  A
 *   recipe object cannot be made again from the pin as a chunk's can, so
 *   phase B spools it durably in the pin folder (daemon/rspool.h) before
 *   the commit transaction queues it for every region (QUEUE_RECIPE,
 *   before the publish entry); the workers upload it from there, after a
 *   restart too.  A deferred chunk phase B keeps plain is fed as the read
 *   would have.  An unpinned unit is not derived; a node's part of a
 *   multi-node step is, its pairs within this node's files.
 * - Deltas against the keyframe (docs/deltas.md "Deltas against the
 *   keyframe in the daemon"): kfxor_propose after dwrite_match, as `ckptsync snapshot`
 *   does (the run's keyframe as the regions list it, through a repo_dup
 *   of this thread's; its files next to the unit, else the regions);
 *   phase B names the keyframe's chunks as k lines and spools the XOR
 *   recipes as any recipe.  A node's part of a multi-node step too: its
 *   keyframe is a merged step, its files paired with the keyframe's of
 *   the same path (this node's own, beside the unit), its k lines carried
 *   by the merge (service/mnextras.h).  The keyframe is looked up only
 *   when some file of the unit has a tensor view (kfxor_any_view).
 * - Memory: one read buffer of two maximal chunks, one encoded object,
 *   the manifest; the buffer's budget is the replicator's.  Phase B: as
 *   service/dwrite.h says (a deferred chunk's bytes are read again).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/ring.h"
#include "engine/chunkobj.h"
#include "service/dwrite.h"
#include "service/ingcore.h"
#include "service/kfxor.h"
#include "service/multinode.h"
#include "service/restore.h"
#include "service/snapheld.h"
#include "service/unitmark.h"
#include "daemon/ingest.h"
#include "daemon/metrics.h"
#include "daemon/objbuf.h"
#include "daemon/pin.h"
#include "daemon/rspool.h"
#include "daemon/rungen.h"
#include "daemon/sendlog.h"
#include "store/layout.h"
#include "store/queue.h"
#include "service/snapshot.h"

#define INGEST_MAX_JOBS 4096

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
    /* A repo_dup for finding a unit's keyframe (service/keyframe.h lists
     * and reads through a repo's own handles, which the workers own);
     * made at the first delta, its health reset before each */
    struct repo *kr;
    struct replicator *rp;
    struct metrics *m;
    char *root;
    int notify_fd;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    /* Both under mu.  jobs: submitted, not yet taken (INGEST_MAX_JOBS
     * reserved at start); done: results not yet polled, with room
     * reserved for every job accepted (ingester_submit). */
    struct ring jobs; /* struct ingest_job */
    bool running;
    struct ring done;        /* struct ingest_done */
    struct ingest_done *cur; /* the result being made, the thread's */
    /* the chunk pipeline (hash, lookup, encode, buffer) on the pool, with
     * each pool thread's encoder; nijobs chunks in flight (service/ingcore.h) */
    struct pool *pool;
    struct chunkobj_ctx *z;
    struct buf *objs;
    struct buf *envs; /* per pool thread: the sealed envelope (encrypted repositories) */
    size_t nijobs;
};

struct ing;

/* One chunk in flight on the pool: the reading core's job, then its
 * encoding into the object buffer. */
struct ijob {
    struct ingcore_job h;
    /* outcome */
    uint32_t fed;
    bool fresh;
};

/* What a chunk read by this snapshot did, by its file and place in it
 * (chunks taken from the index did nothing: zero). */
struct cflag {
    uint32_t fed; /* slots it was buffered for (ing_feed) */
    bool fresh;   /* no region had it when it was read */
};

struct cflags {
    struct cflag *v; /* by the chunk's place in its file */
    size_t cap;
};

/* A recipe object phase B spooled (daemon/rspool.h), queued at the commit. */
struct irecipe {
    uint8_t id[HASH_LEN];
    uint32_t len; /* the object's, before sealing */
    uint32_t raw; /* the chunk's */
    bool sealed;  /* the spooled bytes are the sealed envelope */
};

/* A deferred chunk phase B handed back as plain, and what feeding it did. */
struct iplain {
    uint8_t id[HASH_LEN];
    struct cflag fl;
};

/* Per-unit work state. */
struct ing {
    struct ingester *ig;
    const struct ingest_job *job;
    struct ingest_done *res;
    struct ingcore core; /* walk, manifest (core.m), file identities (core.keys) */
    struct buf err;      /* the core's messages */
    struct buf pin;
    bool pinned;
    struct cflags *flags; /* per manifest file */
    size_t nflags;
    struct stat *kept; /* per walk entry: the identity of a file found
                        * unchanged before pinning (st_ino 0: none) */
    uint8_t content[HASH_LEN];
    uint64_t queued_bytes;
    uint64_t new_bytes; /* of the distinct chunks no region had */
    uint32_t all;       /* slot bits of every region */
    bool gone;          /* its last snapshot is no longer in the regions
                         * (service/snapheld.h): every file is pinned and
                         * read, as the chunks it used may be gone too */
    /* upload once: the unit's number in the send log (daemon/sendlog.h),
     * and the encoded bytes of the chunks no region had (pool threads add) */
    uint64_t unit;
    _Atomic uint64_t stored_new;
    /* derived bf16 (service/dwrite.h; NULL: off, the unit unpinned, or no
     * pair): phase B's recipes and the deferred chunks it kept plain */
    struct dwrite *dw;
    struct kfbase *kb; /* the keyframe's chunks, the deltas' bases (NULL: none) */
    struct irecipe *recipes;
    size_t nrecipes, recipes_cap;
    struct iplain *plains;
    size_t nplains, plains_cap;
};

/* ---- reading -----------------------------------------------------------
 *
 * The reading core (service/ingcore.c) walks, reads and identifies; what
 * is the daemon's is a chunk's way to the region workers: encoded once,
 * into the object buffer. */

/* Encodes a chunk some region lacks and hands it to the region workers
 * (this may wait while the fastest quorum catches up).  A chunk read by
 * job hj (NULL: phase B's) that derived bf16 defers is left to phase B. */
static int ing_feed(struct ing *g, size_t thread, const struct ingcore_job *hj,
                    const uint8_t id[HASH_LEN], const uint8_t *data, size_t len, unsigned width,
                    uint32_t *ret_fed, bool *ret_fresh)
{
    struct chunkobj_ctx *z = &g->ig->z[thread];
    struct buf *obj = &g->ig->objs[thread];
    struct repo *r = g->ig->r;
    struct objbuf *ob = replicator_objbuf(g->ig->rp);
    struct index_chunk c = {0};
    struct index_txn *t;
    enum chunkobj_codec codec;
    int e = index_txn_begin(repo_index(r), false, &t);
    if (e < 0)
        return e;
    e = index_chunk_get(t, id, &c);
    index_txn_abort(t);
    if (e < 0 && e != -ENOENT)
        return e;
    uint32_t needs = g->all & ~(e == 0 ? c.presence : 0);
    if (!needs || (hj && g->dw && dwrite_defer(g->dw, hj->file, hj->off, (uint32_t)len, id, width)))
        return 0;
    if (objbuf_has(ob, id))
        return 0;
    *ret_fresh = e == -ENOENT || c.presence == 0;
    struct chunkobj_opts o = repo_chunk_opts(r);
    o.width = width;
    if ((e = chunkobj_encode(z, data, len, &o, obj, &codec)) < 0)
        return e;
    /* Sealed once here for every region (an encrypted repository), not by
     * each region worker: one AES-GCM pass per chunk instead of three. */
    char key[REGION_KEY_MAX];
    layout_chunk(id, key);
    struct buf *env = &g->ig->envs[thread];
    int sealed = region_seal(g->ig->regions[0], key, obj->data, obj->len, env);
    if (sealed < 0)
        return sealed;
    const struct buf *put = sealed ? env : obj;
    if ((e = objbuf_put(ob, id, (uint8_t)codec, (uint32_t)len, put->data, put->len, needs,
                        sealed == 1, g->unit)) < 0)
        return e;
    if (*ret_fresh && e == 0)
        atomic_fetch_add(&g->stored_new, obj->len);
    *ret_fed = needs;
    replicator_kick(g->ig->rp);
    return 0;
}

static struct ing *ing_of(const struct ijob *j)
{
    return j->h.c->o.ud;
}

/* The job, on pool thread t, its id known. */
static int ing_job_run(struct ingcore_job *hj, size_t t)
{
    struct ijob *j = (struct ijob *)hj;
    j->fed = 0;
    j->fresh = false;
    return ing_feed(ing_of(j), t, hj, hj->id, hj->raw.data, hj->raw.len, hj->width, &j->fed,
                    &j->fresh);
}

/* Room for chunk i of file k's flags. */
static int ing_flags_grow(struct ing *g, size_t k, size_t i)
{
    if (k >= g->nflags) {
        size_t n = g->core.w.n > k ? g->core.w.n : k + 1;
        struct cflags *v = realloc(g->flags, n * sizeof(*v));
        if (!v)
            return -ENOMEM;
        memset(v + g->nflags, 0, (n - g->nflags) * sizeof(*v));
        g->flags = v;
        g->nflags = n;
    }
    struct cflags *f = &g->flags[k];
    if (i < f->cap)
        return 0;
    size_t cap = f->cap ? f->cap : 64;
    while (cap <= i)
        cap *= 2;
    struct cflag *v = realloc(f->v, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    memset(v + f->cap, 0, (cap - f->cap) * sizeof(*v));
    f->v = v;
    f->cap = cap;
    return 0;
}

/* In file order (files interleaved, one at a time: the core's lock): what
 * chunk i of file k did. */
static int ing_chunk_apply(struct ingcore_job *hj, size_t k, size_t i)
{
    struct ijob *j = (struct ijob *)hj;
    struct ing *g = ing_of(j);
    if (hj->err < 0)
        return 0;
    int e = ing_flags_grow(g, k, i);
    if (e == 0)
        g->flags[k].v[i] = (struct cflag){.fed = j->fed, .fresh = j->fresh};
    return e;
}

/* What chunk i of file k did (zero: taken from the index). */
static struct cflag ing_flag(const struct ing *g, size_t k, size_t i)
{
    if (k < g->nflags && i < g->flags[k].cap)
        return g->flags[k].v[i];
    return (struct cflag){0};
}

static void ing_flags_free(struct ing *g)
{
    for (size_t k = 0; k < g->nflags; k++)
        free(g->flags[k].v);
    free(g->flags);
    g->flags = NULL;
    g->nflags = 0;
}

static const struct ingcore_ops ing_ops = {
    .job_size = sizeof(struct ijob),
    .run = ing_job_run,
    .apply = ing_chunk_apply,
};

/* Walk entry k as it is now (lstat of its path, into src and *ret_st): 1
 * when the index knows it by that identity and has each of its chunks in
 * every slot of need (0: no condition), 0 when not (or it is no longer a
 * regular file). */
static int ing_known_now(struct ing *g, size_t k, uint32_t need, struct buf *src,
                         struct stat *ret_st)
{
    struct index_file_key key;
    uint8_t digest[HASH_LEN];
    int e = buf_printf(src, "%s/%s", g->core.w.base, g->core.w.v[k].path);
    if (e < 0)
        return e;
    if (lstat(buf_str(src), ret_st) < 0 || !S_ISREG(ret_st->st_mode) || !ret_st->st_ino)
        return 0;
    index_file_key_of(ret_st, &key);
    return ingcore_known(g->ig->r, &key, need, digest, NULL, NULL);
}

/* ---- pinning ----------------------------------------------------------- */

static int ing_pin(struct ing *g)
{
    int e = pin_create(g->ig->root, g->core.m.id, &g->pin);
    if (e < 0)
        return e;
    g->pinned = true;
    if (!(g->kept = calloc(g->core.w.n ? g->core.w.n : 1, sizeof(*g->kept))))
        return -ENOMEM;
    for (size_t k = 0; k < g->core.w.n; k++) {
        struct buf src = BUF_INIT;
        struct stat st;
        if (g->core.w.v[k].type != MFILE_REG)
            continue;
        /* a file unchanged since its last snapshot, with every chunk in every
         * region, is not read: it needs no pin (and no pin link moving its
         * ctime, which is part of its identity) */
        if (ing_known_now(g, k, g->all, &src, &st) == 1 && !g->gone) {
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

/* ---- derived bf16 (service/dwrite.h) -------------------------------------
 *
 * As `ckptsync snapshot` does (service/snapshot.c), on the pinned files:
 * the pre-pass before the read, the bf16 chunks of a matched tensor
 * deferred by the read (ing_feed), phase B after it.  What differs is the
 * way to the regions: a recipe object is spooled in the pin folder
 * (daemon/rspool.h) and queued for the region workers by the commit
 * (QUEUE_RECIPE); a deferred chunk kept plain is fed as the read would
 * have. */

/* The pre-pass opens files quietly: one that cannot be opened (a file
 * kept from the index has no pin link) proposes nothing. */
static int ing_dw_open_quiet(void *ud, size_t k)
{
    struct ing *g = ud;
    size_t keep = g->err.len;
    int fd = ingcore_open(&g->core, k);
    if (fd < 0 && g->err.data) {
        g->err.len = keep;
        g->err.data[keep] = 0;
    }
    return fd;
}

static int ing_dw_open(void *ud, size_t k)
{
    return ingcore_open(&((struct ing *)ud)->core, k);
}

static void ing_dw_id(void *ud, const uint8_t *data, size_t len, uint8_t id[HASH_LEN])
{
    repo_chunk_id(((struct ing *)ud)->ig->r, data, len, id);
}

static bool ing_dw_have(void *ud, const uint8_t id[HASH_LEN])
{
    struct ing *g = ud;
    struct index_txn *t;
    struct index_chunk c;
    if (index_txn_begin(repo_index(g->ig->r), false, &t) < 0)
        return false;
    int e = index_chunk_get(t, id, &c);
    index_txn_abort(t);
    return e == 0 && (c.presence & g->all) == g->all;
}

/* Room for one more of a growing array. */
static int ing_grow(void **v, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, c * size);
    if (!p)
        return -ENOMEM;
    *v = p;
    *cap = c;
    return 0;
}

/* A recipe object of phase B: sealed once (an encrypted repository),
 * spooled durably, remembered for the commit's queue entries.  No region
 * holds it yet as far as this thread knows (*ret_slots 0): the workers
 * ask. */
static int ing_dw_put(void *ud, const char *key, const uint8_t *obj, size_t len, uint32_t raw,
                      uint32_t *ret_slots)
{
    struct ing *g = ud;
    *ret_slots = 0;
    struct layout_key lk;
    struct buf *env = &g->ig->envs[0]; /* the pool is idle in phase B */
    if (layout_parse(key, &lk) < 0 || lk.kind != LAYOUT_RECIPE) {
        buf_printf(&g->err, "phase B made a recipe object with the key \"%s\"", key);
        return CKS_E_FORMAT;
    }
    int sealed = region_seal(g->ig->regions[0], key, obj, len, env);
    int e = sealed < 0
                ? sealed
                : ing_grow((void **)&g->recipes, g->nrecipes, &g->recipes_cap, sizeof(*g->recipes));
    if (e == 0)
        e = rspool_put(buf_str(&g->pin), lk.id, sealed ? env->data : obj, sealed ? env->len : len);
    if (e < 0) {
        buf_printf(&g->err, "spooling recipe %s in \"%s\": %s", key, buf_str(&g->pin), err_str(e));
        return e;
    }
    struct irecipe *x = &g->recipes[g->nrecipes++];
    memcpy(x->id, lk.id, HASH_LEN);
    x->len = (uint32_t)len;
    x->raw = raw;
    x->sealed = sealed == 1;
    return 0;
}

/* Ingest does not wait on the regions: a recipe the index knows is not
 * asked for here (no slot holds it, as far as phase B is told), so it is
 * encoded again and queued, and each region worker asks its region before
 * uploading it (a HEAD, off the ingest path). */
static int ing_dw_has(void *ud, const char *key, size_t len, uint32_t *ret_slots)
{
    (void)ud;
    (void)key;
    (void)len;
    *ret_slots = 0;
    return 0;
}

static uint32_t ing_dw_slots(void *ud)
{
    return ((struct ing *)ud)->all;
}

/* A deferred chunk that stays plain: fed as the read would have. */
static int ing_dw_plain(void *ud, const uint8_t id[HASH_LEN], const uint8_t *data, size_t len,
                        unsigned width)
{
    struct ing *g = ud;
    int e = ing_grow((void **)&g->plains, g->nplains, &g->plains_cap, sizeof(*g->plains));
    if (e < 0)
        return e;
    struct iplain *p = &g->plains[g->nplains];
    memset(p, 0, sizeof(*p));
    memcpy(p->id, id, HASH_LEN);
    if ((e = ing_feed(g, 0, NULL, id, data, len, width, &p->fl.fed, &p->fl.fresh)) < 0)
        return e;
    g->nplains++;
    return 0;
}

/* The ingest thread's repo for kfxor_propose (ig->kr), its regions
 * retried. */
static int ing_kf_repo(struct ingester *ig, struct buf *err)
{
    if (ig->kr) {
        repo_regions_retry(ig->kr);
        return 0;
    }
    return repo_dup(ig->r, &ig->kr, err);
}

/* The pre-pass over the pinned files, as `ckptsync snapshot`'s: derived
 * bf16 pairs, then the deltas against the run's keyframe (kfxor_propose:
 * its files looked for in the watch directory, next to the unit, as the
 * keyframe's root names them, else in the regions).  g->dw stays NULL
 * when both are off, the unit could not be pinned (a recipe is spooled in
 * the pin folder), or nothing is proposed.  A node's part of a
 * multi-node step is derived and gets deltas like a snapshot (the merge,
 * service/mnextras.c, carries a part's r and k lines; its pairs are
 * within this node's files, its deltas against the merged keyframe's
 * files of the same paths; a k chunk is confirmed in each region by this
 * node's publish of the part, whoever uploaded it). */
static int ing_dwrite_match(struct ing *g)
{
    const struct walk *w = &g->core.w;
    const struct config *conf = repo_conf(g->ig->r);
    bool deltas = conf->keyframe_every > 1;
    if ((!conf->derive_bf16 && !deltas) || !g->pinned || w->n == 0)
        return 0;
    uint64_t *sizes = calloc(w->n, sizeof(*sizes));
    if (!sizes)
        return -ENOMEM;
    for (size_t k = 0; k < w->n; k++)
        if (w->v[k].type == MFILE_REG && !w->v[k].link && !(g->kept && g->kept[k].st_ino))
            sizes[k] = (uint64_t)w->v[k].st.st_size;
    int e = deltas ? ing_kf_repo(g->ig, &g->err) : 0;
    if (e == 0)
        e = kfxor_prepass(deltas ? g->ig->kr : NULL, g->job->run, g->job->step, w,
                          conf->derive_bf16, ing_dw_open_quiet, g, sizes, NULL, &g->dw, &g->kb,
                          &g->err);
    free(sizes);
    return e;
}

/* Phase B's batches in flight on the ingest pool (idle by then): one per
 * thread, each holding about 9 x [chunker] max (a chunk, its bases and the
 * last chunk's), within the quarter of the budget the read had. */
static size_t ing_dw_jobs(const struct ing *g)
{
    const struct repo *r = g->ig->r;
    uint64_t cap = repo_conf(r)->memory / (4 * 9 * (uint64_t)repo_params(r)->chunk_max + 1);
    size_t n = pool_size(g->ig->pool);
    return cap < n ? (cap > 1 ? (size_t)cap : 1) : n;
}

/* Phase B: every entry read, the deferred chunks spooled as recipes (or
 * fed plain), before the commit that queues them.  The encoding runs on
 * the pool (open and chunk_id from its threads); put, plain and the rest
 * on this thread, so thread 0's encoder (ing_feed) is free for plain. */
static int ing_dwrite(struct ing *g)
{
    if (!g->dw)
        return 0;
    struct chunkobj_ctx z = repo_chunkobj_ctx(g->ig->r);
    struct chunkobj_opts co = repo_chunk_opts(g->ig->r);
    struct dwrite_env env = {.open = ing_dw_open,
                             .chunk_id = ing_dw_id,
                             .put = ing_dw_put,
                             .has = ing_dw_has,
                             .slots = ing_dw_slots,
                             .plain = ing_dw_plain,
                             .have_plain = ing_dw_have,
                             .z = &z,
                             .ix = repo_index(g->ig->r),
                             .pool = g->ig->pool,
                             .njobs = ing_dw_jobs(g),
                             .level = co.level,
                             .copts = &co,
                             .ud = g,
                             .err = &g->err};
    int e = dwrite_finish(g->dw, &g->core.m, &env);
    chunkobj_ctx_free(&z);
    const struct dwrite_stats *st = dwrite_stats(g->dw);
    log_info("\"%s\": derived bf16: %llu tensor pair(s); %llu chunk(s) of %llu bytes spooled as "
             "recipes of %llu bytes, %llu stored plain",
             g->job->unit, (unsigned long long)st->pairs, (unsigned long long)st->recipes,
             (unsigned long long)st->recipe_raw, (unsigned long long)st->recipe_bytes,
             (unsigned long long)st->plain);
    kfxor_report(g->kb, st, g->job->unit);
    return e;
}

/* ---- the manifest ------------------------------------------------------ */

/* What the unit holds, without id, time or host: equal digests mean an
 * unchanged unit (service/unitmark.h). */
static void ing_content(struct ing *g)
{
    unitmark_content(&g->core.m, g->content);
}

/* 1 when the unit's last snapshot (or the one restored into it) has the
 * same content and still exists: in the index, and in the regions its
 * record names (service/snapheld.h: another instance may have forgotten
 * and pruned it; then the unit is taken again; a node's part is not
 * asked). */
static int ing_unchanged(struct ing *g)
{
    struct index_txn *t;
    struct index_snap rec = {0};
    if (g->gone || index_txn_begin(repo_index(g->ig->r), false, &t) < 0)
        return 0;
    int same = unitmark_same(t, g->job->run, g->job->unit, g->content, g->res->id);
    if (same == 1 && index_snap_get(t, g->job->run, g->res->id, &rec) < 0)
        same = 0;
    index_txn_abort(t);
    /* a node's part of a multi-node step is published under parts/, not
     * as a snapshot (service/multinode.h): snapheld asks for the latter,
     * so a part is not asked (and a stale part record still answers) */
    bool part = multinode_wanted(repo_conf(g->ig->r), &g->core.m);
    if (same == 1 && !part &&
        snapheld_confirm(g->ig->regions, repo_nregions(g->ig->r), g->job->run, g->res->id,
                         rec.committed, g->job->unit) != 1)
        g->gone = true;
    return same == 1 && !g->gone;
}

/* ---- the commit -------------------------------------------------------- */

static int cref_cmp(const void *a, const void *b)
{
    return memcmp(((const struct cref *)a)->id, ((const struct cref *)b)->id, HASH_LEN);
}

/* What feeding the chunks phase B kept plain did, onto their references
 * (v sorted by id, one per distinct chunk). */
static void ing_refs_plain(const struct ing *g, struct cref *v, size_t n)
{
    for (size_t k = 0; k < g->nplains; k++) {
        struct cref key;
        memcpy(key.id, g->plains[k].id, HASH_LEN);
        struct cref *c = bsearch(&key, v, n, sizeof(*v), cref_cmp);
        if (c) {
            c->fed |= g->plains[k].fl.fed;
            c->fresh |= g->plains[k].fl.fresh;
        }
    }
}

/* The manifest's chunk references with where their bytes are (file,
 * offset) and what reading them did, sorted by id, one per distinct
 * chunk; a chunk stored as a recipe is not one (its recipe is queued,
 * ing_enqueue_recipes).  The caller frees *ret. */
static int ing_refs(struct ing *g, struct cref **ret, size_t *ret_n)
{
    const struct manifest *m = &g->core.m;
    struct cref *v = malloc((m->nchunks ? m->nchunks : 1) * sizeof(*v));
    size_t n = 0, out = 0;
    if (!v)
        return -ENOMEM;
    for (size_t k = 0; k < m->nfiles; k++) {
        const struct mfile *f = &m->files[k];
        uint64_t off = 0;
        if (f->type != MFILE_REG)
            continue;
        for (size_t i = f->first_chunk; i < f->first_chunk + (size_t)f->nchunks; i++) {
            if (manifest_chunk_recipe(m, i)) {
                off += m->chunks[i].len;
                continue;
            }
            struct cref *c = &v[n++];
            memcpy(c->id, m->chunks[i].id, HASH_LEN);
            c->len = m->chunks[i].len;
            c->file = (uint32_t)k;
            c->off = off;
            struct cflag fl = ing_flag(g, k, i - f->first_chunk);
            c->fed = fl.fed;
            c->fresh = fl.fresh;
            off += c->len;
        }
    }
    if (n > 1)
        qsort(v, n, sizeof(*v), cref_cmp);
    for (size_t k = 0; k < n; k++)
        if (!out || memcmp(v[out - 1].id, v[k].id, HASH_LEN))
            v[out++] = v[k];
        else {
            v[out - 1].fed |= v[k].fed;
            v[out - 1].fresh |= v[k].fresh;
        }
    ing_refs_plain(g, v, out);
    *ret = v;
    *ret_n = out;
    return 0;
}

/* Every region gets a queue entry for each recipe phase B spooled: the
 * index records no presence of recipes/ objects, so each worker asks its
 * region first (replicator.c, rw_start_recipe). */
static int ing_enqueue_recipes(struct ing *g, struct index_txn *t, uint64_t seq)
{
    struct repo *r = g->ig->r;
    int e = 0;
    for (size_t k = 0; k < g->nrecipes && e == 0; k++) {
        const struct irecipe *x = &g->recipes[k];
        for (size_t i = 0; i < repo_nregions(r) && e == 0; i++) {
            struct qentry q = {.slot = repo_region(r, i)->slot,
                               .seq = seq,
                               .kind = QUEUE_RECIPE,
                               .file = x->sealed,
                               .off = x->raw,
                               .len = x->len};
            memcpy(q.id, x->id, HASH_LEN);
            e = queue_put(t, &q);
            g->queued_bytes += q.len;
        }
        g->res->new_chunks++;
        g->new_bytes += x->raw;
    }
    return e;
}

static int ing_enqueue(struct ing *g, struct index_txn *t, uint64_t seq)
{
    struct repo *r = g->ig->r;
    struct cref *refs;
    size_t out;
    int e = ing_refs(g, &refs, &out);
    if (e < 0)
        return e;
    for (size_t k = 0; k < out && e == 0; k++) {
        struct index_chunk c = {0};
        bool fresh = false;
        int ge = index_chunk_get(t, refs[k].id, &c);
        if (ge < 0 && ge != -ENOENT) {
            e = ge;
            break;
        }
        /* new: no region had it when it was read (the buffer may have
         * stored it since) */
        fresh = c.presence == 0 || refs[k].fresh;
        for (size_t i = 0; i < repo_nregions(r) && e == 0; i++) {
            struct qentry q = {.slot = repo_region(r, i)->slot,
                               .seq = seq,
                               .kind = QUEUE_CHUNK,
                               .file = refs[k].file,
                               .off = refs[k].off,
                               .len = refs[k].len};
            memcpy(q.id, refs[k].id, HASH_LEN);
            if (!((c.presence >> q.slot) & 1)) {
                e = queue_put(t, &q);
                g->queued_bytes += q.len;
            } else if ((refs[k].fed >> q.slot) & 1) {
                g->queued_bytes += q.len; /* work of this snapshot, done before its commit */
            }
        }
        g->res->new_chunks += fresh;
        g->new_bytes += fresh ? refs[k].len : 0;
    }
    if (e == 0)
        e = ing_enqueue_recipes(g, t, seq);
    for (size_t i = 0; i < repo_nregions(r) && e == 0; i++) {
        struct qentry q = {.slot = repo_region(r, i)->slot, .seq = seq, .kind = QUEUE_PUBLISH};
        e = queue_put(t, &q);
    }
    free(refs);
    return e;
}

/* The snapshot's records (ingcore_record) and its files' identities, for
 * the next snapshot's reuse. */
static int ing_records(struct ing *g, struct index_txn *t)
{
    int e = ingcore_record(&g->core, t);
    for (size_t k = 0; k < g->core.m.nfiles && e == 0; k++) {
        const struct mfile *f = &g->core.m.files[k];
        if (f->type == MFILE_REG)
            e = index_file_put(t, &g->core.keys[k], f->digest, &g->core.m.chunks[f->first_chunk],
                               (size_t)f->nchunks);
    }
    return e;
}

static int ing_commit(struct ing *g)
{
    struct buf man = BUF_INIT;
    struct index_txn *t;
    struct pending *p = calloc(1, sizeof(*p));
    uint64_t seq = 0;
    int e = p ? manifest_encode(&g->core.m, &man) : -ENOMEM;
    if (e == 0)
        e = index_txn_begin(repo_index(g->ig->r), true, &t);
    if (e < 0)
        goto out;
    /* taken while no region answered: a generation decided since counts */
    e = g->core.gen_undecided ? rungen_fill(t, &g->core.m, &man) : 0;
    if (e >= 0)
        e = queue_next_seq(t, &seq);
    if (e == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p->seq = seq;
        p->step = g->core.m.step;
        p->created_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        p->pinned = g->pinned;
        snprintf(p->id, sizeof(p->id), "%s", g->core.m.id);
        snprintf(p->run, sizeof(p->run), "%s", g->core.m.run);
        snprintf(p->unit, sizeof(p->unit), "%s", g->job->unit);
        snprintf(p->pin, sizeof(p->pin), "%s", g->pinned ? buf_str(&g->pin) : g->core.w.base);
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
    if (e == 0)
        e = unitmark_snapshotted(t, g->job->unit, g->content, g->core.m.id);
    if (e < 0) {
        index_txn_abort(t);
        goto out;
    }
    e = index_txn_commit(t);
    if (e == 0)
        g->res->seq = seq;
    if (e == 0)
        sendlog_unit_commit(replicator_sendlog(g->ig->rp), g->unit, seq, g->core.m.id,
                            atomic_load(&g->stored_new));
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
    ingcore_free(&g->core);
    buf_reset(&g->err);
    free(g->kept);
    g->kept = NULL;
    ing_flags_free(g);
    dwrite_free(g->dw);
    g->dw = NULL;
    kfbase_free(g->kb); /* after dw, which reads it */
    g->kb = NULL;
    free(g->recipes);
    free(g->plains);
    g->recipes = NULL;
    g->plains = NULL;
    g->nrecipes = g->recipes_cap = g->nplains = g->plains_cap = 0;
    g->queued_bytes = 0;
    g->new_bytes = 0;
}

/* The reading core for this unit: walk and manifest header. */
static int ing_begin(struct ing *g)
{
    struct ingester *ig = g->ig;
    const char *inst = getenv("CKPTSYNC_INSTANCE_TYPE");
    struct ingcore_opts co = {.run = g->job->run,
                              .step = g->job->step,
                              .instance = inst,
                              .regions = ig->regions,
                              .readers = repo_conf(ig->r)->readers,
                              .retries = 1,      /* a change: the whole unit again (ing_run) */
                              .gen_later = true, /* no region answers: rungen.h */
                              .ud = g};
    struct buf path = BUF_INIT;
    int e = ingcore_init(&g->core, ig->r, &ing_ops, ig->pool, ig->nijobs, &co, &g->err);
    if (e == 0)
        e = buf_printf(&path, "%s/%s", ig->root, g->job->unit);
    if (e == 0)
        e = ingcore_begin(&g->core, buf_str(&path));
    buf_free(&path);
    return e;
}

/* 1 when the unit is what its last snapshot holds, seen without reading
 * or pinning anything: every regular file is known to the index by its
 * identity (whatever the regions hold yet) and the content digest equals
 * the last snapshot's.  A unit taken twice (the watcher saw it complete,
 * then a commit named it) costs a walk and an index lookup per file, not
 * a second read while the first snapshot is still being replicated, and
 * no second pin link (which would move ctime under that read).  0: not
 * the same, found before anything was added to the manifest (the common
 * case, a new checkpoint: its first file is unknown); 2: not the same
 * after the manifest was filled from the index, which the caller then
 * begins again; < 0: an error. */
static int ing_same_as_last(struct ing *g)
{
    const struct walk *w = &g->core.w;
    int e = 1;
    if (!(g->kept = calloc(w->n ? w->n : 1, sizeof(*g->kept))))
        return -ENOMEM;
    for (size_t k = 0; k < w->n && e == 1; k++) {
        struct buf src = BUF_INIT;
        if (w->v[k].type == MFILE_REG)
            e = ing_known_now(g, k, 0, &src, &g->kept[k]);
        buf_free(&src);
    }
    if (e == 1) { /* every file known: the manifest from the index, then compare */
        g->core.kept = g->kept;
        e = ingcore_entries(&g->core);
        if (e == 0) {
            ing_content(g);
            e = ing_unchanged(g) ? 1 : 2;
        } else if (e == CKS_E_CHANGED) {
            e = 2;
        }
    }
    free(g->kept);
    g->kept = NULL;
    g->core.kept = NULL;
    return e;
}

/* Walk and manifest header, pin, every entry (the reading core), then the
 * commit unless the unit is as its last snapshot left it. */
static int ing_once(struct ing *g)
{
    int e = ing_begin(g);
    if (e == 0)
        e = ing_same_as_last(g);
    if (e == 1) {
        g->res->files = g->core.files;
        g->res->bytes = g->core.bytes;
        g->res->unchanged = true;
        return 0;
    }
    if (e == 2) { /* the check filled the manifest: read it from the start */
        ingcore_free(&g->core);
        buf_reset(&g->err);
        e = ing_begin(g);
    }
    if (e < 0 || (e = ing_pin(g)) < 0)
        return e;
    g->core.pin = g->pinned ? buf_str(&g->pin) : NULL;
    g->core.kept = g->kept;
    if ((e = ing_dwrite_match(g)) < 0)
        return e;
    e = ingcore_entries(&g->core);
    g->res->files = g->core.files;
    g->res->bytes = g->core.bytes;
    if (e < 0)
        return e;
    ing_content(g);
    if (ing_unchanged(g)) {
        g->res->unchanged = true;
        return 0;
    }
    if ((e = ing_dwrite(g)) < 0)
        return e;
    return ing_commit(g);
}

/* No unit is taken once the index failed a durable write (index.h): the
 * result says why, naming the index. */
static int ing_refused(struct ingester *ig, struct ingest_done *res)
{
    char why[sizeof(res->msg) - 80]; /* room for the text around it */
    if (!index_fatal(repo_index(ig->r), why, sizeof(why), NULL))
        return 0;
    snprintf(res->msg, sizeof(res->msg),
             "the daemon is degraded (%s): no unit is taken until "
             "it is restarted",
             why);
    return CKS_E_FATAL;
}

/* 1 when a progressive restore is placing the unit's files, or left it
 * partial (service/restore.h, restore_placing): not taken, logged.  Once
 * that restore ends, the unit is the snapshot it restored (unitmark). */
static int ing_restoring(struct ingester *ig, const struct ingest_job *job)
{
    struct buf dir = BUF_INIT;
    const char *slash = strrchr(job->unit, '/');
    const char *base = slash ? slash + 1 : job->unit;
    int n = slash ? (int)(slash - job->unit) : 0;
    int r = buf_printf(&dir, "%s%s%.*s", ig->root, n ? "/" : "", n, job->unit) < 0
                ? 0
                : restore_placing(buf_str(&dir), base);
    buf_free(&dir);
    if (r == 1) {
        char f[1024], unit[768];
        snprintf(f, sizeof(f), "event=snapshot_skipped run=%s unit=%s reason=restoring", job->run,
                 log_quote(unit, sizeof(unit), job->unit));
        log_event(LOG_LVL_INFO, f,
                  "\"%s\" is being restored progressively (or such a restore did not finish): "
                  "not taken",
                  job->unit);
    }
    return r;
}

static void ing_run(struct ingester *ig, const struct ingest_job *job, struct ingest_done *res)
{
    struct ing g = {.ig = ig, .job = job, .res = res, .all = replicator_all_slots(ig->rp)};
    int e;
    memset(res, 0, sizeof(*res));
    res->ticket = job->ticket;
    snprintf(res->run, sizeof(res->run), "%s", job->run);
    snprintf(res->unit, sizeof(res->unit), "%s", job->unit);
    res->step = job->step;
    if ((e = ing_refused(ig, res)) < 0)
        goto out;
    if (ing_restoring(ig, job)) {
        res->unchanged = true;
        goto out;
    }
    g.unit = sendlog_unit_begin(replicator_sendlog(ig->rp));
    for (int attempt = 0; attempt < INGEST_RETRIES; attempt++) {
        e = ing_once(&g);
        if (e != CKS_E_CHANGED)
            break;
        char f[1024], unit[768];
        snprintf(f, sizeof(f), "event=reread run=%s unit=%s attempt=%d reason=changed", job->run,
                 log_quote(unit, sizeof(unit), job->unit), attempt + 1);
        log_event(LOG_LVL_WARN, f, "\"%s\" changed while it was read (%s); taking it again",
                  job->unit, buf_str(&g.err)[0] ? buf_str(&g.err) : "its listing");
        metrics_reread(ig->m);
        if (attempt + 1 == INGEST_RETRIES)
            break; /* its message stays */
        ing_reset(&g);
        res->files = res->bytes = res->new_chunks = 0;
    }
    if (e < 0 && ing_refused(ig, res) < 0)
        e = CKS_E_FATAL; /* the index failed under this unit (its commit, a worker's) */
    if (e == 0 && !res->unchanged) {
        snprintf(res->id, sizeof(res->id), "%s", g.core.m.id);
        metrics_snapshot(ig->m, METRICS_SNAP_TAKEN, res->bytes, g.new_bytes, g.core.m.nchunks,
                         res->new_chunks);
    }
out:
    res->err = e;
    if (e < 0 && !res->msg[0])
        snprintf(res->msg, sizeof(res->msg), "%s",
                 buf_str(&g.err)[0] ? buf_str(&g.err) : err_str(e));
    ing_reset(&g);
    buf_free(&g.err);
    buf_free(&g.pin);
}

/* ---- thread and queue -------------------------------------------------- */

/* Room for a result was reserved when its job was accepted
 * (ingester_submit), so no result is ever lost to a failed allocation. */
static void ig_finish(struct ingester *ig, const struct ingest_done *d)
{
    uint64_t one = 1;
    pthread_mutex_lock(&ig->mu);
    ring_push(&ig->done, d); /* cannot fail: its room was reserved */
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
    /* allocated with the ingester, so the thread cannot fail to start */
    struct ingest_done *d = ig->cur;
    for (;;) {
        pthread_mutex_lock(&ig->mu);
        while (!ig->stop && ring_len(&ig->jobs) == 0)
            pthread_cond_wait(&ig->cv, &ig->mu);
        if (ig->stop) {
            pthread_mutex_unlock(&ig->mu);
            break;
        }
        ring_pop(&ig->jobs, &job);
        ig->running = true;
        pthread_mutex_unlock(&ig->mu);
        replicator_ingesting(ig->rp, true);
        ing_run(ig, &job, d);
        replicator_ingesting(ig->rp, false); /* kicks the workers */
        ig_log(ig, &job, d);
        ig_finish(ig, d);
    }
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
    ig->jobs = (struct ring)RING_INIT(sizeof(struct ingest_job));
    ig->done = (struct ring)RING_INIT(sizeof(struct ingest_done));
    ig->cur = malloc(sizeof(*ig->cur));
    pthread_mutex_init(&ig->mu, NULL);
    pthread_cond_init(&ig->cv, NULL);
    int pe = ig->root && ig->cur && ring_reserve(&ig->jobs, INGEST_MAX_JOBS) == 0
                 ? pool_new(repo_workers(r), &ig->pool)
                 : -ENOMEM;
    if (pe == 0) {
        /* two jobs a thread, each holding a chunk, within a quarter of the budget */
        size_t threads = pool_size(ig->pool);
        uint64_t cap = repo_conf(r)->memory / (4 * (uint64_t)repo_params(r)->chunk_max + 1);
        ig->nijobs = 2 * threads < cap ? 2 * threads : cap > 1 ? (size_t)cap : 1;
        ig->z = calloc(threads, sizeof(*ig->z));
        ig->objs = calloc(threads, sizeof(*ig->objs));
        ig->envs = calloc(threads, sizeof(*ig->envs));
        if (!ig->z || !ig->objs || !ig->envs)
            pe = -ENOMEM;
    }
    if (pe < 0) {
        ingester_free(ig);
        return pe;
    }
    for (size_t i = 0; i < repo_nregions(r); i++) {
        struct buf err = BUF_INIT;
        int e = repo_region_clone(r, i, &ig->regions[i], &err);
        if (e < 0) {
            log_error("region '%s': %s", repo_conf(r)->regions[i].name, buf_str(&err));
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
    repo_free(ig->kr);
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
    ring_free(&ig->jobs);
    ring_free(&ig->done);
    free(ig->cur);
    free(ig->root);
    free(ig);
}

int ingester_submit(struct ingester *ig, const struct ingest_job *job)
{
    int e = 0;
    pthread_mutex_lock(&ig->mu);
    /* every job accepted, queued or running, has its result's room */
    size_t need = ring_len(&ig->done) + ring_len(&ig->jobs) + 2;
    if (need > ring_cap(&ig->done)) {
        size_t cap = ring_cap(&ig->done) ? ring_cap(&ig->done) : 16;
        while (cap < need)
            cap *= 2;
        e = ring_reserve(&ig->done, cap);
    }
    if (e == 0 && ring_push(&ig->jobs, job) < 0)
        e = -EAGAIN; /* INGEST_MAX_JOBS wait already */
    pthread_cond_broadcast(&ig->cv);
    pthread_mutex_unlock(&ig->mu);
    return e;
}

int ingester_poll(struct ingester *ig, struct ingest_done *ret)
{
    pthread_mutex_lock(&ig->mu);
    int got = ring_pop(&ig->done, ret);
    pthread_mutex_unlock(&ig->mu);
    return got;
}

size_t ingester_busy(struct ingester *ig)
{
    pthread_mutex_lock(&ig->mu);
    size_t n = ring_len(&ig->jobs) + ig->running;
    pthread_mutex_unlock(&ig->mu);
    return n;
}
