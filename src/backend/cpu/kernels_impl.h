/* kernels_impl.h - the CPU reference kernels, written once over `real`.
 *
 * Included twice by kernels.c: with real = float, KN_SUFFIX = _f32 and with
 * real = double, KN_SUFFIX = _f64; each inclusion defines cpu_<op><suffix>
 * for every op of ops.def and the table cpu_kernels<suffix>. Math calls go
 * through <tgmath.h>, so exp(x) is expf for float and exp for double; float
 * constants are written as (real) casts to keep f32 arithmetic in f32.
 *
 * Layout: tensors are dense row-major. Shape comments use the ops.def names.
 * No include guard on purpose. Does not: check shapes, allocate, or call
 * anything outside kernels.c's helpers and libm.
 */

#ifndef KN_CAT
#define KN_CAT_(a, b) a##b
#define KN_CAT(a, b) KN_CAT_(a, b)
#define KN(nm) KN_CAT(cpu_##nm, KN_SUFFIX)
#define KN_DEF(nm)                                                                                 \
    static void KN(nm)(const mn_graph *g, const node *n, void *out, void *const in[NODE_MAX_IN])
/* 1/sqrt(2), 1/sqrt(2*pi), sqrt(2/pi) */
#define KN_SQRT1_2 0.70710678118654752440
#define KN_INV_SQRT_2PI 0.39894228040143267794
#define KN_SQRT_2_PI 0.79788456080286535588
enum { KN_RED_SUM, KN_RED_MEAN, KN_RED_MAX };
#endif

/* ---- sources: storage written by the session (or cpu.c for CONST) -------- */

KN_DEF(input) { (void)g, (void)n, (void)out, (void)in; }
KN_DEF(param) { (void)g, (void)n, (void)out, (void)in; }
KN_DEF(state) { (void)g, (void)n, (void)out, (void)in; }
KN_DEF(const) { (void)g, (void)n, (void)out, (void)in; }

/* "v beats best" for max-style searches: larger, or the first NaN (which then
 * stays). Ties never beat, so the first maximum wins. */
static inline bool KN(beats)(real v, real best) { return v > best || (v != v && best == best); }

/* ---- matmul -------------------------------------------------------------- */

/* c[M,N] = op(a) @ op(b); op(a) is [M,K] (a stored [K,M] if ta), op(b) is
 * [K,N] (b stored [N,K] if tb).
 *
 * The reference order: every c[i,j] is 0 + a(i,0) b(0,j) + a(i,1) b(1,j) + ...
 * in k order, one multiply and one add at a time (no fused multiply-add, no
 * reassociation). The loops below keep exactly that order per element and
 * only change which elements advance together: rows in groups of KN_GR
 * (each b value loaded once for the group), columns in tiles that stay in
 * the cache, and for a stored-transposed b a tile of KN_GC of its rows
 * copied k-major so the innermost loop runs over contiguous columns. */
#ifndef KN_GR
#define KN_GR 4    /* rows advanced together */
#define KN_GC 16   /* columns of a transposed-b tile */
#define KN_JT 1024 /* columns of a c row tile (i-k-j form) */
#define KN_KS 256  /* k of a transposed-b tile */
#endif
static void KN(gemm_rows)(real *restrict c, const real *restrict a, const real *restrict b, int64_t M,
                          int64_t K, int64_t N, bool ta, bool tb, int64_t ib, int64_t ie) {
    if (!tb) { /* i-k-j: c[i,:] += a(i,k) * b[k,:], KN_GR rows and KN_JT columns at a time */
        for (int64_t i0 = ib; i0 < ie; i0 += KN_GR) {
            const int64_t nr = ie - i0 < KN_GR ? ie - i0 : KN_GR;
            for (int64_t j0 = 0; j0 < N; j0 += KN_JT) {
                const int64_t nj = N - j0 < KN_JT ? N - j0 : KN_JT;
                for (int64_t r = 0; r < nr; r++)
                    for (int64_t j = 0; j < nj; j++) c[(i0 + r) * N + j0 + j] = 0;
                for (int64_t k = 0; k < K; k++) {
                    const real *brow = b + k * N + j0;
                    if (nr == KN_GR) {
                        real *c0 = c + i0 * N + j0, *c1 = c0 + N, *c2 = c1 + N, *c3 = c2 + N;
                        const real a0 = ta ? a[k * M + i0] : a[i0 * K + k];
                        const real a1 = ta ? a[k * M + i0 + 1] : a[(i0 + 1) * K + k];
                        const real a2 = ta ? a[k * M + i0 + 2] : a[(i0 + 2) * K + k];
                        const real a3 = ta ? a[k * M + i0 + 3] : a[(i0 + 3) * K + k];
                        for (int64_t j = 0; j < nj; j++) {
                            const real bv = brow[j];
                            c0[j] += a0 * bv;
                            c1[j] += a1 * bv;
                            c2[j] += a2 * bv;
                            c3[j] += a3 * bv;
                        }
                    } else {
                        for (int64_t r = 0; r < nr; r++) {
                            const real air = ta ? a[k * M + i0 + r] : a[(i0 + r) * K + k];
                            real *cr = c + (i0 + r) * N + j0;
                            for (int64_t j = 0; j < nj; j++) cr[j] += air * brow[j];
                        }
                    }
                }
            }
        }
        return;
    }
    /* b stored [N,K]: a tile of KN_GC of its rows and KN_KS of k copied
     * k-major into bt (each b value copied once), then for every row of
     * op(a) the tile's KN_GC dot products advance together over the slice;
     * between slices the partial sums wait in c (stored as real: the same
     * value a register held) */
    real bt[KN_GC * KN_KS];
    for (int64_t j0 = 0; j0 < N; j0 += KN_GC) {
        const int64_t nc = N - j0 < KN_GC ? N - j0 : KN_GC;
        for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += KN_KS) {
            const int64_t nk = K - k0 < KN_KS ? K - k0 : KN_KS;
            for (int64_t kk = 0; kk < nk; kk++)
                for (int64_t jj = 0; jj < KN_GC; jj++) bt[kk * KN_GC + jj] = jj < nc ? b[(j0 + jj) * K + k0 + kk] : 0;
            for (int64_t i = ib; i < ie; i++) {
                real s[KN_GC];
                for (int64_t jj = 0; jj < KN_GC; jj++) s[jj] = k0 == 0 || jj >= nc ? 0 : c[i * N + j0 + jj];
                for (int64_t kk = 0; kk < nk; kk++) {
                    const real av = ta ? a[(k0 + kk) * M + i] : a[i * K + k0 + kk];
                    const real *bk = bt + kk * KN_GC;
                    for (int64_t jj = 0; jj < KN_GC; jj++) s[jj] += av * bk[jj];
                }
                for (int64_t jj = 0; jj < nc; jj++) c[i * N + j0 + jj] = s[jj];
            }
            if (K == 0) break;
        }
    }
}

typedef struct KN(gemm_job) {
    real *c;
    const real *a, *b;
    int64_t M, K, N, ib, ie;
    bool ta, tb;
} KN(gemm_job);

static void *KN(gemm_thread)(void *arg) {
    const KN(gemm_job) *j = arg;
    KN(gemm_rows)(j->c, j->a, j->b, j->M, j->K, j->N, j->ta, j->tb, j->ib, j->ie);
    return NULL;
}

/* The product on up to kn_threads() threads, each a range of rows (whole
 * groups of KN_GR): every element is computed as above by one thread, so the
 * bits do not depend on the thread count. Small products stay on one. */
static void KN(gemm)(real *restrict c, const real *restrict a, const real *restrict b, int64_t M,
                     int64_t K, int64_t N, bool ta, bool tb) {
    int nt = (double)M * (double)K * (double)N >= (double)(1 << 22) ? kn_threads() : 1;
    if ((int64_t)nt * KN_GR * 2 > M) nt = (int)(M / (KN_GR * 2));
    if (nt <= 1) {
        KN(gemm_rows)(c, a, b, M, K, N, ta, tb, 0, M);
        return;
    }
    KN(gemm_job) jobs[KN_MAX_THREADS];
    pthread_t th[KN_MAX_THREADS];
    bool started[KN_MAX_THREADS] = {false};
    const int64_t groups = (M + KN_GR - 1) / KN_GR;
    for (int t = 0; t < nt; t++) {
        jobs[t] = (KN(gemm_job)){c, a, b, M, K, N, groups * t / nt * KN_GR, groups * (t + 1) / nt * KN_GR, ta, tb};
        if (jobs[t].ie > M) jobs[t].ie = M;
    }
    for (int t = 1; t < nt; t++) started[t] = pthread_create(&th[t], NULL, KN(gemm_thread), &jobs[t]) == 0;
    KN(gemm_thread)(&jobs[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else KN(gemm_thread)(&jobs[t]); /* could not start: this thread does its rows */
    }
}

/* a: [M,K] | [B,M,K] (ip[0]: [K,M] | [B,K,M]); b: [K,N] | [B,K,N] (ip[1]:
 * [N,K] | [B,N,K]); a rank-2 operand is shared across the batch. */
KN_DEF(matmul) {
    const node *A = kn_in(g, n, 0), *B = kn_in(g, n, 1);
    const bool ta = matmul_attrs_of(n).trans_a, tb = matmul_attrs_of(n).trans_b;
    const int64_t M = A->shape[A->rank - (ta ? 1 : 2)], K = A->shape[A->rank - (ta ? 2 : 1)];
    const int64_t N = B->shape[B->rank - (tb ? 2 : 1)];
    const int64_t batch = n->rank == 3 ? n->shape[0] : 1;
    const int64_t sa = A->rank == 3 ? M * K : 0, sb = B->rank == 3 ? K * N : 0;
    const real *a = in[0], *b = in[1];
    real *c = out;
    for (int64_t bi = 0; bi < batch; bi++) KN(gemm)(c + bi * M * N, a + bi * sa, b + bi * sb, M, K, N, ta, tb);
}

/* ---- elementwise binary with broadcasting -------------------------------- */

static inline real KN(binop)(op_id op, real a, real b) {
    switch (op) {
    case OP_ADD: return a + b;
    case OP_SUB: return a - b;
    case OP_MUL: return a * b;
    default: return a / b; /* OP_DIV */
    }
}

/* out[node shape] = a op b, numpy broadcasting (rank <= 4, right-aligned).
 * out may alias an input of the output's shape. */
static inline void KN(binary)(const mn_graph *g, const node *n, void *out, void *const in[NODE_MAX_IN],
                              op_id op) {
    bcast_iter it;
    bcast_init(&it, n, kn_in(g, n, 0), kn_in(g, n, 1));
    const real *a = in[0], *b = in[1];
    real *o = out;
    const int64_t sa3 = it.stride[0][3], sb3 = it.stride[1][3];
    int64_t k = 0;
    for (int64_t i0 = 0; i0 < it.dim[0]; i0++)
        for (int64_t i1 = 0; i1 < it.dim[1]; i1++)
            for (int64_t i2 = 0; i2 < it.dim[2]; i2++) {
                const real *pa = a + i0 * it.stride[0][0] + i1 * it.stride[0][1] + i2 * it.stride[0][2];
                const real *pb = b + i0 * it.stride[1][0] + i1 * it.stride[1][1] + i2 * it.stride[1][2];
                for (int64_t i3 = 0; i3 < it.dim[3]; i3++, k++) o[k] = KN(binop)(op, pa[i3 * sa3], pb[i3 * sb3]);
            }
}

KN_DEF(add) { KN(binary)(g, n, out, in, OP_ADD); }
KN_DEF(sub) { KN(binary)(g, n, out, in, OP_SUB); }
KN_DEF(mul) { KN(binary)(g, n, out, in, OP_MUL); }
KN_DEF(div) { KN(binary)(g, n, out, in, OP_DIV); }

/* ---- elementwise unary --------------------------------------------------- */

static inline real KN(sigmoid1)(real x) {
    if (x >= 0) return (real)1 / ((real)1 + exp(-x));
    const real e = exp(x); /* no overflow for very negative x */
    return e / ((real)1 + e);
}
static inline real KN(gelu1)(real x) {
    return (real)0.5 * x * ((real)1 + erf(x * (real)KN_SQRT1_2));
}
static inline real KN(gelu_tanh1)(real x) {
    const real u = (real)KN_SQRT_2_PI * (x + (real)0.044715 * x * x * x);
    return (real)0.5 * x * ((real)1 + tanh(u));
}

/* y[i] = EXPR(v) with v = x[i]; y may alias x. */
#define KN_UNARY(nm, EXPR)                                                                         \
    KN_DEF(nm) {                                                                                   \
        const real *x = in[0];                                                                     \
        real *y = out;                                                                             \
        const int64_t cnt = kn_numel(n);                                                           \
        (void)g;                                                                                   \
        for (int64_t i = 0; i < cnt; i++) {                                                        \
            const real v = x[i];                                                                   \
            y[i] = (EXPR);                                                                         \
        }                                                                                          \
    }

KN_UNARY(scale, v * (real)scale_factor(n))
KN_UNARY(neg, -v)
KN_UNARY(exp, exp(v))
KN_UNARY(log, log(v))
KN_UNARY(sqrt, sqrt(v))
KN_UNARY(rsqrt, (real)1 / sqrt(v))
KN_UNARY(relu, v > 0 ? v : (real)0)
KN_UNARY(sigmoid, KN(sigmoid1)(v))
KN_UNARY(tanh, tanh(v))
KN_UNARY(gelu, KN(gelu1)(v))
KN_UNARY(gelu_tanh, KN(gelu_tanh1)(v))
KN_UNARY(silu, v * KN(sigmoid1)(v))
KN_UNARY(sin, sin(v))
KN_UNARY(cos, cos(v))
/* rounded once from the stored f32 or f64 value (core/round16.h) */
KN_UNARY(cast, (real)mn_round16_d((double)v, dtype_round16(cast_dtype(n))))
#undef KN_UNARY

KN_DEF(stop_grad) { kn_copy(n, out, in[0], kn_esize(n, sizeof(real))); }

/* ---- reductions: x viewed as [outer, len, inner], out as [outer, inner] --- */

static void KN(reduce)(const mn_graph *g, const node *n, void *out, void *const in[NODE_MAX_IN], int kind) {
    int64_t outer, len, inner;
    kn_axis_split(&outer, &len, &inner, kn_in(g, n, 0), reduce_attrs_of(n).axis);
    const real *x = in[0];
    real *y = out;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            const real *p = x + o * len * inner + j;
            if (kind == KN_RED_MAX) {
                real best = p[0];
                for (int64_t l = 1; l < len; l++)
                    if (KN(beats)(p[l * inner], best)) best = p[l * inner];
                y[o * inner + j] = best;
            } else {
                double s = 0;
                for (int64_t l = 0; l < len; l++) s += p[l * inner];
                y[o * inner + j] = (real)(kind == KN_RED_MEAN ? s / (double)len : s);
            }
        }
}

KN_DEF(sum) { KN(reduce)(g, n, out, in, KN_RED_SUM); }
KN_DEF(mean) { KN(reduce)(g, n, out, in, KN_RED_MEAN); }
KN_DEF(max) { KN(reduce)(g, n, out, in, KN_RED_MAX); }

/* (x, y, dy) -> dx[x shape]: each dy goes to the first argmax of its slice. */
KN_DEF(max_bwd) {
    int64_t outer, len, inner;
    kn_axis_split(&outer, &len, &inner, kn_in(g, n, 0), reduce_attrs_of(n).axis);
    const real *x = in[0], *dy = in[2];
    real *dx = out;
    for (int64_t i = 0, cnt = kn_numel(n); i < cnt; i++) dx[i] = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            const real *p = x + o * len * inner + j;
            int64_t arg = 0;
            for (int64_t l = 1; l < len; l++)
                if (KN(beats)(p[l * inner], p[arg * inner])) arg = l;
            dx[(o * len + arg) * inner + j] = dy[o * inner + j];
        }
}

/* ---- last-axis normalisations -------------------------------------------- */

static int64_t KN(lastdim)(const node *x) { return x->rank ? x->shape[x->rank - 1] : 1; }

/* Row statistics for a stable softmax: *m = max, return sum exp(x - m). */
static double KN(row_stats)(const real *x, int64_t C, real *m) {
    real best = x[0];
    for (int64_t j = 1; j < C; j++)
        if (KN(beats)(x[j], best)) best = x[j];
    double s = 0;
    for (int64_t j = 0; j < C; j++) s += (double)exp(x[j] - best);
    *m = best;
    return s;
}

/* y may alias x. */
KN_DEF(softmax) {
    const node *X = kn_in(g, n, 0);
    const int64_t C = KN(lastdim)(X), rows = kn_numel(X) / C;
    for (int64_t r = 0; r < rows; r++) {
        const real *x = (const real *)in[0] + r * C;
        real *y = (real *)out + r * C, m;
        const double s = KN(row_stats)(x, C, &m);
        const real inv = (real)(1.0 / s);
        for (int64_t j = 0; j < C; j++) y[j] = exp(x[j] - m) * inv;
    }
}

/* y = x - m - log(sum exp(x - m)), the subtraction done in double. */
KN_DEF(log_softmax) {
    const node *X = kn_in(g, n, 0);
    const int64_t C = KN(lastdim)(X), rows = kn_numel(X) / C;
    for (int64_t r = 0; r < rows; r++) {
        const real *x = (const real *)in[0] + r * C;
        real *y = (real *)out + r * C, m;
        const double s = KN(row_stats)(x, C, &m), lse = (double)m + log(s);
        for (int64_t j = 0; j < C; j++) y[j] = (real)((double)x[j] - lse);
    }
}

/* (y, dy) -> y * (dy - sum(dy * y)) per row. */
KN_DEF(softmax_bwd) {
    const node *Y = kn_in(g, n, 0);
    const int64_t C = KN(lastdim)(Y), rows = kn_numel(Y) / C;
    for (int64_t r = 0; r < rows; r++) {
        const real *y = (const real *)in[0] + r * C, *dy = (const real *)in[1] + r * C;
        real *dx = (real *)out + r * C;
        double s = 0;
        for (int64_t j = 0; j < C; j++) s += (double)dy[j] * (double)y[j];
        for (int64_t j = 0; j < C; j++) dx[j] = y[j] * (dy[j] - (real)s);
    }
}

/* (y, dy) -> dy - exp(y) * sum(dy) per row (y = log_softmax). */
KN_DEF(log_softmax_bwd) {
    const node *Y = kn_in(g, n, 0);
    const int64_t C = KN(lastdim)(Y), rows = kn_numel(Y) / C;
    for (int64_t r = 0; r < rows; r++) {
        const real *y = (const real *)in[0] + r * C, *dy = (const real *)in[1] + r * C;
        real *dx = (real *)out + r * C;
        double s = 0;
        for (int64_t j = 0; j < C; j++) s += dy[j];
        for (int64_t j = 0; j < C; j++) dx[j] = dy[j] - exp(y[j]) * (real)s;
    }
}

/* ---- layout -------------------------------------------------------------- */

/* A view: the planner gives it its input's storage; copy only when not. */
KN_DEF(reshape) { kn_copy(n, out, in[0], kn_esize(n, sizeof(real))); }
KN_DEF(permute) { kn_permute(n, kn_in(g, n, 0), out, in[0], kn_esize(n, sizeof(real))); }
KN_DEF(broadcast) { kn_broadcast(n, kn_in(g, n, 0), out, in[0], kn_esize(n, sizeof(real))); }

/* Sums x down to the node's shape: out[o] = sum of x over the dims that the
 * node has as 1 (or lacks) and x does not; right-aligned like broadcasting. */
KN_DEF(reduce_to) {
    const node *X = kn_in(g, n, 0);
    int64_t xd[4], od[4], xs[4], cnt[4], acc = 1;
    kn_pad4(xd, X->rank, X->shape);
    kn_pad4(od, n->rank, n->shape);
    for (int d = 3; d >= 0; d--) {
        xs[d] = xd[d] == 1 ? 0 : acc; /* a size-1 x dim is read at index 0 */
        acc *= xd[d];
        cnt[d] = od[d] == 1 ? xd[d] : 1;
    }
    const real *x = in[0];
    real *y = out;
    int64_t k = 0;
    for (int64_t o0 = 0; o0 < od[0]; o0++)
        for (int64_t o1 = 0; o1 < od[1]; o1++)
            for (int64_t o2 = 0; o2 < od[2]; o2++)
                for (int64_t o3 = 0; o3 < od[3]; o3++, k++) {
                    double s = 0;
                    for (int64_t r0 = 0; r0 < cnt[0]; r0++)
                        for (int64_t r1 = 0; r1 < cnt[1]; r1++)
                            for (int64_t r2 = 0; r2 < cnt[2]; r2++)
                                for (int64_t r3 = 0; r3 < cnt[3]; r3++)
                                    s += x[(o0 + r0) * xs[0] + (o1 + r1) * xs[1] + (o2 + r2) * xs[2] +
                                           (o3 + r3) * xs[3]];
                    y[k] = (real)s;
                }
}

/* ---- losses (scalar outputs, mean over rows B) --------------------------- */

/* Is row b's label ignored (ignore_index, ip[0] = 1, label == ip[1])? */
static bool KN(ce_ignored)(const node *n, int32_t label) {
    const mn_ce_attrs a = ce_attrs_of(n);
    return a.use_ignore && label == a.ignore_index;
}

/* logits [B,C], labels i32 [B] -> rows [B,3]: max m, sum of exp(x - m), and
 * the loss term lse - (1 - s) x[label] - s mean(x) (s = fp[0], label
 * smoothing; PyTorch's formula), written as differences from the row max so
 * that large logits do not cancel. The term is 0 for an ignored row and for a
 * label outside [0,C); the statistics are those of the row in every case. */
KN_DEF(ce_rows) {
    const node *X = kn_in(g, n, 0);
    const int64_t C = KN(lastdim)(X), B = kn_numel(X) / C;
    const int32_t *lab = in[1];
    const double eps = ce_attrs_of(n).smoothing;
    real *r = out;
    for (int64_t b = 0; b < B; b++) {
        const real *x = (const real *)in[0] + b * C;
        real m;
        const double s = KN(row_stats)(x, C, &m);
        double term = 0;
        if (!KN(ce_ignored)(n, lab[b]) && lab[b] >= 0 && lab[b] < C) {
            term = log(s) + (1 - eps) * ((double)m - (double)x[lab[b]]);
            if (eps != 0) {
                double sx = 0;
                for (int64_t j = 0; j < C; j++) sx += (double)x[j];
                term += eps * ((double)m - sx / (double)C);
            }
        }
        r[b * 3] = m;
        r[b * 3 + 1] = (real)s;
        r[b * 3 + 2] = (real)term;
    }
}

/* (logits [B,C], labels i32 [B], rows [B,3]) -> the mean of the rows' loss
 * terms over the counted rows: with ip[0] = 1 a row whose label == ip[1]
 * (ignore_index) is not counted (0 if no row is counted); a label outside
 * [0,C) contributes 0 but is counted. */
KN_DEF(cross_entropy) {
    const int64_t B = kn_in(g, n, 1)->shape[0];
    const int32_t *lab = in[1];
    const real *r = in[2];
    double tot = 0;
    int64_t cnt = 0;
    for (int64_t b = 0; b < B; b++) {
        if (KN(ce_ignored)(n, lab[b])) continue;
        cnt++;
        tot += (double)r[b * 3 + 2];
    }
    *(real *)out = (real)(cnt ? tot / (double)cnt : 0.0);
}

/* (logits, labels, dloss, rows[, count]) -> (softmax - target) * dloss /
 * count with softmax = exp(x - rows.max) / rows.sumexp, target = (1 - s)
 * onehot + s / C; count = in[4] if present, else the rows not ignored (B
 * without ignore_index); 0 if count is 0. Ignored rows and rows with an
 * out-of-range label get 0. */
KN_DEF(cross_entropy_bwd) {
    const node *X = kn_in(g, n, 0);
    const int64_t C = KN(lastdim)(X), B = kn_numel(X) / C;
    const int32_t *lab = in[1];
    const real *r = in[3];
    const double eps = ce_attrs_of(n).smoothing;
    double count = (double)B;
    if (n->nin > 4) {
        count = (double)*(const real *)in[4];
    } else if (ce_attrs_of(n).use_ignore) {
        count = 0;
        for (int64_t b = 0; b < B; b++) count += !KN(ce_ignored)(n, lab[b]);
    }
    const double scale = count > 0 ? (double)*(const real *)in[2] / count : 0.0;
    for (int64_t b = 0; b < B; b++) {
        const real *x = (const real *)in[0] + b * C;
        real *dx = (real *)out + b * C;
        const bool zero = lab[b] < 0 || lab[b] >= C || KN(ce_ignored)(n, lab[b]);
        const double m = (double)r[b * 3], s = (double)r[b * 3 + 1];
        for (int64_t j = 0; j < C; j++) {
            const double p = exp((double)x[j] - m) / s;
            const double t = (j == lab[b] ? 1 - eps : 0.0) + eps / (double)C;
            dx[j] = zero ? (real)0 : (real)((p - t) * scale);
        }
    }
}

/* logits [B,C], targets [B,C] -> -mean_b sum_c t * log_softmax(x). */
KN_DEF(cross_entropy_dense) {
    const node *X = kn_in(g, n, 0);
    const int64_t C = KN(lastdim)(X), B = kn_numel(X) / C;
    double tot = 0;
    for (int64_t b = 0; b < B; b++) {
        const real *x = (const real *)in[0] + b * C, *t = (const real *)in[1] + b * C;
        real m;
        const double lse = log(KN(row_stats)(x, C, &m)) + (double)m;
        for (int64_t j = 0; j < C; j++) tot += (double)t[j] * ((double)x[j] - lse);
    }
    *(real *)out = (real)(-tot / (double)B);
}

/* (logits, targets, dloss) -> ip[0] = 0: dlogits = (softmax*sum(t) - t)*dloss/B;
 *                             ip[0] = 1: dtargets = -log_softmax * dloss/B. */
KN_DEF(cross_entropy_dense_bwd) {
    const node *X = kn_in(g, n, 0);
    const int64_t C = KN(lastdim)(X), B = kn_numel(X) / C;
    const double scale = (double)*(const real *)in[2] / (double)B;
    for (int64_t b = 0; b < B; b++) {
        const real *x = (const real *)in[0] + b * C, *t = (const real *)in[1] + b * C;
        real *d = (real *)out + b * C, m;
        const double s = KN(row_stats)(x, C, &m), lse = log(s) + (double)m;
        if (ce_dense_wrt_targets(n)) {
            for (int64_t j = 0; j < C; j++) d[j] = (real)(-((double)x[j] - lse) * scale);
        } else {
            double ts = 0;
            for (int64_t j = 0; j < C; j++) ts += t[j];
            for (int64_t j = 0; j < C; j++) {
                const double p = exp((double)x[j] - (double)m) / s;
                d[j] = (real)((p * ts - (double)t[j]) * scale);
            }
        }
    }
}

/* mean((a - b)^2); a and b have the same element count. */
KN_DEF(mse) {
    const real *a = in[0], *b = in[1];
    const int64_t cnt = kn_numel(kn_in(g, n, 0));
    double s = 0;
    for (int64_t i = 0; i < cnt; i++) {
        const double d = (double)a[i] - (double)b[i];
        s += d * d;
    }
    *(real *)out = (real)(s / (double)cnt);
}

/* ---- convolution: x [N,C,H,W], w [O,C/groups,KH,KW], y [N,O,OH,OW] ------- */

/* y = conv(x, w) + bias[o] (nin == 3); zero padding. */
KN_DEF(conv2d) {
    conv_geom c;
    conv_geom_init(&c, n, kn_in(g, n, 0), kn_in(g, n, 1), n);
    const real *x = in[0], *w = in[1], *bias = n->nin > 2 ? in[2] : NULL;
    real *y = out;
    for (int64_t b = 0; b < c.N; b++)
        for (int64_t o = 0; o < c.O; o++) {
            real *yp = y + (b * c.O + o) * c.OH * c.OW; /* [OH,OW] */
            const real b0 = bias ? bias[o] : 0;
            for (int64_t i = 0; i < c.OH * c.OW; i++) yp[i] = b0;
            const int64_t grp = o / c.Og;
            for (int64_t ci = 0; ci < c.Cg; ci++) {
                const real *xp = x + (b * c.C + grp * c.Cg + ci) * c.H * c.W; /* [H,W] */
                for (int64_t kh = 0; kh < c.KH; kh++) {
                    int64_t oh0, oh1;
                    conv_range(&oh0, &oh1, c.OH, c.H, c.sh, c.ph, c.dh, kh);
                    for (int64_t kw = 0; kw < c.KW; kw++) {
                        int64_t ow0, ow1;
                        conv_range(&ow0, &ow1, c.OW, c.W, c.sw, c.pw, c.dw, kw);
                        const real wv = w[((o * c.Cg + ci) * c.KH + kh) * c.KW + kw];
                        for (int64_t oh = oh0; oh < oh1; oh++) {
                            /* x index of (oh, ow) is xo + ow*sw; in range for ow in [ow0, ow1) */
                            const int64_t xo = (oh * c.sh - c.ph + kh * c.dh) * c.W + kw * c.dw - c.pw;
                            real *yr = yp + oh * c.OW;
                            for (int64_t ow = ow0; ow < ow1; ow++) yr[ow] += wv * xp[xo + ow * c.sw];
                        }
                    }
                }
            }
        }
}

/* (dy [N,O,OH,OW], w) -> dx [N,C,H,W] (node shape). */
KN_DEF(conv2d_bwd_input) {
    const node *DY = kn_in(g, n, 0);
    conv_geom c;
    conv_geom_init(&c, n, n, kn_in(g, n, 1), DY);
    const real *dy = in[0], *w = in[1];
    real *dx = out;
    for (int64_t i = 0, cnt = kn_numel(n); i < cnt; i++) dx[i] = 0;
    for (int64_t b = 0; b < c.N; b++)
        for (int64_t o = 0; o < c.O; o++) {
            const real *dyp = dy + (b * c.O + o) * c.OH * c.OW;
            const int64_t grp = o / c.Og;
            for (int64_t ci = 0; ci < c.Cg; ci++) {
                real *dxp = dx + (b * c.C + grp * c.Cg + ci) * c.H * c.W;
                for (int64_t kh = 0; kh < c.KH; kh++) {
                    int64_t oh0, oh1;
                    conv_range(&oh0, &oh1, c.OH, c.H, c.sh, c.ph, c.dh, kh);
                    for (int64_t kw = 0; kw < c.KW; kw++) {
                        int64_t ow0, ow1;
                        conv_range(&ow0, &ow1, c.OW, c.W, c.sw, c.pw, c.dw, kw);
                        const real wv = w[((o * c.Cg + ci) * c.KH + kh) * c.KW + kw];
                        for (int64_t oh = oh0; oh < oh1; oh++) {
                            const int64_t xo = (oh * c.sh - c.ph + kh * c.dh) * c.W + kw * c.dw - c.pw;
                            const real *yr = dyp + oh * c.OW;
                            for (int64_t ow = ow0; ow < ow1; ow++) dxp[xo + ow * c.sw] += wv * yr[ow];
                        }
                    }
                }
            }
        }
}

/* (x, dy [N,O,OH,OW]) -> dw [O,C/groups,KH,KW] (node shape), or with a K
 * chunk (wgrad_chunk_of) its partial sums, part p over k = (b, oh, ow) in
 * [p*chunk, (p+1)*chunk), stacked [P*O,Cg,KH,KW]; each sum in k order. */
KN_DEF(conv2d_bwd_weight) {
    const node *DY = kn_in(g, n, 1);
    node w1 = *n; /* one part's shape */
    w1.shape[0] = DY->shape[1];
    conv_geom c;
    conv_geom_init(&c, n, kn_in(g, n, 0), &w1, DY);
    const real *x = in[0], *dy = in[1];
    const int64_t ohw = c.OH * c.OW, K = c.N * ohw, chunk = wgrad_chunk_of(n) > 0 ? wgrad_chunk_of(n) : K;
    const int64_t per_part = c.O * c.Cg * c.KH * c.KW;
    for (int64_t klo = 0, p = 0; klo < K; klo += chunk, p++) {
        const int64_t khi = klo + chunk < K ? klo + chunk : K;
        real *dw = (real *)out + p * per_part;
        for (int64_t o = 0; o < c.O; o++) {
            const int64_t grp = o / c.Og;
            for (int64_t ci = 0; ci < c.Cg; ci++)
                for (int64_t kh = 0; kh < c.KH; kh++) {
                    int64_t oh0, oh1;
                    conv_range(&oh0, &oh1, c.OH, c.H, c.sh, c.ph, c.dh, kh);
                    for (int64_t kw = 0; kw < c.KW; kw++) {
                        int64_t ow0, ow1;
                        conv_range(&ow0, &ow1, c.OW, c.W, c.sw, c.pw, c.dw, kw);
                        real s = 0;
                        for (int64_t b = klo / ohw; b < c.N && b * ohw < khi; b++) {
                            const real *xp = x + (b * c.C + grp * c.Cg + ci) * c.H * c.W;
                            const real *dyp = dy + (b * c.O + o) * ohw;
                            for (int64_t oh = oh0; oh < oh1; oh++) {
                                /* the row's k run [r, r + OW) cut to the part */
                                const int64_t r = b * ohw + oh * c.OW;
                                const int64_t lo = klo - r > ow0 ? klo - r : ow0, hi = khi - r < ow1 ? khi - r : ow1;
                                const int64_t xo = (oh * c.sh - c.ph + kh * c.dh) * c.W + kw * c.dw - c.pw;
                                const real *yr = dyp + oh * c.OW;
                                for (int64_t ow = lo; ow < hi; ow++) s += xp[xo + ow * c.sw] * yr[ow];
                            }
                        }
                        dw[((o * c.Cg + ci) * c.KH + kh) * c.KW + kw] = s;
                    }
                }
        }
    }
}

/* ---- max pooling: x [N,C,H,W] -> y [N,C,OH,OW] --------------------------- */

/* Index (ih*W + iw) of the first maximum of the window at (oh, ow) of plane
 * xp [H,W], or -1 if the window lies wholly in the padding. ip as MAXPOOL2D;
 * a stride of 0 means the kernel size. */
static int64_t KN(pool_arg)(const node *n, const real *xp, int64_t H, int64_t W, int64_t oh, int64_t ow) {
    const mn_pool_attrs a = pool_attrs_of(n);
    const int64_t kh = a.kernel[0], kw = a.kernel[1];
    const int64_t sh = a.stride[0] > 0 ? a.stride[0] : kh, sw = a.stride[1] > 0 ? a.stride[1] : kw;
    int64_t arg = -1;
    for (int64_t i = 0; i < kh; i++) {
        const int64_t ih = oh * sh - a.pad[0] + i;
        if (ih < 0 || ih >= H) continue;
        for (int64_t j = 0; j < kw; j++) {
            const int64_t iw = ow * sw - a.pad[1] + j;
            if (iw < 0 || iw >= W) continue;
            if (arg < 0 || KN(beats)(xp[ih * W + iw], xp[arg])) arg = ih * W + iw;
        }
    }
    return arg;
}

/* Padded cells never win; a window wholly in the padding gives -inf. */
KN_DEF(maxpool2d) {
    const node *X = kn_in(g, n, 0);
    const int64_t H = X->shape[2], W = X->shape[3], OH = n->shape[2], OW = n->shape[3];
    const int64_t planes = X->shape[0] * X->shape[1];
    for (int64_t p = 0; p < planes; p++) {
        const real *xp = (const real *)in[0] + p * H * W;
        real *yp = (real *)out + p * OH * OW;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                const int64_t arg = KN(pool_arg)(n, xp, H, W, oh, ow);
                yp[oh * OW + ow] = arg >= 0 ? xp[arg] : (real)-INFINITY;
            }
    }
}

/* (x, dy [N,C,OH,OW]) -> dx [N,C,H,W]: each window's dy goes to its first
 * maximum; overlapping windows accumulate. */
KN_DEF(maxpool2d_bwd) {
    const node *X = kn_in(g, n, 0), *DY = kn_in(g, n, 1);
    const int64_t H = X->shape[2], W = X->shape[3], OH = DY->shape[2], OW = DY->shape[3];
    const int64_t planes = X->shape[0] * X->shape[1];
    real *dx = out;
    for (int64_t i = 0, cnt = kn_numel(n); i < cnt; i++) dx[i] = 0;
    for (int64_t p = 0; p < planes; p++) {
        const real *xp = (const real *)in[0] + p * H * W, *dyp = (const real *)in[1] + p * OH * OW;
        real *dxp = dx + p * H * W;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                const int64_t arg = KN(pool_arg)(n, xp, H, W, oh, ow);
                if (arg >= 0) dxp[arg] += dyp[oh * OW + ow];
            }
    }
}

/* ---- unary backward: (x, y, dy) -> dy * f'(x), bwd_of = forward op ------- */

static inline real KN(dunary)(op_id op, real x, real y) {
    switch (op) {
    case OP_EXP: return y;
    case OP_LOG: return (real)1 / x;
    case OP_SQRT: return (real)0.5 / y;
    case OP_RSQRT: return (real)-0.5 * y * y * y;
    case OP_SIGMOID: return y * ((real)1 - y);
    case OP_TANH: return (real)1 - y * y;
    case OP_GELU: /* Phi(x) + x phi(x) */
        return (real)0.5 * ((real)1 + erf(x * (real)KN_SQRT1_2)) +
               x * (real)KN_INV_SQRT_2PI * exp((real)-0.5 * x * x);
    case OP_GELU_TANH: {
        const real c = (real)KN_SQRT_2_PI, k = (real)0.044715;
        const real t = tanh(c * (x + k * x * x * x));
        return (real)0.5 * ((real)1 + t) + (real)0.5 * x * ((real)1 - t * t) * c * ((real)1 + 3 * k * x * x);
    }
    case OP_SILU: {
        const real s = KN(sigmoid1)(x);
        return s * ((real)1 + x * ((real)1 - s));
    }
    case OP_SIN: return cos(x);
    case OP_COS: return -sin(x);
    default: MN_ASSERT(!"unary_bwd: the forward op is not a differentiable unary op"); return 0;
    }
}

/* out may alias any input. */
KN_DEF(unary_bwd) {
    const real *x = in[0], *y = in[1], *dy = in[2];
    real *dx = out;
    const op_id op = bwd_of(n);
    const int64_t cnt = kn_numel(n);
    (void)g;
    if (op == OP_RELU) {
        for (int64_t i = 0; i < cnt; i++) dx[i] = x[i] > 0 ? dy[i] : (real)0;
        return;
    }
    for (int64_t i = 0; i < cnt; i++) dx[i] = dy[i] * KN(dunary)(op, x[i], y[i]);
}

/* ---- optimizer: out is the parameter's storage (== in[0]) --------------- */

/* Scalar clip coefficient (optional last input) or 1. */
static real KN(clip_of)(const node *n, void *const in[NODE_MAX_IN], int idx) {
    return n->nin > idx ? *(const real *)in[idx] : (real)1;
}

/* gated: the last input is a STEP_GATE whose element 1 says "skip": then the
 * parameter keeps its value (copied only if out is not in[0]) and the state
 * is not touched. A branch, not a multiplication by 0 (0 * NaN is NaN). */
static bool KN(skipped)(const mn_graph *g, const node *n, void *out, void *const in[NODE_MAX_IN], int idx) {
    if (!optim_attrs_of(n).gated || n->nin <= idx || ((const real *)in[idx])[1] == 0) return false;
    if (out != in[0]) memcpy(out, in[0], (size_t)kn_numel(n) * sizeof(real));
    (void)g;
    return true;
}

/* torch.optim.SGD with dampening 0 (buf starts at zero: buf1 = g as in torch).
 * in: param, grad, momentum_buf, hyper[, clip]. */
KN_DEF(sgd_update) {
    const real *p0 = in[0], *gr = in[1], *hyper = in[3];
    real *p = out, *buf = in[2];
    if (KN(skipped)(g, n, out, in, 4)) return;
    const real clip = KN(clip_of)(n, in, 4);
    const mn_optim_attrs a = optim_attrs_of(n);
    const real lr = (real)((double)hyper[0] * a.lr_mult);
    const real mom = (real)a.beta1, wd = (real)a.weight_decay;
    const bool nesterov = a.variant;
    const int64_t cnt = kn_numel(n);
    (void)g;
    for (int64_t i = 0; i < cnt; i++) {
        const real pv = p0[i];
        real gv = clip * gr[i];
        if (wd != 0) gv += wd * pv;
        if (mom != 0) {
            const real b = mom * buf[i] + gv;
            buf[i] = b;
            gv = nesterov ? gv + mom * b : b;
        }
        p[i] = pv - lr * gv;
    }
}

/* torch.optim.Adam (variant 0, L2 into the gradient) / AdamW (variant 1,
 * decoupled decay). in: param, grad, m, v, hyper[, clip]. */
KN_DEF(adam_update) {
    const real *p0 = in[0], *gr = in[1], *hyper = in[4];
    real *p = out, *m = in[2], *v = in[3];
    if (KN(skipped)(g, n, out, in, 5)) return;
    const real clip = KN(clip_of)(n, in, 5);
    const mn_optim_attrs a = optim_attrs_of(n);
    const real lr = (real)((double)hyper[0] * a.lr_mult), bc1 = hyper[1], bc2 = hyper[2];
    const real b1 = (real)a.beta1, b2 = (real)a.beta2, eps = (real)a.eps, wd = (real)a.weight_decay;
    const bool decoupled = a.variant;
    const int64_t cnt = kn_numel(n);
    (void)g;
    for (int64_t i = 0; i < cnt; i++) {
        real pv = p0[i], gv = clip * gr[i];
        if (wd != 0) {
            if (decoupled) pv *= (real)1 - lr * wd;
            else gv += wd * pv;
        }
        m[i] = b1 * m[i] + ((real)1 - b1) * gv;
        v[i] = b2 * v[i] + ((real)1 - b2) * gv * gv;
        const real mhat = m[i] / bc1, vhat = v[i] / bc2;
        p[i] = pv - lr * mhat / (sqrt(vhat) + eps);
    }
}

/* x scalar (a sum of squares) -> min(1, clip_norm / (sqrt(x) + 1e-6)). */
KN_DEF(clip_coef) {
    const double c = clip_norm(n) / (sqrt((double)*(const real *)in[0]) + 1e-6);
    (void)g;
    *(real *)out = (real)(c < 1 ? c : 1);
}

/* (loss[, sumsq][, scale]) -> {coef, bad}, see ops.def. */
KN_DEF(step_gate) {
    const double loss = (double)*(const real *)in[0];
    const double ss = step_gate_has_sumsq(n) ? (double)*(const real *)in[1] : 0.0;
    const double scale = step_gate_scaled(n) ? (double)*(const real *)in[n->nin - 1] : 1.0;
    real *y = out;
    double c = 1.0;
    if (clip_norm(n) > 0) {
        const double v = clip_norm(n) / (sqrt(ss) / scale + 1e-6);
        if (v < 1) c = v; /* NaN: 1, like clip_coef */
    }
    y[0] = (real)(c / scale);
    y[1] = (real)((isfinite(loss) ? 0 : 1) + (isfinite(ss) ? 0 : 2));
    (void)g;
}

/* x -> sum(x*x), scalar, or one per block of sumsq_block consecutive elements. */
KN_DEF(sumsq) {
    const real *x = in[0];
    const int64_t cnt = kn_numel(kn_in(g, n, 0)), len = sumsq_block(n) > 0 ? sumsq_block(n) : cnt;
    const int64_t nb = sumsq_block(n) > 0 ? sumsq_blocks(cnt, len) : 1;
    for (int64_t r = 0; r < nb; r++) {
        double s = 0;
        for (int64_t i = r * len; i < (r + 1) * len && i < cnt; i++) s += (double)x[i] * (double)x[i];
        ((real *)out)[r] = (real)s;
    }
}

/* abs, clamp, pow, where, dropout, pw_bwd, ce_count */
#include "backend/cpu/kernels_pointwise.h"
/* ---- the layout family (slice, pad, concat, avg pooling, upsampling, EMA) - */

#include "backend/cpu/kernels_layout.h"
/* ---- op families in their own files -------------------------------------- */

#include "backend/cpu/kernels_transformer.h"
#include "backend/cpu/kernels_norm.h"

/* ---- the table ----------------------------------------------------------- */

const cpu_kernel_fn KN_CAT(cpu_kernels, KN_SUFFIX)[OP_COUNT] = {
#define MN_OP(E, nm, lo, hi, bwd, fl, wr, fu) [OP_##E] = KN(nm),
#include "graph/ops.def"
#undef MN_OP
};
_Static_assert(MN_ARRAY_LEN(KN_CAT(cpu_kernels, KN_SUFFIX)) == OP_COUNT,
               "cpu kernel table must have one entry per op of ops.def");
