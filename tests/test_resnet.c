/* test_resnet.c - a small ResNet-style CNN trains, identically on the CPU
 * and on Vulkan within tolerance.
 *
 * Model (NCHW, 8x8 images, 3 channels, 4 classes):
 *   conv3x3 3->8, BatchNorm, ReLU
 *   residual block: conv3x3 8->8, BN, ReLU, conv3x3 8->8, BN, + skip, ReLU
 *   max-pool 2x2, global average pool, linear 8->4, cross-entropy.
 * Task: the class is the quadrant holding a bright blob (plus noise), a
 * fresh batch of 16 every step from a fixed generator. 40 AdamW steps: the
 * loss must fall below 40% of its start on both backends, the two loss
 * curves must agree step by step, and the BatchNorm running statistics must
 * have moved (and agree). An inference graph with training = false then
 * loads the checkpoint and classifies held-out batches.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define B 16
#define STEPS 40

typedef struct net {
    mn_graph *g;
} net;

static mn_status conv_bn(mn_graph *g, mn_tensor *out, mn_tensor x, const char *name, int cin, int cout, bool train,
                         bool relu) {
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
    if ((st = mn_batch_norm2d(g, &y, y, gw, gb, rm, rv, 0.1f, 1e-5f, train))) return st;
    if (relu && (st = mn_relu(g, &y, y))) return st;
    *out = y;
    return MN_OK;
}

static mn_graph *build(bool train) {
    mn_graph *g;
    mn_tensor x, lab, h, r, pooled, gap, flat, fw, fb, logits, loss;
    mn_pool2d_params mp = {{2, 2}, {2, 2}, {0, 0}};
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, zero = {MN_INIT_ZEROS, 0, 0};
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 4, (int64_t[]){B, 3, 8, 8});
    st = st ? st : mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){B});
    st = st ? st : conv_bn(g, &h, x, "stem", 3, 8, train, true);
    st = st ? st : conv_bn(g, &r, h, "block.a", 8, 8, train, true);
    st = st ? st : conv_bn(g, &r, r, "block.b", 8, 8, train, false);
    st = st ? st : mn_add(g, &h, h, r); /* residual */
    st = st ? st : mn_relu(g, &h, h);
    st = st ? st : mn_max_pool2d(g, &pooled, h, &mp);
    st = st ? st : mn_global_avg_pool(g, &gap, pooled);
    st = st ? st : mn_reshape(g, &flat, gap, 2, (int64_t[]){B, 8});
    st = st ? st : mn_graph_param(g, &fw, "fc.weight", 2, (int64_t[]){8, 4}, ku);
    st = st ? st : mn_graph_param(g, &fb, "fc.bias", 1, (int64_t[]){4}, zero);
    st = st ? st : mn_matmul(g, &logits, flat, fw);
    st = st ? st : mn_add(g, &logits, logits, fb);
    st = st ? st : mn_cross_entropy(g, &loss, logits, lab);
    st = st ? st : mn_graph_output(g, logits, "logits");
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    return g;
}

static void batch(unsigned step, float *x, int32_t *y) {
    unsigned s = step * 2654435761u + 7;
    for (int b = 0; b < B; b++) {
        s = s * 1664525u + 1013904223u;
        int cls = (int)((s >> 10) % 4), qy = cls / 2, qx = cls % 2;
        y[b] = cls;
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 8; i++)
                for (int j = 0; j < 8; j++) {
                    s = s * 1664525u + 1013904223u;
                    float noise = (float)((s >> 9) % 1000) / 1000.0f - 0.5f;
                    bool blob = i / 4 == qy && j / 4 == qx;
                    x[((b * 3 + c) * 8 + i) * 8 + j] = (blob ? 1.0f + 0.3f * (float)c : 0.0f) + 0.5f * noise;
                }
    }
}

static mn_session *session(const mn_graph *g, mn_backend_kind be, mn_mode mode) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.mode = mode;
    o.optim = mn_optimizer_default(MN_OPTIM_ADAMW);
    o.optim.lr = 0.01f;
    o.seed = 3;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    return s;
}

int main(void) {
    mn_device *probe = th_require_vulkan(); /* the sessions open their own */
    if (!probe) return th_finish("test_resnet");
    mn_device_close(probe);
    mn_graph *g = build(true);
    mn_session *s[2] = {session(g, MN_BACKEND_CPU, MN_MODE_TRAINING), session(g, MN_BACKEND_VULKAN, MN_MODE_TRAINING)};
    float loss[2][STEPS];
    float x[B * 3 * 64];
    int32_t y[B];
    double worst = 0;
    for (int t = 0; t < STEPS; t++) {
        batch((unsigned)t, x, y);
        for (int k = 0; k < 2; k++) {
            if (!s[k]) continue;
            CHECK_OK(mn_session_set_input(s[k], "x", x, sizeof x), mn_session_error(s[k]));
            CHECK_OK(mn_session_set_input(s[k], "labels", y, sizeof y), mn_session_error(s[k]));
            CHECK_OK(mn_session_step(s[k]), mn_session_error(s[k]));
            CHECK_OK(mn_session_loss(s[k], &loss[k][t]), mn_session_error(s[k]));
        }
        double d = fabs((double)loss[0][t] - loss[1][t]) / (fabs((double)loss[0][t]) + 1e-3);
        if (d > worst) worst = d;
    }
    for (int k = 0; k < 2; k++) {
        float start = (loss[k][0] + loss[k][1]) / 2, end = (loss[k][STEPS - 1] + loss[k][STEPS - 2]) / 2;
        printf("%s: loss %.4f -> %.4f\n", k ? "vulkan" : "cpu", start, end);
        CHECK_MSG(end < 0.4f * start, "%s: the loss did not fall well below its start (%.4f -> %.4f)",
                  k ? "vulkan" : "cpu", start, end);
    }
    /* f32 on both sides; the curves drift apart only by rounding */
    printf("largest relative loss difference CPU vs Vulkan over %d steps: %.2e\n", STEPS, worst);
    CHECK_MSG(worst < 1e-3, "CPU and Vulkan losses differ by %.3g (relative)", worst);
    float rm[2][8];
    for (int k = 0; k < 2; k++) CHECK_OK(mn_session_get_param(s[k], "block.a.bn.running_mean", rm[k], 8), "");
    double moved = 0, diff = 0;
    for (int i = 0; i < 8; i++) {
        moved += fabs(rm[0][i]);
        diff += fabs(rm[0][i] - rm[1][i]);
    }
    CHECK_MSG(moved > 1e-3, "BatchNorm running mean did not move");
    CHECK_MSG(diff < 1e-3 * (moved + 1e-6) * 8, "running means differ between backends: %g", diff);

    /* inference graph (running statistics) from the Vulkan checkpoint */
    char path[] = "/tmp/mn-resnet-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    CHECK_OK(mn_session_save(s[1], path), mn_session_error(s[1]));
    mn_graph *gi = build(false);
    for (int k = 0; k < 2; k++) {
        mn_session *si = session(gi, k ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, MN_MODE_INFERENCE);
        if (!si) continue;
        CHECK_OK(mn_session_load(si, path), mn_session_error(si));
        int correct = 0;
        for (unsigned t = 1000; t < 1004; t++) {
            float lg[B * 4];
            batch(t, x, y);
            mn_session_set_input(si, "x", x, sizeof x);
            mn_session_set_input(si, "labels", y, sizeof y);
            CHECK_OK(mn_session_run(si), mn_session_error(si));
            CHECK_OK(mn_session_output(si, "logits", lg, sizeof lg), mn_session_error(si));
            for (int b = 0; b < B; b++) {
                int best = 0;
                for (int c = 1; c < 4; c++)
                    if (lg[b * 4 + c] > lg[b * 4 + best]) best = c;
                correct += best == y[b];
            }
        }
        printf("%s inference with running statistics: %d/%d correct\n", k ? "vulkan" : "cpu", correct, 4 * B);
        CHECK_MSG(correct >= 3 * B, "held-out accuracy %d/%d", correct, 4 * B);
        mn_session_destroy(si);
    }
    unlink(path);
    mn_graph_destroy(gi);
    mn_session_destroy(s[0]);
    mn_session_destroy(s[1]);
    mn_graph_destroy(g);
    return th_finish("test_resnet");
}
