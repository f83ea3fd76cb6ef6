/*
 * metrics.h — the daemon's counters and histograms, their Prometheus text
 * exposition (format 0.0.4), the process_* metrics, and the GET /metrics
 * endpoint served from the daemon's event loop.
 *
 *   metrics_new(repo_conf(repo), &m);               // before the worker threads
 *   metrics_carry_in(m, getenv(METRICS_CARRY_ENV)); // a reload's counters, if any
 *   metrics_snapshot(m, ...); metrics_request(m, i, op, ok, bytes, usec); ...
 *                                                   // ingest and region threads
 *   metrics_durable(m, usec);                       // a snapshot reached the quorum
 *   metrics_restore(m, ok, bytes, files, usec);     // a restore the CLI reported
 *   metrics_family(&out, name, "gauge", help); metrics_sample(&out, ...);
 *   metrics_counters(m, &out);                      // the event loop renders
 *   metrics_server_new("127.0.0.1:9477", epfd, render, ud, &srv, &err);
 *   if (metrics_server_event(srv, tag)) ...;        // for each epoll event
 *   metrics_server_tick(srv);                       // once per loop turn
 *   metrics_server_free(srv);
 *   metrics_carry_out(m, &text);                    // threads stopped, before a reload
 *   metrics_free(m);
 *
 * Counters only grow (relaxed atomics: one metric is never read together
 * with another as a consistent pair); the gauges (queue depth, lag, the
 * newest durable snapshot per run) are computed by the caller's render
 * function at scrape time from the index.  Every update function accepts
 * m == NULL and then does nothing, so code paths that run outside the
 * daemon need no metrics.  Thread-safe: the update functions from any
 * thread; the server, metrics_counters() and the carry functions from the
 * event loop only (metrics_carry_in before the threads start).
 *
 * Histograms (bucket bounds in seconds; +Inf always follows):
 *   ckptsync_commit_to_durable_seconds  0.5 1 2.5 5 10 30 60 120 300 600 1800 3600 7200
 *   ckptsync_region_request_duration_seconds{region,operation}
 *                                 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60
 *   ckptsync_restore_duration_seconds   0.5 1 2.5 5 10 30 60 120 300 600 1800 3600 7200
 * Observations are kept in microseconds and counted per bucket; the
 * render cumulates them, so the buckets of one scrape never decrease and
 * _count always equals the +Inf bucket.
 *
 * A reload (SIGHUP re-executes the daemon in the same process) carries
 * every counter and histogram: metrics_carry_out() writes them as text
 * ("ckptsync-counters 1", then "g NAME values" and "r REGION NAME values"
 * lines), the daemon passes it through the exec in the environment
 * variable METRICS_CARRY_ENV, and metrics_carry_in() takes back each field
 * whose name (and, for a histogram, bucket bounds) the new build knows,
 * for the regions the new configuration still has.  A real restart starts
 * from zero, as process_start_time_seconds says.
 *
 * Adding a counter: a uint64_t field (or array) in struct global_counts
 * or struct region_counts in metrics.c, a CARRY() line for it in
 * carry_global or carry_region (metrics_new() refuses to start when a
 * word of either struct is not in its table, so it cannot be forgotten),
 * an update function here that accepts m == NULL, and its family in the
 * counters_* render functions.  A histogram: a struct metrics_hist field,
 * a bounds array (microseconds), the CARRY() line with the bounds, an
 * observe() call, and a put_hist() in hists().
 *
 * The server is deliberately small: it accepts without blocking, reads one
 * request of at most METRICS_REQUEST_MAX bytes, answers it (GET or HEAD
 * /metrics: 200 with the exposition; /: 200 with a small HTML page that
 * links /metrics; another path: 404; another method: 405; an oversized or
 * malformed request: 400) and closes the connection; a connection still
 * open METRICS_IDLE_MS after it was accepted is closed; at most
 * METRICS_MAX_CONNS at once, and a new one closes the one idle the
 * longest when they are all taken (idle connections cannot lock scrapes
 * out).
 */
#ifndef CKS_METRICS_H
#define CKS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "service/repo.h"

#define METRICS_REQUEST_MAX 8192
#define METRICS_IDLE_MS 10000
#define METRICS_MAX_CONNS 16
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define METRICS_HIST_MAX 16  /* bucket bounds of a histogram, at most */
#define METRICS_LABELS_MAX 3 /* labels of a histogram's series, le aside */
#define METRICS_CARRY_ENV "CKPTSYNCD_CARRIED_COUNTERS"
#define METRICS_CARRY_MAGIC "ckptsync-counters 1"

/* Region requests counted by operation. */
enum metrics_op { METRICS_OP_HAS, METRICS_OP_PUT, METRICS_OP_PUBLISH, METRICS_NOPS };

/* Why something was done again. */
enum metrics_retry {
    METRICS_RETRY_ERROR,   /* a region round failed; retried after backoff */
    METRICS_RETRY_MISSING, /* chunks the region had lost, uploaded again */
    METRICS_RETRY_CHANGED, /* a file changed after ingest: the snapshot is dropped, retaken */
    METRICS_NRETRIES
};

/* Snapshots by outcome. */
enum metrics_snap {
    METRICS_SNAP_TAKEN,
    METRICS_SNAP_UNCHANGED,
    METRICS_SNAP_FAILED,
    METRICS_NSNAPS
};

struct metrics;

int metrics_new(const struct config *conf, struct metrics **ret);
void metrics_free(struct metrics *m);

/* The ingest thread: one unit's outcome.  bytes/chunks are the snapshot's
 * file bytes and chunk references, new_* those no region had before. */
void metrics_snapshot(struct metrics *m, enum metrics_snap outcome, uint64_t bytes,
                      uint64_t new_bytes, uint64_t chunks, uint64_t new_chunks);
/* A unit read again because a file changed while it was read. */
void metrics_reread(struct metrics *m);
/* Region worker i (the repo's region index): one request's result, the
 * bytes it sent, and how long it took (submitted to completed). */
void metrics_request(struct metrics *m, size_t i, enum metrics_op op, bool ok, uint64_t bytes,
                     uint64_t usec);
void metrics_retry(struct metrics *m, size_t i, enum metrics_retry cause, uint64_t n);
/* Server-side copies into region i (issue 25, service/fanout.h): one
 * confirmed (bytes: the object's size, copied without leaving the
 * stores), failed (the copy request, or its confirmation), or fallen back
 * (the chunk then went up from the instance). */
enum metrics_copy { METRICS_COPY_OK, METRICS_COPY_FAILED, METRICS_COPY_FALLBACK, METRICS_NCOPIES };
void metrics_copy(struct metrics *m, size_t i, enum metrics_copy what, uint64_t bytes);
/* A region worker: a snapshot was committed in the quorum-th region, usec
 * after it was created (wall clock: a restart in between counts). */
void metrics_durable(struct metrics *m, uint64_t usec);
/* The event loop: a restore another process reported (the control
 * protocol's restored).  Bytes, files and time count only when ok, so
 * bytes / seconds is the rate of the restores that succeeded. */
void metrics_restore(struct metrics *m, bool ok, uint64_t bytes, uint64_t files, uint64_t usec);

/* ---- carried over a reload ---------------------------------------------- */

/* Appends every counter and histogram of m as text (see above). */
void metrics_carry_out(const struct metrics *m, struct buf *out);
/* Adds back what metrics_carry_out() wrote into a fresh m: the number of
 * fields taken, or -EINVAL when text is not that format (-ENOMEM). */
int metrics_carry_in(struct metrics *m, const char *text);

/* ---- exposition ---------------------------------------------------------- */

struct metrics_label {
    const char *name, *value;
};

/* "# HELP name help\n# TYPE name type\n"; help is escaped. */
void metrics_family(struct buf *out, const char *name, const char *type, const char *help);
/* 'name{l1="v1",...} value\n'; label values are escaped (\\, \", \n). */
void metrics_sample(struct buf *out, const char *name, const struct metrics_label *labels,
                    size_t nlabels, double value);
/* The same with an exact integer value. */
void metrics_sample_u64(struct buf *out, const char *name, const struct metrics_label *labels,
                        size_t nlabels, uint64_t value);
/* ckptsync_info, the process_* families, and every counter and
 * histogram family of m. */
void metrics_counters(const struct metrics *m, struct buf *out);

/* ---- the endpoint -------------------------------------------------------- */

struct metrics_server;

/* Renders the whole exposition into out; 0 or a negative code (answered 500). */
typedef int (*metrics_render_fn)(void *ud, struct buf *out);

/* Listens on addr ("HOST:PORT" as config_parse_listen() reads it) and adds
 * its socket to epfd, tagged with a pointer only metrics_server_event()
 * recognizes.  On error puts the reason into err. */
int metrics_server_new(const char *addr, int epfd, metrics_render_fn render, void *ud,
                       struct metrics_server **ret, struct buf *err);
void metrics_server_free(struct metrics_server *s);
/* Handles the epoll event whose data.ptr is tag; false when tag is not the
 * server's (so the caller looks further). */
bool metrics_server_event(struct metrics_server *s, void *tag);
/* Closes connections accepted METRICS_IDLE_MS ago or earlier. */
void metrics_server_tick(struct metrics_server *s);
/* The port it listens on (useful with port 0 in tests). */
unsigned metrics_server_port(const struct metrics_server *s);

#endif
