// attention_prep.glsl - the per-row inputs of the attention backward:
// y[r] = (lse[r], delta[r] = sum_d dout[r, d] * out[r, d]), one invocation
// per query row. delta is a double-f32 (hi, lo) sum of exact products, close
// to the CPU's double sum: each product is split exactly (Dekker: the
// factors cut into 12-bit halves by masking, so no fma is needed, whose
// fusion drivers do not guarantee) and added with Knuth's TwoSum.
// Inputs: X0 = out [rows, D], X1 = dout [rows, D], X2 = lse [rows].
// Defines: AP_D, AP_ROWS.
// Does not: look at q, k or v.

// a * b == p + e exactly (barring overflow and underflow).
void two_prod(float a, float b, out float p, out float e) {
    precise float ah = uintBitsToFloat(floatBitsToUint(a) & 0xfffff000u), al = a - ah;
    precise float bh = uintBitsToFloat(floatBitsToUint(b) & 0xfffff000u), bl = b - bh;
    precise float pp = a * b;
    precise float ee = ((ah * bh - pp) + ah * bl + al * bh) + al * bl;
    p = pp;
    e = ee;
}

void main() {
    IDX r = GID;
    if (r >= AP_ROWS) return;
    precise float hi = 0.0, lo = 0.0;
    for (uint d = 0u; d < AP_D; d++) {
        float p, pe;
        two_prod(X0(r * AP_D + d), X1(r * AP_D + d), p, pe);
        precise float s = hi + p;
        precise float bb = s - hi;
        precise float e = (hi - (s - bb)) + (p - bb);
        hi = s;
        lo += e + pe;
    }
    Y(2u * r) = X2(r);
    Y(2u * r + 1u) = hi + lo;
}
