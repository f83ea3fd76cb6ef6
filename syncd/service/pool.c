/*
 * pool.c — worker threads taking jobs from one FIFO.
 *
 * One mutex guards the FIFO and every job's done flag; workers wait on
 * `work`, callers of pool_wait on `done`.  With no threads, submit runs
 * the job on the caller's thread, so a pool of one costs nothing.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "service/pool.h"

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct pool_job *head, *tail;
    bool stop;
    size_t n;
    pthread_t *th;
};

struct pool_arg {
    struct pool *p;
    size_t i;
};

static void *pool_main(void *arg)
{
    struct pool_arg a = *(struct pool_arg *)arg;
    struct pool *p = a.p;
    free(arg);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && !p->head)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->head)
            break;
        struct pool_job *j = p->head;
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->run(j, a.i);
        pthread_mutex_lock(&p->mu);
        j->done = true;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int pool_new(size_t threads, struct pool **ret)
{
    struct pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    if (threads > 1 && !(p->th = calloc(threads, sizeof(*p->th)))) {
        pool_free(p);
        return -ENOMEM;
    }
    for (size_t i = 0; threads > 1 && i < threads; i++) {
        struct pool_arg *a = malloc(sizeof(*a));
        if (a)
            *a = (struct pool_arg){p, i};
        int e = a ? pthread_create(&p->th[i], NULL, pool_main, a) : ENOMEM;
        if (e) {
            free(a);
            pool_free(p);
            return -e;
        }
        p->n++;
    }
    *ret = p;
    return 0;
}

void pool_free(struct pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->n; i++)
        pthread_join(p->th[i], NULL);
    free(p->th);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

size_t pool_size(const struct pool *p)
{
    return p->n ? p->n : 1;
}

void pool_submit(struct pool *p, struct pool_job *job)
{
    job->next = NULL;
    job->done = false;
    if (!p->n) {
        job->run(job, 0);
        job->done = true;
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = job;
    else
        p->head = job;
    p->tail = job;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void pool_wait(struct pool *p, struct pool_job *job)
{
    if (!p->n)
        return;
    pthread_mutex_lock(&p->mu);
    while (!job->done)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void pool_window_init(struct pool_window *w, struct pool *p, struct pool_job **jobs, size_t n)
{
    *w = (struct pool_window){.pool = p, .jobs = jobs, .n = n};
}

bool pool_window_full(const struct pool_window *w)
{
    return w->count == w->n;
}

size_t pool_window_next(const struct pool_window *w)
{
    return (w->head + w->count) % w->n;
}

void pool_window_submit(struct pool_window *w)
{
    struct pool_job *j = w->jobs[pool_window_next(w)];
    w->count++;
    pool_submit(w->pool, j);
}

struct pool_job *pool_window_oldest(struct pool_window *w)
{
    if (!w->count)
        return NULL;
    struct pool_job *j = w->jobs[w->head];
    pool_wait(w->pool, j);
    w->head = (w->head + 1) % w->n;
    w->count--;
    return j;
}
