/* test_ops_pointwise.c - the pointwise family of issue 4 beyond the shared
 * op table (op_cases.h): edge cases, reference formulas, bit-exact dropout
 * masks and error paths.
 *
 * - dropout: the mask against an independent re-implementation of the hash
 *   documented in graph/pointwise.h, the drop rate, p = 0 / 1, the counter,
 *   CPU == Vulkan bit for bit, backward = the same mask, identity in
 *   inference sessions;
 * - cross_entropy_ex against a direct reimplementation of PyTorch's formula
 *   (ignore_index, label smoothing, all rows ignored), f64/f32 CPU and Vulkan;
 * - pow, clamp, abs, where at special values (0, -0, inf, NaN, negative x)
 *   on CPU (against libm) and Vulkan;
 * - rms_norm / layer_norm of values ~1e4 (the dedicated ops; test_ops_norm
 *   covers real shapes), group_norm and bce_with_logits
 *   (logits +-100, the gradient at 0) against double references;
 * - composites and primitives refuse bad arguments and leave the graph
 *   unchanged; the dump shows the new parameters;
 * - a few training steps of a model using all of it agree on CPU and Vulkan.
 * Vulkan parts run when the build has the backend (MN_HAVE_VULKAN).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "session/session.h"

static mn_device *g_dev;

/* ---- helpers -------------------------------------------------------------- */

/* A session of g: training ones compute gradients only (no optimizer). */
static mn_session *open_s(const mn_graph *g, mn_backend_kind be, bool train, bool f64) {
    mn_session_options o = mn_session_default_options();
    o.mode = train ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
    o.backend = be;
    o.device = be == MN_BACKEND_VULKAN ? g_dev : NULL;
    session_internal_options io = {.f64 = f64, .grads_only = train};
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, g, &o, &io);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static int nbackends(void) { return g_dev ? 2 : 1; }
static mn_backend_kind backend_at(int b) { return b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU; }
static const char *backend_name(int b) { return b ? "vulkan" : "cpu"; }

/* The gradient of parameter p as f32 values. */
static void read_grad(mn_session *s, mn_tensor p, float *dst, size_t n) {
    int32_t gid = session_grad_of(s, p);
    CHECK(gid != MN_NONE);
    if (gid != MN_NONE) CHECK_OK(session_read_f32(s, gid, dst, n), mn_session_error(s));
}

static bool same_bits_or_both_nan(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static double rel_err(double v, double ref) { return fabs(v - ref) / (fabs(ref) > 1e-30 ? fabs(ref) : 1.0); }

/* ---- dropout --------------------------------------------------------------- */

/* The mask of graph/pointwise.h, written again from its description. */
static uint32_t ref_mix(uint32_t h) {
    h = (h ^ (h >> 16)) * 0x7feb352du;
    h = (h ^ (h >> 15)) * 0x846ca68bu;
    return h ^ (h >> 16);
}
static bool ref_dropped(uint64_t seed, const int32_t *counter, uint64_t i, float p) {
    uint32_t key = ref_mix(ref_mix((uint32_t)seed ^ 0x9e3779b9u) ^ (uint32_t)(seed >> 32));
    if (counter) key = ref_mix(key ^ ref_mix((uint32_t)*counter + 0x632be5abu));
    uint32_t h = ref_mix(ref_mix(key ^ (uint32_t)i) ^ (uint32_t)(i >> 32));
    return (double)h < (double)p * 4294967296.0;
}

#define DN 100003

/* y = dropout(x) for x = param "x" [DN], loss = sum(w * y) with w = 1 + i%3,
 * so dL/dx = w * mask * scale. Returns y and the gradient. */
static void dropout_run(int b, float p, uint64_t seed, const int32_t *counter, bool train, float *y, float *gx) {
    mn_graph *g;
    mn_tensor x, ctr = MN_NONE, d, wy, loss, w;
    mn_graph_create(&g);
    int64_t n = DN;
    mn_init zero = {MN_INIT_ZEROS, 0, 0};
    float *xv = malloc(DN * sizeof *xv), *wv = malloc(DN * sizeof *wv);
    for (int i = 0; i < DN; i++) {
        xv[i] = 1.0f + (float)(i % 13) * 0.25f; /* never 0: y == 0 only where dropped */
        wv[i] = 1.0f + (float)(i % 3);
    }
    mn_status st = mn_graph_param(g, &x, "x", 1, &n, zero);
    if (!st && counter) st = mn_graph_input(g, &ctr, "step", MN_I32, 0, NULL);
    st = st ? st : mn_dropout_ex(g, &d, x, p, seed, ctr);
    st = st ? st : mn_graph_constant(g, &w, 1, &n, wv);
    st = st ? st : mn_mul(g, &wy, d, w);
    st = st ? st : mn_sum(g, &loss, wy, MN_ALL_AXES, false);
    st = st ? st : mn_graph_output(g, d, "y");
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    mn_session *s = open_s(g, backend_at(b), train, false);
    if (s) {
        CHECK_OK(mn_session_set_param(s, "x", xv, DN), mn_session_error(s));
        if (counter) CHECK_OK(mn_session_set_input(s, "step", counter, 4), mn_session_error(s));
        CHECK_OK(train ? session_forward_backward(s) : mn_session_run(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "y", y, DN * sizeof *y), mn_session_error(s));
        if (gx) read_grad(s, x, gx, DN);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    free(xv);
    free(wv);
}

static void test_dropout(void) {
    float *y = malloc(DN * sizeof *y), *gx = malloc(DN * sizeof *gx), *y0 = malloc(DN * sizeof *y0);
    const float probs[] = {0.3f, 0.0f, 1.0f, 0.9f};
    const uint64_t seed = 0xfeedbeefcafe1234ull;
    float *cpu_y = malloc(DN * sizeof *cpu_y);
    for (size_t k = 0; k < MN_ARRAY_LEN(probs); k++) {
        const float p = probs[k];
        const float scale = (float)(p < 1 ? 1.0 / (1.0 - (double)p) : 0.0);
        for (int b = 0; b < nbackends(); b++) {
            dropout_run(b, p, seed, NULL, true, y, gx);
            long dropped = 0, bad_mask = 0, bad_val = 0, bad_grad = 0;
            for (int i = 0; i < DN; i++) {
                const float xv = 1.0f + (float)(i % 13) * 0.25f, wv = 1.0f + (float)(i % 3);
                const bool drop = ref_dropped(seed, NULL, (uint64_t)i, p);
                dropped += drop;
                bad_mask += drop != (y[i] == 0.0f);
                bad_val += !drop && y[i] != xv * scale;
                bad_grad += gx[i] != (drop ? 0.0f : wv * scale);
            }
            CHECK_MSG(bad_mask == 0 && bad_val == 0 && bad_grad == 0,
                      "dropout p=%g on %s: %ld mask, %ld value, %ld gradient mismatches", (double)p, backend_name(b),
                      bad_mask, bad_val, bad_grad);
            const double rate = (double)dropped / DN;
            CHECK_MSG(fabs(rate - p) < 0.01, "dropout p=%g: drop rate %g", (double)p, rate);
            if (b == 0) memcpy(cpu_y, y, DN * sizeof *y);
            else CHECK_MSG(memcmp(cpu_y, y, DN * sizeof *y) == 0, "dropout p=%g: vulkan != cpu", (double)p);
        }
    }
    /* the counter: a new mask per value, the same mask for the same value */
    for (int b = 0; b < nbackends(); b++) {
        int32_t c0 = 0, c1 = 1, c5 = -5;
        long diff = 0, bad = 0;
        dropout_run(b, 0.5f, seed, &c0, true, y0, NULL);
        dropout_run(b, 0.5f, seed, &c1, true, y, NULL);
        for (int i = 0; i < DN; i++) diff += (y0[i] == 0) != (y[i] == 0);
        CHECK_MSG(diff > DN / 3, "dropout counter 0 vs 1 on %s: masks differ in %ld elements only", backend_name(b),
                  diff);
        dropout_run(b, 0.5f, seed, &c5, true, y, NULL);
        for (int i = 0; i < DN; i++) bad += ref_dropped(seed, &c5, (uint64_t)i, 0.5f) != (y[i] == 0);
        CHECK_MSG(bad == 0, "dropout counter -5 on %s: %ld mask mismatches", backend_name(b), bad);
        dropout_run(b, 0.5f, seed, &c0, true, y, NULL);
        CHECK_MSG(memcmp(y0, y, DN * sizeof *y) == 0, "dropout on %s: not reproducible", backend_name(b));
    }
    /* inference sessions: the identity, no kernel */
    for (int b = 0; b < nbackends(); b++) {
        long bad = 0;
        dropout_run(b, 0.7f, seed, NULL, false, y, NULL);
        for (int i = 0; i < DN; i++) bad += y[i] != 1.0f + (float)(i % 13) * 0.25f;
        CHECK_MSG(bad == 0, "dropout in inference on %s: %ld elements changed", backend_name(b), bad);
    }
    free(y);
    free(gx);
    free(y0);
    free(cpu_y);
}

/* An inference session's graph has no dropout left; a training one keeps it. */
static void test_dropout_session_graph(void) {
    mn_graph *g;
    mn_tensor x, d;
    mn_graph_create(&g);
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){2, 3}), mn_graph_error(g));
    CHECK_OK(mn_dropout(g, &d, x, 0.5f, 9), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, d, "y"), mn_graph_error(g));
    mn_session *s = open_s(g, MN_BACKEND_CPU, false, false);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (s) mn_session_dump(s, "graph", f);
    fclose(f);
    CHECK_MSG(buf && !strstr(buf, "dropout") && strstr(buf, "reshape(%0)"), "inference graph:\n%s", buf);
    free(buf);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* ---- cross-entropy vs PyTorch's formula ----------------------------------- */

/* PyTorch: loss = (1-s) * sum_i nll_i / n + s/C * sum_i smooth_i / n over the
 * n rows not ignored, nll_i = -logp[i,y_i], smooth_i = -sum_j logp[i,j];
 * d logits = (softmax - (1-s) onehot - s/C) / n on those rows. */
static double torch_ce(const float *x, const int32_t *lab, int B, int C, bool ign, int32_t ii, double s,
                       double *grad) {
    double nll = 0, smooth = 0;
    int n = 0;
    for (int i = 0; i < B; i++) n += !(ign && lab[i] == ii);
    for (int i = 0; i < B; i++) {
        const float *r = x + i * C;
        double m = r[0], se = 0;
        for (int j = 1; j < C; j++) m = r[j] > m ? r[j] : m;
        for (int j = 0; j < C; j++) se += exp(r[j] - m);
        double lse = m + log(se);
        bool skip = ign && lab[i] == ii;
        for (int j = 0; j < C; j++) {
            double lp = r[j] - lse;
            if (!skip) {
                smooth -= lp;
                if (j == lab[i]) nll -= lp;
            }
            if (grad)
                grad[i * C + j] = skip || n == 0 ? 0.0 : (exp(lp) - (j == lab[i] ? 1 - s : 0) - s / C) / n;
        }
    }
    return n ? (1 - s) * nll / n + s / C * smooth / n : 0.0;
}

static void ce_check(const char *what, const float *xv, const int32_t *lab, int B, int C,
                     const mn_cross_entropy_params *p) {
    mn_graph *g;
    mn_tensor x, l, loss;
    mn_graph_create(&g);
    mn_init zero = {MN_INIT_ZEROS, 0, 0};
    mn_status st = mn_graph_param(g, &x, "logits", 2, (int64_t[]){B, C}, zero);
    st = st ? st : mn_graph_input(g, &l, "labels", MN_I32, 1, (int64_t[]){B});
    st = st ? st : mn_cross_entropy_ex(g, &loss, x, l, p);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    double *gref = malloc((size_t)(B * C) * sizeof *gref);
    float *gv = malloc((size_t)(B * C) * sizeof *gv);
    const double ref = torch_ce(xv, lab, B, C, p->use_ignore_index, p->ignore_index, p->label_smoothing, gref);
    for (int mode = 0; mode < 3; mode++) { /* cpu f64, cpu f32, vulkan */
        if (mode == 2 && nbackends() < 2) break;
        mn_session *s = open_s(g, mode == 2 ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, true, mode == 0);
        if (!s) continue;
        float lv = NAN;
        CHECK_OK(mn_session_set_param(s, "logits", xv, (size_t)(B * C)), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "labels", lab, (size_t)B * 4), mn_session_error(s));
        CHECK_OK(session_forward_backward(s), mn_session_error(s));
        CHECK_OK(mn_session_loss(s, &lv), mn_session_error(s));
        read_grad(s, x, gv, (size_t)(B * C));
        const double tol = mode == 0 ? 1e-7 : 2e-6; /* mode 0 reads f32-rounded values */
        double ge = 0;
        for (int i = 0; i < B * C; i++) {
            double e = fabs(gv[i] - gref[i]) / (1e-6 + fabs(gref[i]));
            ge = e > ge ? e : ge;
        }
        CHECK_MSG(fabs(lv - ref) <= tol * (1 + fabs(ref)) && ge <= (mode ? 1e-4 : 1e-6),
                  "%s (%s): loss %.9g vs torch %.9g, gradient max rel err %.3g", what,
                  mode == 0 ? "cpu f64" : mode == 1 ? "cpu f32" : "vulkan", (double)lv, ref, ge);
        mn_session_destroy(s);
    }
    free(gref);
    free(gv);
    mn_graph_destroy(g);
}

static void test_cross_entropy_torch(void) {
    enum { B = 9, C = 6 };
    float xv[B * C];
    for (int i = 0; i < B * C; i++) xv[i] = (float)(((i * 7919 + 11) % 61) / 10.0 - 3.0);
    for (int j = 0; j < C; j++) xv[4 * C + j] = j == 2 ? 1000.0f : -1000.0f; /* large logits stay finite */
    const int32_t lab[B] = {0, -100, 5, 2, 2, -100, 1, 3, 4};
    const mn_cross_entropy_params none = {false, 0, 0}, ign = {true, -100, 0}, both = {true, -100, 0.1f},
                                  smooth = {false, 0, 0.3f}, ign2 = {true, 2, 0.05f}, one = {false, 0, 1.0f};
    const int32_t lab_ok[B] = {0, 1, 5, 2, 2, 0, 1, 3, 4};
    ce_check("plain", xv, lab_ok, B, C, &none);
    ce_check("ignore_index -100", xv, lab, B, C, &ign);
    ce_check("ignore_index -100 + smoothing 0.1", xv, lab, B, C, &both);
    ce_check("smoothing 0.3", xv, lab_ok, B, C, &smooth);
    ce_check("ignore_index 2 + smoothing 0.05", xv, lab_ok, B, C, &ign2);
    ce_check("smoothing 1", xv, lab_ok, B, C, &one);
    const int32_t all[B] = {-100, -100, -100, -100, -100, -100, -100, -100, -100};
    ce_check("every row ignored", xv, all, B, C, &ign);
    ce_check("one row, C = 1", xv, lab_ok, 1, 1, &both);
    /* many rows: the Vulkan loss walks them with one workgroup, the backward
     * reads the count node */
    enum { BB = 3001, CC = 3 };
    float *bx = malloc(BB * CC * sizeof *bx);
    int32_t *bl = malloc(BB * sizeof *bl);
    for (int i = 0; i < BB * CC; i++) bx[i] = (float)(((i * 31 + 7) % 97) / 20.0 - 2.4);
    for (int i = 0; i < BB; i++) bl[i] = i % 7 == 0 ? -100 : i % CC;
    ce_check("3001 rows, ignore + smoothing", bx, bl, BB, CC, &both);
    free(bx);
    free(bl);
}

/* ---- special values ------------------------------------------------------- */

#define NSPEC 14
static const float spec_x[NSPEC] = {-2.0f, -0.5f, -0.0f, 0.0f, 0.5f, 2.0f, 3.0f, 1.0f, -1.0f, 1e-3f,
                                    1e4f, 0, 0, 0}; /* the last three: inf, -inf, NaN (set at run time) */

/* y = op(x) for x an input of the special values, on backend b. */
typedef mn_status (*spec_fn)(mn_graph *g, mn_tensor *y, mn_tensor x, float a);
static void run_special(int b, spec_fn fn, float a, float *y) {
    mn_graph *g;
    mn_tensor x, t;
    float xv[NSPEC];
    memcpy(xv, spec_x, sizeof xv);
    xv[11] = INFINITY, xv[12] = -INFINITY, xv[13] = NAN;
    mn_graph_create(&g);
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 1, (int64_t[]){NSPEC}), mn_graph_error(g));
    CHECK_OK(fn(g, &t, x, a), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, t, "y"), mn_graph_error(g));
    mn_session *s = open_s(g, backend_at(b), false, false);
    if (s) {
        CHECK_OK(mn_session_set_input(s, "x", xv, sizeof xv), mn_session_error(s));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "y", y, NSPEC * sizeof *y), mn_session_error(s));
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static mn_status f_pow(mn_graph *g, mn_tensor *y, mn_tensor x, float a) { return mn_pow(g, y, x, a); }
static mn_status f_clamp(mn_graph *g, mn_tensor *y, mn_tensor x, float a) { return mn_clamp(g, y, x, -a, a); }
static mn_status f_abs(mn_graph *g, mn_tensor *y, mn_tensor x, float a) { return mn_abs(g, y, x); }
/* where(x, 1, -1): NaN counts as true */
static mn_status f_where(mn_graph *g, mn_tensor *y, mn_tensor x, float a) {
    mn_tensor one, mone;
    mn_status st = mn_graph_scalar(g, &one, 1.0f);
    st = st ? st : mn_graph_scalar(g, &mone, -1.0f);
    return st ? st : mn_where(g, y, x, one, mone);
}

static void test_special_values(void) {
    static const float pows[] = {2, 3, -1, -2, 0.5f, 2.5f, -1.5f, 0, 1, 7, 0.3f};
    float xv[NSPEC], y[NSPEC], ycpu[NSPEC];
    memcpy(xv, spec_x, sizeof xv);
    xv[11] = INFINITY, xv[12] = -INFINITY, xv[13] = NAN;
    for (size_t k = 0; k < MN_ARRAY_LEN(pows); k++) {
        for (int b = 0; b < nbackends(); b++) {
            run_special(b, f_pow, pows[k], y);
            for (int i = 0; i < NSPEC; i++) {
                const float ref = powf(xv[i], pows[k]);
                /* Vulkan: the sign of a zero result is not checked: on the
                 * H200 pow(+0, odd p) and pow(+inf, odd p < 0) come back as -0
                 * (lavapipe gives +0); docs/OPS.md */
                bool ok = b == 0 ? same_bits_or_both_nan(y[i], ref)
                                 : (isnan(ref) ? isnan(y[i])
                                               : (ref == 0 ? y[i] == 0
                                                           : (isinf(ref) ? same_bits_or_both_nan(y[i], ref)
                                                                         : rel_err(y[i], ref) < 4e-6)));
                CHECK_MSG(ok, "pow(%g, %g) on %s = %.9g, libm %.9g", (double)xv[i], (double)pows[k], backend_name(b),
                          (double)y[i], (double)ref);
            }
        }
    }
    for (int b = 0; b < nbackends(); b++) {
        run_special(b, f_clamp, 1.0f, y);
        for (int i = 0; i < NSPEC; i++) {
            const float ref = isnan(xv[i]) ? xv[i] : fminf(fmaxf(xv[i], -1.0f), 1.0f);
            CHECK_MSG(same_bits_or_both_nan(y[i], ref) || (ref == 0 && y[i] == 0), "clamp(%g) on %s = %g",
                      (double)xv[i], backend_name(b), (double)y[i]);
        }
        run_special(b, f_abs, 0, y);
        for (int i = 0; i < NSPEC; i++)
            CHECK_MSG(same_bits_or_both_nan(y[i], fabsf(xv[i])), "abs(%g) on %s = %g", (double)xv[i],
                      backend_name(b), (double)y[i]);
        run_special(b, f_where, 0, y);
        for (int i = 0; i < NSPEC; i++)
            CHECK_MSG(y[i] == (xv[i] != 0 || isnan(xv[i]) ? 1.0f : -1.0f), "where(%g) on %s = %g", (double)xv[i],
                      backend_name(b), (double)y[i]);
        if (b == 0) memcpy(ycpu, y, sizeof y);
    }
}

/* d pow(x, p) / dx at x = 0 and negative x; abs and clamp gradients at their kinks. */
static void test_kink_gradients(void) {
    const float xv[5] = {0.0f, -2.0f, 1.0f, -1.0f, 0.5f};
    for (int b = 0; b < nbackends(); b++) {
        mn_graph *g;
        mn_tensor x, p0, p05, p3, a, c, l, t, loss;
        mn_init zero = {MN_INIT_ZEROS, 0, 0};
        mn_graph_create(&g);
        mn_status st = mn_graph_param(g, &x, "x", 1, (int64_t[]){5}, zero);
        st = st ? st : mn_pow(g, &p0, x, 0.0f);
        st = st ? st : mn_pow(g, &p05, x, 0.5f);
        st = st ? st : mn_pow(g, &p3, x, 3.0f);
        st = st ? st : mn_abs(g, &a, x);
        st = st ? st : mn_clamp(g, &c, x, -1.0f, 1.0f);
        /* loss = sum(p0 + 1e-3 p05 + p3 + a + c): the terms' gradients add */
        st = st ? st : mn_scale(g, &l, p05, 1e-3f);
        st = st ? st : mn_add(g, &t, p0, l);
        st = st ? st : mn_add(g, &t, t, p3);
        st = st ? st : mn_add(g, &t, t, a);
        st = st ? st : mn_add(g, &t, t, c);
        st = st ? st : mn_sum(g, &loss, t, MN_ALL_AXES, false);
        st = st ? st : mn_graph_loss(g, loss);
        CHECK_OK(st, mn_graph_error(g));
        mn_session *s = open_s(g, backend_at(b), true, false);
        if (s) {
            float gx[5];
            CHECK_OK(mn_session_set_param(s, "x", xv, 5), mn_session_error(s));
            CHECK_OK(session_forward_backward(s), mn_session_error(s));
            read_grad(s, x, gx, 5);
            /* x = 0: pow 0 -> 0, sqrt -> inf (torch), x^3 -> 0, abs -> 0, clamp -> 1 */
            CHECK_MSG(isinf(gx[0]) && gx[0] > 0, "%s: gradient at 0 = %g (want +inf from pow 0.5)", backend_name(b),
                      (double)gx[0]);
            /* x = -2: pow 0.5 is NaN there, and so is its gradient */
            CHECK_MSG(isnan(gx[1]), "%s: gradient at -2 = %g", backend_name(b), (double)gx[1]);
            /* x = 1 and -1: clamp's bounds pass no gradient (strict interior) */
            CHECK_MSG(fabsf(gx[2] - (5e-4f + 3 + 1)) < 1e-5f, "%s: gradient at 1 = %g", backend_name(b), (double)gx[2]);
            /* x = 0.5: 1e-3 * 0.5 / sqrt(0.5) + 3 * 0.25 + 1 + 1 */
            CHECK_MSG(fabsf(gx[4] - (float)(1e-3 * 0.5 / sqrt(0.5) + 0.75 + 2)) < 1e-5f, "%s: gradient at 0.5 = %g",
                      backend_name(b), (double)gx[4]);
        }
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
}

/* ---- composites vs double references --------------------------------------- */

/* y = op(x, ...) from inputs; returns the max relative error (to the row's
 * scale) against ref over backends. */
typedef enum { K_RMS, K_LN, K_GN } norm_kind;

static void norm_ref(norm_kind k, const float *x, const float *w, const float *bias, int rows, int d, double eps,
                     double *y) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        double mu = 0, v = 0;
        if (k != K_RMS) {
            for (int j = 0; j < d; j++) mu += xr[j];
            mu /= d;
        }
        for (int j = 0; j < d; j++) v += (xr[j] - mu) * (xr[j] - mu);
        v /= d;
        for (int j = 0; j < d; j++) {
            y[r * d + j] = (xr[j] - mu) / sqrt(v + eps);
            if (w) y[r * d + j] *= w[j];
            if (bias) y[r * d + j] += bias[j];
        }
    }
}

static void norm_check(const char *what, norm_kind k, int rows, int d, double center, double spread, double tol) {
    float *x = malloc((size_t)(rows * d) * sizeof *x), *y = malloc((size_t)(rows * d) * sizeof *y);
    double *ref = malloc((size_t)(rows * d) * sizeof *ref);
    float w[64], bias[64];
    for (int i = 0; i < rows * d; i++) x[i] = (float)(center + spread * (((i * 7919 + 3) % 1000) / 500.0 - 1.0));
    for (int j = 0; j < d; j++) w[j] = 0.5f + (float)j / (float)d, bias[j] = (float)(j % 3) - 1.0f;
    /* group_norm over [1, rows, d] with one channel per group = layer norm of each row */
    norm_ref(k, x, k == K_GN ? NULL : w, k == K_LN ? bias : NULL, rows, d, 1e-5, ref);
    if (k == K_GN)
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < d; j++) ref[r * d + j] = ref[r * d + j] * w[r] + bias[r];
    for (int b = 0; b < nbackends(); b++) {
        mn_graph *g;
        mn_tensor xt, wt, bt, yt;
        mn_graph_create(&g);
        mn_status st = mn_graph_input(g, &xt, "x", MN_F32, 2, (int64_t[]){rows, d});
        const int nw = k == K_GN ? rows : d;
        st = st ? st : mn_graph_constant(g, &wt, 1, (int64_t[]){nw}, w);
        st = st ? st : mn_graph_constant(g, &bt, 1, (int64_t[]){nw}, bias);
        if (!st && k == K_RMS) st = mn_rms_norm(g, &yt, xt, wt, 1e-5f);
        if (!st && k == K_LN) st = mn_layer_norm(g, &yt, xt, wt, bt, 1e-5f);
        if (!st && k == K_GN) {
            mn_tensor x3;
            st = mn_reshape(g, &x3, xt, 3, (int64_t[]){1, rows, d});
            st = st ? st : mn_group_norm(g, &yt, x3, rows, wt, bt, 1e-5f);
        }
        st = st ? st : mn_graph_output(g, yt, "y");
        CHECK_OK(st, mn_graph_error(g));
        mn_session *s = open_s(g, backend_at(b), false, false);
        if (s) {
            CHECK_OK(mn_session_set_input(s, "x", x, (size_t)(rows * d) * 4), mn_session_error(s));
            CHECK_OK(mn_session_run(s), mn_session_error(s));
            CHECK_OK(mn_session_output(s, "y", y, (size_t)(rows * d) * 4), mn_session_error(s));
            double worst = 0;
            bool finite = true;
            for (int i = 0; i < rows * d; i++) {
                finite = finite && isfinite(y[i]);
                double e = fabs(y[i] - ref[i]) / (1 + fabs(ref[i]));
                worst = e > worst ? e : worst;
            }
            CHECK_MSG(finite && worst <= tol, "%s on %s: max error %.3g > %.3g", what, backend_name(b), worst, tol);
        }
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
    free(x);
    free(y);
    free(ref);
}

static void test_norms(void) {
    norm_check("rms_norm, values ~1e4", K_RMS, 5, 33, 0, 1e4, 1e-6);
    norm_check("rms_norm, 1e4 + small spread", K_RMS, 3, 7, 1e4, 1, 1e-6);
    norm_check("rms_norm, d = 1", K_RMS, 4, 1, 0, 3, 1e-6);
    norm_check("layer_norm, values ~1e4", K_LN, 5, 33, 0, 1e4, 1e-6);
    norm_check("layer_norm, 1e4 + spread 1e3", K_LN, 3, 64, 1e4, 1e3, 2e-5);
    /* the f32 mean of values 1e4 +- 1 carries ~5e-4 absolute error: an f32
     * storage limit of any two-pass normalisation, not of the formula */
    norm_check("layer_norm, 1e4 + spread 1", K_LN, 3, 9, 1e4, 1, 3e-3);
    norm_check("layer_norm, d = 1", K_LN, 4, 1, 0, 3, 1e-6);
    norm_check("group_norm, 1 channel per group", K_GN, 6, 20, 0, 5, 1e-6);
    norm_check("group_norm, values ~1e4", K_GN, 3, 17, 0, 1e4, 1e-6);
}

/* bce_with_logits at +-100 and 0: finite, PyTorch's values and gradients. */
static void test_bce(void) {
    enum { N = 8 };
    const float xv[N] = {100, -100, 0, 0, 3.5f, -20, 88, -1e4f};
    const float tv[N] = {1, 1, 0.3f, 1, 0, 0.5f, 0, 0};
    double ref = 0, gref[N];
    for (int i = 0; i < N; i++) {
        double x = xv[i], t = tv[i];
        ref += (x > 0 ? x : 0) - x * t + log1p(exp(-fabs(x)));
        gref[i] = (1 / (1 + exp(-x)) - t) / N;
    }
    ref /= N;
    for (int b = 0; b < nbackends(); b++) {
        mn_graph *g;
        mn_tensor x, t, loss;
        mn_init zero = {MN_INIT_ZEROS, 0, 0};
        mn_graph_create(&g);
        mn_status st = mn_graph_param(g, &x, "x", 1, (int64_t[]){N}, zero);
        st = st ? st : mn_graph_constant(g, &t, 1, (int64_t[]){N}, tv);
        st = st ? st : mn_bce_with_logits(g, &loss, x, t);
        st = st ? st : mn_graph_loss(g, loss);
        CHECK_OK(st, mn_graph_error(g));
        mn_session *s = open_s(g, backend_at(b), true, false);
        if (s) {
            float lv = NAN, gx[N];
            CHECK_OK(mn_session_set_param(s, "x", xv, N), mn_session_error(s));
            CHECK_OK(session_forward_backward(s), mn_session_error(s));
            CHECK_OK(mn_session_loss(s, &lv), mn_session_error(s));
            read_grad(s, x, gx, N);
            CHECK_MSG(isfinite(lv) && rel_err(lv, ref) < 1e-6, "bce on %s: loss %.9g vs %.9g", backend_name(b),
                      (double)lv, ref);
            for (int i = 0; i < N; i++)
                CHECK_MSG(isfinite(gx[i]) && fabs(gx[i] - gref[i]) < 1e-7, "bce on %s: d/dx[%d] (x = %g) = %.9g vs %.9g",
                          backend_name(b), i, (double)xv[i], (double)gx[i], gref[i]);
        }
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
}

/* ---- errors and the dump ---------------------------------------------------- */

static void test_errors(void) {
    mn_graph *g;
    mn_tensor x, x4, w3, i32, y, c;
    mn_graph_create(&g);
    mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){3, 5});
    mn_graph_input(g, &x4, "x4", MN_F32, 4, (int64_t[]){2, 6, 3, 3});
    mn_graph_input(g, &w3, "w3", MN_F32, 1, (int64_t[]){3});
    mn_graph_input(g, &i32, "i", MN_I32, 1, (int64_t[]){3});
    mn_graph_scalar(g, &c, 1.0f);
    const int32_t n0 = g->n;
#define EXPECT(call, status, text)                                                                                 \
    do {                                                                                                           \
        mn_status st_ = (call);                                                                                    \
        CHECK_MSG(st_ == (status) && strstr(mn_graph_error(g), text) && g->n == n0,                              \
                  "%s -> %s (%s), %d nodes (want %d)", #call, mn_status_str(st_), mn_graph_error(g), g->n, n0);     \
    } while (0)
    EXPECT(mn_clamp(g, &y, x, 1.0f, -1.0f), MN_E_INVALID, "clamp: min 1 must be <= max -1");
    EXPECT(mn_clamp(g, &y, x, NAN, 1.0f), MN_E_INVALID, "clamp");
    EXPECT(mn_pow(g, &y, x, INFINITY), MN_E_INVALID, "pow: exponent inf must be finite");
    EXPECT(mn_abs(g, &y, i32), MN_E_DTYPE, "abs");
    EXPECT(mn_where(g, &y, x, w3, x), MN_E_SHAPE, "where: shapes [3,5] (cond), [3] (a) and [3,5] (b)");
    EXPECT(mn_dropout(g, &y, x, 1.5f, 1), MN_E_INVALID, "dropout: probability 1.5");
    EXPECT(mn_dropout_ex(g, &y, x, 0.5f, 1, w3), MN_E_DTYPE, "dropout: the counter must be an i32 scalar");
    EXPECT(mn_dropout_ex(g, &y, x, 0.5f, 1, i32), MN_E_DTYPE, "dropout: the counter must be an i32 scalar");
    const mn_cross_entropy_params bad = {false, 0, 1.5f};
    EXPECT(mn_cross_entropy_ex(g, &y, x, i32, &bad), MN_E_INVALID, "label smoothing 1.5");
    EXPECT(mn_rms_norm(g, &y, x, w3, 1e-5f), MN_E_SHAPE, "rms_norm: weight [3] must be [5] for x [3,5]");
    EXPECT(mn_rms_norm(g, &y, c, MN_NONE, 1e-5f), MN_E_SHAPE, "rms_norm: x must have rank >= 1");
    EXPECT(mn_rms_norm(g, &y, x, MN_NONE, -1.0f), MN_E_INVALID, "rms_norm: eps -1");
    EXPECT(mn_layer_norm(g, &y, x, MN_NONE, w3, 1e-5f), MN_E_SHAPE, "layer_norm: bias [3] must be [5]");
    EXPECT(mn_layer_norm(g, &y, i32, MN_NONE, MN_NONE, 1e-5f), MN_E_DTYPE, "layer_norm: x must be f32");
    EXPECT(mn_group_norm(g, &y, x4, 4, MN_NONE, MN_NONE, 1e-5f), MN_E_SHAPE, "group_norm: 4 groups do not divide");
    EXPECT(mn_group_norm(g, &y, x4, 3, w3, MN_NONE, 1e-5f), MN_E_SHAPE, "group_norm: weight [3] must be [6]");
    EXPECT(mn_group_norm(g, &y, x, 0, MN_NONE, MN_NONE, 1e-5f), MN_E_SHAPE, "group_norm: 0 groups");
    /* silu(a) is added, then mul fails: the composite takes it back */
    EXPECT(mn_swiglu(g, &y, x, w3), MN_E_SHAPE, "swiglu: mul: shapes [3,5] and [3] do not broadcast");
    EXPECT(mn_geglu(g, &y, x, 99), MN_E_INVALID, "geglu: b 99 is not a tensor");
    EXPECT(mn_l1_loss(g, &y, x, x4), MN_E_SHAPE, "l1_loss: shapes [3,5] and [2,6,3,3] must be equal");
    EXPECT(mn_bce_with_logits(g, &y, x, w3), MN_E_SHAPE, "bce_with_logits: shapes");
    EXPECT(mn_rms_norm(g, NULL, x, MN_NONE, 1e-5f), MN_E_INVALID, "rms_norm: out is NULL");
#undef EXPECT
    CHECK(mn_abs(NULL, &y, x) == MN_E_INVALID);
    CHECK(mn_dropout(NULL, &y, x, NAN, 1) == MN_E_INVALID); /* no NaN-to-integer cast (UBSan) */
    /* where broadcasts cond with a, then the result with b (found by fuzz_graph) */
    mn_tensor c71, b4;
    mn_graph_input(g, &c71, "c71", MN_F32, 2, (int64_t[]){7, 1});
    mn_graph_input(g, &b4, "b4", MN_F32, 4, (int64_t[]){2, 1, 1, 7});
    CHECK_OK(mn_where(g, &y, c71, c71, b4), mn_graph_error(g));
    int r = 0;
    int64_t s[MN_MAX_RANK];
    mn_tensor_shape(g, y, &r, s);
    CHECK_MSG(r == 4 && s[0] == 2 && s[1] == 1 && s[2] == 7 && s[3] == 7,
              "where([7,1], [7,1], [2,1,1,7]) is rank %d [%lld,%lld,%lld,%lld]", r, (long long)s[0], (long long)s[1],
              (long long)s[2], (long long)s[3]);
    CHECK(mn_layer_norm(NULL, &y, x, MN_NONE, MN_NONE, 1e-5f) == MN_E_INVALID);
    /* the graph still works after all that */
    CHECK_OK(mn_rms_norm(g, &y, x, MN_NONE, 1e-5f), mn_graph_error(g));
    mn_graph_destroy(g);
}

static void test_dump(void) {
    mn_graph *g;
    mn_tensor x, l, y;
    mn_graph_create(&g);
    mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){2, 3});
    mn_graph_input(g, &l, "l", MN_I32, 1, (int64_t[]){2});
    mn_clamp(g, &y, x, -1, 2);
    mn_pow(g, &y, x, 0.5f);
    mn_dropout(g, &y, x, 0.25f, 42);
    const mn_cross_entropy_params p = {true, -100, 0.1f};
    mn_cross_entropy_ex(g, &y, x, l, &p);
    mn_cross_entropy(g, &y, x, l);
    mn_tensor w;
    mn_graph_input(g, &w, "w", MN_F32, 1, (int64_t[]){3});
    mn_rms_norm(g, &y, x, w, 1e-5f);
    mn_layer_norm(g, &y, x, MN_NONE, w, 0.25f);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    mn_graph_dump(g, f);
    fclose(f);
    const char *want = "%2 = clamp(%0) : f32[2,3] min=-1 max=2\n"
                       "%3 = pow(%0) : f32[2,3] p=0.5\n"
                       "%4 = dropout(%0) : f32[2,3] p=0.25 seed=42\n"
                       "%5 = ce_rows(%0, %1) : f32[2,3] ignore_index=-100 smoothing=0.100000001\n"
                       "%6 = cross_entropy(%0, %1, %5) : f32[] ignore_index=-100 smoothing=0.100000001\n"
                       "%7 = ce_rows(%0, %1) : f32[2,3]\n"
                       "%8 = cross_entropy(%0, %1, %7) : f32[]\n";
    const char *want_norm = "%10 = rms_norm(%0, %9) : f32[2,3] eps=9.99999975e-06\n"
                            "%11 = layer_norm(%0, %9) : f32[2,3] eps=0.25 bias\n";
    CHECK_MSG(buf && strstr(buf, want) && strstr(buf, want_norm), "dump:\n%s", buf);
    free(buf);
    mn_graph_destroy(g);
}

/* ---- training with all of it ------------------------------------------------ */

/* x -> layer_norm -> matmul -> swiglu -> dropout(counter) -> rms_norm ->
 * matmul -> cross_entropy_ex (ignore + smoothing) + 0.1 * l1 + bce; 3 Adam
 * steps with the step fed as the counter; CPU and Vulkan parameters agree. */
static void test_training(void) {
    if (nbackends() < 2) return;
    mn_graph *g;
    mn_tensor x, lab, step, w1, w2, w3, gam, h, a, bb, s, d, r, lg, ce, l1, l1s, bce, t, loss, zero;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, one = {MN_INIT_CONSTANT, 1, 0};
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){6, 8});
    st = st ? st : mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){6});
    st = st ? st : mn_graph_input(g, &step, "step", MN_I32, 0, NULL);
    st = st ? st : mn_graph_param(g, &w1, "w1", 2, (int64_t[]){8, 10}, ku);
    st = st ? st : mn_graph_param(g, &w2, "w2", 2, (int64_t[]){8, 10}, ku);
    st = st ? st : mn_graph_param(g, &w3, "w3", 2, (int64_t[]){10, 4}, ku);
    st = st ? st : mn_graph_param(g, &gam, "gamma", 1, (int64_t[]){8}, one);
    st = st ? st : mn_layer_norm(g, &h, x, gam, MN_NONE, 1e-5f);
    st = st ? st : mn_matmul(g, &a, h, w1);
    st = st ? st : mn_matmul(g, &bb, h, w2);
    st = st ? st : mn_swiglu(g, &s, a, bb);
    st = st ? st : mn_dropout_ex(g, &d, s, 0.2f, 11, step);
    st = st ? st : mn_rms_norm(g, &r, d, MN_NONE, 1e-6f);
    st = st ? st : mn_matmul(g, &lg, r, w3);
    const mn_cross_entropy_params cp = {true, -100, 0.1f};
    st = st ? st : mn_cross_entropy_ex(g, &ce, lg, lab, &cp);
    st = st ? st : mn_graph_scalar(g, &zero, 0.0f);
    st = st ? st : mn_clamp(g, &t, lg, -0.5f, 0.5f);
    st = st ? st : mn_l1_loss(g, &l1, lg, t);
    st = st ? st : mn_scale(g, &l1s, l1, 0.1f);
    st = st ? st : mn_where(g, &t, lg, zero, lg); /* zero where lg != 0: targets of 0 */
    st = st ? st : mn_bce_with_logits(g, &bce, lg, t);
    st = st ? st : mn_add(g, &loss, ce, l1s);
    st = st ? st : mn_add(g, &loss, loss, bce);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    mn_session *ss[2] = {NULL, NULL};
    for (int b = 0; b < 2; b++) {
        mn_session_options o = mn_session_default_options();
        o.mode = MN_MODE_TRAINING;
        o.backend = backend_at(b);
        o.device = b ? g_dev : NULL;
        o.optim = mn_optimizer_default(MN_OPTIM_ADAM);
        o.optim.lr = 0.01f;
        o.seed = 3;
        CHECK_OK(mn_session_create(&ss[b], g, &o), mn_session_error(ss[b]));
    }
    float xv[48], losses[2][3] = {{0}};
    int32_t lv[6] = {0, 3, -100, 2, 1, -100};
    for (int i = 0; i < 48; i++) xv[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 2 && ss[0] && ss[1]; b++) {
            int32_t sv = k;
            CHECK_OK(mn_session_set_input(ss[b], "x", xv, sizeof xv), mn_session_error(ss[b]));
            CHECK_OK(mn_session_set_input(ss[b], "labels", lv, sizeof lv), mn_session_error(ss[b]));
            CHECK_OK(mn_session_set_input(ss[b], "step", &sv, sizeof sv), mn_session_error(ss[b]));
            CHECK_OK(mn_session_step(ss[b]), mn_session_error(ss[b]));
            CHECK_OK(mn_session_loss(ss[b], &losses[b][k]), mn_session_error(ss[b]));
        }
    for (int k = 0; k < 3; k++)
        CHECK_MSG(isfinite(losses[0][k]) && rel_err(losses[1][k], losses[0][k]) < 1e-5,
                  "training step %d: loss cpu %.9g vulkan %.9g", k, (double)losses[0][k], (double)losses[1][k]);
    static const char *names[] = {"w1", "w2", "w3", "gamma"};
    for (int i = 0; i < 4 && ss[0] && ss[1]; i++) {
        float pc[80], pv[80];
        size_t n = 0;
        mn_session_numel(ss[0], names[i], &n);
        mn_session_get_param(ss[0], names[i], pc, n);
        mn_session_get_param(ss[1], names[i], pv, n);
        double num = 0, den = 0;
        for (size_t j = 0; j < n; j++) num += (pv[j] - pc[j]) * (double)(pv[j] - pc[j]), den += (double)pc[j] * pc[j];
        CHECK_MSG(num <= 1e-10 * den, "training: parameter %s differs, NMSE %.3g", names[i], num / den);
    }
    mn_session_destroy(ss[0]);
    mn_session_destroy(ss[1]);
    mn_graph_destroy(g);
}

/* sin and cos over the arguments a timestep embedding meets (|x| up to
 * 2000 rad) and past them, against libm in double, on each backend; and
 * NaN / inf in, NaN out. */
static void test_sin_cos(void) {
    enum { N = 4096 + 6 };
    float x[N];
    for (int i = 0; i < 4096; i++) x[i] = -2000.0f + 4000.0f * (float)i / 4095.0f + 1e-3f * (float)(i % 7);
    const float extra[6] = {0.0f, -0.0f, 1e-20f, 99999.0f, 1.5707964f, 3.1415927f};
    for (int i = 0; i < 6; i++) x[4096 + i] = extra[i];
    for (int b = 0; b < nbackends(); b++)
        for (int f = 0; f < 2; f++) {
            mn_graph *g;
            mn_tensor xi, y;
            mn_graph_create(&g);
            mn_graph_input(g, &xi, "x", MN_F32, 1, (int64_t[]){N});
            CHECK_OK(f ? mn_cos(g, &y, xi) : mn_sin(g, &y, xi), mn_graph_error(g));
            mn_graph_output(g, y, "y");
            mn_session *s = open_s(g, backend_at(b), false, false);
            float out[N];
            double worst = 0;
            if (s) {
                CHECK_OK(mn_session_set_input(s, "x", x, sizeof x), mn_session_error(s));
                CHECK_OK(mn_session_run(s), mn_session_error(s));
                CHECK_OK(mn_session_output(s, "y", out, sizeof out), mn_session_error(s));
                for (int i = 0; i < N; i++) {
                    const double ref = f ? cos((double)x[i]) : sin((double)x[i]);
                    if (fabs(out[i] - ref) > worst) worst = fabs(out[i] - ref);
                }
                printf("%s on %s, |x| <= 1e5: largest absolute error %.2e\n", f ? "cos" : "sin", backend_name(b), worst);
                CHECK_MSG(worst <= 2.5e-7, "%s on %s: absolute error %.3g", f ? "cos" : "sin", backend_name(b), worst);
                CHECK(!f || out[4096] == 1.0f);
                CHECK(f || (out[4096] == 0.0f && out[4098] == 1e-20f));
                const float bad[2] = {NAN, INFINITY};
                float o2[2];
                mn_session_destroy(s);
                mn_graph_destroy(g);
                mn_graph_create(&g);
                mn_graph_input(g, &xi, "x", MN_F32, 1, (int64_t[]){2});
                CHECK_OK(f ? mn_cos(g, &y, xi) : mn_sin(g, &y, xi), mn_graph_error(g));
                mn_graph_output(g, y, "y");
                s = open_s(g, backend_at(b), false, false);
                if (s && !mn_session_set_input(s, "x", bad, sizeof bad) && !mn_session_run(s) &&
                    !mn_session_output(s, "y", o2, sizeof o2))
                    CHECK_MSG(isnan(o2[0]) && isnan(o2[1]), "%s(NaN), %s(inf) on %s: %g %g", f ? "cos" : "sin",
                              f ? "cos" : "sin", backend_name(b), o2[0], o2[1]);
            }
            mn_session_destroy(s);
            mn_graph_destroy(g);
        }
}

int main(void) {
#ifdef MN_HAVE_VULKAN
    g_dev = th_require_vulkan(); /* none: the CPU checks run, then SKIP */
#endif
    test_errors();
    test_dump();
    test_dropout();
    test_dropout_session_graph();
    test_cross_entropy_torch();
    test_special_values();
    test_kink_gradients();
    test_norms();
    test_bce();
    test_sin_cos();
    test_training();
    mn_device_close(g_dev);
    return th_finish("test_ops_pointwise");
}
