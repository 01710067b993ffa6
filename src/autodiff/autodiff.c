/* autodiff.c - backward rules, one per differentiable op of ops.def, and the
 * reverse sweep that applies them.
 *
 * A rule receives the forward node and the gradient of its output (dy) and
 * returns, for each input that needs one, the id of a node computing that
 * input's gradient. Rules build nodes with the public op constructors and the
 * backward-helper ops; the sweep accumulates fan-out with add. While it runs
 * the graph is in raw-id mode (graph.h): the constructors take and return
 * node indices.
 */
#include "autodiff/autodiff.h"

#include <stdlib.h>
#include <string.h>

#include "graph/attrs.h"

/* A reduce_to made by reduce_to_staged, for reduce_to_reuse: batch norm's
 * mean gradient takes the per-channel sum of dy that the bias's gradient
 * made. (Parameter gradients never share one: two batch norms on the two
 * branches of a residual add receive the same dy, and their bias
 * gradients must be two tensors for the optimizer's parallel regions.) */
typedef struct rt_memo {
    int32_t in, out;
} rt_memo;

typedef struct adctx {
    mn_graph *g;
    const uint8_t *needs; /* per node: a gradient must flow into it */
    const int32_t *grad;  /* per forward node: its output's gradient so far (final for nodes after the one a rule
                           * is given: the sweep runs backwards) */
    int32_t nfwd;         /* the forward nodes: [0, nfwd) */
    rt_memo *memo;
    int nmemo, capmemo;
} adctx;

typedef mn_status (*grad_fn)(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]);

static bool need(const adctx *c, const node *n, int i) { return c->needs[n->in[i]] != 0; }

/* A backward-helper node with an explicit result shape (shape_of; NULL: the
 * shape rule's) and the parameters (ip, fp) of params_of (NULL: none). */
static mn_status helper(adctx *c, int32_t *out, op_id op, int nin, const int32_t *in, const node *shape_of,
                        const node *params_of) {
    node p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.nin = nin;
    p.lr_mult = 1.0f;
    for (int i = 0; i < nin; i++) p.in[i] = in[i];
    if (params_of) {
        memcpy(p.ip, params_of->ip, sizeof p.ip);
        memcpy(p.fp, params_of->fp, sizeof p.fp);
    }
    if (shape_of) {
        p.rank = shape_of->rank;
        memcpy(p.shape, shape_of->shape, sizeof p.shape);
    }
    return graph_add(c->g, out, &p);
}

/* A node that only carries parameters (helper's params_of). */
static node params_node(void) {
    node p;
    memset(&p, 0, sizeof p);
    return p;
}

static bool same_shape(const node *a, const node *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* Sum t down to the shape of input i of n (undo broadcasting); t itself if
 * the shapes already agree. */
/* reduce_to(t) down to target's shape, in two stages when the sum is long
 * and its outputs few: a bias or norm gradient sums dy [N,C,H,W] to
 * [1,C,1,1], C outputs of N*H*W terms each, which one kernel over them
 * runs on C workgroups (a few of a GPU's cores). The first stage keeps the
 * outermost summed dimension ([N,C,1,1], N*C sums of H*W), the second sums
 * it away. */
#define RT_STAGE_NOUT 1024 /* fewer outputs than this, */
#define RT_STAGE_LEN 16384 /* each the sum of at least this many terms */
#define RT_STAGE_MIN 32    /* and sums of at least this many in the first stage */
static mn_status reduce_to_staged_new(adctx *c, int32_t *out, int32_t t, const node *target);

static mn_status reduce_to_staged(adctx *c, int32_t *out, int32_t t, const node *target) {
    mn_status st = reduce_to_staged_new(c, out, t, target);
    if (st) return st;
    if (c->nmemo == c->capmemo) {
        const int c2 = c->capmemo ? 2 * c->capmemo : 64;
        rt_memo *m = realloc(c->memo, (size_t)c2 * sizeof *m);
        if (!m) return MN_OK; /* no memo: a sum asked for twice is made twice */
        c->memo = m, c->capmemo = c2;
    }
    c->memo[c->nmemo++] = (rt_memo){t, *out};
    return MN_OK;
}

/* reduce_to_staged's sum of t to target's shape if one was made, else a new one. */
static mn_status reduce_to_reuse(adctx *c, int32_t *out, int32_t t, const node *target) {
    for (int i = 0; i < c->nmemo; i++)
        if (c->memo[i].in == t && same_shape(&c->g->nodes[c->memo[i].out], target)) {
            *out = c->memo[i].out;
            return MN_OK;
        }
    return reduce_to_staged(c, out, t, target);
}

static mn_status reduce_to_staged_new(adctx *c, int32_t *out, int32_t t, const node *target) {
    const node *x = &c->g->nodes[t];
    int64_t xd[4] = {1, 1, 1, 1}, od[4] = {1, 1, 1, 1}, nout = 1;
    for (int i = 0; i < x->rank; i++) xd[4 - x->rank + i] = x->shape[i];
    for (int i = 0; i < target->rank; i++) od[4 - target->rank + i] = target->shape[i];
    for (int d = 0; d < 4; d++) nout *= od[d];
    const int64_t len = nout > 0 ? node_numel(x) / nout : 0;
    int d0 = -1;
    for (int d = 0; d < 4 && d0 < 0; d++)
        if (od[d] == 1 && xd[d] > 1) d0 = d;
    if (nout < RT_STAGE_NOUT && len >= RT_STAGE_LEN && d0 >= 0 && len / xd[d0] >= RT_STAGE_MIN) {
        node mid = *x;
        for (int i = 0; i < x->rank; i++) {
            const int d = 4 - x->rank + i;
            mid.shape[i] = d == d0 || od[d] != 1 ? xd[d] : 1;
        }
        int32_t m;
        mn_status st = helper(c, &m, OP_REDUCE_TO, 1, &t, &mid, NULL);
        return st ? st : helper(c, out, OP_REDUCE_TO, 1, &m, target, NULL);
    }
    return helper(c, out, OP_REDUCE_TO, 1, &t, target, NULL);
}

static mn_status unbroadcast(adctx *c, int32_t *out, int32_t t, const node *n, int i) {
    node target = c->g->nodes[n->in[i]];
    if (same_shape(&c->g->nodes[t], &target)) {
        *out = t;
        return MN_OK;
    }
    return reduce_to_staged(c, out, t, &target);
}

/* The parts of a weight gradient's product L^T R (L [K, m], R [K, n], K
 * the rows of a batch) summed over K in parts, or 1. A long K over a small
 * gradient (SmolLM2-135M at 8 x 512 tokens: K = 4096 for a 576 x 1536
 * gradient, 60 tiles of 128 x 128) runs one GEMM on a fraction of a GPU's
 * cores; the rows split into P equal parts are views ([P, K / P, m]), their
 * products one batched GEMM with P times the tiles, then a sum over P.
 * Enough parts for about KSPLIT_TILES 128 x 128 tiles (8 parts of 576 x 1536
 * over 4096 rows: 136.8 ms a SmolLM2-135M 8 x 512 step on an H200, 139.2
 * with 4, 145.7 with 2, 140.9 with one product; docs/PERF.md run AA), at most
 * KSPLIT_MAX_PARTS, each at least KSPLIT_MIN_ROWS rows, P dividing K, the
 * partial sums at most KSPLIT_MAX_SCRATCH floats. Device independent, so
 * every backend computes the same sums. MEGANEURA_MATMUL_KSPLIT=0 turns it
 * off, =2 .. =8 asks that many parts where they divide K (to measure it). */
#define KSPLIT_TILES 512
#define KSPLIT_MAX_PARTS 8
#define KSPLIT_MIN_ROWS 512
#define KSPLIT_MAX_SCRATCH ((int64_t)1 << 24)
static int64_t ksplit_parts(int64_t K, int64_t m, int64_t nn) {
    const char *knob = getenv("MEGANEURA_MATMUL_KSPLIT"); /* "0": never; "2" .. "8": that many parts */
    if (knob && !strcmp(knob, "0")) return 1;
    if (K < 2 * KSPLIT_MIN_ROWS || m < 1 || nn < 1) return 1;
    if (knob && knob[0] >= '2' && knob[0] <= '8' && !knob[1]) {
        const int64_t want = knob[0] - '0';
        return K % want == 0 && K / want >= KSPLIT_MIN_ROWS / 2 && want * m * nn <= KSPLIT_MAX_SCRATCH ? want : 1;
    }
    const int64_t tiles = ((m + 127) / 128) * ((nn + 127) / 128);
    int64_t p = (KSPLIT_TILES + tiles - 1) / tiles;
    if (p > KSPLIT_MAX_PARTS) p = KSPLIT_MAX_PARTS;
    if (p > K / KSPLIT_MIN_ROWS) p = K / KSPLIT_MIN_ROWS;
    if (p > KSPLIT_MAX_SCRATCH / (m * nn)) p = KSPLIT_MAX_SCRATCH / (m * nn);
    while (p > 1 && K % p) p--;
    return p < 2 ? 1 : p;
}

/* *out = L^T R over rank-2 L [K, m] and R [K, n], in ksplit_parts parts. */
static mn_status matmul_tn(adctx *c, int32_t *out, int32_t l, int32_t r) {
    mn_graph *g = c->g;
    const node *L = &g->nodes[l], *R = &g->nodes[r];
    const int64_t K = L->shape[0], m = L->shape[1], nn = R->shape[1], P = ksplit_parts(K, m, nn);
    if (P < 2) return mn_matmul_ex(g, out, l, r, true, false);
    const int64_t sl[3] = {P, K / P, m}, sr[3] = {P, K / P, nn};
    int32_t lp, rp, t;
    mn_status st = mn_reshape(g, &lp, l, 3, sl);
    st = st ? st : mn_reshape(g, &rp, r, 3, sr);
    st = st ? st : mn_matmul_ex(g, &t, lp, rp, true, false);
    return st ? st : mn_sum(g, out, t, 0, false);
}

static mn_status grad_matmul(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    mn_graph *g = c->g;
    int32_t a = n->in[0], b = n->in[1], t;
    const bool ta = matmul_attrs_of(n).trans_a, tb = matmul_attrs_of(n).trans_b;
    mn_status st;
    if (need(c, n, 0)) {
        st = ta ? mn_matmul_ex(g, &t, b, dy, tb, true) : mn_matmul_ex(g, &t, dy, b, false, !tb);
        if (st || (st = unbroadcast(c, &dx[0], t, n, 0))) return st;
    }
    if (need(c, n, 1)) {
        /* a weight's gradient over rows of a batch (a [K, in], 2-D): a sum over K, in parts when long */
        const bool rows = !ta && n->rank == 2 && g->nodes[a].rank == 2 && g->nodes[b].rank == 2 &&
                          g->nodes[a].dtype == MN_F32 && g->nodes[dy].dtype == MN_F32;
        if (rows) st = tb ? matmul_tn(c, &t, dy, a) : matmul_tn(c, &t, a, dy);
        else st = tb ? mn_matmul_ex(g, &t, dy, a, true, ta) : mn_matmul_ex(g, &t, a, dy, !ta, false);
        if (st || (st = unbroadcast(c, &dx[1], t, n, 1))) return st;
    }
    return MN_OK;
}

static mn_status grad_add(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    mn_status st = MN_OK;
    if (need(c, n, 0) && (st = unbroadcast(c, &dx[0], dy, n, 0))) return st;
    if (need(c, n, 1)) st = unbroadcast(c, &dx[1], dy, n, 1);
    return st;
}

/* batch_norm2d's centring d = x - reshape(bn_mean(x)) (ops.c), whose
 * forward consumers are one mul(d, w) with w [1,C,1,1] (the normalisation)
 * and bn_meansq(d) (the variance): *mul = that mul (its gradient known),
 * *w = its per-channel factor. */
static bool bn_centring(const adctx *c, const node *n, int32_t y, int32_t *mul, int32_t *w) {
    const mn_graph *g = c->g;
    const node *t = &g->nodes[n->in[1]];
    if (t->op != OP_RESHAPE || t->rank != 4) return false;
    const node *mu = &g->nodes[t->in[0]];
    if (mu->op != OP_BN_MEAN || mu->in[0] != n->in[0]) return false;
    *mul = MN_NONE;
    for (int32_t i = y + 1; i < c->nfwd; i++) {
        const node *u = &g->nodes[i];
        bool uses = false;
        for (int k = 0; k < u->nin; k++) uses |= u->in[k] == y;
        if (!uses || u->op == OP_BN_MEANSQ) continue;
        const int32_t other = u->op == OP_MUL ? (u->in[0] == y ? u->in[1] : u->in[0]) : y;
        if (u->op != OP_MUL || *mul != MN_NONE || other == y || !same_shape(&g->nodes[other], t)) return false;
        *mul = i, *w = other;
    }
    return *mul != MN_NONE && c->grad[*mul] != MN_NONE;
}

/* y = a - b: da = dy, db = -dy, each summed down to its input's shape.
 * For batch norm's centring (bn_centring) the per-channel sum of dd, the
 * gradient of d, is w * (the sum of the normalisation's output gradient):
 * its other term, from the variance, is a per-channel factor times the sum
 * of d, which is 0 (d is x less its exact mean). So the mean's gradient
 * takes the per-channel sum of dy that the bias's gradient made
 * (reduce_to_reuse) instead of a third pass over [N,C,H,W], and dd
 * keeps one consumer (the pointwise dx). */
static mn_status grad_sub(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    mn_status st = MN_OK;
    int32_t t, mul, w;
    if (need(c, n, 0) && (st = unbroadcast(c, &dx[0], dy, n, 0))) return st;
    if (need(c, n, 1) && bn_centring(c, n, y, &mul, &w)) {
        const node target = c->g->nodes[n->in[1]];
        if ((st = reduce_to_reuse(c, &t, c->grad[mul], &target)) || (st = mn_mul(c->g, &t, t, w))) return st;
        return mn_neg(c->g, &dx[1], t);
    }
    if (need(c, n, 1)) {
        if ((st = unbroadcast(c, &t, dy, n, 1))) return st;
        st = mn_neg(c->g, &dx[1], t);
    }
    return st;
}

static mn_status grad_mul(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    mn_status st;
    int32_t t;
    for (int i = 0; i < 2; i++) {
        if (!need(c, n, i)) continue;
        if ((st = mn_mul(c->g, &t, dy, n->in[1 - i])) || (st = unbroadcast(c, &dx[i], t, n, i))) return st;
    }
    return MN_OK;
}

static mn_status grad_div(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    mn_status st;
    int32_t t, u;
    if (need(c, n, 0)) {
        if ((st = mn_div(c->g, &t, dy, n->in[1])) || (st = unbroadcast(c, &dx[0], t, n, 0))) return st;
    }
    if (need(c, n, 1)) { /* d(a/b)/db = -y/b */
        if ((st = mn_mul(c->g, &t, dy, y)) || (st = mn_div(c->g, &u, t, n->in[1])) ||
            (st = unbroadcast(c, &t, u, n, 1)) || (st = mn_neg(c->g, &dx[1], t)))
            return st;
    }
    return MN_OK;
}

static mn_status grad_scale(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    return mn_scale(c->g, &dx[0], dy, (float)scale_factor(n));
}

/* The gradient of a 16-bit tensor is 16-bit (PyTorch: y = x.half(), dy is
 * f16): dy rounded to the cast's dtype, then given in x's. */
static mn_status grad_cast(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const mn_dtype to = cast_dtype(n), from = c->g->nodes[n->in[0]].dtype;
    mn_status st = MN_OK;
    int32_t t = dy;
    if (to != MN_F32 && to != c->g->nodes[dy].dtype && (st = mn_cast(c->g, &t, dy, to))) return st;
    if (c->g->nodes[t].dtype == from) {
        dx[0] = t;
        return MN_OK;
    }
    return mn_cast(c->g, &dx[0], t, from);
}

static mn_status grad_neg(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    return mn_neg(c->g, &dx[0], dy);
}

/* dx = unary_bwd(x, y, dy). Ops whose derivative reads only y (exp, sqrt,
 * rsqrt, sigmoid, tanh; relu's x > 0 is y > 0, NaN included: relu(NaN) =
 * 0) get y in x's place: the backward then keeps no x alive, so x's
 * producer and the op fold into one forward kernel (batch norm's affine
 * add and the ReLU after it; the eps add and the rsqrt of the variance). */
static bool dunary_of_y(op_id op) {
    return op == OP_RELU || op == OP_EXP || op == OP_SQRT || op == OP_RSQRT || op == OP_SIGMOID || op == OP_TANH;
}

static mn_status grad_unary(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t in[3] = {dunary_of_y(n->op) ? y : n->in[0], y, dy};
    node q = params_node();
    bwd_of_set(&q, n->op);
    return helper(c, &dx[0], OP_UNARY_BWD, 3, in, n, &q);
}

static mn_status grad_stop(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    return MN_OK; /* never reached: the sweep does not route gradients through stop_grad */
}

/* dy has the reduced shape; give it x's rank (keepdim layout), then expand. */
static mn_status expand_reduced(adctx *c, int32_t *out, const node *n, int32_t dy) {
    const node x = c->g->nodes[n->in[0]];
    int32_t t = dy;
    mn_status st;
    const mn_reduce_attrs a = reduce_attrs_of(n);
    if (a.axis != MN_ALL_AXES && !a.keepdim) {
        int64_t s[MN_MAX_RANK];
        for (int i = 0; i < x.rank; i++) s[i] = i == a.axis ? 1 : x.shape[i];
        if ((st = mn_reshape(c->g, &t, dy, x.rank, s))) return st;
    }
    return helper(c, out, OP_BROADCAST, 1, &t, &x, NULL);
}

static mn_status grad_sum(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    return expand_reduced(c, &dx[0], n, dy);
}

static mn_status grad_mean(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node *x = &c->g->nodes[n->in[0]];
    const int64_t axis = reduce_attrs_of(n).axis;
    double count = axis == MN_ALL_AXES ? (double)node_numel(x) : (double)x->shape[axis];
    int32_t t;
    mn_status st = mn_scale(c->g, &t, dy, (float)(1.0 / count));
    if (st) return st;
    return expand_reduced(c, &dx[0], n, t);
}

static mn_status grad_max(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t in[3] = {n->in[0], y, dy};
    const node x = c->g->nodes[n->in[0]];
    return helper(c, &dx[0], OP_MAX_BWD, 3, in, &x, n); /* reduce attrs as MAX */
}

static mn_status grad_softmax(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t in[2] = {y, dy};
    return helper(c, &dx[0], OP_SOFTMAX_BWD, 2, in, n, NULL);
}

static mn_status grad_log_softmax(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t in[2] = {y, dy};
    return helper(c, &dx[0], OP_LOG_SOFTMAX_BWD, 2, in, n, NULL);
}

static mn_status grad_reshape(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node *x = &c->g->nodes[n->in[0]];
    int64_t s[MN_MAX_RANK];
    memcpy(s, x->shape, sizeof s);
    return mn_reshape(c->g, &dx[0], dy, x->rank, s);
}

static mn_status grad_permute(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int inv[MN_MAX_RANK];
    for (int i = 0; i < n->rank; i++) inv[permute_axis(n, i)] = i;
    return mn_permute(c->g, &dx[0], dy, inv);
}

static mn_status grad_broadcast(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    return unbroadcast(c, &dx[0], dy, n, 0);
}

static mn_status grad_reduce_to(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node x = c->g->nodes[n->in[0]];
    return helper(c, &dx[0], OP_BROADCAST, 1, &dy, &x, NULL);
}

/* dlogits from the forward's row statistics (its third input, CE_ROWS).
 * With ignore_index the mean is over the rows not ignored: their count (a
 * CE_COUNT node) is the backward's fifth input. */
static mn_status grad_cross_entropy(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t in[5] = {n->in[0], n->in[1], dy, n->in[2], MN_NONE};
    const node lg = c->g->nodes[n->in[0]];
    const mn_ce_attrs a = ce_attrs_of(n);
    mn_status st;
    node q = params_node();
    ce_attrs_set(&q, &(mn_ce_attrs){a.use_ignore, a.ignore_index, 0.0});
    if (a.use_ignore && (st = helper(c, &in[4], OP_CE_COUNT, 1, &n->in[1], NULL, &q))) return st;
    node p;
    memset(&p, 0, sizeof p);
    p.op = OP_CROSS_ENTROPY_BWD;
    p.nin = a.use_ignore ? 5 : 4;
    p.lr_mult = 1.0f;
    memcpy(p.in, in, sizeof in);
    memcpy(p.ip, n->ip, sizeof p.ip);
    memcpy(p.fp, n->fp, sizeof p.fp);
    p.rank = lg.rank;
    memcpy(p.shape, lg.shape, sizeof p.shape);
    return graph_add(c->g, &dx[0], &p);
}

static mn_status grad_cross_entropy_dense(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t in[3] = {n->in[0], n->in[1], dy};
    const node lg = c->g->nodes[n->in[0]];
    mn_status st;
    for (int i = 0; i < 2; i++) {
        node q = params_node();
        ce_dense_wrt_set(&q, i == 1);
        if (need(c, n, i) && (st = helper(c, &dx[i], OP_CROSS_ENTROPY_DENSE_BWD, 3, in, &lg, &q))) return st;
    }
    return MN_OK;
}

static mn_status grad_mse(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node *a = &c->g->nodes[n->in[0]];
    int32_t d, s, t;
    mn_status st;
    if ((st = mn_sub(c->g, &d, n->in[0], n->in[1])) ||
        (st = mn_scale(c->g, &s, d, (float)(2.0 / (double)node_numel(a)))) || (st = mn_mul(c->g, &t, s, dy)))
        return st;
    if (need(c, n, 0)) dx[0] = t;
    if (need(c, n, 1) && (st = mn_neg(c->g, &dx[1], t))) return st;
    return MN_OK;
}

/* The K chunk of a weight gradient split across workgroups (attrs.h,
 * wgrad_chunk_of), or 0. The sum over k = (b, oh, ow) is long and the
 * gradient small in a convolution over a large batch or image (ResNet-50
 * at batch 32: K = 100352 for a 64 x 576 gradient): one GEMM over it has a
 * handful of output tiles, so it runs on a few of the GPU's cores. Parts of
 * at least WGRAD_MIN_CHUNK k each, enough for about WGRAD_TILES 64 x 64 tiles
 * in all, at most WGRAD_MAX_PARTS, and their scratch (the partial sums, a
 * tensor the memory planner places) at most WGRAD_MAX_SCRATCH floats.
 * Device independent, so every backend computes the same sums.
 * MEGANEURA_WGRAD_SPLIT=0 turns the split off (to measure it). */
#define WGRAD_TILES 384
#define WGRAD_MIN_CHUNK 1024
#define WGRAD_MAX_PARTS 64
#define WGRAD_MAX_SCRATCH ((int64_t)1 << 24)
static int64_t wgrad_chunk(const node *w, const node *dy, int64_t groups) {
    const char *knob = getenv("MEGANEURA_WGRAD_SPLIT"); /* "0": never split (benchmarks) */
    if (knob && !strcmp(knob, "0")) return 0;
    const int64_t K = dy->shape[0] * dy->shape[2] * dy->shape[3], og = w->shape[0] / (groups > 0 ? groups : 1);
    const int64_t cols = w->shape[1] * w->shape[2] * w->shape[3];
    if (node_numel(w) < 1 || K < 1) return 0;
    const int64_t tiles = ((og + 63) / 64) * ((cols + 63) / 64) * (groups > 0 ? groups : 1);
    int64_t parts = WGRAD_TILES / (tiles > 0 ? tiles : 1);
    if (parts > WGRAD_MAX_PARTS) parts = WGRAD_MAX_PARTS;
    if (parts > K / WGRAD_MIN_CHUNK) parts = K / WGRAD_MIN_CHUNK;
    if (parts > WGRAD_MAX_SCRATCH / node_numel(w)) parts = WGRAD_MAX_SCRATCH / node_numel(w);
    if (parts < 2) return 0;
    const int64_t chunk = ((K + parts - 1) / parts + 63) / 64 * 64; /* whole 64-deep slices */
    return chunk < K ? chunk : 0;
}

/* dw of a convolution (x, dy): one CONV2D_BWD_WEIGHT, or its partial sums
 * (wgrad_chunk) added over the parts. */
static mn_status conv_wgrad(adctx *c, int32_t *out, int32_t x, int32_t dy, const node *w, const node *params) {
    const node *DY = &c->g->nodes[dy];
    node p = *params;
    const int64_t chunk = wgrad_chunk(w, DY, conv_attrs_of(params).groups);
    wgrad_chunk_set(&p, chunk);
    int32_t in[2] = {x, dy};
    if (!chunk) return helper(c, out, OP_CONV2D_BWD_WEIGHT, 2, in, w, &p);
    const int64_t K = DY->shape[0] * DY->shape[2] * DY->shape[3], parts = (K + chunk - 1) / chunk;
    node ps = *w;
    ps.shape[0] = parts * w->shape[0];
    int64_t s2[2] = {parts, node_numel(w)};
    int32_t t;
    mn_status st = helper(c, &t, OP_CONV2D_BWD_WEIGHT, 2, in, &ps, &p);
    st = st ? st : mn_reshape(c->g, &t, t, 2, s2);
    st = st ? st : mn_sum(c->g, &t, t, 0, false);
    return st ? st : mn_reshape(c->g, out, t, w->rank, w->shape);
}

static mn_status grad_conv2d(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node x = c->g->nodes[n->in[0]], w = c->g->nodes[n->in[1]];
    mn_status st;
    if (need(c, n, 0)) {
        int32_t in[2] = {dy, n->in[1]};
        if ((st = helper(c, &dx[0], OP_CONV2D_BWD_INPUT, 2, in, &x, n))) return st;
    }
    if (need(c, n, 1) && (st = conv_wgrad(c, &dx[1], n->in[0], dy, &w, n))) return st;
    if (n->nin == 3 && need(c, n, 2)) {
        node b4 = w;
        int64_t o = w.shape[0];
        int32_t t;
        b4.rank = 4;
        b4.shape[0] = 1, b4.shape[1] = o, b4.shape[2] = 1, b4.shape[3] = 1;
        if ((st = reduce_to_staged(c, &t, dy, &b4))) return st;
        if ((st = mn_reshape(c->g, &dx[2], t, 1, &o))) return st;
    }
    return MN_OK;
}

static mn_status grad_maxpool2d(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t in[2] = {n->in[0], dy};
    const node x = c->g->nodes[n->in[0]];
    return helper(c, &dx[0], OP_MAXPOOL2D_BWD, 2, in, &x, n);
}

/* ---- parameterised pointwise ops: abs, clamp, pow, where, dropout ---- */

/* abs, clamp, pow: (x, dy) -> dx through PW_BWD with the forward's params. */
static mn_status grad_pw(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    node p;
    memset(&p, 0, sizeof p);
    p.op = OP_PW_BWD;
    p.nin = 2;
    p.in[0] = n->in[0];
    p.in[1] = dy;
    bwd_of_set(&p, n->op);
    const mn_pw_attrs a = pw_attrs_of(n);
    pw_attrs_set(&p, &a); /* the forward's parameters */
    p.lr_mult = 1.0f;
    return graph_add(c->g, &dx[0], &p);
}

/* d a = where(cond, dy, 0), d b = where(cond, 0, dy), each summed down to its
 * input's shape; cond gets none. */
static mn_status grad_where(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t zero, t;
    mn_status st;
    if (!need(c, n, 1) && !need(c, n, 2)) return MN_OK;
    if ((st = mn_graph_scalar(c->g, &zero, 0.0f))) return st;
    if (need(c, n, 1) && ((st = mn_where(c->g, &t, n->in[0], dy, zero)) || (st = unbroadcast(c, &dx[1], t, n, 1))))
        return st;
    if (need(c, n, 2) && ((st = mn_where(c->g, &t, n->in[0], zero, dy)) || (st = unbroadcast(c, &dx[2], t, n, 2))))
        return st;
    return MN_OK;
}

/* The same mask (same seed, counter and element indices) applied to dy. */
static mn_status grad_dropout(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    node p = *n;
    p.in[0] = dy;
    p.flags = 0;
    p.name = NULL;
    p.data = NULL;
    return graph_add(c->g, &dx[0], &p);
}

/* ---- layout family --------------------------------------------------------- */

/* n = conv2d_bwd_input(u, w) (u shaped like a conv2d output, n shaped like
 * its input): n = A_w^T u with A_w the conv2d by w, linear in u and in w.
 *   d/du = A_w dy = conv2d(dy, w);
 *   d/dw[o,ci,kh,kw] = sum over (b, oh, ow) of dy[b, g*Cg+ci, ih, iw] * u[b,o,oh,ow]
 *                    = conv2d_bwd_weight(dy, u) (dy in the place of x). */
static mn_status grad_conv2d_bwd_input(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node w = c->g->nodes[n->in[1]];
    mn_status st;
    if (need(c, n, 0)) {
        int32_t in[2] = {dy, n->in[1]};
        if ((st = helper(c, &dx[0], OP_CONV2D, 2, in, NULL, n))) return st;
    }
    if (need(c, n, 1) && (st = conv_wgrad(c, &dx[1], dy, n->in[0], &w, n))) return st;
    return MN_OK;
}

/* ---- transformer family ---------------------------------------------------- */

/* dtable = per-row sums of dy over the positions holding the row's id. */
static mn_status grad_embedding(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    int32_t in[2] = {n->in[1], dy};
    const node t = c->g->nodes[n->in[0]];
    return helper(c, &dx[0], OP_EMBEDDING_BWD, 2, in, &t, NULL);
}

/* A rotation's gradient is the rotation by the negative angle: the same op
 * with the inverse flag flipped (so it is itself differentiable). */
static mn_status grad_rope(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    node p = *n;
    mn_rope_attrs a = rope_attrs_of(n);
    a.inverse = !a.inverse;
    rope_attrs_set(&p, &a);
    int32_t in[2] = {dy, n->nin > 1 ? n->in[1] : MN_NONE};
    return helper(c, &dx[0], OP_ROPE, n->nin, in, n, &p);
}

/* Flash-attention backward: the row log-sum-exp is recomputed (one online
 * pass, no Tq x Tk matrix), packed with delta_i = dout_i . out_i, then dq is
 * gathered per query row and dk, dv per key row (a kv head summing the query
 * heads of its group; one node computes both when both are needed): no
 * atomics, no scatter. */
static mn_status grad_attention(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const bool has_pos = n->nin > 3;
    const node q = c->g->nodes[n->in[0]], k = c->g->nodes[n->in[1]];
    int32_t lse, prep;
    mn_status st;
    if ((st = helper(c, &lse, OP_ATTENTION_LSE, n->nin, n->in, NULL, n))) return st;
    int32_t pin[3] = {y, dy, lse};
    if ((st = helper(c, &prep, OP_ATTENTION_BWD_PREP, 3, pin, NULL, n))) return st;
    int32_t in[6] = {n->in[0], n->in[1], n->in[2], dy, prep, has_pos ? n->in[3] : MN_NONE};
    const int nin = has_pos ? 6 : 5;
    if (need(c, n, 0) && (st = helper(c, &dx[0], OP_ATTENTION_BWD_Q, nin, in, &q, n))) return st;
    if (need(c, n, 1) && need(c, n, 2)) { /* one pass for both: [2B, ...] = (dk; dv), then the halves */
        node p = *n;
        mn_attention_attrs at = attention_attrs_of(n);
        at.wrt = 2;
        attention_attrs_set(&p, &at);
        int32_t both;
        if ((st = helper(c, &both, OP_ATTENTION_BWD_KV, nin, in, NULL, &p))) return st;
        for (int which = 0; which < 2; which++)
            if ((st = mn_slice(c->g, &dx[1 + which], both, 0, which * k.shape[0], k.shape[0]))) return st;
        return MN_OK;
    }
    for (int which = 0; which < 2; which++) {
        if (!need(c, n, 1 + which)) continue;
        node p = *n;
        mn_attention_attrs a = attention_attrs_of(n);
        a.wrt = which; /* 0: dk, 1: dv */
        attention_attrs_set(&p, &a);
        if ((st = helper(c, &dx[1 + which], OP_ATTENTION_BWD_KV, nin, in, &k, &p))) return st;
    }
    return MN_OK;
}

/* n = conv2d_bwd_weight(x, u): n[o,ci,kh,kw] = sum x[b,g*Cg+ci,ih,iw] * u[b,o,oh,ow], bilinear.
 *   d/dx = conv2d_bwd_input(u, dy) (dy in the place of the weight);
 *   d/du = conv2d(x, dy). */
static mn_status grad_conv2d_bwd_weight(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node x = c->g->nodes[n->in[0]];
    mn_status st;
    if (wgrad_chunk_of(n))
        return graph_fail(c->g, MN_E_UNSUPPORTED, "autodiff: no second derivative through a weight gradient split "
                          "into partial sums (conv2d_bwd_weight with a K chunk)");
    if (need(c, n, 0)) {
        int32_t in[2] = {n->in[1], dy};
        if ((st = helper(c, &dx[0], OP_CONV2D_BWD_INPUT, 2, in, &x, n))) return st;
    }
    if (need(c, n, 1)) {
        int32_t in[2] = {n->in[0], dy};
        if ((st = helper(c, &dx[1], OP_CONV2D, 2, in, NULL, n))) return st;
    }
    return MN_OK;
}

/* The slice's gradient is dy put back in place: zero padding around it. */
static mn_status grad_slice(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node *x = &c->g->nodes[n->in[0]];
    int64_t before[MN_MAX_RANK] = {0}, after[MN_MAX_RANK] = {0};
    const mn_slice_attrs s = slice_attrs_of(n);
    before[s.axis] = s.start;
    after[s.axis] = x->shape[s.axis] - s.start - s.length;
    return mn_pad(c->g, &dx[0], dy, before, after);
}

/* The padding's gradient drops the padded cells: one slice per padded axis. */
static mn_status grad_pad(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node x = c->g->nodes[n->in[0]];
    int32_t t = dy;
    const mn_pad_attrs p = pad_attrs_of(n);
    mn_status st;
    for (int i = 0; i < x.rank; i++)
        if ((p.before[i] || p.after[i]) && (st = mn_slice(c->g, &t, t, i, p.before[i], x.shape[i]))) return st;
    dx[0] = t;
    return MN_OK;
}

/* Each input gets its part of dy. */
static mn_status grad_concat(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const int64_t a = concat_axis(n);
    int64_t off = 0;
    mn_status st;
    for (int k = 0; k < n->nin; k++) {
        const int64_t len = c->g->nodes[n->in[k]].shape[a];
        if (need(c, n, k) && (st = mn_slice(c->g, &dx[k], dy, (int)a, off, len))) return st;
        off += len;
    }
    return MN_OK;
}

static mn_status grad_avgpool2d(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const node x = c->g->nodes[n->in[0]];
    return helper(c, &dx[0], OP_AVGPOOL2D_BWD, 1, &dy, &x, n);
}

/* Each input cell was copied into a scale_h x scale_w block: its gradient is
 * the block's sum, a sum pooling with kernel = stride = the scale. */
static mn_status grad_upsample_nearest2d(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const mn_upsample_attrs u = upsample_attrs_of(n);
    node q = params_node();
    pool_attrs_set(&q, &(mn_pool_attrs){{u.scale[0], u.scale[1]}, {u.scale[0], u.scale[1]}, {0, 0}, POOL_DIV_NONE});
    return helper(c, &dx[0], OP_AVGPOOL2D, 1, &dy, NULL, &q);
}

/* bn_mean (x) and bn_meansq (d), [N,C,H,W] -> [C] over cnt = N*H*W values
 * per channel: dx = dy / cnt, dd = 2 d dy / cnt, broadcast over the
 * channel; members of one pointwise kernel with the other gradients. dy
 * goes to [1,C,1,1] first (a [C] gradient that is a reshape of a
 * [1,C,1,1] tensor, as batch norm's mean gradient is, is that tensor), so
 * the scale and whatever pointwise op made dy broadcast into the [N,C,H,W]
 * kernel instead of running as kernels of C elements. */
static mn_status grad_bn_moment(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    (void)y;
    if (!need(c, n, 0)) return MN_OK;
    const int32_t xi = n->in[0];
    const bool sq = n->op == OP_BN_MEANSQ;
    const node x = c->g->nodes[xi];
    const int64_t c4[4] = {1, x.shape[1], 1, 1};
    const double cnt = (double)x.shape[0] * (double)x.shape[2] * (double)x.shape[3];
    int32_t d;
    const node *dn = &c->g->nodes[dy], *src = dn->op == OP_RESHAPE ? &c->g->nodes[dn->in[0]] : NULL;
    mn_status st = MN_OK;
    if (src && src->rank == 4 && src->shape[0] == 1 && src->shape[1] == c4[1] && src->shape[2] == 1 && src->shape[3] == 1)
        d = dn->in[0];
    else
        st = mn_reshape(c->g, &d, dy, 4, c4);
    st = st ? st : mn_scale(c->g, &d, d, (float)((sq ? 2.0 : 1.0) / cnt));
    if (!sq) return st ? st : helper(c, &dx[0], OP_BROADCAST, 1, &d, &x, NULL);
    return st ? st : mn_mul(c->g, &dx[0], xi, d);
}

/* Rows per block of the weight-gradient partials: about 256 blocks of 16 to
 * 1024 rows, fewer rows when rows are wide. A Vulkan invocation walks a
 * block's rows, with per row about 2 * D / L + 22 loop iterations for a
 * workgroup of L >= 64 invocations (or 8 columns each for small D); the
 * block keeps that under half of lavapipe's 65535-iteration loop limit. */
static int64_t norm_block_rows(const node *x) {
    const int64_t d = x->shape[x->rank - 1], rows = d ? node_numel(x) / d : 0;
    const int64_t per_lane = d <= 512 ? 8 : (d + 63) / 64, most = 32768 / (2 * per_lane + 22);
    int64_t br = (rows + 255) / 256;
    br = br < 16 ? 16 : br > 1024 ? 1024 : br;
    return br > most ? (most > 0 ? most : 1) : br;
}

/* rms_norm / layer_norm: dx from one row kernel; dweight = sum over axis 0
 * of the blocked partials of dy * xhat; dbias = dy summed to [D]. */
static mn_status grad_norm(adctx *c, const node *n, int32_t y, int32_t dy, int32_t dx[NODE_MAX_IN]) {
    const mn_norm_attrs na = norm_attrs_of(n);
    const bool ln = n->op == OP_LAYER_NORM, has_w = ln ? na.weight : n->nin > 1;
    const node x = c->g->nodes[n->in[0]];
    node p = params_node(), pw = params_node();
    p.op = ln ? OP_LAYER_NORM_BWD : OP_RMS_NORM_BWD;
    pw.op = ln ? OP_LAYER_NORM_BWD_W : OP_RMS_NORM_BWD_W;
    const mn_norm_attrs eps_only = {na.eps, false, false};
    norm_attrs_set(&p, &eps_only);
    norm_attrs_set(&pw, &eps_only);
    norm_block_set(&pw, norm_block_rows(&x));
    mn_status st;
    (void)y;
    if (need(c, n, 0)) {
        int32_t in[3] = {n->in[0], dy, has_w ? n->in[1] : MN_NONE};
        if ((st = helper(c, &dx[0], p.op, has_w ? 3 : 2, in, &x, &p)))
            return st;
    }
    if (has_w && need(c, n, 1)) {
        int32_t in[2] = {n->in[0], dy}, part;
        if ((st = helper(c, &part, pw.op, 2, in, NULL, &pw)) ||
            (st = mn_sum(c->g, &dx[1], part, 0, false)))
            return st;
    }
    const int bi = 1 + has_w;
    if (ln && na.bias && need(c, n, bi) && (st = unbroadcast(c, &dx[bi], dy, n, bi))) return st;
    return MN_OK;
}

static const grad_fn grad_table[OP_COUNT] = {
#define MN_OP(E, n, lo, hi, bwd, fl, wr, fu) [OP_##E] = bwd,
#include "graph/ops.def"
#undef MN_OP
};
_Static_assert(MN_ARRAY_LEN(grad_table) == OP_COUNT, "one backward entry per op");

bool autodiff_has_rule(op_id op) { return op >= 0 && op < OP_COUNT && grad_table[op] != NULL; }

mn_status autodiff_build(mn_graph *g, int32_t loss, int32_t seed, int32_t **grads_out) {
    int32_t nfwd = g->n;
    *grads_out = NULL;
    if (loss < 0 || loss >= nfwd) return graph_fail(g, MN_E_STATE, "autodiff: the graph has no loss");
    const bool raw = g->raw_ids;
    g->raw_ids = true;
    uint8_t *needs = calloc((size_t)nfwd, 1), *reach = calloc((size_t)nfwd, 1);
    int32_t *grad = malloc((size_t)nfwd * sizeof *grad);
    adctx c = {g, needs, grad, nfwd, NULL, 0, 0};
    mn_status st = MN_OK;
    if (!needs || !reach || !grad) {
        st = graph_fail(g, MN_E_NOMEM, "autodiff: out of memory");
        goto done;
    }
    /* needs[i]: a trainable parameter lies upstream of i (gradient must flow) */
    for (int32_t i = 0; i < nfwd; i++) {
        const node *n = &g->nodes[i];
        grad[i] = MN_NONE;
        if (n->op == OP_PARAM) needs[i] = !(n->flags & NODE_F_FROZEN);
        else if (n->op != OP_STOP_GRAD)
            for (int k = 0; k < n->nin; k++) needs[i] |= needs[n->in[k]];
    }
    /* reach[i]: i lies upstream of the loss */
    reach[loss] = 1;
    for (int32_t i = loss; i >= 0; i--)
        if (reach[i])
            for (int k = 0; k < g->nodes[i].nin; k++) reach[g->nodes[i].in[k]] = 1;

    if (needs[loss] && seed != MN_NONE) { /* d loss / d loss = the seed (a loss scale) */
        const node *sn = &g->nodes[seed], *ln = &g->nodes[loss];
        if (sn->dtype != MN_F32 || sn->rank != ln->rank || memcmp(sn->shape, ln->shape, sizeof(int64_t) * (size_t)ln->rank)) {
            st = graph_fail(g, MN_E_SHAPE, "autodiff: the seed (node %d) does not have the loss's dtype and shape", seed);
            goto done;
        }
        grad[loss] = seed;
    } else if (needs[loss]) { /* d loss / d loss = 1, in the loss's own shape ([] or [1], [1,1], ...) */
        float one = 1.0f;
        node ln = g->nodes[loss];
        if ((st = mn_graph_constant(g, &grad[loss], ln.rank, ln.shape, &one))) goto done;
    }
    for (int32_t i = loss; i >= 0; i--) {
        if (grad[i] == MN_NONE || !reach[i]) continue;
        node n = g->nodes[i]; /* copy: rules append nodes and may move the array */
        if (op_is_source(n.op) || n.op == OP_STOP_GRAD) continue;
        grad_fn fn = grad_table[n.op];
        if (!fn) {
            char sb[96];
            st = graph_fail(g, MN_E_UNSUPPORTED, "autodiff: op '%s' (%%%d %s) has no backward rule",
                            op_table[n.op].name, i, shape_str(sb, sizeof sb, n.rank, n.shape));
            goto done;
        }
        int32_t dx[NODE_MAX_IN];
        for (int k = 0; k < NODE_MAX_IN; k++) dx[k] = MN_NONE;
        if ((st = fn(&c, &n, i, grad[i], dx))) goto done;
        for (int k = 0; k < n.nin; k++) {
            int32_t in = n.in[k];
            if (dx[k] == MN_NONE || !needs[in]) continue;
            if (grad[in] == MN_NONE) grad[in] = dx[k];
            else if ((st = mn_add(g, &grad[in], grad[in], dx[k]))) goto done;
        }
    }
    for (int32_t i = nfwd; i < g->n; i++) g->nodes[i].flags |= NODE_F_BACKWARD;
done:
    g->raw_ids = raw;
    free(c.memo);
    free(needs);
    free(reach);
    if (st) {
        free(grad);
        return st;
    }
    *grads_out = grad;
    return MN_OK;
}
