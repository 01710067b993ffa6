/* shape.c - shape and dtype rules, one case per op of ops.def.
 *
 * graph_infer() fills a node's dtype, rank and shape from its inputs and
 * parameters (and normalises parameters such as negative axes). Every failure
 * is a status plus a message naming the op and the shapes involved; nothing
 * here asserts on user input. Does not: allocate nodes (graph.c does).
 */
#include <math.h>

#include "graph/attrs.h"
#include "graph/graph.h"

#define IN(i) (&g->nodes[n->in[i]])
#define SHP(buf, nd) shape_str(buf, sizeof buf, (nd)->rank, (nd)->shape)

static void set_shape(node *n, int rank, const int64_t *shape) {
    n->rank = rank;
    for (int i = 0; i < MN_MAX_RANK; i++) n->shape[i] = i < rank ? shape[i] : 0;
}

bool broadcast_shape(int *rank, int64_t *out, int ra, const int64_t *a, int rb, const int64_t *b) {
    int r = ra > rb ? ra : rb;
    int64_t s[MN_MAX_RANK]; /* out may be a or b (where chains two calls) */
    for (int i = 0; i < r; i++) {
        int64_t da = i < r - ra ? 1 : a[i - (r - ra)];
        int64_t db = i < r - rb ? 1 : b[i - (r - rb)];
        if (da != db && da != 1 && db != 1) return false;
        s[i] = da == 1 ? db : da;
    }
    memcpy(out, s, sizeof *s * (size_t)r);
    *rank = r;
    return true;
}

/* True if `from` broadcasts to `to` (numpy rules, one direction). */
static bool broadcasts_to(const node *from, int rank, const int64_t *to) {
    if (from->rank > rank) return false;
    for (int i = 0; i < from->rank; i++) {
        int64_t d = from->shape[from->rank - 1 - i], t = to[rank - 1 - i];
        if (d != t && d != 1) return false;
    }
    return true;
}

/* Input i is a float tensor: f32, or f16/bf16 read as the f32 values it holds. */
static mn_status need_f32(mn_graph *g, const node *n, int i) {
    const node *x = &g->nodes[n->in[i]];
    if (!dtype_is_float(x->dtype)) {
        char sb[96];
        return graph_fail(g, MN_E_DTYPE, "%s: input %d (%%%d %s) must be a float tensor (f32, f16, bf16), got %s",
                          op_table[n->op].name, i, n->in[i], SHP(sb, x), mn_dtype_name(x->dtype));
    }
    return MN_OK;
}

static mn_status same_shape(mn_graph *g, const node *n, int i, int j) {
    const node *a = &g->nodes[n->in[i]], *b = &g->nodes[n->in[j]];
    bool same = a->rank == b->rank;
    for (int k = 0; same && k < a->rank; k++) same = a->shape[k] == b->shape[k];
    if (!same) {
        char sa[96], sb[96];
        return graph_fail(g, MN_E_SHAPE, "%s: shapes %s and %s must be equal", op_table[n->op].name,
                          SHP(sa, a), SHP(sb, b));
    }
    return MN_OK;
}

static mn_status infer_matmul(mn_graph *g, node *n) {
    const node *a = IN(0), *b = IN(1);
    char sa[96], sb[96];
    const mn_matmul_attrs t = matmul_attrs_of(n);
    const char *tn = t.trans_a || t.trans_b ? "matmul (transposed)" : "matmul";
    if (a->rank < 2 || a->rank > 3 || b->rank < 2 || b->rank > 3)
        return graph_fail(g, MN_E_SHAPE, "%s: operands must be rank 2 or 3, got %s and %s", tn,
                          SHP(sa, a), SHP(sb, b));
    int64_t m = a->shape[a->rank - (t.trans_a ? 1 : 2)], ka = a->shape[a->rank - (t.trans_a ? 2 : 1)];
    int64_t kb = b->shape[b->rank - (t.trans_b ? 1 : 2)], nn = b->shape[b->rank - (t.trans_b ? 2 : 1)];
    if (ka != kb)
        return graph_fail(g, MN_E_SHAPE, "%s: inner dimensions differ: %s @ %s (%lld vs %lld)", tn, SHP(sa, a),
                          SHP(sb, b), (long long)ka, (long long)kb);
    int64_t batch = 0;
    if (a->rank == 3 && b->rank == 3 && a->shape[0] != b->shape[0])
        return graph_fail(g, MN_E_SHAPE, "%s: batch dimensions differ: %s @ %s", tn, SHP(sa, a), SHP(sb, b));
    if (a->rank == 3) batch = a->shape[0];
    else if (b->rank == 3) batch = b->shape[0];
    int64_t s[3];
    if (batch) {
        s[0] = batch, s[1] = m, s[2] = nn;
        set_shape(n, 3, s);
    } else {
        s[0] = m, s[1] = nn;
        set_shape(n, 2, s);
    }
    return MN_OK;
}

static mn_status infer_reduce(mn_graph *g, node *n) {
    const node *x = IN(0);
    char sb[96];
    mn_reduce_attrs a = reduce_attrs_of(n);
    if (a.axis == MN_ALL_AXES) {
        set_shape(n, 0, NULL);
        return MN_OK;
    }
    const int64_t given = a.axis;
    if (a.axis < 0) a.axis += x->rank;
    if (a.axis < 0 || a.axis >= x->rank)
        return graph_fail(g, MN_E_SHAPE, "%s: axis %lld out of range for shape %s",
                          op_table[n->op].name, (long long)given, SHP(sb, x));
    reduce_attrs_set(n, &a);
    const int64_t axis = a.axis;
    int64_t s[MN_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++) {
        if (i == axis) {
            if (a.keepdim) s[r++] = 1;
        } else {
            s[r++] = x->shape[i];
        }
    }
    set_shape(n, r, s);
    return MN_OK;
}

static mn_status infer_reshape(mn_graph *g, node *n) {
    const node *x = IN(0);
    char sa[96], sb[96];
    int64_t known = 1, total = node_numel(x);
    int infer_at = -1;
    for (int i = 0; i < n->rank; i++) {
        if (n->shape[i] == -1 && infer_at < 0) infer_at = i;
        else if (n->shape[i] <= 0)
            return graph_fail(g, MN_E_SHAPE, "reshape: %s to %s: dimension %d is %lld", SHP(sa, x),
                              SHP(sb, n), i, (long long)n->shape[i]);
        else if (known > total / n->shape[i]) /* known <= total stays true: no overflow */
            return graph_fail(g, MN_E_SHAPE, "reshape: %s (%lld elements) to %s (more elements)",
                              SHP(sa, x), (long long)total, SHP(sb, n));
        else known *= n->shape[i];
    }
    if (infer_at >= 0) {
        if (known == 0 || total % known)
            return graph_fail(g, MN_E_SHAPE, "reshape: cannot infer -1 reshaping %s to %s", SHP(sa, x), SHP(sb, n));
        n->shape[infer_at] = total / known;
        known *= n->shape[infer_at];
    }
    if (known != total)
        return graph_fail(g, MN_E_SHAPE, "reshape: %s (%lld elements) to %s (%lld elements)", SHP(sa, x),
                          (long long)total, SHP(sb, n), (long long)known);
    return MN_OK;
}

static mn_status infer_permute(mn_graph *g, node *n) {
    const node *x = IN(0);
    char sb[96];
    bool seen[MN_MAX_RANK] = {0};
    int64_t s[MN_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        int64_t p = permute_axis(n, i);
        if (p < 0 || p >= x->rank || seen[p])
            return graph_fail(g, MN_E_SHAPE, "permute: perm is not a permutation of 0..%d for shape %s",
                              x->rank - 1, SHP(sb, x));
        seen[p] = true;
        s[i] = x->shape[p];
    }
    set_shape(n, x->rank, s);
    return MN_OK;
}

static mn_status infer_logits_pair(mn_graph *g, node *n, bool dense) {
    const node *lg = IN(0), *lb = IN(1);
    char sa[96], sb[96];
    const char *on = op_table[n->op].name;
    mn_status st = need_f32(g, n, 0);
    if (st) return st;
    if (lg->rank != 2)
        return graph_fail(g, MN_E_SHAPE, "%s: logits must be [B,C], got %s", on, SHP(sa, lg));
    if (dense) {
        if ((st = need_f32(g, n, 1))) return st;
        if ((st = same_shape(g, n, 0, 1))) return st;
    } else {
        if (lb->dtype != MN_I32)
            return graph_fail(g, MN_E_DTYPE, "%s: labels must be i32 class indices, got %s", on,
                              mn_dtype_name(lb->dtype));
        if (lb->rank != 1 || lb->shape[0] != lg->shape[0])
            return graph_fail(g, MN_E_SHAPE, "%s: labels %s do not match logits %s (want [%lld])", on,
                              SHP(sa, lb), SHP(sb, lg), (long long)lg->shape[0]);
    }
    return MN_OK;
}

/* Output length of a window sweep, 0 if the window does not fit. Callers
 * have checked k, s, d >= 1 and p >= 0; in and k are at most 2^40 (graph
 * sources) and s, p, d come from ints, so only d * (k - 1) can overflow. */
static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    if (k - 1 > (INT64_MAX - 1) / d) return 0;
    int64_t span = d * (k - 1) + 1;
    if (in + 2 * p < span) return 0;
    return (in + 2 * p - span) / s + 1;
}

/* The geometry shared by conv2d and its gradient ops: x [N,C,H,W] and
 * w [O,C/groups,KH,KW] with n's ip (as CONV2D) give the output size oh x ow.
 * Messages name the op `on`. */
static mn_status conv_check(mn_graph *g, const node *n, const char *on, const node *x, const node *w,
                            int64_t *oh, int64_t *ow) {
    char sa[96], sb[96];
    if (x->rank != 4 || w->rank != 4)
        return graph_fail(g, MN_E_SHAPE, "%s: x must be [N,C,H,W] and w [O,C/groups,KH,KW], got %s and %s", on,
                          SHP(sa, x), SHP(sb, w));
    const mn_conv_attrs a = conv_attrs_of(n);
    const struct {
        const char *what;
        int64_t v, min;
    } check[7] = {{"stride", a.stride[0], 1},     {"stride", a.stride[1], 1},     {"padding", a.pad[0], 0},
                  {"padding", a.pad[1], 0},       {"dilation", a.dilation[0], 1}, {"dilation", a.dilation[1], 1},
                  {"groups", a.groups, 1}};
    for (int i = 0; i < 7; i++)
        if (check[i].v < check[i].min)
            return graph_fail(g, MN_E_INVALID, "%s: invalid %s %lld", on, check[i].what, (long long)check[i].v);
    int64_t groups = a.groups;
    if (x->shape[1] % groups || w->shape[0] % groups || w->shape[1] * groups != x->shape[1])
        return graph_fail(g, MN_E_SHAPE, "%s: x %s and w %s disagree on channels with groups=%lld", on,
                          SHP(sa, x), SHP(sb, w), (long long)groups);
    *oh = conv_out(x->shape[2], w->shape[2], a.stride[0], a.pad[0], a.dilation[0]);
    *ow = conv_out(x->shape[3], w->shape[3], a.stride[1], a.pad[1], a.dilation[1]);
    if (*oh < 1 || *ow < 1)
        return graph_fail(g, MN_E_SHAPE, "%s: kernel %s larger than padded input %s", on, SHP(sb, w), SHP(sa, x));
    return MN_OK;
}

static mn_status infer_conv2d(mn_graph *g, node *n) {
    const node *x = IN(0), *w = IN(1);
    char sa[96], sb[96];
    mn_status st;
    int64_t oh, ow;
    for (int i = 0; i < n->nin; i++)
        if ((st = need_f32(g, n, i))) return st;
    if ((st = conv_check(g, n, "conv2d", x, w, &oh, &ow))) return st;
    if (n->nin == 3) {
        const node *b = IN(2);
        if (b->rank != 1 || b->shape[0] != w->shape[0])
            return graph_fail(g, MN_E_SHAPE, "conv2d: bias %s must be [%lld] for w %s", SHP(sa, b),
                              (long long)w->shape[0], SHP(sb, w));
    }
    int64_t s[4] = {x->shape[0], w->shape[0], oh, ow};
    set_shape(n, 4, s);
    return MN_OK;
}

/* CONV2D_BWD_INPUT (dy, w) -> x shape and CONV2D_BWD_WEIGHT (x, dy) -> w
 * shape: the result shape is given (n's rank and shape); it must be the one
 * whose conv2d gives exactly dy's shape. */
static mn_status infer_conv2d_bwd(mn_graph *g, node *n) {
    const char *on = op_table[n->op].name;
    char sa[96], sb[96], sc[96];
    mn_status st;
    if ((st = need_f32(g, n, 0)) || (st = need_f32(g, n, 1))) return st;
    if (n->rank != 4) return graph_fail(g, MN_E_SHAPE, "%s: result shape must be set (rank 4)", on);
    const bool wrt_x = n->op == OP_CONV2D_BWD_INPUT;
    const node *x = wrt_x ? n : IN(0), *w = wrt_x ? IN(1) : n, *dy = wrt_x ? IN(0) : IN(1);
    node part; /* a split weight gradient: one part's shape, dw's */
    const int64_t chunk = wrt_x ? 0 : wgrad_chunk_of(n);
    if (chunk < 0) return graph_fail(g, MN_E_INVALID, "%s: K chunk %lld < 0", on, (long long)chunk);
    if (chunk > 0) {
        if (dy->rank != 4 || dy->shape[1] < 1)
            return graph_fail(g, MN_E_SHAPE, "%s: dy must be [N,O,OH,OW], got %s", on, SHP(sa, dy));
        const int64_t k = dy->shape[0] * dy->shape[2] * dy->shape[3], parts = k / chunk + (k % chunk != 0);
        if (n->shape[0] % dy->shape[1] != 0 || n->shape[0] / dy->shape[1] != parts)
            return graph_fail(g, MN_E_SHAPE, "%s: result %s must hold %lld partial gradients (K %lld in chunks of %lld) "
                              "of %lld output channels each", on, SHP(sa, n), (long long)parts, (long long)k,
                              (long long)chunk, (long long)dy->shape[1]);
        part = *n;
        part.shape[0] = dy->shape[1];
        w = &part;
    }
    int64_t oh, ow;
    if ((st = conv_check(g, n, on, x, w, &oh, &ow))) return st;
    if (dy->rank != 4 || dy->shape[0] != x->shape[0] || dy->shape[1] != w->shape[0] || dy->shape[2] != oh ||
        dy->shape[3] != ow)
        return graph_fail(g, MN_E_SHAPE, "%s: dy %s is not the conv2d output of x %s and w %s (want [%lld,%lld,%lld,%lld])",
                          on, SHP(sa, dy), SHP(sb, x), SHP(sc, w), (long long)x->shape[0], (long long)w->shape[0],
                          (long long)oh, (long long)ow);
    return MN_OK;
}

/* Pool parameters (kernel, stride, padding of n, as MAXPOOL2D) and the output
 * size of x [N,C,H,W]. Messages name the op `on`. */
static mn_status pool_check(mn_graph *g, const node *n, const char *on, const node *x, int64_t *oh, int64_t *ow) {
    char sa[96];
    const mn_pool_attrs a = pool_attrs_of(n);
    if (x->rank != 4) return graph_fail(g, MN_E_SHAPE, "%s: x must be [N,C,H,W], got %s", on, SHP(sa, x));
    const struct {
        const char *what;
        int64_t v, min;
    } check[6] = {{"kernel", a.kernel[0], 1}, {"kernel", a.kernel[1], 1}, {"stride", a.stride[0], 1},
                  {"stride", a.stride[1], 1}, {"padding", a.pad[0], 0},   {"padding", a.pad[1], 0}};
    for (int i = 0; i < 6; i++)
        if (check[i].v < check[i].min)
            return graph_fail(g, MN_E_INVALID, "%s: invalid %s %lld", on, check[i].what, (long long)check[i].v);
    if (a.pad[0] * 2 > a.kernel[0] || a.pad[1] * 2 > a.kernel[1])
        return graph_fail(g, MN_E_INVALID, "%s: padding %lld,%lld exceeds half the kernel %lld,%lld", on,
                          (long long)a.pad[0], (long long)a.pad[1], (long long)a.kernel[0], (long long)a.kernel[1]);
    *oh = conv_out(x->shape[2], a.kernel[0], a.stride[0], a.pad[0], 1);
    *ow = conv_out(x->shape[3], a.kernel[1], a.stride[1], a.pad[1], 1);
    if (*oh < 1 || *ow < 1)
        return graph_fail(g, MN_E_SHAPE, "%s: kernel %lldx%lld larger than input %s", on, (long long)a.kernel[0],
                          (long long)a.kernel[1], SHP(sa, x));
    return MN_OK;
}

static mn_status infer_maxpool(mn_graph *g, node *n) {
    const node *x = IN(0);
    mn_status st = need_f32(g, n, 0);
    if (st) return st;
    int64_t oh, ow;
    if ((st = pool_check(g, n, "max_pool2d", x, &oh, &ow))) return st;
    int64_t s[4] = {x->shape[0], x->shape[1], oh, ow};
    set_shape(n, 4, s);
    return MN_OK;
}

static void copy_shape_of(node *n, const node *x) { set_shape(n, x->rank, x->shape); }

/* The parameterised pointwise ops: abs, clamp, pow, where, dropout and their
 * helpers pw_bwd and ce_count; parameters are checked here too. */
static mn_status infer_pointwise(mn_graph *g, node *n) {
    char sa[96], sb[96], sc[96];
    const char *on = op_table[n->op].name;
    mn_status st;
    switch (n->op) {
    case OP_ABS: case OP_CLAMP: case OP_POW: {
        const mn_pw_attrs a = pw_attrs_of(n);
        if ((st = need_f32(g, n, 0))) return st;
        if (n->op == OP_CLAMP && !(a.min <= a.max)) /* also NaN */
            return graph_fail(g, MN_E_INVALID, "clamp: min %g must be <= max %g", a.min, a.max);
        if (n->op == OP_POW && !isfinite(a.exponent))
            return graph_fail(g, MN_E_INVALID, "pow: exponent %g must be finite", a.exponent);
        copy_shape_of(n, IN(0));
        return MN_OK;
    }
    case OP_WHERE: {
        for (int i = 0; i < 3; i++)
            if ((st = need_f32(g, n, i))) return st;
        const node *c = IN(0), *a = IN(1), *b = IN(2);
        int r;
        int64_t s[MN_MAX_RANK];
        if (!broadcast_shape(&r, s, c->rank, c->shape, a->rank, a->shape) ||
            !broadcast_shape(&r, s, r, s, b->rank, b->shape))
            return graph_fail(g, MN_E_SHAPE, "where: shapes %s (cond), %s (a) and %s (b) do not broadcast",
                              SHP(sa, c), SHP(sb, a), SHP(sc, b));
        set_shape(n, r, s);
        return MN_OK;
    }
    case OP_DROPOUT:
        if ((st = need_f32(g, n, 0))) return st;
        if (!(dropout_attrs_of(n).p >= 0 && dropout_attrs_of(n).p <= 1))
            return graph_fail(g, MN_E_INVALID, "dropout: probability %g outside [0, 1]", dropout_attrs_of(n).p);
        if (n->nin == 2 && (IN(1)->dtype != MN_I32 || node_numel(IN(1)) != 1))
            return graph_fail(g, MN_E_DTYPE, "dropout: the counter must be an i32 scalar, got %s %s",
                              mn_dtype_name(IN(1)->dtype), SHP(sa, IN(1)));
        copy_shape_of(n, IN(0));
        return MN_OK;
    case OP_PW_BWD:
        if (bwd_of(n) != OP_ABS && bwd_of(n) != OP_CLAMP && bwd_of(n) != OP_POW)
            return graph_fail(g, MN_E_INVALID, "pw_bwd: ip[0] = %lld is not abs, clamp or pow", (long long)bwd_of(n));
        copy_shape_of(n, IN(0));
        return same_shape(g, n, 0, 1);
    case OP_CE_COUNT:
        if (IN(0)->dtype != MN_I32 || IN(0)->rank != 1)
            return graph_fail(g, MN_E_DTYPE, "ce_count: labels must be i32 [B], got %s %s",
                              mn_dtype_name(IN(0)->dtype), SHP(sa, IN(0)));
        set_shape(n, 0, NULL);
        return MN_OK;
    default:
        return graph_fail(g, MN_E_INVALID, "%s: not a pointwise-family op", on);
    }
}

/* The options of cross_entropy, ce_rows and the backward: ip[0] in {0, 1},
 * fp[0] in [0, 1]; cross_entropy's and the backward's rows are f32 [B,3], the
 * backward's optional count an f32 scalar. Logits and labels checked before. */
static mn_status infer_ce_options(mn_graph *g, const node *n) {
    const char *on = op_table[n->op].name;
    const mn_ce_attrs a = ce_attrs_of(n);
    char sa[96];
    if (a.use_ignore != 0 && a.use_ignore != 1)
        return graph_fail(g, MN_E_INVALID, "%s: ip[0] (use ignore_index) is %lld", on, (long long)a.use_ignore);
    if (a.use_ignore && (a.ignore_index < INT32_MIN || a.ignore_index > INT32_MAX))
        return graph_fail(g, MN_E_INVALID, "%s: ignore_index %lld is not an i32", on, (long long)a.ignore_index);
    if (!(a.smoothing >= 0 && a.smoothing <= 1))
        return graph_fail(g, MN_E_INVALID, "%s: label smoothing %g outside [0, 1]", on, a.smoothing);
    if (n->op == OP_CE_ROWS) return MN_OK;
    /* cross_entropy and its backward: the rows of ce_rows [B,3] */
    const int ri = n->op == OP_CROSS_ENTROPY ? 2 : 3;
    const node *r = IN(ri);
    if (r->dtype != MN_F32 || r->rank != 2 || r->shape[0] != IN(0)->shape[0] || r->shape[1] != 3)
        return graph_fail(g, MN_E_SHAPE, "%s: the row statistics must be f32 [%lld,3], got %s %s", on,
                          (long long)IN(0)->shape[0], mn_dtype_name(r->dtype), SHP(sa, r));
    if (n->nin == 5 && (IN(4)->dtype != MN_F32 || node_numel(IN(4)) != 1))
        return graph_fail(g, MN_E_SHAPE, "%s: the row count must be an f32 scalar, got %s", on, SHP(sa, IN(4)));
    return MN_OK;
}

/* ---- layout family -------------------------------------------------------- */

static mn_status infer_slice(mn_graph *g, node *n) {
    const node *x = IN(0);
    char sa[96];
    mn_slice_attrs a = slice_attrs_of(n);
    int64_t axis = a.axis;
    if (axis < 0) axis += x->rank;
    if (x->rank < 1 || axis < 0 || axis >= x->rank)
        return graph_fail(g, MN_E_SHAPE, "slice: axis %lld out of range for shape %s", (long long)a.axis, SHP(sa, x));
    const int64_t d = x->shape[axis], start = a.start, len = a.length;
    if (start < 0 || len < 1 || start >= d || len > d - start)
        return graph_fail(g, MN_E_SHAPE, "slice: [%lld, %lld + %lld) is not a non-empty part of axis %lld of %s",
                          (long long)start, (long long)start, (long long)len, (long long)axis, SHP(sa, x));
    a.axis = axis;
    slice_attrs_set(n, &a);
    int64_t s[MN_MAX_RANK];
    for (int i = 0; i < x->rank; i++) s[i] = i == axis ? len : x->shape[i];
    set_shape(n, x->rank, s);
    return MN_OK;
}

static mn_status infer_pad(mn_graph *g, node *n) {
    const node *x = IN(0);
    char sa[96];
    int64_t s[MN_MAX_RANK];
    const mn_pad_attrs p = pad_attrs_of(n);
    for (int i = 0; i < MN_MAX_RANK; i++) {
        const int64_t b = p.before[i], a = p.after[i];
        if (i >= x->rank) {
            if (b || a)
                return graph_fail(g, MN_E_SHAPE, "pad: padding given for axis %d of %s (rank %d)", i, SHP(sa, x), x->rank);
            continue;
        }
        /* each side at most 2^40 (the element limit), so the sum cannot overflow */
        if (b < 0 || a < 0 || b > ((int64_t)1 << 40) || a > ((int64_t)1 << 40))
            return graph_fail(g, MN_E_SHAPE, "pad: axis %d of %s: padding %lld before, %lld after (must be 0..2^40)", i,
                              SHP(sa, x), (long long)b, (long long)a);
        s[i] = x->shape[i] + b + a;
    }
    set_shape(n, x->rank, s);
    return MN_OK;
}

static mn_status infer_concat(mn_graph *g, node *n) {
    const node *x0 = IN(0);
    char sa[96], sb[96];
    mn_status st;
    int64_t axis = concat_axis(n);
    if (axis < 0) axis += x0->rank;
    if (x0->rank < 1 || axis < 0 || axis >= x0->rank)
        return graph_fail(g, MN_E_SHAPE, "concat: axis %lld out of range for shape %s", (long long)concat_axis(n),
                          SHP(sa, x0));
    concat_axis_set(n, axis);
    int64_t s[MN_MAX_RANK], total = 0;
    for (int k = 0; k < n->nin; k++) {
        const node *x = IN(k);
        if ((st = need_f32(g, n, k))) return st;
        bool ok = x->rank == x0->rank;
        for (int i = 0; ok && i < x0->rank; i++) ok = i == axis || x->shape[i] == x0->shape[i];
        if (!ok)
            return graph_fail(g, MN_E_SHAPE, "concat: input %d %s does not match input 0 %s outside axis %lld", k,
                              SHP(sa, x), SHP(sb, x0), (long long)axis);
        total += x->shape[axis]; /* at most 6 * 2^40 */
    }
    for (int i = 0; i < x0->rank; i++) s[i] = i == axis ? total : x0->shape[i];
    set_shape(n, x0->rank, s);
    return MN_OK;
}

/* Average pooling parameters (pool_check plus the divisor mode) and the
 * output size of x [N,C,H,W]. */
static mn_status avgpool_check(mn_graph *g, const node *n, const node *x, int64_t *oh, int64_t *ow) {
    const char *on = op_table[n->op].name;
    const int64_t divisor = pool_attrs_of(n).divisor;
    mn_status st = pool_check(g, n, on, x, oh, ow);
    if (!st && (divisor < POOL_DIV_INSIDE || divisor > POOL_DIV_NONE))
        st = graph_fail(g, MN_E_INVALID, "%s: invalid divisor mode %lld", on, (long long)divisor);
    return st;
}

static mn_status infer_avgpool(mn_graph *g, node *n) {
    const node *x = IN(0);
    int64_t oh, ow;
    mn_status st = need_f32(g, n, 0);
    if (st || (st = avgpool_check(g, n, x, &oh, &ow))) return st;
    int64_t s[4] = {x->shape[0], x->shape[1], oh, ow};
    set_shape(n, 4, s);
    return MN_OK;
}

/* The result (x's shape) is given; pooling it must give dy's shape. */
static mn_status infer_avgpool_bwd(mn_graph *g, node *n) {
    const node *dy = IN(0);
    char sa[96], sb[96];
    int64_t oh, ow;
    mn_status st = need_f32(g, n, 0);
    if (st) return st;
    if (n->rank != 4) return graph_fail(g, MN_E_SHAPE, "avgpool2d_bwd: result shape must be set (rank 4)");
    if ((st = avgpool_check(g, n, n, &oh, &ow))) return st;
    if (dy->rank != 4 || dy->shape[0] != n->shape[0] || dy->shape[1] != n->shape[1] || dy->shape[2] != oh ||
        dy->shape[3] != ow)
        return graph_fail(g, MN_E_SHAPE, "avgpool2d_bwd: dy %s is not the pooled shape of %s", SHP(sa, dy), SHP(sb, n));
    return MN_OK;
}

static mn_status infer_upsample(mn_graph *g, node *n) {
    const node *x = IN(0);
    char sa[96];
    mn_status st = need_f32(g, n, 0);
    if (st) return st;
    if (x->rank != 4) return graph_fail(g, MN_E_SHAPE, "upsample_nearest2d: x must be [N,C,H,W], got %s", SHP(sa, x));
    const mn_upsample_attrs a = upsample_attrs_of(n);
    if (a.scale[0] < 1 || a.scale[1] < 1 || a.scale[0] > 1024 || a.scale[1] > 1024)
        return graph_fail(g, MN_E_INVALID, "upsample_nearest2d: scale %lld,%lld (must be 1..1024)",
                          (long long)a.scale[0], (long long)a.scale[1]);
    int64_t s[4] = {x->shape[0], x->shape[1], x->shape[2] * a.scale[0], x->shape[3] * a.scale[1]};
    set_shape(n, 4, s);
    return MN_OK;
}

/* ---- transformer family ---------------------------------------------------- */

/* Positions, offsets and windows stay within 2^29 so that every backend can
 * form i + offset in 32-bit arithmetic. */
#define TR_POS_LIMIT ((int64_t)1 << 29)

/* Input i, if present, is an i32 tensor of one element (a host-written
 * position). */
static mn_status need_pos(mn_graph *g, const node *n, int i) {
    if (n->nin <= i) return MN_OK;
    const node *p = IN(i);
    char sb[96];
    if (p->dtype != MN_I32 || node_numel(p) != 1)
        return graph_fail(g, MN_E_DTYPE, "%s: the position (input %d, %%%d) must be an i32 tensor of one element, got %s %s",
                          op_table[n->op].name, i, n->in[i], mn_dtype_name(p->dtype), SHP(sb, p));
    return MN_OK;
}

static bool shape_is(const node *x, int rank, const int64_t *s) {
    if (x->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (x->shape[i] != s[i]) return false;
    return true;
}

/* table [V,D], ids i32 rank 1..3 -> ids.shape + [D]. */
static mn_status infer_embedding(mn_graph *g, node *n) {
    const node *t = IN(0), *ids = IN(1);
    char sa[96], sb[96];
    mn_status st = need_f32(g, n, 0);
    if (st) return st;
    if (t->rank != 2)
        return graph_fail(g, MN_E_SHAPE, "embedding: table must be [V,D], got %s", SHP(sa, t));
    if (ids->dtype != MN_I32)
        return graph_fail(g, MN_E_DTYPE, "embedding: ids must be i32, got %s %s", mn_dtype_name(ids->dtype), SHP(sb, ids));
    if (ids->rank < 1 || ids->rank > MN_MAX_RANK - 1)
        return graph_fail(g, MN_E_SHAPE, "embedding: ids must have rank 1..%d, got %s (table %s)", MN_MAX_RANK - 1,
                          SHP(sb, ids), SHP(sa, t));
    int64_t s[MN_MAX_RANK];
    for (int i = 0; i < ids->rank; i++) s[i] = ids->shape[i];
    s[ids->rank] = t->shape[1];
    set_shape(n, ids->rank + 1, s);
    return MN_OK;
}

/* (ids, dy) -> [V,D] (node shape, set by autodiff). */
static mn_status infer_embedding_bwd(mn_graph *g, node *n) {
    const node *ids = IN(0), *dy = IN(1);
    char sa[96], sb[96], sc[96];
    mn_status st = need_f32(g, n, 1);
    if (st) return st;
    int64_t want[MN_MAX_RANK];
    for (int i = 0; i < ids->rank && i < MN_MAX_RANK; i++) want[i] = ids->shape[i];
    if (n->rank == 2 && ids->rank < MN_MAX_RANK) want[ids->rank] = n->shape[1];
    if (ids->dtype != MN_I32 || n->rank != 2 || ids->rank >= MN_MAX_RANK || !shape_is(dy, ids->rank + 1, want))
        return graph_fail(g, MN_E_SHAPE, "embedding_bwd: ids %s %s, dy %s and table %s do not agree",
                          mn_dtype_name(ids->dtype), SHP(sa, ids), SHP(sb, dy), SHP(sc, n));
    return MN_OK;
}

/* x [..., T, Dh] (Dh even)[, pos] -> x shape. */
static mn_status infer_rope(mn_graph *g, node *n) {
    const node *x = IN(0);
    char sa[96];
    mn_status st;
    if ((st = need_f32(g, n, 0)) || (st = need_pos(g, n, 1))) return st;
    if (x->rank < 2 || x->shape[x->rank - 1] % 2)
        return graph_fail(g, MN_E_SHAPE, "rope: x must be [..., T, Dh] with Dh even, got %s", SHP(sa, x));
    const mn_rope_attrs a = rope_attrs_of(n);
    if (!(a.theta > 0) || !isfinite(a.theta))
        return graph_fail(g, MN_E_INVALID, "rope: theta %g must be finite and > 0", a.theta);
    if (a.offset < -TR_POS_LIMIT || a.offset > TR_POS_LIMIT || x->shape[x->rank - 2] > TR_POS_LIMIT)
        return graph_fail(g, MN_E_INVALID, "rope: offset %lld or length %lld beyond 2^29 (x %s)", (long long)a.offset,
                          (long long)x->shape[x->rank - 2], SHP(sa, x));
    if (a.inverse != 0 && a.inverse != 1)
        return graph_fail(g, MN_E_INVALID, "rope: inverse flag %lld", (long long)a.inverse);
    copy_shape_of(n, x);
    return MN_OK;
}

/* q [B,Hq,Tq,D], k, v [B,Hkv,Tk,D] (inputs 0..2) and the attention
 * parameters; pos_at: index of the optional position input. */
static mn_status check_qkv(mn_graph *g, node *n, int pos_at) {
    const node *q = IN(0), *k = IN(1), *v = IN(2);
    char sa[96], sb[96], sc[96];
    const char *on = op_table[n->op].name;
    mn_status st;
    for (int i = 0; i < 3; i++)
        if ((st = need_f32(g, n, i))) return st;
    if ((st = need_pos(g, n, pos_at))) return st;
    if (q->rank != 4 || k->rank != 4 || !shape_is(v, k->rank, k->shape) || q->shape[0] != k->shape[0] ||
        q->shape[3] != k->shape[3] || q->shape[1] % k->shape[1])
        return graph_fail(g, MN_E_SHAPE,
                          "%s: q %s, k %s, v %s: want q [B,Hq,Tq,D], k and v [B,Hkv,Tk,D] with Hq a multiple of Hkv",
                          on, SHP(sa, q), SHP(sb, k), SHP(sc, v));
    if (q->shape[2] > TR_POS_LIMIT || k->shape[2] > TR_POS_LIMIT)
        return graph_fail(g, MN_E_SHAPE, "%s: sequence lengths beyond 2^29 (q %s, k %s)", on, SHP(sa, q), SHP(sb, k));
    const mn_attention_attrs a = attention_attrs_of(n);
    if (a.causal != 0 && a.causal != 1)
        return graph_fail(g, MN_E_INVALID, "%s: causal flag %lld", on, (long long)a.causal);
    if (a.window < 0 || a.window > TR_POS_LIMIT || (a.window && !a.causal))
        return graph_fail(g, MN_E_INVALID, "%s: window %lld must be in [0, 2^29] and needs causal attention", on,
                          (long long)a.window);
    if (!isfinite(a.scale) || a.scale == 0)
        return graph_fail(g, MN_E_INVALID, "%s: scale %g must be finite and non-zero", on, a.scale);
    return MN_OK;
}

static mn_status infer_attention(mn_graph *g, node *n) {
    mn_status st = check_qkv(g, n, 3);
    if (st) return st;
    if (n->op == OP_ATTENTION) copy_shape_of(n, IN(0));
    else set_shape(n, 3, IN(0)->shape);
    return MN_OK;
}

/* (out, dout, lse) -> [B,Hq,Tq,2]. */
static mn_status infer_attention_bwd_prep(mn_graph *g, node *n) {
    const node *o = IN(0), *lse = IN(2);
    char sa[96], sb[96];
    mn_status st = same_shape(g, n, 0, 1);
    if (st) return st;
    if (o->rank != 4 || !shape_is(lse, 3, o->shape))
        return graph_fail(g, MN_E_SHAPE, "attention_bwd_prep: out %s and lse %s disagree", SHP(sa, o), SHP(sb, lse));
    int64_t s[4] = {o->shape[0], o->shape[1], o->shape[2], 2};
    set_shape(n, 4, s);
    return MN_OK;
}

/* Row normalisations: x [..., D] (rank >= 1); the [D] inputs (weight, bias)
 * from `vec0` on; dy (backward) at input 1 with x's shape. RMS_NORM_BWD_W
 * and LAYER_NORM_BWD_W give [ceil(rows / ip[0]), D]. */
static mn_status infer_norm(mn_graph *g, node *n) {
    const char *on = op_table[n->op].name;
    const node *x = IN(0);
    const bool bwd = n->op != OP_RMS_NORM && n->op != OP_LAYER_NORM;
    const bool partial = n->op == OP_RMS_NORM_BWD_W || n->op == OP_LAYER_NORM_BWD_W;
    char sa[96], sb[96];
    mn_status st;
    for (int i = 0; i < n->nin; i++)
        if ((st = need_f32(g, n, i))) return st;
    if (x->rank < 1) return graph_fail(g, MN_E_SHAPE, "%s: x must have rank >= 1, got a scalar", on);
    const double eps = norm_attrs_of(n).eps;
    if (!(eps >= 0) || isinf(eps)) return graph_fail(g, MN_E_INVALID, "%s: eps %g must be finite and >= 0", on, eps);
    if (n->op == OP_LAYER_NORM && n->nin != 1 + norm_attrs_of(n).weight + norm_attrs_of(n).bias)
        return graph_fail(g, MN_E_INVALID, "layer_norm: %d inputs disagree with the weight/bias flags", n->nin);
    if (bwd && (st = same_shape(g, n, 0, 1))) return st;
    const int64_t d = x->shape[x->rank - 1];
    for (int i = bwd ? 2 : 1; i < n->nin; i++)
        if (!shape_is(IN(i), 1, &d))
            return graph_fail(g, MN_E_SHAPE, "%s: input %d %s must be [%lld] for x %s", on, i, SHP(sa, IN(i)),
                              (long long)d, SHP(sb, x));
    if (!partial) {
        copy_shape_of(n, x);
        return MN_OK;
    }
    const int64_t br = norm_block(n);
    if (br < 1 || br > 1024) return graph_fail(g, MN_E_INVALID, "%s: block of %lld rows outside [1, 1024]", on, (long long)br);
    const int64_t rows = d ? node_numel(x) / d : 0, s[2] = {(rows + br - 1) / br, d};
    set_shape(n, 2, s);
    return MN_OK;
}

static mn_status infer_ema(mn_graph *g, node *n) {
    const node *r = IN(0), *v = IN(1);
    char sa[96], sb[96];
    mn_status st;
    if ((st = need_f32(g, n, 0)) || (st = need_f32(g, n, 1))) return st;
    if (n->nin > 2 && (IN(2)->op != OP_STEP_GATE))
        return graph_fail(g, MN_E_INVALID, "ema_update: input 2 must be a step_gate");
    if (r->op != OP_PARAM)
        return graph_fail(g, MN_E_INVALID, "ema_update: the running statistic (%%%d) must be a parameter", n->in[0]);
    if (node_numel(r) != node_numel(v))
        return graph_fail(g, MN_E_SHAPE, "ema_update: running %s and value %s differ in size", SHP(sa, r), SHP(sb, v));
    const mn_ema_attrs a = ema_attrs_of(n);
    if (!(a.momentum >= 0.0 && a.momentum <= 1.0) || !isfinite(a.scale))
        return graph_fail(g, MN_E_INVALID, "ema_update: momentum %g must be in [0, 1] and scale %g finite", a.momentum,
                          a.scale);
    copy_shape_of(n, r);
    return MN_OK;
}

/* (q, k, v, dout, prep[, pos]) -> dq (q shape) or dk/dv (k shape). */
static mn_status infer_attention_bwd(mn_graph *g, node *n) {
    const node *q = IN(0), *dout = IN(3), *prep = IN(4);
    char sa[96], sb[96];
    mn_status st = check_qkv(g, n, 5);
    if (st) return st;
    int64_t ps[4] = {q->shape[0], q->shape[1], q->shape[2], 2};
    if (!shape_is(dout, 4, q->shape) || !shape_is(prep, 4, ps))
        return graph_fail(g, MN_E_SHAPE, "%s: dout %s or prep %s does not match q", op_table[n->op].name,
                          SHP(sa, dout), SHP(sb, prep));
    const int64_t wrt = attention_attrs_of(n).wrt;
    if (n->op == OP_ATTENTION_BWD_KV && (wrt < 0 || wrt > 2))
        return graph_fail(g, MN_E_INVALID, "attention_bwd_kv: wrt %lld", (long long)wrt);
    copy_shape_of(n, n->op == OP_ATTENTION_BWD_Q ? q : IN(1));
    if (n->op == OP_ATTENTION_BWD_KV && wrt == 2) n->shape[0] *= 2; /* [2B, Hkv, Tk, D] = (dk; dv) */
    return MN_OK;
}

/* (cache [..., Tmax, D], x [..., Tnew, D], pos) -> cache shape. */
static mn_status infer_kv_append(mn_graph *g, node *n) {
    const node *c = IN(0), *x = IN(1);
    char sa[96], sb[96];
    mn_status st;
    if ((st = need_f32(g, n, 0)) || (st = need_f32(g, n, 1)) || (st = need_pos(g, n, 2))) return st;
    if (c->op != OP_STATE && c->op != OP_KV_APPEND)
        return graph_fail(g, MN_E_INVALID, "kv_append: the cache (%%%d %s) must be a state tensor (mn_graph_state) or an append's result, got op %s",
                          n->in[0], SHP(sa, c), op_table[c->op].name);
    bool ok = c->rank >= 2 && x->rank == c->rank && x->shape[x->rank - 1] == c->shape[c->rank - 1];
    for (int i = 0; ok && i < c->rank - 2; i++) ok = x->shape[i] == c->shape[i];
    if (!ok)
        return graph_fail(g, MN_E_SHAPE, "kv_append: x %s does not fit cache %s (want [..., Tnew, D] with the cache's leading dims and D)",
                          SHP(sb, x), SHP(sa, c));
    copy_shape_of(n, c);
    return MN_OK;
}


mn_status graph_infer(mn_graph *g, node *n) {
    char sa[96], sb[96];
    const char *on = op_table[n->op].name;
    mn_status st;
    n->dtype = MN_F32;
    switch (n->op) {
    case OP_INPUT: case OP_PARAM: case OP_STATE: case OP_CONST:
        return MN_OK;
    case OP_MATMUL:
        if ((st = need_f32(g, n, 0)) || (st = need_f32(g, n, 1))) return st;
        return infer_matmul(g, n);
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: {
        if ((st = need_f32(g, n, 0)) || (st = need_f32(g, n, 1))) return st;
        const node *a = IN(0), *b = IN(1);
        int r;
        int64_t s[MN_MAX_RANK];
        if (!broadcast_shape(&r, s, a->rank, a->shape, b->rank, b->shape))
            return graph_fail(g, MN_E_SHAPE, "%s: shapes %s and %s do not broadcast", on, SHP(sa, a), SHP(sb, b));
        set_shape(n, r, s);
        return MN_OK;
    }
    case OP_SCALE: case OP_NEG: case OP_EXP: case OP_LOG: case OP_SQRT: case OP_RSQRT:
    case OP_RELU: case OP_SIGMOID: case OP_TANH: case OP_GELU: case OP_GELU_TANH: case OP_SILU:
    case OP_STOP_GRAD: case OP_SIN: case OP_COS:
        if ((st = need_f32(g, n, 0))) return st;
        copy_shape_of(n, IN(0));
        return MN_OK;
    case OP_CAST:
        if ((st = need_f32(g, n, 0))) return st;
        if (!dtype_is_float((mn_dtype)n->ip[0]))
            return graph_fail(g, MN_E_DTYPE, "cast: to %s (%lld); a cast goes to f32, f16 or bf16",
                              mn_dtype_name((mn_dtype)n->ip[0]), (long long)n->ip[0]);
        n->dtype = (mn_dtype)n->ip[0];
        copy_shape_of(n, IN(0));
        return MN_OK;
    case OP_SUM: case OP_MEAN: case OP_MAX:
        if ((st = need_f32(g, n, 0))) return st;
        return infer_reduce(g, n);
    case OP_SOFTMAX: case OP_LOG_SOFTMAX:
        if ((st = need_f32(g, n, 0))) return st;
        if (IN(0)->rank < 1)
            return graph_fail(g, MN_E_SHAPE, "%s: needs rank >= 1, got a scalar", on);
        copy_shape_of(n, IN(0));
        return MN_OK;
    case OP_RESHAPE:
        n->dtype = IN(0)->dtype;
        return infer_reshape(g, n);
    case OP_PERMUTE:
        n->dtype = IN(0)->dtype;
        return infer_permute(g, n);
    case OP_BROADCAST:
        if ((st = need_f32(g, n, 0))) return st;
        if (!broadcasts_to(IN(0), n->rank, n->shape))
            return graph_fail(g, MN_E_SHAPE, "broadcast: %s does not broadcast to %s", SHP(sa, IN(0)), SHP(sb, n));
        return MN_OK;
    case OP_REDUCE_TO:
        if ((st = need_f32(g, n, 0))) return st;
        if (!broadcasts_to(n, IN(0)->rank, IN(0)->shape))
            return graph_fail(g, MN_E_SHAPE, "reduce_to: %s cannot be summed down to %s", SHP(sa, IN(0)), SHP(sb, n));
        return MN_OK;
    case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_DENSE:
        if ((st = infer_logits_pair(g, n, n->op == OP_CROSS_ENTROPY_DENSE))) return st;
        if (n->op == OP_CROSS_ENTROPY && (st = infer_ce_options(g, n))) return st;
        set_shape(n, 0, NULL);
        return MN_OK;
    case OP_CE_ROWS: {
        const int64_t s[2] = {IN(0)->rank == 2 ? IN(0)->shape[0] : 0, 3};
        if ((st = infer_logits_pair(g, n, false)) || (st = infer_ce_options(g, n))) return st;
        set_shape(n, 2, s);
        return MN_OK;
    }
    case OP_MSE:
        if ((st = need_f32(g, n, 0)) || (st = need_f32(g, n, 1)) || (st = same_shape(g, n, 0, 1))) return st;
        set_shape(n, 0, NULL);
        return MN_OK;
    case OP_CONV2D:
        return infer_conv2d(g, n);
    case OP_MAXPOOL2D:
        return infer_maxpool(g, n);
    /* Backward helpers and optimizer ops are created by the library, which
     * sets their shapes; the checks here catch library bugs early. */
    case OP_UNARY_BWD: case OP_MAX_BWD:
        copy_shape_of(n, IN(0));
        return same_shape(g, n, 0, 0);
    case OP_SOFTMAX_BWD: case OP_LOG_SOFTMAX_BWD:
        copy_shape_of(n, IN(0));
        return same_shape(g, n, 0, 1);
    case OP_CROSS_ENTROPY_BWD:
        copy_shape_of(n, IN(0));
        if ((st = infer_logits_pair(g, n, false))) return st;
        return infer_ce_options(g, n);
    case OP_CROSS_ENTROPY_DENSE_BWD:
        copy_shape_of(n, IN(0));
        return infer_logits_pair(g, n, true);
    case OP_CONV2D_BWD_INPUT: case OP_CONV2D_BWD_WEIGHT:
        return infer_conv2d_bwd(g, n);
    case OP_MAXPOOL2D_BWD:
        if (n->rank != 4) return graph_fail(g, MN_E_SHAPE, "%s: result shape must be set (rank 4)", on);
        return MN_OK;
    case OP_SGD_UPDATE: case OP_ADAM_UPDATE:
        copy_shape_of(n, IN(0));
        if ((st = same_shape(g, n, 0, 1))) return st;
        return MN_OK;
    case OP_SUMSQ:
        if (sumsq_block(n) < 0) return graph_fail(g, MN_E_INVALID, "sumsq: block %lld < 0", (long long)sumsq_block(n));
        if (sumsq_block(n) > 0) { /* [blocks] */
            const int64_t nb = sumsq_blocks(node_numel(IN(0)), sumsq_block(n));
            set_shape(n, 1, &nb);
            return MN_OK;
        }
        set_shape(n, 0, NULL);
        return MN_OK;
    case OP_CLIP_COEF:
        set_shape(n, 0, NULL);
        return MN_OK;
    case OP_STEP_GATE: { /* (loss[, sumsq][, scale]) -> [2] */
        const int64_t two = 2;
        for (int i = 0; i < n->nin; i++)
            if ((st = need_f32(g, n, i))) return st;
        if (n->ip[0] != 0 && (n->ip[0] != 1 || n->nin < 2 || node_numel(IN(n->nin - 1)) != 1))
            return graph_fail(g, MN_E_INVALID, "step_gate: a loss scale needs its flag (ip[0] = 1) and a last input "
                              "of one element");
        set_shape(n, 1, &two);
        return MN_OK;
    }
    case OP_ABS: case OP_CLAMP: case OP_POW: case OP_WHERE: case OP_DROPOUT: case OP_PW_BWD: case OP_CE_COUNT:
        return infer_pointwise(g, n);
    /* layout family */
    case OP_SLICE:
        if ((st = need_f32(g, n, 0))) return st;
        return infer_slice(g, n);
    case OP_PAD:
        if ((st = need_f32(g, n, 0))) return st;
        return infer_pad(g, n);
    case OP_CONCAT:
        return infer_concat(g, n);
    case OP_AVGPOOL2D:
        return infer_avgpool(g, n);
    case OP_AVGPOOL2D_BWD:
        return infer_avgpool_bwd(g, n);
    case OP_UPSAMPLE_NEAREST2D:
        return infer_upsample(g, n);
    case OP_EMA_UPDATE:
        return infer_ema(g, n);
    case OP_BN_MEAN: case OP_BN_MEANSQ: {
        if ((st = need_f32(g, n, 0))) return st;
        const node *x = IN(0);
        if (x->rank != 4 || x->shape[0] * x->shape[2] * x->shape[3] < 1)
            return graph_fail(g, MN_E_SHAPE, "%s: x must be [N,C,H,W] with N*H*W >= 1, got %s", on, SHP(sa, x));
        set_shape(n, 1, &x->shape[1]);
        return MN_OK;
    }
    case OP_EMBEDDING:
        return infer_embedding(g, n);
    case OP_EMBEDDING_BWD:
        return infer_embedding_bwd(g, n);
    case OP_ROPE:
        return infer_rope(g, n);
    case OP_ATTENTION: case OP_ATTENTION_LSE:
        return infer_attention(g, n);
    case OP_ATTENTION_BWD_PREP:
        return infer_attention_bwd_prep(g, n);
    case OP_ATTENTION_BWD_Q: case OP_ATTENTION_BWD_KV:
        return infer_attention_bwd(g, n);
    case OP_KV_APPEND:
        return infer_kv_append(g, n);
    case OP_RMS_NORM: case OP_LAYER_NORM: case OP_RMS_NORM_BWD: case OP_RMS_NORM_BWD_W:
    case OP_LAYER_NORM_BWD: case OP_LAYER_NORM_BWD_W:
        return infer_norm(g, n);
    case OP_COUNT:
        break;
    }
    return graph_fail(g, MN_E_INVALID, "unknown op %d", (int)n->op);
}
