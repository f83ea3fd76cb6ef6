/*
 * tcodec.h — a lossless codec for arrays of floats (bf16/fp16, fp32): the
 * chunk is split into byte planes by position mod the element width, the
 * planes that compress (sign and exponent) are coded with a static
 * canonical Huffman code, the others (mantissa noise) are stored as they
 * are.
 *
 * Calling sequence (encode side):
 *   unsigned w = tcodec_pick(raw, len, NULL);   // 0: use zstd instead
 *   if (w) tcodec_encode(raw, len, w, &out);    // appends to out
 * Decode side: tcodec_decode(payload, plen, raw, len) with the exact raw
 * length (the chunk header has it).
 *
 * Pure transforms: no I/O, no mutable globals; every call is independent,
 * so all functions are thread-safe.  Decode allocates scratch memory per
 * call (at most len + 1 bytes; tcodec_decode_scratch: in the caller's
 * buffer, kept between calls); encode only grows out.  The caller owns
 * its buffers.  Encoding is deterministic: the same input and width give
 * the same payload (integer arithmetic only).
 *
 * Payload format, version 1 (integers little endian).  Let w be the width
 * and n = floor(len / w) the element count; plane k (0 <= k < w) is the
 * byte sequence raw[i*w + k] for i = 0 .. n-1, counted from the first byte
 * of the chunk whatever its alignment in the file.
 *
 *   offset  size  field
 *   0       1     w: 2 or 4
 *   1       4     n: element count, must equal floor(len / w)
 *   5       ...   w plane records, plane 0 first, each:
 *                   1 byte mode, then
 *                   mode 0 RAW:   n bytes, the plane as it is
 *                   mode 1 CONST: 1 byte v; every byte of the plane is v
 *                   mode 2 HUF:   128 bytes: code lengths, 4 bits each:
 *                                 symbol 2i in the low half of byte i,
 *                                 2i+1 in the high half; 0 = absent,
 *                                 else 1..11; at least 2 symbols, and the
 *                                 lengths make a complete code (the sum
 *                                 of 2^-length is exactly 1)
 *                                 4 x 4   S0..S3: bytes of streams 0..3
 *                                 S0..S3  the 4 bit streams, in order
 *   ...     len - n*w   the tail bytes raw[n*w ..] as they are
 * Nothing follows the tail.  An encoder writes CONST only for a plane of
 * one value and n >= 1, and HUF only where it is smaller than RAW.
 *
 * HUF streams: the codes are the canonical ones of DEFLATE (RFC 1951
 * 3.2.2): shorter codes first, codes of one length in symbol order,
 * consecutive values.  The plane is cut into 4 segments: stream j holds
 * the codes of plane[i] for floor(n*j/4) <= i < floor(n*(j+1)/4), in
 * order, packed most significant bit first into bytes; its last byte is
 * padded with zero bits and S_j = ceil(bits / 8) exactly.  Decoding:
 * each stream on its own, code by code, into its segment.  A stream that
 * runs out, has bytes left over or nonzero padding is corruption.
 */
#ifndef CKS_TCODEC_H
#define CKS_TCODEC_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define TCODEC_VERSION 1
/* Largest len tcodec_encode() accepts (the element count is 4 bytes). */
#define TCODEC_MAX_LEN ((size_t)UINT32_MAX)

/* Looks at a sample of raw (8 windows of 2 KiB spread over the chunk,
 * histograms by position mod 4, and a probe for repeated 4-byte groups
 * that zstd's LZ stage would find) and returns the width, 2 or 4, whose
 * byte planes promise a saving both over the raw bytes and over coding
 * the bytes as one stream; 0 when they do not (text, zeros, random bytes,
 * repetitive data) or len is below 1 KiB.  ret_permille (may be NULL):
 * the estimated tcodec size / raw size, in 1/1000, for the better of the
 * two widths (also when 0 is returned). */
unsigned tcodec_pick(const uint8_t *raw, size_t len, unsigned *ret_permille);

/* Appends the payload for raw[0..len) as width-w byte planes to out (out
 * is not reset).  Returns 0, -EINVAL (width not 2 or 4, or len above
 * TCODEC_MAX_LEN) or -ENOMEM; on failure out->len is as before.  Never
 * appends more than tcodec_bound(len) bytes. */
int tcodec_encode(const uint8_t *raw, size_t len, unsigned width, struct buf *out);

/* The length tcodec_encode(raw, len, width, ...) appends, computed from
 * the planes' histograms without coding them (a plane the encoder stores
 * raw costs nothing here): *ret_len.  0 or -EINVAL as tcodec_encode. */
int tcodec_size(const uint8_t *raw, size_t len, unsigned width, size_t *ret_len);

/* Decodes payload p[0..plen) into raw[0..len); len is exact.  Returns 0,
 * -ENOMEM, or CKS_E_FORMAT for any inconsistency: a bad width or count,
 * an unknown mode, plane records that do not add up to plen, code lengths
 * above 11 or not a complete code, a stream that runs out, has bytes left
 * over or nonzero padding.  A hostile payload never makes it read or write
 * out of bounds, allocate more than len + 1 bytes, or run longer than
 * O(len + plen).  On failure raw's contents are unspecified. */
int tcodec_decode(const uint8_t *p, size_t plen, uint8_t *raw, size_t len);
/* As tcodec_decode, its scratch memory in *scratch (grown as needed, kept
 * by the caller for the next call and freed with buf_free: one decode at a
 * time per scratch).  NULL: allocated per call. */
int tcodec_decode_scratch(const uint8_t *p, size_t plen, uint8_t *raw, size_t len,
                          struct buf *scratch);

/* Worst-case payload size for len raw bytes. */
size_t tcodec_bound(size_t len);

#endif
