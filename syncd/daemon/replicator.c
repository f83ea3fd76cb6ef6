/*
 * replicator.c — region workers.
 *
 * Design notes.
 * - Each worker owns its region (struct region is single-threaded) and
 *   walks its queue in key order: newest snapshot first, its chunks before
 *   its publish entry.  It never skips a failing entry: the entry is
 *   retried after backoff, so a publish can never overtake its chunks.
 * - Chunk objects come from ingest's object buffer (daemon/objbuf.h):
 *   encoded once, taken ahead of the queue while the unit is still being
 *   read, or found by id for a queue entry.  A chunk no longer buffered
 *   is read back from the snapshot's pin folder (hardlinks made at
 *   ingest), and its SHA-256 is checked against the id before upload: if
 *   a framework rewrote a file in place after ingest, the snapshot is
 *   dropped whole and its unit handed back for a retake, rather than
 *   publish a torn checkpoint.
 * - A recipe entry (QUEUE_RECIPE, issue 27) uploads the object ingest
 *   spooled in the pin folder (daemon/rspool.h) under its recipes/ key
 *   (the sig from the manifest's r line): HAS, then PUT where missing,
 *   never copied; done, its entry goes and no chunk presence is
 *   recorded.  It sorts before the publish entry like a chunk entry.
 * - Every state change is one index transaction, made after the region
 *   confirmed the write: chunk presence, then committed bits.  A crash
 *   between the two repeats the region write, which is idempotent.
 * - The pending record and the pin folder go when every configured region
 *   has committed the snapshot.
 *
 * A slot (one chunk in flight):
 *
 *   free --take (buffer)----> HAS(size) --absent--> PUT --ok--> stored --> free
 *        --queue entry--------^   |  present ----------------^     (index: presence,
 *          (buffer hit, or        |                                 queue entry gone)
 *           pin read + encode)    +--error--> free, round fails --> backoff
 *
 * A worker:
 *
 *   OK --round failed--> BACKOFF (1 s doubling to 60 s, jitter) --round ok--> OK
 *    |                      |
 *    +--permanent error-----+--> FAILED (until replicator_retry or a reload)
 *
 *   In OK, each round: fill the window (buffer first, then the queue),
 *   run the first publish once every chunk before it is done (confirm,
 *   gc check, manifest, commit record), collect completions.  Idle with an
 *   intent held: wait up to IDLE_INTENT_MS for work, then end the intent.
 *   A region in BACKOFF or FAILED is "lagging" for the buffer: its needs
 *   keep no object there.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/mstime.h"
#include "engine/chunkobj.h"
#include "service/catalog.h"
#include "service/gc.h"
#include "service/fanout.h"
#include "daemon/sendlog.h"
#include "service/multinode.h"
#include "daemon/metrics.h"
#include "daemon/objbuf.h"
#include "daemon/pin.h"
#include "service/presence.h"
#include "service/reupload.h"
#include "store/queue.h"
#include "store/recidx.h"
#include "daemon/replicator.h"
#include "daemon/latepin.h"
#include "daemon/retakes.h"
#include "daemon/rspool.h"
#include "daemon/rungen.h"

#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 60000
#define IDLE_INTENT_MS 5000 /* an idle worker's intent outlives its work this long */

struct slot;

struct rworker {
    struct replicator *rp;
    size_t i;
    struct region *rg;
    pthread_t th;
    bool started;
    struct region_status st; /* guarded by rp->mu */
    /* cache of the snapshot being worked on */
    uint64_t cache_seq;
    struct pending *pend;
    struct manifest man;
    struct chunkobj_ctx z;
    struct slot *slots; /* the window of chunks in flight */
    size_t nslots, busy;
    size_t nparked; /* of busy: slots parked (fanout) */
    int failure;    /* first error of this round; 0 = none */
    /* Chunks of cache_seq this region confirmed (a PUT, a HEAD, or the
     * confirmation before publish): they need no second look. */
    uint8_t (*confirmed)[HASH_LEN];
    size_t nconfirmed, confirmed_cap;
    bool drop;                  /* a chunk's bytes changed: drop cache_seq */
    bool holding;               /* durable first: held back (rw_deferred) */
    struct index_txn *fill_txn; /* rw_deferred's, for its callback */
    /* prune's protocol (service/gc.h): an intent covers what this worker
     * relies on, from before its first look until the publish.  A chunk
     * counts as confirmed only if the intent alive now was alive when the
     * region confirmed it: epoch changes with each intent. */
    struct gc_intent intent;
    uint64_t epoch;
    struct gc_cache gcc;
};

/* One chunk in flight: HAS first, then PUT if the region lacks it.  Its
 * object is ent's (encoded once by ingest, daemon/objbuf.h) or, for a
 * chunk no longer buffered, read back from the pin and encoded into obj. */
struct slot {
    bool used;
    bool feed;      /* from the buffer, ahead of any queue entry */
    uint64_t epoch; /* the worker's intent when it started */
    struct qentry q;
    struct region_req req;
    uint8_t *data;
    size_t cap;
    struct buf obj;
    struct objbuf_ent *ent;
    struct index_chunk rec;
    /* a QUEUE_RECIPE entry: obj is the spooled object (sealed: its
     * envelope), rkey its recipes/ key; no chunk record is made (the
     * recipe's record gets the region's presence bit) */
    bool recipe, rsealed;
    char rkey[REGION_KEY_MAX];
    /* upload once, then copy (service/fanout.h) */
    bool parked;          /* busy, nothing in flight: waits for the upload region */
    bool copied;          /* a copy succeeded: the HAS in flight confirms it */
    size_t src;           /* COPY: the source region's index */
    int64_t parked_ms;    /* CLOCK_MONOTONIC when it was parked */
    int64_t submitted_us; /* mstime_mono_us() at submit: the request's time */
};

struct replicator {
    struct repo *r;
    struct metrics *m;
    bool durable_first; /* the effective [daemon] durable_first */
    bool ingesting;     /* a unit is being read (its snapshot is not pending yet); mu */
    int notify_fd;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop; /* also stopped: the index is fatal (index_fatal) */
    uint64_t kicks;
    size_t n;
    struct rworker w[CONFIG_MAX_REGIONS];
    struct objbuf *ob;      /* encoded objects from ingest */
    struct fanout *fan;     /* who copies from whom (issue 25) */
    struct sendlog *sent;   /* bytes each snapshot sent from the instance */
    struct retakes retakes; /* units to take again (rw_drop); guarded by mu */
};

static int64_t now_ms(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void rp_notify(struct replicator *rp)
{
    uint64_t one = 1;
    if (rp->notify_fd >= 0 && write(rp->notify_fd, &one, sizeof(one)) < 0)
        (void)0; /* the counter saturating is fine: the loop is awake */
}

uint32_t replicator_all_slots(const struct replicator *rp)
{
    uint32_t m = 0;
    for (size_t i = 0; i < rp->n; i++)
        m |= 1u << rp->w[i].rg->slot;
    return m;
}

static unsigned rp_nslots(const struct replicator *rp)
{
    unsigned n = 0;
    for (size_t i = 0; i < rp->n; i++)
        if (rp->w[i].rg->slot + 1 > n)
            n = rp->w[i].rg->slot + 1;
    return n;
}

/* ---- transactions ------------------------------------------------------ */

/* The index refuses writes after a failed commit (index.h): the workers
 * stop, whichever thread's commit failed. */
static bool rp_fatal(const struct replicator *rp)
{
    return index_fatal(repo_index(rp->r), NULL, 0, NULL);
}

/* A failed commit made the index fatal: the other workers stop waiting,
 * ingest stops waiting for room in the buffer, and the event loop wakes to
 * answer its waiters and report it (the daemon logs it, once). */
static void rp_fatal_wake(struct replicator *rp)
{
    pthread_mutex_lock(&rp->mu);
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
    objbuf_stop(rp->ob);
    rp_notify(rp);
}

static int rw_commit(struct rworker *w, struct index_txn *t, int e)
{
    if (e < 0) {
        index_txn_abort(t);
        return e;
    }
    e = index_txn_commit(t);
    if (e == CKS_E_FATAL)
        rp_fatal_wake(w->rp);
    return e;
}

/* Ends the worker's intent: what it confirmed under it is asked again. */
static void rw_intent_end(struct rworker *w)
{
    gc_intent_end(w->rg, &w->intent);
    w->nconfirmed = 0;
    w->epoch++;
    w->cache_seq = 0; /* the next use loads it again, under a new intent */
}

/* An intent alive and fresh enough to publish under, begun if needed. */
static int rw_intent_ensure(struct rworker *w)
{
    if (w->intent.name[0] && gc_intent_fresh(&w->intent))
        return 0;
    rw_intent_end(w);
    return gc_intent_begin(w->rg, repo_conf(w->rp->r), &w->intent);
}

/* Loads the pending snapshot of seq (and its parsed manifest) into the
 * worker's cache.  -ENOENT when it is gone (already released). */
static int rw_load(struct rworker *w, uint64_t seq)
{
    struct index_txn *t;
    struct buf err = BUF_INIT;
    int e;
    if (w->cache_seq == seq)
        return 0;
    manifest_free(&w->man);
    w->cache_seq = 0;
    if ((e = rw_intent_ensure(w)) < 0)
        return e;
    /* taken while no region answered: its generation first (rungen.h) */
    if ((e = rungen_settle(w->rp->r, w->rg, seq)) < 0)
        return e;
    if ((e = index_txn_begin(repo_index(w->rp->r), false, &t)) < 0)
        return e;
    e = queue_pending_get(t, seq, w->pend);
    if (e == 0)
        e = manifest_parse(w->pend->manifest, w->pend->manifest_len, &w->man, &err);
    w->pend->manifest = NULL;
    index_txn_abort(t);
    if (e == 0)
        w->cache_seq = seq;
    else if (e != -ENOENT)
        log_error("pending snapshot %llu: %s %s", (unsigned long long)seq, err_str(e),
                  buf_str(&err));
    buf_free(&err);
    return e;
}

/* ---- chunk entries ----------------------------------------------------- */

static int rw_open_source(struct rworker *w, uint32_t file)
{
    struct buf path = BUF_INIT;
    int fd = -EINVAL;
    if (file >= w->man.nfiles)
        return CKS_E_FORMAT;
    if (w->pend->pinned)
        buf_printf(&path, "%s/%u", w->pend->pin, file);
    else
        buf_printf(&path, "%s/%s", w->pend->pin, w->man.files[file].path);
    fd = open(buf_str(&path), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        fd = -errno;
    buf_free(&path);
    return fd;
}

/* Reads the chunk's bytes into sl and checks them against its id. */
static int rw_read_chunk(struct rworker *w, struct slot *sl)
{
    const struct qentry *q = &sl->q;
    uint8_t id[HASH_LEN];
    if (q->len > sl->cap) {
        uint8_t *p = realloc(sl->data, q->len);
        if (!p)
            return -ENOMEM;
        sl->data = p;
        sl->cap = q->len;
    }
    int fd = rw_open_source(w, q->file);
    if (fd < 0)
        return fd;
    ssize_t n = pread(fd, sl->data, q->len, (off_t)q->off);
    int e = n < 0 ? -errno : 0;
    close(fd);
    if (e < 0)
        return e;
    repo_chunk_id(w->rp->r, sl->data, (size_t)n, id);
    return (size_t)n == q->len && memcmp(id, q->id, HASH_LEN) == 0 ? 0 : CKS_E_CHANGED;
}

static int rw_chunk_known(struct rworker *w, const struct qentry *q, struct index_chunk *ret)
{
    struct index_txn *t;
    int e = index_txn_begin(repo_index(w->rp->r), false, &t);
    if (e < 0)
        return e;
    e = index_chunk_get(t, q->id, ret);
    index_txn_abort(t);
    if (e == -ENOENT) {
        memset(ret, 0, sizeof(*ret));
        ret->raw_len = q->len;
        return 0;
    }
    return e < 0 ? e : (int)((ret->presence >> w->rg->slot) & 1);
}

static void rw_confirmed(struct rworker *w, const uint8_t id[HASH_LEN])
{
    if (w->nconfirmed == w->confirmed_cap) {
        size_t cap = w->confirmed_cap ? w->confirmed_cap * 2 : 256;
        uint8_t(*v)[HASH_LEN] = realloc(w->confirmed, cap * HASH_LEN);
        if (!v)
            return; /* it is asked again before publish: slower, not wrong */
        w->confirmed = v;
        w->confirmed_cap = cap;
    }
    memcpy(w->confirmed[w->nconfirmed++], id, HASH_LEN);
}

/* The region holds the chunk of sl: record it (and, for a queue entry,
 * delete the entry) in one transaction. */
static int rw_chunk_done(struct rworker *w, const struct slot *sl)
{
    const struct qentry *q = &sl->q;
    const struct index_chunk *put = &sl->rec;
    if (sl->epoch == w->epoch && w->intent.name[0])
        rw_confirmed(w, q->id);
    struct index_txn *t;
    struct index_chunk c;
    int e = index_txn_begin(repo_index(w->rp->r), true, &t);
    if (e < 0)
        return e;
    e = index_chunk_get(t, q->id, &c);
    if (e == -ENOENT) {
        c = *put;
        e = 0;
    }
    if (e == 0) {
        c.presence |= 1u << w->rg->slot;
        if (put->stored_len) {
            c.stored_len = put->stored_len;
            c.codec = put->codec;
        }
        e = index_chunk_put(t, q->id, &c);
    }
    if (e == 0 && !sl->feed)
        e = queue_del(t, q);
    return rw_commit(w, t, e);
}

/* ---- confirming presence ------------------------------------------------ */

static int id_cmp(const void *a, const void *b)
{
    return memcmp(a, b, HASH_LEN);
}

/* The manifest's distinct objects (presence_objects: its chunks, and a
 * version 6 manifest's k lines and recipes) this region has not
 * confirmed for the snapshot. */
static int rw_unconfirmed(struct rworker *w, struct presence_item **ret, size_t *ret_n,
                          uint64_t *ret_estimate)
{
    size_t n = 0, k = 0, all;
    char waiting[GC_MARK_LEN + 1] = "";
    int e = presence_objects(repo_index(w->rp->r), &w->man, ret, &all, ret_estimate);
    if (e < 0)
        return e;
    /* W1 of service/gc.h: objects prune's marks name are confirmed again */
    uint8_t *recheck = calloc(all ? all : 1, 1);
    if (!recheck)
        e = -ENOMEM;
    if (e == 0)
        e = rw_intent_ensure(w); /* one too old to publish under starts over */
    if (e == 0)
        e = gc_writer_check(w->rg, &w->gcc, repo_conf(w->rp->r), *ret, all, w->pend->run,
                            w->pend->id, recheck, waiting);
    if (e == -EAGAIN)
        region_set_error(w->rg,
                         "region '%s': a prune is deleting chunks snapshot %s uses (mark %s); "
                         "publishing after it finishes",
                         w->rg->conf.name, w->pend->id, waiting);
    if (e < 0) {
        free(recheck);
        free(*ret);
        *ret = NULL;
        return e;
    }
    if (w->nconfirmed > 1)
        qsort(w->confirmed, w->nconfirmed, HASH_LEN, id_cmp);
    for (size_t i = 0; i < all; i++) {
        const struct presence_item *it = &(*ret)[i];
        while (k < w->nconfirmed && memcmp(w->confirmed[k], it->id, HASH_LEN) < 0)
            k++;
        if (recheck[i] || k == w->nconfirmed || memcmp(w->confirmed[k], it->id, HASH_LEN))
            (*ret)[n++] = *it;
    }
    free(recheck);
    *ret_n = n;
    return 0;
}

/* Queues a chunk the region lacks again (its bytes are in the pin) and
 * clears the index's belief that the region holds it.  A file ingest did
 * not pin (unchanged, its chunks in every region by the index's word) is
 * pinned now (daemon/latepin.h); one that changed since is not, and the
 * worker's read then drops the snapshot for a retake. */
static int rw_requeue(struct rworker *w, struct index_txn *t, uint64_t seq,
                      const uint8_t id[HASH_LEN])
{
    struct qentry q = {.slot = w->rg->slot, .seq = seq, .kind = QUEUE_CHUNK};
    struct index_chunk c;
    size_t file;
    if (manifest_chunk_at(&w->man, id, &file, &q.off, &q.len) < 0)
        return CKS_E_FORMAT;
    q.file = (uint32_t)file;
    memcpy(q.id, id, HASH_LEN);
    int e = w->pend->pinned
                ? latepin_file(t, w->pend->pin, w->pend->unit, &w->man.files[file], file)
                : 0;
    if (e < 0)
        return e;
    e = index_chunk_get(t, id, &c);
    if (e == 0) {
        c.presence &= ~(1u << w->rg->slot);
        e = index_chunk_put(t, id, &c);
    }
    return e == 0 || e == -ENOENT ? queue_put(t, &q) : e;
}

/* A recipe object no spool holds, or a base-only chunk (a delta's k line:
 * one of its keyframe's chunks) the region lacks and no other region gave
 * (rw_upload_base): the publish in this region fails naming the object
 * (docs/deltas.md "Deltas against the keyframe in the daemon"). */
static int rw_lost_object(struct rworker *w, const struct presence_item *it)
{
    char key[LAYOUT_KEY_MAX];
    if (it->recipe)
        layout_recipe(it->id, it->sig, key);
    else
        layout_chunk(it->id, key);
    region_set_error(w->rg,
                     "region '%s': snapshot %s names \"%s\", which the region lacks and this "
                     "instance cannot upload (no file of the snapshot holds it, no spool or "
                     "other region gave it)",
                     w->rg->conf.name, w->pend->id, key);
    return CKS_E_MISMATCH;
}

/* The source of a base-only chunk rw_upload_base puts again: the other
 * regions. */
struct rw_base_src {
    struct rworker *w;
    uint32_t len;
    struct buf why;
};

static int rw_base_get(void *ud, const uint8_t id[HASH_LEN], struct buf *out)
{
    struct rw_base_src *b = ud;
    return reupload_from_regions(b->w->rp->r, b->w->i, &b->w->z, &b->w->man, id, b->len, out,
                                 &b->why);
}

/* A base-only chunk (a delta's k line: a chunk its keyframe stores plain)
 * the region lacks: its bytes from another region (service/reupload:
 * rgchunk_get through a handle of this thread's own, decoded, checked
 * against its id), encoded and put here, before any index transaction.
 * 0, or < 0 when no other region gives it (the publish then fails naming
 * it: rw_lost_object). */
static int rw_upload_base(struct rworker *w, const struct presence_item *it)
{
    const struct mextra *x = manifest_extra(&w->man, it->id);
    struct chunkobj_opts o = repo_chunk_opts(w->rp->r);
    struct buf obj = BUF_INIT;
    enum reupload_step step;
    char key[LAYOUT_KEY_MAX];
    if (!x || x->recipe)
        return -ENOENT;
    struct rw_base_src src = {.w = w, .len = x->len, .why = BUF_INIT};
    int e = reupload_chunk(w->rg, &w->z, &o, it->id, rw_base_get, &src, &obj, &step);
    layout_chunk(it->id, key);
    if (e == 0)
        log_warn("region '%s': \"%s\", a keyframe chunk snapshot %s names as a base, was "
                 "missing; uploaded it again from another region",
                 w->rg->conf.name, key, w->pend->id);
    else if (src.why.len)
        log_warn("%s", buf_str(&src.why));
    buf_free(&obj);
    buf_free(&src.why);
    return e == -EEXIST ? 0 : e;
}

/* The base-only chunks presence_confirm found missing (v[0..n)), each
 * uploaded again (rw_upload_base) and then no longer missing; one that
 * cannot be fails the publish naming it. */
static int rw_upload_bases(struct rworker *w, struct presence_item *v, size_t n,
                           struct presence_stats *st)
{
    size_t file;
    uint64_t off;
    uint32_t len;
    for (size_t i = 0; i < n; i++) {
        if (!v[i].missing || v[i].recipe ||
            manifest_chunk_at(&w->man, v[i].id, &file, &off, &len) == 0)
            continue;
        int e = rw_upload_base(w, &v[i]);
        if (e == -ENOMEM)
            return e;
        if (e < 0)
            return rw_lost_object(w, &v[i]);
        v[i].missing = 0;
        st->missing--;
    }
    return 0;
}

/* Queues a recipe object the region lacks again, from the snapshot's
 * spool (daemon/rspool.h): -ENOENT when the spool has none. */
static int rw_requeue_recipe(struct rworker *w, struct index_txn *t, uint64_t seq,
                             const struct presence_item *it)
{
    const struct mextra *x = manifest_extra(&w->man, it->id);
    char key[LAYOUT_KEY_MAX];
    struct buf obj = BUF_INIT;
    if (!x || !x->recipe)
        return -ENOENT;
    int e = rspool_get(w->pend->pin, it->id, (size_t)CHUNKOBJ_MAX_RAW + (1u << 20), &obj);
    layout_recipe(it->id, it->sig, key);
    struct qentry q = {.slot = w->rg->slot,
                       .seq = seq,
                       .kind = QUEUE_RECIPE,
                       .file = region_key_sealed(w->rg, key),
                       .off = x->len,
                       .len = (uint32_t)obj.len};
    memcpy(q.id, it->id, HASH_LEN);
    buf_free(&obj);
    if (e == 0 && (e = recidx_presence(t, it->id, it->sig, 0, 1u << w->rg->slot)) == CKS_E_FORMAT)
        e = 0; /* the index's record of it: not there any more */
    return e < 0 ? e : queue_put(t, &q);
}

/* A region replaced by an empty bucket (or wiped) lost its repo object
 * too: write the agreed one back before committing anything there, or an
 * instance configured with that region alone would start another
 * repository.  One HEAD per publish. */
static int rw_repo_present(struct rworker *w)
{
    int e = region_has(w->rg, layout_repo());
    if (e != 0)
        return e < 0 ? e : 0;
    e = repo_put_params(w->rg, repo_params(w->rp->r));
    if (e == 0)
        log_warn("region '%s' had lost its repo object (wiped, or replaced by an empty bucket); "
                 "wrote repository %s there again",
                 w->rg->conf.name, repo_params(w->rp->r)->id);
    return e == -EEXIST ? 0 : e;
}

/* Before a publish: every chunk of the snapshot is in the region, by the
 * region's word.  1 when some were missing and are queued again. */
static int rw_confirm(struct rworker *w, uint64_t seq)
{
    struct presence_item *v = NULL;
    struct presence_stats st = {0};
    uint64_t estimate = 0, off;
    size_t n, file;
    uint32_t len;
    struct index_txn *t;
    int e = rw_repo_present(w);
    if (e == 0)
        e = rw_unconfirmed(w, &v, &n, &estimate);
    if (e == 0)
        e = presence_confirm(w->rg, v, n, estimate, &st);
    if (e == 0 && st.missing)
        e = rw_upload_bases(w, v, n, &st);
    if (e == 0 && st.missing)
        e = index_txn_begin(repo_index(w->rp->r), true, &t);
    for (size_t i = 0; e == 0 && i < n; i++) {
        if (!v[i].missing) {
            rw_confirmed(w, v[i].id);
        } else if (v[i].recipe && (e = rw_requeue_recipe(w, t, seq, &v[i])) != -ENOENT) {
            if (e < 0) {
                index_txn_abort(t);
                break;
            }
        } else if (v[i].recipe || manifest_chunk_at(&w->man, v[i].id, &file, &off, &len) < 0) {
            e = rw_lost_object(w, &v[i]); /* no file chunk to upload it from */
            index_txn_abort(t);
            break;
        } else if ((e = rw_requeue(w, t, seq, v[i].id)) < 0) {
            index_txn_abort(t);
            break;
        }
    }
    if (e == 0 && st.missing && (e = rw_commit(w, t, 0)) == 0) {
        char f[512];
        snprintf(f, sizeof(f),
                 "event=reupload region=%s run=%s snapshot=%s chunks=%llu reason=missing",
                 w->rg->conf.name, w->pend->run, w->pend->id, (unsigned long long)st.missing);
        log_event(LOG_LVL_WARN, f,
                  "region '%s': %llu chunk(s) of snapshot %s were gone although "
                  "the index recorded them there; uploading them again before the snapshot is "
                  "committed",
                  w->rg->conf.name, (unsigned long long)st.missing, w->pend->id);
        metrics_retry(w->rp->m, w->i, METRICS_RETRY_MISSING, st.missing);
    }
    if (e == 0 && n)
        log_debug("region '%s': snapshot %s: %llu chunk(s) confirmed (%llu HEAD, %llu listed)",
                  w->rg->conf.name, w->pend->id, (unsigned long long)st.asked,
                  (unsigned long long)st.heads, (unsigned long long)st.listed);
    free(v);
    return e < 0 ? e : st.missing ? 1 : 0;
}

/* ---- publish entries --------------------------------------------------- */

static void rw_remove_pin(const char *pin, bool pinned)
{
    if (pinned && pin[0])
        pin_remove(pin);
}

/* Removes the pin of the snapshot in hand once every region holds it.
 * Each pinned file's index record is keyed by the identity it had after
 * its pin link was made (daemon/ingest.c); unlinking the link moves its
 * ctime, so the record of a file unchanged since then (its identity just
 * before the unlink is the recorded one) is keyed again by the identity it
 * has after, and the next snapshot of that file does not read it again.
 * A write racing the few microseconds between the two fstat calls would
 * be missed only if it also kept size and mtime. */
static void rw_unpin(struct rworker *w)
{
    const struct pending *p = w->pend;
    struct index_txn *t = NULL;
    int e = 0;
    if (!p->pinned || !p->pin[0])
        return;
    for (size_t k = 0; k < w->man.nfiles && e == 0; k++) {
        const struct mfile *f = &w->man.files[k];
        char path[sizeof(p->pin) + 24];
        struct stat a, b;
        if (f->type != MFILE_REG)
            continue;
        snprintf(path, sizeof(path), "%s/%zu", p->pin, k);
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (fstat(fd, &a) == 0 && a.st_nlink > 1 && unlink(path) == 0 && fstat(fd, &b) == 0) {
            struct index_file_key ka, kb;
            uint8_t digest[HASH_LEN];
            struct mchunk *v = NULL;
            size_t n = 0;
            index_file_key_of(&a, &ka);
            index_file_key_of(&b, &kb);
            ka.kind = kb.kind = (uint8_t)f->dkind; /* the record ingest made */
            if (!t && (e = index_txn_begin(repo_index(w->rp->r), true, &t)) < 0)
                t = NULL;
            if (t && index_file_get(t, &ka, digest, &v, &n) == 0 &&
                memcmp(digest, f->digest, HASH_LEN) == 0)
                e = index_file_put(t, &kb, digest, v, n);
            free(v);
        }
        close(fd);
    }
    if (t)
        rw_commit(w, t, e);
    pin_remove(p->pin);
}

/* The events of one region's commit of the snapshot in hand: k regions
 * hold it now.  Each commit is its own write transaction, so exactly one
 * worker sees k reach the quorum. */
static void rw_published(struct rworker *w, unsigned k, bool release)
{
    const struct pending *p = w->pend;
    unsigned quorum = repo_quorum(w->rp->r);
    char f[512];
    log_debug("snapshot %s of run '%s' is committed in region '%s' (%u of %zu)", p->id, p->run,
              w->rg->conf.name, k, w->rp->n);
    if (k == quorum) {
        int64_t age_ms = mstime_wall() - p->created_ms;
        metrics_durable(w->rp->m, age_ms > 0 ? (uint64_t)age_ms * 1000 : 0);
        snprintf(f, sizeof(f), "event=durable run=%s snapshot=%s step=%lld regions=%u region=%s",
                 p->run, p->id, (long long)p->step, k, w->rg->conf.name);
        log_event(LOG_LVL_INFO, f, "snapshot %s of run '%s' is durable (%u of %zu regions)", p->id,
                  p->run, k, w->rp->n);
        if (w->rp->durable_first) /* the regions held back go on */
            replicator_kick(w->rp);
    }
    if (release) {
        rw_unpin(w);
        snprintf(f, sizeof(f), "event=replicated run=%s snapshot=%s step=%lld regions=%u", p->run,
                 p->id, (long long)p->step, k);
        log_event(LOG_LVL_INFO, f, "snapshot %s of run '%s' is replicated", p->id, p->run);
    }
}

/* rw_confirm, and W2 of service/gc.h: the intent must still be fresh
 * after it, immediately before the publish, however long the worker took
 * (or was stopped) since its gc check.  One that aged past ttl/2 is
 * renewed by rw_confirm, which then confirms every chunk again (and
 * queues what a prune swept meanwhile).  0: publish now; 1: chunks are
 * queued again; or an error. */
static int rw_confirm_fresh(struct rworker *w, uint64_t seq)
{
    for (int k = 0; k <= GC_RECONFIRM_MAX; k++) {
        int e = rw_confirm(w, seq);
        if (e != 0 || gc_intent_publishable(&w->intent))
            return e;
        log_warn("region '%s': snapshot %s: the intent is older than intent_ttl/2 by now; "
                 "renewing it and confirming every chunk again before publishing",
                 w->rg->conf.name, w->pend->id);
    }
    region_set_error(w->rg,
                     "region '%s': confirming the chunks of snapshot %s took longer than "
                     "intent_ttl/2 (%llu s) %d times; publishing it later (raise [prune] "
                     "intent_ttl)",
                     w->rg->conf.name, w->pend->id,
                     (unsigned long long)repo_conf(w->rp->r)->intent_ttl / 2, GC_RECONFIRM_MAX);
    return -ETIMEDOUT;
}

/* The snapshot in hand, into the region: a snapshot of its own, or on a
 * job of several nodes this node's part of the step (service/multinode.h). */
static int rw_publish_one(struct rworker *w, const struct buf *man)
{
    const struct config *c = repo_conf(w->rp->r);
    if (multinode_wanted(c, &w->man))
        return multinode_publish(w->rg, c, &w->man, man->data, man->len);
    return catalog_publish(w->rg, &w->man, man->data, man->len);
}

static int rw_publish(struct rworker *w, const struct qentry *q)
{
    struct index_txn *t;
    struct buf man = BUF_INIT;
    struct index_snap snap;
    bool release = false;
    int e;

    if ((e = index_txn_begin(repo_index(w->rp->r), false, &t)) < 0)
        return e;
    struct pending p;
    e = queue_pending_get(t, q->seq, &p);
    if (e == 0)
        e = buf_append(&man, p.manifest, p.manifest_len);
    index_txn_abort(t);
    if (e == 0)
        e = rw_confirm_fresh(w, q->seq);
    if (e == 0)
        e = rw_publish_one(w, &man);
    buf_free(&man);
    if (e != 0)
        return e < 0 ? e : 0; /* chunks went missing: queued again, publish after them */
    rw_intent_end(w);         /* published: prune need not wait for it */
    if ((e = index_txn_begin(repo_index(w->rp->r), true, &t)) < 0)
        return e;
    e = index_snap_get(t, w->pend->run, w->pend->id, &snap);
    if (e == 0) {
        snap.committed |= 1u << w->rg->slot;
        e = index_snap_put(t, w->pend->run, w->pend->id, &snap);
    }
    if (e == 0)
        e = queue_del(t, q);
    uint32_t all = replicator_all_slots(w->rp);
    if (e == 0 && (snap.committed & all) == all &&
        queue_has_seq(t, q->seq, rp_nslots(w->rp)) == 0) {
        e = queue_pending_del(t, q->seq);
        release = true;
    }
    if ((e = rw_commit(w, t, e)) == 0)
        rw_published(w, (unsigned)__builtin_popcount(snap.committed & all), release);
    return e;
}

/* ---- torn snapshots ---------------------------------------------------- */

/* Remembers unit for the daemon to take again, once however often its
 * snapshots are dropped before it does. */
static int rp_retake(struct replicator *rp, const char *unit)
{
    pthread_mutex_lock(&rp->mu);
    int e = retakes_add(&rp->retakes, unit);
    pthread_mutex_unlock(&rp->mu);
    return e;
}

/* The pinned bytes no longer match what was ingested: drop the snapshot
 * everywhere (queue, pending, snapshot record, refcounts) and hand the
 * unit back to the daemon. */
static int rw_drop(struct rworker *w, uint64_t seq)
{
    struct index_txn *t;
    struct index_snap snap;
    bool published = false;
    int e = index_txn_begin(repo_index(w->rp->r), true, &t);
    if (e < 0)
        return e;
    e = queue_drop_seq(t, seq, rp_nslots(w->rp));
    if (e == 0)
        e = queue_pending_del(t, seq);
    /* Regions that already committed it hold a consistent copy (each chunk
     * matched its id when it was uploaded): keep the record and its
     * refcounts; the retake brings the unit to every region. */
    if (e == 0 && index_snap_get(t, w->pend->run, w->pend->id, &snap) == 0)
        published = snap.committed != 0;
    for (size_t k = 0; e == 0 && !published && k < w->man.nchunks; k++) {
        struct index_chunk c;
        if (index_chunk_get(t, w->man.chunks[k].id, &c) == 0 && c.refcount > 0) {
            c.refcount--;
            e = index_chunk_put(t, w->man.chunks[k].id, &c);
        }
    }
    if (e == 0 && !published) {
        e = index_snap_del(t, w->pend->run, w->pend->id);
        e = e == -ENOENT ? 0 : e;
    }
    if ((e = rw_commit(w, t, e)) < 0)
        return e;
    char f[1024], unit[512];
    snprintf(f, sizeof(f), "event=retake run=%s snapshot=%s unit=%s region=%s reason=changed",
             w->pend->run, w->pend->id, log_quote(unit, sizeof(unit), w->pend->unit),
             w->rg->conf.name);
    log_event(LOG_LVL_WARN, f,
              "snapshot %s of \"%s\": a file changed after it was read; %s, taking "
              "the unit again",
              w->pend->id, w->pend->unit,
              published ? "it stays where it is committed but goes no further" : "dropping it");
    metrics_retry(w->rp->m, w->i, METRICS_RETRY_CHANGED, 1);
    rw_remove_pin(w->pend->pin, w->pend->pinned);
    if (rp_retake(w->rp, w->pend->unit) < 0)
        log_error("\"%s\": out of memory remembering to take it again; it is taken at its next "
                  "change or the daemon's next start",
                  w->pend->unit);
    w->cache_seq = 0;
    return 0;
}

/* ---- the loop ---------------------------------------------------------- */

static void rw_failed(struct rworker *w, int e)
{
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd))
        rnd = (uint32_t)now_ms(CLOCK_MONOTONIC);
    pthread_mutex_lock(&w->rp->mu);
    w->st.failures++;
    int64_t delay = BACKOFF_MIN_MS << (w->st.failures > 7 ? 6 : w->st.failures - 1);
    if (delay > BACKOFF_MAX_MS)
        delay = BACKOFF_MAX_MS;
    delay = delay / 2 + (int64_t)(rnd % (uint32_t)delay); /* jitter: 0.5x .. 1.5x */
    w->st.state = region_err_permanent(e) ? REGION_FAILED : REGION_BACKOFF;
    w->st.retry_at_ms = now_ms(CLOCK_MONOTONIC) + delay;
    w->st.last_error_ms = now_ms(CLOCK_REALTIME);
    w->st.last_code = e;
    const char *why_now = region_last_error(w->rg)[0] ? region_last_error(w->rg) : err_str(e);
    /* a new reason is logged at once, not at the next tenth attempt */
    bool changed = strncmp(w->st.last_error, why_now, sizeof(w->st.last_error) - 1) != 0;
    snprintf(w->st.last_error, sizeof(w->st.last_error), "%s", why_now);
    unsigned n = w->st.failures;
    pthread_mutex_unlock(&w->rp->mu);
    objbuf_lagging(w->rp->ob, w->rg->slot, true);
    char f[1024], why[768];
    bool stop = region_err_permanent(e);
    snprintf(f, sizeof(f),
             "event=region_failed region=%s state=%s attempt=%u retry_in=%.1f reason=%s",
             w->rg->conf.name, stop ? "failed" : "backoff", n, stop ? 0.0 : (double)delay / 1000,
             log_quote(why, sizeof(why), w->st.last_error));
    if (stop)
        log_event(LOG_LVL_ERROR, f,
                  "%s; region '%s' is stopped until the configuration changes or "
                  "`ckptsync retry %s`",
                  w->st.last_error, w->rg->conf.name, w->rg->conf.name);
    else if (n == 1 || n % 10 == 0 || changed)
        log_event(LOG_LVL_ERROR, f, "%s (attempt %u; retrying in %.1fs)", w->st.last_error, n,
                  (double)delay / 1000);
    if (!stop)
        metrics_retry(w->rp->m, w->i, METRICS_RETRY_ERROR, 1);
    rp_notify(w->rp);
    if (w->rp->durable_first) /* the next region in line takes this one's place */
        replicator_kick(w->rp);
}

static void rw_succeeded(struct rworker *w)
{
    pthread_mutex_lock(&w->rp->mu);
    unsigned failures = w->st.failures;
    w->st.failures = 0;
    w->st.state = REGION_OK;
    w->st.last_success_ms = now_ms(CLOCK_REALTIME);
    pthread_mutex_unlock(&w->rp->mu);
    objbuf_lagging(w->rp->ob, w->rg->slot, false);
    if (failures) { /* logged outside the lock: nothing blocks while holding it */
        char f[160];
        snprintf(f, sizeof(f), "event=region_back region=%s failures=%u", w->rg->conf.name,
                 failures);
        log_event(LOG_LVL_INFO, f, "region '%s' is back after %u failed attempts", w->rg->conf.name,
                  failures);
    }
}

/* Waits for work, a kick, the end of a backoff or stop; false on stop. */
static bool rw_wait(struct rworker *w, uint64_t seen_kicks, int64_t until_ms)
{
    struct replicator *rp = w->rp;
    pthread_mutex_lock(&rp->mu);
    while (!rp->stop && !rp_fatal(rp) && rp->kicks == seen_kicks) {
        if (until_ms > 0) {
            struct timespec ts = {until_ms / 1000, (until_ms % 1000) * 1000000};
            if (pthread_cond_timedwait(&rp->cv, &rp->mu, &ts) == ETIMEDOUT)
                break;
        } else {
            pthread_cond_wait(&rp->cv, &rp->mu);
        }
    }
    bool go = !rp->stop && !rp_fatal(rp);
    pthread_mutex_unlock(&rp->mu);
    return go;
}

/* ---- the window ------------------------------------------------------- */

static void rw_fail_round(struct rworker *w, int e, const char *msg)
{
    if (w->failure)
        return;
    w->failure = e;
    if (msg && msg[0] && msg != region_last_error(w->rg)) /* not onto itself */
        region_set_error(w->rg, "%s", msg);
}

/* Deletes a queue entry whose chunk the index already has in this region. */
static int rw_skip(struct rworker *w, const struct qentry *q)
{
    struct index_txn *t;
    int e = index_txn_begin(repo_index(w->rp->r), true, &t);
    return e < 0 ? e : rw_commit(w, t, queue_del(t, q));
}

/* The region holds the slot's recipe: its entry deleted, and the index's
 * record of the recipe (store/recidx, where ingest made one) told so, in
 * one transaction.  A damaged record is left to fsck. */
static int rw_recipe_done(struct rworker *w, const struct slot *sl)
{
    struct layout_key k;
    struct index_txn *t;
    int e = index_txn_begin(repo_index(w->rp->r), true, &t);
    if (e < 0)
        return e;
    if (layout_parse(sl->rkey, &k) == 0 &&
        (e = recidx_presence(t, sl->q.id, k.sig, 1u << w->rg->slot, 0)) == CKS_E_FORMAT)
        e = 0;
    return rw_commit(w, t, e == 0 ? queue_del(t, &sl->q) : e);
}

/* The encoded object a slot uploads. */
static const uint8_t *sl_obj(const struct slot *sl, size_t *ret_len)
{
    *ret_len = sl->ent ? sl->ent->len : sl->obj.len;
    return sl->ent ? sl->ent->data : sl->obj.data;
}

/* Frees the slot; stored: the region holds its chunk now. */
static void rw_slot_end(struct rworker *w, struct slot *sl, bool stored)
{
    if (sl->ent)
        objbuf_release(w->rp->ob, sl->ent, w->rg->slot, stored);
    sl->ent = NULL;
    sl->feed = false;
    sl->copied = false;
    sl->recipe = sl->rsealed = false;
    if (sl->parked) {
        sl->parked = false;
        w->nparked--;
    }
    if (sl->used) {
        sl->used = false;
        w->busy--;
    }
}

/* Hands the slot's request to the region; the slot is busy until it
 * completes. */
static void rw_submit(struct rworker *w, struct slot *sl)
{
    sl->submitted_us = mstime_mono_us();
    int e = region_submit(w->rg, &sl->req);
    if (e < 0) {
        rw_slot_end(w, sl, false);
        rw_fail_round(w, e, region_last_error(w->rg));
        return;
    }
    sl->used = true;
    w->busy++;
}

/* Asks the region for the slot's object: HAS of exactly its encoded size,
 * so an object left short by an interrupted upload is replaced. */
static void rw_ask(struct rworker *w, struct slot *sl)
{
    memset(&sl->req, 0, sizeof(sl->req));
    sl->req.kind = RREQ_HAS;
    /* the plain object's */
    sl->req.size = sl->recipe ? sl->q.len : sl->ent ? sl->ent->stored_len : sl->obj.len;
    if (sl->recipe)
        memcpy(sl->req.key, sl->rkey, sizeof(sl->req.key));
    else
        layout_chunk(sl->q.id, sl->req.key);
    sl->req.ud = sl;
    sl->epoch = w->epoch;
    rw_submit(w, sl);
}

/* Starts an object from the buffer in slot sl, ahead of the snapshot's
 * queue entries (ingest has not committed it yet).  The intent comes
 * before the first look, as for queued work. */
static void rw_start_feed(struct rworker *w, struct slot *sl, struct objbuf_ent *ent)
{
    struct index_chunk c;
    memset(&sl->q, 0, sizeof(sl->q));
    memcpy(sl->q.id, ent->id, HASH_LEN);
    sl->q.slot = w->rg->slot;
    sl->q.len = ent->raw_len;
    sl->ent = ent;
    sl->feed = true;
    int e = rw_intent_ensure(w);
    if (e == 0)
        e = rw_chunk_known(w, &sl->q, &c);
    if (e != 0) {
        rw_slot_end(w, sl, e == 1);
        if (e < 0)
            rw_fail_round(w, e, NULL); /* the region's own message stands */
        return;
    }
    sl->rec = c;
    sl->rec.codec = ent->codec;
    sl->rec.stored_len = ent->stored_len;
    rw_ask(w, sl);
}

/* Starts a recipe entry in slot sl: its key from the snapshot's r line,
 * its object from the spool (daemon/rspool.h), then HAS as for a chunk.
 * Every region's entry asks its region: the presence bits of the
 * recipe's index record (set by rw_recipe_done) only tell the fan-out
 * which region may be copied from (rw_way).  A spool that lost the
 * object (its pin folder removed) drops the snapshot for a retake, as a
 * pin that lost a file. */
static void rw_start_recipe(struct rworker *w, struct slot *sl, const struct qentry *q)
{
    int e = rw_load(w, q->seq);
    if (e == -ENOENT) { /* released or dropped under us: a stale entry */
        if ((e = rw_skip(w, q)) < 0)
            rw_fail_round(w, e, NULL);
        return;
    }
    const struct mextra *x = e == 0 ? manifest_extra(&w->man, q->id) : NULL;
    if (e == 0 && (!x || !x->recipe)) {
        region_set_error(w->rg, "region '%s': snapshot %s: a queued recipe has no r line",
                         w->rg->conf.name, w->pend->id);
        e = CKS_E_FORMAT;
    }
    sl->q = *q;
    memset(&sl->rec, 0, sizeof(sl->rec));
    if (e == 0 &&
        (e = rspool_get(w->pend->pin, q->id, (size_t)q->len + 4096, &sl->obj)) == -ENOENT) {
        log_error("snapshot %s: a recipe object is missing from its spool \"%s\"", w->pend->id,
                  w->pend->pin);
        w->drop = true;
        return;
    }
    if (e < 0) {
        rw_fail_round(w, e, NULL);
        return;
    }
    sl->recipe = true;
    sl->rsealed = q->file == 1;
    layout_recipe(q->id, x->sig, sl->rkey);
    rw_ask(w, sl);
}

/* Starts one chunk entry in slot sl: checks, reads, asks the region. */
static void rw_start(struct rworker *w, struct slot *sl, const struct qentry *q)
{
    struct index_chunk c;
    if (q->kind == QUEUE_RECIPE) {
        rw_start_recipe(w, sl, q);
        return;
    }
    int e = rw_load(w, q->seq);
    if (e == -ENOENT) { /* released or dropped under us: a stale entry */
        if ((e = rw_skip(w, q)) < 0)
            rw_fail_round(w, e, NULL);
        return;
    }
    if (e == 0)
        e = rw_chunk_known(w, q, &c);
    if (e == 1) {
        if ((e = rw_skip(w, q)) < 0)
            rw_fail_round(w, e, NULL);
        return;
    }
    sl->q = *q;
    sl->rec = c;
    sl->rec.stored_len = 0;
    if (e == 0 && (sl->ent = objbuf_get(w->rp->ob, q->id, w->rg->slot)) != NULL) {
        sl->rec.codec = sl->ent->codec;
        sl->rec.stored_len = sl->ent->stored_len;
        rw_ask(w, sl);
        return;
    }
    if (e == 0)
        e = rw_read_chunk(w, sl);
    if (e == CKS_E_CHANGED || e == -ENOENT) {
        w->drop = true;
        return;
    }
    enum chunkobj_codec codec;
    struct chunkobj_opts o = repo_chunk_opts(w->rp->r);
    if (e == 0)
        e = chunkobj_encode(&w->z, sl->data, q->len, &o, &sl->obj, &codec);
    if (e < 0) {
        rw_fail_round(w, e, NULL);
        return;
    }
    sl->rec.codec = (uint8_t)codec;
    sl->rec.stored_len = (uint32_t)sl->obj.len;
    rw_ask(w, sl);
}

struct fill {
    struct rworker *w;
    struct qentry found[64];
    size_t n, want;
    bool publish_first;
    struct qentry publish;
};

/* A chunk in flight in any slot (from the buffer or the queue). */
static bool rw_in_flight(const struct rworker *w, const struct qentry *q)
{
    for (size_t i = 0; i < w->nslots; i++)
        if (w->slots[i].used && !memcmp(w->slots[i].q.id, q->id, HASH_LEN))
            return true;
    return false;
}

static int fill_cb(void *ud, const struct qentry *q)
{
    struct fill *f = ud;
#ifdef CKS_TEST_HOOKS
    /* CKPTSYNC_TEST_RECIPE_HOLD: recipe entries stay queued, and so does
     * everything after them, the publish included (a kill -9 test) */
    if (q->kind == QUEUE_RECIPE && getenv("CKPTSYNC_TEST_RECIPE_HOLD"))
        return 1;
#endif
    if (q->kind == QUEUE_PUBLISH) {
        /* A publish waits for every chunk (and recipe) before it. */
        if (f->n == 0 && f->w->busy == 0) {
            f->publish_first = true;
            f->publish = *q;
        }
        return 1;
    }
    if (!rw_in_flight(f->w, q))
        f->found[f->n++] = *q;
    return f->n < f->want ? 0 : 1;
}

static int undurable_cb(void *ud, const struct pending *p)
{
    struct rworker *w = ud;
    struct index_snap snap;
    struct index_txn *t = w->fill_txn;
    if (index_snap_get(t, p->run, p->id, &snap) < 0)
        return 0;
    unsigned k = (unsigned)__builtin_popcount(snap.committed & replicator_all_slots(w->rp));
    return k < repo_quorum(w->rp->r);
}

/* Durable first (#10 item 4): when the regions share the instance's
 * uplink, a region past the first `quorum` regions that work (in the
 * configured order; one in backoff or failed does not count) holds back
 * while a unit is being ingested or some pending snapshot is committed
 * in fewer than `quorum` regions, so the newest snapshot's bytes reach a quorum before the rest
 * get a share.  It catches up afterwards, from the object buffer or the
 * pin (objbuf.h: the buffer never waits for it). */
static bool rw_deferred(struct rworker *w, struct index_txn *t)
{
    struct replicator *rp = w->rp;
    unsigned ahead = 0;
    if (!rp->durable_first)
        return false;
    pthread_mutex_lock(&rp->mu);
    for (size_t i = 0; i < w->i; i++)
        ahead += rp->w[i].st.state == REGION_OK && repo_region_ok(rp->r, i);
    bool hold = rp->ingesting; /* the newest snapshot, still being read */
    pthread_mutex_unlock(&rp->mu);
    if (ahead < repo_quorum(rp->r))
        return false;
    w->fill_txn = t;
    hold = hold || queue_pending_foreach(t, undurable_cb, w) > 0;
    w->fill_txn = NULL;
    if (hold != w->holding) {
        w->holding = hold;
        log_debug("region '%s' %s", w->rg->conf.name,
                  hold ? "holds back until the newest snapshot is durable"
                       : "goes on: every pending snapshot is durable");
    }
    return hold;
}

/* Fills free slots: first objects ingest is encoding now (the newest
 * snapshot), then the next entries of the region's queue. */
static int rw_fill(struct rworker *w, struct fill *f)
{
    struct index_txn *t;
    f->w = w;
    f->n = 0;
    f->publish_first = false;
    if (w->rp->durable_first) {
        int e = index_txn_begin(repo_index(w->rp->r), false, &t);
        if (e < 0)
            return e;
        bool hold = rw_deferred(w, t);
        index_txn_abort(t);
        if (hold)
            return 0;
    }
    for (size_t i = 0; i < w->nslots && !w->failure && !w->drop; i++) {
        if (w->slots[i].used)
            continue;
        struct objbuf_ent *ent = objbuf_take(w->rp->ob, w->rg->slot);
        if (!ent)
            break;
        rw_start_feed(w, &w->slots[i], ent);
    }
    f->want = w->nslots - w->busy;
    if (f->want > sizeof(f->found) / sizeof(f->found[0]))
        f->want = sizeof(f->found) / sizeof(f->found[0]);
    if (f->want == 0)
        return 0;
    int e = index_txn_begin(repo_index(w->rp->r), false, &t);
    if (e < 0)
        return e;
    e = queue_walk(t, w->rg->slot, fill_cb, f);
    index_txn_abort(t);
    if (e < 0)
        return e;
    for (size_t k = 0; k < f->n && !w->failure && !w->drop; k++)
        for (size_t i = 0; i < w->nslots; i++)
            if (!w->slots[i].used) {
                rw_start(w, &w->slots[i], &f->found[k]);
                break;
            }
    return 0;
}

static void rw_put(struct rworker *w, struct slot *sl)
{
    sl->req.kind = RREQ_PUT;
    sl->req.data = sl_obj(sl, &sl->req.len);
    sl->req.sealed = sl->ent ? sl->ent->sealed : sl->rsealed;
    rw_submit(w, sl);
}

/* ---- upload once, then copy (issue 25, service/fanout.h) ----------------- */
/* The slot's chunk: len bytes sent from the instance or copied, counted
 * to its snapshot (by its queue entry, or the unit that buffered it). */
static void rw_sent(struct rworker *w, const struct slot *sl, uint64_t sent, uint64_t copied)
{
    uint64_t unit = sl->feed && sl->ent ? sl->ent->unit : 0;
    sendlog_add(w->rp->sent, unit, sl->feed ? 0 : sl->q.seq, sent, copied);
}

#define PARK_WAIT_MS 250   /* a parked slot looks again at least this often */
#define PARK_MAX_MS 300000 /* ... and goes up from the instance after this long */

/* Bit j for each region whose worker works now. */
static uint32_t rp_working(struct replicator *rp)
{
    uint32_t m = 0;
    pthread_mutex_lock(&rp->mu);
    for (size_t j = 0; j < rp->n; j++)
        if (rp->w[j].st.state == REGION_OK && repo_region_ok(rp->r, j))
            m |= 1u << j;
    pthread_mutex_unlock(&rp->mu);
    return m;
}

/* The slots that hold the slot's object, by the index: the chunk's
 * record, or the recipe's (store/recidx: its presence bits, set by
 * rw_recipe_done as for chunks).  No record: none. */
static uint32_t rw_held(struct index_txn *t, const struct slot *sl)
{
    struct index_chunk c;
    struct recidx r;
    struct layout_key k;
    if (!sl->recipe)
        return index_chunk_get(t, sl->q.id, &c) == 0 ? c.presence : 0;
    if (layout_parse(sl->rkey, &k) < 0 || recidx_get(t, sl->q.id, k.sig, &r) < 0)
        return 0;
    return r.presence;
}

/* Which way the slot's object (a chunk, or a recipe) reaches this region,
 * from what the index says the regions confirmed. */
static enum fanout_way rw_way(struct rworker *w, struct slot *sl)
{
    struct index_txn *t;
    uint32_t present = 0, held;
    if (!w->rp->fan || index_txn_begin(repo_index(w->rp->r), false, &t) < 0)
        return FANOUT_PUT;
    held = rw_held(t, sl);
    index_txn_abort(t);
    for (size_t j = 0; j < w->rp->n; j++)
        if ((held >> repo_region(w->rp->r, j)->slot) & 1)
            present |= 1u << j;
    return fanout_choose(w->rp->fan, w->i, present, rp_working(w->rp), &sl->src);
}

static void rw_copy(struct rworker *w, struct slot *sl)
{
    sl->req.kind = RREQ_COPY;
    sl->req.src = repo_region(w->rp->r, sl->src);
    rw_submit(w, sl);
}

/* The region lacks the slot's chunk (its HAS said so): copy it, wait for
 * the upload region, or upload it.  After a copy, the HAS was its
 * confirmation: absent means the copy did not take, so upload. */
static void rw_absent(struct rworker *w, struct slot *sl)
{
    if (sl->copied) {
        sl->copied = false;
        metrics_copy(w->rp->m, w->i, METRICS_COPY_FAILED, 0);
        metrics_copy(w->rp->m, w->i, METRICS_COPY_FALLBACK, 0);
        log_warn("region '%s': a copy from region '%s' was answered as done, but the region "
                 "does not hold the chunk; uploading it from this instance",
                 w->rg->conf.name, repo_conf(w->rp->r)->regions[sl->src].name);
        rw_put(w, sl);
        return;
    }
    switch (rw_way(w, sl)) {
    case FANOUT_COPY:
        rw_copy(w, sl);
        break;
    case FANOUT_WAIT:
        sl->parked_ms = now_ms(CLOCK_MONOTONIC);
        sl->used = sl->parked = true;
        w->busy++;
        w->nparked++;
        break;
    case FANOUT_PUT:
        rw_put(w, sl);
        break;
    }
}

/* A copy's answer: confirm it with a HAS of the object's size, or fall
 * back to an upload from the instance. */
static void rw_copy_done(struct rworker *w, struct slot *sl, struct region_req *req)
{
    if (req->ret == 0 && !w->failure) {
        sl->copied = true;
        rw_ask(w, sl);
        return;
    }
    if (req->ret < 0) {
        pthread_mutex_lock(&w->rp->mu);
        w->st.copies_failed++;
        pthread_mutex_unlock(&w->rp->mu);
        metrics_copy(w->rp->m, w->i, METRICS_COPY_FAILED, 0);
        fanout_copy_failed(w->rp->fan, w->i, sl->src, req->ret, req->errmsg);
    }
    if (w->failure) {
        rw_slot_end(w, sl, false);
        return;
    }
    metrics_copy(w->rp->m, w->i, METRICS_COPY_FALLBACK, 0);
    rw_put(w, sl);
}

/* The region confirmed the slot's chunk: count a copy, and wake the
 * regions that copy from this one. */
static void rw_fan_stored(struct rworker *w, struct slot *sl, size_t len)
{
    if (sl->copied) {
        pthread_mutex_lock(&w->rp->mu);
        w->st.objects_copied++;
        w->st.bytes_copied += len;
        pthread_mutex_unlock(&w->rp->mu);
        metrics_copy(w->rp->m, w->i, METRICS_COPY_OK, len);
        rw_sent(w, sl, 0, len);
    }
    if (fanout_is_source(w->rp->fan, w->i))
        replicator_kick(w->rp);
}

/* Parked slots look again: copy now, keep waiting, or upload (the
 * upload region stopped working).  A failing or dropping round lets
 * them go (their entries stay queued, the buffer's are taken again). */
static void rw_parked(struct rworker *w)
{
    for (size_t i = 0; i < w->nslots && w->nparked; i++) {
        struct slot *sl = &w->slots[i];
        if (!sl->parked)
            continue;
        if (w->failure || w->drop) {
            rw_slot_end(w, sl, false);
            continue;
        }
        enum fanout_way way = rw_way(w, sl);
        if (way == FANOUT_WAIT && now_ms(CLOCK_MONOTONIC) - sl->parked_ms < PARK_MAX_MS)
            continue;
        if (way == FANOUT_WAIT) { /* the upload region never confirmed it */
            log_warn("region '%s': waited %d s for the upload region to confirm a chunk; "
                     "uploading it from this instance",
                     w->rg->conf.name, PARK_MAX_MS / 1000);
            metrics_copy(w->rp->m, w->i, METRICS_COPY_FALLBACK, 0);
            way = FANOUT_PUT;
        }
        sl->parked = sl->used = false;
        w->nparked--;
        w->busy--;
        if (way == FANOUT_COPY)
            rw_copy(w, sl);
        else
            rw_put(w, sl);
    }
}

/* Every busy slot is parked: wait for a kick (a source confirmed a chunk)
 * or PARK_WAIT_MS. */
static void rw_park_wait(struct rworker *w)
{
    pthread_mutex_lock(&w->rp->mu);
    uint64_t kicks = w->rp->kicks;
    pthread_mutex_unlock(&w->rp->mu);
    rw_wait(w, kicks, now_ms(CLOCK_MONOTONIC) + PARK_WAIT_MS);
}

/* One completed request. */
static void rw_complete(struct rworker *w, struct region_req *req)
{
    struct slot *sl = req->ud;
    size_t len;
    sl_obj(sl, &len);
    sl->used = false;
    w->busy--;
    if (req->kind == RREQ_COPY) {
        rw_copy_done(w, sl, req);
        return;
    }
    int64_t took = mstime_mono_us() - sl->submitted_us;
    metrics_request(w->rp->m, w->i, req->kind == RREQ_PUT ? METRICS_OP_PUT : METRICS_OP_HAS,
                    req->ret >= 0, req->kind == RREQ_PUT ? len : 0, took > 0 ? (uint64_t)took : 0);
    if (req->ret < 0) {
        rw_slot_end(w, sl, false);
        rw_fail_round(w, req->ret, req->errmsg);
        return;
    }
    if (req->kind == RREQ_HAS && req->ret == 0 && !w->failure) {
        rw_absent(w, sl);
        return;
    }
    if (req->kind == RREQ_PUT) {
        pthread_mutex_lock(&w->rp->mu);
        w->st.objects_put++;
        w->st.bytes_put += len;
        pthread_mutex_unlock(&w->rp->mu);
        rw_sent(w, sl, len, 0);
    }
    bool stored = req->kind == RREQ_PUT || req->ret == 1;
    if (stored) {
        /* a recipe: its entry goes, its record gets the bit (rw_recipe_done) */
        int e = sl->recipe ? rw_recipe_done(w, sl) : rw_chunk_done(w, sl);
        if (e < 0)
            rw_fail_round(w, e, NULL);
        else
            rw_fan_stored(w, sl, len);
    }
    rw_slot_end(w, sl, stored);
}

static void rw_drain(struct rworker *w, int timeout_ms)
{
    struct region_req *done = region_poll(w->rg, timeout_ms);
    while (done) {
        struct region_req *next = done->next;
        rw_complete(w, done);
        done = next;
    }
}

/* One round: fill the window, run the first publish when it is due,
 * collect completions.  Returns 1 when there was nothing to do. */
static int rw_round(struct rworker *w)
{
    struct fill *f = malloc(sizeof(*f));
    int idle = 0, e = 0;
    if (!f)
        return -ENOMEM;
    rw_parked(w);
    if (!w->failure && !w->drop)
        e = rw_fill(w, f);
    if (e < 0)
        rw_fail_round(w, e, NULL);
    if (w->busy && w->busy == w->nparked) {
        rw_park_wait(w);
    } else if (w->busy) {
        rw_drain(w, 1000);
    } else if (w->drop) {
        w->drop = false;
        if ((e = rw_drop(w, w->cache_seq)) < 0)
            rw_fail_round(w, e, NULL);
    } else if (!w->failure && f->publish_first) {
        if ((e = rw_load(w, f->publish.seq)) == 0) {
            int64_t t0 = mstime_mono_us();
            e = rw_publish(w, &f->publish);
            metrics_request(w->rp->m, w->i, METRICS_OP_PUBLISH, e == 0, 0,
                            (uint64_t)(mstime_mono_us() - t0));
            if (e == 0) {
                pthread_mutex_lock(&w->rp->mu);
                w->st.last_success_ms = now_ms(CLOCK_REALTIME);
                pthread_mutex_unlock(&w->rp->mu);
            }
        } else if (e == -ENOENT)
            e = rw_skip(w, &f->publish);
        if (e == 0)
            rp_notify(w->rp);
        else
            rw_fail_round(w, e, NULL);
    } else if (!w->failure && f->n == 0) {
        idle = 1;
    }
    free(f);
    return idle;
}

static void *rw_main(void *arg)
{
    struct rworker *w = arg;
    struct replicator *rp = w->rp;
    for (;;) {
        pthread_mutex_lock(&rp->mu);
        uint64_t kicks = rp->kicks;
        bool stop = rp->stop, fatal = rp_fatal(rp);
        enum region_state state = w->st.state;
        int64_t retry_at = w->st.retry_at_ms;
        pthread_mutex_unlock(&rp->mu);
        if (fatal) /* a failure of the index, not of this region: no backoff */
            objbuf_stop(rp->ob);
        if (stop || fatal)
            break; /* transfers in flight are abandoned: their entries stay queued */
        if (w->busy == 0 && w->failure) {
            rw_failed(w, w->failure);
            w->failure = 0;
            continue;
        }
        if (w->busy == 0 && (state == REGION_FAILED ||
                             (state == REGION_BACKOFF && now_ms(CLOCK_MONOTONIC) < retry_at))) {
            rw_wait(w, kicks, state == REGION_FAILED ? 0 : retry_at);
            continue;
        }
        int idle = rw_round(w);
        if (idle == 1 && w->intent.name[0]) {
            /* Nothing to do: the intent goes unless work comes soon (ingest
             * kicks with every object it buffers). */
            rw_wait(w, kicks, now_ms(CLOCK_MONOTONIC) + IDLE_INTENT_MS);
            pthread_mutex_lock(&rp->mu);
            bool kicked = rp->kicks != kicks;
            pthread_mutex_unlock(&rp->mu);
            if (!kicked && w->busy == 0)
                rw_intent_end(w);
        } else if (idle == 1) {
            rw_wait(w, kicks, 0);
        } else if (idle == 0 && !w->failure && w->st.failures && w->busy == 0) {
            rw_succeeded(w);
        }
    }
    return NULL;
}

/* ---- public ------------------------------------------------------------ */

/* Chunks in flight per region: the backend's parallelism, bounded so that
 * the windows of all regions (raw bytes plus the encoded object of a
 * maximal chunk each) fit in the memory budget. */
static size_t rp_window(const struct repo *r, const struct region *rg)
{
    uint64_t per = 2 * repo_params(r)->chunk_max * (repo_nregions(r) ? repo_nregions(r) : 1);
    uint64_t cap = per ? repo_conf(r)->memory / per : 1;
    size_t n = region_parallelism(rg);
    if (n > cap)
        n = (size_t)cap;
    if (n > 64)
        n = 64;
    return n ? n : 1;
}

int replicator_new(struct repo *r, int notify_fd, struct metrics *m, struct replicator **ret)
{
    struct replicator *rp = calloc(1, sizeof(*rp));
    pthread_condattr_t ca;
    if (!rp)
        return -ENOMEM;
    rp->r = r;
    rp->m = m;
    rp->notify_fd = notify_fd;
    pthread_mutex_init(&rp->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rp->cv, &ca);
    pthread_condattr_destroy(&ca);
    rp->n = repo_nregions(r);
    bool all_s3 = true;
    for (size_t i = 0; i < rp->n; i++)
        all_s3 &= repo_conf(r)->regions[i].kind == REGION_KIND_S3;
    rp->durable_first =
        rp->n > repo_quorum(r) && (repo_conf(r)->durable_first == DURABLE_FIRST_ON ||
                                   (repo_conf(r)->durable_first == DURABLE_FIRST_AUTO && all_s3));
    for (size_t i = 0; i < rp->n; i++) {
        struct rworker *w = &rp->w[i];
        w->rp = rp;
        w->i = i;
        w->rg = repo_region(r, i);
        w->pend = calloc(1, sizeof(*w->pend));
        manifest_init(&w->man);
        w->nslots = rp_window(r, w->rg);
        w->slots = calloc(w->nslots, sizeof(*w->slots));
        if (!w->pend || !w->slots) {
            replicator_free(rp);
            return -ENOMEM;
        }
    }
    int fe = sendlog_new(&rp->sent);
    if (fe == 0)
        fe = fanout_new(r, FANOUT_ASYNC, &rp->fan);
    if (fe < 0) {
        replicator_free(rp);
        return fe;
    }
    /* an eighth of the memory budget: the windows and ingest hold the rest */
    int oe = objbuf_new((size_t)(repo_conf(r)->memory / 8), repo_quorum(r),
                        replicator_all_slots(rp), &rp->ob);
    if (oe < 0) {
        replicator_free(rp);
        return oe;
    }
    for (size_t i = 0; i < rp->n; i++) {
        int e = pthread_create(&rp->w[i].th, NULL, rw_main, &rp->w[i]);
        if (e) {
            replicator_free(rp);
            return -e;
        }
        rp->w[i].started = true;
    }
    *ret = rp;
    return 0;
}

void replicator_free(struct replicator *rp)
{
    if (!rp)
        return;
    pthread_mutex_lock(&rp->mu);
    rp->stop = true;
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
    for (size_t i = 0; i < rp->n; i++) {
        struct rworker *w = &rp->w[i];
        if (w->started)
            pthread_join(w->th, NULL);
        if (w->started)
            gc_intent_end(w->rg, &w->intent);
        for (size_t k = 0; w->slots && k < w->nslots; k++)
            if (w->slots[k].ent)
                objbuf_release(rp->ob, w->slots[k].ent, w->rg->slot, false);
        gc_cache_free(&w->gcc);
        manifest_free(&w->man);
        free(w->pend);
        free(w->confirmed);
        chunkobj_ctx_free(&w->z);
        for (size_t k = 0; w->slots && k < w->nslots; k++) {
            free(w->slots[k].data);
            buf_free(&w->slots[k].obj);
        }
        free(w->slots);
    }
    objbuf_free(rp->ob);
    fanout_free(rp->fan);
    sendlog_free(rp->sent);
    retakes_free(&rp->retakes);
    pthread_cond_destroy(&rp->cv);
    pthread_mutex_destroy(&rp->mu);
    free(rp);
}

struct objbuf *replicator_objbuf(struct replicator *rp)
{
    return rp->ob;
}

struct sendlog *replicator_sendlog(struct replicator *rp)
{
    return rp->sent;
}

void replicator_ingesting(struct replicator *rp, bool on)
{
    pthread_mutex_lock(&rp->mu);
    rp->ingesting = on;
    rp->kicks++;
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
}

void replicator_kick(struct replicator *rp)
{
    pthread_mutex_lock(&rp->mu);
    rp->kicks++;
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
}

int replicator_retry(struct replicator *rp, const char *region)
{
    int e = -ENOENT;
    pthread_mutex_lock(&rp->mu);
    for (size_t i = 0; i < rp->n; i++) {
        struct rworker *w = &rp->w[i];
        if (region && strcmp(region, w->rg->conf.name))
            continue;
        w->st.state = REGION_OK;
        w->st.retry_at_ms = 0;
        e = 0;
    }
    rp->kicks++;
    pthread_cond_broadcast(&rp->cv);
    pthread_mutex_unlock(&rp->mu);
    for (size_t i = 0; i < rp->n; i++)
        if (!region || !strcmp(region, rp->w[i].rg->conf.name))
            objbuf_lagging(rp->ob, rp->w[i].rg->slot, false);
    return e;
}

void replicator_status(struct replicator *rp, size_t i, struct region_status *ret)
{
    pthread_mutex_lock(&rp->mu);
    *ret = rp->w[i].st;
    pthread_mutex_unlock(&rp->mu);
    ret->copies_from = fanout_sources(rp->fan, i);
}

size_t replicator_take_retakes(struct replicator *rp, char (*ret)[4096], size_t cap)
{
    pthread_mutex_lock(&rp->mu);
    size_t n = retakes_take(&rp->retakes, ret, cap);
    pthread_mutex_unlock(&rp->mu);
    return n;
}
