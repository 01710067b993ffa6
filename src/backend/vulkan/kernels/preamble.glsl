// preamble.glsl - prepended to every generated kernel (see vk_codegen.h).
#version 450
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = LOCAL_X, local_size_y = LOCAL_Y, local_size_z = LOCAL_Z) in;

// One storage buffer per operand, bound by the runtime to exactly the
// tensor's bytes: binding 0 = the output Y, binding 1 + i = input i
// (declared when the node has input i). Xi_ACCESS (vk_codegen.c) is
// `readonly` except for inputs the kernel updates in place.
layout(std430, set = 0, binding = 0) buffer BufY { float d[]; } bY;
#ifdef X0_ACCESS
layout(std430, set = 0, binding = 1) X0_ACCESS buffer BufX0 { float d[]; } bX0;
#endif
#ifdef X1_ACCESS
layout(std430, set = 0, binding = 2) X1_ACCESS buffer BufX1 { float d[]; } bX1;
#endif
#ifdef X2_ACCESS
layout(std430, set = 0, binding = 3) X2_ACCESS buffer BufX2 { float d[]; } bX2;
#endif
#ifdef X3_ACCESS
layout(std430, set = 0, binding = 4) X3_ACCESS buffer BufX3 { float d[]; } bX3;
#endif
#ifdef X4_ACCESS
layout(std430, set = 0, binding = 5) X4_ACCESS buffer BufX4 { float d[]; } bX4;
#endif
#ifdef X5_ACCESS
layout(std430, set = 0, binding = 6) X5_ACCESS buffer BufX5 { float d[]; } bX5;
#endif

// off[0]: output, off[1 + i]: input i; in 4-byte elements from the start of
// the operand's binding (0 unless its offset is not a multiple of
// minStorageBufferOffsetAlignment).
layout(push_constant) uniform PushConstants { uint off[8]; } pc;

#define Y(i) bY.d[pc.off[0] + uint(i)]
#define X0(i) bX0.d[pc.off[1] + uint(i)]
#define X1(i) bX1.d[pc.off[2] + uint(i)]
#define X2(i) bX2.d[pc.off[3] + uint(i)]
#define X3(i) bX3.d[pc.off[4] + uint(i)]
#define X4(i) bX4.d[pc.off[5] + uint(i)]
#define X5(i) bX5.d[pc.off[6] + uint(i)]
#define X0I(i) floatBitsToInt(X0(i))
#define X1I(i) floatBitsToInt(X1(i))

#define GID (gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x))
