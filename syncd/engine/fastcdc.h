/*
 * fastcdc.h — FastCDC (2020) content-defined chunking, bit-exact with the
 * vectors in tests/fixtures/fastcdc (the Gear table from MD5, the 2020
 * masks, normalized chunking with level nc, two bytes per step).
 *
 * Calling sequence:
 *   struct fastcdc cdc;
 *   fastcdc_init(&cdc, min, avg, max, nc);       // validates parameters
 *   (or fastcdc_init_gear(&cdc, ..., gear) with a keyed table, crypt.h)
 *   while (n) { size_t len = fastcdc_cut(&cdc, p, n, eof); ... }
 *
 * fastcdc_cut() looks at most max bytes and returns the length of the next
 * chunk starting at src.  When fewer than max bytes are buffered and more
 * input may follow (eof == false) and no cut point was found, it returns 0:
 * the caller must buffer more and call again.  The struct is read-only
 * after init, allocates nothing and may be shared between threads.  A
 * caller's gear table is not copied: it must stay unchanged and alive as
 * long as the struct is used.
 */
#ifndef CKS_FASTCDC_H
#define CKS_FASTCDC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds accepted for repository parameters. */
#define FASTCDC_MIN_SIZE 64u
#define FASTCDC_MAX_SIZE (256u * 1024 * 1024)

struct fastcdc {
    size_t min, avg, max;
    unsigned nc;
    uint64_t mask_s, mask_l, mask_s_ls, mask_l_ls;
    const uint64_t *gear; /* fastcdc_gear, or the caller's table */
};

/* Returns 0, or -EINVAL unless FASTCDC_MIN_SIZE <= min <= avg <= max <=
 * FASTCDC_MAX_SIZE and bits(avg) +- nc stays within the mask table (5..25). */
int fastcdc_init(struct fastcdc *cdc, size_t min, size_t avg, size_t max, unsigned nc);
/* The same with the caller's 256-entry gear table (an encrypted
 * repository's, from crypt_gear()); NULL is the standard table, so
 * fastcdc_init_gear(.., NULL) cuts exactly where fastcdc_init does. */
int fastcdc_init_gear(struct fastcdc *cdc, size_t min, size_t avg, size_t max, unsigned nc,
                      const uint64_t *gear);
size_t fastcdc_cut(const struct fastcdc *cdc, const uint8_t *src, size_t n, bool eof);

/* The Gear table (GEAR[i] = first 8 bytes, big endian, of MD5 of 64 bytes
 * equal to i), embedded as constants; exposed so the unit test can
 * recompute it.  GEAR_LS[i] is GEAR[i] << 1 and is not stored. */
extern const uint64_t fastcdc_gear[256];

#endif
