/*
 * fsck.h — check the local index against the snapshots it records.
 *
 *   struct fsck_result res;
 *   e = fsck_run(repo, &res);    // 0: checked (res.problems says how it went)
 *
 * Every chunk's refcount must equal the number of times the index's
 * snapshots reference it.  A snapshot's manifest comes from the daemon's
 * pending table when it is still there, else from the regions; a snapshot
 * whose manifest is nowhere is a problem.  A pending snapshot whose pin
 * folder is missing is reported (logged), not counted as a problem.
 * This is how the crash tests prove that no chunk was counted twice.
 * Recipes (version 6): every r line of those manifests must agree with
 * the index's record of that recipe object where it has one (the chunk's
 * length, the bases and their lengths), and every recipe record must
 * decode; the index keeps no refcount of recipes.  fsck reads no region
 * object: a chunk or recipe object lost from a region is named by
 * `ckptsync verify`, not here.
 *
 * Each problem is logged as it is found, naming the snapshot or chunk.
 * Reads the index in one read transaction; not thread-safe (a repo is
 * used by one thread).
 */
#ifndef CKS_FSCK_H
#define CKS_FSCK_H

#include <stdint.h>

#include "service/repo.h"

struct fsck_result {
    uint64_t snapshots;   /* snapshots whose manifest was read */
    uint64_t refs;        /* chunk references over all of them */
    uint64_t recipe_refs; /* r lines over all of them */
    uint64_t recipes;     /* recipe records in the index */
    uint64_t problems;    /* refcount mismatches, snapshots without a manifest, recipe
                           * records damaged or disagreeing with an r line */
};

/* 0 when the check ran (whatever it found), a negative code when it could
 * not (index, memory); *ret holds what was counted either way. */
int fsck_run(struct repo *r, struct fsck_result *ret);

#endif
