/*
 * fetch.c — the striped, failing-over chunk downloader behind restore.
 *
 * One loop on one thread: fill each region's window with the next jobs
 * (job i prefers region i mod n, so load spreads evenly whatever the
 * order of completion), poll the regions that have requests in flight,
 * verify each object (chunkobj_decode checks format, length and SHA-256),
 * and hand the raw bytes over.  Failed jobs go to a retry list that is
 * served before new jobs, each to a region not yet tried.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/chunkobj.h"
#include "service/fetch.h"

struct fslot {
    struct region_req req;
    struct fetch_job *job;
    size_t region;
    bool used;
};

struct fetcher {
    struct repo *r;
    struct fetch_job *jobs;
    size_t n, next;
    struct fetch_job **retry;
    size_t nretry;
    struct fslot *slots[CONFIG_MAX_REGIONS];
    size_t window[CONFIG_MAX_REGIONS], busy[CONFIG_MAX_REGIONS];
    size_t inflight;
    struct chunkobj_ctx z;
    struct buf raw;
    struct fetch_stats *st;
    struct buf *err;
};

static size_t f_window(const struct repo *r, size_t i)
{
    uint64_t per = 2 * r->params.chunk_max * (r->nregions ? r->nregions : 1);
    uint64_t cap = per ? r->conf.memory / per : 1;
    size_t w = region_parallelism(r->regions[i]);
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
    region_chunk_key(job->id, sl->req.key);
    sl->req.max = CHUNKOBJ_HEADER_LEN + (size_t)job->len + job->len / 8 + 1024;
    sl->req.ud = sl;
    sl->job = job;
    sl->region = i;
    job->tried |= 1u << i;
    if (region_submit(f->r->regions[i], &sl->req) < 0) {
        log_warn("%s", region_last_error(f->r->regions[i]));
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
    for (size_t k = 0; k < f->r->nregions; k++) {
        size_t i = (home + k) % f->r->nregions;
        if (f->r->health[i] || (job->tried & (1u << i)))
            continue;
        untried = true;
        if (f_submit(f, job, i))
            return 1;
    }
    return untried ? 0 : -1;
}

static int f_fill(struct fetcher *f)
{
    while (f->nretry) {
        struct fetch_job *job = f->retry[f->nretry - 1];
        int p = f_place(f, job, (size_t)(job - f->jobs));
        if (p < 0) {
            char hex[HASH_HEX_LEN + 1];
            hex_encode(job->id, HASH_LEN, hex);
            buf_printf(f->err, "chunk %s is not available intact in any region", hex);
            return CKS_E_DIGEST;
        }
        if (p == 0)
            return 0;
        f->nretry--;
    }
    while (f->next < f->n && f_place(f, &f->jobs[f->next], f->next) == 1)
        f->next++;
    return 0;
}

static void f_failed(struct fetcher *f, struct fslot *sl, int e)
{
    char hex[HASH_HEX_LEN + 1];
    hex_encode(sl->job->id, HASH_LEN, hex);
    log_warn("region '%s': chunk %s: %s; trying the next region", f->r->regions[sl->region]->conf.name,
             hex, e == -ENOENT ? "missing" : sl->req.errmsg[0] ? sl->req.errmsg : err_str(e));
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
    if (e == 0)
        e = chunkobj_decode(&f->z, req->out.data, req->out.len, sl->job->id, sl->job->len, &f->raw);
    if (e == 0 && f->raw.len != sl->job->len)
        e = CKS_E_FORMAT;
    if (e < 0) {
        f_failed(f, sl, e);
        return 0;
    }
    f->st->fetched_bytes += req->out.len;
    f->st->region_chunks[sl->region]++;
    return on_chunk(ud, sl->job, f->raw.data, f->raw.len);
}

static int f_loop(struct fetcher *f,
                  int (*on_chunk)(void *, const struct fetch_job *, const uint8_t *, size_t), void *ud)
{
    int e = 0;
    while (e == 0 && (f->next < f->n || f->nretry || f->inflight)) {
        if ((e = f_fill(f)) < 0)
            break;
        size_t busy_regions = 0;
        for (size_t i = 0; i < f->r->nregions; i++)
            busy_regions += f->busy[i] > 0;
        for (size_t i = 0; i < f->r->nregions && e == 0; i++) {
            if (!f->busy[i])
                continue;
            struct region_req *done = region_poll(f->r->regions[i], busy_regions > 1 ? 5 : 1000);
            while (done) {
                struct region_req *next = done->next;
                if (e == 0) {
                    e = f_complete(f, done, on_chunk, ud);
                } else {
                    ((struct fslot *)done->ud)->used = false;
                    f->busy[i]--;
                    f->inflight--;
                }
                done = next;
            }
        }
    }
    return e;
}

int fetch_run(struct repo *r, struct fetch_job *jobs, size_t n,
              int (*on_chunk)(void *ud, const struct fetch_job *j, const uint8_t *data, size_t len),
              void *ud, struct fetch_stats *stats, struct buf *err)
{
    struct fetcher f = {.r = r, .jobs = jobs, .n = n, .st = stats, .err = err};
    int e = -ENOMEM;
    memset(stats, 0, sizeof(*stats));
    if (!(f.retry = calloc(n ? n : 1, sizeof(*f.retry))))
        return -ENOMEM;
    for (size_t i = 0; i < r->nregions; i++) {
        f.window[i] = f_window(r, i);
        if (!(f.slots[i] = calloc(f.window[i], sizeof(struct fslot))))
            goto out;
    }
    e = f_loop(&f, on_chunk, ud);
    /* On failure, let requests still in flight finish before their buffers go. */
    while (e < 0 && f.inflight) {
        for (size_t i = 0; i < r->nregions; i++) {
            struct region_req *done = f.busy[i] ? region_poll(r->regions[i], 100) : NULL;
            for (; done; done = done->next) {
                f.busy[i]--;
                f.inflight--;
            }
        }
    }
out:
    for (size_t i = 0; i < r->nregions; i++) {
        for (size_t k = 0; f.slots[i] && k < f.window[i]; k++)
            buf_free(&f.slots[i][k].req.out);
        free(f.slots[i]);
    }
    free(f.retry);
    chunkobj_ctx_free(&f.z);
    buf_free(&f.raw);
    return e;
}
