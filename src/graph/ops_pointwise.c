/* ops_pointwise.c - public constructors of the parameterised pointwise ops,
 * the normalisations and the losses built on them: the primitives abs, clamp, pow, where, dropout,
 * rms_norm, layer_norm (one node each, validated here), cross_entropy_ex (ce_rows then cross_entropy), and the
 * composites group_norm (a layer_norm of [N, G, C/G * spatial] rows), swiglu, geglu, l1_loss,
 * bce_with_logits, which build subgraphs of existing ops (they get backward
 * and every backend for free). Also the inference-session rule for dropout.
 *
 * A composite either adds all its nodes or none: on any failure the nodes it
 * added are released and g->err names the composite and the failing step.
 * Shape rules of the primitives live in shape.c (infer_pointwise).
 *
 * Does not: compute anything (kernels live in backend/), differentiate.
 */
#include <math.h>

#include "graph/attrs.h"
#include "graph/pointwise.h"

/* ---- helpers --------------------------------------------------------------- */

static node pw_proto(op_id op, int nin, const mn_tensor *in) {
    node p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.nin = nin;
    for (int i = 0; i < nin; i++) p.in[i] = in[i];
    p.lr_mult = 1.0f;
    return p;
}

static mn_status pw_add(mn_graph *g, mn_tensor *out, node *p) {
    if (!g) return MN_E_INVALID;
    if (!out) return graph_fail(g, MN_E_INVALID, "%s: out is NULL", op_table[p->op].name);
    return graph_add(g, out, p);
}

/* ---- primitives ------------------------------------------------------------ */

mn_status mn_abs(mn_graph *g, mn_tensor *out, mn_tensor x) {
    node p = pw_proto(OP_ABS, 1, &x);
    return pw_add(g, out, &p);
}

mn_status mn_clamp(mn_graph *g, mn_tensor *out, mn_tensor x, float lo, float hi) {
    node p = pw_proto(OP_CLAMP, 1, &x);
    pw_attrs_set(&p, &(mn_pw_attrs){.min = lo, .max = hi});
    return pw_add(g, out, &p);
}

mn_status mn_pow(mn_graph *g, mn_tensor *out, mn_tensor x, float e) {
    node p = pw_proto(OP_POW, 1, &x);
    pw_attrs_set(&p, &(mn_pw_attrs){.exponent = e});
    return pw_add(g, out, &p);
}

mn_status mn_where(mn_graph *g, mn_tensor *out, mn_tensor cond, mn_tensor a, mn_tensor b) {
    mn_tensor in[3] = {cond, a, b};
    node p = pw_proto(OP_WHERE, 3, in);
    return pw_add(g, out, &p);
}

mn_status mn_dropout_ex(mn_graph *g, mn_tensor *out, mn_tensor x, float prob, uint64_t seed, mn_tensor counter) {
    mn_tensor in[2] = {x, counter};
    node p = pw_proto(OP_DROPOUT, counter == MN_NONE ? 1 : 2, in);
    if (!g) return MN_E_INVALID; /* before the threshold: a NaN p must not reach the cast */
    if (!(prob >= 0.0f && prob <= 1.0f)) /* also NaN */
        return graph_fail(g, MN_E_INVALID, "dropout: probability %g outside [0, 1]", (double)prob);
    dropout_attrs_set(&p, &(mn_dropout_attrs){prob, seed, pw_dropout_threshold(prob)});
    return pw_add(g, out, &p);
}

mn_status mn_dropout(mn_graph *g, mn_tensor *out, mn_tensor x, float prob, uint64_t seed) {
    return mn_dropout_ex(g, out, x, prob, seed, MN_NONE);
}

/* ---- inference rule for dropout --------------------------------------------- */

void graph_dropout_to_identity(mn_graph *g) {
    for (int32_t i = 0; i < g->n; i++) {
        node *n = &g->nodes[i];
        if (n->op != OP_DROPOUT) continue;
        /* a view of x with x's shape (the counter input is dropped) */
        n->op = OP_RESHAPE;
        n->nin = 1;
        memset(n->ip, 0, sizeof n->ip);
        memset(n->fp, 0, sizeof n->fp);
    }
}

/* ---- composites ------------------------------------------------------------ */

/* A composite under construction: the node count to roll back to. */
typedef struct pw_txn {
    mn_graph *g;
    int32_t n0;
    const char *name;
    mn_status st;
} pw_txn;

static bool txn_begin(pw_txn *t, mn_graph *g, mn_tensor *out, const char *name) {
    t->g = g;
    t->n0 = g ? g->n : 0;
    t->name = name;
    t->st = MN_OK;
    if (!g) {
        t->st = MN_E_INVALID;
        return false;
    }
    if (!out) {
        t->st = graph_fail(g, MN_E_INVALID, "%s: out is NULL", name);
        return false;
    }
    *out = MN_NONE;
    return true;
}

/* Records the status of one step; false once any step failed. */
static bool txn_ok(pw_txn *t, mn_status st) {
    if (t->st == MN_OK && st != MN_OK) {
        t->st = st;
        char inner[sizeof t->g->err];
        memcpy(inner, t->g->err, sizeof inner);
        graph_fail(t->g, st, "%s: %s", t->name, inner);
    }
    return t->st == MN_OK;
}

/* Fails the composite with its own message. */
static mn_status txn_fail(pw_txn *t, mn_status st, const char *fmt, ...) MN_PRINTF(3, 4);
static mn_status txn_fail(pw_txn *t, mn_status st, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    t->st = graph_fail(t->g, st, "%s: %s", t->name, msg);
    return t->st;
}

/* Ends the composite: on failure every node it added is released. */
static mn_status txn_end(pw_txn *t, mn_tensor *out, mn_tensor result) {
    if (t->st != MN_OK) {
        if (t->g) {
            graph_truncate(t->g, t->n0);
        }
        return t->st;
    }
    *out = result;
    return MN_OK;
}

/* Checks that t is an f32 tensor of g; MN_NONE passes when optional. */
static bool txn_tensor(pw_txn *t, mn_tensor x, const char *what, bool optional) {
    if (t->st) return false;
    if (optional && x == MN_NONE) return true;
    if (graph_decode(t->g, x) < 0) {
        char inner[sizeof t->g->err];
        graph_bad_tensor(t->g, what, x);
        memcpy(inner, t->g->err, sizeof inner);
        txn_fail(t, MN_E_INVALID, "%s", inner); /* "<name>: <what> <x> is not a tensor of this graph" */
        return false;
    }
    if (t->g->nodes[graph_id(x)].dtype != MN_F32) {
        txn_fail(t, MN_E_DTYPE, "%s must be f32, got %s", what, mn_dtype_name(t->g->nodes[graph_id(x)].dtype));
        return false;
    }
    return true;
}

/* weight/bias: MN_NONE or exactly [d]. */
static bool txn_vector(pw_txn *t, mn_tensor v, const char *what, int64_t d, const node *x) {
    if (!txn_tensor(t, v, what, true)) return false;
    if (v == MN_NONE) return true;
    const node *n = &t->g->nodes[graph_id(v)];
    if (n->rank != 1 || n->shape[0] != d) {
        char sa[96], sb[96];
        txn_fail(t, MN_E_SHAPE, "%s %s must be [%lld] for x %s", what, shape_str(sa, sizeof sa, n->rank, n->shape),
                 (long long)d, shape_str(sb, sizeof sb, x->rank, x->shape));
        return false;
    }
    return true;
}

static bool txn_eps(pw_txn *t, float eps) {
    if (t->st) return false;
    if (!(eps >= 0.0f) || isinf(eps)) {
        txn_fail(t, MN_E_INVALID, "eps %g must be finite and >= 0", (double)eps);
        return false;
    }
    return true;
}

/* One RMS_NORM / LAYER_NORM node over x and the present vectors. */
static mn_tensor norm_node(pw_txn *t, op_id op, mn_tensor x, mn_tensor w, mn_tensor b, float eps) {
    mn_tensor in[3] = {x}, y = MN_NONE;
    int nin = 1;
    if (w != MN_NONE) in[nin++] = w;
    if (b != MN_NONE) in[nin++] = b;
    node p = pw_proto(op, nin, in);
    const mn_norm_attrs a = {eps, w != MN_NONE, b != MN_NONE};
    norm_attrs_set(&p, &a);
    txn_ok(t, graph_add(t->g, &y, &p));
    return y;
}

mn_status mn_rms_norm(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, float eps) {
    pw_txn t;
    mn_tensor y = MN_NONE;
    if (!txn_begin(&t, g, out, "rms_norm")) return t.st;
    if (txn_tensor(&t, x, "x", false) && txn_eps(&t, eps)) {
        const node *xn = &g->nodes[graph_id(x)];
        if (xn->rank < 1) txn_fail(&t, MN_E_SHAPE, "x must have rank >= 1, got a scalar");
        else if (txn_vector(&t, w, "weight", xn->shape[xn->rank - 1], xn))
            y = norm_node(&t, OP_RMS_NORM, x, w, MN_NONE, eps);
    }
    return txn_end(&t, out, y);
}

mn_status mn_layer_norm(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor b, float eps) {
    pw_txn t;
    mn_tensor y = MN_NONE;
    if (!txn_begin(&t, g, out, "layer_norm")) return t.st;
    if (txn_tensor(&t, x, "x", false) && txn_eps(&t, eps)) {
        const node *xn = &g->nodes[graph_id(x)];
        if (xn->rank < 1) {
            txn_fail(&t, MN_E_SHAPE, "x must have rank >= 1, got a scalar");
        } else {
            int64_t d = xn->shape[xn->rank - 1];
            if (txn_vector(&t, w, "weight", d, xn) && txn_vector(&t, b, "bias", d, xn))
                y = norm_node(&t, OP_LAYER_NORM, x, w, b, eps);
        }
    }
    return txn_end(&t, out, y);
}

mn_status mn_group_norm(mn_graph *g, mn_tensor *out, mn_tensor x, int groups, mn_tensor w, mn_tensor b, float eps) {
    pw_txn t;
    mn_tensor y = MN_NONE;
    if (!txn_begin(&t, g, out, "group_norm")) return t.st;
    if (txn_tensor(&t, x, "x", false) && txn_eps(&t, eps)) {
        const node xn = g->nodes[graph_id(x)]; /* a copy: the node array grows below */
        char sb[96];
        if (xn.rank < 2 || xn.rank > 4) {
            txn_fail(&t, MN_E_SHAPE, "x must be [N,C,...] of rank 2..4, got %s",
                     shape_str(sb, sizeof sb, xn.rank, xn.shape));
        } else if (groups < 1 || xn.shape[1] % groups) {
            txn_fail(&t, MN_E_SHAPE, "%d groups do not divide the %lld channels of x %s", groups,
                     (long long)xn.shape[1], shape_str(sb, sizeof sb, xn.rank, xn.shape));
        } else if (txn_vector(&t, w, "weight", xn.shape[1], &xn) && txn_vector(&t, b, "bias", xn.shape[1], &xn)) {
            /* [N, G, C/G * spatial] -> normalise the last axis -> x's shape */
            int64_t per = node_numel(&xn) / xn.shape[0] / groups;
            int64_t gs[3] = {xn.shape[0], groups, per}, cs[MN_MAX_RANK];
            mn_tensor xg = MN_NONE, ng, wc = w, bc = b;
            if (txn_ok(&t, mn_reshape(g, &xg, x, 3, gs)) &&
                (ng = norm_node(&t, OP_LAYER_NORM, xg, MN_NONE, MN_NONE, eps)) != MN_NONE &&
                txn_ok(&t, mn_reshape(g, &y, ng, xn.rank, xn.shape))) {
                /* per-channel weight and bias as [C, 1, ...] against [N, C, ...] */
                cs[0] = xn.shape[1];
                for (int i = 1; i < xn.rank - 1; i++) cs[i] = 1;
                if (w != MN_NONE && !txn_ok(&t, mn_reshape(g, &wc, w, xn.rank - 1, cs))) y = MN_NONE;
                if (y != MN_NONE && b != MN_NONE && !txn_ok(&t, mn_reshape(g, &bc, b, xn.rank - 1, cs))) y = MN_NONE;
                if (y != MN_NONE && w != MN_NONE && !txn_ok(&t, mn_mul(g, &y, y, wc))) y = MN_NONE;
                if (y != MN_NONE && b != MN_NONE && !txn_ok(&t, mn_add(g, &y, y, bc))) y = MN_NONE;
            } else {
                y = MN_NONE;
            }
        }
    }
    return txn_end(&t, out, y);
}

typedef mn_status (*pw_unary_fn)(mn_graph *, mn_tensor *, mn_tensor);

static mn_status gated(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b, pw_unary_fn act, const char *name) {
    pw_txn t;
    mn_tensor h = MN_NONE, y = MN_NONE;
    if (!txn_begin(&t, g, out, name)) return t.st;
    if (txn_tensor(&t, a, "a", false) && txn_tensor(&t, b, "b", false) && txn_ok(&t, act(g, &h, a)))
        txn_ok(&t, mn_mul(g, &y, h, b));
    return txn_end(&t, out, y);
}

mn_status mn_swiglu(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return gated(g, out, a, b, mn_silu, "swiglu"); }
mn_status mn_geglu(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return gated(g, out, a, b, mn_gelu, "geglu"); }

/* Both f32 tensors of one shape. */
static bool txn_same(pw_txn *t, mn_tensor a, mn_tensor b, const char *na, const char *nb) {
    if (!txn_tensor(t, a, na, false) || !txn_tensor(t, b, nb, false)) return false;
    const node *x = &t->g->nodes[graph_id(a)], *z = &t->g->nodes[graph_id(b)];
    bool same = x->rank == z->rank;
    for (int i = 0; same && i < x->rank; i++) same = x->shape[i] == z->shape[i];
    if (!same) {
        char sa[96], sb[96];
        txn_fail(t, MN_E_SHAPE, "shapes %s and %s must be equal", shape_str(sa, sizeof sa, x->rank, x->shape),
                 shape_str(sb, sizeof sb, z->rank, z->shape));
    }
    return same;
}

mn_status mn_l1_loss(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) {
    pw_txn t;
    mn_tensor d, e, y = MN_NONE;
    if (!txn_begin(&t, g, out, "l1_loss")) return t.st;
    if (txn_same(&t, a, b, "a", "b") && txn_ok(&t, mn_sub(g, &d, a, b)) && txn_ok(&t, mn_abs(g, &e, d)))
        txn_ok(&t, mn_mean(g, &y, e, MN_ALL_AXES, false));
    return txn_end(&t, out, y);
}

/* softplus(x) = relu(x) + log(1 + exp(x - 2 relu(x))): x - 2 relu(x) is
 * exactly -|x|, so exp never overflows, and since relu'(0) = 0 the gradient
 * at x == 0 is sigmoid(0) = 1/2 (relu(x) + log(1 + exp(-|x|)) built with abs
 * would give 0 there). */
mn_status mn_bce_with_logits(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor tg) {
    pw_txn t;
    mn_tensor r, u, v, e, one, e1, l, sp, xt, d, y = MN_NONE;
    if (!txn_begin(&t, g, out, "bce_with_logits")) return t.st;
    if (txn_same(&t, x, tg, "logits", "targets") && txn_ok(&t, mn_relu(g, &r, x)) &&
        txn_ok(&t, mn_scale(g, &u, r, -2.0f)) && txn_ok(&t, mn_add(g, &v, x, u)) && txn_ok(&t, mn_exp(g, &e, v)) &&
        txn_ok(&t, mn_graph_scalar(g, &one, 1.0f)) && txn_ok(&t, mn_add(g, &e1, e, one)) &&
        txn_ok(&t, mn_log(g, &l, e1)) && txn_ok(&t, mn_add(g, &sp, r, l)) && txn_ok(&t, mn_mul(g, &xt, x, tg)) &&
        txn_ok(&t, mn_sub(g, &d, sp, xt)))
        txn_ok(&t, mn_mean(g, &y, d, MN_ALL_AXES, false));
    return txn_end(&t, out, y);
}

/* ce_rows (per-row statistics, row-parallel) then cross_entropy (their mean). */
mn_status mn_cross_entropy_ex(mn_graph *g, mn_tensor *out, mn_tensor logits, mn_tensor labels,
                              const mn_cross_entropy_params *cp) {
    pw_txn t;
    if (!txn_begin(&t, g, out, "cross_entropy")) return t.st;
    mn_tensor in[3] = {logits, labels, MN_NONE}, y = MN_NONE;
    node p = pw_proto(OP_CE_ROWS, 2, in);
    if (cp) {
        ce_attrs_set(&p, &(mn_ce_attrs){cp->use_ignore_index ? 1 : 0, cp->use_ignore_index ? cp->ignore_index : 0,
                                        cp->label_smoothing});
    }
    node q = p; /* graph_add turns p's handles into node ids */
    if (txn_ok(&t, graph_add(g, &in[2], &p))) {
        q.op = OP_CROSS_ENTROPY;
        q.nin = 3;
        q.in[2] = in[2];
        txn_ok(&t, graph_add(g, &y, &q));
    }
    return txn_end(&t, out, y);
}
