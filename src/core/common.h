/* common.h - small shared helpers: assertions, checked arithmetic, allocation,
 * error formatting, logging. Every module includes it.
 */
#ifndef MN_COMMON_H
#define MN_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meganeura.h"

#if defined(__GNUC__)
#define MN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MN_PRINTF(a, b)
#endif

#define MN_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Internal invariant (a bug in the library, never user input): reports file
 * and line, then aborts. */
#define MN_ASSERT(c)                                                                   \
    do {                                                                               \
        if (!(c)) mn_assert_fail(#c, __FILE__, __LINE__);                              \
    } while (0)
_Noreturn void mn_assert_fail(const char *cond, const char *file, int line);

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool mn_mul_u64(uint64_t *out, uint64_t a, uint64_t b) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool mn_add_u64(uint64_t *out, uint64_t a, uint64_t b) {
    return !__builtin_add_overflow(a, b, out);
}

char *mn_strdup(const char *s);
/* vsnprintf into buf (always terminated). */
void mn_vfmt(char *buf, size_t cap, const char *fmt, va_list ap);
void mn_fmt(char *buf, size_t cap, const char *fmt, ...) MN_PRINTF(3, 4);

void mn_logf(mn_log_level level, const char *fmt, ...) MN_PRINTF(2, 3);

/* Deterministic RNG (splitmix64 seeding + xoshiro256**). */
typedef struct mn_rng {
    uint64_t s[4];
} mn_rng;
void mn_rng_seed(mn_rng *r, uint64_t seed);
uint64_t mn_rng_next(mn_rng *r);
double mn_rng_uniform(mn_rng *r); /* [0, 1) */
double mn_rng_normal(mn_rng *r);  /* N(0, 1), Box-Muller */
uint64_t mn_hash_str(const char *s); /* FNV-1a 64 */

/* Counter-based random numbers (parameter initialisation): value `ctr` of
 * the stream `key` is a pure function of (key, ctr), so any range of a
 * stream can be computed by any thread in any order with the same result.
 * It is the SplitMix64 sequence seeded with key, indexed directly:
 * mn_ctr_bits(key, i) == the (i+1)th output of splitmix64 started at key. */
static inline uint64_t mn_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint64_t mn_ctr_bits(uint64_t key, uint64_t ctr) {
    return mn_mix64(key + (ctr + 1) * 0x9e3779b97f4a7c15ull);
}
/* The key of a named stream: both inputs mixed, so neighbouring seeds and
 * names give unrelated streams. */
static inline uint64_t mn_ctr_key(uint64_t seed, uint64_t name_hash) {
    return mn_mix64(mn_mix64(seed) ^ name_hash);
}
/* Uniform in [0, 1), 24 random bits: every value is exact in float. */
static inline float mn_ctr_uniform(uint64_t key, uint64_t ctr) {
    return (float)(mn_ctr_bits(key, ctr) >> 40) * 0x1.0p-24f;
}
/* Standard normals z[0], z[1] of pair p (counters 2p and 2p+1), Box-Muller
 * in float: u1 in (0, 1] (24 bits) so the tails end at |z| = 5.77. */
void mn_ctr_normal2(uint64_t key, uint64_t p, float z[2]);

/* Host threads for parallel work: MEGANEURA_THREADS if set (1..256), else
 * the online CPUs capped at 32. */
int mn_thread_count(void);
/* memcpy of n bytes, split across up to MN_COPY_THREADS threads when n is at
 * least MN_COPY_PARALLEL_MIN (a batch of images into the staging buffer: a
 * DRAM-bound copy that one core does at 6 GB/s, docs/PERF.md run S); slices
 * of at least 4 MiB, a thread that cannot start leaves its slice to the
 * caller. Same bytes as memcpy; the regions must not overlap. */
#define MN_COPY_PARALLEL_MIN ((size_t)8 << 20)
#define MN_COPY_THREADS 8
void mn_copy(void *dst, const void *src, size_t n);

/* Monotonic clock, microseconds. */
double mn_now_us(void);

#endif
