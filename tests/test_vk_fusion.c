/* test_vk_fusion.c - the kernel-level plan's fusion against the unfused
 * graph: the same models built and trained on lavapipe with fusion on and
 * with MEGANEURA_FUSION=0 give the same bits (fused members are computed
 * with the same expressions, in registers), both match the CPU reference,
 * and fusion dispatches fewer kernels. Models: a tiny Llama (training steps,
 * AdamW; and KV-cache decoding, where an in-place cache append sits between
 * producers and consumers), a conv + batch-norm + residual block (the
 * composite batch norm is mostly pointwise), an MLP whose matmuls take their
 * bias, relu and residual add as epilogues (also against
 * MEGANEURA_FUSION=pointwise), a graph whose intermediate values are
 * outputs (never folded: the user reads them), and sums and means of
 * pointwise chains (the reductions compute them) with a broadcast of a
 * scaled sum (the broadcast takes the scale), and inference batch norm +
 * relu as the epilogue of a direct and of an implicit-GEMM convolution;
 * the permutes around attention folded into rope, kv_append and the
 * attention's own kernel (tile and row kernels).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "harness.h"
#include "llama_util.h"

/* Dispatching kernels of a session (MEGANEURA_DUMP=kernels' first line). */
static int kernel_count(const mn_session *s, int *folded) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int k = -1, nodes = 0, fo = 0;
    if (f) {
        mn_session_dump(s, "kernels", f);
        fclose(f);
        if (!buf || sscanf(buf, "kernels: %d dispatching kernels for %d scheduled nodes (%d", &k, &nodes, &fo) != 3)
            k = -1;
    }
    free(buf);
    if (folded) *folded = fo;
    return k;
}

static void set_fusion(bool on) {
    if (on) unsetenv("MEGANEURA_FUSION");
    else setenv("MEGANEURA_FUSION", "0", 1);
}

static bool same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof *a) == 0; }

/* ---- a tiny Llama: training steps ---------------------------------------- */

enum { LB = 2, LT = 16, LSTEPS = 3 };

typedef struct llama_run {
    float loss[LSTEPS];
    float *params; /* every parameter after the steps, in creation order */
    size_t nparams;
    int kernels, folded;
} llama_run;

static bool llama_train(llama_run *r, const mn_llama_config *cfg, mn_backend_kind be, mn_device *dev) {
    memset(r, 0, sizeof *r);
    mn_graph *g = NULL;
    mn_llama *m = NULL;
    mn_session *s = NULL;
    bool ok = false;
    if (mn_graph_create(&g) != MN_OK) return false;
    mn_llama_options o = mn_llama_default_options();
    o.kind = MN_LLAMA_TRAIN;
    o.batch = LB;
    o.seq_len = LT;
    CHECK_OK(mn_llama_create(&m, g, cfg, &o), mn_llama_error(m));
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAMW);
    opt.lr = 3e-3f;
    if (m && (s = lu_session(g, be, dev, MN_MODE_TRAINING, &opt))) {
        int32_t ids[LB * LT], labels[LB * LT], targets[LB * LT];
        for (int i = 0; i < LB * LT; i++) ids[i] = labels[i] = (int32_t)((i * 37 + 11) % cfg->vocab_size);
        mn_llama_shift_labels(targets, labels, LB, LT);
        ok = true;
        for (int st = 0; st < LSTEPS && ok; st++) {
            ok = mn_session_set_input(s, "input_ids", ids, sizeof ids) == MN_OK &&
                 mn_session_set_input(s, "targets", targets, sizeof targets) == MN_OK &&
                 mn_session_step(s) == MN_OK && mn_session_loss(s, &r->loss[st]) == MN_OK;
            CHECK_MSG(ok, "llama step %d: %s", st, mn_session_error(s));
        }
        const int np = mn_llama_param_count(m);
        const mn_hf_param *p = mn_llama_params(m);
        for (int i = 0; i < np; i++) {
            size_t n = 1;
            for (int d = 0; d < p[i].rank; d++) n *= (size_t)p[i].shape[d];
            r->nparams += n;
        }
        r->params = malloc(r->nparams * sizeof *r->params);
        size_t at = 0;
        for (int i = 0; ok && r->params && i < np; i++) {
            size_t n = 1;
            for (int d = 0; d < p[i].rank; d++) n *= (size_t)p[i].shape[d];
            ok = mn_session_get_param(s, p[i].name, r->params + at, n) == MN_OK;
            at += n;
        }
        ok = ok && r->params;
        r->kernels = kernel_count(s, &r->folded);
    }
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
    return ok;
}

static void test_llama_train(const mn_llama_config *cfg, mn_device *dev) {
    llama_run cpu, fused, plain;
    set_fusion(true);
    CHECK(llama_train(&cpu, cfg, MN_BACKEND_CPU, NULL));
    CHECK(llama_train(&fused, cfg, MN_BACKEND_VULKAN, dev));
    set_fusion(false);
    CHECK(llama_train(&plain, cfg, MN_BACKEND_VULKAN, dev));
    set_fusion(true);
    if (cpu.params && fused.params && plain.params && fused.nparams == cpu.nparams && plain.nparams == cpu.nparams) {
        CHECK_MSG(same_bits(fused.loss, plain.loss, LSTEPS), "llama losses: fused %.9g unfused %.9g",
                  (double)fused.loss[LSTEPS - 1], (double)plain.loss[LSTEPS - 1]);
        CHECK_MSG(same_bits(fused.params, plain.params, cpu.nparams), "llama parameters differ fused/unfused");
        for (int i = 0; i < LSTEPS; i++) CHECK_NEAR(fused.loss[i], cpu.loss[i], 1e-5 * fabs(cpu.loss[i]));
        const double rel = lu_rel_l2(fused.params, cpu.params, cpu.nparams);
        CHECK_MSG(rel <= 1e-5, "llama parameters after %d steps: rel L2 %.3g vs CPU", LSTEPS, rel);
        /* the CPU reference never fuses */
        CHECK(cpu.folded == 0);
        CHECK(plain.folded == 0);
        CHECK_MSG(fused.folded > 0 && fused.kernels < plain.kernels, "llama kernels: fused %d unfused %d",
                  fused.kernels, plain.kernels);
        printf("llama train step: %d kernels fused, %d unfused (%d nodes folded)\n", fused.kernels, plain.kernels,
               fused.folded);
    }
    free(cpu.params);
    free(fused.params);
    free(plain.params);
}

/* ---- the same Llama decoding over its KV cache ----------------------------- */

enum { DP = 5, DN = 8, DT = 4, DMAX = 32 };

/* A batch-1 DECODE model of seq_len T over caches of max_seq rows (with
 * the one-token branch when T > 1) and its inference session; false (and
 * NULLs where nothing was made) on failure. */
static bool decode_model(mn_graph **g, mn_llama **m, mn_session **s, const mn_llama_config *cfg, mn_backend_kind be,
                         mn_device *dev, int64_t T, int64_t max_seq) {
    *g = NULL, *m = NULL, *s = NULL;
    if (mn_graph_create(g) != MN_OK) return false;
    mn_llama_options o = mn_llama_default_options();
    o.kind = MN_LLAMA_DECODE;
    o.batch = 1;
    o.seq_len = T;
    o.max_seq = max_seq;
    o.decode_step = T > 1;
    CHECK_OK(mn_llama_create(m, *g, cfg, &o), mn_llama_error(*m));
    return *m && (*s = lu_session(*g, be, dev, MN_MODE_INFERENCE, NULL)) != NULL;
}

static bool llama_greedy(int32_t *out, const mn_llama_config *cfg, mn_backend_kind be, mn_device *dev,
                         int *kernels) {
    mn_graph *g;
    mn_llama *m;
    mn_session *s;
    bool ok = false;
    if (decode_model(&g, &m, &s, cfg, be, dev, DT, DMAX)) {
        const int32_t prompt[DP] = {3, 141, 59, 265, 35};
        ok = mn_llama_greedy(m, s, out, prompt, DP, DN) == MN_OK;
        CHECK_MSG(ok, "greedy: %s", mn_llama_error(m));
        *kernels = kernel_count(s, NULL);
    }
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
    return ok;
}

static void test_llama_decode(const mn_llama_config *cfg, mn_device *dev) {
    int32_t cpu[DN], fused[DN], plain[DN];
    int kc = 0, kf = 0, kp = 0;
    set_fusion(true);
    CHECK(llama_greedy(cpu, cfg, MN_BACKEND_CPU, NULL, &kc));
    CHECK(llama_greedy(fused, cfg, MN_BACKEND_VULKAN, dev, &kf));
    set_fusion(false);
    CHECK(llama_greedy(plain, cfg, MN_BACKEND_VULKAN, dev, &kp));
    set_fusion(true);
    CHECK_MSG(memcmp(fused, plain, sizeof fused) == 0, "decoded tokens differ fused/unfused");
    CHECK_MSG(memcmp(fused, cpu, sizeof fused) == 0, "decoded tokens differ from the CPU's");
    CHECK_MSG(kf > 0 && kf < kp, "decode kernels: fused %d unfused %d", kf, kp);
}

/* ---- head-layout folds (kir.h KIR_HEADS_IN / KIR_HEADS_OUT) ------------- */

/* Logits after a prefill of np tokens and after one decoding step, on a
 * DECODE graph of seq_len T (max_seq 64); the kernel dump into dump. */
static bool heads_run(float *logits, const mn_llama_config *cfg, mn_backend_kind be, mn_device *dev, int64_t T,
                      int64_t np, char **dump) {
    mn_graph *g;
    mn_llama *m;
    mn_session *s;
    bool ok = false;
    if (decode_model(&g, &m, &s, cfg, be, dev, T, 64)) {
        int32_t toks[64];
        for (int i = 0; i < 64; i++) toks[i] = (int32_t)((i * 37 + 11) % cfg->vocab_size);
        const size_t V = (size_t)cfg->vocab_size;
        ok = mn_llama_decode(m, s, toks, np, 0, logits) == MN_OK &&
             mn_llama_decode(m, s, toks + np, 1, np, logits + V) == MN_OK;
        CHECK_MSG(ok, "decode: %s", mn_llama_error(m));
        size_t len = 0;
        FILE *f = dump ? open_memstream(dump, &len) : NULL;
        if (f) {
            mn_session_dump(s, "kernels", f);
            fclose(f);
        }
    }
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
    return ok;
}

/* The permutes around attention fold into rope, kv_append and the
 * attention (tile kernel at 24 query rows, row kernel at 4 and with
 * MEGANEURA_ATTN=rows): the same bits as unfused, the CPU's logits. */
static void test_heads_folds(const mn_llama_config *cfg, mn_device *dev) {
    static const struct {
        int64_t T, np;
        const char *attn;
    } cases[] = {{24, 21, NULL}, {4, 3, NULL}, {24, 24, "rows"}};
    const size_t V = (size_t)cfg->vocab_size;
    float *cpu = malloc(2 * V * sizeof *cpu), *fused = malloc(2 * V * sizeof *fused),
          *plain = malloc(2 * V * sizeof *plain);
    CHECK(cpu && fused && plain);
    for (size_t c = 0; cpu && fused && plain && c < sizeof cases / sizeof cases[0]; c++) {
        if (cases[c].attn) setenv("MEGANEURA_ATTN", cases[c].attn, 1);
        char *dump = NULL;
        set_fusion(true);
        bool ok = heads_run(cpu, cfg, MN_BACKEND_CPU, NULL, cases[c].T, cases[c].np, NULL) &&
                  heads_run(fused, cfg, MN_BACKEND_VULKAN, dev, cases[c].T, cases[c].np, &dump);
        set_fusion(false);
        ok = ok && heads_run(plain, cfg, MN_BACKEND_VULKAN, dev, cases[c].T, cases[c].np, NULL);
        set_fusion(true);
        unsetenv("MEGANEURA_ATTN");
        CHECK_MSG(ok, "heads case %zu did not run", c);
        if (!ok) {
            free(dump);
            continue;
        }
        CHECK_MSG(dump && strstr(dump, "rope: ") && strstr(dump, "permute -> ") && strstr(dump, "attention -> "),
                  "case %zu: no head-layout folds in the kernel dump:\n%s", c, dump ? dump : "");
        CHECK_MSG(same_bits(fused, plain, 2 * V), "case %zu: folded and unfused logits differ", c);
        const double e = lu_rel_l2(fused, cpu, 2 * V);
        CHECK_MSG(e <= 1e-5, "case %zu: logits rel L2 %.3g from the CPU", c, e);
        free(dump);
    }
    free(cpu);
    free(fused);
    free(plain);
}

/* Feeds inputs "x" and "t" (n values each, deterministic) and runs steps
 * training steps, their losses into loss[]. */
static bool xt_steps(mn_session *s, size_t n, float *loss, int steps) {
    float *xv = malloc(n * sizeof *xv), *tv = malloc(n * sizeof *tv);
    bool ok = xv && tv;
    for (size_t i = 0; ok && i < n; i++) {
        xv[i] = (float)((i * 7919) % 97) / 48.0f - 1.0f;
        tv[i] = (float)((i * 104729) % 89) / 60.0f - 0.5f;
    }
    ok = ok && mn_session_set_input(s, "x", xv, n * sizeof *xv) == MN_OK &&
         mn_session_set_input(s, "t", tv, n * sizeof *tv) == MN_OK;
    for (int i = 0; i < steps && ok; i++) ok = mn_session_step(s) == MN_OK && mn_session_loss(s, &loss[i]) == MN_OK;
    free(xv);
    free(tv);
    return ok;
}

/* ---- conv + batch norm + residual block, SGD ---------------------------------- */

enum { CN = 2, CC = 4, CH = 6, CW = 5, CSTEPS = 2 };

typedef struct conv_run {
    float loss[CSTEPS], y[CN * CC * CH * CW], w[CC * CC * 9], mean[CC];
    int kernels, folded;
} conv_run;

static bool conv_train(conv_run *r, mn_backend_kind be, mn_device *dev) {
    memset(r, 0, sizeof *r);
    mn_graph *g = NULL;
    mn_session *s = NULL;
    bool ok = false;
    if (mn_graph_create(&g) != MN_OK) return false;
    const int64_t xs[4] = {CN, CC, CH, CW}, ws[4] = {CC, CC, 3, 3}, cs[1] = {CC};
    mn_tensor x, t, w, gam, bet, rm, rv, c, b, a, res, y, loss;
    const mn_conv2d_params cp = {{1, 1}, {1, 1}, {0, 0}, 0};
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 4, xs);
    if (!st) st = mn_graph_input(g, &t, "t", MN_F32, 4, xs);
    if (!st) st = mn_graph_param(g, &w, "w", 4, ws, (mn_init){MN_INIT_KAIMING_UNIFORM, 0, 0});
    if (!st) st = mn_graph_param(g, &gam, "gamma", 1, cs, (mn_init){MN_INIT_UNIFORM, 0.5f, 1.5f});
    if (!st) st = mn_graph_param(g, &bet, "beta", 1, cs, (mn_init){MN_INIT_UNIFORM, -0.5f, 0.5f});
    if (!st) st = mn_graph_param(g, &rm, "running_mean", 1, cs, (mn_init){MN_INIT_ZEROS, 0, 0});
    if (!st) st = mn_graph_param(g, &rv, "running_var", 1, cs, (mn_init){MN_INIT_CONSTANT, 1, 0});
    if (!st) st = mn_conv2d(g, &c, x, w, MN_NONE, &cp);
    if (!st) st = mn_batch_norm2d(g, &b, c, gam, bet, rm, rv, 0.1f, 1e-5f, true);
    if (!st) st = mn_relu(g, &a, b);
    if (!st) st = mn_add(g, &res, a, x);
    if (!st) st = mn_gelu(g, &y, res);
    if (!st) st = mn_mse(g, &loss, y, t);
    if (!st) st = mn_graph_output(g, y, "y");
    if (!st) st = mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_SGD);
    opt.lr = 0.05f;
    if (!st && (s = lu_session(g, be, dev, MN_MODE_TRAINING, &opt))) {
        ok = xt_steps(s, CN * CC * CH * CW, r->loss, CSTEPS);
        ok = ok && mn_session_output(s, "y", r->y, sizeof r->y) == MN_OK &&
             mn_session_get_param(s, "w", r->w, CC * CC * 9) == MN_OK &&
             mn_session_get_param(s, "running_mean", r->mean, CC) == MN_OK;
        CHECK_MSG(ok, "conv block: %s", mn_session_error(s));
        r->kernels = kernel_count(s, &r->folded);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return ok;
}

static void test_conv_block(mn_device *dev) {
    static conv_run cpu, fused, plain;
    set_fusion(true);
    CHECK(conv_train(&cpu, MN_BACKEND_CPU, NULL));
    CHECK(conv_train(&fused, MN_BACKEND_VULKAN, dev));
    set_fusion(false);
    CHECK(conv_train(&plain, MN_BACKEND_VULKAN, dev));
    set_fusion(true);
    CHECK_MSG(memcmp(&fused, &plain, offsetof(conv_run, kernels)) == 0, "conv block differs fused/unfused");
    for (int i = 0; i < CSTEPS; i++) CHECK_NEAR(fused.loss[i], cpu.loss[i], 1e-5 * fabs(cpu.loss[i]));
    CHECK(lu_rel_l2(fused.y, cpu.y, sizeof cpu.y / sizeof *cpu.y) <= 1e-5);
    CHECK(lu_rel_l2(fused.w, cpu.w, sizeof cpu.w / sizeof *cpu.w) <= 1e-5);
    CHECK(lu_rel_l2(fused.mean, cpu.mean, CC) <= 1e-5);
    CHECK_MSG(fused.folded > 0 && fused.kernels < plain.kernels, "conv block kernels: fused %d unfused %d",
              fused.kernels, plain.kernels);
    printf("conv + batch norm block step: %d kernels fused, %d unfused\n", fused.kernels, plain.kernels);
}

/* ---- an MLP: matmul epilogues (bias broadcast, relu, residual) ------------ */

enum { MB = 5, MI = 24, MH = 24, MSTEPS = 2 }; /* 5 rows: partial matmul tiles */

typedef struct mlp_run {
    float loss[MSTEPS], w1[MI * MH], b1[MH], y[MB * MH];
    int kernels, folded;
} mlp_run;

static bool mlp_train(mlp_run *r, mn_backend_kind be, mn_device *dev) {
    memset(r, 0, sizeof *r);
    mn_graph *g = NULL;
    mn_session *s = NULL;
    bool ok = false;
    if (mn_graph_create(&g) != MN_OK) return false;
    const int64_t xs[2] = {MB, MI}, ws[2] = {MI, MH}, bs[1] = {MH};
    mn_tensor x, t, w1, b1, w2, h, hb, a, o, res, loss;
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, xs);
    if (!st) st = mn_graph_input(g, &t, "t", MN_F32, 2, xs);
    if (!st) st = mn_graph_param(g, &w1, "w1", 2, ws, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    if (!st) st = mn_graph_param(g, &b1, "b1", 1, bs, (mn_init){MN_INIT_UNIFORM, -0.1f, 0.1f});
    if (!st) st = mn_graph_param(g, &w2, "w2", 2, ws, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    if (!st) st = mn_matmul(g, &h, x, w1);
    if (!st) st = mn_add(g, &hb, h, b1); /* bias: a broadcast read in the epilogue */
    if (!st) st = mn_relu(g, &a, hb);
    if (!st) st = mn_matmul(g, &o, a, w2);
    if (!st) st = mn_add(g, &res, o, x); /* residual */
    if (!st) st = mn_mse(g, &loss, res, t);
    if (!st) st = mn_graph_output(g, res, "y");
    if (!st) st = mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAMW);
    opt.lr = 1e-2f;
    if (!st && (s = lu_session(g, be, dev, MN_MODE_TRAINING, &opt))) {
        ok = xt_steps(s, MB * MI, r->loss, MSTEPS);
        ok = ok && mn_session_output(s, "y", r->y, sizeof r->y) == MN_OK &&
             mn_session_get_param(s, "w1", r->w1, MI * MH) == MN_OK && mn_session_get_param(s, "b1", r->b1, MH) == MN_OK;
        CHECK_MSG(ok, "mlp: %s", mn_session_error(s));
        r->kernels = kernel_count(s, &r->folded);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return ok;
}

static void test_mlp_epilogues(mn_device *dev) {
    static mlp_run cpu, fused, pointwise, plain;
    set_fusion(true);
    CHECK(mlp_train(&cpu, MN_BACKEND_CPU, NULL));
    CHECK(mlp_train(&fused, MN_BACKEND_VULKAN, dev));
    setenv("MEGANEURA_FUSION", "pointwise", 1);
    CHECK(mlp_train(&pointwise, MN_BACKEND_VULKAN, dev));
    set_fusion(false);
    CHECK(mlp_train(&plain, MN_BACKEND_VULKAN, dev));
    set_fusion(true);
    CHECK_MSG(memcmp(&fused, &plain, offsetof(mlp_run, kernels)) == 0, "mlp differs fused/unfused");
    CHECK_MSG(memcmp(&pointwise, &plain, offsetof(mlp_run, kernels)) == 0, "mlp differs pointwise-fused/unfused");
    for (int i = 0; i < MSTEPS; i++) CHECK_NEAR(fused.loss[i], cpu.loss[i], 1e-5 * fabs(cpu.loss[i]));
    CHECK(lu_rel_l2(fused.y, cpu.y, MB * MH) <= 1e-5);
    CHECK(lu_rel_l2(fused.w1, cpu.w1, MI * MH) <= 1e-5);
    CHECK(lu_rel_l2(fused.b1, cpu.b1, MH) <= 1e-5);
    /* the matmuls join their epilogues: fewer kernels than pointwise fusion alone */
    CHECK_MSG(fused.kernels < pointwise.kernels && pointwise.kernels <= plain.kernels,
              "mlp kernels: fused %d, pointwise only %d, unfused %d", fused.kernels, pointwise.kernels, plain.kernels);
    printf("mlp step: %d kernels fused, %d pointwise only, %d unfused\n", fused.kernels, pointwise.kernels,
           plain.kernels);
}

/* ---- SwiGLU: silu stays out of matmul epilogues ----------------------------- */

/* silu(x W1) * (x W2): the group of the product takes silu and one matmul
 * would have to run silu's exp in the matmul's unrolled epilogue (10x slower
 * on an H200), so no kernel holds a matmul and silu together; a residual
 * add of a matmul (cheap) still becomes its epilogue. */
static void test_swiglu_epilogue(mn_device *dev) {
    mn_graph *g = NULL;
    mn_session *s = NULL;
    if (mn_graph_create(&g) != MN_OK) return;
    const int64_t xs[2] = {7, 32}, ws[2] = {32, 32};
    mn_tensor x, w1, w2, w3, a, b, sa, p, d, r;
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, xs);
    if (!st) st = mn_graph_param(g, &w1, "w1", 2, ws, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    if (!st) st = mn_graph_param(g, &w2, "w2", 2, ws, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    if (!st) st = mn_graph_param(g, &w3, "w3", 2, ws, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    if (!st) st = mn_matmul(g, &a, x, w1);
    if (!st) st = mn_matmul(g, &b, x, w2);
    if (!st) st = mn_silu(g, &sa, a);
    if (!st) st = mn_mul(g, &p, sa, b);
    if (!st) st = mn_matmul(g, &d, p, w3);
    if (!st) st = mn_add(g, &r, d, x);
    if (!st) st = mn_graph_output(g, r, "y");
    CHECK_OK(st, mn_graph_error(g));
    set_fusion(true);
    if (!st && (s = lu_session(g, MN_BACKEND_VULKAN, dev, MN_MODE_INFERENCE, NULL))) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (f) {
            mn_session_dump(s, "kernels", f);
            fclose(f);
        }
        bool mixed = false, residual = false;
        for (char *line = buf; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            mixed |= strstr(line, "matmul") && strstr(line, "silu");
            residual |= strstr(line, " add:") && strstr(line, "matmul");
            line = nl ? nl + 1 : NULL;
        }
        CHECK_MSG(buf && !mixed, "a kernel holds a matmul and silu:\n%s", buf ? buf : "");
        CHECK_MSG(buf && residual, "the residual add is not its matmul's epilogue:\n%s", buf ? buf : "");
        free(buf);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* ---- intermediates the user reads are never folded ----------------------------- */

enum { ON = 3, OD = 37 }; /* 37: not a multiple of any workgroup */

static bool outputs_run(float *prod, float *res, mn_backend_kind be, mn_device *dev, int *folded) {
    mn_graph *g = NULL;
    mn_session *s = NULL;
    bool ok = false;
    if (mn_graph_create(&g) != MN_OK) return false;
    const int64_t sh[2] = {ON, OD}, bs[1] = {OD};
    mn_tensor x, y, z, bias, p, q, u, v;
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, sh);
    if (!st) st = mn_graph_input(g, &y, "y", MN_F32, 2, sh);
    if (!st) st = mn_graph_input(g, &z, "z", MN_F32, 2, sh);
    if (!st) st = mn_graph_input(g, &bias, "bias", MN_F32, 1, bs);
    if (!st) st = mn_mul(g, &p, x, y);   /* read by the user and by silu */
    if (!st) st = mn_silu(g, &q, p);     /* foldable into u */
    if (!st) st = mn_add(g, &u, q, bias); /* broadcast bias */
    if (!st) st = mn_sub(g, &v, u, z);
    if (!st) st = mn_graph_output(g, p, "prod");
    if (!st) st = mn_graph_output(g, v, "res");
    CHECK_OK(st, mn_graph_error(g));
    if (!st && (s = lu_session(g, be, dev, MN_MODE_INFERENCE, NULL))) {
        float xv[ON * OD], yv[ON * OD], zv[ON * OD], bv[OD];
        for (int i = 0; i < ON * OD; i++) {
            xv[i] = (float)(i % 11) / 3.0f - 1.5f;
            yv[i] = (float)(i % 7) / 2.0f - 1.0f;
            zv[i] = (float)(i % 5) / 4.0f;
        }
        for (int i = 0; i < OD; i++) bv[i] = (float)i / OD - 0.5f;
        ok = mn_session_set_input(s, "x", xv, sizeof xv) == MN_OK && mn_session_set_input(s, "y", yv, sizeof yv) == MN_OK &&
             mn_session_set_input(s, "z", zv, sizeof zv) == MN_OK &&
             mn_session_set_input(s, "bias", bv, sizeof bv) == MN_OK && mn_session_run(s) == MN_OK &&
             mn_session_output(s, "prod", prod, ON * OD * sizeof *prod) == MN_OK &&
             mn_session_output(s, "res", res, ON * OD * sizeof *res) == MN_OK;
        CHECK_MSG(ok, "outputs graph: %s", mn_session_error(s));
        kernel_count(s, folded);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return ok;
}

static void test_outputs_not_folded(mn_device *dev) {
    float pc[ON * OD], rc[ON * OD], pf[ON * OD], rf[ON * OD];
    int folded = 0, cf = 0;
    CHECK(outputs_run(pc, rc, MN_BACKEND_CPU, NULL, &cf));
    CHECK(outputs_run(pf, rf, MN_BACKEND_VULKAN, dev, &folded));
    CHECK(lu_rel_l2(pf, pc, ON * OD) <= 1e-6);
    CHECK(lu_rel_l2(rf, rc, ON * OD) <= 1e-6);
    /* silu and the bias add fold into the subtraction; the product (an
     * output) keeps its own kernel */
    CHECK_MSG(folded == 2, "folded %d nodes, expected 2 (silu, add)", folded);
}

/* A MEGANEURA_FUSION value it does not know is a clear session error, on
 * every backend (a typo must not silently measure the wrong thing). */
/* ---- reductions of pointwise chains; broadcasts of them ---------------------- */

enum { RA = 3, RB = 5, RC = 7, RD = 2, RN = RA * RB * RC * RD };

typedef struct red_run {
    float a[RA * RC * RD], b, s[RN], d[RA * RB * RD];
    int kernels, folded;
    char *dump;
} red_run;

/* a = sum over axis 1 of x * y + c (y, c broadcast), b = mean of exp(x) /
 * 2 over everything, s = x + broadcast(2 * sum over axis 3 of tanh(x) - y),
 * d = sum over axis 1 of 3 * x permuted to [RA, RC, RB, RD] (the permute
 * read in the reduction's indexing). */
static bool red_run_once(red_run *r, mn_backend_kind be, mn_device *dev) {
    memset(r, 0, sizeof *r);
    mn_graph *g = NULL;
    mn_session *s = NULL;
    bool ok = false;
    if (mn_graph_create(&g) != MN_OK) return false;
    const int64_t xs[4] = {RA, RB, RC, RD}, ys[3] = {RB, 1, RD}, cs[2] = {RC, 1};
    mn_tensor x, y, c, t, a, e, b, u, v, w, q, out, pm, d;
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 4, xs);
    if (!st) st = mn_graph_input(g, &y, "y", MN_F32, 3, ys);
    if (!st) st = mn_graph_input(g, &c, "c", MN_F32, 2, cs);
    if (!st) st = mn_mul(g, &t, x, y);
    if (!st) st = mn_add(g, &t, t, c);
    if (!st) st = mn_sum(g, &a, t, 1, false);
    if (!st) st = mn_exp(g, &e, x);
    if (!st) st = mn_scale(g, &e, e, 0.5f);
    if (!st) st = mn_mean(g, &b, e, MN_ALL_AXES, false);
    if (!st) st = mn_tanh(g, &u, x);
    if (!st) st = mn_sub(g, &u, u, y);
    if (!st) st = mn_sum(g, &v, u, 3, true);
    if (!st) st = mn_scale(g, &w, v, 2.0f);
    if (!st) st = mn_broadcast_to(g, &q, w, 4, xs);
    if (!st) st = mn_add(g, &out, x, q);
    if (!st) st = mn_permute(g, &pm, x, (int[]){0, 2, 1, 3});
    if (!st) st = mn_scale(g, &pm, pm, 3.0f);
    if (!st) st = mn_sum(g, &d, pm, 1, false);
    if (!st) st = mn_graph_output(g, d, "d");
    if (!st) st = mn_graph_output(g, a, "a");
    if (!st) st = mn_graph_output(g, b, "b");
    if (!st) st = mn_graph_output(g, out, "s");
    CHECK_OK(st, mn_graph_error(g));
    if (!st && (s = lu_session(g, be, dev, MN_MODE_INFERENCE, NULL))) {
        float xv[RN], yv[RB * RD], cv[RC];
        for (int i = 0; i < RN; i++) xv[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
        for (int i = 0; i < RB * RD; i++) yv[i] = (float)(i % 4) / 3.0f - 0.5f;
        for (int i = 0; i < RC; i++) cv[i] = (float)i / RC;
        ok = mn_session_set_input(s, "x", xv, sizeof xv) == MN_OK && mn_session_set_input(s, "y", yv, sizeof yv) == MN_OK &&
             mn_session_set_input(s, "c", cv, sizeof cv) == MN_OK && mn_session_run(s) == MN_OK &&
             mn_session_output(s, "a", r->a, sizeof r->a) == MN_OK && mn_session_output(s, "b", &r->b, sizeof r->b) == MN_OK &&
             mn_session_output(s, "s", r->s, sizeof r->s) == MN_OK &&
             mn_session_output(s, "d", r->d, sizeof r->d) == MN_OK;
        CHECK_MSG(ok, "reductions graph: %s", mn_session_error(s));
        r->kernels = kernel_count(s, &r->folded);
        size_t len = 0;
        FILE *f = open_memstream(&r->dump, &len);
        if (f) {
            mn_session_dump(s, "kernels", f);
            fclose(f);
        }
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return ok;
}

/* The reductions compute their input chains (kir KIR_REDUCE) and the
 * broadcast its producer: 5 kernels (sum, mean, sum, add, sum), the bits
 * of the unfused kernels, a CPU match. */
static void test_reduce_prologues(mn_device *dev) {
    static red_run cpu, fused, plain;
    set_fusion(true);
    CHECK(red_run_once(&cpu, MN_BACKEND_CPU, NULL));
    CHECK(red_run_once(&fused, MN_BACKEND_VULKAN, dev));
    set_fusion(false);
    CHECK(red_run_once(&plain, MN_BACKEND_VULKAN, dev));
    set_fusion(true);
    CHECK_MSG(memcmp(&fused, &plain, offsetof(red_run, kernels)) == 0, "reductions differ fused/unfused");
    CHECK(lu_rel_l2(fused.a, cpu.a, RA * RC * RD) <= 1e-6);
    CHECK_NEAR(fused.b, cpu.b, 1e-6 * fabs(cpu.b));
    CHECK(lu_rel_l2(fused.s, cpu.s, RN) <= 1e-6);
    CHECK(lu_rel_l2(fused.d, cpu.d, RA * RB * RD) <= 1e-6);
    CHECK_MSG(fused.kernels == 5 && plain.kernels == 15, "reductions: %d kernels fused, %d unfused", fused.kernels,
              plain.kernels);
    const char *d = fused.dump ? fused.dump : "";
    CHECK_MSG(strstr(d, " mul ") && strstr(d, " add -> ") && strstr(d, " sum:") && strstr(d, " mean:") &&
              strstr(d, " broadcast "), "kernels dump:\n%s", d);
    printf("reductions: %d kernels fused, %d unfused\n", fused.kernels, plain.kernels);
    free(cpu.dump);
    free(fused.dump);
    free(plain.dump);
}

/* ---- inference batch norm as a convolution's epilogue ------------------------ */

enum { EN = 2, EC = 8, EH = 12, EO1 = 4, EO2 = 32 };

typedef struct cepi_run {
    float y1[EN * EO1 * EH * EH], y2[EN * EO2 * EH * EH];
    int kernels, folded;
} cepi_run;

/* conv (no bias, as in ResNets) + batch norm (running statistics) + relu
 * twice: 4 output channels (the direct kernel, conv2d.glsl) and 32 (an
 * implicit GEMM, matmul.glsl); the eps scalars are literals, so each group
 * binds x, w, mean, var, weight and bias: the six inputs. */
static bool cepi_run_once(cepi_run *r, mn_backend_kind be, mn_device *dev) {
    memset(r, 0, sizeof *r);
    mn_graph *g = NULL;
    mn_session *s = NULL;
    bool ok = false;
    if (mn_graph_create(&g) != MN_OK) return false;
    mn_tensor x, y[2];
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 4, (int64_t[]){EN, EC, EH, EH});
    for (int l = 0; l < 2 && !st; l++) {
        const int64_t co = l ? EO2 : EO1;
        char nm[5][16];
        mn_tensor w, rm, rv, gw, gb, c;
        for (int i = 0; i < 5; i++) snprintf(nm[i], sizeof nm[i], "l%d.%c", l, "wbmvg"[i]);
        mn_init u = {MN_INIT_UNIFORM, -0.3f, 0.3f}, pos = {MN_INIT_UNIFORM, 0.5f, 2.0f};
        st = mn_graph_param(g, &w, nm[0], 4, (int64_t[]){co, EC, 3, 3}, u);
        if (!st) st = mn_graph_param(g, &rm, nm[2], 1, (int64_t[]){co}, u);
        if (!st) st = mn_graph_param(g, &rv, nm[3], 1, (int64_t[]){co}, pos);
        if (!st) st = mn_graph_param(g, &gw, nm[4], 1, (int64_t[]){co}, pos);
        if (!st) st = mn_graph_param(g, &gb, l ? "l1.h" : "l0.h", 1, (int64_t[]){co}, u);
        mn_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
        if (!st) st = mn_conv2d(g, &c, x, w, MN_NONE, &p);
        if (!st) st = mn_batch_norm2d(g, &c, c, gw, gb, rm, rv, 0.1f, 1e-5f, false);
        if (!st) st = mn_relu(g, &y[l], c);
        if (!st) st = mn_graph_output(g, y[l], l ? "y2" : "y1");
    }
    CHECK_OK(st, mn_graph_error(g));
    if (!st && (s = lu_session(g, be, dev, MN_MODE_INFERENCE, NULL))) {
        static float xv[EN * EC * EH * EH];
        for (int i = 0; i < EN * EC * EH * EH; i++) xv[i] = (float)((i * 29) % 31) / 15.0f - 1.0f;
        ok = mn_session_set_input(s, "x", xv, sizeof xv) == MN_OK && mn_session_run(s) == MN_OK &&
             mn_session_output(s, "y1", r->y1, sizeof r->y1) == MN_OK &&
             mn_session_output(s, "y2", r->y2, sizeof r->y2) == MN_OK;
        CHECK_MSG(ok, "conv epilogues: %s", mn_session_error(s));
        r->kernels = kernel_count(s, &r->folded);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return ok;
}

static void test_conv_epilogues(mn_device *dev) {
    static cepi_run cpu, fused, plain;
    set_fusion(true);
    CHECK(cepi_run_once(&cpu, MN_BACKEND_CPU, NULL));
    CHECK(cepi_run_once(&fused, MN_BACKEND_VULKAN, dev));
    set_fusion(false);
    CHECK(cepi_run_once(&plain, MN_BACKEND_VULKAN, dev));
    set_fusion(true);
    CHECK_MSG(memcmp(&fused, &plain, offsetof(cepi_run, kernels)) == 0, "conv epilogues differ fused/unfused");
    CHECK(lu_rel_l2(fused.y1, cpu.y1, sizeof cpu.y1 / sizeof *cpu.y1) <= 1e-5);
    CHECK(lu_rel_l2(fused.y2, cpu.y2, sizeof cpu.y2 / sizeof *cpu.y2) <= 1e-5);
    CHECK_MSG(fused.kernels == 2 && plain.kernels == 16, "conv epilogues: %d kernels fused, %d unfused", fused.kernels,
              plain.kernels);
    printf("conv + batch norm + relu (inference): %d kernels fused, %d unfused\n", fused.kernels, plain.kernels);
}

static void test_bad_fusion_env(void) {
    mn_graph *g = NULL;
    if (mn_graph_create(&g) != MN_OK) return;
    const int64_t sh[1] = {4};
    mn_tensor x, y;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 1, sh), mn_graph_error(g));
    CHECK_OK(mn_relu(g, &y, x), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, y, "y"), mn_graph_error(g));
    setenv("MEGANEURA_FUSION", "off", 1);
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_CPU;
    mn_session *s = NULL;
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID);
    CHECK_MSG(s && strstr(mn_session_error(s), "MEGANEURA_FUSION='off'"), "error: %s", s ? mn_session_error(s) : "");
    mn_session_destroy(s);
    set_fusion(true);
    mn_graph_destroy(g);
}

int main(void) {
    test_bad_fusion_env();
    mn_device *dev = th_require_vulkan();
    if (dev) {
        char dir[1024], path[1200], err[256];
        lu_fixtures(dir, sizeof dir);
        snprintf(path, sizeof path, "%s/lm/tiny-smol.json", dir);
        mn_llama_config cfg;
        mn_status st = mn_llama_config_load(&cfg, path, err, sizeof err);
        CHECK_OK(st, err);
        if (!st) {
            test_llama_train(&cfg, dev);
            test_llama_decode(&cfg, dev);
            test_heads_folds(&cfg, dev);
        }
        test_conv_block(dev);
        test_mlp_epilogues(dev);
        test_swiglu_epilogue(dev);
        test_outputs_not_folded(dev);
        test_reduce_prologues(dev);
        test_conv_epilogues(dev);
        mn_device_close(dev);
    }
    return th_finish("test_vk_fusion");
}
