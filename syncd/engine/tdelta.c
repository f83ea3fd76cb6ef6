/*
 * tdelta.c — derived bf16, XOR against a base, and the recipe chunk object
 * that carries them (format in tdelta.h).
 *
 * Design: the recipe is a table and the coded pieces; every piece that is
 * coded at all is a chunk object payload of a plain codec, so one decoder
 * (chunkobj_payload_decode) and its checks serve literals and residuals
 * alike.  Decoding validates the whole table first (kinds, codecs, bases,
 * ranges, sums) without reading a base, so a hostile recipe fails before
 * any work or allocation beyond the output; the digest of the result is
 * checked last, as for every chunk.
 *
 * Speed: the bf16 and XOR loops work in blocks of a fixed element count,
 * so GCC vectorizes them at -O2 (its very-cheap cost model takes only
 * loops whose trip count is a multiple of the vector length); the rest of
 * an array goes element by element.
 */
#include <errno.h>
#include <string.h>

#include "base/err.h"
#include "base/le.h"
#include "engine/tcodec.h"
#include "engine/tdelta.h"

#define BF16_BLOCK 64 /* elements per vectorized block */
#define XOR_BLOCK 64  /* bytes per vectorized block */
#define SAMPLE_NWIN 8 /* an estimate's windows, as tcodec_pick's */
#define SAMPLE_WIN 2048

/* Loads of little-endian values; on a little-endian host one move. */
static inline uint32_t ld32(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return le32_get(p);
#endif
}

static inline uint16_t ld16(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#else
    return (uint16_t)(p[0] | p[1] << 8);
#endif
}

static inline void st16(uint8_t *p, uint16_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, &v, 2);
#else
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
#endif
}

/* ---- bf16 ---- */

static inline uint32_t rne16(uint32_t u)
{
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

static inline uint32_t is_nan32(uint32_t u)
{
    return (u & 0x7FFFFFFFu) > 0x7F800000u;
}

/* Accumulators of the check: any non-NaN mismatch, and the AND and OR of
 * the bf16 values at NaNs (all equal when AND == OR). */
struct bf16_acc {
    uint32_t diff, nan_and, nan_or, any_nan;
};

static inline void bf16_check_one(uint32_t u, uint32_t b, struct bf16_acc *a)
{
    uint32_t nan = 0u - is_nan32(u); /* all ones for a NaN */
    a->diff |= (rne16(u) ^ b) & ~nan;
    a->nan_and &= b | ~nan;
    a->nan_or |= b & nan;
    a->any_nan |= nan;
}

/* One block of BF16_BLOCK elements, with the accumulators in locals so
 * that the loop is one the vectorizer takes. */
static void bf16_check_block(const uint8_t *f, const uint8_t *b, struct bf16_acc *a)
{
    uint32_t diff = 0, nan_and = 0xFFFFFFFFu, nan_or = 0, any = 0;
    for (unsigned i = 0; i < BF16_BLOCK; i++) {
        uint32_t u = ld32(f + 4 * i), v = ld16(b + 2 * i);
        uint32_t nan = 0u - is_nan32(u);
        diff |= (rne16(u) ^ v) & ~nan;
        nan_and &= v | ~nan;
        nan_or |= v & nan;
        any |= nan;
    }
    a->diff |= diff;
    a->nan_and &= nan_and;
    a->nan_or |= nan_or;
    a->any_nan |= any;
}

bool tdelta_bf16_derivable(const uint8_t *f32, const uint8_t *b16, size_t n, uint16_t *ret_nan)
{
    struct bf16_acc a = {0, 0xFFFFFFFFu, 0, 0};
    size_t i = 0;
    for (; i + BF16_BLOCK <= n; i += BF16_BLOCK) {
        bf16_check_block(f32 + 4 * i, b16 + 2 * i, &a);
        if (a.diff)
            return false;
    }
    for (; i < n; i++)
        bf16_check_one(ld32(f32 + 4 * i), ld16(b16 + 2 * i), &a);
    if (a.diff || (a.any_nan && (a.nan_and & 0xFFFFu) != a.nan_or))
        return false;
    if (ret_nan)
        *ret_nan = a.any_nan ? (uint16_t)a.nan_or : TDELTA_NAN_TORCH_CPU;
    return true;
}

static void bf16_derive_block(const uint8_t *f, uint16_t nanv, uint8_t *b)
{
    uint16_t tmp[BF16_BLOCK];
    for (unsigned i = 0; i < BF16_BLOCK; i++) {
        uint32_t u = ld32(f + 4 * i);
        tmp[i] = is_nan32(u) ? nanv : (uint16_t)rne16(u);
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(b, tmp, sizeof(tmp));
#else
    for (unsigned i = 0; i < BF16_BLOCK; i++)
        st16(b + 2 * i, tmp[i]);
#endif
}

void tdelta_bf16_derive(const uint8_t *f32, size_t n, uint16_t nan, uint8_t *b16)
{
    size_t i = 0;
    for (; i + BF16_BLOCK <= n; i += BF16_BLOCK)
        bf16_derive_block(f32 + 4 * i, nan, b16 + 2 * i);
    for (; i < n; i++) {
        uint32_t u = ld32(f32 + 4 * i);
        st16(b16 + 2 * i, is_nan32(u) ? nan : (uint16_t)rne16(u));
    }
}

/* ---- XOR ---- */

void tdelta_xor(const uint8_t *a, const uint8_t *b, size_t len, uint8_t *out)
{
    size_t i = 0;
    for (; i + XOR_BLOCK <= len; i += XOR_BLOCK) {
        uint64_t x[XOR_BLOCK / 8], y[XOR_BLOCK / 8];
        memcpy(x, a + i, XOR_BLOCK);
        memcpy(y, b + i, XOR_BLOCK);
        for (unsigned k = 0; k < XOR_BLOCK / 8; k++)
            x[k] ^= y[k];
        memcpy(out + i, x, XOR_BLOCK);
    }
    for (; i < len; i++)
        out[i] = a[i] ^ b[i];
}

/* ---- SUB: the difference of the elements' bits, zigzag ---- */

#define SUB_BLOCK 16 /* elements per vectorized block */

static void sub4_block(const uint8_t *c, const uint8_t *p, uint8_t *o, bool enc)
{
    uint32_t a[SUB_BLOCK], b[SUB_BLOCK];
    memcpy(a, c, sizeof(a));
    memcpy(b, p, sizeof(b));
    if (enc) {
        for (unsigned i = 0; i < SUB_BLOCK; i++) {
            uint32_t d = a[i] - b[i];
            a[i] = d << 1 ^ (0u - (d >> 31));
        }
    } else {
        for (unsigned i = 0; i < SUB_BLOCK; i++)
            a[i] = b[i] + ((a[i] >> 1) ^ (0u - (a[i] & 1)));
    }
    memcpy(o, a, sizeof(a));
}

static void sub2_block(const uint8_t *c, const uint8_t *p, uint8_t *o, bool enc)
{
    uint16_t a[SUB_BLOCK], b[SUB_BLOCK];
    memcpy(a, c, sizeof(a));
    memcpy(b, p, sizeof(b));
    if (enc) {
        for (unsigned i = 0; i < SUB_BLOCK; i++) {
            uint16_t d = (uint16_t)(a[i] - b[i]);
            a[i] = (uint16_t)(d << 1 ^ (0u - (d >> 15)));
        }
    } else {
        for (unsigned i = 0; i < SUB_BLOCK; i++)
            a[i] = (uint16_t)(b[i] + ((a[i] >> 1) ^ (0u - (a[i] & 1))));
    }
    memcpy(o, a, sizeof(a));
}

/* One element of width w at a time, little endian whatever the host. */
static void sub_one(const uint8_t *c, const uint8_t *p, uint8_t *o, unsigned w, bool enc)
{
    uint32_t a = w == 4 ? le32_get(c) : (uint32_t)(c[0] | c[1] << 8);
    uint32_t b = w == 4 ? le32_get(p) : (uint32_t)(p[0] | p[1] << 8);
    uint32_t mask = w == 4 ? 0xFFFFFFFFu : 0xFFFFu, top = 8 * w - 1, v;
    if (enc) {
        uint32_t d = (a - b) & mask;
        v = (d << 1 ^ (0u - (d >> top))) & mask;
    } else {
        v = (b + ((a >> 1) ^ (0u - (a & 1)))) & mask;
    }
    for (unsigned k = 0; k < w; k++)
        o[k] = (uint8_t)(v >> (8 * k));
}

static void sub_run(const uint8_t *c, const uint8_t *p, size_t len, unsigned w, uint8_t *o,
                    bool enc)
{
    size_t i = 0, blk = (size_t)SUB_BLOCK * w;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + blk <= len; i += blk) {
        if (w == 4)
            sub4_block(c + i, p + i, o + i, enc);
        else
            sub2_block(c + i, p + i, o + i, enc);
    }
#endif
    for (; i + w <= len; i += w)
        sub_one(c + i, p + i, o + i, w, enc);
}

void tdelta_sub(const uint8_t *c, const uint8_t *p, size_t len, unsigned w, uint8_t *out)
{
    sub_run(c, p, len, w, out, true);
}

void tdelta_unsub(const uint8_t *r, const uint8_t *p, size_t len, unsigned w, uint8_t *out)
{
    sub_run(r, p, len, w, out, false);
}

/* ---- encode ---- */

struct enc {
    struct chunkobj_ctx *ctx;
    const struct tdelta_opts *opts;
    const struct tdelta_base *bases;
    size_t nbases;
    int8_t map[TDELTA_MAX_BASES]; /* plan base -> recipe base, -1: unused */
    unsigned nused;
    unsigned used[TDELTA_MAX_BASES]; /* recipe base -> plan base */
    struct buf recs, tmp, res;       /* from opts->scratch, or own */
    struct buf *out;                 /* payloads appended from pay0 on */
    size_t pay0;
    unsigned nbmax; /* plan bases named by a BF16 or XOR segment */
    struct tdelta_stats st;
    uint8_t sample[SAMPLE_NWIN * SAMPLE_WIN];
};

/* The plan covers len, its bases and ranges are in bounds. */
static int plan_check(size_t len, const struct tdelta_seg *plan, size_t nplan,
                      const struct tdelta_base *bases, size_t nbases)
{
    if (nplan > TDELTA_MAX_SEGS || nbases > TDELTA_MAX_BASES || (nplan == 0 && len != 0))
        return -EINVAL;
    uint64_t sum = 0;
    for (size_t i = 0; i < nplan; i++) {
        const struct tdelta_seg *s = &plan[i];
        if (s->len == 0 || (s->width != 0 && s->width != 2 && s->width != 4))
            return -EINVAL;
        sum += s->len;
        if (s->kind == TDELTA_LITERAL)
            continue;
        if (s->kind != TDELTA_BF16 && s->kind != TDELTA_XOR)
            return -EINVAL;
        uint64_t need = s->kind == TDELTA_BF16 ? 2 * (uint64_t)s->len : s->len;
        if (s->base >= nbases || (s->kind == TDELTA_BF16 && s->len % 2) ||
            (uint64_t)s->off + need > bases[s->base].len)
            return -EINVAL;
    }
    return sum == len ? 0 : -EINVAL;
}

static int rec_put(struct enc *e, unsigned kind, unsigned codec, unsigned base, uint32_t out,
                   uint32_t off, size_t plen, unsigned width)
{
    uint8_t r[TDELTA_SEG_REC] = {(uint8_t)kind, (uint8_t)codec, (uint8_t)base, (uint8_t)width};
    le32_put(r + 4, out);
    le32_put(r + 8, off);
    le32_put(r + 12, (uint32_t)plen);
    return buf_append(&e->recs, r, sizeof(r));
}

/* Appends the payload chunkobj_encode would write for p[0..n) (planes at
 * width where tcodec_pick says floats and they save 1/64, else zstd or
 * raw) to e->out; *ret_codec and the payload's length.  Planes, the usual
 * case, are written in place; zstd goes through e->tmp. */
static int code_piece(struct enc *e, const uint8_t *p, size_t n, unsigned width,
                      unsigned *ret_codec, size_t *ret_plen)
{
    struct buf *out = e->out;
    size_t at = out->len;
    unsigned w = n >= CHUNKOBJ_PLANES_MIN ? tcodec_pick(p, n, NULL) : 0;
    if (w && width)
        w = width;
    int r;
    if (w) {
        if ((r = tcodec_encode(p, n, w, out)) < 0)
            return r;
        if (out->len - at + n / 64 <= n) {
            *ret_codec = CHUNKOBJ_PLANES;
            *ret_plen = out->len - at;
            return 0;
        }
        out->len = at;
    }
    struct chunkobj_opts o = {.level = e->opts->level, .tensor = false};
    enum chunkobj_codec codec;
    if ((r = chunkobj_encode(e->ctx, p, n, &o, &e->tmp, &codec)) < 0)
        return r;
    *ret_codec = codec;
    *ret_plen = e->tmp.len - CHUNKOBJ_HEADER_LEN;
    return buf_append(out, e->tmp.data + CHUNKOBJ_HEADER_LEN, *ret_plen);
}

static int literal_put(struct enc *e, const uint8_t *p, uint32_t n, unsigned width)
{
    unsigned codec;
    size_t plen;
    int r = code_piece(e, p, n, width, &codec, &plen);
    if (r == 0)
        r = rec_put(e, TDELTA_LITERAL, codec, 0, n, 0, plen, 0);
    e->st.bytes[TDELTA_LITERAL] += n;
    return r;
}

/* The recipe's index of plan base b, taken into use on first call. */
static unsigned base_use(struct enc *e, unsigned b)
{
    if (e->map[b] < 0) {
        e->map[b] = (int8_t)e->nused;
        e->used[e->nused++] = b;
    }
    return (unsigned)e->map[b];
}

static int bf16_put(struct enc *e, const uint8_t *p, const struct tdelta_seg *s)
{
    const uint8_t *f = e->bases[s->base].data + s->off;
    uint16_t nan;
    if (!tdelta_bf16_derivable(f, p, s->len / 2, &nan)) {
        e->st.fell_back++;
        return literal_put(e, p, s->len, 2);
    }
    uint8_t v[2];
    st16(v, nan);
    int r = rec_put(e, TDELTA_BF16, 0, base_use(e, s->base), s->len, s->off, 2, 0);
    if (r == 0)
        r = buf_append(e->out, v, 2);
    e->st.bytes[TDELTA_BF16] += s->len;
    return r;
}

/* A delta segment's candidates: the bytes, XOR, SUB (where the width
 * allows). */
static void cand_make(unsigned kind, const uint8_t *p, const uint8_t *base, size_t len, unsigned w,
                      uint8_t *out)
{
    if (kind == TDELTA_XOR)
        tdelta_xor(p, base, len, out);
    else if (kind == TDELTA_SUB)
        tdelta_sub(p, base, len, w, out);
    else
        memcpy(out, p, len);
}

/* tcodec_pick's permille for candidate kind, on a sample: SAMPLE_NWIN
 * windows of SAMPLE_WIN bytes spread over the segment (all of it when
 * shorter), so that only the chosen candidate is made in whole. */
static unsigned cand_estimate(struct enc *e, unsigned kind, const uint8_t *p, const uint8_t *base,
                              size_t len, unsigned w)
{
    size_t n = 0;
    if (len <= sizeof(e->sample)) {
        cand_make(kind, p, base, len, w, e->sample);
        n = len;
    } else {
        for (unsigned j = 0; j < SAMPLE_NWIN; j++) {
            /* starts on a multiple of 8, so of the width */
            size_t off =
                (size_t)((uint64_t)j * (len - SAMPLE_WIN) / (SAMPLE_NWIN - 1)) & ~(size_t)7;
            cand_make(kind, p + off, base + off, SAMPLE_WIN, w, e->sample + n);
            n += SAMPLE_WIN;
        }
    }
    unsigned est;
    tcodec_pick(e->sample, n, &est);
    return est;
}

/* Codes candidate kind in whole; *ret_plen: its payload's length. */
static int cand_code(struct enc *e, unsigned kind, const uint8_t *p, const struct tdelta_seg *s,
                     unsigned *ret_codec, size_t *ret_plen)
{
    if (kind == TDELTA_LITERAL)
        return code_piece(e, p, s->len, s->width, ret_codec, ret_plen);
    e->res.len = 0;
    int r = buf_reserve(&e->res, s->len);
    if (r < 0)
        return r;
    cand_make(kind, p, e->bases[s->base].data + s->off, s->len, s->width, e->res.data);
    return code_piece(e, e->res.data, s->len, s->width, ret_codec, ret_plen);
}

/* The candidate that codes smallest: by estimate on a sample, or (exact)
 * by coding each. */
static int cand_best(struct enc *e, const uint8_t *p, const struct tdelta_seg *s,
                     unsigned *ret_kind)
{
    unsigned kinds[3] = {TDELTA_LITERAL, TDELTA_XOR, TDELTA_SUB}, n = 2, best = 0;
    if (!e->opts->xor_only && s->width && s->len % s->width == 0)
        n = 3;
    const uint8_t *base = e->bases[s->base].data + s->off;
    uint64_t best_size = UINT64_MAX;
    for (unsigned i = 0; i < n; i++) {
        uint64_t size;
        if (e->opts->exact) {
            unsigned codec;
            size_t plen;
            size_t at = e->out->len;
            int r = cand_code(e, kinds[i], p, s, &codec, &plen);
            e->out->len = at;
            if (r < 0)
                return r;
            size = plen;
        } else {
            size = cand_estimate(e, kinds[i], p, base, s->len, s->width);
        }
        if (size < best_size)
            best_size = size, best = i;
    }
    *ret_kind = kinds[best];
    return 0;
}

/* A delta segment as XOR, SUB or the bytes, whichever codes smallest. */
static int delta_put(struct enc *e, const uint8_t *p, const struct tdelta_seg *s)
{
    unsigned kind = 0, codec;
    size_t plen;
    int r = cand_best(e, p, s, &kind);
    if (r < 0)
        return r;
    if (kind == TDELTA_LITERAL) {
        e->st.fell_back++;
        return literal_put(e, p, s->len, s->width);
    }
    if ((r = cand_code(e, kind, p, s, &codec, &plen)) < 0)
        return r;
    r = rec_put(e, kind, codec, base_use(e, s->base), s->len, s->off, plen,
                kind == TDELTA_SUB ? s->width : 0);
    e->st.bytes[kind] += s->len;
    return r;
}

/* Room for the table before the payloads: the header, the recipe head,
 * the records of every base the plan names, and one record per segment
 * (a plan segment is always one record). */
static int recipe_start(struct enc *e, const struct tdelta_seg *plan, size_t nplan)
{
    bool named[TDELTA_MAX_BASES] = {false};
    for (size_t i = 0; i < nplan; i++)
        if (plan[i].kind != TDELTA_LITERAL && !named[plan[i].base]) {
            named[plan[i].base] = true;
            e->nbmax++;
        }
    e->pay0 = CHUNKOBJ_HEADER_LEN + TDELTA_HEAD + TDELTA_BASE_REC * (size_t)e->nbmax +
              TDELTA_SEG_REC * nplan;
    buf_reset(e->out);
    int r = buf_reserve(e->out, e->pay0);
    if (r == 0)
        e->out->len = e->pay0;
    return r;
}

/* Writes the table in front of the payloads, first moving them down over
 * the records of bases no segment kept (after fallbacks to LITERAL). */
static void recipe_finish(struct enc *e, size_t len, size_t nsegs)
{
    struct buf *out = e->out;
    size_t gap = TDELTA_BASE_REC * (size_t)(e->nbmax - e->nused);
    if (gap) {
        memmove(out->data + e->pay0 - gap, out->data + e->pay0, out->len - e->pay0);
        out->len -= gap;
        out->data[out->len] = 0;
    }
    uint8_t *d = out->data;
    chunkobj_header_put(d, CHUNKOBJ_RECIPE, (uint32_t)len);
    d += CHUNKOBJ_HEADER_LEN;
    d[0] = TDELTA_RECIPE_VERSION;
    d[1] = (uint8_t)e->nused;
    d[2] = d[3] = 0;
    le32_put(d + 4, (uint32_t)nsegs);
    d += TDELTA_HEAD;
    for (unsigned i = 0; i < e->nused; i++, d += TDELTA_BASE_REC) {
        memcpy(d, e->bases[e->used[i]].id, HASH_LEN);
        le32_put(d + HASH_LEN, (uint32_t)e->bases[e->used[i]].len);
    }
    memcpy(d, e->recs.data, e->recs.len);
}

void tdelta_scratch_free(struct tdelta_scratch *sc)
{
    for (unsigned i = 0; i < 3; i++)
        buf_free(&sc->b[i]);
}

/* Hands the buffers back to the caller's scratch, or frees them. */
static void enc_free(struct enc *e)
{
    struct tdelta_scratch own = {{e->recs, e->tmp, e->res}};
    if (e->opts->scratch)
        *e->opts->scratch = own;
    else
        tdelta_scratch_free(&own);
}

static int plan_run(struct enc *e, const uint8_t *raw, const struct tdelta_seg *plan, size_t nplan)
{
    size_t pos = 0;
    int r = 0;
    for (size_t i = 0; i < nplan && r == 0; i++) {
        const struct tdelta_seg *s = &plan[i];
        if (s->kind == TDELTA_BF16)
            r = bf16_put(e, raw + pos, s);
        else if (s->kind == TDELTA_XOR)
            r = delta_put(e, raw + pos, s);
        else
            r = literal_put(e, raw + pos, s->len, s->width);
        pos += s->len;
    }
    return r;
}

int tdelta_encode(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len,
                  const struct tdelta_seg *plan, size_t nplan, const struct tdelta_base *bases,
                  size_t nbases, const struct tdelta_opts *opts, struct buf *out,
                  struct tdelta_stats *st)
{
    if (len > CHUNKOBJ_MAX_RAW)
        return CKS_E_LIMIT;
    int r = plan_check(len, plan, nplan, bases, nbases);
    if (r < 0)
        return r;
    /* one zstd context for all pieces, also when the caller has none */
    struct chunkobj_ctx local = CHUNKOBJ_CTX_INIT;
    struct enc e = {
        .ctx = ctx ? ctx : &local, .opts = opts, .bases = bases, .nbases = nbases, .out = out};
    memset(e.map, -1, sizeof(e.map));
    if (opts->scratch) {
        struct buf *b = opts->scratch->b;
        e.recs = b[0], e.tmp = b[1], e.res = b[2];
        e.recs.len = e.tmp.len = e.res.len = 0;
    }
    r = recipe_start(&e, plan, nplan);
    if (r == 0)
        r = plan_run(&e, raw, plan, nplan);
    if (r == 0 && e.nused > 0) {
        recipe_finish(&e, len, nplan);
        e.st.recipe = true;
    } else if (r == 0) {
        struct chunkobj_opts o = {
            .level = opts->level, .tensor = true, .width = nplan ? plan[0].width : 0};
        r = chunkobj_encode(e.ctx, raw, len, &o, out, NULL);
    }
    enc_free(&e);
    chunkobj_ctx_free(&local);
    if (r < 0)
        buf_reset(out);
    else if (st)
        *st = e.st;
    return r;
}

/* ---- decode ---- */

struct recipe {
    uint32_t raw_len;
    unsigned nbases;
    size_t nsegs;
    const uint8_t *brec, *srec, *pay;
    size_t paylen;
};

/* One segment record against the recipe's bounds; *ret_plen its payload
 * length. */
static int seg_check(const struct recipe *rc, const uint8_t *s, bool *named, uint64_t *ret_out,
                     uint64_t *ret_plen)
{
    unsigned kind = s[0], codec = s[1], base = s[2], width = s[3];
    uint32_t out = le32_get(s + 4), off = le32_get(s + 8), plen = le32_get(s + 12);
    if (out == 0 || kind >= TDELTA_NKINDS)
        return CKS_E_FORMAT;
    if (kind == TDELTA_SUB ? (width != 2 && width != 4) || out % width : width != 0)
        return CKS_E_FORMAT;
    if (kind == TDELTA_LITERAL) {
        if (base || off || codec >= CHUNKOBJ_NCODECS)
            return CKS_E_FORMAT;
    } else {
        uint64_t need = kind == TDELTA_BF16 ? 2 * (uint64_t)out : out;
        if (base >= rc->nbases ||
            (uint64_t)off + need > le32_get(rc->brec + TDELTA_BASE_REC * base + HASH_LEN))
            return CKS_E_FORMAT;
        if (kind == TDELTA_BF16 && (out % 2 || codec || plen != 2))
            return CKS_E_FORMAT;
        if (kind != TDELTA_BF16 && codec >= CHUNKOBJ_NCODECS)
            return CKS_E_FORMAT;
        named[base] = true;
    }
    *ret_out = out;
    *ret_plen = plen;
    return 0;
}

/* Parses and validates a recipe's table (the header is checked). */
static int recipe_parse(const uint8_t *obj, size_t len, struct recipe *rc)
{
    const uint8_t *p = obj + CHUNKOBJ_HEADER_LEN;
    size_t n = len - CHUNKOBJ_HEADER_LEN;
    rc->raw_len = le32_get(obj + 8);
    if (n < TDELTA_HEAD || p[0] != TDELTA_RECIPE_VERSION || p[2] || p[3])
        return CKS_E_FORMAT;
    rc->nbases = p[1];
    rc->nsegs = le32_get(p + 4);
    if (rc->nbases > TDELTA_MAX_BASES || rc->nsegs > TDELTA_MAX_SEGS ||
        (rc->nsegs == 0 && rc->raw_len != 0))
        return CKS_E_FORMAT;
    size_t table = TDELTA_HEAD + TDELTA_BASE_REC * rc->nbases + TDELTA_SEG_REC * rc->nsegs;
    if (n < table)
        return CKS_E_FORMAT;
    rc->brec = p + TDELTA_HEAD;
    rc->srec = rc->brec + TDELTA_BASE_REC * rc->nbases;
    rc->pay = p + table;
    rc->paylen = n - table;
    for (unsigned b = 0; b < rc->nbases; b++)
        if (le32_get(rc->brec + TDELTA_BASE_REC * b + HASH_LEN) > CHUNKOBJ_MAX_RAW)
            return CKS_E_FORMAT;
    bool named[TDELTA_MAX_BASES] = {false};
    uint64_t sum_out = 0, sum_plen = 0;
    for (size_t i = 0; i < rc->nsegs; i++) {
        uint64_t o, pl;
        int r = seg_check(rc, rc->srec + TDELTA_SEG_REC * i, named, &o, &pl);
        if (r < 0)
            return r;
        sum_out += o;
        sum_plen += pl;
    }
    for (unsigned b = 0; b < rc->nbases; b++)
        if (!named[b])
            return CKS_E_FORMAT;
    return sum_out == rc->raw_len && sum_plen == rc->paylen ? 0 : CKS_E_FORMAT;
}

int tdelta_refs(const uint8_t *obj, size_t len, struct tdelta_ref *refs, size_t cap, size_t *ret_n)
{
    enum chunkobj_codec codec;
    uint32_t raw_len;
    *ret_n = 0;
    int r = chunkobj_header(obj, len, &codec, &raw_len);
    if (r < 0 || codec != CHUNKOBJ_RECIPE)
        return r;
    struct recipe rc;
    if ((r = recipe_parse(obj, len, &rc)) < 0)
        return r;
    if (rc.nbases > cap)
        return CKS_E_LIMIT;
    for (unsigned b = 0; b < rc.nbases; b++) {
        memcpy(refs[b].id, rc.brec + TDELTA_BASE_REC * b, HASH_LEN);
        refs[b].len = le32_get(rc.brec + TDELTA_BASE_REC * b + HASH_LEN);
    }
    *ret_n = rc.nbases;
    return 0;
}

/* The plaintext of each recipe base, from bases by id. */
static int bases_find(const struct recipe *rc, const struct tdelta_base *bases, size_t nbases,
                      const uint8_t **data)
{
    for (unsigned b = 0; b < rc->nbases; b++) {
        const uint8_t *rec = rc->brec + TDELTA_BASE_REC * b;
        size_t i = 0;
        while (i < nbases && memcmp(bases[i].id, rec, HASH_LEN) != 0)
            i++;
        if (i == nbases)
            return -ENOENT;
        if (bases[i].len != le32_get(rec + HASH_LEN) || (bases[i].len && !bases[i].data))
            return CKS_E_FORMAT;
        data[b] = bases[i].data;
    }
    return 0;
}

static int seg_decode(struct chunkobj_ctx *ctx, const uint8_t *s, const uint8_t *pay,
                      const uint8_t *const *data, uint8_t *dst)
{
    unsigned kind = s[0], codec = s[1];
    uint32_t out = le32_get(s + 4), off = le32_get(s + 8), plen = le32_get(s + 12);
    if (kind == TDELTA_BF16) {
        tdelta_bf16_derive(data[s[2]] + off, out / 2, ld16(pay), dst);
        return 0;
    }
    int r = chunkobj_payload_decode(ctx, codec, pay, plen, dst, out);
    if (r == CKS_E_FORMAT)
        r = CKS_E_CODEC;
    if (r == 0 && kind == TDELTA_XOR)
        tdelta_xor(dst, data[s[2]] + off, out, dst);
    if (r == 0 && kind == TDELTA_SUB)
        tdelta_unsub(dst, data[s[2]] + off, out, s[3], dst);
    return r;
}

static int recipe_decode(struct chunkobj_ctx *ctx, const struct recipe *rc,
                         const uint8_t *const *data, uint8_t *dst)
{
    const uint8_t *pay = rc->pay;
    for (size_t i = 0; i < rc->nsegs; i++) {
        const uint8_t *s = rc->srec + TDELTA_SEG_REC * i;
        int r = seg_decode(ctx, s, pay, data, dst);
        if (r < 0)
            return r;
        dst += le32_get(s + 4);
        pay += le32_get(s + 12);
    }
    return 0;
}

/* Recipe object obj (its header read: raw_len bytes) decoded with bases
 * into out->data, reserved for it (out->len is left to the caller). */
static int recipe_into(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len, uint32_t raw_len,
                       const struct tdelta_base *bases, size_t nbases, struct buf *out)
{
    struct recipe rc;
    const uint8_t *data[TDELTA_MAX_BASES];
    int r;
    if ((r = recipe_parse(obj, len, &rc)) < 0 || (r = bases_find(&rc, bases, nbases, data)) < 0)
        return r;
    if ((r = buf_reserve(out, raw_len)) < 0)
        return r;
    /* one zstd context for all segments, also when the caller has none */
    struct chunkobj_ctx local = CHUNKOBJ_CTX_INIT;
    r = recipe_decode(ctx ? ctx : &local, &rc, data, out->data);
    chunkobj_ctx_free(&local);
    return r;
}

int tdelta_decode(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len,
                  const uint8_t id[HASH_LEN], size_t max_raw, const struct tdelta_base *bases,
                  size_t nbases, struct buf *out)
{
    enum chunkobj_codec codec;
    uint32_t raw_len;
    buf_reset(out);
    int r = chunkobj_header(obj, len, &codec, &raw_len);
    if (r < 0)
        return r;
    if (codec != CHUNKOBJ_RECIPE)
        return chunkobj_decode(ctx, obj, len, id, max_raw, out);
    if (raw_len > max_raw)
        return CKS_E_LIMIT;
    r = recipe_into(ctx, obj, len, raw_len, bases, nbases, out);
    return chunkobj_decoded(ctx, r, out, raw_len, id);
}

int tdelta_decode_same(struct chunkobj_ctx *ctx, const uint8_t *obj, size_t len, const uint8_t *raw,
                       size_t raw_len, const struct tdelta_base *bases, size_t nbases,
                       struct buf *out)
{
    enum chunkobj_codec codec;
    uint32_t hlen;
    buf_reset(out);
    int r = chunkobj_header(obj, len, &codec, &hlen);
    if (r == 0 && (codec != CHUNKOBJ_RECIPE || hlen != raw_len))
        r = CKS_E_FORMAT;
    if (r < 0 || (r = recipe_into(ctx, obj, len, hlen, bases, nbases, out)) < 0)
        return r;
    if (raw_len && memcmp(out->data, raw, raw_len) != 0)
        r = CKS_E_DIGEST;
    out->len = r == 0 ? raw_len : 0;
    return r;
}
