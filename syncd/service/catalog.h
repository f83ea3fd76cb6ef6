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

struct catalog_unit {
    char root[MANIFEST_MAX_PATH + 1];
    char id[MANIFEST_ID_MAX + 1];     /* its newest snapshot (ref_newer order) */
    int64_t step;                     /* -1: not a checkpoint (logs, configs) */
    size_t snapshots;                 /* how many the run holds of this unit */
};

int catalog_units(struct repo *r, const char *run, struct catalog_unit **ret, size_t *ret_n,
                  struct buf *err);

#endif
