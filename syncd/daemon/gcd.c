/*
 * gcd.c — retention after each durable snapshot, prune on a schedule
 * (see gcd.h).
 *
 * Design notes.
 * - The thread's repo is a copy of the daemon's (configuration, agreed
 *   parameters, the shared index) with region handles of its own: a
 *   struct region is used by one thread at a time.  It never closes the
 *   index; the daemon does.
 * - Work is found by polling the index (cheap: one read transaction over
 *   the snapshot records) rather than by hooks in the region workers, so a
 *   restart picks up what the last run had not done.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "service/gc.h"
#include "daemon/gcd.h"
#include "service/retention.h"

#define POLL_MS 3000
#define MAX_RUNS 256

struct gcd_run {
    char run[MANIFEST_MAX_FIELD + 1];
    char applied[MANIFEST_ID_MAX + 1]; /* newest durable snapshot it was applied after */
};

struct gcd {
    struct repo *r; /* a repo_dup of the daemon's: regions and health of its own */
    pthread_t th;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool retention; /* some policy removes something */
    struct gcd_run runs[MAX_RUNS];
    size_t nruns;
    double next_prune;
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The newest durable snapshot of each run the index knows. */
struct newest_acc {
    const struct config *conf;
    struct gcd_run found[MAX_RUNS];
    size_t n;
};

static int newest_cb(void *ud, const char *run, const char *id, const struct index_snap *s)
{
    struct newest_acc *a = ud;
    if ((unsigned)__builtin_popcount(s->committed) < a->conf->quorum)
        return 0;
    size_t k = 0;
    while (k < a->n && strcmp(a->found[k].run, run))
        k++;
    if (k == a->n) {
        if (a->n == MAX_RUNS)
            return 0;
        snprintf(a->found[a->n].run, sizeof(a->found[0].run), "%s", run);
        a->found[a->n++].applied[0] = 0;
    }
    if (strcmp(id, a->found[k].applied) > 0) /* ids sort by time */
        snprintf(a->found[k].applied, sizeof(a->found[k].applied), "%s", id);
    return 0;
}

static void gcd_retention(struct gcd *g)
{
    struct newest_acc *a = calloc(1, sizeof(*a));
    struct index_txn *t;
    if (!a)
        return;
    a->conf = repo_conf(g->r);
    if (index_txn_begin(repo_index(g->r), false, &t) == 0) {
        index_snap_foreach(t, NULL, newest_cb, a);
        index_txn_abort(t);
    }
    for (size_t k = 0; k < a->n; k++) {
        const struct gcd_run *f = &a->found[k];
        const struct retention_policy *pol = config_policy(repo_conf(g->r), f->run);
        struct gcd_run *mine = NULL;
        for (size_t i = 0; i < g->nruns && !mine; i++)
            if (!strcmp(g->runs[i].run, f->run))
                mine = &g->runs[i];
        if (!mine && g->nruns < MAX_RUNS) {
            mine = &g->runs[g->nruns++];
            snprintf(mine->run, sizeof(mine->run), "%s", f->run);
            mine->applied[0] = 0;
        }
        if (!mine || !retention_policy_active(pol) || !strcmp(mine->applied, f->applied))
            continue;
        struct retention_plan plan;
        struct buf err = BUF_INIT;
        double t0 = mono();
        repo_regions_retry(g->r); /* every pass tries every region again */
        int e = retention_run(g->r, f->run, pol, false, &plan, &err);
        if (e < 0) {
            log_warn("retention of run '%s': %s; trying again after the next snapshot", f->run,
                     buf_str(&err)[0] ? buf_str(&err) : err_str(e));
        } else {
            snprintf(mine->applied, sizeof(mine->applied), "%s", f->applied);
            /* also when nothing was due: another instance's forget may
             * have been first, and the line says the policy ran */
            log_info("retention of run '%s' after %s: forgot %zu of %zu snapshot(s) (%.3fs)",
                     f->run, f->applied, plan.nforget, plan.n, mono() - t0);
        }
        retention_plan_free(&plan);
        buf_free(&err);
    }
    free(a);
}

static void gcd_prune(struct gcd *g)
{
    struct gc_opts o = {.grace = -1};
    struct gc_result *res = calloc(1, sizeof(*res));
    struct buf err = BUF_INIT;
    if (!res)
        return;
    repo_regions_retry(g->r);
    int e = gc_prune(g->r, &o, res, &err);
    uint64_t deleted = 0, bytes = 0;
    for (size_t i = 0; i < res->nregions; i++) {
        deleted += res->region[i].deleted;
        bytes += res->region[i].deleted_bytes;
    }
    if (e == CKS_E_BUSY)
        log_info("scheduled prune skipped: %s", buf_str(&err));
    else if (e < 0)
        log_warn("scheduled prune: %s", buf_str(&err)[0] ? buf_str(&err) : err_str(e));
    else
        log_info("scheduled prune: %llu chunk(s), %llu bytes deleted, %llu forgotten snapshot(s) "
                 "removed (%.1fs)",
                 (unsigned long long)deleted, (unsigned long long)bytes,
                 (unsigned long long)res->forgotten, res->seconds);
    buf_free(&err);
    free(res);
}

static void *gcd_main(void *arg)
{
    struct gcd *g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        if (!g->stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += POLL_MS / 1000;
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        }
        bool stop = g->stop;
        pthread_mutex_unlock(&g->mu);
        if (stop)
            break;
        /* Degraded (the index failed a durable write, store/index.h):
         * deleting from the regions what the index can no longer record
         * would only widen the gap; the daemon reports it. */
        if (index_fatal(repo_index(g->r), NULL, 0, NULL))
            continue;
        if (g->retention)
            gcd_retention(g);
        if (repo_conf(g->r)->prune_interval && mono() >= g->next_prune) {
            gcd_prune(g);
            g->next_prune = mono() + (double)repo_conf(g->r)->prune_interval;
        }
    }
    return NULL;
}

int gcd_start(struct repo *r, struct gcd **ret)
{
    bool retention = retention_policy_active(&repo_conf(r)->retention);
    for (size_t i = 0; i < repo_conf(r)->npolicies; i++)
        retention |= retention_policy_active(&repo_conf(r)->policies[i]);
    *ret = NULL;
    if (!retention && !repo_conf(r)->prune_interval)
        return 0;
    struct gcd *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->retention = retention;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    struct buf err = BUF_INIT;
    int e = repo_dup(r, &g->r, &err); /* regions of its own */
    if (e < 0) {
        log_error("%s", buf_str(&err));
        buf_free(&err);
        gcd_free(g);
        return e;
    }
    buf_free(&err);
    g->next_prune = mono() + (double)repo_conf(r)->prune_interval;
    e = pthread_create(&g->th, NULL, gcd_main, g);
    if (e) {
        gcd_free(g);
        return -e;
    }
    g->started = true;
    log_info("retention %s; prune %s", retention ? "applied after each durable snapshot" : "off",
             repo_conf(r)->prune_interval ? "scheduled" : "not scheduled");
    *ret = g;
    return 0;
}

void gcd_free(struct gcd *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->started)
        pthread_join(g->th, NULL);
    repo_free(g->r);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}
