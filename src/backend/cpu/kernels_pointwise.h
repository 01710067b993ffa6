/* kernels_pointwise.h - CPU reference kernels of the parameterised
 * pointwise ops: abs, clamp, pow, where, dropout and the helpers pw_bwd and
 * ce_count. Included by kernels_impl.h (so twice: real = float and double);
 * the same conventions apply (no include guard, tgmath math, out may alias
 * an input of its shape for every kernel here but ce_count).
 *
 * Does not: check parameters or shapes (graph/shape.c did).
 */

/* y = f(x) elementwise; y may alias x. */
#define KN_PW_UNARY(nm, EXPR)                                                                      \
    KN_DEF(nm) {                                                                                   \
        const real *x = in[0];                                                                     \
        real *y = out;                                                                             \
        const int64_t cnt = kn_numel(n);                                                           \
        const mn_pw_attrs a = pw_attrs_of(n);                                                      \
        (void)g, (void)a;                                                                          \
        for (int64_t i = 0; i < cnt; i++) {                                                        \
            const real v = x[i];                                                                   \
            y[i] = (EXPR);                                                                         \
        }                                                                                          \
    }

KN_PW_UNARY(abs, fabs(v))
/* NaN passes through (both comparisons are false). */
KN_PW_UNARY(clamp, v < (real)a.min ? (real)a.min : (v > (real)a.max ? (real)a.max : v))
KN_PW_UNARY(pow, pow(v, (real)a.exponent))
#undef KN_PW_UNARY

/* (cond, a, b) -> cond != 0 ? a : b, all three broadcast to the node's shape. */
KN_DEF(where) {
    int64_t dim[4], st[3][4];
    kn_pad4(dim, n->rank, n->shape);
    for (int j = 0; j < 3; j++) kn_bcast_strides(st[j], kn_in(g, n, j)->rank, kn_in(g, n, j)->shape);
    const real *c = in[0], *a = in[1], *b = in[2];
    real *y = out;
    int64_t k = 0;
    for (int64_t i0 = 0; i0 < dim[0]; i0++)
        for (int64_t i1 = 0; i1 < dim[1]; i1++)
            for (int64_t i2 = 0; i2 < dim[2]; i2++)
                for (int64_t i3 = 0; i3 < dim[3]; i3++, k++) {
                    int64_t o[3];
                    for (int j = 0; j < 3; j++) o[j] = i0 * st[j][0] + i1 * st[j][1] + i2 * st[j][2] + i3 * st[j][3];
                    y[k] = c[o[0]] != 0 ? a[o[1]] : b[o[2]];
                }
}

/* (x[, counter]) -> x * 1/(1-p) where the element's hash is >= the
 * threshold, else 0 (graph/pointwise.h defines the hash). y may alias x. */
KN_DEF(dropout) {
    const mn_dropout_attrs a = dropout_attrs_of(n);
    uint32_t key = pw_dropout_key(a.seed);
    if (n->nin > 1) key = pw_dropout_key_counter(key, *(const int32_t *)in[1]);
    const uint64_t thr = (uint64_t)a.threshold;
    const real scale = (real)pw_dropout_scale(a.p);
    const real *x = in[0];
    real *y = out;
    (void)g;
    for (int64_t i = 0, cnt = kn_numel(n); i < cnt; i++)
        y[i] = (uint64_t)pw_dropout_hash(key, (uint64_t)i) >= thr ? x[i] * scale : (real)0;
}

/* (x, dy) -> dy * f'(x) for the forward op ABS (sign x, 0 at 0), CLAMP (1 strictly
 * inside (min, max), else 0), POW (p x^(p-1); 0 for p == 0). dx may alias
 * x or dy. */
KN_DEF(pw_bwd) {
    const real *x = in[0], *dy = in[1];
    real *dx = out;
    const int64_t cnt = kn_numel(n);
    const mn_pw_attrs a = pw_attrs_of(n);
    (void)g;
    switch (bwd_of(n)) {
    case OP_ABS:
        for (int64_t i = 0; i < cnt; i++) {
            const real v = x[i], s = v > 0 ? (real)1 : (v < 0 ? (real)-1 : (real)0);
            dx[i] = dy[i] * s;
        }
        break;
    case OP_CLAMP:
        for (int64_t i = 0; i < cnt; i++) dx[i] = x[i] > (real)a.min && x[i] < (real)a.max ? dy[i] : (real)0;
        break;
    case OP_POW:
    {
        const real p = (real)a.exponent, pm1 = (real)(a.exponent - 1.0);
        for (int64_t i = 0; i < cnt; i++) dx[i] = p == 0 ? (real)0 : dy[i] * (p * pow(x[i], pm1));
    }
        break;
    default: MN_ASSERT(!"pw_bwd: the forward op is not abs, clamp or pow");
    }
}

/* labels i32 [B] -> number of labels != ignore_index (f32 scalar). */
KN_DEF(ce_count) {
    const int32_t *lab = in[0];
    int64_t c = 0;
    for (int64_t b = 0, cnt = kn_numel(kn_in(g, n, 0)); b < cnt; b++) c += lab[b] != ce_attrs_of(n).ignore_index;
    *(real *)out = (real)c;
}
