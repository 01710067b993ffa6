// attention_tile.glsl - attention at real sizes, FlashAttention-2 style: a
// workgroup owns a block of AT_BM rows of one head and streams the other
// side through shared memory in tiles of AT_BN items; each invocation keeps
// a register micro-tile of the scores and of the output rows. No Tq x Tk
// matrix exists anywhere: scores are recomputed where they are needed.
//
// AT_OP (vk_gen_transformer.c picks this template or attention.glsl, the
// row kernel that decoding steps use):
//   AT_FWD    rows = query rows of query head h, items = keys of its kv
//             head. Online softmax: per tile S = scale Q K^T, the row
//             maxima combined through shared memory into the reference m,
//             P = exp(S - m) written to shared memory, O = O exp(m_old - m)
//             + P V (the fast contract: log2 units, AT_REF).
//   AT_LSE    the same scores, m + log(l) per row (-inf for a row with no key)
//   AT_BWD_Q  rows = query rows, items = keys: P = exp(S - lse),
//             dS = P * (dO V^T - delta), dq = scale * dS K
//   AT_BWD_KV rows = key rows of kv head hk, items = (query head of the
//             group, query row): P^T = exp(K Q^T scale - lse),
//             dS^T = P^T * (V dO^T - delta), dv = P^T dO, dk = scale dS^T Q;
//             AT_WRT_V 0: dk, 1: dv, 2: both ([2B,Hkv,Tk,D]: dv at AT_PART)
// with prep = (lse_i, delta_i = dout_i . out_i) per query row. Every output
// element is summed by one invocation in a fixed order: deterministic, no
// atomics; dk/dv sum over all query heads of the group in the one workgroup.
//
// Naming: R1, R2 are the row side's vectors (q and dout, or k and v), kept
// in shared memory for the whole workgroup; I1, I2 the items' (k and v, or
// q and dout), one tile at a time. Scores S = R1 . I1, the second product
// dP = R2 . I2; the output rows sum P (or dS) times I2 (or I1).
//
// Work split: LOCAL_X = (AT_BM / AT_TM) * AT_LX invocations; invocation
// (ty, tx) = (id / AT_LX, id % AT_LX) owns rows ty*AT_TM .. +AT_TM-1 of
// the block; of a tile's scores it holds items c*AT_LX + tx (c < SN), of
// the output columns the vec4 chunks oc*AT_LX + tx (oc < OC). The AT_LX
// invocations of a row share its statistics (maxima, sums) through shared
// memory. Rows and items are vec4 rows padded by one vec4 (AT_DP = D
// rounded up to 4 * AT_LX, zero beyond D), so the loads of a subgroup hit
// distinct banks or one broadcast address. With AT_PREFETCH the next tile's
// global reads go to registers (pf1, pf2) while the current one is used;
// without, they are read and stored between the same two barriers.
//
// Mask, index arithmetic and the items a block visits: attention_common.glsl
// (placed before this file).
//
// Loops: every loop over a register array is unrolled with constant bounds
// (register arrays stay registers); the head-dimension and item loops,
// which only index shared memory, run in unrolled runs of AT_RUN vec4
// chunks (short code: spirv-opt and lavapipe's JIT take seconds per fully
// unrolled kernel; AT_RUN 1 is a plain loop). The generator counts the
// iterations for lavapipe's loop limiter and checks them with
// vk_loops_fit.
//
// Numerics: f32 operands, f32 sums (fma); exp of scores minus the running
// maximum, so nothing overflows for logits of 1e3 and more. A row with no
// key writes zeros (lse -inf), and no gradient. The fast contract
// (mathlib's rounding, the CPU's rule): q, k, v, dout rounded as they are
// loaded (AT_RND0 .. 3: nothing where the session's cast rounded the
// input), and the weights P (AT_RNDW) (the forward's relative to the running
// maximum) and dS as they are stored for their products.
//
// Inputs: X0 q, X1 k, X2 v, then AT_FWD/AT_LSE: X3 pos; backward: X3 dout,
// X4 prep, X5 pos. With AT_SAVE_LSE the forward also writes its rows' lse
// (AT_LSE's output) through AT_LSE_WR, a binding after the inputs (the
// backward's attention_lse node, kir.h KIR_SAVED). Defines: AT_OP, AT_HQ, AT_HKV, AT_GRP, AT_TQ, AT_TK,
// AT_D, AT_DP, AT_PADDED (AT_DP > AT_D), AT_OUT_BTHD, AT_CAUSAL, AT_WINDOW, AT_SCALE, AT_HAS_POS, AT_POS,
// AT_WRT_V, AT_PART, AT_SAVE_LSE, AT_LSE_WR, AT_NROWS, AT_NBLK, AT_BM, AT_BN, AT_TM, AT_LX,
// AT_RUN, AT_PREFETCH, TR_NWG.
// Does not: use subgroup operations or cooperative matrices (the H200 has
// no f32 ones); handle D above what the shared memory holds (the
// generator falls back to attention.glsl).

#define NT uint(LOCAL_X)
#define SN (AT_BN / AT_LX)            // items per invocation in a score micro-tile
#define DQ ((AT_D + 3u) / 4u)         // vec4 chunks that hold the head dimension
#define OC (AT_DP / (4u * AT_LX))     // output vec4 chunks per invocation
#define RW (AT_DP / 4u + 1u)          // padded row, in vec4
#define PW (AT_BN / 4u + 1u)          // padded score row, in vec4
#define LR ((AT_BM * AT_DP + NT - 1u) / NT) // row-side elements each invocation loads
#define LI ((AT_BN * AT_DP + NT - 1u) / NT) // tile elements each invocation loads

// for (v = 0; v < n; v++) over shared memory only, as a loop over runs of
// AT_RUN steps, each run unrolled (AT_RUN >= n: one run, the whole loop)
#define AT_FOR_RUN(v, n) \
    for (uint v##_0 = 0u; v##_0 < (n); v##_0 += AT_RUN) \
        [[unroll]] for (uint v##_u = 0u, v = v##_0; v##_u < AT_RUN; v##_u++, v++) \
            if ((n) % AT_RUN == 0u || v < (n))

shared vec4 sR1[AT_BM][RW];
#if AT_HAS_R2
shared vec4 sR2[AT_BM][RW];
#endif
shared vec4 sI1[AT_BN][RW];
#if AT_HAS_I2
shared vec4 sI2[AT_BN][RW];
#endif
#if AT_HAS_P
shared vec4 sP[AT_BM][PW];
#endif
#if AT_HAS_DS
shared vec4 sS[AT_BM][PW];
#endif
#if AT_STATS
shared float sMx[AT_BM * AT_LX];
#endif
#if AT_OP == AT_BWD_KV
shared float sIL[AT_BN], sID[AT_BN]; // the items' lse and delta
#endif

// acc + a . b
float at_dot4(vec4 a, vec4 b, float acc) { return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, acc)))); }

// ---- the next tile's global reads, held in registers ----------------------
float pf1[LI];
#if AT_HAS_I2
float pf2[LI];
#endif
#if AT_OP == AT_BWD_KV
float pfl, pfd;
#endif

// Items ibase .. ibase + cnt - 1 of item head ihead (a kv head, or for
// AT_BWD_KV a query head); zeros past cnt and past D.
void at_fetch(uint ihead, int ibase, int cnt, uint lid) {
    [[unroll]] for (uint u = 0u; u < LI; u++) {
        uint e = lid + u * NT;
        uint c = e / AT_DP, d = e % AT_DP;
        bool inb = (LI * NT == AT_BN * AT_DP || e < AT_BN * AT_DP) && int(c) < cnt;
#if AT_PADDED
        inb = inb && d < AT_D;
#endif
        float v1 = 0.0, v2 = 0.0;
        if (inb) {
#if AT_OP == AT_BWD_KV
            uint o = at_qrow(ihead, ibase + int(c)) + d;
            v1 = AT_RND0(X0(o));
            v2 = AT_RND3(X3(o));
#else
            uint o = at_kvrow(ihead, ibase + int(c)) + d;
            v1 = AT_RND1(X1(o));
#if AT_HAS_I2
            v2 = AT_RND2(X2(o));
#endif
#endif
        }
        pf1[u] = v1;
#if AT_HAS_I2
        pf2[u] = v2;
#endif
    }
#if AT_OP == AT_BWD_KV
    pfl = 0.0;
    pfd = 0.0;
    if (int(lid) < cnt) {
        uint o = at_prep(ihead, ibase + int(lid));
        pfl = X4(o);
        pfd = X4(o + 1u);
    }
#endif
}

void at_store(uint lid) {
    [[unroll]] for (uint u = 0u; u < LI; u++) {
        uint e = lid + u * NT;
        if (LI * NT == AT_BN * AT_DP || e < AT_BN * AT_DP) {
            uint c = e / AT_DP, d = e % AT_DP;
            sI1[c][d >> 2][d & 3u] = pf1[u];
#if AT_HAS_I2
            sI2[c][d >> 2][d & 3u] = pf2[u];
#endif
        }
    }
#if AT_OP == AT_BWD_KV
    if (lid < AT_BN) {
        sIL[lid] = pfl;
        sID[lid] = pfd;
    }
#endif
}

void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (wg >= TR_NWG) return; // uniform over the workgroup
    // the last row blocks first: under a causal mask they have the most items
    uint blk = AT_NBLK - 1u - wg % AT_NBLK, head = wg / AT_NBLK;
    uint lid = gl_LocalInvocationID.x, ty = lid / AT_LX, tx = lid % AT_LX;
    int row0 = int(blk * AT_BM);
    int rowc = min(int(AT_BM), AT_NROWS - row0);
    int myrow = row0 + int(ty * AT_TM); // first of this invocation's rows
    at_mask_init();
    uint ihead0;
    int ilo, ihi, tph, ntiles;
    at_items(head, row0, rowc, ihead0, ilo, ihi, tph, ntiles);

    // ---- the row side into shared memory (zeros past the block and past D) ----
    for (uint u = 0u; u < LR; u++) {
        uint e = lid + u * NT;
        if (e < AT_BM * AT_DP) {
            uint rr = e / AT_DP, d = e % AT_DP;
            bool inb = int(rr) < rowc && d < AT_D;
            float v1 = 0.0, v2 = 0.0;
            if (inb) {
#if AT_OP == AT_BWD_KV
                uint o = at_kvrow(head, row0 + int(rr)) + d;
                v1 = AT_RND1(X1(o));
#if AT_HAS_R2
                v2 = AT_RND2(X2(o));
#endif
#else
                uint o = at_qrow(head, row0 + int(rr)) + d;
                v1 = AT_RND0(X0(o));
#if AT_HAS_R2
                v2 = AT_RND3(X3(o));
#endif
#endif
            }
            sR1[rr][d >> 2][d & 3u] = v1;
#if AT_HAS_R2
            sR2[rr][d >> 2][d & 3u] = v2;
#endif
        }
    }

#if AT_OP == AT_BWD_Q
    float rlse[AT_TM], rdelta[AT_TM];
    [[unroll]] for (uint r = 0u; r < AT_TM; r++) {
        int row = myrow + int(r);
        rlse[r] = 0.0;
        rdelta[r] = 0.0;
        if (row < AT_NROWS) {
            uint o = at_prep(head, row);
            rlse[r] = X4(o);
            rdelta[r] = X4(o + 1u);
        }
    }
#endif
#if AT_STATS
    float m[AT_TM], l[AT_TM]; // running maximum; this invocation's part of the sum
    [[unroll]] for (uint r = 0u; r < AT_TM; r++) {
        m[r] = MN_NEG_INF;
        l[r] = 0.0;
    }
#endif
#if AT_NACC >= 1
    vec4 acc[AT_TM][OC];
#endif
#if AT_NACC >= 2
    vec4 acc2[AT_TM][OC]; // dv beside dk
#endif
    [[unroll]] for (uint r = 0u; r < AT_TM; r++)
        [[unroll]] for (uint oc = 0u; oc < OC; oc++) {
#if AT_NACC >= 1
            acc[r][oc] = vec4(0.0);
#endif
#if AT_NACC >= 2
            acc2[r][oc] = vec4(0.0);
#endif
        }

#if AT_PREFETCH
    if (ntiles > 0) {
        AT_TILE(0, ih0, ib0, cn0);
        at_fetch(ih0, ib0, cn0, lid);
    }
#endif

    for (int t = 0; t < ntiles; t++) {
        AT_TILE(t, ihead, ibase, cnt);
        barrier(); // the previous tile's reads (and the row loads) are done
#if !AT_PREFETCH
        at_fetch(ihead, ibase, cnt, lid);
#endif
        at_store(lid);
        memoryBarrierShared();
        barrier();
#if AT_PREFETCH
        if (t + 1 < ntiles) {
            AT_TILE(t + 1, nhead, nbase, ncnt);
            at_fetch(nhead, nbase, ncnt, lid);
        }
#endif

        bool full = at_full(row0, rowc, ibase, cnt);

        // ---- scores of the micro-tile: s = R1 . I1 (and dp = R2 . I2) ----
        float s[AT_TM][SN];
#if AT_HAS_DP
        float dp[AT_TM][SN];
#endif
        [[unroll]] for (uint r = 0u; r < AT_TM; r++)
            [[unroll]] for (uint c = 0u; c < SN; c++) {
                s[r][c] = 0.0;
#if AT_HAS_DP
                dp[r][c] = 0.0;
#endif
            }
        AT_FOR_RUN(dv, DQ) {
            vec4 a[AT_TM], bv[SN];
            [[unroll]] for (uint r = 0u; r < AT_TM; r++) a[r] = sR1[ty * AT_TM + r][dv];
            [[unroll]] for (uint c = 0u; c < SN; c++) bv[c] = sI1[c * AT_LX + tx][dv];
            [[unroll]] for (uint r = 0u; r < AT_TM; r++)
                [[unroll]] for (uint c = 0u; c < SN; c++) s[r][c] = at_dot4(a[r], bv[c], s[r][c]);
#if AT_HAS_DP
            [[unroll]] for (uint r = 0u; r < AT_TM; r++) a[r] = sR2[ty * AT_TM + r][dv];
            [[unroll]] for (uint c = 0u; c < SN; c++) bv[c] = sI2[c * AT_LX + tx][dv];
            [[unroll]] for (uint r = 0u; r < AT_TM; r++)
                [[unroll]] for (uint c = 0u; c < SN; c++) dp[r][c] = at_dot4(a[r], bv[c], dp[r][c]);
#endif
        }

        // ---- the mask: ok[r][c] ----
        bool ok[AT_TM][SN];
        [[unroll]] for (uint r = 0u; r < AT_TM; r++)
            [[unroll]] for (uint c = 0u; c < SN; c++) ok[r][c] = true;
        if (!full) {
            [[unroll]] for (uint r = 0u; r < AT_TM; r++)
                [[unroll]] for (uint c = 0u; c < SN; c++) {
                    int it = int(c * AT_LX + tx);
                    ok[r][c] = it < cnt && at_pair_ok(myrow + int(r), ibase + it);
                }
        }

#if AT_STATS
        // ---- online softmax: the tile's row maxima over the AT_LX invocations ----
        [[unroll]] for (uint r = 0u; r < AT_TM; r++) {
            float mx = MN_NEG_INF;
            [[unroll]] for (uint c = 0u; c < SN; c++) {
                float v = ok[r][c] ? s[r][c] * AT_SC : MN_NEG_INF;
                s[r][c] = v;
                mx = max(mx, v);
            }
            sMx[(ty * AT_TM + r) * AT_LX + tx] = mx;
        }
        memoryBarrierShared();
        barrier();
        [[unroll]] for (uint r = 0u; r < AT_TM; r++) {
            float mx = m[r];
            [[unroll]] for (uint u = 0u; u < AT_LX; u++) mx = max(mx, sMx[(ty * AT_TM + r) * AT_LX + u]);
            // the reference (AT_REF): the running maximum, or in the fast
            // contract an integer at or above it (m[r] is one already); mx
            // == -inf: no key so far, p and the sums stay 0
            mx = AT_REF(mx);
            float mu = mx == MN_NEG_INF ? 0.0 : mx;
            float alpha = m[r] == MN_NEG_INF ? 0.0 : AT_EXP(m[r] - mu);
            m[r] = mx;
            float ls = 0.0;
            [[unroll]] for (uint c = 0u; c < SN; c++) {
                float p = ok[r][c] ? AT_EXP(s[r][c] - mu) : 0.0;
                ls += p;
                s[r][c] = p;
            }
            l[r] = l[r] * alpha + ls;
#if AT_OP == AT_FWD
            [[unroll]] for (uint oc = 0u; oc < OC; oc++) acc[r][oc] *= alpha;
#endif
        }
#if AT_OP == AT_FWD
        [[unroll]] for (uint r = 0u; r < AT_TM; r++)
            [[unroll]] for (uint c = 0u; c < SN; c++) {
                uint it = c * AT_LX + tx;
                sP[ty * AT_TM + r][it >> 2][it & 3u] = AT_RNDW(s[r][c]);
            }
#endif
#else
        // ---- backward: P from the saved lse, dS = P (dP - delta) ----
        [[unroll]] for (uint r = 0u; r < AT_TM; r++)
            [[unroll]] for (uint c = 0u; c < SN; c++) {
                uint it = c * AT_LX + tx;
#if AT_OP == AT_BWD_Q
                float p = ok[r][c] ? exp(s[r][c] * AT_SCALE - rlse[r]) : 0.0;
                sP[ty * AT_TM + r][it >> 2][it & 3u] = AT_RNDW(p * (dp[r][c] - rdelta[r]));
#else
                float p = ok[r][c] ? exp(s[r][c] * AT_SCALE - sIL[it]) : 0.0;
#if AT_HAS_P
                sP[ty * AT_TM + r][it >> 2][it & 3u] = AT_RNDW(p);
#endif
#if AT_HAS_DS
                sS[ty * AT_TM + r][it >> 2][it & 3u] = AT_RNDW(p * (dp[r][c] - sID[it]));
#endif
#endif
            }
#endif

#if AT_NACC >= 1
        memoryBarrierShared();
        barrier();
        // ---- the output rows: acc += P I2 (forward, dv) or dS I1 (dq, dk) ----
        AT_FOR_RUN(jc, AT_BN / 4u) {
            vec4 w[AT_TM];
#if AT_NACC >= 2
            vec4 w2[AT_TM];
#endif
            [[unroll]] for (uint r = 0u; r < AT_TM; r++) {
#if AT_OP == AT_BWD_KV && AT_WRT_V != 1
                w[r] = sS[ty * AT_TM + r][jc];
#else
                w[r] = sP[ty * AT_TM + r][jc];
#endif
#if AT_NACC >= 2
                w2[r] = sP[ty * AT_TM + r][jc];
#endif
            }
            [[unroll]] for (uint jj = 0u; jj < 4u; jj++) {
                vec4 x[OC];
#if AT_OP == AT_FWD || (AT_OP == AT_BWD_KV && AT_WRT_V == 1)
                [[unroll]] for (uint oc = 0u; oc < OC; oc++) x[oc] = sI2[jc * 4u + jj][oc * AT_LX + tx];
#else
                [[unroll]] for (uint oc = 0u; oc < OC; oc++) x[oc] = sI1[jc * 4u + jj][oc * AT_LX + tx];
#endif
                [[unroll]] for (uint r = 0u; r < AT_TM; r++)
                    [[unroll]] for (uint oc = 0u; oc < OC; oc++) acc[r][oc] = fma(vec4(w[r][jj]), x[oc], acc[r][oc]);
#if AT_NACC >= 2
                [[unroll]] for (uint oc = 0u; oc < OC; oc++) x[oc] = sI2[jc * 4u + jj][oc * AT_LX + tx];
                [[unroll]] for (uint r = 0u; r < AT_TM; r++)
                    [[unroll]] for (uint oc = 0u; oc < OC; oc++) acc2[r][oc] = fma(vec4(w2[r][jj]), x[oc], acc2[r][oc]);
#endif
            }
        }
#endif
    }

    // ---- write the rows ----
#if AT_STATS
    // the row sums over the AT_LX invocations (every read of sMx is before the last barrier)
    barrier();
    [[unroll]] for (uint r = 0u; r < AT_TM; r++) sMx[(ty * AT_TM + r) * AT_LX + tx] = l[r];
    memoryBarrierShared();
    barrier();
    [[unroll]] for (uint r = 0u; r < AT_TM; r++) {
        float L = 0.0;
        [[unroll]] for (uint u = 0u; u < AT_LX; u++) L += sMx[(ty * AT_TM + r) * AT_LX + u];
        int row = myrow + int(r);
        if (row >= AT_NROWS) continue;
#if AT_OP == AT_LSE
        if (tx == 0u) Y(at_lse_out(head, row)) = L > 0.0 ? AT_LSE_OF(m[r], L) : MN_NEG_INF;
#else
#if AT_SAVE_LSE
        // the backward's attention_lse, saved (kir.h KIR_SAVED): AT_LSE's value
        if (tx == 0u) AT_LSE_WR(at_lse_out(head, row)) = L > 0.0 ? AT_LSE_OF(m[r], L) : MN_NEG_INF;
#endif
        float invl = L > 0.0 ? 1.0 / L : 0.0;
        uint ro = at_orow(head, row);
        [[unroll]] for (uint oc = 0u; oc < OC; oc++)
            [[unroll]] for (uint q = 0u; q < 4u; q++) {
                uint d = (oc * AT_LX + tx) * 4u + q;
                if (AT_PADDED == 0 || d < AT_D) Y(ro + d) = acc[r][oc][q] * invl;
            }
#endif
    }
#else
    [[unroll]] for (uint r = 0u; r < AT_TM; r++) {
        int row = myrow + int(r);
        if (row >= AT_NROWS) continue;
#if AT_OP == AT_BWD_Q
        uint ro = at_qrow(head, row);
        float f = AT_SCALE;
#else
        uint ro = at_kvrow(head, row);
        float f = AT_WRT_V == 1 ? 1.0 : AT_SCALE;
#endif
        [[unroll]] for (uint oc = 0u; oc < OC; oc++)
            [[unroll]] for (uint q = 0u; q < 4u; q++) {
                uint d = (oc * AT_LX + tx) * 4u + q;
                if (AT_PADDED == 0 || d < AT_D) {
                    Y(ro + d) = f * acc[r][oc][q];
#if AT_NACC >= 2
                    Y(AT_PART + ro + d) = acc2[r][oc][q];
#endif
                }
            }
    }
#endif
}
