/* vk_gen_pointwise_param.c - Vulkan generators of the parameterised pointwise
 * ops: abs, clamp, pow, where, dropout, pw_bwd (template eltwise.glsl,
 * the eltwise contract: one invocation per output element with broadcast
 * offsets) and ce_count (template ce_count.glsl, one workgroup).
 *
 * Every expression mirrors the CPU kernel of backend/cpu/kernels_pointwise.h:
 * parameters become f32 literals rounded as the CPU rounds them; the dropout
 * key and threshold are computed here with graph/pointwise.h, so the mask is
 * the CPU's bit for bit.
 *
 * Does not: generate cross_entropy's options (vk_gen_pointwise.c's gen_rows
 * does), compile or run anything.
 */
#include "backend/vulkan/vk_codegen.h"
#include "graph/pointwise.h"

typedef struct pw_lit {
    char s[48];
} pw_lit;
static pw_lit lit(double v) {
    pw_lit r;
    vk_float_literal(r.s, sizeof r.s, (float)v);
    return r;
}

static mn_status pw_fail(const mn_graph *g, const node *n, mn_status st, char *err, size_t cap, const char *what) {
    mn_fmt(err, cap, "vulkan codegen: %s (%%%d): %s", op_table[n->op].name, (int)(n - g->nodes), what);
    return st;
}

static mn_status pw_expr(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, const char *expr,
                         char *err, size_t cap) {
    return vk_gen_bcast_expr(k, g, n, caps, "eltwise", expr, err, cap);
}

mn_status vkgen_abs(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    return pw_expr(k, g, n, caps, "abs(a)", err, cap);
}

mn_status vkgen_clamp(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    char e[256];
    const mn_pw_attrs a = pw_attrs_of(n);
    pw_lit lo = lit(a.min), hi = lit(a.max);
    snprintf(e, sizeof e, "isnan(a) ? a : (a < %s ? %s : (a > %s ? %s : a))", lo.s, lo.s, hi.s, hi.s);
    return pw_expr(k, g, n, caps, e, err, cap);
}

mn_status vkgen_pow(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    char e[128];
    snprintf(e, sizeof e, "mn_pow(a, %s)", lit(pw_attrs_of(n).exponent).s);
    return pw_expr(k, g, n, caps, e, err, cap);
}

mn_status vkgen_where(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    return pw_expr(k, g, n, caps, "(isnan(a) || a != 0.0) ? b : c", err, cap);
}

mn_status vkgen_dropout(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                        size_t cap) {
    const mn_dropout_attrs a = dropout_attrs_of(n);
    const uint64_t seed = a.seed;
    const int64_t thr = a.threshold;
    if (thr < 0 || thr > ((int64_t)1 << 32)) return pw_fail(g, n, MN_E_INVALID, err, cap, "bad drop threshold");
    vk_def(k, "DROP_KEY", "0x%08xu", (unsigned)pw_dropout_key(seed));
    vk_def(k, "DROP_COUNTER", "%d", n->nin > 1 ? 1 : 0);
    vk_def(k, "DROP_ALL", "%d", thr == ((int64_t)1 << 32) ? 1 : 0);
    vk_def(k, "DROP_THR", "%uu", (unsigned)(thr & 0xffffffff));
    vk_def(k, "DROP_SCALE", "%s", lit(pw_dropout_scale(a.p)).s);
    return pw_expr(k, g, n, caps, "pw_keep(i, b) ? a * DROP_SCALE : 0.0", err, cap);
}

/* (x, dy) -> dy * f'(x): a = x, b = dy. */
mn_status vkgen_pw_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                       size_t cap) {
    char e[256];
    const mn_pw_attrs a = pw_attrs_of(n);
    switch (bwd_of(n)) {
    case OP_ABS: snprintf(e, sizeof e, "b * pw_sign(a)"); break;
    case OP_CLAMP: {
        pw_lit lo = lit(a.min), hi = lit(a.max);
        snprintf(e, sizeof e, "(!isnan(a) && a > %s && a < %s) ? b : 0.0", lo.s, hi.s);
        break;
    }
    case OP_POW:
        if ((float)a.exponent == 0.0f) snprintf(e, sizeof e, "0.0");
        else snprintf(e, sizeof e, "b * (%s * mn_pow(a, %s))", lit(a.exponent).s, lit(a.exponent - 1.0).s);
        break;
    default: {
        char what[96];
        snprintf(what, sizeof what, "ip[0] = %lld is not abs, clamp or pow", (long long)bwd_of(n));
        return pw_fail(g, n, MN_E_INVALID, err, cap, what);
    }
    }
    return pw_expr(k, g, n, caps, e, err, cap);
}

mn_status vkgen_ce_count(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                         size_t cap) {
    uint64_t lim = caps->max_invocations ? caps->max_invocations : 256;
    if (lim > 256) lim = 256;
    if (caps->max_shared_bytes && lim > caps->max_shared_bytes / 4) lim = caps->max_shared_bytes / 4;
    uint32_t local = 1;
    while ((uint64_t)local * 2 <= lim) local *= 2;
    k->tmpl = "ce_count";
    vk_def(k, "CE_IGNORE_INDEX", "(%lld)", (long long)ce_attrs_of(n).ignore_index);
    k->local[0] = local;
    k->groups[0] = k->groups[1] = k->groups[2] = 1;
    vk_def(k, "NTHREADS", "%uu", local);
    return MN_OK;
}
