// matmul_coopmat.glsl - the fast contract's GEMM on cooperative matrices
// (tensor cores): C[z] = A[z] (MM_M x MM_K) @ B[z] (MM_K x MM_N), f32 in
// memory (an operand the session cast may be packed 16-bit: X0_P16),
// operands rounded to f16 or bf16, products accumulated in f32.
//
// Written in GLSL with GL_NV_cooperative_matrix (the only form Debian's
// glslang 12 knows); the generator (vk_gen_coopmat.c) sets MN_SPIRV_PASS so
// that vk_compile rewrites the SPIR-V to VK_KHR_cooperative_matrix, and for
// bf16 turns the 16-bit float type into SPV_KHR_bfloat16's
// (vk_spirv_coopmat.c). The 16-bit values live only in shared memory (as
// packed uvec2, four per unit) and in the matrix fragments, so the kernel
// does no 16-bit arithmetic: what the bf16 rewrite may touch is the
// conversions, the loads and stores and the cooperative-matrix operations.
//
// Tiling: a workgroup computes a CM_BM x CM_BN tile of C with NSG subgroups
// of CM_SG invocations; subgroup s owns the CM_WM x CM_WN block (s / SGN,
// s % SGN) as FM x FN fragments of 16 x 16 f32 accumulators. Each CM_BK-deep
// K slice of A and B goes global -> registers (f32, four consecutive
// elements along the contiguous dimension per unit: a vec4 load when
// CM_VA / CM_VB) -> 16-bit in shared memory -> fragments. The next slice's
// global loads are issued before the current slice is multiplied; with
// CM_STAGES == 2 they land in the other shared buffer (one barrier per
// slice), with 1 in the same one after a barrier (two).
//
// Shared layouts follow the global contiguity so that units are stored
// whole: A k-contiguous (CM_A_KFAST) as rows m of k (row-major fragments),
// else rows k of m (column-major fragments); B n-contiguous (CM_B_NFAST) as
// rows k of n (row-major), else rows n of k (column-major). Rows are padded
// by 8 elements (16 bytes) against bank conflicts; every fragment pointer
// and stride is a multiple of 16 bytes (VK_KHR_cooperative_matrix's rule).
//
// Rounding, per operand: CM_EXACT_A / CM_EXACT_B round each element with
// mathlib's integer functions (round to nearest even, exactly the CPU
// reference's) before the conversion, about ten integer operations an
// element, as costly as the products on tensor cores. Without it the
// device's f32 -> 16-bit conversion alone: exact for an operand the session
// already rounded by a cast node (every value representable), the device's
// own rounding otherwise (MEGANEURA_COOPMAT_ROUND=hw; bench/bench_gemm.c
// --round-check shows whether it is round to nearest even: f16 is on the
// H200, bf16 is not).
//
// Epilogue: CM_DIRECT stores the accumulators straight into Y (row-major C,
// full tiles, no fused group, unpaged); otherwise each subgroup stores one
// fragment at a time into its own 16 x 16 f32 scratch in shared memory and
// its invocations apply MM_EPILOGUE(i, acc) (a fused group, vk_gen_fused.c)
// or Y(i) = acc to the elements inside the matrix.
//
// Indexing lives in the helpers cm_a_index, cm_b_index, cm_c_index (element
// offsets of A, B, C) and, for the convolutions' implicit GEMM (MM_MAP 1-3,
// the maps of matmul.glsl: forward, input gradient, weight gradient), cm_a,
// cm_b, cm_c_index, so a wider index type changes them alone. A
// convolution loads element by element through its map, adds its bias
// (MM_BIAS) after the products, and stores through the scratch.
//
// A convolution's weight gradient split into partial sums (MM_MAP 3 with
// MM_PARTS > 1: autodiff's wgrad_chunk, vk_gen_linalg.c) runs as a batch of
// (part, group): part p multiplies its own run of k, [p*CM_KC, (p+1)*CM_KC)
// (cm_ke ends it), into rows p*O.. of the stacked C; the graph adds the parts.
//
// Does not: K splits of other products, more than two stages,
// NV_cooperative_matrix2's tensor loads.

#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require

#ifndef MM_MAP
#define MM_MAP 0
#endif
#ifndef MM_BIAS
#define MM_BIAS 0
#endif
// what the generator allowed, less what a fused group changed after it
// (vk_gen_fused.c adds page defines and MM_EPILOGUE to the matmul's)
#if CM_VA && !defined(X0_PAGES) && MM_MAP == 0
#define CM_VEC_A 1
#else
#define CM_VEC_A 0
#endif
#if CM_VB && !defined(X1_PAGES) && MM_MAP == 0
#define CM_VEC_B 1
#else
#define CM_VEC_B 0
#endif
#if CM_DIRECT && !defined(MM_EPILOGUE) && !defined(Y_PAGES) && MM_MAP == 0 && !MM_BIAS
#define CM_STORE_DIRECT 1
#else
#define CM_STORE_DIRECT 0
#endif

#define NSGM (CM_BM / CM_WM)
#define NSGN (CM_BN / CM_WN)
#define NSG (NSGM * NSGN)
#define NT (NSG * CM_SG)
#define FM (CM_WM / 16)
#define FN (CM_WN / 16)
#ifndef MM_PARTS
#define MM_PARTS 1
#endif
#ifndef CM_KC
#define CM_KC MM_K // K of one part
#endif
#define KTILES ((CM_KC + CM_BK - 1) / CM_BK)
// the end of the current part's k (CM_KE) and the group of a batch index
#if MM_PARTS > 1
uint cm_ke;
#define CM_KE cm_ke
#define CM_GROUP(z) ((z) % MM_GROUPS)
#else
#define CM_KE MM_K
#define CM_GROUP(z) (z)
#endif
#define TILES_M ((MM_M + CM_BM - 1) / CM_BM)
#define TILES_N ((MM_N + CM_BN - 1) / CM_BN)
const uint CM_SCOPE = 3; // gl_ScopeSubgroup

// shared rows, in uvec2 units (4 x 16 bits): a padded row of the contiguous dimension
#if CM_A_KFAST
#define ROWA ((CM_BK + 8) / 4)
#define A_LEN (CM_BM * ROWA)
#else
#define ROWA ((CM_BM + 8) / 4)
#define A_LEN (CM_BK * ROWA)
#endif
#if CM_B_NFAST
#define ROWB ((CM_BN + 8) / 4)
#define B_LEN (CM_BK * ROWB)
#else
#define ROWB ((CM_BK + 8) / 4)
#define B_LEN (CM_BN * ROWB)
#endif
#define EPI_ROW 10 // 16 f32 + 4 padding, in uvec2
#define EPI_LEN (16 * EPI_ROW)
#define STAGE_LEN (CM_STAGES * (A_LEN + B_LEN))
#define SMEM_LEN (STAGE_LEN > NSG * EPI_LEN ? STAGE_LEN : NSG * EPI_LEN)
shared uvec2 sm[SMEM_LEN];

// units (4 elements) of a slice per invocation
#define UA ((CM_BM * CM_BK / 4) / NT)
#define UB ((CM_BK * CM_BN / 4) / NT)

// vec4 views of the operands (the same bindings as X0, X1: preamble.glsl),
// or, for a packed operand (X0_P16 / X1_P16: a cast stored two 16-bit values
// a word, NODE_F_PACK16), uvec2 views: a unit's four values are moved from
// global to shared memory as they are (CM_RAW_*), with no conversion. A
// packed operand off the vector path (a convolution's map) is decoded by
// X0 / X1 and converted back, exactly.
#if CM_VEC_A && defined(X0_P16)
#define CM_RAW_A 1
layout(std430, set = 0, binding = 1) readonly buffer BufX0r { uvec2 d[]; } bX0r;
#define RA_T uvec2
#else
#define CM_RAW_A 0
#define RA_T vec4
#endif
#if CM_VEC_B && defined(X1_P16)
#define CM_RAW_B 1
layout(std430, set = 0, binding = 2) readonly buffer BufX1r { uvec2 d[]; } bX1r;
#define RB_T uvec2
#else
#define CM_RAW_B 0
#define RB_T vec4
#endif
#if CM_VEC_A && !CM_RAW_A
layout(std430, set = 0, binding = 1) readonly buffer BufX0v { vec4 d[]; } bX0v;
#endif
#if CM_VEC_B && !CM_RAW_B
layout(std430, set = 0, binding = 2) readonly buffer BufX1v { vec4 d[]; } bX1v;
#endif

// ---- indexing: the operand maps (MM_MAP, as matmul.glsl's) ---------------
// cm_a / cm_b read an in-range element of op(A) / op(B) (0 for a
// convolution's padding), cm_c_index gives C's element index.
#if MM_MAP == 0
uint cm_a_index(uint z, uint m, uint k) { return z * MM_SAZ + m * MM_SAM + k * MM_SAK; }
uint cm_b_index(uint z, uint k, uint n) { return z * MM_SBZ + k * MM_SBK + n * MM_SBN; }
uint cm_c_index(uint z, uint m, uint n) { return (z * MM_M + m) * MM_N + n; }
float cm_a(uint z, uint m, uint k) { return X0(cm_a_index(z, m, k)); }
float cm_b(uint z, uint k, uint n) { return X1(cm_b_index(z, k, n)); }

#elif MM_MAP == 1
// conv2d forward, z = group: m = (b, oh, ow), k = (ci, kh, kw), n = o
float cm_a(uint z, uint m, uint k) {
    uint b = m / (CV_OH * CV_OW), p = m % (CV_OH * CV_OW);
    uint ci = k / (CV_KH * CV_KW), r = k % (CV_KH * CV_KW);
    int ih = int((p / CV_OW) * CV_SH + (r / CV_KW) * CV_DH) - CV_PH;
    int iw = int((p % CV_OW) * CV_SW + (r % CV_KW) * CV_DW) - CV_PW;
    if (uint(ih) >= uint(CV_H) || uint(iw) >= uint(CV_W)) return 0.0;
    return X0(((b * CV_C + z * CV_CG + ci) * CV_H + uint(ih)) * CV_W + uint(iw));
}
float cm_b(uint z, uint k, uint n) { return X1((z * CV_OG + n) * (CV_CG * CV_KH * CV_KW) + k); }
uint cm_c_index(uint z, uint m, uint n) {
    uint b = m / (CV_OH * CV_OW), p = m % (CV_OH * CV_OW);
    return (b * CV_O + z * CV_OG + n) * (CV_OH * CV_OW) + p;
}

#elif MM_MAP == 2
// conv2d input gradient, z = group: m = (b, h, w) of dx, k = (o, kh, kw), n = ci
float cm_a(uint z, uint m, uint k) {
    uint b = m / (CV_H * CV_W), p = m % (CV_H * CV_W);
    uint o = k / (CV_KH * CV_KW), r = k % (CV_KH * CV_KW);
    int th = int(p / CV_W) + CV_PH - int((r / CV_KW) * CV_DH);
    int tw = int(p % CV_W) + CV_PW - int((r % CV_KW) * CV_DW);
    if (th < 0 || tw < 0) return 0.0;
    uint oh = uint(th) / CV_SH, ow = uint(tw) / CV_SW;
    if (oh * CV_SH != uint(th) || ow * CV_SW != uint(tw) || oh >= CV_OH || ow >= CV_OW) return 0.0;
    return X0(((b * CV_O + z * CV_OG + o) * CV_OH + oh) * CV_OW + ow);
}
float cm_b(uint z, uint k, uint n) {
    uint o = k / (CV_KH * CV_KW), r = k % (CV_KH * CV_KW);
    return X1(((z * CV_OG + o) * CV_CG + n) * (CV_KH * CV_KW) + r);
}
uint cm_c_index(uint z, uint m, uint n) {
    uint b = m / (CV_H * CV_W), p = m % (CV_H * CV_W);
    return (b * CV_C + z * CV_CG + n) * (CV_H * CV_W) + p;
}

#elif MM_MAP == 3
// conv2d weight gradient, z = group (of a part: CM_GROUP): m = o,
// k = (b, oh, ow), n = (ci, kh, kw); C's row block z (stacked parts)
float cm_a(uint z, uint m, uint k) {
    z = CM_GROUP(z);
    uint b = k / (CV_OH * CV_OW), p = k % (CV_OH * CV_OW);
    return X1((b * CV_O + z * CV_OG + m) * (CV_OH * CV_OW) + p);
}
float cm_b(uint z, uint k, uint n) {
    z = CM_GROUP(z);
    uint b = k / (CV_OH * CV_OW), p = k % (CV_OH * CV_OW);
    uint ci = n / (CV_KH * CV_KW), r = n % (CV_KH * CV_KW);
    int ih = int((p / CV_OW) * CV_SH + (r / CV_KW) * CV_DH) - CV_PH;
    int iw = int((p % CV_OW) * CV_SW + (r % CV_KW) * CV_DW) - CV_PW;
    if (uint(ih) >= uint(CV_H) || uint(iw) >= uint(CV_W)) return 0.0;
    return X0(((b * CV_C + z * CV_CG + ci) * CV_H + uint(ih)) * CV_W + uint(iw));
}
uint cm_c_index(uint z, uint m, uint n) { return (z * CV_OG + m) * (CV_CG * CV_KH * CV_KW) + n; }
#endif

// ---- staging: four f32 -> four 16-bit values in a uvec2 ------------------
// exact (a constant: CM_EXACT_A / CM_EXACT_B): round by integer arithmetic;
// otherwise the device's conversion, exact for an operand that a cast
// already rounded.
uvec2 cm_pack(vec4 v, const bool exact) {
#if CM_BF16
    if (exact) {
        // bf16 by integer rounding: the high halves of the rounded f32 bits
        uvec4 b = uvec4(floatBitsToUint(mn_round_bf16(v.x)), floatBitsToUint(mn_round_bf16(v.y)),
                        floatBitsToUint(mn_round_bf16(v.z)), floatBitsToUint(mn_round_bf16(v.w)));
        return uvec2((b.x >> 16) | (b.y & 0xffff0000u), (b.z >> 16) | (b.w & 0xffff0000u));
    }
#else
    if (exact) v = vec4(mn_round_f16(v.x), mn_round_f16(v.y), mn_round_f16(v.z), mn_round_f16(v.w));
#endif
    // the 16-bit float type is bf16 after the CM_BF16 rewrite
    return uvec2(packFloat2x16(f16vec2(v.xy)), packFloat2x16(f16vec2(v.zw)));
}

// Unit u of a slice: its row r (the shared row) and column group c (the
// four elements 4c .. 4c+3 of the contiguous dimension).
RA_T cm_load_a(uint z, uint m0, uint k0, uint u) {
#if CM_A_KFAST
    uint r = u / (CM_BK / 4), c = u % (CM_BK / 4);
    uint m = m0 + r, k = k0 + 4u * c;
#else
    uint r = u / (CM_BM / 4), c = u % (CM_BM / 4);
    uint k = k0 + r, m = m0 + 4u * c;
#endif
#if CM_RAW_A
    // words (pc.off[1] is in words, even: tensors are 64-byte aligned)
    uvec2 v = uvec2(0u);
    if ((CM_EVEN_M != 0 || m < MM_M) && (CM_EVEN_K != 0 || k < CM_KE))
        v = bX0r.d[(pc.off[1] + (cm_a_index(z, m, k) >> 1)) >> 1];
#elif CM_VEC_A
    vec4 v = vec4(0.0);
    // the unit is wholly inside or outside (the contiguous extent is a
    // multiple of 4, and so is every unit's first index)
    if ((CM_EVEN_M != 0 || m < MM_M) && (CM_EVEN_K != 0 || k < CM_KE)) v = bX0v.d[(pc.off[1] + cm_a_index(z, m, k)) >> 2];
#else
    vec4 v = vec4(0.0);
    [[unroll]] for (uint j = 0; j < 4; j++) {
#if CM_A_KFAST
        uint mm = m, kk = k + j;
#else
        uint mm = m + j, kk = k;
#endif
        if ((CM_EVEN_M != 0 || mm < MM_M) && (CM_EVEN_K != 0 || kk < CM_KE)) v[j] = cm_a(z, mm, kk);
    }
#endif
    return v;
}

RB_T cm_load_b(uint z, uint n0, uint k0, uint u) {
#if CM_B_NFAST
    uint r = u / (CM_BN / 4), c = u % (CM_BN / 4);
    uint k = k0 + r, n = n0 + 4u * c;
#else
    uint r = u / (CM_BK / 4), c = u % (CM_BK / 4);
    uint n = n0 + r, k = k0 + 4u * c;
#endif
#if CM_RAW_B
    uvec2 v = uvec2(0u);
    if ((CM_EVEN_N != 0 || n < MM_N) && (CM_EVEN_K != 0 || k < CM_KE))
        v = bX1r.d[(pc.off[2] + (cm_b_index(z, k, n) >> 1)) >> 1];
#elif CM_VEC_B
    vec4 v = vec4(0.0);
    if ((CM_EVEN_N != 0 || n < MM_N) && (CM_EVEN_K != 0 || k < CM_KE)) v = bX1v.d[(pc.off[2] + cm_b_index(z, k, n)) >> 2];
#else
    vec4 v = vec4(0.0);
    [[unroll]] for (uint j = 0; j < 4; j++) {
#if CM_B_NFAST
        uint nn = n + j, kk = k;
#else
        uint nn = n, kk = k + j;
#endif
        if ((CM_EVEN_N != 0 || nn < MM_N) && (CM_EVEN_K != 0 || kk < CM_KE)) v[j] = cm_b(z, kk, nn);
    }
#endif
    return v;
}

// a unit's place in its stage: rows of ROW uvec2, unit u = (u / per_row, u % per_row)
uint cm_sa(uint u) {
#if CM_A_KFAST
    return (u / (CM_BK / 4)) * ROWA + u % (CM_BK / 4);
#else
    return (u / (CM_BM / 4)) * ROWA + u % (CM_BM / 4);
#endif
}
uint cm_sb(uint u) {
#if CM_B_NFAST
    return (u / (CM_BN / 4)) * ROWB + u % (CM_BN / 4);
#else
    return (u / (CM_BK / 4)) * ROWB + u % (CM_BK / 4);
#endif
}

RA_T ra[UA];
RB_T rb[UB];

void cm_fetch(uint z, uint m0, uint n0, uint k0, uint lid) {
    [[unroll]] for (uint i = 0; i < UA; i++) ra[i] = cm_load_a(z, m0, k0, lid + i * NT);
    [[unroll]] for (uint i = 0; i < UB; i++) rb[i] = cm_load_b(z, n0, k0, lid + i * NT);
}

void cm_stash(uint stage, uint lid) {
    uint a0 = stage * A_LEN, b0 = CM_STAGES * A_LEN + stage * B_LEN;
#if CM_RAW_A
    [[unroll]] for (uint i = 0; i < UA; i++) sm[a0 + cm_sa(lid + i * NT)] = ra[i];
#else
    [[unroll]] for (uint i = 0; i < UA; i++) sm[a0 + cm_sa(lid + i * NT)] = cm_pack(ra[i], CM_EXACT_A != 0);
#endif
#if CM_RAW_B
    [[unroll]] for (uint i = 0; i < UB; i++) sm[b0 + cm_sb(lid + i * NT)] = rb[i];
#else
    [[unroll]] for (uint i = 0; i < UB; i++) sm[b0 + cm_sb(lid + i * NT)] = cm_pack(rb[i], CM_EXACT_B != 0);
#endif
}

void main() {
    uint lid = gl_LocalInvocationIndex;
    uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    uint wm = (sg / NSGN) * CM_WM, wn = (sg % NSGN) * CM_WN; // the subgroup's block in the tile
    // Uniform loops: a grid smaller than the tile count (device group
    // limits) strides over the remaining tiles.
    for (uint z = gl_WorkGroupID.z; z < MM_BATCH; z += gl_NumWorkGroups.z)
    for (uint tm = gl_WorkGroupID.x; tm < TILES_M; tm += gl_NumWorkGroups.x)
    for (uint tn = gl_WorkGroupID.y; tn < TILES_N; tn += gl_NumWorkGroups.y) {
        uint m0 = tm * CM_BM, n0 = tn * CM_BN;
#if MM_PARTS > 1
        uint kb = (z / MM_GROUPS) * CM_KC;
        cm_ke = min(kb + CM_KC, MM_K);
#else
        const uint kb = 0u;
#endif
        fcoopmatNV<32, CM_SCOPE, 16, 16> acc[FM][FN];
        [[unroll]] for (uint i = 0; i < FM; i++)
            [[unroll]] for (uint j = 0; j < FN; j++) acc[i][j] = fcoopmatNV<32, CM_SCOPE, 16, 16>(0.0);

        cm_fetch(z, m0, n0, kb, lid);
        cm_stash(0, lid);
        barrier();
        for (uint t = 0; t < KTILES; t++) {
            uint stage = CM_STAGES == 2 ? (t & 1u) : 0u;
            bool next = t + 1 < KTILES;
            if (next) cm_fetch(z, m0, n0, kb + (t + 1) * CM_BK, lid);
            uint a0 = stage * A_LEN, b0 = CM_STAGES * A_LEN + stage * B_LEN;
            [[unroll]] for (uint kk = 0; kk < CM_BK; kk += 16) {
                fcoopmatNV<16, CM_SCOPE, 16, 16> fa[FM], fb[FN];
                [[unroll]] for (uint i = 0; i < FM; i++) {
#if CM_A_KFAST
                    coopMatLoadNV(fa[i], sm, a0 + (wm + i * 16) * ROWA + kk / 4, ROWA, false);
#else
                    coopMatLoadNV(fa[i], sm, a0 + kk * ROWA + (wm + i * 16) / 4, ROWA, true);
#endif
                }
                [[unroll]] for (uint j = 0; j < FN; j++) {
#if CM_B_NFAST
                    coopMatLoadNV(fb[j], sm, b0 + kk * ROWB + (wn + j * 16) / 4, ROWB, false);
#else
                    coopMatLoadNV(fb[j], sm, b0 + (wn + j * 16) * ROWB + kk / 4, ROWB, true);
#endif
                }
                [[unroll]] for (uint i = 0; i < FM; i++)
                    [[unroll]] for (uint j = 0; j < FN; j++) acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
            }
#if CM_STAGES == 2
            // the other stage was last read in the previous slice, which the
            // previous barrier closed; this barrier publishes it and closes
            // the reads of this one
            if (next) cm_stash(stage ^ 1u, lid);
            barrier();
#else
            barrier(); // every subgroup is done reading the stage
            if (next) {
                cm_stash(0, lid);
                barrier();
            }
#endif
        }

#if CM_STORE_DIRECT
        [[unroll]] for (uint i = 0; i < FM; i++)
            [[unroll]] for (uint j = 0; j < FN; j++)
                coopMatStoreNV(acc[i][j], bY.d, pc.off[0] + cm_c_index(z, m0 + wm + i * 16, n0 + wn + j * 16), MM_N, false);
#else
        // the stages are free (the last barrier closed their reads): each
        // subgroup takes EPI_LEN of them as its scratch
        uint e0 = sg * EPI_LEN;
        [[unroll]] for (uint i = 0; i < FM; i++)
            [[unroll]] for (uint j = 0; j < FN; j++) {
                coopMatStoreNV(acc[i][j], sm, e0, EPI_ROW, false);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                [[unroll]] for (uint q = 0; q < 256 / CM_SG; q++) {
                    uint e = lane + q * CM_SG, row = e / 16, col = e % 16;
                    uvec2 w = sm[e0 + row * EPI_ROW + col / 2];
                    float v = uintBitsToFloat((col & 1u) != 0u ? w.y : w.x);
                    uint m = m0 + wm + i * 16 + row, n = n0 + wn + j * 16 + col;
                    if ((CM_EVEN_M == 0 && m >= MM_M) || (CM_EVEN_N == 0 && n >= MM_N)) continue;
#if MM_BIAS
                    v += X2(z * CV_OG + n); // conv2d's bias, after the products (the CPU adds it first)
#endif
#ifdef MM_EPILOGUE
                    MM_EPILOGUE(cm_c_index(z, m, n), v)
#else
                    Y(cm_c_index(z, m, n)) = v;
#endif
                }
                subgroupBarrier(); // the scratch is read before the next fragment overwrites it
            }
        barrier(); // the scratch is the next tile's stage 0
#endif
    }
}
