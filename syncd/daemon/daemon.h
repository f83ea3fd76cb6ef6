/*
 * daemon.h — ckptsyncd's event loop: the watcher and the completion
 * detector feed the ingest thread; the region workers drain the queues;
 * the control socket answers ping, commit, status, flush, retry and
 * restored; /metrics is served when [daemon] metrics is set.
 *
 *   rc = daemon_run(conf, config_path, argv);   // until SIGTERM/SIGINT
 *
 * config_path is the file conf came from (NULL: the embedded default,
 * which SIGHUP cannot reload); argv is the daemon's own, for re-executing.
 * Start-up takes the state directory's lock (ckptsyncd.lock: a second
 * daemon on the same state is refused), opens the repository, starts the
 * threads and rescans the watch root for what changed while it was down.
 *
 * SIGHUP re-reads the configuration: a bad file is refused (the daemon
 * keeps running and says why); a good one is applied by stopping cleanly
 * and re-executing /proc/self/exe with argv, which the persistent queues
 * make a clean restart (daemon_run then returns only when execv failed).
 *
 * Threads.  The loop runs on the calling thread; it alone owns the
 * sockets, the watcher, the detector and the control server.  Around it:
 * the ingest thread (daemon/ingest.h, with its worker pool), one worker
 * per region (daemon/replicator.h), and the retention thread
 * (daemon/gcd.h) when a retention policy or a prune interval is set.  All
 * share one struct repo on the terms of service/repo.h; they hand work to
 * each other through the index's queues and their own locked queues, and
 * poke the loop's eventfd when something changed.  Shutdown stops them in
 * the reverse order, before the repository is closed.
 *
 * The loop is split in three modules: this one (start-up, signals, the
 * watcher, units to ingest, the loop itself), the control server
 * (daemon/ctlserver.h: connections, requests, waiters) and the status
 * rendering (daemon/statusview.h: status --json and /metrics).  The two
 * helpers see the daemon's parts through struct daemon_parts.
 */
#ifndef CKS_DAEMON_H
#define CKS_DAEMON_H

#include "base/config.h"

#include "daemon/parts.h"

/* Returns 0 after a clean shutdown, or a negative code when start-up
 * failed or a reload could not re-execute (the message was logged).
 * Only main.c calls it, once. */
int daemon_run(const struct config *conf, const char *config_path, char **argv);

#endif
