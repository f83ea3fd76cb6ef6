/*
 * test-buf.c — the growable buffer: appends of text and binary (with NUL
 * bytes), printf (empty, long, repeated), reserve (no reallocation within
 * the reserved room, overflow refused), detach (ownership moves, the
 * buffer is reusable), reset and free; and after every call the data stays
 * NUL-terminated past len.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"

/* The invariant every function keeps once data is allocated. */
static void check_terminated(const struct buf *b)
{
    if (!b->data) {
        assert_int_equal(b->len, 0);
        assert_int_equal(b->cap, 0);
        return;
    }
    assert_true(b->len < b->cap);
    assert_int_equal(b->data[b->len], 0);
}

static void test_init_empty(void **state)
{
    struct buf b = BUF_INIT;
    assert_null(b.data);
    assert_string_equal(buf_str(&b), "");
    buf_reset(&b); /* on a never-allocated buffer */
    assert_null(b.data);
    size_t len = 99;
    assert_null(buf_detach(&b, &len));
    assert_int_equal(len, 0);
    buf_free(&b);
    buf_free(&b); /* twice is fine */
    check_terminated(&b);
}

static void test_append(void **state)
{
    struct buf b = BUF_INIT;
    assert_int_equal(buf_append(&b, "abc", 3), 0);
    check_terminated(&b);
    assert_int_equal(b.len, 3);
    assert_string_equal(buf_str(&b), "abc");
    assert_int_equal(buf_puts(&b, "def"), 0);
    assert_string_equal(buf_str(&b), "abcdef");
    assert_int_equal(buf_append(&b, NULL, 0), 0); /* empty append, NULL source */
    assert_int_equal(buf_puts(&b, ""), 0);
    assert_int_equal(b.len, 6);
    check_terminated(&b);

    /* Binary data with NUL bytes: len counts them, the terminator follows. */
    static const uint8_t bin[] = {0, 1, 0, 0xff, 0};
    assert_int_equal(buf_append(&b, bin, sizeof(bin)), 0);
    assert_int_equal(b.len, 6 + sizeof(bin));
    assert_memory_equal(b.data + 6, bin, sizeof(bin));
    check_terminated(&b);
    buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

/* An empty append to a fresh buffer still yields a valid empty string. */
static void test_append_empty_allocates(void **state)
{
    struct buf b = BUF_INIT;
    assert_int_equal(buf_append(&b, "", 0), 0);
    assert_non_null(b.data);
    assert_int_equal(b.len, 0);
    check_terminated(&b);
    assert_string_equal((const char *)b.data, "");
    buf_free(&b);
}

/* Many small appends: growth keeps every byte and the terminator. */
static void test_growth(void **state)
{
    struct buf b = BUF_INIT;
    size_t caps = 0, last_cap = 0;
    for (size_t i = 0; i < 100000; i++) {
        char c = (char)('a' + i % 26);
        assert_int_equal(buf_append(&b, &c, 1), 0);
        if (b.cap != last_cap) {
            caps++;
            last_cap = b.cap;
        }
    }
    check_terminated(&b);
    assert_int_equal(b.len, 100000);
    for (size_t i = 0; i < b.len; i++)
        if (b.data[i] != (uint8_t)('a' + i % 26))
            fail_msg("byte %zu lost in growth", i);
    /* Geometric growth: a handful of reallocations, not one per append. */
    assert_true(caps < 20);
    buf_free(&b);
}

static void test_printf(void **state)
{
    struct buf b = BUF_INIT;
    assert_int_equal(buf_printf(&b, "%s", ""), 0); /* empty on a fresh buffer */
    assert_non_null(b.data);
    assert_int_equal(b.len, 0);
    check_terminated(&b);
    assert_int_equal(buf_printf(&b, "%d-%s", 42, "x"), 0);
    assert_string_equal(buf_str(&b), "42-x");
    assert_int_equal(buf_printf(&b, " %llu %05.1f %%", 18446744073709551615ull, 3.14159), 0);
    assert_string_equal(buf_str(&b), "42-x 18446744073709551615 003.1 %");
    assert_int_equal(b.len, strlen("42-x 18446744073709551615 003.1 %"));
    check_terminated(&b);

    /* Longer than the first allocation and than any internal stack buffer. */
    char big[10000];
    memset(big, 'q', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    size_t before = b.len;
    assert_int_equal(buf_printf(&b, "[%s]", big), 0);
    assert_int_equal(b.len, before + sizeof(big) + 1);
    assert_int_equal(b.data[before], '[');
    assert_int_equal(b.data[b.len - 1], ']');
    assert_memory_equal(b.data + before + 1, big, sizeof(big) - 1);
    check_terminated(&b);

    /* After binary data with a NUL, printf appends at len, not at strlen. */
    buf_reset(&b);
    assert_int_equal(buf_append(&b, "a\0b", 3), 0);
    assert_int_equal(buf_printf(&b, "%c", 'c'), 0);
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.data, "a\0bc", 5);
    buf_free(&b);
}

static void test_reserve(void **state)
{
    struct buf b = BUF_INIT;
    assert_int_equal(buf_reserve(&b, 1000), 0);
    assert_non_null(b.data);
    assert_int_equal(b.len, 0);
    assert_true(b.cap >= 1001); /* room for the terminator too */
    uint8_t *p = b.data;
    size_t cap = b.cap;
    for (int i = 0; i < 1000; i++)
        assert_int_equal(buf_append(&b, "z", 1), 0);
    /* Appends within the reserved room do not move the data. */
    assert_ptr_equal(b.data, p);
    assert_int_equal(b.cap, cap);
    check_terminated(&b);
    assert_int_equal(buf_reserve(&b, 0), 0);
    assert_ptr_equal(b.data, p);

    /* Sizes that would overflow are refused and leave the buffer alone. */
    assert_int_equal(buf_reserve(&b, SIZE_MAX), -ENOMEM);
    assert_int_equal(buf_reserve(&b, SIZE_MAX - b.len), -ENOMEM);
    assert_int_equal(buf_append(&b, "x", SIZE_MAX - 5), -ENOMEM);
    assert_ptr_equal(b.data, p);
    assert_int_equal(b.len, 1000);
    check_terminated(&b);
    buf_free(&b);
}

static void test_reset(void **state)
{
    struct buf b = BUF_INIT;
    assert_int_equal(buf_puts(&b, "hello"), 0);
    uint8_t *p = b.data;
    size_t cap = b.cap;
    buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(buf_str(&b), "");
    /* Reset keeps the allocation for reuse. */
    assert_ptr_equal(b.data, p);
    assert_int_equal(b.cap, cap);
    check_terminated(&b);
    assert_int_equal(buf_puts(&b, "hi"), 0);
    assert_string_equal(buf_str(&b), "hi");
    buf_free(&b);
}

static void test_detach(void **state)
{
    struct buf b = BUF_INIT;
    assert_int_equal(buf_puts(&b, "owned"), 0);
    size_t len = 0;
    uint8_t *p = buf_detach(&b, &len);
    assert_non_null(p);
    assert_int_equal(len, 5);
    assert_string_equal((const char *)p, "owned"); /* still terminated */
    /* The buffer gave up the memory and is empty and reusable. */
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    assert_string_equal(buf_str(&b), "");
    assert_int_equal(buf_puts(&b, "again"), 0);
    assert_string_equal(buf_str(&b), "again");
    assert_true(b.data != p);
    free(p); /* the caller owns it: plain free() */

    uint8_t *q = buf_detach(&b, NULL); /* ret_len may be NULL */
    assert_string_equal((const char *)q, "again");
    free(q);
    buf_free(&b); /* nothing left to free */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_empty),
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_append_empty_allocates),
        cmocka_unit_test(test_growth),
        cmocka_unit_test(test_printf),
        cmocka_unit_test(test_reserve),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_detach),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
