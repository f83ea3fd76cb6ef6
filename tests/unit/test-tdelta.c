/*
 * test-tdelta.c — derived bf16 and XOR recipes (engine/tdelta.h): the
 * bf16 check against torch's own cast (tdelta_torch.py, with Debian's
 * /usr/bin/python3; skipped where torch is missing) and against casts that
 * are not a rounding (truncation, stochastic rounding); recipes round trip
 * bit for bit; a wrong, missing or resized base fails; hostile recipes
 * (every truncation, every byte flipped, a table of hand-made lies) fail
 * with a documented code and never overrun (the sanitizers watch); the
 * chunk object's version 3 header.
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

#include "base/err.h"
#include "engine/chunkobj.h"
#include "engine/tdelta.h"
#include "testutil.h"
#include <ckptsync/format.h>

/* format.h's DRAFT section says what tdelta.h implements. */
_Static_assert(CKS_CHUNK_VERSION_RECIPE == CHUNKOBJ_VERSION_RECIPE, "recipe version");
_Static_assert(CKS_CHUNK_CODEC_RECIPE == CHUNKOBJ_RECIPE, "recipe codec");
_Static_assert(CKS_RECIPE_VERSION == TDELTA_RECIPE_VERSION, "recipe payload version");
_Static_assert(CKS_RECIPE_MAX_BASES == TDELTA_MAX_BASES, "recipe bases");
_Static_assert(CKS_RECIPE_MAX_SEGS == TDELTA_MAX_SEGS, "recipe segments");

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return x;
}

static float normal(uint64_t *s)
{
    double sum = 0;
    for (int i = 0; i < 12; i++)
        sum += (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sum - 6.0);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void fill_fp32(uint8_t *p, size_t n, float scale, uint64_t seed)
{
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++)
        put32(p + 4 * i, fbits(normal(&s) * scale));
}

/* Each fp32 moved by a relative step of about 1e-3, as a training step
 * moves weights. */
static void perturb_fp32(const uint8_t *src, uint8_t *dst, size_t n, uint64_t seed)
{
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++)
        put32(dst + 4 * i, fbits(bitsf(get32(src + 4 * i)) * (1.0f + 1e-3f * normal(&s))));
}

/* bf16 by round to nearest even of n fp32. */
static void rne_ref(const uint8_t *f, size_t n, uint8_t *b)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = get32(f + 4 * i), r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16;
        b[2 * i] = (uint8_t)r;
        b[2 * i + 1] = (uint8_t)(r >> 8);
    }
}

/* ---- bf16 against torch ---- */

#define TORCH_N 100003 /* not a multiple of the block */

static uint8_t *slurp(const char *dir, const char *name, size_t want)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *p = malloc(want + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, want + 1, f), want);
    fclose(f);
    return p;
}

static void test_bf16_torch(void **state)
{
    (void)state;
    char dir[] = "/tmp/test-tdelta.XXXXXX", cmd[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s/tests/unit/tdelta_torch.py %s %d",
             CKS_SOURCE_DIR, dir, TORCH_N);
    int rc = system(cmd);
    if (rc != 0) {
        test_rm_rf(dir);
        /* 77: no torch here */
        if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
            skip();
        fail_msg("%s: exit %d", cmd, rc);
    }
    uint8_t *f = slurp(dir, "f32.bin", 4 * TORCH_N), *rne = slurp(dir, "rne.bin", 2 * TORCH_N);
    uint8_t *trunc = slurp(dir, "trunc.bin", 2 * TORCH_N), *sr = slurp(dir, "sr.bin", 2 * TORCH_N);
    uint8_t *clean = slurp(dir, "clean.bin", 4 * TORCH_N);
    uint8_t *crne = slurp(dir, "clean-rne.bin", 2 * TORCH_N);
    uint8_t *mine = malloc(2 * TORCH_N);
    uint16_t nan = 0;

    assert_true(tdelta_bf16_derivable(f, rne, TORCH_N, &nan));
    assert_int_equal(nan, 0xFFFF); /* torch 1.13's CPU cast */
    tdelta_bf16_derive(f, TORCH_N, nan, mine);
    assert_memory_equal(mine, rne, 2 * TORCH_N);
    assert_false(tdelta_bf16_derivable(f, trunc, TORCH_N, NULL));
    assert_false(tdelta_bf16_derivable(f, sr, TORCH_N, NULL));
    assert_true(tdelta_bf16_derivable(clean, crne, TORCH_N, &nan));
    assert_int_equal(nan, TDELTA_NAN_TORCH_CPU);
    /* one element off anywhere (here: the last, in the scalar tail, and
     * one inside a block) is not a derivation */
    rne[2 * TORCH_N - 2] ^= 1;
    assert_false(tdelta_bf16_derivable(f, rne, TORCH_N, NULL));
    rne[2 * TORCH_N - 2] ^= 1;
    rne[2 * 777] ^= 0x80;
    assert_false(tdelta_bf16_derivable(f, rne, TORCH_N, NULL));
    free(f), free(rne), free(trunc), free(sr), free(clean), free(crne), free(mine);
    test_rm_rf(dir);
}

/* ---- bf16 edges without torch ---- */

static void test_bf16_edges(void **state)
{
    (void)state;
    /* fp32 bits -> the RNE bf16 */
    static const uint32_t cases[][2] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000}, {0x7F800000, 0x7F80}, {0xFF800000, 0xFF80},
        {0x7F7FFFFF, 0x7F80}, {0x7F7F7FFF, 0x7F7F}, {0x7F7F8000, 0x7F80}, {0x3F808000, 0x3F80},
        {0x3F818000, 0x3F82}, {0x00008000, 0x0000}, {0x00018000, 0x0002}, {0x007FFFFF, 0x0080},
        {0x00000001, 0x0000}, {0x807FFFFF, 0x8080},
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    uint8_t f[4 * 16], b[2 * 16], d[2 * 16];
    for (size_t i = 0; i < n; i++) {
        put32(f + 4 * i, cases[i][0]);
        b[2 * i] = (uint8_t)cases[i][1];
        b[2 * i + 1] = (uint8_t)(cases[i][1] >> 8);
    }
    uint16_t nan = 0;
    assert_true(tdelta_bf16_derivable(f, b, n, &nan));
    tdelta_bf16_derive(f, n, nan, d);
    assert_memory_equal(d, b, 2 * n);
    assert_true(tdelta_bf16_derivable(f, b, 0, NULL));

    /* NaNs: all one value (any) derives; two values do not */
    put32(f, 0x7FC00001);
    put32(f + 4, 0xFFC00000);
    b[0] = 0xC0, b[1] = 0x7F, b[2] = 0xC0, b[3] = 0x7F;
    assert_true(tdelta_bf16_derivable(f, b, n, &nan));
    assert_int_equal(nan, 0x7FC0);
    b[2] = 0xFF, b[3] = 0xFF;
    assert_false(tdelta_bf16_derivable(f, b, n, NULL));
}

/* The same edges in a block-sized array, so the vectorized loop meets
 * them: NaN at a block's first and last element. */
static void test_bf16_blocks(void **state)
{
    (void)state;
    size_t n = 64 * 5 + 3;
    uint8_t *f = malloc(4 * n), *b = malloc(2 * n);
    fill_fp32(f, n, 0.02f, 3);
    put32(f + 4 * 64, 0x7FC00000);
    put32(f + 4 * 127, 0xFF800001);
    put32(f + 4 * (n - 1), 0x7F7FFFFF);
    tdelta_bf16_derive(f, n, 0x7FFF, b);
    uint16_t nan = 0;
    assert_true(tdelta_bf16_derivable(f, b, n, &nan));
    assert_int_equal(nan, 0x7FFF);
    b[2 * 127] = 0xC0;
    b[2 * 127 + 1] = 0x7F; /* a second NaN value, inside a block */
    assert_false(tdelta_bf16_derivable(f, b, n, NULL));
    free(f);
    free(b);
}

/* ---- recipes ---- */

/* A chunk made of text, bf16 derived from base A, fp32 close to a range
 * of base B, bf16 close to another range of B, and 3 odd bytes. */
struct fixture {
    uint8_t *a, *b, *raw;
    size_t alen, blen, len;
    struct tdelta_base bases[2];
    struct tdelta_seg plan[5];
    uint8_t id[HASH_LEN];
    struct buf obj;
};

#define A_N 6000  /* fp32 in A */
#define P_N 8000  /* fp32 in B */
#define Q_N 4000  /* bf16 in B */
#define TEXT 3000 /* text bytes */

static void fixture_make(struct fixture *x)
{
    x->alen = 4 * A_N;
    x->blen = 4 * P_N + 2 * Q_N;
    x->len = TEXT + 2 * 5000 + 4 * P_N + 2 * Q_N + 3;
    x->a = malloc(x->alen), x->b = malloc(x->blen), x->raw = malloc(x->len);
    fill_fp32(x->a, A_N, 0.02f, 11);
    fill_fp32(x->b, P_N, 0.05f, 12);
    uint8_t *tmp = malloc(4 * Q_N);
    fill_fp32(tmp, Q_N, 0.02f, 13);
    rne_ref(tmp, Q_N, x->b + 4 * P_N);
    uint8_t *p = x->raw;
    for (size_t i = 0; i < TEXT; i++)
        p[i] = (uint8_t)("step 10 loss 0.25\n"[i % 18]);
    p += TEXT;
    rne_ref(x->a + 4 * 1000, 5000, p);
    p += 2 * 5000;
    perturb_fp32(x->b, p, P_N, 14);
    p += 4 * P_N;
    perturb_fp32(tmp, tmp, Q_N, 15);
    rne_ref(tmp, Q_N, p);
    p += 2 * Q_N;
    memcpy(p, "xyz", 3);
    free(tmp);
    hash_sha256(x->a, x->alen, x->bases[0].id);
    x->bases[0].data = x->a, x->bases[0].len = x->alen;
    hash_sha256(x->b, x->blen, x->bases[1].id);
    x->bases[1].data = x->b, x->bases[1].len = x->blen;
    struct tdelta_seg plan[5] = {
        {TDELTA_LITERAL, TEXT, 0, 0, 0}, {TDELTA_BF16, 2 * 5000, 0, 4 * 1000, 2},
        {TDELTA_XOR, 4 * P_N, 1, 0, 4},  {TDELTA_XOR, 2 * Q_N, 1, 4 * P_N, 2},
        {TDELTA_LITERAL, 3, 0, 0, 0},
    };
    memcpy(x->plan, plan, sizeof(plan));
    hash_sha256(x->raw, x->len, x->id);
    x->obj = (struct buf)BUF_INIT;
}

static void fixture_free(struct fixture *x)
{
    free(x->a), free(x->b), free(x->raw);
    buf_free(&x->obj);
}

static void encode_fixture(struct fixture *x, bool exact, struct tdelta_stats *st)
{
    struct tdelta_opts o = {.level = 3, .exact = exact};
    assert_int_equal(tdelta_encode(NULL, x->raw, x->len, x->plan, 5, x->bases, 2, &o, &x->obj, st),
                     0);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (int mode = 0; mode < 3; mode++) {
        struct fixture x;
        struct tdelta_stats st;
        fixture_make(&x);
        struct tdelta_opts o = {.level = 3, .exact = mode == 1, .xor_only = mode == 2};
        assert_int_equal(tdelta_encode(NULL, x.raw, x.len, x.plan, 5, x.bases, 2, &o, &x.obj, &st),
                         0);
        if (mode == 2)
            assert_int_equal(st.bytes[TDELTA_SUB], 0);
        assert_true(st.recipe);
        assert_int_equal(st.bytes[TDELTA_BF16], 10000);
        /* the deltas went to XOR or SUB, whichever codes smaller */
        assert_int_equal(st.bytes[TDELTA_XOR] + st.bytes[TDELTA_SUB], 4 * P_N + 2 * Q_N);
        assert_int_equal(st.fell_back, 0);
        assert_int_equal(x.obj.data[4], CHUNKOBJ_VERSION_RECIPE);
        /* well below the bytes: the derived part costs 2 bytes */
        assert_true(x.obj.len < x.len * 3 / 4);

        struct tdelta_ref refs[TDELTA_MAX_BASES];
        size_t nref = 0;
        assert_int_equal(tdelta_refs(x.obj.data, x.obj.len, refs, TDELTA_MAX_BASES, &nref), 0);
        assert_int_equal(nref, 2);
        assert_memory_equal(refs[0].id, x.bases[0].id, HASH_LEN);
        assert_int_equal(refs[1].len, x.blen);
        assert_int_equal(tdelta_refs(x.obj.data, x.obj.len, refs, 1, &nref), CKS_E_LIMIT);

        /* bases in another order, with an extra one */
        struct tdelta_base rev[3] = {x.bases[1], x.bases[0], x.bases[1]};
        rev[2].id[0] ^= 1;
        struct buf out = BUF_INIT;
        assert_int_equal(tdelta_decode(NULL, x.obj.data, x.obj.len, x.id, x.len, rev, 3, &out), 0);
        assert_int_equal(out.len, x.len);
        assert_memory_equal(out.data, x.raw, x.len);
        assert_int_equal(tdelta_decode(NULL, x.obj.data, x.obj.len, x.id, x.len - 1, rev, 3, &out),
                         CKS_E_LIMIT);
        /* chunkobj alone cannot decode a recipe */
        enum chunkobj_codec codec;
        uint32_t raw_len;
        assert_int_equal(chunkobj_header(x.obj.data, x.obj.len, &codec, &raw_len), 0);
        assert_int_equal(codec, CHUNKOBJ_RECIPE);
        assert_int_equal(raw_len, x.len);
        assert_int_equal(chunkobj_decode(NULL, x.obj.data, x.obj.len, x.id, x.len, &out),
                         CKS_E_CODEC);
        assert_int_equal(out.len, 0);
        buf_free(&out);
        fixture_free(&x);
    }
}

/* A base with the right id but other bytes: the id check catches it; a
 * missing base, a base of another length: named errors. */
static void test_wrong_base(void **state)
{
    (void)state;
    struct fixture x;
    fixture_make(&x);
    encode_fixture(&x, false, NULL);
    struct buf out = BUF_INIT;
    struct tdelta_base bad[2] = {x.bases[0], x.bases[1]};
    uint8_t *b2 = malloc(x.blen);
    memcpy(b2, x.b, x.blen);
    b2[100] ^= 0x10; /* inside the XOR range of the fp32 part */
    bad[1].data = b2;
    assert_int_equal(tdelta_decode(NULL, x.obj.data, x.obj.len, x.id, x.len, bad, 2, &out),
                     CKS_E_DIGEST);
    assert_int_equal(out.len, 0);
    /* the parent's own bytes of a different step: also the id check */
    perturb_fp32(x.b, b2, P_N, 99);
    assert_int_equal(tdelta_decode(NULL, x.obj.data, x.obj.len, x.id, x.len, bad, 2, &out),
                     CKS_E_DIGEST);
    assert_int_equal(tdelta_decode(NULL, x.obj.data, x.obj.len, x.id, x.len, x.bases, 1, &out),
                     -ENOENT);
    bad[1].data = x.b;
    bad[1].len = x.blen - 1;
    assert_int_equal(tdelta_decode(NULL, x.obj.data, x.obj.len, x.id, x.len, bad, 2, &out),
                     CKS_E_FORMAT);
    free(b2);
    buf_free(&out);
    fixture_free(&x);
}

/* bf16 that is not derived, XOR against noise: written as literals; with
 * no base kept, the plain object. */
static void test_fallback(void **state)
{
    (void)state;
    struct fixture x;
    fixture_make(&x);
    x.raw[TEXT + 2 * 17] ^= 1; /* one bf16 off its rounding */
    for (size_t i = 0; i < 4 * P_N; i++)
        x.raw[TEXT + 10000 + i] = (uint8_t)(i * 2654435761u >> 13);
    hash_sha256(x.raw, x.len, x.id);
    struct tdelta_stats st;
    struct tdelta_seg plan4[4] = {
        x.plan[0], x.plan[1], x.plan[2], {TDELTA_LITERAL, 2 * Q_N + 3, 0, 0, 0}};
    struct tdelta_opts o = {.level = 3, .exact = true};
    assert_int_equal(tdelta_encode(NULL, x.raw, x.len, plan4, 4, x.bases, 2, &o, &x.obj, &st), 0);
    assert_false(st.recipe);
    assert_int_equal(st.fell_back, 2);
    assert_int_equal(x.obj.data[4], CHUNKOBJ_VERSION); /* a plain object */
    struct buf out = BUF_INIT;
    assert_int_equal(tdelta_decode(NULL, x.obj.data, x.obj.len, x.id, x.len, NULL, 0, &out), 0);
    assert_memory_equal(out.data, x.raw, x.len);
    buf_free(&out);
    fixture_free(&x);
}

/* One base dropped (its BF16 segment fell back), the other kept: the
 * recipe names only the kept one. */
static void test_one_base_dropped(void **state)
{
    (void)state;
    struct fixture x;
    fixture_make(&x);
    x.raw[TEXT + 2 * 4000] ^= 1;
    hash_sha256(x.raw, x.len, x.id);
    struct tdelta_stats st;
    struct tdelta_scratch sc = TDELTA_SCRATCH_INIT;
    struct tdelta_opts o = {.level = 3, .scratch = &sc};
    for (int pass = 0; pass < 2; pass++) { /* the scratch, fresh and reused */
        assert_int_equal(tdelta_encode(NULL, x.raw, x.len, x.plan, 5, x.bases, 2, &o, &x.obj, &st),
                         0);
        assert_true(st.recipe);
        assert_int_equal(st.fell_back, 1);
        struct tdelta_ref refs[TDELTA_MAX_BASES];
        size_t n = 0;
        assert_int_equal(tdelta_refs(x.obj.data, x.obj.len, refs, TDELTA_MAX_BASES, &n), 0);
        assert_int_equal(n, 1);
        assert_memory_equal(refs[0].id, x.bases[1].id, HASH_LEN);
        struct buf out = BUF_INIT;
        assert_int_equal(
            tdelta_decode(NULL, x.obj.data, x.obj.len, x.id, x.len, &x.bases[1], 1, &out), 0);
        assert_memory_equal(out.data, x.raw, x.len);
        buf_free(&out);
    }
    tdelta_scratch_free(&sc);
    fixture_free(&x);
}

static void test_bad_plan(void **state)
{
    (void)state;
    struct fixture x;
    fixture_make(&x);
    struct tdelta_opts o = {.level = 3};
    struct tdelta_seg p[5];
    memcpy(p, x.plan, sizeof(p));
    p[4].len = 4; /* sums past len */
    assert_int_equal(tdelta_encode(NULL, x.raw, x.len, p, 5, x.bases, 2, &o, &x.obj, NULL),
                     -EINVAL);
    memcpy(p, x.plan, sizeof(p));
    p[2].off = 8004; /* range past base B */
    assert_int_equal(tdelta_encode(NULL, x.raw, x.len, p, 5, x.bases, 2, &o, &x.obj, NULL),
                     -EINVAL);
    memcpy(p, x.plan, sizeof(p));
    p[1].base = 2;
    assert_int_equal(tdelta_encode(NULL, x.raw, x.len, p, 5, x.bases, 2, &o, &x.obj, NULL),
                     -EINVAL);
    memcpy(p, x.plan, sizeof(p));
    p[3].kind = 7;
    assert_int_equal(tdelta_encode(NULL, x.raw, x.len, p, 5, x.bases, 2, &o, &x.obj, NULL),
                     -EINVAL);
    fixture_free(&x);
}

/* ---- hostile recipes ---- */

static bool documented(int r)
{
    return r == CKS_E_FORMAT || r == CKS_E_VERSION || r == CKS_E_CODEC || r == CKS_E_LIMIT ||
           r == CKS_E_DIGEST || r == -ENOENT;
}

static int decode_with(struct fixture *x, const uint8_t *obj, size_t len)
{
    struct buf out = BUF_INIT;
    int r = tdelta_decode(NULL, obj, len, x->id, x->len, x->bases, 2, &out);
    if (r < 0)
        assert_int_equal(out.len, 0);
    else
        assert_memory_equal(out.data, x->raw, x->len);
    buf_free(&out);
    return r;
}

static void test_truncations_flips(void **state)
{
    (void)state;
    struct fixture x;
    fixture_make(&x);
    encode_fixture(&x, false, NULL);
    uint8_t *copy = malloc(x.obj.len);
    /* every truncation */
    for (size_t n = 0; n < x.obj.len; n++) {
        memcpy(copy, x.obj.data, n);
        int r = decode_with(&x, copy, n);
        assert_true(documented(r));
    }
    /* every byte of the table and the start of the payload, flipped */
    size_t table = CHUNKOBJ_HEADER_LEN + TDELTA_HEAD + 2 * TDELTA_BASE_REC + 5 * TDELTA_SEG_REC;
    for (size_t i = 0; i < table + 64; i++) {
        memcpy(copy, x.obj.data, x.obj.len);
        copy[i] ^= 0xA5;
        int r = decode_with(&x, copy, x.obj.len);
        /* 0: a byte the payload's codec ignores; decode_with checked
         * that the result is the chunk */
        if (r != 0 && !documented(r))
            fail_msg("byte %zu flipped: %d", i, r);
    }
    free(copy);
    fixture_free(&x);
}

/* Byte offsets in the fixture's recipe. */
#define R0 CHUNKOBJ_HEADER_LEN
#define BREC(b) (R0 + TDELTA_HEAD + TDELTA_BASE_REC * (b))
#define SREC(i) (BREC(2) + TDELTA_SEG_REC * (i))

static void test_hostile(void **state)
{
    (void)state;
    struct fixture x;
    fixture_make(&x);
    encode_fixture(&x, false, NULL);
    struct {
        size_t at;
        uint32_t v;
        unsigned width; /* 1 or 4 bytes */
        int want;
    } lies[] = {
        {R0, 2, 1, CKS_E_FORMAT},                          /* recipe version */
        {R0 + 1, 17, 1, CKS_E_FORMAT},                     /* too many bases */
        {R0 + 2, 1, 1, CKS_E_FORMAT},                      /* reserved */
        {R0 + 4, TDELTA_MAX_SEGS + 1, 4, CKS_E_FORMAT},    /* too many segments */
        {R0 + 4, 4, 4, CKS_E_FORMAT},                      /* segments not summing */
        {R0 + 4, 0xFFFFFFFF, 4, CKS_E_FORMAT},             /* a table past the object */
        {BREC(1) + HASH_LEN, 0xFFFFFFF0, 4, CKS_E_FORMAT}, /* base above the max */
        {BREC(1) + HASH_LEN, 100, 4, CKS_E_FORMAT},        /* ranges past the base */
        {SREC(0), 3, 1, CKS_E_FORMAT},                     /* unknown kind */
        {SREC(0) + 1, 3, 1, CKS_E_FORMAT},                 /* a recipe inside a literal */
        {SREC(0) + 2, 1, 1, CKS_E_FORMAT},                 /* a literal naming a base */
        {SREC(0) + 3, 1, 1, CKS_E_FORMAT},                 /* reserved */
        {SREC(0) + 4, 0, 4, CKS_E_FORMAT},                 /* an empty segment */
        {SREC(0) + 4, 0xFFFFFFFF, 4, CKS_E_FORMAT},        /* outs past the length */
        {SREC(0) + 12, 0xFFFFFFFF, 4, CKS_E_FORMAT},       /* plen past the object */
        {SREC(1) + 2, 2, 1, CKS_E_FORMAT},                 /* base index past B */
        {SREC(1) + 2, 1, 1, CKS_E_FORMAT},                 /* base 0 named by none */
        {SREC(1) + 4, 9999, 4, CKS_E_FORMAT},              /* odd bf16 */
        {SREC(1) + 8, 4 * A_N - 2, 4, CKS_E_FORMAT},       /* bf16 range past A */
        {SREC(1) + 12, 3, 4, CKS_E_FORMAT},                /* bf16 payload not 2 */
        {SREC(1) + 1, 1, 1, CKS_E_FORMAT},                 /* bf16 with a codec */
        {SREC(2) + 8, 0xFFFFFFF0, 4, CKS_E_FORMAT},        /* off wraps */
        {SREC(2) + 1, 4, 1, CKS_E_FORMAT},                 /* unknown codec */
        {SREC(2) + 2, 0, 1, CKS_E_FORMAT},                 /* XOR on A: past its end */
        {SREC(2) + 8, 4, 4, CKS_E_DIGEST},                 /* off by 4: decodes, wrong */
        {SREC(0) + 1, 0, 1, CKS_E_CODEC},                  /* zstd read as raw */
        {4, 2, 1, CKS_E_CODEC},                            /* version 2, codec 3 */
        {4, 4, 1, CKS_E_VERSION},                          /* version 4 */
        {5, 0, 1, CKS_E_CODEC},                            /* version 3, codec 0 */
    };
    uint8_t *copy = malloc(x.obj.len);
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); i++) {
        memcpy(copy, x.obj.data, x.obj.len);
        if (lies[i].width == 1)
            copy[lies[i].at] = (uint8_t)lies[i].v;
        else
            put32(copy + lies[i].at, lies[i].v);
        int r = decode_with(&x, copy, x.obj.len);
        if (r != lies[i].want)
            fail_msg("lie %zu (at %zu = %u): got %d, want %d", i, lies[i].at, lies[i].v, r,
                     lies[i].want);
    }
    /* a byte appended */
    uint8_t *longer = malloc(x.obj.len + 1);
    memcpy(longer, x.obj.data, x.obj.len);
    longer[x.obj.len] = 0;
    assert_int_equal(decode_with(&x, longer, x.obj.len + 1), CKS_E_FORMAT);
    free(longer);
    free(copy);
    fixture_free(&x);
}

/* SUB against a scalar model, widths 2 and 4, lengths around the block;
 * unsub inverts it, also in place. */
static void test_sub(void **state)
{
    (void)state;
    uint8_t c[1024], p[1024], r[1024], back[1024];
    uint64_t s = 5;
    for (size_t i = 0; i < sizeof(c); i++) {
        c[i] = (uint8_t)rng_next(&s);
        p[i] = i % 7 ? c[i] : (uint8_t)(c[i] + 1);
    }
    for (unsigned w = 2; w <= 4; w += 2)
        for (size_t len = 0; len <= 200; len += w) {
            tdelta_sub(c, p, len, w, r);
            for (size_t i = 0; i < len; i += w) {
                uint32_t a = w == 4 ? get32(c + i) : (uint32_t)(c[i] | c[i + 1] << 8);
                uint32_t b = w == 4 ? get32(p + i) : (uint32_t)(p[i] | p[i + 1] << 8);
                uint32_t z = w == 4 ? get32(r + i) : (uint32_t)(r[i] | r[i + 1] << 8);
                int64_t d = w == 4 ? (int64_t)(int32_t)(a - b) : (int64_t)(int16_t)(a - b);
                assert_int_equal(z, (uint32_t)(d >= 0 ? 2 * d : -2 * d - 1));
            }
            tdelta_unsub(r, p, len, w, back);
            assert_memory_equal(back, c, len);
            tdelta_unsub(r, p, len, w, r);
            assert_memory_equal(r, c, len);
        }
}

/* A recipe written by hand from tdelta.h's table (not by the encoder):
 * raw literal, BF16 with NaN 0x7FC0, XOR raw, SUB raw of width 4. */
static void test_spec(void **state)
{
    (void)state;
    enum { N = 64 };
    uint8_t base[4 * N], chunk[5 + 2 * N + 4 * N + 4 * N], obj[512 + sizeof(chunk)];
    fill_fp32(base, N, 0.02f, 21);
    put32(base + 8, 0x7FC00001); /* a NaN */
    uint8_t *c = chunk;
    memcpy(c, "hello", 5);
    rne_ref(base, N, c + 5);
    c[5 + 4] = 0xC0, c[5 + 5] = 0x7F;
    perturb_fp32(base, c + 5 + 2 * N, N, 22);
    perturb_fp32(base, c + 5 + 6 * N, N, 23);
    uint8_t id[HASH_LEN];
    hash_sha256(chunk, sizeof(chunk), id);

    uint8_t *o = obj;
    memcpy(o, "CKC1\x03\x03\x00\x00", 8);
    put32(o + 8, sizeof(chunk));
    o += 12;
    o[0] = 1, o[1] = 1, o[2] = o[3] = 0;
    put32(o + 4, 4);
    hash_sha256(base, sizeof(base), o + 8);
    put32(o + 8 + HASH_LEN, sizeof(base));
    o += 8 + 36;
    /* kind, codec, base, width, out, off, plen */
    const uint32_t rec[4][7] = {
        {0, 0, 0, 0, 5, 0, 5},
        {1, 0, 0, 0, 2 * N, 0, 2},
        {2, 0, 0, 0, 4 * N, 0, 4 * N},
        {3, 0, 0, 4, 4 * N, 0, 4 * N},
    };
    for (int i = 0; i < 4; i++, o += 16) {
        for (int k = 0; k < 4; k++)
            o[k] = (uint8_t)rec[i][k];
        put32(o + 4, rec[i][4]);
        put32(o + 8, rec[i][5]);
        put32(o + 12, rec[i][6]);
    }
    memcpy(o, "hello", 5);
    o[5] = 0xC0, o[6] = 0x7F;
    o += 7;
    for (size_t i = 0; i < 4 * N; i++)
        o[i] = chunk[5 + 2 * N + i] ^ base[i];
    o += 4 * N;
    for (size_t i = 0; i < 4 * N; i += 4) {
        uint32_t d = get32(chunk + 5 + 6 * N + i) - get32(base + i);
        put32(o + i, d << 1 ^ (0u - (d >> 31)));
    }
    o += 4 * N;

    struct tdelta_base b = {.data = base, .len = sizeof(base)};
    hash_sha256(base, sizeof(base), b.id);
    struct buf out = BUF_INIT;
    assert_int_equal(tdelta_decode(NULL, obj, (size_t)(o - obj), id, sizeof(chunk), &b, 1, &out),
                     0);
    assert_memory_equal(out.data, chunk, sizeof(chunk));
    buf_free(&out);
}

/* tdelta_decode of a plain object is chunkobj_decode. */
/* The writer's check against the bytes it hashed: the same decode, a
 * comparison instead of the id; a wrong base or other bytes fail as the
 * id check does, a plain object or another length is no recipe of them. */
static void test_decode_same(void **state)
{
    (void)state;
    struct fixture x;
    fixture_make(&x);
    encode_fixture(&x, false, NULL);
    struct buf out = BUF_INIT;
    assert_int_equal(
        tdelta_decode_same(NULL, x.obj.data, x.obj.len, x.raw, x.len, x.bases, 2, &out), 0);
    assert_int_equal(out.len, x.len);
    assert_memory_equal(out.data, x.raw, x.len);
    uint8_t *other = malloc(x.len);
    memcpy(other, x.raw, x.len);
    other[x.len / 2] ^= 1;
    assert_int_equal(
        tdelta_decode_same(NULL, x.obj.data, x.obj.len, other, x.len, x.bases, 2, &out),
        CKS_E_DIGEST);
    assert_int_equal(out.len, 0);
    struct tdelta_base bad[2] = {x.bases[0], x.bases[1]};
    uint8_t *b2 = malloc(x.blen);
    memcpy(b2, x.b, x.blen);
    b2[100] ^= 0x10; /* inside the XOR range of the fp32 part */
    bad[1].data = b2;
    assert_int_equal(tdelta_decode_same(NULL, x.obj.data, x.obj.len, x.raw, x.len, bad, 2, &out),
                     CKS_E_DIGEST);
    assert_int_equal(
        tdelta_decode_same(NULL, x.obj.data, x.obj.len, x.raw, x.len - 1, x.bases, 2, &out),
        CKS_E_FORMAT);
    assert_int_equal(
        tdelta_decode_same(NULL, x.obj.data, x.obj.len, x.raw, x.len, x.bases, 1, &out), -ENOENT);
    struct chunkobj_opts o = {.level = 3};
    struct buf plain = BUF_INIT;
    assert_int_equal(chunkobj_encode(NULL, x.raw, x.len, &o, &plain, NULL), 0);
    assert_int_equal(tdelta_decode_same(NULL, plain.data, plain.len, x.raw, x.len, NULL, 0, &out),
                     CKS_E_FORMAT);
    free(other);
    free(b2);
    buf_free(&plain);
    buf_free(&out);
    fixture_free(&x);
}

static void test_plain(void **state)
{
    (void)state;
    uint8_t raw[5000], id[HASH_LEN];
    for (size_t i = 0; i < sizeof(raw); i++)
        raw[i] = (uint8_t)(i % 251);
    hash_sha256(raw, sizeof(raw), id);
    struct chunkobj_opts o = {.level = 3};
    struct buf obj = BUF_INIT, out = BUF_INIT;
    assert_int_equal(chunkobj_encode(NULL, raw, sizeof(raw), &o, &obj, NULL), 0);
    assert_int_equal(tdelta_decode(NULL, obj.data, obj.len, id, sizeof(raw), NULL, 0, &out), 0);
    assert_memory_equal(out.data, raw, sizeof(raw));
    size_t n = 9;
    struct tdelta_ref refs[1];
    assert_int_equal(tdelta_refs(obj.data, obj.len, refs, 1, &n), 0);
    assert_int_equal(n, 0);
    buf_free(&obj);
    buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_torch),  cmocka_unit_test(test_bf16_edges),
        cmocka_unit_test(test_bf16_blocks), cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_wrong_base),  cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_bad_plan),    cmocka_unit_test(test_truncations_flips),
        cmocka_unit_test(test_hostile),     cmocka_unit_test(test_plain),
        cmocka_unit_test(test_sub),         cmocka_unit_test(test_one_base_dropped),
        cmocka_unit_test(test_spec),        cmocka_unit_test(test_decode_same),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
