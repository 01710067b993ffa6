/* test_ops_norm.c - the dedicated row normalisations (rms_norm, layer_norm:
 * RMS_NORM, LAYER_NORM and their backward helpers) against the composite of
 * primitive ops they replace, at real shapes.
 *
 * Each case builds two graphs with one loss, sum(y * k) for a fixed k (so
 * dy = k): the dedicated op (mn_rms_norm / mn_layer_norm) and the old
 * composite written out here from mean, mul, add, rsqrt. It checks:
 * - the dedicated op on the f64 CPU against the composite on the f64 CPU
 *   (the formula: y, dx, dweight, dbias);
 * - the f32 CPU and Vulkan (lavapipe) against the f64 CPU, and (a few
 *   cases) Vulkan no worse than the composite on Vulkan (beyond float
 *   tolerance);
 * - the shapes users hit: SmolLM2 (D 576, rows 128 and 4096), Llama-3.2-1B
 *   (D 2048), odd row counts, one row, D = 1, D not a multiple of the
 *   workgroup, rank 3, every weight / bias combination, 300001 rows,
 *   where a weight-gradient block holds 1024 rows (lavapipe's loop limit
 *   would cut a kernel that walked every row in one invocation), and rows of
 *   40000 (the weight-gradient partials split into column chunks);
 * - mn_rms_norm / mn_layer_norm add one node, and training builds the
 *   dedicated backward ops.
 * Vulkan parts run when the build has the backend (MN_HAVE_VULKAN).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "session/session.h"

static mn_device *g_dev;

typedef struct ncase {
    const char *what;
    bool ln;
    int64_t rows, d;
    bool w, b;
    bool rank3;    /* x as [2, rows / 2, d] */
    double vk_tol; /* Vulkan against f64; 0: 1e-4 */
    bool vk_comp;  /* also run the composite on Vulkan (its kernels compile
                      per shape: a few cases keep the test short) */
} ncase;

enum { T_Y, T_DX, T_DW, T_DB, T_COUNT };
static const char *const t_name[T_COUNT] = {"y", "dx", "dweight", "dbias"};

typedef struct nvals {
    float *t[T_COUNT];
    size_t n[T_COUNT];
} nvals;

static const float EPS = 1e-5f;

/* The composite of the old mn_rms_norm / mn_layer_norm (keepdim means over
 * the last axis, eps added, rsqrt, then the affine part). */
static mn_status composite(mn_graph *g, mn_tensor *y, const ncase *c, mn_tensor x, mn_tensor w, mn_tensor b) {
    mn_tensor mu, d = x, sq, var, e, v, r;
    mn_status st = MN_OK;
    if (c->ln) {
        st = mn_mean(g, &mu, x, -1, true);
        st = st ? st : mn_sub(g, &d, x, mu);
    }
    st = st ? st : mn_mul(g, &sq, d, d);
    st = st ? st : mn_mean(g, &var, sq, -1, true);
    st = st ? st : mn_graph_scalar(g, &e, EPS);
    st = st ? st : mn_add(g, &v, var, e);
    st = st ? st : mn_rsqrt(g, &r, v);
    st = st ? st : mn_mul(g, y, d, r);
    if (c->w) st = st ? st : mn_mul(g, y, *y, w);
    if (c->b) st = st ? st : mn_add(g, y, *y, b);
    return st;
}

/* x, weight, bias as parameters; y an output; loss = sum(y * k). */
static mn_graph *build(const ncase *c, bool comp, const float *k, mn_tensor *x, mn_tensor *w, mn_tensor *b) {
    mn_graph *g;
    mn_tensor y = MN_NONE, kt, yk, loss;
    mn_init zero = {MN_INIT_ZEROS, 0, 0};
    const int64_t s2[2] = {c->rows, c->d}, s3[3] = {2, c->rows / 2, c->d};
    const int rank = c->rank3 ? 3 : 2;
    const int64_t *shape = c->rank3 ? s3 : s2;
    mn_graph_create(&g);
    *w = *b = MN_NONE;
    mn_status st = mn_graph_param(g, x, "x", rank, shape, zero);
    if (c->w) st = st ? st : mn_graph_param(g, w, "w", 1, &c->d, zero);
    if (c->b) st = st ? st : mn_graph_param(g, b, "b", 1, &c->d, zero);
    if (!st) {
        const int32_t n0 = g->n;
        if (comp) st = composite(g, &y, c, *x, *w, *b);
        else if (c->ln) st = mn_layer_norm(g, &y, *x, *w, *b, EPS);
        else st = mn_rms_norm(g, &y, *x, *w, EPS);
        if (!st && !comp)
            CHECK_MSG(g->n == n0 + 1 && g->nodes[g->n - 1].op == (c->ln ? OP_LAYER_NORM : OP_RMS_NORM),
                      "%s: one node expected, got %d", c->what, (int)(g->n - n0));
    }
    st = st ? st : mn_graph_constant(g, &kt, rank, shape, k);
    st = st ? st : mn_mul(g, &yk, y, kt);
    st = st ? st : mn_sum(g, &loss, yk, MN_ALL_AXES, false);
    st = st ? st : mn_graph_output(g, y, "y");
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    if (st) {
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

static void vals_alloc(nvals *v, const ncase *c) {
    const size_t n = (size_t)(c->rows * c->d);
    v->n[T_Y] = v->n[T_DX] = n;
    v->n[T_DW] = c->w ? (size_t)c->d : 0;
    v->n[T_DB] = c->b ? (size_t)c->d : 0;
    for (int i = 0; i < T_COUNT; i++) v->t[i] = v->n[i] ? calloc(v->n[i], sizeof(float)) : NULL;
}

static void vals_free(nvals *v) {
    for (int i = 0; i < T_COUNT; i++) free(v->t[i]);
}

static void read_grad(mn_session *s, mn_tensor p, float *dst, size_t n) {
    int32_t gid = session_grad_of(s, p);
    CHECK(gid != MN_NONE);
    if (gid != MN_NONE) CHECK_OK(session_read_f32(s, gid, dst, n), mn_session_error(s));
}

/* One forward + backward of g on a backend; false if no session. */
static bool run(const ncase *c, bool comp, mn_backend_kind be, bool f64, const float *const in[3], const float *k,
                nvals *out) {
    mn_tensor x, w, b;
    mn_graph *g = build(c, comp, k, &x, &w, &b);
    if (!g) return false;
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    o.backend = be;
    o.device = be == MN_BACKEND_VULKAN ? g_dev : NULL;
    session_internal_options io = {.f64 = f64, .grads_only = true};
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, g, &o, &io);
    CHECK_OK(st, mn_session_error(s));
    if (!st) {
        CHECK_OK(mn_session_set_param(s, "x", in[0], out->n[T_Y]), mn_session_error(s));
        if (c->w) CHECK_OK(mn_session_set_param(s, "w", in[1], (size_t)c->d), mn_session_error(s));
        if (c->b) CHECK_OK(mn_session_set_param(s, "b", in[2], (size_t)c->d), mn_session_error(s));
        CHECK_OK(session_forward_backward(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "y", out->t[T_Y], out->n[T_Y] * 4), mn_session_error(s));
        read_grad(s, x, out->t[T_DX], out->n[T_DX]);
        if (c->w) read_grad(s, w, out->t[T_DW], out->n[T_DW]);
        if (c->b) read_grad(s, b, out->t[T_DB], out->n[T_DB]);
        if (!comp && be == MN_BACKEND_CPU && !f64) { /* the dedicated backward ops are in the session graph */
            bool bwd = false, bwd_w = !c->w;
            for (int32_t i = 0; i < s->g->n; i++) {
                op_id op = s->g->nodes[i].op;
                bwd = bwd || op == (c->ln ? OP_LAYER_NORM_BWD : OP_RMS_NORM_BWD);
                bwd_w = bwd_w || op == (c->ln ? OP_LAYER_NORM_BWD_W : OP_RMS_NORM_BWD_W);
            }
            CHECK_MSG(bwd && bwd_w, "%s: dedicated backward ops missing (dx %d, dweight %d)", c->what, bwd, bwd_w);
        }
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return st == MN_OK;
}

/* max |a - ref| / max |ref| over one tensor (NaN/inf: infinity). */
static double t_err(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double e = fabs((double)a[i] - ref[i]);
        num = e > num ? e : num;
        den = fabs(ref[i]) > den ? fabs(ref[i]) : den;
    }
    return den > 0 ? num / den : num;
}

/* Every tensor of a within tol of ref; the worst error in *worst. */
static void compare(const ncase *c, const char *what, const nvals *a, const nvals *ref, double tol, double *worst) {
    for (int t = 0; t < T_COUNT; t++) {
        if (!a->n[t]) continue;
        const double e = t_err(a->t[t], ref->t[t], a->n[t]);
        if (worst) worst[t] = e;
        CHECK_MSG(e <= tol, "%s, %s: %s max error %.3g > %.3g", c->what, what, t_name[t], e, tol);
    }
}

static float lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) / 16777216.0);
}

static void check_case(const ncase *c) {
    const size_t n = (size_t)(c->rows * c->d);
    float *x = malloc(n * sizeof *x), *k = malloc(n * sizeof *k), *w = malloc((size_t)c->d * sizeof *w),
          *b = malloc((size_t)c->d * sizeof *b);
    uint32_t seed = (uint32_t)(c->rows * 31 + c->d);
    for (size_t i = 0; i < n; i++) x[i] = 4 * lcg(&seed) - 2 + (c->ln ? 3.0f : 0.0f), k[i] = 2 * lcg(&seed) - 1;
    for (int64_t j = 0; j < c->d; j++) w[j] = 0.5f + lcg(&seed), b[j] = 2 * lcg(&seed) - 1;
    const float *in[3] = {x, w, b};
    nvals ref, comp, f32, vk, vk_comp;
    vals_alloc(&ref, c), vals_alloc(&comp, c), vals_alloc(&f32, c), vals_alloc(&vk, c), vals_alloc(&vk_comp, c);
    if (run(c, false, MN_BACKEND_CPU, true, in, k, &ref)) {
        if (run(c, true, MN_BACKEND_CPU, true, in, k, &comp)) compare(c, "f64 composite", &comp, &ref, 1e-6, NULL);
        if (run(c, false, MN_BACKEND_CPU, false, in, k, &f32)) compare(c, "cpu f32", &f32, &ref, 1e-5, NULL);
        if (g_dev && run(c, false, MN_BACKEND_VULKAN, false, in, k, &vk)) {
            double e_new[T_COUNT] = {0}, e_old[T_COUNT] = {0};
            compare(c, "vulkan", &vk, &ref, c->vk_tol > 0 ? c->vk_tol : 1e-4, e_new);
            if (c->vk_comp && run(c, true, MN_BACKEND_VULKAN, false, in, k, &vk_comp)) {
                compare(c, "vulkan composite", &vk_comp, &ref, c->vk_tol > 0 ? c->vk_tol : 1e-3, e_old);
                for (int t = 0; t < T_COUNT; t++)
                    CHECK_MSG(e_new[t] <= 4 * e_old[t] + 1e-5, "%s: vulkan %s error %.3g, the composite's %.3g",
                              c->what, t_name[t], e_new[t], e_old[t]);
            }
        }
    }
    vals_free(&ref), vals_free(&comp), vals_free(&f32), vals_free(&vk), vals_free(&vk_comp);
    free(x), free(k), free(w), free(b);
}

static const ncase cases[] = {
    {"rms_norm SmolLM2 128 x 576", false, 128, 576, true, false, false, 0, true},
    {"rms_norm SmolLM2 4096 x 576", false, 4096, 576, true, false, false, 0, false},
    {"rms_norm Llama-1B 130 x 2048", false, 130, 2048, true, false, false, 0, true},
    {"rms_norm 1 row x 576", false, 1, 576, true, false, false, 0, false},
    {"rms_norm 1023 x 100", false, 1023, 100, true, false, false, 0, false},
    {"rms_norm 7 x 33, several rows per workgroup", false, 7, 33, true, false, false, 0, false},
    /* D = 1: dx = rstd * g * (1 - xhat^2) with 1 - xhat^2 = eps / (x^2 + eps)
     * ~ 1e-6 formed from an f32 xhat: ~1e-3 relative in any f32 formula
     * (the composite's error is of the same size) */
    {"rms_norm d = 1", false, 5, 1, true, false, false, 1e-2, false},
    {"rms_norm rank 3 [2,9,64]", false, 18, 64, true, false, true, 0, false},
    {"rms_norm without weight 17 x 40", false, 17, 40, false, false, false, 0, false},
    {"rms_norm 300001 x 3 (1024-row blocks)", false, 300001, 3, true, false, false, 0, false},
    {"layer_norm SmolLM2 128 x 576", true, 128, 576, true, true, false, 0, true},
    {"layer_norm 4096 x 576", true, 4096, 576, true, true, false, 0, false},
    {"layer_norm 1 row x 2048", true, 1, 2048, true, true, false, 0, false},
    {"layer_norm 7 x 33, weight only", true, 7, 33, true, false, false, 0, true},
    {"layer_norm 5 x 3, bias only", true, 5, 3, false, true, false, 0, false},
    {"layer_norm 9 x 100, no affine", true, 9, 100, false, false, false, 0, false},
    {"layer_norm 300001 x 3 (1024-row blocks)", true, 300001, 3, true, true, false, 0, false},
    {"layer_norm 9 x 40000 (column chunks)", true, 9, 40000, true, true, false, 0, false},
    {"rms_norm 3 x 40000 (column chunks)", false, 3, 40000, true, false, false, 0, false},
};

/* The constructors keep their checks; eps reaches the node. */
static void test_nodes(void) {
    mn_graph *g;
    mn_tensor x, w, y;
    mn_graph_create(&g);
    mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){3, 5});
    mn_graph_input(g, &w, "w", MN_F32, 1, (int64_t[]){5});
    CHECK_OK(mn_layer_norm(g, &y, x, MN_NONE, w, 1e-3f), mn_graph_error(g));
    const node *n = &g->nodes[g->n - 1];
    CHECK(n->op == OP_LAYER_NORM && n->nin == 2 && n->ip[0] == 0 && n->ip[1] == 1 && n->fp[0] == (double)1e-3f);
    CHECK(mn_rms_norm(g, &y, x, x, 1e-5f) == MN_E_SHAPE);
    mn_graph_destroy(g);
}

int main(void) {
#ifdef MN_HAVE_VULKAN
    g_dev = th_require_vulkan(); /* none: the CPU checks run, then SKIP */
#endif
    test_nodes();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        check_case(&cases[i]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("%-44s %.1f s\n", cases[i].what, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    }
    mn_device_close(g_dev);
    return th_finish("test_ops_norm");
}
