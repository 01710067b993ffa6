/* kernels.c - builds the two CPU kernel tables (f32 and f64 storage).
 *
 * Holds the helpers that do not depend on the element type (shape
 * arithmetic, the broadcast iterator set-up, convolution geometry, byte-wise
 * layout moves used by PERMUTE/BROADCAST for any element size), then
 * instantiates kernels_impl.h twice: once with real = float (suffix _f32),
 * once with real = double (suffix _f64).
 *
 * Does not: depend on graph building functions (graph.c); it only reads the
 * node structs of graph.h.
 */
#include "backend/cpu/cpu_kernels.h"
#include "graph/attrs.h"
#include "graph/pointwise.h"

#include <math.h>
#include <pthread.h>
#include <tgmath.h>

/* Threads for the large matrix products (kernels_impl.h gemm): the session's
 * thread count (MEGANEURA_THREADS, else the online CPUs), at most
 * KN_MAX_THREADS. Results do not depend on it. */
#define KN_MAX_THREADS 16
static int kn_threads(void) {
    int t = mn_thread_count();
    return t < 1 ? 1 : t > KN_MAX_THREADS ? KN_MAX_THREADS : t;
}

/* ---- shape helpers ------------------------------------------------------- */

static int64_t kn_numel(const node *n) {
    int64_t e = 1;
    for (int i = 0; i < n->rank; i++) e *= n->shape[i];
    return e;
}

static const node *kn_in(const mn_graph *g, const node *n, int i) { return &g->nodes[n->in[i]]; }

/* Element size of a node in the given float storage size (int32 for MN_I32). */
static size_t kn_esize(const node *n, size_t real_size) {
    return n->dtype == MN_I32 ? sizeof(int32_t) : real_size;
}

/* Right-aligns shape into 4 dims, leading dims 1. */
static void kn_pad4(int64_t out[4], int rank, const int64_t *shape) {
    for (int d = 0; d < 4; d++) out[d] = 1;
    for (int i = 0; i < rank; i++) out[4 - rank + i] = shape[i];
}

/* Element strides (over the padded 4-d shape) with which an input of shape
 * (rank, shape) is read while iterating the output's padded 4-d index space:
 * a dim of size 1 that the output broadcasts gets stride 0 (numpy rules,
 * right-aligned). */
static void kn_bcast_strides(int64_t st[4], int rank, const int64_t *shape) {
    int64_t s4[4], acc = 1;
    kn_pad4(s4, rank, shape);
    for (int d = 3; d >= 0; d--) {
        st[d] = s4[d] == 1 ? 0 : acc;
        acc *= s4[d];
    }
}

/* The broadcast iterator: the output's padded dims plus the strides of up to
 * two inputs. Kernels walk it with BCAST_FOR (defined in kernels_impl.h's
 * users) as four nested loops, innermost dim last. */
typedef struct bcast_iter {
    int64_t dim[4];       /* output dims, padded to 4 */
    int64_t stride[2][4]; /* per input */
} bcast_iter;

static void bcast_init(bcast_iter *it, const node *out, const node *a, const node *b) {
    kn_pad4(it->dim, out->rank, out->shape);
    kn_bcast_strides(it->stride[0], a->rank, a->shape);
    if (b) kn_bcast_strides(it->stride[1], b->rank, b->shape);
    else memset(it->stride[1], 0, sizeof it->stride[1]);
}

/* Reduction over one axis viewed as [outer, len, inner]; MN_ALL_AXES (or a
 * rank-0 input) gives [1, numel, 1]. */
static void kn_axis_split(int64_t *outer, int64_t *len, int64_t *inner, const node *x, int64_t axis) {
    *outer = 1;
    *len = 1;
    *inner = 1;
    if (axis == MN_ALL_AXES || axis < 0 || axis >= x->rank) {
        *len = kn_numel(x);
        return;
    }
    for (int i = 0; i < x->rank; i++) {
        if (i < axis) *outer *= x->shape[i];
        else if (i == axis) *len = x->shape[i];
        else *inner *= x->shape[i];
    }
}

/* ---- convolution geometry ------------------------------------------------ */

typedef struct conv_geom {
    int64_t N, C, H, W;     /* input */
    int64_t O, Cg, KH, KW;  /* weight: [O, C/groups, KH, KW] */
    int64_t OH, OW;         /* output */
    int64_t sh, sw, ph, pw, dh, dw, groups, Og;
} conv_geom;

static int64_t kn_pos(int64_t v) { return v > 0 ? v : 1; }

/* x: [N,C,H,W], w: [O,Cg,KH,KW], y: [N,O,OH,OW]; ip as CONV2D. */
static void conv_geom_init(conv_geom *c, const node *n, const node *x, const node *w, const node *y) {
    c->N = x->shape[0], c->C = x->shape[1], c->H = x->shape[2], c->W = x->shape[3];
    c->O = w->shape[0], c->Cg = w->shape[1], c->KH = w->shape[2], c->KW = w->shape[3];
    c->OH = y->shape[2], c->OW = y->shape[3];
    const mn_conv_attrs a = conv_attrs_of(n);
    c->sh = kn_pos(a.stride[0]), c->sw = kn_pos(a.stride[1]);
    c->ph = a.pad[0], c->pw = a.pad[1];
    c->dh = kn_pos(a.dilation[0]), c->dw = kn_pos(a.dilation[1]);
    c->groups = kn_pos(a.groups);
    c->Og = c->O / c->groups;
}

/* Output positions o in [*lo, *hi) whose input position o*s - p + k*d lies in
 * [0, isz), for kernel offset k. Replaces a bounds check per element. */
static void conv_range(int64_t *lo, int64_t *hi, int64_t osz, int64_t isz, int64_t s, int64_t p,
                       int64_t d, int64_t k) {
    int64_t off = k * d - p; /* input position = o*s + off */
    int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t num = isz - 1 - off;
    int64_t h = num < 0 ? 0 : num / s + 1;
    if (h > osz) h = osz;
    *lo = l;
    *hi = h > l ? h : l;
}

/* ---- layout moves over any element size ---------------------------------- */

/* Copies one element of size es (4 or 8). */
static inline void kn_copy_elem(char *dst, const char *src, size_t es) {
    if (es == 4) memcpy(dst, src, 4);
    else memcpy(dst, src, 8);
}

/* out[i0,i1,i2,i3] = in[sum_d i_d * st[d]] for the padded output dims. */
static void kn_gather4(char *out, const char *in, const int64_t dim[4], const int64_t st[4], size_t es) {
    int64_t k = 0;
    for (int64_t i0 = 0; i0 < dim[0]; i0++)
        for (int64_t i1 = 0; i1 < dim[1]; i1++)
            for (int64_t i2 = 0; i2 < dim[2]; i2++) {
                const char *row = in + (size_t)(i0 * st[0] + i1 * st[1] + i2 * st[2]) * es;
                for (int64_t i3 = 0; i3 < dim[3]; i3++, k++)
                    kn_copy_elem(out + (size_t)k * es, row + (size_t)(i3 * st[3]) * es, es);
            }
}

/* PERMUTE: out.shape[i] = in.shape[perm[i]] (permute_axis). */
static void kn_permute(const node *n, const node *x, void *out, const void *in, size_t es) {
    int64_t xstride[MN_MAX_RANK], acc = 1, dim[4], st[4];
    for (int i = x->rank - 1; i >= 0; i--) {
        xstride[i] = acc;
        acc *= x->shape[i];
    }
    kn_pad4(dim, n->rank, n->shape);
    for (int d = 0; d < 4; d++) st[d] = 0;
    for (int i = 0; i < n->rank; i++) st[4 - n->rank + i] = xstride[permute_axis(n, i)];
    kn_gather4(out, in, dim, st, es);
}

/* BROADCAST: expands x to n's shape. */
static void kn_broadcast(const node *n, const node *x, void *out, const void *in, size_t es) {
    bcast_iter it;
    bcast_init(&it, n, x, NULL);
    kn_gather4(out, in, it.dim, it.stride[0], es);
}

static void kn_copy(const node *n, void *out, const void *in, size_t es) {
    if (out != in) memmove(out, in, (size_t)kn_numel(n) * es);
}

/* ---- the two instantiations ---------------------------------------------- */

#define real float
#define KN_SUFFIX _f32
#include "backend/cpu/kernels_impl.h"
#undef real
#undef KN_SUFFIX

#define real double
#define KN_SUFFIX _f64
#include "backend/cpu/kernels_impl.h"
#undef real
#undef KN_SUFFIX
