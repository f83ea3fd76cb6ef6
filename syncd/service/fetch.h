/*
 * fetch.h — download many chunks at once, striped over the healthy
 * regions, verified, failing over per chunk.
 *
 *   struct fetch_job jobs[n] = {{.id = ..., .len = ..., .tag = ...}, ...};
 *   fetch_run(repo, jobs, n, on_chunk, ud, &stats, &err);
 *
 * Job i is first asked of healthy region i mod n; every region keeps up to
 * its parallelism (libcurl multi for s3) of requests in flight, bounded by
 * the memory budget, so the regions' bandwidth adds up, in job order as
 * far as the windows go (restore orders its jobs by priority).  A chunk that is
 * missing, damaged (undecodable, wrong digest) or whose region fails is
 * asked of the next region that has not been tried, and counted; the run
 * fails only when no region has it intact.  on_chunk receives the verified
 * raw bytes (valid during the call) in completion order, not job order.
 *
 * Groups: jobs carry a group (0 .. FETCH_GROUPS-1, non-decreasing in job
 * order; restore's priority groups).  A job of group g is not requested
 * while a job of an earlier group has not been, in any part; and while
 * requests of an earlier group are still in flight, a later group's are
 * sent only as long as all requests in flight stay within [restore]
 * inflight bytes (0: not until the earlier group's last answer), so the
 * next group keeps the link busy without taking its bandwidth from the
 * group before.  Within a group, the windows above alone bound it.  All
 * jobs in group 0 (the default): plain job order.
 *
 * Threads: the jobs are dealt round-robin to parts (repo_workers(), fewer
 * for few jobs), each a thread with its own region handles, decoding and
 * verifying on its own core.  on_chunk is called from those threads: one
 * call at a time, or with FETCH_CONCURRENT several at once (on_chunk then
 * locks what it shares itself).
 */
#ifndef CKS_FETCH_H
#define CKS_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/repo.h"

struct fetch_job {
    const uint8_t *id;  /* HASH_LEN bytes, owned by the caller */
    uint32_t len;       /* raw length */
    size_t tag;         /* the caller's */
    uint8_t group;      /* priority group, below FETCH_GROUPS (see above) */
    const uint8_t *sig; /* non-NULL (MANIFEST_RECIPE_SIG bytes): the object is the
                         * recipe recipes/<id>.<sig>, decoded by the run's
                         * decoder (fetch_run_dec); NULL: chunks/<id> */
    uint32_t tried;     /* internal: regions asked */
};

#define FETCH_GROUPS 8

struct fetch_stats {
    uint64_t fetched_bytes; /* object bytes downloaded */
    uint64_t failovers;
    uint64_t region_chunks[CONFIG_MAX_REGIONS];
    bool lost;       /* the run failed for lost_tag's chunk: intact in no region */
    size_t lost_tag; /* that job's tag */
};

/* FETCH_KEEP_GOING: a chunk intact in no region does not stop the
 * others; the run fetches the rest and then fails (stats.lost names the
 * first one lost, err says it). */
enum fetch_flags { FETCH_CONCURRENT = 1 << 0, FETCH_KEEP_GOING = 1 << 1 };
int fetch_run(struct repo *r, struct fetch_job *jobs, size_t n, unsigned flags,
              int (*on_chunk)(void *ud, const struct fetch_job *j, const uint8_t *data, size_t len),
              void *ud, struct fetch_stats *stats, struct buf *err);

/* As fetch_run, with recipe jobs (a sig): dec->decode turns a recipe
 * object's bytes into the chunk's plaintext in out (reset first),
 * checked against j->id, with the part's codec context z; it runs on the
 * parts' threads, several at once.  A negative code counts as that
 * region's copy being damaged (the next region is asked).
 * FETCH_DEC_LATER: the object is intact but the decoder cannot rebuild
 * the chunk yet (a base it was lent proved wrong): the job counts as done
 * and on_chunk is not called for it (the caller runs it again).  Plain
 * jobs are decoded as by fetch_run. */
#define FETCH_DEC_LATER 1
struct chunkobj_ctx;
struct fetch_decoder {
    int (*decode)(void *ud, struct chunkobj_ctx *z, const struct fetch_job *j, const uint8_t *obj,
                  size_t len, struct buf *out);
    void *ud;
};
int fetch_run_dec(struct repo *r, struct fetch_job *jobs, size_t n, unsigned flags,
                  const struct fetch_decoder *dec,
                  int (*on_chunk)(void *ud, const struct fetch_job *j, const uint8_t *data,
                                  size_t len),
                  void *ud, struct fetch_stats *stats, struct buf *err);

#endif
