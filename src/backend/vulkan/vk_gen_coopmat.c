/* vk_gen_coopmat.c - the fast contract's GEMMs on cooperative matrices
 * (kernels/matmul_coopmat.glsl): matmul and the convolutions' implicit
 * GEMMs (forward, input and weight gradients): which take it, their tile, the
 * form of the SPIR-V (KHR, rewritten by vk_spirv_coopmat.c, or NV as
 * glslang writes it), and the tuning knobs.
 *
 * A product takes it when its operands are rounded (NODE_F_ROUND_*), the
 * device has 16x16x16 fragments for that type with f32 accumulators at
 * subgroup scope (vk_caps.coopmat_*) and the product is large enough to
 * fill one small tile; otherwise vk_gen_linalg.c's matmul.glsl runs it with
 * the same rounding (MM_RND).
 *
 * Environment (read at each session's code generation; a bad value fails
 * the session naming it):
 *   MEGANEURA_COOPMAT=auto|khr|nv|0  which form: auto (default) KHR where
 *     the device has it, else NV for f16; khr / nv only that one; 0 never
 *     (matmul.glsl with rounding).
 *   MEGANEURA_COOPMAT_TILE=BMxBNxBK/WMxWN/S  the tile of every coopmat
 *     matmul: workgroup BM x BN, K slice BK, subgroup block WM x WN
 *     (multiples of 16; BK a multiple of 16), S shared stages (1 or 2).
 *     Unset: the table below by problem size.
 *   MEGANEURA_COOPMAT_ROUND=exact|hw  for an operand that is not already
 *     a cast to the product's type (the session casts them where the device
 *     has cooperative matrices: session.c round_by_cast, MEGANEURA_FAST_CAST):
 *     exact (default): each element is rounded by integer arithmetic (the
 *     CPU reference's rule) before the conversion to 16 bits; hw: the
 *     device's conversion rounds. A cast operand is converted by the
 *     device, exactly (its values are representable).
 *
 * Does not: compile; decide between the implicit GEMM and the direct
 * convolution kernels (vk_gen_linalg.c: always the GEMM when rounding).
 */
#include <ctype.h>

#include "backend/vulkan/vk_codegen.h"

typedef struct cm_cfg {
    uint32_t bm, bn, bk, wm, wn, stages;
} cm_cfg;

/* In order of preference, each with the fewest workgroups it needs (an
 * H200 has 132 SMs). The first probe (device/README.md) measured
 * 128x256x32 with 64x64 subgroup blocks in one stage at 171-189 TFLOP/s
 * (f16, n = 4096-8192); run AD (docs/PERF.md) measured 128x128x32 with
 * 64x64 blocks in two stages at 21-29 (register spills: 16 accumulator
 * fragments and 16 staged vec4 an invocation) and 32x64 blocks at 115-123,
 * so the mid-size entry is the latter; bench_gemm sweeps others
 * (MEGANEURA_COOPMAT_TILE). */
static const struct {
    cm_cfg cfg;
    uint64_t min_tiles;
} cm_cfgs[] = {
    {{128, 256, 32, 64, 64, 1}, 264},
    {{128, 128, 32, 32, 64, 2}, 132},
    {{64, 128, 32, 32, 64, 2}, 132},
    {{64, 64, 32, 32, 32, 2}, 0},
};
/* Run AG (H100, 2026-12-06; docs/PERF.md) swept the forward's x W^T shapes
 * with a device per session: 128x256x32/64x64 was best or within 5% at
 * every one, small grids included (128 x 2048 x 8192: 174 TFLOP/s against
 * 114 for the 128x128 this table picks). Taking it everywhere (run AH) made
 * SmolLM2's 8 x 512 bf16 step slower all the same (matmul kernels 48.9 ->
 * 57.6 us a call: the backward's products, split weight gradients among
 * them, lose half their workgroups) and ResNet-50 at batch 1 and 4 too, so
 * the table stays until the backward's layouts are swept. */

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static uint32_t cm_invocations(const cm_cfg *c, uint32_t sg) { return (c->bm / c->wm) * (c->bn / c->wn) * sg; }

/* Shared bytes of matmul_coopmat.glsl: the stages (padded rows, 2 bytes an
 * element) or the epilogue's scratch (16 x 20 f32 per subgroup), whichever
 * is larger. The padding is 8 elements on the contiguous dimension of each
 * layout; both layouts of an operand take the same room. */
static uint32_t cm_shared_bytes(const cm_cfg *c) {
    const uint32_t a = c->bm * (c->bk + 8) > c->bk * (c->bm + 8) ? c->bm * (c->bk + 8) : c->bk * (c->bm + 8);
    const uint32_t b = c->bk * (c->bn + 8) > c->bn * (c->bk + 8) ? c->bk * (c->bn + 8) : c->bn * (c->bk + 8);
    const uint32_t stages = c->stages * (a + b) * 2, epi = (c->bm / c->wm) * (c->bn / c->wn) * 16 * 20 * 4;
    return stages > epi ? stages : epi;
}

static bool cm_valid(const cm_cfg *c) {
    return c->bm && c->bn && c->bk && c->wm && c->wn && c->bm % c->wm == 0 && c->bn % c->wn == 0 && c->wm % 16 == 0 &&
           c->wn % 16 == 0 && c->bk % 16 == 0 && (c->stages == 1 || c->stages == 2) && c->bm <= 1024 &&
           c->bn <= 1024 && c->bk <= 256;
}

/* Fits the device, and the invocations share each slice's units evenly. */
static bool cm_fits(const cm_cfg *c, const vk_caps *caps) {
    const uint32_t sg = caps->subgroup_size, nt = cm_invocations(c, sg);
    const uint32_t smem = caps->max_shared_bytes ? caps->max_shared_bytes : 16384;
    const uint32_t maxinv = caps->max_invocations ? caps->max_invocations : 128;
    return cm_valid(c) && nt <= maxinv && cm_shared_bytes(c) <= smem && (c->bm * c->bk / 4) % nt == 0 &&
           (c->bk * c->bn / 4) % nt == 0;
}

/* "BMxBNxBK/WMxWN/S". */
static bool cm_parse(cm_cfg *c, const char *s) {
    unsigned v[6];
    char tail;
    if (sscanf(s, "%ux%ux%u/%ux%u/%u%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &tail) != 6) return false;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p) && *p != 'x' && *p != '/') return false;
    *c = (cm_cfg){v[0], v[1], v[2], v[3], v[4], v[5]};
    return cm_valid(c);
}

typedef enum { CM_FORM_NONE, CM_FORM_KHR, CM_FORM_NV } cm_form;

static mn_status env_fail(const mn_graph *g, const node *n, const char *var, const char *val, const char *want,
                          char *err, size_t cap) {
    mn_fmt(err, cap, "vulkan codegen: %s (%%%d): %s='%s': want %s", op_table[n->op].name, (int)(n - g->nodes), var,
           val, want);
    return MN_E_INVALID;
}

/* The form this device and MEGANEURA_COOPMAT (e: NULL or its value) give
 * the rounding; false for a value it does not know. */
static bool cm_form_env(cm_form *out, const char *e, const vk_caps *caps, mn_round16 rnd) {
    bool khr = true, nv = true;
    *out = CM_FORM_NONE;
    if (e && *e) {
        if (!strcmp(e, "0") || !strcmp(e, "off")) khr = nv = false;
        else if (!strcmp(e, "khr")) nv = false;
        else if (!strcmp(e, "nv")) khr = false;
        else if (strcmp(e, "auto") && strcmp(e, "1")) return false;
    }
    if (rnd == MN_ROUND_BF16 && khr && caps->coopmat_bf16) *out = CM_FORM_KHR;
    if (rnd == MN_ROUND_F16 && khr && caps->coopmat_f16) *out = CM_FORM_KHR;
    else if (rnd == MN_ROUND_F16 && nv && caps->coopmat_nv_f16) *out = CM_FORM_NV;
    /* the kernel spreads a 16 x 16 fragment's 256 elements over a subgroup */
    if (caps->subgroup_size < 8 || caps->subgroup_size > 256 || (caps->subgroup_size & (caps->subgroup_size - 1)))
        *out = CM_FORM_NONE;
    return true;
}

bool vk_coopmat_available(const vk_caps *caps, mn_round16 rnd) {
    cm_form f;
    return rnd != MN_ROUND_NONE && cm_form_env(&f, getenv("MEGANEURA_COOPMAT"), caps, rnd) && f != CM_FORM_NONE;
}

static void cm_def_pass(vk_kernel *k, cm_form form, mn_round16 rnd) {
    if (form == CM_FORM_KHR)
        vk_def(k, "MN_SPIRV_PASS", "%s", rnd == MN_ROUND_BF16 ? VK_SPIRV_PASS_COOPMAT_BF16 : VK_SPIRV_PASS_COOPMAT);
}

bool vk_coopmat_def_pass(vk_kernel *k, const vk_caps *caps, mn_round16 rnd) {
    cm_form f;
    if (rnd == MN_ROUND_NONE || !cm_form_env(&f, getenv("MEGANEURA_COOPMAT"), caps, rnd) || f == CM_FORM_NONE)
        return false;
    cm_def_pass(k, f, rnd);
    return true;
}

/* The form this device and MEGANEURA_COOPMAT give the rounding, or NONE. */
static mn_status cm_form_of(cm_form *out, const mn_graph *g, const node *n, const vk_caps *caps, mn_round16 rnd,
                            char *err, size_t cap) {
    const char *e = getenv("MEGANEURA_COOPMAT");
    if (!cm_form_env(out, e, caps, rnd)) return env_fail(g, n, "MEGANEURA_COOPMAT", e, "auto, khr, nv or 0", err, cap);
    return MN_OK;
}

bool vk_pre_rounded(const mn_graph *g, const node *n, int j, mn_round16 rnd) {
    if (j >= n->nin || n->in[j] < 0) return false;
    const node *a = &g->nodes[n->in[j]];
    while (a->op == OP_RESHAPE) a = &g->nodes[a->in[0]]; /* a view of a cast (session.c round_by_cast) */
    return a->op == OP_CAST && a->dtype == (rnd == MN_ROUND_BF16 ? MN_BF16 : MN_F16);
}

static cm_cfg cm_pick(const vk_caps *caps, int64_t M, int64_t N, int64_t batch, bool *found) {
    cm_cfg c = cm_cfgs[MN_ARRAY_LEN(cm_cfgs) - 1].cfg;
    *found = false;
    for (size_t i = 0; i < MN_ARRAY_LEN(cm_cfgs); i++) {
        const cm_cfg t = cm_cfgs[i].cfg;
        if (!cm_fits(&t, caps)) continue;
        /* a tile much larger than the matrix only wastes invocations */
        if (i + 1 < MN_ARRAY_LEN(cm_cfgs) && ((uint64_t)M * 2 <= t.bm || (uint64_t)N * 2 <= t.bn)) continue;
        c = t;
        *found = true;
        if (cdiv((uint64_t)M, t.bm) * cdiv((uint64_t)N, t.bn) * (uint64_t)batch >= cm_cfgs[i].min_tiles) break;
    }
    return c;
}

mn_status vk_gen_coopmat_gemm(vk_kernel *k, bool *used, const mn_graph *g, const node *n, const vk_caps *caps,
                              const vk_gemm_shape *s, char *err, size_t cap) {
    *used = false;
    const mn_round16 rnd = node_round16(n);
    if (rnd == MN_ROUND_NONE) return MN_OK;
    cm_form form;
    mn_status st = cm_form_of(&form, g, n, caps, rnd, err, cap);
    if (st || form == CM_FORM_NONE) return st;
    /* below one fragment in either output dimension, or tiny products, the
     * FMA kernel (same rounding) does better */
    if (s->M < 16 || s->N < 16 || s->M * s->N * s->K < ((int64_t)1 << 18)) return MN_OK;
    const char *round = getenv("MEGANEURA_COOPMAT_ROUND");
    bool exact = true;
    if (round && *round) {
        if (!strcmp(round, "hw")) exact = false;
        else if (strcmp(round, "exact"))
            return env_fail(g, n, "MEGANEURA_COOPMAT_ROUND", round, "exact or hw", err, cap);
    }
    cm_cfg c;
    const char *tile = getenv("MEGANEURA_COOPMAT_TILE");
    if (tile && *tile) {
        if (!cm_parse(&c, tile))
            return env_fail(g, n, "MEGANEURA_COOPMAT_TILE", tile,
                            "BMxBNxBK/WMxWN/S: WM, WN, BK multiples of 16 dividing BM, BN; S 1 or 2", err, cap);
        if (!cm_fits(&c, caps)) {
            mn_fmt(err, cap, "vulkan codegen: %s (%%%d): MEGANEURA_COOPMAT_TILE='%s' does not fit the device: %u "
                   "invocations (at most %u), %u bytes of shared memory (at most %u), and each invocation must "
                   "move a whole number of 4-element units of every slice",
                   op_table[n->op].name, (int)(n - g->nodes), tile, cm_invocations(&c, caps->subgroup_size),
                   caps->max_invocations, cm_shared_bytes(&c), caps->max_shared_bytes);
            return MN_E_INVALID;
        }
    } else {
        bool found;
        c = cm_pick(caps, s->M, s->N, s->batch, &found);
        if (!found) return MN_OK; /* no tile fits this device */
    }
    const bool a_kfast = s->a_kfast, b_nfast = s->b_nfast, mm = s->map == 0;
    /* vec4 loads: the contiguous extent a multiple of 4 (then every unit's
     * first index is too: the other strides are multiples of it), and an
     * unpaged operand (pc.off is a multiple of 4: tensors are 64-byte
     * aligned, binding offsets a power of two: the template drops it for
     * a paged operand) */
    const bool va = mm && (a_kfast ? s->K : s->M) % 4 == 0, vb = mm && (b_nfast ? s->N : s->K) % 4 == 0;
    /* a weight gradient's parts (MM_PARTS, MM_GROUPS: vkgen_conv2d_bwd_weight) */
    const int64_t kc = s->kc > 0 && s->kc < s->K ? s->kc : s->K;
    if (kc < s->K && s->map != 3) {
        mn_fmt(err, cap, "vulkan codegen: %s (%%%d): a K split of map %d (only weight gradients split)",
               op_table[n->op].name, (int)(n - g->nodes), s->map);
        return MN_E_UNSUPPORTED;
    }
    const bool even_m = s->M % c.bm == 0, even_n = s->N % c.bn == 0;
    /* straight from the fragments into Y: row-major C, whole tiles, rows a
     * multiple of 16 bytes (the template drops it for a paged Y or a fused
     * group's MM_EPILOGUE) */
    const bool direct = mm && even_m && even_n && s->N % 4 == 0;
    k->tmpl = "matmul_coopmat";
    cm_def_pass(k, form, rnd);
    vk_def(k, "MM_MAP", "%d", s->map);
    vk_def(k, "MM_M", "%lldu", (long long)s->M);
    vk_def(k, "MM_N", "%lldu", (long long)s->N);
    vk_def(k, "MM_K", "%lldu", (long long)s->K);
    vk_def(k, "MM_BATCH", "%lldu", (long long)s->batch);
    vk_def(k, "CM_BM", "%uu", c.bm);
    vk_def(k, "CM_BN", "%uu", c.bn);
    vk_def(k, "CM_BK", "%uu", c.bk);
    vk_def(k, "CM_WM", "%uu", c.wm);
    vk_def(k, "CM_WN", "%uu", c.wn);
    vk_def(k, "CM_STAGES", "%u", c.stages);
    vk_def(k, "CM_SG", "%uu", caps->subgroup_size);
    vk_def(k, "CM_BF16", "%d", rnd == MN_ROUND_BF16);
    /* A is input 0 but for the weight gradient (map 3: A = dy, input 1) */
    const int ja = s->map == 3 ? 1 : 0, jb = s->map == 3 ? 0 : 1;
    vk_def(k, "CM_EXACT_A", "%d", exact && !vk_pre_rounded(g, n, ja, rnd));
    vk_def(k, "CM_EXACT_B", "%d", exact && !vk_pre_rounded(g, n, jb, rnd));
    vk_def(k, "CM_A_KFAST", "%d", a_kfast);
    vk_def(k, "CM_B_NFAST", "%d", b_nfast);
    vk_def(k, "CM_VA", "%d", va);
    vk_def(k, "CM_VB", "%d", vb);
    vk_def(k, "CM_EVEN_M", "%d", even_m);
    vk_def(k, "CM_EVEN_N", "%d", even_n);
    vk_def(k, "CM_EVEN_K", "%d", s->K % kc == 0 && kc % c.bk == 0);
    if (kc < s->K) vk_def(k, "CM_KC", "%lldu", (long long)kc);
    vk_def(k, "CM_DIRECT", "%d", direct);
    const uint64_t tiles[3] = {cdiv((uint64_t)s->M, c.bm), cdiv((uint64_t)s->N, c.bn), (uint64_t)s->batch};
    uint64_t strides = 1;
    for (int d = 0; d < 3; d++) {
        uint64_t lim = caps->max_groups[d] ? caps->max_groups[d] : 65535;
        k->groups[d] = (uint32_t)(tiles[d] < lim ? (tiles[d] ? tiles[d] : 1) : lim);
        strides *= cdiv(tiles[d] ? tiles[d] : 1, k->groups[d]);
    }
    k->local[0] = cm_invocations(&c, caps->subgroup_size), k->local[1] = 1, k->local[2] = 1;
    const uint64_t iters = strides * (1 + cdiv((uint64_t)kc, c.bk));
    *used = true;
    return vk_loops_fit(caps, iters) ? MN_OK : vk_loop_fail(g, n, caps, iters, err, cap);
}
