/* sha256.h - SHA-256 (FIPS 180-4), for keys that must not collide: the
 * on-disk kernel caches name and check their files with it.
 *
 * Does not: HMAC, other SHA-2 sizes, or anything secret (no constant-time
 * claims, no zeroing of state).
 */
#ifndef MN_SHA256_H
#define MN_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define MN_SHA256_BYTES 32

typedef struct mn_sha256_ctx {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    unsigned char buf[64];
    size_t nbuf; /* bytes waiting in buf, < 64 */
} mn_sha256_ctx;

void mn_sha256_init(mn_sha256_ctx *c);
void mn_sha256_update(mn_sha256_ctx *c, const void *data, size_t n);
/* Writes the digest; c must be initialised again before reuse. */
void mn_sha256_final(mn_sha256_ctx *c, unsigned char out[MN_SHA256_BYTES]);
/* One call: out = SHA-256(data[0..n)). */
void mn_sha256_digest(unsigned char out[MN_SHA256_BYTES], const void *data, size_t n);
/* 64 lower-case hex digits and a terminating 0. */
void mn_sha256_hex(char out[2 * MN_SHA256_BYTES + 1], const unsigned char digest[MN_SHA256_BYTES]);

#endif
