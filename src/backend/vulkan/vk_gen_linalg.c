/* vk_gen_linalg.c - Vulkan code generation for the linear-algebra family:
 * matmul, conv2d (+ input/weight gradients), maxpool2d (+ backward).
 *
 * Products of at most GEMV_MAX_M rows use kernels/gemv.glsl (decoding);
 * other matmuls and large convolutions use kernels/matmul.glsl, a tiled GEMM whose
 * operand maps (MM_MAP) turn a convolution into an implicit GEMM; the tile
 * shape is picked here from the problem size and the device's shared-memory
 * limit. Small or thin convolutions (few channels per group, depthwise) use
 * the direct kernels conv2d*.glsl (not in the fast contract, whose operand
 * rounding is the GEMM's: MM_RND). A GEMM of the fast contract (matmul or
 * convolution) goes to vk_gen_coopmat.c first, where the device has
 * cooperative matrices.
 * Pools use maxpool2d*.glsl, exact.
 * Every shape, stride and tile size is baked in as a #define.
 *
 * Does not: compile or dispatch (vk_compile.c, the runtime), nor generate
 * any other op (vk_gen_pointwise.c).
 */
#include "backend/vulkan/vk_codegen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const node *in_node(const mn_graph *g, const node *n, int i) { return &g->nodes[n->in[i]]; }

static int64_t pos1(int64_t v) { return v > 0 ? v : 1; }

/* ---- GEMM tiling ---------------------------------------------------------- */

/* Workgroup tile bm x bn, k slice bk, per-invocation micro-tile tm x tn
 * (multiples of 4), ks K splits: (bm/tm) * (bn/tn) * ks invocations. */
typedef struct gemm_cfg {
    uint32_t bm, bn, bk, tm, tn, ks;
} gemm_cfg;

/* In order of preference, each with the fewest workgroups it needs to
 * beat the next ones. Measured on an H200 (f32, TFLOP/s, bench/gemm_sweep.sh,
 * docs/PERF.md 2026-12-02 sweep; cuBLAS 50-51 at the squares): 128x128 with
 * 8x8 micro-tiles and 16-deep slices is the fastest once there are 256 such
 * tiles (38.0 / 40.0 at 4096^3 / 8192^3, 36.7 at 2048^3, 36.8 at
 * 512x8192x2048; the former first choice 128x64x16 gave 32.2 / 33.5 / 30.9 /
 * 31.0); below that 128x64 with 8-deep slices (25.8 at 4096x576x1536 against
 * 20.2 for 128x128 and 22.7 for 128x64x16); 64x64 around 100-200 tiles
 * (15.8 at 512x1536x576); 32x32 tiles with K splits on small grids (18 at
 * 512^3 against 7 for 128x64). Judge a change by the models, not by
 * bench_gemm alone: its repetitions are independent products that run
 * concurrently, so at small sizes it measures throughput. A table that
 * took 128x64 tiles down to 24 workgroups (their best there: 29.5 against
 * 20.5 TFLOP/s at 512x576 @ 576x576) made the SmolLM2 prefill of 512
 * tokens 9.3 -> 12.0 ms and ResNet-50 batch-1 inference 1.6 -> 4.4 ms
 * (docs/PERF.md, 2026-12-02 fourth lease). */
static const struct {
    gemm_cfg cfg;
    uint64_t min_tiles;
} gemm_cfgs[] = {
    {{128, 128, 16, 8, 8, 1}, 256}, /* 256 invocations */
    {{128, 64, 8, 8, 8, 1}, 192},   /* 128 */
    {{64, 128, 8, 8, 8, 1}, 192},   /* 128, for M <= 64 */
    {{64, 64, 16, 4, 8, 1}, 96},    /* 128 */
    {{32, 32, 16, 4, 4, 1}, 0},     /* 64, and K splits */
};

/* K splits (in-workgroup, each split its own run of k slices) for the last
 * tile only, when its grid is small: they shorten the serial chain of
 * slices that bounds a small product's latency. Each split keeps at least
 * GEMM_SPLIT_MIN_SLICES slices. On an H200: 512^3 15 -> 18 TFLOP/s (2
 * splits), 64x4096x4096 12 -> 19 (2), 256x256x16384 3.6 -> 8.3 (8), the
 * MNIST layer 64x784 @ 784x128 22 -> 13-14 us, conv weight gradients 2x. */
#define GEMM_SPLIT_BELOW 512
#define GEMM_SPLIT_MIN_SLICES 2
#define GEMM_SPLIT_MAX 8

static uint32_t gemm_invocations(const gemm_cfg *c) { return (c->bm / c->tm) * (c->bn / c->tn) * c->ks; }

/* Two buffers of both tiles (rows padded by 4) per split, and the vec4 per
 * invocation through which splits 1.. hand their sums to split 0. */
static uint32_t gemm_shared_bytes(const gemm_cfg *c) {
    return c->ks * 2u * c->bk * (c->bm + 4 + c->bn + 4) * 4u + (c->ks - 1) * (c->bm / c->tm) * (c->bn / c->tn) * 16u;
}

static uint64_t cdiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Fits the device, and the invocations of a split share each slice's loads
 * evenly. */
static bool gemm_fits(const gemm_cfg *c, uint32_t smem, uint32_t maxinv) {
    const uint32_t per_split = (c->bm / c->tm) * (c->bn / c->tn);
    return gemm_shared_bytes(c) <= smem && gemm_invocations(c) <= maxinv && (c->bm * c->bk) % per_split == 0 &&
           (c->bn * c->bk) % per_split == 0;
}

/* Picks the tile for an M x N x K product repeated `batch` times: the first
 * configuration that fits the device and gets its minimum of workgroups;
 * K splits for the last one when its grid is small and K long. */
/* MEGANEURA_VK_GEMM_TILE=bm,bn,bk,tm,tn[,ks] (a tuning knob for benchmarks,
 * not for production): every GEMM that the tile fits uses it, with ks K
 * splits (default 1). Anything malformed or not fitting the device is
 * ignored. */
static bool gemm_env_tile(gemm_cfg *c, uint32_t smem, uint32_t maxinv) {
    const char *v = getenv("MEGANEURA_VK_GEMM_TILE");
    unsigned bm, bn, bk, tm, tn, ks = 1;
    char tail;
    if (!v) return false;
    const int got = sscanf(v, "%u,%u,%u,%u,%u,%u%c", &bm, &bn, &bk, &tm, &tn, &ks, &tail);
    if (got != 5 && got != 6) return false;
    if (!bm || !bn || !bk || tm % 4 || tn % 4 || !tm || !tn || bm % tm || bn % tn || bm > 512 || bn > 512 || bk > 64 ||
        !ks || ks > GEMM_SPLIT_MAX || (ks & (ks - 1)))
        return false;
    gemm_cfg t = {bm, bn, bk, tm, tn, ks};
    if (!gemm_fits(&t, smem, maxinv)) return false;
    *c = t;
    return true;
}

static gemm_cfg gemm_pick(const vk_caps *caps, int64_t M, int64_t N, int64_t K, int64_t batch) {
    uint32_t smem = caps->max_shared_bytes ? caps->max_shared_bytes : 16384;
    uint32_t maxinv = caps->max_invocations ? caps->max_invocations : 128;
    gemm_cfg env;
    if (gemm_env_tile(&env, smem, maxinv)) return env;
    gemm_cfg c = {32, 32, 8, 4, 4, 1}; /* 64 invocations, 4.6 KiB: fits any Vulkan device */
    uint64_t tiles = 0;
    bool last = true;
    for (size_t i = 0; i < MN_ARRAY_LEN(gemm_cfgs); i++) {
        gemm_cfg t = gemm_cfgs[i].cfg;
        while (!gemm_fits(&t, smem, maxinv) && t.bk > 8) t.bk /= 2;
        if (!gemm_fits(&t, smem, maxinv)) continue;
        /* a tile much larger than the matrix only wastes invocations */
        if (t.bm > 32 && (uint64_t)M * 2 <= t.bm) continue;
        if (t.bn > 32 && (uint64_t)N * 2 <= t.bn) continue;
        c = t;
        tiles = cdiv((uint64_t)M, t.bm) * cdiv((uint64_t)N, t.bn) * (uint64_t)batch;
        last = i + 1 == MN_ARRAY_LEN(gemm_cfgs);
        if (tiles >= gemm_cfgs[i].min_tiles) break;
    }
    while (last && tiles * c.ks < GEMM_SPLIT_BELOW && c.ks < GEMM_SPLIT_MAX) {
        gemm_cfg d = c;
        d.ks *= 2;
        while (!gemm_fits(&d, smem, maxinv) && d.bk > 8) d.bk /= 2;
        if (!gemm_fits(&d, smem, maxinv) || cdiv((uint64_t)K, d.bk) < (uint64_t)GEMM_SPLIT_MIN_SLICES * d.ks) break;
        c = d;
    }
    return c;
}

/* Convolutions' implicit GEMMs on a GPU: the per-shape best of a tile sweep over ResNet-50's
 * 23 shapes at batch 32 on an H200 (docs/PERF.md run R, bench_conv.c). Their
 * operand loads cost index arithmetic per element, so tiles that hide the
 * loads' latency behind more workgroups win more often than in a plain
 * GEMM (a CPU device keeps gemm_pick's: vk_gpu_tables): forward and input gradient (channel-major: M the channels, N the
 * pixels) 64x128x8 unless K is long (>= 2304: 128x128x16 with 96 tiles,
 * >= 4096: 64x64x8 with 4x4 micro-tiles); weight gradients (M = O, N =
 * C*KH*KW, K a part of the pixels) of 3x3 kernels over few channels
 * 64x64x8 (4x4), of 1x1 kernels 128x128x16 with 96 tiles. Otherwise, and
 * under MEGANEURA_VK_GEMM_TILE, gemm_pick. */
static bool conv_try(gemm_cfg *out, gemm_cfg t, const vk_caps *caps, int64_t M, int64_t N, int64_t batch,
                     uint64_t min_tiles) {
    uint32_t smem = caps->max_shared_bytes ? caps->max_shared_bytes : 16384;
    uint32_t maxinv = caps->max_invocations ? caps->max_invocations : 128;
    if (!gemm_fits(&t, smem, maxinv) || (uint64_t)M * 2 <= t.bm || (uint64_t)N * 2 <= t.bn) return false;
    if (cdiv((uint64_t)M, t.bm) * cdiv((uint64_t)N, t.bn) * (uint64_t)batch < min_tiles) return false;
    *out = t;
    return true;
}

static gemm_cfg conv_pick(const vk_caps *caps, int map, int64_t M, int64_t N, int64_t K, int64_t batch, int64_t taps) {
    const gemm_cfg big = {128, 128, 16, 8, 8, 1}, small = {64, 64, 8, 4, 4, 1}, wide = {64, 128, 8, 8, 8, 1};
    gemm_cfg c;
    if (!vk_gpu_tables(caps) || getenv("MEGANEURA_VK_GEMM_TILE")) return gemm_pick(caps, M, N, K, batch);
    if (map == 3) {
        if (taps > 1 && N <= 1152 && conv_try(&c, small, caps, M, N, batch, 96)) return c;
        if (taps == 1 && conv_try(&c, big, caps, M, N, batch, 96)) return c;
        return gemm_pick(caps, M, N, K, batch);
    }
    if (K >= 2304 && conv_try(&c, big, caps, M, N, batch, 96)) return c;
    if (K >= 4096 && conv_try(&c, small, caps, M, N, batch, 96)) return c;
    if (conv_try(&c, wide, caps, M, N, batch, 96)) return c;
    return gemm_pick(caps, M, N, K, batch);
}

/* Operand maps of matmul.glsl. */
enum { MAP_MATMUL = 0, MAP_CONV_FWD = 1, MAP_CONV_DGRAD = 2, MAP_CONV_WGRAD = 3 };

/* Emits the GEMM defines and the launch: grid (M tiles, N tiles, batch),
 * each clamped to the device limit (the kernel strides over the rest). */
/* How the implicit GEMM's B gathers the image (matmul.glsl MM_PX): 0 per
 * element; 1 the pixel is k (weight gradients), 2 the pixel is n (the
 * channel-major forward and input gradient). */
enum { PX_NONE = 0, PX_K = 1, PX_N = 2 };

/* MEGANEURA_VK_CONV_PX=0 gathers per element (to measure MM_PX). */
static bool conv_px_on(void) {
    const char *v = getenv("MEGANEURA_VK_CONV_PX");
    return !(v && !strcmp(v, "0"));
}

/* MEGANEURA_VK_GEMM_VEC=0 loads a plain product's operands element by
 * element (to measure MM_VA/MM_VB). */
static bool gemm_vec_on(void) {
    const char *v = getenv("MEGANEURA_VK_GEMM_VEC");
    return !(v && !strcmp(v, "0"));
}

static mn_status gemm_emit(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, gemm_cfg c, int map,
                           int64_t M, int64_t N, int64_t K, int64_t kc, int64_t batch, bool a_kfast, bool b_kfast,
                           int px, char *err, size_t cap) {
    /* a convolution of the fast contract: cooperative matrices first (a
     * weight gradient's partial sums too: each part its run of kc; not with
     * MEGANEURA_COOPMAT_SPLIT=0, which leaves them to this kernel, to
     * measure it) */
    const char *cs = getenv("MEGANEURA_COOPMAT_SPLIT");
    if (map != MAP_MATMUL && (kc == K || !(cs && !strcmp(cs, "0")))) {
        const vk_gemm_shape gs = {M, N, K, batch, 0, 0, 0, 0, 0, 0, map, a_kfast, !b_kfast, kc < K ? kc : 0};
        bool used;
        mn_status st = vk_gen_coopmat_gemm(k, &used, g, n, caps, &gs, err, cap);
        if (st || used) return st;
    }
    k->tmpl = "matmul";
    vk_def(k, "MM_MAP", "%d", map);
    vk_def_i(k, "MM_M", M);
    vk_def_i(k, "MM_N", N);
    vk_def_i(k, "MM_K", K);
    vk_def_i(k, "MM_KC", kc);
    vk_def_i(k, "MM_BATCH", batch);
    vk_def(k, "MM_BM", "%u", c.bm);
    vk_def(k, "MM_BN", "%u", c.bn);
    vk_def(k, "MM_BK", "%u", c.bk);
    vk_def(k, "MM_TM", "%u", c.tm);
    vk_def(k, "MM_TN", "%u", c.tn);
    vk_def(k, "MM_KS", "%u", c.ks);
    vk_def(k, "MM_EVEN_M", "%d", M % c.bm == 0);
    vk_def(k, "MM_EVEN_N", "%d", N % c.bn == 0);
    vk_def(k, "MM_EVEN_K", "%d", K % c.bk == 0 && K % kc == 0 && kc % c.bk == 0);
    vk_def(k, "MM_A_KFAST", "%d", a_kfast);
    vk_def(k, "MM_B_KFAST", "%d", b_kfast);
    /* the pixel of an invocation's B elements is fixed when its contiguous
     * index repeats every NT elements */
    const uint32_t nt = (c.bm / c.tm) * (c.bn / c.tn);
    if (conv_px_on() && ((px == PX_K && b_kfast && nt % c.bk == 0) || (px == PX_N && !b_kfast && nt % c.bn == 0)))
        vk_def(k, "MM_PX", "%d", px);
    /* vec4 loads of a plain product's operand (matmul.glsl MM_VA/MM_VB):
     * its contiguous extent a multiple of 4 (then so are its other strides,
     * and pc.off is: tensors are 64-byte aligned), every invocation moving
     * whole 4-element units of a slice; the template drops them for a
     * paged operand or 64-bit indices */
    if (map == MAP_MATMUL && gemm_vec_on() && c.bk % 4 == 0) {
        vk_def(k, "MM_VA", "%d", (a_kfast ? K : M) % 4 == 0 && (c.bm * c.bk) % (4 * nt) == 0);
        vk_def(k, "MM_VB", "%d", (b_kfast ? K : N) % 4 == 0 && (c.bn * c.bk) % (4 * nt) == 0);
    }
    /* the fast contract without cooperative matrices: rounded operands */
    if (node_round16(n) == MN_ROUND_BF16) vk_def(k, "MM_RND(x)", "mn_round_bf16(x)");
    if (node_round16(n) == MN_ROUND_F16) vk_def(k, "MM_RND(x)", "mn_round_f16(x)");
    uint64_t tiles[3] = {cdiv((uint64_t)M, c.bm), cdiv((uint64_t)N, c.bn), (uint64_t)batch};
    for (int d = 0; d < 3; d++) {
        uint64_t lim = caps->max_groups[d] ? caps->max_groups[d] : 65535;
        k->groups[d] = (uint32_t)(tiles[d] < lim ? (tiles[d] ? tiles[d] : 1) : lim);
    }
    k->local[0] = gemm_invocations(&c), k->local[1] = 1, k->local[2] = 1;
    /* loop iterations of an invocation: the tiles it strides over, each the
     * K steps of its split and the merge of the splits (matmul.glsl; the
     * loops inside a step are unrolled) */
    uint64_t strides = 1;
    for (int d = 0; d < 3; d++) strides *= cdiv(tiles[d] ? tiles[d] : 1, k->groups[d]);
    const uint64_t ksteps = cdiv(cdiv((uint64_t)kc, c.bk), c.ks);
    const uint64_t iters = strides * (1 + ksteps + (c.ks > 1 ? (uint64_t)c.tm * (c.tn / 4) * (c.ks - 1) : 0));
    return vk_loops_fit(caps, iters) ? MN_OK : vk_loop_fail(g, n, caps, iters, err, cap);
}

/* ---- matrix-vector products ---------------------------------------------- */

/* At most this many rows go to gemv.glsl (decoding: one row per sequence). */
#define GEMV_MAX_M 8

/* gemv.glsl for an M <= GEMV_MAX_M product: teams of tl invocations split K
 * for one output column each, nl teams a workgroup (see the template).
 * MN_E_UNSUPPORTED when the device cannot take it (the caller then uses the
 * GEMM). On an H200 the tiled GEMM took 15 us for a 1 x 576 @ 576 x 1536
 * product (decode profile, docs/PERF.md) that reads 3.5 MB. */
static mn_status gemv_emit(vk_kernel *k, const node *n, const vk_caps *caps, int64_t M, int64_t N, int64_t K,
                           int64_t batch, bool b_kfast) {
    uint32_t maxinv = caps->max_invocations ? caps->max_invocations : 128;
    uint32_t nt = maxinv >= 256 ? 256 : 128, tl, nl;
    if (b_kfast) {
        tl = 32;
        while (tl > 4 && (uint64_t)tl * 4 > (uint64_t)K) tl /= 2;
    } else {
        tl = 8;
        while (tl > 1 && (uint64_t)tl * 16 > (uint64_t)K) tl /= 2;
    }
    nl = nt / tl;
    uint32_t smem = caps->max_shared_bytes ? caps->max_shared_bytes : 16384;
    if ((uint64_t)M * nt * 4 > smem) return MN_E_UNSUPPORTED;
    const uint64_t kc = cdiv((uint64_t)K, tl), blocks = cdiv((uint64_t)N, nl);
    uint64_t lim0 = caps->max_groups[0] ? caps->max_groups[0] : 65535;
    uint64_t lim2 = caps->max_groups[2] ? caps->max_groups[2] : 65535;
    uint64_t gx = blocks < lim0 ? blocks : lim0, gz = (uint64_t)batch < lim2 ? (uint64_t)batch : lim2;
    /* serial iterations: the blocks and batches an invocation strides over,
     * each its share of K and the tree */
    uint64_t steps = 0;
    for (uint32_t s = tl / 2; s > 0; s >>= 1) steps++;
    const uint64_t iters = cdiv(blocks, gx) * cdiv((uint64_t)batch, gz) * (1 + kc + steps);
    if (!vk_loops_fit(caps, iters)) return MN_E_UNSUPPORTED;
    k->tmpl = "gemv";
    vk_def(k, "MM_M", "%lld", (long long)M); /* <= GEMV_MAX_M: an array size */
    vk_def_u(k, "MM_N", (uint64_t)N);
    vk_def_u(k, "MM_K", (uint64_t)K);
    vk_def_u(k, "MM_BATCH", (uint64_t)batch);
    vk_def(k, "MM_B_KFAST", "%d", b_kfast);
    vk_def(k, "GV_NL", "%u", nl);
    vk_def(k, "GV_TL", "%u", tl);
    vk_def_u(k, "GV_KC", kc);
    /* the fast contract rounds each operand as it is loaded (matmul.glsl's rule) */
    if (node_round16(n) == MN_ROUND_BF16) vk_def(k, "MM_RND(x)", "mn_round_bf16(x)");
    if (node_round16(n) == MN_ROUND_F16) vk_def(k, "MM_RND(x)", "mn_round_f16(x)");
    k->local[0] = nt, k->local[1] = 1, k->local[2] = 1;
    k->groups[0] = (uint32_t)(gx ? gx : 1), k->groups[1] = 1, k->groups[2] = (uint32_t)(gz ? gz : 1);
    return MN_OK;
}

/* ---- matmul --------------------------------------------------------------- */

/* a: [M,K] | [B,M,K] ([K,M] | [B,K,M] with trans_a); b: [K,N] | [B,K,N] ([N,K] |
 * [B,N,K] with trans_b); c: [M,N] | [B,M,N]; a rank-2 operand is shared. */
mn_status vkgen_matmul(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                       size_t cap) {
    const node *A = in_node(g, n, 0), *B = in_node(g, n, 1);
    const bool ta = matmul_attrs_of(n).trans_a, tb = matmul_attrs_of(n).trans_b;
    const int64_t M = A->shape[A->rank - (ta ? 1 : 2)], K = A->shape[A->rank - (ta ? 2 : 1)];
    const int64_t N = B->shape[B->rank - (tb ? 2 : 1)];
    const int64_t batch = n->rank == 3 ? n->shape[0] : 1;
    /* element (m, k) of op(a) is at m*sam + k*sak; (k, n) of op(b) at k*sbk + n*sbn */
    const int64_t sam = ta ? 1 : K, sak = ta ? M : 1, sbk = tb ? 1 : N, sbn = tb ? K : 1;
    vk_def_u(k, "MM_SAZ", (uint64_t)(A->rank == 3 ? M * K : 0));
    vk_def_u(k, "MM_SAM", (uint64_t)sam);
    vk_def_u(k, "MM_SAK", (uint64_t)sak);
    vk_def_u(k, "MM_SBZ", (uint64_t)(B->rank == 3 ? K * N : 0));
    vk_def_u(k, "MM_SBK", (uint64_t)sbk);
    vk_def_u(k, "MM_SBN", (uint64_t)sbn);
    const vk_gemm_shape gs = {M, N, K, batch, A->rank == 3 ? M * K : 0, sam, sak, B->rank == 3 ? K * N : 0, sbk, sbn,
                              MAP_MATMUL, sak == 1, sbn == 1, 0};
    bool used = false;
    /* the cooperative-matrix kernels index in 32 bits: a product above
     * vk_caps.index_max takes the (64-bit) tiled GEMM or gemv */
    mn_status st = k->idx64 ? MN_OK : vk_gen_coopmat_gemm(k, &used, g, n, caps, &gs, err, cap);
    if (st || used) return st;
    if (M <= GEMV_MAX_M && !getenv("MEGANEURA_VK_GEMM_TILE") && gemv_emit(k, n, caps, M, N, K, batch, sbk == 1) == MN_OK)
        return MN_OK;
    return gemm_emit(k, g, n, caps, gemm_pick(caps, M, N, K, batch), MAP_MATMUL, M, N, K, K, batch, sak == 1,
                     sbk == 1, PX_NONE, err, cap);
}

/* ---- convolution ---------------------------------------------------------- */

typedef struct conv_geo {
    int64_t N, C, H, W, O, Cg, Og, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, groups;
} conv_geo;

/* x [N,C,H,W], w [O,Cg,KH,KW], y [N,O,OH,OW]; ip as CONV2D. */
static conv_geo conv_geo_of(const node *n, const node *x, const node *w, const node *y) {
    conv_geo c;
    c.N = x->shape[0], c.C = x->shape[1], c.H = x->shape[2], c.W = x->shape[3];
    c.O = w->shape[0], c.Cg = w->shape[1], c.KH = w->shape[2], c.KW = w->shape[3];
    c.OH = y->shape[2], c.OW = y->shape[3];
    const mn_conv_attrs a = conv_attrs_of(n);
    c.sh = pos1(a.stride[0]), c.sw = pos1(a.stride[1]), c.ph = a.pad[0], c.pw = a.pad[1];
    c.dh = pos1(a.dilation[0]), c.dw = pos1(a.dilation[1]), c.groups = pos1(a.groups);
    c.Og = c.O / c.groups;
    return c;
}

static void conv_defs(vk_kernel *k, const conv_geo *c) {
    const struct {
        const char *name;
        int64_t v;
    } d[] = {{"CV_N", c->N},   {"CV_C", c->C},   {"CV_H", c->H},   {"CV_W", c->W},   {"CV_O", c->O},
             {"CV_CG", c->Cg}, {"CV_OG", c->Og}, {"CV_KH", c->KH}, {"CV_KW", c->KW}, {"CV_OH", c->OH},
             {"CV_OW", c->OW}, {"CV_SH", c->sh}, {"CV_SW", c->sw}, {"CV_PH", c->ph}, {"CV_PW", c->pw},
             {"CV_DH", c->dh}, {"CV_DW", c->dw}};
    for (size_t i = 0; i < MN_ARRAY_LEN(d); i++) vk_def_i(k, d[i].name, d[i].v);
}

/* The implicit GEMM pays when both output dimensions of the per-group
 * product fill a tile reasonably and there is enough work; otherwise the
 * direct kernels do better (depthwise: one channel per group). */
static bool conv_use_gemm(const node *n, int64_t M, int64_t N, int64_t K) {
    /* the fast contract's rounding lives in the GEMM's loads (MM_RND) */
    if (node_round16(n) != MN_ROUND_NONE) return true;
    return M >= 32 && N >= 16 && K >= 8 && M * N * K >= (int64_t)1 << 18;
}

/* The implicit GEMMs of the forward and the input gradient run channel-major
 * (matmul.glsl's MM_CT: M the channels, N the pixels), whose stores are
 * coalesced. The fast contract keeps the pixel-major form, the one the
 * cooperative-matrix kernels implement (vk_gen_coopmat.c), and so does
 * MEGANEURA_VK_CONV_CT=0 (to measure it). */
static bool conv_channel_major(const node *n) {
    const char *v = getenv("MEGANEURA_VK_CONV_CT");
    return node_round16(n) == MN_ROUND_NONE && !(v && !strcmp(v, "0"));
}

mn_status vkgen_conv2d(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                       size_t cap) {
    conv_geo c = conv_geo_of(n, in_node(g, n, 0), in_node(g, n, 1), n);
    conv_defs(k, &c);
    const int64_t M = c.N * c.OH * c.OW, N = c.Og, K = c.Cg * c.KH * c.KW;
    if (conv_use_gemm(n, M, N, K)) {
        vk_def(k, "MM_BIAS", "%d", n->nin > 2);
        if (conv_channel_major(n)) { /* A = w: k contiguous; B = im2col(x)^T: consecutive n are consecutive ow */
            vk_def(k, "MM_CT", "1");
            return gemm_emit(k, g, n, caps, conv_pick(caps, MAP_CONV_FWD, N, M, K, c.groups, c.KH * c.KW),
                             MAP_CONV_FWD, N, M, K, K, c.groups, true, false, PX_N, err, cap);
        }
        /* A = im2col(x): consecutive m are consecutive ow; B = w^T: k contiguous */
        return gemm_emit(k, g, n, caps, gemm_pick(caps, M, N, K, c.groups), MAP_CONV_FWD, M, N, K, K, c.groups,
                         false, true, PX_NONE, err, cap);
    }
    if (!vk_loops_fit(caps, (uint64_t)(c.Cg * c.KH * c.KW + c.Cg * c.KH + c.Cg)))
        return vk_loop_fail(g, n, caps, (uint64_t)(c.Cg * c.KH * c.KW + c.Cg * c.KH + c.Cg), err, cap);
    k->tmpl = "conv2d";
    vk_def(k, "CV_BIAS", "%d", n->nin > 2);
    vk_launch_1d(k, caps, (uint64_t)node_numel(n), 64);
    return MN_OK;
}

/* The strided input gradient by stride classes (matmul.glsl MM_SUBPIX):
 * each class of dx pixels (h mod SH, w mod SW) is its own GEMM over only
 * the taps that reach it, so a 3x3 stride-2 gradient multiplies 4 taps
 * (padded from 1 or 2 per side) instead of 9 and a 1x1 stride-2 one only
 * the quarter of dx that is not 0. Strict f32 (the fast contract's
 * kernels keep one class), dilation 1. H200, ResNet-50 at batch 32: 0.8-1.2
 * ms a call before (6.4-8 TFLOP/s, docs/PERF.md run R).
 * MEGANEURA_VK_CONV_SUBPIX=0 keeps one class (to measure it). */
static bool conv_subpix(const node *n, const conv_geo *c) {
    const char *v = getenv("MEGANEURA_VK_CONV_SUBPIX");
    return node_round16(n) == MN_ROUND_NONE && c->sh * c->sw > 1 && c->dh == 1 && c->dw == 1 &&
           !(v && !strcmp(v, "0"));
}

/* (dy [N,O,OH,OW], w) -> dx [N,C,H,W] = node shape. */
mn_status vkgen_conv2d_bwd_input(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                 char *err, size_t cap) {
    conv_geo c = conv_geo_of(n, n, in_node(g, n, 1), in_node(g, n, 0));
    conv_defs(k, &c);
    int64_t M = c.N * c.H * c.W, N = c.Cg, K = c.Og * c.KH * c.KW;
    if (conv_use_gemm(n, M, N, K)) {
        if (conv_channel_major(n) && conv_subpix(n, &c)) {
            /* per class: ceil(H/SH) x ceil(W/SW) pixels, taps ceil(KH/SH) x ceil(KW/SW) */
            const int64_t th = (c.KH + c.sh - 1) / c.sh, tw = (c.KW + c.sw - 1) / c.sw;
            M = c.N * ((c.H + c.sh - 1) / c.sh) * ((c.W + c.sw - 1) / c.sw), K = c.Og * th * tw;
            const int64_t batch = c.groups * c.sh * c.sw;
            vk_def(k, "MM_CT", "1");
            vk_def(k, "MM_SUBPIX", "1");
            return gemm_emit(k, g, n, caps, conv_pick(caps, MAP_CONV_DGRAD, N, M, K, batch, th * tw),
                             MAP_CONV_DGRAD, N, M, K, K, batch, th * tw > 1, false, PX_N, err, cap);
        }
        if (conv_channel_major(n)) { /* A = w viewed [Cg, Og*KH*KW], B = the dy patches, pixels contiguous */
            vk_def(k, "MM_CT", "1");
            return gemm_emit(k, g, n, caps, conv_pick(caps, MAP_CONV_DGRAD, N, M, K, c.groups, c.KH * c.KW),
                             MAP_CONV_DGRAD, N, M, K, K, c.groups, c.KH * c.KW > 1, false,
                             c.sh == 1 && c.sw == 1 ? PX_N : PX_NONE, err, cap);
        }
        /* B = w viewed [Og*KH*KW, Cg]: k runs contiguous over a KHxKW kernel,
         * n over channels (stride KH*KW): k-fast unless the kernel is 1x1 */
        return gemm_emit(k, g, n, caps, gemm_pick(caps, M, N, K, c.groups), MAP_CONV_DGRAD, M, N, K, K, c.groups,
                         false, c.KH * c.KW > 1, PX_NONE, err, cap);
    }
    if (!vk_loops_fit(caps, (uint64_t)(c.Og * c.KH * c.KW + c.Og * c.KH + c.Og)))
        return vk_loop_fail(g, n, caps, (uint64_t)(c.Og * c.KH * c.KW + c.Og * c.KH + c.Og), err, cap);
    k->tmpl = "conv2d_bwd_input";
    vk_launch_1d(k, caps, (uint64_t)node_numel(n), 64);
    return MN_OK;
}

/* (x, dy [N,O,OH,OW]) -> dw [O,Cg,KH,KW] = node shape, or its partial sums
 * over K chunks stacked [P*O,Cg,KH,KW] (wgrad_chunk_of): the GEMM's batch
 * is then (part, group), each part its own run of k, so that a gradient
 * with few output tiles and a long K fills the GPU. */
mn_status vkgen_conv2d_bwd_weight(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                                  char *err, size_t cap) {
    const node *dy = in_node(g, n, 1);
    node w1 = *n; /* one part's shape: dw's */
    w1.shape[0] = dy->shape[1];
    conv_geo c = conv_geo_of(n, in_node(g, n, 0), &w1, dy);
    conv_defs(k, &c);
    const int64_t M = c.Og, N = c.Cg * c.KH * c.KW, K = c.N * c.OH * c.OW;
    const int64_t kc = wgrad_chunk_of(n) > 0 && wgrad_chunk_of(n) < K ? wgrad_chunk_of(n) : K;
    const int64_t parts = (K + kc - 1) / kc;
    vk_def_i(k, "CV_KC", kc);
    vk_def(k, "MM_PARTS", "%lld", (long long)parts);
    vk_def_i(k, "MM_GROUPS", c.groups);
    if (conv_use_gemm(n, M, N, K)) {
        const gemm_cfg t = node_round16(n) == MN_ROUND_NONE
                               ? conv_pick(caps, MAP_CONV_WGRAD, M, N, kc, c.groups * parts, c.KH * c.KW)
                               : gemm_pick(caps, M, N, kc, c.groups * parts);
        return gemm_emit(k, g, n, caps, t, MAP_CONV_WGRAD, M, N, K, kc, c.groups * parts, true, true, PX_K, err,
                         cap);
    }
    /* Direct: one workgroup per dw element (of each part); a tree over 64
     * invocations when the sum is long, else one invocation in the CPU
     * reference's order. */
    k->tmpl = "conv2d_bwd_weight";
    const uint32_t local = kc >= 256 ? 64 : 1;
    uint64_t elems = (uint64_t)node_numel(n), lim = caps->max_groups[0] ? caps->max_groups[0] : 65535;
    uint64_t gx = elems < lim ? elems : lim, gy = cdiv(elems, gx);
    uint64_t limy = caps->max_groups[1] ? caps->max_groups[1] : 65535;
    if (gy > limy) gy = limy;
    k->local[0] = local;
    k->groups[0] = (uint32_t)gx, k->groups[1] = (uint32_t)gy;
    /* per dw element of the invocation's stride: its share of the sum and the tree */
    const uint64_t iters = cdiv(elems, gx * gy) * (cdiv((uint64_t)kc, local) + 7);
    return vk_loops_fit(caps, iters) ? MN_OK : vk_loop_fail(g, n, caps, iters, err, cap);
}

/* ---- max pooling ---------------------------------------------------------- */

/* x [N,C,H,W]; the pool's kernel, stride (0: the kernel) and padding. */
static void pool_defs(vk_kernel *k, const node *n, const node *x, int64_t OH, int64_t OW) {
    const mn_pool_attrs a = pool_attrs_of(n);
    const int64_t kh = a.kernel[0], kw = a.kernel[1];
    vk_def_i(k, "MP_H", x->shape[2]);
    vk_def_i(k, "MP_W", x->shape[3]);
    vk_def_i(k, "MP_OH", OH);
    vk_def_i(k, "MP_OW", OW);
    vk_def_i(k, "MP_KH", kh);
    vk_def_i(k, "MP_KW", kw);
    vk_def_i(k, "MP_SH", a.stride[0] > 0 ? a.stride[0] : kh);
    vk_def_i(k, "MP_SW", a.stride[1] > 0 ? a.stride[1] : kw);
    vk_def_i(k, "MP_PH", a.pad[0]);
    vk_def_i(k, "MP_PW", a.pad[1]);
}

/* Loop iterations of a max-pooling invocation: its window (the forward), or
 * the argmax of every window holding its cell (the backward). */
static uint64_t pool_iterations(const node *n, bool bwd) {
    const mn_pool_attrs pa = pool_attrs_of(n);
    const uint64_t kh = (uint64_t)pa.kernel[0], kw = (uint64_t)pa.kernel[1], win = kh * kw + kh;
    const uint64_t sh = pa.stride[0] > 0 ? (uint64_t)pa.stride[0] : kh, sw = pa.stride[1] > 0 ? (uint64_t)pa.stride[1] : kw;
    if (!bwd) return win;
    const uint64_t wh = cdiv(kh, sh ? sh : 1), ww = cdiv(kw, sw ? sw : 1);
    return wh * ww * (win + 1) + wh;
}

mn_status vkgen_maxpool2d(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err,
                          size_t cap) {
    if (!vk_loops_fit(caps, pool_iterations(n, false)))
        return vk_loop_fail(g, n, caps, pool_iterations(n, false), err, cap);
    pool_defs(k, n, in_node(g, n, 0), n->shape[2], n->shape[3]);
    k->tmpl = "maxpool2d";
    vk_launch_1d(k, caps, (uint64_t)node_numel(n), 64);
    return MN_OK;
}

/* (x, dy [N,C,OH,OW]) -> dx [N,C,H,W]. */
mn_status vkgen_maxpool2d_bwd(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                              char *err, size_t cap) {
    const node *dy = in_node(g, n, 1);
    if (!vk_loops_fit(caps, pool_iterations(n, true)))
        return vk_loop_fail(g, n, caps, pool_iterations(n, true), err, cap);
    pool_defs(k, n, in_node(g, n, 0), dy->shape[2], dy->shape[3]);
    k->tmpl = "maxpool2d_bwd";
    vk_launch_1d(k, caps, (uint64_t)node_numel(n), 64);
    return MN_OK;
}
