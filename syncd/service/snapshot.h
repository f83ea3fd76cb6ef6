/*
 * snapshot.h — take one snapshot: cut PATH into chunks, store each chunk
 * that a region lacks, then publish the manifest and move the run's latest
 * ref in every region that holds all of it.
 *
 * Order (the promise of include/ckptsync/format.h):
 *   chunk objects durable in a region -> chunk presence committed in the
 *   index (one transaction per chunk) -> the file's identity committed ->
 *   snapshot record and refcounts committed -> manifest published in each
 *   region -> latest ref moved -> committed bits recorded -> caller told.
 *
 * Upload once (service/fanout.h): a new chunk goes up from this instance
 * to one region (the first, in the configured order, that the others
 * can copy from) and the others copy it server-side, each copy confirmed
 * by the destination's HEAD; a region that cannot copy, or whose copy
 * fails, gets it from the instance.  Manifests and commit records go to
 * each region directly.
 *
 * A region that fails is dropped from this snapshot (its error kept in the
 * result) and the others go on; the snapshot is durable when at least
 * conf.quorum regions committed it.  A file that changes while it is read
 * is read again (up to SNAPSHOT_RETRIES times), never stored torn.
 *
 * Not thread-safe: one snapshot at a time per repo.
 */
#ifndef CKS_SNAPSHOT_H
#define CKS_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "service/repo.h"

#define SNAPSHOT_RETRIES 3

struct snapshot_opts {
    const char *path; /* file or directory */
    const char *run;
    int64_t step;         /* -1: unknown */
    const char *instance; /* instance type, NULL: unknown */
    /* Called now and then with bytes processed so far. */
    void (*progress)(void *ud, uint64_t done, uint64_t total);
    void *progress_ud;
};

struct snapshot_region_result {
    int err; /* 0 if the snapshot is committed there */
    char msg[512];
    uint64_t objects_put;
    uint64_t bytes_put; /* object bytes written (compressed) from this instance */
    /* upload once (service/fanout.h): chunk objects the region got by
     * server-side copy from another region, and copies that failed (the
     * chunk then went up from this instance) */
    uint64_t objects_copied, bytes_copied, copies_failed;
};

struct snapshot_result {
    char id[MANIFEST_ID_MAX + 1];
    char root[256];
    uint64_t files, dirs, links;
    uint64_t bytes;           /* logical bytes of regular files */
    uint64_t files_unchanged; /* taken from the index without reading */
    uint64_t readers;         /* files read at once ([daemon] readers; 1: serially) */
    uint64_t chunks;          /* chunk references in the manifest */
    uint64_t new_chunks;      /* chunks no region had: uploaded */
    uint64_t new_bytes;       /* raw bytes of new chunks */
    uint64_t stored_bytes;    /* compressed bytes of new chunks (once) */
    uint64_t bytes_sent;      /* chunk object bytes this instance sent, all regions */
    /* Chunks the index said a region holds, confirmed with the region
     * before the commit (service/presence.h), summed over regions. */
    uint64_t confirm_asked, confirm_heads, confirm_listed, confirm_missing;
    size_t nregions;
    unsigned committed; /* regions that committed the snapshot */
    bool durable;       /* committed >= quorum */
    struct snapshot_region_result region[CONFIG_MAX_REGIONS];
};

/* Returns 0 when the snapshot is committed in every region, CKS_E_QUORUM
 * when it is committed in fewer than quorum regions, 1 when durable but not
 * in every region, or another negative code when nothing was committed
 * (message in err). */
int snapshot_take(struct repo *r, const struct snapshot_opts *o, struct snapshot_result *ret,
                  struct buf *err);

#endif
