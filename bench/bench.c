/* bench.c - the benchmark program (never a unit test).
 *
 *   meganeura_bench [--backend cpu|vulkan] [--runs N] [--warmup N] [--gemm] [--gemm-shape M,N,K]...
 *                   [--only NAME[,NAME...]] [--nonfinite skip|apply|unchecked] [--precision strict|bf16|f16]
 *                   [--models] [--list]
 *
 * --list names every workload, the model workloads of bench_models.c (the
 * paper's five at its shapes and larger training batches: ResNet-50, the
 * U-Nets, the SmolVLA action expert) included; --models runs those (the
 * default runs the MLPs); --only NAME[,NAME...] runs the workloads whose
 * name holds one of the NAMEs, of either kind (none: an error).
 *
 * Workloads matched to ../shared/bench/torch_anchors.py (same layers,
 * optimizers and step definition: forward + backward + optimizer update,
 * timed to completion; ours also uploads the batch each step):
 *   mlp_ci_b16     128-64-64-10 (last layer without bias), batch 16, SGD lr 1e-3 momentum 0.9
 *   mnist_mlp_b64  784-128-10, batch 64, Adam lr 1e-3
 * The device is opened once (mn_device_open, its time reported as
 * device_open_ms) and shared. For each workload: session build time cold
 * (empty kernel cache) and warm, median and min train-step and inference time
 * over --runs after --warmup.
 * --nonfinite: the sessions' non-finite check (default: the library's, skip;
 * unchecked is the step without the check, like the PyTorch anchor's).
 * --precision: mn_session_options.precision of every session (default
 * strict; the fast contract's bf16 or f16 operands for the matrix products,
 * f16 training with dynamic loss scaling from 65536, as GradScaler), reported
 * as "precision" (the model workloads; the MLP lines carry it too).
 * --gemm: square f32 matmul n = 1024, 4096, 8192, TFLOP/s from the best run;
 * --gemm-shape M,N,K (repeatable): those products instead. The tile is the
 * generator's choice unless MEGANEURA_VK_GEMM_TILE=bm,bn,bk,tm,tn forces one
 * (reported as "tile").
 * Every workload reports the dispatches of its training step and of its
 * forward run (train_kernels, infer_kernels: the kernel plan's count).
 * Prints one JSON object per line (for scripts) and nothing else on stdout.
 */
#define _POSIX_C_SOURCE 200809L
#include <meganeura.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_cache.h"
#include "bench_models.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "bench: %s: %s\n", what, msg);
    exit(1);
}
#define G(call)                                                                                    \
    do {                                                                                           \
        if ((call) != MN_OK) die(#call, mn_graph_error(g));                                        \
    } while (0)
#define S(s, call)                                                                                 \
    do {                                                                                           \
        if ((call) != MN_OK) die(#call, mn_session_error(s));                                      \
    } while (0)

typedef struct workload {
    const char *name;
    int batch, nlayers, dims[4];
    bool last_bias;
    mn_optim_kind optim;
} workload;

static const workload workloads[] = {
    {"mlp_ci_b16", 16, 3, {128, 64, 64, 10}, false, MN_OPTIM_SGD},
    {"mnist_mlp_b64", 64, 2, {784, 128, 10, 0}, true, MN_OPTIM_ADAM},
};

static mn_graph *build_mlp(const workload *w) {
    mn_graph *g;
    mn_tensor x, lab, h, loss;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, z = {MN_INIT_ZEROS, 0, 0};
    if (mn_graph_create(&g)) die("graph", "out of memory");
    G(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){w->batch, w->dims[0]}));
    G(mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){w->batch}));
    h = x;
    for (int l = 0; l < w->nlayers; l++) {
        char wn[32], bn[32];
        mn_tensor W, B;
        snprintf(wn, sizeof wn, "f%d.weight", l + 1);
        snprintf(bn, sizeof bn, "f%d.bias", l + 1);
        G(mn_graph_param(g, &W, wn, 2, (int64_t[]){w->dims[l], w->dims[l + 1]}, ku));
        G(mn_matmul(g, &h, h, W));
        if (l + 1 < w->nlayers || w->last_bias) {
            G(mn_graph_param(g, &B, bn, 1, (int64_t[]){w->dims[l + 1]}, z));
            G(mn_add(g, &h, h, B));
        }
        if (l + 1 < w->nlayers) G(mn_relu(g, &h, h));
    }
    G(mn_cross_entropy(g, &loss, h, lab));
    G(mn_graph_output(g, h, "logits"));
    G(mn_graph_loss(g, loss));
    return g;
}

static mn_device *g_device;
static mn_nonfinite g_nonfinite = MN_NONFINITE_SKIP;
static mn_precision g_precision = MN_PRECISION_STRICT;
static const char *const nonfinite_names[] = {"skip", "apply", "unchecked"};

static mn_session *open_session(const mn_graph *g, mn_backend_kind be, mn_mode mode, mn_optim_kind ok, double *ms) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = g_device;
    o.mode = mode;
    o.nonfinite = g_nonfinite;
    o.precision = g_precision;
    if (mode == MN_MODE_TRAINING && g_precision == MN_PRECISION_FAST_F16) o.loss_scale.init = 65536.0f;
    o.optim = mn_optimizer_default(ok);
    o.optim.lr = 1e-3f;
    if (ok == MN_OPTIM_SGD) o.optim.momentum = 0.9f;
    mn_session *s = NULL;
    double t0 = now_ms();
    if (mn_session_create(&s, g, &o)) die("session", mn_session_error(s));
    *ms = now_ms() - t0;
    return s;
}

static void time_it(mn_session *s, bool train, int warmup, int runs, const float *x, size_t xb, const int32_t *lab,
                    size_t lb, double *med, double *mn) {
    double *t = malloc((size_t)runs * sizeof *t);
    for (int i = 0; i < warmup + runs; i++) {
        double t0 = now_ms();
        S(s, mn_session_set_input(s, "x", x, xb));
        S(s, mn_session_set_input(s, "labels", lab, lb));
        S(s, train ? mn_session_step(s) : mn_session_run(s));
        if (i >= warmup) t[i - warmup] = now_ms() - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_d);
    *med = t[runs / 2];
    *mn = t[0];
    free(t);
}

static const char *backend_name(mn_backend_kind b) { return b == MN_BACKEND_VULKAN ? "vulkan" : "cpu"; }

/* Dispatching kernels of a session's step (training) or run (the first
 * line of the kernels dump). */
static long kernels(const mn_session *s) {
    char *buf = NULL;
    size_t len = 0;
    long n = -1;
    FILE *f = open_memstream(&buf, &len);
    if (f && mn_session_dump(s, "kernels", f) == MN_OK) {
        fflush(f);
        if (!buf || sscanf(buf, "kernels: %ld", &n) != 1) n = -1;
    }
    if (f) fclose(f);
    free(buf);
    return n;
}

/* One device per workload, shared by its sessions (cold, warm, inference).
 * MEGANEURA_BENCH_PRIVATE_DEVICE=1: every session opens its own instead.
 * (Sessions of a second model on a device that already ran another model's
 * sessions were measured 2x slower per step on the H200: docs/PERF.md.) */
static double open_device(mn_backend_kind be) {
    double t0 = now_ms();
    const char *priv = getenv("MEGANEURA_BENCH_PRIVATE_DEVICE");
    g_device = NULL;
    if (!(priv && *priv && strcmp(priv, "0")) && mn_device_open(&g_device, be))
        die("device", mn_device_error(g_device));
    return now_ms() - t0;
}

static void bench_mlp(const workload *w, mn_backend_kind be, int warmup, int runs) {
    double dev_ms = open_device(be);
    mn_graph *g = build_mlp(w);
    size_t xn = (size_t)w->batch * (size_t)w->dims[0];
    float *x = malloc(xn * sizeof *x);
    int32_t *lab = malloc((size_t)w->batch * sizeof *lab);
    for (size_t i = 0; i < xn; i++) x[i] = (float)((i * 2654435761u) % 2000) / 1000.0f - 1.0f;
    for (int i = 0; i < w->batch; i++) lab[i] = i % 10;
    /* cold build: an empty kernel cache; warm: the same cache again */
    bench_cache cache;
    if (!bench_cache_enter(&cache)) die("mkdtemp", "failed");
    double cold, warm, t_inf_build;
    mn_session *s = open_session(g, be, MN_MODE_TRAINING, w->optim, &cold);
    mn_session_destroy(s);
    s = open_session(g, be, MN_MODE_TRAINING, w->optim, &warm);
    mn_session *si = open_session(g, be, MN_MODE_INFERENCE, w->optim, &t_inf_build);
    double tmed, tmin, imed, imin;
    time_it(s, true, warmup, runs, x, xn * 4, lab, (size_t)w->batch * 4, &tmed, &tmin);
    time_it(si, false, warmup, runs, x, xn * 4, lab, (size_t)w->batch * 4, &imed, &imin);
    size_t peak = 0, sum = 0;
    mn_session_memory(s, &peak, &sum);
    printf("{\"workload\":\"%s\",\"backend\":\"%s\",\"precision\":\"%s\",\"nonfinite\":\"%s\",\"device_open_ms\":%.2f,\"build_cold_ms\":%.2f,\"build_warm_ms\":%.2f,"
           "\"train_ms_median\":%.4f,\"train_ms_min\":%.4f,\"infer_ms_median\":%.4f,\"infer_ms_min\":%.4f,"
           "\"train_kernels\":%ld,\"infer_kernels\":%ld,\"peak_bytes\":%zu,\"sum_bytes\":%zu}\n",
           w->name, backend_name(be), mn_precision_name(g_precision), nonfinite_names[g_nonfinite], dev_ms, cold, warm, tmed, tmin, imed, imin,
           kernels(s), kernels(si), peak, sum);
    fflush(stdout);
    mn_session_destroy(s);
    mn_session_destroy(si);
    mn_device_close(g_device);
    bench_cache_leave(&cache);
    mn_graph_destroy(g);
    free(x);
    free(lab);
}

static void bench_gemm(mn_backend_kind be, int M, int N, int K) {
    open_device(be);
    mn_graph *g;
    mn_tensor a, b, c;
    if (mn_graph_create(&g)) die("graph", "out of memory");
    G(mn_graph_input(g, &a, "a", MN_F32, 2, (int64_t[]){M, K}));
    G(mn_graph_input(g, &b, "b", MN_F32, 2, (int64_t[]){K, N}));
    G(mn_matmul(g, &c, a, b));
    G(mn_graph_output(g, c, "c"));
    double build;
    mn_session *s = open_session(g, be, MN_MODE_INFERENCE, MN_OPTIM_SGD, &build);
    size_t na = (size_t)M * (size_t)K, nb = (size_t)K * (size_t)N, nc = (size_t)M * (size_t)N;
    size_t nmax = na > nb ? na : nb;
    float *buf = malloc(nmax * 4);
    if (!buf) die("gemm", "out of memory");
    for (size_t i = 0; i < nmax; i++) buf[i] = (float)(i % 17) / 17.0f;
    S(s, mn_session_set_input(s, "a", buf, na * 4));
    S(s, mn_session_set_input(s, "b", buf, nb * 4));
    double flop = 2.0 * M * (double)N * K;
    int runs = flop > 5e11 ? 5 : 10;
    double best = 1e30, t[16];
    for (int i = 0; i < runs + 2; i++) {
        double t0 = now_ms();
        S(s, mn_session_run(s));
        double dt = now_ms() - t0;
        if (i >= 2) {
            t[i - 2] = dt;
            if (dt < best) best = dt;
        }
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_d);
    double tflops = flop / (best * 1e-3) / 1e12;
    /* spot check: the last element, c[M-1][N-1] = sum_k a[M-1][k] * b[k][N-1] */
    float *row = malloc(nc * 4);
    if (!row) die("gemm", "out of memory");
    S(s, mn_session_output(s, "c", row, nc * 4));
    double ref = 0;
    for (int k = 0; k < K; k++) ref += (double)buf[(size_t)(M - 1) * K + k] * buf[(size_t)k * N + (N - 1)];
    const char *tile = getenv("MEGANEURA_VK_GEMM_TILE");
    printf("{\"gemm\":\"f32\",\"backend\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"tile\":\"%s\",\"ms_median\":%.4f,"
           "\"ms_min\":%.4f,\"tflops\":%.2f,\"clast_rel_err\":%.2e}\n",
           backend_name(be), M, N, K, tile ? tile : "auto", t[runs / 2], best, tflops,
           (row[nc - 1] - ref) / (ref ? ref : 1));
    fflush(stdout);
    free(row);
    free(buf);
    mn_session_destroy(s);
    mn_device_close(g_device);
    mn_graph_destroy(g);
}

int main(int argc, char **argv) {
    mn_backend_kind be = MN_BACKEND_VULKAN;
    int runs = 50, warmup = 10;
    bool gemm = false, models = false;
    int shapes[16][3], nshapes = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            const char *v = argv[++i];
            be = !strcmp(v, "cpu") ? MN_BACKEND_CPU : MN_BACKEND_VULKAN;
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) {
            warmup = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--gemm")) {
            gemm = true;
        } else if (!strcmp(argv[i], "--gemm-shape") && i + 1 < argc) {
            int *d = shapes[nshapes];
            char tail;
            if (nshapes == 16 || sscanf(argv[++i], "%d,%d,%d%c", &d[0], &d[1], &d[2], &tail) != 3 || d[0] < 1 ||
                d[1] < 1 || d[2] < 1) {
                fprintf(stderr, "bench: --gemm-shape takes M,N,K (positive; at most 16 shapes)\n");
                return 2;
            }
            nshapes++;
            gemm = true;
        } else if (!strcmp(argv[i], "--models")) {
            models = true;
        } else if (!strcmp(argv[i], "--list")) {
            for (size_t k = 0; k < sizeof workloads / sizeof workloads[0]; k++)
                printf("%-22s MLP %d-%d-%d%s, batch %d\n", workloads[k].name, workloads[k].dims[0], workloads[k].dims[1],
                       workloads[k].dims[2], workloads[k].nlayers > 2 ? "-10" : "", workloads[k].batch);
            bench_models_list(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--nonfinite") && i + 1 < argc) {
            const char *v = argv[++i];
            int k = 0;
            while (k < 3 && strcmp(v, nonfinite_names[k])) k++;
            if (k == 3) {
                fprintf(stderr, "bench: --nonfinite must be skip, apply or unchecked\n");
                return 2;
            }
            g_nonfinite = (mn_nonfinite)k;
        } else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "strict")) g_precision = MN_PRECISION_STRICT;
            else if (!strcmp(v, "bf16")) g_precision = MN_PRECISION_FAST_BF16;
            else if (!strcmp(v, "f16")) g_precision = MN_PRECISION_FAST_F16;
            else {
                fprintf(stderr, "bench: --precision must be strict, bf16 or f16\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [--backend cpu|vulkan] [--runs N>=20] [--warmup N] [--gemm] [--gemm-shape M,N,K]... "
                    "[--only NAME[,NAME...]] [--nonfinite skip|apply|unchecked] [--precision strict|bf16|f16] [--models] [--list]\n",
                    argv[0]);
            return 2;
        }
    }
    if (runs < 1 || runs > 100000 || warmup < 0) {
        fprintf(stderr, "bench: --runs must be >= 1 and --warmup >= 0\n");
        return 2;
    }
    if (gemm && nshapes) {
        for (int i = 0; i < nshapes; i++) bench_gemm(be, shapes[i][0], shapes[i][1], shapes[i][2]);
    } else if (gemm) {
        static const int sizes[] = {1024, 4096, 8192};
        for (int i = 0; i < 3; i++)
            if (be == MN_BACKEND_VULKAN || sizes[i] <= 1024) bench_gemm(be, sizes[i], sizes[i], sizes[i]);
    } else {
        int ran = 0;
        if (!models || only)
            for (size_t i = 0; i < sizeof workloads / sizeof workloads[0]; i++)
                if (bench_name_matches(workloads[i].name, only)) bench_mlp(&workloads[i], be, warmup, runs), ran++;
        ran += bench_models_run(only, models, be, warmup, runs, g_nonfinite, g_precision);
        if (only && !ran) {
            fprintf(stderr, "bench: --only '%s' matches no workload (--list names them)\n", only);
            return 2;
        }
    }
    return 0;
}
