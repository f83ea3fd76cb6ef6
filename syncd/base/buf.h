/*
 * buf.h — a growable byte buffer (after git's strbuf).
 *
 * struct buf b = BUF_INIT; ... buf_free(&b);
 * data is always NUL-terminated past len (when non-NULL) so text can be
 * used as a C string.  Functions return 0 or -ENOMEM.  The buffer owns
 * data; buf_detach() hands ownership to the caller.
 *
 * Not thread-safe: one buffer, one thread.
 */
#ifndef CKS_BUF_H
#define CKS_BUF_H

#include <stddef.h>
#include <stdint.h>

struct buf {
    uint8_t *data;
    size_t len;
    size_t cap;
};

#define BUF_INIT                                                                                   \
    {                                                                                              \
        NULL, 0, 0                                                                                 \
    }

int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t len);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_reset(struct buf *b);
void buf_free(struct buf *b);
uint8_t *buf_detach(struct buf *b, size_t *ret_len);
/* The contents as a C string ("" when empty). */
const char *buf_str(const struct buf *b);

#endif
