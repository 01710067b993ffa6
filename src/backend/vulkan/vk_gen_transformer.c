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
 *                  the per-row prep (lse, delta)
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
#define AT_LU 8

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

/* Loop iterations of one attention invocation (attention.glsl): the row
 * set-up; per tile of bk items the tile loop, its load runs and its share
 * of the items with their head-dimension runs; then the merge of the S
 * partial results (the forward's maxima and sums, one run per column
 * group of each of the nout outputs with S steps each). */
static uint64_t at_loop_iterations(const vk_caps *caps, uint64_t items, uint64_t bk, uint64_t local, uint64_t S,
                                   uint64_t itemw, int64_t D, int op, int64_t wrt) {
    const uint64_t tiles = (items + bk - 1) / bk, druns = (uint64_t)D / at_du(caps, D);
    const uint64_t loads = (bk * itemw + local - 1) / local, nout = op == AT_BWD_KV && wrt == 2 ? 2 : 1;
    const uint64_t per_tile = 1 + (loads + AT_LU - 1) / AT_LU + (bk + S - 1) / S * (1 + at_dloops(op, wrt) * druns);
    uint64_t it = druns + 1 + tiles * per_tile;
    if (op == AT_FWD || op == AT_LSE) it += S > 1 ? 2 * S : 0;
    if (op != AT_LSE) it += nout * druns * (1 + (S > 1 ? S : 0));
    return it;
}

/* Workgroup of LOCAL = R * S invocations: R rows of one head (query rows, or
 * key rows for dk/dv), each row's items (keys, or (query head, query row)
 * pairs) dealt round-robin to its S invocations, whose partial results are
 * merged in shared memory at the end (so a decoding step with Tq = 1 keeps
 * a whole workgroup busy). Items are streamed in tiles of BK rows of ITEMW
 * floats through shared memory. */
static mn_status gen_attention(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, int op,
                               char *err, size_t cap) {
    const node *q = tr_in(g, n, 0), *kk = tr_in(g, n, 1);
    const int64_t B = q->shape[0], Hq = q->shape[1], Tq = q->shape[2], D = q->shape[3];
    const int64_t Hkv = kk->shape[1], Tk = kk->shape[2];
    const int pos_at = op == AT_FWD || op == AT_LSE ? 3 : 5;
    const bool kv = op == AT_BWD_KV;
    const uint64_t rows = (uint64_t)(kv ? Tk : Tq), heads = (uint64_t)(B * (kv ? Hkv : Hq));
    const uint32_t local = tr_local(caps, 64);
    uint32_t R = 1;
    while (R < rows && R < local) R *= 2;
    const uint64_t itemw = op == AT_LSE ? (uint64_t)D : kv ? 2 * (uint64_t)D + 2 : 2 * (uint64_t)D;
    const uint64_t smem = caps->max_shared_bytes ? caps->max_shared_bytes : 16384, reserve = 2ull * local * 4;
    uint64_t bk = 64;
    while (bk > 1 && bk * itemw * 4 + reserve > smem) bk /= 2;
    if (bk * itemw * 4 + reserve > smem)
        return tr_fail(g, n, MN_E_UNSUPPORTED, err, cap, "head dimension too large for the device's shared memory");
    /* fewer rows per workgroup, more invocations per row, while a row's
     * items overrun the loop limiter */
    const uint64_t items = kv ? (uint64_t)(Hq / Hkv) * (uint64_t)Tq : (uint64_t)Tk;
    const int64_t wrt = kv ? attention_attrs_of(n).wrt : 0;
    uint64_t iters = at_loop_iterations(caps, items, bk, local, local / R, itemw, D, op, wrt);
    while (!vk_loops_fit(caps, iters) && R > 1) {
        R /= 2;
        iters = at_loop_iterations(caps, items, bk, local, local / R, itemw, D, op, wrt);
    }
    if (!vk_loops_fit(caps, iters)) return vk_loop_fail(g, n, caps, iters, err, cap);
    const uint32_t S = local / R;
    const uint64_t nblk = (rows + R - 1) / R;
    char sc[48];
    k->tmpl = "attention";
    vk_def(k, "AT_OP", "%d", op);
    vk_def(k, "AT_B", "%lldu", (long long)B);
    vk_def(k, "AT_HQ", "%lldu", (long long)Hq);
    vk_def(k, "AT_HKV", "%lldu", (long long)Hkv);
    vk_def(k, "AT_GRP", "%lldu", (long long)(Hq / Hkv));
    vk_def(k, "AT_TQ", "%lld", (long long)Tq);
    vk_def(k, "AT_TK", "%lld", (long long)Tk);
    vk_def(k, "AT_D", "%lldu", (long long)D);
    const mn_attention_attrs at = attention_attrs_of(n);
    vk_def(k, "AT_DU", "%lluu", (unsigned long long)at_du(caps, D));
    vk_def(k, "AT_D_ONE_RUN", "%d", at_du(caps, D) == (uint64_t)D);
    vk_def(k, "AT_LU", "%du", AT_LU);
    vk_def(k, "AT_CAUSAL", "%d", at.causal != 0);
    vk_def(k, "AT_WINDOW", "%lld", (long long)(at.causal ? at.window : 0));
    vk_def(k, "AT_SCALE", "%s", tr_flit(sc, sizeof sc, (float)at.scale));
    vk_def(k, "AT_HAS_POS", "%d", n->nin > pos_at);
    if (n->nin > pos_at) tr_def_pos(k, "AT_POS", pos_at);
    vk_def(k, "AT_WRT_V", "%d", kv ? (int)at.wrt : 0);
    vk_def_u(k, "AT_PART", (uint64_t)(B * Hkv * Tk * D)); /* an element offset: the index type */
    vk_def(k, "AT_NROWS", "%llu", (unsigned long long)rows);
    vk_def(k, "AT_R", "%u", R);
    vk_def(k, "AT_S", "%u", S);
    vk_def(k, "AT_BK", "%llu", (unsigned long long)bk);
    vk_def(k, "AT_ITEMW", "%lluu", (unsigned long long)itemw);
    vk_def(k, "AT_NBLK", "%lluu", (unsigned long long)nblk);
    return tr_launch_groups(k, g, n, caps, heads * nblk, local, err, cap);
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
    tr_def_pos(k, "KV_POS", 2);
    vk_launch_1d(k, caps, (uint64_t)node_numel(x), tr_local(caps, 64));
    return MN_OK;
}
