/* ops.c - the public op constructors of include/meganeura.h (the pointwise
 * primitives, normalisations and losses built on them are in
 * ops_pointwise.c): each validates its arguments, fills a node (typed
 * attributes, attrs.h) and adds it through graph_add, whose shape rule
 * (shape.c) checks the rest; composites add several nodes and undo them on
 * failure.
 *
 * Does not: store graphs (graph.c), differentiate, execute.
 */
#include <math.h>
#include <string.h>

#include "graph/attrs.h"
#include "graph/graph.h"

/* ---- public op constructors ---------------------------------------------- */

static mn_status add_op(mn_graph *g, mn_tensor *out, node *p) {
    if (!g) return MN_E_INVALID;
    if (!out) return graph_fail(g, MN_E_INVALID, "%s: out is NULL", op_table[p->op].name);
    return graph_add(g, out, p);
}

static mn_status binary(mn_graph *g, mn_tensor *out, op_id op, mn_tensor a, mn_tensor b) {
    mn_tensor in[2] = {a, b};
    node p = graph_proto(op, 2, in);
    return add_op(g, out, &p);
}

static mn_status unary(mn_graph *g, mn_tensor *out, op_id op, mn_tensor x) {
    node p = graph_proto(op, 1, &x);
    return add_op(g, out, &p);
}

mn_status mn_matmul(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) {
    return mn_matmul_ex(g, out, a, b, false, false);
}
mn_status mn_matmul_ex(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b, bool ta, bool tb) {
    mn_tensor in[2] = {a, b};
    node p = graph_proto(OP_MATMUL, 2, in);
    matmul_attrs_set(&p, &(mn_matmul_attrs){ta, tb});
    return add_op(g, out, &p);
}
mn_status mn_add(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_ADD, a, b); }
mn_status mn_sub(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_SUB, a, b); }
mn_status mn_mul(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_MUL, a, b); }
mn_status mn_div(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_DIV, a, b); }
mn_status mn_scale(mn_graph *g, mn_tensor *out, mn_tensor x, float s) {
    node p = graph_proto(OP_SCALE, 1, &x);
    scale_factor_set(&p, s);
    return add_op(g, out, &p);
}
mn_status mn_neg(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_NEG, x); }
mn_status mn_exp(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_EXP, x); }
mn_status mn_log(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_LOG, x); }
mn_status mn_sqrt(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SQRT, x); }
mn_status mn_rsqrt(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_RSQRT, x); }
mn_status mn_relu(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_RELU, x); }
mn_status mn_sigmoid(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SIGMOID, x); }
mn_status mn_tanh(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_TANH, x); }
mn_status mn_gelu(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_GELU, x); }
mn_status mn_gelu_tanh(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_GELU_TANH, x); }
mn_status mn_silu(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SILU, x); }
mn_status mn_stop_gradient(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_STOP_GRAD, x); }
mn_status mn_sin(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SIN, x); }
mn_status mn_cos(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_COS, x); }
mn_status mn_cast(mn_graph *g, mn_tensor *out, mn_tensor x, mn_dtype dtype) {
    node p = graph_proto(OP_CAST, 1, &x);
    cast_dtype_set(&p, dtype);
    return add_op(g, out, &p);
}
mn_status mn_softmax(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SOFTMAX, x); }
mn_status mn_log_softmax(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_LOG_SOFTMAX, x); }

static mn_status reduce(mn_graph *g, mn_tensor *out, op_id op, mn_tensor x, int axis, bool keepdim) {
    node p = graph_proto(op, 1, &x);
    reduce_attrs_set(&p, &(mn_reduce_attrs){axis, keepdim}); /* axis normalised by the shape rule */
    return add_op(g, out, &p);
}
mn_status mn_sum(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim) { return reduce(g, out, OP_SUM, x, axis, keepdim); }
mn_status mn_mean(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim) { return reduce(g, out, OP_MEAN, x, axis, keepdim); }
mn_status mn_max(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim) { return reduce(g, out, OP_MAX, x, axis, keepdim); }

mn_status mn_reshape(mn_graph *g, mn_tensor *out, mn_tensor x, int rank, const int64_t *shape) {
    node p = graph_proto(OP_RESHAPE, 1, &x);
    if (!g) return MN_E_INVALID;
    if (rank < 0 || rank > MN_MAX_RANK || (rank > 0 && !shape))
        return graph_fail(g, MN_E_SHAPE, "reshape: rank %d (supported 0..%d)", rank, MN_MAX_RANK);
    p.rank = rank;
    for (int i = 0; i < rank; i++) p.shape[i] = shape[i];
    return add_op(g, out, &p);
}

mn_status mn_permute(mn_graph *g, mn_tensor *out, mn_tensor x, const int *perm) {
    node p = graph_proto(OP_PERMUTE, 1, &x);
    if (!g) return MN_E_INVALID;
    if (!perm) return graph_fail(g, MN_E_INVALID, "permute: perm is NULL");
    int32_t xi = graph_decode(g, x);
    if (xi >= 0)
        for (int i = 0; i < g->nodes[xi].rank; i++) permute_axis_set(&p, i, perm[i]);
    return add_op(g, out, &p);
}

mn_status mn_transpose(mn_graph *g, mn_tensor *out, mn_tensor x, int a0, int a1) {
    if (!g) return MN_E_INVALID;
    int32_t xi = graph_decode(g, x);
    if (xi < 0) {
        if (out) *out = MN_NONE;
        return graph_bad_tensor(g, "transpose", x);
    }
    int r = g->nodes[xi].rank, perm[MN_MAX_RANK];
    if (a0 < 0) a0 += r;
    if (a1 < 0) a1 += r;
    if (a0 < 0 || a0 >= r || a1 < 0 || a1 >= r) {
        char sb[96];
        return graph_fail(g, MN_E_SHAPE, "transpose: axes %d,%d out of range for shape %s", a0, a1,
                          shape_str(sb, sizeof sb, r, g->nodes[xi].shape));
    }
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[a0] = a1;
    perm[a1] = a0;
    return mn_permute(g, out, x, perm);
}

mn_status mn_cross_entropy(mn_graph *g, mn_tensor *out, mn_tensor logits, mn_tensor labels) {
    return mn_cross_entropy_ex(g, out, logits, labels, NULL);
}
mn_status mn_cross_entropy_dense(mn_graph *g, mn_tensor *out, mn_tensor logits, mn_tensor targets) {
    return binary(g, out, OP_CROSS_ENTROPY_DENSE, logits, targets);
}
mn_status mn_mse(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_MSE, a, b); }

static int or_one(int v) { return v ? v : 1; }

mn_status mn_conv2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                    const mn_conv2d_params *cp) {
    mn_tensor in[3] = {x, w, bias};
    node p = graph_proto(OP_CONV2D, bias == MN_NONE ? 2 : 3, in);
    mn_conv2d_params d = {{1, 1}, {0, 0}, {1, 1}, 1};
    if (!cp) cp = &d;
    const mn_conv_attrs a = {{or_one(cp->stride[0]), or_one(cp->stride[1])},
                             {cp->padding[0], cp->padding[1]},
                             {or_one(cp->dilation[0]), or_one(cp->dilation[1])},
                             or_one(cp->groups)};
    conv_attrs_set(&p, &a);
    return add_op(g, out, &p);
}

/* The pooling attributes of public params: a stride of 0 is the kernel. */
static mn_pool_attrs pool_attrs_from(const mn_pool2d_params *pp, int64_t divisor) {
    return (mn_pool_attrs){{pp->kernel[0], pp->kernel[1]},
                           {pp->stride[0] ? pp->stride[0] : pp->kernel[0], pp->stride[1] ? pp->stride[1] : pp->kernel[1]},
                           {pp->padding[0], pp->padding[1]},
                           divisor};
}

mn_status mn_max_pool2d(mn_graph *g, mn_tensor *out, mn_tensor x, const mn_pool2d_params *pp) {
    node p = graph_proto(OP_MAXPOOL2D, 1, &x);
    if (!g) return MN_E_INVALID;
    if (!pp) return graph_fail(g, MN_E_INVALID, "max_pool2d: params are NULL");
    const mn_pool_attrs a = pool_attrs_from(pp, 0);
    pool_attrs_set(&p, &a);
    return add_op(g, out, &p);
}

/* ---- layout family: slicing, padding, concatenation, pooling, upsampling,
 * convolution variants, batch norm ------------------------------------------ */

/* Composite constructors add several nodes; on a failure they drop the ones
 * they added (the graph is unchanged) and prefix the message with their name. */
/* The node of a handle already checked (check_args, graph_decode). */
#define NODE(t) (g->nodes[graph_id(t)])

static mn_status composite_fail(mn_graph *g, int32_t n0, mn_status st, const char *what) {
    char msg[sizeof g->err];
    graph_truncate(g, n0);
    memcpy(msg, g->err, sizeof msg);
    return graph_fail(g, st, "%s: %s", what, msg);
}

/* g, out and the tensors are usable; *out = MN_NONE. Afterwards the tensors
 * are known to be handles of g: NODE(ts[i]) reads their nodes. */
static mn_status check_args(mn_graph *g, mn_tensor *out, const char *what, int nt, const mn_tensor *ts) {
    if (!g) return MN_E_INVALID;
    if (!out) return graph_fail(g, MN_E_INVALID, "%s: out is NULL", what);
    *out = MN_NONE;
    for (int i = 0; i < nt; i++)
        if (graph_decode(g, ts[i]) < 0) return graph_bad_tensor(g, what, ts[i]);
    return MN_OK;
}

mn_status mn_slice(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, int64_t start, int64_t length) {
    node p = graph_proto(OP_SLICE, 1, &x);
    slice_attrs_set(&p, &(mn_slice_attrs){axis, start, length}); /* axis normalised by the shape rule */
    return add_op(g, out, &p);
}

mn_status mn_pad(mn_graph *g, mn_tensor *out, mn_tensor x, const int64_t *before, const int64_t *after) {
    mn_status st = check_args(g, out, "pad", 1, &x);
    if (st) return st;
    if (!before || !after) return graph_fail(g, MN_E_INVALID, "pad: before and after must not be NULL");
    node p = graph_proto(OP_PAD, 1, &x);
    mn_pad_attrs a = {{0}, {0}};
    for (int i = 0; i < NODE(x).rank && i < 4; i++) a.before[i] = before[i], a.after[i] = after[i];
    pad_attrs_set(&p, &a);
    return add_op(g, out, &p);
}

mn_status mn_concat(mn_graph *g, mn_tensor *out, const mn_tensor *xs, int n, int axis) {
    mn_status st = check_args(g, out, "concat", 0, NULL);
    if (st) return st;
    if (!xs || n < 2) return graph_fail(g, MN_E_INVALID, "concat: needs at least 2 inputs, got %d", xs ? n : 0);
    const int32_t n0 = g->n;
    mn_tensor acc = MN_NONE;
    /* up to NODE_MAX_IN inputs per node; longer lists go in a chain whose
     * first input is the previous link */
    for (int done = 0; done < n;) {
        node p = graph_proto(OP_CONCAT, 0, NULL);
        if (acc != MN_NONE) p.in[p.nin++] = acc;
        while (p.nin < NODE_MAX_IN && done < n) p.in[p.nin++] = xs[done++];
        concat_axis_set(&p, axis);
        if ((st = graph_add(g, &acc, &p))) return n0 == g->n ? st : composite_fail(g, n0, st, "concat");
    }
    *out = acc;
    return MN_OK;
}

mn_status mn_split(mn_graph *g, mn_tensor *outs, mn_tensor x, int axis, int n, const int64_t *sizes) {
    if (!g) return MN_E_INVALID;
    if (!outs) return graph_fail(g, MN_E_INVALID, "split: outs is NULL");
    for (int i = 0; i < n; i++) outs[i] = MN_NONE;
    int32_t xi = graph_decode(g, x);
    if (xi < 0) return graph_bad_tensor(g, "split", x);
    const node *xn = &g->nodes[xi];
    char sb[96];
    int a = axis < 0 ? axis + xn->rank : axis;
    if (a < 0 || a >= xn->rank)
        return graph_fail(g, MN_E_SHAPE, "split: axis %d out of range for shape %s", axis,
                          shape_str(sb, sizeof sb, xn->rank, xn->shape));
    const int64_t d = xn->shape[a];
    if (n < 1 || n > d)
        return graph_fail(g, MN_E_SHAPE, "split: %d parts of axis %d of %s", n, a, shape_str(sb, sizeof sb, xn->rank, xn->shape));
    if (!sizes && d % n)
        return graph_fail(g, MN_E_SHAPE, "split: axis %d of %s does not divide into %d equal parts", a,
                          shape_str(sb, sizeof sb, xn->rank, xn->shape), n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const int64_t len = sizes ? sizes[i] : d / n;
        if (len < 1 || len > d - total)
            return graph_fail(g, MN_E_SHAPE, "split: sizes do not add up to axis %d of %s (part %d is %lld)", a,
                              shape_str(sb, sizeof sb, xn->rank, xn->shape), i, (long long)len);
        total += len;
    }
    if (total != d)
        return graph_fail(g, MN_E_SHAPE, "split: sizes add up to %lld, axis %d of %s is %lld", (long long)total, a,
                          shape_str(sb, sizeof sb, xn->rank, xn->shape), (long long)d);
    const int32_t n0 = g->n;
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        const int64_t len = sizes ? sizes[i] : d / n;
        mn_status st = mn_slice(g, &outs[i], x, a, start, len);
        if (st) {
            for (int j = 0; j < n; j++) outs[j] = MN_NONE;
            return composite_fail(g, n0, st, "split");
        }
        start += len;
    }
    return MN_OK;
}

mn_status mn_broadcast_to(mn_graph *g, mn_tensor *out, mn_tensor x, int rank, const int64_t *shape) {
    mn_status st = check_args(g, out, "broadcast_to", 1, &x);
    if (st) return st;
    if (rank < 0 || rank > MN_MAX_RANK || (rank > 0 && !shape))
        return graph_fail(g, MN_E_SHAPE, "broadcast_to: rank %d (supported 0..%d)", rank, MN_MAX_RANK);
    node p = graph_proto(OP_BROADCAST, 1, &x);
    p.rank = rank;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1) return graph_fail(g, MN_E_SHAPE, "broadcast_to: dimension %d is %lld", i, (long long)shape[i]);
        p.shape[i] = shape[i];
    }
    return add_op(g, out, &p);
}

mn_status mn_avg_pool2d(mn_graph *g, mn_tensor *out, mn_tensor x, const mn_pool2d_params *pp,
                        bool count_include_pad) {
    node p = graph_proto(OP_AVGPOOL2D, 1, &x);
    if (!g) return MN_E_INVALID;
    if (!pp) return graph_fail(g, MN_E_INVALID, "avg_pool2d: params are NULL");
    const mn_pool_attrs a = pool_attrs_from(pp, count_include_pad ? POOL_DIV_AREA : POOL_DIV_INSIDE);
    pool_attrs_set(&p, &a);
    return add_op(g, out, &p);
}

mn_status mn_global_avg_pool(mn_graph *g, mn_tensor *out, mn_tensor x) {
    mn_status st = check_args(g, out, "global_avg_pool", 1, &x);
    if (st) return st;
    const node xn = NODE(x);
    char sb[96];
    if (xn.rank != 4)
        return graph_fail(g, MN_E_SHAPE, "global_avg_pool: x must be [N,C,H,W], got %s",
                          shape_str(sb, sizeof sb, xn.rank, xn.shape));
    const int32_t n0 = g->n;
    mn_tensor t;
    int64_t s3[3] = {xn.shape[0], xn.shape[1], xn.shape[2] * xn.shape[3]};
    int64_t s4[4] = {xn.shape[0], xn.shape[1], 1, 1};
    if ((st = mn_reshape(g, &t, x, 3, s3)) || (st = mn_mean(g, &t, t, 2, true)) || (st = mn_reshape(g, &t, t, 4, s4)))
        return composite_fail(g, n0, st, "global_avg_pool");
    *out = t;
    return MN_OK;
}

mn_status mn_upsample_nearest2d(mn_graph *g, mn_tensor *out, mn_tensor x, int scale_h, int scale_w) {
    node p = graph_proto(OP_UPSAMPLE_NEAREST2D, 1, &x);
    upsample_attrs_set(&p, &(mn_upsample_attrs){{scale_h, scale_w}});
    return add_op(g, out, &p);
}

mn_status mn_upsample_nearest2x(mn_graph *g, mn_tensor *out, mn_tensor x) {
    return mn_upsample_nearest2d(g, out, x, 2, 2);
}

mn_status mn_conv1d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                    const mn_conv1d_params *cp) {
    mn_tensor ts[3] = {x, w, bias};
    mn_status st = check_args(g, out, "conv1d", bias == MN_NONE ? 2 : 3, ts);
    if (st) return st;
    const node xn = NODE(x), wn = NODE(w);
    char sa[96], sb[96];
    if (xn.rank != 3 || wn.rank != 3)
        return graph_fail(g, MN_E_SHAPE, "conv1d: x must be [N,C,L] and w [O,C/groups,K], got %s and %s",
                          shape_str(sa, sizeof sa, xn.rank, xn.shape), shape_str(sb, sizeof sb, wn.rank, wn.shape));
    mn_conv1d_params d = {1, 0, 1, 1};
    if (!cp) cp = &d;
    mn_conv2d_params p2 = {{1, cp->stride}, {0, cp->padding}, {1, cp->dilation}, cp->groups};
    const int32_t n0 = g->n;
    int64_t x4[4] = {xn.shape[0], xn.shape[1], 1, xn.shape[2]}, w4[4] = {wn.shape[0], wn.shape[1], 1, wn.shape[2]};
    mn_tensor xr, wr, y;
    if ((st = mn_reshape(g, &xr, x, 4, x4)) || (st = mn_reshape(g, &wr, w, 4, w4)) ||
        (st = mn_conv2d(g, &y, xr, wr, bias, &p2)))
        return composite_fail(g, n0, st, "conv1d");
    const node yn = NODE(y);
    int64_t y3[3] = {yn.shape[0], yn.shape[1], yn.shape[3]};
    if ((st = mn_reshape(g, &y, y, 3, y3))) return composite_fail(g, n0, st, "conv1d");
    *out = y;
    return MN_OK;
}

/* (in - 1) * s - 2 * p + d * (k - 1) + op + 1, or -1 when it overflows or
 * is below 1. in, k <= 2^40 (graph limit); s, p, d, op come from ints. */
static int64_t conv_transpose_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
    if (in - 1 > INT64_MAX / 4 / s || k - 1 > INT64_MAX / 4 / d) return -1;
    int64_t v = (in - 1) * s + d * (k - 1) + op + 1 - 2 * p;
    return v >= 1 ? v : -1;
}

/* The forward of a transposed convolution is the input gradient of the
 * conv2d whose weight is w: one CONV2D_BWD_INPUT node with the result shape
 * given. The bias is added by broadcasting. */
mn_status mn_conv_transpose2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                              const mn_conv_transpose2d_params *cp) {
    mn_tensor ts[3] = {x, w, bias};
    mn_status st = check_args(g, out, "conv_transpose2d", bias == MN_NONE ? 2 : 3, ts);
    if (st) return st;
    const node xn = NODE(x), wn = NODE(w);
    char sa[96], sb[96];
    shape_str(sa, sizeof sa, xn.rank, xn.shape);
    shape_str(sb, sizeof sb, wn.rank, wn.shape);
    if (xn.rank != 4 || wn.rank != 4)
        return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: x must be [N,C_in,H,W] and w [C_in,C_out/groups,KH,KW], got %s and %s", sa, sb);
    mn_conv_transpose2d_params d = {{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1};
    if (!cp) cp = &d;
    const int64_t s[2] = {or_one(cp->stride[0]), or_one(cp->stride[1])};
    const int64_t dl[2] = {or_one(cp->dilation[0]), or_one(cp->dilation[1])};
    const int64_t pd[2] = {cp->padding[0], cp->padding[1]}, op[2] = {cp->output_padding[0], cp->output_padding[1]};
    const int64_t groups = or_one(cp->groups);
    for (int i = 0; i < 2; i++) {
        if (s[i] < 1 || dl[i] < 1 || pd[i] < 0)
            return graph_fail(g, MN_E_INVALID, "conv_transpose2d: invalid stride %lld, padding %lld or dilation %lld",
                              (long long)s[i], (long long)pd[i], (long long)dl[i]);
        if (op[i] < 0 || op[i] >= s[i])
            return graph_fail(g, MN_E_INVALID, "conv_transpose2d: output_padding %lld must be in [0, stride %lld)",
                              (long long)op[i], (long long)s[i]);
    }
    if (groups < 1 || xn.shape[1] % groups)
        return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: groups %lld must divide the %lld input channels of x %s",
                          (long long)groups, (long long)xn.shape[1], sa);
    if (wn.shape[0] != xn.shape[1])
        return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: w %s must start with x's %lld input channels (x %s)", sb,
                          (long long)xn.shape[1], sa);
    const int64_t c_out = wn.shape[1] * groups;
    if (bias != MN_NONE) {
        const node *bn = &NODE(bias);
        if (bn->rank != 1 || bn->shape[0] != c_out) {
            char sc[96];
            return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: bias %s must be [%lld] for w %s and groups %lld",
                              shape_str(sc, sizeof sc, bn->rank, bn->shape), (long long)c_out, sb, (long long)groups);
        }
    }
    const int64_t oh = conv_transpose_out(xn.shape[2], wn.shape[2], s[0], pd[0], dl[0], op[0]);
    const int64_t ow = conv_transpose_out(xn.shape[3], wn.shape[3], s[1], pd[1], dl[1], op[1]);
    if (oh < 1 || ow < 1)
        return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: x %s and w %s give an empty output (padding too large)", sa, sb);
    mn_tensor in[2] = {x, w};
    node p = graph_proto(OP_CONV2D_BWD_INPUT, 2, in);
    conv_attrs_set(&p, &(mn_conv_attrs){{s[0], s[1]}, {pd[0], pd[1]}, {dl[0], dl[1]}, groups});
    p.rank = 4;
    p.shape[0] = xn.shape[0], p.shape[1] = c_out, p.shape[2] = oh, p.shape[3] = ow;
    const int32_t n0 = g->n;
    mn_tensor y, b4;
    if ((st = graph_add(g, &y, &p))) return composite_fail(g, n0, st, "conv_transpose2d");
    if (bias != MN_NONE) {
        int64_t s4[4] = {1, c_out, 1, 1};
        if ((st = mn_reshape(g, &b4, bias, 4, s4)) || (st = mn_add(g, &y, y, b4)))
            return composite_fail(g, n0, st, "conv_transpose2d");
    }
    *out = y;
    return MN_OK;
}

/* An optional [C] tensor (MN_NONE allowed) for batch_norm2d. */
static mn_status bn_vec(mn_graph *g, mn_tensor t, const char *what, int64_t c, bool optional) {
    char sb[96];
    if (t == MN_NONE && optional) return MN_OK;
    if (graph_decode(g, t) < 0) {
        char w[64];
        mn_fmt(w, sizeof w, "batch_norm2d: %s", what);
        return graph_bad_tensor(g, w, t);
    }
    const node *n = &NODE(t);
    if (n->dtype != MN_F32) return graph_fail(g, MN_E_DTYPE, "batch_norm2d: %s must be f32", what);
    if (n->rank != 1 || n->shape[0] != c)
        return graph_fail(g, MN_E_SHAPE, "batch_norm2d: %s %s must be [%lld]", what,
                          shape_str(sb, sizeof sb, n->rank, n->shape), (long long)c);
    return MN_OK;
}

static mn_status add_ema(mn_graph *g, mn_tensor running, mn_tensor value, double momentum, double scale) {
    mn_tensor in[2] = {running, value};
    node p = graph_proto(OP_EMA_UPDATE, 2, in);
    ema_attrs_set(&p, &(mn_ema_attrs){momentum, scale});
    return graph_add(g, NULL, &p);
}

mn_status mn_batch_norm2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor weight, mn_tensor bias,
                          mn_tensor running_mean, mn_tensor running_var, float momentum, float eps,
                          bool training) {
    mn_status st = check_args(g, out, "batch_norm2d", 1, &x);
    if (st) return st;
    const node xn = NODE(x);
    char sb[96];
    if (xn.rank != 4 || xn.dtype != MN_F32)
        return graph_fail(g, xn.rank != 4 ? MN_E_SHAPE : MN_E_DTYPE, "batch_norm2d: x must be f32 [N,C,H,W], got %s %s",
                          mn_dtype_name(xn.dtype), shape_str(sb, sizeof sb, xn.rank, xn.shape));
    const int64_t N = xn.shape[0], C = xn.shape[1], HW = xn.shape[2] * xn.shape[3];
    if ((st = bn_vec(g, weight, "weight", C, true)) || (st = bn_vec(g, bias, "bias", C, true)) ||
        (st = bn_vec(g, running_mean, "running_mean", C, false)) || (st = bn_vec(g, running_var, "running_var", C, false)))
        return st;
    if (running_mean == running_var)
        return graph_fail(g, MN_E_INVALID, "batch_norm2d: running_mean and running_var must be different tensors");
    if (!(eps >= 0.0f) || !isfinite(eps)) return graph_fail(g, MN_E_INVALID, "batch_norm2d: eps %g must be >= 0", (double)eps);
    if (training) {
        if (!(momentum >= 0.0f && momentum <= 1.0f))
            return graph_fail(g, MN_E_INVALID, "batch_norm2d: momentum %g must be in [0, 1]", (double)momentum);
        if (NODE(running_mean).op != OP_PARAM || NODE(running_var).op != OP_PARAM)
            return graph_fail(g, MN_E_INVALID, "batch_norm2d: in training the running statistics must be parameters "
                              "(mn_graph_param, zeros and ones)");
        if (N * HW < 2)
            return graph_fail(g, MN_E_SHAPE, "batch_norm2d: training needs more than one value per channel, x is %s",
                              shape_str(sb, sizeof sb, xn.rank, xn.shape));
    }
    const int32_t n0 = g->n;
    mn_tensor y, e, mu, var, scale, t, w, b;
    if ((st = mn_graph_scalar(g, &e, eps))) return composite_fail(g, n0, st, "batch_norm2d");
    if (training) {
        /* the batch statistics by two per-channel reductions (bn_mean of x,
         * then bn_meansq of the centred d = x - mean: the biased variance;
         * a workgroup per channel on Vulkan); scale = rsqrt(var + eps)
         * [* weight] on [C]; y = d * scale [+ bias], pointwise. x is dead
         * after d; the backward keeps d (the rules are pointwise:
         * autodiff.c). */
        const int64_t c4[4] = {1, C, 1, 1};
        mn_tensor d;
        node p = graph_proto(OP_BN_MEAN, 1, &x);
        st = graph_add(g, &mu, &p);                            /* [C] */
        st = st ? st : mn_reshape(g, &t, mu, 4, c4);
        st = st ? st : mn_sub(g, &d, x, t);
        node pv = graph_proto(OP_BN_MEANSQ, 1, &d);
        st = st ? st : graph_add(g, &var, &pv);                /* [C] */
        st = st ? st : mn_add(g, &t, var, e);
        st = st ? st : mn_rsqrt(g, &scale, t);
        if (!st && weight != MN_NONE) st = mn_mul(g, &scale, scale, weight);
        st = st ? st : mn_reshape(g, &w, scale, 4, c4);
        st = st ? st : mn_mul(g, &y, d, w);
        if (!st && bias != MN_NONE && !(st = mn_reshape(g, &b, bias, 4, c4))) st = mn_add(g, &y, y, b);
        /* running statistics, updated in place at each training step */
        const double cnt = (double)N * (double)HW;
        st = st ? st : add_ema(g, running_mean, mu, momentum, 1.0);
        st = st ? st : add_ema(g, running_var, var, momentum, cnt / (cnt - 1.0));
    } else {
        const int64_t c4[4] = {1, C, 1, 1};
        mn_tensor rm, rv, d;
        st = mn_reshape(g, &rm, running_mean, 4, c4);
        st = st ? st : mn_reshape(g, &rv, running_var, 4, c4);
        st = st ? st : mn_sub(g, &d, x, rm);
        st = st ? st : mn_add(g, &t, rv, e);
        st = st ? st : mn_rsqrt(g, &scale, t);
        if (!st && weight != MN_NONE && !(st = mn_reshape(g, &w, weight, 4, c4))) st = mn_mul(g, &scale, scale, w);
        st = st ? st : mn_mul(g, &y, d, scale);
        if (!st && bias != MN_NONE && !(st = mn_reshape(g, &b, bias, 4, c4))) st = mn_add(g, &y, y, b);
    }
    if (st) return composite_fail(g, n0, st, "batch_norm2d");
    /* running statistics are buffers, not trainable parameters */
    if (NODE(running_mean).op == OP_PARAM) NODE(running_mean).flags |= NODE_F_FROZEN;
    if (NODE(running_var).op == OP_PARAM) NODE(running_var).flags |= NODE_F_FROZEN;
    *out = y;
    return MN_OK;
}

mn_status mn_fold_batch_norm(float *w_out, float *b_out, const float *w, const float *b,
                             int64_t out_channels, int64_t per_channel, const float *gamma,
                             const float *beta, const float *mean, const float *var, float eps) {
    if (!w_out || !b_out || !w || !mean || !var || out_channels < 1 || per_channel < 1 ||
        out_channels > INT64_MAX / per_channel)
        return MN_E_INVALID;
    for (int64_t o = 0; o < out_channels; o++) {
        const double v = (double)var[o] + (double)eps;
        if (!(v > 0.0) || !isfinite(v)) return MN_E_INVALID;
    }
    for (int64_t o = 0; o < out_channels; o++) {
        const double sc = (gamma ? (double)gamma[o] : 1.0) / sqrt((double)var[o] + (double)eps);
        for (int64_t k = 0; k < per_channel; k++)
            w_out[o * per_channel + k] = (float)((double)w[o * per_channel + k] * sc);
        b_out[o] = (float)(((b ? (double)b[o] : 0.0) - (double)mean[o]) * sc + (beta ? (double)beta[o] : 0.0));
    }
    return MN_OK;
}
/* ---- transformer family --------------------------------------------------- */

mn_status mn_embedding(mn_graph *g, mn_tensor *out, mn_tensor table, mn_tensor ids) {
    return binary(g, out, OP_EMBEDDING, table, ids);
}

mn_status mn_rope(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor pos, float theta, int64_t offset) {
    mn_tensor in[2] = {x, pos};
    node p = graph_proto(OP_ROPE, pos == MN_NONE ? 1 : 2, in);
    rope_attrs_set(&p, &(mn_rope_attrs){offset, 0, theta == 0.0f ? 10000.0 : (double)theta});
    return add_op(g, out, &p);
}

mn_status mn_attention(mn_graph *g, mn_tensor *out, mn_tensor q, mn_tensor k, mn_tensor v, mn_tensor pos,
                       const mn_attention_params *ap) {
    mn_tensor in[4] = {q, k, v, pos};
    node p = graph_proto(OP_ATTENTION, pos == MN_NONE ? 3 : 4, in);
    mn_attention_params d = {false, 0, 0.0f};
    if (!ap) ap = &d;
    /* the default scale is resolved here, rounded to f32 like a given one, so
     * every backend and precision multiplies by the same number */
    float scale = ap->scale;
    const int32_t qi = graph_decode(g, q);
    if (scale == 0.0f && qi >= 0 && g->nodes[qi].rank == 4 && g->nodes[qi].shape[3] > 0)
        scale = (float)(1.0 / sqrt((double)g->nodes[qi].shape[3]));
    attention_attrs_set(&p, &(mn_attention_attrs){ap->causal, ap->window, scale, 0});
    return add_op(g, out, &p);
}

mn_status mn_kv_append(mn_graph *g, mn_tensor *out, mn_tensor cache, mn_tensor x, mn_tensor pos) {
    mn_tensor in[3] = {cache, x, pos};
    node p = graph_proto(OP_KV_APPEND, 3, in);
    return add_op(g, out, &p);
}
