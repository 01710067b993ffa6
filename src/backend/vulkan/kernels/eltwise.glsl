// eltwise.glsl - one invocation per output element: y[i] = EXPR(a, b, c).
//
// Used by every pointwise op (unary, binary with broadcasting, unary_bwd;
// abs, clamp, pow, where, dropout and pw_bwd of vk_gen_pointwise_param.c) and
// by the pure data moves (stop_grad, broadcast, permute), which are gathers
// with EXPR(a, b, c) = (a).
//
// Or, for a fused group of pointwise nodes (vk_gen_fused.c): FUSED_BODY(i)
// computes the whole group per element and writes Y(i).
//
// Defines from vk_gen_pointwise.c / vk_gen_pointwise_param.c:
//   NIN           inputs read (1..3): a = X0, b = X1, c = X2
//   IX0(i)..IX2(i) element of input k read for output element i; strides of
//                 broadcast or permuted inputs are baked into the expression
//   EXPR(a, b, c) the output value
//   dropout only: DROP_KEY (uint key of the seed), DROP_COUNTER (1: X1 is
//   the i32 counter mixed into the key), DROP_ALL (1: p == 1, everything
//   dropped), DROP_THR (drop when the hash is below it), DROP_SCALE
//   (1 / (1 - p) as an f32 literal). mn_pow: C99/libm pow semantics for a
//   constant exponent; pw_mix32/pw_keep: the mask of graph/pointwise.h, bit
//   for bit.
//
// In place (Y aliasing X0, memplan op_inplace): invocation i reads its inputs
// before it writes y[i] and touches no other output element; an input that
// may alias the output always has the output's shape, so IX0(i) == i.
//
// Does not: reduce anything (reduce.glsl), handle int32 arithmetic (int
// tensors only pass through the moves as raw 32-bit words).

// MN_INF, MN_NAN, mn_exp, mn_log and the pointwise functions (mn_sigmoid,
// mn_gelu, mn_pow, pw_mix32, ...) come from mathlib.glsl.

#ifdef DROP_KEY
// counter: the raw 32 bits of the i32 counter input (read through a float).
bool pw_keep(IDX i, float counter) {
#if DROP_ALL
    return false;
#else
#if DROP_COUNTER
    uint key = pw_mix32(DROP_KEY ^ pw_mix32(floatBitsToUint(counter) + 0x632be5abu));
#else
    uint key = DROP_KEY;
#endif
#ifdef MN_IDX64
    return pw_mix32(pw_mix32(key ^ uint(i)) ^ uint(i >> 32)) >= DROP_THR;
#else
    // element indices are below 2^31 here: their high 32 bits are 0
    return pw_mix32(pw_mix32(key ^ i) ^ 0u) >= DROP_THR;
#endif
#endif
}
#endif

void main() {
    IDX i = GID;
    if (i >= Y_N) return;
#ifdef FUSED_BODY
    // a fused pointwise group (vk_gen_fused.c): reads r0.., member values
    // v0.. (precise: no contraction across members, so the result is the
    // unfused kernels' bit for bit), then Y(i)
    FUSED_BODY(i)
#else
    float a = X0(IX0(i));
#if NIN > 1
    float b = X1(IX1(i));
#else
    float b = 0.0;
#endif
#if NIN > 2
    float c = X2(IX2(i));
#else
    float c = 0.0;
#endif
    Y(i) = EXPR(a, b, c);
#endif
}
