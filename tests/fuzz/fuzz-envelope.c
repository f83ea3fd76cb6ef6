/*
 * fuzz-envelope.c — sealed objects arrive from regions we do not trust.
 *
 * (a) Open the input with a fixed key and context.  The result must be a
 *     documented code; a failure leaves the output empty; a success
 *     returns exactly size - CRYPT_OVERHEAD bytes (only the corpus's seeds,
 *     sealed under this key, can succeed).  The sanitizers catch overruns.
 * (b) Round trip: seal the input as plaintext, open it, abort() on any
 *     mismatch, and check that another context does not open it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/crypt.h"

#define FUZZ_MAX_PLAIN (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fuzz_context[] = "chunks/fuzz";

static void fuzz_fail(const char *what, int r)
{
    fprintf(stderr, "fuzz-envelope: %s (%d: %s)\n", what, r, err_str(r));
    abort();
}

/* The corpus's seeds are sealed under crypt_derive(00 01 .. 1f, "fuzz"). */
static const struct crypt_keys *fuzz_keys(void)
{
    static struct crypt_keys k;
    static int done;
    if (!done) {
        uint8_t master[CRYPT_KEY_LEN];
        for (size_t i = 0; i < sizeof(master); i++)
            master[i] = (uint8_t)i;
        int r = crypt_derive(master, (const uint8_t *)"fuzz", 4, &k);
        if (r < 0)
            fuzz_fail("derive failed", r);
        done = 1;
    }
    return &k;
}

static void open_hostile(const uint8_t *data, size_t size)
{
    struct buf out = BUF_INIT;
    int r = crypt_open(fuzz_keys(), fuzz_context, data, size, &out);
    if (r != 0 && r != CKS_E_FORMAT && r != CKS_E_VERSION && r != CKS_E_AUTH && r != -ENOMEM)
        fuzz_fail("open returned an undocumented code", r);
    if (r < 0 && out.len != 0)
        fuzz_fail("open failed but left output", r);
    if (r == 0 && out.len != size - CRYPT_OVERHEAD)
        fuzz_fail("open returned the wrong length", r);
    if (r == 0 && !crypt_is_sealed(data, size))
        fuzz_fail("opened an object without the magic", r);
    buf_free(&out);
}

static void round_trip(const uint8_t *data, size_t size)
{
    struct buf obj = BUF_INIT, out = BUF_INIT;
    int r = crypt_seal(fuzz_keys(), fuzz_context, data, size, &obj);
    if (r < 0)
        fuzz_fail("seal failed", r);
    if (obj.len != size + CRYPT_OVERHEAD || !crypt_is_sealed(obj.data, obj.len))
        fuzz_fail("sealed object has the wrong shape", r);
    if ((r = crypt_open(fuzz_keys(), fuzz_context, obj.data, obj.len, &out)) < 0)
        fuzz_fail("a fresh object does not open", r);
    if (out.len != size || (size && memcmp(out.data, data, size) != 0))
        fuzz_fail("round trip changed the plaintext", r);
    if (crypt_open(fuzz_keys(), "chunks/fuzz2", obj.data, obj.len, &out) != CKS_E_AUTH)
        fuzz_fail("another context opened the object", r);
    buf_free(&obj);
    buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    open_hostile(data, size);
    if (size <= FUZZ_MAX_PLAIN)
        round_trip(data, size);
    return 0;
}
