// reduce.glsl - reductions: y[o] = reduce over l < RLEN of x[BASE(o) + ROFF(l)].
//
// Serves sum, mean, max, sumsq, reduce_to, mse and max_bwd. Output element o
// (o < NOUT) owns the input slice {BASE(o) + ROFF(l)}; the generator bakes
// both offset expressions (shapes are static).
//
// Defines from vk_gen_pointwise.c:
//   RED_OP        RED_SUM | RED_MAX | RED_SUMSQ | RED_MSE | RED_MAXBWD
//   RED_MEAN      1: divide the sum by RLEN_F (mean, mse)
//   RED_SERIAL    1: one invocation per output element (short slices)
//                 0: one workgroup per output element, tree reduction in
//                    shared memory (LOCAL_X is a power of two)
//   NOUT, RLEN, RLEN_F, BASE(o), ROFF(l)
//   RED_PROLOGUE  a pointwise chain computes x (red_in; sum, mean, reduce_to)
//   RED_LIMIT     sumsq over blocks: elements at or past it read as 0 (the
//                 last block of a tensor is short)
//   RED_MULTI     the multi-tensor sum of squares (vk_gen_multi.c): output o
//                 is block o - first of a gradient of len elements from
//                 element `at` of binding X<reg>, or (copy) element
//                 o - first of a tensor of partial sums there, found by
//                 mt_find(o, reg, at, len, first, copy) (generated); the
//                 same workgroup order as a sumsq over blocks, so the same
//                 bits
//
// Sums are double-f32 (hi, lo) pairs built from error-free TwoSum steps, per
// invocation and through the tree, so they match the CPU's double
// accumulation to about 2^-44 relative to the terms. Max keeps
// the CPU's "beats" order: the first NaN wins, else the first maximum, so
// ties (and -0 / +0) resolve to the lowest index exactly like the CPU loop.
// max_bwd: (x, y, dy) -> dx[x shape]; dy[o] goes to the first argmax of
// slice o, every other element of the slice gets 0; each element of dx is
// written by exactly one invocation.
//
// Does not: read y of max_bwd (the argmax is recomputed from x).

#define RED_SUM 0
#define RED_MAX 1
#define RED_SUMSQ 2
#define RED_MSE 3
#define RED_MAXBWD 4


// "v beats best": larger, or the first NaN (which then stays).
bool mn_beats(float v, float best) { return isnan(best) ? false : (isnan(v) || v > best); }

#ifdef RED_MULTI
// Element i of binding X<r> (r is the same in the whole workgroup).
float mt_read(uint r, uint i) {
#ifdef X1_ACCESS
    if (r == 1u) return X1(i);
#endif
#ifdef X2_ACCESS
    if (r == 2u) return X2(i);
#endif
#ifdef X3_ACCESS
    if (r == 3u) return X3(i);
#endif
#ifdef X4_ACCESS
    if (r == 4u) return X4(i);
#endif
#ifdef X5_ACCESS
    if (r == 5u) return X5(i);
#endif
    return X0(i);
}
#endif

// The input: x, or the value of a fused pointwise chain at that element
// (RED_PROLOGUE, vk_gen_fused.c: the members' lines, RED_PROLOGUE_OUT the
// last one).
#ifdef RED_PROLOGUE
float red_in(IDX i) {
    RED_PROLOGUE(i)
    return RED_PROLOGUE_OUT;
}
#define RED_X0(i) red_in(IDX(i))
#else
#define RED_X0(i) X0(i)
#endif

// Element l of slice o, as summed (squared for sumsq / mse).
float red_term(IDX o, IDX l) {
#if RED_OP == RED_MSE
    float d = X0(l) - X1(l);
    return d * d;
#elif RED_OP == RED_SUMSQ
    IDX ix = BASE(o) + ROFF(l);
#ifdef RED_LIMIT
    if (ix >= RED_LIMIT) return 0.0;
#endif
    float v = X0(ix);
    return v * v;
#else
    return RED_X0(BASE(o) + ROFF(l));
#endif
}

// two_sum, dd_add, dd_merge, dd_value: mathlib.glsl

#if RED_OP == RED_MAX || RED_OP == RED_MAXBWD
#define RED_ARG 1
#else
#define RED_ARG 0
#endif

#if !RED_SERIAL
shared float sh_v[LOCAL_X];
#if RED_ARG
shared IDX sh_i[LOCAL_X];
#else
shared float sh_lo[LOCAL_X];
#endif
#endif

void main() {
#if RED_SERIAL
    IDX o = GID;
    if (o >= NOUT) return;
#if RED_ARG
    float best = X0(BASE(o) + ROFF(0u));
    IDX arg = 0u;
    for (IDX l = 1u; l < RLEN; l++) {
        float v = X0(BASE(o) + ROFF(l));
        if (mn_beats(v, best)) {
            best = v;
            arg = l;
        }
    }
#else
    float hi = 0.0, lo = 0.0;
    for (IDX l = 0u; l < RLEN; l++) dd_add(hi, lo, red_term(o, l));
#endif
#else // one workgroup per output element
    IDX o = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (o >= NOUT) return; // uniform over the workgroup
    uint t = gl_LocalInvocationID.x;
#if RED_ARG
    float best = -MN_INF;
    IDX arg = MN_IDX_NONE; // an empty partial loses every tie
    for (IDX l = t; l < RLEN; l += LOCAL_X) {
        float v = X0(BASE(o) + ROFF(l));
        if (arg == MN_IDX_NONE || mn_beats(v, best)) {
            best = v;
            arg = l;
        }
    }
    sh_v[t] = best;
    sh_i[t] = arg;
    memoryBarrierShared();
    barrier();
    for (uint h = LOCAL_X / 2u; h > 0u; h >>= 1u) {
        if (t < h) {
            float w = sh_v[t + h], v = sh_v[t];
            IDX j = sh_i[t + h], i = sh_i[t];
            // the later partial wins if it beats, or ties with a lower index
            if (j != MN_IDX_NONE && (i == MN_IDX_NONE || mn_beats(w, v) || (!mn_beats(v, w) && j < i))) {
                sh_v[t] = w;
                sh_i[t] = j;
            }
        }
        memoryBarrierShared();
        barrier();
    }
    best = sh_v[0];
    arg = sh_i[0];
#else
    float hi = 0.0, lo = 0.0;
#ifdef RED_MULTI // a multi-tensor kernel: always 32-bit (a region is one binding)
    uint mreg, mat, mlen, mfirst;
    bool mcopy;
    mt_find(o, mreg, mat, mlen, mfirst, mcopy);
    if (mcopy) { // a tensor of partial sums computed elsewhere: element o - first
        if (t == 0u) Y(o) = mt_read(mreg, mat + o - mfirst);
        return;
    }
    uint b0 = (o - mfirst) * RLEN, lim = mlen - b0;
    for (uint l = t; l < RLEN; l += LOCAL_X) {
        float v = l < lim ? mt_read(mreg, mat + b0 + l) : 0.0;
        dd_add(hi, lo, v * v);
    }
#else
    for (IDX l = t; l < RLEN; l += LOCAL_X) dd_add(hi, lo, red_term(o, l));
#endif
    sh_v[t] = hi;
    sh_lo[t] = lo;
    memoryBarrierShared();
    barrier();
    for (uint h = LOCAL_X / 2u; h > 0u; h >>= 1u) {
        if (t < h) {
            float a = sh_v[t], b = sh_lo[t];
            dd_merge(a, b, sh_v[t + h], sh_lo[t + h]);
            sh_v[t] = a;
            sh_lo[t] = b;
        }
        memoryBarrierShared();
        barrier();
    }
    hi = sh_v[0];
    lo = sh_lo[0];
#endif
#endif

#if RED_OP == RED_MAXBWD
    float g = X2(o);
#if RED_SERIAL
    for (IDX l = 0u; l < RLEN; l++) Y(BASE(o) + ROFF(l)) = l == arg ? g : 0.0;
#else
    for (IDX l = t; l < RLEN; l += LOCAL_X) Y(BASE(o) + ROFF(l)) = l == arg ? g : 0.0;
#endif
#else
#if !RED_SERIAL
    if (t != 0u) return;
#endif
#if RED_ARG
    Y(o) = best;
#elif RED_MEAN
    Y(o) = dd_value(hi, lo) / RLEN_F;
#else
    Y(o) = dd_value(hi, lo);
#endif
#endif
}
