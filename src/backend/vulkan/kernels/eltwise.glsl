// eltwise.glsl - one invocation per output element: y[i] = EXPR(a, b, c).
//
// Used by every pointwise op (unary, binary with broadcasting, unary_bwd)
// and by the pure data moves (stop_grad, broadcast, permute), which are
// gathers with EXPR(a, b, c) = (a).
//
// Defines from vk_gen_pointwise.c:
//   NIN           inputs read (1..3): a = X0, b = X1, c = X2
//   IX0(i)..IX2(i) element of input k read for output element i; strides of
//                 broadcast or permuted inputs are baked into the expression
//   EXPR(a, b, c) the output value
//
// In place (Y aliasing X0, memplan op_inplace): invocation i reads its inputs
// before it writes y[i] and touches no other output element; an input that
// may alias the output always has the output's shape, so IX0(i) == i.
//
// Does not: reduce anything (reduce.glsl), handle int32 arithmetic (int
// tensors only pass through the moves as raw 32-bit words).

#define MN_INF uintBitsToFloat(0x7f800000u)
#define MN_NAN uintBitsToFloat(0x7fc00000u)

// log/sqrt with the libm results outside the domain GLSL defines.
float mn_log(float x) { return x > 0.0 ? log(x) : (x == 0.0 ? -MN_INF : (isnan(x) ? x : MN_NAN)); }
float mn_sqrt(float x) { return x >= 0.0 ? sqrt(x) : (isnan(x) ? x : MN_NAN); }

// NaN -> 0 like the C `v > 0 ? v : 0` (isnan keeps the test exact).
float mn_relu(float x) { return (!isnan(x) && x > 0.0) ? x : 0.0; }

float mn_sigmoid(float x) {
    if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
    float e = exp(x); // no overflow for very negative x
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
        float t = exp(-2.0 * a);
        r = (1.0 - t) / (1.0 + t);
    } else {
        r = 1.0;
    }
    return isnan(x) ? x : (x < 0.0 ? -r : r);
}

float mn_gelu(float x) { return 0.5 * x * (1.0 + mn_erf(x * 0.70710678118654752)); }

float mn_gelu_tanh(float x) {
    float u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + mn_tanh(u));
}

// Derivatives used by unary_bwd (same formulas as the CPU kernels).
float mn_dgelu(float x) {
    return 0.5 * (1.0 + mn_erf(x * 0.70710678118654752)) + x * 0.39894228040143268 * exp(-0.5 * x * x);
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
