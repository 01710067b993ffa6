/* round16.h - rounding to the 16-bit float formats of the fast contract
 * (bf16 and IEEE binary16), as values of the wider type.
 *
 * The rule (the fast contract's operand rounding, docs/ARCHITECTURE.md
 * "Precision"): an operand value x is replaced by the bf16 or f16 value
 * nearest to x, ties to the one whose last significand bit is 0 (IEEE 754
 * round-to-nearest-even), with
 * - f16: gradual underflow (subnormals down to 2^-24, then +-0 keeping the
 *   sign), and overflow to +-inf for |x| >= 65520 (the midpoint between the
 *   largest finite f16, 65504, and 2^16: the tie goes to the even 2^16,
 *   which does not exist, hence inf);
 * - bf16: the exponent range of f32 (subnormals kept as f32 subnormals with
 *   7 significand bits), overflow to +-inf above the largest bf16 by at
 *   least half an ulp;
 * - NaN stays NaN (its payload may change), +-inf and +-0 stay.
 * The product of two such values is exact in f32 (at most 11 + 11 = 22
 * significand bits, the exponent range permitting), so a matrix product of
 * rounded operands accumulated in f32 differs from one accumulated in f64
 * only by the accumulation.
 *
 * mn_round_bf16f/mn_round_f16f take and return float (bit operations, the
 * CPU backend's f32 kernels and the tests); mn_round16_d takes a double and
 * rounds it once, directly (the f64 kernels: no double rounding through
 * float). kernels/mathlib.glsl holds the same f32 functions in GLSL.
 *
 * Does not: store 16-bit values (the storage stays f32).
 */
#ifndef MN_ROUND16_H
#define MN_ROUND16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Operand roundings; the values are the node flag bits' order (graph.h). */
typedef enum mn_round16 { MN_ROUND_NONE = 0, MN_ROUND_BF16 = 1, MN_ROUND_F16 = 2 } mn_round16;

static inline uint32_t mn_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float mn_f32_of_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Nearest bf16 value, ties to even: add just under half an ulp of bf16
 * (0x7fff) plus the kept lowest bit, then drop the 16 low bits. A carry
 * into the exponent is the correct rounding up (to inf past the largest). */
static inline float mn_round_bf16f(float x) {
    const uint32_t u = mn_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x; /* NaN */
    return mn_f32_of_bits((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

/* Nearest f16 value, ties to even. */
static inline float mn_round_f16f(float x) {
    const uint32_t u = mn_f32_bits(x), a = u & 0x7fffffffu, sign = u & 0x80000000u;
    if (a >= 0x7f800000u) return x;                                  /* inf, NaN */
    if (a >= 0x477ff000u) return mn_f32_of_bits(sign | 0x7f800000u); /* |x| >= 65520 */
    if (a >= 0x38800000u) /* f16 normal range (>= 2^-14): keep 10 of the 23 fraction bits */
        return mn_f32_of_bits(sign | ((a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u));
    /* subnormal f16: multiples of 2^-24; the scaling is exact and
     * nearbyint rounds ties to even (the default rounding mode) */
    const float q = nearbyintf(mn_f32_of_bits(a) * 16777216.0f) * (1.0f / 16777216.0f);
    return sign ? -q : q;
}

/* x rounded once to the format (p significand bits, smallest normal
 * exponent emin, largest finite value max), ties to even. */
static inline double mn_round16_fmt(double x, int p, int emin, double max) {
    if (x != x || x == 0 || isinf(x)) return x;
    int e = ilogb(x);
    if (e < emin) e = emin;
    const double q = ldexp(1.0, e - (p - 1)); /* the ulp at x's binade */
    const double r = nearbyint(x / q) * q;
    return fabs(r) > max ? copysign(INFINITY, x) : r;
}

static inline double mn_round16_d(double x, mn_round16 mode) {
    switch (mode) {
    case MN_ROUND_BF16: return mn_round16_fmt(x, 8, -126, 0x1.fep127);
    case MN_ROUND_F16: return mn_round16_fmt(x, 11, -14, 65504.0);
    default: return x;
    }
}

/* The 16-bit encodings (host I/O of f16 and bf16 tensors): decoding is
 * exact; encoding rounds first (to nearest, ties to even), so a value the
 * format holds is encoded exactly. */
static inline float mn_bf16_decode(uint16_t h) { return mn_f32_of_bits((uint32_t)h << 16); }
static inline uint16_t mn_bf16_encode(float x) {
    const uint32_t u = mn_f32_bits(mn_round_bf16f(x));
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)(u >> 16); /* NaN stays NaN */
}
static inline float mn_f16_decode(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return mn_f32_of_bits(sign | 0x7f800000u | (m << 13));
    if (e == 0) { /* zero or subnormal: m * 2^-24 */
        const float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    return mn_f32_of_bits(sign | ((e + 112u) << 23) | (m << 13));
}
static inline uint16_t mn_f16_encode(float x) {
    const float r = mn_round_f16f(x);
    const uint32_t u = mn_f32_bits(r), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (a == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) return (uint16_t)(sign | (uint32_t)ldexpf(fabsf(r), 24)); /* below 2^-14: subnormal */
    return (uint16_t)(sign | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
}

static inline float mn_round16_f(float x, mn_round16 mode) {
    switch (mode) {
    case MN_ROUND_BF16: return mn_round_bf16f(x);
    case MN_ROUND_F16: return mn_round_f16f(x);
    default: return x;
    }
}

#endif
