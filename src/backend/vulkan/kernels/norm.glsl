// norm.glsl - row normalisations over the last axis: rms_norm, layer_norm,
// their dx helpers and the blocked weight-gradient partials.
//
// x is viewed as [NM_ROWS, NM_D]. Row kernels (forward, dx): a workgroup of
// LOCAL_X = NM_R * NM_S invocations takes NM_R rows, NM_S invocations per
// row striding over its columns; row sums are reduced in shared memory
// (segments of NM_S). Partials (NM_OP 4, 5): a workgroup takes one block of
// NM_BR rows and one chunk of columns (NM_NCH chunks per row); each
// invocation owns the chunk's columns lane + k * LOCAL_X (k < NM_PER,
// registers) and walks the block's rows, the row statistics reduced over the
// whole workgroup; it writes its part of the block's row of the
// [blocks, NM_D] output. Per invocation the loops run about ceil(NM_D / lanes) times per
// pass and row, so no invocation loops over all the rows of a big tensor.
//
// Statistics: mean (layer_norm only) = sum(x) / D, then sum((x - mean)^2) / D,
// rstd = 1 / sqrt(. + NM_EPS); xhat = (x - mean) * rstd; f32 sums.
// Inputs: X0 = x; forward: NM_W(j), NM_B(j) (when NM_HAS_W / NM_HAS_B);
// backward: X1 = dy, NM_W(j) = weight (NM_HAS_W).
// Defines: NM_OP, NM_ROWS, NM_D, NM_D_F, NM_EPS, NM_CENTRE, NM_HAS_W,
// NM_HAS_B, NM_S, NM_R, NM_NWG (workgroups with work), NM_BR, NM_PER, NM_NCH.
// Does not: write any element outside its rows (or its block's row).

#define NM_FWD_RMS 0
#define NM_FWD_LN 1
#define NM_BWD_RMS 2
#define NM_BWD_LN 3
#define NM_BWDW_RMS 4
#define NM_BWDW_LN 5

#define NM_PARTIAL (NM_OP >= NM_BWDW_RMS)
#define NM_BWD (NM_OP == NM_BWD_RMS || NM_OP == NM_BWD_LN)

shared vec2 sh_v[LOCAL_X];

// Sum of v over the NM_S invocations of this invocation's segment; every
// invocation of the workgroup must call it (uniform control flow).
vec2 seg_sum(vec2 v, uint lane) {
    uint t = gl_LocalInvocationID.x;
    sh_v[t] = v;
    memoryBarrierShared();
    barrier();
    for (uint h = NM_S / 2u; h > 0u; h >>= 1u) {
        if (lane < h) sh_v[t] += sh_v[t + h];
        memoryBarrierShared();
        barrier();
    }
    vec2 r = sh_v[t - lane];
    barrier(); // sh_v is reused by the next call
    return r;
}

// mean and rstd of the row at base (live: a real row; else only the
// reductions are joined).
void row_stats(IDX base, uint lane, bool live, out float mean, out float rstd) {
    mean = 0.0;
#if NM_CENTRE
    float s = 0.0;
    if (live)
        for (IDX j = lane; j < NM_D; j += NM_S) s += X0(base + j);
    mean = seg_sum(vec2(s, 0.0), lane).x / NM_D_F;
#endif
    float q = 0.0;
    if (live)
        for (IDX j = lane; j < NM_D; j += NM_S) {
            float c = X0(base + j) - mean;
            q += c * c;
        }
    rstd = 1.0 / sqrt(seg_sum(vec2(q, 0.0), lane).x / NM_D_F + NM_EPS);
}

#if NM_HAS_W
#define NM_G(j, dy) ((dy) * NM_W(j))
#else
#define NM_G(j, dy) (dy)
#endif

#if !NM_PARTIAL

void main() {
    IDX wg = GID / LOCAL_X;
    if (wg >= NM_NWG) return; // a whole workgroup: barriers stay uniform
    uint lane = gl_LocalInvocationID.x % NM_S;
    IDX row = wg * NM_R + gl_LocalInvocationID.x / NM_S;
    bool live = row < NM_ROWS;
    IDX base = live ? row * NM_D : 0u;
    float mean, rstd;
    row_stats(base, lane, live, mean, rstd);
#if NM_BWD
    vec2 s = vec2(0.0);
    if (live)
        for (IDX j = lane; j < NM_D; j += NM_S) {
            float g = NM_G(j, X1(base + j));
            s += vec2(g, g * ((X0(base + j) - mean) * rstd));
        }
    s = seg_sum(s, lane) / NM_D_F;
#if NM_OP == NM_BWD_RMS
    s.x = 0.0;
#endif
    if (!live) return;
    for (IDX j = lane; j < NM_D; j += NM_S) {
        float g = NM_G(j, X1(base + j)), xh = (X0(base + j) - mean) * rstd;
#ifdef MM_EPILOGUE
        MM_EPILOGUE(base + j, rstd * (g - s.x - xh * s.y)) // a fused group's members (vk_gen_fused.c)
#else
        Y(base + j) = rstd * (g - s.x - xh * s.y);
#endif
    }
#else
    if (!live) return;
    for (IDX j = lane; j < NM_D; j += NM_S) {
        float v = (X0(base + j) - mean) * rstd;
#if NM_HAS_W
        v *= NM_W(j);
#endif
#if NM_HAS_B
        v += NM_B(j);
#endif
#ifdef MM_EPILOGUE
        MM_EPILOGUE(base + j, v) // a fused group's members (vk_gen_fused.c)
#else
        Y(base + j) = v;
#endif
    }
#endif
}

#else // NM_PARTIAL

// Workgroup w: block w / NM_NCH of rows, column chunk w % NM_NCH of
// NM_PER * LOCAL_X columns.
void main() {
    IDX wg = GID / LOCAL_X;
    if (wg >= NM_NWG) return;
    IDX blk = wg / NM_NCH, col0 = (wg % NM_NCH) * (NM_PER * LOCAL_X);
    uint lane = gl_LocalInvocationID.x;
    float acc[NM_PER];
    [[unroll]] for (uint k = 0u; k < NM_PER; k++) acc[k] = 0.0;
    IDX r1 = min(blk * NM_BR + NM_BR, NM_ROWS);
    for (IDX r = blk * NM_BR; r < r1; r++) {
        IDX base = r * NM_D;
        float mean, rstd;
        row_stats(base, lane, true, mean, rstd);
        [[unroll]] for (uint k = 0u; k < NM_PER; k++) {
            IDX j = col0 + lane + k * LOCAL_X;
            if (j < NM_D) acc[k] += X1(base + j) * ((X0(base + j) - mean) * rstd);
        }
    }
    [[unroll]] for (uint k = 0u; k < NM_PER; k++) {
        IDX j = col0 + lane + k * LOCAL_X;
        if (j < NM_D) Y(blk * NM_D + j) = acc[k];
    }
}

#endif
