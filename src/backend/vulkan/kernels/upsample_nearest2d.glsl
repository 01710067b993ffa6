// upsample_nearest2d.glsl - nearest-neighbour upsampling of NCHW planes, one
// invocation per output element: y[p, h, w] = x[p, h / UP_SH, w / UP_SW].
// Exact copies. Defines (int): UP_H, UP_W (input plane), UP_OH, UP_OW
// (output plane), UP_SH, UP_SW (scales). Its gradient is avgpool2d.glsl in
// sum mode.

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
    SIDX r = SIDX(i);
    SIDX w = r % UP_OW, h = (r / UP_OW) % UP_OH, p = r / (UP_OW * UP_OH);
    Y(i) = X0(p * (UP_H * UP_W) + (h / UP_SH) * UP_W + w / UP_SW);
}
