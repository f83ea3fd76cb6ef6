/*
 * fuzz-gcrec.c — prune's record parser and name parsers on arbitrary bytes.
 *
 * The input is tried as a body, as a body whose "end" line is replaced by
 * one with the right digest (else almost every mutation stops at the
 * digest check), and as a NUL-terminated name (mark id, intent name,
 * sweep name).  Whatever parses must round-trip: a body encodes back to
 * the same bytes (the format has one spelling) and parses to the same
 * record, every item (plain or recipe) found in it again; a parsed intent name forms again from its
 * parts' time and ttl with the same prefix.  Any difference aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/gcrec.h"
#include "engine/hash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void body(const uint8_t *data, size_t size)
{
    struct gcrec g, back;
    struct buf out = BUF_INIT;
    if (gcrec_parse(data, size, &g) == 0) {
        if (gcrec_encode(&g, &out) < 0 || out.len != size || memcmp(out.data, data, size))
            abort();
        if (gcrec_parse(out.data, out.len, &back) < 0 || back.kind != g.kind ||
            back.nchunks != g.nchunks || back.nsnaps != g.nsnaps || back.nintents != g.nintents ||
            back.time != g.time || back.expires != g.expires || back.seq != g.seq ||
            strcmp(back.mark, g.mark) || strcmp(back.host, g.host) || strcmp(back.boot, g.boot))
            abort();
        for (size_t i = 0; i < g.nchunks; i++)
            if (!gcrec_has_object(&back, g.chunks[i].id, g.chunks[i].recipe, g.chunks[i].sig) ||
                (!g.chunks[i].recipe && !gcrec_has_chunk(&back, g.chunks[i].id)))
                abort();
        gcrec_free(&back);
    }
    gcrec_free(&g);
    buf_free(&out);
}

/* The input with its last line replaced by the right "end <digest>". */
static void body_redigested(const uint8_t *data, size_t size)
{
    size_t cut = size;
    while (cut > 0 && data[cut - 1] != '\n')
        cut--;
    if (cut == size && size > 0) { /* ends in a newline: drop the last line */
        cut = size - 1;
        while (cut > 0 && data[cut - 1] != '\n')
            cut--;
    }
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];
    uint8_t *p = malloc(cut + 4 + HASH_HEX_LEN + 1 + 1);
    if (!p)
        return;
    memcpy(p, data, cut);
    hash_sha256(data, cut, d);
    hex_encode(d, HASH_LEN, hex);
    memcpy(p + cut, "end ", 4);
    memcpy(p + cut + 4, hex, HASH_HEX_LEN);
    p[cut + 4 + HASH_HEX_LEN] = '\n';
    body(p, cut + 4 + HASH_HEX_LEN + 1);
    free(p);
}

static void names(const uint8_t *data, size_t size)
{
    char s[128], again[GC_INTENT_MAX + 1];
    int64_t t, e;
    uint64_t ttl;
    if (size >= sizeof(s))
        return;
    memcpy(s, data, size);
    s[size] = 0;
    if (gc_mark_check(s) && gc_mark_time(s) < 0)
        abort();
    if (gc_intent_parse(s, &t, &ttl) == 0) {
        if (gc_intent_make(t, ttl, again) < 0 || strncmp(again, s, strlen(s) - 16))
            abort();
    }
    (void)gc_sweep_parse(s, &e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    body(data, size);
    body_redigested(data, size);
    names(data, size);
    return 0;
}
