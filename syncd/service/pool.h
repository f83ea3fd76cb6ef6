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

#endif
