// concat.glsl - CONCAT of 2..6 inputs, one invocation per output element
// (a gather: the element picks its source). The output is viewed as
// [outer, CC_L, CC_INNER] around the axis; CC_VALUE(o, a, j), generated,
// reads position a of the axis from the input whose range holds it (a chain
// of ?: so only that input is read). Exact copies.
// Defines: CC_L, CC_INNER (int), CC_VALUE(o, a, j).

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    SIDX r = SIDX(i);
    SIDX j = r % CC_INNER, a = (r / CC_INNER) % CC_L, o = r / (CC_INNER * CC_L);
    Y(i) = CC_VALUE(o, a, j);
}
