/*
 * queue.h — the daemon's persistent work, in two index tables.
 *
 *   pending   seq -> a snapshot that is ingested but not yet committed in
 *             every region: its id, run, unit, pin folder and manifest.
 *   queue     (region slot, newest-first seq, kind, chunk id) -> where the
 *             chunk's bytes are (file index in the manifest, offset, length).
 *
 * Key order is the work order: for one region, the newest snapshot first;
 * within a snapshot every chunk entry before its publish entry, so a
 * manifest is published in a region only after all its chunks are there.
 * Records are versioned little-endian encodings; a corrupt record reads as
 * CKS_E_FORMAT.  Called inside index transactions; no state of its own.
 */
#ifndef CKS_QUEUE_H
#define CKS_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/manifest.h"
#include "store/index.h"

/* QUEUE_RECIPE (issue 27): the recipe object of chunk id, whose key is
 * layout_recipe(id, the sig of id's r line in the snapshot's manifest) and
 * whose bytes are spooled (daemon/rspool.h), never a chunks/ object.  It
 * sorts with the chunk entries, before the publish entry (its key is a
 * chunk entry's; a snapshot names an id either plain or as a recipe, so
 * the two never share a key), and its record says which it is (an older
 * daemon reads it as CKS_E_FORMAT). */
enum qkind { QUEUE_CHUNK = 0, QUEUE_PUBLISH = 1, QUEUE_RECIPE = 2 };

struct qentry {
    unsigned slot;
    uint64_t seq;
    enum qkind kind;
    uint8_t id[HASH_LEN]; /* zero for PUBLISH */
    uint32_t file;        /* manifest file index holding the chunk; RECIPE: 1 when
                           * the spooled bytes are sealed (an encrypted repository) */
    uint64_t off;         /* RECIPE: the chunk's raw length */
    uint32_t len;         /* RECIPE: the object's length before sealing */
};

struct pending {
    uint64_t seq;
    int64_t step;
    int64_t created_ms;    /* wall clock, for lag */
    bool pinned;           /* bytes are read from pin/<file index> */
    uint64_t queued_bytes; /* chunk bytes to upload over all regions: queued at ingest,
                            * plus those uploaded from the object buffer before it */
    char id[MANIFEST_ID_MAX + 1];
    char run[MANIFEST_MAX_FIELD + 1];
    char unit[MANIFEST_MAX_PATH + 1]; /* relative to the watch root */
    char pin[MANIFEST_MAX_PATH + 1];  /* absolute pin folder */
    const uint8_t *manifest;          /* points into the transaction's map */
    size_t manifest_len;
};

int queue_pending_put(struct index_txn *t, const struct pending *p);
int queue_pending_get(struct index_txn *t, uint64_t seq, struct pending *ret);
int queue_pending_del(struct index_txn *t, uint64_t seq);
int queue_pending_foreach(struct index_txn *t, int (*cb)(void *ud, const struct pending *p),
                          void *ud);

int queue_put(struct index_txn *t, const struct qentry *q);
int queue_del(struct index_txn *t, const struct qentry *q);
/* The first (most urgent) entry of a region; -ENOENT when it has none. */
int queue_first(struct index_txn *t, unsigned slot, struct qentry *ret);
/* Visits a region's entries in work order until cb returns non-zero
 * (which is returned; 0 when all were visited). */
int queue_walk(struct index_txn *t, unsigned slot, int (*cb)(void *ud, const struct qentry *q),
               void *ud);
/* Does seq still have entries in any region? 1 yes, 0 no. */
int queue_has_seq(struct index_txn *t, uint64_t seq, unsigned nslots);
/* Object bytes (chunks' raw, recipes' encoded) still queued for seq over
 * all regions. */
int queue_seq_bytes(struct index_txn *t, uint64_t seq, unsigned nslots, uint64_t *ret);
/* Deletes every entry of seq in every region. */
int queue_drop_seq(struct index_txn *t, uint64_t seq, unsigned nslots);
/* Object entries (chunks and recipes) and their bytes waiting for a
 * region, and the oldest seq among them. */
int queue_stats(struct index_txn *t, unsigned slot, uint64_t *ret_chunks, uint64_t *ret_bytes,
                uint64_t *ret_oldest_seq);
/* Allocates the next snapshot sequence number (write transaction). */
int queue_next_seq(struct index_txn *t, uint64_t *ret);

#endif
