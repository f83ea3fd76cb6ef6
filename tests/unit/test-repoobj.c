/*
 * test-repoobj.c — the `repo` object: round trips (the encoder is
 * canonical, and appends without hashing what the buffer already held),
 * and a table of damaged objects that the parser must reject with the
 * right code and line, leaving its output untouched.
 *
 * The table rows are object bodies (every line before "end"); the test
 * appends an "end" line with the right digest unless the row says
 * otherwise, so that each row reaches the check it is about instead of
 * stopping at the checksum.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/fastcdc.h"
#include "engine/hash.h"
#include "engine/repoobj.h"

#define ID "0123456789abcdef0123456789abcdef"
#define MAGIC "ckptsync-repo 1\n"
#define IDL "id " ID "\n"
#define CHUNKER "chunker fastcdc2020 524288 2097152 8388608 1\n"
#define FIXED "hash sha256\ncompression zstd\nencryption none\n"
#define BODY MAGIC IDL CHUNKER FIXED

static void check_round_trip(const struct repoobj *o)
{
    struct buf out = BUF_INIT, again = BUF_INIT, err = BUF_INIT;
    struct repoobj back;

    assert_int_equal(repoobj_encode(o, &out), 0);
    assert_true(out.len <= REPOOBJ_MAX_BYTES);
    assert_int_equal(strlen(buf_str(&out)), out.len);
    memset(&back, 0x5a, sizeof(back));
    if (repoobj_parse(out.data, out.len, &back, &err) != 0)
        fail_msg("parse of encoded object failed: %s\n%s", buf_str(&err), buf_str(&out));
    assert_string_equal(back.id, o->id);
    assert_int_equal(back.chunk_min, o->chunk_min);
    assert_int_equal(back.chunk_avg, o->chunk_avg);
    assert_int_equal(back.chunk_max, o->chunk_max);
    assert_int_equal(back.normalization, o->normalization);
    assert_int_equal(back.encrypted, o->encrypted);
    if (o->encrypted)
        assert_memory_equal(back.key_check, o->key_check, sizeof(o->key_check));
    assert_int_equal(repoobj_encode(&back, &again), 0);
    assert_int_equal(again.len, out.len);
    assert_memory_equal(again.data, out.data, out.len);
    buf_free(&out);
    buf_free(&again);
    buf_free(&err);
}

static void test_round_trip(void **state)
{
    static const struct repoobj objs[] = {
        {ID, 524288, 2097152, 8388608, 1, false, {0}},
        {"ffffffffffffffffffffffffffffffff", 64, 64, 64, 0, false, {0}},
        {"00000000000000000000000000000000", 64, 1024, FASTCDC_MAX_SIZE, 3, false, {0}},
        {ID, 1 << 20, 1 << 22, 1 << 24, 2, false, {0}},
        {ID, 12345, 67890, 1000001, 1, false, {0}}, /* not powers of two */
        {ID, 524288, 2097152, 8388608, 1, true, {0xab, 1, 2, 3, [31] = 0xff}}, /* encrypted */
    };
    for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
        struct fastcdc cdc;
        const struct repoobj *o = &objs[i];
        /* Only parameters the chunker accepts belong in this table. */
        assert_int_equal(
            fastcdc_init(&cdc, o->chunk_min, o->chunk_avg, o->chunk_max, o->normalization), 0);
        check_round_trip(o);
    }
}

/* The encoder appends, and its checksum covers only what it wrote. */
static void test_encode_appends(void **state)
{
    static const struct repoobj o = {ID, 524288, 2097152, 8388608, 1, false, {0}};
    struct buf out = BUF_INIT, alone = BUF_INIT;
    struct repoobj back;

    assert_int_equal(buf_puts(&out, "prefix\n"), 0);
    assert_int_equal(repoobj_encode(&o, &out), 0);
    assert_int_equal(repoobj_encode(&o, &alone), 0);
    assert_int_equal(out.len, 7 + alone.len);
    assert_memory_equal(out.data + 7, alone.data, alone.len);
    assert_int_equal(repoobj_parse(out.data + 7, out.len - 7, &back, NULL), 0);
    assert_string_equal(back.id, ID);
    /* The documented text, byte for byte. */
    assert_memory_equal(alone.data, BODY "end ", strlen(BODY "end "));
    buf_free(&out);
    buf_free(&alone);
}

enum end_kind {
    END_GOOD,  /* "end <right digest>\n" */
    END_NONE,  /* no end line */
    END_WRONG, /* a digest of other bytes */
    END_UPPER, /* the right digest in upper case */
    END_SHORT, /* 63 hex digits */
    END_NO_LF, /* the right digest, no final newline */
};

struct reject {
    const char *name;
    const char *body; /* '~' becomes a NUL byte */
    enum end_kind end;
    const char *trail; /* appended after the end line */
    int expect;
    unsigned line; /* expected "line N:" in the message (0: any) */
};

static const struct reject rejects[] = {
    {"empty object", "", END_NONE, NULL, CKS_E_FORMAT, 1},
    {"bad magic", "ckptsync-rep 1\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 1},
    {"manifest magic", "ckptsync-manifest 1\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 1},
    {"magic without version", "ckptsync-repo\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 1},
    {"magic upper case", "CKPTSYNC-REPO 1\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 1},
    {"leading blank line", "\n" BODY, END_GOOD, NULL, CKS_E_FORMAT, 1},
    {"version 2", "ckptsync-repo 2\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_VERSION, 1},
    {"version 0", "ckptsync-repo 0\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_VERSION, 1},
    {"version 01", "ckptsync-repo 01\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_VERSION, 1},
    {"version 1.0", "ckptsync-repo 1.0\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_VERSION, 1},
    {"version empty", "ckptsync-repo \n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_VERSION, 1},
    {"CRLF", "ckptsync-repo 1\r\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_VERSION, 1},
    {"id 31 hex", MAGIC "id 0123456789abcdef0123456789abcde\n" CHUNKER FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 2},
    {"id 33 hex", MAGIC "id 0123456789abcdef0123456789abcdef0\n" CHUNKER FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 2},
    {"id not hex", MAGIC "id 0123456789abcdef0123456789abcdeg\n" CHUNKER FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 2},
    {"id upper case", MAGIC "id 0123456789ABCDEF0123456789abcdef\n" CHUNKER FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 2},
    {"id two spaces", MAGIC "id  0123456789abcdef0123456789abcdef\n" CHUNKER FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 2},
    {"id trailing space", MAGIC "id " ID " \n" CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 2},
    {"id keyword", MAGIC "ID " ID "\n" CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 2},
    {"id missing", MAGIC CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 2},
    {"chunker missing", MAGIC IDL FIXED, END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker algorithm", MAGIC IDL "chunker fastcdc2016 524288 2097152 8388608 1\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker min below 64", MAGIC IDL "chunker fastcdc2020 63 2097152 8388608 1\n" FIXED, END_GOOD,
     NULL, CKS_E_FORMAT, 3},
    {"chunker min 0", MAGIC IDL "chunker fastcdc2020 0 2097152 8388608 1\n" FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 3},
    {"chunker min > avg", MAGIC IDL "chunker fastcdc2020 4194304 2097152 8388608 1\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker avg > max", MAGIC IDL "chunker fastcdc2020 524288 16777216 8388608 1\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker max above 256 MiB",
     MAGIC IDL "chunker fastcdc2020 524288 2097152 268435457 1\n" FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 3},
    {"chunker max 2^64-1",
     MAGIC IDL "chunker fastcdc2020 524288 2097152 18446744073709551615 1\n" FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 3},
    {"chunker overflow",
     MAGIC IDL "chunker fastcdc2020 524288 2097152 18446744073709551616 1\n" FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 3},
    {"chunker nc 4", MAGIC IDL "chunker fastcdc2020 524288 2097152 8388608 4\n" FIXED, END_GOOD,
     NULL, CKS_E_FORMAT, 3},
    {"chunker nc 2^32+1", MAGIC IDL "chunker fastcdc2020 524288 2097152 8388608 4294967297\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker mask out of table", MAGIC IDL "chunker fastcdc2020 64 64 64 2\n" FIXED, END_GOOD,
     NULL, CKS_E_FORMAT, 3},
    {"chunker leading zero", MAGIC IDL "chunker fastcdc2020 0524288 2097152 8388608 1\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker nc 01", MAGIC IDL "chunker fastcdc2020 524288 2097152 8388608 01\n" FIXED, END_GOOD,
     NULL, CKS_E_FORMAT, 3},
    {"chunker plus sign", MAGIC IDL "chunker fastcdc2020 +524288 2097152 8388608 1\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker negative", MAGIC IDL "chunker fastcdc2020 -1 2097152 8388608 1\n" FIXED, END_GOOD,
     NULL, CKS_E_FORMAT, 3},
    {"chunker three numbers", MAGIC IDL "chunker fastcdc2020 524288 2097152 8388608\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker five numbers", MAGIC IDL "chunker fastcdc2020 524288 2097152 8388608 1 1\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker two spaces", MAGIC IDL "chunker fastcdc2020 524288  2097152 8388608 1\n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker trailing space", MAGIC IDL "chunker fastcdc2020 524288 2097152 8388608 1 \n" FIXED,
     END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"chunker tab", MAGIC IDL "chunker fastcdc2020 524288\t2097152 8388608 1\n" FIXED, END_GOOD,
     NULL, CKS_E_FORMAT, 3},
    {"hash blake3", MAGIC IDL CHUNKER "hash blake3\ncompression zstd\nencryption none\n", END_GOOD,
     NULL, CKS_E_VERSION, 4},
    {"compression none", MAGIC IDL CHUNKER "hash sha256\ncompression none\nencryption none\n",
     END_GOOD, NULL, CKS_E_VERSION, 5},
    {"encryption aes", MAGIC IDL CHUNKER "hash sha256\ncompression zstd\nencryption aes256gcm\n",
     END_GOOD, NULL, CKS_E_VERSION, 6},
    {"hash line missing", MAGIC IDL CHUNKER "compression zstd\nencryption none\n", END_GOOD, NULL,
     CKS_E_VERSION, 4},
    {"lines swapped", MAGIC IDL CHUNKER "compression zstd\nhash sha256\nencryption none\n",
     END_GOOD, NULL, CKS_E_VERSION, 4},
    {"encryption line missing", MAGIC IDL CHUNKER "hash sha256\ncompression zstd\n", END_GOOD, NULL,
     CKS_E_VERSION, 6},
    {"id line twice", MAGIC IDL IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 3},
    {"end missing", BODY, END_NONE, NULL, CKS_E_FORMAT, 7},
    {"truncated mid-line", MAGIC IDL "chunker fastcdc2020 524", END_NONE, NULL, CKS_E_FORMAT, 3},
    {"end wrong digest", BODY, END_WRONG, NULL, CKS_E_DIGEST, 7},
    {"end upper case", BODY, END_UPPER, NULL, CKS_E_FORMAT, 7},
    {"end 63 hex", BODY, END_SHORT, NULL, CKS_E_FORMAT, 7},
    {"end without newline", BODY, END_NO_LF, NULL, CKS_E_FORMAT, 7},
    {"digest over other body", MAGIC "id ffffffffffffffffffffffffffffffff\n" CHUNKER FIXED,
     END_WRONG, NULL, CKS_E_DIGEST, 7},
    {"trailing byte", BODY, END_GOOD, "x", CKS_E_FORMAT, 8},
    {"trailing newline", BODY, END_GOOD, "\n", CKS_E_FORMAT, 8},
    {"second object", BODY, END_GOOD, BODY, CKS_E_FORMAT, 8},
    {"NUL in magic line", "ckptsync-repo 1~\n" IDL CHUNKER FIXED, END_GOOD, NULL, CKS_E_FORMAT, 1},
    {"NUL in id", MAGIC "id 0123456789abcdef~123456789abcdef\n" CHUNKER FIXED, END_GOOD, NULL,
     CKS_E_FORMAT, 2},
    {"NUL after hash", MAGIC IDL CHUNKER "hash sha256~\ncompression zstd\nencryption none\n",
     END_GOOD, NULL, CKS_E_FORMAT, 4},
    {"truncated in hash line", MAGIC IDL CHUNKER "hash sha", END_NONE, NULL, CKS_E_FORMAT, 4},
    {"NUL after end", BODY, END_GOOD, "~", CKS_E_FORMAT, 8},
};

/* The row's object, heap-allocated to its exact length so that ASan sees
 * any read past it. */
static uint8_t *build(const struct reject *r, size_t *ret_len)
{
    struct buf b = BUF_INIT, other = BUF_INIT;
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];

    assert_int_equal(buf_puts(&b, r->body), 0);
    for (size_t i = 0; i < b.len; i++)
        if (b.data[i] == '~')
            b.data[i] = 0;
    hash_sha256(b.data, b.len, d);
    if (r->end == END_WRONG) {
        assert_int_equal(buf_puts(&other, BODY), 0);
        if (!strcmp(r->body, BODY))
            assert_int_equal(buf_puts(&other, "x"), 0);
        hash_sha256(other.data, other.len, d);
    }
    hex_encode(d, HASH_LEN, hex);
    if (r->end == END_UPPER)
        for (char *p = hex; *p; p++)
            if (*p >= 'a' && *p <= 'f')
                *p = (char)(*p - 'a' + 'A');
    if (r->end == END_SHORT)
        hex[HASH_HEX_LEN - 1] = 0;
    if (r->end != END_NONE)
        assert_int_equal(buf_printf(&b, "end %s%s", hex, r->end == END_NO_LF ? "" : "\n"), 0);
    if (r->trail) {
        size_t at = b.len;
        assert_int_equal(buf_puts(&b, r->trail), 0);
        for (size_t i = at; i < b.len; i++)
            if (b.data[i] == '~')
                b.data[i] = 0;
    }
    uint8_t *p = malloc(b.len ? b.len : 1);
    assert_non_null(p);
    if (b.len)
        memcpy(p, b.data, b.len);
    *ret_len = b.len;
    buf_free(&b);
    buf_free(&other);
    return p;
}

static void test_rejects(void **state)
{
    struct buf err = BUF_INIT;
    for (size_t i = 0; i < sizeof(rejects) / sizeof(rejects[0]); i++) {
        const struct reject *r = &rejects[i];
        size_t len;
        uint8_t *obj = build(r, &len);
        struct repoobj o, untouched;
        memset(&o, 0xa5, sizeof(o));
        untouched = o;
        buf_reset(&err);
        int got = repoobj_parse(obj, len, &o, &err);
        if (got != r->expect)
            fail_msg("%s: got %d (%s), expected %d (%s); message \"%s\"", r->name, got,
                     err_str(got), r->expect, err_str(r->expect), buf_str(&err));
        if (memcmp(&o, &untouched, sizeof(o)) != 0)
            fail_msg("%s: output written on failure", r->name);
        if (strncmp(buf_str(&err), "line ", 5) != 0)
            fail_msg("%s: message \"%s\" does not name a line", r->name, buf_str(&err));
        if (r->line) {
            char want[32];
            snprintf(want, sizeof(want), "line %u: ", r->line);
            if (strncmp(buf_str(&err), want, strlen(want)) != 0)
                fail_msg("%s: message \"%s\", expected it to start with \"%s\"", r->name,
                         buf_str(&err), want);
        }
        /* A NULL err is allowed. */
        assert_int_equal(repoobj_parse(obj, len, &o, NULL), r->expect);
        free(obj);
    }
    buf_free(&err);
}

/* Every proper prefix of a valid object is refused. */
static void test_prefixes(void **state)
{
    static const struct repoobj o = {ID, 524288, 2097152, 8388608, 1, false, {0}};
    struct buf out = BUF_INIT;
    struct repoobj back;

    assert_int_equal(repoobj_encode(&o, &out), 0);
    for (size_t n = 0; n < out.len; n++) {
        uint8_t *p = malloc(n ? n : 1);
        assert_non_null(p);
        memcpy(p, out.data, n);
        int r = repoobj_parse(p, n, &back, NULL);
        if (r >= 0)
            fail_msg("prefix of %zu bytes accepted", n);
        free(p);
    }
    buf_free(&out);
}

static void test_oversize(void **state)
{
    static const struct repoobj o = {ID, 524288, 2097152, 8388608, 1, false, {0}};
    struct buf b = BUF_INIT, err = BUF_INIT;
    struct repoobj back;

    assert_int_equal(repoobj_encode(&o, &b), 0);
    size_t valid = b.len;
    while (b.len <= REPOOBJ_MAX_BYTES)
        assert_int_equal(buf_puts(&b, "padding padding padding\n"), 0);
    assert_int_equal(repoobj_parse(b.data, b.len, &back, &err), CKS_E_LIMIT);
    assert_non_null(strstr(buf_str(&err), "too large"));
    /* The size bound is checked before anything else. */
    assert_int_equal(repoobj_parse(b.data, REPOOBJ_MAX_BYTES + 1, &back, NULL), CKS_E_LIMIT);
    /* At exactly the bound, the trailing bytes are what is wrong. */
    assert_int_equal(repoobj_parse(b.data, REPOOBJ_MAX_BYTES, &back, NULL), CKS_E_FORMAT);
    assert_int_equal(repoobj_parse(b.data, valid, &back, NULL), 0);
    buf_free(&b);
    buf_free(&err);
}

/* A line too long for the parser's line buffer is refused, not cut. */
static void test_long_line(void **state)
{
    struct buf b = BUF_INIT;
    struct repoobj back;
    uint8_t d[HASH_LEN];
    char hex[HASH_HEX_LEN + 1];

    assert_int_equal(buf_puts(&b, MAGIC IDL "chunker fastcdc2020 524288 2097152 8388608 1"), 0);
    while (b.len < 600)
        assert_int_equal(buf_puts(&b, " "), 0);
    assert_int_equal(buf_puts(&b, "\n" FIXED), 0);
    hash_sha256(b.data, b.len, d);
    hex_encode(d, HASH_LEN, hex);
    assert_int_equal(buf_printf(&b, "end %s\n", hex), 0);
    assert_int_equal(repoobj_parse(b.data, b.len, &back, NULL), CKS_E_FORMAT);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip), cmocka_unit_test(test_encode_appends),
        cmocka_unit_test(test_rejects),    cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_oversize),   cmocka_unit_test(test_long_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
