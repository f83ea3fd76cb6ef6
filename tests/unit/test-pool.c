/*
 * test-pool.c — the worker pool: every job runs exactly once, on a thread
 * index below the pool's size, jobs overlap when there are threads, a pool
 * of one runs each job inline before submit returns, and a window hands
 * jobs back in the order they were submitted.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "service/pool.h"

struct tjob {
    struct pool_job pj;
    int runs;
    size_t thread;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int running, most;

static void tjob_run(struct pool_job *pj, size_t t)
{
    struct tjob *j = (struct tjob *)pj;
    pthread_mutex_lock(&mu);
    if (++running > most)
        most = running;
    pthread_mutex_unlock(&mu);
    usleep(20000);
    j->runs++;
    j->thread = t;
    pthread_mutex_lock(&mu);
    running--;
    pthread_mutex_unlock(&mu);
}

static void run_pool(size_t threads, size_t want_size)
{
    struct pool *p;
    struct tjob jobs[16] = {0};
    most = 0;
    assert_int_equal(pool_new(threads, &p), 0);
    assert_int_equal(pool_size(p), want_size);
    for (size_t i = 0; i < 16; i++) {
        jobs[i].pj.run = tjob_run;
        pool_submit(p, &jobs[i].pj);
        if (want_size == 1)
            assert_int_equal(jobs[i].runs, 1); /* inline */
    }
    for (size_t i = 0; i < 16; i++) {
        pool_wait(p, &jobs[i].pj);
        assert_int_equal(jobs[i].runs, 1);
        assert_true(jobs[i].thread < want_size);
    }
    pool_free(p);
    if (want_size > 1)
        assert_true(most > 1);
    else
        assert_int_equal(most, 1);
}

static void test_inline(void **state)
{
    (void)state;
    run_pool(0, 1);
    run_pool(1, 1);
}

static void test_threads(void **state)
{
    (void)state;
    run_pool(4, 4);
}

/* The window hands jobs back in submission order, whatever order they
 * finish in (later jobs sleep less), never more than n in flight. */
struct ojob {
    struct pool_job pj;
    int seq;
};

static void ojob_run(struct pool_job *pj, size_t t)
{
    struct ojob *j = (struct ojob *)pj;
    (void)t;
    usleep((useconds_t)(4 - j->seq % 4) * 5000);
}

static void test_window(void **state)
{
    struct pool *p;
    struct ojob jobs[3];
    struct pool_job *ptr[3] = {&jobs[0].pj, &jobs[1].pj, &jobs[2].pj};
    struct pool_window w;
    int next = 0, want = 0;
    (void)state;
    assert_int_equal(pool_new(3, &p), 0);
    pool_window_init(&w, p, ptr, 3);
    assert_null(pool_window_oldest(&w));
    while (next < 20) {
        if (pool_window_full(&w)) {
            struct ojob *j = (struct ojob *)pool_window_oldest(&w);
            assert_int_equal(j->seq, want++);
        }
        assert_false(pool_window_full(&w));
        struct ojob *j = &jobs[pool_window_next(&w)];
        j->seq = next++;
        j->pj.run = ojob_run;
        pool_window_submit(&w);
    }
    for (struct ojob *j; (j = (struct ojob *)pool_window_oldest(&w));)
        assert_int_equal(j->seq, want++);
    assert_int_equal(want, 20);
    pool_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inline),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
