/*
 * objbuf.c — encoded chunk objects shared by ingest and the region workers.
 *
 * Design notes.
 * - Entries sit on one list, oldest first (ingest order, which is the
 *   order workers take them in), and in a chained hash table on the
 *   chunk id for the queue path's lookups.  A take scans the list from
 *   the head: the few hundred entries a budget holds make that cheaper
 *   than per-slot lists.
 * - Eviction never touches an entry in use (refs > 0), so a worker's
 *   pointer stays valid until its release, with no copy.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "engine/crypt.h"
#include "daemon/objbuf.h"

#define OBJBUF_BUCKETS 4096
#define OBJBUF_MAX_ENTRIES 65536

/* An object's bytes.  Large ones get pages of their own (mmap): page
 * aligned, so a dir region writes them around the page cache
 * (base/fileio.c), and given back to the kernel as soon as the object
 * goes (aligned heap blocks raised the daemon's peak RSS by 60-90 MiB). */
#define OB_MAP_MIN (1024 * 1024)

static uint8_t *ob_data_new(size_t len)
{
    if (len < OB_MAP_MIN)
        return malloc(len ? len : 1);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void ob_data_free(uint8_t *p, size_t len)
{
    if (p && len >= OB_MAP_MIN)
        munmap(p, len);
    else
        free(p);
}

struct objbuf {
    pthread_mutex_t mu;
    pthread_cond_t space;
    size_t budget, bytes, n;
    unsigned quorum;
    uint32_t all, lagging;
    bool stop;
    struct objbuf_ent *head, *tail;
    struct objbuf_ent *bucket[OBJBUF_BUCKETS];
    struct objbuf_stats st;
};

static size_t ob_hash(const uint8_t id[HASH_LEN])
{
    size_t h;
    memcpy(&h, id, sizeof(h));
    return h % OBJBUF_BUCKETS;
}

static struct objbuf_ent *ob_find(struct objbuf *b, const uint8_t id[HASH_LEN])
{
    for (struct objbuf_ent *e = b->bucket[ob_hash(id)]; e; e = e->hnext)
        if (memcmp(e->id, id, HASH_LEN) == 0)
            return e;
    return NULL;
}

static void ob_unlink(struct objbuf *b, struct objbuf_ent *e)
{
    struct objbuf_ent **p = &b->bucket[ob_hash(e->id)];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    if (e->prev)
        e->prev->next = e->next;
    else
        b->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        b->tail = e->prev;
    b->bytes -= e->len;
    b->n--;
    ob_data_free(e->data, e->len);
    free(e);
    pthread_cond_broadcast(&b->space);
}

/* Entries nobody needs go at once; others when the quorum holds them or
 * only lagging regions still want them. */
static bool ob_evictable(const struct objbuf *b, const struct objbuf_ent *e)
{
    uint32_t needs = e->needs & b->all;
    if (e->refs)
        return false;
    return (unsigned)__builtin_popcount(b->all & ~needs) >= b->quorum || (needs & ~b->lagging) == 0;
}

static bool ob_full(const struct objbuf *b, size_t len)
{
    return b->n && (b->bytes + len > b->budget || b->n >= OBJBUF_MAX_ENTRIES);
}

static bool ob_evict_one(struct objbuf *b)
{
    for (struct objbuf_ent *e = b->head; e; e = e->next)
        if (ob_evictable(b, e)) {
            ob_unlink(b, e);
            b->st.evicted++;
            return true;
        }
    return false;
}

int objbuf_new(size_t budget, unsigned quorum, uint32_t all_slots, struct objbuf **ret)
{
    struct objbuf *b = calloc(1, sizeof(*b));
    pthread_condattr_t ca;
    if (!b)
        return -ENOMEM;
    pthread_mutex_init(&b->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->space, &ca);
    pthread_condattr_destroy(&ca);
    b->budget = budget;
    b->quorum = quorum ? quorum : 1;
    b->all = all_slots;
    *ret = b;
    return 0;
}

void objbuf_free(struct objbuf *b)
{
    if (!b)
        return;
    while (b->head) {
        b->head->refs = 0;
        ob_unlink(b, b->head);
    }
    pthread_cond_destroy(&b->space);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

int objbuf_put(struct objbuf *b, const uint8_t id[HASH_LEN], uint8_t codec, uint32_t raw_len,
               const uint8_t *obj, size_t len, uint32_t needs, bool sealed, uint64_t unit)
{
    struct objbuf_ent *e = calloc(1, sizeof(*e));
    uint8_t *data = ob_data_new(len);
    int ret = 0;
    if (!e || !data) {
        free(e);
        ob_data_free(data, len);
        return -ENOMEM;
    }
    memcpy(data, obj, len);
    pthread_mutex_lock(&b->mu);
    struct objbuf_ent *have = ob_find(b, id);
    if (have) {
        have->needs |= needs;
        ret = 1;
        goto out;
    }
    while (!b->stop && ob_full(b, len))
        if (!ob_evict_one(b)) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += 1;
            b->st.waits++;
            pthread_cond_timedwait(&b->space, &b->mu, &ts);
        }
    if (b->stop) {
        ret = -ECANCELED;
        goto out;
    }
    memcpy(e->id, id, HASH_LEN);
    e->codec = codec;
    e->raw_len = raw_len;
    e->data = data;
    e->len = len;
    e->sealed = sealed;
    e->unit = unit;
    e->stored_len = (uint32_t)(sealed && len >= CRYPT_OVERHEAD ? len - CRYPT_OVERHEAD : len);
    e->needs = needs;
    e->prev = b->tail;
    if (b->tail)
        b->tail->next = e;
    else
        b->head = e;
    b->tail = e;
    size_t h = ob_hash(id);
    e->hnext = b->bucket[h];
    b->bucket[h] = e;
    b->bytes += len;
    b->n++;
    b->st.puts++;
    e = NULL;
    data = NULL;
out:
    pthread_mutex_unlock(&b->mu);
    free(e);
    ob_data_free(data, len);
    return ret;
}

struct objbuf_ent *objbuf_take(struct objbuf *b, unsigned slot)
{
    uint32_t bit = 1u << slot;
    struct objbuf_ent *e;
    pthread_mutex_lock(&b->mu);
    for (e = b->head; e; e = e->next)
        if ((e->needs & bit) && !(e->taken & bit))
            break;
    if (e) {
        e->taken |= bit;
        e->refs++;
    }
    pthread_mutex_unlock(&b->mu);
    return e;
}

bool objbuf_has(struct objbuf *b, const uint8_t id[HASH_LEN])
{
    pthread_mutex_lock(&b->mu);
    bool have = ob_find(b, id) != NULL;
    pthread_mutex_unlock(&b->mu);
    return have;
}

struct objbuf_ent *objbuf_get(struct objbuf *b, const uint8_t id[HASH_LEN], unsigned slot)
{
    pthread_mutex_lock(&b->mu);
    struct objbuf_ent *e = ob_find(b, id);
    if (e) {
        e->taken |= 1u << slot;
        e->refs++;
        b->st.hits++;
    }
    pthread_mutex_unlock(&b->mu);
    return e;
}

void objbuf_release(struct objbuf *b, struct objbuf_ent *e, unsigned slot, bool stored)
{
    uint32_t bit = 1u << slot;
    if (!e)
        return;
    pthread_mutex_lock(&b->mu);
    e->refs--;
    e->taken &= ~bit;
    if (stored)
        e->needs &= ~bit;
    if (e->refs == 0 && (e->needs & b->all) == 0)
        ob_unlink(b, e);
    else if (stored)
        pthread_cond_broadcast(&b->space); /* it may be evictable now */
    pthread_mutex_unlock(&b->mu);
}

void objbuf_lagging(struct objbuf *b, unsigned slot, bool lagging)
{
    pthread_mutex_lock(&b->mu);
    if (lagging)
        b->lagging |= 1u << slot;
    else
        b->lagging &= ~(1u << slot);
    pthread_cond_broadcast(&b->space);
    pthread_mutex_unlock(&b->mu);
}

void objbuf_stop(struct objbuf *b)
{
    pthread_mutex_lock(&b->mu);
    b->stop = true;
    pthread_cond_broadcast(&b->space);
    pthread_mutex_unlock(&b->mu);
}

void objbuf_stats(struct objbuf *b, struct objbuf_stats *ret)
{
    pthread_mutex_lock(&b->mu);
    *ret = b->st;
    ret->entries = b->n;
    ret->bytes = b->bytes;
    pthread_mutex_unlock(&b->mu);
}
