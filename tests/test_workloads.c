/* test_workloads.c - the ResNet, U-Net and action-expert builders against
 * PyTorch: the fixtures of tests/fixtures/gen_workloads.py
 * (tests/fixtures/workloads/<name>: config.json, model.safetensors,
 * reference.safetensors computed in float64 on the stored weights).
 *
 * For each fixture, on the CPU backend and on Vulkan (lavapipe in CI),
 * strict f32, with WORKLOADS.md's tiny-fixture thresholds:
 * - outputs and loss: rel L2 <= 1e-5;
 * - every parameter gradient: rel L2 <= 1e-4;
 * - ResNets: evaluation-mode logits (running statistics) from the
 *   evaluation and the folded graphs, and the running statistics after the
 *   training step; U-Net: 4 DDIM steps; action expert: 10 Euler steps
 *   (samples: rel L2 <= 1e-4, errors compound over the steps).
 * rel L2 = ||ours - ref|| / ||ref|| over the whole tensor.
 *
 * Without tests/fixtures/workloads it prints SKIP and exits 77 (run the
 * script on a machine with torch and copy its output there); once the
 * folder exists, a missing fixture inside it fails.
 */
#include <cjson/cJSON.h>
#include <sys/stat.h>

#include "models_util.h"

static const double TOL_FWD = 1e-5, TOL_BWD = 1e-4, TOL_SAMPLE = 1e-4;

typedef struct fixture {
    char dir[1200];
    cJSON *cfg;
    mn_safetensors *ref;
    mn_hf_checkpoint *ck;
} fixture;

static double num(const cJSON *c, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k);
    CHECK_MSG(cJSON_IsNumber(v) || cJSON_IsBool(v), "config.json: no number '%s'", k);
    return cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? 1 : 0) : cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static bool open_fixture(fixture *f, const char *root, const char *name) {
    char path[1400], err[1024], *text = NULL;
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "%s/%s", root, name);
    snprintf(path, sizeof path, "%s/config.json", f->dir);
    mn_status st = mn_read_file(&text, NULL, path, 1 << 20, err, sizeof err);
    CHECK_MSG(st == MN_OK, "fixture %s: %s", name, err);
    if (st) return false;
    f->cfg = cJSON_Parse(text);
    free(text);
    snprintf(path, sizeof path, "%s/reference.safetensors", f->dir);
    CHECK_OK(mn_safetensors_open(&f->ref, path, err, sizeof err), err);
    snprintf(path, sizeof path, "%s/model.safetensors", f->dir);
    CHECK_OK(mn_hf_checkpoint_open(&f->ck, path, err, sizeof err), err);
    return f->cfg && f->ref && f->ck;
}

static void close_fixture(fixture *f) {
    cJSON_Delete(f->cfg);
    mn_safetensors_close(f->ref);
    mn_hf_checkpoint_close(f->ck);
}

/* A reference tensor as f32 (malloc'd), its element count in *n. */
static float *ref_f32(fixture *f, const char *name, size_t *n) {
    mn_safetensors_tensor t;
    if (mn_safetensors_find(f->ref, name, &t) != MN_OK) {
        CHECK_MSG(0, "%s: the reference has no %s", f->dir, name);
        return NULL;
    }
    size_t k = 1;
    for (int d = 0; d < t.rank; d++) k *= (size_t)t.shape[d];
    float *v = malloc(k * sizeof *v);
    CHECK_OK(mn_safetensors_read_f32(f->ref, name, v, k), mn_safetensors_error(f->ref));
    *n = k;
    return v;
}

static void set_ref_input(fixture *f, mn_session *s, const char *name, bool i32) {
    mn_safetensors_tensor t;
    CHECK_OK(mn_safetensors_find(f->ref, name, &t), name);
    size_t k = 1;
    for (int d = 0; d < t.rank; d++) k *= (size_t)t.shape[d];
    void *v = malloc(k * 4);
    if (i32) CHECK_OK(mn_safetensors_read_i32(f->ref, name, v, k), mn_safetensors_error(f->ref));
    else CHECK_OK(mn_safetensors_read_f32(f->ref, name, v, k), mn_safetensors_error(f->ref));
    CHECK_OK(mn_session_set_input(s, name, v, k * 4), mn_session_error(s));
    free(v);
}

static void compare_output(fixture *f, mn_session *s, const char *out, const char *refname, const char *bn, double tol) {
    size_t n = 0;
    float *want = ref_f32(f, refname, &n);
    if (!want) return;
    float *got = malloc(n * sizeof *got);
    CHECK_OK(mn_session_output(s, out, got, n * sizeof *got), mn_session_error(s));
    const double e = lu_rel_l2(got, want, n);
    printf("  %s: %s rel L2 %.2e\n", bn, refname, e);
    CHECK_MSG(e <= tol, "%s (%s): %s rel L2 %.3g > %.3g", f->dir, bn, refname, e, tol);
    free(want), free(got);
}

/* Loads the fixture's weights into a gradient session of the model's
 * training graph, feeds the inputs, runs forward + backward and checks the
 * outputs, the loss and every gradient. */
static void check_train(fixture *f, const mn_graph *g, mn_model *m, mn_backend_kind be, mn_device *dev,
                        const char *const *inputs, const bool *is_i32, int nin, const char *const *outs, int nout) {
    const char *bn = be == MN_BACKEND_VULKAN ? "vulkan" : "cpu";
    mn_session *s = mu_grad_session(g, be, dev, false);
    if (!s) return;
    mn_status st = mn_model_load(m, s, f->ck, NULL);
    CHECK_OK(st, mn_model_error(m));
    for (int i = 0; i < nin && !st; i++) set_ref_input(f, s, inputs[i], is_i32[i]);
    if (!st) CHECK_OK(st = session_forward_backward(s), mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return;
    }
    for (int i = 0; i < nout; i++) compare_output(f, s, outs[i], outs[i], bn, TOL_FWD);
    size_t one = 0;
    float *want = ref_f32(f, "loss", &one), loss = NAN;
    CHECK_OK(mn_session_loss(s, &loss), mn_session_error(s));
    if (want) {
        const double e = fabs((double)loss - want[0]) / fabs((double)want[0]);
        CHECK_MSG(e <= TOL_FWD, "%s (%s): loss %.9g, PyTorch %.9g (rel %.3g)", f->dir, bn, loss, want[0], e);
    }
    free(want);
    const mn_hf_param *p = mn_model_params(m);
    double worst = 0;
    const char *worst_name = "";
    int checked = 0;
    for (int i = 0; i < mn_model_param_count(m); i++) {
        const int32_t gid = session_grad_of(s, p[i].tensor);
        if (strstr(p[i].name, "running_")) { /* statistics after the step: in place, like PyTorch's buffers */
            char nm[300];
            snprintf(nm, sizeof nm, "after.%s", p[i].name);
            size_t n = 0;
            float *r = ref_f32(f, nm, &n), *v = malloc(mu_numel(&p[i]) * sizeof *v);
            CHECK_OK(mn_session_get_param(s, p[i].name, v, mu_numel(&p[i])), mn_session_error(s));
            const double e = r ? lu_rel_l2(v, r, n) : INFINITY;
            CHECK_MSG(e <= TOL_FWD, "%s (%s): %s after the step: rel L2 %.3g", f->dir, bn, p[i].name, e);
            free(r), free(v);
            continue;
        }
        char nm[300];
        snprintf(nm, sizeof nm, "grad.%s", p[i].name);
        size_t n = 0;
        float *r = ref_f32(f, nm, &n);
        CHECK_MSG(gid != MN_NONE, "%s: no gradient for %s", f->dir, p[i].name);
        if (!r || gid == MN_NONE) {
            free(r);
            continue;
        }
        float *v = malloc(n * sizeof *v);
        CHECK_OK(session_read_f32(s, gid, v, n), mn_session_error(s));
        const double e = lu_rel_l2(v, r, n);
        CHECK_MSG(e <= TOL_BWD, "%s (%s): gradient of %s: rel L2 %.3g > %.3g", f->dir, bn, p[i].name, e, TOL_BWD);
        if (e > worst) worst = e, worst_name = p[i].name;
        checked++;
        free(r), free(v);
    }
    printf("  %s: loss %.9g, %d gradients, worst rel L2 %.2e (%s)\n", bn, loss, checked, worst, worst_name);
    mn_session_destroy(s);
}

/* ---- per model -------------------------------------------------------------------------- */

static void check_resnet(fixture *f, mn_device *dev) {
    const cJSON *c = f->cfg, *layers = cJSON_GetObjectItemCaseSensitive(c, "layers"),
                *block = cJSON_GetObjectItemCaseSensitive(c, "block");
    mn_resnet_config rc;
    mn_resnet_config_preset(&rc, 18, NULL, 0);
    rc.block = cJSON_IsString(block) && !strcmp(block->valuestring, "bottleneck") ? MN_RESNET_BOTTLENECK : MN_RESNET_BASIC;
    for (int i = 0; i < 4; i++) rc.layers[i] = cJSON_GetArrayItem(layers, i) ? cJSON_GetArrayItem(layers, i)->valueint : 0;
    rc.width = (int64_t)num(c, "width");
    rc.num_classes = (int64_t)num(c, "num_classes");
    mn_resnet_config got;
    char err[512];
    CHECK_OK(mn_resnet_config_from_checkpoint(&got, f->ck, err, sizeof err), err);
    CHECK_MSG(got.block == rc.block && got.width == rc.width && !memcmp(got.layers, rc.layers, sizeof rc.layers),
              "%s: the architecture read from the torchvision state_dict differs from config.json", f->dir);
    for (int kind = 0; kind < 3; kind++) {
        mn_resnet_options o = mn_resnet_default_options();
        o.kind = (mn_resnet_kind)kind;
        o.batch = (int64_t)num(c, "batch");
        o.height = (int64_t)num(c, "height");
        o.width = (int64_t)num(c, "width_px");
        mn_graph *g;
        mn_graph_create(&g);
        mn_model *m = NULL;
        CHECK_OK(mn_resnet_create(&m, g, &rc, &o), mn_model_error(m));
        for (int b = 0; b < (dev ? 2 : 1); b++) {
            const mn_backend_kind be = b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
            if (kind == MN_RESNET_TRAIN) {
                static const char *in[] = {"pixels", "labels"};
                static const bool i32[] = {false, true};
                static const char *out[] = {"logits"};
                check_train(f, g, m, be, dev, in, i32, 2, out, 1);
            } else {
                mn_session *s = lu_session(g, be, dev, MN_MODE_INFERENCE, NULL);
                if (!s) continue;
                CHECK_OK(mn_model_load(m, s, f->ck, NULL), mn_model_error(m));
                set_ref_input(f, s, "pixels", false);
                CHECK_OK(mn_session_run(s), mn_session_error(s));
                compare_output(f, s, "logits", "eval_logits", kind == MN_RESNET_EVAL ? (b ? "vulkan eval" : "cpu eval")
                                                                                    : (b ? "vulkan folded" : "cpu folded"),
                               TOL_FWD);
                mn_session_destroy(s);
            }
        }
        mn_model_destroy(m);
        mn_graph_destroy(g);
    }
}

static mn_unet_config unet_config(const cJSON *c) {
    mn_unet_config u = mn_unet_config_simple((int64_t)num(c, "base"));
    u.in_channels = (int64_t)num(c, "in_channels");
    u.levels = (int)num(c, "levels");
    u.groups = (int)num(c, "groups");
    u.conv_bias = num(c, "conv_bias") != 0;
    u.time_embedding = num(c, "time_embedding") != 0;
    u.attention_levels = (unsigned)num(c, "attention_levels");
    u.context_dim = (int64_t)num(c, "context_dim");
    u.context_len = (int64_t)num(c, "context_len");
    u.head_dim = (int64_t)num(c, "head_dim");
    u.eps = (float)num(c, "eps");
    return u;
}

static void check_unet(fixture *f, mn_device *dev) {
    mn_unet_config uc = unet_config(f->cfg);
    for (int kind = 0; kind < 2; kind++) {
        mn_unet_options o = mn_unet_default_options();
        o.kind = (mn_unet_kind)kind;
        o.batch = (int64_t)num(f->cfg, "batch");
        o.height = (int64_t)num(f->cfg, "height");
        o.width = (int64_t)num(f->cfg, "width");
        mn_graph *g;
        mn_graph_create(&g);
        mn_model *m = NULL;
        CHECK_OK(mn_unet_create(&m, g, &uc, &o), mn_model_error(m));
        const bool cond = uc.time_embedding;
        for (int b = 0; b < (dev ? 2 : 1); b++) {
            const mn_backend_kind be = b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
            if (kind == MN_UNET_TRAIN) {
                static const char *in[] = {"noisy", "noise", "timesteps", "context"};
                static const bool i32[] = {false, false, false, false};
                static const char *out[] = {"pred"};
                check_train(f, g, m, be, dev, in, i32, cond ? 4 : 2, out, 1);
            } else if (cond) { /* DDIM, 4 steps, from the noisy latents */
                mn_session *s = lu_session(g, be, dev, MN_MODE_INFERENCE, NULL);
                if (!s) continue;
                CHECK_OK(mn_model_load(m, s, f->ck, NULL), mn_model_error(m));
                size_t n = 0, nc = 0, nw = 0;
                float *x = ref_f32(f, "noisy", &n), *ctx = ref_f32(f, "context", &nc), *want = ref_f32(f, "ddim", &nw);
                static double ac[1000];
                mn_diffusion_schedule(ac, 1000, 0.00085, 0.012, true);
                if (x && ctx && want) {
                    CHECK_OK(mn_unet_ddim(m, s, x, 4, ctx, ac, 1000), mn_model_error(m));
                    const double e = lu_rel_l2(x, want, n);
                    printf("  %s: DDIM 4 steps rel L2 %.2e\n", b ? "vulkan" : "cpu", e);
                    CHECK_MSG(e <= TOL_SAMPLE, "%s: DDIM sample rel L2 %.3g", f->dir, e);
                }
                free(x), free(ctx), free(want);
                mn_session_destroy(s);
            }
        }
        mn_model_destroy(m);
        mn_graph_destroy(g);
    }
}

static void check_vla(fixture *f, mn_device *dev) {
    const cJSON *c = f->cfg;
    mn_vla_config vc = mn_vla_config_smolvla();
    vc.hidden = (int64_t)num(c, "hidden"), vc.layers = (int)num(c, "layers"), vc.heads = (int64_t)num(c, "heads");
    vc.kv_heads = (int64_t)num(c, "kv_heads"), vc.head_dim = (int64_t)num(c, "head_dim"), vc.ffn = (int64_t)num(c, "ffn");
    vc.action_dim = (int64_t)num(c, "action_dim"), vc.chunk = (int64_t)num(c, "chunk");
    vc.vlm_len = (int64_t)num(c, "vlm_len"), vc.kv_dim = (int64_t)num(c, "kv_dim");
    for (int kind = 0; kind < 2; kind++) {
        mn_vla_options o = mn_vla_default_options();
        o.kind = (mn_vla_kind)kind;
        o.batch = (int64_t)num(c, "batch");
        mn_graph *g;
        mn_graph_create(&g);
        mn_model *m = NULL;
        CHECK_OK(mn_vla_create(&m, g, &vc, &o), mn_model_error(m));
        for (int b = 0; b < (dev ? 2 : 1); b++) {
            const mn_backend_kind be = b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
            if (kind == MN_VLA_TRAIN) {
                static const char *in[] = {"actions", "noise", "timesteps", "vlm"};
                static const bool i32[] = {false, false, false, false};
                static const char *out[] = {"velocity"};
                check_train(f, g, m, be, dev, in, i32, 4, out, 1);
            } else {
                mn_session *s = lu_session(g, be, dev, MN_MODE_INFERENCE, NULL);
                if (!s) continue;
                CHECK_OK(mn_model_load(m, s, f->ck, NULL), mn_model_error(m));
                size_t n = 0, nv = 0, nw = 0;
                float *x = ref_f32(f, "noise", &n), *vlm = ref_f32(f, "vlm", &nv), *want = ref_f32(f, "sample", &nw);
                if (x && vlm && want) {
                    CHECK_OK(mn_vla_sample(m, s, x, 10, vlm), mn_model_error(m));
                    const double e = lu_rel_l2(x, want, n);
                    printf("  %s: Euler 10 steps rel L2 %.2e\n", b ? "vulkan" : "cpu", e);
                    CHECK_MSG(e <= TOL_SAMPLE, "%s: Euler sample rel L2 %.3g", f->dir, e);
                }
                free(x), free(vlm), free(want);
                mn_session_destroy(s);
            }
        }
        mn_model_destroy(m);
        mn_graph_destroy(g);
    }
}

/* The Whisper fixture (transformers): features of the espeak-ng speech, the
 * training graph's logits, loss and gradients, greedy tokens. */
static void check_whisper(const char *root, mn_device *dev) {
    char dir[1200], path[1400], err[1024];
    snprintf(dir, sizeof dir, "%s/whisper", root);
    fixture f;
    memset(&f, 0, sizeof f);
    snprintf(f.dir, sizeof f.dir, "%s", dir);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    CHECK_OK(mn_safetensors_open(&f.ref, path, err, sizeof err), err);
    CHECK_OK(mn_hf_checkpoint_open(&f.ck, dir, err, sizeof err), err);
    mn_whisper_config c;
    CHECK_OK(mn_whisper_config_load(&c, dir, err, sizeof err), err);
    if (!f.ref || !f.ck) {
        close_fixture(&f);
        return;
    }
    /* the front end: ours from the WAV against WhisperFeatureExtractor's */
    snprintf(path, sizeof path, "%s/../audio/speech.wav", root);
    mn_audio a;
    float *feat = malloc(80 * 3000 * sizeof *feat), *hf = malloc(80 * 3000 * sizeof *hf), floor_v = 0;
    size_t n = 0;
    float *first = ref_f32(&f, "features", &n);
    CHECK_OK(mn_safetensors_read_f32(f.ref, "floor", &floor_v, 1), mn_safetensors_error(f.ref));
    for (int m = 0; m < 80; m++)
        for (int t = 0; t < 3000; t++) hf[m * 3000 + t] = t < 400 && first ? first[m * 400 + t] : floor_v;
    if (mn_wav_load(&a, path, err, sizeof err) == MN_OK) {
        CHECK_OK(mn_whisper_log_mel(feat, a.pcm, a.samples, 80), "log_mel");
        const double e = lu_rel_l2(feat, hf, 80 * 3000);
        printf("  log-mel of speech.wav vs WhisperFeatureExtractor: rel L2 %.2e\n", e);
        CHECK_MSG(e <= TOL_FWD, "log-mel vs WhisperFeatureExtractor: rel L2 %.3g", e);
        mn_audio_free(&a);
    } else CHECK_MSG(0, "%s", err);
    free(first);
    /* training graph */
    mn_safetensors_tensor t;
    CHECK_OK(mn_safetensors_find(f.ref, "decoder_input_ids", &t), "decoder_input_ids");
    mn_whisper_options o = mn_whisper_default_options();
    o.kind = MN_WHISPER_TRAIN;
    o.seq_len = t.shape[1];
    mn_graph *g;
    mn_graph_create(&g);
    mn_model *m = NULL;
    CHECK_OK(mn_whisper_create(&m, g, &c, &o), mn_model_error(m));
    for (int b = 0; b < (dev ? 2 : 1); b++) {
        const mn_backend_kind be = b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
        mn_session *s = mu_grad_session(g, be, dev, false);
        if (!s) continue;
        CHECK_OK(mn_model_load(m, s, f.ck, NULL), mn_model_error(m));
        CHECK_OK(mn_session_set_input(s, "input_features", hf, 80 * 3000 * sizeof *hf), mn_session_error(s));
        set_ref_input(&f, s, "decoder_input_ids", true);
        set_ref_input(&f, s, "labels", true);
        CHECK_OK(session_forward_backward(s), mn_session_error(s));
        compare_output(&f, s, "logits", "logits", b ? "vulkan" : "cpu", TOL_FWD);
        float loss = NAN, *want = ref_f32(&f, "loss", &n);
        mn_session_loss(s, &loss);
        if (want) CHECK_MSG(fabs((double)loss - want[0]) <= TOL_FWD * fabs((double)want[0]), "whisper loss %.9g vs %.9g", loss, want[0]);
        free(want);
        const mn_hf_param *p = mn_model_params(m);
        double worst = 0;
        for (int i = 0; i < mn_model_param_count(m); i++) {
            const int32_t gid = session_grad_of(s, p[i].tensor);
            if (gid == MN_NONE) continue; /* the frozen sinusoids */
            char nm[300];
            snprintf(nm, sizeof nm, "grad.%s", p[i].name);
            float *r = ref_f32(&f, nm, &n), *v = malloc(mu_numel(&p[i]) * sizeof *v);
            CHECK_OK(session_read_f32(s, gid, v, mu_numel(&p[i])), mn_session_error(s));
            const double e = r ? lu_rel_l2(v, r, n) : INFINITY;
            CHECK_MSG(e <= TOL_BWD, "whisper (%s): gradient of %s: rel L2 %.3g", b ? "vulkan" : "cpu", p[i].name, e);
            if (e > worst) worst = e;
            free(r), free(v);
        }
        printf("  %s: whisper loss %.9g, worst gradient rel L2 %.2e\n", b ? "vulkan" : "cpu", loss, worst);
        mn_session_destroy(s);
    }
    mn_model_destroy(m);
    mn_graph_destroy(g);
    /* greedy decoding over the KV caches */
    o.kind = MN_WHISPER_DECODE;
    mn_graph_create(&g);
    CHECK_OK(mn_whisper_create(&m, g, &c, &o), mn_model_error(m));
    int32_t want[10], got[10];
    CHECK_OK(mn_safetensors_read_i32(f.ref, "generated", want, 10), mn_safetensors_error(f.ref));
    for (int b = 0; b < (dev ? 2 : 1); b++) {
        mn_session *s = lu_session(g, b ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, dev, MN_MODE_INFERENCE, NULL);
        if (!s) continue;
        CHECK_OK(mn_model_load(m, s, f.ck, NULL), mn_model_error(m));
        const int32_t prompt[1] = {(int32_t)c.decoder_start_token_id};
        mn_whisper_decode_options d = {prompt, 1, 10, NULL, 0, NULL, 0};
        int64_t k = 0;
        CHECK_OK(mn_whisper_greedy(m, s, hf, &d, got, &k), mn_model_error(m));
        for (int64_t i = k; i < 10; i++) got[i] = -1;
        CHECK_MSG(!memcmp(got, want, sizeof want), "whisper (%s): greedy tokens differ from transformers'",
                  b ? "vulkan" : "cpu");
        mn_session_destroy(s);
    }
    mn_model_destroy(m);
    mn_graph_destroy(g);
    free(feat), free(hf);
    close_fixture(&f);
}

int main(void) {
    char root[1100];
    lu_fixtures(root, sizeof root);
    strncat(root, "/workloads", sizeof root - strlen(root) - 1);
    struct stat sb;
    if (stat(root, &sb) != 0) {
        printf("SKIP: no PyTorch fixtures in %s (run tests/fixtures/gen_workloads.py --out DIR with torch and copy "
               "DIR/* there)\n",
               root);
        return TH_SKIP;
    }
    mn_device *dev = th_require_vulkan();
    static const char *names[] = {"resnet-basic", "resnet-bottleneck", "unet-simple", "unet-cond", "vla"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fixture f;
        printf("%s\n", names[i]);
        if (open_fixture(&f, root, names[i])) {
            if (!strncmp(names[i], "resnet", 6)) check_resnet(&f, dev);
            else if (!strncmp(names[i], "unet", 4)) check_unet(&f, dev);
            else check_vla(&f, dev);
        }
        close_fixture(&f);
    }
    char wd[1200];
    snprintf(wd, sizeof wd, "%s/whisper", root);
    if (stat(wd, &sb) == 0) {
        printf("whisper\n");
        check_whisper(root, dev);
    } else
        printf("whisper: no fixture yet (gen_workloads.py needs transformers; run it on the GPU machine and copy "
               "OUT/whisper into %s)\n", root);
    mn_device_close(dev);
    return th_finish("test_workloads");
}
