/*
 * pool.h — a fixed set of worker threads for the CPU-heavy steps of a
 * pipeline (hashing, compression, uploads to synchronous regions), sized
 * by repo_workers(): config `workers`, or one per CPU.
 *
 *   pool_new(n, &p);                  // n <= 1: no threads, jobs run inline
 *   job.run = fn; pool_submit(p, &job);
 *   pool_wait(p, &job);               // until fn has returned
 *   pool_free(p);                     // after every job was waited for
 *
 * fn gets the job and the index of the thread running it (0 .. n-1, 0
 * inline), so a caller can keep per-thread state (a compression context,
 * region handles) in an array.  Jobs start in submission order; the
 * caller owns each job and keeps it alive until pool_wait returns.
 * Thread-safe: submit and wait from any one thread.
 */
#ifndef CKS_POOL_H
#define CKS_POOL_H

#include <stdbool.h>
#include <stddef.h>

struct pool_job {
    void (*run)(struct pool_job *job, size_t thread);
    /* private to pool.c */
    struct pool_job *next;
    bool done;
};

struct pool;

int pool_new(size_t threads, struct pool **ret);
void pool_free(struct pool *p);
/* Threads jobs may run on at once: at least 1. */
size_t pool_size(const struct pool *p);
void pool_submit(struct pool *p, struct pool_job *job);
void pool_wait(struct pool *p, struct pool_job *job);

/* An ordered window over a pool: up to n jobs in flight, handed back in
 * the order they were submitted (a chunk pipeline's results must be
 * applied in file order).  jobs[] is the caller's, one per slot:
 *
 *   pool_window_init(&w, p, jobs, n);
 *   while (more) {
 *       if (pool_window_full(&w)) apply(pool_window_oldest(&w));
 *       fill(jobs[pool_window_next(&w)]); pool_window_submit(&w);
 *   }
 *   while ((j = pool_window_oldest(&w))) apply(j);
 */
struct pool_window {
    struct pool *pool;
    struct pool_job **jobs;
    size_t n, head, count;
};

void pool_window_init(struct pool_window *w, struct pool *p, struct pool_job **jobs, size_t n);
bool pool_window_full(const struct pool_window *w);
/* The slot to fill next (valid while the window is not full). */
size_t pool_window_next(const struct pool_window *w);
void pool_window_submit(struct pool_window *w);
/* Waits for the oldest job in flight and takes it out; NULL when none. */
struct pool_job *pool_window_oldest(struct pool_window *w);

#endif
