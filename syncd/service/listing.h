/*
 * listing.h — what snapshots exist: from the local index (fast, works
 * offline) or from the regions themselves (what a fresh instance with an
 * empty index needs), with how many regions committed each.
 *
 *   struct listing l = {0};
 *   e = listing_snapshots(repo, run_or_NULL, LISTING_REMOTE, &l);
 *   ... l.v[0 .. l.n) ...
 *   listing_free(&l);
 *
 * Rows are sorted by run, then id.  A remote listing also gives each
 * snapshot's lineage generation and marks each run's resume point
 * (service/lineage.h: what restore --latest and migrate-in take); a
 * snapshot whose manifest cannot be read is still listed (its details
 * zero) and the reason logged.  Not thread-safe (a repo is used by one
 * thread).
 */
#ifndef CKS_LISTING_H
#define CKS_LISTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "service/repo.h"

struct listing_row {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
    int64_t step, time;
    uint64_t files, bytes;
    unsigned regions; /* configured regions that committed it */
    bool durable;     /* regions >= the configured quorum */
    int64_t gen;      /* remote: lineage generation */
    bool resume;      /* remote: the run's resume point */
};

struct listing {
    struct listing_row *v; /* malloc'ed; listing_free() */
    size_t n, cap;
};

enum listing_flags { LISTING_REMOTE = 1 << 0 };

/* The snapshots of run (of every run when NULL), sorted; rows are appended
 * to *l.  0 or a negative code (index, memory). */
int listing_snapshots(struct repo *r, const char *run, unsigned flags, struct listing *l);
/* Which run holds snapshot id?  The index first, then the regions.
 * -ENOENT when none does. */
int listing_find_run(struct repo *r, const char *id, char *ret_run, size_t cap);
/* The repository's one run, from the regions (restore --latest without
 * --run).  -ENOENT when it holds no snapshot; -EEXIST when it holds
 * several runs, err then naming them ("\"r1\", \"r2\""); other codes
 * from the listing. */
int listing_only_run(struct repo *r, char *ret_run, size_t cap, struct buf *err);
void listing_free(struct listing *l);

#endif
