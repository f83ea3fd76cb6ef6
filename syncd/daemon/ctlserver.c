/*
 * ctlserver.c — the control socket: connections, requests, waiters.
 *
 * Design notes.
 * - Everything runs on the daemon's event loop and never blocks it: the
 *   sockets are non-blocking, a request line is bounded (CTL_MAX_REQUEST)
 *   and parsed by engine/ctlproto.c, and a commit or flush that must wait
 *   for durability parks its connection; ctlserver_tick() re-checks the
 *   parked ones whenever the loop turns (the eventfd the ingest and region
 *   threads poke, or the nearest deadline).
 * - Explicit commits go through the detector like every other completion,
 *   so "what is a unit" has one definition; the connection is matched to
 *   the ready unit that contains the committed path (ctlserver_unit_taken),
 *   then to the ingest result of that unit (ctlserver_unit_done).
 * - No client can lock others out: the listen backlog is SOMAXCONN and
 *   each wakeup accepts all of it; a client that sends no request line
 *   within [daemon] control_idle_timeout is closed, and when the table or
 *   the descriptors run out, the connection idle the longest makes room;
 *   with only waiters left, a new client is answered busy instead of being
 *   dropped.
 * - An answer is sent as soon as it is known; the connection is closed
 *   once it is out (one request per connection).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/mstime.h"
#include "engine/ctlproto.h"
#include "daemon/ctlserver.h"
#include "daemon/detect.h"
#include "daemon/ingest.h"
#include "daemon/metrics.h"
#include "store/queue.h"
#include "daemon/replicator.h"
#include "daemon/statusview.h"
#include "service/snapout.h"

#define CONN_MIN 16   /* control connections the daemon always takes */
#define CONN_MAX 4096 /* and at most (conn_limit()) */

enum conn_state { C_READ, C_UNIT, C_INGEST, C_SNAP, C_FLUSH, C_WRITE };

struct conn {
    int fd;
    size_t slot; /* index in ctlserver.conns */
    enum conn_state st;
    struct buf in, out;
    size_t out_off;
    struct ctl_request req;
    char unit[DETECT_UNIT_MAX];       /* C_UNIT: relpath committed */
    uint64_t ticket;                  /* C_INGEST */
    char run[MANIFEST_MAX_FIELD + 1]; /* C_SNAP */
    char id[MANIFEST_ID_MAX + 1];
    int64_t deadline_ms;   /* monotonic; 0 = none */
    int64_t idle_since_ms; /* C_READ: accepted; C_WRITE: last byte sent */
};

struct ctlserver {
    const struct daemon_parts *p;
    int ep, lfd;
    struct conn **conns; /* nconns of cap_conns; at most max_conns */
    size_t nconns, cap_conns, max_conns;
    int sparefd;        /* given up to refuse a client when out of fds */
    bool accept_paused; /* out of fds: lfd unwatched until a close, or 1 s */
    int64_t accept_paused_ms;
    int64_t evict_warn_ms;
};

/* ---- connections ------------------------------------------------------- */

/* Connections live in a table that grows on demand up to max_conns
 * (conn_limit()); swap-removal keeps it dense, so code that may close the
 * connection it looks at walks the table from the end.  A connection is
 * idle while it reads its request or writes its answer: it may spend
 * [daemon] control_idle_timeout seconds in either, and the oldest idle one
 * makes room when the table or the descriptors run out.  A waiter (commit
 * --wait, flush) is not idle: its own deadline bounds it. */

static bool conn_idle(const struct conn *c)
{
    return c->st == C_READ || c->st == C_WRITE;
}

static void accept_resume(struct ctlserver *s)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->lfd};
    if (s->accept_paused && epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &ev) == 0)
        s->accept_paused = false;
}

static void conn_close(struct ctlserver *s, struct conn *c)
{
    size_t i = c->slot;
    s->conns[i] = s->conns[--s->nconns];
    s->conns[i]->slot = i;
    s->conns[s->nconns] = NULL;
    epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    buf_free(&c->in);
    buf_free(&c->out);
    free(c);
    accept_resume(s); /* a descriptor is free again */
}

/* Sends what is left of the answer; closes the connection once it is all
 * sent (or the peer is gone), else waits for EPOLLOUT. */
static void conn_write(struct ctlserver *s, struct conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
            epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
            return;
        }
        if (n < 0)
            break;
        c->out_off += (size_t)n;
        c->idle_since_ms = mstime_mono();
    }
    conn_close(s, c);
}

/* Answers and, most often, closes c at once: callers do not touch c after. */
static void conn_reply(struct ctlserver *s, struct conn *c, const char *json, const char *code,
                       const char *msg)
{
    buf_reset(&c->out);
    if (json)
        ctl_response_ok(&c->out, json);
    else
        ctl_response_err(&c->out, code, msg);
    c->out_off = 0;
    c->st = C_WRITE;
    c->idle_since_ms = mstime_mono();
    conn_write(s, c);
}

static void conn_reply_errf(struct ctlserver *s, struct conn *c, const char *code, const char *fmt,
                            ...) __attribute__((format(printf, 4, 5)));
static void conn_reply_errf(struct ctlserver *s, struct conn *c, const char *code, const char *fmt,
                            ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    conn_reply(s, c, NULL, code, msg);
}

/* The busy answer for a client that gets no connection slot; best effort
 * (a line this short fits the socket's buffer), then closed. */
static void conn_refuse(struct ctlserver *s, int fd)
{
    struct buf b = BUF_INIT;
    char msg[160];
    snprintf(msg, sizeof(msg),
             "the daemon is busy: all %zu control connections hold waiting "
             "requests; try again later",
             s->nconns);
    if (ctl_response_err(&b, CTL_ERR_BUSY, msg) == 0 &&
        send(fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        log_debug("control socket: busy answer: %s", strerror(errno));
    buf_free(&b);
    close(fd);
}

/* Closes the connection idle the longest, telling it why.  false when no
 * connection is idle (every one is a waiter). */
static bool conn_evict(struct ctlserver *s)
{
    struct conn *old = NULL;
    for (size_t i = 0; i < s->nconns; i++)
        if (conn_idle(s->conns[i]) && (!old || s->conns[i]->idle_since_ms < old->idle_since_ms))
            old = s->conns[i];
    if (!old)
        return false;
    int64_t now = mstime_mono();
    if (now >= s->evict_warn_ms) {
        log_warn("control socket: %zu connections, the most this daemon takes now; closing the "
                 "ones idle longest to make room",
                 s->nconns);
        s->evict_warn_ms = now + 60000;
    }
    if (old->st == C_READ)
        conn_reply(s, old, NULL, CTL_ERR_BUSY,
                   "the daemon is busy: too many control connections; "
                   "closing this idle one");
    else
        conn_close(s, old);
    return true;
}

static int conn_add(struct ctlserver *s, int fd)
{
    if (s->nconns == s->cap_conns) {
        size_t cap = s->cap_conns ? s->cap_conns * 2 : 64;
        struct conn **nc = realloc(s->conns, cap * sizeof(*nc));
        if (!nc)
            return -ENOMEM;
        s->conns = nc;
        s->cap_conns = cap;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->fd = fd;
    c->slot = s->nconns;
    c->idle_since_ms = mstime_mono();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        free(c);
        return -errno;
    }
    s->conns[s->nconns++] = c;
    return 0;
}

/* Out of descriptors with nothing idle to close: the spare descriptor is
 * given up for a moment to accept one client and tell it so, rather than
 * leave it queued (the listening socket would also stay readable, and the
 * loop spin).  Without a spare, accepting pauses until a connection ends. */
static void accept_refuse(struct ctlserver *s)
{
    int fd = -1;
    if (s->sparefd >= 0) {
        close(s->sparefd);
        fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            conn_refuse(s, fd);
        s->sparefd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
        struct epoll_event ev = {.events = 0, .data.ptr = &s->lfd};
        epoll_ctl(s->ep, EPOLL_CTL_MOD, s->lfd, &ev);
        s->accept_paused = true;
        s->accept_paused_ms = mstime_mono();
        log_warn("control socket: out of file descriptors; not accepting for a second");
    }
}

/* Takes every client waiting in the backlog. */
static void srv_accept(struct ctlserver *s)
{
    while (!s->accept_paused) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            if (!conn_evict(s))
                accept_refuse(s);
            continue;
        }
        if (fd < 0)
            return; /* EAGAIN: the backlog is empty */
        if (s->nconns >= s->max_conns && !conn_evict(s)) {
            conn_refuse(s, fd);
            continue;
        }
        if (conn_add(s, fd) < 0) {
            log_warn("control socket: no memory for a connection; closing it");
            close(fd);
        }
    }
}

/* Connections at most: half the descriptors the daemon may open, so that
 * clients cannot take the ones region uploads need, within CONN_MIN and
 * CONN_MAX. */
static size_t conn_limit(void)
{
    struct rlimit rl;
    size_t n = CONN_MAX;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 2 < n)
        n = (size_t)(rl.rlim_cur / 2);
    return n < CONN_MIN ? CONN_MIN : n;
}

/* ---- waiting ----------------------------------------------------------- */

static unsigned need_regions(const struct ctlserver *s, enum ctl_wait w)
{
    return w == CTL_WAIT_REPLICATED ? (unsigned)repo_nregions(s->p->r)
           : w == CTL_WAIT_DURABLE  ? s->p->conf->quorum
                                    : 0;
}

/* Once the index is fatal (store/index.h) a request or a waiter is told
 * so at once, rather than waiting for work that will not be done; true
 * when c was answered (it may be closed then). */
static bool reply_if_fatal(struct ctlserver *s, struct conn *c)
{
    char why[INDEX_FATAL_WHY];
    if (!index_fatal(repo_index(s->p->r), why, sizeof(why), NULL))
        return false;
    conn_reply_errf(s, c, CTL_ERR_DEGRADED,
                    "the daemon is degraded (%s) and takes no new work; "
                    "restart it after fixing the disk",
                    why);
    return true;
}

static void reply_snap(struct ctlserver *s, struct conn *c, unsigned k)
{
    struct snapout o = {.id = c->id,
                        .run = c->run,
                        .committed = k,
                        .durable = k >= s->p->conf->quorum,
                        .replicated = k == repo_nregions(s->p->r)};
    struct buf b = BUF_INIT;
    struct json j;
    json_init(&j, &b);
    snapout_json(&j, &o, SNAPOUT_COMMIT);
    conn_reply(s, c, buf_str(&b), NULL, NULL);
    buf_free(&b);
}

/* Regions that committed run/id, or -errno. */
static int snap_committed(struct ctlserver *s, const char *run, const char *id)
{
    struct index_txn *t;
    struct index_snap snap;
    int e = index_txn_begin(repo_index(s->p->r), false, &t);
    if (e < 0)
        return e;
    e = index_snap_get(t, run, id, &snap);
    index_txn_abort(t);
    return e < 0 ? e : __builtin_popcount(snap.committed & replicator_all_slots(s->p->rp));
}

static void check_snap_waiter(struct ctlserver *s, struct conn *c, int64_t now)
{
    int k = snap_committed(s, c->run, c->id);
    if (k == -ENOENT && c->unit[0]) { /* dropped (replicator.c, rw_drop) or forgotten */
        conn_reply_errf(s, c, CTL_ERR_INTERNAL,
                        "snapshot %s of \"%s\" was dropped before it was committed in enough "
                        "regions (a file of it changed or went away after it was read, or it "
                        "was forgotten); the daemon takes the unit again: commit it again to "
                        "wait for that snapshot",
                        c->id, c->unit);
        return;
    }
    if (k < 0) {
        conn_reply_errf(s, c, CTL_ERR_INTERNAL, "snapshot %s: %s", c->id, err_str(k));
        return;
    }
    if ((unsigned)k >= need_regions(s, c->req.wait))
        reply_snap(s, c, (unsigned)k);
    else if (reply_if_fatal(s, c))
        return;
    else if (c->deadline_ms && now >= c->deadline_ms)
        conn_reply_errf(s, c, CTL_ERR_TIMEOUT, "snapshot %s is committed in %d of %zu regions: %s",
                        c->id, k, repo_nregions(s->p->r),
                        (unsigned)k >= s->p->conf->quorum ? "durable, not replicated"
                                                          : "NOT durable yet");
}

struct flush_acc {
    struct ctlserver *s;
    unsigned need;
    bool ok;
    char worst[MANIFEST_ID_MAX + 1];
};

static int flush_cb(void *ud, const struct pending *p)
{
    struct flush_acc *a = ud;
    int k = snap_committed(a->s, p->run, p->id);
    if (k < 0 || (unsigned)k < a->need) {
        a->ok = false;
        snprintf(a->worst, sizeof(a->worst), "%s", p->id);
        return 1;
    }
    return 0;
}

static void check_flush_waiter(struct ctlserver *s, struct conn *c, int64_t now)
{
    struct flush_acc a = {s, need_regions(s, c->req.wait), true, ""};
    struct index_txn *t;
    bool idle = ingester_busy(s->p->ig) == 0 && detector_pending(s->p->det) == 0;
    if (idle && a.need > 0 && index_txn_begin(repo_index(s->p->r), false, &t) == 0) {
        queue_pending_foreach(t, flush_cb, &a);
        index_txn_abort(t);
    }
    if (idle && a.ok) {
        conn_reply(s, c, "{\"flushed\":true}", NULL, NULL);
    } else if (reply_if_fatal(s, c)) {
        return;
    } else if (c->deadline_ms && now >= c->deadline_ms) {
        if (!idle)
            conn_reply_errf(s, c, CTL_ERR_TIMEOUT,
                            "deadline passed: %zu units are still being "
                            "taken",
                            detector_pending(s->p->det) + ingester_busy(s->p->ig));
        else
            conn_reply_errf(s, c, CTL_ERR_TIMEOUT,
                            "deadline passed: snapshot %s has not reached "
                            "the requested regions",
                            a.worst);
    }
}

/* A client that sent no complete request line in time is told so; one
 * that does not read its answer is dropped. */
static void check_idle(struct ctlserver *s, struct conn *c, int64_t now)
{
    if (now - c->idle_since_ms < (int64_t)s->p->conf->control_idle_timeout * 1000)
        return;
    if (c->st == C_READ)
        conn_reply_errf(s, c, CTL_ERR_BADREQUEST, "no complete request line within %u s; closing",
                        s->p->conf->control_idle_timeout);
    else
        conn_close(s, c);
}

void ctlserver_tick(struct ctlserver *s)
{
    if (!s)
        return;
    int64_t now = mstime_mono();
    if (s->accept_paused && now >= s->accept_paused_ms + 1000)
        accept_resume(s);
    for (size_t i = s->nconns; i-- > 0;) { /* from the end: a reply may close c */
        struct conn *c = s->conns[i];
        if (conn_idle(c))
            check_idle(s, c, now);
        else if (c->st == C_SNAP)
            check_snap_waiter(s, c, now);
        else if (c->st == C_FLUSH)
            check_flush_waiter(s, c, now);
        else if ((c->st == C_INGEST || c->st == C_UNIT) && !reply_if_fatal(s, c) &&
                 c->deadline_ms && now >= c->deadline_ms)
            conn_reply_errf(s, c, CTL_ERR_TIMEOUT, "the snapshot of \"%s\" is still being taken",
                            c->req.path);
    }
}

static bool unit_contains(const char *unit, const char *rel)
{
    size_t n = strlen(unit);
    return !strncmp(unit, rel, n) && (rel[n] == 0 || rel[n] == '/');
}

/* ---- requests ---------------------------------------------------------- */

/* A commit that names its node (nodes=, node_rank=) must name this
 * daemon's: a node whose daemon was not told it is one of several would
 * otherwise publish its part as a lone snapshot, or under another rank.
 * Replies and returns false when it does not. */
static bool commit_node_ok(struct ctlserver *s, struct conn *c)
{
    unsigned nodes = config_nodes(s->p->conf), rank = s->p->conf->node_rank;
    if (c->req.nodes < 0 || (c->req.nodes == nodes && c->req.node_rank == rank))
        return true;
    conn_reply_errf(s, c, CTL_ERR_WRONGNODE,
                    "this daemon is node %u of %u; the commit says node %lld of %lld: "
                    "set [daemon] nodes = %lld and node_rank = %lld, or "
                    "CKPTSYNC_NODES/CKPTSYNC_NODE_RANK, in the daemon's environment "
                    "(or fix the node rank and count given with the commit of \"%s\")",
                    rank, nodes, (long long)c->req.node_rank, (long long)c->req.nodes,
                    (long long)c->req.nodes, (long long)c->req.node_rank, c->req.path);
    return false;
}

static void req_commit(struct ctlserver *s, struct conn *c)
{
    char real[PATH_MAX];
    size_t rl = strlen(s->p->root);
    if (reply_if_fatal(s, c) || !commit_node_ok(s, c))
        return;
    if (!realpath(c->req.path, real)) {
        conn_reply_errf(s, c, CTL_ERR_NOTFOUND, "\"%s\": %s", c->req.path, strerror(errno));
        return;
    }
    if (!strcmp(real, s->p->root)) {
        conn_reply_errf(s, c, CTL_ERR_NOTWATCHED,
                        "\"%s\" is the watch root itself: commit a checkpoint under it "
                        "(ROOT/RUN/checkpoint-N, or ROOT/checkpoint-N)",
                        c->req.path);
        return;
    }
    if (strncmp(real, s->p->root, rl) != 0 || real[rl] != '/') {
        conn_reply_errf(s, c, CTL_ERR_NOTWATCHED,
                        "\"%s\" is not under the watch root \"%s\": the daemon snapshots only "
                        "what is there",
                        c->req.path, s->p->root);
        return;
    }
    /* The run is the first component under the root, and becomes a key in
     * every region: one that cannot be stored is refused now, with the
     * reason, rather than skipped by ingest while the caller waits. */
    char run[MANIFEST_MAX_FIELD + 2];
    const char *rel = real + rl + 1;
    size_t runlen = strcspn(rel, "/");
    snprintf(run, sizeof(run), "%.*s", (int)(runlen < sizeof(run) - 1 ? runlen : sizeof(run) - 1),
             rel);
    if (runlen >= sizeof(run) - 1 || manifest_run_check(run) < 0) {
        conn_reply_errf(s, c, CTL_ERR_BADREQUEST,
                        "\"%s\": the run directory name \"%.64s\" cannot be "
                        "stored: use 1-256 characters from [A-Za-z0-9._-], not . or ..",
                        c->req.path, run);
        return;
    }
    int e = detector_commit(s->p->det, rel, c->req.step, mstime_mono());
    if (e < 0) {
        conn_reply_errf(s, c, CTL_ERR_BADREQUEST,
                        "\"%s\": not a checkpoint under a run directory: %s", c->req.path,
                        strerror(-e));
        return;
    }
    snprintf(c->unit, sizeof(c->unit), "%s", real + rl + 1);
    c->st = C_UNIT;
    if (c->req.timeout >= 0)
        c->deadline_ms = mstime_mono() + c->req.timeout * 1000;
}

static void req_dispatch(struct ctlserver *s, struct conn *c)
{
    struct buf b = BUF_INIT;
    switch (c->req.verb) {
    case CTL_PING:
        conn_reply(s, c, "{\"pong\":true,\"version\":\"" CKS_VERSION "\"}", NULL, NULL);
        break;
    case CTL_STATUS:
        if (statusview_json(s->p, &b) == 0)
            conn_reply(s, c, buf_str(&b), NULL, NULL);
        else
            conn_reply(s, c, NULL, CTL_ERR_INTERNAL, "reading the index failed");
        break;
    case CTL_COMMIT:
        req_commit(s, c);
        break;
    case CTL_FLUSH:
        detector_flush(s->p->det, mstime_mono());
        c->st = C_FLUSH;
        if (c->req.timeout >= 0)
            c->deadline_ms = mstime_mono() + c->req.timeout * 1000;
        break;
    case CTL_RETRY:
        if (replicator_retry(s->p->rp, c->req.region) < 0)
            conn_reply_errf(s, c, CTL_ERR_NOTFOUND, "no region named '%s'", c->req.region);
        else
            conn_reply(s, c, "{\"retry\":true}", NULL, NULL);
        break;
    case CTL_RESTORED: /* counted even when degraded: restores still work then */
        metrics_restore(s->p->m, c->req.result == CTL_RESULT_OK, (uint64_t)c->req.bytes,
                        (uint64_t)c->req.files, (uint64_t)c->req.usec);
        conn_reply(s, c, "{\"recorded\":true}", NULL, NULL);
        break;
    }
    buf_free(&b);
}

static void conn_read(struct ctlserver *s, struct conn *c)
{
    char tmp[4096];
    ssize_t n = read(c->fd, tmp, sizeof(tmp));
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            conn_close(s, c); /* a waiter that hangs up stops waiting */
        return;
    }
    if (c->st != C_READ)
        return; /* one request per connection; extra bytes are ignored */
    buf_append(&c->in, tmp, (size_t)n);
    char *nl = memchr(c->in.data, '\n', c->in.len);
    if (!nl && c->in.len < CTL_MAX_REQUEST)
        return;
    struct buf err = BUF_INIT;
    size_t len = nl ? (size_t)(nl - (char *)c->in.data) + 1 : c->in.len;
    if (ctl_request_parse((const char *)c->in.data, len, &c->req, &err) < 0)
        conn_reply(s, c, NULL, CTL_ERR_BADREQUEST, buf_str(&err));
    else
        req_dispatch(s, c);
    buf_free(&err);
}

/* ---- units, as the loop hands them to ingest --------------------------- */

void ctlserver_unit_taken(struct ctlserver *s, const char *unit, uint64_t ticket)
{
    for (size_t i = 0; s && i < s->nconns; i++) {
        struct conn *c = s->conns[i];
        if (c->st == C_UNIT && unit_contains(unit, c->unit)) {
            c->st = C_INGEST;
            c->ticket = ticket;
        }
    }
}

void ctlserver_unit_done(struct ctlserver *s, const struct ingest_done *done)
{
    for (size_t i = s ? s->nconns : 0; i-- > 0;) { /* from the end: a reply may close c */
        struct conn *c = s->conns[i];
        if (c->st != C_INGEST || c->ticket != done->ticket)
            continue;
        if (done->err < 0) {
            conn_reply_errf(s, c, done->err == CKS_E_FATAL ? CTL_ERR_DEGRADED : CTL_ERR_INTERNAL,
                            "snapshot of \"%s\" failed: %s", done->unit, done->msg);
            continue;
        }
        snprintf(c->run, sizeof(c->run), "%s", done->run);
        snprintf(c->id, sizeof(c->id), "%s", done->id);
        c->st = C_SNAP;
    }
}

/* ---- the server -------------------------------------------------------- */

static int srv_listen(struct ctlserver *s)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *path = s->p->conf->socket;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_error("control socket path \"%s\" is too long", path);
        return -ENAMETOOLONG;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    unlink(path); /* stale: the state lock says no other daemon owns it */
    s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t old = umask(077);
    int e = s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
                    listen(s->lfd, SOMAXCONN) < 0
                ? -errno
                : 0;
    umask(old);
    if (e < 0)
        log_error("control socket \"%s\": %s", path, strerror(-e));
    return e;
}

int ctlserver_new(const struct daemon_parts *parts, int ep, struct ctlserver **ret)
{
    struct ctlserver *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->p = parts;
    s->ep = ep;
    s->lfd = s->sparefd = -1;
    s->max_conns = conn_limit();
    int e = srv_listen(s);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->lfd};
    if (e == 0 && epoll_ctl(ep, EPOLL_CTL_ADD, s->lfd, &ev) < 0)
        e = -errno;
    if (e < 0) {
        ctlserver_free(s);
        return e;
    }
    s->sparefd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    *ret = s;
    return 0;
}

void ctlserver_free(struct ctlserver *s)
{
    if (!s)
        return;
    while (s->nconns)
        conn_close(s, s->conns[s->nconns - 1]);
    free(s->conns);
    if (s->sparefd >= 0)
        close(s->sparefd);
    if (s->lfd >= 0) {
        epoll_ctl(s->ep, EPOLL_CTL_DEL, s->lfd, NULL);
        close(s->lfd);
        unlink(s->p->conf->socket);
    }
    free(s);
}

bool ctlserver_event(struct ctlserver *s, void *tag)
{
    if (!s)
        return false;
    if (tag == &s->lfd) {
        srv_accept(s);
        return true;
    }
    for (size_t i = 0; i < s->nconns; i++) {
        struct conn *c = s->conns[i];
        if (c != tag)
            continue;
        if (c->st == C_WRITE)
            conn_write(s, c);
        else
            conn_read(s, c);
        return true;
    }
    return false;
}

int64_t ctlserver_deadline(const struct ctlserver *s)
{
    int64_t t = -1;
    int64_t idle_ms = s ? (int64_t)s->p->conf->control_idle_timeout * 1000 : 0;
    if (s && s->accept_paused)
        t = s->accept_paused_ms + 1000;
    for (size_t i = 0; s && i < s->nconns; i++) {
        const struct conn *c = s->conns[i];
        int64_t ct = conn_idle(c) ? c->idle_since_ms + idle_ms : c->deadline_ms;
        if (ct && (t < 0 || ct < t))
            t = ct;
    }
    return t;
}
