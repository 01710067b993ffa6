/* test_init.c - initial values of a session (src/session/init.c): the
 * counter-based generator, the documented distributions, bit-identical
 * values across thread counts (MEGANEURA_THREADS) and across backends (CPU
 * and Vulkan), and the backends' fill entry (zeros and constants written on
 * the device, ordered with writes). Vulkan parts say SKIP where this build
 * or machine has no Vulkan device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "session/session.h"

/* Odd sizes so threads' ranges start in the middle of Box-Muller pairs. */
static mn_graph *model(void) {
    mn_graph *g;
    mn_tensor x, w1, w2, b1, sc, h, loss, st;
    if (mn_graph_create(&g)) return NULL;
    mn_status e = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){3, 601});
    if (!e) e = mn_graph_param(g, &w1, "w1", 2, (int64_t[]){601, 333}, (mn_init){MN_INIT_NORMAL, 0.5, 2.0});
    if (!e) e = mn_graph_param(g, &w2, "w2", 2, (int64_t[]){333, 777}, (mn_init){MN_INIT_KAIMING_UNIFORM, 0, 0});
    if (!e) e = mn_graph_param(g, &b1, "b1", 1, (int64_t[]){333}, (mn_init){MN_INIT_ZEROS, 0, 0});
    if (!e) e = mn_graph_param(g, &sc, "scale", 1, (int64_t[]){777}, (mn_init){MN_INIT_CONSTANT, 1.25, 0});
    if (!e) e = mn_graph_state(g, &st, "kv", 2, (int64_t[]){5, 7});
    if (!e) e = mn_matmul(g, &h, x, w1);
    if (!e) e = mn_add(g, &h, h, b1);
    if (!e) e = mn_matmul(g, &h, h, w2);
    if (!e) e = mn_mul(g, &h, h, sc);
    if (!e) e = mn_mean(g, &loss, h, MN_ALL_AXES, false);
    if (!e) e = mn_graph_loss(g, loss);
    if (e) {
        fprintf(stderr, "model: %s\n", mn_graph_error(g));
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

typedef struct values {
    float *w1, *w2, *b1, *sc;
} values;
enum { N_W1 = 601 * 333, N_W2 = 333 * 777 };

static mn_session *make(const mn_graph *g, mn_backend_kind be, uint64_t seed, const char *threads) {
    if (threads) setenv("MEGANEURA_THREADS", threads, 1);
    else unsetenv("MEGANEURA_THREADS");
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.mode = MN_MODE_TRAINING;
    o.seed = seed;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    unsetenv("MEGANEURA_THREADS");
    if (st) {
        printf("%s session: %s\n", be == MN_BACKEND_CPU ? "cpu" : "vulkan", mn_session_error(s));
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static bool get(mn_session *s, values *v) {
    v->w1 = malloc(N_W1 * 4);
    v->w2 = malloc(N_W2 * 4);
    v->b1 = malloc(333 * 4);
    v->sc = malloc(777 * 4);
    return v->w1 && v->w2 && v->b1 && v->sc && !mn_session_get_param(s, "w1", v->w1, N_W1) &&
           !mn_session_get_param(s, "w2", v->w2, N_W2) && !mn_session_get_param(s, "b1", v->b1, 333) &&
           !mn_session_get_param(s, "scale", v->sc, 777);
}

static void drop(values *v) { free(v->w1), free(v->w2), free(v->b1), free(v->sc); }

static bool same(const values *a, const values *b) {
    return !memcmp(a->w1, b->w1, N_W1 * 4) && !memcmp(a->w2, b->w2, N_W2 * 4) && !memcmp(a->b1, b->b1, 333 * 4) &&
           !memcmp(a->sc, b->sc, 777 * 4);
}

static void test_generator(void) {
    /* the SplitMix64 sequence from 0 (its published first outputs) */
    CHECK(mn_ctr_bits(0, 0) == 0xe220a8397b1dcdafull);
    CHECK(mn_ctr_bits(0, 1) == 0x6e789e6aa1b965f4ull);
    CHECK(mn_ctr_bits(0, 2) == 0x06c45d188009454full);
    float lo = 1, hi = 0, z[2];
    for (uint64_t i = 0; i < 100000; i++) {
        float u = mn_ctr_uniform(12345, i);
        lo = u < lo ? u : lo, hi = u > hi ? u : hi;
    }
    CHECK(lo >= 0.0f && lo < 1e-3f && hi < 1.0f && hi > 0.999f);
    mn_ctr_normal2(mn_ctr_key(1, 2), 7, z);
    CHECK(isfinite(z[0]) && isfinite(z[1]));
    CHECK(mn_ctr_key(1, 2) != mn_ctr_key(2, 1) && mn_ctr_key(0, 0) != mn_ctr_key(0, 1));
}

static void moments(const float *v, size_t n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    *mean = s / (double)n;
    for (size_t i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
    *sd = sqrt(s2 / (double)n);
}

static void test_distributions(const values *v) {
    double m, sd;
    moments(v->w1, N_W1, &m, &sd); /* N(0.5, 2): standard error of the mean 2/sqrt(200133) = 0.0045 */
    CHECK_NEAR(m, 0.5, 0.025);
    CHECK_NEAR(sd, 2.0, 0.02);
    const double l = sqrt(6.0 / 333.0); /* kaiming uniform, fan_in 333 */
    float lo = 0, hi = 0;
    for (int i = 0; i < N_W2; i++) lo = v->w2[i] < lo ? v->w2[i] : lo, hi = v->w2[i] > hi ? v->w2[i] : hi;
    CHECK(lo >= -(float)l && hi <= (float)l && lo < -0.999 * l && hi > 0.999 * l);
    moments(v->w2, N_W2, &m, &sd);
    CHECK_NEAR(m, 0.0, 0.01 * l);
    CHECK_NEAR(sd, l / sqrt(3.0), 0.01 * l);
    bool zeros = true, ones = true;
    for (int i = 0; i < 333; i++) zeros = zeros && v->b1[i] == 0.0f;
    for (int i = 0; i < 777; i++) ones = ones && v->sc[i] == 1.25f;
    CHECK(zeros && ones);
}

/* Zeros of the optimizer state and of a state tensor; fill ordered with
 * writes queued before and after it. */
static void test_state_and_fill(mn_session *s, const char *what) {
    int32_t kv = graph_find(s->g, "kv"), m = graph_find(s->g, "optim.adamw.m.w2");
    if (m == MN_NONE) m = graph_find(s->g, "optim.adam.m.w2");
    CHECK_MSG(kv != MN_NONE && m != MN_NONE, "%s: no state 'kv' or Adam moment of w2", what);
    if (kv == MN_NONE || m == MN_NONE) return;
    float *buf = malloc(N_W2 * 4);
    bool ok = buf && !session_read_f32(s, m, buf, N_W2);
    for (int i = 0; ok && i < N_W2; i++) ok = buf[i] == 0.0f;
    CHECK_MSG(ok, "%s: the Adam moment of w2 is not zero after creation", what);
    float kvv[35], ref[35];
    for (int i = 0; i < 35; i++) kvv[i] = (float)i + 0.5f;
    /* write, then fill with 1.0f's bits: the fill wins */
    CHECK_OK(session_write_f32(s, kv, kvv, 35), s->err);
    CHECK_OK(s->be->fill(s->bk, kv, 0x3f800000u, s->err, sizeof s->err), s->err);
    CHECK_OK(session_read_f32(s, kv, ref, 35), s->err);
    ok = true;
    for (int i = 0; i < 35; i++) ok = ok && ref[i] == 1.0f;
    CHECK_MSG(ok, "%s: fill after write did not land last", what);
    /* fill zeros, then write: the write wins */
    CHECK_OK(s->be->fill(s->bk, kv, 0, s->err, sizeof s->err), s->err);
    CHECK_OK(session_write_f32(s, kv, kvv, 35), s->err);
    CHECK_OK(session_read_f32(s, kv, ref, 35), s->err);
    CHECK_MSG(!memcmp(ref, kvv, sizeof kvv), "%s: write after fill did not land last", what);
    CHECK_OK(s->be->fill(s->bk, kv, 0, s->err, sizeof s->err), s->err);
    CHECK_OK(session_read_f32(s, kv, ref, 35), s->err);
    ok = true;
    for (int i = 0; i < 35; i++) ok = ok && ref[i] == 0.0f;
    CHECK_MSG(ok, "%s: zero fill", what);
    free(buf);
}

int main(void) {
    test_generator();
    mn_graph *g = model();
    CHECK(g != NULL);
    if (!g) return th_finish("test_init");
    values t1 = {0}, t4 = {0}, t3 = {0}, other = {0};
    mn_session *s1 = make(g, MN_BACKEND_CPU, 42, "1"), *s4 = make(g, MN_BACKEND_CPU, 42, "4"),
               *s3 = make(g, MN_BACKEND_CPU, 42, "3"), *so = make(g, MN_BACKEND_CPU, 43, NULL);
    CHECK(s1 && s4 && s3 && so);
    if (s1 && s4 && s3 && so) {
        CHECK(get(s1, &t1) && get(s4, &t4) && get(s3, &t3) && get(so, &other));
        CHECK_MSG(same(&t1, &t4) && same(&t1, &t3), "parameters differ between MEGANEURA_THREADS=1, 3 and 4");
        CHECK_MSG(memcmp(t1.w1, other.w1, 4096) != 0, "seeds 42 and 43 give the same w1");
        CHECK_MSG(memcmp(t1.w1, t1.w2, 4096) != 0, "w1 and w2 start alike");
        test_distributions(&t1);
        test_state_and_fill(s1, "cpu");
    }
#ifdef MN_HAVE_VULKAN
    mn_session *sv = make(g, MN_BACKEND_VULKAN, 42, "2");
    if (!sv) {
        printf("SKIP: cpu vs vulkan initial values (no vulkan session)\n");
    } else {
        values tv = {0};
        CHECK(get(sv, &tv));
        CHECK_MSG(same(&t1, &tv), "vulkan and cpu initial parameters differ for the same seed");
        test_state_and_fill(sv, "vulkan");
        /* a step after fills: the same loss on both backends (fills reach the kernels) */
        float x[3 * 601], lc = 0, lv = 0;
        for (int i = 0; i < 3 * 601; i++) x[i] = (float)(i % 13) / 13.0f - 0.5f;
        CHECK_OK(mn_session_set_input(s1, "x", x, sizeof x), mn_session_error(s1));
        CHECK_OK(mn_session_set_input(sv, "x", x, sizeof x), mn_session_error(sv));
        CHECK_OK(mn_session_step(s1), mn_session_error(s1));
        CHECK_OK(mn_session_step(sv), mn_session_error(sv));
        CHECK_OK(mn_session_loss(s1, &lc), mn_session_error(s1));
        CHECK_OK(mn_session_loss(sv, &lv), mn_session_error(sv));
        CHECK_NEAR(lv, lc, 1e-3 * (fabs(lc) + 1));
        drop(&tv);
        mn_session_destroy(sv);
    }
#else
    printf("SKIP: cpu vs vulkan initial values (built without vulkan)\n");
#endif
    drop(&t1), drop(&t4), drop(&t3), drop(&other);
    mn_session_destroy(s1), mn_session_destroy(s4), mn_session_destroy(s3), mn_session_destroy(so);
    mn_graph_destroy(g);
    return th_finish("test_init");
}
