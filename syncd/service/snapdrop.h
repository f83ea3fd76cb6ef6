/*
 * snapdrop.h — the local index lets go of a snapshot the regions no
 * longer keep (option (a) of keeping the index honest; service/snapheld.h
 * is what makes a commit right whatever the index holds).
 *
 *   retention_apply:  snapdrop_forgotten(r, run, id);  // its forget record written
 *   prune:            snapdrop_forgotten(r, run, id);  // a forget record it found
 *
 * When the index has a record of run/id (this instance took or restored
 * it) and the daemon does not have it pending, the snapshot's manifest is
 * read from the regions (it is still there: forget records come before
 * prune deletes manifests) and the record and its chunk references are
 * removed in one transaction (service/snaprec.h, snaprec_drop), so that
 * `ls`, `status` and the daemon's newest durable snapshot stop naming it
 * and fsck's reference counts stay exact.  A record that cannot be
 * dropped (the manifest unreadable, the daemon still replicating it) is
 * left for `ckptsync reindex`; it no longer answers a commit either way.
 * Uses the repo's own region handles: the thread that owns them.
 */
#ifndef CKS_SNAPDROP_H
#define CKS_SNAPDROP_H

#include "service/repo.h"

/* 1 when the record was dropped, 0 when there was none to drop (or it is
 * pending), or a negative code (logged, naming the snapshot). */
int snapdrop_forgotten(struct repo *r, const char *run, const char *id);

#endif
