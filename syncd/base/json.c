/*
 * json.c — a streaming JSON writer (no parser: the control protocol's
 * reader lives with the protocol codec).
 *
 * Design note.  The writer keeps one "a value was written at this depth"
 * flag per nesting level, so callers never place commas themselves, and a
 * flag telling that a key is waiting for its value.  Misuse (too deep,
 * unbalanced end, a key outside an object) and ENOMEM set j->err once; every
 * later call is then a no-op, so callers check j->err only at the end.
 *
 * Strings are copied through in runs: a run of bytes that need no escaping
 * and form valid UTF-8 is appended in one call.  A byte that does not start
 * a valid, shortest-form UTF-8 sequence (and surrogates, and code points
 * above U+10FFFF) is written as \u00XX of its value, so the output is always
 * valid JSON even when a file name is not valid UTF-8.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/numfmt.h"

static void json_put(struct json *j, const void *data, size_t len)
{
    if (j->err == 0)
        j->err = buf_append(j->out, data, len);
}

static void json_putc(struct json *j, char c)
{
    json_put(j, &c, 1);
}

/* Comma and bookkeeping before any value or key. */
static void json_before(struct json *j)
{
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (j->need_comma[j->depth])
        json_putc(j, ',');
    j->need_comma[j->depth] = true;
}

void json_init(struct json *j, struct buf *out)
{
    memset(j, 0, sizeof(*j));
    j->out = out;
}

static void json_open(struct json *j, char c)
{
    if (j->err)
        return;
    if (j->depth + 1 >= JSON_MAX_DEPTH) {
        j->err = -E2BIG;
        return;
    }
    json_before(j);
    json_putc(j, c);
    j->depth++;
    j->need_comma[j->depth] = false;
}

static void json_close(struct json *j, char c)
{
    if (j->err)
        return;
    if (j->depth == 0 || j->after_key) {
        j->err = -EINVAL;
        return;
    }
    j->depth--;
    json_putc(j, c);
}

void json_obj_begin(struct json *j)
{
    json_open(j, '{');
}

void json_obj_end(struct json *j)
{
    json_close(j, '}');
}

void json_arr_begin(struct json *j)
{
    json_open(j, '[');
}

void json_arr_end(struct json *j)
{
    json_close(j, ']');
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if s[0] does not
 * start one.  Rejects overlong forms, surrogates and values > U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the 2nd byte */

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        if (c == 0xF4)
            hi = 0x8F; /* > U+10FFFF */
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

/* The escape for byte c, or NULL if it is written as it is. */
static const char *json_escape(unsigned char c, char tmp[8])
{
    switch (c) {
    case '"':
        return "\\\"";
    case '\\':
        return "\\\\";
    case '\b':
        return "\\b";
    case '\f':
        return "\\f";
    case '\n':
        return "\\n";
    case '\r':
        return "\\r";
    case '\t':
        return "\\t";
    }
    if (c < 0x20) {
        snprintf(tmp, 8, "\\u%04x", c);
        return tmp;
    }
    return NULL;
}

static void json_string(struct json *j, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t run = 0; /* bytes [i - run, i) are pending, copied verbatim */
    size_t i = 0;
    char tmp[8];

    json_putc(j, '"');
    while (i < n) {
        const char *esc = json_escape(s[i], tmp);
        size_t u = esc ? 1 : utf8_len(s + i, n - i);
        if (!esc && u > 0) {
            run += u;
            i += u;
            continue;
        }
        json_put(j, s + i - run, run);
        run = 0;
        if (!esc) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", s[i]);
            esc = tmp;
        }
        json_put(j, esc, strlen(esc));
        i++;
    }
    json_put(j, s + i - run, run);
    json_putc(j, '"');
}

void json_key(struct json *j, const char *key)
{
    if (j->err)
        return;
    if (j->after_key || j->depth == 0) {
        j->err = -EINVAL;
        return;
    }
    json_before(j);
    json_string(j, key, strlen(key));
    json_putc(j, ':');
    j->after_key = true;
}

void json_strn(struct json *j, const char *s, size_t n)
{
    if (j->err)
        return;
    json_before(j);
    json_string(j, s, n);
}

void json_str(struct json *j, const char *s)
{
    if (!s)
        json_null(j);
    else
        json_strn(j, s, strlen(s));
}

/* Writes an already formatted number or literal. */
static void json_raw(struct json *j, const char *text)
{
    if (j->err)
        return;
    json_before(j);
    json_put(j, text, strlen(text));
}

void json_u64(struct json *j, uint64_t v)
{
    char tmp[24];
    snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v);
    json_raw(j, tmp);
}

void json_i64(struct json *j, int64_t v)
{
    char tmp[24];
    snprintf(tmp, sizeof(tmp), "%lld", (long long)v);
    json_raw(j, tmp);
}

void json_double(struct json *j, double v)
{
    char tmp[NUMFMT_DOUBLE_MAX];

    if (!isfinite(v)) {
        json_null(j);
        return;
    }
    json_raw(j, numfmt_double(v, tmp));
}

void json_bool(struct json *j, bool v)
{
    json_raw(j, v ? "true" : "false");
}

void json_null(struct json *j)
{
    json_raw(j, "null");
}
