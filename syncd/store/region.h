/*
 * region.h — one replica of the repository, behind one table of operations.
 * The scheduler and the services never know which kind they talk to.
 *
 * Keys are '/'-separated names relative to the region's root (for s3, its
 * prefix); see include/ckptsync/format.h for the layout:
 *   repo, chunks/<2 hex>/<64 hex>, snapshots/<run>/<id>, refs/<run>/latest
 *
 * Calling sequence:
 *   region_new(&conf, &r, &err);   // checks nothing remote yet
 *   region_check(r, &err);         // reachable and writable? (names the problem)
 *   region_put(r, key, data, len); region_get(r, key, max, &buf); ...
 *   region_free(r);
 *
 * Return values: 0 (has: 1 present / 0 absent), -ENOENT for a missing key,
 * another -errno or CKS_E_* on failure; a human-readable description of the
 * last failure (naming the region and the key or path) is kept in
 * region_last_error(r).  put is durable when it returns 0: a dir region has
 * fsynced file and directory.  A struct region is used by one thread at a
 * time.
 */
#ifndef CKS_REGION_H
#define CKS_REGION_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/config.h"
#include "engine/hash.h"

struct region;

struct region_ops {
    const char *kind;
    int (*put)(struct region *r, const char *key, const void *data, size_t len);
    int (*get)(struct region *r, const char *key, size_t max, struct buf *out);
    int (*has)(struct region *r, const char *key);
    int (*list)(struct region *r, const char *prefix,
                int (*cb)(void *ud, const char *key, uint64_t size), void *ud);
    int (*del)(struct region *r, const char *key);
    int (*check)(struct region *r);
    void (*free)(struct region *r);
};

struct region {
    const struct region_ops *ops;
    struct region_conf conf;
    unsigned slot;                 /* index slot, set by the caller */
    char errmsg[512];
};

int region_new(const struct region_conf *conf, struct region **ret, struct buf *err);
void region_free(struct region *r);

int region_put(struct region *r, const char *key, const void *data, size_t len);
/* Replaces the contents of out (reset first).  Fails with CKS_E_LIMIT if the
 * object is larger than max. */
int region_get(struct region *r, const char *key, size_t max, struct buf *out);
int region_has(struct region *r, const char *key);
/* Calls cb for every key starting with prefix (any order); a non-zero return
 * from cb stops the listing and is returned. */
int region_list(struct region *r, const char *prefix,
                int (*cb)(void *ud, const char *key, uint64_t size), void *ud);
int region_del(struct region *r, const char *key);
int region_check(struct region *r);
const char *region_last_error(const struct region *r);
/* Records a formatted error message on r (used by backends). */
void region_set_error(struct region *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define REGION_KEY_MAX 1024
/* "chunks/ab/ab...": out must hold REGION_KEY_MAX bytes. */
void region_chunk_key(const uint8_t id[HASH_LEN], char *out);

/* Backends. */
int region_dir_new(const struct region_conf *conf, struct region **ret, struct buf *err);


/* One operation for region_batch(). */
struct region_op {
    struct region *rg;
    enum { REGION_OP_HAS, REGION_OP_PUT } kind;
    const char *key;
    const void *data;          /* PUT */
    size_t len;                /* PUT */
    int ret;                   /* out: what region_has()/region_put() returned */
};

/* Runs ops concurrently, one thread each (the calling thread runs the
 * first), and returns when all are done.  Every op must name a different
 * region: a struct region is used by one thread at a time.  This is how a
 * chunk reaches three regions in the time of the slowest one. */
void region_batch(struct region_op *ops, size_t n);

#endif
