/*
 * unitmark.h — what the local index remembers of a unit's content, so
 * that a unit is not snapshotted again when nothing in it changed.
 *
 *   unitmark_content(&m, digest);                 // a manifest's content
 *   unitmark_snapshotted(t, unit, digest, id);    // the daemon, at commit
 *   unitmark_restored(r, watch, run, target, &m); // restore, into the watch root
 *   unitmark_same(t, run, unit, digest, id_out);  // the daemon, before a commit
 *
 * A unit is named by its path under the watch root ("r1/checkpoint-300",
 * "checkpoint-40" for the run _root).  Its content digest covers every
 * entry's type, mode, size, path, link target and file digest, not the
 * snapshot's id, time or host: equal digests, equal units.  Two marks, in
 * index meta records: "unit:<h>" = "<content hex> <id>", written by the
 * daemon when it commits the unit (the snapshot must still be in the local
 * index to count), and "restored:<h>" = "<content hex> <run> <id>",
 * written by a restore whose target lies under the configured watch root:
 * a tree restored there (migrate-in) is the snapshot it came from, not a
 * new one for the daemon to take (the restore records that snapshot in
 * the index first, service/snaprec.h; a mark whose snapshot the index
 * does not know does not count, so the daemon never answers a commit
 * with a snapshot it cannot say where is committed).  Called inside the caller's index
 * transactions, except unitmark_restored (its own); no state.
 */
#ifndef CKS_UNITMARK_H
#define CKS_UNITMARK_H

#include <stdint.h>

#include "engine/hash.h"
#include "engine/manifest.h"
#include "service/repo.h"
#include "store/index.h"

/* The content digest of manifest m (all zero if SHA-256 is unavailable). */
void unitmark_content(const struct manifest *m, uint8_t ret[HASH_LEN]);
/* Records that unit was committed as snapshot id with this content. */
int unitmark_snapshotted(struct index_txn *t, const char *unit, const uint8_t content[HASH_LEN],
                         const char *id);
/* 1 when unit's content equals the last snapshot the daemon committed of
 * it or the snapshot of run restored into it (either still in the index);
 * its id into ret_id.  0 when not (or nothing is known). */
int unitmark_same(struct index_txn *t, const char *run, const char *unit,
                  const uint8_t content[HASH_LEN], char ret_id[MANIFEST_ID_MAX + 1]);
/* After a restore of m (of run) into target: when target/<m's root> lies
 * under the watch root (configured, both resolved), marks that unit as
 * restored.  0, or a negative code (then nothing is marked; the daemon
 * merely takes the unit again). */
int unitmark_restored(struct repo *r, const char *run, const char *target,
                      const struct manifest *m);

#endif
