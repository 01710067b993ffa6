/* vk_gen_multi.c - the multi-tensor optimizer kernels (kir.h): one dispatch
 * updates every parameter of a multi-update group, one computes every
 * block sum of squares of a tree of gradients.
 *
 * The memory plan put the group's parameters one after another in one
 * binding-sized region, each gradient, momentum / m / v at the same offset
 * from its own region's start (memplan_parallel), so a flat index of the
 * parameter region addresses the same element in every lane. Each tensor
 * owns a run of workgroups (a workgroup never straddles two tensors, so no
 * invocation touches the padding between them); which tensor a workgroup
 * serves, with its offset, length, learning-rate multiplier and weight
 * decay, is found by mt_find: a generated tree of comparisons with
 * constants (about log2(tensors) uniform branches per workgroup, nothing
 * read from memory). The element's update is optim.glsl's update(), the
 * one the per-parameter kernel runs, so the bits are the same.
 *
 * The sum of squares: the concat tree of sumsq blocks (optim.c) has one
 * output per block of a gradient; workgroup o finds its gradient (binding,
 * offset, length) and block with mt_find and sums it in reduce.glsl's order
 * for a sumsq over blocks, so each partial sum equals the per-gradient
 * kernel's bit for bit.
 *
 * Does not: decide the groups (kir.c) or place the regions (memplan.c).
 */
#include <stdarg.h>

#include "backend/vulkan/vk_codegen.h"
#include "kir/kir.h"

/* Elements per invocation of the update kernel (a workgroup: LOCAL_X * MT_PER). */
#define MT_PER 4

/* ---- a growing string ---------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool bad;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) MN_PRINTF(2, 3);
static void sb_add(sbuf *b, const char *fmt, ...) {
    if (b->bad) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const size_t room = b->cap - b->len;
        const int r = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (r < 0) {
            b->bad = true;
            return;
        }
        if (b->s && (size_t)r < room) {
            b->len += (size_t)r;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->len <= (size_t)r) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->bad = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
}

static mn_status mfail(const mn_graph *g, int32_t root, char *err, size_t cap, const char *what) {
    mn_fmt(err, cap, "vulkan codegen: multi-tensor kernel of %s (%%%d): %s", op_table[g->nodes[root].op].name,
           (int)root, what);
    return MN_E_UNSUPPORTED;
}

/* The search: entries [lo, hi) with increasing keys; x selects the last
 * entry whose key is <= x. leaf(b, t, ctx) writes entry t's assignments. */
typedef void (*leaf_fn)(sbuf *b, int32_t t, const void *ctx);

static void emit_search(sbuf *b, const uint64_t *key, int32_t lo, int32_t hi, const char *x, leaf_fn leaf,
                        const void *ctx) {
    if (hi - lo == 1) {
        leaf(b, lo, ctx);
        return;
    }
    const int32_t mid = lo + (hi - lo) / 2;
    sb_add(b, "if (%s < %lluu) {\n", x, (unsigned long long)key[mid]);
    emit_search(b, key, lo, mid, x, leaf, ctx);
    sb_add(b, "} else {\n");
    emit_search(b, key, mid, hi, x, leaf, ctx);
    sb_add(b, "}\n");
}

static uint64_t elem_off(const memplan *mp, int32_t id) { return mp->slots[id].offset / 4; }

/* Operand j as the range first .. last (a region) or one tensor. */
static void set_operand(vk_operands *ops, int j, int32_t first, int32_t last) {
    ops->first[j] = first;
    ops->last[j] = last;
    if (ops->n < j + 1) ops->n = j + 1;
}

/* Elements from first's start to last's end (both in one region). */
static uint64_t region_elems(const memplan *mp, int32_t first, int32_t last) {
    return (mp->slots[last].offset + mp->slots[last].bytes - mp->slots[first].offset + 3) / 4;
}

static void def_inputs(vk_kernel *k, const vk_operands *ops, const memplan *mp) {
    for (int j = 1; j < ops->n; j++) {
        char nm[24];
        snprintf(nm, sizeof nm, "X%d_ACCESS", j - 1);
        vk_def(k, nm, "%s", ops->written & (1u << j) ? "" : "readonly");
        snprintf(nm, sizeof nm, "X%d_N", j - 1);
        vk_def(k, nm, "%lluu", (unsigned long long)region_elems(mp, ops->first[j], ops->last[j]));
    }
}

/* ---- updates --------------------------------------------------------------- */

typedef struct upd_ctx {
    const mn_graph *g;
    const int32_t *ids; /* the updates, in order */
    const uint64_t *at, *wg;
} upd_ctx;

static void upd_leaf(sbuf *b, int32_t t, const void *c) {
    const upd_ctx *u = c;
    const node *n = &u->g->nodes[u->ids[t]];
    const mn_optim_attrs a = optim_attrs_of(n);
    char lr[48], wd[48];
    vk_float_literal(lr, sizeof lr, (float)a.lr_mult);
    vk_float_literal(wd, sizeof wd, (float)a.weight_decay);
    sb_add(b, "at = %lluu; n = %lluu; lrm = %s; wdv = %s; w0 = %lluu;\n", (unsigned long long)u->at[t],
           (unsigned long long)node_numel(&u->g->nodes[n->in[0]]), lr, wd, (unsigned long long)u->wg[t]);
}

mn_status vk_codegen_multi_update(vk_kernel *k, const mn_graph *g, int32_t root, const int32_t *members, int32_t nm,
                                  vk_operands *ops, const memplan *mp, const vk_caps *caps, char *err, size_t cap) {
    memset(k, 0, sizeof *k);
    memset(ops, 0, sizeof *ops);
    const node *rn = &g->nodes[root];
    const int32_t nt = nm + 1;
    const int lanes = rn->op == OP_ADAM_UPDATE ? 4 : 3; /* parameter, gradient, state: inputs 0 .. lanes-1 */
    if (rn->op != OP_ADAM_UPDATE && rn->op != OP_SGD_UPDATE) return mfail(g, root, err, cap, "not an update");
    if (nt > KIR_MULTI_MAX) return mfail(g, root, err, cap, "too many tensors");
    /* the search entries: the non-empty tensors (an empty one owns no workgroup) */
    int32_t *ids = malloc((size_t)nt * sizeof *ids);
    uint64_t *at = malloc((size_t)nt * sizeof *at), *wg = malloc((size_t)nt * sizeof *wg);
    mn_status st = ids && at && wg ? MN_OK : MN_E_NOMEM;
    sbuf b = {0};
    const uint32_t local = vk_pick_local(caps, 256);
    const uint64_t per_wg = (uint64_t)local * MT_PER;
    const int32_t u0 = nm ? members[0] : root;
    int32_t ne = 0;
    uint64_t groups = 0;
    for (int32_t t = 0; !st && t < nt; t++) {
        const int32_t id = t < nm ? members[t] : root;
        const node *u = &g->nodes[id];
        if (u->op != rn->op || u->nin != rn->nin) {
            st = mfail(g, root, err, cap, "mixed updates");
            break;
        }
        /* every lane holds tensor t at the same offset from its region's start */
        uint64_t off = 0;
        for (int l = 0; !st && l < lanes; l++) {
            const int32_t x = u->in[l], x0 = g->nodes[u0].in[l];
            if (memplan_pages(mp, x) || mp->slots[x].arena < 0 || mp->slots[x].arena != mp->slots[x0].arena ||
                mp->slots[x].offset < mp->slots[x0].offset || mp->slots[x].bytes != mp->slots[u->in[0]].bytes)
                st = mfail(g, root, err, cap, "a tensor outside its region");
            else if (l == 0) off = elem_off(mp, x) - elem_off(mp, x0);
            else if (elem_off(mp, x) - elem_off(mp, x0) != off) st = mfail(g, root, err, cap, "regions not parallel");
        }
        const uint64_t n = (uint64_t)node_numel(&g->nodes[u->in[0]]);
        if (st || !n) continue;
        ids[ne] = id;
        at[ne] = off;
        wg[ne++] = groups;
        groups += (n + per_wg - 1) / per_wg;
    }
    const int32_t first = g->nodes[u0].in[0], last = rn->in[0];
    /* multi-tensor kernels index in 32 bits (never MN_IDX64: a region lies
     * in one binding); the true 32-bit limit, not a lowered index_max */
    if (!st && region_elems(mp, first, last) > (uint64_t)VK_INDEX_MAX_DEFAULT)
        st = mfail(g, root, err, cap, "a region larger than 32-bit indexing allows");
    if (!st && !ne) st = mfail(g, root, err, cap, "every tensor is empty");
    if (!st) {
        /* operands as the update's: Y and X0 the parameters, X1 the
         * gradients, X2 (X3) the state, then hyper and the clip or gate */
        set_operand(ops, 0, first, last);
        for (int j = 0; j < rn->nin; j++) {
            if (j < lanes) set_operand(ops, 1 + j, g->nodes[u0].in[j], rn->in[j]);
            else set_operand(ops, 1 + j, rn->in[j], rn->in[j]);
            if (vk_input_written(rn, j)) ops->written |= (uint8_t)(1u << (1 + j));
        }
        vk_def(k, "Y_N", "%lluu", (unsigned long long)region_elems(mp, first, last));
        def_inputs(k, ops, mp);
        st = vk_update_defs(k, g, rn, caps, true, err, cap);
    }
    if (!st) {
        vk_def(k, "OPT_MULTI", "1");
        vk_def(k, "HAS_WD", "(wdv != 0.0)");
        vk_def(k, "MT_PER", "%du", MT_PER);
        vk_def(k, "MT_GROUPS", "%lluu", (unsigned long long)groups);
        vk_launch_1d(k, caps, groups * local, local);
        upd_ctx c = {g, ids, at, wg};
        sb_add(&b, "void mt_find(uint w, out uint at, out uint n, out float lrm, out float wdv, out uint w0) {\n");
        emit_search(&b, wg, 0, ne, "w", upd_leaf, &c);
        sb_add(&b, "}\n");
        if (b.bad) st = MN_E_NOMEM;
        else if (k->overflow) st = mfail(g, root, err, cap, "specialisation text too long");
    }
    if (!st) k->code = b.s;
    else free(b.s);
    free(ids);
    free(at);
    free(wg);
    return st;
}

/* ---- sums of squares ---------------------------------------------------------- */

typedef struct sq_ctx {
    const uint32_t *reg;
    const uint64_t *at, *len, *first;
    const bool *copy;
} sq_ctx;

static void sq_leaf(sbuf *b, int32_t t, const void *c) {
    const sq_ctx *q = c;
    sb_add(b, "reg = %uu; at = %lluu; len = %lluu; first = %lluu; copy = %s;\n", q->reg[t], (unsigned long long)q->at[t],
           (unsigned long long)q->len[t], (unsigned long long)q->first[t], q->copy[t] ? "true" : "false");
}

/* The inputs of the tree at id in order: members (kernel_root == root)
 * that are sumsq (computed) or concats (walked), anything else (copied). */
static bool tree_leaves(const mn_graph *g, const int32_t *kr, int32_t root, int32_t id, int32_t *out, int32_t *n,
                        int32_t most) {
    const node *x = &g->nodes[id];
    if (id != root && (kr[id] != root || x->op != OP_CONCAT)) {
        if (*n == most) return false;
        out[(*n)++] = id;
        return true;
    }
    if (x->op != OP_CONCAT) return false;
    for (int i = 0; i < x->nin; i++)
        if (!tree_leaves(g, kr, root, x->in[i], out, n, most)) return false;
    return true;
}

mn_status vk_codegen_multi_sumsq(vk_kernel *k, const mn_graph *g, int32_t root, const int32_t *kr,
                                 const int32_t *region_of, const int32_t *first_grad, const int32_t *last_grad,
                                 vk_operands *ops, const memplan *mp, const vk_caps *caps, char *err, size_t cap) {
    memset(k, 0, sizeof *k);
    memset(ops, 0, sizeof *ops);
    const node *rn = &g->nodes[root];
    const int32_t most = 2 * KIR_MULTI_MAX;
    int32_t *leaf = malloc((size_t)most * sizeof *leaf), nl = 0;
    uint32_t *reg = malloc((size_t)most * sizeof *reg);
    uint64_t *at = malloc((size_t)most * sizeof *at), *len = malloc((size_t)most * sizeof *len),
             *first = malloc((size_t)most * sizeof *first);
    bool *copy = malloc((size_t)most * sizeof *copy);
    mn_status st = leaf && reg && at && len && first && copy ? MN_OK : MN_E_NOMEM;
    if (!st && !tree_leaves(g, kr, root, root, leaf, &nl, most)) st = mfail(g, root, err, cap, "not a concat tree");
    int32_t keys[KIR_MAX_INPUTS]; /* operand j + 1: a gradient region (>= 0) or a copied tensor (-1 - id) */
    int nk = 0;
    int64_t block = 0;
    uint64_t parts = 0;
    set_operand(ops, 0, root, root);
    for (int32_t t = 0; !st && t < nl; t++) {
        const node *s = &g->nodes[leaf[t]];
        copy[t] = kr[leaf[t]] != root;
        const int32_t x = copy[t] ? leaf[t] : s->in[0], q = copy[t] ? -1 : region_of[memplan_root(g, x)];
        if (!copy[t] && (s->op != OP_SUMSQ || q < 0 || sumsq_block(s) <= 0 || (block && sumsq_block(s) != block))) {
            st = mfail(g, root, err, cap, "a leaf outside the gradient regions");
            break;
        }
        if (!copy[t]) block = sumsq_block(s);
        const int32_t key = copy[t] ? -1 - x : q;
        int r = 0;
        while (r < nk && keys[r] != key) r++;
        if (r == nk) {
            if (nk == KIR_MAX_INPUTS) {
                st = mfail(g, root, err, cap, "too many operands");
                break;
            }
            keys[nk++] = key;
            if (copy[t]) set_operand(ops, 1 + r, x, x);
            else set_operand(ops, 1 + r, first_grad[q], last_grad[q]);
        }
        const int32_t f = copy[t] ? x : first_grad[q];
        if (memplan_pages(mp, x) || mp->slots[x].arena < 0 || mp->slots[x].arena != mp->slots[f].arena ||
            mp->slots[x].offset < mp->slots[f].offset) {
            st = mfail(g, root, err, cap, "a tensor outside its region or paged");
            break;
        }
        reg[t] = (uint32_t)r;
        at[t] = elem_off(mp, x) - elem_off(mp, f);
        len[t] = (uint64_t)node_numel(&g->nodes[x]);
        first[t] = parts;
        parts += (uint64_t)node_numel(copy[t] ? &g->nodes[x] : s);
    }
    if (!st && !block) st = mfail(g, root, err, cap, "no sum of squares to compute");
    if (!st && parts != (uint64_t)node_numel(rn)) st = mfail(g, root, err, cap, "partials do not add up to the output");
    if (!st && memplan_pages(mp, root)) st = mfail(g, root, err, cap, "a paged output");
    sbuf b = {0};
    if (!st) {
        vk_def(k, "Y_N", "%lluu", (unsigned long long)parts);
        def_inputs(k, ops, mp);
        vk_def(k, "RED_MULTI", "1");
        vk_def(k, "BASE(o)", "0u");
        vk_def(k, "ROFF(l)", "(l)");
        st = vk_sumsq_block_defs(k, g, rn, caps, block, parts, err, cap);
    }
    if (!st) {
        /* entries with no partial (an empty copied tensor) are no search keys */
        int32_t w = 0;
        for (int32_t t = 0; t < nl; t++) {
            const bool empty = copy[t] && len[t] == 0;
            if (empty) continue;
            reg[w] = reg[t], at[w] = at[t], len[w] = len[t], first[w] = first[t], copy[w] = copy[t];
            w++;
        }
        sq_ctx c = {reg, at, len, first, copy};
        sb_add(&b, "void mt_find(uint o, out uint reg, out uint at, out uint len, out uint first, out bool copy) {\n");
        emit_search(&b, first, 0, w, "o", sq_leaf, &c);
        sb_add(&b, "}\n");
        if (b.bad) st = MN_E_NOMEM;
        else if (k->overflow) st = mfail(g, root, err, cap, "specialisation text too long");
    }
    if (!st) k->code = b.s;
    else free(b.s);
    free(leaf);
    free(reg);
    free(at);
    free(len);
    free(first);
    free(copy);
    return st;
}
