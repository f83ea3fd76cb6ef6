/*
 * replicator.h — one worker thread per region draining that region's
 * persistent queue (store/queue.h): upload the chunks it lacks, then
 * publish the manifest and move the run's latest ref.  Regions progress
 * independently: a slow or dead region never holds back the others.
 *
 *   replicator_new(repo, notify_fd, m, &rp); // starts the threads (m: metrics or NULL)
 *   replicator_kick(rp);                     // new work was queued
 *   replicator_status(rp, i, &st);           // for `ckptsync status`
 *   replicator_free(rp);                     // stops and joins (SIGTERM)
 *
 * Failures go to backoff with jitter (1 s doubling to 60 s), retried
 * forever; errors a retry cannot fix (an answer saying the request itself
 * is wrong) mark the region failed until replicator_retry().  A durability
 * failure of the index (a failed LMDB commit, by a worker or by ingest)
 * makes the index fatal (index_fatal, store/index.h): the workers stop,
 * the object buffer stops (ingest waits no more), notify_fd fires, and the
 * daemon reports itself degraded.  The index alone holds that state.
 *
 * The worker writes one byte to notify_fd (an eventfd) whenever a snapshot
 * changes state, so the event loop can answer waiters.  Thread-safe: every
 * function may be called from the event loop while the workers run.
 */
#ifndef CKS_REPLICATOR_H
#define CKS_REPLICATOR_H

#include <stdbool.h>
#include <stdint.h>

#include "service/repo.h"

struct replicator;

enum region_state { REGION_OK, REGION_BACKOFF, REGION_FAILED };

struct region_status {
    enum region_state state;
    char last_error[1024];
    int64_t last_error_ms;   /* wall clock, 0 = never */
    int64_t last_success_ms; /* wall clock: the last commit of a snapshot, or the
                              * round that ended a run of failures */
    unsigned failures;       /* consecutive */
    int last_code;           /* the last failure's code (CKS_E_DENIED: credentials) */
    int64_t retry_at_ms;     /* for BACKOFF */
    uint64_t objects_put, bytes_put;
    /* server-side copies into this region (service/fanout.h): confirmed,
     * and those that failed (each then went up from the instance) */
    uint64_t objects_copied, bytes_copied, copies_failed;
    uint32_t copies_from; /* bit j: it copies from region j now (replicator_status) */
};

struct metrics;
struct objbuf;

/* m (daemon/metrics.h) receives the workers' counts; NULL for none.  It
 * must outlive the replicator. */
int replicator_new(struct repo *r, int notify_fd, struct metrics *m, struct replicator **ret);
void replicator_free(struct replicator *rp);
/* The buffer ingest hands encoded objects through (daemon/objbuf.h);
 * owned by the replicator, valid until replicator_free. */
struct objbuf *replicator_objbuf(struct replicator *rp);
/* What each snapshot sent from the instance (daemon/sendlog.h); owned
 * by the replicator, valid until replicator_free. */
struct sendlog *replicator_sendlog(struct replicator *rp);
void replicator_kick(struct replicator *rp);
/* Ingest reads a unit (on) or is done with it (off; its snapshot is
 * pending by then, or there is none): durable first holds the regions
 * past the quorum back meanwhile. */
void replicator_ingesting(struct replicator *rp, bool on);
/* Clears a failed region's state (by name); -ENOENT for an unknown name. */
int replicator_retry(struct replicator *rp, const char *region);
void replicator_status(struct replicator *rp, size_t i, struct region_status *ret);
/* Units whose pinned bytes changed after ingest: the daemon must take them
 * again.  Copies up to cap relpaths into ret (each 4096 bytes) and returns
 * the count, clearing them. */
size_t replicator_take_retakes(struct replicator *rp, char (*ret)[4096], size_t cap);
/* Mask of the region slots a snapshot must reach to be replicated. */
uint32_t replicator_all_slots(const struct replicator *rp);

#endif
