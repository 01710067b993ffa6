/* test_vk_idx64.c - training with every kernel in its 64-bit index form
 * (issue 8): MEGANEURA_VK_INDEX_MAX=1 makes each kernel with an operand of
 * more than one element use 64-bit element indices (MN_IDX64: uint64_t
 * indices, 64-bit size literals, pages found from a 64-bit index), and
 * MEGANEURA_VK_MAX_ALLOCATION=16384 pages every tensor above 4096 elements
 * over 16 KiB bindings, so both run together.
 *
 * Models, each trained STEPS steps on the CPU, on that "wide" Vulkan device
 * and on a Vulkan device with the default limits (32-bit kernels, nothing
 * paged):
 *  1. a 2-layer Llama (mn_llama_create: embedding, RMSNorm, RoPE, GQA
 *     attention, SwiGLU, tied head, cross-entropy; AdamW);
 *  2. a CNN (conv3x3 + BatchNorm + ReLU, a residual block, max pooling,
 *     global average pooling, linear, cross-entropy; AdamW with clipping);
 *  3. an MLP with dropout and GELU, mean-squared error (SGD with Nesterov
 *     momentum).
 * The wide losses match the CPU's within 1e-4 (relative) and the
 * parameters after training within a relative L2 of 1e-4; against the
 * default Vulkan device, losses and parameters are equal bit for bit (the
 * kernels compute the same values; only the index type and where tensors
 * live differ; attention takes its row kernel in both, MEGANEURA_ATTN=rows,
 * as the tile kernels have no 64-bit form). Every wide session must have kernels of 64-bit indices and
 * paged tensors, the default ones neither.
 *
 * A malformed MEGANEURA_VK_INDEX_MAX is refused when the device opens.
 * Skips (exit 77) without a Vulkan device.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llama_util.h"
#include "backend/vulkan/vk_util.h"
#include "session/session.h"

#define STEPS 3
#define WIDE_ALLOC "16384"

typedef struct run {
    float loss[STEPS];
    float *params; /* every named parameter after training, concatenated */
    size_t nparams;
    int wide, paged; /* kernels of 64-bit indices, paged tensors */
    bool ok;
} run;

typedef mn_graph *(*build_fn)(void);
typedef void (*batch_fn)(mn_session *s, int step);

static const char *g_names[64];
static int g_nnames;

/* Kernels of s its device generates with 64-bit indices, and paged tensors. */
static void count_wide(mn_session *s, mn_device *dev, run *r) {
    const vk_caps *caps = &((const vk_ctx *)dev->impl)->caps;
    vk_kernel *k = malloc(sizeof *k);
    for (int32_t i = 0; k && i < s->sched.n; i++) {
        char err[512];
        if (!vk_codegen_node(k, s->g, s->sched.order[i], &s->plan, caps, err, sizeof err) && k->tmpl && k->idx64)
            r->wide++;
    }
    for (int32_t i = 0; i < s->g->n; i++) r->paged += memplan_pages(&s->plan, i) > 0;
    free(k);
}

static run train(build_fn build, batch_fn batch, const mn_optimizer *opt, mn_backend_kind be, mn_device *dev) {
    run r = {0};
    mn_graph *g = build();
    mn_session *s = g ? lu_session(g, be, dev, MN_MODE_TRAINING, opt) : NULL;
    r.ok = s != NULL;
    for (int t = 0; r.ok && t < STEPS; t++) {
        batch(s, t);
        r.ok = mn_session_step(s) == MN_OK && mn_session_loss(s, &r.loss[t]) == MN_OK;
        CHECK_MSG(r.ok, "step %d: %s", t, mn_session_error(s));
    }
    for (int i = 0; r.ok && i < g_nnames; i++) {
        size_t n = 0;
        CHECK_OK(mn_session_numel(s, g_names[i], &n), mn_session_error(s));
        float *p = realloc(r.params, (r.nparams + n) * sizeof *p);
        if (!p) break;
        r.params = p;
        CHECK_OK(mn_session_get_param(s, g_names[i], r.params + r.nparams, n), mn_session_error(s));
        r.nparams += n;
    }
    if (s && be == MN_BACKEND_VULKAN) count_wide(s, dev, &r);
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return r;
}

/* Trains on the CPU, the wide device and the plain one; compares. */
static void check_model(const char *name, build_fn build, batch_fn batch, const mn_optimizer *opt,
                        mn_device *wide, mn_device *plain) {
    run c = train(build, batch, opt, MN_BACKEND_CPU, NULL);
    run w = train(build, batch, opt, MN_BACKEND_VULKAN, wide);
    run p = train(build, batch, opt, MN_BACKEND_VULKAN, plain);
    CHECK_MSG(c.ok && w.ok && p.ok, "%s: a run failed", name);
    if (c.ok && w.ok && p.ok) {
        double worst = 0;
        for (int t = 0; t < STEPS; t++) {
            const double d = fabs((double)w.loss[t] - c.loss[t]) / fmax(fabs((double)c.loss[t]), 1e-6);
            if (d > worst) worst = d;
            printf("  %-6s step %d: loss cpu %.7f vulkan 64-bit+paged %.7f vulkan default %.7f\n", name, t,
                   c.loss[t], w.loss[t], p.loss[t]);
        }
        const bool same = w.nparams == c.nparams && p.nparams == c.nparams;
        const double e = same ? lu_rel_l2(w.params, c.params, c.nparams) : INFINITY;
        printf("  %-6s losses vs CPU: worst relative %.2e; parameters relative L2 %.2e; %d kernels of 64-bit "
               "indices, %d paged tensors (default device: %d, %d)\n",
               name, worst, e, w.wide, w.paged, p.wide, p.paged);
        CHECK_MSG(worst < 1e-4, "%s: 64-bit Vulkan and CPU losses differ by %g", name, worst);
        CHECK_MSG(e < 1e-4, "%s: parameters differ from the CPU's (relative L2 %g)", name, e);
        CHECK_MSG(same && memcmp(w.loss, p.loss, sizeof w.loss) == 0 &&
                      memcmp(w.params, p.params, c.nparams * sizeof *c.params) == 0,
                  "%s: 64-bit+paged and default Vulkan runs differ", name);
        CHECK_MSG(w.wide >= 10 && w.paged >= 3, "%s: %d 64-bit kernels, %d paged tensors", name, w.wide, w.paged);
        CHECK_MSG(p.wide == 0 && p.paged == 0, "%s: the default device has %d 64-bit kernels, %d paged tensors",
                  name, p.wide, p.paged);
    }
    free(c.params), free(w.params), free(p.params);
}

/* ---- 1. Llama ------------------------------------------------------------ */

#define LT 16
static const char *tiny_llama =
    "{\"model_type\":\"llama\",\"vocab_size\":384,\"hidden_size\":64,\"num_hidden_layers\":2,"
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":128,"
    "\"tie_word_embeddings\":true}";
static mn_llama *g_llama;

static mn_graph *build_llama(void) {
    char err[512];
    mn_llama_config cfg;
    CHECK_OK(mn_llama_config_parse(&cfg, tiny_llama, strlen(tiny_llama), err, sizeof err), err);
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "graph");
    mn_llama_options lo = mn_llama_default_options();
    lo.seq_len = LT;
    mn_llama_destroy(g_llama);
    g_llama = NULL;
    mn_status st = mn_llama_create(&g_llama, g, &cfg, &lo);
    CHECK_OK(st, mn_llama_error(g_llama));
    static const char *names[] = {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                                  "model.layers.1.mlp.down_proj.weight", "model.norm.weight"};
    g_nnames = 4;
    memcpy(g_names, names, sizeof names);
    if (st) {
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

static void batch_llama(mn_session *s, int step) {
    int32_t ids[LT], tg[LT];
    unsigned seed = 99u + (unsigned)step;
    for (int i = 0; i < LT; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)((seed >> 8) % 384u);
    }
    mn_llama_shift_labels(tg, ids, 1, LT);
    CHECK_OK(mn_session_set_input(s, "input_ids", ids, sizeof ids), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "targets", tg, sizeof tg), mn_session_error(s));
}

/* ---- 2. CNN -------------------------------------------------------------- */

#define CB 8
static mn_status conv_bn(mn_graph *g, mn_tensor *out, mn_tensor x, const char *name, int cin, int cout, bool relu) {
    char n[64];
    mn_tensor w, gw, gb, rm, rv, y;
    mn_init ku = {MN_INIT_KAIMING_NORMAL, 0, 0}, one = {MN_INIT_CONSTANT, 1, 0}, zero = {MN_INIT_ZEROS, 0, 0};
    mn_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
    mn_status st;
    snprintf(n, sizeof n, "%s.conv.weight", name);
    if ((st = mn_graph_param(g, &w, n, 4, (int64_t[]){cout, cin, 3, 3}, ku))) return st;
    snprintf(n, sizeof n, "%s.bn.weight", name);
    if ((st = mn_graph_param(g, &gw, n, 1, (int64_t[]){cout}, one))) return st;
    snprintf(n, sizeof n, "%s.bn.bias", name);
    if ((st = mn_graph_param(g, &gb, n, 1, (int64_t[]){cout}, zero))) return st;
    snprintf(n, sizeof n, "%s.bn.running_mean", name);
    if ((st = mn_graph_param(g, &rm, n, 1, (int64_t[]){cout}, zero))) return st;
    snprintf(n, sizeof n, "%s.bn.running_var", name);
    if ((st = mn_graph_param(g, &rv, n, 1, (int64_t[]){cout}, one))) return st;
    if ((st = mn_conv2d(g, &y, x, w, MN_NONE, &p))) return st;
    if ((st = mn_batch_norm2d(g, &y, y, gw, gb, rm, rv, 0.1f, 1e-5f, true))) return st;
    if (relu && (st = mn_relu(g, &y, y))) return st;
    *out = y;
    return MN_OK;
}

static mn_graph *build_cnn(void) {
    mn_graph *g = NULL;
    mn_tensor x, lab, h, r, pooled, gap, flat, fw, fb, logits, loss;
    mn_pool2d_params mp = {{2, 2}, {2, 2}, {0, 0}};
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, zero = {MN_INIT_ZEROS, 0, 0};
    CHECK_OK(mn_graph_create(&g), "graph");
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 4, (int64_t[]){CB, 3, 12, 12});
    st = st ? st : mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){CB});
    st = st ? st : conv_bn(g, &h, x, "stem", 3, 8, true);
    st = st ? st : conv_bn(g, &r, h, "block.a", 8, 8, true);
    st = st ? st : conv_bn(g, &r, r, "block.b", 8, 8, false);
    st = st ? st : mn_add(g, &h, h, r);
    st = st ? st : mn_relu(g, &h, h);
    st = st ? st : mn_max_pool2d(g, &pooled, h, &mp);
    st = st ? st : mn_global_avg_pool(g, &gap, pooled);
    st = st ? st : mn_reshape(g, &flat, gap, 2, (int64_t[]){CB, 8});
    st = st ? st : mn_graph_param(g, &fw, "fc.weight", 2, (int64_t[]){8, 4}, ku);
    st = st ? st : mn_graph_param(g, &fb, "fc.bias", 1, (int64_t[]){4}, zero);
    st = st ? st : mn_matmul(g, &logits, flat, fw);
    st = st ? st : mn_add(g, &logits, logits, fb);
    st = st ? st : mn_cross_entropy(g, &loss, logits, lab);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    static const char *names[] = {"stem.conv.weight", "block.b.conv.weight", "block.a.bn.running_var",
                                  "fc.weight", "fc.bias"};
    g_nnames = 5;
    memcpy(g_names, names, sizeof names);
    if (st) {
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

static void batch_cnn(mn_session *s, int step) {
    float x[CB * 3 * 144];
    int32_t y[CB];
    unsigned v = (unsigned)step * 2654435761u + 7u;
    for (int b = 0; b < CB; b++) {
        v = v * 1664525u + 1013904223u;
        y[b] = (int32_t)((v >> 10) % 4u);
    }
    for (int i = 0; i < CB * 3 * 144; i++) {
        v = v * 1664525u + 1013904223u;
        x[i] = (float)((v >> 9) % 1000u) / 500.0f - 1.0f + (float)y[i / (3 * 144)] * 0.25f;
    }
    CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "labels", y, sizeof y), mn_session_error(s));
}

/* ---- 3. MLP with dropout ------------------------------------------------- */

static mn_graph *build_mlp(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "graph");
    mn_tensor x, y, w1, b1, w2, h, o, l;
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){24, 96});
    if (!st) st = mn_graph_input(g, &y, "y", MN_F32, 2, (int64_t[]){24, 10});
    if (!st) st = mn_graph_param(g, &w1, "w1", 2, (int64_t[]){96, 160}, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    if (!st) st = mn_graph_param(g, &b1, "b1", 1, (int64_t[]){160}, (mn_init){MN_INIT_NORMAL, 0, 0.1f});
    if (!st) st = mn_graph_param(g, &w2, "w2", 2, (int64_t[]){160, 10}, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    if (!st) st = mn_matmul(g, &h, x, w1);
    if (!st) st = mn_add(g, &h, h, b1);
    if (!st) st = mn_gelu(g, &h, h);
    if (!st) st = mn_dropout(g, &h, h, 0.25f, 1234);
    if (!st) st = mn_matmul(g, &o, h, w2);
    if (!st) st = mn_mse(g, &l, o, y);
    if (!st) st = mn_graph_loss(g, l);
    CHECK_OK(st, mn_graph_error(g));
    static const char *names[] = {"w1", "b1", "w2"};
    g_nnames = 3;
    memcpy(g_names, names, sizeof names);
    if (st) {
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

static void batch_mlp(mn_session *s, int step) {
    float x[24 * 96], y[24 * 10];
    for (int i = 0; i < 24 * 96; i++) x[i] = sinf((float)(i + 31 * step) * 0.37f);
    for (int i = 0; i < 24 * 10; i++) y[i] = cosf((float)(i + 7 * step) * 0.11f);
    CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "y", y, sizeof y), mn_session_error(s));
}

int main(void) {
    unsetenv("MEGANEURA_VK_INDEX_MAX");
    unsetenv("MEGANEURA_VK_MAX_ALLOCATION");
    /* attention's tile kernels index in 32 bits only, so a 64-bit session
     * takes the row kernel: both sessions here use it, for equal bits (the
     * tile kernels are checked in test_ops_transformer, test_vk_loop_limit) */
    setenv("MEGANEURA_ATTN", "rows", 1);
    mn_device *plain = th_require_vulkan();
    if (!plain) return th_finish("test_vk_idx64");
    /* malformed values are refused when the device opens */
    static const char *bad[] = {"0", "-1", "1e3", " 5", "5 ", "2147483648", "99999999999999999999999", "x"};
    for (size_t i = 0; i < MN_ARRAY_LEN(bad); i++) {
        setenv("MEGANEURA_VK_INDEX_MAX", bad[i], 1);
        mn_device *d = NULL;
        CHECK_MSG(mn_device_open(&d, MN_BACKEND_VULKAN) == MN_E_INVALID, "MEGANEURA_VK_INDEX_MAX='%s' accepted",
                  bad[i]);
        CHECK_MSG(strstr(mn_device_error(d), "MEGANEURA_VK_INDEX_MAX"), "'%s': %s", bad[i], mn_device_error(d));
        mn_device_close(d);
    }
    setenv("MEGANEURA_VK_INDEX_MAX", "1", 1);
    setenv("MEGANEURA_VK_MAX_ALLOCATION", WIDE_ALLOC, 1);
    mn_device *wide = lu_vulkan();
    unsetenv("MEGANEURA_VK_INDEX_MAX");
    unsetenv("MEGANEURA_VK_MAX_ALLOCATION");
    CHECK(wide != NULL);
    if (wide) {
        CHECK(((const vk_ctx *)wide->impl)->caps.index_max == 1);
        mn_optimizer adamw = mn_optimizer_default(MN_OPTIM_ADAMW);
        adamw.lr = 1e-3f;
        check_model("llama", build_llama, batch_llama, &adamw, wide, plain);
        adamw.lr = 1e-2f;
        adamw.clip_norm = 1.0f;
        check_model("cnn", build_cnn, batch_cnn, &adamw, wide, plain);
        mn_optimizer sgd = mn_optimizer_default(MN_OPTIM_SGD);
        sgd.lr = 0.05f;
        sgd.momentum = 0.9f;
        sgd.nesterov = true;
        check_model("mlp", build_mlp, batch_mlp, &sgd, wide, plain);
    }
    mn_llama_destroy(g_llama);
    mn_device_close(wide);
    mn_device_close(plain);
    return th_finish("test_vk_idx64");
}
