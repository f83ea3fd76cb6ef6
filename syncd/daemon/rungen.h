/*
 * rungen.h — the generation of a snapshot the daemon took while no region
 * could be listed.  A generation is never guessed (service/lineage.h): a
 * wrong one, recorded, would put every later snapshot of the run where
 * the resume point never looks.
 *
 * Such a snapshot is queued like any other (its chunks buffered, its
 * files pinned), its manifest saying generation 0 for now.  The index's
 * "gen/<run>" tells the two kinds apart: while it is absent, every queued
 * snapshot of the run is undecided (a decided one is queued only after
 * the decision is recorded, and the record is never removed).  So:
 *
 *   region worker, before it loads a queued snapshot (its chunks, its
 *   publish):
 *       rungen_settle(r, rg, seq)
 *   when the run is undecided, lists the worker's own region
 *   (runlineage_region_gen) and records the generation.  Recording rewrites
 *   the manifest of every queued snapshot of the run in the same index
 *   transaction (runlineage_gen_record: whoever records "gen/<run>" does,
 *   be it this, ingest, the CLI's snapshot, migrate-in or migrate-out).
 *   When the listing fails, the worker fails as for any error of its
 *   region (backs off, retries): nothing of the snapshot reaches that
 *   region undecided, and it stays queued.
 *
 *   ingest, inside the transaction that queues a snapshot it took
 *   undecided (ingcore's gen_undecided):
 *       rungen_fill(t, m, man)
 *   takes a generation recorded meanwhile into m and re-encodes man.
 *
 * One region's listing suffices (lineage.h: at least one region answered,
 * the rule every writer follows); the first to record decides for every
 * thread.  Thread-safe: each call is one index transaction, or the
 * caller's.
 */
#ifndef CKS_DAEMON_RUNGEN_H
#define CKS_DAEMON_RUNGEN_H

#include "base/buf.h"
#include "engine/manifest.h"
#include "service/repo.h"

/* 0 when the run of queued snapshot seq has a generation (or seq is no
 * longer queued), deciding it from rg if needed; < 0 with
 * region_last_error(rg) saying why when rg could not be listed. */
int rungen_settle(struct repo *r, struct region *rg, uint64_t seq);

/* In t: when the run of m has a generation recorded, sets m->gen and
 * encodes m into man again (1); 0 when it is still undecided. */
int rungen_fill(struct index_txn *t, struct manifest *m, struct buf *man);

#endif
