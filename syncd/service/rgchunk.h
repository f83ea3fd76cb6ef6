/*
 * rgchunk.h — one chunk's plaintext from one region, whether the manifest
 * stores it as a plain chunk (chunks/<id>) or as a recipe
 * (recipes/<id>.<sig>, version 6: docs/deltas.md): a recipe's bases are
 * those its r line names, each read from the same region the same way
 * (recursively, down to plain chunks), and the result is checked against
 * its id.  For checks that read a few small files of one region (the
 * layout coverage check before a multi-node step commits there:
 * service/layoutcov.h); restore and verify use service/recipe.h, which
 * asks every region and caches.
 *
 *   struct chunkobj_ctx z = CHUNKOBJ_CTX_INIT;  (z.keys = rg->seal)
 *   e = rgchunk_get(rg, &z, m, id, len, &plain, &err);
 *
 * Memory: a recipe being decoded holds its bases' plaintext, down its
 * chain (at most MANIFEST_MAX_DEPTH levels).  Not thread-safe per region.
 */
#ifndef CKS_RGCHUNK_H
#define CKS_RGCHUNK_H

#include <stdint.h>

#include "base/buf.h"
#include "engine/chunkobj.h"
#include "engine/manifest.h"
#include "store/region.h"

/* Chunk id of m (plaintext len bytes) from rg into out (reset first).
 * 0; -ENOENT or the region's error (an object missing or unreadable),
 * CKS_E_DIGEST / CKS_E_FORMAT (damaged), with err (appended) naming the
 * region and the object's key. */
int rgchunk_get(struct region *rg, struct chunkobj_ctx *z, const struct manifest *m,
                const uint8_t id[HASH_LEN], uint32_t len, struct buf *out, struct buf *err);

#endif
