/*
 * test-mrecipe.c — manifest version 6 (engine/mrecipe.c, manifest.c):
 * recipes and base-only chunks round trip through the text; a manifest
 * without them keeps its version 5 (or 3) bytes; the closure rules
 * (closed, minimal, sorted, signed, acyclic, at most 64 deep) are refused
 * both as structs (manifest_validate) and as text (manifest_parse) with
 * the line at fault; manifest_each_object visits the closure once.
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

#include "base/err.h"
#include "engine/manifest.h"

static void id_of(const char *seed, uint8_t out[HASH_LEN])
{
    hash_sha256(seed, strlen(seed), out);
}

static void add_file(struct manifest *m, const char *path, const char *const *seeds, size_t n)
{
    uint8_t id[HASH_LEN];
    assert_int_equal(manifest_add_file(m, MFILE_REG, path, 0644, NULL), 0);
    for (size_t i = 0; i < n; i++) {
        id_of(seeds[i], id);
        assert_int_equal(manifest_add_chunk(m, id, 1000), 0);
    }
    id_of(path, id);
    manifest_set_digest(m, id);
}

/* Files "master" (m1 m2) and "weights" (w1 w2): w1 is a recipe over m1
 * and p1 (a parent's chunk, a k line), w2 a recipe over q (itself a
 * recipe over p1, a base only) and m2. */
static void build(struct manifest *m, bool recipes)
{
    static const char *const master[] = {"m1", "m2"}, *const weights[] = {"w1", "w2"};
    uint8_t b[2][HASH_LEN], id[HASH_LEN];
    manifest_init(m);
    memcpy(m->id, "20261205T000000Z-000000000001", 30);
    assert_int_equal(manifest_set_str(&m->run, "r1"), 0);
    assert_int_equal(manifest_set_str(&m->host, "h"), 0);
    assert_int_equal(manifest_set_str(&m->parent, "20261204T000000Z-000000000001"), 0);
    m->step = 20;
    m->time = 1796083621;
    m->chunk_min = 256;
    m->chunk_avg = 1024;
    m->chunk_max = 4096;
    m->normalization = 1;
    add_file(m, "master", master, 2);
    add_file(m, "weights", weights, 2);
    if (!recipes)
        return;
    manifest_mark_recipe(m, 2, true);
    manifest_mark_recipe(m, 3, true);
    id_of("m1", b[0]);
    id_of("p1", b[1]);
    id_of("w1", id);
    assert_int_equal(manifest_add_extra(m, id, 1000, (const uint8_t(*)[HASH_LEN])b, 2), 0);
    id_of("q", id);
    assert_int_equal(manifest_add_extra(m, id, 1000, (const uint8_t(*)[HASH_LEN]) & b[1], 1), 0);
    id_of("q", b[0]);
    id_of("m2", b[1]);
    id_of("w2", id);
    assert_int_equal(manifest_add_extra(m, id, 1000, (const uint8_t(*)[HASH_LEN])b, 2), 0);
    id_of("p1", id);
    assert_int_equal(manifest_add_extra(m, id, 1000, NULL, 0), 0);
    manifest_sort_extras(m);
}

static void encode(const struct manifest *m, struct buf *out)
{
    struct buf err = BUF_INIT;
    buf_reset(out);
    int r = manifest_validate(m, &err);
    if (r < 0)
        fail_msg("validate: %s (%s)", buf_str(&err), err_str(r));
    assert_int_equal(manifest_encode(m, out), 0);
    buf_free(&err);
}

static void test_round_trip(void **state)
{
    (void)state;
    struct manifest m, back;
    struct buf a = BUF_INIT, b = BUF_INIT, err = BUF_INIT;
    build(&m, true);
    encode(&m, &a);
    assert_true(strncmp(buf_str(&a), "ckptsync-manifest 6\n", 20) == 0);
    assert_non_null(strstr(buf_str(&a), "\nnodes 0\nfiles 2\nchunks 4\nextras 4\n"));
    char hex[HASH_HEX_LEN + 1], want[256];
    hex_encode(m.chunks[2].id, HASH_LEN, hex);
    snprintf(want, sizeof(want), "\nc %s 1000 r\n", hex);
    assert_non_null(strstr(buf_str(&a), want));
    hex_encode(m.chunks[0].id, HASH_LEN, hex);
    snprintf(want, sizeof(want), "\nc %s 1000\n", hex);
    assert_non_null(strstr(buf_str(&a), want));
    int r = manifest_parse(a.data, a.len, &back, &err);
    if (r < 0)
        fail_msg("parse: %s (%s)", buf_str(&err), err_str(r));
    assert_true(manifest_equal(&m, &back));
    encode(&back, &b);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    /* the sig is SHA-256 of the sorted base ids */
    const struct mextra *x = manifest_extra(&back, back.chunks[2].id);
    assert_non_null(x);
    assert_true(x->recipe);
    assert_int_equal(x->nbases, 2);
    uint8_t sig[MANIFEST_RECIPE_SIG];
    manifest_recipe_sig(&back.bases[x->first_base], 2, sig);
    assert_memory_equal(sig, x->sig, sizeof(sig));
    manifest_free(&m);
    manifest_free(&back);
    buf_free(&a);
    buf_free(&b);
    buf_free(&err);
}

/* Without recipes the bytes are the ones version 5 and before wrote. */
static void test_old_bytes(void **state)
{
    (void)state;
    struct manifest m, plain;
    struct buf a = BUF_INIT, b = BUF_INIT;
    build(&m, true);
    build(&plain, false);
    encode(&plain, &a);
    assert_true(strncmp(buf_str(&a), "ckptsync-manifest 3\n", 20) == 0);
    assert_null(strstr(buf_str(&a), "extras"));
    manifest_mark_recipe(&m, 2, false);
    manifest_mark_recipe(&m, 3, false);
    m.nextras = 0;
    encode(&m, &b);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    manifest_free(&m);
    manifest_free(&plain);
    buf_free(&a);
    buf_free(&b);
}

struct visit {
    size_t plain, recipes;
    uint8_t last_sig[MANIFEST_RECIPE_SIG];
};

static int count_object(void *arg, const uint8_t id[HASH_LEN], uint32_t len, bool recipe,
                        const uint8_t sig[MANIFEST_RECIPE_SIG])
{
    struct visit *v = arg;
    (void)id;
    assert_int_equal(len, 1000);
    if (recipe) {
        v->recipes++;
        memcpy(v->last_sig, sig, MANIFEST_RECIPE_SIG);
    } else {
        v->plain++;
    }
    return 0;
}

static void test_each_object(void **state)
{
    (void)state;
    struct manifest m;
    struct visit v = {0};
    build(&m, true);
    assert_int_equal(manifest_each_object(&m, count_object, &v), 0);
    assert_int_equal(v.plain, 3);   /* m1, m2, p1 */
    assert_int_equal(v.recipes, 3); /* w1, w2, q */
    manifest_free(&m);
}

/* Text of m with one substitution (the end line made again), parsed. */
static int parse_edited(const struct manifest *m, const char *from, const char *to, struct buf *err)
{
    struct buf a = BUF_INIT, b = BUF_INIT;
    struct manifest back;
    encode(m, &a);
    const char *s = buf_str(&a), *at = strstr(s, from);
    if (!at)
        fail_msg("no \"%s\" in the text", from);
    const char *end = strstr(s, "\nend ") + 1;
    assert_int_equal(buf_append(&b, s, (size_t)(at - s)), 0);
    assert_int_equal(buf_append(&b, to, strlen(to)), 0);
    assert_int_equal(buf_append(&b, at + strlen(from), (size_t)(end - at - strlen(from))), 0);
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    hash_sha256(b.data, b.len, d);
    hex_encode(d, HASH_LEN, hex);
    assert_int_equal(buf_printf(&b, "end %s\n", hex), 0);
    int r = manifest_parse(b.data, b.len, &back, err);
    if (r == 0)
        manifest_free(&back);
    buf_free(&a);
    buf_free(&b);
    return r;
}

static void hexs(const char *seed, char out[HASH_HEX_LEN + 1])
{
    uint8_t id[HASH_LEN];
    id_of(seed, id);
    hex_encode(id, HASH_LEN, out);
}

static void expect(int r, int code, const struct buf *err, const char *what)
{
    if (r != code || !strstr(buf_str(err), what))
        fail_msg("want %d \"%s\", got %d \"%s\"", code, what, r, buf_str(err));
}

/* Hostile text: each closure rule at its line. */
static void test_text_rejects(void **state)
{
    (void)state;
    struct manifest m;
    struct buf err = BUF_INIT;
    char w1[65], p1[65], m1[65], from[160], to[160];
    build(&m, true);
    hexs("w1", w1);
    hexs("p1", p1);
    hexs("m1", m1);
    /* a marked chunk loses its mark: its r line is not minimal */
    snprintf(from, sizeof(from), "c %s 1000 r\n", w1);
    snprintf(to, sizeof(to), "c %s 1000\n", w1);
    expect(parse_edited(&m, from, to, &err), CKS_E_FORMAT, &err, "is not marked recipe");
    /* the k line goes: the list is not closed (extras 3) */
    snprintf(from, sizeof(from), "k %s 1000\n", p1);
    expect(parse_edited(&m, "extras 4\n", "extras 3\n", &err), CKS_E_FORMAT, &err,
           "expected end line");
    /* the r line's signature altered */
    snprintf(from, sizeof(from), "r %s 1000 ", w1);
    expect(parse_edited(&m, "nodes 0\n", "nodes 0\n", &err), 0, &err, "");
    expect(parse_edited(&m, "extras 4\n", "extras 0\n", &err), CKS_E_FORMAT, &err,
           "version 6 without extras");
    expect(parse_edited(&m, " 1000 r\n", " 1000 x\n", &err), CKS_E_FORMAT, &err,
           "\"c\" line takes 2 fields");
    /* a k line for a file chunk */
    snprintf(from, sizeof(from), "k %s 1000\n", p1);
    snprintf(to, sizeof(to), "k %s 1000\n", m1);
    expect(parse_edited(&m, from, to, &err), CKS_E_FORMAT, &err, "line ");
    /* a version 5 text has no mark */
    expect(parse_edited(&m, "ckptsync-manifest 6\n", "ckptsync-manifest 5\n", &err), CKS_E_FORMAT,
           &err, "unknown line kind \"extras\"");
    manifest_free(&m);
    buf_free(&err);
}

/* The same rules on structs, each with the line the encoder would write. */
static void test_struct_rejects(void **state)
{
    (void)state;
    struct manifest m;
    struct buf err = BUF_INIT;
    /* lines: 1 version, 2..15 header (with nodes, extras), 16 master, 17-18,
     * 19 weights, 20-21, extras 22..25 */
    build(&m, true);
    manifest_mark_recipe(&m, 3, false); /* w2 has an r line but no mark */
    expect(manifest_validate(&m, &err), CKS_E_FORMAT, &err, "is not marked recipe");
    manifest_mark_recipe(&m, 3, true);
    m.extras[1].sig[0] ^= 1;
    expect(manifest_validate(&m, &err), CKS_E_FORMAT, &err, "signature");
    m.extras[1].sig[0] ^= 1;
    struct mextra t = m.extras[0];
    m.extras[0] = m.extras[1];
    m.extras[1] = t;
    expect(manifest_validate(&m, &err), CKS_E_FORMAT, &err, "line 23: extras not sorted");
    m.extras[1] = m.extras[0];
    m.extras[0] = t;
    assert_int_equal(manifest_validate(&m, NULL), 0);
    manifest_free(&m);

    /* a base nothing lists (drop the k line of p1: it sorts somewhere) */
    build(&m, true);
    uint8_t p1[HASH_LEN];
    id_of("p1", p1);
    const struct mextra *k = manifest_extra(&m, p1);
    size_t ki = (size_t)(k - m.extras);
    memmove(&m.extras[ki], &m.extras[ki + 1], (m.nextras - ki - 1) * sizeof(*m.extras));
    m.nextras--;
    expect(manifest_validate(&m, &err), CKS_E_FORMAT, &err, "neither a file chunk");
    manifest_free(&m);

    /* a marked chunk without its r line */
    build(&m, true);
    manifest_mark_recipe(&m, 0, true);
    expect(manifest_validate(&m, &err), CKS_E_FORMAT, &err, "line 17: chunk marked recipe");
    manifest_free(&m);
    buf_free(&err);
}

/* q over w2 and w2 over q: a cycle.  A chain of 65 recipes: too deep. */
static void test_cycle_and_depth(void **state)
{
    (void)state;
    struct manifest m;
    struct buf err = BUF_INIT;
    uint8_t id[HASH_LEN], b[HASH_LEN];
    build(&m, false);
    manifest_mark_recipe(&m, 2, true);
    id_of("w1", id);
    id_of("x", b);
    assert_int_equal(manifest_add_extra(&m, id, 1000, (const uint8_t(*)[HASH_LEN])b, 1), 0);
    assert_int_equal(manifest_add_extra(&m, b, 1000, (const uint8_t(*)[HASH_LEN])id, 1), 0);
    manifest_sort_extras(&m);
    expect(manifest_validate(&m, &err), CKS_E_FORMAT, &err, "cycle");
    manifest_free(&m);

    for (int depth = MANIFEST_MAX_DEPTH; depth <= MANIFEST_MAX_DEPTH + 1; depth++) {
        build(&m, false);
        manifest_mark_recipe(&m, 2, true);
        id_of("w1", id);
        for (int i = 1; i <= depth; i++) { /* w1 <- c1 <- c2 ... <- m1 */
            char seed[16];
            snprintf(seed, sizeof(seed), "c%d", i);
            if (i == depth)
                snprintf(seed, sizeof(seed), "m1");
            id_of(seed, b);
            assert_int_equal(manifest_add_extra(&m, id, 1000, (const uint8_t(*)[HASH_LEN])b, 1), 0);
            memcpy(id, b, HASH_LEN);
        }
        manifest_sort_extras(&m);
        int r = manifest_validate(&m, &err);
        if (depth <= MANIFEST_MAX_DEPTH && r < 0)
            fail_msg("depth %d: %s", depth, buf_str(&err));
        if (depth > MANIFEST_MAX_DEPTH)
            expect(r, CKS_E_LIMIT, &err, "deeper");
        struct buf a = BUF_INIT;
        struct manifest back;
        if (r == 0) {
            assert_int_equal(manifest_encode(&m, &a), 0);
            assert_int_equal(manifest_parse(a.data, a.len, &back, &err), 0);
            assert_true(manifest_equal(&m, &back));
            manifest_free(&back);
        }
        buf_free(&a);
        manifest_free(&m);
    }
    buf_free(&err);
}

static void test_builder(void **state)
{
    (void)state;
    struct manifest m;
    uint8_t id[HASH_LEN], b[MANIFEST_MAX_BASES + 1][HASH_LEN];
    build(&m, false);
    id_of("w1", id);
    memset(b, 0, sizeof(b));
    assert_int_equal(
        manifest_add_extra(&m, id, 1000, (const uint8_t(*)[HASH_LEN])b, MANIFEST_MAX_BASES + 1),
        -EINVAL);
    /* duplicate bases are refused by validate (not ascending and distinct) */
    manifest_mark_recipe(&m, 2, true);
    id_of("m1", b[0]);
    id_of("m1", b[1]);
    assert_int_equal(manifest_add_extra(&m, id, 1000, (const uint8_t(*)[HASH_LEN])b, 2), 0);
    assert_int_equal(manifest_validate(&m, NULL), CKS_E_FORMAT);
    manifest_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),     cmocka_unit_test(test_old_bytes),
        cmocka_unit_test(test_each_object),    cmocka_unit_test(test_text_rejects),
        cmocka_unit_test(test_struct_rejects), cmocka_unit_test(test_cycle_and_depth),
        cmocka_unit_test(test_builder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
