/*
 * test-tensorhint.c — widths from safetensors headers: the ranges of each
 * dtype, the 3/4 rule for chunks that straddle tensors, and headers that
 * must give no hint (malformed, lying offsets, overlaps, bounds).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/tensorhint.h"

/* A file image: 8-byte length, json, then data_len bytes of data. */
static size_t make(uint8_t *out, size_t cap, const char *json, uint64_t data_len,
                   uint64_t *ret_size)
{
    size_t n = strlen(json);
    assert_true(8 + n <= cap);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(out + 8, json, n);
    *ret_size = 8 + n + data_len;
    return 8 + n;
}

static int parse(const char *json, uint64_t data_len, struct tensorhint *h, size_t *ret_base)
{
    uint8_t img[4096];
    uint64_t size;
    size_t len = make(img, sizeof(img), json, data_len, &size);
    if (ret_base)
        *ret_base = len;
    return tensorhint_parse(img, len, size, h);
}

static void test_widths(void **state)
{
    struct tensorhint h = TENSORHINT_INIT;
    size_t base;
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"w\":{\"dtype\":\"BF16\",\"shape\":[500],\"data_offsets\":[0,1000]},"
                       "\"m\":{\"dtype\":\"F32\",\"shape\":[250],\"data_offsets\":[1000,2000]},"
                       "\"i\":{\"dtype\":\"I64\",\"shape\":[125],\"data_offsets\":[2000,3000]},"
                       "\"h\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[3000,3000]},"
                       "\"e\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[3000,3004]}}   ";
    assert_int_equal(parse(json, 3004, &h, &base), 0);
    assert_int_equal(h.n, 3); /* w, m, e: I64 and the empty tensor carry no width */
    assert_int_equal(tensorhint_width(&h, base, 1000), 2);
    assert_int_equal(tensorhint_width(&h, base + 1000, 1000), 4);
    assert_int_equal(tensorhint_width(&h, base + 2000, 1000), 0);
    assert_int_equal(tensorhint_width(&h, 0, base), 0);          /* the header */
    assert_int_equal(tensorhint_width(&h, base + 100, 800), 2);  /* inside */
    assert_int_equal(tensorhint_width(&h, base + 750, 1000), 4); /* 3/4 in m */
    assert_int_equal(tensorhint_width(&h, base + 500, 1000), 0); /* half and half: mixed */
    assert_int_equal(tensorhint_width(&h, base + 1, 1000), 2);   /* 999 in w */
    assert_int_equal(tensorhint_width(&h, base + 250, 1000), 2); /* 3/4 in w */
    assert_int_equal(tensorhint_width(&h, base + 3000, 4), 2);
    assert_int_equal(tensorhint_width(&h, base + 3004, 100), 0); /* past the end */
    assert_int_equal(tensorhint_width(&h, UINT64_MAX - 2, 10), 0);
    assert_int_equal(tensorhint_width(&h, base, 0), 0);
    tensorhint_free(&h);
    tensorhint_free(&h);
    struct tensorhint none = TENSORHINT_INIT;
    assert_int_equal(tensorhint_width(&none, 0, 100), 0);
}

static void test_no_hint(void **state)
{
    static const char *const bad[] = {
        "[1,2]",
        "{\"w\":{\"dtype\":\"BF16\",\"data_offsets\":[0,2000]}}", /* past the data */
        "{\"w\":{\"dtype\":\"BF16\",\"data_offsets\":[10,5]}}",   /* reversed */
        "{\"w\":{\"dtype\":\"BF16\",\"data_offsets\":[-2,5]}}",   /* negative */
        "{\"w\":{\"dtype\":\"BF16\",\"data_offsets\":[0.5,5]}}",  /* fraction */
        "{\"w\":{\"dtype\":\"BF16\",\"data_offsets\":[0]}}",      /* one offset */
        "{\"w\":{\"dtype\":\"BF16\",\"data_offsets\":\"0,4\"}}",  /* not an array */
        "{\"w\":{\"data_offsets\":[0,4]}}",                       /* no dtype */
        "{\"w\":{\"dtype\":7,\"data_offsets\":[0,4]}}",           /* dtype not a string */
        "{\"w\":[1]}",                                            /* not an object */
        "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"BF16\",\"data_offsets\":[4,12]}}", /* overlap */
        "{\"w\":{\"dtype\":\"BF16\",\"data_offsets\":[0,4]}",  /* truncated */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct tensorhint h = TENSORHINT_INIT;
        int r = parse(bad[i], 1000, &h, NULL);
        if (r != CKS_E_FORMAT)
            fail_msg("%s: got %d", bad[i], r);
        assert_int_equal(h.n, 0);
        assert_null(h.v);
    }
    /* The length word: too short, past the file, above the bound. */
    uint8_t img[64] = {0};
    img[0] = 40;
    assert_int_equal(tensorhint_need(img, 8, 30), 0);
    assert_int_equal(tensorhint_need(img, 8, 48), 48);
    assert_int_equal(tensorhint_need(img, 7, 48), 0);
    memset(img, 0xff, 8);
    assert_int_equal(tensorhint_need(img, 8, UINT64_MAX), 0);
    uint64_t big = (uint64_t)TENSORHINT_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++)
        img[i] = (uint8_t)(big >> (8 * i));
    assert_int_equal(tensorhint_need(img, 8, UINT64_MAX), 0);
    /* A head shorter than the header it announces is no hint. */
    struct tensorhint h = TENSORHINT_INIT;
    uint64_t size;
    size_t len =
        make(img, sizeof(img), "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, &size);
    assert_int_equal(tensorhint_parse(img, len - 1, size, &h), CKS_E_FORMAT);
    assert_int_equal(tensorhint_parse(img, len, size, &h), 0);
    assert_int_equal(h.n, 1);
    tensorhint_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widths),
        cmocka_unit_test(test_no_hint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
