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
int mp_arg(uint base, int oh, int ow) {
    int arg = -1;
    float best = 0.0;
    for (int a = 0; a < MP_KH; a++) {
        int ih = oh * MP_SH - MP_PH + a;
        if (ih < 0 || ih >= MP_H) continue;
        for (int b = 0; b < MP_KW; b++) {
            int iw = ow * MP_SW - MP_PW + b;
            if (iw < 0 || iw >= MP_W) continue;
            float v = X0(base + uint(ih * MP_W + iw));
            if (arg < 0 || mp_beats(v, best)) {
                best = v;
                arg = ih * MP_W + iw;
            }
        }
    }
    return arg;
}

// Output positions o whose window [o*s - p, o*s - p + k) holds position i.
void mp_range(int i, int s, int pad, int k, int osz, out int lo, out int hi) {
    int first = i + pad - k + 1; // o*s >= first
    lo = first <= 0 ? 0 : (first + s - 1) / s;
    hi = min((i + pad) / s, osz - 1);
}

void main() {
    uint i = GID;
    if (i >= Y_N) return;
    int iw = int(i % MP_W), ih = int((i / MP_W) % MP_H);
    uint p = i / (MP_H * MP_W);
    uint base = p * (MP_H * MP_W), dbase = p * (MP_OH * MP_OW);
    int me = ih * MP_W + iw;
    int oh0, oh1, ow0, ow1;
    mp_range(ih, MP_SH, MP_PH, MP_KH, MP_OH, oh0, oh1);
    mp_range(iw, MP_SW, MP_PW, MP_KW, MP_OW, ow0, ow1);
    float s = 0.0;
    for (int oh = oh0; oh <= oh1; oh++)
        for (int ow = ow0; ow <= ow1; ow++)
            if (mp_arg(base, oh, ow) == me) s += X1(dbase + uint(oh * MP_OW + ow));
    Y(i) = s;
}
