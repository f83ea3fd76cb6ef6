/*
 * fuzz-layout.c — the key layout's parser (store/layout.h) on arbitrary
 * bytes: what a region lists is outside input.
 *
 * The input is a key (a NUL-terminated copy of at most 1024 bytes).
 * Whatever parses must build back into exactly the same key from its
 * fields (a key has one spelling), parse again to the same fields, have
 * no field that could climb ("..", ".", a '/'), and agree with the
 * encryption helpers (a key in a per-run folder names the run the parser
 * found).  A record key must round-trip through layout_record too.  Any
 * difference aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void field_safe(const char *f)
{
    if (strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, ".."))
        abort();
}

static void record_round_trip(const char *key)
{
    struct lineage_rec r, back;
    char again[LAYOUT_KEY_MAX];
    if (layout_record_parse(key, &r) < 0)
        return;
    if (layout_record(&r, again, sizeof(again)) < 0 || strcmp(again, key))
        abort();
    if (layout_record_parse(again, &back) < 0 || back.kind != r.kind || back.gen != r.gen ||
        back.step != r.step || strcmp(back.run, r.run) || strcmp(back.id, r.id) ||
        strcmp(back.tag, r.tag))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char key[LAYOUT_KEY_MAX + 1], again[LAYOUT_KEY_MAX];
    struct layout_key k, back;
    size_t top;
    if (size > LAYOUT_KEY_MAX)
        return 0;
    memcpy(key, data, size);
    key[size] = 0;
    record_round_trip(key);
    if (layout_parse(key, &k) < 0)
        return 0;
    field_safe(k.dir);
    field_safe(k.name);
    if (layout_key(k.kind, k.dir, k.name, again) < 0 || strcmp(again, key))
        abort();
    if (layout_parse(again, &back) < 0 || back.kind != k.kind || strcmp(back.dir, k.dir) ||
        strcmp(back.name, k.name))
        abort();
    int run_kind = layout_run_top(key, &top);
    if (run_kind >= 0 && (run_kind != (int)k.kind || strncmp(key + top, k.dir, strlen(k.dir))))
        abort();
    return 0;
}
