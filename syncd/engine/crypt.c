/*
 * crypt.c — key derivation, keyed ids, the sealed envelope and the keyed
 * gear table over OpenSSL 3 EVP (EVP_KDF, EVP_MAC, EVP_CIPHER, RAND).
 *
 * Design: OpenSSL's int-sized lengths are never handed a size_t directly:
 * cipher input goes through in slices of CRYPT_SLICE bytes, and the AAD
 * (the envelope header, then the context string) is fed in pieces, so no
 * copy of it is built.  A failed open zeroes what it decrypted before
 * reporting, so an unauthenticated byte never leaves this file.  Cipher
 * contexts are allocated per seal and open (sealing a 2 MiB chunk takes
 * ~0.6 ms, the allocation and key schedule microseconds); HMAC has a
 * reusable context, where EVP_MAC_init with no key re-arms the key already
 * set (tests/bench/crypt-speed.c measures both ways: equal at 2 MiB).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "base/err.h"
#include "engine/crypt.h"

#define CRYPT_SLICE ((size_t)1 << 30)

static const char label_id[] = "ckptsync chunk-id";
static const char label_data[] = "ckptsync data";
static const char label_gear[] = "ckptsync gear";
static const char label_gear_table[] = "ckptsync gear table";

/* An OpenSSL call failed: its error queue is dropped here, once. */
static int ossl_fail(int code)
{
    ERR_clear_error();
    return code;
}

/* ---- HKDF and scrypt ---------------------------------------------------- */

static int kdf_run(const char *name, OSSL_PARAM *params, uint8_t *out, size_t out_len)
{
    EVP_KDF *kdf = EVP_KDF_fetch(NULL, name, NULL);
    if (!kdf)
        return ossl_fail(-ENOTSUP);
    EVP_KDF_CTX *ctx = EVP_KDF_CTX_new(kdf);
    EVP_KDF_free(kdf);
    if (!ctx)
        return ossl_fail(-ENOMEM);
    int r = EVP_KDF_derive(ctx, out, out_len, params) > 0 ? 0 : ossl_fail(-EIO);
    EVP_KDF_CTX_free(ctx);
    if (r < 0)
        OPENSSL_cleanse(out, out_len);
    return r;
}

/* HKDF in the given mode; salt and info may be empty. */
static int hkdf_mode(int mode, const uint8_t *ikm, size_t ikm_len, const uint8_t *salt,
                     size_t salt_len, const uint8_t *info, size_t info_len, uint8_t *out,
                     size_t out_len)
{
    OSSL_PARAM params[6], *p = params;

    if (!ikm || ikm_len == 0 || out_len == 0 || (salt_len && !salt) || (info_len && !info))
        return -EINVAL;
    *p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, (char *)"SHA256", 0);
    *p++ = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
    *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)ikm, ikm_len);
    if (salt_len)
        *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, (void *)salt, salt_len);
    if (info_len)
        *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, (void *)info, info_len);
    *p = OSSL_PARAM_construct_end();
    return kdf_run("HKDF", params, out, out_len);
}

int crypt_hkdf(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt, size_t salt_len,
               const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len)
{
    return hkdf_mode(EVP_KDF_HKDF_MODE_EXTRACT_AND_EXPAND, ikm, ikm_len, salt, salt_len, info,
                     info_len, out, out_len);
}

int crypt_scrypt(const uint8_t *pass, size_t pass_len, const uint8_t *salt, size_t salt_len,
                 uint64_t n, uint32_t r, uint32_t p, uint8_t *out, size_t out_len)
{
    static const uint8_t none[1] = {0};
    OSSL_PARAM params[7];

    if (n < 2 || (n & (n - 1)) || r == 0 || p == 0 || out_len == 0 || (pass_len && !pass) ||
        (salt_len && !salt))
        return -EINVAL;
    /* OpenSSL's own accounting: B is 128 r p bytes, V and XY 128 r (n + 2). */
    if (n > CRYPT_SCRYPT_MAX_MEM || (uint64_t)r * (n + p + 2) > CRYPT_SCRYPT_MAX_MEM / 128)
        return CKS_E_LIMIT;
    uint64_t maxmem = (uint64_t)128 * r * (n + p + 2);
    /* An empty password or salt is still a (zero-length) parameter. */
    params[0] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PASSWORD,
                                                  (void *)(pass_len ? pass : none), pass_len);
    params[1] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                                  (void *)(salt_len ? salt : none), salt_len);
    params[2] = OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_N, &n);
    params[3] = OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_R, &r);
    params[4] = OSSL_PARAM_construct_uint32(OSSL_KDF_PARAM_SCRYPT_P, &p);
    params[5] = OSSL_PARAM_construct_uint64(OSSL_KDF_PARAM_SCRYPT_MAXMEM, &maxmem);
    params[6] = OSSL_PARAM_construct_end();
    return kdf_run("SCRYPT", params, out, out_len);
}

int crypt_derive(const uint8_t master[CRYPT_KEY_LEN], const uint8_t *repo_id, size_t id_len,
                 struct crypt_keys *out)
{
    static const struct {
        const char *label;
        size_t off;
    } subkeys[] = {
        {label_id, offsetof(struct crypt_keys, id)},
        {label_data, offsetof(struct crypt_keys, data)},
        {label_gear, offsetof(struct crypt_keys, gear)},
    };
    struct crypt_keys k;

    if (!master || !repo_id || id_len == 0 || id_len > CRYPT_REPO_ID_MAX || !out)
        return -EINVAL;
    for (size_t i = 0; i < sizeof(subkeys) / sizeof(subkeys[0]); i++) {
        int r =
            crypt_hkdf(master, CRYPT_KEY_LEN, repo_id, id_len, (const uint8_t *)subkeys[i].label,
                       strlen(subkeys[i].label), (uint8_t *)&k + subkeys[i].off, CRYPT_KEY_LEN);
        if (r < 0) {
            crypt_keys_wipe(&k);
            return r;
        }
    }
    *out = k;
    crypt_keys_wipe(&k);
    return 0;
}

void crypt_keys_wipe(struct crypt_keys *k)
{
    if (k)
        OPENSSL_cleanse(k, sizeof(*k));
}

/* ---- HMAC-SHA256 -------------------------------------------------------- */

int crypt_mac_init(struct crypt_mac *m, const uint8_t *key, size_t key_len)
{
    OSSL_PARAM params[2];

    m->ctx = NULL;
    if (!key || key_len == 0)
        return -EINVAL;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!mac)
        return ossl_fail(-ENOTSUP);
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    EVP_MAC_free(mac);
    if (!ctx)
        return ossl_fail(-ENOMEM);
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    if (!EVP_MAC_init(ctx, key, key_len, params)) {
        EVP_MAC_CTX_free(ctx);
        return ossl_fail(-ENOTSUP);
    }
    m->ctx = (struct evp_mac_ctx_st *)ctx;
    return 0;
}

int crypt_mac_digest(struct crypt_mac *m, const uint8_t *data, size_t len,
                     uint8_t out[CRYPT_MAC_LEN])
{
    EVP_MAC_CTX *ctx = (EVP_MAC_CTX *)m->ctx;
    size_t n = 0;

    if (!ctx || (len && !data))
        return -EINVAL;
    /* No key: HMAC restarts with the key given to crypt_mac_init. */
    if (!EVP_MAC_init(ctx, NULL, 0, NULL) || (len && !EVP_MAC_update(ctx, data, len)) ||
        !EVP_MAC_final(ctx, out, &n, CRYPT_MAC_LEN) || n != CRYPT_MAC_LEN) {
        OPENSSL_cleanse(out, CRYPT_MAC_LEN);
        return ossl_fail(-EIO);
    }
    return 0;
}

void crypt_mac_free(struct crypt_mac *m)
{
    if (!m)
        return;
    EVP_MAC_CTX_free((EVP_MAC_CTX *)m->ctx);
    m->ctx = NULL;
}

int crypt_chunk_id(const struct crypt_keys *k, const uint8_t *data, size_t len,
                   uint8_t id[CRYPT_MAC_LEN])
{
    struct crypt_mac m = CRYPT_MAC_INIT;
    int r = crypt_mac_init(&m, k->id, CRYPT_KEY_LEN);
    if (r == 0)
        r = crypt_mac_digest(&m, data, len, id);
    crypt_mac_free(&m);
    return r;
}

/* ---- AES-256-GCM -------------------------------------------------------- */

struct aad {
    const uint8_t *p[2];
    size_t n[2];
};

/* One GCM pass: enc 1 encrypts and writes tag, enc 0 decrypts and checks
 * it.  The AAD pieces and the data are fed in int-sized slices. */
static int gcm_run(int enc, const uint8_t key[CRYPT_KEY_LEN], const uint8_t nonce[CRYPT_NONCE_LEN],
                   const struct aad *aad, const uint8_t *in, size_t len, uint8_t *out,
                   uint8_t tag[CRYPT_TAG_LEN])
{
    uint8_t fin[CRYPT_TAG_LEN]; /* GCM's final step writes nothing */
    int outl = 0, r = -EIO;

    if (len > CRYPT_MAX_PLAIN)
        return CKS_E_LIMIT;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c)
        return ossl_fail(-ENOMEM);
    if (!EVP_CipherInit_ex2(c, EVP_aes_256_gcm(), key, nonce, enc, NULL))
        goto fail;
    for (int i = 0; i < 2; i++)
        for (size_t off = 0; off < aad->n[i]; off += CRYPT_SLICE) {
            size_t s = aad->n[i] - off < CRYPT_SLICE ? aad->n[i] - off : CRYPT_SLICE;
            if (!EVP_CipherUpdate(c, NULL, &outl, aad->p[i] + off, (int)s))
                goto fail;
        }
    for (size_t off = 0; off < len; off += CRYPT_SLICE) {
        size_t s = len - off < CRYPT_SLICE ? len - off : CRYPT_SLICE;
        if (!EVP_CipherUpdate(c, out + off, &outl, in + off, (int)s) || (size_t)outl != s)
            goto fail;
    }
    if (!enc && !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, CRYPT_TAG_LEN, tag))
        goto fail;
    if (EVP_CipherFinal_ex(c, fin, &outl) <= 0) {
        r = enc ? -EIO : CKS_E_AUTH;
        goto fail;
    }
    if (enc && !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, CRYPT_TAG_LEN, tag))
        goto fail;
    EVP_CIPHER_CTX_free(c);
    return 0;
fail:
    EVP_CIPHER_CTX_free(c);
    if (len)
        OPENSSL_cleanse(out, len);
    return ossl_fail(r);
}

int crypt_aead_encrypt(const uint8_t key[CRYPT_KEY_LEN], const uint8_t nonce[CRYPT_NONCE_LEN],
                       const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len,
                       uint8_t *out, uint8_t tag[CRYPT_TAG_LEN])
{
    struct aad a = {{aad, NULL}, {aad_len, 0}};
    if ((aad_len && !aad) || (len && (!in || !out)))
        return -EINVAL;
    return gcm_run(1, key, nonce, &a, in, len, out, tag);
}

int crypt_aead_decrypt(const uint8_t key[CRYPT_KEY_LEN], const uint8_t nonce[CRYPT_NONCE_LEN],
                       const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len,
                       const uint8_t tag[CRYPT_TAG_LEN], uint8_t *out)
{
    struct aad a = {{aad, NULL}, {aad_len, 0}};
    uint8_t t[CRYPT_TAG_LEN];
    if ((aad_len && !aad) || (len && (!in || !out)))
        return -EINVAL;
    memcpy(t, tag, CRYPT_TAG_LEN);
    return gcm_run(0, key, nonce, &a, in, len, out, t);
}

int crypt_random(uint8_t *out, size_t len)
{
    while (len) {
        int s = len > INT_MAX ? INT_MAX : (int)len;
        if (RAND_bytes(out, s) != 1)
            return ossl_fail(-EIO);
        out += s;
        len -= (size_t)s;
    }
    return 0;
}

/* ---- the envelope ------------------------------------------------------- */

static int context_len(const char *context, size_t *ret)
{
    if (!context)
        return -EINVAL;
    size_t n = strnlen(context, CRYPT_CONTEXT_MAX + 1);
    if (n > CRYPT_CONTEXT_MAX)
        return -EINVAL;
    *ret = n;
    return 0;
}

int crypt_seal(const struct crypt_keys *k, const char *context, const uint8_t *plain, size_t len,
               struct buf *out)
{
    size_t clen;
    int r;

    buf_reset(out);
    if ((r = context_len(context, &clen)) < 0 || (len && !plain))
        return r < 0 ? r : -EINVAL;
    if (len > CRYPT_MAX_PLAIN)
        return CKS_E_LIMIT;
    if ((r = buf_reserve(out, CRYPT_OVERHEAD + len)) < 0)
        return r;
    uint8_t *h = out->data;
    memcpy(h, CRYPT_MAGIC, 4);
    h[4] = CRYPT_VERSION;
    h[5] = CRYPT_ALG_AES256GCM;
    h[6] = h[7] = 0;
    if ((r = crypt_random(h + 8, CRYPT_NONCE_LEN)) < 0)
        return r;
    struct aad a = {{h, (const uint8_t *)context}, {CRYPT_HEADER_LEN, clen}};
    r = gcm_run(1, k->data, h + 8, &a, plain, len, h + CRYPT_HEADER_LEN,
                h + CRYPT_HEADER_LEN + len);
    if (r < 0) {
        buf_reset(out);
        return r;
    }
    out->len = CRYPT_OVERHEAD + len;
    out->data[out->len] = 0;
    return 0;
}

/* Header checks, in the order that names the problem: not an envelope at
 * all, an envelope of a later version, a damaged envelope. */
static int header_check(const uint8_t *obj, size_t len)
{
    if (!obj || len < 8 || memcmp(obj, CRYPT_MAGIC, 4) != 0)
        return CKS_E_FORMAT;
    if (obj[4] != CRYPT_VERSION || obj[5] != CRYPT_ALG_AES256GCM)
        return CKS_E_VERSION;
    if (obj[6] || obj[7] || len < CRYPT_OVERHEAD)
        return CKS_E_FORMAT;
    return 0;
}

int crypt_open(const struct crypt_keys *k, const char *context, const uint8_t *obj, size_t len,
               struct buf *out)
{
    size_t clen;
    uint8_t tag[CRYPT_TAG_LEN];
    int r;

    buf_reset(out);
    if ((r = context_len(context, &clen)) < 0 || (r = header_check(obj, len)) < 0)
        return r;
    size_t n = len - CRYPT_OVERHEAD;
    if (n > CRYPT_MAX_PLAIN)
        return CKS_E_LIMIT;
    if ((r = buf_reserve(out, n)) < 0)
        return r;
    memcpy(tag, obj + CRYPT_HEADER_LEN + n, CRYPT_TAG_LEN);
    struct aad a = {{obj, (const uint8_t *)context}, {CRYPT_HEADER_LEN, clen}};
    r = gcm_run(0, k->data, obj + 8, &a, obj + CRYPT_HEADER_LEN, n, out->data, tag);
    if (r < 0) {
        buf_reset(out);
        return r;
    }
    out->len = n;
    out->data[n] = 0;
    return 0;
}

int crypt_peek(const struct crypt_keys *k, const uint8_t *prefix, size_t len, size_t want,
               struct buf *out)
{
    buf_reset(out);
    if (!prefix || len < CRYPT_HEADER_LEN || memcmp(prefix, CRYPT_MAGIC, 4) != 0 || prefix[6] ||
        prefix[7])
        return CKS_E_FORMAT;
    if (prefix[4] != CRYPT_VERSION || prefix[5] != CRYPT_ALG_AES256GCM)
        return CKS_E_VERSION;
    size_t n = len - CRYPT_HEADER_LEN < want ? len - CRYPT_HEADER_LEN : want;
    if (n > INT_MAX)
        return -EINVAL;
    int r = buf_reserve(out, n);
    if (r < 0)
        return r;
    /* GCM encrypts with CTR from inc32(J0) = nonce || 00000002 (SP 800-38D
     * 7.1, 96-bit IV); OpenSSL's CTR increments all 128 bits, the same for
     * any prefix shorter than 2^32 blocks. */
    uint8_t iv[16];
    memcpy(iv, prefix + 8, CRYPT_NONCE_LEN);
    memcpy(iv + CRYPT_NONCE_LEN, "\0\0\0\2", 4);
    EVP_CIPHER *c = EVP_CIPHER_fetch(NULL, "AES-256-CTR", NULL);
    EVP_CIPHER_CTX *ctx = c ? EVP_CIPHER_CTX_new() : NULL;
    int outl = 0;
    r = !c ? ossl_fail(-ENOTSUP) : !ctx ? ossl_fail(-ENOMEM) : 0;
    if (r == 0 &&
        (EVP_DecryptInit_ex2(ctx, c, k->data, iv, NULL) != 1 ||
         EVP_DecryptUpdate(ctx, out->data, &outl, prefix + CRYPT_HEADER_LEN, (int)n) != 1 ||
         (size_t)outl != n))
        r = ossl_fail(-EIO);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(c);
    out->len = r == 0 ? n : 0;
    out->data[out->len] = 0;
    return r;
}

int crypt_is_sealed(const uint8_t *obj, size_t len)
{
    return obj && len >= 4 && memcmp(obj, CRYPT_MAGIC, 4) == 0;
}

/* ---- keyed gear table --------------------------------------------------- */

int crypt_gear(const struct crypt_keys *k, uint64_t gear[256])
{
    uint8_t raw[256 * 8];
    int r =
        hkdf_mode(EVP_KDF_HKDF_MODE_EXPAND_ONLY, k->gear, CRYPT_KEY_LEN, NULL, 0,
                  (const uint8_t *)label_gear_table, strlen(label_gear_table), raw, sizeof(raw));
    if (r < 0)
        return r;
    for (size_t i = 0; i < 256; i++) {
        uint64_t v = 0;
        for (size_t j = 0; j < 8; j++)
            v = v << 8 | raw[8 * i + j];
        gear[i] = v;
    }
    OPENSSL_cleanse(raw, sizeof(raw));
    return 0;
}
