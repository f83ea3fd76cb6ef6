/*
 * tdelta.h — successive checkpoints stored as what changed (issue 27):
 * bf16 tensors derived from their fp32 master, float tensors as a delta
 * (XOR, or the difference of the bit patterns) against the parent
 * checkpoint's same tensor, and the chunk object that carries both, a
 * recipe (chunk object version 3, codec 3; DRAFT).
 *
 * Calling sequence (encode side; the caller knows the tensors):
 *   tdelta_bf16_derivable(f32, b16, n, &nan)    // is b16 RNE of f32?
 *   struct tdelta_seg plan[] = {...};           // cover raw in order
 *   tdelta_encode(ctx, raw, len, plan, nplan, bases, nbases, &opts, &out, &st);
 * out is then a recipe, or a plain chunk object where no segment kept a
 * base (st.recipe says which).
 * Decode side:
 *   tdelta_refs(obj, len, refs, TDELTA_MAX_BASES, &n);   // which bases
 *   ... fetch and decode each base chunk to plaintext (a base may itself
 *       be a recipe: resolve it first) ...
 *   tdelta_decode(ctx, obj, len, id, max_raw, bases, n, &out);
 * tdelta_decode also decodes plain objects (versions 1, 2), so a reader
 * can call it for every chunk (with no bases for a plain one).
 *
 * Pure transforms: no I/O, no globals; thread-safe as chunkobj is.
 *
 * Recipe payload, version 1 (after the 12-byte chunk header "CKC1", 3, 3,
 * 0, 0, raw length L; integers little endian):
 *
 *   offset  size    field
 *   0       1       recipe version: 1
 *   1       1       B: base count, 0..TDELTA_MAX_BASES
 *   2       2       reserved, zero
 *   4       4       S: segment count, 1..TDELTA_MAX_SEGS (0 only when L = 0)
 *   8       36*B    base records: the base chunk's id (32 bytes), then its
 *                   raw length (4; at most 256 MiB)
 *   ...     16*S    segment records, in the order of the chunk's bytes:
 *                     0   1  kind: 0 LITERAL, 1 BF16, 2 XOR, 3 SUB
 *                     1   1  codec of the segment's payload: 0 raw,
 *                            1 zstd, 2 byte planes (chunk object codecs;
 *                            BF16: 0)
 *                     2   1  base: index of a base record (LITERAL: 0)
 *                     3   1  width: SUB: 2 or 4; other kinds: 0
 *                     4   4  out: bytes of the chunk it yields, >= 1
 *                     8   4  off: where its range starts in the base
 *                            (LITERAL: 0)
 *                     12  4  plen: bytes of its payload
 *   ...     the segment payloads, back to back in segment order; nothing
 *           follows the last.
 *
 * LITERAL: the payload, decoded by its codec as a chunk object payload of
 *   that codec (engine/chunkobj.h, engine/tcodec.h), is the out bytes.
 * BF16: out is even; the base range is [off, off + 2*out): out/2 fp32
 *   values, little endian.  The payload is 2 bytes, the bf16 (LE) that
 *   every NaN becomes; every other value u (its 32 bits) becomes
 *   (u + 0x7FFF + ((u >> 16) & 1)) >> 16 (round to nearest even; Inf
 *   stays Inf, values above the largest bf16 round to Inf, subnormals
 *   round as bits, -0.0 stays -0.0), written LE.  This is torch's
 *   .to(torch.bfloat16); torch 1.13 on an AVX2 CPU makes every NaN 0xFFFF,
 *   its scalar path 0x7FC0, CUDA 0x7FFF: hence the NaN value.
 * XOR: the base range is [off, off + out); the payload, decoded by its
 *   codec, XORed byte by byte with the range, is the out bytes.
 * SUB: as XOR, but out is a multiple of the width w and the decoded
 *   payload holds w-byte LE integers z; with b the base's element there,
 *   the chunk's element is b + ((z >> 1) ^ -(z & 1)) mod 2^(8w) (z is the
 *   zigzag of the difference of the bit patterns: for floats that moved a
 *   little, a small number, where XOR flips every bit a carry crosses).
 * A reader rejects: an unknown version, kind or codec, nonzero reserved
 * bytes, a width other than 2 or 4 (SUB; the out not a multiple of it) or
 * not 0 (other kinds), B or S above the bounds, a base index >= B, a base no segment
 * names, a range past its base's recorded length, a BF16 with an odd out
 * or a payload other than 2 bytes, outs that do not sum to L, plens that
 * do not sum to the rest of the payload; and, as for every chunk, a result
 * whose id is not the chunk's.
 */
#ifndef CKS_TDELTA_H
#define CKS_TDELTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/chunkobj.h"
#include "engine/hash.h"

#define TDELTA_RECIPE_VERSION 1
#define TDELTA_MAX_BASES 16
#define TDELTA_MAX_SEGS 65536u
#define TDELTA_HEAD 8      /* recipe header */
#define TDELTA_BASE_REC 36 /* id + length */
#define TDELTA_SEG_REC 16
/* The NaN torch 1.13's CPU cast (AVX2) writes, and the one a derivation
 * records when the fp32 array has no NaN. */
#define TDELTA_NAN_TORCH_CPU 0xFFFFu

enum tdelta_kind { TDELTA_LITERAL = 0, TDELTA_BF16 = 1, TDELTA_XOR = 2, TDELTA_SUB = 3 };
#define TDELTA_NKINDS 4

/* ---- the transforms (arrays are little-endian bytes, any alignment) ---- */

/* True when b16[0..2n) is, element for element, the round to nearest even
 * of f32[0..4n) with every NaN made one bf16 value; *ret_nan (may be NULL)
 * receives that value (TDELTA_NAN_TORCH_CPU when f32 has no NaN).  False
 * for anything else: truncation, stochastic rounding, NaNs made different
 * values. */
bool tdelta_bf16_derivable(const uint8_t *f32, const uint8_t *b16, size_t n, uint16_t *ret_nan);
/* Writes the derivation of f32[0..4n) into b16[0..2n), NaNs as nan. */
void tdelta_bf16_derive(const uint8_t *f32, size_t n, uint16_t nan, uint8_t *b16);
/* out[i] = a[i] ^ b[i] for i < len (out may be a or b). */
void tdelta_xor(const uint8_t *a, const uint8_t *b, size_t len, uint8_t *out);
/* SUB of width w (2, 4): per element (w bytes, LE) of c and p,
 * d = c - p mod 2^(8w) and out = zigzag(d) = (d << 1) ^ (d >> (8w-1))
 * taken as signed; tdelta_unsub() inverts it (out = p + unzigzag(r)).
 * len a multiple of w; out may be c (r). */
void tdelta_sub(const uint8_t *c, const uint8_t *p, size_t len, unsigned w, uint8_t *out);
void tdelta_unsub(const uint8_t *r, const uint8_t *p, size_t len, unsigned w, uint8_t *out);

/* ---- the recipe ---- */

/* A base: a chunk's id and its plaintext. */
struct tdelta_base {
    uint8_t id[HASH_LEN];
    const uint8_t *data;
    size_t len;
};

/* One segment of an encode plan.  len: bytes of the chunk (>= 1); base,
 * off: the range in bases[base] (BF16: 2*len bytes of fp32; XOR: len
 * bytes); width: the element width of the chunk's bytes (2, 4; 0 =
 * unknown), handed to the plane codec for LITERAL and XOR.  An XOR plan
 * segment is a delta against its range: it is written as XOR, SUB (width
 * 2 or 4 only) or LITERAL, whichever codes smallest; SUB is not a plan
 * kind. */
struct tdelta_seg {
    enum tdelta_kind kind;
    uint32_t len;
    uint32_t base;
    uint32_t off;
    unsigned width;
};

/* Buffers an encoder reuses from call to call (one thread at a time):
 * struct tdelta_scratch sc = TDELTA_SCRATCH_INIT; ... tdelta_scratch_free. */
struct tdelta_scratch {
    struct buf b[3];
};
#define TDELTA_SCRATCH_INIT                                                                        \
    {                                                                                              \
        {                                                                                          \
            BUF_INIT, BUF_INIT, BUF_INIT                                                           \
        }                                                                                          \
    }
void tdelta_scratch_free(struct tdelta_scratch *sc);

struct tdelta_opts {
    int level;                      /* zstd's, for what goes to zstd */
    bool exact;                     /* XOR plan segments: code each candidate (the bytes,
                                       the XOR residual, the SUB residual) and keep the
                                       smallest; else choose by tcodec_pick's estimate on
                                       a sample of each (8 windows of 2 KiB) */
    bool xor_only;                  /* never SUB */
    struct tdelta_scratch *scratch; /* may be NULL */
};

/* What tdelta_encode did: raw bytes written per kind, plan segments
 * written as LITERAL because they did not derive (BF16) or XOR did not
 * pay, and whether out is a recipe. */
struct tdelta_stats {
    size_t bytes[TDELTA_NKINDS];
    size_t fell_back;
    bool recipe;
};

/* Encodes raw[0..len) by plan (nplan segments whose lens sum to len) into
 * out (reset first): a recipe naming the bases that kept a segment, or,
 * when none did, chunkobj_encode()'s object (tensor on, the first
 * segment's width).  A BF16 segment that is not derivable, and an XOR
 * segment whose residuals (XOR, SUB) are estimated (or, with opts->exact,
 * coded) no smaller than the bytes, are written as LITERAL; every coded
 * piece is coded on its own, as chunkobj_encode codes a chunk.
 * Returns 0, -EINVAL (lens not summing to len, a base index or range out
 * of bounds, nplan or nbases above the bounds, a bad level or width),
 * CKS_E_LIMIT (len above CHUNKOBJ_MAX_RAW), -ENOMEM or CKS_E_CODEC.
 * st may be NULL. */
int tdelta_encode(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len,
                  const struct tdelta_seg *plan, size_t nplan, const struct tdelta_base *bases,
                  size_t nbases, const struct tdelta_opts *opts, struct buf *out,
                  struct tdelta_stats *st);

/* A base a recipe needs: id and raw length. */
struct tdelta_ref {
    uint8_t id[HASH_LEN];
    uint32_t len;
};

/* The bases the object obj[0..len) names, into refs[0..cap): *ret_n = 0
 * for a plain object.  Returns 0, chunkobj_header()'s errors, CKS_E_FORMAT
 * (a recipe that does not parse, as tdelta_decode checks it) or
 * CKS_E_LIMIT (more than cap bases). */
int tdelta_refs(const uint8_t *obj, size_t len, struct tdelta_ref *refs, size_t cap, size_t *ret_n);

/* Decodes obj into out (reset first) as chunkobj_decode() does, with the
 * base plaintexts a recipe names taken from bases[0..nbases) (found by id,
 * any order; extra ones are ignored), and verifies the result's id.
 * Returns chunkobj_decode()'s codes, and -ENOENT (a named base is not in
 * bases) or CKS_E_FORMAT (a base whose length is not the recorded one, a
 * recipe that does not parse).  A wrong base that carries the right id
 * fails as CKS_E_DIGEST.  Bounded: never reads outside obj or a base,
 * allocates at most max(raw length, one segment) + O(1) beyond out. */
int tdelta_decode(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len,
                  const uint8_t id[HASH_LEN], size_t max_raw, const struct tdelta_base *bases,
                  size_t nbases, struct buf *out);

/* The writer's check of a recipe it just encoded from raw[0..raw_len),
 * bytes it knows to be the chunk (hashed to its id and kept since):
 * decodes the recipe obj into out as tdelta_decode does, and compares
 * the result with raw instead of hashing it (as strong: raw has the id).
 * Returns tdelta_decode()'s codes; CKS_E_DIGEST when the bytes differ,
 * CKS_E_FORMAT for an object that is no recipe of raw_len bytes. */
int tdelta_decode_same(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len, const uint8_t *raw,
                       size_t raw_len, const struct tdelta_base *bases, size_t nbases,
                       struct buf *out);

#endif
