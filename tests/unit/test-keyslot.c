/*
 * test-keyslot.c — key slots: round trips of both kinds, the text written,
 * wrong secrets, every truncation and single-bit flip refused (and flips
 * whose `end` line is recomputed, which only the AAD can catch), strict
 * spelling, and the scrypt bounds a hostile slot runs into.  Small N keeps
 * it fast; one round trip uses the default parameters.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/hash.h"
#include "engine/keyslot.h"

static const uint8_t pass[] = "correct horse battery staple";
#define PASS_LEN (sizeof(pass) - 1)

static void sample_master(uint8_t master[CRYPT_KEY_LEN])
{
    for (size_t i = 0; i < CRYPT_KEY_LEN; i++)
        master[i] = (uint8_t)(0x5a ^ i);
}

/* Replaces the end line of a slot text with a correct digest. */
static void redigest(struct buf *b)
{
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    uint8_t *e = memmem(b->data, b->len, "\nend ", 5);
    assert_non_null(e);
    b->len = (size_t)(e - b->data) + 1;
    hash_sha256(b->data, b->len, d);
    hex_encode(d, HASH_LEN, hex);
    assert_int_equal(buf_printf(b, "end %s\n", hex), 0);
}

/* Completes a slot text whose first lines are in b with a well-formed
 * wrapped field and a correct end line (the wrapped bytes do not unwrap). */
static void forge(struct buf *b)
{
    buf_puts(b, "wrapped ");
    for (int i = 0; i < KEYSLOT_WRAPPED_LEN; i++)
        buf_puts(b, "ab");
    buf_puts(b, "\nend x\n");
    redigest(b);
}

static const char salt_line[] =
    "salt 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";

static void test_passphrase_roundtrip(void **state)
{
    uint8_t master[CRYPT_KEY_LEN], back[CRYPT_KEY_LEN];
    struct buf b = BUF_INIT, b2 = BUF_INIT;
    struct keyslot s;
    (void)state;

    sample_master(master);
    assert_int_equal(keyslot_wrap_passphrase(master, pass, PASS_LEN, 1024, 8, 1, &b), 0);
    assert_true(b.len < KEYSLOT_MAX_BYTES);
    assert_memory_equal(b.data, "ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 8 1\nsalt ", 56);
    assert_null(memmem(b.data, b.len, "horse", 5));
    assert_int_equal(keyslot_parse(b.data, b.len, &s), 0);
    assert_int_equal(s.kind, KEYSLOT_PASSPHRASE);
    assert_int_equal(s.n, 1024);
    assert_int_equal(s.r, 8);
    assert_int_equal(s.p, 1);
    memset(back, 0, sizeof(back));
    assert_int_equal(keyslot_unwrap(&s, pass, PASS_LEN, back), 0);
    assert_memory_equal(back, master, CRYPT_KEY_LEN);
    /* wrong passphrase, or one byte short */
    memset(back, 0, sizeof(back));
    assert_int_equal(
        keyslot_unwrap(&s, (const uint8_t *)"Correct horse battery staple", PASS_LEN, back),
        CKS_E_AUTH);
    assert_int_equal(keyslot_unwrap(&s, pass, PASS_LEN - 1, back), CKS_E_AUTH);
    static const uint8_t zero[CRYPT_KEY_LEN];
    assert_memory_equal(back, zero, CRYPT_KEY_LEN); /* untouched on failure */
    assert_int_equal(keyslot_unwrap(&s, pass, 0, back), -EINVAL);
    /* a second slot for the same master: other salt, same master inside */
    assert_int_equal(keyslot_wrap_passphrase(master, pass, PASS_LEN, 1024, 8, 1, &b2), 0);
    assert_memory_not_equal(b.data, b2.data, b.len);
    assert_int_equal(keyslot_parse(b2.data, b2.len, &s), 0);
    assert_int_equal(keyslot_unwrap(&s, pass, PASS_LEN, back), 0);
    assert_memory_equal(back, master, CRYPT_KEY_LEN);
    buf_free(&b);
    buf_free(&b2);
}

static void test_default_parameters(void **state)
{
    uint8_t master[CRYPT_KEY_LEN], back[CRYPT_KEY_LEN];
    struct buf b = BUF_INIT;
    struct keyslot s;
    (void)state;

    sample_master(master);
    assert_int_equal(keyslot_wrap_passphrase(master, pass, PASS_LEN, KEYSLOT_SCRYPT_N,
                                             KEYSLOT_SCRYPT_R, KEYSLOT_SCRYPT_P, &b),
                     0);
    assert_int_equal(keyslot_parse(b.data, b.len, &s), 0);
    assert_int_equal(s.n, 32768);
    assert_int_equal(keyslot_unwrap(&s, pass, PASS_LEN, back), 0);
    assert_memory_equal(back, master, CRYPT_KEY_LEN);
    buf_free(&b);
}

static void test_keyfile_roundtrip(void **state)
{
    uint8_t master[CRYPT_KEY_LEN], key[CRYPT_KEY_LEN], back[CRYPT_KEY_LEN];
    struct buf b = BUF_INIT;
    struct keyslot s;
    (void)state;

    sample_master(master);
    memset(key, 0x77, sizeof(key));
    assert_int_equal(keyslot_wrap_keyfile(master, key, &b), 0);
    assert_memory_equal(b.data, "ckptsync-key 1\nkind keyfile\nkdf hkdf\nsalt ", 42);
    assert_int_equal(keyslot_parse(b.data, b.len, &s), 0);
    assert_int_equal(s.kind, KEYSLOT_KEYFILE);
    assert_int_equal(keyslot_unwrap(&s, key, CRYPT_KEY_LEN, back), 0);
    assert_memory_equal(back, master, CRYPT_KEY_LEN);
    key[31] ^= 0x80;
    assert_int_equal(keyslot_unwrap(&s, key, CRYPT_KEY_LEN, back), CKS_E_AUTH);
    assert_int_equal(keyslot_unwrap(&s, key, CRYPT_KEY_LEN - 1, back), -EINVAL);
    /* a key-file slot does not open with a passphrase's kind swapped in */
    s.kind = KEYSLOT_PASSPHRASE;
    s.n = 16;
    s.r = s.p = 1;
    key[31] ^= 0x80;
    assert_int_equal(keyslot_unwrap(&s, key, CRYPT_KEY_LEN, back), CKS_E_AUTH);
    buf_free(&b);
}

/* Every truncation and every single-bit flip fails to parse or to unwrap;
 * so does every flip once its end line is recomputed (the AAD binds kind,
 * kdf and salt, GCM the wrapped bytes). */
static void test_tamper(void **state)
{
    uint8_t master[CRYPT_KEY_LEN], back[CRYPT_KEY_LEN], key[CRYPT_KEY_LEN];
    struct buf b = BUF_INIT, t = BUF_INIT;
    struct keyslot s;
    (void)state;

    sample_master(master);
    memset(key, 0x33, sizeof(key));
    for (int kind = 0; kind < 2; kind++) {
        const uint8_t *secret = kind ? key : pass;
        size_t slen = kind ? CRYPT_KEY_LEN : PASS_LEN, reached = 0;
        if (kind)
            assert_int_equal(keyslot_wrap_keyfile(master, key, &b), 0);
        else
            assert_int_equal(keyslot_wrap_passphrase(master, pass, PASS_LEN, 16, 1, 1, &b), 0);
        for (size_t n = 0; n < b.len; n++)
            assert_true(keyslot_parse(b.data, n, &s) < 0);
        size_t body = (size_t)((uint8_t *)memmem(b.data, b.len, "\nend ", 5) - b.data) + 1;
        for (size_t i = 0; i < b.len; i++)
            for (int bit = 0; bit < 8; bit++) {
                buf_reset(&t);
                buf_append(&t, b.data, b.len);
                t.data[i] ^= (uint8_t)(1u << bit);
                int r = keyslot_parse(t.data, t.len, &s);
                if (r == 0)
                    assert_true(keyslot_unwrap(&s, secret, slen, back) < 0);
                if (i + 1 >= body)
                    continue;
                redigest(&t);
                r = keyslot_parse(t.data, t.len, &s);
                if (r == 0) {
                    r = keyslot_unwrap(&s, secret, slen, back);
                    assert_true(r == CKS_E_AUTH || r == -EINVAL);
                    reached++;
                }
            }
        /* flips of salt, wrapped and kdf digits that still parse: the AAD
         * or the tag must catch them */
        assert_true(reached > 4 * (KEYSLOT_SALT_LEN + KEYSLOT_WRAPPED_LEN));
        assert_int_equal(keyslot_parse(b.data, b.len, &s), 0);
        assert_int_equal(keyslot_unwrap(&s, secret, slen, back), 0);
        assert_memory_equal(back, master, CRYPT_KEY_LEN);
    }
    buf_free(&b);
    buf_free(&t);
}

static void test_strict(void **state)
{
    static const struct {
        const char *head;
        int want;
    } rows[] = {
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 8 1\n", 0},
        {"ckptsync-key 2\nkind passphrase\nkdf scrypt 1024 8 1\n", CKS_E_VERSION},
        {"ckptsync-key 01\nkind passphrase\nkdf scrypt 1024 8 1\n", CKS_E_VERSION},
        {"ckptsync-key 1\nkind tpm\nkdf tpm2\n", CKS_E_VERSION},
        {"ckptsync-key 1\nkind Passphrase\nkdf scrypt 1024 8 1\n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 01024 8 1\n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 8 1 \n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024  8 1\n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt +1024 8 1\n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 8\n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind passphrase\nkdf hkdf\n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind keyfile\nkdf scrypt 1024 8 1\n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind keyfile\nkdf hkdf\n", 0},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 99999999999999999999999 8 1\n", CKS_E_FORMAT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 4294967296 1\n", CKS_E_FORMAT},
        /* bounds: a hostile slot never reaches scrypt */
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 2097152 1 1\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1048576 8 1\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1048576 2 1\n", 0},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1048576 2 4\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1048576 32 16\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1000 8 1\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1 8 1\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 0 8 1\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 0 1\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 33 1\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 8 17\n", CKS_E_LIMIT},
        {"ckptsync-key 1\nkind passphrase\nkdf scrypt 1024 8 0\n", CKS_E_LIMIT},
    };
    struct buf b = BUF_INIT;
    struct keyslot s;
    (void)state;

    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        buf_reset(&b);
        buf_puts(&b, rows[i].head);
        buf_puts(&b, salt_line);
        forge(&b);
        int r = keyslot_parse(b.data, b.len, &s);
        if (r != rows[i].want)
            fail_msg("row %zu (%s): %d, want %d", i, rows[i].head, r, rows[i].want);
    }
    /* upper-case hex, a short salt, trailing bytes, a bad digest, a NUL */
    static const char head[] = "ckptsync-key 1\nkind keyfile\nkdf hkdf\n";
    buf_reset(&b);
    buf_puts(&b, head);
    buf_puts(&b, "salt 00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeeff\n");
    forge(&b);
    assert_int_equal(keyslot_parse(b.data, b.len, &s), CKS_E_FORMAT);
    buf_reset(&b);
    buf_puts(&b, head);
    buf_puts(&b, "salt 00112233\n");
    forge(&b);
    assert_int_equal(keyslot_parse(b.data, b.len, &s), CKS_E_FORMAT);
    buf_reset(&b);
    buf_puts(&b, head);
    buf_puts(&b, salt_line);
    forge(&b);
    assert_int_equal(keyslot_parse(b.data, b.len, &s), 0);
    buf_puts(&b, "\n");
    assert_int_equal(keyslot_parse(b.data, b.len, &s), CKS_E_FORMAT);
    b.len--;
    b.data[b.len - 2] ^= 1; /* last hex digit of the end line */
    assert_int_equal(keyslot_parse(b.data, b.len, &s), CKS_E_DIGEST);
    b.data[5] = 0;
    assert_int_equal(keyslot_parse(b.data, b.len, &s), CKS_E_FORMAT);
    assert_int_equal(keyslot_parse(NULL, 0, &s), CKS_E_FORMAT);
    buf_free(&b);
}

static void test_wrap_bounds(void **state)
{
    uint8_t master[CRYPT_KEY_LEN], back[CRYPT_KEY_LEN];
    struct buf b = BUF_INIT;
    (void)state;

    sample_master(master);
    buf_puts(&b, "stale");
    assert_int_equal(keyslot_wrap_passphrase(master, pass, PASS_LEN, 1u << 21, 1, 1, &b),
                     CKS_E_LIMIT);
    assert_int_equal(b.len, 0);
    assert_int_equal(keyslot_wrap_passphrase(master, pass, PASS_LEN, 1000, 8, 1, &b), CKS_E_LIMIT);
    assert_int_equal(keyslot_wrap_passphrase(master, pass, 0, 1024, 8, 1, &b), -EINVAL);
    assert_int_equal(b.len, 0);
    assert_int_equal(keyslot_wrap_passphrase(master, pass, KEYSLOT_PASS_MAX + 1, 1024, 8, 1, &b),
                     -EINVAL);
    assert_int_equal(keyslot_scrypt_check(KEYSLOT_SCRYPT_N, KEYSLOT_SCRYPT_R, KEYSLOT_SCRYPT_P), 0);
    /* a struct from elsewhere is bounded again at unwrap */
    struct keyslot s = {.kind = KEYSLOT_PASSPHRASE, .n = 1u << 20, .r = 32, .p = 16};
    assert_int_equal(keyslot_unwrap(&s, pass, PASS_LEN, back), CKS_E_LIMIT);
    s.kind = (enum keyslot_kind)7;
    assert_int_equal(keyslot_unwrap(&s, pass, PASS_LEN, back), -EINVAL);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passphrase_roundtrip),
        cmocka_unit_test(test_default_parameters),
        cmocka_unit_test(test_keyfile_roundtrip),
        cmocka_unit_test(test_tamper),
        cmocka_unit_test(test_strict),
        cmocka_unit_test(test_wrap_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
