/*
 * ring.h — a first-in first-out queue of fixed-size elements in a circular
 * array: the storage of a bounded hand-off queue, popped at the head and
 * pushed at the tail without moving the others (a memmove'd array costs
 * the whole queue on every pop).
 *
 *   struct ring q = RING_INIT(sizeof(struct job));
 *   ring_reserve(&q, 64);          // room for 64 in all: 0 or -ENOMEM
 *   ring_push(&q, &job);           // 0, or -ENOBUFS when full: never allocates
 *   while (ring_pop(&q, &job))     // 1: the oldest copied out; 0: empty
 *       ...
 *   ring_free(&q);                 // then reusable, as RING_INIT left it
 *
 * Only ring_reserve allocates, and it keeps the elements and their order,
 * so a caller can make room for a result when it accepts the work and
 * never fail to hand the result back (daemon/ingest.c).  The ring owns
 * its array; elements are copied in and out by value.
 *
 * Not thread-safe: the caller's lock guards the ring (one lock per queue).
 */
#ifndef CKS_RING_H
#define CKS_RING_H

#include <stddef.h>
#include <stdint.h>

struct ring {
    uint8_t *v;
    size_t size; /* bytes per element */
    size_t cap;  /* elements the array holds */
    size_t head; /* index of the oldest */
    size_t n;    /* elements queued */
};

#define RING_INIT(elem_size)                                                                       \
    {                                                                                              \
        NULL, (elem_size), 0, 0, 0                                                                 \
    }

/* Room for at least total elements (queued ones included); 0 or -ENOMEM
 * (also when total * size overflows).  Never shrinks. */
int ring_reserve(struct ring *r, size_t total);
/* Copies *elem in at the tail; -ENOBUFS when n == cap. */
int ring_push(struct ring *r, const void *elem);
/* Copies the oldest element into *ret (may be NULL: dropped) and removes
 * it; 1, or 0 when the ring is empty. */
int ring_pop(struct ring *r, void *ret);
static inline size_t ring_len(const struct ring *r)
{
    return r->n;
}
static inline size_t ring_cap(const struct ring *r)
{
    return r->cap;
}
void ring_free(struct ring *r);

#endif
