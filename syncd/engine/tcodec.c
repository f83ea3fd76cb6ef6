/*
 * tcodec.c — byte planes plus a static canonical Huffman code for float
 * tensors (payload format in tcodec.h).
 *
 * Design: the bytes of a float that carry sign and exponent have a few
 * bits of entropy, the mantissa bytes are noise.  Splitting the chunk by
 * position mod the width gives planes whose order-0 statistics are those
 * of one byte of the element, and an order-0 coder gets what zstd's LZ
 * cannot find (there are no repeats in noise).
 *
 * The coder is Huffman, lengths limited to 11 bits, four streams over
 * four contiguous segments of the plane.  Measured on realistic weights it
 * stays within 0.07 bits per symbol of the entropy (bf16 weights 0.669 of
 * raw, against 0.665 for the entropy), and it does a third of the work per
 * symbol of a scalar rANS coder (which this file first had, and which
 * missed the speed targets): decoding is one lookup in a 2048-entry table
 * that yields one or two symbols (two when both codes fit in 11 bits, as
 * most exponent codes do), one shift, and a 64-bit refill every 5 lookups
 * (5 * 11 bits plus 7 of a partial byte fit); the four streams keep four
 * independent dependency chains in flight.  Encoding is the mirror image.
 * The exact size of each stream is known from per-segment histograms
 * before any bit is written, so the streams are written in step straight
 * into the output.
 *
 * Which planes are worth a histogram is decided first from a sample of
 * about 4096 elements at an odd stride (mantissa planes are then copied
 * without being counted).  Every decision uses integer arithmetic, so a
 * payload is the same on every machine.
 *
 * Bounds: encode reserves tcodec_bound(len) once; a plane is coded only
 * when its record is smaller than its RAW form, so the bound holds.
 * Decode validates the whole record structure (lengths, Kraft sum, stream
 * sizes) before it allocates (one n-byte buffer per HUF plane, n*w <= len);
 * a stream is read with 8-byte loads only while 8 bytes remain, byte by
 * byte after that, and every code advances the stream, so the work is
 * O(len + plen).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/le.h"
#include "engine/tcodec.h"

#define TC_HEADER 5
#define TC_MAXLEN 11             /* longest code */
#define TC_TAB (1u << TC_MAXLEN) /* decode table entries */
#define TC_STREAMS 4
#define TC_LENS 128 /* code lengths, two per byte */
#define TC_HUF_HEAD (TC_LENS + 4 * TC_STREAMS)
#define TC_ROUND 5     /* codes per refill: 5 * 11 + 7 <= 64 */
#define TC_SAMPLE 4096 /* elements sampled to pick the planes to count */

enum { TC_RAW = 0, TC_CONST = 1, TC_HUF = 2 };

/* A plane is entropy-coded only when that saves 1/32 of it: below that
 * the decode time is not worth it. */
#define TC_MIN_SAVING_SHIFT 5

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* The bit streams are big endian so that codes read most significant bit
 * first: one load and a byte swap on little-endian hosts. */
static ALWAYS_INLINE uint64_t be64_get(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
#endif
}

static ALWAYS_INLINE void be64_put(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    memcpy(p, &v, 8);
#else
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
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

/* ---- which planes to count ---- */

/* Marks the planes worth a full histogram: those whose sample (about
 * TC_SAMPLE elements at a fixed odd stride) is estimated to code below
 * the RAW threshold, and those that look constant. */
static void plane_candidates(const uint8_t *raw, size_t n, unsigned w, bool cand[4])
{
    uint32_t c[4][256];
    memset(c, 0, sizeof(c));
    /* odd, so that the sample is not all even (or all odd) elements of
     * data whose period is twice the width (fp32 coded as width 2) */
    size_t stride = (n / TC_SAMPLE) | 1, total = 0;
    for (size_t i = 0; i < n; i += stride, total++)
        for (unsigned k = 0; k < w; k++)
            c[k][raw[i * w + k]]++;
    for (unsigned k = 0; k < w; k++) {
        /* the entropy plus 1/32 for Huffman's distance from it */
        uint64_t bits = total ? entropy_q16(c[k], total) / total : 0;
        bits += bits >> 5;
        cand[k] = bits < (8u << 16) - ((8u << 16) >> TC_MIN_SAVING_SHIFT);
    }
}

/* Stream j of a plane holds its symbols seg_start(n, j) ..
 * seg_start(n, j + 1) - 1: four contiguous segments. */
static size_t seg_start(size_t n, unsigned j)
{
    return (size_t)((uint64_t)n * j / TC_STREAMS);
}

/* Counts plane k by segment: the per-segment counts give each stream's
 * exact size, and walking the four segments in step keeps runs of one
 * value from chaining increments of one counter. */
static ALWAYS_INLINE void hist_plane_w(const uint8_t *raw, size_t n, unsigned w, unsigned k,
                                       uint32_t h[TC_STREAMS][256])
{
    const uint8_t *p[TC_STREAMS];
    size_t len[TC_STREAMS];
    for (unsigned j = 0; j < TC_STREAMS; j++) {
        p[j] = raw + seg_start(n, j) * w + k;
        len[j] = seg_start(n, j + 1) - seg_start(n, j);
    }
    /* the first segment is the shortest */
    for (size_t i = 0; i < len[0]; i++) {
        h[0][p[0][i * w]]++;
        h[1][p[1][i * w]]++;
        h[2][p[2][i * w]]++;
        h[3][p[3][i * w]]++;
    }
    for (unsigned j = 1; j < TC_STREAMS; j++)
        if (len[j] > len[0])
            h[j][p[j][len[0] * w]]++;
}

static void hist_plane(const uint8_t *raw, size_t n, unsigned w, unsigned k,
                       uint32_t h[TC_STREAMS][256])
{
    memset(h, 0, TC_STREAMS * sizeof(h[0]));
    if (w == 2)
        hist_plane_w(raw, n, 2, k, h);
    else
        hist_plane_w(raw, n, 4, k, h);
}

/* ---- code lengths ---- */

static int key_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Huffman code lengths for counts c (at least two symbols present),
 * unlimited: leaves sorted by (count, symbol), internal nodes made in
 * order of weight, so two queues replace a heap; a leaf wins ties. */
static void huf_tree(const uint32_t c[256], unsigned len[256])
{
    uint64_t key[256], wt[511];
    uint16_t parent[511];
    unsigned m = 0, depth[511];
    for (unsigned s = 0; s < 256; s++) {
        len[s] = 0;
        if (c[s])
            key[m++] = (uint64_t)c[s] << 8 | s;
    }
    qsort(key, m, sizeof(key[0]), key_cmp);
    for (unsigned i = 0; i < m; i++)
        wt[i] = key[i] >> 8;
    unsigned leaf = 0, node = m;
    for (unsigned next = m; next < 2 * m - 1; next++) {
        unsigned pick2[2];
        for (unsigned t = 0; t < 2; t++) {
            if (leaf < m && (node >= next || wt[leaf] <= wt[node]))
                pick2[t] = leaf++;
            else
                pick2[t] = node++;
        }
        wt[next] = wt[pick2[0]] + wt[pick2[1]];
        parent[pick2[0]] = parent[pick2[1]] = (uint16_t)next;
    }
    depth[2 * m - 2] = 0;
    for (unsigned i = 2 * m - 2; i-- > 0;)
        depth[i] = depth[parent[i]] + 1;
    for (unsigned i = 0; i < m; i++)
        len[key[i] & 0xff] = depth[i];
}

/* Limits lengths to TC_MAXLEN keeping the code complete (Kraft sum, in
 * units of 2^-TC_MAXLEN, exactly TC_TAB): clamp, then lengthen the codes
 * whose lengthening costs least per unit of Kraft sum regained, then
 * shorten the most frequent codes that fit into what is left.  The last
 * loop always ends complete: the gap is a multiple of the unit of the
 * longest code, which can always be shortened into it. */
static void huf_limit(const uint32_t c[256], unsigned len[256])
{
    uint32_t kraft = 0;
    for (unsigned s = 0; s < 256; s++)
        if (c[s]) {
            if (len[s] > TC_MAXLEN)
                len[s] = TC_MAXLEN;
            kraft += TC_TAB >> len[s];
        }
    while (kraft > TC_TAB) {
        int best = -1;
        for (unsigned s = 0; s < 256; s++)
            if (c[s] && len[s] < TC_MAXLEN &&
                (best < 0 || ((uint64_t)c[s] << len[s]) < ((uint64_t)c[best] << len[best])))
                best = (int)s;
        len[best]++;
        kraft -= TC_TAB >> len[best];
    }
    while (kraft < TC_TAB) {
        int best = -1;
        for (unsigned s = 0; s < 256; s++)
            if (c[s] && len[s] > 1 && kraft + (TC_TAB >> len[s]) <= TC_TAB &&
                (best < 0 || c[s] > c[best]))
                best = (int)s;
        kraft += TC_TAB >> len[best];
        len[best]--;
    }
}

/* Canonical codes from lengths (RFC 1951 3.2.2). */
static void huf_codes(const unsigned len[256], uint16_t code[256])
{
    unsigned count[TC_MAXLEN + 1] = {0}, next[TC_MAXLEN + 1];
    for (unsigned s = 0; s < 256; s++)
        count[len[s]]++;
    count[0] = 0;
    unsigned v = 0;
    for (unsigned l = 1; l <= TC_MAXLEN; l++) {
        v = (v + count[l - 1]) << 1;
        next[l] = v;
    }
    for (unsigned s = 0; s < 256; s++)
        code[s] = len[s] ? (uint16_t)next[len[s]]++ : 0;
}

/* ---- encoder ---- */

struct tc_bitw {
    uint8_t *p, *end;
    const uint8_t *src; /* the segment's first symbol, at stride w */
    size_t count;       /* its symbols */
};

#define ENC_SYM(j)                                                                                 \
    do {                                                                                           \
        unsigned sym_ = src##j[t * w];                                                             \
        acc##j = acc##j << len8[sym_] | code[sym_];                                                \
        nb##j += len8[sym_];                                                                       \
    } while (0)

#define ENC_FLUSH(j)                                                                               \
    do {                                                                                           \
        be64_put(bw[j].p, acc##j << (64 - nb##j));                                                 \
        bw[j].p += nb##j >> 3;                                                                     \
        nb##j &= 7;                                                                                \
    } while (0)

/* Finishes one stream code by code from symbol t, with nbits pending in
 * acc; returns 0, or -1 if its region came out a different size (it
 * cannot: the caller then stores the plane RAW). */
static int huf_encode_tail(struct tc_bitw *b, size_t t, unsigned w, uint64_t acc, unsigned nbits,
                           const uint8_t *len8, const uint16_t *code)
{
    for (; t < b->count; t++) {
        unsigned sym = b->src[t * w];
        acc = acc << len8[sym] | code[sym];
        nbits += len8[sym];
        while (nbits >= 8) {
            if (b->p == b->end)
                return -1;
            nbits -= 8;
            *b->p++ = (uint8_t)(acc >> nbits);
        }
    }
    if (nbits) {
        if (b->p == b->end)
            return -1;
        *b->p++ = (uint8_t)(acc << (8 - nbits));
    }
    return b->p == b->end ? 0 : -1;
}

/* Writes the 4 streams into regions sized from the exact bit counts: in
 * step, 5 codes per stream and then one 8-byte store per stream, while
 * every region has 8 bytes left (the store's bytes past the codes are
 * overwritten later); then each stream code by code. */
static ALWAYS_INLINE int huf_encode_w(unsigned w, const uint8_t *len8, const uint16_t *code,
                                      struct tc_bitw bw[TC_STREAMS])
{
    const uint8_t *src0 = bw[0].src, *src1 = bw[1].src, *src2 = bw[2].src, *src3 = bw[3].src;
    uint64_t acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
    unsigned nb0 = 0, nb1 = 0, nb2 = 0, nb3 = 0;
    size_t t = 0;
    /* the first segment is the shortest */
    for (; t + TC_ROUND <= bw[0].count; t += TC_ROUND) {
        if (bw[0].end - bw[0].p < 8 || bw[1].end - bw[1].p < 8 || bw[2].end - bw[2].p < 8 ||
            bw[3].end - bw[3].p < 8)
            break;
        for (unsigned r = 0; r < TC_ROUND; r++, t++) {
            ENC_SYM(0);
            ENC_SYM(1);
            ENC_SYM(2);
            ENC_SYM(3);
        }
        t -= TC_ROUND;
        ENC_FLUSH(0);
        ENC_FLUSH(1);
        ENC_FLUSH(2);
        ENC_FLUSH(3);
    }
    if (huf_encode_tail(&bw[0], t, w, acc0, nb0, len8, code) < 0 ||
        huf_encode_tail(&bw[1], t, w, acc1, nb1, len8, code) < 0 ||
        huf_encode_tail(&bw[2], t, w, acc2, nb2, len8, code) < 0 ||
        huf_encode_tail(&bw[3], t, w, acc3, nb3, len8, code) < 0)
        return -1;
    return 0;
}

static int huf_encode(unsigned w, const uint8_t *len8, const uint16_t *code,
                      struct tc_bitw bw[TC_STREAMS])
{
    if (w == 2)
        return huf_encode_w(2, len8, code, bw);
    return huf_encode_w(4, len8, code, bw);
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

/* Writes the HUF record of plane k (counts by stream h, c their sum) at
 * dst if it takes at most n - n/32 bytes (RAW takes n + 1); returns its
 * length or 0. */
/* The code lengths of plane counts c into len, each stream's size (by
 * counts h) into size; returns the HUF record's length, or 0 when it
 * would not take at most n - n/32 bytes. */
static uint64_t huf_sizes(size_t n, const uint32_t h[TC_STREAMS][256], const uint32_t c[256],
                          unsigned len[256], uint64_t size[TC_STREAMS])
{
    uint64_t total = 1 + TC_HUF_HEAD;
    huf_tree(c, len);
    huf_limit(c, len);
    for (unsigned j = 0; j < TC_STREAMS; j++) {
        uint64_t bits = 0;
        for (unsigned s = 0; s < 256; s++)
            bits += (uint64_t)h[j][s] * len[s];
        size[j] = (bits + 7) / 8;
        total += size[j];
    }
    return total > n - (n >> TC_MIN_SAVING_SHIFT) ? 0 : total;
}

static size_t plane_huf(const uint8_t *raw, size_t n, unsigned w, unsigned k,
                        const uint32_t h[TC_STREAMS][256], const uint32_t c[256], uint8_t *dst)
{
    unsigned len[256];
    uint64_t size[TC_STREAMS], total = huf_sizes(n, h, c, len, size);
    if (total == 0)
        return 0;

    uint8_t len8[256];
    uint16_t code[256];
    huf_codes(len, code);
    dst[0] = TC_HUF;
    for (unsigned s = 0; s < 256; s++)
        len8[s] = (uint8_t)len[s];
    for (unsigned i = 0; i < TC_LENS; i++)
        dst[1 + i] = (uint8_t)(len[2 * i] | len[2 * i + 1] << 4);
    struct tc_bitw bw[TC_STREAMS];
    uint8_t *p = dst + 1 + TC_HUF_HEAD;
    for (unsigned j = 0; j < TC_STREAMS; j++) {
        le32_put(dst + 1 + TC_LENS + 4 * j, (uint32_t)size[j]);
        bw[j].p = p;
        bw[j].end = p + size[j];
        bw[j].src = raw + seg_start(n, j) * w + k;
        bw[j].count = seg_start(n, j + 1) - seg_start(n, j);
        p += size[j];
    }
    return huf_encode(w, len8, code, bw) == 0 ? (size_t)total : 0;
}

/* Plane k's counts by stream into h, their sums into c; returns the
 * number of distinct symbols, the last of them in *ret_last. */
static unsigned plane_count(const uint8_t *raw, size_t n, unsigned w, unsigned k,
                            uint32_t h[TC_STREAMS][256], uint32_t c[256], unsigned *ret_last)
{
    unsigned nsym = 0;
    hist_plane(raw, n, w, k, h);
    for (unsigned s = 0; s < 256; s++) {
        c[s] = h[0][s] + h[1][s] + h[2][s] + h[3][s];
        if (c[s]) {
            nsym++;
            *ret_last = s;
        }
    }
    return nsym;
}

/* Writes the record of plane k at dst (room for n + 1 bytes); returns its
 * length.  count: whether a histogram is worth it. */
static size_t plane_encode(const uint8_t *raw, size_t n, unsigned w, unsigned k, bool count,
                           uint8_t *dst)
{
    if (count && n > 0) {
        uint32_t h[TC_STREAMS][256], c[256];
        unsigned last = 0, nsym = plane_count(raw, n, w, k, h, c, &last);
        if (nsym == 1) {
            dst[0] = TC_CONST;
            dst[1] = (uint8_t)last;
            return 2;
        }
        size_t r = plane_huf(raw, n, w, k, h, c, dst);
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

    bool cand[4];
    plane_candidates(raw, n, width, cand);
    for (unsigned k = 0; k < width; k++)
        d += plane_encode(raw, n, width, k, cand[k], d);
    if (len > body)
        memcpy(d, raw + body, len - body);
    d += len - body;
    out->len += (size_t)(d - d0);
    out->data[out->len] = 0;
    return 0;
}

/* The length plane_encode writes for plane k, without writing it. */
static size_t plane_size(const uint8_t *raw, size_t n, unsigned w, unsigned k, bool count)
{
    if (count && n > 0) {
        uint32_t h[TC_STREAMS][256], c[256];
        unsigned len[256], last = 0;
        uint64_t size[TC_STREAMS], total;
        if (plane_count(raw, n, w, k, h, c, &last) == 1)
            return 2;
        if ((total = huf_sizes(n, h, c, len, size)) != 0)
            return (size_t)total;
    }
    return n + 1;
}

int tcodec_size(const uint8_t *raw, size_t len, unsigned width, size_t *ret_len)
{
    if ((width != 2 && width != 4) || len > TCODEC_MAX_LEN)
        return -EINVAL;
    size_t n = len / width, total = TC_HEADER + len - n * width;
    bool cand[4];
    plane_candidates(raw, n, width, cand);
    for (unsigned k = 0; k < width; k++)
        total += plane_size(raw, n, width, k, cand[k]);
    *ret_len = total;
    return 0;
}

/* ---- decoder ---- */

struct tc_plane {
    unsigned mode;
    const uint8_t *data;          /* RAW bytes; HUF: the code lengths */
    const uint8_t *s[TC_STREAMS]; /* HUF streams */
    size_t slen[TC_STREAMS];
    uint8_t value; /* CONST */
};

/* Parses the HUF record body at p[0..avail): lengths (complete code of
 * 2..256 symbols, none longer than TC_MAXLEN) and stream bounds. */
static int parse_huf(const uint8_t *p, size_t avail, struct tc_plane *pl, size_t *ret_used)
{
    if (avail < TC_HUF_HEAD)
        return CKS_E_FORMAT;
    uint32_t kraft = 0;
    unsigned nsym = 0;
    for (unsigned i = 0; i < 2 * TC_LENS; i++) {
        unsigned l = (p[i / 2] >> (4 * (i % 2))) & 15;
        if (l > TC_MAXLEN)
            return CKS_E_FORMAT;
        if (l) {
            kraft += TC_TAB >> l;
            nsym++;
        }
    }
    if (nsym < 2 || kraft != TC_TAB)
        return CKS_E_FORMAT;
    size_t used = TC_HUF_HEAD;
    for (unsigned j = 0; j < TC_STREAMS; j++) {
        size_t sl = le32_get(p + TC_LENS + 4 * j);
        if (sl > avail - used)
            return CKS_E_FORMAT;
        pl->s[j] = p + used;
        pl->slen[j] = sl;
        used += sl;
    }
    pl->data = p;
    *ret_used = used;
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
        case TC_HUF: {
            int r = parse_huf(p + pos, plen - pos, &pl[k], &used);
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

/* Decode tables, indexed by the next TC_MAXLEN bits of a stream.  one:
 * symbol | code length << 8.  two: the first symbol, and the second when
 * its code fits in the bits left (most do: the exponent codes are 2-4
 * bits long): sym1 | sym2 << 8 | bits << 16 | symbols << 24.  The code is
 * complete (checked), so every entry is set. */
struct tc_dtable {
    uint16_t one[TC_TAB];
    uint32_t two[TC_TAB];
};

static void dtable_build(const uint8_t *lens, struct tc_dtable *t)
{
    unsigned len[256];
    uint16_t code[256];
    for (unsigned s = 0; s < 256; s++)
        len[s] = (lens[s / 2] >> (4 * (s % 2))) & 15;
    huf_codes(len, code);
    for (unsigned s = 0; s < 256; s++) {
        if (!len[s])
            continue;
        unsigned first = (unsigned)code[s] << (TC_MAXLEN - len[s]);
        unsigned count = 1u << (TC_MAXLEN - len[s]);
        for (unsigned i = 0; i < count; i++)
            t->one[first + i] = (uint16_t)(s | len[s] << 8);
    }
    for (unsigned i = 0; i < TC_TAB; i++) {
        uint32_t a = t->one[i], la = a >> 8;
        uint32_t b = t->one[(i << la) & (TC_TAB - 1)], lb = b >> 8;
        if (la + lb <= TC_MAXLEN)
            t->two[i] = (a & 255) | (b & 255) << 8 | (la + lb) << 16 | 2u << 24;
        else
            t->two[i] = (a & 255) | la << 16 | 1u << 24;
    }
}

/* The next 64 bits of a stream from bit pos, zeros past its end. */
static uint64_t peek_slow(const uint8_t *s, size_t slen, size_t pos)
{
    size_t at = pos >> 3;
    uint64_t v = 0;
    for (unsigned b = 0; b < 8; b++)
        v = v << 8 | (at + b < slen ? s[at + b] : 0);
    return v << (pos & 7);
}

/* Up to two symbols per lookup; both bytes are stored, a second one that
 * was not decoded is overwritten by the next lookup. */
#define DEC_TWO(j)                                                                                 \
    do {                                                                                           \
        uint32_t t_ = two[c##j >> (64 - TC_MAXLEN)];                                               \
        o##j[0] = (uint8_t)t_;                                                                     \
        o##j[1] = (uint8_t)(t_ >> 8);                                                              \
        c##j <<= (t_ >> 16) & 63;                                                                  \
        pos##j += (t_ >> 16) & 255;                                                                \
        o##j += t_ >> 24;                                                                          \
    } while (0)

/* One stream from bit pos and output o to its end, code by code. */
static int huf_decode_tail(const uint8_t *s, size_t slen, size_t pos, const uint16_t *one,
                           uint8_t *o, uint8_t *oend)
{
    for (; o < oend; o++) {
        unsigned t = one[peek_slow(s, slen, pos) >> (64 - TC_MAXLEN)];
        *o = (uint8_t)t;
        pos += t >> 8;
        if (pos > 8 * slen)
            return CKS_E_FORMAT;
    }
    if ((pos + 7) / 8 != slen)
        return CKS_E_FORMAT;
    if ((pos & 7) && (uint8_t)(s[slen - 1] << (pos & 7)) != 0)
        return CKS_E_FORMAT;
    return 0;
}

static int huf_decode(const struct tc_plane *pl, const struct tc_dtable *tab, uint8_t *out,
                      size_t n)
{
    const uint32_t *two = tab->two;
    const uint8_t *s0 = pl->s[0], *s1 = pl->s[1], *s2 = pl->s[2], *s3 = pl->s[3];
    size_t l0 = pl->slen[0], l1 = pl->slen[1], l2 = pl->slen[2], l3 = pl->slen[3];
    size_t pos0 = 0, pos1 = 0, pos2 = 0, pos3 = 0;
    uint8_t *o0 = out + seg_start(n, 0), *o1 = out + seg_start(n, 1), *o2 = out + seg_start(n, 2),
            *o3 = out + seg_start(n, 3);
    uint8_t *e0 = o1, *e1 = o2, *e2 = o3, *e3 = out + n;
    /* A round: a refill that leaves at least 57 bits (8 bytes must remain)
     * and 5 lookups of at most 11 bits and 2 symbols each. */
    while ((pos0 >> 3) + 8 <= l0 && (pos1 >> 3) + 8 <= l1 && (pos2 >> 3) + 8 <= l2 &&
           (pos3 >> 3) + 8 <= l3 && e0 - o0 >= 2 * TC_ROUND && e1 - o1 >= 2 * TC_ROUND &&
           e2 - o2 >= 2 * TC_ROUND && e3 - o3 >= 2 * TC_ROUND) {
        uint64_t c0 = be64_get(s0 + (pos0 >> 3)) << (pos0 & 7);
        uint64_t c1 = be64_get(s1 + (pos1 >> 3)) << (pos1 & 7);
        uint64_t c2 = be64_get(s2 + (pos2 >> 3)) << (pos2 & 7);
        uint64_t c3 = be64_get(s3 + (pos3 >> 3)) << (pos3 & 7);
        for (unsigned r = 0; r < TC_ROUND; r++) {
            DEC_TWO(0);
            DEC_TWO(1);
            DEC_TWO(2);
            DEC_TWO(3);
        }
    }
    int r = huf_decode_tail(s0, l0, pos0, tab->one, o0, e0);
    if (r == 0)
        r = huf_decode_tail(s1, l1, pos1, tab->one, o1, e1);
    if (r == 0)
        r = huf_decode_tail(s2, l2, pos2, tab->one, o2, e2);
    if (r == 0)
        r = huf_decode_tail(s3, l3, pos3, tab->one, o3, e3);
    return r;
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
    return tcodec_decode_scratch(p, plen, raw, len, NULL);
}

int tcodec_decode_scratch(const uint8_t *p, size_t plen, uint8_t *raw, size_t len, struct buf *keep)
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

    unsigned nhuf = 0;
    for (unsigned k = 0; k < w; k++)
        nhuf += pl[k].mode == TC_HUF;
    uint8_t *scratch = NULL, *next = NULL;
    if (nhuf && keep) { /* the caller's, reused: no fresh pages to fault in */
        buf_reset(keep);
        if (buf_reserve(keep, nhuf * n + 1) < 0)
            return -ENOMEM;
        next = keep->data;
    } else if (nhuf) {
        /* + 1: a real pointer even when n is 0 */
        scratch = malloc(nhuf * n + 1);
        if (!scratch)
            return -ENOMEM;
        next = scratch;
    }
    struct tc_dtable tab;
    const uint8_t *src[4];
    bool is_const[4];
    for (unsigned k = 0; k < w && r == 0; k++) {
        is_const[k] = pl[k].mode == TC_CONST;
        if (pl[k].mode == TC_RAW) {
            src[k] = pl[k].data;
        } else if (is_const[k]) {
            src[k] = &pl[k].value;
        } else {
            dtable_build(pl[k].data, &tab);
            r = huf_decode(&pl[k], &tab, next, n);
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

#define PICK_WIN 2048
#define PICK_NWIN 8
#define PICK_MIN 1024
#define PICK_HASH_BITS 10

struct pick_stats {
    uint32_t t[8][256]; /* bytes by position mod 8 */
    uint32_t rep[256];  /* bytes of 4-byte groups the repeat probe found */
    uint64_t groups, hits;
};

/* Histograms one window (start and length multiples of 8) and probes each
 * aligned 4-byte group for an earlier copy in the window: a stand-in for
 * what zstd's match finder would find (runs, repeated records, the zero
 * high halves of small int64s; floats have next to none). */
static void pick_window(const uint8_t *w, size_t len, struct pick_stats *st)
{
    uint16_t seen[1u << PICK_HASH_BITS];
    memset(seen, 0xff, sizeof(seen));
    for (size_t i = 0; i + 4 <= len; i += 4) {
        const uint8_t *g = w + i;
        unsigned ph = i & 4;
        st->t[ph][g[0]]++;
        st->t[ph + 1][g[1]]++;
        st->t[ph + 2][g[2]]++;
        st->t[ph + 3][g[3]]++;
        uint32_t v;
        memcpy(&v, g, 4);
        unsigned hh = (v * 0x9e3779b1u) >> (32 - PICK_HASH_BITS);
        uint16_t prev = seen[hh];
        seen[hh] = (uint16_t)i;
        st->groups++;
        if (prev != 0xffff && memcmp(w + prev, g, 4) == 0) {
            st->hits++;
            st->rep[g[0]]++;
            st->rep[g[1]]++;
            st->rep[g[2]]++;
            st->rep[g[3]]++;
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
    /* + 1/32 for Huffman's distance from the entropy */
    uint64_t b = entropy_q16(c, total) / total;
    b += b >> 5;
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
            pick_window(raw + off, len - off < PICK_WIN ? (len - off) & ~(size_t)7 : PICK_WIN, &st);
    } else {
        for (unsigned j = 0; j < PICK_NWIN; j++) {
            size_t off = (size_t)((uint64_t)j * (len - PICK_WIN) / (PICK_NWIN - 1)) & ~(size_t)7;
            pick_window(raw + off, PICK_WIN, &st);
        }
    }
    if (st.groups == 0)
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
    uint32_t lit[256];
    uint64_t nlit = 0;
    for (unsigned s = 0; s < 256; s++) {
        lit[s] = h2[0][s] + h2[1][s] - st.rep[s];
        nlit += lit[s];
    }
    uint64_t c1 = nlit ? entropy_q16(lit, nlit) / nlit : 0;
    c1 = c1 * 1000 / (8u << 16) * (st.groups - st.hits) / st.groups;

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
