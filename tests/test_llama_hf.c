/* test_llama_hf.c - the Llama builder against PyTorch/transformers, on the
 * committed fixtures of tests/fixtures/gen_llama.py (tests/fixtures/llama/).
 *
 * Each fixture folder is a Hugging Face folder as transformers wrote it
 * (config.json, model.safetensors or shards + index) plus
 * reference.safetensors: inputs, labels, logits, loss, every parameter's
 * gradient and 32 greedily generated tokens, computed in float64 on the
 * stored weights (see the script). Variants: tied embeddings with bf16
 * weights in one file; untied, llama3 RoPE scaling, f32 weights in shards.
 *
 * Checks, on the CPU backend and on Vulkan (lavapipe in CI), strict f32:
 * - logits and loss: rel L2 <= 1e-5;
 * - every parameter gradient: rel L2 <= 1e-4 (tied: one gradient, both
 *   uses summed);
 * - greedy decoding on the KV-cache graph (one token per run, and a prefill
 *   in runs of 4): the 32 tokens of model.generate(do_sample=False).
 * rel L2 = ||ours - ref|| / ||ref|| over the whole tensor.
 *
 * MN_LLAMA_HF_DIR=DIR checks that one folder instead (the full-size gate on
 * the GPU machine: gen_llama.py --full CONFIG writes it) with the full-size
 * strict thresholds of WORKLOADS.md: logits and loss rel L2 <= 1e-4, every
 * gradient <= 1e-3; greedy decoding only if the reference holds prompt_ids.
 * MN_LLAMA_HF_BACKEND=cpu|vulkan limits the check to one backend.
 *
 * Without the fixtures it prints SKIP and exits 77. Uses the internal
 * session API for gradients (session_internal_options.grads_only).
 *
 * Does not: regenerate fixtures (run tests/fixtures/gen_llama.py on a
 * machine with torch and transformers).
 */
#include <sys/stat.h>

#include "llama_util.h"
#include "session/session.h"

#define GEN_NEW 32

static const char *variants[] = {"tiny-tied-bf16", "tiny-untied-llama3-f32"};
static double tol_fwd = 1e-5, tol_bwd = 1e-4; /* tiny fixtures; full size: 1e-4, 1e-3 */

typedef struct reference {
    mn_safetensors *f;
    int64_t B, T, V, P;
    int32_t *ids, *targets, *prompt, *generated;
    float *logits, loss;
} reference;

static int64_t numel_of(const mn_safetensors_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= t->shape[d];
    return n;
}

static bool read_reference(reference *r, const char *dir, const mn_llama_config *c) {
    char path[1400], err[512];
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/reference.safetensors", dir);
    mn_status st = mn_safetensors_open(&r->f, path, err, sizeof err);
    CHECK_OK(st, err);
    if (st) return false;
    mn_safetensors_tensor t, p = {0};
    const bool has_prompt = mn_safetensors_find(r->f, "prompt_ids", &p) == MN_OK;
    if (mn_safetensors_find(r->f, "input_ids", &t) || t.rank != 2 || (has_prompt && p.rank != 2)) {
        CHECK_MSG(0, "%s: input_ids [B,T] (and prompt_ids [B,P] if present) expected", path);
        return false;
    }
    r->B = t.shape[0], r->T = t.shape[1], r->V = c->vocab_size, r->P = has_prompt ? p.shape[1] : 0;
    const size_t n = (size_t)(r->B * r->T);
    int32_t *labels = malloc(n * sizeof *labels);
    r->ids = malloc(n * sizeof *r->ids);
    r->targets = malloc(n * sizeof *r->targets);
    r->logits = malloc(n * (size_t)r->V * sizeof *r->logits);
    r->prompt = malloc((size_t)(p.shape[0] * r->P) * sizeof *r->prompt);
    r->generated = malloc((size_t)p.shape[0] * GEN_NEW * sizeof *r->generated);
    bool ok = !mn_safetensors_read_i32(r->f, "input_ids", r->ids, n) &&
              !mn_safetensors_read_i32(r->f, "labels", labels, n) &&
              !mn_safetensors_read_f32(r->f, "logits", r->logits, n * (size_t)r->V) &&
              !mn_safetensors_read_f32(r->f, "loss", &r->loss, 1) &&
              (!has_prompt ||
               (!mn_safetensors_read_i32(r->f, "prompt_ids", r->prompt, (size_t)(p.shape[0] * r->P)) &&
                !mn_safetensors_read_i32(r->f, "generated", r->generated, (size_t)p.shape[0] * GEN_NEW)));
    CHECK_MSG(ok, "%s: %s", path, mn_safetensors_error(r->f));
    if (ok) mn_llama_shift_labels(r->targets, labels, r->B, r->T);
    free(labels);
    return ok;
}

static void free_reference(reference *r) {
    mn_safetensors_close(r->f);
    free(r->ids), free(r->targets), free(r->logits), free(r->prompt), free(r->generated);
}

/* Forward and backward on one backend: logits, loss, every gradient. */
static void check_train(const char *dir, const char *vname, const mn_llama_config *c, reference *r,
                        mn_backend_kind be, mn_device *dev) {
    const char *bn = be == MN_BACKEND_VULKAN ? "vulkan" : "cpu";
    mn_graph *g = NULL;
    mn_llama *m = NULL;
    mn_graph_create(&g);
    mn_llama_options o = mn_llama_default_options();
    o.batch = r->B;
    o.seq_len = r->T;
    CHECK_OK(mn_llama_create(&m, g, c, &o), mn_llama_error(m));
    mn_session_options so = mn_session_default_options();
    so.backend = be;
    so.device = be == MN_BACKEND_VULKAN ? dev : NULL;
    so.mode = MN_MODE_TRAINING;
    session_internal_options io = {.grads_only = true};
    mn_session *s = NULL;
    mn_hf_checkpoint *ck = NULL;
    char err[1024];
    mn_status st = session_create_ex(&s, g, &so, &io);
    CHECK_OK(st, mn_session_error(s));
    if (!st) {
        st = mn_hf_checkpoint_open(&ck, dir, err, sizeof err);
        CHECK_OK(st, err);
    }
    if (!st) {
        st = mn_llama_load(m, s, ck, NULL);
        CHECK_OK(st, mn_llama_error(m));
    }
    const size_t n = (size_t)(r->B * r->T);
    float *logits = malloc(n * (size_t)r->V * sizeof *logits), loss = NAN;
    if (!st) {
        CHECK_OK(mn_session_set_input(s, "input_ids", r->ids, n * sizeof *r->ids), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "targets", r->targets, n * sizeof *r->targets), mn_session_error(s));
        CHECK_OK(session_forward_backward(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "logits", logits, n * (size_t)r->V * sizeof *logits), mn_session_error(s));
        CHECK_OK(mn_session_loss(s, &loss), mn_session_error(s));
        const double el = lu_rel_l2(logits, r->logits, n * (size_t)r->V), eloss = fabs(loss - r->loss) / fabs(r->loss);
        double worst = 0;
        const char *worst_name = "";
        int nparams = mn_llama_param_count(m), bad = 0;
        const mn_hf_param *params = mn_llama_params(m);
        for (int i = 0; i < nparams; i++) {
            char name[200];
            snprintf(name, sizeof name, "grad.%s", params[i].name);
            mn_safetensors_tensor t;
            if (mn_safetensors_find(r->f, name, &t) != MN_OK) {
                CHECK_MSG(0, "%s: the reference has no %s", vname, name);
                continue;
            }
            const size_t k = (size_t)numel_of(&t);
            float *ref = malloc(k * sizeof *ref), *ours = malloc(k * sizeof *ours);
            const int32_t gid = session_grad_of(s, params[i].tensor);
            CHECK_OK(mn_safetensors_read_f32(r->f, name, ref, k), mn_safetensors_error(r->f));
            CHECK_MSG(gid != MN_NONE, "%s: no gradient for %s", vname, params[i].name);
            if (gid != MN_NONE) CHECK_OK(session_read_f32(s, gid, ours, k), mn_session_error(s));
            const double e = gid != MN_NONE ? lu_rel_l2(ours, ref, k) : INFINITY;
            if (!(e <= tol_bwd)) {
                bad++;
                CHECK_MSG(0, "%s %s: gradient of %s: rel L2 %.3g > %.0e", vname, bn, params[i].name, e, tol_bwd);
            }
            if (!(e <= worst)) worst = e, worst_name = params[i].name;
            free(ref);
            free(ours);
        }
        printf("  %-22s %-6s logits rel L2 %.2e, loss %.7f vs %.7f (rel %.1e); %d gradients, worst rel L2 %.2e (%s)\n",
               vname, bn, el, loss, r->loss, eloss, nparams, worst, worst_name);
        CHECK_MSG(el <= tol_fwd, "%s %s: logits rel L2 %.3g > %.0e", vname, bn, el, tol_fwd);
        CHECK_MSG(eloss <= tol_fwd, "%s %s: loss %.9g vs %.9g", vname, bn, loss, r->loss);
        CHECK(bad == 0);
    }
    free(logits);
    mn_hf_checkpoint_close(ck);
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
}

/* Greedy decoding on the KV-cache graph, one token per run (chunk 1) or a
 * prefill in runs of `chunk`. */
static void check_greedy(const char *dir, const char *vname, const mn_llama_config *c, reference *r,
                         mn_backend_kind be, mn_device *dev, int64_t chunk, bool step) {
    const char *bn = be == MN_BACKEND_VULKAN ? "vulkan" : "cpu";
    mn_safetensors_tensor p;
    mn_safetensors_find(r->f, "prompt_ids", &p);
    const int64_t B = p.shape[0];
    mn_graph *g = NULL;
    mn_llama *m = NULL;
    mn_graph_create(&g);
    mn_llama_options o = mn_llama_default_options();
    o.kind = MN_LLAMA_DECODE;
    o.batch = B;
    o.seq_len = chunk;
    o.max_seq = r->P + GEN_NEW;
    o.decode_step = step;
    CHECK_OK(mn_llama_create(&m, g, c, &o), mn_llama_error(m));
    mn_session *s = lu_session(g, be, dev, MN_MODE_INFERENCE, NULL);
    mn_hf_checkpoint *ck = NULL;
    char err[1024];
    int32_t *out = calloc((size_t)(B * GEN_NEW), sizeof *out);
    if (s && mn_hf_checkpoint_open(&ck, dir, err, sizeof err) == MN_OK) {
        CHECK_OK(mn_llama_load(m, s, ck, NULL), mn_llama_error(m));
        CHECK_OK(mn_llama_greedy(m, s, out, r->prompt, r->P, GEN_NEW), mn_llama_error(m));
        int same = 0;
        for (int64_t i = 0; i < B * GEN_NEW; i++) same += out[i] == r->generated[i];
        printf("  %-22s %-6s greedy, prefill in runs of %lld%s: %d of %lld tokens as model.generate\n", vname, bn,
               (long long)chunk, step ? ", one-token decode branch" : "", same, (long long)(B * GEN_NEW));
        CHECK_MSG(same == B * GEN_NEW, "%s %s: greedy tokens differ from transformers'", vname, bn);
    } else if (s) CHECK_MSG(0, "%s", err);
    free(out);
    mn_hf_checkpoint_close(ck);
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
}

int main(void) {
    char fixtures[1024];
    lu_fixtures(fixtures, sizeof fixtures);
    int found = 0;
    mn_device *dev = NULL;
    const char *full = getenv("MN_LLAMA_HF_DIR"), *only = getenv("MN_LLAMA_HF_BACKEND");
    if (full && *full) {
        variants[0] = full;
        tol_fwd = 1e-4, tol_bwd = 1e-3;
    }
    const size_t nvariants = full && *full ? 1 : sizeof variants / sizeof *variants;
    for (size_t v = 0; v < nvariants; v++) {
        char dir[1200], ref[1300], err[512];
        if (full && *full) snprintf(dir, sizeof dir, "%s", full);
        else snprintf(dir, sizeof dir, "%s/llama/%s", fixtures, variants[v]);
        snprintf(ref, sizeof ref, "%s/reference.safetensors", dir);
        struct stat sb;
        if (stat(ref, &sb) != 0) {
            printf("  %s: no fixture (%s)\n", variants[v], ref);
            continue;
        }
        if (!found++) dev = lu_vulkan();
        mn_llama_config c;
        mn_status st = mn_llama_config_load(&c, dir, err, sizeof err);
        CHECK_OK(st, err);
        reference r;
        if (!st && read_reference(&r, dir, &c)) {
            for (int be = 0; be < (dev ? 2 : 1); be++) {
                const mn_backend_kind kind = be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
                if (only && strcmp(only, be ? "vulkan" : "cpu")) continue;
                check_train(dir, variants[v], &c, &r, kind, dev);
                if (!r.P) continue;
                check_greedy(dir, variants[v], &c, &r, kind, dev, 1, false);
                check_greedy(dir, variants[v], &c, &r, kind, dev, 4, false);
                check_greedy(dir, variants[v], &c, &r, kind, dev, 4, true);
            }
        }
        if (!st) free_reference(&r);
    }
    mn_device_close(dev);
    if (!found) {
        printf("SKIP: fixtures not generated (run tests/fixtures/gen_llama.py on a machine with torch and "
               "transformers, then commit tests/fixtures/llama)\n");
        return 77;
    }
    return th_finish("test_llama_hf");
}
