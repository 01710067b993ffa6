// conv2d_bwd_input.glsl - direct input gradient, one invocation per dx
// element (a gather, so no write races):
// dx[b, c, h, w] = sum over (o in c's group, kh, kw) of w[o, ci, kh, kw] *
// dy[b, o, oh, ow] where oh*SH - PH + kh*DH = h and ow*SW - PW + kw*DW = w.
//
// The path for small or thin problems; large ones go through matmul.glsl
// (MM_MAP 2). Terms are added in the CPU reference's order (o, kh, kw).
// Inputs: X0 = dy [N,O,OH,OW], X1 = w; defines as conv2d.glsl.
// Does not: skip the taps that a stride > 1 never reaches by arithmetic
// (it tests them).

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    SIDX w = SIDX(i % CV_W), h = SIDX((i / CV_W) % CV_H);
    IDX c = (i / (CV_W * CV_H)) % CV_C, b = i / (CV_W * CV_H * CV_C);
    IDX g = c / CV_CG, ci = c % CV_CG;
    float s = 0.0;
    for (IDX oo = 0; oo < CV_OG; oo++) {
        IDX o = g * CV_OG + oo;
        IDX dp = (b * CV_O + o) * (CV_OH * CV_OW);
        IDX wp = (o * CV_CG + ci) * (CV_KH * CV_KW);
        for (SIDX kh = 0; kh < CV_KH; kh++) {
            SIDX th = h + CV_PH - kh * CV_DH;
            if (th < 0 || th % CV_SH != 0 || th / CV_SH >= CV_OH) continue;
            SIDX oh = th / CV_SH;
            for (SIDX kw = 0; kw < CV_KW; kw++) {
                SIDX tw = w + CV_PW - kw * CV_DW;
                if (tw < 0 || tw % CV_SW != 0 || tw / CV_SW >= CV_OW) continue;
                s += X1(wp + IDX(kh * CV_KW + kw)) * X0(dp + IDX(oh * CV_OW + tw / CV_SW));
            }
        }
    }
#ifdef MM_EPILOGUE
    MM_EPILOGUE(i, s) // a fused group's members (vk_gen_fused.c)
#else
    Y(i) = s;
#endif
}
