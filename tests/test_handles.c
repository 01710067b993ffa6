/* test_handles.c - tensor handles carry their graph (issue 7).
 *
 * Two graphs built by the same code hold the same nodes at the same indices;
 * only the tags in their handles differ. Every public entry point that takes
 * an mn_tensor is called once with every argument from graph A (it must
 * succeed, so the shapes are right) and then once per tensor argument with
 * that argument taken from graph B: each such call fails with MN_E_INVALID,
 * a message saying the handle belongs to another graph, *out reset and the
 * graph unchanged. Also: MN_NONE stays distinct from every handle, plain
 * node numbers are refused, the node limit (MN_MAX_NODES) is an error, and a
 * session's copy of the graph keeps the tag.
 *
 * Does not: check shapes or numerics of the ops (test_graph.c, kernels).
 */
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "harness.h"
#include "session/session.h"

#define S(...) (const int64_t[]){__VA_ARGS__}

static bool has(const char *hay, const char *needle) { return strstr(hay ? hay : "", needle) != NULL; }

/* The tensors every call draws from (the same indices in both graphs). */
enum { X2, W2, B1, X4, W4, BC, RM, RV, LBL, TBL, IDS, Q4, POS, CACHE, KVX, COND, CNT, X3, W3, NT };

static void build(mn_graph *g, mn_tensor *t) {
    mn_init z = {MN_INIT_ZEROS, 0, 0}, one = {MN_INIT_CONSTANT, 1, 0};
    mn_status st = MN_OK;
    st = st ? st : mn_graph_input(g, &t[X2], "x2", MN_F32, 2, S(4, 4));         /* [4,4] */
    st = st ? st : mn_graph_param(g, &t[W2], "w2", 2, S(4, 4), z);              /* [4,4] */
    st = st ? st : mn_graph_param(g, &t[B1], "b1", 1, S(4), z);                 /* [4] */
    st = st ? st : mn_graph_input(g, &t[X4], "x4", MN_F32, 4, S(2, 4, 4, 4));  /* NCHW */
    st = st ? st : mn_graph_param(g, &t[W4], "w4", 4, S(4, 4, 1, 1), z);       /* conv weight */
    st = st ? st : mn_graph_param(g, &t[BC], "bc", 1, S(4), z);                 /* per channel */
    st = st ? st : mn_graph_param(g, &t[RM], "rm", 1, S(4), z);
    st = st ? st : mn_graph_param(g, &t[RV], "rv", 1, S(4), one);
    st = st ? st : mn_graph_input(g, &t[LBL], "labels", MN_I32, 1, S(4));
    st = st ? st : mn_graph_param(g, &t[TBL], "table", 2, S(10, 4), z);
    st = st ? st : mn_graph_input(g, &t[IDS], "ids", MN_I32, 1, S(3));
    st = st ? st : mn_graph_input(g, &t[Q4], "q", MN_F32, 4, S(1, 2, 3, 4));   /* [B,H,T,D] */
    st = st ? st : mn_graph_input(g, &t[POS], "pos", MN_I32, 1, S(1));
    st = st ? st : mn_graph_state(g, &t[CACHE], "cache", 4, S(1, 2, 8, 4));
    st = st ? st : mn_graph_input(g, &t[KVX], "kvx", MN_F32, 4, S(1, 2, 1, 4));
    st = st ? st : mn_graph_input(g, &t[COND], "cond", MN_F32, 2, S(4, 4));
    st = st ? st : mn_graph_input(g, &t[CNT], "counter", MN_I32, 0, NULL);
    st = st ? st : mn_graph_input(g, &t[X3], "x3", MN_F32, 3, S(1, 4, 4)); /* NCL */
    st = st ? st : mn_graph_param(g, &t[W3], "w3", 3, S(4, 4, 1), z);
    CHECK_OK(st, mn_graph_error(g));
}

/* One public entry point: its name, its tensor arguments (indices into the
 * table above) and a caller. */
typedef struct entry {
    const char *name;
    int nargs;
    int args[5];
} entry;

static const entry entries[] = {
    {"param_lr_mult", 1, {W2}},  {"param_freeze", 1, {W2}},  {"output", 1, {X2}},
    {"loss_src", 1, {B1}},       {"matmul", 2, {X2, W2}},    {"matmul_ex", 2, {X2, W2}},
    {"add", 2, {X2, B1}},        {"sub", 2, {X2, B1}},       {"mul", 2, {X2, B1}},
    {"div", 2, {X2, B1}},        {"scale", 1, {X2}},         {"neg", 1, {X2}},
    {"exp", 1, {X2}},            {"log", 1, {X2}},           {"sqrt", 1, {X2}},
    {"rsqrt", 1, {X2}},          {"relu", 1, {X2}},          {"sigmoid", 1, {X2}},
    {"tanh", 1, {X2}},           {"gelu", 1, {X2}},          {"gelu_tanh", 1, {X2}},
    {"silu", 1, {X2}},           {"sum", 1, {X2}},           {"mean", 1, {X2}},
    {"max", 1, {X2}},            {"softmax", 1, {X2}},       {"log_softmax", 1, {X2}},
    {"reshape", 1, {X2}},        {"permute", 1, {X2}},       {"transpose", 1, {X2}},
    {"stop_gradient", 1, {X2}},  {"cross_entropy", 2, {X2, LBL}}, {"cross_entropy_dense", 2, {X2, COND}},
    {"mse", 2, {X2, COND}},      {"conv2d", 3, {X4, W4, BC}}, {"max_pool2d", 1, {X4}},
    {"abs", 1, {X2}},            {"clamp", 1, {X2}},         {"pow", 1, {X2}},
    {"where", 3, {COND, X2, W2}}, {"dropout", 1, {X2}},      {"dropout_ex", 2, {X2, CNT}},
    {"cross_entropy_ex", 2, {X2, LBL}}, {"rms_norm", 2, {X2, B1}}, {"layer_norm", 3, {X2, B1, B1}},
    {"group_norm", 3, {X4, BC, BC}}, {"swiglu", 2, {X2, W2}}, {"geglu", 2, {X2, W2}},
    {"l1_loss", 2, {X2, W2}},    {"bce_with_logits", 2, {X2, COND}}, {"slice", 1, {X2}},
    {"pad", 1, {X2}},            {"concat", 3, {X2, W2, COND}}, {"split", 1, {X2}},
    {"broadcast_to", 1, {B1}},   {"avg_pool2d", 1, {X4}},    {"global_avg_pool", 1, {X4}},
    {"upsample_nearest2d", 1, {X4}}, {"upsample_nearest2x", 1, {X4}}, {"conv1d", 3, {X3, W3, B1}},
    {"conv_transpose2d", 3, {X4, W4, BC}}, {"batch_norm2d", 5, {X4, BC, BC, RM, RV}},
    {"batch_norm2d_eval", 5, {X4, BC, BC, RM, RV}}, {"embedding", 2, {TBL, IDS}}, {"rope", 2, {Q4, POS}},
    {"attention", 4, {Q4, Q4, Q4, POS}}, {"kv_append", 3, {CACHE, KVX, POS}}, {"tensor_shape", 1, {X2}},
};

static mn_status call(const char *name, mn_graph *g, const mn_tensor *a, mn_tensor *out) {
    mn_tensor o2[2];
    int rank;
    int64_t shape[MN_MAX_RANK];
    const mn_conv2d_params cp = {{1, 1}, {0, 0}, {1, 1}, 1};
    const mn_pool2d_params pp = {{2, 2}, {0, 0}, {0, 0}};
    const mn_conv1d_params c1 = {1, 0, 1, 1};
    const mn_conv_transpose2d_params ct = {{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1};
    const mn_attention_params ap = {true, 0, 0.0f};
#define IS(n) (strcmp(name, n) == 0)
    if (IS("param_lr_mult")) return mn_graph_param_lr_mult(g, a[0], 2.0f);
    if (IS("param_freeze")) return mn_graph_param_freeze(g, a[0], true);
    if (IS("output")) return mn_graph_output(g, a[0], NULL); /* a named input keeps its name */
    if (IS("loss_src")) { /* loss needs a scalar: sum first (a valid handle), then the loss */
        mn_status st = mn_sum(g, out, a[0], MN_ALL_AXES, false);
        return st ? st : mn_graph_loss(g, *out);
    }
    if (IS("matmul")) return mn_matmul(g, out, a[0], a[1]);
    if (IS("matmul_ex")) return mn_matmul_ex(g, out, a[0], a[1], true, false);
    if (IS("add")) return mn_add(g, out, a[0], a[1]);
    if (IS("sub")) return mn_sub(g, out, a[0], a[1]);
    if (IS("mul")) return mn_mul(g, out, a[0], a[1]);
    if (IS("div")) return mn_div(g, out, a[0], a[1]);
    if (IS("scale")) return mn_scale(g, out, a[0], 2.0f);
    if (IS("neg")) return mn_neg(g, out, a[0]);
    if (IS("exp")) return mn_exp(g, out, a[0]);
    if (IS("log")) return mn_log(g, out, a[0]);
    if (IS("sqrt")) return mn_sqrt(g, out, a[0]);
    if (IS("rsqrt")) return mn_rsqrt(g, out, a[0]);
    if (IS("relu")) return mn_relu(g, out, a[0]);
    if (IS("sigmoid")) return mn_sigmoid(g, out, a[0]);
    if (IS("tanh")) return mn_tanh(g, out, a[0]);
    if (IS("gelu")) return mn_gelu(g, out, a[0]);
    if (IS("gelu_tanh")) return mn_gelu_tanh(g, out, a[0]);
    if (IS("silu")) return mn_silu(g, out, a[0]);
    if (IS("sum")) return mn_sum(g, out, a[0], 0, false);
    if (IS("mean")) return mn_mean(g, out, a[0], 1, true);
    if (IS("max")) return mn_max(g, out, a[0], MN_ALL_AXES, false);
    if (IS("softmax")) return mn_softmax(g, out, a[0]);
    if (IS("log_softmax")) return mn_log_softmax(g, out, a[0]);
    if (IS("reshape")) return mn_reshape(g, out, a[0], 1, S(16));
    if (IS("permute")) return mn_permute(g, out, a[0], (const int[]){1, 0});
    if (IS("transpose")) return mn_transpose(g, out, a[0], 0, 1);
    if (IS("stop_gradient")) return mn_stop_gradient(g, out, a[0]);
    if (IS("cross_entropy")) return mn_cross_entropy(g, out, a[0], a[1]);
    if (IS("cross_entropy_dense")) return mn_cross_entropy_dense(g, out, a[0], a[1]);
    if (IS("mse")) return mn_mse(g, out, a[0], a[1]);
    if (IS("conv2d")) return mn_conv2d(g, out, a[0], a[1], a[2], &cp);
    if (IS("max_pool2d")) return mn_max_pool2d(g, out, a[0], &pp);
    if (IS("abs")) return mn_abs(g, out, a[0]);
    if (IS("clamp")) return mn_clamp(g, out, a[0], -1.0f, 1.0f);
    if (IS("pow")) return mn_pow(g, out, a[0], 2.0f);
    if (IS("where")) return mn_where(g, out, a[0], a[1], a[2]);
    if (IS("dropout")) return mn_dropout(g, out, a[0], 0.5f, 7);
    if (IS("dropout_ex")) return mn_dropout_ex(g, out, a[0], 0.5f, 7, a[1]);
    if (IS("cross_entropy_ex")) {
        const mn_cross_entropy_params p = {true, -100, 0.1f};
        return mn_cross_entropy_ex(g, out, a[0], a[1], &p);
    }
    if (IS("rms_norm")) return mn_rms_norm(g, out, a[0], a[1], 1e-5f);
    if (IS("layer_norm")) return mn_layer_norm(g, out, a[0], a[1], a[2], 1e-5f);
    if (IS("group_norm")) return mn_group_norm(g, out, a[0], 2, a[1], a[2], 1e-5f);
    if (IS("swiglu")) return mn_swiglu(g, out, a[0], a[1]);
    if (IS("geglu")) return mn_geglu(g, out, a[0], a[1]);
    if (IS("l1_loss")) return mn_l1_loss(g, out, a[0], a[1]);
    if (IS("bce_with_logits")) return mn_bce_with_logits(g, out, a[0], a[1]);
    if (IS("slice")) return mn_slice(g, out, a[0], 1, 1, 2);
    if (IS("pad")) return mn_pad(g, out, a[0], S(1, 0), S(0, 2));
    if (IS("concat")) return mn_concat(g, out, a, 3, 0);
    if (IS("split")) {
        *out = MN_NONE;
        mn_status st = mn_split(g, o2, a[0], 1, 2, NULL);
        if (!st) *out = o2[0];
        return st;
    }
    if (IS("broadcast_to")) return mn_broadcast_to(g, out, a[0], 2, S(3, 4));
    if (IS("avg_pool2d")) return mn_avg_pool2d(g, out, a[0], &pp, true);
    if (IS("global_avg_pool")) return mn_global_avg_pool(g, out, a[0]);
    if (IS("upsample_nearest2d")) return mn_upsample_nearest2d(g, out, a[0], 2, 1);
    if (IS("upsample_nearest2x")) return mn_upsample_nearest2x(g, out, a[0]);
    if (IS("conv1d")) return mn_conv1d(g, out, a[0], a[1], a[2], &c1);
    if (IS("conv_transpose2d")) return mn_conv_transpose2d(g, out, a[0], a[1], a[2], &ct);
    if (IS("batch_norm2d")) return mn_batch_norm2d(g, out, a[0], a[1], a[2], a[3], a[4], 0.1f, 1e-5f, true);
    if (IS("batch_norm2d_eval")) return mn_batch_norm2d(g, out, a[0], a[1], a[2], a[3], a[4], 0.1f, 1e-5f, false);
    if (IS("embedding")) return mn_embedding(g, out, a[0], a[1]);
    if (IS("rope")) return mn_rope(g, out, a[0], a[1], 0.0f, 0);
    if (IS("attention")) return mn_attention(g, out, a[0], a[1], a[2], a[3], &ap);
    if (IS("kv_append")) return mn_kv_append(g, out, a[0], a[1], a[2]);
    if (IS("tensor_shape")) {
        *out = MN_NONE;
        return mn_tensor_shape(g, a[0], &rank, shape);
    }
#undef IS
    fprintf(stderr, "test_handles: no caller for %s\n", name);
    return MN_E_UNSUPPORTED;
}

static void test_every_entry(void) {
    mn_graph *ga = NULL, *gb = NULL;
    CHECK_OK(mn_graph_create(&ga), "create");
    CHECK_OK(mn_graph_create(&gb), "create");
    if (!ga || !gb) return;
    mn_tensor ta[NT], tb[NT];
    build(ga, ta);
    build(gb, tb);
    CHECK(ga->tag != gb->tag);
    for (int i = 0; i < NT; i++) {
        CHECK(graph_id(ta[i]) == graph_id(tb[i])); /* same node... */
        CHECK(ta[i] != tb[i]);                     /* ...different handle */
        CHECK(ta[i] != MN_NONE && ta[i] > 0);
    }
    for (size_t e = 0; e < MN_ARRAY_LEN(entries); e++) {
        const entry *en = &entries[e];
        mn_tensor args[5], out = 1234;
        for (int k = 0; k < en->nargs; k++) args[k] = ta[en->args[k]];
        /* all from A: valid */
        mn_status st = call(en->name, ga, args, &out);
        CHECK_MSG(st == MN_OK, "%s with graph A's tensors: %s (%s)", en->name, mn_status_str(st), mn_graph_error(ga));
        for (int k = 0; k < en->nargs; k++) {
            mn_tensor bad[5];
            memcpy(bad, args, sizeof bad);
            bad[k] = tb[en->args[k]];
            int32_t n0 = ga->n;
            out = 1234;
            st = call(en->name, ga, bad, &out);
            CHECK_MSG(st == MN_E_INVALID, "%s, argument %d from graph B: %s", en->name, k, mn_status_str(st));
            if (strcmp(en->name, "tensor_shape") != 0) /* const graph: no message */
                CHECK_MSG(has(mn_graph_error(ga), "belongs to another graph"), "%s, argument %d: message \"%s\"",
                          en->name, k, mn_graph_error(ga));
            CHECK_MSG(ga->n == n0, "%s, argument %d: node count %d -> %d", en->name, k, n0, ga->n);
            CHECK_MSG(out == MN_NONE || out == 1234, "%s, argument %d: *out = %d", en->name, k, out);
        }
    }
    /* failed calls changed nothing: A still builds a session */
    mn_session_options o = mn_session_default_options();
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, ga, &o), mn_session_error(s));
    mn_session_destroy(s);
    mn_graph_destroy(ga);
    mn_graph_destroy(gb);
}

/* Plain node numbers, MN_NONE and out-of-range handles are refused. */
static void test_bad_values(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor x, t;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 1, S(3)), mn_graph_error(g));
    CHECK(graph_id(x) == 0 && x != 0); /* node 0, but the handle is not 0 */
    CHECK(mn_relu(g, &t, 0) == MN_E_INVALID);
    CHECK_MSG(has(mn_graph_error(g), "not node numbers"), "message: %s", mn_graph_error(g));
    CHECK(mn_relu(g, &t, MN_NONE) == MN_E_INVALID);
    CHECK_MSG(has(mn_graph_error(g), "MN_NONE"), "message: %s", mn_graph_error(g));
    CHECK(mn_relu(g, &t, x + 1) == MN_E_INVALID); /* this graph's tag, no node 1 */
    CHECK_MSG(has(mn_graph_error(g), "no node 1"), "message: %s", mn_graph_error(g));
    CHECK(mn_relu(g, &t, INT32_MIN) == MN_E_INVALID);
    CHECK(g->n == 1);
    /* the tag lives above the index: MN_NONE is never a handle */
    for (int i = 0; i < 600; i++) {
        mn_graph *h = NULL;
        mn_tensor y = MN_NONE;
        CHECK_OK(mn_graph_create(&h), "create");
        if (!h) break;
        CHECK(h->tag >= 1);
        CHECK_OK(mn_graph_input(h, &y, "y", MN_F32, 0, NULL), mn_graph_error(h));
        CHECK(y > 0 && y != MN_NONE);
        mn_graph_destroy(h);
    }
    mn_graph_destroy(g);
}

/* MN_MAX_NODES: the first node past it is an error (checked by pretending
 * the graph is full; allocating 2^23 real nodes would take gigabytes). */
static void test_node_limit(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor x, t = 77;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 1, S(3)), mn_graph_error(g));
    int32_t real_n = g->n;
    g->n = MN_MAX_NODES; /* never read past real_n below: every call fails first */
    CHECK(mn_graph_input(g, &t, "y", MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK_MSG(has(mn_graph_error(g), "MN_MAX_NODES"), "message: %s", mn_graph_error(g));
    CHECK(t == MN_NONE);
    CHECK(mn_relu(g, &t, x) == MN_E_INVALID);
    CHECK_MSG(has(mn_graph_error(g), "8388608"), "message: %s", mn_graph_error(g));
    CHECK(g->n == MN_MAX_NODES);
    g->n = real_n;
    CHECK_OK(mn_relu(g, &t, x), mn_graph_error(g));
    mn_graph_destroy(g);
}

/* The session's copy keeps the tag; graphs built in a row get different tags. */
static void test_session_copy(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor x, w, y, l;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, S(2, 3)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &w, "w", 2, S(3, 2), z), mn_graph_error(g));
    CHECK_OK(mn_matmul(g, &y, x, w), mn_graph_error(g));
    CHECK_OK(mn_mean(g, &l, y, MN_ALL_AXES, false), mn_graph_error(g));
    CHECK_OK(mn_graph_loss(g, l), mn_graph_error(g));
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    if (s) {
        CHECK(s->g->tag == g->tag);
        CHECK(!s->g->raw_ids); /* autodiff and optim put the mode back */
        CHECK(s->g->n > g->n);  /* gradients and updates were added */
        CHECK(graph_decode(s->g, w) == graph_id(w));
        CHECK(graph_find(s->g, "optim.adamw.m.w") >= g->n);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

int main(void) {
    test_every_entry();
    test_bad_values();
    test_node_limit();
    test_session_copy();
    return th_finish("test_handles");
}
