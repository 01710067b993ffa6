// cast16.glsl - a cast to bf16 / f16 stored packed (NODE_F_PACK16; Y_P16 =
// 1 bf16, 2 f16): invocation w rounds elements 2w and 2w + 1 of X0 (the
// contiguous f32 input; a cast keeps its shape) and writes them as word w
// of Y, the even element in the low half, 0 in the high half past an odd
// count. The rounding is mathlib's (core/round16.h's bits), so unpacking
// gives the values the f32-container cast holds (vkgen_cast).
//
// Does not: run in place (the words are half the input's), fuse.

void main() {
    IDX w = GID;
    if (w >= (Y_N + 1u) / 2u) return;
    IDX i = 2u * w;
#if Y_P16 == 1
    uint lo = mn_bf16_bits(X0(i)), hi = i + 1u < Y_N ? mn_bf16_bits(X0(i + 1u)) : 0u;
#else
    uint lo = mn_f16_bits(X0(i)), hi = i + 1u < Y_N ? mn_f16_bits(X0(i + 1u)) : 0u;
#endif
    Y_WORD(w) = lo | (hi << 16);
}
