/*
 * test-hash.c — SHA-256 known answers, incremental == one-shot, and the
 * hex helpers (round trip, both cases accepted, bad digits rejected).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/hash.h"

struct vector {
    const char *input;
    const char *sha256;
};

static const struct vector vectors[] = {
    {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
    {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
    {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
};

static void digest_hex(const uint8_t d[HASH_LEN], char hex[HASH_HEX_LEN + 1])
{
    hex_encode(d, HASH_LEN, hex);
}

static void test_known_vectors(void **state)
{
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        uint8_t d[HASH_LEN];
        char hex[HASH_HEX_LEN + 1];
        size_t len = strlen(vectors[i].input);

        hash_sha256(vectors[i].input, len, d);
        digest_hex(d, hex);
        assert_string_equal(hex, vectors[i].sha256);

        assert_int_equal(hash_digest(vectors[i].input, len, d), 0);
        digest_hex(d, hex);
        assert_string_equal(hex, vectors[i].sha256);

        struct hash h;
        assert_int_equal(hash_init(&h), 0);
        hash_update(&h, vectors[i].input, len);
        hash_final(&h, d);
        hash_free(&h);
        digest_hex(d, hex);
        assert_string_equal(hex, vectors[i].sha256);
    }
}

/* Feeding the same bytes in pieces of any size gives the one-shot digest,
 * and one context can be reset and reused. */
static void test_incremental(void **state)
{
    enum { N = 100003 };
    static const size_t steps[] = {1, 3, 63, 64, 65, 4096, N};
    uint8_t *data = malloc(N);
    assert_non_null(data);
    for (size_t i = 0; i < N; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);

    uint8_t want[HASH_LEN];
    hash_sha256(data, N, want);

    struct hash h;
    assert_int_equal(hash_init(&h), 0);
    for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
        uint8_t got[HASH_LEN];
        hash_reset(&h);
        for (size_t off = 0; off < N; off += steps[s])
            hash_update(&h, data + off, steps[s] < N - off ? steps[s] : N - off);
        hash_update(&h, data, 0);
        hash_final(&h, got);
        assert_memory_equal(got, want, HASH_LEN);
    }
    hash_free(&h);
    hash_free(&h); /* idempotent */
    free(data);
}

static void test_hex_round_trip(void **state)
{
    uint8_t in[256], back[256];
    char hex[2 * sizeof(in) + 1];
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)i;

    hex_encode(in, sizeof(in), hex);
    assert_int_equal(strlen(hex), 2 * sizeof(in));
    assert_memory_equal(hex, "000102", 6);
    assert_memory_equal(hex + 2 * 0xfa, "fafbfcfdfeff", 12);
    assert_int_equal(hex_decode(hex, sizeof(in), back), 0);
    assert_memory_equal(in, back, sizeof(in));

    hex_encode(in, 0, hex);
    assert_string_equal(hex, "");

    uint8_t up[3];
    assert_int_equal(hex_decode("aBcDeF", 3, up), 0);
    assert_int_equal(up[0], 0xab);
    assert_int_equal(up[1], 0xcd);
    assert_int_equal(up[2], 0xef);
}

static void test_hex_rejects(void **state)
{
    /* clang-format off */
    static const char *const bad[] = {
        "0g", "g0", " 0", "0 ", "-1", "+1", "0x", "x0", ":0", "@0", "`0", "/0", "G0",
        "\3770", /* 0xff, '0' */
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t out[1];
        if (hex_decode(bad[i], 1, out) != CKS_E_FORMAT)
            fail_msg("hex_decode accepted \"%s\"", bad[i]);
    }
    /* A string shorter than 2*len stops at its NUL, without reading on. */
    uint8_t out[4];
    char *shortstr = strdup("abc");
    assert_non_null(shortstr);
    assert_int_equal(hex_decode(shortstr, 4, out), CKS_E_FORMAT);
    assert_int_equal(hex_decode(shortstr, 2, out), CKS_E_FORMAT);
    free(shortstr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_vectors),
        cmocka_unit_test(test_incremental),
        cmocka_unit_test(test_hex_round_trip),
        cmocka_unit_test(test_hex_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
