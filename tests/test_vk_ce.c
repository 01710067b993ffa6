/* test_vk_ce.c - cross-entropy with class labels (ce_rows, the mean, the
 * backward) on Vulkan against the CPU reference, at SmolLM2's vocabulary
 * (49152) and at hostile sizes.
 *
 * Each case builds loss = cross_entropy_ex(logits, labels) with logits a
 * parameter [B,C] set to the same values on both backends, runs forward and
 * backward (no optimizer) and compares the loss (relative 1e-5), the row
 * statistics [B,3] and dlogits by NMSE = sum((v - c)^2) / sum(c^2) <= 1e-10.
 * Rows that are ignored (or whose label is outside [0,C)) must get exactly
 * zero gradient on Vulkan; every other row a non-zero one.
 *
 * Cases: 128 x 49152 and 640 x 49152 (126 MB of logits, just under
 * lavapipe's 128 MiB binding) with ignore_index and label smoothing; one row;
 * odd row counts with a vocabulary that is not a multiple of the workgroup;
 * a vocabulary below one subgroup; a label outside [0,C); -inf logits
 * (masked classes); every row ignored
 * (loss 0 and zero gradient, as the CPU). 1024 x 49152 (201 MB, paged over
 * several bindings, checked) runs with the argument "big" (ctest
 * test_vk_ce_big, about 1.5 GB of host memory).
 *
 * Every case runs with ce_rows reducing by subgroup operations (where the
 * device has them) and again by the shared-memory tree.
 *
 * Skips (exit 77) without a Vulkan device.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "backend/vulkan/vk_util.h"
#include "session/session.h"

typedef struct ce_case {
    const char *name;
    int64_t B, C;
    bool ignore;      /* ignore_index = -100 on every 4th row (all rows when B <= 3) */
    float smoothing;
    bool bad_label;   /* row 1 gets label C (outside [0,C), counted, zero term) */
    bool neg_inf;     /* every third logit but the label's is -inf (masked classes) */
} ce_case;

static mn_device *g_dev;

/* Logits with a few large entries per row (a peaked softmax) and labels
 * spread over the vocabulary, from a fixed LCG. */
static void fill_case(const ce_case *k, float *x, int32_t *lab) {
    uint32_t s = (uint32_t)(k->B * 131 + k->C);
    for (int64_t i = 0; i < k->B * k->C; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((double)(s >> 8) / 16777216.0 * 8.0 - 4.0);
        if ((s >> 4) % 997 == 0) x[i] += 12.0f;
    }
    for (int64_t b = 0; b < k->B; b++) {
        s = s * 1664525u + 1013904223u;
        lab[b] = (int32_t)((s >> 8) % (uint32_t)k->C);
        if (k->ignore && (b % 4 == 2 || k->B <= 3)) lab[b] = -100;
    }
    if (k->bad_label && k->B > 1) lab[1] = (int32_t)k->C;
    for (int64_t b = 0; k->neg_inf && b < k->B; b++)
        for (int64_t j = 0; j < k->C; j += 3)
            if (j != lab[b]) x[b * k->C + j] = -INFINITY;
}

typedef struct ce_graph {
    mn_graph *g;
    mn_tensor logits, loss, rows;
} ce_graph;

static bool build(const ce_case *k, ce_graph *cg) {
    memset(cg, 0, sizeof *cg);
    mn_tensor lab;
    const int64_t ls[2] = {k->B, k->C}, bs[1] = {k->B};
    const mn_cross_entropy_params p = {k->ignore, -100, k->smoothing};
    mn_status st = mn_graph_create(&cg->g);
    if (!st) st = mn_graph_input(cg->g, &lab, "labels", MN_I32, 1, bs);
    if (!st) st = mn_graph_param(cg->g, &cg->logits, "logits", 2, ls, (mn_init){MN_INIT_ZEROS, 0, 0});
    if (!st) st = mn_cross_entropy_ex(cg->g, &cg->loss, cg->logits, lab, &p);
    if (!st) st = mn_graph_loss(cg->g, cg->loss);
    CHECK_OK(st, mn_graph_error(cg->g));
    if (st) return false;
    cg->rows = graph_handle(cg->g, cg->g->nodes[graph_id(cg->loss)].in[2]);
    return true;
}

static mn_session *open_session(const ce_graph *cg, mn_backend_kind be, const float *x, const int32_t *lab,
                                int64_t B, int64_t C) {
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    o.backend = be;
    o.device = be == MN_BACKEND_VULKAN ? g_dev : NULL;
    session_internal_options io = {.grads_only = true};
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, cg->g, &o, &io);
    if (!st) st = mn_session_set_param(s, "logits", x, (size_t)(B * C));
    if (!st) st = mn_session_set_input(s, "labels", lab, (size_t)B * 4);
    if (!st) st = session_forward_backward(s);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

/* The gradient rows: exactly zero where the label is ignored or out of
 * range, non-zero elsewhere (with more than one column). */
static bool zero_rows_ok(const ce_case *k, const float *dx, const int32_t *lab) {
    bool ok = true;
    for (int64_t b = 0; b < k->B; b++) {
        const bool zero = lab[b] == -100 || lab[b] < 0 || lab[b] >= k->C;
        double a = 0;
        for (int64_t j = 0; j < k->C; j++) a += fabs((double)dx[b * k->C + j]);
        if (zero ? a != 0 : a == 0 && k->C > 1) { /* one column: softmax = target, dx = 0 */
            CHECK_MSG(false, "%s: row %lld (label %d) has gradient sum |dx| = %g", k->name, (long long)b,
                      (int)lab[b], a);
            ok = false;
        }
    }
    return ok;
}

static void run_case(const ce_case *k) {
    const size_t n = (size_t)(k->B * k->C);
    float *x = malloc(n * 4), *gv = malloc(n * 4), *gc = malloc(n * 4);
    float *rv = malloc((size_t)k->B * 12), *rc = malloc((size_t)k->B * 12);
    int32_t *lab = malloc((size_t)k->B * 4);
    ce_graph cg;
    if (!x || !gv || !gc || !rv || !rc || !lab || !build(k, &cg)) {
        CHECK_MSG(false, "%s: setup failed", k->name);
        goto out;
    }
    fill_case(k, x, lab);
    mn_session *sv = open_session(&cg, MN_BACKEND_VULKAN, x, lab, k->B, k->C);
    mn_session *sc = sv ? open_session(&cg, MN_BACKEND_CPU, x, lab, k->B, k->C) : NULL;
    if (sv && sc) {
        float lv = NAN, lc = NAN;
        CHECK_OK(session_read_f32(sv, cg.loss, &lv, 1), mn_session_error(sv));
        CHECK_OK(session_read_f32(sc, cg.loss, &lc, 1), mn_session_error(sc));
        CHECK_OK(session_read_f32(sv, cg.rows, rv, (size_t)k->B * 3), mn_session_error(sv));
        CHECK_OK(session_read_f32(sc, cg.rows, rc, (size_t)k->B * 3), mn_session_error(sc));
        const int32_t dv = session_grad_of(sv, cg.logits), dc = session_grad_of(sc, cg.logits);
        CHECK(dv != MN_NONE && dc != MN_NONE);
        if (dv != MN_NONE && dc != MN_NONE) {
            CHECK_OK(session_read_f32(sv, dv, gv, n), mn_session_error(sv));
            CHECK_OK(session_read_f32(sc, dc, gc, n), mn_session_error(sc));
        }
        const double erows = th_nmse(rv, rc, (size_t)k->B * 3), egrad = th_nmse(gv, gc, n);
        const double eloss = fabs((double)lv - lc) / fmax(fabs(lc), 1e-30);
        const bool ok = isfinite(lc) && (eloss <= 1e-5 || lv == lc) && erows <= 1e-10 && egrad <= 1e-10;
        printf("  %-22s %5lld x %-6lld loss vulkan %.7f cpu %.7f (rel %.2e)  rows NMSE %.2e  dlogits NMSE %.2e  %s\n",
               k->name, (long long)k->B, (long long)k->C, lv, lc, eloss, erows, egrad, ok ? "ok" : "FAIL");
        CHECK_MSG(ok, "%s: Vulkan differs from the CPU", k->name);
        zero_rows_ok(k, gv, lab);
        /* logits over one binding (lavapipe: 128 MiB) must be paged */
        const bool paged = memplan_pages(&sv->plan, graph_id(cg.logits)) > 0;
        if ((uint64_t)n * 4 > sv->plan.chunk_bytes)
            CHECK_MSG(paged, "%s: logits of %zu bytes are not paged (chunk %llu)", k->name, n * 4,
                      (unsigned long long)sv->plan.chunk_bytes);
        if (paged)
            printf("  %-22s logits paged over %llu bindings\n", k->name,
                   (unsigned long long)memplan_pages(&sv->plan, graph_id(cg.logits)));
    }
    mn_session_destroy(sv);
    mn_session_destroy(sc);
    mn_graph_destroy(cg.g);
out:
    free(x), free(gv), free(gc), free(rv), free(rc), free(lab);
}

/* Every row ignored: the loss is 0 (the CPU's convention; PyTorch gives NaN)
 * and so is every gradient. */
static void all_ignored(void) {
    const ce_case k = {"all_ignored", 3, 70, true, 0.1f, false, false};
    float x[210], d[210];
    int32_t lab[3];
    ce_graph cg;
    if (!build(&k, &cg)) return;
    fill_case(&k, x, lab);
    mn_session *sv = open_session(&cg, MN_BACKEND_VULKAN, x, lab, k.B, k.C);
    if (sv) {
        float l = NAN;
        CHECK_OK(session_read_f32(sv, cg.loss, &l, 1), mn_session_error(sv));
        CHECK_MSG(l == 0.0f, "all rows ignored: loss %g, want 0", l);
        const int32_t dv = session_grad_of(sv, cg.logits);
        CHECK(dv != MN_NONE && session_read_f32(sv, dv, d, 210) == MN_OK);
        zero_rows_ok(&k, d, lab);
        printf("  %-22s %5d x %-6d loss %g, gradient zero\n", k.name, 3, 70, l);
    }
    mn_session_destroy(sv);
    mn_graph_destroy(cg.g);
}

int main(int argc, char **argv) {
    g_dev = th_require_vulkan();
    if (!g_dev) return th_finish("test_vk_ce");
    static const ce_case cases[] = {
        {"smollm_128", 128, 49152, false, 0.0f, false, false},
        {"smollm_640_ignore_smooth", 640, 49152, true, 0.1f, false, false},
        {"one_row", 1, 49152, false, 0.0f, false, false},
        {"odd_rows_ignore", 7, 1000, true, 0.0f, true, false},
        {"odd_rows_smooth", 33, 300, false, 0.25f, true, false},
        {"tiny_vocab", 5, 3, true, 0.1f, false, false},
        {"one_column", 3, 1, false, 0.0f, false, false},
        {"masked_neg_inf", 9, 4099, true, 0.0f, false, true},
    };
    static const ce_case big = {"smollm_1024_paged", 1024, 49152, true, 0.1f, false, false};
    /* ce_rows reduces with subgroup operations where the device has them:
     * the cases run that way, then again with the shared-memory tree */
    vk_caps *caps = &((vk_ctx *)g_dev->impl)->caps;
    const bool sg = caps->subgroup_arith;
    for (int pass = 0; pass < (sg ? 2 : 1); pass++) {
        caps->subgroup_arith = sg && pass == 0;
        printf("ce_rows reduction: %s\n", caps->subgroup_arith ? "subgroup operations" : "shared-memory tree");
        if (argc > 1 && !strcmp(argv[1], "big")) {
            run_case(&big);
        } else {
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
            all_ignored();
        }
    }
    mn_device_close(g_dev);
    return th_finish("test_vk_ce");
}
