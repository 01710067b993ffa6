/* op_cases.h - the per-op test cases shared by the gradient check and the
 * backend comparison table: for each op, small graphs that place it
 * mid-graph, y = op(1.1 * P...), loss = sum(R * (1.7*y + y*y)).
 * Included by one test file each (static definitions).
 */
#ifndef MN_TEST_OP_CASES_H
#define MN_TEST_OP_CASES_H

#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "harness.h"

#define MAXP 4

typedef struct gc {
    mn_graph *g;
    mn_tensor p[MAXP];
    mn_tensor x[MAXP];
    int np;
    unsigned seed;
    int32_t labels_in; /* i32 labels input or MN_NONE */
    int32_t labels[16];
    int nlabels;
} gc;

/* Parameter of the given shape, values in [lo, hi), used as x = 1.1 * P. */
static mn_tensor gp(gc *c, int rank, const int64_t *shape, float lo, float hi) {
    char name[16];
    snprintf(name, sizeof name, "p%d", c->np);
    mn_init init = {MN_INIT_UNIFORM, lo / 1.1f, hi / 1.1f};
    mn_tensor p, x;
    if (mn_graph_param(c->g, &p, name, rank, shape, init) || mn_scale(c->g, &x, p, 1.1f)) return MN_NONE;
    c->p[c->np] = p;
    c->x[c->np++] = x;
    return x;
}
#define S(...) (const int64_t[]){__VA_ARGS__}
#define GP(r, lo, hi, ...) gp(c, r, S(__VA_ARGS__), lo, hi)

typedef mn_tensor (*case_fn)(gc *c);

static mn_tensor c_matmul(gc *c) { mn_tensor y; mn_matmul(c->g, &y, GP(2, -1, 1, 3, 4), GP(2, -1, 1, 4, 5)); return y; }
static mn_tensor c_matmul_ta(gc *c) { mn_tensor y; mn_matmul_ex(c->g, &y, GP(2, -1, 1, 4, 3), GP(2, -1, 1, 4, 5), true, false); return y; }
static mn_tensor c_matmul_tb(gc *c) { mn_tensor y; mn_matmul_ex(c->g, &y, GP(2, -1, 1, 3, 4), GP(2, -1, 1, 5, 4), false, true); return y; }
static mn_tensor c_matmul_tab(gc *c) { mn_tensor y; mn_matmul_ex(c->g, &y, GP(2, -1, 1, 4, 3), GP(2, -1, 1, 5, 4), true, true); return y; }
static mn_tensor c_matmul_bshared(gc *c) { mn_tensor y; mn_matmul(c->g, &y, GP(3, -1, 1, 2, 3, 4), GP(2, -1, 1, 4, 5)); return y; }
static mn_tensor c_matmul_ashared(gc *c) { mn_tensor y; mn_matmul_ex(c->g, &y, GP(2, -1, 1, 3, 4), GP(3, -1, 1, 2, 5, 4), false, true); return y; }
/* a weight's gradient over 1536 / 1024 rows: summed in 3 / 2 parts
 * (autodiff.c ksplit_parts; few columns: the central differences of a loss
 * over more terms lose digits) */
static mn_tensor c_matmul_longk(gc *c) { mn_tensor y; mn_matmul(c->g, &y, GP(2, -1, 1, 1536, 3), GP(2, -1, 1, 3, 5)); return y; }
static mn_tensor c_matmul_longk_tb(gc *c) { mn_tensor y; mn_matmul_ex(c->g, &y, GP(2, -1, 1, 1024, 2), GP(2, -1, 1, 3, 2), false, true); return y; }
static mn_tensor c_matmul_batched(gc *c) { mn_tensor y; mn_matmul_ex(c->g, &y, GP(3, -1, 1, 2, 4, 3), GP(3, -1, 1, 2, 4, 5), true, false); return y; }
static mn_tensor c_add(gc *c) { mn_tensor y; mn_add(c->g, &y, GP(3, -1, 1, 2, 3, 4), GP(2, -1, 1, 3, 1)); return y; }
static mn_tensor c_sub(gc *c) { mn_tensor y; mn_sub(c->g, &y, GP(1, -1, 1, 4), GP(3, -1, 1, 2, 3, 4)); return y; }
static mn_tensor c_mul(gc *c) { mn_tensor y; mn_mul(c->g, &y, GP(3, -1, 1, 2, 3, 4), GP(3, -1, 1, 2, 1, 4)); return y; }
static mn_tensor c_div(gc *c) { mn_tensor y; mn_div(c->g, &y, GP(2, -1, 1, 3, 4), GP(1, 0.5f, 2, 4)); return y; }
static mn_tensor c_scale(gc *c) { mn_tensor y; mn_scale(c->g, &y, GP(2, -1, 1, 3, 4), -0.7f); return y; }
static mn_tensor c_neg(gc *c) { mn_tensor y; mn_neg(c->g, &y, GP(2, -1, 1, 3, 4)); return y; }
#define UNARY(fn, lo, hi) \
    static mn_tensor c_##fn(gc *c) { mn_tensor y; mn_##fn(c->g, &y, GP(2, lo, hi, 3, 4)); return y; }
UNARY(exp, -1, 1)
UNARY(log, 0.5f, 2)
UNARY(sqrt, 0.5f, 2)
UNARY(rsqrt, 0.5f, 2)
UNARY(relu, -1, 1)
UNARY(sigmoid, -3, 3)
UNARY(tanh, -2, 2)
UNARY(gelu, -3, 3)
UNARY(gelu_tanh, -3, 3)
UNARY(silu, -3, 3)
UNARY(sin, -4, 4)
UNARY(cos, -4, 4)
/* a cast to f32 (the 16-bit ones round: no finite differences through them; test_cast checks their gradient) */
static mn_tensor c_cast(gc *c) { mn_tensor y; mn_cast(c->g, &y, GP(2, -1, 1, 3, 4), MN_F32); return y; }
UNARY(softmax, -2, 2)
UNARY(log_softmax, -2, 2)
static mn_tensor c_sum(gc *c) { mn_tensor y; mn_sum(c->g, &y, GP(3, -1, 1, 2, 3, 4), 1, false); return y; }
static mn_tensor c_sum_all(gc *c) { mn_tensor y; mn_sum(c->g, &y, GP(2, -1, 1, 3, 4), MN_ALL_AXES, false); return y; }
static mn_tensor c_mean(gc *c) { mn_tensor y; mn_mean(c->g, &y, GP(3, -1, 1, 2, 3, 4), -1, true); return y; }
static mn_tensor c_mean_all(gc *c) { mn_tensor y; mn_mean(c->g, &y, GP(2, -1, 1, 3, 4), MN_ALL_AXES, false); return y; }
static mn_tensor c_max(gc *c) { mn_tensor y; mn_max(c->g, &y, GP(3, -1, 1, 2, 3, 4), 1, false); return y; }
static mn_tensor c_max_keep(gc *c) { mn_tensor y; mn_max(c->g, &y, GP(2, -1, 1, 3, 5), -1, true); return y; }
static mn_tensor c_max_all(gc *c) { mn_tensor y; mn_max(c->g, &y, GP(2, -1, 1, 3, 4), MN_ALL_AXES, false); return y; }
static mn_tensor c_reshape(gc *c) { mn_tensor y; mn_reshape(c->g, &y, GP(2, -1, 1, 2, 6), 3, S(3, -1, 2)); return y; }
static mn_tensor c_permute(gc *c) { mn_tensor y; mn_permute(c->g, &y, GP(3, -1, 1, 2, 3, 4), (const int[]){2, 0, 1}); return y; }
static mn_tensor c_transpose(gc *c) { mn_tensor y; mn_transpose(c->g, &y, GP(2, -1, 1, 3, 4), 0, 1); return y; }
/* internal ops, built directly */
static mn_tensor internal(gc *c, op_id op, mn_tensor x, int rank, const int64_t *shape) {
    node p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.nin = 1;
    p.in[0] = x;
    p.rank = rank;
    memcpy(p.shape, shape, (size_t)rank * sizeof *shape);
    int32_t y = MN_NONE;
    graph_add(c->g, &y, &p);
    return y;
}
static mn_tensor c_broadcast(gc *c) { return internal(c, OP_BROADCAST, GP(2, -1, 1, 3, 1), 3, S(2, 3, 4)); }
static mn_tensor c_reduce_to(gc *c) { return internal(c, OP_REDUCE_TO, GP(3, -1, 1, 2, 3, 4), 2, S(1, 4)); }
static mn_tensor c_cross_entropy(gc *c) {
    int64_t b = 4;
    mn_graph_input(c->g, &c->labels_in, "labels", MN_I32, 1, &b);
    int32_t l[4] = {0, 3, 4, 1};
    memcpy(c->labels, l, sizeof l);
    c->nlabels = 4;
    mn_tensor y;
    mn_cross_entropy(c->g, &y, GP(2, -3, 3, 4, 5), c->labels_in);
    return y;
}
static mn_tensor c_cross_entropy_dense(gc *c) { mn_tensor y; mn_cross_entropy_dense(c->g, &y, GP(2, -3, 3, 4, 5), GP(2, 0, 1, 4, 5)); return y; }
static mn_tensor c_mse(gc *c) { mn_tensor y; mn_mse(c->g, &y, GP(2, -1, 1, 3, 4), GP(2, -1, 1, 3, 4)); return y; }
static mn_tensor c_conv2d(gc *c) {
    mn_conv2d_params p = {{2, 2}, {1, 1}, {1, 1}, 2};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 2, 4, 5, 5), GP(4, -1, 1, 6, 2, 3, 3), GP(1, -1, 1, 6), &p);
    return y;
}
static mn_tensor c_conv2d_dil(gc *c) {
    mn_conv2d_params p = {{1, 2}, {2, 0}, {2, 1}, 1};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 1, 3, 6, 7), GP(4, -1, 1, 2, 3, 2, 3), MN_NONE, &p);
    return y;
}
/* sizes that reach the implicit-GEMM convolution and split-K matmul paths */
static mn_tensor c_conv2d_gemm(gc *c) {
    mn_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 2, 16, 16, 16), GP(4, -0.2f, 0.2f, 32, 16, 3, 3), GP(1, -1, 1, 32), &p);
    return y;
}
/* K = 1*66*32 = 2112 >= 2 * 1024: autodiff splits the weight gradient into
 * 2 partial sums (chunks of 1088 and 1024), the direct kernel on Vulkan */
static mn_tensor c_conv2d_wgrad_split(gc *c) {
    mn_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 1};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 1, 1, 66, 32), GP(4, -0.5f, 0.5f, 2, 1, 3, 3), GP(1, -1, 1, 2), &p);
    return y;
}
/* K = 4*25*40 = 4000, 2 groups of 32 x 144: 3 partial sums (1344, 1344,
 * 1312) through the implicit GEMM, z = part * groups + group */
static mn_tensor c_conv2d_wgrad_split_gemm(gc *c) {
    mn_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 2};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 4, 32, 25, 40), GP(4, -0.2f, 0.2f, 64, 16, 3, 3), MN_NONE, &p);
    return y;
}
static mn_tensor c_conv2d_gemm_strided(gc *c) {
    mn_conv2d_params p = {{2, 2}, {1, 1}, {1, 1}, 2};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 2, 32, 15, 17), GP(4, -0.2f, 0.2f, 64, 16, 3, 3), MN_NONE, &p);
    return y;
}
/* The strided input gradient by stride classes (vk_gen_linalg.c
 * conv_subpix): 1x1 stride 2 (three classes of four without a tap), 5x5
 * stride 2 pad 2 over an odd width (classes of 9 and 8 columns), strides
 * (3, 2) with a 3x2 kernel (classes of 5 and 4 rows, taps padded 1 -> 2). */
static mn_tensor c_conv2d_gemm_1x1_s2(gc *c) {
    mn_conv2d_params p = {{2, 2}, {0, 0}, {1, 1}, 1};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 2, 32, 12, 10), GP(4, -0.2f, 0.2f, 64, 32, 1, 1), MN_NONE, &p);
    return y;
}
static mn_tensor c_conv2d_gemm_5x5_s2(gc *c) {
    mn_conv2d_params p = {{2, 2}, {2, 2}, {1, 1}, 1};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 2, 16, 18, 17), GP(4, -0.1f, 0.1f, 32, 16, 5, 5), MN_NONE, &p);
    return y;
}
static mn_tensor c_conv2d_gemm_s3x2(gc *c) {
    mn_conv2d_params p = {{3, 2}, {1, 0}, {1, 1}, 1};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 1, 16, 13, 12), GP(4, -0.2f, 0.2f, 32, 16, 3, 2), MN_NONE, &p);
    return y;
}
static mn_tensor c_matmul_mnist(gc *c) { mn_tensor y; mn_matmul(c->g, &y, GP(2, -1, 1, 64, 784), GP(2, -0.1f, 0.1f, 784, 128)); return y; }
/* decoding's matrix-vector products (gemv.glsl): one row against a Linear
 * weight as published ([out, in], trans_b), a few rows against [in, out],
 * and a batch of single rows (attention-like) */
static mn_tensor c_gemv_decode(gc *c) { mn_tensor y; mn_matmul_ex(c->g, &y, GP(2, -1, 1, 1, 576), GP(2, -0.1f, 0.1f, 1536, 576), false, true); return y; }
static mn_tensor c_gemv_rows(gc *c) { mn_tensor y; mn_matmul(c->g, &y, GP(2, -1, 1, 7, 1000), GP(2, -0.1f, 0.1f, 1000, 301)); return y; }
static mn_tensor c_gemv_batched(gc *c) { mn_tensor y; mn_matmul_ex(c->g, &y, GP(3, -1, 1, 6, 1, 64), GP(3, -1, 1, 6, 100, 64), false, true); return y; }
static mn_tensor c_maxpool(gc *c) {
    mn_pool2d_params p = {{2, 2}, {2, 2}, {0, 0}};
    mn_tensor y;
    mn_max_pool2d(c->g, &y, GP(4, -1, 1, 2, 3, 6, 6), &p);
    return y;
}
static mn_tensor c_maxpool_overlap(gc *c) {
    mn_pool2d_params p = {{3, 3}, {2, 2}, {1, 1}};
    mn_tensor y;
    mn_max_pool2d(c->g, &y, GP(4, -1, 1, 1, 2, 7, 6), &p);
    return y;
}
/* stop_gradient: y = stop(x) * x, so dL/dx flows through the second factor only */
static mn_tensor c_stop(gc *c) {
    mn_tensor x = GP(2, -1, 1, 3, 4), s, y;
    mn_stop_gradient(c->g, &s, x);
    mn_mul(c->g, &y, s, x);
    return y;
}

/* ---- pointwise family (issue 4) ---- */
static mn_tensor c_abs(gc *c) { mn_tensor y; mn_abs(c->g, &y, GP(2, -1, 1, 3, 5)); return y; }
static mn_tensor c_clamp(gc *c) { mn_tensor y; mn_clamp(c->g, &y, GP(2, -2, 2, 3, 5), -1.0f, 0.8f); return y; }
static mn_tensor c_pow(gc *c) { mn_tensor y; mn_pow(c->g, &y, GP(2, 0.5f, 2, 3, 4), 2.5f); return y; }
static mn_tensor c_pow_int(gc *c) { mn_tensor y; mn_pow(c->g, &y, GP(2, -1.5f, 1.5f, 1, 7), 3.0f); return y; }
static mn_tensor c_pow_neg(gc *c) { mn_tensor y; mn_pow(c->g, &y, GP(1, 0.5f, 2, 5), -1.5f); return y; }
/* cond [2,1,4] with zeros, a [2,3,4], b [3,1]: all three broadcast */
static mn_tensor c_where(gc *c) {
    float cv[8] = {1, 0, 0.5f, 0, 0, -2, 1, 0};
    mn_tensor cond, y;
    mn_graph_constant(c->g, &cond, 3, S(2, 1, 4), cv);
    mn_where(c->g, &y, cond, GP(3, -1, 1, 2, 3, 4), GP(2, -1, 1, 3, 1));
    return y;
}
static mn_tensor c_dropout(gc *c) { mn_tensor y; mn_dropout(c->g, &y, GP(2, -1, 1, 5, 7), 0.3f, 42); return y; }
/* the counter is an i32 input fed through the labels slot */
static mn_tensor c_dropout_counter(gc *c) {
    mn_graph_input(c->g, &c->labels_in, "step", MN_I32, 0, NULL);
    c->labels[0] = 7;
    c->nlabels = 1;
    mn_tensor y;
    mn_dropout_ex(c->g, &y, GP(3, -1, 1, 3, 1, 9), 0.5f, 0x123456789abcdefull, c->labels_in);
    return y;
}
static mn_tensor ce_case(gc *c, int64_t b, int64_t k, const int32_t *lab, const mn_cross_entropy_params *p) {
    mn_graph_input(c->g, &c->labels_in, "labels", MN_I32, 1, &b);
    memcpy(c->labels, lab, (size_t)b * sizeof *lab);
    c->nlabels = (int)b;
    mn_tensor y;
    mn_cross_entropy_ex(c->g, &y, GP(2, -3, 3, b, k), c->labels_in, p);
    return y;
}
static mn_tensor c_ce_ignore_smooth(gc *c) {
    const mn_cross_entropy_params p = {true, -100, 0.1f};
    return ce_case(c, 6, 5, (const int32_t[]){0, -100, 4, 1, -100, 2}, &p);
}
static mn_tensor c_ce_smooth(gc *c) {
    const mn_cross_entropy_params p = {false, 0, 0.25f};
    return ce_case(c, 4, 7, (const int32_t[]){6, 0, 9, 3}, &p); /* 9: out of range, counted */
}
static mn_tensor c_ce_ignore(gc *c) {
    const mn_cross_entropy_params p = {true, 2, 0};
    return ce_case(c, 5, 3, (const int32_t[]){2, 0, 1, 2, 1}, &p);
}
/* composites */
static mn_tensor c_rms_norm(gc *c) { mn_tensor y; mn_rms_norm(c->g, &y, GP(3, -2, 2, 2, 3, 5), GP(1, 0.5f, 1.5f, 5), 1e-5f); return y; }
static mn_tensor c_rms_norm_large(gc *c) { mn_tensor y; mn_rms_norm(c->g, &y, GP(2, 9e3f, 1.1e4f, 3, 7), MN_NONE, 1e-6f); return y; }
static mn_tensor c_layer_norm(gc *c) {
    mn_tensor y;
    mn_layer_norm(c->g, &y, GP(2, -2, 2, 4, 7), GP(1, 0.5f, 1.5f, 7), GP(1, -1, 1, 7), 1e-5f);
    return y;
}
/* values ~1e4 with a spread of ~1e3: the two-pass variance keeps them exact */
static mn_tensor c_layer_norm_large(gc *c) { mn_tensor y; mn_layer_norm(c->g, &y, GP(2, 9e3f, 1.1e4f, 3, 5), MN_NONE, MN_NONE, 1e-5f); return y; }
static mn_tensor c_layer_norm_d1(gc *c) { mn_tensor y; mn_layer_norm(c->g, &y, GP(2, -1, 1, 3, 1), GP(1, 0.5f, 1.5f, 1), GP(1, -1, 1, 1), 1e-5f); return y; }
static mn_tensor c_group_norm(gc *c) {
    mn_tensor y;
    mn_group_norm(c->g, &y, GP(4, -2, 2, 2, 6, 3, 1), 3, GP(1, 0.5f, 1.5f, 6), GP(1, -1, 1, 6), 1e-5f);
    return y;
}
static mn_tensor c_group_norm_rank3(gc *c) { mn_tensor y; mn_group_norm(c->g, &y, GP(3, -2, 2, 1, 4, 5), 1, GP(1, 0.5f, 1.5f, 4), MN_NONE, 1e-5f); return y; }
static mn_tensor c_swiglu(gc *c) { mn_tensor y; mn_swiglu(c->g, &y, GP(2, -3, 3, 3, 5), GP(2, -1, 1, 3, 5)); return y; }
static mn_tensor c_geglu(gc *c) { mn_tensor y; mn_geglu(c->g, &y, GP(2, -3, 3, 3, 5), GP(1, -1, 1, 5)); return y; }
static mn_tensor c_l1(gc *c) { mn_tensor y; mn_l1_loss(c->g, &y, GP(2, -1, 1, 3, 5), GP(2, -1, 1, 3, 5)); return y; }
static mn_tensor c_bce(gc *c) { mn_tensor y; mn_bce_with_logits(c->g, &y, GP(2, -4, 4, 3, 5), GP(2, 0, 1, 3, 5)); return y; }

/* ---- layout family: slicing, padding, concatenation, pooling, upsampling,
 * convolution variants, batch norm (composites are tagged with the op that
 * does their main work) ---- */
static mn_tensor c_slice(gc *c) { mn_tensor y; mn_slice(c->g, &y, GP(3, -1, 1, 2, 5, 3), 1, 1, 3); return y; }
static mn_tensor c_slice_last1(gc *c) { mn_tensor y; mn_slice(c->g, &y, GP(2, -1, 1, 3, 7), -1, 6, 1); return y; }
static mn_tensor c_slice_rank4(gc *c) { mn_tensor y; mn_slice(c->g, &y, GP(4, -1, 1, 1, 3, 5, 2), 2, 0, 4); return y; }
static mn_tensor c_pad(gc *c) {
    mn_tensor y;
    mn_pad(c->g, &y, GP(3, -1, 1, 2, 3, 4), S(0, 1, 2), S(1, 0, 3));
    return y;
}
static mn_tensor c_pad_rank4(gc *c) {
    mn_tensor y;
    mn_pad(c->g, &y, GP(4, -1, 1, 1, 2, 3, 1), S(1, 0, 2, 1), S(0, 1, 1, 2));
    return y;
}
static mn_tensor c_pad_rank1(gc *c) { mn_tensor y; mn_pad(c->g, &y, GP(1, -1, 1, 1), S(3), S(2)); return y; }
static mn_tensor c_concat(gc *c) {
    mn_tensor y, xs[3] = {GP(3, -1, 1, 2, 1, 3), GP(3, -1, 1, 2, 4, 3), GP(3, -1, 1, 2, 2, 3)};
    mn_concat(c->g, &y, xs, 3, 1);
    return y;
}
static mn_tensor c_concat_last_dup(gc *c) { /* the same tensor twice: the gradients add */
    mn_tensor a = GP(2, -1, 1, 3, 2), y, xs[3] = {a, GP(2, -1, 1, 3, 1), a};
    mn_concat(c->g, &y, xs, 3, -1);
    return y;
}
static mn_tensor c_concat_chain(gc *c) { /* 7 inputs: a chain of two concat nodes */
    mn_tensor a = GP(2, -1, 1, 2, 3), b = GP(2, -1, 1, 1, 3), y, xs[7] = {a, b, a, b, a, b, a};
    mn_concat(c->g, &y, xs, 7, 0);
    return y;
}
static mn_tensor c_avgpool(gc *c) {
    mn_pool2d_params p = {{3, 3}, {2, 2}, {1, 1}};
    mn_tensor y;
    mn_avg_pool2d(c->g, &y, GP(4, -1, 1, 2, 2, 7, 6), &p, true);
    return y;
}
static mn_tensor c_avgpool_nopad_count(gc *c) {
    mn_pool2d_params p = {{2, 3}, {1, 2}, {1, 1}};
    mn_tensor y;
    mn_avg_pool2d(c->g, &y, GP(4, -1, 1, 1, 3, 5, 5), &p, false);
    return y;
}
static mn_tensor c_avgpool_plain(gc *c) {
    mn_pool2d_params p = {{2, 2}, {0, 0}, {0, 0}};
    mn_tensor y;
    mn_avg_pool2d(c->g, &y, GP(4, -1, 1, 1, 1, 4, 5), &p, true);
    return y;
}
static mn_tensor c_avgpool_sum(gc *c) { /* sum pooling (the upsampling gradient), built directly */
    node p;
    memset(&p, 0, sizeof p);
    p.op = OP_AVGPOOL2D;
    p.nin = 1;
    p.in[0] = GP(4, -1, 1, 2, 1, 5, 4);
    int64_t ip[7] = {2, 3, 1, 2, 1, 1, 2};
    memcpy(p.ip, ip, sizeof ip);
    int32_t y = MN_NONE;
    graph_add(c->g, &y, &p);
    return y;
}
static mn_tensor c_upsample2x(gc *c) { mn_tensor y; mn_upsample_nearest2x(c->g, &y, GP(4, -1, 1, 1, 2, 3, 5)); return y; }
static mn_tensor c_upsample32(gc *c) { mn_tensor y; mn_upsample_nearest2d(c->g, &y, GP(4, -1, 1, 2, 1, 1, 3), 3, 2); return y; }
static mn_tensor c_broadcast_to(gc *c) { mn_tensor y; mn_broadcast_to(c->g, &y, GP(2, -1, 1, 3, 1), 3, S(2, 3, 4)); return y; }
static mn_tensor c_global_avg_pool(gc *c) { mn_tensor y; mn_global_avg_pool(c->g, &y, GP(4, -1, 1, 2, 3, 4, 5)); return y; }
static mn_tensor c_conv2d_depthwise(gc *c) {
    mn_conv2d_params p = {{1, 1}, {1, 1}, {1, 1}, 4};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 2, 4, 6, 5), GP(4, -1, 1, 4, 1, 3, 3), GP(1, -1, 1, 4), &p);
    return y;
}
static mn_tensor c_conv2d_depthwise_s2(gc *c) { /* depthwise, stride 2, batch 1, odd sizes */
    mn_conv2d_params p = {{2, 2}, {2, 1}, {2, 1}, 3};
    mn_tensor y;
    mn_conv2d(c->g, &y, GP(4, -1, 1, 1, 3, 7, 5), GP(4, -1, 1, 3, 1, 3, 2), MN_NONE, &p);
    return y;
}
static mn_tensor c_conv1d(gc *c) {
    mn_conv1d_params p = {2, 1, 1, 2};
    mn_tensor y;
    mn_conv1d(c->g, &y, GP(3, -1, 1, 2, 4, 9), GP(3, -1, 1, 6, 2, 3), GP(1, -1, 1, 6), &p);
    return y;
}
static mn_tensor c_conv1d_dil(gc *c) {
    mn_conv1d_params p = {1, 2, 2, 1};
    mn_tensor y;
    mn_conv1d(c->g, &y, GP(3, -1, 1, 1, 3, 5), GP(3, -1, 1, 2, 3, 3), MN_NONE, &p);
    return y;
}
static mn_tensor c_conv_t(gc *c) {
    mn_conv_transpose2d_params p = {{2, 2}, {1, 1}, {1, 0}, {1, 1}, 1};
    mn_tensor y;
    mn_conv_transpose2d(c->g, &y, GP(4, -1, 1, 2, 4, 3, 4), GP(4, -1, 1, 4, 3, 3, 3), GP(1, -1, 1, 3), &p);
    return y;
}
static mn_tensor c_conv_t_groups(gc *c) {
    mn_conv_transpose2d_params p = {{1, 2}, {0, 1}, {0, 1}, {2, 1}, 2};
    mn_tensor y;
    mn_conv_transpose2d(c->g, &y, GP(4, -1, 1, 1, 4, 3, 3), GP(4, -1, 1, 4, 2, 2, 3), MN_NONE, &p);
    return y;
}
static mn_tensor c_conv2d_bwd_weight(gc *c) { /* x [2,3,5,5], dy [2,4,3,3] -> dw [4,3,3,3], stride 2, pad 1 */
    node p;
    memset(&p, 0, sizeof p);
    p.op = OP_CONV2D_BWD_WEIGHT;
    p.nin = 2;
    p.in[0] = GP(4, -1, 1, 2, 3, 5, 5);
    p.in[1] = GP(4, -1, 1, 2, 4, 3, 3);
    int64_t ip[7] = {2, 2, 1, 1, 1, 1, 1};
    memcpy(p.ip, ip, sizeof ip);
    p.rank = 4;
    memcpy(p.shape, S(4, 3, 3, 3), 4 * sizeof(int64_t));
    int32_t y = MN_NONE;
    graph_add(c->g, &y, &p);
    return y;
}
/* running statistics: frozen parameters outside c->p (they get no gradient) */
static mn_tensor bn_case(gc *c, int64_t n, int64_t ch, int64_t h, int64_t w, bool affine, bool training) {
    mn_tensor rm, rv, y;
    mn_init um = {MN_INIT_UNIFORM, -0.5f, 0.5f}, uv = {MN_INIT_UNIFORM, 0.5f, 2.0f};
    mn_tensor x = GP(4, -1, 1, n, ch, h, w);
    mn_tensor wt = affine ? GP(1, 0.5f, 1.5f, ch) : MN_NONE, bs = affine ? GP(1, -1, 1, ch) : MN_NONE;
    mn_graph_param(c->g, &rm, "bn.running_mean", 1, &ch, um);
    mn_graph_param(c->g, &rv, "bn.running_var", 1, &ch, uv);
    if (mn_batch_norm2d(c->g, &y, x, wt, bs, rm, rv, 0.1f, 1e-5f, training)) return MN_NONE;
    return y;
}
static mn_tensor c_bn_train(gc *c) { return bn_case(c, 3, 4, 2, 3, true, true); }
static mn_tensor c_bn_train_batch1(gc *c) { return bn_case(c, 1, 2, 3, 1, false, true); }
/* 1x1 planes: 4 values per channel (with 2, y = +-weight + bias whatever x is, and the
 * gradient of x is pure cancellation: 1e-4 of its terms, whose rounding the
 * GPU's fused multiply-adds change) */
static mn_tensor c_bn_train_hw1(gc *c) { return bn_case(c, 4, 3, 1, 1, true, true); }
static mn_tensor c_bn_eval(gc *c) { return bn_case(c, 2, 3, 3, 2, true, false); }
/* ---- transformer family ---- */
/* An i32 input "labels" holding vals (ids or a position). */
static mn_tensor i32_input(gc *c, int rank, const int64_t *shape, const int32_t *vals, int count) {
    mn_graph_input(c->g, &c->labels_in, "labels", MN_I32, rank, shape);
    memcpy(c->labels, vals, (size_t)count * sizeof *vals);
    c->nlabels = count;
    return c->labels_in;
}
/* ids with duplicates, -1 and out-of-range values (no gradient, zero rows) */
static mn_tensor c_embedding(gc *c) {
    const int32_t ids[8] = {3, 0, 3, 6, -1, 7, 3, 100};
    mn_tensor y, t = GP(2, -1, 1, 7, 5);
    mn_embedding(c->g, &y, t, i32_input(c, 2, S(2, 4), ids, 8));
    return y;
}
static mn_tensor c_rope(gc *c) { mn_tensor y; mn_rope(c->g, &y, GP(4, -1, 1, 2, 3, 5, 6), MN_NONE, 0, 3); return y; }
static mn_tensor c_rope_pos(gc *c) {
    const int32_t pos = 7;
    mn_tensor y, x = GP(3, -1, 1, 3, 4, 2);
    mn_rope(c->g, &y, x, i32_input(c, 1, S(1), &pos, 1), 500.0f, -2);
    return y;
}
/* q [qs], k and v [ks] parameters; pos >= -1000 adds a position input */
static mn_tensor attn_case(gc *c, const int64_t *qs, const int64_t *ks, bool causal, int64_t window, float scale,
                           int pos, float lo, float hi, float klo, float khi) {
    mn_attention_params p = {causal, window, scale};
    mn_tensor y, q = gp(c, 4, qs, lo, hi), k = gp(c, 4, ks, klo, khi), v = gp(c, 4, ks, -1, 1);
    mn_tensor pt = MN_NONE;
    if (pos > -1000) pt = i32_input(c, 1, S(1), (const int32_t[]){pos}, 1);
    if (mn_attention(c->g, &y, q, k, v, pt, &p)) return MN_NONE;
    return y;
}
/* cross attention (Tq != Tk, no mask), odd head dim */
static mn_tensor c_attn_cross(gc *c) { return attn_case(c, S(2, 2, 3, 5), S(2, 2, 4, 5), false, 0, 0, -1000, -1, 1, -1, 1); }
static mn_tensor c_attn_causal(gc *c) { return attn_case(c, S(1, 2, 5, 4), S(1, 2, 5, 4), true, 0, 0, -1000, -1, 1, -1, 1); }
/* grouped-query (4 query heads on 2 kv heads), Tq < Tk: offset Tk - Tq */
static mn_tensor c_attn_gqa(gc *c) { return attn_case(c, S(1, 4, 3, 3), S(1, 2, 5, 3), true, 0, 0, -1000, -1, 1, -1, 1); }
static mn_tensor c_attn_window(gc *c) { return attn_case(c, S(1, 2, 6, 4), S(1, 2, 6, 4), true, 2, 0, -1000, -1, 1, -1, 1); }
/* one query row (a decoding step), 3 query heads per kv head */
static mn_tensor c_attn_tq1(gc *c) { return attn_case(c, S(2, 3, 1, 5), S(2, 1, 7, 5), true, 0, 0.7f, -1000, -1, 1, -1, 1); }
/* over a cache of 8 rows filled up to pos + Tq = 5 */
static mn_tensor c_attn_pos(gc *c) { return attn_case(c, S(1, 2, 2, 3), S(1, 1, 8, 3), true, 0, 0, 3, -1, 1, -1, 1); }
static mn_tensor c_attn_pos_window(gc *c) { return attn_case(c, S(1, 2, 3, 2), S(1, 2, 9, 2), true, 3, 0, 4, -1, 1, -1, 1); }
/* full attention over a partly filled cache */
static mn_tensor c_attn_pos_full(gc *c) { return attn_case(c, S(1, 1, 2, 3), S(1, 1, 6, 3), false, 0, 0, 2, -1, 1, -1, 1); }
/* Tq > Tk causal: the first two query rows attend no key (zeros) */
static mn_tensor c_attn_empty(gc *c) { return attn_case(c, S(1, 1, 4, 2), S(1, 1, 2, 2), true, 0, 0, -1000, -1, 1, -1, 1); }
/* size-1 everything: one table row, one position, one head of dim 1 */
static mn_tensor c_embedding_1(gc *c) {
    const int32_t id = 0;
    mn_tensor y;
    mn_embedding(c->g, &y, GP(2, -1, 1, 1, 1), i32_input(c, 1, S(1), &id, 1));
    return y;
}
static mn_tensor c_rope_1(gc *c) { mn_tensor y; mn_rope(c->g, &y, GP(2, -1, 1, 1, 2), MN_NONE, 0, 1); return y; }
/* (one key would make the softmax 1 and every q/k gradient exactly 0: the
 * backends' rounding noise around 0 is not comparable, so two keys) */
static mn_tensor c_attn_1(gc *c) { return attn_case(c, S(1, 1, 1, 1), S(1, 1, 2, 1), true, 0, 0, -1000, -1, 1, -1, 1); }
/* peaked softmax: logits up to about 20 (logits of 1e3 are checked by shift
 * invariance in test_ops_transformer.c: central differences cannot resolve
 * them) */
static mn_tensor c_attn_peaked(gc *c) { return attn_case(c, S(1, 2, 3, 4), S(1, 2, 5, 4), true, 0, 6.0f, -1000, -1, 1, -1, 1); }

typedef struct gcase {
    op_id op;
    const char *name;
    case_fn fn;
    int flags; /* CASE_* */
} gcase;
/* the analytic gradient differs from finite differences by design (stop_grad
 * of y = x*x): check against half the numeric derivative */
#define CASE_STOP 1
/* too large for finite differences: backend comparison only (the same op has
 * small gradient-checked cases) */
#define CASE_BIG 2

static const gcase cases[] = {
    {OP_MATMUL, "matmul", c_matmul, 0}, {OP_MATMUL, "matmul_ta", c_matmul_ta, 0},
    {OP_MATMUL, "matmul_tb", c_matmul_tb, 0}, {OP_MATMUL, "matmul_tab", c_matmul_tab, 0},
    {OP_MATMUL, "matmul_bshared", c_matmul_bshared, 0}, {OP_MATMUL, "matmul_ashared", c_matmul_ashared, 0},
    {OP_MATMUL, "matmul_batched", c_matmul_batched, 0},
    {OP_MATMUL, "matmul_longk_parts", c_matmul_longk, 0}, {OP_MATMUL, "matmul_longk_parts_tb", c_matmul_longk_tb, 0},
    {OP_ADD, "add_bcast", c_add, 0}, {OP_SUB, "sub_bcast", c_sub, 0}, {OP_MUL, "mul_bcast", c_mul, 0},
    {OP_DIV, "div_bcast", c_div, 0}, {OP_SCALE, "scale", c_scale, 0}, {OP_NEG, "neg", c_neg, 0},
    {OP_EXP, "exp", c_exp, 0}, {OP_LOG, "log", c_log, 0}, {OP_SQRT, "sqrt", c_sqrt, 0},
    {OP_RSQRT, "rsqrt", c_rsqrt, 0}, {OP_RELU, "relu", c_relu, 0}, {OP_SIGMOID, "sigmoid", c_sigmoid, 0},
    {OP_TANH, "tanh", c_tanh, 0}, {OP_GELU, "gelu", c_gelu, 0}, {OP_GELU_TANH, "gelu_tanh", c_gelu_tanh, 0},
    {OP_SILU, "silu", c_silu, 0}, {OP_STOP_GRAD, "stop_grad", c_stop, CASE_STOP},
    {OP_SIN, "sin", c_sin, 0}, {OP_COS, "cos", c_cos, 0}, {OP_CAST, "cast", c_cast, 0},
    {OP_SUM, "sum_axis", c_sum, 0}, {OP_SUM, "sum_all", c_sum_all, 0},
    {OP_MEAN, "mean_keepdim", c_mean, 0}, {OP_MEAN, "mean_all", c_mean_all, 0},
    {OP_MAX, "max_axis", c_max, 0}, {OP_MAX, "max_keepdim", c_max_keep, 0}, {OP_MAX, "max_all", c_max_all, 0},
    {OP_SOFTMAX, "softmax", c_softmax, 0}, {OP_LOG_SOFTMAX, "log_softmax", c_log_softmax, 0},
    {OP_RESHAPE, "reshape", c_reshape, 0}, {OP_PERMUTE, "permute", c_permute, 0},
    {OP_PERMUTE, "transpose", c_transpose, 0}, {OP_BROADCAST, "broadcast", c_broadcast, 0},
    {OP_REDUCE_TO, "reduce_to", c_reduce_to, 0}, {OP_CROSS_ENTROPY, "cross_entropy", c_cross_entropy, 0},
    {OP_CROSS_ENTROPY_DENSE, "cross_entropy_dense", c_cross_entropy_dense, 0}, {OP_MSE, "mse", c_mse, 0},
    {OP_CONV2D, "conv2d_groups_stride_bias", c_conv2d, 0}, {OP_CONV2D, "conv2d_dilation", c_conv2d_dil, 0},
    {OP_CONV2D, "conv2d_implicit_gemm", c_conv2d_gemm, CASE_BIG},
    {OP_CONV2D, "conv2d_gemm_stride2_groups2", c_conv2d_gemm_strided, CASE_BIG},
    {OP_CONV2D, "conv2d_gemm_1x1_s2", c_conv2d_gemm_1x1_s2, CASE_BIG},
    {OP_CONV2D, "conv2d_gemm_5x5_s2_oddw", c_conv2d_gemm_5x5_s2, CASE_BIG},
    {OP_CONV2D, "conv2d_gemm_s3x2", c_conv2d_gemm_s3x2, CASE_BIG},
    {OP_CONV2D, "conv2d_wgrad_split", c_conv2d_wgrad_split, 0},
    {OP_CONV2D, "conv2d_wgrad_split_gemm", c_conv2d_wgrad_split_gemm, CASE_BIG},
    {OP_MATMUL, "matmul_64x784x128", c_matmul_mnist, CASE_BIG},
    {OP_MATMUL, "gemv_1x576_x_1536x576t", c_gemv_decode, CASE_BIG}, {OP_MATMUL, "gemv_7x1000x301", c_gemv_rows, CASE_BIG},
    {OP_MATMUL, "gemv_batched_6x1x64", c_gemv_batched, CASE_BIG},
    {OP_MAXPOOL2D, "maxpool2d", c_maxpool, 0}, {OP_MAXPOOL2D, "maxpool2d_overlap_pad", c_maxpool_overlap, 0},
    /* pointwise family (issue 4); composites are filed under their defining op */
    {OP_ABS, "abs", c_abs, 0}, {OP_CLAMP, "clamp", c_clamp, 0}, {OP_POW, "pow", c_pow, 0},
    {OP_POW, "pow_int_negx", c_pow_int, 0}, {OP_POW, "pow_neg_exp", c_pow_neg, 0},
    {OP_WHERE, "where_bcast3", c_where, 0}, {OP_DROPOUT, "dropout", c_dropout, 0},
    {OP_DROPOUT, "dropout_counter", c_dropout_counter, 0},
    {OP_CROSS_ENTROPY, "ce_ignore_smooth", c_ce_ignore_smooth, 0}, {OP_CROSS_ENTROPY, "ce_smooth", c_ce_smooth, 0},
    {OP_CROSS_ENTROPY, "ce_ignore", c_ce_ignore, 0},
    {OP_RMS_NORM, "rms_norm", c_rms_norm, 0}, {OP_RMS_NORM, "rms_norm_1e4", c_rms_norm_large, 0},
    {OP_LAYER_NORM, "layer_norm", c_layer_norm, 0}, {OP_LAYER_NORM, "layer_norm_1e4", c_layer_norm_large, 0},
    {OP_LAYER_NORM, "layer_norm_d1", c_layer_norm_d1, 0}, {OP_LAYER_NORM, "group_norm", c_group_norm, 0},
    {OP_LAYER_NORM, "group_norm_rank3_g1", c_group_norm_rank3, 0}, {OP_SILU, "swiglu", c_swiglu, 0},
    {OP_GELU, "geglu", c_geglu, 0}, {OP_ABS, "l1_loss", c_l1, 0}, {OP_LOG, "bce_with_logits", c_bce, 0},
    /* layout family */
    {OP_SLICE, "slice", c_slice, 0}, {OP_SLICE, "slice_last_len1", c_slice_last1, 0},
    {OP_SLICE, "slice_rank4", c_slice_rank4, 0},
    {OP_PAD, "pad", c_pad, 0}, {OP_PAD, "pad_rank4", c_pad_rank4, 0}, {OP_PAD, "pad_rank1_size1", c_pad_rank1, 0},
    {OP_CONCAT, "concat3", c_concat, 0}, {OP_CONCAT, "concat_last_dup", c_concat_last_dup, 0},
    {OP_CONCAT, "concat7_chain", c_concat_chain, 0},
    {OP_AVGPOOL2D, "avgpool_pad_include", c_avgpool, 0}, {OP_AVGPOOL2D, "avgpool_pad_exclude", c_avgpool_nopad_count, 0},
    {OP_AVGPOOL2D, "avgpool_plain_odd", c_avgpool_plain, 0}, {OP_AVGPOOL2D, "avgpool_sum_mode", c_avgpool_sum, 0},
    {OP_UPSAMPLE_NEAREST2D, "upsample_nearest2x", c_upsample2x, 0},
    {OP_UPSAMPLE_NEAREST2D, "upsample_nearest_3x2", c_upsample32, 0},
    {OP_BROADCAST, "broadcast_to", c_broadcast_to, 0}, {OP_MEAN, "global_avg_pool", c_global_avg_pool, 0},
    {OP_CONV2D, "conv2d_depthwise_bias", c_conv2d_depthwise, 0},
    {OP_CONV2D, "conv2d_depthwise_s2_b1", c_conv2d_depthwise_s2, 0},
    {OP_CONV2D, "conv1d_groups_stride_bias", c_conv1d, 0}, {OP_CONV2D, "conv1d_dilation", c_conv1d_dil, 0},
    {OP_CONV2D_BWD_INPUT, "conv_transpose2d_bias", c_conv_t, 0},
    {OP_CONV2D_BWD_INPUT, "conv_transpose2d_groups", c_conv_t_groups, 0},
    {OP_CONV2D_BWD_WEIGHT, "conv2d_bwd_weight", c_conv2d_bwd_weight, 0},
    {OP_BN_MEAN, "batch_norm2d_train", c_bn_train, 0}, {OP_BN_MEANSQ, "batch_norm2d_train_b1", c_bn_train_batch1, 0},
    {OP_BN_MEANSQ, "batch_norm2d_train_hw1", c_bn_train_hw1, 0}, {OP_RSQRT, "batch_norm2d_eval", c_bn_eval, 0},
    {OP_EMBEDDING, "embedding_dup_oob", c_embedding, 0}, {OP_ROPE, "rope", c_rope, 0},
    {OP_ROPE, "rope_pos_dh2", c_rope_pos, 0}, {OP_ATTENTION, "attn_cross_d5", c_attn_cross, 0},
    {OP_ATTENTION, "attn_causal", c_attn_causal, 0}, {OP_ATTENTION, "attn_gqa_offset", c_attn_gqa, 0},
    {OP_ATTENTION, "attn_window", c_attn_window, 0}, {OP_ATTENTION, "attn_tq1_gqa3", c_attn_tq1, 0},
    {OP_ATTENTION, "attn_cache_pos", c_attn_pos, 0}, {OP_ATTENTION, "attn_cache_pos_window", c_attn_pos_window, 0},
    {OP_ATTENTION, "attn_cache_pos_full", c_attn_pos_full, 0}, {OP_ATTENTION, "attn_empty_rows", c_attn_empty, 0},
    {OP_ATTENTION, "attn_peaked", c_attn_peaked, 0},
    {OP_EMBEDDING, "embedding_1x1", c_embedding_1, 0}, {OP_ROPE, "rope_t1_dh2", c_rope_1, 0},
    {OP_ATTENTION, "attn_size_1_two_keys", c_attn_1, 0},
};


/* Builds case k into c->g; *y_out is the op's result, the graph's loss is set. */
static mn_status build_case(const gcase *k, gc *c, mn_tensor *y_out) {
    memset(c, 0, sizeof *c);
    c->labels_in = MN_NONE;
    mn_status st = mn_graph_create(&c->g);
    if (st) return st;
    mn_tensor y = k->fn(c), y2, z, z2, r, loss, prod;
    *y_out = y;
    if (y == MN_NONE) return MN_E_INVALID;
    int rank;
    int64_t shape[MN_MAX_RANK];
    mn_tensor_shape(c->g, y, &rank, shape);
    int64_t ny = 1;
    for (int i = 0; i < rank; i++) ny *= shape[i];
    float *rv = malloc((size_t)ny * sizeof *rv);
    if (!rv) return MN_E_NOMEM;
    for (int64_t i = 0; i < ny; i++) rv[i] = (float)(((i * 7919 + 13) % 17) / 8.0 - 1.0);
    st = mn_graph_constant(c->g, &r, rank, shape, rv);
    free(rv);
    st = st ? st : mn_scale(c->g, &z, y, 1.7f);
    st = st ? st : mn_mul(c->g, &y2, y, y);
    st = st ? st : mn_add(c->g, &z2, z, y2);
    st = st ? st : mn_mul(c->g, &prod, z2, r);
    st = st ? st : mn_sum(c->g, &loss, prod, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(c->g, loss);
    return st;
}

#endif
