/*
 * fuzz-tcodec.c — tensor codec payloads arrive inside chunk objects from
 * regions we do not trust.  The first input byte picks the mode:
 *
 * (a) even: decode the rest as a payload, with the raw length taken from
 *     the next 3 bytes (at most 1 MiB, as FUZZ_MAX_RAW).  It must return
 *     0 or a documented code; the sanitizers catch any overrun.  A payload
 *     that decodes is encoded again and must decode to the same bytes.
 * (b) odd: round trip: encode the rest with width 2 (bit 1 clear) or 4,
 *     check the payload against tcodec_bound, decode it and abort() on any
 *     mismatch; tcodec_pick runs on the same bytes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/tcodec.h"

#define FUZZ_MAX_RAW (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_fail(const char *what, int r)
{
    fprintf(stderr, "fuzz-tcodec: %s (%d: %s)\n", what, r, err_str(r));
    abort();
}

static void round_trip(const uint8_t *raw, size_t len, unsigned width)
{
    struct buf out = BUF_INIT;
    int r = tcodec_encode(raw, len, width, &out);
    if (r < 0)
        fuzz_fail("encode failed", r);
    if (out.len > tcodec_bound(len))
        fuzz_fail("payload above tcodec_bound", 0);
    uint8_t *dec = malloc(len ? len : 1);
    if (!dec)
        abort();
    r = tcodec_decode(out.data, out.len, dec, len);
    if (r < 0)
        fuzz_fail("decode of a fresh payload failed", r);
    if (len && memcmp(dec, raw, len) != 0)
        fuzz_fail("round trip changed the bytes", 0);
    free(dec);
    buf_free(&out);
}

static void decode_hostile(const uint8_t *data, size_t size)
{
    if (size < 3)
        return;
    size_t len =
        ((size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16) % (FUZZ_MAX_RAW + 1);
    uint8_t *raw = malloc(len ? len : 1);
    if (!raw)
        abort();
    int r = tcodec_decode(data + 3, size - 3, raw, len);
    if (r != 0 && r != CKS_E_FORMAT && r != -ENOMEM)
        fuzz_fail("decode returned an undocumented code", r);
    if (r == 0)
        round_trip(raw, len, data[3]);
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] % 2 == 0) {
        decode_hostile(data + 1, size - 1);
    } else if (size - 1 <= FUZZ_MAX_RAW) {
        round_trip(data + 1, size - 1, data[0] & 2 ? 4 : 2);
        (void)tcodec_pick(data + 1, size - 1, NULL);
    }
    return 0;
}
