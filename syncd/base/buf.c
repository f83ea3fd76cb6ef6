/*
 * buf.c — growable buffer; grows geometrically so appends are amortized O(1).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

int buf_reserve(struct buf *b, size_t extra)
{
    if (extra > SIZE_MAX - b->len - 1)
        return -ENOMEM;
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    /* An empty buffer (reset for reuse) has nothing worth copying: realloc
     * would copy its whole old capacity, and a fresh block is no dearer. */
    uint8_t *p;
    if (b->len == 0) {
        free(b->data);
        b->data = NULL;
        b->cap = 0;
        p = malloc(cap);
    } else {
        p = realloc(b->data, cap);
    }
    if (!p)
        return -ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
    int r = buf_reserve(b, len);
    if (r < 0)
        return r;
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    int r = buf_reserve(b, (size_t)n);
    if (r < 0)
        return r;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = 0;
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

uint8_t *buf_detach(struct buf *b, size_t *ret_len)
{
    uint8_t *p = b->data;
    if (ret_len)
        *ret_len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

const char *buf_str(const struct buf *b)
{
    return b->data ? (const char *)b->data : "";
}
