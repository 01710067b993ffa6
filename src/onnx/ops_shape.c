/* ops_shape.c - ONNX layout and shape operators: Reshape, Flatten,
 * Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Gather, Expand, Tile,
 * Pad, and the operators that make constants (Constant, ConstantOfShape,
 * Shape, Size, Range, EyeLike, Trilu's mask, OneHot, GatherElements, ...).
 *
 * Shapes are static, so every operand that decides a shape (Reshape's shape
 * tensor, Slice's starts and ends, Pad's pads, ...) must be known at import:
 * an initializer, a Constant node, the folded result of shape arithmetic,
 * or a value given for a graph input. Layout ops on graph tensors map to
 * mn_reshape, mn_permute, mn_slice, mn_concat, mn_pad and mn_broadcast_to;
 * Gather with run-time indices is mn_embedding, with indices known at import
 * a concatenation of slices (or a one-hot product when the indices are many
 * and scattered).
 *
 * Does not: arithmetic (ops_math.c), convolution and pooling (ops_nn.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

static mn_status host_new(ox_ctx *c, ox_host *h, int dtype, int rank, const int64_t *dims) {
    char sub[128];
    mn_status st = ox_host_alloc(h, dtype, rank, dims, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    return MN_OK;
}

static void host_put(ox_host *dst, int64_t k, const ox_host *src, int64_t j) {
    if (src->i) ox_host_set_i(dst, k, src->i[j]);
    else ox_host_set_f(dst, k, src->f[j]);
}

/* integer list of a host tensor (shapes, axes, pads) */
static mn_status host_ints(ox_ctx *c, const ox_host *h, int64_t *v, int cap, int *n, const char *what) {
    *n = 0;
    if (h->rank > 1) return ox_fail(c, MN_E_SHAPE, "%s must be a 1-D tensor", what);
    if (h->numel > cap) return ox_unsup(c, "%s holds %lld values (at most %d)", what, (long long)h->numel, cap);
    if (!h->i) return ox_fail(c, MN_E_DTYPE, "%s must be an integer tensor", what);
    for (int64_t i = 0; i < h->numel; i++) v[i] = h->i[i];
    *n = (int)h->numel;
    return MN_OK;
}

/* The result of a layout op that only renames dimensions (Reshape, Flatten,
 * Squeeze, Unsqueeze): a host copy, an i32 view, or an f32 view. */
static mn_status view_as(ox_ctx *c, int rank, const int64_t *dims) {
    ox_value *v = ox_in(c, 0);
    if (ox_numel(rank, dims, OX_MAX_NUMEL) != ox_numel(v->rank, v->dims, OX_MAX_NUMEL))
        return ox_fail(c, MN_E_SHAPE, "the new shape holds another number of elements");
    if (v->kind == OXV_CONST) {
        const ox_host *x;
        OX_CHECK(ox_in_host(c, 0, &x));
        ox_host y;
        OX_CHECK(host_new(c, &y, x->dtype, rank, dims));
        for (int64_t k = 0; k < x->numel; k++) host_put(&y, k, x, k);
        return ox_set_out_host(c, 0, &y);
    }
    if (rank > MN_MAX_RANK) return ox_unsup(c, "result of rank %d (at most %d in the graph)", rank, MN_MAX_RANK);
    mn_tensor t, y;
    if (ox_dtype_int(v->dtype) && v->dtype != MN_ONNX_BOOL) {
        OX_CHECK(ox_in_ids(c, 0, &t));
        OX_CHECK(ox_reshape(c, &y, t, rank, dims));
        return ox_set_out_ids(c, 0, y, v->dtype);
    }
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_CHECK(ox_reshape(c, &y, t, rank, dims));
    return ox_set_out(c, 0, y, v->dtype);
}

static mn_status op_reshape(ox_ctx *c) {
    int64_t allowzero = 0;
    if (c->ver >= 14) OX_CHECK(ox_attr_int(c, "allowzero", 0, &allowzero));
    int64_t s[OX_MAX_RANK];
    int n;
    if (c->ver < 5) {
        OX_CHECK(ox_attr_ints(c, "shape", s, OX_MAX_RANK, &n));
        if (n < 0) return ox_fail(c, MN_E_FORMAT, "attribute 'shape' is required");
    } else {
        if (c->nin < 2) return ox_fail(c, MN_E_FORMAT, "the shape input is required");
        const ox_host *sh;
        OX_CHECK(ox_in_host(c, 1, &sh));
        OX_CHECK(host_ints(c, sh, s, OX_MAX_RANK, &n, "shape"));
    }
    ox_value *x = ox_in(c, 0);
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < n; i++) {
        if (s[i] == 0 && !allowzero) {
            if (i >= x->rank) return ox_fail(c, MN_E_SHAPE, "shape[%d] = 0 copies a dimension the input lacks", i);
            s[i] = x->dims[i];
        }
        if (s[i] == -1) {
            if (infer >= 0) return ox_fail(c, MN_E_SHAPE, "two dimensions are -1");
            infer = i;
            continue;
        }
        if (s[i] < 0) return ox_fail(c, MN_E_SHAPE, "shape[%d] = %lld", i, (long long)s[i]);
        if (s[i] && known > OX_MAX_NUMEL / s[i]) return ox_fail(c, MN_E_SHAPE, "shape too large");
        known *= s[i];
    }
    int64_t total = ox_numel(x->rank, x->dims, OX_MAX_NUMEL);
    if (infer >= 0) {
        if (known == 0 || total % known) return ox_fail(c, MN_E_SHAPE, "cannot infer the -1 dimension");
        s[infer] = total / known;
    }
    return view_as(c, n, s);
}

static mn_status op_flatten(ox_ctx *c) {
    int64_t a;
    OX_CHECK(ox_attr_int(c, "axis", 1, &a));
    ox_value *x = ox_in(c, 0);
    if (a < -x->rank || a > x->rank) return ox_fail(c, MN_E_INVALID, "axis %lld", (long long)a);
    int axis = (int)(a < 0 ? a + x->rank : a);
    int64_t d[2] = {1, 1};
    for (int i = 0; i < x->rank; i++) d[i < axis ? 0 : 1] *= x->dims[i];
    return view_as(c, 2, d);
}

/* axes from the attribute (opset < 13) or input 1 */
static mn_status axes_of(ox_ctx *c, int64_t *axes, int *n) {
    *n = -1;
    if (c->ver < 13) return ox_attr_ints(c, "axes", axes, OX_MAX_RANK, n);
    if (!ox_has_in(c, 1)) return MN_OK;
    const ox_host *h;
    OX_CHECK(ox_in_host(c, 1, &h));
    return host_ints(c, h, axes, OX_MAX_RANK, n, "axes");
}

static mn_status op_squeeze(ox_ctx *c) {
    int64_t axes[OX_MAX_RANK];
    int n;
    OX_CHECK(axes_of(c, axes, &n));
    ox_value *x = ox_in(c, 0);
    bool drop[OX_MAX_RANK] = {false};
    if (n < 0) {
        for (int i = 0; i < x->rank; i++) drop[i] = x->dims[i] == 1;
    } else
        for (int i = 0; i < n; i++) {
            int a;
            OX_CHECK(ox_axis(c, axes[i], x->rank, "axis", &a));
            if (x->dims[a] != 1) return ox_fail(c, MN_E_SHAPE, "axis %d has size %lld, not 1", a, (long long)x->dims[a]);
            drop[a] = true;
        }
    int64_t d[OX_MAX_RANK];
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!drop[i]) d[r++] = x->dims[i];
    return view_as(c, r, d);
}

static mn_status op_unsqueeze(ox_ctx *c) {
    int64_t axes[OX_MAX_RANK];
    int n;
    OX_CHECK(axes_of(c, axes, &n));
    if (n < 0) return ox_fail(c, MN_E_FORMAT, "axes are required");
    ox_value *x = ox_in(c, 0);
    int r = x->rank + n;
    if (r > OX_MAX_RANK) return ox_unsup(c, "result of rank %d", r);
    bool ins[OX_MAX_RANK] = {false};
    for (int i = 0; i < n; i++) {
        int a;
        OX_CHECK(ox_axis(c, axes[i], r, "axis", &a));
        if (ins[a]) return ox_fail(c, MN_E_INVALID, "axis %d given twice", a);
        ins[a] = true;
    }
    int64_t d[OX_MAX_RANK];
    for (int i = 0, j = 0; i < r; i++) d[i] = ins[i] ? 1 : x->dims[j++];
    return view_as(c, r, d);
}

static mn_status op_transpose(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    int64_t p[OX_MAX_RANK];
    int n;
    OX_CHECK(ox_attr_ints(c, "perm", p, OX_MAX_RANK, &n));
    if (n < 0) {
        n = x->rank;
        for (int i = 0; i < n; i++) p[i] = n - 1 - i;
    }
    if (n != x->rank) return ox_fail(c, MN_E_SHAPE, "perm has %d entries for rank %d", n, x->rank);
    bool seen[OX_MAX_RANK] = {false};
    int64_t od[OX_MAX_RANK];
    for (int i = 0; i < n; i++) {
        if (p[i] < 0 || p[i] >= n || seen[p[i]]) return ox_fail(c, MN_E_INVALID, "perm is not a permutation");
        seen[p[i]] = true;
        od[i] = x->dims[p[i]];
    }
    if (x->kind == OXV_CONST) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 0, &h));
        ox_host y;
        OX_CHECK(host_new(c, &y, h->dtype, n, od));
        int64_t co[OX_MAX_RANK], ic[OX_MAX_RANK];
        for (int64_t k = 0; k < y.numel; k++) {
            ox_coords(n, od, k, co);
            for (int i = 0; i < n; i++) ic[p[i]] = co[i];
            host_put(&y, k, h, ox_linear(n, h->dims, ic));
        }
        return ox_set_out_host(c, 0, &y);
    }
    if (n > MN_MAX_RANK) return ox_unsup(c, "a tensor of rank %d in the graph (at most %d)", n, MN_MAX_RANK);
    int perm[MN_MAX_RANK];
    bool ident = true;
    for (int i = 0; i < n; i++) {
        perm[i] = (int)p[i];
        ident = ident && p[i] == i;
    }
    mn_tensor t, y;
    bool ids = ox_dtype_int(x->dtype) && x->dtype != MN_ONNX_BOOL;
    if (ids) OX_CHECK(ox_in_ids(c, 0, &t));
    else OX_CHECK(ox_in_f32(c, 0, &t));
    if (ident) y = t;
    else OX_TRY(c, mn_permute(c->g, &y, t, perm));
    return ids ? ox_set_out_ids(c, 0, y, x->dtype) : ox_set_out(c, 0, y, x->dtype);
}

/* ---- Concat, Split, Slice ----------------------------------------------------------- */

static mn_status op_concat(ox_ctx *c) {
    int64_t a;
    OX_CHECK(ox_attr_int(c, "axis", c->ver < 4 ? 1 : 0, &a));
    if (c->ver >= 4 && !ox_attr(c, "axis")) return ox_fail(c, MN_E_FORMAT, "attribute 'axis' is required");
    for (int i = 0; i < c->nin; i++)
        if (!ox_has_in(c, i)) return ox_fail(c, MN_E_FORMAT, "input %d is empty", i);
    ox_value *x0 = ox_in(c, 0);
    int rank = x0->rank, axis;
    OX_CHECK(ox_axis(c, a, rank, "axis", &axis));
    int64_t od[OX_MAX_RANK];
    for (int i = 0; i < rank; i++) od[i] = x0->dims[i];
    od[axis] = 0;
    for (int k = 0; k < c->nin; k++) {
        ox_value *v = ox_in(c, k);
        if (v->rank != rank) return ox_fail(c, MN_E_SHAPE, "input %d has rank %d, input 0 rank %d", k, v->rank, rank);
        for (int i = 0; i < rank; i++)
            if (i != axis && v->dims[i] != x0->dims[i]) return ox_fail(c, MN_E_SHAPE, "input %d: dimension %d differs", k, i);
        od[axis] += v->dims[axis];
    }
    if (ox_all_known(c)) {
        ox_host y;
        OX_CHECK(host_new(c, &y, x0->dtype, rank, od));
        int64_t off = 0, co[OX_MAX_RANK];
        for (int k = 0; k < c->nin; k++) {
            const ox_host *h;
            mn_status st = ox_in_host(c, k, &h);
            if (st) {
                ox_host_free(&y);
                return st;
            }
            for (int64_t e = 0; e < h->numel; e++) {
                ox_coords(rank, h->dims, e, co);
                co[axis] += off;
                host_put(&y, ox_linear(rank, od, co), h, e);
            }
            off += h->dims[axis];
        }
        return ox_set_out_host(c, 0, &y);
    }
    if (!ox_dtype_float(x0->dtype)) return ox_unsup(c, "%s Concat at run time (float only)", mn_onnx_dtype_name(x0->dtype));
    mn_tensor *ts = malloc((size_t)c->nin * sizeof *ts);
    if (!ts) return ox_fail(c, MN_E_NOMEM, "out of memory");
    int n = 0;
    for (int k = 0; k < c->nin; k++) {
        if (ox_in(c, k)->dims[axis] == 0) continue; /* empty parts add nothing */
        mn_status st = ox_in_f32(c, k, &ts[n]);
        if (st) {
            free(ts);
            return st;
        }
        n++;
    }
    mn_tensor y = ts[0];
    mn_status st = n > 1 ? mn_concat(c->g, &y, ts, n, axis) : MN_OK;
    free(ts);
    if (st) return ox_graph_fail(c, st);
    return ox_set_out(c, 0, y, x0->dtype);
}

/* part [start, start + len) of an axis */
static mn_status host_slice1(ox_ctx *c, const ox_host *x, int axis, int64_t start, int64_t len, ox_host *y) {
    int64_t od[OX_MAX_RANK];
    for (int i = 0; i < x->rank; i++) od[i] = x->dims[i];
    od[axis] = len;
    OX_CHECK(host_new(c, y, x->dtype, x->rank, od));
    int64_t co[OX_MAX_RANK];
    for (int64_t e = 0; e < y->numel; e++) {
        ox_coords(x->rank, od, e, co);
        co[axis] += start;
        host_put(y, e, x, ox_linear(x->rank, x->dims, co));
    }
    return MN_OK;
}

static mn_status op_split(ox_ctx *c) {
    int64_t a, num = 0;
    OX_CHECK(ox_attr_int(c, "axis", 0, &a));
    if (c->ver >= 18) OX_CHECK(ox_attr_int(c, "num_outputs", 0, &num));
    ox_value *x = ox_in(c, 0);
    int axis;
    OX_CHECK(ox_axis(c, a, x->rank, "axis", &axis));
    int64_t sizes[256];
    int n = -1;
    if (c->ver < 13) OX_CHECK(ox_attr_ints(c, "split", sizes, 256, &n));
    if ((c->ver >= 13 || (c->ver < 2 && n < 0)) && ox_has_in(c, 1)) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 1, &h));
        OX_CHECK(host_ints(c, h, sizes, 256, &n, "split"));
    }
    int64_t dim = x->dims[axis];
    if (n < 0) {
        int parts = num ? (int)num : c->nout;
        if (parts < 1 || parts > 256) return ox_fail(c, MN_E_INVALID, "%d outputs", parts);
        int64_t each = (dim + parts - 1) / parts;
        if (!num && dim % parts) return ox_fail(c, MN_E_SHAPE, "dimension %lld does not split into %d equal parts", (long long)dim, parts);
        n = parts;
        for (int i = 0; i < n; i++) sizes[i] = i < n - 1 ? each : dim - each * (n - 1);
    }
    if (n != c->nout) return ox_fail(c, MN_E_FORMAT, "%d sizes for %d outputs", n, c->nout);
    int64_t tot = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0 || sizes[i] > dim) return ox_fail(c, MN_E_SHAPE, "split size %lld", (long long)sizes[i]);
        tot += sizes[i];
    }
    if (tot != dim) return ox_fail(c, MN_E_SHAPE, "split sizes add to %lld, the axis has %lld", (long long)tot, (long long)dim);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (x->kind == OXV_CONST || sizes[i] == 0) {
            if (x->kind != OXV_CONST) return ox_unsup(c, "an empty part at run time");
            const ox_host *h;
            OX_CHECK(ox_in_host(c, 0, &h));
            ox_host y;
            OX_CHECK(host_slice1(c, h, axis, off, sizes[i], &y));
            OX_CHECK(ox_set_out_host(c, i, &y));
        } else {
            if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s Split at run time", mn_onnx_dtype_name(x->dtype));
            mn_tensor t, y;
            OX_CHECK(ox_in_f32(c, 0, &t));
            if (sizes[i] == dim) y = t;
            else OX_TRY(c, mn_slice(c->g, &y, t, axis, off, sizes[i]));
            OX_CHECK(ox_set_out(c, i, y, x->dtype));
        }
        off += sizes[i];
    }
    return MN_OK;
}

/* one axis of a Slice with step != 1 on a graph tensor */
static mn_status rt_slice_step(ox_ctx *c, mn_tensor x, int axis, int64_t start, int64_t step, int64_t len,
                               mn_tensor *y) {
    mn_graph *g = c->g;
    int rank;
    int64_t d[MN_MAX_RANK];
    OX_CHECK(ox_shape(c, x, &rank, d));
    if (step < 0) {
        /* reversed: one slice per element, joined */
        if (len > 256) return ox_unsup(c, "a negative step over %lld elements (at most 256)", (long long)len);
        mn_tensor *parts = malloc((size_t)len * sizeof *parts);
        if (!parts) return ox_fail(c, MN_E_NOMEM, "out of memory");
        mn_status st = MN_OK;
        for (int64_t i = 0; i < len && !st; i++) st = mn_slice(g, &parts[i], x, axis, start + i * step, 1);
        if (!st) st = len > 1 ? mn_concat(g, y, parts, (int)len, axis) : MN_OK;
        if (!st && len == 1) *y = parts[0];
        free(parts);
        if (st) return ox_graph_fail(c, st);
        return MN_OK;
    }
    /* [start, start + (len-1)*step + 1), padded to len*step, viewed as
     * [pre, len, step, post], the first of each step */
    int64_t span = (len - 1) * step + 1;
    mn_tensor s = x;
    if (start != 0 || span != d[axis]) OX_TRY(c, mn_slice(g, &s, x, axis, start, span));
    int64_t before[MN_MAX_RANK] = {0}, after[MN_MAX_RANK] = {0};
    after[axis] = len * step - span;
    if (after[axis]) OX_TRY(c, mn_pad(g, &s, s, before, after));
    int64_t pre = 1, post = 1;
    for (int i = 0; i < axis; i++) pre *= d[i];
    for (int i = axis + 1; i < rank; i++) post *= d[i];
    int64_t v4[4] = {pre, len, step, post};
    mn_tensor r, t;
    OX_CHECK(ox_reshape(c, &r, s, 4, v4));
    OX_TRY(c, mn_slice(g, &t, r, 2, 0, 1));
    int64_t od[MN_MAX_RANK];
    for (int i = 0; i < rank; i++) od[i] = d[i];
    od[axis] = len;
    return ox_reshape(c, y, t, rank, od);
}

static mn_status op_slice(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    int64_t st_[OX_MAX_RANK], en[OX_MAX_RANK], ax[OX_MAX_RANK], sp[OX_MAX_RANK];
    int ns, ne, na = -1, np = -1;
    if (c->ver < 10) {
        OX_CHECK(ox_attr_ints(c, "starts", st_, OX_MAX_RANK, &ns));
        OX_CHECK(ox_attr_ints(c, "ends", en, OX_MAX_RANK, &ne));
        OX_CHECK(ox_attr_ints(c, "axes", ax, OX_MAX_RANK, &na));
        if (ns < 0 || ne < 0) return ox_fail(c, MN_E_FORMAT, "starts and ends are required");
    } else {
        if (c->nin < 3) return ox_fail(c, MN_E_FORMAT, "starts and ends are required");
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 1, &h));
        OX_CHECK(host_ints(c, h, st_, OX_MAX_RANK, &ns, "starts"));
        OX_CHECK(ox_in_host(c, 2, &h));
        OX_CHECK(host_ints(c, h, en, OX_MAX_RANK, &ne, "ends"));
        if (ox_has_in(c, 3)) {
            OX_CHECK(ox_in_host(c, 3, &h));
            OX_CHECK(host_ints(c, h, ax, OX_MAX_RANK, &na, "axes"));
        }
        if (ox_has_in(c, 4)) {
            OX_CHECK(ox_in_host(c, 4, &h));
            OX_CHECK(host_ints(c, h, sp, OX_MAX_RANK, &np, "steps"));
        }
    }
    if (ns != ne || (na >= 0 && na != ns) || (np >= 0 && np != ns))
        return ox_fail(c, MN_E_SHAPE, "starts, ends, axes and steps differ in length");
    int64_t start[OX_MAX_RANK], step[OX_MAX_RANK], len[OX_MAX_RANK];
    bool seen[OX_MAX_RANK] = {false};
    for (int i = 0; i < x->rank; i++) {
        start[i] = 0;
        step[i] = 1;
        len[i] = x->dims[i];
    }
    for (int k = 0; k < ns; k++) {
        int a;
        OX_CHECK(ox_axis(c, na >= 0 ? ax[k] : k, x->rank, "axis", &a));
        if (seen[a]) return ox_fail(c, MN_E_INVALID, "axis %d given twice", a);
        seen[a] = true;
        int64_t d = x->dims[a], s = st_[k], e = en[k], p = np >= 0 ? sp[k] : 1;
        if (p == 0) return ox_fail(c, MN_E_INVALID, "step 0");
        /* a step beyond the axis is a step of the axis' size (no overflow below) */
        if (p > d) p = d > 0 ? d : 1;
        if (p < -d) p = d > 0 ? -d : -1;
        if (s < 0) s = s < -d ? -d - 1 : s, s += d;
        if (e < 0) e = e < -d ? -d - 1 : e, e += d;
        if (p > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            e = e < 0 ? 0 : e > d ? d : e;
            len[a] = e > s ? (e - s - 1) / p + 1 : 0;
        } else {
            s = s < 0 ? -1 : s > d - 1 ? d - 1 : s;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            len[a] = s > e ? (s - e - 1) / (-p) + 1 : 0;
        }
        start[a] = s;
        step[a] = p;
    }
    if (x->kind == OXV_CONST) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 0, &h));
        ox_host y;
        OX_CHECK(host_new(c, &y, h->dtype, h->rank, len));
        int64_t co[OX_MAX_RANK];
        for (int64_t e = 0; e < y.numel; e++) {
            ox_coords(h->rank, len, e, co);
            for (int i = 0; i < h->rank; i++) co[i] = start[i] + co[i] * step[i];
            host_put(&y, e, h, ox_linear(h->rank, h->dims, co));
        }
        return ox_set_out_host(c, 0, &y);
    }
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s Slice at run time (float only)", mn_onnx_dtype_name(x->dtype));
    for (int i = 0; i < x->rank; i++)
        if (len[i] == 0) return ox_unsup(c, "an empty result at run time");
    mn_tensor t;
    OX_CHECK(ox_in_f32(c, 0, &t));
    for (int i = 0; i < x->rank; i++) {
        if (step[i] == 1 && start[i] == 0 && len[i] == x->dims[i]) continue;
        if (step[i] == 1) OX_TRY(c, mn_slice(c->g, &t, t, i, start[i], len[i]));
        else OX_CHECK(rt_slice_step(c, t, i, start[i], step[i], len[i], &t));
    }
    return ox_set_out(c, 0, t, x->dtype);
}

/* ---- Gather ----------------------------------------------------------------------------- */

static mn_status op_gather(ox_ctx *c) {
    int64_t a;
    OX_CHECK(ox_attr_int(c, "axis", 0, &a));
    ox_value *x = ox_in(c, 0), *iv = ox_in(c, 1);
    int axis;
    OX_CHECK(ox_axis(c, a, x->rank, "axis", &axis));
    if (!ox_dtype_int(iv->dtype) || iv->dtype == MN_ONNX_BOOL) return ox_fail(c, MN_E_DTYPE, "indices must be integers");
    int orank = x->rank - 1 + iv->rank;
    if (orank > OX_MAX_RANK) return ox_unsup(c, "result of rank %d", orank);
    int64_t od[OX_MAX_RANK];
    int r = 0;
    for (int i = 0; i < axis; i++) od[r++] = x->dims[i];
    for (int i = 0; i < iv->rank; i++) od[r++] = iv->dims[i];
    for (int i = axis + 1; i < x->rank; i++) od[r++] = x->dims[i];
    int64_t dim = x->dims[axis];
    if (ox_in_known(c, 1)) {
        const ox_host *ih;
        OX_CHECK(ox_in_host(c, 1, &ih));
        int64_t *idx = malloc((size_t)(ih->numel ? ih->numel : 1) * sizeof *idx);
        if (!idx) return ox_fail(c, MN_E_NOMEM, "out of memory");
        for (int64_t k = 0; k < ih->numel; k++) {
            int64_t v = ih->i[k];
            if (v < -dim || v >= dim) {
                free(idx);
                return ox_fail(c, MN_E_INVALID, "index %lld is outside [-%lld, %lld)", (long long)v, (long long)dim,
                               (long long)dim);
            }
            idx[k] = v < 0 ? v + dim : v;
        }
        mn_status st = MN_OK;
        if (x->kind == OXV_CONST) {
            const ox_host *h;
            if ((st = ox_in_host(c, 0, &h))) goto out;
            ox_host y;
            if ((st = host_new(c, &y, h->dtype, orank, od))) goto out;
            int64_t co[OX_MAX_RANK], ic[OX_MAX_RANK];
            for (int64_t e = 0; e < y.numel; e++) {
                ox_coords(orank, od, e, co);
                int64_t flat = 0;
                for (int i = 0; i < iv->rank; i++) flat = flat * iv->dims[i] + co[axis + i];
                for (int i = 0; i < axis; i++) ic[i] = co[i];
                ic[axis] = idx[flat];
                for (int i = axis + 1; i < x->rank; i++) ic[i] = co[i - 1 + iv->rank];
                host_put(&y, e, h, ox_linear(x->rank, x->dims, ic));
            }
            st = ox_set_out_host(c, 0, &y);
            goto out;
        }
        if (!ox_dtype_float(x->dtype)) {
            st = ox_unsup(c, "%s data at run time (float only)", mn_onnx_dtype_name(x->dtype));
            goto out;
        }
        if (orank > MN_MAX_RANK) {
            st = ox_unsup(c, "result of rank %d", orank);
            goto out;
        }
        /* runs of consecutive indices become slices, joined along the axis */
        mn_tensor t;
        if ((st = ox_in_f32(c, 0, &t))) goto out;
        int64_t n = ih->numel, runs = 0;
        for (int64_t k = 0; k < n; k++)
            if (k == 0 || idx[k] != idx[k - 1] + 1) runs++;
        mn_tensor y;
        if (runs <= 64) {
            mn_tensor *parts = malloc((size_t)runs * sizeof *parts);
            if (!parts) {
                st = ox_fail(c, MN_E_NOMEM, "out of memory");
                goto out;
            }
            int64_t k = 0;
            int p = 0;
            while (k < n && !st) {
                int64_t j = k + 1;
                while (j < n && idx[j] == idx[j - 1] + 1) j++;
                if (idx[k] == 0 && j - k == dim) parts[p++] = t;
                else st = mn_slice(c->g, &parts[p++], t, axis, idx[k], j - k);
                k = j;
            }
            if (!st) {
                if (p > 1) st = mn_concat(c->g, &y, parts, p, axis);
                else y = parts[0];
            }
            free(parts);
            if (st) {
                st = ox_graph_fail(c, st);
                goto out;
            }
        } else {
            /* a one-hot product: [pre, dim, post] -> [pre, post, dim] @ [dim, n] */
            int64_t pre = 1, post = 1;
            for (int i = 0; i < axis; i++) pre *= x->dims[i];
            for (int i = axis + 1; i < x->rank; i++) post *= x->dims[i];
            ox_host oh;
            int64_t ohd[2] = {dim, n};
            if ((st = host_new(c, &oh, MN_ONNX_FLOAT, 2, ohd))) goto out;
            for (int64_t k = 0; k < n; k++) oh.f[idx[k] * n + k] = 1;
            mn_tensor m, x3, xt, p3, pt;
            st = ox_const_tensor(c, &oh, &m);
            ox_host_free(&oh);
            if (st) goto out;
            int64_t d3[3] = {pre, dim, post};
            if ((st = ox_reshape(c, &x3, t, 3, d3))) goto out;
            if ((st = mn_transpose(c->g, &xt, x3, 1, 2)) || (st = mn_matmul(c->g, &p3, xt, m)) ||
                (st = mn_transpose(c->g, &pt, p3, 1, 2))) {
                st = ox_graph_fail(c, st);
                goto out;
            }
            y = pt;
        }
        if ((st = ox_reshape(c, &y, y, orank, od))) goto out;
        st = ox_set_out(c, 0, y, x->dtype);
    out:
        free(idx);
        return st;
    }
    /* run-time indices: an embedding lookup of rows [dim, rest] */
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s data with run-time indices (float only)", mn_onnx_dtype_name(x->dtype));
    if (iv->rank > 3) return ox_unsup(c, "indices of rank %d with run-time values (at most 3)", iv->rank);
    if (orank > MN_MAX_RANK) return ox_unsup(c, "result of rank %d", orank);
    mn_tensor t, ids, e;
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_CHECK(ox_in_ids(c, 1, &ids));
    if (axis != 0) {
        int perm[MN_MAX_RANK], k = 0;
        perm[k++] = axis;
        for (int i = 0; i < x->rank; i++)
            if (i != axis) perm[k++] = i;
        OX_TRY(c, mn_permute(c->g, &t, t, perm));
    }
    int64_t rest = 1;
    for (int i = 0; i < x->rank; i++)
        if (i != axis) rest *= x->dims[i];
    int64_t d2[2] = {dim, rest};
    OX_CHECK(ox_reshape(c, &t, t, 2, d2));
    if (iv->rank == 0) {
        int64_t one[1] = {1};
        OX_CHECK(ox_reshape(c, &ids, ids, 1, one));
    }
    OX_TRY(c, mn_embedding(c->g, &e, t, ids));
    /* [idx..., others...] -> [before..., idx..., after...] */
    int64_t pd[MN_MAX_RANK];
    int pr = 0;
    for (int i = 0; i < iv->rank; i++) pd[pr++] = iv->dims[i];
    for (int i = 0; i < x->rank; i++)
        if (i != axis) pd[pr++] = x->dims[i];
    mn_tensor y;
    OX_CHECK(ox_reshape(c, &y, e, pr, pd));
    if (axis != 0 && iv->rank > 0) {
        int perm[MN_MAX_RANK], k = 0;
        for (int i = 0; i < axis; i++) perm[k++] = iv->rank + i;
        for (int i = 0; i < iv->rank; i++) perm[k++] = i;
        for (int i = iv->rank + axis; i < pr; i++) perm[k++] = i;
        OX_TRY(c, mn_permute(c->g, &y, y, perm));
    }
    OX_CHECK(ox_reshape(c, &y, y, orank, od));
    return ox_set_out(c, 0, y, x->dtype);
}

static mn_status op_gather_elements(ox_ctx *c) {
    int64_t a;
    OX_CHECK(ox_attr_int(c, "axis", 0, &a));
    if (!ox_all_known(c)) return ox_unsup(c, "no run-time form (it is evaluated only on constants)");
    const ox_host *x, *ih;
    OX_CHECK(ox_in_host(c, 0, &x));
    OX_CHECK(ox_in_host(c, 1, &ih));
    int axis;
    OX_CHECK(ox_axis(c, a, x->rank, "axis", &axis));
    if (ih->rank != x->rank || !ih->i) return ox_fail(c, MN_E_SHAPE, "indices must be integers of the data's rank");
    ox_host y;
    OX_CHECK(host_new(c, &y, x->dtype, ih->rank, ih->dims));
    int64_t co[OX_MAX_RANK];
    for (int64_t e = 0; e < y.numel; e++) {
        ox_coords(ih->rank, ih->dims, e, co);
        int64_t v = ih->i[e], d = x->dims[axis];
        if (v < -d || v >= d) {
            ox_host_free(&y);
            return ox_fail(c, MN_E_INVALID, "index %lld out of range", (long long)v);
        }
        co[axis] = v < 0 ? v + d : v;
        for (int i = 0; i < x->rank; i++)
            if (co[i] >= x->dims[i]) {
                ox_host_free(&y);
                return ox_fail(c, MN_E_SHAPE, "indices larger than the data");
            }
        host_put(&y, e, x, ox_linear(x->rank, x->dims, co));
    }
    return ox_set_out_host(c, 0, &y);
}

/* ---- Expand, Tile --------------------------------------------------------------------- */

static mn_status op_expand(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    const ox_host *sh;
    OX_CHECK(ox_in_host(c, 1, &sh));
    int64_t s[OX_MAX_RANK], od[OX_MAX_RANK];
    int n, r;
    OX_CHECK(host_ints(c, sh, s, OX_MAX_RANK, &n, "shape"));
    if (!ox_broadcast_dims(&r, od, x->rank, x->dims, n, s)) return ox_fail(c, MN_E_SHAPE, "shape does not broadcast");
    if (x->kind == OXV_CONST) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 0, &h));
        ox_host y;
        OX_CHECK(host_new(c, &y, h->dtype, r, od));
        for (int64_t e = 0; e < y.numel; e++) host_put(&y, e, h, ox_bc_index(r, od, e, h->rank, h->dims));
        return ox_set_out_host(c, 0, &y);
    }
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s Expand at run time", mn_onnx_dtype_name(x->dtype));
    if (r > MN_MAX_RANK) return ox_unsup(c, "result of rank %d", r);
    mn_tensor t, y;
    OX_CHECK(ox_in_f32(c, 0, &t));
    bool same = r == x->rank;
    for (int i = 0; same && i < r; i++) same = od[i] == x->dims[i];
    if (same) y = t;
    else OX_TRY(c, mn_broadcast_to(c->g, &y, t, r, od));
    return ox_set_out(c, 0, y, x->dtype);
}

static mn_status op_tile(ox_ctx *c) {
    if (c->ver < 6) return ox_unsup(c, "Tile of opset < 6 (tiles and axis inputs)");
    ox_value *x = ox_in(c, 0);
    const ox_host *rh;
    OX_CHECK(ox_in_host(c, 1, &rh));
    int64_t rep[OX_MAX_RANK];
    int n;
    OX_CHECK(host_ints(c, rh, rep, OX_MAX_RANK, &n, "repeats"));
    if (n != x->rank) return ox_fail(c, MN_E_SHAPE, "%d repeats for rank %d", n, x->rank);
    int64_t od[OX_MAX_RANK];
    for (int i = 0; i < n; i++) {
        if (rep[i] < 0 || (x->dims[i] && rep[i] > OX_MAX_NUMEL / x->dims[i]))
            return ox_fail(c, MN_E_INVALID, "repeat %lld", (long long)rep[i]);
        od[i] = x->dims[i] * rep[i];
    }
    if (x->kind == OXV_CONST) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 0, &h));
        ox_host y;
        OX_CHECK(host_new(c, &y, h->dtype, n, od));
        int64_t co[OX_MAX_RANK];
        for (int64_t e = 0; e < y.numel; e++) {
            ox_coords(n, od, e, co);
            for (int i = 0; i < n; i++) co[i] %= h->dims[i];
            host_put(&y, e, h, ox_linear(n, h->dims, co));
        }
        return ox_set_out_host(c, 0, &y);
    }
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s Tile at run time", mn_onnx_dtype_name(x->dtype));
    for (int i = 0; i < n; i++)
        if (!od[i]) return ox_unsup(c, "an empty result at run time");
    mn_tensor t;
    OX_CHECK(ox_in_f32(c, 0, &t));
    int64_t cur[OX_MAX_RANK];
    for (int i = 0; i < n; i++) cur[i] = x->dims[i];
    for (int i = 0; i < n; i++) {
        if (rep[i] == 1) continue;
        /* [pre, 1, d*post] broadcast to [pre, r, d*post] */
        int64_t pre = 1, rest = 1;
        for (int k = 0; k < i; k++) pre *= cur[k];
        for (int k = i; k < n; k++) rest *= cur[k];
        int64_t d3[3] = {pre, 1, rest}, b3[3] = {pre, rep[i], rest};
        OX_CHECK(ox_reshape(c, &t, t, 3, d3));
        OX_TRY(c, mn_broadcast_to(c->g, &t, t, 3, b3));
        cur[i] *= rep[i];
        OX_CHECK(ox_reshape(c, &t, t, n, cur));
    }
    return ox_set_out(c, 0, t, x->dtype);
}

/* ---- Pad ------------------------------------------------------------------------- */

static mn_status op_pad(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    int rank = x->rank;
    const char *mode;
    OX_CHECK(ox_attr_string(c, "mode", "constant", &mode));
    int64_t pads[2 * OX_MAX_RANK], axes[OX_MAX_RANK];
    int np, na = -1;
    double value = 0;
    if (c->ver < 11) {
        float v;
        OX_CHECK(ox_attr_ints(c, c->ver < 2 ? "paddings" : "pads", pads, 2 * OX_MAX_RANK, &np));
        OX_CHECK(ox_attr_float(c, "value", 0.0f, &v));
        value = v;
        if (np < 0) return ox_fail(c, MN_E_FORMAT, "pads are required");
    } else {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 1, &h));
        OX_CHECK(host_ints(c, h, pads, 2 * OX_MAX_RANK, &np, "pads"));
        if (ox_has_in(c, 2)) {
            OX_CHECK(ox_in_host(c, 2, &h));
            if (h->numel > 1) return ox_fail(c, MN_E_SHAPE, "constant_value must hold one value");
            if (h->numel == 1) value = ox_host_get_f(h, 0);
        }
        if (ox_has_in(c, 3)) {
            OX_CHECK(ox_in_host(c, 3, &h));
            OX_CHECK(host_ints(c, h, axes, OX_MAX_RANK, &na, "axes"));
        }
    }
    int nax = na >= 0 ? na : rank;
    if (np != 2 * nax) return ox_fail(c, MN_E_SHAPE, "%d pads for %d axes", np, nax);
    int64_t before[OX_MAX_RANK] = {0}, after[OX_MAX_RANK] = {0};
    for (int k = 0; k < nax; k++) {
        int a = k;
        if (na >= 0) OX_CHECK(ox_axis(c, axes[k], rank, "axis", &a));
        if (pads[k] < -OX_MAX_NUMEL || pads[k] > OX_MAX_NUMEL || pads[k + nax] < -OX_MAX_NUMEL ||
            pads[k + nax] > OX_MAX_NUMEL)
            return ox_fail(c, MN_E_SHAPE, "pads beyond 2^40");
        before[a] = pads[k];
        after[a] = pads[k + nax];
    }
    int md = strcmp(mode, "constant") == 0 ? 0 : strcmp(mode, "edge") == 0 ? 1 : strcmp(mode, "reflect") == 0 ? 2
             : strcmp(mode, "wrap") == 0 && c->ver >= 19 ? 3 : -1;
    if (md < 0) return ox_unsup(c, "mode '%s'", mode);
    int64_t od[OX_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        od[i] = x->dims[i] + before[i] + after[i];
        if (od[i] < 0) return ox_fail(c, MN_E_SHAPE, "pads remove more than axis %d holds", i);
        if (md == 2 && (before[i] >= x->dims[i] || after[i] >= x->dims[i]) && (before[i] > 0 || after[i] > 0))
            return ox_unsup(c, "reflect pads of at least the axis size (axis %d)", i);
        if (md >= 1 && x->dims[i] == 0 && od[i]) return ox_fail(c, MN_E_SHAPE, "padding an empty axis");
    }
    if (x->kind == OXV_CONST) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 0, &h));
        ox_host y;
        OX_CHECK(host_new(c, &y, h->dtype, rank, od));
        int64_t co[OX_MAX_RANK];
        for (int64_t e = 0; e < y.numel; e++) {
            ox_coords(rank, od, e, co);
            bool outside = false;
            for (int i = 0; i < rank; i++) {
                int64_t v = co[i] - before[i], d = h->dims[i];
                if (v < 0 || v >= d) {
                    if (md == 0) outside = true;
                    else if (md == 1) v = v < 0 ? 0 : d - 1;
                    else if (md == 2) v = v < 0 ? -v : 2 * (d - 1) - v;
                    else v = ((v % d) + d) % d;
                }
                co[i] = v;
            }
            if (outside) ox_host_set_f(&y, e, value);
            else host_put(&y, e, h, ox_linear(rank, h->dims, co));
        }
        return ox_set_out_host(c, 0, &y);
    }
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s Pad at run time", mn_onnx_dtype_name(x->dtype));
    for (int i = 0; i < rank; i++)
        if (!od[i]) return ox_unsup(c, "an empty result at run time");
    mn_graph *g = c->g;
    mn_tensor t;
    OX_CHECK(ox_in_f32(c, 0, &t));
    int64_t cur[OX_MAX_RANK];
    for (int i = 0; i < rank; i++) cur[i] = x->dims[i];
    /* negative pads crop */
    for (int i = 0; i < rank; i++) {
        int64_t s = before[i] < 0 ? -before[i] : 0, e = after[i] < 0 ? -after[i] : 0;
        if (s || e) {
            OX_TRY(c, mn_slice(g, &t, t, i, s, cur[i] - s - e));
            cur[i] -= s + e;
            if (before[i] < 0) before[i] = 0;
            if (after[i] < 0) after[i] = 0;
        }
    }
    if (md == 0) {
        bool any = false;
        for (int i = 0; i < rank; i++) any = any || before[i] || after[i];
        if (any) {
            OX_TRY(c, mn_pad(g, &t, t, before, after));
            if (value != 0) {
                /* + value on the padded cells (exact: x + 0 inside) */
                ox_host m;
                OX_CHECK(host_new(c, &m, MN_ONNX_FLOAT, rank, od));
                int64_t co[OX_MAX_RANK];
                for (int64_t e = 0; e < m.numel; e++) {
                    ox_coords(rank, od, e, co);
                    bool out = false;
                    for (int i = 0; i < rank; i++) out = out || co[i] < before[i] || co[i] >= before[i] + cur[i];
                    m.f[e] = out ? value : 0;
                }
                mn_tensor mt;
                mn_status st = ox_const_tensor(c, &m, &mt);
                ox_host_free(&m);
                if (st) return st;
                OX_TRY(c, mn_add(g, &t, t, mt));
            }
        }
        return ox_set_out(c, 0, t, x->dtype);
    }
    /* edge, reflect, wrap: one concatenation of slices per padded axis */
    for (int i = 0; i < rank; i++) {
        if (!before[i] && !after[i]) continue;
        int64_t nparts = before[i] + after[i] + 1;
        if (nparts > 257) return ox_unsup(c, "pads of more than 128 cells in mode '%s'", mode);
        mn_tensor *parts = malloc((size_t)nparts * sizeof *parts);
        if (!parts) return ox_fail(c, MN_E_NOMEM, "out of memory");
        int p = 0;
        mn_status st = MN_OK;
        int64_t d = cur[i];
        for (int64_t k = -before[i]; k < d + after[i] && !st; k++) {
            if (k == 0) {
                parts[p++] = t;
                k = d - 1;
                continue;
            }
            int64_t v = k;
            if (md == 1) v = v < 0 ? 0 : d - 1;
            else if (md == 2) v = v < 0 ? -v : 2 * (d - 1) - v;
            else v = ((v % d) + d) % d;
            st = mn_slice(g, &parts[p++], t, i, v, 1);
        }
        if (!st) st = mn_concat(g, &t, parts, p, i);
        free(parts);
        if (st) return ox_graph_fail(c, st);
        cur[i] = od[i];
    }
    return ox_set_out(c, 0, t, x->dtype);
}

/* ---- constants ------------------------------------------------------------------ */

static mn_status op_shape(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    int64_t s, e;
    OX_CHECK(ox_attr_int(c, "start", 0, &s));
    OX_CHECK(ox_attr_int(c, "end", x->rank, &e));
    int r = x->rank;
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = s < 0 ? 0 : s > r ? r : s;
    e = e < 0 ? 0 : e > r ? r : e;
    int64_t n = e > s ? e - s : 0;
    ox_host y;
    OX_CHECK(host_new(c, &y, MN_ONNX_INT64, 1, &n));
    for (int64_t i = 0; i < n; i++) y.i[i] = x->dims[s + i];
    return ox_set_out_host(c, 0, &y);
}

static mn_status op_size(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    ox_host y;
    OX_CHECK(host_new(c, &y, MN_ONNX_INT64, 0, NULL));
    y.i[0] = ox_numel(x->rank, x->dims, OX_MAX_NUMEL);
    return ox_set_out_host(c, 0, &y);
}

static mn_status op_constant(ox_ctx *c) {
    const Onnx__NodeProto *n = c->node;
    if (n->n_attribute != 1) return ox_fail(c, MN_E_FORMAT, "needs exactly one attribute");
    const char *an = n->attribute[0]->name;
    const Onnx__AttributeProto *a = ox_attr(c, an);
    ox_host y;
    char sub[320];
    if (strcmp(an, "value") == 0) {
        if (!a->t) return ox_fail(c, MN_E_FORMAT, "value is not a tensor");
        mn_status st = ox_tensor_decode(&y, a->t, "value", sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        return ox_set_out_host(c, 0, &y);
    }
    if (strcmp(an, "value_float") == 0 || strcmp(an, "value_int") == 0) {
        bool f = an[6] == 'f';
        OX_CHECK(host_new(c, &y, f ? MN_ONNX_FLOAT : MN_ONNX_INT64, 0, NULL));
        if (f) y.f[0] = a->f;
        else y.i[0] = a->i;
        return ox_set_out_host(c, 0, &y);
    }
    if (strcmp(an, "value_floats") == 0 || strcmp(an, "value_ints") == 0) {
        bool f = an[6] == 'f';
        int64_t len = (int64_t)(f ? a->n_floats : a->n_ints);
        OX_CHECK(host_new(c, &y, f ? MN_ONNX_FLOAT : MN_ONNX_INT64, 1, &len));
        for (int64_t i = 0; i < len; i++) {
            if (f) y.f[i] = a->floats[i];
            else y.i[i] = a->ints[i];
        }
        return ox_set_out_host(c, 0, &y);
    }
    return ox_unsup(c, "attribute '%s'", an);
}

static mn_status op_constant_of_shape(ox_ctx *c) {
    const ox_host *sh;
    OX_CHECK(ox_in_host(c, 0, &sh));
    int64_t s[OX_MAX_RANK];
    int n;
    OX_CHECK(host_ints(c, sh, s, OX_MAX_RANK, &n, "shape"));
    for (int i = 0; i < n; i++)
        if (s[i] < 0) return ox_fail(c, MN_E_SHAPE, "dimension %lld", (long long)s[i]);
    const Onnx__AttributeProto *a = ox_attr(c, "value");
    ox_host v;
    int dt = MN_ONNX_FLOAT;
    double fv = 0;
    int64_t iv = 0;
    if (a) {
        char sub[320];
        if (!a->t) return ox_fail(c, MN_E_FORMAT, "value is not a tensor");
        mn_status st = ox_tensor_decode(&v, a->t, "value", sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        if (v.numel != 1) {
            ox_host_free(&v);
            return ox_fail(c, MN_E_SHAPE, "value must hold one element");
        }
        dt = v.dtype;
        fv = ox_host_get_f(&v, 0);
        iv = ox_host_get_i(&v, 0);
        ox_host_free(&v);
    }
    ox_host y;
    OX_CHECK(host_new(c, &y, dt, n, s));
    for (int64_t e = 0; e < y.numel; e++) {
        if (y.i) y.i[e] = iv;
        else y.f[e] = fv;
    }
    return ox_set_out_host(c, 0, &y);
}

static mn_status op_range(ox_ctx *c) {
    const ox_host *a, *b, *d;
    OX_CHECK(ox_in_host(c, 0, &a));
    OX_CHECK(ox_in_host(c, 1, &b));
    OX_CHECK(ox_in_host(c, 2, &d));
    if (a->numel != 1 || b->numel != 1 || d->numel != 1) return ox_fail(c, MN_E_SHAPE, "inputs must be scalars");
    int dt = a->dtype;
    ox_host y;
    if (a->i) {
        int64_t s = a->i[0], l = b->i[0], st = d->i[0];
        if (st == 0) return ox_fail(c, MN_E_INVALID, "delta 0");
        double cnt = ceil(((double)l - (double)s) / (double)st);
        if (!(cnt < 1e9)) return ox_unsup(c, "a range of %g elements", cnt);
        int64_t n = cnt > 0 ? (int64_t)cnt : 0;
        OX_CHECK(host_new(c, &y, dt, 1, &n));
        for (int64_t i = 0; i < n; i++) ox_host_set_i(&y, i, (int64_t)((uint64_t)s + (uint64_t)i * (uint64_t)st));
    } else {
        double s = a->f[0], l = b->f[0], st = d->f[0];
        if (st == 0) return ox_fail(c, MN_E_INVALID, "delta 0");
        double cnt = ceil((l - s) / st);
        if (!(cnt < 1e9)) return ox_unsup(c, "a range of %g elements", cnt);
        int64_t n = cnt > 0 ? (int64_t)cnt : 0;
        OX_CHECK(host_new(c, &y, dt, 1, &n));
        /* the reference accumulates: start, start + delta, ... in the type */
        double v = s;
        for (int64_t i = 0; i < n; i++) {
            ox_host_set_f(&y, i, v);
            v = ox_round_to(dt, v + st);
        }
    }
    return ox_set_out_host(c, 0, &y);
}

static mn_status op_eye_like(ox_ctx *c) {
    ox_value *x = ox_in(c, 0);
    int64_t k, dt;
    OX_CHECK(ox_attr_int(c, "k", 0, &k));
    OX_CHECK(ox_attr_int(c, "dtype", x->dtype, &dt));
    if (x->rank != 2) return ox_fail(c, MN_E_SHAPE, "input must be 2-D");
    if (!ox_dtype_known((int)dt)) return ox_unsup(c, "dtype %s", mn_onnx_dtype_name((int)dt));
    if (k < -OX_MAX_NUMEL || k > OX_MAX_NUMEL) k = k < 0 ? -OX_MAX_NUMEL : OX_MAX_NUMEL;
    ox_host y;
    OX_CHECK(host_new(c, &y, (int)dt, 2, x->dims));
    for (int64_t i = 0; i < x->dims[0]; i++) {
        int64_t j = i + k;
        if (j >= 0 && j < x->dims[1]) ox_host_set_i(&y, i * x->dims[1] + j, 1);
    }
    return ox_set_out_host(c, 0, &y);
}

static mn_status op_trilu(ox_ctx *c) {
    int64_t upper, k = 0;
    OX_CHECK(ox_attr_int(c, "upper", 1, &upper));
    ox_value *x = ox_in(c, 0);
    if (ox_has_in(c, 1)) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 1, &h));
        if (h->numel != 1) return ox_fail(c, MN_E_SHAPE, "k must be a scalar");
        k = ox_host_get_i(h, 0);
    }
    if (x->rank < 2) return ox_fail(c, MN_E_SHAPE, "input of rank %d", x->rank);
    int64_t N = x->dims[x->rank - 2], M = x->dims[x->rank - 1];
#define KEEP(i, j) (upper ? (j) - (i) >= k : (j) - (i) <= k)
    if (x->kind == OXV_CONST) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 0, &h));
        ox_host y;
        OX_CHECK(host_new(c, &y, h->dtype, h->rank, h->dims));
        for (int64_t e = 0; e < y.numel; e++) {
            int64_t j = e % M, i = (e / M) % N;
            if (KEEP(i, j)) host_put(&y, e, h, e);
        }
        return ox_set_out_host(c, 0, &y);
    }
    if (!ox_dtype_float(x->dtype)) return ox_unsup(c, "%s Trilu at run time", mn_onnx_dtype_name(x->dtype));
    if (N * M == 0) return ox_unsup(c, "an empty input at run time");
    ox_host m;
    int64_t md[2] = {N, M};
    OX_CHECK(host_new(c, &m, MN_ONNX_FLOAT, 2, md));
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < M; j++) m.f[i * M + j] = KEEP(i, j) ? 1 : 0;
#undef KEEP
    mn_tensor mt, t, z, y;
    mn_status st = ox_const_tensor(c, &m, &mt);
    ox_host_free(&m);
    if (st) return st;
    OX_CHECK(ox_in_f32(c, 0, &t));
    OX_CHECK(ox_scalar(c, 0.0f, &z));
    OX_TRY(c, mn_where(c->g, &y, mt, t, z));
    return ox_set_out(c, 0, y, x->dtype);
}

static mn_status op_onehot(ox_ctx *c) {
    int64_t a;
    OX_CHECK(ox_attr_int(c, "axis", -1, &a));
    if (!ox_all_known(c)) return ox_unsup(c, "run-time indices (only constants)");
    const ox_host *ih, *dh, *vh;
    OX_CHECK(ox_in_host(c, 0, &ih));
    OX_CHECK(ox_in_host(c, 1, &dh));
    OX_CHECK(ox_in_host(c, 2, &vh));
    if (dh->numel != 1 || vh->numel != 2) return ox_fail(c, MN_E_SHAPE, "depth must be a scalar and values hold 2");
    int64_t depth = ox_host_get_i(dh, 0);
    if (depth < 1 || depth > (1 << 20)) return ox_unsup(c, "depth %lld", (long long)depth);
    int r = ih->rank + 1, axis;
    OX_CHECK(ox_axis(c, a, r, "axis", &axis));
    int64_t od[OX_MAX_RANK];
    if (r > OX_MAX_RANK) return ox_unsup(c, "rank");
    for (int i = 0, j = 0; i < r; i++) od[i] = i == axis ? depth : ih->dims[j++];
    ox_host y;
    OX_CHECK(host_new(c, &y, vh->dtype, r, od));
    int64_t co[OX_MAX_RANK], ic[OX_MAX_RANK];
    for (int64_t e = 0; e < y.numel; e++) {
        ox_coords(r, od, e, co);
        for (int i = 0, j = 0; i < r; i++)
            if (i != axis) ic[j++] = co[i];
        int64_t iv = ox_host_get_i(ih, ox_linear(ih->rank, ih->dims, ic));
        if (iv < 0 && iv >= -depth) iv += depth;
        host_put(&y, e, vh, iv == co[axis] ? 1 : 0);
    }
    return ox_set_out_host(c, 0, &y);
}

static mn_status op_dropout(ox_ctx *c) {
    ox_attr_ignore(c, "seed");
    float ratio = 0.5f;
    if (c->ver < 12) OX_CHECK(ox_attr_float(c, "ratio", 0.5f, &ratio));
    if (c->ver < 7) ox_attr_ignore(c, "is_test");
    if (c->ver >= 12 && ox_has_in(c, 1)) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 1, &h));
        if (h->numel != 1) return ox_fail(c, MN_E_SHAPE, "ratio must hold one value");
        ratio = (float)ox_host_get_f(h, 0);
    }
    if (ox_has_in(c, 2)) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 2, &h));
        /* training with ratio 0 keeps everything: the identity too */
        if (h->numel != 1 || (ox_host_get_i(h, 0) && ratio != 0.0f))
            return ox_unsup(c, "training_mode true with ratio %g (random masks are not reproduced)", (double)ratio);
    }
    /* inference: the identity, and a mask of ones */
    ox_value *x = ox_in(c, 0);
    if (x->kind == OXV_CONST) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, 0, &h));
        ox_host y;
        char sub[128];
        mn_status st = ox_host_copy(&y, h, sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        OX_CHECK(ox_set_out_host(c, 0, &y));
    } else {
        mn_tensor t;
        OX_CHECK(ox_in_f32(c, 0, &t));
        OX_CHECK(ox_set_out(c, 0, t, x->dtype));
    }
    if (ox_has_out(c, 1)) {
        ox_host m;
        OX_CHECK(host_new(c, &m, MN_ONNX_BOOL, x->rank, x->dims));
        for (int64_t e = 0; e < m.numel; e++) m.i[e] = 1;
        OX_CHECK(ox_set_out_host(c, 1, &m));
    }
    return MN_OK;
}

static mn_status op_cumsum(ox_ctx *c) {
    int64_t excl, rev;
    OX_CHECK(ox_attr_int(c, "exclusive", 0, &excl));
    OX_CHECK(ox_attr_int(c, "reverse", 0, &rev));
    if (!ox_in_known(c, 0)) {
        /* a product with a 0/1 matrix along the axis (an infinite input
         * makes NaN where 0 x inf meets it) */
        ox_value *v = ox_in(c, 0);
        const ox_host *ah;
        OX_CHECK(ox_in_host(c, 1, &ah));
        if (ah->numel != 1) return ox_fail(c, MN_E_SHAPE, "axis must be a scalar");
        int axis;
        OX_CHECK(ox_axis(c, ox_host_get_i(ah, 0), v->rank, "axis", &axis));
        if (!ox_dtype_float(v->dtype)) return ox_unsup(c, "%s CumSum at run time (float only)", mn_onnx_dtype_name(v->dtype));
        int64_t n = v->dims[axis], pre = 1, post = 1;
        for (int i = 0; i < axis; i++) pre *= v->dims[i];
        for (int i = axis + 1; i < v->rank; i++) post *= v->dims[i];
        if (n * n > ((int64_t)1 << 24)) return ox_unsup(c, "an axis of %lld elements at run time", (long long)n);
        ox_host m;
        int64_t md[2] = {n, n};
        OX_CHECK(host_new(c, &m, MN_ONNX_FLOAT, 2, md));
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < n; i++)
                m.f[j * n + i] = (rev ? (excl ? j > i : j >= i) : (excl ? j < i : j <= i)) ? 1 : 0;
        mn_tensor mt, t;
        mn_status st = ox_const_tensor(c, &m, &mt);
        ox_host_free(&m);
        if (st) return st;
        OX_CHECK(ox_in_f32(c, 0, &t));
        int64_t d3[3] = {pre, n, post};
        OX_CHECK(ox_reshape(c, &t, t, 3, d3));
        if (post > 1) OX_TRY(c, mn_transpose(c->g, &t, t, 1, 2));
        int64_t d2[2] = {pre * post, n};
        OX_CHECK(ox_reshape(c, &t, t, 2, d2));
        OX_TRY(c, mn_matmul(c->g, &t, t, mt));
        int64_t b3[3] = {pre, post, n};
        OX_CHECK(ox_reshape(c, &t, t, 3, b3));
        if (post > 1) OX_TRY(c, mn_transpose(c->g, &t, t, 1, 2));
        OX_CHECK(ox_reshape(c, &t, t, v->rank, v->dims));
        return ox_set_out(c, 0, t, v->dtype);
    }
    if (!ox_all_known(c)) return ox_unsup(c, "a run-time axis");
    const ox_host *x, *ah;
    OX_CHECK(ox_in_host(c, 0, &x));
    OX_CHECK(ox_in_host(c, 1, &ah));
    if (ah->numel != 1) return ox_fail(c, MN_E_SHAPE, "axis must be a scalar");
    int axis;
    OX_CHECK(ox_axis(c, ox_host_get_i(ah, 0), x->rank, "axis", &axis));
    ox_host y;
    OX_CHECK(host_new(c, &y, x->dtype, x->rank, x->dims));
    int64_t co[OX_MAX_RANK], d = x->dims[axis];
    for (int64_t e = 0; e < y.numel; e++) {
        ox_coords(x->rank, x->dims, e, co);
        int64_t j0 = co[axis];
        double s = 0;
        int64_t si = 0;
        for (int64_t j = 0; j < d; j++) {
            bool in = rev ? (excl ? j > j0 : j >= j0) : (excl ? j < j0 : j <= j0);
            if (!in) continue;
            co[axis] = j;
            int64_t k = ox_linear(x->rank, x->dims, co);
            if (x->i) si = (int64_t)((uint64_t)si + (uint64_t)x->i[k]);
            else s = ox_round_to(x->dtype, s + x->f[k]);
        }
        if (y.i) y.i[e] = si;
        else y.f[e] = s;
    }
    return ox_set_out_host(c, 0, &y);
}

const ox_op ox_ops_shape[] = {
    {"Reshape", 1, 1, 2, 1, 1, op_reshape},
    {"Flatten", 1, 1, 1, 1, 1, op_flatten},
    {"Squeeze", 1, 1, 2, 1, 1, op_squeeze},
    {"Unsqueeze", 1, 1, 2, 1, 1, op_unsqueeze},
    {"Transpose", 1, 1, 1, 1, 1, op_transpose},
    {"Concat", 1, 1, 4096, 1, 1, op_concat},
    {"Split", 1, 1, 2, 1, 256, op_split},
    {"Slice", 1, 1, 5, 1, 1, op_slice},
    {"Gather", 1, 2, 2, 1, 1, op_gather},
    {"GatherElements", 11, 2, 2, 1, 1, op_gather_elements},
    {"Expand", 8, 2, 2, 1, 1, op_expand},
    {"Tile", 1, 2, 3, 1, 1, op_tile},
    {"Pad", 1, 1, 4, 1, 1, op_pad},
    {"Shape", 1, 1, 1, 1, 1, op_shape},
    {"Size", 1, 1, 1, 1, 1, op_size},
    {"Constant", 1, 0, 0, 1, 1, op_constant},
    {"ConstantOfShape", 9, 1, 1, 1, 1, op_constant_of_shape},
    {"Range", 11, 3, 3, 1, 1, op_range},
    {"EyeLike", 9, 1, 1, 1, 1, op_eye_like},
    {"Trilu", 14, 1, 2, 1, 1, op_trilu},
    {"OneHot", 9, 3, 3, 1, 1, op_onehot},
    {"Dropout", 1, 1, 3, 1, 2, op_dropout},
    {"CumSum", 11, 2, 2, 1, 1, op_cumsum},
    {NULL, 0, 0, 0, 0, 0, NULL},
};
