/*
 * fuzz-tdelta.c — recipes (engine/tdelta.h) arrive from regions we do not
 * trust, with bases that may be anything.
 *
 * Input: byte 0 (low 2 bits: the base count, 0..3), then per base a 2-byte
 * little-endian length (taken mod 4097) and its bytes, then an object.
 * (a) Decode the object with those bases.  The recipe's base ids are first
 *     overwritten with the ids of the supplied bases (in order, as many
 *     as both have), so decoding gets past the lookup to the ranges and
 *     payloads.  The result must be a documented code, out empty on
 *     failure; success is impossible (the chunk id is all zeros) except
 *     by a SHA-256 collision.
 * (b) Round trip: the object's bytes as a chunk, a plan drawn from them
 *     over the supplied bases (some BF16 segments made derivable first),
 *     encode, then decode with the bases: exact bytes back, or abort().
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/tdelta.h"

#define FUZZ_MAX_BASES 3
#define FUZZ_MAX_BASE 4096
#define FUZZ_MAX_RAW (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_fail(const char *what, int r)
{
    fprintf(stderr, "fuzz-tdelta: %s (%d: %s)\n", what, r, err_str(r));
    abort();
}

static int documented(int r)
{
    return r == CKS_E_FORMAT || r == CKS_E_VERSION || r == CKS_E_CODEC || r == CKS_E_LIMIT ||
           r == CKS_E_DIGEST || r == -ENOENT || r == -ENOMEM;
}

/* Splits the input into bases and the object; returns the base count. */
static size_t split(const uint8_t *data, size_t size, struct tdelta_base *bases, size_t *ret_at)
{
    size_t at = 1, nb = size ? (data[0] & 3u) % (FUZZ_MAX_BASES + 1) : 0;
    for (size_t i = 0; i < nb; i++) {
        size_t len =
            at + 2 <= size ? (size_t)(data[at] | data[at + 1] << 8) % (FUZZ_MAX_BASE + 1) : 0;
        at += 2;
        if (at > size)
            at = size;
        if (len > size - at)
            len = size - at;
        bases[i].data = data + at;
        bases[i].len = len;
        hash_sha256(data + at, len, bases[i].id);
        at += len;
    }
    *ret_at = at < size ? at : size;
    return nb;
}

static void decode_hostile(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len,
                           const struct tdelta_base *bases, size_t nb)
{
    uint8_t *copy = malloc(len + 1), id[HASH_LEN] = {0};
    if (!copy)
        return;
    memcpy(copy, obj, len);
    size_t rb = len > CHUNKOBJ_HEADER_LEN + 1 ? obj[CHUNKOBJ_HEADER_LEN + 1] : 0;
    for (size_t i = 0; i < nb && i < rb; i++) {
        size_t at = CHUNKOBJ_HEADER_LEN + TDELTA_HEAD + TDELTA_BASE_REC * i;
        if (at + HASH_LEN <= len)
            memcpy(copy + at, bases[i].id, HASH_LEN);
    }
    struct buf out = BUF_INIT;
    int r = tdelta_decode(ctx, copy, len, id, FUZZ_MAX_RAW, bases, nb, &out);
    if (r == 0 || !documented(r))
        fuzz_fail("decode returned an undocumented code", r);
    if (out.len != 0)
        fuzz_fail("decode failed but left output", r);
    struct tdelta_ref refs[TDELTA_MAX_BASES];
    size_t n = 0;
    r = tdelta_refs(copy, len, refs, TDELTA_MAX_BASES, &n);
    if (r != 0 && !documented(r))
        fuzz_fail("refs returned an undocumented code", r);
    buf_free(&out);
    free(copy);
}

/* One plan segment drawn from selector bytes s, s2; left: bytes to cover. */
static struct tdelta_seg draw(uint8_t s, uint8_t s2, size_t left, const struct tdelta_base *bases,
                              size_t nb)
{
    struct tdelta_seg g = {TDELTA_LITERAL, 0, 0, 0, (s & 16) ? 4 : 2};
    size_t len = 1 + ((size_t)s * 37 + s2) % 700;
    g.len = (uint32_t)(len < left ? len : left);
    unsigned kind = s % 3;
    if (kind == TDELTA_LITERAL || nb == 0)
        return g;
    g.base = s2 % nb;
    size_t need = kind == TDELTA_BF16 ? (g.len & ~1u) * 2 : g.len;
    if (kind == TDELTA_BF16 && g.len < 2)
        return g;
    if (need > bases[g.base].len)
        return g;
    g.kind = (enum tdelta_kind)kind;
    if (kind == TDELTA_BF16)
        g.len &= ~1u;
    g.off = (uint32_t)((s2 * 131u) % (bases[g.base].len - need + 1));
    return g;
}

static void round_trip(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len,
                       const struct tdelta_base *bases, size_t nb)
{
    static struct tdelta_seg plan[4096];
    uint8_t *raw = malloc(len + 1), id[HASH_LEN];
    if (!raw)
        return;
    memcpy(raw, obj, len);
    size_t n = 0, pos = 0;
    while (pos < len && n < 4096) {
        plan[n] = draw(raw[pos], raw[(pos + 1) % len], len - pos, bases, nb);
        if (plan[n].kind == TDELTA_BF16 && (raw[pos] & 8))
            tdelta_bf16_derive(bases[plan[n].base].data + plan[n].off, plan[n].len / 2, 0x7FC0,
                               raw + pos);
        pos += plan[n++].len;
    }
    if (pos < len) {
        free(raw);
        return;
    }
    struct tdelta_opts o = {.level = 1, .exact = len && (raw[0] & 32)};
    struct buf enc = BUF_INIT, out = BUF_INIT;
    int r = tdelta_encode(ctx, raw, len, plan, n, bases, nb, &o, &enc, NULL);
    if (r < 0)
        fuzz_fail("encode failed", r);
    hash_sha256(raw, len, id);
    r = tdelta_decode(ctx, enc.data, enc.len, id, len, bases, nb, &out);
    if (r < 0)
        fuzz_fail("decode of a fresh recipe failed", r);
    if (out.len != len || (len && memcmp(out.data, raw, len) != 0))
        fuzz_fail("round trip changed the chunk", r);
    buf_free(&enc);
    buf_free(&out);
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct chunkobj_ctx ctx = CHUNKOBJ_CTX_INIT;
    struct tdelta_base bases[FUZZ_MAX_BASES];
    size_t at = 0, nb = split(data, size, bases, &at);

    decode_hostile(&ctx, data + at, size - at, bases, nb);
    if (size - at <= FUZZ_MAX_RAW)
        round_trip(&ctx, data + at, size - at, bases, nb);
    return 0;
}
