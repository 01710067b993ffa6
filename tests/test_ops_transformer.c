/* test_ops_transformer.c - the transformer family (embedding, rope,
 * attention, KV cache) beyond the shared op table (op_cases.h, which
 * test_gradcheck and test_vulkan_ops run):
 *
 * - embedding: exact rows, zero rows for out-of-range ids, duplicate ids
 *   summed in the table gradient (CPU f32 and Vulkan, bit for bit);
 * - rope: the Hugging Face "rotate half" formula by hand, the inverse flag,
 *   offset / position-input equivalence, large positions on Vulkan;
 * - attention: every mode (full, cross, causal with Tq < Tk and Tq > Tk,
 *   sliding window, grouped-query, cache position) against a naive
 *   materialised-softmax reference, in f64, f32 and on Vulkan;
 * - large logits (q.k ~ 1e3): softmax shift invariance, forward and
 *   gradients, no overflow; both, on Vulkan, with the tile kernels forced
 *   onto their small shapes as well (MEGANEURA_ATTN=tiles);
 * - kv_append: rows written in place at the host-written position, rows
 *   outside the cache dropped, the append runs even when nothing reads it,
 *   caches stay out of checkpoints;
 * - bad arguments: errors that name the op and the shapes, graph unchanged;
 * - Vulkan: larger shapes than the op table's (several row blocks, one
 *   query row split over a workgroup, wide heads, a 2-D grid of table rows)
 *   forward and backward against the CPU, and every generator under tiny
 *   device limits compiles.
 *
 * Tolerances are stated where they are used. Does not: train a model
 * (test_transformer.c does).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "session/session.h"

#include "op_cases.h"

#ifdef MN_HAVE_VULKAN
#include <shaderc/shaderc.h>

#include "backend/vulkan/vk_codegen.h"
#endif

/* ---- sessions on three backends ------------------------------------------- */

typedef enum bk { BK_F64 = 0, BK_F32, BK_VK, BK_COUNT } bk;
static const char *const bk_name[BK_COUNT] = {"cpu f64", "cpu f32", "vulkan"};
static mn_device *g_dev; /* NULL: no Vulkan here */
static int g_log_msgs;

static void on_log(mn_log_level level, const char *msg, void *user) {
    if (level <= MN_LOG_WARN) {
        g_log_msgs++;
        fprintf(stderr, "log: %s\n", msg);
    }
}

/* A session of g; training sessions keep parameter gradients readable. */
static mn_session *open_bk(const mn_graph *g, bk b, bool train) {
    if (b == BK_VK && !g_dev) return NULL;
    mn_session_options o = mn_session_default_options();
    o.mode = train ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
    o.backend = b == BK_VK ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
    o.device = b == BK_VK ? g_dev : NULL;
    o.seed = 7;
    session_internal_options io = {.f64 = b == BK_F64, .grads_only = train};
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, g, &o, &io);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

/* Node id of s as doubles (f64 sessions exactly). */
static void read_d(mn_session *s, int32_t id, double *dst, size_t n) {
    if (s->iopt.f64) {
        CHECK_OK(session_read_node(s, id, dst, n * sizeof *dst), mn_session_error(s));
        return;
    }
    float *t = malloc(n * sizeof *t + 4);
    CHECK_OK(session_read_f32(s, id, t, n), mn_session_error(s));
    for (size_t i = 0; i < n; i++) dst[i] = t[i];
    free(t);
}

static void write_f(mn_session *s, int32_t id, const float *v, size_t n) {
    CHECK_OK(session_write_f32(s, id, v, n), mn_session_error(s));
}
static void write_i(mn_session *s, int32_t id, const int32_t *v, size_t n) {
    CHECK_OK(session_write_node(s, id, v, n * 4), mn_session_error(s));
}

static double nmse_d(const double *v, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = v[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0 ? num / den : num;
}

static double max_abs_diff(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN sticks */
    }
    return m;
}

/* Deterministic values in [lo, hi). */
static uint64_t g_rng = 12345;
static float rnd(float lo, float hi) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((g_rng >> 40) & 0xffffff) / 16777216.0f;
}
static float *rnd_vec(size_t n, float lo, float hi) {
    float *v = malloc(n * sizeof *v + 4);
    for (size_t i = 0; i < n; i++) v[i] = rnd(lo, hi);
    return v;
}

static int64_t numel_of(const mn_graph *g, mn_tensor t) {
    int rank;
    int64_t s[MN_MAX_RANK], e = 1;
    mn_tensor_shape(g, t, &rank, s);
    for (int i = 0; i < rank; i++) e *= s[i];
    return e;
}

/* ---- embedding -------------------------------------------------------------- */

/* y = table[ids] (zero rows out of range), loss = sum(R * y); dtable[v] is the
 * sum of R's rows at the positions holding v. Exact on every backend. */
static void test_embedding(void) {
    enum { V = 5, D = 3, N = 8 };
    const int32_t ids[N] = {4, 0, 4, -2, 5, 1, 4, 2147483647};
    float table[V * D], r[N * D];
    for (int i = 0; i < V * D; i++) table[i] = (float)(i + 1) * 0.5f;
    for (int i = 0; i < N * D; i++) r[i] = (float)((i * 7) % 5) - 2.0f;
    mn_graph *g;
    mn_tensor t, idn, y, rc, prod, loss;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    mn_graph_create(&g);
    mn_status st = mn_graph_param(g, &t, "table", 2, S(V, D), z);
    st = st ? st : mn_graph_input(g, &idn, "ids", MN_I32, 2, S(2, 4));
    st = st ? st : mn_embedding(g, &y, t, idn);
    st = st ? st : mn_graph_constant(g, &rc, 3, S(2, 4, D), r);
    st = st ? st : mn_mul(g, &prod, y, rc);
    st = st ? st : mn_sum(g, &loss, prod, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(g, loss);
    st = st ? st : mn_graph_output(g, y, "y");
    CHECK_OK(st, mn_graph_error(g));
    double want_y[N * D], want_g[V * D] = {0};
    for (int p = 0; p < N; p++)
        for (int d = 0; d < D; d++) {
            bool in = ids[p] >= 0 && ids[p] < V;
            want_y[p * D + d] = in ? table[ids[p] * D + d] : 0.0;
            if (in) want_g[ids[p] * D + d] += r[p * D + d];
        }
    for (bk b = BK_F64; b < BK_COUNT; b++) {
        mn_session *s = open_bk(g, b, true);
        if (!s) continue;
        CHECK_OK(mn_session_set_param(s, "table", table, V * D), mn_session_error(s));
        write_i(s, idn, ids, N);
        CHECK_OK(session_forward_backward(s), mn_session_error(s));
        double gy[N * D], gg[V * D];
        read_d(s, y, gy, N * D);
        read_d(s, session_grad_of(s, t), gg, V * D);
        CHECK_MSG(max_abs_diff(gy, want_y, N * D) == 0, "embedding %s: rows differ", bk_name[b]);
        CHECK_MSG(max_abs_diff(gg, want_g, V * D) == 0, "embedding %s: table gradient differs", bk_name[b]);
        mn_session_destroy(s);
    }
    printf("  embedding: rows, out-of-range ids, duplicate-id gradient exact on every backend\n");
    mn_graph_destroy(g);
}

/* ---- rope ------------------------------------------------------------------- */

/* The rotate-half formula of Hugging Face's apply_rotary_pos_emb, by hand. */
static void rope_ref(double *y, const float *x, int64_t rows, int64_t T, int64_t Dh, int64_t p0, double theta) {
    int64_t half = Dh / 2;
    for (int64_t r = 0; r < rows; r++) {
        double p = (double)(p0 + r % T);
        for (int64_t i = 0; i < Dh; i++) {
            int64_t f = i % half;
            double a = p * pow(theta, -2.0 * (double)f / (double)Dh);
            /* rotate_half(x) = cat(-x2, x1) */
            double rot = i < half ? -x[r * Dh + i + half] : x[r * Dh + i - half];
            y[r * Dh + i] = x[r * Dh + i] * cos(a) + rot * sin(a);
        }
    }
}

/* y = rope(x; pos input, offset, theta) on backend b; NULL pos: no input. */
static void run_rope(double *y, bk b, const float *x, int rank, const int64_t *shape, const int32_t *pos,
                     int64_t offset, float theta, bool inverse) {
    mn_graph *g;
    mn_tensor xi, pi = MN_NONE, out;
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &xi, "x", MN_F32, rank, shape);
    if (!st && pos) st = mn_graph_input(g, &pi, "pos", MN_I32, 1, S(1));
    st = st ? st : mn_rope(g, &out, xi, pi, theta, offset);
    if (!st && inverse) { /* the rotation back: the backward op itself */
        node p = g->nodes[graph_id(out)];
        p.in[0] = out;
        p.ip[1] = 1;
        st = graph_add(g, &out, &p);
    }
    st = st ? st : mn_graph_output(g, out, "y");
    CHECK_OK(st, mn_graph_error(g));
    mn_session *s = open_bk(g, b, false);
    size_t n = (size_t)numel_of(g, xi);
    if (s) {
        write_f(s, xi, x, n);
        if (pos) write_i(s, pi, pos, 1);
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        read_d(s, out, y, n);
    } else {
        for (size_t i = 0; i < n; i++) y[i] = NAN;
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void test_rope(void) {
    /* a hand example: Dh 4, position 1, theta 10000: inv_freq = {1, 0.01} */
    const float x4[4] = {1, 2, 3, 4};
    double y4[4];
    run_rope(y4, BK_F64, x4, 2, S(1, 4), NULL, 1, 0, false);
    const double c1 = cos(1.0), s1 = sin(1.0), c2 = cos(0.01), s2 = sin(0.01);
    const double want4[4] = {1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2};
    CHECK_MSG(max_abs_diff(y4, want4, 4) < 1e-15, "rope: hand example differs by %g", max_abs_diff(y4, want4, 4));

    enum { B = 2, H = 3, T = 5, DH = 8, N = B * H * T * DH };
    float *x = rnd_vec(N, -1, 1);
    double ref[N], y[N], back[N], xd[N];
    for (int i = 0; i < N; i++) xd[i] = x[i];
    rope_ref(ref, x, B * H * T, T, DH, 11, 10000.0);
    for (bk b = BK_F64; b < BK_COUNT; b++) {
        if (b == BK_VK && !g_dev) continue;
        run_rope(y, b, x, 4, S(B, H, T, DH), NULL, 11, 0, false);
        double tol = b == BK_F64 ? 1e-14 : 6e-7; /* f32: a few roundings of values <= 1.5 */
        double e = max_abs_diff(y, ref, N);
        CHECK_MSG(e < tol, "rope %s: max |diff| %g against the HF formula", bk_name[b], e);
        /* offset 11 == offset 4 plus a position input of 7 */
        const int32_t seven = 7;
        run_rope(back, b, x, 4, S(B, H, T, DH), &seven, 4, 0, false);
        CHECK_MSG(max_abs_diff(back, y, N) == 0, "rope %s: offset and position input disagree", bk_name[b]);
        /* the inverse rotation restores x */
        run_rope(back, b, x, 4, S(B, H, T, DH), NULL, 11, 0, true);
        e = max_abs_diff(back, xd, N);
        CHECK_MSG(e < 1e-13 || (b != BK_F64 && e < 6e-7), "rope %s: inverse off by %g", bk_name[b], e);
        /* rows at positions 5..7 of an 8-row sequence == 3 rows at offset 5 */
        float xl[8 * DH], xs[3 * DH];
        double yl[8 * DH], ys[3 * DH];
        for (int i = 0; i < 8 * DH; i++) xl[i] = x[i];
        memcpy(xs, xl + 5 * DH, sizeof xs);
        run_rope(yl, b, xl, 2, S(8, DH), NULL, 0, 500, false);
        run_rope(ys, b, xs, 2, S(3, DH), NULL, 5, 500, false);
        CHECK_MSG(max_abs_diff(ys, yl + 5 * DH, 3 * DH) == 0, "rope %s: offset is not a position shift", bk_name[b]);
    }
    /* large positions (1e5 .. 3e6) keep Vulkan within f32 rounding */
    if (g_dev) {
        const int32_t pos = 3000000;
        for (int k = 0; k < 2; k++) {
            double yc[N], yv[N];
            run_rope(yc, BK_F64, x, 4, S(B, H, T, DH), k ? &pos : NULL, 100000, 0, false);
            run_rope(yv, BK_VK, x, 4, S(B, H, T, DH), k ? &pos : NULL, 100000, 0, false);
            double e = max_abs_diff(yv, yc, N);
            printf("  rope: vulkan at positions %s: max |diff| %.2e vs f64 (tol 1e-6)\n", k ? "~3.1e6" : "~1e5", e);
            CHECK_MSG(e < 1e-6, "rope vulkan large positions: max |diff| %g", e);
        }
    }
    printf("  rope: HF rotate-half formula, inverse, offset == position input == sequence shift\n");
    free(x);
}

/* ---- attention against a naive reference ---------------------------------- */

typedef struct acfg {
    const char *name;
    int64_t B, Hq, Hkv, Tq, Tk, D;
    bool causal;
    int64_t window;
    float scale;
    int pos; /* <= -1000: no position input */
} acfg;

/* The materialised softmax(scale q k^T + mask) v, written from the spec. */
static void attention_ref(double *out, const float *q, const float *k, const float *v, const acfg *c) {
    const bool has_pos = c->pos > -1000;
    int64_t off = has_pos ? c->pos : c->Tk - c->Tq, len = has_pos ? c->pos + c->Tq : c->Tk;
    if (len < 0) len = 0;
    if (len > c->Tk) len = c->Tk;
    const double scale = c->scale != 0 ? c->scale : (double)(float)(1.0 / sqrt((double)c->D));
    double *sc = malloc((size_t)c->Tk * sizeof *sc);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                const int64_t hk = h / (c->Hq / c->Hkv);
                const float *qr = q + ((b * c->Hq + h) * c->Tq + i) * c->D;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < c->Tk; j++) {
                    bool ok = j < len && (!c->causal || (j <= i + off && (c->window == 0 || j > i + off - c->window)));
                    sc[j] = -INFINITY;
                    if (!ok) continue;
                    double d = 0;
                    for (int64_t e = 0; e < c->D; e++) d += (double)qr[e] * k[((b * c->Hkv + hk) * c->Tk + j) * c->D + e];
                    sc[j] = scale * d;
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int64_t j = 0; j < c->Tk; j++) sum += sc[j] == -INFINITY ? 0 : exp(sc[j] - mx);
                double *o = out + ((b * c->Hq + h) * c->Tq + i) * c->D;
                for (int64_t e = 0; e < c->D; e++) {
                    double a = 0;
                    for (int64_t j = 0; j < c->Tk; j++)
                        if (sc[j] != -INFINITY) a += exp(sc[j] - mx) / sum * v[((b * c->Hkv + hk) * c->Tk + j) * c->D + e];
                    o[e] = a;
                }
            }
    free(sc);
}

/* out = attention(q, k, v) of cfg c on backend b (inference). */
static void run_attention(double *out, bk b, const acfg *c, const float *q, const float *k, const float *v) {
    mn_graph *g;
    mn_tensor qi, ki, vi, pi = MN_NONE, y;
    mn_attention_params p = {c->causal, c->window, c->scale};
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &qi, "q", MN_F32, 4, S(c->B, c->Hq, c->Tq, c->D));
    st = st ? st : mn_graph_input(g, &ki, "k", MN_F32, 4, S(c->B, c->Hkv, c->Tk, c->D));
    st = st ? st : mn_graph_input(g, &vi, "v", MN_F32, 4, S(c->B, c->Hkv, c->Tk, c->D));
    if (!st && c->pos > -1000) st = mn_graph_input(g, &pi, "pos", MN_I32, 1, S(1));
    st = st ? st : mn_attention(g, &y, qi, ki, vi, pi, &p);
    st = st ? st : mn_graph_output(g, y, "y");
    CHECK_OK(st, mn_graph_error(g));
    mn_session *s = open_bk(g, b, false);
    size_t nq = (size_t)(c->B * c->Hq * c->Tq * c->D), nk = (size_t)(c->B * c->Hkv * c->Tk * c->D);
    if (s) {
        write_f(s, qi, q, nq);
        write_f(s, ki, k, nk);
        write_f(s, vi, v, nk);
        if (pi != MN_NONE) write_i(s, pi, (const int32_t[]){c->pos}, 1);
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        read_d(s, y, out, nq);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void test_attention_reference(void) {
    static const acfg cfgs[] = {
        {"full", 2, 2, 2, 4, 4, 3, false, 0, 0, -1000},
        {"cross Tq<Tk", 1, 2, 1, 3, 7, 5, false, 0, 0.3f, -1000},
        {"causal Tq<Tk gqa", 2, 4, 2, 3, 6, 4, true, 0, 0, -1000},
        {"causal Tq>Tk", 1, 2, 2, 6, 3, 2, true, 0, 0, -1000},
        {"window 3", 1, 3, 1, 9, 9, 4, true, 3, 0, -1000},
        {"window 1", 1, 1, 1, 5, 5, 3, true, 1, 0, -1000},
        {"cache pos 4", 1, 2, 1, 2, 10, 3, true, 0, 0, 4},
        {"cache pos 0 window", 1, 2, 2, 3, 8, 2, true, 2, 0, 0},
        {"cache full pos 5", 2, 1, 1, 1, 7, 6, false, 0, 0, 5},
        {"cache overflow", 1, 1, 1, 3, 4, 2, true, 0, 0, 3},
        {"cache pos -2", 1, 1, 1, 3, 4, 2, true, 0, 0, -2},
        {"cache pos huge", 1, 1, 1, 2, 4, 2, true, 0, 0, 2000000000},
    };
    printf("  %-22s %12s %12s %12s\n", "attention vs naive", "f64 |diff|", "f32 NMSE", "vulkan NMSE");
    for (size_t ci = 0; ci < MN_ARRAY_LEN(cfgs); ci++) {
        const acfg *c = &cfgs[ci];
        size_t nq = (size_t)(c->B * c->Hq * c->Tq * c->D), nk = (size_t)(c->B * c->Hkv * c->Tk * c->D);
        float *q = rnd_vec(nq, -1.5f, 1.5f), *k = rnd_vec(nk, -1.5f, 1.5f), *v = rnd_vec(nk, -1, 1);
        double *ref = malloc(nq * 8), *y = malloc(nq * 8), e[BK_COUNT] = {0};
        acfg cc = *c;
        if (cc.pos > (1 << 29)) cc.pos = 1 << 29; /* the documented clamp */
        attention_ref(ref, q, k, v, &cc);
        for (bk b = BK_F64; b < BK_COUNT; b++) {
            if (b == BK_VK && !g_dev) continue;
            run_attention(y, b, c, q, k, v);
            e[b] = b == BK_F64 ? max_abs_diff(y, ref, nq) : nmse_d(y, ref, nq);
        }
        printf("  %-22s %12.2e %12.2e %12.2e\n", c->name, e[0], e[1], e[2]);
        /* f64: the same sums in another order; f32: one rounding per output */
        CHECK_MSG(e[BK_F64] < 1e-13, "attention %s: f64 differs from the naive reference by %g", c->name, e[BK_F64]);
        CHECK_MSG(e[BK_F32] < 1e-13, "attention %s: f32 NMSE %g", c->name, e[BK_F32]);
        CHECK_MSG(e[BK_VK] < 1e-12, "attention %s: vulkan NMSE %g", c->name, e[BK_VK]);
        free(q), free(k), free(v), free(ref), free(y);
    }
}

/* ---- large logits: softmax shift invariance ------------------------------- */

/* attention(q, k + c, v) == attention(q, k, v) for a vector c shared by every
 * key: the scores of a row move together. With c = 256 per component and
 * q ~ 1, the scores are ~1e3 (a naive exp overflows at 89). Gradients are
 * invariant too: dq gains c * sum_j dS_ij = 0, dk and dv do not change.
 * Values are multiples of 2^-10 so k + c is exact in f32. */
static void test_large_logits(void) {
    enum { B = 1, HQ = 2, HKV = 1, TQ = 4, TK = 6, D = 4, NQ = B * HQ * TQ * D, NK = B * HKV * TK * D };
    float q[NQ], k[NK], ks[NK], v[NK], r[NQ];
    for (int i = 0; i < NQ; i++) q[i] = roundf(rnd(0.9f, 1.1f) * 1024) / 1024;
    for (int i = 0; i < NK; i++) {
        k[i] = roundf(rnd(-0.6f, 0.6f) * 1024) / 1024;
        ks[i] = k[i] + 256.0f;
        v[i] = rnd(-1, 1);
    }
    for (int i = 0; i < NQ; i++) r[i] = rnd(-1, 1);
    mn_graph *g;
    mn_tensor pq = MN_NONE, pk = MN_NONE, pv = MN_NONE, y = MN_NONE, rc, prod, loss;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    mn_attention_params ap = {true, 0, 1.0f};
    mn_graph_create(&g);
    mn_status st = mn_graph_param(g, &pq, "q", 4, S(B, HQ, TQ, D), z);
    st = st ? st : mn_graph_param(g, &pk, "k", 4, S(B, HKV, TK, D), z);
    st = st ? st : mn_graph_param(g, &pv, "v", 4, S(B, HKV, TK, D), z);
    st = st ? st : mn_attention(g, &y, pq, pk, pv, MN_NONE, &ap);
    st = st ? st : mn_graph_constant(g, &rc, 4, S(B, HQ, TQ, D), r);
    st = st ? st : mn_mul(g, &prod, y, rc);
    st = st ? st : mn_sum(g, &loss, prod, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(g, loss);
    st = st ? st : mn_graph_output(g, y, "y");
    CHECK_OK(st, mn_graph_error(g));
    /* [0] output, [1] dq, [2] dk, [3] dv; reference: f64, unshifted */
    double res[2][BK_COUNT][4][NQ > NK ? NQ : NK];
    const int32_t ids[4] = {y, pq, pk, pv};
    const size_t cnt[4] = {NQ, NQ, NK, NK};
    for (int shifted = 0; shifted < 2; shifted++)
        for (bk b = BK_F64; b < BK_COUNT; b++) {
            mn_session *s = open_bk(g, b, true);
            if (!s) continue;
            CHECK_OK(mn_session_set_param(s, "q", q, NQ), mn_session_error(s));
            CHECK_OK(mn_session_set_param(s, "k", shifted ? ks : k, NK), mn_session_error(s));
            CHECK_OK(mn_session_set_param(s, "v", v, NK), mn_session_error(s));
            CHECK_OK(session_forward_backward(s), mn_session_error(s));
            for (int t = 0; t < 4; t++) read_d(s, t ? session_grad_of(s, ids[t]) : ids[t], res[shifted][b][t], cnt[t]);
            mn_session_destroy(s);
        }
    static const char *what[4] = {"out", "dq", "dk", "dv"};
    /* f64: the identity holds to rounding. f32 CPU: the row log-sum-exp
     * (~1e3) is stored in f32, off by up to 3e-5, which scales a row's
     * softmax weights: gradients NMSE ~5e-9. Vulkan: the scores themselves
     * are f32 sums, each off by ~3e-5 absolute: out, dk, dv ~1e-8, and dq =
     * scale * sum_j dS_ij k_j adds terms ~250x larger than their sum (k =
     * 256 + small), which amplifies the weights' errors (measured 2e-8 on
     * lavapipe; the bound allows the conditioning). These are limits of f32
     * with logits of 1e3, not overflow: the unshifted problem agrees to
     * 1e-13. */
    const double tol[BK_COUNT][4] = {{1e-20, 1e-16, 1e-16, 1e-20}, {1e-12, 3e-8, 3e-8, 3e-8},
                                     {1e-7, 1e-6, 1e-7, 1e-7}};
    for (bk b = BK_F64; b < BK_COUNT; b++) {
        if (b == BK_VK && !g_dev) continue;
        for (int t = 0; t < 4; t++) {
            double e = nmse_d(res[1][b][t], res[0][BK_F64][t], cnt[t]);
            double e0 = nmse_d(res[0][b][t], res[0][BK_F64][t], cnt[t]);
            bool finite = true;
            for (size_t i = 0; i < cnt[t]; i++) finite = finite && isfinite(res[1][b][t][i]);
            printf("  large logits %-8s %-3s NMSE vs f64 unshifted: shifted %9.2e (tol %7.0e), unshifted %9.2e\n",
                   bk_name[b], what[t], e, tol[b][t], e0);
            CHECK_MSG(finite && e <= tol[b][t], "large logits %s %s: NMSE %g (finite %d)", bk_name[b], what[t], e,
                      finite);
            CHECK_MSG(e0 <= 1e-12, "attention %s %s: NMSE %g on the unshifted problem", bk_name[b], what[t], e0);
        }
    }
    mn_graph_destroy(g);
}

/* ---- only the gradients that are needed ----------------------------------- */

/* q a parameter, k frozen, v an input: the backward builds dq only (no
 * dk/dv kernels), and dq equals the one of an all-parameter graph. */
static void test_partial_grads(void) {
    enum { NQ = 2 * 3 * 4, NK = 2 * 5 * 4 };
    float q[NQ], k[NK], v[NK];
    for (int i = 0; i < NQ; i++) q[i] = rnd(-1, 1);
    for (int i = 0; i < NK; i++) k[i] = rnd(-1, 1), v[i] = rnd(-1, 1);
    double dq[2][NQ];
    mn_attention_params ap = {true, 0, 0};
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    for (int partial = 0; partial < 2; partial++) {
        mn_graph *g;
        mn_tensor pq, pk, pv, y, loss;
        mn_graph_create(&g);
        mn_status st = mn_graph_param(g, &pq, "q", 4, S(1, 2, 3, 4), z);
        st = st ? st : mn_graph_param(g, &pk, "k", 4, S(1, 2, 5, 4), z);
        if (partial) st = st ? st : mn_graph_input(g, &pv, "v", MN_F32, 4, S(1, 2, 5, 4));
        else st = st ? st : mn_graph_param(g, &pv, "v", 4, S(1, 2, 5, 4), z);
        if (partial) st = st ? st : mn_graph_param_freeze(g, pk, true);
        st = st ? st : mn_attention(g, &y, pq, pk, pv, MN_NONE, &ap);
        st = st ? st : mn_mul(g, &y, y, y);
        st = st ? st : mn_sum(g, &loss, y, MN_ALL_AXES, false);
        st = st ? st : mn_graph_loss(g, loss);
        CHECK_OK(st, mn_graph_error(g));
        mn_session *s = open_bk(g, BK_F64, true);
        if (s) {
            CHECK_OK(mn_session_set_param(s, "q", q, NQ), mn_session_error(s));
            CHECK_OK(mn_session_set_param(s, "k", k, NK), mn_session_error(s));
            if (partial) write_f(s, pv, v, NK);
            else CHECK_OK(mn_session_set_param(s, "v", v, NK), mn_session_error(s));
            CHECK_OK(session_forward_backward(s), mn_session_error(s));
            read_d(s, session_grad_of(s, pq), dq[partial], NQ);
            int nkv = 0, nq = 0;
            for (int32_t i = 0; i < s->g->n; i++) {
                nkv += s->g->nodes[i].op == OP_ATTENTION_BWD_KV;
                nq += s->g->nodes[i].op == OP_ATTENTION_BWD_Q;
            }
            /* all three: dk and dv from one node */
            CHECK_MSG(nq == 1 && nkv == (partial ? 0 : 1), "partial %d: %d dq and %d dk/dv nodes", partial, nq, nkv);
            CHECK(partial == 0 || session_grad_of(s, pk) == MN_NONE);
            mn_session_destroy(s);
        }
        mn_graph_destroy(g);
    }
    CHECK_MSG(max_abs_diff(dq[0], dq[1], NQ) == 0, "dq depends on which other inputs need gradients");
    printf("  attention backward: only the needed gradient kernels are built\n");
}

/* ---- KV cache --------------------------------------------------------------- */

/* cache [1,2,6,3] (state), x [1,2,2,3] appended at pos; the cache itself is
 * the output (nothing depends on the append: it runs because it is a root). */
static void test_kv_append(void) {
    enum { H = 2, TMAX = 6, TNEW = 2, D = 3 };
    mn_graph *g;
    mn_tensor cache, x, pos, app, x2;
    mn_graph_create(&g);
    mn_status st = mn_graph_state(g, &cache, "kv.cache", 4, S(1, H, TMAX, D));
    st = st ? st : mn_graph_input(g, &x, "x", MN_F32, 4, S(1, H, TNEW, D));
    st = st ? st : mn_graph_input(g, &pos, "pos", MN_I32, 1, S(1));
    st = st ? st : mn_kv_append(g, &app, cache, x, pos);
    st = st ? st : mn_graph_output(g, cache, "kv.cache");
    st = st ? st : mn_scale(g, &x2, x, 2.0f);
    st = st ? st : mn_graph_output(g, x2, "x2");
    CHECK_OK(st, mn_graph_error(g));
    const int32_t steps[] = {0, 2, 5, -1, 4000};
    for (bk b = BK_F32; b < BK_COUNT; b++) {
        mn_session *s = open_bk(g, b, false);
        if (!s) continue;
        float want[H * TMAX * D] = {0}, got[H * TMAX * D];
        for (size_t k = 0; k < MN_ARRAY_LEN(steps); k++) {
            float xv[H * TNEW * D];
            for (int i = 0; i < H * TNEW * D; i++) xv[i] = (float)(100 * (k + 1) + i);
            CHECK_OK(mn_session_set_input(s, "x", xv, sizeof xv), mn_session_error(s));
            CHECK_OK(mn_session_set_input(s, "pos", &steps[k], 4), mn_session_error(s));
            CHECK_OK(mn_session_run(s), mn_session_error(s));
            for (int h = 0; h < H; h++)
                for (int t = 0; t < TNEW; t++) {
                    int row = steps[k] + t;
                    if (row < 0 || row >= TMAX) continue;
                    memcpy(want + (h * TMAX + row) * D, xv + (h * TNEW + t) * D, D * sizeof(float));
                }
            CHECK_OK(mn_session_output(s, "kv.cache", got, sizeof got), mn_session_error(s));
            CHECK_MSG(memcmp(got, want, sizeof got) == 0, "kv_append %s: cache wrong after pos %d", bk_name[b],
                      steps[k]);
        }
        /* the cache is scratch: not in a checkpoint, not touched by a load */
        char dir[] = "/tmp/mn_kv_XXXXXX", path[96];
        if (mkdtemp(dir)) {
            snprintf(path, sizeof path, "%s/c.safetensors", dir);
            CHECK_OK(mn_session_save(s, path), mn_session_error(s));
            FILE *f = fopen(path, "rb");
            char buf[4096] = {0};
            size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f) fclose(f);
            bool found = false;
            for (size_t i = 0; i + 8 <= n; i++) found = found || memcmp(buf + i, "kv.cache", 8) == 0;
            CHECK_MSG(n > 0 && !found, "kv cache saved in a checkpoint");
            CHECK_OK(mn_session_load(s, path), mn_session_error(s));
            CHECK_OK(mn_session_output(s, "kv.cache", got, sizeof got), mn_session_error(s));
            CHECK_MSG(memcmp(got, want, sizeof got) == 0, "kv_append %s: a load changed the cache", bk_name[b]);
            unlink(path);
            rmdir(dir);
        }
        mn_session_destroy(s);
    }
    printf("  kv_append: in place at the position, out-of-range rows dropped, runs without readers, not saved\n");
    mn_graph_destroy(g);
}

/* ---- errors ----------------------------------------------------------------- */

static bool has(const char *hay, const char *needle) { return strstr(hay ? hay : "", needle) != NULL; }

#define CHECK_GRAPH_FAILS(g, call, want, needle)                                                   \
    do {                                                                                           \
        int32_t n0_ = (g)->n;                                                                      \
        mn_status st_ = (call);                                                                    \
        CHECK_MSG(st_ == (want), "%s -> %s, want %s (%s)", #call, mn_status_str(st_), mn_status_str(want), \
                  mn_graph_error(g));                                                              \
        CHECK_MSG(has(mn_graph_error(g), needle), "%s: message \"%s\" lacks \"%s\"", #call, mn_graph_error(g), \
                  needle);                                                                         \
        CHECK_MSG((g)->n == n0_, "%s: the graph changed on error", #call);                         \
    } while (0)

static void test_errors(void) {
    mn_graph *g;
    mn_tensor t = MN_NONE, ids = MN_NONE, idf = MN_NONE, x = MN_NONE, x5 = MN_NONE, q = MN_NONE, k = MN_NONE;
    mn_tensor kodd = MN_NONE, pos = MN_NONE, posf = MN_NONE, st = MN_NONE, y;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    mn_graph_create(&g);
    mn_status s = mn_graph_param(g, &t, "table", 2, S(10, 4), z);
    s = s ? s : mn_graph_input(g, &ids, "ids", MN_I32, 2, S(2, 3));
    s = s ? s : mn_graph_input(g, &idf, "idf", MN_F32, 2, S(2, 3));
    s = s ? s : mn_graph_input(g, &x, "x", MN_F32, 4, S(1, 2, 3, 4));
    s = s ? s : mn_graph_input(g, &x5, "x5", MN_F32, 4, S(1, 2, 3, 5));
    s = s ? s : mn_graph_input(g, &q, "q", MN_F32, 4, S(1, 3, 3, 4));
    s = s ? s : mn_graph_input(g, &k, "k", MN_F32, 4, S(1, 2, 5, 4));
    s = s ? s : mn_graph_input(g, &kodd, "kodd", MN_F32, 4, S(1, 2, 5, 3));
    s = s ? s : mn_graph_input(g, &pos, "pos", MN_I32, 1, S(1));
    s = s ? s : mn_graph_input(g, &posf, "posf", MN_F32, 1, S(1));
    s = s ? s : mn_graph_state(g, &st, "cache", 4, S(1, 2, 8, 4));
    CHECK_OK(s, mn_graph_error(g));
    CHECK_GRAPH_FAILS(g, mn_embedding(g, &y, t, idf), MN_E_DTYPE, "ids must be i32");
    CHECK_GRAPH_FAILS(g, mn_embedding(g, &y, x, ids), MN_E_SHAPE, "table must be [V,D]");
    CHECK_GRAPH_FAILS(g, mn_rope(g, &y, x5, MN_NONE, 0, 0), MN_E_SHAPE, "Dh even");
    CHECK_GRAPH_FAILS(g, mn_rope(g, &y, x, posf, 0, 0), MN_E_DTYPE, "i32 tensor of one element");
    CHECK_GRAPH_FAILS(g, mn_rope(g, &y, x, MN_NONE, -5, 0), MN_E_INVALID, "theta");
    CHECK_GRAPH_FAILS(g, mn_rope(g, &y, x, MN_NONE, 0, (int64_t)1 << 40), MN_E_INVALID, "beyond 2^29");
    mn_attention_params causal = {true, 0, 0}, win_full = {false, 4, 0}, neg_win = {true, -1, 0};
    CHECK_GRAPH_FAILS(g, mn_attention(g, &y, q, k, k, MN_NONE, &causal), MN_E_SHAPE, "multiple of Hkv");
    CHECK_GRAPH_FAILS(g, mn_attention(g, &y, x, kodd, kodd, MN_NONE, NULL), MN_E_SHAPE, "[1,2,5,3]");
    CHECK_GRAPH_FAILS(g, mn_attention(g, &y, x, k, kodd, MN_NONE, NULL), MN_E_SHAPE, "attention");
    CHECK_GRAPH_FAILS(g, mn_attention(g, &y, x, k, k, MN_NONE, &win_full), MN_E_INVALID, "needs causal");
    CHECK_GRAPH_FAILS(g, mn_attention(g, &y, x, k, k, MN_NONE, &neg_win), MN_E_INVALID, "window -1");
    CHECK_GRAPH_FAILS(g, mn_attention(g, &y, x, k, k, ids, NULL), MN_E_DTYPE, "position");
    CHECK_GRAPH_FAILS(g, mn_kv_append(g, &y, x, x, pos), MN_E_INVALID, "must be a state tensor");
    CHECK_GRAPH_FAILS(g, mn_kv_append(g, &y, st, x5, pos), MN_E_SHAPE, "does not fit cache");
    CHECK_GRAPH_FAILS(g, mn_kv_append(g, &y, st, x, posf), MN_E_DTYPE, "position");
    CHECK_GRAPH_FAILS(g, mn_graph_state(g, &y, "cache", 1, S(3)), MN_E_INVALID, "already used");
    /* chained appends and attention over the result build */
    mn_tensor a1, a2;
    CHECK_OK(mn_kv_append(g, &a1, st, x, pos), mn_graph_error(g));
    CHECK_OK(mn_kv_append(g, &a2, a1, x, pos), mn_graph_error(g));
    CHECK_OK(mn_attention(g, &y, x, a2, a2, pos, &causal), mn_graph_error(g));
    /* a gradient that would flow through an append is an error naming it */
    mn_tensor p, px, a3, l;
    s = mn_graph_param(g, &p, "p", 4, S(1, 2, 3, 4), z);
    s = s ? s : mn_mul(g, &px, p, x);
    s = s ? s : mn_kv_append(g, &a3, a2, px, pos);
    s = s ? s : mn_sum(g, &l, a3, MN_ALL_AXES, false);
    s = s ? s : mn_graph_loss(g, l);
    CHECK_OK(s, mn_graph_error(g));
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    mn_session *ses = NULL;
    CHECK(mn_session_create(&ses, g, &o) == MN_E_UNSUPPORTED);
    CHECK_MSG(has(mn_session_error(ses), "kv_append"), "message: %s", mn_session_error(ses));
    mn_session_destroy(ses);
    mn_graph_destroy(g);
    printf("  errors: bad dtypes, shapes, parameters and a gradient through kv_append named\n");
}

/* ---- Vulkan: larger shapes, tiny device limits ------------------------------ */

#ifdef MN_HAVE_VULKAN
/* several row blocks (Tq 100 > 64 rows per workgroup), gqa, D 64 */
static mn_tensor v_causal_long(gc *c) { return attn_case(c, S(2, 4, 100, 64), S(2, 2, 100, 64), true, 0, 0, -1000, -1, 1, -1, 1); }
static mn_tensor v_cross(gc *c) { return attn_case(c, S(1, 2, 37, 7), S(1, 2, 129, 7), false, 0, 0, -1000, -1, 1, -1, 1); }
static mn_tensor v_window(gc *c) { return attn_case(c, S(1, 2, 90, 16), S(1, 1, 90, 16), true, 17, 0, -1000, -1, 1, -1, 1); }
/* one query row over a 200-row cache: the row split over a workgroup */
static mn_tensor v_decode(gc *c) { return attn_case(c, S(2, 4, 1, 32), S(2, 2, 200, 32), true, 0, 0, 150, -1, 1, -1, 1); }
/* a wide head: small key tiles */
static mn_tensor v_wide(gc *c) { return attn_case(c, S(1, 2, 9, 160), S(1, 2, 11, 160), true, 0, 0, -1000, -1, 1, -1, 1); }
/* 70000 table rows: the table gradient's workgroups on a 2-D grid */
static mn_tensor v_embedding(gc *c) {
    int32_t ids[16];
    for (int i = 0; i < 16; i++) ids[i] = (i * 40009) % 70003 - 1; /* incl. -1 and >= V */
    ids[3] = ids[9] = 69999;
    mn_tensor y;
    mn_embedding(c->g, &y, GP(2, -1, 1, 70000, 2), i32_input(c, 1, S(16), ids, 16));
    return y;
}
static mn_tensor v_rope(gc *c) {
    const int32_t pos = 9000;
    mn_tensor y;
    mn_rope(c->g, &y, GP(4, -1, 1, 2, 3, 70, 64), i32_input(c, 1, S(1), &pos, 1), 0, 123);
    return y;
}

static void compare_vk(const char *name, op_id op, case_fn fn, double tol) {
    gcase k = {op, name, fn, 0};
    gc c;
    mn_tensor y;
    mn_status st = build_case(&k, &c, &y);
    CHECK_MSG(st == MN_OK, "%s: building failed: %s", name, c.g ? mn_graph_error(c.g) : "");
    if (!st) st = mn_graph_output(c.g, y, "y");
    mn_session *s[2] = {NULL, NULL};
    for (int b = 0; b < 2 && !st; b++) {
        s[b] = open_bk(c.g, b ? BK_VK : BK_F32, true);
        if (!s[b]) break;
        if (c.labels_in != MN_NONE) write_i(s[b], c.labels_in, c.labels, (size_t)c.nlabels);
        CHECK_OK(session_forward_backward(s[b]), mn_session_error(s[b]));
    }
    if (s[0] && s[1]) {
        double worst = 0;
        int32_t ids[MAXP + 1];
        int nid = 0;
        ids[nid++] = y;
        for (int i = 0; i < c.np; i++) ids[nid++] = c.p[i];
        for (int i = 0; i < nid; i++) {
            int32_t id = i ? session_grad_of(s[0], ids[i]) : ids[i];
            size_t n = (size_t)node_numel(&s[0]->g->nodes[graph_id(id)]);
            double *a = malloc(n * 8), *b = malloc(n * 8);
            read_d(s[0], id, a, n);
            read_d(s[1], i ? session_grad_of(s[1], ids[i]) : id, b, n);
            double e = nmse_d(b, a, n);
            if (!(e <= worst)) worst = e;
            free(a), free(b);
        }
        printf("  vulkan %-28s out+grads NMSE %9.2e (tol %7.0e)\n", name, worst, tol);
        CHECK_MSG(worst <= tol, "%s: Vulkan differs from CPU: NMSE %g", name, worst);
    }
    mn_session_destroy(s[0]);
    mn_session_destroy(s[1]);
    mn_graph_destroy(c.g);
}

static bool family_op(op_id op) {
    switch (op) {
    case OP_EMBEDDING: case OP_EMBEDDING_BWD: case OP_ROPE: case OP_ATTENTION: case OP_ATTENTION_LSE:
    case OP_ATTENTION_BWD_PREP: case OP_ATTENTION_BWD_Q: case OP_ATTENTION_BWD_KV: case OP_KV_APPEND:
        return true;
    default:
        return false;
    }
}

typedef struct codegen_case {
    op_id op;
    case_fn fn;
} codegen_case;

/* Generates every node of the family in the cases' training graphs under
 * caps and compiles each kernel; returns the count; *tiles counts the
 * attention nodes that got the tile kernel. */
static int codegen_compile(const vk_caps *caps, const codegen_case *list, size_t nlist, const char *label,
                           int *tiles) {
    shaderc_compiler_t cc = shaderc_compiler_initialize();
    shaderc_compile_options_t opts = shaderc_compile_options_initialize();
    shaderc_compile_options_set_target_env(opts, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
    int compiled = 0;
    *tiles = 0;
    for (size_t li = 0; li < nlist; li++) {
        gcase k = {list[li].op, label, list[li].fn, 0};
        gc c;
        mn_tensor y;
        if (build_case(&k, &c, &y)) {
            CHECK_MSG(0, "%s: building case %zu failed", label, li);
            mn_graph_destroy(c.g);
            continue;
        }
        mn_session_options o = mn_session_default_options();
        o.mode = MN_MODE_TRAINING;
        session_internal_options io = {.grads_only = true};
        mn_session *s = NULL;
        CHECK_OK(session_create_ex(&s, c.g, &o, &io), mn_session_error(s)); /* the CPU: just for its plan */
        for (int32_t i = 0; s && i < s->g->n; i++) {
            const node *n = &s->g->nodes[i];
            if (!family_op(n->op) || s->plan.slots[i].arena < 0) continue;
            vk_kernel *kk = malloc(sizeof *kk);
            char err[512] = "";
            mn_status st = vk_codegen_node(kk, s->g, i, &s->plan, caps, err, sizeof err);
            CHECK_MSG(st == MN_OK, "%s %s: %s", label, op_table[n->op].name, err);
            char *src = st ? NULL : vk_codegen_source(kk);
            if (src) {
                CHECK_MSG(kk->local[0] <= caps->max_invocations && kk->groups[0] <= caps->max_groups[0],
                          "%s %s: launch %u x %u", label, op_table[n->op].name, kk->local[0], kk->groups[0]);
                *tiles += kk->tmpl && strcmp(kk->tmpl, "attention_tile") == 0;
                shaderc_compilation_result_t r =
                    shaderc_compile_into_spv(cc, src, strlen(src), shaderc_glsl_compute_shader, label, "main", opts);
                bool ok = shaderc_result_get_compilation_status(r) == shaderc_compilation_status_success;
                CHECK_MSG(ok, "%s %s: %s", label, op_table[n->op].name, shaderc_result_get_error_message(r));
                compiled += ok;
                shaderc_result_release(r);
                free(src);
            }
            free(kk);
        }
        mn_session_destroy(s);
        mn_graph_destroy(c.g);
    }
    shaderc_compile_options_release(opts);
    shaderc_compiler_release(cc);
    return compiled;
}

/* Every node of the family generated under tiny limits (16 invocations, 4 KiB
 * of shared memory, 3 workgroups in x) compiles. */
static void codegen_tiny(void) {
    const vk_caps tiny = {.subgroup_size = 8, .max_shared_bytes = 4096, .max_invocations = 16,
                          .max_groups = {3, 65535, 65535}};
    static const codegen_case list[] = {{OP_ATTENTION, c_attn_gqa}, {OP_ATTENTION, c_attn_pos_window},
                                        {OP_ATTENTION, c_attn_tq1}, {OP_ATTENTION, v_wide},
                                        {OP_EMBEDDING, c_embedding}, {OP_ROPE, c_rope_pos}};
    int tiles;
    const int compiled = codegen_compile(&tiny, list, MN_ARRAY_LEN(list), "tiny", &tiles);
    printf("  vulkan codegen under tiny limits: %d kernels compiled\n", compiled);
}

/* SmolLM2's attention at 8 x 512, Llama-3-8B's heads (GQA 4, head dim 128)
 * and a decoding row over a 2048-row cache with an H200's limits (48 KiB of
 * shared memory, 1024 invocations, no loop limiter): the tile kernels in
 * their GPU configurations (which need more shared memory than lavapipe
 * has, so run here only at head dim 32: test_vk_loop_limit) compile. */
static mn_tensor h_smol(gc *c) { return attn_case(c, S(8, 9, 512, 64), S(8, 3, 512, 64), true, 0, 0, -1000, -1, 1, -1, 1); }
static mn_tensor h_d128(gc *c) { return attn_case(c, S(1, 32, 512, 128), S(1, 8, 512, 128), true, 0, 0, -1000, -1, 1, -1, 1); }
static mn_tensor h_decode(gc *c) { return attn_case(c, S(1, 9, 1, 64), S(1, 3, 2048, 64), true, 0, 0, 2047, -1, 1, -1, 1); }
static void codegen_h200(void) {
    const vk_caps h200 = {.subgroup_size = 32, .max_shared_bytes = 49152, .max_invocations = 1024,
                          .max_groups = {2147483647u, 65535, 65535}, .nonuniform = true, .dynamic_index = true};
    static const codegen_case list[] = {{OP_ATTENTION, h_smol}, {OP_ATTENTION, h_d128}, {OP_ATTENTION, h_decode}};
    int tiles;
    const int compiled = codegen_compile(&h200, list, MN_ARRAY_LEN(list), "h200", &tiles);
    /* the 4 attention kernels of each of the first two; the decoding step
     * (one query row; dk/dv with 3 query rows per key) keeps the row kernels */
    CHECK_MSG(tiles == 8, "h200: %d attention nodes got the tile kernel, want 8", tiles);
    printf("  vulkan codegen with an H200's limits: %d kernels compiled, %d tile kernels\n", compiled, tiles);
}

/* The attention tuning knobs (vk_gen_transformer.c): a value that does not
 * parse, or a tile configuration that does not fit the device, fails the
 * session with a message naming the variable and the value; unset again,
 * the same graph builds. */
static void knob_errors(void) {
    static const struct {
        const char *var, *val, *needle;
    } v[] = {
        {"MEGANEURA_ATTN", "fast", "MEGANEURA_ATTN='fast'"},
        {"MEGANEURA_ATTN_RUN", "0", "MEGANEURA_ATTN_RUN='0'"},
        {"MEGANEURA_ATTN_PREFETCH", "yes", "MEGANEURA_ATTN_PREFETCH='yes'"},
        {"MEGANEURA_ATTN_TILE", "fwd=64x64", "MEGANEURA_ATTN_TILE item 'fwd=64x64'"},
        {"MEGANEURA_ATTN_TILE", "bwd=8x8x1x4", "MEGANEURA_ATTN_TILE item 'bwd=8x8x1x4'"},
        {"MEGANEURA_ATTN_TILE", "fwd=8x6x1x4", "fwd=8x6x1x4 for D 64: want rows a multiple"},
        {"MEGANEURA_ATTN_TILE", "dq=1024x64x1x8", "dq=1024x64x1x8 for D 64: more"},
    };
    gcase k = {OP_ATTENTION, "knobs", v_causal_long, 0};
    gc c;
    mn_tensor y;
    CHECK_OK(build_case(&k, &c, &y), mn_graph_error(c.g));
    for (size_t i = 0; i < MN_ARRAY_LEN(v); i++) {
        setenv(v[i].var, v[i].val, 1);
        mn_session_options o = mn_session_default_options();
        o.mode = MN_MODE_TRAINING;
        o.backend = MN_BACKEND_VULKAN;
        o.device = g_dev;
        mn_session *s = NULL;
        mn_status st = mn_session_create(&s, c.g, &o);
        CHECK_MSG(st == MN_E_INVALID && has(mn_session_error(s), v[i].needle) && has(mn_session_error(s), "attention"),
                  "%s=%s: %s: %s", v[i].var, v[i].val, mn_status_str(st), mn_session_error(s));
        mn_session_destroy(s);
        unsetenv(v[i].var);
    }
    mn_session *s = open_bk(c.g, BK_VK, true);
    CHECK_MSG(s != NULL, "the knobs unset: the session builds");
    mn_session_destroy(s);
    mn_graph_destroy(c.g);
    printf("  vulkan attention knobs: %zu bad values refused, naming them\n", MN_ARRAY_LEN(v));
}

static void test_vulkan(void) {
    /* NMSE of the outputs and gradients (the loss is not compared: it
     * cancels). f32 dot products and exponentials against the CPU's double
     * sums; the embedding is exact. */
    compare_vk("attn causal T100 D64 gqa", OP_ATTENTION, v_causal_long, 1e-10);
    compare_vk("attn cross 37x129 D7", OP_ATTENTION, v_cross, 1e-10);
    compare_vk("attn window 17 T90", OP_ATTENTION, v_window, 1e-10);
    compare_vk("attn decode Tq1 cache 200", OP_ATTENTION, v_decode, 1e-10);
    compare_vk("attn wide D160", OP_ATTENTION, v_wide, 1e-10);
    compare_vk("embedding V70000", OP_EMBEDDING, v_embedding, 0);
    compare_vk("rope T70 Dh64 pos 9123", OP_ROPE, v_rope, 1e-12);
    codegen_tiny();
    codegen_h200();
    knob_errors();
}
#endif

int main(void) {
    mn_set_log(on_log, NULL);
#ifdef MN_HAVE_VULKAN
    g_dev = th_require_vulkan(); /* none: the CPU checks run, then SKIP */
    if (!g_dev) g_log_msgs = 0;
#endif
    /* the shared op table holds this family's gradient checks */
    int ncases = 0;
    for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++)
        ncases += cases[i].op == OP_EMBEDDING || cases[i].op == OP_ROPE || cases[i].op == OP_ATTENTION;
    CHECK_MSG(ncases >= 12, "op_cases.h has %d transformer cases", ncases);
    test_embedding();
    test_rope();
    test_attention_reference();
    test_large_logits();
    if (g_dev) { /* every mode and the large logits again, the tile kernels on the small shapes too */
        setenv("MEGANEURA_ATTN", "tiles", 1);
        printf("  again with MEGANEURA_ATTN=tiles:\n");
        test_attention_reference();
        test_large_logits();
        unsetenv("MEGANEURA_ATTN");
    }
    test_partial_grads();
    test_kv_append();
    test_errors();
#ifdef MN_HAVE_VULKAN
    if (g_dev) test_vulkan();
#endif
    mn_device_close(g_dev);
    CHECK_MSG(g_log_msgs == 0, "%d validation/log errors or warnings", g_log_msgs);
    return th_finish("test_ops_transformer");
}
