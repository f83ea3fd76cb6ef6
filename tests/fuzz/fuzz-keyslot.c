/*
 * fuzz-keyslot.c — key slots are read from regions we do not trust.
 *
 * (a) Parse the input as a slot.  The result must be a documented code
 *     and a parsed slot must be within the scrypt bounds.  Unwrap it with
 *     a small fixed secret only when its KDF is cheap (a key file, or
 *     scrypt with N * r * p <= FUZZ_MAX_WORK): the fuzzer must never run
 *     a large scrypt.  Unwrap must give 0 or CKS_E_AUTH (-EINVAL for a
 *     secret of the wrong size), and a success only for the fixed master.
 * (b) Round trip: wrap a master taken from the input under a key file
 *     also taken from it, parse, unwrap, and abort() on any mismatch.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/keyslot.h"

#define FUZZ_MAX_WORK 1024u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t fuzz_pass[] = "fuzz";
/* 31 characters and the NUL: 32 bytes */
static const uint8_t fuzz_key[CRYPT_KEY_LEN] = "0123456789abcdef0123456789abcde";

static void fuzz_fail(const char *what, int r)
{
    fprintf(stderr, "fuzz-keyslot: %s (%d: %s)\n", what, r, err_str(r));
    abort();
}

static void parse_hostile(const uint8_t *data, size_t size)
{
    struct keyslot s;
    uint8_t master[CRYPT_KEY_LEN];

    int r = keyslot_parse(data, size, &s);
    if (r != 0 && r != CKS_E_FORMAT && r != CKS_E_VERSION && r != CKS_E_DIGEST && r != CKS_E_LIMIT)
        fuzz_fail("parse returned an undocumented code", r);
    if (r < 0)
        return;
    if (s.kind == KEYSLOT_PASSPHRASE && keyslot_scrypt_check(s.n, s.r, s.p) < 0)
        fuzz_fail("parse accepted scrypt parameters out of bounds", r);
    if (s.kind == KEYSLOT_PASSPHRASE && s.n * s.r * s.p > FUZZ_MAX_WORK)
        return;
    const uint8_t *secret = s.kind == KEYSLOT_KEYFILE ? fuzz_key : fuzz_pass;
    size_t len = s.kind == KEYSLOT_KEYFILE ? sizeof(fuzz_key) : sizeof(fuzz_pass) - 1;
    r = keyslot_unwrap(&s, secret, len, master);
    if (r != 0 && r != CKS_E_AUTH)
        fuzz_fail("unwrap returned an undocumented code", r);
    /* The corpus's valid slots wrap the master 00 01 .. 1f. */
    for (size_t i = 0; r == 0 && i < CRYPT_KEY_LEN; i++)
        if (master[i] != i)
            fuzz_fail("unwrap gave a master that was never wrapped", r);
}

static void round_trip(const uint8_t *data, size_t size)
{
    uint8_t master[CRYPT_KEY_LEN] = {0}, key[CRYPT_KEY_LEN] = {0}, back[CRYPT_KEY_LEN];
    struct buf b = BUF_INIT;
    struct keyslot s;

    memcpy(master, data, size < CRYPT_KEY_LEN ? size : CRYPT_KEY_LEN);
    if (size > CRYPT_KEY_LEN)
        memcpy(key, data + CRYPT_KEY_LEN,
               size - CRYPT_KEY_LEN < CRYPT_KEY_LEN ? size - CRYPT_KEY_LEN : CRYPT_KEY_LEN);
    int r = keyslot_wrap_keyfile(master, key, &b);
    if (r < 0)
        fuzz_fail("wrap failed", r);
    if ((r = keyslot_parse(b.data, b.len, &s)) < 0)
        fuzz_fail("a slot just written does not parse", r);
    if ((r = keyslot_unwrap(&s, key, sizeof(key), back)) < 0)
        fuzz_fail("a slot just written does not unwrap", r);
    if (memcmp(back, master, sizeof(master)) != 0)
        fuzz_fail("round trip changed the master key", r);
    key[0] ^= 1;
    if (keyslot_unwrap(&s, key, sizeof(key), back) != CKS_E_AUTH)
        fuzz_fail("another key unwrapped the slot", r);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    parse_hostile(data, size);
    round_trip(data, size);
    return 0;
}
