/*
 * tcodec.h — a lossless codec for arrays of floats (bf16/fp16, fp32): the
 * chunk is split into byte planes by position mod the element width, the
 * planes that compress (sign and exponent) are coded with a static order-0
 * rANS coder, the others (mantissa noise) are stored as they are.
 *
 * Calling sequence (encode side):
 *   unsigned w = tcodec_pick(raw, len, NULL);   // 0: use zstd instead
 *   if (w) tcodec_encode(raw, len, w, &out);    // appends to out
 * Decode side: tcodec_decode(payload, plen, raw, len) with the exact raw
 * length (the chunk header has it).
 *
 * Pure transforms: no I/O, no mutable globals; every call is independent,
 * so all functions are thread-safe.  Encode and decode allocate scratch
 * memory per call (decode at most len bytes plus 16 KiB); the caller owns
 * its buffers.  Encoding is deterministic: the same input and width give
 * the same payload, with integer arithmetic only (no floating point).
 *
 * Payload format, version 1 (all integers little endian).  Let w be the
 * width and n = floor(len / w) the element count; plane k (0 <= k < w)
 * is the byte sequence raw[i*w + k] for i = 0 .. n-1, counted from the
 * first byte of the chunk whatever its alignment in the file.
 *
 *   offset  size  field
 *   0       1     w: 2 or 4
 *   1       4     n: element count, must equal floor(len / w)
 *   5       ...   w plane records, plane 0 first, each:
 *                   1 byte mode, then
 *                   mode 0 RAW:   n bytes, the plane as it is
 *                   mode 1 CONST: 1 byte v; every byte of the plane is v
 *                   mode 2 RANS:  1 byte  m-1, the number m (2..256) of
 *                                         symbols that occur
 *                                 m * 3   symbol (1 byte, strictly
 *                                         increasing) and its frequency
 *                                         f (2 bytes, 1..4095); the m
 *                                         frequencies sum to 4096
 *                                 4       S: stream length in bytes
 *                                 S       the rANS stream (below)
 *   ...     len - n*w   the tail bytes raw[n*w ..] as they are
 * Nothing follows the tail.  An encoder writes CONST only for a plane of
 * one value and n >= 1, and RANS only where it is smaller than RAW.
 *
 * The rANS stream: 8 interleaved coders with 32-bit states x[0..7];
 * symbol i of the plane belongs to coder i mod 8.  Let start(s) be the sum
 * of the frequencies of the symbols below s.  The stream opens with the 8
 * initial states (4 bytes each, x[0] first), each in [2^15, 2^31), then
 * holds 16-bit words, read in order.  For i = 0 .. n-1, with j = i mod 8:
 *     slot = x[j] mod 4096; s = the symbol with start(s) <= slot <
 *     start(s) + f(s); plane[i] = s;
 *     x[j] = f(s) * (x[j] >> 12) + slot - start(s);
 *     if x[j] < 2^15: x[j] = (x[j] << 16) | next word
 * After the last symbol every word has been read and every x[j] is 2^15
 * (the encoder's initial state); anything else is corruption.  So S is
 * even, at least 32, and a python loop of a dozen lines decodes a plane.
 */
#ifndef CKS_TCODEC_H
#define CKS_TCODEC_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

#define TCODEC_VERSION 1
/* Largest len tcodec_encode() accepts (the element count is 4 bytes). */
#define TCODEC_MAX_LEN ((size_t)UINT32_MAX)

/* Looks at a sample of raw (8 windows of 4 KiB spread over the chunk,
 * histograms by position mod 4, and a probe for repeated 8-byte strings
 * that zstd's LZ stage would find) and returns the width, 2 or 4, whose
 * byte planes promise a saving both over the raw bytes and over coding
 * the bytes as one stream; 0 when they do not (text, zeros, random bytes,
 * repetitive data) or len is below 1 KiB.  ret_permille (may be NULL):
 * the estimated tcodec size / raw size, in 1/1000, for the better of the
 * two widths (also when 0 is returned).  Costs about 1 % of an encode. */
unsigned tcodec_pick(const uint8_t *raw, size_t len, unsigned *ret_permille);

/* Appends the payload for raw[0..len) as width-w byte planes to out (out
 * is not reset).  Returns 0, -EINVAL (width not 2 or 4, or len above
 * TCODEC_MAX_LEN) or -ENOMEM; on failure out->len is as before.  Never
 * appends more than tcodec_bound(len) bytes. */
int tcodec_encode(const uint8_t *raw, size_t len, unsigned width, struct buf *out);

/* Decodes payload p[0..plen) into raw[0..len); len is exact.  Returns 0,
 * -ENOMEM, or CKS_E_FORMAT for any inconsistency: a bad width or count,
 * an unknown mode, plane records that do not add up to plen, a frequency
 * table that is unsorted or does not sum to 4096, a stream that ends early
 * or has words left over, a final coder state that is not the initial one.
 * A hostile payload never makes it read or write out of bounds, allocate
 * more than len + 16 KiB, or run longer than O(len + plen).  On failure
 * raw's contents are unspecified. */
int tcodec_decode(const uint8_t *p, size_t plen, uint8_t *raw, size_t len);

/* Worst-case payload size for len raw bytes. */
size_t tcodec_bound(size_t len);

#endif
