/*
 * ckptname.c — the step in a checkpoint's name, and framework staging
 * names (see ckptname.h for the conventions).
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "engine/ckptname.h"

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool ends_with_nocase(const char *s, size_t len, const char *suffix)
{
    size_t l = strlen(suffix);
    return len > l && !strncasecmp(s + len - l, suffix, l);
}

/* Python's tempfile default names: "tmp" and 8 of [a-z0-9_], then the end
 * or a suffix ("tmpk3j2_9xq", "tmpab12cd34.pt"). */
static bool python_tempname(const char *s, size_t len)
{
    if (len < 11 || strncmp(s, "tmp", 3))
        return false;
    for (size_t i = 3; i < 11; i++)
        if (!(s[i] == '_' || is_digit(s[i]) || (s[i] >= 'a' && s[i] <= 'z')))
            return false;
    return len == 11 || s[11] == '.';
}

/* TensorFlow's sharded saves: "<prefix>_temp" or "<prefix>_temp_<32 hex>". */
static bool tf_tempname(const char *s, size_t len)
{
    if (ends_with_nocase(s, len, "_temp"))
        return true;
    if (len < 6 + 32 || strncmp(s + len - 38, "_temp_", 6))
        return false;
    return strspn(s + len - 32, "0123456789abcdef") >= 32;
}

bool ckptname_transient(const char *name, size_t len)
{
    static const char *const suffixes[] = {".tmp",     ".temp",       ".part",
                                           ".partial", ".incomplete", "-unfinished"};
    if (len == 0 || name[0] == '.')
        return len > 0;
    if (!strncmp(name, "tmp-", 4) || python_tempname(name, len) || tf_tempname(name, len))
        return true;
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++)
        if (ends_with_nocase(name, len, suffixes[i]))
            return true;
    for (size_t i = 0; i + 22 <= len; i++) /* Orbax: "<step>.orbax-checkpoint-tmp-<time>" */
        if (!strncmp(name + i, ".orbax-checkpoint-tmp-", 22))
            return true;
    return false;
}

/* Case-insensitive ASCII prefix test. */
static bool word_at(const char *s, const char *word)
{
    for (; *word; s++, word++) {
        char c = (*s >= 'A' && *s <= 'Z') ? (char)(*s - 'A' + 'a') : *s;
        if (c != *word)
            return false;
    }
    return true;
}

/* N at s (1..18 digits, then the end or a non-alphanumeric), else -1. */
int64_t ckptname_number(const char *s)
{
    int64_t v = 0;
    int n = 0;
    for (; is_digit(s[n]); n++) {
        if (n == 18)
            return -1;
        v = v * 10 + (s[n] - '0');
    }
    if (!n || is_alpha(s[n]) || is_digit(s[n]))
        return -1;
    return v;
}

static const struct {
    const char *word;
    const char *seps;
    bool sep_optional;
} step_words[] = {
    {"checkpoint", "-_", false},
    {"iter", "_-", false},
    {"step", "_-=", true},
};

/* The step of a keyword match at s (i bytes into the name), or -1. */
static int64_t step_at(const char *name, size_t i)
{
    if (i > 0 && is_alpha(name[i - 1]))
        return -1;
    for (size_t k = 0; k < sizeof(step_words) / sizeof(step_words[0]); k++) {
        if (!word_at(name + i, step_words[k].word))
            continue;
        const char *p = name + i + strlen(step_words[k].word);
        if (*p && strchr(step_words[k].seps, *p))
            p++;
        else if (!step_words[k].sep_optional)
            continue;
        int64_t v = ckptname_number(p);
        if (v >= 0)
            return v;
    }
    return -1;
}

int64_t ckptname_step(const char *name)
{
    size_t end = strlen(name), start;
    int64_t step = -1;

    while (end > 0 && name[end - 1] == '/') /* "run1/checkpoint-100/" from a shell */
        end--;
    for (start = end; start > 0 && name[start - 1] != '/'; start--)
        ;
    name += start;
    end -= start;
    for (size_t i = 0; i < end; i++) {
        int64_t v = step_at(name, i);
        if (v >= 0)
            step = v;
    }
    return step;
}
