// bn_moment.glsl - the statistics of batch_norm2d in training, per channel c
// of x [N,C,H,W]: bn_mean, Y(c) = the mean over (n, h, w); bn_meansq (BN_SQ
// 1), Y(c) = the mean of x^2 (x centred: the biased variance).
//
// One workgroup per channel (workgroups stride over the channels when the
// grid is smaller), LOCAL_X invocations walking the channel's N*H*W values
// in index order e = n*H*W + p (consecutive invocations, consecutive
// pixels); a double-f32 (hi, lo) sum per invocation and through a tree in
// shared memory (mathlib.glsl), within about 2^-44 of the terms of the
// CPU's double sum.
// Defines (vk_gen_norm.c): BN_N, BN_C, BN_HW, BN_CNT_F (N*H*W as a float),
// BN_SQ; the sizes are literals, or with BN_GENERIC push constants (pc.dim,
// BN_CNT_F as its bits; CPU devices), where the loop divides by nothing per
// value: (n, p) of e = n*H*W + p advance by the constant (LOCAL_X / HW,
// LOCAL_X % HW) with one carry. Both visit the same e in the same order.
//
// Does not: use atomics.

shared float sh_hi[LOCAL_X];
shared float sh_lo[LOCAL_X];

void main() {
    uint lid = gl_LocalInvocationIndex;
#ifdef BN_GENERIC
    const IDX hw = IDX(BN_HW), dn = IDX(LOCAL_X) / hw, dp = IDX(LOCAL_X) % hw;
#endif
    for (IDX c = gl_WorkGroupID.x; c < IDX(BN_C); c += gl_NumWorkGroups.x) {
        float hi = 0.0, lo = 0.0;
#ifdef BN_GENERIC
        for (IDX n = IDX(lid) / hw, p = IDX(lid) % hw; n < IDX(BN_N);) {
            float v = X0((n * IDX(BN_C) + c) * hw + p);
            p += dp;
            n += dn;
            if (p >= hw) {
                p -= hw;
                n++;
            }
#else
        for (IDX e = lid; e < BN_N * BN_HW; e += LOCAL_X) {
            float v = X0(((e / BN_HW) * BN_C + c) * BN_HW + e % BN_HW);
#endif
#if BN_SQ
            precise float v2 = v * v;
            v = v2;
#endif
            dd_add(hi, lo, v);
        }
        sh_hi[lid] = hi;
        sh_lo[lid] = lo;
        barrier();
        for (uint h = LOCAL_X / 2; h > 0; h >>= 1) {
            if (lid < h) {
                float a = sh_hi[lid], b = sh_lo[lid];
                dd_merge(a, b, sh_hi[lid + h], sh_lo[lid + h]);
                sh_hi[lid] = a;
                sh_lo[lid] = b;
            }
            barrier();
        }
        precise float r = dd_value(sh_hi[0], sh_lo[0]) / BN_CNT_F;
        if (lid == 0) Y(c) = r;
        barrier(); // element 0 is read before the next channel overwrites it
    }
}
