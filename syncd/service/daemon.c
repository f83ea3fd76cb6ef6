/*
 * daemon.c — the event loop of ckptsyncd.
 *
 * Design notes.
 * - One epoll loop owns everything that is not a byte-moving thread:
 *   signals (signalfd), the inotify watcher, the control socket and its
 *   connections, and an eventfd the ingest and region threads poke when
 *   something changed.  Its timeout is the detector's next deadline, the
 *   nearest waiter deadline, or one second.
 * - A control request never blocks the loop: a commit that must wait for
 *   durability parks its connection, and the loop re-checks parked
 *   connections whenever the eventfd fires.  Each request line is bounded
 *   (CTL_MAX_REQUEST) and parsed by engine/ctlproto.c.
 * - No client can lock others out of the socket: the listen backlog is
 *   SOMAXCONN and each wakeup accepts all of it; a client that sends no
 *   request line within [daemon] control_idle_timeout is closed, and when
 *   the connection table or the descriptors run out, the connection idle
 *   the longest makes room; with only waiters left, a new client is
 *   answered busy instead of being dropped.
 * - /metrics (service/metrics.c) is served from the same loop: its
 *   listening socket and connections are in the same epoll set, and a
 *   scrape reads the index in one read transaction, like a status request.
 * - Explicit commits go through the detector like every other completion,
 *   so "what is a unit" has one definition; the connection is matched to
 *   the ready unit that contains the committed path.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/json.h"
#include "base/log.h"
#include "engine/ctlproto.h"
#include "engine/ref.h"
#include "service/daemon.h"
#include "service/detect.h"
#include "service/gcd.h"
#include "service/ingest.h"
#include "service/metrics.h"
#include "service/pin.h"
#include "service/queue.h"
#include "service/replicator.h"
#include "service/watcher.h"

#define CONN_MIN 16        /* control connections the daemon always takes */
#define CONN_MAX 4096      /* and at most (conn_limit()) */
#define TEXTFILE_INTERVAL_MS 10000

enum conn_state { C_READ, C_UNIT, C_INGEST, C_SNAP, C_FLUSH, C_WRITE };

struct conn {
    int fd;
    size_t slot;                         /* index in dmn.conns */
    enum conn_state st;
    struct buf in, out;
    size_t out_off;
    struct ctl_request req;
    char unit[DETECT_UNIT_MAX];          /* C_UNIT: relpath committed */
    uint64_t ticket;                     /* C_INGEST */
    char run[MANIFEST_MAX_FIELD + 1];    /* C_SNAP */
    char id[MANIFEST_ID_MAX + 1];
    int64_t deadline_ms;                 /* monotonic; 0 = none */
    int64_t idle_since_ms;               /* C_READ: accepted; C_WRITE: last byte sent */
};

struct dmn {
    struct config conf;
    const char *config_path;
    char **argv;
    char root[PATH_MAX];
    struct repo *r;
    struct replicator *rp;
    struct ingester *ig;
    struct gcd *gcd;                     /* retention and scheduled prune, or NULL */
    struct metrics *m;                   /* counters the threads update */
    struct metrics_server *ms;           /* GET /metrics, or NULL ([daemon] metrics off) */
    int64_t textfile_due_ms;             /* monotonic: next [daemon] metrics_textfile write */
    bool textfile_failing;
    struct watcher *w;
    struct detector *det;
    int ep, sigfd, lfd, evfd, lockfd;
    struct conn **conns;                 /* nconns of cap_conns; at most max_conns */
    size_t nconns, cap_conns, max_conns;
    int sparefd;                         /* given up to refuse a client when out of fds */
    bool accept_paused;                  /* out of fds: lfd unwatched until a close, or 1 s */
    int64_t accept_paused_ms;
    int64_t evict_warn_ms;
    uint64_t next_ticket;
    bool stop, reexec;
    int64_t started_ms, started_wall_ms;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- systemd notification (the datagram protocol of sd_notify) -------- */

static void notify_systemd(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!path || !path[0] || strlen(path) >= sizeof(sa.sun_path))
        return;
    memcpy(sa.sun_path, path, strlen(path));
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = 0; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
        log_debug("sd_notify: %s", strerror(errno));
    close(fd);
}

/* ---- connections ------------------------------------------------------- */

/* Connections live in a table that grows on demand up to d->max_conns
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

static void accept_resume(struct dmn *d)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &d->lfd};
    if (d->accept_paused && epoll_ctl(d->ep, EPOLL_CTL_MOD, d->lfd, &ev) == 0)
        d->accept_paused = false;
}

static void conn_close(struct dmn *d, struct conn *c)
{
    size_t i = c->slot;
    d->conns[i] = d->conns[--d->nconns];
    d->conns[i]->slot = i;
    d->conns[d->nconns] = NULL;
    epoll_ctl(d->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    buf_free(&c->in);
    buf_free(&c->out);
    free(c);
    accept_resume(d); /* a descriptor is free again */
}

/* Sends what is left of the answer; closes the connection once it is all
 * sent (or the peer is gone), else waits for EPOLLOUT. */
static void conn_write(struct dmn *d, struct conn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
            epoll_ctl(d->ep, EPOLL_CTL_MOD, c->fd, &ev);
            return;
        }
        if (n < 0)
            break;
        c->out_off += (size_t)n;
        c->idle_since_ms = mono_ms();
    }
    conn_close(d, c);
}

/* Answers and, most often, closes c at once: callers do not touch c after. */
static void conn_reply(struct dmn *d, struct conn *c, const char *json, const char *code,
                       const char *msg)
{
    buf_reset(&c->out);
    if (json)
        ctl_response_ok(&c->out, json);
    else
        ctl_response_err(&c->out, code, msg);
    c->out_off = 0;
    c->st = C_WRITE;
    c->idle_since_ms = mono_ms();
    conn_write(d, c);
}

static void conn_reply_errf(struct dmn *d, struct conn *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void conn_reply_errf(struct dmn *d, struct conn *c, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    conn_reply(d, c, NULL, code, msg);
}

/* The busy answer for a client that gets no connection slot; best effort
 * (a line this short fits the socket's buffer), then closed. */
static void conn_refuse(struct dmn *d, int fd)
{
    struct buf b = BUF_INIT;
    char msg[160];
    snprintf(msg, sizeof(msg), "the daemon is busy: all %zu control connections hold waiting "
             "requests; try again later", d->nconns);
    if (ctl_response_err(&b, CTL_ERR_BUSY, msg) == 0 &&
        send(fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        log_debug("control socket: busy answer: %s", strerror(errno));
    buf_free(&b);
    close(fd);
}

/* Closes the connection idle the longest, telling it why.  false when no
 * connection is idle (every one is a waiter). */
static bool conn_evict(struct dmn *d)
{
    struct conn *old = NULL;
    for (size_t i = 0; i < d->nconns; i++)
        if (conn_idle(d->conns[i]) && (!old || d->conns[i]->idle_since_ms < old->idle_since_ms))
            old = d->conns[i];
    if (!old)
        return false;
    int64_t now = mono_ms();
    if (now >= d->evict_warn_ms) {
        log_warn("control socket: %zu connections, the most this daemon takes now; closing the "
                 "ones idle longest to make room", d->nconns);
        d->evict_warn_ms = now + 60000;
    }
    if (old->st == C_READ)
        conn_reply(d, old, NULL, CTL_ERR_BUSY, "the daemon is busy: too many control connections; "
                   "closing this idle one");
    else
        conn_close(d, old);
    return true;
}

static int conn_add(struct dmn *d, int fd)
{
    if (d->nconns == d->cap_conns) {
        size_t cap = d->cap_conns ? d->cap_conns * 2 : 64;
        struct conn **nc = realloc(d->conns, cap * sizeof(*nc));
        if (!nc)
            return -ENOMEM;
        d->conns = nc;
        d->cap_conns = cap;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->fd = fd;
    c->slot = d->nconns;
    c->idle_since_ms = mono_ms();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(d->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        free(c);
        return -errno;
    }
    d->conns[d->nconns++] = c;
    return 0;
}

/* Out of descriptors with nothing idle to close: the spare descriptor is
 * given up for a moment to accept one client and tell it so, rather than
 * leave it queued (the listening socket would also stay readable, and the
 * loop spin).  Without a spare, accepting pauses until a connection ends. */
static void accept_refuse(struct dmn *d)
{
    int fd = -1;
    if (d->sparefd >= 0) {
        close(d->sparefd);
        fd = accept4(d->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            conn_refuse(d, fd);
        d->sparefd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
        struct epoll_event ev = {.events = 0, .data.ptr = &d->lfd};
        epoll_ctl(d->ep, EPOLL_CTL_MOD, d->lfd, &ev);
        d->accept_paused = true;
        d->accept_paused_ms = mono_ms();
        log_warn("control socket: out of file descriptors; not accepting for a second");
    }
}

/* Takes every client waiting in the backlog. */
static void dmn_accept(struct dmn *d)
{
    while (!d->accept_paused) {
        int fd = accept4(d->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            if (!conn_evict(d))
                accept_refuse(d);
            continue;
        }
        if (fd < 0)
            return; /* EAGAIN: the backlog is empty */
        if (d->nconns >= d->max_conns && !conn_evict(d)) {
            conn_refuse(d, fd);
            continue;
        }
        if (conn_add(d, fd) < 0) {
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

/* ---- what status and /metrics show ------------------------------------ */

static const char *const region_states[] = {"ok", "backoff", "failed"};

/* One run: its latest snapshot (in the order of the latest ref) and its
 * newest durable one.  status_json and the metrics both read runs this way. */
struct run_view {
    char run[MANIFEST_MAX_FIELD + 1];
    char id[MANIFEST_ID_MAX + 1];
    struct index_snap s;
    char durable_id[MANIFEST_ID_MAX + 1];
    struct index_snap ds;
    bool have_durable;
    uint64_t snapshots;
};

struct run_scan {
    const struct dmn *d;
    void (*emit)(struct run_scan *a, const struct run_view *v);
    void *ud;
    struct run_view v;
    bool have;
};

static unsigned snap_regions(const struct dmn *d, uint32_t committed)
{
    return (unsigned)__builtin_popcount(committed & replicator_all_slots(d->rp));
}

static const char *snap_state(const struct dmn *d, uint32_t committed, unsigned *ret_k)
{
    unsigned k = snap_regions(d, committed);
    *ret_k = k;
    if (k == d->r->nregions)
        return "replicated";
    if (k >= d->conf.quorum)
        return "durable";
    return k ? "uploading" : "queued";
}

/* Is (id, s) newer than (cur_id, cur) in the latest ref's order? */
static bool snap_newer(const char *id, const struct index_snap *s, const char *cur_id,
                       const struct index_snap *cur)
{
    struct ref cand, old;
    snprintf(cand.id, sizeof(cand.id), "%s", id);
    cand.step = s->step;
    snprintf(old.id, sizeof(old.id), "%s", cur_id);
    old.step = cur->step;
    return ref_newer(&cand, &old);
}

static int run_scan_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct run_scan *a = ud;
    struct run_view *v = &a->v;
    bool same = a->have && !strcmp(v->run, run);
    if (a->have && !same)
        a->emit(a, v);
    if (!same) {
        memset(v, 0, sizeof(*v));
        snprintf(v->run, sizeof(v->run), "%s", run);
        a->have = true;
    }
    if (!v->snapshots++ || snap_newer(id, s, v->id, &v->s)) {
        snprintf(v->id, sizeof(v->id), "%s", id);
        v->s = *s;
    }
    if (snap_regions(a->d, s->committed) >= a->d->conf.quorum &&
        (!v->have_durable || snap_newer(id, s, v->durable_id, &v->ds))) {
        snprintf(v->durable_id, sizeof(v->durable_id), "%s", id);
        v->ds = *s;
        v->have_durable = true;
    }
    return 0;
}

/* Calls emit once per run, in key order. */
static int runs_foreach(const struct dmn *d, struct index_txn *t,
                        void (*emit)(struct run_scan *, const struct run_view *), void *ud)
{
    struct run_scan a = {.d = d, .emit = emit, .ud = ud};
    int e = index_snap_foreach(t, NULL, run_scan_cb, &a);
    if (e >= 0 && a.have)
        emit(&a, &a.v);
    return e;
}

/* Region i's queue: chunks, bytes, and the age of its oldest pending
 * snapshot (the replication lag). */
struct region_view {
    struct region_status st;
    uint64_t chunks, bytes;
    double lag;
};

static void region_view(struct dmn *d, struct index_txn *t, size_t i, struct region_view *v)
{
    uint64_t oldest = 0;
    struct pending p;
    memset(v, 0, sizeof(*v));
    replicator_status(d->rp, i, &v->st);
    queue_stats(t, d->r->regions[i]->slot, &v->chunks, &v->bytes, &oldest);
    if (oldest && queue_pending_get(t, oldest, &p) == 0)
        v->lag = (double)(wall_ms() - p.created_ms) / 1000.0;
}

static int count_cb(void *ud, const struct pending *p)
{
    (void)p;
    ++*(size_t *)ud;
    return 0;
}

static size_t pending_snapshots(struct index_txn *t)
{
    size_t n = 0;
    queue_pending_foreach(t, count_cb, &n);
    return n;
}

/* ---- status ------------------------------------------------------------ */

struct pct_acc {
    const char *run, *id;
    unsigned nslots;
    struct index_txn *t;
    double pct;
};

static int pct_cb(void *ud, const struct pending *p)
{
    struct pct_acc *a = ud;
    uint64_t left = 0;
    if (strcmp(p->run, a->run) || strcmp(p->id, a->id))
        return 0;
    if (p->queued_bytes && queue_seq_bytes(a->t, p->seq, a->nslots, &left) == 0)
        a->pct = 100.0 * (double)(p->queued_bytes - (left < p->queued_bytes ? left : p->queued_bytes)) /
                 (double)p->queued_bytes;
    return 1;
}

/* How much of the snapshot's queued upload is done, over all regions. */
static double upload_percent(const struct dmn *d, struct index_txn *t, const struct run_view *v)
{
    struct pct_acc pa = {v->run, v->id, 0, t, 100.0};
    for (size_t i = 0; i < d->r->nregions; i++)
        if (d->r->regions[i]->slot + 1 > pa.nslots)
            pa.nslots = d->r->regions[i]->slot + 1;
    queue_pending_foreach(t, pct_cb, &pa);
    return pa.pct;
}

struct status_acc {
    struct json *j;
    struct index_txn *t;
};

static void json_time_ms(struct json *j, int64_t ms)
{
    if (ms > 0)
        json_double(j, (double)ms / 1000.0);
    else
        json_null(j);
}

static void status_emit_run(struct run_scan *a, const struct run_view *v)
{
    const struct dmn *d = a->d;
    struct status_acc *sa = a->ud;
    struct json *j = sa->j;
    unsigned k;
    json_obj_begin(j);
    json_key(j, "run"); json_str(j, v->run);
    json_key(j, "snapshots"); json_u64(j, v->snapshots);
    json_key(j, "latest");
    json_obj_begin(j);
    json_key(j, "id"); json_str(j, v->id);
    json_key(j, "step"); json_i64(j, v->s.step);
    json_key(j, "time"); json_i64(j, v->s.time);
    json_key(j, "bytes"); json_u64(j, v->s.bytes);
    json_key(j, "files"); json_u64(j, v->s.nfiles);
    json_key(j, "state"); json_str(j, snap_state(d, v->s.committed, &k));
    json_key(j, "regions_committed"); json_u64(j, k);
    json_key(j, "regions"); json_u64(j, d->r->nregions);
    json_key(j, "durable"); json_bool(j, k >= d->conf.quorum);
    json_key(j, "uploaded_percent");
    json_double(j, k == d->r->nregions ? 100.0 : upload_percent(d, sa->t, v));
    json_key(j, "region_states");
    json_obj_begin(j);
    for (size_t i = 0; i < d->r->nregions; i++) {
        json_key(j, d->r->regions[i]->conf.name);
        json_str(j, (v->s.committed >> d->r->regions[i]->slot) & 1 ? "committed" : "pending");
    }
    json_obj_end(j);
    json_obj_end(j);
    json_key(j, "durable_latest");
    if (v->have_durable) {
        json_obj_begin(j);
        json_key(j, "id"); json_str(j, v->durable_id);
        json_key(j, "step"); json_i64(j, v->ds.step);
        json_key(j, "time"); json_i64(j, v->ds.time);
        json_obj_end(j);
    } else {
        json_null(j);
    }
    json_obj_end(j);
}

static void status_region(struct json *j, const struct region *rg, const struct region_view *v,
                          int64_t now_mono)
{
    const struct region_status *st = &v->st;
    bool current = st->last_error[0] && st->state != REGION_OK;
    json_obj_begin(j);
    json_key(j, "name"); json_str(j, rg->conf.name);
    json_key(j, "kind"); json_str(j, rg->ops->kind);
    json_key(j, "state"); json_str(j, region_states[st->state]);
    json_key(j, "pending_chunks"); json_u64(j, v->chunks);
    json_key(j, "pending_bytes"); json_u64(j, v->bytes);
    json_key(j, "lag_seconds"); json_double(j, v->lag);
    json_key(j, "objects_put"); json_u64(j, st->objects_put);
    json_key(j, "bytes_put"); json_u64(j, st->bytes_put);
    json_key(j, "failures"); json_u64(j, st->failures);
    json_key(j, "retry_in_seconds");
    if (st->state == REGION_BACKOFF)
        json_double(j, st->retry_at_ms > now_mono ? (double)(st->retry_at_ms - now_mono) / 1000 : 0);
    else
        json_null(j);
    json_key(j, "last_error");
    if (current)
        json_str(j, st->last_error);
    else
        json_null(j);
    json_key(j, "last_error_time");
    json_time_ms(j, current ? st->last_error_ms : 0);
    json_key(j, "last_failure");
    if (st->last_error[0] && st->last_error_ms) {
        json_obj_begin(j);
        json_key(j, "error"); json_str(j, st->last_error);
        json_key(j, "time"); json_time_ms(j, st->last_error_ms);
        json_obj_end(j);
    } else {
        json_null(j);
    }
    json_key(j, "last_success_time"); json_time_ms(j, st->last_success_ms);
    json_obj_end(j);
}

static void status_regions(struct dmn *d, struct index_txn *t, struct json *j)
{
    uint64_t chunks = 0, bytes = 0;
    double lag = 0;
    json_key(j, "regions");
    json_arr_begin(j);
    for (size_t i = 0; i < d->r->nregions; i++) {
        struct region_view v;
        region_view(d, t, i, &v);
        status_region(j, d->r->regions[i], &v, mono_ms());
        chunks += v.chunks;
        bytes += v.bytes;
        lag = v.lag > lag ? v.lag : lag;
    }
    json_arr_end(j);
    json_key(j, "queue");
    json_obj_begin(j);
    json_key(j, "snapshots"); json_u64(j, pending_snapshots(t));
    json_key(j, "chunks"); json_u64(j, chunks);
    json_key(j, "bytes"); json_u64(j, bytes);
    json_key(j, "lag_seconds"); json_double(j, lag);
    json_obj_end(j);
}

/* An endpoint without "user:password@", should one have been written. */
static void json_endpoint(struct json *j, const char *url)
{
    const char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    size_t hl = strcspn(host, "/");
    const char *at = memchr(host, '@', hl);
    if (!at) {
        json_str(j, url);
        return;
    }
    struct buf b = BUF_INIT;
    buf_printf(&b, "%.*s%s", (int)(host - url), url, at + 1);
    json_str(j, buf_str(&b));
    buf_free(&b);
}

static void json_opt_str(struct json *j, const char *s)
{
    if (s[0])
        json_str(j, s);
    else
        json_null(j);
}

static void status_config_region(struct json *j, const struct region_conf *rc)
{
    json_obj_begin(j);
    json_key(j, "name"); json_str(j, rc->name);
    json_key(j, "kind"); json_str(j, rc->kind == REGION_KIND_S3 ? "s3" : "dir");
    if (rc->kind == REGION_KIND_DIR) {
        json_key(j, "path"); json_str(j, rc->path);
    } else {
        json_key(j, "endpoint"); json_endpoint(j, rc->endpoint);
        json_key(j, "bucket"); json_str(j, rc->bucket);
        json_key(j, "prefix"); json_str(j, rc->prefix);
        json_key(j, "region"); json_str(j, rc->signing_region);
        json_key(j, "addressing"); json_str(j, rc->virtual_hosted ? "virtual" : "path");
        json_key(j, "payload"); json_str(j, rc->unsigned_payload ? "unsigned" : "signed");
        json_key(j, "tls_verify"); json_bool(j, rc->tls_verify);
        json_key(j, "credentials_file"); json_opt_str(j, rc->credentials);
    }
    json_key(j, "connections"); json_u64(j, rc->connections);
    json_key(j, "bandwidth"); json_u64(j, rc->bandwidth);
    json_key(j, "preconditions"); json_str(j, rc->no_preconditions ? "none" : "auto");
    json_obj_end(j);
}

/* What the daemon runs with; never a credential (only the file's path). */
static void status_config(const struct dmn *d, struct json *j)
{
    const struct config *c = &d->conf;
    json_key(j, "config");
    json_obj_begin(j);
    json_key(j, "file"); json_opt_str(j, c->source);
    json_key(j, "watch"); json_str(j, c->watch);
    json_key(j, "state"); json_str(j, c->state);
    json_key(j, "socket"); json_str(j, c->socket);
    json_key(j, "quorum"); json_u64(j, c->quorum);
    json_key(j, "settle"); json_u64(j, c->settle);
    json_key(j, "memory"); json_u64(j, c->memory);
    json_key(j, "chunker");
    json_obj_begin(j);
    json_key(j, "min"); json_u64(j, c->chunk_min);
    json_key(j, "avg"); json_u64(j, c->chunk_avg);
    json_key(j, "max"); json_u64(j, c->chunk_max);
    json_key(j, "normalization"); json_u64(j, c->normalization);
    json_obj_end(j);
    json_key(j, "compress_level"); json_i64(j, c->zstd_level);
    json_key(j, "prune_interval"); json_u64(j, c->prune_interval);
    json_key(j, "metrics"); json_opt_str(j, c->metrics);
    json_key(j, "metrics_textfile"); json_opt_str(j, c->metrics_textfile);
    json_key(j, "control_idle_timeout"); json_u64(j, c->control_idle_timeout);
    json_key(j, "regions");
    json_arr_begin(j);
    for (size_t i = 0; i < c->nregions; i++)
        status_config_region(j, &c->regions[i]);
    json_arr_end(j);
    json_obj_end(j);
}

static void status_degraded(struct dmn *d, struct json *j)
{
    char why[256];
    int64_t since = 0;
    bool deg = replicator_degraded_why(d->rp, &since, why, sizeof(why));
    json_key(j, "degraded"); json_bool(j, deg);
    json_key(j, "degraded_reason");
    if (deg)
        json_str(j, why);
    else
        json_null(j);
    json_key(j, "degraded_time"); json_time_ms(j, deg ? since : 0);
}

static int status_json(struct dmn *d, struct buf *out)
{
    struct index_txn *t;
    struct json j;
    int e = index_txn_begin(d->r->ix, false, &t);
    if (e < 0)
        return e;
    json_init(&j, out);
    json_obj_begin(&j);
    json_key(&j, "version"); json_str(&j, CKS_VERSION);
    json_key(&j, "pid"); json_i64(&j, getpid());
    json_key(&j, "watch"); json_str(&j, d->root);
    json_key(&j, "time"); json_time_ms(&j, wall_ms());
    json_key(&j, "started_time"); json_time_ms(&j, d->started_wall_ms);
    json_key(&j, "uptime_seconds"); json_double(&j, (double)(mono_ms() - d->started_ms) / 1000);
    status_degraded(d, &j);
    json_key(&j, "quorum"); json_u64(&j, d->conf.quorum);
    json_key(&j, "units_pending"); json_u64(&j, detector_pending(d->det));
    json_key(&j, "ingest_busy"); json_u64(&j, ingester_busy(d->ig));
    json_key(&j, "runs");
    json_arr_begin(&j);
    struct status_acc sa = {&j, t};
    e = runs_foreach(d, t, status_emit_run, &sa);
    json_arr_end(&j);
    status_regions(d, t, &j);
    status_config(d, &j);
    json_obj_end(&j);
    index_txn_abort(t);
    return e < 0 ? e : j.err;
}

/* ---- metrics ----------------------------------------------------------- */

struct run_gauges {
    struct run_view *v;
    size_t n, cap;
    int err;
};

static void gauges_emit_run(struct run_scan *a, const struct run_view *v)
{
    struct run_gauges *g = a->ud;
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct run_view *nv = realloc(g->v, cap * sizeof(*nv));
        if (!nv) {
            g->err = -ENOMEM;
            return;
        }
        g->v = nv;
        g->cap = cap;
    }
    g->v[g->n++] = *v;
}

static void metrics_runs(struct dmn *d, const struct run_gauges *g, struct buf *out)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"ckptsync_snapshot_latest_timestamp_seconds", "Time the run's latest snapshot was taken."},
        {"ckptsync_snapshot_latest_step", "Training step of the run's latest snapshot."},
        {"ckptsync_snapshot_latest_regions", "Regions that committed the run's latest snapshot."},
        {"ckptsync_snapshot_durable_timestamp_seconds",
         "Time the run's newest durable snapshot (committed in quorum regions) was taken."},
    };
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        metrics_family(out, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < g->n; i++) {
            const struct run_view *v = &g->v[i];
            struct metrics_label l = {"run", v->run};
            double val = f == 0 ? (double)v->s.time
                       : f == 1 ? (double)v->s.step
                       : f == 2 ? (double)snap_regions(d, v->s.committed)
                                : (double)v->ds.time;
            if (f < 3 || v->have_durable)
                metrics_sample(out, fam[f].name, &l, 1, val);
        }
    }
}

static void metrics_regions(struct dmn *d, struct index_txn *t, struct buf *out)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"ckptsync_queue_chunks", "Chunks queued for the region."},
        {"ckptsync_queue_bytes", "Bytes of the chunks queued for the region (uncompressed)."},
        {"ckptsync_replication_lag_seconds",
         "Age of the oldest snapshot the region has not committed yet; 0 when it is caught up."},
        {"ckptsync_region_healthy", "1 when the region's last round succeeded, 0 in backoff or failed."},
        {"ckptsync_region_consecutive_failures", "Failed rounds since the region's last success."},
    };
    struct region_view v[CONFIG_MAX_REGIONS];
    for (size_t i = 0; i < d->r->nregions; i++)
        region_view(d, t, i, &v[i]);
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        metrics_family(out, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < d->r->nregions; i++) {
            struct metrics_label l = {"region", d->r->regions[i]->conf.name};
            double val = f == 0 ? (double)v[i].chunks
                       : f == 1 ? (double)v[i].bytes
                       : f == 2 ? v[i].lag
                       : f == 3 ? (v[i].st.state == REGION_OK ? 1 : 0)
                                : (double)v[i].st.failures;
            metrics_sample(out, fam[f].name, &l, 1, val);
        }
    }
}

static void metrics_daemon(struct dmn *d, struct index_txn *t, struct buf *out)
{
    metrics_family(out, "ckptsync_start_time_seconds", "gauge", "Time the daemon started.");
    metrics_sample(out, "ckptsync_start_time_seconds", NULL, 0, (double)d->started_wall_ms / 1000);
    metrics_family(out, "ckptsync_degraded", "gauge",
                   "1 after a durability failure: the daemon takes no new work.");
    metrics_sample(out, "ckptsync_degraded", NULL, 0, replicator_degraded(d->rp) ? 1 : 0);
    metrics_family(out, "ckptsync_units_pending", "gauge", "Units waiting to settle or being read.");
    metrics_sample_u64(out, "ckptsync_units_pending", NULL, 0,
                       detector_pending(d->det) + ingester_busy(d->ig));
    metrics_family(out, "ckptsync_snapshots_pending", "gauge",
                   "Snapshots not yet committed in every region.");
    metrics_sample_u64(out, "ckptsync_snapshots_pending", NULL, 0, pending_snapshots(t));
}

/* The whole exposition, for GET /metrics and the textfile. */
static int dmn_metrics(void *ud, struct buf *out)
{
    struct dmn *d = ud;
    struct index_txn *t;
    struct run_gauges g = {0};
    int e = index_txn_begin(d->r->ix, false, &t);
    if (e < 0)
        return e;
    e = runs_foreach(d, t, gauges_emit_run, &g);
    if (e >= 0 && g.err == 0) {
        metrics_counters(d->m, out);
        metrics_daemon(d, t, out);
        metrics_regions(d, t, out);
        metrics_runs(d, &g, out);
    }
    index_txn_abort(t);
    free(g.v);
    return e < 0 ? e : g.err;
}

/* node_exporter's textfile collector: the same text, replaced whole. */
static void dmn_textfile(struct dmn *d)
{
    struct buf b = BUF_INIT;
    int64_t now = mono_ms();
    if (!d->conf.metrics_textfile[0] || now < d->textfile_due_ms)
        return;
    d->textfile_due_ms = now + TEXTFILE_INTERVAL_MS;
    int e = dmn_metrics(d, &b);
    if (e == 0)
        e = fileio_write_atomic(d->conf.metrics_textfile, b.data, b.len, 0644);
    if (e < 0 && !d->textfile_failing)
        log_warn("metrics textfile \"%s\": %s; trying again every %d s", d->conf.metrics_textfile,
                 err_str(e), TEXTFILE_INTERVAL_MS / 1000);
    else if (e == 0 && d->textfile_failing)
        log_info("metrics textfile \"%s\" is written again", d->conf.metrics_textfile);
    d->textfile_failing = e < 0;
    buf_free(&b);
}

/* ---- waiting ----------------------------------------------------------- */

static unsigned need_regions(const struct dmn *d, enum ctl_wait w)
{
    return w == CTL_WAIT_REPLICATED ? (unsigned)d->r->nregions : w == CTL_WAIT_DURABLE ? d->conf.quorum : 0;
}

static void reply_snap(struct dmn *d, struct conn *c, unsigned k)
{
    struct buf b = BUF_INIT;
    struct json j;
    json_init(&j, &b);
    json_obj_begin(&j);
    json_key(&j, "id"); json_str(&j, c->id);
    json_key(&j, "run"); json_str(&j, c->run);
    json_key(&j, "regions_committed"); json_u64(&j, k);
    json_key(&j, "durable"); json_bool(&j, k >= d->conf.quorum);
    json_key(&j, "replicated"); json_bool(&j, k == d->r->nregions);
    json_obj_end(&j);
    conn_reply(d, c, buf_str(&b), NULL, NULL);
    buf_free(&b);
}

/* Regions that committed run/id, or -errno. */
static int snap_committed(struct dmn *d, const char *run, const char *id)
{
    struct index_txn *t;
    struct index_snap s;
    int e = index_txn_begin(d->r->ix, false, &t);
    if (e < 0)
        return e;
    e = index_snap_get(t, run, id, &s);
    index_txn_abort(t);
    return e < 0 ? e : __builtin_popcount(s.committed & replicator_all_slots(d->rp));
}

static void check_snap_waiter(struct dmn *d, struct conn *c, int64_t now)
{
    int k = snap_committed(d, c->run, c->id);
    if (k < 0) {
        conn_reply_errf(d, c, CTL_ERR_INTERNAL, "snapshot %s: %s", c->id, err_str(k));
        return;
    }
    if ((unsigned)k >= need_regions(d, c->req.wait))
        reply_snap(d, c, (unsigned)k);
    else if (c->deadline_ms && now >= c->deadline_ms)
        conn_reply_errf(d, c, CTL_ERR_TIMEOUT,
                        "snapshot %s is committed in %d of %zu regions: %s", c->id, k,
                        d->r->nregions, (unsigned)k >= d->conf.quorum ? "durable, not replicated"
                                                                      : "NOT durable yet");
}

struct flush_acc {
    struct dmn *d;
    unsigned need;
    bool ok;
    char worst[MANIFEST_ID_MAX + 1];
};

static int flush_cb(void *ud, const struct pending *p)
{
    struct flush_acc *a = ud;
    int k = snap_committed(a->d, p->run, p->id);
    if (k < 0 || (unsigned)k < a->need) {
        a->ok = false;
        snprintf(a->worst, sizeof(a->worst), "%s", p->id);
        return 1;
    }
    return 0;
}

static void check_flush_waiter(struct dmn *d, struct conn *c, int64_t now)
{
    struct flush_acc a = {d, need_regions(d, c->req.wait), true, ""};
    struct index_txn *t;
    bool idle = ingester_busy(d->ig) == 0 && detector_pending(d->det) == 0;
    if (idle && a.need > 0 && index_txn_begin(d->r->ix, false, &t) == 0) {
        queue_pending_foreach(t, flush_cb, &a);
        index_txn_abort(t);
    }
    if (idle && a.ok) {
        conn_reply(d, c, "{\"flushed\":true}", NULL, NULL);
    } else if (c->deadline_ms && now >= c->deadline_ms) {
        if (!idle)
            conn_reply_errf(d, c, CTL_ERR_TIMEOUT, "deadline passed: %zu units are still being "
                            "taken", detector_pending(d->det) + ingester_busy(d->ig));
        else
            conn_reply_errf(d, c, CTL_ERR_TIMEOUT, "deadline passed: snapshot %s has not reached "
                            "the requested regions", a.worst);
    }
}

/* A client that sent no complete request line in time is told so; one
 * that does not read its answer is dropped. */
static void check_idle(struct dmn *d, struct conn *c, int64_t now)
{
    if (now - c->idle_since_ms < (int64_t)d->conf.control_idle_timeout * 1000)
        return;
    if (c->st == C_READ)
        conn_reply_errf(d, c, CTL_ERR_BADREQUEST, "no complete request line within %u s; closing",
                        d->conf.control_idle_timeout);
    else
        conn_close(d, c);
}

static void check_waiters(struct dmn *d)
{
    int64_t now = mono_ms();
    if (d->accept_paused && now >= d->accept_paused_ms + 1000)
        accept_resume(d);
    for (size_t i = d->nconns; i-- > 0;) { /* from the end: a reply may close c */
        struct conn *c = d->conns[i];
        if (conn_idle(c))
            check_idle(d, c, now);
        else if (c->st == C_SNAP)
            check_snap_waiter(d, c, now);
        else if (c->st == C_FLUSH)
            check_flush_waiter(d, c, now);
        else if ((c->st == C_INGEST || c->st == C_UNIT) && c->deadline_ms && now >= c->deadline_ms)
            conn_reply_errf(d, c, CTL_ERR_TIMEOUT, "the snapshot of \"%s\" is still being taken",
                            c->req.path);
    }
}

/* ---- units and ingest -------------------------------------------------- */

static bool unit_contains(const char *unit, const char *rel)
{
    size_t n = strlen(unit);
    return !strncmp(unit, rel, n) && (rel[n] == 0 || rel[n] == '/');
}

static void submit_ready(struct dmn *d)
{
    struct detect_ready *rd = malloc(sizeof(*rd));
    struct ingest_job *job = malloc(sizeof(*job));
    if (!rd || !job) {
        free(rd);
        free(job);
        return;
    }
    while (detector_next(d->det, mono_ms(), rd) == 1) {
        memset(job, 0, sizeof(*job));
        job->ticket = ++d->next_ticket;
        job->step = rd->step;
        snprintf(job->run, sizeof(job->run), "%s", rd->run);
        snprintf(job->unit, sizeof(job->unit), "%s", rd->unit);
        if (manifest_run_check(job->run) < 0) {
            log_warn("\"%s\": run name '%s' cannot be stored (use [A-Za-z0-9._-]); skipped",
                     rd->unit, rd->run);
            continue;
        }
        if (ingester_submit(d->ig, job) < 0) {
            log_warn("ingest queue full; \"%s\" will be taken later", rd->unit);
            detector_commit(d->det, rd->unit, rd->step, mono_ms());
            break;
        }
        for (size_t i = 0; i < d->nconns; i++) {
            struct conn *c = d->conns[i];
            if (c->st == C_UNIT && unit_contains(rd->unit, c->unit)) {
                c->st = C_INGEST;
                c->ticket = job->ticket;
            }
        }
    }
    free(rd);
    free(job);
}

static void ingest_done(struct dmn *d)
{
    struct ingest_done *done = malloc(sizeof(*done));
    if (!done)
        return;
    while (ingester_poll(d->ig, done) == 1) {
        for (size_t i = d->nconns; i-- > 0;) { /* from the end: a reply may close c */
            struct conn *c = d->conns[i];
            if (c->st != C_INGEST || c->ticket != done->ticket)
                continue;
            if (done->err < 0) {
                conn_reply_errf(d, c, CTL_ERR_INTERNAL, "snapshot of \"%s\" failed: %s",
                                done->unit, done->msg);
                continue;
            }
            snprintf(c->run, sizeof(c->run), "%s", done->run);
            snprintf(c->id, sizeof(c->id), "%s", done->id);
            c->st = C_SNAP;
        }
    }
    free(done);
}

static void handle_retakes(struct dmn *d)
{
    char (*units)[4096] = malloc(16 * sizeof(*units));
    if (!units)
        return;
    size_t n = replicator_take_retakes(d->rp, units, 16);
    for (size_t i = 0; i < n; i++)
        if (detector_commit(d->det, units[i], -1, mono_ms()) < 0) {
            char f[1024], unit[768];
            snprintf(f, sizeof(f), "event=retake_skipped unit=%s reason=gone",
                     log_quote(unit, sizeof(unit), units[i]));
            log_event(LOG_LVL_WARN, f, "\"%s\" is gone; its dropped snapshot is not taken again",
                      units[i]);
        }
    free(units);
}

/* ---- requests ---------------------------------------------------------- */

static void req_commit(struct dmn *d, struct conn *c)
{
    char real[PATH_MAX];
    size_t rl = strlen(d->root);
    if (replicator_degraded(d->rp)) {
        conn_reply(d, c, NULL, CTL_ERR_DEGRADED, "the daemon is degraded after a durability failure");
        return;
    }
    if (!realpath(c->req.path, real)) {
        conn_reply_errf(d, c, CTL_ERR_NOTFOUND, "\"%s\": %s", c->req.path, strerror(errno));
        return;
    }
    if (strncmp(real, d->root, rl) != 0 || real[rl] != '/') {
        conn_reply_errf(d, c, CTL_ERR_NOTWATCHED, "\"%s\" is not under the watch root \"%s\"",
                        c->req.path, d->root);
        return;
    }
    /* The run is the first component under the root, and becomes a key in
     * every region: one that cannot be stored is refused now, with the
     * reason, rather than skipped by ingest while the caller waits. */
    char run[MANIFEST_MAX_FIELD + 2];
    const char *rel = real + rl + 1;
    size_t runlen = strcspn(rel, "/");
    snprintf(run, sizeof(run), "%.*s", (int)(runlen < sizeof(run) - 1 ? runlen : sizeof(run) - 1), rel);
    if (runlen >= sizeof(run) - 1 || manifest_run_check(run) < 0) {
        conn_reply_errf(d, c, CTL_ERR_BADREQUEST, "\"%s\": the run directory name \"%.64s\" cannot be "
                        "stored: use 1-256 characters from [A-Za-z0-9._-], not . or ..", c->req.path, run);
        return;
    }
    int e = detector_commit(d->det, rel, c->req.step, mono_ms());
    if (e < 0) {
        conn_reply_errf(d, c, CTL_ERR_BADREQUEST, "\"%s\": not a checkpoint under a run directory: %s",
                        c->req.path, strerror(-e));
        return;
    }
    snprintf(c->unit, sizeof(c->unit), "%s", real + rl + 1);
    c->st = C_UNIT;
    if (c->req.timeout >= 0)
        c->deadline_ms = mono_ms() + c->req.timeout * 1000;
}

static void req_dispatch(struct dmn *d, struct conn *c)
{
    struct buf b = BUF_INIT;
    switch (c->req.verb) {
    case CTL_PING:
        conn_reply(d, c, "{\"pong\":true,\"version\":\"" CKS_VERSION "\"}", NULL, NULL);
        break;
    case CTL_STATUS:
        if (status_json(d, &b) == 0)
            conn_reply(d, c, buf_str(&b), NULL, NULL);
        else
            conn_reply(d, c, NULL, CTL_ERR_INTERNAL, "reading the index failed");
        break;
    case CTL_COMMIT:
        req_commit(d, c);
        break;
    case CTL_FLUSH:
        detector_flush(d->det, mono_ms());
        c->st = C_FLUSH;
        if (c->req.timeout >= 0)
            c->deadline_ms = mono_ms() + c->req.timeout * 1000;
        break;
    case CTL_RETRY:
        if (replicator_retry(d->rp, c->req.region) < 0)
            conn_reply_errf(d, c, CTL_ERR_NOTFOUND, "no region named '%s'", c->req.region);
        else
            conn_reply(d, c, "{\"retry\":true}", NULL, NULL);
        break;
    case CTL_RESTORED: /* counted even when degraded: restores still work then */
        metrics_restore(d->m, c->req.result == CTL_RESULT_OK, (uint64_t)c->req.bytes,
                        (uint64_t)c->req.files, (uint64_t)c->req.usec);
        conn_reply(d, c, "{\"recorded\":true}", NULL, NULL);
        break;
    }
    buf_free(&b);
}

static void conn_read(struct dmn *d, struct conn *c)
{
    char tmp[4096];
    ssize_t n = read(c->fd, tmp, sizeof(tmp));
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR))
            conn_close(d, c); /* a waiter that hangs up stops waiting */
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
        conn_reply(d, c, NULL, CTL_ERR_BADREQUEST, buf_str(&err));
    else
        req_dispatch(d, c);
    buf_free(&err);
}

/* ---- watcher ----------------------------------------------------------- */

static void on_watch(void *ud, enum watcher_event_kind kind, const char *rel, bool is_dir)
{
    struct dmn *d = ud;
    if (kind == WATCH_OVERFLOW) {
        log_warn("inotify queue overflowed; rescanning \"%s\"", d->root);
        return;
    }
    detector_event(d->det, kind, rel, is_dir, mono_ms());
}

static void watch_read(struct dmn *d)
{
    int e = watcher_read(d->w, on_watch, d);
    if (e == CKS_E_LIMIT || e == -EOVERFLOW)
        watcher_rescan(d->w, on_watch, d);
}

/* ---- signals and reload ------------------------------------------------ */

static void on_signal(struct dmn *d)
{
    struct signalfd_siginfo si;
    while (read(d->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo != SIGHUP) {
            char f[64];
            snprintf(f, sizeof(f), "event=stopping reason=signal signal=%u", si.ssi_signo);
            log_event(LOG_LVL_INFO, f, "signal %u: stopping", si.ssi_signo);
            d->stop = true;
            continue;
        }
        if (!d->config_path) {
            log_info("SIGHUP: running on the embedded default; nothing to reload");
            continue;
        }
        struct config nc;
        struct buf err = BUF_INIT;
        char f[1024], q[768];
        if (config_load(d->config_path, &nc, &err) < 0) {
            snprintf(f, sizeof(f), "event=reload_refused reason=%s",
                     log_quote(q, sizeof(q), buf_str(&err)));
            log_event(LOG_LVL_ERROR, f, "SIGHUP: configuration refused, keeping the running one: %s",
                      buf_str(&err));
        } else {
            snprintf(f, sizeof(f), "event=reload file=%s", log_quote(q, sizeof(q), d->config_path));
            log_event(LOG_LVL_INFO, f, "SIGHUP: configuration \"%s\" is valid; restarting in place",
                      d->config_path);
            d->reexec = d->stop = true;
        }
        buf_free(&err);
    }
}

/* ---- start-up ---------------------------------------------------------- */

struct keep_acc {
    const char *path;
    bool found;
};

static int keep_cb(void *ud, const struct pending *p)
{
    struct keep_acc *k = ud;
    if (p->pinned && !strcmp(p->pin, k->path)) {
        k->found = true;
        return 1;
    }
    return 0;
}

/* A pin folder stays if a pending snapshot still reads from it. */
static int keep_pin(void *ud, const char *path)
{
    struct dmn *d = ud;
    struct index_txn *t;
    struct keep_acc k = {path, false};
    if (index_txn_begin(d->r->ix, false, &t) < 0)
        return 1;
    int e = queue_pending_foreach(t, keep_cb, &k);
    index_txn_abort(t);
    return e < 0 || k.found;
}

static void dmn_log_pending(struct dmn *d)
{
    struct index_txn *t;
    size_t n = 0;
    if (index_txn_begin(d->r->ix, false, &t) < 0)
        return;
    n = pending_snapshots(t);
    index_txn_abort(t);
    if (n) {
        char f[64];
        snprintf(f, sizeof(f), "event=resumed snapshots=%zu", n);
        log_event(LOG_LVL_INFO, f, "resuming %zu snapshot%s not yet in every region", n,
                  n == 1 ? "" : "s");
    }
}

static int dmn_lock(struct dmn *d)
{
    struct buf p = BUF_INIT;
    buf_printf(&p, "%s/ckptsyncd.lock", d->conf.state);
    d->lockfd = open(buf_str(&p), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    int e = d->lockfd < 0 ? -errno : 0;
    if (e == 0 && flock(d->lockfd, LOCK_EX | LOCK_NB) < 0)
        e = errno == EWOULDBLOCK ? -EBUSY : -errno;
    if (e == -EBUSY)
        log_error("another ckptsyncd already runs on state directory \"%s\"", d->conf.state);
    else if (e < 0)
        log_error("state directory \"%s\": lock \"%s\": %s", d->conf.state, buf_str(&p), strerror(-e));
    buf_free(&p);
    return e;
}

static int dmn_listen(struct dmn *d)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *path = d->conf.socket;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_error("control socket path \"%s\" is too long", path);
        return -ENAMETOOLONG;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    unlink(path); /* stale: the state lock says no other daemon owns it */
    d->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    mode_t old = umask(077);
    int e = d->lfd < 0 || bind(d->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
                    listen(d->lfd, SOMAXCONN) < 0
                ? -errno
                : 0;
    umask(old);
    if (e < 0)
        log_error("control socket \"%s\": %s", path, strerror(-e));
    d->max_conns = conn_limit();
    d->sparefd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return e;
}

static int ep_add(struct dmn *d, int fd, void *tag)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = tag};
    return epoll_ctl(d->ep, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static int dmn_fds(struct dmn *d)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    d->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    d->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    d->ep = epoll_create1(EPOLL_CLOEXEC);
    if (d->sigfd < 0 || d->evfd < 0 || d->ep < 0)
        return -errno;
    int e = ep_add(d, d->sigfd, &d->sigfd);
    if (e == 0)
        e = ep_add(d, d->evfd, &d->evfd);
    if (e == 0)
        e = ep_add(d, d->lfd, &d->lfd);
    if (e == 0)
        e = ep_add(d, watcher_fd(d->w), d->w);
    return e;
}

/* The counters, and the /metrics endpoint when [daemon] metrics is set. */
static int dmn_metrics_start(struct dmn *d)
{
    struct buf err = BUF_INIT;
    int e = metrics_new(d->r, &d->m);
    if (e == 0 && d->conf.metrics[0])
        e = metrics_server_new(d->conf.metrics, d->ep, dmn_metrics, d, &d->ms, &err);
    if (e < 0)
        log_error("metrics: %s", buf_str(&err)[0] ? buf_str(&err) : err_str(e));
    else if (d->ms)
        log_info("serving Prometheus metrics on %s (port %u) at /metrics", d->conf.metrics,
                 metrics_server_port(d->ms));
    buf_free(&err);
    return e;
}

static int dmn_start(struct dmn *d)
{
    struct buf err = BUF_INIT;
    int e;
    if (!realpath(d->conf.watch, d->root)) {
        e = -errno;
        log_error("watch root \"%s\": %s", d->conf.watch, strerror(-e));
        return e;
    }
    if ((e = fileio_mkdir_p(d->conf.state, 0700)) < 0) {
        log_error("state directory \"%s\": %s", d->conf.state, strerror(-e));
        return e;
    }
    if ((e = dmn_lock(d)) < 0)
        return e;
    if ((e = repo_open(&d->conf, REPO_CREATE, &d->r, &err)) < 0) {
        log_error("%s", buf_str(&err));
        buf_free(&err);
        return e;
    }
    pin_cleanup(d->root, keep_pin, d);
    dmn_log_pending(d);
    if ((e = watcher_new(d->root, &d->w, &err)) < 0 ||
        (e = detector_new(d->root, d->conf.settle, &d->det)) < 0) {
        log_error("watching \"%s\": %s", d->root, buf_str(&err)[0] ? buf_str(&err) : err_str(e));
        buf_free(&err);
        return e;
    }
    buf_free(&err);
    if ((e = dmn_listen(d)) < 0 || (e = dmn_fds(d)) < 0)
        return e;
    if ((e = dmn_metrics_start(d)) < 0)
        return e;
    if ((e = replicator_new(d->r, d->evfd, d->m, &d->rp)) < 0 ||
        (e = ingester_new(d->r, d->rp, d->m, d->root, d->evfd, &d->ig)) < 0) {
        log_error("starting worker threads: %s", err_str(e));
        return e;
    }
    if ((e = gcd_start(d->r, &d->gcd)) < 0) {
        log_error("starting the retention thread: %s", err_str(e));
        return e;
    }
    /* Catch up with whatever changed while the daemon was down. */
    watcher_rescan(d->w, on_watch, d);
    return 0;
}

static void dmn_stop(struct dmn *d)
{
    gcd_free(d->gcd);          /* finishes the forget or prune step in hand */
    ingester_free(d->ig);      /* finishes or abandons the unit in hand */
    replicator_free(d->rp);    /* workers stop after their current object */
    metrics_server_free(d->ms);
    metrics_free(d->m);        /* after every thread that counts */
    while (d->nconns)
        conn_close(d, d->conns[d->nconns - 1]);
    free(d->conns);
    if (d->sparefd >= 0)
        close(d->sparefd);
    watcher_free(d->w);
    detector_free(d->det);
    repo_free(d->r);
    if (d->lfd >= 0) {
        close(d->lfd);
        unlink(d->conf.socket);
    }
    if (d->ep >= 0)
        close(d->ep);
    if (d->sigfd >= 0)
        close(d->sigfd);
    if (d->evfd >= 0)
        close(d->evfd);
    if (d->lockfd >= 0)
        close(d->lockfd);
}

/* ---- the loop ---------------------------------------------------------- */

static int loop_timeout(struct dmn *d)
{
    int64_t now = mono_ms(), t = now + 1000;
    int64_t dl = detector_deadline(d->det);
    if (dl >= 0 && dl < t)
        t = dl;
    int64_t idle_ms = (int64_t)d->conf.control_idle_timeout * 1000;
    for (size_t i = 0; i < d->nconns; i++) {
        const struct conn *c = d->conns[i];
        int64_t ct = conn_idle(c) ? c->idle_since_ms + idle_ms : c->deadline_ms;
        if (ct && ct < t)
            t = ct;
    }
    return t <= now ? 0 : (int)(t - now);
}

static void loop_event(struct dmn *d, struct epoll_event *ev)
{
    void *tag = ev->data.ptr;
    if (tag == &d->sigfd) {
        on_signal(d);
    } else if (tag == &d->evfd) {
        uint64_t v;
        while (read(d->evfd, &v, sizeof(v)) == (ssize_t)sizeof(v))
            ;
    } else if (tag == &d->lfd) {
        dmn_accept(d);
    } else if (tag == d->w) {
        watch_read(d);
    } else if (metrics_server_event(d->ms, tag)) {
        /* a scrape */
    } else {
        for (size_t i = 0; i < d->nconns; i++) {
            struct conn *c = d->conns[i];
            if (c != tag)
                continue;
            if (c->st == C_WRITE)
                conn_write(d, c);
            else
                conn_read(d, c);
            break;
        }
    }
}

static void loop_run(struct dmn *d)
{
    struct epoll_event evs[32];
    while (!d->stop) {
        int n = epoll_wait(d->ep, evs, 32, loop_timeout(d));
        for (int k = 0; k < n; k++)
            loop_event(d, &evs[k]);
        ingest_done(d);
        handle_retakes(d);
        submit_ready(d);
        check_waiters(d);
        metrics_server_tick(d->ms);
        dmn_textfile(d);
    }
}

int daemon_run(const struct config *conf, const char *config_path, char **argv)
{
    struct dmn *d = calloc(1, sizeof(*d));
    int e;
    if (!d)
        return -ENOMEM;
    d->conf = *conf;
    d->config_path = config_path;
    d->argv = argv;
    d->ep = d->sigfd = d->lfd = d->evfd = d->lockfd = d->sparefd = -1;
    d->started_ms = mono_ms();
    d->started_wall_ms = wall_ms();
    e = dmn_start(d);
    if (e == 0) {
        char f[256];
        snprintf(f, sizeof(f), "event=started version=%s regions=%zu quorum=%u", CKS_VERSION,
                 d->r->nregions, d->conf.quorum);
        log_event(LOG_LVL_INFO, f, "watching \"%s\"; %zu regions, quorum %u; control socket \"%s\"",
                  d->root, d->r->nregions, d->conf.quorum, d->conf.socket);
        notify_systemd("READY=1\nSTATUS=watching");
        loop_run(d);
        notify_systemd(d->reexec ? "RELOADING=1" : "STOPPING=1");
    }
    bool reexec = d->reexec;
    dmn_stop(d);
    free(d);
    if (e == 0 && reexec) {
        execv("/proc/self/exe", argv);
        log_error("re-executing for the new configuration: %s", strerror(errno));
        return -errno;
    }
    return e;
}
