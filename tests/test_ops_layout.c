/* test_ops_layout.c - the layout family beyond the shared op cases
 * (op_cases.h runs its gradient checks and its Vulkan-vs-CPU table):
 *
 * - values against independent references written here (direct loops in
 *   double): slice, pad, concat, split, broadcast_to, avg_pool2d in both
 *   divisor modes (PyTorch's count_include_pad), global_avg_pool,
 *   nearest upsampling, conv1d, conv_transpose2d (a scatter, and its output
 *   shape against PyTorch's formula), on the CPU and on Vulkan;
 * - batch_norm2d: training output with batch statistics, running statistics
 *   after training steps (PyTorch: momentum, biased variance to normalise,
 *   unbiased in the running average), untouched by mn_session_run, saved and
 *   loaded with checkpoints, used by an inference graph; on both backends;
 * - mn_fold_batch_norm: conv + inference batch norm == the folded conv;
 * - errors: every constructor refuses bad arguments with a message naming
 *   the op, and leaves the graph unchanged (composites roll back);
 * - Vulkan vs CPU, forward and gradients, on shapes larger than the shared
 *   cases and not multiples of any tile (the implicit-GEMM path of
 *   conv_transpose2d, a 32-channel depthwise conv, odd concat/pool sizes);
 * - every layout-family generator compiles for an ordinary device and for a
 *   tiny one whose group limit folds launches into a 2-D grid (the coverage
 *   test_vk_codegen.c gives the pointwise family), and its launch covers
 *   every element within the limits.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"
#include "harness.h"
#include "session/session.h"
#ifdef MN_HAVE_VULKAN
#include <shaderc/shaderc.h>

#include "backend/vulkan/vk_codegen.h"
#endif

static mn_device *g_vk; /* the Vulkan device, NULL in a build without it */

static unsigned g_rng = 12345;
static float frand(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return (float)((g_rng >> 9) % 20000) / 10000.0f - 1.0f;
}
static void fill(float *v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = frand();
}

#define S(...) (const int64_t[]){__VA_ARGS__}

static size_t numel(int rank, const int64_t *s) {
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)s[i];
    return n;
}

/* Largest |a - b| over n values, relative to max(1, max |b|). */
static double max_rel(const float *a, const double *b, size_t n) {
    double m = 1, e = 0;
    for (size_t i = 0; i < n; i++) m = fabs(b[i]) > m ? fabs(b[i]) : m;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN sticks */
    }
    return e / m;
}

/* An inference session of g on the backend (the shared Vulkan device). */
static mn_session *open_infer(const mn_graph *g, mn_backend_kind be) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = be == MN_BACKEND_VULKAN ? g_vk : NULL;
    o.seed = 3;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static int nbackends(void) { return g_vk ? 2 : 1; }
static mn_backend_kind backend(int i) { return i ? MN_BACKEND_VULKAN : MN_BACKEND_CPU; }
static const char *bname(int i) { return i ? "vulkan" : "cpu"; }

/* Reads output name (count floats) after run. */
static void read_out(mn_session *s, const char *name, float *dst, size_t count) {
    CHECK_OK(mn_session_output(s, name, dst, count * 4), mn_session_error(s));
}

/* ---- slice, pad, concat, split, broadcast_to ----------------------------- */

static void test_moves(void) {
    mn_graph *g;
    mn_tensor x, sl, pd, cc, parts[3], eq[2], bt, r;
    mn_graph_create(&g);
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 3, S(2, 3, 4)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &r, "r", MN_F32, 2, S(3, 1)), mn_graph_error(g));
    CHECK_OK(mn_slice(g, &sl, x, 1, 1, 2), mn_graph_error(g));                  /* [2,2,4] */
    CHECK_OK(mn_pad(g, &pd, x, S(1, 0, 2), S(0, 2, 1)), mn_graph_error(g));     /* [3,5,7] */
    CHECK_OK(mn_concat(g, &cc, (mn_tensor[]){sl, x, sl}, 3, -2), mn_graph_error(g)); /* [2,7,4] */
    CHECK_OK(mn_split(g, parts, x, 2, 3, S(1, 2, 1)), mn_graph_error(g));
    CHECK_OK(mn_split(g, eq, x, 0, 2, NULL), mn_graph_error(g));
    CHECK_OK(mn_broadcast_to(g, &bt, r, 3, S(2, 3, 5)), mn_graph_error(g));
    mn_tensor back;
    CHECK_OK(mn_concat(g, &back, parts, 3, 2), mn_graph_error(g)); /* split + concat = x */
    const char *names[] = {"sl", "pd", "cc", "p0", "p1", "p2", "e0", "e1", "bt", "back"};
    mn_tensor ts[] = {sl, pd, cc, parts[0], parts[1], parts[2], eq[0], eq[1], bt, back};
    for (int i = 0; i < 10; i++) CHECK_OK(mn_graph_output(g, ts[i], names[i]), mn_graph_error(g));
    float xv[24], rv[3];
    for (int i = 0; i < 24; i++) xv[i] = (float)i;
    rv[0] = 10, rv[1] = 20, rv[2] = 30;
    for (int b = 0; b < nbackends(); b++) {
        mn_session *s = open_infer(g, backend(b));
        if (!s) continue;
        CHECK_OK(mn_session_set_input(s, "x", xv, sizeof xv), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "r", rv, sizeof rv), mn_session_error(s));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        float o[128];
        int bad = 0;
        read_out(s, "sl", o, 16);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                for (int k = 0; k < 4; k++) bad += o[(i * 2 + j) * 4 + k] != xv[(i * 3 + j + 1) * 4 + k];
        read_out(s, "pd", o, 105);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 5; j++)
                for (int k = 0; k < 7; k++) {
                    int si = i - 1, sj = j, sk = k - 2;
                    float want = si >= 0 && si < 2 && sj < 3 && sk >= 0 && sk < 4 ? xv[(si * 3 + sj) * 4 + sk] : 0.0f;
                    bad += o[(i * 5 + j) * 7 + k] != want;
                }
        read_out(s, "cc", o, 56);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 7; j++)
                for (int k = 0; k < 4; k++) {
                    int src = j < 2 ? j + 1 : j < 5 ? j - 2 : j - 5 + 1; /* sl rows are x rows 1, 2 */
                    bad += o[(i * 7 + j) * 4 + k] != xv[(i * 3 + src) * 4 + k];
                }
        const int off[3] = {0, 1, 3}, len[3] = {1, 2, 1};
        for (int p = 0; p < 3; p++) {
            read_out(s, names[3 + p], o, (size_t)6 * len[p]);
            for (int i = 0; i < 6; i++)
                for (int k = 0; k < len[p]; k++) bad += o[i * len[p] + k] != xv[i * 4 + off[p] + k];
        }
        for (int p = 0; p < 2; p++) {
            read_out(s, names[6 + p], o, 12);
            for (int i = 0; i < 12; i++) bad += o[i] != xv[p * 12 + i];
        }
        read_out(s, "bt", o, 30);
        for (int i = 0; i < 30; i++) bad += o[i] != rv[(i / 5) % 3];
        read_out(s, "back", o, 24);
        for (int i = 0; i < 24; i++) bad += o[i] != xv[i];
        CHECK_MSG(bad == 0, "%s: slice/pad/concat/split/broadcast_to: %d wrong values", bname(b), bad);
        mn_session_destroy(s);
    }
    /* the dump names each op with its parameters */
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    mn_graph_dump(g, f);
    fclose(f);
    CHECK(strstr(buf, "slice(%0) : f32[2,2,4] \"sl\" axis=1 start=1 length=2") != NULL);
    CHECK(strstr(buf, "pad(%0) : f32[3,5,7] \"pd\" pad=1:0,0:2,2:1") != NULL);
    CHECK(strstr(buf, "concat(%2, %0, %2) : f32[2,7,4] \"cc\" axis=1") != NULL);
    free(buf);
    mn_graph_destroy(g);
}

/* ---- pooling and upsampling ----------------------------------------------- */

/* PyTorch's avg_pool2d (ceil_mode false), written from its definition. */
static void ref_avgpool(double *y, const float *x, int64_t NC, int64_t H, int64_t W, int kh, int kw, int sh, int sw,
                        int ph, int pw, bool include_pad, int64_t OH, int64_t OW) {
    for (int64_t p = 0; p < NC; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                double s = 0;
                int cells = 0;
                for (int i = 0; i < kh; i++)
                    for (int j = 0; j < kw; j++) {
                        int64_t ih = oh * sh - ph + i, iw = ow * sw - pw + j;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        s += x[(p * H + ih) * W + iw];
                        cells++;
                    }
                y[(p * OH + oh) * OW + ow] = s / (include_pad ? kh * kw : cells);
            }
}

typedef struct pool_case {
    int64_t N, C, H, W;
    int kh, kw, sh, sw, ph, pw;
    bool include_pad;
} pool_case;

static void test_pooling(void) {
    static const pool_case pc[] = {
        {1, 1, 4, 4, 3, 3, 2, 2, 1, 1, true},   {1, 1, 4, 4, 3, 3, 2, 2, 1, 1, false},
        {2, 3, 7, 6, 2, 2, 2, 2, 0, 0, true},   {1, 2, 5, 9, 3, 2, 1, 3, 1, 1, false},
        {3, 1, 1, 3, 1, 3, 1, 1, 0, 1, true},   {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, true},
        {2, 5, 33, 31, 3, 3, 2, 2, 1, 1, true}, {2, 5, 33, 31, 5, 4, 3, 2, 2, 2, false},
    };
    for (size_t c = 0; c < sizeof pc / sizeof pc[0]; c++) {
        const pool_case *k = &pc[c];
        mn_graph *g;
        mn_tensor x, y, u;
        mn_graph_create(&g);
        mn_pool2d_params p = {{k->kh, k->kw}, {k->sh, k->sw}, {k->ph, k->pw}};
        CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 4, S(k->N, k->C, k->H, k->W)), mn_graph_error(g));
        CHECK_OK(mn_avg_pool2d(g, &y, x, &p, k->include_pad), mn_graph_error(g));
        CHECK_OK(mn_upsample_nearest2d(g, &u, x, 1 + (int)c % 3, 2), mn_graph_error(g));
        mn_graph_output(g, y, "y");
        mn_graph_output(g, u, "u");
        int rank;
        int64_t ys[4], us[4];
        mn_tensor_shape(g, y, &rank, ys);
        mn_tensor_shape(g, u, &rank, us);
        const int64_t OH = (k->H + 2 * k->ph - k->kh) / k->sh + 1, OW = (k->W + 2 * k->pw - k->kw) / k->sw + 1;
        CHECK_MSG(ys[2] == OH && ys[3] == OW, "avg_pool2d case %zu: output %lldx%lld, want %lldx%lld", c,
                  (long long)ys[2], (long long)ys[3], (long long)OH, (long long)OW);
        size_t nx = numel(4, S(k->N, k->C, k->H, k->W)), ny = numel(4, ys), nu = numel(4, us);
        float *xv = malloc(nx * 4), *yv = malloc(ny * 4), *uv = malloc(nu * 4);
        double *ref = malloc(ny * 8), *uref = malloc(nu * 8);
        fill(xv, nx);
        if (c < 2)
            for (size_t i = 0; i < nx; i++) xv[i] = 1.0f; /* the classic padded-ones example */
        ref_avgpool(ref, xv, k->N * k->C, k->H, k->W, k->kh, k->kw, k->sh, k->sw, k->ph, k->pw, k->include_pad, OH, OW);
        const int64_t sh = us[2] / k->H, sw = us[3] / k->W;
        for (int64_t pl = 0; pl < k->N * k->C; pl++)
            for (int64_t h = 0; h < us[2]; h++)
                for (int64_t w = 0; w < us[3]; w++)
                    uref[(pl * us[2] + h) * us[3] + w] = xv[(pl * k->H + h / sh) * k->W + w / sw];
        if (c == 0) { /* ones, kernel 3, stride 2, pad 1: corners see 4 of 9 cells */
            CHECK_NEAR(ref[0], 4.0 / 9, 1e-12);
            CHECK_NEAR(ref[1], 6.0 / 9, 1e-12);
            CHECK_NEAR(ref[3], 1.0, 1e-12);
        }
        for (int b = 0; b < nbackends(); b++) {
            mn_session *s = open_infer(g, backend(b));
            if (!s) continue;
            CHECK_OK(mn_session_set_input(s, "x", xv, nx * 4), mn_session_error(s));
            CHECK_OK(mn_session_run(s), mn_session_error(s));
            read_out(s, "y", yv, ny);
            read_out(s, "u", uv, nu);
            double e = max_rel(yv, ref, ny), eu = max_rel(uv, uref, nu);
            CHECK_MSG(e < 1e-6, "%s: avg_pool2d case %zu: max rel err %.3g", bname(b), c, e);
            CHECK_MSG(eu == 0, "%s: upsample case %zu: max err %.3g", bname(b), c, eu);
            mn_session_destroy(s);
        }
        free(xv), free(yv), free(uv), free(ref), free(uref);
        mn_graph_destroy(g);
    }
    /* global average pooling: [N,C,H,W] -> [N,C,1,1] means */
    mn_graph *g;
    mn_tensor x, y;
    mn_graph_create(&g);
    mn_graph_input(g, &x, "x", MN_F32, 4, S(2, 3, 5, 7));
    CHECK_OK(mn_global_avg_pool(g, &y, x), mn_graph_error(g));
    int rank;
    int64_t ys[4];
    mn_tensor_shape(g, y, &rank, ys);
    CHECK(rank == 4 && ys[0] == 2 && ys[1] == 3 && ys[2] == 1 && ys[3] == 1);
    mn_graph_output(g, y, "y");
    float xv[210], yv[6];
    double ref[6] = {0};
    fill(xv, 210);
    for (int i = 0; i < 210; i++) ref[i / 35] += xv[i] / 35.0;
    for (int b = 0; b < nbackends(); b++) {
        mn_session *s = open_infer(g, backend(b));
        if (!s) continue;
        CHECK_OK(mn_session_set_input(s, "x", xv, sizeof xv), mn_session_error(s));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        read_out(s, "y", yv, 6);
        CHECK_MSG(max_rel(yv, ref, 6) < 1e-6, "%s: global_avg_pool", bname(b));
        mn_session_destroy(s);
    }
    mn_graph_destroy(g);
}

/* ---- conv1d and conv_transpose2d ------------------------------------------- */

typedef struct c1 {
    int64_t N, C, L, O, K;
    mn_conv1d_params p;
    bool bias;
} c1;

static void test_conv1d(void) {
    static const c1 cs[] = {
        {2, 4, 9, 6, 3, {2, 1, 1, 2}, true}, {1, 3, 5, 2, 3, {1, 2, 2, 1}, false},
        {1, 1, 1, 1, 1, {0, 0, 0, 0}, true}, {2, 5, 7, 5, 3, {1, 1, 1, 5}, true}, /* depthwise */
        {3, 6, 31, 4, 5, {3, 2, 1, 2}, false},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const c1 *k = &cs[c];
        const int64_t grp = k->p.groups ? k->p.groups : 1, s = k->p.stride ? k->p.stride : 1;
        const int64_t d = k->p.dilation ? k->p.dilation : 1, pad = k->p.padding, Cg = k->C / grp, Og = k->O / grp;
        const int64_t L1 = (k->L + 2 * pad - d * (k->K - 1) - 1) / s + 1;
        mn_graph *g;
        mn_tensor x, w, bb = MN_NONE, y;
        mn_graph_create(&g);
        mn_graph_input(g, &x, "x", MN_F32, 3, S(k->N, k->C, k->L));
        mn_graph_input(g, &w, "w", MN_F32, 3, S(k->O, Cg, k->K));
        if (k->bias) mn_graph_input(g, &bb, "b", MN_F32, 1, S(k->O));
        CHECK_OK(mn_conv1d(g, &y, x, w, bb, &k->p), mn_graph_error(g));
        int rank;
        int64_t ys[4];
        mn_tensor_shape(g, y, &rank, ys);
        CHECK_MSG(rank == 3 && ys[0] == k->N && ys[1] == k->O && ys[2] == L1, "conv1d case %zu: shape", c);
        mn_graph_output(g, y, "y");
        size_t nx = (size_t)(k->N * k->C * k->L), nw = (size_t)(k->O * Cg * k->K), ny = (size_t)(k->N * k->O * L1);
        float *xv = malloc(nx * 4), *wv = malloc(nw * 4), bv[8], *yv = malloc(ny * 4);
        double *ref = calloc(ny, 8);
        fill(xv, nx), fill(wv, nw), fill(bv, 8);
        for (int64_t b = 0; b < k->N; b++)
            for (int64_t o = 0; o < k->O; o++)
                for (int64_t l = 0; l < L1; l++) {
                    double acc = k->bias ? bv[o] : 0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t t = 0; t < k->K; t++) {
                            int64_t il = l * s - pad + t * d;
                            if (il >= 0 && il < k->L)
                                acc += (double)wv[(o * Cg + ci) * k->K + t] * xv[(b * k->C + (o / Og) * Cg + ci) * k->L + il];
                        }
                    ref[(b * k->O + o) * L1 + l] = acc;
                }
        for (int be = 0; be < nbackends(); be++) {
            mn_session *ss = open_infer(g, backend(be));
            if (!ss) continue;
            mn_session_set_input(ss, "x", xv, nx * 4);
            mn_session_set_input(ss, "w", wv, nw * 4);
            if (k->bias) mn_session_set_input(ss, "b", bv, (size_t)k->O * 4);
            CHECK_OK(mn_session_run(ss), mn_session_error(ss));
            read_out(ss, "y", yv, ny);
            double e = max_rel(yv, ref, ny);
            CHECK_MSG(e < 1e-5, "%s: conv1d case %zu: max rel err %.3g", bname(be), c, e);
            mn_session_destroy(ss);
        }
        free(xv), free(wv), free(yv), free(ref);
        mn_graph_destroy(g);
    }
}

typedef struct ct {
    int64_t N, Cin, H, W, CoutG, KH, KW;
    mn_conv_transpose2d_params p;
    bool bias;
} ct;

static void test_conv_transpose(void) {
    static const ct cs[] = {
        {2, 4, 3, 4, 3, 3, 3, {{2, 2}, {1, 1}, {1, 0}, {1, 1}, 1}, true},
        {1, 6, 5, 2, 2, 2, 3, {{1, 3}, {0, 2}, {0, 2}, {2, 1}, 3}, true},
        {1, 1, 1, 1, 1, 1, 1, {{0, 0}, {0, 0}, {0, 0}, {0, 0}, 0}, false},
        {3, 2, 4, 4, 5, 4, 4, {{2, 2}, {1, 1}, {0, 0}, {1, 1}, 1}, true}, /* k4 s2 p1 doubles H, W */
        {1, 3, 7, 5, 1, 3, 3, {{1, 1}, {1, 1}, {0, 0}, {1, 1}, 3}, false}, /* depthwise */
        {2, 32, 8, 8, 16, 3, 3, {{2, 2}, {1, 1}, {1, 1}, {1, 1}, 1}, true}, /* implicit-GEMM path on Vulkan */
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const ct *k = &cs[c];
        const int64_t grp = k->p.groups ? k->p.groups : 1, Cout = k->CoutG * grp, CinG = k->Cin / grp;
        int64_t s[2], d[2], pd[2], op[2], O[2];
        for (int i = 0; i < 2; i++) {
            s[i] = k->p.stride[i] ? k->p.stride[i] : 1;
            d[i] = k->p.dilation[i] ? k->p.dilation[i] : 1;
            pd[i] = k->p.padding[i];
            op[i] = k->p.output_padding[i];
        }
        /* PyTorch's documented output size */
        O[0] = (k->H - 1) * s[0] - 2 * pd[0] + d[0] * (k->KH - 1) + op[0] + 1;
        O[1] = (k->W - 1) * s[1] - 2 * pd[1] + d[1] * (k->KW - 1) + op[1] + 1;
        mn_graph *g;
        mn_tensor x, w, bb = MN_NONE, y;
        mn_graph_create(&g);
        mn_graph_input(g, &x, "x", MN_F32, 4, S(k->N, k->Cin, k->H, k->W));
        mn_graph_input(g, &w, "w", MN_F32, 4, S(k->Cin, k->CoutG, k->KH, k->KW));
        if (k->bias) mn_graph_input(g, &bb, "b", MN_F32, 1, S(Cout));
        CHECK_OK(mn_conv_transpose2d(g, &y, x, w, bb, &k->p), mn_graph_error(g));
        int rank;
        int64_t ys[4];
        mn_tensor_shape(g, y, &rank, ys);
        CHECK_MSG(rank == 4 && ys[0] == k->N && ys[1] == Cout && ys[2] == O[0] && ys[3] == O[1],
                  "conv_transpose2d case %zu: shape [%lld,%lld,%lld,%lld], want [%lld,%lld,%lld,%lld]", c,
                  (long long)ys[0], (long long)ys[1], (long long)ys[2], (long long)ys[3], (long long)k->N,
                  (long long)Cout, (long long)O[0], (long long)O[1]);
        mn_graph_output(g, y, "y");
        size_t nx = numel(4, S(k->N, k->Cin, k->H, k->W)), nw = numel(4, S(k->Cin, k->CoutG, k->KH, k->KW));
        size_t ny = numel(4, S(k->N, Cout, O[0], O[1]));
        float *xv = malloc(nx * 4), *wv = malloc(nw * 4), bv[64], *yv = malloc(ny * 4);
        double *ref = calloc(ny, 8);
        fill(xv, nx), fill(wv, nw), fill(bv, 64);
        /* the definition: every input cell scatters x * w into the output */
        for (int64_t b = 0; b < k->N; b++)
            for (int64_t ci = 0; ci < k->Cin; ci++)
                for (int64_t ih = 0; ih < k->H; ih++)
                    for (int64_t iw = 0; iw < k->W; iw++)
                        for (int64_t co = 0; co < k->CoutG; co++)
                            for (int64_t a = 0; a < k->KH; a++)
                                for (int64_t e = 0; e < k->KW; e++) {
                                    int64_t oh = ih * s[0] - pd[0] + a * d[0], ow = iw * s[1] - pd[1] + e * d[1];
                                    if (oh < 0 || oh >= O[0] || ow < 0 || ow >= O[1]) continue;
                                    int64_t oc = (ci / CinG) * k->CoutG + co;
                                    ref[((b * Cout + oc) * O[0] + oh) * O[1] + ow] +=
                                        (double)xv[((b * k->Cin + ci) * k->H + ih) * k->W + iw] *
                                        wv[((ci * k->CoutG + co) * k->KH + a) * k->KW + e];
                                }
        if (k->bias)
            for (size_t i = 0; i < ny; i++) ref[i] += bv[(i / (size_t)(O[0] * O[1])) % (size_t)Cout];
        for (int be = 0; be < nbackends(); be++) {
            mn_session *ss = open_infer(g, backend(be));
            if (!ss) continue;
            mn_session_set_input(ss, "x", xv, nx * 4);
            mn_session_set_input(ss, "w", wv, nw * 4);
            if (k->bias) mn_session_set_input(ss, "b", bv, (size_t)Cout * 4);
            CHECK_OK(mn_session_run(ss), mn_session_error(ss));
            read_out(ss, "y", yv, ny);
            double e = max_rel(yv, ref, ny);
            CHECK_MSG(e < 1e-5, "%s: conv_transpose2d case %zu: max rel err %.3g", bname(be), c, e);
            mn_session_destroy(ss);
        }
        free(xv), free(wv), free(yv), free(ref);
        mn_graph_destroy(g);
    }
}

/* ---- batch norm ------------------------------------------------------------ */

#define BN_N 3
#define BN_C 4
#define BN_H 2
#define BN_W 3
#define BN_X (BN_N * BN_C * BN_H * BN_W)
#define BN_M 0.1f
#define BN_EPS 1e-5f

static mn_graph *bn_graph(bool training) {
    mn_graph *g;
    mn_tensor x, t, w, b, rm, rv, y, loss;
    mn_init uw = {MN_INIT_UNIFORM, 0.5f, 1.5f}, ub = {MN_INIT_UNIFORM, -0.5f, 0.5f};
    mn_init zeros = {MN_INIT_ZEROS, 0, 0}, ones = {MN_INIT_CONSTANT, 1, 0};
    int64_t c = BN_C;
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 4, S(BN_N, BN_C, BN_H, BN_W));
    st = st ? st : mn_graph_input(g, &t, "t", MN_F32, 4, S(BN_N, BN_C, BN_H, BN_W));
    st = st ? st : mn_graph_param(g, &w, "bn.weight", 1, &c, uw);
    st = st ? st : mn_graph_param(g, &b, "bn.bias", 1, &c, ub);
    st = st ? st : mn_graph_param(g, &rm, "bn.running_mean", 1, &c, zeros);
    st = st ? st : mn_graph_param(g, &rv, "bn.running_var", 1, &c, ones);
    st = st ? st : mn_batch_norm2d(g, &y, x, w, b, rm, rv, BN_M, BN_EPS, training);
    st = st ? st : mn_graph_output(g, y, "y");
    st = st ? st : mn_mse(g, &loss, y, t);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    return g;
}

/* Per channel: mean, biased and unbiased variance of x [N,C,H,W]. */
static void bn_stats(const float *x, double *mean, double *var_b, double *var_u) {
    const int cnt = BN_N * BN_H * BN_W;
    for (int c = 0; c < BN_C; c++) {
        double s = 0, q = 0;
        for (int n = 0; n < BN_N; n++)
            for (int i = 0; i < BN_H * BN_W; i++) s += x[(n * BN_C + c) * BN_H * BN_W + i];
        mean[c] = s / cnt;
        for (int n = 0; n < BN_N; n++)
            for (int i = 0; i < BN_H * BN_W; i++) {
                double dd = x[(n * BN_C + c) * BN_H * BN_W + i] - mean[c];
                q += dd * dd;
            }
        var_b[c] = q / cnt;
        var_u[c] = q / (cnt - 1);
    }
}

static void bn_ref(double *y, const float *x, const double *mean, const double *var, const float *w, const float *b) {
    for (int i = 0; i < BN_X; i++) {
        int c = (i / (BN_H * BN_W)) % BN_C;
        y[i] = (x[i] - mean[c]) / sqrt(var[c] + (double)BN_EPS) * w[c] + b[c];
    }
}

static void test_batch_norm(void) {
    mn_graph *gt = bn_graph(true), *ge = bn_graph(false);
    char path[] = "/tmp/mn_bn_ckptXXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    float xs[3][BN_X], tv[BN_X];
    for (int k = 0; k < 3; k++) {
        fill(xs[k], BN_X);
        for (int i = 0; i < BN_X; i++) xs[k][i] = xs[k][i] * (1.0f + (float)k) + 0.3f * (float)(i % BN_C); /* channel offsets */
    }
    fill(tv, BN_X);
    for (int be = 0; be < nbackends(); be++) {
        mn_session_options o = mn_session_default_options();
        o.mode = MN_MODE_TRAINING;
        o.backend = backend(be);
        o.device = be ? g_vk : NULL;
        o.optim = mn_optimizer_default(MN_OPTIM_SGD);
        o.optim.lr = 0.1f;
        o.seed = 11;
        mn_session *s = NULL;
        mn_status st = mn_session_create(&s, gt, &o);
        CHECK_OK(st, mn_session_error(s));
        if (st) {
            mn_session_destroy(s);
            continue;
        }
        double rm[BN_C] = {0}, rv[BN_C] = {1, 1, 1, 1}, mean[BN_C], vb[BN_C], vu[BN_C], yref[BN_X];
        float w[BN_C], b[BN_C], got[BN_X], grm[BN_C], grv[BN_C];
        for (int step = 0; step < 2; step++) {
            CHECK_OK(mn_session_get_param(s, "bn.weight", w, BN_C), mn_session_error(s));
            CHECK_OK(mn_session_get_param(s, "bn.bias", b, BN_C), mn_session_error(s));
            mn_session_set_input(s, "x", xs[step], sizeof xs[step]);
            mn_session_set_input(s, "t", tv, sizeof tv);
            CHECK_OK(mn_session_step(s), mn_session_error(s));
            /* output: normalised with the batch's biased variance */
            bn_stats(xs[step], mean, vb, vu);
            bn_ref(yref, xs[step], mean, vb, w, b);
            read_out(s, "y", got, BN_X);
            double e = max_rel(got, yref, BN_X);
            CHECK_MSG(e < 2e-6, "%s: batch_norm2d training output step %d: max rel err %.3g", bname(be), step, e);
            /* running statistics: PyTorch's update, unbiased variance */
            for (int c = 0; c < BN_C; c++) {
                rm[c] = (1 - (double)BN_M) * rm[c] + BN_M * mean[c];
                rv[c] = (1 - (double)BN_M) * rv[c] + BN_M * vu[c];
            }
            mn_session_get_param(s, "bn.running_mean", grm, BN_C);
            mn_session_get_param(s, "bn.running_var", grv, BN_C);
            CHECK_MSG(max_rel(grm, rm, BN_C) < 1e-6 && max_rel(grv, rv, BN_C) < 1e-6,
                      "%s: running stats after step %d: mean %g (want %g), var %g (want %g)", bname(be), step,
                      (double)grm[0], rm[0], (double)grv[0], rv[0]);
        }
        /* the affine parameters learn; run() does not touch the statistics */
        float w2[BN_C], rm2[BN_C];
        mn_session_get_param(s, "bn.weight", w2, BN_C);
        CHECK(memcmp(w, w2, sizeof w) != 0);
        mn_session_set_input(s, "x", xs[2], sizeof xs[2]);
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        mn_session_get_param(s, "bn.running_mean", rm2, BN_C);
        CHECK(memcmp(grm, rm2, sizeof rm2) == 0);
        /* checkpoints carry the running statistics (frozen parameters) */
        CHECK_OK(mn_session_save(s, path), mn_session_error(s));
        mn_session *s2 = NULL;
        CHECK_OK(mn_session_create(&s2, gt, &o), mn_session_error(s2));
        CHECK_OK(mn_session_load(s2, path), mn_session_error(s2));
        float l1[BN_C], l2[BN_C];
        mn_session_get_param(s2, "bn.running_mean", l1, BN_C);
        mn_session_get_param(s2, "bn.running_var", l2, BN_C);
        CHECK(memcmp(l1, grm, sizeof l1) == 0 && memcmp(l2, grv, sizeof l2) == 0);
        mn_session_destroy(s2);
        /* an inference graph (training = false) with the same names normalises
         * with the loaded running statistics */
        mn_session_options oi = o;
        oi.mode = MN_MODE_INFERENCE;
        mn_session *si = NULL;
        CHECK_OK(mn_session_create(&si, ge, &oi), mn_session_error(si));
        CHECK_OK(mn_session_load(si, path), mn_session_error(si));
        mn_session_get_param(si, "bn.weight", w, BN_C);
        mn_session_get_param(si, "bn.bias", b, BN_C);
        mn_session_set_input(si, "x", xs[2], sizeof xs[2]);
        mn_session_set_input(si, "t", tv, sizeof tv);
        CHECK_OK(mn_session_run(si), mn_session_error(si));
        double m64[BN_C], v64[BN_C];
        for (int c = 0; c < BN_C; c++) m64[c] = grm[c], v64[c] = grv[c];
        bn_ref(yref, xs[2], m64, v64, w, b);
        read_out(si, "y", got, BN_X);
        double e = max_rel(got, yref, BN_X);
        CHECK_MSG(e < 2e-6, "%s: batch_norm2d inference output: max rel err %.3g", bname(be), e);
        mn_session_destroy(si);
        mn_session_destroy(s);
    }
    /* the running statistics are frozen and get no optimizer state */
    CHECK(gt->nodes[graph_find(gt, "bn.running_mean")].flags & NODE_F_FROZEN);
    CHECK(ge->nodes[graph_find(ge, "bn.running_var")].flags & NODE_F_FROZEN);
    unlink(path);
    mn_graph_destroy(gt);
    mn_graph_destroy(ge);
}

/* conv + inference batch norm == the conv with mn_fold_batch_norm's weights. */
static void test_fold(void) {
    enum { N = 2, C = 4, H = 6, W = 5, O = 6, G = 2, K = 3, PC = C / G * K * K };
    mn_conv2d_params cp = {{1, 2}, {1, 1}, {1, 1}, G};
    mn_graph *g1, *g2;
    mn_tensor x, w, b, ga, be, rm, rv, y;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    mn_graph_create(&g1);
    mn_graph_create(&g2);
    mn_graph_input(g1, &x, "x", MN_F32, 4, S(N, C, H, W));
    mn_graph_param(g1, &w, "conv.weight", 4, S(O, C / G, K, K), z);
    mn_graph_param(g1, &b, "conv.bias", 1, S(O), z);
    mn_graph_param(g1, &ga, "bn.weight", 1, S(O), z);
    mn_graph_param(g1, &be, "bn.bias", 1, S(O), z);
    mn_graph_param(g1, &rm, "bn.running_mean", 1, S(O), z);
    mn_graph_param(g1, &rv, "bn.running_var", 1, S(O), z);
    CHECK_OK(mn_conv2d(g1, &y, x, w, b, &cp), mn_graph_error(g1));
    CHECK_OK(mn_batch_norm2d(g1, &y, y, ga, be, rm, rv, 0.1f, 1e-3f, false), mn_graph_error(g1));
    mn_graph_output(g1, y, "y");
    mn_graph_input(g2, &x, "x", MN_F32, 4, S(N, C, H, W));
    mn_graph_param(g2, &w, "conv.weight", 4, S(O, C / G, K, K), z);
    mn_graph_param(g2, &b, "conv.bias", 1, S(O), z);
    CHECK_OK(mn_conv2d(g2, &y, x, w, b, &cp), mn_graph_error(g2));
    mn_graph_output(g2, y, "y");
    float xv[N * C * H * W], wv[O * PC], bv[O], gv[O], bev[O], mv[O], vv[O], wf[O * PC], bf[O];
    fill(xv, sizeof xv / 4), fill(wv, O * PC), fill(bv, O), fill(gv, O), fill(bev, O), fill(mv, O), fill(vv, O);
    for (int i = 0; i < O; i++) vv[i] = 0.2f + vv[i] * vv[i];
    CHECK_OK(mn_fold_batch_norm(wf, bf, wv, bv, O, PC, gv, bev, mv, vv, 1e-3f), "fold");
    mn_session *s1 = open_infer(g1, MN_BACKEND_CPU), *s2 = open_infer(g2, MN_BACKEND_CPU);
    if (s1 && s2) {
        const struct {
            const char *n;
            const float *v;
            size_t c;
        } p1[] = {{"conv.weight", wv, O * PC}, {"conv.bias", bv, O}, {"bn.weight", gv, O},
                  {"bn.bias", bev, O},         {"bn.running_mean", mv, O}, {"bn.running_var", vv, O}};
        for (size_t i = 0; i < 6; i++) CHECK_OK(mn_session_set_param(s1, p1[i].n, p1[i].v, p1[i].c), mn_session_error(s1));
        CHECK_OK(mn_session_set_param(s2, "conv.weight", wf, O * PC), mn_session_error(s2));
        CHECK_OK(mn_session_set_param(s2, "conv.bias", bf, O), mn_session_error(s2));
        mn_session_set_input(s1, "x", xv, sizeof xv);
        mn_session_set_input(s2, "x", xv, sizeof xv);
        CHECK_OK(mn_session_run(s1), mn_session_error(s1));
        CHECK_OK(mn_session_run(s2), mn_session_error(s2));
        size_t ny;
        mn_session_numel(s1, "y", &ny);
        float *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
        double *r1 = malloc(ny * 8);
        read_out(s1, "y", y1, ny);
        read_out(s2, "y", y2, ny);
        for (size_t i = 0; i < ny; i++) r1[i] = y1[i];
        double e = max_rel(y2, r1, ny);
        CHECK_MSG(e < 1e-5, "folded conv differs from conv + batch norm: max rel err %.3g", e);
        free(y1), free(y2), free(r1);
    }
    mn_session_destroy(s1);
    mn_session_destroy(s2);
    /* in place, no conv bias, no affine: w * rsqrt(var + eps), -mean * rsqrt(var + eps) */
    float wi[2] = {2, -4}, bi[1], m1[1] = {3}, v1[1] = {4};
    CHECK_OK(mn_fold_batch_norm(wi, bi, wi, NULL, 1, 2, NULL, NULL, m1, v1, 0.0f), "fold in place");
    CHECK(wi[0] == 1.0f && wi[1] == -2.0f && bi[0] == -1.5f);
    float neg[1] = {-1};
    CHECK(mn_fold_batch_norm(wi, bi, wi, NULL, 1, 2, NULL, NULL, m1, neg, 0.5f) == MN_E_INVALID);
    CHECK(mn_fold_batch_norm(NULL, bi, wi, NULL, 1, 2, NULL, NULL, m1, v1, 0.0f) == MN_E_INVALID);
    CHECK(mn_fold_batch_norm(wi, bi, wi, NULL, 0, 2, NULL, NULL, m1, v1, 0.0f) == MN_E_INVALID);
    mn_graph_destroy(g1);
    mn_graph_destroy(g2);
}

/* ---- errors ------------------------------------------------------------------ */

/* The call failed with want, the message names `op`, the graph did not change. */
#define EXPECT_FAIL(call, want, op)                                                                          \
    do {                                                                                                    \
        int32_t n0_ = g->n;                                                                                 \
        mn_status st_ = (call);                                                                             \
        CHECK_MSG(st_ == (want), "%s -> %s, want %s (%s)", #call, mn_status_str(st_), mn_status_str(want),  \
                  mn_graph_error(g));                                                                       \
        CHECK_MSG(strstr(mn_graph_error(g), op) != NULL, "%s: message '%s' does not name %s", #call,        \
                  mn_graph_error(g), op);                                                                   \
        CHECK_MSG(g->n == n0_, "%s: the graph grew from %d to %d nodes", #call, n0_, g->n);                 \
    } while (0)

static void test_errors(void) {
    mn_graph *g;
    mn_tensor x3, x4, w, c, rm, rv, rk, y, outs[4];
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    mn_graph_create(&g);
    mn_graph_input(g, &x3, "x3", MN_F32, 3, S(2, 3, 4));
    mn_graph_input(g, &x4, "x4", MN_F32, 4, S(2, 4, 5, 5));
    mn_graph_param(g, &w, "w", 4, S(4, 3, 3, 3), z);
    mn_graph_param(g, &rm, "rm", 1, S(4), z);
    mn_graph_param(g, &rv, "rv", 1, S(4), z);
    float four[4] = {0};
    mn_graph_constant(g, &c, 1, S(4), four);
    mn_graph_constant(g, &rk, 1, S(4), four);
    mn_pool2d_params pp = {{3, 3}, {1, 1}, {2, 2}};
    mn_conv_transpose2d_params tp = {{2, 2}, {0, 0}, {2, 0}, {1, 1}, 1};
    mn_conv1d_params c1p = {1, 0, 1, 1};

    EXPECT_FAIL(mn_slice(g, &y, x3, 3, 0, 1), MN_E_SHAPE, "slice");
    EXPECT_FAIL(mn_slice(g, &y, x3, 2, 2, 3), MN_E_SHAPE, "slice");
    EXPECT_FAIL(mn_slice(g, &y, x3, 0, 0, 0), MN_E_SHAPE, "slice");
    EXPECT_FAIL(mn_pad(g, &y, x3, S(0, -1, 0), S(0, 0, 0)), MN_E_SHAPE, "pad");
    EXPECT_FAIL(mn_pad(g, &y, x3, NULL, S(0, 0, 0)), MN_E_INVALID, "pad");
    EXPECT_FAIL(mn_concat(g, &y, (mn_tensor[]){x3}, 1, 0), MN_E_INVALID, "concat");
    EXPECT_FAIL(mn_concat(g, &y, (mn_tensor[]){x3, x4}, 2, 0), MN_E_SHAPE, "concat");
    EXPECT_FAIL(mn_concat(g, &y, (mn_tensor[]){x3, x3}, 2, 3), MN_E_SHAPE, "concat");
    /* a chain of 8: the second link fails, the first is rolled back */
    EXPECT_FAIL(mn_concat(g, &y, (mn_tensor[]){x3, x3, x3, x3, x3, x3, x3, c}, 8, 0), MN_E_SHAPE, "concat");
    EXPECT_FAIL(mn_split(g, outs, x3, 2, 3, NULL), MN_E_SHAPE, "split");
    EXPECT_FAIL(mn_split(g, outs, x3, 2, 2, S(1, 2)), MN_E_SHAPE, "split");
    EXPECT_FAIL(mn_split(g, outs, x3, 2, 2, S(3, 0)), MN_E_SHAPE, "split");
    CHECK(outs[0] == MN_NONE && outs[1] == MN_NONE);
    EXPECT_FAIL(mn_broadcast_to(g, &y, x3, 3, S(2, 5, 4)), MN_E_SHAPE, "broadcast");
    EXPECT_FAIL(mn_broadcast_to(g, &y, x3, 5, S(1, 2, 3, 4, 5)), MN_E_SHAPE, "broadcast_to");
    EXPECT_FAIL(mn_avg_pool2d(g, &y, x4, &pp, true), MN_E_INVALID, "avgpool2d");
    EXPECT_FAIL(mn_avg_pool2d(g, &y, x3, &(mn_pool2d_params){{2, 2}, {0, 0}, {0, 0}}, true), MN_E_SHAPE, "avgpool2d");
    EXPECT_FAIL(mn_avg_pool2d(g, &y, x4, &(mn_pool2d_params){{6, 2}, {0, 0}, {0, 0}}, false), MN_E_SHAPE, "avgpool2d");
    EXPECT_FAIL(mn_avg_pool2d(g, &y, x4, NULL, true), MN_E_INVALID, "avg_pool2d");
    EXPECT_FAIL(mn_global_avg_pool(g, &y, x3), MN_E_SHAPE, "global_avg_pool");
    EXPECT_FAIL(mn_upsample_nearest2d(g, &y, x4, 0, 2), MN_E_INVALID, "upsample");
    EXPECT_FAIL(mn_upsample_nearest2x(g, &y, x3), MN_E_SHAPE, "upsample");
    EXPECT_FAIL(mn_conv1d(g, &y, x4, w, MN_NONE, &c1p), MN_E_SHAPE, "conv1d");
    mn_tensor w1;
    mn_graph_param(g, &w1, "w1", 3, S(4, 2, 3), z);
    EXPECT_FAIL(mn_conv1d(g, &y, x3, w1, MN_NONE, &c1p), MN_E_SHAPE, "conv1d"); /* fails inside: rolled back */
    EXPECT_FAIL(mn_conv_transpose2d(g, &y, x4, w, MN_NONE, &tp), MN_E_INVALID, "output_padding");
    tp.output_padding[0] = 0;
    EXPECT_FAIL(mn_conv_transpose2d(g, &y, x4, w, c, &tp), MN_E_SHAPE, "conv_transpose2d"); /* bias [4] vs C_out 3 */
    EXPECT_FAIL(mn_conv_transpose2d(g, &y, x3, w, MN_NONE, &tp), MN_E_SHAPE, "conv_transpose2d");
    mn_tensor wbad;
    mn_graph_param(g, &wbad, "wbad", 4, S(3, 3, 3, 3), z);
    EXPECT_FAIL(mn_conv_transpose2d(g, &y, x4, wbad, MN_NONE, &tp), MN_E_SHAPE, "conv_transpose2d");
    tp.padding[0] = 9;
    EXPECT_FAIL(mn_conv_transpose2d(g, &y, x4, w, MN_NONE, &tp), MN_E_SHAPE, "conv_transpose2d");
    EXPECT_FAIL(mn_batch_norm2d(g, &y, x4, MN_NONE, MN_NONE, c, rk, 0.1f, 1e-5f, true), MN_E_INVALID, "batch_norm2d");
    EXPECT_FAIL(mn_batch_norm2d(g, &y, x4, x3, MN_NONE, rm, rv, 0.1f, 1e-5f, true), MN_E_SHAPE, "weight");
    EXPECT_FAIL(mn_batch_norm2d(g, &y, x4, MN_NONE, MN_NONE, rm, rm, 0.1f, 1e-5f, true), MN_E_INVALID, "batch_norm2d");
    EXPECT_FAIL(mn_batch_norm2d(g, &y, x4, MN_NONE, MN_NONE, rm, rv, 1.5f, 1e-5f, true), MN_E_INVALID, "momentum");
    EXPECT_FAIL(mn_batch_norm2d(g, &y, x4, MN_NONE, MN_NONE, rm, rv, 0.1f, -1.0f, false), MN_E_INVALID, "eps");
    EXPECT_FAIL(mn_batch_norm2d(g, &y, x3, MN_NONE, MN_NONE, rm, rv, 0.1f, 1e-5f, false), MN_E_SHAPE, "batch_norm2d");
    mn_tensor one;
    mn_graph_input(g, &one, "one", MN_F32, 4, S(1, 4, 1, 1));
    EXPECT_FAIL(mn_batch_norm2d(g, &y, one, MN_NONE, MN_NONE, rm, rv, 0.1f, 1e-5f, true), MN_E_SHAPE, "one value");
    CHECK(!(g->nodes[graph_id(rm)].flags & NODE_F_FROZEN)); /* failed calls freeze nothing */
    /* inference batch norm takes any [C] tensors (here constants); one value per channel is fine */
    CHECK_OK(mn_batch_norm2d(g, &y, one, MN_NONE, MN_NONE, c, rk, 0.1f, 1e-5f, false), mn_graph_error(g));
    CHECK(mn_slice(NULL, &y, x3, 0, 0, 1) == MN_E_INVALID && mn_concat(NULL, &y, &x3, 2, 0) == MN_E_INVALID);
    CHECK(mn_batch_norm2d(g, NULL, x4, MN_NONE, MN_NONE, rm, rv, 0.1f, 1e-5f, true) == MN_E_INVALID);
    CHECK(mn_split(g, NULL, x3, 0, 2, NULL) == MN_E_INVALID);
    mn_graph_destroy(g);
}

/* ---- Vulkan vs CPU on larger shapes ----------------------------------------------- */

#ifdef MN_HAVE_VULKAN
typedef struct big {
    mn_graph *g;
    mn_tensor p[6];
    int np;
} big;

static mn_tensor bp(big *b, int rank, const int64_t *shape) {
    char name[16];
    snprintf(name, sizeof name, "p%d", b->np);
    mn_init u = {MN_INIT_UNIFORM, -1, 1};
    mn_graph_param(b->g, &b->p[b->np], name, rank, shape, u);
    return b->p[b->np++];
}

static mn_tensor big_convt(big *b) {
    mn_conv_transpose2d_params p = {{2, 2}, {1, 1}, {1, 1}, {1, 1}, 1};
    mn_tensor y;
    mn_conv_transpose2d(b->g, &y, bp(b, 4, S(2, 32, 8, 8)), bp(b, 4, S(32, 16, 3, 3)), bp(b, 1, S(16)), &p);
    return y;
}
static mn_tensor big_depthwise(big *b) {
    mn_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 32};
    mn_tensor y;
    mn_conv2d(b->g, &y, bp(b, 4, S(2, 32, 17, 19)), bp(b, 4, S(32, 1, 3, 3)), bp(b, 1, S(32)), &p);
    return y;
}
static mn_tensor big_moves(big *b) {
    mn_tensor a = bp(b, 3, S(3, 37, 5)), c = bp(b, 3, S(3, 41, 5)), d = bp(b, 3, S(3, 1, 5)), y;
    mn_concat(b->g, &y, (mn_tensor[]){a, c, d, a}, 4, 1); /* [3,116,5] */
    mn_slice(b->g, &y, y, 1, 13, 77);
    mn_pad(b->g, &y, y, S(1, 0, 2), S(0, 3, 1));
    return y;
}
static mn_tensor big_pool(big *b) {
    mn_pool2d_params p = {{3, 3}, {2, 2}, {1, 1}}, q = {{2, 3}, {1, 2}, {1, 1}};
    mn_tensor x = bp(b, 4, S(3, 5, 33, 31)), y, z;
    mn_avg_pool2d(b->g, &y, x, &p, true);
    mn_avg_pool2d(b->g, &z, x, &q, false);
    mn_upsample_nearest2x(b->g, &y, y); /* [3,5,34,32] */
    mn_slice(b->g, &y, y, 3, 0, 16);
    mn_slice(b->g, &z, z, 2, 0, 34);
    mn_mul(b->g, &y, y, z);
    return y;
}
static mn_tensor big_bn(big *b) {
    mn_tensor rm, rv, y;
    mn_init z = {MN_INIT_ZEROS, 0, 0}, one = {MN_INIT_CONSTANT, 1, 0};
    mn_graph_param(b->g, &rm, "rm", 1, S(8), z);
    mn_graph_param(b->g, &rv, "rv", 1, S(8), one);
    mn_batch_norm2d(b->g, &y, bp(b, 4, S(4, 8, 9, 7)), bp(b, 1, S(8)), bp(b, 1, S(8)), rm, rv, 0.1f, 1e-5f, true);
    return y;
}

static double cmp_node(mn_session *a, mn_session *b, int32_t id) {
    size_t n = (size_t)node_numel(&a->g->nodes[graph_id(id)]);
    float *x = malloc(n * 4), *y = malloc(n * 4);
    double e = INFINITY;
    if (!session_read_f32(a, id, x, n) && !session_read_f32(b, id, y, n)) e = th_nmse(x, y, n);
    free(x), free(y);
    return e;
}

/* The ops whose generators live in vk_gen_layout.c. */
static bool layout_op(op_id op) {
    switch (op) {
    case OP_SLICE: case OP_PAD: case OP_CONCAT: case OP_AVGPOOL2D: case OP_AVGPOOL2D_BWD:
    case OP_UPSAMPLE_NEAREST2D: case OP_EMA_UPDATE:
        return true;
    default:
        return false;
    }
}

/* Generates and compiles every layout-family node of a graph for two device
 * profiles; the launch covers every output element within the limits. */
static void test_codegen(void) {
    static const vk_caps profiles[2] = {
        {.subgroup_size = 32, .max_shared_bytes = 32768, .max_invocations = 1024, .max_groups = {65535, 65535, 65535}},
        {.subgroup_size = 16, .max_shared_bytes = 16384, .max_invocations = 64,
         .max_groups = {64, 65535, 65535}}, /* folds large launches */
    };
    mn_graph *g;
    mn_tensor x, xl, y, rm, rv;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    mn_graph_create(&g);
    mn_graph_input(g, &x, "x", MN_F32, 4, S(2, 3, 5, 7));
    mn_graph_input(g, &xl, "xl", MN_F32, 4, S(1, 3, 300, 333)); /* ~300k elements */
    mn_graph_param(g, &rm, "rm", 1, S(3), z);
    mn_graph_param(g, &rv, "rv", 1, S(3), z);
    mn_pool2d_params pp = {{3, 3}, {2, 2}, {1, 1}};
    mn_status st = mn_slice(g, &y, x, 3, 2, 4);
    st = st ? st : mn_pad(g, &y, x, S(0, 1, 2, 0), S(1, 0, 0, 3));
    st = st ? st : mn_pad(g, &y, xl, S(0, 0, 1, 1), S(0, 0, 1, 1));
    st = st ? st : mn_concat(g, &y, (mn_tensor[]){x, x, x, x, x, x}, 6, 1);
    st = st ? st : mn_concat(g, &y, (mn_tensor[]){xl, xl}, 2, 3);
    st = st ? st : mn_avg_pool2d(g, &y, xl, &pp, true);
    st = st ? st : mn_avg_pool2d(g, &y, x, &pp, false);
    st = st ? st : mn_upsample_nearest2x(g, &y, xl);
    if (!st) { /* the gradient ops: pooling backward (and sum mode), EMA */
        node p;
        memset(&p, 0, sizeof p);
        p.op = OP_AVGPOOL2D_BWD;
        p.nin = 1;
        st = mn_avg_pool2d(g, &p.in[0], xl, &pp, false);
        int64_t ip[7] = {3, 3, 2, 2, 1, 1, 0};
        memcpy(p.ip, ip, sizeof ip);
        p.rank = 4;
        memcpy(p.shape, S(1, 3, 300, 333), sizeof ip[0] * 4);
        st = st ? st : graph_add(g, &y, &p);
        mn_tensor m;
        st = st ? st : mn_mean(g, &m, x, 0, false);
        st = st ? st : mn_reshape(g, &m, m, 1, S(105));
        st = st ? st : mn_slice(g, &m, m, 0, 0, 3);
        memset(&p, 0, sizeof p);
        p.op = OP_EMA_UPDATE;
        p.nin = 2;
        p.in[0] = rm;
        p.in[1] = m;
        p.fp[0] = 0.1;
        p.fp[1] = 1.5;
        st = st ? st : graph_add(g, NULL, &p);
    }
    CHECK_OK(st, mn_graph_error(g));
    int32_t *order = malloc((size_t)g->n * sizeof *order), norder = 0;
    uint8_t *live = malloc((size_t)g->n);
    for (int32_t i = 0; i < g->n; i++) {
        live[i] = 1;
        if (!op_is_source(g->nodes[i].op)) order[norder++] = i;
    }
    memplan mp;
    char err[512] = "";
    memplan_options mo = {4, false, 0, NULL, NULL, 0};
    CHECK_OK(memplan_build(&mp, g, order, norder, live, &mo, err, sizeof err), err);
    shaderc_compiler_t cc = shaderc_compiler_initialize();
    shaderc_compile_options_t opt = shaderc_compile_options_initialize();
    shaderc_compile_options_set_target_env(opt, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
    int compiled = 0, folded = 0;
    bool seen[OP_COUNT] = {0};
    for (int32_t oi = 0; oi < norder; oi++) {
        const node *n = &g->nodes[order[oi]];
        if (!layout_op(n->op)) continue;
        seen[n->op] = true;
        for (int p = 0; p < 2; p++) {
            vk_kernel *k = malloc(sizeof *k);
            char what[96];
            snprintf(what, sizeof what, "%s (%%%d) profile %d", op_table[n->op].name, order[oi], p);
            st = vk_codegen_node(k, g, order[oi], &mp, &profiles[p], err, sizeof err);
            CHECK_MSG(st == MN_OK, "%s: %s", what, err);
            char *src = st ? NULL : vk_codegen_source(k);
            CHECK_MSG(st || src, "%s: no source", what);
            if (src) {
                const uint64_t cover = (uint64_t)k->groups[0] * k->groups[1] * k->groups[2] * k->local[0];
                CHECK_MSG(cover >= (uint64_t)node_numel(n) && k->local[0] <= profiles[p].max_invocations &&
                              k->groups[0] <= profiles[p].max_groups[0] && k->groups[1] <= profiles[p].max_groups[1],
                          "%s: launch %u x (%u,%u,%u)", what, k->local[0], k->groups[0], k->groups[1], k->groups[2]);
                folded += k->groups[1] > 1;
                shaderc_compilation_result_t r =
                    shaderc_compile_into_spv(cc, src, strlen(src), shaderc_glsl_compute_shader, what, "main", opt);
                bool ok = shaderc_result_get_compilation_status(r) == shaderc_compilation_status_success;
                CHECK_MSG(ok, "%s: does not compile:\n%s\n%s", what, shaderc_result_get_error_message(r), src);
                compiled += ok;
                shaderc_result_release(r);
                free(src);
            }
            free(k);
        }
    }
    for (int op = 0; op < OP_COUNT; op++)
        CHECK_MSG(!layout_op((op_id)op) || seen[op], "codegen: %s not covered", op_table[op].name);
    CHECK_MSG(folded > 0, "no launch folded into a 2-D grid");
    printf("  %d layout kernels compiled (%d with a 2-D grid)\n", compiled, folded);
    shaderc_compile_options_release(opt);
    shaderc_compiler_release(cc);
    memplan_free(&mp);
    free(order);
    free(live);
    mn_graph_destroy(g);
}

static void test_vulkan_big(void) {
    static const struct {
        const char *name;
        mn_tensor (*fn)(big *);
    } cs[] = {{"conv_transpose2d GEMM", big_convt}, {"depthwise 32ch", big_depthwise}, {"concat/slice/pad odd", big_moves},
              {"avg/sum pool + upsample", big_pool}, {"batch_norm2d train", big_bn}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        big b = {0};
        mn_graph_create(&b.g);
        mn_tensor y = cs[c].fn(&b), r, t, loss;
        int rank;
        int64_t ys[4];
        mn_status st = mn_tensor_shape(b.g, y, &rank, ys);
        size_t ny = st ? 0 : numel(rank, ys);
        float *rv = malloc(ny * 4 + 4);
        fill(rv, ny);
        st = st ? st : mn_graph_constant(b.g, &r, rank, ys, rv);
        st = st ? st : mn_mul(b.g, &t, y, r);
        st = st ? st : mn_sum(b.g, &loss, t, MN_ALL_AXES, false);
        st = st ? st : mn_graph_loss(b.g, loss);
        st = st ? st : mn_graph_output(b.g, y, "y");
        CHECK_OK(st, mn_graph_error(b.g));
        free(rv);
        mn_session *s[2] = {NULL, NULL};
        for (int be = 0; be < 2 && !st; be++) {
            mn_session_options o = mn_session_default_options();
            o.mode = MN_MODE_TRAINING;
            o.backend = backend(be);
            o.device = be ? g_vk : NULL;
            o.seed = 21;
            session_internal_options io = {.grads_only = true};
            CHECK_OK(session_create_ex(&s[be], b.g, &o, &io), mn_session_error(s[be]));
            CHECK_OK(session_forward_backward(s[be]), mn_session_error(s[be]));
        }
        if (s[0] && s[1] && !s[0]->dead && !s[1]->dead) {
            double fwd = cmp_node(s[1], s[0], y), bwd = 0;
            for (int i = 0; i < b.np; i++) {
                int32_t gv = session_grad_of(s[1], b.p[i]);
                CHECK(gv != MN_NONE && gv == session_grad_of(s[0], b.p[i]));
                double e = gv == MN_NONE ? INFINITY : cmp_node(s[1], s[0], gv);
                if (!(e <= bwd)) bwd = e;
            }
            printf("  %-26s fwd NMSE %9.2e  bwd NMSE %9.2e\n", cs[c].name, fwd, bwd);
            CHECK_MSG(fwd <= 1e-11 && bwd <= 1e-11, "%s: Vulkan differs from CPU: fwd %.3g bwd %.3g", cs[c].name, fwd, bwd);
        }
        mn_session_destroy(s[0]);
        mn_session_destroy(s[1]);
        mn_graph_destroy(b.g);
    }
}
#endif

int main(void) {
#ifdef MN_HAVE_VULKAN
    g_vk = th_require_vulkan(); /* none: the CPU checks run, then SKIP */
#endif
    test_moves();
    test_pooling();
    test_conv1d();
    test_conv_transpose();
    test_batch_norm();
    test_fold();
    test_errors();
#ifdef MN_HAVE_VULKAN
    test_codegen();
    if (g_vk) test_vulkan_big();
    mn_device_close(g_vk);
#endif
    return th_finish("test_ops_layout");
}
