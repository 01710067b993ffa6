/* test_cpu_kernels.c - the CPU reference kernels and the CPU backend, tested
 * directly: nodes are built by hand in a stack mn_graph (no graph building
 * functions), kernels are called from cpu_kernels_f32/_f64 and compared with
 * small independent loops, closed forms and central finite differences (f64).
 *
 * Does not: test shape inference, autodiff or the session (other tests do).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "graph/attrs.h"
#include "harness.h"

/* ---- a hand-built graph -------------------------------------------------- */

#define MAXN 64
static node g_nodes[MAXN];
static mn_graph G;

static void g_reset(void) {
    memset(g_nodes, 0, sizeof g_nodes);
    memset(&G, 0, sizeof G);
    G.nodes = g_nodes;
    G.cap = MAXN;
    G.loss = MN_NONE;
}

static int64_t numel_of(const node *n) {
    int64_t e = 1;
    for (int i = 0; i < n->rank; i++) e *= n->shape[i];
    return e;
}
static int64_t nnumel(int32_t id) { return numel_of(&G.nodes[id]); }

/* Appends a node: rank/shape, nin inputs from ins (may be NULL). */
static int32_t mk(op_id op, mn_dtype dt, int rank, const int64_t *shape, int nin, const int32_t *ins) {
    node *n = &G.nodes[G.n];
    n->op = op;
    n->dtype = dt;
    n->rank = rank;
    for (int i = 0; i < rank; i++) n->shape[i] = shape[i];
    n->nin = nin;
    for (int i = 0; i < nin; i++) n->in[i] = ins[i];
    return G.n++;
}
#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define INS(...) ((const int32_t[]){__VA_ARGS__})
static int32_t src(int rank, const int64_t *shape) { return mk(OP_INPUT, MN_F32, rank, shape, 0, NULL); }
static int32_t src_i32(int rank, const int64_t *shape) { return mk(OP_INPUT, MN_I32, rank, shape, 0, NULL); }

enum { F64 = 0, F32 = 1 };

/* Runs node id on double buffers. In F32 mode the float inputs are converted
 * to float, the f32 kernel runs, and the output and every float input are
 * converted back (so in-place state updates come back too). Int (MN_I32)
 * inputs are passed through. Pass as many input pointers as the node has
 * inputs; an input pointer equal to out shares out's storage. */
static void run(int mode, int32_t id, double *out, ...) {
    const node *n = &G.nodes[id];
    void *in[NODE_MAX_IN] = {0};
    double *din[NODE_MAX_IN] = {0};
    va_list ap;
    va_start(ap, out);
    for (int i = 0; i < n->nin; i++) din[i] = va_arg(ap, double *);
    va_end(ap);
    if (mode == F64 || n->dtype == MN_I32) { /* int data is the same in both modes */
        for (int i = 0; i < n->nin; i++) in[i] = din[i];
        if (mode == F32) {
            cpu_kernels_f32[n->op](&G, n, out, in);
            return;
        }
        cpu_kernels_f64[n->op](&G, n, out, in);
        return;
    }
    const int64_t on = nnumel(id);
    float *fo = malloc((size_t)on * sizeof(float));
    for (int64_t k = 0; k < on; k++) fo[k] = (float)out[k];
    float *fin[NODE_MAX_IN] = {0};
    for (int i = 0; i < n->nin; i++) {
        const node *x = &G.nodes[n->in[i]];
        if (x->dtype == MN_I32) {
            in[i] = din[i];
        } else if (din[i] == out) {
            in[i] = fo;
        } else {
            const int64_t xn = numel_of(x);
            fin[i] = malloc((size_t)xn * sizeof(float));
            for (int64_t k = 0; k < xn; k++) fin[i][k] = (float)din[i][k];
            in[i] = fin[i];
        }
    }
    cpu_kernels_f32[n->op](&G, n, fo, in);
    for (int64_t k = 0; k < on; k++) out[k] = fo[k];
    for (int i = 0; i < n->nin; i++) {
        if (!fin[i]) continue;
        const int64_t xn = numel_of(&G.nodes[n->in[i]]);
        for (int64_t k = 0; k < xn; k++) din[i][k] = fin[i][k];
        free(fin[i]);
    }
    free(fo);
}

static mn_rng g_rng;
static void fill(double *p, int64_t cnt, double lo, double hi) {
    for (int64_t i = 0; i < cnt; i++) p[i] = lo + (hi - lo) * mn_rng_uniform(&g_rng);
}
static double max_abs_diff(const double *a, const double *b, int64_t cnt) {
    double m = 0;
    for (int64_t i = 0; i < cnt; i++) {
        const double d = fabs(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}
#define CHECK_ALL(a, b, cnt, tol, what)                                                            \
    do {                                                                                           \
        double e_ = max_abs_diff((a), (b), (cnt));                                                 \
        CHECK_MSG(e_ <= (tol), "%s: max |diff| %.3g > %.3g", (what), e_, (double)(tol));           \
    } while (0)

/* Central finite differences of L = sum_k r[k] * out_k with respect to input
 * `wrt` of node id (f64 kernels); returns the gradient in fd. ins holds the
 * node's nin input pointers. */
static void fd_grad(double *fd, int32_t id, double *const *ins, int wrt, const double *r, double h) {
    const node *n = &G.nodes[id];
    const int64_t on = nnumel(id), xn = nnumel(n->in[wrt]);
    double *o = calloc((size_t)on, sizeof(double));
    void *in[NODE_MAX_IN] = {0};
    for (int i = 0; i < n->nin; i++) in[i] = ins[i];
    double *x = ins[wrt];
    for (int64_t k = 0; k < xn; k++) {
        const double x0 = x[k];
        double lp = 0, lm = 0;
        x[k] = x0 + h;
        cpu_kernels_f64[n->op](&G, n, o, in);
        for (int64_t j = 0; j < on; j++) lp += r[j] * o[j];
        x[k] = x0 - h;
        cpu_kernels_f64[n->op](&G, n, o, in);
        for (int64_t j = 0; j < on; j++) lm += r[j] * o[j];
        x[k] = x0;
        fd[k] = (lp - lm) / (2 * h);
    }
    free(o);
}

/* ---- tables -------------------------------------------------------------- */

static void test_tables(void) {
    int missing = 0;
    for (int op = 0; op < OP_COUNT; op++) missing += !cpu_kernels_f32[op] + !cpu_kernels_f64[op];
    CHECK(missing == 0);
    CHECK(cpu_kernels_f32[OP_MATMUL] != cpu_kernels_f64[OP_MATMUL]);
}

/* ---- matmul -------------------------------------------------------------- */

/* a(i,k) of a matrix stored [M,K] or, transposed, [K,M]. */
static double mat_a(const double *a, int ta, int64_t M, int64_t K, int64_t i, int64_t k) {
    return ta ? a[k * M + i] : a[i * K + k];
}
static double mat_b(const double *b, int tb, int64_t K, int64_t N, int64_t k, int64_t j) {
    return tb ? b[j * K + k] : b[k * N + j];
}

static void test_matmul(void) {
    const int64_t M = 3, K = 5, N = 4, B = 2;
    /* batch configurations: 0 none, 1 both batched, 2 shared b, 3 shared a */
    for (int mode = F64; mode <= F32; mode++)
        for (int cfg = 0; cfg < 4; cfg++)
            for (int ta = 0; ta <= 1; ta++)
                for (int tb = 0; tb <= 1; tb++) {
                    g_reset();
                    const bool abat = cfg == 1 || cfg == 2, bbat = cfg == 1 || cfg == 3;
                    int64_t ash[3], bsh[3], osh[3];
                    int ar = 0, br = 0, orank = 0;
                    if (abat) ash[ar++] = B;
                    ash[ar++] = ta ? K : M;
                    ash[ar++] = ta ? M : K;
                    if (bbat) bsh[br++] = B;
                    bsh[br++] = tb ? N : K;
                    bsh[br++] = tb ? K : N;
                    if (cfg) osh[orank++] = B;
                    osh[orank++] = M;
                    osh[orank++] = N;
                    const int32_t a = src(ar, ash), b = src(br, bsh);
                    const int32_t c = mk(OP_MATMUL, MN_F32, orank, osh, 2, INS(a, b));
                    G.nodes[c].ip[0] = ta;
                    G.nodes[c].ip[1] = tb;
                    double av[2 * 15], bv[2 * 20], cv[2 * 12], ref[2 * 12];
                    fill(av, nnumel(a), -1, 1);
                    fill(bv, nnumel(b), -1, 1);
                    run(mode, c, cv, av, bv);
                    const int64_t nb = cfg ? B : 1;
                    for (int64_t bi = 0; bi < nb; bi++)
                        for (int64_t i = 0; i < M; i++)
                            for (int64_t j = 0; j < N; j++) {
                                double s = 0;
                                for (int64_t k = 0; k < K; k++)
                                    s += mat_a(av + (abat ? bi * M * K : 0), ta, M, K, i, k) *
                                         mat_b(bv + (bbat ? bi * K * N : 0), tb, K, N, k, j);
                                ref[(bi * M + i) * N + j] = s;
                            }
                    char what[96];
                    snprintf(what, sizeof what, "matmul %s cfg %d ta %d tb %d", mode ? "f32" : "f64", cfg, ta, tb);
                    CHECK_ALL(cv, ref, nb * M * N, mode ? 1e-5 : 1e-13, what);
                }
}

/* ---- broadcasting -------------------------------------------------------- */

/* Flat index into x (rank xr, shape xs) of the output element at the padded
 * 4-d index idx, by numpy's right-aligned rules. */
static int64_t bidx(int xr, const int64_t *xs, const int64_t idx[4]) {
    int64_t f = 0;
    for (int i = 0; i < xr; i++) {
        const int64_t d = idx[4 - xr + i];
        f = f * xs[i] + (xs[i] == 1 ? 0 : d);
    }
    return f;
}
static void unravel4(int64_t idx[4], int64_t k, int r, const int64_t *s) {
    for (int d = 0; d < 4; d++) idx[d] = 0;
    for (int i = r - 1; i >= 0; i--) {
        idx[4 - r + i] = k % s[i];
        k /= s[i];
    }
}

typedef struct bcase {
    int ra;
    int64_t a[4];
    int rb;
    int64_t b[4];
    int ro;
    int64_t o[4];
} bcase;

static void test_binary(void) {
    static const bcase cases[] = {
        {3, {2, 3, 4}, 1, {4}, 3, {2, 3, 4}},
        {3, {2, 1, 4}, 2, {3, 1}, 3, {2, 3, 4}},
        {4, {2, 1, 3, 1}, 4, {1, 2, 1, 4}, 4, {2, 2, 3, 4}},
        {1, {3}, 2, {2, 3}, 2, {2, 3}},
        {2, {2, 3}, 0, {0}, 2, {2, 3}},
        {2, {2, 3}, 2, {2, 3}, 2, {2, 3}},
    };
    static const op_id ops[] = {OP_ADD, OP_SUB, OP_MUL, OP_DIV};
    for (int mode = F64; mode <= F32; mode++)
        for (size_t c = 0; c < MN_ARRAY_LEN(cases); c++)
            for (size_t o = 0; o < MN_ARRAY_LEN(ops); o++) {
                const bcase *bc = &cases[c];
                g_reset();
                const int32_t a = src(bc->ra, bc->a), b = src(bc->rb, bc->b);
                const int32_t y = mk(ops[o], MN_F32, bc->ro, bc->o, 2, INS(a, b));
                double av[48], bv[48], yv[48], ref[48];
                fill(av, nnumel(a), -2, 2);
                fill(bv, nnumel(b), 0.5, 2);
                run(mode, y, yv, av, bv);
                for (int64_t k = 0; k < nnumel(y); k++) {
                    int64_t idx[4];
                    unravel4(idx, k, bc->ro, bc->o);
                    const double x1 = av[bidx(bc->ra, bc->a, idx)], x2 = bv[bidx(bc->rb, bc->b, idx)];
                    ref[k] = ops[o] == OP_ADD ? x1 + x2 : ops[o] == OP_SUB ? x1 - x2 : ops[o] == OP_MUL ? x1 * x2 : x1 / x2;
                }
                char what[64];
                snprintf(what, sizeof what, "binary %s case %zu op %zu", mode ? "f32" : "f64", c, o);
                CHECK_ALL(yv, ref, nnumel(y), mode ? 1e-6 : 1e-15, what);
            }

    /* in place: out == a */
    g_reset();
    const int32_t a = src(2, SH(2, 3)), b = src(1, SH(3));
    const int32_t y = mk(OP_MUL, MN_F32, 2, SH(2, 3), 2, INS(a, b));
    double av[6] = {1, 2, 3, 4, 5, 6}, bv[3] = {10, 100, 1000};
    run(F64, y, av, av, bv);
    CHECK(av[0] == 10 && av[2] == 3000 && av[4] == 500);
}

/* BROADCAST and REDUCE_TO against the same index mapping. */
static void test_broadcast_reduce_to(void) {
    static const bcase cases[] = {
        /* a = small shape, o = big shape */
        {2, {3, 1}, 0, {0}, 3, {2, 3, 4}},
        {1, {4}, 0, {0}, 3, {2, 3, 4}},
        {0, {0}, 0, {0}, 2, {2, 3}},
        {3, {2, 1, 4}, 0, {0}, 3, {2, 3, 4}},
        {4, {1, 3, 1, 2}, 0, {0}, 4, {2, 3, 4, 2}},
        {2, {2, 3}, 0, {0}, 2, {2, 3}},
    };
    for (int mode = F64; mode <= F32; mode++)
        for (size_t c = 0; c < MN_ARRAY_LEN(cases); c++) {
            const bcase *bc = &cases[c];
            g_reset();
            const int32_t s = src(bc->ra, bc->a), big = src(bc->ro, bc->o);
            const int32_t up = mk(OP_BROADCAST, MN_F32, bc->ro, bc->o, 1, INS(s));
            const int32_t down = mk(OP_REDUCE_TO, MN_F32, bc->ra, bc->a, 1, INS(big));
            double sv[48], bv[48], uv[48], dv[48], ref[48] = {0};
            fill(sv, nnumel(s), -1, 1);
            fill(bv, nnumel(big), -1, 1);
            run(mode, up, uv, sv);
            run(mode, down, dv, bv);
            double eu = 0;
            for (int64_t k = 0; k < nnumel(big); k++) {
                int64_t idx[4];
                unravel4(idx, k, bc->ro, bc->o);
                const int64_t si = bidx(bc->ra, bc->a, idx);
                eu = fmax(eu, fabs(uv[k] - sv[si]));
                ref[si] += bv[k];
            }
            CHECK_MSG(eu == 0, "broadcast case %zu: diff %g", c, eu);
            char what[64];
            snprintf(what, sizeof what, "reduce_to %s case %zu", mode ? "f32" : "f64", c);
            CHECK_ALL(dv, ref, nnumel(s), mode ? 1e-5 : 1e-14, what);
        }
}

/* ---- reductions ---------------------------------------------------------- */

static void test_reductions(void) {
    const int64_t xs[3] = {2, 3, 4};
    double x[24];
    fill(x, 24, -1, 1);
    x[5] = x[9] = 3; /* a tie along axis 1 (j=1,2; k=1 of i=0) and in the all-axes max */
    for (int mode = F64; mode <= F32; mode++)
        for (int axis = 0; axis <= 3; axis++)
            for (int keep = 0; keep <= 1; keep++) {
                const int ax = axis == 3 ? MN_ALL_AXES : axis;
                int64_t os[3];
                int orank = 0;
                for (int i = 0; i < 3; i++) {
                    if (ax == MN_ALL_AXES || i == ax) {
                        if (keep) os[orank++] = 1;
                    } else {
                        os[orank++] = xs[i];
                    }
                }
                for (int kind = 0; kind < 3; kind++) {
                    const op_id op = kind == 0 ? OP_SUM : kind == 1 ? OP_MEAN : OP_MAX;
                    g_reset();
                    const int32_t xi = src(3, xs);
                    const int32_t y = mk(op, MN_F32, orank, os, 1, INS(xi));
                    G.nodes[y].ip[0] = ax;
                    G.nodes[y].ip[1] = keep;
                    double xv[24], yv[24], ref[24];
                    memcpy(xv, x, sizeof xv);
                    run(mode, y, yv, xv);
                    /* reference: every output cell, over the x cells mapping to it */
                    const int64_t on = nnumel(y);
                    for (int64_t o = 0; o < on; o++) ref[o] = kind == 2 ? -INFINITY : 0;
                    for (int64_t i = 0; i < 2; i++)
                        for (int64_t j = 0; j < 3; j++)
                            for (int64_t k = 0; k < 4; k++) {
                                const int64_t id[3] = {i, j, k};
                                int64_t o = 0;
                                for (int d = 0; d < 3; d++)
                                    if (ax != MN_ALL_AXES && d != ax) o = o * xs[d] + id[d];
                                const double v = x[(i * 3 + j) * 4 + k];
                                if (kind == 2) ref[o] = fmax(ref[o], v);
                                else ref[o] += kind == 1 ? v / (ax == MN_ALL_AXES ? 24 : (double)xs[ax]) : v;
                            }
                    char what[64];
                    snprintf(what, sizeof what, "reduce %d %s axis %d keep %d", kind, mode ? "f32" : "f64", ax, keep);
                    CHECK_ALL(yv, ref, on, mode ? 1e-6 : 1e-14, what);
                }
            }

    /* MAX_BWD: dy goes to the first argmax only. */
    g_reset();
    const int32_t xi = src(2, SH(2, 3));
    const int32_t y1 = mk(OP_MAX, MN_F32, 1, SH(2), 1, INS(xi));
    const int32_t dy1 = src(1, SH(2));
    const int32_t mb1 = mk(OP_MAX_BWD, MN_F32, 2, SH(2, 3), 3, INS(xi, y1, dy1));
    G.nodes[y1].ip[0] = G.nodes[mb1].ip[0] = 1;
    const int32_t ya = mk(OP_MAX, MN_F32, 0, NULL, 1, INS(xi));
    const int32_t dya = src(0, NULL);
    const int32_t mba = mk(OP_MAX_BWD, MN_F32, 2, SH(2, 3), 3, INS(xi, ya, dya));
    G.nodes[ya].ip[0] = G.nodes[mba].ip[0] = MN_ALL_AXES;
    const int32_t y0 = mk(OP_MAX, MN_F32, 2, SH(1, 3), 1, INS(xi));
    const int32_t dy0 = src(2, SH(1, 3));
    const int32_t mb0 = mk(OP_MAX_BWD, MN_F32, 2, SH(2, 3), 3, INS(xi, y0, dy0));
    G.nodes[y0].ip[0] = G.nodes[mb0].ip[0] = 0;
    G.nodes[y0].ip[1] = G.nodes[mb0].ip[1] = 1;
    for (int mode = F64; mode <= F32; mode++) {
        double xv[6] = {1, 5, 5, 7, 2, 7}, yv[3], dv[3] = {10, 20, 30}, dx[6];
        run(mode, y1, yv, xv);
        run(mode, mb1, dx, xv, yv, dv);
        const double e1[6] = {0, 10, 0, 20, 0, 0};
        CHECK_ALL(dx, e1, 6, 0, "max_bwd axis 1 first argmax");
        run(mode, ya, yv, xv);
        run(mode, mba, dx, xv, yv, dv);
        const double ea[6] = {0, 0, 0, 10, 0, 0};
        CHECK_ALL(dx, ea, 6, 0, "max_bwd all axes first argmax");
        double x0[6] = {4, 1, 9, 4, 3, 9};
        run(mode, y0, yv, x0);
        run(mode, mb0, dx, x0, yv, dv);
        const double e0[6] = {10, 0, 30, 0, 20, 0};
        CHECK_ALL(dx, e0, 6, 0, "max_bwd axis 0 keepdim first argmax");
    }
}

/* ---- softmax family ------------------------------------------------------ */

static void test_softmax(void) {
    g_reset();
    const int32_t x = src(2, SH(2, 4));
    const int32_t sm = mk(OP_SOFTMAX, MN_F32, 2, SH(2, 4), 1, INS(x));
    const int32_t ls = mk(OP_LOG_SOFTMAX, MN_F32, 2, SH(2, 4), 1, INS(x));
    const double Z = 2 + exp(-1.0);
    for (int mode = F64; mode <= F32; mode++) {
        double xv[8] = {1000, 1000, 999, -1000, -1000, -1000, -1000, -1000}, y[8], l[8];
        run(mode, sm, y, xv);
        run(mode, ls, l, xv);
        const double ey[8] = {1 / Z, 1 / Z, exp(-1.0) / Z, 0, .25, .25, .25, .25};
        const double el[8] = {-log(Z), -log(Z), -1 - log(Z), -2000 - log(Z), -log(4), -log(4), -log(4), -log(4)};
        CHECK_ALL(y, ey, 8, mode ? 1e-7 : 1e-15, "softmax of +-1000");
        CHECK_ALL(l, el, 8, mode ? 1e-4 : 1e-12, "log_softmax of +-1000");
        /* in place */
        run(mode, sm, xv, xv);
        CHECK_ALL(xv, ey, 8, mode ? 1e-7 : 1e-15, "softmax in place");
    }

    /* backward kernels vs finite differences (f64) */
    const int32_t y = src(2, SH(2, 4)), dy = src(2, SH(2, 4));
    const int32_t smb = mk(OP_SOFTMAX_BWD, MN_F32, 2, SH(2, 4), 2, INS(y, dy));
    const int32_t lsb = mk(OP_LOG_SOFTMAX_BWD, MN_F32, 2, SH(2, 4), 2, INS(y, dy));
    double xv[8], yv[8], r[8], dx[8], fd[8];
    fill(xv, 8, -3, 3);
    fill(r, 8, -1, 1);
    double *ins[1] = {xv};
    run(F64, sm, yv, xv);
    run(F64, smb, dx, yv, r);
    fd_grad(fd, sm, ins, 0, r, 1e-6);
    CHECK_ALL(dx, fd, 8, 1e-8, "softmax_bwd vs fd");
    run(F64, ls, yv, xv);
    run(F64, lsb, dx, yv, r);
    fd_grad(fd, ls, ins, 0, r, 1e-6);
    CHECK_ALL(dx, fd, 8, 1e-8, "log_softmax_bwd vs fd");
    double rc[8]; /* in place into dy */
    memcpy(rc, r, sizeof r);
    run(F64, lsb, rc, yv, rc);
    CHECK_ALL(rc, dx, 8, 0, "log_softmax_bwd in place");
    run(F64, sm, yv, xv);
    run(F64, smb, dx, yv, r);
    memcpy(rc, r, sizeof r);
    run(F64, smb, rc, yv, rc);
    CHECK_ALL(rc, dx, 8, 0, "softmax_bwd in place");
}

/* ---- losses -------------------------------------------------------------- */

/* cross_entropy of logits x [4,5] and labels lab: ce_rows (node rows) then
 * the mean (node ce); rv receives the row statistics [4,3]. */
static double ce_loss(int mode, int32_t rows, int32_t ce, double *rv, double *x, int32_t *lab) {
    double loss;
    run(mode, rows, rv, x, (double *)lab);
    run(mode, ce, &loss, x, (double *)lab, rv);
    return loss;
}

/* d(r * loss)/dx by central differences of ce_loss (f64). */
static void ce_fd(double *fd, int32_t rows, int32_t ce, double *x, int n, int32_t *lab, double r, double h) {
    double rv[12];
    for (int k = 0; k < n; k++) {
        const double x0 = x[k];
        x[k] = x0 + h;
        const double lp = ce_loss(F64, rows, ce, rv, x, lab);
        x[k] = x0 - h;
        const double lm = ce_loss(F64, rows, ce, rv, x, lab);
        x[k] = x0;
        fd[k] = r * (lp - lm) / (2 * h);
    }
}

static void test_cross_entropy(void) {
    g_reset();
    const int64_t B = 4, C = 5;
    const int32_t x = src(2, SH(B, C)), lab = src_i32(1, SH(B)), dl = src(0, NULL), t = src(2, SH(B, C));
    const int32_t rows = mk(OP_CE_ROWS, MN_F32, 2, SH(B, 3), 2, INS(x, lab));
    const int32_t ce = mk(OP_CROSS_ENTROPY, MN_F32, 0, NULL, 3, INS(x, lab, rows));
    const int32_t ceb = mk(OP_CROSS_ENTROPY_BWD, MN_F32, 2, SH(B, C), 4, INS(x, lab, dl, rows));
    const int32_t cd = mk(OP_CROSS_ENTROPY_DENSE, MN_F32, 0, NULL, 2, INS(x, t));
    const int32_t cdx = mk(OP_CROSS_ENTROPY_DENSE_BWD, MN_F32, 2, SH(B, C), 3, INS(x, t, dl));
    const int32_t cdt = mk(OP_CROSS_ENTROPY_DENSE_BWD, MN_F32, 2, SH(B, C), 3, INS(x, t, dl));
    G.nodes[cdt].ip[0] = 1;
    const int32_t mse = mk(OP_MSE, MN_F32, 0, NULL, 2, INS(x, t));

    double xv[20], tv[20], rv[12], loss, ref, dx[20], fd[20], one = 1;
    fill(xv, 20, -3, 3);
    fill(tv, 20, 0, 1);
    for (int mode = F64; mode <= F32; mode++) {
        int32_t lv[4] = {2, 0, 4, 1};
        loss = ce_loss(mode, rows, ce, rv, xv, lv);
        ref = 0;
        for (int b = 0; b < B; b++) {
            double s = 0, m = -INFINITY;
            for (int c = 0; c < C; c++) m = fmax(m, xv[b * C + c]);
            for (int c = 0; c < C; c++) s += exp(xv[b * C + c]);
            ref += log(s) - xv[b * C + lv[b]];
            CHECK_NEAR(rv[b * 3], m, mode ? 1e-6 : 0);
            CHECK_NEAR(rv[b * 3 + 1], s * exp(-m), mode ? 1e-5 : 1e-13);
            CHECK_NEAR(rv[b * 3 + 2], log(s) - xv[b * C + lv[b]], mode ? 1e-5 : 1e-13);
        }
        CHECK_NEAR(loss, ref / B, mode ? 1e-6 : 1e-14);
        /* out-of-range labels: contribute 0, still counted in B */
        int32_t bad[4] = {2, -1, 5, 1};
        loss = ce_loss(mode, rows, ce, rv, xv, bad);
        ref = 0;
        for (int b = 0; b < B; b += 3) {
            double s = 0;
            for (int c = 0; c < C; c++) s += exp(xv[b * C + c]);
            ref += log(s) - xv[b * C + bad[b]];
        }
        CHECK_NEAR(loss, ref / B, mode ? 1e-6 : 1e-14);
        double dls = 2.5;
        run(mode, ceb, dx, xv, (double *)bad, &dls, rv);
        double z = 0;
        for (int c = 0; c < 2 * C; c++) z += fabs(dx[C + c]);
        CHECK(z == 0);
        /* huge logits stay finite */
        double big[20];
        for (int i = 0; i < 20; i++) big[i] = i % 2 ? 1000 : -1000;
        loss = ce_loss(mode, rows, ce, rv, big, lv);
        CHECK(isfinite(loss));
        run(mode, ceb, dx, big, (double *)lv, &one, rv);
        bool fin = true;
        for (int i = 0; i < 20; i++) fin = fin && isfinite(dx[i]);
        CHECK(fin);
    }

    /* gradients vs finite differences (f64), with dloss = 2.5 */
    int32_t lv[4] = {2, 0, 4, 1}, bad[4] = {2, -1, 5, 1};
    double dls = 2.5, r = 2.5;
    ce_loss(F64, rows, ce, rv, xv, lv);
    run(F64, ceb, dx, xv, (double *)lv, &dls, rv);
    ce_fd(fd, rows, ce, xv, 20, lv, dls, 1e-6);
    CHECK_ALL(dx, fd, 20, 1e-8, "cross_entropy_bwd vs fd");
    ce_loss(F64, rows, ce, rv, xv, bad);
    run(F64, ceb, dx, xv, (double *)bad, &dls, rv);
    ce_fd(fd, rows, ce, xv, 20, bad, dls, 1e-6);
    CHECK_ALL(dx, fd, 20, 1e-8, "cross_entropy_bwd (bad labels) vs fd");

    double *dins[2] = {xv, tv};
    run(F64, cd, &loss, xv, tv);
    ref = 0;
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int c = 0; c < C; c++) s += exp(xv[b * C + c]);
        for (int c = 0; c < C; c++) ref -= tv[b * C + c] * (xv[b * C + c] - log(s));
    }
    CHECK_NEAR(loss, ref / B, 1e-13);
    run(F64, cdx, dx, xv, tv, &dls);
    fd_grad(fd, cd, dins, 0, &r, 1e-6);
    CHECK_ALL(dx, fd, 20, 1e-8, "cross_entropy_dense_bwd dlogits vs fd");
    run(F64, cdt, dx, xv, tv, &dls);
    fd_grad(fd, cd, dins, 1, &r, 1e-6);
    CHECK_ALL(dx, fd, 20, 1e-8, "cross_entropy_dense_bwd dtargets vs fd");

    for (int mode = F64; mode <= F32; mode++) {
        run(mode, mse, &loss, xv, tv);
        ref = 0;
        for (int i = 0; i < 20; i++) ref += (xv[i] - tv[i]) * (xv[i] - tv[i]);
        CHECK_NEAR(loss, ref / 20, mode ? 1e-5 : 1e-14);
    }
}

/* ---- unary ops and UNARY_BWD --------------------------------------------- */

static double ref_unary(op_id op, double v) {
    const double sg = 1 / (1 + exp(-v));
    switch (op) {
    case OP_EXP: return exp(v);
    case OP_LOG: return log(v);
    case OP_SQRT: return sqrt(v);
    case OP_RSQRT: return 1 / sqrt(v);
    case OP_RELU: return v > 0 ? v : 0;
    case OP_SIGMOID: return sg;
    case OP_TANH: return tanh(v);
    case OP_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case OP_GELU_TANH: return 0.5 * v * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
    case OP_SILU: return v * sg;
    case OP_SIN: return sin(v);
    case OP_COS: return cos(v);
    case OP_NEG: return -v;
    case OP_SCALE: return -1.5 * v;
    default: return v; /* STOP_GRAD */
    }
}

static void test_unary(void) {
    static const op_id ops[] = {OP_EXP, OP_LOG, OP_SQRT, OP_RSQRT, OP_RELU, OP_SIGMOID, OP_TANH,
                                OP_GELU, OP_GELU_TANH, OP_SILU, OP_NEG, OP_SCALE, OP_STOP_GRAD, OP_SIN, OP_COS};
    const int64_t cnt = 8;
    for (size_t o = 0; o < MN_ARRAY_LEN(ops); o++) {
        const op_id op = ops[o];
        const bool pos = op == OP_LOG || op == OP_SQRT || op == OP_RSQRT;
        g_reset();
        const int32_t x = src(1, SH(cnt));
        const int32_t y = mk(op, MN_F32, 1, SH(cnt), 1, INS(x));
        G.nodes[y].fp[0] = -1.5;
        double xv[8], yv[8], ref[8];
        fill(xv, cnt, pos ? 0.2 : -3, 3);
        if (!pos) xv[0] = 0.75, xv[1] = -0.5; /* keep relu away from its kink */
        for (int mode = F64; mode <= F32; mode++) {
            run(mode, y, yv, xv);
            for (int64_t i = 0; i < cnt; i++) ref[i] = ref_unary(op, xv[i]);
            char what[64];
            snprintf(what, sizeof what, "unary op %d %s", (int)op, mode ? "f32" : "f64");
            CHECK_ALL(yv, ref, cnt, mode ? 3e-6 : 1e-14, what);
        }
        if (op == OP_NEG || op == OP_SCALE || op == OP_STOP_GRAD) continue;
        const int32_t yn = src(1, SH(cnt)), dy = src(1, SH(cnt));
        const int32_t ub = mk(OP_UNARY_BWD, MN_F32, 1, SH(cnt), 3, INS(x, yn, dy));
        G.nodes[ub].ip[0] = op;
        double r[8], dx[8], fd[8];
        fill(r, cnt, -1, 1);
        run(F64, y, yv, xv);
        run(F64, ub, dx, xv, yv, r);
        double *ins[1] = {xv};
        fd_grad(fd, y, ins, 0, r, 1e-6);
        char what[64];
        snprintf(what, sizeof what, "unary_bwd op %d vs fd", (int)op);
        CHECK_ALL(dx, fd, cnt, 1e-8, what);
        /* in place into dy, f32 */
        double rc[8];
        memcpy(rc, r, sizeof r);
        run(F32, ub, rc, xv, yv, rc);
        CHECK_ALL(rc, dx, cnt, 1e-5, what);
    }

    /* sigmoid and silu stay finite and exact-ish for huge |x| */
    g_reset();
    const int32_t x = src(1, SH(4));
    const int32_t sg = mk(OP_SIGMOID, MN_F32, 1, SH(4), 1, INS(x));
    const int32_t si = mk(OP_SILU, MN_F32, 1, SH(4), 1, INS(x));
    for (int mode = F64; mode <= F32; mode++) {
        double xv[4] = {-1000, -90, 90, 1000}, yv[4], sv[4];
        run(mode, sg, yv, xv);
        run(mode, si, sv, xv);
        CHECK(yv[0] == 0 && yv[3] == 1 && yv[2] == 1 && yv[1] >= 0 && yv[1] < 1e-38);
        CHECK(sv[0] == 0 && !isnan(sv[0]) && sv[3] == 1000);
    }
}

/* ---- convolution --------------------------------------------------------- */

typedef struct ccase {
    int64_t N, C, H, W, O, KH, KW;
    int sh, sw, ph, pw, dh, dw, groups;
} ccase;

static void test_conv(void) {
    static const ccase cases[] = {
        {2, 4, 7, 6, 6, 3, 3, 2, 2, 1, 1, 2, 2, 2},  /* the brief's case */
        {1, 3, 5, 6, 2, 2, 3, 1, 2, 0, 2, 1, 1, 1},  /* non-square, asymmetric */
        {2, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4},  /* depthwise */
    };
    for (size_t ci = 0; ci < MN_ARRAY_LEN(cases); ci++) {
        const ccase *c = &cases[ci];
        const int64_t Cg = c->C / c->groups, Og = c->O / c->groups;
        const int64_t OH = (c->H + 2 * c->ph - c->dh * (c->KH - 1) - 1) / c->sh + 1;
        const int64_t OW = (c->W + 2 * c->pw - c->dw * (c->KW - 1) - 1) / c->sw + 1;
        g_reset();
        const int32_t x = src(4, SH(c->N, c->C, c->H, c->W));
        const int32_t w = src(4, SH(c->O, Cg, c->KH, c->KW));
        const int32_t bias = src(1, SH(c->O));
        const int32_t dy = src(4, SH(c->N, c->O, OH, OW));
        const int32_t y = mk(OP_CONV2D, MN_F32, 4, SH(c->N, c->O, OH, OW), 3, INS(x, w, bias));
        const int32_t y2 = mk(OP_CONV2D, MN_F32, 4, SH(c->N, c->O, OH, OW), 2, INS(x, w));
        const int32_t bx = mk(OP_CONV2D_BWD_INPUT, MN_F32, 4, SH(c->N, c->C, c->H, c->W), 2, INS(dy, w));
        const int32_t bw = mk(OP_CONV2D_BWD_WEIGHT, MN_F32, 4, SH(c->O, Cg, c->KH, c->KW), 2, INS(x, dy));
        const int32_t ids[4] = {y, y2, bx, bw};
        for (int k = 0; k < 4; k++) {
            int64_t *ip = G.nodes[ids[k]].ip;
            ip[0] = c->sh, ip[1] = c->sw, ip[2] = c->ph, ip[3] = c->pw, ip[4] = c->dh, ip[5] = c->dw,
            ip[6] = c->groups;
        }
        const int64_t xn = nnumel(x), wn = nnumel(w), yn = nnumel(y);
        double *xv = malloc(xn * sizeof(double)), *wv = malloc(wn * sizeof(double));
        double *yv = malloc(yn * sizeof(double)), *ref = malloc(yn * sizeof(double));
        double *r = malloc(yn * sizeof(double)), *bv = malloc(c->O * sizeof(double));
        double *dx = malloc(xn * sizeof(double)), *fdx = malloc(xn * sizeof(double));
        double *dw = malloc(wn * sizeof(double)), *fdw = malloc(wn * sizeof(double));
        fill(xv, xn, -1, 1);
        fill(wv, wn, -1, 1);
        fill(bv, c->O, -1, 1);
        fill(r, yn, -1, 1);
        /* direct formula */
        for (int64_t n = 0; n < c->N; n++)
            for (int64_t o = 0; o < c->O; o++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double s = bv[o];
                        for (int64_t cc = 0; cc < Cg; cc++)
                            for (int64_t kh = 0; kh < c->KH; kh++)
                                for (int64_t kw = 0; kw < c->KW; kw++) {
                                    const int64_t ih = oh * c->sh - c->ph + kh * c->dh;
                                    const int64_t iw = ow * c->sw - c->pw + kw * c->dw;
                                    if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                    const int64_t cin = (o / Og) * Cg + cc;
                                    s += xv[((n * c->C + cin) * c->H + ih) * c->W + iw] *
                                         wv[((o * Cg + cc) * c->KH + kh) * c->KW + kw];
                                }
                        ref[((n * c->O + o) * OH + oh) * OW + ow] = s;
                    }
        char what[64];
        for (int mode = F64; mode <= F32; mode++) { /* (F32 rounds the inputs) */
            run(mode, y, yv, xv, wv, bv);
            snprintf(what, sizeof what, "conv2d case %zu %s", ci, mode ? "f32" : "f64");
            CHECK_ALL(yv, ref, yn, mode ? 1e-5 : 1e-13, what);
            if (mode == F64) {
                double *y0 = malloc(yn * sizeof(double));
                run(F64, y2, y0, xv, wv);
                for (int64_t i = 0; i < yn; i++) y0[i] += bv[(i / (OH * OW)) % c->O];
                snprintf(what, sizeof what, "conv2d no bias case %zu", ci);
                CHECK_ALL(y0, ref, yn, 1e-13, what);
                free(y0);
            }
        }

        double *ins[2] = {xv, wv};
        run(F64, bx, dx, r, wv);
        fd_grad(fdx, y2, ins, 0, r, 1e-5);
        snprintf(what, sizeof what, "conv2d_bwd_input case %zu vs fd", ci);
        CHECK_ALL(dx, fdx, xn, 1e-8, what);
        run(F64, bw, dw, xv, r);
        fd_grad(fdw, y2, ins, 1, r, 1e-5);
        snprintf(what, sizeof what, "conv2d_bwd_weight case %zu vs fd", ci);
        CHECK_ALL(dw, fdw, wn, 1e-8, what);
        /* f32 backward against f64 */
        double *dx32 = malloc(xn * sizeof(double)), *dw32 = malloc(wn * sizeof(double));
        run(F32, bx, dx32, r, wv);
        run(F32, bw, dw32, xv, r);
        CHECK_ALL(dx32, dx, xn, 1e-5, "conv2d_bwd_input f32");
        CHECK_ALL(dw32, dw, wn, 1e-4, "conv2d_bwd_weight f32");
        free(dx32), free(dw32);
        free(xv), free(wv), free(yv), free(ref), free(r), free(bv), free(dx), free(fdx), free(dw), free(fdw);
    }
}

/* ---- max pooling --------------------------------------------------------- */

typedef struct pcase {
    int64_t H, W;
    int kh, kw, sh, sw, ph, pw;
} pcase;

static void test_maxpool(void) {
    static const pcase cases[] = {
        {5, 5, 2, 2, 1, 1, 0, 0}, /* overlapping windows */
        {5, 6, 3, 3, 2, 2, 1, 1}, /* padding */
        {4, 4, 2, 2, 0, 0, 0, 0}, /* stride 0 = kernel */
        {5, 4, 3, 2, 2, 1, 1, 1},
    };
    for (size_t pc = 0; pc < MN_ARRAY_LEN(cases); pc++)
        for (int data = 0; data < 3; data++) { /* random, all-equal ties, negative constants */
            const pcase *p = &cases[pc];
            const int sh = p->sh ? p->sh : p->kh, sw = p->sw ? p->sw : p->kw;
            const int64_t OH = (p->H + 2 * p->ph - p->kh) / sh + 1, OW = (p->W + 2 * p->pw - p->kw) / sw + 1;
            g_reset();
            const int32_t x = src(4, SH(1, 2, p->H, p->W)), dy = src(4, SH(1, 2, OH, OW));
            const int32_t y = mk(OP_MAXPOOL2D, MN_F32, 4, SH(1, 2, OH, OW), 1, INS(x));
            const int32_t b = mk(OP_MAXPOOL2D_BWD, MN_F32, 4, SH(1, 2, p->H, p->W), 2, INS(x, dy));
            for (int k = 0; k < 2; k++) {
                int64_t *ip = G.nodes[k ? b : y].ip;
                ip[0] = p->kh, ip[1] = p->kw, ip[2] = p->sh, ip[3] = p->sw, ip[4] = p->ph, ip[5] = p->pw;
            }
            const int64_t xn = nnumel(x), yn = nnumel(y);
            double xv[64], yv[64], ey[64], r[64], dx[64], edx[64] = {0}, fd[64];
            if (data == 0) fill(xv, xn, -1, 1);
            for (int64_t i = 0; i < xn && data; i++) xv[i] = data == 1 ? (i % 3 == 0 ? 1 : 0.5) : -5;
            if (data == 1) xv[0] = xv[3] = xv[6] = 2; /* more ties */
            fill(r, yn, 1, 2);
            for (int64_t pl = 0; pl < 2; pl++)
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        double best = -INFINITY;
                        int64_t arg = -1;
                        for (int i = 0; i < p->kh; i++)
                            for (int j = 0; j < p->kw; j++) {
                                const int64_t ih = oh * sh - p->ph + i, iw = ow * sw - p->pw + j;
                                if (ih < 0 || ih >= p->H || iw < 0 || iw >= p->W) continue;
                                const int64_t at = (pl * p->H + ih) * p->W + iw;
                                if (arg < 0 || xv[at] > best) best = xv[at], arg = at;
                            }
                        const int64_t o = (pl * OH + oh) * OW + ow;
                        ey[o] = best;
                        edx[arg] += r[o];
                    }
            char what[64];
            for (int mode = F64; mode <= F32; mode++) {
                run(mode, y, yv, xv);
                run(mode, b, dx, xv, r);
                snprintf(what, sizeof what, "maxpool case %zu data %d %s", pc, data, mode ? "f32" : "f64");
                CHECK_ALL(yv, ey, yn, mode ? 1e-7 : 0, what);
                CHECK_ALL(dx, edx, xn, mode ? 1e-6 : 1e-15, what);
            }
            if (data == 0) { /* distinct values: the gradient is the fd gradient */
                double *ins[1] = {xv};
                run(F64, b, dx, xv, r);
                fd_grad(fd, y, ins, 0, r, 1e-4);
                snprintf(what, sizeof what, "maxpool_bwd case %zu vs fd", pc);
                CHECK_ALL(dx, fd, xn, 1e-7, what);
            }
        }
}

/* ---- layout -------------------------------------------------------------- */

static void test_layout(void) {
    /* permute [2,3,4] by (2,0,1) -> [4,2,3], f32/f64 and i32 */
    g_reset();
    const int32_t x = src(3, SH(2, 3, 4)), xi = src_i32(3, SH(2, 3, 4));
    const int32_t p = mk(OP_PERMUTE, MN_F32, 3, SH(4, 2, 3), 1, INS(x));
    const int32_t pi = mk(OP_PERMUTE, MN_I32, 3, SH(4, 2, 3), 1, INS(xi));
    G.nodes[p].ip[0] = G.nodes[pi].ip[0] = 2;
    G.nodes[p].ip[1] = G.nodes[pi].ip[1] = 0;
    G.nodes[p].ip[2] = G.nodes[pi].ip[2] = 1;
    double xv[24], yv[24], ref[24];
    int32_t iv[24], io[24];
    for (int i = 0; i < 24; i++) xv[i] = i, iv[i] = 100 + i;
    for (int64_t a = 0; a < 4; a++)
        for (int64_t b = 0; b < 2; b++)
            for (int64_t c = 0; c < 3; c++) ref[(a * 2 + b) * 3 + c] = xv[(b * 3 + c) * 4 + a];
    for (int mode = F64; mode <= F32; mode++) {
        run(mode, p, yv, xv);
        CHECK_ALL(yv, ref, 24, 0, "permute 3d");
        run(mode, pi, (double *)io, (double *)iv);
        bool ok = true;
        for (int i = 0; i < 24; i++) ok = ok && io[i] == 100 + (int32_t)ref[i];
        CHECK_MSG(ok, "permute i32 %s", mode ? "f32" : "f64");
    }

    /* rank-4 permute (1,3,0,2) of [2,3,2,2] -> [3,2,2,2] */
    g_reset();
    const int32_t x4 = src(4, SH(2, 3, 2, 2));
    const int32_t p4 = mk(OP_PERMUTE, MN_F32, 4, SH(3, 2, 2, 2), 1, INS(x4));
    const int perm[4] = {1, 3, 0, 2};
    for (int i = 0; i < 4; i++) G.nodes[p4].ip[i] = perm[i];
    double x4v[24];
    for (int i = 0; i < 24; i++) x4v[i] = i;
    run(F64, p4, yv, x4v);
    const int64_t xs[4] = {2, 3, 2, 2}, os[4] = {3, 2, 2, 2};
    double e = 0;
    for (int64_t k = 0; k < 24; k++) {
        int64_t o[4], xi4[4] = {0};
        unravel4(o, k, 4, os);
        for (int i = 0; i < 4; i++) xi4[perm[i]] = o[i];
        e = fmax(e, fabs(yv[k] - x4v[((xi4[0] * xs[1] + xi4[1]) * xs[2] + xi4[2]) * xs[3] + xi4[3]]));
    }
    CHECK(e == 0);

    /* reshape copies when not aliased, is a no-op when aliased; stop_grad copies */
    g_reset();
    const int32_t a = src(2, SH(2, 3));
    const int32_t rs = mk(OP_RESHAPE, MN_F32, 1, SH(6), 1, INS(a));
    const int32_t sg = mk(OP_STOP_GRAD, MN_F32, 2, SH(2, 3), 1, INS(a));
    double av[6] = {1, 2, 3, 4, 5, 6}, ov[6] = {0};
    run(F64, rs, ov, av);
    CHECK_ALL(ov, av, 6, 0, "reshape copy");
    run(F64, rs, av, av);
    CHECK(av[5] == 6);
    memset(ov, 0, sizeof ov);
    run(F32, sg, ov, av);
    CHECK_ALL(ov, av, 6, 0, "stop_grad copy");
}

/* ---- optimizer ----------------------------------------------------------- */

static void test_optim(void) {
    enum { P = 5, STEPS = 3 };
    const double lr = 0.1, lr_mult = 2, wd = 0.01, clipv = 0.5;
    double grads[STEPS][P];
    fill(&grads[0][0], STEPS * P, -1, 1);
    double p_init[P];
    fill(p_init, P, -1, 1);

    /* SGD: momentum 0 / 0.9, nesterov, with and without clip */
    for (int mode = F64; mode <= F32; mode++)
        for (int variant = 0; variant < 4; variant++) {
            const double mom = variant == 0 ? 0 : 0.9;
            const bool nesterov = variant == 2, clip = variant == 3;
            g_reset();
            const int32_t pr = mk(OP_PARAM, MN_F32, 1, SH(P), 0, NULL);
            const int32_t gr = src(1, SH(P)), buf = mk(OP_STATE, MN_F32, 1, SH(P), 0, NULL);
            const int32_t hy = src(1, SH(4)), cl = src(0, NULL);
            const int32_t up = mk(OP_SGD_UPDATE, MN_F32, 1, SH(P), clip ? 5 : 4, INS(pr, gr, buf, hy, cl));
            G.nodes[up].fp[0] = lr_mult, G.nodes[up].fp[1] = mom, G.nodes[up].fp[4] = wd;
            G.nodes[up].ip[0] = nesterov;
            double pv[P], bv[P] = {0}, hv[4] = {lr, 0, 0, 0}, cv = clipv;
            double ep[P], eb[P] = {0};
            memcpy(pv, p_init, sizeof pv);
            memcpy(ep, p_init, sizeof ep);
            for (int t = 0; t < STEPS; t++) {
                double gv[P];
                memcpy(gv, grads[t], sizeof gv);
                if (clip) run(mode, up, pv, pv, gv, bv, hv, &cv);
                else run(mode, up, pv, pv, gv, bv, hv);
                /* torch.optim.SGD: buf is g on the first step */
                for (int i = 0; i < P; i++) {
                    double d = (clip ? clipv : 1) * grads[t][i] + wd * ep[i];
                    if (mom != 0) {
                        eb[i] = t == 0 ? d : mom * eb[i] + d;
                        d = nesterov ? d + mom * eb[i] : eb[i];
                    }
                    ep[i] -= lr * lr_mult * d;
                }
            }
            char what[64];
            snprintf(what, sizeof what, "sgd variant %d %s", variant, mode ? "f32" : "f64");
            CHECK_ALL(pv, ep, P, mode ? 1e-5 : 1e-14, what);
            if (mom != 0) CHECK_ALL(bv, eb, P, mode ? 1e-5 : 1e-14, what);
        }

    /* Adam (L2), AdamW (decoupled), Adam with clip */
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (int mode = F64; mode <= F32; mode++)
        for (int variant = 0; variant < 3; variant++) {
            const bool decoupled = variant == 1, clip = variant == 2;
            g_reset();
            const int32_t pr = mk(OP_PARAM, MN_F32, 1, SH(P), 0, NULL);
            const int32_t gr = src(1, SH(P));
            const int32_t m = mk(OP_STATE, MN_F32, 1, SH(P), 0, NULL), v = mk(OP_STATE, MN_F32, 1, SH(P), 0, NULL);
            const int32_t hy = src(1, SH(4)), cl = src(0, NULL);
            const int32_t up = mk(OP_ADAM_UPDATE, MN_F32, 1, SH(P), clip ? 6 : 5, INS(pr, gr, m, v, hy, cl));
            double *fp = G.nodes[up].fp;
            fp[0] = lr_mult, fp[1] = b1, fp[2] = b2, fp[3] = eps, fp[4] = wd;
            G.nodes[up].ip[0] = decoupled;
            double pv[P], mv[P] = {0}, vv[P] = {0}, cv = clipv, ep[P], em[P] = {0}, ev[P] = {0};
            memcpy(pv, p_init, sizeof pv);
            memcpy(ep, p_init, sizeof ep);
            for (int t = 1; t <= STEPS; t++) {
                double hv[4] = {lr, 1 - pow(b1, t), 1 - pow(b2, t), 0}, gv[P];
                memcpy(gv, grads[t - 1], sizeof gv);
                if (clip) run(mode, up, pv, pv, gv, mv, vv, hv, &cv);
                else run(mode, up, pv, pv, gv, mv, vv, hv);
                /* torch's formulation: step_size = lr / bc1, denom = sqrt(v)/sqrt(bc2) + eps */
                const double a = lr * lr_mult;
                for (int i = 0; i < P; i++) {
                    double g = (clip ? clipv : 1) * grads[t - 1][i];
                    if (decoupled) ep[i] *= 1 - a * wd;
                    else g += wd * ep[i];
                    const double p_before = ep[i];
                    em[i] = b1 * em[i] + (1 - b1) * g;
                    ev[i] = b2 * ev[i] + (1 - b2) * g * g;
                    ep[i] -= a / (1 - pow(b1, t)) * em[i] / (sqrt(ev[i]) / sqrt(1 - pow(b2, t)) + eps);
                    /* step 1 closed form: p - a * g / (|g| + eps) */
                    if (t == 1) CHECK_NEAR(ep[i], p_before - a * g / (fabs(g) + eps), 1e-12);
                }
            }
            char what[64];
            snprintf(what, sizeof what, "adam variant %d %s", variant, mode ? "f32" : "f64");
            CHECK_ALL(pv, ep, P, mode ? 1e-5 : 1e-12, what);
            CHECK_ALL(mv, em, P, mode ? 1e-6 : 1e-14, what);
            CHECK_ALL(vv, ev, P, mode ? 1e-6 : 1e-14, what);
        }

    /* SUMSQ and CLIP_COEF */
    g_reset();
    const int32_t x = src(1, SH(3)), s = src(0, NULL);
    const int32_t ss = mk(OP_SUMSQ, MN_F32, 0, NULL, 1, INS(x));
    const int32_t cc = mk(OP_CLIP_COEF, MN_F32, 0, NULL, 1, INS(s));
    G.nodes[cc].fp[0] = 1;
    for (int mode = F64; mode <= F32; mode++) {
        double xv[3] = {1, 2, 3}, r, sv = 14;
        run(mode, ss, &r, xv);
        CHECK(r == 14);
        run(mode, cc, &r, &sv);
        CHECK_NEAR(r, 1 / (sqrt(14.0) + 1e-6), mode ? 1e-7 : 1e-15);
        sv = 0.25;
        run(mode, cc, &r, &sv);
        CHECK(r == 1);
    }
    /* SUMSQ per block of 4 elements: [2,3] -> [2], the last block short */
    g_reset();
    const int32_t x2 = src(2, SH(2, 3));
    const int32_t sr = mk(OP_SUMSQ, MN_F32, 1, SH(2), 1, INS(x2));
    sumsq_block_set(&G.nodes[sr], 4);
    for (int mode = F64; mode <= F32; mode++) {
        double xv[6] = {1, 2, 3, -1, 0, 4}, r[2];
        run(mode, sr, r, xv);
        CHECK(r[0] == 15 && r[1] == 16);
    }
}

/* ---- the backend: create / write / read / execute with a hand plan -------- */

static void test_backend(void) {
    for (int f64 = 0; f64 <= 1; f64++) {
        const size_t rs = f64 ? 8 : 4;
        g_reset();
        const int32_t x = mk(OP_INPUT, MN_F32, 2, SH(2, 3), 0, NULL);
        G.nodes[x].name = "x";
        const int32_t w = mk(OP_PARAM, MN_F32, 2, SH(3, 4), 0, NULL);
        G.nodes[w].name = "w";
        const int32_t c = mk(OP_CONST, MN_F32, 1, SH(4), 0, NULL);
        float cdata[4] = {0.5f, -1, 2, 0.25f};
        G.nodes[c].data = cdata;
        const int32_t mm = mk(OP_MATMUL, MN_F32, 2, SH(2, 4), 2, INS(x, w));
        const int32_t y = mk(OP_ADD, MN_F32, 2, SH(2, 4), 2, INS(mm, c));
        const int32_t z = mk(OP_RESHAPE, MN_F32, 1, SH(8), 1, INS(y));
        const int32_t l = mk(OP_SUM, MN_F32, 0, NULL, 1, INS(z));
        G.nodes[l].ip[0] = MN_ALL_AXES;
        const int32_t dead = mk(OP_NEG, MN_F32, 1, SH(8), 1, INS(z));

        mp_slot slots[MAXN];
        for (int i = 0; i < G.n; i++) slots[i] = (mp_slot){-1, 0, 0};
        slots[w] = (mp_slot){MP_ARENA_PARAM, 0, 12 * rs};
        slots[x] = (mp_slot){MP_ARENA_IO, 0, 6 * rs};
        slots[c] = (mp_slot){MP_ARENA_IO, 64, 4 * rs};
        slots[y] = (mp_slot){MP_ARENA_IO, 128, 8 * rs};
        slots[z] = slots[y]; /* view */
        slots[l] = (mp_slot){MP_ARENA_IO, 192, rs};
        slots[mm] = (mp_slot){MP_ARENA_WORK, 0, 8 * rs};
        memplan plan = {.slots = slots, .n = G.n, .real_size = rs};
        plan.arena_bytes[MP_ARENA_PARAM] = 12 * rs;
        plan.arena_bytes[MP_ARENA_STATE] = 0;
        plan.arena_bytes[MP_ARENA_IO] = 200;
        plan.arena_bytes[MP_ARENA_WORK] = 8 * rs;
        const int32_t order[4] = {mm, y, z, l};
        program prog = {.g = &G, .order = order, .norder = 4, .plan = &plan, .f64 = f64};
        char err[256] = "";
        void *b = NULL;
        CHECK_OK(backend_cpu.create(&b, &prog, err, sizeof err), err);
        if (!b) continue;

        double xd[6] = {1, 2, 3, -1, 0, 4}, wd[12];
        fill(wd, 12, -1, 1);
        float xf[6], wf[12];
        for (int i = 0; i < 6; i++) xf[i] = (float)xd[i];
        for (int i = 0; i < 12; i++) wf[i] = (float)wd[i], wd[i] = wf[i];
        CHECK_OK(backend_cpu.write(b, x, f64 ? (void *)xd : (void *)xf, 6 * rs, err, sizeof err), err);
        CHECK_OK(backend_cpu.write(b, w, f64 ? (void *)wd : (void *)wf, 12 * rs, err, sizeof err), err);
        CHECK_OK(backend_cpu.execute(b, order, 4, err, sizeof err), err);
        double ref[8], tot = 0, out[8] = {0}, loss = 0;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) {
                double s = cdata[j];
                for (int k = 0; k < 3; k++) s += xd[i * 3 + k] * wd[k * 4 + j];
                ref[i * 4 + j] = s;
                tot += s;
            }
        if (f64) {
            CHECK_OK(backend_cpu.read(b, z, out, 8 * rs, err, sizeof err), err);
            CHECK_OK(backend_cpu.read(b, l, &loss, rs, err, sizeof err), err);
        } else {
            float of[8], lf;
            CHECK_OK(backend_cpu.read(b, z, of, 8 * rs, err, sizeof err), err);
            CHECK_OK(backend_cpu.read(b, l, &lf, rs, err, sizeof err), err);
            for (int i = 0; i < 8; i++) out[i] = of[i];
            loss = lf;
        }
        CHECK_ALL(out, ref, 8, f64 ? 1e-14 : 1e-5, "backend matmul+const");
        CHECK_NEAR(loss, tot, f64 ? 1e-13 : 1e-5);

        /* errors name the node */
        err[0] = 0;
        CHECK(backend_cpu.write(b, w, wf, 5, err, sizeof err) == MN_E_SHAPE);
        CHECK_MSG(strstr(err, "'w'") != NULL, "message: %s", err);
        CHECK(backend_cpu.read(b, dead, out, 8 * rs, err, sizeof err) == MN_E_INVALID);
        CHECK_MSG(strstr(err, "neg") != NULL, "message: %s", err);
        CHECK(backend_cpu.execute(b, &dead, 1, err, sizeof err) == MN_E_INVALID);
        CHECK(backend_cpu.read(b, 999, out, 8, err, sizeof err) == MN_E_INVALID);
        backend_cpu.destroy(b);

        /* an input without storage */
        slots[dead] = (mp_slot){MP_ARENA_WORK, 0, 8 * rs};
        slots[z].arena = -1;
        CHECK_OK(backend_cpu.create(&b, &prog, err, sizeof err), err);
        CHECK(backend_cpu.execute(b, &dead, 1, err, sizeof err) == MN_E_INVALID);
        CHECK_MSG(strstr(err, "input 0") != NULL, "message: %s", err);
        backend_cpu.destroy(b);
        slots[z] = slots[y];

        /* bad plans */
        plan.real_size = f64 ? 4 : 8;
        CHECK(backend_cpu.create(&b, &prog, err, sizeof err) == MN_E_INVALID && b == NULL);
        plan.real_size = rs;
        slots[l].offset = 197;
        CHECK(backend_cpu.create(&b, &prog, err, sizeof err) == MN_E_INVALID && b == NULL);
        CHECK_MSG(strstr(err, "sum") != NULL, "message: %s", err);
        slots[l].offset = 192;
        slots[c].bytes = 3 * rs;
        CHECK(backend_cpu.create(&b, &prog, err, sizeof err) == MN_E_INVALID && b == NULL);
        backend_cpu.destroy(NULL);
    }
}

int main(void) {
    mn_rng_seed(&g_rng, 42);
    test_tables();
    test_matmul();
    test_binary();
    test_broadcast_reduce_to();
    test_reductions();
    test_softmax();
    test_cross_entropy();
    test_unary();
    test_conv();
    test_maxpool();
    test_layout();
    test_optim();
    test_backend();
    return th_finish("test_cpu_kernels");
}
