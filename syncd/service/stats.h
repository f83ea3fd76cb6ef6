/*
 * stats.h — what `ckptsync stats` reports: per region, its objects
 * (chunks/ and recipes/ keys), the bytes they hold and those no retained
 * snapshot uses (garbage awaiting prune); per run, its snapshots, their
 * logical bytes and the bytes their distinct objects hold; per snapshot,
 * its stored bytes and its unique bytes (those no other retained snapshot
 * uses: what deleting it alone would free).  A snapshot uses the objects
 * manifest_each_object() names, as prune's references are: its plain
 * chunks, its k lines and its recipes (the chunks/ object of a chunk it
 * stores only as a recipe is not used by it).
 *
 *   struct stats_result res;
 *   e = stats_compute(r, run, &res, &err);  // reads every retained manifest
 *   ... res.region[i], res.runs[k], res.snaps[res.runs[k].first ..] ...
 *   stats_free(&res);
 *
 * An object's stored size is the one the first region listing it gives.  A
 * region whose listing fails is logged and marked failed (repo_region_fail)
 * and counts as holding nothing; the others are still counted.  Garbage is
 * repository-wide, so every run's manifests are read even when only one
 * run is reported.  The result owns its arrays; region names point into
 * r's configuration (valid while r is open).  Not thread-safe (r is not).
 */
#ifndef CKS_STATS_H
#define CKS_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/manifest.h"
#include "service/repo.h"

struct stats_region {
    const char *name;
    bool healthy;                           /* after the listings (a failed one is not) */
    uint64_t chunks;                        /* chunks/ keys listed */
    uint64_t recipes;                       /* recipes/ keys listed */
    uint64_t stored_bytes;                  /* their sizes (both kinds) */
    uint64_t garbage_chunks, garbage_bytes; /* listed, named by no retained snapshot */
    uint64_t garbage_recipes;               /* (garbage_bytes counts both kinds) */
};

struct stats_snap {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
    int64_t step;
    uint64_t logical; /* its files' sizes */
    uint64_t stored;  /* its distinct objects' stored sizes */
    uint64_t unique;  /* of those, the objects no other retained snapshot names */
};

struct stats_run {
    const char *run;  /* snaps[first].run */
    size_t first, n;  /* its snapshots: snaps[first .. first + n) */
    uint64_t logical; /* its snapshots' logical bytes */
    uint64_t stored;  /* its distinct objects' stored sizes (one region's worth) */
};

struct stats_result {
    size_t nregions; /* repo_nregions(r) */
    struct stats_region region[CONFIG_MAX_REGIONS];
    struct stats_snap *snaps; /* every retained snapshot, sorted by run then id */
    size_t nsnaps;
    struct stats_run *runs; /* the runs reported, in snaps' order */
    size_t nruns;
};

/* Fills *res (free it with stats_free whatever this returns), reporting
 * every run, or only run when it is not NULL.  0, or an error; err says
 * what when it is not empty (a retained manifest that cannot be read). */
int stats_compute(struct repo *r, const char *run, struct stats_result *res, struct buf *err);
void stats_free(struct stats_result *res);

#endif
