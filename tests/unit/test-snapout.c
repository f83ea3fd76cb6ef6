/*
 * test-snapout.c — the two documents of a snapshot's outcome, byte for
 * byte: the daemon's commit answer and `ckptsync snapshot --json` (without
 * regions, whose names come from an open repository; the integration
 * tests cover those).  Each counter has a distinct value, so a row that
 * reads the wrong field or a row out of order shows.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "service/snapout.h"

#define ID "20261201T000701.123456Z-3f2a9c1b"

static void emit(const struct snapout *o, enum snapout_view v, struct buf *out)
{
    struct json j;
    buf_reset(out);
    json_init(&j, out);
    snapout_json(&j, o, v);
    assert_int_equal(j.err, 0);
}

static void test_commit(void **state)
{
    (void)state;
    struct buf out = BUF_INIT;
    struct snapout o = {.id = ID, .run = "r1", .committed = 2, .durable = true};
    emit(&o, SNAPOUT_COMMIT, &out);
    assert_string_equal(buf_str(&out), "{\"id\":\"" ID "\",\"run\":\"r1\",\"regions_committed\":2,"
                                       "\"durable\":true,\"replicated\":false}");
    o.committed = 3, o.replicated = true;
    emit(&o, SNAPOUT_COMMIT, &out);
    assert_string_equal(buf_str(&out), "{\"id\":\"" ID "\",\"run\":\"r1\",\"regions_committed\":3,"
                                       "\"durable\":true,\"replicated\":true}");
    buf_free(&out);
}

static void test_take(void **state)
{
    (void)state;
    struct buf out = BUF_INIT;
    struct snapshot_result *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    snprintf(s->id, sizeof(s->id), "%s", ID);
    snprintf(s->root, sizeof(s->root), "step_\"7\"");
    s->files = 1, s->dirs = 2, s->links = 3, s->bytes = 10, s->files_unchanged = 5;
    s->readers = 3;
    s->chunks = 6, s->new_chunks = 7, s->new_bytes = 4, s->stored_bytes = 9;
    s->bytes_sent = 18; /* each new chunk sent twice: 2x */
    s->confirm_asked = 11, s->confirm_heads = 12, s->confirm_listed = 13;
    s->confirm_missing = 14, s->committed = 1;
    struct snapout o = {.id = s->id, .run = "ignored", .res = s, .committed = 1};
    emit(&o, SNAPOUT_TAKE, &out);
    assert_string_equal(
        buf_str(&out),
        "{\"id\":\"" ID "\",\"root\":\"step_\\\"7\\\"\",\"files\":1,\"dirs\":2,"
        "\"symlinks\":3,\"bytes\":10,\"files_unchanged\":5,\"readers\":3,\"chunks\":6,"
        "\"new_chunks\":7,\"new_bytes\":4,\"stored_bytes\":9,"
        "\"bytes_sent\":18,\"sent_ratio\":2,"
        "\"confirmed_chunks\":11,\"confirm_heads\":12,\"confirm_listed\":13,"
        "\"reuploaded_chunks\":14,\"dedup_ratio\":2.5,\"committed\":1,"
        "\"durable\":false,\"replicated\":false,\"regions\":[]}");
    s->new_bytes = 0; /* nothing new: the ratio is 0, not a division by zero */
    emit(&o, SNAPOUT_TAKE, &out);
    assert_non_null(strstr(buf_str(&out), "\"dedup_ratio\":0,"));
    s->stored_bytes = 0; /* likewise the bytes sent per new stored byte */
    emit(&o, SNAPOUT_TAKE, &out);
    assert_non_null(strstr(buf_str(&out), "\"sent_ratio\":0,"));
    free(s);
    buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit),
        cmocka_unit_test(test_take),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
