/*
 * log.c — stderr logger.  One write(2) per line so concurrent threads never
 * interleave within a line; the journald priority prefix is added only when
 * systemd tells us stderr is the journal.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    case LOG_LVL_ERROR:
        return "error";
    case LOG_LVL_WARN:
        return "warning";
    case LOG_LVL_INFO:
        return "info";
    default:
        return "debug";
    }
}

/* The "ckptsync: info: " or "<6>info: " prefix; its length, or -1. */
static int log_prefix(enum log_level level, char *line, size_t size)
{
    int n;
    if (log_journal < 0)
        log_journal = getenv("JOURNAL_STREAM") != NULL;
    if (log_journal)
        n = snprintf(line, size, "<%d>%s: ", (int)level, log_word(level));
    else
        n = snprintf(line, size, "%s: %s: ", log_prog, log_word(level));
    return n < 0 || (size_t)n >= size ? -1 : n;
}

static void log_write(char *line, size_t n, size_t size)
{
    if (n > size - 2)
        n = size - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    char line[2048];
    va_list ap;

    if (level > log_max)
        return;
    int n = log_prefix(level, line, sizeof(line));
    if (n < 0)
        return;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    log_write(line, (size_t)n + (size_t)m, sizeof(line));
}

static bool log_plain(const char *s)
{
    if (!s[0])
        return false;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || *s == '"' || *s == '=' || *s == '\\' || *s == 0x7f)
            return false;
    return true;
}

/* Appends s escaped (without quotes) to out[*len..size-reserve). */
static void log_escape(char *out, size_t *len, size_t limit, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char e[5] = {0};
        if (c == '"' || c == '\\')
            e[0] = '\\', e[1] = (char)c;
        else if (c == '\n')
            e[0] = '\\', e[1] = 'n';
        else if (c == '\t')
            e[0] = '\\', e[1] = 't';
        else if (c < ' ' || c == 0x7f)
            e[0] = '\\', e[1] = 'x', e[2] = hex[c >> 4], e[3] = hex[c & 15];
        else
            e[0] = (char)c;
        size_t k = strlen(e);
        if (*len + k > limit)
            return;
        memcpy(out + *len, e, k);
        *len += k;
    }
}

const char *log_quote(char *out, size_t size, const char *s)
{
    size_t len = 0;
    if (size < 3) {
        if (size)
            out[0] = 0;
        return out;
    }
    if (log_plain(s)) {
        snprintf(out, size, "%s", s);
        return out;
    }
    out[len++] = '"';
    log_escape(out, &len, size - 2, s);
    out[len++] = '"';
    out[len] = 0;
    return out;
}

void log_event(enum log_level level, const char *fields, const char *fmt, ...)
{
    char line[2048], text[1536];
    va_list ap;

    if (level > log_max)
        return;
    int n = log_prefix(level, line, sizeof(line));
    if (n < 0)
        return;
    va_start(ap, fmt);
    int m = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n;
    int f = snprintf(line + len, sizeof(line) - len, "%s msg=\"", fields);
    if (f < 0 || (size_t)f >= sizeof(line) - len - 3)
        return;
    len += (size_t)f;
    log_escape(line, &len, sizeof(line) - 3, text); /* room for '"' and '\n' */
    line[len++] = '"';
    log_write(line, len, sizeof(line));
}
