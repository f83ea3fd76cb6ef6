/*
 * test-tcodec.c — the tensor codec: round trips on bf16/fp32-like data and
 * edge shapes (tiny and odd lengths, constant, random, one- and two-symbol
 * planes), deterministic output, the plane modes chosen, what
 * tcodec_pick says for floats, text, zeros and noise, and hostile
 * payloads: every truncation, every bit flip, and a table of hand-made
 * corruptions, all of which must fail cleanly (or, where the format cannot
 * notice, decode to other bytes without a crash).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/tcodec.h"

/* Payload layout constants the hostile cases rely on (tcodec.h). */
#define HDR 5
#define HUF_LENS 128
#define HUF_HEAD (HUF_LENS + 16)

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static void fill_noise(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng_next(&s) >> 32);
}

/* A normal deviate from the sum of 12 uniforms (Irwin-Hall), enough to
 * give the exponent bytes the shape trained weights have. */
static float normal(uint64_t *s)
{
    double sum = 0;
    for (int i = 0; i < 12; i++)
        sum += (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sum - 6.0);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* n fp32 (little endian) of N(0, scale^2). */
static void fill_fp32(uint8_t *p, size_t n, float scale, uint64_t seed)
{
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = f32_bits(normal(&s) * scale);
        for (int b = 0; b < 4; b++)
            p[4 * i + b] = (uint8_t)(u >> (8 * b));
    }
}

/* n bf16 (little endian), rounded to nearest even from fp32. */
static void fill_bf16(uint8_t *p, size_t n, float scale, uint64_t seed)
{
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = f32_bits(normal(&s) * scale);
        u += 0x7fff + ((u >> 16) & 1);
        p[2 * i] = (uint8_t)(u >> 16);
        p[2 * i + 1] = (uint8_t)(u >> 24);
    }
}

static void fill_text(uint8_t *p, size_t n)
{
    static const char *words[] = {"step ",  "loss ",  "0.3141 ", "lr ",      "1e-4\n",
                                  "layer.", "attn.",  "q_proj ", "weight\n", "epoch ",
                                  "grad ",  "norm\n", "the ",    "model ",   "saved "};
    uint64_t s = 7;
    size_t i = 0;
    while (i < n) {
        const char *w = words[rng_next(&s) % 15];
        for (size_t k = 0; w[k] && i < n; k++)
            p[i++] = (uint8_t)w[k];
    }
}

/* Encodes after a prefix (encode appends), checks bound, determinism and
 * the round trip; returns the payload (caller frees). */
static struct buf round_trip(const uint8_t *raw, size_t len, unsigned w)
{
    struct buf out = BUF_INIT, again = BUF_INIT;
    assert_int_equal(buf_append(&out, "prefix", 6), 0);
    assert_int_equal(tcodec_encode(raw, len, w, &out), 0);
    assert_memory_equal(out.data, "prefix", 6);
    size_t plen = out.len - 6, size = 0;
    assert_true(plen <= tcodec_bound(len));
    /* the size without coding is the coded size, byte for byte */
    assert_int_equal(tcodec_size(raw, len, w, &size), 0);
    assert_int_equal(size, plen);

    assert_int_equal(tcodec_encode(raw, len, w, &again), 0);
    assert_int_equal(again.len, plen);
    assert_memory_equal(again.data, out.data + 6, plen);

    uint8_t *dec = malloc(len + 1);
    assert_non_null(dec);
    assert_int_equal(tcodec_decode(again.data, again.len, dec, len), 0);
    if (len)
        assert_memory_equal(dec, raw, len);
    /* the length is part of the contract: one more or less is an error */
    assert_int_equal(tcodec_decode(again.data, again.len, dec, len + 1), CKS_E_FORMAT);
    if (len)
        assert_int_equal(tcodec_decode(again.data, again.len, dec, len - 1), CKS_E_FORMAT);
    free(dec);
    buf_free(&out);
    return again;
}

/* Plane k's mode byte, walking the records (the test knows the layout). */
static int plane_mode(const struct buf *p, size_t len, unsigned k)
{
    unsigned w = p->data[0];
    size_t n = len / w, pos = HDR;
    for (unsigned i = 0;; i++) {
        unsigned mode = p->data[pos];
        if (i == k)
            return (int)mode;
        pos++;
        if (mode == 0) {
            pos += n;
        } else if (mode == 1) {
            pos += 1;
        } else {
            size_t sum = HUF_HEAD;
            for (unsigned j = 0; j < 4; j++) {
                const uint8_t *q = p->data + pos + HUF_LENS + 4 * j;
                sum += (size_t)q[0] | (size_t)q[1] << 8 | (size_t)q[2] << 16 | (size_t)q[3] << 24;
            }
            pos += sum;
        }
    }
}

static void test_floats(void **state)
{
    (void)state;
    size_t n = 300000;
    uint8_t *raw = malloc(4 * n);
    assert_non_null(raw);

    fill_bf16(raw, n, 0.02f, 1);
    struct buf p = round_trip(raw, 2 * n, 2);
    assert_int_equal(plane_mode(&p, 2 * n, 0), 0);
    assert_int_equal(plane_mode(&p, 2 * n, 1), 2);
    assert_true(p.len < 2 * n * 68 / 100);
    buf_free(&p);

    fill_fp32(raw, n, 0.02f, 2);
    p = round_trip(raw, 4 * n, 4);
    assert_int_equal(plane_mode(&p, 4 * n, 3), 2);
    assert_true(p.len < 4 * n * 85 / 100);
    buf_free(&p);

    /* fp32 coded with width 2 (a wrong hint): the plane that mixes
     * mantissa and exponent bytes still compresses */
    p = round_trip(raw, 4 * n, 2);
    assert_int_equal(plane_mode(&p, 4 * n, 1), 2);
    assert_true(p.len < 4 * n * 92 / 100);
    buf_free(&p);

    /* chunks start anywhere in a file: odd offsets put the exponent bytes
     * in plane 0, and odd lengths leave a tail */
    p = round_trip(raw + 1, 4 * n - 3, 4);
    assert_int_equal(plane_mode(&p, 4 * n - 3, 2), 2);
    buf_free(&p);
    p = round_trip(raw + 3, 4 * n - 8, 2);
    buf_free(&p);
    free(raw);
}

/* fp32 upcast from bf16: the two low planes are all zero: CONST. */
static void test_const_planes(void **state)
{
    (void)state;
    size_t n = 50000;
    uint8_t *raw = malloc(4 * n);
    assert_non_null(raw);
    fill_fp32(raw, n, 1.0f, 3);
    for (size_t i = 0; i < n; i++)
        raw[4 * i] = raw[4 * i + 1] = 0;
    struct buf p = round_trip(raw, 4 * n, 4);
    assert_int_equal(plane_mode(&p, 4 * n, 0), 1);
    assert_int_equal(plane_mode(&p, 4 * n, 1), 1);
    assert_int_equal(plane_mode(&p, 4 * n, 3), 2);
    assert_true(p.len < 4 * n * 45 / 100);
    buf_free(&p);

    /* every byte the same: every plane CONST */
    memset(raw, 0x3c, 4 * n);
    for (unsigned w = 2; w <= 4; w += 2) {
        p = round_trip(raw, 4 * n + 1 - w, w);
        assert_true(p.len <= HDR + 2 * w + w);
        buf_free(&p);
    }
    free(raw);
}

/* Noise: every plane RAW, the payload exactly len + header + modes. */
static void test_random(void **state)
{
    (void)state;
    size_t len = 100003;
    uint8_t *raw = malloc(len);
    assert_non_null(raw);
    fill_noise(raw, len, 4);
    for (unsigned w = 2; w <= 4; w += 2) {
        struct buf p = round_trip(raw, len, w);
        assert_int_equal(p.len, len + HDR + w);
        assert_int_equal(p.len, tcodec_bound(len) - 4 + w);
        buf_free(&p);
    }
    free(raw);
}

/* A plane of two values (one bit each) and one with a single rare other
 * value among a constant: both HUF, 1-bit codes. */
static void test_few_symbols(void **state)
{
    (void)state;
    size_t n = 20000;
    uint8_t *raw = malloc(2 * n);
    assert_non_null(raw);
    uint64_t s = 5;
    for (size_t i = 0; i < n; i++) {
        raw[2 * i] = (uint8_t)(rng_next(&s) >> 40);
        raw[2 * i + 1] = rng_next(&s) & 1 ? 0x3f : 0xbf;
    }
    struct buf p = round_trip(raw, 2 * n, 2);
    assert_int_equal(plane_mode(&p, 2 * n, 0), 0);
    assert_int_equal(plane_mode(&p, 2 * n, 1), 2);
    assert_true(p.len < n + n / 8 + 200);
    buf_free(&p);

    for (size_t i = 0; i < n; i++)
        raw[2 * i + 1] = 7;
    raw[2 * 777 + 1] = 9;
    p = round_trip(raw, 2 * n, 2);
    assert_int_equal(plane_mode(&p, 2 * n, 1), 2);
    buf_free(&p);

    /* many symbols with skewed counts: lengths past 11 get limited */
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&s);
        unsigned v = 0;
        while (v < 255 && (r & 1)) {
            v++;
            r >>= 1;
            if (!r)
                r = rng_next(&s);
        }
        raw[2 * i + 1] = (uint8_t)v;
    }
    p = round_trip(raw, 2 * n, 2);
    assert_int_equal(plane_mode(&p, 2 * n, 1), 2);
    buf_free(&p);
    free(raw);
}

/* Lengths 0..40 and a few odd ones, on several kinds of data. */
static void test_lengths(void **state)
{
    (void)state;
    static const size_t odd[] = {41, 63, 64, 65, 99, 100, 101, 255, 1001, 4097, 40001, 65537};
    uint8_t *raw = malloc(70000);
    assert_non_null(raw);
    for (int kind = 0; kind < 3; kind++) {
        if (kind == 0)
            fill_bf16(raw, 35000, 0.1f, 6);
        else if (kind == 1)
            fill_noise(raw, 70000, 7);
        else
            memset(raw, 0, 70000);
        for (unsigned w = 2; w <= 4; w += 2) {
            for (size_t len = 0; len <= 40; len++) {
                struct buf p = round_trip(raw, len, w);
                buf_free(&p);
            }
            for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
                struct buf p = round_trip(raw, odd[i], w);
                buf_free(&p);
            }
        }
    }
    free(raw);
}

static void test_bad_width(void **state)
{
    (void)state;
    struct buf out = BUF_INIT;
    uint8_t raw[8] = {0};
    static const unsigned bad[] = {0, 1, 3, 8, 16};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(tcodec_encode(raw, sizeof(raw), bad[i], &out), -EINVAL);
    assert_int_equal(out.len, 0);
    buf_free(&out);
}

static void test_pick(void **state)
{
    (void)state;
    size_t len = 2u << 20;
    uint8_t *raw = malloc(len);
    assert_non_null(raw);
    unsigned pm = 0;

    fill_bf16(raw, len / 2, 0.02f, 8);
    assert_int_equal(tcodec_pick(raw, len, &pm), 2);
    assert_true(pm > 600 && pm < 700);
    /* the phase does not matter */
    assert_int_equal(tcodec_pick(raw + 1, len - 1, NULL), 2);

    fill_fp32(raw, len / 4, 0.02f, 9);
    assert_int_equal(tcodec_pick(raw, len, &pm), 4);
    assert_true(pm > 780 && pm < 880);
    assert_int_equal(tcodec_pick(raw + 3, len - 3, NULL), 4);

    fill_text(raw, len);
    assert_int_equal(tcodec_pick(raw, len, NULL), 0);
    memset(raw, 0, len);
    assert_int_equal(tcodec_pick(raw, len, NULL), 0);
    fill_noise(raw, len, 10);
    assert_int_equal(tcodec_pick(raw, len, &pm), 0);
    assert_true(pm >= 970);
    /* a small chunk is looked at whole; a tiny one is not worth it */
    fill_bf16(raw, 8000, 0.02f, 11);
    assert_int_equal(tcodec_pick(raw, 16000, NULL), 2);
    assert_int_equal(tcodec_pick(raw, 1000, NULL), 0);
    assert_int_equal(tcodec_pick(raw, 0, NULL), 0);
    /* int64 token ids: zstd's matches on the zero high halves beat planes */
    uint64_t s = 13;
    for (size_t i = 0; i + 8 <= len; i += 8) {
        uint64_t v = rng_next(&s) % 50257;
        for (int b = 0; b < 8; b++)
            raw[i + b] = (uint8_t)(v >> (8 * b));
    }
    assert_int_equal(tcodec_pick(raw, len, NULL), 0);
    /* a repeated record: the LZ probe finds it, zstd is better there */
    for (size_t i = 0; i < len; i++)
        raw[i] = raw[i % 1000];
    assert_int_equal(tcodec_pick(raw, len, NULL), 0);
    free(raw);
}

/* A payload with a RAW, a HUF plane and a tail, for the hostile cases. */
static uint8_t *sample_payload(size_t *ret_plen, uint8_t **ret_raw, size_t *ret_len)
{
    size_t n = 3001, len = 2 * n + 1;
    uint8_t *raw = malloc(len);
    assert_non_null(raw);
    fill_bf16(raw, n, 0.02f, 12);
    raw[len - 1] = 0x5a;
    struct buf p = BUF_INIT;
    assert_int_equal(tcodec_encode(raw, len, 2, &p), 0);
    assert_int_equal(p.data[HDR], 0);
    assert_int_equal(p.data[HDR + 1 + n], 2);
    *ret_raw = raw;
    *ret_len = len;
    *ret_plen = p.len;
    return buf_detach(&p, NULL);
}

static void test_truncations(void **state)
{
    (void)state;
    size_t plen, len;
    uint8_t *raw, *p = sample_payload(&plen, &raw, &len);
    uint8_t *dec = malloc(len);
    assert_non_null(dec);
    for (size_t cut = 0; cut < plen; cut++) {
        /* a copy of exactly cut bytes, so ASan sees any read past it */
        uint8_t *q = malloc(cut ? cut : 1);
        assert_non_null(q);
        memcpy(q, p, cut);
        assert_int_equal(tcodec_decode(q, cut, dec, len), CKS_E_FORMAT);
        free(q);
    }
    /* and a byte too many */
    uint8_t *q = malloc(plen + 1);
    assert_non_null(q);
    memcpy(q, p, plen);
    q[plen] = 0;
    assert_int_equal(tcodec_decode(q, plen + 1, dec, len), CKS_E_FORMAT);
    free(q);
    free(dec);
    free(raw);
    free(p);
}

static void test_bit_flips(void **state)
{
    (void)state;
    size_t plen, len;
    uint8_t *raw, *p = sample_payload(&plen, &raw, &len);
    uint8_t *dec = malloc(len);
    assert_non_null(dec);
    size_t n = len / 2, huf = HDR + 1 + n, failed = 0, wrong = 0;
    for (size_t i = 0; i < plen; i++) {
        for (int b = 0; b < 8; b++) {
            p[i] ^= (uint8_t)(1u << b);
            int r = tcodec_decode(p, plen, dec, len);
            p[i] ^= (uint8_t)(1u << b);
            assert_true(r == 0 || r == CKS_E_FORMAT);
            if (r < 0) {
                failed++;
                continue;
            }
            wrong += memcmp(dec, raw, len) != 0;
            /* only RAW bytes, the tail, or code bits that still parse
             * can go unnoticed; the header and table never do */
            assert_true(i > HDR && i != HDR + 1 + n && (i < huf + 1 || i >= huf + 1 + HUF_HEAD));
        }
    }
    assert_true(failed > 0);
    /* a flip that decodes never gives back the original bytes */
    assert_int_equal(tcodec_decode(p, plen, dec, len), 0);
    assert_memory_equal(dec, raw, len);
    (void)wrong;
    free(dec);
    free(raw);
    free(p);
}

static void le32_add(uint8_t *f, int64_t d)
{
    uint32_t v = (uint32_t)f[0] | (uint32_t)f[1] << 8 | (uint32_t)f[2] << 16 | (uint32_t)f[3] << 24;
    v += (uint32_t)d;
    for (int b = 0; b < 4; b++)
        f[b] = (uint8_t)(v >> (8 * b));
}

/* Hand-made corruptions of the sample payload, each a clean failure. */
static void test_hostile(void **state)
{
    (void)state;
    size_t plen, len;
    uint8_t *raw, *p = sample_payload(&plen, &raw, &len);
    uint8_t *dec = malloc(len), *q = malloc(plen + 64);
    assert_non_null(dec);
    assert_non_null(q);
    size_t n = len / 2, huf = HDR + 1 + n + 1; /* HUF record body */

    struct {
        const char *what;
        size_t at;
        int op; /* 0 set byte, 1 add to le32, 2 zero the lengths, 3 move v bytes S1 -> S0 */
        int64_t v;
    } cases[] = {
        {"width 0", 0, 0, 0},
        {"width 3", 0, 0, 3},
        {"width 4 for a width-2 payload", 0, 0, 4},
        {"element count off by one", 1, 1, 1},
        {"element count huge", 4, 0, 0xff},
        {"unknown mode", HDR, 0, 3},
        {"RAW plane 0 as CONST", HDR, 0, 1},
        {"HUF plane as RAW", HDR + 1 + n, 0, 0},
        {"HUF plane as mode 255", HDR + 1 + n, 0, 255},
        {"code length 12", huf + 0, 0, 0x0c},
        {"code length 15", huf + 60, 0, 0xff},
        {"incomplete code (all lengths zero)", huf, 2, 0},
        {"stream 0 one byte longer", huf + HUF_LENS, 1, 1},
        {"stream 0 one byte shorter", huf + HUF_LENS, 1, -1},
        {"stream 3 longer than the payload", huf + HUF_LENS + 12, 1, 1 << 20},
        {"stream 1 length huge", huf + HUF_LENS + 7, 0, 0xff},
        {"a byte of stream 1 counted in stream 0", huf + HUF_LENS, 3, 1},
        {"a byte of stream 0 counted in stream 1", huf + HUF_LENS, 3, -1},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        memcpy(q, p, plen);
        if (cases[c].op == 0) {
            q[cases[c].at] = (uint8_t)cases[c].v;
        } else if (cases[c].op == 1) {
            le32_add(q + cases[c].at, cases[c].v);
        } else if (cases[c].op == 2) {
            memset(q + cases[c].at, 0, HUF_LENS);
        } else {
            /* S0 += v, S1 -= v: the sum stays right */
            le32_add(q + cases[c].at, cases[c].v);
            le32_add(q + cases[c].at + 4, -cases[c].v);
        }
        int r = tcodec_decode(q, plen, dec, len);
        if (r != CKS_E_FORMAT)
            fail_msg("%s: decode returned %d", cases[c].what, r);
    }

    /* one symbol in the table (length 1, Kraft sum 1/2): incomplete */
    memcpy(q, p, plen);
    memset(q + huf, 0, HUF_LENS);
    q[huf] = 1;
    assert_int_equal(tcodec_decode(q, plen, dec, len), CKS_E_FORMAT);

    /* nonzero padding in the last byte of a stream: find a stream whose
     * code bits do not fill its last byte by setting each last bit */
    int padded = 0;
    size_t sp = huf + HUF_HEAD;
    for (unsigned j = 0; j < 4; j++) {
        const uint8_t *f = p + huf + HUF_LENS + 4 * j;
        size_t sl = (size_t)f[0] | (size_t)f[1] << 8 | (size_t)f[2] << 16 | (size_t)f[3] << 24;
        memcpy(q, p, plen);
        if (!(q[sp + sl - 1] & 1)) {
            q[sp + sl - 1] |= 1;
            int r = tcodec_decode(q, plen, dec, len);
            assert_true(r == CKS_E_FORMAT || r == 0);
            padded += r == CKS_E_FORMAT;
        }
        sp += sl;
    }
    assert_true(padded > 0);

    /* payloads that are too short to hold anything */
    assert_int_equal(tcodec_decode(p, 0, dec, len), CKS_E_FORMAT);
    assert_int_equal(tcodec_decode(p, 4, dec, len), CKS_E_FORMAT);
    /* a length beyond what the format can count */
    assert_int_equal(tcodec_decode(p, plen, dec, (size_t)UINT32_MAX + 1), CKS_E_FORMAT);
    free(q);
    free(dec);
    free(raw);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_floats),    cmocka_unit_test(test_const_planes),
        cmocka_unit_test(test_random),    cmocka_unit_test(test_few_symbols),
        cmocka_unit_test(test_lengths),   cmocka_unit_test(test_bad_width),
        cmocka_unit_test(test_pick),      cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_bit_flips), cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
