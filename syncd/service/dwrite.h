/*
 * dwrite.h — the writer of derived-bf16 recipes (issue 27,
 * docs/deltas.md): bf16 tensors that are the round-to-nearest-even of an
 * fp32 tensor of the same snapshot are stored as recipes over the fp32
 * tensor's plain chunks (depth 1, no bases outside the snapshot's files).
 *
 * Calling sequence (service/snapshot.c; a front end with a manifest and
 * its files):
 *   struct dwrite *d;
 *   dwrite_new(nfiles, &d);
 *   dwrite_match(d, open_fn, ud, sizes, unchanged) // before the read: views,
 *                                        // pairs proposed by fingerprint
 *   ... the read: for each chunk, on any thread, before its upload:
 *       if (dwrite_defer(d, file, off, len, id, width)) do not upload it ...
 *   dwrite_finish(d, &m, &env)           // phase B, every entry read:
 *                                        // each deferred chunk as a
 *                                        // recipe (uploaded, its places
 *                                        // marked, its r line added) or
 *                                        // handed back as plain (env.plain)
 *   dwrite_free(d);
 *
 * The daemon can call it the same way: dwrite_match after ingcore_begin,
 * dwrite_defer in its run op, and dwrite_finish with an env whose put
 * queues the recipe for its region workers instead of writing it.
 *
 * Dedup: a recipe the index records (store/recidx.h) for a deferred
 * chunk id, whose bases are plain file chunks of this snapshot, is named
 * again without reading or encoding anything, once every region answers
 * that it holds the object; else the chunk is encoded and the object
 * asked for and uploaded where missing.  Every recipe the snapshot names
 * is so confirmed in every region during phase B.
 *
 * Trust: the views and fingerprints only propose; a recipe is kept only
 * when tdelta_encode made one and tdelta_decode of it, with the bases read
 * again from the files and checked against their ids, gives the chunk's
 * id (or, for a chunk whose bytes the read kept, dwrite_defer_bytes: gives
 * those bytes, tdelta_decode_same; a base kept so is used as kept).  A
 * deferred chunk whose bytes no longer hash to its id fails the snapshot
 * (CKS_E_CHANGED), as a changed file does.
 *
 * Bases are always plain: a chunk that holds any byte of a matched fp32
 * range is never deferred, and a base whose id is deferred somewhere is
 * not used (those elements are literal).  Thread-safety: dwrite_defer may
 * run on several threads at once; the rest on one.
 */
#ifndef CKS_DWRITE_H
#define CKS_DWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/chunkobj.h"
#include "engine/hash.h"
#include "engine/manifest.h"
#include "service/pool.h"
#include "store/index.h"

struct dwrite;

/* Opens file k for reading (-errno, or a message-bearing error). */
typedef int (*dwrite_open_fn)(void *ud, size_t k);

/* What phase B works with. */
struct dwrite_env {
    dwrite_open_fn open;
    /* The chunk id of bytes (the repository's: SHA-256 or HMAC). */
    void (*chunk_id)(void *ud, const uint8_t *data, size_t len, uint8_t id[HASH_LEN]);
    /* Stores the recipe obj (its key, layout_recipe) of a chunk of raw
     * bytes in every region that lacks it (asked first); *ret_slots: the
     * region slots that hold it now.  < 0 fails the snapshot. */
    int (*put)(void *ud, const char *key, const uint8_t *obj, size_t len, uint32_t raw,
               uint32_t *ret_slots);
    /* Asks every region for key (an object of len bytes): *ret_slots, the
     * slots that hold it.  < 0 fails the snapshot. */
    int (*has)(void *ud, const char *key, size_t len, uint32_t *ret_slots);
    /* The slots of the regions still in the snapshot. */
    uint32_t (*slots)(void *ud);
    /* The deferred chunk id (bytes data) stays a plain chunk: store it as
     * the read would have (width: dwrite_defer's); < 0 fails the snapshot. */
    int (*plain)(void *ud, const uint8_t id[HASH_LEN], const uint8_t *data, size_t len,
                 unsigned width);
    /* Whether the index holds chunk id plain wherever it is needed. */
    bool (*have_plain)(void *ud, const uint8_t id[HASH_LEN]);
    struct chunkobj_ctx *z; /* the repository's (repo_chunkobj_ctx) */
    struct index *ix;       /* recipe records (store/recidx.h) */
    /* The deferred chunks are encoded on pool (NULL: on the calling
     * thread), njobs batches of 8 at a time (each holds a chunk and its
     * bases, twice: budget about 9 x [chunker] max per job); open and
     * chunk_id are then called from its threads (open under a lock). */
    struct pool *pool;
    size_t njobs;
    int level; /* zstd level of literals */
    /* The plain chunk's options: a delta is kept only when smaller than
     * the chunk so stored (NULL: not compared). */
    const struct chunkobj_opts *copts;
    void *ud;
    struct buf *err; /* a message naming what failed */
};

struct dwrite_stats {
    uint64_t pairs;        /* bf16 tensors matched to an fp32 one */
    uint64_t deferred;     /* distinct chunks deferred */
    uint64_t recipes;      /* of them, stored as recipes */
    uint64_t recipe_raw;   /* their raw bytes */
    uint64_t recipe_bytes; /* their objects' bytes */
    uint64_t plain;        /* deferred chunks stored plain after all */
    uint64_t reused;       /* of the recipes, known to the index and found in
                            * every region: not read or encoded again */
    uint64_t xpairs;       /* tensors matched to the keyframe's (dwrite_xor) */
    uint64_t kbases;       /* the keyframe's chunks named as bases: k lines */
};

int dwrite_new(size_t nfiles, struct dwrite **ret);
void dwrite_free(struct dwrite *d);

/* The pre-pass: each file k < nfiles with sizes[k] > 0 (0: not a regular
 * file to read) opened with open(ud, k) and its tensor view read; pairs
 * (a bf16 tensor, an fp32 tensor of the same numel, contiguous, in any of
 * the files) proposed by a sampled fingerprint.  unchanged (may be NULL):
 * files the index will give unchanged, not read, so their bf16 tensors
 * are no candidates (their fp32 ones still are, as bases).  A file that
 * cannot be opened or has no view proposes nothing (the read reports its
 * errors).  0 or -ENOMEM. */
int dwrite_match(struct dwrite *d, dwrite_open_fn open, void *ud, const uint64_t *sizes,
                 const bool *unchanged);

struct kfbase;

/* The deltas against a keyframe (service/keyframe.h; kb outlives d),
 * after dwrite_match (or instead of it): each file k to read, at paths[k]
 * (the keyframe's path of its file, NULL: none), whose tensors the
 * keyframe's same file holds by name with the same dtype (bf16, fp16,
 * fp32) and numel, contiguous in both, is proposed as XOR segments
 * against them (a derivation keeps the tensors it covers).  A chunk that
 * holds a derivation's fp32 bytes may then be deferred too, as a delta
 * only (the derivation over it is at depth 2).  Bases are the chunks the
 * keyframe stores plain; those no file of the snapshot holds get k lines.
 * 0 or -ENOMEM. */
int dwrite_xor(struct dwrite *d, struct kfbase *kb, const char *const *paths, dwrite_open_fn open,
               void *ud, const uint64_t *sizes, const bool *unchanged);
/* Whether anything was proposed (a derivation or a delta). */
bool dwrite_any(const struct dwrite *d);

/* Whether the chunk [off, off + len) of file k, id, is deferred to phase
 * B (recorded; the caller must not upload it): it overlaps a matched bf16
 * range and no matched fp32 range, or a matched delta range.  width: the
 * byte planes' width the read would have coded it with (chunkobj_opts;
 * 0: none), for the comparison with a recipe and for env->plain.
 * Thread-safe.  false on no memory. */
bool dwrite_defer(struct dwrite *d, size_t k, uint64_t off, uint32_t len,
                  const uint8_t id[HASH_LEN], unsigned width);

/* dwrite_defer, and data[0..len) — the chunk's bytes, which the caller
 * hashed to id — kept for phase B while the bytes kept so far stay
 * within dwrite_keep's budget: phase B then does not read the chunk
 * again, checks a recipe by comparing its decode with these bytes (not
 * by hashing it), and hands these bytes to env->plain.  Thread-safe. */
bool dwrite_defer_bytes(struct dwrite *d, size_t k, uint64_t off, uint32_t len,
                        const uint8_t id[HASH_LEN], unsigned width, const uint8_t *data);
/* The bytes dwrite_defer_bytes may keep in all (0, the default: none).
 * Before the read. */
void dwrite_keep(struct dwrite *d, uint64_t bytes);

/* Phase B over m (every entry read; file k of m is file k here): each
 * distinct deferred chunk read again and checked, planned, encoded,
 * decoded and checked, and stored as a recipe (env->put, its places in m
 * marked, its r line added; m's extras sorted) or handed to env->plain.
 * 0, CKS_E_CHANGED (a chunk's bytes changed), or an error of env's. */
int dwrite_finish(struct dwrite *d, struct manifest *m, const struct dwrite_env *env);

const struct dwrite_stats *dwrite_stats(const struct dwrite *d);

#endif
