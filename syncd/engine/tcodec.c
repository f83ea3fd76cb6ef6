/*
 * tcodec.c — byte planes plus a static order-0 rANS coder for float
 * tensors (payload format in tcodec.h).
 *
 * Design: the bytes of a float that carry sign and exponent have a few
 * bits of entropy, the mantissa bytes are noise.  Splitting the chunk by
 * position mod the width gives planes whose order-0 statistics are those
 * of one byte of the element, and an order-0 coder near the entropy gets
 * what zstd's LZ cannot find (there are no repeats in noise).
 *
 * The coder is rANS with 32-bit states in [2^15, 2^31), 16-bit
 * renormalisation and 12-bit frequencies: with that range every decode step
 * reads at most one word and every encode step writes at most one, so both
 * run without data-dependent branches (a conditional move and a pointer
 * advance by 0 or 2); 8 independent states interleave so that their
 * dependency chains overlap.  Encoding divides by the frequency with a
 * multiply by a precomputed reciprocal, exact for states below 2^31
 * (the Granlund-Montgomery / Alverson construction).  Costs are estimated
 * with an integer log2 so that every decision, and thus every payload, is
 * the same on every machine.
 *
 * Bounds: encode reserves tcodec_bound(len) once and writes each plane into
 * the room its RAW form would take: a rANS stream that would not be
 * smaller is abandoned for RAW, so the payload never exceeds the bound.
 * Decode validates the whole record structure before it allocates (at most
 * one n-byte buffer per RANS plane, n*w <= len, plus the 16 KiB slot
 * table), checks for room before each group of reads, and runs a fixed
 * number of steps per symbol.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/tcodec.h"

#define TC_PREC 12
#define TC_M (1u << TC_PREC)
#define TC_LANES 8
#define TC_L (1u << 15)
#define TC_HEADER 5
#define TC_STATES (4 * TC_LANES)

enum { TC_RAW = 0, TC_CONST = 1, TC_RANS = 2 };

/* A plane is entropy-coded only when that is estimated to save 1/32 of
 * it: below that the decode time is not worth it. */
#define TC_MIN_SAVING_SHIFT 5

#define ALWAYS_INLINE inline __attribute__((always_inline))

static uint32_t le32_get(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void le32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The coder's words: one 16-bit load or store on little-endian hosts. */
static ALWAYS_INLINE uint32_t le16_get(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
#endif
}

static ALWAYS_INLINE void le16_put(uint8_t *p, uint32_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t w = (uint16_t)v;
    memcpy(p, &w, 2);
#else
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
#endif
}

/* log2(x) in 1/65536 bits for x >= 1 (0 for x == 0): the integer part from
 * the leading bit, the fraction by linear interpolation in a table of
 * round(65536 * log2(1 + i/32)); error below 0.0003 bits. */
static uint64_t lg2q16(uint64_t x)
{
    static const uint32_t tab[33] = {
        0,     2909,  5732,  8473,  11136, 13727, 16248, 18704, 21098, 23433, 25711,
        27936, 30109, 32234, 34312, 36346, 38336, 40286, 42196, 44068, 45904, 47705,
        49472, 51207, 52911, 54584, 56229, 57845, 59434, 60997, 62534, 64047, 65536,
    };
    if (x == 0)
        return 0;
    unsigned k = 63u - (unsigned)__builtin_clzll(x);
    /* 16 fraction bits below the leading one */
    uint32_t frac = (uint32_t)(k >= 16 ? (x >> (k - 16)) : (x << (16 - k))) & 0xffff;
    uint32_t i = frac >> 11, r = frac & 0x7ff;
    return ((uint64_t)k << 16) + tab[i] + (((tab[i + 1] - tab[i]) * r + 1024) >> 11);
}

/* Bits, in 1/65536, that an ideal order-0 coder spends on the symbols
 * counted in c (total of them): total*lg(total) - sum c*lg(c). */
static uint64_t entropy_q16(const uint32_t c[256], uint64_t total)
{
    uint64_t s = 0;
    for (unsigned i = 0; i < 256; i++)
        if (c[i])
            s += c[i] * lg2q16(c[i]);
    uint64_t t = total * lg2q16(total);
    return t > s ? t - s : 0;
}

/* ---- histograms ---- */

/* Histograms of the w planes of raw[0 .. nbytes), nbytes a multiple of w.
 * Eight tables by position mod 8 keep runs of one value (the exponent
 * bytes) from chaining store-to-load dependencies on one counter. */
static void hist_planes(const uint8_t *raw, size_t nbytes, unsigned w, uint32_t h[4][256])
{
    uint32_t t[8][256];
    memset(t, 0, sizeof(t));
    size_t i = 0;
    for (; i + 8 <= nbytes; i += 8) {
        const uint8_t *p = raw + i;
        t[0][p[0]]++;
        t[1][p[1]]++;
        t[2][p[2]]++;
        t[3][p[3]]++;
        t[4][p[4]]++;
        t[5][p[5]]++;
        t[6][p[6]]++;
        t[7][p[7]]++;
    }
    for (; i < nbytes; i++)
        t[i & 7][raw[i]]++;
    memset(h, 0, 4 * sizeof(h[0]));
    for (unsigned pos = 0; pos < 8; pos++)
        for (unsigned s = 0; s < 256; s++)
            h[pos % w][s] += t[pos][s];
}

/* ---- frequency tables ---- */

/* Scales counts (at least two symbols present, summing to total) to
 * frequencies summing to TC_M with every present symbol >= 1: rounding
 * first, then single steps where they cost least.  Changing f by one
 * changes the cost by about c/f bits; the comparisons use c/(f -+ 1/2),
 * cross-multiplied so that only integers are involved. */
static void freq_normalize(const uint32_t c[256], uint64_t total, uint32_t f[256])
{
    uint32_t sum = 0;
    for (unsigned s = 0; s < 256; s++) {
        f[s] = 0;
        if (!c[s])
            continue;
        uint64_t v = ((uint64_t)c[s] * TC_M + total / 2) / total;
        f[s] = v ? (uint32_t)v : 1;
        sum += f[s];
    }
    while (sum > TC_M) {
        int best = -1;
        for (unsigned s = 0; s < 256; s++)
            if (f[s] > 1 && (best < 0 || (uint64_t)c[s] * (2 * f[best] - 1) <
                                             (uint64_t)c[best] * (2 * f[s] - 1)))
                best = (int)s;
        f[best]--;
        sum--;
    }
    while (sum < TC_M) {
        int best = -1;
        for (unsigned s = 0; s < 256; s++)
            if (c[s] && (best < 0 || (uint64_t)c[s] * (2 * f[best] + 1) >
                                         (uint64_t)c[best] * (2 * f[s] + 1)))
                best = (int)s;
        f[best]++;
        sum++;
    }
}

/* Bytes the rANS stream of a plane with counts c and frequencies f takes,
 * states included. */
static uint64_t rans_cost(const uint32_t c[256], const uint32_t f[256])
{
    uint64_t bits = 0;
    for (unsigned s = 0; s < 256; s++)
        if (c[s])
            bits += c[s] * (((uint64_t)TC_PREC << 16) - lg2q16(f[s]));
    return (bits >> 19) + 2 + TC_STATES;
}

/* ---- rANS encoder ---- */

struct tc_esym {
    uint32_t xmax;  /* state at which a word must go out first */
    uint32_t rcp;   /* reciprocal of f, see esym_init */
    uint32_t bias;  /* start, corrected for f == 1 */
    uint16_t cmpl;  /* TC_M - f */
    uint16_t shift; /* of the reciprocal product */
};

/* x/f = ((x * rcp) >> 32) >> shift for every x < 2^31: with
 * 2^(s-1) < f <= 2^s, rcp = ceil(2^(31+s) / f) < 2^32 and the rounding
 * error x*(rcp*f - 2^(31+s)) / 2^(31+s) stays below x/2^31 < 1.  f == 1
 * has no such rcp; all-ones gives x - 1, which bias makes up for. */
static void esym_init(struct tc_esym *e, uint32_t start, uint32_t f)
{
    e->xmax = ((TC_L >> TC_PREC) << 16) * f;
    e->cmpl = (uint16_t)(TC_M - f);
    if (f == 1) {
        e->rcp = UINT32_MAX;
        e->shift = 0;
        e->bias = start + TC_M - 1;
        return;
    }
    unsigned s = 0;
    while ((1u << s) < f)
        s++;
    e->rcp = (uint32_t)(((1ull << (s + 31)) + f - 1) / f);
    e->shift = (uint16_t)(s - 1);
    e->bias = start;
}

/* One symbol: a word out if the state is too large to take it (stored at
 * p - 2 unconditionally; when none is due the next store overwrites it),
 * then x = (x / f) * TC_M + x % f + start. */
static ALWAYS_INLINE uint8_t *enc_step(uint32_t *xp, const struct tc_esym *e, uint8_t *p)
{
    uint32_t x = *xp;
    uint32_t out = x >= e->xmax;
    le16_put(p - 2, x);
    p -= 2 * out;
    x >>= 16 * out;
    uint32_t q = (uint32_t)(((uint64_t)x * e->rcp) >> 32) >> e->shift;
    *xp = x + e->bias + q * e->cmpl;
    return p;
}

/* Codes plane k of raw (n elements of width w) backwards into [lo, hi)
 * and returns where the stream starts, or NULL if it does not fit.  The
 * last symbols go first, so the decoder reads forwards; the final states
 * are its initial ones and go in front, coder 0 first. */
static ALWAYS_INLINE uint8_t *rans_encode_w(const uint8_t *raw, size_t n, unsigned w, unsigned k,
                                            const struct tc_esym *es, uint8_t *lo, uint8_t *hi)
{
    uint32_t x[TC_LANES];
    for (unsigned j = 0; j < TC_LANES; j++)
        x[j] = TC_L;
    uint8_t *p = hi;
    size_t i = n;
    while (i % TC_LANES) {
        if (p - lo < 2)
            return NULL;
        i--;
        p = enc_step(&x[i % TC_LANES], &es[raw[i * w + k]], p);
    }
    while (i) {
        if (p - lo < 2 * TC_LANES)
            return NULL;
        i -= TC_LANES;
        const uint8_t *s = raw + i * w + k;
        p = enc_step(&x[7], &es[s[7 * w]], p);
        p = enc_step(&x[6], &es[s[6 * w]], p);
        p = enc_step(&x[5], &es[s[5 * w]], p);
        p = enc_step(&x[4], &es[s[4 * w]], p);
        p = enc_step(&x[3], &es[s[3 * w]], p);
        p = enc_step(&x[2], &es[s[2 * w]], p);
        p = enc_step(&x[1], &es[s[1 * w]], p);
        p = enc_step(&x[0], &es[s[0]], p);
    }
    if (p - lo < TC_STATES)
        return NULL;
    for (unsigned j = TC_LANES; j-- > 0;) {
        p -= 4;
        le32_put(p, x[j]);
    }
    return p;
}

static uint8_t *rans_encode(const uint8_t *raw, size_t n, unsigned w, unsigned k,
                            const struct tc_esym *es, uint8_t *lo, uint8_t *hi)
{
    if (w == 2)
        return rans_encode_w(raw, n, 2, k, es, lo, hi);
    return rans_encode_w(raw, n, 4, k, es, lo, hi);
}

/* ---- plane records ---- */

/* dst[i] = raw[i*w + k]: with w a constant the compiler vectorizes it. */
static ALWAYS_INLINE void gather_w(const uint8_t *restrict raw, size_t n, unsigned w, unsigned k,
                                   uint8_t *restrict dst)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = raw[i * w + k];
}

static void gather(const uint8_t *raw, size_t n, unsigned w, unsigned k, uint8_t *dst)
{
    if (w == 2)
        gather_w(raw, n, 2, k, dst);
    else
        gather_w(raw, n, 4, k, dst);
}

/* Writes the RANS record of plane k at dst, in at most n bytes (RAW takes
 * n + 1); returns its length or 0 when RANS is not worth it. */
static size_t plane_rans(const uint8_t *raw, size_t n, unsigned w, unsigned k,
                         const uint32_t c[256], unsigned nsym, uint8_t *dst)
{
    uint32_t f[256];
    freq_normalize(c, n, f);
    size_t table = 2 + 3 * (size_t)nsym + 4;
    if (table + rans_cost(c, f) > n - (n >> TC_MIN_SAVING_SHIFT))
        return 0;

    struct tc_esym es[256];
    uint8_t *q = dst + 2;
    uint32_t start = 0;
    for (unsigned s = 0; s < 256; s++) {
        if (!f[s])
            continue;
        esym_init(&es[s], start, f[s]);
        q[0] = (uint8_t)s;
        le16_put(q + 1, f[s]);
        q += 3;
        start += f[s];
    }
    dst[0] = TC_RANS;
    dst[1] = (uint8_t)(nsym - 1);
    uint8_t *stream = dst + table, *hi = dst + n;
    uint8_t *p = rans_encode(raw, n, w, k, es, stream, hi);
    if (!p)
        return 0;
    size_t slen = (size_t)(hi - p);
    memmove(stream, p, slen);
    le32_put(stream - 4, (uint32_t)slen);
    return table + slen;
}

/* Writes the record of plane k at dst (room for n + 1 bytes); returns its
 * length. */
static size_t plane_encode(const uint8_t *raw, size_t n, unsigned w, unsigned k,
                           const uint32_t c[256], uint8_t *dst)
{
    unsigned nsym = 0, last = 0;
    for (unsigned s = 0; s < 256; s++)
        if (c[s]) {
            nsym++;
            last = s;
        }
    if (nsym == 1) {
        dst[0] = TC_CONST;
        dst[1] = (uint8_t)last;
        return 2;
    }
    if (nsym > 1) {
        size_t r = plane_rans(raw, n, w, k, c, nsym, dst);
        if (r)
            return r;
    }
    dst[0] = TC_RAW;
    gather(raw, n, w, k, dst + 1);
    return n + 1;
}

size_t tcodec_bound(size_t len)
{
    /* header, one mode byte per plane (at most 4), the bytes */
    return len + TC_HEADER + 4;
}

int tcodec_encode(const uint8_t *raw, size_t len, unsigned width, struct buf *out)
{
    if ((width != 2 && width != 4) || len > TCODEC_MAX_LEN)
        return -EINVAL;
    int r = buf_reserve(out, tcodec_bound(len));
    if (r < 0)
        return r;
    size_t n = len / width, body = n * width;
    uint8_t *d0 = out->data + out->len, *d = d0;
    d[0] = (uint8_t)width;
    le32_put(d + 1, (uint32_t)n);
    d += TC_HEADER;

    uint32_t h[4][256];
    hist_planes(raw, body, width, h);
    for (unsigned k = 0; k < width; k++)
        d += plane_encode(raw, n, width, k, h[k], d);
    if (len > body)
        memcpy(d, raw + body, len - body);
    d += len - body;
    out->len += (size_t)(d - d0);
    out->data[out->len] = 0;
    return 0;
}

/* ---- decoder ---- */

struct tc_plane {
    unsigned mode;
    const uint8_t *data; /* RAW bytes; RANS stream */
    size_t len;          /* of the stream */
    const uint8_t *table;
    unsigned nsym;
    uint8_t value; /* CONST */
};

/* Parses the RANS record body at p[0..avail): table and stream bounds. */
static int parse_rans(const uint8_t *p, size_t avail, struct tc_plane *pl, size_t *ret_used)
{
    if (avail < 1)
        return CKS_E_FORMAT;
    unsigned nsym = (unsigned)p[0] + 1;
    size_t table = 1 + 3 * (size_t)nsym;
    if (nsym < 2 || avail < table + 4)
        return CKS_E_FORMAT;
    uint32_t sum = 0;
    for (unsigned i = 0; i < nsym; i++) {
        const uint8_t *e = p + 1 + 3 * i;
        uint32_t f = le16_get(e + 1);
        if (f == 0 || f >= TC_M || (i > 0 && e[0] <= e[-3]))
            return CKS_E_FORMAT;
        sum += f;
    }
    if (sum != TC_M)
        return CKS_E_FORMAT;
    size_t slen = le32_get(p + table);
    if (slen < TC_STATES || slen % 2 || slen > avail - table - 4)
        return CKS_E_FORMAT;
    pl->table = p + 1;
    pl->nsym = nsym;
    pl->data = p + table + 4;
    pl->len = slen;
    *ret_used = table + 4 + slen;
    return 0;
}

/* Splits the payload into plane records; ret_end: where the tail starts. */
static int parse_planes(const uint8_t *p, size_t plen, unsigned w, size_t n, struct tc_plane *pl,
                        size_t *ret_end)
{
    size_t pos = TC_HEADER;
    for (unsigned k = 0; k < w; k++) {
        if (pos >= plen)
            return CKS_E_FORMAT;
        pl[k].mode = p[pos++];
        size_t used = 0;
        switch (pl[k].mode) {
        case TC_RAW:
            if (plen - pos < n)
                return CKS_E_FORMAT;
            pl[k].data = p + pos;
            used = n;
            break;
        case TC_CONST:
            if (plen - pos < 1)
                return CKS_E_FORMAT;
            pl[k].value = p[pos];
            used = 1;
            break;
        case TC_RANS: {
            int r = parse_rans(p + pos, plen - pos, &pl[k], &used);
            if (r < 0)
                return r;
            break;
        }
        default:
            return CKS_E_FORMAT;
        }
        pos += used;
    }
    *ret_end = pos;
    return 0;
}

/* Slot tables: for each of the TC_M slots the symbol, its frequency and
 * slot - start(symbol); three arrays so that each is one plain load. */
struct tc_dtable {
    uint16_t freq[TC_M];
    uint16_t bias[TC_M];
    uint8_t sym[TC_M];
};

static void dtable_build(const struct tc_plane *pl, struct tc_dtable *t)
{
    uint32_t start = 0;
    for (unsigned i = 0; i < pl->nsym; i++) {
        const uint8_t *e = pl->table + 3 * i;
        uint32_t f = le16_get(e + 1);
        for (uint32_t j = 0; j < f; j++) {
            t->freq[start + j] = (uint16_t)f;
            t->bias[start + j] = (uint16_t)j;
            t->sym[start + j] = e[0];
        }
        start += f;
    }
}

/* x = f * (x >> 12) + slot - start, then a word in if x fell below TC_L.
 * The select is written so that compilers make it a conditional move:
 * the branch would be taken at random. */
#define DEC_LANE(j)                                                                                \
    do {                                                                                           \
        uint32_t slot = x##j & (TC_M - 1);                                                         \
        out[i + (j)] = t->sym[slot];                                                               \
        uint32_t v = t->freq[slot] * (x##j >> TC_PREC) + t->bias[slot];                            \
        uint32_t in = v < TC_L;                                                                    \
        uint32_t word = le16_get(p);                                                               \
        x##j = (in ? v << 16 : v) | (word & (0u - in));                                            \
        p += 2 * in;                                                                               \
    } while (0)

static int rans_decode(const struct tc_plane *pl, const struct tc_dtable *t, uint8_t *out,
                       size_t n)
{
    uint32_t x[TC_LANES];
    for (unsigned j = 0; j < TC_LANES; j++) {
        x[j] = le32_get(pl->data + 4 * j);
        if (x[j] < TC_L || x[j] >= 1u << 31)
            return CKS_E_FORMAT;
    }
    const uint8_t *p = pl->data + TC_STATES, *end = pl->data + pl->len;
    uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3], x4 = x[4], x5 = x[5], x6 = x[6],
             x7 = x[7];
    size_t i = 0;
    /* each step reads at most one word: a round never passes end */
    for (; i + TC_LANES <= n && end - p >= 2 * TC_LANES; i += TC_LANES) {
        DEC_LANE(0);
        DEC_LANE(1);
        DEC_LANE(2);
        DEC_LANE(3);
        DEC_LANE(4);
        DEC_LANE(5);
        DEC_LANE(6);
        DEC_LANE(7);
    }
    x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3, x[4] = x4, x[5] = x5, x[6] = x6, x[7] = x7;
    for (; i < n; i++) {
        uint32_t *xj = &x[i % TC_LANES], slot = *xj & (TC_M - 1);
        out[i] = t->sym[slot];
        uint32_t v = t->freq[slot] * (*xj >> TC_PREC) + t->bias[slot];
        if (v < TC_L) {
            if (end - p < 2)
                return CKS_E_FORMAT;
            v = v << 16 | le16_get(p);
            p += 2;
        }
        *xj = v;
    }
    if (p != end)
        return CKS_E_FORMAT;
    for (unsigned j = 0; j < TC_LANES; j++)
        if (x[j] != TC_L)
            return CKS_E_FORMAT;
    return 0;
}

#define TC_BLOCK 2048

static ALWAYS_INLINE void weave_w(uint8_t *restrict o, const uint8_t *const *src, size_t m,
                                  unsigned w)
{
    if (w == 2) {
        const uint8_t *restrict a = src[0], *restrict b = src[1];
        for (size_t i = 0; i < m; i++) {
            o[2 * i] = a[i];
            o[2 * i + 1] = b[i];
        }
    } else {
        const uint8_t *restrict a = src[0], *restrict b = src[1], *restrict c = src[2],
                                *restrict d = src[3];
        for (size_t i = 0; i < m; i++) {
            o[4 * i] = a[i];
            o[4 * i + 1] = b[i];
            o[4 * i + 2] = c[i];
            o[4 * i + 3] = d[i];
        }
    }
}

/* raw[i*w + k] = plane k [i], in blocks so that CONST planes read a small
 * filled buffer instead of an n-byte one. */
static void weave(uint8_t *raw, size_t n, unsigned w, const uint8_t *const *plane,
                  const bool *is_const)
{
    uint8_t cbuf[4][TC_BLOCK];
    const uint8_t *src[4];
    for (unsigned k = 0; k < w; k++)
        if (is_const[k])
            memset(cbuf[k], plane[k][0], n < TC_BLOCK ? n : TC_BLOCK);
    for (size_t i = 0; i < n; i += TC_BLOCK) {
        size_t m = n - i < TC_BLOCK ? n - i : TC_BLOCK;
        for (unsigned k = 0; k < w; k++)
            src[k] = is_const[k] ? cbuf[k] : plane[k] + i;
        if (w == 2)
            weave_w(raw + 2 * i, src, m, 2);
        else
            weave_w(raw + 4 * i, src, m, 4);
    }
}

int tcodec_decode(const uint8_t *p, size_t plen, uint8_t *raw, size_t len)
{
    if (plen < TC_HEADER || (p[0] != 2 && p[0] != 4) || len > TCODEC_MAX_LEN)
        return CKS_E_FORMAT;
    unsigned w = p[0];
    size_t n = len / w, body = n * w, end = 0;
    if (le32_get(p + 1) != n)
        return CKS_E_FORMAT;
    struct tc_plane pl[4];
    int r = parse_planes(p, plen, w, n, pl, &end);
    if (r < 0)
        return r;
    if (plen - end != len - body)
        return CKS_E_FORMAT;

    unsigned nrans = 0;
    for (unsigned k = 0; k < w; k++)
        nrans += pl[k].mode == TC_RANS;
    uint8_t *scratch = NULL;
    struct tc_dtable *tab = NULL;
    if (nrans) {
        /* the table first, so it is aligned */
        scratch = malloc(sizeof(*tab) + nrans * n);
        if (!scratch)
            return -ENOMEM;
        tab = (struct tc_dtable *)(void *)scratch;
    }
    const uint8_t *src[4];
    bool is_const[4];
    uint8_t *next = scratch ? scratch + sizeof(*tab) : NULL;
    for (unsigned k = 0; k < w && r == 0; k++) {
        is_const[k] = pl[k].mode == TC_CONST;
        if (pl[k].mode == TC_RAW) {
            src[k] = pl[k].data;
        } else if (is_const[k]) {
            src[k] = &pl[k].value;
        } else {
            dtable_build(&pl[k], tab);
            r = rans_decode(&pl[k], tab, next, n);
            src[k] = next;
            next += n;
        }
    }
    if (r == 0) {
        weave(raw, n, w, src, is_const);
        if (len > body)
            memcpy(raw + body, p + end, len - body);
    }
    free(scratch);
    return r;
}

/* ---- pick ---- */

#define PICK_WIN 4096
#define PICK_NWIN 8
#define PICK_MIN 1024
#define PICK_HASH_BITS 10

struct pick_stats {
    uint32_t t[8][256]; /* bytes by position mod 8 */
    uint32_t lit[256];  /* bytes of 4-byte groups the repeat probe missed */
    uint64_t probes, hits;
};

/* Histograms one window (start and length multiples of 8), and probes
 * each 4-byte group for an earlier copy of the 8 bytes starting there in
 * the window: a stand-in for what zstd's match finder would get. */
static void pick_window(const uint8_t *w, size_t len, struct pick_stats *st)
{
    uint16_t seen[1u << PICK_HASH_BITS];
    memset(seen, 0xff, sizeof(seen));
    for (size_t i = 0; i + 8 <= len; i += 4) {
        const uint8_t *g = w + i;
        unsigned ph = i & 7;
        st->t[ph][g[0]]++;
        st->t[ph + 1][g[1]]++;
        st->t[ph + 2][g[2]]++;
        st->t[ph + 3][g[3]]++;
        uint64_t v;
        memcpy(&v, g, 8);
        unsigned hh = (unsigned)((v * 0x9e3779b97f4a7c15ull) >> (64 - PICK_HASH_BITS));
        uint16_t prev = seen[hh];
        seen[hh] = (uint16_t)i;
        st->probes++;
        if (prev != 0xffff && memcmp(w + prev, g, 8) == 0) {
            st->hits++;
        } else {
            st->lit[g[0]]++;
            st->lit[g[1]]++;
            st->lit[g[2]]++;
            st->lit[g[3]]++;
        }
    }
}

/* Estimated bits per symbol of a plane (1/65536 bits), as the encoder
 * would code it: 0 when constant, 8 when not worth coding. */
static uint64_t pick_plane_q16(const uint32_t c[256])
{
    uint64_t total = 0;
    unsigned nsym = 0;
    for (unsigned s = 0; s < 256; s++) {
        total += c[s];
        nsym += c[s] != 0;
    }
    if (nsym <= 1)
        return 0;
    /* + 1/128 for the coder's distance from the entropy */
    uint64_t b = entropy_q16(c, total) / total;
    b += b >> 7;
    uint64_t raw = 8u << 16;
    return b > raw - (raw >> TC_MIN_SAVING_SHIFT) ? raw : b;
}

unsigned tcodec_pick(const uint8_t *raw, size_t len, unsigned *ret_permille)
{
    if (ret_permille)
        *ret_permille = 1000;
    if (len < PICK_MIN)
        return 0;
    struct pick_stats st;
    memset(&st, 0, sizeof(st));
    if (len <= (size_t)PICK_WIN * PICK_NWIN) {
        for (size_t off = 0; off < len; off += PICK_WIN)
            pick_window(raw + off, len - off < PICK_WIN ? (len - off) & ~(size_t)7 : PICK_WIN,
                        &st);
    } else {
        for (unsigned j = 0; j < PICK_NWIN; j++) {
            size_t off = (size_t)((uint64_t)j * (len - PICK_WIN) / (PICK_NWIN - 1)) & ~(size_t)7;
            pick_window(raw + off, PICK_WIN, &st);
        }
    }
    if (st.probes == 0)
        return 0;

    uint32_t h4[4][256], h2[2][256];
    for (unsigned s = 0; s < 256; s++) {
        for (unsigned k = 0; k < 4; k++)
            h4[k][s] = st.t[k][s] + st.t[k + 4][s];
        h2[0][s] = h4[0][s] + h4[2][s];
        h2[1][s] = h4[1][s] + h4[3][s];
    }
    /* permille of the raw size */
    uint64_t c4 = 0, c2 = 0;
    for (unsigned k = 0; k < 4; k++)
        c4 += pick_plane_q16(h4[k]);
    for (unsigned k = 0; k < 2; k++)
        c2 += pick_plane_q16(h2[k]);
    c4 = c4 * 1000 / (32u << 16);
    c2 = c2 * 1000 / (16u << 16);
    /* one stream: the literals zstd would be left with, order 0 */
    uint64_t lit = 0;
    for (unsigned s = 0; s < 256; s++)
        lit += st.lit[s];
    uint64_t c1 = lit ? entropy_q16(st.lit, lit) / lit : 0;
    c1 = c1 * 1000 / (8u << 16) * (st.probes - st.hits) / st.probes;

    /* width 4 only when clearly better: it splits the samples finer and
     * codes twice as many planes */
    unsigned w = c4 + 5 < c2 ? 4 : 2;
    uint64_t best = w == 4 ? c4 : c2;
    if (ret_permille)
        *ret_permille = (unsigned)best;
    if (best > 1000 - (1000 >> TC_MIN_SAVING_SHIFT) || best * 20 >= c1 * 19)
        return 0;
    return w;
}
