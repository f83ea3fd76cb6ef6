/*
 * test-restore.c — restore's pure helpers: restore_zero_chunk() on all-zero
 * buffers of every awkward length (0, below, at and above its 16-byte head,
 * a megabyte) and on the same buffers with one non-zero byte at each edge
 * of the head, in the middle and at the end; the priority groups:
 * restore_group()'s built-in rules and restore_order_group() ([restore]
 * order), first match wins, before the built-in rules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "service/restore.h"

static void test_zero_chunk(void **state)
{
    static const size_t lens[] = {0, 1, 15, 16, 17, 31, 32, 33, 4095, 4096, 1 << 20};
    uint8_t *p = calloc(1, (1 << 20) + 1);
    assert_non_null(p);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t n = lens[i];
        assert_true(restore_zero_chunk(p, n));
        size_t at[] = {0, 15, 16, 17, n / 2, n - 1};
        for (size_t k = 0; n && k < sizeof(at) / sizeof(at[0]); k++) {
            if (at[k] >= n)
                continue;
            p[at[k]] = 0x80;
            if (restore_zero_chunk(p, n))
                fail_msg("length %zu, byte %zu set: called all zero", n, at[k]);
            p[at[k]] = 0;
        }
        p[n] = 1; /* just past the end: not looked at */
        assert_true(restore_zero_chunk(p, n));
        p[n] = 0;
    }
    free(p);
}

static void test_groups(void **state)
{
    (void)state;
    assert_int_equal(restore_group("ck/trainer_state.json", 5 << 20), RESTORE_META);
    assert_int_equal(restore_group("ck/model.safetensors", 5 << 20), RESTORE_WEIGHTS);
    assert_int_equal(restore_group("ck/fp32_master.pt", 5 << 20), RESTORE_MASTER);
    assert_int_equal(restore_group("ck/optimizer.pt", 5 << 20), RESTORE_OPTIM);
    assert_int_equal(restore_group("ck/__1_0.distcp", 5 << 20), RESTORE_WEIGHTS);
    assert_int_equal(restore_group("ck/small.bin", 1000), RESTORE_META);
}

static void test_order(void **state)
{
    static const char order[] = "optimizer:__1_*.distcp\tweights:optimizer.pt  "
                                "metadata:sub/*.bin master:*.bin bogus:*.x";
    (void)state;
    assert_int_equal(restore_order_group(order, "ck/__1_0.distcp"), RESTORE_OPTIM);
    assert_int_equal(restore_order_group(order, "ck/x/__1_7.distcp"), RESTORE_OPTIM);
    assert_int_equal(restore_order_group(order, "ck/__0_0.distcp"), -1);
    assert_int_equal(restore_order_group(order, "ck/optimizer.pt"), RESTORE_WEIGHTS);
    assert_int_equal(restore_order_group(order, "ck/sub/a.bin"), RESTORE_META); /* first wins */
    assert_int_equal(restore_order_group(order, "ck/a.bin"), RESTORE_MASTER);
    assert_int_equal(restore_order_group(order, "ck/a.x"), -1); /* no such group */
    assert_int_equal(restore_order_group("", "ck/a.bin"), -1);
    assert_int_equal(restore_order_group(NULL, "ck/a.bin"), -1);
    assert_int_equal(restore_order_group("weights:* ", "ck/optimizer.pt"), RESTORE_WEIGHTS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_chunk),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
