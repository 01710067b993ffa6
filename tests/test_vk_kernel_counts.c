/* test_vk_kernel_counts.c - dispatches per step and per forward run of the
 * full-size workloads (SmolLM2-135M, ResNet-50, the MNIST MLP), from
 * plan-only sessions: the Vulkan backend's kernel plan and memory plan are
 * built as for a real session, but no device is opened and nothing is
 * allocated, so a 135M-parameter model costs a second. Counts are pinned
 * with fusion (MEGANEURA_FUSION unset) and without (=0, every node its own
 * kernel, as on the CPU), at two binding limits: lavapipe's 128 MiB and
 * 4 GiB (the H200's order): the multi-tensor optimizer dispatches once per
 * binding-sized region of parameters.
 *
 * SmolLM2-135M's training step took 3756 dispatches and ResNet-50's 2612
 * when issue 13's last part began; the fused counts must stay at most half
 * of those.
 *
 * Prints one line per workload (the counts the benchmarks report);
 * MN_COUNTS_VERBOSE=1 adds the dispatches by op of each plan.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "llama_util.h"
#include "session/session.h"
#include "../bench/resnet50.h"

/* Dispatching kernels of a session (the kernels dump's first line). */
static int kernel_count(const mn_session *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int k = -1;
    if (f) {
        mn_session_dump(s, "kernels", f);
        fclose(f);
        if (!buf || sscanf(buf, "kernels: %d", &k) != 1) k = -1;
        const char *by = buf ? strstr(buf, "  by root op:") : NULL;
        if (by && getenv("MN_COUNTS_VERBOSE")) printf("%.*s\n", (int)strcspn(by, "\n"), by);
    }
    free(buf);
    return k;
}

/* The dispatches of g's step (training) or run (inference) under fusion
 * "1" / "0" at the binding limit chunk; -1 if the plan failed. */
static int count(const mn_graph *g, mn_mode mode, const mn_optimizer *opt, const char *fusion, uint64_t chunk,
                 size_t *peak) {
    setenv("MEGANEURA_FUSION", fusion, 1);
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    o.mode = mode;
    if (opt) o.optim = *opt;
    session_internal_options io = {0};
    io.plan_only = true;
    io.plan_chunk = chunk;
    mn_session *s = NULL;
    const mn_status st = session_create_ex(&s, g, &o, &io);
    CHECK_MSG(st == MN_OK, "plan-only session: %s", mn_session_error(s));
    int k = -1;
    if (st == MN_OK) {
        k = kernel_count(s);
        if (peak) CHECK(mn_session_memory(s, peak, NULL) == MN_OK);
        float loss;
        CHECK(mn_session_step(s) == MN_E_STATE && mn_session_loss(s, &loss) == MN_E_STATE); /* runs nothing */
    }
    mn_session_destroy(s);
    unsetenv("MEGANEURA_FUSION");
    return k;
}

#define MIB (1ull << 20)

typedef struct expect {
    const char *name;
    int unfused, fused_128m, fused_4g;
    int start; /* issue 13's starting count (unfused, before the optimizer's sums of squares were joined): the
                  fused count must be at most half of it (0: no such goal) */
} expect;

static void report(const expect *e, const mn_graph *g, mn_mode mode, const mn_optimizer *opt) {
    size_t pu = 0, pf = 0, pn = 0;
    const int u = count(g, mode, opt, "0", 128 * MIB, &pu), f1 = count(g, mode, opt, "1", 128 * MIB, NULL),
              f4 = count(g, mode, opt, "1", 4096 * MIB, &pf), n4 = count(g, mode, opt, "nomulti", 4096 * MIB, &pn);
    printf("%-28s unfused %5d  fused %5d (128 MiB bindings)  %5d (4 GiB)  %.0f%% of unfused; without the "
           "multi-tensor optimizer %d; peak MB unfused %.1f fused %.1f nomulti %.1f\n", e->name, u, f1, f4,
           100.0 * f4 / (u > 0 ? u : 1), n4, pu / 1e6, pf / 1e6, pn / 1e6);
    CHECK_MSG(e->unfused < 0 || u == e->unfused, "%s: %d unfused dispatches, pinned %d", e->name, u, e->unfused);
    CHECK_MSG(e->fused_128m < 0 || f1 == e->fused_128m, "%s: %d fused dispatches (128 MiB), pinned %d", e->name, f1,
              e->fused_128m);
    CHECK_MSG(e->fused_4g < 0 || f4 == e->fused_4g, "%s: %d fused dispatches (4 GiB), pinned %d", e->name, f4,
              e->fused_4g);
    CHECK_MSG(!e->start || (2 * f1 <= e->start && 2 * f4 <= e->start), "%s: %d / %d fused dispatches, more than half "
              "of the %d at the start", e->name, f1, f4, e->start);
}

static void smollm2(void) {
    char dir[512], path[600], err[512];
    lu_fixtures(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/configs/smollm2-135m.json", dir);
    mn_llama_config cfg;
    CHECK_OK(mn_llama_config_load(&cfg, path, err, sizeof err), err);
    /* the attention forward writes the lse its backward reads (kir.h
     * KIR_SAVED): one attention_lse dispatch less per layer, 1517 -> 1487 */
    static const expect train = {"smollm2-135m train 1x128", 2417, 1491, 1487, 3756},
                        fwd = {"smollm2-135m forward 1x128", 603, 423, 423, 0};
    for (int k = 0; k < 2; k++) {
        mn_graph *g = NULL;
        mn_llama *m = NULL;
        mn_llama_options lo = mn_llama_default_options();
        lo.kind = k == 0 ? MN_LLAMA_TRAIN : MN_LLAMA_FORWARD;
        lo.batch = 1;
        lo.seq_len = 128;
        CHECK(mn_graph_create(&g) == MN_OK);
        CHECK_OK(mn_llama_create(&m, g, &cfg, &lo), mn_llama_error(m));
        mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAMW); /* bench_lm's */
        opt.lr = 1e-4f;
        if (m) report(k == 0 ? &train : &fwd, g, k == 0 ? MN_MODE_TRAINING : MN_MODE_INFERENCE, &opt);
        if (m && k == 0) { /* without saved statistics: an lse kernel per layer */
            const int ns = count(g, MN_MODE_TRAINING, &opt, "nosaved", (uint64_t)4 << 30, NULL);
            CHECK_MSG(ns == train.fused_4g + (int)cfg.num_hidden_layers, "smollm2 train, nosaved: %d dispatches, want %d", ns,
                      train.fused_4g + (int)cfg.num_hidden_layers);
        }
        mn_llama_destroy(m);
        mn_graph_destroy(g);
    }
}

static void resnet(void) {
    /* batch norm's mean gradient from the bias's per-channel sum of dy
     * (autodiff.c, bn_centring): 1998 -> 1997 unfused, 1236 -> 1129 fused
     * (no third per-channel sum, and dd is folded into the dx kernel);
     * the moments' gradients scaled at [1,C,1,1] (grad_bn_moment), folded
     * into the dx kernel: 1129 -> 1023; relu's and rsqrt's backward read
     * their output, not their input (autodiff.c dunary_of_y), so the
     * affine add and the ReLU, the eps add and the rsqrt fold: 921 */
    static const expect train = {"resnet-50 train 2x224", 1997, 921, 921, 2612},
                        infer = {"resnet-50 infer 1x224", 442, 78, 78, 0};
    for (int k = 0; k < 2; k++) {
        mn_graph *g = NULL;
        CHECK(mn_graph_create(&g) == MN_OK);
        CHECK_OK(resnet50_build(g, k == 0 ? 2 : 1, 224, 1000, k == 0), mn_graph_error(g));
        mn_optimizer opt = mn_optimizer_default(MN_OPTIM_SGD); /* the anchors': SGD, momentum 0.9 */
        opt.momentum = 0.9f;
        report(k == 0 ? &train : &infer, g, k == 0 ? MN_MODE_TRAINING : MN_MODE_INFERENCE, &opt);
        if (k == 0) {
            /* at batch 2, 12 weight gradients are split over K (autodiff.c,
             * wgrad_chunk), each finished by a sum over its parts:
             * MEGANEURA_WGRAD_SPLIT=0 (the knob that measures the split)
             * removes exactly those 12 dispatches */
            setenv("MEGANEURA_WGRAD_SPLIT", "0", 1);
            const int u = count(g, MN_MODE_TRAINING, &opt, "0", 128 * MIB, NULL);
            unsetenv("MEGANEURA_WGRAD_SPLIT");
            CHECK_MSG(u == train.unfused - 12, "resnet-50 train without the K split: %d unfused dispatches, want %d",
                      u, train.unfused - 12);
        }
        mn_graph_destroy(g);
    }
}

/* bench.c's mnist_mlp_b64: 784-128-10, Adam. */
static void mnist_mlp(void) {
    /* the ReLU folds into its matmul's epilogue (its backward reads its output): 16 -> 15 */
    static const expect train = {"mnist_mlp_b64 train", 25, 15, 15, 0}, infer = {"mnist_mlp_b64 infer", 7, 4, 4, 0};
    mn_graph *g = NULL;
    mn_tensor x, lab, h, w1, b1, w2, b2, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, z = {MN_INIT_ZEROS, 0, 0};
    CHECK(mn_graph_create(&g) == MN_OK);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){64, 784});
    st = st ? st : mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){64});
    st = st ? st : mn_graph_param(g, &w1, "f1.weight", 2, (int64_t[]){784, 128}, ku);
    st = st ? st : mn_graph_param(g, &b1, "f1.bias", 1, (int64_t[]){128}, z);
    st = st ? st : mn_graph_param(g, &w2, "f2.weight", 2, (int64_t[]){128, 10}, ku);
    st = st ? st : mn_graph_param(g, &b2, "f2.bias", 1, (int64_t[]){10}, z);
    st = st ? st : mn_matmul(g, &h, x, w1);
    st = st ? st : mn_add(g, &h, h, b1);
    st = st ? st : mn_relu(g, &h, h);
    st = st ? st : mn_matmul(g, &h, h, w2);
    st = st ? st : mn_add(g, &h, h, b2);
    st = st ? st : mn_cross_entropy(g, &loss, h, lab);
    st = st ? st : mn_graph_output(g, h, "logits");
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAM);
    report(&train, g, MN_MODE_TRAINING, &opt);
    report(&infer, g, MN_MODE_INFERENCE, &opt);
    mn_graph_destroy(g);
}

int main(void) {
    unsetenv("MEGANEURA_DUMP");
    smollm2();
    resnet();
    mnist_mlp();
    return th_finish("test_vk_kernel_counts");
}
