// gemv.glsl - C[z] = A[z] (MM_M x MM_K) @ B[z] (MM_K x MM_N) for a few rows
// (MM_M <= GV_MAXM): the matrix-vector products of token-by-token decoding,
// where a tiled GEMM (matmul.glsl) leaves nearly every invocation idle and
// reads the weight once per tile row at a fraction of the bandwidth.
//
// A workgroup holds GV_NL teams of GV_TL invocations; team j computes output
// column n = block * GV_NL + j for all MM_M rows. Its members split K:
//   MM_B_KFAST (B is [N, K], k contiguous: Linear weights as published):
//     member t takes k = t, t + GV_TL, ...; a team is GV_TL adjacent
//     invocations, so a subgroup reads a contiguous run of B's row;
//   otherwise (B is [K, N], n contiguous): member t takes the contiguous
//     chunk k in [t * GV_KC, (t + 1) * GV_KC); invocations of one member
//     index are adjacent over n, so a subgroup reads a run of a B row.
// The members' partial sums are added by a tree in shared memory (a fixed
// order: deterministic, but not the CPU reference's k order; the tolerance
// is a matmul's). A is read through the cache (MM_M rows of K floats).
//
// Defines (vk_gen_linalg.c): MM_M, MM_N, MM_K, MM_BATCH, the strides
// MM_SAZ, MM_SAM, MM_SAK, MM_SBZ, MM_SBK, MM_SBN (as matmul.glsl's MAP 0),
// MM_B_KFAST, GV_NL, GV_TL (a power of two), GV_KC; LOCAL_X = GV_NL * GV_TL.
// MM_EPILOGUE(i, acc) as in matmul.glsl (a fused group's store).
//
// Does not: handle convolutions (matmul.glsl's operand maps), use subgroup
// operations, or split K across workgroups.

#ifndef MM_RND
#define MM_RND(x) (x) /* the fast contract: each operand rounded as it is loaded (matmul.glsl) */
#endif
#define NT (GV_NL * GV_TL)
#define NBLOCKS ((MM_N + GV_NL - 1) / GV_NL)
#if MM_B_KFAST
#define GV_TSTRIDE 1u
#else
#define GV_TSTRIDE uint(GV_NL)
#endif

shared float red[MM_M][NT];

// indices are IDX (64-bit under MN_IDX64: MM_N, MM_K, MM_BATCH, GV_KC and
// the strides are then 64-bit literals, so the products do not wrap)
IDX mm_c(uint z, uint m, uint n) { return (IDX(z) * MM_M + m) * MM_N + n; }

void main() {
    uint lid = gl_LocalInvocationIndex;
#if MM_B_KFAST
    uint j = lid / GV_TL, t = lid % GV_TL;
#else
    uint j = lid % GV_NL, t = lid / GV_NL;
#endif
    // uniform loops: the grid strides over batches and column blocks beyond
    // the device's group limits
    for (uint z = gl_WorkGroupID.z; z < MM_BATCH; z += gl_NumWorkGroups.z)
    for (uint blk = gl_WorkGroupID.x; blk < NBLOCKS; blk += gl_NumWorkGroups.x) {
        uint n = blk * GV_NL + j;
        float acc[MM_M];
        [[unroll]] for (uint m = 0; m < MM_M; m++) acc[m] = 0.0;
        if (n < MM_N) {
#if MM_B_KFAST
            for (IDX k = t; k < MM_K; k += GV_TL) {
#else
            IDX k1 = min(IDX(MM_K), IDX(t + 1u) * GV_KC);
            for (IDX k = IDX(t) * GV_KC; k < k1; k++) {
#endif
                float b = MM_RND(X1(IDX(z) * MM_SBZ + k * MM_SBK + IDX(n) * MM_SBN));
                [[unroll]] for (uint m = 0; m < MM_M; m++)
                    acc[m] = fma(MM_RND(X0(IDX(z) * MM_SAZ + IDX(m) * MM_SAM + k * MM_SAK)), b, acc[m]);
            }
        }
        [[unroll]] for (uint m = 0; m < MM_M; m++) red[m][lid] = acc[m];
        barrier();
        // member t adds member t + s (s = GV_TL/2, .., 1): the same tree in
        // every team
        [[unroll]] for (uint s = GV_TL / 2; s > 0; s >>= 1) {
            if (t < s)
                [[unroll]] for (uint m = 0; m < MM_M; m++) red[m][lid] += red[m][lid + s * GV_TSTRIDE];
            barrier();
        }
        if (t == 0 && n < MM_N) {
            [[unroll]] for (uint m = 0; m < MM_M; m++) {
#ifdef MM_EPILOGUE
                MM_EPILOGUE(mm_c(z, m, n), red[m][lid])
#else
                Y(mm_c(z, m, n)) = red[m][lid];
#endif
            }
        }
        barrier(); // red is refilled by the next block
    }
}
