/*
 * fuzz-chunkobj.c — chunk objects arrive from regions we do not trust.
 *
 * (a) Decode the input as an object (max_raw 1 MiB) against the digest of
 *     its payload bytes, so raw objects can decode successfully and zstd
 *     ones get as far as the digest check.  The result must be a
 *     documented code; a failure leaves the output empty; a success
 *     returns exactly the payload.  The sanitizers catch any overrun.
 * (b) Round trip: treat the input as a raw chunk, encode it (level from
 *     the first byte), decode it, and abort() on any mismatch.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/chunkobj.h"

#define FUZZ_MAX_RAW (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_fail(const char *what, int r)
{
    fprintf(stderr, "fuzz-chunkobj: %s (%d: %s)\n", what, r, err_str(r));
    abort();
}

static int documented(int r)
{
    return r == 0 || r == CKS_E_FORMAT || r == CKS_E_VERSION || r == CKS_E_CODEC ||
           r == CKS_E_LIMIT || r == CKS_E_DIGEST || r == -ENOMEM;
}

static void decode_hostile(struct chunkobj_ctx *ctx, const uint8_t *data, size_t size)
{
    struct buf out = BUF_INIT;
    uint8_t id[HASH_LEN] = {0};

    /* A raw object's id is the digest of its payload: use it so that
     * successful decodes are exercised, not only rejections. */
    if (size >= CHUNKOBJ_HEADER_LEN)
        hash_sha256(data + CHUNKOBJ_HEADER_LEN, size - CHUNKOBJ_HEADER_LEN, id);
    int r = chunkobj_decode(ctx, data, size, id, FUZZ_MAX_RAW, &out);
    if (!documented(r))
        fuzz_fail("decode returned an undocumented code", r);
    if (r < 0 && out.len != 0)
        fuzz_fail("decode failed but left output", r);
    if (r == 0 && (out.len > FUZZ_MAX_RAW || out.len != size - CHUNKOBJ_HEADER_LEN ||
                   memcmp(out.data, data + CHUNKOBJ_HEADER_LEN, out.len) != 0))
        fuzz_fail("decode accepted an object whose content is not its id", r);

    enum chunkobj_codec codec;
    uint32_t raw_len;
    int h = chunkobj_header(data, size, &codec, &raw_len);
    if (r == 0 && (h != 0 || raw_len != out.len))
        fuzz_fail("header disagrees with a successful decode", h);
    buf_free(&out);
}

static void round_trip(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len)
{
    static const int levels[] = {1, 3, -1, -5, 6, 0};
    int level = levels[(len ? raw[0] : 0) % (sizeof(levels) / sizeof(levels[0]))];
    struct buf obj = BUF_INIT, out = BUF_INIT;
    enum chunkobj_codec codec;
    uint8_t id[HASH_LEN];

    /* Planes on for most inputs, with the estimate or a forced width. */
    static const unsigned widths[] = {0, 0, 2, 4};
    uint8_t sel = len > 1 ? raw[1] : 0;
    struct chunkobj_opts opts = {
        .level = level, .tensor = (sel & 7) != 0, .width = widths[sel >> 6]};
    int r = chunkobj_encode(ctx, raw, len, &opts, &obj, &codec);
    if (r < 0)
        fuzz_fail("encode failed", r);
    if (obj.len > CHUNKOBJ_HEADER_LEN + len)
        fuzz_fail("encode grew the chunk", r);
    hash_sha256(raw, len, id);
    /* A fresh context on decode, the shared one on encode: both paths. */
    r = chunkobj_decode(NULL, obj.data, obj.len, id, len, &out);
    if (r < 0)
        fuzz_fail("decode of a fresh object failed", r);
    if (out.len != len || (len && memcmp(out.data, raw, len) != 0))
        fuzz_fail("round trip changed the chunk", r);
    if (len > 0 && chunkobj_decode(ctx, obj.data, obj.len, id, len - 1, &out) != CKS_E_LIMIT)
        fuzz_fail("max_raw not enforced", r);
    buf_free(&obj);
    buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Reused across inputs, as on the hot path: an error must not poison
     * the contexts.  Reachable at exit, so not a leak. */
    static struct chunkobj_ctx ctx = CHUNKOBJ_CTX_INIT;

    decode_hostile(&ctx, data, size);
    if (size <= FUZZ_MAX_RAW)
        round_trip(&ctx, data, size);
    return 0;
}
