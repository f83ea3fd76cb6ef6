/*
 * catalog.h — which snapshots exist, and the one place a snapshot is
 * found, named, given its parent and published.  Below the reading core
 * (ingcore), the one-shot snapshot, restore and the daemon's region
 * workers, which all come here; above the run lineage (runlineage.h:
 * generations and resume points) and single-manifest reads (manifests.h).
 *
 * What a run holds in the regions: its snapshots (the union of what every
 * healthy region lists) and, per unit (the snapshot's root:
 * "checkpoint-100", "train.log"), the newest one.  For restores on a fresh
 * instance, where the local index knows nothing:
 *
 *   catalog_units(repo, run, &units, &n, &err);  ... free(units);
 *
 * Listings: what snapshots exist, from the local index (fast, works
 * offline) or from the regions themselves (what a fresh instance with an
 * empty index needs), with how many regions committed each:
 *
 *   struct catalog_rows l = {0};
 *   e = catalog_list(repo, run_or_NULL, CATALOG_REMOTE, &l);
 *   ... l.v[0 .. l.n) ...
 *   catalog_rows_free(&l);
 *
 * Rows are sorted by run, then id.  A remote listing also gives each
 * snapshot's lineage generation and marks each run's resume point
 * (service/runlineage.h: what restore --latest and migrate-in take); a
 * snapshot whose manifest cannot be read is still listed (its details
 * zero) and the reason logged.
 *
 * One snapshot: catalog_find (newest or named, parsed); for a new one,
 * catalog_make_id, catalog_parent, and catalog_publish in each region
 * (manifest, then its commit record: format.h section 7).
 *
 * Reads every manifest of the run where it needs details (they are
 * small).  Not thread-safe (a repo is used by one thread).
 */
#ifndef CKS_CATALOG_H
#define CKS_CATALOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
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

/* ---- listings ------------------------------------------------------------ */

struct catalog_row {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
    int64_t step, time;
    uint64_t files, bytes;
    unsigned regions; /* configured regions that committed it */
    bool durable;     /* regions >= the configured quorum */
    int64_t gen;      /* remote: lineage generation */
    bool resume;      /* remote: the run's resume point */
};

struct catalog_rows {
    struct catalog_row *v; /* malloc'ed; catalog_rows_free() */
    size_t n, cap;
};

enum catalog_list_flags { CATALOG_REMOTE = 1 << 0 };

/* The snapshots of run (of every run when NULL), sorted; rows are appended
 * to *l.  0 or a negative code (index, memory). */
int catalog_list(struct repo *r, const char *run, unsigned flags, struct catalog_rows *l);
/* The repository's one run, from the regions (restore --latest without
 * --run).  -ENOENT when it holds no snapshot; -EEXIST when it holds
 * several runs, err then naming them ("\"r1\", \"r2\""); other codes
 * from the listing. */
int catalog_only_run(struct repo *r, char *ret_run, size_t cap, struct buf *err);
void catalog_rows_free(struct catalog_rows *l);
/* A snapshot as a user names it: its whole id, a prefix that only one
 * snapshot's id starts with, or "latest" (the run's resume point, what
 * restore --latest takes).  run may be NULL: any run (for "latest": the
 * repository's one run).  The index and the regions' listings are both
 * asked; a whole id the index knows needs no region.  ret gets the run and
 * the whole id.  -ENOENT: err "no such snapshot: X"; -EEXIST: err
 * "ambiguous: X matches A, B" (or, for "latest", names the runs); other
 * codes from the listings, err saying what failed. */
int catalog_resolve_id(struct repo *r, const char *run, const char *name, struct catalog_snap *ret,
                       struct buf *err);

/* ---- one snapshot ---------------------------------------------------------- */

/* Finds and parses a snapshot's manifest (newest when id is NULL).
 * ret_region (may be NULL) gets the index of the region it came from. */
int catalog_find(struct repo *r, const char *run, const char *id, struct manifest *ret,
                 size_t *ret_region, struct buf *err);

/* A new snapshot id: UTC time to the microsecond plus 32 random bits, so
 * ids sort by time ("20261201T000701.123456Z-3f2a9c1b"). */
int catalog_make_id(char *id, size_t cap);
/* Publishes a manifest in one region (snapshots/<run>/<id>), then its
 * write-once commit record (commits/<run>/...; engine/lineage.h).  The
 * caller has confirmed that the region holds every chunk it names.
 * Nothing shared is read or rewritten. */
int catalog_publish(struct region *rg, const struct manifest *m, const uint8_t *man, size_t len);
/* Sets *ret_parent to this instance's newest snapshot of run (from the
 * index; informational: no region is asked).  Unchanged when none. */
void catalog_parent(struct repo *r, const char *run, char **ret_parent);

#endif
