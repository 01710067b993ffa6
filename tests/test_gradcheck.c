/* test_gradcheck.c - finite-difference check of every backward rule.
 *
 * For every op with a backward rule (autodiff_has_rule), at least one case
 * builds y = op(x...) from parameters P (x = 1.1 * P, so the op sits
 * mid-graph), then loss = sum(R * (1.7*y + y*y)) with a random constant R, so
 * a rule that drops or mis-scales the upstream gradient fails. The session
 * runs the CPU backend in f64; central differences with h = 1e-6 are compared
 * with the analytic gradient of every parameter.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/autodiff.h"
#include "harness.h"
#include "session/session.h"

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

typedef struct gcase {
    op_id op;
    const char *name;
    case_fn fn;
    bool stop; /* analytic grad differs from FD by design: check against half the FD of y=x*x */
} gcase;

static const gcase cases[] = {
    {OP_MATMUL, "matmul", c_matmul, 0}, {OP_MATMUL, "matmul_ta", c_matmul_ta, 0},
    {OP_MATMUL, "matmul_tb", c_matmul_tb, 0}, {OP_MATMUL, "matmul_tab", c_matmul_tab, 0},
    {OP_MATMUL, "matmul_bshared", c_matmul_bshared, 0}, {OP_MATMUL, "matmul_ashared", c_matmul_ashared, 0},
    {OP_MATMUL, "matmul_batched", c_matmul_batched, 0},
    {OP_ADD, "add_bcast", c_add, 0}, {OP_SUB, "sub_bcast", c_sub, 0}, {OP_MUL, "mul_bcast", c_mul, 0},
    {OP_DIV, "div_bcast", c_div, 0}, {OP_SCALE, "scale", c_scale, 0}, {OP_NEG, "neg", c_neg, 0},
    {OP_EXP, "exp", c_exp, 0}, {OP_LOG, "log", c_log, 0}, {OP_SQRT, "sqrt", c_sqrt, 0},
    {OP_RSQRT, "rsqrt", c_rsqrt, 0}, {OP_RELU, "relu", c_relu, 0}, {OP_SIGMOID, "sigmoid", c_sigmoid, 0},
    {OP_TANH, "tanh", c_tanh, 0}, {OP_GELU, "gelu", c_gelu, 0}, {OP_GELU_TANH, "gelu_tanh", c_gelu_tanh, 0},
    {OP_SILU, "silu", c_silu, 0}, {OP_STOP_GRAD, "stop_grad", c_stop, 1},
    {OP_SUM, "sum_axis", c_sum, 0}, {OP_SUM, "sum_all", c_sum_all, 0},
    {OP_MEAN, "mean_keepdim", c_mean, 0}, {OP_MEAN, "mean_all", c_mean_all, 0},
    {OP_MAX, "max_axis", c_max, 0}, {OP_MAX, "max_keepdim", c_max_keep, 0}, {OP_MAX, "max_all", c_max_all, 0},
    {OP_SOFTMAX, "softmax", c_softmax, 0}, {OP_LOG_SOFTMAX, "log_softmax", c_log_softmax, 0},
    {OP_RESHAPE, "reshape", c_reshape, 0}, {OP_PERMUTE, "permute", c_permute, 0},
    {OP_PERMUTE, "transpose", c_transpose, 0}, {OP_BROADCAST, "broadcast", c_broadcast, 0},
    {OP_REDUCE_TO, "reduce_to", c_reduce_to, 0}, {OP_CROSS_ENTROPY, "cross_entropy", c_cross_entropy, 0},
    {OP_CROSS_ENTROPY_DENSE, "cross_entropy_dense", c_cross_entropy_dense, 0}, {OP_MSE, "mse", c_mse, 0},
    {OP_CONV2D, "conv2d_groups_stride_bias", c_conv2d, 0}, {OP_CONV2D, "conv2d_dilation", c_conv2d_dil, 0},
    {OP_MAXPOOL2D, "maxpool2d", c_maxpool, 0}, {OP_MAXPOOL2D, "maxpool2d_overlap_pad", c_maxpool_overlap, 0},
};

static double loss_of(mn_session *s) {
    double l = NAN;
    if (mn_session_run(s) || session_read_node(s, s->g->loss, &l, sizeof l)) return NAN;
    return l;
}

static void run_case(const gcase *k) {
    gc c;
    memset(&c, 0, sizeof c);
    c.labels_in = MN_NONE;
    CHECK_OK(mn_graph_create(&c.g), "");
    mn_tensor y = k->fn(&c), y2, z, z2, r, loss, prod;
    CHECK_MSG(y != MN_NONE, "%s: building the case failed: %s", k->name, mn_graph_error(c.g));
    if (y == MN_NONE) {
        mn_graph_destroy(c.g);
        return;
    }
    int rank;
    int64_t shape[MN_MAX_RANK];
    mn_tensor_shape(c.g, y, &rank, shape);
    /* R: random constant of y's shape */
    int64_t ny = 1;
    for (int i = 0; i < rank; i++) ny *= shape[i];
    float *rv = malloc((size_t)ny * sizeof *rv);
    for (int64_t i = 0; i < ny; i++) rv[i] = (float)(((i * 7919 + 13) % 17) / 8.0 - 1.0);
    mn_status st = mn_graph_constant(c.g, &r, rank, shape, rv);
    free(rv);
    st = st ? st : mn_scale(c.g, &z, y, 1.7f);
    st = st ? st : mn_mul(c.g, &y2, y, y);
    st = st ? st : mn_add(c.g, &z2, z, y2);
    st = st ? st : mn_mul(c.g, &prod, z2, r);
    st = st ? st : mn_sum(c.g, &loss, prod, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(c.g, loss);
    CHECK_OK(st, mn_graph_error(c.g));

    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    o.seed = 1234;
    session_internal_options io = {.f64 = true, .grads_only = true};
    mn_session *s = NULL;
    CHECK_OK(session_create_ex(&s, c.g, &o, &io), mn_session_error(s));
    if (c.labels_in != MN_NONE) CHECK_OK(session_write_node(s, c.labels_in, c.labels, (size_t)c.nlabels * 4), mn_session_error(s));
    CHECK_OK(session_forward_backward(s), mn_session_error(s));
    double worst = 0;
    for (int pi = 0; pi < c.np; pi++) {
        const node *pn = &s->g->nodes[c.p[pi]];
        size_t n = (size_t)node_numel(pn);
        double *v = malloc(n * 8), *ga = calloc(n, 8);
        int32_t gid = session_grad_of(s, c.p[pi]);
        CHECK_MSG(gid != MN_NONE, "%s: parameter %d has no gradient", k->name, pi);
        session_read_node(s, c.p[pi], v, n * 8);
        if (gid != MN_NONE) session_read_node(s, gid, ga, n * 8);
        const double h = 1e-6;
        for (size_t j = 0; j < n; j++) {
            double keep = v[j];
            v[j] = keep + h;
            session_write_node(s, c.p[pi], v, n * 8);
            double lp = loss_of(s);
            v[j] = keep - h;
            session_write_node(s, c.p[pi], v, n * 8);
            double lm = loss_of(s);
            v[j] = keep;
            session_write_node(s, c.p[pi], v, n * 8);
            double fd = (lp - lm) / (2 * h);
            if (k->stop) {
                /* L(x) = f(x*x) with the first factor stopped: the analytic
                 * gradient is exactly half the full derivative */
                fd *= 0.5;
            }
            double err = fabs(fd - ga[j]) / (1e-4 + fabs(fd) + fabs(ga[j]));
            if (err > worst) worst = err;
            CHECK_MSG(err < 1e-5, "%s: d loss / d p%d[%zu]: analytic %.10g, numeric %.10g", k->name, pi, j,
                      ga[j], fd);
        }
        free(v);
        free(ga);
    }
    printf("  %-28s %-20s max rel err %.2e\n", k->name, op_table[k->op].name, worst);
    mn_session_destroy(s);
    mn_graph_destroy(c.g);
}

/* A gradient that must flow through an op without a backward rule is an
 * error naming that op, not a crash or a silent zero. */
static void no_rule_is_an_error(void) {
    mn_graph *g;
    mn_tensor p, loss;
    int64_t four = 4;
    mn_init one = {MN_INIT_CONSTANT, 1, 0};
    mn_graph_create(&g);
    mn_graph_param(g, &p, "p", 1, &four, one);
    node q;
    memset(&q, 0, sizeof q);
    q.op = OP_SUMSQ; /* an optimizer helper: not differentiable */
    q.nin = 1;
    q.in[0] = p;
    CHECK_OK(graph_add(g, &loss, &q), mn_graph_error(g));
    CHECK_OK(mn_graph_loss(g, loss), mn_graph_error(g));
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    mn_session *s = NULL;
    CHECK(mn_session_create(&s, g, &o) == MN_E_UNSUPPORTED);
    CHECK_MSG(strstr(mn_session_error(s), "sumsq") && strstr(mn_session_error(s), "no backward rule"),
              "message: %s", mn_session_error(s));
    CHECK(mn_session_step(s) == MN_E_STATE); /* a dead session keeps answering */
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

int main(void) {
    no_rule_is_an_error();
    /* every differentiable op has at least one case */
    for (int op = 0; op < OP_COUNT; op++) {
        if (!autodiff_has_rule((op_id)op)) continue;
        bool found = false;
        for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) found |= cases[i].op == (op_id)op;
        CHECK_MSG(found, "op '%s' has a backward rule but no gradient-check case", op_table[op].name);
    }
    for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) run_case(&cases[i]);
    return th_finish("test_gradcheck");
}
