/* vk_gen_pointwise.c - Vulkan generators for every op but the linear-algebra
 * family: sources and views, pointwise ops, layout moves, reductions,
 * softmax and losses, optimizer updates.
 *
 * Templates (kernels/):
 *   eltwise  pointwise unary/binary/unary_bwd and the gathers stop_grad,
 *            broadcast, permute: per-input offset expressions with the
 *            broadcast / permuted strides baked in
 *   reduce   sum, mean, max, sumsq, reduce_to, mse, max_bwd
 *   softmax  softmax, log_softmax, their backward ops, cross_entropy_dense
 *            and its backward ops
 *   ce       ce_rows, cross_entropy (the mean of the rows), cross_entropy_bwd
 *   optim    sgd_update, adam_update, clip_coef, step_gate
 * input, param, state, const and reshape (a view sharing its input's
 * storage) dispatch nothing: k->tmpl = NULL.
 *
 * Shapes, strides and float parameters become #defines (they are static);
 * tensor offsets come from push constants (vk_codegen.h). Index arithmetic is
 * 32-bit, or 64-bit in a kernel with an operand above vk_caps.index_max
 * elements (vk_codegen_node decides; sizes are then written with vk_def_u).
 *
 * Exported for other families' generators: vk_gen_bcast_expr (the eltwise
 * gather with another template) and vk_float_literal (vk_codegen.h).
 *
 * Does not: generate matmul / conv / pooling (vk_gen_linalg.c), abs, clamp,
 * pow, where, dropout and their helpers (vk_gen_pointwise_param.c), compile or
 * run anything.
 */
#include <math.h>

#include "backend/vulkan/vk_codegen.h"

#define VK_EXPR_CAP 512

/* ---- helpers ------------------------------------------------------------- */

static const node *in_node(const mn_graph *g, const node *n, int i) { return &g->nodes[n->in[i]]; }

static mn_status fail(const mn_graph *g, const node *n, mn_status st, char *err, size_t cap, const char *what) {
    mn_fmt(err, cap, "vulkan codegen: %s (%%%d): %s", op_table[n->op].name, (int)(n - g->nodes), what);
    return st;
}

/* Power-of-two workgroup size: the smallest >= want, at most `most` and
 * within the device's invocation and shared-memory limits (reductions keep 8
 * bytes per invocation in shared memory). */
static uint32_t pick_local_upto(const vk_caps *caps, uint64_t want, uint64_t most) {
    uint64_t lim = caps->max_invocations ? caps->max_invocations : 256;
    if (lim > most) lim = most;
    if (caps->max_shared_bytes && lim > caps->max_shared_bytes / 8) lim = caps->max_shared_bytes / 8;
    uint32_t l = 1;
    while (l < want && (uint64_t)l * 2 <= lim) l *= 2;
    return l;
}
static uint32_t pick_local(const vk_caps *caps, uint64_t want) { return pick_local_upto(caps, want, 256); }

/* Smallest useful reduction group: a subgroup (or 32). */
static uint64_t min_group(const vk_caps *caps) { return caps->subgroup_size ? caps->subgroup_size : 32; }

/* A GLSL float literal that reads back as exactly v (non-finite values as bits). */
typedef struct flit {
    char s[48];
} flit;
static flit flit_of(float v) {
    flit r;
    if (!isfinite(v)) {
        uint32_t u;
        memcpy(&u, &v, sizeof u);
        snprintf(r.s, sizeof r.s, "uintBitsToFloat(0x%08xu)", (unsigned)u);
        return r;
    }
    char t[40];
    snprintf(t, sizeof t, "%.9g", (double)v);
    bool has_point = strpbrk(t, ".e") != NULL;
    snprintf(r.s, sizeof r.s, v < 0 ? "(%s%s)" : "%s%s", t, has_point ? "" : ".0");
    return r;
}

/* Right-aligns shape into 4 dims, leading dims 1. */
static void pad4(int64_t out[4], int rank, const int64_t *shape) {
    for (int d = 0; d < 4; d++) out[d] = 1;
    for (int i = 0; i < rank; i++) out[4 - rank + i] = shape[i];
}

/* Strides with which an input of (rank, shape) is read over the output's
 * padded 4-d index space: 0 on its size-1 (broadcast) dims (numpy rules). */
static void bcast_strides(int64_t st[4], int rank, const int64_t *shape) {
    int64_t s4[4], acc = 1;
    pad4(s4, rank, shape);
    for (int d = 3; d >= 0; d--) {
        st[d] = s4[d] == 1 ? 0 : acc;
        acc *= s4[d];
    }
}

typedef struct sbuf {
    char *p;
    size_t cap, len;
    bool over;
} sbuf;
static void sb_add(sbuf *b, const char *fmt, ...) MN_PRINTF(2, 3);
static void sb_add(sbuf *b, const char *fmt, ...) {
    if (b->over) return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (r < 0 || (size_t)r >= b->cap - b->len) b->over = true;
    else b->len += (size_t)r;
}

/* Writes into buf the GLSL offset sum_d coord_d(var) * st[d], coord_d being
 * coordinate d of the row-major flat index `var` over dims dim[0..3]. Dims of
 * size 1 and stride 0 drop out; contiguous strides give just (var). Returns
 * false if buf is too small. u: the literals' suffix (vk_usfx: the terms
 * stay below the kernel's index type). */
static bool offset_expr(char *buf, size_t cap, const char *var, const int64_t dim[4], const int64_t st[4],
                        const char *u) {
    int64_t cs[4], acc = 1;
    for (int d = 3; d >= 0; d--) {
        cs[d] = acc;
        acc *= dim[d];
    }
    bool flat = true;
    int outer = -1;
    for (int d = 0; d < 4; d++) {
        if (dim[d] == 1) continue;
        if (outer < 0) outer = d;
        if (st[d] != cs[d]) flat = false;
    }
    sbuf b = {buf, cap, 0, false};
    if (flat) {
        sb_add(&b, "(%s)", var);
        return !b.over;
    }
    int terms = 0;
    sb_add(&b, "(");
    for (int d = 0; d < 4; d++) {
        if (dim[d] == 1 || st[d] == 0) continue;
        sb_add(&b, "%s", terms++ ? " + " : "");
        char coord[96];
        if (cs[d] == 1) snprintf(coord, sizeof coord, "%s", var);
        else snprintf(coord, sizeof coord, "(%s / %llu%s)", var, (unsigned long long)cs[d], u);
        if (d == outer) sb_add(&b, "%s", coord);
        else sb_add(&b, "(%s %% %llu%s)", coord, (unsigned long long)dim[d], u);
        if (st[d] != 1) sb_add(&b, " * %llu%s", (unsigned long long)st[d], u);
    }
    sb_add(&b, terms ? ")" : "0u)");
    return !b.over;
}

/* Defines NAME(var) as the offset expression. */
static mn_status def_offset(vk_kernel *k, const mn_graph *g, const node *n, const char *name, const char *var,
                            const int64_t dim[4], const int64_t st[4], char *err, size_t cap) {
    char e[VK_EXPR_CAP];
    if (!offset_expr(e, sizeof e, var, dim, st, vk_usfx(k)))
        return fail(g, n, MN_E_UNSUPPORTED, err, cap, "index expression too long");
    vk_line(k, "#define %s(%s) %s", name, var, e);
    return MN_OK;
}

/* ---- sources and views --------------------------------------------------- */

/* Nothing to dispatch: the runtime uploads sources; reshape shares its input's
 * storage (memplan). */
static mn_status gen_none(vk_kernel *k) {
    k->tmpl = NULL;
    return MN_OK;
}

mn_status vkgen_input(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    return gen_none(k);
}
mn_status vkgen_param(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    return gen_none(k);
}
mn_status vkgen_state(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    return gen_none(k);
}
mn_status vkgen_const(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    return gen_none(k);
}
mn_status vkgen_reshape(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    return gen_none(k);
}

/* ---- eltwise.glsl -------------------------------------------------------- */

/* y[i] = expr(a, b, c) where input j is read at offset sum_d coord_d(i) *
 * st[j][d] over the output's padded dims. */
static mn_status gen_gather(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, int nin,
                            const int64_t st[][4], const char *expr, char *err, size_t cap) {
    mn_status s;
    int64_t dim[4];
    pad4(dim, n->rank, n->shape);
    k->tmpl = "eltwise";
    vk_def(k, "NIN", "%d", nin);
    for (int j = 0; j < nin; j++) {
        char name[16];
        snprintf(name, sizeof name, "IX%d", j);
        if ((s = def_offset(k, g, n, name, "i", dim, st[j], err, cap))) return s;
    }
    vk_line(k, "#define EXPR(a, b, c) (%s)", expr);
    snprintf(k->expr, sizeof k->expr, "%s", expr); /* for fused kernels (vk_gen_fused.c) */
    vk_launch_1d(k, caps, (uint64_t)node_numel(n), pick_local(caps, 256));
    return MN_OK;
}

/* All inputs broadcast (numpy rules) to the node's shape. */
static mn_status gen_bcast(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, const char *expr,
                           char *err, size_t cap) {
    int64_t st[3][4];
    MN_ASSERT(n->nin >= 1 && n->nin <= 3);
    for (int j = 0; j < n->nin; j++) {
        const node *x = in_node(g, n, j);
        bcast_strides(st[j], x->rank, x->shape);
    }
    return gen_gather(k, g, n, caps, n->nin, (const int64_t(*)[4])st, expr, err, cap);
}

#define VK_ELTWISE(nm, expr)                                                                                   \
    mn_status vkgen_##nm(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,      \
                         size_t cap) {                                                                         \
        return gen_bcast(k, g, n, caps, expr, err, cap);                                                       \
    }

VK_ELTWISE(add, "a + b")
VK_ELTWISE(sub, "a - b")
VK_ELTWISE(mul, "a * b")
VK_ELTWISE(div, "a / b")
VK_ELTWISE(neg, "-a")
VK_ELTWISE(exp, "mn_exp(a)")
VK_ELTWISE(log, "mn_log(a)")
VK_ELTWISE(sqrt, "mn_sqrt(a)")
VK_ELTWISE(rsqrt, "1.0 / mn_sqrt(a)")
VK_ELTWISE(relu, "mn_relu(a)")
VK_ELTWISE(sigmoid, "mn_sigmoid(a)")
VK_ELTWISE(tanh, "mn_tanh(a)")
VK_ELTWISE(gelu, "mn_gelu(a)")
VK_ELTWISE(gelu_tanh, "mn_gelu_tanh(a)")
VK_ELTWISE(silu, "a * mn_sigmoid(a)")
VK_ELTWISE(stop_grad, "a")
VK_ELTWISE(sin, "mn_sin(a)")
VK_ELTWISE(cos, "mn_cos(a)")
VK_ELTWISE(broadcast, "a")
#undef VK_ELTWISE

/* The rounding of core/round16.h (mathlib.glsl's twins: the same bits). */
mn_status vkgen_cast(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    const mn_round16 r = dtype_round16(cast_dtype(n));
    if (n->flags & NODE_F_PACK16) { /* two values a word (cast16.glsl): never a fused member (kir) */
        const node *x = in_node(g, n, 0);
        if (r == MN_ROUND_NONE || node_numel(x) != node_numel(n) || (x->flags & NODE_F_PACK16))
            return fail(g, n, MN_E_UNSUPPORTED, err, cap, "a packed cast needs an f32 input of its shape");
        k->tmpl = "cast16";
        vk_launch_1d(k, caps, ((uint64_t)node_numel(n) + 1) / 2, pick_local(caps, 256));
        return MN_OK;
    }
    return gen_bcast(k, g, n, caps, r == MN_ROUND_F16 ? "mn_round_f16(a)" : r == MN_ROUND_BF16 ? "mn_round_bf16(a)" : "a",
                     err, cap);
}

mn_status vkgen_scale(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    char expr[96];
    snprintf(expr, sizeof expr, "a * %s", flit_of((float)scale_factor(n)).s);
    return gen_bcast(k, g, n, caps, expr, err, cap);
}

/* (x, y, dy) -> dy * f'(x) with a = x, b = y, c = dy. */
mn_status vkgen_unary_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    const char *expr;
    switch (bwd_of(n)) {
    case OP_EXP: expr = "c * b"; break;
    case OP_LOG: expr = "c * (1.0 / a)"; break;
    case OP_SQRT: expr = "c * (0.5 / b)"; break;
    case OP_RSQRT: expr = "c * (-0.5 * b * b * b)"; break;
    case OP_RELU: expr = "(!isnan(a) && a > 0.0) ? c : 0.0"; break;
    case OP_SIGMOID: expr = "c * (b * (1.0 - b))"; break;
    case OP_TANH: expr = "c * (1.0 - b * b)"; break;
    case OP_GELU: expr = "c * mn_dgelu(a)"; break;
    case OP_GELU_TANH: expr = "c * mn_dgelu_tanh(a)"; break;
    case OP_SILU: expr = "c * mn_dsilu(a)"; break;
    case OP_SIN: expr = "c * mn_cos(a)"; break;
    case OP_COS: expr = "c * (-mn_sin(a))"; break;
    default: {
        char what[96];
        snprintf(what, sizeof what, "ip[0] = %lld is not a differentiable unary op", (long long)bwd_of(n));
        return fail(g, n, MN_E_INVALID, err, cap, what);
    }
    }
    return gen_bcast(k, g, n, caps, expr, err, cap);
}

/* out.shape[i] = x.shape[perm[i]]: output dim i reads x with x's stride of
 * axis perm[i]. Works for i32 tensors too (a 32-bit copy). */
mn_status vkgen_permute(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                        size_t cap) {
    const node *x = in_node(g, n, 0);
    int64_t xs[MN_MAX_RANK], acc = 1, st[1][4] = {{0, 0, 0, 0}};
    for (int i = x->rank - 1; i >= 0; i--) {
        xs[i] = acc;
        acc *= x->shape[i];
    }
    for (int i = 0; i < n->rank; i++) {
        const int64_t p = permute_axis(n, i);
        if (p < 0 || p >= x->rank) return fail(g, n, MN_E_INVALID, err, cap, "bad permutation");
        st[0][4 - n->rank + i] = xs[p];
    }
    return gen_gather(k, g, n, caps, 1, (const int64_t(*)[4])st, "a", err, cap);
}

/* ---- reduce.glsl --------------------------------------------------------- */

/* A reduction: output element o < nout reads x at BASE(o) + ROFF(l), l < len;
 * BASE walks odim with strides ost, ROFF walks rdim with strides rst. */
typedef struct red_geom {
    int64_t odim[4], ost[4], rdim[4], rst[4];
    int64_t nout, len;
} red_geom;

/* x viewed as [outer, len, inner] around axis (MN_ALL_AXES: [1, numel, 1]). */
static red_geom red_axis(const node *x, int64_t axis) {
    int64_t outer = 1, len = 1, inner = 1;
    if (axis == MN_ALL_AXES || axis < 0 || axis >= x->rank) {
        len = node_numel(x);
    } else {
        for (int i = 0; i < x->rank; i++) {
            if (i < axis) outer *= x->shape[i];
            else if (i == axis) len = x->shape[i];
            else inner *= x->shape[i];
        }
    }
    red_geom r = {{1, 1, outer, inner}, {0, 0, len * inner, 1}, {1, 1, 1, len}, {0, 0, 0, inner}, outer * inner, len};
    return r;
}

/* Loop iterations of a workgroup reduction's invocation: `passes` strided
 * walks over the slice and the tree over local invocations. */
static uint64_t red_iterations(int64_t len, uint32_t local, uint64_t passes) {
    uint64_t lg = 0;
    while ((1u << lg) < local) lg++;
    return passes * (((uint64_t)len + local - 1) / local) + lg;
}

static mn_status gen_reduce(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, const char *op,
                            bool mean, const red_geom *r, char *err, size_t cap) {
    mn_status s;
    /* short slices: one invocation per output; also when there are many
     * outputs whose slices are strided (columns), each invocation then
     * reading the neighbour of the next one's element (coalesced). Slices
     * that run along contiguous memory (rows: the spatial sums of a
     * normalisation over [N,C,H*W]) take a workgroup each, whose reads
     * are coalesced; an invocation per row would read 32 rows at once. */
    bool rows = false;
    for (int d = 3; d >= 0; d--)
        if (r->rdim[d] > 1) {
            rows = r->rst[d] == 1;
            break;
        }
    const bool serial = r->len <= 32 || (r->nout >= 8192 && r->len <= 4096 && !rows);
    k->tmpl = "reduce";
    vk_def(k, "RED_OP", "%s", op);
    vk_def(k, "RED_MEAN", "%d", mean ? 1 : 0);
    vk_def(k, "RED_SERIAL", "%d", serial ? 1 : 0);
    vk_def_u(k, "NOUT", (uint64_t)r->nout);
    vk_def_u(k, "RLEN", (uint64_t)r->len);
    vk_def(k, "RLEN_F", "%s", flit_of((float)r->len).s);
    if ((s = def_offset(k, g, n, "BASE", "o", r->odim, r->ost, err, cap)) ||
        (s = def_offset(k, g, n, "ROFF", "l", r->rdim, r->rst, err, cap)))
        return s;
    const uint64_t passes = strcmp(op, "RED_MAXBWD") == 0 ? 2 : 1; /* max_bwd writes its slice again */
    if (serial) {
        if (!vk_loops_fit(caps, passes * (uint64_t)r->len)) return vk_loop_fail(g, n, caps, passes * r->len, err, cap);
        vk_launch_1d(k, caps, (uint64_t)r->nout, pick_local(caps, 256));
    } else {
        /* a lone output (all axes, mse, sumsq) gets the largest group, and so
         * does a slice too long for the driver's loop limit with 256 */
        uint64_t want = (uint64_t)r->len > min_group(caps) ? (uint64_t)r->len : min_group(caps);
        uint32_t local = pick_local_upto(caps, want, r->nout == 1 ? 1024 : 256);
        if (!vk_loops_fit(caps, red_iterations(r->len, local, passes))) local = pick_local_upto(caps, want, 1024);
        const uint64_t iters = red_iterations(r->len, local, passes);
        if (!vk_loops_fit(caps, iters)) return vk_loop_fail(g, n, caps, iters, err, cap);
        vk_launch_1d(k, caps, (uint64_t)r->nout * local, local); /* one workgroup per output */
    }
    return MN_OK;
}

mn_status vkgen_sum(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    red_geom r = red_axis(in_node(g, n, 0), reduce_attrs_of(n).axis);
    return gen_reduce(k, g, n, caps, "RED_SUM", false, &r, err, cap);
}
mn_status vkgen_mean(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    red_geom r = red_axis(in_node(g, n, 0), reduce_attrs_of(n).axis);
    return gen_reduce(k, g, n, caps, "RED_SUM", true, &r, err, cap);
}
mn_status vkgen_max(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    red_geom r = red_axis(in_node(g, n, 0), reduce_attrs_of(n).axis);
    return gen_reduce(k, g, n, caps, "RED_MAX", false, &r, err, cap);
}
/* (x, y, dy) -> dx: dy to the first argmax of each slice of x. */
mn_status vkgen_max_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                        size_t cap) {
    red_geom r = red_axis(in_node(g, n, 0), reduce_attrs_of(n).axis);
    return gen_reduce(k, g, n, caps, "RED_MAXBWD", false, &r, err, cap);
}
uint32_t vk_sumsq_local(const vk_caps *caps, int64_t block) {
    return pick_local_upto(caps, (uint64_t)(block > 0 ? block : 1), 256);
}

mn_status vk_sumsq_block_defs(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, int64_t block,
                              uint64_t nout, char *err, size_t cap) {
    const uint32_t local = vk_sumsq_local(caps, block);
    const uint64_t iters = red_iterations(block, local, 1);
    if (!vk_loops_fit(caps, iters)) return vk_loop_fail(g, n, caps, iters, err, cap);
    k->tmpl = "reduce";
    vk_def(k, "RED_OP", "RED_SUMSQ");
    vk_def(k, "RED_MEAN", "0");
    vk_def(k, "RED_SERIAL", "0");
    vk_def(k, "NOUT", "%lluu", (unsigned long long)nout);
    vk_def(k, "RLEN", "%lluu", (unsigned long long)block);
    vk_def(k, "RLEN_F", "%s", flit_of((float)block).s);
    vk_launch_1d(k, caps, nout * local, local); /* one workgroup per block */
    return MN_OK;
}

mn_status vkgen_sumsq(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    const node *x = in_node(g, n, 0);
    if (sumsq_block(n) <= 0) {
        red_geom r = red_axis(x, MN_ALL_AXES);
        return gen_reduce(k, g, n, caps, "RED_SUMSQ", false, &r, err, cap);
    }
    /* blocks of B consecutive elements, the last one cut at the tensor's end;
     * always a workgroup per block, the multi-tensor kernel's very order
     * (vk_gen_multi.c), so the two give the same bits */
    const int64_t b = sumsq_block(n);
    vk_def(k, "BASE(o)", "((o) * %lluu)", (unsigned long long)b);
    vk_def(k, "ROFF(l)", "(l)");
    vk_def(k, "RED_LIMIT", "%lluu", (unsigned long long)node_numel(x));
    return vk_sumsq_block_defs(k, g, n, caps, b, (uint64_t)node_numel(n), err, cap);
}
/* mean((a - b)^2) over all elements (a and b have the same count). */
mn_status vkgen_mse(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    red_geom r = red_axis(in_node(g, n, 0), MN_ALL_AXES);
    return gen_reduce(k, g, n, caps, "RED_MSE", true, &r, err, cap);
}

/* Sums x down to the node's shape over the dims the node has as 1 (or lacks)
 * and x does not, right-aligned like broadcasting. */
mn_status vkgen_reduce_to(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    const node *x = in_node(g, n, 0);
    int64_t xd[4], od[4], xs[4], acc = 1;
    pad4(xd, x->rank, x->shape);
    pad4(od, n->rank, n->shape);
    red_geom r;
    r.nout = r.len = 1;
    for (int d = 3; d >= 0; d--) {
        xs[d] = xd[d] == 1 ? 0 : acc; /* a size-1 x dim is read at index 0 */
        acc *= xd[d];
        r.odim[d] = od[d];
        r.ost[d] = od[d] == 1 ? 0 : xs[d];
        r.rdim[d] = od[d] == 1 ? xd[d] : 1;
        r.rst[d] = od[d] == 1 ? xs[d] : 0;
        r.nout *= r.odim[d];
        r.len *= r.rdim[d];
    }
    return gen_reduce(k, g, n, caps, "RED_SUM", false, &r, err, cap);
}

/* ---- softmax.glsl -------------------------------------------------------- */

/* Rows of in0 = [rows, C] (C = last dim); loss: one workgroup, scalar out. */
static mn_status gen_rows(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, const char *op,
                          bool loss, char *err, size_t cap) {
    const node *x = in_node(g, n, 0);
    const int64_t C = x->rank ? x->shape[x->rank - 1] : 1, rows = C ? node_numel(x) / C : 0;
    bool coop = C > 32;
    uint32_t local = 0;
    if (loss) {
        /* One workgroup walks every row: as large as allowed, and the mode
         * with fewer loop iterations per invocation (a row together: rows x
         * (3 strided passes + 3 tree reductions); a row per invocation:
         * rows / local x 3 passes over C). Fewer iterations also keep
         * lavapipe under its 65535-iteration loop limit for longer. */
        local = pick_local_upto(caps, 1024, 1024);
        uint64_t lg = 0;
        while ((1u << lg) < local) lg++;
        const uint64_t L = local, coop_it = (uint64_t)rows * (3 * (((uint64_t)C + L - 1) / L) + 3 * lg + 2);
        const uint64_t serial_it = ((uint64_t)rows + L - 1) / L * (3 * (uint64_t)C + 1) + lg;
        coop = coop_it < serial_it;
    }
    k->tmpl = "softmax";
    vk_def(k, "SM_OP", "%s", op);
    vk_def_u(k, "ROWS", (uint64_t)rows);
    vk_def_u(k, "NC", (uint64_t)C);
    vk_def(k, "ROWS_F", "%s", flit_of((float)rows).s);
    vk_def(k, "ROW_COOP", "%d", coop ? 1 : 0);
    vk_def(k, "CE_WRT_T", "%d", n->op == OP_CROSS_ENTROPY_DENSE_BWD && ce_dense_wrt_targets(n) ? 1 : 0);
    if (loss) {
        k->local[0] = local;
        k->groups[0] = k->groups[1] = k->groups[2] = 1;
        vk_def(k, "NTHREADS", "%uu", local);
    } else if (coop) {
        local = pick_local(caps, (uint64_t)C);
        /* at most 4 strided passes over the row and 2 trees (softmax.glsl) */
        const uint64_t iters = 4 * (((uint64_t)C + local - 1) / local) + 2 * 10;
        if (!vk_loops_fit(caps, iters)) return vk_loop_fail(g, n, caps, iters, err, cap);
        vk_launch_1d(k, caps, (uint64_t)rows * local, local); /* one workgroup per row */
    } else {
        vk_launch_1d(k, caps, (uint64_t)rows, pick_local(caps, 64)); /* one invocation per row */
    }
    return MN_OK;
}

mn_status vkgen_softmax(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                        size_t cap) {
    return gen_rows(k, g, n, caps, "SM_SOFTMAX", false, err, cap);
}
mn_status vkgen_log_softmax(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                            size_t cap) {
    return gen_rows(k, g, n, caps, "SM_LOG_SOFTMAX", false, err, cap);
}
mn_status vkgen_softmax_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                            size_t cap) {
    return gen_rows(k, g, n, caps, "SM_SOFTMAX_BWD", false, err, cap);
}
mn_status vkgen_log_softmax_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                                size_t cap) {
    return gen_rows(k, g, n, caps, "SM_LOG_SOFTMAX_BWD", false, err, cap);
}
mn_status vkgen_cross_entropy_dense_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                        char *err, size_t cap) {
    return gen_rows(k, g, n, caps, "SM_CE_DENSE_BWD", false, err, cap);
}
mn_status vkgen_cross_entropy_dense(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                    char *err, size_t cap) {
    return gen_rows(k, g, n, caps, "SM_CE_DENSE", true, err, cap);
}

/* ---- ce.glsl ------------------------------------------------------------- */

/* The cross-entropy options shared by its three kernels: ignore_index (ip[0],
 * ip[1]) and label smoothing (fp[0]), mn_ce_attrs; the row view of the logits. */
static void def_ce(vk_kernel *k, const mn_graph *g, const node *n, const char *mode) {
    const node *x = in_node(g, n, 0);
    const int64_t C = x->shape[x->rank - 1], rows = C ? node_numel(x) / C : 0;
    const mn_ce_attrs a = ce_attrs_of(n);
    const double eps = a.smoothing;
    k->tmpl = "ce";
    vk_def(k, "CE_MODE", "%s", mode);
    vk_def_u(k, "ROWS", (uint64_t)rows);
    vk_def_u(k, "NC", (uint64_t)C);
    vk_def(k, "ROWS_F", "%s", flit_of((float)rows).s);
    if (a.use_ignore) {
        vk_def(k, "CE_IGNORE", "1");
        vk_def(k, "CE_IGNORE_INDEX", "(%lld)", (long long)a.ignore_index);
    }
    if (eps != 0) {
        vk_def(k, "CE_HAS_SMOOTH", "1");
        vk_def(k, "CE_SMOOTH", "%s", flit_of((float)eps).s);
        vk_def(k, "CE_ONE_M_SMOOTH", "%s", flit_of((float)(1.0 - eps)).s);
        vk_def(k, "CE_SMOOTH_C", "%s", flit_of((float)(eps / (double)C)).s);
    }
}

/* (logits [B,C], labels) -> [B,3]: one workgroup per row. */
mn_status vkgen_ce_rows(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                        size_t cap) {
    const node *x = in_node(g, n, 0);
    const uint64_t C = (uint64_t)x->shape[x->rank - 1], rows = (uint64_t)x->shape[0];
    def_ce(k, g, n, "CE_M_ROWS");
    if (caps->subgroup_arith) vk_def(k, "MN_SUBGROUP", "1");
    /* 256 invocations per row; vocabularies beyond 2^22 take up to 1024 so
     * that a row stays well under lavapipe's 65535 loop iterations */
    const uint64_t want = C > min_group(caps) ? C : min_group(caps);
    const uint32_t local = pick_local_upto(caps, want, C > (1u << 22) ? 1024 : 256);
    vk_launch_1d(k, caps, rows * local, local);
    return MN_OK;
}

/* (logits, labels, rows [B,3]) -> scalar mean: one workgroup. */
mn_status vkgen_cross_entropy(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                              size_t cap) {
    if (n->nin < 3) return fail(g, n, MN_E_INVALID, err, cap, "needs the row statistics input (ce_rows)");
    def_ce(k, g, n, "CE_M_MEAN");
    const uint32_t local = pick_local_upto(caps, (uint64_t)in_node(g, n, 0)->shape[0], 1024);
    k->local[0] = local, k->local[1] = k->local[2] = 1;
    k->groups[0] = k->groups[1] = k->groups[2] = 1;
    vk_def(k, "NTHREADS", "%uu", local);
    return MN_OK;
}

/* (logits, labels, dloss, rows[, count]) -> dlogits: one invocation per element. */
mn_status vkgen_cross_entropy_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                                  size_t cap) {
    if (n->nin < 4) return fail(g, n, MN_E_INVALID, err, cap, "needs the row statistics input (ce_rows)");
    if (ce_attrs_of(n).use_ignore && n->nin < 5)
        return fail(g, n, MN_E_INVALID, err, cap, "ignore_index needs the row count input (ce_count)");
    def_ce(k, g, n, "CE_M_BWD");
    if (n->nin > 4) vk_def(k, "CE_HAS_COUNT", "1");
    vk_launch_1d(k, caps, (uint64_t)node_numel(n), pick_local(caps, 256));
    return MN_OK;
}

/* ---- optim.glsl ---------------------------------------------------------- */

/* The float parameters the CPU kernel rounds to f32, as literals. */
static void def_f32(vk_kernel *k, const char *name, float v) { vk_def(k, name, "%s", flit_of(v).s); }

mn_status vk_update_defs(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, bool multi, char *err,
                         size_t cap) {
    (void)caps;
    const bool adam = n->op == OP_ADAM_UPDATE;
    const int hyper = adam ? 4 : 3; /* input index of hyper; clip follows it */
    if (n->nin < hyper + 1) return fail(g, n, MN_E_INVALID, err, cap, "missing hyper input");
    k->tmpl = "optim";
    vk_def(k, "OPT_OP", "%s", adam ? "OPT_ADAM" : "OPT_SGD");
    vk_def(k, "HYPER(j)", "X%d(j)", hyper);
    if (n->nin > hyper + 1) vk_def(k, "CLIP", "X%d(0)", hyper + 1);
    else vk_def(k, "CLIP", "1.0");
    const mn_optim_attrs a = optim_attrs_of(n);
    if (n->nin > hyper + 1 && a.gated) vk_def(k, "SKIP", "X%d(1)", hyper + 1); /* a step_gate */
    else vk_def(k, "SKIP", "0.0");
    const float wd = (float)a.weight_decay;
    if (!multi) { /* else a table entry per tensor (vk_gen_multi.c) */
        def_f32(k, "LR_MULT", (float)a.lr_mult);
        def_f32(k, "WD", wd);
        vk_def(k, "HAS_WD", "%d", wd != 0.0f);
    }
    if (adam) {
        const float b1 = (float)a.beta1, b2 = (float)a.beta2;
        const float omb1 = 1.0f - b1, omb2 = 1.0f - b2; /* f32 like the CPU's (real)1 - b1 */
        def_f32(k, "B1", b1);
        def_f32(k, "B2", b2);
        def_f32(k, "ONE_M_B1", omb1);
        def_f32(k, "ONE_M_B2", omb2);
        def_f32(k, "EPS", (float)a.eps);
        vk_def(k, "DECOUPLED", "%d", a.variant);
    } else {
        const float mom = (float)a.beta1;
        def_f32(k, "MOM", mom);
        vk_def(k, "HAS_MOM", "%d", mom != 0.0f);
        vk_def(k, "NESTEROV", "%d", a.variant);
    }
    return MN_OK;
}

static mn_status gen_update(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                            size_t cap) {
    mn_status s = vk_update_defs(k, g, n, caps, false, err, cap);
    if (!s) vk_launch_1d(k, caps, (uint64_t)node_numel(n), pick_local(caps, 256));
    return s;
}

mn_status vkgen_sgd_update(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                           size_t cap) {
    return gen_update(k, g, n, caps, err, cap);
}
mn_status vkgen_adam_update(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                            size_t cap) {
    return gen_update(k, g, n, caps, err, cap);
}

mn_status vkgen_clip_coef(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    k->tmpl = "optim";
    vk_def(k, "OPT_OP", "OPT_CLIP_COEF");
    def_f32(k, "MAX_NORM", (float)clip_norm(n));
    vk_launch_1d(k, caps, 1, 1);
    return MN_OK;
}

mn_status vkgen_step_gate(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    k->tmpl = "optim";
    vk_def(k, "OPT_OP", "OPT_STEP_GATE");
    vk_def(k, "HAS_SUMSQ", "%d", step_gate_has_sumsq(n));
    if (step_gate_scaled(n)) vk_def(k, "SCALE", "X%d(0)", n->nin - 1);
    else vk_def(k, "SCALE", "1.0");
    vk_def(k, "HAS_CLIP", "%d", clip_norm(n) > 0);
    def_f32(k, "MAX_NORM", (float)clip_norm(n));
    vk_launch_1d(k, caps, 1, 1);
    return MN_OK;
}

/* ---- for other families ---------------------------------------------------- */

mn_status vk_gen_bcast_expr(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, const char *tmpl,
                            const char *expr, char *err, size_t cap) {
    mn_status s = gen_bcast(k, g, n, caps, expr, err, cap);
    if (!s) k->tmpl = tmpl;
    return s;
}

void vk_float_literal(char *out, size_t cap, float v) { snprintf(out, cap, "%s", flit_of(v).s); }

/* ---- for fused pointwise kernels (vk_gen_fused.c) -------------------------- */

void vk_pad4(int64_t out[4], const node *n) { pad4(out, n->rank, n->shape); }

void vk_bcast_strides(int64_t st[4], const node *x) { bcast_strides(st, x->rank, x->shape); }

mn_status vk_def_offset(vk_kernel *k, const mn_graph *g, const node *n, const char *name, const int64_t dim[4],
                        const int64_t st[4], char *err, size_t cap) {
    return def_offset(k, g, n, name, "i", dim, st, err, cap);
}

uint32_t vk_pick_local(const vk_caps *caps, uint64_t want) { return pick_local(caps, want); }
