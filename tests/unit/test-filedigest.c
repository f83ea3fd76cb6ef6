/*
 * test-filedigest.c — the chunk-tree file digest (engine/filedigest.c):
 * known answers computed independently with Python's hashlib (the
 * script is in each vector's comment), the batch boundary (more chunks
 * than one stack batch), what changes the digest (an id, a length, the
 * order) and the kind names.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <ckptsync/format.h>

#include "base/err.h"
#include "engine/filedigest.h"
#include "engine/hash.h"

/* python3 -c 'import hashlib; D = b"ckptsync chunk-tree 1\n"; ...' where
 * the digest is hashlib.sha256(D + b"".join(id + struct.pack("<Q", len)
 * for id, len in chunks)).hexdigest(). */
static void check_hex(const struct mchunk *v, size_t n, const char *want)
{
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    assert_int_equal(filedigest_tree(v, n, d), 0);
    hex_encode(d, HASH_LEN, hex);
    assert_string_equal(hex, want);
}

static void test_domain(void **state)
{
    (void)state;
    assert_string_equal(CKS_FILEDIGEST_TREE_DOMAIN, "ckptsync chunk-tree 1\n");
    assert_string_equal(CKS_MANIFEST_TREE_PREFIX, "tree:");
}

/* An empty file: hashlib.sha256(D).hexdigest() */
static void test_empty(void **state)
{
    (void)state;
    check_hex(NULL, 0, "ecf8d4055e2ff673879c6968eb92cb7c5fb9f135cbbccf2b7dc6db43932973ad");
}

/* ids bytes(range(32)), bytes(0xff - i for i in range(32)),
 * sha256(b"abc").digest(); lengths 1, 0x01020304, 4194304 (the
 * little-endian order of the length shows). */
static void test_three_chunks(void **state)
{
    (void)state;
    struct mchunk v[3] = {{.len = 1}, {.len = 0x01020304}, {.len = 4194304}};
    for (int i = 0; i < HASH_LEN; i++) {
        v[0].id[i] = (uint8_t)i;
        v[1].id[i] = (uint8_t)(0xff - i);
    }
    hash_sha256("abc", 3, v[2].id);
    check_hex(v, 3, "2b1432e0d2221898a8f56e1d726a1cd4ce5dc1af84e8894e9f474c454cdc5e14");
}

/* 100 chunks (past one batch of 64): id sha256(str(i).encode()), length
 * i + 1. */
static void test_many_chunks(void **state)
{
    (void)state;
    struct mchunk v[100];
    for (int i = 0; i < 100; i++) {
        char s[8];
        int n = snprintf(s, sizeof(s), "%d", i);
        hash_sha256(s, (size_t)n, v[i].id);
        v[i].len = (uint32_t)i + 1;
    }
    check_hex(v, 100, "6bde30516ea5db9a243196a3398448e8f78cc79cb3f343f63ca4ffd2c2c902ca");
}

/* Every leaf counts: another id, another length, two chunks swapped. */
static void test_sensitivity(void **state)
{
    (void)state;
    struct mchunk v[2] = {{.len = 10}, {.len = 20}}, w[2];
    uint8_t a[HASH_LEN], b[HASH_LEN];
    memset(v[0].id, 1, HASH_LEN);
    memset(v[1].id, 2, HASH_LEN);
    assert_int_equal(filedigest_tree(v, 2, a), 0);
    memcpy(w, v, sizeof(w));
    w[1].id[31] ^= 1;
    assert_int_equal(filedigest_tree(w, 2, b), 0);
    assert_memory_not_equal(a, b, HASH_LEN);
    memcpy(w, v, sizeof(w));
    w[1].len = 21;
    assert_int_equal(filedigest_tree(w, 2, b), 0);
    assert_memory_not_equal(a, b, HASH_LEN);
    w[0] = v[1];
    w[1] = v[0];
    assert_int_equal(filedigest_tree(w, 2, b), 0);
    assert_memory_not_equal(a, b, HASH_LEN);
    assert_int_equal(filedigest_tree(v, 1, b), 0); /* a prefix of the chunks */
    assert_memory_not_equal(a, b, HASH_LEN);
}

static void test_kind_names(void **state)
{
    (void)state;
    enum mdigest_kind k;
    assert_string_equal(filedigest_kind_name(MDIGEST_TREE), "tree");
    assert_string_equal(filedigest_kind_name(MDIGEST_SHA256), "sha256");
    assert_int_equal(filedigest_kind_parse("tree", &k), 0);
    assert_int_equal(k, MDIGEST_TREE);
    assert_int_equal(filedigest_kind_parse("sha256", &k), 0);
    assert_int_equal(k, MDIGEST_SHA256);
    assert_int_equal(filedigest_kind_parse("md5", &k), CKS_E_FORMAT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_domain),       cmocka_unit_test(test_empty),
        cmocka_unit_test(test_three_chunks), cmocka_unit_test(test_many_chunks),
        cmocka_unit_test(test_sensitivity),  cmocka_unit_test(test_kind_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
