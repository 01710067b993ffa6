// preamble.glsl - prepended to every generated kernel (see vk_codegen.h).
#version 450
#extension GL_EXT_control_flow_attributes : enable
#ifdef MN_NONUNIFORM
#extension GL_EXT_nonuniform_qualifier : require
#endif
// MN_IDX64: GL_EXT_shader_explicit_arithmetic_types_int64 is enabled right
// after #version (vk_codegen_source), before the defines' 64-bit literals.
#ifdef Y_S16
#extension GL_EXT_shader_16bit_storage : require
#endif
#ifdef MN_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x = LOCAL_X, local_size_y = LOCAL_Y, local_size_z = LOCAL_Z) in;

// Element indices and offsets: IDX (unsigned) and SIDX (signed) are uint
// and int, or uint64_t and int64_t in a kernel with an operand of more than
// vk_caps.index_max elements (MN_IDX64, vk_codegen.c). The generator writes
// sizes, strides and dimensions as literals of the same width (123u /
// 123ul, 123 / 123l), so their products do not wrap either. MN_IDX_NONE: an
// index no element has. Without MN_IDX64 a kernel compiles as before: no
// 64-bit arithmetic. Rule for templates: under MN_IDX64 never compare (<,
// <=, >, >=) a signed 64-bit value made by sign-extending a 32-bit int
// (an int loop counter or id against a 64-bit define, SIDX(int) * c < d):
// lavapipe of Debian 12 (Mesa 22.3) gets such comparisons wrong (measured:
// int64_t(3) < 7l is false). Loop counters compared with SIDX bounds are
// SIDX; ints compared with ints stay int.
#ifdef MN_IDX64
#define IDX uint64_t
#define SIDX int64_t
#define MN_IDX_NONE 0xfffffffffffffffful
#else
#define IDX uint
#define SIDX int
#define MN_IDX_NONE 0xffffffffu
#endif

// One storage buffer per operand, bound by the runtime to exactly the
// tensor's bytes: binding 0 = the output Y, binding 1 + i = input i
// (declared when the node has input i). Xi_ACCESS (vk_codegen.c) is
// `readonly` except for inputs the kernel updates in place.
//
// A paged operand (a tensor larger than one binding: vk_codegen.c defines
// <op>_PAGES and <op>_SHIFT) is an array of <op>_PAGES bindings, page p
// holding elements [p << SHIFT, (p + 1) << SHIFT), each from its binding's
// start (its pc.off is 0). Element i is page i >> SHIFT, index
// i & ((1 << SHIFT) - 1). With MN_NONUNIFORM (the device indexes
// descriptor arrays non-uniformly) the page is a nonuniformEXT index; else
// every access visits the pages in a loop whose counter is the same in all
// invocations (dynamically uniform) and touches the one that holds i.
// Kernels whose operands all fit one binding compile exactly as before.
// With MN_IDX64 the page i >> SHIFT is taken from the 64-bit index; the
// index within a page (below 2^30) stays 32-bit, as does every binding's.
//
// A packed operand (NODE_F_PACK16, <op>_P16 = 1 for bf16, 2 for f16: two
// 16-bit values a 32-bit word, element i in word i / 2, the low half for
// even i) is bound as words: X<i>(i) decodes element i to its exact f32
// value (mn_unpack16, mathlib.glsl), Y_WORD(w) is word w of a packed
// output (cast16.glsl). A fused kernel whose root is a packed cast
// (kir_options.fuse_store16; Y_S16 = 1 bf16, 2 f16) binds Y as 16-bit
// values instead, the same bytes: Y_SET16(i, v) rounds v and stores
// element i (storageBuffer16BitAccess, vk_caps.store16). Never paged.
#ifdef Y_S16
layout(std430, set = 0, binding = 0) buffer BufY { uint16_t d[]; } bY;
#elif defined(Y_P16)
layout(std430, set = 0, binding = 0) buffer BufY { uint d[]; } bY;
#elif defined(Y_PAGES)
layout(std430, set = 0, binding = 0) buffer BufY { float d[]; } bY[Y_PAGES];
#else
layout(std430, set = 0, binding = 0) buffer BufY { float d[]; } bY;
#endif
#ifdef X0_ACCESS
#ifdef X0_P16
layout(std430, set = 0, binding = 1) X0_ACCESS buffer BufX0 { uint d[]; } bX0;
#elif defined(X0_PAGES)
layout(std430, set = 0, binding = 1) X0_ACCESS buffer BufX0 { float d[]; } bX0[X0_PAGES];
#else
layout(std430, set = 0, binding = 1) X0_ACCESS buffer BufX0 { float d[]; } bX0;
#endif
#endif
#ifdef X1_ACCESS
#ifdef X1_P16
layout(std430, set = 0, binding = 2) X1_ACCESS buffer BufX1 { uint d[]; } bX1;
#elif defined(X1_PAGES)
layout(std430, set = 0, binding = 2) X1_ACCESS buffer BufX1 { float d[]; } bX1[X1_PAGES];
#else
layout(std430, set = 0, binding = 2) X1_ACCESS buffer BufX1 { float d[]; } bX1;
#endif
#endif
#ifdef X2_ACCESS
#ifdef X2_P16
layout(std430, set = 0, binding = 3) X2_ACCESS buffer BufX2 { uint d[]; } bX2;
#elif defined(X2_PAGES)
layout(std430, set = 0, binding = 3) X2_ACCESS buffer BufX2 { float d[]; } bX2[X2_PAGES];
#else
layout(std430, set = 0, binding = 3) X2_ACCESS buffer BufX2 { float d[]; } bX2;
#endif
#endif
#ifdef X3_ACCESS
#ifdef X3_P16
layout(std430, set = 0, binding = 4) X3_ACCESS buffer BufX3 { uint d[]; } bX3;
#elif defined(X3_PAGES)
layout(std430, set = 0, binding = 4) X3_ACCESS buffer BufX3 { float d[]; } bX3[X3_PAGES];
#else
layout(std430, set = 0, binding = 4) X3_ACCESS buffer BufX3 { float d[]; } bX3;
#endif
#endif
#ifdef X4_ACCESS
#ifdef X4_P16
layout(std430, set = 0, binding = 5) X4_ACCESS buffer BufX4 { uint d[]; } bX4;
#elif defined(X4_PAGES)
layout(std430, set = 0, binding = 5) X4_ACCESS buffer BufX4 { float d[]; } bX4[X4_PAGES];
#else
layout(std430, set = 0, binding = 5) X4_ACCESS buffer BufX4 { float d[]; } bX4;
#endif
#endif
#ifdef X5_ACCESS
#ifdef X5_P16
layout(std430, set = 0, binding = 6) X5_ACCESS buffer BufX5 { uint d[]; } bX5;
#elif defined(X5_PAGES)
layout(std430, set = 0, binding = 6) X5_ACCESS buffer BufX5 { float d[]; } bX5[X5_PAGES];
#else
layout(std430, set = 0, binding = 6) X5_ACCESS buffer BufX5 { float d[]; } bX5;
#endif
#endif

// off[0]: output, off[1 + i]: input i; in 4-byte elements from the start of
// the operand's binding (0 unless its offset is not a multiple of
// minStorageBufferOffsetAlignment; 0 for a paged operand).
// dim[0..3]: sizes of a size-generic kernel (vk_hoist_sizes: `#define Y_N
// pc.dim[0]` instead of a literal), so that one pipeline serves every node
// whose kernel differs only in them; unused otherwise.
layout(push_constant) uniform PushConstants { uint off[8]; uint dim[4]; } pc;

#define MN_PG_MASK(S) ((1u << (S)) - 1u)
#ifndef MN_IDX64
#ifdef MN_NONUNIFORM
// an element of a paged operand, an lvalue
#define MN_PG_AT(B, S, i) B[nonuniformEXT(uint(i) >> (S))].d[uint(i) & MN_PG_MASK(S)]
#define MN_PG_RD(B, S, P, i) MN_PG_AT(B, S, i)
#define MN_PG_WR(B, S, P, i) MN_PG_AT(B, S, i)
#else
// reads: a function per operand (MN_PG_READER); writes: a statement prefix,
// `Y(i) = v;` becomes a loop over the pages whose body stores v into the
// page holding i (`if (k != page) {} else ...` so a following `else` stays
// the template's)
#define MN_PG_READER(NAME, B, S, P) \
    float NAME(uint i) { \
        float v = 0.0; \
        [[unroll]] for (uint k = 0u; k < uint(P); k++) \
            if (k == (i >> (S))) v = B[k].d[i & MN_PG_MASK(S)]; \
        return v; \
    }
#define MN_PG_WR(B, S, P, i) \
    [[unroll]] for (uint mn_pk = 0u, mn_pi = uint(i); mn_pk < uint(P); mn_pk++) \
        if (mn_pk != (mn_pi >> (S))) {} else B[mn_pk].d[mn_pi & MN_PG_MASK(S)]
#endif
#else // MN_IDX64: the same with the page from a 64-bit index
#ifdef MN_NONUNIFORM
#define MN_PG_AT(B, S, i) B[nonuniformEXT(uint(uint64_t(i) >> (S)))].d[uint(i) & MN_PG_MASK(S)]
#define MN_PG_RD(B, S, P, i) MN_PG_AT(B, S, i)
#define MN_PG_WR(B, S, P, i) MN_PG_AT(B, S, i)
#else
#define MN_PG_READER(NAME, B, S, P) \
    float NAME(uint64_t i) { \
        float v = 0.0; \
        uint pg = uint(i >> (S)), at = uint(i) & MN_PG_MASK(S); \
        [[unroll]] for (uint k = 0u; k < uint(P); k++) \
            if (k == pg) v = B[k].d[at]; \
        return v; \
    }
#define MN_PG_WR(B, S, P, i) \
    [[unroll]] for (uint mn_pk = 0u, mn_pp = uint(uint64_t(i) >> (S)), mn_pi = uint(i) & MN_PG_MASK(S); \
                    mn_pk < uint(P); mn_pk++) \
        if (mn_pk != mn_pp) {} else B[mn_pk].d[mn_pi]
#endif
#endif

// Y(i) = v writes the output (Y is write-only: a paged Y without
// MN_NONUNIFORM is a statement prefix, not an expression); X0(i) .. X5(i)
// read input i; X2_WR(i) = v, X3_WR(i) = v write an input updated in place.
#ifdef Y_S16
#if Y_S16 == 1
#define Y_SET16(i, v) bY.d[2u * pc.off[0] + uint(i)] = uint16_t(mn_bf16_bits(v))
#else
#define Y_SET16(i, v) bY.d[2u * pc.off[0] + uint(i)] = uint16_t(mn_f16_bits(v))
#endif
#elif defined(Y_P16)
#define Y_WORD(w) bY.d[pc.off[0] + uint(w)]
#elif !defined(Y_PAGES)
#define Y(i) bY.d[pc.off[0] + uint(i)]
#else
#define Y(i) MN_PG_WR(bY, Y_SHIFT, Y_PAGES, i)
#endif
#ifdef X0_ACCESS
#ifdef X0_P16
#define X0(i) mn_unpack16(bX0.d[pc.off[1] + (uint(i) >> 1)], uint(i), X0_P16)
#elif !defined(X0_PAGES)
#define X0(i) bX0.d[pc.off[1] + uint(i)]
#define X0_WR(i) X0(i)
#else
#ifndef MN_NONUNIFORM
MN_PG_READER(mn_rd_X0, bX0, X0_SHIFT, X0_PAGES)
#define X0(i) mn_rd_X0(IDX(i))
#else
#define X0(i) MN_PG_RD(bX0, X0_SHIFT, X0_PAGES, i)
#endif
#define X0_WR(i) MN_PG_WR(bX0, X0_SHIFT, X0_PAGES, i)
#endif
#endif
#ifdef X1_ACCESS
#ifdef X1_P16
#define X1(i) mn_unpack16(bX1.d[pc.off[2] + (uint(i) >> 1)], uint(i), X1_P16)
#elif !defined(X1_PAGES)
#define X1(i) bX1.d[pc.off[2] + uint(i)]
#define X1_WR(i) X1(i)
#else
#ifndef MN_NONUNIFORM
MN_PG_READER(mn_rd_X1, bX1, X1_SHIFT, X1_PAGES)
#define X1(i) mn_rd_X1(IDX(i))
#else
#define X1(i) MN_PG_RD(bX1, X1_SHIFT, X1_PAGES, i)
#endif
#define X1_WR(i) MN_PG_WR(bX1, X1_SHIFT, X1_PAGES, i)
#endif
#endif
#ifdef X2_ACCESS
#ifdef X2_P16
#define X2(i) mn_unpack16(bX2.d[pc.off[3] + (uint(i) >> 1)], uint(i), X2_P16)
#elif !defined(X2_PAGES)
#define X2(i) bX2.d[pc.off[3] + uint(i)]
#define X2_WR(i) X2(i)
#else
#ifndef MN_NONUNIFORM
MN_PG_READER(mn_rd_X2, bX2, X2_SHIFT, X2_PAGES)
#define X2(i) mn_rd_X2(IDX(i))
#else
#define X2(i) MN_PG_RD(bX2, X2_SHIFT, X2_PAGES, i)
#endif
#define X2_WR(i) MN_PG_WR(bX2, X2_SHIFT, X2_PAGES, i)
#endif
#endif
#ifdef X3_ACCESS
#ifdef X3_P16
#define X3(i) mn_unpack16(bX3.d[pc.off[4] + (uint(i) >> 1)], uint(i), X3_P16)
#elif !defined(X3_PAGES)
#define X3(i) bX3.d[pc.off[4] + uint(i)]
#define X3_WR(i) X3(i)
#else
#ifndef MN_NONUNIFORM
MN_PG_READER(mn_rd_X3, bX3, X3_SHIFT, X3_PAGES)
#define X3(i) mn_rd_X3(IDX(i))
#else
#define X3(i) MN_PG_RD(bX3, X3_SHIFT, X3_PAGES, i)
#endif
#define X3_WR(i) MN_PG_WR(bX3, X3_SHIFT, X3_PAGES, i)
#endif
#endif
#ifdef X4_ACCESS
#ifdef X4_P16
#define X4(i) mn_unpack16(bX4.d[pc.off[5] + (uint(i) >> 1)], uint(i), X4_P16)
#elif !defined(X4_PAGES)
#define X4(i) bX4.d[pc.off[5] + uint(i)]
#define X4_WR(i) X4(i)
#else
#ifndef MN_NONUNIFORM
MN_PG_READER(mn_rd_X4, bX4, X4_SHIFT, X4_PAGES)
#define X4(i) mn_rd_X4(IDX(i))
#else
#define X4(i) MN_PG_RD(bX4, X4_SHIFT, X4_PAGES, i)
#endif
#define X4_WR(i) MN_PG_WR(bX4, X4_SHIFT, X4_PAGES, i)
#endif
#endif
#ifdef X5_ACCESS
#ifdef X5_P16
#define X5(i) mn_unpack16(bX5.d[pc.off[6] + (uint(i) >> 1)], uint(i), X5_P16)
#elif !defined(X5_PAGES)
#define X5(i) bX5.d[pc.off[6] + uint(i)]
#define X5_WR(i) X5(i)
#else
#ifndef MN_NONUNIFORM
MN_PG_READER(mn_rd_X5, bX5, X5_SHIFT, X5_PAGES)
#define X5(i) mn_rd_X5(IDX(i))
#else
#define X5(i) MN_PG_RD(bX5, X5_SHIFT, X5_PAGES, i)
#endif
#define X5_WR(i) MN_PG_WR(bX5, X5_SHIFT, X5_PAGES, i)
#endif
#endif
#define X0I(i) floatBitsToInt(X0(i))
#define X1I(i) floatBitsToInt(X1(i))

#ifndef MN_IDX64
#define GID (gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x))
#else
// from the workgroup ids in 64 bits: gl_GlobalInvocationID.x (and the
// product of the counts) wrap past 2^32 invocations, which a grid of
// 2^24 + 2^16 workgroups of 256 has (the H200 allows 2^31 - 1 in x; found
// by bench_big's eltwise case: elements from 2^32 on were never written)
#define GID ((uint64_t(gl_WorkGroupID.y) * uint64_t(gl_NumWorkGroups.x) + uint64_t(gl_WorkGroupID.x)) * \
                 uint64_t(gl_WorkGroupSize.x) + uint64_t(gl_LocalInvocationID.x))
#endif
