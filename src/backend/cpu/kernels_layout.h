/* kernels_layout.h - CPU reference kernels of the layout family: slice, pad,
 * concat, average pooling (+ backward), nearest upsampling, and the
 * running-statistics update of batch norm.
 *
 * Included by kernels_impl.h inside each of its two instantiations (real =
 * float / double), so it has no include guard and every helper is named
 * through KN(). Shapes come from the nodes (see ops.def); pooling sums
 * accumulate in double. Does not: check shapes, allocate, or alias (every
 * kernel here but ema_update needs out distinct from its inputs; ema_update
 * writes over input 0).
 */

/* Right-aligned 4-d view of a node's shape (leading dims 1). */
static void KN(dims4)(int64_t d[4], const node *t) { kn_pad4(d, t->rank, t->shape); }

/* x viewed as [outer, D, inner] around `axis`; returns D. */
static int64_t KN(axis_view)(const node *x, int64_t axis, int64_t *outer, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < x->rank; i++) {
        if (i < axis) *outer *= x->shape[i];
        else if (i > axis) *inner *= x->shape[i];
    }
    return x->shape[axis];
}

/* x -> x[..., start:start+length, ...] on the slice's axis: one contiguous
 * block of length*inner elements per outer index. */
KN_DEF(slice) {
    int64_t outer, inner;
    const mn_slice_attrs a = slice_attrs_of(n);
    const int64_t D = KN(axis_view)(kn_in(g, n, 0), a.axis, &outer, &inner);
    const int64_t start = a.start, len = a.length;
    const real *x = in[0];
    real *y = out;
    for (int64_t o = 0; o < outer; o++)
        memcpy(y + o * len * inner, x + (o * D + start) * inner, (size_t)(len * inner) * sizeof(real));
}

/* Zero padding: y[c] = x[c - before] where that lies inside x, else 0. */
KN_DEF(pad) {
    const node *X = kn_in(g, n, 0);
    int64_t xd[4], yd[4], bf[4] = {0, 0, 0, 0};
    KN(dims4)(xd, X);
    KN(dims4)(yd, n);
    const mn_pad_attrs pa = pad_attrs_of(n);
    for (int i = 0; i < X->rank; i++) bf[4 - X->rank + i] = pa.before[i];
    const real *x = in[0];
    real *y = out;
    int64_t k = 0;
    for (int64_t c0 = 0; c0 < yd[0]; c0++)
        for (int64_t c1 = 0; c1 < yd[1]; c1++)
            for (int64_t c2 = 0; c2 < yd[2]; c2++) {
                const int64_t s0 = c0 - bf[0], s1 = c1 - bf[1], s2 = c2 - bf[2];
                const bool row = s0 >= 0 && s0 < xd[0] && s1 >= 0 && s1 < xd[1] && s2 >= 0 && s2 < xd[2];
                const real *xr = row ? x + ((s0 * xd[1] + s1) * xd[2] + s2) * xd[3] : x;
                for (int64_t c3 = 0; c3 < yd[3]; c3++, k++) {
                    const int64_t s3 = c3 - bf[3];
                    y[k] = row && s3 >= 0 && s3 < xd[3] ? xr[s3] : (real)0;
                }
            }
}

/* Inputs joined along the concat axis: per outer index, each input's block in turn. */
KN_DEF(concat) {
    int64_t outer, inner;
    const int64_t axis = concat_axis(n);
    const int64_t L = KN(axis_view)(n, axis, &outer, &inner);
    real *y = out;
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = 0;
        for (int k = 0; k < n->nin; k++) {
            const int64_t lk = kn_in(g, n, k)->shape[axis];
            memcpy(y + (o * L + off) * inner, (const real *)in[k] + o * lk * inner, (size_t)(lk * inner) * sizeof(real));
            off += lk;
        }
    }
}

/* ---- average pooling: kernel, stride, pad and divisor of mn_pool_attrs ---- */

/* Divisor of the window at (oh, ow) over an H x W plane: PyTorch's
 * avg_pool2d. Mode 1 (count_include_pad): the window clipped to the padded
 * plane (the full kernel area without ceil_mode); mode 0: its cells inside
 * the plane; mode 2: 1 (sum pooling). */
static int64_t KN(avg_div)(const node *n, int64_t H, int64_t W, int64_t oh, int64_t ow) {
    const mn_pool_attrs a = pool_attrs_of(n);
    const int64_t hs = oh * a.stride[0] - a.pad[0], ws = ow * a.stride[1] - a.pad[1];
    int64_t he = hs + a.kernel[0], we = ws + a.kernel[1];
    if (a.divisor == POOL_DIV_NONE) return 1;
    if (a.divisor == POOL_DIV_AREA) {
        const int64_t hp = H + a.pad[0], wp = W + a.pad[1];
        return ((he < hp ? he : hp) - hs) * ((we < wp ? we : wp) - ws);
    }
    he = he < H ? he : H;
    we = we < W ? we : W;
    return (he - (hs > 0 ? hs : 0)) * (we - (ws > 0 ? ws : 0));
}

/* x [N,C,H,W] -> y [N,C,OH,OW]: the window's sum (double) over the divisor. */
KN_DEF(avgpool2d) {
    const node *X = kn_in(g, n, 0);
    const int64_t H = X->shape[2], W = X->shape[3], OH = n->shape[2], OW = n->shape[3];
    const int64_t planes = X->shape[0] * X->shape[1];
    const mn_pool_attrs a = pool_attrs_of(n);
    for (int64_t p = 0; p < planes; p++) {
        const real *xp = (const real *)in[0] + p * H * W;
        real *yp = (real *)out + p * OH * OW;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                const int64_t hs = oh * a.stride[0] - a.pad[0], ws = ow * a.stride[1] - a.pad[1];
                const int64_t h0 = hs > 0 ? hs : 0, w0 = ws > 0 ? ws : 0;
                const int64_t h1 = hs + a.kernel[0] < H ? hs + a.kernel[0] : H;
                const int64_t w1 = ws + a.kernel[1] < W ? ws + a.kernel[1] : W;
                double s = 0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) s += xp[ih * W + iw];
                yp[oh * OW + ow] = (real)(s / (double)KN(avg_div)(n, H, W, oh, ow));
            }
    }
}

/* Output positions o in [*lo, *hi] whose window [o*s - p, o*s - p + k) holds i. */
static void KN(win_range)(int64_t i, int64_t s, int64_t p, int64_t k, int64_t osz, int64_t *lo, int64_t *hi) {
    const int64_t first = i + p - k + 1; /* o*s >= first */
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = (i + p) / s;
    if (*hi > osz - 1) *hi = osz - 1;
}

/* (dy [N,C,OH,OW]) -> dx [N,C,H,W]: a gather per input cell over the windows
 * holding it, in increasing (oh, ow), each dy over its window's divisor. */
KN_DEF(avgpool2d_bwd) {
    const node *DY = kn_in(g, n, 0);
    const int64_t H = n->shape[2], W = n->shape[3], OH = DY->shape[2], OW = DY->shape[3];
    const int64_t planes = n->shape[0] * n->shape[1];
    const mn_pool_attrs a = pool_attrs_of(n);
    for (int64_t p = 0; p < planes; p++) {
        const real *dyp = (const real *)in[0] + p * OH * OW;
        real *dxp = (real *)out + p * H * W;
        for (int64_t ih = 0; ih < H; ih++) {
            int64_t oh0, oh1;
            KN(win_range)(ih, a.stride[0], a.pad[0], a.kernel[0], OH, &oh0, &oh1);
            for (int64_t iw = 0; iw < W; iw++) {
                int64_t ow0, ow1;
                KN(win_range)(iw, a.stride[1], a.pad[1], a.kernel[1], OW, &ow0, &ow1);
                double s = 0;
                for (int64_t oh = oh0; oh <= oh1; oh++)
                    for (int64_t ow = ow0; ow <= ow1; ow++)
                        s += (double)dyp[oh * OW + ow] / (double)KN(avg_div)(n, H, W, oh, ow);
                dxp[ih * W + iw] = (real)s;
            }
        }
    }
}

/* x [N,C,H,W] -> y [N,C,H*sh,W*sw], y[p,h,w] = x[p,h/sh,w/sw]. */
KN_DEF(upsample_nearest2d) {
    const node *X = kn_in(g, n, 0);
    const int64_t H = X->shape[2], W = X->shape[3], OH = n->shape[2], OW = n->shape[3];
    const int64_t sh = upsample_attrs_of(n).scale[0], sw = upsample_attrs_of(n).scale[1], planes = X->shape[0] * X->shape[1];
    for (int64_t p = 0; p < planes; p++) {
        const real *xp = (const real *)in[0] + p * H * W;
        real *yp = (real *)out + p * OH * OW;
        for (int64_t h = 0; h < OH; h++)
            for (int64_t w = 0; w < OW; w++) yp[h * OW + w] = xp[(h / sh) * W + w / sw];
    }
}

/* (running, value[, gate]) -> running = (1 - m) * running + m * (scale * value),
 * m = momentum, scale of mn_ema_attrs; out is running's storage (in place). A gate
 * (STEP_GATE) whose element 1 is not 0 skips the update. */
KN_DEF(ema_update) {
    const real *r = in[0], *v = in[1];
    real *y = out;
    const mn_ema_attrs a = ema_attrs_of(n);
    const real keep = (real)(1.0 - a.momentum), m = (real)a.momentum, sc = (real)a.scale;
    (void)g;
    if (n->nin > 2 && ((const real *)in[2])[1] != 0) {
        if (y != r) memcpy(y, r, (size_t)kn_numel(n) * sizeof(real));
        return;
    }
    for (int64_t i = 0, cnt = kn_numel(n); i < cnt; i++) y[i] = keep * r[i] + m * (sc * v[i]);
}
