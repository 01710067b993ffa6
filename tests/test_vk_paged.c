/* test_vk_paged.c - tensors larger than one Vulkan binding (paged operands,
 * issue 8) on the Vulkan backend, with MEGANEURA_VK_MAX_ALLOCATION=65536 so
 * that tensors of a few hundred KiB span several 64 KiB chunks.
 *
 *  1. A model whose parameters, optimizer state, activations and logits are
 *     all paged (embedding 1000x72 = 5 pages, W1 72x1000 = 5 pages, logits
 *     48x1000 = 3 pages: embedding and its backward, matmul and both of its
 *     backward products, GELU, a product and a mean over the paged
 *     activations, cross-entropy over paged logits, AdamW on paged
 *     parameters) trains STEPS steps: the losses match the CPU backend
 *     within 2e-5, the parameters after training and the paged output within
 *     a relative L2 of 1e-5, and the same model on an unpaged Vulkan session
 *     (the device's own limits) gives the same losses within 1e-6.
 *  2. Public-API round trips of paged tensors: set_param/get_param of a
 *     paged parameter are exact; an inference graph y = 2x + 1, s = sum(x)
 *     over a paged input x of 100000 elements gives y exactly and s within
 *     1e-6 relative (uploads, fills and reads chunk by chunk).
 *  3. Errors at session creation: a kernel whose paged operands need more
 *     descriptors than the device allows one kernel (64 KiB pages of a
 *     2.6 MB tensor) fails naming the limit (where the device has it: a
 *     device with more runs the graph and gives the right sum); a single
 *     tensor of 256 GiB (more than any device) fails before any allocation,
 *     saying how much was needed and how much the device has.
 *
 *  4. Both forms of paged access compile: every kernel of the model of 1
 *     on the 64 KiB plan, generated for a device that indexes descriptor
 *     arrays non-uniformly (nonuniformEXT, which lavapipe lacks, so 1 runs
 *     the page-loop form) and for one that does not, compiles to SPIR-V that
 *     passes spirv-val (Vulkan 1.2); kernels of the unpaged plan define no
 *     page macros. With vk_caps.index_max lowered below the activations'
 *     element count their kernels take the 64-bit index form (MN_IDX64),
 *     which compiles and passes spirv-val in both access forms; on a device
 *     without shaderInt64 they are refused with a message naming the op,
 *     the tensor's shape and the missing feature.
 *
 * Skips (exit 77) without a Vulkan device.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "llama_util.h"
#include "backend/vulkan/vk_util.h"
#include "session/session.h"

#define SMALL_MAX "65536"
#define STEPS 3
#define V 1000
#define D 72
#define H 1000
#define T 48

typedef struct run {
    float loss[STEPS];
    float *emb, *w1, *act; /* parameters after training, the paged output of the last step */
    uint64_t chunk;        /* the plan's chunk size */
    int paged;             /* paged tensors in the plan */
    bool ok;
} run;

static void run_free(run *r) {
    free(r->emb);
    free(r->w1);
    free(r->act);
    memset(r, 0, sizeof *r);
}

/* ids [T] -> emb [V,D] -> h [T,D] -> a = gelu(h @ W1) [T,H] -> loss =
 * cross_entropy(a, targets) + 0.01 * mean(a * a); a is an output too. */
static mn_graph *model(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "graph");
    mn_tensor ids, tg, emb, w1, h, a, ce, sq, reg, loss;
    int64_t ts[1] = {T}, es[2] = {V, D}, ws[2] = {D, H};
    mn_status st = mn_graph_input(g, &ids, "ids", MN_I32, 1, ts);
    if (!st) st = mn_graph_input(g, &tg, "targets", MN_I32, 1, ts);
    if (!st) st = mn_graph_param(g, &emb, "emb", 2, es, (mn_init){MN_INIT_NORMAL, 0, 0.5f});
    if (!st) st = mn_graph_param(g, &w1, "w1", 2, ws, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    if (!st) st = mn_embedding(g, &h, emb, ids);
    if (!st) st = mn_matmul(g, &a, h, w1);
    if (!st) st = mn_gelu(g, &a, a);
    if (!st) st = mn_graph_output(g, a, "act");
    if (!st) st = mn_cross_entropy(g, &ce, a, tg);
    if (!st) st = mn_mul(g, &sq, a, a);
    if (!st) st = mn_mean(g, &reg, sq, MN_ALL_AXES, false);
    if (!st) st = mn_scale(g, &reg, reg, 0.01f);
    if (!st) st = mn_add(g, &loss, ce, reg);
    if (!st) st = mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    if (st) {
        mn_graph_destroy(g);
        return NULL;
    }
    return g;
}

static run train(mn_backend_kind be, mn_device *dev) {
    run r = {0};
    mn_graph *g = model();
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAMW);
    opt.lr = 1e-2f;
    opt.weight_decay = 0.01f;
    mn_session *s = g ? lu_session(g, be, dev, MN_MODE_TRAINING, &opt) : NULL;
    if (s) {
        int32_t ids[T], tg[T];
        unsigned seed = 7;
        for (int i = 0; i < T; i++) {
            seed = seed * 1664525u + 1013904223u;
            ids[i] = (int32_t)((seed >> 8) % V);
            tg[i] = (int32_t)((seed >> 4) % H);
        }
        r.ok = true;
        for (int i = 0; i < STEPS && r.ok; i++) {
            r.ok = mn_session_set_input(s, "ids", ids, sizeof ids) == MN_OK &&
                   mn_session_set_input(s, "targets", tg, sizeof tg) == MN_OK && mn_session_step(s) == MN_OK &&
                   mn_session_loss(s, &r.loss[i]) == MN_OK;
            CHECK_MSG(r.ok, "step %d: %s", i, mn_session_error(s));
        }
        r.emb = malloc((size_t)V * D * 4);
        r.w1 = malloc((size_t)D * H * 4);
        r.act = malloc((size_t)T * H * 4);
        CHECK_OK(mn_session_get_param(s, "emb", r.emb, (size_t)V * D), mn_session_error(s));
        CHECK_OK(mn_session_get_param(s, "w1", r.w1, (size_t)D * H), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "act", r.act, (size_t)T * H * 4), mn_session_error(s));
        r.chunk = s->plan.chunk_bytes;
        for (int32_t i = 0; i < s->g->n; i++) r.paged += memplan_pages(&s->plan, i) > 0;
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    return r;
}

static void training(mn_device *small, mn_device *big) {
    run c = train(MN_BACKEND_CPU, NULL), v = train(MN_BACKEND_VULKAN, small), u = train(MN_BACKEND_VULKAN, big);
    printf("  paged session: chunk %llu bytes, %d paged tensors (unpaged session: chunk %llu, %d paged)\n",
           (unsigned long long)v.chunk, v.paged, (unsigned long long)u.chunk, u.paged);
    if (c.ok && v.ok && u.ok) {
        CHECK(v.chunk == 65536 && v.paged >= 10 && u.paged == 0);
        for (int i = 0; i < STEPS; i++) {
            printf("  step %d: loss cpu %.7f vulkan paged %.7f unpaged %.7f\n", i, c.loss[i], v.loss[i], u.loss[i]);
            CHECK_NEAR(v.loss[i], c.loss[i], 2e-5);
            CHECK_NEAR(v.loss[i], u.loss[i], 1e-6);
        }
        CHECK_MSG(v.loss[STEPS - 1] < v.loss[0], "the loss did not fall: %g -> %g", v.loss[0], v.loss[STEPS - 1]);
        double e = lu_rel_l2(v.emb, c.emb, (size_t)V * D), w = lu_rel_l2(v.w1, c.w1, (size_t)D * H),
               a = lu_rel_l2(v.act, c.act, (size_t)T * H);
        printf("  relative L2 to CPU after training: emb %.2e, w1 %.2e, act %.2e\n", e, w, a);
        CHECK_MSG(e < 1e-5 && w < 1e-5 && a < 1e-5, "paged Vulkan differs from CPU: emb %g, w1 %g, act %g", e, w, a);
    }
    run_free(&c);
    run_free(&v);
    run_free(&u);
}

/* y = 2x + 1 and s = sum(x) over an input of n elements (an inference graph). */
static mn_graph *affine(int64_t n) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "graph");
    mn_tensor x, y, s;
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 1, &n);
    if (!st) st = mn_scale(g, &y, x, 2.0f);
    if (!st) {
        mn_tensor one;
        int64_t sh[1] = {1};
        st = mn_graph_param(g, &one, "one", 1, sh, (mn_init){MN_INIT_CONSTANT, 1.0f, 0});
        if (!st) st = mn_add(g, &y, y, one);
    }
    if (!st) st = mn_sum(g, &s, x, MN_ALL_AXES, false);
    if (!st) st = mn_graph_output(g, y, "y");
    if (!st) st = mn_graph_output(g, s, "s");
    CHECK_OK(st, mn_graph_error(g));
    return g;
}

static void round_trips(mn_device *small) {
    /* a paged parameter: set and get exactly */
    mn_graph *g = model();
    mn_session *s = g ? lu_session(g, MN_BACKEND_VULKAN, small, MN_MODE_TRAINING, NULL) : NULL;
    if (s) {
        size_t n = (size_t)V * D;
        float *w = malloc(n * 4), *r = malloc(n * 4);
        for (size_t i = 0; i < n; i++) w[i] = (float)i * 0.001f - 17.0f;
        CHECK_OK(mn_session_set_param(s, "emb", w, n), mn_session_error(s));
        CHECK_OK(mn_session_get_param(s, "emb", r, n), mn_session_error(s));
        CHECK_MSG(memcmp(w, r, n * 4) == 0, "a paged parameter did not read back as written");
        free(w);
        free(r);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    /* a paged input and output through an inference run */
    const int64_t n = 100000; /* 400000 bytes: 7 pages of 64 KiB */
    g = affine(n);
    s = lu_session(g, MN_BACKEND_VULKAN, small, MN_MODE_INFERENCE, NULL);
    if (s) {
        float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), sum = 0;
        double want = 0;
        for (int64_t i = 0; i < n; i++) {
            x[i] = (float)((i * 37) % 1001) / 1000.0f - 0.5f;
            want += x[i];
        }
        CHECK_OK(mn_session_set_input(s, "x", x, (size_t)n * 4), mn_session_error(s));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "y", y, (size_t)n * 4), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "s", &sum, 4), mn_session_error(s));
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (y[i] != 2.0f * x[i] + 1.0f && bad++ < 3)
                th_fail(__FILE__, __LINE__, "y[%lld] = %.9g, want %.9g", (long long)i, y[i], 2.0f * x[i] + 1.0f);
        if (!bad) th_passed++;
        printf("  paged input of %lld elements: sum %.6f, want %.6f\n", (long long)n, sum, want);
        CHECK_MSG(fabs(sum - want) <= 1e-6 * fabs(want) + 1e-3, "sum %g, want %g", sum, want);
        CHECK(memplan_pages(&s->plan, s->g->n - 1) == 0); /* s: not paged */
        free(x);
        free(y);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void errors(mn_device *small, mn_device *big) {
    /* 655360 elements = 40 pages of 64 KiB for x and y: 80 descriptors */
    const int64_t n = 655360;
    mn_graph *g = affine(n);
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    o.device = small;
    o.mode = MN_MODE_INFERENCE;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    const vk_caps *caps = &((const vk_ctx *)small->impl)->caps;
    printf("  %u descriptors per kernel: %s\n", caps->max_stage_buffers, st ? mn_session_error(s) : "runs");
    if (caps->max_stage_buffers < 81) {
        CHECK(st == MN_E_UNSUPPORTED);
        CHECK_MSG(strstr(mn_session_error(s), "storage-buffer descriptors") &&
                      strstr(mn_session_error(s), "MEGANEURA_VK_MAX_ALLOCATION"),
                  "message: %s", mn_session_error(s));
    } else {
        CHECK_OK(st, mn_session_error(s));
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
    /* one tensor of 2^36 elements (256 GiB) */
    g = affine((int64_t)1 << 36);
    o.device = big;
    s = NULL;
    st = mn_session_create(&s, g, &o);
    printf("  a tensor of 256 GiB: %s\n", mn_session_error(s));
    CHECK(st == MN_E_NOMEM);
    CHECK_MSG(strstr(mn_session_error(s), "the model needs ") && strstr(mn_session_error(s), "more than") &&
                  strstr(mn_session_error(s), "memory heap"),
              "message: %s", mn_session_error(s));
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* Compiles words with spirv-val; true if it passes. */
static bool spirv_valid(const uint32_t *words, size_t n, const char *label) {
    char path[] = "/tmp/mn_vk_paged_XXXXXX";
    int fd = mkstemp(path);
    bool ok = fd >= 0 && write(fd, words, n * 4) == (ssize_t)(n * 4);
    if (fd >= 0) close(fd);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "spirv-val --target-env vulkan1.2 %s", path);
    if (ok) ok = system(cmd) == 0;
    if (!ok) fprintf(stderr, "---- %s: spirv-val failed (%s)\n", label, path);
    else unlink(path);
    return ok;
}

static void compile_modes(mn_device *dev, bool paged) {
    mn_graph *g = model();
    mn_session *s = g ? lu_session(g, MN_BACKEND_VULKAN, dev, MN_MODE_TRAINING, NULL) : NULL;
    vk_kernel *k = malloc(sizeof *k);
    int kernels[4] = {0, 0, 0, 0}, with_pages[4] = {0, 0, 0, 0}, wide[4] = {0, 0, 0, 0};
    /* mode & 1: the page-loop form (else nonuniformEXT); mode & 2: index_max
     * below the activations' count (64-bit index kernels) */
    for (int mode = 0; s && k && mode < 4; mode++) {
        vk_caps caps = ((const vk_ctx *)dev->impl)->caps;
        caps.nonuniform = (mode & 1) == 0;
        caps.dynamic_index = (mode & 1) == 1;
        caps.max_stage_buffers = 32;
        if (mode & 2) caps.index_max = (int64_t)T * H - 1, caps.int64 = true;
        for (int32_t i = 0; i < s->sched.n; i++) {
            int32_t id = s->sched.order[i];
            char err[512] = "", label[64];
            snprintf(label, sizeof label, "%s_%d_%s%s", op_table[s->g->nodes[id].op].name, id,
                     mode & 1 ? "loop" : "nonuniform", mode & 2 ? "_idx64" : "");
            mn_status st = vk_codegen_node(k, s->g, id, &s->plan, &caps, err, sizeof err);
            CHECK_OK(st, err);
            char *src = st || !k->tmpl ? NULL : vk_codegen_source(k);
            if (!src) continue;
            bool pg = strstr(k->defines, "_PAGES") != NULL;
            with_pages[mode] += pg;
            wide[mode] += k->idx64;
            CHECK_MSG(k->idx64 == (strstr(src, "uint64_t") != NULL && strstr(k->defines, "MN_IDX64") != NULL),
                      "%s: MN_IDX64", label);
            CHECK_MSG(pg == (strstr(k->defines, "MN_NONUNIFORM") != NULL) || (mode & 1), "%s: MN_NONUNIFORM", label);
            uint32_t *words = NULL;
            size_t n = 0;
            bool cached = false;
            st = vk_compile(&words, &n, src, label, &cached, err, sizeof err);
            CHECK_OK(st, err);
            if (!st && (pg || k->idx64)) CHECK_MSG(spirv_valid(words, n, label), "%s: spirv-val", label);
            kernels[mode]++;
            free(words);
            free(src);
        }
    }
    if (s && k && paged) { /* the element limit of 32-bit indexing is one number (vk_caps.index_max) */
        vk_caps caps = ((const vk_ctx *)dev->impl)->caps;
        caps.index_max = (int64_t)T * H - 1; /* below the activations' count */
        caps.int64 = false;                  /* a device without shaderInt64 */
        int refused = 0, activations = 0;
        char first[512] = "";
        for (int32_t i = 0; i < s->sched.n; i++) {
            char err[512] = "";
            if (vk_codegen_node(k, s->g, s->sched.order[i], &s->plan, &caps, err, sizeof err) == MN_E_UNSUPPORTED &&
                strstr(err, "shaderInt64") && strstr(err, "more than the 47999 of 32-bit indexing")) {
                refused++;
                /* the message names the op, the largest operand's shape and count */
                if (strstr(err, "[48,1000] has 48000 elements") && !activations++)
                    snprintf(first, sizeof first, "%s", err);
            }
        }
        printf("  index_max %lld without shaderInt64: %d kernels refused, e.g. %s\n", (long long)caps.index_max,
               refused, first);
        CHECK(refused == wide[2] && activations >= 4);
    }
    printf("  %s plan: %d kernels, %d with paged operands (nonuniformEXT form); %d, %d (page-loop form); "
           "64-bit index forms: %d, %d with index_max %d\n",
           paged ? "paged" : "unpaged", kernels[0], with_pages[0], kernels[1], with_pages[1], wide[2], wide[3],
           T * H - 1);
    CHECK(s && kernels[0] > 10 && kernels[0] == kernels[1] && with_pages[0] == with_pages[1]);
    CHECK(kernels[2] == kernels[0] && kernels[3] == kernels[0] && wide[0] == 0 && wide[1] == 0);
    CHECK(wide[2] >= 4 && wide[2] == wide[3] && with_pages[2] == with_pages[0]);
    CHECK(paged ? with_pages[0] >= 8 : with_pages[0] == 0);
    free(k);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

int main(void) {
    unsetenv("MEGANEURA_VK_MAX_ALLOCATION");
    mn_device *big = th_require_vulkan();
    if (!big) return th_finish("test_vk_paged");
    setenv("MEGANEURA_VK_MAX_ALLOCATION", SMALL_MAX, 1);
    mn_device *small = lu_vulkan();
    unsetenv("MEGANEURA_VK_MAX_ALLOCATION");
    CHECK(small != NULL);
    if (small) {
        training(small, big);
        round_trips(small);
        errors(small, big);
        compile_modes(small, true);
        compile_modes(big, false);
    }
    mn_device_close(small);
    mn_device_close(big);
    return th_finish("test_vk_paged");
}
