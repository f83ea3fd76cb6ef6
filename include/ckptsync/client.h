/*
 * ckptsync/client.h — the C client library: tell a running ckptsyncd that
 * a checkpoint is complete, wait until it is durable, ask for status.
 *
 * It speaks the control protocol documented in ckptsync/protocol.h over
 * the daemon's unix socket.  Link with libckptsync-client, static or
 * shared: `pkg-config --cflags --libs ckptsync-client` (add --static for
 * the archive); it carries its own buffer and protocol codec and needs
 * only libcrypto.
 *
 * Calling sequence:
 *
 *   struct cks_client *c;
 *   int r = cks_client_open(NULL, &c);      NULL: found as protocol.h says
 *   if (r == -ENOENT || r == -ECONNREFUSED) ... no daemon running
 *   char *json = NULL;
 *   r = cks_commit(c, "/data/cloud_storage/r1/checkpoint-1000", 1000,
 *                  CKS_WAIT_DURABLE, 600, &json);
 *   if (r < 0) fprintf(stderr, "commit: %s\n", cks_client_error(c));
 *   free(json);
 *   cks_client_close(c);
 *
 * Connections: cks_client_open() connects once to learn whether a daemon
 * listens, then closes; every request opens its own connection, sends one
 * line, reads one line and closes, so a client object outlives a restart
 * of the daemon.
 *
 * Waiting: a request that waits (wait != CKS_WAIT_NONE) blocks until the
 * daemon answers: at most timeout + 30 seconds, or without limit when the
 * timeout is -1.  Requests that do not wait give up after 30 seconds,
 * cks_report_restore() after 2.
 * Interrupted system calls are resumed; SIGPIPE is never raised.
 *
 * Errors: every function returns 0 or a negative errno.  An ERR answer
 * from the daemon maps to: timeout -ETIMEDOUT, badrequest -EINVAL,
 * notwatched (a path outside the watch root) -EINVAL too, notfound
 * -ENOENT, degraded -EIO, busy -EBUSY, wrongnode -EINVAL, any other code -EPROTO; a malformed or
 * missing answer is -EPROTO, one longer than 4 MiB -EMSGSIZE.  After a
 * failure, cks_client_error() says what went wrong (the daemon's message,
 * or the local reason) and cks_client_error_code() gives the daemon's code
 * ("" for local failures).
 *
 * Ownership: *ret_json, when asked for (pass NULL otherwise), is the JSON
 * object of the OK answer as a NUL-terminated string allocated with
 * malloc(); the caller frees it.  It is set to NULL on failure.  Strings
 * returned by cks_client_error*() belong to the client and stay valid
 * until its next request or cks_client_close().
 *
 * Thread-safety: a struct cks_client is used by one thread at a time;
 * separate clients are independent.
 */
#ifndef CKPTSYNC_CLIENT_H
#define CKPTSYNC_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a commit or flush waits for before the daemon answers. */
enum cks_wait {
    CKS_WAIT_NONE = 0,       /* answer once the work is accepted */
    CKS_WAIT_DURABLE = 1,    /* ... once committed in a quorum of regions */
    CKS_WAIT_REPLICATED = 2, /* ... once committed in every region */
};

struct cks_client;

/* socket_path NULL: the socket found as ckptsync/protocol.h says
 * ($CKPTSYNC_SOCKET, the configuration of $CKPTSYNC_CONFIG or
 * /etc/ckptsync/ckptsync.conf, $CKPTSYNC_STATE, /var/lib/ckptsync).
 * -ENOENT or -ECONNREFUSED when no daemon listens there, -ETIMEDOUT when
 * the connection is not accepted within 5 s, -ENAMETOOLONG, -ENOMEM,
 * other connect() errors. */
int cks_client_open(const char *socket_path, struct cks_client **ret);
/* The socket cks_client_open(NULL, ...) connects to, with config_path and
 * state_dir (NULL: from the environment) taking the place of
 * $CKPTSYNC_CONFIG and $CKPTSYNC_STATE.  0, or -ENAMETOOLONG when it does
 * not fit in cap bytes, or -EIO when the named configuration cannot be
 * read. */
int cks_socket_path(const char *config_path, const char *state_dir, char *buf, size_t cap);
/* cks_client_close(NULL) does nothing. */
void cks_client_close(struct cks_client *c);

/* Is the daemon alive and answering. */
int cks_ping(struct cks_client *c);
/* The checkpoint at path (file or directory; a relative path is taken
 * from the current directory) is complete.  step >= 0, or -1 when unknown;
 * wait one of enum cks_wait; timeout_s 0..604800 seconds, or -1 for no
 * limit (used only when waiting). */
int cks_commit(struct cks_client *c, const char *path, int64_t step, int wait, int64_t timeout_s,
               char **ret_json);
/* cks_commit() from node node_rank of nodes of a multi-node job (the
 * launcher's view: torchrun's GROUP_RANK and node count, Slurm's
 * SLURM_NODEID and SLURM_NNODES).  The daemon refuses the commit with
 * -EINVAL, error code "wrongnode" and a message naming both identities
 * when its own ([daemon] nodes, node_rank) differs, so a misconfigured
 * node never publishes its part alone or under another rank.  Both -1:
 * cks_commit() exactly; otherwise 1 <= nodes <= 4096 and 0 <= node_rank
 * < nodes, or -EINVAL.  Symbol version CKPTSYNC_CLIENT_0.2. */
int cks_commit_node(struct cks_client *c, const char *path, int64_t step, int wait,
                    int64_t timeout_s, int64_t node_rank, int64_t nodes, char **ret_json);
/* The daemon's state: runs with their latest snapshot, regions with their
 * lag (see protocol.h, section 3). */
int cks_status(struct cks_client *c, char **ret_json);
/* Upload everything queued now; with a wait, return when all of it is
 * durable or replicated, at most deadline_s seconds (-1: no limit). */
int cks_flush(struct cks_client *c, int wait, int64_t deadline_s, char **ret_json);
/* Retry the named region now instead of after its backoff. */
int cks_retry(struct cks_client *c, const char *region);
/* Tell the daemon that a restore ran in this process, for its metrics
 * (ckptsync_restore*): the bytes and files it wrote (0 when it failed),
 * how long it took in microseconds, ok (1) or failed (0).  Advisory: it
 * waits CKS_PROTO_REPORT_TIMEOUT_MS (2 s) at most, and a caller may ignore
 * its result (an older daemon answers -EINVAL).  Values above INT64_MAX:
 * -EINVAL. */
int cks_report_restore(struct cks_client *c, uint64_t bytes, uint64_t files, uint64_t usec, int ok);

/* What the last failed request reported ("" when it succeeded). */
const char *cks_client_error(const struct cks_client *c);
/* The daemon's error code of the last failed request ("" when none). */
const char *cks_client_error_code(const struct cks_client *c);

#ifdef __cplusplus
}
#endif

#endif
