// attention.glsl - scaled dot-product attention, flash-attention style, and
// its backward gathers. No Tq x Tk matrix exists anywhere: scores are
// recomputed where they are needed.
//
// AT_OP (from vk_gen_transformer.c):
//   AT_FWD    (q, k, v[, pos]) -> out [B,Hq,Tq,D]: online softmax, a running
//             max m, sum l and accumulator per query row
//   AT_LSE    (q, k, v[, pos]) -> [B,Hq,Tq]: m + log(l) of the same loop
//             (-inf for a row with no key)
//   AT_BWD_Q  (q, k, v, dout, prep[, pos]) -> dq: per query row,
//             scale * sum_j P_ij (dout_i . v_j - delta_i) k_j
//   AT_BWD_KV (same inputs) -> dk (AT_WRT_V 0), dv (1) or both (2, into
//             [2B,Hkv,Tk,D]: dv at offset AT_PART) in one pass: per key
//             row j, summed over the query rows of every query head of j's
//             group: dk_j = scale * sum dS_ij q_i, dv_j = sum P_ij dout_i
// with P_ij = exp(s_ij - lse_i), s_ij = scale * q_i . k_j, and prep holding
// (lse_i, delta_i = dout_i . out_i) per query row.
//
// Mask (identical to the CPU kernel): key j exists if j < kvlen; causal:
// j <= i + off, window W > 0: j > i + off - W. Without a position input
// off = Tk - Tq, kvlen = Tk; with one, off = pos (clamped to +-2^29),
// kvlen = clamp(pos + Tq, 0, Tk).
//
// Work split: a workgroup (LOCAL_X = AT_R * AT_S invocations) owns AT_R rows
// (query rows, or key rows for AT_BWD_KV) of one (batch, head); invocation
// t serves row t / AT_S and takes every AT_S-th item of each tile, where
// items are keys (query-side ops) or (query head, query row) pairs
// (AT_BWD_KV). Only items that can pass the mask for some row of the block
// are visited. Tiles of AT_BK items, AT_ITEMW floats each (k, v rows; or q,
// dout rows and the two prep values), are loaded cooperatively into shared
// memory. At the end the AT_S partial results of a row are merged through
// shared memory (running maxima rescaled to the common one): with
// AT_PMERGE all partial rows at once, each invocation then summing one
// output element over its AT_S parts (a decoding step's whole merge costs
// about AT_S shared reads); else one element at a time. Every output
// element is written by one invocation; no atomics.
//
// Loops: lavapipe ends an invocation's loops after 65535 iterations in all,
// so the head-dimension loops and the tile load run in unrolled runs of
// AT_DU and AT_LU (short code, few counted iterations); the generator
// counts the rest (tiles, the items / AT_S of each, the AT_S-way merge) and
// picks AT_R (hence AT_S) to keep it under the device's limit.
//
// Numerics: f32 throughout (the fast contract: AT_RND0 .. 3 round q, k, v
// and dout as they are read, unless a cast did, AT_RNDW and the weights p (relative to the running
// maximum) and dS before their products, mathlib's rounding, the CPU's
// rule); dot products are plain f32 sums. The online
// rescaling keeps every exponent <= 0, so logits of 1e3 and more neither
// overflow nor lose the softmax (tested). A row with no key writes zeros
// (and lse -inf).
//
// Inputs: X0 q, X1 k, X2 v, then AT_FWD/AT_LSE: X3 pos; backward: X3 dout,
// X4 prep, X5 pos. Defines: AT_OP, AT_B, AT_HQ, AT_HKV, AT_GRP, AT_TQ,
// AT_TK, AT_D, AT_DU, AT_LU, AT_OUT_BTHD (forward: rows stored as
// [B, Tq, Hq, D], a folded permute), AT_CAUSAL, AT_WINDOW, AT_SCALE, AT_HAS_POS, AT_POS,
// AT_WRT_V, AT_PART, AT_SAVE_LSE (forward: also write the rows' lse through
// AT_LSE_WR, a binding after the inputs; kir.h KIR_SAVED),
// AT_NROWS, AT_R, AT_S, AT_BK, AT_ITEMW, AT_ISTR, AT_PSTR, AT_NBLK, AT_PMERGE,
// TR_NWG.
// Does not: use subgroup operations or cooperative matrices (a later,
// faster variant can slot in as another template).

// The op codes, AT_REF and its constants, the mask (at_valid): attention_common.glsl
// (placed before this file; its block-range helpers are the block kernels').

#define AT_LOCAL uint(AT_R * AT_S)
#define AT_LOADS ((AT_BK * AT_ITEMW + AT_LOCAL - 1u) / AT_LOCAL) // tile elements per invocation
// The tile load runs in unrolled batches of AT_LU (AT_LOADS / AT_LU
// iterations for the loop limiter; steps past AT_LOADS fall outside the
// tile and are skipped by the load's bound); for (d = 0; d < AT_D; d++)
// runs as a loop over unrolled runs of AT_DU steps (AT_D / AT_DU iterations)
#if AT_D_ONE_RUN
// no loop limiter: plain loops with constant bounds, unrolled as the
// compiler sees fit: the form of the fastest H200 run (runs with a variable
// base put the per-row arrays in local memory, 2.5x slower attention there;
// this form itself is not re-measured since, docs/PERF.md)
#define AT_FOR_D(d) for (uint d = 0u; d < AT_D; d++)
#else
#define AT_FOR_D(d) \
    for (uint d##_run = 0u; d##_run < AT_D; d##_run += AT_DU) \
        [[unroll]] for (uint d##_u = 0u, d = d##_run; d##_u < AT_DU; d##_u++, d++)
#endif

// Shared rows are padded to odd strides (AT_ISTR = AT_ITEMW | 1 for the
// tile, AT_PSTR = AT_D | 1 for the merge's partial rows): the invocations
// of a SIMD group read items AT_ISTR floats apart, so every one hits its
// own bank (an even stride put all 32 of an H200's on one: 32-way
// conflicts on every read of the tile).
shared float sh_tile[AT_BK * AT_ISTR];
shared float sh_a[AT_LOCAL];
shared float sh_b[AT_LOCAL];

// Where a block's items are (set by main): AT_BWD_KV: query rows ilo ..
// ilo + ni - 1 of the group's query heads from qhead0; else keys from lo of
// the kv head at element kvbase.
IDX g_kvbase;
int g_lo, g_ilo, g_ni;
uint g_qhead0;

// Element e of the tile of items base ..: item base + e / AT_ITEMW, its
// column e % AT_ITEMW (k then v; q, dout, then the two prep values).
float at_fetch(uint e, int base) {
    int u = base + int(e / AT_ITEMW);
    uint c = e % AT_ITEMW;
#if AT_OP == AT_BWD_KV
    IDX qrow = (g_qhead0 + uint(u / g_ni)) * uint(AT_TQ) + uint(g_ilo + u % g_ni);
    if (c < AT_D) return AT_RND0(X0(qrow * AT_D + c));
    if (c < 2u * AT_D) return AT_RND3(X3(qrow * AT_D + c - AT_D));
    return X4(2u * qrow + (c - 2u * AT_D));
#else
    IDX koff = g_kvbase + IDX(g_lo + u) * AT_D;
#if AT_OP == AT_LSE
    return AT_RND1(X1(koff + c));
#else
    return (c < AT_D ? AT_RND1(X1(koff + c)) : AT_RND2(X2(koff + c - AT_D)));
#endif
#endif
}

#if AT_OP == AT_BWD_Q || AT_OP == AT_BWD_KV
// Y(base + d) = outscale * the sum of the AT_S partial a[d] of row r.
// AT_PMERGE: every invocation's partial row goes to shared memory at once
// (the tile buffer, free after the loop), then invocation e sums element e
// of the block's rows over their AT_S parts; else one element at a time.
void at_write_sum(float a[AT_D], uint t, uint r, uint s, int rowc, IDX base, float outscale) {
#if AT_PMERGE
    barrier(); // every read of sh_tile before this is done
    AT_FOR_D(d) sh_tile[t * AT_PSTR + d] = a[d];
    memoryBarrierShared();
    barrier();
    IDX base0 = base - r * AT_D; // row 0 of the block
    for (uint e = t; e < AT_R * AT_D; e += AT_LOCAL) {
        uint rr = e / AT_D;
        if (int(rr) >= rowc) continue;
        float v = 0.0;
        for (uint u = 0u; u < AT_S; u++) v += sh_tile[(rr * AT_S + u) * AT_PSTR + e % AT_D];
        Y(base0 + e) = outscale * v;
    }
#else
    bool live = int(r) < rowc;
    AT_FOR_D(d) {
#if AT_S > 1
        sh_a[t] = a[d];
        memoryBarrierShared();
        barrier();
        if (live && s == 0u) {
            float v = 0.0;
            for (uint u = 0u; u < AT_S; u++) v += sh_a[r * AT_S + u];
            Y(base + d) = outscale * v;
        }
        barrier();
#else
        if (live) Y(base + d) = outscale * a[d];
#endif
    }
#endif
}
#endif

void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (wg >= TR_NWG) return; // uniform over the workgroup
    uint blk = wg % AT_NBLK, head = wg / AT_NBLK;
    uint t = gl_LocalInvocationID.x, r = t / AT_S, s = t % AT_S;
    int row0 = int(blk * AT_R);
    int rowc = min(int(AT_R), AT_NROWS - row0);
    int row = row0 + int(r);
    bool live = int(r) < rowc;
    at_mask_init();

#if AT_OP == AT_BWD_KV
    // rows are keys of kv head hk; items are (query head gq of the group, query row i)
    uint b = head / AT_HKV, hk = head % AT_HKV;
    IDX kvbase = IDX(head) * uint(AT_TK) * AT_D;
    IDX rowoff = kvbase + IDX(row) * AT_D;
    int ilo = 0, ihi = row0 < g_kvlen ? AT_TQ : 0;
#if AT_CAUSAL
    ilo = max(0, row0 - g_off);
#if AT_WINDOW > 0
    ihi = min(ihi, row0 + rowc - 1 - g_off + AT_WINDOW);
#endif
#endif
    int ni = max(ihi - ilo, 0);
    int nitems = int(AT_GRP) * ni;
    uint qhead0 = b * AT_HQ + hk * AT_GRP; // first query head of the group
    g_qhead0 = qhead0;
    g_ilo = ilo;
    g_ni = ni;
#else
    // rows are queries of query head h; items are keys of kv head h / GRP
    uint b = head / AT_HQ, h = head % AT_HQ;
    IDX kvbase = IDX(b * AT_HKV + h / AT_GRP) * uint(AT_TK) * AT_D;
    IDX rowoff = IDX(head * uint(AT_TQ) + uint(row)) * AT_D;
#if AT_OUT_BTHD // the output row in [B, Tq, Hq, D] (a folded permute, kir.h KIR_HEADS_OUT)
    IDX yoff = IDX((b * uint(AT_TQ) + uint(row)) * AT_HQ + h) * AT_D;
#define AT_YSTR (IDX(AT_HQ) * AT_D)
#else
    IDX yoff = rowoff;
#define AT_YSTR IDX(AT_D)
#endif
    int lo = 0, hi = g_kvlen;
#if AT_CAUSAL
    hi = min(hi, row0 + rowc - 1 + g_off + 1);
#if AT_WINDOW > 0
    lo = max(0, row0 + g_off - AT_WINDOW + 1);
#endif
#endif
    int nitems = max(hi - lo, 0);
    g_kvbase = kvbase;
    g_lo = lo;
#endif

    // the row's own vectors
    float rv[AT_D]; // q row (query-side ops) or k row (AT_BWD_KV)
#if AT_OP == AT_BWD_Q
    float dov[AT_D];
    float lse = 0.0, delta = 0.0;
#endif
#if AT_OP == AT_BWD_KV && AT_WRT_V != 1
    float vv[AT_D];
#endif
#if AT_OP == AT_BWD_KV && AT_WRT_V == 2
    float accv[AT_D]; // dv beside dk in acc
#endif
#if AT_OP != AT_LSE
    float acc[AT_D];
#endif
    AT_FOR_D(d) {
#if AT_OP == AT_BWD_KV
        rv[d] = live ? AT_RND1(X1(rowoff + d)) : 0.0;
#if AT_WRT_V != 1
        vv[d] = live ? AT_RND2(X2(rowoff + d)) : 0.0;
#endif
#if AT_WRT_V == 2
        accv[d] = 0.0;
#endif
#else
        rv[d] = live ? AT_RND0(X0(rowoff + d)) : 0.0;
#endif
#if AT_OP == AT_BWD_Q
        dov[d] = live ? AT_RND3(X3(rowoff + d)) : 0.0;
#endif
#if AT_OP != AT_LSE
        acc[d] = 0.0;
#endif
    }
#if AT_OP == AT_BWD_Q
    if (live) {
        uint qi = head * uint(AT_TQ) + uint(row);
        lse = X4(2u * qi);
        delta = X4(2u * qi + 1u);
    }
#endif
    float m = MN_NEG_INF, l = 0.0;
    bool any = false;

    for (int base = 0; base < nitems; base += AT_BK) {
        int cnt = min(AT_BK, nitems - base);
        // cooperative load of items base .. base + cnt - 1, in batches of
        // AT_LU: every load of a batch is issued before any of its shared
        // stores, so AT_LU global reads are in flight per invocation (a
        // decoding step has a handful of workgroups: nothing else hides
        // their latency)
        for (uint lr = 0u; lr < AT_LOADS; lr += AT_LU) {
            float lv[AT_LU];
            [[unroll]] for (uint lu = 0u; lu < AT_LU; lu++) {
                uint e = t + (lr + lu) * AT_LOCAL;
                lv[lu] = e < uint(cnt) * AT_ITEMW ? at_fetch(e, base) : 0.0;
            }
            [[unroll]] for (uint lu = 0u; lu < AT_LU; lu++) {
                uint e = t + (lr + lu) * AT_LOCAL;
                if (e < uint(cnt) * AT_ITEMW) sh_tile[e / AT_ITEMW * AT_ISTR + e % AT_ITEMW] = lv[lu];
            }
        }
        memoryBarrierShared();
        barrier();
        if (live) {
            for (int u = int(s); u < cnt; u += int(AT_S)) {
                uint o = uint(u) * AT_ISTR;
#if AT_OP == AT_BWD_KV
                int iq = ilo + (base + u) % ni;
                if (!at_valid(iq, row)) continue;
                float dot = 0.0;
                AT_FOR_D(d) dot += sh_tile[o + d] * rv[d];
                float p = exp(dot * AT_SCALE - sh_tile[o + 2u * AT_D]);
#if AT_WRT_V == 1
                p = AT_RNDW(p);
                AT_FOR_D(d) acc[d] += p * sh_tile[o + AT_D + d];
#else
                float dp = 0.0;
                AT_FOR_D(d) dp += sh_tile[o + AT_D + d] * vv[d];
                float ds = AT_RNDW(p * (dp - sh_tile[o + 2u * AT_D + 1u]));
                AT_FOR_D(d) acc[d] += ds * sh_tile[o + d];
#if AT_WRT_V == 2
                p = AT_RNDW(p);
                AT_FOR_D(d) accv[d] += p * sh_tile[o + AT_D + d];
#endif
#endif
#else
                int j = lo + base + u;
                if (!at_valid(row, j)) continue;
                float dot = 0.0;
                AT_FOR_D(d) dot += rv[d] * sh_tile[o + d];
#if AT_OP == AT_BWD_Q
                float p = exp(dot * AT_SCALE - lse);
                float dp = 0.0;
                AT_FOR_D(d) dp += dov[d] * sh_tile[o + AT_D + d];
                float ds = AT_RNDW(p * (dp - delta));
                AT_FOR_D(d) acc[d] += ds * sh_tile[o + d];
#else
                float sc = dot * AT_SC;
#if AT_FAST
                // log2 units against an integer reference m (AT_REF), so a
                // new reference rescales the sums by an exact power of two
                float cf = 1.0;
                if (!any || sc > m) {
                    float mn = AT_REF(sc);
                    cf = any ? AT_EXP(m - mn) : 0.0;
                    m = mn;
                    any = true;
                }
                float p = AT_EXP(sc - m);
                l = l * cf + p;
#if AT_OP == AT_FWD
                p = AT_RNDW(p);
                AT_FOR_D(d) acc[d] = acc[d] * cf + p * sh_tile[o + AT_D + d];
#endif
#else
                if (!any) {
                    m = sc;
                    l = 1.0;
#if AT_OP == AT_FWD
                    AT_FOR_D(d) acc[d] = sh_tile[o + AT_D + d];
#endif
                    any = true;
                } else if (sc > m) {
                    float cf = exp(m - sc); // rescale the running sums to the new max
                    l = l * cf + 1.0;
#if AT_OP == AT_FWD
                    AT_FOR_D(d) acc[d] = acc[d] * cf + sh_tile[o + AT_D + d];
#endif
                    m = sc;
                } else {
                    float p = exp(sc - m);
                    l += p;
#if AT_OP == AT_FWD
                    AT_FOR_D(d) acc[d] += p * sh_tile[o + AT_D + d];
#endif
                }
#endif
#endif
#endif
            }
        }
        barrier(); // the tile is overwritten next
    }

    // ---- merge the AT_S partial results of each row and write ----
#if AT_OP == AT_FWD || AT_OP == AT_LSE
    float f = 1.0, L = l;
    bool rowany = any;
#if AT_S > 1
    sh_a[t] = any ? m : MN_NEG_INF;
    memoryBarrierShared();
    barrier();
    float M = MN_NEG_INF;
    rowany = false;
    for (uint u = 0u; u < AT_S; u++) {
        float mu = sh_a[r * AT_S + u];
        if (mu != MN_NEG_INF) {
            M = rowany ? max(M, mu) : mu;
            rowany = true;
        }
    }
    f = any ? AT_EXP(m - M) : 0.0;
    sh_b[t] = l * f;
    memoryBarrierShared();
    barrier();
    L = 0.0;
    for (uint u = 0u; u < AT_S; u++) L += sh_b[r * AT_S + u];
    m = M;
#endif
#if AT_OP == AT_LSE
    if (live && s == 0u) Y(head * uint(AT_TQ) + uint(row)) = rowany ? AT_LSE_OF(m, L) : MN_NEG_INF;
#else
#if AT_SAVE_LSE
    // the backward's attention_lse, saved (kir.h KIR_SAVED): AT_LSE's value
    if (live && s == 0u) AT_LSE_WR(head * uint(AT_TQ) + uint(row)) = rowany ? AT_LSE_OF(m, L) : MN_NEG_INF;
#endif
    float invl = rowany ? 1.0 / L : 0.0;
#if AT_PMERGE
    // as at_write_sum; a row's sum L again from sh_b (a row with no key: 0)
    barrier();
    AT_FOR_D(d) sh_tile[t * AT_PSTR + d] = acc[d] * f;
    memoryBarrierShared();
    barrier();
    IDX base0 = yoff - IDX(r) * AT_YSTR; // row 0 of the block
    for (uint e = t; e < AT_R * AT_D; e += AT_LOCAL) {
        uint rr = e / AT_D;
        if (int(rr) >= rowc) continue;
        float v = 0.0, lr = 0.0;
        for (uint u = 0u; u < AT_S; u++) {
            v += sh_tile[(rr * AT_S + u) * AT_PSTR + e % AT_D];
            lr += sh_b[rr * AT_S + u];
        }
        Y(base0 + IDX(rr) * AT_YSTR + e % AT_D) = v * (lr > 0.0 ? 1.0 / lr : 0.0);
    }
#else
    AT_FOR_D(d) {
#if AT_S > 1
        sh_a[t] = acc[d] * f; // every read of sh_a above happened before the last barrier
        memoryBarrierShared();
        barrier();
        if (live && s == 0u) {
            float v = 0.0;
            for (uint u = 0u; u < AT_S; u++) v += sh_a[r * AT_S + u];
            Y(yoff + d) = v * invl;
        }
        barrier();
#else
        if (live) Y(yoff + d) = acc[d] * invl;
#endif
    }
#endif
#endif
#else // backward: sum the partial gradients
#if AT_OP == AT_BWD_KV && AT_WRT_V == 1
    at_write_sum(acc, t, r, s, rowc, rowoff, 1.0);
#else
    at_write_sum(acc, t, r, s, rowc, rowoff, AT_SCALE);
#endif
#if AT_OP == AT_BWD_KV && AT_WRT_V == 2
    at_write_sum(accv, t, r, s, rowc, AT_PART + rowoff, 1.0);
#endif
#endif
}
