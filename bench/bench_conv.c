/* bench_conv.c - the convolutions of ResNet-50 one shape at a time: GPU time
 * of the forward, the input gradient and the weight gradient kernels, and
 * their rate (never a unit test; docs/PERF.md "Convolutions of ResNet-50").
 *
 *   meganeura_bench_conv [--batch N] [--runs R] [--warmup W] [--only I,J,..]
 *                        [--backend vulkan|cpu]
 *
 * Each of the 23 distinct shapes of torchvision's resnet50 at 224 x 224
 * (bias-free, padding k/2) is a training graph of its own: x [N,C,H,W] and
 * w [O,C,k,k] both parameters, loss = sum(conv2d(x, w)), plain SGD, the
 * non-finite check off, so that a step runs the forward, the input gradient
 * and the weight gradient (with the sum of its partial sums when the
 * weight gradient is split: autodiff.c wgrad_chunk) once each. The kernels'
 * GPU times come from the backend's own timestamps: the bench points
 * MEGANEURA_TRACE at a temporary file for each session and reads back the
 * durations of the last R executes (the median per kernel kind).
 *
 * One JSON line per shape on stdout:
 *   {"bench":"conv","i":..,"C":..,"H":..,"O":..,"k":..,"stride":..,"batch":..,
 *    "count":.. (how many layers of resnet50 have the shape),
 *    "gflop":.. (one direction: 2 N O OH OW C k k),
 *    "fwd_us":..,"dgrad_us":..,"wgrad_us":..,"other_us":..,
 *    "fwd_tflops":..,"dgrad_tflops":..,"wgrad_tflops":..,
 *    "kernels":.. (dispatches per step),"tile":..,"conv_ct":..,"wgrad_split":..}
 * and a last line {"bench":"conv_total", ...}: the shapes' times weighted by
 * their counts (the stem's input gradient left out: resnet50 does not need
 * it), the convolution time of one resnet50 step at this batch.
 * bench/conv_torch.py times cuDNN on the same shapes.
 *
 * Does not: check results (tests/test_vulkan_ops.c and test_workloads do).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "meganeura.h"

typedef struct cshape {
    int C, H, O, k, s, count;
} cshape;

/* torchvision resnet50 (stride on the 3x3 convolution, v1.5) */
static const cshape shapes[] = {
    {3, 224, 64, 7, 2, 1},                                                                  /* stem */
    {64, 56, 64, 1, 1, 1},     {64, 56, 64, 3, 1, 3},   {64, 56, 256, 1, 1, 4},   {256, 56, 64, 1, 1, 2},
    {256, 56, 128, 1, 1, 1},   {128, 56, 128, 3, 2, 1}, {128, 28, 512, 1, 1, 4},  {256, 56, 512, 1, 2, 1},
    {512, 28, 128, 1, 1, 3},   {128, 28, 128, 3, 1, 3}, {512, 28, 256, 1, 1, 1},  {256, 28, 256, 3, 2, 1},
    {256, 14, 1024, 1, 1, 6},  {512, 28, 1024, 1, 2, 1}, {1024, 14, 256, 1, 1, 5}, {256, 14, 256, 3, 1, 5},
    {1024, 14, 512, 1, 1, 1},  {512, 14, 512, 3, 2, 1}, {512, 7, 2048, 1, 1, 3},  {1024, 14, 2048, 1, 2, 1},
    {2048, 7, 512, 1, 1, 2},   {512, 7, 512, 3, 1, 2},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

enum { K_FWD, K_DGRAD, K_WGRAD, K_OTHER, K_KINDS };

static int die(const char *what, const char *why) {
    fprintf(stderr, "meganeura_bench_conv: %s: %s\n", what, why ? why : "(no message)");
    return 1;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int kind_of(const char *name) {
    if (!strcmp(name, "conv2d")) return K_FWD;
    if (!strcmp(name, "conv2d_bwd_input")) return K_DGRAD;
    if (!strcmp(name, "conv2d_bwd_weight")) return K_WGRAD;
    return K_OTHER;
}

/* Reads the trace: per execute e >= first, the summed durations of each
 * kind into us[kind][e - first]; *disp gets the dispatches of the last
 * execute. Returns the executes read, or -1. */
static int read_trace(const char *path, unsigned long long first, int runs, double (*us)[K_KINDS], int *disp) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    int seen = 0;
    unsigned long long cur = ~0ull;
    while (fgets(line, sizeof line, f)) {
        char name[64];
        double dur;
        unsigned long long ex;
        const char *p = strstr(line, "{\"name\":\"");
        if (!p || sscanf(p, "{\"name\":\"%63[^\"]\"", name) != 1) continue;
        const char *d = strstr(p, "\"dur\":"), *e = strstr(p, "\"execute\":");
        if (!d || !e || sscanf(d, "\"dur\":%lf", &dur) != 1 || sscanf(e, "\"execute\":%llu", &ex) != 1) continue;
        if (ex < first || ex >= first + (unsigned long long)runs) continue;
        if (ex != cur) cur = ex, *disp = 0;
        (*disp)++;
        us[ex - first][kind_of(name)] += dur;
        if ((int)(ex - first) + 1 > seen) seen = (int)(ex - first) + 1;
    }
    fclose(f);
    return seen;
}

static mn_status build(mn_graph *g, const cshape *c, int batch) {
    mn_init u = {MN_INIT_UNIFORM, -0.05f, 0.05f};
    mn_tensor x, w, y, loss;
    const mn_conv2d_params cp = {.stride = {c->s, c->s}, .padding = {c->k / 2, c->k / 2}};
    mn_status st = mn_graph_param(g, &x, "x", 4, (const int64_t[]){batch, c->C, c->H, c->H}, u);
    if (!st) st = mn_graph_param(g, &w, "w", 4, (const int64_t[]){c->O, c->C, c->k, c->k}, u);
    if (!st) st = mn_conv2d(g, &y, x, w, MN_NONE, &cp);
    if (!st) st = mn_sum(g, &loss, y, MN_ALL_AXES, false);
    if (!st) st = mn_graph_loss(g, loss);
    return st;
}

/* Median GPU us per kind over `runs` steps after `warmup`; 0 on success. */
static int measure(const cshape *c, int batch, mn_backend_kind be, int runs, int warmup, double med[K_KINDS],
                   int *disp) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/mn-bench-conv-%d.json", (int)getpid());
    mn_graph *g = NULL;
    mn_session *s = NULL;
    int rc = 1;
    double(*us)[K_KINDS] = calloc((size_t)runs, sizeof *us);
    double *col = malloc((size_t)runs * sizeof *col);
    if (!us || !col || mn_graph_create(&g) != MN_OK) {
        die("shape", "out of memory");
        goto done;
    }
    if (build(g, c, batch) != MN_OK) {
        die("graph", mn_graph_error(g));
        goto done;
    }
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.mode = MN_MODE_TRAINING;
    o.optim = mn_optimizer_default(MN_OPTIM_SGD);
    o.optim.lr = 1e-9f;
    o.nonfinite = MN_NONFINITE_UNCHECKED;
    setenv("MEGANEURA_TRACE", path, 1);
    mn_status st = mn_session_create(&s, g, &o);
    unsetenv("MEGANEURA_TRACE");
    if (st != MN_OK) {
        die("session", mn_session_error(s));
        goto done;
    }
    for (int r = 0; r < warmup + runs; r++)
        if (mn_session_step(s) != MN_OK) {
            die("step", mn_session_error(s));
            goto done;
        }
    mn_session_destroy(s); /* closes the trace */
    s = NULL;
    if (be == MN_BACKEND_VULKAN) {
        /* executes count from 1 at the first step */
        const int got = read_trace(path, (unsigned long long)warmup + 1, runs, us, disp);
        if (got < runs) {
            die("trace", got < 0 ? "cannot read the MEGANEURA_TRACE file" : "fewer executes than runs");
            goto done;
        }
        for (int k = 0; k < K_KINDS; k++) {
            for (int r = 0; r < runs; r++) col[r] = us[r][k];
            med[k] = median(col, runs);
        }
    } else {
        for (int k = 0; k < K_KINDS; k++) med[k] = 0;
    }
    rc = 0;
done:
    remove(path);
    mn_session_destroy(s);
    mn_graph_destroy(g);
    free(us);
    free(col);
    return rc;
}

static const char *env_or(const char *name, const char *dflt) {
    const char *e = getenv(name);
    return e && *e ? e : dflt;
}

static bool wanted(const char *only, int i) {
    if (!only) return true;
    for (const char *p = only; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) return false;
        if (v == i) return true;
        p = *end == ',' ? end + 1 : end;
    }
    return false;
}

int main(int argc, char **argv) {
    mn_backend_kind be = MN_BACKEND_VULKAN;
    int runs = 10, warmup = 3, batch = 32;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend") && v) be = !strcmp(v, "cpu") ? MN_BACKEND_CPU : MN_BACKEND_VULKAN, i++;
        else if (!strcmp(a, "--runs") && v) runs = atoi(v), i++;
        else if (!strcmp(a, "--warmup") && v) warmup = atoi(v), i++;
        else if (!strcmp(a, "--batch") && v) batch = atoi(v), i++;
        else if (!strcmp(a, "--only") && v) only = v, i++;
        else {
            fprintf(stderr, "usage: meganeura_bench_conv [--batch N] [--runs R] [--warmup W] [--only I,J,..] "
                            "[--backend vulkan|cpu]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 1000 || warmup < 0 || batch < 1 || batch > 4096)
        return die("arguments", "want 1 <= runs <= 1000, warmup >= 0, 1 <= batch <= 4096");
    int rc = 0;
    double tot[K_KINDS] = {0}, flop_tot = 0;
    for (int i = 0; i < NSHAPES; i++) {
        if (!wanted(only, i)) continue;
        const cshape *c = &shapes[i];
        double med[K_KINDS];
        int disp = 0;
        if (measure(c, batch, be, runs, warmup, med, &disp)) {
            rc = 1;
            continue;
        }
        const int oh = (c->H + 2 * (c->k / 2) - c->k) / c->s + 1;
        const double fl = 2.0 * batch * c->O * oh * oh * (double)c->C * c->k * c->k;
        printf("{\"bench\": \"conv\", \"backend\": \"%s\", \"i\": %d, \"C\": %d, \"H\": %d, \"O\": %d, \"k\": %d, "
               "\"stride\": %d, \"batch\": %d, \"count\": %d, \"gflop\": %.4f, \"fwd_us\": %.2f, \"dgrad_us\": %.2f, "
               "\"wgrad_us\": %.2f, \"other_us\": %.2f, \"fwd_tflops\": %.2f, \"dgrad_tflops\": %.2f, "
               "\"wgrad_tflops\": %.2f, \"kernels\": %d, \"tile\": \"%s\", \"conv_ct\": \"%s\", "
               "\"wgrad_split\": \"%s\"}\n",
               be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", i, c->C, c->H, c->O, c->k, c->s, batch, c->count, 1e-9 * fl,
               med[K_FWD], med[K_DGRAD], med[K_WGRAD], med[K_OTHER], med[K_FWD] > 0 ? 1e-6 * fl / med[K_FWD] : 0,
               med[K_DGRAD] > 0 ? 1e-6 * fl / med[K_DGRAD] : 0, med[K_WGRAD] > 0 ? 1e-6 * fl / med[K_WGRAD] : 0,
               disp, env_or("MEGANEURA_VK_GEMM_TILE", "auto"), env_or("MEGANEURA_VK_CONV_CT", "1"),
               env_or("MEGANEURA_WGRAD_SPLIT", "1"));
        fflush(stdout);
        tot[K_FWD] += c->count * med[K_FWD];
        tot[K_DGRAD] += i == 0 ? 0 : c->count * med[K_DGRAD]; /* the stem's dx is not needed */
        tot[K_WGRAD] += c->count * med[K_WGRAD];
        flop_tot += c->count * fl * (i == 0 ? 2 : 3);
    }
    const double all = tot[K_FWD] + tot[K_DGRAD] + tot[K_WGRAD];
    printf("{\"bench\": \"conv_total\", \"batch\": %d, \"only\": \"%s\", \"fwd_ms\": %.3f, \"dgrad_ms\": %.3f, "
           "\"wgrad_ms\": %.3f, \"ms\": %.3f, \"tflops\": %.2f, \"tile\": \"%s\", \"conv_ct\": \"%s\"}\n",
           batch, only ? only : "all", 1e-3 * tot[K_FWD], 1e-3 * tot[K_DGRAD], 1e-3 * tot[K_WGRAD], 1e-3 * all,
           all > 0 ? 1e-6 * flop_tot / all : 0, env_or("MEGANEURA_VK_GEMM_TILE", "auto"),
           env_or("MEGANEURA_VK_CONV_CT", "1"));
    return rc;
}
