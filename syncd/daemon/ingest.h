/*
 * ingest.h — the daemon's ingest thread: take a completed unit (one
 * checkpoint directory or file under the watch root), pin its files, read
 * and cut them once, and enqueue the snapshot for every region in one
 * index transaction.  The replicator does the uploads.
 *
 *   ingester_new(r, rp, m, root, notify_fd, &ig);  // m: metrics or NULL;
 *                                      // starts the thread and its pool
 *   ingester_submit(ig, &job);         // from the event loop; -EAGAIN when
 *                                      // 4096 jobs wait already
 *   ... notify_fd (an eventfd) is written once per finished job ...
 *   while (ingester_poll(ig, &done) == 1) ...   // results, in job order
 *   ingester_busy(ig);                 // jobs queued or running
 *   ingester_free(ig);                 // waits for the unit in hand, drops
 *                                      // the jobs still queued
 *
 * Jobs run one at a time, in the order they were submitted, and every
 * accepted job that runs gives exactly one result: room for it is
 * reserved when ingester_submit accepts the job, so none is lost to a
 * failed allocation.  The jobs and results wait in two rings (base/ring.h)
 * under the ingester's one lock.
 * The ingester copies job and root; it borrows r (the daemon's shared
 * repo: its index, parameters and region slots, read on the terms of
 * service/repo.h; it reads regions only through clones of its own), rp
 * (its object buffer, and the slots of every region) and m, which must
 * outlive it.
 *
 * A unit whose content equals its last snapshot is not snapshotted again
 * (done.unchanged, done.id names the existing snapshot).  A file changing
 * during the read restarts the unit (INGEST_RETRIES attempts in all).
 * Once the index is fatal (store/index.h) no unit is taken: done.err is
 * CKS_E_FATAL and done.msg names the failed index.
 *
 * Thread-safe: submit, poll and busy may be called from any thread (the
 * event loop calls them); new and free from the thread that owns the
 * ingester.
 */
#ifndef CKS_INGEST_H
#define CKS_INGEST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/manifest.h"
#include "daemon/replicator.h"
#include "service/repo.h"

#define INGEST_RETRIES 3

struct ingest_job {
    uint64_t ticket; /* echoed in the result */
    char run[MANIFEST_MAX_FIELD + 1];
    char unit[MANIFEST_MAX_PATH + 1]; /* relative to the watch root */
    int64_t step;
};

struct ingest_done {
    uint64_t ticket;
    char run[MANIFEST_MAX_FIELD + 1];
    char unit[MANIFEST_MAX_PATH + 1];
    int64_t step; /* the job's */
    int err;      /* 0 ok */
    char msg[512];
    char id[MANIFEST_ID_MAX + 1];
    uint64_t seq; /* 0 when unchanged */
    bool unchanged;
    uint64_t files, bytes, new_chunks;
};

struct ingester;

struct metrics;

/* m (daemon/metrics.h) receives the counts of what was taken; NULL for
 * none.  It must outlive the ingester. */
int ingester_new(struct repo *r, struct replicator *rp, struct metrics *m, const char *root,
                 int notify_fd, struct ingester **ret);
void ingester_free(struct ingester *ig);
int ingester_submit(struct ingester *ig, const struct ingest_job *job);
int ingester_poll(struct ingester *ig, struct ingest_done *ret);
/* Jobs queued or running. */
size_t ingester_busy(struct ingester *ig);

#endif
