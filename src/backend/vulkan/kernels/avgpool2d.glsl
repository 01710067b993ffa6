// avgpool2d.glsl - average pooling over NCHW planes and its exact gradient,
// like the CPU reference (kernels_layout.h):
//   forward (AP_BWD 0): one invocation per output element, the window's cells
//     inside x summed in row-major order, divided by the window's divisor;
//   backward (AP_BWD 1): one invocation per INPUT element, a gather over the
//     windows that hold it in increasing (oh, ow), each dy over its divisor
//     (no two invocations write one element: no atomics).
// The CPU sums in double, this kernel in float: results agree to rounding.
// Divisor (AP_DIV): 0 = cells of the window inside x, 1 = the window clipped
// to the padded plane (PyTorch's count_include_pad), 2 = 1 (sum pooling).
// Defines (int): AP_H, AP_W (input plane), AP_OH, AP_OW (output plane),
// AP_KH, AP_KW, AP_SH, AP_SW, AP_PH, AP_PW, AP_DIV, AP_BWD.
// Inputs: X0 = x (forward) or dy (backward).

float ap_div(SIDX oh, SIDX ow) {
    SIDX hs = oh * AP_SH - AP_PH, ws = ow * AP_SW - AP_PW;
    SIDX he = hs + AP_KH, we = ws + AP_KW;
#if AP_DIV == 2
    return 1.0;
#elif AP_DIV == 1
    return float((min(he, AP_H + AP_PH) - hs) * (min(we, AP_W + AP_PW) - ws));
#else
    return float((min(he, AP_H) - max(hs, 0)) * (min(we, AP_W) - max(ws, 0)));
#endif
}

// Output positions o in [lo, hi] whose window [o*s - p, o*s - p + k) holds i.
void ap_range(SIDX i, SIDX s, SIDX pad, SIDX k, SIDX osz, out SIDX lo, out SIDX hi) {
    SIDX first = i + pad - k + 1; // o*s >= first
    lo = first <= 0 ? 0 : (first + s - 1) / s;
    hi = min((i + pad) / s, osz - 1);
}

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    SIDX r = SIDX(i);
#if AP_BWD == 0
    SIDX ow = r % AP_OW, oh = (r / AP_OW) % AP_OH, p = r / (AP_OW * AP_OH);
    SIDX base = p * (AP_H * AP_W);
    SIDX hs = oh * AP_SH - AP_PH, ws = ow * AP_SW - AP_PW;
    SIDX h1 = min(hs + AP_KH, AP_H), w1 = min(ws + AP_KW, AP_W);
    float s = 0.0;
    for (SIDX ih = max(hs, 0); ih < h1; ih++)
        for (SIDX iw = max(ws, 0); iw < w1; iw++) s += X0(base + ih * AP_W + iw);
    Y(i) = s / ap_div(oh, ow);
#else
    SIDX iw = r % AP_W, ih = (r / AP_W) % AP_H, p = r / (AP_W * AP_H);
    SIDX dbase = p * (AP_OH * AP_OW);
    SIDX oh0, oh1, ow0, ow1;
    ap_range(ih, AP_SH, AP_PH, AP_KH, AP_OH, oh0, oh1);
    ap_range(iw, AP_SW, AP_PW, AP_KW, AP_OW, ow0, ow1);
    float s = 0.0;
    for (SIDX oh = oh0; oh <= oh1; oh++)
        for (SIDX ow = ow0; ow <= ow1; ow++) s += X0(dbase + oh * AP_OW + ow) / ap_div(oh, ow);
    Y(i) = s;
#endif
}
