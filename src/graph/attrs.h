/* attrs.h - typed views of an op's parameters (internal).
 *
 * A node stores its parameters in two positional arrays, node.ip[] (integers)
 * and node.fp[] (floats), whose meaning depends on the op (ops.def says which
 * slot holds what). Code reads and writes them through the structs here, one
 * per op family: <family>_attrs_of(n) reads, <family>_attrs_set(n, a) writes
 * the same slots and leaves the others alone. The storage stays ip/fp, so a
 * graph, its dumps and the generated kernels do not change.
 *
 * Does not: check values (the shape rules in shape.c do).
 */
#ifndef MN_GRAPH_ATTRS_H
#define MN_GRAPH_ATTRS_H

#include <string.h>

#include "graph/graph.h"

/* MATMUL: ip[0] = trans_a, ip[1] = trans_b */
typedef struct mn_matmul_attrs {
    bool trans_a, trans_b;
} mn_matmul_attrs;

static inline mn_matmul_attrs matmul_attrs_of(const node *n) {
    return (mn_matmul_attrs){n->ip[0] != 0, n->ip[1] != 0};
}
static inline void matmul_attrs_set(node *n, const mn_matmul_attrs *a) {
    n->ip[0] = a->trans_a, n->ip[1] = a->trans_b;
}

/* SUM, MEAN, MAX, MAX_BWD: ip[0] = axis (>= 0 once inferred, or
 * MN_ALL_AXES), ip[1] = keepdim */
typedef struct mn_reduce_attrs {
    int64_t axis;
    bool keepdim;
} mn_reduce_attrs;

static inline mn_reduce_attrs reduce_attrs_of(const node *n) { return (mn_reduce_attrs){n->ip[0], n->ip[1] != 0}; }
static inline void reduce_attrs_set(node *n, const mn_reduce_attrs *a) { n->ip[0] = a->axis, n->ip[1] = a->keepdim; }

/* CONV2D, CONV2D_BWD_INPUT, CONV2D_BWD_WEIGHT: ip[0..1] stride (h, w),
 * ip[2..3] padding, ip[4..5] dilation, ip[6] groups */
typedef struct mn_conv_attrs {
    int64_t stride[2], pad[2], dilation[2], groups;
} mn_conv_attrs;

static inline mn_conv_attrs conv_attrs_of(const node *n) {
    return (mn_conv_attrs){{n->ip[0], n->ip[1]}, {n->ip[2], n->ip[3]}, {n->ip[4], n->ip[5]}, n->ip[6]};
}
static inline void conv_attrs_set(node *n, const mn_conv_attrs *a) {
    for (int i = 0; i < 2; i++) n->ip[i] = a->stride[i], n->ip[2 + i] = a->pad[i], n->ip[4 + i] = a->dilation[i];
    n->ip[6] = a->groups;
}

/* CONV2D_BWD_WEIGHT: ip[7] = the K chunk of a weight gradient split across
 * workgroups. 0: one sum over k = (b, oh, ow), the node is dw [O,Cg,KH,KW].
 * c > 0: the node holds P = ceil(N*OH*OW / c) partial gradients stacked on
 * axis 0, [P*O,Cg,KH,KW], part p the sum over k in [p*c, (p+1)*c) in order;
 * dw is their sum over the parts (autodiff adds it). */
static inline int64_t wgrad_chunk_of(const node *n) { return n->ip[7]; }
static inline void wgrad_chunk_set(node *n, int64_t c) { n->ip[7] = c; }

/* MAXPOOL2D, MAXPOOL2D_BWD, AVGPOOL2D, AVGPOOL2D_BWD: ip[0..1] kernel,
 * ip[2..3] stride, ip[4..5] padding; average pooling: ip[6] divisor
 * (POOL_DIV_*) */
enum { POOL_DIV_INSIDE = 0, POOL_DIV_AREA = 1, POOL_DIV_NONE = 2 };
typedef struct mn_pool_attrs {
    int64_t kernel[2], stride[2], pad[2], divisor;
} mn_pool_attrs;

static inline mn_pool_attrs pool_attrs_of(const node *n) {
    return (mn_pool_attrs){{n->ip[0], n->ip[1]}, {n->ip[2], n->ip[3]}, {n->ip[4], n->ip[5]}, n->ip[6]};
}
static inline void pool_attrs_set(node *n, const mn_pool_attrs *a) {
    for (int i = 0; i < 2; i++) n->ip[i] = a->kernel[i], n->ip[2 + i] = a->stride[i], n->ip[4 + i] = a->pad[i];
    n->ip[6] = a->divisor;
}

/* CROSS_ENTROPY, CROSS_ENTROPY_BWD, CE_COUNT: ip[0] = use ignore_index,
 * ip[1] = ignore_index, fp[0] = label smoothing */
typedef struct mn_ce_attrs {
    int64_t use_ignore; /* 0 or 1 (checked by the shape rule) */
    int64_t ignore_index;
    double smoothing;
} mn_ce_attrs;

static inline mn_ce_attrs ce_attrs_of(const node *n) { return (mn_ce_attrs){n->ip[0], n->ip[1], n->fp[0]}; }
static inline void ce_attrs_set(node *n, const mn_ce_attrs *a) {
    n->ip[0] = a->use_ignore, n->ip[1] = a->ignore_index, n->fp[0] = a->smoothing;
}
/* CROSS_ENTROPY_DENSE_BWD: ip[0] = 1: the gradient of the targets, 0: of the logits */
static inline bool ce_dense_wrt_targets(const node *n) { return n->ip[0] != 0; }
static inline void ce_dense_wrt_set(node *n, bool targets) { n->ip[0] = targets; }

/* ATTENTION and its helpers: ip[0] = causal, ip[1] = sliding window (0:
 * none), fp[0] = scale; ATTENTION_BWD_KV: ip[2] = wrt (0: k, 1: v, 2: both, [2B,...]) */
typedef struct mn_attention_attrs {
    int64_t causal; /* 0 or 1 (checked by the shape rule) */
    int64_t window;
    double scale;
    int64_t wrt;
} mn_attention_attrs;

static inline mn_attention_attrs attention_attrs_of(const node *n) {
    return (mn_attention_attrs){n->ip[0], n->ip[1], n->fp[0], n->ip[2]};
}
static inline void attention_attrs_set(node *n, const mn_attention_attrs *a) {
    n->ip[0] = a->causal, n->ip[1] = a->window, n->fp[0] = a->scale, n->ip[2] = a->wrt;
}

/* ROPE: ip[0] = position offset, ip[1] = inverse, fp[0] = theta */
typedef struct mn_rope_attrs {
    int64_t offset;
    int64_t inverse; /* 0 or 1 (checked by the shape rule) */
    double theta;
} mn_rope_attrs;

static inline mn_rope_attrs rope_attrs_of(const node *n) { return (mn_rope_attrs){n->ip[0], n->ip[1], n->fp[0]}; }
static inline void rope_attrs_set(node *n, const mn_rope_attrs *a) {
    n->ip[0] = a->offset, n->ip[1] = a->inverse, n->fp[0] = a->theta;
}

/* SLICE: ip[0] = axis (>= 0 once inferred), ip[1] = start, ip[2] = length */
typedef struct mn_slice_attrs {
    int64_t axis, start, length;
} mn_slice_attrs;

static inline mn_slice_attrs slice_attrs_of(const node *n) { return (mn_slice_attrs){n->ip[0], n->ip[1], n->ip[2]}; }
static inline void slice_attrs_set(node *n, const mn_slice_attrs *a) {
    n->ip[0] = a->axis, n->ip[1] = a->start, n->ip[2] = a->length;
}

/* PAD: ip[i] cells before and ip[4 + i] after axis i (rank <= 4) */
typedef struct mn_pad_attrs {
    int64_t before[4], after[4];
} mn_pad_attrs;

static inline mn_pad_attrs pad_attrs_of(const node *n) {
    mn_pad_attrs a;
    for (int i = 0; i < 4; i++) a.before[i] = n->ip[i], a.after[i] = n->ip[4 + i];
    return a;
}
static inline void pad_attrs_set(node *n, const mn_pad_attrs *a) {
    for (int i = 0; i < 4; i++) n->ip[i] = a->before[i], n->ip[4 + i] = a->after[i];
}

/* CONCAT: ip[0] = axis (>= 0 once inferred) */
static inline int64_t concat_axis(const node *n) { return n->ip[0]; }
static inline void concat_axis_set(node *n, int64_t axis) { n->ip[0] = axis; }

/* PERMUTE: ip[0..rank-1] = perm (output axis i is input axis perm[i]) */
static inline int64_t permute_axis(const node *n, int i) { return n->ip[i]; }
static inline void permute_axis_set(node *n, int i, int64_t axis) { n->ip[i] = axis; }

/* UPSAMPLE_NEAREST2D: ip[0..1] = scale (h, w) */
typedef struct mn_upsample_attrs {
    int64_t scale[2];
} mn_upsample_attrs;

static inline mn_upsample_attrs upsample_attrs_of(const node *n) { return (mn_upsample_attrs){{n->ip[0], n->ip[1]}}; }
static inline void upsample_attrs_set(node *n, const mn_upsample_attrs *a) {
    n->ip[0] = a->scale[0], n->ip[1] = a->scale[1];
}

/* SGD_UPDATE, ADAM_UPDATE: fp[0] = lr multiplier, fp[1] = momentum | beta1,
 * fp[2] = beta2, fp[3] = eps, fp[4] = weight decay; ip[0] = nesterov (SGD) |
 * decoupled (AdamW); ip[1] = gated: the clip input is a STEP_GATE that may
 * skip the update */
typedef struct mn_optim_attrs {
    double lr_mult, beta1, beta2, eps, weight_decay;
    bool variant, gated;
} mn_optim_attrs;

static inline mn_optim_attrs optim_attrs_of(const node *n) {
    return (mn_optim_attrs){n->fp[0], n->fp[1], n->fp[2], n->fp[3], n->fp[4], n->ip[0] != 0, n->ip[1] != 0};
}
static inline void optim_attrs_set(node *n, const mn_optim_attrs *a) {
    n->fp[0] = a->lr_mult, n->fp[1] = a->beta1, n->fp[2] = a->beta2, n->fp[3] = a->eps, n->fp[4] = a->weight_decay;
    n->ip[0] = a->variant, n->ip[1] = a->gated;
}

/* EMA_UPDATE: fp[0] = momentum, fp[1] = scale of the value */
typedef struct mn_ema_attrs {
    double momentum, scale;
} mn_ema_attrs;

static inline mn_ema_attrs ema_attrs_of(const node *n) { return (mn_ema_attrs){n->fp[0], n->fp[1]}; }
static inline void ema_attrs_set(node *n, const mn_ema_attrs *a) { n->fp[0] = a->momentum, n->fp[1] = a->scale; }

/* DROPOUT: fp[0] = p, ip[0] = seed (64 bits), ip[1] = drop threshold on the
 * 32-bit hash (pw_dropout_threshold) */
typedef struct mn_dropout_attrs {
    double p;
    uint64_t seed;
    int64_t threshold;
} mn_dropout_attrs;

static inline mn_dropout_attrs dropout_attrs_of(const node *n) {
    mn_dropout_attrs a = {n->fp[0], 0, n->ip[1]};
    memcpy(&a.seed, &n->ip[0], sizeof a.seed);
    return a;
}
static inline void dropout_attrs_set(node *n, const mn_dropout_attrs *a) {
    n->fp[0] = a->p;
    memcpy(&n->ip[0], &a->seed, sizeof a->seed);
    n->ip[1] = a->threshold;
}

/* The parameterised pointwise ops (CLAMP: fp[0] = min, fp[1] = max; POW:
 * fp[0] = exponent) and their backward PW_BWD (the same slots, ip[0] = the
 * forward op). Reads the slots of the forward op only. */
typedef struct mn_pw_attrs {
    double min, max, exponent;
} mn_pw_attrs;

/* UNARY_BWD, PW_BWD: the forward op whose derivative they apply */
static inline op_id bwd_of(const node *n) { return (op_id)n->ip[0]; }
static inline void bwd_of_set(node *n, op_id op) { n->ip[0] = op; }

static inline mn_pw_attrs pw_attrs_of(const node *n) {
    const op_id op = n->op == OP_PW_BWD ? bwd_of(n) : n->op;
    mn_pw_attrs a = {0, 0, 0};
    if (op == OP_CLAMP) a.min = n->fp[0], a.max = n->fp[1];
    if (op == OP_POW) a.exponent = n->fp[0];
    return a;
}
static inline void pw_attrs_set(node *n, const mn_pw_attrs *a) {
    const op_id op = n->op == OP_PW_BWD ? bwd_of(n) : n->op;
    if (op == OP_CLAMP) n->fp[0] = a->min, n->fp[1] = a->max;
    if (op == OP_POW) n->fp[0] = a->exponent;
}


/* RMS_NORM, LAYER_NORM and their backward helpers: eps; the forward ops
 * whether their weight and bias inputs are present; the *_BWD_W partial sums' rows
 * per block (1..1024). */
typedef struct mn_norm_attrs {
    double eps;
    bool weight, bias; /* LAYER_NORM */
} mn_norm_attrs;
static inline mn_norm_attrs norm_attrs_of(const node *n) {
    const bool fwd = n->op == OP_LAYER_NORM || n->op == OP_RMS_NORM;
    return (mn_norm_attrs){n->fp[0], fwd && n->ip[0] != 0, fwd && n->ip[1] != 0};
}
static inline void norm_attrs_set(node *n, const mn_norm_attrs *a) {
    n->fp[0] = a->eps;
    if (n->op == OP_LAYER_NORM || n->op == OP_RMS_NORM) n->ip[0] = a->weight, n->ip[1] = a->bias;
}
static inline int64_t norm_block(const node *n) { return n->ip[0]; }
static inline void norm_block_set(node *n, int64_t rows) { n->ip[0] = rows; }
/* SCALE: fp[0] = the factor */
static inline double scale_factor(const node *n) { return n->fp[0]; }
static inline void scale_factor_set(node *n, double s) { n->fp[0] = s; }

/* CLIP_COEF, STEP_GATE: fp[0] = the global gradient norm to clip to (STEP_GATE: 0 = no clipping) */
static inline double clip_norm(const node *n) { return n->fp[0]; }
/* SUMSQ: ip[0] = B > 0: one sum per block of B consecutive elements (the
 * last one shorter), [max(1, ceil(numel / B))]; 0: over everything, a scalar */
static inline int64_t sumsq_block(const node *n) { return n->ip[0]; }
static inline void sumsq_block_set(node *n, int64_t block) { n->ip[0] = block; }
/* The blocks of a SUMSQ with block length b over numel elements. */
static inline int64_t sumsq_blocks(int64_t numel, int64_t b) { return numel > 0 ? (numel + b - 1) / b : 1; }
static inline void clip_norm_set(node *n, double c) { n->fp[0] = c; }
/* CAST: ip[0] = the dtype (MN_F32, MN_F16, MN_BF16) */
static inline mn_dtype cast_dtype(const node *n) { return (mn_dtype)n->ip[0]; }
static inline void cast_dtype_set(node *n, mn_dtype d) { n->ip[0] = (int64_t)d; }
/* The operand rounding of a dtype (none for f32). */
static inline mn_round16 dtype_round16(mn_dtype d) {
    return d == MN_F16 ? MN_ROUND_F16 : d == MN_BF16 ? MN_ROUND_BF16 : MN_ROUND_NONE;
}
/* STEP_GATE: ip[0] = 1: the last input is the loss scale (ops.def) */
static inline bool step_gate_scaled(const node *n) { return n->ip[0] != 0; }
static inline bool step_gate_has_sumsq(const node *n) { return n->nin - (n->ip[0] != 0) > 1; }

#endif
