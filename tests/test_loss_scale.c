/* test_loss_scale.c - dynamic loss scaling (mn_session_options.loss_scale),
 * on the CPU and on Vulkan (lavapipe here; the Vulkan part is skipped with a
 * SKIP line when no device opens).
 *
 * Model: x [8, 16] -> matmul + bias -> relu -> matmul + bias -> mse, the
 * loss times a factor (2^-30 where the f16 operands must lose it).
 *  - exactness: scales are powers of two and the backward pass is linear in
 *    d loss, so a scaled session gives bit for bit the parameters, optimizer
 *    state and losses of an unscaled one (SGD with momentum, Adam, Adam with
 *    clipping), on each backend; the scale grows by `growth` every
 *    `interval` finite steps;
 *  - overflow: starting at 2^64 the scaled sum of squares overflows: the step
 *    returns MN_OK, nothing changes (parameters bit for bit, step count),
 *    the overflow is counted and the scale halves until steps go through;
 *    the run then equals an unscaled one;
 *  - f16: with the fast f16 contract and the loss times 2^-30 the weights'
 *    gradients round to zero in the f16 operands (Adam leaves the weights
 *    as they were); a scale of 2^24 brings them back: the first Adam step
 *    moves the weights as the strict f32 run does;
 *  - checkpoints keep the scale and the finite-step count: a session loaded
 *    from one goes on exactly like the one that saved it;
 *  - a non-finite loss is MN_E_NONFINITE and keeps the scale; bad settings
 *    are refused with messages; inference sessions ignore the setting.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "state_util.h"

#define S(...) (const int64_t[]){__VA_ARGS__}
#define NB 8
#define NI 16
#define NH 32
#define NO 4

static mn_graph *build(float factor) {
    mn_graph *g = NULL;
    if (mn_graph_create(&g)) return NULL;
    mn_tensor x, t, w1, b1, w2, b2, h, y, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, z = {MN_INIT_UNIFORM, -0.1f, 0.1f};
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, S(NB, NI));
    st = st ? st : mn_graph_input(g, &t, "t", MN_F32, 2, S(NB, NO));
    st = st ? st : mn_graph_param(g, &w1, "w1", 2, S(NI, NH), ku);
    st = st ? st : mn_graph_param(g, &b1, "b1", 1, S(NH), z);
    st = st ? st : mn_graph_param(g, &w2, "w2", 2, S(NH, NO), ku);
    st = st ? st : mn_graph_param(g, &b2, "b2", 1, S(NO), z);
    st = st ? st : mn_matmul(g, &h, x, w1);
    st = st ? st : mn_add(g, &h, h, b1);
    st = st ? st : mn_relu(g, &h, h);
    st = st ? st : mn_matmul(g, &y, h, w2);
    st = st ? st : mn_add(g, &y, y, b2);
    st = st ? st : mn_mse(g, &loss, y, t);
    if (factor != 1.0f) st = st ? st : mn_scale(g, &loss, loss, factor);
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
    mn_precision precision;
    mn_loss_scale ls;
} cfg;

static mn_device *g_vk;

static mn_session_options opts(cfg c) {
    mn_session_options o = mn_session_default_options();
    o.backend = c.backend;
    o.device = c.backend == MN_BACKEND_VULKAN ? g_vk : NULL;
    o.mode = MN_MODE_TRAINING;
    o.optim = mn_optimizer_default(c.optim);
    o.optim.lr = 0.01f;
    if (c.optim == MN_OPTIM_SGD) o.optim.lr = 0.05f, o.optim.momentum = 0.9f;
    else o.optim.eps = 1e-30f; /* Adam moves every weight whose gradient is not 0 */
    o.optim.clip_norm = c.clip;
    o.precision = c.precision;
    o.loss_scale = c.ls;
    o.seed = 11;
    return o;
}

static mn_session *open_s(const mn_graph *g, cfg c) {
    mn_session_options o = opts(c);
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

/* Batch k: deterministic values; nan puts a NaN into the target (so the loss). */
static void feed(mn_session *s, int k, bool nan) {
    float x[NB * NI], t[NB * NO];
    for (int i = 0; i < NB * NI; i++) x[i] = (float)((i * 37 + k * 11) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < NB * NO; i++) t[i] = (float)((i * 13 + k * 5) % 11) / 5.0f - 1.0f;
    if (nan) t[3] = NAN;
    CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "t", t, sizeof t), mn_session_error(s));
}

static bool same_state(mn_session *a, mn_session *b) {
    size_t na, nb;
    float *va = th_snapshot(a, &na), *vb = th_snapshot(b, &nb);
    const bool same = va && vb && na == nb && memcmp(va, vb, na * sizeof *va) == 0;
    free(va), free(vb);
    return same;
}

static float param0(mn_session *s, const char *name, float *dst, size_t n) {
    CHECK_OK(mn_session_get_param(s, name, dst, n), mn_session_error(s));
    return dst[0];
}

static const char *bk(mn_backend_kind b) { return b == MN_BACKEND_VULKAN ? "vulkan" : "cpu"; }

/* Scaled and unscaled twins step alike, bit for bit; the scale grows. */
static void exactness(mn_backend_kind be, mn_optim_kind optim, float clip) {
    mn_graph *g = build(1.0f);
    if (!g) return;
    cfg c = {be, optim, clip, MN_PRECISION_STRICT, {.init = 0}};
    mn_session *plain = open_s(g, c);
    c.ls = (mn_loss_scale){.init = 1024, .interval = 2};
    mn_session *scaled = open_s(g, c);
    if (plain && scaled) {
        CHECK(mn_session_loss_scale(plain, NULL) == 0.0f);
        CHECK(mn_session_loss_scale(scaled, NULL) == 1024.0f);
        bool losses = true;
        for (int k = 0; k < 10; k++) {
            feed(plain, k, false), feed(scaled, k, false);
            CHECK_OK(mn_session_step(plain), mn_session_error(plain));
            CHECK_OK(mn_session_step(scaled), mn_session_error(scaled));
            float la = 0, lb = 1;
            mn_session_loss(plain, &la), mn_session_loss(scaled, &lb);
            losses &= memcmp(&la, &lb, 4) == 0;
        }
        CHECK_MSG(losses, "%s %d clip %g: the scaled session's losses differ", bk(be), (int)optim, (double)clip);
        CHECK_MSG(same_state(plain, scaled), "%s optimizer %d clip %g: scaled parameters or state differ from the "
                  "unscaled run", bk(be), (int)optim, (double)clip);
        int64_t ov = -1;
        const float sc = mn_session_loss_scale(scaled, &ov);
        CHECK_MSG(sc == 32768.0f && ov == 0, "scale %g, %lld overflows after 10 finite steps (want 32768, 0)",
                  (double)sc, (long long)ov);
        CHECK(mn_session_step_count(scaled) == 10);
    }
    mn_session_destroy(plain), mn_session_destroy(scaled);
    mn_graph_destroy(g);
}

/* From 2^64 the scaled gradients overflow: skipped, counted, halved. */
static void overflow(mn_backend_kind be) {
    mn_graph *g = build(1.0f);
    if (!g) return;
    cfg c = {be, MN_OPTIM_ADAM, 0, MN_PRECISION_STRICT, {.init = 0}};
    mn_session *plain = open_s(g, c);
    c.ls = (mn_loss_scale){.init = 18446744073709551616.0f};
    mn_session *scaled = open_s(g, c);
    if (plain && scaled) {
        size_t n0;
        float *before = th_snapshot(scaled, &n0);
        feed(scaled, 0, false);
        CHECK_OK(mn_session_step(scaled), mn_session_error(scaled));
        int64_t ov = 0;
        CHECK_MSG(mn_session_loss_scale(scaled, &ov) == 9223372036854775808.0f && ov == 1,
                  "%s: after an overflow at 2^64 the scale is %g with %lld overflows (want 2^63, 1)", bk(be),
                  (double)mn_session_loss_scale(scaled, NULL), (long long)ov);
        CHECK(mn_session_step_count(scaled) == 0);
        size_t n1;
        float *after = th_snapshot(scaled, &n1);
        CHECK_MSG(before && after && n0 == n1 && !memcmp(before, after, n0 * 4),
                  "%s: an overflowed step changed the parameters or the optimizer state", bk(be));
        free(before), free(after);
        /* on until three steps went through; the skipped ones leave no trace */
        int tries = 0;
        while (mn_session_step_count(scaled) < 3 && tries++ < 80) {
            feed(scaled, (int)mn_session_step_count(scaled), false);
            CHECK_OK(mn_session_step(scaled), mn_session_error(scaled));
        }
        for (int k = 0; k < 3; k++) {
            feed(plain, k, false);
            CHECK_OK(mn_session_step(plain), mn_session_error(plain));
        }
        CHECK(mn_session_step_count(scaled) == 3);
        mn_session_loss_scale(scaled, &ov);
        CHECK_MSG(ov >= 1 && mn_session_loss_scale(scaled, NULL) < 9223372036854775808.0f,
                  "%s: %lld overflows, scale %g", bk(be), (long long)ov, (double)mn_session_loss_scale(scaled, NULL));
        CHECK_MSG(same_state(plain, scaled), "%s: after the overflows the run differs from the unscaled one", bk(be));
        /* a NaN in the data is the data's fault: MN_E_NONFINITE, scale kept */
        const float sc = mn_session_loss_scale(scaled, &ov);
        feed(scaled, 0, true);
        mn_status st = mn_session_step(scaled);
        CHECK(st == MN_E_NONFINITE);
        CHECK_HAS(mn_session_error(scaled), "the loss is not finite");
        int64_t ov2 = 0;
        CHECK(mn_session_loss_scale(scaled, &ov2) == sc && ov2 == ov);
        feed(scaled, 3, false);
        CHECK_OK(mn_session_step(scaled), mn_session_error(scaled));
        CHECK(mn_session_step_count(scaled) == 4);
    }
    mn_session_destroy(plain), mn_session_destroy(scaled);
    mn_graph_destroy(g);
}

/* f16 operands lose gradients of 2^-30; a scale of 2^24 keeps them. */
static void f16_underflow(mn_backend_kind be) {
    mn_graph *g = build(0x1p-30f);
    if (!g) return;
    cfg c = {be, MN_OPTIM_ADAM, 0, MN_PRECISION_STRICT, {.init = 0}};
    mn_session *ref = open_s(g, c);
    c.precision = MN_PRECISION_FAST_F16;
    mn_session *lost = open_s(g, c);
    c.ls = (mn_loss_scale){.init = 0x1p24f};
    mn_session *kept = open_s(g, c);
    enum { N1 = NI * NH, N2 = NH * NO };
    float w0[N1], wr[N1], wl[N1], wk[N1], v0[N2], vr[N2], vl[N2], vk[N2];
    if (ref && lost && kept) {
        param0(ref, "w1", w0, N1), param0(ref, "w2", v0, N2);
        mn_session *all[3] = {ref, lost, kept};
        for (int i = 0; i < 3; i++) {
            feed(all[i], 0, false);
            CHECK_OK(mn_session_step(all[i]), mn_session_error(all[i]));
        }
        param0(ref, "w1", wr, N1), param0(lost, "w1", wl, N1), param0(kept, "w1", wk, N1);
        param0(ref, "w2", vr, N2), param0(lost, "w2", vl, N2), param0(kept, "w2", vk, N2);
        int moved_ref = 0, moved_lost = 0, agree = 0, nz = 0;
        for (int i = 0; i < N1 + N2; i++) {
            const float a = i < N1 ? w0[i] : v0[i - N1], r = i < N1 ? wr[i] : vr[i - N1];
            const float l = i < N1 ? wl[i] : vl[i - N1], k = i < N1 ? wk[i] : vk[i - N1];
            moved_ref += r != a, moved_lost += l != a;
            if (r != a) nz++, agree += fabsf((k - a) - (r - a)) <= 1e-6f;
        }
        CHECK_MSG(moved_ref > (N1 + N2) / 2, "%s: the strict run moved only %d of %d weights", bk(be), moved_ref,
                  N1 + N2);
        CHECK_MSG(moved_lost == 0, "%s: without a loss scale the f16 operands should lose the 2^-30 gradients, yet "
                  "%d weights moved", bk(be), moved_lost);
        CHECK_MSG(agree >= nz * 95 / 100, "%s: with the scale only %d of %d weights moved as the strict run's", bk(be),
                  agree, nz);
    }
    mn_session_destroy(ref), mn_session_destroy(lost), mn_session_destroy(kept);
    mn_graph_destroy(g);
}

/* Growth and checkpoints: the loaded session goes on like the saver. */
static void growth_and_checkpoint(mn_backend_kind be) {
    mn_graph *g = build(1.0f);
    if (!g) return;
    cfg c = {be, MN_OPTIM_SGD, 0, MN_PRECISION_STRICT, {.init = 256, .interval = 3}};
    mn_session *a = open_s(g, c);
    c.ls.init = 2; /* the checkpoint's scale replaces it */
    mn_session *b = open_s(g, c);
    char path[] = "/tmp/mn-test-loss-scale-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    if (a && b && fd >= 0) {
        for (int k = 0; k < 7; k++) {
            feed(a, k, false);
            CHECK_OK(mn_session_step(a), mn_session_error(a));
        }
        CHECK_MSG(mn_session_loss_scale(a, NULL) == 1024.0f, "%s: scale %g after 7 steps of interval 3 from 256",
                  bk(be), (double)mn_session_loss_scale(a, NULL));
        CHECK_OK(mn_session_save(a, path), mn_session_error(a));
        char v[64] = "";
        CHECK_OK(mn_checkpoint_meta(path, "meganeura.loss_scale", v, sizeof v, NULL, 0), path);
        CHECK(strcmp(v, "1024") == 0);
        CHECK_OK(mn_checkpoint_meta(path, "meganeura.loss_scale_good", v, sizeof v, NULL, 0), path);
        CHECK(strcmp(v, "1") == 0);
        CHECK_OK(mn_session_load(b, path), mn_session_error(b));
        CHECK(mn_session_loss_scale(b, NULL) == 1024.0f);
        for (int k = 7; k < 9; k++) {
            feed(a, k, false), feed(b, k, false);
            CHECK_OK(mn_session_step(a), mn_session_error(a));
            CHECK_OK(mn_session_step(b), mn_session_error(b));
        }
        CHECK_MSG(mn_session_loss_scale(a, NULL) == 2048.0f && mn_session_loss_scale(b, NULL) == 2048.0f,
                  "%s: scales %g and %g after 9 steps (want 2048)", bk(be), (double)mn_session_loss_scale(a, NULL),
                  (double)mn_session_loss_scale(b, NULL));
        CHECK_MSG(same_state(a, b), "%s: the session loaded from the checkpoint went on differently", bk(be));
        unlink(path);
    }
    mn_session_destroy(a), mn_session_destroy(b);
    mn_graph_destroy(g);
}

static void expect_refused(const mn_graph *g, mn_loss_scale ls, mn_nonfinite nf, const char *word) {
    mn_session_options o = opts((cfg){MN_BACKEND_CPU, MN_OPTIM_ADAM, 0, MN_PRECISION_STRICT, ls});
    o.nonfinite = nf;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    CHECK_MSG(st == MN_E_INVALID, "loss_scale {%g, %g, %g, %d}: status %s", (double)ls.init, (double)ls.growth,
              (double)ls.backoff, ls.interval, mn_status_str(st));
    CHECK_HAS(mn_session_error(s), word);
    mn_session_destroy(s);
}

static void settings(void) {
    mn_graph *g = build(1.0f);
    if (!g) return;
    expect_refused(g, (mn_loss_scale){.init = 3}, MN_NONFINITE_SKIP, "power of two");
    expect_refused(g, (mn_loss_scale){.init = 0.5f}, MN_NONFINITE_SKIP, "[1, 2^64]");
    expect_refused(g, (mn_loss_scale){.init = -4}, MN_NONFINITE_SKIP, "loss_scale.init");
    expect_refused(g, (mn_loss_scale){.init = INFINITY}, MN_NONFINITE_SKIP, "loss_scale.init");
    expect_refused(g, (mn_loss_scale){.init = 0x1p65f}, MN_NONFINITE_SKIP, "[1, 2^64]");
    expect_refused(g, (mn_loss_scale){.init = 8, .growth = 1}, MN_NONFINITE_SKIP, "loss_scale.growth");
    expect_refused(g, (mn_loss_scale){.init = 8, .growth = 3}, MN_NONFINITE_SKIP, "loss_scale.growth");
    expect_refused(g, (mn_loss_scale){.init = 8, .backoff = 2}, MN_NONFINITE_SKIP, "loss_scale.backoff");
    expect_refused(g, (mn_loss_scale){.init = 8, .backoff = NAN}, MN_NONFINITE_SKIP, "loss_scale.backoff");
    expect_refused(g, (mn_loss_scale){.init = 8, .interval = -1}, MN_NONFINITE_SKIP, "loss_scale.interval");
    expect_refused(g, (mn_loss_scale){.init = 8}, MN_NONFINITE_APPLY, "nonfinite = skip");
    expect_refused(g, (mn_loss_scale){.init = 8}, MN_NONFINITE_UNCHECKED, "nonfinite = skip");
    /* inference: no backward pass, nothing to scale */
    mn_session_options o = opts((cfg){MN_BACKEND_CPU, MN_OPTIM_ADAM, 0, MN_PRECISION_STRICT, {.init = 3}});
    o.mode = MN_MODE_INFERENCE;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    int64_t ov = -1;
    CHECK(mn_session_loss_scale(s, &ov) == 0.0f && ov == 0);
    mn_session_destroy(s);
    CHECK(mn_session_loss_scale(NULL, &ov) == 0.0f && ov == 0);
    mn_graph_destroy(g);
}

int main(void) {
    mn_set_log(NULL, NULL);
    settings();
    const mn_backend_kind bes[2] = {MN_BACKEND_CPU, MN_BACKEND_VULKAN};
    for (int b = 0; b < 2; b++) {
        if (bes[b] == MN_BACKEND_VULKAN && !(g_vk = th_require_vulkan())) break;
        exactness(bes[b], MN_OPTIM_SGD, 0);
        exactness(bes[b], MN_OPTIM_ADAM, 0);
        exactness(bes[b], MN_OPTIM_ADAM, 0.5f);
        overflow(bes[b]);
        f16_underflow(bes[b]);
        growth_and_checkpoint(bes[b]);
    }
    mn_device_close(g_vk);
    return th_finish("test_loss_scale");
}
