// kv_append.glsl - writes x [L, Tnew, D] into the cache [L, Tmax, D] at
// rows pos + t, in place: the node's storage is the cache's (Y is the
// cache). One invocation per element of x; rows outside [0, Tmax) are
// dropped, so nothing is written out of bounds.
// Inputs: X0 = cache (not read: Y aliases it), X1 = x, X2 = pos (i32 [1]).
// KV_SRC_BTHD: x is [B, KV_H, Tnew, D] and X1 the [B, Tnew, KV_H, D]
// tensor it permutes (a folded permute, kir.h KIR_HEADS_IN).
// Defines: KV_TMAX, KV_TNEW, KV_D, KV_POS, KV_SRC_BTHD, KV_H.
// Does not: touch any other row of the cache.

void main() {
    IDX i = GID;
    if (i >= X1_N) return;
    IDX d = i % KV_D, t = (i / KV_D) % KV_TNEW, l = i / (KV_D * KV_TNEW);
    int row = clamp(KV_POS, -(1 << 29), 1 << 29) + int(t);
    if (row < 0 || row >= KV_TMAX) return;
#if KV_SRC_BTHD
    IDX xi = ((l / KV_H * KV_TNEW + t) * KV_H + l % KV_H) * KV_D + d;
#else
    IDX xi = i;
#endif
    Y((l * IDX(KV_TMAX) + IDX(row)) * KV_D + d) = X1(xi);
}
