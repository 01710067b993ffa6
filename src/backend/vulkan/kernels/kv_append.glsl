// kv_append.glsl - writes x [L, Tnew, D] into the cache [L, Tmax, D] at
// rows pos + t, in place: the node's storage is the cache's (Y is the
// cache). One invocation per element of x; rows outside [0, Tmax) are
// dropped, so nothing is written out of bounds.
// Inputs: X0 = cache (not read: Y aliases it), X1 = x, X2 = pos (i32 [1]).
// Defines: KV_TMAX, KV_TNEW, KV_D, KV_POS.
// Does not: touch any other row of the cache.

void main() {
    IDX i = GID;
    if (i >= X1_N) return;
    IDX d = i % KV_D, t = (i / KV_D) % KV_TNEW, l = i / (KV_D * KV_TNEW);
    int row = clamp(KV_POS, -(1 << 29), 1 << 29) + int(t);
    if (row < 0 || row >= KV_TMAX) return;
    Y((l * IDX(KV_TMAX) + IDX(row)) * KV_D + d) = X1(i);
}
