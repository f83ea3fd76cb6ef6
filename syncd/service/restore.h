/*
 * restore.h — bring a snapshot back, verified, into a target directory.
 *
 *   struct manifest m;
 *   catalog_find(r, run, id_or_NULL, &m, &region_or_NULL, &err);  // service/catalog.h
 *   ... m parsed and checked; manifest_free(&m) ...
 *   restore_run(r, &opts, &res, &err);   // finds the snapshot itself
 *
 * Without an id, the snapshot is the run's resume point
 * (service/runlineage.h, the one retention never removes): the first of
 * the lineage's candidates whose manifest some healthy region holds intact.
 *
 * Every chunk is checked against its id (SHA-256) and every file against
 * its whole-file digest.  Chunks are fetched striped over the healthy
 * regions; a chunk that is missing or corrupt in one region is fetched from
 * the next, and counted.  Everything is written under a staging directory
 * inside the target (".ckptsync-restore.<id>"), fsynced, and the snapshot's
 * root renamed into place at the end (exchanged with an existing one under
 * force, atomically): a failed restore leaves nothing in the target but
 * what was there before, and a killed one at most its staging directory,
 * which the next restore into the target removes.  No path of the manifest
 * can reach outside the target: paths are checked by the parser and every
 * directory is opened with O_NOFOLLOW relative to its parent.  After the
 * rename the restored files' identities and the chunks' presence go into
 * the index (one write transaction), so the next snapshot reads nothing.
 *
 * With opts.progressive, DIR/<root> is made at the start and each regular
 * file renamed into it from the staging directory once whole, verified
 * and fsynced, group by group (restore_group()); a restore that does not
 * finish leaves whole verified files and its marked staging directory,
 * and the next restore into the target removes both (README).
 *
 * Threads: each function does region I/O through repo_region(r, i) on the
 * calling thread, which must own them (service/repo.h); catalog_find can
 * mark a region that fails its listing unhealthy.  restore_run starts
 * threads of its own (fetch parts with cloned region handles, finishing
 * threads that fsync and place files; opts.placed is called from those)
 * and joins them before it returns.  Two restores may not share a repo at once
 * (the region handles), but each may run while other threads use the
 * index.
 */
#ifndef CKS_RESTORE_H
#define CKS_RESTORE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/manifest.h"
#include "service/repo.h"

struct restore_opts {
    const char *run;
    const char *id;     /* NULL: the run's resume point (catalog_find) */
    const char *target; /* directory; created if missing */
    bool force;         /* replace target/<root> if it exists */
    bool keep_setid;    /* keep setuid/setgid bits (else cleared, and counted) */
    const char *seed;   /* a local directory whose chunks are copied, not downloaded;
                         * NULL: files already in the target that the index knows */
    void (*progress)(void *ud, uint64_t done, uint64_t total);
    void *progress_ud;
    /* DIR/<root> made at the start, each regular file renamed to its final
     * path once whole, verified and fsynced, group by group; see above */
    bool progressive;
    /* called as each file is placed (--progressive), one call at a time,
     * from the restore's threads; group: restore_group_name() */
    void (*placed)(void *ud, const char *path, uint64_t bytes, const char *group);
    void *placed_ud;
    /* regular files left out: those a pattern matches (fnmatch, against the
     * path below the root or the base name; a pattern that matches nothing
     * fails the restore), and with exclude_optimizer the optimizer group;
     * a hard link to a file left out is left out too */
    const char *const *exclude;
    size_t nexclude;
    bool exclude_optimizer;
    /* node_count > 0: only what node node_rank (0-based, below node_count)
     * needs of a merged multi-node step (engine/rankbind.h): refused with
     * CKS_E_RESHARD (err names every rank-bound file and the dropped ranks)
     * when node_count is not the step's node count and files bound to a
     * rank would be lost, unless allow_reshard.  A snapshot that is not a
     * merged step is restored whole (restore_result.node_whole).
     * node_count 0: the whole tree. */
    int node_rank;
    int node_count;
    bool allow_reshard;
};

struct restore_result {
    char id[MANIFEST_ID_MAX + 1];
    char root[MANIFEST_MAX_PATH + 1];
    int64_t step;
    uint64_t files, dirs, links, bytes, chunks;
    uint64_t fetched_bytes; /* object bytes downloaded */
    uint64_t failovers;     /* chunk fetches that failed in one region */
    uint64_t local_chunks;  /* copied from the seed instead of downloaded */
    uint64_t local_bytes;
    uint64_t local_bases;           /* recipe bases read from the seed instead of downloaded */
    uint64_t local_base_bytes;      /* their plaintext bytes */
    uint64_t local_bases_stale;     /* bases the seed named but no longer held intact:
                                     * fetched from the regions */
    uint64_t local_bases_refetched; /* of local_bases, read unchecked from files the
                                     * index knows, found wrong when a recipe built
                                     * on them failed its id: fetched, decoded again */
    uint64_t setid_cleared;         /* entries whose setuid/setgid bits were cleared */
    uint64_t excluded;              /* regular files left out (restore_opts.exclude) */
    unsigned nodes;                 /* a merged step's node count; 0: one node's snapshot */
    bool node_whole;                /* node_count was given, but the snapshot is not a merged
                                     * step: restored whole */
    uint64_t region_chunks[CONFIG_MAX_REGIONS];
};

/* Priority groups, fetched, verified and placed in this order. */
enum restore_group_id {
    RESTORE_META,    /* configs, run state, RNG, scheduler, "latest", small files */
    RESTORE_WEIGHTS, /* model weights: every large file not named below */
    RESTORE_MASTER,  /* fp32 master weights: "fp32" or "master" in the path */
    RESTORE_OPTIM,   /* optimizer state: "optim" in the path */
    RESTORE_NGROUPS
};
#define RESTORE_SMALL (1u << 20) /* a file this small counts as metadata */
/* The group of a regular file by its manifest path (the root's name, the
 * first component, is not looked at) and size; the rules, in order:
 * metadata by name (.json .yaml .yml .txt .md .toml .ini .cfg .csv .py .log
 * .metadata; names starting latest, rng, random_states, scheduler,
 * lr_scheduler, trainer_state, training_args, config, generation_config,
 * tokenizer, special_tokens, vocab, merges), Megatron's model_optim_rng
 * as weights, "optim" anywhere as optimizer state, "fp32" or "master" as
 * master weights, then by size: at most RESTORE_SMALL metadata, else
 * weights.  Case does not matter. */
int restore_group(const char *path, uint64_t size);
/* The group that [restore] order (config.h's restore_order: space-
 * separated GROUP:PATTERN items) gives a manifest path: the first item
 * whose fnmatch PATTERN matches the path below the root or the base name
 * (as --exclude's do); -1 when none does.  restore_run() takes it before
 * restore_group()'s rules. */
int restore_order_group(const char *order, const char *path);
const char *restore_group_name(int g);

/* 1 when directory dir holds the staging directory of a progressive
 * restore of root (DIR/<root>) that runs or did not finish: DIR/<root>
 * may then hold only part of the snapshot, so the daemon does not take it
 * as a unit (it is the restored snapshot once the restore ends; a partial
 * one the next restore removes).  0 otherwise, or when dir cannot be read.
 * Thread-safe (no state). */
int restore_placing(const char *dir, const char *root);

int restore_run(struct repo *r, const struct restore_opts *o, struct restore_result *ret,
                struct buf *err);
/* true when the n bytes at p are all zero: such a chunk is not written,
 * the file (created at its full size) keeps a hole there, as a sparse
 * source file had one. */
bool restore_zero_chunk(const uint8_t *p, size_t n);
#endif
