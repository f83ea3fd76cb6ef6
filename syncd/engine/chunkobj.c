/*
 * chunkobj.c — the stored chunk object: a 12-byte header and a raw, zstd
 * or byte-plane payload (layout in chunkobj.h).
 *
 * Design: objects come back from regions we do not trust, so decoding
 * validates everything it can from the header and the zstd frame header
 * before it allocates: the raw length is bounded by the caller's max_raw
 * and CHUNKOBJ_MAX_RAW, must equal the frame's declared content size (or
 * the raw payload length), and the output buffer is exactly that long, so
 * a lying frame fails in zstd instead of growing memory.  The digest check
 * is last and mandatory: an object that decodes but hashes wrong is
 * CKS_E_DIGEST, never data.
 *
 * Encoding compresses straight into the output buffer after the header
 * (reserved for ZSTD_compressBound, which is >= len) and overwrites the
 * payload with the raw bytes when zstd did not shrink them.  ZSTD error
 * codes are translated here and never leave this file.
 *
 * Byte planes are tried first when tcodec_pick() says the chunk is an
 * array of floats (the caller's width, from the file's metadata, then
 * replaces the width it estimated); they are kept only when they save
 * at least 1/64 of the chunk, else the chunk goes to zstd as before.  The
 * pick is an estimate from a sample, so it may waste one tcodec pass on a
 * chunk that zstd then takes; it never makes an object larger than zstd's.
 */
#include <errno.h>
#include <string.h>

#include <zstd.h>
#include <zstd_errors.h>

#include "base/err.h"
#include "base/le.h"
#include "engine/chunkobj.h"
#include "engine/crypt.h"
#include "engine/tcodec.h"

const char *chunkobj_codec_name(unsigned codec)
{
    static const char *const names[CHUNKOBJ_RECIPE + 1] = {"raw", "zstd", "planes", "recipe"};
    return codec <= CHUNKOBJ_RECIPE ? names[codec] : "?";
}

void chunkobj_ctx_free(struct chunkobj_ctx *ctx)
{
    if (!ctx)
        return;
    ZSTD_freeCCtx(ctx->cctx);
    ZSTD_freeDCtx(ctx->dctx);
    ctx->cctx = NULL;
    ctx->dctx = NULL;
    buf_free(&ctx->tscratch);
}

static int zstd_err(size_t code)
{
    return ZSTD_getErrorCode(code) == ZSTD_error_memory_allocation ? -ENOMEM : CKS_E_CODEC;
}

void chunkobj_header_put(uint8_t *p, enum chunkobj_codec codec, uint32_t raw_len)
{
    memcpy(p, CHUNKOBJ_MAGIC, 4);
    p[4] = codec == CHUNKOBJ_RECIPE ? CHUNKOBJ_VERSION_RECIPE : CHUNKOBJ_VERSION;
    p[5] = (uint8_t)codec;
    p[6] = 0;
    p[7] = 0;
    le32_put(p + 8, raw_len);
}

int chunkobj_header(const uint8_t *obj, size_t len, enum chunkobj_codec *ret_codec,
                    uint32_t *ret_raw_len)
{
    if (len < CHUNKOBJ_HEADER_LEN || memcmp(obj, CHUNKOBJ_MAGIC, 4) != 0)
        return CKS_E_FORMAT;
    if (obj[4] != 1 && obj[4] != CHUNKOBJ_VERSION && obj[4] != CHUNKOBJ_VERSION_RECIPE)
        return CKS_E_VERSION;
    /* version 1: codecs 0 and 1; version 2: 0..2; version 3: 3 only */
    if (obj[4] == CHUNKOBJ_VERSION_RECIPE
            ? obj[5] != CHUNKOBJ_RECIPE
            : obj[5] >= (obj[4] == 1 ? CHUNKOBJ_PLANES : CHUNKOBJ_NCODECS))
        return CKS_E_CODEC;
    if (obj[6] || obj[7])
        return CKS_E_FORMAT;
    uint32_t raw_len = le32_get(obj + 8);
    if (raw_len > CHUNKOBJ_MAX_RAW)
        return CKS_E_LIMIT;
    *ret_codec = (enum chunkobj_codec)obj[5];
    *ret_raw_len = raw_len;
    return 0;
}

/* Compresses src into dst[0..cap) as one frame that records its content
 * size; *ret_len receives the frame length. */
static int zstd_compress(struct chunkobj_ctx *ctx, const uint8_t *src, size_t len, int level,
                         uint8_t *dst, size_t cap, size_t *ret_len)
{
    if (!ctx->cctx) {
        ctx->cctx = ZSTD_createCCtx();
        if (!ctx->cctx)
            return -ENOMEM;
    }
    ZSTD_CCtx *cctx = ctx->cctx;
    size_t r = ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
    /* SHA-256 of the result already covers integrity. */
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);
    if (!ZSTD_isError(r))
        r = ZSTD_compress2(cctx, dst, cap, src, len);
    if (ZSTD_isError(r))
        return zstd_err(r);
    *ret_len = r;
    return 0;
}

/* Codes raw as byte planes of width w after the header in out; 1 when
 * that saved at least 1/64 of len, 0 when not (out is then reset). */
static int planes_encode(const uint8_t *raw, size_t len, unsigned w, struct buf *out)
{
    buf_reset(out);
    int r = buf_reserve(out, CHUNKOBJ_HEADER_LEN + tcodec_bound(len));
    if (r < 0)
        return r;
    out->len = CHUNKOBJ_HEADER_LEN;
    if ((r = tcodec_encode(raw, len, w, out)) < 0)
        return r;
    size_t plen = out->len - CHUNKOBJ_HEADER_LEN;
    if (plen + len / 64 > len) {
        buf_reset(out);
        return 0;
    }
    chunkobj_header_put(out->data, CHUNKOBJ_PLANES, (uint32_t)len);
    out->data[out->len] = 0;
    return 1;
}

static int opts_check(size_t len, const struct chunkobj_opts *opts)
{
    if (len > CHUNKOBJ_MAX_RAW)
        return CKS_E_LIMIT;
    if (opts->level < ZSTD_minCLevel() || opts->level > ZSTD_maxCLevel())
        return -EINVAL;
    if (opts->width != 0 && opts->width != 2 && opts->width != 4)
        return -EINVAL;
    return 0;
}

/* The width chunkobj_encode tries planes at first (0: straight to zstd).
 * The estimate decides whether planes beat zstd at all (a metadata width
 * on text, ints or quantized data would lose to zstd); the file's
 * metadata, where it has one, decides which width. */
static unsigned planes_width(const uint8_t *raw, size_t len, const struct chunkobj_opts *opts)
{
    if (!opts->tensor || len < CHUNKOBJ_PLANES_MIN)
        return 0;
    unsigned w = tcodec_pick(raw, len, NULL);
    return w && opts->width ? opts->width : w;
}

int chunkobj_size(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len,
                  const struct chunkobj_opts *opts, struct buf *scratch, size_t *ret_len)
{
    size_t plen;
    int r = opts_check(len, opts);
    unsigned w = r == 0 ? planes_width(raw, len, opts) : 0;
    if (r == 0 && w)
        r = tcodec_size(raw, len, w, &plen);
    if (r < 0)
        return r;
    if (w && plen + len / 64 <= len) { /* planes_encode keeps them */
        *ret_len = CHUNKOBJ_HEADER_LEN + plen;
        return 0;
    }
    if ((r = chunkobj_encode(ctx, raw, len, opts, scratch, NULL)) == 0)
        *ret_len = scratch->len;
    return r;
}

int chunkobj_encode(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len,
                    const struct chunkobj_opts *opts, struct buf *out,
                    enum chunkobj_codec *ret_codec)
{
    int level = opts->level, r = opts_check(len, opts);
    if (r < 0)
        return r;
    unsigned w = planes_width(raw, len, opts);
    if (w && (r = planes_encode(raw, len, w, out)) != 0) {
        if (r > 0 && ret_codec)
            *ret_codec = CHUNKOBJ_PLANES;
        return r < 0 ? r : 0;
    }
    buf_reset(out);
    size_t bound = ZSTD_compressBound(len);
    r = buf_reserve(out, CHUNKOBJ_HEADER_LEN + bound);
    if (r < 0)
        return r;

    uint8_t *payload = out->data + CHUNKOBJ_HEADER_LEN;
    size_t plen = len;
    enum chunkobj_codec codec = CHUNKOBJ_RAW;
    if (len > 0) {
        struct chunkobj_ctx local = CHUNKOBJ_CTX_INIT;
        size_t zlen = 0;
        r = zstd_compress(ctx ? ctx : &local, raw, len, level, payload, bound, &zlen);
        chunkobj_ctx_free(&local);
        if (r < 0)
            return r;
        if (zlen < len) {
            codec = CHUNKOBJ_ZSTD;
            plen = zlen;
        }
    }
    if (codec == CHUNKOBJ_RAW && len > 0)
        memcpy(payload, raw, len);
    chunkobj_header_put(out->data, codec, (uint32_t)len);
    out->len = CHUNKOBJ_HEADER_LEN + plen;
    out->data[out->len] = 0;
    if (ret_codec)
        *ret_codec = codec;
    return 0;
}

/* Checks, before anything is allocated, that the payload is exactly one
 * zstd frame that declares raw_len bytes of content. */
static int zstd_check(const uint8_t *p, size_t n, uint32_t raw_len)
{
    /* A skippable frame would "decode" to nothing; we never write one. */
    if (n < 4 || le32_get(p) != ZSTD_MAGICNUMBER)
        return CKS_E_CODEC;
    unsigned long long fcs = ZSTD_getFrameContentSize(p, n);
    if (fcs == ZSTD_CONTENTSIZE_ERROR)
        return CKS_E_CODEC;
    if (fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs != raw_len)
        return CKS_E_FORMAT;
    size_t frame = ZSTD_findFrameCompressedSize(p, n);
    if (ZSTD_isError(frame))
        return CKS_E_CODEC;
    return frame == n ? 0 : CKS_E_FORMAT;
}

static int zstd_decompress(struct chunkobj_ctx *ctx, const uint8_t *p, size_t n, uint8_t *dst,
                           uint32_t raw_len)
{
    if (!ctx->dctx) {
        ctx->dctx = ZSTD_createDCtx();
        if (!ctx->dctx)
            return -ENOMEM;
    }
    size_t got = ZSTD_decompressDCtx(ctx->dctx, dst, raw_len, p, n);
    if (ZSTD_isError(got))
        return zstd_err(got);
    return got == raw_len ? 0 : CKS_E_CODEC;
}

/* Decodes the payload into dst[0..raw_len). */
static int payload_decode(struct chunkobj_ctx *ctx, enum chunkobj_codec codec, const uint8_t *p,
                          size_t n, uint32_t raw_len, uint8_t *dst)
{
    if (codec == CHUNKOBJ_RAW) {
        if (n)
            memcpy(dst, p, n);
        return 0;
    }
    if (codec == CHUNKOBJ_PLANES) {
        int r = tcodec_decode_scratch(p, n, dst, raw_len, ctx ? &ctx->tscratch : NULL);
        return r == CKS_E_FORMAT ? CKS_E_CODEC : r;
    }
    struct chunkobj_ctx local = CHUNKOBJ_CTX_INIT;
    int r = zstd_decompress(ctx ? ctx : &local, p, n, dst, raw_len);
    chunkobj_ctx_free(&local);
    return r;
}

/* The checks before anything is allocated: the payload's length against
 * the raw length, a zstd payload's frame header. */
static int payload_check(enum chunkobj_codec codec, const uint8_t *p, size_t n, uint32_t raw_len)
{
    if (codec == CHUNKOBJ_RAW)
        return n == raw_len ? 0 : CKS_E_FORMAT;
    if (codec == CHUNKOBJ_PLANES)
        return n <= tcodec_bound(raw_len) ? 0 : CKS_E_FORMAT;
    if (codec == CHUNKOBJ_ZSTD)
        return zstd_check(p, n, raw_len);
    return CKS_E_CODEC;
}

int chunkobj_payload_decode(struct chunkobj_ctx *ctx, unsigned codec, const uint8_t *p, size_t n,
                            uint8_t *dst, uint32_t raw_len)
{
    if (raw_len > CHUNKOBJ_MAX_RAW)
        return CKS_E_LIMIT;
    int r = payload_check((enum chunkobj_codec)codec, p, n, raw_len);
    if (r == 0)
        r = payload_decode(ctx, (enum chunkobj_codec)codec, p, n, raw_len, dst);
    return r;
}

int chunkobj_digest_check(const struct chunkobj_ctx *ctx, const uint8_t *data, size_t len,
                          const uint8_t id[HASH_LEN])
{
    uint8_t got[HASH_LEN];
    int r =
        ctx && ctx->keys ? crypt_chunk_id(ctx->keys, data, len, got) : hash_digest(data, len, got);
    if (r < 0)
        return r;
    return memcmp(got, id, HASH_LEN) == 0 ? 0 : CKS_E_DIGEST;
}

int chunkobj_decode(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len,
                    const uint8_t id[HASH_LEN], size_t max_raw, struct buf *out)
{
    enum chunkobj_codec codec;
    uint32_t raw_len;

    buf_reset(out);
    int r = chunkobj_header(obj, len, &codec, &raw_len);
    if (r < 0)
        return r;
    if (raw_len > max_raw)
        return CKS_E_LIMIT;
    const uint8_t *payload = obj + CHUNKOBJ_HEADER_LEN;
    size_t plen = len - CHUNKOBJ_HEADER_LEN;
    /* a recipe (codec 3) needs its bases: engine/tdelta.h decodes it */
    r = payload_check(codec, payload, plen, raw_len);
    if (r < 0)
        return r;

    r = buf_reserve(out, raw_len);
    if (r < 0)
        return r;
    r = payload_decode(ctx, codec, payload, plen, raw_len, out->data);
    return chunkobj_decoded(ctx, r, out, raw_len, id);
}

int chunkobj_decoded(const struct chunkobj_ctx *ctx, int r, struct buf *out, size_t raw_len,
                     const uint8_t id[HASH_LEN])
{
    if (r == 0)
        r = chunkobj_digest_check(ctx, out->data, raw_len, id);
    if (r < 0) {
        buf_reset(out);
        return r;
    }
    out->len = raw_len;
    out->data[raw_len] = 0;
    return 0;
}
