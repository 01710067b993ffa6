/* vk_gen_norm.c - Vulkan code generation for the row normalisations:
 * rms_norm, layer_norm, their dx helpers (rms_norm_bwd, layer_norm_bwd) and
 * the weight-gradient partials (rms_norm_bwd_w, layer_norm_bwd_w), all on
 * the template kernels/norm.glsl.
 *
 * Row kernels: NM_S invocations per row (a power of two, about D / 2, at
 * most the workgroup), NM_R = local / NM_S rows per workgroup, so a small D
 * packs several rows into one workgroup. Partials: one workgroup per block of
 * ip[0] rows (at most 1024) and chunk of columns, every invocation owning up
 * to 8 columns.
 *
 * Does not: compile or dispatch (vk_compile.c, vk_backend.c); the sum of the
 * partials over the blocks is an ordinary SUM node (autodiff builds it).
 */
#include "backend/vulkan/vk_codegen.h"

enum { NM_FWD_RMS, NM_FWD_LN, NM_BWD_RMS, NM_BWD_LN, NM_BWDW_RMS, NM_BWDW_LN };

/* Largest power of two <= want within the device's invocation limit. */
static uint32_t nm_local(const vk_caps *caps, uint64_t want) {
    uint64_t lim = caps->max_invocations ? caps->max_invocations : 128;
    if (caps->max_shared_bytes && lim > caps->max_shared_bytes / 8) lim = caps->max_shared_bytes / 8;
    uint32_t l = 1;
    while ((uint64_t)l * 2 <= want && (uint64_t)l * 2 <= lim) l *= 2;
    return l;
}

/* columns per invocation of the partials (registers); loop iterations one
 * invocation may run (lavapipe's limit is 65535) */
enum { NM_PER_MAX = 8, NM_LOOP_MAX = 65000 };

static mn_status gen_norm(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, int op, char *err,
                          size_t cap) {
    const node *x = &g->nodes[n->in[0]];
    const int64_t D = x->shape[x->rank - 1], rows = D ? node_numel(x) / D : 0;
    const bool partial = op >= NM_BWDW_RMS, bwd = op == NM_BWD_RMS || op == NM_BWD_LN;
    char lit[48];
    k->tmpl = "norm";
    vk_def(k, "NM_OP", "%d", op);
    vk_def_u(k, "NM_ROWS", (uint64_t)rows);
    vk_def_u(k, "NM_D", (uint64_t)D);
    vk_float_literal(lit, sizeof lit, (float)D);
    vk_def(k, "NM_D_F", "%s", lit);
    vk_float_literal(lit, sizeof lit, (float)norm_attrs_of(n).eps);
    vk_def(k, "NM_EPS", "%s", lit);
    vk_def(k, "NM_CENTRE", "%d", op == NM_FWD_LN || op == NM_BWD_LN || op == NM_BWDW_LN);
    /* weight and bias inputs: forward x[, w][, b]; dx (x, dy[, w]) */
    int w_at = 0, b_at = 0;
    if (op == NM_FWD_RMS) w_at = n->nin > 1 ? 1 : 0;
    const mn_norm_attrs na = norm_attrs_of(n);
    if (op == NM_FWD_LN) w_at = na.weight ? 1 : 0, b_at = na.bias ? 1 + na.weight : 0;
    if (bwd) w_at = n->nin > 2 ? 2 : 0;
    vk_def(k, "NM_HAS_W", "%d", w_at > 0);
    vk_def(k, "NM_HAS_B", "%d", b_at > 0);
    if (w_at) vk_line(k, "#define NM_W(j) X%d(j)", w_at);
    if (b_at) vk_line(k, "#define NM_B(j) X%d(j)", b_at);
    uint64_t nwg;
    uint32_t local;
    if (partial) {
        /* about 8 columns per invocation (at least 32 invocations, or D):
         * wide rows get more invocations, narrow ones fewer idle ones; rows
         * wider than 8 per invocation are split into column chunks */
        const uint64_t want = (uint64_t)D / 8 > 32 ? (uint64_t)D / 8 : (uint64_t)D < 32 ? (uint64_t)D : 32;
        local = nm_local(caps, want);
        uint64_t per = ((uint64_t)D + local - 1) / local;
        if (per > NM_PER_MAX) per = NM_PER_MAX;
        const uint64_t nch = ((uint64_t)D + local * per - 1) / (local * per);
        /* loop iterations of one invocation: per row, two strided passes
         * over the row and two tree reductions (lavapipe ends a shader's
         * loops after 65535 iterations) */
        uint32_t lg = 0;
        while ((1u << lg) < local) lg++;
        const uint64_t iters = (uint64_t)norm_block(n) * (2 * (((uint64_t)D + local - 1) / local) + 2 * lg + 2);
        if (iters > NM_LOOP_MAX) {
            mn_fmt(err, cap, "vulkan codegen: %s (%%%d): blocks of %lld rows of %lld columns need %llu loop "
                   "iterations per invocation (at most %d)", op_table[n->op].name, (int)(n - g->nodes),
                   (long long)norm_block(n), (long long)D, (unsigned long long)iters, NM_LOOP_MAX);
            return MN_E_UNSUPPORTED;
        }
        nwg = (uint64_t)n->shape[0] * nch;
        vk_def(k, "NM_S", "%uu", local);
        vk_def(k, "NM_R", "1u");
        vk_def(k, "NM_BR", "%lluu", (unsigned long long)norm_block(n));
        vk_def(k, "NM_PER", "%lluu", (unsigned long long)per);
        vk_def(k, "NM_NCH", "%lluu", (unsigned long long)nch);
    } else {
        local = nm_local(caps, 256);
        const uint64_t half = ((uint64_t)D + 1) / 2;
        uint32_t s = 1;
        while (s < local && s < half) s *= 2;
        const uint32_t r = local / s;
        nwg = ((uint64_t)rows + r - 1) / r;
        vk_def(k, "NM_S", "%uu", s);
        vk_def(k, "NM_R", "%uu", r);
    }
    vk_def_u(k, "NM_NWG", nwg);
    vk_launch_1d(k, caps, (nwg ? nwg : 1) * local, local);
    return MN_OK;
}

mn_status vkgen_rms_norm(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                         size_t cap) {
    return gen_norm(k, g, n, caps, NM_FWD_RMS, err, cap);
}
mn_status vkgen_layer_norm(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                           size_t cap) {
    return gen_norm(k, g, n, caps, NM_FWD_LN, err, cap);
}
mn_status vkgen_rms_norm_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                             size_t cap) {
    return gen_norm(k, g, n, caps, NM_BWD_RMS, err, cap);
}
mn_status vkgen_layer_norm_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                               size_t cap) {
    return gen_norm(k, g, n, caps, NM_BWD_LN, err, cap);
}
mn_status vkgen_rms_norm_bwd_w(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                               size_t cap) {
    return gen_norm(k, g, n, caps, NM_BWDW_RMS, err, cap);
}
mn_status vkgen_layer_norm_bwd_w(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                                 size_t cap) {
    return gen_norm(k, g, n, caps, NM_BWDW_LN, err, cap);
}

/* kernels/bn_moment.glsl: a workgroup per channel, up to 1024 invocations
 * when there are few channels (each then has many values), no more than
 * about the channel's values. */
static mn_status gen_bn_moment(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, bool sq,
                               char *err, size_t cap) {
    const node *x = &g->nodes[n->in[0]];
    const int64_t N = x->shape[0], C = x->shape[1], HW = x->shape[2] * x->shape[3];
    const uint64_t vals = (uint64_t)N * (uint64_t)HW;
    char lit[48];
    k->tmpl = "bn_moment";
    vk_def(k, "BN_SQ", "%d", sq);
    if (caps->cpu_device && !k->idx64 && !strstr(k->defines, "_PAGES") && vk_generic_on() && vals <= UINT32_MAX) {
        /* size-generic (vk_hoist_sizes): one pipeline per workgroup size,
         * on a CPU device (lavapipe), where a pipeline costs more than the
         * loop's run-time bounds; a GPU runs the literal form faster */
        vk_def(k, "BN_GENERIC", "1");
        const float cnt = (float)vals;
        uint32_t bits;
        memcpy(&bits, &cnt, sizeof bits);
        k->dims[0] = (uint32_t)N, k->dims[1] = (uint32_t)C, k->dims[2] = (uint32_t)HW, k->dims[3] = bits;
        k->ndims = 4;
        vk_def(k, "BN_N", "pc.dim[0]");
        vk_def(k, "BN_C", "pc.dim[1]");
        vk_def(k, "BN_HW", "pc.dim[2]");
        vk_def(k, "BN_CNT_F", "uintBitsToFloat(pc.dim[3])");
    } else {
        vk_def_i(k, "BN_N", N);
        vk_def_i(k, "BN_C", C);
        vk_def_i(k, "BN_HW", HW);
        vk_float_literal(lit, sizeof lit, (float)vals);
        vk_def(k, "BN_CNT_F", "%s", lit);
    }
    uint32_t local = nm_local(caps, C <= 256 ? 1024 : 256);
    while (local > 32 && local / 2 >= vals) local /= 2;
    const uint64_t lim = caps->max_groups[0] ? caps->max_groups[0] : 65535;
    const uint64_t groups = (uint64_t)C < 1 ? 1 : (uint64_t)C < lim ? (uint64_t)C : lim;
    uint32_t lg = 0;
    while ((1u << lg) < local) lg++;
    /* per channel of the invocation's stride: a pass and the tree */
    const uint64_t iters = (((uint64_t)C + groups - 1) / groups) * (((vals + local - 1) / local) + lg + 1);
    if (!vk_loops_fit(caps, iters)) return vk_loop_fail(g, n, caps, iters, err, cap);
    k->local[0] = local, k->local[1] = 1, k->local[2] = 1;
    k->groups[0] = (uint32_t)groups, k->groups[1] = 1, k->groups[2] = 1;
    return MN_OK;
}

mn_status vkgen_bn_mean(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                        size_t cap) {
    return gen_bn_moment(k, g, n, caps, false, err, cap);
}
mn_status vkgen_bn_meansq(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    return gen_bn_moment(k, g, n, caps, true, err, cap);
}
