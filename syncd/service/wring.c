/*
 * wring.c — a small write queue over liburing.  Each write owns a copy of
 * its bytes (the caller's buffer is reused for the next chunk) and is
 * freed when its completion is reaped.  A short write finishes with
 * pwrite, so callers see all-or-error semantics either way.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/log.h"
#include "service/wring.h"

struct wreq {
    int fd;
    size_t len;
    uint64_t off;
    uint8_t data[];
};

void wring_init(struct wring *w, unsigned depth, size_t budget)
{
    static bool told;
    memset(w, 0, sizeof(*w));
    w->budget = budget;
    int e = io_uring_queue_init(depth, &w->ring, 0);
    w->ok = e == 0;
    if (!w->ok && !told) {
        log_info("io_uring is not available (%s): writing with pwrite", strerror(-e));
        told = true;
    }
}

static void wring_reap_one(struct wring *w, struct io_uring_cqe *cqe)
{
    struct wreq *q = io_uring_cqe_get_data(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&w->ring, cqe);
    if (res < 0 && !w->err)
        w->err = res;
    else if (res >= 0 && (size_t)res < q->len) {
        int e = fileio_pwrite_full(q->fd, q->data + res, q->len - (size_t)res,
                                   (off_t)(q->off + (uint64_t)res));
        if (e < 0 && !w->err)
            w->err = e;
    }
    w->inflight--;
    w->bytes -= q->len;
    free(q);
}

/* Reaps completions; waits for at least one when wait is set. */
static int wring_reap(struct wring *w, bool wait)
{
    struct io_uring_cqe *cqe;
    if (wait && w->inflight) {
        int e = io_uring_wait_cqe(&w->ring, &cqe);
        if (e < 0)
            return e;
        wring_reap_one(w, cqe);
    }
    while (w->inflight && io_uring_peek_cqe(&w->ring, &cqe) == 0)
        wring_reap_one(w, cqe);
    return 0;
}

int wring_write(struct wring *w, int fd, const void *data, size_t len, uint64_t off)
{
    if (!w->ok)
        return fileio_pwrite_full(fd, data, len, (off_t)off);
    if (w->err)
        return w->err;
    while (w->inflight && w->bytes + len > w->budget)
        if (wring_reap(w, true) < 0)
            break;
    struct wreq *q = malloc(sizeof(*q) + len);
    if (!q)
        return -ENOMEM;
    q->fd = fd;
    q->len = len;
    q->off = off;
    memcpy(q->data, data, len);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
    while (!sqe) { /* the submission queue is full: make room */
        io_uring_submit(&w->ring);
        wring_reap(w, true);
        sqe = io_uring_get_sqe(&w->ring);
    }
    io_uring_prep_write(sqe, fd, q->data, (unsigned)len, off);
    io_uring_sqe_set_data(sqe, q);
    w->inflight++;
    w->bytes += len;
    int e = io_uring_submit(&w->ring);
    if (e < 0 && !w->err)
        w->err = e;
    wring_reap(w, false);
    return w->err;
}

int wring_drain(struct wring *w)
{
    while (w->ok && w->inflight)
        if (wring_reap(w, true) < 0)
            break;
    return w->err;
}

void wring_free(struct wring *w)
{
    if (!w->ok)
        return;
    wring_drain(w);
    io_uring_queue_exit(&w->ring);
    w->ok = false;
}
