/*
 * keyslot.h — key slots: small text objects, each of which unlocks the one
 * master key of an encrypted repository with its own secret (a passphrase
 * or a key file).  Adding a slot wraps the master key once more; removing
 * one deletes its object and re-encrypts nothing (crypt.h, threat model).
 *
 *   ckptsync-key 1
 *   kind passphrase                  (or: kind keyfile)
 *   kdf scrypt <N> <r> <p>           (or: kdf hkdf)
 *   salt <64 hex>
 *   wrapped <120 hex: nonce(12) || AES-256-GCM(master)(32) || tag(16)>
 *   end <sha256 hex of every byte before this line>
 *
 * The key-encryption key is scrypt(passphrase, salt, N, r, p) for a
 * passphrase, HKDF-SHA256(key file's 32 bytes, salt, "ckptsync keyslot
 * keyfile") for a key file; the salt is 32 random bytes per slot.  The AAD
 * of the wrap is the text of the first four lines exactly as written, so a
 * slot whose kind, KDF parameters or salt were changed does not unwrap
 * (a weakened N cannot be passed off with the old ciphertext).  The `end`
 * digest catches damage before any scrypt runs.
 *
 * A slot is read from regions that are not trusted: keyslot_parse is
 * strict (one spelling of everything: lower-case hex, decimal without
 * leading zeros, fixed line order) and bounds the scrypt parameters, so
 * that a hostile slot cannot make unwrapping take the machine's memory or
 * minutes of CPU: N a power of two in [2, 2^20], 1 <= r <= 32, 1 <= p <= 16,
 * memory 128 * r * N <= 256 MiB, work N * r * p <= 2^22 (16 times the
 * default).  Wrapping refuses the same parameters, so every slot written
 * can be read.
 *
 * Pure transforms; thread-safe (no shared state).  Secrets passed in are
 * not kept; the KEK is wiped before every return.
 */
#ifndef CKS_KEYSLOT_H
#define CKS_KEYSLOT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/crypt.h"

#define KEYSLOT_VERSION 1
#define KEYSLOT_MAX_BYTES 1024
#define KEYSLOT_SALT_LEN 32
#define KEYSLOT_WRAPPED_LEN (CRYPT_NONCE_LEN + CRYPT_KEY_LEN + CRYPT_TAG_LEN)
/* Longest passphrase taken (bytes). */
#define KEYSLOT_PASS_MAX 4096

/* Default scrypt parameters: ~32 MiB, well under a second. */
#define KEYSLOT_SCRYPT_N 32768u
#define KEYSLOT_SCRYPT_R 8u
#define KEYSLOT_SCRYPT_P 1u
/* Bounds on parameters read from a slot. */
#define KEYSLOT_SCRYPT_N_MAX ((uint64_t)1 << 20)
#define KEYSLOT_SCRYPT_R_MAX 32u
#define KEYSLOT_SCRYPT_P_MAX 16u
#define KEYSLOT_SCRYPT_MEM_MAX ((uint64_t)256 << 20)
#define KEYSLOT_SCRYPT_WORK_MAX ((uint64_t)1 << 22)

enum keyslot_kind {
    KEYSLOT_PASSPHRASE = 1,
    KEYSLOT_KEYFILE = 2,
};

struct keyslot {
    enum keyslot_kind kind;
    uint64_t n; /* scrypt parameters; 0 for a key file */
    uint32_t r, p;
    uint8_t salt[KEYSLOT_SALT_LEN];
    uint8_t wrapped[KEYSLOT_WRAPPED_LEN];
};

/* 0, or CKS_E_LIMIT when (n, r, p) are outside the bounds above. */
int keyslot_scrypt_check(uint64_t n, uint32_t r, uint32_t p);

/* Write a new slot for master into out (reset first), with fresh random
 * salt and nonce.  0, -EINVAL (empty or over-long passphrase), CKS_E_LIMIT
 * (scrypt parameters out of bounds), -ENOMEM, -EIO.  On failure out is
 * empty. */
int keyslot_wrap_passphrase(const uint8_t master[CRYPT_KEY_LEN], const uint8_t *pass,
                            size_t pass_len, uint64_t n, uint32_t r, uint32_t p, struct buf *out);
int keyslot_wrap_keyfile(const uint8_t master[CRYPT_KEY_LEN], const uint8_t key[CRYPT_KEY_LEN],
                         struct buf *out);

/* 0, CKS_E_FORMAT (malformed), CKS_E_VERSION (unknown version or kind),
 * CKS_E_DIGEST (the end line does not match), CKS_E_LIMIT (scrypt
 * parameters out of bounds).  *ret is written only on success. */
int keyslot_parse(const uint8_t *text, size_t len, struct keyslot *ret);

/* Unwraps master with secret (the passphrase, or the key file's 32
 * bytes).  0, CKS_E_AUTH (wrong secret, or a slot altered since it was
 * written), -EINVAL (secret of the wrong size for the kind), CKS_E_LIMIT,
 * -ENOMEM, -EIO.  master is written only on success. */
int keyslot_unwrap(const struct keyslot *s, const uint8_t *secret, size_t secret_len,
                   uint8_t master[CRYPT_KEY_LEN]);

#endif
