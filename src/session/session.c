/* session.c - builds a session from a graph (autodiff, optimizer, passes,
 * schedule, memory plan, backend) and runs it: inputs, step, run, outputs,
 * parameters.
 *
 * Checkpoints are in checkpoint.c. Does not: contain kernels or device code.
 */
#include "session/session.h"

#include <math.h>

#include "autodiff/autodiff.h"
#include "graph/attrs.h"
#include "graph/pointwise.h"
#include "io/safetensors.h"
#include "optim/optim.h"
#include "passes/passes.h"

static mn_status fail(mn_session *s, mn_status st, const char *fmt, ...) MN_PRINTF(3, 4);
static mn_status fail(mn_session *s, mn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Dynamic loss scaling: the settings checked, defaults filled in (s->ls). */
static bool pow2f(float x) {
    int e;
    return isfinite(x) && x > 0 && frexpf(x, &e) == 0.5f;
}
#define LOSS_SCALE_MAX 18446744073709551616.0f /* 2^64: beyond it the f32 sum of squares overflows at once */
static mn_status loss_scale_settings(mn_session *s, const mn_loss_scale *in) {
    mn_loss_scale c = *in;
    if (c.growth == 0.0f) c.growth = 2.0f;
    if (c.backoff == 0.0f) c.backoff = 0.5f;
    if (c.interval == 0) c.interval = 2000;
    if (!pow2f(c.init) || c.init < 1.0f || c.init > LOSS_SCALE_MAX)
        return fail(s, MN_E_INVALID, "session: loss_scale.init %g must be a power of two in [1, 2^64] (0: no scaling)",
                    (double)c.init);
    if (!pow2f(c.growth) || c.growth <= 1.0f)
        return fail(s, MN_E_INVALID, "session: loss_scale.growth %g must be a power of two above 1 (0: 2)",
                    (double)c.growth);
    if (!pow2f(c.backoff) || c.backoff >= 1.0f)
        return fail(s, MN_E_INVALID, "session: loss_scale.backoff %g must be a power of two below 1 (0: 0.5)",
                    (double)c.backoff);
    if (c.interval < 1)
        return fail(s, MN_E_INVALID, "session: loss_scale.interval %d must be >= 1 (0: 2000)", c.interval);
    if (s->opt.nonfinite != MN_NONFINITE_SKIP)
        return fail(s, MN_E_INVALID, "session: loss scaling skips the steps whose scaled gradients overflow; it needs "
                    "nonfinite = skip (the default), not %s",
                    s->opt.nonfinite == MN_NONFINITE_APPLY ? "apply" : "unchecked");
    s->ls = c;
    s->ls_scale = c.init;
    return MN_OK;
}

mn_session_options mn_session_default_options(void) {
    mn_session_options o;
    memset(&o, 0, sizeof o);
    o.backend = MN_BACKEND_CPU;
    o.mode = MN_MODE_INFERENCE;
    o.optim = mn_optimizer_default(MN_OPTIM_ADAMW);
    o.seed = 0;
    return o;
}

const char *mn_precision_name(mn_precision p) {
    switch (p) {
    case MN_PRECISION_STRICT: return "strict";
    case MN_PRECISION_FAST_BF16: return "bf16";
    case MN_PRECISION_FAST_F16: return "f16";
    default: return "?";
    }
}

/* The fast contract: every contraction and attention node of the session's
 * graph (the user's and those autodiff added: the backward products and
 * attention's backward) rounds its operands (op_rounds16). */
static void mark_precision(mn_graph *g, mn_precision p) {
    if (p == MN_PRECISION_STRICT) return;
    const uint32_t f = p == MN_PRECISION_FAST_BF16 ? NODE_F_ROUND_BF16 : NODE_F_ROUND_F16;
    for (int32_t i = 0; i < g->n; i++)
        if (op_rounds16(g->nodes[i].op)) g->nodes[i].flags |= f;
}

/* Whether the product n is one a cooperative-matrix GEMM takes: at least
 * one 16 x 16 fragment each way and 2^18 multiply-adds (vk_gen_coopmat.c's
 * floor); every convolution. */
static bool cast_sized(const mn_graph *g, const node *n) {
    if (n->op != OP_MATMUL) return true;
    const node *a = &g->nodes[n->in[0]];
    const mn_matmul_attrs at = matmul_attrs_of(n);
    const int64_t M = n->rank >= 2 ? n->shape[n->rank - 2] : 1, N = n->shape[n->rank - 1];
    const int64_t K = a->rank >= 2 ? a->shape[at.trans_a ? a->rank - 2 : a->rank - 1] : a->shape[0];
    return M >= 16 && N >= 16 && M * N * K >= ((int64_t)1 << 18);
}

/* The fast contract's operands rounded once, by cast nodes, where the
 * device multiplies them on cooperative matrices (backend casts_operands)
 * or MEGANEURA_FAST_CAST=1 asks for it on any device of such a backend
 * (0: never; the CPU reference never casts): each operand of a
 * large product (both, never a bias), and q, k, v, dout of every
 * attention kernel, becomes cast(x, bf16 / f16), one
 * cast per tensor shared by all its products, so that the GEMM converts
 * exactly representable values (no per-element rounding in its loads,
 * which costs as much as the products on tensor cores) and each element is
 * rounded once instead of once per tile that reads it. Where the backend
 * packs them (packs_operands) each cast is stored two values a word
 * (NODE_F_PACK16): half the bytes of the operand, half the GEMM's reads.
 * The casts are
 * appended (g->sched_pre): the schedule runs each right before its first
 * consumer. A tensor read by products of the forward pass (ids below nfwd)
 * and of the backward pass shares one cast between both when the backward
 * reads it only through casts, or it is a parameter: the 16-bit copy is
 * then what the step saves (half the bytes of the f32 tensor, which dies
 * after the cast) and the backward reads nothing again. A tensor the
 * backward also reads itself (attention's output, for its row sums) gets
 * one cast for each pass, so the forward's copy dies after the forward's
 * products instead of living, beside the saved f32 tensor, until the
 * backward pass. The values are those the products rounded themselves
 * (rounding is idempotent): the CPU reference still rounds, to the same
 * bits. */
static bool casts_slot(const mn_graph *g, int32_t i, int j, bool *attn) {
    const node *n = &g->nodes[i];
    *attn = op_rounds16(n->op) && op_fuse_class(n->op) != FUSE_MATMUL;
    if (!*attn && (op_fuse_class(n->op) != FUSE_MATMUL || !cast_sized(g, n))) return false;
    return j < (*attn ? node_round_ins(n) : 2) && j < n->nin;
}

static mn_status round_by_cast(mn_session *s, mn_graph *g, mn_precision p, int32_t nfwd) {
    if (p == MN_PRECISION_STRICT) return MN_OK;
    const mn_round16 rnd = p == MN_PRECISION_FAST_BF16 ? MN_ROUND_BF16 : MN_ROUND_F16;
    const char *e = getenv("MEGANEURA_FAST_CAST");
    bool on;
    if (e && *e && strcmp(e, "auto")) {
        if (strcmp(e, "0") && strcmp(e, "1"))
            return fail(s, MN_E_INVALID, "session: MEGANEURA_FAST_CAST='%s': want auto, 0 or 1", e);
        on = e[0] == '1' && s->be->casts_operands; /* never the CPU reference */
    } else {
        on = s->device && s->device->impl && s->be->casts_operands && s->be->casts_operands(s->device->impl, (int)rnd);
    }
    /* packed (two values a word) where the backend's kernels take that form
     * and the packed tensor fits one binding (a paged operand stays an f32
     * container); MEGANEURA_CAST_STORAGE=f32 keeps every cast in f32 */
    const char *cs = getenv("MEGANEURA_CAST_STORAGE");
    if (cs && *cs && strcmp(cs, "packed") && strcmp(cs, "f32"))
        return fail(s, MN_E_INVALID, "session: MEGANEURA_CAST_STORAGE='%s': want packed or f32", cs);
    if (!on) return MN_OK;
    const bool pack = s->be->packs_operands && !(cs && !strcmp(cs, "f32"));
    const uint64_t pack_max = !pack ? 0
                              : s->be->max_binding && s->device && s->device->impl ? s->be->max_binding(s->device->impl)
                                                                                  : UINT64_MAX;
    const int32_t n0 = g->n;
    int32_t *cast_of = malloc((size_t)n0 * 2 * sizeof *cast_of); /* [tensor][forward, backward] */
    if (!cast_of) return fail(s, MN_E_NOMEM, "session: out of memory");
    for (int32_t i = 0; i < n0 * 2; i++) cast_of[i] = MN_NONE;
    const mn_dtype dt = rnd == MN_ROUND_BF16 ? MN_BF16 : MN_F16;
    const bool raw = g->raw_ids;
    g->raw_ids = true; /* library stage: handles are node indices */
    /* other[t]: reads of t by a slot no cast replaces (or t is pinned);
     * a view with none (autodiff's K split of a weight gradient reshapes
     * the activation) is read through its input's cast: reshape(cast(x)),
     * the same values, so that x's cast is shared. bwd_reads[t]: the
     * backward reads t in f32, itself or through a view that cannot. */
    int32_t *other = calloc((size_t)n0 + 1, sizeof *other), *view_of = malloc((size_t)n0 * 2 * sizeof *view_of);
    bool *bwd_reads = calloc((size_t)n0 + 1, sizeof *bwd_reads);
    if (!bwd_reads || !other || !view_of) {
        free(cast_of), free(other), free(view_of), free(bwd_reads);
        return fail(s, MN_E_NOMEM, "session: out of memory");
    }
    for (int32_t i = 0; i < n0 * 2; i++) view_of[i] = MN_NONE;
    bool attn;
    for (int32_t i = 0; i < n0; i++) {
        if (g->nodes[i].flags & (NODE_F_OUTPUT | NODE_F_LOSS | NODE_F_READ | NODE_F_SYNC)) other[i]++;
        for (int j = 0; j < g->nodes[i].nin; j++)
            if (!casts_slot(g, i, j, &attn)) other[g->nodes[i].in[j]]++;
    }
#define CAST_VIEW(t) (g->nodes[t].op == OP_RESHAPE && !other[t])
    for (int32_t i = nfwd; i < n0; i++)
        for (int j = 0; j < g->nodes[i].nin; j++)
            if (!casts_slot(g, i, j, &attn) && !CAST_VIEW(i)) bwd_reads[g->nodes[i].in[j]] = true;
    mn_status st = MN_OK;
    for (int32_t i = 0; i < n0 && !st; i++) {
        const op_id op = g->nodes[i].op;
        /* the backward's attention_lse takes the forward's casts: its inputs
         * stay the forward's, whose kernel writes it (kir's saved lse) */
        const bool bwd = i >= nfwd && op != OP_ATTENTION_LSE;
        for (int j = 0; j < g->nodes[i].nin && !st; j++) {
            if (!casts_slot(g, i, j, &attn)) continue;
            int32_t x = g->nodes[i].in[j];
            const int32_t v = CAST_VIEW(x) && g->nodes[x].in[0] < n0 ? x : MN_NONE;
            if (v != MN_NONE) x = g->nodes[v].in[0];
            const node *xn = &g->nodes[x];
            if ((xn->op == OP_CAST && xn->dtype == dt) || xn->dtype == MN_I32) continue;
            const int pass = bwd && (bwd_reads[x] && xn->op != OP_PARAM);
            int32_t *memo = &cast_of[(size_t)x * 2 + pass];
            if (*memo == MN_NONE) {
                mn_tensor c;
                if ((st = mn_cast(g, &c, x, dt))) break;
                node *cn = &g->nodes[c];
                /* packed for the GEMMs; attention's loads stay f32 words (a
                 * packed read would decode in their inner loops: unmeasured) */
                if (!attn) cn->flags |= NODE_F_PACK16;
                if (node_bytes(cn, 4) > pack_max) cn->flags &= ~(uint32_t)NODE_F_PACK16;
                *memo = c;
            }
            if (v != MN_NONE) { /* the view, of the cast: packed as the cast is */
                int32_t *vm = &view_of[(size_t)v * 2 + pass];
                if (*vm == MN_NONE) {
                    mn_tensor r;
                    const node vn = g->nodes[v];
                    if ((st = mn_reshape(g, &r, *memo, vn.rank, vn.shape))) break;
                    g->nodes[r].flags |= g->nodes[*memo].flags & NODE_F_PACK16;
                    *vm = r;
                }
                g->nodes[i].in[j] = *vm;
                continue;
            }
            g->nodes[i].in[j] = *memo; /* g->nodes may have moved: index again */
        }
    }
#undef CAST_VIEW
    g->raw_ids = raw;
    free(cast_of);
    free(bwd_reads);
    free(other);
    free(view_of);
    if (st) return fail(s, st, "session: %s", g->err);
    if (g->n > n0) g->sched_pre = n0;
    return MN_OK;
}

const char *mn_session_error(const mn_session *s) { return s ? s->err : "no session (out of memory?)"; }

static size_t real_size(const mn_session *s) { return s->iopt.f64 ? 8 : 4; }

/* ---- host <-> node transfers, converting f32 <-> storage ------------------ */

mn_status session_write_node(mn_session *s, int32_t id, const void *src, size_t bytes) {
    return s->be->write(s->bk, graph_id(id), src, bytes, s->err, sizeof s->err);
}

mn_status session_read_node(mn_session *s, int32_t id, void *dst, size_t bytes) {
    return s->be->read(s->bk, graph_id(id), dst, bytes, s->err, sizeof s->err);
}

/* f32 host values of a float node, or raw int32 for i32 nodes. */
mn_status session_write_f32(mn_session *s, int32_t id, const void *src, size_t count) {
    id = graph_id(id);
    const node *n = &s->g->nodes[id];
    if (!s->iopt.f64 || n->dtype == MN_I32) return session_write_node(s, id, src, count * 4);
    double *tmp = malloc(count * sizeof *tmp + 1);
    if (!tmp) return fail(s, MN_E_NOMEM, "out of memory converting '%s'", n->name ? n->name : "tensor");
    for (size_t i = 0; i < count; i++) tmp[i] = ((const float *)src)[i];
    mn_status st = session_write_node(s, id, tmp, count * 8);
    free(tmp);
    return st;
}

mn_status session_read_f32(mn_session *s, int32_t id, void *dst, size_t count) {
    id = graph_id(id);
    const node *n = &s->g->nodes[id];
    if (!s->iopt.f64 || n->dtype == MN_I32) return session_read_node(s, id, dst, count * 4);
    double *tmp = malloc(count * sizeof *tmp + 1);
    if (!tmp) return fail(s, MN_E_NOMEM, "out of memory converting '%s'", n->name ? n->name : "tensor");
    mn_status st = session_read_node(s, id, tmp, count * 8);
    if (!st)
        for (size_t i = 0; i < count; i++) ((float *)dst)[i] = (float)tmp[i];
    free(tmp);
    return st;
}

/* ---- building ---------------------------------------------------------------- */

static void dump_env(mn_session *s) {
    const char *d = getenv("MEGANEURA_DUMP");
    if (!d) return;
    if (strstr(d, "graph")) mn_session_dump(s, "graph", stderr);
    if (strstr(d, "schedule")) mn_session_dump(s, "schedule", stderr);
    if (strstr(d, "memplan")) mn_session_dump(s, "memplan", stderr);
    if (strstr(d, "kernels")) mn_session_dump(s, "kernels", stderr);
}

/* An upper bound, tight to a few bytes per tensor, of the JSON header of
 * this session's checkpoints (checkpoint.c: parameters, and optimizer state
 * in training sessions, plus the fixed and the user's metadata), as
 * io/safetensors.c writes it with cJSON:
 *   "name":{"dtype":"F32","shape":[d,...],"data_offsets":[a,b]},
 * A name's '"' and '\\' are escaped (control characters are refused by the
 * graph); an offset has at most the digits of the data section's size.
 * Metadata may hold control characters (6 bytes each as \u00XX). */
static uint64_t meta_cost(const char *k, const char *v) { return 6 * ((uint64_t)strlen(k) + strlen(v)) + 8; }

static uint64_t digits(uint64_t v) {
    uint64_t d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

static bool saved_in_checkpoint(const mn_session *s, const node *n) {
    return n->name && (n->op == OP_PARAM ||
                       (n->op == OP_STATE && (n->flags & NODE_F_OPTIM) && s->opt.mode == MN_MODE_TRAINING));
}

uint64_t session_header_bound(const mn_session *s) {
    uint64_t total = 512, data = 0; /* braces, format and meganeura.* metadata */
    for (int i = 0; i < s->nmeta; i++) total += meta_cost(s->meta[2 * i], s->meta[2 * i + 1]);
    for (int32_t i = 0; i < s->g->n; i++)
        if (saved_in_checkpoint(s, &s->g->nodes[i])) data += (uint64_t)node_numel(&s->g->nodes[i]) * 4;
    const uint64_t off_digits = 2 * digits(data);
    for (int32_t i = 0; i < s->g->n; i++) {
        const node *n = &s->g->nodes[i];
        if (!saved_in_checkpoint(s, n)) continue;
        uint64_t len = 56 + off_digits; /* quotes, keys, brackets, commas */
        for (const char *c = n->name; *c; c++) len += (*c == '"' || *c == '\\') ? 2 : 1;
        for (int d = 0; d < n->rank; d++) len += digits((uint64_t)n->shape[d]) + 1;
        total += len;
    }
    return total;
}

/* A training step writes the parameters after computing the loss, and the
 * loss is read after the step: a loss that shares a parameter's storage
 * (the parameter itself or a RESHAPE view of it) becomes a copy made in the
 * forward pass, so mn_session_loss reports what the step computed. */
static mn_status loss_own_storage(mn_graph *g) {
    int32_t r = g->loss;
    while (op_has(g->nodes[r].op, OPF_VIEW)) r = g->nodes[r].in[0];
    if (g->nodes[r].op != OP_PARAM) return MN_OK;
    const bool raw = g->raw_ids;
    mn_tensor c;
    g->raw_ids = true; /* library stage: handles are node indices */
    mn_status st = mn_scale(g, &c, g->loss, 1.0f);
    g->raw_ids = raw;
    if (st) return st;
    g->nodes[c].flags |= NODE_F_LOSS;
    g->loss = c;
    return MN_OK;
}

/* The memory plan's parallel regions of the multi-update kernels (kir.h):
 * lanes parameter, gradient, then the state tensors (momentum; m, v). */
static mn_status parallel_regions(const mn_session *s, memplan_parallel **par, int32_t **lanes) {
    const kir *k = &s->kernels;
    *par = NULL;
    *lanes = NULL;
    if (!k->nmulti) return MN_OK;
    size_t total = 0;
    for (int32_t i = 0; i < k->nmulti; i++) total += (size_t)k->multi[i].n * MP_MAX_LANES;
    *par = calloc((size_t)k->nmulti, sizeof **par);
    *lanes = malloc(total * sizeof **lanes);
    if (!*par || !*lanes) return MN_E_NOMEM;
    size_t at = 0;
    for (int32_t i = 0; i < k->nmulti; i++) {
        const kir_multi *m = &k->multi[i];
        const int nl = s->g->nodes[m->root].op == OP_ADAM_UPDATE ? 4 : 3;
        (*par)[i] = (memplan_parallel){m->n, nl, *lanes + at};
        for (int32_t j = 0; j < m->n; j++) {
            const node *u = &s->g->nodes[k->multi_ids[m->first + j]];
            (*lanes)[at++] = u->in[0];
            (*lanes)[at++] = u->in[1];
            for (int l = 2; l < nl; l++) (*lanes)[at++] = u->in[l];
        }
    }
    return MN_OK;
}

static void print_phases(const mn_session *s, double total_ms) {
    const char *pe = getenv("MEGANEURA_PROFILE");
    if (!pe || !*pe || !strcmp(pe, "0")) return;
    const double *ph = s->phase_ms;
    fprintf(stderr, "meganeura session build %.1f ms: graph passes %.1f, schedule %.1f, device open %.1f, "
            "kernel groups %.1f, memory plan %.1f, backend %.1f, parameters computed %.1f, written %.1f\n",
            total_ms, ph[0], ph[1], ph[2], ph[3], ph[4], ph[5], ph[6], ph[7]);
}

static mn_status build(mn_session *s, const mn_graph *user) {
    mn_status st;
    const double t_start = mn_now_us();
    double tp = t_start;
#define PHASE(k) (s->phase_ms[k] += (mn_now_us() - tp) / 1e3, tp = mn_now_us())
    const mn_session_options *o = &s->opt;
    bool training = o->mode == MN_MODE_TRAINING;
    if (o->mode != MN_MODE_TRAINING && o->mode != MN_MODE_INFERENCE)
        return fail(s, MN_E_INVALID, "session: unknown mode %d", (int)o->mode);
    s->be = backend_for(o->backend);
    if (!s->be) {
        if (o->backend == MN_BACKEND_VULKAN)
            return fail(s, MN_E_UNSUPPORTED, "session: this build has no vulkan backend (configure with -DMN_VULKAN=ON); use cpu");
        return fail(s, MN_E_INVALID, "session: unknown backend %d", (int)o->backend);
    }
    if (o->device) {
        if (o->device->dead) return fail(s, MN_E_STATE, "session: the device failed to open: %s", o->device->err);
        if (o->device->kind != o->backend)
            return fail(s, MN_E_INVALID, "session: the device belongs to backend %s, the session asks for %s",
                        backend_for(o->device->kind) ? backend_for(o->device->kind)->name : "?", s->be->name);
        s->device = o->device;
        s->device->refs++;
    }
    if (training && !s->iopt.grads_only && (st = optim_validate(&o->optim, s->err, sizeof s->err))) return st;
    if ((int)o->nonfinite < MN_NONFINITE_SKIP || o->nonfinite > MN_NONFINITE_UNCHECKED)
        return fail(s, MN_E_INVALID, "session: unknown nonfinite policy %d (skip, apply, unchecked)", (int)o->nonfinite);
    if ((st = session_dist_validate(s, s->err, sizeof s->err))) return st;
    if ((int)o->precision < MN_PRECISION_STRICT || o->precision > MN_PRECISION_FAST_F16)
        return fail(s, MN_E_INVALID, "session: unknown precision %d (strict, fast bf16, fast f16)", (int)o->precision);
    const bool scaled = training && !s->iopt.grads_only && o->loss_scale.init != 0.0f;
    if (scaled && (st = loss_scale_settings(s, &o->loss_scale))) return st;
    if (user->n == 0) return fail(s, MN_E_INVALID, "session: the graph is empty");
    if ((st = graph_clone(&s->g, user))) return fail(s, st, "session: out of memory copying the graph");
    /* inference sessions keep the graph as given: mn_session_export_bundle writes it */
    if (!training && (st = graph_clone(&s->user, user))) return fail(s, st, "session: out of memory copying the graph");
    mn_graph *g = s->g;
    s->nuser = g->n;
    int32_t nfwd = g->n; /* the forward pass's nodes: ids below */
    if (!training) graph_dropout_to_identity(g); /* dropout is the identity in inference */
    if (training) {
        if (g->loss == MN_NONE)
            return fail(s, MN_E_STATE, "session: training needs a loss (mn_graph_loss)");
        if ((st = loss_own_storage(g))) return fail(s, st, "%s", g->err);
        if (scaled) { /* the backward pass starts from d loss = scale, written before each step */
            const node *ln = &g->nodes[g->loss];
            if ((st = graph_source(g, &s->ls_input, OP_INPUT, LOSS_SCALE_NAME, MN_F32, ln->rank, ln->shape, true)))
                return fail(s, st, "%s", g->err);
            g->nodes[s->ls_input].flags |= NODE_F_HOST;
        }
        nfwd = g->n; /* autodiff's nodes and the optimizer's from here */
        if ((st = autodiff_build(g, g->loss, s->ls_input, &s->grads))) return fail(s, st, "%s", g->err);
        if (!s->iopt.grads_only &&
            (st = optim_build(g, s->grads, s->nuser, &o->optim, o->nonfinite, s->ls_input, &s->gate)))
            return fail(s, st, "%s", g->err);
        s->hyper = graph_find(g, OPTIM_HYPER_NAME);
        if (!s->iopt.grads_only) session_dist_mark(s);
    }
    mark_precision(g, o->precision);
    /* the device first (the session's own when none is shared): whether it
     * multiplies on cooperative matrices decides the operand casts; its
     * limit on one binding is the memory plan's chunk size and bounds the
     * multi-tensor kernels' regions */
    const bool plan_only = s->iopt.plan_only;
    PHASE(0);
    if (!plan_only && !s->device && s->be->device_open && (st = mn_device_open(&s->device, o->backend)))
        return fail(s, st, "%s", s->device ? s->device->err : "session: out of memory opening the device");
    PHASE(2);
    if ((st = round_by_cast(s, g, o->precision, nfwd))) return st;
    /* names and counts that no checkpoint header could hold fail now, not
     * at the first save after hours of training */
    const uint64_t hlimit = s->iopt.header_limit ? s->iopt.header_limit : ST_MAX_HEADER_BYTES;
    const uint64_t hbound = session_header_bound(s);
    if (hbound > hlimit)
        return fail(s, MN_E_INVALID, "session: a checkpoint of this model needs a safetensors header of up to %llu "
                    "bytes, above the %llu-byte limit (fewer parameters or shorter names)",
                    (unsigned long long)hbound, (unsigned long long)hlimit);
    /* roots: outputs, loss, every source the user declared, optimizer updates,
     * and (grads_only) parameter gradients */
    /* at most: every node as an output/loss, every node again as a source or
     * update (a source may also be an output), and one gradient per user node */
    int32_t *roots = malloc(((size_t)g->n * 2 + (size_t)s->nuser) * sizeof *roots);
    uint8_t *live = malloc((size_t)g->n), *fwd = malloc((size_t)g->n);
    int32_t nr = 0, nf = 0;
    if (!roots || !live || !fwd) {
        free(roots), free(live), free(fwd);
        return fail(s, MN_E_NOMEM, "session: out of memory");
    }
    for (int32_t i = 0; i < g->n; i++) {
        const node *n = &g->nodes[i];
        /* side effects of inference (a KV-cache append writes persistent
         * state): they run in run and step even when no output reads them */
        if ((n->flags & (NODE_F_OUTPUT | NODE_F_LOSS)) || op_has(n->op, OPF_ROOT_RUN)) roots[nr++] = i;
    }
    nf = nr;
    passes_mark_live(g, roots, nf, fwd);
    for (int32_t i = 0; i < g->n; i++) {
        const node *n = &g->nodes[i];
        /* side effects of steps (optimizer updates, running statistics);
         * the step gate, read after each step */
        if (op_has(n->op, OPF_SOURCE | OPF_ROOT) || (n->flags & NODE_F_READ)) roots[nr++] = i;
    }
    if (s->iopt.grads_only && s->grads)
        for (int32_t i = 0; i < s->nuser; i++)
            if (g->nodes[i].op == OP_PARAM && s->grads[i] != MN_NONE) roots[nr++] = s->grads[i];
    passes_mark_live(g, roots, nr, live);
    free(roots);
    if (s->iopt.grads_only && s->grads) /* keep gradients readable: pin them like outputs */
        for (int32_t i = 0; i < s->nuser; i++)
            if (g->nodes[i].op == OP_PARAM && s->grads[i] != MN_NONE) g->nodes[s->grads[i]].flags |= NODE_F_OUTPUT;
    PHASE(0);
    st = schedule_build(&s->sched, g, live, fwd);
    PHASE(1);
    const uint64_t chunk = st ? 0 : plan_only ? s->iopt.plan_chunk
                           : s->be->max_binding && s->device && s->device->impl ? s->be->max_binding(s->device->impl) : 0;
    if (!st) {
        kir_options ko;
        char kerr[200];
        if ((st = kir_options_from_env(&ko, s->be->fuse_pointwise, kerr, sizeof kerr))) {
            fail(s, st, "session: %s", kerr);
        } else {
            ko.multi_bytes = memplan_chunk(g, live, chunk, real_size(s));
            ko.fuse_store16 = ko.fuse_store16 && s->be->stores16 && s->device && s->device->impl &&
                              s->be->stores16(s->device->impl);
            st = kir_build(&s->kernels, g, &s->sched, &ko);
        }
    }
    PHASE(3);
    memplan_parallel *par = NULL;
    int32_t *lanes = NULL;
    if (!st && (st = parallel_regions(s, &par, &lanes))) fail(s, st, "session: out of memory");
    if (!st) {
        memplan_options mo = {real_size(s), !s->iopt.no_reuse, chunk, s->kernels.fused ? s->kernels.root : NULL,
                              par, s->kernels.nmulti};
        st = memplan_build(&s->plan, g, s->sched.order, s->sched.n, live, &mo, s->err, sizeof s->err);
    }
    free(par);
    free(lanes);
    free(live);
    free(fwd);
    PHASE(4);
    if (st) return st == MN_E_NOMEM && !s->err[0] ? fail(s, st, "session: out of memory") : st;
    if (plan_only) {
        dump_env(s);
        return MN_OK;
    }
    /* the backend keeps pointers into the program: it lives in the session */
    s->prog = (program){g, s->sched.order, s->sched.n, &s->plan, s->iopt.f64, s->device ? s->device->impl : NULL,
                        {0}, 0, s->kernels.fused ? s->kernels.root : NULL,
                        s->kernels.fused || s->kernels.nsaved ? s->kernels.kind : NULL, s->kernels.saved,
                        s->iopt.kernels, !training};
    if (s->gate != MN_NONE) s->prog.readback[s->prog.nreadback++] = s->gate;
    if (g->loss != MN_NONE) s->prog.readback[s->prog.nreadback++] = g->loss;
    if (s->iopt.f64 && o->backend != MN_BACKEND_CPU)
        return fail(s, MN_E_UNSUPPORTED, "session: f64 mode exists on the cpu backend only");
    if ((st = s->be->create(&s->bk, &s->prog, s->err, sizeof s->err))) return st;
    PHASE(5);
    if ((st = session_init_values(s))) return st; /* phases 6 and 7 */
    if (!s->iopt.grads_only && (st = session_dist_build(s)))
        return st == MN_E_NOMEM && !s->err[0] ? fail(s, st, "session: out of memory") : st;
    dump_env(s);
    print_phases(s, (mn_now_us() - t_start) / 1e3);
    return MN_OK;
#undef PHASE
}

mn_status session_create_ex(mn_session **out, const mn_graph *g, const mn_session_options *opt,
                            const session_internal_options *iopt) {
    if (!out) return MN_E_INVALID;
    mn_session *s = calloc(1, sizeof *s);
    *out = s;
    if (!s) return MN_E_NOMEM;
    s->hyper = MN_NONE;
    s->gate = MN_NONE;
    s->ls_input = MN_NONE;
    if (!g || !opt) {
        s->dead = true;
        return fail(s, MN_E_INVALID, "session: graph and options must not be NULL");
    }
    s->opt = *opt;
    if (iopt) s->iopt = *iopt;
    mn_status st = build(s, g);
    s->iopt.kernels = s->prog.kernels = NULL; /* the caller's, for the build only */
    if (st) s->dead = true;
    return st;
}

mn_status mn_session_create(mn_session **out, const mn_graph *g, const mn_session_options *opt) {
    return session_create_ex(out, g, opt, NULL);
}

void mn_session_destroy(mn_session *s) {
    if (!s) return;
    if (s->bk) s->be->destroy(s->bk);
    device_release(s->device);
    memplan_free(&s->plan);
    schedule_free(&s->sched);
    kir_free(&s->kernels);
    session_subsets_free(s);
    session_dist_free(s->dist);
    mn_graph_destroy(s->g);
    mn_graph_destroy(s->user);
    free(s->grads);
    free(s->host_bound);
    for (int i = 0; i < 2 * s->nmeta; i++) free(s->meta[i]);
    free(s->meta);
    free(s);
}

/* ---- running --------------------------------------------------------------- */

static mn_status alive(mn_session *s) {
    if (!s) return MN_E_INVALID;
    if (s->dead) {
        if (!s->err[0]) fail(s, MN_E_STATE, "session is not usable");
        return MN_E_STATE;
    }
    if (s->iopt.plan_only) return fail(s, MN_E_STATE, "session: a plan-only session runs nothing");
    return MN_OK;
}

static int32_t find_named(const mn_session *s, const char *name, op_id op_or_count) {
    if (!name) return MN_NONE;
    int32_t id = graph_find(s->g, name);
    if (id == MN_NONE) return MN_NONE;
    const node *n = &s->g->nodes[id];
    if (op_or_count == OP_COUNT) return id;
    if (op_or_count == OP_INPUT && (n->op != OP_INPUT || (n->flags & NODE_F_HOST))) return MN_NONE;
    if (op_or_count == OP_PARAM && n->op != OP_PARAM) return MN_NONE;
    return id;
}

mn_status mn_session_set_input(mn_session *s, const char *name, const void *data, size_t bytes) {
    mn_status st = alive(s);
    if (st) return st;
    int32_t id = find_named(s, name, OP_INPUT);
    if (id == MN_NONE) return fail(s, MN_E_NOT_FOUND, "set_input: no input named '%s'", name ? name : "(null)");
    if (s->host_bound && s->host_bound[id])
        return fail(s, MN_E_STATE, "set_input '%s': the input is bound to a host Vulkan buffer; write it there", name);
    const node *n = &s->g->nodes[id];
    const size_t count = (size_t)node_numel(n), want = count * mn_dtype_size(n->dtype);
    char sb[96];
    if (!data) return fail(s, MN_E_INVALID, "set_input '%s': data is NULL", name);
    if (bytes != want)
        return fail(s, MN_E_SHAPE, "set_input '%s': got %zu bytes, the input is %s %s = %zu bytes", name,
                    bytes, mn_dtype_name(n->dtype), shape_str(sb, sizeof sb, n->rank, n->shape), want);
    if (n->dtype != MN_F16 && n->dtype != MN_BF16) return session_write_f32(s, id, data, count);
    /* 16-bit values: decoded into the f32 container (exact) */
    float *tmp = malloc(count * sizeof *tmp + 1);
    if (!tmp) return fail(s, MN_E_NOMEM, "set_input '%s': out of memory converting %zu values", name, count);
    const uint16_t *h = data;
    for (size_t i = 0; i < count; i++) tmp[i] = n->dtype == MN_F16 ? mn_f16_decode(h[i]) : mn_bf16_decode(h[i]);
    st = session_write_f32(s, id, tmp, count);
    free(tmp);
    return st;
}

mn_status session_forward_backward(mn_session *s) {
    mn_status st = alive(s);
    if (st) return st;
    st = s->be->execute(s->bk, s->sched.order, s->sched.n, s->err, sizeof s->err);
    s->have_loss = st == MN_OK;
    return st;
}

mn_status mn_session_step(mn_session *s) {
    mn_status st = alive(s);
    if (st) return st;
    if (s->opt.mode != MN_MODE_TRAINING || s->iopt.grads_only)
        return fail(s, MN_E_STATE, "step: this is an inference session (use mn_session_run)");
    if (s->step == INT64_MAX) return fail(s, MN_E_STATE, "step: the step counter is at its maximum");
    float hyper[4];
    optim_hyper(&s->opt.optim, s->step, hyper);
    if ((st = session_write_f32(s, s->hyper, hyper, 4))) return st;
    if (s->ls_input != MN_NONE && (st = session_write_f32(s, s->ls_input, &s->ls_scale, 1))) return st;
    /* data parallel: forward + backward, all-reduce, updates (dist.c) */
    st = s->dist ? session_dist_step(s) : s->be->execute(s->bk, s->sched.order, s->sched.n, s->err, sizeof s->err);
    if (st) {
        s->have_loss = false;
        if (s->dist) s->dead = true; /* the ranks' sequence of all-reduces is broken */
        return st;
    }
    s->have_loss = true;
    if (s->gate != MN_NONE) { /* the non-finite check: one read of 2 values */
        float gate[2];
        if ((st = session_read_f32(s, s->gate, gate, 2))) return st;
        const int bad = (int)gate[1];
        if (bad == 2 && s->ls_input != MN_NONE && s->ls_scale > 1.0f) {
            /* the scaled gradients overflowed: the gate skipped the update;
             * a lower scale for the next step, and no error */
            const float was = s->ls_scale;
            s->ls_scale = s->ls_scale * s->ls.backoff < 1.0f ? 1.0f : s->ls_scale * s->ls.backoff;
            s->ls_good = 0;
            s->ls_overflows++;
            mn_logf(MN_LOG_INFO, "step %lld: the gradients overflowed at loss scale %g; update skipped, scale now %g",
                    (long long)s->step, (double)was, (double)s->ls_scale);
            return MN_OK;
        }
        if (bad != 0) {
            float loss = NAN;
            const bool skip = s->opt.nonfinite == MN_NONFINITE_SKIP;
            session_read_f32(s, s->g->loss, &loss, 1);
            fail(s, MN_E_NONFINITE, "step %lld: %s%s%s (loss %g); %s", (long long)s->step,
                 bad & 1 ? "the loss is not finite" : "", bad == 3 ? " and " : "",
                 bad & 2 ? "the gradients are not finite (their sum of squares is NaN or inf)" : "", (double)loss,
                 skip ? "the update was skipped: parameters, optimizer state and step count are unchanged"
                      : "the update was applied (nonfinite = apply)");
            if (!skip) s->step++;
            return MN_E_NONFINITE;
        }
    }
    if (s->ls_input != MN_NONE && ++s->ls_good >= s->ls.interval) {
        s->ls_good = 0;
        if (s->ls_scale * s->ls.growth <= LOSS_SCALE_MAX) s->ls_scale *= s->ls.growth;
    }
    s->step++;
    return MN_OK;
}

mn_status mn_session_run(mn_session *s) {
    mn_status st = alive(s);
    if (st) return st;
    st = s->be->execute(s->bk, s->sched.fwd, s->sched.nfwd, s->err, sizeof s->err);
    s->have_loss = st == MN_OK;
    return st;
}

mn_status mn_session_loss(mn_session *s, float *out) {
    mn_status st = alive(s);
    if (st) return st;
    if (!out) return fail(s, MN_E_INVALID, "loss: out is NULL");
    if (s->g->loss == MN_NONE) return fail(s, MN_E_STATE, "loss: the graph has no loss");
    if (!s->have_loss) return fail(s, MN_E_STATE, "loss: no step or run has completed yet");
    return session_read_f32(s, s->g->loss, out, 1);
}

mn_status mn_session_output(mn_session *s, const char *name, void *dst, size_t bytes) {
    mn_status st = alive(s);
    if (st) return st;
    int32_t id = find_named(s, name, OP_COUNT);
    if (id == MN_NONE || !(s->g->nodes[id].flags & (NODE_F_OUTPUT | NODE_F_LOSS)))
        return fail(s, MN_E_NOT_FOUND, "output: no output named '%s'", name ? name : "(null)");
    if (s->host_bound && s->host_bound[id])
        return fail(s, MN_E_STATE, "output '%s': the output is bound to a host Vulkan buffer; read it there", name);
    const node *n = &s->g->nodes[id];
    const size_t count = (size_t)node_numel(n), want = count * mn_dtype_size(n->dtype);
    char sb[96];
    if (!dst) return fail(s, MN_E_INVALID, "output '%s': dst is NULL", name);
    if (bytes != want)
        return fail(s, MN_E_SHAPE, "output '%s': buffer of %zu bytes, the output is %s %s = %zu bytes", name,
                    bytes, mn_dtype_name(n->dtype), shape_str(sb, sizeof sb, n->rank, n->shape), want);
    if (n->dtype != MN_F16 && n->dtype != MN_BF16) return session_read_f32(s, id, dst, count);
    /* 16-bit values: the container holds values of the dtype, encoded exactly */
    float *tmp = malloc(count * sizeof *tmp + 1);
    if (!tmp) return fail(s, MN_E_NOMEM, "output '%s': out of memory converting %zu values", name, count);
    st = session_read_f32(s, id, tmp, count);
    uint16_t *h = dst;
    for (size_t i = 0; !st && i < count; i++) h[i] = n->dtype == MN_F16 ? mn_f16_encode(tmp[i]) : mn_bf16_encode(tmp[i]);
    free(tmp);
    return st;
}

mn_status mn_session_numel(mn_session *s, const char *name, size_t *out) {
    mn_status st = alive(s);
    if (st) return st;
    if (!out) return fail(s, MN_E_INVALID, "numel: out is NULL");
    int32_t id = find_named(s, name, OP_COUNT);
    if (id == MN_NONE) return fail(s, MN_E_NOT_FOUND, "numel: no tensor named '%s'", name ? name : "(null)");
    *out = (size_t)node_numel(&s->g->nodes[id]);
    return MN_OK;
}

static mn_status param_io(mn_session *s, const char *name, size_t count, const char *what, int32_t *id) {
    mn_status st = alive(s);
    if (st) return st;
    *id = find_named(s, name, OP_PARAM);
    if (*id == MN_NONE) return fail(s, MN_E_NOT_FOUND, "%s: no parameter named '%s'", what, name ? name : "(null)");
    const node *n = &s->g->nodes[*id];
    char sb[96];
    if ((size_t)node_numel(n) != count)
        return fail(s, MN_E_SHAPE, "%s '%s': %zu values given, the parameter is %s = %lld values", what, name,
                    count, shape_str(sb, sizeof sb, n->rank, n->shape), (long long)node_numel(n));
    return MN_OK;
}

mn_status mn_session_get_param(mn_session *s, const char *name, float *dst, size_t count) {
    int32_t id;
    mn_status st = param_io(s, name, count, "get_param", &id);
    if (st) return st;
    if (!dst) return fail(s, MN_E_INVALID, "get_param '%s': dst is NULL", name);
    return session_read_f32(s, id, dst, count);
}

mn_status mn_session_set_param(mn_session *s, const char *name, const float *src, size_t count) {
    int32_t id;
    mn_status st = param_io(s, name, count, "set_param", &id);
    if (st) return st;
    if (!src) return fail(s, MN_E_INVALID, "set_param '%s': src is NULL", name);
    return session_write_f32(s, id, src, count);
}

int64_t mn_session_step_count(const mn_session *s) { return s ? s->step : 0; }

float mn_session_loss_scale(const mn_session *s, int64_t *overflows) {
    if (overflows) *overflows = s ? s->ls_overflows : 0;
    return s && s->ls_input != MN_NONE ? s->ls_scale : 0.0f;
}

float mn_session_lr(const mn_session *s) {
    /* a dead session may hold the very optimizer settings it was refused for */
    if (!s || s->dead || s->opt.mode != MN_MODE_TRAINING) return 0.0f;
    return (float)optim_lr(&s->opt.optim, s->step);
}

int32_t session_grad_of(const mn_session *s, int32_t id) {
    id = graph_id(id);
    if (!s->grads || id < 0 || id >= s->nuser) return MN_NONE;
    return s->grads[id];
}

mn_status mn_session_memory(const mn_session *s, size_t *peak, size_t *sum) {
    if (!s || s->dead) return MN_E_STATE;
    if (peak) *peak = (size_t)memplan_peak(&s->plan);
    if (sum) *sum = (size_t)s->plan.sum_bytes;
    return MN_OK;
}

mn_status mn_session_memory_arenas(const mn_session *s, size_t bytes[MN_MEMORY_ARENAS]) {
    _Static_assert(MN_MEMORY_ARENAS == MP_ARENA_COUNT, "one number per arena");
    if (!s || s->dead || !bytes) return MN_E_STATE;
    for (int a = 0; a < MP_ARENA_COUNT; a++) bytes[a] = (size_t)s->plan.arena_bytes[a];
    return MN_OK;
}

mn_status mn_session_dump(const mn_session *s, const char *what, FILE *f) {
    if (!s || !what || !f || !s->g) return MN_E_INVALID;
    if (strcmp(what, "graph") == 0) return mn_graph_dump(s->g, f);
    if (s->dead) return MN_E_STATE;
    if (strcmp(what, "schedule") == 0) schedule_dump(&s->sched, s->g, f);
    else if (strcmp(what, "memplan") == 0) memplan_dump(&s->plan, s->g, f);
    else if (strcmp(what, "kernels") == 0) kir_dump(&s->kernels, s->g, &s->sched, f);
    else return MN_E_INVALID;
    return MN_OK;
}

mn_status mn_session_set_meta(mn_session *s, const char *key, const char *value) {
    mn_status st = alive(s);
    if (st) return st;
    if (!key || !*key || !value) return fail(s, MN_E_INVALID, "set_meta: key and value must be non-empty strings");
    if (strncmp(key, "meganeura.", 10) == 0 || strcmp(key, "format") == 0)
        return fail(s, MN_E_INVALID, "set_meta: the key '%s' is reserved", key);
    /* checked now: the checkpoint header is JSON, and a bad pair kept here
     * would make every later save fail */
    if (!st_utf8_valid(key, strlen(key)) || !st_utf8_valid(value, strlen(value)))
        return fail(s, MN_E_INVALID, "set_meta: the %s is not valid UTF-8",
                    st_utf8_valid(key, strlen(key)) ? "value" : "key");
    uint64_t bound = session_header_bound(s) + meta_cost(key, value);
    for (int i = 0; i < s->nmeta; i++)
        if (strcmp(s->meta[2 * i], key) == 0) bound -= meta_cost(key, s->meta[2 * i + 1]);
    const uint64_t hlimit = s->iopt.header_limit ? s->iopt.header_limit : ST_MAX_HEADER_BYTES;
    if (bound > hlimit)
        return fail(s, MN_E_INVALID, "set_meta '%s': checkpoints would need a header of up to %llu bytes, above the "
                    "%llu-byte safetensors limit", key, (unsigned long long)bound, (unsigned long long)hlimit);
    for (int i = 0; i < s->nmeta; i++)
        if (strcmp(s->meta[2 * i], key) == 0) {
            char *v = mn_strdup(value);
            if (!v) return fail(s, MN_E_NOMEM, "out of memory");
            free(s->meta[2 * i + 1]);
            s->meta[2 * i + 1] = v;
            return MN_OK;
        }
    char **m = realloc(s->meta, (size_t)(s->nmeta + 1) * 2 * sizeof *m);
    if (!m) return fail(s, MN_E_NOMEM, "out of memory");
    s->meta = m;
    m[2 * s->nmeta] = mn_strdup(key);
    m[2 * s->nmeta + 1] = mn_strdup(value);
    if (!m[2 * s->nmeta] || !m[2 * s->nmeta + 1]) {
        free(m[2 * s->nmeta]);
        free(m[2 * s->nmeta + 1]);
        return fail(s, MN_E_NOMEM, "out of memory");
    }
    s->nmeta++;
    return MN_OK;
}

#ifndef MN_HAVE_VULKAN
mn_status mn_list_devices(FILE *f) {
    (void)f;
    return MN_E_UNSUPPORTED;
}
#endif
