/*
 * test-testmeet.c — the test hook's meeting: armed by its environment
 * variable, the first caller waits for a second with the same key, both
 * learn that they met, and the hook is spent after; unarmed, nobody
 * waits.  One meeting per process:
 * the armed case runs in a child.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/testmeet.h"

#define ENV "CKS_UNIT_TESTMEET"

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *first(void *arg)
{
    *(int *)arg = testmeet_at(ENV, "k1", 2);
    return NULL;
}

/* The child: 0 when the meeting went as it should.  Whichever of the two
 * callers comes first waits; the other meets it. */
static int armed(void)
{
    pthread_t th;
    int r1 = -1;
    setenv(ENV, "20000", 1);
    double t0 = mono();
    if (pthread_create(&th, NULL, first, &r1) != 0)
        return 1;
    int r2 = testmeet_at(ENV, "k1", 2);
    pthread_join(th, NULL);
    if (r1 != 1 || r2 != 1)
        return 2;
    if (mono() - t0 > 10) /* met, not timed out */
        return 3;
    return testmeet_at(ENV, "k1", 2) == 0 ? 0 : 4; /* spent: no wait */
}

static void test_armed_meets(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(armed());
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_unarmed_passes(void **state)
{
    (void)state;
    unsetenv(ENV);
    double t0 = mono();
    assert_int_equal(testmeet_at(ENV, "k1", 2), 0);
    assert_true(mono() - t0 < 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_armed_meets),
        cmocka_unit_test(test_unarmed_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
