/*
 * test-ring.c — the circular FIFO: empty and full rings (pop says empty,
 * push says -ENOBUFS and allocates nothing), order across the wrap,
 * growth while wrapped keeps the order and every element, reserve never
 * shrinks and refuses an overflowing size, pop into NULL drops, free
 * leaves a reusable ring; and a long pseudo-random run of pushes, pops and
 * reserves checked against a plain array model.
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

#include "base/ring.h"

struct elem { /* not a power of two, so offsets are checked */
    uint32_t seq;
    char tag[9];
};

static struct elem mk(uint32_t seq)
{
    struct elem e;
    memset(&e, 0, sizeof(e));
    e.seq = seq;
    snprintf(e.tag, sizeof(e.tag), "e%u", seq % 100000);
    return e;
}

static void expect_pop(struct ring *r, uint32_t seq)
{
    struct elem e, want = mk(seq);
    assert_int_equal(ring_pop(r, &e), 1);
    assert_int_equal(e.seq, seq);
    assert_string_equal(e.tag, want.tag);
}

static void test_empty(void **state)
{
    struct ring r = RING_INIT(sizeof(struct elem));
    struct elem e = mk(1);
    assert_int_equal(ring_len(&r), 0);
    assert_int_equal(ring_pop(&r, &e), 0);
    assert_int_equal(ring_push(&r, &e), -ENOBUFS); /* no room was reserved */
    assert_null(r.v);
    ring_free(&r);
    ring_free(&r); /* twice is fine */
}

static void test_full_and_wrap(void **state)
{
    struct ring r = RING_INIT(sizeof(struct elem));
    assert_int_equal(ring_reserve(&r, 4), 0);
    assert_int_equal(ring_cap(&r), 4);
    for (uint32_t i = 0; i < 4; i++) {
        struct elem e = mk(i);
        assert_int_equal(ring_push(&r, &e), 0);
    }
    struct elem x = mk(99);
    uint8_t *before = r.v;
    assert_int_equal(ring_push(&r, &x), -ENOBUFS);
    assert_ptr_equal(r.v, before); /* a full push allocates nothing */
    assert_int_equal(ring_len(&r), 4);
    /* pop two, push two: the tail wraps to the array's start */
    expect_pop(&r, 0);
    expect_pop(&r, 1);
    for (uint32_t i = 4; i < 6; i++) {
        struct elem e = mk(i);
        assert_int_equal(ring_push(&r, &e), 0);
    }
    for (uint32_t i = 2; i < 6; i++)
        expect_pop(&r, i);
    assert_int_equal(ring_pop(&r, &x), 0);
    ring_free(&r);
}

/* Growing a wrapped ring: every element kept, oldest first. */
static void test_grow_wrapped(void **state)
{
    struct ring r = RING_INIT(sizeof(struct elem));
    assert_int_equal(ring_reserve(&r, 5), 0);
    for (uint32_t i = 0; i < 5; i++) {
        struct elem e = mk(i);
        assert_int_equal(ring_push(&r, &e), 0);
    }
    expect_pop(&r, 0);
    expect_pop(&r, 1);
    expect_pop(&r, 2);
    for (uint32_t i = 5; i < 8; i++) { /* head at 3, tail wrapped to 0..2 */
        struct elem e = mk(i);
        assert_int_equal(ring_push(&r, &e), 0);
    }
    assert_int_equal(r.head, 3);
    assert_int_equal(ring_reserve(&r, 3), 0); /* smaller: nothing changes */
    assert_int_equal(ring_cap(&r), 5);
    assert_int_equal(ring_reserve(&r, 16), 0);
    assert_int_equal(ring_cap(&r), 16);
    assert_int_equal(ring_len(&r), 5);
    for (uint32_t i = 8; i < 19; i++) {
        struct elem e = mk(i);
        assert_int_equal(ring_push(&r, &e), 0);
    }
    for (uint32_t i = 3; i < 19; i++)
        expect_pop(&r, i);
    assert_int_equal(ring_len(&r), 0);
    ring_free(&r);
}

static void test_pop_null_and_reuse(void **state)
{
    struct ring r = RING_INIT(sizeof(struct elem));
    assert_int_equal(ring_reserve(&r, 2), 0);
    struct elem a = mk(1), b = mk(2);
    assert_int_equal(ring_push(&r, &a), 0);
    assert_int_equal(ring_push(&r, &b), 0);
    assert_int_equal(ring_pop(&r, NULL), 1); /* dropped */
    expect_pop(&r, 2);
    ring_free(&r);
    assert_null(r.v);
    assert_int_equal(ring_cap(&r), 0);
    assert_int_equal(ring_len(&r), 0);
    assert_int_equal(ring_reserve(&r, 1), 0); /* the element size survives free */
    assert_int_equal(ring_push(&r, &a), 0);
    expect_pop(&r, 1);
    ring_free(&r);
}

static void test_reserve_overflow(void **state)
{
    struct ring r = RING_INIT(sizeof(struct elem));
    assert_int_equal(ring_reserve(&r, SIZE_MAX / sizeof(struct elem) + 1), -ENOMEM);
    assert_null(r.v);
    struct ring z = RING_INIT(0);
    assert_int_equal(ring_reserve(&z, 4), -ENOMEM);
}

/* Pushes, pops and reserves in a pseudo-random order against a model. */
static void test_model(void **state)
{
    struct ring r = RING_INIT(sizeof(struct elem));
    uint32_t model[4096], mhead = 0, mn = 0, next = 0, x = 12345;
    for (int step = 0; step < 200000; step++) {
        x = x * 1103515245u + 12345u;
        unsigned op = (x >> 16) % 16;
        if (op < 7) {
            struct elem e = mk(next);
            int rc = ring_push(&r, &e);
            if (mn == ring_cap(&r)) {
                assert_int_equal(rc, -ENOBUFS);
            } else {
                assert_int_equal(rc, 0);
                model[(mhead + mn++) % 4096] = next++;
            }
        } else if (op < 15) {
            if (mn == 0) {
                assert_int_equal(ring_pop(&r, NULL), 0);
            } else {
                expect_pop(&r, model[mhead]);
                mhead = (mhead + 1) % 4096;
                mn--;
            }
        } else if (ring_cap(&r) < 4096) {
            size_t want = ring_cap(&r) + 1 + (x >> 8) % 7;
            assert_int_equal(ring_reserve(&r, want < 4096 ? want : 4096), 0);
        }
        assert_int_equal(ring_len(&r), mn);
    }
    while (mn) {
        expect_pop(&r, model[mhead]);
        mhead = (mhead + 1) % 4096;
        mn--;
    }
    ring_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_full_and_wrap),
        cmocka_unit_test(test_grow_wrapped),
        cmocka_unit_test(test_pop_null_and_reuse),
        cmocka_unit_test(test_reserve_overflow),
        cmocka_unit_test(test_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
