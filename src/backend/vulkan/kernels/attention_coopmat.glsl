// attention_coopmat.glsl - attention in the fast contract on cooperative
// matrices (tensor cores), FlashAttention-2 style: every product of the
// block kernel (attention_tile.glsl: the same ops, rows, items and mask,
// from attention_common.glsl) runs on 16 x 16 x 16 fragments with 16-bit
// operands and f32 accumulators; softmax, masking and the weights' rounding
// run on the scalar units in between.
//
// Work split: a workgroup owns a block of AT_BM = 16 * NSG rows of one head
// and streams its items in tiles of AT_BN through shared memory (16-bit,
// rows of D padded by 8). Subgroup s owns rows 16 s .. 16 s + 15 and
// everything about them: the rows' operand fragments (R1, R2: loaded once),
// the tile's scores S = R1 I1^T (and dP = R2 I2^T) as BF fragments stored
// to its own f32 scratch, the weights P (dS) its lanes compute from the
// scratch and store as 16-bit values, and the DF output fragments it
// accumulates (O += P I2, dq += dS I1, dk += dS^T I1, dv += P^T I2). Only
// the tile's staging is shared by the whole workgroup (two barriers a
// tile); within a subgroup, subgroup barriers order the scratch.
//
// Lanes: lane = r * LPR + h (LPR = subgroup size / 16) takes row r of the
// subgroup's 16 and of each row of a tile the CPL columns h * CPL ..: a
// lane stores whole 4-value units of the weights, and the row's statistics
// (the forward's maxima and sums) are combined over its LPR lanes through
// shared memory.
//
// The forward keeps O in fragments; a row's weights are relative to an
// integer reference (AT_REF: the ceiling of its running maximum), so when
// some row's reference moves (subgroupAny with AC_VOTE, else every tile)
// the subgroup stores its O fragments to the scratch, scales those rows by
// 2^(old - new) (exact) and loads them back. The sums l are f32 over the
// unrounded weights, as in the other kernels; the result is O / l.
//
// Numerics (the fast contract, the CPU's rule: kernels_transformer.h): q,
// k, v, dout rounded to the 16-bit type as they are staged (AT_RND0 .. 3:
// nothing where the session's cast rounded the input), then converted
// exactly (bf16: the high half of the rounded f32; f16: the device's
// conversion of a representable value); the weights P and dS rounded by
// AT_RNDW before they are stored. The 16-bit values exist only in shared
// memory and fragments: the kernel does no 16-bit arithmetic, so the bf16
// SPIR-V rewrite (vk_spirv_coopmat.c) has only loads, stores and products
// to retype.
//
// Written with GL_NV_cooperative_matrix (glslang 12); the generator sets
// MN_SPIRV_PASS for the KHR form as for matmul_coopmat.glsl. Fragment
// offsets and strides are multiples of 16 bytes.
//
// Inputs as attention_tile.glsl: X0 q, X1 k, X2 v, then AT_FWD/AT_LSE: X3
// pos; backward: X3 dout, X4 prep, X5 pos; AT_SAVE_LSE as there. Defines
// (vk_gen_transformer.c gen_attention_coopmat): the common AT_* ones, AT_BM,
// AT_BN, AT_NBLK, TR_NWG, AC_SG (subgroup size), AC_BF16, AC_IROWS (rows of
// the staging buffer), AC_SW (floats of a scratch row), AC_NW (weight
// matrices per subgroup), AC_VOTE, AC_PREFETCH.
// AC_PREFETCH: the next tile's global reads go to registers before the
// current tile is used (MEGANEURA_ATTN_PREFETCH=1; off by default: not yet
// gated on a GPU).
// Does not: read packed (PACK16)
// operands as words, handle D that is not a multiple of 16.

#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require
#if AC_VOTE
#extension GL_KHR_shader_subgroup_vote : require
#endif

#define NSG (AT_BM / 16u)
#define NT (NSG * AC_SG)
#define LPR (AC_SG / 16u)      // lanes per row
#define CPL (AT_BN / LPR)      // a lane's columns of a tile row
#define DPL (AT_D / LPR)       // a lane's columns of an output row
#define DF (AT_D / 16u)        // fragments along the head dimension
#define BF (AT_BN / 16u)       // fragments along a tile
#define DU (AT_D / 4u)         // 4-value units of a row
#define RR ((AT_D + 8u) / 4u)  // a staged 16-bit row, in uvec2
#define WR ((AT_BN + 8u) / 4u) // a 16-bit row of weights, in uvec2
#define SR (AC_SW / 2u)        // a scratch row, in uvec2 (2 floats)
const uint AC_SCOPE = 3;       // gl_ScopeSubgroup
#define F16M fcoopmatNV<16, AC_SCOPE, 16, 16>
#define F32M fcoopmatNV<32, AC_SCOPE, 16, 16>

// the weights' slots of a subgroup: P at AC_WP, dS at AC_WS
#if AT_OP == AT_FWD || (AT_OP == AT_BWD_KV && AT_WRT_V != 0)
#define AC_WP 0u
#endif
#if AT_OP == AT_BWD_Q || (AT_OP == AT_BWD_KV && AT_WRT_V == 0)
#define AC_WS 0u
#elif AT_OP == AT_BWD_KV && AT_WRT_V == 2
#define AC_WS 1u
#endif

shared uvec2 smI[AC_IROWS * RR]; // the tile: I1 rows 0 .., I2 rows AT_BN ..; first the rows' staging
#if AC_NW > 0
shared uvec2 smW[NSG * AC_NW * 16u * WR];
#endif
shared uvec2 smS[NSG * 16u * SR]; // each subgroup's f32 scratch: 16 rows, as uvec2 (glslang stores f32
                                  // fragments to arrays of uvec2, not vec4)
shared float smX[NT];            // the lanes' partial statistics
#if AT_OP == AT_BWD_KV
shared float sIL[AT_BN], sID[AT_BN]; // the items' lse and delta
#endif

// four values of the 16-bit type (already rounded) as a uvec2
uvec2 ac_pack(vec4 v) {
#if AC_BF16
    uvec4 b = floatBitsToUint(v);
    return uvec2((b.x >> 16) | (b.y & 0xffff0000u), (b.z >> 16) | (b.w & 0xffff0000u));
#else
    return uvec2(packFloat2x16(f16vec2(v.xy)), packFloat2x16(f16vec2(v.zw)));
#endif
}

// four floats of the scratch from uvec2 index i (a multiple of 2), and back
vec4 ac_s4(uint i) { return vec4(uintBitsToFloat(smS[i]), uintBitsToFloat(smS[i + 1u])); }
void ac_s4_set(uint i, vec4 v) {
    smS[i] = floatBitsToUint(v.xy);
    smS[i + 1u] = floatBitsToUint(v.zw);
}

// four consecutive values of input j from element o (a multiple of 4): a vec4
// load where the operand is one unpacked binding (pc.off is a multiple of 4:
// tensors are 64-byte aligned, binding offsets a power of two), else four
// reads through Xj (pages, packed casts); then rounded by RND
#if defined(X0_ACCESS) && !defined(X0_PAGES) && !defined(X0_P16)
layout(std430, set = 0, binding = 1) X0_ACCESS buffer BufX0v { vec4 d[]; } bX0v;
#define AC_V0(o) bX0v.d[(pc.off[1] + (o)) >> 2]
#else
#define AC_V0(o) vec4(X0(o), X0((o) + 1u), X0((o) + 2u), X0((o) + 3u))
#endif
#if defined(X1_ACCESS) && !defined(X1_PAGES) && !defined(X1_P16)
layout(std430, set = 0, binding = 2) X1_ACCESS buffer BufX1v { vec4 d[]; } bX1v;
#define AC_V1(o) bX1v.d[(pc.off[2] + (o)) >> 2]
#else
#define AC_V1(o) vec4(X1(o), X1((o) + 1u), X1((o) + 2u), X1((o) + 3u))
#endif
#if defined(X2_ACCESS) && !defined(X2_PAGES) && !defined(X2_P16)
layout(std430, set = 0, binding = 3) X2_ACCESS buffer BufX2v { vec4 d[]; } bX2v;
#define AC_V2(o) bX2v.d[(pc.off[3] + (o)) >> 2]
#else
#define AC_V2(o) vec4(X2(o), X2((o) + 1u), X2((o) + 2u), X2((o) + 3u))
#endif
#if defined(X3_ACCESS) && !defined(X3_PAGES) && !defined(X3_P16)
layout(std430, set = 0, binding = 4) X3_ACCESS buffer BufX3v { vec4 d[]; } bX3v;
#define AC_V3(o) bX3v.d[(pc.off[4] + (o)) >> 2]
#else
#define AC_V3(o) vec4(X3(o), X3((o) + 1u), X3((o) + 2u), X3((o) + 3u))
#endif
vec4 ac_r4(vec4 v, const int j) {
    if (j == 0) return vec4(AT_RND0(v.x), AT_RND0(v.y), AT_RND0(v.z), AT_RND0(v.w));
    if (j == 1) return vec4(AT_RND1(v.x), AT_RND1(v.y), AT_RND1(v.z), AT_RND1(v.w));
    if (j == 2) return vec4(AT_RND2(v.x), AT_RND2(v.y), AT_RND2(v.z), AT_RND2(v.w));
    return vec4(AT_RND3(v.x), AT_RND3(v.y), AT_RND3(v.z), AT_RND3(v.w));
}
#define AC_LD4(j, o) ac_r4(AC_V##j(o), j)

// rows row0 .. row0 + rowc - 1 of R1 (which 1) or R2 (2) into smI rows 0 .. AT_BM - 1
void ac_stage_rows(uint head, int row0, int rowc, uint which, uint lid) {
    for (uint u = lid; u < AT_BM * DU; u += NT) {
        uint rr = u / DU, c = u % DU;
        vec4 v = vec4(0.0);
        if (int(rr) < rowc) {
#if AT_OP == AT_BWD_KV
            uint o = at_kvrow(head, row0 + int(rr)) + 4u * c;
            if (which == 1u) v = AC_LD4(1, o);
#if AT_HAS_R2
            else v = AC_LD4(2, o);
#endif
#else
            uint o = at_qrow(head, row0 + int(rr)) + 4u * c;
            if (which == 1u) v = AC_LD4(0, o);
#if AT_HAS_R2
            else v = AC_LD4(3, o);
#endif
#endif
        }
        smI[rr * RR + c] = ac_pack(v);
    }
}

// Items ibase .. ibase + cnt - 1 of item head ihead (zeros past cnt): read
// into registers (ac_fetch; with AC_PREFETCH the next tile's, issued before
// the current tile is used), then stored to smI (ac_stash).
#define UI ((AT_BN * DU + NT - 1u) / NT) // units of a tile each invocation moves
vec4 pf1[UI];
#if AT_HAS_I2
vec4 pf2[UI];
#endif
#if AT_OP == AT_BWD_KV
float pfl, pfd;
#endif

void ac_fetch(uint ihead, int ibase, int cnt, uint lid) {
    [[unroll]] for (uint i = 0u; i < UI; i++) {
        uint u = lid + i * NT, c = u / DU, d4 = u % DU;
        vec4 v1 = vec4(0.0), v2 = vec4(0.0);
        if ((UI * NT == AT_BN * DU || u < AT_BN * DU) && int(c) < cnt) {
#if AT_OP == AT_BWD_KV
            uint o = at_qrow(ihead, ibase + int(c)) + 4u * d4;
            v1 = AC_LD4(0, o);
            v2 = AC_LD4(3, o);
#else
            uint o = at_kvrow(ihead, ibase + int(c)) + 4u * d4;
            v1 = AC_LD4(1, o);
#if AT_HAS_I2
            v2 = AC_LD4(2, o);
#endif
#endif
        }
        pf1[i] = v1;
#if AT_HAS_I2
        pf2[i] = v2;
#endif
    }
#if AT_OP == AT_BWD_KV
    pfl = 0.0;
    pfd = 0.0;
    if (int(lid) < cnt && lid < AT_BN) {
        uint o = at_prep(ihead, ibase + int(lid));
        pfl = X4(o);
        pfd = X4(o + 1u);
    }
#endif
}

void ac_stash(uint lid) {
    [[unroll]] for (uint i = 0u; i < UI; i++) {
        uint u = lid + i * NT, c = u / DU, d4 = u % DU;
        if (UI * NT == AT_BN * DU || u < AT_BN * DU) {
            smI[c * RR + d4] = ac_pack(pf1[i]);
#if AT_HAS_I2
            smI[(AT_BN + c) * RR + d4] = ac_pack(pf2[i]);
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

#define AC_SYNC() \
    subgroupMemoryBarrierShared(); \
    subgroupBarrier()

// the tile's products of the rows' fragments FR with the items at smI row
// IOFF, transposed (S = R1 I1^T, dP = R2 I2^T), into the subgroup's scratch
#define AC_SCORES(FR, IOFF) \
    { \
        F32M fs[BF]; \
        [[unroll]] for (uint j = 0u; j < BF; j++) fs[j] = F32M(0.0); \
        [[unroll]] for (uint kk = 0u; kk < DF; kk++) \
            [[unroll]] for (uint j = 0u; j < BF; j++) { \
                F16M fb; \
                coopMatLoadNV(fb, smI, ((IOFF) + j * 16u) * RR + kk * 4u, RR, true); \
                fs[j] = coopMatMulAddNV(FR[kk], fb, fs[j]); \
            } \
        [[unroll]] for (uint j = 0u; j < BF; j++) coopMatStoreNV(fs[j], smS, s0 + j * 8u, SR, false); \
    }

// ACC += W I: the weights in slot SLOT times the items at smI row IOFF
#define AC_ACCUM(ACC, SLOT, IOFF) \
    [[unroll]] for (uint kk = 0u; kk < BF; kk++) { \
        F16M wa; \
        coopMatLoadNV(wa, smW, w0 + (SLOT) * 16u * WR + kk * 4u, WR, false); \
        [[unroll]] for (uint j = 0u; j < DF; j++) { \
            F16M ib; \
            coopMatLoadNV(ib, smI, ((IOFF) + kk * 16u) * RR + j * 4u, RR, false); \
            ACC[j] = coopMatMulAddNV(wa, ib, ACC[j]); \
        } \
    }

// the lane's CPL values x (rounded) into slot SLOT of its row
#define AC_STORE_W(SLOT, x) \
    [[unroll]] for (uint q = 0u; q < CPL / 4u; q++) \
        smW[w0 + (SLOT) * 16u * WR + r * WR + c0 / 4u + q] = \
            ac_pack(vec4(AT_RNDW(x[4u * q]), AT_RNDW(x[4u * q + 1u]), AT_RNDW(x[4u * q + 2u]), AT_RNDW(x[4u * q + 3u])))

// output row RO + PART (element offsets) = F * ACC, through the scratch
#define AC_WRITE(ACC, RO, F, PART) \
    [[unroll]] for (uint j = 0u; j < DF; j++) coopMatStoreNV(ACC[j], smS, s0 + j * 8u, SR, false); \
    AC_SYNC(); \
    if (myrow < AT_NROWS) { \
        uint ro_ = (RO); \
        [[unroll]] for (uint q = 0u; q < DPL / 4u; q++) { \
            vec4 v_ = ac_s4(s0 + r * SR + h * (DPL / 2u) + 2u * q) * (F); \
            uint d_ = h * DPL + 4u * q; \
            [[unroll]] for (uint e = 0u; e < 4u; e++) Y((PART) + ro_ + d_ + e) = v_[e]; \
        } \
    } \
    AC_SYNC()

void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (wg >= TR_NWG) return; // uniform over the workgroup
    // the last row blocks first: under a causal mask they have the most items
    uint blk = AT_NBLK - 1u - wg % AT_NBLK, head = wg / AT_NBLK;
    uint lid = gl_LocalInvocationIndex, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint r = lane / LPR, h = lane % LPR, c0 = h * CPL; // the lane's row and first column
    int row0 = int(blk * AT_BM);
    int rowc = min(int(AT_BM), AT_NROWS - row0);
    int myrow = row0 + int(sg * 16u + r);
    uint s0 = sg * 16u * SR;           // the subgroup's scratch
    uint w0 = sg * AC_NW * 16u * WR;   // its weights
    at_mask_init();
    uint ihead0;
    int ilo, ihi, tph, ntiles;
    at_items(head, row0, rowc, ihead0, ilo, ihi, tph, ntiles);

    // ---- the rows' fragments, kept for the whole kernel ----
    F16M fr1[DF];
    ac_stage_rows(head, row0, rowc, 1u, lid);
    memoryBarrierShared();
    barrier();
    [[unroll]] for (uint kk = 0u; kk < DF; kk++) coopMatLoadNV(fr1[kk], smI, sg * 16u * RR + kk * 4u, RR, false);
#if AT_HAS_R2
    F16M fr2[DF];
    barrier();
    ac_stage_rows(head, row0, rowc, 2u, lid);
    memoryBarrierShared();
    barrier();
    [[unroll]] for (uint kk = 0u; kk < DF; kk++) coopMatLoadNV(fr2[kk], smI, sg * 16u * RR + kk * 4u, RR, false);
#endif

#if AT_STATS
    float m = MN_NEG_INF, l = 0.0; // the row's reference; this lane's part of its sum
#endif
#if AT_OP == AT_BWD_Q
    float rlse = 0.0, rdelta = 0.0;
    if (myrow < AT_NROWS) {
        uint o = at_prep(head, myrow);
        rlse = X4(o);
        rdelta = X4(o + 1u);
    }
#endif
#if AT_NACC >= 1
    F32M acc[DF];
    [[unroll]] for (uint j = 0u; j < DF; j++) acc[j] = F32M(0.0);
#endif
#if AT_NACC >= 2
    F32M acc2[DF]; // dv beside dk
    [[unroll]] for (uint j = 0u; j < DF; j++) acc2[j] = F32M(0.0);
#endif

#if AC_PREFETCH
    if (ntiles > 0) {
        AT_TILE(0, ih0, ib0, cn0);
        ac_fetch(ih0, ib0, cn0, lid);
    }
#endif
    for (int t = 0; t < ntiles; t++) {
        AT_TILE(t, ihead, ibase, cnt);
        barrier(); // every subgroup is done with the previous tile (and the rows' staging)
#if !AC_PREFETCH
        ac_fetch(ihead, ibase, cnt, lid);
#endif
        ac_stash(lid);
        memoryBarrierShared();
        barrier();
#if AC_PREFETCH
        if (t + 1 < ntiles) {
            AT_TILE(t + 1, nhead, nbase, ncnt);
            ac_fetch(nhead, nbase, ncnt, lid);
        }
#endif
        bool full = at_full(row0, rowc, ibase, cnt);

        // ---- the scores of the subgroup's rows, s[c] of the lane's columns ----
        AC_SCORES(fr1, 0u)
        AC_SYNC();
        float s[CPL];
        bool ok[CPL];
        [[unroll]] for (uint q = 0u; q < CPL / 4u; q++) {
            vec4 v = ac_s4(s0 + r * SR + c0 / 2u + 2u * q);
            [[unroll]] for (uint e = 0u; e < 4u; e++) s[4u * q + e] = v[e];
        }
        [[unroll]] for (uint c = 0u; c < CPL; c++)
            ok[c] = full || (int(c0 + c) < cnt && at_pair_ok(myrow, ibase + int(c0 + c)));

#if AT_STATS
        // ---- online softmax (log2 units against the integer reference) ----
        float mx = MN_NEG_INF;
        [[unroll]] for (uint c = 0u; c < CPL; c++) {
            float v = ok[c] ? s[c] * AT_SC : MN_NEG_INF;
            s[c] = v;
            mx = max(mx, v);
        }
        smX[sg * AC_SG + lane] = mx;
        AC_SYNC();
        float mt = m;
        [[unroll]] for (uint u = 0u; u < LPR; u++) mt = max(mt, smX[sg * AC_SG + r * LPR + u]);
        mt = AT_REF(mt);
        float mu = mt == MN_NEG_INF ? 0.0 : mt;
        float alpha = m == MN_NEG_INF ? 0.0 : AT_EXP(m - mu);
        bool moved = m != MN_NEG_INF && mt != m;
        m = mt;
        float ls = 0.0;
        [[unroll]] for (uint c = 0u; c < CPL; c++) {
            float p = ok[c] ? AT_EXP(s[c] - mu) : 0.0;
            ls += p;
            s[c] = p;
        }
        l = l * alpha + ls;
#if AT_OP == AT_FWD
        AC_STORE_W(AC_WP, s);
        AC_SYNC();
        // O *= 2^(old - new) on the rows whose reference moved (alpha 1 on
        // the others, 0 on rows that had no key: their O is 0)
#if AC_VOTE
        if (subgroupAny(moved))
#endif
        {
            [[unroll]] for (uint j = 0u; j < DF; j++) coopMatStoreNV(acc[j], smS, s0 + j * 8u, SR, false);
            AC_SYNC();
            [[unroll]] for (uint q = 0u; q < DPL / 4u; q++) {
                uint i = s0 + r * SR + h * (DPL / 2u) + 2u * q;
                ac_s4_set(i, ac_s4(i) * alpha);
            }
            AC_SYNC();
            [[unroll]] for (uint j = 0u; j < DF; j++) coopMatLoadNV(acc[j], smS, s0 + j * 8u, SR, false);
        }
        AC_ACCUM(acc, AC_WP, AT_BN)
#endif
#else
        // ---- backward: P from the saved lse, dS = P (dP - delta) ----
        float p[CPL];
        [[unroll]] for (uint c = 0u; c < CPL; c++) {
#if AT_OP == AT_BWD_Q
            p[c] = ok[c] ? exp(s[c] * AT_SCALE - rlse) : 0.0;
#else
            p[c] = ok[c] ? exp(s[c] * AT_SCALE - sIL[c0 + c]) : 0.0;
#endif
        }
#ifdef AC_WP
        AC_STORE_W(AC_WP, p);
#endif
#ifdef AC_WS
        AC_SYNC(); // the lanes have read S from the scratch
        AC_SCORES(fr2, AT_BN)
        AC_SYNC();
        [[unroll]] for (uint q = 0u; q < CPL / 4u; q++) {
            vec4 v = ac_s4(s0 + r * SR + c0 / 2u + 2u * q);
            [[unroll]] for (uint e = 0u; e < 4u; e++) {
                uint c = 4u * q + e;
#if AT_OP == AT_BWD_Q
                p[c] = p[c] * (v[e] - rdelta);
#else
                p[c] = p[c] * (v[e] - sID[c0 + c]);
#endif
            }
        }
        AC_STORE_W(AC_WS, p);
#endif
        AC_SYNC();
#if AT_OP == AT_BWD_Q || (AT_OP == AT_BWD_KV && AT_WRT_V == 0)
        AC_ACCUM(acc, AC_WS, 0u)
#elif AT_WRT_V == 1
        AC_ACCUM(acc, AC_WP, AT_BN)
#else
        AC_ACCUM(acc, AC_WS, 0u)
        AC_ACCUM(acc2, AC_WP, AT_BN)
#endif
#endif
    }

    // ---- write the rows ----
#if AT_STATS
    AC_SYNC(); // the partners' maxima are read
    smX[sg * AC_SG + lane] = l;
    AC_SYNC();
    float L = 0.0;
    [[unroll]] for (uint u = 0u; u < LPR; u++) L += smX[sg * AC_SG + r * LPR + u];
#if AT_OP == AT_LSE
    if (h == 0u && myrow < AT_NROWS) Y(at_lse_out(head, myrow)) = L > 0.0 ? AT_LSE_OF(m, L) : MN_NEG_INF;
#else
#if AT_SAVE_LSE
    // the backward's attention_lse, saved (kir.h KIR_SAVED): AT_LSE's value
    if (h == 0u && myrow < AT_NROWS) AT_LSE_WR(at_lse_out(head, myrow)) = L > 0.0 ? AT_LSE_OF(m, L) : MN_NEG_INF;
#endif
    float invl = L > 0.0 ? 1.0 / L : 0.0;
    AC_WRITE(acc, myrow < AT_NROWS ? at_orow(head, myrow) : 0u, invl, 0u);
#endif
#elif AT_OP == AT_BWD_Q
    AC_WRITE(acc, myrow < AT_NROWS ? at_qrow(head, myrow) : 0u, AT_SCALE, 0u);
#else
    AC_WRITE(acc, myrow < AT_NROWS ? at_kvrow(head, myrow) : 0u, AT_WRT_V == 1 ? 1.0 : AT_SCALE, 0u);
#if AT_NACC >= 2
    AC_WRITE(acc2, myrow < AT_NROWS ? at_kvrow(head, myrow) : 0u, 1.0, AT_PART);
#endif
#endif
}
