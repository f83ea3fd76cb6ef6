/*
 * fuzz-tensorhint.c — the safetensors header reader on arbitrary bytes.
 *
 * The input is a file's start; its size is the input's length plus a
 * number taken from the first bytes, so offsets past the input are
 * exercised too.  Whatever parses must be sorted, disjoint, inside the
 * file's data section and of width 2 or 4, and widths asked of any range
 * must be 0, 2 or 4.  Any violation aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tensorhint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 9)
        return 0;
    uint64_t extra = data[0] | (uint64_t)data[1] << 8; /* bytes of data past the input */
    const uint8_t *head = data + 2;
    size_t len = size - 2;
    uint64_t file_size = len + extra;
    size_t need = tensorhint_need(head, len, file_size);
    if (need && (need < 10 || need > file_size))
        abort();
    struct tensorhint h = TENSORHINT_INIT;
    int r = tensorhint_parse(head, len, file_size, &h);
    if (r < 0 && (h.n || h.v))
        abort();
    for (size_t i = 0; i < h.n; i++) {
        const struct tensorhint_range *g = &h.v[i];
        if (g->begin < need || g->end > file_size || g->begin >= g->end ||
            (g->width != 2 && g->width != 4) || (i && g->begin < h.v[i - 1].end))
            abort();
    }
    for (uint64_t off = 0; off < file_size + 8; off += 1 + file_size / 7) {
        unsigned w = tensorhint_width(&h, off, 1 + (size_t)(off % 4096));
        if (w != 0 && w != 2 && w != 4)
            abort();
    }
    tensorhint_free(&h);
    return 0;
}
