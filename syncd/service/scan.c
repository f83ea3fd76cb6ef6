/*
 * scan.c — the single read loop.  Refill when fewer than `max` bytes remain
 * (unless at EOF), cut, hand the chunk out, advance.  The whole-file hash
 * is updated from the same buffer, so each byte is read exactly once; the
 * tensor hint is parsed from the first fill, before its first chunk is
 * handed out (no extra read: a header larger than the buffer gives none).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/le.h"
#include "engine/tensorview.h"
#include "service/scan.h"

int scan_init(struct scan *sc, const struct fastcdc *cdc)
{
    memset(sc, 0, sizeof(*sc));
    sc->cdc = cdc;
    sc->cap = 2 * cdc->max;
    sc->buf = malloc(sc->cap);
    if (!sc->buf)
        return -ENOMEM;
    int e = hash_init(&sc->file_hash);
    if (e < 0) {
        free(sc->buf);
        sc->buf = NULL;
    }
    return e;
}

void scan_free(struct scan *sc)
{
    if (!sc->buf)
        return;
    free(sc->buf);
    hash_free(&sc->file_hash);
    tensorhint_free(&sc->hint);
    sc->buf = NULL;
}

unsigned scan_width(const struct scan *sc, uint64_t off, size_t len)
{
    return tensorhint_width(&sc->hint, off, len);
}

/* Exactly len bytes at off of the fd *ud (torchzip_read_fn). */
static int scan_pread(void *ud, uint64_t off, void *buf, size_t len)
{
    for (size_t done = 0; done < len;) {
        if (off + done > INT64_MAX)
            return -EINVAL;
        ssize_t n = pread(*(int *)ud, (uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n == 0)
            return -EIO; /* shorter than its directory says */
        done += n > 0 ? (size_t)n : 0;
    }
    return 0;
}

/* A torch.save zip's widths, from its directory and pickle (preads that
 * leave the file offset alone). */
static void scan_hint_torch(struct scan *sc, int fd, uint64_t size)
{
    struct tensorview v = TENSORVIEW_INIT;
    if (tensorview_torch(size, scan_pread, &fd, &v, NULL) == 0)
        (void)tensorhint_from_view(&v, &sc->hint);
    tensorview_free(&v);
}

int scan_view(int fd, uint64_t size, struct tensorview *v)
{
    uint8_t head[8];
    int e = size >= 8 ? scan_pread(&fd, 0, head, 8) : CKS_E_FORMAT;
    if (e < 0)
        return e;
    if (torchzip_is_zip(head, 8))
        return tensorview_torch(size, scan_pread, &fd, v, NULL);
    uint64_t n = (uint64_t)le32_get(head) | (uint64_t)le32_get(head + 4) << 32;
    if (n > TENSORVIEW_MAX_HEADER || n + 8 > size)
        return CKS_E_FORMAT;
    uint8_t *h = malloc((size_t)n + 8);
    if (!h)
        return -ENOMEM;
    if ((e = scan_pread(&fd, 0, h, (size_t)n + 8)) == 0)
        e = tensorview_safetensors(h, (size_t)n + 8, size, v, NULL);
    free(h);
    return e;
}

/* The hint from the file's first bytes, when fd was at its start. */
static void scan_hint(struct scan *sc, int fd, size_t filled)
{
    struct stat st;
    if (filled < 8 || lseek(fd, 0, SEEK_CUR) != (off_t)filled || fstat(fd, &st) < 0 ||
        !S_ISREG(st.st_mode))
        return;
    size_t need = tensorhint_need(sc->buf, filled, (uint64_t)st.st_size);
    if (need && need <= filled)
        (void)tensorhint_parse(sc->buf, filled, (uint64_t)st.st_size, &sc->hint);
    else if (torchzip_is_zip(sc->buf, filled))
        scan_hint_torch(sc, fd, (uint64_t)st.st_size);
}

int scan_fd(struct scan *sc, int fd,
            int (*on_chunk)(void *ud, const uint8_t *data, size_t len, uint64_t off), void *ud,
            uint64_t *ret_read, uint8_t ret_digest[HASH_LEN])
{
    size_t start = 0, end = 0;
    uint64_t off = 0;
    bool eof = false;

    *ret_read = 0;
    hash_reset(&sc->file_hash);
    tensorhint_free(&sc->hint);
    for (;;) {
        if (!eof && end - start < sc->cdc->max) {
            memmove(sc->buf, sc->buf + start, end - start);
            end -= start;
            start = 0;
            ssize_t n = fileio_read_full(fd, sc->buf + end, sc->cap - end);
            if (n < 0)
                return (int)n;
            eof = (size_t)n < sc->cap - end;
            end += (size_t)n;
            if (*ret_read == 0)
                scan_hint(sc, fd, (size_t)n);
            *ret_read += (uint64_t)n;
        }
        if (start == end)
            break;
        size_t len = fastcdc_cut(sc->cdc, sc->buf + start, end - start, eof);
        if (len == 0)
            return -EIO; /* cannot happen: the buffer holds >= max bytes */
        if (ret_digest)
            hash_update(&sc->file_hash, sc->buf + start, len);
        int e = on_chunk(ud, sc->buf + start, len, off);
        if (e < 0)
            return e;
        start += len;
        off += len;
    }
    if (ret_digest)
        hash_final(&sc->file_hash, ret_digest);
    return 0;
}
