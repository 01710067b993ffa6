// ema_update.glsl - the running-statistics update of batch norm, in place
// (Y is the storage of X0, a parameter): one invocation per element,
// y = EMA_KEEP * x0 + EMA_M * (EMA_SC * x1), the CPU's operations in the
// CPU's order, each rounded to f32 (precise: no fused multiply-add).
// Defines: EMA_KEEP (1 - momentum), EMA_M (momentum), EMA_SC (the value's
// scale: 1, or n/(n-1) for an unbiased variance), float literals;
// EMA_GATED: 1 when X2 is a step_gate, whose element 1, if not 0, means a
// skipped step: nothing is written.

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
#if EMA_GATED
    if (X2(1) != 0.0) return;
#endif
    precise float t = EMA_SC * X1(i);
    precise float v = EMA_KEEP * X0(i) + EMA_M * t;
    Y(i) = v;
}
