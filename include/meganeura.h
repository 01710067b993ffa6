/* meganeura.h - the public C API of Meganeura-C.
 *
 * Build a typed static graph, turn it into a session on a backend, train it
 * (step = forward + backward + optimizer update) or run it (forward only),
 * read and write parameters, save and load safetensors checkpoints.
 *
 * Conventions
 * - Opaque handles with _create/_destroy; every destroy accepts NULL.
 * - Every fallible call returns an mn_status (0 = MN_OK, negative = error) and
 *   passes results through out-parameters, which come first.
 * - After an error, mn_graph_error()/mn_session_error() return a message that
 *   names the op, the shapes, the file or the parameter involved. The string
 *   belongs to the handle and stays valid until the next call on that handle.
 * - The library never exits or aborts on bad input.
 * - Tensors inside a graph are handles (mn_tensor, an int32_t) that carry
 *   their graph: a handle of one graph passed to another graph is refused
 *   with MN_E_INVALID ("tensor handle ... belongs to another graph"). The
 *   check uses an 8-bit tag per graph (a process-wide counter), so two graphs
 *   created 255 apart share a tag and cannot tell their handles apart; any two
 *   graphs created in a row can. Handles are not node numbers: keep the
 *   values the constructors return. MN_NONE (-1) is never a handle and means
 *   "absent" where an argument is optional. A graph holds at most
 *   MN_MAX_NODES nodes, counting those a training session adds (gradients,
 *   optimizer updates).
 * - Names (inputs, parameters, state tensors, outputs) are checked when
 *   declared, so that every checkpoint can be written: 1 to MN_MAX_NAME
 *   bytes of valid UTF-8 without control characters (bytes 0x00-0x1f and
 *   0x7f), unique in the graph, and not starting with "optim." (optimizer
 *   state, "optim.<kind>.<slot>.<param>") or "__" (reserved for the library:
 *   "__hyper", safetensors' "__metadata__").
 * - Shapes are row-major, outermost dimension first; at most MN_MAX_RANK dims.
 */
#ifndef MEGANEURA_H
#define MEGANEURA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif
/* The functions declared here are the ones libmeganeura.so exports: the
 * library is built with hidden visibility (-fvisibility=hidden) and a
 * version script (cmake/exports.cmake) made from these headers. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define MN_VERSION_STRING "0.1.0"
#define MN_MAX_RANK 4
#define MN_NONE (-1)
/* Most nodes one graph holds (2^23), see mn_tensor below. */
#define MN_MAX_NODES (1 << 23)
/* Longest name, in bytes (UTF-8), of an input, parameter, state or output. */
#define MN_MAX_NAME 255
/* Axis value that means "reduce over all axes" for mn_sum/mn_mean/mn_max. */
#define MN_ALL_AXES 127

/* ---- status ------------------------------------------------------------ */

typedef int mn_status;
enum {
    MN_OK = 0,
    MN_E_INVALID = -1,     /* bad argument (NULL, unknown name, bad value) */
    MN_E_SHAPE = -2,       /* shapes do not agree */
    MN_E_DTYPE = -3,       /* dtypes do not agree or are not supported */
    MN_E_NOMEM = -4,       /* out of host memory */
    MN_E_IO = -5,          /* file system error */
    MN_E_FORMAT = -6,      /* a file is corrupt or not what it claims */
    MN_E_NOT_FOUND = -7,   /* a named tensor/parameter does not exist */
    MN_E_UNSUPPORTED = -8, /* the op/feature exists but not here (no backward rule, backend) */
    MN_E_BACKEND = -9,     /* the backend failed (device error) */
    MN_E_STATE = -10,      /* call not valid in this state (e.g. step on an inference session) */
    MN_E_NONFINITE = -11,  /* a training step met a NaN or infinite loss or gradient (see
                              mn_session_options.nonfinite); the session stays usable */
    MN_E_DIST = -12        /* data-parallel training: the all-reduce failed (a rank died, hangs
                              or disagrees; see mn_dist); the session is no longer usable */
};
/* A short constant name for a status ("MN_E_SHAPE"). Never NULL. */
const char *mn_status_str(mn_status s);

/* ---- types ------------------------------------------------------------- */

typedef enum mn_dtype {
    MN_F32 = 0,
    MN_F16 = 1,  /* IEEE binary16: inputs, mn_cast results (docs/ARCHITECTURE.md, Dtypes) */
    MN_BF16 = 2, /* bfloat16: inputs, mn_cast results */
    MN_I32 = 3   /* integer class labels */
} mn_dtype;
/* "f32", "f16", "bf16", "i32"; "?" for anything else. */
const char *mn_dtype_name(mn_dtype dt);
/* Bytes per element; 0 for an unknown dtype. */
size_t mn_dtype_size(mn_dtype dt);

typedef int32_t mn_tensor;
typedef struct mn_graph mn_graph;
typedef struct mn_session mn_session;

/* Parameter initialisers. Fans: a rank-2 parameter used as x @ W is
 * [fan_in, fan_out]; a rank-4 convolution weight is [out, in/groups, kh, kw]
 * with fan_in = in/groups*kh*kw and fan_out = out*kh*kw; rank 1 has
 * fan_in = fan_out = n. Value i of a parameter is a function of the session
 * seed, a hash of the parameter's name and i only, so values do not depend on
 * declaration order, on the backend or on the threads computing them. */
typedef enum mn_init_kind {
    MN_INIT_ZEROS = 0,
    MN_INIT_CONSTANT,       /* a = value */
    MN_INIT_UNIFORM,        /* U(a, b) */
    MN_INIT_NORMAL,         /* N(mean a, std b) */
    MN_INIT_XAVIER_UNIFORM, /* U(-g*sqrt(6/(fan_in+fan_out)), +...), g = a or 1 if a == 0 */
    MN_INIT_XAVIER_NORMAL,  /* N(0, g*sqrt(2/(fan_in+fan_out))) */
    MN_INIT_KAIMING_UNIFORM,/* U(-sqrt(6/fan_in), +sqrt(6/fan_in)) (ReLU gain) */
    MN_INIT_KAIMING_NORMAL  /* N(0, sqrt(2/fan_in)) */
} mn_init_kind;

typedef struct mn_init {
    mn_init_kind kind;
    float a, b;
} mn_init;

/* ---- graph ------------------------------------------------------------- */

mn_status mn_graph_create(mn_graph **out);
void mn_graph_destroy(mn_graph *g);
/* Message of the last failed call on g ("" if none). */
const char *mn_graph_error(const mn_graph *g);

/* Named input fed from host memory before each step/run. */
mn_status mn_graph_input(mn_graph *g, mn_tensor *out, const char *name, mn_dtype dt,
                         int rank, const int64_t *shape);
/* Named trainable parameter (f32). Names must be unique across inputs and params. */
mn_status mn_graph_param(mn_graph *g, mn_tensor *out, const char *name, int rank,
                         const int64_t *shape, mn_init init);
/* Per-parameter learning-rate multiplier (default 1). */
mn_status mn_graph_param_lr_mult(mn_graph *g, mn_tensor param, float mult);
/* A frozen parameter gets no gradient and no update (default: not frozen). */
mn_status mn_graph_param_freeze(mn_graph *g, mn_tensor param, bool frozen);
/* Constant tensor (f32); the data is copied. */
mn_status mn_graph_constant(mn_graph *g, mn_tensor *out, int rank, const int64_t *shape,
                            const float *data);
mn_status mn_graph_scalar(mn_graph *g, mn_tensor *out, float value);
/* Mark t as a named output readable after step/run. */
mn_status mn_graph_output(mn_graph *g, mn_tensor t, const char *name);
/* Mark a scalar tensor as the loss minimised by step. */
mn_status mn_graph_loss(mn_graph *g, mn_tensor t);

mn_status mn_tensor_shape(const mn_graph *g, mn_tensor t, int *rank, int64_t shape[MN_MAX_RANK]);
/* The dtype of t (inputs and outputs take mn_dtype_size(dtype) bytes a value). */
mn_status mn_tensor_dtype(const mn_graph *g, mn_tensor t, mn_dtype *dtype);
/* Textual dump, stable across runs (tests compare it literally). */
mn_status mn_graph_dump(const mn_graph *g, FILE *f);

/* ---- ops (each records a node; shapes are checked now) ------------------ */

/* a @ b. a: [M,K] or [B,M,K]; b: [K,N] or [B,K,N] (a shared [K,N] is broadcast
 * over B). With trans_a the last two dims of a are [K,M]; likewise trans_b [N,K]. */
mn_status mn_matmul(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);
mn_status mn_matmul_ex(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b, bool trans_a,
                       bool trans_b);
/* Elementwise with numpy broadcasting. */
mn_status mn_add(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);
mn_status mn_sub(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);
mn_status mn_mul(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);
mn_status mn_div(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);
mn_status mn_scale(mn_graph *g, mn_tensor *out, mn_tensor x, float s);
mn_status mn_neg(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_exp(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_log(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_sqrt(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_rsqrt(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_relu(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_sigmoid(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_tanh(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_gelu(mn_graph *g, mn_tensor *out, mn_tensor x);      /* erf form */
mn_status mn_gelu_tanh(mn_graph *g, mn_tensor *out, mn_tensor x); /* tanh approximation */
mn_status mn_silu(mn_graph *g, mn_tensor *out, mn_tensor x);
/* sin and cos of x in radians; Vulkan to a few ulp for |x| < 1e5 (its own
 * range reduction, not the builtins). Gradients cos(x) and -sin(x). */
mn_status mn_sin(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_cos(mn_graph *g, mn_tensor *out, mn_tensor x);
/* x (f32, f16 or bf16) as dtype (MN_F32, MN_F16, MN_BF16): each value
 * rounded to the nearest one of dtype, ties to even (f16: subnormals kept,
 * |x| >= 65520 -> inf; bf16: the f32 exponent range); to f32 it is exact.
 * Every other op reads 16-bit tensors as the f32 values they hold and gives
 * f32 (PyTorch's promotion of a 16-bit and an f32 operand). The gradient of
 * a cast is rounded to the cast's dtype, then returned in x's (like the
 * gradient of x.half() in PyTorch), which is why f16 training wants loss
 * scaling (mn_loss_scale). */
mn_status mn_cast(mn_graph *g, mn_tensor *out, mn_tensor x, mn_dtype dtype);
/* Reductions over one axis (negative counts from the end) or MN_ALL_AXES. */
mn_status mn_sum(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim);
mn_status mn_mean(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim);
mn_status mn_max(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim);
/* Over the last axis. */
mn_status mn_softmax(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_log_softmax(mn_graph *g, mn_tensor *out, mn_tensor x);
/* One dimension may be -1 (inferred). */
mn_status mn_reshape(mn_graph *g, mn_tensor *out, mn_tensor x, int rank, const int64_t *shape);
/* out.shape[i] = x.shape[perm[i]]; perm has x's rank entries. */
mn_status mn_permute(mn_graph *g, mn_tensor *out, mn_tensor x, const int *perm);
mn_status mn_transpose(mn_graph *g, mn_tensor *out, mn_tensor x, int axis0, int axis1);
/* Identity forward, zero gradient. */
mn_status mn_stop_gradient(mn_graph *g, mn_tensor *out, mn_tensor x);

/* Losses (scalar results, mean over the batch). logits: [B,C]. */
mn_status mn_cross_entropy(mn_graph *g, mn_tensor *out, mn_tensor logits,
                           mn_tensor labels /* i32 [B] */);
mn_status mn_cross_entropy_dense(mn_graph *g, mn_tensor *out, mn_tensor logits,
                                 mn_tensor targets /* f32 [B,C] label weights */);
/* mean((a-b)^2) over all elements. */
mn_status mn_mse(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);

/* Convolution, NCHW. x: [N,C,H,W]; w: [O,C/groups,KH,KW]; bias: [O] or MN_NONE. */
typedef struct mn_conv2d_params {
    int stride[2];   /* h, w; 0 means 1 */
    int padding[2];  /* h, w */
    int dilation[2]; /* h, w; 0 means 1 */
    int groups;      /* 0 means 1 */
} mn_conv2d_params;
mn_status mn_conv2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                    const mn_conv2d_params *p);
typedef struct mn_pool2d_params {
    int kernel[2];  /* h, w */
    int stride[2];  /* 0 means kernel size */
    int padding[2]; /* padded cells never win the max */
} mn_pool2d_params;
mn_status mn_max_pool2d(mn_graph *g, mn_tensor *out, mn_tensor x, const mn_pool2d_params *p);

/* Pointwise primitives. abs: gradient sign(x) (0 at 0). clamp: min <= max
 * (either may be infinite); NaN passes through; the gradient flows where
 * min < x < max strictly. pow: x^p for a finite scalar p, libm pow semantics
 * (x < 0 with a non-integer p gives NaN); gradient p * x^(p-1) as PyTorch
 * (0 everywhere for p == 0; inf at x == 0 for 0 < p < 1; NaN where the
 * forward is NaN). */
mn_status mn_abs(mn_graph *g, mn_tensor *out, mn_tensor x);
mn_status mn_clamp(mn_graph *g, mn_tensor *out, mn_tensor x, float min, float max);
mn_status mn_pow(mn_graph *g, mn_tensor *out, mn_tensor x, float p);
/* cond != 0 ? a : b per element (NaN counts as true); numpy broadcasting of
 * all three (f32). Gradient to a and b, none to cond. */
mn_status mn_where(mn_graph *g, mn_tensor *out, mn_tensor cond, mn_tensor a, mn_tensor b);
/* Inverted dropout: each element is zeroed with probability p (0 <= p <= 1),
 * the others are scaled by 1/(1-p). The mask is a counter-based hash of
 * (seed, element index), identical on every backend; backward applies the
 * same mask to dy. Training sessions apply it (in step and run); inference
 * sessions treat dropout as the identity. With mn_dropout the mask is the
 * same at every step; mn_dropout_ex mixes the value of counter, an i32 scalar
 * (rank 0 or [1]) fed like any input (e.g. the step number), into the key so
 * each step draws a new mask. */
mn_status mn_dropout(mn_graph *g, mn_tensor *out, mn_tensor x, float p, uint64_t seed);
mn_status mn_dropout_ex(mn_graph *g, mn_tensor *out, mn_tensor x, float p, uint64_t seed, mn_tensor counter);

/* Cross-entropy with PyTorch's options. NULL p = mn_cross_entropy. With
 * use_ignore_index, rows whose label equals ignore_index contribute nothing
 * and the mean is over the other rows (0, with zero gradient, when every row
 * is ignored; PyTorch gives NaN). label_smoothing in [0, 1]: the target is
 * (1 - s) onehot + s / C. A label outside [0, C) that is not ignored
 * contributes 0 and is still counted (PyTorch raises an error). Adds two
 * nodes: ce_rows (per-row max, sum of exp and loss term, row-parallel) and
 * cross_entropy (their mean); the backward reads the rows. */
typedef struct mn_cross_entropy_params {
    bool use_ignore_index;
    int32_t ignore_index; /* PyTorch's default is -100 */
    float label_smoothing;
} mn_cross_entropy_params;
mn_status mn_cross_entropy_ex(mn_graph *g, mn_tensor *out, mn_tensor logits, mn_tensor labels /* i32 [B] */,
                              const mn_cross_entropy_params *p);

/* Composites: subgraphs of the ops above (no kernels of their own). On error
 * the graph is unchanged. eps > 0 is added to the variance (or mean square).
 * rms_norm: x / sqrt(mean(x^2) + eps) * weight over the last axis;
 * weight [D] or MN_NONE. */
mn_status mn_rms_norm(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor weight, float eps);
/* (x - mean) / sqrt(var + eps) * weight + bias over the last axis (biased
 * variance, two passes); weight, bias [D] or MN_NONE. */
mn_status mn_layer_norm(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor weight, mn_tensor bias, float eps);
/* x [N,C,...] (rank 2..4), channels split into `groups` groups normalised
 * over (C/groups, ...); weight, bias [C] or MN_NONE (per channel). */
mn_status mn_group_norm(mn_graph *g, mn_tensor *out, mn_tensor x, int groups, mn_tensor weight, mn_tensor bias,
                        float eps);
/* silu(a) * b and gelu(a) * b (erf gelu), numpy broadcasting. */
mn_status mn_swiglu(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);
mn_status mn_geglu(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);
/* mean(|a - b|) over all elements; a and b of one shape. */
mn_status mn_l1_loss(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b);
/* mean(max(x,0) - x*t + log(1 + exp(-|x|))) over all elements, finite for
 * any finite logits; gradient sigmoid(x) - t (also at x == 0). */
mn_status mn_bce_with_logits(mn_graph *g, mn_tensor *out, mn_tensor logits, mn_tensor targets);
/* ---- layout, pooling, upsampling, normalisation (layout family) ---------- */

/* The part [start, start + length) of one axis (negative axis counts from
 * the end); the other dims are kept. Gradient: zero padding. */
mn_status mn_slice(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, int64_t start, int64_t length);
/* Zero padding: before[i] cells before and after[i] cells after axis i, for
 * every axis of x (arrays of x's rank, values >= 0; rank <= 4). */
mn_status mn_pad(mn_graph *g, mn_tensor *out, mn_tensor x, const int64_t *before, const int64_t *after);
/* Joins n >= 2 tensors along axis; every other dim must agree. Up to 6 inputs
 * make one node; more are joined in groups (a chain of concats). */
mn_status mn_concat(mn_graph *g, mn_tensor *out, const mn_tensor *xs, int n, int axis);
/* Cuts axis into n consecutive slices: outs[i] has sizes[i] there (sizes may
 * be NULL: n equal parts, the axis must divide by n). outs has n entries. */
mn_status mn_split(mn_graph *g, mn_tensor *outs, mn_tensor x, int axis, int n, const int64_t *sizes);
/* Expands x to shape by numpy broadcasting (size-1 or missing leading dims). */
mn_status mn_broadcast_to(mn_graph *g, mn_tensor *out, mn_tensor x, int rank, const int64_t *shape);
/* Average pooling, NCHW, like PyTorch's avg_pool2d (ceil_mode false; the
 * padding at most half the kernel). count_include_pad (PyTorch's default:
 * true) divides every window by the kernel area; false divides by the number
 * of cells of the window inside x. */
mn_status mn_avg_pool2d(mn_graph *g, mn_tensor *out, mn_tensor x, const mn_pool2d_params *p,
                        bool count_include_pad);
/* [N,C,H,W] -> [N,C,1,1], the mean over H and W (a composite: reshape + mean). */
mn_status mn_global_avg_pool(mn_graph *g, mn_tensor *out, mn_tensor x);
/* Nearest-neighbour upsampling, NCHW: [N,C,H,W] -> [N,C,H*scale_h,W*scale_w]
 * (each value repeated in a scale_h x scale_w block). */
mn_status mn_upsample_nearest2d(mn_graph *g, mn_tensor *out, mn_tensor x, int scale_h, int scale_w);
/* [N,C,H,W] -> [N,C,2H,2W]. */
mn_status mn_upsample_nearest2x(mn_graph *g, mn_tensor *out, mn_tensor x);

/* 1-D convolution, NCL: x [N,C,L], w [O,C/groups,K], bias [O] or MN_NONE ->
 * [N,O,L_out], L_out = (L + 2*padding - dilation*(K-1) - 1) / stride + 1.
 * A composite: conv2d over [N,C,1,L]. */
typedef struct mn_conv1d_params {
    int stride;   /* 0 means 1 */
    int padding;
    int dilation; /* 0 means 1 */
    int groups;   /* 0 means 1 */
} mn_conv1d_params;
mn_status mn_conv1d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                    const mn_conv1d_params *p);
/* Transposed convolution like PyTorch's conv_transpose2d: x [N,C_in,H,W],
 * w [C_in, C_out/groups, KH, KW], bias [C_out] or MN_NONE ->
 * [N, C_out, H_out, W_out], H_out = (H-1)*stride - 2*padding +
 * dilation*(KH-1) + output_padding + 1. output_padding must be smaller than
 * the stride (PyTorch also allows smaller than the dilation; not here). */
typedef struct mn_conv_transpose2d_params {
    int stride[2];         /* h, w; 0 means 1 */
    int padding[2];        /* h, w */
    int output_padding[2]; /* h, w */
    int dilation[2];       /* h, w; 0 means 1 */
    int groups;            /* 0 means 1 */
} mn_conv_transpose2d_params;
mn_status mn_conv_transpose2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                              const mn_conv_transpose2d_params *p);

/* Batch normalisation over [N,C,H,W] per channel, like PyTorch's
 * BatchNorm2d. weight, bias: [C] or MN_NONE (affine off). running_mean,
 * running_var: [C] parameters that the call freezes (no gradient, no
 * optimizer update; saved and loaded by name in checkpoints like any
 * parameter; initialise them with zeros and ones).
 * training: normalise with the batch statistics (biased variance) and, at
 *   every training step (mn_session_step), update the running statistics in
 *   place: r = (1 - momentum) * r + momentum * s, with the unbiased batch
 *   variance for running_var. N*H*W must be at least 2. mn_session_run does
 *   not update them, but still normalises with batch statistics: evaluate
 *   with a graph built with training = false and the same parameter names.
 * not training: normalise with the running statistics (any f32 [C] tensors).
 * y = (x - mean) / sqrt(var + eps) * weight + bias. A composite of
 * reductions and elementwise ops (gradients and every backend for free). */
mn_status mn_batch_norm2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor weight, mn_tensor bias,
                          mn_tensor running_mean, mn_tensor running_var, float momentum, float eps,
                          bool training);
/* Folds an inference batch norm into the convolution before it, on the host:
 * conv(x, w, b) followed by batch_norm2d(not training) equals
 * conv(x, w_out, b_out) with, per output channel o (s = gamma[o] /
 * sqrt(var[o] + eps)):  w_out[o] = w[o] * s,  b_out[o] = (b[o] - mean[o]) *
 * s + beta[o]. w, w_out: out_channels x per_channel floats (per_channel =
 * C/groups*KH*KW); b, b_out, gamma, beta, mean, var: out_channels floats.
 * b NULL means no conv bias (0), gamma NULL means 1, beta NULL means 0.
 * w_out may be w and b_out may be b (in place). Computed in double. */
mn_status mn_fold_batch_norm(float *w_out, float *b_out, const float *w, const float *b,
                             int64_t out_channels, int64_t per_channel, const float *gamma,
                             const float *beta, const float *mean, const float *var, float eps);
/* ---- transformer ops ------------------------------------------------------ */

/* Row lookup: out[..., :] = table[ids[...], :]. table: f32 [V,D] (usually a
 * parameter); ids: i32 of rank 1..3 ([N], [B,T], ...). Result ids.shape + [D].
 * An id outside [0, V) gives a zero row and no gradient; the table is never
 * read out of bounds. The table's gradient sums duplicate ids. */
mn_status mn_embedding(mn_graph *g, mn_tensor *out, mn_tensor table, mn_tensor ids);

/* Rotary position embedding in the Llama / Hugging Face "rotate half"
 * convention. x: f32 [..., T, Dh], Dh even, e.g. [B,H,T,Dh] (heads before
 * time, where HF applies it). Row t has position p = offset + pos[0] + t
 * (pos: MN_NONE, or an i32 [1] input written by the host, for KV-cache
 * decoding); with half = Dh/2, inv_freq[i] = theta^(-2i/Dh) and
 * a = p * inv_freq[i], for i < half:
 *   out[i]        = x[i] cos(a) - x[i+half] sin(a)
 *   out[i+half]   = x[i+half] cos(a) + x[i] sin(a)
 * theta 0 means 10000. |offset| and |pos| are at most 2^29 (pos is clamped);
 * Vulkan evaluates the angle to about 1e-7 turns for |p| < 2^24.
 * Backward: the rotation by -a. */
mn_status mn_rope(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor pos, float theta, int64_t offset);

typedef struct mn_attention_params {
    bool causal;    /* query i attends keys j <= i + offset (below) */
    int64_t window; /* > 0, causal only: and keys j > i + offset - window
                       (a sliding window of the last `window` keys); 0: none */
    float scale;    /* 0 means 1/sqrt(D) */
} mn_attention_params;

/* Scaled dot-product attention, softmax(scale * q k^T + mask) v, with an
 * online (flash-attention style) softmax: no Tq x Tk matrix is formed, and
 * large logits (1e3 and more) do not overflow.
 * q: f32 [B,Hq,Tq,D]; k, v: f32 [B,Hkv,Tk,D] with Hq a multiple of Hkv
 * (grouped-query attention: query head h reads kv head h / (Hq/Hkv)).
 * Result [B,Hq,Tq,D]. p NULL: full attention (no mask), default scale.
 * Modes: full (causal false: every key; Tk may differ from Tq, which is
 * cross-attention), causal, causal with a sliding window.
 * pos: MN_NONE, or an i32 [1] input for decoding over a KV cache: without it
 * the causal offset is Tk - Tq (the queries are the last Tq positions);
 * with it the offset is pos[0] and only keys j < pos[0] + Tq exist (k and v
 * are caches of Tmax rows, filled up to pos[0] + Tq by mn_kv_append), so the
 * same graph serves every decoding step. pos is clamped to [-2^29, 2^29].
 * A query row that attends no key gives zeros (and no gradient). */
mn_status mn_attention(mn_graph *g, mn_tensor *out, mn_tensor q, mn_tensor k, mn_tensor v, mn_tensor pos,
                       const mn_attention_params *p);

/* A persistent f32 tensor: zero when the session is created, kept across
 * steps and runs, never trained, not saved in checkpoints. It is written in
 * place by ops such as mn_kv_append (a KV cache: [B,Hkv,Tmax,D]). */
mn_status mn_graph_state(mn_graph *g, mn_tensor *out, const char *name, int rank, const int64_t *shape);

/* Writes x [..., Tnew, D] into cache [..., Tmax, D] (a state tensor, or the
 * result of an earlier append to one; leading dims equal) at rows
 * pos[0] .. pos[0]+Tnew-1, in place, every time the node runs (pos: i32 [1]
 * input written by the host). Rows outside [0, Tmax) are dropped. The result
 * is the updated cache (it shares the cache's storage): attend over it.
 * The node always runs in run and step (like an optimizer update), even if
 * no output depends on it. Not differentiable. */
mn_status mn_kv_append(mn_graph *g, mn_tensor *out, mn_tensor cache, mn_tensor x, mn_tensor pos);

/* ---- sessions ------------------------------------------------------------ */

typedef enum mn_backend_kind { MN_BACKEND_CPU = 0, MN_BACKEND_VULKAN = 1 } mn_backend_kind;
typedef enum mn_mode { MN_MODE_INFERENCE = 0, MN_MODE_TRAINING = 1 } mn_mode;
typedef enum mn_optim_kind { MN_OPTIM_SGD = 0, MN_OPTIM_ADAM = 1, MN_OPTIM_ADAMW = 2 } mn_optim_kind;
typedef enum mn_lr_schedule {
    MN_LR_CONSTANT = 0,
    MN_LR_WARMUP_COSINE = 1 /* linear 0 -> lr over warmup_steps, cosine to min_lr at total_steps */
} mn_lr_schedule;

typedef struct mn_optimizer {
    mn_optim_kind kind;
    float lr;
    float momentum;     /* SGD */
    bool nesterov;      /* SGD */
    float beta1, beta2; /* Adam/AdamW */
    float eps;          /* Adam/AdamW */
    float weight_decay; /* SGD and Adam: L2 added to the gradient; AdamW: decoupled */
    float clip_norm;    /* > 0: clip gradients by global L2 norm */
    mn_lr_schedule schedule;
    int64_t warmup_steps;
    int64_t total_steps;
    float min_lr;
} mn_optimizer;

/* Defaults of PyTorch for the kind (lr 1e-3, betas 0.9/0.999, eps 1e-8, ...). */
mn_optimizer mn_optimizer_default(mn_optim_kind kind);

/* A backend's device, opened once and shared by several sessions (a training
 * and an evaluation session, say): driver start-up (tens to hundreds of ms on
 * a GPU) is then paid once. Optional: a session given none opens its own.
 * Sessions that share a device must be used from one thread at a time. */
typedef struct mn_device mn_device;
/* On failure *out, if not NULL, is a dead device whose error message says why;
 * close it. */
mn_status mn_device_open(mn_device **out, mn_backend_kind backend);
/* Releases the caller's reference; the device lives on until the last session
 * using it is destroyed. Accepts NULL. */
void mn_device_close(mn_device *d);
const char *mn_device_error(const mn_device *d);

/* What a training step does when the loss or a parameter gradient is not
 * finite (NaN or +-inf). The check runs on the device as part of the step
 * (a finiteness test of the loss and of the sum of squares of all
 * gradients, the value gradient clipping also needs); the host reads one
 * 8-byte flag per step. Gradients whose global L2 norm exceeds about 1.8e19
 * (the f32 sum of squares overflows) count as non-finite.
 * SKIP (the default, like PyTorch's GradScaler): the update is skipped on the
 *   device - parameters, optimizer state, batch-norm running statistics and
 *   the step count (hence the learning-rate schedule and Adam's bias
 *   correction) stay as they were - and mn_session_step returns
 *   MN_E_NONFINITE naming the loss. A later step with finite values proceeds
 *   normally. Default because one bad batch otherwise turns every weight
 *   into NaN for good, and the check costs one reduction per gradient.
 * APPLY (plain PyTorch): the update is applied anyway (the weights may become
 *   NaN), the step counts, and mn_session_step still returns MN_E_NONFINITE.
 * UNCHECKED: no check and no read-back (the fastest step); mn_session_step
 *   returns MN_OK whatever the values. */
typedef enum mn_nonfinite {
    MN_NONFINITE_SKIP = 0,
    MN_NONFINITE_APPLY = 1,
    MN_NONFINITE_UNCHECKED = 2
} mn_nonfinite;

/* Synchronous data-parallel training over several processes ("ranks"),
 * through an all-reduce the caller provides, so the library itself depends
 * on no transport (the MPI binding in meganeura_mpi.h provides one).
 *
 * Every rank builds the same graph with the same options and seed (so the
 * same initial parameters) and feeds, before each mn_session_step, its own
 * shard of the global batch: equal shards, the graph's batch being the
 * shard. In each step the session
 *   1. runs the forward and backward pass, and as the gradients of the
 *      trained parameters are computed (the last layers' first) copies
 *      them into host buckets of about bucket_bytes; each full bucket is
 *      handed to a communication thread that calls sum() on it while the
 *      backward pass goes on (the overlap);
 *   2. after the backward pass adds the loss to the last bucket, waits for
 *      every bucket, divides the sums by size (the loss is a mean over
 *      each shard, so the mean over the global batch is the mean of the
 *      ranks' means) and writes the gradients and the loss back;
 *   3. runs the update part: the non-finite check and clipping (which thus
 *      see the reduced gradients and the global loss, so every rank decides
 *      alike), the optimizer updates.
 * mn_session_loss then returns the loss of the global batch on every rank;
 * outputs (logits) stay the rank's own. Parameters, optimizer state and
 * step counts stay bitwise equal on all ranks provided sum() gives every
 * rank the same bits (a fixed order of summation, not MPI_Allreduce's).
 * Not reduced: batch-norm running statistics (each rank keeps its shard's)
 * and dropout masks (drawn by element index within the shard).
 *
 * sum: adds n floats element-wise over all ranks, in place; returns 0, or
 * non-zero after writing a message into err (at most cap bytes). It is
 * called during mn_session_step from the session's communication thread,
 * one call at a time, in the same order on every rank; it must return
 * within a bounded time (a timeout) when another rank has died or hangs,
 * never block for ever. After a failure the step returns MN_E_DIST with
 * that message and the session is dead. */
typedef struct mn_dist {
    int rank, size; /* 0 <= rank < size; size 1 is a plain session */
    int (*sum)(void *user, float *buf, size_t n, char *err, size_t cap);
    void *user;
    size_t bucket_bytes; /* gradient bytes per sum() call; 0: 4 MiB */
} mn_dist;
/* The arithmetic of matrix products: matmul, the convolutions (conv1d,
 * conv2d, conv_transpose2d) and attention's products, forward and backward
 * (their gradients are products too). Tensors are stored in f32 in every
 * mode. Attention rounds q, k, v, its output's gradient and the softmax
 * weights (P, dS) that multiply them; scores and softmax sums stay f32.
 * STRICT (the default): f32 operands, f32 accumulation.
 * FAST_BF16, FAST_F16 (the fast contract): each operand element of a
 *   product is rounded to bf16 (or f16) - to nearest, ties to even; f16
 *   keeps subnormals and turns |x| >= 65520 into inf - and the products
 *   are accumulated in f32. On a device with cooperative matrices (tensor
 *   cores) the Vulkan backend runs them there; elsewhere (and on the CPU,
 *   the reference) plain f32 arithmetic on the rounded operands gives the
 *   same values up to the order of the f32 sums. Everything else (norms,
 *   softmax, losses, the optimizer, the master weights) stays f32. */
typedef enum mn_precision {
    MN_PRECISION_STRICT = 0,
    MN_PRECISION_FAST_BF16 = 1,
    MN_PRECISION_FAST_F16 = 2
} mn_precision;
/* "strict", "bf16", "f16"; "?" for anything else. */
const char *mn_precision_name(mn_precision p);

/* Dynamic loss scaling (training; off when init is 0, the default): for the
 * fast f16 contract, whose rounded operands lose gradients below 2^-24 and
 * overflow above 65504. Each step the backward pass starts from d loss =
 * scale instead of 1, so every gradient is scale times its value; the
 * update divides them back (exactly: scales are powers of two) before
 * clipping and the optimizer, so parameters, optimizer state and the loss
 * mn_session_loss returns are those of the unscaled step. When the scaled
 * gradients are not finite (an overflow) the update is skipped on the
 * device - as nonfinite = SKIP does, which scaling needs - the scale is
 * multiplied by backoff and the step returns MN_OK with the skip logged
 * (mn_set_log) and counted (mn_session_loss_scale); after `interval`
 * consecutive finite steps it is multiplied by growth. The scale never goes
 * below 1: non-finite gradients at scale 1 (or a non-finite loss) are an
 * ordinary MN_E_NONFINITE step. Checkpoints keep the scale and the count of
 * finite steps (meganeura.loss_scale, meganeura.loss_scale_good). Like
 * torch.amp.GradScaler(init_scale=65536, growth_factor=2, backoff_factor=0.5,
 * growth_interval=2000) when init = 65536 and the rest 0. */
typedef struct mn_loss_scale {
    float init;    /* first scale: a power of two in [1, 2^64]; 0: no scaling */
    float growth;  /* a power of two > 1; 0: 2 */
    float backoff; /* a power of two < 1; 0: 0.5 */
    int interval;  /* finite steps before growing, >= 1; 0: 2000 */
} mn_loss_scale;

typedef struct mn_session_options {
    mn_backend_kind backend;
    mn_mode mode;
    mn_optimizer optim; /* used in training mode */
    uint64_t seed;      /* parameter initialisation */
    mn_device *device;  /* NULL: the session opens its own device */
    mn_nonfinite nonfinite; /* training: non-finite loss or gradients (default SKIP) */
    const mn_dist *dist; /* training: data-parallel all-reduce (copied at creation; its
                            user data must outlive the session); NULL: one process */
    mn_precision precision; /* matrix products (default STRICT) */
    mn_loss_scale loss_scale; /* training: dynamic loss scaling (default off) */
} mn_session_options;

/* What data-parallel steps spent communicating, summed over the steps
 * since the session was created (zeros without mn_session_options.dist). */
typedef struct mn_dist_stats {
    int64_t steps;
    int buckets;          /* sum() calls per step (the last one carries the loss) */
    size_t floats;        /* values reduced per step: the gradients and the loss */
    double sum_seconds;   /* in sum() (the communication thread), all steps */
    double wait_seconds;  /* the step waited for sum() after its backward pass, all
                             steps: the part of the communication not overlapped */
    double copy_seconds;  /* reading gradients to the host and writing them back */
} mn_dist_stats;
mn_status mn_session_dist_stats(const mn_session *s, mn_dist_stats *out);

mn_session_options mn_session_default_options(void);

/* Builds a session from g (g is not modified and may be destroyed afterwards).
 * On failure *out, if not NULL, is a dead session whose error message says why;
 * destroy it. */
mn_status mn_session_create(mn_session **out, const mn_graph *g, const mn_session_options *opt);
void mn_session_destroy(mn_session *s);
const char *mn_session_error(const mn_session *s);

/* Copy host data into a named input; bytes must equal the input's size. */
mn_status mn_session_set_input(mn_session *s, const char *name, const void *data, size_t bytes);
/* Forward + backward + optimizer update (training sessions). MN_E_NONFINITE
 * when the loss or a gradient was not finite (options.nonfinite says whether
 * the update was skipped); the message gives the loss value and which was
 * not finite, and mn_session_loss returns that loss. */
mn_status mn_session_step(mn_session *s);
/* Forward only; computes outputs and the loss if it has one. */
mn_status mn_session_run(mn_session *s);
/* Forward, only what the n named outputs (or the loss, by its output name)
 * need: the nodes they depend on, side-effect nodes on their path (the
 * mn_kv_append writes they read) included, in the order mn_session_run
 * would run them. Nodes off their path do not run (another branch's cache
 * appends do not happen), so outputs that are not named keep stale values.
 * A session keeps the node lists of at most 2 distinct output sets (a
 * backend may record each once): a third set is MN_E_UNSUPPORTED. */
mn_status mn_session_run_outputs(mn_session *s, const char *const *names, int n);
mn_status mn_session_loss(mn_session *s, float *out);
mn_status mn_session_output(mn_session *s, const char *name, void *dst, size_t bytes);
/* Element count of a named input, output or parameter. */
mn_status mn_session_numel(mn_session *s, const char *name, size_t *out);
mn_status mn_session_get_param(mn_session *s, const char *name, float *dst, size_t count);
mn_status mn_session_set_param(mn_session *s, const char *name, const float *src, size_t count);
/* Number of optimizer steps taken so far (skipped steps do not count); the
 * learning rate of the next step. */
int64_t mn_session_step_count(const mn_session *s);
/* Dynamic loss scaling's state (mn_loss_scale): the scale of the next step
 * (0 when the session does not scale) and, if not NULL, the steps skipped
 * because the scaled gradients overflowed, since the session was created. */
float mn_session_loss_scale(const mn_session *s, int64_t *overflows);
float mn_session_lr(const mn_session *s);

/* Checkpoints (safetensors): parameters, optimizer state, step count and
 * schedule state. Saving is atomic: a failed save leaves the old file intact;
 * a save only ever replaces a regular file (a directory, FIFO, socket, device
 * node or symbolic link at path is refused, links are not followed), and
 * removes temporary files that killed saves of the same path left behind.
 * Loading checks every name, dtype and shape, the numeric metadata and that
 * no value is NaN or infinite; an inference session loads only the
 * parameters. Only regular files are read (a FIFO is refused, not waited on). */
mn_status mn_session_save(mn_session *s, const char *path);
mn_status mn_session_load(mn_session *s, const char *path);
/* Largest "meganeura.step" a checkpoint may hold (2^53). */
#define MN_CHECKPOINT_MAX_STEP 9007199254740992ull
/* Checks up front that a checkpoint could be saved at path (it is absent or
 * a regular file, and a file can be created in its folder), so a long run
 * does not fail at its first save. err (may be NULL) receives the reason. */
mn_status mn_checkpoint_check_path(const char *path, char *err, size_t errcap);
/* Extra string metadata written into later checkpoints (keys starting with
 * "meganeura." are reserved). */
mn_status mn_session_set_meta(mn_session *s, const char *key, const char *value);
/* Reads one metadata value of a checkpoint file without a session; err (may
 * be NULL) receives a message on failure. */
mn_status mn_checkpoint_meta(const char *path, const char *key, char *dst, size_t cap,
                             char *err, size_t errcap);

/* ---- inference bundles (docs/BUNDLE.md) ---------------------------------- */

/* A bundle is one file an application ships: the graph, the parameters and,
 * from a Vulkan session, every kernel's SPIR-V (with its GLSL) and the
 * exporting device's pipeline-cache data, so a session starts without
 * compiling anything on a device like the exporter's.
 *
 * Writes the bundle of s, an inference session (MN_E_STATE otherwise): its
 * graph as the user built it, the parameters' current values (e.g. after
 * mn_session_load), the metadata of mn_session_set_meta, and on Vulkan its
 * kernels and pipeline-cache data. Atomic, like mn_session_save. */
mn_status mn_session_export_bundle(mn_session *s, const char *path);
/* A session from a bundle, on opt's backend and device (any: a Vulkan
 * bundle runs on the CPU too; opt->mode may be training, starting from the
 * bundle's weights). Every section is checked (checksums, sizes, the graph
 * re-built through the library's own rules, the weights against it) before
 * the session is made. Kernels whose generated GLSL is in the bundle are
 * taken from it before the on-disk cache and the compiler; the others (a
 * device whose limits change the generated code) are compiled as usual. The
 * bundle's pipeline-cache data is used only when its header names this
 * device (vendor, device id, pipelineCacheUUID). On failure *out, if not
 * NULL, is a dead session whose error says why; destroy it. */
mn_status mn_session_create_from_bundle(mn_session **out, const char *path, const mn_session_options *opt);

/* Where a session's kernels came from (all 0 on the cpu backend). */
typedef struct mn_kernel_stats {
    int compiled;          /* compiled with shaderc by this session */
    int cached;            /* from the on-disk SPIR-V cache */
    int bundled;           /* from the bundle it was created from */
    bool bundle_pipelines; /* the bundle's pipeline-cache data matched this device and was used */
} mn_kernel_stats;
mn_status mn_session_kernel_stats(const mn_session *s, mn_kernel_stats *out);

/* Memory: bytes the session's arenas hold (peak) and the sum of the sizes of
 * all tensors it computes or keeps (what a planner-less runtime would hold). */
mn_status mn_session_memory(const mn_session *s, size_t *peak_bytes, size_t *sum_bytes);
/* The peak per arena, in this order: parameters, optimizer state,
 * inputs/outputs/constants, work (alignment and, on Vulkan, the padding
 * that keeps each tensor inside one chunk of an arena included); their sum
 * is the peak. */
#define MN_MEMORY_ARENAS 4
mn_status mn_session_memory_arenas(const mn_session *s, size_t bytes[MN_MEMORY_ARENAS]);
/* what: "graph" (the session's graph after autodiff and optimizer insertion),
 * "schedule", "kernels" (the kernel plan: which nodes one dispatch computes),
 * "memplan". The MEGANEURA_DUMP environment variable (a comma list
 * of the same words) prints them to stderr at session build. */
mn_status mn_session_dump(const mn_session *s, const char *what, FILE *f);

/* ---- reading files written by others (safetensors, text) ------------------ */

/* A safetensors file opened for reading tensors one at a time (any producer:
 * Hugging Face checkpoints, PyTorch fixtures). Opening reads and checks the
 * header only (as mn_session_load does: regular files only, every name,
 * dtype, shape and range checked against the file); each read then reads
 * that tensor's bytes with bounded reads, so a 5 GB file costs no more
 * memory than its largest tensor. The handle keeps the file open. */
typedef struct mn_safetensors mn_safetensors;
#define MN_SAFETENSORS_MAX_RANK 8
typedef struct mn_safetensors_tensor {
    const char *name;  /* owned by the handle, valid until it is closed */
    const char *dtype; /* as written: "F32", "BF16", "F16", "I64", ... */
    int rank;
    int64_t shape[MN_SAFETENSORS_MAX_RANK];
} mn_safetensors_tensor;
/* On failure *out is NULL and err (may be NULL) says why, naming the path. */
mn_status mn_safetensors_open(mn_safetensors **out, const char *path, char *err, size_t errcap);
void mn_safetensors_close(mn_safetensors *f);
/* Message of the last failed call on f ("" if none). */
const char *mn_safetensors_error(const mn_safetensors *f);
int mn_safetensors_count(const mn_safetensors *f);
/* The i-th tensor (0 <= i < count) in file order. */
mn_status mn_safetensors_tensor_at(const mn_safetensors *f, int i, mn_safetensors_tensor *out);
/* MN_E_NOT_FOUND if the file has no tensor of that name (no message set). */
mn_status mn_safetensors_find(const mn_safetensors *f, const char *name, mn_safetensors_tensor *out);
/* A "__metadata__" value, or NULL. */
const char *mn_safetensors_meta(const mn_safetensors *f, const char *key);
/* Reads a tensor of count elements as f32: F32 as is, BF16 and F16 exactly,
 * F64 rounded. Other dtypes: MN_E_DTYPE; a count that is not the tensor's
 * element count: MN_E_SHAPE; a NaN or infinite value: MN_E_FORMAT naming the
 * tensor (dst then holds the values read). */
mn_status mn_safetensors_read_f32(mn_safetensors *f, const char *name, float *dst, size_t count);
/* Reads an I32 tensor, or an I64 one whose values all fit in i32. */
mn_status mn_safetensors_read_i32(mn_safetensors *f, const char *name, int32_t *dst, size_t count);

/* Reads a whole regular file of at most max_bytes into *out (malloc'd, NUL
 * appended, free() it), its length in *len (may be NULL). Anything but a
 * regular file is refused without blocking (a FIFO is never waited on). */
mn_status mn_read_file(char **out, size_t *len, const char *path, size_t max_bytes, char *err, size_t errcap);
/* s made safe to print (control bytes, broken UTF-8 and bidirectional
 * controls become \xNN; the middle of a value too long for dst becomes
 * "..."). cap >= 8. Returns dst. */
const char *mn_escape(char *dst, size_t cap, const char *s);

/* ---- devices ------------------------------------------------------------- */

/* Lists the Vulkan devices with their limits and the extensions the project
 * uses (fp16, bf16, cooperative matrix, subgroup size). MN_E_UNSUPPORTED in a
 * build without the Vulkan backend. Environment: MEGANEURA_DEVICE picks the
 * device by index or name substring; MEGANEURA_VALIDATE=1 enables the Khronos
 * validation layer. */
mn_status mn_list_devices(FILE *f);

/* ---- logging ------------------------------------------------------------- */

typedef enum mn_log_level { MN_LOG_ERROR = 0, MN_LOG_WARN, MN_LOG_INFO, MN_LOG_DEBUG } mn_log_level;
typedef void (*mn_log_fn)(mn_log_level level, const char *msg, void *user);
/* Process-wide; NULL restores the default (stderr, warnings and errors). */
void mn_set_log(mn_log_fn fn, void *user);

/* ---- tokenizer ------------------------------------------------------------ */

/* Text <-> token ids with a Hugging Face tokenizer.json: byte-level BPE as
 * GPT-2, Llama-3, SmolLM2 and Qwen2 use it (model BPE; normalizer none or a
 * Unicode normal form; pre-tokenizers ByteLevel, Split, Digits, Sequence;
 * added/special tokens; post-processors ByteLevel, TemplateProcessing,
 * RobertaProcessing, BertProcessing; decoder ByteLevel). Ids are those the
 * tokenizers library (0.23) gives for the same file and text. Other
 * components (WordPiece, Unigram, Lowercase, Metaspace...) are refused at
 * load with MN_E_UNSUPPORTED naming the type; truncation and padding in the
 * file are ignored. A handle is used by one thread at a time. */
typedef struct mn_tokenizer mn_tokenizer;

enum {
    MN_TOKENIZE_ADD_SPECIAL = 1u << 0,     /* encode: add the post-processor's special tokens (BOS...),
                                              as add_special_tokens=True */
    MN_TOKENIZE_SPECIAL_AS_TEXT = 1u << 1, /* encode: special tokens written in the text are not
                                              recognised: they are tokenized as plain text */
    MN_TOKENIZE_SKIP_SPECIAL = 1u << 2     /* decode: leave special tokens out */
};

/* Loads a tokenizer.json file. On failure *out is NULL and err (may be NULL)
 * receives a message naming the file and the field ("model.merges[12] ..."). */
mn_status mn_tokenizer_load(mn_tokenizer **out, const char *path, char *err, size_t errcap);
/* The same from len bytes of JSON text in memory. */
mn_status mn_tokenizer_load_json(mn_tokenizer **out, const char *json, size_t len, char *err, size_t errcap);
void mn_tokenizer_destroy(mn_tokenizer *t);
/* Message of the last failed call on t ("" if none); valid until the next call. */
const char *mn_tokenizer_error(const mn_tokenizer *t);

/* Encodes len bytes of UTF-8 text (MN_E_INVALID if it is not UTF-8). Writes
 * the first min(count, cap) ids to ids and the full count to *n_ids, so a
 * call with cap 0 (ids may be NULL) sizes the buffer. flags: MN_TOKENIZE_*. */
mn_status mn_tokenizer_encode(mn_tokenizer *t, int32_t *ids, size_t cap, size_t *n_ids, const char *text,
                              size_t len, unsigned flags);
/* Decodes n_ids ids into text: at most cap-1 bytes and a NUL (when cap > 0);
 * *len gets the full length in bytes (the text may hold NUL bytes). Ids not
 * in the vocabulary are skipped. Invalid UTF-8 from partial byte sequences
 * becomes U+FFFD. flags: MN_TOKENIZE_SKIP_SPECIAL. */
mn_status mn_tokenizer_decode(mn_tokenizer *t, char *text, size_t cap, size_t *len, const int32_t *ids,
                              size_t n_ids, unsigned flags);
/* Id of a token string (an added token or a vocabulary entry, e.g.
 * "<|im_end|>"); MN_E_NOT_FOUND if there is none. */
mn_status mn_tokenizer_token_to_id(mn_tokenizer *t, int32_t *id, const char *token);
/* The token string of id (byte-level form for vocabulary entries); NULL if
 * none. Belongs to t, valid until mn_tokenizer_destroy. */
const char *mn_tokenizer_id_to_token(const mn_tokenizer *t, int32_t id);
/* One past the largest id the tokenizer can produce: the rows an embedding
 * table needs. */
int32_t mn_tokenizer_vocab_size(const mn_tokenizer *t);
/* Whether id is a special token (skipped by MN_TOKENIZE_SKIP_SPECIAL). */
bool mn_tokenizer_is_special(const mn_tokenizer *t, int32_t id);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* MEGANEURA_H */
