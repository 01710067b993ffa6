// preamble.glsl - prepended to every generated kernel (see vk_codegen.h).
#version 450
#extension GL_EXT_control_flow_attributes : enable

layout(local_size_x = LOCAL_X, local_size_y = LOCAL_Y, local_size_z = LOCAL_Z) in;

// The four arenas of the memory plan: param, state, io, work.
layout(std430, set = 0, binding = 0) buffer Arena0 { float d[]; } a0;
layout(std430, set = 0, binding = 1) buffer Arena1 { float d[]; } a1;
layout(std430, set = 0, binding = 2) buffer Arena2 { float d[]; } a2;
layout(std430, set = 0, binding = 3) buffer Arena3 { float d[]; } a3;

// off[0]: output, off[1 + i]: input i; in 4-byte elements.
layout(push_constant) uniform PushConstants { uint off[8]; } pc;

#define Y(i) Y_BUF.d[pc.off[0] + uint(i)]
#define X0(i) X0_BUF.d[pc.off[1] + uint(i)]
#define X1(i) X1_BUF.d[pc.off[2] + uint(i)]
#define X2(i) X2_BUF.d[pc.off[3] + uint(i)]
#define X3(i) X3_BUF.d[pc.off[4] + uint(i)]
#define X4(i) X4_BUF.d[pc.off[5] + uint(i)]
#define X5(i) X5_BUF.d[pc.off[6] + uint(i)]
#define X0I(i) floatBitsToInt(X0(i))
#define X1I(i) floatBitsToInt(X1(i))

#define GID (gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x))
