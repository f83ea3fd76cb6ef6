/*
 * daemon.c — the event loop of ckptsyncd.
 *
 * Design notes.
 * - One epoll loop owns everything that is not a byte-moving thread:
 *   signals (signalfd), the inotify watcher, the control socket and its
 *   connections (daemon/ctlserver.c), the /metrics endpoint
 *   (daemon/metrics.c), and an eventfd the ingest and region threads poke
 *   when something changed.  Its timeout is the detector's next deadline,
 *   the control server's (a waiter's deadline, an idle client's), or one
 *   second.
 * - Each turn of the loop hands finished ingests and ready units on, in
 *   this order: results to the control server's waiters, retakes the
 *   region workers asked for, ready units to the ingest thread (telling
 *   the control server which unit went as which ticket), then the waiters
 *   are checked.  So a commit that waits for durability never blocks the
 *   loop: its connection is parked and re-checked each turn.
 * - What status --json and /metrics show is rendered by
 *   daemon/statusview.c from the parts (struct daemon_parts) this file
 *   creates and owns.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/mstime.h"
#include "daemon/ctlserver.h"
#include "daemon/daemon.h"
#include "daemon/detect.h"
#include "daemon/gcd.h"
#include "daemon/jobwatch.h"
#include "daemon/ingest.h"
#include "daemon/metrics.h"
#include "daemon/pin.h"
#include "store/queue.h"
#include "daemon/replicator.h"
#include "daemon/statusview.h"
#include "daemon/watcher.h"

#define TEXTFILE_INTERVAL_MS 10000

struct dmn {
    struct config conf;
    const char *config_path;
    char **argv;
    char root[PATH_MAX];
    struct daemon_parts p;     /* what ctlserver and statusview see */
    struct ctlserver *cs;      /* the control socket */
    struct gcd *gcd;           /* retention and scheduled prune, or NULL */
    struct metrics_server *ms; /* GET /metrics, or NULL ([daemon] metrics off) */
    int64_t textfile_due_ms;   /* monotonic: next [daemon] metrics_textfile write */
    bool textfile_failing;
    struct watcher *w;
    int ep, sigfd, evfd, lockfd;
    uint64_t next_ticket;
    bool stop, reexec;
    bool degraded_told; /* the index's failure was logged */
};

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

/* GET /metrics: the exposition statusview renders. */
static int dmn_metrics(void *ud, struct buf *out)
{
    return statusview_metrics(ud, out);
}

/* node_exporter's textfile collector: the same text, replaced whole. */
static void dmn_textfile(struct dmn *d)
{
    struct buf b = BUF_INIT;
    int64_t now = mstime_mono();
    if (!d->conf.metrics_textfile[0] || now < d->textfile_due_ms)
        return;
    d->textfile_due_ms = now + TEXTFILE_INTERVAL_MS;
    int e = dmn_metrics(&d->p, &b);
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

/* ---- units and ingest -------------------------------------------------- */

static void submit_ready(struct dmn *d)
{
    struct detect_ready *rd = malloc(sizeof(*rd));
    struct ingest_job *job = malloc(sizeof(*job));
    if (!rd || !job) {
        free(rd);
        free(job);
        return;
    }
    while (detector_next(d->p.det, mstime_mono(), rd) == 1) {
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
        if (ingester_submit(d->p.ig, job) < 0) {
            log_warn("ingest queue full; \"%s\" will be taken later", rd->unit);
            detector_commit(d->p.det, rd->unit, rd->step, mstime_mono());
            break;
        }
        ctlserver_unit_taken(d->cs, rd->unit, job->ticket);
    }
    free(rd);
    free(job);
}

static void ingest_done(struct dmn *d)
{
    struct ingest_done *done = malloc(sizeof(*done));
    if (!done)
        return;
    while (ingester_poll(d->p.ig, done) == 1) {
        if (done->err < 0 && done->step >= 0) /* a multi-node job's part that cannot be read */
            jobwatch_unit_failed(d->p.jw, done->run, done->step, done->unit, done->msg);
        ctlserver_unit_done(d->cs, done);
    }
    free(done);
}

static void handle_retakes(struct dmn *d)
{
    char(*units)[4096] = malloc(16 * sizeof(*units));
    if (!units)
        return;
    size_t n = replicator_take_retakes(d->p.rp, units, 16);
    for (size_t i = 0; i < n; i++)
        if (detector_commit(d->p.det, units[i], -1, mstime_mono()) < 0) {
            char f[1024], unit[768];
            snprintf(f, sizeof(f), "event=retake_skipped unit=%s reason=gone",
                     log_quote(unit, sizeof(unit), units[i]));
            log_event(LOG_LVL_WARN, f, "\"%s\" is gone; its dropped snapshot is not taken again",
                      units[i]);
        }
    free(units);
}

/* ---- watcher ----------------------------------------------------------- */

static void on_watch(void *ud, enum watcher_event_kind kind, const char *rel, bool is_dir)
{
    struct dmn *d = ud;
    if (kind == WATCH_OVERFLOW) {
        log_warn("inotify queue overflowed; rescanning \"%s\"", d->root);
        return;
    }
    detector_event(d->p.det, kind, rel, is_dir, mstime_mono());
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
            log_event(LOG_LVL_ERROR, f,
                      "SIGHUP: configuration refused, keeping the running one: %s", buf_str(&err));
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
    if (index_txn_begin(repo_index(d->p.r), false, &t) < 0)
        return 1;
    int e = queue_pending_foreach(t, keep_cb, &k);
    index_txn_abort(t);
    return e < 0 || k.found;
}

static void dmn_log_pending(struct dmn *d)
{
    struct index_txn *t;
    size_t n = 0;
    if (index_txn_begin(repo_index(d->p.r), false, &t) < 0)
        return;
    n = statusview_pending_snapshots(t);
    index_txn_abort(t);
    if (n) {
        char f[64];
        snprintf(f, sizeof(f), "event=resumed snapshots=%zu", n);
        log_event(LOG_LVL_INFO, f, "resuming %zu snapshot%s not yet in every region", n,
                  n == 1 ? "" : "s");
    }
}

/* The lock file says "PID starting" until the control socket listens,
 * then "PID running", and is emptied at exit: `ckptsync status` tells a
 * daemon that is still opening the repository (a first start waits
 * [daemon] create_settle) from none (client/cli_daemon.c). */
static void dmn_phase(struct dmn *d, const char *phase)
{
    char line[64];
    int n = phase ? snprintf(line, sizeof(line), "%ld %s\n", (long)getpid(), phase) : 0;
    if (ftruncate(d->lockfd, 0) < 0 || (n > 0 && pwrite(d->lockfd, line, (size_t)n, 0) != n))
        log_debug("lock file: %s", strerror(errno)); /* advisory only */
}

static int dmn_lock(struct dmn *d)
{
    struct buf p = BUF_INIT;
    buf_printf(&p, "%s/ckptsyncd.lock", d->conf.state);
    d->lockfd = open(buf_str(&p), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    int e = d->lockfd < 0 ? -errno : 0;
    if (e == 0 && flock(d->lockfd, LOCK_EX | LOCK_NB) < 0)
        e = errno == EWOULDBLOCK ? -EBUSY : -errno;
    if (e == 0)
        dmn_phase(d, "starting");
    if (e == -EBUSY)
        log_error("another ckptsyncd already runs on state directory \"%s\"", d->conf.state);
    else if (e < 0)
        log_error("state directory \"%s\": lock \"%s\": %s", d->conf.state, buf_str(&p),
                  strerror(-e));
    buf_free(&p);
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
        e = ep_add(d, watcher_fd(d->w), d->w);
    return e;
}

/* The counters a reload carried through the exec (metrics.h); the
 * variable is removed at once, so nothing the daemon starts inherits it. */
static void dmn_metrics_carried(struct dmn *d)
{
    const char *text = getenv(METRICS_CARRY_ENV);
    if (!text)
        return;
    int n = metrics_carry_in(d->p.m, text);
    if (n < 0)
        log_warn("metrics: the counters carried over the reload are unreadable (%s); counting "
                 "from zero",
                 err_str(n));
    else
        log_info("metrics: %d counters carried over the reload", n);
    unsetenv(METRICS_CARRY_ENV);
}

/* Before the exec of a reload, the threads stopped: the counters go into
 * the environment the new image reads (dmn_metrics_carried). */
static void dmn_metrics_carry(struct dmn *d)
{
    struct buf b = BUF_INIT;
    metrics_carry_out(d->p.m, &b);
    if (b.len && setenv(METRICS_CARRY_ENV, buf_str(&b), 1) < 0)
        log_warn("metrics: the counters cannot be carried over the reload (%s); they restart "
                 "from zero",
                 strerror(errno));
    buf_free(&b);
}

/* The counters, and the /metrics endpoint when [daemon] metrics is set. */
static int dmn_metrics_start(struct dmn *d)
{
    struct buf err = BUF_INIT;
    int e = metrics_new(repo_conf(d->p.r), &d->p.m);
    if (e == 0)
        dmn_metrics_carried(d);
    if (e == 0 && d->conf.metrics[0])
        e = metrics_server_new(d->conf.metrics, d->ep, dmn_metrics, &d->p, &d->ms, &err);
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
    if ((e = repo_open(&d->conf, REPO_CREATE, &d->p.r, &err)) < 0) {
        log_error("%s", buf_str(&err));
        buf_free(&err);
        return e;
    }
    pin_cleanup(d->root, keep_pin, d);
    dmn_log_pending(d);
    if ((e = watcher_new(d->root, &d->w, &err)) < 0 ||
        (e = detector_new(d->root, d->conf.settle, &d->p.det)) < 0) {
        log_error("watching \"%s\": %s", d->root, buf_str(&err)[0] ? buf_str(&err) : err_str(e));
        buf_free(&err);
        return e;
    }
    buf_free(&err);
    if ((e = dmn_fds(d)) < 0 || (e = ctlserver_new(&d->p, d->ep, &d->cs)) < 0)
        return e;
    dmn_phase(d, "running");
    if ((e = dmn_metrics_start(d)) < 0)
        return e;
    if ((e = replicator_new(d->p.r, d->evfd, d->p.m, &d->p.rp)) < 0 ||
        (e = ingester_new(d->p.r, d->p.rp, d->p.m, d->root, d->evfd, &d->p.ig)) < 0) {
        log_error("starting worker threads: %s", err_str(e));
        return e;
    }
    if ((e = gcd_start(d->p.r, &d->gcd)) < 0) {
        log_error("starting the retention thread: %s", err_str(e));
        return e;
    }
    if ((e = jobwatch_start(d->p.r, d->p.rp, &d->p.jw)) < 0) {
        log_error("starting the multi-node job's watch: %s", err_str(e));
        return e;
    }
    /* Catch up with whatever changed while the daemon was down. */
    watcher_rescan(d->w, on_watch, d);
    return 0;
}

static void dmn_stop(struct dmn *d)
{
    jobwatch_free(d->p.jw); /* finishes the listing in hand */
    d->p.jw = NULL;
    gcd_free(d->gcd);         /* finishes the forget or prune step in hand */
    ingester_free(d->p.ig);   /* finishes or abandons the unit in hand */
    replicator_free(d->p.rp); /* workers stop after their current object */
    metrics_server_free(d->ms);
    if (d->reexec && d->p.m)
        dmn_metrics_carry(d); /* every thread that counts has stopped */
    metrics_free(d->p.m);     /* after every thread that counts */
    ctlserver_free(d->cs);    /* closes the connections and the socket */
    watcher_free(d->w);
    detector_free(d->p.det);
    repo_free(d->p.r);
    if (d->ep >= 0)
        close(d->ep);
    if (d->sigfd >= 0)
        close(d->sigfd);
    if (d->evfd >= 0)
        close(d->evfd);
    if (d->lockfd >= 0) {
        dmn_phase(d, NULL);
        close(d->lockfd);
    }
}

/* ---- the loop ---------------------------------------------------------- */

/* The daemon is degraded when its index failed a durable write, whichever
 * thread's commit it was (store/index.h: the index alone holds that
 * state).  Logged here once; status, restore and the control socket keep
 * answering, every write is refused. */
static void dmn_check_fatal(struct dmn *d)
{
    char why[INDEX_FATAL_WHY], f[INDEX_FATAL_WHY + 128], q[INDEX_FATAL_WHY + 64],
        st[INDEX_FATAL_WHY + 32];
    if (d->degraded_told || !index_fatal(repo_index(d->p.r), why, sizeof(why), NULL))
        return;
    d->degraded_told = true;
    snprintf(f, sizeof(f), "event=degraded reason=%s", log_quote(q, sizeof(q), why));
    log_event(LOG_LVL_ERROR, f,
              "%s; the daemon is degraded: it takes no new work, status and "
              "restore keep working; restart it after fixing the disk",
              why);
    snprintf(st, sizeof(st), "STATUS=degraded: %s", why);
    notify_systemd(st);
}

static int loop_timeout(struct dmn *d)
{
    int64_t now = mstime_mono(), t = now + 1000;
    int64_t dl = detector_deadline(d->p.det);
    if (dl >= 0 && dl < t)
        t = dl;
    dl = ctlserver_deadline(d->cs);
    if (dl >= 0 && dl < t)
        t = dl;
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
    } else if (tag == d->w) {
        watch_read(d);
    } else if (metrics_server_event(d->ms, tag)) {
        /* a scrape */
    } else {
        ctlserver_event(d->cs, tag);
    }
}

static void loop_run(struct dmn *d)
{
    struct epoll_event evs[32];
    while (!d->stop) {
        int n = epoll_wait(d->ep, evs, 32, loop_timeout(d));
        for (int k = 0; k < n; k++)
            loop_event(d, &evs[k]);
        dmn_check_fatal(d);
        ingest_done(d);
        handle_retakes(d);
        submit_ready(d);
        ctlserver_tick(d->cs);
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
    d->ep = d->sigfd = d->evfd = d->lockfd = -1;
    d->p.conf = &d->conf;
    d->p.root = d->root;
    d->p.started_ms = mstime_mono();
    d->p.started_wall_ms = mstime_wall();
    e = dmn_start(d);
    if (e == 0) {
        char f[256];
        snprintf(f, sizeof(f), "event=started version=%s regions=%zu quorum=%u", CKS_VERSION,
                 repo_nregions(d->p.r), d->conf.quorum);
        log_event(LOG_LVL_INFO, f, "watching \"%s\"; %zu regions, quorum %u; control socket \"%s\"",
                  d->root, repo_nregions(d->p.r), d->conf.quorum, d->conf.socket);
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
