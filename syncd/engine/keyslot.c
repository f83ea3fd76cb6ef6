/*
 * keyslot.c — write, parse and unwrap key slots.
 *
 * Design: the first four lines are produced by one function (slot_header)
 * for writing and for the AAD at unwrap time; the parser accepts only the
 * spelling that function writes, so re-serialising a parsed slot gives the
 * bytes that were authenticated.  Bounds on the scrypt parameters are
 * checked in the parser and again in unwrap (a struct may come from
 * elsewhere), before any memory is asked of OpenSSL.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <openssl/crypto.h>

#include "base/err.h"
#include "base/textline.h"
#include "engine/hash.h"
#include "engine/keyslot.h"

static const char keyfile_info[] = "ckptsync keyslot keyfile";

int keyslot_scrypt_check(uint64_t n, uint32_t r, uint32_t p)
{
    if (n < 2 || n > KEYSLOT_SCRYPT_N_MAX || (n & (n - 1)) || r < 1 || r > KEYSLOT_SCRYPT_R_MAX ||
        p < 1 || p > KEYSLOT_SCRYPT_P_MAX)
        return CKS_E_LIMIT;
    /* n <= 2^20, r <= 32, p <= 16: the products below cannot overflow. */
    if (128 * r * n > KEYSLOT_SCRYPT_MEM_MAX || n * r * p > KEYSLOT_SCRYPT_WORK_MAX)
        return CKS_E_LIMIT;
    return 0;
}

/* The four lines the wrap authenticates. */
static int slot_header(const struct keyslot *s, struct buf *out)
{
    char salt[2 * KEYSLOT_SALT_LEN + 1];
    hex_encode(s->salt, KEYSLOT_SALT_LEN, salt);
    if (s->kind == KEYSLOT_PASSPHRASE)
        return buf_printf(out, "ckptsync-key %d\nkind passphrase\nkdf scrypt %llu %u %u\nsalt %s\n",
                          KEYSLOT_VERSION, (unsigned long long)s->n, s->r, s->p, salt);
    if (s->kind == KEYSLOT_KEYFILE)
        return buf_printf(out, "ckptsync-key %d\nkind keyfile\nkdf hkdf\nsalt %s\n",
                          KEYSLOT_VERSION, salt);
    return -EINVAL;
}

static int slot_kek(const struct keyslot *s, const uint8_t *secret, size_t secret_len,
                    uint8_t kek[CRYPT_KEY_LEN])
{
    if (s->kind == KEYSLOT_PASSPHRASE) {
        if (secret_len == 0 || secret_len > KEYSLOT_PASS_MAX || !secret)
            return -EINVAL;
        int r = keyslot_scrypt_check(s->n, s->r, s->p);
        if (r < 0)
            return r;
        return crypt_scrypt(secret, secret_len, s->salt, KEYSLOT_SALT_LEN, s->n, s->r, s->p, kek,
                            CRYPT_KEY_LEN);
    }
    if (s->kind == KEYSLOT_KEYFILE) {
        if (secret_len != CRYPT_KEY_LEN || !secret)
            return -EINVAL;
        return crypt_hkdf(secret, secret_len, s->salt, KEYSLOT_SALT_LEN,
                          (const uint8_t *)keyfile_info, strlen(keyfile_info), kek, CRYPT_KEY_LEN);
    }
    return -EINVAL;
}

static int slot_wrap(struct keyslot *s, const uint8_t master[CRYPT_KEY_LEN], const uint8_t *secret,
                     size_t secret_len, struct buf *out)
{
    uint8_t kek[CRYPT_KEY_LEN], d[HASH_LEN];
    char hex[2 * KEYSLOT_WRAPPED_LEN + 1];
    uint8_t *nonce = s->wrapped, *ct = s->wrapped + CRYPT_NONCE_LEN;
    int r;

    buf_reset(out);
    if ((r = crypt_random(s->salt, KEYSLOT_SALT_LEN)) < 0 ||
        (r = crypt_random(nonce, CRYPT_NONCE_LEN)) < 0)
        return r;
    if ((r = slot_kek(s, secret, secret_len, kek)) < 0)
        return r;
    if ((r = slot_header(s, out)) == 0)
        r = crypt_aead_encrypt(kek, nonce, out->data, out->len, master, CRYPT_KEY_LEN, ct,
                               ct + CRYPT_KEY_LEN);
    OPENSSL_cleanse(kek, sizeof(kek));
    if (r == 0) {
        hex_encode(s->wrapped, KEYSLOT_WRAPPED_LEN, hex);
        r = buf_printf(out, "wrapped %s\n", hex);
    }
    if (r == 0) {
        hash_sha256(out->data, out->len, d);
        hex_encode(d, HASH_LEN, hex);
        r = buf_printf(out, "end %s\n", hex);
    }
    if (r < 0)
        buf_reset(out);
    return r;
}

int keyslot_wrap_passphrase(const uint8_t master[CRYPT_KEY_LEN], const uint8_t *pass,
                            size_t pass_len, uint64_t n, uint32_t r, uint32_t p, struct buf *out)
{
    struct keyslot s = {.kind = KEYSLOT_PASSPHRASE, .n = n, .r = r, .p = p};
    buf_reset(out);
    int e = keyslot_scrypt_check(n, r, p);
    return e < 0 ? e : slot_wrap(&s, master, pass, pass_len, out);
}

int keyslot_wrap_keyfile(const uint8_t master[CRYPT_KEY_LEN], const uint8_t key[CRYPT_KEY_LEN],
                         struct buf *out)
{
    struct keyslot s = {.kind = KEYSLOT_KEYFILE};
    return slot_wrap(&s, master, key, CRYPT_KEY_LEN, out);
}

/* ---- parsing ------------------------------------------------------------ */

/* The value after "key " or NULL. */
static const char *field(const char *line, const char *key)
{
    size_t kl = strlen(key);
    return strncmp(line, key, kl) == 0 && line[kl] == ' ' ? line + kl + 1 : NULL;
}

/* Decimal without sign or leading zeros, <= max; the end in *end. */
static bool parse_u64(const char *s, uint64_t max, uint64_t *ret, const char **end)
{
    uint64_t v = 0;
    const char *p = s;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
        return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (max - (uint64_t)(*p - '0')) / 10)
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *ret = v;
    *end = p;
    return true;
}

/* Exactly 2 * len lower-case hex digits. */
static bool parse_hex(const char *s, uint8_t *out, size_t len)
{
    if (strlen(s) != 2 * len)
        return false;
    for (size_t i = 0; i < 2 * len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return hex_decode(s, len, out) == 0;
}

/* "kdf scrypt N r p": false when malformed; bounds are checked later. */
static bool parse_scrypt(const char *v, struct keyslot *s)
{
    uint64_t r, p;
    const char *e;
    if (strncmp(v, "scrypt ", 7) || !parse_u64(v + 7, UINT64_MAX, &s->n, &e) || *e != ' ' ||
        !parse_u64(e + 1, UINT32_MAX, &r, &e) || *e != ' ' ||
        !parse_u64(e + 1, UINT32_MAX, &p, &e) || *e)
        return false;
    s->r = (uint32_t)r;
    s->p = (uint32_t)p;
    return true;
}

static bool kind_word(const char *v)
{
    if (!*v)
        return false;
    for (; *v; v++)
        if (!((*v >= 'a' && *v <= 'z') || (*v >= '0' && *v <= '9') || *v == '-'))
            return false;
    return true;
}

int keyslot_parse(const uint8_t *text, size_t len, struct keyslot *ret)
{
    const char *p = (const char *)text, *end = p + len, *v, *body_end;
    char line[256];
    struct keyslot s;
    uint8_t want[HASH_LEN], got[HASH_LEN];

    memset(&s, 0, sizeof(s));
    if (!text || len > KEYSLOT_MAX_BYTES || !textline_next(&p, end, line, sizeof(line)) ||
        !(v = field(line, "ckptsync-key")))
        return CKS_E_FORMAT;
    if (strcmp(v, "1") != 0)
        return CKS_E_VERSION;
    if (!textline_next(&p, end, line, sizeof(line)) || !(v = field(line, "kind")) || !kind_word(v))
        return CKS_E_FORMAT;
    if (!strcmp(v, "passphrase"))
        s.kind = KEYSLOT_PASSPHRASE;
    else if (!strcmp(v, "keyfile"))
        s.kind = KEYSLOT_KEYFILE;
    else
        return CKS_E_VERSION; /* a kind of a later ckptsync */
    if (!textline_next(&p, end, line, sizeof(line)) || !(v = field(line, "kdf")))
        return CKS_E_FORMAT;
    if (s.kind == KEYSLOT_PASSPHRASE ? !parse_scrypt(v, &s) : strcmp(v, "hkdf") != 0)
        return CKS_E_FORMAT;
    if (!textline_next(&p, end, line, sizeof(line)) || !(v = field(line, "salt")) ||
        !parse_hex(v, s.salt, KEYSLOT_SALT_LEN) || !textline_next(&p, end, line, sizeof(line)) ||
        !(v = field(line, "wrapped")) || !parse_hex(v, s.wrapped, KEYSLOT_WRAPPED_LEN))
        return CKS_E_FORMAT;
    body_end = p;
    if (!textline_next(&p, end, line, sizeof(line)) || !(v = field(line, "end")) ||
        !parse_hex(v, want, HASH_LEN) || p != end)
        return CKS_E_FORMAT;
    hash_sha256(text, (size_t)(body_end - (const char *)text), got);
    if (memcmp(want, got, HASH_LEN) != 0)
        return CKS_E_DIGEST;
    if (s.kind == KEYSLOT_PASSPHRASE && keyslot_scrypt_check(s.n, s.r, s.p) < 0)
        return CKS_E_LIMIT;
    *ret = s;
    return 0;
}

int keyslot_unwrap(const struct keyslot *s, const uint8_t *secret, size_t secret_len,
                   uint8_t master[CRYPT_KEY_LEN])
{
    uint8_t kek[CRYPT_KEY_LEN], m[CRYPT_KEY_LEN];
    const uint8_t *nonce = s->wrapped, *ct = s->wrapped + CRYPT_NONCE_LEN;
    struct buf aad = BUF_INIT;

    int r = slot_header(s, &aad);
    if (r == 0)
        r = slot_kek(s, secret, secret_len, kek);
    if (r == 0) {
        r = crypt_aead_decrypt(kek, nonce, aad.data, aad.len, ct, CRYPT_KEY_LEN, ct + CRYPT_KEY_LEN,
                               m);
        OPENSSL_cleanse(kek, sizeof(kek));
    }
    buf_free(&aad);
    if (r == 0)
        memcpy(master, m, CRYPT_KEY_LEN);
    OPENSSL_cleanse(m, sizeof(m));
    return r;
}
