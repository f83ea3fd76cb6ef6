/*
 * latepin.h — pinning, before a publish, a file ingest did not pin.
 *
 * Ingest (daemon/ingest.c) links no file into the pin folder that the
 * index knows by its identity with every chunk in every region: the link
 * would move its ctime.  When a region worker's confirmation before the
 * publish (replicator.c, rw_confirm) finds such a file's chunks gone
 * after all (another instance sharing the regions forgot and pruned the
 * snapshot that stored them, or a person or a lifecycle rule deleted the
 * objects), it queues them again, and the bytes must come from the pin:
 *
 *   rw_confirm -> missing chunk of file k -> latepin_file(t, pin, unit, f, k)
 *              -> rw_requeue (the worker reads <pin>/k, checks each chunk's id)
 *
 * latepin_file links the file at f->path (under the unit's parent) as
 * <pin>/<k> when it still has an identity (index_file_key_of) that the
 * index maps to f's digest: the same test ingest used to take it unread.  The link
 * moves ctime, so the index record is put again under the identity after
 * the link (in t), which rw_unpin keys again when the pin goes.  A file
 * changed or gone is not linked (nor one the filesystem refuses to link):
 * the worker then finds no link, and the snapshot is dropped and its unit
 * taken again, as for a pinned file that changed.  A rewrite between the check and the link that
 * keeps the inode is caught by the worker's id check of every chunk it reads. Thread-safe (no
 * state; t is the caller's).
 */
#ifndef CKS_LATEPIN_H
#define CKS_LATEPIN_H

#include <stddef.h>

#include "engine/manifest.h"
#include "store/index.h"

/* pin: the snapshot's pin folder (<root>/.ckptsync-pins/<id>, pin.h);
 * unit: relative to root; f: manifest file k, a regular file.  1: <pin>/k
 * is there (made now or before); 0: the file changed, is gone or cannot
 * be linked (logged); < 0: an error. */
int latepin_file(struct index_txn *t, const char *pin, const char *unit, const struct mfile *f,
                 size_t k);

#endif
