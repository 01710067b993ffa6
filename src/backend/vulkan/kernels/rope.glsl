// rope.glsl - rotary position embedding, "rotate half" convention, on
// x [rows, Dh] viewed as [..., T, Dh]: one invocation per (row, pair i).
// Row r sits at position p = RP_OFF + pos + r % T; pair i turns by
// p * tau_i turns, tau_i = theta^(-2i/Dh) / (2 pi) given as a float pair
// RP_TAU_HI[i] + RP_TAU_LO[i] (computed in double on the host):
//   y[i]        = x[i] cos - x[i+half] sin
//   y[i+half]   = x[i+half] cos + x[i] sin     (sin negated if RP_INVERSE)
// Accuracy: p * hi is formed as four exact partial products whose whole
// turns are dropped exactly, so the fraction of a turn is good to a few
// 1e-7 for |p| < 2^24; sin and cos come from Taylor polynomials on [-pi/4, pi/4]
// after an exact quadrant reduction (the builtins' accuracy is not
// specified tightly enough).
// Inputs: X0 = x, X1 = pos (i32 [1]) when RP_HAS_POS. RP_SRC_BTHD: x is
// [B, RP_H, T, Dh] and X0 the [B, T, RP_H, Dh] tensor it permutes (a
// folded permute, kir.h KIR_HEADS_IN); y is written as x's layout.
// Defines: RP_T, RP_DH, RP_HALF, RP_OFF, RP_INVERSE, RP_HAS_POS, RP_POS,
// RP_SRC_BTHD, RP_H, the arrays RP_TAU_HI / RP_TAU_LO.
// Does not: write in place (y and x are distinct tensors).

// Fraction of a turn of p * (hi + lo), in [-0.5, 0.5]. hi is split into
// two parts of at most 12 significant bits (h1 by masking, h2 = hi - h1,
// exact) and p into ph (a multiple of 4096) and pl in [0, 4096): the four
// products have at most 24 bits, so they and their fractions are exact in
// f32; only p * lo (below 0.16 turns) and the final sum round.
float rope_turns(int p, uint i) {
    float hi = RP_TAU_HI[i];
    float h1 = uintBitsToFloat(floatBitsToUint(hi) & 0xfffff000u);
    float h2 = hi - h1;
    int phi = p & ~0xfff;
    float ph = float(phi), pl = float(p - phi);
    precise float a = ph * h1, b = ph * h2, c = pl * h1, d = pl * h2;
    precise float r = (a - round(a)) + (b - round(b)) + (c - round(c)) + (d - round(d)) + float(p) * RP_TAU_LO[i];
    precise float rr = r - round(r);
    return rr;
}

// sin and cos of `turns` turns (|turns| <= 0.5 + tiny).
void rope_sincos(float turns, out float s, out float c) {
    precise float q = round(turns * 4.0);
    precise float f = turns - q * 0.25; // exact, |f| <= 1/8
    precise float x = f * 6.28318548; // 2 pi in f32
    precise float x2 = x * x;
    precise float sn = x * (1.0 + x2 * (-0.166666672 + x2 * (0.00833333377 + x2 * (-0.000198412701 + x2 * 2.75573188e-06))));
    precise float cs = 1.0 + x2 * (-0.5 + x2 * (0.0416666679 + x2 * (-0.00138888892 + x2 * (2.48015876e-05 + x2 * -2.75573188e-07))));
    int qi = int(q) & 3;
    if (qi == 0) { s = sn; c = cs; }
    else if (qi == 1) { s = cs; c = -sn; }
    else if (qi == 2) { s = -sn; c = -cs; }
    else { s = -cs; c = sn; }
}

void main() {
    IDX gid = GID;
    if (gid >= Y_N / 2u) return;
    uint i = uint(gid % RP_HALF);
    IDX r = gid / RP_HALF;
    int p = RP_OFF + int(r % RP_T);
#if RP_HAS_POS
    p += clamp(RP_POS, -(1 << 29), 1 << 29);
#endif
    float s, c;
    rope_sincos(rope_turns(p, i), s, c);
#if RP_INVERSE
    s = -s;
#endif
    IDX o = r * RP_DH + i;
#if RP_SRC_BTHD
    IDX t = r % RP_T, bh = r / RP_T;
    IDX xo = ((bh / RP_H * RP_T + t) * RP_H + bh % RP_H) * RP_DH + i;
#else
    IDX xo = o;
#endif
    float x1 = X0(xo), x2 = X0(xo + RP_HALF);
    Y(o) = x1 * c - x2 * s;
    Y(o + RP_HALF) = x2 * c + x1 * s;
}
