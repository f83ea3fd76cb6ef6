/*
 * textline.h — the line reader of the small line-based objects (handoff
 * records, key slots): one strict line at a time from a bounded buffer.
 */
#ifndef CKS_TEXTLINE_H
#define CKS_TEXTLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* The next line from *p (before end) into line (without '\n', NUL
 * terminated), advancing *p; false at the end, when the line is not
 * terminated, holds a NUL, or does not fit cap. */
static inline bool textline_next(const char **p, const char *end, char *line, size_t cap)
{
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    size_t n = nl ? (size_t)(nl - *p) : 0;
    if (!nl || n >= cap || memchr(*p, 0, n))
        return false;
    memcpy(line, *p, n);
    line[n] = 0;
    *p = nl + 1;
    return true;
}

#endif
