/* test_resnet.c - the torchvision ResNet builder (src/models/resnet.c).
 *
 * 1. The presets hold torchvision's parameter counts (resnet18 11,689,512,
 *    resnet34 21,797,672, resnet50 25,557,032, resnet101 44,549,160; running
 *    statistics not counted) under torchvision's names.
 * 2. Evaluation graphs of a tiny basic and a tiny bottleneck ResNet against
 *    an f64 reference written here from torchvision's definition (conv,
 *    batch norm on running statistics, v1.5 stride on the 3x3, downsample,
 *    pooling, fc), with random weights and statistics: rel L2 <= 1e-5.
 * 3. A tiny ResNet trains on CPU and Vulkan (class = the quadrant holding a
 *    bright blob): the loss falls below 40% of its start on both, the two
 *    curves agree step by step, the running statistics move and agree.
 * 4. The trained weights as a torchvision state_dict (safetensors, with I64
 *    num_batches_tracked scalars): the architecture is read back from it;
 *    evaluation and folded graphs load it on both backends and give the
 *    same logits (folded vs unfolded rel L2 <= 1e-5) and classify held-out
 *    batches; missing, unexpected and mis-shaped tensors are refused with
 *    one message naming each.
 *
 * `test_resnet --write-fixture DIR` also writes what cli_classify.sh
 * classifies (committed as tests/fixtures/resnet): the trained model as a
 * torchvision state_dict, one PNG per class and a labels file.
 */
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "llama_util.h"

#define B 16
#define STEPS 40
#define IMG 32
#define CLS 4

/* ---- 1. presets ---------------------------------------------------------- */

static void check_presets(void) {
    static const struct {
        int depth;
        int64_t params;
    } want[] = {{18, 11689512}, {34, 21797672}, {50, 25557032}, {101, 44549160}};
    for (int i = 0; i < 4; i++) {
        mn_resnet_config c;
        char err[256];
        CHECK_OK(mn_resnet_config_preset(&c, want[i].depth, err, sizeof err), err);
        mn_graph *g;
        mn_graph_create(&g);
        mn_model *m = NULL;
        mn_resnet_options o = mn_resnet_default_options();
        o.kind = MN_RESNET_EVAL;
        CHECK_OK(mn_resnet_create(&m, g, &c, &o), mn_model_error(m));
        int64_t n = 0, stats = 0;
        const mn_hf_param *p = mn_model_params(m);
        bool names = false, down = false, fc = false;
        for (int k = 0; k < mn_model_param_count(m); k++) {
            int64_t e = 1;
            for (int d = 0; d < p[k].rank; d++) e *= p[k].shape[d];
            if (strstr(p[k].name, "running_")) stats += e;
            else n += e;
            names |= !strcmp(p[k].name, want[i].depth < 50 ? "layer4.1.conv2.weight" : "layer4.2.conv3.weight");
            down |= !strcmp(p[k].name, "layer2.0.downsample.1.running_var");
            fc |= !strcmp(p[k].name, "fc.weight") && p[k].shape[0] == 1000;
        }
        CHECK_MSG(n == want[i].params, "resnet%d: %lld parameters, torchvision has %lld", want[i].depth, (long long)n,
                  (long long)want[i].params);
        CHECK_MSG(names && down && fc, "resnet%d: torchvision names missing", want[i].depth);
        CHECK(mn_model_numel(m) == n + stats);
        mn_model_destroy(m);
        mn_graph_destroy(g);
    }
    mn_resnet_config c;
    char err[256];
    CHECK(mn_resnet_config_preset(&c, 42, err, sizeof err) == MN_E_INVALID && strstr(err, "42"));
}

/* ---- 2. against an f64 reference ----------------------------------------------- */

typedef struct tensor4 {
    int64_t n, c, h, w;
    double *v;
} tensor4;

static tensor4 t4(int64_t n, int64_t c, int64_t h, int64_t w) {
    tensor4 t = {n, c, h, w, calloc((size_t)(n * c * h * w), sizeof(double))};
    return t;
}
#define AT(t, a, b, y, x) (t).v[(((a) * (t).c + (b)) * (t).h + (y)) * (t).w + (x)]

static float *param(mn_session *s, const char *name, size_t n) {
    float *v = malloc(n * sizeof *v);
    CHECK_OK(mn_session_get_param(s, name, v, n), name);
    return v;
}

/* conv (no bias) then batch norm on running statistics */
static tensor4 ref_conv_bn(mn_session *s, tensor4 x, const char *conv, const char *bn, int64_t co, int k, int stride,
                           int pad) {
    char nm[128];
    snprintf(nm, sizeof nm, "%s.weight", conv);
    float *w = param(s, nm, (size_t)(co * x.c * k * k));
    float *v[4];
    static const char *leaf[] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++) {
        snprintf(nm, sizeof nm, "%s.%s", bn, leaf[i]);
        v[i] = param(s, nm, (size_t)co);
    }
    const int64_t oh = (x.h + 2 * pad - k) / stride + 1, ow = (x.w + 2 * pad - k) / stride + 1;
    tensor4 y = t4(x.n, co, oh, ow);
    for (int64_t n = 0; n < x.n; n++)
        for (int64_t o = 0; o < co; o++)
            for (int64_t i = 0; i < oh; i++)
                for (int64_t j = 0; j < ow; j++) {
                    double acc = 0;
                    for (int64_t c = 0; c < x.c; c++)
                        for (int a = 0; a < k; a++)
                            for (int b2 = 0; b2 < k; b2++) {
                                const int64_t yy = i * stride - pad + a, xx = j * stride - pad + b2;
                                if (yy >= 0 && yy < x.h && xx >= 0 && xx < x.w)
                                    acc += AT(x, n, c, yy, xx) * w[((o * x.c + c) * k + a) * k + b2];
                            }
                    AT(y, n, o, i, j) = (acc - v[2][o]) / sqrt((double)v[3][o] + 1e-5) * v[0][o] + v[1][o];
                }
    free(w);
    for (int i = 0; i < 4; i++) free(v[i]);
    return y;
}

static void relu4(tensor4 t) {
    for (int64_t i = 0; i < t.n * t.c * t.h * t.w; i++) t.v[i] = t.v[i] > 0 ? t.v[i] : 0;
}

static double *ref_resnet(mn_session *s, const mn_resnet_config *c, const float *pixels, int64_t n, int64_t hw) {
    tensor4 x = t4(n, c->in_channels, hw, hw);
    for (int64_t i = 0; i < n * c->in_channels * hw * hw; i++) x.v[i] = pixels[i];
    tensor4 h = ref_conv_bn(s, x, "conv1", "bn1", c->width, 7, 2, 3);
    relu4(h);
    free(x.v);
    const int64_t ph = (h.h + 2 - 3) / 2 + 1, pw = (h.w + 2 - 3) / 2 + 1;
    tensor4 p = t4(n, h.c, ph, pw);
    for (int64_t a = 0; a < n; a++)
        for (int64_t ch = 0; ch < h.c; ch++)
            for (int64_t i = 0; i < ph; i++)
                for (int64_t j = 0; j < pw; j++) {
                    double m = -INFINITY;
                    for (int dy = 0; dy < 3; dy++)
                        for (int dx = 0; dx < 3; dx++) {
                            const int64_t yy = 2 * i - 1 + dy, xx = 2 * j - 1 + dx;
                            if (yy >= 0 && yy < h.h && xx >= 0 && xx < h.w && AT(h, a, ch, yy, xx) > m)
                                m = AT(h, a, ch, yy, xx);
                        }
                    AT(p, a, ch, i, j) = m;
                }
    free(h.v);
    h = p;
    const bool bottle = c->block == MN_RESNET_BOTTLENECK;
    for (int st = 0; st < 4; st++)
        for (int j = 0; j < c->layers[st]; j++) {
            const int64_t planes = c->width << st, outc = planes * (bottle ? 4 : 1);
            const int stride = j == 0 && st > 0 ? 2 : 1;
            char cv[64], bn[64];
            tensor4 y, t;
#define U(k) (snprintf(cv, sizeof cv, "layer%d.%d.conv%d", st + 1, j, k), \
              snprintf(bn, sizeof bn, "layer%d.%d.bn%d", st + 1, j, k))
            if (bottle) {
                U(1), y = ref_conv_bn(s, h, cv, bn, planes, 1, 1, 0), relu4(y);
                U(2), t = ref_conv_bn(s, y, cv, bn, planes, 3, stride, 1), relu4(t), free(y.v);
                U(3), y = ref_conv_bn(s, t, cv, bn, outc, 1, 1, 0), free(t.v);
            } else {
                U(1), t = ref_conv_bn(s, h, cv, bn, planes, 3, stride, 1), relu4(t);
                U(2), y = ref_conv_bn(s, t, cv, bn, outc, 3, 1, 1), free(t.v);
            }
#undef U
            tensor4 idn = h;
            bool own = false;
            if (j == 0 && (stride != 1 || h.c != outc)) {
                snprintf(cv, sizeof cv, "layer%d.0.downsample.0", st + 1);
                snprintf(bn, sizeof bn, "layer%d.0.downsample.1", st + 1);
                idn = ref_conv_bn(s, h, cv, bn, outc, 1, stride, 0);
                own = true;
            }
            for (int64_t i = 0; i < y.n * y.c * y.h * y.w; i++) y.v[i] += idn.v[i];
            relu4(y);
            if (own) free(idn.v);
            free(h.v);
            h = y;
        }
    float *fw = param(s, "fc.weight", (size_t)(c->num_classes * h.c)), *fb = param(s, "fc.bias", (size_t)c->num_classes);
    double *logits = calloc((size_t)(n * c->num_classes), sizeof *logits);
    for (int64_t a = 0; a < n; a++)
        for (int64_t k = 0; k < c->num_classes; k++) {
            double acc = fb[k];
            for (int64_t ch = 0; ch < h.c; ch++) {
                double m = 0;
                for (int64_t i = 0; i < h.h * h.w; i++) m += h.v[(a * h.c + ch) * h.h * h.w + i];
                acc += m / (double)(h.h * h.w) * fw[k * h.c + ch];
            }
            logits[a * c->num_classes + k] = acc;
        }
    free(h.v), free(fw), free(fb);
    return logits;
}

static uint64_t g_rng = 12345;
static float rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / 16777216.0f;
}

static void check_reference(mn_resnet_block block, int64_t width, int hw) {
    mn_resnet_config c;
    mn_resnet_config_preset(&c, 18, NULL, 0);
    c.block = block;
    c.width = width;
    c.num_classes = 5;
    c.layers[0] = 2, c.layers[1] = 1, c.layers[2] = 1, c.layers[3] = 2;
    mn_resnet_options o = mn_resnet_default_options();
    o.kind = MN_RESNET_EVAL;
    o.batch = 2;
    o.height = o.width = hw;
    mn_graph *g;
    mn_graph_create(&g);
    mn_model *m = NULL;
    CHECK_OK(mn_resnet_create(&m, g, &c, &o), mn_model_error(m));
    mn_session *s = lu_session(g, MN_BACKEND_CPU, NULL, MN_MODE_INFERENCE, NULL);
    if (!s) return;
    /* random statistics and affine parameters, so a wrong one shows */
    const mn_hf_param *p = mn_model_params(m);
    for (int k = 0; k < mn_model_param_count(m); k++) {
        if (p[k].rank != 1) continue;
        const size_t n = (size_t)p[k].shape[0];
        float *v = malloc(n * sizeof *v);
        const bool var = strstr(p[k].name, "running_var") != NULL;
        for (size_t i = 0; i < n; i++) v[i] = var ? 0.5f + rnd() : rnd() - 0.5f;
        CHECK_OK(mn_session_set_param(s, p[k].name, v, n), mn_session_error(s));
        free(v);
    }
    const size_t np = (size_t)(2 * 3 * hw * hw);
    float *px = malloc(np * sizeof *px), lg[2 * 5];
    for (size_t i = 0; i < np; i++) px[i] = rnd() * 2 - 1;
    CHECK_OK(mn_session_set_input(s, "pixels", px, np * sizeof *px), mn_session_error(s));
    CHECK_OK(mn_session_run(s), mn_session_error(s));
    CHECK_OK(mn_session_output(s, "logits", lg, sizeof lg), mn_session_error(s));
    double *ref = ref_resnet(s, &c, px, 2, hw);
    const double e = lu_rel_l2_d(lg, ref, 10);
    printf("%s width %lld, %dx%d: logits vs the f64 reference rel L2 %.2e\n",
           block == MN_RESNET_BASIC ? "basic" : "bottleneck", (long long)width, hw, hw, e);
    CHECK_MSG(e <= 1e-5, "logits differ from the f64 reference: rel L2 %.3g", e);
    free(ref), free(px);
    mn_session_destroy(s);
    mn_model_destroy(m);
    mn_graph_destroy(g);
}

/* ---- 3. training ------------------------------------------------------------------- */

static mn_resnet_config tiny(void) {
    mn_resnet_config c;
    mn_resnet_config_preset(&c, 18, NULL, 0);
    c.width = 4;
    c.num_classes = CLS;
    for (int i = 0; i < 4; i++) c.layers[i] = 1;
    return c;
}

static mn_graph *build(mn_resnet_kind kind, mn_model **mp) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_resnet_config c = tiny();
    mn_resnet_options o = mn_resnet_default_options();
    o.kind = kind;
    o.batch = B;
    o.height = o.width = IMG;
    mn_model *m = NULL;
    CHECK_OK(mn_resnet_create(&m, g, &c, &o), mn_model_error(m));
    *mp = m;
    return g;
}

static void batch(unsigned step, float *x, int32_t *y) {
    unsigned s = step * 2654435761u + 7;
    for (int b = 0; b < B; b++) {
        s = s * 1664525u + 1013904223u;
        int cls = (int)((s >> 10) % 4), qy = cls / 2, qx = cls % 2;
        y[b] = cls;
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < IMG; i++)
                for (int j = 0; j < IMG; j++) {
                    s = s * 1664525u + 1013904223u;
                    float noise = (float)((s >> 9) % 1000) / 1000.0f - 0.5f;
                    bool blob = i / (IMG / 2) == qy && j / (IMG / 2) == qx;
                    x[((b * 3 + c) * IMG + i) * IMG + j] = (blob ? 1.0f + 0.3f * (float)c : 0.0f) + 0.5f * noise;
                }
    }
}

static mn_session *session(const mn_graph *g, mn_backend_kind be, mn_mode mode, mn_device *dev) {
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_SGD);
    opt.lr = 0.05f;
    opt.momentum = 0.9f;
    return lu_session(g, be, dev, mode, &opt);
}

static float g_x[B * 3 * IMG * IMG];
static int32_t g_y[B];

/* Trains on both backends; returns the Vulkan session (the CPU one is destroyed). */
static mn_session *check_training(mn_device *dev) {
    mn_model *m;
    mn_graph *g = build(MN_RESNET_TRAIN, &m);
    mn_session *s[2] = {session(g, MN_BACKEND_CPU, MN_MODE_TRAINING, NULL),
                        session(g, MN_BACKEND_VULKAN, MN_MODE_TRAINING, dev)};
    float loss[2][STEPS];
    double worst = 0;
    for (int t = 0; t < STEPS && s[0] && s[1]; t++) {
        batch((unsigned)t, g_x, g_y);
        for (int k = 0; k < 2; k++) {
            CHECK_OK(mn_session_set_input(s[k], "pixels", g_x, sizeof g_x), mn_session_error(s[k]));
            CHECK_OK(mn_session_set_input(s[k], "labels", g_y, sizeof g_y), mn_session_error(s[k]));
            CHECK_OK(mn_session_step(s[k]), mn_session_error(s[k]));
            CHECK_OK(mn_session_loss(s[k], &loss[k][t]), mn_session_error(s[k]));
        }
        const double d = fabs((double)loss[0][t] - loss[1][t]) / (fabs((double)loss[0][t]) + 1e-3);
        if (d > worst) worst = d;
    }
    for (int k = 0; k < 2 && s[0] && s[1]; k++) {
        const float start = (loss[k][0] + loss[k][1]) / 2, end = (loss[k][STEPS - 1] + loss[k][STEPS - 2]) / 2;
        printf("%s: loss %.4f -> %.4f\n", k ? "vulkan" : "cpu", start, end);
        CHECK_MSG(end < 0.4f * start, "%s: the loss did not fall well below its start (%.4f -> %.4f)",
                  k ? "vulkan" : "cpu", start, end);
    }
    printf("largest relative loss difference CPU vs Vulkan over %d steps: %.2e\n", STEPS, worst);
    CHECK_MSG(worst < 1e-3, "CPU and Vulkan losses differ by %.3g (relative)", worst);
    float rm[2][8];
    for (int k = 0; k < 2 && s[0] && s[1]; k++)
        CHECK_OK(mn_session_get_param(s[k], "layer2.0.bn1.running_mean", rm[k], 8), mn_session_error(s[k]));
    double moved = 0, diff = 0;
    for (int i = 0; i < 8; i++) moved += fabs(rm[0][i]), diff += fabs(rm[0][i] - rm[1][i]);
    CHECK_MSG(moved > 1e-3, "BatchNorm running mean did not move");
    CHECK_MSG(diff < 1e-3 * (moved + 1e-6) * 8, "running means differ between backends: %g", diff);
    mn_session_destroy(s[0]);
    mn_model_destroy(m);
    mn_graph_destroy(g);
    return s[1];
}

/* ---- 4. a torchvision state_dict ---------------------------------------------------- */

/* Writes the session's parameters as torchvision saves a state_dict: every
 * parameter and running statistic, and an I64 num_batches_tracked per batch
 * norm. skip: a name left out; extra: an additional tensor; reshape: a name
 * written with one more row. */
static void write_state_dict(const char *path, mn_session *s, const mn_model *m, const char *skip, const char *extra,
                             const char *reshape) {
    const int n = mn_model_param_count(m);
    const mn_hf_param *p = mn_model_params(m);
    st_entry *e = calloc((size_t)(2 * n + 1), sizeof *e);
    void **bufs = calloc((size_t)(2 * n + 1), sizeof *bufs);
    char (*names)[128] = calloc((size_t)n, sizeof *names);
    int64_t (*shapes)[4] = calloc((size_t)(2 * n + 1), sizeof *shapes);
    static const int64_t tracked = 40;
    static const float extra_v[3] = {1, 2, 3};
    static const int64_t extra_shape[1] = {3};
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (skip && !strcmp(p[i].name, skip)) continue;
        size_t cnt = 1;
        for (int d = 0; d < p[i].rank; d++) cnt *= (size_t)p[i].shape[d], shapes[k][d] = p[i].shape[d];
        float *v = calloc(cnt + 64, sizeof *v);
        mn_session_get_param(s, p[i].name, v, cnt);
        if (reshape && !strcmp(p[i].name, reshape)) cnt += cnt / (size_t)shapes[k][0], shapes[k][0]++;
        bufs[k] = v;
        e[k] = (st_entry){p[i].name, "F32", p[i].rank, shapes[k], v, cnt * 4};
        k++;
        const char *rv = strstr(p[i].name, ".running_var");
        if (rv) {
            snprintf(names[i], sizeof names[i], "%.*s.num_batches_tracked", (int)(rv - p[i].name), p[i].name);
            e[k++] = (st_entry){names[i], "I64", 0, shapes[k], &tracked, 8};
        }
    }
    if (extra) e[k++] = (st_entry){extra, "F32", 1, extra_shape, extra_v, 12};
    char err[256];
    CHECK_OK(st_save_atomic(path, e, k, NULL, 0, err, sizeof err), err);
    for (int i = 0; i < 2 * n + 1; i++) free(bufs[i]);
    free(bufs), free(e), free(names), free(shapes);
}

static void run_logits(mn_session *s, float *lg) {
    CHECK_OK(mn_session_set_input(s, "pixels", g_x, sizeof g_x), mn_session_error(s));
    CHECK_OK(mn_session_run(s), mn_session_error(s));
    CHECK_OK(mn_session_output(s, "logits", lg, B * CLS * sizeof *lg), mn_session_error(s));
}

static void check_state_dict(mn_session *trained, mn_device *dev) {
    char dir[] = "/tmp/mn-resnet-XXXXXX", path[64], bad[64], err[1024];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/resnet.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    mn_model *mt;
    mn_graph *gt = build(MN_RESNET_EVAL, &mt);
    write_state_dict(path, trained, mt, NULL, NULL, NULL);
    mn_hf_checkpoint *ck = NULL;
    CHECK_OK(mn_hf_checkpoint_open(&ck, path, err, sizeof err), err);
    if (!ck) return;
    mn_resnet_config c, want = tiny();
    CHECK_OK(mn_resnet_config_from_checkpoint(&c, ck, err, sizeof err), err);
    CHECK_MSG(c.block == want.block && c.width == want.width && c.num_classes == want.num_classes &&
                  c.in_channels == 3 && !memcmp(c.layers, want.layers, sizeof c.layers),
              "the architecture read from the state_dict differs");
    float lg[4][B * CLS];
    int correct[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) { /* eval cpu, folded cpu, eval vulkan, folded vulkan */
        mn_model *m;
        mn_graph *g = build(k % 2 ? MN_RESNET_FOLDED : MN_RESNET_EVAL, &m);
        mn_session *s = session(g, k < 2 ? MN_BACKEND_CPU : MN_BACKEND_VULKAN, MN_MODE_INFERENCE, dev);
        if (!s) continue;
        CHECK_OK(mn_model_load(m, s, ck, NULL), mn_model_error(m));
        for (unsigned t = 1000; t < 1003; t++) {
            batch(t, g_x, g_y);
            run_logits(s, lg[k]);
            for (int b = 0; b < B; b++) {
                int best = 0;
                for (int j = 1; j < CLS; j++)
                    if (lg[k][b * CLS + j] > lg[k][b * CLS + best]) best = j;
                correct[k] += best == g_y[b];
            }
        }
        mn_session_destroy(s);
        mn_model_destroy(m);
        mn_graph_destroy(g);
    }
    static const char *what[] = {"eval cpu", "folded cpu", "eval vulkan", "folded vulkan"};
    for (int k = 0; k < 4; k++) {
        const double e = lu_rel_l2(lg[k], lg[0], B * CLS);
        printf("%s: %d/%d held-out correct, logits vs eval cpu rel L2 %.2e (first logit %.9g)\n", what[k], correct[k],
               3 * B, e, lg[k][0]);
        CHECK_MSG(e <= 1e-5, "%s: logits differ from the unfolded CPU run by %.3g", what[k], e);
        CHECK_MSG(correct[k] >= 2 * B, "%s: held-out accuracy %d/%d", what[k], correct[k], 3 * B);
    }
    mn_hf_checkpoint_close(ck);

    /* one message naming every problem, for both kinds of graph */
    write_state_dict(bad, trained, mt, "layer3.0.bn2.running_var", "fc.extra", "layer1.0.conv1.weight");
    CHECK_OK(mn_hf_checkpoint_open(&ck, bad, err, sizeof err), err);
    for (int k = 0; ck && k < 2; k++) {
        mn_model *m;
        mn_graph *g = build(k ? MN_RESNET_FOLDED : MN_RESNET_EVAL, &m);
        mn_session *s = session(g, MN_BACKEND_CPU, MN_MODE_INFERENCE, NULL);
        const mn_status st = mn_model_load(m, s, ck, NULL);
        const char *msg = mn_model_error(m);
        CHECK_MSG(st == MN_E_SHAPE && strstr(msg, "layer3.0.bn2.running_var") && strstr(msg, "fc.extra") &&
                      strstr(msg, "'layer1.0.conv1.weight' is [5,4,3,3] in the checkpoint") &&
                      !strstr(msg, "num_batches_tracked"),
                  "%s: %s -> %s", k ? "folded" : "eval", mn_status_str(st), msg);
        mn_session_destroy(s);
        mn_model_destroy(m);
        mn_graph_destroy(g);
    }
    mn_hf_checkpoint_close(ck);
    /* a checkpoint that is not a ResNet */
    write_state_dict(bad, trained, mt, "conv1.weight", NULL, NULL);
    CHECK_OK(mn_hf_checkpoint_open(&ck, bad, err, sizeof err), err);
    CHECK_MSG(ck && mn_resnet_config_from_checkpoint(&c, ck, err, sizeof err) == MN_E_FORMAT &&
                  strstr(err, "conv1.weight"),
              "not a resnet: %s", err);
    mn_hf_checkpoint_close(ck);
    unlink(path), unlink(bad), rmdir(dir);
    mn_model_destroy(mt);
    mn_graph_destroy(gt);
}

/* An 8-bit RGB PNG of image b of the batch, stored so that the ImageNet
 * normalisation of `classify` gives the values back (to 1/255). */
static void write_png(const char *path, const float *x, int b) {
    FILE *f = fopen(path, "wb");
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(p);
    if (!f || !p || !info || setjmp(png_jmpbuf(p))) {
        CHECK_MSG(0, "cannot write %s", path);
        if (f) fclose(f);
        return;
    }
    png_init_io(p, f);
    png_set_IHDR(p, info, IMG, IMG, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(p, info);
    uint8_t row[IMG * 3];
    for (int y = 0; y < IMG; y++) {
        for (int xx = 0; xx < IMG; xx++)
            for (int c = 0; c < 3; c++) {
                static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
                const float v = (x[((b * 3 + c) * IMG + y) * IMG + xx] * stdv[c] + mean[c]) * 255.0f;
                row[xx * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
            }
        png_write_row(p, row);
    }
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    fclose(f);
}

static void write_fixture(const char *dir, mn_session *trained) {
    char path[1200];
    mn_model *m;
    mn_graph *g = build(MN_RESNET_EVAL, &m);
    snprintf(path, sizeof path, "%s/tiny-resnet.safetensors", dir);
    write_state_dict(path, trained, m, NULL, NULL, NULL);
    mn_model_destroy(m);
    mn_graph_destroy(g);
    static const char *names[CLS] = {"top left", "top right", "bottom left", "bottom right"};
    bool done[CLS] = {false, false, false, false};
    for (unsigned t = 2000; t < 2010; t++) {
        batch(t, g_x, g_y);
        for (int b = 0; b < B; b++)
            if (!done[g_y[b]]) {
                snprintf(path, sizeof path, "%s/class%d.png", dir, g_y[b]);
                write_png(path, g_x, b);
                done[g_y[b]] = true;
            }
    }
    snprintf(path, sizeof path, "%s/labels.txt", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < CLS; i++) fprintf(f, "%s\n", names[i]);
    if (f) fclose(f);
    printf("wrote the classify fixture into %s\n", dir);
}

int main(int argc, char **argv) {
    const char *fixture = argc == 3 && !strcmp(argv[1], "--write-fixture") ? argv[2] : NULL;
    check_presets();
    check_reference(MN_RESNET_BASIC, 4, 40);
    check_reference(MN_RESNET_BOTTLENECK, 2, 33);
    mn_device *dev = th_require_vulkan();
    if (!dev) return th_finish("test_resnet");
    mn_session *trained = check_training(dev);
    if (trained) check_state_dict(trained, dev);
    if (trained && fixture) write_fixture(fixture, trained);
    mn_session_destroy(trained);
    mn_device_close(dev);
    return th_finish("test_resnet");
}
