/* bench_big.c - single tensors above 2^31 and 2^32 elements on the Vulkan
 * backend (issue 8): the 64-bit index kernels (MN_IDX64) on paged operands
 * at real scale, checked against the CPU on sampled rows and elements, and
 * timed. One JSON line per case on stdout, progress on stderr.
 *
 *   meganeura_bench_big [logits] [eltwise] [--rows R] [--hidden K]
 *                       [--vocab V] [--elems N] [--reps N] [--samples S]
 *
 * logits: a language model's head and loss, logits = x [R,K] @ w [K,V] and
 *   cross_entropy(logits, labels), forward and backward (no optimizer:
 *   the gradients of x and w are read). Defaults R 32768 (8 x 4096 tokens),
 *   K 2048, V 128256 (Llama 3): 4.2G logits (16.8 GB; 8 x 2048 tokens make
 *   2.1G, below 2^31). Checked in double on the CPU: S sampled rows (the
 *   first, the last, random ones) of the row statistics (max, sum of exp,
 *   loss term) and of dx, S sampled columns of dw (every row's softmax at
 *   that column, from x, w and the GPU's row statistics), and the loss
 *   against the mean of the GPU's row terms.
 * eltwise: y = 0.5 a + 0.25 and s = sum(y) over N = 2^32 + 2^24 elements
 *   (17.2 GB per tensor): every element of y against the CPU, s against a
 *   double sum.
 * Both by default. Needs about 40 GB of device memory and 35 GB of host
 * memory with the defaults.
 *
 * Exit status: 0 every check passed; 1 a check failed or an error; 3 the
 * device (or the host) has too little memory or no Vulkan device: the
 * session refused cleanly, nothing ran (the JSON line says why).
 *
 * Does not: run the CPU backend on these sizes (the reference is computed
 * here, only where it is sampled).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "meganeura.h"
#include "session/session.h"
#ifdef MN_HAVE_VULKAN
#include "backend/vulkan/vk_util.h"
#endif

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_REFUSED = 3 };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* JSON-safe copy of a message (quotes and control bytes replaced). */
static const char *js(const char *s) {
    static char buf[1024];
    size_t n = 0;
    for (; s && *s && n + 1 < sizeof buf; s++) buf[n++] = *s == '"' || *s == '\\' || (unsigned char)*s < 32 ? '\'' : *s;
    buf[n] = 0;
    return buf;
}

/* Host memory available (bytes), or 0 if unknown. */
static uint64_t host_available(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

static int refuse(const char *bench, const char *why) {
    printf("{\"bench\": \"%s\", \"status\": \"refused\", \"error\": \"%s\"}\n", bench, js(why));
    fprintf(stderr, "meganeura_bench_big: %s: refused: %s\n", bench, why);
    return EXIT_REFUSED;
}

static int fail(const char *bench, const char *what, const char *why) {
    printf("{\"bench\": \"%s\", \"status\": \"error\", \"error\": \"%s: %s\"}\n", bench, what, js(why));
    fprintf(stderr, "meganeura_bench_big: %s: %s: %s\n", bench, what, why ? why : "");
    return EXIT_FAIL;
}

static mn_device *g_dev; /* the Vulkan device every session shares */

/* A Vulkan session (training: grads only, forward and backward, no
 * optimizer); *code = EXIT_REFUSED when the device lacks the memory or the
 * 64-bit integers, EXIT_FAIL on any other error. */
static mn_session *open_session(const mn_graph *g, bool training, const char *bench, int *code) {
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    o.device = g_dev;
    o.mode = training ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
    o.seed = 11;
    session_internal_options io = {.grads_only = training};
    mn_session *s = NULL;
    const double t0 = now_s();
    mn_status st = session_create_ex(&s, g, &o, &io);
    if (st) {
        const char *msg = mn_session_error(s);
        const bool refused = st == MN_E_NOMEM || (st == MN_E_UNSUPPORTED && strstr(msg, "shaderInt64"));
        *code = refused ? refuse(bench, msg) : fail(bench, "session", msg);
        mn_session_destroy(s);
        return NULL;
    }
    fprintf(stderr, "meganeura_bench_big: %s: session built in %.2f s\n", bench, now_s() - t0);
    return s;
}

/* Kernels of s generated with 64-bit indices, and the pages of node id. */
static void width_report(mn_session *s, int32_t id, int *wide, uint64_t *pages) {
    *wide = 0;
    *pages = memplan_pages(&s->plan, graph_id(id));
#ifdef MN_HAVE_VULKAN
    if (!g_dev || !g_dev->impl) return;
    const vk_caps *caps = &((const vk_ctx *)g_dev->impl)->caps;
    vk_kernel *k = malloc(sizeof *k);
    for (int32_t i = 0; k && i < s->sched.n; i++) {
        char err[512];
        if (!vk_codegen_node(k, s->g, s->sched.order[i], &s->plan, caps, err, sizeof err) && k->tmpl && k->idx64)
            (*wide)++;
    }
    free(k);
#endif
}

/* ---- logits: matmul + cross-entropy, forward and backward ---------------- */

static int bench_logits(int64_t R, int64_t K, int64_t V, int reps, int samples) {
    const char *bench = "big_logits";
    const uint64_t host_need = (uint64_t)(2 * R * K + 2 * K * V + R * 4) * 4;
    if (host_available() && host_available() < host_need + ((uint64_t)1 << 30)) {
        char why[160];
        snprintf(why, sizeof why, "needs %" PRIu64 " bytes of host memory, %" PRIu64 " available", host_need,
                 host_available());
        return refuse(bench, why);
    }
    mn_graph *g = NULL;
    mn_tensor x, w, lab, logits, loss;
    mn_status st = mn_graph_create(&g);
    if (!st) st = mn_graph_param(g, &x, "x", 2, (int64_t[]){R, K}, (mn_init){MN_INIT_NORMAL, 0, 1.0f});
    if (!st) st = mn_graph_param(g, &w, "w", 2, (int64_t[]){K, V}, (mn_init){MN_INIT_NORMAL, 0, 0.02f});
    if (!st) st = mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){R});
    if (!st) st = mn_matmul(g, &logits, x, w);
    if (!st) st = mn_cross_entropy(g, &loss, logits, lab);
    if (!st) st = mn_graph_loss(g, loss);
    if (st) {
        int c = fail(bench, "graph", mn_graph_error(g));
        mn_graph_destroy(g);
        return c;
    }
    const int32_t rows_id = g->nodes[graph_id(loss)].in[2]; /* ce_rows [R,3] */
    int code = EXIT_OK;
    mn_session *s = open_session(g, true, bench, &code);
    if (!s) {
        mn_graph_destroy(g);
        return code;
    }
    float *xv = malloc((size_t)(R * K) * 4), *wv = malloc((size_t)(K * V) * 4);
    float *dx = malloc((size_t)(R * K) * 4), *dw = malloc((size_t)(K * V) * 4), *rows = malloc((size_t)R * 12);
    int32_t *labels = malloc((size_t)R * 4);
    double *lr = malloc((size_t)V * sizeof *lr), *col = malloc((size_t)R * sizeof *col);
    if (!xv || !wv || !dx || !dw || !rows || !labels || !lr || !col) {
        code = refuse(bench, "out of host memory");
        goto out;
    }
    for (int64_t r = 0; r < R; r++) labels[r] = (int32_t)(next_rand() % (uint64_t)V);
    st = mn_session_set_input(s, "labels", labels, (size_t)R * 4);
    if (!st) st = mn_session_get_param(s, "x", xv, (size_t)(R * K));
    if (!st) st = mn_session_get_param(s, "w", wv, (size_t)(K * V));
    if (st) {
        code = fail(bench, "inputs", mn_session_error(s));
        goto out;
    }
    /* one warm-up (first submission), then the timed runs */
    double *t = calloc((size_t)reps + 1, sizeof *t);
    for (int i = 0; i <= reps && !st; i++) {
        const double t0 = now_s();
        st = session_forward_backward(s);
        if (t) t[i] = now_s() - t0;
        fprintf(stderr, "meganeura_bench_big: %s: forward + backward %d: %.3f s\n", bench, i, t ? t[i] : 0.0);
    }
    float gl = NAN;
    const int32_t gx = session_grad_of(s, x), gw = session_grad_of(s, w);
    if (!st) st = session_read_f32(s, loss, &gl, 1);
    if (!st) st = session_read_f32(s, rows_id, rows, (size_t)R * 3);
    if (!st) st = gx == MN_NONE || gw == MN_NONE ? MN_E_STATE : MN_OK;
    if (!st) st = session_read_f32(s, gx, dx, (size_t)(R * K));
    if (!st) st = session_read_f32(s, gw, dw, (size_t)(K * V));
    if (st) {
        free(t);
        code = fail(bench, "run", mn_session_error(s));
        goto out;
    }
    const double tm = reps > 0 && t ? median(t + 1, reps) : t ? t[0] : 0;
    free(t);
    const double t0 = now_s();
    /* the loss is the mean of the GPU's row terms */
    double mean = 0;
    for (int64_t r = 0; r < R; r++) mean += rows[r * 3 + 2];
    mean /= (double)R;
    double err_loss = fabs(gl - mean) / fmax(fabs(mean), 1e-30), err_rows = 0, err_dx = 0, err_dw = 0;
    /* sampled rows: statistics and dx in double */
    for (int si = 0; si < samples; si++) {
        const int64_t r = si == 0 ? 0 : si == 1 ? R - 1 : (int64_t)(next_rand() % (uint64_t)R);
        for (int64_t j = 0; j < V; j++) lr[j] = 0;
        for (int64_t k = 0; k < K; k++) {
            const double xk = xv[r * K + k];
            const float *wk = wv + k * V;
            for (int64_t j = 0; j < V; j++) lr[j] += xk * wk[j];
        }
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < V; j++) m = lr[j] > m ? lr[j] : m;
        for (int64_t j = 0; j < V; j++) sum += exp(lr[j] - m);
        const double term = log(sum) + m - lr[labels[r]];
        const double e = fmax(fabs(rows[r * 3] - m), fmax(fabs(rows[r * 3 + 1] - sum) / sum, fabs(rows[r * 3 + 2] - term)));
        err_rows = fmax(err_rows, e);
        /* dx[r] = sum_j (p_j - [j = label]) / R * w[:, j] */
        double num = 0, den = 0;
        for (int64_t j = 0; j < V; j++) lr[j] = (exp(lr[j] - m) / sum - (j == labels[r])) / (double)R;
        for (int64_t k = 0; k < K; k++) {
            const float *wk = wv + k * V;
            double d = 0;
            for (int64_t j = 0; j < V; j++) d += lr[j] * wk[j];
            num += (dx[r * K + k] - d) * (dx[r * K + k] - d);
            den += d * d;
        }
        err_dx = fmax(err_dx, sqrt(num / fmax(den, 1e-300)));
        fprintf(stderr, "meganeura_bench_big: %s: row %" PRId64 ": stats err %.2e, dx rel L2 %.2e\n", bench, r, e,
                sqrt(num / fmax(den, 1e-300)));
    }
    /* sampled columns of dw: every row's softmax at column j from x, w and
     * the GPU's row statistics (checked above on the sampled rows) */
    for (int si = 0; si < samples; si++) {
        const int64_t j = si == 0 ? 0 : si == 1 ? V - 1 : (int64_t)(next_rand() % (uint64_t)V);
        for (int64_t r = 0; r < R; r++) {
            double l = 0;
            for (int64_t k = 0; k < K; k++) l += (double)xv[r * K + k] * wv[k * V + j];
            const double lse = rows[r * 3] + log((double)rows[r * 3 + 1]);
            col[r] = (exp(l - lse) - (labels[r] == j)) / (double)R;
        }
        double num = 0, den = 0;
        for (int64_t k = 0; k < K; k++) {
            double d = 0;
            for (int64_t r = 0; r < R; r++) d += (double)xv[r * K + k] * col[r];
            num += (dw[k * V + j] - d) * (dw[k * V + j] - d);
            den += d * d;
        }
        err_dw = fmax(err_dw, sqrt(num / fmax(den, 1e-300)));
    }
    /* f32 sums over K = 2048 (logits), V (dx) and R (dw) terms on the GPU */
    const bool ok = err_loss < 1e-5 && err_rows < 1e-4 && err_dx < 2e-4 && err_dw < 2e-4;
    int wide;
    uint64_t pages;
    width_report(s, logits, &wide, &pages);
    const double flop = 3.0 * 2.0 * (double)R * (double)K * (double)V;
    printf("{\"bench\": \"%s\", \"status\": \"%s\", \"rows\": %" PRId64 ", \"hidden\": %" PRId64 ", \"vocab\": %" PRId64
           ", \"logit_elements\": %" PRId64 ", \"logit_bytes\": %" PRId64 ", \"logit_pages\": %" PRIu64
           ", \"kernels_64bit\": %d, \"peak_bytes\": %" PRIu64 ", \"fwd_bwd_s\": %.4f, \"tflops\": %.2f, \"loss\": %.6f"
           ", \"err_loss\": %.2e, \"err_rows\": %.2e, \"err_dx\": %.2e, \"err_dw\": %.2e, \"samples\": %d, "
           "\"check_s\": %.1f}\n",
           bench, ok ? "ok" : "FAIL", R, K, V, R * V, R * V * 4, pages, wide, memplan_peak(&s->plan), tm,
           flop / tm / 1e12, gl, err_loss, err_rows, err_dx, err_dw, samples, now_s() - t0);
    code = ok ? EXIT_OK : EXIT_FAIL;
out:
    free(xv), free(wv), free(dx), free(dw), free(rows), free(labels), free(lr), free(col);
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return code;
}

/* ---- eltwise: y = 0.5 a + 0.25 and sum(y) over more than 2^32 elements --- */

static float a_of(uint64_t i) { /* depends on every bit of the index */
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    return (float)(h >> 40) / 16777216.0f - 0.5f;
}

static int bench_eltwise(int64_t N, int reps) {
    const char *bench = "big_eltwise";
    const uint64_t host_need = (uint64_t)N * 8;
    if (host_available() && host_available() < host_need + ((uint64_t)1 << 30)) {
        char why[160];
        snprintf(why, sizeof why, "needs %" PRIu64 " bytes of host memory, %" PRIu64 " available", host_need,
                 host_available());
        return refuse(bench, why);
    }
    mn_graph *g = NULL;
    mn_tensor a, half, quarter, y, sum;
    mn_status st = mn_graph_create(&g);
    if (!st) st = mn_graph_input(g, &a, "a", MN_F32, 1, (int64_t[]){N});
    if (!st) st = mn_scale(g, &half, a, 0.5f);
    if (!st) st = mn_graph_scalar(g, &quarter, 0.25f);
    if (!st) st = mn_add(g, &y, half, quarter);
    if (!st) st = mn_sum(g, &sum, y, -1, false);
    if (!st) st = mn_graph_output(g, y, "y");
    if (!st) st = mn_graph_output(g, sum, "s");
    if (st) {
        int c = fail(bench, "graph", mn_graph_error(g));
        mn_graph_destroy(g);
        return c;
    }
    int code = EXIT_OK;
    mn_session *s = open_session(g, false, bench, &code);
    if (!s) {
        mn_graph_destroy(g);
        return code;
    }
    float *av = malloc((size_t)N * 4), *yv = malloc((size_t)N * 4);
    if (!av || !yv) {
        code = refuse(bench, "out of host memory");
        goto out;
    }
    for (int64_t i = 0; i < N; i++) av[i] = a_of((uint64_t)i);
    double t_up = now_s();
    st = mn_session_set_input(s, "a", av, (size_t)N * 4);
    static const char *only_y[] = {"y"}, *only_s[] = {"s"};
    double ty[16], ts[16];
    int n = reps < 1 ? 1 : reps > 15 ? 15 : reps;
    /* the first run also uploads a */
    if (!st) st = mn_session_run_outputs(s, only_y, 1);
    t_up = now_s() - t_up;
    for (int i = 0; i < n && !st; i++) {
        double t0 = now_s();
        st = mn_session_run_outputs(s, only_y, 1);
        ty[i] = now_s() - t0;
        t0 = now_s();
        if (!st) st = mn_session_run_outputs(s, only_s, 1);
        ts[i] = now_s() - t0;
    }
    float gs = NAN;
    if (!st) st = mn_session_output(s, "y", yv, (size_t)N * 4);
    if (!st) st = mn_session_output(s, "s", &gs, 4);
    if (st) {
        code = fail(bench, "run", mn_session_error(s));
        goto out;
    }
    int64_t bad = 0, first_bad = -1;
    double ref = 0;
    for (int64_t i = 0; i < N; i++) {
        const float h = av[i] * 0.5f, want = h + 0.25f;
        ref += (double)want;
        if (yv[i] != want && bad++ == 0) first_bad = i;
    }
    const double err_s = fabs(gs - ref) / fmax(fabs(ref), 1e-30);
    const bool ok = bad == 0 && err_s < 1e-6;
    int wide;
    uint64_t pages;
    width_report(s, y, &wide, &pages);
    const double my = median(ty, n), ms = median(ts, n);
    printf("{\"bench\": \"%s\", \"status\": \"%s\", \"elements\": %" PRId64 ", \"bytes\": %" PRId64
           ", \"pages\": %" PRIu64 ", \"kernels_64bit\": %d, \"eltwise_s\": %.5f, \"eltwise_gbps\": %.1f"
           ", \"sum_s\": %.5f, \"upload_and_first_run_s\": %.2f, \"wrong_elements\": %" PRId64
           ", \"first_wrong\": %" PRId64 ", \"sum\": %.6e, \"sum_ref\": %.6e, \"err_sum\": %.2e}\n",
           bench, ok ? "ok" : "FAIL", N, N * 4, pages, wide, my, 2.0 * (double)N * 4 / my / 1e9, ms, t_up, bad,
           first_bad, (double)gs, ref, err_s);
    code = ok ? EXIT_OK : EXIT_FAIL;
out:
    free(av), free(yv);
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return code;
}

static bool parse_i64(const char *v, int64_t lo, int64_t *out) {
    char *end;
    if (!v || !*v) return false;
    long long x = strtoll(v, &end, 10);
    if (*end || x < lo) return false;
    *out = x;
    return true;
}

int main(int argc, char **argv) {
    int64_t R = 32768, K = 2048, V = 128256, N = ((int64_t)1 << 32) + ((int64_t)1 << 24), reps = 3, samples = 6;
    bool logits = false, eltwise = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "logits")) logits = true;
        else if (!strcmp(a, "eltwise")) eltwise = true;
        else if (!strcmp(a, "--rows")) ok = parse_i64(v, 2, &R), i++;
        else if (!strcmp(a, "--hidden")) ok = parse_i64(v, 1, &K), i++;
        else if (!strcmp(a, "--vocab")) ok = parse_i64(v, 2, &V), i++;
        else if (!strcmp(a, "--elems")) ok = parse_i64(v, 1, &N), i++;
        else if (!strcmp(a, "--reps")) ok = parse_i64(v, 0, &reps), i++;
        else if (!strcmp(a, "--samples")) ok = parse_i64(v, 2, &samples), i++;
        else ok = false;
        if (!ok) {
            fprintf(stderr, "usage: meganeura_bench_big [logits] [eltwise] [--rows R] [--hidden K] [--vocab V] "
                            "[--elems N] [--reps N] [--samples S]\n");
            return 2;
        }
    }
    if (V > INT32_MAX || reps > 100 || samples > 1000) {
        fprintf(stderr, "meganeura_bench_big: vocab at most 2^31 - 1, reps at most 100, samples at most 1000\n");
        return 2;
    }
    if (!logits && !eltwise) logits = eltwise = true;
    if (mn_device_open(&g_dev, MN_BACKEND_VULKAN)) {
        int c = refuse("big", mn_device_error(g_dev));
        mn_device_close(g_dev);
        return c;
    }
    int codes[2] = {EXIT_OK, EXIT_OK};
    if (logits) codes[0] = bench_logits(R, K, V, (int)reps, (int)samples);
    if (eltwise) codes[1] = bench_eltwise(N, (int)reps);
    mn_device_close(g_dev);
    /* a failed check outranks a refusal */
    if (codes[0] == EXIT_FAIL || codes[1] == EXIT_FAIL) return EXIT_FAIL;
    return codes[0] == EXIT_REFUSED || codes[1] == EXIT_REFUSED ? EXIT_REFUSED : EXIT_OK;
}
