/* test_vk_coopmat_spirv.c - the fast contract's cooperative-matrix GEMM
 * kernels (vk_gen_coopmat.c, kernels/matmul_coopmat.glsl) and the SPIR-V
 * pass that turns glslang's NV cooperative matrices into KHR ones (and f16
 * into bf16: vk_spirv_coopmat.c), for a device profile that has them (an
 * H200: Debian's lavapipe has none, so nothing here runs a kernel).
 *
 * For matmuls of every layout (the four transpose combinations, batched, a
 * shared operand, odd sizes, the workloads' skinny shapes), convolutions
 * (forward with bias, both gradients, stride, dilation, groups, 1x1), each tile of
 * the generator's table and a few MEGANEURA_COOPMAT_TILE values, both
 * rounding modes, bf16 and f16, KHR and NV, and a fused epilogue: the
 * kernel is generated, compiled by libshaderc, the NV form (glslang's
 * output) passes Debian's spirv-val, and the rewritten KHR form passes
 * vk_spirv_check_khr (Debian's spirv-val, SPIRV-Tools 2023.1, predates
 * SPV_KHR_cooperative_matrix) and, when MEGANEURA_SPIRV_VAL names a newer
 * spirv-val (2023.4 or later knows both extensions), that one too. Through
 * vk_compile the same kernels come out rewritten. The pass refuses what it
 * cannot type: a fragment used as both A and B, arithmetic on bf16, a
 * cut module. The rewrite and the check are also run on the bytes of every
 * generated module cut and flipped (no crash, an error or a valid module).
 *
 * Does not: run the kernels (bench/bench_gemm.c on the GPU does, against a
 * CPU product).
 */
#include <shaderc/shaderc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/vulkan/vk_codegen.h"
#include "backend/vulkan/vk_spirv.h"
#include "backend/vulkan/vk_util.h"
#include "graph/graph.h"
#include "harness.h"
#include "autodiff/autodiff.h"
#include "kir/kir.h"

static const vk_caps h200 = {.subgroup_size = 32,
                             .max_shared_bytes = 49152,
                             .max_invocations = 1024,
                             .max_groups = {2147483647u, 65535, 65535},
                             .fp16 = true,
                             .bf16 = true,
                             .coopmat = true,
                             .coopmat_f16 = true,
                             .coopmat_bf16 = true,
                             .coopmat_nv_f16 = true,
                             .store16 = true};

static shaderc_compiler_t compiler;
static char spv_path[64];
static int checked_nv, checked_khr, checked_new_val;

static bool write_file(const char *path, const uint32_t *w, size_t n) {
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(w, 4, n, f) == n;
    if (f) ok = fclose(f) == 0 && ok;
    return ok;
}

/* spirv-val (or MEGANEURA_SPIRV_VAL) on w; true if it accepts. */
/* spirv-val runs (package spirv-tools; `make` installs it, scripts/devbin.sh
 * packs it for the GPU machine): checked once in main, so that a missing
 * tool is one clear failure, not one per kernel */
static bool have_spirv_val;

static bool spirv_val(const char *tool, const uint32_t *w, size_t n) {
    if (!write_file(spv_path, w, n)) return false;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --target-env vulkan1.1 %s", tool, spv_path);
    return system(cmd) == 0;
}

static uint32_t *compile(const char *src, const char *label, size_t *n) {
    shaderc_compile_options_t opt = shaderc_compile_options_initialize();
    shaderc_compile_options_set_target_env(opt, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
    shaderc_compile_options_set_optimization_level(opt, shaderc_optimization_level_performance);
    shaderc_compilation_result_t r =
        shaderc_compile_into_spv(compiler, src, strlen(src), shaderc_glsl_compute_shader, label, "main", opt);
    shaderc_compile_options_release(opt);
    uint32_t *w = NULL;
    if (shaderc_result_get_compilation_status(r) != shaderc_compilation_status_success) {
        fprintf(stderr, "---- %s: compile error:\n%s\n", label, shaderc_result_get_error_message(r));
    } else {
        *n = shaderc_result_get_length(r) / 4;
        w = malloc(*n * 4);
        if (w) memcpy(w, shaderc_result_get_bytes(r), *n * 4);
    }
    shaderc_result_release(r);
    return w;
}

/* Compiles the kernel, validates the NV form, rewrites it as the kernel
 * asks and checks the KHR form; then the same through vk_compile. */
static void check_kernel(const vk_kernel *k, const char *what, bool want_khr, bool bf16) {
    char *src = vk_codegen_source(k);
    CHECK_MSG(src != NULL, "%s: no source", what);
    if (!src) return;
    size_t n = 0;
    uint32_t *nv = compile(src, what, &n);
    CHECK_MSG(nv != NULL, "%s: does not compile; source:\n%s", what, src);
    if (!nv) {
        free(src);
        return;
    }
    if (have_spirv_val) {
        CHECK_MSG(spirv_val("spirv-val", nv, n), "%s: spirv-val rejects the NV form", what);
        checked_nv++;
    }
    const bool asks = strstr(k->defines, "#define MN_SPIRV_PASS ") != NULL;
    CHECK_MSG(asks == want_khr, "%s: MN_SPIRV_PASS %s", what, asks ? "set" : "missing");
    if (want_khr) {
        uint32_t *khr = NULL;
        size_t nk = 0;
        char err[512] = "";
        mn_status st = vk_spirv_coopmat_khr(&khr, &nk, nv, n, bf16, err, sizeof err);
        CHECK_MSG(st == MN_OK, "%s: rewrite: %s", what, err);
        if (!st) {
            st = vk_spirv_check_khr(khr, nk, bf16, err, sizeof err);
            CHECK_MSG(st == MN_OK, "%s: check: %s", what, err);
            checked_khr++;
            const char *val = getenv("MEGANEURA_SPIRV_VAL");
            if (val && *val) {
                CHECK_MSG(spirv_val(val, khr, nk), "%s: %s rejects the KHR form", what, val);
                checked_new_val++;
            }
            /* vk_compile applies the same pass (cache bypassed; every
             * fourth kernel: each compile takes a while) */
            uint32_t *via = NULL;
            if (checked_khr % 4 != 1) {
                free(khr);
                free(nv);
                free(src);
                return;
            }
            size_t nv2 = 0;
            bool cached = true;
            setenv("MEGANEURA_NO_KERNEL_CACHE", "1", 1);
            st = vk_compile(&via, &nv2, src, what, &cached, err, sizeof err);
            unsetenv("MEGANEURA_NO_KERNEL_CACHE");
            CHECK_MSG(st == MN_OK && !cached && nv2 == nk && !memcmp(via, khr, nk * 4),
                      "%s: vk_compile gives another module (%s)", what, err);
            free(via);
        }
        free(khr);
    }
    free(nv);
    free(src);
}

static int32_t add_matmul(mn_graph *g, int ra, int rb, int64_t B, int64_t M, int64_t K, int64_t N, bool ta,
                          bool tb) {
    static int seq;
    char na[32], nb[32];
    snprintf(na, sizeof na, "a%d", seq);
    snprintf(nb, sizeof nb, "b%d", seq++);
    int64_t sa[3], sb[3];
    int i = 0;
    if (ra == 3) sa[i++] = B;
    sa[i++] = ta ? K : M;
    sa[i++] = ta ? M : K;
    i = 0;
    if (rb == 3) sb[i++] = B;
    sb[i++] = tb ? N : K;
    sb[i++] = tb ? K : N;
    mn_tensor a, b, y = MN_NONE;
    CHECK_OK(mn_graph_input(g, &a, na, MN_F32, ra, sa), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &b, nb, MN_F32, rb, sb), mn_graph_error(g));
    CHECK_OK(mn_matmul_ex(g, &y, a, b, ta, tb), mn_graph_error(g));
    return y;
}

static const char *round_name(mn_round16 r) { return r == MN_ROUND_BF16 ? "bf16" : "f16"; }

/* One node through the generator with the form and knobs set. */
static void gen_and_check(mn_graph *g, int32_t id, mn_round16 rnd, const char *form, const char *tile,
                          const char *round, bool want_coopmat) {
    node *n = &g->nodes[id];
    n->flags = (n->flags & ~(uint32_t)(NODE_F_ROUND_BF16 | NODE_F_ROUND_F16)) |
               (rnd == MN_ROUND_BF16 ? NODE_F_ROUND_BF16 : NODE_F_ROUND_F16);
    setenv("MEGANEURA_COOPMAT", form, 1);
    if (tile) setenv("MEGANEURA_COOPMAT_TILE", tile, 1);
    else unsetenv("MEGANEURA_COOPMAT_TILE");
    setenv("MEGANEURA_COOPMAT_ROUND", round, 1);
    char what[256], err[512] = "";
    snprintf(what, sizeof what, "%s %%%d [%lld,%lld] %s form=%s tile=%s round=%s", op_table[n->op].name, id,
             (long long)n->shape[0],
             (long long)n->shape[n->rank - 1], round_name(rnd), form, tile ? tile : "auto", round);
    vk_kernel *k = malloc(sizeof *k);
    mn_status st = vk_codegen_node(k, g, id, NULL, &h200, err, sizeof err);
    CHECK_MSG(st == MN_OK, "%s: codegen: %s", what, err);
    if (!st) {
        const bool cm = k->tmpl && !strcmp(k->tmpl, "matmul_coopmat");
        CHECK_MSG(cm == want_coopmat, "%s: template %s", what, k->tmpl ? k->tmpl : "(none)");
        uint32_t inv = k->local[0] * k->local[1] * k->local[2];
        CHECK_MSG(inv >= 32 && inv <= h200.max_invocations && inv % 32 == 0, "%s: %u invocations", what, inv);
        if (cm) check_kernel(k, what, strcmp(form, "nv") != 0, rnd == MN_ROUND_BF16);
        else CHECK_MSG(strstr(k->defines, "#define MM_RND(x) ") != NULL, "%s: the FMA kernel does not round", what);
    }
    free(k);
    unsetenv("MEGANEURA_COOPMAT");
    unsetenv("MEGANEURA_COOPMAT_TILE");
    unsetenv("MEGANEURA_COOPMAT_ROUND");
}

static void test_layouts(void) {
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true;
    int32_t ids[16];
    int ni = 0;
    for (int t = 0; t < 4; t++) ids[ni++] = add_matmul(g, 2, 2, 1, 96, 80, 112, t & 1, t & 2); /* odd tiles */
    ids[ni++] = add_matmul(g, 3, 3, 3, 64, 64, 64, false, false);                             /* batched */
    ids[ni++] = add_matmul(g, 3, 2, 2, 128, 576, 1536, false, true);   /* shared weight, y = x W^T */
    ids[ni++] = add_matmul(g, 2, 2, 1, 127, 61, 93, false, false);     /* nothing a multiple of 4 */
    ids[ni++] = add_matmul(g, 2, 2, 1, 4096, 4096, 4096, false, false); /* the largest tile */
    for (int i = 0; i < ni; i++) {
        gen_and_check(g, ids[i], MN_ROUND_BF16, "auto", NULL, "exact", true);
        gen_and_check(g, ids[i], MN_ROUND_F16, "auto", NULL, i % 2 ? "hw" : "exact", true);
    }
    /* the NV form (f16 only; bf16 falls back to the FMA kernel) and hw bf16 */
    gen_and_check(g, ids[0], MN_ROUND_F16, "nv", NULL, "exact", true);
    gen_and_check(g, ids[7], MN_ROUND_F16, "nv", NULL, "hw", true);
    gen_and_check(g, ids[3], MN_ROUND_BF16, "nv", NULL, "exact", false);
    gen_and_check(g, ids[7], MN_ROUND_BF16, "khr", NULL, "hw", true);
    gen_and_check(g, ids[1], MN_ROUND_BF16, "0", NULL, "exact", false);
    /* tile knobs: each table entry, a 2-stage wide tile, a tiny one */
    static const char *tiles[] = {"128x256x32/64x64/1", "128x128x32/64x64/2", "64x128x32/32x64/2",
                                  "64x64x32/32x32/2", "128x128x64/64x32/1", "32x32x16/16x16/2"};
    for (size_t t = 0; t < MN_ARRAY_LEN(tiles); t++) gen_and_check(g, ids[7], MN_ROUND_BF16, "khr", tiles[t], "exact", true);
    gen_and_check(g, ids[1], MN_ROUND_F16, "khr", "64x64x32/32x32/1", "exact", true);
    /* operands a cast already rounded (session.c round_by_cast): both, or
     * the left one only; a cast to the other type still rounds */
    for (int c = 0; c < 3; c++) {
        mn_tensor a, b, ca, cb, y;
        char na[16], nb[16];
        snprintf(na, sizeof na, "ca%d", c), snprintf(nb, sizeof nb, "cb%d", c);
        CHECK_OK(mn_graph_input(g, &a, na, MN_F32, 2, (int64_t[]){512, 576}), mn_graph_error(g));
        CHECK_OK(mn_graph_input(g, &b, nb, MN_F32, 2, (int64_t[]){1536, 576}), mn_graph_error(g));
        CHECK_OK(mn_cast(g, &ca, a, c == 2 ? MN_F16 : MN_BF16), mn_graph_error(g));
        CHECK_OK(mn_cast(g, &cb, b, MN_BF16), mn_graph_error(g));
        CHECK_OK(mn_matmul_ex(g, &y, ca, c == 1 ? b : cb, false, true), mn_graph_error(g));
        gen_and_check(g, y, MN_ROUND_BF16, "khr", NULL, "exact", true);
        vk_kernel *k = malloc(sizeof *k);
        char err[512] = "";
        setenv("MEGANEURA_COOPMAT", "khr", 1);
        CHECK_OK(vk_codegen_node(k, g, y, NULL, &h200, err, sizeof err), err);
        unsetenv("MEGANEURA_COOPMAT");
        const char *want_a = c == 2 ? "#define CM_EXACT_A 1" : "#define CM_EXACT_A 0";
        const char *want_b = c == 1 ? "#define CM_EXACT_B 1" : "#define CM_EXACT_B 0";
        CHECK_MSG(strstr(k->defines, want_a) && strstr(k->defines, want_b), "cast operands case %d: want %s, %s in\n%s",
                  c, want_a, want_b, k->defines);
        free(k);
    }
    /* packed casts (NODE_F_PACK16, the session's default on Vulkan): the
     * vector path stages their words unconverted (CM_RAW_*), in both forms
     * and types, with one operand packed or both */
    for (int c = 0; c < 3; c++) {
        mn_tensor a, b, ca, cb, y;
        char na[16], nb[16];
        snprintf(na, sizeof na, "pa%d", c), snprintf(nb, sizeof nb, "pb%d", c);
        const mn_dtype dt = c == 1 ? MN_F16 : MN_BF16;
        CHECK_OK(mn_graph_input(g, &a, na, MN_F32, 2, (int64_t[]){512, 576}), mn_graph_error(g));
        CHECK_OK(mn_graph_input(g, &b, nb, MN_F32, 2, (int64_t[]){1536, 576}), mn_graph_error(g));
        CHECK_OK(mn_cast(g, &ca, a, dt), mn_graph_error(g));
        CHECK_OK(mn_cast(g, &cb, b, dt), mn_graph_error(g));
        g->nodes[ca].flags |= NODE_F_PACK16;
        if (c != 2) g->nodes[cb].flags |= NODE_F_PACK16;
        CHECK_OK(mn_matmul_ex(g, &y, ca, cb, false, true), mn_graph_error(g));
        const mn_round16 r = c == 1 ? MN_ROUND_F16 : MN_ROUND_BF16;
        gen_and_check(g, y, r, "khr", NULL, "exact", true);
        if (c == 1) gen_and_check(g, y, r, "nv", NULL, "exact", true);
        vk_kernel *k = malloc(sizeof *k);
        char err[512] = "";
        setenv("MEGANEURA_COOPMAT", "khr", 1);
        CHECK_OK(vk_codegen_node(k, g, y, NULL, &h200, err, sizeof err), err);
        unsetenv("MEGANEURA_COOPMAT");
        char want[32];
        snprintf(want, sizeof want, "#define X0_P16 %d", c == 1 ? 2 : 1);
        CHECK_MSG(strstr(k->defines, want) && (strstr(k->defines, "#define X1_P16") != NULL) == (c != 2),
                  "packed operands case %d: want %s%s in\n%s", c, want, c != 2 ? " and X1_P16" : "", k->defines);
        free(k);
        /* the cast itself: cast16.glsl, never an f32 store */
        k = malloc(sizeof *k);
        CHECK_OK(vk_codegen_node(k, g, ca, NULL, &h200, err, sizeof err), err);
        CHECK_MSG(k->tmpl && !strcmp(k->tmpl, "cast16") && strstr(k->defines, "#define Y_P16"),
                  "packed cast case %d: template %s", c, k->tmpl ? k->tmpl : "(none)");
        free(k);
    }
    /* a small product stays on the FMA kernel */
    int32_t small = add_matmul(g, 2, 2, 1, 8, 8, 8, false, false);
    gen_and_check(g, small, MN_ROUND_BF16, "auto", NULL, "exact", false);
    mn_graph_destroy(g);
}

/* The convolutions' implicit GEMMs on cooperative matrices: forward (with
 * and without bias), input and weight gradients, stride, padding,
 * dilation, groups; a thin one stays on the FMA kernel. */
static void add_conv(mn_graph *g, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t KH,
                     const mn_conv2d_params *p, bool bias, int32_t ids[3]) {
    static int seq;
    char nx[32], nw[32], nb[32], ndy[32];
    snprintf(nx, sizeof nx, "cx%d", seq), snprintf(nw, sizeof nw, "cw%d", seq);
    snprintf(nb, sizeof nb, "cb%d", seq), snprintf(ndy, sizeof ndy, "cdy%d", seq++);
    const int64_t groups = p->groups ? p->groups : 1;
    mn_tensor x, w, b = MN_NONE, y = MN_NONE, dy;
    CHECK_OK(mn_graph_input(g, &x, nx, MN_F32, 4, (int64_t[]){N, C, H, W}), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &w, nw, MN_F32, 4, (int64_t[]){O, C / groups, KH, KH}), mn_graph_error(g));
    if (bias) CHECK_OK(mn_graph_input(g, &b, nb, MN_F32, 1, (int64_t[]){O}), mn_graph_error(g));
    CHECK_OK(mn_conv2d(g, &y, x, w, b, p), mn_graph_error(g));
    const node yn = g->nodes[y];
    CHECK_OK(mn_graph_input(g, &dy, ndy, MN_F32, 4, yn.shape), mn_graph_error(g));
    node q; /* the two gradient helpers, as autodiff builds them */
    memset(&q, 0, sizeof q);
    q.op = OP_CONV2D_BWD_INPUT, q.nin = 2, q.in[0] = dy, q.in[1] = w, q.rank = 4;
    memcpy(q.ip, yn.ip, sizeof q.ip);
    memcpy(q.shape, g->nodes[x].shape, sizeof q.shape);
    CHECK_OK(graph_add(g, &ids[1], &q), g->err);
    q.op = OP_CONV2D_BWD_WEIGHT, q.in[0] = x, q.in[1] = dy;
    memcpy(q.shape, g->nodes[w].shape, sizeof q.shape);
    CHECK_OK(graph_add(g, &ids[2], &q), g->err);
    ids[0] = y;
}

static void test_conv(void) {
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true;
    int32_t a[3], b[3], c[3];
    add_conv(g, 2, 32, 16, 16, 48, 3, &(mn_conv2d_params){{1, 1}, {1, 1}, {1, 1}, 1}, true, a);
    add_conv(g, 2, 32, 15, 17, 64, 3, &(mn_conv2d_params){{2, 2}, {1, 1}, {2, 1}, 2}, false, b);
    add_conv(g, 4, 64, 14, 14, 128, 1, &(mn_conv2d_params){{1, 1}, {0, 0}, {1, 1}, 1}, true, c); /* 1x1 */
    for (int i = 0; i < 3; i++) {
        gen_and_check(g, a[i], MN_ROUND_BF16, "auto", NULL, "exact", true);
        gen_and_check(g, b[i], i == 1 ? MN_ROUND_F16 : MN_ROUND_BF16, "auto", NULL, i == 2 ? "hw" : "exact", true);
        gen_and_check(g, c[i], MN_ROUND_F16, "auto", NULL, "exact", true);
    }
    gen_and_check(g, a[0], MN_ROUND_F16, "nv", NULL, "exact", true);
    /* packed cast operands through the convolutions' maps (decoded by X0 /
     * X1, converted exactly): each of the three GEMMs */
    for (int i = 0; i < 3; i++) {
        node *n = &g->nodes[a[i]];
        int32_t keep[2] = {n->in[0], n->in[1]};
        for (int j = 0; j < 2; j++) {
            mn_tensor ct;
            CHECK_OK(mn_cast(g, &ct, keep[j], MN_BF16), mn_graph_error(g));
            g->nodes[ct].flags |= NODE_F_PACK16;
            g->nodes[a[i]].in[j] = ct;
        }
        gen_and_check(g, a[i], MN_ROUND_BF16, "khr", NULL, "exact", true);
        g->nodes[a[i]].in[0] = keep[0], g->nodes[a[i]].in[1] = keep[1];
    }
    /* weight gradients split into partial sums (autodiff's wgrad_chunk):
     * a batch of (part, group), each part its own run of k, the last one
     * short (K = 4 * 24 * 24 = 2304 in chunks of 1024; grouped too) or
     * all parts whole (chunks of 768: every slice full, CM_EVEN_K) */
    static const struct {
        int64_t groups, chunk;
    } splits[] = {{1, 1024}, {2, 1024}, {1, 768}};
    for (size_t i = 0; i < MN_ARRAY_LEN(splits); i++) {
        int32_t d[3];
        add_conv(g, 4, 32, 24, 24, 64, 3, &(mn_conv2d_params){{1, 1}, {1, 1}, {1, 1}, splits[i].groups}, false, d);
        node q = g->nodes[d[2]];
        const int64_t K = 4 * 24 * 24, parts = (K + splits[i].chunk - 1) / splits[i].chunk;
        q.shape[0] *= parts;
        wgrad_chunk_set(&q, splits[i].chunk);
        int32_t id;
        CHECK_OK(graph_add(g, &id, &q), g->err);
        gen_and_check(g, id, i == 1 ? MN_ROUND_F16 : MN_ROUND_BF16, "auto", NULL, "exact", true);
        vk_kernel *k = malloc(sizeof *k);
        char err[512] = "", want[64], even[32];
        CHECK_OK(vk_codegen_node(k, g, id, NULL, &h200, err, sizeof err), err);
        snprintf(want, sizeof want, "#define CM_KC %lldu", (long long)splits[i].chunk);
        snprintf(even, sizeof even, "#define CM_EVEN_K %d", K % splits[i].chunk == 0);
        CHECK_MSG(strstr(k->defines, want) && strstr(k->defines, even), "split %zu: want %s, %s: %s", i, want, even,
                  k->defines);
        CHECK_MSG(k->groups[2] == (uint32_t)(parts * splits[i].groups), "split %zu: %u batch groups", i,
                  k->groups[2]);
        free(k);
    }
    int32_t thin[3]; /* depthwise: N = 1 output channel per group */
    add_conv(g, 1, 8, 7, 7, 8, 3, &(mn_conv2d_params){{1, 1}, {1, 1}, {1, 1}, 8}, false, thin);
    gen_and_check(g, thin[0], MN_ROUND_BF16, "auto", NULL, "exact", false);
    mn_graph_destroy(g);
}

/* Bad knob values fail code generation naming the variable. */
static void test_knob_errors(void) {
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true;
    int32_t id = add_matmul(g, 2, 2, 1, 256, 256, 256, false, false);
    g->nodes[id].flags |= NODE_F_ROUND_BF16;
    static const struct {
        const char *var, *val;
    } bad[] = {{"MEGANEURA_COOPMAT", "yes"},         {"MEGANEURA_COOPMAT_ROUND", "nearest"},
               {"MEGANEURA_COOPMAT_TILE", "128x128"}, {"MEGANEURA_COOPMAT_TILE", "128x128x32/48x64/2"},
               {"MEGANEURA_COOPMAT_TILE", "128x128x32/64x64/3"}, {"MEGANEURA_COOPMAT_TILE", "256x256x64/64x64/2"}};
    for (size_t i = 0; i < MN_ARRAY_LEN(bad); i++) {
        setenv(bad[i].var, bad[i].val, 1);
        vk_kernel *k = malloc(sizeof *k);
        char err[512] = "";
        mn_status st = vk_codegen_node(k, g, id, NULL, &h200, err, sizeof err);
        CHECK_MSG(st == MN_E_INVALID && strstr(err, bad[i].var), "%s=%s: %s (%s)", bad[i].var, bad[i].val,
                  mn_status_str(st), err);
        free(k);
        unsetenv(bad[i].var);
    }
    mn_graph_destroy(g);
}

/* A matmul with its epilogue (bias, ReLU) as one coopmat kernel. */
static void test_fused(void) {
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true;
    mn_tensor x, w, b, y, z, r;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){256, 192}), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &w, "w", MN_F32, 2, (int64_t[]){192, 320}), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &b, "b", MN_F32, 1, (int64_t[]){320}), mn_graph_error(g));
    CHECK_OK(mn_matmul(g, &y, x, w), mn_graph_error(g));
    CHECK_OK(mn_add(g, &z, y, b), mn_graph_error(g));
    CHECK_OK(mn_relu(g, &r, z), mn_graph_error(g));
    for (int bf = 0; bf < 2; bf++) {
        g->nodes[y].flags = (g->nodes[y].flags & ~(uint32_t)(NODE_F_ROUND_BF16 | NODE_F_ROUND_F16)) |
                            (bf ? NODE_F_ROUND_BF16 : NODE_F_ROUND_F16);
        vk_kernel *k = malloc(sizeof *k);
        int32_t members[2] = {y, z}, ext[KIR_MAX_INPUTS];
        int next = 0;
        char err[512] = "";
        mn_status st = vk_codegen_fused(k, g, r, members, 2, ext, &next, NULL, &h200, err, sizeof err);
        CHECK_MSG(st == MN_OK, "fused: %s", err);
        if (!st) {
            CHECK_MSG(k->tmpl && !strcmp(k->tmpl, "matmul_coopmat") && strstr(k->defines, "MM_EPILOGUE"),
                      "fused: not a coopmat kernel with an epilogue");
            CHECK_MSG(next == 3 && ext[0] == x && ext[1] == w && ext[2] == b, "fused: inputs");
            check_kernel(k, bf ? "fused bf16" : "fused f16", true, bf);
        }
        free(k);
    }
    mn_graph_destroy(g);
}

/* A matmul whose epilogue is a packed cast's group (kir fuse_store16): the
 * kernel stores 16-bit values (Y_S16, 16-bit storage) beside the NV/KHR
 * cooperative matrices; refused on a device without 16-bit storage. */
static void test_fused_store16(void) {
    for (int bf = 0; bf < 2; bf++) {
        mn_graph *g;
        mn_graph_create(&g);
        g->raw_ids = true;
        mn_tensor x, w, b, y, z, c;
        CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){256, 192}), mn_graph_error(g));
        CHECK_OK(mn_graph_input(g, &w, "w", MN_F32, 2, (int64_t[]){192, 320}), mn_graph_error(g));
        CHECK_OK(mn_graph_input(g, &b, "b", MN_F32, 1, (int64_t[]){320}), mn_graph_error(g));
        CHECK_OK(mn_matmul(g, &y, x, w), mn_graph_error(g));
        CHECK_OK(mn_add(g, &z, y, b), mn_graph_error(g));
        CHECK_OK(mn_cast(g, &c, z, bf ? MN_BF16 : MN_F16), mn_graph_error(g));
        g->nodes[c].flags |= NODE_F_PACK16;
        g->nodes[y].flags |= bf ? NODE_F_ROUND_BF16 : NODE_F_ROUND_F16;
        for (int dev = 0; dev < 2; dev++) {
            vk_caps caps = h200;
            caps.store16 = dev == 0;
            vk_kernel *k = malloc(sizeof *k);
            int32_t members[2] = {y, z}, ext[KIR_MAX_INPUTS];
            int next = 0;
            char err[512] = "", what[64];
            snprintf(what, sizeof what, "fused %s cast stored 16-bit", bf ? "bf16" : "f16");
            mn_status st = vk_codegen_fused(k, g, c, members, 2, ext, &next, NULL, &caps, err, sizeof err);
            if (dev == 1) {
                CHECK_MSG(st == MN_E_UNSUPPORTED && strstr(err, "16-bit storage"),
                          "%s: without 16-bit storage: status %d (%s)", what, (int)st, err);
            } else {
                CHECK_MSG(st == MN_OK, "%s: %s", what, err);
                if (!st) {
                    CHECK_MSG(k->tmpl && !strcmp(k->tmpl, "matmul_coopmat") && strstr(k->defines, "MM_EPILOGUE") &&
                                  strstr(k->defines, "Y_SET16(i, v") && strstr(k->defines, "#define Y_S16 ") &&
                                  !strstr(k->defines, "#define Y_P16 "),
                              "%s: not a coopmat kernel whose epilogue stores 16-bit values:\n%s", what, k->defines);
                    check_kernel(k, what, true, bf);
                }
            }
            free(k);
        }
        mn_graph_destroy(g);
    }
}

/* ---- the pass's refusals ------------------------------------------------ */

static const char *head =
    "#version 450\n#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
    "#extension GL_NV_cooperative_matrix : require\nlayout(local_size_x = 32) in;\n"
    "layout(std430, binding = 0) buffer B { float d[]; } b;\nshared uvec2 sm[512];\nconst uint S = 3;\n";

static void expect_refused(const char *body, bool bf16, const char *want) {
    char src[4096];
    snprintf(src, sizeof src, "%s%s", head, body);
    size_t n = 0;
    uint32_t *w = compile(src, "refusal", &n);
    CHECK_MSG(w != NULL, "refusal case does not compile:\n%s", src);
    if (!w) return;
    uint32_t *out = NULL;
    size_t no = 0;
    char err[512] = "";
    mn_status st = vk_spirv_coopmat_khr(&out, &no, w, n, bf16, err, sizeof err);
    CHECK_MSG(st != MN_OK && strstr(err, want), "want a refusal mentioning '%s', got %s: %s", want, mn_status_str(st),
              err);
    free(out);
    free(w);
}

static void test_refusals(void) {
    /* one fragment as A and as B */
    expect_refused("void main() { fcoopmatNV<16, S, 16, 16> a; fcoopmatNV<32, S, 16, 16> c = "
                   "fcoopmatNV<32, S, 16, 16>(0.0); coopMatLoadNV(a, sm, 0, 4, false); c = coopMatMulAddNV(a, a, c); "
                   "coopMatStoreNV(c, b.d, 0, 16, false); }",
                   false, "both as matrix A and matrix B");
    /* arithmetic on a 16-bit float, which bf16 does not allow */
    expect_refused("void main() { fcoopmatNV<16, S, 16, 16> a, bb; fcoopmatNV<32, S, 16, 16> c = "
                   "fcoopmatNV<32, S, 16, 16>(0.0); float16_t h = float16_t(b.d[1]) * float16_t(b.d[2]); "
                   "sm[0] = uvec2(packFloat2x16(f16vec2(h, h))); coopMatLoadNV(a, sm, 0, 4, false); "
                   "coopMatLoadNV(bb, sm, 0, 4, true); c = coopMatMulAddNV(a, bb, c); "
                   "coopMatStoreNV(c, b.d, 0, 16, false); }",
                   true, "computes on a 16-bit float");
    /* no cooperative matrix at all */
    expect_refused("void main() { b.d[0] = 1.0; }", false, "no NV cooperative matrix");
    uint32_t junk[3] = {0x07230203u, 0, 0};
    uint32_t *out = NULL;
    size_t no = 0;
    char err[256];
    CHECK(vk_spirv_coopmat_khr(&out, &no, junk, 3, false, err, sizeof err) != MN_OK);
    CHECK(vk_spirv_check_khr(junk, 3, false, err, sizeof err) != MN_OK);
}

/* Cut and flipped modules: the pass and the check return (an error or a
 * module the check accepts), never crash. */
static void test_hostile_modules(void) {
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true;
    int32_t id = add_matmul(g, 2, 2, 1, 256, 256, 256, false, false);
    g->nodes[id].flags |= NODE_F_ROUND_BF16;
    vk_kernel *k = malloc(sizeof *k);
    char err[512];
    CHECK_OK(vk_codegen_node(k, g, id, NULL, &h200, err, sizeof err), err);
    char *src = vk_codegen_source(k);
    size_t n = 0;
    uint32_t *w = src ? compile(src, "hostile", &n) : NULL;
    CHECK(w != NULL);
    uint64_t rng = 12345;
    int accepted = 0, refused = 0;
    for (int trial = 0; w && trial < 400; trial++) {
        uint32_t *c = malloc(n * 4);
        memcpy(c, w, n * 4);
        size_t len = n;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        if (trial % 4 == 0) len = 1 + (size_t)(rng >> 33) % n;
        else c[5 + (rng >> 33) % (n - 5)] ^= 1u << ((rng >> 20) % 32);
        uint32_t *out = NULL;
        size_t no = 0;
        if (vk_spirv_coopmat_khr(&out, &no, c, len, true, err, sizeof err) == MN_OK) {
            accepted++;
            (void)vk_spirv_check_khr(out, no, true, err, sizeof err);
        } else {
            refused++;
        }
        (void)vk_spirv_check_khr(c, len, true, err, sizeof err);
        free(out);
        free(c);
    }
    CHECK_MSG(refused > 0, "no cut or flipped module was refused (%d accepted)", accepted);
    free(w);
    free(src);
    free(k);
    mn_graph_destroy(g);
}

/* ---- attention on cooperative matrices (attention_coopmat.glsl) ---------- */

/* q [B,Hq,T,D], k, v [B,Hkv,Tk,D] params -> attention -> sum: the forward
 * and, from autodiff, the backward's lse, dq and dk/dv nodes. */
static mn_graph *attn_graph(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t Tk, int64_t D, bool causal,
                            int64_t window) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_init un = {MN_INIT_UNIFORM, -1.0f, 1.0f};
    mn_tensor q, k, v, y, loss;
    CHECK_OK(mn_graph_param(g, &q, "q", 4, (int64_t[]){B, Hq, T, D}, un), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &k, "k", 4, (int64_t[]){B, Hkv, Tk, D}, un), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &v, "v", 4, (int64_t[]){B, Hkv, Tk, D}, un), mn_graph_error(g));
    mn_attention_params p = {causal, window, 0.0f};
    CHECK_OK(mn_attention(g, &y, q, k, v, MN_NONE, &p), mn_graph_error(g));
    CHECK_OK(mn_sum(g, &loss, y, MN_ALL_AXES, false), mn_graph_error(g));
    CHECK_OK(mn_graph_loss(g, loss), mn_graph_error(g));
    int32_t *grads = NULL;
    CHECK_OK(autodiff_build(g, g->loss, MN_NONE, &grads), mn_graph_error(g));
    free(grads);
    return g;
}

static bool is_attention(op_id op) {
    return op == OP_ATTENTION || op == OP_ATTENTION_LSE || op == OP_ATTENTION_BWD_Q || op == OP_ATTENTION_BWD_KV;
}

/* Every attention node of each shape, bf16 and f16, KHR and NV, the table's
 * configuration and the knob's: the tensor-core kernel, compiled and
 * validated; in strict precision (no rounding) and where the knob asks for
 * the FMA kernel, not it. */
static void test_attention(void) {
    static const struct {
        int64_t B, Hq, Hkv, T, Tk, D;
        bool causal;
        int64_t window;
    } shapes[] = {
        {2, 9, 3, 512, 512, 64, true, 0},  /* SmolLM2's heads */
        {1, 6, 6, 80, 80, 64, false, 0},   /* a partial block */
        {1, 3, 1, 136, 136, 32, true, 48}, /* a window, D 32 */
        {1, 2, 2, 64, 77, 128, false, 0},  /* cross-attention, D 128 */
    };
    static const char *const cfg[] = {NULL, "2x32", "4x64"};
    int seen[4] = {0};
    for (size_t si = 0; si < MN_ARRAY_LEN(shapes); si++) {
        mn_graph *g = attn_graph(shapes[si].B, shapes[si].Hq, shapes[si].Hkv, shapes[si].T, shapes[si].Tk,
                                 shapes[si].D, shapes[si].causal, shapes[si].window);
        for (int32_t id = 0; id < g->n; id++) {
            node *n = &g->nodes[id];
            if (!is_attention(n->op)) continue;
            for (int variant = 0; variant < 6; variant++) {
                /* 0..2: bf16 KHR with each configuration; 3: f16 KHR; 4: f16 NV without prefetching; 5: strict */
                const mn_round16 rnd = variant == 5 ? MN_ROUND_NONE : variant >= 3 ? MN_ROUND_F16 : MN_ROUND_BF16;
                const char *form = variant == 4 ? "nv" : "auto", *c = variant < 3 ? cfg[variant] : NULL;
                /* 4x64 does not fit 48 KiB at D 128, nor for dk/dv */
                if (c && !strcmp(c, "4x64") && (shapes[si].D == 128 || n->op == OP_ATTENTION_BWD_KV)) continue;
                n->flags &= ~(uint32_t)(NODE_F_ROUND_BF16 | NODE_F_ROUND_F16);
                if (rnd != MN_ROUND_NONE) n->flags |= rnd == MN_ROUND_BF16 ? NODE_F_ROUND_BF16 : NODE_F_ROUND_F16;
                setenv("MEGANEURA_COOPMAT", form, 1);
                if (c) setenv("MEGANEURA_ATTN_COOPMAT", c, 1);
                if (variant == 4) setenv("MEGANEURA_ATTN_PREFETCH", "0", 1); /* the kernel without the next tile's reads ahead */
                char what[256], err[512] = "";
                snprintf(what, sizeof what, "%s %%%d shape %zu %s form=%s cfg=%s", op_table[n->op].name, id, si,
                         rnd == MN_ROUND_NONE ? "strict" : round_name(rnd), form, c ? c : "table");
                vk_kernel *k = calloc(1, sizeof *k);
                mn_status st = vk_codegen_node(k, g, id, NULL, &h200, err, sizeof err);
                CHECK_MSG(st == MN_OK, "%s: codegen: %s", what, err);
                const bool cm = !st && k->tmpl && !strcmp(k->tmpl, "attention_coopmat");
                CHECK_MSG(st || cm == (rnd != MN_ROUND_NONE), "%s: template %s", what, k->tmpl ? k->tmpl : "(none)");
                if (cm) {
                    check_kernel(k, what, variant != 4, rnd == MN_ROUND_BF16);
                    seen[n->op == OP_ATTENTION ? 0 : n->op == OP_ATTENTION_LSE ? 1 : n->op == OP_ATTENTION_BWD_Q ? 2 : 3]++;
                }
                /* the FMA tile kernel where the knob asks for it */
                if (rnd != MN_ROUND_NONE && variant == 3) {
                    setenv("MEGANEURA_ATTN", "tiles", 1);
                    st = vk_codegen_node(k, g, id, NULL, &h200, err, sizeof err);
                    CHECK_MSG(st == MN_OK && k->tmpl && strcmp(k->tmpl, "attention_coopmat") != 0,
                              "%s: MEGANEURA_ATTN=tiles gives %s (%s)", what, k->tmpl ? k->tmpl : "(none)", err);
                    unsetenv("MEGANEURA_ATTN");
                }
                free(k);
                unsetenv("MEGANEURA_COOPMAT");
                unsetenv("MEGANEURA_ATTN_COOPMAT");
                unsetenv("MEGANEURA_ATTN_PREFETCH");
            }
        }
        mn_graph_destroy(g);
    }
    CHECK_MSG(seen[0] && seen[1] && seen[2] && seen[3], "attention kernels: fwd %d, lse %d, dq %d, dk/dv %d", seen[0],
              seen[1], seen[2], seen[3]);
}

/* The tensor-core attention's knobs: a bad value, a configuration that does
 * not fit, and MEGANEURA_ATTN=coopmat where the kernel cannot run are
 * errors that name them. */
static void test_attention_knobs(void) {
    mn_graph *g = attn_graph(1, 2, 2, 64, 64, 64, true, 0);
    int32_t fwd = -1;
    for (int32_t id = 0; id < g->n; id++)
        if (g->nodes[id].op == OP_ATTENTION) fwd = id;
    CHECK(fwd >= 0);
    static const struct {
        const char *var, *val, *want;
        bool rounded;
    } cases[] = {
        {"MEGANEURA_ATTN_COOPMAT", "4x65", "MEGANEURA_ATTN_COOPMAT='4x65'", true},
        {"MEGANEURA_ATTN_COOPMAT", "x", "want SxN", true},
        {"MEGANEURA_ATTN_COOPMAT", "16x256", "more shared memory", true},
        {"MEGANEURA_ATTN", "coopmat", "not rounded", false},
        {"MEGANEURA_ATTN", "tensor", "want auto, rows, tiles or coopmat", true},
    };
    for (size_t i = 0; fwd >= 0 && i < MN_ARRAY_LEN(cases); i++) {
        node *n = &g->nodes[fwd];
        n->flags &= ~(uint32_t)(NODE_F_ROUND_BF16 | NODE_F_ROUND_F16);
        if (cases[i].rounded) n->flags |= NODE_F_ROUND_BF16;
        setenv(cases[i].var, cases[i].val, 1);
        vk_kernel *k = calloc(1, sizeof *k);
        char err[512] = "";
        mn_status st = vk_codegen_node(k, g, fwd, NULL, &h200, err, sizeof err);
        CHECK_MSG(st != MN_OK && strstr(err, cases[i].want), "%s=%s: status %d, '%s' (want '%s')", cases[i].var,
                  cases[i].val, (int)st, err, cases[i].want);
        free(k);
        unsetenv(cases[i].var);
    }
    mn_graph_destroy(g);
}

int main(void) {
    snprintf(spv_path, sizeof spv_path, "/tmp/mn_coopmat_%d.spv", (int)getpid());
    compiler = shaderc_compiler_initialize();
    CHECK(compiler != NULL);
    have_spirv_val = system("spirv-val --version > /dev/null 2>&1") == 0;
    CHECK_MSG(have_spirv_val, "spirv-val is not on PATH (Debian package spirv-tools): the NV forms go unvalidated");
    test_layouts();
    test_conv();
    test_knob_errors();
    test_fused();
    test_fused_store16();
    test_attention();
    test_attention_knobs();
    test_refusals();
    test_hostile_modules();
    shaderc_compiler_release(compiler);
    unlink(spv_path);
    printf("%d coopmat kernels: NV form spirv-val'd, %d KHR forms checked%s%s\n", checked_nv, checked_khr,
           checked_new_val ? ", and by MEGANEURA_SPIRV_VAL: " : "", checked_new_val ? getenv("MEGANEURA_SPIRV_VAL") : "");
    return th_finish("test_vk_coopmat_spirv");
}
