// pw_ext.glsl - the pointwise family of issue 4, one invocation per output
// element: y[i] = EXPR(a, b, c), the contract of eltwise.glsl (NIN, IX0..IX2
// with broadcast strides baked in, EXPR), plus the functions those ops need:
//   abs, clamp       builtin abs; comparisons guarded by isnan (NaN passes)
//   pow              mn_pow: C99/libm pow semantics for a constant exponent
//   where            (a != 0 || isnan(a)) ? b : c
//   dropout          the counter-based mask of graph/pointwise.h, bit for bit
//   pw_bwd           derivatives of abs, clamp, pow
// Defines from vk_gen_pointwise_ext.c (dropout only): DROP_KEY (uint key of
// the seed), DROP_COUNTER (1: X1 is the i32 counter mixed into the key),
// DROP_ALL (1: p == 1, everything dropped), DROP_THR (drop when the hash is
// below it), DROP_SCALE (1 / (1 - p) as an f32 literal).
//
// In place (Y aliasing X0): invocation i reads its inputs before it writes
// y[i] and touches no other output element.
//
// Does not: reduce anything.

// MN_INF, MN_NAN, mn_exp and mn_log come from mathlib.glsl.

// x^p with the special cases of C99 pow (p is finite: the graph checks it).
// Integer |p| <= 64: binary powering of |x| (a few roundings); otherwise
// exp(p log|x|) with the ~1 ulp mn_exp / mn_log (relative error about
// |p log x| 2^-24).
float mn_pow(float x, float p) {
    if (p == 0.0 || x == 1.0) return 1.0;
    if (isnan(x)) return x;
    bool pint = p == floor(p);
    // odd integer: below 2^24 the integer part fits an int; above, floats are even
    bool podd = pint && abs(p) < 16777216.0 && (int(abs(p)) & 1) == 1;
    bool neg = (floatBitsToUint(x) >> 31) != 0u;
    if (isinf(x)) {
        float r = p > 0.0 ? MN_INF : 0.0;
        return neg && podd ? -r : r;
    }
    if (x == 0.0) {
        float r = p > 0.0 ? 0.0 : MN_INF;
        return neg && podd ? -r : r;
    }
    if (neg && !pint) return MN_NAN;
    float ax = abs(x), r;
    if (pint && abs(p) <= 64.0) {
        uint e = uint(abs(p));
        float b = ax;
        r = 1.0;
        while (e != 0u) {
            if ((e & 1u) != 0u) r *= b;
            e >>= 1u;
            if (e != 0u) b *= b;
        }
        if (p < 0.0) r = 1.0 / r;
    } else {
        r = mn_exp(p * mn_log(ax));
    }
    return neg && podd ? -r : r;
}

// sign(x) as the CPU's pw_bwd: 0 at 0 and for NaN.
float pw_sign(float x) { return isnan(x) ? 0.0 : (x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0)); }

// The 32-bit mixer of graph/pointwise.h (uint arithmetic wraps like C's uint32_t).
uint pw_mix32(uint h) {
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return h;
}

#ifdef DROP_KEY
// counter: the raw 32 bits of the i32 counter input (read through a float).
bool pw_keep(uint i, float counter) {
#if DROP_ALL
    return false;
#else
#if DROP_COUNTER
    uint key = pw_mix32(DROP_KEY ^ pw_mix32(floatBitsToUint(counter) + 0x632be5abu));
#else
    uint key = DROP_KEY;
#endif
    // element indices are below 2^31 here: their high 32 bits are 0
    return pw_mix32(pw_mix32(key ^ i) ^ 0u) >= DROP_THR;
#endif
}
#endif

void main() {
    uint i = GID;
    if (i >= Y_N) return;
    float a = X0(IX0(i));
#if NIN > 1
    float b = X1(IX1(i));
#else
    float b = 0.0;
#endif
#if NIN > 2
    float c = X2(IX2(i));
#else
    float c = 0.0;
#endif
    Y(i) = EXPR(a, b, c);
}
