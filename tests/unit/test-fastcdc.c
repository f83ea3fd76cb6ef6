/*
 * test-fastcdc.c — golden FastCDC 2020 cut points (tests/fixtures/fastcdc),
 * streaming == whole-buffer, parameter validation, and the Gear table
 * recomputed from MD5.  A failure here means stored chunks would no longer
 * dedup against new ones: fix the chunker, never the vectors.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "engine/fastcdc.h"
#include "engine/hash.h"

#define IMAGE_PATH CKS_FIXTURES "/fastcdc/SekienAkashita.jpg"
#define IMAGE_LEN 109466
#define IMAGE_SHA256 "d9e749d9367fc908876749d6502eb212fee88c9a94892fb07da5ef3ba8bc39ed"
#define MAX_CHUNKS 16

struct golden_row {
    size_t min, avg, max;
    unsigned nc;
    size_t lengths[MAX_CHUNKS]; /* zero-terminated */
};

/* Every row of the README table. */
static const struct golden_row golden[] = {
    {4096, 16384, 65535, 1, {21325, 17140, 28084, 18217, 24700}},
    {8192, 32768, 131072, 1, {66549, 42917}},
    {16384, 65536, 262144, 1, {109466}},
    {4096, 16384, 65535, 0, {6634, 59915, 25597, 5237, 12083}},
    {8192, 16384, 32768, 3, {17350, 19911, 17426, 17519, 19940, 17320}},
};

static const char *const row1_sha256[] = {
    "695429afe5937d6c75099f6e587267065a64e9dd83596a3d7386df3ef5a792c2",
    "17119f7abc183375afdb652248aad0c7211618d263335cc4e4ffc9a31e719bcb",
    "1545925739c6bfbd6609752a0e6ab61854f14d1fdb9773f08a7f52a13f9362d8",
    "bbd5b0b284d4e3c2098e92e8e2897e738c669113d06472560188d99a288872a3",
    "ede34e1a6cb287766e857eb0ed45b9f4b5ad83bb93c597be880c3a2ac91cddbe",
};

struct blob {
    uint8_t *data;
    size_t len;
};

static int image_setup(void **state)
{
    struct blob *b = calloc(1, sizeof(*b));
    FILE *f = fopen(IMAGE_PATH, "rb");
    if (!b || !f)
        goto fail;
    b->data = malloc(IMAGE_LEN + 1);
    if (!b->data)
        goto fail;
    b->len = fread(b->data, 1, IMAGE_LEN + 1, f);
    fclose(f);
    *state = b;
    return 0;
fail:
    fprintf(stderr, "cannot read \"%s\"\n", IMAGE_PATH);
    if (f)
        fclose(f);
    free(b);
    return -1;
}

static int image_teardown(void **state)
{
    struct blob *b = *state;
    free(b->data);
    free(b);
    return 0;
}

/* Cuts the whole buffer at once; returns the number of chunks. */
static size_t cut_whole(const struct fastcdc *cdc, const uint8_t *p, size_t n, size_t *lengths,
                        size_t cap)
{
    size_t count = 0, off = 0;
    while (off < n) {
        size_t len = fastcdc_cut(cdc, p + off, n - off, true);
        assert_true(len > 0 && len <= cdc->max && len <= n - off);
        assert_true(count < cap);
        lengths[count++] = len;
        off += len;
    }
    return count;
}

/*
 * Reads the input `step` bytes at a time into a window, as a file reader
 * would.  With `eager` the chunker is asked after every read (and must
 * answer 0 until it has seen enough); otherwise the window is refilled to
 * >= max first, as the daemon does.
 */
static size_t cut_stream(const struct fastcdc *cdc, const uint8_t *p, size_t n, size_t step,
                         bool eager, size_t *lengths, size_t cap)
{
    size_t count = 0, start = 0, end = 0;
    for (;;) {
        bool eof = end == n;
        if (!eof && !eager && end - start < cdc->max) {
            end += step < n - end ? step : n - end;
            continue;
        }
        if (start == end && eof)
            break;
        size_t len = fastcdc_cut(cdc, p + start, end - start, eof);
        if (len == 0) {
            assert_false(eof);
            assert_true(end - start < cdc->max);
            end += step < n - end ? step : n - end;
            continue;
        }
        assert_true(count < cap);
        lengths[count++] = len;
        start += len;
    }
    return count;
}

static size_t golden_count(const struct golden_row *row)
{
    size_t k = 0;
    while (k < MAX_CHUNKS && row->lengths[k])
        k++;
    return k;
}

static void test_image_digest(void **state)
{
    struct blob *b = *state;
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];

    assert_int_equal(b->len, IMAGE_LEN);
    hash_sha256(b->data, b->len, d);
    hex_encode(d, HASH_LEN, hex);
    assert_string_equal(hex, IMAGE_SHA256);
}

static void test_golden_rows(void **state)
{
    struct blob *b = *state;

    for (size_t r = 0; r < sizeof(golden) / sizeof(golden[0]); r++) {
        const struct golden_row *row = &golden[r];
        struct fastcdc cdc;
        size_t got[MAX_CHUNKS];

        assert_int_equal(fastcdc_init(&cdc, row->min, row->avg, row->max, row->nc), 0);
        size_t n = cut_whole(&cdc, b->data, b->len, got, MAX_CHUNKS);
        if (n != golden_count(row))
            fail_msg("row %zu: %zu chunks, expected %zu", r + 1, n, golden_count(row));
        for (size_t k = 0; k < n; k++)
            if (got[k] != row->lengths[k])
                fail_msg("row %zu chunk %zu: length %zu, expected %zu", r + 1, k, got[k],
                         row->lengths[k]);
    }
}

static void test_row1_chunk_digests(void **state)
{
    struct blob *b = *state;
    struct fastcdc cdc;
    size_t got[MAX_CHUNKS];

    assert_int_equal(fastcdc_init(&cdc, 4096, 16384, 65535, 1), 0);
    size_t n = cut_whole(&cdc, b->data, b->len, got, MAX_CHUNKS);
    assert_int_equal(n, sizeof(row1_sha256) / sizeof(row1_sha256[0]));
    size_t off = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t d[HASH_LEN];
        char hex[HASH_HEX_LEN + 1];
        hash_sha256(b->data + off, got[k], d);
        hex_encode(d, HASH_LEN, hex);
        assert_string_equal(hex, row1_sha256[k]);
        off += got[k];
    }
}

static void assert_stream_matches(const struct fastcdc *cdc, const uint8_t *p, size_t n,
                                  size_t step, bool eager)
{
    enum { CAP = 4096 };
    size_t *whole = calloc(CAP, sizeof(*whole));
    size_t *stream = calloc(CAP, sizeof(*stream));
    assert_non_null(whole);
    assert_non_null(stream);

    size_t nw = cut_whole(cdc, p, n, whole, CAP);
    size_t ns = cut_stream(cdc, p, n, step, eager, stream, CAP);
    if (nw != ns || memcmp(whole, stream, nw * sizeof(*whole)) != 0)
        fail_msg("step %zu eager %d: streaming cuts differ (%zu vs %zu chunks)", step, eager, ns,
                 nw);
    free(whole);
    free(stream);
}

static void test_streaming_image(void **state)
{
    struct blob *b = *state;
    static const size_t refill_steps[] = {1, 13, 4096, 100000};
    static const size_t eager_steps[] = {997, 4096, 65536};

    for (size_t r = 0; r < sizeof(golden) / sizeof(golden[0]); r++) {
        struct fastcdc cdc;
        assert_int_equal(
            fastcdc_init(&cdc, golden[r].min, golden[r].avg, golden[r].max, golden[r].nc), 0);
        for (size_t s = 0; s < sizeof(refill_steps) / sizeof(refill_steps[0]); s++)
            assert_stream_matches(&cdc, b->data, b->len, refill_steps[s], false);
        for (size_t s = 0; s < sizeof(eager_steps) / sizeof(eager_steps[0]); s++)
            assert_stream_matches(&cdc, b->data, b->len, eager_steps[s], true);
    }
}

/* Pseudo-random bytes with long runs of zeros, so that content cuts, cuts
 * at max and short tails all occur. */
static void fill_mixed(uint8_t *p, size_t n)
{
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (i / 8192) % 5 == 3 ? 0 : (uint8_t)(x >> 24);
    }
}

static void test_streaming_mixed(void **state)
{
    const size_t n = 1u << 20;
    uint8_t *p = malloc(n);
    assert_non_null(p);
    fill_mixed(p, n);

    struct fastcdc cdc;
    assert_int_equal(fastcdc_init(&cdc, 64, 256, 1024, 2), 0);
    assert_stream_matches(&cdc, p, n, 1, false);
    assert_stream_matches(&cdc, p, n, 7, true);
    assert_stream_matches(&cdc, p, n, 100, true);
    assert_int_equal(fastcdc_init(&cdc, 1000, 3000, 7001, 1), 0);
    assert_stream_matches(&cdc, p, n, 3, false);
    assert_stream_matches(&cdc, p, n, 333, true);
    /* A short input, so the final tail may fall below min. */
    assert_stream_matches(&cdc, p, 7001 + 999, 50, true);
    free(p);
}

static void test_cut_edges(void **state)
{
    struct fastcdc cdc;
    uint8_t zeros[4096] = {0};

    assert_int_equal(fastcdc_init(&cdc, 256, 1024, 2048, 1), 0);
    assert_int_equal(fastcdc_cut(&cdc, zeros, 0, true), 0);
    assert_int_equal(fastcdc_cut(&cdc, zeros, 100, true), 100);
    assert_int_equal(fastcdc_cut(&cdc, zeros, 256, true), 256);
    assert_int_equal(fastcdc_cut(&cdc, zeros, 256, false), 0);
    /* Zeros never match a mask: no cut before max unless the input ends. */
    assert_int_equal(fastcdc_cut(&cdc, zeros, 2047, false), 0);
    assert_int_equal(fastcdc_cut(&cdc, zeros, 2047, true), 2047);
    assert_int_equal(fastcdc_cut(&cdc, zeros, 2048, false), 2048);
    assert_int_equal(fastcdc_cut(&cdc, zeros, 4096, false), 2048);
    assert_int_equal(fastcdc_cut(&cdc, zeros, 4096, true), 2048);

    /* min == avg == max: every chunk is exactly max bytes (the last one
     * shorter); max bytes in hand are a chunk even before the end. */
    uint8_t rnd[4096];
    for (size_t i = 0; i < sizeof(rnd); i++)
        rnd[i] = (uint8_t)(i * 131 + (i >> 3) * 7);
    assert_int_equal(fastcdc_init(&cdc, 128, 128, 128, 0), 0);
    assert_int_equal(fastcdc_cut(&cdc, rnd, 127, false), 0);
    assert_int_equal(fastcdc_cut(&cdc, rnd, 128, false), 128);
    assert_int_equal(fastcdc_cut(&cdc, rnd, 129, false), 128);
    assert_int_equal(fastcdc_cut(&cdc, rnd, 4096, true), 128);
    assert_int_equal(fastcdc_cut(&cdc, rnd, 100, true), 100);
}

struct param_row {
    size_t min, avg, max;
    unsigned nc;
    int expect;
    unsigned bits_s, bits_l; /* mask indexes when valid */
};

static const uint64_t readme_masks[26] = {
    [5] = 0x0000000001804110,  [6] = 0x0000000001803110,  [7] = 0x0000000018035100,
    [8] = 0x0000001800035300,  [9] = 0x0000019000353000,  [10] = 0x0000590003530000,
    [11] = 0x0000d90003530000, [12] = 0x0000d90103530000, [13] = 0x0000d90303530000,
    [14] = 0x0000d90313530000, [15] = 0x0000d90f03530000, [16] = 0x0000d90303537000,
    [17] = 0x0000d90703537000, [18] = 0x0000d90707537000, [19] = 0x0000d91707537000,
    [20] = 0x0000d91747537000, [21] = 0x0000d91767537000, [22] = 0x0000d93767537000,
    [23] = 0x0000d93777537000, [24] = 0x0000d93777577000, [25] = 0x0000db3777577000,
};

static void test_params(void **state)
{
    static const struct param_row rows[] = {
        {4096, 16384, 65535, 1, 0, 15, 13},
        {4096, 16384, 65535, 0, 0, 14, 14},
        {64, 64, 64, 0, 0, 6, 6},
        {64, 64, 64, 1, 0, 7, 5},
        {64, 64, 64, 2, -EINVAL, 0, 0}, /* 6 - 2 < 5 */
        {4096, 16384, 65535, 9, 0, 23, 5},
        {4096, 16384, 65535, 10, -EINVAL, 0, 0},
        {4096, 23170, 65535, 0, 0, 14, 14}, /* 2^14.4999: rounds down */
        {4096, 23171, 65535, 0, 0, 15, 15}, /* 2^14.5000: rounds up */
        {1u << 20, 1u << 25, 1u << 26, 0, 0, 25, 25},
        {1u << 20, 1u << 25, 1u << 26, 1, -EINVAL, 0, 0}, /* 26 > 25 */
        {1u << 20, 1u << 26, 1u << 27, 0, -EINVAL, 0, 0},
        {1u << 20, 1u << 22, FASTCDC_MAX_SIZE, 1, 0, 23, 21},
        {1u << 20, 1u << 22, FASTCDC_MAX_SIZE + 1, 1, -EINVAL, 0, 0},
        {63, 1024, 4096, 1, -EINVAL, 0, 0}, /* min too small */
        {0, 1024, 4096, 1, -EINVAL, 0, 0},
        {2048, 1024, 4096, 1, -EINVAL, 0, 0}, /* min > avg */
        {1024, 8192, 4096, 1, -EINVAL, 0, 0}, /* avg > max */
    };

    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        struct fastcdc cdc;
        int got = fastcdc_init(&cdc, rows[r].min, rows[r].avg, rows[r].max, rows[r].nc);
        if (got != rows[r].expect)
            fail_msg("params row %zu: got %d, expected %d", r, got, rows[r].expect);
        if (got < 0)
            continue;
        assert_int_equal(cdc.mask_s, readme_masks[rows[r].bits_s]);
        assert_int_equal(cdc.mask_l, readme_masks[rows[r].bits_l]);
        assert_int_equal(cdc.mask_s_ls, readme_masks[rows[r].bits_s] << 1);
        assert_int_equal(cdc.mask_l_ls, readme_masks[rows[r].bits_l] << 1);
    }
}

/* GEAR[i]: first 8 bytes, big endian, of MD5 of 64 bytes equal to i. */
static uint64_t gear_md5(unsigned i)
{
    uint8_t in[64], d[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    memset(in, (int)i, sizeof(in));
    assert_int_equal(EVP_Digest(in, sizeof(in), d, &dlen, EVP_md5(), NULL), 1);
    assert_int_equal(dlen, 16);
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = v << 8 | d[k];
    return v;
}

static void test_gear_table(void **state)
{
    /* First entries as published with FastCDC 2020 implementations. */
    assert_int_equal(gear_md5(0), 0x3b5d3c7d207e37dcu);
    assert_int_equal(gear_md5(1), 0x784d68ba91123086u);
    assert_int_equal(gear_md5(2), 0xcd52880f882e7298u);
    for (unsigned i = 0; i < 256; i++)
        if (fastcdc_gear[i] != gear_md5(i))
            fail_msg("GEAR[%u] differs from MD5", i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_image_digest),
        cmocka_unit_test(test_golden_rows),
        cmocka_unit_test(test_row1_chunk_digests),
        cmocka_unit_test(test_streaming_image),
        cmocka_unit_test(test_streaming_mixed),
        cmocka_unit_test(test_cut_edges),
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_gear_table),
    };
    return cmocka_run_group_tests(tests, image_setup, image_teardown);
}
