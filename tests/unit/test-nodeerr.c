/*
 * test-nodeerr.c — a node's error record (service/nodeerr.h): the body
 * round-trips and is checked against its key; a message is cut to one
 * line; bodies that are not exactly a record, or that disagree with their
 * key, are refused.  (Writing and collecting them from regions is
 * exercised by integration/test-multinode-life.)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "service/nodeerr.h"

static const struct nodeerr ref = {
    .k = {.run = "job",
          .step = 1000,
          .rank = 1,
          .nodes = 4,
          .time = 1764806400,
          .tag = "00112233445566ff"},
    .host = "gpu-1",
    .msg = "step 1000 cannot commit",
};

static void key_of(const struct nodeerr *n, char *key)
{
    assert_int_equal(layout_nodeerr(&n->k, key), 0);
}

static void test_round_trip(void **state)
{
    (void)state;
    char key[LAYOUT_KEY_MAX];
    struct buf b = BUF_INIT;
    struct nodeerr got;
    key_of(&ref, key);
    assert_int_equal(nodeerr_encode(&ref, &b), 0);
    assert_string_equal(buf_str(&b), "ckptsync-nodeerr 1\nnode 1 4\nstep 1000\ntime 1764806400\n"
                                     "host gpu-1\nerror step 1000 cannot commit\n");
    assert_int_equal(nodeerr_decode(key, b.data, b.len, &got), 0);
    assert_memory_equal(&got.k, &ref.k, sizeof(ref.k));
    assert_string_equal(got.host, "gpu-1");
    assert_string_equal(got.msg, ref.msg);
    buf_free(&b);
}

/* A message with line breaks and control bytes stays one line. */
static void test_one_line(void **state)
{
    (void)state;
    struct nodeerr n = ref, got;
    char key[LAYOUT_KEY_MAX];
    struct buf b = BUF_INIT;
    snprintf(n.msg, sizeof(n.msg), "a\nb\rc\x01");
    key_of(&n, key);
    assert_int_equal(nodeerr_encode(&n, &b), 0);
    assert_int_equal(nodeerr_decode(key, b.data, b.len, &got), 0);
    assert_string_equal(got.msg, "a b c ");
    buf_free(&b);
}

static void test_hostile(void **state)
{
    (void)state;
    char key[LAYOUT_KEY_MAX];
    struct nodeerr got;
    key_of(&ref, key);
    static const struct {
        const char *body;
        int want;
    } bad[] = {
        {"", CKS_E_FORMAT},
        {"ckptsync-nodeerr 2\nnode 1 4\nstep 1000\ntime 1764806400\nhost h\nerror x\n",
         CKS_E_FORMAT},
        {"ckptsync-nodeerr 1\nnode 1 4\nstep 1000\ntime 1764806400\nhost h\n", CKS_E_FORMAT},
        {"ckptsync-nodeerr 1\nnode 1 4\nstep 1000\ntime 1764806400\nhost h\nerror x", CKS_E_FORMAT},
        {"ckptsync-nodeerr 1\nnode 1 4\nstep 1000\ntime 1764806400\nhost h\nerror x\nmore\n",
         CKS_E_FORMAT},
        {"ckptsync-nodeerr 1\nnode 2 4\nstep 1000\ntime 1764806400\nhost h\nerror x\n",
         CKS_E_MISMATCH},
        {"ckptsync-nodeerr 1\nnode 1 4\nstep 999\ntime 1764806400\nhost h\nerror x\n",
         CKS_E_MISMATCH},
        {"ckptsync-nodeerr 1\nnode 1 4\nstep 1000\ntime 1\nhost h\nerror x\n", CKS_E_MISMATCH},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int e = nodeerr_decode(key, (const uint8_t *)bad[i].body, strlen(bad[i].body), &got);
        if (e != bad[i].want)
            fail_msg("body %zu: %d, expected %d", i, e, bad[i].want);
    }
    const char *ok = "ckptsync-nodeerr 1\nnode 1 4\nstep 1000\ntime 1764806400\nhost h\nerror x\n";
    assert_int_equal(nodeerr_decode("parts/job/x", (const uint8_t *)ok, strlen(ok), &got),
                     CKS_E_FORMAT);
    assert_int_equal(nodeerr_decode(key, (const uint8_t *)ok, strlen(ok), &got), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_one_line),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
