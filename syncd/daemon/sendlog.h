/*
 * sendlog.h — what each snapshot the daemon took sent from the instance,
 * against its new stored bytes (issue 25: upload once; `status --json`
 * shows it for each run's latest snapshot).
 *
 *   u = sendlog_unit_begin(l);                 // ingest: a unit is read
 *   ... objbuf entries of the unit carry u (daemon/objbuf.h) ...
 *   sendlog_unit_commit(l, u, seq, id, stored);// ingest: its snapshot is pending
 *   sendlog_add(l, u, seq, sent, copied);      // region worker: a chunk PUT / copied
 *   if (sendlog_get(l, id, &rec)) ...          // statusview
 *
 * A chunk a worker uploads is the snapshot's by its queue entry (seq), or,
 * taken from the buffer ahead of any queue entry, by the unit whose
 * ingest buffered it (u).  stored: the encoded bytes of the chunks no
 * region had when the unit was read, each counted once.  Only the last
 * SENDLOG_KEEP units are kept, in memory: a restart forgets them (status
 * then shows null).  Thread-safe (one mutex, never held across I/O).
 */
#ifndef CKS_SENDLOG_H
#define CKS_SENDLOG_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/manifest.h"

#define SENDLOG_KEEP 64

struct sendlog;

struct sendlog_rec {
    uint64_t unit, seq; /* seq 0: not committed yet */
    char id[MANIFEST_ID_MAX + 1];
    uint64_t sent;   /* chunk object bytes PUT from this instance, all regions */
    uint64_t copied; /* chunk object bytes the regions copied server-side */
    uint64_t stored; /* the snapshot's new stored bytes */
};

int sendlog_new(struct sendlog **ret);
void sendlog_free(struct sendlog *l);
uint64_t sendlog_unit_begin(struct sendlog *l);
void sendlog_unit_commit(struct sendlog *l, uint64_t unit, uint64_t seq, const char *id,
                         uint64_t stored);
/* seq != 0: the snapshot of that queue sequence; else the unit's. */
void sendlog_add(struct sendlog *l, uint64_t unit, uint64_t seq, uint64_t sent, uint64_t copied);
bool sendlog_get(struct sendlog *l, const char *id, struct sendlog_rec *ret);

#endif
