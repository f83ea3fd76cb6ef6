/*
 * snapshot.c — the one-shot snapshot: the reading core (service/ingcore.c:
 * walk -> read -> FastCDC -> SHA-256) -> dedup lookup -> encode -> put to
 * each region -> index -> confirm -> manifest -> commit records.
 *
 * Design notes.
 * - The reading (walk, file identity, reuse of unchanged files, torn-file
 *   retries, the manifest) is the daemon's too; what is this file's is a
 *   chunk's way into the regions, synchronously, from the pool's jobs.
 * - A chunk is compressed only if some region lacks it, and at most once.
 *   Before uploading we ask the region (has): another instance may have
 *   stored the chunk already, and a HEAD is far cheaper than a PUT.
 * - Chunk presence is committed in the index one transaction per chunk,
 *   right after the chunk is durable in the regions: a crash loses at most
 *   the knowledge of one chunk, which the next run re-learns with `has`.
 * - Refcounts move only when the snapshot record is first created, in the
 *   same transaction, so a retried commit never counts a chunk twice.
 * - An unchanged file (ingcore.c) is taken from the index only when every
 *   healthy region holds its chunks; a file whose identity changes during
 *   the read is read again, up to SNAPSHOT_RETRIES times.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/testmeet.h"
#include "engine/chunkobj.h"
#include "engine/crypt.h"
#include "service/catalog.h"
#include "service/dwrite.h"
#include "service/fanout.h"
#include "service/gc.h"
#include "service/ingcore.h"
#include "service/keyframe.h"
#include "service/kfxor.h"
#include "service/presence.h"
#include "service/reupload.h"
#include "service/snapshot.h"
#include "store/layout.h"

/* A pool thread's own things: region handles (a struct region is
 * single-threaded; thread 0 uses the repo's) and an encoder. */
struct sworker {
    struct region *rg[CONFIG_MAX_REGIONS];
    struct region *own[CONFIG_MAX_REGIONS];
    struct chunkobj_ctx z;
    struct buf obj;
    struct buf env; /* obj sealed once for every region (encrypted repositories) */
    /* the chunk this thread is looking up and uploading (under
     * snap.claim_mu): a second job of the same id, read from another file
     * at the same time, waits for it and then finds it in the index */
    uint8_t claim[HASH_LEN];
    bool claimed;
};

/* One chunk in flight: the reading core's job (service/ingcore.h), then
 * its way into the regions. */
struct sjob {
    struct ingcore_job h;
    uint32_t healthy; /* region indices it may use (bits) */
    /* outcome */
    struct index_chunk was, c;
    uint32_t before;
    int rerr[CONFIG_MAX_REGIONS];
    char rmsg[CONFIG_MAX_REGIONS][512];
    uint64_t objects_put[CONFIG_MAX_REGIONS], bytes_put[CONFIG_MAX_REGIONS];
    uint64_t objects_copied[CONFIG_MAX_REGIONS], bytes_copied[CONFIG_MAX_REGIONS];
    uint64_t copies_failed[CONFIG_MAX_REGIONS];
};

struct snap {
    struct repo *r;
    const struct snapshot_opts *o;
    struct snapshot_result *res;
    struct buf *err;
    struct ingcore core; /* walk, manifest (core.m), the files read */
    struct chunkobj_ctx z;
    struct buf obj;    /* the encoded object of a chunk uploaded again */
    struct seen *seen; /* chunks this snapshot confirmed, per region */
    size_t nseen, seen_cap;
    /* prune's protocol (service/gc.h): what this snapshot relies on in each
     * region is covered by an intent written before the first look */
    struct gc_intent intent[CONFIG_MAX_REGIONS];
    struct gc_cache gcc[CONFIG_MAX_REGIONS];
    struct pool *pool;
    struct sworker *wk;
    size_t nwk;
    struct fanout *fan;       /* upload once, then copy (service/fanout.h) */
    pthread_mutex_t claim_mu; /* sworker.claim */
    pthread_cond_t claim_cv;
    struct dwrite *dw; /* derived bf16 ([compress] derive_bf16) and deltas against
                        * the keyframe (keyframe_every); NULL: neither */
    struct kfbase *kb; /* the keyframe's chunks (service/keyframe.h); NULL: none */
};

/* A chunk this snapshot uploaded or found in the regions of mask (slot
 * bits): those need no second look before the commit. */
struct seen {
    uint8_t id[HASH_LEN];
    uint32_t mask;
};

static struct snap *snap_of(const struct sjob *j)
{
    return j->h.c->o.ud;
}

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
    snap_region_fail_msg(s, i, e, region_last_error(repo_region(s->r, i)));
}

/* The slots of the regions still in the snapshot: an unchanged file's
 * chunks are reused only when the index has them in each. */
static uint32_t snap_healthy_mask(void *ud)
{
    const struct snap *s = ud;
    uint32_t mask = 0;
    REPO_FOR_HEALTHY(s->r, i)
        mask |= 1u << repo_region(s->r, i)->slot;
    return mask;
}

/* ---- chunks ------------------------------------------------------------ */

/* A chunk's way into the regions (index lookup, encode, HAS and PUT in
 * every region, index record) runs in the reading core's pool job, several
 * chunks at once; its outcome is applied on the calling thread in the
 * file's chunk order (snap_chunk_apply). */

static int snap_encode_once(struct sjob *j, struct sworker *w, struct index_chunk *c)
{
    enum chunkobj_codec codec;
    if (w->obj.len)
        return 0;
    struct chunkobj_opts o = repo_chunk_opts(snap_of(j)->r);
    o.width = j->h.width;
    int e = chunkobj_encode(&w->z, j->h.raw.data, j->h.raw.len, &o, &w->obj, &codec);
    if (e < 0) {
        snprintf(j->h.msg, sizeof(j->h.msg), "compressing a chunk: %s", err_str(e));
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

/* The regions (index bits) the chunk is present in, by c. */
static uint32_t snap_present(struct sjob *j, struct sworker *w, const struct index_chunk *c)
{
    uint32_t m = 0;
    for (size_t i = 0; i < repo_nregions(snap_of(j)->r); i++)
        if (c->presence >> w->rg[i]->slot & 1)
            m |= 1u << i;
    return m;
}

/* What one round of a chunk's fan-out writes. */
struct snap_fan {
    const char *key;
    const struct buf *obj; /* what a PUT sends: the object, or its envelope */
    bool sealed;
    uint32_t need;  /* regions that still lack it */
    uint32_t force; /* regions whose copy failed: upload from the instance */
};

/* A copy into region i from src, confirmed by i's own HEAD (ret 1), or
 * not: logged naming both regions, and i gets the chunk from the
 * instance next (f->force). */
static void snap_copy_outcome(struct sjob *j, struct sworker *w, const struct region_op *op,
                              size_t i, size_t src, struct index_chunk *c, struct snap_fan *f)
{
    const struct config *conf = repo_conf(snap_of(j)->r);
    if (op->ret == 1) {
        c->presence |= 1u << w->rg[i]->slot;
        j->objects_copied[i]++;
        j->bytes_copied[i] += f->obj->len; /* as stored: the envelope, sealed */
        return;
    }
    j->copies_failed[i]++;
    f->force |= 1u << i;
    if (op->ret == 0)
        log_warn("region '%s': a copy from region '%s' was answered as done, but the region does "
                 "not hold the chunk; uploading it from this instance",
                 conf->regions[i].name, conf->regions[src].name);
    else
        fanout_copy_failed(snap_of(j)->fan, i, src, op->ret, region_last_error(w->rg[i]));
}

/* One round: each region that lacks the chunk uploads it, copies it from
 * a region that has it, or waits for its upload region
 * (service/fanout.h) to have it, the next round. */
static void snap_fan_round(struct sjob *j, struct sworker *w, struct index_chunk *c,
                           struct snap_fan *f)
{
    struct region_op ops[CONFIG_MAX_REGIONS];
    size_t which[CONFIG_MAX_REGIONS], src[CONFIG_MAX_REGIONS], n = 0;
    uint32_t present = snap_present(j, w, c);
    for (size_t i = 0; i < repo_nregions(snap_of(j)->r); i++) {
        if (!(f->need >> i & 1))
            continue;
        enum fanout_way way = f->force >> i & 1
                                  ? FANOUT_PUT
                                  : fanout_choose(snap_of(j)->fan, i, present, j->healthy, &src[n]);
        if (way == FANOUT_WAIT)
            continue;
        ops[n] = (struct region_op){.rg = w->rg[i],
                                    .kind = REGION_OP_PUT,
                                    .key = f->key,
                                    .data = f->obj->data,
                                    .len = f->obj->len,
                                    .sealed = f->sealed};
        if (way == FANOUT_COPY)
            ops[n] = (struct region_op){.rg = w->rg[i],
                                        .kind = REGION_OP_COPY,
                                        .key = f->key,
                                        .len = w->obj.len,
                                        .src = w->rg[src[n]]};
        which[n++] = i;
    }
    if (n == 0) { /* every region waits on one that left: upload */
        f->force |= f->need;
        return;
    }
    region_batch(ops, n);
    for (size_t k = 0; k < n; k++) {
        size_t i = which[k];
        if (ops[k].kind == REGION_OP_COPY)
            snap_copy_outcome(j, w, &ops[k], i, src[k], c, f);
        else
            snap_chunk_outcome(j, w, &ops[k], 1, &which[k], c);
        if (ops[k].kind == REGION_OP_PUT || ops[k].ret == 1)
            f->need &= ~(1u << i);
    }
}

/* Makes the chunk present in every region the job may use: ask the
 * regions that the index does not know to hold it, then upload it once
 * and have the others copy it (snap_fan_round), or upload to each where
 * they cannot copy.  j->before gets the presence the chunk had before
 * any upload: 0 means no region had it, a new chunk. */
static int snap_chunk_upload(struct sjob *j, struct sworker *w, struct index_chunk *c)
{
    struct region_op ops[CONFIG_MAX_REGIONS];
    size_t which[CONFIG_MAX_REGIONS], n = 0;
    char key[REGION_KEY_MAX];
    size_t nregions = repo_nregions(snap_of(j)->r);
    int e;

    layout_chunk(j->h.id, key);
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
    /* tests: the first chunk found absent waits here for a second job of
     * its id; sworker.claim keeps one from coming (base/testmeet.h) */
    testmeet_at("CKPTSYNC_TEST_SNAP_MEET", j->h.id, HASH_LEN);
    /* An encrypted repository: one seal for every region that lacks it. */
    int sealed = region_seal(w->rg[which[0]], key, w->obj.data, w->obj.len, &w->env);
    if (sealed < 0) {
        snprintf(j->h.msg, sizeof(j->h.msg), "sealing a chunk: %s", err_str(sealed));
        return sealed;
    }
    struct snap_fan f = {.key = key, .obj = sealed ? &w->env : &w->obj, .sealed = sealed == 1};
    for (size_t k = 0; k < n; k++)
        if (ops[k].kind == REGION_OP_HAS && ops[k].ret == 0)
            f.need |= 1u << which[k];
    for (size_t round = 0; f.need && round <= 2 * nregions; round++)
        snap_fan_round(j, w, c, &f);
    return 0;
}

static int snap_chunk_record(struct sjob *j, const struct index_chunk *c)
{
    struct index_txn *t;
    int e = index_txn_begin(repo_index(snap_of(j)->r), true, &t);
    if (e == 0 && (e = index_chunk_put(t, j->h.id, c)) < 0)
        index_txn_abort(t);
    else if (e == 0)
        e = index_txn_commit(t);
    if (e < 0)
        snprintf(j->h.msg, sizeof(j->h.msg), "recording a chunk in the index: %s", err_str(e));
    return e;
}

/* Before the job goes to the pool: the regions it may use. */
static void snap_job_prepare(struct ingcore_job *hj)
{
    struct sjob *j = (struct sjob *)hj;
    struct snap *s = snap_of(j);
    j->healthy = 0;
    for (size_t i = 0; i < repo_nregions(s->r); i++) {
        j->rerr[i] = 0;
        j->objects_put[i] = j->bytes_put[i] = 0;
        j->objects_copied[i] = j->bytes_copied[i] = j->copies_failed[i] = 0;
        if (repo_region_ok(s->r, i))
            j->healthy |= 1u << i;
    }
}

/* Pool thread t takes chunk id for itself, once no other thread holds
 * it: two files read at once may hold the same chunk, and it is looked
 * up and uploaded once. */
static void snap_claim(struct snap *s, size_t t, const uint8_t id[HASH_LEN])
{
    pthread_mutex_lock(&s->claim_mu);
    for (size_t o = 0; o < s->nwk;)
        if (o != t && s->wk[o].claimed && !memcmp(s->wk[o].claim, id, HASH_LEN)) {
            pthread_cond_wait(&s->claim_cv, &s->claim_mu);
            o = 0;
        } else {
            o++;
        }
    memcpy(s->wk[t].claim, id, HASH_LEN);
    s->wk[t].claimed = true;
    pthread_mutex_unlock(&s->claim_mu);
}

static void snap_unclaim(struct snap *s, size_t t)
{
    pthread_mutex_lock(&s->claim_mu);
    s->wk[t].claimed = false;
    pthread_cond_broadcast(&s->claim_cv);
    pthread_mutex_unlock(&s->claim_mu);
}

static int snap_job_chunk(struct sjob *j, struct snap *s, struct sworker *w);

/* The job, on pool thread t, its id known. */
static int snap_job_run(struct ingcore_job *hj, size_t t)
{
    struct sjob *j = (struct sjob *)hj;
    struct snap *s = snap_of(j);
    snap_claim(s, t, hj->id);
    int e = snap_job_chunk(j, s, &s->wk[t]);
    snap_unclaim(s, t);
    return e;
}

/* The slots of every region the job may use. */
static uint32_t snap_job_slots(const struct sjob *j)
{
    uint32_t m = 0;
    for (size_t i = 0; i < repo_nregions(snap_of(j)->r); i++)
        if (j->healthy >> i & 1)
            m |= 1u << repo_region(snap_of(j)->r, i)->slot;
    return m;
}

/* Whether the chunk waits for phase B (a bf16 chunk of a derivable
 * tensor, not already stored plain everywhere). */
static bool snap_defer(struct snap *s, struct sjob *j, const struct index_chunk *c)
{
    uint32_t need = snap_job_slots(j);
    if (!s->dw || (need && (c->presence & need) == need))
        return false;
    return dwrite_defer_bytes(s->dw, j->h.file, j->h.off, (uint32_t)j->h.raw.len, j->h.id,
                              j->h.width, j->h.raw.data);
}

/* Looks the chunk up, uploads it where it is missing, records it. */
static int snap_job_chunk(struct sjob *j, struct snap *s, struct sworker *w)
{
    struct index_chunk c = {0};
    struct index_txn *t_;
    int e;

    if ((e = index_txn_begin(repo_index(s->r), false, &t_)) < 0)
        return e;
    e = index_chunk_get(t_, j->h.id, &c);
    index_txn_abort(t_);
    if (e < 0 && e != -ENOENT)
        return e;
    if (e == -ENOENT) {
        memset(&c, 0, sizeof(c));
        c.raw_len = (uint32_t)j->h.raw.len;
    }
    j->was = c;
    if (snap_defer(s, j, &c)) { /* phase B stores it (snap_dwrite) */
        j->before = c.presence;
        j->c = c;
        return 0;
    }
    if ((e = snap_chunk_upload(j, w, &c)) < 0)
        return e;
    j->c = c;
    return memcmp(&j->was, &c, sizeof(c)) != 0 ? snap_chunk_record(j, &c) : 0;
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

/* Applies the oldest job's outcome, in its file's order, under the core's
 * lock: the regions it lost, what it stored; a failed job is the core's to
 * report. */
static int snap_chunk_apply(struct ingcore_job *hj, size_t file, size_t place)
{
    struct sjob *j = (struct sjob *)hj;
    struct snap *s = snap_of(j);
    int e;
    (void)file;
    (void)place;
    for (size_t i = 0; i < repo_nregions(s->r); i++) {
        s->res->region[i].objects_put += j->objects_put[i];
        s->res->region[i].bytes_put += j->bytes_put[i];
        s->res->region[i].objects_copied += j->objects_copied[i];
        s->res->region[i].bytes_copied += j->bytes_copied[i];
        s->res->region[i].copies_failed += j->copies_failed[i];
        if (j->rerr[i])
            snap_region_fail_msg(s, i, j->rerr[i], j->rmsg[i]);
    }
    if (hj->err < 0)
        return 0;
    if (repo_healthy(s->r) == 0) {
        buf_printf(s->err, "every region failed");
        return CKS_E_QUORUM;
    }
    const struct index_chunk *c = &j->c;
    if (j->before == 0 && c->presence != 0) {
        s->res->new_chunks++;
        s->res->new_bytes += hj->raw.len;
        s->res->stored_bytes += c->stored_len;
    }
    if ((e = snap_seen(s, hj->id, c->presence & ~j->was.presence)) < 0)
        return e;
    return 0;
}

/* A file read whole: its identity goes into the index now, its chunks
 * being in the regions already. */
static int snap_file_read(struct ingcore *c, const struct index_file_key *k,
                          const uint8_t digest[HASH_LEN], const struct mchunk *v, size_t n)
{
    struct index_txn *t;
    int e = index_txn_begin(repo_index(c->r), true, &t);
    if (e == 0 && (e = index_file_put(t, k, digest, v, n)) < 0)
        index_txn_abort(t);
    else if (e == 0)
        e = index_txn_commit(t);
    if (e < 0)
        buf_printf(c->err, "recording a file of \"%s\" in the index: %s", c->w.base, err_str(e));
    return e;
}

static const struct ingcore_ops snap_ops = {
    .job_size = sizeof(struct sjob),
    .prepare = snap_job_prepare,
    .run = snap_job_run,
    .apply = snap_chunk_apply,
    .file_read = snap_file_read,
};

static void snap_progress(void *ud, uint64_t done, uint64_t total)
{
    struct snap *s = ud;
    if (s->o->progress)
        s->o->progress(s->o->progress_ud, done, total);
}

/* Every entry read or taken from the index (service/ingcore.c). */
static int snap_entries(struct snap *s)
{
    int e = ingcore_entries(&s->core);
    const struct ingcore *c = &s->core;
    s->res->files = c->files;
    s->res->dirs = c->dirs;
    s->res->links = c->links;
    s->res->bytes = c->bytes;
    s->res->chunks = c->chunks;
    s->res->files_unchanged = c->files_unchanged;
    s->res->readers = c->readers_used;
    return e;
}

/* ---- derived bf16 (service/dwrite.h) ------------------------------------ */

/* The pre-pass opens files quietly: one that cannot be opened proposes
 * nothing, and the read reports it. */
static int snap_dw_open_quiet(void *ud, size_t k)
{
    struct snap *s = ud;
    size_t keep = s->err->len;
    int fd = ingcore_open(&s->core, k);
    if (fd < 0 && s->err->data) {
        s->err->len = keep;
        s->err->data[keep] = 0;
    }
    return fd;
}

static int snap_dw_open(void *ud, size_t k)
{
    return ingcore_open(&((struct snap *)ud)->core, k);
}

static void snap_dw_id(void *ud, const uint8_t *data, size_t len, uint8_t id[HASH_LEN])
{
    repo_chunk_id(((struct snap *)ud)->r, data, len, id);
}

/* The slots of the regions still in the snapshot whose presence bit is
 * not in have (0 when every one is). */
static uint32_t snap_lacking(struct snap *s, uint32_t have)
{
    return snap_healthy_mask(s) & ~have;
}

static bool snap_dw_have(void *ud, const uint8_t id[HASH_LEN])
{
    struct snap *s = ud;
    struct index_txn *t;
    struct index_chunk c;
    if (index_txn_begin(repo_index(s->r), false, &t) < 0)
        return false;
    int e = index_chunk_get(t, id, &c);
    index_txn_abort(t);
    return e == 0 && snap_lacking(s, c.presence) == 0;
}

/* Test hook: CKPTSYNC_TEST_DWRITE_STOP_AFTER=N stops the process
 * (SIGSTOP) once N recipe objects were written, so that a test can kill
 * -9 a snapshot in phase B at a known point. */
static void snap_dw_test_stop(void)
{
    static unsigned long n;
    const char *v = getenv("CKPTSYNC_TEST_DWRITE_STOP_AFTER");
    if (v && ++n == strtoul(v, NULL, 10))
        raise(SIGSTOP);
}

/* Region i lacks phase B's object key: copied server-side from a region
 * that holds it (present: indices) when the fan-out says so
 * (service/fanout.h; upload once, as for the read's chunks), confirmed
 * by i's own HEAD; else, or when the copy fails, uploaded.  Returns 1
 * (held now), or an error of the upload. */
static int snap_dw_write(struct snap *s, size_t i, const char *key, const uint8_t *obj, size_t len,
                         uint32_t present, uint32_t *ret_written)
{
    struct region *rg = repo_region(s->r, i);
    size_t src;
    if (s->fan && fanout_choose(s->fan, i, present, repo_healthy_mask(s->r), &src) == FANOUT_COPY) {
        int e = region_copy(rg, repo_region(s->r, src), key, len);
        if (e == 0 && region_has_size(rg, key, len) == 1) {
            s->res->region[i].objects_copied++;
            s->res->region[i].bytes_copied += len;
            return 1;
        }
        s->res->region[i].copies_failed++;
        if (e < 0)
            fanout_copy_failed(s->fan, i, src, e, region_last_error(rg));
        else
            log_warn("region '%s': a copy of \"%s\" from region '%s' was answered as done, but "
                     "the region does not hold it; uploading it from this instance",
                     rg->conf.name, key, repo_region(s->r, src)->conf.name);
    }
    int e = region_put(rg, key, obj, len);
    if (e < 0)
        return e;
    s->res->region[i].objects_put++;
    s->res->region[i].bytes_put += len;
    *ret_written |= 1u << i;
    return 1;
}

/* Object obj (key; len bytes) in every region still in the snapshot:
 * asked for first, and, with obj, written where it is missing
 * (snap_dw_write: uploaded once, copied where the regions can).  Returns
 * the regions (indices) written from this instance and the slots that
 * hold it. */
static int snap_dw_store(struct snap *s, const char *key, const uint8_t *obj, size_t len,
                         uint32_t *ret_written, uint32_t *ret_slots)
{
    uint32_t present = 0;
    *ret_written = *ret_slots = 0;
    REPO_FOR_HEALTHY(s->r, i) {
        struct region *rg = repo_region(s->r, i);
        int e = region_has_size(rg, key, len);
        if (e == 0 && obj)
            e = snap_dw_write(s, i, key, obj, len, present, ret_written);
        if (e < 0) {
            snap_region_fail(s, i, e);
        } else if (e > 0) {
            *ret_slots |= 1u << rg->slot;
            present |= 1u << i;
        }
    }
    if (repo_healthy(s->r) == 0) {
        buf_printf(s->err, "every region failed");
        return CKS_E_QUORUM;
    }
    return 0;
}

static int snap_dw_put(void *ud, const char *key, const uint8_t *obj, size_t len, uint32_t raw,
                       uint32_t *ret_slots)
{
    struct snap *s = ud;
    uint32_t written;
    int e = snap_dw_store(s, key, obj, len, &written, ret_slots);
    if (e == 0 && written) {
        s->res->new_chunks++;
        s->res->new_bytes += raw;
        s->res->stored_bytes += len;
        snap_dw_test_stop();
    }
    return e;
}

static int snap_dw_has(void *ud, const char *key, size_t len, uint32_t *ret_slots)
{
    uint32_t written;
    return snap_dw_store(ud, key, NULL, len, &written, ret_slots);
}

static uint32_t snap_dw_slots(void *ud)
{
    return snap_healthy_mask(ud);
}

/* A deferred chunk that stays plain: stored and recorded as the read
 * would have (its byte planes' width, the read's). */
static int snap_dw_plain(void *ud, const uint8_t id[HASH_LEN], const uint8_t *data, size_t len,
                         unsigned width)
{
    struct snap *s = ud;
    struct index_chunk c = {.raw_len = (uint32_t)len};
    struct index_txn *t;
    enum chunkobj_codec codec;
    char key[REGION_KEY_MAX];
    uint32_t written, slots;
    struct chunkobj_opts o = repo_chunk_opts(s->r);
    o.width = width;
    int e = chunkobj_encode(&s->z, data, len, &o, &s->obj, &codec);
    if (e < 0) {
        buf_printf(s->err, "compressing a chunk: %s", err_str(e));
        return e;
    }
    layout_chunk(id, key);
    if ((e = snap_dw_store(s, key, s->obj.data, s->obj.len, &written, &slots)) < 0)
        return e;
    if (written) {
        s->res->new_chunks++;
        s->res->new_bytes += len;
        s->res->stored_bytes += s->obj.len;
    }
    if ((e = index_txn_begin(repo_index(s->r), true, &t)) < 0)
        return e;
    if ((e = index_chunk_get(t, id, &c)) == -ENOENT)
        e = 0;
    c.raw_len = (uint32_t)len;
    c.stored_len = (uint32_t)s->obj.len;
    c.codec = (uint8_t)codec;
    c.presence |= slots;
    if (e < 0 || (e = index_chunk_put(t, id, &c)) < 0)
        index_txn_abort(t);
    else
        e = index_txn_commit(t);
    return e < 0 ? e : snap_seen(s, id, slots);
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
    int e = presence_items(repo_index(s->r), &s->core.m, ret, ret_n, ret_estimate);
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

/* The bytes of chunk id of the snapshot into data, checked against the
 * id: read again from the source, or, for a base only the keyframe holds
 * (a k line: *ret_base_only), from the keyframe (service/keyframe.h). */
static int snap_reread(struct snap *s, const uint8_t id[HASH_LEN], struct buf *data,
                       bool *ret_base_only)
{
    size_t file;
    uint64_t off;
    uint32_t len;
    uint8_t got[HASH_LEN];
    int e = manifest_chunk_at(&s->core.m, id, &file, &off, &len);
    *ret_base_only = e == -ENOENT && manifest_extra(&s->core.m, id);
    if (*ret_base_only && s->kb) {
        struct buf why = BUF_INIT;
        if ((e = kfbase_get(s->kb, id, data, &why)) < 0 && why.len)
            log_warn("%s", buf_str(&why));
        buf_free(&why);
        return e;
    }
    if (e < 0)
        return e;
    const char *path = s->core.m.files[file].path;
    buf_reset(data);
    if (buf_reserve(data, len ? len : 1) < 0)
        return -ENOMEM;
    int fd = ingcore_open(&s->core, file);
    ssize_t n = fd < 0 ? -1 : pread(fd, data->data, len, (off_t)off);
    e = fd < 0 ? fd : n < 0 ? -errno : 0;
    if (fd >= 0)
        close(fd);
    if (e == 0) {
        data->len = (size_t)n;
        repo_chunk_id(s->r, data->data, (size_t)n, got);
        if ((size_t)n != len || memcmp(got, id, HASH_LEN)) {
            buf_printf(s->err, "\"%s/%s\" changed during the snapshot; take it again",
                       s->core.w.base, path);
            e = CKS_E_CHANGED;
        }
    }
    return e;
}

struct snap_rd {
    struct snap *s;
    bool base_only;
};

static int snap_reread_cb(void *ud, const uint8_t id[HASH_LEN], struct buf *out)
{
    struct snap_rd *rd = ud;
    return snap_reread(rd->s, id, out, &rd->base_only);
}

/* Uploads a chunk a region turned out to lack, read again (snap_reread;
 * service/reupload).  A base the keyframe's files cannot give leaves the
 * region out, naming the key: publishing there would name an object it
 * lacks. */
static int snap_reupload(struct snap *s, size_t i, const uint8_t id[HASH_LEN])
{
    char key[REGION_KEY_MAX];
    struct region *rg = repo_region(s->r, i);
    struct chunkobj_opts o = repo_chunk_opts(s->r);
    struct snap_rd rd = {.s = s};
    enum reupload_step step;
    int e = reupload_chunk(rg, &s->z, &o, id, snap_reread_cb, &rd, &s->obj, &step);
    layout_chunk(id, key);
    if (e < 0 && step == REUPLOAD_GET && rd.base_only && e != -ENOMEM) {
        region_set_error(rg,
                         "region '%s': \"%s\", which snapshot %s names, is missing and "
                         "could not be read again (%s); take the snapshot again",
                         rg->conf.name, key, s->core.m.id, err_str(e));
        snap_region_fail(s, i, e);
    }
    if (e < 0 && step == REUPLOAD_ENCODE)
        buf_printf(s->err, "compressing a chunk: %s", err_str(e));
    if (e < 0 && step == REUPLOAD_PUT)
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
    uint32_t bit = 1u << repo_region(s->r, i)->slot;
    int e = index_txn_begin(repo_index(s->r), true, &t);
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
/* An object a prune's mark named that is not a plain file chunk of the
 * snapshot (a recipe, a base-only chunk): phase B's objects are not kept,
 * so it is only confirmed; gone, the region fails (publishing there would
 * name an object it lacks) and a later snapshot uploads it again. */
static int snap_recheck_extra(struct snap *s, size_t i, const struct presence_item *it)
{
    struct region *rg = repo_region(s->r, i);
    char key[LAYOUT_KEY_MAX];
    if (it->recipe)
        layout_recipe(it->id, it->sig, key);
    else
        layout_chunk(it->id, key);
    int e = region_has(rg, key);
    if (e == 0) {
        region_set_error(
            rg,
            "region '%s': a prune deleted \"%s\", which snapshot %s names; "
            "take the snapshot again, or run `ckptsync verify --repair` to complete this one there",
            rg->conf.name, key, s->core.m.id);
        e = -ENOENT;
    }
    return e < 0 ? e : 0;
}

static int snap_gc_check(struct snap *s, size_t i, const struct presence_item *all, size_t n,
                         uint8_t *recheck, bool *ret_all)
{
    struct region *rg = repo_region(s->r, i);
    char waiting[GC_MARK_LEN + 1] = "";
    bool told = false;
    *ret_all = false;
    if (!gc_intent_fresh(&s->intent[i])) {
        gc_intent_end(rg, &s->intent[i]);
        int e = gc_intent_begin(rg, repo_conf(s->r), &s->intent[i]);
        if (e < 0)
            return e;
        *ret_all = true;
    }
    /* the marks are checked against every object the manifest names
     * (recipes and k lines too: manifest_each_object); a recheck of any
     * object of a chunk id is a recheck of all's item of that id */
    struct presence_item *objs = NULL;
    uint8_t *orecheck = NULL;
    size_t nobj = 0;
    uint64_t estimate;
    int e = presence_objects(repo_index(s->r), &s->core.m, &objs, &nobj, &estimate);
    if (e == 0 && !(orecheck = calloc(nobj ? nobj : 1, 1)))
        e = -ENOMEM;
    for (; e == 0;) {
        e = gc_writer_check(rg, &s->gcc[i], repo_conf(s->r), objs, nobj, s->core.m.run,
                            s->core.m.id, orecheck, waiting);
        if (e != -EAGAIN)
            break;
        if (!told)
            log_info("region '%s': a prune is deleting chunks this snapshot uses (mark %s); "
                     "waiting for it to finish, then uploading them again",
                     rg->conf.name, waiting);
        told = true;
        e = 0;
        sleep(2);
    }
    for (size_t k = 0, j = 0; e == 0 && k < nobj; k++) {
        while (j < n && memcmp(all[j].id, objs[k].id, HASH_LEN) < 0)
            j++;
        if (!orecheck[k])
            continue;
        if (!objs[k].recipe && j < n && !memcmp(all[j].id, objs[k].id, HASH_LEN))
            recheck[j] = 1;
        else
            e = snap_recheck_extra(s, i, &objs[k]);
    }
    free(objs);
    free(orecheck);
    return e;
}

static int snap_confirm_region(struct snap *s, size_t i, struct presence_item *all,
                               const uint32_t *masks, size_t n, uint64_t estimate)
{
    uint32_t bit = 1u << repo_region(s->r, i)->slot;
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
    e = presence_confirm(repo_region(s->r, i), ask, m, estimate, &st);
    if (e < 0) {
        snap_region_fail(s, i, e);
        e = 0;
        m = 0;
    }
    if (e == 0 && st.missing)
        log_warn("region '%s': %llu chunk(s) of this snapshot are gone although the index recorded "
                 "them there; uploading them again",
                 repo_region(s->r, i)->conf.name, (unsigned long long)st.missing);
    for (size_t k = 0; e == 0 && k < m && repo_region_ok(s->r, i); k++) {
        if (!ask[k].missing)
            continue;
        if ((e = snap_presence_bit(s, i, ask[k].id, false)) == 0 &&
            (e = snap_reupload(s, i, ask[k].id)) == 0)
            e = snap_presence_bit(s, i, ask[k].id, true);
        if (e < 0 && e != CKS_E_CHANGED &&
            repo_region_error(s->r, i)) /* the region failed: leave it out */
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
    for (size_t i = 0; e == 0 && i < repo_nregions(s->r); i++)
        if (repo_region_ok(s->r, i))
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

static int snap_record(struct snap *s, uint32_t committed, bool create)
{
    struct index_txn *t;
    struct index_snap rec = {0};
    int e = index_txn_begin(repo_index(s->r), true, &t);
    if (e < 0)
        return e;
    if (!create) {
        if ((e = index_snap_get(t, s->core.m.run, s->core.m.id, &rec)) < 0)
            goto fail;
        rec.committed = committed;
        e = index_snap_put(t, s->core.m.run, s->core.m.id, &rec);
        goto done;
    }
    e = ingcore_record(&s->core, t);
done:
    if (e == 0)
        return index_txn_commit(t);
fail:
    index_txn_abort(t);
    return e;
}

/* Confirms region i's chunks again, all of them once the intent was
 * renewed (snap_gc_check). */
static int snap_reconfirm(struct snap *s, size_t i)
{
    struct presence_item *all;
    uint32_t *masks;
    uint64_t estimate;
    size_t n;
    int e = snap_distinct(s, &all, &masks, &n, &estimate);
    if (e < 0)
        return e;
    e = snap_confirm_region(s, i, all, masks, n, estimate);
    free(all);
    free(masks);
    return e;
}

/* W2 of service/gc.h, immediately before region i's publish: an intent
 * that aged past ttl/2 since the region's chunks were confirmed (the
 * writer stalled, or other regions took long) is not published under: it
 * is renewed and every chunk confirmed again (uploading what a prune
 * swept meanwhile), and the check is made again.  0 when the region may
 * publish or has left the snapshot (health says which); an error that
 * fails the snapshot (a source that changed). */
static int snap_ready(struct snap *s, size_t i)
{
    struct region *rg = repo_region(s->r, i);
    for (int k = 0; repo_region_ok(s->r, i); k++) {
        if (gc_intent_publishable(&s->intent[i]))
            return 0;
        if (k == GC_RECONFIRM_MAX) {
            region_set_error(rg,
                             "region '%s': confirming this snapshot's chunks took longer than "
                             "intent_ttl/2 (%llu s) %d times; not publishing there (raise [prune] "
                             "intent_ttl)",
                             rg->conf.name, (unsigned long long)repo_conf(s->r)->intent_ttl / 2, k);
            snap_region_fail(s, i, -ETIMEDOUT);
            return 0;
        }
        log_warn("region '%s': this snapshot's intent is older than intent_ttl/2 by now; "
                 "renewing it and confirming every chunk again before publishing",
                 rg->conf.name);
        int e = snap_reconfirm(s, i);
        if (e < 0)
            return e;
    }
    return 0;
}

static int snap_commit(struct snap *s)
{
    struct buf man = BUF_INIT;
    uint32_t committed = 0;
    int ready = 0;
    int e = manifest_encode(&s->core.m, &man);

    if (e < 0) {
        buf_printf(s->err, "encoding the manifest: %s", err_str(e));
        goto out;
    }
    if ((e = snap_record(s, 0, true)) < 0) {
        buf_printf(s->err, "recording the snapshot in the index: %s", err_str(e));
        goto out;
    }
    for (size_t i = 0; i < repo_nregions(s->r) && ready == 0; i++) {
        if (repo_region_error(s->r, i) || (ready = snap_ready(s, i)) < 0 ||
            repo_region_error(s->r, i))
            continue;
        e = catalog_publish(repo_region(s->r, i), &s->core.m, man.data, man.len);
        if (e < 0) {
            snap_region_fail(s, i, e);
            continue;
        }
        committed |= 1u << repo_region(s->r, i)->slot;
        s->res->committed++;
    }
    if ((e = snap_record(s, committed, false)) < 0)
        buf_printf(s->err, "recording the snapshot's regions in the index: %s", err_str(e));
    if (e == 0)
        e = ready;
out:
    buf_free(&man);
    return e;
}

/* The bytes phase B may keep from the read (dwrite_keep): a quarter of
 * `memory` when derived bf16 or deltas are on, taken from the read's and
 * phase B's own budgets (snap_setup, snap_dw_jobs). */
static uint64_t snap_kept_budget(const struct config *conf)
{
    return conf->derive_bf16 || conf->keyframe_every > 1 ? conf->memory / 4 : 0;
}

/* The pre-pass of service/dwrite.h: the bf16 tensors of the files to read
 * that may be the rounding of an fp32 one of any file (a file the index
 * gives unchanged offers bases only), and the tensors the keyframe holds.
 * s->dw stays NULL when derive_bf16 is off and keyframe_every 1, or
 * nothing is proposed. */
static int snap_dwrite_match(struct snap *s)
{
    const struct walk *w = &s->core.w;
    const struct config *conf = repo_conf(s->r);
    if ((!conf->derive_bf16 && conf->keyframe_every <= 1) || w->n == 0)
        return 0;
    uint64_t *sizes = calloc(w->n, sizeof(*sizes));
    bool *unchanged = calloc(w->n, sizeof(*unchanged));
    int e = sizes && unchanged ? 0 : -ENOMEM;
    for (size_t k = 0; e == 0 && k < w->n; k++) {
        struct index_file_key key;
        uint8_t digest[HASH_LEN];
        if (w->v[k].type != MFILE_REG || w->v[k].link)
            continue;
        sizes[k] = (uint64_t)w->v[k].st.st_size;
        index_file_key_of(&w->v[k].st, &key); /* as the read will find it, most likely */
        unchanged[k] = ingcore_known(s->r, &key, snap_healthy_mask(s), digest, NULL, NULL) == 1;
    }
    if (e == 0) /* the keyframe's files: next to the source, dirname(PATH)/<its root> */
        e = kfxor_prepass(conf->keyframe_every > 1 ? s->r : NULL, s->o->run, s->o->step, w,
                          conf->derive_bf16, snap_dw_open_quiet, s, sizes, unchanged, &s->dw,
                          &s->kb, s->err);
    if (e == 0 && s->dw) /* phase B's chunks kept from the read */
        dwrite_keep(s->dw, snap_kept_budget(conf));
    free(sizes);
    free(unchanged);
    return e;
}

/* Phase B's batches in flight: one per pool thread, each holding about
 * 9 x [chunker] max (a chunk, its bases and the last chunk's), within
 * the memory budget less the read's kept bytes (snap_kept_budget). */
static size_t snap_dw_jobs(const struct snap *s)
{
    const struct config *conf = repo_conf(s->r);
    uint64_t cap =
        (conf->memory - snap_kept_budget(conf)) / (9 * (uint64_t)repo_params(s->r)->chunk_max + 1);
    size_t n = pool_size(s->pool);
    return cap < n ? (cap > 1 ? (size_t)cap : 1) : n;
}

/* Phase B: every entry read, the deferred chunks stored as recipes (or
 * plain), before the confirmation. */
static int snap_dwrite(struct snap *s)
{
    if (!s->dw)
        return 0;
    struct chunkobj_ctx z = repo_chunkobj_ctx(s->r);
    struct chunkobj_opts co = repo_chunk_opts(s->r);
    struct dwrite_env env = {.open = snap_dw_open,
                             .chunk_id = snap_dw_id,
                             .put = snap_dw_put,
                             .has = snap_dw_has,
                             .slots = snap_dw_slots,
                             .plain = snap_dw_plain,
                             .have_plain = snap_dw_have,
                             .z = &z,
                             .ix = repo_index(s->r),
                             .pool = s->pool,
                             .njobs = snap_dw_jobs(s),
                             .level = co.level,
                             .copts = &co,
                             .ud = s,
                             .err = s->err};
    int e = dwrite_finish(s->dw, &s->core.m, &env);
    chunkobj_ctx_free(&z);
    const struct dwrite_stats *st = dwrite_stats(s->dw);
    log_info("derived bf16: %llu tensor pair(s); %llu chunk(s) of %llu bytes stored as recipes of "
             "%llu bytes (%llu known from the index), %llu stored plain",
             (unsigned long long)st->pairs, (unsigned long long)st->recipes,
             (unsigned long long)st->recipe_raw, (unsigned long long)st->recipe_bytes,
             (unsigned long long)st->reused, (unsigned long long)st->plain);
    kfxor_report(s->kb, st, NULL);
    return e;
}

/* ---- entry point ------------------------------------------------------- */

/* The pool and the reading core: two jobs a thread, within the memory
 * budget less the bytes phase B may keep from the read
 * (snap_kept_budget). */
static int snap_setup(struct snap *s)
{
    struct repo *r = s->r;
    const struct config *conf = repo_conf(r);
    int e = pool_new(repo_workers(r), &s->pool);
    if (e < 0)
        return e;
    s->nwk = pool_size(s->pool);
    uint64_t cap =
        (conf->memory - snap_kept_budget(conf)) / (2 * (uint64_t)repo_params(r)->chunk_max + 1);
    size_t njobs = 2 * s->nwk;
    if (njobs > cap)
        njobs = cap > 1 ? (size_t)cap : 1;
    struct ingcore_opts co = {.run = s->o->run,
                              .readers = repo_conf(r)->readers,
                              .step = s->o->step,
                              .instance = s->o->instance,
                              .regions = repo_regions(r),
                              .retries = SNAPSHOT_RETRIES,
                              .reuse_need = snap_healthy_mask,
                              .progress = snap_progress,
                              .ud = s};
    return ingcore_init(&s->core, r, &snap_ops, s->pool, njobs, &co, s->err);
}

/* An empty buffer of cap bytes at a page boundary, large enough that
 * encoding or sealing any chunk never moves it (buf_reserve reallocates
 * only past cap): a dir region then writes objects from it around the page
 * cache, as the daemon's (base/fileio.c, O_DIRECT for aligned buffers). */
static int snap_aligned(struct buf *b, size_t cap)
{
    void *p = NULL;
    cap = (cap + 4095) & ~(size_t)4095;
    if (posix_memalign(&p, 4096, cap) != 0)
        return -ENOMEM;
    *b = (struct buf){.data = p, .len = 0, .cap = cap};
    b->data[0] = 0;
    return 0;
}

/* Each pool thread's region handles (thread 0 uses the repo's) and
 * aligned object buffers: the largest chunk, encoded (its codecs' bound:
 * zstd's is len + len/256 + at most 64 KiB), sealed. */
static int snap_workers(struct snap *s)
{
    struct repo *r = s->r;
    size_t max = (size_t)repo_params(r)->chunk_max;
    size_t cap = CHUNKOBJ_HEADER_LEN + max + max / 128 + (256u << 10);
    if (!(s->wk = calloc(s->nwk, sizeof(*s->wk))))
        return -ENOMEM;
    for (size_t t = 0; t < s->nwk; t++)
        if (snap_aligned(&s->wk[t].obj, cap) < 0 ||
            snap_aligned(&s->wk[t].env, cap + CRYPT_OVERHEAD) < 0)
            return -ENOMEM;
    for (size_t t = 0; t < s->nwk; t++)
        for (size_t i = 0; i < repo_nregions(r); i++) {
            s->wk[t].rg[i] = repo_region(r, i);
            if (t == 0 || repo_region_error(r, i))
                continue;
            int e = repo_region_clone(r, i, &s->wk[t].own[i], s->err);
            if (e < 0)
                return e;
            s->wk[t].rg[i] = s->wk[t].own[i];
        }
    return 0;
}

/* W0 of service/gc.h: an intent in every healthy region before the first
 * chunk is looked up there.  A region that cannot take one leaves. */
static int snap_intents(struct snap *s)
{
    REPO_FOR_HEALTHY(s->r, i) {
        int e = gc_intent_begin(repo_region(s->r, i), repo_conf(s->r), &s->intent[i]);
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
    ingcore_free(&s->core); /* first: jobs in flight use what follows */
    for (size_t i = 0; i < repo_nregions(s->r); i++) {
        gc_intent_end(repo_region(s->r, i), &s->intent[i]); /* published, or never will be */
        gc_cache_free(&s->gcc[i]);
    }
    chunkobj_ctx_free(&s->z);
    buf_free(&s->obj);
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
    fanout_free(s->fan);
    dwrite_free(s->dw);
    kfbase_free(s->kb);
    pthread_mutex_destroy(&s->claim_mu);
    pthread_cond_destroy(&s->claim_cv);
}

/* Regions that failed before the snapshot began (repo_open): their
 * error was logged there, so it is recorded here, not logged again. */
static void snap_note_unhealthy(struct snap *s)
{
    for (size_t i = 0; i < repo_nregions(s->r); i++) {
        struct snapshot_region_result *rr = &s->res->region[i];
        if (repo_region_error(s->r, i) && rr->err == 0) {
            rr->err = repo_region_error(s->r, i);
            snprintf(rr->msg, sizeof(rr->msg), "%s", region_last_error(repo_region(s->r, i)));
        }
    }
}

int snapshot_take(struct repo *r, const struct snapshot_opts *o, struct snapshot_result *ret,
                  struct buf *err)
{
    struct snap s = {.r = r, .o = o, .res = ret, .err = err};
    int e;

    memset(ret, 0, sizeof(*ret));
    ret->nregions = repo_nregions(r);
    if (manifest_run_check(o->run) < 0) {
        buf_printf(err, "run name \"%s\": use 1-256 characters from [A-Za-z0-9._-], not . or ..",
                   o->run);
        return -EINVAL;
    }
    pthread_mutex_init(&s.claim_mu, NULL); /* destroyed by the cleanup at out */
    pthread_cond_init(&s.claim_cv, NULL);
    snap_note_unhealthy(&s);
    if (repo_nregions(r) > 1 && (e = fanout_new(r, 0, &s.fan)) < 0)
        goto out;
    if ((e = snap_setup(&s)) < 0 || (e = ingcore_begin(&s.core, o->path)) < 0 ||
        (e = snap_workers(&s)) < 0 || (e = snap_intents(&s)) < 0 ||
        (e = snap_dwrite_match(&s)) < 0 || (e = snap_entries(&s)) < 0 ||
        (e = snap_dwrite(&s)) < 0 || (e = snap_confirm(&s)) < 0 || (e = snap_commit(&s)) < 0)
        goto out;
    memcpy(ret->id, s.core.m.id, sizeof(ret->id));
    snprintf(ret->root, sizeof(ret->root), "%s", s.core.m.root);
    ret->durable = ret->committed >= repo_quorum(r);
    for (size_t i = 0; i < repo_nregions(r); i++)
        ret->bytes_sent += ret->region[i].bytes_put;
    e = ret->committed == repo_nregions(r) ? 0 : ret->durable ? 1 : CKS_E_QUORUM;
out:
    if (e < 0 && e != CKS_E_QUORUM && !buf_str(err)[0])
        buf_printf(err, "%s", err_str(e));
    snap_teardown(&s);
    return e;
}
