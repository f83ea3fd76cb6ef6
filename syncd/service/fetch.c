/*
 * fetch.c — the striped, failing-over chunk downloader behind restore.
 *
 * One loop per part: fill each region's window with the next jobs (job i
 * prefers region i mod n, so load spreads evenly whatever the order of
 * completion), poll the regions that have requests in flight, verify
 * each object (chunkobj_decode checks format, length and SHA-256; a
 * recipe job's object goes to the run's decoder instead, fetch_run_dec),
 * and hand the raw bytes over.  Failed jobs go to a retry list that is served
 * before new jobs, each to a region not yet tried.
 *
 * Parts: the jobs are cut into as many contiguous ranges as the repo has
 * workers (config `workers`), each run by its own thread with its own
 * region handles (a struct region is single-threaded), so downloads,
 * decompression and verification use every core; the first part runs on
 * the calling thread with the repo's handles.  The caller's on_chunk is
 * called under one mutex, so it needs no locking of its own.
 *
 * Group gate (fetch.h): the parts share, under gmu, how many jobs of each
 * group are not yet requested and how many requests of each group are in
 * flight, with their bytes.  A part reserves its next job's place at the
 * gate before it submits it (and gives it back if no region has room), so
 * no two parts overshoot the carry together; a part the gate holds back
 * with nothing in flight waits on gcv, which every answer signals.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "engine/tdelta.h"
#include "service/fetch.h"

struct fslot {
    struct region_req req;
    struct fetch_job *job;
    size_t region;
    bool used;
};

struct fetch_shared {
    pthread_mutex_t mu; /* serialises on_chunk, unless FETCH_CONCURRENT */
    bool concurrent;
    bool keep_going; /* FETCH_KEEP_GOING */
    int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t);
    void *ud;
    const struct fetch_decoder *dec; /* recipe jobs' (fetch_run_dec) */
    atomic_int failed;               /* a part failed: the others stop */
    /* the group gate, under gmu */
    pthread_mutex_t gmu;
    pthread_cond_t gcv;          /* an answer came: the gate may open */
    size_t unsent[FETCH_GROUPS]; /* jobs never requested yet */
    size_t busy[FETCH_GROUPS];   /* requests in flight */
    uint64_t busy_bytes;         /* their raw bytes, every group */
    uint64_t carry;              /* [restore] inflight */
    uint64_t answers;            /* answers so far: a wait sees one it missed */
};

struct fetcher {
    struct repo *r;
    struct fetch_shared *sh;
    struct region *rg[CONFIG_MAX_REGIONS];  /* this part's handles */
    struct region *own[CONFIG_MAX_REGIONS]; /* those it opened itself */
    size_t parts;
    pthread_t th;
    int ret;
    struct buf errbuf;
    struct fetch_stats stbuf;
    size_t delivered;       /* jobs handed to on_chunk */
    struct fetch_job *base; /* every part's jobs: a job's home region is its index's */
    struct fetch_job *jobs; /* this part's: jobs[0], jobs[stride], ... */
    size_t n, next, stride;
    struct fetch_job **retry;
    size_t nretry;
    struct fslot *slots[CONFIG_MAX_REGIONS];
    size_t window[CONFIG_MAX_REGIONS], busy[CONFIG_MAX_REGIONS];
    size_t inflight;
    bool gated;           /* f_fill stopped at the group gate */
    uint64_t gated_after; /* sh->answers when it did */
    int lost_e;           /* FETCH_KEEP_GOING: a job was lost; returned at the end */
    struct chunkobj_ctx z;
    struct buf raw;
    struct fetch_stats *st;
    struct buf *err;
};

static size_t f_window(const struct fetcher *f, size_t i)
{
    const struct repo *r = f->r;
    uint64_t per =
        2 * repo_params(r)->chunk_max * (repo_nregions(r) ? repo_nregions(r) : 1) * f->parts;
    uint64_t cap = per ? repo_conf(r)->memory / per : 1;
    size_t w = region_parallelism(f->rg[i]);
    if (w > cap)
        w = (size_t)cap;
    return w ? (w > 64 ? 64 : w) : 1;
}

/* Submits job to region i; false when the region has no free slot. */
static bool f_submit(struct fetcher *f, struct fetch_job *job, size_t i)
{
    struct fslot *sl = NULL;
    if (f->busy[i] >= f->window[i])
        return false;
    for (size_t k = 0; k < f->window[i]; k++)
        if (!f->slots[i][k].used) {
            sl = &f->slots[i][k];
            break;
        }
    if (!sl)
        return false;
    sl->req.kind = RREQ_GET;
    sl->req.max = CHUNKOBJ_HEADER_LEN + (size_t)job->len + job->len / 8 + 1024;
    if (job->sig) {
        layout_recipe(job->id, job->sig, sl->req.key);
        sl->req.max += TDELTA_HEAD + TDELTA_BASE_REC * TDELTA_MAX_BASES +
                       (size_t)TDELTA_SEG_REC * TDELTA_MAX_SEGS;
    } else {
        layout_chunk(job->id, sl->req.key);
    }
    sl->req.ud = sl;
    sl->job = job;
    sl->region = i;
    job->tried |= 1u << i;
    if (region_submit(f->rg[i], &sl->req) < 0) {
        log_warn("%s", region_last_error(f->rg[i]));
        return false;
    }
    sl->used = true;
    f->busy[i]++;
    f->inflight++;
    return true;
}

/* Places job on its preferred region, or the next one untried with room.
 * Returns 1 placed, 0 no room now, -1 every healthy region was tried. */
static int f_place(struct fetcher *f, struct fetch_job *job, size_t home)
{
    bool untried = false;
    for (size_t k = 0; k < repo_nregions(f->r); k++) {
        size_t i = (home + k) % repo_nregions(f->r);
        if (repo_region_error(f->r, i) || (job->tried & (1u << i)))
            continue;
        untried = true;
        if (f_submit(f, job, i))
            return 1;
    }
    return untried ? 0 : -1;
}

static unsigned f_group(const struct fetch_job *job)
{
    return job->group < FETCH_GROUPS ? job->group : FETCH_GROUPS - 1;
}

/* Reserves job's place at the group gate: false when it must wait (an
 * earlier group has jobs never requested, or has requests in flight and
 * this one would take the bytes in flight past the carry).  first: the
 * job's first request (a retry was let through once already). */
static bool f_gate_take(struct fetch_shared *sh, const struct fetch_job *job, bool first,
                        uint64_t *answers)
{
    unsigned g = f_group(job);
    bool ok = true, earlier_busy = false;
    pthread_mutex_lock(&sh->gmu);
    *answers = sh->answers;
    for (unsigned h = 0; h < g; h++) {
        ok = ok && !(first && sh->unsent[h]);
        earlier_busy = earlier_busy || sh->busy[h];
    }
    if (ok && earlier_busy && sh->busy_bytes + job->len > sh->carry)
        ok = false;
    if (ok) {
        sh->unsent[g] -= first;
        sh->busy[g]++;
        sh->busy_bytes += job->len;
    }
    pthread_mutex_unlock(&sh->gmu);
    return ok;
}

/* Gives job's place back: answered (first false), or not submitted after
 * all (first as given to f_gate_take). */
static void f_gate_give(struct fetch_shared *sh, const struct fetch_job *job, bool first)
{
    unsigned g = f_group(job);
    pthread_mutex_lock(&sh->gmu);
    sh->unsent[g] += first;
    sh->busy[g]--;
    sh->busy_bytes -= job->len;
    sh->answers++;
    pthread_cond_broadcast(&sh->gcv);
    pthread_mutex_unlock(&sh->gmu);
}

/* Gate, then place: 1 placed, 0 not now (f->gated says if the gate held
 * it), -1 every healthy region was tried. */
static int f_gate_place(struct fetcher *f, struct fetch_job *job, bool first)
{
    if (!f_gate_take(f->sh, job, first, &f->gated_after)) {
        f->gated = true;
        return 0;
    }
    int p = f_place(f, job, (size_t)(job - f->base));
    if (p != 1)
        f_gate_give(f->sh, job, first);
    return p;
}

/* A part the gate holds back with nothing in flight waits for an answer
 * elsewhere since it was held (at most 50 ms: a failed part is noticed
 * too). */
static void f_gate_wait(struct fetcher *f)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000 * 1000 * 1000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000 * 1000 * 1000;
    }
    pthread_mutex_lock(&f->sh->gmu);
    if (f->sh->answers == f->gated_after)
        pthread_cond_timedwait(&f->sh->gcv, &f->sh->gmu, &ts);
    pthread_mutex_unlock(&f->sh->gmu);
}

static int f_fill(struct fetcher *f)
{
    f->gated = false;
    while (f->nretry) {
        struct fetch_job *job = f->retry[f->nretry - 1];
        int p = f_gate_place(f, job, false);
        if (p < 0) {
            char hex[HASH_HEX_LEN + 1];
            hex_encode(job->id, HASH_LEN, hex);
            if (!f->st->lost) { /* the first one lost is the one named */
                buf_printf(f->err, "%s %s is not available intact in any region",
                           job->sig ? "recipe" : "chunk", hex);
                f->st->lost = true;
                f->st->lost_tag = job->tag;
            }
            if (!f->sh->keep_going)
                return CKS_E_DIGEST;
            log_error("%s %s is not available intact in any region", job->sig ? "recipe" : "chunk",
                      hex);
            f->lost_e = CKS_E_DIGEST;
            f->nretry--;
            continue;
        }
        if (p == 0)
            return 0;
        f->nretry--;
    }
    while (f->next < f->n) {
        struct fetch_job *job = &f->jobs[f->next * f->stride];
        if (f_gate_place(f, job, true) != 1)
            break;
        f->next++;
    }
    return 0;
}

static void f_failed(struct fetcher *f, struct fslot *sl, int e)
{
    char hex[HASH_HEX_LEN + 1];
    hex_encode(sl->job->id, HASH_LEN, hex);
    log_warn("region '%s': %s %s: %s; trying the next region", f->rg[sl->region]->conf.name,
             sl->job->sig ? "recipe" : "chunk", hex,
             e == -ENOENT        ? "missing"
             : sl->req.errmsg[0] ? sl->req.errmsg
                                 : err_str(e));
    f->st->failovers++;
    f->retry[f->nretry++] = sl->job;
}

static int f_complete(struct fetcher *f, struct region_req *req,
                      int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t),
                      void *ud)
{
    struct fslot *sl = req->ud;
    int e = req->ret;
    sl->used = false;
    f->busy[sl->region]--;
    f->inflight--;
    f_gate_give(f->sh, sl->job, false);
    if (e == 0 && sl->job->sig)
        e = f->sh->dec->decode(f->sh->dec->ud, &f->z, sl->job, req->out.data, req->out.len,
                               &f->raw);
    else if (e == 0)
        e = chunkobj_decode(&f->z, req->out.data, req->out.len, sl->job->id, sl->job->len, &f->raw);
    if (e == 0 && f->raw.len != sl->job->len)
        e = CKS_E_FORMAT;
    if (e < 0) {
        f_failed(f, sl, e);
        return 0;
    }
    f->st->fetched_bytes += req->out.len;
    f->st->region_chunks[sl->region]++;
    if (e == FETCH_DEC_LATER) { /* the decoder keeps it for a later run */
        f->delivered++;
        return 0;
    }
    if (!f->sh->concurrent)
        pthread_mutex_lock(&f->sh->mu);
    e = atomic_load(&f->sh->failed) ? -ECANCELED : on_chunk(ud, sl->job, f->raw.data, f->raw.len);
    if (!f->sh->concurrent)
        pthread_mutex_unlock(&f->sh->mu);
    f->delivered += e == 0;
    return e;
}

/* A request of region i answered after the part failed: dropped. */
static void f_drop(struct fetcher *f, struct region_req *done, size_t i)
{
    struct fslot *sl = done->ud;
    sl->used = false;
    f->busy[i]--;
    f->inflight--;
    f_gate_give(f->sh, sl->job, false);
}

static int f_loop(struct fetcher *f,
                  int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t),
                  void *ud)
{
    int e = 0;
    while (e == 0 && (f->next < f->n || f->nretry || f->inflight)) {
        if (atomic_load(&f->sh->failed)) {
            e = -ECANCELED;
            break;
        }
        if ((e = f_fill(f)) < 0)
            break;
        if (f->gated && !f->inflight) {
            f_gate_wait(f);
            continue;
        }
        size_t busy_regions = 0;
        for (size_t i = 0; i < repo_nregions(f->r); i++)
            busy_regions += f->busy[i] > 0;
        int wait_ms = busy_regions > 1 ? 5 : f->gated ? 20 : 1000;
        for (size_t i = 0; i < repo_nregions(f->r) && e == 0; i++) {
            if (!f->busy[i])
                continue;
            struct region_req *done = region_poll(f->rg[i], wait_ms);
            while (done) {
                struct region_req *next = done->next;
                if (e == 0) {
                    e = f_complete(f, done, on_chunk, ud);
                } else {
                    f_drop(f, done, i);
                }
                done = next;
            }
        }
    }
    return e;
}

/* One part: its window, its loop, its cleanup.  Sets f->ret. */
static void f_part(struct fetcher *f)
{
    struct repo *r = f->r;
    int e = -ENOMEM;
    if (!(f->retry = calloc(f->n ? f->n : 1, sizeof(*f->retry))))
        goto out;
    for (size_t i = 0; i < repo_nregions(r); i++) {
        f->window[i] = f_window(f, i);
        if (!(f->slots[i] = calloc(f->window[i], sizeof(struct fslot))))
            goto out;
    }
    e = f_loop(f, f->sh->on_chunk, f->sh->ud);
    /* On failure, let requests still in flight finish before their buffers go. */
    while (e < 0 && f->inflight) {
        for (size_t i = 0; i < repo_nregions(r); i++) {
            struct region_req *done = f->busy[i] ? region_poll(f->rg[i], 100) : NULL;
            for (; done; done = done->next)
                f_drop(f, done, i);
        }
    }
out:
    for (size_t i = 0; i < repo_nregions(r); i++) {
        for (size_t k = 0; f->slots[i] && k < f->window[i]; k++)
            buf_free(&f->slots[i][k].req.out);
        free(f->slots[i]);
        f->slots[i] = NULL;
    }
    free(f->retry);
    f->retry = NULL;
    chunkobj_ctx_free(&f->z);
    buf_free(&f->raw);
    if (e < 0 && e != -ECANCELED)
        atomic_store(&f->sh->failed, 1);
    /* a lost chunk (FETCH_KEEP_GOING) fails the run, and stops no part */
    f->ret = e == 0 ? f->lost_e : e;
}

static void *f_part_main(void *arg)
{
    f_part(arg);
    return NULL;
}

/* Parts worth running: no more than workers, and each with at least a
 * few chunks per region so windows fill. */
static size_t f_parts(const struct repo *r, size_t n)
{
    size_t parts = repo_workers(r);
    size_t min_jobs = 4 * (repo_nregions(r) ? repo_nregions(r) : 1);
    if (parts > n / min_jobs)
        parts = n / min_jobs;
    return parts ? parts : 1;
}

/* Sets up part p of f[0 .. parts): every parts-th job from jobs + p.
 * Interleaved, not halves: the parts walk each file side by side, so
 * chunks arrive close to file order (restore hashes each file in order,
 * see restore.c).  Part 0 runs on the caller's thread with r's region
 * handles, stats and err; the others clone a handle of each healthy
 * region (a struct region is used by one thread at a time).  0, or an
 * error (err says). */
static int f_part_init(struct fetcher *f, size_t p, size_t parts, struct fetch_job *jobs, size_t n,
                       struct fetch_stats *stats, struct buf *err)
{
    struct fetcher *fp = &f[p];
    struct repo *r = f[0].r;
    fp->r = r;
    fp->z = repo_chunkobj_ctx(r);
    fp->sh = f[0].sh;
    fp->parts = parts;
    fp->base = jobs;
    fp->jobs = jobs + p;
    fp->stride = parts;
    fp->n = p < n ? (n - p + parts - 1) / parts : 0;
    fp->st = p ? &fp->stbuf : stats;
    fp->err = p ? &fp->errbuf : err;
    for (size_t i = 0; i < repo_nregions(r); i++) {
        fp->rg[i] = repo_region(r, i);
        if (p == 0 || repo_region_error(r, i))
            continue;
        struct buf rerr = BUF_INIT;
        int e = repo_region_clone(r, i, &fp->own[i], &rerr);
        if (e < 0)
            buf_printf(err, "%s", buf_str(&rerr));
        else
            fp->rg[i] = fp->own[i];
        buf_free(&rerr);
        if (e < 0)
            return e;
    }
    return 0;
}

/* Waits for parts 1 .. started, frees what they own, and folds their
 * results into part 0's: e (part 0's result) becomes the first real error
 * of a part, with that part's message in err, and their counts are added
 * to stats.  Returns the result. */
static int f_join(struct fetcher *f, size_t parts, size_t started, int e, struct fetch_stats *stats,
                  struct buf *err)
{
    for (size_t p = 1; p < parts; p++) {
        if (p < started)
            pthread_join(f[p].th, NULL);
        if ((e == 0 || e == -ECANCELED) && f[p].ret < 0 && f[p].ret != -ECANCELED) {
            e = f[p].ret;
            stats->lost = f[p].stbuf.lost;
            stats->lost_tag = f[p].stbuf.lost_tag;
            if (buf_str(&f[p].errbuf)[0]) { /* else on_chunk wrote err itself */
                buf_reset(err);
                buf_printf(err, "%s", buf_str(&f[p].errbuf));
            }
        }
        stats->fetched_bytes += f[p].stbuf.fetched_bytes;
        stats->failovers += f[p].stbuf.failovers;
        for (size_t i = 0; i < CONFIG_MAX_REGIONS; i++)
            stats->region_chunks[i] += f[p].stbuf.region_chunks[i];
        for (size_t i = 0; i < CONFIG_MAX_REGIONS; i++)
            region_free(f[p].own[i]);
        buf_free(&f[p].errbuf);
    }
    return e;
}

int fetch_run(struct repo *r, struct fetch_job *jobs, size_t n, unsigned flags,
              int (*on_chunk)(void *ud, const struct fetch_job *j, const uint8_t *data, size_t len),
              void *ud, struct fetch_stats *stats, struct buf *err)
{
    return fetch_run_dec(r, jobs, n, flags, NULL, on_chunk, ud, stats, err);
}

int fetch_run_dec(struct repo *r, struct fetch_job *jobs, size_t n, unsigned flags,
                  const struct fetch_decoder *dec,
                  int (*on_chunk)(void *ud, const struct fetch_job *j, const uint8_t *data,
                                  size_t len),
                  void *ud, struct fetch_stats *stats, struct buf *err)
{
    struct fetch_shared sh = {.on_chunk = on_chunk,
                              .ud = ud,
                              .dec = dec,
                              .concurrent = (flags & FETCH_CONCURRENT) != 0,
                              .keep_going = (flags & FETCH_KEEP_GOING) != 0};
    size_t parts = f_parts(r, n);
    struct fetcher *f = calloc(parts, sizeof(*f));
    int e = 0;
    memset(stats, 0, sizeof(*stats));
    if (!f)
        return -ENOMEM;
    pthread_mutex_init(&sh.mu, NULL);
    pthread_mutex_init(&sh.gmu, NULL);
    pthread_cond_init(&sh.gcv, NULL);
    sh.carry = repo_conf(r)->restore_inflight;
    for (size_t i = 0; i < n; i++)
        sh.unsent[f_group(&jobs[i])]++;
    f[0].r = r;
    f[0].sh = &sh;
    for (size_t p = 0; e == 0 && p < parts; p++)
        e = f_part_init(f, p, parts, jobs, n, stats, err);
    size_t started = 1;
    for (size_t p = 1; e == 0 && p < parts; p++, started++)
        if ((e = -pthread_create(&f[p].th, NULL, f_part_main, &f[p])) < 0)
            atomic_store(&sh.failed, 1);
    if (e == 0)
        f_part(&f[0]);
    else
        f[0].ret = e;
    e = f_join(f, parts, started, f[0].ret, stats, err);
    size_t delivered = 0;
    for (size_t p = 0; p < parts; p++)
        delivered += f[p].delivered;
    if (e == 0 && delivered != n) { /* never: a job lost is a tree torn */
        buf_printf(err, "internal error: %zu of %zu chunks fetched", delivered, n);
        e = -EIO;
    }
    if (e < 0 && !buf_str(err)[0])
        buf_printf(err, "%s", err_str(e));
    pthread_mutex_destroy(&sh.mu);
    pthread_mutex_destroy(&sh.gmu);
    pthread_cond_destroy(&sh.gcv);
    free(f);
    return e;
}
