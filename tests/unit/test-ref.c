/*
 * test-ref.c — `latest` refs: round trips (the encoding is canonical), a
 * table of hostile refs the parser must refuse without touching its
 * output, and a table for ref_newer(): a known step outranks an unknown
 * one, a higher step wins, and between equal steps (or two unknown ones)
 * the later id wins, ids sorting by time.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/ref.h"

/* Snapshot ids as snapshot.c makes them: UTC time, microseconds, random. */
#define ID1 "20261201T000701.000001Z-0a1b2c3d"
#define ID2 "20261201T000702.000000Z-00000000"
#define ID3 "20261202T000000.000000Z-ffffffff"
#define ID64 "0123456789012345678901234567890123456789012345678901234567890123"

/* Parses exactly len bytes from a heap copy (so ASan sees any overrun). */
static int parse(const char *text, size_t len, struct ref *ret)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    memcpy(p, text, len);
    int r = ref_parse(p, len, ret);
    free(p);
    return r;
}

static void test_round_trip(void **state)
{
    static const struct {
        const char *id;
        int64_t step;
        const char *text;
    } rows[] = {
        {ID1, 1000, ID1 " 1000\n"},
        {ID2, -1, ID2 " -1\n"},
        {ID3, 0, ID3 " 0\n"},
        {"a", 1, "a 1\n"},
        {ID64, INT64_MAX, ID64 " 9223372036854775807\n"},
        {"A.b_c-9", 42, "A.b_c-9 42\n"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct ref f, back;
        struct buf out = BUF_INIT, again = BUF_INIT;
        memset(&f, 0, sizeof(f));
        memcpy(f.id, rows[i].id, strlen(rows[i].id) + 1);
        f.step = rows[i].step;
        assert_int_equal(ref_encode(&f, &out), 0);
        assert_string_equal(buf_str(&out), rows[i].text);
        assert_true(out.len <= REF_MAX_BYTES);
        memset(&back, 0x5a, sizeof(back));
        assert_int_equal(parse((const char *)out.data, out.len, &back), 0);
        assert_string_equal(back.id, rows[i].id);
        assert_int_equal(back.step, rows[i].step);
        assert_int_equal(ref_encode(&back, &again), 0);
        assert_int_equal(again.len, out.len);
        assert_memory_equal(again.data, out.data, out.len);
        buf_free(&out);
        buf_free(&again);
    }
}

/* The encoder appends to what the buffer holds. */
static void test_encode_appends(void **state)
{
    struct ref f = {ID1, 7};
    struct buf out = BUF_INIT;
    assert_int_equal(buf_puts(&out, "x"), 0);
    assert_int_equal(ref_encode(&f, &out), 0);
    assert_string_equal(buf_str(&out), "x" ID1 " 7\n");
    buf_free(&out);
}

struct reject {
    const char *name;
    const char *text;
    size_t len; /* 0: strlen(text) */
};

static const struct reject rejects[] = {
    {"empty", "", 0},
    {"newline only", "\n", 0},
    {"no newline", ID1 " 5", 0},
    {"no step", ID1 "\n", 0},
    {"no step after space", ID1 " \n", 0},
    {"empty id", " 5\n", 0},
    {"id starting with a dot", ".hidden 5\n", 0},
    {"id with a slash", "a/b 5\n", 0},
    {"id with dot-dot path", "../x 5\n", 0},
    {"id with a colon", "a:b 5\n", 0},
    {"id 65 characters", ID64 "4 5\n", 0},
    {"id non-ASCII", "caf\xc3\xa9 5\n", 0},
    {"leading space", " " ID1 " 5\n", 0},
    {"two spaces", ID1 "  5\n", 0},
    {"tab", ID1 "\t5\n", 0},
    {"trailing space", ID1 " 5 \n", 0},
    {"CRLF", ID1 " 5\r\n", 0},
    {"two newlines", ID1 " 5\n\n", 0},
    {"two refs", ID1 " 5\n" ID2 " 6\n", 0},
    {"step leading zero", ID1 " 05\n", 0},
    {"step 00", ID1 " 00\n", 0},
    {"step plus sign", ID1 " +5\n", 0},
    {"step -2", ID1 " -2\n", 0},
    {"step -0", ID1 " -0\n", 0},
    {"step -01", ID1 " -01\n", 0},
    {"step -", ID1 " -\n", 0},
    {"step hex", ID1 " 0x10\n", 0},
    {"step with letters", ID1 " 12a\n", 0},
    {"step exponent", ID1 " 1e3\n", 0},
    {"step INT64_MAX + 1", ID1 " 9223372036854775808\n", 0},
    {"step 2^64", ID1 " 18446744073709551616\n", 0},
    {"step huge", ID1 " 99999999999999999999999999999\n", 0},
    {"three fields", ID1 " 5 6\n", 0},
    {"NUL in id", "ab\0cd 5\n", 8},
    {"NUL in step", "abcd 5\0\n", 8},
    {"NUL at start", "\0abcd 5\n", 8},
    {"NUL instead of newline", "abcd 5\0", 7},
};

static void test_rejects(void **state)
{
    for (size_t i = 0; i < sizeof(rejects) / sizeof(rejects[0]); i++) {
        const struct reject *r = &rejects[i];
        struct ref f, untouched;
        memset(&f, 0xa5, sizeof(f));
        untouched = f;
        int got = parse(r->text, r->len ? r->len : strlen(r->text), &f);
        if (got != CKS_E_FORMAT)
            fail_msg("%s: got %d (%s), expected CKS_E_FORMAT", r->name, got, err_str(got));
        if (memcmp(&f, &untouched, sizeof(f)) != 0)
            fail_msg("%s: output written on failure", r->name);
    }
}

/* Size bounds: a ref of exactly REF_MAX_BYTES is read (and refused for its
 * content only), one byte more is refused before anything is copied. */
static void test_bounds(void **state)
{
    char big[REF_MAX_BYTES + 2];
    struct ref f;

    memset(big, '1', sizeof(big));
    memcpy(big, "a ", 2);
    big[REF_MAX_BYTES - 1] = '\n';
    /* "a 111...1\n" in 256 bytes: the step overflows. */
    assert_int_equal(parse(big, REF_MAX_BYTES, &f), CKS_E_FORMAT);
    big[REF_MAX_BYTES] = '\n';
    assert_int_equal(parse(big, REF_MAX_BYTES + 1, &f), CKS_E_FORMAT);
    /* The longest valid ref: a 64-byte id and the largest step. */
    static const char longest[] = ID64 " 9223372036854775807\n";
    assert_int_equal(parse(longest, sizeof(longest) - 1, &f), 0);
    assert_string_equal(f.id, ID64);
    assert_int_equal(f.step, INT64_MAX);
    /* A NULL pointer with length 0 is refused, not read. */
    assert_int_equal(ref_parse(NULL, 0, &f), CKS_E_FORMAT);
}

struct newer {
    const char *cand_id;
    int64_t cand_step;
    const char *cur_id;
    int64_t cur_step;
    int want;
    const char *why;
};

static const struct newer newer_rows[] = {
    /* Both steps known and different: the step decides, whatever the ids. */
    {ID2, 200, ID1, 100, 1, "higher step, later id"},
    {ID1, 200, ID2, 100, 1, "higher step, earlier id (committed late)"},
    {ID2, 100, ID1, 200, 0, "lower step, later id: latest never moves back"},
    {ID1, 100, ID2, 200, 0, "lower step, earlier id"},
    {ID1, 1, ID3, 0, 1, "step 1 beats step 0"},
    {ID3, 0, ID1, 1, 0, "step 0 loses to step 1"},
    {ID1, INT64_MAX, ID2, INT64_MAX - 1, 1, "largest steps"},
    /* Equal steps: the later id wins; the same ref supersedes itself, so a
     * retried publish rewrites the same bytes. */
    {ID2, 100, ID1, 100, 1, "same step, later id"},
    {ID1, 100, ID2, 100, 0, "same step, earlier id"},
    {ID1, 100, ID1, 100, 1, "same ref"},
    /* A known step (a checkpoint) outranks an unknown one (a log captured
     * after it must not take latest), whatever the ids. */
    {ID2, -1, ID1, 100, 0, "unknown step, later id: the checkpoint stays"},
    {ID1, -1, ID2, 100, 0, "unknown step, earlier id"},
    {ID2, 100, ID1, -1, 1, "known step over unknown, later id"},
    {ID1, 100000, ID2, -1, 1, "known step over unknown, earlier id"},
    {ID2, -1, ID1, -1, 1, "both unknown, later id"},
    {ID1, -1, ID2, -1, 0, "both unknown, earlier id"},
    {ID1, -1, ID1, -1, 1, "both unknown, same id"},
    {ID1, -1, ID2, 0, 0, "unknown step against step 0"},
    {ID3, 0, ID2, -1, 1, "step 0 over unknown"},
    /* Id order is bytewise: a prefix sorts first. */
    {"abc", -1, "ab", -1, 1, "longer id with the same prefix"},
    {"ab", -1, "abc", -1, 0, "prefix of the current id"},
};

static void test_newer(void **state)
{
    for (size_t i = 0; i < sizeof(newer_rows) / sizeof(newer_rows[0]); i++) {
        const struct newer *n = &newer_rows[i];
        struct ref cand = {{0}, n->cand_step}, cur = {{0}, n->cur_step};
        memcpy(cand.id, n->cand_id, strlen(n->cand_id) + 1);
        memcpy(cur.id, n->cur_id, strlen(n->cur_id) + 1);
        int got = ref_newer(&cand, &cur);
        if (got != n->want)
            fail_msg("%s: ref_newer(%s %lld, %s %lld) = %d, expected %d", n->why, n->cand_id,
                     (long long)n->cand_step, n->cur_id, (long long)n->cur_step, got, n->want);
    }
}

/* For two different snapshots exactly one direction supersedes (for the
 * same ref both do): two writers cannot each think their ref is newer.
 * (A snapshot has one id and one step, so refs sharing an id differ only
 * in rows that cannot occur.) */
static void test_newer_antisymmetric(void **state)
{
    static const struct ref refs[] = {
        {ID1, -1}, {ID2, 0}, {ID3, 100}, {"a", 200}, {"b", -1}, {"c", 5}, {"d", 5}, {"e", -1},
    };
    const size_t n = sizeof(refs) / sizeof(refs[0]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            int ab = ref_newer(&refs[i], &refs[j]), ba = ref_newer(&refs[j], &refs[i]);
            bool same = i == j;
            if (same ? !(ab && ba) : ab == ba)
                fail_msg("refs %zu and %zu: newer(a,b)=%d newer(b,a)=%d", i, j, ab, ba);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip), cmocka_unit_test(test_encode_appends),
        cmocka_unit_test(test_rejects),    cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_newer),      cmocka_unit_test(test_newer_antisymmetric),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
