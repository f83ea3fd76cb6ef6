/*
 * repo.h — an open repository: the configuration, the local index, the
 * regions, and the repository parameters they agree on.  Every service
 * (snapshot, restore, verify, retention, gc) and the daemon work on one.
 *
 *   repo_open(&conf, REPO_CREATE, &r, &err);  // opens the index, checks
 *                                             // each region, agrees (or
 *                                             // creates) the parameters
 *   ... snapshot_take(r, ...) / restore_run(r, ...) ...
 *   repo_free(r);                             // frees its regions and index
 *
 * A region that fails its check (missing directory, read-only, unreachable)
 * does not stop repo_open: it is marked unhealthy with its error and the
 * services skip it and report it.  repo_open fails only when the index
 * cannot be opened, when no region is healthy, or when regions disagree on
 * the repository parameters (REPO_NO_AGREE opens it anyway, for repair).
 * The repo owns its regions and its index; repo_free releases both.
 *
 * Threads.  A repo may be shared by several threads (the daemon shares
 * one between its loop, ingest, pool and region worker threads), on these
 * terms:
 * - Read-only once repo_open returns, for any thread: conf, params, cdc,
 *   keys, encrypted, nregions, and each region handle's ops, conf, slot
 *   and preconditions setting.  repo_chunk_id, repo_chunk_opts,
 *   repo_chunkobj_ctx, repo_workers and repo_region_clone read only these.
 * - The index (r->ix) is thread-safe by itself (store/index.h): each
 *   thread begins its own transactions on it.
 * - A region handle does I/O for one thread at a time (store/region.h).
 *   The repo's own handles, r->regions[i], belong to one thread: the
 *   CLI's, or in the daemon region worker i (daemon/replicator.c), the
 *   only thread that talks to region i through them.  Any other thread
 *   that talks to a region makes its own handle with repo_region_clone()
 *   (same configuration, slot and seal) and frees it: the daemon's ingest
 *   thread (for its run's lineage) and retention thread (daemon/gcd.c, on
 *   a shallow copy of the struct whose regions are clones); inside a
 *   service, a snapshot's extra upload workers and a restore's extra
 *   fetch threads (the calling thread keeps the repo's own).  A function
 *   that takes the repo and does I/O through r->regions (repo_adopt,
 *   repo_region_params, runlineage_scan given r->regions, ...) is called
 *   only by the thread that owns those handles.
 * - health[] is written by repo_open and by repo_region_fail, which only
 *   the owner of the handles calls; any thread may read it.  In the
 *   daemon nothing marks the shared repo after repo_open (ingest reads
 *   through its clones, which mark nothing; the retention thread marks
 *   its own copy), so the workers' reads of health[] never race a write.
 * - master and have_master are used only while repo_open creates the
 *   repository.
 */
#ifndef CKS_REPO_H
#define CKS_REPO_H

#include <stdbool.h>

#include "base/buf.h"
#include "base/config.h"
#include "engine/chunkobj.h"
#include "engine/crypt.h"
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
    /* An encrypted repository (params.encrypted), unlocked by repo_open:
     * the subkeys every region seals with, the keyed gear table cdc uses.
     * master is held only while this instance creates the repository. */
    bool encrypted;
    struct crypt_keys keys;
    uint64_t gear[256];
    bool have_master;
    uint8_t master[CRYPT_KEY_LEN];
    char unlocked_by[24]; /* the key slot that opened it ("" if created here) */
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
/* A chunk's id: SHA-256 of its bytes, or HMAC-SHA256 under the
 * repository's id key when it is encrypted.  Thread-safe. */
void repo_chunk_id(const struct repo *r, const uint8_t *data, size_t len, uint8_t id[HASH_LEN]);
/* A decoding context for this repository's chunk objects (its ids). */
struct chunkobj_ctx repo_chunkobj_ctx(const struct repo *r);
/* How this repository's chunks are encoded ([compress] level and tensor). */
struct chunkobj_opts repo_chunk_opts(const struct repo *r);
/* Another handle on region i, for another thread (a struct region is
 * single-threaded): same configuration, same index slot, same seal.  The
 * caller owns *ret (region_free).  Reads only what is read-only after
 * repo_open, so any thread may call it. */
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
/* Marks region i unhealthy for the rest of this run (first error kept).
 * Only the thread that owns the repo's region handles calls it. */
void repo_region_fail(struct repo *r, size_t i, int err);

#endif
