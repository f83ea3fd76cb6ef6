/*
 * objbuf.h — the daemon's shared buffer of encoded chunk objects: ingest
 * encodes each new chunk once and every region worker uploads the same
 * bytes, instead of each worker reading, hashing and compressing it again.
 *
 *   objbuf_new(budget, quorum, all_slots, &b);
 *   objbuf_put(b, id, codec, raw_len, obj, len, needs);  // ingest; may wait
 *   e = objbuf_take(b, slot);          // worker: the oldest it still needs
 *   e = objbuf_get(b, id, slot);       // worker: a queued chunk, if here
 *   objbuf_release(b, e, slot, stored);// worker: done with it
 *   objbuf_stop(b); objbuf_free(b);
 *
 * An entry names the regions (slot bits) that still need it; it goes when
 * none does.  Memory is bounded by budget: when a put finds the buffer
 * full it evicts the oldest entry that `quorum` regions already hold (or
 * that only lagging regions, those in backoff, still need), and otherwise
 * waits for the workers.  So the fastest `quorum` regions set the pace of
 * ingest, and a region that falls behind catches up from the snapshot's
 * pin folder (its queue entries), never holding the others back.
 *
 * An entry handed out by take/get stays valid until its release (it is
 * reference counted; eviction skips entries in use).  Thread-safe: one
 * mutex, never held across I/O.
 */
#ifndef CKS_OBJBUF_H
#define CKS_OBJBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/hash.h"

struct objbuf;

struct objbuf_ent {
    uint8_t id[HASH_LEN];
    uint8_t codec; /* enum chunkobj_codec */
    uint32_t raw_len;
    uint8_t *data; /* the encoded object, or its sealed envelope (sealed) */
    size_t len;
    bool sealed;         /* data is the envelope (daemon/ingest: sealed once for every region) */
    uint32_t stored_len; /* the encoded object's length (len without the envelope) */
    uint64_t unit;       /* the ingest unit that buffered it (daemon/sendlog.h), 0: none */
    /* private to objbuf.c */
    uint32_t needs, taken;
    unsigned refs;
    struct objbuf_ent *prev, *next, *hnext;
};

struct objbuf_stats {
    uint64_t puts, hits, evicted, waits;
    size_t entries, bytes;
};

/* budget: bytes of encoded objects held at most (at least one object is
 * always admitted).  all_slots: the slot bits of every configured region. */
int objbuf_new(size_t budget, unsigned quorum, uint32_t all_slots, struct objbuf **ret);
void objbuf_free(struct objbuf *b);
/* Copies the object in, needed by the regions of `needs`.  Returns 0, 1
 * when it was already buffered (its needs are merged), -ECANCELED after
 * objbuf_stop.  Waits while the buffer is full of entries the quorum
 * still needs. */
int objbuf_put(struct objbuf *b, const uint8_t id[HASH_LEN], uint8_t codec, uint32_t raw_len,
               const uint8_t *obj, size_t len, uint32_t needs, bool sealed, uint64_t unit);
/* The oldest entry slot needs and has not taken, now taken; NULL if none. */
struct objbuf_ent *objbuf_take(struct objbuf *b, unsigned slot);
bool objbuf_has(struct objbuf *b, const uint8_t id[HASH_LEN]);
/* The entry of id, taken by slot; NULL if not buffered. */
struct objbuf_ent *objbuf_get(struct objbuf *b, const uint8_t id[HASH_LEN], unsigned slot);
/* Ends slot's use of e.  stored: the region holds it now (its need is
 * cleared); otherwise it may be taken again later. */
void objbuf_release(struct objbuf *b, struct objbuf_ent *e, unsigned slot, bool stored);
/* A region in backoff or failed: its needs alone keep no entry. */
void objbuf_lagging(struct objbuf *b, unsigned slot, bool lagging);
/* Makes every waiting and later put return -ECANCELED. */
void objbuf_stop(struct objbuf *b);
void objbuf_stats(struct objbuf *b, struct objbuf_stats *ret);

#endif
