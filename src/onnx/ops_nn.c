/* ops_nn.c - ONNX convolution, pooling, normalisation, resizing and loss
 * operators.
 *
 * 1-D forms run as 2-D over [N, C, 1, L]. Padding the meganeura ops cannot
 * express (asymmetric, SAME_* auto padding, pooling pads above half the
 * kernel, ceil_mode) becomes an explicit mn_pad: zeros for convolutions and
 * average pooling (whose divisor is then a constant computed here), and
 * zeros plus a -inf mask for max pooling, so padded cells never win.
 * BatchNormalization is inference-mode (the running statistics are frozen
 * parameters), Resize multiplies by constant interpolation matrices (one
 * per resized axis: nearest, linear and cubic with ONNX's coordinate
 * transformations), the losses build one-hot rows with mn_embedding over a
 * constant (weighted) identity.
 *
 * Does not: 3-D convolution or pooling (rank 5 tensors), pooling dilations,
 * MaxPool's Indices output, batch norm in training mode.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

static bool is(const ox_ctx *c, const char *name) { return strcmp(c->node->op_type, name) == 0; }

/* spatial parameters shared by Conv, ConvTranspose and the pools (1 or 2
 * spatial axes) */
typedef struct {
    int ns;               /* spatial axes */
    int64_t in[2];        /* input sizes */
    int64_t k[2], s[2], d[2];
    int64_t pb[2], pe[2]; /* pads at the beginning / end */
    const char *auto_pad;
} spatial;

static mn_status spatial_attrs(ox_ctx *c, spatial *p, const int64_t *wk, bool need_kernel, bool dil) {
    int64_t v[4];
    int n;
    for (int i = 0; i < p->ns; i++) {
        p->k[i] = wk ? wk[i] : 0;
        p->s[i] = 1;
        p->d[i] = 1;
        p->pb[i] = p->pe[i] = 0;
    }
    OX_CHECK(ox_attr_ints(c, "kernel_shape", v, 4, &n));
    if (n >= 0) {
        if (n != p->ns) return n > 2 ? ox_unsup(c, "%d-D kernels (1-D and 2-D only)", n) : ox_fail(c, MN_E_SHAPE, "kernel_shape has %d entries", n);
        for (int i = 0; i < n; i++) {
            if (wk && wk[i] != v[i]) return ox_fail(c, MN_E_SHAPE, "kernel_shape disagrees with the weights");
            p->k[i] = v[i];
        }
    } else if (need_kernel) return ox_fail(c, MN_E_FORMAT, "kernel_shape is required");
    OX_CHECK(ox_attr_ints(c, "strides", v, 4, &n));
    if (n >= 0) {
        if (n != p->ns) return ox_fail(c, MN_E_SHAPE, "strides has %d entries", n);
        for (int i = 0; i < n; i++) p->s[i] = v[i];
    }
    if (dil || c->ver >= 10) {
        OX_CHECK(ox_attr_ints(c, "dilations", v, 4, &n));
        if (n >= 0) {
            if (n != p->ns) return ox_fail(c, MN_E_SHAPE, "dilations has %d entries", n);
            for (int i = 0; i < n; i++) {
                p->d[i] = v[i];
                if (!dil && v[i] != 1) return ox_unsup(c, "dilations other than 1 in pooling");
            }
        }
    }
    OX_CHECK(ox_attr_ints(c, "pads", v, 4, &n));
    if (n >= 0) {
        if (n != 2 * p->ns) return ox_fail(c, MN_E_SHAPE, "pads has %d entries", n);
        for (int i = 0; i < p->ns; i++) {
            p->pb[i] = v[i];
            p->pe[i] = v[i + p->ns];
        }
    }
    OX_CHECK(ox_attr_string(c, "auto_pad", "NOTSET", &p->auto_pad));
    for (int i = 0; i < p->ns; i++) {
        if (p->k[i] < 1 || p->s[i] < 1 || p->d[i] < 1 || p->pb[i] < 0 || p->pe[i] < 0 || p->k[i] > (1 << 20) ||
            p->s[i] > (1 << 20) || p->d[i] > (1 << 20) || p->pb[i] > (1 << 20) || p->pe[i] > (1 << 20))
            return ox_fail(c, MN_E_INVALID, "kernel, strides, dilations or pads out of range");
    }
    return MN_OK;
}

/* SAME_UPPER / SAME_LOWER / VALID for a forward window op */
static mn_status auto_pads(ox_ctx *c, spatial *p) {
    const char *ap = p->auto_pad;
    if (strcmp(ap, "NOTSET") == 0) return MN_OK;
    bool upper = strcmp(ap, "SAME_UPPER") == 0, lower = strcmp(ap, "SAME_LOWER") == 0;
    if (!upper && !lower && strcmp(ap, "VALID") != 0) return ox_fail(c, MN_E_INVALID, "auto_pad '%s'", ap);
    for (int i = 0; i < p->ns; i++) {
        if (!upper && !lower) {
            p->pb[i] = p->pe[i] = 0;
            continue;
        }
        int64_t out = (p->in[i] + p->s[i] - 1) / p->s[i];
        int64_t total = (out - 1) * p->s[i] + (p->k[i] - 1) * p->d[i] + 1 - p->in[i];
        if (total < 0) total = 0;
        p->pb[i] = upper ? total / 2 : total - total / 2;
        p->pe[i] = total - p->pb[i];
    }
    return MN_OK;
}

/* x viewed as [N, C, H, W] (1-D: H = 1) */
static mn_status as_4d(ox_ctx *c, mn_tensor x, int rank, const int64_t *d, mn_tensor *y) {
    if (rank == 4) {
        *y = x;
        return MN_OK;
    }
    int64_t d4[4] = {d[0], d[1], 1, d[2]};
    return ox_reshape(c, y, x, 4, d4);
}

/* spatial axis i of the 2-D view (1-D: the W axis) */
static int ax2(const spatial *p, int i) { return p->ns == 1 ? 1 : i; }

/* ---- Conv ------------------------------------------------------------------- */

static mn_status op_conv(ox_ctx *c) {
    ox_value *x = ox_in(c, 0), *w = ox_in(c, 1);
    if (x->rank != 3 && x->rank != 4)
        return x->rank == 5 ? ox_unsup(c, "3-D convolution") : ox_fail(c, MN_E_SHAPE, "input of rank %d", x->rank);
    if (w->rank != x->rank) return ox_fail(c, MN_E_SHAPE, "weights of rank %d", w->rank);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s Conv (float only)", mn_onnx_dtype_name(x->dtype));
    spatial p = {0};
    p.ns = x->rank - 2;
    for (int i = 0; i < p.ns; i++) p.in[i] = x->dims[2 + i];
    OX_CHECK(spatial_attrs(c, &p, w->dims + 2, false, true));
    int64_t group;
    OX_CHECK(ox_attr_int(c, "group", 1, &group));
    if (group < 1 || x->dims[1] % group || w->dims[0] % group || w->dims[1] * group != x->dims[1])
        return ox_fail(c, MN_E_SHAPE, "group %lld does not fit %lld input and %lld output channels", (long long)group,
                       (long long)x->dims[1], (long long)w->dims[0]);
    OX_CHECK(auto_pads(c, &p));
    mn_tensor xt, wt, bt = MN_NONE, y;
    OX_CHECK(ox_in_f32(c, 0, &xt));
    OX_CHECK(ox_in_f32(c, 1, &wt));
    if (ox_has_in(c, 2)) OX_CHECK(ox_in_f32(c, 2, &bt));
    OX_CHECK(as_4d(c, xt, x->rank, x->dims, &xt));
    OX_CHECK(as_4d(c, wt, w->rank, w->dims, &wt));
    mn_conv2d_params cp = {{1, 1}, {0, 0}, {1, 1}, (int)group};
    bool sym = true;
    for (int i = 0; i < p.ns; i++) sym = sym && p.pb[i] == p.pe[i];
    if (!sym) {
        int64_t b4[4] = {0}, a4[4] = {0};
        for (int i = 0; i < p.ns; i++) {
            b4[2 + ax2(&p, i)] = p.pb[i];
            a4[2 + ax2(&p, i)] = p.pe[i];
        }
        OX_TRY(c, mn_pad(c->g, &xt, xt, b4, a4));
    }
    for (int i = 0; i < p.ns; i++) {
        int a = ax2(&p, i);
        cp.stride[a] = (int)p.s[i];
        cp.dilation[a] = (int)p.d[i];
        cp.padding[a] = sym ? (int)p.pb[i] : 0;
    }
    OX_TRY(c, mn_conv2d(c->g, &y, xt, wt, bt, &cp));
    if (x->rank == 3) {
        int r;
        int64_t d[4];
        OX_CHECK(ox_shape(c, y, &r, d));
        int64_t d3[3] = {d[0], d[1], d[3]};
        OX_CHECK(ox_reshape(c, &y, y, 3, d3));
    }
    return ox_set_out(c, 0, y, x->dtype);
}

static mn_status op_conv_transpose(ox_ctx *c) {
    ox_value *x = ox_in(c, 0), *w = ox_in(c, 1);
    if (x->rank != 3 && x->rank != 4)
        return x->rank == 5 ? ox_unsup(c, "3-D transposed convolution") : ox_fail(c, MN_E_SHAPE, "input of rank %d", x->rank);
    if (w->rank != x->rank) return ox_fail(c, MN_E_SHAPE, "weights of rank %d", w->rank);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s ConvTranspose (float only)", mn_onnx_dtype_name(x->dtype));
    spatial p = {0};
    p.ns = x->rank - 2;
    for (int i = 0; i < p.ns; i++) p.in[i] = x->dims[2 + i];
    OX_CHECK(spatial_attrs(c, &p, w->dims + 2, false, true));
    int64_t group, op[2] = {0, 0}, os[2];
    int nop, nos;
    OX_CHECK(ox_attr_int(c, "group", 1, &group));
    OX_CHECK(ox_attr_ints(c, "output_padding", op, 2, &nop));
    OX_CHECK(ox_attr_ints(c, "output_shape", os, 2, &nos));
    if (nop < 0) op[0] = op[1] = 0;
    else if (nop != p.ns) return ox_fail(c, MN_E_SHAPE, "output_padding has %d entries", nop);
    if (nos >= 0 && nos != p.ns) return ox_fail(c, MN_E_SHAPE, "output_shape has %d entries", nos);
    for (int i = 0; i < nos; i++)
        if (os[i] < 1 || os[i] > (1 << 24)) return ox_fail(c, MN_E_SHAPE, "output_shape %lld", (long long)os[i]);
    for (int i = 0; nop >= 0 && i < nop; i++)
        if (op[i] < 0 || op[i] > (1 << 20)) return ox_fail(c, MN_E_INVALID, "output_padding %lld", (long long)op[i]);
    int64_t C = x->dims[1];
    if (group < 1 || C % group || w->dims[0] != C) return ox_fail(c, MN_E_SHAPE, "weights [%lld, ...] for %lld channels", (long long)w->dims[0], (long long)C);
    int64_t out[2];
    bool upper = strcmp(p.auto_pad, "SAME_UPPER") == 0, lower = strcmp(p.auto_pad, "SAME_LOWER") == 0;
    for (int i = 0; i < p.ns; i++) {
        if (op[i] < 0 || op[i] >= (p.s[i] > p.d[i] ? p.s[i] : p.d[i]))
            return ox_fail(c, MN_E_INVALID, "output_padding %lld", (long long)op[i]);
        int64_t full = p.s[i] * (p.in[i] - 1) + op[i] + (p.k[i] - 1) * p.d[i] + 1;
        if (nos >= 0 || upper || lower) {
            int64_t want = nos >= 0 ? os[i] : p.in[i] * p.s[i];
            int64_t total = full - want; /* negative: zeros appended (an implied output padding) */
            /* the extra cell goes to the end for SAME_UPPER (and output_shape), to the beginning for SAME_LOWER */
            p.pb[i] = total < 0 ? 0 : lower ? total - total / 2 : total / 2;
            p.pe[i] = total - p.pb[i];
        } else if (strcmp(p.auto_pad, "NOTSET") && strcmp(p.auto_pad, "VALID"))
            return ox_fail(c, MN_E_INVALID, "auto_pad '%s'", p.auto_pad);
        out[i] = full - p.pb[i] - p.pe[i];
        if (out[i] < 1) return ox_fail(c, MN_E_SHAPE, "pads leave no output");
    }
    mn_tensor xt, wt, bt = MN_NONE, y;
    OX_CHECK(ox_in_f32(c, 0, &xt));
    OX_CHECK(ox_in_f32(c, 1, &wt));
    if (ox_has_in(c, 2)) OX_CHECK(ox_in_f32(c, 2, &bt));
    OX_CHECK(as_4d(c, xt, x->rank, x->dims, &xt));
    OX_CHECK(as_4d(c, wt, w->rank, w->dims, &wt));
    mn_conv_transpose2d_params tp = {{1, 1}, {0, 0}, {0, 0}, {1, 1}, (int)group};
    /* mn_conv_transpose2d takes symmetric padding and output_padding < stride;
     * other cases: the full result, cropped (and zero-extended) */
    bool direct = true;
    for (int i = 0; i < p.ns; i++) direct = direct && p.pb[i] == p.pe[i] && p.pb[i] >= 0 && op[i] < p.s[i];
    for (int i = 0; i < p.ns; i++) {
        int a = ax2(&p, i);
        tp.stride[a] = (int)p.s[i];
        tp.dilation[a] = (int)p.d[i];
        tp.padding[a] = direct ? (int)p.pb[i] : 0;
        tp.output_padding[a] = direct ? (int)op[i] : 0;
    }
    OX_TRY(c, mn_conv_transpose2d(c->g, &y, xt, wt, direct ? bt : MN_NONE, &tp));
    if (!direct) {
        for (int i = 0; i < p.ns; i++) {
            int a = 2 + ax2(&p, i);
            int64_t full0 = p.s[i] * (p.in[i] - 1) + (p.k[i] - 1) * p.d[i] + 1; /* without output_padding */
            int64_t keep = full0 - p.pb[i];
            if (keep > out[i]) keep = out[i];
            if (p.pb[i] || keep != full0) OX_TRY(c, mn_slice(c->g, &y, y, a, p.pb[i], keep));
            if (keep < out[i]) {
                int64_t b4[4] = {0}, a4[4] = {0};
                a4[a] = out[i] - keep;
                OX_TRY(c, mn_pad(c->g, &y, y, b4, a4));
            }
        }
        if (bt != MN_NONE) {
            int64_t bd[3] = {w->dims[1] * group, 1, 1};
            mn_tensor b3;
            OX_CHECK(ox_reshape(c, &b3, bt, 3, bd));
            OX_TRY(c, mn_add(c->g, &y, y, b3));
        }
    }
    if (x->rank == 3) {
        int r;
        int64_t d[4];
        OX_CHECK(ox_shape(c, y, &r, d));
        int64_t d3[3] = {d[0], d[1], d[3]};
        OX_CHECK(ox_reshape(c, &y, y, 3, d3));
    }
    return ox_set_out(c, 0, y, x->dtype);
}

/* ---- pooling ------------------------------------------------------------------ */

static mn_status op_pool(ox_ctx *c) {
    bool maxp = is(c, "MaxPool");
    ox_value *x = ox_in(c, 0);
    if (x->rank != 3 && x->rank != 4)
        return x->rank == 5 ? ox_unsup(c, "3-D pooling") : ox_fail(c, MN_E_SHAPE, "input of rank %d", x->rank);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s pooling (float only)", mn_onnx_dtype_name(x->dtype));
    if (ox_has_out(c, 1)) return ox_unsup(c, "the Indices output");
    spatial p = {0};
    p.ns = x->rank - 2;
    for (int i = 0; i < p.ns; i++) p.in[i] = x->dims[2 + i];
    OX_CHECK(spatial_attrs(c, &p, NULL, true, false));
    int64_t ceil_mode = 0, cip = 0;
    if (c->ver >= 10) OX_CHECK(ox_attr_int(c, "ceil_mode", 0, &ceil_mode));
    if (!maxp) OX_CHECK(ox_attr_int(c, "count_include_pad", 0, &cip));
    if (maxp) ox_attr_ignore(c, "storage_order"); /* only the Indices output depends on it */
    OX_CHECK(auto_pads(c, &p));
    /* output sizes; ceil_mode extends the end (cells that are not padding) */
    int64_t out[2], ext[2];
    for (int i = 0; i < p.ns; i++) {
        int64_t span = p.in[i] + p.pb[i] + p.pe[i] - p.k[i];
        if (span < 0) return ox_fail(c, MN_E_SHAPE, "kernel larger than the padded input");
        out[i] = ceil_mode ? (span + p.s[i] - 1) / p.s[i] + 1 : span / p.s[i] + 1;
        if (ceil_mode && (out[i] - 1) * p.s[i] >= p.in[i] + p.pb[i]) out[i]--;
        ext[i] = (out[i] - 1) * p.s[i] + p.k[i] - (p.in[i] + p.pb[i] + p.pe[i]);
        if (ext[i] < 0) ext[i] = 0;
    }
    mn_tensor t, y;
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_CHECK(as_4d(c, t, x->rank, x->dims, &t));
    mn_pool2d_params pp = {{1, 1}, {1, 1}, {0, 0}};
    bool direct = true;
    for (int i = 0; i < p.ns; i++)
        direct = direct && p.pb[i] == p.pe[i] && 2 * p.pb[i] <= p.k[i] && ext[i] == 0;
    for (int i = 0; i < p.ns; i++) {
        int a = ax2(&p, i);
        pp.kernel[a] = (int)p.k[i];
        pp.stride[a] = (int)p.s[i];
        pp.padding[a] = direct ? (int)p.pb[i] : 0;
    }
    int64_t N = x->dims[0], C = x->dims[1];
    int64_t H = p.ns == 2 ? p.in[0] : 1, W = p.in[p.ns - 1];
    if (direct) {
        if (maxp) OX_TRY(c, mn_max_pool2d(c->g, &y, t, &pp));
        else OX_TRY(c, mn_avg_pool2d(c->g, &y, t, &pp, cip != 0));
    } else {
        int64_t b4[4] = {0}, a4[4] = {0};
        for (int i = 0; i < p.ns; i++) {
            b4[2 + ax2(&p, i)] = p.pb[i];
            a4[2 + ax2(&p, i)] = p.pe[i] + ext[i];
        }
        int64_t Hp = H + b4[2] + a4[2], Wp = W + b4[3] + a4[3];
        OX_TRY(c, mn_pad(c->g, &t, t, b4, a4));
        int64_t OH = p.ns == 2 ? out[0] : 1, OW = out[p.ns - 1];
        if (maxp) {
            ox_host m;
            int64_t md[4] = {1, 1, Hp, Wp};
            char sub[128];
            mn_status st = ox_host_alloc(&m, MN_ONNX_FLOAT, 4, md, sub, sizeof sub);
            if (st) return ox_fail(c, st, "%s", sub);
            for (int64_t i = 0; i < Hp; i++)
                for (int64_t j = 0; j < Wp; j++)
                    m.f[i * Wp + j] = (i < b4[2] || i >= b4[2] + H || j < b4[3] || j >= b4[3] + W) ? -INFINITY : 0;
            mn_tensor mt;
            st = ox_const_tensor(c, &m, &mt);
            ox_host_free(&m);
            if (st) return st;
            OX_TRY(c, mn_add(c->g, &t, t, mt));
            OX_TRY(c, mn_max_pool2d(c->g, &y, t, &pp));
        } else {
            /* the mean over the whole window, rescaled by area / cells counted */
            OX_TRY(c, mn_avg_pool2d(c->g, &y, t, &pp, true));
            ox_host m;
            int64_t md[4] = {1, 1, OH, OW};
            char sub[128];
            mn_status st = ox_host_alloc(&m, MN_ONNX_FLOAT, 4, md, sub, sizeof sub);
            if (st) return ox_fail(c, st, "%s", sub);
            double area = (double)pp.kernel[0] * pp.kernel[1];
            /* counted rows: inside x, or (count_include_pad) inside the explicit pads */
            int64_t lo_h = cip ? 0 : b4[2], hi_h = cip ? b4[2] + H + (p.ns == 2 ? p.pe[0] : 0) : b4[2] + H;
            int64_t lo_w = cip ? 0 : b4[3], hi_w = cip ? b4[3] + W + p.pe[p.ns - 1] : b4[3] + W;
            for (int64_t i = 0; i < OH; i++)
                for (int64_t j = 0; j < OW; j++) {
                    int64_t h0 = i * pp.stride[0], w0 = j * pp.stride[1];
                    int64_t ch = 0, cw = 0;
                    for (int64_t u = h0; u < h0 + pp.kernel[0]; u++) ch += u >= lo_h && u < hi_h;
                    for (int64_t u = w0; u < w0 + pp.kernel[1]; u++) cw += u >= lo_w && u < hi_w;
                    m.f[i * OW + j] = ch * cw != 0 ? area / (double)(ch * cw) : 0;
                }
            mn_tensor mt;
            st = ox_const_tensor(c, &m, &mt);
            ox_host_free(&m);
            if (st) return st;
            OX_TRY(c, mn_mul(c->g, &y, y, mt));
        }
    }
    if (x->rank == 3) {
        int r;
        int64_t d[4];
        OX_CHECK(ox_shape(c, y, &r, d));
        int64_t d3[3] = {N, C, d[3]};
        OX_CHECK(ox_reshape(c, &y, y, 3, d3));
    }
    return ox_set_out(c, 0, y, x->dtype);
}

static mn_status op_global_pool(ox_ctx *c) {
    bool maxp = is(c, "GlobalMaxPool");
    ox_value *x = ox_in(c, 0);
    if (x->rank < 3) return ox_fail(c, MN_E_SHAPE, "input of rank %d", x->rank);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s pooling (float only)", mn_onnx_dtype_name(x->dtype));
    mn_tensor t, y;
    OX_CHECK(ox_in_f32(c, 0, &t));
    int64_t sp = 1;
    for (int i = 2; i < x->rank; i++) sp *= x->dims[i];
    int64_t d3[3] = {x->dims[0], x->dims[1], sp};
    OX_CHECK(ox_reshape(c, &t, t, 3, d3));
    if (maxp) OX_TRY(c, mn_max(c->g, &y, t, 2, true));
    else OX_TRY(c, mn_mean(c->g, &y, t, 2, true));
    int64_t od[OX_MAX_RANK];
    for (int i = 0; i < x->rank; i++) od[i] = i < 2 ? x->dims[i] : 1;
    OX_CHECK(ox_reshape(c, &y, y, x->rank, od));
    return ox_set_out(c, 0, y, x->dtype);
}

/* ---- normalisation ---------------------------------------------------------------- */

/* a per-channel [C] tensor shaped [C, 1, ...] to broadcast over [N, C, ...] */
static mn_status per_channel(ox_ctx *c, int k, int rank, mn_tensor *t) {
    OX_CHECK(ox_in_f32(c, k, t));
    ox_value *v = ox_in(c, k);
    if (v->rank != 1) return ox_fail(c, MN_E_SHAPE, "input %d must be 1-D", k);
    if (rank <= 2) return MN_OK;
    int64_t d[MN_MAX_RANK];
    d[0] = v->dims[0];
    for (int i = 1; i < rank - 1; i++) d[i] = 1;
    return ox_reshape(c, t, *t, rank - 1, d);
}

static mn_status op_batch_norm(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    float eps;
    OX_CHECK(ox_attr_float(c, "epsilon", 1e-5f, &eps));
    ox_attr_ignore(c, "momentum"); /* inference: the running statistics are not updated */
    int64_t training = 0, spatial_ = 1;
    if (c->ver >= 14) OX_CHECK(ox_attr_int(c, "training_mode", 0, &training));
    if (c->ver < 9) OX_CHECK(ox_attr_int(c, "spatial", 1, &spatial_));
    if (c->ver < 7) ox_attr_ignore(c, "is_test");
    if (training) return ox_unsup(c, "training_mode 1 (the running statistics are used)");
    if (!spatial_) return ox_unsup(c, "spatial 0");
    /* outputs 1 and 2 (the running statistics) are those given in inference;
     * the batch statistics (outputs 3, 4 of old opsets) exist only in training */
    for (int k = 3; k < c->nout; k++)
        if (ox_has_out(c, k)) return ox_unsup(c, "output %d (a training output)", k);
    if (x->rank < 2 || x->rank > MN_MAX_RANK) return ox_unsup(c, "input of rank %d", x->rank);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s input (float only)", mn_onnx_dtype_name(x->dtype));
    for (int k = 1; k <= 4; k++)
        if (!ox_has_in(c, k) || ox_in(c, k)->rank != 1 || ox_in(c, k)->dims[0] != x->dims[1])
            return ox_fail(c, MN_E_SHAPE, "input %d must be [%lld]", k, (long long)x->dims[1]);
    mn_tensor t, sc, b, mean, var;
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_CHECK(ox_in_f32(c, 3, &mean));
    OX_CHECK(ox_in_f32(c, 4, &var));
    /* the statistics are not trained */
    if (ox_in(c, 3)->is_param) OX_TRY(c, mn_graph_param_freeze(c->g, mean, true));
    if (ox_in(c, 4)->is_param) OX_TRY(c, mn_graph_param_freeze(c->g, var, true));
    OX_CHECK(per_channel(c, 1, x->rank, &sc));
    OX_CHECK(per_channel(c, 2, x->rank, &b));
    OX_CHECK(per_channel(c, 3, x->rank, &mean));
    OX_CHECK(per_channel(c, 4, x->rank, &var));
    mn_tensor e, ve, inv, k, xc, xs, y;
    OX_CHECK(ox_scalar(c, eps, &e));
    OX_TRY(c, mn_add(c->g, &ve, var, e));
    OX_TRY(c, mn_rsqrt(c->g, &inv, ve));
    OX_TRY(c, mn_mul(c->g, &k, inv, sc));
    OX_TRY(c, mn_sub(c->g, &xc, t, mean));
    OX_TRY(c, mn_mul(c->g, &xs, xc, k));
    OX_TRY(c, mn_add(c->g, &y, xs, b));
    for (int o = 1; o <= 2; o++)
        if (ox_has_out(c, o)) {
            mn_tensor st;
            OX_CHECK(ox_in_f32(c, o + 2, &st));
            OX_CHECK(ox_set_out(c, o, st, ox_in(c, o + 2)->dtype));
        }
    return ox_set_out(c, 0, y, x->dtype);
}

static mn_status op_instance_norm(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    float eps;
    OX_CHECK(ox_attr_float(c, "epsilon", 1e-5f, &eps));
    if (x->rank < 3 || x->rank > MN_MAX_RANK) return ox_unsup(c, "input of rank %d", x->rank);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s input (float only)", mn_onnx_dtype_name(x->dtype));
    mn_tensor t, sc, b, y;
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_CHECK(ox_in_f32(c, 1, &sc));
    OX_CHECK(ox_in_f32(c, 2, &b));
    OX_TRY(c, mn_group_norm(c->g, &y, t, (int)x->dims[1], sc, b, eps));
    return ox_set_out(c, 0, y, x->dtype);
}

static mn_status op_layer_norm(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    int64_t a, stash;
    float eps;
    OX_CHECK(ox_attr_int(c, "axis", -1, &a));
    OX_CHECK(ox_attr_float(c, "epsilon", 1e-5f, &eps));
    OX_CHECK(ox_attr_int(c, "stash_type", 1, &stash)); /* statistics in f32 or wider: the CPU uses double */
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s input (float only)", mn_onnx_dtype_name(x->dtype));
    int axis;
    OX_CHECK(ox_axis(c, a, x->rank, "axis", &axis));
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < x->rank; i++) *(i < axis ? &outer : &inner) *= x->dims[i];
    mn_tensor t, w = MN_NONE, b = MN_NONE, y;
    OX_CHECK(ox_in_f32(c, 0, &t));
    /* weight and bias of the normalised shape go into the op; other
     * (broadcast) shapes are applied after it */
    ox_value *wv = ox_in(c, 1), *bv = ox_has_in(c, 2) ? ox_in(c, 2) : NULL;
    bool w_exact = wv->rank == x->rank - axis, b_exact = !bv || bv->rank == x->rank - axis;
    for (int i = 0; w_exact && i < wv->rank; i++) w_exact = wv->dims[i] == x->dims[axis + i];
    for (int i = 0; bv && b_exact && i < bv->rank; i++) b_exact = bv->dims[i] == x->dims[axis + i];
    mn_tensor wt, bt = MN_NONE;
    OX_CHECK(ox_in_f32(c, 1, &wt));
    if (bv) OX_CHECK(ox_in_f32(c, 2, &bt));
    int64_t d1[1] = {inner};
    if (w_exact && b_exact) {
        OX_CHECK(ox_reshape(c, &w, wt, 1, d1));
        if (bv) OX_CHECK(ox_reshape(c, &b, bt, 1, d1));
    }
    int64_t d2[2] = {outer, inner};
    mn_tensor x2;
    OX_CHECK(ox_reshape(c, &x2, t, 2, d2));
    OX_TRY(c, mn_layer_norm(c->g, &y, x2, w, b, eps));
    OX_CHECK(ox_reshape(c, &y, y, x->rank, x->dims));
    if (!(w_exact && b_exact)) {
        OX_TRY(c, mn_mul(c->g, &y, y, wt));
        if (bv) OX_TRY(c, mn_add(c->g, &y, y, bt));
    }
    OX_CHECK(ox_set_out(c, 0, y, x->dtype));
    if (ox_has_out(c, 1) || ox_has_out(c, 2)) {
        /* the statistics, [d0 .. d(axis-1), 1, ...]: the mean and
         * 1 / sqrt(biased variance + eps), recomputed from x */
        int64_t sd[MN_MAX_RANK];
        for (int i = 0; i < x->rank; i++) sd[i] = i < axis ? x->dims[i] : 1;
        mn_tensor m, xc, sq, var, e, inv, mo;
        OX_TRY(c, mn_mean(c->g, &m, x2, 1, true));
        OX_CHECK(ox_reshape(c, &mo, m, x->rank, sd));
        OX_CHECK(ox_set_out(c, 1, mo, x->dtype));
        OX_TRY(c, mn_sub(c->g, &xc, x2, m));
        OX_TRY(c, mn_mul(c->g, &sq, xc, xc));
        OX_TRY(c, mn_mean(c->g, &var, sq, 1, true));
        OX_CHECK(ox_scalar(c, eps, &e));
        OX_TRY(c, mn_add(c->g, &var, var, e));
        OX_TRY(c, mn_rsqrt(c->g, &inv, var));
        OX_CHECK(ox_reshape(c, &inv, inv, x->rank, sd));
        OX_CHECK(ox_set_out(c, 2, inv, x->dtype));
    }
    return MN_OK;
}

static mn_status op_lrn(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    float alpha, beta, bias;
    int64_t size;
    OX_CHECK(ox_attr_float(c, "alpha", 1e-4f, &alpha));
    OX_CHECK(ox_attr_float(c, "beta", 0.75f, &beta));
    OX_CHECK(ox_attr_float(c, "bias", 1.0f, &bias));
    const Onnx__AttributeProto *sa = ox_attr(c, "size");
    if (!sa) return ox_fail(c, MN_E_FORMAT, "size is required");
    size = sa->i;
    if (size < 1 || size > 1024) return ox_fail(c, MN_E_INVALID, "size %lld", (long long)size);
    if (x->rank < 3 || x->rank > 4) return ox_unsup(c, "input of rank %d", x->rank);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s input (float only)", mn_onnx_dtype_name(x->dtype));
    int64_t N = x->dims[0], C = x->dims[1], S = 1;
    for (int i = 2; i < x->rank; i++) S *= x->dims[i];
    mn_tensor t, sq, avg, d, e, y;
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_TRY(c, mn_mul(c->g, &sq, t, t));
    int64_t d4[4] = {N, 1, C, S};
    OX_CHECK(ox_reshape(c, &sq, sq, 4, d4));
    int64_t b4[4] = {0, 0, (size - 1) / 2, 0}, a4[4] = {0, 0, size - 1 - (size - 1) / 2, 0};
    OX_TRY(c, mn_pad(c->g, &sq, sq, b4, a4));
    mn_pool2d_params pp = {{(int)size, 1}, {1, 1}, {0, 0}};
    OX_TRY(c, mn_avg_pool2d(c->g, &avg, sq, &pp, true));
    OX_CHECK(ox_reshape(c, &avg, avg, x->rank, x->dims));
    /* bias + alpha/size * sum = bias + alpha * mean */
    mn_tensor bs;
    OX_TRY(c, mn_scale(c->g, &d, avg, alpha));
    OX_CHECK(ox_scalar(c, bias, &bs));
    OX_TRY(c, mn_add(c->g, &d, d, bs));
    OX_TRY(c, mn_pow(c->g, &e, d, -beta));
    OX_TRY(c, mn_mul(c->g, &y, t, e));
    return ox_set_out(c, 0, y, x->dtype);
}

/* ---- Resize, Upsample --------------------------------------------------------------- */

typedef struct {
    int mode;      /* 0 nearest, 1 linear, 2 cubic */
    int ctm;       /* coordinate transformation */
    int nmode;     /* nearest rounding */
    double cubic_a;
    bool exclude;
} resize_attrs;

enum { CT_HALF, CT_PT_HALF, CT_ALIGN, CT_ASYM, CT_TF_HALF_NN };
enum { NM_RPF, NM_RPC, NM_FLOOR, NM_CEIL };

/* interpolation weights [out, in] of one axis */
static void resize_matrix(const resize_attrs *a, int64_t in, int64_t out, double scale, double *w) {
    memset(w, 0, (size_t)(in * out) * sizeof *w);
    double out_f = (double)in * scale; /* the reference's (fractional) output length */
    for (int64_t o = 0; o < out; o++) {
        double xo;
        switch (a->ctm) {
        case CT_PT_HALF: xo = out > 1 ? (o + 0.5) / scale - 0.5 : 0; break;
        case CT_ALIGN: xo = out_f == 1 ? 0 : (double)o * (double)(in - 1) / (out_f - 1); break;
        case CT_ASYM: xo = o / scale; break;
        case CT_TF_HALF_NN: xo = (o + 0.5) / scale; break;
        default: xo = (o + 0.5) / scale - 0.5; break;
        }
        double *row = w + o * in;
        if (a->mode == 0) {
            double r;
            switch (a->nmode) {
            case NM_RPC: r = (xo - floor(xo) == 0.5) ? ceil(xo) : nearbyint(xo); break;
            case NM_FLOOR: r = floor(xo); break;
            case NM_CEIL: r = ceil(xo); break;
            default: r = (xo - floor(xo) == 0.5) ? floor(xo) : round(xo); break;
            }
            int64_t i = r < 0 ? 0 : r > (double)(in - 1) ? in - 1 : (int64_t)r;
            row[i] = 1;
            continue;
        }
        if (!(fabs(xo) < 1e15)) xo = xo > 0 ? 1e15 : -1e15; /* far outside: the edge value */
        double fl = floor(xo), r = xo - fl;
        int n = a->mode == 1 ? 2 : 4;
        double cf[4];
        if (n == 2) {
            cf[0] = 1 - r;
            cf[1] = r;
        } else {
            double A = a->cubic_a, s = r + 1, t = 1 - r, u = 2 - r;
            cf[0] = ((A * s - 5 * A) * s + 8 * A) * s - 4 * A;
            cf[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
            cf[2] = ((A + 2) * t - (A + 3)) * t * t + 1;
            cf[3] = ((A * u - 5 * A) * u + 8 * A) * u - 4 * A;
        }
        int64_t first = (int64_t)fl - (n == 4 ? 1 : 0);
        double tot = 0;
        for (int k = 0; k < n; k++) {
            int64_t i = first + k;
            if (a->exclude && (i < 0 || i >= in)) continue;
            tot += cf[k];
        }
        for (int k = 0; k < n; k++) {
            int64_t i = first + k;
            if (a->exclude && (i < 0 || i >= in)) continue;
            if (i < 0) i = 0;
            if (i > in - 1) i = in - 1;
            row[i] += a->exclude && tot != 0 ? cf[k] / tot : cf[k];
        }
    }
}

/* y[..., o, ...] = sum_i W[o, i] x[..., i, ...] along axis of a graph tensor */
static mn_status apply_axis(ox_ctx *c, mn_tensor x, int rank, const int64_t *d, int axis, const double *w,
                            int64_t out, mn_tensor *y) {
    int64_t in = d[axis], pre = 1, post = 1;
    for (int i = 0; i < axis; i++) pre *= d[i];
    for (int i = axis + 1; i < rank; i++) post *= d[i];
    ox_host m;
    int64_t md[2] = {in, out};
    char sub[128];
    mn_status st = ox_host_alloc(&m, MN_ONNX_FLOAT, 2, md, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) m.f[i * out + o] = w[o * in + i]; /* W^T */
    mn_tensor mt, t;
    st = ox_const_tensor(c, &m, &mt);
    ox_host_free(&m);
    if (st) return st;
    if (post == 1) {
        int64_t d2[2] = {pre, in};
        OX_CHECK(ox_reshape(c, &t, x, 2, d2));
        OX_TRY(c, mn_matmul(c->g, &t, t, mt));
    } else {
        int64_t d3[3] = {pre, in, post};
        OX_CHECK(ox_reshape(c, &t, x, 3, d3));
        OX_TRY(c, mn_transpose(c->g, &t, t, 1, 2));
        OX_TRY(c, mn_matmul(c->g, &t, t, mt));
        OX_TRY(c, mn_transpose(c->g, &t, t, 1, 2));
    }
    int64_t od[MN_MAX_RANK];
    for (int i = 0; i < rank; i++) od[i] = i == axis ? out : d[i];
    return ox_reshape(c, y, t, rank, od);
}

static mn_status op_resize(ox_ctx *c) {
    bool up = is(c, "Upsample");
    ox_value *x = ox_in(c, 0);
    int rank = x->rank;
    resize_attrs ra = {0, CT_HALF, NM_RPF, -0.75, false};
    const char *mode, *ctm = "half_pixel", *nm = "round_prefer_floor";
    OX_CHECK(ox_attr_string(c, "mode", "nearest", &mode));
    if (strcmp(mode, "nearest") == 0) ra.mode = 0;
    else if (strcmp(mode, "linear") == 0 || strcmp(mode, "bilinear") == 0) ra.mode = 1;
    else if (strcmp(mode, "cubic") == 0 && !up) ra.mode = 2;
    else return ox_unsup(c, "mode '%s'", mode);
    double scales[OX_MAX_RANK];
    int64_t sizes[OX_MAX_RANK];
    bool have_sizes = false;
    if (up || c->ver < 11) {
        /* Upsample and Resize-10: asymmetric coordinates, nearest rounds down */
        ra.ctm = CT_ASYM;
        ra.nmode = NM_FLOOR;
        if (up && c->ver < 9) {
            float s[OX_MAX_RANK];
            int n;
            OX_CHECK(ox_attr_floats(c, "scales", s, OX_MAX_RANK, &n));
            if (n != rank) return ox_fail(c, MN_E_SHAPE, "scales has %d entries for rank %d", n, rank);
            for (int i = 0; i < n; i++) scales[i] = s[i];
        } else {
            const ox_host *h;
            OX_CHECK(ox_in_host(c, 1, &h));
            if (h->numel != rank) return ox_fail(c, MN_E_SHAPE, "scales has %lld entries for rank %d", (long long)h->numel, rank);
            for (int i = 0; i < rank; i++) scales[i] = ox_host_get_f(h, i);
        }
    } else {
        OX_CHECK(ox_attr_string(c, "coordinate_transformation_mode", "half_pixel", &ctm));
        OX_CHECK(ox_attr_string(c, "nearest_mode", "round_prefer_floor", &nm));
        float ca;
        int64_t ex;
        OX_CHECK(ox_attr_float(c, "cubic_coeff_a", -0.75f, &ca));
        OX_CHECK(ox_attr_int(c, "exclude_outside", 0, &ex));
        ra.cubic_a = ca;
        ra.exclude = ex != 0;
        float extra;
        OX_CHECK(ox_attr_float(c, "extrapolation_value", 0.0f, &extra)); /* tf_crop_and_resize only */
        if (c->ver >= 18) {
            int64_t aa;
            OX_CHECK(ox_attr_int(c, "antialias", 0, &aa));
            if (aa) return ox_unsup(c, "antialias 1");
            const char *kp;
            OX_CHECK(ox_attr_string(c, "keep_aspect_ratio_policy", "stretch", &kp));
            if (strcmp(kp, "stretch")) return ox_unsup(c, "keep_aspect_ratio_policy '%s'", kp);
            int64_t axes[OX_MAX_RANK];
            int na;
            OX_CHECK(ox_attr_ints(c, "axes", axes, OX_MAX_RANK, &na));
            if (na >= 0) return ox_unsup(c, "the axes attribute");
        }
        static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                           "tf_half_pixel_for_nearest"};
        ra.ctm = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(ctm, ctms[i]) == 0) ra.ctm = i;
        if (ra.ctm < 0) return ox_unsup(c, "coordinate_transformation_mode '%s'", ctm);
        static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
        ra.nmode = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(nm, nms[i]) == 0) ra.nmode = i;
        if (ra.nmode < 0) return ox_unsup(c, "nearest_mode '%s'", nm);
        const ox_host *h = NULL;
        if (ox_has_in(c, 2)) OX_CHECK(ox_in_host(c, 2, &h));
        if (h && h->numel) {
            if (h->numel != rank) return ox_fail(c, MN_E_SHAPE, "scales has %lld entries for rank %d", (long long)h->numel, rank);
            for (int i = 0; i < rank; i++) scales[i] = ox_host_get_f(h, i);
        } else if (ox_has_in(c, 3)) {
            OX_CHECK(ox_in_host(c, 3, &h));
            if (h->numel != rank) return ox_fail(c, MN_E_SHAPE, "sizes has %lld entries for rank %d", (long long)h->numel, rank);
            for (int i = 0; i < rank; i++) {
                sizes[i] = ox_host_get_i(h, i);
                if (sizes[i] < 1) return ox_fail(c, MN_E_SHAPE, "size %lld", (long long)sizes[i]);
                scales[i] = (double)sizes[i] / (double)x->dims[i];
            }
            have_sizes = true;
        } else return ox_fail(c, MN_E_FORMAT, "neither scales nor sizes given");
    }
    int64_t od[OX_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        if (!(scales[i] > 0) || !isfinite(scales[i])) return ox_fail(c, MN_E_INVALID, "scale %g", scales[i]);
        double want = have_sizes ? (double)sizes[i] : floor((double)x->dims[i] * (float)scales[i]);
        if (!(want >= 1 && want <= (1 << 24))) return ox_unsup(c, "output size %g", want);
        od[i] = (int64_t)want;
    }
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s input (float only)", mn_onnx_dtype_name(x->dtype));
    if (rank > MN_MAX_RANK || rank < 1) return ox_unsup(c, "input of rank %d", rank);
    mn_tensor t;
    OX_CHECK(ox_in_f32(c, 0, &t));
    int64_t cur[MN_MAX_RANK];
    for (int i = 0; i < rank; i++) cur[i] = x->dims[i];
    for (int i = 0; i < rank; i++) {
        if (od[i] == x->dims[i] && (ra.mode == 0 || scales[i] == 1.0)) {
            /* an unchanged axis (for linear/cubic only at scale 1: other
             * transforms shift the samples) */
            bool ident = true;
            double *w = malloc((size_t)(od[i] * x->dims[i]) * sizeof *w);
            if (!w) return ox_fail(c, MN_E_NOMEM, "out of memory");
            resize_matrix(&ra, x->dims[i], od[i], scales[i], w);
            for (int64_t o = 0; o < od[i] && ident; o++)
                for (int64_t k = 0; k < x->dims[i]; k++) ident = ident && w[o * x->dims[i] + k] == (o == k ? 1.0 : 0.0);
            free(w);
            if (ident) continue;
        }
        int64_t in = x->dims[i];
        if (in * od[i] > ((int64_t)1 << 24)) return ox_unsup(c, "an interpolation matrix of %lld x %lld", (long long)od[i], (long long)in);
        double *w = malloc((size_t)(od[i] * in) * sizeof *w);
        if (!w) return ox_fail(c, MN_E_NOMEM, "out of memory");
        resize_matrix(&ra, in, od[i], scales[i], w);
        mn_status st = apply_axis(c, t, rank, cur, i, w, od[i], &t);
        free(w);
        if (st) return st;
        cur[i] = od[i];
    }
    return ox_set_out(c, 0, t, x->dtype);
}

/* ---- losses ------------------------------------------------------------------------ */

/* loss[n, d...] = -sum_c lp[n, d..., c] * onehot_w(target)[n, d..., c] with
 * lp laid out classes-last; reductions as ONNX */
static mn_status nll(ox_ctx *c, mn_tensor lp, int lrank, const int64_t *ld, int ti, int wi, int64_t ignore,
                     bool has_ignore, const char *red, mn_tensor *out) {
    mn_graph *g = c->g;
    int64_t C = ld[lrank - 1];
    ox_value *tv = ox_in(c, ti);
    if (tv->rank != lrank - 1) return ox_fail(c, MN_E_SHAPE, "target of rank %d for input of rank %d", tv->rank, lrank);
    double *wv = NULL;
    const ox_host *wh = NULL;
    if (wi >= 0 && ox_has_in(c, wi)) {
        OX_CHECK(ox_in_host(c, wi, &wh));
        if (wh->numel != C) return ox_fail(c, MN_E_SHAPE, "weight must hold %lld values", (long long)C);
    }
    /* table [C, C+1]: row t = w[t] e_t, then w[t] (the row's weight); the
     * ignored class (if a class) has a zero row */
    ox_host tab;
    int64_t td[2] = {C, C + 1};
    char sub[128];
    mn_status st = ox_host_alloc(&tab, MN_ONNX_FLOAT, 2, td, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    for (int64_t t = 0; t < C; t++) {
        double w = wh ? ox_host_get_f(wh, t) : 1.0;
        if (has_ignore && t == ignore) w = 0;
        tab.f[t * (C + 1) + t] = w;
        tab.f[t * (C + 1) + C] = w;
    }
    (void)wv;
    mn_tensor tabt, oh;
    if (ox_in_known(c, ti)) {
        /* constant targets: the one-hot rows themselves are a constant */
        const ox_host *th;
        st = ox_in_host(c, ti, &th);
        if (st) {
            ox_host_free(&tab);
            return st;
        }
        int64_t od[OX_MAX_RANK];
        for (int i = 0; i < th->rank; i++) od[i] = th->dims[i];
        od[th->rank] = C + 1;
        ox_host o;
        if ((st = ox_host_alloc(&o, MN_ONNX_FLOAT, th->rank + 1, od, sub, sizeof sub))) {
            ox_host_free(&tab);
            return ox_fail(c, st, "%s", sub);
        }
        for (int64_t e = 0; e < th->numel; e++) {
            int64_t t = ox_host_get_i(th, e);
            if (t >= 0 && t < C)
                for (int64_t k = 0; k <= C; k++) o.f[e * (C + 1) + k] = tab.f[t * (C + 1) + k];
        }
        ox_host_free(&tab);
        st = ox_const_tensor(c, &o, &oh);
        ox_host_free(&o);
        if (st) return st;
    } else {
        if (tv->rank > 3) {
            ox_host_free(&tab);
            return ox_unsup(c, "run-time targets of rank %d (at most 3)", tv->rank);
        }
        st = ox_const_tensor(c, &tab, &tabt);
        ox_host_free(&tab);
        if (st) return st;
        mn_tensor ids;
        OX_CHECK(ox_in_ids(c, ti, &ids));
        OX_TRY(c, mn_embedding(g, &oh, tabt, ids));
    }
    mn_tensor sel, wrow, prod, loss;
    OX_TRY(c, mn_slice(g, &sel, oh, lrank - 1, 0, C));
    OX_TRY(c, mn_slice(g, &wrow, oh, lrank - 1, C, 1));
    OX_TRY(c, mn_mul(g, &prod, lp, sel));
    OX_TRY(c, mn_sum(g, &loss, prod, lrank - 1, false));
    OX_TRY(c, mn_neg(g, &loss, loss));
    if (strcmp(red, "none") == 0) {
        *out = loss;
        return MN_OK;
    }
    mn_tensor s;
    OX_TRY(c, mn_sum(g, &s, loss, MN_ALL_AXES, false));
    if (strcmp(red, "sum") == 0) {
        *out = s;
        return MN_OK;
    }
    mn_tensor den, dsg;
    OX_TRY(c, mn_sum(g, &den, wrow, MN_ALL_AXES, false));
    OX_TRY(c, mn_stop_gradient(g, &dsg, den));
    OX_TRY(c, mn_div(g, out, s, dsg));
    return MN_OK;
}

/* x [N, C, d...] -> classes last [N, d..., C] */
static mn_status classes_last(ox_ctx *c, mn_tensor x, int rank, const int64_t *d, mn_tensor *y, int64_t *yd) {
    if (rank < 2 || rank > MN_MAX_RANK) return ox_unsup(c, "input of rank %d", rank);
    int perm[MN_MAX_RANK], k = 0;
    perm[k++] = 0;
    for (int i = 2; i < rank; i++) perm[k++] = i;
    perm[k++] = 1;
    for (int i = 0; i < rank; i++) yd[i] = d[perm[i]];
    if (rank == 2) {
        *y = x;
        return MN_OK;
    }
    OX_TRY(c, mn_permute(c->g, y, x, perm));
    return MN_OK;
}

static mn_status loss_attrs(ox_ctx *c, const char **red, int64_t *ignore, bool *has_ignore) {
    *ignore = 0;
    *has_ignore = false;
    OX_CHECK(ox_attr_string(c, "reduction", "mean", red));
    if (strcmp(*red, "none") && strcmp(*red, "sum") && strcmp(*red, "mean"))
        return ox_fail(c, MN_E_INVALID, "reduction '%s'", *red);
    const Onnx__AttributeProto *a = ox_attr(c, "ignore_index");
    *has_ignore = a != NULL;
    *ignore = a ? a->i : 0;
    return MN_OK;
}

static mn_status op_nll_loss(ox_ctx *c) {
    const char *red;
    int64_t ignore;
    bool has_ignore;
    OX_CHECK(loss_attrs(c, &red, &ignore, &has_ignore));
    ox_value *x = ox_in(c, 0);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s input (float only)", mn_onnx_dtype_name(x->dtype));
    mn_tensor t, lp, y;
    int64_t ld[MN_MAX_RANK];
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_CHECK(classes_last(c, t, x->rank, x->dims, &lp, ld));
    OX_CHECK(nll(c, lp, x->rank, ld, 1, 2, ignore, has_ignore, red, &y));
    return ox_set_out(c, 0, y, x->dtype);
}

static mn_status op_sce_loss(ox_ctx *c) {
    const char *red;
    int64_t ignore;
    bool has_ignore;
    OX_CHECK(loss_attrs(c, &red, &ignore, &has_ignore));
    ox_value *x = ox_in(c, 0);
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s input (float only)", mn_onnx_dtype_name(x->dtype));
    mn_tensor t, xl, lp, y;
    int64_t ld[MN_MAX_RANK];
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_CHECK(classes_last(c, t, x->rank, x->dims, &xl, ld));
    OX_TRY(c, mn_log_softmax(c->g, &lp, xl));
    OX_CHECK(nll(c, lp, x->rank, ld, 1, 2, ignore, has_ignore, red, &y));
    OX_CHECK(ox_set_out(c, 0, y, x->dtype));
    if (ox_has_out(c, 1)) {
        /* log_prob back in [N, C, d...] */
        mn_tensor l = lp;
        if (x->rank > 2) {
            int perm[MN_MAX_RANK], k = 0;
            perm[k++] = 0;
            perm[k++] = x->rank - 1;
            for (int i = 1; i < x->rank - 1; i++) perm[k++] = i;
            OX_TRY(c, mn_permute(c->g, &l, lp, perm));
        }
        OX_CHECK(ox_set_out(c, 1, l, x->dtype));
    }
    return MN_OK;
}

const ox_op ox_ops_nn[] = {
    {"Conv", 1, 2, 3, 1, 1, op_conv},
    {"ConvTranspose", 1, 2, 3, 1, 1, op_conv_transpose},
    {"MaxPool", 1, 1, 1, 1, 2, op_pool},
    {"AveragePool", 1, 1, 1, 1, 1, op_pool},
    {"GlobalAveragePool", 1, 1, 1, 1, 1, op_global_pool},
    {"GlobalMaxPool", 1, 1, 1, 1, 1, op_global_pool},
    {"BatchNormalization", 1, 5, 5, 1, 5, op_batch_norm},
    {"InstanceNormalization", 1, 3, 3, 1, 1, op_instance_norm},
    {"LayerNormalization", 17, 2, 3, 1, 3, op_layer_norm},
    {"LRN", 1, 1, 1, 1, 1, op_lrn},
    {"Resize", 10, 1, 4, 1, 1, op_resize},
    {"Upsample", 7, 1, 2, 1, 1, op_resize},
    {"NegativeLogLikelihoodLoss", 12, 2, 3, 1, 1, op_nll_loss},
    {"SoftmaxCrossEntropyLoss", 12, 2, 3, 1, 2, op_sce_loss},
    {NULL, 0, 0, 0, 0, 0, NULL},
};
