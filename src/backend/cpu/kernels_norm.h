/* kernels_norm.h - CPU reference kernels of the row normalisations:
 * rms_norm, layer_norm, their dx helpers and the blocked weight-gradient
 * partials. Part of kernels_impl.h (included once per `real`).
 *
 * A row is the last axis of x, [rows, D]. Row statistics and every sum are
 * accumulated in double, whatever `real` is. rms_norm: mean = 0, rstd =
 * 1 / sqrt(mean(x^2) + eps); layer_norm: mean, then the variance of the
 * centred row (two passes), rstd = 1 / sqrt(var + eps). xhat = (x - mean) *
 * rstd.
 *
 * Does not: alias (no kernel here writes over an input), allocate.
 */

/* mean and rstd of one row of D elements. */
static void KN(norm_stats)(const real *x, int64_t D, double eps, bool centre, double *mean, double *rstd) {
    double m = 0, s = 0;
    if (centre) {
        for (int64_t j = 0; j < D; j++) m += (double)x[j];
        m /= (double)D;
    }
    for (int64_t j = 0; j < D; j++) {
        const double c = (double)x[j] - m;
        s += c * c;
    }
    *mean = m;
    *rstd = 1.0 / sqrt(s / (double)D + eps);
}

/* y = xhat [* w] [+ b] per row. */
static void KN(norm_fwd)(const mn_graph *g, const node *n, real *y, const real *x, const real *w, const real *b,
                         bool centre) {
    const node *X = kn_in(g, n, 0);
    const int64_t D = KN(lastdim)(X), rows = kn_numel(X) / D;
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * D;
        real *yr = y + r * D;
        double mean, rstd;
        KN(norm_stats)(xr, D, norm_attrs_of(n).eps, centre, &mean, &rstd);
        for (int64_t j = 0; j < D; j++) {
            double v = ((double)xr[j] - mean) * rstd;
            if (w) v *= (double)w[j];
            if (b) v += (double)b[j];
            yr[j] = (real)v;
        }
    }
}

/* (x[, weight]) */
KN_DEF(rms_norm) { KN(norm_fwd)(g, n, out, in[0], n->nin > 1 ? in[1] : NULL, NULL, false); }

/* (x[, weight][, bias]), ip[0] / ip[1] say which are present */
KN_DEF(layer_norm) {
    const mn_norm_attrs na = norm_attrs_of(n);
    const real *w = na.weight ? in[1] : NULL, *b = na.bias ? in[1 + na.weight] : NULL;
    KN(norm_fwd)(g, n, out, in[0], w, b, true);
}

/* (x, dy[, w]) -> dx = rstd * (g - [mean(g)] - xhat * mean(g * xhat)), g = dy [* w]. */
static void KN(norm_bwd)(const mn_graph *g, const node *n, real *dx, void *const in[NODE_MAX_IN], bool centre) {
    const node *X = kn_in(g, n, 0);
    const int64_t D = KN(lastdim)(X), rows = kn_numel(X) / D;
    const real *x = in[0], *dy = in[1], *w = n->nin > 2 ? in[2] : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const real *xr = x + r * D, *dyr = dy + r * D;
        double mean, rstd, sg = 0, sgx = 0;
        KN(norm_stats)(xr, D, norm_attrs_of(n).eps, centre, &mean, &rstd);
        for (int64_t j = 0; j < D; j++) {
            const double gj = (double)dyr[j] * (w ? (double)w[j] : 1.0);
            sg += gj;
            sgx += gj * ((double)xr[j] - mean) * rstd;
        }
        const double mg = centre ? sg / (double)D : 0, mgx = sgx / (double)D;
        for (int64_t j = 0; j < D; j++) {
            const double gj = (double)dyr[j] * (w ? (double)w[j] : 1.0);
            dx[r * D + j] = (real)(rstd * (gj - mg - ((double)xr[j] - mean) * rstd * mgx));
        }
    }
}

KN_DEF(rms_norm_bwd) { KN(norm_bwd)(g, n, out, in, false); }
KN_DEF(layer_norm_bwd) { KN(norm_bwd)(g, n, out, in, true); }

/* (x, dy) -> part [nblk, D]: part[b, j] = sum over the rows of block b
 * (ip[0] rows each) of dy * xhat. */
static void KN(norm_bwd_w)(const mn_graph *g, const node *n, real *part, const real *x, const real *dy, bool centre) {
    enum { KN_NORM_BLOCK_MAX = 1024 };
    const node *X = kn_in(g, n, 0);
    const int64_t D = KN(lastdim)(X), rows = kn_numel(X) / D, br = norm_block(n);
    double mean[KN_NORM_BLOCK_MAX], rstd[KN_NORM_BLOCK_MAX];
    for (int64_t b = 0, r0 = 0; r0 < rows; b++, r0 += br) {
        const int64_t nr = rows - r0 < br ? rows - r0 : br;
        for (int64_t i = 0; i < nr; i++) KN(norm_stats)(x + (r0 + i) * D, D, norm_attrs_of(n).eps, centre, &mean[i], &rstd[i]);
        for (int64_t j = 0; j < D; j++) {
            double s = 0;
            for (int64_t i = 0; i < nr; i++) {
                const int64_t at = (r0 + i) * D + j;
                s += (double)dy[at] * ((double)x[at] - mean[i]) * rstd[i];
            }
            part[b * D + j] = (real)s;
        }
    }
}

KN_DEF(rms_norm_bwd_w) { KN(norm_bwd_w)(g, n, out, in[0], in[1], false); }
KN_DEF(layer_norm_bwd_w) { KN(norm_bwd_w)(g, n, out, in[0], in[1], true); }

/* bn_mean (x [N,C,H,W]) -> [C] and bn_meansq (d) -> [C]: the mean of x or
 * of d^2 per channel, in double, in (n, h, w) order. */
static void KN(bn_moment)(const mn_graph *g, const node *n, real *y, const real *x, bool sq) {
    const node *X = kn_in(g, n, 0);
    const int64_t N = X->shape[0], C = X->shape[1], HW = X->shape[2] * X->shape[3];
    const double cnt = (double)N * (double)HW;
    for (int64_t c = 0; c < C; c++) {
        double s = 0;
        for (int64_t b = 0; b < N; b++)
            for (int64_t p = 0; p < HW; p++) {
                const double v = (double)x[(b * C + c) * HW + p];
                s += sq ? v * v : v;
            }
        y[c] = (real)(s / cnt);
    }
}
KN_DEF(bn_mean) { KN(bn_moment)(g, n, out, in[0], false); }
KN_DEF(bn_meansq) { KN(bn_moment)(g, n, out, in[0], true); }
