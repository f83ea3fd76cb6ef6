/*
 * test-migrate.c — migrate-out's wait (service/migrate.h) against a fake
 * daemon: a table of status documents, each judged "everything safe" or
 * not for a run selection and a quorum (with no deadline left: one poll);
 * a daemon that becomes safe on its third status (polled until then); and
 * a status error, which ends the wait with that error and no document.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "service/migrate.h"

struct fake {
    const char *const *docs; /* one per status call; the last repeats */
    size_t ndocs, calls, flushes;
    int fail; /* status returns this when non-zero */
};

static void fake_flush(void *ud, int64_t deadline_s)
{
    struct fake *f = ud;
    (void)deadline_s;
    f->flushes++;
}

static int fake_status(void *ud, struct jnode **ret)
{
    struct fake *f = ud;
    const char *doc = f->docs[f->calls < f->ndocs ? f->calls : f->ndocs - 1];
    f->calls++;
    if (f->fail)
        return f->fail;
    return jsonread_parse(doc, strlen(doc), ret, NULL);
}

#define RUNS(x) "{\"units_pending\":0,\"ingest_busy\":0,\"runs\":[" x "]}"
#define RUN(name, k)                                                                               \
    "{\"run\":\"" name "\",\"latest\":{\"id\":\"s1\",\"step\":5,\"regions_committed\":" #k "}}"

static const struct {
    const char *doc, *run;
    unsigned quorum;
    bool safe;
} cases[] = {
    {RUNS(RUN("r1", 2)), NULL, 2, true},
    {RUNS(RUN("r1", 1)), NULL, 2, false},
    {RUNS(RUN("r1", 2) "," RUN("r2", 1)), NULL, 2, false},
    {RUNS(RUN("r1", 2) "," RUN("r2", 1)), "r1", 2, true}, /* only r1 is asked about */
    {RUNS(RUN("r1", 2)), "r9", 1, false},                 /* a named run must be there */
    {RUNS(""), NULL, 1, true},                            /* no run at all: nothing to wait for */
    {"{\"units_pending\":1,\"ingest_busy\":0,\"runs\":[" RUN("r1", 3) "]}", NULL, 2, false},
    {"{\"units_pending\":0,\"ingest_busy\":1,\"runs\":[" RUN("r1", 3) "]}", NULL, 2, false},
    {"{\"runs\":[" RUN("r1", 3) "]}", NULL, 2, false}, /* counts missing: not idle */
};

static void test_wait_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct fake f = {&cases[i].doc, 1, 0, 0, 0};
        struct migrate_daemon d = {fake_flush, fake_status, &f};
        struct jnode *status = NULL;
        bool in_time = !cases[i].safe;
        int e = migrate_out_wait(&d, cases[i].run, cases[i].quorum, 0, &status, &in_time);
        if (e != 0 || in_time != cases[i].safe || !status || f.flushes != 1 || f.calls != 1)
            fail_msg("case %zu: e %d, in_time %d (want %d), flushes %zu, polls %zu", i, e, in_time,
                     cases[i].safe, f.flushes, f.calls);
        jsonread_free(status);
    }
}

static void test_wait_until_safe(void **state)
{
    static const char *const docs[] = {RUNS(RUN("r1", 0)), RUNS(RUN("r1", 1)), RUNS(RUN("r1", 2))};
    struct fake f = {docs, 3, 0, 0, 0};
    struct migrate_daemon d = {fake_flush, fake_status, &f};
    struct jnode *status = NULL;
    bool in_time = false;
    (void)state;
    assert_int_equal(migrate_out_wait(&d, "r1", 2, 3600, &status, &in_time), 0);
    assert_true(in_time);
    assert_int_equal(f.calls, 3);
    const struct jnode *l = jnode_get(jnode_at(jnode_get(status, "runs"), 0), "latest");
    assert_int_equal((int)jnode_num(jnode_get(l, "regions_committed"), -1), 2); /* the last one */
    jsonread_free(status);
}

static void test_wait_status_error(void **state)
{
    static const char *const docs[] = {RUNS(RUN("r1", 0))};
    struct fake f = {docs, 1, 0, 0, -ECONNRESET};
    struct migrate_daemon d = {fake_flush, fake_status, &f};
    struct jnode *status = (struct jnode *)&f; /* must be cleared */
    bool in_time = true;
    (void)state;
    assert_int_equal(migrate_out_wait(&d, NULL, 1, 3600, &status, &in_time), -ECONNRESET);
    assert_null(status);
    assert_false(in_time);
    assert_int_equal(f.calls, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_table),
        cmocka_unit_test(test_wait_until_safe),
        cmocka_unit_test(test_wait_status_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
