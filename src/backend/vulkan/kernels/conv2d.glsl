// conv2d.glsl - direct NCHW convolution, one invocation per output element:
// y[b, o, oh, ow] = bias[o] + sum over (ci, kh, kw) of w[o, ci, kh, kw] *
// x[b, g*Cg + ci, oh*SH - PH + kh*DH, ow*SW - PW + kw*DW], g = o / Og.
//
// The path for small or thin problems (few output channels per group,
// depthwise); large ones go through matmul.glsl as an implicit GEMM. The
// terms are added in the CPU reference's order (bias, then ci, kh, kw;
// padded taps skipped). Inputs: X0 = x, X1 = w, X2 = bias when CV_BIAS.
// Defines: CV_N, CV_C, CV_H, CV_W, CV_O, CV_CG, CV_OG, CV_KH, CV_KW, CV_OH,
// CV_OW, CV_SH, CV_SW, CV_PH, CV_PW, CV_DH, CV_DW.
// Does not: use shared memory or tile anything.

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    IDX ow = i % CV_OW, oh = (i / CV_OW) % CV_OH;
    IDX o = (i / (CV_OW * CV_OH)) % CV_O, b = i / (CV_OW * CV_OH * CV_O);
    IDX g = o / CV_OG;
    float s = 0.0;
#if CV_BIAS
    s = X2(o);
#endif
    for (IDX ci = 0; ci < CV_CG; ci++) {
        IDX xp = (b * CV_C + g * CV_CG + ci) * (CV_H * CV_W);
        IDX wp = (o * CV_CG + ci) * (CV_KH * CV_KW);
        for (SIDX kh = 0; kh < CV_KH; kh++) {
            SIDX ih = SIDX(oh) * CV_SH - CV_PH + kh * CV_DH;
            if (ih < 0 || ih >= CV_H) continue;
            for (SIDX kw = 0; kw < CV_KW; kw++) {
                SIDX iw = SIDX(ow) * CV_SW - CV_PW + kw * CV_DW;
                if (iw < 0 || iw >= CV_W) continue;
                s += X1(wp + IDX(kh * CV_KW + kw)) * X0(xp + IDX(ih * CV_W + iw));
            }
        }
    }
#ifdef MM_EPILOGUE
    MM_EPILOGUE(i, s) // a fused group's members (vk_gen_fused.c)
#else
    Y(i) = s;
#endif
}
