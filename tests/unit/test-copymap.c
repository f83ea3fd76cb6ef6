/*
 * test-copymap.c — the fan-out's choice per chunk (copymap_choose): copy
 * from a region that confirmed the chunk, wait for the upload region, or
 * upload from the instance; and that waits always end at a region that
 * uploads, for every map and every set of working regions of 4 regions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "service/copymap.h"

#define A 0
#define B 1
#define C 2
#define BIT(x) (1u << (x))

static struct copymap all3(void)
{
    struct copymap m;
    memset(&m, 0, sizeof(m));
    m.from[A] = BIT(B) | BIT(C);
    m.from[B] = BIT(A) | BIT(C);
    m.from[C] = BIT(A) | BIT(B);
    return m;
}

static void test_all_copy(void **state)
{
    (void)state;
    struct copymap m = all3();
    uint32_t all = BIT(A) | BIT(B) | BIT(C);
    size_t src = 99;
    /* nobody has it: a uploads, b and c wait for it */
    assert_int_equal(copymap_choose(&m, 0, A, 0, all, &src), COPYMAP_PUT);
    assert_int_equal(copymap_choose(&m, 0, B, 0, all, &src), COPYMAP_WAIT);
    assert_int_equal(copymap_choose(&m, 0, C, 0, all, &src), COPYMAP_WAIT);
    /* a confirmed it: b and c copy from a */
    assert_int_equal(copymap_choose(&m, 0, B, BIT(A), all, &src), COPYMAP_COPY);
    assert_int_equal(src, A);
    /* only b has it (a lost it, say): c copies from b */
    assert_int_equal(copymap_choose(&m, 0, C, BIT(B), all, &src), COPYMAP_COPY);
    assert_int_equal(src, B);
    /* a in backoff: b is the upload region, c waits for b */
    assert_int_equal(copymap_choose(&m, 0, B, 0, BIT(B) | BIT(C), &src), COPYMAP_PUT);
    assert_int_equal(copymap_choose(&m, 0, C, 0, BIT(B) | BIT(C), &src), COPYMAP_WAIT);
    /* a working source is preferred to one in backoff */
    assert_int_equal(copymap_choose(&m, 0, C, BIT(A) | BIT(B), BIT(B) | BIT(C), &src),
                     COPYMAP_COPY);
    assert_int_equal(src, B);
}

static void test_no_copy(void **state)
{
    (void)state;
    struct copymap m = all3();
    size_t src = 99;
    uint32_t all = BIT(A) | BIT(B) | BIT(C);
    /* c cannot copy (another provider): it uploads even when a has it */
    m.from[C] = 0;
    m.from[A] &= ~BIT(C);
    m.from[B] &= ~BIT(C);
    assert_int_equal(copymap_choose(&m, 0, C, BIT(A), all, &src), COPYMAP_PUT);
    /* b's pair with a stopped after a refusal: b uploads */
    assert_int_equal(copymap_choose(&m, BIT(A), B, BIT(A), all, &src), COPYMAP_PUT);
    assert_int_equal(copymap_choose(&m, BIT(A), B, 0, all, &src), COPYMAP_PUT);
    /* a copies from nobody listed after it: a never waits */
    m.from[A] = BIT(B);
    assert_int_equal(copymap_choose(&m, 0, A, 0, all, &src), COPYMAP_PUT);
}

/* Every map of 4 regions, every working set: follow the waits from each
 * region; they must reach a region that uploads. */
static void test_waits_end(void **state)
{
    (void)state;
    for (uint32_t bits = 0; bits < (1u << 12); bits++) {
        struct copymap m;
        memset(&m, 0, sizeof(m));
        for (size_t d = 0, k = 0; d < 4; d++)
            for (size_t s = 0; s < 4; s++)
                if (s != d && ((bits >> k++) & 1))
                    m.from[d] |= BIT(s);
        for (uint32_t working = 0; working < 16; working++)
            for (size_t i = 0; i < 4; i++) {
                size_t at = i, src, hops = 0;
                while (copymap_choose(&m, 0, at, 0, working, &src) == COPYMAP_WAIT) {
                    uint32_t group = (m.from[at] & working) | BIT(at);
                    size_t up = (size_t)__builtin_ctz(group);
                    assert_true(up < at);
                    at = up;
                    assert_true(++hops < 4);
                }
            }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_copy),
        cmocka_unit_test(test_no_copy),
        cmocka_unit_test(test_waits_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
