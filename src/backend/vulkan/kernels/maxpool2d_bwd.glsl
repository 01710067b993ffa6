// maxpool2d_bwd.glsl - dx[p, ih, iw] = sum of dy[p, oh, ow] over the windows
// whose first maximum (as maxpool2d.glsl picks it) is (ih, iw).
//
// One invocation per INPUT element gathers over the windows that contain it
// and recomputes each window's argmax, so no two invocations write the same
// element (no atomics). Windows are visited in increasing (oh, ow) order
// from 0.0, the order in which the CPU reference accumulates: bit-identical.
// Inputs: X0 = x [N,C,H,W], X1 = dy [N,C,OH,OW]; defines as maxpool2d.glsl.
// Does not: read y (the argmax comes from x alone).

bool mp_beats(float v, float best) { return v > best || (isnan(v) && !isnan(best)); }

// Row-major index (ih*W + iw) of the first maximum of window (oh, ow), or -1.
SIDX mp_arg(IDX base, SIDX oh, SIDX ow) {
    SIDX arg = -1;
    float best = 0.0;
    for (SIDX a = 0; a < MP_KH; a++) {
        SIDX ih = oh * MP_SH - MP_PH + a;
        if (ih < 0 || ih >= MP_H) continue;
        for (SIDX b = 0; b < MP_KW; b++) {
            SIDX iw = ow * MP_SW - MP_PW + b;
            if (iw < 0 || iw >= MP_W) continue;
            float v = X0(base + IDX(ih * MP_W + iw));
            if (arg < 0 || mp_beats(v, best)) {
                best = v;
                arg = ih * MP_W + iw;
            }
        }
    }
    return arg;
}

// Output positions o whose window [o*s - p, o*s - p + k) holds position i.
void mp_range(SIDX i, SIDX s, SIDX pad, SIDX k, SIDX osz, out SIDX lo, out SIDX hi) {
    SIDX first = i + pad - k + 1; // o*s >= first
    lo = first <= 0 ? 0 : (first + s - 1) / s;
    hi = min((i + pad) / s, osz - 1);
}

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    SIDX iw = SIDX(i % MP_W), ih = SIDX((i / MP_W) % MP_H);
    IDX p = i / (MP_H * MP_W);
    IDX base = p * (MP_H * MP_W), dbase = p * (MP_OH * MP_OW);
    SIDX me = ih * MP_W + iw;
    SIDX oh0, oh1, ow0, ow1;
    mp_range(ih, MP_SH, MP_PH, MP_KH, MP_OH, oh0, oh1);
    mp_range(iw, MP_SW, MP_PW, MP_KW, MP_OW, ow0, ow1);
    float s = 0.0;
    for (SIDX oh = oh0; oh <= oh1; oh++)
        for (SIDX ow = ow0; ow <= ow1; ow++)
            if (mp_arg(base, oh, ow) == me) s += X1(dbase + IDX(oh * MP_OW + ow));
    Y(i) = s;
}
