/*
 * scan.h — read a file once: cut it with FastCDC and hash it whole, handing
 * each chunk to a callback.  Shared by the one-shot snapshot, the daemon's
 * ingest and `ckptsync chunks`, so every path cuts files identically.
 *
 *   struct scan sc;
 *   scan_init(&sc, &cdc);                  // allocates a 2*max buffer
 *   scan_fd(&sc, fd, on_chunk, ud, &n, digest);
 *   scan_free(&sc);
 *
 * The buffer holds two maximal chunks, so a cut always sees `max` bytes
 * until the end of the file.  One struct per thread.
 *
 * The file's own metadata comes from the same first read: a safetensors
 * header that fits the buffer (engine/tensorhint.h) gives each chunk its
 * element width, scan_width(), which the chunk encoder then uses.
 */
#ifndef CKS_SCAN_H
#define CKS_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/fastcdc.h"
#include "engine/hash.h"
#include "engine/tensorhint.h"
#include "engine/tensorview.h"

struct scan {
    const struct fastcdc *cdc;
    uint8_t *buf;
    size_t cap;
    struct hash file_hash;
    struct tensorhint hint; /* of the file being scanned (empty: none) */
};

int scan_init(struct scan *sc, const struct fastcdc *cdc);
void scan_free(struct scan *sc);
/* Reads fd from its current offset to EOF.  on_chunk gets every chunk with
 * its offset; a negative return from it stops the scan and is returned.
 * ret_read gets the bytes read, ret_digest the SHA-256 of them (NULL:
 * not wanted, and not computed).  Returns 0 or a negative errno / the callback's error. */
int scan_fd(struct scan *sc, int fd,
            int (*on_chunk)(void *ud, const uint8_t *data, size_t len, uint64_t off), void *ud,
            uint64_t *ret_read, uint8_t ret_digest[HASH_LEN]);
/* The element width the scanned file's metadata gives for its bytes
 * [off, off + len) (2 or 4), 0 when it gives none.  Valid from the first
 * on_chunk call of a scan until the next scan_fd. */
unsigned scan_width(const struct scan *sc, uint64_t off, size_t len);
/* The tensor view of the regular file fd (size bytes; read with preads,
 * its offset left alone): a torch.save zip or a safetensors file.  0,
 * CKS_E_FORMAT (neither), the view's other errors, -errno. */
int scan_view(int fd, uint64_t size, struct tensorview *v);

#endif
