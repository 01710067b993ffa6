/* kir.c - the kernel-level plan and its pointwise-chain fusion (kir.h). */
#include <stdlib.h>
#include <string.h>

#include "kir/kir.h"

#include "graph/attrs.h"

mn_status kir_options_from_env(kir_options *o, bool backend_fuses, char *err, size_t cap) {
    const char *e = getenv("MEGANEURA_FUSION");
    const bool all = !e || !*e || strcmp(e, "1") == 0, pw = strcmp(e ? e : "", "pointwise") == 0,
               nomulti = strcmp(e ? e : "", "nomulti") == 0, nosaved = strcmp(e ? e : "", "nosaved") == 0,
               nocast = strcmp(e ? e : "", "nocast") == 0;
    if (!all && !pw && !nomulti && !nosaved && !nocast && strcmp(e, "0") != 0) {
        mn_fmt(err, cap, "MEGANEURA_FUSION='%s': want 0 (no fusion), pointwise (pointwise chains only), nomulti "
               "(no multi-tensor optimizer kernels), nosaved (no saved statistics), nocast (no packed cast "
               "stored by its producer's kernel) or 1 (all)", e);
        return MN_E_INVALID;
    }
    memset(o, 0, sizeof *o);
    o->fuse_pointwise = backend_fuses && (all || pw || nomulti || nosaved || nocast);
    o->fuse_matmul = backend_fuses && (all || nomulti || nosaved || nocast);
    o->fuse_multi = backend_fuses && (all || nosaved || nocast);
    o->fuse_saved = backend_fuses && (all || nomulti || nocast);
    o->fuse_store16 = backend_fuses && (all || nomulti || nosaved); /* the session: and the device's */
    return MN_OK;
}

/* The fusion classes kir folds into a consumer's kernel (ops.def's fuse column). */
bool kir_op_pointwise(op_id op) {
    const op_fuse f = op_fuse_class(op);
    return f == FUSE_ELEMENTWISE || f == FUSE_BCAST;
}

/* Ops that write a tensor other than their output's own fresh storage: no
 * read may be moved past them. */
static bool writes_in_place(op_id op) { return op_writes_any(op); }

/* Gathers read their input at another index than their own: a permute's
 * producers stay kernels of their own; a broadcast is numpy broadcasting,
 * the rule members already follow, so its producers fold into it. */
static bool gathers_at_other_index(op_id op) { return op_fuse_class(op) == FUSE_BCAST && op != OP_BROADCAST; }

/* Pointwise, f32 in and out, rank <= 4 (the eltwise kernel's index space). */
static bool fusible(const mn_graph *g, int32_t id) {
    const node *n = &g->nodes[id];
    /* 16-bit tensors are f32 containers (docs/ARCHITECTURE.md, Dtypes): a
     * cast is one more pointwise expression; a packed one (NODE_F_PACK16)
     * is its own kernel, which writes two values a word */
    if (!kir_op_pointwise(n->op) || !dtype_is_float(n->dtype) || n->rank > 4 || (n->flags & NODE_F_PACK16))
        return false;
    for (int i = 0; i < n->nin; i++)
        if (!dtype_is_float(g->nodes[n->in[i]].dtype) || g->nodes[n->in[i]].rank > 4) return false;
    return true;
}

/* A packed cast (NODE_F_PACK16) of an f32 tensor of its shape, which may
 * root a group whose kernel stores its 16-bit values (fuse_store16); never
 * a member: its readers read words. */
static bool store16_root(const mn_graph *g, int32_t id) {
    const node *n = &g->nodes[id];
    if (n->op != OP_CAST || !(n->flags & NODE_F_PACK16) || n->rank > 4 || n->nin != 1) return false;
    const node *x = &g->nodes[n->in[0]];
    return x->dtype == MN_F32 && !(x->flags & NODE_F_PACK16) && node_numel(x) == node_numel(n);
}

/* m reaches c's shape by numpy broadcasting (dims equal or 1, right-aligned):
 * c reads m at a broadcast index, and the fused kernel computes m there. */
static bool broadcasts_to(const node *m, const node *c) {
    if (m->rank > c->rank) return false;
    for (int d = 1; d <= m->rank; d++) {
        const int64_t a = m->shape[m->rank - d], b = c->shape[c->rank - d];
        if (a != b && a != 1) return false;
    }
    return true;
}

typedef struct group {
    int32_t ext[KIR_MAX_INPUTS]; /* distinct input tensors of the kernel */
    int8_t next;
    int8_t members; /* the root included */
    bool matmul;    /* a matmul member: the kernel is that matmul with the rest as its epilogue */
    bool reduce;    /* the root is a sum, mean or reduce_to whose input the members compute (a prologue) */
    bool costly;    /* a member (or the root) that is not cheap_in_epilogue */
} group;

/* Ops cheap enough to run in a matmul's epilogue, which is unrolled over
 * every element of an invocation's micro-tile (64 copies): arithmetic and
 * moves. A transcendental there (silu's exp) made the SwiGLU projection of
 * a 512-token prefill 10x slower on an H200 (code size, registers). */
static bool cheap_in_epilogue(op_id op) {
    switch (op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_SCALE: case OP_NEG: case OP_RELU: case OP_STOP_GRAD:
    case OP_BROADCAST:
    case OP_CAST: /* a rounding: integer arithmetic on the bits */
    case OP_RSQRT: /* a sqrt and a division: inference batch norm's scale as a convolution's epilogue */
        return true;
    default:
        return false;
    }
}

bool kir_epilogue_producer(op_id op) {
    switch (op) {
    case OP_MATMUL: case OP_CONV2D: case OP_CONV2D_BWD_INPUT:
    case OP_RMS_NORM: case OP_RMS_NORM_BWD: case OP_LAYER_NORM: case OP_LAYER_NORM_BWD:
        return true;
    default:
        return false;
    }
}

/* A matmul, convolution or row normalisation (kir_epilogue_producer) may
 * join a pointwise group as its producer when it has the root's shape
 * exactly (the epilogue runs once per output element, at the producer's
 * output index) and the group has no such member yet. */
static bool matmul_member(const mn_graph *g, int32_t m, int32_t root, const group *gr) {
    const node *n = &g->nodes[m], *r = &g->nodes[root];
    if (!kir_epilogue_producer(n->op) || gr->matmul || gr->reduce || gr->costly || n->dtype != MN_F32 ||
        n->rank != r->rank)
        return false;
    for (int i = 0; i < n->nin; i++) /* f32, or a 16-bit operand cast (read through the same X macros) */
        if (!dtype_is_float(g->nodes[n->in[i]].dtype)) return false;
    for (int d = 0; d < n->rank; d++)
        if (n->shape[d] != r->shape[d]) return false;
    return true;
}

/* A reduction whose input a pointwise chain may compute in its kernel (a
 * prologue: reduce.glsl reads the chain's value where it would read x):
 * the sums (sum, mean, reduce_to), f32, of a tensor in the eltwise index
 * space. */
static bool reduce_root(const mn_graph *g, int32_t id) {
    const node *n = &g->nodes[id];
    if (n->op != OP_SUM && n->op != OP_MEAN && n->op != OP_REDUCE_TO) return false;
    const node *x = &g->nodes[n->in[0]];
    return n->nin == 1 && n->dtype == MN_F32 && x->dtype == MN_F32 && x->rank <= 4;
}

static bool has(const group *gr, int32_t t) {
    for (int i = 0; i < gr->next; i++)
        if (gr->ext[i] == t) return true;
    return false;
}

/* A scalar constant (mn_graph_scalar: an eps): a pointwise member reads it
 * as a literal, so it takes no binding (kir_literal_input). */
bool kir_literal_input(const mn_graph *g, int32_t id) {
    const node *n = &g->nodes[id];
    return n->op == OP_CONST && n->dtype == MN_F32 && n->data && node_numel(n) == 1;
}

/* The group of root r as it would be with m folded in; false if it would
 * bind too many tensors. */
static bool fold(group *out, const group *gr, const mn_graph *g, int32_t m) {
    group t = *gr;
    int w = 0;
    for (int i = 0; i < t.next; i++)
        if (t.ext[i] != m) t.ext[w++] = t.ext[i];
    t.next = (int8_t)w;
    const node *n = &g->nodes[m];
    const bool pointwise = kir_op_pointwise(n->op); /* a product binds all of its operands */
    for (int i = 0; i < n->nin; i++) {
        if (has(&t, n->in[i]) || (pointwise && kir_literal_input(g, n->in[i]))) continue;
        if (t.next == KIR_MAX_INPUTS) return false;
        t.ext[t.next++] = n->in[i];
    }
    t.members++;
    *out = t;
    return true;
}

/* Rewrites list[0..n) so that each group's members run right before their
 * root, in their original order. */
static mn_status regroup(const kir *k, int32_t *list, int32_t n) {
    int32_t *out = malloc(((size_t)n + 1) * sizeof *out), *head = malloc((size_t)k->n * sizeof *head),
            *tail = malloc((size_t)k->n * sizeof *tail), *next = malloc((size_t)k->n * sizeof *next);
    mn_status st = out && head && tail && next ? MN_OK : MN_E_NOMEM;
    int32_t w = 0;
    if (!st) {
        for (int32_t i = 0; i < k->n; i++) head[i] = tail[i] = MN_NONE;
        for (int32_t i = 0; i < n; i++) { /* members of each root, in list order */
            const int32_t id = list[i], r = k->root[id];
            if (r == id) continue;
            next[id] = MN_NONE;
            if (head[r] == MN_NONE) head[r] = id;
            else next[tail[r]] = id;
            tail[r] = id;
        }
        for (int32_t i = 0; i < n; i++) {
            const int32_t id = list[i];
            if (k->root[id] != id) continue;
            for (int32_t m = head[id]; m != MN_NONE; m = next[m]) out[w++] = m;
            out[w++] = id;
        }
        if (w == n) memcpy(list, out, (size_t)n * sizeof *out);
        else st = MN_E_INVALID; /* a member without its root in the list */
    }
    free(out);
    free(head);
    free(tail);
    free(next);
    return st;
}

/* ---- multi-tensor optimizer kernels --------------------------------------- */

static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

/* The node whose storage id is: views (reshape) followed to their input. */
static int32_t view_root(const mn_graph *g, int32_t id) {
    while (op_has(g->nodes[id].op, OPF_VIEW)) id = g->nodes[id].in[0];
    return id;
}

/* The owner of id's storage: views and in-place updates followed (memplan's rule). */
static int32_t storage_root(const mn_graph *g, int32_t id) {
    while (op_has(g->nodes[id].op, OPF_VIEW | OPF_ALIAS)) id = g->nodes[id].in[0];
    return id;
}

/* ---- head-layout folds ----------------------------------------------------- */

int kir_heads_input(op_id op) { return op == OP_ROPE ? 0 : op == OP_KV_APPEND ? 1 : -1; }

/* The permute (0, 2, 1, 3) of a rank-4 f32 tensor. */
static bool heads_permute(const node *n) {
    if (n->op != OP_PERMUTE || n->rank != 4 || n->dtype != MN_F32) return false;
    static const int64_t want[4] = {0, 2, 1, 3};
    for (int i = 0; i < 4; i++)
        if (permute_axis(n, i) != want[i]) return false;
    return true;
}

/* Member m may fold into root r: m's own kernel until now, used by r
 * alone, not pinned for the user, small enough for one binding, and no
 * node scheduled between them writes the storage of `late` (the tensor
 * whose read moves to r's position) in place. */
static bool heads_foldable(const kir *k, const mn_graph *g, const schedule *s, const int32_t *pos, const int32_t *nuse,
                           const int32_t *user, int32_t m, int32_t r, int32_t late, uint64_t max_bytes) {
    const node *mn = &g->nodes[m];
    if (pos[m] < 0 || pos[r] <= pos[m] || k->root[m] != m || k->root[r] != r || k->kind[r] != KIR_SINGLE) return false;
    if (nuse[m] != 1 || user[m] != r || (mn->flags & (NODE_F_OUTPUT | NODE_F_LOSS | NODE_F_READ | NODE_F_SYNC)))
        return false;
    if (node_bytes(mn, 4) > max_bytes) return false;
    const int32_t home = storage_root(g, late);
    for (int32_t t = pos[m] + 1; t < pos[r]; t++) {
        const node *w = &g->nodes[s->order[t]];
        for (int i = 0; i < w->nin; i++)
            if (op_writes_input(w->op, i) && storage_root(g, w->in[i]) == home) return false;
    }
    return true;
}

static void heads_pass(kir *k, const mn_graph *g, const schedule *s, const kir_options *o, const int32_t *pos,
                       const int32_t *nuse, const int32_t *user) {
    const uint64_t max_bytes = o->multi_bytes ? o->multi_bytes : (uint64_t)1 << 31;
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        const node *n = &g->nodes[id];
        const int in = kir_heads_input(n->op);
        if (in >= 0 && in < n->nin && n->dtype == MN_F32) { /* permute -> rope / kv_append */
            const int32_t m = n->in[in];
            if (heads_permute(&g->nodes[m]) &&
                heads_foldable(k, g, s, pos, nuse, user, m, id, g->nodes[m].in[0], max_bytes)) {
                k->root[m] = id;
                k->kind[id] = KIR_HEADS_IN;
                k->fused++;
            }
        } else if (heads_permute(n) && g->nodes[n->in[0]].op == OP_ATTENTION) { /* attention -> permute */
            const int32_t m = n->in[0];
            const node *a = &g->nodes[m];
            bool ok = a->dtype == MN_F32 && a->rank == 4;
            /* the attention's reads move to the permute's position */
            for (int i = 0; ok && i < a->nin; i++)
                ok = heads_foldable(k, g, s, pos, nuse, user, m, id, a->in[i], max_bytes);
            if (ok) {
                k->root[m] = id;
                k->kind[id] = KIR_HEADS_OUT;
                k->fused++;
            }
        }
    }
}

/* ---- saved statistics ------------------------------------------------------ */

/* lse = attention_lse(q, k, v[, pos]) of forward f: the same inputs and the
 * same mask and scale (wrt means nothing to either). */
static bool lse_of(const mn_graph *g, const node *l, const node *f) {
    if (l->op != OP_ATTENTION_LSE || f->op != OP_ATTENTION || l->nin != f->nin) return false;
    for (int i = 0; i < l->nin; i++)
        if (l->in[i] != f->in[i]) return false;
    const mn_attention_attrs a = attention_attrs_of(l), b = attention_attrs_of(f);
    (void)g;
    return a.causal == b.causal && a.window == b.window && a.scale == b.scale;
}

/* Moves list[from] to list[to] (to < from), shifting the nodes between. */
static void move_back(int32_t *list, int32_t from, int32_t to) {
    const int32_t id = list[from];
    memmove(list + to + 1, list + to, (size_t)(from - to) * sizeof *list);
    list[to] = id;
}

/* Runs after the regroup, over the final order: for each attention_lse,
 * the forward with its inputs whose kernel runs earlier; the lse then
 * directly follows that kernel (its inputs are the forward's: all computed
 * by then). */
static mn_status saved_pass(kir *k, const mn_graph *g, schedule *s) {
    int32_t *pos = NULL;
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t lid = s->order[t];
        const node *l = &g->nodes[lid];
        if (l->op != OP_ATTENTION_LSE || k->root[lid] != lid) continue;
        if (!pos) {
            pos = malloc((size_t)k->n * sizeof *pos);
            if (!pos) return MN_E_NOMEM;
        }
        for (int32_t u = 0; u < s->n; u++) pos[s->order[u]] = u;
        /* the forward: a consumer of q scheduled before the lse */
        int32_t r = MN_NONE;
        for (int32_t u = 0; u < t && r == MN_NONE; u++) {
            const int32_t f = s->order[u];
            if (lse_of(g, l, &g->nodes[f])) r = k->root[f];
        }
        if (r == MN_NONE || k->saved[r] != MN_NONE || (g->nodes[lid].flags & (NODE_F_OUTPUT | NODE_F_READ)))
            continue;
        const int32_t at = pos[r] + 1;
        if (at > t) continue;
        bool ok = true; /* nothing between writes what the lse reads */
        for (int32_t u = at; ok && u < t; u++) {
            const node *w = &g->nodes[s->order[u]];
            for (int i = 0; ok && i < w->nin; i++)
                for (int j = 0; ok && op_writes_input(w->op, i) && j < l->nin; j++)
                    ok = storage_root(g, w->in[i]) != storage_root(g, l->in[j]);
        }
        if (!ok) continue;
        move_back(s->order, t, at);
        k->saved[r] = lid;
        k->kind[lid] = KIR_SAVED;
        k->nsaved++;
    }
    free(pos);
    return MN_OK;
}

static bool is_update(op_id op) { return op == OP_SGD_UPDATE || op == OP_ADAM_UPDATE; }

/* State of the multi pass. */
typedef struct multi_ctx {
    const mn_graph *g;
    const schedule *s;
    kir *k;
    const int32_t *pos, *nuse, *user, *writers;
    uint8_t *io;      /* per node: bit 0: its storage is pinned for the user (an alias is an output, the
                         loss, read); bit 1: an op updates its storage in place */
    uint8_t *claimed; /* per node: a tensor of a multi-update kernel already */
    int32_t *grp;     /* per node: the multi-update kernel whose gradient region holds it, or -1 */
    int32_t *ids;     /* multi_ids under construction */
    int32_t nids;
} multi_ctx;

/* An update whose parameter, state and gradient may join a multi-tensor
 * kernel: f32 tensors of the parameter's bytes (at most max_bytes), the
 * gradient's storage computed by a kernel of its own (not a source, not a
 * folded member, not read by the user, not another parameter's gradient). */
static bool multi_candidate(const multi_ctx *c, int32_t u, uint64_t max_bytes) {
    const mn_graph *g = c->g;
    const node *n = &g->nodes[u];
    const int nstate = n->op == OP_ADAM_UPDATE ? 2 : 1;
    if (c->k->root[u] != u || n->nin < 3 + nstate) return false;
    const node *p = &g->nodes[n->in[0]];
    const uint64_t bytes = node_bytes(p, 4);
    if (p->op != OP_PARAM || p->dtype != MN_F32 || align64(bytes) > max_bytes || c->claimed[n->in[0]]) return false;
    for (int i = 0; i < nstate; i++) {
        const node *st = &g->nodes[n->in[2 + i]];
        if (st->op != OP_STATE || st->dtype != MN_F32 || node_bytes(st, 4) != bytes || c->claimed[n->in[2 + i]])
            return false;
    }
    const int32_t r = view_root(g, n->in[1]);
    const node *gr = &g->nodes[r];
    return !op_is_source(gr->op) && !op_has(gr->op, OPF_ALIAS) && gr->dtype == MN_F32 && node_bytes(gr, 4) == bytes &&
           c->k->root[r] == r && !c->io[r] && !c->claimed[r] && c->pos[r] >= 0;
}

/* Updates that may share a kernel: the same op, inputs other than the
 * parameter, gradient and state (hyper, the clip or gate), and settings
 * other than the learning-rate multiplier and weight decay (table entries). */
static bool same_kind(const mn_graph *g, int32_t a, int32_t b) {
    const node *x = &g->nodes[a], *y = &g->nodes[b];
    if (x->op != y->op || x->nin != y->nin) return false;
    const int first = x->op == OP_ADAM_UPDATE ? 4 : 3;
    for (int i = first; i < x->nin; i++)
        if (x->in[i] != y->in[i]) return false;
    const mn_optim_attrs p = optim_attrs_of(x), q = optim_attrs_of(y);
    return p.beta1 == q.beta1 && p.beta2 == q.beta2 && p.eps == q.eps && p.variant == q.variant && p.gated == q.gated;
}

/* Makes ids[from .. nids) one multi-update kernel (root: the last). */
static mn_status commit_updates(multi_ctx *c, int32_t from) {
    kir *k = c->k;
    const int32_t n = c->nids - from;
    if (n < 2) {
        c->nids = from; /* one update: its own kernel */
        return MN_OK;
    }
    kir_multi *m = realloc(k->multi, ((size_t)k->nmulti + 1) * sizeof *m);
    if (!m) return MN_E_NOMEM;
    k->multi = m;
    const int32_t root = c->ids[c->nids - 1];
    m[k->nmulti] = (kir_multi){root, from, n};
    for (int32_t i = from; i < c->nids; i++) {
        const node *u = &c->g->nodes[c->ids[i]];
        const int nstate = u->op == OP_ADAM_UPDATE ? 2 : 1;
        c->claimed[u->in[0]] = 1;
        for (int j = 0; j < nstate; j++) c->claimed[u->in[2 + j]] = 1;
        const int32_t r = view_root(c->g, u->in[1]);
        c->claimed[r] = 1;
        c->grp[r] = k->nmulti;
        if (c->ids[i] != root) {
            k->root[c->ids[i]] = root;
            k->fused++;
        }
    }
    k->kind[root] = KIR_MULTI_UPDATE;
    k->nmulti++;
    return MN_OK;
}

/* Runs of consecutive compatible updates, cut where their parameters'
 * bytes (each aligned to 64) would exceed max_bytes. */
static mn_status multi_updates(multi_ctx *c, uint64_t max_bytes) {
    const schedule *s = c->s;
    int32_t from = 0, prev = MN_NONE;
    uint64_t bytes = 0;
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        const bool cand = is_update(c->g->nodes[id].op) && multi_candidate(c, id, max_bytes);
        const uint64_t b = cand ? align64(node_bytes(&c->g->nodes[c->g->nodes[id].in[0]], 4)) : 0;
        const bool joins = cand && prev != MN_NONE && same_kind(c->g, prev, id) && bytes + b <= max_bytes &&
                           c->nids - from < KIR_MULTI_MAX;
        if (!joins) {
            mn_status st = commit_updates(c, from);
            if (st) return st;
            from = c->nids;
            bytes = 0;
            prev = MN_NONE;
        }
        if (cand) {
            c->ids[c->nids++] = id;
            bytes += b;
            prev = id;
        }
    }
    return commit_updates(c, from);
}

/* Per concat of a clean tree: its computed leaves, the operands its kernel
 * binds (gradient regions: multi-update kernel q >= 0; other tensors copied
 * in: -1 - id) and the leaves' block length. */
typedef struct tree_info {
    int32_t leaves;
    int64_t block;
    int8_t nop;
    int32_t op[KIR_MAX_INPUTS];
    bool clean;
} tree_info;

/* A block sum of squares of a gradient in a multi-update region. */
static bool sumsq_leaf(const multi_ctx *c, int32_t id) {
    const node *n = &c->g->nodes[id];
    if (n->op != OP_SUMSQ || sumsq_block(n) <= 0 || n->dtype != MN_F32 || c->k->root[id] != id || c->io[id]) return false;
    return c->grp[view_root(c->g, n->in[0])] >= 0 && c->g->nodes[n->in[0]].dtype == MN_F32;
}

static bool add_operand(tree_info *t, int32_t key) {
    for (int i = 0; i < t->nop; i++)
        if (t->op[i] == key) return true;
    if (t->nop == KIR_MAX_INPUTS) return false;
    t->op[t->nop++] = key;
    return true;
}

/* Folds the subtree of id into root r: its concats and computed leaves
 * (ti[.].clean or sumsq_leaf), inputs first. */
static void fold_tree(multi_ctx *c, const tree_info *ti, int32_t id, int32_t r) {
    const node *n = &c->g->nodes[id];
    if (n->op == OP_CONCAT)
        for (int i = 0; i < n->nin; i++) {
            const int32_t m = n->in[i];
            if (c->nuse[m] == 1 && c->user[m] == id && (ti[m].clean || sumsq_leaf(c, m))) fold_tree(c, ti, m, r);
        }
    if (id != r) {
        c->k->root[id] = r;
        c->k->fused++;
    }
}

static bool tree_movable(const multi_ctx *c, const tree_info *ti, int32_t id, int32_t r) {
    const node *n = &c->g->nodes[id];
    if (id != r && !(c->writers[c->pos[r]] == c->writers[c->pos[id] + 1])) return false;
    if (n->op == OP_CONCAT)
        for (int i = 0; i < n->nin; i++) {
            const int32_t m = n->in[i];
            if (c->nuse[m] == 1 && c->user[m] == id && (ti[m].clean || sumsq_leaf(c, m)) && !tree_movable(c, ti, m, r))
                return false;
        }
    return true;
}

/* Concat trees over sumsq leaves of multi-update gradients (maximal clean
 * subtrees): one kernel each. An input that is no such leaf (the sums of a
 * paged gradient, say) is copied into its place by the kernel. */
static mn_status multi_sumsq(multi_ctx *c, uint64_t max_bytes) {
    const mn_graph *g = c->g;
    const schedule *s = c->s;
    tree_info *ti = calloc((size_t)g->n + 1, sizeof *ti);
    if (!ti) return MN_E_NOMEM;
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        const node *n = &g->nodes[id];
        if (n->op != OP_CONCAT || concat_axis(n) != 0 || n->rank != 1 || n->dtype != MN_F32 || c->io[id] ||
            c->k->root[id] != id || node_bytes(n, 4) > max_bytes)
            continue;
        tree_info x = {0, 0, 0, {0}, true};
        for (int i = 0; i < n->nin && x.clean; i++) {
            const int32_t m = n->in[i];
            const node *mn = &g->nodes[m];
            bool dup = false;
            for (int j = 0; j < i; j++) dup |= n->in[j] == m;
            const bool own = !dup && c->nuse[m] == 1 && c->user[m] == id;
            if (own && sumsq_leaf(c, m)) {
                const int64_t b = sumsq_block(mn);
                x.clean = (x.block == 0 || x.block == b) && add_operand(&x, c->grp[view_root(g, mn->in[0])]);
                x.block = b;
                x.leaves++;
            } else if (own && ti[m].clean) {
                x.clean = x.block == 0 || x.block == ti[m].block;
                x.block = ti[m].block;
                for (int j = 0; j < ti[m].nop && x.clean; j++) x.clean = add_operand(&x, ti[m].op[j]);
                x.leaves += ti[m].leaves;
            } else { /* copied: a tensor with storage of its own that fits a binding */
                x.clean = mn->rank == 1 && mn->dtype == MN_F32 && c->k->root[m] == m && node_bytes(mn, 4) <= max_bytes &&
                          add_operand(&x, -1 - m);
            }
        }
        x.clean &= x.leaves > 0 && x.leaves <= KIR_MULTI_MAX;
        ti[id] = x;
    }
    /* roots: from the end, so a clean concat's clean inputs fold into it */
    for (int32_t t = s->n - 1; t >= 0; t--) {
        const int32_t id = s->order[t];
        if (!ti[id].clean || c->k->root[id] != id || !tree_movable(c, ti, id, id)) continue;
        fold_tree(c, ti, id, id);
        c->k->kind[id] = KIR_MULTI_SUMSQ;
    }
    free(ti);
    return MN_OK;
}

/* The multi-tensor pass over the schedule (after the pointwise pass). */
static mn_status multi_pass(kir *k, const mn_graph *g, const schedule *s, const kir_options *o, const int32_t *pos,
                            const int32_t *nuse, const int32_t *user, const int32_t *writers) {
    multi_ctx c = {g, s, k, pos, nuse, user, writers, calloc((size_t)g->n + 1, 1), calloc((size_t)g->n + 1, 1),
                   malloc(((size_t)g->n + 1) * sizeof(int32_t)), malloc(((size_t)s->n + 1) * sizeof(int32_t)), 0};
    mn_status st = c.io && c.claimed && c.grp && c.ids ? MN_OK : MN_E_NOMEM;
    if (!st) {
        for (int32_t i = 0; i < g->n; i++) {
            c.grp[i] = -1;
            if (g->nodes[i].flags & (NODE_F_OUTPUT | NODE_F_LOSS | NODE_F_READ)) c.io[storage_root(g, i)] |= 1;
            /* storage another op updates in place is no gradient to move */
            if (op_has(g->nodes[i].op, OPF_ALIAS)) c.io[storage_root(g, i)] |= 2;
        }
        const uint64_t max_bytes = o->multi_bytes ? o->multi_bytes : (uint64_t)1 << 31;
        st = multi_updates(&c, max_bytes);
    }
    if (!st && k->nmulti) st = multi_sumsq(&c, o->multi_bytes ? o->multi_bytes : (uint64_t)1 << 31);
    if (!st && k->nmulti) {
        k->multi_ids = malloc((size_t)c.nids * sizeof *k->multi_ids);
        if (!k->multi_ids) st = MN_E_NOMEM;
        else memcpy(k->multi_ids, c.ids, (size_t)c.nids * sizeof *k->multi_ids);
    }
    free(c.io);
    free(c.claimed);
    free(c.grp);
    free(c.ids);
    return st;
}

mn_status kir_build(kir *k, const mn_graph *g, schedule *s, const kir_options *o) {
    memset(k, 0, sizeof *k);
    const int32_t n = g->n;
    k->n = n;
    k->root = malloc(((size_t)n + 1) * sizeof *k->root);
    k->kind = calloc((size_t)n + 1, 1);
    if (!k->root || !k->kind) {
        kir_free(k);
        return MN_E_NOMEM;
    }
    for (int32_t i = 0; i < n; i++) k->root[i] = i;
    int32_t views = 0; /* reshapes share their input's storage: no kernel */
    for (int32_t t = 0; t < s->n; t++) views += g->nodes[s->order[t]].op == OP_RESHAPE;
    k->kernels = s->n - views;
    if (!o || (!o->fuse_pointwise && !o->fuse_multi) || s->n == 0) return MN_OK;
    int32_t *pos = malloc((size_t)n * sizeof *pos), *nuse = calloc((size_t)n, sizeof *nuse),
            *user = malloc((size_t)n * sizeof *user), *writers = calloc((size_t)s->n + 1, sizeof *writers);
    group *gr = malloc((size_t)n * sizeof *gr);
    mn_status st = pos && nuse && user && writers && gr ? MN_OK : MN_E_NOMEM;
    if (st) goto done;
    for (int32_t i = 0; i < n; i++) pos[i] = -1, user[i] = MN_NONE;
    /* positions, distinct consumers, and writers[t] = in-place writers before position t */
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        const node *nd = &g->nodes[id];
        pos[id] = t;
        writers[t + 1] = writers[t] + (writes_in_place(nd->op) ? 1 : 0);
        for (int i = 0; i < nd->nin; i++) {
            bool seen = false;
            for (int j = 0; j < i; j++) seen |= nd->in[j] == nd->in[i];
            if (seen) continue;
            nuse[nd->in[i]]++;
            user[nd->in[i]] = id;
        }
    }
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        const node *nd = &g->nodes[id];
        gr[id].next = 0;
        gr[id].members = 1;
        gr[id].matmul = false;
        gr[id].reduce = reduce_root(g, id);
        gr[id].costly = !cheap_in_epilogue(nd->op);
        for (int i = 0; i < nd->nin; i++)
            if (!has(&gr[id], nd->in[i]) && gr[id].next < KIR_MAX_INPUTS &&
                !(kir_op_pointwise(nd->op) && kir_literal_input(g, nd->in[i])))
                gr[id].ext[gr[id].next++] = nd->in[i];
    }
    /* consumers before producers: a node's group is final when its inputs are visited */
    for (int32_t t = s->n - 1; o->fuse_pointwise && t >= 0; t--) {
        const int32_t c = s->order[t];
        const node *cn = &g->nodes[c];
        const bool red = k->root[c] == c && reduce_root(g, c); /* a prologue's consumer */
        const bool s16 = o->fuse_store16 && k->root[c] == c && store16_root(g, c); /* roots only */
        if (!red && !s16 && (!fusible(g, c) || gathers_at_other_index(cn->op) || cn->nin > KIR_MAX_INPUTS)) continue;
        const int32_t r = k->root[c];
        for (int i = 0; i < cn->nin; i++) {
            const int32_t m = cn->in[i];
            const node *mn = &g->nodes[m];
            group next;
            const bool mm = o->fuse_matmul && matmul_member(g, m, r, &gr[r]);
            if (pos[m] < 0 || k->root[m] != m || !(mm || fusible(g, m))) continue;
            if (gr[r].matmul && !mm && !cheap_in_epilogue(mn->op)) continue;
            if (mn->flags & (NODE_F_OUTPUT | NODE_F_LOSS | NODE_F_READ | NODE_F_SYNC)) continue;
            if (nuse[m] != 1 || user[m] != c || (!red && !broadcasts_to(mn, cn))) continue;
            if (writers[pos[r]] != writers[pos[m] + 1]) continue; /* an in-place write between them */
            if (gr[r].members >= KIR_MAX_MEMBERS || !fold(&next, &gr[r], g, m)) continue;
            next.matmul = next.matmul || mm;
            next.costly = next.costly || (!mm && !cheap_in_epilogue(mn->op));
            gr[r] = next;
            k->root[m] = r;
            k->fused++;
            if (gr[r].reduce) k->kind[r] = KIR_REDUCE;
        }
    }
    if (o->fuse_matmul) heads_pass(k, g, s, o, pos, nuse, user);
    if (o->fuse_multi && (st = multi_pass(k, g, s, o, pos, nuse, user, writers))) goto done;
    k->kernels = s->n - views - k->fused;
    if (k->fused) {
        st = regroup(k, s->order, s->n);
        if (!st) st = regroup(k, s->fwd, s->nfwd);
    }
    if (!st && o->fuse_saved) {
        k->saved = malloc(((size_t)n + 1) * sizeof *k->saved);
        if (!k->saved) st = MN_E_NOMEM;
        for (int32_t i = 0; !st && i < n; i++) k->saved[i] = MN_NONE;
        if (!st) st = saved_pass(k, g, s);
        if (!st && !k->nsaved) free(k->saved), k->saved = NULL;
        k->kernels -= k->nsaved;
    }
done:
    free(pos);
    free(nuse);
    free(user);
    free(writers);
    free(gr);
    if (st) kir_free(k);
    return st;
}

void kir_free(kir *k) {
    free(k->saved);
    free(k->root);
    free(k->kind);
    free(k->multi);
    free(k->multi_ids);
    memset(k, 0, sizeof *k);
}

void kir_dump(const kir *k, const mn_graph *g, const schedule *s, FILE *f) {
    fprintf(f, "kernels: %d dispatching kernels for %d scheduled nodes (%d folded into others, %d saved by "
               "another kernel, reshapes dispatch nothing)\n", k->kernels, s->n, k->fused, k->nsaved);
    /* dispatches by the op of their root, most frequent first */
    int32_t by[OP_COUNT] = {0};
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        if (k->root[id] == id && g->nodes[id].op != OP_RESHAPE && kir_kind_of(k, id) != KIR_SAVED)
            by[g->nodes[id].op]++;
    }
    fprintf(f, "  by root op:");
    for (;;) {
        int best = -1;
        for (int op = 0; op < OP_COUNT; op++)
            if (by[op] > 0 && (best < 0 || by[op] > by[best])) best = op;
        if (best < 0) break;
        fprintf(f, " %s %d", op_table[best].name, by[best]);
        by[best] = 0;
    }
    fprintf(f, "\n");
    /* the members of a kernel run right before its root (regroup) */
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        if (kir_saved_of(k, id) != MN_NONE)
            fprintf(f, "  kernel %%%d %s also writes %%%d %s\n", id, op_table[g->nodes[id].op].name, k->saved[id],
                    op_table[g->nodes[k->saved[id]].op].name);
        if (k->root[id] != id) continue;
        int32_t members = 0;
        while (members < t && k->root[s->order[t - 1 - members]] == id) members++;
        if (!members) continue;
        const kir_kind kind = kir_kind_of(k, id);
        fprintf(f, "  kernel %%%d %s", id, op_table[g->nodes[id].op].name);
        if (kind == KIR_MULTI_UPDATE || kind == KIR_MULTI_SUMSQ) { /* long: the first and last members */
            fprintf(f, " (multi-tensor, %d nodes): %%%d %s .. %%%d %s -> %%%d\n", members + 1, s->order[t - members],
                    op_table[g->nodes[s->order[t - members]].op].name, s->order[t - 1],
                    op_table[g->nodes[s->order[t - 1]].op].name, id);
            continue;
        }
        fprintf(f, ":");
        for (int32_t j = t - members; j < t; j++) fprintf(f, " %%%d %s", s->order[j], op_table[g->nodes[s->order[j]].op].name);
        fprintf(f, " -> %%%d\n", id);
    }
}
