/*
 * test-log.c — log_quote (table: what stays bare, what is quoted and how
 * it is escaped, cutting to size) and the shape of a log_event line, read
 * back from stderr through a pipe.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"

static const struct {
    const char *in, *want;
} quote_cases[] = {
    {"r1", "r1"},
    {"20260101T000000.000000Z-abcdef01", "20260101T000000.000000Z-abcdef01"},
    {"r1/step_100.pt", "r1/step_100.pt"},
    {"", "\"\""},
    {"two words", "\"two words\""},
    {"epoch=3-step=10.ckpt", "\"epoch=3-step=10.ckpt\""},
    {"say \"hi\"", "\"say \\\"hi\\\"\""},
    {"back\\slash", "\"back\\\\slash\""},
    {"line\nbreak\ttab\x01", "\"line\\nbreak\\ttab\\x01\""},
    {"caf\xc3\xa9", "caf\xc3\xa9"},
};

static void test_quote(void **state)
{
    char out[128];
    (void)state;
    for (size_t i = 0; i < sizeof(quote_cases) / sizeof(quote_cases[0]); i++) {
        log_quote(out, sizeof(out), quote_cases[i].in);
        if (strcmp(out, quote_cases[i].want))
            fail_msg("case %zu: got '%s', want '%s'", i, out, quote_cases[i].want);
    }
    /* cut to fit, still closed */
    char small[8];
    assert_string_equal(log_quote(small, sizeof(small), "a b c d e f"), "\"a b c\"");
    assert_string_equal(log_quote(small, sizeof(small), "\\\\\\\\"), "\"\\\\\\\\\"");
}

static void read_line(int fd, char *out, size_t size)
{
    ssize_t n = read(fd, out, size - 1);
    assert_true(n > 0);
    out[n] = 0;
}

static void test_event(void **state)
{
    int p[2], saved = dup(STDERR_FILENO);
    char line[4096], big[3000];
    (void)state;
    unsetenv("JOURNAL_STREAM");
    log_init("ckptsyncd", LOG_LVL_INFO);
    assert_int_equal(pipe(p), 0);
    dup2(p[1], STDERR_FILENO);
    log_event(LOG_LVL_INFO, "event=replicated run=r1 snapshot=S regions=3",
              "snapshot %s of \"%s\" is replicated", "S", "r1/x");
    read_line(p[0], line, sizeof(line));
    assert_string_equal(line, "ckptsyncd: info: event=replicated run=r1 snapshot=S regions=3 "
                              "msg=\"snapshot S of \\\"r1/x\\\" is replicated\"\n");
    log_event(LOG_LVL_DEBUG, "event=x", "below the level: not written");
    /* a human text too long for a line is cut, and the line stays logfmt */
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    log_event(LOG_LVL_WARN, "event=long", "%s", big);
    read_line(p[0], line, sizeof(line));
    size_t n = strlen(line);
    assert_true(n <= 2048);
    assert_memory_equal(line, "ckptsyncd: warning: event=long msg=\"xxx", 38);
    assert_memory_equal(line + n - 3, "x\"\n", 3);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quote),
        cmocka_unit_test(test_event),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
