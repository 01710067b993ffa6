/* test_vulkan_ops.c - every op on Vulkan against the CPU reference
 * (a "test-backend-ops" table), forward and backward.
 *
 * Each case of op_cases.h runs as a forward+backward session (no optimizer)
 * on both backends from the same parameters; the op's output, the loss and
 * every parameter gradient are compared by normalised mean squared error,
 * NMSE = sum((v - c)^2) / sum(c^2), against the op's tolerance below. Then a
 * few training steps of every optimizer (SGD/Adam/AdamW, clipping) compare
 * the parameters after the updates. Runs under the Khronos validation layer
 * when it is installed (MEGANEURA_VALIDATE=1 from ctest): any validation
 * error or warning fails the test.
 *
 * With MEGANEURA_VK_MAX_ALLOCATION=64 (the ctest test_vulkan_ops_paged)
 * every tensor above 16 elements is paged (spans several 64-byte chunks,
 * test_vk_paged), so the table runs the templates on paged operands; a
 * case whose kernels would need more descriptors than the device allows one
 * kernel is counted, not failed (test_vk_paged checks that error).
 *
 * With MEGANEURA_VK_INDEX_MAX=1 (the ctest test_vulkan_ops_idx64, together
 * with MEGANEURA_VK_MAX_ALLOCATION=256) every kernel with an operand of more
 * than one element is generated with 64-bit indices (MN_IDX64), paged
 * operands included; the test counts the sessions that have such kernels.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "backend/vulkan/vk_util.h"
#include "session/session.h"

#include "op_cases.h"

static int g_validation_msgs;
static mn_device *g_dev; /* one Vulkan device shared by every session here */
static bool g_paged_run;  /* MEGANEURA_VK_MAX_ALLOCATION set: tensors paged */
static int g_paged_sessions, g_desc_skips;
static bool g_last_paged; /* the last Vulkan session opened has paged tensors */
static bool g_idx64_run;  /* MEGANEURA_VK_INDEX_MAX set: 64-bit index kernels */
static int g_idx64_sessions, g_idx64_kernels;
static bool g_last_idx64; /* the last Vulkan session has 64-bit index kernels */

/* Kernels of session s that its device generates with 64-bit indices. */
static int idx64_kernels(mn_session *s) {
    const vk_caps *caps = &((const vk_ctx *)g_dev->impl)->caps;
    vk_kernel *k = malloc(sizeof *k);
    int n = 0;
    for (int32_t i = 0; k && i < s->sched.n; i++) {
        char err[512];
        if (!vk_codegen_node(k, s->g, s->sched.order[i], &s->plan, caps, err, sizeof err) && k->tmpl && k->idx64)
            n++;
    }
    free(k);
    return n;
}
static void on_log(mn_log_level level, const char *msg, void *user) {
    if (level <= MN_LOG_WARN) {
        g_validation_msgs++;
        fprintf(stderr, "log: %s\n", msg);
    }
}

/* NMSE tolerance per op (f32 on both sides; the GPU's transcendental
 * functions and summation order differ from the CPU's). */
static double tolerance(op_id op) {
    switch (op) {
    case OP_MATMUL: /* long K, summed in another order (split-K on the GPU) */
    case OP_EXP: case OP_LOG: case OP_SQRT: case OP_RSQRT: case OP_SIGMOID: case OP_TANH:
    case OP_GELU: case OP_GELU_TANH: case OP_SILU: case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_SIN: case OP_COS:
    case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_DENSE:
    case OP_POW: /* mn_pow: exp(p log|x|), about |p log x| 2^-24 relative */
    /* rope: f32 sin/cos and rotation against the CPU's double (~1e-7
     * absolute); attention: f32 dot products and online softmax. The loss
     * sum(R * (1.7y + y^2)) cancels to ~0.1, which makes its NMSE the larger
     * one (up to ~5e-12); outputs and gradients agree to ~1e-13. */
    case OP_ROPE: case OP_ATTENTION:
    case OP_RMS_NORM: case OP_LAYER_NORM: /* f32 row sums (tree order) and 1 / sqrt */
        return 1e-10;
    case OP_CONV2D: case OP_SUM: case OP_MEAN: case OP_REDUCE_TO: case OP_MSE:
    /* layout family: conv_transpose2d and the conv gradients as ops (GEMM
     * paths sum in another order); avg pooling sums in f32 on the GPU, in
     * double on the CPU */
    case OP_CONV2D_BWD_INPUT: case OP_CONV2D_BWD_WEIGHT: case OP_AVGPOOL2D:
        return 1e-11;
    default:
        return 1e-12;
    }
}

static mn_session *open_session(const mn_graph *g, mn_backend_kind be, const gc *c) {
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    o.backend = be;
    o.device = be == MN_BACKEND_VULKAN ? g_dev : NULL;
    /* The loss (a weighted sum of y) is compared by NMSE too, and for some
     * initial values it nearly cancels: with the counter-based initialiser
     * (issue 8) seed 99 gives rms_norm_1e4 a loss NMSE of 7e-9 while its y
     * matches to 3e-15. 98 keeps every case's loss away from cancellation. */
    o.seed = 98;
    session_internal_options io = {.grads_only = true};
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, g, &o, &io);
    if (st == MN_E_UNSUPPORTED && g_paged_run && strstr(mn_session_error(s), "storage-buffer descriptors")) {
        printf("  (skipped: %s)\n", mn_session_error(s));
        g_desc_skips++;
        mn_session_destroy(s);
        return NULL;
    }
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    if (be == MN_BACKEND_VULKAN) {
        g_last_paged = false;
        for (int32_t i = 0; i < s->g->n && !g_last_paged; i++) g_last_paged = memplan_pages(&s->plan, i) > 0;
        g_paged_sessions += g_last_paged;
        const int n64 = idx64_kernels(s);
        g_last_idx64 = n64 > 0;
        g_idx64_sessions += g_last_idx64;
        g_idx64_kernels += n64;
    }
    if (c->labels_in != MN_NONE)
        CHECK_OK(session_write_node(s, c->labels_in, c->labels, (size_t)c->nlabels * 4), mn_session_error(s));
    CHECK_OK(session_forward_backward(s), mn_session_error(s));
    return s;
}

/* Reads node id (f32) from both sessions and returns the NMSE. */
static double compare_node(mn_session *v, mn_session *c, int32_t vid, int32_t cid) {
    size_t n = (size_t)node_numel(&c->g->nodes[graph_id(cid)]);
    float *a = malloc(n * 4 + 4), *b = malloc(n * 4 + 4);
    double e = INFINITY;
    if (a && b && !session_read_f32(v, vid, a, n) && !session_read_f32(c, cid, b, n)) e = th_nmse(a, b, n);
    free(a);
    free(b);
    return e;
}

static void run_case(const gcase *k) {
    gc c;
    mn_tensor y;
    mn_status st = build_case(k, &c, &y);
    CHECK_MSG(st == MN_OK, "%s: building the case failed", k->name);
    if (!st) st = mn_graph_output(c.g, y, "y");
    mn_session *sv = st ? NULL : open_session(c.g, MN_BACKEND_VULKAN, &c);
    mn_session *sc = st ? NULL : open_session(c.g, MN_BACKEND_CPU, &c);
    if (!sv || !sc) {
        mn_session_destroy(sv);
        mn_session_destroy(sc);
        mn_graph_destroy(c.g);
        return;
    }
    double tol = tolerance(k->op);
    double fwd = compare_node(sv, sc, y, y);
    double loss = compare_node(sv, sc, sc->g->loss, sc->g->loss), bwd = 0;
    if (loss > fwd) fwd = loss;
    for (int i = 0; i < c.np; i++) {
        int32_t gv = session_grad_of(sv, c.p[i]), gcpu = session_grad_of(sc, c.p[i]);
        CHECK_MSG(gv != MN_NONE && gcpu != MN_NONE, "%s: no gradient for p%d", k->name, i);
        if (gv == MN_NONE || gcpu == MN_NONE) continue;
        double e = compare_node(sv, sc, gv, gcpu);
        if (e > bwd || isnan(e)) bwd = e;
    }
    bool ok = fwd <= tol && bwd <= tol;
    printf("  %-26s %-20s fwd %9.2e  bwd %9.2e  tol %7.0e  %s%s%s\n", k->name, op_table[k->op].name, fwd, bwd, tol,
           ok ? "ok" : "FAIL", g_paged_run && g_last_paged ? " (paged)" : "", g_last_idx64 ? " (64-bit)" : "");
    CHECK_MSG(ok, "%s: Vulkan differs from CPU: fwd NMSE %.3g, bwd NMSE %.3g > %.3g", k->name, fwd, bwd, tol);
    mn_session_destroy(sv);
    mn_session_destroy(sc);
    mn_graph_destroy(c.g);
}

/* A few optimizer steps of a small MLP on both backends. */
static void optimizer_case(const char *name, mn_optimizer o) {
    mn_graph *g;
    mn_tensor x, lab, w1, b1, w2, h, lg, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, nb = {MN_INIT_NORMAL, 0, 0.1f};
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){5, 7});
    st = st ? st : mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){5});
    st = st ? st : mn_graph_param(g, &w1, "w1", 2, (int64_t[]){7, 9}, ku);
    st = st ? st : mn_graph_param(g, &b1, "b1", 1, (int64_t[]){9}, nb);
    st = st ? st : mn_graph_param(g, &w2, "w2", 2, (int64_t[]){9, 3}, ku);
    st = st ? st : mn_matmul(g, &h, x, w1);
    st = st ? st : mn_add(g, &h, h, b1);
    st = st ? st : mn_relu(g, &h, h);
    st = st ? st : mn_matmul(g, &lg, h, w2);
    st = st ? st : mn_cross_entropy(g, &loss, lg, lab);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    mn_session *s[2] = {NULL, NULL};
    for (int b = 0; b < 2; b++) {
        mn_session_options so = mn_session_default_options();
        so.mode = MN_MODE_TRAINING;
        so.backend = b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
        so.device = b ? g_dev : NULL;
        so.optim = o;
        so.seed = 5;
        CHECK_OK(mn_session_create(&s[b], g, &so), mn_session_error(s[b]));
    }
    float xv[35];
    int32_t lv[5] = {0, 2, 1, 1, 0};
    for (int i = 0; i < 35; i++) xv[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
    for (int step = 0; step < 4; step++)
        for (int b = 0; b < 2; b++) {
            CHECK_OK(mn_session_set_input(s[b], "x", xv, sizeof xv), mn_session_error(s[b]));
            CHECK_OK(mn_session_set_input(s[b], "labels", lv, sizeof lv), mn_session_error(s[b]));
            CHECK_OK(mn_session_step(s[b]), mn_session_error(s[b]));
        }
    double worst = 0;
    static const char *names[] = {"w1", "b1", "w2"};
    for (int i = 0; i < 3; i++) {
        size_t n;
        float a[64], c[64];
        mn_session_numel(s[0], names[i], &n);
        mn_session_get_param(s[1], names[i], a, n);
        mn_session_get_param(s[0], names[i], c, n);
        double e = th_nmse(a, c, n);
        if (e > worst || isnan(e)) worst = e;
    }
    printf("  %-26s %-20s params after 4 steps NMSE %9.2e  %s\n", name, "optimizer", worst, worst <= 1e-11 ? "ok" : "FAIL");
    CHECK_MSG(worst <= 1e-11, "%s: parameters differ after 4 steps: NMSE %.3g", name, worst);
    mn_session_destroy(s[0]);
    mn_session_destroy(s[1]);
    mn_graph_destroy(g);
}

int main(void) {
    mn_set_log(on_log, NULL);
    const char *lim = getenv("MEGANEURA_VK_MAX_ALLOCATION");
    g_paged_run = lim && *lim;
    const char *imax = getenv("MEGANEURA_VK_INDEX_MAX");
    g_idx64_run = imax && *imax;
    g_dev = th_require_vulkan();
    if (!g_dev) return th_finish("test_vulkan_ops");
    { /* a device of another backend is refused with a message */
        mn_graph *g;
        mn_tensor x;
        mn_graph_create(&g);
        mn_graph_input(g, &x, "x", MN_F32, 1, (int64_t[]){3});
        mn_graph_output(g, x, "y");
        mn_session_options o = mn_session_default_options();
        o.device = g_dev; /* vulkan device, cpu session */
        mn_session *s = NULL;
        CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID);
        CHECK(strstr(mn_session_error(s), "device") != NULL);
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
    printf("  %-26s %-20s %s\n", "case", "op", "NMSE vs CPU (f32)");
    for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) run_case(&cases[i]);
    mn_optimizer o = mn_optimizer_default(MN_OPTIM_SGD);
    o.lr = 0.1f;
    o.momentum = 0.9f;
    o.nesterov = true;
    optimizer_case("sgd nesterov", o);
    o = mn_optimizer_default(MN_OPTIM_ADAM);
    o.weight_decay = 0.01f;
    optimizer_case("adam + L2", o);
    o = mn_optimizer_default(MN_OPTIM_ADAMW);
    o.clip_norm = 0.1f;
    optimizer_case("adamw + clipping", o);
    mn_device_close(g_dev); /* sessions are gone: this frees it */
    CHECK_MSG(g_validation_msgs == 0, "%d validation/log errors or warnings", g_validation_msgs);
    if (g_paged_run) {
        printf("  MEGANEURA_VK_MAX_ALLOCATION=%s: %d Vulkan sessions with paged tensors, %d cases over the "
               "descriptor limit\n", lim, g_paged_sessions, g_desc_skips);
        /* 64-byte chunks page every tensor above 16 elements; 256-byte ones
         * (with the 64-bit run) those above 64; the larger cases need more
         * descriptors than lavapipe has (17 of them, the two split weight
         * gradients', the stride-class convolutions' and the two long-K
         * matmuls' included) */
        const int want = strcmp(lim, "64") == 0 ? 60 : 20;
        CHECK_MSG(g_paged_sessions >= want && g_desc_skips <= 17, "%d paged sessions, %d skipped", g_paged_sessions,
                  g_desc_skips);
    }
    if (g_idx64_run) {
        printf("  MEGANEURA_VK_INDEX_MAX=%s: %d Vulkan sessions with 64-bit index kernels (%d kernels)\n", imax,
               g_idx64_sessions, g_idx64_kernels);
        CHECK_MSG(g_idx64_sessions >= 100, "only %d sessions had 64-bit index kernels", g_idx64_sessions);
    } else {
        CHECK_MSG(g_idx64_sessions == 0, "%d sessions have 64-bit index kernels at the default limit",
                  g_idx64_sessions);
    }
    return th_finish("test_vulkan_ops");
}
