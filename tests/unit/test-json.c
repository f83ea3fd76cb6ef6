/*
 * test-json.c — string escaping (table), invalid UTF-8 as \u00XX, nesting
 * and automatic commas, numbers, and sticky misuse errors.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/json.h"
#include "base/numfmt.h"

struct esc_case {
    const char *in;
    size_t len; /* 0: strlen(in) */
    const char *out;
};

static const struct esc_case esc_cases[] = {
    {"", 0, "\"\""},
    {"plain text", 0, "\"plain text\""},
    {"quote \" and backslash \\", 0, "\"quote \\\" and backslash \\\\\""},
    {"slash / stays", 0, "\"slash / stays\""},
    {"\b\f\n\r\t", 0, "\"\\b\\f\\n\\r\\t\""},
    {"\x01\x1f\x7f", 0, "\"\\u0001\\u001f\x7f\""},
    {"nul\0byte", 8, "\"nul\\u0000byte\""},
    /* valid UTF-8 passes through: 2, 3 and 4 byte forms */
    {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 0,
     "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
    {"\xef\xbf\xbf\xf4\x8f\xbf\xbf", 0, "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\""}, /* U+FFFF, U+10FFFF */
    /* invalid: lone continuation, bad lead bytes */
    {"\x80", 0, "\"\\u0080\""},
    {"a\xff"
     "b",
     0, "\"a\\u00ffb\""},
    {"\xc0\xaf", 0, "\"\\u00c0\\u00af\""},                       /* overlong '/' */
    {"\xc1\xbf", 0, "\"\\u00c1\\u00bf\""},                       /* overlong */
    {"\xe0\x80\xaf", 0, "\"\\u00e0\\u0080\\u00af\""},            /* overlong 3-byte */
    {"\xed\xa0\x80", 0, "\"\\u00ed\\u00a0\\u0080\""},            /* surrogate D800 */
    {"\xf0\x80\x80\xaf", 0, "\"\\u00f0\\u0080\\u0080\\u00af\""}, /* overlong 4-byte */
    {"\xf4\x90\x80\x80", 0, "\"\\u00f4\\u0090\\u0080\\u0080\""}, /* > U+10FFFF */
    {"\xf5\x80\x80\x80", 0, "\"\\u00f5\\u0080\\u0080\\u0080\""},
    /* truncated sequences, also at the very end */
    {"\xe2\x82", 0, "\"\\u00e2\\u0082\""},
    {"\xe2\x82x", 0, "\"\\u00e2\\u0082x\""},
    {"ok\xf0\x9f\x98", 0, "\"ok\\u00f0\\u009f\\u0098\""},
    {"\xc3", 0, "\"\\u00c3\""},
};

static void test_escaping(void **state)
{
    for (size_t i = 0; i < sizeof(esc_cases) / sizeof(esc_cases[0]); i++) {
        const struct esc_case *tc = &esc_cases[i];
        struct buf out = BUF_INIT;
        struct json j;
        json_init(&j, &out);
        json_strn(&j, tc->in, tc->len ? tc->len : strlen(tc->in));
        assert_int_equal(j.err, 0);
        if (strcmp(buf_str(&out), tc->out) != 0)
            fail_msg("case %zu: got %s, want %s", i, buf_str(&out), tc->out);
        buf_free(&out);
    }
}

static void test_nesting(void **state)
{
    struct buf out = BUF_INIT;
    struct json j;

    json_init(&j, &out);
    json_obj_begin(&j);
    json_key(&j, "name");
    json_str(&j, "run-1");
    json_key(&j, "empty_obj");
    json_obj_begin(&j);
    json_obj_end(&j);
    json_key(&j, "empty_arr");
    json_arr_begin(&j);
    json_arr_end(&j);
    json_key(&j, "regions");
    json_arr_begin(&j);
    for (int i = 0; i < 2; i++) {
        json_obj_begin(&j);
        json_key(&j, "id");
        json_u64(&j, (uint64_t)i);
        json_key(&j, "ok");
        json_bool(&j, i == 0);
        json_obj_end(&j);
    }
    json_arr_begin(&j);
    json_null(&j);
    json_i64(&j, -5);
    json_str(&j, NULL);
    json_arr_end(&j);
    json_arr_end(&j);
    json_key(&j, "k\"ey");
    json_u64(&j, UINT64_MAX);
    json_key(&j, "min");
    json_i64(&j, INT64_MIN);
    json_obj_end(&j);

    assert_int_equal(j.err, 0);
    assert_int_equal(j.depth, 0);
    assert_string_equal(buf_str(&out),
                        "{\"name\":\"run-1\",\"empty_obj\":{},\"empty_arr\":[],"
                        "\"regions\":[{\"id\":0,\"ok\":true},{\"id\":1,\"ok\":false},"
                        "[null,-5,null]],\"k\\\"ey\":18446744073709551615,"
                        "\"min\":-9223372036854775808}");
    buf_free(&out);
}

struct dbl_case {
    double v;
    const char *out;
};

static void test_doubles(void **state)
{
    const struct dbl_case cases[] = {
        {0.0, "0"},
        {-0.0, "-0"},
        {1.5, "1.5"},
        {0.1, "0.1"},
        {1e300, "1e+300"},
        {-2.5e-7, "-2.5e-07"},
        {1.0 / 3, "0.3333333333333333"},
        {NAN, "null"},
        {INFINITY, "null"},
        {-INFINITY, "null"},
        {123456789.0, "123456789"},
        {9.564, "9.564"},
        {100.0, "100"}, /* not "1e+02" */
        {0.1 + 0.2, "0.30000000000000004"},
        {1e16, "10000000000000000"},
        {1e17, "1e+17"},
        {5e-324, "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {0.0001, "0.0001"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf out = BUF_INIT;
        struct json j;
        json_init(&j, &out);
        json_double(&j, cases[i].v);
        assert_int_equal(j.err, 0);
        if (strcmp(buf_str(&out), cases[i].out) != 0)
            fail_msg("case %zu: got %s, want %s", i, buf_str(&out), cases[i].out);
        if (isfinite(cases[i].v))
            assert_true(strtod(buf_str(&out), NULL) == cases[i].v); /* round trip */
        buf_free(&out);
    }
}

/* numfmt_double on random finite doubles: the text reads back exactly,
 * and one digit fewer would not (it is the shortest). */
static void test_shortest(void **state)
{
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        double v;
        uint64_t bits = i % 2 ? x : (x >> 12) | 0x3ff0000000000000ull; /* any, or in [1, 2) */
        memcpy(&v, &bits, sizeof(v));
        if (!isfinite(v))
            continue;
        char s[NUMFMT_DOUBLE_MAX], fewer[64];
        numfmt_double(v, s);
        if (strtod(s, NULL) != v)
            fail_msg("%a printed as %s, which reads back as %a", v, s, strtod(s, NULL));
        char d[NUMFMT_DOUBLE_MAX];
        size_t digits = 0;
        for (const char *p = s; *p && *p != 'e'; p++)
            if (*p >= '0' && *p <= '9' && (digits || *p != '0'))
                d[digits++] = *p; /* leading zeros are not significant */
        while (digits > 1 && d[digits - 1] == '0')
            digits--; /* nor trailing ones */
        int n = snprintf(fewer, sizeof(fewer), "%.*g", (int)digits - 1, v);
        assert_true(n > 0 && (size_t)n < sizeof(fewer));
        if (digits > 1 && strtod(fewer, NULL) == v)
            fail_msg("%a printed as %s, but %s reads back too", v, s, fewer);
    }
}

static void test_misuse(void **state)
{
    struct buf out = BUF_INIT;
    struct json j;

    /* Unbalanced end. */
    json_init(&j, &out);
    json_obj_end(&j);
    assert_int_equal(j.err, -EINVAL);
    json_obj_begin(&j); /* sticky: nothing more is written */
    assert_string_equal(buf_str(&out), "");

    /* A key outside any object, and a key without its value. */
    json_init(&j, &out);
    json_key(&j, "k");
    assert_int_equal(j.err, -EINVAL);
    json_init(&j, &out);
    json_obj_begin(&j);
    json_key(&j, "k");
    json_obj_end(&j);
    assert_int_equal(j.err, -EINVAL);

    /* Too deep. */
    buf_reset(&out);
    json_init(&j, &out);
    for (int i = 0; i < JSON_MAX_DEPTH + 5; i++)
        json_arr_begin(&j);
    assert_int_equal(j.err, -E2BIG);
    assert_int_equal(j.depth, JSON_MAX_DEPTH - 1);
    buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escaping), cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_doubles),  cmocka_unit_test(test_shortest),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
