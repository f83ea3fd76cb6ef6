/*
 * fuzz-repoobj.c — the repo object parser on arbitrary bytes.
 *
 * The format has one spelling per object, so whatever parses must encode
 * back to exactly the input bytes; the parsed struct must also survive
 * encode -> parse unchanged.  Any difference aborts.
 *
 * A mutated input almost never keeps a valid trailing digest, which would
 * stop the parser at the checksum; so each input is also tried with its
 * last "end" line replaced by one carrying the right digest, letting
 * mutations reach the line parsers.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/hash.h"
#include "engine/repoobj.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const uint8_t *data, size_t size)
{
    struct repoobj o, back;
    struct buf out = BUF_INIT;
    if (repoobj_parse(data, size, &o, NULL) < 0)
        return;
    if (repoobj_encode(&o, &out) < 0)
        abort();
    if (out.len != size || memcmp(out.data, data, size) != 0)
        abort();
    if (repoobj_parse(out.data, out.len, &back, NULL) < 0)
        abort();
    if (strcmp(o.id, back.id) != 0 || o.chunk_min != back.chunk_min ||
        o.chunk_avg != back.chunk_avg || o.chunk_max != back.chunk_max ||
        o.normalization != back.normalization)
        abort();
    buf_free(&out);
}

/* Start of the last line that begins with "end " (or size if none). */
static size_t last_end_line(const uint8_t *data, size_t size)
{
    size_t found = size;
    for (size_t i = 0; i + 4 <= size; i++)
        if ((i == 0 || data[i - 1] == '\n') && memcmp(data + i, "end ", 4) == 0)
            found = i;
    return found;
}

static void with_fixed_digest(const uint8_t *data, size_t size)
{
    struct buf b = BUF_INIT;
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    size_t body = last_end_line(data, size);
    if (buf_append(&b, data, body) < 0)
        abort();
    if (body && data[body - 1] != '\n' && buf_puts(&b, "\n") < 0)
        abort();
    hash_sha256(b.data ? b.data : (const uint8_t *)"", b.len, d);
    hex_encode(d, HASH_LEN, hex);
    if (buf_puts(&b, "end ") < 0 || buf_puts(&b, hex) < 0 || buf_puts(&b, "\n") < 0)
        abort();
    round_trip(b.data, b.len);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    round_trip(data, size);
    with_fixed_digest(data, size);
    return 0;
}
