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

#endif
