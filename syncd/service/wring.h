/*
 * wring.h — restore's file writes through io_uring, so writing to disk
 * overlaps downloading the next chunks.
 *
 *   struct wring w; wring_init(&w, 64, memory / 4);
 *   wring_write(&w, fd, data, len, off);   // data is copied; returns at once
 *   wring_drain(&w);                       // every write so far is done
 *   wring_free(&w);
 *
 * Writes in flight are bounded by the byte budget (wring_write waits for
 * completions beyond it).  Where io_uring is not available (old kernels,
 * seccomp filters in containers) everything falls back to pwrite(2), with
 * one notice.  A failed or short write is reported by the next call that
 * returns an error (wring_write or wring_drain).  One thread.
 */
#ifndef CKS_WRING_H
#define CKS_WRING_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wring {
    struct io_uring ring;
    bool ok; /* io_uring in use */
    unsigned inflight;
    size_t bytes, budget;
    int err; /* first error seen, sticky */
};

void wring_init(struct wring *w, unsigned depth, size_t budget);
int wring_write(struct wring *w, int fd, const void *data, size_t len, uint64_t off);
int wring_drain(struct wring *w);
void wring_free(struct wring *w);

#endif
