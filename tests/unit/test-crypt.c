/*
 * test-crypt.c — crypt.h: known answers from public vectors (HKDF RFC 5869,
 * HMAC-SHA256 RFC 4231, AES-256-GCM McGrew-Viega, scrypt RFC 7914), pinned
 * values of the repository key derivation (a change would make every
 * encrypted repository unreadable), the envelope (round trips, layout,
 * every bit flip and truncation refused, wrong key and context refused),
 * and the keyed gear table with the chunker.
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
#include "engine/crypt.h"
#include "engine/fastcdc.h"
#include "engine/hash.h"

static void unhex(const char *hex, uint8_t *out, size_t len)
{
    assert_int_equal(strlen(hex), 2 * len);
    assert_int_equal(hex_decode(hex, len, out), 0);
}

static void assert_hex(const uint8_t *got, size_t len, const char *want)
{
    char hex[2 * 256 + 1];
    assert_true(len <= 256);
    hex_encode(got, len, hex);
    assert_string_equal(hex, want);
}

/* Deterministic filler (xorshift64*). */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        p[i] = (uint8_t)((x * 0x2545f4914f6cdd1dull) >> 56);
    }
}

/* ---- known answers ------------------------------------------------------ */

static void test_hkdf_rfc5869(void **state)
{
    uint8_t ikm[22], salt[13], info[10], okm[42];
    (void)state;
    memset(ikm, 0x0b, sizeof(ikm));
    for (size_t i = 0; i < sizeof(salt); i++)
        salt[i] = (uint8_t)i;
    for (size_t i = 0; i < sizeof(info); i++)
        info[i] = (uint8_t)(0xf0 + i);
    /* Test case 1 */
    assert_int_equal(crypt_hkdf(ikm, 22, salt, 13, info, 10, okm, 42), 0);
    assert_hex(okm, 42,
               "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
               "34007208d5b887185865");
    /* Test case 3: no salt, no info */
    assert_int_equal(crypt_hkdf(ikm, 22, NULL, 0, NULL, 0, okm, 42), 0);
    assert_hex(okm, 42,
               "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
               "9d201395faa4b61a96c8");
    assert_int_equal(crypt_hkdf(ikm, 0, NULL, 0, NULL, 0, okm, 42), -EINVAL);
}

static void test_hmac_rfc4231(void **state)
{
    uint8_t key[20], out[CRYPT_MAC_LEN];
    struct crypt_mac m = CRYPT_MAC_INIT;
    (void)state;
    memset(key, 0x0b, sizeof(key));
    /* Test case 1 */
    assert_int_equal(crypt_mac_init(&m, key, sizeof(key)), 0);
    for (int round = 0; round < 3; round++) { /* the context is reused */
        assert_int_equal(crypt_mac_digest(&m, (const uint8_t *)"Hi There", 8, out), 0);
        assert_hex(out, 32, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    }
    crypt_mac_free(&m);
    crypt_mac_free(&m); /* idempotent */
    /* Test case 2 */
    static const char data2[] = "what do ya want for nothing?";
    assert_int_equal(crypt_mac_init(&m, (const uint8_t *)"Jefe", 4), 0);
    assert_int_equal(crypt_mac_digest(&m, (const uint8_t *)data2, strlen(data2), out), 0);
    assert_hex(out, 32, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    assert_int_equal(crypt_mac_digest(&m, (const uint8_t *)"Hi There", 8, out), 0);
    assert_int_equal(crypt_mac_digest(&m, (const uint8_t *)data2, strlen(data2), out), 0);
    assert_hex(out, 32, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    crypt_mac_free(&m);
    assert_int_equal(crypt_mac_init(&m, NULL, 0), -EINVAL);
    assert_int_equal(crypt_mac_digest(&m, out, 1, out), -EINVAL);
}

/* McGrew & Viega, "The Galois/Counter Mode of Operation", test cases 14
 * and 16 (AES-256, 96-bit IV; 16 with AAD). */
static void test_gcm_vectors(void **state)
{
    uint8_t key[32], iv[12], aad[20], pt[64], ct[64], back[64], tag[16];
    (void)state;

    memset(key, 0, sizeof(key));
    memset(iv, 0, sizeof(iv));
    memset(pt, 0, 16);
    assert_int_equal(crypt_aead_encrypt(key, iv, NULL, 0, pt, 16, ct, tag), 0);
    assert_hex(ct, 16, "cea7403d4d606b6e074ec5d3baf39d18");
    assert_hex(tag, 16, "d0d1c8a799996bf0265b98b5d48ab919");

    unhex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", key, 32);
    unhex("cafebabefacedbaddecaf888", iv, 12);
    unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2", aad, 20);
    unhex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
          "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
          pt, 60);
    assert_int_equal(crypt_aead_encrypt(key, iv, aad, 20, pt, 60, ct, tag), 0);
    assert_hex(ct, 60,
               "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
               "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662");
    assert_hex(tag, 16, "76fc6ece0f4e1768cddf8853bb2d551b");
    assert_int_equal(crypt_aead_decrypt(key, iv, aad, 20, ct, 60, tag, back), 0);
    assert_memory_equal(back, pt, 60);
    /* A wrong tag or AAD: refused, and nothing decrypted is left. */
    tag[15] ^= 1;
    assert_int_equal(crypt_aead_decrypt(key, iv, aad, 20, ct, 60, tag, back), CKS_E_AUTH);
    for (size_t i = 0; i < 60; i++)
        assert_int_equal(back[i], 0);
    tag[15] ^= 1;
    aad[0] ^= 1;
    assert_int_equal(crypt_aead_decrypt(key, iv, aad, 20, ct, 60, tag, back), CKS_E_AUTH);
    /* in place */
    aad[0] ^= 1;
    memcpy(back, pt, 60);
    assert_int_equal(crypt_aead_encrypt(key, iv, aad, 20, back, 60, back, tag), 0);
    assert_memory_equal(back, ct, 60);
}

static void test_scrypt_rfc7914(void **state)
{
    uint8_t out[64];
    (void)state;
    assert_int_equal(crypt_scrypt(NULL, 0, NULL, 0, 16, 1, 1, out, 64), 0);
    assert_hex(out, 64,
               "77d6576238657b203b19ca42c18a0497f16b4844e3074ae8dfdffa3fede21442"
               "fcd0069ded0948f8326a753a0fc81f17e8d3e0fb2e0d3628cf35e20c38d18906");
    assert_int_equal(crypt_scrypt((const uint8_t *)"password", 8, (const uint8_t *)"NaCl", 4, 1024,
                                  8, 16, out, 64),
                     0);
    assert_hex(out, 64,
               "fdbabe1c9d3472007856e7190d01e9fe7c6ad7cbc8237830e77376634b373162"
               "2eaf30d92e22a3886ff109279d9830dac727afb94a83ee6d8360cbdfa2cc0640");
    assert_int_equal(crypt_scrypt(NULL, 0, NULL, 0, 24, 1, 1, out, 64), -EINVAL);
    assert_int_equal(crypt_scrypt(NULL, 0, NULL, 0, 16, 0, 1, out, 64), -EINVAL);
    assert_int_equal(crypt_scrypt(NULL, 0, NULL, 0, (uint64_t)1 << 40, 1, 1, out, 64), CKS_E_LIMIT);
    assert_int_equal(crypt_scrypt(NULL, 0, NULL, 0, (uint64_t)1 << 22, 4096, 1, out, 64),
                     CKS_E_LIMIT);
}

/* ---- derivation --------------------------------------------------------- */

static void sample_keys(struct crypt_keys *k)
{
    uint8_t master[32], id[16];
    for (size_t i = 0; i < 32; i++)
        master[i] = (uint8_t)i;
    for (size_t i = 0; i < 16; i++)
        id[i] = (uint8_t)(0xa0 + i);
    assert_int_equal(crypt_derive(master, id, sizeof(id), k), 0);
}

static void test_derive(void **state)
{
    uint8_t master[32] = {0}, id[16] = {0}, okm[32];
    struct crypt_keys k, k2;
    (void)state;

    /* Pinned: these values define every encrypted repository's keys
     * (computed independently with Python's hmac/hashlib HKDF). */
    sample_keys(&k);
    assert_hex(k.id, 32, "0b5b1e40d62eda40878f4c7ac36ee37a150afe645c46c5a10dcb95810e3a4157");
    assert_hex(k.data, 32, "ae5dfadf35ae17717f1719d598b37a44501be7125a1694005aecf95f4f249b7b");
    assert_hex(k.gear, 32, "0ca66deaf222c82b2f3fcfb40aca705e08e12b6463954f0b1478073e3d4d48b7");
    /* ... and they are HKDF-SHA256(master, salt = repository id, label). */
    for (size_t i = 0; i < 32; i++)
        master[i] = (uint8_t)i;
    for (size_t i = 0; i < 16; i++)
        id[i] = (uint8_t)(0xa0 + i);
    assert_int_equal(crypt_hkdf(master, 32, id, 16, (const uint8_t *)"ckptsync data", 13, okm, 32),
                     0);
    assert_memory_equal(okm, k.data, 32);

    /* Another repository id: other keys. */
    id[15] ^= 1;
    assert_int_equal(crypt_derive(master, id, sizeof(id), &k2), 0);
    assert_memory_not_equal(k.id, k2.id, 32);
    assert_memory_not_equal(k.data, k2.data, 32);
    assert_memory_not_equal(k.gear, k2.gear, 32);
    assert_memory_not_equal(k.id, k.data, 32);

    assert_int_equal(crypt_derive(master, id, 0, &k2), -EINVAL);
    assert_int_equal(crypt_derive(master, id, CRYPT_REPO_ID_MAX + 1, &k2), -EINVAL);
    crypt_keys_wipe(&k);
    static const uint8_t zero[sizeof(k)];
    assert_memory_equal(&k, zero, sizeof(k));
    crypt_keys_wipe(NULL);
}

static void test_chunk_id(void **state)
{
    struct crypt_keys k;
    struct crypt_mac m = CRYPT_MAC_INIT;
    uint8_t a[CRYPT_MAC_LEN], b[CRYPT_MAC_LEN], sha[HASH_LEN];
    (void)state;

    sample_keys(&k);
    assert_int_equal(crypt_chunk_id(&k, (const uint8_t *)"abc", 3, a), 0);
    assert_hex(a, 32, "3315fa92714ea02367b73920cd7889756fc2c51b5bd526df7b607b6a12463d95");
    assert_int_equal(crypt_mac_init(&m, k.id, CRYPT_KEY_LEN), 0);
    assert_int_equal(crypt_mac_digest(&m, (const uint8_t *)"abc", 3, b), 0);
    assert_memory_equal(a, b, 32);
    /* not the plain SHA-256, and the empty chunk has an id too */
    hash_sha256("abc", 3, sha);
    assert_memory_not_equal(a, sha, 32);
    assert_int_equal(crypt_mac_digest(&m, NULL, 0, b), 0);
    assert_memory_not_equal(a, b, 32);
    crypt_mac_free(&m);
}

/* ---- the envelope ------------------------------------------------------- */

static const char ctx_chunk[] =
    "chunks/00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

static void test_seal_roundtrip(void **state)
{
    static const size_t sizes[] = {0, 1, 15, 16, 17, 1000, 65536, 2u << 20};
    struct crypt_keys k;
    struct buf obj = BUF_INIT, obj2 = BUF_INIT, back = BUF_INIT;
    (void)state;

    sample_keys(&k);
    uint8_t *plain = malloc(2u << 20);
    assert_non_null(plain);
    fill(plain, 2u << 20, 7);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        assert_int_equal(crypt_seal(&k, ctx_chunk, plain, n, &obj), 0);
        assert_int_equal(obj.len, n + CRYPT_OVERHEAD);
        assert_memory_equal(obj.data, "CKE1\x01\x01\x00\x00", 8);
        assert_true(crypt_is_sealed(obj.data, obj.len));
        assert_int_equal(crypt_open(&k, ctx_chunk, obj.data, obj.len, &back), 0);
        assert_int_equal(back.len, n);
        if (n)
            assert_memory_equal(back.data, plain, n);
        /* a fresh nonce each time: the same plaintext seals differently */
        assert_int_equal(crypt_seal(&k, ctx_chunk, plain, n, &obj2), 0);
        assert_memory_not_equal(obj.data + 8, obj2.data + 8, CRYPT_NONCE_LEN);
        assert_int_equal(crypt_open(&k, ctx_chunk, obj2.data, obj2.len, &back), 0);
        assert_int_equal(back.len, n);
        /* peek: a prefix of the object gives the plaintext's prefix (GCM's
         * counter stream), fewer bytes when the object is shorter */
        for (size_t want = 0; want <= 40; want += 20) {
            size_t got = want < n ? want : n;
            assert_int_equal(crypt_peek(&k, obj2.data, CRYPT_HEADER_LEN + got, want, &back), 0);
            assert_int_equal(back.len, got);
            if (got)
                assert_memory_equal(back.data, plain, got);
        }
    }
    assert_int_equal(crypt_peek(&k, obj.data, CRYPT_HEADER_LEN - 1, 8, &back), CKS_E_FORMAT);
    obj.data[4] = 2;
    assert_int_equal(crypt_peek(&k, obj.data, obj.len, 8, &back), CKS_E_VERSION);
    /* the ciphertext does not contain the plaintext */
    assert_int_equal(crypt_seal(&k, "", (const uint8_t *)"secret-file-name.bin", 20, &obj), 0);
    assert_null(memmem(obj.data, obj.len, "secret", 6));
    assert_int_equal(crypt_open(&k, "", obj.data, obj.len, &back), 0);
    assert_int_equal(crypt_seal(&k, NULL, plain, 1, &obj), -EINVAL);
    assert_int_equal(obj.len, 0);
    free(plain);
    buf_free(&obj);
    buf_free(&obj2);
    buf_free(&back);
}

/* The layout as documented, built by hand: header, AAD = header ||
 * context, ciphertext and tag after it. */
static void test_seal_layout(void **state)
{
    static const char plain[] = "the quick brown fox";
    static const char context[] = "snapshots/run-1/20261201T000701.123456Z-3f2a9c1b";
    struct crypt_keys k;
    uint8_t obj[CRYPT_OVERHEAD + sizeof(plain)], aad[CRYPT_HEADER_LEN + sizeof(context)];
    struct buf back = BUF_INIT;
    size_t n = sizeof(plain) - 1, cl = sizeof(context) - 1;
    (void)state;

    sample_keys(&k);
    memcpy(obj, "CKE1\x01\x01\x00\x00", 8);
    for (size_t i = 0; i < CRYPT_NONCE_LEN; i++)
        obj[8 + i] = (uint8_t)(0x40 + i);
    memcpy(aad, obj, CRYPT_HEADER_LEN);
    memcpy(aad + CRYPT_HEADER_LEN, context, cl);
    assert_int_equal(crypt_aead_encrypt(k.data, obj + 8, aad, CRYPT_HEADER_LEN + cl,
                                        (const uint8_t *)plain, n, obj + CRYPT_HEADER_LEN,
                                        obj + CRYPT_HEADER_LEN + n),
                     0);
    assert_int_equal(crypt_open(&k, context, obj, n + CRYPT_OVERHEAD, &back), 0);
    assert_int_equal(back.len, n);
    assert_memory_equal(back.data, plain, n);
    assert_int_equal(back.data[n], 0); /* NUL past len, as every buf */
    buf_free(&back);
}

static int expected_flip(size_t byte)
{
    if (byte < 4 || byte == 6 || byte == 7)
        return CKS_E_FORMAT;
    if (byte < 6)
        return CKS_E_VERSION;
    return CKS_E_AUTH;
}

static void test_open_rejects(void **state)
{
    struct crypt_keys k, other;
    struct buf obj = BUF_INIT, back = BUF_INIT;
    uint8_t plain[64];
    (void)state;

    sample_keys(&k);
    fill(plain, sizeof(plain), 3);
    assert_int_equal(crypt_seal(&k, ctx_chunk, plain, sizeof(plain), &obj), 0);
    /* every single-bit flip */
    for (size_t i = 0; i < obj.len; i++)
        for (int bit = 0; bit < 8; bit++) {
            obj.data[i] ^= (uint8_t)(1u << bit);
            buf_puts(&back, "stale");
            assert_int_equal(crypt_open(&k, ctx_chunk, obj.data, obj.len, &back), expected_flip(i));
            assert_int_equal(back.len, 0);
            obj.data[i] ^= (uint8_t)(1u << bit);
        }
    /* every truncation, and one byte more */
    for (size_t n = 0; n < obj.len; n++) {
        int want = n < CRYPT_OVERHEAD ? CKS_E_FORMAT : CKS_E_AUTH;
        assert_int_equal(crypt_open(&k, ctx_chunk, obj.data, n, &back), want);
        assert_int_equal(back.len, 0);
    }
    assert_int_equal(crypt_open(&k, ctx_chunk, NULL, 0, &back), CKS_E_FORMAT);
    buf_append(&obj, "x", 1);
    assert_int_equal(crypt_open(&k, ctx_chunk, obj.data, obj.len, &back), CKS_E_AUTH);
    obj.len--;
    assert_int_equal(crypt_open(&k, ctx_chunk, obj.data, obj.len, &back), 0);
    /* moved under another key, or opened with another repository's keys */
    assert_int_equal(crypt_open(&k, "chunks/00", obj.data, obj.len, &back), CKS_E_AUTH);
    assert_int_equal(crypt_open(&k, "", obj.data, obj.len, &back), CKS_E_AUTH);
    other = k;
    other.data[0] ^= 1;
    assert_int_equal(crypt_open(&other, ctx_chunk, obj.data, obj.len, &back), CKS_E_AUTH);
    assert_int_equal(back.len, 0);
    /* a later version or algorithm is named as such */
    obj.data[4] = 2;
    assert_int_equal(crypt_open(&k, ctx_chunk, obj.data, obj.len, &back), CKS_E_VERSION);
    obj.data[4] = 1;
    obj.data[5] = 2;
    assert_int_equal(crypt_open(&k, ctx_chunk, obj.data, 8, &back), CKS_E_VERSION);
    assert_false(crypt_is_sealed(obj.data, 3));
    assert_false(crypt_is_sealed((const uint8_t *)"ckptsync-repo 1\n", 16));
    assert_string_equal(err_str(CKS_E_AUTH), "authentication failed: wrong key or altered object");
    buf_free(&obj);
    buf_free(&back);
}

/* ---- keyed gear --------------------------------------------------------- */

static size_t cut_all(const struct fastcdc *cdc, const uint8_t *p, size_t n, size_t *lens,
                      size_t cap)
{
    size_t count = 0;
    for (size_t off = 0; off < n;) {
        size_t len = fastcdc_cut(cdc, p + off, n - off, true);
        assert_true(len > 0 && count < cap);
        lens[count++] = len;
        off += len;
    }
    return count;
}

static void test_gear(void **state)
{
    static uint64_t gear[256], gear2[256];
    struct crypt_keys k;
    (void)state;

    sample_keys(&k);
    assert_int_equal(crypt_gear(&k, gear), 0);
    assert_int_equal(crypt_gear(&k, gear2), 0);
    assert_memory_equal(gear, gear2, sizeof(gear));
    assert_memory_not_equal(gear, fastcdc_gear, sizeof(gear));
    /* pinned: a change moves every cut point of every encrypted repository */
    char hex[17];
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)gear[0]);
    assert_string_equal(hex, "36dad42ce886e0ce");
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)gear[255]);
    assert_string_equal(hex, "68a3dd19d11fdc2b");
    k.gear[0] ^= 1;
    assert_int_equal(crypt_gear(&k, gear2), 0);
    assert_memory_not_equal(gear, gear2, sizeof(gear));
}

static void test_gear_chunking(void **state)
{
    enum { N = 4u << 20, MIN = 2048, AVG = 8192, MAX = 32768, CAP = N / MIN + 1 };
    static uint64_t gear[256];
    static size_t std_lens[CAP], std2_lens[CAP], key_lens[CAP];
    struct crypt_keys k;
    struct fastcdc std, std2, keyed;
    (void)state;

    uint8_t *p = malloc(N);
    assert_non_null(p);
    fill(p, N, 11);
    sample_keys(&k);
    assert_int_equal(crypt_gear(&k, gear), 0);
    assert_int_equal(fastcdc_init(&std, MIN, AVG, MAX, 2), 0);
    assert_int_equal(fastcdc_init_gear(&std2, MIN, AVG, MAX, 2, NULL), 0);
    assert_int_equal(fastcdc_init_gear(&keyed, MIN, AVG, MAX, 2, gear), 0);
    assert_int_equal(fastcdc_init_gear(&keyed, MIN, AVG, MIN - 1, 2, gear), -EINVAL);

    size_t ns = cut_all(&std, p, N, std_lens, CAP);
    size_t ns2 = cut_all(&std2, p, N, std2_lens, CAP);
    size_t nk = cut_all(&keyed, p, N, key_lens, CAP);
    /* NULL is the standard table, cut for cut */
    assert_int_equal(ns, ns2);
    assert_memory_equal(std_lens, std2_lens, ns * sizeof(size_t));
    /* the keyed table cuts elsewhere, within the same bounds, at about
     * the same average */
    size_t same = 0, off_s = 0, off_k = 0;
    for (size_t i = 0, j = 0; i < ns && j < nk;) {
        if (off_s == off_k)
            same++;
        if (off_s <= off_k)
            off_s += std_lens[i++];
        else
            off_k += key_lens[j++];
    }
    assert_true(same < ns / 10);
    for (size_t i = 0; i + 1 < nk; i++)
        assert_true(key_lens[i] >= MIN && key_lens[i] <= MAX);
    assert_true(key_lens[nk - 1] <= MAX);
    assert_true(nk > N / (2 * AVG) && nk < 2 * N / AVG);
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hkdf_rfc5869),   cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_gcm_vectors),    cmocka_unit_test(test_scrypt_rfc7914),
        cmocka_unit_test(test_derive),         cmocka_unit_test(test_chunk_id),
        cmocka_unit_test(test_seal_roundtrip), cmocka_unit_test(test_seal_layout),
        cmocka_unit_test(test_open_rejects),   cmocka_unit_test(test_gear),
        cmocka_unit_test(test_gear_chunking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
