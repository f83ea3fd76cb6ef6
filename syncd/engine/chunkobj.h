/*
 * chunkobj.h — the chunk object format stored in regions (documented in
 * include/ckptsync/format.h):
 *
 *   offset size
 *   0      4    magic "CKC1"
 *   4      1    version (1)
 *   5      1    codec (0 = raw, 1 = zstd)
 *   6      2    reserved, zero
 *   8      4    raw length, little endian (<= CHUNKOBJ_MAX_RAW)
 *   12     ...  payload (raw bytes, or one zstd frame)
 *
 * chunkobj_encode() compresses with zstd at the given level and falls back
 * to raw when that does not shrink the chunk.  chunkobj_decode() checks
 * magic, version, codec, reserved bytes, the raw length (against the header
 * and the zstd frame), and finally that SHA-256 of the result equals id; a
 * hostile object can make it fail but never over-allocate or overrun.
 *
 * Pure transforms: no I/O.  Thread-safe (the zstd contexts are created per
 * call; use struct chunkobj_ctx to reuse them on a hot path).
 */
#ifndef CKS_CHUNKOBJ_H
#define CKS_CHUNKOBJ_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/hash.h"

#define CHUNKOBJ_MAGIC "CKC1"
#define CHUNKOBJ_VERSION 1
#define CHUNKOBJ_HEADER_LEN 12
#define CHUNKOBJ_MAX_RAW (256u * 1024 * 1024)

enum chunkobj_codec { CHUNKOBJ_RAW = 0, CHUNKOBJ_ZSTD = 1 };

struct chunkobj_ctx {
    void *cctx; /* ZSTD_CCtx, created lazily */
    void *dctx; /* ZSTD_DCtx, created lazily */
};

#define CHUNKOBJ_CTX_INIT                                                                          \
    {                                                                                              \
        NULL, NULL                                                                                 \
    }

void chunkobj_ctx_free(struct chunkobj_ctx *ctx);

/* Appends the object for raw[0..len) to out (out is reset first).
 * ret_codec (may be NULL) receives the codec chosen.  ctx may be NULL.
 * Returns 0, CKS_E_LIMIT (len above CHUNKOBJ_MAX_RAW), -EINVAL (level
 * outside zstd's range), -ENOMEM or CKS_E_CODEC. */
int chunkobj_encode(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len, int level,
                    struct buf *out, enum chunkobj_codec *ret_codec);
/* Decodes obj into out (reset first) and verifies SHA-256(out) == id.
 * Returns 0, CKS_E_FORMAT (bad magic, reserved, length), CKS_E_VERSION,
 * CKS_E_CODEC (undecodable payload), CKS_E_LIMIT (raw length above max_raw
 * or CHUNKOBJ_MAX_RAW), CKS_E_DIGEST.  ctx may be NULL.  An unknown codec
 * byte is CKS_E_CODEC; a zstd frame that does not declare exactly the
 * header's raw length, or is followed by other bytes, is CKS_E_FORMAT.  On
 * any failure out is left empty, so unverified bytes are never handed on. */
int chunkobj_decode(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len,
                    const uint8_t id[HASH_LEN], size_t max_raw, struct buf *out);
/* Parses just the header: 0, CKS_E_FORMAT, CKS_E_VERSION, CKS_E_CODEC or
 * CKS_E_LIMIT (raw length above CHUNKOBJ_MAX_RAW), as chunkobj_decode. */
int chunkobj_header(const uint8_t *obj, size_t len, enum chunkobj_codec *ret_codec,
                    uint32_t *ret_raw_len);

#endif
