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
 */
#ifndef CKS_DAEMON_H
#define CKS_DAEMON_H

#include "base/config.h"

/* Returns 0 after a clean shutdown, or a negative code when start-up
 * failed (the message was logged). */
int daemon_run(const struct config *conf, const char *config_path, char **argv);

#endif
