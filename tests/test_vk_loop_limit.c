/* test_vk_loop_limit.c - kernels under lavapipe's shader loop limiter (one
 * per-invocation counter of 65535 iterations shared by every loop that is
 * not unrolled; past it the loops end silently):
 *
 * - the device reports the limit (caps.loop_limit) and vk_loops_fit obeys it;
 * - shapes whose kernels crossed the limit before, forward and gradients
 *   against the CPU: attention at SmolLM2's shapes (9 query heads on 3 kv
 *   heads, head dim 64, 128 and 512 causal tokens; dk and dv from the one
 *   fused kernel) and one decoding row over a 2048-row cache (the ctest
 *   test_vk_loop_limit_attention); attention at other real sizes (a GQA
 *   group of 4 with head dim 128 and a sliding window, cross attention, a
 *   prefill into a cache) and the tile kernel's configurations of the
 *   tuning knobs (test_vk_loop_limit_attention_shapes); attention over a
 *   40000-row key sequence, the embedding table gradient over 70000 ids, a
 *   16.8M-element sum per output;
 * - a kernel that cannot be brought under the limit is refused at session
 *   creation, with the op, its shape and the limit in the message (a tiny
 *   limit forces it at code generation; 600000 ids force the embedding
 *   gradient on the device).
 *
 * Does not: measure speed; cross-entropy (its kernels are covered by their
 * own tests).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "session/session.h"

#include "op_cases.h"

#include "backend/vulkan/vk_codegen.h"
#include "backend/vulkan/vk_util.h"

static mn_device *g_dev;

/* A training (gradients readable) or inference session on the CPU (f32
 * kernels, double sums) or on the Vulkan device. */
static mn_session *open_session(const mn_graph *g, bool vk, bool train, mn_status *st_out) {
    mn_session_options o = mn_session_default_options();
    o.mode = train ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
    o.backend = vk ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
    o.device = vk ? g_dev : NULL;
    o.seed = 11;
    session_internal_options io = {.grads_only = train};
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, g, &o, &io);
    if (st_out) *st_out = st;
    else CHECK_OK(st, mn_session_error(s));
    if (st) {
        if (st_out) return s; /* the caller reads the message */
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static float *read_all(mn_session *s, int32_t id, size_t n) {
    float *v = malloc(n * sizeof *v + 4);
    CHECK_OK(session_read_f32(s, id, v, n), mn_session_error(s));
    return v;
}

/* ids written to both sessions (the embedding cases) */
static int32_t *g_ids;
static int64_t g_nids;
static mn_tensor g_ids_in = MN_NONE;

static mn_tensor ids_input(gc *c, int64_t n, int64_t vocab) {
    free(g_ids);
    g_ids = malloc((size_t)n * sizeof *g_ids);
    g_nids = n;
    for (int64_t i = 0; i < n; i++) g_ids[i] = (int32_t)((i * 7919 + i / 3) % (vocab + 2)) - 1; /* -1 and V too */
    mn_graph_input(c->g, &g_ids_in, "ids", MN_I32, 1, S(n));
    return g_ids_in;
}

/* The case's output and every parameter gradient, Vulkan against the CPU. */
static void compare(const char *name, case_fn fn, double tol) {
    gcase k = {OP_ATTENTION, name, fn, 0};
    gc c;
    mn_tensor y;
    g_ids_in = MN_NONE;
    mn_status st = build_case(&k, &c, &y);
    CHECK_MSG(st == MN_OK, "%s: building failed: %s", name, c.g ? mn_graph_error(c.g) : "");
    if (!st) st = mn_graph_output(c.g, y, "y");
    mn_session *s[2] = {NULL, NULL};
    for (int b = 0; b < 2 && !st; b++) {
        s[b] = open_session(c.g, b == 1, true, NULL);
        if (!s[b]) break;
        if (c.labels_in != MN_NONE)
            CHECK_OK(session_write_node(s[b], c.labels_in, c.labels, (size_t)c.nlabels * 4), mn_session_error(s[b]));
        if (g_ids_in != MN_NONE)
            CHECK_OK(session_write_node(s[b], g_ids_in, g_ids, (size_t)g_nids * 4), mn_session_error(s[b]));
        CHECK_OK(session_forward_backward(s[b]), mn_session_error(s[b]));
    }
    if (s[0] && s[1]) {
        double worst = 0;
        for (int i = -1; i < c.np; i++) {
            int32_t id0 = i < 0 ? y : session_grad_of(s[0], c.p[i]), id1 = i < 0 ? y : session_grad_of(s[1], c.p[i]);
            size_t n = (size_t)node_numel(&s[0]->g->nodes[graph_id(id0)]);
            float *a = read_all(s[0], id0, n), *b = read_all(s[1], id1, n);
            double e = th_nmse(b, a, n);
            if (!(e <= worst)) worst = e;
            free(a), free(b);
        }
        printf("  %-40s out+grads NMSE %9.2e (tol %7.0e)\n", name, worst, tol);
        CHECK_MSG(worst <= tol, "%s: Vulkan differs from the CPU: NMSE %g", name, worst);
    }
    mn_session_destroy(s[0]);
    mn_session_destroy(s[1]);
    mn_graph_destroy(c.g);
}

/* SmolLM2-135M's attention: 9 query heads on 3 kv heads, head dim 64 */
static mn_tensor smol_512(gc *c) {
    return attn_case(c, S(1, 9, 512, 64), S(1, 3, 512, 64), true, 0, 0, -1000, -1, 1, -1, 1);
}
static mn_tensor smol_128(gc *c) {
    return attn_case(c, S(2, 9, 128, 64), S(2, 3, 128, 64), true, 0, 0, -1000, -1, 1, -1, 1);
}
/* more real shapes, forward and every gradient (the tile kernels at their
 * sizes; the row kernel for the decoding steps): a GQA group of 4 with head
 * dim 128 (Llama-3-8B's heads) and a sliding window, cross attention with a
 * group of 3 and partial tiles, a 256-token prefill into a 2048-row cache,
 * one decoding row over it, full and partly filled */
static mn_tensor gqa4_d128_window(gc *c) {
    return attn_case(c, S(1, 8, 256, 128), S(1, 2, 256, 128), true, 100, 0, -1000, -1, 1, -1, 1);
}
static mn_tensor cross_gqa3(gc *c) {
    return attn_case(c, S(2, 3, 200, 64), S(2, 1, 333, 64), false, 0, 0, -1000, -1, 1, -1, 1);
}
static mn_tensor prefill_cache(gc *c) {
    return attn_case(c, S(1, 9, 256, 64), S(1, 3, 2048, 64), true, 0, 0, 0, -1, 1, -1, 1);
}
static mn_tensor decode_2048(gc *c) {
    return attn_case(c, S(1, 9, 1, 64), S(1, 3, 2048, 64), true, 0, 0, 2047, -1, 1, -1, 1);
}
static mn_tensor decode_partial(gc *c) {
    return attn_case(c, S(1, 9, 1, 64), S(1, 3, 2048, 64), true, 0, 0, 1000, -1, 1, -1, 1);
}
/* a mid-sized shape for the tile configurations of the tuning knob: padded
 * head dim, partial blocks and tiles, window, GQA 2 */
static mn_tensor knob_shape(gc *c) {
    return attn_case(c, S(1, 4, 70, 40), S(1, 2, 70, 40), true, 30, 0, -1000, -1, 1, -1, 1);
}
/* head dim 32: the H200's default configurations (for head dim 64, more
 * shared memory than lavapipe has) fit here */
static mn_tensor knob_d32(gc *c) {
    return attn_case(c, S(1, 6, 150, 32), S(1, 2, 150, 32), true, 0, 0, -1000, -1, 1, -1, 1);
}
/* a few query rows over 40000 keys (a long cache): the key loop */
static mn_tensor long_keys(gc *c) {
    return attn_case(c, S(1, 2, 4, 64), S(1, 1, 40000, 64), true, 0, 0, -1000, -1, 1, -1, 1);
}
/* sliding window and a position input over the long keys */
static mn_tensor long_keys_window(gc *c) {
    return attn_case(c, S(1, 3, 3, 32), S(1, 1, 40000, 32), true, 30000, 0, 39990, -1, 1, -1, 1);
}
/* the table gradient's walk over 70000 ids (a small table keeps it quick) */
static mn_tensor emb_many_ids(gc *c) {
    mn_tensor y;
    mn_embedding(c->g, &y, GP(2, -1, 1, 61, 8), ids_input(c, 70000, 61));
    return y;
}
/* SmolLM2's vocabulary (one workgroup per table row) */
static mn_tensor emb_vocab(gc *c) {
    mn_tensor y;
    mn_embedding(c->g, &y, GP(2, -1, 1, 49152, 64), ids_input(c, 300, 49152));
    return y;
}

/* Two sums of 16.8M elements each: 65535 iterations of 256 invocations fall
 * short, the kernel takes wider workgroups. Inference, input written. */
static void long_reduction(void) {
    const int64_t len = 16800000;
    mn_graph *g;
    mn_tensor x, y;
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, S(2, len));
    st = st ? st : mn_sum(g, &y, x, 1, false);
    st = st ? st : mn_graph_output(g, y, "y");
    CHECK_OK(st, mn_graph_error(g));
    float *v = malloc((size_t)(2 * len) * sizeof *v);
    for (int64_t i = 0; i < 2 * len; i++) v[i] = (float)((i % 1000) * 0.001 + (i >= len ? 1.0 : 0.0));
    float out[2][2] = {{0}};
    for (int b = 0; b < 2 && !st; b++) {
        mn_session *s = open_session(g, b == 1, false, NULL);
        if (!s) break;
        CHECK_OK(mn_session_set_input(s, "x", v, (size_t)(2 * len) * sizeof *v), mn_session_error(s));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "y", out[b], sizeof out[b]), mn_session_error(s));
        mn_session_destroy(s);
    }
    free(v);
    for (int o = 0; o < 2; o++) {
        double rel = fabs((double)out[1][o] - out[0][o]) / fabs((double)out[0][o]);
        printf("  sum of %lld elements, output %d: cpu %.9g vulkan %.9g\n", (long long)len, o, (double)out[0][o],
               (double)out[1][o]);
        CHECK_MSG(rel < 1e-6, "long sum %d: vulkan %.9g, cpu %.9g", o, (double)out[1][o], (double)out[0][o]);
    }
    mn_graph_destroy(g);
}

static bool has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* Under a tiny limit (16: the tile kernels count about one iteration per
 * tile, the row kernel more) the attention kernels cannot fit: code
 * generation refuses each with the op, the output shape and the limit. */
static void refuse_at_codegen(void) {
    gcase k = {OP_ATTENTION, "refuse", smol_512, 0};
    gc c;
    mn_tensor y;
    CHECK_OK(build_case(&k, &c, &y), mn_graph_error(c.g));
    mn_session *s = open_session(c.g, false, true, NULL); /* the CPU: for its graph and plan */
    vk_caps caps = {.subgroup_size = 8, .max_shared_bytes = 32768, .max_invocations = 256,
                    .max_groups = {65535, 65535, 65535}, .loop_limit = 16};
    int refused = 0, fit = 0;
    for (int32_t i = 0; s && i < s->g->n; i++) {
        const node *n = &s->g->nodes[i];
        if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_BWD_Q && n->op != OP_ATTENTION_BWD_KV) continue;
        vk_kernel *kk = malloc(sizeof *kk);
        char err[512] = "";
        caps.loop_limit = 16;
        mn_status st = vk_codegen_node(kk, s->g, i, &s->plan, &caps, err, sizeof err);
        CHECK_MSG(st == MN_E_UNSUPPORTED && has(err, op_table[n->op].name) && has(err, ",512,64]") &&
                      has(err, "loop limit of 16 "),
                  "%s under a 16-iteration limit: %s", op_table[n->op].name, err);
        refused += st == MN_E_UNSUPPORTED;
        caps.loop_limit = 65535;
        st = vk_codegen_node(kk, s->g, i, &s->plan, &caps, err, sizeof err);
        CHECK_MSG(st == MN_OK, "%s under lavapipe's limit: %s", op_table[n->op].name, err);
        fit += st == MN_OK;
        free(kk);
    }
    CHECK_MSG(refused >= 3 && fit == refused, "%d attention kernels refused, %d fit", refused, fit);
    printf("  a 16-iteration limit: %d attention kernels refused with the op, shape and limit named\n", refused);
    mn_session_destroy(s);
    mn_graph_destroy(c.g);
}

/* 600000 ids: the table gradient's walk over them needs more iterations than
 * lavapipe allows; the device session is refused, naming embedding_bwd. */
static void refuse_at_session(const vk_caps *caps) {
    const int64_t n = 600000;
    mn_graph *g;
    mn_tensor t, ids, y, loss;
    mn_init init = {MN_INIT_UNIFORM, -1, 1};
    mn_graph_create(&g);
    mn_status st = mn_graph_param(g, &t, "table", 2, S(3, 1), init);
    st = st ? st : mn_graph_input(g, &ids, "ids", MN_I32, 1, S(n));
    st = st ? st : mn_embedding(g, &y, t, ids);
    st = st ? st : mn_sum(g, &loss, y, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    mn_status sst = MN_OK;
    mn_session *s = open_session(g, true, true, &sst);
    if (caps->loop_limit) {
        CHECK_MSG(sst == MN_E_UNSUPPORTED && has(mn_session_error(s), "embedding_bwd") &&
                      has(mn_session_error(s), "loop limit"),
                  "600000 ids: %s: %s", mn_status_str(sst), mn_session_error(s));
        printf("  refused: %s\n", mn_session_error(s));
    } else {
        CHECK_OK(sst, mn_session_error(s));
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* The tile kernel under other configurations (the tuning knobs of
 * vk_gen_transformer.c): 1 to 4 rows per invocation, 2 to 8 invocations per
 * row, tiles of 8 to 16 items, the head dim padded or not, plain loops and
 * runs of 3 (a remainder run) and 4, with and without the prefetch of the
 * next tile (the GPUs' default); the H200's configurations and run for
 * head dim 64 at head dim 32 (lavapipe's default run is 1). (The row kernel: test_ops_transformer's small shapes and
 * the decoding steps of test_vk_loop_limit_attention.) The last two run
 * at head dim 32. */
static void tile_configs(void) {
    static const struct {
        const char *attn, *tile, *run, *prefetch, *fusion;
    } v[] = {
        /* nosaved: the lse by a kernel of its own (otherwise the forward writes it, kir.h KIR_SAVED) */
        {"tiles", "fwd=16x8x2x4,lse=8x8x1x2,dq=32x8x4x4,dkv=16x8x1x2", "3", "1", "nosaved"},
        {"tiles", "fwd=32x16x4x8,lse=32x16x4x8,dq=8x8x1x4,dkv=8x8x1x4", "1", NULL, "nosaved"},
        {"tiles", "fwd=64x32x4x8,lse=64x32x4x8,dq=32x32x2x8,dkv=32x32x2x8", "4", "1", NULL},
        {"tiles", "fwd=16x32x2x16,dq=16x32x2x16,dkv=16x32x2x16", "4", "1", NULL}, /* 16 invocations a row, as the H200 since runs X, Y */
    };
    for (size_t i = 0; i < MN_ARRAY_LEN(v); i++) {
        char name[160];
        snprintf(name, sizeof name, "attention %s %s run %s%s%s", v[i].attn, v[i].tile ? v[i].tile : "(default)",
                 v[i].run ? v[i].run : "(default)", v[i].prefetch ? " prefetch" : "", v[i].fusion ? " nosaved" : "");
        if (v[i].fusion) setenv("MEGANEURA_FUSION", v[i].fusion, 1);
        setenv("MEGANEURA_ATTN", v[i].attn, 1);
        if (v[i].tile) setenv("MEGANEURA_ATTN_TILE", v[i].tile, 1);
        if (v[i].run) setenv("MEGANEURA_ATTN_RUN", v[i].run, 1);
        if (v[i].prefetch) setenv("MEGANEURA_ATTN_PREFETCH", v[i].prefetch, 1);
        compare(name, i < 2 ? knob_shape : knob_d32, 1e-10);
        unsetenv("MEGANEURA_ATTN");
        unsetenv("MEGANEURA_ATTN_TILE");
        unsetenv("MEGANEURA_ATTN_RUN");
        unsetenv("MEGANEURA_ATTN_PREFETCH");
        unsetenv("MEGANEURA_FUSION");
    }
}

/* No argument: everything but the attention at real sizes; "attention":
 * SmolLM2's attention and decoding over a 2048-row cache (the ctest
 * test_vk_loop_limit_attention); "attention_shapes": the other real shapes
 * and the tile configurations (test_vk_loop_limit_attention_shapes). Each
 * part takes about 30-45 s on lavapipe with cold kernel caches. */
int main(int argc, char **argv) {
    const bool attention = argc > 1 && strcmp(argv[1], "attention") == 0;
    const bool shapes = argc > 1 && strcmp(argv[1], "attention_shapes") == 0;
    vk_caps none = {0}, lim = {.loop_limit = 100};
    CHECK(vk_loops_fit(&none, UINT64_MAX));
    CHECK(vk_loops_fit(&lim, 100) && !vk_loops_fit(&lim, 101));
    if (!attention && !shapes) refuse_at_codegen();
    g_dev = th_require_vulkan();
    if (g_dev && attention) {
        compare("attention 9/3 heads T512 D64 causal", smol_512, 1e-10);
        compare("attention 9/3 heads T128 D64 causal B2", smol_128, 1e-10);
        compare("attention decode pos 2047, cache 2048", decode_2048, 1e-10);
        compare("attention decode pos 1000, cache 2048", decode_partial, 1e-10);
    } else if (g_dev && shapes) {
        compare("attention 8/2 heads T256 D128 window 100", gqa4_d128_window, 1e-10);
        compare("attention 3/1 heads cross 200x333 B2", cross_gqa3, 1e-10);
        compare("attention prefill 256 into cache 2048", prefill_cache, 1e-10);
        tile_configs();
    } else if (g_dev) {
        vk_ctx ctx;
        char err[256];
        CHECK_OK(vk_ctx_create(&ctx, err, sizeof err), err);
        const bool lavapipe = strstr(ctx.props.deviceName, "llvmpipe") != NULL;
        CHECK_MSG(!lavapipe || ctx.caps.loop_limit == 65535, "lavapipe's loop limit read as %u", ctx.caps.loop_limit);
        printf("  %s: loop limit %u\n", ctx.props.deviceName, ctx.caps.loop_limit);
        /* f32 dot products and exponentials against double sums */
        compare("attention Tq4 over 40000 keys", long_keys, 1e-10);
        compare("attention window 30000, pos, 40000 keys", long_keys_window, 1e-10);
        compare("embedding grad over 70000 ids", emb_many_ids, 1e-12);
        compare("embedding vocab 49152 D64", emb_vocab, 0);
        long_reduction();
        refuse_at_session(&ctx.caps);
        vk_ctx_destroy(&ctx);
    }
    free(g_ids);
    mn_device_close(g_dev);
    return th_finish("test_vk_loop_limit");
}
