/*
 * ring.c — a circular FIFO of fixed-size elements (see ring.h).
 *
 * Growing copies the queued elements, oldest first, to the start of a new
 * array: head goes back to 0 and the order stays, whatever the wrap.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/ring.h"

int ring_reserve(struct ring *r, size_t total)
{
    if (total <= r->cap)
        return 0;
    if (!r->size || total > SIZE_MAX / r->size)
        return -ENOMEM;
    uint8_t *v = malloc(total * r->size);
    if (!v)
        return -ENOMEM;
    size_t first = r->cap - r->head < r->n ? r->cap - r->head : r->n;
    if (r->n) {
        memcpy(v, r->v + r->head * r->size, first * r->size);
        memcpy(v + first * r->size, r->v, (r->n - first) * r->size);
    }
    free(r->v);
    r->v = v;
    r->cap = total;
    r->head = 0;
    return 0;
}

int ring_push(struct ring *r, const void *elem)
{
    if (r->n == r->cap)
        return -ENOBUFS;
    size_t tail = (r->head + r->n) % r->cap;
    memcpy(r->v + tail * r->size, elem, r->size);
    r->n++;
    return 0;
}

int ring_pop(struct ring *r, void *ret)
{
    if (!r->n)
        return 0;
    if (ret)
        memcpy(ret, r->v + r->head * r->size, r->size);
    r->head = (r->head + 1) % r->cap;
    r->n--;
    return 1;
}

void ring_free(struct ring *r)
{
    free(r->v);
    r->v = NULL;
    r->cap = r->head = r->n = 0;
}
