/*
 * tensorhint.h — element widths from a file's own metadata, so that the
 * chunk encoder codes float tensors as byte planes of the right width
 * without guessing (engine/chunkobj.h, engine/tcodec.h).
 *
 * Understood today: safetensors, the format of the Hugging Face hub:
 *
 *   offset  size
 *   0       8    N, little endian: the header's length
 *   8       N    JSON object: tensor name -> {"dtype": "BF16", "shape": [...],
 *                "data_offsets": [begin, end]} (offsets from 8 + N),
 *                and an optional "__metadata__" object of strings
 *   8 + N   ...  the tensors' bytes
 *
 * Widths: BF16, F16 -> 2; F32 -> 4; every other dtype (F64, F8_*, ints,
 * BOOL) -> 0, which leaves the chunk to the encoder's own estimate.  The
 * torch zip (torch.save) keeps its dtypes in a pickle: engine/tensorview
 * reads it (the caller reads the file's directory and pickle), and
 * tensorhint_from_view turns its storages into widths the same way.  DCP
 * files are estimated.
 *
 * A file is data, not configuration: a header that is not safetensors, or
 * is malformed (offsets past the file, overlapping or out of order,
 * unknown shapes are fine), gives no hint, never an error the user sees.
 * Bounded: the header is at most TENSORHINT_MAX_HEADER bytes and yields at
 * most TENSORHINT_MAX_RANGES ranges.  Pure: no I/O (service/scan.c reads
 * the header).  Not thread-safe per hint; hints are independent.
 */
#ifndef CKS_TENSORHINT_H
#define CKS_TENSORHINT_H

#include <stddef.h>
#include <stdint.h>

struct tensorview;

#define TENSORHINT_MAX_HEADER (100u * 1024 * 1024) /* safetensors' own limit */
#define TENSORHINT_MAX_RANGES 1000000u

struct tensorhint_range {
    uint64_t begin, end; /* file offsets, end exclusive */
    unsigned width;      /* 2 or 4 */
};

struct tensorhint {
    struct tensorhint_range *v; /* sorted by begin, disjoint */
    size_t n;
};

#define TENSORHINT_INIT                                                                            \
    {                                                                                              \
        NULL, 0                                                                                    \
    }

/* How many bytes from the file's start tensorhint_parse() needs, from its
 * first 8 bytes (head[0..len), len >= 8): 8 + N when the file can be
 * safetensors (N fits the file and the bound), 0 when it cannot. */
size_t tensorhint_need(const uint8_t *head, size_t len, uint64_t file_size);
/* Parses the header in head[0..len) (the file's first bytes, len >=
 * tensorhint_need()) of a file of file_size bytes into h (freed first).
 * Returns 0 (h->n may be 0: nothing of width 2 or 4), CKS_E_FORMAT (not
 * safetensors, or malformed: h empty) or -ENOMEM. */
int tensorhint_parse(const uint8_t *head, size_t len, uint64_t file_size, struct tensorhint *h);
/* The width of the file's bytes [off, off + len): the width of ranges that
 * cover at least 3/4 of them, else 0 (mixed, or not a tensor). */
unsigned tensorhint_width(const struct tensorhint *h, uint64_t off, uint64_t len);
void tensorhint_free(struct tensorhint *h);
/* Widths from a view's storages (engine/tensorview.h): F32 -> 4, BF16 and
 * F16 -> 2, empty or other storages none.  0; CKS_E_FORMAT (width ranges
 * overlap, or more than TENSORHINT_MAX_RANGES: h empty), -ENOMEM. */
int tensorhint_from_view(const struct tensorview *v, struct tensorhint *h);

#endif
