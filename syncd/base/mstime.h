/*
 * mstime.h — the two clocks the daemon reads, in milliseconds.
 *
 *   int64_t t = mstime_mono();   // CLOCK_MONOTONIC: deadlines, ages, uptime
 *   int64_t w = mstime_wall();   // CLOCK_REALTIME: times shown to people
 *   int64_t u = mstime_mono_us(); // CLOCK_MONOTONIC in microseconds: latencies
 *
 * Deadlines are always monotonic (a clock step must not fire or stall
 * them); wall time is only reported.  Thread-safe, no state.
 */
#ifndef CKS_MSTIME_H
#define CKS_MSTIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t mstime_of(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t mstime_mono(void)
{
    return mstime_of(CLOCK_MONOTONIC);
}

static inline int64_t mstime_wall(void)
{
    return mstime_of(CLOCK_REALTIME);
}

/* CLOCK_MONOTONIC in microseconds: how long one request took. */
static inline int64_t mstime_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
