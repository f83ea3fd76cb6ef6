/*
 * repo.h — an open repository: the configuration, the local index, the
 * regions, and the repository parameters they agree on.  Every service
 * (snapshot, restore, verify, retention, gc, the daemon) works on one.
 *
 *   repo_open(&conf, REPO_CREATE, &r, &err);   // opens the index, checks each region
 *   ... snapshot_take(r, ...) / restore_run(r, ...) ...
 *   repo_free(r);
 *
 * A region that fails its check (missing directory, read-only, unreachable)
 * does not stop repo_open: it is marked unhealthy with its error and the
 * services skip it and report it.  repo_open fails only when the index
 * cannot be opened, when no region is healthy, or when regions disagree on
 * the repository parameters.
 *
 * Callers use the functions below, never the fields (struct repo is
 * opaque): the configuration, the index, the agreed parameters, the
 * regions and their health, the keys of an encrypted repository.
 *
 * Threads.  A repo may be shared by several threads (the daemon shares
 * one between its loop, ingest, pool and region worker threads), on these
 * terms:
 * - Everything repo_open sets up is read-only afterwards, for any thread,
 *   except each region's health: the configuration, the parameters, the
 *   chunker, the keys, repo_nregions, and each region handle's ops,
 *   configuration, slot and preconditions setting.  repo_chunk_id,
 *   repo_chunk_opts, repo_chunkobj_ctx, repo_workers, repo_region_clone and
 *   repo_dup read only these.
 * - The index (repo_index) is thread-safe by itself (store/index.h): each
 *   thread begins its own transactions on it.
 * - Health is an atomic int: any thread may read it (repo_region_ok,
 *   REPO_FOR_HEALTHY, ...) while another marks a region failed
 *   (repo_region_fail: the first error wins), without a data race.
 * - A region handle does I/O for one thread at a time (store/region.h).
 *   The repo's own handles, repo_region(r, i), belong to one thread: the
 *   CLI's, or in the daemon region worker i (daemon/replicator.c).  Any
 *   other thread that talks to a region makes its own handle with
 *   repo_region_clone (same configuration, slot and seal) and frees it:
 *   the daemon's ingest thread (for its run's lineage); inside a service,
 *   a snapshot's extra upload workers and a restore's extra fetch threads
 *   (the calling thread keeps the repo's own).  The retention thread
 *   (daemon/gcd.c) works on a repo_dup: region handles and health of its
 *   own, which it resets before each pass (repo_regions_retry).  A
 *   function that takes the repo and does I/O through its own handles
 *   (repo_adopt, repo_region_params, runlineage_scan given repo_regions(r),
 *   ...) is called only by the thread that owns them.
 * - In the daemon nothing marks the shared repo's regions failed after
 *   repo_open (the workers keep their own state, replicator.h; the ingest
 *   thread reads through its clones, and runlineage_scan marks only regions
 *   whose handles are r's own), so the workers' reads of health, for
 *   durable-first, see what repo_open found.
 * - The master key (repo_master) is set by repo_open (creation, or
 *   unlocking through repo_set_master) and read by `key add`; both run on
 *   the thread that opened the repo.
 */
#ifndef CKS_REPO_H
#define CKS_REPO_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/config.h"
#include "engine/chunkobj.h"
#include "engine/crypt.h"
#include "engine/fastcdc.h"
#include "engine/repoobj.h"
#include "service/repokeys.h"
#include "store/index.h"
#include "store/region.h"

struct repo;

enum repo_flags {
    REPO_CREATE = 1 << 0,   /* write the repo object where it is missing */
    REPO_NO_AGREE = 1 << 1, /* open even when regions disagree (repair) */
};

int repo_open(const struct config *conf, unsigned flags, struct repo **ret, struct buf *err);
void repo_free(struct repo *r);
/* Another repo on the same repository, for another thread: the same
 * configuration, parameters, keys and index (shared: the copy never closes
 * it, so r must outlive it), its own region handles (repo_region_clone)
 * and its own health, copied from r.  Free it with repo_free.  err names
 * the region whose handle could not be made. */
int repo_dup(const struct repo *r, struct repo **ret, struct buf *err);

/* ---- reading a repo ------------------------------------------------------
 * Each returns what repo_open set up; pointers stay valid until repo_free. */

/* The configuration it was opened with, and its most used fields. */
const struct config *repo_conf(const struct repo *r);
unsigned repo_quorum(const struct repo *r);
/* The local index. */
struct index *repo_index(const struct repo *r);
/* The repository parameters every healthy region agreed on. */
const struct repoobj *repo_params(const struct repo *r);
/* The chunker those parameters (and an encrypted repository's gear) make. */
const struct fastcdc *repo_chunker(const struct repo *r);

/* The regions, in configured order: i < repo_nregions(r) <= 32.  A handle
 * is single-threaded (see Threads above). */
size_t repo_nregions(const struct repo *r);
struct region *repo_region(const struct repo *r, size_t i);
/* All of them, as an array of repo_nregions(r) handles. */
struct region *const *repo_regions(const struct repo *r);

/* Region health: 0 while region i is usable, else the error that took it
 * out (its check at repo_open, or repo_region_fail since). */
int repo_region_error(const struct repo *r, size_t i);
bool repo_region_ok(const struct repo *r, size_t i);
/* Bit i set for each healthy region i. */
uint32_t repo_healthy_mask(const struct repo *r);
/* Number of healthy regions. */
size_t repo_healthy(const struct repo *r);
/* Runs the statement after it for each healthy region i, in order
 * (break and continue work as in a for loop):
 *
 *   REPO_FOR_HEALTHY(r, i) {
 *       if (region_put(repo_region(r, i), key, data, len) < 0)
 *           repo_region_fail(r, i, -EIO);
 *   }
 *
 * A macro rather than an iterator function: it reads as the loop it is,
 * declares i in the loop's scope, and needs no cursor state. */
#define REPO_FOR_HEALTHY(r, i)                                                                     \
    for (size_t i = 0; i < repo_nregions(r); i++)                                                  \
        if (!repo_region_ok(r, i)) {                                                               \
        } else

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
/* Marks region i unhealthy for the rest of this run (first error kept;
 * err 0 counts as -EIO).  Any thread (health is atomic). */
void repo_region_fail(struct repo *r, size_t i, int err);
/* Makes every region healthy again, so that the next pass tries each one
 * (the retention thread, on its own repo_dup, before each pass). */
void repo_regions_retry(struct repo *r);

/* ---- an encrypted repository ---------------------------------------------- */

/* Whether repo_open unlocked it (repo_params(r)->encrypted, and a key). */
bool repo_encrypted(const struct repo *r);
/* Its subkeys (what regions seal with), NULL when it is not encrypted. */
const struct crypt_keys *repo_keys(const struct repo *r);
/* The key slot that opened it, "" when this instance created it or it is
 * not encrypted. */
const char *repo_unlocked_by(const struct repo *r);
/* The master key, held since this instance created the repository or
 * unlocked it (`key add` wraps it under another secret); NULL otherwise. */
const uint8_t *repo_master(const struct repo *r);
/* What the key slot functions (service/repokeys.h) need of r, into *v
 * (returned): r's own region handles and health, parameters,
 * configuration and master key.  Valid while r is, on r's thread. */
const struct repokeys_view *repo_keys_view(const struct repo *r, struct repokeys_view *v);
/* Installs the master key that repokeys_unlock found: keeps it, derives
 * the subkeys and the keyed gear table from it and the repository id,
 * and seals every region with them.  slot: the key slot that opened it
 * ("" when created here).  For repokeys.c, before r is shared. */
int repo_set_master(struct repo *r, const uint8_t master[CRYPT_KEY_LEN], const char *slot);

#endif
