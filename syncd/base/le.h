/*
 * le.h — little-endian integers in byte arrays, at any alignment, on any
 * host: the chunk object's header, the plane codec's and the recipe's
 * tables.
 */
#ifndef CKS_LE_H
#define CKS_LE_H

#include <stdint.h>

static inline uint32_t le32_get(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void le32_put(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

#endif
