/*
 * partgc.h — prune's part of a multi-node job's objects (service/gc.c):
 * a step's parts and node errors go once they are no longer needed.
 *
 * In region i, prune deletes:
 *   - the parts and node errors of a step any healthy region holds a
 *     forget record of (the step is gone);
 *   - the node errors of a step region i holds a commit record of (it
 *     committed after all: the errors no longer describe it);
 *   - the parts and node errors of a step region i has not committed once
 *     they are [daemon] part_expire old (by the time in their key): they
 *     stopped being prune roots then (multinode_roots_read), and a merger
 *     refuses a part that old (service/partcheck.h).
 * A committed step's parts stay until it is forgotten (see partgc.c).
 *
 *   uint64_t n = 0;
 *   e = partgc_region(repo, i, now, dry_run, &n, err);   n: objects deleted (or due)
 *
 * 0, or a region's error (err says which).  Not thread-safe per repo.
 */
#ifndef CKS_PARTGC_H
#define CKS_PARTGC_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "service/repo.h"

int partgc_region(struct repo *r, size_t i, int64_t now, bool dry, uint64_t *ret_deleted,
                  struct buf *err);

#endif
