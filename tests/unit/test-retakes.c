/*
 * test-retakes.c — the units to take again: nothing is dropped however
 * many there are (200 here; the list used to be a fixed array of 64 that
 * dropped the rest), each unit comes back exactly once however often it
 * was added, in the order it was first added, whatever the portion taken;
 * an empty list takes nothing.
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

#include "daemon/retakes.h"

#define NUNITS 200

static void unit_name(char *dst, size_t size, size_t i)
{
    snprintf(dst, size, "run-%zu/checkpoint-%zu", i % 7, i);
}

/* Adds NUNITS distinct units, each added again later (and some a third
 * time), then takes them all in portions of cap: each comes back once, in
 * order of first add. */
static void take_all_in_portions(size_t cap)
{
    struct retakes rt = {0};
    char name[64];
    for (size_t i = 0; i < NUNITS; i++) {
        unit_name(name, sizeof(name), i);
        assert_int_equal(retakes_add(&rt, name), 1);
        if (i % 3 == 0) { /* a duplicate of an earlier one, interleaved */
            unit_name(name, sizeof(name), i / 2);
            assert_int_equal(retakes_add(&rt, name), 0);
        }
    }
    for (size_t i = 0; i < NUNITS; i += 5) {
        unit_name(name, sizeof(name), i);
        assert_int_equal(retakes_add(&rt, name), 0);
    }

    char(*ret)[4096] = calloc(cap, sizeof(*ret));
    assert_non_null(ret);
    size_t got = 0, n;
    while ((n = retakes_take(&rt, ret, cap)) > 0) {
        assert_true(n <= cap);
        /* a portion is short only at the end */
        assert_true(n == cap || got + n == NUNITS);
        for (size_t k = 0; k < n; k++) {
            unit_name(name, sizeof(name), got + k);
            assert_string_equal(ret[k], name);
        }
        got += n;
        assert_true(got <= NUNITS);
    }
    assert_int_equal(got, NUNITS);
    /* taken means gone: the list is empty, and a unit added again is new */
    assert_int_equal(retakes_take(&rt, ret, cap), 0);
    unit_name(name, sizeof(name), 0);
    assert_int_equal(retakes_add(&rt, name), 1);
    assert_int_equal(retakes_take(&rt, ret, cap), 1);
    assert_string_equal(ret[0], name);
    free(ret);
    retakes_free(&rt);
}

static void test_portions_of_64(void **state)
{
    (void)state;
    take_all_in_portions(64);
}

static void test_portions_of_7(void **state)
{
    (void)state;
    take_all_in_portions(7);
}

/* A list never added to (no storage at all) and one emptied by takes: both
 * take 0 and leave ret alone; freeing either is fine. */
static void test_empty(void **state)
{
    (void)state;
    struct retakes rt = {0};
    char ret[4][4096];
    snprintf(ret[0], sizeof(ret[0]), "untouched");
    assert_int_equal(retakes_take(&rt, ret, 4), 0);
    assert_int_equal(retakes_take(&rt, ret, 0), 0);
    assert_string_equal(ret[0], "untouched");
    retakes_free(&rt);

    assert_int_equal(retakes_add(&rt, "a"), 1);
    assert_int_equal(retakes_take(&rt, ret, 0), 0); /* cap 0 takes nothing */
    assert_int_equal(retakes_take(&rt, ret, 4), 1);
    assert_string_equal(ret[0], "a");
    assert_int_equal(retakes_take(&rt, ret, 4), 0);
    retakes_free(&rt);
    retakes_free(&rt); /* freed twice: the first left it empty */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_portions_of_64),
        cmocka_unit_test(test_portions_of_7),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
