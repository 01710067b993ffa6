/* kernels_transformer.h - CPU reference kernels of the transformer family:
 * embedding and its backward, rotary position embedding, attention (the
 * forward, the row log-sum-exp, the backward helpers) and the KV-cache
 * append.
 *
 * Included by kernels_impl.h inside each instantiation (real = float with
 * suffix _f32, real = double with _f64); the type-independent helpers sit in
 * a block defined once. Attention here is the oracle: the straightforward
 * two-pass softmax per query row (the max, then the sums), every score,
 * exponential and sum in double, each result rounded once to `real`. In the
 * fast contract (node_round16; cpu.c rounds q, k, v and dout first) the
 * weights that multiply a 16-bit operand are rounded too, as tensor cores
 * take them: the forward's 2^(s log2(e) - c) (c an integer at or above
 * the row's maximum; the sum l stays unrounded and divides the output),
 * the backward's P (for dv) and dS (for dq and dk). The
 * head dimension is walked in chunks of KN_TR_CHUNK doubles kept on the
 * stack, so nothing is allocated. No include guard on purpose.
 *
 * Does not: check shapes (graph/shape.c did), allocate memory, or tile
 * anything (the Vulkan kernels stream keys through shared memory instead).
 */

#ifndef KN_TR_ONCE
#define KN_TR_ONCE

/* Host-written positions are clamped to [-2^29, 2^29] (as on Vulkan). */
#define KN_TR_POS_LIMIT ((int64_t)1 << 29)
#define KN_TR_CHUNK 64
#define KN_TR_L2E 1.44269504088896340736 /* log2(e) */

/* The i32 position input at index `at`, clamped; 0 if absent. */
static int64_t kn_tr_pos(const node *n, void *const in[NODE_MAX_IN], int at) {
    if (n->nin <= at) return 0;
    int64_t p = *(const int32_t *)in[at];
    return p < -KN_TR_POS_LIMIT ? -KN_TR_POS_LIMIT : p > KN_TR_POS_LIMIT ? KN_TR_POS_LIMIT : p;
}

/* Geometry and mask of an attention node: q [B,Hq,Tq,D], k/v [B,Hkv,Tk,D]. */
typedef struct kn_attn {
    int64_t B, Hq, Hkv, Tq, Tk, D, grp;
    int64_t off;    /* causal: query i attends keys j <= i + off */
    int64_t kv_len; /* keys j >= kv_len are absent */
    int64_t window; /* > 0: and keys j > i + off - window */
    bool causal;
    double scale;
    mn_round16 rnd; /* the fast contract (NODE_F_ROUND_*): the weights P and dS rounded before their products */
} kn_attn;

static void kn_attn_init(kn_attn *a, const mn_graph *g, const node *n, void *const in[NODE_MAX_IN], int pos_at) {
    const node *q = kn_in(g, n, 0), *k = kn_in(g, n, 1);
    a->B = q->shape[0], a->Hq = q->shape[1], a->Tq = q->shape[2], a->D = q->shape[3];
    a->Hkv = k->shape[1], a->Tk = k->shape[2];
    a->grp = a->Hq / a->Hkv;
    const mn_attention_attrs at = attention_attrs_of(n);
    a->causal = at.causal != 0;
    a->window = at.window;
    a->scale = at.scale;
    a->rnd = node_round16(n);
    if (n->nin > pos_at) {
        const int64_t pos = kn_tr_pos(n, in, pos_at), len = pos + a->Tq;
        a->off = pos;
        a->kv_len = len < 0 ? 0 : len > a->Tk ? a->Tk : len;
    } else {
        a->off = a->Tk - a->Tq;
        a->kv_len = a->Tk;
    }
}

/* Does query row i attend key row j? */
static bool kn_attn_valid(const kn_attn *a, int64_t i, int64_t j) {
    if (j >= a->kv_len) return false;
    if (!a->causal) return true;
    const int64_t last = i + a->off;
    return j <= last && (a->window <= 0 || j > last - a->window);
}

/* Offsets (in elements) of query row (b, h, i) and of kv head hk's rows. */
#define KN_TR_QROW(a, b, h, i) ((((b) * (a).Hq + (h)) * (a).Tq + (i)) * (a).D)
#define KN_TR_KVHEAD(a, b, hk) (((b) * (a).Hkv + (hk)) * (a).Tk * (a).D)

#endif /* KN_TR_ONCE */

/* ---- embedding: table [V,D], ids i32 [...] -> [..., D] ------------------- */

KN_DEF(embedding) {
    const node *T = kn_in(g, n, 0);
    const int64_t V = T->shape[0], D = T->shape[1], N = kn_numel(kn_in(g, n, 1));
    const real *table = in[0];
    const int32_t *ids = in[1];
    real *y = out;
    for (int64_t p = 0; p < N; p++) {
        const int64_t id = ids[p];
        real *row = y + p * D;
        if (id >= 0 && id < V) memcpy(row, table + id * D, (size_t)D * sizeof(real));
        else
            for (int64_t d = 0; d < D; d++) row[d] = 0;
    }
}

/* (ids, dy [..., D]) -> dtable [V,D]: dy rows added in position order
 * (duplicate ids accumulate; out-of-range ids are skipped). */
KN_DEF(embedding_bwd) {
    const int64_t V = n->shape[0], D = n->shape[1], N = kn_numel(kn_in(g, n, 0));
    const int32_t *ids = in[0];
    const real *dy = in[1];
    real *dt = out;
    for (int64_t i = 0; i < V * D; i++) dt[i] = 0;
    for (int64_t p = 0; p < N; p++) {
        const int64_t id = ids[p];
        if (id < 0 || id >= V) continue;
        for (int64_t d = 0; d < D; d++) dt[id * D + d] += dy[p * D + d];
    }
}

/* ---- rotary embedding: x [..., T, Dh] ------------------------------------ */

/* Row r (time t = r % T) at position p = offset + pos + t; the angle of pair
 * i is p * theta^(-2i/Dh), formed and rotated in double; inverse negates it. */
KN_DEF(rope) {
    const node *X = kn_in(g, n, 0);
    const int64_t Dh = X->shape[X->rank - 1], T = X->shape[X->rank - 2], half = Dh / 2;
    const mn_rope_attrs ra = rope_attrs_of(n);
    const int64_t rows = kn_numel(X) / Dh, p0 = ra.offset + kn_tr_pos(n, in, 1);
    const double theta = ra.theta, sign = ra.inverse ? -1.0 : 1.0;
    const real *x = in[0];
    real *y = out;
    for (int64_t r = 0; r < rows; r++) {
        const double p = (double)(p0 + r % T);
        const real *xr = x + r * Dh;
        real *yr = y + r * Dh;
        for (int64_t i = 0; i < half; i++) {
            const double inv = pow(theta, -2.0 * (double)i / (double)Dh), a = p * inv;
            const double c = cos(a), s = sign * sin(a);
            const double x1 = xr[i], x2 = xr[i + half];
            yr[i] = (real)(x1 * c - x2 * s);
            yr[i + half] = (real)(x2 * c + x1 * s);
        }
    }
}

/* ---- attention ----------------------------------------------------------- */

static double KN(tr_dot)(const real *a, const real *b, int64_t D) {
    double s = 0;
    for (int64_t d = 0; d < D; d++) s += (double)a[d] * (double)b[d];
    return s;
}

/* Row statistics of query row qr (index i) against the keys kb [Tk,D]:
 * *m = the largest score, returns sum_j exp(score_j - *m); 0 (and *m = -inf)
 * when the row attends no key. */
static double KN(attn_row)(const kn_attn *a, const real *qr, const real *kb, int64_t i, double *m) {
    double best = -INFINITY;
    bool any = false;
    for (int64_t j = 0; j < a->Tk; j++) {
        if (!kn_attn_valid(a, i, j)) continue;
        const double s = a->scale * KN(tr_dot)(qr, kb + j * a->D, a->D);
        if (!any || s > best) best = s;
        any = true;
    }
    *m = best;
    if (!any) return 0;
    double l = 0;
    for (int64_t j = 0; j < a->Tk; j++)
        if (kn_attn_valid(a, i, j)) l += exp(a->scale * KN(tr_dot)(qr, kb + j * a->D, a->D) - best);
    return l;
}

/* (q, k, v[, pos]) -> softmax(scores) v per query row; zeros for a row
 * without keys. */
KN_DEF(attention) {
    kn_attn a;
    kn_attn_init(&a, g, n, in, 3);
    const mn_round16 rnd = a.rnd;
    const real *q = in[0], *k = in[1], *v = in[2];
    real *y = out;
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.Hq; h++) {
            const real *kb = k + KN_TR_KVHEAD(a, b, h / a.grp), *vb = v + KN_TR_KVHEAD(a, b, h / a.grp);
            for (int64_t i = 0; i < a.Tq; i++) {
                const real *qr = q + KN_TR_QROW(a, b, h, i);
                real *yr = y + KN_TR_QROW(a, b, h, i);
                double m;
                double l = KN(attn_row)(&a, qr, kb, i, &m);
                /* the fast contract: the weights 2^(s log2(e) - c), c the integer
                 * ceil(m log2(e)), rounded; their unrounded sum divides the row.
                 * Rounding commutes with powers of two, so a kernel that
                 * rescales by 2^k from a running reference (attention_tile.glsl
                 * AT_REF) rounds the same weights. */
                const double c = l > 0 ? ceil(m * KN_TR_L2E) : 0;
                if (rnd != MN_ROUND_NONE && l > 0) {
                    l = 0;
                    for (int64_t j = 0; j < a.Tk; j++)
                        if (kn_attn_valid(&a, i, j)) l += exp2(a.scale * KN_TR_L2E * KN(tr_dot)(qr, kb + j * a.D, a.D) - c);
                }
                for (int64_t d0 = 0; d0 < a.D; d0 += KN_TR_CHUNK) {
                    const int64_t dn = a.D - d0 < KN_TR_CHUNK ? a.D - d0 : KN_TR_CHUNK;
                    double acc[KN_TR_CHUNK] = {0};
                    for (int64_t j = 0; l > 0 && j < a.Tk; j++) {
                        if (!kn_attn_valid(&a, i, j)) continue;
                        const double sc = a.scale * KN(tr_dot)(qr, kb + j * a.D, a.D);
                        const double p = rnd == MN_ROUND_NONE ? exp(sc - m) / l
                                                              : mn_round16_d(exp2(sc * KN_TR_L2E - c), rnd);
                        const real *vr = vb + j * a.D + d0;
                        for (int64_t dd = 0; dd < dn; dd++) acc[dd] += p * (double)vr[dd];
                    }
                    for (int64_t dd = 0; dd < dn; dd++)
                        yr[d0 + dd] = (real)(rnd == MN_ROUND_NONE || l <= 0 ? acc[dd] : acc[dd] / l);
                }
            }
        }
}

/* (q, k, v[, pos]) -> [B,Hq,Tq]: m + log(sum exp(s - m)), -inf without keys. */
KN_DEF(attention_lse) {
    kn_attn a;
    kn_attn_init(&a, g, n, in, 3);
    const real *q = in[0], *k = in[1];
    real *y = out;
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.Hq; h++)
            for (int64_t i = 0; i < a.Tq; i++) {
                double m;
                const double l = KN(attn_row)(&a, q + KN_TR_QROW(a, b, h, i), k + KN_TR_KVHEAD(a, b, h / a.grp), i, &m);
                y[(b * a.Hq + h) * a.Tq + i] = l > 0 ? (real)(m + log(l)) : (real)-INFINITY;
            }
}

/* (out, dout, lse) -> [..., 2] = (lse, sum_d dout * out) per query row. */
KN_DEF(attention_bwd_prep) {
    const node *O = kn_in(g, n, 0);
    const int64_t D = O->shape[3], rows = kn_numel(O) / D;
    const real *o = in[0], *dout = in[1], *lse = in[2];
    real *y = out;
    for (int64_t r = 0; r < rows; r++) {
        y[2 * r] = lse[r];
        y[2 * r + 1] = (real)KN(tr_dot)(o + r * D, dout + r * D, D);
    }
}

/* (q, k, v, dout, prep[, pos]) -> dq = scale * sum_j P_ij (dP_ij - delta_i) k_j
 * with P_ij = exp(s_ij - lse_i), dP_ij = dout_i . v_j. */
KN_DEF(attention_bwd_q) {
    kn_attn a;
    kn_attn_init(&a, g, n, in, 5);
    const mn_round16 rnd = a.rnd;
    const real *q = in[0], *k = in[1], *v = in[2], *dout = in[3], *prep = in[4];
    real *dq = out;
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.Hq; h++) {
            const real *kb = k + KN_TR_KVHEAD(a, b, h / a.grp), *vb = v + KN_TR_KVHEAD(a, b, h / a.grp);
            for (int64_t i = 0; i < a.Tq; i++) {
                const int64_t row = (b * a.Hq + h) * a.Tq + i;
                const real *qr = q + row * a.D, *dor = dout + row * a.D;
                const double lse = prep[2 * row], delta = prep[2 * row + 1];
                for (int64_t d0 = 0; d0 < a.D; d0 += KN_TR_CHUNK) {
                    const int64_t dn = a.D - d0 < KN_TR_CHUNK ? a.D - d0 : KN_TR_CHUNK;
                    double acc[KN_TR_CHUNK] = {0};
                    for (int64_t j = 0; j < a.Tk; j++) {
                        if (!kn_attn_valid(&a, i, j)) continue;
                        const real *kr = kb + j * a.D;
                        const double p = exp(a.scale * KN(tr_dot)(qr, kr, a.D) - lse);
                        const double ds = mn_round16_d(p * (KN(tr_dot)(dor, vb + j * a.D, a.D) - delta), rnd);
                        for (int64_t dd = 0; dd < dn; dd++) acc[dd] += ds * (double)kr[d0 + dd];
                    }
                    for (int64_t dd = 0; dd < dn; dd++) dq[row * a.D + d0 + dd] = (real)(a.scale * acc[dd]);
                }
            }
        }
}

/* One kv gradient into dkv [B,Hkv,Tk,D]: wrt_v 0: dk_j = scale * sum dS_ij
 * q_i, 1: dv_j = sum P_ij dout_i; sums over the query rows i of every query
 * head of kv head j's group. */
static void KN(attn_bwd_kv_one)(const kn_attn *ap, void *const in[NODE_MAX_IN], real *dkv, bool wrt_v) {
    const kn_attn a = *ap;
    const real *q = in[0], *k = in[1], *v = in[2], *dout = in[3], *prep = in[4];
    const mn_round16 rnd = a.rnd;
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t hk = 0; hk < a.Hkv; hk++)
            for (int64_t j = 0; j < a.Tk; j++) {
                const int64_t kvrow = KN_TR_KVHEAD(a, b, hk) + j * a.D;
                const real *kr = k + kvrow, *vr = v + kvrow;
                for (int64_t d0 = 0; d0 < a.D; d0 += KN_TR_CHUNK) {
                    const int64_t dn = a.D - d0 < KN_TR_CHUNK ? a.D - d0 : KN_TR_CHUNK;
                    double acc[KN_TR_CHUNK] = {0};
                    for (int64_t gq = 0; gq < a.grp; gq++)
                        for (int64_t i = 0; i < a.Tq; i++) {
                            if (!kn_attn_valid(&a, i, j)) continue;
                            const int64_t row = (b * a.Hq + hk * a.grp + gq) * a.Tq + i;
                            const real *qr = q + row * a.D, *dor = dout + row * a.D;
                            const double p = exp(a.scale * KN(tr_dot)(qr, kr, a.D) - (double)prep[2 * row]);
                            if (wrt_v) {
                                const double pr = mn_round16_d(p, rnd);
                                for (int64_t dd = 0; dd < dn; dd++) acc[dd] += pr * (double)dor[d0 + dd];
                            } else {
                                const double ds =
                                    mn_round16_d(p * (KN(tr_dot)(dor, vr, a.D) - (double)prep[2 * row + 1]), rnd);
                                for (int64_t dd = 0; dd < dn; dd++) acc[dd] += ds * (double)qr[d0 + dd];
                            }
                        }
                    for (int64_t dd = 0; dd < dn; dd++)
                        dkv[kvrow + d0 + dd] = (real)(wrt_v ? acc[dd] : a.scale * acc[dd]);
                }
            }
}

/* (q, k, v, dout, prep[, pos]) -> ip[2] = 0: dk, 1: dv [B,Hkv,Tk,D];
 * 2: both, [2B,Hkv,Tk,D] = (dk; dv). */
KN_DEF(attention_bwd_kv) {
    kn_attn a;
    kn_attn_init(&a, g, n, in, 5);
    const int64_t part = a.B * a.Hkv * a.Tk * a.D;
    real *y = out;
    const int64_t wrt = attention_attrs_of(n).wrt;
    for (int w = 0; w < 2; w++)
        if (wrt == 2 || wrt == w) KN(attn_bwd_kv_one)(&a, in, y + (wrt == 2 ? w * part : 0), w == 1);
}

/* ---- KV cache ------------------------------------------------------------- */

/* (cache [L,Tmax,D], x [L,Tnew,D], pos) -> cache with x at rows pos + t;
 * out is the cache's storage (an alias); rows outside [0, Tmax) dropped. */
KN_DEF(kv_append) {
    const node *C = kn_in(g, n, 0), *X = kn_in(g, n, 1);
    const int64_t D = C->shape[C->rank - 1], Tmax = C->shape[C->rank - 2], Tnew = X->shape[X->rank - 2];
    const int64_t L = kn_numel(X) / (Tnew * D), pos = kn_tr_pos(n, in, 2);
    const real *x = in[1];
    real *c = out;
    kn_copy(n, out, in[0], sizeof(real));
    for (int64_t l = 0; l < L; l++)
        for (int64_t t = 0; t < Tnew; t++) {
            const int64_t row = pos + t;
            if (row < 0 || row >= Tmax) continue;
            memcpy(c + (l * Tmax + row) * D, x + (l * Tnew + t) * D, (size_t)D * sizeof(real));
        }
}
