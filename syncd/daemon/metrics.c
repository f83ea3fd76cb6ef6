/*
 * metrics.c — counters, the Prometheus text format, and /metrics.
 *
 * Design notes.
 * - The counters are plain uint64_t updated with relaxed atomic adds by
 *   the ingest thread and the region workers, and read the same way by
 *   the event loop: no lock is taken on the hot path, and nothing else is
 *   shared.  Region names are copied at creation, so rendering never
 *   touches a worker's region.
 * - The HTTP side is one listening socket and a fixed table of
 *   connections, all non-blocking and driven by the daemon's epoll loop:
 *   a scrape is one short request and one response, so a thread of its
 *   own would only add locking.  The response is rendered once the whole
 *   request head is in and written as the socket accepts it; then the
 *   connection closes (no keep-alive: Prometheus reconnects cheaply, and
 *   a closed connection cannot hold a slot).
 * - No client can lock scrapes out (the endpoint is on loopback TCP, open
 *   to every local user): the backlog is SOMAXCONN, each wakeup accepts
 *   all of it, and when the table is full the connection idle the longest
 *   (no byte read or sent) is closed to make room, as the control socket
 *   does.  A scrape sends its request at once and is answered on the spot,
 *   so only connections that hold a slot without talking are closed.
 * - Series follow Prometheus naming: ckptsync_ prefix, base units,
 *   _total for counters, labels only region, run, operation and result.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/mstime.h"
#include "daemon/metrics.h"

struct metrics_region {
    char name[CONFIG_NAME_MAX];
    uint64_t requests[METRICS_NOPS][2]; /* [op][ok] */
    uint64_t bytes[2];                  /* PUT bytes by [ok] */
    uint64_t retries[METRICS_NRETRIES];
    uint64_t copies[METRICS_NCOPIES], bytes_copied;
};

struct metrics {
    size_t nregions;
    struct metrics_region rg[CONFIG_MAX_REGIONS];
    uint64_t snaps[METRICS_NSNAPS];
    uint64_t bytes_new, bytes_dedup, chunks_new, chunks_dedup;
    uint64_t rereads;
    uint64_t restores[2]; /* by [ok] */
    uint64_t restore_bytes, restore_files, restore_usec;
};

static const char *const op_names[METRICS_NOPS] = {"has", "put", "publish"};
static const char *const retry_names[METRICS_NRETRIES] = {"error", "missing", "changed"};
static const char *const snap_names[METRICS_NSNAPS] = {"taken", "unchanged", "failed"};

static void add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

static uint64_t get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

int metrics_new(const struct config *conf, struct metrics **ret)
{
    struct metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->nregions = conf->nregions;
    for (size_t i = 0; i < conf->nregions; i++)
        snprintf(m->rg[i].name, sizeof(m->rg[i].name), "%s", conf->regions[i].name);
    *ret = m;
    return 0;
}

void metrics_free(struct metrics *m)
{
    free(m);
}

void metrics_snapshot(struct metrics *m, enum metrics_snap outcome, uint64_t bytes,
                      uint64_t new_bytes, uint64_t chunks, uint64_t new_chunks)
{
    if (!m)
        return;
    add(&m->snaps[outcome], 1);
    if (outcome != METRICS_SNAP_TAKEN)
        return;
    new_bytes = new_bytes < bytes ? new_bytes : bytes;
    new_chunks = new_chunks < chunks ? new_chunks : chunks;
    add(&m->bytes_new, new_bytes);
    add(&m->bytes_dedup, bytes - new_bytes);
    add(&m->chunks_new, new_chunks);
    add(&m->chunks_dedup, chunks - new_chunks);
}

void metrics_reread(struct metrics *m)
{
    if (m)
        add(&m->rereads, 1);
}

void metrics_request(struct metrics *m, size_t i, enum metrics_op op, bool ok, uint64_t bytes)
{
    if (!m || i >= m->nregions)
        return;
    add(&m->rg[i].requests[op][ok], 1);
    if (op == METRICS_OP_PUT)
        add(&m->rg[i].bytes[ok], bytes);
}

void metrics_copy(struct metrics *m, size_t i, enum metrics_copy what, uint64_t bytes)
{
    if (!m || i >= m->nregions)
        return;
    add(&m->rg[i].copies[what], 1);
    if (what == METRICS_COPY_OK)
        add(&m->rg[i].bytes_copied, bytes);
}

void metrics_retry(struct metrics *m, size_t i, enum metrics_retry cause, uint64_t n)
{
    if (m && i < m->nregions)
        add(&m->rg[i].retries[cause], n);
}

void metrics_restore(struct metrics *m, bool ok, uint64_t bytes, uint64_t files, uint64_t usec)
{
    if (!m)
        return;
    add(&m->restores[ok], 1);
    if (!ok)
        return;
    add(&m->restore_bytes, bytes);
    add(&m->restore_files, files);
    add(&m->restore_usec, usec);
}

/* ---- exposition ------------------------------------------------------- */

static void put_escaped(struct buf *out, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            buf_puts(out, "\\\\");
        else if (*s == '\n')
            buf_puts(out, "\\n");
        else if (*s == '"' && quote)
            buf_puts(out, "\\\"");
        else
            buf_append(out, s, 1);
    }
}

void metrics_family(struct buf *out, const char *name, const char *type, const char *help)
{
    buf_printf(out, "# HELP %s ", name);
    put_escaped(out, help, false);
    buf_printf(out, "\n# TYPE %s %s\n", name, type);
}

static void put_series(struct buf *out, const char *name, const struct metrics_label *labels,
                       size_t nlabels)
{
    buf_puts(out, name);
    if (!nlabels)
        return;
    buf_puts(out, "{");
    for (size_t i = 0; i < nlabels; i++) {
        buf_printf(out, "%s%s=\"", i ? "," : "", labels[i].name);
        put_escaped(out, labels[i].value, true);
        buf_puts(out, "\"");
    }
    buf_puts(out, "}");
}

void metrics_sample(struct buf *out, const char *name, const struct metrics_label *labels,
                    size_t nlabels, double value)
{
    put_series(out, name, labels, nlabels);
    if (value != value)
        buf_puts(out, " NaN\n");
    else if (value > 1.7976931348623157e308 || value < -1.7976931348623157e308)
        buf_puts(out, value > 0 ? " +Inf\n" : " -Inf\n");
    else if (value > -9007199254740992.0 && value < 9007199254740992.0 &&
             value == (double)(int64_t)value)
        buf_printf(out, " %lld\n", (long long)value);
    else
        buf_printf(out, " %.17g\n", value);
}

void metrics_sample_u64(struct buf *out, const char *name, const struct metrics_label *labels,
                        size_t nlabels, uint64_t value)
{
    put_series(out, name, labels, nlabels);
    buf_printf(out, " %llu\n", (unsigned long long)value);
}

static void counters_ingest(const struct metrics *m, struct buf *out)
{
    static const char *const res[2] = {"new", "dedup"};
    const uint64_t bytes[2] = {get(&m->bytes_new), get(&m->bytes_dedup)};
    const uint64_t chunks[2] = {get(&m->chunks_new), get(&m->chunks_dedup)};
    metrics_family(out, "ckptsync_snapshots_total", "counter",
                   "Units taken by the daemon, by result: taken (a new snapshot), unchanged "
                   "(same content as the last one), failed.");
    for (size_t k = 0; k < METRICS_NSNAPS; k++)
        metrics_sample_u64(out, "ckptsync_snapshots_total",
                           (struct metrics_label[]){{"result", snap_names[k]}}, 1,
                           get(&m->snaps[k]));
    metrics_family(out, "ckptsync_ingest_bytes_total", "counter",
                   "File bytes of the snapshots taken, by result: new (in chunks no region had) "
                   "or dedup (in chunks already stored).");
    for (size_t k = 0; k < 2; k++)
        metrics_sample_u64(out, "ckptsync_ingest_bytes_total",
                           (struct metrics_label[]){{"result", res[k]}}, 1, bytes[k]);
    metrics_family(out, "ckptsync_ingest_chunks_total", "counter",
                   "Chunk references of the snapshots taken, by result: new or dedup.");
    for (size_t k = 0; k < 2; k++)
        metrics_sample_u64(out, "ckptsync_ingest_chunks_total",
                           (struct metrics_label[]){{"result", res[k]}}, 1, chunks[k]);
}

static void counters_regions(const struct metrics *m, struct buf *out)
{
    static const char *const ok[2] = {"error", "ok"};
    metrics_family(out, "ckptsync_region_requests_total", "counter",
                   "Requests to each region by operation (has, put, publish) and result.");
    for (size_t i = 0; i < m->nregions; i++)
        for (size_t op = 0; op < METRICS_NOPS; op++)
            for (size_t k = 0; k < 2; k++)
                metrics_sample_u64(out, "ckptsync_region_requests_total",
                                   (struct metrics_label[]){{"region", m->rg[i].name},
                                                            {"operation", op_names[op]},
                                                            {"result", ok[k]}},
                                   3, get(&m->rg[i].requests[op][k]));
    metrics_family(out, "ckptsync_region_bytes_total", "counter",
                   "Bytes of chunk objects sent to each region (compressed), by result.");
    for (size_t i = 0; i < m->nregions; i++)
        for (size_t k = 0; k < 2; k++)
            metrics_sample_u64(out, "ckptsync_region_bytes_total",
                               (struct metrics_label[]){{"region", m->rg[i].name},
                                                        {"operation", "put"},
                                                        {"result", ok[k]}},
                               3, get(&m->rg[i].bytes[k]));
    metrics_family(out, "ckptsync_retries_total", "counter",
                   "Work done again, by cause (result): error (a region round failed and is "
                   "retried after backoff), missing (chunks a region had lost, uploaded again), "
                   "changed (a file changed after it was read: operation read re-reads the unit, "
                   "operation upload drops the snapshot and takes the unit again).");
    for (size_t i = 0; i < m->nregions; i++)
        for (size_t k = 0; k < METRICS_NRETRIES; k++)
            metrics_sample_u64(out, "ckptsync_retries_total",
                               (struct metrics_label[]){{"region", m->rg[i].name},
                                                        {"operation", "upload"},
                                                        {"result", retry_names[k]}},
                               3, get(&m->rg[i].retries[k]));
    metrics_sample_u64(out, "ckptsync_retries_total",
                       (struct metrics_label[]){{"operation", "read"}, {"result", "changed"}}, 2,
                       get(&m->rereads));
}

static void counters_copies(const struct metrics *m, struct buf *out)
{
    static const char *const res[METRICS_NCOPIES] = {"ok", "failed", "fallback"};
    metrics_family(out, "ckptsync_region_copied_bytes_total", "counter",
                   "Bytes of chunk objects each region got by server-side copy from another "
                   "region (not sent by this instance).");
    for (size_t i = 0; i < m->nregions; i++)
        metrics_sample_u64(out, "ckptsync_region_copied_bytes_total",
                           (struct metrics_label[]){{"region", m->rg[i].name}}, 1,
                           get(&m->rg[i].bytes_copied));
    metrics_family(out, "ckptsync_region_copies_total", "counter",
                   "Server-side copies into each region by result: ok (confirmed), failed, "
                   "fallback (the chunk went up from this instance instead).");
    for (size_t i = 0; i < m->nregions; i++)
        for (size_t k = 0; k < METRICS_NCOPIES; k++)
            metrics_sample_u64(
                out, "ckptsync_region_copies_total",
                (struct metrics_label[]){{"region", m->rg[i].name}, {"result", res[k]}}, 2,
                get(&m->rg[i].copies[k]));
}

static void counters_restore(const struct metrics *m, struct buf *out)
{
    metrics_family(out, "ckptsync_restores_total", "counter",
                   "Restores the ckptsync command reported to this daemon, by result: ok or "
                   "failed.");
    metrics_sample_u64(out, "ckptsync_restores_total", (struct metrics_label[]){{"result", "ok"}},
                       1, get(&m->restores[1]));
    metrics_sample_u64(out, "ckptsync_restores_total",
                       (struct metrics_label[]){{"result", "failed"}}, 1, get(&m->restores[0]));
    metrics_family(out, "ckptsync_restore_bytes_total", "counter",
                   "File bytes written by the restores that succeeded.");
    metrics_sample_u64(out, "ckptsync_restore_bytes_total", NULL, 0, get(&m->restore_bytes));
    metrics_family(out, "ckptsync_restore_files_total", "counter",
                   "Files written by the restores that succeeded.");
    metrics_sample_u64(out, "ckptsync_restore_files_total", NULL, 0, get(&m->restore_files));
    metrics_family(out, "ckptsync_restore_seconds_total", "counter",
                   "Time the restores that succeeded took; restore_bytes_total / this is "
                   "their rate.");
    metrics_sample(out, "ckptsync_restore_seconds_total", NULL, 0,
                   (double)get(&m->restore_usec) / 1e6);
}

void metrics_counters(const struct metrics *m, struct buf *out)
{
    metrics_family(out, "ckptsync_info", "gauge", "The ckptsyncd build; always 1.");
    metrics_sample(out, "ckptsync_info", (struct metrics_label[]){{"version", CKS_VERSION}}, 1, 1);
    if (!m)
        return;
    counters_ingest(m, out);
    counters_regions(m, out);
    counters_copies(m, out);
    counters_restore(m, out);
}

/* ---- the endpoint ----------------------------------------------------- */

struct hconn {
    int fd;
    bool writing;
    char in[METRICS_REQUEST_MAX];
    size_t in_len;
    struct buf out;
    size_t out_off;
    int64_t since_ms; /* accepted: METRICS_IDLE_MS bounds its whole life */
    uint64_t active;  /* s->activity at its last byte read or sent (or accept) */
};

struct metrics_server {
    int ep, lfd;
    unsigned port;
    metrics_render_fn render;
    void *ud;
    struct hconn *conns[METRICS_MAX_CONNS];
    uint64_t activity;     /* counts accepts, reads and sends: orders idleness exactly */
    int64_t evict_warn_ms; /* the next eviction to log */
};

static int srv_listen(struct metrics_server *s, const char *addr, struct buf *err)
{
    struct config_listen l;
    struct sockaddr_storage ss = {0};
    socklen_t len;
    int one = 1;
    if (config_parse_listen(addr, &l) < 0) {
        buf_printf(err, "metrics address '%s' is not HOST:PORT", addr);
        return -EINVAL;
    }
    if (l.family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)l.port);
        inet_pton(AF_INET6, l.host, &a->sin6_addr);
        len = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)l.port);
        inet_pton(AF_INET, l.host, &a->sin_addr);
        len = sizeof(*a);
    }
    s->lfd = socket(l.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(s->lfd, (struct sockaddr *)&ss, len) < 0 || listen(s->lfd, SOMAXCONN) < 0) {
        int e = -errno;
        buf_printf(err, "metrics address %s: %s", addr, strerror(-e));
        return e;
    }
    len = sizeof(ss);
    if (getsockname(s->lfd, (struct sockaddr *)&ss, &len) == 0)
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

int metrics_server_new(const char *addr, int epfd, metrics_render_fn render, void *ud,
                       struct metrics_server **ret, struct buf *err)
{
    struct metrics_server *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->ep = epfd;
    s->render = render;
    s->ud = ud;
    int e = srv_listen(s, addr, err);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->lfd};
    if (e == 0 && epoll_ctl(epfd, EPOLL_CTL_ADD, s->lfd, &ev) < 0) {
        e = -errno;
        buf_printf(err, "metrics address %s: epoll: %s", addr, strerror(-e));
    }
    if (e < 0) {
        if (s->lfd >= 0)
            close(s->lfd);
        free(s);
        return e;
    }
    *ret = s;
    return 0;
}

static void hc_close(struct metrics_server *s, size_t i)
{
    struct hconn *c = s->conns[i];
    epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    buf_free(&c->out);
    free(c);
    s->conns[i] = NULL;
}

void metrics_server_free(struct metrics_server *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < METRICS_MAX_CONNS; i++)
        if (s->conns[i])
            hc_close(s, i);
    epoll_ctl(s->ep, EPOLL_CTL_DEL, s->lfd, NULL);
    close(s->lfd);
    free(s);
}

unsigned metrics_server_port(const struct metrics_server *s)
{
    return s ? s->port : 0;
}

/* A free slot for a new connection; when every one is taken, the
 * connection idle the longest is closed to make room. */
static size_t srv_slot(struct metrics_server *s)
{
    size_t old = 0;
    for (size_t i = 0; i < METRICS_MAX_CONNS; i++) {
        if (!s->conns[i])
            return i;
        if (s->conns[i]->active < s->conns[old]->active)
            old = i;
    }
    int64_t now = mstime_mono();
    if (now >= s->evict_warn_ms) {
        log_warn("metrics endpoint: %d connections, the most it takes; closing the ones idle "
                 "longest to make room",
                 METRICS_MAX_CONNS);
        s->evict_warn_ms = now + 60000;
    }
    hc_close(s, old);
    return old;
}

/* Takes every client waiting in the backlog. */
static void srv_accept(struct metrics_server *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0)
            return;
        size_t i = srv_slot(s);
        struct hconn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd); /* a scraper retries; the loop is never held up */
            continue;
        }
        c->fd = fd;
        c->since_ms = mstime_mono();
        c->active = ++s->activity;
        s->conns[i] = c;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) < 0)
            hc_close(s, i);
    }
}

static void hc_respond(struct metrics_server *s, struct hconn *c, int status, const char *reason,
                       const char *ctype, const struct buf *body, bool head)
{
    size_t blen = body ? body->len : 0;
    buf_reset(&c->out);
    buf_printf(&c->out,
               "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
               "Connection: close\r\n\r\n",
               status, reason, ctype, blen, status == 405 ? "Allow: GET, HEAD\r\n" : "");
    if (body && !head)
        buf_append(&c->out, body->data, body->len);
    c->writing = true;
    c->out_off = 0;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void hc_text(struct metrics_server *s, struct hconn *c, int status, const char *reason,
                    const char *text)
{
    struct buf b = BUF_INIT;
    buf_puts(&b, text);
    hc_respond(s, c, status, reason, "text/plain; charset=utf-8", &b, false);
    buf_free(&b);
}

/* The request line of a complete head: "METHOD TARGET HTTP/1.x". */
static void hc_request(struct metrics_server *s, struct hconn *c)
{
    char method[16], target[256], version[16];
    c->in[c->in_len < sizeof(c->in) ? c->in_len : sizeof(c->in) - 1] = 0;
    size_t line = strcspn(c->in, "\r\n");
    c->in[line] = 0;
    if (sscanf(c->in, "%15s %255s %15s", method, target, version) != 3 ||
        strncmp(version, "HTTP/1.", 7) != 0) {
        hc_text(s, c, 400, "Bad Request", "malformed request\n");
        return;
    }
    bool head = !strcmp(method, "HEAD");
    if (!head && strcmp(method, "GET")) {
        hc_text(s, c, 405, "Method Not Allowed", "only GET and HEAD\n");
        return;
    }
    size_t plen = strcspn(target, "?");
    if (plen != 8 || strncmp(target, "/metrics", 8)) {
        hc_text(s, c, 404, "Not Found", "ckptsyncd serves /metrics only\n");
        return;
    }
    struct buf body = BUF_INIT;
    int e = s->render(s->ud, &body);
    if (e < 0)
        hc_text(s, c, 500, "Internal Server Error", "reading the daemon's state failed\n");
    else
        hc_respond(s, c, 200, "OK", METRICS_CONTENT_TYPE, &body, head);
    buf_free(&body);
}

static bool head_complete(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\n' &&
            (p[i + 1] == '\n' || (p[i + 1] == '\r' && i + 2 < n && p[i + 2] == '\n')))
            return true;
    return false;
}

static void hc_read(struct metrics_server *s, size_t i)
{
    struct hconn *c = s->conns[i];
    size_t room = sizeof(c->in) - 1 - c->in_len;
    ssize_t n = room ? read(c->fd, c->in + c->in_len, room) : 0;
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0 && room) {
        hc_close(s, i); /* the client went away before asking */
        return;
    }
    c->in_len += (size_t)n;
    c->active = ++s->activity;
    if (head_complete(c->in, c->in_len))
        hc_request(s, c);
    else if (c->in_len >= sizeof(c->in) - 1)
        hc_text(s, c, 400, "Bad Request", "request head too large\n");
}

static void hc_write(struct metrics_server *s, size_t i)
{
    struct hconn *c = s->conns[i];
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0)
            break;
        c->out_off += (size_t)n;
        c->active = ++s->activity;
    }
    /* Unread request bytes would make close() send a reset that can
     * overtake the answer: read them away first (what is queued now). */
    char tmp[4096];
    for (int k = 0; k < 16 && read(c->fd, tmp, sizeof(tmp)) > 0; k++)
        ;
    hc_close(s, i);
}

bool metrics_server_event(struct metrics_server *s, void *tag)
{
    if (!s)
        return false;
    if (tag == &s->lfd) {
        srv_accept(s);
        return true;
    }
    for (size_t i = 0; i < METRICS_MAX_CONNS; i++) {
        if (!s->conns[i] || s->conns[i] != tag)
            continue;
        if (s->conns[i]->writing)
            hc_write(s, i);
        else
            hc_read(s, i);
        return true;
    }
    return false;
}

void metrics_server_tick(struct metrics_server *s)
{
    if (!s)
        return;
    int64_t now = mstime_mono();
    for (size_t i = 0; i < METRICS_MAX_CONNS; i++)
        if (s->conns[i] && now - s->conns[i]->since_ms >= METRICS_IDLE_MS)
            hc_close(s, i);
}
