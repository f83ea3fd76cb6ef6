/*
 * testmeet.c — the meeting point of testmeet.h.
 *
 * Design: one meeting per process, under one mutex: state IDLE (nobody
 * waits), WAITING (the first caller's key is kept), then SPENT.  A second
 * caller with the same key sets MET and wakes the first.  Compiled in
 * only with CKS_TEST_HOOKS (CMakeLists.txt: a build with the tests).
 */
#include "base/testmeet.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"

#ifdef CKS_TEST_HOOKS

#define TESTMEET_KEY_MAX 64

enum { MEET_OFF, MEET_IDLE, MEET_WAITING, MEET_MET, MEET_SPENT };

static pthread_mutex_t meet_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t meet_cv = PTHREAD_COND_INITIALIZER;
static int meet_state = -1; /* not read yet */
static long meet_ms;
static unsigned char meet_key[TESTMEET_KEY_MAX];
static size_t meet_len;

/* meet_state is written under meet_mu, atomically, so that a caller
 * finds the hook off or spent without taking the mutex. */
static void meet_set(int st)
{
    __atomic_store_n(&meet_state, st, __ATOMIC_RELEASE);
}

static void meet_read_env(const char *env)
{
    const char *v = getenv(env);
    char *end = NULL;
    meet_ms = v ? strtol(v, &end, 10) : 0;
    meet_set(v && *end == '\0' && meet_ms > 0 ? MEET_IDLE : MEET_OFF);
}

/* The first caller: waits (mutex held) until met or N ms have passed. */
static int meet_wait(const char *env)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += meet_ms / 1000;
    dl.tv_nsec += (meet_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    while (meet_state == MEET_WAITING && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&meet_cv, &meet_mu, &dl);
    int met = meet_state == MEET_MET;
    meet_set(MEET_SPENT);
    log_info("test hook %s: %s", env,
             met ? "a second thread came to the same point with the same key"
                 : "no second thread came to this point with the same key");
    return met;
}

int testmeet_at(const char *env, const void *key, size_t len)
{
    int met = 0, st = __atomic_load_n(&meet_state, __ATOMIC_ACQUIRE);
    if (st == MEET_OFF || st == MEET_SPENT)
        return 0;
    if (len > TESTMEET_KEY_MAX)
        len = TESTMEET_KEY_MAX;
    pthread_mutex_lock(&meet_mu);
    if (meet_state < 0)
        meet_read_env(env);
    if (meet_state == MEET_IDLE) {
        memcpy(meet_key, key, len);
        meet_len = len;
        meet_set(MEET_WAITING);
        met = meet_wait(env);
    } else if (meet_state == MEET_WAITING && len == meet_len && !memcmp(meet_key, key, len)) {
        meet_set(MEET_MET);
        pthread_cond_broadcast(&meet_cv);
        met = 1;
    }
    pthread_mutex_unlock(&meet_mu);
    return met;
}

#else /* a build without the tests: no hook */

int testmeet_at(const char *env, const void *key, size_t len)
{
    (void)env;
    (void)key;
    (void)len;
    return 0;
}

#endif
