/* test_graph.c - the graph builder: the textual dump (pinned literally), the
 * MEGANEURA_DUMP switch, shape/dtype errors (status, a message naming the op
 * and the shapes, the graph left unchanged and still usable), bad arguments
 * (names, ids, ranks, dims, NULLs), the name rules (everything a checkpoint
 * cannot hold is refused at declaration) and the name index, and the shape rules of reshape, transpose,
 * reductions, conv2d, max_pool2d and batched matmul.
 *
 * Does not: run kernels (test_cpu_kernels.c) or check gradients
 * (test_gradcheck.c).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"
#include "schedule/schedule.h"
#include "harness.h"

#define S(...) (const int64_t[]){__VA_ARGS__}

static bool has(const char *hay, const char *needle) { return strstr(hay ? hay : "", needle) != NULL; }
#define CHECK_HAS(hay, needle) CHECK_MSG(has((hay), (needle)), "message \"%s\" lacks \"%s\"", (hay), (needle))

/* The dump of g as a malloc'd string (caller frees). */
static char *dump_str(const mn_graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    mn_status st = mn_graph_dump(g, f);
    fclose(f);
    if (st) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Checks that t has exactly the given shape. */
static void check_shape_at(const mn_graph *g, mn_tensor t, int rank, const int64_t *want, int line) {
    int r = -1;
    int64_t s[MN_MAX_RANK];
    if (mn_tensor_shape(g, t, &r, s) != MN_OK) {
        th_fail(__FILE__, line, "mn_tensor_shape(%d) failed", t);
        return;
    }
    bool ok = r == rank;
    for (int i = 0; ok && i < rank; i++) ok = s[i] == want[i];
    if (!ok) {
        char a[96], b[96];
        th_fail(__FILE__, line, "shape %s, want %s", shape_str(a, sizeof a, r, s), shape_str(b, sizeof b, rank, want));
        return;
    }
    th_passed++;
}
#define CHECK_SHAPE(g, t, rank, ...) check_shape_at((g), (t), (rank), S(__VA_ARGS__), __LINE__)
#define CHECK_SCALAR(g, t) check_shape_at((g), (t), 0, NULL, __LINE__)

/* ---- dump ------------------------------------------------------------------ */

/* x [2,3] @ w [3,4] + b [4] -> relu -> "logits"; cross_entropy with labels. */
static mn_graph *build_mlp(void) {
    mn_graph *g = NULL;
    mn_tensor x, y, w, b, h, z, a, loss;
    mn_init xu = {MN_INIT_XAVIER_UNIFORM, 0, 0}, zeros = {MN_INIT_ZEROS, 0, 0};
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return NULL;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, S(2, 3)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &y, "labels", MN_I32, 1, S(2)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &w, "w", 2, S(3, 4), xu), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &b, "b", 1, S(4), zeros), mn_graph_error(g));
    CHECK_OK(mn_matmul(g, &h, x, w), mn_graph_error(g));
    CHECK_OK(mn_add(g, &z, h, b), mn_graph_error(g));
    CHECK_OK(mn_relu(g, &a, z), mn_graph_error(g));
    CHECK_OK(mn_cross_entropy(g, &loss, a, y), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, a, "logits"), mn_graph_error(g));
    CHECK_OK(mn_graph_loss(g, loss), mn_graph_error(g));
    return g;
}

static void test_dump_mlp(void) {
    mn_graph *g = build_mlp();
    if (!g) return;
    static const char want[] =
        "%0 = input : f32[2,3] \"x\"\n"
        "%1 = input : i32[2] \"labels\"\n"
        "%2 = param : f32[3,4] \"w\" init=xavier_uniform(0,0)\n"
        "%3 = param : f32[4] \"b\" init=zeros(0,0)\n"
        "%4 = matmul(%0, %2) : f32[2,4]\n"
        "%5 = add(%4, %3) : f32[2,4]\n"
        "%6 = relu(%5) : f32[2,4] \"logits\" output\n"
        "%7 = ce_rows(%6, %1) : f32[2,3]\n"
        "%8 = cross_entropy(%6, %1, %7) : f32[] loss\n";
    char *got = dump_str(g);
    CHECK_MSG(got && strcmp(got, want) == 0, "mlp dump differs:\n--- got\n%s--- want\n%s", got ? got : "(null)", want);
    /* stable: a second dump is identical */
    char *again = dump_str(g);
    CHECK(got && again && strcmp(got, again) == 0);
    free(again);
    free(got);
    CHECK(mn_graph_dump(NULL, stdout) == MN_E_INVALID);
    CHECK(mn_graph_dump(g, NULL) == MN_E_INVALID);
    mn_graph_destroy(g);
}

/* The op parameters that the dump prints. */
static void test_dump_params(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor a, b, x, w, t0, t1, t2, t3, t4, t5, t6, t7;
    mn_init u = {MN_INIT_UNIFORM, -0.5f, 0.25f};
    CHECK_OK(mn_graph_input(g, &a, "a", MN_F32, 3, S(2, 4, 3)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &b, "b", 2, S(4, 5), u), mn_graph_error(g));
    CHECK_OK(mn_graph_param_lr_mult(g, b, 0.5f), mn_graph_error(g));
    CHECK_OK(mn_graph_param_freeze(g, b, true), mn_graph_error(g));
    CHECK_OK(mn_matmul_ex(g, &t0, a, b, true, false), mn_graph_error(g));
    CHECK_OK(mn_sum(g, &t1, t0, -1, true), mn_graph_error(g));
    CHECK_OK(mn_mean(g, &t2, t0, MN_ALL_AXES, false), mn_graph_error(g));
    CHECK_OK(mn_permute(g, &t3, t0, (const int[]){2, 0, 1}), mn_graph_error(g));
    CHECK_OK(mn_scale(g, &t4, t3, 0.25f), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &x, "img", MN_F32, 4, S(1, 2, 8, 8)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &w, "k", 4, S(4, 1, 3, 3), u), mn_graph_error(g));
    mn_conv2d_params cp = {{2, 1}, {1, 0}, {1, 2}, 2};
    CHECK_OK(mn_conv2d(g, &t5, x, w, MN_NONE, &cp), mn_graph_error(g));
    mn_pool2d_params pp = {{2, 2}, {0, 0}, {1, 0}};
    CHECK_OK(mn_max_pool2d(g, &t6, t5, &pp), mn_graph_error(g));
    CHECK_OK(mn_graph_scalar(g, &t7, 2.0f), mn_graph_error(g));
    static const char want[] =
        "%0 = input : f32[2,4,3] \"a\"\n"
        "%1 = param : f32[4,5] \"b\" init=uniform(-0.5,0.25) lr_mult=0.5 frozen\n"
        "%2 = matmul(%0, %1) : f32[2,3,5] trans=1,0\n"
        "%3 = sum(%2) : f32[2,3,1] axis=2 keepdim=1\n"
        "%4 = mean(%2) : f32[] axis=all\n"
        "%5 = permute(%2) : f32[5,2,3] perm=2,0,1\n"
        "%6 = scale(%5) : f32[5,2,3] 0.25\n"
        "%7 = input : f32[1,2,8,8] \"img\"\n"
        "%8 = param : f32[4,1,3,3] \"k\" init=uniform(-0.5,0.25)\n"
        "%9 = conv2d(%7, %8) : f32[1,4,4,4] stride=2,1 pad=1,0 dilation=1,2 groups=2\n"
        "%10 = maxpool2d(%9) : f32[1,4,3,2] kernel=2,2 stride=2,2 pad=1,0\n"
        "%11 = const : f32[]\n";
    char *got = dump_str(g);
    CHECK_MSG(got && strcmp(got, want) == 0, "param dump differs:\n--- got\n%s--- want\n%s", got ? got : "(null)", want);
    free(got);
    mn_graph_destroy(g);
}

/* MEGANEURA_DUMP prints the graph, schedule and memory plan at session build;
 * stderr goes to a temporary file for the duration. */
static void test_dump_env(void) {
    mn_graph *g = build_mlp();
    if (!g) return;
    FILE *tmp = tmpfile();
    CHECK(tmp != NULL);
    if (!tmp) {
        mn_graph_destroy(g);
        return;
    }
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    CHECK(saved >= 0);
    CHECK(dup2(fileno(tmp), STDERR_FILENO) >= 0);
    setenv("MEGANEURA_DUMP", "graph,schedule,memplan", 1);
    mn_session_options o = mn_session_default_options();
    o.mode = MN_MODE_TRAINING;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    mn_session *si = NULL;
    o.mode = MN_MODE_INFERENCE;
    mn_status sti = mn_session_create(&si, g, &o);
    fflush(stderr);
    unsetenv("MEGANEURA_DUMP");
    dup2(saved, STDERR_FILENO);
    close(saved);
    CHECK_OK(st, mn_session_error(s));
    CHECK_OK(sti, mn_session_error(si));
    fseek(tmp, 0, SEEK_END);
    long size = ftell(tmp);
    CHECK_MSG(size > 0, "MEGANEURA_DUMP printed nothing");
    /* the printed graph includes the optimizer's update ops */
    char *text = calloc(1, (size_t)(size > 0 ? size : 0) + 1);
    if (text && size > 0) {
        rewind(tmp);
        size_t got = fread(text, 1, (size_t)size, tmp);
        text[got] = 0;
        CHECK_HAS(text, "matmul");
        CHECK_HAS(text, "adam_update");
    }
    free(text);
    fclose(tmp);
    /* a session dump also works directly */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
        CHECK(mn_session_dump(s, "graph", f) == MN_OK);
        CHECK(mn_session_dump(s, "schedule", f) == MN_OK);
        CHECK(mn_session_dump(s, "memplan", f) == MN_OK);
        CHECK(mn_session_dump(s, "nonsense", f) == MN_E_INVALID);
        CHECK(mn_session_dump(s, NULL, f) == MN_E_INVALID);
        CHECK(mn_session_dump(s, "graph", NULL) == MN_E_INVALID);
        CHECK(mn_session_dump(NULL, "graph", f) == MN_E_INVALID);
        fclose(f);
        CHECK(len > 0);
    }
    free(buf);
    mn_session_destroy(si);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* ---- shape and dtype errors ---------------------------------------------------- */

typedef struct err_case {
    const char *what;
    mn_status want;
    const char *needles[4]; /* substrings the message must contain */
} err_case;

/* Runs the failing call's outcome through the common checks: status, message,
 * node count unchanged, graph still usable. */
static void check_error(mn_graph *g, const err_case *c, mn_status got, int32_t n_before, mn_tensor out,
                        mn_tensor valid_in, int line) {
    const char *msg = mn_graph_error(g);
    if (got != c->want)
        th_fail(__FILE__, line, "%s: status %s, want %s (%s)", c->what, mn_status_str(got), mn_status_str(c->want), msg);
    else th_passed++;
    for (int i = 0; i < 4 && c->needles[i]; i++) {
        if (has(msg, c->needles[i])) th_passed++;
        else th_fail(__FILE__, line, "%s: message \"%s\" lacks \"%s\"", c->what, msg, c->needles[i]);
    }
    if (g->n == n_before) th_passed++;
    else th_fail(__FILE__, line, "%s: node count %d -> %d", c->what, n_before, g->n);
    /* *out is either reset to MN_NONE or left alone (the caller put 1234 there) */
    if (out == MN_NONE || out == 1234) th_passed++;
    else th_fail(__FILE__, line, "%s: *out = %d after a failure", c->what, out);
    /* still usable: a valid op records a node */
    mn_tensor t = MN_NONE;
    mn_status st = mn_neg(g, &t, valid_in);
    if (st == MN_OK && graph_id(t) == n_before && g->n == n_before + 1) th_passed++;
    else th_fail(__FILE__, line, "%s: graph not usable afterwards: %s (%s)", c->what, mn_status_str(st), mn_graph_error(g));
}
static void test_shape_errors(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor a23, b45, c234, x4, w4, f2, fl, big, y;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    CHECK_OK(mn_graph_input(g, &a23, "a", MN_F32, 2, S(2, 3)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &b45, "b", 2, S(4, 5), z), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &c234, "c", MN_F32, 3, S(2, 3, 4)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &x4, "img", MN_F32, 4, S(1, 3, 8, 8)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &w4, "k", 4, S(4, 2, 3, 3), z), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &f2, "flabels", MN_F32, 1, S(2)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &fl, "ilabels", MN_I32, 1, S(2)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &big, "big", MN_F32, 4, S(1, 1, 4, 4)), mn_graph_error(g));

    /* Each case checks: status, message, node count unchanged, no new id. */
#define RUN(c, call)                                                                               \
    do {                                                                                           \
        int32_t n0_ = g->n;                                                                        \
        y = 1234;                                                                                  \
        mn_status st_ = (call);                                                                    \
        check_error(g, (c), st_, n0_, y, a23, __LINE__);                                           \
    } while (0)

    err_case mm = {"matmul inner", MN_E_SHAPE, {"matmul", "[2,3]", "[4,5]"}};
    RUN(&mm, mn_matmul(g, &y, a23, b45));
    err_case mmt = {"matmul transposed inner", MN_E_SHAPE, {"matmul", "[2,3]", "[4,5]", "transposed"}};
    RUN(&mmt, mn_matmul_ex(g, &y, a23, b45, true, false));
    err_case mmr = {"matmul rank", MN_E_SHAPE, {"matmul", "[1,3,8,8]", "[4,5]"}};
    RUN(&mmr, mn_matmul(g, &y, x4, b45));
    err_case mmd = {"matmul dtype", MN_E_DTYPE, {"matmul", "i32", "[2]"}};
    RUN(&mmd, mn_matmul(g, &y, fl, b45));
    err_case add = {"add broadcast", MN_E_SHAPE, {"add", "[2,3]", "[4,5]"}};
    RUN(&add, mn_add(g, &y, a23, b45));
    err_case mul = {"mul broadcast", MN_E_SHAPE, {"mul", "[2,3,4]", "[2,3]"}};
    RUN(&mul, mn_mul(g, &y, c234, a23));
    err_case rs = {"reshape count", MN_E_SHAPE, {"reshape", "[2,3]", "[4,2]"}};
    RUN(&rs, mn_reshape(g, &y, a23, 2, S(4, 2)));
    err_case rs1 = {"reshape -1", MN_E_SHAPE, {"reshape", "[2,3,4]", "[-1,5]"}};
    RUN(&rs1, mn_reshape(g, &y, c234, 2, S(-1, 5)));
    err_case rs2 = {"reshape two -1", MN_E_SHAPE, {"reshape", "[2,3,4]", "-1"}};
    RUN(&rs2, mn_reshape(g, &y, c234, 3, S(-1, 2, -1)));
    err_case rs0 = {"reshape zero dim", MN_E_SHAPE, {"reshape", "[2,3]", "[0,6]"}};
    RUN(&rs0, mn_reshape(g, &y, a23, 2, S(0, 6)));
    err_case rsr = {"reshape rank", MN_E_SHAPE, {"reshape", "rank 5"}};
    RUN(&rsr, mn_reshape(g, &y, a23, 5, S(1, 1, 1, 2, 3)));
    err_case pm = {"permute repeat", MN_E_SHAPE, {"permute", "[2,3,4]", "permutation"}};
    RUN(&pm, mn_permute(g, &y, c234, (const int[]){0, 0, 1}));
    err_case pm2 = {"permute range", MN_E_SHAPE, {"permute", "[2,3,4]"}};
    RUN(&pm2, mn_permute(g, &y, c234, (const int[]){0, 3, 1}));
    err_case tr = {"transpose axis", MN_E_SHAPE, {"transpose", "[2,3]"}};
    RUN(&tr, mn_transpose(g, &y, a23, 0, 2));
    err_case cv = {"conv2d channels", MN_E_SHAPE, {"conv2d", "[1,3,8,8]", "[4,2,3,3]"}};
    RUN(&cv, mn_conv2d(g, &y, x4, w4, MN_NONE, NULL));
    err_case cvr = {"conv2d rank", MN_E_SHAPE, {"conv2d", "[2,3]", "[4,2,3,3]"}};
    RUN(&cvr, mn_conv2d(g, &y, a23, w4, MN_NONE, NULL));
    mn_conv2d_params neg_pad = {{1, 1}, {-1, 0}, {1, 1}, 1};
    err_case cvp = {"conv2d padding", MN_E_INVALID, {"conv2d", "padding", "-1"}};
    RUN(&cvp, mn_conv2d(g, &y, x4, w4, MN_NONE, &neg_pad));
    mn_pool2d_params p5 = {{5, 5}, {0, 0}, {0, 0}};
    err_case mp = {"max_pool2d kernel", MN_E_SHAPE, {"max_pool2d", "5x5", "[1,1,4,4]"}};
    RUN(&mp, mn_max_pool2d(g, &y, big, &p5));
    mn_pool2d_params pbadpad = {{2, 2}, {0, 0}, {2, 0}};
    err_case mpp = {"max_pool2d padding", MN_E_INVALID, {"max_pool2d", "padding"}};
    RUN(&mpp, mn_max_pool2d(g, &y, big, &pbadpad));
    err_case mpr = {"max_pool2d rank", MN_E_SHAPE, {"max_pool2d", "[2,3]"}};
    RUN(&mpr, mn_max_pool2d(g, &y, a23, &p5));
    err_case ce = {"cross_entropy dtype", MN_E_DTYPE, {"cross_entropy", "labels", "i32", "f32"}};
    RUN(&ce, mn_cross_entropy(g, &y, a23, f2));
    err_case ces = {"cross_entropy batch", MN_E_SHAPE, {"cross_entropy", "[2]", "[4,5]"}};
    RUN(&ces, mn_cross_entropy(g, &y, b45, fl));
    err_case ced = {"cross_entropy_dense shape", MN_E_SHAPE, {"cross_entropy_dense", "[2,3]", "[4,5]"}};
    RUN(&ced, mn_cross_entropy_dense(g, &y, a23, b45));
    err_case mse = {"mse shape", MN_E_SHAPE, {"mse", "[2,3]", "[4,5]"}};
    RUN(&mse, mn_mse(g, &y, a23, b45));
    err_case red = {"sum axis", MN_E_SHAPE, {"sum", "axis 3", "[2,3,4]"}};
    RUN(&red, mn_sum(g, &y, c234, 3, false));
    err_case redn = {"max axis", MN_E_SHAPE, {"max", "axis -4", "[2,3,4]"}};
    RUN(&redn, mn_max(g, &y, c234, -4, false));
    err_case un = {"relu dtype", MN_E_DTYPE, {"relu", "i32"}};
    RUN(&un, mn_relu(g, &y, fl));

    /* loss on a non-scalar: the loss stays unset and nothing is added */
    {
        int32_t n0 = g->n;
        mn_status st = mn_graph_loss(g, a23);
        CHECK(st == MN_E_SHAPE);
        CHECK_HAS(mn_graph_error(g), "loss");
        CHECK_HAS(mn_graph_error(g), "[2,3]");
        CHECK(g->n == n0);
        CHECK(g->loss == MN_NONE);
        CHECK(mn_graph_loss(g, fl) == MN_E_SHAPE); /* [2] i32 */
        mn_tensor one_i32, one_f32;
        CHECK_OK(mn_graph_input(g, &one_i32, "one_i32", MN_I32, 1, S(1)), mn_graph_error(g));
        CHECK(mn_graph_loss(g, one_i32) == MN_E_DTYPE); /* one element, wrong dtype */
        CHECK_HAS(mn_graph_error(g), "i32 [1]");
        CHECK(g->loss == MN_NONE);
        CHECK_OK(mn_graph_input(g, &one_f32, "one_f32", MN_F32, 2, S(1, 1)), mn_graph_error(g));
        CHECK_OK(mn_graph_loss(g, one_f32), mn_graph_error(g)); /* any one-element f32 tensor */
        CHECK(g->loss == graph_id(one_f32));
        mn_tensor s;
        CHECK_OK(mn_sum(g, &s, a23, MN_ALL_AXES, false), mn_graph_error(g));
        CHECK_OK(mn_graph_loss(g, s), mn_graph_error(g)); /* replaces the loss */
        CHECK(g->loss == graph_id(s));
        CHECK(!(g->nodes[graph_id(one_f32)].flags & NODE_F_LOSS));
        /* a later failure keeps the earlier loss */
        CHECK(mn_graph_loss(g, b45) == MN_E_SHAPE);
        CHECK(g->loss == graph_id(s));
    }
#undef RUN
    mn_graph_destroy(g);
}

/* ---- bad arguments ---------------------------------------------------------- */

static void test_bad_args(void) {
    mn_graph *g = NULL;
    CHECK(mn_graph_create(NULL) == MN_E_INVALID);
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor x, p, t;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, S(2, 3)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &p, "p", 1, S(3), z), mn_graph_error(g));
    int32_t n0 = g->n;

    /* duplicate names, across inputs, params and outputs */
    t = 77;
    CHECK(mn_graph_input(g, &t, "x", MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "'x'");
    CHECK(t == MN_NONE);
    CHECK(mn_graph_param(g, &t, "x", 1, S(3), z) == MN_E_INVALID);
    CHECK(mn_graph_input(g, &t, "p", MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK(mn_graph_param(g, &t, "p", 1, S(3), z) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "already");
    CHECK(g->n == n0);
    mn_tensor r;
    CHECK_OK(mn_relu(g, &r, x), mn_graph_error(g));
    n0 = g->n;
    CHECK(mn_graph_output(g, r, "x") == MN_E_INVALID);
    CHECK(mn_graph_output(g, r, "p") == MN_E_INVALID);
    CHECK_OK(mn_graph_output(g, r, "r"), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, r, "r"), mn_graph_error(g)); /* same name again is fine */
    CHECK(mn_graph_output(g, r, "other") == MN_E_INVALID);   /* renaming is not */
    CHECK_HAS(mn_graph_error(g), "'r'");
    CHECK(mn_graph_input(g, &t, "r", MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK_OK(mn_graph_output(g, x, NULL), mn_graph_error(g)); /* an input keeps its name */

    /* empty and NULL names, overlong names */
    CHECK(mn_graph_input(g, &t, "", MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "empty");
    CHECK(mn_graph_param(g, &t, "", 1, S(3), z) == MN_E_INVALID);
    CHECK(mn_graph_input(g, &t, NULL, MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK(mn_graph_param(g, &t, NULL, 1, S(3), z) == MN_E_INVALID);
    mn_tensor r2;
    CHECK_OK(mn_neg(g, &r2, x), mn_graph_error(g));
    n0 = g->n;
    CHECK(mn_graph_output(g, r2, "") == MN_E_INVALID);
    CHECK(mn_graph_output(g, r2, NULL) == MN_E_INVALID);
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK(mn_graph_input(g, &t, longname, MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK(g->n == n0);

    /* NULL out pointers */
    CHECK(mn_graph_input(g, NULL, "in2", MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK(mn_graph_param(g, NULL, "p2", 1, S(3), z) == MN_E_INVALID);
    CHECK(mn_graph_constant(g, NULL, 1, S(1), (const float[]){1}) == MN_E_INVALID);
    CHECK(mn_graph_scalar(g, NULL, 1.0f) == MN_E_INVALID);
    CHECK(mn_matmul(g, NULL, x, x) == MN_E_INVALID);
    CHECK(mn_relu(g, NULL, x) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "relu");
    CHECK(mn_add(g, NULL, x, x) == MN_E_INVALID);
    CHECK(mn_sum(g, NULL, x, 0, false) == MN_E_INVALID);
    CHECK(mn_reshape(g, NULL, x, 1, S(6)) == MN_E_INVALID);
    CHECK(mn_transpose(g, NULL, x, 0, 1) == MN_E_INVALID);
    CHECK(mn_permute(g, NULL, x, (const int[]){1, 0}) == MN_E_INVALID);
    CHECK(mn_conv2d(g, NULL, x, x, MN_NONE, NULL) == MN_E_INVALID);
    CHECK(mn_max_pool2d(g, NULL, x, &(mn_pool2d_params){{1, 1}, {0, 0}, {0, 0}}) == MN_E_INVALID);
    CHECK(mn_cross_entropy(g, NULL, x, x) == MN_E_INVALID);
    CHECK(mn_permute(g, &t, x, NULL) == MN_E_INVALID);
    CHECK(mn_max_pool2d(g, &t, x, NULL) == MN_E_INVALID);
    CHECK(mn_graph_constant(g, &t, 1, S(1), NULL) == MN_E_INVALID);
    int rank = 0;
    CHECK(mn_tensor_shape(g, x, NULL, NULL) == MN_E_INVALID);
    CHECK(mn_tensor_shape(g, x, &rank, NULL) == MN_OK && rank == 2);
    CHECK(g->n == n0);

    /* NULL graph */
    CHECK(mn_graph_input(NULL, &t, "q", MN_F32, 1, S(3)) == MN_E_INVALID);
    CHECK(mn_graph_param(NULL, &t, "q", 1, S(3), z) == MN_E_INVALID);
    CHECK(mn_graph_constant(NULL, &t, 1, S(1), (const float[]){1}) == MN_E_INVALID);
    CHECK(mn_relu(NULL, &t, 0) == MN_E_INVALID);
    CHECK(mn_matmul(NULL, &t, 0, 0) == MN_E_INVALID);
    CHECK(mn_reshape(NULL, &t, 0, 1, S(6)) == MN_E_INVALID);
    CHECK(mn_permute(NULL, &t, 0, (const int[]){1, 0}) == MN_E_INVALID);
    CHECK(mn_transpose(NULL, &t, 0, 0, 1) == MN_E_INVALID);
    CHECK(mn_conv2d(NULL, &t, 0, 0, MN_NONE, NULL) == MN_E_INVALID);
    CHECK(mn_max_pool2d(NULL, &t, 0, NULL) == MN_E_INVALID);
    CHECK(mn_graph_output(NULL, 0, "o") == MN_E_INVALID);
    CHECK(mn_graph_loss(NULL, 0) == MN_E_INVALID);
    CHECK(mn_graph_param_freeze(NULL, 0, true) == MN_E_INVALID);
    CHECK(mn_graph_param_lr_mult(NULL, 0, 1.0f) == MN_E_INVALID);
    CHECK(mn_tensor_shape(NULL, 0, &rank, NULL) == MN_E_INVALID);
    CHECK(mn_graph_error(NULL) != NULL);

    /* invalid tensor ids */
    const mn_tensor bad[] = {MN_NONE, 9999, -5, g->n, graph_handle(g, g->n), graph_id(x), x + (1 << 23)};
    for (size_t i = 0; i < MN_ARRAY_LEN(bad); i++) {
        mn_tensor b = bad[i];
        int32_t n1 = g->n;
        t = 42;
        CHECK(mn_relu(g, &t, b) == MN_E_INVALID);
        CHECK(t == MN_NONE);
        CHECK_HAS(mn_graph_error(g), "relu");
        CHECK(mn_add(g, &t, x, b) == MN_E_INVALID);
        CHECK(mn_add(g, &t, b, x) == MN_E_INVALID);
        CHECK(mn_matmul(g, &t, b, x) == MN_E_INVALID);
        CHECK(mn_reshape(g, &t, b, 1, S(6)) == MN_E_INVALID);
        CHECK(mn_permute(g, &t, b, (const int[]){0, 1, 2, 3}) == MN_E_INVALID);
        CHECK(mn_transpose(g, &t, b, 0, 1) == MN_E_INVALID);
        CHECK(mn_sum(g, &t, b, 0, false) == MN_E_INVALID);
        CHECK(mn_conv2d(g, &t, b, b, MN_NONE, NULL) == MN_E_INVALID);
        if (b != MN_NONE) CHECK(mn_conv2d(g, &t, x, p, b, NULL) == MN_E_INVALID);
        CHECK(mn_max_pool2d(g, &t, b, &(mn_pool2d_params){{1, 1}, {0, 0}, {0, 0}}) == MN_E_INVALID);
        CHECK(mn_cross_entropy(g, &t, x, b) == MN_E_INVALID);
        CHECK(mn_graph_output(g, b, "bad_out") == MN_E_INVALID);
        CHECK(mn_graph_loss(g, b) == MN_E_INVALID);
        CHECK(mn_graph_param_freeze(g, b, true) == MN_E_INVALID);
        CHECK(mn_graph_param_lr_mult(g, b, 2.0f) == MN_E_INVALID);
        CHECK(mn_tensor_shape(g, b, &rank, NULL) == MN_E_INVALID);
        CHECK(g->n == n1);
    }
    /* freeze / lr_mult on a non-parameter, bad multipliers */
    CHECK(mn_graph_param_freeze(g, x, true) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "not a parameter");
    CHECK(mn_graph_param_lr_mult(g, x, 2.0f) == MN_E_INVALID);
    CHECK(mn_graph_param_lr_mult(g, p, -1.0f) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "'p'");
    CHECK(mn_graph_param_lr_mult(g, p, NAN) == MN_E_INVALID);
    mn_init bad_init = {(mn_init_kind)99, 0, 0};
    CHECK(mn_graph_param(g, &t, "p3", 1, S(3), bad_init) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "initializer");

    /* ranks and dims */
    int32_t n2 = g->n;
    CHECK(mn_graph_input(g, &t, "r5", MN_F32, 5, S(1, 2, 3, 4, 5)) == MN_E_SHAPE);
    CHECK_HAS(mn_graph_error(g), "rank 5");
    CHECK(mn_graph_param(g, &t, "r5", 5, S(1, 2, 3, 4, 5), z) == MN_E_SHAPE);
    CHECK(mn_graph_input(g, &t, "rneg", MN_F32, -1, S(1)) == MN_E_SHAPE);
    CHECK(mn_graph_constant(g, &t, 5, S(1, 1, 1, 1, 1), (const float[]){1}) == MN_E_SHAPE);
    CHECK(mn_graph_input(g, &t, "d0", MN_F32, 2, S(2, 0)) == MN_E_SHAPE);
    CHECK_HAS(mn_graph_error(g), "dimension 1 is 0");
    CHECK(mn_graph_param(g, &t, "dneg", 2, S(-3, 2), z) == MN_E_SHAPE);
    CHECK_HAS(mn_graph_error(g), "-3");
    CHECK(mn_graph_input(g, &t, "huge", MN_F32, 4, S(1 << 20, 1 << 20, 1 << 20, 1 << 20)) == MN_E_SHAPE);
    CHECK(mn_graph_input(g, &t, "nullshape", MN_F32, 2, NULL) == MN_E_INVALID);
    /* 16-bit inputs are fine (constants, parameters and state are f32) */
    CHECK_OK(mn_graph_input(g, &t, "f16", MN_F16, 1, S(2)), mn_graph_error(g));
    CHECK(g->nodes[graph_id(t)].dtype == MN_F16);
    CHECK_OK(mn_graph_input(g, &t, "bf16", MN_BF16, 1, S(2)), mn_graph_error(g));
    n2 += 2;
    CHECK(mn_graph_input(g, &t, "weird", (mn_dtype)17, 1, S(2)) == MN_E_DTYPE);
    CHECK(g->n == n2);
    /* the names of failed sources stay free */
    CHECK_OK(mn_graph_input(g, &t, "r5", MN_F32, 0, NULL), mn_graph_error(g));
    CHECK_SCALAR(g, t);
    CHECK_OK(mn_graph_input(g, &t, "d0", MN_F32, 4, S(1, 2, 3, 4)), mn_graph_error(g));

    /* destroy accepts NULL */
    mn_graph_destroy(NULL);
    mn_session_destroy(NULL);
    CHECK(mn_session_error(NULL) != NULL);
    CHECK(strcmp(mn_status_str(MN_E_SHAPE), "MN_E_SHAPE") == 0);
    CHECK(mn_status_str(12345) != NULL);
    CHECK(strcmp(mn_dtype_name(MN_I32), "i32") == 0);
    CHECK(strcmp(mn_dtype_name((mn_dtype)99), "?") == 0);
    CHECK(mn_dtype_size(MN_F32) == 4 && mn_dtype_size((mn_dtype)99) == 0);
    mn_graph_destroy(g);
}

/* ---- names ---------------------------------------------------------------------- */

/* Every name that cannot be written into a checkpoint is refused when it is
 * declared (input, param, state, output), with a message naming it, and the
 * failed call leaves the graph unchanged (the name stays free). */
static void test_names(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    mn_tensor x, t, r;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 1, S(3)), mn_graph_error(g));
    CHECK_OK(mn_relu(g, &r, x), mn_graph_error(g));
    char longest[MN_MAX_NAME + 1], too_long[MN_MAX_NAME + 2];
    memset(longest, 'a', MN_MAX_NAME);
    longest[MN_MAX_NAME] = 0;
    memset(too_long, 'b', MN_MAX_NAME + 1);
    too_long[MN_MAX_NAME + 1] = 0;
    static const struct {
        const char *name, *needle;
    } bad[] = {
        {"", "empty"},
        {"\xC3", "UTF-8"},             /* truncated sequence */
        {"w\xC0\xAF", "UTF-8"},        /* overlong '/' */
        {"\xED\xA0\x80", "UTF-8"},     /* a surrogate */
        {"w\xFF", "UTF-8"},
        {"__metadata__", "reserved"},  /* safetensors' metadata key */
        {"__hyper", "reserved"},       /* the session's own input */
        {"__x", "__"},
        {"optim.adamw.m.w", "optim."}, /* another parameter's optimizer slot */
        {"optim.temperature", "reserved"},
        {"tab\there", "control character (byte 0x09 at offset 3)"},
        {"nl\n", "control character"},
        {"del\x7f", "byte 0x7f"},
        {"x", "'x' is already used"},
    };
    for (size_t i = 0; i < MN_ARRAY_LEN(bad); i++) {
        for (int kind = 0; kind < 4; kind++) {
            int32_t n0 = g->n;
            t = 77;
            mn_status st;
            if (kind == 0) st = mn_graph_input(g, &t, bad[i].name, MN_F32, 1, S(3));
            else if (kind == 1) st = mn_graph_param(g, &t, bad[i].name, 1, S(3), z);
            else if (kind == 2) st = mn_graph_state(g, &t, bad[i].name, 1, S(3));
            else st = mn_graph_output(g, r, bad[i].name);
            CHECK_MSG(st == MN_E_INVALID, "name %zu, kind %d: %s", i, kind, mn_status_str(st));
            CHECK_HAS(mn_graph_error(g), bad[i].needle);
            if (kind < 3) CHECK(t == MN_NONE);
            CHECK(g->n == n0);
        }
    }
    /* the message names the reserved name itself */
    CHECK(mn_graph_param(g, &t, "optim.adamw.m.w", 1, S(3), z) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "'optim.adamw.m.w'");
    /* too long: the limit is MN_MAX_NAME bytes, and exactly that many is fine */
    CHECK(mn_graph_param(g, &t, too_long, 1, S(3), z) == MN_E_INVALID);
    CHECK_HAS(mn_graph_error(g), "256 bytes is longer than 255");
    CHECK_OK(mn_graph_param(g, &t, longest, 1, S(3), z), mn_graph_error(g));
    /* nothing above took a name: the failed output can still be named, and
     * valid UTF-8, quotes, backslashes and spaces are fine */
    CHECK(graph_find(g, "__hyper") == MN_NONE && graph_find(g, "tab\there") == MN_NONE);
    CHECK_OK(mn_graph_output(g, r, "r"), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &t, "caf\xC3\xA9 \"w\" \\ \xF0\x9F\x98\x80", 1, S(3), z), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &t, "optim", 1, S(3), z), mn_graph_error(g)); /* the prefix is "optim." */
    CHECK_OK(mn_graph_param(g, &t, "_x", 1, S(3), z), mn_graph_error(g));
    CHECK(graph_find(g, "r") == graph_id(r));
    CHECK(graph_find(g, "optim") == graph_id(t) - 1);
    mn_graph_destroy(g);
}

/* The name index: many names, lookups exact, failed composites leave no
 * stale entries. */
static void test_name_index(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    enum { N = 5000 };
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    mn_tensor t, ids[N];
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "p%d", i);
        CHECK_OK(mn_graph_param(g, &ids[i], name, 1, S(2), z), mn_graph_error(g));
    }
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "p%d", i);
        wrong += graph_find(g, name) != graph_id(ids[i]);
        wrong += mn_graph_param(g, &t, name, 1, S(2), z) != MN_E_INVALID; /* duplicate */
    }
    CHECK(wrong == 0);
    CHECK(graph_find(g, "p5000") == MN_NONE && graph_find(g, "p") == MN_NONE);
    CHECK(g->names_used == N);
    mn_graph_destroy(g);
}

/* ---- shape rules ---------------------------------------------------------------- */

static void test_shapes(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor c, t, a2, b2, a3, b3;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    CHECK_OK(mn_graph_input(g, &c, "c", MN_F32, 3, S(2, 3, 4)), mn_graph_error(g));

    /* reshape with -1 */
    CHECK_OK(mn_reshape(g, &t, c, 2, S(-1, 4)), mn_graph_error(g));
    CHECK_SHAPE(g, t, 2, 6, 4);
    CHECK_OK(mn_reshape(g, &t, c, 2, S(2, -1)), mn_graph_error(g));
    CHECK_SHAPE(g, t, 2, 2, 12);
    CHECK_OK(mn_reshape(g, &t, c, 1, S(-1)), mn_graph_error(g));
    CHECK_SHAPE(g, t, 1, 24);
    CHECK_OK(mn_reshape(g, &t, c, 4, S(1, 2, -1, 3)), mn_graph_error(g));
    CHECK_SHAPE(g, t, 4, 1, 2, 4, 3);
    mn_tensor one;
    CHECK_OK(mn_graph_input(g, &one, "one", MN_F32, 2, S(1, 1)), mn_graph_error(g));
    CHECK_OK(mn_reshape(g, &t, one, 0, NULL), mn_graph_error(g));
    CHECK_SCALAR(g, t);
    CHECK_OK(mn_reshape(g, &t, t, 1, S(-1)), mn_graph_error(g));
    CHECK_SHAPE(g, t, 1, 1);
    /* i32 keeps its dtype through reshape */
    mn_tensor lab;
    CHECK_OK(mn_graph_input(g, &lab, "lab", MN_I32, 2, S(2, 2)), mn_graph_error(g));
    CHECK_OK(mn_reshape(g, &t, lab, 1, S(-1)), mn_graph_error(g));
    CHECK_SHAPE(g, t, 1, 4);
    CHECK(g->nodes[graph_id(t)].dtype == MN_I32);

    /* transpose with negative axes */
    CHECK_OK(mn_transpose(g, &t, c, -1, -3), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 4, 3, 2);
    CHECK_OK(mn_transpose(g, &t, c, 1, -1), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 2, 4, 3);
    CHECK_OK(mn_transpose(g, &t, c, -2, -2), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 2, 3, 4);
    CHECK(mn_transpose(g, &t, c, -4, 0) == MN_E_SHAPE);
    CHECK_OK(mn_permute(g, &t, c, (const int[]){1, 2, 0}), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 3, 4, 2);

    /* reductions with and without keepdim */
    CHECK_OK(mn_sum(g, &t, c, 1, true), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 2, 1, 4);
    CHECK_OK(mn_sum(g, &t, c, 1, false), mn_graph_error(g));
    CHECK_SHAPE(g, t, 2, 2, 4);
    CHECK_OK(mn_mean(g, &t, c, -1, true), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 2, 3, 1);
    CHECK(g->nodes[graph_id(t)].ip[0] == 2); /* axis normalised */
    CHECK_OK(mn_mean(g, &t, c, -3, false), mn_graph_error(g));
    CHECK_SHAPE(g, t, 2, 3, 4);
    CHECK_OK(mn_max(g, &t, c, 0, true), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 1, 3, 4);
    CHECK_OK(mn_max(g, &t, c, MN_ALL_AXES, false), mn_graph_error(g));
    CHECK_SCALAR(g, t);
    CHECK_OK(mn_sum(g, &t, c, MN_ALL_AXES, true), mn_graph_error(g));
    CHECK_SCALAR(g, t); /* all axes: always a scalar */
    CHECK_OK(mn_softmax(g, &t, c), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 2, 3, 4);
    mn_tensor sc;
    CHECK_OK(mn_graph_scalar(g, &sc, 3.0f), mn_graph_error(g));
    CHECK(mn_softmax(g, &t, sc) == MN_E_SHAPE);
    CHECK(mn_sum(g, &t, sc, 0, false) == MN_E_SHAPE);

    /* broadcasting */
    mn_tensor r1, col;
    CHECK_OK(mn_graph_param(g, &r1, "r1", 1, S(4), z), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &col, "col", 2, S(3, 1), z), mn_graph_error(g));
    CHECK_OK(mn_add(g, &t, c, r1), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 2, 3, 4);
    CHECK_OK(mn_sub(g, &t, col, r1), mn_graph_error(g));
    CHECK_SHAPE(g, t, 2, 3, 4);
    CHECK_OK(mn_div(g, &t, sc, c), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 2, 3, 4);

    /* conv2d: stride, padding, dilation, groups */
    mn_tensor x, w, b, xb, wb;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 4, S(2, 4, 9, 9)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &w, "w", 4, S(6, 2, 3, 3), z), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &b, "b", 1, S(6), z), mn_graph_error(g));
    mn_conv2d_params p = {{2, 2}, {1, 1}, {1, 1}, 2};
    CHECK_OK(mn_conv2d(g, &t, x, w, b, &p), mn_graph_error(g));
    CHECK_SHAPE(g, t, 4, 2, 6, 5, 5); /* (9+2-3)/2+1 */
    p.dilation[0] = p.dilation[1] = 2;
    CHECK_OK(mn_conv2d(g, &t, x, w, MN_NONE, &p), mn_graph_error(g));
    CHECK_SHAPE(g, t, 4, 2, 6, 4, 4); /* span 5: (9+2-5)/2+1 */
    CHECK(mn_conv2d(g, &t, x, w, MN_NONE, NULL) == MN_E_SHAPE); /* groups 1: 4 != 2 channels */
    CHECK_HAS(mn_graph_error(g), "groups=1");
    mn_conv2d_params g4 = {{1, 1}, {0, 0}, {1, 1}, 4};
    CHECK(mn_conv2d(g, &t, x, w, MN_NONE, &g4) == MN_E_SHAPE); /* 6 % 4 */
    CHECK(mn_conv2d(g, &t, x, w, r1, &p) == MN_E_SHAPE);       /* bias [4] for 6 outputs */
    CHECK_HAS(mn_graph_error(g), "bias");
    CHECK_OK(mn_graph_input(g, &xb, "xb", MN_F32, 4, S(1, 3, 6, 7)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &wb, "wb", 4, S(2, 3, 2, 3), z), mn_graph_error(g));
    mn_conv2d_params asym = {{1, 2}, {2, 0}, {2, 1}, 0};
    CHECK_OK(mn_conv2d(g, &t, xb, wb, MN_NONE, &asym), mn_graph_error(g));
    CHECK_SHAPE(g, t, 4, 1, 2, 8, 3); /* h: (6+4-3)/1+1 = 8; w: (7-3)/2+1 = 3 */
    CHECK(g->nodes[graph_id(t)].ip[6] == 1); /* groups 0 means 1 */
    mn_conv2d_params huge_dil = {{1, 1}, {0, 0}, {5, 5}, 1};
    CHECK(mn_conv2d(g, &t, xb, wb, MN_NONE, &huge_dil) == MN_E_SHAPE); /* w: span 11 > 7 */

    /* max_pool2d */
    mn_tensor im;
    CHECK_OK(mn_graph_input(g, &im, "im", MN_F32, 4, S(1, 2, 7, 7)), mn_graph_error(g));
    mn_pool2d_params pp = {{3, 3}, {0, 0}, {0, 0}};
    CHECK_OK(mn_max_pool2d(g, &t, im, &pp), mn_graph_error(g));
    CHECK_SHAPE(g, t, 4, 1, 2, 2, 2);
    mn_pool2d_params pp2 = {{3, 2}, {2, 1}, {1, 1}};
    CHECK_OK(mn_max_pool2d(g, &t, im, &pp2), mn_graph_error(g));
    CHECK_SHAPE(g, t, 4, 1, 2, 4, 8); /* h: (7+2-3)/2+1 = 4; w: (7+2-2)/1+1 = 8 */

    /* batched matmul with transposes and a shared operand */
    CHECK_OK(mn_graph_input(g, &a3, "a3", MN_F32, 3, S(5, 2, 3)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &b3, "b3", MN_F32, 3, S(5, 3, 4)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &a2, "a2", MN_F32, 2, S(2, 3)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &b2, "b2", MN_F32, 2, S(3, 4)), mn_graph_error(g));
    CHECK_OK(mn_matmul(g, &t, a2, b2), mn_graph_error(g));
    CHECK_SHAPE(g, t, 2, 2, 4);
    CHECK_OK(mn_matmul(g, &t, a3, b3), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 5, 2, 4);
    CHECK_OK(mn_matmul(g, &t, a3, b2), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 5, 2, 4);
    CHECK_OK(mn_matmul(g, &t, a2, b3), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 5, 2, 4);
    mn_tensor a3t, b3t, b2t;
    CHECK_OK(mn_graph_input(g, &a3t, "a3t", MN_F32, 3, S(5, 3, 2)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &b3t, "b3t", MN_F32, 3, S(5, 4, 3)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &b2t, "b2t", MN_F32, 2, S(4, 3)), mn_graph_error(g));
    CHECK_OK(mn_matmul_ex(g, &t, a3t, b3, true, false), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 5, 2, 4);
    CHECK_OK(mn_matmul_ex(g, &t, a3, b2t, false, true), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 5, 2, 4);
    CHECK_OK(mn_matmul_ex(g, &t, a3t, b3t, true, true), mn_graph_error(g));
    CHECK_SHAPE(g, t, 3, 5, 2, 4);
    CHECK_OK(mn_matmul_ex(g, &t, b2t, b2t, true, false), mn_graph_error(g)); /* [3,4]^T... = [3,3] */
    CHECK_SHAPE(g, t, 2, 3, 3);
    CHECK(mn_matmul_ex(g, &t, a3, b3, true, false) == MN_E_SHAPE);
    mn_tensor b6;
    CHECK_OK(mn_graph_input(g, &b6, "b6", MN_F32, 3, S(6, 3, 4)), mn_graph_error(g));
    CHECK(mn_matmul(g, &t, a3, b6) == MN_E_SHAPE);
    CHECK_HAS(mn_graph_error(g), "batch");
    CHECK_HAS(mn_graph_error(g), "[5,2,3]");
    CHECK_HAS(mn_graph_error(g), "[6,3,4]");
    CHECK(mn_matmul(g, &t, r1, r1) == MN_E_SHAPE);

    /* losses are scalars */
    mn_tensor lg, lb;
    CHECK_OK(mn_graph_input(g, &lg, "lg", MN_F32, 2, S(3, 5)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &lb, "lb", MN_I32, 1, S(3)), mn_graph_error(g));
    CHECK_OK(mn_cross_entropy(g, &t, lg, lb), mn_graph_error(g));
    CHECK_SCALAR(g, t);
    CHECK_OK(mn_cross_entropy_dense(g, &t, lg, lg), mn_graph_error(g));
    CHECK_SCALAR(g, t);
    CHECK_OK(mn_mse(g, &t, c, c), mn_graph_error(g));
    CHECK_SCALAR(g, t);
    mn_graph_destroy(g);
}

/* Sizes near the element limit (2^40): an error, never an overflow. */
static void test_huge(void) {
    mn_graph *g = NULL;
    CHECK_OK(mn_graph_create(&g), "create");
    if (!g) return;
    mn_tensor x, col, row, w, tall, t, tiny, k1;
    mn_init z = {MN_INIT_ZEROS, 0, 0};
    const int64_t M = (int64_t)1 << 20;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 4, S(1, 1, 8, 8)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &col, "col", MN_F32, 2, S(M, 1)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &row, "row", MN_F32, 2, S(1, 2 * M)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &w, "w", 4, S(1, 1, (int64_t)1 << 36, 1), z), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &tall, "tall", MN_F32, 1, S((int64_t)1 << 40)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &tiny, "tiny", MN_F32, 4, S(1, 1, 1, 1)), mn_graph_error(g));
    CHECK_OK(mn_graph_param(g, &k1, "k1", 4, S(1, 1, 1, 1), z), mn_graph_error(g));
    int32_t n0 = g->n;
    CHECK(mn_reshape(g, &t, x, 3, S((int64_t)1 << 40, (int64_t)1 << 40, (int64_t)1 << 40)) == MN_E_SHAPE);
    CHECK_HAS(mn_graph_error(g), "reshape");
    CHECK(mn_reshape(g, &t, x, 3, S(-1, (int64_t)1 << 40, (int64_t)1 << 40)) == MN_E_SHAPE);
    CHECK(mn_reshape(g, &t, tall, 2, S(INT64_MAX, 2)) == MN_E_SHAPE);
    CHECK_OK(mn_reshape(g, &t, tall, 2, S(-1, M)), mn_graph_error(g));
    CHECK_SHAPE(g, t, 2, M, M);
    n0 = g->n;
    CHECK(mn_add(g, &t, col, row) == MN_E_SHAPE); /* [2^20, 2^21] */
    CHECK_HAS(mn_graph_error(g), "[1048576,2097152]");
    CHECK(mn_matmul(g, &t, col, row) == MN_E_SHAPE);
    CHECK_HAS(mn_graph_error(g), "matmul");
    mn_conv2d_params dil = {{1, 1}, {0, 0}, {INT_MAX, 1}, 1};
    CHECK(mn_conv2d(g, &t, x, w, MN_NONE, &dil) == MN_E_SHAPE);
    CHECK_HAS(mn_graph_error(g), "conv2d");
    mn_conv2d_params pad = {{1, 1}, {INT_MAX, INT_MAX}, {1, 1}, 1};
    CHECK(mn_conv2d(g, &t, tiny, k1, MN_NONE, &pad) == MN_E_SHAPE); /* ~2^32 x 2^32 */
    CHECK(g->n == n0);
    mn_graph_destroy(g);
}

/* Appended nodes (g->sched_pre, session.c round_by_cast) run right before
 * their first consumer, and one read only by another appended node (a cast
 * that a reshape of it reads) runs before that one: the order is cast,
 * reshape, consumer. */
static void test_sched_pre(void) {
    mn_graph *g;
    mn_graph_create(&g);
    g->raw_ids = true;
    mn_tensor x, y, c, r;
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){4, 4}), mn_graph_error(g));
    CHECK_OK(mn_neg(g, &y, x), mn_graph_error(g));
    const int32_t pre = g->n;
    CHECK_OK(mn_cast(g, &c, x, MN_BF16), mn_graph_error(g));
    CHECK_OK(mn_reshape(g, &r, c, 1, (int64_t[]){16}), mn_graph_error(g));
    g->nodes[y].in[0] = r; /* as round_by_cast rewrites a consumer */
    g->sched_pre = pre;
    uint8_t live[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    schedule s;
    CHECK_OK(schedule_build(&s, g, live, NULL), "schedule_build");
    CHECK_MSG(s.n == 3 && s.order[0] == c && s.order[1] == r && s.order[2] == y,
              "appended cast and reshape: %d nodes scheduled (%d %d %d), want %d %d %d", (int)s.n,
              s.n > 0 ? (int)s.order[0] : -1, s.n > 1 ? (int)s.order[1] : -1, s.n > 2 ? (int)s.order[2] : -1,
              (int)c, (int)r, (int)y);
    schedule_free(&s);
    mn_graph_destroy(g);
}

int main(void) {
    test_sched_pre();
    test_dump_mlp();
    test_dump_params();
    test_dump_env();
    test_shape_errors();
    test_bad_args();
    test_names();
    test_name_index();
    test_shapes();
    test_huge();
    return th_finish("test_graph");
}
