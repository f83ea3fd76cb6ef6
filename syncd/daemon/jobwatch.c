/*
 * jobwatch.c — the incomplete steps of a multi-node job, refreshed by a
 * thread of its own (see jobwatch.h).
 *
 * Design notes.
 * - The thread builds a whole new result and swaps it in under the lock;
 *   status renders under the lock (no I/O), so an answer is one listing's
 *   picture, never half of two.
 * - Listings cost requests (a few LISTs per region and run), so they run
 *   once a minute, and within JW_POLL_S after a status asked: an answer
 *   shows what the previous listing saw.  Failures are looked at every
 *   JW_POLL_S (no request unless a region fails).
 * - Runs come from the index (the runs this node took snapshots of: its
 *   parts); a node whose index knows no run of the job has nothing to show.
 * - A region worker that keeps failing cannot write into its own region,
 *   and owns no other: this thread, with handles of its own, writes the
 *   node's error on each step still pending there into every other
 *   region that is up (once per failure, not once per pass).
 */
#include "daemon/jobwatch.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "daemon/replicator.h"
#include "service/incomplete.h"
#include "service/nodeerr.h"
#include "store/queue.h"

#define JW_POLL_S 2  /* failures looked at; a listing when status asked since */
#define JW_LIST_S 60 /* a listing at least this often (each costs a few LISTs per region) */
#define JW_MAX_RUNS 64
#define JW_MAX_PEND 64
#define JW_MAX_SENT 64

struct jw_result {
    struct incomplete *v;
    size_t n;
};

/* An upload failure this node recorded: step, region, the failure's time. */
struct jw_sent {
    int64_t step;
    size_t region;
    int64_t error_ms;
};

/* A unit that could not be read, handed from the loop. */
struct jw_failed {
    char run[MANIFEST_MAX_FIELD + 1];
    int64_t step;
    char msg[NODEERR_MSG_MAX + 1];
};

struct jobwatch {
    struct jw_failed failed[8]; /* under mu */
    size_t nfailed;
    bool wanted;                      /* under mu: status was asked since the last listing */
    struct repo *r;                   /* a repo_dup: regions of its own */
    struct replicator *rp;            /* the region workers' states (replicator_status) */
    struct jw_sent sent[JW_MAX_SENT]; /* the thread's own: the records written */
    size_t nsent;
    pthread_t th;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct jw_result cur; /* under mu */
};

static void jw_result_free(struct jw_result *res)
{
    for (size_t i = 0; i < res->n; i++)
        incomplete_free(&res->v[i]);
    free(res->v);
    res->v = NULL;
    res->n = 0;
}

struct jw_runs {
    char run[JW_MAX_RUNS][MANIFEST_MAX_FIELD + 1];
    size_t n;
};

static int jw_runs_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct jw_runs *a = ud;
    (void)id;
    (void)s;
    for (size_t k = 0; k < a->n; k++)
        if (!strcmp(a->run[k], run))
            return 0;
    if (a->n < JW_MAX_RUNS)
        snprintf(a->run[a->n++], sizeof(a->run[0]), "%s", run);
    return 0;
}

/* One pass: every known run's incomplete steps, swapped in. */
static void jw_pass(struct jobwatch *jw)
{
    struct jw_runs *runs = calloc(1, sizeof(*runs));
    struct jw_result res = {0};
    struct index_txn *t;
    if (!runs)
        return;
    if (index_txn_begin(repo_index(jw->r), false, &t) == 0) {
        index_snap_foreach(t, NULL, jw_runs_cb, runs);
        index_txn_abort(t);
    }
    res.v = calloc(runs->n ? runs->n : 1, sizeof(*res.v));
    for (size_t k = 0; res.v && k < runs->n; k++) {
        int e = incomplete_collect(jw->r, runs->run[k], (int64_t)time(NULL),
                                   repo_conf(jw->r)->part_timeout, &res.v[res.n++]);
        if (e < 0)
            log_warn("incomplete steps of run '%s': %s", runs->run[k], err_str(e));
    }
    free(runs);
    pthread_mutex_lock(&jw->mu);
    struct jw_result old = jw->cur;
    jw->cur = res;
    pthread_mutex_unlock(&jw->mu);
    jw_result_free(&old);
}

/* A step of this node still pending (not committed in every region). */
struct jw_pend {
    struct {
        char run[MANIFEST_MAX_FIELD + 1];
        int64_t step;
        uint32_t committed; /* region slots */
    } v[JW_MAX_PEND];
    size_t n;
    struct index_txn *t;
};

static int jw_pend_cb(void *ud, const struct pending *p)
{
    struct jw_pend *a = ud;
    struct index_snap s;
    if (p->step < 0 || a->n == JW_MAX_PEND)
        return 0;
    snprintf(a->v[a->n].run, sizeof(a->v[0].run), "%s", p->run);
    a->v[a->n].step = p->step;
    a->v[a->n].committed = index_snap_get(a->t, p->run, p->id, &s) == 0 ? s.committed : 0;
    a->n++;
    return 0;
}

/* Whether the failure of region i at error_ms on step was recorded (and
 * records it as such when not). */
static bool jw_sent_once(struct jobwatch *jw, int64_t step, size_t i, int64_t error_ms)
{
    for (size_t k = 0; k < jw->nsent; k++)
        if (jw->sent[k].step == step && jw->sent[k].region == i) {
            if (jw->sent[k].error_ms == error_ms)
                return true;
            jw->sent[k].error_ms = error_ms;
            return false;
        }
    if (jw->nsent == JW_MAX_SENT) /* the oldest goes */
        memmove(jw->sent, jw->sent + 1, --jw->nsent * sizeof(jw->sent[0]));
    jw->sent[jw->nsent++] = (struct jw_sent){step, i, error_ms};
    return false;
}

/* Writes "node K could not upload step S to region X" into every other
 * region that is up. */
static void jw_report_one(struct jobwatch *jw, const struct region_status *st, const char *run,
                          int64_t step, size_t i)
{
    const struct config *c = repo_conf(jw->r);
    char msg[NODEERR_MSG_MAX + 1];
    snprintf(msg, sizeof(msg),
             "node %u could not upload its part of step %lld to region '%s' (%u failed rounds): %s",
             c->node_rank, (long long)step, repo_region(jw->r, i)->conf.name, st[i].failures,
             st[i].last_error);
    REPO_FOR_HEALTHY(jw->r, j) {
        if (j == i || st[j].state != REGION_OK)
            continue;
        if (nodeerr_put(repo_region(jw->r, j), run, step, c->node_rank, config_nodes(c), msg) < 0)
            log_warn("run '%s' step %lld: this node's error could not be written in region '%s': "
                     "%s",
                     run, (long long)step, repo_region(jw->r, j)->conf.name,
                     region_last_error(repo_region(jw->r, j)));
    }
}

/* Upload failures of this node's pending steps, into the other regions. */
static void jw_report(struct jobwatch *jw)
{
    struct region_status st[CONFIG_MAX_REGIONS];
    bool failing = false;
    size_t n = repo_nregions(jw->r);
    for (size_t i = 0; i < n; i++) {
        replicator_status(jw->rp, i, &st[i]);
        failing |= st[i].state != REGION_OK && st[i].last_error_ms;
    }
    struct jw_pend *a = failing ? calloc(1, sizeof(*a)) : NULL;
    if (!a || index_txn_begin(repo_index(jw->r), false, &a->t) < 0) {
        free(a);
        return;
    }
    queue_pending_foreach(a->t, jw_pend_cb, a);
    index_txn_abort(a->t);
    for (size_t k = 0; k < a->n; k++)
        for (size_t i = 0; i < n; i++)
            if (st[i].state != REGION_OK && st[i].last_error_ms &&
                !(a->v[k].committed >> repo_region(jw->r, i)->slot & 1) &&
                !jw_sent_once(jw, a->v[k].step, i, st[i].last_error_ms))
                jw_report_one(jw, st, a->v[k].run, a->v[k].step, i);
    free(a);
}

void jobwatch_unit_failed(struct jobwatch *jw, const char *run, int64_t step, const char *unit,
                          const char *why)
{
    if (!jw)
        return;
    const struct config *c = repo_conf(jw->r);
    pthread_mutex_lock(&jw->mu);
    if (jw->nfailed == sizeof(jw->failed) / sizeof(jw->failed[0]))
        memmove(jw->failed, jw->failed + 1, --jw->nfailed * sizeof(jw->failed[0]));
    struct jw_failed *f = &jw->failed[jw->nfailed++];
    snprintf(f->run, sizeof(f->run), "%s", run);
    f->step = step;
    snprintf(f->msg, sizeof(f->msg), "node %u could not read its part of step %lld (\"%s\"): %s",
             c->node_rank, (long long)step, unit, why);
    pthread_cond_broadcast(&jw->cv);
    pthread_mutex_unlock(&jw->mu);
}

/* The units the loop said could not be read, into every region up. */
static void jw_report_failed(struct jobwatch *jw)
{
    struct jw_failed v[8];
    const struct config *c = repo_conf(jw->r);
    pthread_mutex_lock(&jw->mu);
    size_t n = jw->nfailed;
    memcpy(v, jw->failed, n * sizeof(v[0]));
    jw->nfailed = 0;
    pthread_mutex_unlock(&jw->mu);
    for (size_t k = 0; k < n; k++)
        REPO_FOR_HEALTHY(jw->r, j) {
            struct region *rg = repo_region(jw->r, j);
            if (nodeerr_put(rg, v[k].run, v[k].step, c->node_rank, config_nodes(c), v[k].msg) < 0)
                log_warn("run '%s' step %lld: this node's error could not be written in region "
                         "'%s': %s",
                         v[k].run, (long long)v[k].step, rg->conf.name, region_last_error(rg));
        }
}

static double jw_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *jw_main(void *arg)
{
    struct jobwatch *jw = arg;
    double next_list = 0;
    for (;;) {
        repo_regions_retry(jw->r); /* every pass tries every region again */
        jw_report_failed(jw);
        if (jw->rp)
            jw_report(jw);
        pthread_mutex_lock(&jw->mu);
        bool list = jw->wanted || jw_mono() >= next_list;
        jw->wanted = false;
        pthread_mutex_unlock(&jw->mu);
        if (list) {
            jw_pass(jw);
            next_list = jw_mono() + JW_LIST_S;
        }
        pthread_mutex_lock(&jw->mu);
        if (!jw->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += JW_POLL_S;
            pthread_cond_timedwait(&jw->cv, &jw->mu, &ts);
        }
        bool stop = jw->stop;
        pthread_mutex_unlock(&jw->mu);
        if (stop)
            break;
    }
    return NULL;
}

int jobwatch_start(struct repo *r, struct replicator *rp, struct jobwatch **ret)
{
    *ret = NULL;
    if (config_nodes(repo_conf(r)) <= 1)
        return 0;
    struct jobwatch *jw = calloc(1, sizeof(*jw));
    if (!jw)
        return -ENOMEM;
    pthread_mutex_init(&jw->mu, NULL);
    pthread_cond_init(&jw->cv, NULL);
    jw->rp = rp;
    struct buf err = BUF_INIT;
    int e = repo_dup(r, &jw->r, &err);
    if (e < 0) {
        log_error("%s", buf_str(&err));
        buf_free(&err);
        jobwatch_free(jw);
        return e;
    }
    buf_free(&err);
    if ((e = pthread_create(&jw->th, NULL, jw_main, jw)) != 0) {
        jobwatch_free(jw);
        return -e;
    }
    jw->started = true;
    *ret = jw;
    return 0;
}

void jobwatch_json(struct jobwatch *jw, struct json *j)
{
    json_arr_begin(j);
    if (jw) {
        pthread_mutex_lock(&jw->mu);
        jw->wanted = true; /* the next answer is at most JW_POLL_S behind this one */
        for (size_t i = 0; i < jw->cur.n; i++)
            incomplete_json(j, &jw->cur.v[i]);
        pthread_mutex_unlock(&jw->mu);
    }
    json_arr_end(j);
}

void jobwatch_free(struct jobwatch *jw)
{
    if (!jw)
        return;
    pthread_mutex_lock(&jw->mu);
    jw->stop = true;
    pthread_cond_broadcast(&jw->cv);
    pthread_mutex_unlock(&jw->mu);
    if (jw->started)
        pthread_join(jw->th, NULL);
    jw_result_free(&jw->cur);
    repo_free(jw->r);
    pthread_mutex_destroy(&jw->mu);
    pthread_cond_destroy(&jw->cv);
    free(jw);
}
