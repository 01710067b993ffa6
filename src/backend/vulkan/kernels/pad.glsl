// pad.glsl - zero padding and slicing (SLICE, PAD), one invocation per output
// element: y[c] = x[c - PB] when every coordinate of c - PB lies inside x,
// else 0, over the right-aligned 4-d dims. A slice is the same with
// PB = -start on its axis (always inside). Exact copies, in any order.
// Defines: YD1..YD3 (output dims 1..3), XD0..XD3 (input dims), PB0..PB3
// (cells before each axis, negative for a slice); all int.
// Does not: read outside x (the bounds test comes first).

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    SIDX r = SIDX(i);
    SIDX c3 = r % YD3, c2 = (r / YD3) % YD2, c1 = (r / (YD3 * YD2)) % YD1, c0 = r / (YD3 * YD2 * YD1);
    SIDX s0 = c0 - PB0, s1 = c1 - PB1, s2 = c2 - PB2, s3 = c3 - PB3;
    float v = 0.0;
    if (s0 >= 0 && s0 < XD0 && s1 >= 0 && s1 < XD1 && s2 >= 0 && s2 < XD2 && s3 >= 0 && s3 < XD3)
        v = X0(((s0 * XD1 + s1) * XD2 + s2) * XD3 + s3);
    Y(i) = v;
}
