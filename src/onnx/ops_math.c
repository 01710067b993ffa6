/* ops_math.c - ONNX elementwise operators, activations, MatMul/Gemm,
 * Softmax and its relatives, reductions, Clip, Where, Cast.
 *
 * Each handler evaluates on the host when every input is a constant, else
 * records graph ops: most are one meganeura op, activations without one are
 * small composites (Elu = relu(x) + alpha (exp(min(x, 0)) - 1), Softplus in
 * its overflow-free form relu(x) + log(1 + exp(-|x|)), ...), so their
 * gradients come from the parts. docs/ONNX.md lists what each one supports.
 *
 * Does not: layout or shape operators (ops_shape.c), convolution, pooling and
 * normalisation (ops_nn.c).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

static bool is(const ox_ctx *c, const char *name) { return strcmp(c->node->op_type, name) == 0; }


/* ---- comparisons, max and min as composites --------------------------------
 * Exact on both backends without comparison kernels, from relu (0 for NaN on
 * both backends) and where (any non-zero condition, NaN too, is true):
 *   a > b   = where(relu(a - b), 1, 0)         a - b is non-zero exactly when
 *                                              a != b (gradual underflow); inf -
 *                                              inf and NaN give NaN: relu 0, false
 *   isnan x = where(x, 1, 0) - where(relu(x) + relu(-x), 1, 0)
 *   a == b  = where(relu(a - b) + relu(b - a), 0, 1) (1 - isnan a)(1 - isnan b)
 * Elementwise max / min: the operands stacked on a new leading axis, one max
 * reduction (NaN wins, ties go to the first operand; min = -max(-x)). */

static mn_status cmp_consts(ox_ctx *c, mn_tensor *one, mn_tensor *zero) {
    OX_CHECK(ox_scalar(c, 1.0f, one));
    return ox_scalar(c, 0.0f, zero);
}

/* a > b as f32 0/1 */
static mn_status rt_gt(ox_ctx *c, mn_tensor a, mn_tensor b, mn_tensor *y) {
    mn_tensor d, r, one, zero;
    OX_TRY(c, mn_sub(c->g, &d, a, b));
    OX_TRY(c, mn_relu(c->g, &r, d));
    OX_CHECK(cmp_consts(c, &one, &zero));
    OX_TRY(c, mn_where(c->g, y, r, one, zero));
    return MN_OK;
}

static mn_status rt_isnan(ox_ctx *c, mn_tensor x, mn_tensor *y) {
    mn_tensor one, zero, nz, p, n, nx, mag, nzm;
    OX_CHECK(cmp_consts(c, &one, &zero));
    OX_TRY(c, mn_where(c->g, &nz, x, one, zero));
    OX_TRY(c, mn_relu(c->g, &p, x));
    OX_TRY(c, mn_neg(c->g, &nx, x));
    OX_TRY(c, mn_relu(c->g, &n, nx));
    OX_TRY(c, mn_add(c->g, &mag, p, n));
    OX_TRY(c, mn_where(c->g, &nzm, mag, one, zero));
    OX_TRY(c, mn_sub(c->g, y, nz, nzm));
    return MN_OK;
}

static mn_status rt_eq(ox_ctx *c, mn_tensor a, mn_tensor b, mn_tensor *y) {
    mn_tensor d1, d2, r1, r2, mag, one, zero, e, na, nb, ka, kb, t;
    OX_TRY(c, mn_sub(c->g, &d1, a, b));
    OX_TRY(c, mn_sub(c->g, &d2, b, a));
    OX_TRY(c, mn_relu(c->g, &r1, d1));
    OX_TRY(c, mn_relu(c->g, &r2, d2));
    OX_TRY(c, mn_add(c->g, &mag, r1, r2));
    OX_CHECK(cmp_consts(c, &one, &zero));
    OX_TRY(c, mn_where(c->g, &e, mag, zero, one));
    OX_CHECK(rt_isnan(c, a, &na));
    OX_CHECK(rt_isnan(c, b, &nb));
    OX_TRY(c, mn_sub(c->g, &ka, one, na));
    OX_TRY(c, mn_sub(c->g, &kb, one, nb));
    OX_TRY(c, mn_mul(c->g, &t, e, ka));
    OX_TRY(c, mn_mul(c->g, y, t, kb));
    return MN_OK;
}

/* elementwise max (or min) of n graph tensors, numpy broadcasting */
static mn_status rt_maxn(ox_ctx *c, const mn_tensor *xs, int n, bool mn_, mn_tensor *y) {
    int r = 0, rk;
    int64_t d[MN_MAX_RANK], dk[MN_MAX_RANK];
    for (int i = 0; i < n; i++) {
        OX_CHECK(ox_shape(c, xs[i], &rk, dk));
        if (!ox_broadcast_dims(&r, d, r, d, rk, dk)) return ox_fail(c, MN_E_SHAPE, "operand shapes do not broadcast");
    }
    int64_t total = 1;
    for (int i = 0; i < r; i++) total *= d[i];
    mn_tensor parts[64];
    if (n > 64) return ox_unsup(c, "more than 64 operands");
    for (int i = 0; i < n; i++) {
        mn_tensor t = xs[i];
        if (mn_) OX_TRY(c, mn_neg(c->g, &t, t));
        OX_CHECK(ox_shape(c, t, &rk, dk));
        bool same = rk == r;
        for (int k = 0; same && k < r; k++) same = dk[k] == d[k];
        if (!same) OX_TRY(c, mn_broadcast_to(c->g, &t, t, r, d));
        int64_t f[2] = {1, total};
        OX_CHECK(ox_reshape(c, &parts[i], t, 2, f));
    }
    mn_tensor st, m;
    OX_TRY(c, mn_concat(c->g, &st, parts, n, 0));
    OX_TRY(c, mn_max(c->g, &m, st, 0, false));
    if (mn_) OX_TRY(c, mn_neg(c->g, &m, m));
    return ox_reshape(c, y, m, r, d);
}

/* erf(x): for |x| <= 0.5 the Taylor series to x^15 (relative error below
 * 1e-8), else 1 - erfc(|x|) with the Chebyshev fit of Numerical Recipes'
 * erfcc (fractional error below 1.2e-7), with x's sign. */
static mn_status rt_erf(ox_ctx *c, mn_tensor x, mn_tensor *y) {
    mn_graph *g = c->g;
    static const double taylor[8] = {1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216, -1.0 / 1320, 1.0 / 9360, -1.0 / 75600};
    static const double cheb[10] = {-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                                    0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277};
    const double two_over_sqrtpi = 1.1283791670955126;
    mn_tensor x2, p, k, small, a, t, one, half, q, e, a2, erfc, r, nr, neg, z, big, sel;
    OX_TRY(c, mn_mul(g, &x2, x, x));
    /* Horner in x^2 */
    OX_CHECK(ox_scalar(c, (float)(taylor[7] * two_over_sqrtpi), &p));
    for (int i = 6; i >= 0; i--) {
        OX_TRY(c, mn_mul(g, &p, p, x2));
        OX_CHECK(ox_scalar(c, (float)(taylor[i] * two_over_sqrtpi), &k));
        OX_TRY(c, mn_add(g, &p, p, k));
    }
    OX_TRY(c, mn_mul(g, &small, p, x));
    OX_TRY(c, mn_abs(g, &a, x));
    OX_CHECK(ox_scalar(c, 1.0f, &one));
    OX_CHECK(ox_scalar(c, 0.5f, &half));
    OX_TRY(c, mn_scale(g, &t, a, 0.5f));
    OX_TRY(c, mn_add(g, &t, t, one));
    OX_TRY(c, mn_div(g, &t, one, t));
    OX_CHECK(ox_scalar(c, (float)cheb[9], &q));
    for (int i = 8; i >= 0; i--) {
        OX_TRY(c, mn_mul(g, &q, q, t));
        OX_CHECK(ox_scalar(c, (float)cheb[i], &k));
        OX_TRY(c, mn_add(g, &q, q, k));
    }
    OX_TRY(c, mn_mul(g, &a2, a, a));
    OX_TRY(c, mn_sub(g, &e, q, a2));
    OX_TRY(c, mn_exp(g, &e, e));
    OX_TRY(c, mn_mul(g, &erfc, t, e));
    OX_TRY(c, mn_sub(g, &r, one, erfc));
    OX_TRY(c, mn_neg(g, &nr, r));
    OX_CHECK(ox_scalar(c, 0.0f, &z));
    OX_CHECK(rt_gt(c, z, x, &neg));
    OX_TRY(c, mn_where(g, &big, neg, nr, r));
    OX_CHECK(rt_gt(c, a, half, &sel));
    OX_TRY(c, mn_where(g, y, sel, big, small));
    return MN_OK;
}

/* the comparison k of a and b as f32 0/1 */
static mn_status rt_compare(ox_ctx *c, int k, mn_tensor a, mn_tensor b, mn_tensor *y);

/* ---- unary ------------------------------------------------------------------ */

typedef enum {
    U_ABS, U_NEG, U_EXP, U_LOG, U_SQRT, U_RECIP, U_RELU, U_SIGMOID, U_TANH, U_SOFTPLUS, U_SOFTSIGN, U_ELU,
    U_SELU, U_CELU, U_LEAKY, U_HSIG, U_HSWISH, U_MISH, U_THRELU, U_ERF, U_FLOOR, U_CEIL, U_ROUND, U_SIGN,
    U_SIN, U_COS, U_TAN, U_ASIN, U_ACOS, U_ATAN, U_SINH, U_COSH, U_ASINH, U_ACOSH, U_ATANH, U_NOT, U_ISNAN,
    U_ISINF, U_GELU, U_SHRINK
} unary_kind;

static const struct { const char *name; unary_kind k; } unary_names[] = {
    {"Abs", U_ABS}, {"Neg", U_NEG}, {"Exp", U_EXP}, {"Log", U_LOG}, {"Sqrt", U_SQRT}, {"Reciprocal", U_RECIP},
    {"Relu", U_RELU}, {"Sigmoid", U_SIGMOID}, {"Tanh", U_TANH}, {"Softplus", U_SOFTPLUS},
    {"Softsign", U_SOFTSIGN}, {"Elu", U_ELU}, {"Selu", U_SELU}, {"Celu", U_CELU}, {"LeakyRelu", U_LEAKY},
    {"HardSigmoid", U_HSIG}, {"HardSwish", U_HSWISH}, {"Mish", U_MISH}, {"ThresholdedRelu", U_THRELU},
    {"Erf", U_ERF}, {"Floor", U_FLOOR}, {"Ceil", U_CEIL}, {"Round", U_ROUND}, {"Sign", U_SIGN}, {"Sin", U_SIN},
    {"Cos", U_COS}, {"Tan", U_TAN}, {"Asin", U_ASIN}, {"Acos", U_ACOS}, {"Atan", U_ATAN}, {"Sinh", U_SINH},
    {"Cosh", U_COSH}, {"Asinh", U_ASINH}, {"Acosh", U_ACOSH}, {"Atanh", U_ATANH}, {"Not", U_NOT},
    {"IsNaN", U_ISNAN}, {"IsInf", U_ISINF}, {"Gelu", U_GELU}, {"Shrink", U_SHRINK},
};

typedef struct {
    float alpha, beta, gamma, lambd, bias;
    int64_t detect_pos, detect_neg;
    bool tanh;
} unary_attrs;

static double softplus(double x) { return (x > 0 ? x : 0) + log1p(exp(-fabs(x))); }

static double host_unary(unary_kind k, double x, const unary_attrs *a) {
    switch (k) {
    case U_ABS: return fabs(x);
    case U_NEG: return -x;
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RECIP: return 1.0 / x;
    case U_RELU: return x > 0 ? x : (x == x ? 0 * x : x);
    case U_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case U_TANH: return tanh(x);
    case U_SOFTPLUS: return softplus(x);
    case U_SOFTSIGN: return x / (1 + fabs(x));
    case U_ELU: return x < 0 ? a->alpha * (exp(x) - 1) : x;
    case U_SELU: return x > 0 ? a->gamma * x : a->gamma * (a->alpha * exp(x) - a->alpha);
    case U_CELU: return (x > 0 ? x : 0) + fmin(0, a->alpha * (exp(x / a->alpha) - 1));
    case U_LEAKY: return x < 0 ? a->alpha * x : x;
    case U_HSIG: return fmax(0, fmin(1, a->alpha * x + a->beta));
    case U_HSWISH: return x * fmax(0, fmin(1, x / 6 + 0.5));
    case U_MISH: return x * tanh(softplus(x));
    case U_THRELU: return x > a->alpha ? x : 0;
    case U_ERF: return erf(x);
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_ROUND: return nearbyint(x);
    case U_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_TAN: return tan(x);
    case U_ASIN: return asin(x);
    case U_ACOS: return acos(x);
    case U_ATAN: return atan(x);
    case U_SINH: return sinh(x);
    case U_COSH: return cosh(x);
    case U_ASINH: return asinh(x);
    case U_ACOSH: return acosh(x);
    case U_ATANH: return atanh(x);
    case U_NOT: return x == 0;
    case U_ISNAN: return x != x;
    case U_ISINF: return (isinf(x) && ((x > 0 && a->detect_pos) || (x < 0 && a->detect_neg)));
    case U_GELU:
        if (a->tanh) return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case U_SHRINK: return x < -a->lambd ? x + a->bias : x > a->lambd ? x - a->bias : 0;
    }
    return x;
}

/* min(x, 0) as clamp(x, -inf, 0) */
static mn_status neg_part(ox_ctx *c, mn_tensor x, mn_tensor *y) {
    OX_TRY(c, mn_clamp(c->g, y, x, -INFINITY, 0.0f));
    return MN_OK;
}

/* alpha * (exp(min(x, 0) / div) - 1) */
static mn_status elu_tail(ox_ctx *c, mn_tensor x, float alpha, float div, mn_tensor *y) {
    mn_tensor m, e, one, d;
    OX_CHECK(neg_part(c, x, &m));
    if (div != 1.0f) OX_TRY(c, mn_scale(c->g, &m, m, 1.0f / div));
    OX_TRY(c, mn_exp(c->g, &e, m));
    OX_CHECK(ox_scalar(c, 1.0f, &one));
    OX_TRY(c, mn_sub(c->g, &d, e, one));
    OX_TRY(c, mn_scale(c->g, y, d, alpha));
    return MN_OK;
}

static mn_status rt_softplus(ox_ctx *c, mn_tensor x, mn_tensor *y) {
    mn_tensor r, a, na, e, one, s, l;
    OX_TRY(c, mn_relu(c->g, &r, x));
    OX_TRY(c, mn_abs(c->g, &a, x));
    OX_TRY(c, mn_neg(c->g, &na, a));
    OX_TRY(c, mn_exp(c->g, &e, na));
    OX_CHECK(ox_scalar(c, 1.0f, &one));
    OX_TRY(c, mn_add(c->g, &s, e, one));
    OX_TRY(c, mn_log(c->g, &l, s));
    OX_TRY(c, mn_add(c->g, y, r, l));
    return MN_OK;
}

static mn_status rt_unary(ox_ctx *c, unary_kind k, mn_tensor x, const unary_attrs *a, mn_tensor *y) {
    mn_graph *g = c->g;
    mn_tensor t1, t2, t3, one;
    switch (k) {
    case U_ABS: OX_TRY(c, mn_abs(g, y, x)); return MN_OK;
    case U_NEG: OX_TRY(c, mn_neg(g, y, x)); return MN_OK;
    case U_EXP: OX_TRY(c, mn_exp(g, y, x)); return MN_OK;
    case U_LOG: OX_TRY(c, mn_log(g, y, x)); return MN_OK;
    case U_SQRT: OX_TRY(c, mn_sqrt(g, y, x)); return MN_OK;
    case U_RELU: OX_TRY(c, mn_relu(g, y, x)); return MN_OK;
    case U_SIGMOID: OX_TRY(c, mn_sigmoid(g, y, x)); return MN_OK;
    case U_TANH: OX_TRY(c, mn_tanh(g, y, x)); return MN_OK;
    case U_RECIP:
        OX_CHECK(ox_scalar(c, 1.0f, &one));
        OX_TRY(c, mn_div(g, y, one, x));
        return MN_OK;
    case U_SOFTPLUS: return rt_softplus(c, x, y);
    case U_SOFTSIGN:
        OX_TRY(c, mn_abs(g, &t1, x));
        OX_CHECK(ox_scalar(c, 1.0f, &one));
        OX_TRY(c, mn_add(g, &t2, t1, one));
        OX_TRY(c, mn_div(g, y, x, t2));
        return MN_OK;
    case U_ELU:
    case U_SELU:
    case U_CELU:
        OX_TRY(c, mn_relu(g, &t1, x));
        OX_CHECK(elu_tail(c, x, a->alpha, k == U_CELU ? a->alpha : 1.0f, &t2));
        if (k != U_SELU) {
            OX_TRY(c, mn_add(g, y, t1, t2));
            return MN_OK;
        }
        OX_TRY(c, mn_add(g, &t3, t1, t2));
        OX_TRY(c, mn_scale(g, y, t3, a->gamma));
        return MN_OK;
    case U_LEAKY: /* relu(x) - alpha relu(-x): exactly alpha x below 0 */
        OX_TRY(c, mn_relu(g, &t1, x));
        OX_TRY(c, mn_neg(g, &t2, x));
        OX_TRY(c, mn_relu(g, &t2, t2));
        OX_TRY(c, mn_scale(g, &t3, t2, a->alpha));
        OX_TRY(c, mn_sub(g, y, t1, t3));
        return MN_OK;
    case U_HSIG:
    case U_HSWISH: {
        float al = k == U_HSIG ? a->alpha : 1.0f / 6.0f, be = k == U_HSIG ? a->beta : 0.5f;
        mn_tensor b;
        OX_TRY(c, mn_scale(g, &t1, x, al));
        OX_CHECK(ox_scalar(c, be, &b));
        OX_TRY(c, mn_add(g, &t2, t1, b));
        OX_TRY(c, mn_clamp(g, k == U_HSIG ? y : &t3, t2, 0.0f, 1.0f));
        if (k == U_HSWISH) OX_TRY(c, mn_mul(g, y, x, t3));
        return MN_OK;
    }
    case U_MISH:
        OX_CHECK(rt_softplus(c, x, &t1));
        OX_TRY(c, mn_tanh(g, &t2, t1));
        OX_TRY(c, mn_mul(g, y, x, t2));
        return MN_OK;
    case U_NOT: /* bool as f32 0/1 */
        OX_CHECK(ox_scalar(c, 1.0f, &one));
        OX_TRY(c, mn_sub(g, y, one, x));
        return MN_OK;
    case U_SIN: OX_TRY(c, mn_sin(g, y, x)); return MN_OK;
    case U_COS: OX_TRY(c, mn_cos(g, y, x)); return MN_OK;
    case U_TAN: /* sin / cos */
        OX_TRY(c, mn_sin(g, &t1, x));
        OX_TRY(c, mn_cos(g, &t2, x));
        OX_TRY(c, mn_div(g, y, t1, t2));
        return MN_OK;
    case U_GELU:
        if (a->tanh) OX_TRY(c, mn_gelu_tanh(g, y, x));
        else OX_TRY(c, mn_gelu(g, y, x));
        return MN_OK;
    case U_SIGN: { /* (x > 0) - (0 > x); NaN gives 0 */
        mn_tensor z, p, n;
        OX_CHECK(ox_scalar(c, 0.0f, &z));
        OX_CHECK(rt_gt(c, x, z, &p));
        OX_CHECK(rt_gt(c, z, x, &n));
        OX_TRY(c, mn_sub(g, y, p, n));
        return MN_OK;
    }
    case U_ISNAN: return rt_isnan(c, x, y);
    case U_ERF: return rt_erf(c, x, y);
    case U_ISINF: { /* x - x is NaN for infinities and NaN */
        mn_tensor d, nd, nx, inf, z, s;
        OX_TRY(c, mn_sub(g, &d, x, x));
        OX_CHECK(rt_isnan(c, d, &nd));
        OX_CHECK(rt_isnan(c, x, &nx));
        OX_TRY(c, mn_sub(g, &inf, nd, nx));
        if (a->detect_pos && a->detect_neg) {
            *y = inf;
            return MN_OK;
        }
        OX_CHECK(ox_scalar(c, 0.0f, &z));
        if (!a->detect_pos && !a->detect_neg) {
            OX_TRY(c, mn_scale(g, y, inf, 0.0f));
            return MN_OK;
        }
        if (a->detect_pos) OX_CHECK(rt_gt(c, x, z, &s));
        else OX_CHECK(rt_gt(c, z, x, &s));
        OX_TRY(c, mn_mul(g, y, inf, s));
        return MN_OK;
    }
    case U_THRELU: { /* x where x > alpha, else 0 */
        mn_tensor al, m, z;
        OX_CHECK(ox_scalar(c, a->alpha, &al));
        OX_CHECK(rt_gt(c, x, al, &m));
        OX_CHECK(ox_scalar(c, 0.0f, &z));
        OX_TRY(c, mn_where(g, y, m, x, z));
        return MN_OK;
    }
    case U_SHRINK: { /* x + bias below -lambd, x - bias above lambd, else 0 */
        mn_tensor lo, hi, mlo, mhi, xb, xs, z, t;
        OX_CHECK(ox_scalar(c, -a->lambd, &lo));
        OX_CHECK(ox_scalar(c, a->lambd, &hi));
        OX_CHECK(rt_gt(c, lo, x, &mlo));
        OX_CHECK(rt_gt(c, x, hi, &mhi));
        OX_CHECK(ox_scalar(c, 0.0f, &z));
        mn_tensor bs;
        OX_CHECK(ox_scalar(c, a->bias, &bs));
        OX_TRY(c, mn_add(g, &xb, x, bs));
        OX_TRY(c, mn_sub(g, &xs, x, bs));
        OX_TRY(c, mn_where(g, &t, mhi, xs, z));
        OX_TRY(c, mn_where(g, y, mlo, xb, t));
        return MN_OK;
    }
    default: return ox_unsup(c, "no run-time form (it is evaluated only on constants)");
    }
}

static mn_status op_unary(ox_ctx *c) {
    unary_kind k = U_ABS;
    for (size_t i = 0; i < sizeof unary_names / sizeof *unary_names; i++)
        if (is(c, unary_names[i].name)) k = unary_names[i].k;
    unary_attrs a = {0};
    a.detect_pos = a.detect_neg = 1;
    switch (k) {
    case U_ELU:
    case U_CELU:
    case U_THRELU: OX_CHECK(ox_attr_float(c, "alpha", 1.0f, &a.alpha)); break;
    case U_SELU:
        OX_CHECK(ox_attr_float(c, "alpha", 1.67326319217681884765625f, &a.alpha));
        OX_CHECK(ox_attr_float(c, "gamma", 1.05070102214813232421875f, &a.gamma));
        break;
    case U_LEAKY: OX_CHECK(ox_attr_float(c, "alpha", 0.01f, &a.alpha)); break;
    case U_HSIG:
        OX_CHECK(ox_attr_float(c, "alpha", 0.2f, &a.alpha));
        OX_CHECK(ox_attr_float(c, "beta", 0.5f, &a.beta));
        break;
    case U_ISINF:
        OX_CHECK(ox_attr_int(c, "detect_positive", 1, &a.detect_pos));
        OX_CHECK(ox_attr_int(c, "detect_negative", 1, &a.detect_neg));
        break;
    case U_SHRINK:
        OX_CHECK(ox_attr_float(c, "lambd", 0.5f, &a.lambd));
        OX_CHECK(ox_attr_float(c, "bias", 0.0f, &a.bias));
        break;
    case U_GELU: {
        const char *ap;
        OX_CHECK(ox_attr_string(c, "approximate", "none", &ap));
        if (strcmp(ap, "tanh") == 0) a.tanh = true;
        else if (strcmp(ap, "none") != 0) return ox_unsup(c, "approximate = '%s'", ap);
        break;
    }
    default: break;
    }
    int dt = ox_in_dtype(c, 0);
    int out_dt = (k == U_NOT || k == U_ISNAN || k == U_ISINF) ? MN_ONNX_BOOL : dt;
    if (ox_in_known(c, 0)) {
        const ox_host *x;
        OX_CHECK(ox_in_host(c, 0, &x));
        ox_host y;
        char sub[128];
        mn_status st = ox_host_alloc(&y, out_dt, x->rank, x->dims, sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        for (int64_t i = 0; i < x->numel; i++) {
            if (x->i && (k == U_ABS || k == U_NEG || k == U_SIGN || k == U_RELU)) {
                int64_t v = x->i[i];
                int64_t r = k == U_ABS ? (v < 0 ? (int64_t)(0 - (uint64_t)v) : v)
                            : k == U_NEG ? (int64_t)(0 - (uint64_t)v)
                            : k == U_SIGN ? (v > 0) - (v < 0) : (v > 0 ? v : 0);
                ox_host_set_i(&y, i, r);
            } else ox_host_set_f(&y, i, host_unary(k, ox_host_get_f(x, i), &a));
        }
        return ox_set_out_host(c, 0, &y);
    }
    if (k == U_NOT ? dt != MN_ONNX_BOOL : !ox_dtype_float(dt))
        return ox_unsup(c, "%s input at run time (computed in the graph: float%s)", mn_onnx_dtype_name(dt),
                        k == U_NOT ? ", bool for Not" : "");
    mn_tensor x, y;
    OX_CHECK(ox_in_f32(c, 0, &x));
    OX_CHECK(rt_unary(c, k, x, &a, &y));
    return ox_set_out(c, 0, y, out_dt);
}

static mn_status op_identity(ox_ctx *c) {
    ox_value *v = ox_in(c, 0);
    if (v->kind == OXV_CONST) {
        const ox_host *x;
        OX_CHECK(ox_in_host(c, 0, &x));
        ox_host y;
        char sub[128];
        mn_status st = ox_host_copy(&y, x, sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        return ox_set_out_host(c, 0, &y);
    }
    mn_tensor t;
    if (ox_dtype_int(v->dtype) && v->dtype != MN_ONNX_BOOL) {
        OX_CHECK(ox_in_ids(c, 0, &t));
        return ox_set_out_ids(c, 0, t, v->dtype);
    }
    OX_CHECK(ox_in_f32(c, 0, &t));
    return ox_set_out(c, 0, t, v->dtype);
}

/* ---- binary and variadic --------------------------------------------------------- */

typedef enum {
    B_ADD, B_SUB, B_MUL, B_DIV, B_POW, B_MAX, B_MIN, B_MOD, B_EQ, B_LT, B_GT, B_LE, B_GE, B_AND, B_OR, B_XOR,
    B_SHL, B_SHR, B_PRELU, B_SUM, B_MEAN
} binary_kind;

static const struct { const char *name; binary_kind k; } binary_names[] = {
    {"Add", B_ADD}, {"Sub", B_SUB}, {"Mul", B_MUL}, {"Div", B_DIV}, {"Pow", B_POW}, {"Max", B_MAX},
    {"Min", B_MIN}, {"Mod", B_MOD}, {"Equal", B_EQ}, {"Less", B_LT}, {"Greater", B_GT},
    {"LessOrEqual", B_LE}, {"GreaterOrEqual", B_GE}, {"And", B_AND}, {"Or", B_OR}, {"Xor", B_XOR},
    {"BitShift", B_SHL}, {"PRelu", B_PRELU}, {"Sum", B_SUM}, {"Mean", B_MEAN},
};

static bool compare_kind(binary_kind k) { return k >= B_EQ && k <= B_GE; }

static double host_bin_f(binary_kind k, double a, double b, bool fmod_) {
    switch (k) {
    case B_ADD:
    case B_SUM:
    case B_MEAN: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return pow(a, b);
    case B_MAX: return (a != a || b != b) ? NAN : fmax(a, b);
    case B_MIN: return (a != a || b != b) ? NAN : fmin(a, b);
    case B_MOD: {
        if (fmod_) return fmod(a, b);
        double r = fmod(a, b);
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        return r;
    }
    case B_EQ: return a == b;
    case B_LT: return a < b;
    case B_GT: return a > b;
    case B_LE: return a <= b;
    case B_GE: return a >= b;
    case B_AND: return (a != 0) && (b != 0);
    case B_OR: return (a != 0) || (b != 0);
    case B_XOR: return (a != 0) != (b != 0);
    case B_PRELU: return a < 0 ? a * b : a;
    default: return 0;
    }
}

static int64_t host_bin_i(binary_kind k, int64_t a, int64_t b, bool fmod_, bool right, bool *bad) {
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (k) {
    case B_ADD:
    case B_SUM: return (int64_t)(ua + ub);
    case B_SUB: return (int64_t)(ua - ub);
    case B_MUL: return (int64_t)(ua * ub);
    case B_DIV:
        if (b == 0 || (a == INT64_MIN && b == -1)) {
            *bad = true;
            return 0;
        }
        return a / b;
    case B_MOD: {
        if (b == 0 || (a == INT64_MIN && b == -1)) {
            *bad = true;
            return 0;
        }
        int64_t r = a % b;
        if (!fmod_ && r != 0 && ((r < 0) != (b < 0))) r += b;
        return r;
    }
    case B_POW: {
        if (b < 0) return a == 1 ? 1 : 0;
        uint64_t r = 1, base = ua;
        for (int64_t e = b; e > 0 && e < 64; e >>= 1) {
            if (e & 1) r *= base;
            base *= base;
        }
        return (int64_t)r;
    }
    case B_MAX: return a > b ? a : b;
    case B_MIN: return a < b ? a : b;
    case B_EQ: return a == b;
    case B_LT: return a < b;
    case B_GT: return a > b;
    case B_LE: return a <= b;
    case B_GE: return a >= b;
    case B_AND: return a && b;
    case B_OR: return a || b;
    case B_XOR: return (!a) != (!b);
    case B_SHL: return b >= 64 || b < 0 ? 0 : right ? (int64_t)(ua >> b) : (int64_t)(ua << b);
    case B_PRELU: return a < 0 ? (int64_t)(ua * ub) : a;
    default: return 0;
    }
}

static mn_status host_binary(ox_ctx *c, binary_kind k, const ox_host *a, const ox_host *b, bool fmod_, bool right,
                             ox_host *y) {
    int dt = compare_kind(k) || k == B_AND || k == B_OR || k == B_XOR ? MN_ONNX_BOOL : a->dtype;
    OX_CHECK(ox_host_broadcast(c, y, dt, a, b));
    bool ints = a->i && b->i;
    for (int64_t e = 0; e < y->numel; e++) {
        int64_t ia = ox_bc_index(y->rank, y->dims, e, a->rank, a->dims);
        int64_t ib = ox_bc_index(y->rank, y->dims, e, b->rank, b->dims);
        if (ints) {
            bool bad = false;
            int64_t r = host_bin_i(k, a->i[ia], b->i[ib], fmod_, right, &bad);
            if (bad) {
                ox_host_free(y);
                return ox_fail(c, MN_E_INVALID, "integer division by zero in a constant");
            }
            ox_host_set_i(y, e, r);
        } else
            ox_host_set_f(y, e, host_bin_f(k, ox_host_get_f(a, ia), ox_host_get_f(b, ib), fmod_));
    }
    return MN_OK;
}

/* a scalar exponent known at import (every element equal) */
static bool uniform_value(const ox_host *h, double *v) {
    if (h->numel < 1) return false;
    *v = ox_host_get_f(h, 0);
    for (int64_t i = 1; i < h->numel; i++)
        if (ox_host_get_f(h, i) != *v) return false;
    return true;
}

static mn_status rt_binary(ox_ctx *c, binary_kind k, int ia, int ib, mn_tensor *y) {
    mn_graph *g = c->g;
    mn_tensor a, b, t1, t2, t3;
    if (k == B_POW) {
        const ox_host *e;
        double p;
        if (!ox_in_known(c, ib) && !(ox_in(c, ib)->kind == OXV_INPUT && ox_in(c, ib)->hint))
            return ox_unsup(c, "exponent computed at run time (a constant exponent is supported)");
        OX_CHECK(ox_in_host(c, ib, &e));
        if (!uniform_value(e, &p) || !isfinite(p))
            return ox_unsup(c, "exponent that is not one finite value");
        /* the result's shape: broadcast with the exponent's */
        OX_CHECK(ox_in_f32(c, ia, &a));
        OX_TRY(c, mn_pow(g, &t1, a, (float)p));
        int r;
        int64_t d[OX_MAX_RANK];
        ox_value *va = ox_in(c, ia);
        if (!ox_broadcast_dims(&r, d, va->rank, va->dims, e->rank, e->dims))
            return ox_fail(c, MN_E_SHAPE, "shapes do not broadcast");
        if (r != va->rank || r > MN_MAX_RANK) {
            if (r > MN_MAX_RANK) return ox_unsup(c, "result of rank %d", r);
            OX_TRY(c, mn_broadcast_to(g, y, t1, r, d));
        } else {
            bool same = true;
            for (int i = 0; i < r; i++) same = same && d[i] == va->dims[i];
            if (same) *y = t1;
            else OX_TRY(c, mn_broadcast_to(g, y, t1, r, d));
        }
        return MN_OK;
    }
    /* x * scalar and x / scalar constants as one scale */
    if ((k == B_MUL || k == B_DIV) && ox_in_known(c, ib) && !ox_in_known(c, ia)) {
        const ox_host *h;
        double v;
        OX_CHECK(ox_in_host(c, ib, &h));
        if (h->rank <= ox_in_rank(c, ia) && uniform_value(h, &v) && h->numel == 1 && isfinite(v) &&
            (k == B_MUL || (v != 0 && (double)(float)(1.0 / v) * v == 1.0))) {
            OX_CHECK(ox_in_f32(c, ia, &a));
            OX_TRY(c, mn_scale(g, y, a, (float)(k == B_MUL ? v : 1.0 / v)));
            return MN_OK;
        }
    }
    OX_CHECK(ox_in_f32(c, ia, &a));
    OX_CHECK(ox_in_f32(c, ib, &b));
    switch (k) {
    case B_ADD:
    case B_SUM:
    case B_MEAN: OX_TRY(c, mn_add(g, y, a, b)); return MN_OK;
    case B_SUB: OX_TRY(c, mn_sub(g, y, a, b)); return MN_OK;
    case B_MUL: OX_TRY(c, mn_mul(g, y, a, b)); return MN_OK;
    case B_DIV: OX_TRY(c, mn_div(g, y, a, b)); return MN_OK;
    case B_AND: OX_TRY(c, mn_mul(g, y, a, b)); return MN_OK; /* on 0/1 */
    case B_OR:                                              /* a + b - a b */
        OX_TRY(c, mn_add(g, &t1, a, b));
        OX_TRY(c, mn_mul(g, &t2, a, b));
        OX_TRY(c, mn_sub(g, y, t1, t2));
        return MN_OK;
    case B_XOR: /* |a - b| */
        OX_TRY(c, mn_sub(g, &t1, a, b));
        OX_TRY(c, mn_abs(g, y, t1));
        return MN_OK;
    case B_PRELU: /* relu(x) - slope relu(-x) */
        OX_TRY(c, mn_relu(g, &t1, a));
        OX_TRY(c, mn_neg(g, &t2, a));
        OX_TRY(c, mn_relu(g, &t2, t2));
        OX_TRY(c, mn_mul(g, &t3, t2, b));
        OX_TRY(c, mn_sub(g, y, t1, t3));
        return MN_OK;
    default: return ox_unsup(c, "no run-time form (it is evaluated only on constants)");
    }
}

static mn_status rt_compare(ox_ctx *c, int k, mn_tensor a, mn_tensor b, mn_tensor *y) {
    mn_tensor g1, e1, one;
    switch ((binary_kind)k) {
    case B_GT: return rt_gt(c, a, b, y);
    case B_LT: return rt_gt(c, b, a, y);
    case B_EQ: return rt_eq(c, a, b, y);
    case B_GE:
    case B_LE: /* the two are disjoint: a sum of 0/1 values */
        OX_CHECK(k == B_GE ? rt_gt(c, a, b, &g1) : rt_gt(c, b, a, &g1));
        OX_CHECK(rt_eq(c, a, b, &e1));
        OX_TRY(c, mn_add(c->g, y, g1, e1));
        (void)one;
        return MN_OK;
    default: return ox_fail(c, MN_E_STATE, "not a comparison (internal)");
    }
}

static mn_status op_binary(ox_ctx *c) {
    binary_kind k = B_ADD;
    for (size_t i = 0; i < sizeof binary_names / sizeof *binary_names; i++)
        if (is(c, binary_names[i].name)) k = binary_names[i].k;
    int64_t fmod_ = 0;
    const char *dir = "LEFT";
    if (k == B_MOD) OX_CHECK(ox_attr_int(c, "fmod", 0, &fmod_));
    if (k == B_SHL) {
        OX_CHECK(ox_attr_string(c, "direction", "", &dir));
        if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT")) return ox_fail(c, MN_E_FORMAT, "direction '%s'", dir);
    }
    bool right = strcmp(dir, "RIGHT") == 0;
    int n = 0;
    for (int i = 0; i < c->nin; i++)
        if (ox_has_in(c, i)) n++;
    if (n < 1 || n != c->nin) return ox_fail(c, MN_E_FORMAT, "an input is missing");
    bool variadic = k == B_SUM || k == B_MEAN || k == B_MAX || k == B_MIN;
    if (!variadic && c->nin != 2) return ox_fail(c, MN_E_FORMAT, "takes 2 inputs, %d given", c->nin);
    if (c->ver < 7 && !variadic && k != B_PRELU) {
        /* opsets 1-6: B broadcasts to A only with broadcast = 1, its dims
         * aligned to A's from axis (default: the trailing dims) */
        int64_t bc, ax;
        OX_CHECK(ox_attr_int(c, "broadcast", 0, &bc));
        ox_value *va = ox_in(c, 0), *vb = ox_in(c, 1);
        OX_CHECK(ox_attr_int(c, "axis", va->rank - vb->rank, &ax));
        if (!bc) {
            bool same = va->rank == vb->rank;
            for (int i = 0; same && i < va->rank; i++) same = va->dims[i] == vb->dims[i];
            if (!same) return ox_fail(c, MN_E_SHAPE, "shapes differ and broadcast is 0");
        } else {
            if (ax < 0 || ax + vb->rank > va->rank) return ox_fail(c, MN_E_SHAPE, "axis %lld for ranks %d and %d",
                                                                   (long long)ax, va->rank, vb->rank);
            int64_t d[OX_MAX_RANK];
            int r = (int)ax + vb->rank;
            for (int i = 0; i < r; i++) d[i] = i < ax ? 1 : vb->dims[i - ax];
            /* trailing ones so the dims stay at axis under numpy's rules */
            while (r < va->rank) d[r++] = 1;
            if (r != vb->rank || ax != va->rank - vb->rank) OX_CHECK(ox_derive(c, 1, r, d));
        }
    }
    if (c->ver < 7 && k == B_PRELU) {
        /* per-channel slope [C] of an [N, C, ...] input */
        ox_value *va = ox_in(c, 0), *vb = ox_in(c, 1);
        if (vb->rank == 1 && va->rank > 2 && vb->dims[0] == va->dims[1] && vb->dims[0] != 1) {
            int64_t d[OX_MAX_RANK];
            d[0] = vb->dims[0];
            for (int i = 1; i < va->rank - 1; i++) d[i] = 1;
            OX_CHECK(ox_derive(c, 1, va->rank - 1, d));
        }
    }
    int dt = ox_in_dtype(c, 0);
    for (int i = 1; i < c->nin; i++)
        if (ox_in_dtype(c, i) != dt && k != B_POW && k != B_PRELU)
            return ox_fail(c, MN_E_DTYPE, "inputs of types %s and %s", mn_onnx_dtype_name(dt),
                           mn_onnx_dtype_name(ox_in_dtype(c, i)));
    int out_dt = compare_kind(k) || k == B_AND || k == B_OR || k == B_XOR ? MN_ONNX_BOOL : dt;
    char sub[128];
    if (ox_all_known(c)) {
        const ox_host *a;
        OX_CHECK(ox_in_host(c, 0, &a));
        ox_host acc;
        mn_status st = ox_host_copy(&acc, a, sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        for (int i = 1; i < c->nin; i++) {
            const ox_host *b;
            ox_host y;
            if ((st = ox_in_host(c, i, &b)) || (st = host_binary(c, k, &acc, b, fmod_ != 0, right, &y))) {
                ox_host_free(&acc);
                return st;
            }
            ox_host_free(&acc);
            acc = y;
        }
        if (k == B_MEAN)
            for (int64_t e = 0; e < acc.numel; e++) ox_host_set_f(&acc, e, ox_host_get_f(&acc, e) / c->nin);
        return ox_set_out_host(c, 0, &acc);
    }
    bool logic = k == B_AND || k == B_OR || k == B_XOR;
    for (int i = 0; i < c->nin; i++) {
        int di = ox_in_dtype(c, i);
        bool ok = logic ? di == MN_ONNX_BOOL
                        : ox_dtype_float(di) || (k == B_POW && i == 1 && ox_in_known(c, 1)) ||
                              (k == B_EQ && di == MN_ONNX_BOOL);
        if (!ok && !(k == B_POW && i == 1))
            return ox_unsup(c, "%s inputs at run time (computed in the graph: float%s)", mn_onnx_dtype_name(di),
                            logic ? "; bool for And/Or/Xor" : "");
    }
    if (compare_kind(k)) {
        mn_tensor a, b, y;
        OX_CHECK(ox_in_f32(c, 0, &a));
        OX_CHECK(ox_in_f32(c, 1, &b));
        OX_CHECK(rt_compare(c, k, a, b, &y));
        return ox_set_out(c, 0, y, out_dt);
    }
    if (c->nin == 1) {
        mn_tensor x;
        OX_CHECK(ox_in_f32(c, 0, &x));
        return ox_set_out(c, 0, x, out_dt);
    }
    if (k == B_MAX || k == B_MIN) {
        mn_tensor xs[64], y;
        if (c->nin > 64) return ox_unsup(c, "more than 64 operands");
        for (int i = 0; i < c->nin; i++) OX_CHECK(ox_in_f32(c, i, &xs[i]));
        OX_CHECK(rt_maxn(c, xs, c->nin, k == B_MIN, &y));
        return ox_set_out(c, 0, y, out_dt);
    }
    mn_tensor y;
    OX_CHECK(rt_binary(c, k, 0, 1, &y));
    for (int i = 2; i < c->nin; i++) {
        mn_tensor b;
        OX_CHECK(ox_in_f32(c, i, &b));
        OX_TRY(c, mn_add(c->g, &y, y, b));
    }
    if (k == B_MEAN) OX_TRY(c, mn_scale(c->g, &y, y, 1.0f / (float)c->nin));
    return ox_set_out(c, 0, y, out_dt);
}

/* ---- Where -------------------------------------------------------------------- */

static mn_status op_where(ox_ctx *c) {
    if (ox_in_dtype(c, 0) != MN_ONNX_BOOL) return ox_fail(c, MN_E_DTYPE, "condition must be bool");
    if (ox_in_dtype(c, 1) != ox_in_dtype(c, 2)) return ox_fail(c, MN_E_DTYPE, "X and Y differ in type");
    int dt = ox_in_dtype(c, 1);
    if (ox_all_known(c)) {
        const ox_host *cd, *x, *y;
        OX_CHECK(ox_in_host(c, 0, &cd));
        OX_CHECK(ox_in_host(c, 1, &x));
        OX_CHECK(ox_in_host(c, 2, &y));
        ox_host t, o;
        OX_CHECK(ox_host_broadcast(c, &t, dt, x, y));
        mn_status st = ox_host_broadcast(c, &o, dt, &t, cd);
        ox_host_free(&t);
        if (st) return st;
        for (int64_t e = 0; e < o.numel; e++) {
            int64_t ic = ox_bc_index(o.rank, o.dims, e, cd->rank, cd->dims);
            const ox_host *s = cd->i[ic] ? x : y;
            int64_t is_ = ox_bc_index(o.rank, o.dims, e, s->rank, s->dims);
            if (s->i) ox_host_set_i(&o, e, s->i[is_]);
            else ox_host_set_f(&o, e, s->f[is_]);
        }
        return ox_set_out_host(c, 0, &o);
    }
    if (!ox_dtype_float(dt)) return ox_unsup(c, "%s X/Y at run time (float only)", mn_onnx_dtype_name(dt));
    mn_tensor cd, x, y, o;
    OX_CHECK(ox_in_f32(c, 0, &cd));
    OX_CHECK(ox_in_f32(c, 1, &x));
    OX_CHECK(ox_in_f32(c, 2, &y));
    OX_TRY(c, mn_where(c->g, &o, cd, x, y));
    return ox_set_out(c, 0, o, dt);
}

/* ---- Clip ----------------------------------------------------------------------- */

static mn_status bound(ox_ctx *c, int k, double def, double *v) {
    *v = def;
    if (!ox_has_in(c, k)) return MN_OK;
    const ox_host *h;
    OX_CHECK(ox_in_host(c, k, &h));
    if (h->numel != 1) return ox_fail(c, MN_E_SHAPE, "input %d must hold one value", k);
    *v = ox_host_get_f(h, 0);
    return MN_OK;
}

static mn_status op_clip(ox_ctx *c) {
    double lo, hi;
    int dt = ox_in_dtype(c, 0);
    if (c->ver < 11) {
        float a, b;
        OX_CHECK(ox_attr_float(c, "min", -FLT_MAX, &a));
        OX_CHECK(ox_attr_float(c, "max", FLT_MAX, &b));
        lo = a;
        hi = b;
    } else {
        /* bounds computed at run time: min(max(x, lo), hi) elementwise */
        bool rt_lo = ox_has_in(c, 1) && !ox_in_known(c, 1) && !(ox_in(c, 1)->kind == OXV_INPUT && ox_in(c, 1)->hint);
        bool rt_hi = ox_has_in(c, 2) && !ox_in_known(c, 2) && !(ox_in(c, 2)->kind == OXV_INPUT && ox_in(c, 2)->hint);
        if (rt_lo || rt_hi) {
            if (!ox_dtype_float(dt)) return ox_unsup(c, "%s input at run time (float only)", mn_onnx_dtype_name(dt));
            mn_tensor x, b, y, two[2];
            OX_CHECK(ox_in_f32(c, 0, &x));
            y = x;
            for (int k = 1; k <= 2; k++) {
                if (!ox_has_in(c, k)) continue;
                OX_CHECK(ox_in_f32(c, k, &b));
                if (ox_in(c, k)->rank != 0 && !(ox_in(c, k)->rank == 1 && ox_in(c, k)->dims[0] == 1))
                    return ox_fail(c, MN_E_SHAPE, "input %d must hold one value", k);
                two[0] = y;
                two[1] = b;
                OX_CHECK(rt_maxn(c, two, 2, k == 2, &y));
            }
            return ox_set_out(c, 0, y, dt);
        }
        OX_CHECK(bound(c, 1, -INFINITY, &lo));
        OX_CHECK(bound(c, 2, INFINITY, &hi));
    }
    if (ox_in_known(c, 0)) {
        const ox_host *x;
        OX_CHECK(ox_in_host(c, 0, &x));
        ox_host y;
        char sub[128];
        mn_status st = ox_host_copy(&y, x, sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        for (int64_t e = 0; e < y.numel; e++) {
            double v = ox_host_get_f(x, e);
            if (v < lo) v = lo;
            if (v > hi) v = hi;
            if (y.i) {
                int64_t iv = x->i[e];
                if ((double)iv < lo) iv = ox_f2i(lo);
                if ((double)iv > hi) iv = ox_f2i(hi);
                y.i[e] = iv;
            } else ox_host_set_f(&y, e, v);
        }
        return ox_set_out_host(c, 0, &y);
    }
    if (!ox_dtype_float(dt)) return ox_unsup(c, "%s input at run time (float only)", mn_onnx_dtype_name(dt));
    mn_tensor x, y;
    OX_CHECK(ox_in_f32(c, 0, &x));
    float flo = (float)lo, fhi = (float)hi;
    if (flo > fhi) flo = fhi; /* ONNX: every value becomes max */
    OX_TRY(c, mn_clamp(c->g, &y, x, flo, fhi));
    return ox_set_out(c, 0, y, dt);
}

/* ---- Cast --------------------------------------------------------------------------- */

static mn_status op_cast(ox_ctx *c) {
    int64_t to = 0;
    int dt_in = ox_in_dtype(c, 0);
    if (is(c, "CastLike")) to = ox_in_dtype(c, 1);
    else {
        const Onnx__AttributeProto *a = ox_attr(c, "to");
        if (!a) return ox_fail(c, MN_E_FORMAT, "attribute 'to' is required");
        to = a->i;
        if (c->ver < 6 && a->has_s) {
            /* opsets 1-5 name the type: "FLOAT", "INT64", ... */
            static const char *const names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32",
                                                "INT64", "STRING", "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64",
                                                "COMPLEX64", "COMPLEX128", "BFLOAT16"};
            to = -1;
            for (int i = 0; i < 17; i++)
                if (a->s.len == strlen(names[i]) && memcmp(a->s.data, names[i], a->s.len) == 0) to = i;
            if (to < 0) return ox_fail(c, MN_E_FORMAT, "unknown type name in 'to'");
        }
    }
    ox_attr_ignore(c, "saturate"); /* float8 only */
    if (!ox_dtype_known((int)to)) return ox_unsup(c, "cast to %s", mn_onnx_dtype_name((int)to));
    if (!ox_dtype_known(dt_in)) return ox_unsup(c, "cast from %s", mn_onnx_dtype_name(dt_in));
    if (ox_in_known(c, 0)) {
        const ox_host *x;
        OX_CHECK(ox_in_host(c, 0, &x));
        ox_host y;
        char sub[128];
        mn_status st = ox_host_alloc(&y, (int)to, x->rank, x->dims, sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        for (int64_t e = 0; e < y.numel; e++) {
            if (x->i) ox_host_set_i(&y, e, x->i[e]);
            else ox_host_set_f(&y, e, x->f[e]);
        }
        return ox_set_out_host(c, 0, &y);
    }
    mn_tensor t;
    if (ox_dtype_float((int)to)) {
        /* float <-> float is the identity inside the graph (f32 compute);
         * integers and bools become f32 numbers */
        OX_CHECK(ox_in_f32_cast(c, 0, &t));
        return ox_set_out(c, 0, t, (int)to);
    }
    if (to == MN_ONNX_BOOL && dt_in == MN_ONNX_BOOL) {
        OX_CHECK(ox_in_f32(c, 0, &t));
        return ox_set_out(c, 0, t, (int)to);
    }
    if (ox_dtype_int((int)to) && ox_dtype_int(dt_in) && to != MN_ONNX_BOOL && dt_in != MN_ONNX_BOOL &&
        ox_in(c, 0)->kind != OXV_TENSOR) {
        /* indices stay indices (int32 <-> int64) */
        OX_CHECK(ox_in_ids(c, 0, &t));
        return ox_set_out_ids(c, 0, t, (int)to);
    }
    return ox_unsup(c, "cast from %s to %s at run time", mn_onnx_dtype_name(dt_in), mn_onnx_dtype_name((int)to));
}

/* ---- MatMul, Gemm ----------------------------------------------------------------- */

static mn_status host_matmul(ox_ctx *c, const ox_host *a, const ox_host *b, ox_host *y) {
    /* numpy matmul on host constants (rank 1 promoted, batch dims broadcast) */
    int ra = a->rank, rb = b->rank;
    if (ra < 1 || rb < 1) return ox_fail(c, MN_E_SHAPE, "MatMul of a scalar");
    int64_t ad[OX_MAX_RANK + 1], bd[OX_MAX_RANK + 1];
    int ar = ra, br = rb;
    for (int i = 0; i < ra; i++) ad[i] = a->dims[i];
    for (int i = 0; i < rb; i++) bd[i] = b->dims[i];
    if (ra == 1) { ad[1] = ad[0]; ad[0] = 1; ar = 2; }
    if (rb == 1) { bd[1] = 1; br = 2; }
    int64_t M = ad[ar - 2], K = ad[ar - 1], K2 = bd[br - 2], N = bd[br - 1];
    if (K != K2) return ox_fail(c, MN_E_SHAPE, "MatMul: inner dimensions %lld and %lld", (long long)K, (long long)K2);
    int r;
    int64_t bat[OX_MAX_RANK];
    if (!ox_broadcast_dims(&r, bat, ar - 2, ad, br - 2, bd)) return ox_fail(c, MN_E_SHAPE, "MatMul: batch dims");
    int64_t od[OX_MAX_RANK + 2];
    int orank = 0;
    for (int i = 0; i < r; i++) od[orank++] = bat[i];
    if (ra != 1) od[orank++] = M;
    if (rb != 1) od[orank++] = N;
    if (orank > OX_MAX_RANK) return ox_unsup(c, "rank");
    char sub[128];
    mn_status st = ox_host_alloc(y, a->dtype, orank, od, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    int64_t nb = 1;
    for (int i = 0; i < r; i++) nb *= bat[i];
    for (int64_t bi = 0; bi < nb; bi++) {
        int64_t oa = ox_bc_index(r, bat, bi, ar - 2, ad), ob = ox_bc_index(r, bat, bi, br - 2, bd);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                int64_t si = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t ea = (oa * M + i) * K + k, eb = (ob * K + k) * N + j;
                    if (a->i && b->i) si = (int64_t)((uint64_t)si + (uint64_t)a->i[ea] * (uint64_t)b->i[eb]);
                    else s += ox_host_get_f(a, ea) * ox_host_get_f(b, eb);
                }
                int64_t e = (bi * M + i) * N + j;
                if (y->i) ox_host_set_i(y, e, si);
                else ox_host_set_f(y, e, s);
            }
    }
    return MN_OK;
}

/* numpy matmul of graph tensors of rank 1..4 */
static mn_status rt_matmul(ox_ctx *c, mn_tensor a, mn_tensor b, mn_tensor *y) {
    mn_graph *g = c->g;
    int ra, rb;
    int64_t ad[MN_MAX_RANK], bd[MN_MAX_RANK];
    OX_CHECK(ox_shape(c, a, &ra, ad));
    OX_CHECK(ox_shape(c, b, &rb, bd));
    if (ra < 1 || rb < 1) return ox_fail(c, MN_E_SHAPE, "MatMul of a scalar");
    bool va = ra == 1, vb = rb == 1;
    if (va) {
        int64_t d[2] = {1, ad[0]};
        OX_CHECK(ox_reshape(c, &a, a, 2, d));
        ra = 2;
        ad[1] = ad[0];
        ad[0] = 1;
    }
    if (vb) {
        int64_t d[2] = {bd[0], 1};
        OX_CHECK(ox_reshape(c, &b, b, 2, d));
        rb = 2;
        bd[1] = 1;
    }
    int64_t M = ad[ra - 2], K = ad[ra - 1], N = bd[rb - 1];
    if (bd[rb - 2] != K)
        return ox_fail(c, MN_E_SHAPE, "inner dimensions %lld and %lld differ", (long long)K, (long long)bd[rb - 2]);
    int r;
    int64_t bat[MN_MAX_RANK];
    if (!ox_broadcast_dims(&r, bat, ra - 2, ad, rb - 2, bd)) return ox_fail(c, MN_E_SHAPE, "batch dimensions do not broadcast");
    int64_t nb = 1;
    for (int i = 0; i < r; i++) nb *= bat[i];
    mn_tensor p;
    if (rb == 2) {
        /* [..., M, K] @ [K, N]: fold the batch into the rows */
        int64_t d2[2] = {nb * M, K};
        OX_CHECK(ox_reshape(c, &a, a, 2, d2));
        OX_TRY(c, mn_matmul(g, &p, a, b));
    } else {
        /* batch of b: broadcast both to the full batch (a rank-2 a is shared) */
        int64_t full[MN_MAX_RANK];
        bool a_full = ra - 2 == r, b_full = rb - 2 == r;
        for (int i = 0; a_full && i < r; i++) a_full = ad[i] == bat[i];
        for (int i = 0; b_full && i < r; i++) b_full = bd[i] == bat[i];
        if (!b_full) {
            for (int i = 0; i < r; i++) full[i] = bat[i];
            full[r] = K;
            full[r + 1] = N;
            if (r + 2 > MN_MAX_RANK) return ox_unsup(c, "batch of rank %d", r);
            OX_TRY(c, mn_broadcast_to(g, &b, b, r + 2, full));
        }
        int64_t b3[3] = {nb, K, N};
        OX_CHECK(ox_reshape(c, &b, b, 3, b3));
        if (ra == 2) {
            OX_TRY(c, mn_matmul(g, &p, a, b));
        } else {
            if (!a_full) {
                for (int i = 0; i < r; i++) full[i] = bat[i];
                full[r] = M;
                full[r + 1] = K;
                OX_TRY(c, mn_broadcast_to(g, &a, a, r + 2, full));
            }
            int64_t a3[3] = {nb, M, K};
            OX_CHECK(ox_reshape(c, &a, a, 3, a3));
            OX_TRY(c, mn_matmul(g, &p, a, b));
        }
    }
    int64_t od[MN_MAX_RANK + 2];
    int orank = 0;
    for (int i = 0; i < r; i++) od[orank++] = bat[i];
    if (!va) od[orank++] = M;
    if (!vb) od[orank++] = N;
    return ox_reshape(c, y, p, orank, od);
}

static mn_status op_matmul(ox_ctx *c) {
    if (ox_all_known(c)) {
        const ox_host *a, *b;
        OX_CHECK(ox_in_host(c, 0, &a));
        OX_CHECK(ox_in_host(c, 1, &b));
        ox_host y;
        OX_CHECK(host_matmul(c, a, b, &y));
        return ox_set_out_host(c, 0, &y);
    }
    int dt = ox_in_dtype(c, 0);
    if (!ox_dtype_float(dt)) return ox_unsup(c, "%s MatMul at run time (float only)", mn_onnx_dtype_name(dt));
    mn_tensor a, b, y;
    OX_CHECK(ox_in_f32(c, 0, &a));
    OX_CHECK(ox_in_f32(c, 1, &b));
    OX_CHECK(rt_matmul(c, a, b, &y));
    return ox_set_out(c, 0, y, dt);
}

static mn_status op_gemm(ox_ctx *c) {
    float alpha, beta;
    int64_t ta, tb;
    OX_CHECK(ox_attr_float(c, "alpha", 1.0f, &alpha));
    OX_CHECK(ox_attr_float(c, "beta", 1.0f, &beta));
    OX_CHECK(ox_attr_int(c, "transA", 0, &ta));
    OX_CHECK(ox_attr_int(c, "transB", 0, &tb));
    if (c->ver < 7) ox_attr_ignore(c, "broadcast");
    int dt = ox_in_dtype(c, 0);
    if (!ox_dtype_float(dt)) return ox_unsup(c, "%s Gemm (float only)", mn_onnx_dtype_name(dt));
    if (ox_in_rank(c, 0) != 2 || ox_in_rank(c, 1) != 2) return ox_fail(c, MN_E_SHAPE, "A and B must be 2-D");
    mn_tensor a, b, p, y;
    OX_CHECK(ox_in_f32(c, 0, &a));
    OX_CHECK(ox_in_f32(c, 1, &b));
    OX_TRY(c, mn_matmul_ex(c->g, &p, a, b, ta != 0, tb != 0));
    if (alpha != 1.0f) OX_TRY(c, mn_scale(c->g, &p, p, alpha));
    y = p;
    if (ox_has_in(c, 2) && beta != 0.0f) {
        mn_tensor cc;
        OX_CHECK(ox_in_f32(c, 2, &cc));
        if (beta != 1.0f) OX_TRY(c, mn_scale(c->g, &cc, cc, beta));
        OX_TRY(c, mn_add(c->g, &y, p, cc));
    }
    return ox_set_out(c, 0, y, dt);
}

/* ---- Softmax, LogSoftmax, Hardmax --------------------------------------------------------- */

static mn_status rt_hardmax2d(ox_ctx *c, mn_tensor x, int64_t rows, int64_t n, mn_tensor *y);

static mn_status op_softmax(ox_ctx *c) {
    bool logsm = is(c, "LogSoftmax"), hard = is(c, "Hardmax");
    int rank = ox_in_rank(c, 0), dt = ox_in_dtype(c, 0);
    int64_t axis_attr;
    OX_CHECK(ox_attr_int(c, "axis", c->ver < 13 ? 1 : -1, &axis_attr));
    int axis;
    OX_CHECK(ox_axis(c, axis_attr, rank, "axis", &axis));
    if (!ox_dtype_float(dt)) return ox_unsup(c, "%s input (float only)", mn_onnx_dtype_name(dt));
    mn_tensor x, y;
    OX_CHECK(ox_in_f32(c, 0, &x));
    const int64_t *d = ox_in_dims(c, 0);
    if (rank == 0) return ox_fail(c, MN_E_SHAPE, "a scalar input");
    if (c->ver < 13) {
        /* coerced to 2-D [prod(dims < axis), prod(dims >= axis)] */
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < rank; i++) *(i < axis ? &outer : &inner) *= d[i];
        int64_t d2[2] = {outer, inner};
        mn_tensor x2, y2;
        OX_CHECK(ox_reshape(c, &x2, x, 2, d2));
        if (hard) OX_CHECK(rt_hardmax2d(c, x2, outer, inner, &y2));
        else if (logsm) OX_TRY(c, mn_log_softmax(c->g, &y2, x2));
        else OX_TRY(c, mn_softmax(c->g, &y2, x2));
        OX_CHECK(ox_reshape(c, &y, y2, rank, d));
        return ox_set_out(c, 0, y, dt);
    }
    if (axis == rank - 1 && !hard) {
        if (logsm) OX_TRY(c, mn_log_softmax(c->g, &y, x));
        else OX_TRY(c, mn_softmax(c->g, &y, x));
        return ox_set_out(c, 0, y, dt);
    }
    /* axis moved last: [pre, n, post] -> [pre, post, n] */
    int64_t pre = 1, post = 1;
    for (int i = 0; i < axis; i++) pre *= d[i];
    for (int i = axis + 1; i < rank; i++) post *= d[i];
    int64_t d3[3] = {pre, d[axis], post};
    mn_tensor x3, xt, yt, y3;
    OX_CHECK(ox_reshape(c, &x3, x, 3, d3));
    if (post == 1) xt = x3;
    else OX_TRY(c, mn_transpose(c->g, &xt, x3, 1, 2));
    if (hard) {
        int64_t n = d[axis], rows = pre * post;
        int64_t h2[2] = {rows, n};
        mn_tensor x2, h;
        OX_CHECK(ox_reshape(c, &x2, xt, 2, h2));
        OX_CHECK(rt_hardmax2d(c, x2, rows, n, &h));
        int64_t b3[3] = {pre, post, n};
        OX_CHECK(ox_reshape(c, &yt, h, 3, b3));
    } else if (logsm) OX_TRY(c, mn_log_softmax(c->g, &yt, xt));
    else OX_TRY(c, mn_softmax(c->g, &yt, xt));
    if (post == 1) y3 = yt;
    else OX_TRY(c, mn_transpose(c->g, &y3, yt, 1, 2));
    OX_CHECK(ox_reshape(c, &y, y3, rank, d));
    return ox_set_out(c, 0, y, dt);
}

/* ---- reductions ------------------------------------------------------------------- */

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_SUMSQ } reduce_kind;

static const struct { const char *name; reduce_kind k; } reduce_names[] = {
    {"ReduceSum", R_SUM}, {"ReduceMean", R_MEAN}, {"ReduceMax", R_MAX}, {"ReduceMin", R_MIN},
    {"ReduceProd", R_PROD}, {"ReduceL1", R_L1}, {"ReduceL2", R_L2}, {"ReduceLogSum", R_LOGSUM},
    {"ReduceLogSumExp", R_LOGSUMEXP}, {"ReduceSumSquare", R_SUMSQ},
};

/* reduce over the axes where mask is set, keeping them as size 1 */
static mn_status rt_reduce_keep(ox_ctx *c, reduce_kind k, mn_tensor x, int rank, const int64_t *d, const bool *mask,
                                mn_tensor *y) {
    mn_graph *g = c->g;
    int nred = 0;
    int64_t rsize = 1;
    for (int i = 0; i < rank; i++)
        if (mask[i]) {
            nred++;
            rsize *= d[i];
        }
    mn_tensor t = x;
    /* the summand */
    if (k == R_L1) OX_TRY(c, mn_abs(g, &t, x));
    if (k == R_L2 || k == R_SUMSQ) OX_TRY(c, mn_mul(g, &t, x, x));
    mn_tensor shift = MN_NONE;
    if (k == R_LOGSUMEXP) {
        /* log(sum(exp(x - m))) + m, m the max (stable); m carries no gradient
         * of its own (its effect cancels exactly) */
        OX_CHECK(rt_reduce_keep(c, R_MAX, x, rank, d, mask, &shift));
        mn_tensor sg, xs;
        OX_TRY(c, mn_stop_gradient(g, &sg, shift));
        shift = sg;
        OX_TRY(c, mn_sub(g, &xs, x, shift));
        OX_TRY(c, mn_exp(g, &t, xs));
    }
    bool neg = k == R_MIN;
    if (neg) OX_TRY(c, mn_neg(g, &t, t));
    int op = (k == R_MAX || k == R_MIN) ? 2 : k == R_MEAN ? 1 : 0;
    mn_tensor r;
    if (nred == rank) {
        if (op == 2) OX_TRY(c, mn_max(g, &r, t, MN_ALL_AXES, false));
        else if (op == 1) OX_TRY(c, mn_mean(g, &r, t, MN_ALL_AXES, false));
        else OX_TRY(c, mn_sum(g, &r, t, MN_ALL_AXES, false));
    } else {
        /* move the reduced axes last (a permute unless they already are), one
         * reduction over their product */
        int perm[MN_MAX_RANK], n = 0;
        int64_t pd[MN_MAX_RANK];
        for (int i = 0; i < rank; i++)
            if (!mask[i]) perm[n++] = i;
        for (int i = 0; i < rank; i++)
            if (mask[i]) perm[n++] = i;
        bool ident = true;
        for (int i = 0; i < rank; i++) ident = ident && perm[i] == i;
        mn_tensor p = t;
        if (!ident) OX_TRY(c, mn_permute(g, &p, t, perm));
        int kept = rank - nred;
        for (int i = 0; i < kept; i++) pd[i] = d[perm[i]];
        pd[kept] = rsize;
        mn_tensor f;
        OX_CHECK(ox_reshape(c, &f, p, kept + 1, pd));
        if (op == 2) OX_TRY(c, mn_max(g, &r, f, kept, false));
        else if (op == 1) OX_TRY(c, mn_mean(g, &r, f, kept, false));
        else OX_TRY(c, mn_sum(g, &r, f, kept, false));
    }
    if (neg) OX_TRY(c, mn_neg(g, &r, r));
    if (k == R_L2) OX_TRY(c, mn_sqrt(g, &r, r));
    if (k == R_LOGSUM || k == R_LOGSUMEXP) OX_TRY(c, mn_log(g, &r, r));
    int64_t kd[MN_MAX_RANK];
    for (int i = 0; i < rank; i++) kd[i] = mask[i] ? 1 : d[i];
    OX_CHECK(ox_reshape(c, &r, r, rank, kd));
    if (k == R_LOGSUMEXP) OX_TRY(c, mn_add(g, &r, r, shift));
    *y = r;
    return MN_OK;
}

static mn_status op_reduce(ox_ctx *c) {
    reduce_kind k = R_SUM;
    for (size_t i = 0; i < sizeof reduce_names / sizeof *reduce_names; i++)
        if (is(c, reduce_names[i].name)) k = reduce_names[i].k;
    int rank = ox_in_rank(c, 0), dt = ox_in_dtype(c, 0);
    const int64_t *d = ox_in_dims(c, 0);
    int64_t keep, noop = 0;
    OX_CHECK(ox_attr_int(c, "keepdims", 1, &keep));
    bool axes_input = (k == R_SUM && c->ver >= 13) || c->ver >= 18;
    if (axes_input) OX_CHECK(ox_attr_int(c, "noop_with_empty_axes", 0, &noop));
    int64_t axes[OX_MAX_RANK];
    int na = -1;
    if (axes_input) {
        if (ox_has_in(c, 1)) {
            const ox_host *h;
            OX_CHECK(ox_in_host(c, 1, &h));
            if (h->numel > OX_MAX_RANK) return ox_fail(c, MN_E_SHAPE, "%lld axes", (long long)h->numel);
            na = (int)h->numel;
            for (int i = 0; i < na; i++) axes[i] = ox_host_get_i(h, i);
        }
    } else OX_CHECK(ox_attr_ints(c, "axes", axes, OX_MAX_RANK, &na));
    bool mask[OX_MAX_RANK] = {false};
    if (na <= 0) {
        if (noop && na == 0) na = 0;
        if (noop) {
            /* identity */
            if (ox_in_known(c, 0)) {
                const ox_host *x;
                OX_CHECK(ox_in_host(c, 0, &x));
                ox_host y;
                char sub[128];
                mn_status st = ox_host_copy(&y, x, sub, sizeof sub);
                if (st) return ox_fail(c, st, "%s", sub);
                return ox_set_out_host(c, 0, &y);
            }
            mn_tensor x;
            OX_CHECK(ox_in_f32(c, 0, &x));
            return ox_set_out(c, 0, x, dt);
        }
        for (int i = 0; i < rank; i++) mask[i] = true;
    } else
        for (int i = 0; i < na; i++) {
            int a;
            OX_CHECK(ox_axis(c, axes[i], rank, "axis", &a));
            if (mask[a]) return ox_fail(c, MN_E_INVALID, "axis %d given twice", a);
            mask[a] = true;
        }
    int64_t od[OX_MAX_RANK];
    int orank = 0;
    for (int i = 0; i < rank; i++)
        if (!mask[i]) od[orank++] = d[i];
        else if (keep) od[orank++] = 1;
    if (ox_in_known(c, 0)) {
        const ox_host *x;
        OX_CHECK(ox_in_host(c, 0, &x));
        int64_t kd[OX_MAX_RANK];
        for (int i = 0; i < rank; i++) kd[i] = mask[i] ? 1 : d[i];
        ox_host y;
        char sub[128];
        mn_status st = ox_host_alloc(&y, dt, orank, od, sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        int64_t ny = y.numel;
        double *acc = calloc((size_t)(ny ? ny : 1), sizeof *acc);
        double *mx = calloc((size_t)(ny ? ny : 1), sizeof *mx);
        int64_t *cnt = calloc((size_t)(ny ? ny : 1), sizeof *cnt);
        if (!acc || !mx || !cnt) {
            free(acc);
            free(mx);
            free(cnt);
            ox_host_free(&y);
            return ox_fail(c, MN_E_NOMEM, "out of memory");
        }
        int64_t co[OX_MAX_RANK];
        for (int64_t e = 0; e < x->numel; e++) {
            ox_coords(rank, d, e, co);
            for (int i = 0; i < rank; i++)
                if (mask[i]) co[i] = 0;
            int64_t o = ox_linear(rank, kd, co);
            double v = ox_host_get_f(x, e);
            if (cnt[o] == 0) {
                mx[o] = v;
                acc[o] = k == R_PROD ? 1 : 0;
            }
            cnt[o]++;
            if ((k == R_MAX && (v > mx[o] || v != v)) || (k == R_MIN && (v < mx[o] || v != v))) mx[o] = v;
            switch (k) {
            case R_PROD: acc[o] *= v; break;
            case R_L1: acc[o] += fabs(v); break;
            case R_L2:
            case R_SUMSQ: acc[o] += v * v; break;
            default: acc[o] += v; break;
            }
        }
        if (k == R_LOGSUMEXP) {
            memset(acc, 0, (size_t)ny * sizeof *acc);
            for (int64_t e = 0; e < x->numel; e++) {
                ox_coords(rank, d, e, co);
                for (int i = 0; i < rank; i++)
                    if (mask[i]) co[i] = 0;
                int64_t o = ox_linear(rank, kd, co);
                acc[o] += exp(ox_host_get_f(x, e) - mx[o]);
            }
        }
        for (int64_t o = 0; o < ny; o++) {
            double r;
            switch (k) {
            case R_MEAN: r = acc[o] / (double)cnt[o]; break;
            case R_MAX:
            case R_MIN: r = cnt[o] ? mx[o] : (k == R_MAX ? -INFINITY : INFINITY); break;
            case R_L2: r = sqrt(acc[o]); break;
            case R_LOGSUM: r = log(acc[o]); break;
            case R_LOGSUMEXP: r = log(acc[o]) + mx[o]; break;
            default: r = acc[o]; break;
            }
            if (y.i && (k == R_SUM || k == R_PROD || k == R_SUMSQ || k == R_L1 || k == R_MAX || k == R_MIN)) {
                /* integer reductions exactly */
                int64_t s = k == R_PROD ? 1 : 0;
                bool first = true;
                for (int64_t e = 0; e < x->numel; e++) {
                    ox_coords(rank, d, e, co);
                    for (int i = 0; i < rank; i++)
                        if (mask[i]) co[i] = 0;
                    if (ox_linear(rank, kd, co) != o) continue;
                    int64_t v = x->i[e];
                    switch (k) {
                    case R_SUM: s = (int64_t)((uint64_t)s + (uint64_t)v); break;
                    case R_PROD: s = (int64_t)((uint64_t)s * (uint64_t)v); break;
                    case R_SUMSQ: s = (int64_t)((uint64_t)s + (uint64_t)v * (uint64_t)v); break;
                    case R_L1: s = (int64_t)((uint64_t)s + (v < 0 ? 0 - (uint64_t)v : (uint64_t)v)); break;
                    case R_MAX: s = first || v > s ? v : s; break;
                    default: s = first || v < s ? v : s; break;
                    }
                    first = false;
                }
                ox_host_set_i(&y, o, s);
            } else ox_host_set_f(&y, o, r);
        }
        free(acc);
        free(mx);
        free(cnt);
        return ox_set_out_host(c, 0, &y);
    }
    if (!ox_dtype_float(dt)) return ox_unsup(c, "%s input at run time (float only)", mn_onnx_dtype_name(dt));
    if (k == R_PROD) return ox_unsup(c, "ReduceProd at run time");
    mn_tensor x, y;
    OX_CHECK(ox_in_f32(c, 0, &x));
    if (rank == 0) return ox_set_out(c, 0, x, dt);
    OX_CHECK(rt_reduce_keep(c, k, x, rank, d, mask, &y));
    OX_CHECK(ox_reshape(c, &y, y, orank, od));
    return ox_set_out(c, 0, y, dt);
}

/* ---- ArgMax/ArgMin, Hardmax ----------------------------------------------------- */

/* Index of the max (argmin: of -x) along axis as f32, keepdim shape: the
 * positions equal to the max (where(relu(m - x), 0, 1), right for
 * infinities too; a NaN max is found at the NaNs), the first (or last) of
 * them by a max over where(equal, -k, -inf) (or where(equal, k, -inf)). */
static mn_status rt_argmax(ox_ctx *c, mn_tensor x, int rank, const int64_t *d, int axis, bool argmin, bool last,
                           mn_tensor *y) {
    mn_graph *g = c->g;
    mn_tensor t = x, m, diff, r, one, zero, eq, k, ninf, cand;
    if (argmin) OX_TRY(c, mn_neg(g, &t, x));
    OX_TRY(c, mn_max(g, &m, t, axis, true));
    OX_TRY(c, mn_sub(g, &diff, m, t));
    OX_TRY(c, mn_relu(g, &r, diff));
    OX_CHECK(cmp_consts(c, &one, &zero));
    OX_TRY(c, mn_where(g, &eq, r, zero, one));
    /* a NaN maximum (NaN wins) is found at the NaNs only: eq - isnan(m) (1 - isnan(x)) */
    mn_tensor nm, nx, notx, fix;
    OX_CHECK(rt_isnan(c, m, &nm));
    OX_CHECK(rt_isnan(c, t, &nx));
    OX_TRY(c, mn_sub(g, &notx, one, nx));
    OX_TRY(c, mn_mul(g, &fix, nm, notx));
    OX_TRY(c, mn_sub(g, &eq, eq, fix));
    ox_host kh;
    int64_t kd[MN_MAX_RANK];
    for (int i = 0; i < rank; i++) kd[i] = i == axis ? d[i] : 1;
    char sub[128];
    mn_status st = ox_host_alloc(&kh, MN_ONNX_FLOAT, rank, kd, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    for (int64_t i = 0; i < d[axis]; i++) kh.f[i] = last ? (double)i : -(double)i;
    st = ox_const_tensor(c, &kh, &k);
    ox_host_free(&kh);
    if (st) return st;
    OX_CHECK(ox_scalar(c, -INFINITY, &ninf));
    OX_TRY(c, mn_where(g, &cand, eq, k, ninf));
    OX_TRY(c, mn_max(g, y, cand, axis, true));
    if (!last) OX_TRY(c, mn_neg(g, y, *y));
    return MN_OK;
}

/* one-hot of the first max along the last axis of a [rows, n] tensor */
static mn_status rt_hardmax2d(ox_ctx *c, mn_tensor x, int64_t rows, int64_t n, mn_tensor *y) {
    int64_t d[2] = {rows, n};
    mn_tensor am, k, d1, d2, r1, r2, mag, one, zero;
    OX_CHECK(rt_argmax(c, x, 2, d, 1, false, false, &am));
    ox_host kh;
    int64_t kd[2] = {1, n};
    char sub[128];
    mn_status st = ox_host_alloc(&kh, MN_ONNX_FLOAT, 2, kd, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    for (int64_t i = 0; i < n; i++) kh.f[i] = (double)i;
    st = ox_const_tensor(c, &kh, &k);
    ox_host_free(&kh);
    if (st) return st;
    OX_TRY(c, mn_sub(c->g, &d1, k, am));
    OX_TRY(c, mn_sub(c->g, &d2, am, k));
    OX_TRY(c, mn_relu(c->g, &r1, d1));
    OX_TRY(c, mn_relu(c->g, &r2, d2));
    OX_TRY(c, mn_add(c->g, &mag, r1, r2));
    OX_CHECK(cmp_consts(c, &one, &zero));
    OX_TRY(c, mn_where(c->g, y, mag, zero, one));
    return MN_OK;
}


static mn_status op_argmax(ox_ctx *c) {
    bool mn = is(c, "ArgMin");
    int64_t axis_a, keep, last;
    OX_CHECK(ox_attr_int(c, "axis", 0, &axis_a));
    OX_CHECK(ox_attr_int(c, "keepdims", 1, &keep));
    OX_CHECK(ox_attr_int(c, "select_last_index", 0, &last));
    if (!ox_in_known(c, 0)) {
        ox_value *v = ox_in(c, 0);
        int axis;
        OX_CHECK(ox_axis(c, axis_a, v->rank, "axis", &axis));
        if (!ox_dtype_float(v->dtype)) return ox_unsup(c, "%s input at run time (float only)", mn_onnx_dtype_name(v->dtype));
        mn_tensor x, idx;
        OX_CHECK(ox_in_f32(c, 0, &x));
        OX_CHECK(rt_argmax(c, x, v->rank, v->dims, axis, mn, last != 0, &idx));
        int64_t od[OX_MAX_RANK];
        int orank = 0;
        for (int i = 0; i < v->rank; i++)
            if (i != axis || keep) od[orank++] = i == axis ? 1 : v->dims[i];
        OX_CHECK(ox_reshape(c, &idx, idx, orank, od));
        return ox_set_out(c, 0, idx, MN_ONNX_INT64); /* small integers held as f32 */
    }
    const ox_host *x;
    OX_CHECK(ox_in_host(c, 0, &x));
    int axis;
    OX_CHECK(ox_axis(c, axis_a, x->rank, "axis", &axis));
    int64_t od[OX_MAX_RANK], kd[OX_MAX_RANK];
    int orank = 0;
    for (int i = 0; i < x->rank; i++) {
        kd[i] = i == axis ? 1 : x->dims[i];
        if (i != axis || keep) od[orank++] = kd[i];
    }
    ox_host y;
    char sub[128];
    mn_status st = ox_host_alloc(&y, MN_ONNX_INT64, orank, od, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    int64_t co[OX_MAX_RANK];
    for (int64_t o = 0; o < y.numel; o++) {
        ox_coords(x->rank, kd, o, co);
        int64_t best = 0;
        double bv = 0;
        for (int64_t j = 0; j < x->dims[axis]; j++) {
            co[axis] = j;
            double v = ox_host_get_f(x, ox_linear(x->rank, x->dims, co));
            if (j == 0 || (mn ? (v < bv || (last && v == bv)) : (v > bv || (last && v == bv)))) {
                bv = v;
                best = j;
            }
        }
        y.i[o] = best;
    }
    return ox_set_out_host(c, 0, &y);
}

const ox_op ox_ops_math[] = {
    {"Abs", 1, 1, 1, 1, 1, op_unary},         {"Neg", 1, 1, 1, 1, 1, op_unary},
    {"Exp", 1, 1, 1, 1, 1, op_unary},         {"Log", 1, 1, 1, 1, 1, op_unary},
    {"Sqrt", 1, 1, 1, 1, 1, op_unary},        {"Reciprocal", 1, 1, 1, 1, 1, op_unary},
    {"Relu", 1, 1, 1, 1, 1, op_unary},        {"Sigmoid", 1, 1, 1, 1, 1, op_unary},
    {"Tanh", 1, 1, 1, 1, 1, op_unary},        {"Softplus", 1, 1, 1, 1, 1, op_unary},
    {"Softsign", 1, 1, 1, 1, 1, op_unary},    {"Elu", 1, 1, 1, 1, 1, op_unary},
    {"Selu", 1, 1, 1, 1, 1, op_unary},        {"Celu", 12, 1, 1, 1, 1, op_unary},
    {"LeakyRelu", 1, 1, 1, 1, 1, op_unary},   {"HardSigmoid", 1, 1, 1, 1, 1, op_unary},
    {"HardSwish", 14, 1, 1, 1, 1, op_unary},  {"Mish", 18, 1, 1, 1, 1, op_unary},
    {"ThresholdedRelu", 10, 1, 1, 1, 1, op_unary}, {"Erf", 9, 1, 1, 1, 1, op_unary},
    {"Floor", 1, 1, 1, 1, 1, op_unary},       {"Ceil", 1, 1, 1, 1, 1, op_unary},
    {"Round", 11, 1, 1, 1, 1, op_unary},      {"Sign", 9, 1, 1, 1, 1, op_unary},
    {"Sin", 7, 1, 1, 1, 1, op_unary},         {"Cos", 7, 1, 1, 1, 1, op_unary},
    {"Tan", 7, 1, 1, 1, 1, op_unary},         {"Asin", 7, 1, 1, 1, 1, op_unary},
    {"Acos", 7, 1, 1, 1, 1, op_unary},        {"Atan", 7, 1, 1, 1, 1, op_unary},
    {"Sinh", 9, 1, 1, 1, 1, op_unary},        {"Cosh", 9, 1, 1, 1, 1, op_unary},
    {"Asinh", 9, 1, 1, 1, 1, op_unary},       {"Acosh", 9, 1, 1, 1, 1, op_unary},
    {"Atanh", 9, 1, 1, 1, 1, op_unary},       {"Not", 1, 1, 1, 1, 1, op_unary},
    {"IsNaN", 9, 1, 1, 1, 1, op_unary},       {"IsInf", 10, 1, 1, 1, 1, op_unary},
    {"Gelu", 20, 1, 1, 1, 1, op_unary},       {"Shrink", 9, 1, 1, 1, 1, op_unary},
    {"Identity", 1, 1, 1, 1, 1, op_identity},
    {"Add", 1, 2, 2, 1, 1, op_binary},        {"Sub", 1, 2, 2, 1, 1, op_binary},
    {"Mul", 1, 2, 2, 1, 1, op_binary},        {"Div", 1, 2, 2, 1, 1, op_binary},
    {"Pow", 1, 2, 2, 1, 1, op_binary},        {"Mod", 10, 2, 2, 1, 1, op_binary},
    {"Equal", 1, 2, 2, 1, 1, op_binary},      {"Less", 1, 2, 2, 1, 1, op_binary},
    {"Greater", 1, 2, 2, 1, 1, op_binary},    {"LessOrEqual", 12, 2, 2, 1, 1, op_binary},
    {"GreaterOrEqual", 12, 2, 2, 1, 1, op_binary}, {"And", 1, 2, 2, 1, 1, op_binary},
    {"Or", 1, 2, 2, 1, 1, op_binary},         {"Xor", 1, 2, 2, 1, 1, op_binary},
    {"BitShift", 11, 2, 2, 1, 1, op_binary},  {"PRelu", 1, 2, 2, 1, 1, op_binary},
    {"Max", 1, 1, 64, 1, 1, op_binary},       {"Min", 1, 1, 64, 1, 1, op_binary},
    {"Sum", 1, 1, 64, 1, 1, op_binary},       {"Mean", 1, 1, 64, 1, 1, op_binary},
    {"Where", 9, 3, 3, 1, 1, op_where},       {"Clip", 1, 1, 3, 1, 1, op_clip},
    {"Cast", 1, 1, 1, 1, 1, op_cast},         {"CastLike", 15, 2, 2, 1, 1, op_cast},
    {"MatMul", 1, 2, 2, 1, 1, op_matmul},     {"Gemm", 1, 2, 3, 1, 1, op_gemm},
    {"Softmax", 1, 1, 1, 1, 1, op_softmax},   {"LogSoftmax", 1, 1, 1, 1, 1, op_softmax},
    {"Hardmax", 1, 1, 1, 1, 1, op_softmax},
    {"ReduceSum", 1, 1, 2, 1, 1, op_reduce},  {"ReduceMean", 1, 1, 2, 1, 1, op_reduce},
    {"ReduceMax", 1, 1, 2, 1, 1, op_reduce},  {"ReduceMin", 1, 1, 2, 1, 1, op_reduce},
    {"ReduceProd", 1, 1, 2, 1, 1, op_reduce}, {"ReduceL1", 1, 1, 2, 1, 1, op_reduce},
    {"ReduceL2", 1, 1, 2, 1, 1, op_reduce},   {"ReduceLogSum", 1, 1, 2, 1, 1, op_reduce},
    {"ReduceLogSumExp", 1, 1, 2, 1, 1, op_reduce}, {"ReduceSumSquare", 1, 1, 2, 1, 1, op_reduce},
    {"ArgMax", 1, 1, 1, 1, 1, op_argmax},     {"ArgMin", 1, 1, 1, 1, 1, op_argmax},
    {NULL, 0, 0, 0, 0, 0, NULL},
};
