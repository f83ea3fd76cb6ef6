/*
 * fuzz-lineage.c — the lineage key and body parsers on arbitrary bytes.
 *
 * The input is tried three ways: as a key (a NUL-terminated copy of at
 * most 1024 bytes), as a body, and as a body whose last "end" line is
 * replaced by one with the right digest (else almost every mutation stops
 * at the digest check).  Whatever parses must round-trip: a key forms
 * again into the same string and parses to the same fields, and a record
 * it names can be written and read back from it (else a record is written
 * that no reader accepts); a body
 * encodes back to the same bytes (the format has one spelling), parses to
 * the same record, and agrees with the key formed from it.  Any
 * difference aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/hash.h"
#include "engine/lineage.h"
#include "store/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY_MAX 1024

static int rec_equal(const struct lineage_rec *a, const struct lineage_rec *b)
{
    return a->kind == b->kind && !strcmp(a->run, b->run) && a->gen == b->gen &&
           !strcmp(a->id, b->id) && a->step == b->step && !strcmp(a->tag, b->tag) &&
           !strcmp(a->host, b->host) && !strcmp(a->instance, b->instance) && a->time == b->time &&
           !memcmp(a->manifest, b->manifest, HASH_LEN);
}

/* The record a key names, with the body's own fields filled in, encodes
 * and parses back under that key. */
static void write_and_read(const struct lineage_rec *named, const char *key)
{
    struct lineage_rec r = *named, back;
    struct buf out = BUF_INIT;
    memcpy(r.host, "h", 2);
    r.time = 1;
    if (r.kind == LINEAGE_COMMIT)
        memset(r.manifest, 0x5a, HASH_LEN);
    if (lineage_encode(&r, &out) < 0 || layout_record_read(key, out.data, out.len, &back) < 0 ||
        !rec_equal(&r, &back))
        abort();
    buf_free(&out);
}

static void key_round_trip(const uint8_t *data, size_t size)
{
    char key[KEY_MAX + 1], again[KEY_MAX];
    struct lineage_rec r, back;
    if (size > KEY_MAX)
        return;
    memcpy(key, data, size);
    key[size] = 0;
    if (layout_record_parse(key, &r) < 0)
        return;
    /* an embedded NUL ends the key: compare with what was parsed */
    if (layout_record(&r, again, sizeof(again)) < 0 || strcmp(again, key))
        abort();
    if (layout_record_parse(again, &back) < 0 || !rec_equal(&r, &back))
        abort();
    write_and_read(&r, key);
}

static void body_round_trip(const uint8_t *data, size_t size)
{
    struct lineage_rec r, back;
    struct buf out = BUF_INIT;
    char key[KEY_MAX];
    if (lineage_parse(data, size, &r) < 0)
        return;
    if (lineage_encode(&r, &out) < 0 || out.len != size || memcmp(out.data, data, size))
        abort();
    if (lineage_parse(out.data, out.len, &back) < 0 || !rec_equal(&r, &back))
        abort();
    /* the record names a key, and the body read from it agrees */
    if (layout_record(&r, key, sizeof(key)) < 0 ||
        layout_record_read(key, out.data, out.len, &back) < 0 || !rec_equal(&r, &back))
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
    hash_sha256(data, body, d);
    hex_encode(d, HASH_LEN, hex);
    if (buf_printf(&b, "end %s\n", hex) < 0)
        abort();
    body_round_trip(b.data, b.len);
    buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    key_round_trip(data, size);
    body_round_trip(data, size);
    if (size <= LINEAGE_MAX_BYTES)
        with_fixed_digest(data, size);
    return 0;
}
