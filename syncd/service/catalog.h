/*
 * catalog.h — what a run holds in the regions: its snapshots (the union of
 * what every healthy region lists) and, per unit (the snapshot's root:
 * "checkpoint-100", "train.log"), the newest one.  For restores on a fresh
 * instance, where the local index knows nothing.
 *
 *   catalog_units(repo, run, &units, &n, &err);  ... free(units);
 *
 * Reads every manifest of the run (they are small); not thread-safe.
 */
#ifndef CKS_CATALOG_H
#define CKS_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "engine/manifest.h"
#include "service/repo.h"

struct catalog_snap {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
    unsigned regions; /* healthy regions whose listing has it */
};

/* Every snapshot of run (of every run when run is NULL) that any healthy
 * region lists and none has a forget record for, sorted by run then id, each once, with how many
 * regions list it.  *ret is malloc'ed (free it); -ENOENT when there is none.  A region whose
 * listing fails is marked unhealthy (repo_region_fail). */
int catalog_snapshots(struct repo *r, const char *run, struct catalog_snap **ret, size_t *ret_n);

struct catalog_unit {
    char root[MANIFEST_MAX_PATH + 1];
    char id[MANIFEST_ID_MAX + 1]; /* its newest snapshot: highest generation,
                                   * then ref_newer order */
    int64_t step;                 /* -1: not a checkpoint (logs, configs) */
    int64_t gen;
    size_t snapshots; /* how many the run holds of this unit */
};

/* The run's units, newest snapshot of each; a root that is a transient
 * name (ckptname_transient: "tmp-checkpoint-500", ".cache", "x.tmp")
 * is never a unit, even when an older version stored it. */
int catalog_units(struct repo *r, const char *run, struct catalog_unit **ret, size_t *ret_n,
                  struct buf *err);

#endif
