/* models_util.h - helpers shared by the tests of the mn_model builders
 * (test_unet, test_vla, test_whisper, test_workloads; header only): input
 * lists, gradient sessions, the same parameters on every backend, CPU vs
 * Vulkan comparison of outputs and every parameter gradient, and central
 * differences in f64 through the whole model.
 *
 * Does not: check anything on its own account beyond the comparisons asked
 * for (the tests call these and decide the tolerances).
 */
#ifndef MN_TESTS_MODELS_UTIL_H
#define MN_TESTS_MODELS_UTIL_H

#include "llama_util.h"
#include "session/session.h"

typedef struct mu_input {
    const char *name;
    const void *data;
    size_t bytes;
} mu_input;

static inline uint64_t mu_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}
/* uniform in [lo, hi) */
static inline float mu_uniform(uint64_t *s, float lo, float hi) {
    return lo + (hi - lo) * (float)((double)mu_next(s) / 9007199254740992.0);
}
static inline void mu_fill(float *v, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = 0; i < n; i++) v[i] = mu_uniform(&seed, lo, hi);
}

static inline size_t mu_numel(const mn_hf_param *p) {
    size_t n = 1;
    for (int d = 0; d < p->rank; d++) n *= (size_t)p->shape[d];
    return n;
}

/* A training session that computes gradients only (f64 on the CPU when asked). */
static inline mn_session *mu_grad_session(const mn_graph *g, mn_backend_kind be, mn_device *dev, bool f64) {
    mn_session_options so = mn_session_default_options();
    so.backend = be;
    so.device = be == MN_BACKEND_VULKAN ? dev : NULL;
    so.mode = MN_MODE_TRAINING;
    so.seed = 11;
    session_internal_options io = {.f64 = f64, .grads_only = true};
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, g, &so, &io);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static inline bool mu_set_inputs(mn_session *s, const mu_input *in, int n) {
    for (int i = 0; i < n; i++) {
        mn_status st = mn_session_set_input(s, in[i].name, in[i].data, in[i].bytes);
        CHECK_OK(st, mn_session_error(s));
        if (st) return false;
    }
    return true;
}

/* Copies every parameter of m from session a into session b. */
static inline void mu_copy_params(mn_session *b, mn_session *a, const mn_model *m) {
    const mn_hf_param *p = mn_model_params(m);
    for (int i = 0; i < mn_model_param_count(m); i++) {
        const size_t n = mu_numel(&p[i]);
        float *v = malloc(n * sizeof *v);
        CHECK_OK(mn_session_get_param(a, p[i].name, v, n), mn_session_error(a));
        CHECK_OK(mn_session_set_param(b, p[i].name, v, n), mn_session_error(b));
        free(v);
    }
}

/* Forward + backward on CPU and Vulkan with the same parameters and
 * inputs: each output named in outs (count elements) and the loss within
 * fwd (rel L2), every parameter gradient within bwd. Prints the worst. */
static inline void mu_compare_backends(const char *what, const mn_graph *g, const mn_model *m, mn_device *dev,
                                       const mu_input *in, int nin, const char *const *outs, const size_t *counts,
                                       int nout, double fwd, double bwd) {
    mn_session *s[2] = {mu_grad_session(g, MN_BACKEND_CPU, NULL, false),
                        dev ? mu_grad_session(g, MN_BACKEND_VULKAN, dev, false) : NULL};
    if (!s[0] || !s[1]) goto done;
    mu_copy_params(s[1], s[0], m);
    for (int k = 0; k < 2; k++) {
        if (!mu_set_inputs(s[k], in, nin)) goto done;
        CHECK_OK(session_forward_backward(s[k]), mn_session_error(s[k]));
    }
    double worst_out = 0;
    for (int o = 0; o < nout; o++) {
        float *a = malloc(counts[o] * sizeof *a), *b = malloc(counts[o] * sizeof *b);
        CHECK_OK(mn_session_output(s[0], outs[o], a, counts[o] * sizeof *a), mn_session_error(s[0]));
        CHECK_OK(mn_session_output(s[1], outs[o], b, counts[o] * sizeof *b), mn_session_error(s[1]));
        const double e = lu_rel_l2(b, a, counts[o]);
        CHECK_MSG(e <= fwd, "%s: output %s: Vulkan vs CPU rel L2 %.3g > %.3g", what, outs[o], e, fwd);
        if (e > worst_out) worst_out = e;
        free(a), free(b);
    }
    float l0 = NAN, l1 = NAN;
    CHECK_OK(mn_session_loss(s[0], &l0), mn_session_error(s[0]));
    CHECK_OK(mn_session_loss(s[1], &l1), mn_session_error(s[1]));
    const double el = fabs((double)l1 - l0) / fabs((double)l0);
    CHECK_MSG(el <= fwd, "%s: loss %.9g (Vulkan) vs %.9g (CPU)", what, l1, l0);
    const mn_hf_param *p = mn_model_params(m);
    double worst = 0;
    const char *worst_name = "";
    int ngrads = 0;
    for (int i = 0; i < mn_model_param_count(m); i++) {
        const int32_t g0 = session_grad_of(s[0], p[i].tensor), g1 = session_grad_of(s[1], p[i].tensor);
        if (g0 == MN_NONE && g1 == MN_NONE) continue; /* frozen (running statistics) */
        CHECK_MSG(g0 != MN_NONE && g1 != MN_NONE, "%s: %s has a gradient on one backend only", what, p[i].name);
        if (g0 == MN_NONE || g1 == MN_NONE) continue;
        const size_t n = mu_numel(&p[i]);
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        CHECK_OK(session_read_f32(s[0], g0, a, n), mn_session_error(s[0]));
        CHECK_OK(session_read_f32(s[1], g1, b, n), mn_session_error(s[1]));
        const double e = lu_rel_l2(b, a, n);
        CHECK_MSG(e <= bwd, "%s: gradient of %s: Vulkan vs CPU rel L2 %.3g > %.3g", what, p[i].name, e, bwd);
        if (e > worst) worst = e, worst_name = p[i].name;
        ngrads++;
        free(a), free(b);
    }
    printf("%s: Vulkan vs CPU: outputs rel L2 <= %.2e, loss %.2e, %d gradients <= %.2e (%s)\n", what, worst_out, el,
           ngrads, worst, worst_name);
done:
    mn_session_destroy(s[0]);
    mn_session_destroy(s[1]);
}

/* Central differences in f64 on the CPU for `count` elements of each named
 * parameter (spread over it), h = 1e-6: |numeric - analytic| <= tol *
 * max(|numeric|, scale), scale = the largest |gradient| seen. */
static inline void mu_gradcheck(const char *what, const mn_graph *g, const mn_model *m, const mu_input *in, int nin,
                                const char *const *names, int nnames, int count, double tol) {
    mn_session *s = mu_grad_session(g, MN_BACKEND_CPU, NULL, true);
    const mn_tensor loss = mn_model_tensor(m, "loss");
    CHECK_MSG(loss != MN_NONE, "%s: the model names no loss", what);
    if (!s || loss == MN_NONE || !mu_set_inputs(s, in, nin)) {
        mn_session_destroy(s);
        return;
    }
    CHECK_OK(session_forward_backward(s), mn_session_error(s));
    const mn_hf_param *p = mn_model_params(m);
    double worst = 0;
    int checked = 0;
    for (int k = 0; k < nnames; k++) {
        int i = 0;
        while (i < mn_model_param_count(m) && strcmp(p[i].name, names[k])) i++;
        CHECK_MSG(i < mn_model_param_count(m), "%s: no parameter %s", what, names[k]);
        if (i == mn_model_param_count(m)) continue;
        const size_t n = mu_numel(&p[i]);
        double *v = malloc(n * sizeof *v), *gr = malloc(n * sizeof *gr);
        const int32_t gid = session_grad_of(s, p[i].tensor);
        CHECK_OK(session_read_node(s, p[i].tensor, v, n * sizeof *v), mn_session_error(s));
        CHECK_OK(session_read_node(s, gid, gr, n * sizeof *gr), mn_session_error(s));
        double scale = 0;
        for (size_t j = 0; j < n; j++) scale = fmax(scale, fabs(gr[j]));
        for (int c = 0; c < count; c++) {
            const size_t j = (size_t)((double)c * (double)(n - 1) / (count > 1 ? count - 1 : 1));
            const double h = 1e-6, v0 = v[j];
            double lp, lm;
            v[j] = v0 + h;
            session_write_node(s, p[i].tensor, v, n * sizeof *v);
            session_forward_backward(s);
            session_read_node(s, loss, &lp, sizeof lp);
            v[j] = v0 - h;
            session_write_node(s, p[i].tensor, v, n * sizeof *v);
            session_forward_backward(s);
            session_read_node(s, loss, &lm, sizeof lm);
            v[j] = v0;
            session_write_node(s, p[i].tensor, v, n * sizeof *v);
            const double num = (lp - lm) / (2 * h), e = fabs(num - gr[j]) / fmax(fabs(num), scale + 1e-30);
            CHECK_MSG(e <= tol, "%s: d loss / d %s[%zu]: analytic %.10g, central difference %.10g (rel %.3g)", what,
                      names[k], j, gr[j], num, e);
            if (e > worst) worst = e;
            checked++;
        }
        free(v), free(gr);
    }
    printf("%s: %d gradient elements against central differences (f64): worst rel %.2e\n", what, checked, worst);
    mn_session_destroy(s);
}

#endif
