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

#include "op_cases.h"

static double loss_of(mn_session *s) {
    double l = NAN;
    if (mn_session_run(s) || session_read_node(s, s->g->loss, &l, sizeof l)) return NAN;
    return l;
}

static void run_case(const gcase *k) {
    gc c;
    mn_tensor y;
    mn_status st = build_case(k, &c, &y);
    CHECK_MSG(st == MN_OK, "%s: building the case failed: %s", k->name, c.g ? mn_graph_error(c.g) : "");
    if (st) {
        mn_graph_destroy(c.g);
        return;
    }

    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    o.seed = 1234;
    session_internal_options io = {.f64 = true, .grads_only = true};
    mn_session *s = NULL;
    CHECK_OK(session_create_ex(&s, c.g, &o, &io), mn_session_error(s));
    if (c.labels_in != MN_NONE) CHECK_OK(session_write_node(s, graph_id(c.labels_in), c.labels, (size_t)c.nlabels * 4), mn_session_error(s));
    CHECK_OK(session_forward_backward(s), mn_session_error(s));
    double worst = 0;
    for (int pi = 0; pi < c.np; pi++) {
        const int32_t pid = graph_id(c.p[pi]); /* handle -> node index */
        const node *pn = &s->g->nodes[pid];
        size_t n = (size_t)node_numel(pn);
        double *v = malloc(n * 8), *ga = calloc(n, 8);
        int32_t gid = session_grad_of(s, pid);
        CHECK_MSG(gid != MN_NONE, "%s: parameter %d has no gradient", k->name, pi);
        session_read_node(s, pid, v, n * 8);
        if (gid != MN_NONE) session_read_node(s, gid, ga, n * 8);
        const double h = 1e-6;
        for (size_t j = 0; j < n; j++) {
            double keep = v[j];
            v[j] = keep + h;
            session_write_node(s, pid, v, n * 8);
            double lp = loss_of(s);
            v[j] = keep - h;
            session_write_node(s, pid, v, n * 8);
            double lm = loss_of(s);
            v[j] = keep;
            session_write_node(s, pid, v, n * 8);
            double fd = (lp - lm) / (2 * h);
            if (k->flags & CASE_STOP) {
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

/* A weight gradient over many rows is one batched product of the rows'
 * parts and a sum over them (autodiff.c ksplit_parts); the knob
 * MEGANEURA_MATMUL_KSPLIT=0 keeps one product. Counts the matmuls of the
 * gradient graph with a 3-D result. */
static int split_products(const char *knob) {
    if (knob) setenv("MEGANEURA_MATMUL_KSPLIT", knob, 1);
    mn_graph *g;
    mn_tensor x, w, y, loss;
    const int64_t sx[2] = {2048, 8}, sw[2] = {8, 16};
    mn_init u = {MN_INIT_UNIFORM, -1, 1};
    mn_graph_create(&g);
    mn_status st = mn_graph_param(g, &x, "x", 2, sx, u);
    st = st ? st : mn_graph_param(g, &w, "w", 2, sw, u);
    st = st ? st : mn_matmul(g, &y, x, w);
    st = st ? st : mn_sum(g, &loss, y, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(g, loss);
    int32_t *grads = NULL;
    st = st ? st : autodiff_build(g, g->loss, MN_NONE, &grads);
    CHECK_OK(st, mn_graph_error(g));
    int n3 = 0;
    for (int32_t i = 0; i < g->n; i++) n3 += g->nodes[i].op == OP_MATMUL && g->nodes[i].rank == 3;
    free(grads);
    mn_graph_destroy(g);
    unsetenv("MEGANEURA_MATMUL_KSPLIT");
    return n3;
}

int main(void) {
    no_rule_is_an_error();
    CHECK_MSG(split_products(NULL) == 1, "2048 rows: %d batched products, want 1 (4 parts)", split_products(NULL));
    CHECK_MSG(split_products("0") == 0, "MEGANEURA_MATMUL_KSPLIT=0: %d batched products", split_products("0"));
    /* every differentiable op has at least one case */
    for (int op = 0; op < OP_COUNT; op++) {
        if (!autodiff_has_rule((op_id)op)) continue;
        bool found = false;
        for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) found |= cases[i].op == (op_id)op;
        CHECK_MSG(found, "op '%s' has a backward rule but no gradient-check case", op_table[op].name);
    }
    for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++)
        if (!(cases[i].flags & CASE_BIG)) run_case(&cases[i]);
    return th_finish("test_gradcheck");
}
