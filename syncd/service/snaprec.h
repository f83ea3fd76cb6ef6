/*
 * snaprec.h — a snapshot's record in the local index: its chunks'
 * references and its struct index_snap.  One path for every snapshot the
 * index learns of: one this instance takes (ingcore_record, no region yet)
 * and one a restore found in the regions (restore.c, after the rename).
 *
 *   index_txn_begin(ix, true, &t);
 *   snaprec_add(t, &m, bytes, 0);          // a new snapshot: refs + record
 *   snaprec_found(t, &m, holders);         // one the regions hold
 *   index_txn_commit(t);
 *
 * References: one more on each chunk occurrence of the manifest (a chunk
 * the index does not know yet is recorded with its length), so that every
 * chunk's refcount is the number of times the recorded snapshots name it
 * (service/fsck.h).  Made once per snapshot, in the transaction that
 * creates its record.  Runs inside the caller's transaction; no state;
 * thread-safe as that transaction is (one thread).
 */
#ifndef CKS_SNAPREC_H
#define CKS_SNAPREC_H

#include <stdint.h>

#include "engine/manifest.h"
#include "store/index.h"

/* In t: the references of m's chunks and m's record (step, time, bytes =
 * logical bytes, regular files, committed = region slot bits). */
int snaprec_add(struct index_txn *t, const struct manifest *m, uint64_t bytes, uint32_t committed);
/* m was read from the regions, and the regions of slot bits holders hold
 * its manifest (the manifest is published only after all its chunks, so
 * these regions hold the snapshot).  Unknown to t: recorded as by
 * snaprec_add, committed = holders (0 when no region answered that it
 * holds it: then it is not durable here either).  Known (this instance
 * took or restored it before): holders are added to its committed
 * regions; nothing is cleared (a region worker may be committing it right
 * now) and no reference is counted again.  1 when a record was created,
 * 0 when one was updated, or a negative code. */
int snaprec_found(struct index_txn *t, const struct manifest *m, uint32_t holders);
/* The inverse of snaprec_add, for a snapshot the regions no longer keep
 * (service/snapdrop.h): one reference less on each chunk occurrence of m,
 * and m's record deleted.  Not while the daemon has it pending (its region
 * workers read the record; the queue says, store/queue.h).  1 when
 * dropped, 0 when there was nothing to drop (no record, or pending), or a
 * negative code. */
int snaprec_drop(struct index_txn *t, const struct manifest *m);

#endif
