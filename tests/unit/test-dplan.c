/*
 * test-dplan.c — the derived-bf16 planner (engine/dplan.h): plans cover
 * the chunk exactly, in order; what they derive round trips bit for bit
 * through tdelta_encode/tdelta_decode with the bases they name, whatever
 * the chunk's and the base file's cuts (elements split on either side are
 * literal); a refused base, more than TDELTA_MAX_BASES bases, a pair that
 * is not a rounding, and bad input.  Delta pairs (xw 4): XOR segments of
 * whole elements against the base, cut at its chunks, round trip.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"
#include "base/err.h"
#include "engine/chunkobj.h"
#include "engine/dplan.h"
#include "engine/tdelta.h"

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* A base file of nf fp32 values (at byte 64 of it) cut at random into
 * chunks of avg bytes or so, and a chunk file holding their bf16 rounding
 * at byte 100 (header bytes before and after). */
struct fx {
    uint8_t *base, *file;
    size_t base_len, file_len, nf;
    struct dplan_cut *cuts;
    size_t ncuts;
    struct dplan_pair pair;
};

static void fx_make(struct fx *x, size_t nf, size_t avg, uint64_t seed)
{
    x->nf = nf;
    x->base_len = 64 + 4 * nf + 37;
    x->file_len = 100 + 2 * nf + 51;
    x->base = malloc(x->base_len);
    x->file = malloc(x->file_len);
    x->cuts = calloc(x->base_len, sizeof(*x->cuts));
    assert_non_null(x->base);
    assert_non_null(x->file);
    assert_non_null(x->cuts);
    for (size_t i = 0; i < x->base_len; i++)
        x->base[i] = (uint8_t)rng_next(&seed);
    for (size_t i = 0; i < x->file_len; i++)
        x->file[i] = (uint8_t)rng_next(&seed);
    for (size_t i = 0; i < nf; i++) { /* finite floats near 1 */
        uint32_t u = 0x3f800000u | (uint32_t)(rng_next(&seed) & 0x7fffff);
        memcpy(x->base + 64 + 4 * i, &u, 4);
    }
    tdelta_bf16_derive(x->base + 64, nf, TDELTA_NAN_TORCH_CPU, x->file + 100);
    x->ncuts = 0;
    for (size_t off = 0; off < x->base_len;) {
        size_t len = 1 + rng_next(&seed) % (2 * avg);
        if (len > x->base_len - off)
            len = x->base_len - off;
        struct dplan_cut *c = &x->cuts[x->ncuts++];
        c->off = off;
        c->len = (uint32_t)len;
        hash_sha256(x->base + off, len, c->id);
        off += len;
    }
    x->pair =
        (struct dplan_pair){.b16 = 100, .f32 = 64, .n = nf, .cuts = x->cuts, .ncuts = x->ncuts};
}

static void fx_free(struct fx *x)
{
    free(x->base);
    free(x->file);
    free(x->cuts);
}

/* The plan of file bytes [off, off + len) covers them in order, and
 * encodes and decodes back to them; returns the bytes derived. */
static size_t round_trip(const struct fx *x, uint64_t off, uint32_t len, dplan_usable_fn usable,
                         void *ud, bool *ret_recipe)
{
    struct dplan p = DPLAN_INIT;
    struct chunkobj_ctx z = {0};
    struct buf obj = BUF_INIT, out = BUF_INIT;
    struct tdelta_base b[TDELTA_MAX_BASES];
    struct tdelta_opts o = {.level = 3};
    struct tdelta_stats st;
    uint8_t id[HASH_LEN];
    assert_int_equal(dplan_chunk(&p, off, len, &x->pair, 1, usable, ud), 0);
    uint64_t sum = 0;
    for (size_t i = 0; i < p.nseg; i++) {
        assert_true(p.seg[i].len >= 1);
        if (i)
            assert_false(p.seg[i].kind == TDELTA_LITERAL && p.seg[i - 1].kind == TDELTA_LITERAL);
        sum += p.seg[i].len;
    }
    assert_int_equal(sum, len);
    for (size_t k = 0; k < p.nbase; k++) {
        memcpy(b[k].id, p.base[k].cut->id, HASH_LEN);
        b[k].data = x->base + p.base[k].cut->off;
        b[k].len = p.base[k].cut->len;
        for (size_t j = 0; j < k; j++)
            assert_memory_not_equal(b[j].id, b[k].id, HASH_LEN);
    }
    hash_sha256(x->file + off, len, id);
    assert_int_equal(
        tdelta_encode(&z, x->file + off, len, p.seg, p.nseg, b, p.nbase, &o, &obj, &st), 0);
    assert_int_equal(st.fell_back, 0); /* every proposal was a true rounding */
    assert_int_equal(st.bytes[TDELTA_BF16], p.derived);
    assert_int_equal(tdelta_decode(&z, obj.data, obj.len, id, len, b, p.nbase, &out), 0);
    assert_int_equal(out.len, len);
    assert_memory_equal(out.data, x->file + off, len);
    *ret_recipe = st.recipe;
    size_t derived = p.derived;
    buf_free(&obj);
    buf_free(&out);
    chunkobj_ctx_free(&z);
    dplan_free(&p);
    return derived;
}

/* Chunks cut anywhere, base cut anywhere: round trips, and nearly every
 * byte of the tensor derives. */
static void test_random_cuts(void **state)
{
    (void)state;
    uint64_t seed = 0x9e3779b97f4a7c15u;
    for (int trial = 0; trial < 40; trial++) {
        struct fx x;
        fx_make(&x, 4096 + rng_next(&seed) % 8192, 1024 + rng_next(&seed) % 8192, seed + trial);
        size_t derived = 0;
        for (uint64_t off = 0; off < x.file_len;) {
            uint32_t len = (uint32_t)(1 + rng_next(&seed) % 4000);
            if (len > x.file_len - off)
                len = (uint32_t)(x.file_len - off);
            bool recipe;
            derived += round_trip(&x, off, len, NULL, NULL, &recipe);
            off += len;
        }
        /* lost: an element per chunk cut and per base cut, and bases
         * past the 16 a chunk may name */
        assert_true(derived <= 2 * x.nf);
        assert_true(derived >= 2 * x.nf / 2);
        fx_free(&x);
    }
}

/* One chunk, one base chunk holding the whole fp32 range: all derives. */
static void test_whole(void **state)
{
    (void)state;
    struct fx x;
    fx_make(&x, 1000, 1u << 20, 7);
    bool recipe;
    assert_int_equal(round_trip(&x, 0, (uint32_t)x.file_len, NULL, NULL, &recipe), 2000);
    assert_true(recipe);
    /* starting inside an element: its second byte is literal */
    assert_int_equal(round_trip(&x, 101, 999, NULL, NULL, &recipe), 998);
    fx_free(&x);
}

static bool refuse_all(void *ud, const struct dplan_cut *c)
{
    (void)c;
    ++*(int *)ud;
    return false;
}

/* A refused base: literal, and no recipe; outside every pair: nothing. */
static void test_refused(void **state)
{
    (void)state;
    struct fx x;
    fx_make(&x, 1000, 256, 11);
    int asked = 0;
    bool recipe = true;
    assert_int_equal(round_trip(&x, 0, (uint32_t)x.file_len, refuse_all, &asked, &recipe), 0);
    assert_false(recipe);
    assert_true(asked > 0);
    assert_int_equal(round_trip(&x, 0, 100, NULL, NULL, &recipe), 0);
    assert_false(recipe);
    assert_false(dplan_overlaps_b16(&x.pair, 1, 0, 100));
    assert_true(dplan_overlaps_b16(&x.pair, 1, 0, 101));
    assert_true(dplan_overlaps_b16(&x.pair, 1, 2099, 1));
    assert_false(dplan_overlaps_b16(&x.pair, 1, 2100, 5));
    fx_free(&x);
}

/* Base chunks of 64 bytes: a chunk of 1000 elements spans about 63 of
 * them, and names 16 at most. */
static void test_many_bases(void **state)
{
    (void)state;
    struct fx x;
    fx_make(&x, 1000, 32, 13);
    struct dplan p = DPLAN_INIT;
    assert_int_equal(dplan_chunk(&p, 100, 2000, &x.pair, 1, NULL, NULL), 0);
    assert_int_equal(p.nbase, TDELTA_MAX_BASES);
    assert_true(p.derived > 0 && p.derived < 2000);
    dplan_free(&p);
    bool recipe;
    round_trip(&x, 100, 2000, NULL, NULL, &recipe);
    assert_true(recipe);
    fx_free(&x);
}

/* A pair that is not a rounding: tdelta_encode writes it literal. */
static void test_not_rounding(void **state)
{
    (void)state;
    struct fx x;
    fx_make(&x, 1000, 1u << 20, 17);
    for (size_t i = 0; i < 1000; i++) /* truncation instead */
        memcpy(x.file + 100 + 2 * i, x.base + 64 + 4 * i + 2, 2);
    struct dplan p = DPLAN_INIT;
    struct chunkobj_ctx z = {0};
    struct buf obj = BUF_INIT;
    struct tdelta_stats st;
    struct tdelta_opts o = {.level = 3};
    assert_int_equal(dplan_chunk(&p, 0, (uint32_t)x.file_len, &x.pair, 1, NULL, NULL), 0);
    struct tdelta_base b = {.data = x.base + p.base[0].cut->off, .len = p.base[0].cut->len};
    memcpy(b.id, p.base[0].cut->id, HASH_LEN);
    assert_int_equal(
        tdelta_encode(&z, x.file, x.file_len, p.seg, p.nseg, &b, p.nbase, &o, &obj, &st), 0);
    assert_false(st.recipe);
    assert_int_equal(st.fell_back, 1);
    buf_free(&obj);
    chunkobj_ctx_free(&z);
    dplan_free(&p);
    fx_free(&x);
}

static void test_bad(void **state)
{
    (void)state;
    struct dplan p = DPLAN_INIT;
    struct dplan_cut cut = {.off = 0, .len = 400};
    struct dplan_pair two[2] = {{.b16 = 0, .f32 = 0, .n = 50, .cuts = &cut, .ncuts = 1},
                                {.b16 = 99, .f32 = 200, .n = 10, .cuts = &cut, .ncuts = 1}};
    assert_int_equal(dplan_chunk(&p, 0, 0, two, 1, NULL, NULL), -EINVAL);
    assert_int_equal(dplan_chunk(&p, 0, 200, two, 2, NULL, NULL), -EINVAL);
    two[1].b16 = 100; /* adjacent: fine */
    assert_int_equal(dplan_chunk(&p, 0, 200, two, 2, NULL, NULL), 0);
    assert_int_equal(p.nseg, 3);
    assert_int_equal(p.nbase, 1);
    assert_int_equal(p.derived, 120);
    /* the fp32 range past the base file's last cut: literal */
    two[1].f32 = 390;
    assert_int_equal(dplan_chunk(&p, 0, 200, two, 2, NULL, NULL), 0);
    assert_int_equal(p.derived, 104);
    dplan_free(&p);
}

/* A delta pair: n fp32 values at byte 100 of the chunk's file, each the
 * base's (at byte 64) moved by a few ulps; windows cut anywhere plan XOR
 * segments of whole elements (split ones literal), and round trip. */
static void test_xor(void **state)
{
    (void)state;
    struct fx x;
    uint64_t seed = 5;
    fx_make(&x, 3000, 2048, 13); /* about 3 base chunks: all usable */
    free(x.file);
    x.file_len = 100 + 4 * x.nf + 9;
    x.file = malloc(x.file_len);
    assert_non_null(x.file);
    for (size_t i = 0; i < x.file_len; i++)
        x.file[i] = (uint8_t)rng_next(&seed);
    for (size_t i = 0; i < x.nf; i++) {
        uint32_t u;
        memcpy(&u, x.base + 64 + 4 * i, 4);
        u += (uint32_t)(rng_next(&seed) % 64) - 32;
        memcpy(x.file + 100 + 4 * i, &u, 4);
    }
    x.pair.xw = 4;
    for (int t = 0; t < 40; t++) {
        uint64_t off = rng_next(&seed) % x.file_len;
        uint32_t len = (uint32_t)(1 + rng_next(&seed) % (x.file_len - off));
        struct dplan p = DPLAN_INIT;
        struct chunkobj_ctx z = {0};
        struct buf obj = BUF_INIT, out = BUF_INIT;
        struct tdelta_base b[TDELTA_MAX_BASES];
        struct tdelta_opts o = {.level = 3};
        uint8_t id[HASH_LEN];
        assert_int_equal(dplan_chunk(&p, off, len, &x.pair, 1, NULL, NULL), 0);
        uint64_t sum = 0;
        for (size_t i = 0; i < p.nseg; i++) {
            sum += p.seg[i].len;
            if (p.seg[i].kind == TDELTA_XOR)
                assert_int_equal(p.seg[i].len % 4, 0);
            else
                assert_int_equal(p.seg[i].kind, TDELTA_LITERAL);
        }
        assert_int_equal(sum, len);
        for (size_t k = 0; k < p.nbase; k++) {
            memcpy(b[k].id, p.base[k].cut->id, HASH_LEN);
            b[k].data = x.base + p.base[k].cut->off;
            b[k].len = p.base[k].cut->len;
        }
        hash_sha256(x.file + off, len, id);
        assert_int_equal(
            tdelta_encode(&z, x.file + off, len, p.seg, p.nseg, b, p.nbase, &o, &obj, NULL), 0);
        assert_int_equal(tdelta_decode(&z, obj.data, obj.len, id, len, b, p.nbase, &out), 0);
        assert_memory_equal(out.data, x.file + off, len);
        buf_free(&obj);
        buf_free(&out);
        chunkobj_ctx_free(&z);
        dplan_free(&p);
    }
    struct dplan p = DPLAN_INIT;
    assert_int_equal(dplan_chunk(&p, 0, (uint32_t)x.file_len, &x.pair, 1, NULL, NULL), 0);
    assert_true(p.derived > 4 * x.nf * 9 / 10); /* a few elements split by base cuts */
    assert_true(dplan_overlaps_b16(&x.pair, 1, 100 + 4 * x.nf - 1, 1));
    assert_false(dplan_overlaps_b16(&x.pair, 1, 100 + 4 * x.nf, 5));
    x.pair.xw = 3;
    assert_int_equal(dplan_chunk(&p, 0, 100, &x.pair, 1, NULL, NULL), -EINVAL);
    dplan_free(&p);
    fx_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_cuts),  cmocka_unit_test(test_whole),
        cmocka_unit_test(test_refused),      cmocka_unit_test(test_many_bases),
        cmocka_unit_test(test_not_rounding), cmocka_unit_test(test_bad),
        cmocka_unit_test(test_xor),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
