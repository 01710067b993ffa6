/* test_onnx.c - the ONNX importer (include/meganeura_onnx.h) as a user hits
 * it, on models built here with protobuf-c (tests/onnx_build.h):
 *
 * 1. an MLP (Gemm, Relu, Gemm with transB) against a direct computation, on
 *    the CPU and on Vulkan;
 * 2. fine-tuning: a loss added on the imported logits, SGD steps on both
 *    backends (equal losses, falling), parameters under the initializer
 *    names (get_param, checkpoints), opt.freeze, re-initialising; batch
 *    norm's running statistics stay frozen while its scale trains;
 * 3. one error listing every unsupported item (an unknown operator, an
 *    unknown attribute, a dtype, a foreign domain), each naming its node;
 * 4. hostile bytes: every prefix of a model, byte flips, nesting beyond the
 *    limit, data sizes that disagree with shapes, 2^40 elements, indices out
 *    of range, undefined and redefined values, unresolved symbolic
 *    dimensions (and their sizes through the options);
 * 5. inputs and outputs in ONNX types: int64 ids (Gather as an embedding),
 *    bool conditions, ids beyond int32, exact int64 outputs computed at
 *    import (Shape), hints;
 * 6. two models in one graph under prefixes;
 * 6b. the composites standing in for missing kernels (comparisons, Max/Min,
 *    IsNaN, IsInf, ArgMax, Erf, Tan) and Sin, Cos on infinities, NaN, signed
 *    zeros, denormals and ties, against C's operators and libm, on both
 *    backends;
 * 7. the fuzzer's corpus (tests/fuzz/corpus_onnx) through its entry point.
 *
 * `test_onnx --write-seeds DIR` writes the models of this file as the fuzz
 * seed corpus.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "meganeura_onnx.h"
#include "onnx_build.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_err[1 << 16];

/* ---- models ------------------------------------------------------------------ */

/* x [4,3] -> Gemm(W1 [3,5], b1) -> Relu -> Gemm(W2 [2,5] transposed, b2) -> y [4,2] */
static const float W1[15] = {0.5f, -0.2f, 0.1f, 0.3f, -0.4f, 0.2f, 0.7f, -0.1f, 0.05f, 0.6f, -0.3f, 0.4f, 0.25f, -0.5f, 0.15f};
static const float B1[5] = {0.1f, -0.1f, 0.05f, 0.0f, 0.2f};
static const float W2[10] = {0.3f, -0.6f, 0.2f, 0.5f, -0.1f, -0.4f, 0.1f, 0.7f, -0.2f, 0.3f};
static const float B2[2] = {0.05f, -0.05f};

static uint8_t *mlp_model(size_t *len) {
    ob b;
    ob_init(&b, 13);
    const int64_t xd[2] = {4, 3}, yd[2] = {4, 2}, w1d[2] = {3, 5}, b1d[1] = {5}, w2d[2] = {2, 5}, b2d[1] = {2};
    ob_input(&b, "x", 1, 2, xd);
    ob_output(&b, "y", 1, 2, yd);
    ob_init_f32(&b, "W1", 2, w1d, W1);
    ob_init_f32(&b, "b1", 1, b1d, B1);
    ob_init_f32(&b, "W2", 2, w2d, W2);
    ob_init_f32(&b, "b2", 1, b2d, B2);
    ob_node(&b, "Gemm", "fc1", (const char *[]){"x", "W1", "b1", NULL}, (const char *[]){"h", NULL});
    ob_node(&b, "Relu", "act", (const char *[]){"h", NULL}, (const char *[]){"r", NULL});
    Onnx__NodeProto *n = ob_node(&b, "Gemm", "fc2", (const char *[]){"r", "W2", "b2", NULL}, (const char *[]){"y", NULL});
    ob_attr_int(&b, n, "transB", 1);
    uint8_t *buf = ob_pack(&b, len);
    ob_free(&b);
    return buf;
}

static void mlp_ref(const float *x, double *y) {
    for (int i = 0; i < 4; i++) {
        double h[5];
        for (int j = 0; j < 5; j++) {
            double s = B1[j];
            for (int k = 0; k < 3; k++) s += (double)x[i * 3 + k] * W1[k * 5 + j];
            h[j] = s > 0 ? s : 0;
        }
        for (int o = 0; o < 2; o++) {
            double s = B2[o];
            for (int j = 0; j < 5; j++) s += h[j] * W2[o * 5 + j];
            y[i * 2 + o] = s;
        }
    }
}

static const float X[12] = {1.0f, -0.5f, 0.25f, 0.3f, 0.8f, -1.2f, -0.7f, 0.4f, 0.9f, 0.0f, 1.5f, -0.3f};

static void test_mlp(mn_device *dev) {
    size_t len;
    uint8_t *buf = mlp_model(&len);
    double ref[8];
    mlp_ref(X, ref);
    for (int be = 0; be < (dev ? 2 : 1); be++) {
        mn_graph *g;
        mn_onnx *m = NULL;
        mn_graph_create(&g);
        CHECK_OK(mn_onnx_load_memory(&m, g, buf, len, NULL, g_err, sizeof g_err), g_err);
        if (!m) {
            mn_graph_destroy(g);
            break;
        }
        CHECK(mn_onnx_input_count(m) == 1 && mn_onnx_output_count(m) == 1);
        mn_onnx_io io;
        CHECK(mn_onnx_output_at(m, 0, &io) == MN_OK && io.rank == 2 && io.shape[0] == 4 && io.shape[1] == 2 &&
              io.tensor != MN_NONE && strcmp(io.graph_name, "y") == 0);
        mn_session_options so = mn_session_default_options();
        so.backend = be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
        so.device = be ? dev : NULL;
        mn_session *s = NULL;
        CHECK_OK(mn_session_create(&s, g, &so), s ? mn_session_error(s) : "");
        CHECK_OK(mn_onnx_init_session(m, s), mn_onnx_error(m));
        CHECK_OK(mn_onnx_set_input(m, s, "x", X, sizeof X), mn_onnx_error(m));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        float y[8];
        CHECK_OK(mn_onnx_get_output(m, s, "y", y, sizeof y), mn_onnx_error(m));
        for (int i = 0; i < 8; i++) CHECK_NEAR(y[i], ref[i], 1e-5);
        /* the parameters carry the initializers' names and values */
        float w[15];
        CHECK_OK(mn_session_get_param(s, "W1", w, 15), mn_session_error(s));
        CHECK(memcmp(w, W1, sizeof w) == 0);
        mn_tensor t;
        CHECK(mn_onnx_find(m, "h", &t) == MN_OK);
        CHECK(mn_onnx_find(m, "nonexistent", &t) == MN_E_NOT_FOUND);
        /* a wrong byte count is refused with the sizes */
        CHECK(mn_onnx_set_input(m, s, "x", X, 8) == MN_E_SHAPE && strstr(mn_onnx_error(m), "12 float"));
        CHECK(mn_onnx_set_input(m, s, "nope", X, sizeof X) == MN_E_NOT_FOUND);
        mn_session_destroy(s);
        mn_onnx_destroy(m);
        mn_graph_destroy(g);
    }
    free(buf);
}

/* ---- fine-tuning ----------------------------------------------------------------- */

static void train_run(const uint8_t *buf, size_t len, mn_backend_kind be, mn_device *dev, bool freeze, float *losses,
                      int steps, float *w1_after) {
    mn_graph *g;
    mn_onnx *m = NULL;
    mn_graph_create(&g);
    mn_onnx_options o = mn_onnx_default_options();
    o.freeze = freeze;
    CHECK_OK(mn_onnx_load_memory(&m, g, buf, len, &o, g_err, sizeof g_err), g_err);
    if (!m) {
        mn_graph_destroy(g);
        return;
    }
    mn_onnx_io io;
    mn_onnx_output_at(m, 0, &io);
    mn_tensor labels, loss;
    CHECK_OK(mn_graph_input(g, &labels, "labels", MN_I32, 1, (int64_t[]){4}), mn_graph_error(g));
    CHECK_OK(mn_cross_entropy(g, &loss, io.tensor, labels), mn_graph_error(g));
    CHECK_OK(mn_graph_loss(g, loss), mn_graph_error(g));
    mn_session_options so = mn_session_default_options();
    so.backend = be;
    so.device = dev;
    so.mode = MN_MODE_TRAINING;
    so.optim = mn_optimizer_default(MN_OPTIM_SGD);
    so.optim.lr = 0.5f;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &so);
    if (freeze) {
        /* nothing to train: the session refuses or steps without change */
        if (st) {
            mn_session_destroy(s);
            mn_onnx_destroy(m);
            mn_graph_destroy(g);
            memcpy(w1_after, W1, sizeof W1);
            return;
        }
    } else
        CHECK_OK(st, s ? mn_session_error(s) : "");
    CHECK_OK(mn_onnx_init_session(m, s), mn_onnx_error(m));
    const int32_t lab[4] = {0, 1, 1, 0};
    for (int i = 0; i < steps; i++) {
        CHECK_OK(mn_onnx_set_input(m, s, "x", X, sizeof X), mn_onnx_error(m));
        CHECK_OK(mn_session_set_input(s, "labels", lab, sizeof lab), mn_session_error(s));
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        CHECK_OK(mn_session_loss(s, &losses[i]), mn_session_error(s));
    }
    CHECK_OK(mn_session_get_param(s, "W1", w1_after, 15), mn_session_error(s));
    if (!freeze && be == MN_BACKEND_CPU) {
        /* checkpoints hold the ONNX names; init_session restores the file's values */
        char path[64];
        snprintf(path, sizeof path, "/tmp/mn_onnx_test_%d.safetensors", (int)getpid());
        CHECK_OK(mn_session_save(s, path), mn_session_error(s));
        mn_safetensors *f = NULL;
        CHECK_OK(mn_safetensors_open(&f, path, g_err, sizeof g_err), g_err);
        mn_safetensors_tensor t;
        CHECK(f && mn_safetensors_find(f, "W2", &t) == MN_OK && t.rank == 2 && t.shape[0] == 2 && t.shape[1] == 5);
        mn_safetensors_close(f);
        remove(path);
        CHECK_OK(mn_onnx_init_session(m, s), mn_onnx_error(m));
        float w[15];
        CHECK_OK(mn_session_get_param(s, "W1", w, 15), mn_session_error(s));
        CHECK(memcmp(w, W1, sizeof w) == 0);
    }
    mn_session_destroy(s);
    mn_onnx_destroy(m);
    mn_graph_destroy(g);
}

static void test_train(mn_device *dev) {
    size_t len;
    uint8_t *buf = mlp_model(&len);
    enum { STEPS = 25 };
    float lc[STEPS] = {0}, lv[STEPS] = {0}, w[15], wv[15];
    train_run(buf, len, MN_BACKEND_CPU, NULL, false, lc, STEPS, w);
    CHECK_MSG(lc[STEPS - 1] < 0.5f * lc[0], "loss %g -> %g does not fall", lc[0], lc[STEPS - 1]);
    CHECK(memcmp(w, W1, sizeof w) != 0);
    if (dev) {
        train_run(buf, len, MN_BACKEND_VULKAN, dev, false, lv, STEPS, wv);
        for (int i = 0; i < STEPS; i++) CHECK_NEAR(lv[i], lc[i], 1e-4 * (1 + fabs(lc[i])));
        CHECK(th_nmse(wv, w, 15) < 1e-10);
    }
    /* frozen initializers do not move */
    float lf[3];
    train_run(buf, len, MN_BACKEND_CPU, NULL, true, lf, 3, w);
    CHECK(memcmp(w, W1, sizeof w) == 0);
    free(buf);
}

/* batch norm: the running statistics are frozen parameters, scale and bias train */
static void test_batchnorm_frozen(bool constants) {
    ob b;
    ob_init(&b, 15);
    const int64_t xd[4] = {2, 3, 2, 2}, cd[1] = {3};
    const float sc[3] = {1.0f, 0.5f, 2.0f}, bi[3] = {0.1f, 0.2f, 0.3f}, mu[3] = {0.5f, -0.5f, 0.0f}, va[3] = {1.0f, 2.0f, 0.5f};
    ob_input(&b, "x", 1, 4, xd);
    ob_output(&b, "y", 1, 4, xd);
    ob_init_f32(&b, "bn.weight", 1, cd, sc);
    ob_init_f32(&b, "bn.bias", 1, cd, bi);
    ob_init_f32(&b, "bn.running_mean", 1, cd, mu);
    ob_init_f32(&b, "bn.running_var", 1, cd, va);
    Onnx__NodeProto *n = ob_node(&b, "BatchNormalization", "bn",
                                 (const char *[]){"x", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", NULL},
                                 (const char *[]){"y", NULL});
    ob_attr_float(&b, n, "epsilon", 1e-3f);
    size_t len;
    uint8_t *buf = ob_pack(&b, &len);
    ob_free(&b);
    mn_graph *g;
    mn_graph_create(&g);
    mn_onnx *m = NULL;
    mn_onnx_options oo = mn_onnx_default_options();
    oo.constants = constants;
    CHECK_OK(mn_onnx_load_memory(&m, g, buf, len, &oo, g_err, sizeof g_err), g_err);
    free(buf);
    if (!m) {
        mn_graph_destroy(g);
        return;
    }
    mn_onnx_io io;
    mn_onnx_output_at(m, 0, &io);
    if (constants) {
        /* inference only: no parameters, nothing to initialise */
        mn_session_options so = mn_session_default_options();
        mn_session *s = NULL;
        CHECK_OK(mn_session_create(&s, g, &so), s ? mn_session_error(s) : "");
        CHECK_OK(mn_onnx_init_session(m, s), mn_onnx_error(m));
        float x[24] = {0}, y[24];
        CHECK_OK(mn_onnx_set_input(m, s, "x", x, sizeof x), mn_onnx_error(m));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        CHECK_OK(mn_onnx_get_output(m, s, "y", y, sizeof y), mn_onnx_error(m));
        CHECK_NEAR(y[0], (0 - mu[0]) / sqrt(va[0] + 1e-3) * sc[0] + bi[0], 1e-5);
        float v[3];
        CHECK(mn_session_get_param(s, "bn.weight", v, 3) == MN_E_NOT_FOUND);
        mn_session_destroy(s);
        mn_onnx_destroy(m);
        mn_graph_destroy(g);
        return;
    }
    float tgt[24];
    for (int i = 0; i < 24; i++) tgt[i] = (float)(i % 5) * 0.3f;
    mn_tensor t, loss;
    CHECK_OK(mn_graph_constant(g, &t, 4, xd, tgt), mn_graph_error(g));
    CHECK_OK(mn_mse(g, &loss, io.tensor, t), mn_graph_error(g));
    CHECK_OK(mn_graph_loss(g, loss), mn_graph_error(g));
    mn_session_options so = mn_session_default_options();
    so.mode = MN_MODE_TRAINING;
    so.optim = mn_optimizer_default(MN_OPTIM_SGD);
    so.optim.lr = 0.1f;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &so), s ? mn_session_error(s) : "");
    CHECK_OK(mn_onnx_init_session(m, s), mn_onnx_error(m));
    float x[24];
    for (int i = 0; i < 24; i++) x[i] = (float)((i * 7) % 11) * 0.2f - 1.0f;
    /* inference values: (x - mean) / sqrt(var + eps) * scale + bias */
    CHECK_OK(mn_onnx_set_input(m, s, "x", x, sizeof x), mn_onnx_error(m));
    CHECK_OK(mn_session_run(s), mn_session_error(s));
    float y[24];
    CHECK_OK(mn_onnx_get_output(m, s, "y", y, sizeof y), mn_onnx_error(m));
    for (int i = 0; i < 24; i++) {
        int ch = (i / 4) % 3;
        CHECK_NEAR(y[i], (x[i] - mu[ch]) / sqrt(va[ch] + 1e-3) * sc[ch] + bi[ch], 1e-5);
    }
    for (int k = 0; k < 3; k++) CHECK_OK(mn_session_step(s), mn_session_error(s));
    float v[3];
    CHECK_OK(mn_session_get_param(s, "bn.running_mean", v, 3), mn_session_error(s));
    CHECK(memcmp(v, mu, sizeof v) == 0);
    CHECK_OK(mn_session_get_param(s, "bn.running_var", v, 3), mn_session_error(s));
    CHECK(memcmp(v, va, sizeof v) == 0);
    CHECK_OK(mn_session_get_param(s, "bn.weight", v, 3), mn_session_error(s));
    CHECK(memcmp(v, sc, sizeof v) != 0);
    mn_session_destroy(s);
    mn_onnx_destroy(m);
    mn_graph_destroy(g);
}

/* ---- composites: comparisons, max/min, argmax, erf against libm ---------------------- */

enum { NV = 40 };
static void comp_values(float *a, float *b) {
    const float sp[NV] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, 2.5f, INFINITY, INFINITY, -INFINITY, NAN,
                          1e-45f, 0.0f, 3e38f, -3e38f, 0.1f, 0.3f, 7.0f, -7.0f, 1e-6f, -1e-6f,
                          0.5f, 0.49f, 0.51f, -0.5f, 3.9f, -3.9f, 5.9f, 1e-30f, 1.0f, 2.0f,
                          -2.0f, 1.5f, 100.0f, -100.0f, 0.25f, 0.75f, 1.25f, -1.25f, 4.0f, NAN};
    const float sq[NV] = {0.0f, 0.0f, 1.0f, 1.0f, 2.5f, -2.5f, INFINITY, -INFINITY, -INFINITY, 1.0f,
                          0.0f, 1e-45f, -3e38f, 3e38f, 0.2f, 0.3f, 7.0f, 7.0f, 1e-6f, 1e-6f,
                          0.5f, 0.5f, 0.5f, 0.5f, 3.9f, 3.9f, 5.9f, 1e-30f, 2.0f, 1.0f,
                          -2.0f, -1.5f, 100.0f, 100.0f, 0.25f, 0.5f, 1.5f, 1.25f, 4.0f, NAN};
    memcpy(a, sp, sizeof sp);
    memcpy(b, sq, sizeof sq);
}

static void test_composites(mn_device *dev) {
    static const char *const ops[] = {"Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual", "Max", "Min"};
    enum { NOPS = 7 };
    ob b;
    ob_init(&b, 13);
    const int64_t d1[1] = {NV}, d2[2] = {4, NV / 4}, d0[1] = {4};
    ob_input(&b, "a", 1, 1, d1);
    ob_input(&b, "b", 1, 1, d1);
    char out[NOPS][16];
    for (int i = 0; i < NOPS; i++) {
        snprintf(out[i], sizeof out[i], "o%d", i);
        ob_output(&b, out[i], i < 5 ? 9 : 1, 1, d1);
        ob_node(&b, ops[i], out[i], (const char *[]){"a", "b", NULL}, (const char *[]){out[i], NULL});
    }
    ob_output(&b, "erf", 1, 1, d1);
    ob_node(&b, "Erf", "erf", (const char *[]){"a", NULL}, (const char *[]){"erf", NULL});
    static const char *const trig[] = {"Sin", "Cos", "Tan"};
    for (int i = 0; i < 3; i++) {
        ob_output(&b, trig[i], 1, 1, d1);
        ob_node(&b, trig[i], trig[i], (const char *[]){"a", NULL}, (const char *[]){trig[i], NULL});
    }
    ob_output(&b, "isnan", 9, 1, d1);
    ob_node(&b, "IsNaN", "isnan", (const char *[]){"a", NULL}, (const char *[]){"isnan", NULL});
    ob_output(&b, "isinf", 9, 1, d1);
    ob_node(&b, "IsInf", "isinf", (const char *[]){"a", NULL}, (const char *[]){"isinf", NULL});
    ob_output(&b, "arg", 7, 1, d0);
    const int64_t shp[2] = {4, NV / 4}, two[1] = {2};
    ob_init_i64(&b, "shp", 1, two, shp);
    ob_node(&b, "Reshape", "rs", (const char *[]){"b", "shp", NULL}, (const char *[]){"b2", NULL});
    Onnx__NodeProto *n = ob_node(&b, "ArgMax", "arg", (const char *[]){"b2", NULL}, (const char *[]){"arg", NULL});
    ob_attr_int(&b, n, "axis", 1);
    ob_attr_int(&b, n, "keepdims", 0);
    (void)d2;
    size_t len;
    uint8_t *buf = ob_pack(&b, &len);
    ob_free(&b);
    float va[NV], vb[NV];
    comp_values(va, vb);
    /* a long sweep for erf */
    for (int be = 0; be < (dev ? 2 : 1); be++) {
        mn_graph *g;
        mn_graph_create(&g);
        mn_onnx *m = NULL;
        CHECK_OK(mn_onnx_load_memory(&m, g, buf, len, NULL, g_err, sizeof g_err), g_err);
        if (!m) {
            mn_graph_destroy(g);
            break;
        }
        mn_session_options so = mn_session_default_options();
        so.backend = be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
        so.device = be ? dev : NULL;
        mn_session *s = NULL;
        CHECK_OK(mn_session_create(&s, g, &so), s ? mn_session_error(s) : "");
        CHECK_OK(mn_onnx_set_input(m, s, "a", va, sizeof va), mn_onnx_error(m));
        CHECK_OK(mn_onnx_set_input(m, s, "b", vb, sizeof vb), mn_onnx_error(m));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        for (int i = 0; i < NOPS; i++) {
            uint8_t r8[NV];
            float rf[NV];
            CHECK_OK(mn_onnx_get_output(m, s, out[i], i < 5 ? (void *)r8 : (void *)rf, i < 5 ? sizeof r8 : sizeof rf),
                     mn_onnx_error(m));
            for (int k = 0; k < NV; k++) {
                float x = va[k], y = vb[k];
                int want = i == 0 ? x > y : i == 1 ? x < y : i == 2 ? x == y : i == 3 ? x >= y : x <= y;
                if (i < 5) CHECK_MSG(r8[k] == want, "%s %s(%g, %g) = %d, want %d", be ? "vulkan" : "cpu", ops[i], x, y, r8[k], want);
                else {
                    float w = (x != x || y != y) ? NAN : i == 5 ? fmaxf(x, y) : fminf(x, y);
                    CHECK_MSG((w != w && rf[k] != rf[k]) || rf[k] == w, "%s %s(%g, %g) = %g, want %g", be ? "vulkan" : "cpu", ops[i], x, y, rf[k], w);
                }
            }
        }
        float e[NV];
        uint8_t nan8[NV], inf8[NV];
        int64_t arg[4];
        CHECK_OK(mn_onnx_get_output(m, s, "erf", e, sizeof e), mn_onnx_error(m));
        CHECK_OK(mn_onnx_get_output(m, s, "isnan", nan8, sizeof nan8), mn_onnx_error(m));
        CHECK_OK(mn_onnx_get_output(m, s, "isinf", inf8, sizeof inf8), mn_onnx_error(m));
        CHECK_OK(mn_onnx_get_output(m, s, "arg", arg, sizeof arg), mn_onnx_error(m));
        for (int k = 0; k < NV; k++) {
            double w = erf((double)va[k]);
            CHECK_MSG((w != w && e[k] != e[k]) || fabs(e[k] - w) <= 2.5e-7 * fabs(w) + 1e-30, "%s erf(%g) = %.9g, want %.9g",
                      be ? "vulkan" : "cpu", va[k], e[k], w);
            CHECK(nan8[k] == (va[k] != va[k]));
            CHECK(inf8[k] == (isinf(va[k]) ? 1 : 0));
        }
        /* sin, cos and tan (sin / cos) against libm where mn_sin promises a
         * few ulp (|x| < 1e5); NaN for infinities and NaN */
        for (int t = 0; t < 3; t++) {
            float r[NV];
            CHECK_OK(mn_onnx_get_output(m, s, trig[t], r, sizeof r), mn_onnx_error(m));
            for (int k = 0; k < NV; k++) {
                double x = va[k], w = t == 0 ? sin(x) : t == 1 ? cos(x) : tan(x);
                if (x != x || isinf(x)) CHECK_MSG(r[k] != r[k], "%s %s(%g) = %g, want NaN", be ? "vulkan" : "cpu", trig[t], x, r[k]);
                else if (fabs(x) < 1e5)
                    CHECK_MSG(fabs(r[k] - w) <= 1e-6 * fabs(w) + 2e-7, "%s %s(%g) = %.9g, want %.9g", be ? "vulkan" : "cpu",
                              trig[t], x, r[k], w);
            }
        }
        /* argmax along rows of b: the first maximum (NaN wins, as in max) */
        for (int r = 0; r < 4; r++) {
            int best = 0;
            for (int k = 1; k < NV / 4; k++) {
                float v = vb[r * (NV / 4) + k], bv = vb[r * (NV / 4) + best];
                if (bv == bv && (v > bv || v != v)) best = k;
            }
            CHECK_MSG(arg[r] == best, "%s argmax row %d = %lld, want %d", be ? "vulkan" : "cpu", r, (long long)arg[r], best);
        }
        mn_session_destroy(s);
        mn_onnx_destroy(m);
        mn_graph_destroy(g);
    }
    free(buf);
}

/* ---- one error for every unsupported item ------------------------------------------ */

static void test_unsupported(void) {
    ob b;
    ob_init(&b, 13);
    const int64_t xd[4] = {1, 2, 4, 4}, wd[4] = {2, 2, 3, 3};
    float w[36] = {0};
    ob_input(&b, "x", 1, 4, xd);
    ob_output(&b, "y", 1, 4, xd);
    ob_output(&b, "z", 8, 4, xd);
    ob_output(&b, "q", 1, 4, xd);
    ob_output(&b, "u", 1, 4, xd);
    ob_init_f32(&b, "w", 4, wd, w);
    Onnx__NodeProto *n = ob_node(&b, "Conv", "conv_a", (const char *[]){"x", "w", NULL}, (const char *[]){"c", NULL});
    ob_attr_ints(&b, n, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    ob_attr_int(&b, n, "bogus_attr", 3);
    ob_node(&b, "FrobnicateOp", "frob_b", (const char *[]){"c", NULL}, (const char *[]){"y", NULL});
    n = ob_node(&b, "Cast", "cast_c", (const char *[]){"x", NULL}, (const char *[]){"z", NULL});
    ob_attr_int(&b, n, "to", 8); /* STRING */
    n = ob_node(&b, "FusedThing", "ms_d", (const char *[]){"x", NULL}, (const char *[]){"q", NULL});
    n->domain = ob_str(&b, "com.example");
    ob_node(&b, "Relu", "after_e", (const char *[]){"y", NULL}, (const char *[]){"u", NULL});
    size_t len;
    uint8_t *buf = ob_pack(&b, &len);
    ob_free(&b);
    mn_graph *g;
    mn_graph_create(&g);
    mn_onnx *m = NULL;
    mn_status st = mn_onnx_load_memory(&m, g, buf, len, NULL, g_err, sizeof g_err);
    CHECK(st == MN_E_UNSUPPORTED && m == NULL);
    CHECK_MSG(strstr(g_err, "conv_a") && strstr(g_err, "bogus_attr"), "%s", g_err);
    CHECK_MSG(strstr(g_err, "FrobnicateOp") && strstr(g_err, "frob_b"), "%s", g_err);
    CHECK_MSG(strstr(g_err, "cast_c") && strstr(g_err, "string"), "%s", g_err);
    CHECK_MSG(strstr(g_err, "ms_d") && strstr(g_err, "com.example"), "%s", g_err);
    CHECK_MSG(strstr(g_err, "4 items"), "one message, four items: %s", g_err);
    /* the node after a failed one is not listed (its input is already) */
    CHECK_MSG(!strstr(g_err, "after_e"), "%s", g_err);
    mn_graph_destroy(g);
    free(buf);
}

/* ---- hostile bytes -------------------------------------------------------------------- */

static mn_status load_bytes(const uint8_t *buf, size_t len, const mn_onnx_options *o) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_onnx *m = NULL;
    g_err[0] = 0;
    mn_status st = mn_onnx_load_memory(&m, g, buf, len, o, g_err, sizeof g_err);
    CHECK_MSG(st == MN_OK ? m != NULL : (m == NULL && g_err[0]), "status %d, handle %p, message '%s'", st, (void *)m, g_err);
    mn_onnx_destroy(m);
    mn_graph_destroy(g);
    return st;
}

/* a length-delimited protobuf field */
static size_t put_field(uint8_t *p, int field, const uint8_t *body, size_t n) {
    size_t k = 0;
    p[k++] = (uint8_t)(field << 3 | 2);
    size_t v = n;
    do {
        p[k++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    memmove(p + k, body, n);
    return k + n;
}

static uint8_t *gather_model(size_t *len, int64_t index, const int64_t *tdims, size_t raw_floats) {
    ob b;
    ob_init(&b, 13);
    const int64_t td[2] = {5, 3}, od[1] = {3};
    float table[15];
    for (int i = 0; i < 15; i++) table[i] = (float)i;
    ob_output(&b, "y", 1, 1, od);
    Onnx__TensorProto *t = ob_init_f32(&b, "table", 2, td, table);
    if (tdims) memcpy(t->dims, tdims, 2 * sizeof *tdims); /* dims the data does not match */
    if (raw_floats) t->raw_data.len = raw_floats * 4 > 60 ? 60 : raw_floats * 4;
    const int64_t one = 1;
    ob_init_i64(&b, "idx", 0, &one, &index);
    ob_node(&b, "Gather", "g0", (const char *[]){"table", "idx", NULL}, (const char *[]){"y", NULL});
    uint8_t *buf = ob_pack(&b, len);
    ob_free(&b);
    return buf;
}

static void test_hostile(void) {
    size_t len;
    uint8_t *buf = mlp_model(&len);
    /* every prefix: an error or (the whole file) success, never a crash */
    int ok = 0;
    for (size_t k = 0; k <= len; k++) ok += load_bytes(buf, k, NULL) == MN_OK;
    CHECK(ok >= 1);
    CHECK(load_bytes(buf, len, NULL) == MN_OK);
    /* byte flips */
    uint8_t *cp = malloc(len);
    uint32_t r = 12345;
    for (int t = 0; t < 600; t++) {
        memcpy(cp, buf, len);
        r = r * 1103515245u + 12345u;
        size_t at = (r >> 8) % len;
        r = r * 1103515245u + 12345u;
        cp[at] = (uint8_t)(r >> 16);
        (void)load_bytes(cp, len, NULL);
    }
    free(cp);
    free(buf);
    CHECK(load_bytes((const uint8_t *)"", 0, NULL) != MN_OK && strstr(g_err, "no graph"));
    CHECK(load_bytes((const uint8_t *)"\xff\xff\xff\xff\xff", 5, NULL) == MN_E_FORMAT);

    /* attributes holding graphs holding nodes holding attributes ..., 100 deep */
    size_t cap = 1 << 16, n = 0;
    uint8_t *a = calloc(1, cap), *b2 = calloc(1, cap);
    for (int d = 0; d < 100; d++) {
        /* a GraphProto as AttributeProto.g (6), in NodeProto.attribute (5), in GraphProto.node (1) */
        n = put_field(b2, 6, a, n);
        memcpy(a, b2, n);
        n = put_field(b2, 5, a, n);
        memcpy(a, b2, n);
        n = put_field(b2, 1, a, n);
        memcpy(a, b2, n);
    }
    n = put_field(b2, 7, a, n); /* ModelProto.graph */
    CHECK(load_bytes(b2, n, NULL) == MN_E_FORMAT && strstr(g_err, "nested deeper"));
    free(a);
    free(b2);

    /* data that disagrees with the shape; too many elements; bad indices */
    buf = gather_model(&len, 1, NULL, 0);
    CHECK(load_bytes(buf, len, NULL) == MN_OK);
    free(buf);
    buf = gather_model(&len, 1, NULL, 7);
    CHECK(load_bytes(buf, len, NULL) == MN_E_FORMAT && strstr(g_err, "'table'") && strstr(g_err, "raw_data"));
    free(buf);
    const int64_t huge[2] = {(int64_t)1 << 30, (int64_t)1 << 20};
    buf = gather_model(&len, 1, huge, 0);
    CHECK(load_bytes(buf, len, NULL) == MN_E_FORMAT && strstr(g_err, "2^40"));
    free(buf);
    const int64_t neg[2] = {5, -3};
    buf = gather_model(&len, 1, neg, 0);
    CHECK(load_bytes(buf, len, NULL) == MN_E_FORMAT && strstr(g_err, "-3"));
    free(buf);
    buf = gather_model(&len, 5, NULL, 0);
    CHECK(load_bytes(buf, len, NULL) == MN_E_INVALID && strstr(g_err, "index 5") && strstr(g_err, "g0"));
    free(buf);
    buf = gather_model(&len, -5, NULL, 0);
    CHECK(load_bytes(buf, len, NULL) == MN_OK); /* -5 is row 0 */
    free(buf);

    /* an undefined input, a value defined twice */
    ob b;
    ob_init(&b, 13);
    const int64_t d1[1] = {4};
    ob_input(&b, "x", 1, 1, d1);
    ob_output(&b, "y", 1, 1, d1);
    ob_node(&b, "Relu", "r0", (const char *[]){"missing", NULL}, (const char *[]){"y", NULL});
    buf = ob_pack(&b, &len);
    ob_free(&b);
    CHECK(load_bytes(buf, len, NULL) == MN_E_FORMAT && strstr(g_err, "'missing'") && strstr(g_err, "r0"));
    free(buf);
    ob_init(&b, 13);
    ob_input(&b, "x", 1, 1, d1);
    ob_output(&b, "y", 1, 1, d1);
    ob_node(&b, "Relu", "r0", (const char *[]){"x", NULL}, (const char *[]){"y", NULL});
    ob_node(&b, "Relu", "r1", (const char *[]){"x", NULL}, (const char *[]){"y", NULL});
    buf = ob_pack(&b, &len);
    ob_free(&b);
    CHECK(load_bytes(buf, len, NULL) == MN_E_FORMAT && strstr(g_err, "already defined") && strstr(g_err, "r1"));
    free(buf);

    /* a symbolic dimension: an error naming it, or a size from the options */
    ob_init(&b, 13);
    const int64_t sym[2] = {-1, 3};
    ob_input(&b, "x", 1, 2, sym);
    ob_output(&b, "y", 1, 2, sym);
    ob_node(&b, "Relu", "r0", (const char *[]){"x", NULL}, (const char *[]){"y", NULL});
    buf = ob_pack(&b, &len);
    ob_free(&b);
    CHECK(load_bytes(buf, len, NULL) == MN_E_UNSUPPORTED && strstr(g_err, "'batch'"));
    mn_onnx_options o = mn_onnx_default_options();
    mn_onnx_dim dim = {"batch", 6};
    o.dims = &dim;
    o.n_dims = 1;
    CHECK(load_bytes(buf, len, &o) == MN_OK);
    o = mn_onnx_default_options();
    o.default_dim = 2;
    CHECK(load_bytes(buf, len, &o) == MN_OK);
    mn_onnx_input oi = {0};
    oi.name = "nothere";
    o.inputs = &oi;
    o.n_inputs = 1;
    CHECK(load_bytes(buf, len, &o) == MN_E_NOT_FOUND && strstr(g_err, "nothere"));
    free(buf);
}

/* ---- inputs and outputs in ONNX types ------------------------------------------------- */

static uint8_t *io_model(size_t *len) {
    ob b;
    ob_init(&b, 13);
    const int64_t idd[1] = {2}, cd[2] = {2, 3}, td[2] = {5, 3}, sd[1] = {2};
    float table[15];
    for (int i = 0; i < 15; i++) table[i] = (float)(i + 1);
    ob_input(&b, "ids", 7, 1, idd);
    ob_input(&b, "cond", 9, 2, cd);
    ob_output(&b, "y", 1, 2, cd);
    ob_output(&b, "shape", 7, 1, sd);
    ob_init_f32(&b, "table", 2, td, table);
    const int64_t zd[1] = {1};
    const float zero = -1.0f;
    ob_init_f32(&b, "minus_one", 1, zd, &zero);
    ob_node(&b, "Gather", "emb", (const char *[]){"table", "ids", NULL}, (const char *[]){"rows", NULL});
    ob_node(&b, "Where", "sel", (const char *[]){"cond", "rows", "minus_one", NULL}, (const char *[]){"y", NULL});
    ob_node(&b, "Shape", "shp", (const char *[]){"y", NULL}, (const char *[]){"shape", NULL});
    uint8_t *buf = ob_pack(&b, len);
    ob_free(&b);
    return buf;
}

static void test_io(mn_device *dev) {
    size_t len;
    uint8_t *buf = io_model(&len);
    for (int be = 0; be < (dev ? 2 : 1); be++) {
        mn_graph *g;
        mn_graph_create(&g);
        mn_onnx *m = NULL;
        CHECK_OK(mn_onnx_load_memory(&m, g, buf, len, NULL, g_err, sizeof g_err), g_err);
        if (!m) {
            mn_graph_destroy(g);
            break;
        }
        mn_onnx_io io;
        CHECK(mn_onnx_input_at(m, 0, &io) == MN_OK && io.dtype == MN_I32 && io.onnx_dtype == MN_ONNX_INT64 &&
              io.position == 0);
        CHECK(mn_onnx_input_at(m, 1, &io) == MN_OK && io.dtype == MN_F32 && io.onnx_dtype == MN_ONNX_BOOL);
        CHECK(mn_onnx_output_at(m, 1, &io) == MN_OK && io.tensor == MN_NONE);
        mn_session_options so = mn_session_default_options();
        so.backend = be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
        so.device = be ? dev : NULL;
        mn_session *s = NULL;
        CHECK_OK(mn_session_create(&s, g, &so), s ? mn_session_error(s) : "");
        CHECK_OK(mn_onnx_init_session(m, s), mn_onnx_error(m));
        const int64_t ids[2] = {3, 0};
        const uint8_t cond[6] = {1, 0, 1, 0, 1, 1};
        CHECK_OK(mn_onnx_set_input(m, s, "ids", ids, sizeof ids), mn_onnx_error(m));
        CHECK_OK(mn_onnx_set_input(m, s, "cond", cond, sizeof cond), mn_onnx_error(m));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        float y[6];
        CHECK_OK(mn_onnx_get_output(m, s, "y", y, sizeof y), mn_onnx_error(m));
        const float want[6] = {10, -1, 12, -1, 2, 3};
        for (int i = 0; i < 6; i++) CHECK_NEAR(y[i], want[i], 0);
        int64_t shape[2] = {0, 0};
        CHECK_OK(mn_onnx_get_output(m, NULL, "shape", shape, sizeof shape), mn_onnx_error(m));
        CHECK(shape[0] == 2 && shape[1] == 3);
        const int64_t big[2] = {(int64_t)1 << 40, 0};
        CHECK(mn_onnx_set_input(m, s, "ids", big, sizeof big) == MN_E_INVALID && strstr(mn_onnx_error(m), "int32"));
        mn_session_destroy(s);
        mn_onnx_destroy(m);
        mn_graph_destroy(g);
    }
    /* a constant input: the value given in the options; the input is then not declared */
    mn_graph *g;
    mn_graph_create(&g);
    mn_onnx *m = NULL;
    const uint8_t cond[6] = {0, 0, 0, 0, 0, 0};
    mn_onnx_input oi = {0};
    oi.name = "cond";
    oi.value = cond;
    oi.bytes = sizeof cond;
    mn_onnx_options o = mn_onnx_default_options();
    o.inputs = &oi;
    o.n_inputs = 1;
    CHECK_OK(mn_onnx_load_memory(&m, g, buf, len, &o, g_err, sizeof g_err), g_err);
    CHECK(m && mn_onnx_input_count(m) == 1);
    oi.bytes = 5;
    mn_onnx_destroy(m);
    mn_graph_destroy(g);
    mn_graph_create(&g);
    CHECK(mn_onnx_load_memory(&m, g, buf, len, &o, g_err, sizeof g_err) == MN_E_SHAPE && strstr(g_err, "5 bytes"));
    mn_graph_destroy(g);
    free(buf);
}

/* ---- two models in one graph ------------------------------------------------------------ */

static void test_prefix(void) {
    size_t len;
    uint8_t *buf = mlp_model(&len);
    mn_graph *g;
    mn_graph_create(&g);
    mn_onnx *a = NULL, *b = NULL;
    mn_onnx_options o = mn_onnx_default_options();
    o.prefix = "a.";
    CHECK_OK(mn_onnx_load_memory(&a, g, buf, len, &o, g_err, sizeof g_err), g_err);
    o.prefix = "b.";
    CHECK_OK(mn_onnx_load_memory(&b, g, buf, len, &o, g_err, sizeof g_err), g_err);
    mn_onnx_io io;
    CHECK(b && mn_onnx_output_at(b, 0, &io) == MN_OK && strcmp(io.graph_name, "b.y") == 0);
    mn_session_options so = mn_session_default_options();
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &so), s ? mn_session_error(s) : "");
    CHECK_OK(mn_onnx_init_session(a, s), mn_onnx_error(a));
    CHECK_OK(mn_onnx_init_session(b, s), mn_onnx_error(b));
    float w[15];
    CHECK_OK(mn_session_get_param(s, "b.W1", w, 15), mn_session_error(s));
    CHECK(memcmp(w, W1, sizeof w) == 0);
    mn_session_destroy(s);
    mn_onnx_destroy(a);
    mn_onnx_destroy(b);
    /* the same prefix twice: the names collide, and the error says so */
    mn_onnx *c = NULL;
    o.prefix = "b.";
    CHECK(mn_onnx_load_memory(&c, g, buf, len, &o, g_err, sizeof g_err) == MN_E_INVALID && c == NULL &&
          strstr(g_err, "'b.x' is already used"));
    mn_graph_destroy(g);
    free(buf);
    /* names the graph's rules refuse get generated ones, reported by find */
    ob bb;
    ob_init(&bb, 13);
    const int64_t d1[1] = {3};
    const float ww[3] = {1, 2, 3};
    ob_input(&bb, "__in", 1, 1, d1);
    ob_output(&bb, "optim.out", 1, 1, d1);
    ob_init_f32(&bb, "__weights", 1, d1, ww);
    ob_node(&bb, "Mul", "m", (const char *[]){"__in", "__weights", NULL}, (const char *[]){"optim.out", NULL});
    buf = ob_pack(&bb, &len);
    ob_free(&bb);
    mn_graph_create(&g);
    CHECK_OK(mn_onnx_load_memory(&c, g, buf, len, NULL, g_err, sizeof g_err), g_err);
    mn_tensor t;
    CHECK(c && mn_onnx_find(c, "__weights", &t) == MN_OK);
    CHECK(c && mn_onnx_input_at(c, 0, &io) == MN_OK && strncmp(io.graph_name, "onnx.input.", 11) == 0);
    CHECK(c && mn_onnx_output_at(c, 0, &io) == MN_OK && strncmp(io.graph_name, "onnx.output.", 12) == 0);
    mn_onnx_destroy(c);
    mn_graph_destroy(g);
    free(buf);
}

/* ---- the fuzz corpus ---------------------------------------------------------------------- */

static int cmp_names(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static void replay_corpus(const char *dir) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open the corpus %s", dir);
    if (!d) return;
    char **names = NULL;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        names = realloc(names, (size_t)(n + 1) * sizeof *names);
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    for (int i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "rb");
        if (f) {
            fseek(f, 0, SEEK_END);
            long sz = ftell(f);
            rewind(f);
            uint8_t *b = malloc((size_t)sz + 1);
            size_t got = fread(b, 1, (size_t)sz, f);
            fclose(f);
            LLVMFuzzerTestOneInput(b, got);
            free(b);
        }
        free(names[i]);
    }
    free(names);
    CHECK_MSG(n >= 5, "the corpus %s holds %d files", dir, n);
}

/* the models above, and a few more operators, as fuzz seeds */
static int write_seeds(const char *dir) {
    struct { const char *name; uint8_t *buf; size_t len; } s[12];
    int n = 0;
    s[n].name = "mlp.onnx";
    s[n].buf = mlp_model(&s[n].len);
    n++;
    s[n].name = "io.onnx";
    s[n].buf = io_model(&s[n].len);
    n++;
    s[n].name = "gather.onnx";
    s[n].buf = gather_model(&s[n].len, 2, NULL, 0);
    n++;
    /* conv, pooling, batch norm, reshape by a constant shape, softmax */
    ob b;
    ob_init(&b, 13);
    const int64_t xd[4] = {1, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, cd[1] = {3}, od[2] = {1, 12};
    float w[54], c3[3] = {1, 2, 3};
    for (int i = 0; i < 54; i++) w[i] = (float)(i % 7) * 0.1f - 0.3f;
    ob_input(&b, "x", 1, 4, xd);
    ob_output(&b, "y", 1, 2, od);
    ob_init_f32(&b, "w", 4, wd, w);
    ob_init_f32(&b, "scale", 1, cd, c3);
    ob_init_f32(&b, "bias", 1, cd, c3);
    ob_init_f32(&b, "mean", 1, cd, c3);
    ob_init_f32(&b, "var", 1, cd, c3);
    const int64_t shp[2] = {1, -1}, sd[1] = {2};
    ob_init_i64(&b, "shape", 1, sd, shp);
    Onnx__NodeProto *nd = ob_node(&b, "Conv", "conv", (const char *[]){"x", "w", NULL}, (const char *[]){"c", NULL});
    ob_attr_ints(&b, nd, "pads", 4, (const int64_t[]){1, 0, 1, 0});
    ob_attr_ints(&b, nd, "strides", 2, (const int64_t[]){1, 1});
    ob_node(&b, "BatchNormalization", "bn", (const char *[]){"c", "scale", "bias", "mean", "var", NULL},
            (const char *[]){"n", NULL});
    nd = ob_node(&b, "MaxPool", "pool", (const char *[]){"n", NULL}, (const char *[]){"p", NULL});
    ob_attr_ints(&b, nd, "kernel_shape", 2, (const int64_t[]){2, 2});
    ob_attr_ints(&b, nd, "strides", 2, (const int64_t[]){2, 2});
    ob_attr_int(&b, nd, "ceil_mode", 1);
    ob_node(&b, "Reshape", "flat", (const char *[]){"p", "shape", NULL}, (const char *[]){"f", NULL});
    ob_node(&b, "Softmax", "sm", (const char *[]){"f", NULL}, (const char *[]){"y", NULL});
    s[n].name = "conv.onnx";
    s[n].buf = ob_pack(&b, &s[n].len);
    ob_free(&b);
    n++;
    /* shape arithmetic folded at import, slices, concat, transpose, reductions */
    ob_init(&b, 13);
    const int64_t ad[3] = {2, 3, 4}, rd[2] = {3, 2};
    ob_input(&b, "a", 1, 3, ad);
    ob_output(&b, "r", 1, 2, rd);
    const int64_t st[1] = {1}, en[1] = {3}, ax[1] = {2}, one[1] = {1};
    ob_init_i64(&b, "st", 1, one, st);
    ob_init_i64(&b, "en", 1, one, en);
    ob_init_i64(&b, "ax", 1, one, ax);
    ob_node(&b, "Slice", "sl", (const char *[]){"a", "st", "en", "ax", NULL}, (const char *[]){"s", NULL});
    nd = ob_node(&b, "Concat", "cat", (const char *[]){"s", "s", NULL}, (const char *[]){"k", NULL});
    ob_attr_int(&b, nd, "axis", 2);
    nd = ob_node(&b, "ReduceMean", "rm", (const char *[]){"k", NULL}, (const char *[]){"m", NULL});
    ob_attr_ints(&b, nd, "axes", 1, (const int64_t[]){2});
    ob_attr_int(&b, nd, "keepdims", 0);
    nd = ob_node(&b, "Transpose", "tr", (const char *[]){"m", NULL}, (const char *[]){"r", NULL});
    ob_attr_ints(&b, nd, "perm", 2, (const int64_t[]){1, 0});
    ob_node(&b, "Shape", "sh", (const char *[]){"a", NULL}, (const char *[]){"sa", NULL});
    ob_node(&b, "Gather", "gs", (const char *[]){"sa", "ax", NULL}, (const char *[]){"g4", NULL});
    s[n].name = "layout.onnx";
    s[n].buf = ob_pack(&b, &s[n].len);
    ob_free(&b);
    n++;
    /* string and tensor attributes: reflect padding, a constant of a shape */
    ob_init(&b, 13);
    const int64_t pd[2] = {3, 4}, pout[2] = {5, 6}, pads[4] = {1, 1, 1, 1}, four[1] = {4};
    ob_input(&b, "p", 1, 2, pd);
    ob_output(&b, "q", 1, 2, pout);
    ob_init_i64(&b, "pads", 1, four, pads);
    nd = ob_node(&b, "Pad", "pad", (const char *[]){"p", "pads", NULL}, (const char *[]){"pp", NULL});
    ob_attr_string(&b, nd, "mode", "reflect");
    nd = ob_node(&b, "LeakyRelu", "lr", (const char *[]){"pp", NULL}, (const char *[]){"l", NULL});
    ob_attr_float(&b, nd, "alpha", 0.2f);
    ob_node(&b, "Shape", "ps", (const char *[]){"l", NULL}, (const char *[]){"lshape", NULL});
    nd = ob_node(&b, "ConstantOfShape", "cs", (const char *[]){"lshape", NULL}, (const char *[]){"ones", NULL});
    const float onev = 1.0f;
    ob_attr_tensor(&b, nd, "value", ob_tensor(&b, "v", 1, 1, one, &onev, false));
    ob_node(&b, "Add", "add", (const char *[]){"l", "ones", NULL}, (const char *[]){"q", NULL});
    s[n].name = "pad.onnx";
    s[n].buf = ob_pack(&b, &s[n].len);
    ob_free(&b);
    n++;
    /* rank 5 at the edge of what the graph holds */
    ob_init(&b, 13);
    const int64_t r5[5] = {1, 2, 3, 2, 2}, r4[4] = {2, 3, 2, 2}, s4[4] = {2, 3, 2, 2}, four4[1] = {4};
    ob_input(&b, "v", 1, 5, r5);
    ob_output(&b, "w", 1, 4, r4);
    ob_init_i64(&b, "s4", 1, four4, s4);
    nd = ob_node(&b, "Transpose", "t5", (const char *[]){"v", NULL}, (const char *[]){"vt", NULL});
    ob_attr_ints(&b, nd, "perm", 5, (const int64_t[]){0, 1, 2, 4, 3});
    ob_node(&b, "Reshape", "r4", (const char *[]){"vt", "s4", NULL}, (const char *[]){"vr", NULL});
    ob_node(&b, "Relu", "rl", (const char *[]){"vr", NULL}, (const char *[]){"w", NULL});
    s[n].name = "rank5.onnx";
    s[n].buf = ob_pack(&b, &s[n].len);
    ob_free(&b);
    n++;
    /* opset 6: legacy broadcasting, batch norm attributes, 2-D softmax */
    ob_init(&b, 6);
    const int64_t od6[4] = {2, 3, 2, 2}, c6[1] = {3}, f6[2] = {2, 12};
    ob_input(&b, "x6", 1, 4, od6);
    ob_output(&b, "y6", 1, 4, od6);
    ob_init_f32(&b, "bias6", 1, c6, c3);
    ob_init_f32(&b, "s6", 1, c6, c3);
    ob_init_f32(&b, "b6", 1, c6, c3);
    ob_init_f32(&b, "m6", 1, c6, c3);
    ob_init_f32(&b, "v6", 1, c6, c3);
    nd = ob_node(&b, "Add", "add6", (const char *[]){"x6", "bias6", NULL}, (const char *[]){"a6", NULL});
    ob_attr_int(&b, nd, "broadcast", 1);
    ob_attr_int(&b, nd, "axis", 1);
    nd = ob_node(&b, "BatchNormalization", "bn6", (const char *[]){"a6", "s6", "b6", "m6", "v6", NULL},
                 (const char *[]){"n6", NULL});
    ob_attr_int(&b, nd, "is_test", 1);
    ob_attr_int(&b, nd, "spatial", 1);
    nd = ob_node(&b, "Softmax", "sm6", (const char *[]){"n6", NULL}, (const char *[]){"y6", NULL});
    ob_attr_int(&b, nd, "axis", 1);
    (void)f6;
    s[n].name = "opset6.onnx";
    s[n].buf = ob_pack(&b, &s[n].len);
    ob_free(&b);
    n++;
    /* resize, split, erf, comparisons, argmax, cumsum */
    ob_init(&b, 13);
    const int64_t md[4] = {1, 2, 3, 4}, mo[4] = {1, 2, 6, 8}, sc4[1] = {4}, ax0[1] = {1};
    const float scales[4] = {1, 1, 2, 2};
    ob_input(&b, "mx", 1, 4, md);
    ob_output(&b, "my", 1, 4, mo);
    ob_output(&b, "am", 7, 4, (const int64_t[]){1, 2, 3, 1});
    ob_output(&b, "cs", 1, 4, md);
    Onnx__TensorProto *sct = ob_tensor(&b, "scales", 1, 1, sc4, scales, true);
    ob_push(&b, (void ***)&b.graph.initializer, &b.graph.n_initializer, sct);
    const int64_t axis3 = 3;
    ob_init_i64(&b, "axis3", 0, ax0, &axis3);
    nd = ob_node(&b, "Resize", "rz", (const char *[]){"mx", "", "scales", NULL}, (const char *[]){"rr", NULL});
    ob_attr_string(&b, nd, "mode", "linear");
    ob_node(&b, "Erf", "erf", (const char *[]){"rr", NULL}, (const char *[]){"re", NULL});
    ob_node(&b, "Greater", "gt", (const char *[]){"re", "rr", NULL}, (const char *[]){"g", NULL});
    ob_node(&b, "Where", "wh", (const char *[]){"g", "re", "rr", NULL}, (const char *[]){"my", NULL});
    nd = ob_node(&b, "ArgMax", "am", (const char *[]){"mx", NULL}, (const char *[]){"am", NULL});
    ob_attr_int(&b, nd, "axis", 3);
    ob_node(&b, "CumSum", "cs", (const char *[]){"mx", "axis3", NULL}, (const char *[]){"cs", NULL});
    s[n].name = "misc.onnx";
    s[n].buf = ob_pack(&b, &s[n].len);
    ob_free(&b);
    n++;
    int fails = 0;
    for (int i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, s[i].name);
        FILE *f = fopen(p, "wb");
        if (!f || fwrite(s[i].buf, 1, s[i].len, f) != s[i].len) fails++;
        if (f) fclose(f);
        free(s[i].buf);
    }
    printf("wrote %d seeds to %s\n", n - fails, dir);
    return fails ? 1 : 0;
}

/* mn_onnx_value: every numeric type at its edges, the half types exactly
 * (subnormal, infinity, NaN), NaN for the types without a value. */
static void test_value(void) {
    const float f[2] = {1.5f, -3.25f};
    const double d[2] = {0.1, -1e300};
    const uint8_t u8[2] = {255, 7}, b[2] = {0, 1};
    const int8_t i8[2] = {-128, 5};
    const uint16_t u16[2] = {65535, 1};
    const int16_t i16[2] = {-32768, 2};
    const int32_t i32[2] = {INT32_MIN, 9};
    const uint32_t u32[2] = {UINT32_MAX, 3};
    const int64_t i64[2] = {-((int64_t)1 << 53), 11};
    const uint64_t u64[2] = {(uint64_t)1 << 63, 13};
    const uint16_t h[5] = {0x3c00, 0xc000, 0x0001, 0x7c00, 0x7e00};      /* 1, -2, 2^-24, inf, NaN */
    const uint16_t bf[4] = {0x3f80, 0xc0a0, 0xff80, 0x7fc0};             /* 1, -5, -inf, NaN */
    CHECK(mn_onnx_value(f, MN_ONNX_FLOAT, 1) == -3.25);
    CHECK(mn_onnx_value(d, MN_ONNX_DOUBLE, 0) == 0.1 && mn_onnx_value(d, MN_ONNX_DOUBLE, 1) == -1e300);
    CHECK(mn_onnx_value(u8, MN_ONNX_UINT8, 0) == 255 && mn_onnx_value(b, MN_ONNX_BOOL, 1) == 1);
    CHECK(mn_onnx_value(i8, MN_ONNX_INT8, 0) == -128);
    CHECK(mn_onnx_value(u16, MN_ONNX_UINT16, 0) == 65535 && mn_onnx_value(i16, MN_ONNX_INT16, 0) == -32768);
    CHECK(mn_onnx_value(i32, MN_ONNX_INT32, 0) == (double)INT32_MIN && mn_onnx_value(u32, MN_ONNX_UINT32, 0) == 4294967295.0);
    CHECK(mn_onnx_value(i64, MN_ONNX_INT64, 0) == -9007199254740992.0 && mn_onnx_value(i64, MN_ONNX_INT64, 1) == 11);
    CHECK(mn_onnx_value(u64, MN_ONNX_UINT64, 0) == 9223372036854775808.0);
    CHECK(mn_onnx_value(h, MN_ONNX_FLOAT16, 0) == 1 && mn_onnx_value(h, MN_ONNX_FLOAT16, 1) == -2);
    CHECK(mn_onnx_value(h, MN_ONNX_FLOAT16, 2) == 0x1p-24 && isinf(mn_onnx_value(h, MN_ONNX_FLOAT16, 3)));
    CHECK(isnan(mn_onnx_value(h, MN_ONNX_FLOAT16, 4)));
    CHECK(mn_onnx_value(bf, MN_ONNX_BFLOAT16, 0) == 1 && mn_onnx_value(bf, MN_ONNX_BFLOAT16, 1) == -5);
    CHECK(mn_onnx_value(bf, MN_ONNX_BFLOAT16, 2) == -INFINITY && isnan(mn_onnx_value(bf, MN_ONNX_BFLOAT16, 3)));
    CHECK(isnan(mn_onnx_value(f, MN_ONNX_STRING, 0)) && isnan(mn_onnx_value(f, MN_ONNX_COMPLEX64, 0)));
    CHECK(isnan(mn_onnx_value(f, 999, 0)) && isnan(mn_onnx_value(f, MN_ONNX_UNDEFINED, 0)));
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
    test_value();
    test_mlp(NULL);
    test_unsupported();
    test_hostile();
    test_io(NULL);
    test_prefix();
    test_train(NULL);
    test_batchnorm_frozen(false);
    test_batchnorm_frozen(true);
    test_composites(NULL);
    const char *corpus = getenv("MN_FUZZ_ONNX_CORPUS");
    if (corpus) replay_corpus(corpus);
    mn_device *dev = th_require_vulkan();
    if (dev) {
        test_mlp(dev);
        test_io(dev);
        test_train(dev);
        test_composites(dev);
        mn_device_close(dev);
    }
    return th_finish("test_onnx");
}
