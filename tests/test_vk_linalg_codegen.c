/* test_vk_linalg_codegen.c - the Vulkan generators of vk_gen_linalg.c
 * (matmul, conv2d and its gradients, maxpool2d and its backward) produce
 * GLSL that compiles with libshaderc and SPIR-V that spirv-val accepts.
 *
 * For small graphs of each op (matmul: the four transpose combinations,
 * batched, a shared operand on either side, odd and tile-multiple sizes;
 * conv: stride, padding, dilation, groups, bias, depthwise, both the direct
 * and the implicit-GEMM paths; pools with and without overlap or padding),
 * every non-source node is generated for three device profiles (an H200, a
 * lavapipe-like CPU device, and a tiny device whose group limits force the
 * kernels' grid-stride loops), compiled for Vulkan 1.1 and validated. The
 * launch is checked against the profile's limits.
 *
 * Does not: run the kernels (tests/test_vulkan_ops.c compares them with the
 * CPU backend on a device).
 */
#include <shaderc/shaderc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/vulkan/vk_codegen.h"
#include "graph/graph.h"
#include "harness.h"
#include "memplan/memplan.h"

typedef struct profile {
    const char *name;
    vk_caps caps;
} profile;

static const profile profiles[] = {
    {"h200", {.subgroup_size = 32, .max_shared_bytes = 49152, .max_invocations = 1024, .max_groups = {2147483647u, 65535, 65535}}},
    {"lavapipe", {.subgroup_size = 8, .max_shared_bytes = 32768, .max_invocations = 1024, .max_groups = {65535, 65535, 65535}, .cpu_device = true}},
    {"tiny", {.subgroup_size = 32, .max_shared_bytes = 16384, .max_invocations = 128, .max_groups = {3, 65535, 2}}},
};

static shaderc_compiler_t compiler;
static char spv_path[64];
static int kernels_checked;

/* Value of "#define NAME v" in the kernel's defines, or -1. */
static long define_value(const vk_kernel *k, const char *name) {
    char pat[64];
    snprintf(pat, sizeof pat, "#define %s ", name);
    const char *p = strstr(k->defines, pat);
    return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* Compiles src and runs spirv-val on the result; returns true on success. */
static bool compile_and_validate(const char *src, const char *label) {
    shaderc_compile_options_t opt = shaderc_compile_options_initialize();
    shaderc_compile_options_set_target_env(opt, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
    shaderc_compile_options_set_optimization_level(opt, shaderc_optimization_level_performance);
    shaderc_compilation_result_t r =
        shaderc_compile_into_spv(compiler, src, strlen(src), shaderc_glsl_compute_shader, label, "main", opt);
    shaderc_compile_options_release(opt);
    bool ok = shaderc_result_get_compilation_status(r) == shaderc_compilation_status_success;
    if (!ok) {
        fprintf(stderr, "---- %s: compile error:\n%s\n---- source:\n%s\n", label, shaderc_result_get_error_message(r),
                src);
    } else {
        FILE *f = fopen(spv_path, "wb");
        size_t len = shaderc_result_get_length(r);
        ok = f && fwrite(shaderc_result_get_bytes(r), 1, len, f) == len;
        if (f) ok = fclose(f) == 0 && ok;
        char cmd[160];
        snprintf(cmd, sizeof cmd, "spirv-val --target-env vulkan1.1 %s", spv_path);
        if (ok && system(cmd) != 0) {
            fprintf(stderr, "---- %s: spirv-val rejected the module; source:\n%s\n", label, src);
            ok = false;
        }
    }
    shaderc_result_release(r);
    return ok;
}

/* Generates, compiles and validates every non-source node of g for every
 * profile. */
static void check_graph(mn_graph *g, const char *label) {
    int32_t *order = malloc((size_t)g->n * sizeof *order);
    uint8_t *live = malloc((size_t)g->n);
    int32_t norder = 0;
    for (int32_t i = 0; i < g->n; i++) {
        live[i] = 1;
        if (!op_is_source(g->nodes[i].op)) order[norder++] = i;
    }
    memplan mp;
    char err[256] = "";
    memplan_options mo = {4, false, 0, NULL, NULL, 0};
    CHECK_OK(memplan_build(&mp, g, order, norder, live, &mo, err, sizeof err), err);
    for (int32_t oi = 0; oi < norder; oi++) {
        const int32_t id = order[oi];
        const node *n = &g->nodes[id];
        for (size_t p = 0; p < MN_ARRAY_LEN(profiles); p++) {
            const vk_caps *caps = &profiles[p].caps;
            char what[160];
            snprintf(what, sizeof what, "%s: %s (%%%d) on %s", label, op_table[n->op].name, id, profiles[p].name);
            vk_kernel k;
            mn_status st = vk_codegen_node(&k, g, id, &mp, caps, err, sizeof err);
            CHECK_MSG(st == MN_OK, "%s: codegen: %s", what, err);
            if (st) continue;
            CHECK_MSG(k.tmpl != NULL, "%s: no template", what);
            if (!k.tmpl) continue;
            uint32_t inv = k.local[0] * k.local[1] * k.local[2];
            CHECK_MSG(inv >= 1 && inv <= caps->max_invocations, "%s: %u invocations", what, inv);
            for (int d = 0; d < 3; d++)
                CHECK_MSG(k.groups[d] >= 1 && k.groups[d] <= caps->max_groups[d], "%s: groups[%d] = %u", what, d,
                          k.groups[d]);
            long bm = define_value(&k, "MM_BM"), bn = define_value(&k, "MM_BN"), bk = define_value(&k, "MM_BK");
            if (bm > 0) { /* per K split two buffers of both tiles (padded rows); the split sums */
                long ks = define_value(&k, "MM_KS"), tm = define_value(&k, "MM_TM"), tn = define_value(&k, "MM_TN");
                long per_split = (bm / tm) * (bn / tn);
                long bytes = ks * 2 * bk * (bm + 4 + bn + 4) * 4 + (ks - 1) * per_split * 16;
                CHECK_MSG(ks >= 1 && per_split * ks == (long)inv && (bm * bk) % per_split == 0 &&
                              (bn * bk) % per_split == 0,
                          "%s: %u invocations do not fit the %ldx%ldx%ld tiles", what, inv, bm, bn, bk);
                CHECK_MSG(bytes <= (long)caps->max_shared_bytes, "%s: %ld bytes of shared memory", what, bytes);
            }
            char *src = vk_codegen_source(&k);
            CHECK_MSG(src != NULL, "%s: no source", what);
            if (!src) continue;
            CHECK_MSG(compile_and_validate(src, what), "%s: compile/validate", what);
            kernels_checked++;
            free(src);
        }
    }
    memplan_free(&mp);
    free(order);
    free(live);
}

/* ---- graphs ---------------------------------------------------------------- */

static mn_tensor input(mn_graph *g, const char *name, int rank, const int64_t *shape) {
    mn_tensor t = MN_NONE;
    CHECK_OK(mn_graph_input(g, &t, name, MN_F32, rank, shape), mn_graph_error(g));
    return t;
}

static void add_matmul(mn_graph *g, int ra, int rb, int64_t B, int64_t M, int64_t K, int64_t N, bool ta,
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
    mn_tensor a = input(g, na, ra, sa), b = input(g, nb, rb, sb), y;
    CHECK_OK(mn_matmul_ex(g, &y, a, b, ta, tb), mn_graph_error(g));
}

static void test_matmul(void) {
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true; /* node-level test: handles are node indices */
    for (int t = 0; t < 4; t++) add_matmul(g, 2, 2, 1, 7, 13, 5, t & 1, t & 2);
    for (int t = 0; t < 4; t++) add_matmul(g, 3, 3, 3, 65, 129, 33, t & 1, t & 2); /* batched */
    add_matmul(g, 3, 2, 4, 7, 13, 5, false, false);  /* shared weight */
    add_matmul(g, 3, 2, 4, 7, 13, 5, false, true);   /* shared weight, transposed */
    add_matmul(g, 2, 3, 4, 7, 13, 5, true, false);   /* shared left operand */
    add_matmul(g, 2, 2, 1, 1, 1, 1, false, false);   /* 1x1x1 */
    add_matmul(g, 2, 2, 1, 65, 129, 33, false, false);
    add_matmul(g, 2, 2, 1, 128, 64, 32, false, false); /* tile multiples */
    add_matmul(g, 2, 2, 1, 4096, 4096, 4096, false, false);
    add_matmul(g, 2, 2, 1, 4096, 4096, 4096, true, true);
    add_matmul(g, 2, 2, 1, 1, 4096, 512, false, true); /* a matrix-vector product */
    add_matmul(g, 3, 3, 70000, 2, 3, 2, false, false); /* more batches than groups.z allows */
    add_matmul(g, 2, 2, 1, 64, 784, 128, false, false); /* K splits */
    add_matmul(g, 2, 2, 1, 33, 1000, 17, true, true);   /* K splits, odd sizes */
    check_graph(g, "matmul");
    mn_graph_destroy(g);
}

typedef struct conv_case {
    int64_t n, c, h, w, o, kh, kw;
    mn_conv2d_params p;
    bool bias;
} conv_case;

static void add_conv(mn_graph *g, const conv_case *cc) {
    static int seq;
    char nx[32], nw[32], nbias[32], ndy[32];
    snprintf(nx, sizeof nx, "x%d", seq);
    snprintf(nw, sizeof nw, "w%d", seq);
    snprintf(nbias, sizeof nbias, "bias%d", seq);
    snprintf(ndy, sizeof ndy, "dy%d", seq++);
    const int64_t groups = cc->p.groups ? cc->p.groups : 1;
    mn_tensor x = input(g, nx, 4, (int64_t[]){cc->n, cc->c, cc->h, cc->w});
    mn_tensor w = input(g, nw, 4, (int64_t[]){cc->o, cc->c / groups, cc->kh, cc->kw});
    mn_tensor bias = cc->bias ? input(g, nbias, 1, (int64_t[]){cc->o}) : MN_NONE, y;
    CHECK_OK(mn_conv2d(g, &y, x, w, bias, &cc->p), mn_graph_error(g));
    if (y == MN_NONE) return;
    const node yn = g->nodes[y];
    mn_tensor dy = input(g, ndy, 4, yn.shape);
    /* the two gradient helpers, as autodiff builds them */
    node p;
    memset(&p, 0, sizeof p);
    p.op = OP_CONV2D_BWD_INPUT;
    p.nin = 2, p.in[0] = dy, p.in[1] = w;
    memcpy(p.ip, yn.ip, sizeof p.ip);
    p.rank = 4;
    memcpy(p.shape, g->nodes[x].shape, sizeof p.shape);
    CHECK_OK(graph_add(g, NULL, &p), g->err);
    p.op = OP_CONV2D_BWD_WEIGHT;
    p.in[0] = x, p.in[1] = dy;
    memcpy(p.shape, g->nodes[w].shape, sizeof p.shape);
    CHECK_OK(graph_add(g, NULL, &p), g->err);
    /* the weight gradient split into partial sums over K chunks of 3/8 of K
     * (3 parts, the last one shorter) */
    const int64_t K = yn.shape[0] * yn.shape[2] * yn.shape[3], chunk = (3 * K + 7) / 8;
    if (chunk < K) {
        wgrad_chunk_set(&p, chunk);
        p.shape[0] *= (K + chunk - 1) / chunk;
        CHECK_OK(graph_add(g, NULL, &p), g->err);
    }
}

static void test_conv(void) {
    static const conv_case cases[] = {
        {2, 3, 9, 11, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, false},
        {2, 3, 9, 11, 4, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
        {1, 2, 10, 9, 3, 3, 2, {{2, 3}, {0, 1}, {2, 1}, 1}, true},  /* stride, dilation */
        {2, 4, 8, 8, 6, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 2}, true},   /* groups */
        {1, 8, 7, 7, 8, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 8}, false},  /* depthwise */
        {2, 16, 16, 16, 32, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 1}, true}, /* implicit GEMM */
        {2, 32, 15, 17, 64, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 2}, true}, /* GEMM, strided, groups */
        {4, 64, 14, 14, 128, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 1}, false}, /* GEMM, 1x1 */
        {2, 48, 20, 20, 32, 5, 5, {{1, 1}, {4, 4}, {2, 2}, 1}, false},  /* GEMM, dilated */
        {8, 3, 64, 64, 64, 7, 7, {{2, 2}, {3, 3}, {1, 1}, 1}, false},   /* a ResNet stem */
        {2, 32, 12, 10, 64, 1, 1, {{2, 2}, {0, 0}, {1, 1}, 1}, false},   /* GEMM, 1x1 stride 2 */
        {1, 16, 13, 12, 32, 3, 2, {{3, 2}, {1, 0}, {1, 1}, 1}, false},   /* GEMM, strides 3 and 2 */
    };
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true; /* node-level test: handles are node indices */
    for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) add_conv(g, &cases[i]);
    check_graph(g, "conv2d");
    mn_graph_destroy(g);
}

/* The tiles of ResNet-50's convolutions at batch 32 on a GPU (conv_pick in
 * vk_gen_linalg.c, from the sweep of docs/PERF.md run R) and the strided
 * input gradient by stride classes (MM_SUBPIX); a CPU device keeps
 * gemm_pick's table. */
/* A memory plan of every node of g (code generation reads paging from it). */
static mn_status plan_all(memplan *mp, mn_graph *g, char *err, size_t cap) {
    int32_t *order = malloc((size_t)g->n * sizeof *order);
    uint8_t *live = malloc((size_t)g->n);
    int32_t norder = 0;
    for (int32_t i = 0; i < g->n; i++) {
        live[i] = 1;
        if (!op_is_source(g->nodes[i].op)) order[norder++] = i;
    }
    memplan_options mo = {4, false, 0, NULL, NULL, 0};
    mn_status st = memplan_build(mp, g, order, norder, live, &mo, err, cap);
    free(order);
    free(live);
    return st;
}

typedef struct pick_case {
    const char *what;
    int op;                             /* OP_CONV2D, _BWD_INPUT, _BWD_WEIGHT */
    int64_t c, h, o, k, s, chunk;       /* chunk: the weight gradient's K part (autodiff's), 0 whole */
    long bm, bn, bk, tm, subpix, batch; /* expected on the H200 profile; batch -1: not checked */
} pick_case;

static void test_conv_picks(void) {
    static const pick_case cases[] = {
        {"1x1 64->256 @56 forward", OP_CONV2D, 64, 56, 256, 1, 1, 0, 64, 128, 8, 8, 0, 1},
        {"3x3 256 @14 forward (K 2304)", OP_CONV2D, 256, 14, 256, 3, 1, 0, 128, 128, 16, 8, 0, 1},
        {"3x3 512 @7 forward (K 4608, 52 big tiles)", OP_CONV2D, 512, 7, 512, 3, 1, 0, 64, 64, 8, 4, 0, 1},
        {"1x1 256->64 @56 input gradient", OP_CONV2D_BWD_INPUT, 256, 56, 64, 1, 1, 0, 64, 128, 8, 8, 0, 1},
        {"1x1 s2 256->512 input gradient", OP_CONV2D_BWD_INPUT, 256, 56, 512, 1, 2, 0, 64, 128, 8, 8, 1, 4},
        {"3x3 s2 128 @56 input gradient", OP_CONV2D_BWD_INPUT, 128, 56, 128, 3, 2, 0, 64, 128, 8, 8, 1, 4},
        {"3x3 64 @56 weight gradient, 42 parts", OP_CONV2D_BWD_WEIGHT, 64, 56, 64, 3, 1, 2432, 64, 64, 8, 4, 0, 42},
        {"1x1 128->512 @28 weight gradient, 24 parts", OP_CONV2D_BWD_WEIGHT, 128, 28, 512, 1, 1, 1088, 128, 128, 16,
         8, 0, 24},
    };
    const vk_caps *h200 = &profiles[0].caps, *cpu = &profiles[1].caps;
    for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) {
        const pick_case *pc = &cases[i];
        mn_graph *g;
        mn_graph_create(&g);
        g->raw_ids = true;
        const mn_conv2d_params cp = {{(int)pc->s, (int)pc->s}, {(int)pc->k / 2, (int)pc->k / 2}, {1, 1}, 1};
        mn_tensor x = input(g, "x", 4, (int64_t[]){32, pc->c, pc->h, pc->h});
        mn_tensor w = input(g, "w", 4, (int64_t[]){pc->o, pc->c, pc->k, pc->k}), y;
        CHECK_OK(mn_conv2d(g, &y, x, w, MN_NONE, &cp), mn_graph_error(g));
        const node yn = g->nodes[y];
        mn_tensor dy = input(g, "dy", 4, yn.shape);
        int32_t t = (int32_t)y;
        node p;
        memset(&p, 0, sizeof p);
        memcpy(p.ip, yn.ip, sizeof p.ip);
        p.rank = 4, p.nin = 2;
        if (pc->op == OP_CONV2D_BWD_INPUT) {
            p.op = OP_CONV2D_BWD_INPUT, p.in[0] = dy, p.in[1] = w;
            memcpy(p.shape, g->nodes[x].shape, sizeof p.shape);
            CHECK_OK(graph_add(g, &t, &p), g->err);
        } else if (pc->op == OP_CONV2D_BWD_WEIGHT) {
            p.op = OP_CONV2D_BWD_WEIGHT, p.in[0] = x, p.in[1] = dy;
            memcpy(p.shape, g->nodes[w].shape, sizeof p.shape);
            const int64_t K = yn.shape[0] * yn.shape[2] * yn.shape[3];
            wgrad_chunk_set(&p, pc->chunk);
            p.shape[0] *= (K + pc->chunk - 1) / pc->chunk;
            CHECK_OK(graph_add(g, &t, &p), g->err);
        }
        char err[256] = "";
        vk_kernel k;
        memplan mp;
        CHECK_OK(plan_all(&mp, g, err, sizeof err), err);
        CHECK_OK(vk_codegen_node(&k, g, t, &mp, h200, err, sizeof err), err);
        const long got[6] = {define_value(&k, "MM_BM"), define_value(&k, "MM_BN"), define_value(&k, "MM_BK"),
                             define_value(&k, "MM_TM"), define_value(&k, "MM_SUBPIX"), define_value(&k, "MM_BATCH")};
        CHECK_MSG(got[0] == pc->bm && got[1] == pc->bn && got[2] == pc->bk && got[3] == pc->tm &&
                      (got[4] > 0 ? 1 : 0) == pc->subpix && (pc->batch < 0 || got[5] == pc->batch),
                  "%s: tile %ldx%ldx%ld tm %ld subpix %ld batch %ld", pc->what, got[0], got[1], got[2], got[3],
                  got[4], got[5]);
        /* a CPU device: gemm_pick's table (its first tile where it has the workgroups) */
        CHECK_OK(vk_codegen_node(&k, g, t, &mp, cpu, err, sizeof err), err);
        if (i == 0) CHECK_MSG(define_value(&k, "MM_BM") == 128, "%s on a CPU device: bm %ld", pc->what,
                              define_value(&k, "MM_BM"));
        memplan_free(&mp);
        mn_graph_destroy(g);
    }
    /* MEGANEURA_VK_CONV_SUBPIX=0: one class, all nine taps */
    setenv("MEGANEURA_VK_CONV_SUBPIX", "0", 1);
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true;
    add_conv(g, &(conv_case){2, 32, 16, 16, 64, 3, 3, {{2, 2}, {1, 1}, {1, 1}, 1}, false});
    char err[256] = "";
    vk_kernel k;
    memplan mp;
    CHECK_OK(plan_all(&mp, g, err, sizeof err), err);
    for (int32_t id = 0; id < g->n; id++)
        if (g->nodes[id].op == OP_CONV2D_BWD_INPUT) {
            CHECK_OK(vk_codegen_node(&k, g, id, &mp, h200, err, sizeof err), err);
            CHECK(define_value(&k, "MM_SUBPIX") < 0 && define_value(&k, "MM_K") == 64 * 9);
        }
    unsetenv("MEGANEURA_VK_CONV_SUBPIX");
    memplan_free(&mp);
    mn_graph_destroy(g);
}

/* vec4 operand loads of plain products (matmul.glsl MM_VA/MM_VB) on the
 * H200 profile: on when the operand's contiguous extent is a multiple of 4,
 * off otherwise, absent under MEGANEURA_VK_GEMM_VEC=0 */
static void test_gemm_vec(void) {
    static const struct {
        int64_t M, K, N;
        bool ta, tb;
        long va, vb;
    } cases[] = {
        {4096, 576, 1536, false, true, 1, 1},  /* a projection, y = x W^T */
        {4096, 578, 1536, false, true, 0, 0},  /* K not a multiple of 4: both run along K */
        {4096, 578, 1536, true, false, 1, 1},  /* A^T runs along M, B along N */
        {4096, 578, 1534, true, false, 1, 0},  /* N not a multiple of 4 */
    };
    const vk_caps *h200 = &profiles[0].caps;
    for (int knob = 0; knob < 2; knob++) {
        if (knob) setenv("MEGANEURA_VK_GEMM_VEC", "0", 1);
        for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) {
            mn_graph *g;
            mn_graph_create(&g);
            g->raw_ids = true;
            add_matmul(g, 2, 2, 1, cases[i].M, cases[i].K, cases[i].N, cases[i].ta, cases[i].tb);
            char err[256] = "";
            vk_kernel k;
            memplan mp;
            CHECK_OK(plan_all(&mp, g, err, sizeof err), err);
            CHECK_OK(vk_codegen_node(&k, g, g->n - 1, &mp, h200, err, sizeof err), err);
            const long va = define_value(&k, "MM_VA"), vb = define_value(&k, "MM_VB");
            CHECK_MSG(knob ? va < 0 && vb < 0 : va == cases[i].va && vb == cases[i].vb,
                      "%lldx%lldx%lld ta %d tb %d knob %d: MM_VA %ld MM_VB %ld", (long long)cases[i].M,
                      (long long)cases[i].K, (long long)cases[i].N, cases[i].ta, cases[i].tb, knob, va, vb);
            if (!knob && i < 3) {
                char *src = vk_codegen_source(&k);
                CHECK(src && compile_and_validate(src, "gemm vec4"));
                free(src);
            }
            memplan_free(&mp);
            mn_graph_destroy(g);
        }
    }
    unsetenv("MEGANEURA_VK_GEMM_VEC");
}

static void test_pool(void) {
    static const struct {
        int64_t n, c, h, w;
        mn_pool2d_params p;
    } cases[] = {
        {2, 3, 8, 8, {{2, 2}, {0, 0}, {0, 0}}},
        {2, 3, 9, 11, {{3, 3}, {2, 2}, {1, 1}}},
        {1, 2, 7, 7, {{3, 3}, {1, 1}, {1, 1}}}, /* overlapping windows */
        {1, 1, 6, 9, {{2, 3}, {1, 2}, {1, 0}}},
    };
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true; /* node-level test: handles are node indices */
    for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) {
        char nx[32], ndy[32];
        snprintf(nx, sizeof nx, "px%zu", i);
        snprintf(ndy, sizeof ndy, "pdy%zu", i);
        mn_tensor x = input(g, nx, 4, (int64_t[]){cases[i].n, cases[i].c, cases[i].h, cases[i].w}), y;
        CHECK_OK(mn_max_pool2d(g, &y, x, &cases[i].p), mn_graph_error(g));
        if (y == MN_NONE) continue;
        const node yn = g->nodes[y];
        mn_tensor dy = input(g, ndy, 4, yn.shape);
        node p;
        memset(&p, 0, sizeof p);
        p.op = OP_MAXPOOL2D_BWD;
        p.nin = 2, p.in[0] = x, p.in[1] = dy;
        memcpy(p.ip, yn.ip, sizeof p.ip);
        p.rank = 4;
        memcpy(p.shape, g->nodes[x].shape, sizeof p.shape);
        CHECK_OK(graph_add(g, NULL, &p), g->err);
    }
    check_graph(g, "maxpool2d");
    mn_graph_destroy(g);
}

int main(void) {
    compiler = shaderc_compiler_initialize();
    CHECK(compiler != NULL);
    snprintf(spv_path, sizeof spv_path, "/tmp/mn_vk_linalg_%ld.spv", (long)getpid());
    if (compiler) {
        test_matmul();
        test_conv();
        test_conv_picks();
        test_gemm_vec();
        test_pool();
        shaderc_compiler_release(compiler);
    }
    remove(spv_path);
    printf("%d kernels compiled and validated\n", kernels_checked);
    return th_finish("test_vk_linalg_codegen");
}
