/*
 * hash.c — SHA-256 over OpenSSL EVP, and hex helpers.
 *
 * Design: one EVP context per struct hash, allocated by hash_init and
 * reused through hash_reset, so hashing a stream of chunks never touches
 * the allocator.  hash_init proves the digest is available; after that an
 * EVP failure means the crypto library is broken, and we abort rather than
 * return a digest that would become a wrong content address.  Hex decoding
 * stops at the first bad character, so a short NUL-terminated string is
 * never read past its terminator.
 */
#include <errno.h>
#include <stdlib.h>

#include <openssl/err.h>
#include <openssl/evp.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/hash.h"

static void hash_die(const char *what)
{
    log_error("SHA-256: %s failed in OpenSSL", what);
    abort();
}

int hash_init(struct hash *h)
{
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx)
        return -ENOMEM;
    if (!EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL)) {
        ERR_clear_error();
        EVP_MD_CTX_free(h->ctx);
        h->ctx = NULL;
        return -ENOTSUP;
    }
    return 0;
}

void hash_reset(struct hash *h)
{
    if (!EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL))
        hash_die("EVP_DigestInit_ex");
}

void hash_update(struct hash *h, const void *data, size_t len)
{
    if (len && !EVP_DigestUpdate(h->ctx, data, len))
        hash_die("EVP_DigestUpdate");
}

void hash_final(struct hash *h, uint8_t out[HASH_LEN])
{
    unsigned int n = 0;
    if (!EVP_DigestFinal_ex(h->ctx, out, &n) || n != HASH_LEN)
        hash_die("EVP_DigestFinal_ex");
}

void hash_free(struct hash *h)
{
    EVP_MD_CTX_free(h->ctx);
    h->ctx = NULL;
}

int hash_digest(const void *data, size_t len, uint8_t out[HASH_LEN])
{
    struct hash h;
    int r = hash_init(&h);
    if (r < 0)
        return r;
    hash_update(&h, data, len);
    hash_final(&h, out);
    hash_free(&h);
    return 0;
}

void hash_sha256(const void *data, size_t len, uint8_t out[HASH_LEN])
{
    if (hash_digest(data, len, out) < 0)
        hash_die("one-shot digest");
}

void hex_encode(const uint8_t *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0x0f];
    }
    out[2 * len] = '\0';
}

int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int hex_decode(const char *in, size_t len, uint8_t *out)
{
    for (size_t i = 0; i < len; i++) {
        int hi = hex_digit(in[2 * i]);
        if (hi < 0)
            return CKS_E_FORMAT;
        int lo = hex_digit(in[2 * i + 1]);
        if (lo < 0)
            return CKS_E_FORMAT;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
