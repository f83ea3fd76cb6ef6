/*
 * daemon.h — ckptsyncd's event loop: the watcher and the completion
 * detector feed the ingest thread; the region workers drain the queues;
 * the control socket answers commit, status, flush, retry and ping.
 *
 *   daemon_run(&conf, config_path, &exit_code);   // until SIGTERM/SIGINT
 *
 * SIGHUP re-reads the configuration: a bad file is refused (the daemon
 * keeps running and says why); a good one is applied by re-executing the
 * daemon in place, which the persistent queues make a clean restart.
 * One thread runs the loop; it alone owns the sockets and the detector.
 *
 * The loop is split in three modules: this one (start-up, signals, the
 * watcher, units to ingest, the loop itself), the control server
 * (daemon/ctlserver.h: connections, requests, waiters) and the status
 * rendering (daemon/statusview.h: status --json and /metrics).  The two
 * helpers see the daemon's parts through struct daemon_parts.
 */
#ifndef CKS_DAEMON_H
#define CKS_DAEMON_H

#include <stdint.h>

#include "base/config.h"

struct repo;
struct replicator;
struct ingester;
struct detector;
struct metrics;

/* What the daemon runs, as the control server and the status rendering
 * see it.  daemon_run() owns every part and fills each in as start-up
 * creates it (before the loop runs, so the helpers, which only use them
 * from the loop, always find them all); the helpers borrow the struct for
 * as long as they live. */
struct daemon_parts {
    const struct config *conf;
    const char *root; /* the watch root, resolved */
    struct repo *r;
    struct replicator *rp;
    struct ingester *ig;
    struct detector *det;
    struct metrics *m;                   /* counters the threads update */
    int64_t started_ms, started_wall_ms; /* monotonic and wall clock */
};

/* Returns 0 after a clean shutdown, or a negative code when start-up
 * failed (the message was logged). */
int daemon_run(const struct config *conf, const char *config_path, char **argv);

#endif
