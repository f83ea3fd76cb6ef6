/*
 * rspool.h — recipe objects spooled for the region workers (issue 27,
 * docs/deltas.md "The daemon writes recipes").
 *
 * A chunk's plain object can always be made again from the pin (read,
 * check the id, encode), so the object buffer may drop it and a restart
 * loses nothing.  A recipe object cannot: its bytes come from phase B of
 * service/dwrite (a plan over bases read from other files, encoded and
 * decode-checked).  So ingest writes each recipe object here, durably,
 * before the transaction that queues it, and the region workers read it
 * back from here, whether they run right after ingest or after a crash:
 *
 *   ingest:  rspool_put(pin, id, obj, len)   // fsynced, then the queue txn
 *   worker:  rspool_get(pin, id, max, &buf)  // for a QUEUE_RECIPE entry
 *
 * The spool is the snapshot's pin folder (daemon/pin.h): a file
 * "r.<64 hex>" per recipe beside the links.  It goes with the pin: when
 * every region committed the snapshot (rw_unpin), when the snapshot is
 * dropped (rw_drop), or at the next start when no pending snapshot names
 * it (a crash before the queue transaction).  The bytes are what the
 * workers upload: the sealed envelope in an encrypted repository.
 * Thread-safe (no state).
 */
#ifndef CKS_RSPOOL_H
#define CKS_RSPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/hash.h"

/* Writes the recipe object of chunk id into the pin folder, durably (file
 * and folder fsynced), replacing one of the same id. */
int rspool_put(const char *pin, const uint8_t id[HASH_LEN], const void *data, size_t len);
/* Reads it back into out (replaced): 0, -ENOENT when the spool has none,
 * CKS_E_LIMIT over max bytes, or another -errno. */
int rspool_get(const char *pin, const uint8_t id[HASH_LEN], size_t max, struct buf *out);

#endif
