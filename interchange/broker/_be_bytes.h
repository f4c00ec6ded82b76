/* Big-endian integers read from a byte buffer: AMQP 1.0 and AMQP 0-9-1 both put numbers on the wire
 * in network byte order. Shared by the broker's admission scanner (_admit.c) and the IF2 bridge's
 * delivery reader (bridges/if2/_deliveries.c). */
#ifndef INTERCHANGE_BE_BYTES_H
#define INTERCHANGE_BE_BYTES_H

#include <stdint.h>

static inline uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline uint64_t
be64(const uint8_t *p)
{
    return ((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4);
}

#endif
