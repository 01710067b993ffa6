// maxpool2d.glsl - y[p, oh, ow] = max over the window of plane p of x; one
// invocation per output element.
//
// Exactly the CPU reference: windows are scanned in row-major order and a
// value replaces the best only if it is larger, or a NaN over a non-NaN
// (so the first maximum wins and a NaN sticks); padded cells are skipped,
// never compared; a window wholly in the padding gives -inf.
// Defines: MP_H, MP_W (input plane), MP_OH, MP_OW, MP_KH, MP_KW, MP_SH,
// MP_SW, MP_PH, MP_PW. Does not: keep the argmax (the backward recomputes it).

bool mp_beats(float v, float best) { return v > best || (isnan(v) && !isnan(best)); }

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    IDX ow = i % MP_OW, t = i / MP_OW;
    IDX oh = t % MP_OH, p = t / MP_OH;
    IDX base = p * (MP_H * MP_W);
    bool found = false;
    float best = uintBitsToFloat(0xff800000u); // -inf
    for (SIDX a = 0; a < MP_KH; a++) {
        SIDX ih = SIDX(oh) * MP_SH - MP_PH + a;
        if (ih < 0 || ih >= MP_H) continue;
        for (SIDX b = 0; b < MP_KW; b++) {
            SIDX iw = SIDX(ow) * MP_SW - MP_PW + b;
            if (iw < 0 || iw >= MP_W) continue;
            float v = X0(base + IDX(ih * MP_W + iw));
            if (!found || mp_beats(v, best)) {
                best = v;
                found = true;
            }
        }
    }
    Y(i) = best;
}
