/* optim.c - optimizer insertion, hyper-parameters and LR schedules. */
#include "optim/optim.h"

#include <math.h>

#include "graph/attrs.h"

const char *optim_kind_name(mn_optim_kind k) {
    switch (k) {
    case MN_OPTIM_SGD: return "sgd";
    case MN_OPTIM_ADAM: return "adam";
    case MN_OPTIM_ADAMW: return "adamw";
    }
    return "?";
}

mn_optimizer mn_optimizer_default(mn_optim_kind kind) {
    mn_optimizer o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.lr = kind == MN_OPTIM_SGD ? 0.01f : 1e-3f;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-8f;
    o.weight_decay = kind == MN_OPTIM_ADAMW ? 0.01f : 0.0f;
    o.schedule = MN_LR_CONSTANT;
    return o;
}

mn_status optim_validate(const mn_optimizer *o, char *err, size_t cap) {
    if ((int)o->kind < MN_OPTIM_SGD || o->kind > MN_OPTIM_ADAMW) {
        mn_fmt(err, cap, "optimizer: unknown kind %d", (int)o->kind);
        return MN_E_INVALID;
    }
#define BAD(cond, ...) if (cond) { mn_fmt(err, cap, __VA_ARGS__); return MN_E_INVALID; }
    BAD(!(o->lr >= 0.0f) || !isfinite(o->lr), "optimizer: lr %g must be finite and >= 0", (double)o->lr);
    BAD(!(o->momentum >= 0.0f && o->momentum < 1.0f), "optimizer: momentum %g must be in [0, 1)", (double)o->momentum);
    BAD(o->nesterov && o->momentum <= 0.0f, "optimizer: nesterov needs momentum > 0");
    BAD(!(o->beta1 >= 0.0f && o->beta1 < 1.0f), "optimizer: beta1 %g must be in [0, 1)", (double)o->beta1);
    BAD(!(o->beta2 >= 0.0f && o->beta2 < 1.0f), "optimizer: beta2 %g must be in [0, 1)", (double)o->beta2);
    BAD(!(o->eps >= 0.0f) || !isfinite(o->eps), "optimizer: eps %g must be finite and >= 0", (double)o->eps);
    BAD(!(o->weight_decay >= 0.0f) || !isfinite(o->weight_decay), "optimizer: weight_decay %g must be >= 0", (double)o->weight_decay);
    BAD(!(o->clip_norm >= 0.0f) || !isfinite(o->clip_norm), "optimizer: clip_norm %g must be >= 0 (0 = off)", (double)o->clip_norm);
    BAD((int)o->schedule < MN_LR_CONSTANT || o->schedule > MN_LR_WARMUP_COSINE, "optimizer: unknown schedule %d", (int)o->schedule);
    if (o->schedule == MN_LR_WARMUP_COSINE) {
        BAD(o->warmup_steps < 0 || o->total_steps <= o->warmup_steps,
            "optimizer: warm-up cosine needs 0 <= warmup_steps (%lld) < total_steps (%lld)",
            (long long)o->warmup_steps, (long long)o->total_steps);
        BAD(!(o->min_lr >= 0.0f && o->min_lr <= o->lr), "optimizer: min_lr %g must be in [0, lr]", (double)o->min_lr);
    }
#undef BAD
    return MN_OK;
}

double optim_lr(const mn_optimizer *o, int64_t t) {
    if (o->schedule == MN_LR_CONSTANT) return o->lr;
    /* warm-up: lr * (t+1)/warmup for t < warmup, then cosine from lr to min_lr */
    if (t < o->warmup_steps) return (double)o->lr * ((double)t + 1.0) / (double)o->warmup_steps;
    if (t >= o->total_steps) return o->min_lr;
    double p = (double)(t - o->warmup_steps) / (double)(o->total_steps - o->warmup_steps);
    return o->min_lr + 0.5 * ((double)o->lr - o->min_lr) * (1.0 + cos(3.14159265358979323846 * p));
}

void optim_hyper(const mn_optimizer *o, int64_t t, float hyper[4]) {
    hyper[0] = (float)optim_lr(o, t);
    hyper[1] = (float)(1.0 - pow((double)o->beta1, (double)t + 1.0)); /* t + 1 in double: no overflow */
    hyper[2] = (float)(1.0 - pow((double)o->beta2, (double)t + 1.0));
    hyper[3] = 0.0f;
}

static mn_status add_state(mn_graph *g, int32_t *out, const node *param, const char *slot,
                           const char *kind) {
    char name[512];
    mn_fmt(name, sizeof name, "optim.%s.%s.%s", kind, slot, param->name);
    mn_status st = graph_check_name(g, "optimizer state", name, true);
    if (st) return st;
    node p;
    memset(&p, 0, sizeof p);
    p.op = OP_STATE;
    p.dtype = MN_F32;
    p.rank = param->rank;
    memcpy(p.shape, param->shape, sizeof p.shape);
    p.lr_mult = 1.0f;
    p.flags = NODE_F_OPTIM;
    if (!(p.name = mn_strdup(name))) return graph_fail(g, MN_E_NOMEM, "out of memory");
    st = graph_add(g, out, &p);
    if (st) free(p.name);
    return st;
}

/* The sum of squares of all gradients in two parallel levels: per block of
 * SUMSQ_BLOCK consecutive elements of each gradient (SUMSQ with a block
 * length: one workgroup per block), the blocks' sums of every gradient
 * joined by a tree of concats (NODE_MAX_IN inputs each, in parameter
 * order), then one SUM. The kernel plan (kir.h) turns the tree into one
 * multi-tensor kernel when the gradients lie in parallel regions. */
#define SUMSQ_BLOCK 4096

/* The concatenation of xs[0..n) (rank-1 tensors), a tree of concats of at
 * most NODE_MAX_IN inputs level by level; xs is overwritten. */
static mn_status concat_tree(mn_graph *g, int32_t *out, int32_t *xs, int32_t n) {
    while (n > 1) {
        int32_t w = 0;
        for (int32_t i = 0; i < n; i += NODE_MAX_IN) {
            const int32_t k = n - i < NODE_MAX_IN ? n - i : NODE_MAX_IN;
            int32_t c = xs[i];
            mn_status st = k > 1 ? mn_concat(g, &c, xs + i, k, 0) : MN_OK;
            if (st) return st;
            xs[w++] = c;
        }
        n = w;
    }
    *out = xs[0];
    return MN_OK;
}

static mn_status build(mn_graph *g, const int32_t *grads, int32_t ngrads, const mn_optimizer *o, mn_nonfinite nf,
                       int32_t scale, int32_t *gate);

mn_status optim_build(mn_graph *g, const int32_t *grads, int32_t ngrads, const mn_optimizer *o, mn_nonfinite nf,
                      int32_t scale, int32_t *gate) {
    /* node indices through the public constructors (graph.h, raw ids) */
    const bool raw = g->raw_ids;
    g->raw_ids = true;
    *gate = MN_NONE;
    if (scale != MN_NONE && nf != MN_NONFINITE_SKIP) {
        g->raw_ids = raw;
        return graph_fail(g, MN_E_INVALID, "optimizer: loss scaling needs the non-finite check (nonfinite = skip)");
    }
    mn_status st = build(g, grads, ngrads, o, nf, scale, gate);
    g->raw_ids = raw;
    return st;
}

/* The non-finite check skips the running statistics too: every EMA_UPDATE
 * (batch norm, created with the forward pass) is recreated after the gate
 * with the gate as input 2, and the original becomes a view of its running
 * statistic (a RESHAPE to the same shape: no kernel, and no longer a root). */
static mn_status gate_ema_updates(mn_graph *g, int32_t before, int32_t gate) {
    for (int32_t i = 0; i < before; i++) {
        if (g->nodes[i].op != OP_EMA_UPDATE) continue;
        node p = g->nodes[i];
        p.in[2] = gate;
        p.nin = 3;
        p.flags = 0;
        mn_status st = graph_add(g, NULL, &p);
        if (st) return st;
        node *n = &g->nodes[i];
        n->op = OP_RESHAPE;
        n->nin = 1;
        memset(n->ip, 0, sizeof n->ip);
        memset(n->fp, 0, sizeof n->fp);
    }
    return MN_OK;
}

static mn_status build(mn_graph *g, const int32_t *grads, int32_t ngrads, const mn_optimizer *o, mn_nonfinite nf,
                       int32_t scale, int32_t *gate) {
    mn_status st;
    int32_t hyper, clip = MN_NONE, first = g->n;
    int64_t four = 4;
    const bool check = nf != MN_NONFINITE_UNCHECKED;
    if ((st = graph_source(g, &hyper, OP_INPUT, OPTIM_HYPER_NAME, MN_F32, 1, &four, true))) return st;
    g->nodes[hyper].flags |= NODE_F_HOST;

    /* the sum of squares of every gradient: for clipping and for the check */
    int32_t total = MN_NONE;
    if (o->clip_norm > 0.0f || check) {
        int32_t *blocks = malloc(((size_t)ngrads + 1) * sizeof *blocks), nb = 0;
        if (!blocks) return graph_fail(g, MN_E_NOMEM, "optimizer: out of memory");
        for (int32_t i = 0; i < ngrads && !st; i++) {
            if (g->nodes[i].op != OP_PARAM || grads[i] == MN_NONE) continue;
            node p;
            memset(&p, 0, sizeof p);
            p.op = OP_SUMSQ;
            p.nin = 1;
            p.in[0] = grads[i];
            sumsq_block_set(&p, SUMSQ_BLOCK);
            st = graph_add(g, &blocks[nb++], &p);
        }
        int32_t all = MN_NONE;
        if (!st && nb) st = concat_tree(g, &all, blocks, nb);
        if (!st && nb) st = mn_sum(g, &total, all, MN_ALL_AXES, false);
        free(blocks);
        if (st) return st;
    }
    if (check) {
        /* one gate: {clip coefficient or 1, non-finite flags}, read by the
         * session after the step and, with SKIP, holding every update back */
        node p;
        memset(&p, 0, sizeof p);
        p.op = OP_STEP_GATE;
        p.in[p.nin++] = g->loss;
        if (total != MN_NONE) p.in[p.nin++] = total;
        if (scale != MN_NONE) p.in[p.nin++] = scale, p.ip[0] = 1; /* unscales: coef / scale */
        clip_norm_set(&p, o->clip_norm);
        if ((st = graph_add(g, gate, &p))) return st;
        g->nodes[*gate].flags |= NODE_F_READ;
        clip = *gate;
        if (nf == MN_NONFINITE_SKIP && (st = gate_ema_updates(g, first, *gate))) return st;
    } else if (o->clip_norm > 0.0f) {
        if (total != MN_NONE) {
            node p;
            memset(&p, 0, sizeof p);
            p.op = OP_CLIP_COEF;
            p.nin = 1;
            p.in[0] = total;
            clip_norm_set(&p, o->clip_norm);
            if ((st = graph_add(g, &clip, &p))) return st;
        }
    }

    const char *kind = optim_kind_name(o->kind);
    for (int32_t i = 0; i < ngrads; i++) {
        if (g->nodes[i].op != OP_PARAM || grads[i] == MN_NONE) continue;
        node param = g->nodes[i];
        node p;
        memset(&p, 0, sizeof p);
        mn_optim_attrs a = {.lr_mult = param.lr_mult, .weight_decay = o->weight_decay};
        p.in[0] = i;
        p.in[1] = grads[i];
        if (o->kind == MN_OPTIM_SGD) {
            p.op = OP_SGD_UPDATE;
            if ((st = add_state(g, &p.in[2], &param, "momentum", kind))) return st;
            p.in[3] = hyper;
            p.nin = 4;
            a.beta1 = o->momentum;
            a.variant = o->nesterov;
        } else {
            p.op = OP_ADAM_UPDATE;
            if ((st = add_state(g, &p.in[2], &param, "m", kind)) ||
                (st = add_state(g, &p.in[3], &param, "v", kind)))
                return st;
            p.in[4] = hyper;
            p.nin = 5;
            a.beta1 = o->beta1;
            a.beta2 = o->beta2;
            a.eps = o->eps;
            a.variant = o->kind == MN_OPTIM_ADAMW;
        }
        if (clip != MN_NONE) p.in[p.nin++] = clip;
        a.gated = check && nf == MN_NONFINITE_SKIP; /* the gate may skip the update */
        optim_attrs_set(&p, &a);
        if ((st = graph_add(g, NULL, &p))) return st;
    }
    for (int32_t i = first; i < g->n; i++) g->nodes[i].flags |= NODE_F_OPTIM;
    return MN_OK;
}
