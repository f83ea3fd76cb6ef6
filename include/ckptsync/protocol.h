/*
 * ckptsync/protocol.h — the control protocol of ckptsyncd, version 1,
 * documented for users and for other implementations (a shell one-liner
 * with socat, a Go or Rust client).
 *
 * This header only documents and names constants; it declares no
 * functions.  The C client library (ckptsync/client.h) and the Python
 * module (client/python/ckptsync) speak it; so can anything that opens a
 * unix socket:
 *
 *   printf 'CKPTSYNC/1 status\n' | socat - UNIX-CONNECT:/var/lib/ckptsync/ckptsyncd.sock
 *
 * ==========================================================================
 * 1. Transport
 * ==========================================================================
 *
 * A unix stream socket, by default <state>/ckptsyncd.sock
 * (/var/lib/ckptsync/ckptsyncd.sock), mode 0600: only the daemon's user
 * (and root) may talk to it.  Clients find it as: an explicit path, else
 * $CKPTSYNC_SOCKET, else the default.  No socket file, or a socket nobody
 * listens on (ENOENT, ECONNREFUSED), means the daemon is not running.
 *
 * The client connects, writes one request line, reads one response line.
 * A client may close after one exchange (the libraries do: one connection
 * per request); the daemon may also serve several requests in order on one
 * connection, answering each before it reads the next.  Every request gets
 * exactly one response line.
 *
 * The daemon gives a client [daemon] control_idle_timeout seconds (default
 * 5) to send its request line, and as long to read the answer; a client
 * that is too slow is answered badrequest and closed.  A request that waits
 * (commit wait=, flush wait=) is bounded by its own timeout only.  When
 * every connection slot is taken, the daemon makes room by closing the
 * connection idle the longest (it is answered busy); if every one is a
 * waiter, the new client is answered busy and closed.
 *
 * ==========================================================================
 * 2. Requests
 * ==========================================================================
 *
 *   request = "CKPTSYNC/1" SP verb *(SP key "=" value) LF
 *
 * - At most CKS_PROTO_MAX_REQUEST (65536) bytes, LF included.  Longer, no
 *   LF, a NUL or any byte outside 0x20..0x7e before the LF: rejected.
 * - Fields are separated by exactly one space; no leading or trailing
 *   space, no empty field; no CR (a CRLF line is rejected).
 * - Keys are case-sensitive, may appear in any order, at most once each.
 *   A key the verb does not take, a duplicate key, a missing required key
 *   or a value outside its range is an error.
 * - Values are percent-encoded: every byte <= 0x20, >= 0x7f, '%' and '='
 *   is written %XX (two hex digits, either case; encoders write upper
 *   case).  Other bytes may also be escaped.  %00 is rejected.
 * - A version other than 1 ("CKPTSYNC/2 ...") is rejected as such, so a
 *   newer client learns it talks to an older daemon.
 *
 * Numbers are decimal without sign or leading zeros ("0", "1000").
 *
 *   verb    keys                                 meaning
 *   ------  -----------------------------------  ---------------------------
 *   ping                                         is the daemon alive
 *   commit  path=ABS (required)                  checkpoint at ABS (a file or
 *           step=N          0..2^63-1            a directory) is complete:
 *           wait=W          none|durable|        snapshot it now; optionally
 *                           replicated           wait until it is durable
 *           timeout=S       0..604800 seconds    (quorum of regions) or
 *                                                replicated (every region),
 *                                                at most S seconds
 *           nodes=N         1..4096              the caller's node K of N
 *           node_rank=K     0..N-1               (a multi-node job); both or
 *                                                neither
 *   status                                       daemon, runs, regions
 *   flush   wait=W                               upload everything queued now;
 *           deadline=S      0..604800 seconds    optionally wait (at most S)
 *                                                until all of it is W
 *   retry   region=NAME     [A-Za-z0-9_-]{1,63}  retry a failing region now,
 *           (required)                           skipping its backoff
 *   restored                                     a restore ran in another
 *           bytes=N         0..2^63-1            process (the ckptsync CLI):
 *           files=N         0..2^63-1            count it in the daemon's
 *           usec=N          0..2^63-1            metrics (ckptsync_restore*);
 *           result=R        ok|failed            all four keys required
 *
 * restored reports the bytes and files the restore wrote and how long it
 * took, in microseconds; a failed restore leaves nothing behind and
 * reports 0 bytes and 0 files.  The daemon only adds them to counters and
 * answers at once ({"recorded":true}); it is advisory, so a client sends
 * it only when a daemon listens, waits CKS_PROTO_REPORT_TIMEOUT_MS at
 * most, and ignores any failure (an older daemon answers badrequest).
 *
 * commit's nodes and node_rank say which node of a multi-node job the
 * caller believes it runs on (its launcher's view: torchrun, Slurm).  The
 * daemon compares them with its own identity ([daemon] nodes, node_rank,
 * or CKPTSYNC_NODES / CKPTSYNC_NODE_RANK / Slurm in its environment) and
 * refuses a commit that differs with wrongnode, naming both, so that a
 * misconfigured node never publishes its part as a lone snapshot or
 * under another rank.  Without them a commit is taken as before.
 *
 * path is absolute, 1 to 4095 bytes; an absent step means "unknown";
 * an absent wait is "none" (answer as soon as the work is accepted); an
 * absent timeout or deadline means "no limit".
 *
 * ==========================================================================
 * 3. Responses
 * ==========================================================================
 *
 *   response = "OK" SP json-object LF
 *            / "ERR" SP code [SP message] LF
 *
 * - At most CKS_PROTO_MAX_RESPONSE (4 MiB) bytes, LF included; no byte
 *   below 0x20 before the LF.
 * - json-object is one JSON object (RFC 8259, UTF-8) on one line; its
 *   members depend on the verb and grow over time: readers ignore members
 *   they do not know.  status answers at least
 *     {"runs":[{"run":NAME,"latest":{"id":ID,"step":N,"state":S}}, ...],
 *      "regions":[...]}
 *   with "latest" null for a run that has no snapshot yet.
 * - code is [a-z][a-z0-9_]{0,30}; message is human text, percent-encoded
 *   like a value.  Clients map codes they do not know to a generic error
 *   and show the message.
 *
 *   code        meaning                                client errno
 *   ----------  -------------------------------------  ------------
 *   badrequest  the request broke a rule of section 2  EINVAL
 *   notfound    no such path, run or region            ENOENT
 *   notwatched  path is not under the watch root       EPROTO
 *   timeout     the wait did not finish in time; the   ETIMEDOUT
 *               work goes on in the background
 *   degraded    a durability failure happened; the     EIO
 *               daemon refuses new work (status and
 *               restore still work)
 *   busy        no connection slot is free: every one  EBUSY
 *               holds a waiting request; try again
 *   wrongnode   commit's nodes/node_rank are not the   EINVAL
 *               daemon's own (section 2)
 *   internal    anything else                          EPROTO
 *
 * Example exchange:
 *
 *   > CKPTSYNC/1 commit path=/data/cloud_storage/r1/checkpoint%201000 step=1000 wait=durable
 * timeout=600 < OK {"id":"20261201T000701.123456Z-3f2a9c1b","run":"r1","regions_committed":2,
 *         "durable":true,"replicated":false}
 *   > CKPTSYNC/1 retry region=eu-1
 *   < ERR notfound no%20region%20named%20%22eu-1%22
 *   > CKPTSYNC/1 restored bytes=3145728 files=1 usec=412345 result=ok
 *   < OK {"recorded":true}
 *
 * Clients wait for an answer at most timeout (or deadline) + 30 seconds,
 * forever when they asked to wait without a limit, 30 seconds for
 * requests that do not wait, and CKS_PROTO_REPORT_TIMEOUT_MS for restored.
 */
#ifndef CKPTSYNC_PROTOCOL_H
#define CKPTSYNC_PROTOCOL_H

#define CKS_PROTO_MAGIC "CKPTSYNC/1"
#define CKS_PROTO_VERSION 1
#define CKS_PROTO_MAX_REQUEST 65536u
#define CKS_PROTO_MAX_RESPONSE (4u << 20)
#define CKS_PROTO_MAX_TIMEOUT 604800
#define CKS_PROTO_CLIENT_SLACK 30
#define CKS_PROTO_REPORT_TIMEOUT_MS 2000
#define CKS_PROTO_MAX_NODES 4096 /* commit nodes= ([daemon] nodes' limit) */
#define CKS_PROTO_DEFAULT_SOCKET "/var/lib/ckptsync/ckptsyncd.sock"
#define CKS_PROTO_SOCKET_ENV "CKPTSYNC_SOCKET"
/* How a client finds the daemon's socket (the CLI, the C library and the
 * Python module alike), the first that applies:
 *   1. the socket the caller names (cks_client_open's argument, Python's
 *      socket_path=);
 *   2. $CKPTSYNC_SOCKET, when set and not empty;
 *   3. the configuration's [daemon] socket, when it sets one; the
 *      configuration is --config FILE (CLI), else $CKPTSYNC_CONFIG, else
 *      CKS_PROTO_DEFAULT_CONFIG where it exists;
 *   4. STATE/ckptsyncd.sock, STATE being --state DIR (CLI), else
 *      $CKPTSYNC_STATE, else the configuration's [daemon] state, else
 *      /var/lib/ckptsync -- what the daemon itself listens on with that
 *      configuration and state directory. */
#define CKS_PROTO_CONFIG_ENV "CKPTSYNC_CONFIG"
#define CKS_PROTO_STATE_ENV "CKPTSYNC_STATE"
#define CKS_PROTO_DEFAULT_CONFIG "/etc/ckptsync/ckptsync.conf"
#define CKS_PROTO_DEFAULT_STATE "/var/lib/ckptsync"
#define CKS_PROTO_SOCKET_NAME "ckptsyncd.sock"
/* cks_client_open() gives up connecting after this long (a daemon whose
 * listen backlog is full). */
#define CKS_PROTO_CONNECT_TIMEOUT_MS 5000

#endif
