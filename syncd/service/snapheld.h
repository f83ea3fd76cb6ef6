/*
 * snapheld.h — whether the regions still hold a snapshot the local index
 * says is committed, asked of the regions before anything is answered
 * from the index's record.
 *
 * The index's snapshot records (store/index.h, service/snaprec.h) are a
 * cache of what this instance once saw committed.  Another instance
 * sharing the regions (a person's `ckptsync forget` and `prune`, another
 * daemon's retention, a bucket's lifecycle rule) can remove the snapshot
 * without this index hearing of it; the regions decide what is stored.
 * So a caller that would answer "committed" from a record (the daemon's
 * commit of a unit whose content is unchanged: daemon/ingest.c, through
 * service/unitmark.h) confirms it here first, and takes the unit again
 * when the snapshot is gone:
 *
 *   index_snap_get(t, run, id, &rec);                  // in a transaction
 *   ... end the transaction (no I/O inside it) ...
 *   if (snapheld_confirm(regions, n, run, id, rec.committed, unit) != 1)
 *       take the unit again;
 *
 * Held means what the catalog counts (service/catalog.h, restore): each
 * region the record claims (its committed slot bits) that answers still
 * has the snapshot's manifest (one HEAD each), and no region that answers
 * lists a forget record for it (one listing of forget/<run>/ each: prune
 * deletes those once it removed the snapshot, so the listing is short).
 * A region that does not answer is neither proof nor disproof; at least
 * one claimed region must confirm.  A record that claims no region (the
 * daemon's own snapshot still being replicated) is not contradicted by
 * anything and is held: its waiters wait for the region workers.
 *
 * Takes region handles, not the repo: the daemon's ingest thread uses its
 * own clones (store/region.h: one thread per handle).  Logs why a
 * snapshot is not held, naming the unit (may be NULL), the snapshot and
 * the region.  No state; thread-safe as the handles are.
 */
#ifndef CKS_SNAPHELD_H
#define CKS_SNAPHELD_H

#include <stddef.h>
#include <stdint.h>

#include "store/region.h"

/* 1 when regions[0..n) still hold snapshot id of run as claimed (slot
 * bits of the regions its record says committed it), 0 when they do not
 * (a claimed region lacks its manifest, a forget record names it, or no
 * claimed region could confirm it). */
int snapheld_confirm(struct region *const *regions, size_t n, const char *run, const char *id,
                     uint32_t claimed, const char *unit);

#endif
