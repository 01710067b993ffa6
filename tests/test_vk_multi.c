/* test_vk_multi.c - the multi-tensor optimizer kernels (kir.h,
 * vk_gen_multi.c) against the per-parameter path (MEGANEURA_FUSION=nomulti:
 * one update and one sum of squares per parameter) and the CPU reference.
 *
 * Model: an MLP whose parameters have awkward sizes (1, 5, 37 elements:
 * padding between them in the parallel regions; 11100: several workgroups
 * and several sum-of-squares blocks), learning-rate multipliers that differ
 * per parameter, a frozen parameter in the middle and an output read by
 * the user. For SGD (plain with weight decay; momentum with Nesterov),
 * Adam with clipping, AdamW, and the non-finite policies skip (a NaN batch
 * at step 2: nothing moves), apply and unchecked (with and without
 * clipping), four steps on lavapipe with the multi-tensor kernels give the
 * same bits as the per-parameter kernels, in every parameter and every
 * optimizer state tensor, and match the CPU; the step dispatches fewer
 * kernels and the kernels dump names the multi-tensor ones. With bindings
 * of 16 KiB (MEGANEURA_VK_MAX_ALLOCATION) the largest parameter is paged
 * and keeps its own kernels, the others split into several regions, and
 * the results are again the same bits. A checkpoint written by a
 * multi-tensor session and resumed by a per-parameter one (and the other
 * way round) continues bit for bit like an uninterrupted run.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "session/session.h"

#define SH(...) (const int64_t[]){__VA_ARGS__}
enum { B = 4, NIN = 13, H1 = 37, H2 = 300, NOUT = 5, STEPS = 4 };

static mn_graph *build(void) {
    mn_graph *g = NULL;
    if (mn_graph_create(&g)) return NULL;
    mn_tensor x, t, w1, b1, fr, w2, b2, w3, b3, s, h, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, nz = {MN_INIT_UNIFORM, -0.1f, 0.1f}, one = {MN_INIT_CONSTANT, 1, 0};
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, SH(B, NIN));
    st = st ? st : mn_graph_input(g, &t, "t", MN_F32, 2, SH(B, NOUT));
    st = st ? st : mn_graph_param(g, &w1, "w1", 2, SH(NIN, H1), ku);
    st = st ? st : mn_graph_param(g, &b1, "b1", 1, SH(H1), nz);
    st = st ? st : mn_graph_param(g, &fr, "frozen", 1, SH(H1), nz);
    st = st ? st : mn_graph_param(g, &w2, "w2", 2, SH(H1, H2), ku);
    st = st ? st : mn_graph_param(g, &b2, "b2", 1, SH(H2), nz);
    st = st ? st : mn_graph_param(g, &w3, "w3", 2, SH(H2, NOUT), ku);
    st = st ? st : mn_graph_param(g, &b3, "b3", 1, SH(NOUT), nz);
    st = st ? st : mn_graph_param(g, &s, "gain", 1, SH(1), one);
    st = st ? st : mn_graph_param_lr_mult(g, w1, 0.5f);
    st = st ? st : mn_graph_param_lr_mult(g, b2, 2.0f);
    st = st ? st : mn_graph_param_lr_mult(g, s, 0.0f); /* updated with a rate of 0: weight decay alone */
    st = st ? st : mn_graph_param_freeze(g, fr, true);
    st = st ? st : mn_matmul(g, &h, x, w1);
    st = st ? st : mn_add(g, &h, h, b1);
    st = st ? st : mn_add(g, &h, h, fr);
    st = st ? st : mn_tanh(g, &h, h);
    st = st ? st : mn_matmul(g, &h, h, w2);
    st = st ? st : mn_add(g, &h, h, b2);
    st = st ? st : mn_relu(g, &h, h);
    st = st ? st : mn_graph_output(g, h, "hidden");
    st = st ? st : mn_matmul(g, &h, h, w3);
    st = st ? st : mn_add(g, &h, h, b3);
    st = st ? st : mn_mul(g, &h, h, s);
    st = st ? st : mn_mse(g, &loss, h, t);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    if (st) {
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

typedef struct cfg {
    const char *name;
    mn_optim_kind optim;
    float momentum, wd, clip;
    bool nesterov;
    mn_nonfinite nf;
    bool nan_step; /* a NaN in the batch of step 2 */
} cfg;

static const cfg cfgs[] = {
    {"sgd+wd", MN_OPTIM_SGD, 0.0f, 0.01f, 0.0f, false, MN_NONFINITE_SKIP, false},
    {"sgd nesterov, skip", MN_OPTIM_SGD, 0.9f, 0.0f, 0.0f, true, MN_NONFINITE_SKIP, true},
    {"adam clip, skip", MN_OPTIM_ADAM, 0, 0.0f, 0.05f, false, MN_NONFINITE_SKIP, true},
    {"adamw, apply", MN_OPTIM_ADAMW, 0, 0.1f, 0.0f, false, MN_NONFINITE_APPLY, false},
    {"adamw clip, unchecked", MN_OPTIM_ADAMW, 0, 0.1f, 0.02f, false, MN_NONFINITE_UNCHECKED, false},
    {"adam, unchecked", MN_OPTIM_ADAM, 0, 0.0f, 0.0f, false, MN_NONFINITE_UNCHECKED, false},
};

static mn_session *open_s(const mn_graph *g, const cfg *c, mn_backend_kind be, const char *fusion) {
    if (fusion) setenv("MEGANEURA_FUSION", fusion, 1);
    else unsetenv("MEGANEURA_FUSION");
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.mode = MN_MODE_TRAINING;
    o.optim = mn_optimizer_default(c->optim);
    o.optim.lr = 0.03f;
    o.optim.momentum = c->momentum;
    o.optim.nesterov = c->nesterov;
    o.optim.weight_decay = c->wd;
    o.optim.clip_norm = c->clip;
    o.nonfinite = c->nf;
    o.seed = 11;
    mn_session *s = NULL;
    const mn_status st = mn_session_create(&s, g, &o);
    CHECK_MSG(st == MN_OK, "%s: session: %s", c->name, mn_session_error(s));
    unsetenv("MEGANEURA_FUSION");
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static void batch(int step, float *x, float *t, bool nan) {
    unsigned r = 2654435761u * (unsigned)(step + 1);
    for (int i = 0; i < B * NIN; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = (float)((r >> 8) % 2001) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < B * NOUT; i++) {
        r = r * 1664525u + 1013904223u;
        t[i] = (float)((r >> 8) % 2001) / 2000.0f - 0.5f;
    }
    if (nan) x[5] = NAN;
}

/* Every parameter and optimizer state tensor of s, in node order. */
typedef struct snap {
    float *v;
    size_t n;
    float loss[STEPS];
    int kernels, multi;
} snap;

static size_t state_size(const mn_session *s) {
    size_t n = 0;
    for (int32_t i = 0; i < s->g->n; i++) {
        const node *d = &s->g->nodes[i];
        if (d->op == OP_PARAM || (d->op == OP_STATE && (d->flags & NODE_F_OPTIM))) n += (size_t)node_numel(d);
    }
    return n;
}

static void take(snap *sn, mn_session *s) {
    sn->n = state_size(s);
    sn->v = malloc(sn->n * sizeof *sn->v + 1);
    size_t at = 0;
    for (int32_t i = 0; sn->v && i < s->g->n; i++) {
        const node *d = &s->g->nodes[i];
        if (d->op != OP_PARAM && !(d->op == OP_STATE && (d->flags & NODE_F_OPTIM))) continue;
        CHECK_OK(session_read_f32(s, i, sn->v + at, (size_t)node_numel(d)), mn_session_error(s));
        at += (size_t)node_numel(d);
    }
}

/* Kernels per step and multi-tensor kernels, from the kernels dump. */
static void count_kernels(snap *sn, const mn_session *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sn->kernels = sn->multi = -1;
    if (!f) return;
    mn_session_dump(s, "kernels", f);
    fclose(f);
    if (buf && sscanf(buf, "kernels: %d", &sn->kernels) == 1) {
        sn->multi = 0;
        for (const char *p = buf; (p = strstr(p, "(multi-tensor")); p++) sn->multi++;
    }
    free(buf);
}

/* STEPS steps from step `from` of session s (nan_step honoured). */
static void run_steps(snap *sn, mn_session *s, const cfg *c, int from, int to) {
    float x[B * NIN], t[B * NOUT];
    for (int k = from; k < to; k++) {
        batch(k, x, t, c->nan_step && k == 2);
        CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "t", t, sizeof t), mn_session_error(s));
        const mn_status st = mn_session_step(s);
        const bool bad = c->nan_step && k == 2 && c->nf != MN_NONFINITE_UNCHECKED;
        CHECK_MSG(bad ? st == MN_E_NONFINITE : st == MN_OK, "%s step %d: %s", c->name, k, mn_session_error(s));
        sn->loss[k] = NAN;
        mn_session_loss(s, &sn->loss[k]);
    }
}

static bool train(snap *sn, const mn_graph *g, const cfg *c, mn_backend_kind be, const char *fusion) {
    memset(sn, 0, sizeof *sn);
    mn_session *s = open_s(g, c, be, fusion);
    if (!s) return false;
    run_steps(sn, s, c, 0, STEPS);
    take(sn, s);
    count_kernels(sn, s);
    mn_session_destroy(s);
    return sn->v != NULL;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The multi-tensor and per-parameter paths on Vulkan (and the CPU): same
 * bits, a CPU match, fewer dispatches. want_multi: the multi-tensor kernels
 * the plan should have (updates and sums of squares). */
static void compare(const mn_graph *g, const cfg *c, const char *limit, int want_multi) {
    snap cpu, multi, per;
    CHECK(train(&cpu, g, c, MN_BACKEND_CPU, NULL));
    CHECK(train(&multi, g, c, MN_BACKEND_VULKAN, NULL));
    CHECK(train(&per, g, c, MN_BACKEND_VULKAN, "nomulti"));
    if (!cpu.v || !multi.v || !per.v || multi.n != cpu.n || per.n != cpu.n) {
        CHECK_MSG(false, "%s (%s): runs failed", c->name, limit);
    } else {
        CHECK_MSG(memcmp(multi.v, per.v, cpu.n * sizeof *cpu.v) == 0,
                  "%s (%s): multi-tensor and per-parameter kernels differ", c->name, limit);
        CHECK_MSG(memcmp(multi.loss, per.loss, sizeof multi.loss) == 0, "%s (%s): losses differ", c->name, limit);
        const double rel = rel_l2(multi.v, cpu.v, cpu.n);
        CHECK_MSG(rel < 2e-5, "%s (%s): parameters and state vs the CPU: rel L2 %.3g", c->name, limit, rel);
        for (int k = 0; k < STEPS; k++)
            CHECK_MSG(fabsf(multi.loss[k] - cpu.loss[k]) <= 1e-5f * fabsf(cpu.loss[k]) + 1e-7f,
                      "%s (%s): loss %d %.9g vs CPU %.9g", c->name, limit, k, (double)multi.loss[k], (double)cpu.loss[k]);
    }
    CHECK_MSG(multi.multi == want_multi && per.multi == 0, "%s (%s): %d multi-tensor kernels (want %d), %d per-parameter",
              c->name, limit, multi.multi, want_multi, per.multi);
    CHECK_MSG(multi.kernels > 0 && multi.kernels < per.kernels, "%s (%s): %d kernels multi-tensor, %d per-parameter",
              c->name, limit, multi.kernels, per.kernels);
    printf("%-24s %-9s kernels per step: %d multi-tensor (%d of them), %d per-parameter\n", c->name, limit,
           multi.kernels, multi.multi, per.kernels);
    free(cpu.v);
    free(multi.v);
    free(per.v);
}

/* N steps, save, resume in a session of the other path, N more: the same
 * bits as 2N uninterrupted steps. */
static void checkpoint(const mn_graph *g, const cfg *c) {
    char path[] = "/tmp/mn-multi-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    snap whole;
    CHECK(train(&whole, g, c, MN_BACKEND_VULKAN, NULL));
    for (int k = 0; k < 2; k++) {
        mn_session *a = open_s(g, c, MN_BACKEND_VULKAN, k ? "nomulti" : NULL);
        mn_session *b = open_s(g, c, MN_BACKEND_VULKAN, k ? NULL : "nomulti");
        snap sn;
        memset(&sn, 0, sizeof sn);
        if (a && b) {
            run_steps(&sn, a, c, 0, STEPS / 2);
            CHECK_OK(mn_session_save(a, path), mn_session_error(a));
            CHECK_OK(mn_session_load(b, path), mn_session_error(b));
            run_steps(&sn, b, c, STEPS / 2, STEPS);
            take(&sn, b);
            CHECK_MSG(sn.v && whole.v && sn.n == whole.n && memcmp(sn.v, whole.v, sn.n * sizeof *sn.v) == 0,
                      "%s: resumed %s -> %s differs from the uninterrupted run", c->name, k ? "per-parameter" : "multi",
                      k ? "multi" : "per-parameter");
        }
        free(sn.v);
        mn_session_destroy(a);
        mn_session_destroy(b);
    }
    free(whole.v);
    unlink(path);
}

int main(void) {
    mn_device *probe = th_require_vulkan(); /* the sessions open their own (the binding limit is read at opening) */
    if (!probe) return th_finish("test_vk_multi");
    mn_device_close(probe);
    unsetenv("MEGANEURA_VK_MAX_ALLOCATION");
    mn_graph *g = build();
    if (!g) return th_finish("test_vk_multi");
    /* one region: an update kernel, a sum-of-squares kernel where the
     * gradients' norm is needed (check or clipping) */
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        const bool norm = cfgs[i].nf != MN_NONFINITE_UNCHECKED || cfgs[i].clip > 0;
        compare(g, &cfgs[i], "one region", norm ? 2 : 1);
    }
    /* 16 KiB bindings: w2 (44 KB) paged on its own; [w1, b1] and [b2, w3,
     * b3, gain] two regions; the sums of squares of the six in two trees */
    setenv("MEGANEURA_VK_MAX_ALLOCATION", "16384", 1);
    compare(g, &cfgs[2], "16 KiB", 3);
    unsetenv("MEGANEURA_VK_MAX_ALLOCATION");
    checkpoint(g, &cfgs[3]);
    mn_graph_destroy(g);
    return th_finish("test_vk_multi");
}
