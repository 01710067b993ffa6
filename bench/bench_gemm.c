/* bench_gemm.c - GEMM throughput in the strict and fast contracts (never a
 * unit test; docs/PERF.md "GEMM in the fast contract").
 *
 *   meganeura_bench_gemm [--backend cpu|vulkan] [--precision LIST] [--shapes LIST] [--runs N]
 *                        [--samples N] [--round-check] [--device per-run|shared]
 *
 * --precision  comma-separated of strict, bf16, f16 (default all three)
 * --shapes     comma-separated of: square (n = 1024, 2048, 4096, 8192, A @ B),
 *              skinny (the workloads' products, x @ W^T with W [N, K]: M = 128,
 *              512, 4096 rows by K = 576, N = 1536; K = 576, N = 49152;
 *              K = 2048, N = 8192), or MxKxN[:nn|nt|tn|tt] (default
 *              square,skinny)
 * --runs       timed runs after 2 warm-up runs (default 10); each run executes
 *              R independent products of the shape in one submission (R from
 *              the shape: about 1 TFLOP a run, at most 16 and 6 GB of
 *              outputs), so the time per product excludes the submission
 * --samples    entries of C checked per product (default 256) against a CPU
 *              product in double of the operands rounded as the contract
 *              rounds them (core/round16.h): max |c - ref| / sum |a b|
 *              over the samples, "ok" below 1e-4
 * --device     per-run (default): every measured session opens a device of its
 *              own, so that no session runs after another on the same device
 *              (docs/PERF.md "Open problem: a device reused across models");
 *              shared: one device for the whole run. Run AG (H100) measured
 *              both the same; the 4x swings of runs AD and AF between
 *              sessions of one kernel came from elsewhere (a busy GPU)
 * --round-check  also multiply random A [4096, 64] (every exponent, half of
 *              the entries on a rounding tie) by the identity and compare the
 *              bits of C = round(A) with the CPU's rounding: whether the
 *              device's conversions round to nearest even (MEGANEURA_COOPMAT_ROUND=hw)
 *
 * Tuning knobs (environment; read by the library at each session):
 *   MEGANEURA_COOPMAT_TILE=BMxBNxBK/WMxWN/S, MEGANEURA_COOPMAT_ROUND=exact|hw,
 *   MEGANEURA_COOPMAT=auto|khr|nv|0 (vk_gen_coopmat.c says what each means);
 *   MEGANEURA_BENCH_TILES="T1;T2;..." runs every fast product once per tile
 *   (each becomes MEGANEURA_COOPMAT_TILE; "auto" is the generator's table),
 *   MEGANEURA_BENCH_ROUNDS="exact;hw" likewise for the rounding.
 *
 * One JSON object per line on stdout:
 *   {"bench":"gemm","backend":..,"precision":..,"M":..,"K":..,"N":..,"layout":"nt",
 *    "tile":..,"round":..,"reps":R,"ms_min":..,"ms_median":..,"tflops":..,
 *    "max_err":..,"check":"ok"}
 * and for --round-check {"bench":"round_bits","precision":..,"round":..,"mismatches":..,"of":..}.
 * A product that fails to build prints {"bench":"gemm",...,"error":"..."} and the
 * run goes on.
 */
#include <math.h>
#include <meganeura.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/core/round16.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct shape {
    int64_t M, K, N;
    bool ta, tb;
} shape;

static mn_backend_kind g_backend = MN_BACKEND_VULKAN;
static mn_device *g_device;
static bool g_device_per_run = true;

/* The device a measured session runs on: g_device, or one of its own
 * (--device per-run), which *own must close. */
static mn_device *bench_device(mn_device **own) {
    *own = NULL;
    if (!g_device_per_run) return g_device;
    if (mn_device_open(own, g_backend)) {
        fprintf(stderr, "bench_gemm: device: %s\n", mn_device_error(*own));
        mn_device_close(*own);
        *own = NULL;
        return g_device;
    }
    return *own;
}
static int g_runs = 10, g_samples = 256;
/* operand values, filled once for the largest shape: a smaller one's are
 * a prefix of the same sequence */
static float *g_a, *g_b;

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Uniform in [-1, 1). */
static void fill(float *v, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) v[i] = (float)(rng_next(&s) >> 40) / (float)(1u << 23) - 1.0f;
}

static const char *layout_name(const shape *s) {
    static const char *n[] = {"nn", "nt", "tn", "tt"};
    return n[(s->ta ? 2 : 0) + (s->tb ? 1 : 0)];
}

/* op(A)(m, k), op(B)(k, n) of the stored operands. */
static float at_a(const float *a, const shape *s, int64_t m, int64_t k) {
    return s->ta ? a[k * s->M + m] : a[m * s->K + k];
}
static float at_b(const float *b, const shape *s, int64_t k, int64_t n) {
    return s->tb ? b[n * s->K + k] : b[k * s->N + n];
}

static void print_err(const char *prec, const shape *s, const char *tile, const char *round, const char *msg) {
    printf("{\"bench\":\"gemm\",\"backend\":\"%s\",\"precision\":\"%s\",\"M\":%lld,\"K\":%lld,\"N\":%lld,"
           "\"layout\":\"%s\",\"tile\":\"%s\",\"round\":\"%s\",\"error\":\"",
           g_backend == MN_BACKEND_VULKAN ? "vulkan" : "cpu", prec, (long long)s->M, (long long)s->K,
           (long long)s->N, layout_name(s), tile, round);
    for (const char *c = msg; *c; c++) {
        if (*c == '"' || *c == '\\') putchar('\\');
        if ((unsigned char)*c >= 0x20) putchar(*c);
    }
    printf("\"}\n");
    fflush(stdout);
}

static void bench_one(mn_precision prec, const shape *s, const char *tile, const char *round) {
    const char *pn = mn_precision_name(prec);
    const double flops = 2.0 * (double)s->M * (double)s->N * (double)s->K;
    const double cbytes = (double)s->M * (double)s->N * 4;
    int reps = (int)ceil(1e12 / flops);
    if (reps > 16) reps = 16;
    if (reps < 1) reps = 1;
    while (reps > 1 && reps * cbytes > 6e9) reps--;
    mn_graph *g;
    if (mn_graph_create(&g)) return;
    mn_tensor a, b;
    const int64_t sa[2] = {s->ta ? s->K : s->M, s->ta ? s->M : s->K};
    const int64_t sb[2] = {s->tb ? s->N : s->K, s->tb ? s->K : s->N};
    bool ok = !mn_graph_input(g, &a, "a", MN_F32, 2, sa) && !mn_graph_input(g, &b, "b", MN_F32, 2, sb);
    for (int r = 0; r < reps && ok; r++) {
        mn_tensor c;
        char name[16];
        snprintf(name, sizeof name, "c%d", r);
        ok = !mn_matmul_ex(g, &c, a, b, s->ta, s->tb) && !mn_graph_output(g, c, name);
    }
    if (!ok) {
        print_err(pn, s, tile, round, mn_graph_error(g));
        mn_graph_destroy(g);
        return;
    }
    mn_session_options o = mn_session_default_options();
    mn_device *own;
    o.backend = g_backend;
    o.device = bench_device(&own);
    o.precision = prec;
    mn_session *ss = NULL;
    if (mn_session_create(&ss, g, &o)) {
        print_err(pn, s, tile, round, mn_session_error(ss));
        mn_session_destroy(ss);
        mn_device_close(own);
        mn_graph_destroy(g);
        return;
    }
    const size_t na = (size_t)(s->M * s->K), nb = (size_t)(s->K * s->N);
    const float *av = g_a, *bv = g_b;
    double *t = malloc((size_t)g_runs * sizeof *t);
    bool fine = t && !mn_session_set_input(ss, "a", av, na * 4) &&
                !mn_session_set_input(ss, "b", bv, nb * 4);
    for (int i = 0; fine && i < g_runs + 2; i++) {
        const double t0 = now_ms();
        fine = !mn_session_run(ss);
        if (i >= 2) t[i - 2] = (now_ms() - t0) / reps;
    }
    if (!fine) {
        print_err(pn, s, tile, round, mn_session_error(ss));
    } else {
        qsort(t, (size_t)g_runs, sizeof *t, cmp_d);
        /* check sampled entries of the last product */
        const size_t nc = (size_t)(s->M * s->N);
        float *c = malloc(nc * 4);
        char name[16];
        snprintf(name, sizeof name, "c%d", reps - 1);
        double worst = 0;
        const mn_round16 rnd = prec == MN_PRECISION_FAST_BF16 ? MN_ROUND_BF16
                               : prec == MN_PRECISION_FAST_F16 ? MN_ROUND_F16 : MN_ROUND_NONE;
        if (c && !mn_session_output(ss, name, c, nc * 4)) {
            uint64_t rs = 99;
            for (int q = 0; q < g_samples; q++) {
                int64_t m = q == 0 ? 0 : q == 1 ? s->M - 1 : (int64_t)(rng_next(&rs) % (uint64_t)s->M);
                int64_t n = q == 0 ? 0 : q == 1 ? s->N - 1 : (int64_t)(rng_next(&rs) % (uint64_t)s->N);
                double ref = 0, scale = 0;
                for (int64_t k = 0; k < s->K; k++) {
                    const double p = (double)mn_round16_f(at_a(av, s, m, k), rnd) * mn_round16_f(at_b(bv, s, k, n), rnd);
                    ref += p, scale += fabs(p);
                }
                const double e = fabs(c[m * s->N + n] - ref) / (scale > 0 ? scale : 1);
                if (!(e <= worst)) worst = e; /* NaN sticks */
            }
        } else {
            worst = INFINITY;
        }
        free(c);
        printf("{\"bench\":\"gemm\",\"backend\":\"%s\",\"precision\":\"%s\",\"M\":%lld,\"K\":%lld,\"N\":%lld,"
               "\"layout\":\"%s\",\"tile\":\"%s\",\"round\":\"%s\",\"reps\":%d,\"ms_min\":%.4f,\"ms_median\":%.4f,"
               "\"tflops\":%.3f,\"max_err\":%.3g,\"check\":\"%s\",\"device\":\"%s\"}\n",
               g_backend == MN_BACKEND_VULKAN ? "vulkan" : "cpu", pn, (long long)s->M, (long long)s->K,
               (long long)s->N, layout_name(s), tile, round, reps, t[0], t[g_runs / 2], flops / (t[0] * 1e-3) / 1e12,
               worst, worst < 1e-4 ? "ok" : "FAIL", g_device_per_run ? "per-run" : "shared");
        fflush(stdout);
    }
    free(t);
    mn_session_destroy(ss);
    mn_device_close(own);
    mn_graph_destroy(g);
}

/* C = A @ I with A [4096, 64]: C is round(A) exactly (one product by 1,
 * the rest by +0), so its bits show how the kernel rounds. */
static void round_check(mn_precision prec, const char *round) {
    enum { M = 4096, K = 64 };
    const mn_round16 rnd = prec == MN_PRECISION_FAST_BF16 ? MN_ROUND_BF16 : MN_ROUND_F16;
    float *a = malloc(sizeof(float) * M * K), *id = calloc(K * K, sizeof(float)), *c = malloc(sizeof(float) * M * K);
    uint64_t s = 5;
    for (int i = 0; i < M * K; i++) {
        uint32_t u = (uint32_t)rng_next(&s);
        /* exponents within the format's finite range, normal in f32 */
        const uint32_t e = rnd == MN_ROUND_F16 ? 103 + (u >> 24) % 39 : 1 + (u >> 24) % 253;
        u = (u & 0x807fffffu) | (e << 23);
        if (i % 2) u = rnd == MN_ROUND_BF16 ? (u & 0xffff0000u) | 0x8000u : (u & 0xffffe000u) | 0x1000u; /* ties */
        memcpy(&a[i], &u, 4);
    }
    for (int k = 0; k < K; k++) id[k * K + k] = 1.0f;
    mn_graph *g;
    mn_tensor ta, tb, tc;
    mn_graph_create(&g);
    mn_session *ss = NULL;
    mn_session_options o = mn_session_default_options();
    o.backend = g_backend, o.device = g_device, o.precision = prec;
    long bad = -1;
    if (!mn_graph_input(g, &ta, "a", MN_F32, 2, (int64_t[]){M, K}) &&
        !mn_graph_input(g, &tb, "b", MN_F32, 2, (int64_t[]){K, K}) && !mn_matmul(g, &tc, ta, tb) &&
        !mn_graph_output(g, tc, "c") && !mn_session_create(&ss, g, &o) &&
        !mn_session_set_input(ss, "a", a, sizeof(float) * M * K) &&
        !mn_session_set_input(ss, "b", id, sizeof(float) * K * K) && !mn_session_run(ss) &&
        !mn_session_output(ss, "c", c, sizeof(float) * M * K)) {
        bad = 0;
        for (int i = 0; i < M * K; i++) {
            const float want = mn_round16_f(a[i], rnd);
            bad += memcmp(&want, &c[i], 4) != 0;
        }
    }
    if (bad < 0) fprintf(stderr, "bench_gemm: round check: %s\n", ss ? mn_session_error(ss) : mn_graph_error(g));
    printf("{\"bench\":\"round_bits\",\"precision\":\"%s\",\"round\":\"%s\",\"mismatches\":%ld,\"of\":%d}\n",
           mn_precision_name(prec), round, bad, M * K);
    fflush(stdout);
    mn_session_destroy(ss);
    mn_graph_destroy(g);
    free(a), free(id), free(c);
}

/* Splits s at sep into at most cap tokens (s is modified). */
static int split(char *s, const char *sep, char **tok, int cap) {
    int n = 0;
    for (char *p = strtok(s, sep); p && n < cap; p = strtok(NULL, sep)) tok[n++] = p;
    return n;
}

static int add_shapes(shape *out, int n, int cap, const char *what) {
    if (!strcmp(what, "square")) {
        static const int64_t sq[] = {1024, 2048, 4096, 8192};
        for (int i = 0; i < 4 && n < cap; i++) out[n++] = (shape){sq[i], sq[i], sq[i], false, false};
    } else if (!strcmp(what, "skinny")) {
        static const int64_t rows[] = {128, 512, 4096}, kn[][2] = {{576, 1536}, {576, 49152}, {2048, 8192}};
        for (int j = 0; j < 3; j++)
            for (int i = 0; i < 3 && n < cap; i++) out[n++] = (shape){rows[i], kn[j][0], kn[j][1], false, true};
    } else {
        long long m, k, nn;
        char lay[3] = "nn";
        int got = sscanf(what, "%lldx%lldx%lld:%2s", &m, &k, &nn, lay);
        if (got < 3 || m < 1 || k < 1 || nn < 1 || (lay[0] != 'n' && lay[0] != 't') || (lay[1] != 'n' && lay[1] != 't'))
            return -1;
        if (n < cap) out[n++] = (shape){m, k, nn, lay[0] == 't', lay[1] == 't'};
    }
    return n;
}

int main(int argc, char **argv) {
    char precs[64] = "strict,bf16,f16", shapes_arg[256] = "square,skinny";
    bool rcheck = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            g_backend = !strcmp(argv[++i], "cpu") ? MN_BACKEND_CPU : MN_BACKEND_VULKAN;
        } else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            snprintf(precs, sizeof precs, "%s", argv[++i]);
        } else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
            snprintf(shapes_arg, sizeof shapes_arg, "%s", argv[++i]);
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            g_runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--samples") && i + 1 < argc) {
            g_samples = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--round-check")) {
            rcheck = true;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc && !strcmp(argv[i + 1], "per-run")) {
            g_device_per_run = true, i++;
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc && !strcmp(argv[i + 1], "shared")) {
            g_device_per_run = false, i++;
        } else {
            fprintf(stderr, "usage: %s [--backend cpu|vulkan] [--precision strict,bf16,f16] "
                            "[--shapes square,skinny,MxKxN[:nt]] [--runs N] [--samples N] [--round-check] [--device per-run|shared]\n",
                    argv[0]);
            return 2;
        }
    }
    if (g_runs < 1 || g_runs > 10000 || g_samples < 2) {
        fprintf(stderr, "bench_gemm: --runs must be in 1..10000 and --samples >= 2\n");
        return 2;
    }
    shape sh[64];
    int nsh = 0;
    char *tok[32];
    int nt = split(shapes_arg, ",", tok, 32);
    for (int i = 0; i < nt; i++)
        if ((nsh = add_shapes(sh, nsh, 64, tok[i])) < 0) {
            fprintf(stderr, "bench_gemm: --shapes: '%s' is not square, skinny or MxKxN[:nn|nt|tn|tt]\n", tok[i]);
            return 2;
        }
    mn_precision pl[3];
    int np = 0;
    char *ptok[3];
    int npt = split(precs, ",", ptok, 3);
    for (int i = 0; i < npt; i++) {
        int k = 0;
        while (k < 3 && strcmp(ptok[i], mn_precision_name((mn_precision)k))) k++;
        if (k == 3) {
            fprintf(stderr, "bench_gemm: --precision: '%s' is not strict, bf16 or f16\n", ptok[i]);
            return 2;
        }
        pl[np++] = (mn_precision)k;
    }
    size_t most_a = 0, most_b = 0;
    for (int i = 0; i < nsh; i++) {
        if ((size_t)(sh[i].M * sh[i].K) > most_a) most_a = (size_t)(sh[i].M * sh[i].K);
        if ((size_t)(sh[i].K * sh[i].N) > most_b) most_b = (size_t)(sh[i].K * sh[i].N);
    }
    g_a = malloc(most_a * 4), g_b = malloc(most_b * 4);
    if (!g_a || !g_b) {
        fprintf(stderr, "bench_gemm: out of memory for the operands\n");
        return 1;
    }
    fill(g_a, most_a, 1);
    fill(g_b, most_b, 2);
    if (mn_device_open(&g_device, g_backend)) {
        fprintf(stderr, "bench_gemm: device: %s\n", mn_device_error(g_device));
        return 1;
    }
    /* the knob sweeps: each value is set in the environment the library reads */
    char tiles_env[1024], rounds_env[256];
    snprintf(tiles_env, sizeof tiles_env, "%s", getenv("MEGANEURA_BENCH_TILES") ? getenv("MEGANEURA_BENCH_TILES") : "");
    snprintf(rounds_env, sizeof rounds_env, "%s",
             getenv("MEGANEURA_BENCH_ROUNDS") ? getenv("MEGANEURA_BENCH_ROUNDS") : "");
    char *tiles[32], *rounds[4];
    int ntiles = split(tiles_env, ";", tiles, 32), nrounds = split(rounds_env, ";", rounds, 4);
    const char *tile0 = getenv("MEGANEURA_COOPMAT_TILE"), *round0 = getenv("MEGANEURA_COOPMAT_ROUND");
    if (!ntiles) tiles[ntiles++] = (char *)(tile0 && *tile0 ? tile0 : "auto");
    if (!nrounds) rounds[nrounds++] = (char *)(round0 && *round0 ? round0 : "exact");
    for (int p = 0; p < np; p++) {
        const bool fast = pl[p] != MN_PRECISION_STRICT;
        for (int r = 0; r < (fast ? nrounds : 1); r++) {
            if (fast) setenv("MEGANEURA_COOPMAT_ROUND", rounds[r], 1);
            if (fast && rcheck) round_check(pl[p], rounds[r]);
            for (int t = 0; t < (fast ? ntiles : 1); t++) {
                if (fast && strcmp(tiles[t], "auto")) setenv("MEGANEURA_COOPMAT_TILE", tiles[t], 1);
                else unsetenv("MEGANEURA_COOPMAT_TILE");
                for (int i = 0; i < nsh; i++)
                    bench_one(pl[p], &sh[i], fast ? tiles[t] : "-", fast ? rounds[r] : "-");
            }
        }
    }
    mn_device_close(g_device);
    free(g_a);
    free(g_b);
    return 0;
}
