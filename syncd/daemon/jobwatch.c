/*
 * jobwatch.c — the incomplete steps of a multi-node job, refreshed by a
 * thread of its own (see jobwatch.h).
 *
 * Design notes.
 * - The thread builds a whole new result and swaps it in under the lock;
 *   status renders under the lock (no I/O), so an answer is one listing's
 *   picture, never half of two.
 * - Runs come from the index (the runs this node took snapshots of: its
 *   parts); a node whose index knows no run of the job has nothing to show.
 */
#include "daemon/jobwatch.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "service/incomplete.h"

#define JW_POLL_S 2
#define JW_MAX_RUNS 64

struct jw_result {
    struct incomplete *v;
    size_t n;
};

struct jobwatch {
    struct repo *r; /* a repo_dup: regions of its own */
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
    repo_regions_retry(jw->r);
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

static void *jw_main(void *arg)
{
    struct jobwatch *jw = arg;
    for (;;) {
        jw_pass(jw);
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

int jobwatch_start(struct repo *r, struct jobwatch **ret)
{
    *ret = NULL;
    if (config_nodes(repo_conf(r)) <= 1)
        return 0;
    struct jobwatch *jw = calloc(1, sizeof(*jw));
    if (!jw)
        return -ENOMEM;
    pthread_mutex_init(&jw->mu, NULL);
    pthread_cond_init(&jw->cv, NULL);
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
