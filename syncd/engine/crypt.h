/*
 * crypt.h — the cryptographic transforms of an encrypted repository: key
 * derivation, keyed chunk ids, the sealed envelope every encrypted object
 * travels in, and the keyed FastCDC gear table.  Pure transforms over
 * OpenSSL 3 EVP (no file I/O, no global state of ours).
 *
 * Keys.  A repository has one random 32-byte master key (unlocked through
 * key slots, keyslot.h).  crypt_derive() turns it into independent subkeys
 * with HKDF-SHA256, salt = the repository id bytes, one info label each:
 *   id    "ckptsync chunk-id"  HMAC-SHA256 key of chunk ids
 *   data  "ckptsync data"      AES-256-GCM key of every sealed object
 *   gear  "ckptsync gear"      expanded into the FastCDC gear table
 * A new label adds a key without changing the others.
 *
 * Envelope (every encrypted object: chunks, manifests, refs, handoffs ...):
 *   offset size
 *   0      4    magic "CKE1"
 *   4      1    version 1
 *   5      1    algorithm 1 = AES-256-GCM
 *   6      2    reserved, zero
 *   8      12   nonce (random)
 *   20     n    ciphertext
 *   20+n   16   GCM tag
 * AAD = the 20 header bytes, then the caller's context string (the object's
 * kind and key, e.g. "chunks/<64 hex>", "snapshots/<run>/<id>"): an object
 * copied under another key, or a header byte changed, fails to open.
 *
 * Threat model.
 * - A store (any region's operator, or whoever reads its bucket) sees
 *   ciphertext only.  It learns no file contents, file names, run metadata
 *   or manifests, and cannot confirm that a user holds a known file: chunk
 *   ids are HMAC-SHA256 under a key it lacks, and cut points come from a
 *   keyed gear table, so neither ids nor the sizes of chunks can be
 *   precomputed from a known file.  It can delete, withhold, roll back (serve
 *   an older version of a mutable object such as a ref) or replay objects;
 *   it cannot forge or alter one undetected, nor swap two objects' contents
 *   (the context string is authenticated).  Detection is all the envelope
 *   gives: repair comes from another region, and rollback of mutable objects
 *   is only visible to a reader that compares regions or remembers a newer
 *   state.
 * - A thief of one region (the bucket's full contents and the key slots in
 *   it) has what a store has, plus unlimited offline time against the key
 *   slots: a passphrase slot falls to a guessing attack whose every guess
 *   costs one scrypt (N=2^15, r=8, p=1: 32 MiB and ~0.15 s of one core of
 *   the test machine; an attacker's hardware does better); a key-file slot
 *   does not fall (256-bit secret).  Weak passphrases are the risk.
 * - A holder of a removed key (a key file or passphrase whose slot was
 *   deleted) who saved the master key, or the old slot and its secret,
 *   before the removal, still has the master key: removal re-encrypts
 *   nothing, so it stops the secret from unlocking slots read from now on,
 *   not someone who already unlocked.  Such a person can read every object,
 *   old and new, and write objects that open, for as long as the master key
 *   lives; cutting them off needs a new master key and a re-encrypted
 *   repository (not provided).  Without the master key, a removed secret
 *   opens nothing that does not still hold its slot (older copies of the
 *   slot, e.g. in a store's version history, do unlock).
 * What leaks to anyone who sees the objects: the number and the sizes of
 *   objects (a chunk's sealed size is its encoded size + 36 bytes), the
 *   object keys themselves unless the integration names them by keyed ids
 *   (run names and snapshot ids in key paths are visible), when objects are
 *   written and read (timing, access patterns, which chunks two snapshots
 *   share), and whether a repository is encrypted.
 *
 * Why random nonces.  Different writers may encode the same chunk
 * differently (zstd versions and levels, codec choice), so a nonce derived
 * from the chunk id alone could repeat under a different plaintext: with
 * GCM that reveals the XOR of two plaintexts and the authentication key.
 * A random 96-bit nonce per seal avoids that at the cost of
 * determinism: two writers sealing the same chunk produce different but
 * equally valid objects, which is harmless because an object is looked up
 * by its (keyed) id, never compared byte for byte across regions.  Random
 * nonces under one data key are safe to about 2^32 seals (NIST SP 800-38D;
 * the chance of a repeat stays below 2^-32).  At the default 2 MiB average
 * chunk that is ~8 PiB sealed under one repository's data key; the project
 * does not count seals and relies on that margin.  Going past it needs a
 * new data key: the envelope's reserved bytes are zero today so that a
 * later version can name a key epoch there.
 *
 * Calling sequence:
 *   struct crypt_keys k; crypt_derive(master, repo_id, 16, &k);
 *   crypt_seal(&k, "chunks/<hex>", plain, n, &obj);   // obj reset first
 *   crypt_open(&k, "chunks/<hex>", obj.data, obj.len, &plain);
 *   struct crypt_mac m = CRYPT_MAC_INIT;               // one per thread
 *   crypt_mac_init(&m, k.id, CRYPT_KEY_LEN); crypt_mac_digest(&m, chunk, n, id);
 *   crypt_mac_free(&m); crypt_keys_wipe(&k);
 *
 * Thread safety: struct crypt_keys is read-only after crypt_derive and may
 * be shared; a struct crypt_mac belongs to one thread at a time.  Every
 * function allocates only inside OpenSSL and frees before returning (except
 * crypt_mac_init, freed by crypt_mac_free).  Errors: -ENOMEM, -EINVAL for a
 * caller's mistake, -ENOTSUP when OpenSSL lacks an algorithm, -EIO when
 * OpenSSL fails otherwise, CKS_E_* as documented per function.
 */
#ifndef CKS_CRYPT_H
#define CKS_CRYPT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define CRYPT_KEY_LEN 32
#define CRYPT_MAC_LEN 32
#define CRYPT_NONCE_LEN 12
#define CRYPT_TAG_LEN 16
#define CRYPT_HEADER_LEN 20
/* Bytes a sealed object adds to its plaintext. */
#define CRYPT_OVERHEAD (CRYPT_HEADER_LEN + CRYPT_TAG_LEN)
#define CRYPT_MAGIC "CKE1"
#define CRYPT_VERSION 1
#define CRYPT_ALG_AES256GCM 1
/* Longest plaintext one seal takes (GCM allows 2^36 - 32 bytes). */
#define CRYPT_MAX_PLAIN ((size_t)1 << 36)
/* Longest context string crypt_seal and crypt_open take. */
#define CRYPT_CONTEXT_MAX 4096
/* Bounds of crypt_derive's repository id. */
#define CRYPT_REPO_ID_MAX 64

struct crypt_keys {
    uint8_t id[CRYPT_KEY_LEN];   /* HMAC-SHA256 key of chunk ids */
    uint8_t data[CRYPT_KEY_LEN]; /* AES-256-GCM key of sealed objects */
    uint8_t gear[CRYPT_KEY_LEN]; /* seed of the keyed gear table */
};

/* Derives the subkeys from master; repo_id is the repository id's bytes
 * (1..CRYPT_REPO_ID_MAX of them, else -EINVAL). */
int crypt_derive(const uint8_t master[CRYPT_KEY_LEN], const uint8_t *repo_id, size_t id_len,
                 struct crypt_keys *out);
/* Overwrites the keys (OPENSSL_cleanse); NULL does nothing. */
void crypt_keys_wipe(struct crypt_keys *k);

/* HMAC-SHA256 with a reusable context: init once (allocates and keys it),
 * digest any number of messages (allocates nothing), free.  For chunk ids
 * key it with keys->id.  crypt_mac_free(NULL-initialised) does nothing. */
struct evp_mac_ctx_st;
struct crypt_mac {
    struct evp_mac_ctx_st *ctx;
};
#define CRYPT_MAC_INIT                                                                             \
    {                                                                                              \
        NULL                                                                                       \
    }
int crypt_mac_init(struct crypt_mac *m, const uint8_t *key, size_t key_len);
int crypt_mac_digest(struct crypt_mac *m, const uint8_t *data, size_t len,
                     uint8_t out[CRYPT_MAC_LEN]);
void crypt_mac_free(struct crypt_mac *m);
/* One-shot keyed chunk id: HMAC-SHA256(keys->id, data). */
int crypt_chunk_id(const struct crypt_keys *k, const uint8_t *data, size_t len,
                   uint8_t id[CRYPT_MAC_LEN]);

/* Seals plain into out (reset first) under keys->data with a fresh random
 * nonce; context is a NUL-terminated string of at most CRYPT_CONTEXT_MAX
 * bytes (else, or NULL: -EINVAL).  0, -EINVAL,
 * CKS_E_LIMIT (len > CRYPT_MAX_PLAIN), -ENOMEM, -EIO (no randomness).  On
 * failure out is empty. */
int crypt_seal(const struct crypt_keys *k, const char *context, const uint8_t *plain, size_t len,
               struct buf *out);
/* Opens a sealed object into out (reset first; must not alias obj).  0,
 * CKS_E_FORMAT (short, bad magic, reserved bytes not zero), CKS_E_VERSION
 * (unknown version or algorithm), CKS_E_AUTH (wrong key, wrong context or
 * altered object), CKS_E_LIMIT (over CRYPT_MAX_PLAIN), -EINVAL (context),
 * -ENOMEM.  On failure out is empty: no unauthenticated byte is handed
 * out. */
int crypt_open(const struct crypt_keys *k, const char *context, const uint8_t *obj, size_t len,
               struct buf *out);
/* The first bytes of a sealed object's plaintext, up to want of them, from
 * a prefix of the object (its first CRYPT_HEADER_LEN + want bytes; fewer
 * give fewer), decrypted WITHOUT authentication: for presence checks that
 * read a header only (verify --quick), never for data that is used.  A
 * prefix reaching past the plaintext yields the tag's bytes as garbage:
 * the caller checks what it reads.  0,
 * CKS_E_FORMAT, CKS_E_VERSION, -ENOMEM, -EIO. */
int crypt_peek(const struct crypt_keys *k, const uint8_t *prefix, size_t len, size_t want,
               struct buf *out);
/* 1 when obj starts with the envelope's magic, else 0 (a plaintext
 * repository's objects never do: they start with a chunk header or text). */
int crypt_is_sealed(const uint8_t *obj, size_t len);

/* The keyed FastCDC gear table: HKDF-Expand-SHA256(keys->gear, "ckptsync
 * gear table", 2048 bytes) read as 256 big-endian 64-bit words, so the
 * table (and every cut point) is the same on every platform.  For
 * fastcdc_init_gear().  0, -ENOMEM, -EIO. */
int crypt_gear(const struct crypt_keys *k, uint64_t gear[256]);

/* The primitives underneath, exposed for key slots and known-answer tests. */

/* HKDF-SHA256 (RFC 5869), extract and expand; salt may be empty. */
int crypt_hkdf(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt, size_t salt_len,
               const uint8_t *info, size_t info_len, uint8_t *out, size_t out_len);
/* scrypt (RFC 7914).  Refuses (CKS_E_LIMIT) parameters whose memory,
 * 128 * r * (n + p + 2) bytes, exceeds CRYPT_SCRYPT_MAX_MEM; -EINVAL unless
 * n is a power of two >= 2 and r, p >= 1.  Callers that take parameters
 * from outside bound them tighter first (keyslot.h). */
#define CRYPT_SCRYPT_MAX_MEM ((uint64_t)1 << 30)
int crypt_scrypt(const uint8_t *pass, size_t pass_len, const uint8_t *salt, size_t salt_len,
                 uint64_t n, uint32_t r, uint32_t p, uint8_t *out, size_t out_len);
/* AES-256-GCM with a 96-bit nonce the caller guarantees is never reused
 * under key; out holds len bytes (may equal in).  decrypt returns
 * CKS_E_AUTH on a tag mismatch and then zeroes out. */
int crypt_aead_encrypt(const uint8_t key[CRYPT_KEY_LEN], const uint8_t nonce[CRYPT_NONCE_LEN],
                       const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len,
                       uint8_t *out, uint8_t tag[CRYPT_TAG_LEN]);
int crypt_aead_decrypt(const uint8_t key[CRYPT_KEY_LEN], const uint8_t nonce[CRYPT_NONCE_LEN],
                       const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len,
                       const uint8_t tag[CRYPT_TAG_LEN], uint8_t *out);
/* len bytes from OpenSSL's CSPRNG: 0 or -EIO. */
int crypt_random(uint8_t *out, size_t len);

#endif
