/*
 * reindex.h — rebuild the local index from what the regions hold, so that an
 * instance with a fresh (or lost, or suspect) state directory dedups against
 * the repository instead of asking a region about every chunk it cuts.
 *
 * The regions decide, not the old cache.  What is rebuilt:
 *   chunks     every chunks/<2 hex>/<64 hex> that a healthy region lists:
 *              the presence bit of each region whose listing has it (a
 *              listing is a confirmation); stored_len from the source
 *              region's listing (another region's where the source lacks
 *              it); refcount = occurrences in the committed manifests;
 *              raw_len from those manifests' chunk lines; codec from the
 *              sizes (the writer stores raw exactly when zstd does not
 *              shrink, so raw iff stored_len == raw_len + 12).  No chunk
 *              object is read: nothing in the index decides on raw_len or
 *              codec, and one GET per chunk would cost more than the
 *              listings.  A chunk named by no committed manifest keeps the
 *              old record's raw_len (0 when the index never knew it).  A
 *              chunk the old index knew that no region lists keeps its
 *              record with presence 0 (refcount from the manifests: the
 *              next snapshot that uses it uploads it again).
 *   snapshots  one record per snapshot that a healthy region lists and no
 *              region has a forget record for (catalog_snapshots):
 *              committed = the regions with its commit record (lineage
 *              view), or, for a snapshot with no commit record anywhere
 *              (version 1, or a commit cut short), the regions listing its
 *              manifest, as restore counts it; step, time, bytes and files
 *              from the manifest.  Old records the regions do not confirm
 *              are deleted.
 * What is kept: the files table (identities; a reuse still checks every
 * chunk's presence), meta (region slots, this instance's generations), the
 * daemon's queue and pending tables.  The daemon's pending snapshots (kept
 * only with force) keep their records and their references are counted,
 * so refcounts stay what fsck expects.
 *
 * Cost: one listing of chunks/ per healthy region, catalog and lineage
 * listings per run, one GET per committed manifest; then one LMDB write
 * transaction holding every change, so a crash leaves the old index or the
 * new one, and nothing is written before all the reading is done (the
 * daemon's writers are held back only for the transaction itself).
 *
 *   struct reindex_opts o = {.region = NULL};
 *   struct reindex_stats st;
 *   rc = reindex_run(repo, &o, &st, &err);
 *
 * Returns 0, or: -ENOENT (no region of that name: err lists the names),
 * -EBUSY (the daemon has pending work and force is off), -EIO or the
 * region's error (the source region cannot be listed, or a committed
 * manifest cannot be read and force is off), an index error (a failed
 * commit is a durability failure).  err says what, naming region and key.
 * Not thread-safe: one thread uses a repo at a time.
 */
#ifndef CKS_REINDEX_H
#define CKS_REINDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "service/repo.h"

struct reindex_opts {
    const char *region; /* source region by name; NULL: the first healthy */
    bool force;         /* proceed over the daemon's pending work, and
                         * past manifests no region can give (skipped) */
    /* what: "chunks in 'a'" or "manifests"; total 0 when unknown */
    void (*progress)(void *ud, const char *what, uint64_t done, uint64_t total);
    void *progress_ud;
};

struct reindex_region_stats {
    bool listed;            /* its chunks/ listing was read to the end */
    uint64_t chunks, bytes; /* chunk objects it lists, their sizes */
    uint64_t snapshots;     /* recorded snapshots committed there */
    char error[512];        /* why it was not listed; "" when it was */
};

struct reindex_stats {
    size_t source;              /* index of the source region in repo->regions */
    uint64_t chunks;            /* chunk records present in some region */
    uint64_t bytes;             /* their stored sizes */
    uint64_t referenced;        /* distinct chunks the recorded snapshots name */
    uint64_t unreferenced;      /* listed chunks no recorded snapshot names */
    uint64_t missing;           /* named by a recorded snapshot, listed nowhere */
    uint64_t references;        /* sum of refcounts */
    uint64_t snapshots, runs;   /* recorded */
    uint64_t skipped;           /* force: snapshots whose manifest no region gave */
    uint64_t pending_kept;      /* force: the daemon's pending snapshots kept */
    uint64_t dropped_chunks;    /* old chunk records no region lists now */
    uint64_t dropped_snapshots; /* old snapshot records no region confirms */
    double seconds;
    struct reindex_region_stats region[CONFIG_MAX_REGIONS];
};

int reindex_run(struct repo *r, const struct reindex_opts *o, struct reindex_stats *ret,
                struct buf *err);

#endif
