/*
 * copymap.h — which region can copy from which (issue 25: upload once,
 * then the regions copy server-side).
 *
 *   struct copymap m;
 *   copymap_build(repo, NULL, &m);   // probes what is not known yet
 *   if (copymap_can(&m, dst, src)) ...   // region indexes, as repo_region(r, i)
 *
 * Per ordered pair (src, dst) of the repository's regions, [region.DST]
 * copy_from decides first (config_copy_from): none, or a list of names,
 * is taken as is; auto asks the stores: region_probe_copy, a real copy of
 * a small probe object, checked.  A probe's answer is kept in the index
 * (meta "copyfrom/<hex>", like the precondition probe's "precond/<hex>")
 * under a hash of both regions' store identity (kind, endpoint, bucket,
 * prefix, path, signing region, credentials file, addressing), so a
 * change to either region's configuration asks again.  A pair with an
 * unhealthy region, or whose probe got no answer (unreachable), is "no"
 * for now and not remembered.
 *
 * Threads: copymap_build does I/O on handles of its own
 * (repo_region_clone), so it may run on any thread; a built map is a
 * plain value, read by any thread.
 */
#ifndef CKS_COPYMAP_H
#define CKS_COPYMAP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/config.h"

struct repo;

/* Why a pair can copy or not (copymap.why, copymap_why_str). */
enum copymap_why {
    COPYMAP_UNKNOWN,    /* not asked (the build was stopped) */
    COPYMAP_CONF_YES,   /* copy_from names the source */
    COPYMAP_CONF_NO,    /* copy_from = none, or a list without the source */
    COPYMAP_KIND,       /* not both s3: only s3 copies server-side */
    COPYMAP_UNHEALTHY,  /* a region of the pair failed to open: not asked */
    COPYMAP_PROBED_YES, /* the probe copied and the copy checked out */
    COPYMAP_PROBED_NO,  /* the probe's copy was refused or came out wrong */
    COPYMAP_NO_ANSWER,  /* the probe could not ask (unreachable): no for now */
    COPYMAP_RECALL_YES, /* an earlier probe's answer, from the index */
    COPYMAP_RECALL_NO,
};

struct copymap {
    uint32_t from[CONFIG_MAX_REGIONS]; /* from[dst]: bit src set when dst can copy from src */
    uint8_t why[CONFIG_MAX_REGIONS][CONFIG_MAX_REGIONS]; /* [dst][src]: enum copymap_why */
};

/* Fills m; never fails (an unknown pair is "no"): each probe's outcome is
 * logged.  stop (NULL: never) set by another thread ends the build
 * between pairs (the pairs left are "no", COPYMAP_UNKNOWN).  Returns the
 * number of pairs that can copy. */
unsigned copymap_build(struct repo *r, const atomic_bool *stop, struct copymap *m);
/* What the configuration alone says of the pair (for `--check` without a
 * repository): COPYMAP_CONF_YES/NO, COPYMAP_KIND, or COPYMAP_UNKNOWN
 * (auto: a probe decides). */
enum copymap_why copymap_conf_why(const struct config *c, size_t dst, size_t src);
/* "configured", "probed", "remembered from an earlier probe", ... */
const char *copymap_why_str(enum copymap_why why);
bool copymap_can(const struct copymap *m, size_t dst, size_t src);

/* How region i gets a chunk it lacks (the daemon's fan-out, service/fanout.h):
 * present: the regions that confirmed it; working: the regions whose
 * workers work; stopped: sources i no longer copies from.  COPY from
 * *ret_src when a source has it (the first working one by preference);
 * else i's upload region is the first of i and its working sources: i
 * itself -> PUT (from the instance), another (always listed before i) ->
 * WAIT for it.  Pure: no I/O. */
enum copymap_way { COPYMAP_PUT, COPYMAP_COPY, COPYMAP_WAIT };
enum copymap_way copymap_choose(const struct copymap *m, uint32_t stopped, size_t i,
                                uint32_t present, uint32_t working, size_t *ret_src);
/* "b<-a,c; c<-a,b" style summary of m for a log line (names of r). */
void copymap_describe(const struct repo *r, const struct copymap *m, struct buf *out);

#endif
