// eltwise.glsl - one invocation per output element: y[i] = EXPR(a, b, c).
//
// Used by every pointwise op (unary, binary with broadcasting, unary_bwd;
// abs, clamp, pow, where, dropout and pw_bwd of vk_gen_pointwise_param.c) and
// by the pure data moves (stop_grad, broadcast, permute), which are gathers
// with EXPR(a, b, c) = (a).
//
// Or, for a fused group of pointwise nodes (vk_gen_fused.c): FUSED_BODY(i)
// computes the whole group per element and writes Y(i).
//
// Defines from vk_gen_pointwise.c / vk_gen_pointwise_param.c:
//   NIN           inputs read (1..3): a = X0, b = X1, c = X2
//   IX0(i)..IX2(i) element of input k read for output element i; strides of
//                 broadcast or permuted inputs are baked into the expression
//   EXPR(a, b, c) the output value
//   dropout only: DROP_KEY (uint key of the seed), DROP_COUNTER (1: X1 is
//   the i32 counter mixed into the key), DROP_ALL (1: p == 1, everything
//   dropped), DROP_THR (drop when the hash is below it), DROP_SCALE
//   (1 / (1 - p) as an f32 literal). mn_pow: C99/libm pow semantics for a
//   constant exponent; pw_mix32/pw_keep: the mask of graph/pointwise.h, bit
//   for bit.
//
// In place (Y aliasing X0, memplan op_inplace): invocation i reads its inputs
// before it writes y[i] and touches no other output element; an input that
// may alias the output always has the output's shape, so IX0(i) == i.
//
// Does not: reduce anything (reduce.glsl), handle int32 arithmetic (int
// tensors only pass through the moves as raw 32-bit words).

// MN_INF, MN_NAN, mn_exp and mn_log come from mathlib.glsl.

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
#ifdef FUSED_BODY
    // a fused pointwise group (vk_gen_fused.c): reads r0.., member values
    // v0.. (precise: no contraction across members, so the result is the
    // unfused kernels' bit for bit), then Y(i)
    FUSED_BODY(i)
#else
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
#endif
}
