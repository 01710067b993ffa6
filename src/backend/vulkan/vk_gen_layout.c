/* vk_gen_layout.c - Vulkan code generation for the layout family: slice and
 * pad (kernels/pad.glsl), concat (concat.glsl), average pooling and its
 * gradient (avgpool2d.glsl), nearest upsampling (upsample_nearest2d.glsl)
 * and the batch-norm running-statistics update (ema_update.glsl).
 *
 * Every kernel runs one invocation per output element and gathers what it
 * needs (no atomics, no two invocations writing one element). Shapes and
 * parameters become #defines; index arithmetic is signed, 32-bit, or 64-bit
 * when an operand exceeds vk_caps.index_max elements (vk_codegen_node;
 * dimensions are then 64-bit literals, vk_def_i).
 *
 * Does not: compile or dispatch anything, nor generate other ops.
 */
#include <math.h>

#include "backend/vulkan/vk_codegen.h"

static const node *in_node(const mn_graph *g, const node *n, int i) { return &g->nodes[n->in[i]]; }

static mn_status layout_fail(const mn_graph *g, const node *n, mn_status st, char *err, size_t cap, const char *what) {
    mn_fmt(err, cap, "vulkan codegen: %s (%%%d): %s", op_table[n->op].name, (int)(n - g->nodes), what);
    return st;
}

/* One invocation per output element, workgroups of up to 256. */
static void layout_launch(vk_kernel *k, const vk_caps *caps, const node *n) {
    uint32_t most = caps->max_invocations ? caps->max_invocations : 128, local = 1;
    while (local < 256 && local * 2 <= most) local *= 2;
    vk_launch_1d(k, caps, (uint64_t)node_numel(n), local);
}

/* Right-aligned 4-d dims of a node (leading 1s). */
static void dims4(int64_t d[4], const node *t) {
    for (int i = 0; i < 4; i++) d[i] = 1;
    for (int i = 0; i < t->rank; i++) d[4 - t->rank + i] = t->shape[i];
}

/* pad.glsl: y[c] = x[c - pb] inside x, else 0; pb over the right-aligned dims. */
static mn_status gen_pad(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, const int64_t pb[4],
                         char *err, size_t cap) {
    int64_t yd[4], xd[4];
    dims4(yd, n);
    dims4(xd, in_node(g, n, 0));
    k->tmpl = "pad";
    for (int d = 0; d < 4; d++) {
        char nm[8];
        if (d > 0) {
            snprintf(nm, sizeof nm, "YD%d", d);
            vk_def_i(k, nm, yd[d]);
        }
        snprintf(nm, sizeof nm, "XD%d", d);
        vk_def_i(k, nm, xd[d]);
        snprintf(nm, sizeof nm, "PB%d", d);
        vk_def(k, nm, "(%lld%s)", (long long)pb[d], vk_isfx(k));
    }
    layout_launch(k, caps, n);
    return MN_OK;
}

/* x -> the part [start, start + length) of the slice's axis. */
mn_status vkgen_slice(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    int64_t pb[4] = {0, 0, 0, 0};
    const mn_slice_attrs a = slice_attrs_of(n);
    pb[4 - n->rank + a.axis] = -a.start;
    return gen_pad(k, g, n, caps, pb, err, cap);
}

/* before[i] zero cells before axis i (after[i]: implied by the shapes). */
mn_status vkgen_pad(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    int64_t pb[4] = {0, 0, 0, 0};
    const mn_pad_attrs a = pad_attrs_of(n);
    for (int i = 0; i < n->rank; i++) pb[4 - n->rank + i] = a.before[i];
    return gen_pad(k, g, n, caps, pb, err, cap);
}

/* Inputs joined along the concat axis; the output viewed as [outer, L, inner]. */
mn_status vkgen_concat(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    const int64_t axis = concat_axis(n);
    int64_t inner = 1;
    for (int i = (int)axis + 1; i < n->rank; i++) inner *= n->shape[i];
    k->tmpl = "concat";
    vk_def_i(k, "CC_L", n->shape[axis]);
    vk_def_i(k, "CC_INNER", inner);
    /* (a < end0 ? X0((o * L0 + a) * INNER + j) : a < end1 ? X1((o * L1 + (a - off1)) * INNER + j) : ...) */
    char e[1024];
    size_t at = 0;
    int64_t off = 0;
    at += (size_t)snprintf(e + at, sizeof e - at, "(");
    for (int i = 0; i < n->nin && at < sizeof e; i++) {
        const int64_t len = in_node(g, n, i)->shape[axis];
        const char *l = vk_isfx(k);
        if (i + 1 < n->nin)
            at += (size_t)snprintf(e + at, sizeof e - at, "a < %lld%s ? ", (long long)(off + len), l);
        if (at < sizeof e)
            at += (size_t)snprintf(e + at, sizeof e - at, "X%d((o * %lld%s + (a - %lld%s)) * CC_INNER + j)%s", i,
                                   (long long)len, l, (long long)off, l, i + 1 < n->nin ? " : " : ")");
        off += len;
    }
    if (at >= sizeof e) return layout_fail(g, n, MN_E_UNSUPPORTED, err, cap, "index expression too long");
    vk_line(k, "#define CC_VALUE(o, a, j) %s", e);
    layout_launch(k, caps, n);
    return MN_OK;
}

/* avgpool2d.glsl over x [N,C,H,W] (x is the forward input, or the node for
 * the backward) and the pooled plane OH x OW. */
static mn_status gen_avgpool(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, const node *x,
                             int64_t OH, int64_t OW, bool bwd, char *err, size_t cap) {
    const mn_pool_attrs a = pool_attrs_of(n);
    const struct {
        const char *name;
        int64_t v;
    } d[] = {{"AP_H", x->shape[2]},  {"AP_W", x->shape[3]},  {"AP_OH", OH},           {"AP_OW", OW},
             {"AP_KH", a.kernel[0]}, {"AP_KW", a.kernel[1]}, {"AP_SH", a.stride[0]},  {"AP_SW", a.stride[1]},
             {"AP_PH", a.pad[0]},    {"AP_PW", a.pad[1]}};
    for (size_t i = 0; i < MN_ARRAY_LEN(d); i++) vk_def_i(k, d[i].name, d[i].v);
    vk_def(k, "AP_DIV", "%lld", (long long)a.divisor); /* tested by #if: plain literals */
    vk_def(k, "AP_BWD", "%d", bwd);
    /* loop iterations of an invocation: its window, or the windows holding its cell */
    const uint64_t kh = (uint64_t)a.kernel[0], kw = (uint64_t)a.kernel[1];
    const uint64_t sh = a.stride[0] > 0 ? (uint64_t)a.stride[0] : 1, sw = a.stride[1] > 0 ? (uint64_t)a.stride[1] : 1;
    const uint64_t wh = bwd ? (kh + sh - 1) / sh : kh, ww = bwd ? (kw + sw - 1) / sw : kw;
    if (!vk_loops_fit(caps, wh * ww + wh)) return vk_loop_fail(g, n, caps, wh * ww + wh, err, cap);
    k->tmpl = "avgpool2d";
    layout_launch(k, caps, n);
    return MN_OK;
}

mn_status vkgen_avgpool2d(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    return gen_avgpool(k, g, n, caps, in_node(g, n, 0), n->shape[2], n->shape[3], false, err, cap);
}

/* (dy [N,C,OH,OW]) -> dx [N,C,H,W] = node shape. */
mn_status vkgen_avgpool2d_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                              size_t cap) {
    const node *dy = in_node(g, n, 0);
    return gen_avgpool(k, g, n, caps, n, dy->shape[2], dy->shape[3], true, err, cap);
}

mn_status vkgen_upsample_nearest2d(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                                   size_t cap) {
    const node *x = in_node(g, n, 0);
    vk_def_i(k, "UP_H", x->shape[2]);
    vk_def_i(k, "UP_W", x->shape[3]);
    vk_def_i(k, "UP_OH", n->shape[2]);
    vk_def_i(k, "UP_OW", n->shape[3]);
    const mn_upsample_attrs a = upsample_attrs_of(n);
    vk_def_i(k, "UP_SH", a.scale[0]);
    vk_def_i(k, "UP_SW", a.scale[1]);
    k->tmpl = "upsample_nearest2d";
    layout_launch(k, caps, n);
    return MN_OK;
}

/* A GLSL literal that reads back as exactly the float v (finite). */
static void def_float(vk_kernel *k, const char *name, float v) {
    char t[40];
    snprintf(t, sizeof t, "%.9g", (double)v);
    vk_def(k, name, v < 0 ? "(%s%s)" : "%s%s", t, strpbrk(t, ".e") ? "" : ".0");
}

mn_status vkgen_ema_update(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                           size_t cap) {
    /* the CPU's (real) casts of the same double expressions */
    const mn_ema_attrs a = ema_attrs_of(n);
    const float keep = (float)(1.0 - a.momentum), m = (float)a.momentum, sc = (float)a.scale;
    if (!isfinite(keep) || !isfinite(m) || !isfinite(sc))
        return layout_fail(g, n, MN_E_INVALID, err, cap, "momentum or scale is not finite");
    def_float(k, "EMA_KEEP", keep);
    def_float(k, "EMA_M", m);
    def_float(k, "EMA_SC", sc);
    vk_def(k, "EMA_GATED", "%d", n->nin > 2); /* a step_gate: X2(1) != 0 skips */
    k->tmpl = "ema_update";
    layout_launch(k, caps, n);
    return MN_OK;
}
