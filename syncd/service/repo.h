/*
 * repo.h — an open repository: the configuration, the local index, the
 * regions, and the repository parameters they agree on.  Every service
 * (snapshot, restore, verify, and later the daemon) works on one.
 *
 *   repo_open(&conf, &r, &err);   // opens the index, checks each region
 *   ... snapshot_take(r, ...) / restore_run(r, ...) ...
 *   repo_free(r);
 *
 * A region that fails its check (missing directory, read-only, unreachable)
 * does not stop repo_open: it is marked unhealthy with its error and the
 * services skip it and report it.  repo_open fails only when the index
 * cannot be opened, when no region is healthy, or when regions disagree on
 * the repository parameters.
 *
 * Not thread-safe: one thread uses a repo at a time.
 */
#ifndef CKS_REPO_H
#define CKS_REPO_H

#include <stdbool.h>

#include "base/buf.h"
#include "base/config.h"
#include "engine/chunkobj.h"
#include "engine/fastcdc.h"
#include "engine/repoobj.h"
#include "store/index.h"
#include "store/region.h"

struct repo {
    struct config conf;
    struct index *ix;
    size_t nregions;
    struct region *regions[CONFIG_MAX_REGIONS];
    int health[CONFIG_MAX_REGIONS]; /* 0 healthy, else the check's error */
    struct repoobj params;          /* agreed by every healthy region */
    struct fastcdc cdc;
};

enum repo_flags {
    REPO_CREATE = 1 << 0,   /* write the repo object where it is missing */
    REPO_NO_AGREE = 1 << 1, /* open even when regions disagree (repair) */
};

int repo_open(const struct config *conf, unsigned flags, struct repo **ret, struct buf *err);
void repo_free(struct repo *r);
size_t repo_healthy(const struct repo *r);
/* Threads a pipeline may use: config `workers`, or one per online CPU
 * (at most REPO_MAX_WORKERS). */
#define REPO_MAX_WORKERS 256
size_t repo_workers(const struct repo *r);
/* How this repository's chunks are encoded ([compress] level and tensor). */
struct chunkobj_opts repo_chunk_opts(const struct repo *r);
/* Another handle on region i, for another thread (a struct region is
 * single-threaded): same configuration, same index slot. */
int repo_region_clone(const struct repo *r, size_t i, struct region **ret, struct buf *err);

/* Writes params as rg's repo object: a create-only put where rg enforces
 * it (-EEXIST when one is there), a plain put otherwise.  For one region
 * on the caller's own handle (the daemon's workers). */
int repo_put_params(struct region *rg, const struct repoobj *params);
/* Region i's repo object: 0, -ENOENT (none), or an error (damaged: err says). */
int repo_region_params(struct repo *r, size_t i, struct repoobj *ret, struct buf *err);
/* Repair of a split repository: writes region i's repo object over every
 * other healthy region's.  Chunks are named by content and manifests carry
 * their own chunker, so nothing stored becomes unreadable; what changes is
 * which parameters new snapshots cut with.  Returns regions rewritten. */
int repo_adopt(struct repo *r, size_t i, struct buf *err);
/* Marks region i unhealthy for the rest of this run (first error kept). */
void repo_region_fail(struct repo *r, size_t i, int err);

#endif
