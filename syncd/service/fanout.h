/*
 * fanout.h — upload once, then copy (issue 25): which way a region worker
 * gets a chunk object its region lacks.
 *
 *   fanout_new(repo, FANOUT_ASYNC, &f);  // before the workers: builds the copy map
 *   way = fanout_choose(f, i, present, working, &src);
 *   fanout_copy_failed(f, i, src, e, msg);   // a copy that failed: maybe stop the pair
 *   fanout_is_source(f, i);          // may some region copy from region i?
 *   fanout_free(f);
 *
 * A region's upload region is the first, in the configured order, of
 * itself and the working regions (not in backoff or failed) it can copy
 * from (service/copymap.h) — the configured order, because the operator
 * lists the nearest (or cheapest) region first and it is the one durable
 * first puts ahead anyway.  A region that is its own upload region
 * uploads every new chunk from the instance as today; the others wait
 * until some region they can copy from has confirmed the chunk (its
 * presence bit in the index) and then copy it server-side.  A region
 * only ever waits on a region listed before it, so the waits end at one
 * that uploads; with no working source it uploads itself.  A copy is confirmed by
 * the destination's own HEAD of the object's size before the chunk counts
 * as present there; a failed or unconfirmed copy falls back to an upload
 * from the instance (a source deleted by prune answers 404 and lands
 * here).  A copy refused for good (region_err_permanent: AccessDenied,
 * NoSuchBucket, InvalidRegion, NotImplemented ...) stops copying over that
 * pair for the life of the fanout (the daemon's run, one snapshot),
 * logged naming both regions.
 *
 * The map (service/copymap.h: configuration, remembered probes, new
 * probes) is built by fanout_new, or, with FANOUT_ASYNC (the daemon), on
 * a thread of its own: the daemon serves at once, and until the map is
 * built every region uploads from the instance (the map reads as empty);
 * the log line "server-side copies: ..." says when it is.  `ckptsync
 * snapshot` builds it first (a remembered answer costs nothing; a first
 * probe about six requests per pair).
 *
 * Used by the daemon's region workers (daemon/replicator.c) and by
 * `ckptsync snapshot` (service/snapshot.c).  Region indexes are the
 * repo's (repo_region(r, i)); masks have bit i per region.  Thread-safe:
 * the map is written once before it reads as built, the stopped pairs
 * are atomic bits.
 */
#ifndef CKS_FANOUT_H
#define CKS_FANOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/copymap.h"

struct repo;
struct fanout;

enum fanout_way {
    FANOUT_PUT = COPYMAP_PUT,   /* upload from the instance */
    FANOUT_COPY = COPYMAP_COPY, /* copy server-side from *src */
    FANOUT_WAIT = COPYMAP_WAIT, /* the upload region has not confirmed it yet: ask again later */
};

enum fanout_flags { FANOUT_ASYNC = 1 << 0 };
int fanout_new(struct repo *r, unsigned flags, struct fanout **ret);
/* Stops a build in progress (between two pairs) and waits for it: for
 * the probe under way, a few requests bounded by the store's timeouts
 * (connect 10 s; a stalled transfer 30 s). */
void fanout_free(struct fanout *f);
/* Is the map built (else it reads as empty)? */
bool fanout_ready(const struct fanout *f);
/* For region i, a chunk present (confirmed) in the regions of `present`,
 * while the regions of `working` work. */
enum fanout_way fanout_choose(struct fanout *f, size_t i, uint32_t present, uint32_t working,
                              size_t *ret_src);
/* A copy into i from src failed with e (msg: the region's message). */
void fanout_copy_failed(struct fanout *f, size_t i, size_t src, int e, const char *msg);
/* Can any region copy from region i (so its confirmations matter to them)? */
bool fanout_is_source(const struct fanout *f, size_t i);
/* The regions (bit per index) region i copies from now: the map, less
 * the pairs stopped since start. */
uint32_t fanout_sources(struct fanout *f, size_t i);
/* The copy map as built (empty until fanout_ready). */
const struct copymap *fanout_map(const struct fanout *f);

#endif
