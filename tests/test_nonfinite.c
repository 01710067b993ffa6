/* test_nonfinite.c - training steps that meet a NaN or infinite loss or
 * gradient (issue 7), on the CPU and on Vulkan (lavapipe here; skipped with a
 * SKIP line when no device opens).
 *
 * Model: conv2d -> batch_norm2d (training: running statistics) -> mse, with
 * Adam, SGD with momentum, and Adam with clipping. For each policy of
 * mn_session_options.nonfinite:
 *  - skip (default): a NaN input makes mn_session_step return MN_E_NONFINITE
 *    with the loss in the message; parameters, optimizer state, running
 *    statistics and the step count are bit for bit unchanged, and so is a
 *    checkpoint saved afterwards; the next finite steps give exactly what a
 *    twin session that never saw the bad batch gives;
 *  - apply: reported, but applied (the step counts, the weights go NaN);
 *  - unchecked: MN_OK and no step_gate in the session.
 * Also: a finite loss with a NaN gradient is reported as a gradient problem;
 * with clipping the gate's coefficient equals clip_coef's (same weights as
 * an unchecked session); an unknown policy is refused at creation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "state_util.h"

#define S(...) (const int64_t[]){__VA_ARGS__}
#define NX (4 * 1 * 4 * 4)
#define NT (4 * 2 * 4 * 4)

static mn_graph *build(void) {
    mn_graph *g = NULL;
    if (mn_graph_create(&g)) return NULL;
    mn_tensor x, t, w, b, bw, bb, rm, rv, c, y, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, z = {MN_INIT_ZEROS, 0, 0}, one = {MN_INIT_CONSTANT, 1, 0};
    mn_conv2d_params cp = {{1, 1}, {1, 1}, {1, 1}, 1};
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 4, S(4, 1, 4, 4));
    st = st ? st : mn_graph_input(g, &t, "t", MN_F32, 4, S(4, 2, 4, 4));
    st = st ? st : mn_graph_param(g, &w, "conv.w", 4, S(2, 1, 3, 3), ku);
    st = st ? st : mn_graph_param(g, &b, "conv.b", 1, S(2), z);
    st = st ? st : mn_graph_param(g, &bw, "bn.w", 1, S(2), one);
    st = st ? st : mn_graph_param(g, &bb, "bn.b", 1, S(2), z);
    st = st ? st : mn_graph_param(g, &rm, "bn.rm", 1, S(2), z);
    st = st ? st : mn_graph_param(g, &rv, "bn.rv", 1, S(2), one);
    st = st ? st : mn_conv2d(g, &c, x, w, b, &cp);
    st = st ? st : mn_batch_norm2d(g, &y, c, bw, bb, rm, rv, 0.1f, 1e-5f, true);
    st = st ? st : mn_mse(g, &loss, y, t);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    if (st) {
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

typedef struct cfg {
    mn_backend_kind backend;
    mn_optim_kind optim;
    float clip;
    mn_nonfinite nf;
} cfg;

static mn_device *g_vk;

static mn_session *open_s(const mn_graph *g, cfg c) {
    mn_session_options o = mn_session_default_options();
    o.backend = c.backend;
    o.device = c.backend == MN_BACKEND_VULKAN ? g_vk : NULL;
    o.mode = MN_MODE_TRAINING;
    o.optim = mn_optimizer_default(c.optim);
    o.optim.lr = 0.05f;
    if (c.optim == MN_OPTIM_SGD) o.optim.momentum = 0.9f;
    o.optim.clip_norm = c.clip;
    o.nonfinite = c.nf;
    o.seed = 7;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

/* Batch k: deterministic values; poison != 0 puts a NaN (1) or an inf (2) in x. */
static void feed(mn_session *s, int k, int poison) {
    float x[NX], t[NT];
    for (int i = 0; i < NX; i++) x[i] = (float)((i * 37 + k * 11) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < NT; i++) t[i] = (float)((i * 13 + k * 5) % 11) / 5.0f - 1.0f;
    if (poison == 1) x[5] = NAN;
    if (poison == 2) x[5] = INFINITY;
    CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "t", t, sizeof t), mn_session_error(s));
}

static bool all_finite(const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return false;
    return true;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = n > 0 ? malloc((size_t)n) : NULL;
    *len = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static const char *bk(mn_backend_kind b) { return b == MN_BACKEND_VULKAN ? "vulkan" : "cpu"; }

/* skip: the bad step changes nothing; training goes on as if it never came. */
static void test_skip(const mn_graph *g, cfg c, int poison) {
    char what[96];
    snprintf(what, sizeof what, "%s %s%s %s", bk(c.backend), c.optim == MN_OPTIM_SGD ? "sgd" : "adam",
             c.clip > 0 ? "+clip" : "", poison == 1 ? "nan" : "inf");
    mn_session *s = open_s(g, c), *twin = open_s(g, c);
    if (!s || !twin) {
        mn_session_destroy(s);
        mn_session_destroy(twin);
        return;
    }
    for (int k = 0; k < 2; k++) {
        feed(s, k, 0);
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        feed(twin, k, 0);
        CHECK_OK(mn_session_step(twin), mn_session_error(twin));
    }
    char pa[128], pb[128];
    snprintf(pa, sizeof pa, "/tmp/mn-nonfinite-%ld-a.ckpt", (long)getpid());
    snprintf(pb, sizeof pb, "/tmp/mn-nonfinite-%ld-b.ckpt", (long)getpid());
    CHECK_OK(mn_session_save(s, pa), mn_session_error(s));
    size_t n0, n1;
    float *before = th_snapshot(s, &n0);
    const float lr_before = mn_session_lr(s);
    feed(s, 2, poison);
    mn_status st = mn_session_step(s);
    CHECK_MSG(st == MN_E_NONFINITE, "%s: bad step -> %s (%s)", what, mn_status_str(st), mn_session_error(s));
    CHECK_HAS(mn_session_error(s), "the loss is not finite");
    CHECK_HAS(mn_session_error(s), "skipped");
    CHECK_HAS(mn_session_error(s), poison == 1 ? "loss nan" : "loss ");
    float loss = 0;
    CHECK_OK(mn_session_loss(s, &loss), mn_session_error(s));
    CHECK_MSG(!isfinite(loss), "%s: the loss of the bad step reads %g", what, (double)loss);
    CHECK(mn_session_step_count(s) == 2);
    CHECK(mn_session_lr(s) == lr_before);
    float *after = th_snapshot(s, &n1);
    CHECK_MSG(before && after && n0 == n1 && memcmp(before, after, n0 * sizeof *before) == 0,
              "%s: parameters or optimizer state changed by a skipped step", what);
    CHECK(after && all_finite(after, n1));
    /* the checkpoint is unaffected */
    CHECK_OK(mn_session_save(s, pb), mn_session_error(s));
    size_t la = 0, lb = 0;
    unsigned char *fa = slurp(pa, &la), *fb = slurp(pb, &lb);
    CHECK_MSG(fa && fb && la == lb && memcmp(fa, fb, la) == 0, "%s: checkpoint differs after a skipped step", what);
    free(fa), free(fb);
    unlink(pa), unlink(pb);
    /* the next finite steps: as if the bad batch never came */
    for (int k = 3; k < 5; k++) {
        feed(s, k, 0);
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        feed(twin, k, 0);
        CHECK_OK(mn_session_step(twin), mn_session_error(twin));
    }
    CHECK(mn_session_step_count(s) == 4 && mn_session_step_count(twin) == 4);
    size_t n2, n3;
    float *mine = th_snapshot(s, &n2), *ref = th_snapshot(twin, &n3);
    CHECK_MSG(mine && ref && n2 == n3 && memcmp(mine, ref, n2 * sizeof *mine) == 0,
              "%s: after the skip, training differs from a session that never saw the bad batch", what);
    CHECK_MSG(mine && before && memcmp(mine, before, n0 * sizeof *mine) != 0, "%s: finite steps changed nothing",
              what);
    free(before), free(after), free(mine), free(ref);
    mn_session_destroy(twin);
    mn_session_destroy(s);
}

/* apply: reported, applied, counted. */
static void test_apply(const mn_graph *g, mn_backend_kind b) {
    cfg c = {b, MN_OPTIM_ADAM, 0.0f, MN_NONFINITE_APPLY};
    mn_session *s = open_s(g, c);
    if (!s) return;
    feed(s, 0, 0);
    CHECK_OK(mn_session_step(s), mn_session_error(s));
    feed(s, 1, 1);
    CHECK(mn_session_step(s) == MN_E_NONFINITE);
    CHECK_HAS(mn_session_error(s), "applied");
    CHECK(mn_session_step_count(s) == 2);
    size_t n;
    float *v = th_snapshot(s, &n);
    CHECK_MSG(v && !all_finite(v, n), "%s apply: the NaN update was not applied", bk(b));
    free(v);
    mn_session_destroy(s);
}

/* unchecked: no gate, MN_OK even for NaN (and the weights go NaN). */
static void test_unchecked(const mn_graph *g, mn_backend_kind b) {
    cfg c = {b, MN_OPTIM_SGD, 0.0f, MN_NONFINITE_UNCHECKED};
    mn_session *s = open_s(g, c);
    if (!s) return;
    int gates = 0;
    for (int32_t i = 0; i < s->g->n; i++) gates += s->g->nodes[i].op == OP_STEP_GATE;
    CHECK(gates == 0 && s->gate == MN_NONE);
    feed(s, 0, 1);
    CHECK_OK(mn_session_step(s), mn_session_error(s));
    CHECK(mn_session_step_count(s) == 1);
    size_t n;
    float *v = th_snapshot(s, &n);
    CHECK(v && !all_finite(v, n));
    free(v);
    mn_session_destroy(s);
}

/* With clipping, the gate's coefficient is clip_coef's: same weights as an
 * unchecked session over finite steps. */
static void test_clip_same(const mn_graph *g, mn_backend_kind b) {
    cfg cc = {b, MN_OPTIM_ADAM, 0.05f, MN_NONFINITE_SKIP}, cu = cc;
    cu.nf = MN_NONFINITE_UNCHECKED;
    mn_session *s = open_s(g, cc), *u = open_s(g, cu);
    if (s && u) {
        for (int k = 0; k < 3; k++) {
            feed(s, k, 0);
            CHECK_OK(mn_session_step(s), mn_session_error(s));
            feed(u, k, 0);
            CHECK_OK(mn_session_step(u), mn_session_error(u));
        }
        size_t n1, n2;
        float *a = th_snapshot(s, &n1), *bb = th_snapshot(u, &n2);
        CHECK_MSG(a && bb && n1 == n2 && memcmp(a, bb, n1 * sizeof *a) == 0,
                  "%s: clipping through the step gate differs from clip_coef", bk(b));
        free(a), free(bb);
    }
    mn_session_destroy(s);
    mn_session_destroy(u);
}

/* A finite loss whose gradient is NaN: sum(sqrt(w * x)) with x = 0 somewhere
 * (d/dw = x / (2 sqrt(w x)) = 0 / 0). */
static void test_gradient_only(mn_backend_kind b) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor x, w, p, r, l;
    mn_init one = {MN_INIT_CONSTANT, 1, 0};
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 1, S(2));
    st = st ? st : mn_graph_param(g, &w, "w", 1, S(2), one);
    st = st ? st : mn_mul(g, &p, w, x);
    st = st ? st : mn_sqrt(g, &r, p);
    st = st ? st : mn_sum(g, &l, r, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(g, l);
    CHECK_OK(st, mn_graph_error(g));
    cfg c = {b, MN_OPTIM_SGD, 0.0f, MN_NONFINITE_SKIP};
    mn_session *s = st ? NULL : open_s(g, c);
    if (s) {
        const float xv[2] = {0.0f, 4.0f};
        float wv[2] = {0};
        CHECK_OK(mn_session_set_input(s, "x", xv, sizeof xv), mn_session_error(s));
        CHECK(mn_session_step(s) == MN_E_NONFINITE);
        CHECK_HAS(mn_session_error(s), "gradients are not finite");
        CHECK_MSG(!th_has(mn_session_error(s), "loss is not finite"), "message: %s", mn_session_error(s));
        CHECK_HAS(mn_session_error(s), "(loss 2)");
        CHECK_OK(mn_session_get_param(s, "w", wv, 2), mn_session_error(s));
        CHECK(wv[0] == 1.0f && wv[1] == 1.0f);
        CHECK(mn_session_step_count(s) == 0);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void test_bad_policy(const mn_graph *g) {
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    CHECK(o.nonfinite == MN_NONFINITE_SKIP);
    o.nonfinite = (mn_nonfinite)7;
    mn_session *s = NULL;
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID);
    CHECK_HAS(mn_session_error(s), "nonfinite");
    mn_session_destroy(s);
    CHECK(strcmp(mn_status_str(MN_E_NONFINITE), "MN_E_NONFINITE") == 0);
}

int main(void) {
    mn_graph *g = build();
    if (!g) return th_finish("test_nonfinite");
    test_bad_policy(g);
    int nb = 1;
#ifdef MN_HAVE_VULKAN
    if (mn_device_open(&g_vk, MN_BACKEND_VULKAN) == MN_OK) nb = 2;
    else {
        printf("SKIP vulkan: %s\n", mn_device_error(g_vk));
        mn_device_close(g_vk);
        g_vk = NULL;
    }
#else
    printf("SKIP vulkan: not built\n");
#endif
    for (int b = 0; b < nb; b++) {
        mn_backend_kind be = b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
        test_skip(g, (cfg){be, MN_OPTIM_ADAM, 0.0f, MN_NONFINITE_SKIP}, 1);
        test_skip(g, (cfg){be, MN_OPTIM_SGD, 0.0f, MN_NONFINITE_SKIP}, 2);
        test_skip(g, (cfg){be, MN_OPTIM_ADAM, 0.5f, MN_NONFINITE_SKIP}, 1);
        test_apply(g, be);
        test_unchecked(g, be);
        test_clip_same(g, be);
        test_gradient_only(be);
    }
    mn_device_close(g_vk);
    mn_graph_destroy(g);
    return th_finish("test_nonfinite");
}
