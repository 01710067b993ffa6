// conv2d_bwd_weight.glsl - direct weight gradient, one workgroup of LOCAL_X
// invocations per dw element:
// dw[o, ci, kh, kw] = sum over (b, oh, ow) of x[b, g*Cg + ci, ih, iw] *
// dy[b, o, oh, ow], ih = oh*SH - PH + kh*DH, iw = ow*SW - PW + kw*DW.
//
// The path for small or thin problems (few channels per group); large ones
// go through matmul.glsl (MM_MAP 3). With LOCAL_X == 1 the sum runs in the
// CPU reference's order (b, oh, ow); with more invocations each sums a
// strided share and a tree in shared memory adds the shares (a different
// rounding order, for long sums). Workgroups stride over the elements
// (gl_NumWorkGroups may be smaller than Y_N). A weight gradient split into
// partial sums (CV_KC < N*OH*OW) stacks them [P*O, Cg, KH, KW]: element i
// of part p = i / (O*Cg*KH*KW) sums e in [p*CV_KC, (p+1)*CV_KC).
// Inputs: X0 = x [N,C,H,W], X1 = dy [N,O,OH,OW]; defines as conv2d.glsl.
// Does not: use atomics.

shared float part[LOCAL_X];

void main() {
    uint lid = gl_LocalInvocationIndex;
    uint ngroups = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    for (IDX i = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; i < Y_N; i += ngroups) {
        SIDX kw = SIDX(i % CV_KW), kh = SIDX((i / CV_KW) % CV_KH);
        IDX ci = (i / (CV_KW * CV_KH)) % CV_CG, o = (i / (CV_KW * CV_KH * CV_CG)) % CV_O;
        IDX g = o / CV_OG, e0 = (i / (CV_O * CV_CG * CV_KH * CV_KW)) * CV_KC;
        IDX e1 = e0 + CV_KC < CV_N * CV_OH * CV_OW ? e0 + CV_KC : CV_N * CV_OH * CV_OW;
        float s = 0.0;
        for (IDX e = e0 + lid; e < e1; e += LOCAL_X) {
            IDX ow = e % CV_OW, oh = (e / CV_OW) % CV_OH, b = e / (CV_OW * CV_OH);
            SIDX ih = SIDX(oh) * CV_SH - CV_PH + kh * CV_DH;
            SIDX iw = SIDX(ow) * CV_SW - CV_PW + kw * CV_DW;
            if (ih < 0 || ih >= CV_H || iw < 0 || iw >= CV_W) continue;
            s += X0((b * CV_C + g * CV_CG + ci) * (CV_H * CV_W) + IDX(ih * CV_W + iw)) *
                 X1((b * CV_O + o) * (CV_OH * CV_OW) + oh * CV_OW + ow);
        }
#if LOCAL_X > 1
        part[lid] = s;
        barrier();
        for (uint h = LOCAL_X / 2; h > 0; h >>= 1) {
            if (lid < h) part[lid] += part[lid + h];
            barrier();
        }
        if (lid == 0) Y(i) = part[0];
        barrier(); // part[0] is read before the next element overwrites it
#else
        Y(i) = s;
#endif
    }
}
