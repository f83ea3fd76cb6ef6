/*
 * test-handoff.c — handoff records: round trip, sanitising, rejections.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "engine/handoff.h"
#include "engine/hash.h"

static struct handoff sample(void)
{
    struct handoff h;
    memset(&h, 0, sizeof(h));
    snprintf(h.run, sizeof(h.run), "%s", "r1");
    snprintf(h.id, sizeof(h.id), "%s", "20261201T000701.123456Z-3f2a9c1b");
    h.step = 1000;
    snprintf(h.host, sizeof(h.host), "%s", "gpu 17/x");
    h.time = 1796083621;
    return h;
}

static void test_roundtrip(void **state)
{
    struct handoff h = sample(), back;
    struct buf b = BUF_INIT;
    (void)state;
    assert_int_equal(handoff_encode(&h, &b), 0);
    assert_int_equal(handoff_parse(b.data, b.len, &back), 0);
    assert_string_equal(back.run, "r1");
    assert_string_equal(back.id, h.id);
    assert_int_equal(back.step, 1000);
    assert_string_equal(back.host, "gpu_17_x"); /* sanitised */
    assert_string_equal(back.instance, "");     /* unknown */
    assert_int_equal(back.time, h.time);
    buf_free(&b);
}

static void test_rejects(void **state)
{
    struct handoff h = sample(), back;
    struct buf b = BUF_INIT;
    (void)state;
    assert_int_equal(handoff_encode(&h, &b), 0);
    /* every truncation and every single-byte change is refused */
    for (size_t n = 0; n < b.len; n++)
        assert_true(handoff_parse(b.data, n, &back) < 0);
    for (size_t i = 0; i < b.len; i++) {
        uint8_t saved = b.data[i];
        b.data[i] ^= 0x20;
        assert_true(handoff_parse(b.data, b.len, &back) < 0);
        b.data[i] = saved;
    }
    buf_free(&b);
    snprintf(h.run, sizeof(h.run), "%s", "../x");
    assert_int_equal(handoff_encode(&h, &b), -EINVAL);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
