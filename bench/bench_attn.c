/* bench_attn.c - attention micro-benchmark at SmolLM2-135M's shapes (9 query
 * heads on 3 kv heads, head dim 64): the forward pass, forward + backward
 * (every attention kernel: forward, row log-sum-exp, the backward's prep,
 * dq, dk/dv) and decoding steps (one query row over a KV cache). One JSON
 * line per measurement on stdout; bench/attn_torch.py measures PyTorch's
 * scaled_dot_product_attention at the same shapes in the same run.
 *
 *   meganeura_bench_attn [--backend vulkan|cpu] [--runs R] [--warmup W]
 *                        [--layers L] [--only CASE,...]
 *                        [--precision strict|bf16|f16]
 *
 * Cases: fwd and train at b1t128, b8t512, b1t2048 (causal, Tq = Tk = T),
 * decode at dec512 and dec2048 (one row over that many cached keys, the
 * position given as an input, as the Llama builder's decoding graph does).
 * Each graph chains L attention layers (layer l's queries are layer l-1's
 * output; every layer has its own k and v parameters), so one run times L
 * calls and the submission's fixed cost is shared; "ms" is per layer. train
 * is a training step (plain SGD, non-finite check off) of sum(output): the
 * forward, the backward and L small SGD updates of k and v.
 *
 * FLOPs count only the (query, key) pairs the mask keeps (causal: T(T+1)/2
 * per head): 4 D per pair forward (QK^T and PV), 10 D backward (the five
 * products of FlashAttention-2's backward), so train counts 14 D; our
 * kernels do more (the backward recomputes the scores in the lse, dq and
 * dk/dv kernels), which the count leaves out on purpose. "bwd_ms" is the
 * train time less the forward time of the same shape in the same run.
 * --precision: the session's (default strict; bf16 / f16: the fast
 * contract, on a device with cooperative matrices the tensor-core kernel,
 * attention_coopmat.glsl). The tuning knobs in effect (MEGANEURA_ATTN,
 * MEGANEURA_ATTN_COOPMAT, MEGANEURA_ATTN_TILE,
 * MEGANEURA_ATTN_RUN, MEGANEURA_ATTN_PREFETCH; docs/PERF.md) are echoed in
 * each line; MEGANEURA_PROFILE=1 adds the per-kernel GPU times on stderr.
 *
 * Does not: check results (tests/test_vk_loop_limit.c does, at these
 * shapes, against the CPU).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meganeura.h"

#define HQ 9
#define HKV 3
#define HD 64

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

static int die(const char *what, const char *why) {
    fprintf(stderr, "meganeura_bench_attn: %s: %s\n", what, why ? why : "(no message)");
    return 1;
}

typedef struct bcase {
    const char *name;
    int64_t B, Tq, Tk;
    bool decode; /* one query row over Tk cached keys, position input */
} bcase;

static const bcase cases[] = {
    {"b1t128", 1, 128, 128, false}, {"b8t512", 8, 512, 512, false}, {"b1t2048", 1, 2048, 2048, false},
    {"dec512", 1, 1, 512, true},    {"dec2048", 1, 1, 2048, true},
};

/* (query, key) pairs the causal mask keeps, over all heads and batches */
static double pairs_of(const bcase *c) {
    const double per = c->decode ? (double)c->Tk : 0.5 * (double)c->Tq * (double)(c->Tq + 1);
    return per * (double)c->B * HQ;
}

static const char *env_or(const char *name, const char *dflt) {
    const char *e = getenv(name);
    return e && *e ? e : dflt;
}

/* The JSON fields of the knobs in effect. */
static void print_knobs(void) {
    printf("\"attn\": \"%s\", \"attn_coopmat\": \"%s\", \"attn_tile\": \"%s\", \"attn_run\": \"%s\", "
           "\"attn_prefetch\": \"%s\"",
           env_or("MEGANEURA_ATTN", "auto"), env_or("MEGANEURA_ATTN_COOPMAT", ""), env_or("MEGANEURA_ATTN_TILE", ""),
           env_or("MEGANEURA_ATTN_RUN", "4"),
           env_or("MEGANEURA_ATTN_PREFETCH", "default"));
}

/* L chained causal attention layers; loss = sum of the last output. */
static mn_status build(mn_graph *g, const bcase *c, int L) {
    mn_init u = {MN_INIT_UNIFORM, -1, 1};
    mn_tensor y, pos = MN_NONE, loss;
    mn_status st = mn_graph_param(g, &y, "q", 4, (const int64_t[]){c->B, HQ, c->Tq, HD}, u);
    if (!st && c->decode) st = mn_graph_input(g, &pos, "pos", MN_I32, 1, (const int64_t[]){1});
    for (int l = 0; l < L && !st; l++) {
        char nk[32], nv[32];
        snprintf(nk, sizeof nk, "k%d", l);
        snprintf(nv, sizeof nv, "v%d", l);
        mn_tensor k, v;
        const int64_t ks[4] = {c->B, HKV, c->Tk, HD};
        mn_attention_params p = {true, 0, 0};
        st = mn_graph_param(g, &k, nk, 4, ks, u);
        if (!st) st = mn_graph_param(g, &v, nv, 4, ks, u);
        if (!st) st = mn_attention(g, &y, y, k, v, pos, &p);
    }
    if (!st) st = mn_graph_output(g, y, "y");
    if (!st) st = mn_sum(g, &loss, y, MN_ALL_AXES, false);
    if (!st) st = mn_graph_loss(g, loss);
    return st;
}

/* Median ms per layer of `runs` runs after `warmup`; -1 on failure. */
static mn_precision g_precision = MN_PRECISION_STRICT;

static double measure(const bcase *c, mn_backend_kind be, bool train, int L, int runs, int warmup, double *build_s) {
    mn_graph *g = NULL;
    mn_session *s = NULL;
    double *ms = malloc((size_t)runs * sizeof *ms), res = -1;
    if (!ms || mn_graph_create(&g) != MN_OK) {
        die(c->name, "out of memory");
        goto done;
    }
    if (build(g, c, L) != MN_OK) {
        die(c->name, mn_graph_error(g));
        goto done;
    }
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.mode = train ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
    o.optim = mn_optimizer_default(MN_OPTIM_SGD);
    o.optim.lr = 1e-6f;
    o.nonfinite = MN_NONFINITE_UNCHECKED;
    o.precision = g_precision;
    const double t0 = now_s();
    if (mn_session_create(&s, g, &o) != MN_OK) {
        die(c->name, mn_session_error(s));
        goto done;
    }
    *build_s = now_s() - t0;
    const int32_t pos = (int32_t)(c->Tk - 1);
    for (int r = 0; r < warmup + runs; r++) {
        const double t1 = now_s();
        mn_status st = c->decode ? mn_session_set_input(s, "pos", &pos, sizeof pos) : MN_OK;
        if (!st) st = train ? mn_session_step(s) : mn_session_run(s);
        if (st) {
            die(c->name, mn_session_error(s));
            goto done;
        }
        if (r >= warmup) ms[r - warmup] = 1e3 * (now_s() - t1) / L;
    }
    res = median(ms, runs);
done:
    mn_session_destroy(s);
    mn_graph_destroy(g);
    free(ms);
    return res;
}

static void print_line(const bcase *c, const char *what, mn_backend_kind be, int L, int runs, double ms,
                       double build_s, double flops, double fwd_ms) {
    printf("{\"bench\": \"attn\", \"impl\": \"meganeura\", \"backend\": \"%s\", \"case\": \"%s\", \"mode\": \"%s\", "
           "\"B\": %" PRId64 ", \"Hq\": %d, \"Hkv\": %d, \"Tq\": %" PRId64 ", \"Tk\": %" PRId64
           ", \"D\": %d, \"causal\": true, \"layers\": %d, \"runs\": %d, \"ms\": %.4f, \"gflop\": %.4f, "
           "\"tflops\": %.3f, \"build_s\": %.3f, \"precision\": \"%s\", ",
           be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", c->name, what, c->B, HQ, HKV, c->Tq, c->Tk, HD, L, runs, ms,
           1e-9 * flops, ms > 0 ? 1e-9 * flops / ms : 0.0, build_s,
           g_precision == MN_PRECISION_FAST_BF16 ? "bf16" : g_precision == MN_PRECISION_FAST_F16 ? "f16" : "strict");
    if (fwd_ms > 0)
        printf("\"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"bwd_over_fwd\": %.3f, ", fwd_ms, ms - fwd_ms,
               (ms - fwd_ms) / fwd_ms);
    print_knobs();
    printf("}\n");
    fflush(stdout);
}

static bool wanted(const char *only, const char *name) {
    if (!only) return true;
    const size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)) != NULL; p += n)
        if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
    return false;
}

int main(int argc, char **argv) {
    mn_backend_kind be = MN_BACKEND_VULKAN;
    int runs = 20, warmup = 5, L = 8;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--backend") == 0 && v) be = strcmp(v, "cpu") == 0 ? MN_BACKEND_CPU : MN_BACKEND_VULKAN, i++;
        else if (strcmp(a, "--runs") == 0 && v) runs = atoi(v), i++;
        else if (strcmp(a, "--warmup") == 0 && v) warmup = atoi(v), i++;
        else if (strcmp(a, "--layers") == 0 && v) L = atoi(v), i++;
        else if (strcmp(a, "--only") == 0 && v) only = v, i++;
        else if (strcmp(a, "--precision") == 0 && v && (!strcmp(v, "strict") || !strcmp(v, "bf16") || !strcmp(v, "f16"))) {
            g_precision = !strcmp(v, "bf16") ? MN_PRECISION_FAST_BF16
                          : !strcmp(v, "f16") ? MN_PRECISION_FAST_F16
                                              : MN_PRECISION_STRICT;
            i++;
        } else {
            fprintf(stderr,
                    "usage: meganeura_bench_attn [--backend vulkan|cpu] [--runs R] [--warmup W] [--layers L] "
                    "[--only b1t128,b8t512,b1t2048,dec512,dec2048] [--precision strict|bf16|f16]\n");
            return 2;
        }
    }
    if (runs < 1 || warmup < 0 || L < 1 || L > 64) return die("arguments", "want runs >= 1, warmup >= 0, 1 <= layers <= 64");
    int rc = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bcase *c = &cases[i];
        if (!wanted(only, c->name)) continue;
        const double fl = 4.0 * HD * pairs_of(c);
        double bs = 0;
        const double fwd = measure(c, be, false, L, runs, warmup, &bs);
        if (fwd < 0) {
            rc = 1;
            continue;
        }
        print_line(c, c->decode ? "decode" : "fwd", be, L, runs, fwd, bs, fl, 0);
        if (c->decode) continue;
        const double tr = measure(c, be, true, L, runs, warmup, &bs);
        if (tr < 0) {
            rc = 1;
            continue;
        }
        print_line(c, "fwd_bwd", be, L, runs, tr, bs, 3.5 * fl, fwd);
    }
    return rc;
}
