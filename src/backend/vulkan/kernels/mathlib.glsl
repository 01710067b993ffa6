// mathlib.glsl - f32 math shared by every generated kernel (inserted after
// the preamble by vk_codegen_source): exp and log to about 1 ulp, because the
// builtins are allowed several ulp (and log 2^-21 absolute near 1), which the
// CPU comparison would see; and the functions of the pointwise ops, which
// eltwise kernels and fused matmul epilogues call. Unused functions cost
// nothing (dead code).
//
// Does not: depend on any template's defines.

#define MN_INF uintBitsToFloat(0x7f800000u)
#define MN_NAN uintBitsToFloat(0x7fc00000u)

// exp to about 1 ulp (builtin exp may be off by 3 + 2|x| ulp): k = round(x
// log2 e), r = x - k ln2 in two steps (k LN2_HI is exact), exp(r) by its
// Taylor series to r^7 (|r| <= 0.35), then two exact power-of-two scalings.
float mn_exp(float x) {
    if (isnan(x)) return x;
    if (x > 88.7228394) return MN_INF;
    if (x < -103.972084) return 0.0;
    float k = floor(x * 1.44269504 + 0.5);
    precise float r = (x - k * 0.693115234) - k * 3.19461833e-05;
    precise float p = r * (0.5 + r * (0.166666672 + r * (0.0416666679 + r * (0.00833333377 +
                      r * (0.00138888892 + r * 0.000198412701)))));
    precise float er = 1.0 + (r + r * p);
    int k1 = int(k) / 2, k2 = int(k) - k1; // each 2^k in the normal range
    precise float res = er * uintBitsToFloat(uint(k1 + 127) << 23) * uintBitsToFloat(uint(k2 + 127) << 23);
    return res;
}

// Natural log to about 1 ulp (builtin log may be off by 2^-21 absolute near
// 1): x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact),
// s = f / (2 + f), log(m) = 2 atanh(s) = f - s (f - 2R) with
// R = s^2/3 + s^4/5 + ... (|s| < 0.172), e ln2 split in an exact high part.
// libm results outside the domain: log(0) = -inf, log(<0) = NaN.
float mn_log(float x) {
    if (!(x > 0.0) || isinf(x)) return x == 0.0 ? -MN_INF : (x > 0.0 || isnan(x) ? x : MN_NAN);
    int e = 0;
    if (x < 1.17549435e-38) { // subnormal: scale into the normal range
        x *= 8388608.0;
        e = -23;
    }
    uint b = floatBitsToUint(x);
    e += int(b >> 23) - 127;
    float m = uintBitsToFloat((b & 0x007fffffu) | 0x3f800000u);
    if (m > 1.41421356) {
        m *= 0.5;
        e += 1;
    }
    precise float f = m - 1.0;
    precise float sv = f / (2.0 + f);
    precise float z = sv * sv;
    precise float r = z * (0.333333343 + z * (0.200000003 + z * (0.142857149 + z * 0.111111112)));
    precise float corr = sv * (f - 2.0 * r);
    precise float lo = corr - float(e) * 3.19461833e-05; // ln2 - LN2_HI
    precise float res = float(e) * 0.693115234 + (f - lo); // LN2_HI: float(e) * it is exact
    return res;
}

// ---- the pointwise ops' functions (eltwise.glsl, and matmul epilogues of
// fused groups, vk_gen_fused.c) ----

float mn_sqrt(float x) { return x >= 0.0 ? sqrt(x) : (isnan(x) ? x : MN_NAN); }

// erf to about 1 ulp (the preamble's mn_erf is off by up to ~6e-7 in f32).
// |x| < 1: erf(a) = a (c0 + t R(t)), t = a^2, R the Taylor series of
// erf(a)/a after its constant term, c0 = 2/sqrt(pi) split in two floats so
// the leading product rounds once. 1 <= |x| < 4: erf = 1 - exp(-a^2) Q(1/a),
// Q a Chebyshev interpolant of erfc(a) exp(a^2) on 1/a in [1/4, 1] (Clenshaw).
// |x| >= 4: erf rounds to 1.
const float ERF_R[11] = float[](-0.376126379, 0.112837918, -0.0268661715, 0.00522397785, -0.000854832702,
                                0.000120553326, -1.49256502e-05, 1.64621144e-06, -1.63658441e-07, 1.48071928e-08,
                                -1.22905552e-09);
const float ERF_Q[13] = float[](0.29404211, 0.144856378, -0.0118344417, 0.000460258423, 8.01733768e-05,
                                -2.42915521e-05, 3.7078471e-06, -3.04544017e-07, -2.17121681e-08, 1.4908597e-08,
                                -3.58270769e-09, 5.69631287e-10, -5.30912085e-11);

float mn_erf_acc(float x) {
    float a = abs(x);
    float r;
    if (a < 1.0) {
        float t = a * a;
        float p = ERF_R[10];
        for (int i = 9; i >= 0; i--) p = p * t + ERF_R[i];
        precise float v = t * p;
        precise float rr = fma(a, 1.12837923, a * (-5.86353828e-08 + v));
        r = rr;
    } else if (a < 4.0) {
        float u = (2.0 * (1.0 / a) - 1.25) * 1.33333337; // 1/a in [1/4, 1] mapped to [-1, 1]
        float b1 = 0.0, b2 = 0.0;
        for (int j = 12; j > 0; j--) {
            float b0 = 2.0 * u * b1 - b2 + ERF_Q[j];
            b2 = b1;
            b1 = b0;
        }
        float q = u * b1 - b2 + ERF_Q[0];
        r = 1.0 - mn_exp(-a * a) * q;
    } else {
        r = 1.0;
    }
    return isnan(x) ? x : (x < 0.0 ? -r : r);
}

// NaN -> 0 like the C `v > 0 ? v : 0` (isnan keeps the test exact).
float mn_relu(float x) { return (!isnan(x) && x > 0.0) ? x : 0.0; }

float mn_sigmoid(float x) {
    if (x >= 0.0) return 1.0 / (1.0 + mn_exp(-x));
    float e = mn_exp(x); // no overflow for very negative x
    return e / (1.0 + e);
}

// tanh without the overflow of exp(2x) and without cancellation near 0
// (builtin tanh precision is implementation-defined).
float mn_tanh(float x) {
    float a = abs(x);
    float r;
    if (a < 0.25) {
        float x2 = a * a; // odd Taylor series, |error| < 1e-9 relative here
        r = a * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (62.0 / 2835.0)))));
    } else if (a < 9.5) {
        float t = mn_exp(-2.0 * a);
        r = (1.0 - t) / (1.0 + t);
    } else {
        r = 1.0;
    }
    return isnan(x) ? x : (x < 0.0 ? -r : r);
}

float mn_gelu(float x) { return 0.5 * x * (1.0 + mn_erf_acc(x * 0.70710678118654752)); }

float mn_gelu_tanh(float x) {
    float u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + mn_tanh(u));
}

// sin and cos (radians) to a few ulp for |x| < 1e5 (the builtins' precision
// is implementation-defined and poor far from 0): k = round(x 2/pi),
// r = x - k pi/2 with pi/2 in three parts (Cody-Waite; the first two have
// short mantissas, so k * part is exact for |k| < 2^15), then the minimax
// polynomials of sin and cos on [-pi/4, pi/4] and the quadrant k mod 4.
void mn_sincos(float x, out float s, out float c) {
    float k = floor(x * 0.636619772 + 0.5);
    precise float r = ((x - k * 1.5703125) - k * 4.83751297e-04) - k * 7.54978995e-08;
    precise float z = r * r;
    precise float sr = r + r * z * (-1.66666546e-01 + z * (8.33216087e-03 + z * -1.95152959e-04));
    precise float cr = 1.0 - 0.5 * z + z * z * (4.16666456e-02 + z * (-1.38873163e-03 + z * 2.44331571e-05));
    int q = int(k) & 3;
    float s0 = (q & 1) == 0 ? sr : cr, c0 = (q & 1) == 0 ? cr : sr;
    s = (q & 2) == 0 ? s0 : -s0;
    c = ((q + 1) & 2) == 0 ? c0 : -c0;
    if (isnan(x) || isinf(x)) s = c = MN_NAN;
}
float mn_sin(float x) { float s, c; mn_sincos(x, s, c); return s; }
float mn_cos(float x) { float s, c; mn_sincos(x, s, c); return c; }

// Derivatives used by unary_bwd (same formulas as the CPU kernels).
float mn_dgelu(float x) {
    return 0.5 * (1.0 + mn_erf_acc(x * 0.70710678118654752)) + x * 0.39894228040143268 * mn_exp(-0.5 * x * x);
}

float mn_dgelu_tanh(float x) {
    const float c = 0.79788456080286536, k = 0.044715;
    float t = mn_tanh(c * (x + k * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * k * x * x);
}

float mn_dsilu(float x) {
    float s = mn_sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

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

// The fast contract's operand rounding (core/round16.h, the same bits): the
// nearest bf16 / f16 value of x, ties to even, returned as a float. Integer
// arithmetic only, so it needs no 16-bit type and rounds the same on every
// device. f16: subnormals kept, |x| >= 65520 becomes inf.
float mn_round_bf16(float x) {
    uint u = floatBitsToUint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;
    return uintBitsToFloat((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}
float mn_round_f16(float x) {
    uint u = floatBitsToUint(x), a = u & 0x7fffffffu, sgn = u & 0x80000000u;
    if (a >= 0x7f800000u) return x;
    if (a >= 0x477ff000u) return uintBitsToFloat(sgn | 0x7f800000u);
    if (a >= 0x38800000u) return uintBitsToFloat(sgn | ((a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u));
    // subnormal f16 (|x| < 2^-14): k 2^-24 with k = |x| 2^24 rounded to even,
    // in integers (devices may flush subnormal float arithmetic): |x| =
    // m 2^(E - 150), so |x| 2^24 = m >> (126 - E); below 2^-25 it is 0
    int sh = 126 - int(a >> 23);
    if (sh > 24) return uintBitsToFloat(sgn);
    uint m = (a & 0x7fffffu) | 0x800000u;
    uint k = (m + (1u << uint(sh - 1)) - 1u + ((m >> uint(sh)) & 1u)) >> uint(sh);
    return uintBitsToFloat(sgn | floatBitsToUint(float(k) * (1.0 / 16777216.0)));
}

// ---- packed 16-bit storage (NODE_F_PACK16; core/round16.h's encodings) ----
// bits of the 16-bit value nearest x (ties to even; NaN stays NaN, quiet),
// by integer arithmetic: the same bits on every device
uint mn_bf16_bits(float x) {
    uint u = floatBitsToUint(mn_round_bf16(x));
    return (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : (u >> 16);
}
uint mn_f16_bits(float x) {
    uint u = floatBitsToUint(mn_round_f16(x)), sgn = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sgn | 0x7e00u;
    if (a == 0x7f800000u) return sgn | 0x7c00u;
    // below 2^-14: the subnormal k 2^-24, k = m >> (126 - E) exactly (the
    // value is one); 0 for a zero
    if (a < 0x38800000u) return a == 0u ? sgn : sgn | (((a & 0x7fffffu) | 0x800000u) >> uint(126 - int(a >> 23)));
    return sgn | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
}
// the exact f32 value of 16-bit bits h (t: 1 bf16, 2 f16); f16 subnormals
// by an exact scaling of an integer (no subnormal arithmetic)
float mn_value16(uint h, int t) {
    if (t == 1) return uintBitsToFloat(h << 16);
    uint sgn = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31u) return uintBitsToFloat(sgn | 0x7f800000u | (m << 13));
    if (e == 0u) return uintBitsToFloat(sgn | floatBitsToUint(float(m) * (1.0 / 16777216.0)));
    return uintBitsToFloat(sgn | ((e + 112u) << 23) | (m << 13));
}
// element i of a packed tensor from its word w
float mn_unpack16(uint w, uint i, int t) { return mn_value16((i & 1u) != 0u ? (w >> 16) : (w & 0xffffu), t); }

// ---- double-f32 sums (reduce.glsl, bn_stats.glsl) ----
// Knuth's TwoSum: a + b == s + e exactly (precise: no reassociation, no fma).
void two_sum(float a, float b, out float s, out float e) {
    precise float t = a + b;
    precise float bp = t - a;
    precise float ap = t - bp;
    precise float err = (a - ap) + (b - bp);
    s = t;
    e = err;
}

// (hi, lo) += v
void dd_add(inout float hi, inout float lo, float v) {
    float e;
    two_sum(hi, v, hi, e);
    precise float l = lo + e;
    lo = l;
}

// (hi, lo) += (h2, l2), renormalised so that |lo| <= ulp(hi) / 2.
void dd_merge(inout float hi, inout float lo, float h2, float l2) {
    float s, e;
    two_sum(hi, h2, s, e);
    precise float l = (lo + l2) + e;
    precise float h = s + l;
    precise float r = l - (h - s);
    bool inf = isinf(s); // an infinite sum stays (its error term is NaN)
    hi = inf ? s : h;
    lo = inf ? 0.0 : r;
}

// The f32 result of a (hi, lo) sum.
float dd_value(float hi, float lo) { return isinf(hi) ? hi : hi + lo; }
