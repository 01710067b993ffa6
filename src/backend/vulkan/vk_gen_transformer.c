/* vk_gen_transformer.c - Vulkan code generation for the transformer family:
 * embedding (+ backward), rotary embedding, attention (forward, row
 * log-sum-exp, backward helpers) and the KV-cache append.
 *
 * Templates (kernels/):
 *   embedding      one invocation per output element (a gather)
 *   embedding_bwd  one workgroup per table row: the workgroup scans the ids
 *                  and adds the dy rows holding its id, in position order
 *                  (duplicate ids handled without atomics or sorting)
 *   rope           one invocation per rotated pair; the angle's turn
 *                  fraction comes from host-computed (hi, lo) frequencies
 *   attention      flash-attention style: one workgroup per (batch, head,
 *                  block of rows), the other side streamed through shared
 *                  memory in tiles; AT_OP picks forward, lse, dq, dk/dv or
 *                  the per-row prep (lse, delta); the row kernel
 *                  (attention.glsl), the FMA tile kernel (attention_tile)
 *                  and, in the fast contract on cooperative matrices, the
 *                  tensor-core one (attention_coopmat), the two block
 *                  kernels after attention_common (vk_kernel.lib)
 *   kv_append      one invocation per new element, written in place
 *
 * Every shape, the mask parameters and the scale are #defines; the
 * host-written position is read from its input at run time. Index
 * arithmetic is 32-bit, or 64-bit where an operand exceeds
 * vk_caps.index_max elements (vk_codegen_node; element offsets are then
 * IDX, and the sizes they are built from 64-bit literals, vk_def_u).
 *
 * Does not: compile or dispatch (vk_compile.c, vk_backend.c), nor generate
 * any other family (vk_gen_pointwise.c, vk_gen_linalg.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk_codegen.h"

static const node *tr_in(const mn_graph *g, const node *n, int i) { return &g->nodes[n->in[i]]; }

static mn_status tr_fail(const mn_graph *g, const node *n, mn_status st, char *err, size_t cap, const char *what) {
    mn_fmt(err, cap, "vulkan codegen: %s (%%%d): %s", op_table[n->op].name, (int)(n - g->nodes), what);
    return st;
}

/* Largest power of two <= want, within the device's invocation limit. */
static uint32_t tr_local(const vk_caps *caps, uint32_t want) {
    uint32_t lim = caps->max_invocations ? caps->max_invocations : 128, l = 1;
    while (l * 2 <= want && l * 2 <= lim) l *= 2;
    return l;
}

/* nwg workgroups of `local` invocations on a 2-D grid (x up to the device's
 * limit); the kernel rebuilds the linear workgroup index and returns beyond
 * TR_NWG. */
static mn_status tr_launch_groups(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                  uint64_t nwg, uint32_t local, char *err, size_t cap) {
    uint64_t maxx = caps->max_groups[0] ? caps->max_groups[0] : 65535;
    uint64_t maxy = caps->max_groups[1] ? caps->max_groups[1] : 65535;
    if (nwg == 0) nwg = 1;
    uint64_t gx = nwg < maxx ? nwg : maxx, gy = (nwg + gx - 1) / gx;
    if (gy > maxy || nwg > UINT32_MAX) return tr_fail(g, n, MN_E_UNSUPPORTED, err, cap, "too many workgroups");
    k->local[0] = local, k->local[1] = 1, k->local[2] = 1;
    k->groups[0] = (uint32_t)gx, k->groups[1] = (uint32_t)gy, k->groups[2] = 1;
    vk_def(k, "TR_NWG", "%lluu", (unsigned long long)nwg);
    return MN_OK;
}

/* A GLSL float literal that reads back as v (finite v). */
static const char *tr_flit(char *buf, size_t cap, float v) {
    char t[40];
    snprintf(t, sizeof t, "%.9g", (double)v);
    snprintf(buf, cap, "%s%s", t, strpbrk(t, ".eni") ? "" : ".0");
    return buf;
}

/* Defines NAME as the i32 position read from input `at`. */
static void tr_def_pos(vk_kernel *k, const char *name, int at) {
    vk_def(k, name, "floatBitsToInt(X%d(0))", at);
}

/* ---- embedding ------------------------------------------------------------ */

/* (table [V,D], ids [...]) -> [..., D]. */
mn_status vkgen_embedding(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    const node *t = tr_in(g, n, 0);
    k->tmpl = "embedding";
    /* compared with an i32 id: a 32-bit int (ids never reach past 2^31 - 1) */
    vk_def(k, "EM_V", "%lld", (long long)(t->shape[0] < INT32_MAX ? t->shape[0] : INT32_MAX));
    vk_def_u(k, "EM_D", (uint64_t)t->shape[1]);
    vk_launch_1d(k, caps, (uint64_t)node_numel(n), tr_local(caps, 64));
    return MN_OK;
}

/* (ids [N...], dy [..., D]) -> dtable [V,D]: one workgroup per table row. */
mn_status vkgen_embedding_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                              size_t cap) {
    const int64_t V = n->shape[0], D = n->shape[1];
    const uint32_t local = tr_local(caps, 64);
    k->tmpl = "embedding_bwd";
    vk_def_i(k, "EB_V", V);
    vk_def_u(k, "EB_D", (uint64_t)D);
    vk_def_u(k, "EB_N", (uint64_t)node_numel(tr_in(g, n, 0)));
    vk_def(k, "EB_PER", "%llu", (unsigned long long)((D + local - 1) / local));
    const uint32_t unroll = local < 8 ? local : 8;
    vk_def(k, "EB_UNROLL", "%uu", unroll);
    const uint64_t iters = ((uint64_t)node_numel(tr_in(g, n, 0)) + local - 1) / local * (1 + local / unroll) + 1;
    if (!vk_loops_fit(caps, iters)) return vk_loop_fail(g, n, caps, iters, err, cap);
    return tr_launch_groups(k, g, n, caps, (uint64_t)V, local, err, cap);
}

/* ---- rotary embedding ----------------------------------------------------- */

/* x [..., T, Dh][, pos]: one invocation per (row, pair). The frequency of
 * pair i in turns per position, theta^(-2i/Dh) / (2 pi), is split on the host
 * (in double) into a float hi and a float lo = rest; the kernel forms the
 * turn fraction of p * (hi + lo) from exact partial products, so the angle
 * keeps a few 1e-7 turns for |p| < 2^24. */
mn_status vkgen_rope(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap) {
    const node *x = tr_in(g, n, 0);
    const int64_t Dh = x->shape[x->rank - 1], T = x->shape[x->rank - 2], half = Dh / 2;
    const mn_rope_attrs ra = rope_attrs_of(n);
    const double theta = ra.theta, two_pi = 6.283185307179586476925;
    k->tmpl = "rope";
    vk_def_u(k, "RP_T", (uint64_t)T);
    vk_def_u(k, "RP_DH", (uint64_t)Dh);
    vk_def_u(k, "RP_HALF", (uint64_t)half);
    vk_def(k, "RP_OFF", "%lld", (long long)ra.offset);
    vk_def(k, "RP_INVERSE", "%d", ra.inverse != 0);
    vk_def(k, "RP_HAS_POS", "%d", n->nin > 1);
    /* a folded permute (0, 2, 1, 3): x [B, H, T, Dh] read from its [B, T, H, Dh] input */
    vk_def(k, "RP_SRC_BTHD", "%d", k->heads_in == 1 ? 1 : 0);
    vk_def_u(k, "RP_H", k->heads_in == 1 ? (uint64_t)x->shape[1] : 1u);
    if (n->nin > 1) tr_def_pos(k, "RP_POS", 1);
    for (int part = 0; part < 2; part++) {
        char line[64];
        vk_line(k, "const float RP_TAU_%s[%lld] = float[](", part ? "LO" : "HI", (long long)half);
        for (int64_t i = 0; i < half; i++) {
            /* the same expression as the CPU kernel's inverse frequency */
            const double tau = pow(theta, -2.0 * (double)i / (double)Dh) / two_pi;
            const float hi = (float)tau, lo = (float)(tau - (double)hi);
            vk_line(k, "%s%s", tr_flit(line, sizeof line, part ? lo : hi), i + 1 < half ? "," : ");");
        }
    }
    vk_launch_1d(k, caps, (uint64_t)(node_numel(x) / 2), tr_local(caps, 64));
    return MN_OK;
}

/* ---- attention ------------------------------------------------------------ */

enum { AT_FWD = 0, AT_LSE = 1, AT_BWD_Q = 2, AT_BWD_KV = 3 };
static const char *const at_op_key[4] = {"fwd", "lse", "dq", "dkv"};

/* The geometry of an attention node as its kernels see it: rows are what a
 * workgroup's block holds (query rows; key rows for dk/dv), items what it
 * streams (keys; (query head, query row) pairs for dk/dv). */
typedef struct at_geom {
    int op;
    int64_t B, Hq, Hkv, Tq, Tk, D, wrt;
    uint64_t rows, heads, items;
    int pos_at;
} at_geom;

static at_geom at_geom_of(const mn_graph *g, const node *n, int op) {
    const node *q = tr_in(g, n, 0), *kk = tr_in(g, n, 1);
    at_geom a = {.op = op, .B = q->shape[0], .Hq = q->shape[1], .Tq = q->shape[2], .D = q->shape[3],
                 .Hkv = kk->shape[1], .Tk = kk->shape[2]};
    const bool kv = op == AT_BWD_KV;
    a.wrt = kv ? attention_attrs_of(n).wrt : 0;
    a.rows = (uint64_t)(kv ? a.Tk : a.Tq);
    a.heads = (uint64_t)(a.B * (kv ? a.Hkv : a.Hq));
    a.items = kv ? (uint64_t)(a.Hq / a.Hkv) * (uint64_t)a.Tq : (uint64_t)a.Tk;
    a.pos_at = op == AT_FWD || op == AT_LSE ? 3 : 5;
    return a;
}

/* The mask, scale, position and shape defines both templates share. */
static void at_def_common(vk_kernel *k, const mn_graph *g, const node *n, const at_geom *a) {
    char sc[48];
    const mn_attention_attrs at = attention_attrs_of(n);
    vk_def(k, "AT_OP", "%d", a->op);
    vk_def(k, "AT_B", "%lldu", (long long)a->B);
    vk_def(k, "AT_HQ", "%lldu", (long long)a->Hq);
    vk_def(k, "AT_HKV", "%lldu", (long long)a->Hkv);
    vk_def(k, "AT_GRP", "%lldu", (long long)(a->Hq / a->Hkv));
    vk_def(k, "AT_TQ", "%lld", (long long)a->Tq);
    vk_def(k, "AT_TK", "%lld", (long long)a->Tk);
    vk_def(k, "AT_D", "%lldu", (long long)a->D);
    vk_def(k, "AT_CAUSAL", "%d", at.causal != 0);
    vk_def(k, "AT_WINDOW", "%lld", (long long)(at.causal ? at.window : 0));
    vk_def(k, "AT_SCALE", "%s", tr_flit(sc, sizeof sc, (float)at.scale));
    vk_def(k, "AT_HAS_POS", "%d", n->nin > a->pos_at);
    if (n->nin > a->pos_at) tr_def_pos(k, "AT_POS", a->pos_at);
    vk_def(k, "AT_WRT_V", "%d", (int)a->wrt);
    vk_def_u(k, "AT_PART", (uint64_t)(a->B * a->Hkv * a->Tk * a->D)); /* an element offset: the index type */
    vk_def(k, "AT_NROWS", "%llu", (unsigned long long)a->rows);
    /* the fast contract: q, k, v, dout (AT_RND0 .. 3: nothing for an input
     * the session's cast already rounded, the GPU's case: rounding in the
     * loads made the tile kernels 1.6-2.5x slower, run AL) and the weights
     * P, dS (AT_RNDW) rounded, cpu's rule; the forward's softmax in log2
     * units against an integer reference (attention_tile.glsl AT_REF).
     * Strict: natural units against the running maximum itself, the scores
     * the backward recomputes bit for bit (what keeps lse consistent with
     * them at logits of 1e3) */
    const mn_round16 rnd = node_round16(n);
    const bool fast = rnd != MN_ROUND_NONE;
    const char *fn = rnd == MN_ROUND_BF16 ? "mn_round_bf16(x)" : fast ? "mn_round_f16(x)" : "(x)";
    vk_def(k, "AT_FAST", "%d", fast);
    vk_def(k, "AT_RNDW(x)", "%s", fn);
    for (int j = 0; j < 4; j++) {
        char nm[16];
        snprintf(nm, sizeof nm, "AT_RND%d(x)", j);
        vk_def(k, nm, "%s", j < n->nin && !vk_pre_rounded(g, n, j, rnd) ? fn : "(x)");
    }
    vk_def(k, "AT_SC", "%s", fast ? "(AT_SCALE * AT_L2E)" : "AT_SCALE");
    vk_def(k, "AT_EXP(x)", "%s", fast ? "exp2(x)" : "exp(x)");
    vk_def(k, "AT_REF(x)", "%s", fast ? "ceil(x)" : "(x)");
    vk_def(k, "AT_LSE_OF(m, l)", "%s", fast ? "(((m) + log2(l)) * AT_LN2)" : "((m) + log(l))");
}

/* ---- the row kernel (attention.glsl): decoding steps and small shapes ---- */

/* The unrolled run of a head-dimension loop (a divisor of D) and of the
 * tile load (attention.glsl AT_DU, AT_LU): under a loop limiter, long enough
 * to cut its count and short enough to keep the JIT-compiled code small;
 * without one, the whole head dimension (AT_D_ONE_RUN: plain loops, as the
 * compiler likes them; runs with a variable base put the per-row arrays in
 * local memory, 2.5x slower on an H200). */
static uint64_t at_du(const vk_caps *caps, int64_t D) {
    if (!caps->loop_limit) return (uint64_t)D;
    return D % 8 == 0 ? 8 : D % 4 == 0 ? 4 : D % 2 == 0 ? 2 : 1;
}
/* The tile load's batch (attention.glsl AT_LU): its reads are all in
 * flight at once; short under a loop limiter (JIT-compiled code). */
static uint64_t at_lu(const vk_caps *caps) { return caps->loop_limit ? 8 : 32; }

/* Head-dimension loops an item runs (all branches: a SIMD group may take
 * each of them). */
static uint64_t at_dloops(int op, int64_t wrt) {
    switch (op) {
    case AT_FWD: return 4; /* dot, and the three online-softmax updates */
    case AT_LSE: return 1;
    case AT_BWD_Q: return 3;
    default: return wrt == 1 ? 2 : wrt == 0 ? 3 : 4;
    }
}

/* The merge of a row's S partial results all at once (attention.glsl
 * AT_PMERGE): the tile buffer holds every invocation's partial row. */
static bool at_pmerge(uint64_t local, uint64_t S, uint64_t bk, uint64_t itemw, int64_t D) {
    return S > 1 && local * ((uint64_t)D | 1) <= bk * (itemw | 1);
}

/* Loop iterations of one attention invocation (attention.glsl): the row
 * set-up; per tile of bk items the tile loop, its load runs and its share
 * of the items with their head-dimension runs; then the merge of the S
 * partial results (the forward's maxima and sums; then for each of the
 * nout outputs the store of the partial row and the sums of S parts of
 * the invocation's elements, or one run per column group with S steps). */
static uint64_t at_loop_iterations(const vk_caps *caps, uint64_t items, uint64_t bk, uint64_t local, uint64_t S,
                                   uint64_t itemw, int64_t D, int op, int64_t wrt) {
    const uint64_t tiles = (items + bk - 1) / bk, druns = (uint64_t)D / at_du(caps, D);
    const uint64_t loads = (bk * itemw + local - 1) / local, nout = op == AT_BWD_KV && wrt == 2 ? 2 : 1;
    const uint64_t per_tile = 1 + (loads + at_lu(caps) - 1) / at_lu(caps) + (bk + S - 1) / S * (1 + at_dloops(op, wrt) * druns);
    uint64_t it = druns + 1 + tiles * per_tile;
    if (op == AT_FWD || op == AT_LSE) it += S > 1 ? 2 * S : 0;
    if (op != AT_LSE && at_pmerge(local, S, bk, itemw, D))
        it += nout * (druns + ((local / S) * (uint64_t)D + local - 1) / local * (1 + S));
    else if (op != AT_LSE)
        it += nout * druns * (1 + (S > 1 ? S : 0));
    return it;
}

/* Workgroup of LOCAL = R * S invocations: R rows of one head (query rows, or
 * key rows for dk/dv), each row's items (keys, or (query head, query row)
 * pairs) dealt round-robin to its S invocations, whose partial results are
 * merged in shared memory at the end (so a decoding step with Tq = 1 keeps
 * a whole workgroup busy). Items are streamed in tiles of BK rows of ITEMW
 * floats through shared memory. */
static mn_status gen_attention_rows(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                    const at_geom *a, char *err, size_t cap) {
    const int op = a->op;
    const int64_t D = a->D;
    const bool kv = op == AT_BWD_KV;
    const uint32_t local = tr_local(caps, 64);
    uint32_t R = 1;
    while (R < a->rows && R < local) R *= 2;
    const uint64_t itemw = op == AT_LSE ? (uint64_t)D : kv ? 2 * (uint64_t)D + 2 : 2 * (uint64_t)D;
    const uint64_t smem = caps->max_shared_bytes ? caps->max_shared_bytes : 16384, reserve = 2ull * local * 4;
    uint64_t bk = 64;
    /* shared rows padded to an odd stride (attention.glsl AT_ISTR) */
    while (bk > 1 && bk * (itemw | 1) * 4 + reserve > smem) bk /= 2;
    if (bk * (itemw | 1) * 4 + reserve > smem)
        return tr_fail(g, n, MN_E_UNSUPPORTED, err, cap, "head dimension too large for the device's shared memory");
    /* fewer rows per workgroup, more invocations per row, while a row's
     * items overrun the loop limiter */
    uint64_t iters = at_loop_iterations(caps, a->items, bk, local, local / R, itemw, D, op, a->wrt);
    while (!vk_loops_fit(caps, iters) && R > 1) {
        R /= 2;
        iters = at_loop_iterations(caps, a->items, bk, local, local / R, itemw, D, op, a->wrt);
    }
    if (!vk_loops_fit(caps, iters)) return vk_loop_fail(g, n, caps, iters, err, cap);
    const uint32_t S = local / R;
    const uint64_t nblk = (a->rows + R - 1) / R;
    k->tmpl = "attention";
    k->lib = "attention_common";
    at_def_common(k, g, n, a);
    vk_def(k, "AT_DU", "%lluu", (unsigned long long)at_du(caps, D));
    vk_def(k, "AT_D_ONE_RUN", "%d", at_du(caps, D) == (uint64_t)D);
    vk_def(k, "AT_LU", "%lluu", (unsigned long long)at_lu(caps));
    vk_def(k, "AT_R", "%u", R);
    vk_def(k, "AT_S", "%u", S);
    vk_def(k, "AT_BK", "%llu", (unsigned long long)bk);
    vk_def(k, "AT_ITEMW", "%lluu", (unsigned long long)itemw);
    vk_def(k, "AT_ISTR", "%lluu", (unsigned long long)(itemw | 1));
    vk_def(k, "AT_PSTR", "%lluu", (unsigned long long)((uint64_t)D | 1));
    vk_def(k, "AT_NBLK", "%lluu", (unsigned long long)nblk);
    vk_def(k, "AT_PMERGE", "%d", op != AT_LSE && at_pmerge(local, S, bk, itemw, D));
    return tr_launch_groups(k, g, n, caps, a->heads * nblk, local, err, cap);
}

/* ---- the tile kernel (attention_tile.glsl): real sizes ------------------- */

/* A block of bm rows, tiles of bn items, tm rows and bn / lx items (and
 * D / lx output columns) per invocation, lx invocations per row. */
typedef struct at_tile {
    uint32_t bm, bn, tm, lx;
} at_tile;

/* D padded to whole vec4 chunks of every one of the lx invocations of a row. */
static uint64_t at_tile_dp(int64_t D, uint32_t lx) { return ((uint64_t)D + 4 * lx - 1) / (4 * lx) * (4 * lx); }

/* Shared memory of a tile configuration, as attention_tile.glsl declares it. */
static uint64_t at_tile_shared(const at_geom *a, at_tile t) {
    const uint64_t row = (at_tile_dp(a->D, t.lx) / 4 + 1) * 16, prow = ((uint64_t)t.bn / 4 + 1) * 16;
    switch (a->op) {
    case AT_FWD: return t.bm * row + 2 * t.bn * row + t.bm * prow + 4ull * t.bm * t.lx;
    case AT_LSE: return t.bm * row + t.bn * row + 4ull * t.bm * t.lx;
    case AT_BWD_Q: return 2 * t.bm * row + 2 * t.bn * row + t.bm * prow;
    default:
        return (a->wrt == 1 ? 1 : 2) * t.bm * row + 2 * t.bn * row + (a->wrt == 2 ? 2 : 1) * t.bm * prow + 8ull * t.bn;
    }
}

/* Loop iterations of one invocation of the tile kernel: the row loads, then
 * per tile the tile loop and the runs of its head-dimension and item loops
 * (run vec4 chunks each). */
static uint64_t at_tile_iterations(const at_geom *a, at_tile t, uint32_t run) {
    const uint64_t nt = (uint64_t)t.bm / t.tm * t.lx, dp = at_tile_dp(a->D, t.lx);
    const uint64_t per_item_head = (uint64_t)(a->op == AT_BWD_KV ? a->Tq : a->Tk);
    const uint64_t tiles = (uint64_t)(a->op == AT_BWD_KV ? a->Hq / a->Hkv : 1) * ((per_item_head + t.bn - 1) / t.bn);
    const uint64_t dq = ((uint64_t)a->D + 3) / 4, jq = t.bn / 4;
    const uint64_t inner = (dq + run - 1) / run + (a->op == AT_LSE ? 0 : (jq + run - 1) / run);
    return ((uint64_t)t.bm * dp + nt - 1) / nt + tiles * (1 + inner) + 4;
}

/* NULL if t can run a's kernel on the device, else why not. */
static const char *at_tile_unfit(const at_geom *a, at_tile t, const vk_caps *caps, uint32_t run) {
    const uint64_t smem = caps->max_shared_bytes ? caps->max_shared_bytes : 16384;
    const uint32_t lim = caps->max_invocations ? caps->max_invocations : 128;
    if (!t.bm || !t.bn || !t.tm || !t.lx || t.bm % t.tm || t.bn % t.lx || t.bn % 4)
        return "want rows a multiple of rows per invocation, items a multiple of 4 and of the invocations per row";
    const uint64_t nt = (uint64_t)t.bm / t.tm * t.lx, dp = at_tile_dp(a->D, t.lx);
    if (nt > lim) return "more invocations than the device's workgroup allows";
    if (a->op == AT_BWD_KV && nt < t.bn) return "dk/dv needs at least as many invocations as items per tile";
    if (at_tile_shared(a, t) > smem) return "more shared memory than the device has";
    /* registers (larger ones spill): the accumulators and scores, and the
     * next tile's reads (at most 32) */
    const uint64_t nacc = a->op == AT_LSE ? 0 : a->op == AT_BWD_KV && a->wrt == 2 ? 2 : 1;
    const uint64_t dp2 = a->op == AT_BWD_Q || (a->op == AT_BWD_KV && a->wrt != 1) ? 2 : 1;
    const uint64_t narr = a->op == AT_LSE ? 1 : 2;
    if ((uint64_t)t.tm * (t.bn / t.lx) * dp2 + nacc * t.tm * dp / t.lx > 128 ||
        narr * (((uint64_t)t.bn * dp + nt - 1) / nt) > 32)
        return "too many registers per invocation";
    if (!vk_loops_fit(caps, at_tile_iterations(a, t, run))) return "over the driver's loop limit";
    return NULL;
}

/* The candidates of each op, best first (docs/PERF.md "Attention
 * kernels"): the first that fits the device and makes a grid of at least
 * AT_MIN_GROUPS workgroups is taken; if none does, the fitting one with the
 * largest grid (small problems: smaller blocks, more workgroups). */
#define AT_MIN_GROUPS 128
static const at_tile at_cands[4][8] = {
    [AT_FWD] = {{64, 32, 4, 16}, {64, 32, 4, 8}, {32, 32, 2, 8}, {32, 16, 2, 8}, {16, 16, 2, 8}, {16, 16, 1, 8}, {8, 16, 1, 8}, {8, 8, 1, 4}},
    [AT_LSE] = {{64, 32, 4, 8}, {32, 32, 2, 8}, {32, 16, 2, 8}, {16, 16, 2, 8}, {16, 16, 1, 8}, {8, 16, 1, 8}, {8, 8, 1, 4}},
    [AT_BWD_Q] = {{32, 32, 4, 16}, {32, 32, 2, 8}, {32, 16, 2, 8}, {16, 16, 2, 8}, {16, 16, 1, 8}, {8, 16, 1, 8},
                  {8, 8, 1, 4}},
    [AT_BWD_KV] = {{32, 32, 4, 16}, {32, 32, 2, 8}, {16, 32, 1, 8}, {16, 16, 1, 8}, {8, 16, 1, 8}, {8, 8, 1, 4}},
};

/* Tuning knobs (docs/PERF.md): MEGANEURA_ATTN = auto (default) | rows (the
 * row kernel everywhere, the kernels before the tiles) | tiles (the FMA tile
 * kernel wherever a configuration fits) | coopmat (the tensor-core kernel,
 * an error where it does not take the node); MEGANEURA_ATTN_COOPMAT = SxN
 * (the tensor-core kernel's subgroups and items per tile); MEGANEURA_ATTN_TILE = a comma list
 * of op=BMxBNxTMxLX with op fwd, lse, dq or dkv (that configuration, as
 * given, for every node of the op); MEGANEURA_ATTN_RUN = N | full: the
 * tile kernel's head-dimension and item loops run in unrolled runs of N
 * vec4 chunks (1: plain loops; full: one run; default 4, under a loop
 * limiter 1 where it fits: lavapipe's JIT takes seconds for long code);
 * MEGANEURA_ATTN_PREFETCH = 1 | 0: whether the next tile's global reads are
 * issued before the current tile is used (default 1, 0 under a loop
 * limiter). A value that does not parse is an error naming it. */
#define AT_RUN_DEFAULT 4
#define AT_RUN_FULL 1024
typedef struct at_knobs {
    int kernel; /* 0 auto, 1 rows, 2 tiles, 3 coopmat */
    uint32_t cm_nsg, cm_bn; /* MEGANEURA_ATTN_COOPMAT: 0 0 the table's */
    uint32_t run; /* 0: the device's default */
    int prefetch; /* -1: the device's default */
    bool have[4];
    at_tile tile[4];
} at_knobs;

static mn_status at_knobs_read(at_knobs *kn, const mn_graph *g, const node *n, char *err, size_t cap) {
    memset(kn, 0, sizeof *kn);
    kn->run = 0; /* the device's default */
    kn->prefetch = -1;
    const char *e = getenv("MEGANEURA_ATTN");
    char msg[256];
    if (e && *e) {
        if (strcmp(e, "auto") == 0) kn->kernel = 0;
        else if (strcmp(e, "rows") == 0) kn->kernel = 1;
        else if (strcmp(e, "tiles") == 0) kn->kernel = 2;
        else if (strcmp(e, "coopmat") == 0) kn->kernel = 3;
        else {
            snprintf(msg, sizeof msg, "MEGANEURA_ATTN='%.64s': want auto, rows, tiles or coopmat", e);
            return tr_fail(g, n, MN_E_INVALID, err, cap, msg);
        }
    }
    e = getenv("MEGANEURA_ATTN_RUN");
    if (e && *e) {
        char *end = NULL;
        const unsigned long v = strtoul(e, &end, 10);
        if (strcmp(e, "full") == 0) kn->run = AT_RUN_FULL;
        else if (e[0] >= '1' && e[0] <= '9' && *end == 0 && v <= 64) kn->run = (uint32_t)v;
        else {
            snprintf(msg, sizeof msg, "MEGANEURA_ATTN_RUN='%.64s': want 1 .. 64 or full", e);
            return tr_fail(g, n, MN_E_INVALID, err, cap, msg);
        }
    }
    e = getenv("MEGANEURA_ATTN_PREFETCH");
    if (e && *e) {
        if (strcmp(e, "0") != 0 && strcmp(e, "1") != 0) {
            snprintf(msg, sizeof msg, "MEGANEURA_ATTN_PREFETCH='%.64s': want 0 or 1", e);
            return tr_fail(g, n, MN_E_INVALID, err, cap, msg);
        }
        kn->prefetch = e[0] - '0';
    }
    e = getenv("MEGANEURA_ATTN_COOPMAT");
    if (e && *e) {
        unsigned a = 0, b = 0;
        int used = 0;
        if (sscanf(e, "%ux%u%n", &a, &b, &used) != 2 || e[used] != 0 || a < 1 || a > 16 || b < 16 || b > 256 ||
            b % 16 != 0) {
            snprintf(msg, sizeof msg,
                     "MEGANEURA_ATTN_COOPMAT='%.64s': want SxN, S subgroups (1 .. 16) and N items a tile (16 .. 256, "
                     "a multiple of 16)", e);
            return tr_fail(g, n, MN_E_INVALID, err, cap, msg);
        }
        kn->cm_nsg = a, kn->cm_bn = b;
    }
    e = getenv("MEGANEURA_ATTN_TILE");
    for (const char *p = e; p && *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        int op = -1, used = 0;
        unsigned bm, bn, tm, lx;
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item - 1 ? len : sizeof item - 1), p);
        for (int o = 0; o < 4; o++) {
            const size_t kl = strlen(at_op_key[o]);
            if (strncmp(item, at_op_key[o], kl) == 0 && item[kl] == '=') op = o;
        }
        if (op < 0 || len >= sizeof item ||
            sscanf(item + strlen(at_op_key[op]) + 1, "%ux%ux%ux%u%n", &bm, &bn, &tm, &lx, &used) != 4 ||
            item[strlen(at_op_key[op]) + 1 + (size_t)used] != 0 || bm > 4096 || bn > 4096 || tm > 4096 || lx > 4096) {
            snprintf(msg, sizeof msg,
                     "MEGANEURA_ATTN_TILE item '%.64s': want op=BMxBNxTMxLX with op fwd, lse, dq or dkv", item);
            return tr_fail(g, n, MN_E_INVALID, err, cap, msg);
        }
        kn->have[op] = true;
        kn->tile[op] = (at_tile){bm, bn, tm, lx};
        p = end ? end + 1 : NULL;
    }
    return MN_OK;
}

/* NULL if t fits with one of the runs to try (the knob's; by default 4,
 * under a loop limiter the shortest code that fits: plain loops, else runs
 * of 4, else whole loops), *run set; else why not (for the last run). */
static const char *at_tile_unfit_runs(const at_geom *a, at_tile t, const vk_caps *caps, const at_knobs *kn,
                                      uint32_t *run) {
    static const uint32_t limited[] = {1, AT_RUN_DEFAULT, AT_RUN_FULL};
    const uint32_t *runs = kn->run ? &kn->run : caps->loop_limit ? limited : (const uint32_t[]){AT_RUN_DEFAULT};
    const size_t nruns = kn->run || !caps->loop_limit ? 1 : MN_ARRAY_LEN(limited);
    const char *why = NULL;
    for (size_t i = 0; i < nruns; i++) {
        *run = runs[i];
        if (!(why = at_tile_unfit(a, t, caps, runs[i]))) return NULL;
    }
    return why;
}

/* Picks the tile configuration and its run; false if none fits (the row
 * kernel then runs). A knob's configuration that does not fit is an error. */
static mn_status at_tile_pick(at_tile *out, uint32_t *run, bool *found, const at_geom *a, const at_knobs *kn,
                              const vk_caps *caps, const mn_graph *g, const node *n, char *err, size_t cap) {
    *found = false;
    if (kn->have[a->op]) {
        const at_tile t = kn->tile[a->op];
        const char *why = at_tile_unfit_runs(a, t, caps, kn, run);
        if (why) {
            char msg[320];
            snprintf(msg, sizeof msg, "MEGANEURA_ATTN_TILE %s=%ux%ux%ux%u for D %lld: %s", at_op_key[a->op], t.bm, t.bn,
                     t.tm, t.lx, (long long)a->D, why);
            return tr_fail(g, n, MN_E_INVALID, err, cap, msg);
        }
        *out = t;
        *found = true;
        return MN_OK;
    }
    uint64_t best = 0;
    for (size_t i = 0; i < MN_ARRAY_LEN(at_cands[a->op]) && at_cands[a->op][i].bm; i++) {
        const at_tile t = at_cands[a->op][i];
        uint32_t r;
        if (at_tile_unfit_runs(a, t, caps, kn, &r)) continue;
        const uint64_t nwg = (a->rows + t.bm - 1) / t.bm * a->heads;
        if (nwg > best) {
            best = nwg;
            *out = t;
            *run = r;
            *found = true;
        }
        if (nwg >= AT_MIN_GROUPS) break;
    }
    return MN_OK;
}

static mn_status gen_attention_tile(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                    const at_geom *a, at_tile t, uint32_t run, bool prefetch, char *err,
                                    size_t cap) {
    const uint64_t nblk = (a->rows + t.bm - 1) / t.bm, nt = (uint64_t)t.bm / t.tm * t.lx;
    k->tmpl = "attention_tile";
    k->lib = "attention_common";
    at_def_common(k, g, n, a);
    vk_def(k, "AT_DP", "%lluu", (unsigned long long)at_tile_dp(a->D, t.lx));
    vk_def(k, "AT_PADDED", "%d", at_tile_dp(a->D, t.lx) != (uint64_t)a->D);
    vk_def(k, "AT_BM", "%uu", t.bm);
    vk_def(k, "AT_BN", "%uu", t.bn);
    vk_def(k, "AT_TM", "%uu", t.tm);
    vk_def(k, "AT_LX", "%uu", t.lx);
    const uint32_t most = (uint32_t)(((uint64_t)a->D + 3) / 4 > t.bn / 4 ? ((uint64_t)a->D + 3) / 4 : t.bn / 4);
    vk_def(k, "AT_RUN", "%uu", run < most ? run : most);
    vk_def(k, "AT_PREFETCH", "%d", prefetch ? 1 : 0);
    vk_def(k, "AT_NBLK", "%lluu", (unsigned long long)nblk);
    return tr_launch_groups(k, g, n, caps, a->heads * nblk, (uint32_t)nt, err, cap);
}

/* ---- the tensor-core kernel (attention_coopmat.glsl): the fast contract -- */

/* A block of 16 * nsg rows (one subgroup each), tiles of bn items. */
typedef struct ac_cfg {
    uint32_t nsg, bn;
} ac_cfg;

/* Best first (docs/PERF.md "Tensor-core attention"): the first that fits
 * the device is taken. */
static const ac_cfg ac_cands[2][4] = {
    {{4, 64}, {4, 32}, {2, 64}, {2, 32}}, /* forward, lse */
    {{4, 32}, {2, 32}, {4, 16}, {2, 16}}, /* backward */
};

/* The sizes attention_coopmat.glsl declares from: staged rows (AC_IROWS),
 * floats of a scratch row (AC_SW), weight matrices per subgroup (AC_NW);
 * returns its shared bytes. */
static uint64_t ac_shared(const at_geom *a, ac_cfg c, uint32_t sg, uint32_t *irows, uint32_t *sw, uint32_t *nw) {
    const uint32_t bm = 16 * c.nsg, ni = a->op == AT_LSE ? 1 : 2;
    *irows = ni * c.bn > bm ? ni * c.bn : bm;
    *sw = (c.bn > (uint32_t)a->D ? c.bn : (uint32_t)a->D) + 4;
    *nw = a->op == AT_LSE ? 0 : a->op == AT_BWD_KV && a->wrt == 2 ? 2 : 1;
    return (uint64_t)*irows * ((uint64_t)a->D + 8) * 2 + (uint64_t)c.nsg * *nw * 16 * (c.bn + 8) * 2 +
           (uint64_t)c.nsg * 16 * *sw * 4 + (uint64_t)c.nsg * sg * 4 + (a->op == AT_BWD_KV ? 8ull * c.bn : 0);
}

/* NULL if c runs a's kernel on the device, else why not. */
static const char *ac_unfit(const at_geom *a, ac_cfg c, const vk_caps *caps) {
    const uint32_t sg = caps->subgroup_size, lpr = sg / 16;
    const uint64_t smem = caps->max_shared_bytes ? caps->max_shared_bytes : 16384;
    const uint32_t lim = caps->max_invocations ? caps->max_invocations : 128;
    uint32_t irows, sw, nw;
    if (a->D % 16 || a->D > 256) return "the head dimension is not a multiple of 16 up to 256";
    if (sg < 16 || (c.bn / lpr) % 4 || ((uint32_t)a->D / lpr) % 4)
        return "the subgroup does not split 16 rows into whole 4-value units";
    if (c.nsg * sg > lim) return "more invocations than the device's workgroup allows";
    if (ac_shared(a, c, sg, &irows, &sw, &nw) > smem) return "more shared memory than the device has";
    /* fragments live per subgroup: the rows' (16-bit), the accumulators and a tile's scores */
    const uint64_t nacc = a->op == AT_LSE ? 0 : a->op == AT_BWD_KV && a->wrt == 2 ? 2 : 1;
    if ((nacc * (uint64_t)a->D + c.bn) / 16 > 24) return "too many fragments per subgroup";
    return NULL;
}

static mn_status gen_attention_coopmat(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                       const at_geom *a, ac_cfg c, bool prefetch, char *err, size_t cap) {
    uint32_t irows, sw, nw;
    ac_shared(a, c, caps->subgroup_size, &irows, &sw, &nw);
    const uint64_t bm = 16ull * c.nsg, nblk = (a->rows + bm - 1) / bm;
    k->tmpl = "attention_coopmat";
    k->lib = "attention_common";
    vk_coopmat_def_pass(k, caps, node_round16(n));
    at_def_common(k, g, n, a);
    vk_def(k, "AT_BM", "%lluu", (unsigned long long)bm);
    vk_def(k, "AT_BN", "%uu", c.bn);
    vk_def(k, "AT_NBLK", "%lluu", (unsigned long long)nblk);
    vk_def(k, "AC_SG", "%uu", caps->subgroup_size);
    vk_def(k, "AC_BF16", "%d", node_round16(n) == MN_ROUND_BF16);
    vk_def(k, "AC_IROWS", "%uu", irows);
    vk_def(k, "AC_SW", "%uu", sw);
    vk_def(k, "AC_NW", "%u", nw);
    vk_def(k, "AC_VOTE", "%d", caps->subgroup_arith ? 1 : 0);
    vk_def(k, "AC_PREFETCH", "%d", prefetch ? 1 : 0);
    return tr_launch_groups(k, g, n, caps, a->heads * nblk, c.nsg * caps->subgroup_size, err, cap);
}

/* The tensor-core kernel for a (*found false: it does not take the node).
 * It takes rounded nodes (the fast contract) on devices with cooperative
 * matrices of that type, with 32-bit indices and a configuration that
 * fits; MEGANEURA_ATTN=coopmat makes the lack of any an error, and a
 * MEGANEURA_ATTN_COOPMAT configuration that does not fit is one. */
static mn_status at_coopmat_pick(ac_cfg *out, bool *found, const at_geom *a, const at_knobs *kn,
                                 const vk_caps *caps, const vk_kernel *k, const mn_graph *g, const node *n,
                                 char *err, size_t cap) {
    char msg[320];
    *found = false;
    const mn_round16 rnd = node_round16(n);
    const char *why = rnd == MN_ROUND_NONE                   ? "the node is not rounded (strict precision)"
                      : !vk_coopmat_available(caps, rnd) ? "the device has no cooperative matrices of its type"
                      : k->idx64                             ? "an operand needs 64-bit indices"
                                                             : NULL;
    if (!why && kn->cm_nsg) {
        const ac_cfg c = {kn->cm_nsg, kn->cm_bn};
        if ((why = ac_unfit(a, c, caps))) {
            snprintf(msg, sizeof msg, "MEGANEURA_ATTN_COOPMAT=%ux%u for D %lld: %s", c.nsg, c.bn, (long long)a->D, why);
            return tr_fail(g, n, MN_E_INVALID, err, cap, msg);
        }
        *out = c;
        *found = true;
        return MN_OK;
    }
    for (size_t i = 0; !why && i < MN_ARRAY_LEN(ac_cands[0]); i++) {
        const ac_cfg c = ac_cands[a->op >= AT_BWD_Q][i];
        const char *w = ac_unfit(a, c, caps);
        if (!w) {
            *out = c;
            *found = true;
            return MN_OK;
        }
        if (i + 1 == MN_ARRAY_LEN(ac_cands[0])) why = w;
    }
    if (kn->kernel == 3) {
        snprintf(msg, sizeof msg, "MEGANEURA_ATTN=coopmat: the tensor-core kernel does not take it: %s", why);
        return tr_fail(g, n, MN_E_UNSUPPORTED, err, cap, msg);
    }
    return MN_OK;
}

/* The tile kernel for shapes with enough rows and items (or where the knob
 * asks for it and a configuration fits), the row kernel otherwise:
 * decoding steps (one query row over the cache) keep a whole workgroup on
 * each row there, and operands past vk_caps.index_max (64-bit indexing)
 * take it too. */
static mn_status gen_attention(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, int op,
                               char *err, size_t cap) {
    mn_status st;
    at_knobs kn;
    if ((st = at_knobs_read(&kn, g, n, err, cap))) return st;
    const at_geom a = at_geom_of(g, n, op);
    /* a folded permute (0, 2, 1, 3) after the forward: rows stored as [B, Tq, Hq, D] */
    vk_def(k, "AT_OUT_BTHD", "%d", op == AT_FWD && k->heads_out ? 1 : 0);
    /* the forward writes its rows' lse too (kir.h KIR_SAVED): the backward's
     * attention_lse, bound after the inputs */
    if (k->saved_in && op == AT_FWD) {
        vk_def(k, "AT_SAVE_LSE", "1");
        vk_def(k, "AT_LSE_WR(i)", "X%d_WR(i)", k->saved_in - 1);
        k->saved_done = true;
    } else {
        vk_def(k, "AT_SAVE_LSE", "0");
    }
    /* the tensor-core kernel first (the fast contract on cooperative matrices) */
    if (kn.kernel == 3 || (kn.kernel == 0 && !kn.have[op] && a.rows >= 16 && a.items >= 16)) {
        ac_cfg c;
        bool found;
        if ((st = at_coopmat_pick(&c, &found, &a, &kn, caps, k, g, n, err, cap))) return st;
        /* prefetching only where asked: the form measured and gated on a GPU
         * is the one without (docs/PERF.md, runs AO, AP) */
        if (found) return gen_attention_coopmat(k, g, n, caps, &a, c, kn.prefetch == 1, err, cap);
    }
    const bool want = kn.kernel == 2 || kn.have[op] || (kn.kernel == 0 && a.rows >= 16 && a.items >= 16);
    /* the tile kernel indexes in 32 bits: 64-bit shapes take the row kernel */
    if (want && kn.kernel != 1 && !k->idx64) {
        at_tile t;
        uint32_t run = 0;
        bool found;
        if ((st = at_tile_pick(&t, &run, &found, &a, &kn, caps, g, n, err, cap))) return st;
        /* prefetching keeps the next tile's reads live across barriers, which
         * lavapipe's JIT (barriers as coroutines) compiles slowly: off there */
        const bool prefetch = kn.prefetch < 0 ? caps->loop_limit == 0 : kn.prefetch == 1;
        if (found) return gen_attention_tile(k, g, n, caps, &a, t, run, prefetch, err, cap);
    }
    return gen_attention_rows(k, g, n, caps, &a, err, cap);
}

mn_status vkgen_attention(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    return gen_attention(k, g, n, caps, AT_FWD, err, cap);
}
mn_status vkgen_attention_lse(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                              size_t cap) {
    return gen_attention(k, g, n, caps, AT_LSE, err, cap);
}
mn_status vkgen_attention_bwd_q(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                                size_t cap) {
    return gen_attention(k, g, n, caps, AT_BWD_Q, err, cap);
}
mn_status vkgen_attention_bwd_kv(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                                 size_t cap) {
    return gen_attention(k, g, n, caps, AT_BWD_KV, err, cap);
}

/* (out, dout, lse) -> (lse, delta) per query row: one invocation per row. */
mn_status vkgen_attention_bwd_prep(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                   char *err, size_t cap) {
    const node *o = tr_in(g, n, 0);
    if (!vk_loops_fit(caps, (uint64_t)o->shape[3])) return vk_loop_fail(g, n, caps, (uint64_t)o->shape[3], err, cap);
    k->tmpl = "attention_prep";
    vk_def(k, "AP_D", "%lldu", (long long)o->shape[3]);
    vk_def_u(k, "AP_ROWS", (uint64_t)(node_numel(o) / o->shape[3]));
    vk_launch_1d(k, caps, (uint64_t)(node_numel(o) / o->shape[3]), tr_local(caps, 64));
    return MN_OK;
}

/* ---- KV cache ------------------------------------------------------------- */

/* (cache [L,Tmax,D], x [L,Tnew,D], pos): one invocation per element of x;
 * the node's storage is the cache's (memplan alias). */
mn_status vkgen_kv_append(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    const node *x = tr_in(g, n, 1);
    k->tmpl = "kv_append";
    vk_def(k, "KV_TMAX", "%lld", (long long)n->shape[n->rank - 2]); /* a sequence length: compared in int */
    vk_def_u(k, "KV_TNEW", (uint64_t)x->shape[x->rank - 2]);
    vk_def_u(k, "KV_D", (uint64_t)x->shape[x->rank - 1]);
    /* a folded permute (0, 2, 1, 3): x [B, H, Tnew, D] read from its [B, Tnew, H, D] input */
    vk_def(k, "KV_SRC_BTHD", "%d", k->heads_in == 2 ? 1 : 0);
    vk_def_u(k, "KV_H", k->heads_in == 2 ? (uint64_t)x->shape[1] : 1u);
    tr_def_pos(k, "KV_POS", 2);
    vk_launch_1d(k, caps, (uint64_t)node_numel(x), tr_local(caps, 64));
    return MN_OK;
}
