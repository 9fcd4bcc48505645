/* Kafka's murmur2 (seed 0x9747b28c), bit for bit the Python one in client/partitioner.py.
 * Shared by the C accelerators: log/_codec.c (send_batch's plan) and client/_sendpath.c
 * (send()'s fast path), so both place a key on the same partition. */
#ifndef RAFKA_MURMUR2_H
#define RAFKA_MURMUR2_H
#include <stddef.h>
#include <stdint.h>

static inline uint32_t murmur2_c(const uint8_t *data, size_t length)
{
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28c ^ (uint32_t)length;
    size_t n4 = length >> 2, i;
    for (i = 0; i < n4; i++) {
        const uint8_t *p = data + 4 * i;
        uint32_t k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = (h * m) ^ k;
    }
    i = n4 * 4;
    switch (length & 3) {
    case 3: h ^= (uint32_t)data[i + 2] << 16; /* fall through */
    case 2: h ^= (uint32_t)data[i + 1] << 8; /* fall through */
    case 1: h ^= data[i]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

#endif
