/*
 * statusview.h — the daemon's state rendered for people and monitors:
 * the JSON object `ckptsync status --json` prints (README, "ckptsync
 * status --json") and the Prometheus exposition of GET /metrics and the
 * metrics textfile (README, "Monitoring").
 *
 *   struct buf b = BUF_INIT;
 *   statusview_json(&parts, &b);       // one line, no newline
 *   statusview_metrics(&parts, &b);    // text format 0.0.4
 *
 * parts (daemon/parts.h) must have every member set.  Both functions
 * read the index in one read transaction and append to out (they never
 * reset it); out is the caller's.  They return 0, or a negative code when
 * the index could not be read or memory ran out (out then holds part of
 * the text, to be thrown away).
 *
 * Thread-safety: call from the daemon's event loop only (metrics_counters()
 * and the detector belong to it); the replicator and ingester parts are
 * read through their own thread-safe accessors.
 */
#ifndef CKS_STATUSVIEW_H
#define CKS_STATUSVIEW_H

#include <stddef.h>

#include "base/buf.h"
#include "daemon/parts.h"
#include "store/index.h"

int statusview_json(const struct daemon_parts *parts, struct buf *out);
int statusview_metrics(const struct daemon_parts *parts, struct buf *out);

/* Snapshots not yet committed in every region, in transaction t. */
size_t statusview_pending_snapshots(struct index_txn *t);

#endif
