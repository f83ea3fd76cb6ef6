/*
 * log.c — stderr logger.  One write(2) per line so concurrent threads never
 * interleave within a line; the journald priority prefix is added only when
 * systemd tells us stderr is the journal.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/log.h"

static const char *log_prog = "ckptsync";
static enum log_level log_max = LOG_LVL_INFO;
static int log_journal = -1;

void log_init(const char *progname, enum log_level max_level)
{
    log_prog = progname;
    log_max = max_level;
    log_journal = getenv("JOURNAL_STREAM") != NULL;
}

void log_set_level(enum log_level max_level)
{
    log_max = max_level;
}

static const char *log_word(enum log_level level)
{
    switch (level) {
    case LOG_LVL_ERROR: return "error";
    case LOG_LVL_WARN: return "warning";
    case LOG_LVL_INFO: return "info";
    default: return "debug";
    }
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char line[2048];
    int n;
    va_list ap;

    if (level > log_max)
        return;
    if (log_journal < 0)
        log_journal = getenv("JOURNAL_STREAM") != NULL;
    if (log_journal)
        n = snprintf(line, sizeof(line), "<%d>%s: ", (int)level, log_word(level));
    else
        n = snprintf(line, sizeof(line), "%s: %s: ", log_prog, log_word(level));
    if (n < 0 || (size_t)n >= sizeof(line))
        return;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    n += m;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
