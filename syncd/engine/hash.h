/*
 * hash.h — SHA-256 through OpenSSL EVP, and hex helpers.
 *
 * Chunk ids are SHA-256 of the raw chunk bytes; whole-file digests are
 * SHA-256 of the file, computed over the same single read.
 *
 *   struct hash h; hash_init(&h); hash_update(&h, p, n); hash_final(&h, out);
 *   ... hash_reset(&h) to reuse; hash_free(&h) at the end.
 * hash_init allocates the EVP context once; reset/update/final allocate
 * nothing, so scanning does not touch the allocator.  One struct per thread.
 */
#ifndef CKS_HASH_H
#define CKS_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_LEN 32
#define HASH_HEX_LEN 64

struct evp_md_ctx_st;

struct hash {
    struct evp_md_ctx_st *ctx;
};

/* 0, -ENOMEM, or -ENOTSUP when OpenSSL offers no SHA-256.  Once init has
 * succeeded the void calls below cannot fail short of a broken crypto
 * library; they abort() then rather than hand out a wrong chunk id. */
int hash_init(struct hash *h);
void hash_reset(struct hash *h);
void hash_update(struct hash *h, const void *data, size_t len);
void hash_final(struct hash *h, uint8_t out[HASH_LEN]);
void hash_free(struct hash *h);
/* One-shot SHA-256; aborts if OpenSSL cannot allocate its context. */
void hash_sha256(const void *data, size_t len, uint8_t out[HASH_LEN]);
/* One-shot SHA-256 that reports failure instead: 0, -ENOMEM or -ENOTSUP. */
int hash_digest(const void *data, size_t len, uint8_t out[HASH_LEN]);

/* Lower-case hex; out must hold 2*len+1 bytes (NUL-terminated). */
void hex_encode(const uint8_t *in, size_t len, char *out);
/* The value of one hex digit (either case), or -1. */
int hex_digit(char c);
/* Decodes exactly 2*len hex digits (either case); 0 or CKS_E_FORMAT. */
int hex_decode(const char *in, size_t len, uint8_t *out);

#endif
