/* test_vk_codegen.c - the Vulkan generators of vk_gen_pointwise.c produce
 * GLSL that compiles (libshaderc, Vulkan 1.1) and whose SPIR-V passes
 * spirv-val, for every op they own.
 *
 * Graphs cover broadcasting both ways, keepdim and all-axes reductions, the
 * serial and workgroup reduction paths, rows handled by one invocation or a
 * workgroup, odd sizes (1, 7, 1000003 elements), ranks 0..4, int32 permutes
 * and every optimizer variant. Everything is generated twice: with ordinary
 * device limits and with tiny ones (64 invocations, 64 groups per
 * dimension), which folds large launches into a 2-D grid. A few generated
 * defines are checked literally (broadcast strides, permutation strides).
 *
 * Index width (issue 8): at the default limits no kernel declares the
 * SPIR-V Int64 capability (no 64-bit arithmetic); with vk_caps.index_max 1
 * every kernel with an operand above one element is generated in its
 * 64-bit index form (MN_IDX64) and does. At real scale, on H200-like limits
 * (2 GiB chunks, so paged operands): the logits of a Llama-3 head
 * ([32768, 2048] x [2048, 128256], 4.2G elements), cross-entropy over them
 * with its backward and both matmul gradients, and elementwise ops and a
 * sum over 2^32 + 3 elements, a softmax over 2^32 + 4096, generate 64-bit
 * kernels whose size
 * literals are 64-bit, whose launch covers every element, and which compile
 * and validate; without shaderInt64 they are refused with a message.
 *
 * Does not: execute kernels (test_vulkan_ops compares them with the CPU).
 */
#include <shaderc/shaderc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/vulkan/vk_codegen.h"
#include "graph/graph.h"
#include "harness.h"
#include "memplan/memplan.h"

/* ---- ops owned by vk_gen_pointwise.c ------------------------------------- */

static bool owned(op_id op) {
    switch (op) {
    case OP_MATMUL: case OP_CONV2D: case OP_CONV2D_BWD_INPUT: case OP_CONV2D_BWD_WEIGHT:
    case OP_MAXPOOL2D: case OP_MAXPOOL2D_BWD:
    /* the layout family (vk_gen_layout.c): tests/test_ops_layout.c */
    case OP_SLICE: case OP_PAD: case OP_CONCAT: case OP_AVGPOOL2D: case OP_AVGPOOL2D_BWD:
    case OP_UPSAMPLE_NEAREST2D: case OP_EMA_UPDATE:
    /* the transformer family: vk_gen_transformer.c, tests/test_ops_transformer.c */
    case OP_EMBEDDING: case OP_EMBEDDING_BWD: case OP_ROPE: case OP_ATTENTION: case OP_ATTENTION_LSE:
    case OP_ATTENTION_BWD_PREP: case OP_ATTENTION_BWD_Q: case OP_ATTENTION_BWD_KV: case OP_KV_APPEND:
        return false;
    default:
        return true;
    }
}

static bool dispatches(op_id op) { return !op_has(op, OPF_SOURCE | OPF_VIEW); }

static int g_covered[OP_COUNT];
static shaderc_compiler_t g_cc;
static shaderc_compile_options_t g_opts;
static int g_kernels, g_grid2d, g_wide, g_validated;
static bool g_no_val; /* compile only (no spirv-val): the 64-bit pass over the graphs of the 32-bit ones */

/* ---- compile + validate -------------------------------------------------- */

static void print_numbered(const char *src) {
    int line = 1;
    fprintf(stderr, "%4d  ", line);
    for (const char *p = src; *p; p++) {
        fputc(*p, stderr);
        if (*p == '\n' && p[1]) fprintf(stderr, "%4d  ", ++line);
    }
}

/* True if the SPIR-V module declares OpCapability Int64 (64-bit integers). */
static bool spirv_int64(const uint32_t *w, size_t n) {
    for (size_t i = 5; i + 1 < n; i += w[i] >> 16 ? w[i] >> 16 : 1)
        if (w[i] == ((2u << 16) | 17u) && w[i + 1] == 11u) return true; /* OpCapability Int64 */
    return false;
}

/* Compiles src to SPIR-V and runs spirv-val on it; true if both succeed and
 * the module uses 64-bit integers exactly when int64 says so. */
static bool compile_validate(const char *src, const char *label, bool int64) {
    shaderc_compilation_result_t r =
        shaderc_compile_into_spv(g_cc, src, strlen(src), shaderc_glsl_compute_shader, label, "main", g_opts);
    bool ok = shaderc_result_get_compilation_status(r) == shaderc_compilation_status_success;
    if (!ok) {
        fprintf(stderr, "---- %s: shaderc failed:\n%s\n", label, shaderc_result_get_error_message(r));
        print_numbered(src);
    } else if (spirv_int64((const uint32_t *)(const void *)shaderc_result_get_bytes(r),
                           shaderc_result_get_length(r) / 4) != int64) {
        fprintf(stderr, "---- %s: the SPIR-V %s 64-bit integers\n", label, int64 ? "lacks" : "uses");
        ok = false;
    } else if (!g_no_val) {
        char path[] = "/tmp/mn_vk_codegen_XXXXXX";
        int fd = mkstemp(path);
        ok = fd >= 0;
        if (ok) {
            const char *bytes = shaderc_result_get_bytes(r);
            size_t len = shaderc_result_get_length(r);
            ok = write(fd, bytes, len) == (ssize_t)len;
            close(fd);
            char cmd[256];
            snprintf(cmd, sizeof cmd, "spirv-val --target-env vulkan1.1 %s", path);
            if (ok) ok = system(cmd) == 0;
            g_validated += ok;
            if (!ok) fprintf(stderr, "---- %s: spirv-val failed (%s)\n", label, path);
            else unlink(path);
        }
    }
    shaderc_result_release(r);
    return ok;
}

static bool is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

/* Generates, compiles and validates every node of g; checks the launch. */
static void compile_graph(const mn_graph *g, const vk_caps *caps, const char *what) {
    int32_t *order = malloc((size_t)g->n * sizeof *order), norder = 0;
    uint8_t *live = malloc((size_t)g->n);
    for (int32_t i = 0; i < g->n; i++) {
        live[i] = 1;
        if (!op_is_source(g->nodes[i].op)) order[norder++] = i;
    }
    memplan mp;
    memplan_options mo = {4, false, 0, NULL, NULL, 0};
    char err[512] = "";
    mn_status st = memplan_build(&mp, g, order, norder, live, &mo, err, sizeof err);
    CHECK_OK(st, err);
    free(order);
    free(live);
    if (st) return;
    for (int32_t i = 0; i < g->n; i++) {
        const node *n = &g->nodes[i];
        if (!owned(n->op)) continue;
        vk_kernel *k = malloc(sizeof *k);
        char label[96];
        snprintf(label, sizeof label, "%s/%%%d_%s", what, i, op_table[n->op].name);
        err[0] = 0;
        st = vk_codegen_node(k, g, i, &mp, caps, err, sizeof err);
        CHECK_MSG(st == MN_OK, "%s: vk_codegen_node -> %s: %s", label, mn_status_str(st), err);
        if (st) {
            free(k);
            continue;
        }
        g_covered[n->op]++;
        if (!dispatches(n->op)) {
            CHECK_MSG(k->tmpl == NULL && vk_codegen_source(k) == NULL, "%s: a view/source dispatches", label);
            free(k);
            continue;
        }
        CHECK_MSG(k->tmpl != NULL, "%s: no template", label);
        /* launch: a power-of-two group within the limits, within the grid limit */
        uint32_t maxg = caps->max_groups[0] ? caps->max_groups[0] : 65535;
        CHECK_MSG(is_pow2(k->local[0]) && k->local[0] <= caps->max_invocations && k->local[1] == 1 &&
                      k->local[2] == 1,
                  "%s: workgroup %u", label, k->local[0]);
        CHECK_MSG(k->groups[0] >= 1 && k->groups[0] <= maxg && k->groups[1] >= 1 && k->groups[1] <= 65535 &&
                      k->groups[2] == 1,
                  "%s: groups %u x %u x %u", label, k->groups[0], k->groups[1], k->groups[2]);
        g_grid2d += k->groups[1] > 1;
        vk_hoist_sizes(k); /* as the runtime does: the size-generic form compiles too */
        char *src = vk_codegen_source(k);
        CHECK_MSG(src != NULL, "%s: no source", label);
        if (src) {
            CHECK_MSG(compile_validate(src, label, k->idx64), "%s: does not compile / validate", label);
            g_kernels++;
            g_wide += k->idx64;
            free(src);
        }
        free(k);
    }
    memplan_free(&mp);
}

/* ---- graph building ------------------------------------------------------ */

static int g_names;

static mn_tensor in_f(mn_graph *g, int rank, const int64_t *shape) {
    char name[32];
    snprintf(name, sizeof name, "x%d", g_names++);
    mn_tensor t = MN_NONE;
    CHECK_OK(mn_graph_input(g, &t, name, MN_F32, rank, shape), mn_graph_error(g));
    return t;
}
static mn_tensor in_i(mn_graph *g, int rank, const int64_t *shape) {
    char name[32];
    snprintf(name, sizeof name, "l%d", g_names++);
    mn_tensor t = MN_NONE;
    CHECK_OK(mn_graph_input(g, &t, name, MN_I32, rank, shape), mn_graph_error(g));
    return t;
}
static mn_tensor par(mn_graph *g, int rank, const int64_t *shape) {
    char name[32];
    snprintf(name, sizeof name, "p%d", g_names++);
    mn_tensor t = MN_NONE;
    mn_init init = {MN_INIT_ZEROS, 0, 0};
    CHECK_OK(mn_graph_param(g, &t, name, rank, shape, init), mn_graph_error(g));
    return t;
}

/* A library-internal node through graph_add: op, inputs, ip/fp, and for
 * ops whose shape is given (broadcast, reduce_to, state) rank/shape. */
typedef struct spec {
    op_id op;
    int nin;
    int32_t in[NODE_MAX_IN];
    int64_t ip[NODE_MAX_IP];
    double fp[NODE_MAX_FP];
    int rank;
    int64_t shape[MN_MAX_RANK];
} spec;
static mn_tensor add(mn_graph *g, spec s) {
    node p;
    memset(&p, 0, sizeof p);
    p.op = s.op;
    p.nin = s.nin;
    memcpy(p.in, s.in, sizeof p.in);
    memcpy(p.ip, s.ip, sizeof p.ip);
    memcpy(p.fp, s.fp, sizeof p.fp);
    p.rank = s.rank;
    memcpy(p.shape, s.shape, sizeof p.shape);
    p.lr_mult = 1.0f;
    int32_t out = MN_NONE;
    CHECK_OK(graph_add(g, &out, &p), mn_graph_error(g));
    return out;
}
static mn_tensor state_like(mn_graph *g, mn_tensor t) {
    const node *x = &g->nodes[t];
    spec s = {.op = OP_STATE, .rank = x->rank};
    memcpy(s.shape, x->shape, sizeof s.shape);
    return add(g, s);
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})

/* ---- the graphs ---------------------------------------------------------- */

/* Binary ops with numpy broadcasting, scalars, rank 4, a large flat pair. */
static void build_binary(mn_graph *g) {
    typedef mn_status (*bin_fn)(mn_graph *, mn_tensor *, mn_tensor, mn_tensor);
    static const bin_fn fns[] = {mn_add, mn_sub, mn_mul, mn_div};
    struct {
        int ra;
        int64_t a[4];
        int rb;
        int64_t b[4];
    } pairs[] = {
        {4, {2, 3, 4, 5}, 1, {5}},        {3, {4, 1, 3}, 2, {2, 1}},  {1, {7}, 1, {1}},
        {0, {0}, 1, {3}},                 {1, {1000003}, 1, {1000003}}, {4, {2, 1, 3, 1}, 4, {1, 4, 1, 5}},
        {2, {1, 1}, 0, {0}},              {3, {5, 1, 7}, 3, {5, 6, 1}},
    };
    for (size_t p = 0; p < MN_ARRAY_LEN(pairs); p++) {
        mn_tensor a = in_f(g, pairs[p].ra, pairs[p].a), b = in_f(g, pairs[p].rb, pairs[p].b), y;
        for (size_t f = 0; f < MN_ARRAY_LEN(fns); f++) {
            CHECK_OK(fns[f](g, &y, a, b), mn_graph_error(g));
            CHECK_OK(fns[f](g, &y, b, a), mn_graph_error(g)); /* broadcast on the other side */
        }
    }
}

/* Unary ops, scale, stop_grad, unary_bwd for every forward op; odd sizes. */
static void build_unary(mn_graph *g) {
    typedef mn_status (*un_fn)(mn_graph *, mn_tensor *, mn_tensor);
    static const un_fn fns[] = {mn_neg,  mn_exp,     mn_log,    mn_sqrt,      mn_rsqrt, mn_relu,
                                mn_sigmoid, mn_tanh, mn_gelu,   mn_gelu_tanh, mn_silu,  mn_stop_gradient,
                                mn_sin,  mn_cos};
    static const op_id bwd[] = {OP_EXP,  OP_LOG,  OP_SQRT,      OP_RSQRT, OP_RELU,
                                OP_SIGMOID, OP_TANH, OP_GELU, OP_GELU_TANH, OP_SILU, OP_SIN, OP_COS};
    const struct {
        int r;
        int64_t s[4];
    } shapes[] = {{1, {7}}, {1, {1}}, {0, {0}}, {4, {2, 3, 4, 5}}, {1, {1000003}}};
    for (size_t i = 0; i < MN_ARRAY_LEN(shapes); i++) {
        mn_tensor x = in_f(g, shapes[i].r, shapes[i].s), y;
        for (size_t f = 0; f < MN_ARRAY_LEN(fns); f++) CHECK_OK(fns[f](g, &y, x), mn_graph_error(g));
        CHECK_OK(mn_scale(g, &y, x, 0.5f), mn_graph_error(g));
        CHECK_OK(mn_scale(g, &y, x, -3.0f), mn_graph_error(g));
        CHECK_OK(mn_scale(g, &y, x, 1e-8f), mn_graph_error(g));
        CHECK_OK(mn_scale(g, &y, x, 1e30f), mn_graph_error(g));
        CHECK_OK(mn_cast(g, &y, x, MN_F16), mn_graph_error(g));
        CHECK_OK(mn_cast(g, &y, x, MN_BF16), mn_graph_error(g));
        CHECK_OK(mn_cast(g, &y, x, MN_F32), mn_graph_error(g));
        mn_tensor fy = in_f(g, shapes[i].r, shapes[i].s), dy = in_f(g, shapes[i].r, shapes[i].s);
        for (size_t b = 0; b < MN_ARRAY_LEN(bwd); b++)
            add(g, (spec){.op = OP_UNARY_BWD, .nin = 3, .in = {x, fy, dy}, .ip = {bwd[b]}});
    }
}

/* sum / mean / max / max_bwd over each axis, keepdim or not, and all axes;
 * short slices (serial path) and long ones (workgroup path). */
static void build_reduce(mn_graph *g) {
    typedef mn_status (*red_fn)(mn_graph *, mn_tensor *, mn_tensor, int, bool);
    static const red_fn fns[] = {mn_sum, mn_mean, mn_max};
    const struct {
        int r;
        int64_t s[4];
    } shapes[] = {{1, {7}},         {1, {1}},        {3, {3, 70, 5}}, {4, {2, 3, 4, 5}},
                  {2, {4, 1000}},   {2, {10000, 40}}, {1, {1000003}}, {2, {1, 1}}};
    for (size_t i = 0; i < MN_ARRAY_LEN(shapes); i++) {
        const int r = shapes[i].r;
        mn_tensor x = in_f(g, r, shapes[i].s), y;
        for (int axis = -1; axis < r; axis++) {
            const int ax = axis < 0 ? MN_ALL_AXES : axis;
            for (int keep = 0; keep <= 1; keep++) {
                if (ax == MN_ALL_AXES && keep) continue;
                for (size_t f = 0; f < MN_ARRAY_LEN(fns); f++) CHECK_OK(fns[f](g, &y, x, ax, keep), mn_graph_error(g));
                /* max_bwd: (x, y, dy), dy of the reduced shape */
                const node *yn = &g->nodes[y];
                mn_tensor dy = in_f(g, yn->rank, yn->shape);
                add(g, (spec){.op = OP_MAX_BWD, .nin = 3, .in = {x, y, dy}, .ip = {ax, keep}});
            }
        }
        add(g, (spec){.op = OP_SUMSQ, .nin = 1, .in = {x}});
        add(g, (spec){.op = OP_SUMSQ, .nin = 1, .in = {x}, .ip = {4}}); /* blocks of 4, the last short */
    }
    /* the 2-D grid with one workgroup per output: 70000 long slices */
    mn_tensor x = in_f(g, 2, SH(70000, 33)), y;
    CHECK_OK(mn_sum(g, &y, x, 1, false), mn_graph_error(g));
    CHECK_OK(mn_max(g, &y, x, 1, true), mn_graph_error(g));
}

/* broadcast and its inverse reduce_to, ranks 0..4. */
static void build_layout(mn_graph *g) {
    const struct {
        int rx;
        int64_t x[4];
        int ry;
        int64_t y[4];
    } pairs[] = {
        {1, {3}, 2, {4, 3}},          {2, {4, 1}, 3, {2, 4, 5}},          {0, {0}, 1, {7}},
        {4, {1, 3, 1, 5}, 4, {2, 3, 4, 5}}, {1, {1}, 1, {1000003}}, {2, {1, 1}, 2, {1, 1}},
    };
    for (size_t p = 0; p < MN_ARRAY_LEN(pairs); p++) {
        mn_tensor small = in_f(g, pairs[p].rx, pairs[p].x), big = in_f(g, pairs[p].ry, pairs[p].y);
        spec b = {.op = OP_BROADCAST, .nin = 1, .in = {small}, .rank = pairs[p].ry};
        memcpy(b.shape, pairs[p].y, sizeof b.shape);
        add(g, b);
        spec r = {.op = OP_REDUCE_TO, .nin = 1, .in = {big}, .rank = pairs[p].rx};
        memcpy(r.shape, pairs[p].x, sizeof r.shape);
        add(g, r);
    }
    /* permutes, rank 1..4, f32 and i32; reshape (a view) */
    mn_tensor y;
    mn_tensor a1 = in_f(g, 1, SH(7)), a2 = in_f(g, 2, SH(3, 5)), a3 = in_f(g, 3, SH(2, 3, 4));
    mn_tensor a4 = in_f(g, 4, SH(2, 3, 4, 5)), i3 = in_i(g, 3, SH(2, 1, 3)), big = in_f(g, 2, SH(1000003, 1));
    CHECK_OK(mn_permute(g, &y, a1, (const int[]){0}), mn_graph_error(g));
    CHECK_OK(mn_transpose(g, &y, a2, 0, 1), mn_graph_error(g));
    CHECK_OK(mn_permute(g, &y, a3, (const int[]){2, 0, 1}), mn_graph_error(g));
    CHECK_OK(mn_permute(g, &y, a4, (const int[]){3, 1, 0, 2}), mn_graph_error(g));
    CHECK_OK(mn_permute(g, &y, a4, (const int[]){0, 1, 3, 2}), mn_graph_error(g));
    CHECK_OK(mn_permute(g, &y, i3, (const int[]){1, 2, 0}), mn_graph_error(g));
    CHECK_OK(mn_transpose(g, &y, big, 0, 1), mn_graph_error(g));
    CHECK_OK(mn_reshape(g, &y, a4, 2, SH(6, -1)), mn_graph_error(g));
    CHECK_OK(mn_reshape(g, &y, i3, 1, SH(6)), mn_graph_error(g));
}

/* Row ops and losses: short rows (one invocation per row), long rows (a
 * workgroup per row), a rank-1 row, many rows (2-D grid). */
static void build_rows(mn_graph *g) {
    const struct {
        int r;
        int64_t s[4];
    } shapes[] = {{1, {7}}, {2, {4, 10}}, {2, {3, 1000}}, {3, {2, 3, 33}}, {2, {1, 1}}, {2, {70000, 40}}, {2, {9, 32}}};
    for (size_t i = 0; i < MN_ARRAY_LEN(shapes); i++) {
        const int r = shapes[i].r;
        mn_tensor x = in_f(g, r, shapes[i].s), dy = in_f(g, r, shapes[i].s), y, ly;
        CHECK_OK(mn_softmax(g, &y, x), mn_graph_error(g));
        CHECK_OK(mn_log_softmax(g, &ly, x), mn_graph_error(g));
        add(g, (spec){.op = OP_SOFTMAX_BWD, .nin = 2, .in = {y, dy}});
        add(g, (spec){.op = OP_LOG_SOFTMAX_BWD, .nin = 2, .in = {ly, dy}});
        if (r != 2) continue;
        /* losses over [B, C] */
        mn_tensor lab = in_i(g, 1, SH(shapes[i].s[0])), t = in_f(g, 2, shapes[i].s), dl = in_f(g, 0, SH(1)), l;
        CHECK_OK(mn_cross_entropy(g, &l, x, lab), mn_graph_error(g));
        const mn_tensor rows = graph_handle(g, g->nodes[graph_id(l)].in[2]); /* ce_rows */
        CHECK_OK(mn_cross_entropy_dense(g, &l, x, t), mn_graph_error(g));
        CHECK_OK(mn_mse(g, &l, x, t), mn_graph_error(g));
        add(g, (spec){.op = OP_CROSS_ENTROPY_BWD, .nin = 4, .in = {x, lab, dl, rows}});
        add(g, (spec){.op = OP_CROSS_ENTROPY_DENSE_BWD, .nin = 3, .in = {x, t, dl}, .ip = {0}});
        add(g, (spec){.op = OP_CROSS_ENTROPY_DENSE_BWD, .nin = 3, .in = {x, t, dl}, .ip = {1}});
    }
    mn_tensor a = in_f(g, 1, SH(1000003)), b = in_f(g, 1, SH(1000003)), c = in_f(g, 0, SH(1)), l;
    CHECK_OK(mn_mse(g, &l, a, b), mn_graph_error(g));
    CHECK_OK(mn_mse(g, &l, c, c), mn_graph_error(g));
    float v[3] = {1, 2, 3};
    CHECK_OK(mn_graph_constant(g, &l, 1, SH(3), v), mn_graph_error(g));
}

/* Every optimizer variant, with and without the clip coefficient, and gated
 * by a step_gate (the non-finite check: with and without clipping). */
static void build_optim(mn_graph *g) {
    mn_tensor hyper = in_f(g, 1, SH(4)), loss = in_f(g, 0, NULL);
    const struct {
        int r;
        int64_t s[4];
    } shapes[] = {{2, {5, 3}}, {1, {1}}, {1, {1000003}}, {4, {2, 3, 4, 5}}};
    for (size_t i = 0; i < MN_ARRAY_LEN(shapes); i++) {
        mn_tensor gr = in_f(g, shapes[i].r, shapes[i].s);
        mn_tensor sq = add(g, (spec){.op = OP_SUMSQ, .nin = 1, .in = {gr}});
        mn_tensor clip = add(g, (spec){.op = OP_CLIP_COEF, .nin = 1, .in = {sq}, .fp = {1.0}});
        mn_tensor gate = add(g, (spec){.op = OP_STEP_GATE, .nin = 2, .in = {loss, sq}, .fp = {i % 2 ? 1.0 : 0.0}});
        if (i == 0) add(g, (spec){.op = OP_STEP_GATE, .nin = 1, .in = {loss}}); /* the loss alone */
        for (int withclip = 0; withclip <= 2; withclip++) {
            const int64_t skip = withclip == 2; /* 2: the gate as clip input, skipping */
            if (withclip == 2) clip = gate;
            /* SGD: plain, momentum, nesterov + weight decay */
            const double sgd[3][3] = {{0, 0, 0}, {0.9, 0, 0}, {0.9, 1, 1e-4}};
            for (int v = 0; v < 3; v++) {
                mn_tensor p = par(g, shapes[i].r, shapes[i].s), buf = state_like(g, p);
                spec s = {.op = OP_SGD_UPDATE, .nin = 4, .in = {p, gr, buf, hyper, clip},
                          .fp = {1.0, sgd[v][0], 0, 0, sgd[v][2]}, .ip = {(int64_t)sgd[v][1], skip}};
                if (withclip) s.nin = 5;
                add(g, s);
            }
            /* Adam (L2, no decay), AdamW (decoupled) with a learning-rate multiplier */
            for (int v = 0; v < 3; v++) {
                mn_tensor p = par(g, shapes[i].r, shapes[i].s), m = state_like(g, p), vv = state_like(g, p);
                spec s = {.op = OP_ADAM_UPDATE, .nin = 5, .in = {p, gr, m, vv, hyper, clip},
                          .fp = {v == 2 ? 0.5 : 1.0, 0.9, 0.999, 1e-8, v == 0 ? 0.0 : 0.01}, .ip = {v == 2, skip}};
                if (withclip) s.nin = 6;
                add(g, s);
            }
        }
    }
}

/* The pointwise family (issue 4): abs, clamp, pow (special exponents), where
 * with three-way broadcasting, dropout (p = 0, 1, with a counter), pw_bwd of
 * each op, ce_count, cross_entropy (ce_rows and the mean) with ignore_index /
 * label smoothing and its backward with the rows and count inputs; odd sizes and a large flat tensor. */
static void build_pointwise(mn_graph *g) {
    const struct {
        int r;
        int64_t s[4];
    } shapes[] = {{1, {7}}, {0, {0}}, {4, {2, 3, 4, 5}}, {1, {1000003}}};
    static const float pows[] = {2.0f, 3.0f, -1.0f, 0.5f, 2.5f, 0.0f, -2.5f, 100.0f};
    mn_tensor ctr = in_i(g, 0, NULL);
    for (size_t i = 0; i < MN_ARRAY_LEN(shapes); i++) {
        mn_tensor x = in_f(g, shapes[i].r, shapes[i].s), dy = in_f(g, shapes[i].r, shapes[i].s), y;
        CHECK_OK(mn_abs(g, &y, x), mn_graph_error(g));
        CHECK_OK(mn_clamp(g, &y, x, -1.0f, 2.0f), mn_graph_error(g));
        CHECK_OK(mn_clamp(g, &y, x, -INFINITY, 0.0f), mn_graph_error(g));
        for (size_t p = 0; p < MN_ARRAY_LEN(pows); p++) {
            CHECK_OK(mn_pow(g, &y, x, pows[p]), mn_graph_error(g));
            add(g, (spec){.op = OP_PW_BWD, .nin = 2, .in = {x, dy}, .ip = {OP_POW}, .fp = {pows[p]}});
        }
        add(g, (spec){.op = OP_PW_BWD, .nin = 2, .in = {x, dy}, .ip = {OP_ABS}});
        add(g, (spec){.op = OP_PW_BWD, .nin = 2, .in = {x, dy}, .ip = {OP_CLAMP}, .fp = {-1, 1}});
        CHECK_OK(mn_dropout(g, &y, x, 0.0f, 1), mn_graph_error(g));
        CHECK_OK(mn_dropout(g, &y, x, 0.25f, 0xffffffffffffull), mn_graph_error(g));
        CHECK_OK(mn_dropout(g, &y, x, 1.0f, 3), mn_graph_error(g));
        CHECK_OK(mn_dropout_ex(g, &y, x, 0.5f, 3, ctr), mn_graph_error(g));
        CHECK_OK(mn_where(g, &y, x, x, dy), mn_graph_error(g));
    }
    mn_tensor c = in_f(g, 3, SH(2, 1, 5)), a = in_f(g, 2, SH(3, 1)), b = in_f(g, 0, NULL), y;
    CHECK_OK(mn_where(g, &y, c, a, b), mn_graph_error(g));
    CHECK_OK(mn_where(g, &y, b, c, a), mn_graph_error(g));
    /* cross_entropy options, short and long rows, one and many rows */
    const int64_t rc[][2] = {{4, 10}, {3, 1000}, {1, 1}, {70000, 40}};
    for (size_t i = 0; i < MN_ARRAY_LEN(rc); i++) {
        mn_tensor x = in_f(g, 2, rc[i]), lab = in_i(g, 1, SH(rc[i][0])), dl = in_f(g, 0, NULL), l;
        const mn_cross_entropy_params ps[3] = {{true, -100, 0}, {false, 0, 0.1f}, {true, 3, 0.2f}};
        for (int k = 0; k < 3; k++) {
            CHECK_OK(mn_cross_entropy_ex(g, &l, x, lab, &ps[k]), mn_graph_error(g));
            const node ln = g->nodes[graph_id(l)];
            mn_tensor cnt = add(g, (spec){.op = OP_CE_COUNT, .nin = 1, .in = {lab}, .ip = {ln.ip[0], ln.ip[1]}});
            spec bw = {.op = OP_CROSS_ENTROPY_BWD, .nin = ln.ip[0] ? 5 : 4,
                       .in = {x, lab, dl, graph_handle(g, ln.in[2]), cnt},
                       .ip = {ln.ip[0], ln.ip[1]}, .fp = {ln.fp[0]}};
            add(g, bw);
        }
    }
}

typedef void (*build_fn)(mn_graph *);

/* Row normalisations: D = 1, odd D (several rows per workgroup), D 576 and
 * 2048 (a workgroup per row), every weight/bias combination, the dx helpers
 * and the blocked weight-gradient partials (1 to 1024 rows per block, wide
 * rows in column chunks). */
static void build_norm(mn_graph *g) {
    const int64_t shapes[][2] = {{5, 1}, {7, 33}, {4096, 576}, {3, 2048}, {300001, 3}, {5, 40000}};
    for (size_t i = 0; i < MN_ARRAY_LEN(shapes); i++) {
        const int64_t d = shapes[i][1];
        mn_tensor x = in_f(g, 2, shapes[i]), dy = in_f(g, 2, shapes[i]), w = in_f(g, 1, &d), y;
        CHECK_OK(mn_rms_norm(g, &y, x, w, 1e-5f), mn_graph_error(g));
        CHECK_OK(mn_rms_norm(g, &y, x, MN_NONE, 1e-6f), mn_graph_error(g));
        CHECK_OK(mn_layer_norm(g, &y, x, w, w, 1e-5f), mn_graph_error(g));
        CHECK_OK(mn_layer_norm(g, &y, x, MN_NONE, w, 1e-5f), mn_graph_error(g));
        CHECK_OK(mn_layer_norm(g, &y, x, MN_NONE, MN_NONE, 0.0f), mn_graph_error(g));
        for (int ln = 0; ln < 2; ln++) {
            const op_id bwd = ln ? OP_LAYER_NORM_BWD : OP_RMS_NORM_BWD, bw = ln ? OP_LAYER_NORM_BWD_W : OP_RMS_NORM_BWD_W;
            add(g, (spec){.op = bwd, .nin = 3, .in = {x, dy, w}, .fp = {1e-5}});
            add(g, (spec){.op = bwd, .nin = 2, .in = {x, dy}, .fp = {1e-5}});
            add(g, (spec){.op = bw, .nin = 2, .in = {x, dy}, .ip = {i == 4 ? 1024 : 16}, .fp = {1e-5}});
            add(g, (spec){.op = bw, .nin = 2, .in = {x, dy}, .ip = {1}, .fp = {1e-5}});
        }
    }
    /* batch statistics: one value per channel, few channels of many values
     * (1024 invocations), many channels of a few values, a ResNet stem */
    const int64_t bn[][4] = {{1, 3, 1, 1}, {2, 8, 5, 7}, {1, 2048, 7, 7}, {2, 64, 112, 112}};
    for (size_t i = 0; i < MN_ARRAY_LEN(bn); i++) {
        mn_tensor x = in_f(g, 4, bn[i]);
        add(g, (spec){.op = OP_BN_MEAN, .nin = 1, .in = {x}});
        add(g, (spec){.op = OP_BN_MEANSQ, .nin = 1, .in = {x}});
    }
}

static void run_all(const vk_caps *caps, const char *what) {
    static const struct {
        const char *name;
        build_fn fn;
    } builds[] = {{"binary", build_binary}, {"unary", build_unary}, {"reduce", build_reduce},
                  {"layout", build_layout}, {"rows", build_rows},   {"optim", build_optim},
                  {"pointwise", build_pointwise}, {"norm", build_norm}};
    for (size_t b = 0; b < MN_ARRAY_LEN(builds); b++) {
        mn_graph *g = NULL;
        CHECK_OK(mn_graph_create(&g), "create");
        if (!g) continue;
        g->raw_ids = true; /* node-level test: handles are node indices */
        g_names = 0;
        builds[b].fn(g);
        char label[64];
        snprintf(label, sizeof label, "%s/%s", what, builds[b].name);
        compile_graph(g, caps, label);
        mn_graph_destroy(g);
    }
}

/* ---- literal checks of the generated defines ----------------------------- */

/* Generates node id of g (memplan without reuse) into k. */
static mn_status gen_one(vk_kernel *k, const mn_graph *g, int32_t id, const vk_caps *caps, char *err, size_t cap) {
    int32_t order[64], norder = 0;
    uint8_t live[64];
    for (int32_t i = 0; i < g->n && i < 64; i++) {
        live[i] = 1;
        if (!op_is_source(g->nodes[i].op)) order[norder++] = i;
    }
    memplan mp;
    memplan_options mo = {4, false, 0, NULL, NULL, 0};
    mn_status st = memplan_build(&mp, g, order, norder, live, &mo, err, cap);
    if (st) return st;
    st = vk_codegen_node(k, g, id, &mp, caps, err, cap);
    memplan_free(&mp);
    return st;
}

static bool has(const vk_kernel *k, const char *line) { return strstr(k->defines, line) != NULL; }

static void test_defines(const vk_caps *caps) {
    mn_graph *g = NULL;
    mn_graph_create(&g);
    g->raw_ids = true; /* node-level test: handles are node indices */
    g_names = 0;
    vk_kernel *k = malloc(sizeof *k);
    char err[256];
    mn_tensor a = in_f(g, 2, SH(4, 3)), b = in_f(g, 1, SH(3)), c = in_f(g, 2, SH(4, 1)), y;
    mn_add(g, &y, a, b);
    CHECK_OK(gen_one(k, g, y, caps, err, sizeof err), err);
    CHECK(has(k, "#define IX0(i) (i)\n") && has(k, "#define IX1(i) ((i % 3u))\n"));
    mn_mul(g, &y, c, b); /* [4,1] * [3] -> [4,3] */
    CHECK_OK(gen_one(k, g, y, caps, err, sizeof err), err);
    CHECK(has(k, "#define IX0(i) ((i / 3u))\n") && has(k, "#define IX1(i) ((i % 3u))\n"));
    mn_tensor x3 = in_f(g, 3, SH(2, 3, 4));
    mn_permute(g, &y, x3, (const int[]){2, 0, 1}); /* [4,2,3] */
    CHECK_OK(gen_one(k, g, y, caps, err, sizeof err), err);
    CHECK(has(k, "#define IX0(i) ((i / 6u) + ((i / 3u) % 2u) * 12u + (i % 3u) * 4u)\n"));
    mn_sum(g, &y, x3, 1, false); /* [2,4]: base (o/4)*12 + o%4, roff l*4 */
    CHECK_OK(gen_one(k, g, y, caps, err, sizeof err), err);
    CHECK(has(k, "#define BASE(o) ((o / 4u) * 12u + (o % 4u))\n") && has(k, "#define ROFF(l) (l * 4u)\n"));
    CHECK(has(k, "#define RED_SERIAL 1\n") && has(k, "#define NOUT 8u\n") && has(k, "#define RLEN 3u\n"));
    mn_scale(g, &y, a, 2.0f);
    CHECK_OK(gen_one(k, g, y, caps, err, sizeof err), err);
    CHECK(has(k, "#define EXPR(a, b, c) (a * 2.0)\n"));
    /* inputs are readonly, except the state an optimizer update writes */
    CHECK(has(k, "#define X0_ACCESS readonly\n"));
    mn_tensor pa = par(g, 1, SH(3)), hy = in_f(g, 1, SH(4));
    mn_tensor m = state_like(g, pa), v = state_like(g, pa);
    y = add(g, (spec){.op = OP_ADAM_UPDATE, .nin = 5, .in = {pa, b, m, v, hy}, .fp = {1, 0.9, 0.999, 1e-8}});
    CHECK_OK(gen_one(k, g, y, caps, err, sizeof err), err);
    CHECK(has(k, "#define X0_ACCESS readonly\n") && has(k, "#define X1_ACCESS readonly\n") &&
          has(k, "#define X2_ACCESS \n") && has(k, "#define X3_ACCESS \n") && has(k, "#define X4_ACCESS readonly\n"));
    /* unary_bwd of an op without a derivative is an error naming the op */
    node p;
    memset(&p, 0, sizeof p);
    p.op = OP_UNARY_BWD;
    p.nin = 3;
    p.in[0] = p.in[1] = p.in[2] = a;
    p.ip[0] = OP_ADD;
    CHECK_OK(graph_add(g, &y, &p), mn_graph_error(g));
    mn_status st = gen_one(k, g, y, caps, err, sizeof err);
    CHECK(st == MN_E_INVALID && strstr(err, "unary_bwd"));
    free(k);
    mn_graph_destroy(g);
}

/* Size-generic kernels (vk_hoist_sizes): pointwise kernels that differ only
 * in their element count share one source; broadcasts, 64-bit kernels and
 * MEGANEURA_VK_GENERIC=0 keep their literals. */
static void test_hoist(const vk_caps *caps) {
    mn_graph *g = NULL;
    mn_graph_create(&g);
    g->raw_ids = true;
    vk_kernel *k = malloc(sizeof *k), *k2 = malloc(sizeof *k2);
    char err[256];
    mn_tensor a = in_f(g, 2, SH(4, 3)), b = in_f(g, 2, SH(5, 7)), c = in_f(g, 1, SH(3)), y1, y2, y3, y4;
    mn_mul(g, &y1, a, a);
    mn_mul(g, &y2, b, b);
    mn_add(g, &y3, a, c); /* broadcast: IX1 has strides */
    mn_relu(g, &y4, b);
    CHECK_OK(gen_one(k, g, y1, caps, err, sizeof err), err);
    CHECK_OK(gen_one(k2, g, y2, caps, err, sizeof err), err);
    CHECK(has(k, "#define Y_N 12u\n") && has(k, "#define X0_N 12u\n") && has(k2, "#define Y_N 35u\n"));
    CHECK(vk_hoist_sizes(k) && vk_hoist_sizes(k2));
    CHECK(k->ndims == 1 && k->dims[0] == 12 && k2->ndims == 1 && k2->dims[0] == 35);
    CHECK(has(k, "#define Y_N pc.dim[0]\n") && !has(k, "X0_N") && !has(k, "X1_N") && !has(k, "NTHREADS"));
    char *s1 = vk_codegen_source(k), *s2 = vk_codegen_source(k2);
    CHECK_MSG(s1 && s2 && strcmp(s1, s2) == 0, "two multiplies of different sizes have different sources");
    CHECK(s1 && compile_validate(s1, "hoisted mul", false));
    free(s1), free(s2);
    CHECK(!vk_hoist_sizes(k)); /* once */
    CHECK_OK(gen_one(k, g, y3, caps, err, sizeof err), err);
    CHECK(!vk_hoist_sizes(k) && k->ndims == 0 && has(k, "#define Y_N 12u\n"));
    setenv("MEGANEURA_VK_GENERIC", "0", 1);
    CHECK_OK(gen_one(k, g, y4, caps, err, sizeof err), err);
    CHECK(!vk_hoist_sizes(k) && has(k, "#define Y_N 35u\n"));
    unsetenv("MEGANEURA_VK_GENERIC");
    vk_caps wide = *caps;
    wide.index_max = 1;
    wide.int64 = true;
    CHECK_OK(gen_one(k, g, y4, &wide, err, sizeof err), err);
    CHECK(k->idx64 && !vk_hoist_sizes(k));
    /* batch-norm statistics on a CPU device: sizes in pc.dim from the
     * generator (N, C, HW, the count's float bits), one source for one
     * workgroup size; on a GPU the literal form */
    mn_tensor xa = in_f(g, 4, SH(2, 3, 15, 20)), xb = in_f(g, 4, SH(7, 5, 10, 10));
    mn_tensor ma = add(g, (spec){.op = OP_BN_MEANSQ, .nin = 1, .in = {xa}, .rank = 1, .shape = {3}});
    mn_tensor mb = add(g, (spec){.op = OP_BN_MEANSQ, .nin = 1, .in = {xb}, .rank = 1, .shape = {5}});
    CHECK_OK(gen_one(k, g, ma, caps, err, sizeof err), err);
    CHECK(!caps->cpu_device && k->ndims == 0 && has(k, "#define BN_HW 300\n") && !has(k, "BN_GENERIC"));
    vk_caps cpu = *caps;
    cpu.cpu_device = true;
    CHECK_OK(gen_one(k, g, ma, &cpu, err, sizeof err), err);
    CHECK_OK(gen_one(k2, g, mb, &cpu, err, sizeof err), err);
    const float c600 = 600.0f;
    uint32_t b600;
    memcpy(&b600, &c600, sizeof b600);
    CHECK(k->ndims == 4 && k->dims[0] == 2 && k->dims[1] == 3 && k->dims[2] == 300 && k->dims[3] == b600);
    CHECK(vk_hoist_sizes(k) && vk_hoist_sizes(k2) && !has(k, "X0_N") && !has(k, "Y_N"));
    s1 = vk_codegen_source(k), s2 = vk_codegen_source(k2);
    CHECK_MSG(s1 && s2 && strcmp(s1, s2) == 0, "two batch-norm statistics of one workgroup size differ");
    CHECK(s1 && compile_validate(s1, "generic bn_meansq", false));
    free(s1), free(s2);
    setenv("MEGANEURA_VK_GENERIC", "0", 1);
    CHECK_OK(gen_one(k, g, ma, &cpu, err, sizeof err), err);
    CHECK(k->ndims == 0 && has(k, "#define BN_HW 300\n"));
    unsetenv("MEGANEURA_VK_GENERIC");
    free(k), free(k2);
    mn_graph_destroy(g);
}

/* Helpers duplicated across templates (there is no include mechanism) must
 * stay identical: the text from the signature to the closing brace. */
static bool same_function(const char *ta, const char *tb, const char *sig) {
    const char *a = vk_template(ta), *b = vk_template(tb);
    if (!a || !b || !(a = strstr(a, sig)) || !(b = strstr(b, sig))) return false;
    const char *ea = strstr(a, "\n}\n"), *eb = strstr(b, "\n}\n");
    const char *la = strchr(a, '\n'), *lb = strchr(b, '\n');
    if (la && la[-1] == '}') ea = la; /* one-line function */
    if (lb && lb[-1] == '}') eb = lb;
    return ea && eb && ea - a == eb - b && memcmp(a, b, (size_t)(ea - a)) == 0;
}

/* ---- real scale: tensors above 2^31 and 2^32 elements --------------------- */

/* Generates (no memory is allocated) and compiles every kernel of g on a plan
 * with 2 GiB chunks; checks their 64-bit form and launches. */
static void compile_big(const mn_graph *g, const vk_caps *caps, const char *what) {
    int32_t *order = calloc((size_t)g->n, sizeof *order), norder = 0;
    uint8_t *live = calloc((size_t)g->n, 1);
    if (!order || !live) {
        CHECK_MSG(false, "%s: out of memory", what);
        free(order);
        free(live);
        return;
    }
    for (int32_t i = 0; i < g->n; i++) {
        live[i] = 1;
        if (!op_is_source(g->nodes[i].op)) order[norder++] = i;
    }
    memplan mp;
    memplan_options mo = {4, true, (uint64_t)1 << 31, NULL, NULL, 0};
    char err[512] = "";
    mn_status st = memplan_build(&mp, g, order, norder, live, &mo, err, sizeof err);
    CHECK_OK(st, err);
    vk_kernel *k = malloc(sizeof *k);
    int wide = 0, paged = 0;
    for (int32_t t = 0; !st && t < norder; t++) {
        const int32_t i = order[t];
        const node *n = &g->nodes[i];
        char label[96];
        snprintf(label, sizeof label, "%s/%%%d_%s", what, i, op_table[n->op].name);
        st = vk_codegen_node(k, g, i, &mp, caps, err, sizeof err);
        CHECK_MSG(st == MN_OK, "%s: %s", label, err);
        if (st || !k->tmpl) continue;
        CHECK_MSG(k->idx64 && strstr(k->defines, "#define Y_N ") && strstr(strstr(k->defines, "#define Y_N "), "ul\n"),
                  "%s: not a 64-bit index kernel", label);
        wide += k->idx64;
        paged += strstr(k->defines, "_PAGES") != NULL;
        /* a 1-D launch covers every element; no group count past the device's */
        const char *nt = strstr(k->defines, "#define NTHREADS ");
        if (nt && strcmp(k->tmpl, "eltwise") == 0)
            CHECK_MSG(strtoull(nt + 17, NULL, 10) >= (unsigned long long)node_numel(n), "%s: launch of %s", label, nt);
        for (int d = 0; d < 3; d++) CHECK_MSG(k->groups[d] >= 1 && k->groups[d] <= caps->max_groups[d], "%s", label);
        char *src = vk_codegen_source(k);
        CHECK_MSG(src && compile_validate(src, label, true), "%s: does not compile / validate", label);
        free(src);
    }
    printf("  %s: %d kernels, %d with 64-bit indices, %d with paged operands\n", what, norder, wide, paged);
    CHECK(wide >= 4 && paged >= 4);
    /* the same without shaderInt64: refused, naming the op, shape and reason */
    vk_caps no64 = *caps;
    no64.int64 = false;
    for (int32_t t = 0; t < norder && !st; t++) {
        err[0] = 0;
        mn_status s2 = vk_codegen_node(k, g, order[t], &mp, &no64, err, sizeof err);
        if (t == norder - 1 || s2) {
            CHECK_MSG(s2 == MN_E_UNSUPPORTED && strstr(err, "shaderInt64") && strstr(err, "elements") &&
                          strstr(err, op_table[g->nodes[order[t]].op].name) && strchr(err, '['),
                      "%s without shaderInt64: %s", what, err);
            if (s2) printf("  without shaderInt64: %s\n", err);
            break;
        }
    }
    free(k);
    if (!st) memplan_free(&mp);
    free(order);
    free(live);
}

static void test_real_scale(void) {
    /* an H200-like device: 2 GiB chunks, a large x grid, 64-bit integers */
    const vk_caps h200 = {.subgroup_size = 32, .max_shared_bytes = 49152, .max_invocations = 1024,
                          .max_groups = {2147483647, 65535, 65535}, .int64 = true, .nonuniform = true,
                          .dynamic_index = true, .max_stage_buffers = 1u << 20};
    const vk_caps narrow = {.subgroup_size = 8, .max_shared_bytes = 32768, .max_invocations = 1024,
                            .max_groups = {65535, 65535, 65535}, .int64 = true, .dynamic_index = true,
                            .max_stage_buffers = 64};
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    g->raw_ids = true;
    g_names = 0;
    /* the logits of a Llama-3 head over 8 x 4096 tokens (4.2G elements; 8 x
     * 2048 tokens make 2.1G, below 2^31, 32-bit kernels on paged operands),
     * cross-entropy and its backward */
    const int64_t R = 32768, K = 2048, V = 128256;
    mn_tensor x = in_f(g, 2, SH(R, K)), w = par(g, 2, SH(K, V)), lab = in_i(g, 1, SH(R)), dl = in_f(g, 0, SH(1));
    mn_tensor logits, loss, dx, dw;
    CHECK_OK(mn_matmul(g, &logits, x, w), mn_graph_error(g));
    CHECK_OK(mn_cross_entropy(g, &loss, logits, lab), mn_graph_error(g));
    const mn_tensor rows = graph_handle(g, g->nodes[graph_id(loss)].in[2]);
    mn_tensor dlog = add(g, (spec){.op = OP_CROSS_ENTROPY_BWD, .nin = 4, .in = {logits, lab, dl, rows}});
    CHECK_OK(mn_matmul_ex(g, &dx, dlog, w, false, true), mn_graph_error(g));
    CHECK_OK(mn_matmul_ex(g, &dw, x, dlog, true, false), mn_graph_error(g));
    compile_big(g, &h200, "llama3 logits");
    mn_graph_destroy(g);
    /* elementwise ops and a sum over 2^32 + 3 elements, a softmax over 2^32 + 4096 */
    CHECK_OK(mn_graph_create(&g), "create");
    g->raw_ids = true;
    g_names = 0;
    const int64_t big = ((int64_t)1 << 32) + 3;
    mn_tensor a = in_f(g, 1, SH(big)), b = in_f(g, 1, SH(big)), y, sm, m2;
    CHECK_OK(mn_add(g, &y, a, b), mn_graph_error(g));
    CHECK_OK(mn_silu(g, &y, y), mn_graph_error(g));
    CHECK_OK(mn_sum(g, &sm, y, -1, false), mn_graph_error(g));
    mn_tensor c = in_f(g, 2, SH(((int64_t)1 << 20) + 1, 4096)); /* 2^32 + 4096 elements */
    CHECK_OK(mn_softmax(g, &m2, c), mn_graph_error(g));
    CHECK_OK(mn_max(g, &m2, m2, 0, false), mn_graph_error(g));
    compile_big(g, &h200, "2^32 + 3 elements (H200 limits)");
    compile_big(g, &narrow, "2^32 + 3 elements (65535 groups per dimension)");
    mn_graph_destroy(g);
}

static void test_shared_text(void) {
    /* exp and log live once, in mathlib.glsl, for every kernel */
    CHECK(vk_template("mathlib") && strstr(vk_template("mathlib"), "float mn_exp(float x)"));
    CHECK(!strstr(vk_template("eltwise"), "float mn_exp(float x)") && !strstr(vk_template("softmax"), "float mn_log(float x)"));
    CHECK(same_function("reduce", "softmax", "bool mn_beats(float v, float best)"));
}

int main(void) {
    g_cc = shaderc_compiler_initialize();
    g_opts = shaderc_compile_options_initialize();
    shaderc_compile_options_set_target_env(g_opts, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
    CHECK(g_cc && g_opts);

    const vk_caps normal = {.subgroup_size = 32, .max_shared_bytes = 32768, .max_invocations = 1024,
                            .max_groups = {65535, 65535, 65535}};
    const vk_caps tiny = {.subgroup_size = 16, .max_shared_bytes = 16384, .max_invocations = 64,
                          .max_groups = {64, 65535, 65535}};
    test_defines(&normal);
    test_hoist(&normal);
    test_shared_text();
    run_all(&normal, "normal");
    g_grid2d = 0;
    run_all(&tiny, "tiny");
    CHECK_MSG(g_grid2d > 0, "tiny limits: no launch folded into a 2-D grid");
    CHECK_MSG(g_wide == 0, "%d kernels of 64-bit indices at the default limits", g_wide);
    /* every kernel with an operand above one element in its 64-bit form */
    vk_caps wide = normal;
    wide.index_max = 1;
    wide.int64 = true;
    const int before = g_kernels;
    g_no_val = true; /* spirv-val checks the 64-bit forms in test_vk_paged and at real scale below */
    run_all(&wide, "idx64");
    g_no_val = false;
    printf("index_max 1: %d of %d kernels with 64-bit indices\n", g_wide, g_kernels - before);
    CHECK(g_wide > (g_kernels - before) * 3 / 4);
    test_real_scale();

    int missing = 0;
    for (int op = 0; op < OP_COUNT; op++)
        if (owned((op_id)op) && !g_covered[op]) {
            fprintf(stderr, "op %s not covered\n", op_table[op].name);
            missing++;
        }
    CHECK(missing == 0);
    printf("%d kernels compiled, %d of them validated by spirv-val\n", g_kernels, g_validated);
    shaderc_compile_options_release(g_opts);
    shaderc_compiler_release(g_cc);
    return th_finish("test_vk_codegen");
}
