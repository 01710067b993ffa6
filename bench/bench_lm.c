/* bench_lm.c - language-model benchmark: a Llama-family training step from a
 * config.json (random weights, random tokens, AdamW) and inference from a
 * Hugging Face folder (prefill of N tokens in one run, one-token decoding
 * over the KV cache, a batch-1 forward pass). One JSON line per measurement
 * on stdout; PyTorch's numbers come from the same run's script
 * (bench/lm_torch.py), so the two are compared on the same GPU.
 *
 *   meganeura_bench_lm train --config FILE [--batch B] [--seq T] [--steps N]
 *                            [--warmup W] [--backend cpu|vulkan] [--precision strict|bf16|f16]
 *   meganeura_bench_lm infer --model DIR [--prefill N] [--decode M] [--forward T]
 *                            [--runs R] [--backend cpu|vulkan] [--precision strict|bf16|f16]
 *
 * --precision: mn_session_options.precision (the fast contract on matrix
 * products; default strict; f16 training scales the loss from 65536 as
 * torch.amp.GradScaler does); the train line reports it.
 *
 * Does not: load real text (tokens are uniform random ids) or check
 * correctness (the gates are tests/test_llama_hf.c with the fixtures of
 * tests/fixtures/gen_llama.py).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meganeura.h"
#include "meganeura_models.h"

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

static uint64_t rng = 0x243f6a8885a308d3ull;
static int32_t rand_token(int64_t V) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int32_t)(rng % (uint64_t)V);
}

static int die(const char *what, const char *why) {
    fprintf(stderr, "meganeura_bench_lm: %s: %s\n", what, why ? why : "(no message)");
    return 1;
}

static mn_precision g_precision = MN_PRECISION_STRICT;

static mn_session *make_session(const mn_graph *g, mn_backend_kind be, mn_mode mode, const mn_optimizer *opt,
                                double *build_s) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.precision = g_precision;
    o.mode = mode;
    /* f16 training scales the loss, as torch.amp.GradScaler(init_scale=65536) */
    if (mode == MN_MODE_TRAINING && g_precision == MN_PRECISION_FAST_F16) o.loss_scale.init = 65536.0f;
    if (opt) o.optim = *opt;
    mn_session *s = NULL;
    const double t0 = now_s();
    if (mn_session_create(&s, g, &o) != MN_OK) {
        die("session", mn_session_error(s));
        mn_session_destroy(s);
        return NULL;
    }
    *build_s = now_s() - t0;
    return s;
}

/* Dispatching kernels per step, from the session's kernel plan dump. */
static long kernel_count(const mn_session *s) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    long n = -1;
    if (f && mn_session_dump(s, "kernels", f) == MN_OK) {
        fflush(f);
        if (buf && sscanf(buf, "kernels: %ld", &n) != 1) n = -1;
    }
    if (f) fclose(f);
    free(buf);
    return n;
}

static void print_memory(const mn_session *s) {
    size_t peak = 0, sum = 0, ar[MN_MEMORY_ARENAS] = {0};
    mn_session_memory(s, &peak, &sum);
    mn_session_memory_arenas(s, ar);
    printf(", \"kernels\": %ld, \"peak_bytes\": %zu, \"sum_bytes\": %zu, \"arena_bytes\": [", kernel_count(s), peak, sum);
    for (int i = 0; i < MN_MEMORY_ARENAS; i++) printf("%s%zu", i ? ", " : "", ar[i]);
    printf("]");
}

static int bench_train(const char *config, mn_backend_kind be, int64_t B, int64_t T, int steps, int warmup) {
    char err[512];
    mn_llama_config cfg;
    if (mn_llama_config_load(&cfg, config, err, sizeof err) != MN_OK) return die(config, err);
    mn_llama_options lo = mn_llama_default_options();
    lo.kind = MN_LLAMA_TRAIN;
    lo.batch = B;
    lo.seq_len = T;
    mn_graph *g = NULL;
    mn_llama *m = NULL;
    mn_session *s = NULL;
    int rc = 1;
    int32_t *in = malloc((size_t)(B * T) * sizeof *in), *tg = malloc((size_t)(B * T) * sizeof *tg);
    double *ms = malloc((size_t)(steps > 0 ? steps : 1) * sizeof *ms);
    float first = NAN, last = NAN;
    if (!in || !tg || !ms || mn_graph_create(&g) != MN_OK) {
        die("train", "out of memory");
        goto done;
    }
    if (mn_llama_create(&m, g, &cfg, &lo) != MN_OK) {
        die("model", mn_llama_error(m));
        goto done;
    }
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAMW);
    opt.lr = 1e-4f;
    double build_s = 0;
    if (!(s = make_session(g, be, MN_MODE_TRAINING, &opt, &build_s))) goto done;
    for (int k = 0; k < warmup + steps; k++) {
        for (int64_t i = 0; i < B * T; i++) in[i] = rand_token(cfg.vocab_size);
        for (int64_t i = 0; i < B * T; i++) tg[i] = rand_token(cfg.vocab_size);
        const double t0 = now_s();
        mn_status st = mn_session_set_input(s, "input_ids", in, (size_t)(B * T) * sizeof *in);
        if (!st) st = mn_session_set_input(s, "targets", tg, (size_t)(B * T) * sizeof *tg);
        if (!st) st = mn_session_step(s);
        float loss = NAN;
        if (!st) st = mn_session_loss(s, &loss);
        if (st && st != MN_E_NONFINITE) {
            die("step", mn_session_error(s));
            goto done;
        }
        if (k >= warmup) ms[k - warmup] = 1e3 * (now_s() - t0);
        if (k == 0) first = loss;
        last = loss;
        fprintf(stderr, "\rstep %d/%d loss %.4f", k + 1, warmup + steps, (double)loss);
    }
    fputc('\n', stderr);
    const double med = steps > 0 ? median(ms, steps) : 0;
    printf("{\"bench\": \"lm_train\", \"config\": \"%s\", \"backend\": \"%s\", \"precision\": \"%s\", \"params\": %" PRId64
           ", \"batch\": %" PRId64 ", \"seq\": %" PRId64 ", \"steps\": %d, \"build_s\": %.3f, \"step_ms\": %.3f"
           ", \"tokens_per_s\": %.1f, \"loss_first\": %.5f, \"loss_last\": %.5f",
           config, be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", mn_precision_name(g_precision), mn_llama_numel(m), B,
           T, steps, build_s, med,
           med > 0 ? 1e3 * (double)(B * T) / med : 0.0, (double)first, (double)last);
    print_memory(s);
    printf("}\n");
    fflush(stdout);
    rc = 0;
done:
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
    free(in);
    free(tg);
    free(ms);
    return rc;
}

/* A DECODE session over dir's weights with seq_len T (prefill runs) and the
 * one-token branch. */
static int open_decode(const char *dir, mn_backend_kind be, int64_t T, int64_t max_seq, mn_graph **g, mn_llama **m,
                       mn_session **s, mn_llama_config *cfg, double *build_s) {
    char err[512], path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (mn_llama_config_load(cfg, path, err, sizeof err) != MN_OK) return die(path, err);
    mn_llama_options lo = mn_llama_default_options();
    lo.kind = T > 0 ? MN_LLAMA_DECODE : MN_LLAMA_FORWARD;
    lo.batch = 1;
    lo.seq_len = T > 0 ? T : -T;
    lo.max_seq = max_seq;
    lo.decode_step = T > 1;
    if (mn_graph_create(g) != MN_OK) return die("graph", "out of memory");
    if (mn_llama_create(m, *g, cfg, &lo) != MN_OK) return die("model", mn_llama_error(*m));
    if (!(*s = make_session(*g, be, MN_MODE_INFERENCE, NULL, build_s))) return 1;
    mn_hf_checkpoint *ck = NULL;
    if (mn_hf_checkpoint_open(&ck, dir, err, sizeof err) != MN_OK) return die(dir, err);
    const int bad = mn_llama_load(*m, *s, ck, NULL) != MN_OK;
    mn_hf_checkpoint_close(ck);
    return bad ? die("loading", mn_llama_error(*m)) : 0;
}

static int bench_infer(const char *dir, mn_backend_kind be, int64_t P, int64_t D, int64_t F, int runs) {
    mn_graph *g = NULL;
    mn_llama *m = NULL;
    mn_session *s = NULL;
    mn_llama_config cfg;
    double build_s = 0;
    int rc = 1;
    double *pre = malloc((size_t)runs * sizeof *pre), *dec = malloc((size_t)runs * sizeof *dec);
    int32_t *toks = malloc((size_t)(P + D + F + 1) * sizeof *toks);
    float *lg = NULL;
    if (!pre || !dec || !toks) goto done;
    if (open_decode(dir, be, P, P + D, &g, &m, &s, &cfg, &build_s)) goto done;
    lg = malloc((size_t)(P > F ? P : F) * (size_t)cfg.vocab_size * sizeof *lg);
    if (!lg) goto done;
    for (int64_t i = 0; i < P + D + F + 1; i++) toks[i] = rand_token(cfg.vocab_size);
    /* run 0 warms up (pipelines, first use of the buffers) */
    for (int r = 0; r <= runs; r++) {
        double t0 = now_s();
        if (mn_llama_decode(m, s, toks, P, 0, lg) != MN_OK) {
            die("prefill", mn_llama_error(m));
            goto done;
        }
        double t1 = now_s();
        for (int64_t i = 0; i < D; i++)
            if (mn_llama_decode(m, s, toks + P + i, 1, P + i, lg) != MN_OK) {
                die("decode", mn_llama_error(m));
                goto done;
            }
        double t2 = now_s();
        if (r) {
            pre[r - 1] = 1e3 * (t1 - t0);
            dec[r - 1] = 1e3 * (t2 - t1);
        }
    }
    const double pm = median(pre, runs), dm = median(dec, runs);
    printf("{\"bench\": \"lm_infer\", \"model\": \"%s\", \"backend\": \"%s\", \"build_s\": %.3f, \"prefill_tokens\": %" PRId64
           ", \"prefill_ms\": %.3f, \"prefill_tokens_per_s\": %.1f, \"decode_tokens\": %" PRId64
           ", \"decode_ms_per_token\": %.4f, \"decode_tokens_per_s\": %.1f}\n",
           dir, be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", build_s, P, pm, 1e3 * (double)P / pm, D,
           dm / (double)D, 1e3 * (double)D / dm);
    fflush(stdout);
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
    s = NULL;
    m = NULL;
    g = NULL;
    if (F > 0) {
        /* a plain forward pass (no cache) of F tokens, batch 1 */
        if (open_decode(dir, be, -F, F, &g, &m, &s, &cfg, &build_s)) goto done;
        for (int r = 0; r <= runs; r++) {
            double t0 = now_s();
            /* timed like PyTorch's forward: the logits stay on the device
             * (read back once, untimed, after the last run) */
            mn_status st = mn_session_set_input(s, "input_ids", toks, (size_t)F * sizeof *toks);
            if (!st) st = mn_session_run(s);
            const double t1 = now_s();
            if (!st && r == runs) st = mn_session_output(s, "logits", lg, (size_t)(F * cfg.vocab_size) * sizeof *lg);
            if (st) {
                die("forward", mn_session_error(s));
                goto done;
            }
            if (r) pre[r - 1] = 1e3 * (t1 - t0);
        }
        const double fm = median(pre, runs);
        printf("{\"bench\": \"lm_forward\", \"model\": \"%s\", \"backend\": \"%s\", \"tokens\": %" PRId64
               ", \"forward_ms\": %.3f, \"kernels\": %ld}\n",
               dir, be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", F, fm, kernel_count(s));
    }
    rc = 0;
done:
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
    free(pre);
    free(dec);
    free(toks);
    free(lg);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: meganeura_bench_lm train --config FILE [--batch B] [--seq T] [--steps N] [--warmup W] "
                    "[--backend cpu|vulkan] [--precision strict|bf16|f16]\n"
                    "       meganeura_bench_lm infer --model DIR [--prefill N] [--decode M] [--forward T] [--runs R] "
                    "[--backend cpu|vulkan] [--precision strict|bf16|f16]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *config = NULL, *model = NULL;
    mn_backend_kind be = MN_BACKEND_VULKAN;
    long long B = 1, T = 128, steps = 10, warmup = 3, P = 512, D = 128, F = 0, runs = 5;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long *num = !strcmp(a, "--batch")     ? &B
                         : !strcmp(a, "--seq")     ? &T
                         : !strcmp(a, "--steps")   ? &steps
                         : !strcmp(a, "--warmup")  ? &warmup
                         : !strcmp(a, "--prefill") ? &P
                         : !strcmp(a, "--decode")  ? &D
                         : !strcmp(a, "--forward") ? &F
                         : !strcmp(a, "--runs")    ? &runs
                                                   : NULL;
        if (!v) return usage();
        if (num) {
            char *end;
            *num = strtoll(v, &end, 10);
            if (*end || *num < 0) return usage();
        } else if (!strcmp(a, "--config")) config = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--precision") && (!strcmp(v, "strict") || !strcmp(v, "bf16") || !strcmp(v, "f16")))
            g_precision = !strcmp(v, "bf16") ? MN_PRECISION_FAST_BF16
                          : !strcmp(v, "f16") ? MN_PRECISION_FAST_F16 : MN_PRECISION_STRICT;
        else if (!strcmp(a, "--backend") && (!strcmp(v, "cpu") || !strcmp(v, "vulkan")))
            be = !strcmp(v, "cpu") ? MN_BACKEND_CPU : MN_BACKEND_VULKAN;
        else return usage();
        i++;
    }
    if (!strcmp(argv[1], "train") && config && B > 0 && T > 0 && steps > 0)
        return bench_train(config, be, B, T, (int)steps, (int)warmup);
    if (!strcmp(argv[1], "infer") && model && P > 0 && D > 0 && runs > 0)
        return bench_infer(model, be, P, D, F, (int)runs);
    return usage();
}
