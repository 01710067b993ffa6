/* bench_models.c - the model workloads of meganeura_bench (issue 11): the
 * paper's five at its shapes plus larger training batches, built with the
 * builders of include/meganeura_models.h, strict f32, random weights and
 * inputs. For each: session build time (cold kernel cache, then warm) and
 * the distinct kernels of the training session (train_kernels), the
 * median and minimum training step (inputs uploaded, forward, backward,
 * optimizer) and inference run (inputs uploaded, forward) over --runs
 * after --warmup, and the peak memory of both sessions. One JSON line each;
 * bench/torch_workloads.py times the same workloads in PyTorch (eager and
 * compiled) under the same names.
 *
 * Does not: check results (tests/test_workloads.c does), time SmolLM2
 * (meganeura_bench_lm does: `--list` says how), time decoding.
 */
#include <meganeura_models.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_cache.h"
#include "bench_models.h"

typedef enum wkind { W_RESNET, W_UNET_SIMPLE, W_UNET_COND, W_VLA, W_WHISPER } wkind;

typedef struct mworkload {
    const char *name;
    wkind kind;
    int64_t batch;
    const char *what;
} mworkload;

static const mworkload models[] = {
    {"resnet50_b1", W_RESNET, 1, "ResNet-50, 3x224x224, batch 1 (latency); SGD momentum 0.9, cross-entropy"},
    {"resnet50_b4", W_RESNET, 4, "ResNet-50, batch 4 (the paper's)"},
    {"resnet50_b32", W_RESNET, 32, "ResNet-50, batch 32 (a training batch)"},
    {"sd_unet_small_b2", W_UNET_SIMPLE, 2, "the paper's simplified U-Net, base 64, 4x32x32, batch 2; Adam, noise MSE"},
    {"sd_unet_small_b16", W_UNET_SIMPLE, 16, "the same, batch 16"},
    {"sd_unet_cond_b2", W_UNET_COND, 2, "the conditioned U-Net (time embedding, attention, 77x768 context), batch 2"},
    {"smolvla_chunk50_b1", W_VLA, 1, "SmolVLA action expert, chunk 50, VLM 16, batch 1; AdamW, flow matching"},
    {"smolvla_chunk50_b8", W_VLA, 8, "the same, batch 8"},
    {"whisper_tiny_enc_b1", W_WHISPER, 1, "Whisper-tiny encoder, 80 x 3000, batch 1; Adam, mean square of the last hidden state"},
    {"whisper_tiny_enc_b8", W_WHISPER, 8, "the same, batch 8"},
};

void bench_models_list(FILE *f) {
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        fprintf(f, "%-22s %s\n", models[i].name, models[i].what);
    fprintf(f, "%-22s %s\n", "smollm2_135m_b1_s128",
            "SmolLM2-135M, 1 x 128 tokens: meganeura_bench_lm train --config "
            "tests/fixtures/configs/smollm2-135m.json --batch 1 --seq 128");
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, const char *msg) {
    fprintf(stderr, "bench: %s: %s\n", what, msg ? msg : "(no message)");
    exit(1);
}

typedef struct input {
    char name[32];
    void *data;
    size_t bytes;
} input;

typedef struct built {
    mn_graph *g;
    mn_model *m;
    input in[6];
    int nin;
} built;

static void add_f32(built *b, const char *name, size_t n, float lo, float hi, uint64_t seed) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = lo + (hi - lo) * (float)((seed >> 40) & 0xffffff) / 16777216.0f;
    }
    input *p = &b->in[b->nin++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->data = v;
    p->bytes = n * sizeof *v;
}

static built build(const mworkload *w, bool train) {
    built b;
    memset(&b, 0, sizeof b);
    if (mn_graph_create(&b.g)) die("graph", "out of memory");
    mn_status st = MN_OK;
    const int64_t B = w->batch;
    if (w->kind == W_RESNET) {
        mn_resnet_config c;
        mn_resnet_config_preset(&c, 50, NULL, 0);
        mn_resnet_options o = mn_resnet_default_options();
        o.kind = train ? MN_RESNET_TRAIN : MN_RESNET_FOLDED;
        o.batch = B;
        st = mn_resnet_create(&b.m, b.g, &c, &o);
        add_f32(&b, "pixels", (size_t)(B * 3 * 224 * 224), -2, 2, 1);
        if (train) {
            int32_t *lab = malloc((size_t)B * sizeof *lab);
            for (int64_t i = 0; i < B; i++) lab[i] = (int32_t)(i * 37 % 1000);
            b.in[b.nin++] = (input){"labels", lab, (size_t)B * sizeof *lab};
        }
    } else if (w->kind == W_UNET_SIMPLE || w->kind == W_UNET_COND) {
        mn_unet_config c = w->kind == W_UNET_COND ? mn_unet_config_conditioned(64) : mn_unet_config_simple(64);
        mn_unet_options o = mn_unet_default_options();
        o.kind = train ? MN_UNET_TRAIN : MN_UNET_INFER;
        o.batch = B;
        st = mn_unet_create(&b.m, b.g, &c, &o);
        add_f32(&b, "noisy", (size_t)(B * 4 * 32 * 32), -2, 2, 2);
        if (train) add_f32(&b, "noise", (size_t)(B * 4 * 32 * 32), -2, 2, 3);
        if (w->kind == W_UNET_COND) {
            add_f32(&b, "timesteps", (size_t)B, 0, 999, 4);
            add_f32(&b, "context", (size_t)(B * 77 * 768), -1, 1, 5);
        }
    } else if (w->kind == W_WHISPER) {
        mn_whisper_config c = mn_whisper_config_tiny();
        mn_whisper_options o = mn_whisper_default_options();
        o.kind = MN_WHISPER_ENCODER;
        o.batch = B;
        st = mn_whisper_create(&b.m, b.g, &c, &o);
        add_f32(&b, "input_features", (size_t)(B * 80 * 3000), -1, 1, 11);
    } else {
        mn_vla_config c = mn_vla_config_smolvla();
        mn_vla_options o = mn_vla_default_options();
        o.kind = train ? MN_VLA_TRAIN : MN_VLA_INFER;
        o.batch = B;
        st = mn_vla_create(&b.m, b.g, &c, &o);
        const size_t n = (size_t)(B * c.chunk * c.action_dim);
        if (train) {
            add_f32(&b, "actions", n, -1, 1, 6);
            add_f32(&b, "noise", n, -1, 1, 7);
        } else add_f32(&b, "x", n, -1, 1, 8);
        add_f32(&b, "timesteps", (size_t)B, 0, 1, 9);
        add_f32(&b, "vlm", (size_t)(B * c.vlm_len * c.kv_dim), -1, 1, 10);
    }
    if (st) die(w->name, mn_model_error(b.m));
    return b;
}

static void unbuild(built *b) {
    for (int i = 0; i < b->nin; i++) free(b->in[i].data);
    mn_model_destroy(b->m);
    mn_graph_destroy(b->g);
}

static mn_session *open_session(const built *b, const mworkload *w, mn_backend_kind be, mn_device *dev, bool train,
                                mn_nonfinite nf, mn_precision prec, double *ms) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = dev;
    o.mode = train ? MN_MODE_TRAINING : MN_MODE_INFERENCE;
    o.nonfinite = nf;
    o.precision = prec;
    if (train && prec == MN_PRECISION_FAST_F16) o.loss_scale.init = 65536.0f; /* like torch.amp.GradScaler */
    if (w->kind == W_RESNET) {
        o.optim = mn_optimizer_default(MN_OPTIM_SGD);
        o.optim.lr = 1e-3f;
        o.optim.momentum = 0.9f;
    } else if (w->kind == W_VLA) {
        o.optim = mn_optimizer_default(MN_OPTIM_ADAMW);
        o.optim.lr = 1e-4f;
        o.optim.weight_decay = 0.1f;
    } else o.optim = mn_optimizer_default(MN_OPTIM_ADAM);
    mn_session *s = NULL;
    const double t0 = now_ms();
    if (mn_session_create(&s, b->g, &o)) die("session", mn_session_error(s));
    *ms = now_ms() - t0;
    return s;
}

static void time_it(mn_session *s, const built *b, bool train, int warmup, int runs, double *med, double *mn) {
    double *t = malloc((size_t)runs * sizeof *t);
    for (int i = 0; i < warmup + runs; i++) {
        const double t0 = now_ms();
        for (int k = 0; k < b->nin; k++)
            if (mn_session_set_input(s, b->in[k].name, b->in[k].data, b->in[k].bytes)) die("input", mn_session_error(s));
        mn_status st = train ? mn_session_step(s) : mn_session_run(s);
        if (st && st != MN_E_NONFINITE) die(train ? "step" : "run", mn_session_error(s));
        if (i >= warmup) t[i - warmup] = now_ms() - t0;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_d);
    *med = t[runs / 2];
    *mn = t[0];
    free(t);
}

static void bench_one(const mworkload *w, mn_backend_kind be, int warmup, int runs, mn_nonfinite nf, mn_precision prec) {
    double t0 = now_ms();
    mn_device *dev = NULL;
    if (mn_device_open(&dev, be)) die("device", mn_device_error(dev));
    const double dev_ms = now_ms() - t0;
    bench_cache cache;
    if (!bench_cache_enter(&cache)) die("mkdtemp", "failed");
    built tr = build(w, true), inf = build(w, false);
    double cold, warm, ibuild, tmed, tmin, imed, imin;
    mn_session *s = open_session(&tr, w, be, dev, true, nf, prec, &cold);
    mn_kernel_stats ks = {0};
    mn_session_kernel_stats(s, &ks); /* the cold build: every distinct kernel compiled */
    mn_session_destroy(s);
    s = open_session(&tr, w, be, dev, true, nf, prec, &warm);
    time_it(s, &tr, true, warmup, runs, &tmed, &tmin);
    size_t tpeak = 0, tsum = 0, ipeak = 0, isum = 0;
    mn_session_memory(s, &tpeak, &tsum);
    mn_session_destroy(s);
    mn_session *si = open_session(&inf, w, be, dev, false, nf, prec, &ibuild);
    time_it(si, &inf, false, warmup, runs, &imed, &imin);
    mn_session_memory(si, &ipeak, &isum);
    mn_session_destroy(si);
    static const char *const nfn[] = {"skip", "apply", "unchecked"};
    printf("{\"workload\":\"%s\",\"backend\":\"%s\",\"precision\":\"%s\",\"nonfinite\":\"%s\",\"params\":%lld,\"device_open_ms\":%.2f,"
           "\"build_cold_ms\":%.2f,\"build_warm_ms\":%.2f,\"build_infer_ms\":%.2f,\"train_ms_median\":%.4f,"
           "\"train_ms_min\":%.4f,\"infer_ms_median\":%.4f,\"infer_ms_min\":%.4f,\"train_peak_bytes\":%zu,"
           "\"infer_peak_bytes\":%zu,\"train_kernels\":%d}\n",
           w->name, be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", mn_precision_name(prec), nfn[nf], (long long)mn_model_numel(tr.m), dev_ms, cold,
           warm, ibuild, tmed, tmin, imed, imin, tpeak, ipeak, ks.compiled + ks.cached + ks.bundled);
    fflush(stdout);
    unbuild(&tr);
    unbuild(&inf);
    mn_device_close(dev);
    bench_cache_leave(&cache);
}

bool bench_name_matches(const char *name, const char *only) {
    if (!only) return true;
    for (const char *p = only; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        for (const char *h = name; len && *h; h++)
            if (!strncmp(h, p, len)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

int bench_models_run(const char *only, bool all, mn_backend_kind be, int warmup, int runs, mn_nonfinite nf,
                     mn_precision prec) {
    int n = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (only ? bench_name_matches(models[i].name, only) : all) {
            bench_one(&models[i], be, warmup, runs, nf, prec);
            n++;
        }
    return n;
}
