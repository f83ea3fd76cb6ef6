/*
 * test-chunkobj.c — chunk object round trips (zstd, raw fallback, empty,
 * byte planes for floats), version-1 objects still read, and a table of
 * hostile objects that decode must reject with the right code, leaving
 * its output empty.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/chunkobj.h"

#define TEXT_LEN 100000
#define NOISE_LEN 65536

static void fill_text(uint8_t *p, size_t n)
{
    static const char line[] = "step 000042 loss 0.3141 lr 1e-4 layer.attn.q_proj.weight\n";
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)line[i % (sizeof(line) - 1)];
}

static void fill_noise(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 32);
    }
}

static const struct chunkobj_opts opts3 = {.level = 3, .tensor = true};
static const struct chunkobj_opts opts3_zstd = {.level = 3, .tensor = false};

/* Normal floats of the given scale (Box-Muller over xorshift), as fp32 or
 * as bf16 (the fp32's upper half), little endian: trained weights. */
static void fill_floats(uint8_t *p, size_t n, unsigned width, float scale, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i + width <= n; i += width) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            u[k] = ((double)(x >> 11) + 1) / 9007199254740993.0;
        }
        float v = (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1])) * scale;
        uint32_t b;
        memcpy(&b, &v, 4);
        for (unsigned k = 0; k < width; k++)
            p[i + k] = (uint8_t)(b >> (8 * (k + 4 - width)));
    }
}

/* Encodes, checks the codec and header, decodes and compares. */
static void round_trip_opts(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len,
                            const struct chunkobj_opts *opts, enum chunkobj_codec want_codec)
{
    struct buf obj = BUF_INIT, out = BUF_INIT;
    enum chunkobj_codec codec, hcodec;
    uint32_t raw_len = 0;
    uint8_t id[HASH_LEN];

    assert_int_equal(chunkobj_encode(ctx, raw, len, opts, &obj, &codec), 0);
    assert_int_equal(codec, want_codec);
    /* what phase B compares a recipe with: the object's exact length */
    size_t size = 0;
    assert_int_equal(chunkobj_size(ctx, raw, len, opts, &out, &size), 0);
    assert_int_equal(size, obj.len);
    if (codec == CHUNKOBJ_RAW)
        assert_int_equal(obj.len, CHUNKOBJ_HEADER_LEN + len);
    else
        assert_true(obj.len < CHUNKOBJ_HEADER_LEN + len);
    assert_int_equal(chunkobj_header(obj.data, obj.len, &hcodec, &raw_len), 0);
    assert_int_equal(hcodec, want_codec);
    assert_int_equal(raw_len, len);

    hash_sha256(raw, len, id);
    assert_int_equal(chunkobj_decode(ctx, obj.data, obj.len, id, len, &out), 0);
    assert_int_equal(out.len, len);
    if (len)
        assert_memory_equal(out.data, raw, len);
    assert_int_equal(obj.data[4], CHUNKOBJ_VERSION);
    buf_free(&obj);
    buf_free(&out);
}

static void round_trip(struct chunkobj_ctx *ctx, const uint8_t *raw, size_t len,
                       enum chunkobj_codec want_codec)
{
    round_trip_opts(ctx, raw, len, &opts3, want_codec);
}

static void test_round_trips(void **state)
{
    uint8_t *text = malloc(TEXT_LEN), *noise = malloc(NOISE_LEN);
    assert_non_null(text);
    assert_non_null(noise);
    fill_text(text, TEXT_LEN);
    fill_noise(noise, NOISE_LEN, 7);

    struct chunkobj_ctx ctx = CHUNKOBJ_CTX_INIT;
    for (int pass = 0; pass < 2; pass++) {
        struct chunkobj_ctx *c = pass ? &ctx : NULL;
        round_trip(c, text, TEXT_LEN, CHUNKOBJ_ZSTD);
        round_trip(c, noise, NOISE_LEN, CHUNKOBJ_RAW);
        round_trip(c, noise, 1, CHUNKOBJ_RAW);
        round_trip(c, (const uint8_t *)"", 0, CHUNKOBJ_RAW);
        round_trip(c, text, TEXT_LEN, CHUNKOBJ_ZSTD); /* contexts reused */
    }
    chunkobj_ctx_free(&ctx);
    chunkobj_ctx_free(&ctx);
    chunkobj_ctx_free(NULL);
    free(text);
    free(noise);
}

/* Floats go to planes (smaller than zstd's object), at any length and
 * alignment; with tensor off, or below CHUNKOBJ_PLANES_MIN, they go to zstd
 * or raw as before; a width from the caller is used as given. */
static void test_planes(void **state)
{
    enum { N = 1 << 20 };
    uint8_t *bf16 = malloc(N), *fp32 = malloc(N);
    assert_non_null(bf16);
    assert_non_null(fp32);
    fill_floats(bf16, N, 2, 0.02f, 3);
    fill_floats(fp32, N, 4, 1e-4f, 5);
    struct chunkobj_ctx ctx = CHUNKOBJ_CTX_INIT;
    round_trip_opts(&ctx, bf16, N, &opts3, CHUNKOBJ_PLANES);
    round_trip_opts(&ctx, fp32, N, &opts3, CHUNKOBJ_PLANES);
    round_trip_opts(&ctx, bf16 + 1, N - 7, &opts3, CHUNKOBJ_PLANES); /* cut mid-element */
    round_trip_opts(&ctx, fp32 + 3, N - 3, &opts3, CHUNKOBJ_PLANES);
    round_trip_opts(&ctx, bf16, CHUNKOBJ_PLANES_MIN - 1, &opts3, CHUNKOBJ_ZSTD);
    round_trip_opts(&ctx, fp32, N, &(struct chunkobj_opts){.level = 3, .tensor = true, .width = 2},
                    CHUNKOBJ_PLANES);

    /* Planes beat zstd on floats: the reason they exist. */
    struct buf p = BUF_INIT, z = BUF_INIT;
    enum chunkobj_codec c;
    assert_int_equal(chunkobj_encode(&ctx, bf16, N, &opts3, &p, &c), 0);
    assert_int_equal(c, CHUNKOBJ_PLANES);
    assert_int_equal(chunkobj_encode(&ctx, bf16, N, &opts3_zstd, &z, &c), 0);
    assert_int_equal(c, CHUNKOBJ_ZSTD);
    assert_true(p.len < z.len);
    assert_true(p.len < N * 70 / 100);

    /* Text and zeros are not floats: zstd takes them even with tensor on. */
    uint8_t *text = malloc(N);
    assert_non_null(text);
    fill_text(text, N);
    round_trip_opts(&ctx, text, N, &opts3, CHUNKOBJ_ZSTD);
    memset(text, 0, N);
    round_trip_opts(&ctx, text, N, &opts3, CHUNKOBJ_ZSTD);
    fill_noise(text, N, 11);
    round_trip_opts(&ctx, text, N, &opts3, CHUNKOBJ_RAW);
    /* Tensor off: floats go to zstd. */
    round_trip_opts(&ctx, bf16, N, &opts3_zstd, CHUNKOBJ_ZSTD);

    assert_int_equal(
        chunkobj_encode(NULL, bf16, N, &(struct chunkobj_opts){.level = 3, .width = 3}, &p, NULL),
        -EINVAL);
    size_t size;
    assert_int_equal(
        chunkobj_size(NULL, bf16, N, &(struct chunkobj_opts){.level = 3, .width = 3}, &p, &size),
        -EINVAL);
    buf_free(&p);
    buf_free(&z);
    chunkobj_ctx_free(&ctx);
    free(text);
    free(bf16);
    free(fp32);
}

/* A version-1 object (what every writer wrote before planes) still
 * decodes; a version-1 object claiming codec 2 does not exist and is
 * refused; version 3 carries recipes (codec 3) only, and chunkobj_decode
 * does not decode those (engine/tdelta.h does); version 4 is unknown. */
static void test_version1(void **state)
{
    uint8_t raw[4096];
    fill_text(raw, sizeof(raw));
    uint8_t id[HASH_LEN];
    hash_sha256(raw, sizeof(raw), id);
    struct buf obj = BUF_INIT, out = BUF_INIT;
    enum chunkobj_codec c;
    uint32_t raw_len;
    assert_int_equal(chunkobj_encode(NULL, raw, sizeof(raw), &opts3, &obj, &c), 0);
    assert_int_equal(c, CHUNKOBJ_ZSTD);
    obj.data[4] = 1;
    assert_int_equal(chunkobj_decode(NULL, obj.data, obj.len, id, sizeof(raw), &out), 0);
    assert_memory_equal(out.data, raw, sizeof(raw));
    obj.data[5] = CHUNKOBJ_PLANES;
    assert_int_equal(chunkobj_header(obj.data, obj.len, &c, &raw_len), CKS_E_CODEC);
    obj.data[4] = 3;
    obj.data[5] = CHUNKOBJ_ZSTD;
    assert_int_equal(chunkobj_decode(NULL, obj.data, obj.len, id, sizeof(raw), &out), CKS_E_CODEC);
    assert_int_equal(out.len, 0);
    obj.data[5] = CHUNKOBJ_RECIPE;
    assert_int_equal(chunkobj_header(obj.data, obj.len, &c, &raw_len), 0);
    assert_int_equal(c, CHUNKOBJ_RECIPE);
    assert_int_equal(chunkobj_decode(NULL, obj.data, obj.len, id, sizeof(raw), &out), CKS_E_CODEC);
    obj.data[4] = 2;
    assert_int_equal(chunkobj_header(obj.data, obj.len, &c, &raw_len), CKS_E_CODEC);
    obj.data[4] = 4;
    obj.data[5] = CHUNKOBJ_ZSTD;
    assert_int_equal(chunkobj_decode(NULL, obj.data, obj.len, id, sizeof(raw), &out),
                     CKS_E_VERSION);
    assert_int_equal(out.len, 0);
    assert_string_equal(chunkobj_codec_name(CHUNKOBJ_PLANES), "planes");
    assert_string_equal(chunkobj_codec_name(CHUNKOBJ_RECIPE), "recipe");
    assert_string_equal(chunkobj_codec_name(9), "?");
    buf_free(&obj);
    buf_free(&out);
}

static void test_encode_rejects(void **state)
{
    struct buf obj = BUF_INIT;
    uint8_t byte = 0;

    assert_int_equal(
        chunkobj_encode(NULL, &byte, 1, &(struct chunkobj_opts){.level = 1000}, &obj, NULL),
        -EINVAL);
    assert_int_equal(
        chunkobj_encode(NULL, &byte, 1, &(struct chunkobj_opts){.level = -1000000000}, &obj, NULL),
        -EINVAL);
    /* The length is checked before raw is read. */
    assert_int_equal(chunkobj_encode(NULL, &byte, (size_t)CHUNKOBJ_MAX_RAW + 1, &opts3, &obj, NULL),
                     CKS_E_LIMIT);
    assert_int_equal(
        chunkobj_encode(NULL, &byte, 1, &(struct chunkobj_opts){.level = -5}, &obj, NULL), 0);
    buf_free(&obj);
}

/* How a row damages a valid object; zero fields do nothing. */
struct damage {
    const char *name;
    enum chunkobj_codec base; /* which valid object to start from */
    long xor_at;              /* flip xor_val into this byte (<0: from the end) */
    uint8_t xor_val;
    size_t set_at; /* header byte to overwrite (0: none) */
    uint8_t set_val;
    bool truncate; /* keep only the first `keep` bytes */
    size_t keep;
    size_t append;        /* zero bytes added at the end */
    uint32_t raw_len_add; /* added (mod 2^32) to the header's raw length */
    long max_raw_add;     /* max_raw = raw length + this */
    bool wrong_id;
    int expect, expect_alt; /* accepted results (expect_alt 0: none) */
};

#define Z CHUNKOBJ_ZSTD
#define R CHUNKOBJ_RAW
static const struct damage damages[] = {
    {"bad magic", Z, .xor_at = 0, .xor_val = 0x20, .expect = CKS_E_FORMAT},
    {"bad magic (last byte)", R, .xor_at = 3, .xor_val = 1, .expect = CKS_E_FORMAT},
    {"version 0", Z, .set_at = 4, .set_val = 0, .expect = CKS_E_VERSION},
    {"version 3 (recipes only)", R, .set_at = 4, .set_val = 3, .expect = CKS_E_CODEC},
    {"version 4", R, .set_at = 4, .set_val = 4, .expect = CKS_E_VERSION},
    {"unknown codec", Z, .set_at = 5, .set_val = 3, .expect = CKS_E_CODEC},
    {"zstd frame labelled planes", Z, .set_at = 5, .set_val = 2, .expect = CKS_E_CODEC,
     .expect_alt = CKS_E_FORMAT},
    {"raw bytes labelled planes", R, .set_at = 5, .set_val = 2, .expect = CKS_E_CODEC,
     .expect_alt = CKS_E_FORMAT},
    {"unknown codec 0xff", R, .set_at = 5, .set_val = 0xff, .expect = CKS_E_CODEC},
    {"raw bytes labelled zstd", R, .set_at = 5, .set_val = 1, .expect = CKS_E_CODEC},
    {"reserved byte 6", Z, .set_at = 6, .set_val = 1, .expect = CKS_E_FORMAT},
    {"reserved byte 7", R, .set_at = 7, .set_val = 0x80, .expect = CKS_E_FORMAT},
    {"empty object", R, .truncate = true, .keep = 0, .expect = CKS_E_FORMAT},
    {"truncated header", Z, .truncate = true, .keep = 11, .expect = CKS_E_FORMAT},
    {"magic only", Z, .truncate = true, .keep = 4, .expect = CKS_E_FORMAT},
    {"header only, raw", R, .truncate = true, .keep = 12, .expect = CKS_E_FORMAT},
    {"header only, zstd", Z, .truncate = true, .keep = 12, .expect = CKS_E_CODEC},
    {"raw: payload short", R, .truncate = true, .keep = 12 + 4095, .expect = CKS_E_FORMAT},
    {"raw: payload long", R, .append = 1, .expect = CKS_E_FORMAT},
    {"raw: length +1", R, .raw_len_add = 1, .max_raw_add = 1, .expect = CKS_E_FORMAT},
    {"zstd: length -1", Z, .raw_len_add = (uint32_t)-1, .expect = CKS_E_FORMAT},
    {"zstd: length +1", Z, .raw_len_add = 1, .max_raw_add = 1, .expect = CKS_E_FORMAT},
    {"zstd: trailing byte", Z, .append = 1, .expect = CKS_E_FORMAT},
    {"zstd: bad frame magic", Z, .xor_at = 12, .xor_val = 1, .expect = CKS_E_CODEC},
    {"raw over max_raw", R, .max_raw_add = -1, .expect = CKS_E_LIMIT},
    {"zstd over max_raw", Z, .max_raw_add = -4096, .expect = CKS_E_LIMIT},
    {"over CHUNKOBJ_MAX_RAW", R, .set_at = 11, .set_val = 0x10, .max_raw_add = 1L << 30,
     .expect = CKS_E_LIMIT},
    {"raw: corrupt payload", R, .xor_at = -40, .xor_val = 1, .expect = CKS_E_DIGEST},
    {"zstd: corrupt payload", Z, .xor_at = -20, .xor_val = 0x5a, .expect = CKS_E_CODEC,
     .expect_alt = CKS_E_DIGEST},
    {"raw: wrong id", R, .wrong_id = true, .expect = CKS_E_DIGEST},
    {"zstd: wrong id", Z, .wrong_id = true, .expect = CKS_E_DIGEST},
};
#undef Z
#undef R

struct fixture {
    uint8_t raw[2][4096]; /* [codec]: compressible text, noise */
    uint8_t id[2][HASH_LEN];
    struct buf obj[2];
};

static int fixture_setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    if (!f)
        return -1;
    fill_text(f->raw[CHUNKOBJ_ZSTD], sizeof(f->raw[0]));
    fill_noise(f->raw[CHUNKOBJ_RAW], sizeof(f->raw[0]), 99);
    for (int c = 0; c < 2; c++) {
        enum chunkobj_codec got;
        hash_sha256(f->raw[c], sizeof(f->raw[c]), f->id[c]);
        if (chunkobj_encode(NULL, f->raw[c], sizeof(f->raw[c]), &opts3, &f->obj[c], &got) < 0 ||
            (int)got != c)
            return -1;
    }
    *state = f;
    return 0;
}

static int fixture_teardown(void **state)
{
    struct fixture *f = *state;
    buf_free(&f->obj[0]);
    buf_free(&f->obj[1]);
    free(f);
    return 0;
}

/* Builds the damaged object (heap-allocated to its exact length, so ASan
 * sees any overrun) and decodes it. */
static int decode_damaged(struct fixture *f, const struct damage *d, struct chunkobj_ctx *ctx,
                          struct buf *out)
{
    const struct buf *base = &f->obj[d->base];
    size_t len = d->truncate ? d->keep : base->len + d->append;
    uint8_t *obj = calloc(1, len ? len : 1);
    assert_non_null(obj);
    memcpy(obj, base->data, len < base->len ? len : base->len);

    if (d->xor_val) {
        size_t at = d->xor_at >= 0 ? (size_t)d->xor_at : len - (size_t)-d->xor_at;
        obj[at] ^= d->xor_val;
    }
    if (d->set_at)
        obj[d->set_at] = d->set_val;
    if (d->raw_len_add) {
        uint32_t v = (uint32_t)obj[8] | (uint32_t)obj[9] << 8 | (uint32_t)obj[10] << 16 |
                     (uint32_t)obj[11] << 24;
        v += d->raw_len_add;
        for (int i = 0; i < 4; i++)
            obj[8 + i] = (uint8_t)(v >> (8 * i));
    }
    uint8_t id[HASH_LEN];
    memcpy(id, f->id[d->base], HASH_LEN);
    if (d->wrong_id)
        id[HASH_LEN - 1] ^= 1;
    size_t max_raw = (size_t)((long)sizeof(f->raw[0]) + d->max_raw_add);

    int r = chunkobj_decode(ctx, obj, len, id, max_raw, out);
    free(obj);
    return r;
}

static void test_rejects(void **state)
{
    struct fixture *f = *state;
    struct chunkobj_ctx ctx = CHUNKOBJ_CTX_INIT;
    struct buf out = BUF_INIT;

    for (size_t i = 0; i < sizeof(damages) / sizeof(damages[0]); i++) {
        const struct damage *d = &damages[i];
        for (int pass = 0; pass < 2; pass++) {
            assert_int_equal(buf_append(&out, "stale", 5), 0);
            int r = decode_damaged(f, d, pass ? &ctx : NULL, &out);
            if (r != d->expect && (d->expect_alt == 0 || r != d->expect_alt))
                fail_msg("%s: got %d (%s), expected %d", d->name, r, err_str(r), d->expect);
            if (out.len != 0)
                fail_msg("%s: output not emptied on failure", d->name);
        }
    }
    /* The undamaged objects still decode with the same (reused) context. */
    for (int c = 0; c < 2; c++) {
        assert_int_equal(
            chunkobj_decode(&ctx, f->obj[c].data, f->obj[c].len, f->id[c], sizeof(f->raw[c]), &out),
            0);
        assert_memory_equal(out.data, f->raw[c], sizeof(f->raw[c]));
    }
    chunkobj_ctx_free(&ctx);
    buf_free(&out);
}

static void test_header_only(void **state)
{
    struct fixture *f = *state;
    enum chunkobj_codec codec;
    uint32_t raw_len;

    assert_int_equal(chunkobj_header(f->obj[1].data, CHUNKOBJ_HEADER_LEN, &codec, &raw_len), 0);
    assert_int_equal(codec, CHUNKOBJ_ZSTD);
    assert_int_equal(raw_len, sizeof(f->raw[1]));
    assert_int_equal(chunkobj_header(f->obj[1].data, CHUNKOBJ_HEADER_LEN - 1, &codec, &raw_len),
                     CKS_E_FORMAT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips), cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_planes),      cmocka_unit_test(test_version1),
        cmocka_unit_test(test_rejects),     cmocka_unit_test(test_header_only),
    };
    return cmocka_run_group_tests(tests, fixture_setup, fixture_teardown);
}
