/*
 * fuzz-handoff.c — the handoff parser on arbitrary bytes; what parses must
 * encode back to the same bytes (the format has one spelling).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/handoff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct handoff h;
    struct buf out = BUF_INIT;
    if (handoff_parse(data, size, &h) == 0) {
        if (handoff_encode(&h, &out) < 0 || out.len != size || memcmp(out.data, data, size))
            abort();
    }
    buf_free(&out);
    return 0;
}
