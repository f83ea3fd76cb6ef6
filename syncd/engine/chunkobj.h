/*
 * chunkobj.h — the chunk object format stored in regions (documented in
 * include/ckptsync/format.h):
 *
 *   offset size
 *   0      4    magic "CKC1"
 *   4      1    version (2; 1 is still read; 3: a recipe, DRAFT)
 *   5      1    codec (0 = raw, 1 = zstd, 2 = byte planes; 2 only in version 2;
 *               3 = recipe, only and always in version 3)
 *   6      2    reserved, zero
 *   8      4    raw length, little endian (<= CHUNKOBJ_MAX_RAW)
 *   12     ...  payload (raw bytes, one zstd frame, or a tcodec payload:
 *               engine/tcodec.h says it byte by byte)
 *
 * Version 2 adds codec 2 and nothing else: a version-1 object is a
 * version-2 object with a different version byte, so every object written
 * before stays readable.  Writers write version 2.  An encrypted
 * repository wraps the whole object in the sealed envelope (engine/crypt.h,
 * magic "CKE1"); the chunk format itself does not change for that.
 *
 * Version 3 (DRAFT, issue 27) is a recipe: the chunk rebuilt from other
 * chunks' plaintext (bases) plus coded bytes; engine/tdelta.h writes and
 * reads it and documents the payload.  chunkobj_encode() never writes one,
 * and chunkobj_decode() answers CKS_E_CODEC for one (it has no bases).
 *
 * chunkobj_encode() asks tcodec_pick() whether the chunk looks like an
 * array of 2- or 4-byte floats (unless opts say otherwise) and codes it as
 * byte planes when that shrinks it; else zstd at the given level, falling
 * back to raw when that does not shrink the chunk.  chunkobj_decode()
 * checks magic, version, codec, reserved bytes, the raw length (against the
 * header, the zstd frame or the tcodec payload), and finally that SHA-256
 * of the result equals id; a hostile object can make it fail but never
 * over-allocate or overrun.
 *
 * Pure transforms: no I/O.  Thread-safe (the zstd contexts are created per
 * call; use struct chunkobj_ctx to reuse them on a hot path).
 */
#ifndef CKS_CHUNKOBJ_H
#define CKS_CHUNKOBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/hash.h"

#define CHUNKOBJ_MAGIC "CKC1"
#define CHUNKOBJ_VERSION 2
#define CHUNKOBJ_VERSION_RECIPE 3
#define CHUNKOBJ_HEADER_LEN 12
#define CHUNKOBJ_MAX_RAW (256u * 1024 * 1024)

enum chunkobj_codec {
    CHUNKOBJ_RAW = 0,
    CHUNKOBJ_ZSTD = 1,
    CHUNKOBJ_PLANES = 2,
    CHUNKOBJ_RECIPE = 3 /* version 3 only: engine/tdelta.h */
};
/* The plain codecs (0 .. CHUNKOBJ_NCODECS - 1): those chunkobj_decode()
 * decodes on its own. */
#define CHUNKOBJ_NCODECS 3

/* Chunks shorter than this are never coded as planes (the estimate needs
 * a sample, and a small chunk's table costs more than it saves). */
#define CHUNKOBJ_PLANES_MIN 4096

/* How to encode.  level: zstd's; tensor: try byte planes; width: the
 * element width the file's own metadata gives for this chunk (2 or 4), 0
 * = none.  tcodec_pick() always decides whether the chunk goes to planes
 * at all; width, where given, then replaces the width it estimated. */
struct chunkobj_opts {
    int level;
    bool tensor;
    unsigned width;
};

struct crypt_keys;
struct chunkobj_ctx {
    void *cctx; /* ZSTD_CCtx, created lazily */
    void *dctx; /* ZSTD_DCtx, created lazily */
    /* An encrypted repository's keys: ids are HMAC-SHA256 under keys->id
     * (engine/crypt.h); NULL: SHA-256. */
    const struct crypt_keys *keys;
    struct buf tscratch; /* the tcodec decoder's planes, kept between calls */
};

#define CHUNKOBJ_CTX_INIT                                                                          \
    {                                                                                              \
        NULL, NULL, NULL, BUF_INIT                                                                 \
    }

void chunkobj_ctx_free(struct chunkobj_ctx *ctx);

/* Appends the object for raw[0..len) to out (out is reset first).
 * ret_codec (may be NULL) receives the codec chosen.  ctx may be NULL.
 * Returns 0, CKS_E_LIMIT (len above CHUNKOBJ_MAX_RAW), -EINVAL (level
 * outside zstd's range, a width other than 0, 2, 4), -ENOMEM or
 * CKS_E_CODEC.  Deterministic for given opts and library versions. */
int chunkobj_encode(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len,
                    const struct chunkobj_opts *opts, struct buf *out,
                    enum chunkobj_codec *ret_codec);

/* The length of the object chunkobj_encode(ctx, raw, len, opts, ...)
 * writes, into *ret_len: when it keeps byte planes, computed from their
 * histograms without coding them (tcodec_size); else by encoding into
 * scratch (zstd).  Returns chunkobj_encode()'s errors. */
int chunkobj_size(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len,
                  const struct chunkobj_opts *opts, struct buf *scratch, size_t *ret_len);
/* The codec's name ("raw", "zstd", "planes", "recipe"), "?" for another
 * value. */
const char *chunkobj_codec_name(unsigned codec);
/* Decodes obj into out (reset first) and verifies SHA-256(out) == id
 * (HMAC-SHA256 under ctx->keys->id when ctx has keys).
 * Returns 0, CKS_E_FORMAT (bad magic, reserved, length), CKS_E_VERSION,
 * CKS_E_CODEC (undecodable payload), CKS_E_LIMIT (raw length above max_raw
 * or CHUNKOBJ_MAX_RAW), CKS_E_DIGEST.  ctx may be NULL.  An unknown codec
 * byte is CKS_E_CODEC; a zstd frame that does not declare exactly the
 * header's raw length, or is followed by other bytes, is CKS_E_FORMAT.  On
 * any failure out is left empty, so unverified bytes are never handed on. */
int chunkobj_decode(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len,
                    const uint8_t id[HASH_LEN], size_t max_raw, struct buf *out);
/* Parses just the header: 0, CKS_E_FORMAT, CKS_E_VERSION, CKS_E_CODEC or
 * CKS_E_LIMIT (raw length above CHUNKOBJ_MAX_RAW), as chunkobj_decode.
 * A recipe's header (version 3, codec 3) parses: *ret_codec says so. */
int chunkobj_header(const uint8_t *obj, size_t len, enum chunkobj_codec *ret_codec,
                    uint32_t *ret_raw_len);

/* For containers of coded pieces (engine/tdelta.c), which check the digest
 * of the whole themselves:
 * chunkobj_header_put() writes the 12-byte header for codec and raw_len
 * (version 3 for CHUNKOBJ_RECIPE, else CHUNKOBJ_VERSION) at p.
 * chunkobj_payload_decode() decodes the payload p[0..n) of a plain codec
 * (0..2) into dst[0..raw_len), with chunkobj_decode()'s checks but no
 * digest: 0, CKS_E_FORMAT, CKS_E_CODEC (also for codec 3 or above),
 * CKS_E_LIMIT (raw_len above CHUNKOBJ_MAX_RAW) or -ENOMEM.
 * chunkobj_digest_check(): 0 when data's id (as chunkobj_decode computes
 * it) is id, else CKS_E_DIGEST (or an error of the hash).
 * chunkobj_decoded() ends a decode of raw_len bytes into out->data (out
 * reserved for them): with r == 0 it checks the digest; on any failure
 * out is reset (unverified bytes are never handed on), else out->len is
 * raw_len and the bytes NUL-terminated.  Returns r or the check's error. */
void chunkobj_header_put(uint8_t *p, enum chunkobj_codec codec, uint32_t raw_len);
int chunkobj_payload_decode(struct chunkobj_ctx *ctx, unsigned codec, const uint8_t *p, size_t n,
                            uint8_t *dst, uint32_t raw_len);
int chunkobj_digest_check(const struct chunkobj_ctx *ctx, const uint8_t *data, size_t len,
                          const uint8_t id[HASH_LEN]);
int chunkobj_decoded(const struct chunkobj_ctx *ctx, int r, struct buf *out, size_t raw_len,
                     const uint8_t id[HASH_LEN]);

#endif
