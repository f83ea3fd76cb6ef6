/*
 * index.h — the local LMDB index: a cache of what the regions hold plus the
 * daemon's work queues.  `ckptsync reindex` can rebuild it from a region.
 *
 * Databases (one LMDB environment in <state>/index/):
 *   meta       string key -> value ("format", "repo_id", "region:<name>" -> slot)
 *   chunks     id[32] -> struct index_chunk (sizes, codec, refcount, presence)
 *   files      struct index_file_key (40 bytes; 41 with a digest kind) ->
 *              digest[32] + n * {id[32], len u32 LE}
 *   snapshots  "<run>\0<id>" -> struct index_snap
 *   recipes    id[32] + sig[8] -> a recipe object (store/recidx.h)
 *
 * Calling sequence:
 *   index_open(dir, &ix);
 *   index_txn_begin(ix, true, &t); index_chunk_put(t, ...); index_txn_commit(t);
 *   index_free(ix);
 * One write transaction per state change; a crash leaves either all of it
 * or none.  Read transactions may run in parallel with one writer.
 * Every function returns 0, a positive value where documented, -ENOENT when
 * a key is absent, -ENOSPC when the map is full, -EIO/CKS_E_FORMAT on a
 * corrupt record; never an MDB_* code.
 *
 * Durability failures (LMDB's habit: after a failed commit the environment
 * is not trusted for writes).  The first write commit that fails makes
 * the handle fatal for the rest of its life: that commit and every later
 * index_txn_begin(ix, true, ...) return CKS_E_FATAL, while read
 * transactions keep working (status, restore, ls).  index_fatal() says
 * whether, since when and why ("commit of index "DIR" failed: ...");
 * nothing is logged here: the owner of the handle (the daemon, a CLI
 * command) reports it once.  Only a new handle (a restart) writes again.
 *
 * Test hook: CKPTSYNC_FAULT_INDEX_COMMIT=N, read once by index_open(),
 * makes the Nth write commit on the handle fail as if fsync had returned
 * EIO (the transaction is aborted, nothing is written).  For tests only.
 *
 * Thread-safety: struct index may be shared; a transaction belongs to the
 * thread that began it.  Values returned point into the transaction's
 * memory map unless stated: copy them before the transaction ends.
 * index_fatal() may be called from any thread (without ret_why/ret_ms it
 * takes no lock: one atomic load).
 */
#ifndef CKS_INDEX_H
#define CKS_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/hash.h"
#include "engine/manifest.h"

#define INDEX_MAX_REGIONS 32

struct index;
struct index_txn;

/* Tables whose records are encoded by the modules that own them (the
 * daemon's queue and pending snapshots: store/queue.c; recipe objects:
 * store/recidx.c). */
enum index_table { INDEX_QUEUE = 0, INDEX_PENDING = 1, INDEX_RECIPES = 2, INDEX_TABLE_COUNT };

struct index_chunk {
    uint32_t raw_len;
    uint32_t stored_len; /* object size in regions (header + payload) */
    uint8_t codec;
    uint32_t presence; /* bit per region slot: stored and confirmed */
    uint64_t refcount; /* occurrences in committed manifests */
};

struct index_file_key {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
    /* The record's digest kind (engine/manifest.h, enum mdigest_kind):
     * 0, a SHA-256 record, keyed by the five fields as before manifest
     * version 5; else one more key byte, so the records of each kind are
     * apart and a ckptsync before version 5 never takes a chunk-tree
     * digest for a file's SHA-256.  index_file_key_of() sets 0. */
    uint8_t kind;
};

struct stat;
/* A file's identity, the one definition every path uses (snapshot, the
 * daemon's ingest, restore's seeding and bookkeeping): device, inode,
 * size, mtime and ctime to the nanosecond.  ctime is what catches a
 * rewrite in place that keeps size and mtime (the kernel moves it on
 * every write and every utime); the daemon records it after pinning, so
 * its own hardlink does not count as a change. */
void index_file_key_of(const struct stat *st, struct index_file_key *ret);
/* The same identity before and after a read: the file did not change. */
bool index_file_same(const struct stat *a, const struct stat *b);

struct index_snap {
    int64_t step;
    int64_t time;
    uint64_t bytes; /* logical bytes */
    uint64_t nfiles;
    uint32_t committed; /* bit per region slot: manifest published */
    uint8_t manifest_digest[HASH_LEN];
};

int index_open(const char *dir, struct index **ret);
void index_free(struct index *ix);

/* A write transaction is refused with CKS_E_FATAL once the handle is fatal. */
int index_txn_begin(struct index *ix, bool write, struct index_txn **ret);
/* Frees t, also on failure.  A write commit that fails makes the handle
 * fatal and returns CKS_E_FATAL (the cause is in index_fatal's why). */
int index_txn_commit(struct index_txn *t);
void index_txn_abort(struct index_txn *t); /* NULL is fine */
/* True once a write commit failed on ix.  ret_why (size bytes, may be
 * NULL; INDEX_FATAL_WHY holds it whole) gets what failed, naming the index
 * directory; ret_ms (may be NULL) the wall-clock time in ms. */
#define INDEX_FATAL_WHY 640
bool index_fatal(struct index *ix, char *ret_why, size_t size, int64_t *ret_ms);

/* Region slots: a stable small number per region name (0..INDEX_MAX_REGIONS-1),
 * allocated on first use in a write transaction. */
int index_region_slot(struct index_txn *t, const char *name, unsigned *ret_slot);

/* Meta values are text without NUL; ret_val gets a NUL-terminated copy,
 * -ERANGE if it does not fit in cap. */
int index_meta_get(struct index_txn *t, const char *key, char *ret_val, size_t cap);
int index_meta_put(struct index_txn *t, const char *key, const char *val);

int index_chunk_get(struct index_txn *t, const uint8_t id[HASH_LEN], struct index_chunk *ret);
int index_chunk_put(struct index_txn *t, const uint8_t id[HASH_LEN], const struct index_chunk *c);
/* How many chunks the index knows (O(1)). */
int index_chunk_count(struct index_txn *t, uint64_t *ret);
/* Calls cb for every chunk; a non-zero return from cb stops and is returned. */
int index_chunk_foreach(struct index_txn *t,
                        int (*cb)(void *ud, const uint8_t id[HASH_LEN],
                                  const struct index_chunk *c),
                        void *ud);

/* ret_chunks is malloc'ed (caller frees). */
int index_file_get(struct index_txn *t, const struct index_file_key *k,
                   uint8_t ret_digest[HASH_LEN], struct mchunk **ret_chunks, size_t *ret_n);
int index_file_put(struct index_txn *t, const struct index_file_key *k,
                   const uint8_t digest[HASH_LEN], const struct mchunk *chunks, size_t n);

int index_snap_get(struct index_txn *t, const char *run, const char *id, struct index_snap *ret);
int index_snap_put(struct index_txn *t, const char *run, const char *id,
                   const struct index_snap *s);
int index_snap_del(struct index_txn *t, const char *run, const char *id);
/* All snapshots of run (or of every run when run is NULL), in key order. */
int index_snap_foreach(struct index_txn *t, const char *run,
                       int (*cb)(void *ud, const char *run, const char *id,
                                 const struct index_snap *s),
                       void *ud);

/* Raw access to the owner-encoded tables.  Keys are 1..511 bytes.  Values
 * returned by get/foreach point into the map: valid until the transaction
 * ends or the record is written.  foreach visits keys starting with prefix
 * in key order (all keys when plen is 0); a non-zero return from cb stops
 * and is returned. */
int index_raw_get(struct index_txn *t, enum index_table tb, const void *key, size_t klen,
                  const void **ret_val, size_t *ret_vlen);
int index_raw_put(struct index_txn *t, enum index_table tb, const void *key, size_t klen,
                  const void *val, size_t vlen);
int index_raw_del(struct index_txn *t, enum index_table tb, const void *key, size_t klen);
int index_raw_foreach(struct index_txn *t, enum index_table tb, const void *prefix, size_t plen,
                      int (*cb)(void *ud, const void *key, size_t klen, const void *val,
                                size_t vlen),
                      void *ud);

#endif
