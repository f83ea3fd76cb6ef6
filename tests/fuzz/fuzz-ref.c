/*
 * fuzz-ref.c — the `latest` ref parser on arbitrary bytes.
 *
 * A ref has one spelling, so whatever parses must encode back to exactly
 * the input bytes and parse again to the same ref; and a ref must
 * supersede itself (ref_newer is reflexive), so a retried publish never
 * refuses its own ref.  Any difference aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ref f, back;
    struct buf out = BUF_INIT;
    if (ref_parse(data, size, &f) < 0)
        return 0;
    if (f.step < -1 || memchr(f.id, 0, sizeof(f.id)) == NULL)
        abort();
    if (ref_encode(&f, &out) < 0)
        abort();
    if (out.len != size || memcmp(out.data, data, size) != 0)
        abort();
    if (ref_parse(out.data, out.len, &back) < 0)
        abort();
    if (strcmp(f.id, back.id) != 0 || f.step != back.step)
        abort();
    if (!ref_newer(&f, &back))
        abort();
    buf_free(&out);
    return 0;
}
