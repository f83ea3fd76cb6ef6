/*
 * recidx.h — the local index's record of a recipe object (issue 27,
 * docs/deltas.md "For the writer"): per recipes/<id>.<sig> key that this
 * instance wrote or met, the chunk's and the object's sizes, the bases
 * (ids and lengths) and the chain depth, so that a later snapshot can name
 * the recipe with its closure without reading the object, and per region
 * slot whether the object was confirmed there (as index_chunk.presence is
 * for chunks/ keys; a chunk's own presence bits never say anything about
 * its recipes).
 *
 *   struct recidx r = {...};  recidx_put(t, id, &r);
 *   recidx_get(t, id, sig, &r);
 *   recidx_each(t, id, cb, ud);            // every recipe of chunk id
 *   recidx_all(t, cb, ud);                 // every record, damaged ones too (fsck)
 *   recidx_presence(t, id, sig, set, clear);  // a writer confirmed it, prune deleted it
 *
 * Record (the table INDEX_RECIPES, key id[32] + sig[8]), little endian:
 *   0  1  version: 1
 *   1  1  depth (1: every base is a plain chunk)
 *   2  1  nbases, 1..TDELTA_MAX_BASES
 *   3  1  reserved, 0
 *   4  4  the chunk's raw length
 *   8  4  the object's stored length
 *   12 4  presence (bit per region slot)
 *   16 36*nbases  base id, base raw length
 * A record of another length or version, or with nbases out of range, is
 * CKS_E_FORMAT.
 */
#ifndef CKS_RECIDX_H
#define CKS_RECIDX_H

#include <stdint.h>

#include "engine/hash.h"
#include "engine/manifest.h"
#include "engine/tdelta.h"
#include "store/index.h"

struct recidx {
    uint8_t sig[MANIFEST_RECIPE_SIG];
    uint8_t depth;
    uint32_t raw_len, stored_len, presence;
    size_t nbases;
    struct tdelta_ref base[TDELTA_MAX_BASES];
};

/* 0, -EINVAL (nbases out of range), the index's errors. */
int recidx_put(struct index_txn *t, const uint8_t id[HASH_LEN], const struct recidx *r);
/* 0, -ENOENT, CKS_E_FORMAT, the index's errors. */
int recidx_get(struct index_txn *t, const uint8_t id[HASH_LEN],
               const uint8_t sig[MANIFEST_RECIPE_SIG], struct recidx *ret);
/* cb for every recipe of chunk id (in sig order); a non-zero return stops
 * and is returned; a damaged record is CKS_E_FORMAT. */
int recidx_each(struct index_txn *t, const uint8_t id[HASH_LEN],
                int (*cb)(void *ud, const struct recidx *r), void *ud);
/* cb for every record in key order, with e = 0 and r decoded, or e =
 * CKS_E_FORMAT for a damaged record (r->sig set from the key, the rest
 * zero; id NULL when the key itself has the wrong length).  A non-zero
 * return from cb stops and is returned. */
int recidx_all(struct index_txn *t,
               int (*cb)(void *ud, const uint8_t *id, const struct recidx *r, int e), void *ud);
/* The record of (id, sig) with the slot bits set added and clear removed
 * (clear wins), written only when it changes.  0 (also when the index has
 * no such record: nothing to say), CKS_E_FORMAT, the index's errors. */
int recidx_presence(struct index_txn *t, const uint8_t id[HASH_LEN],
                    const uint8_t sig[MANIFEST_RECIPE_SIG], uint32_t set, uint32_t clear);

#endif
