// preprocess.comp - the host's own "render" pass of examples/host_app.c:
// turns a frame of 8-bit MNIST images (four pixels a uint) into the model's
// f32 input, x = pixel / 255, written straight into the buffer bound to the
// session's input "x".
#version 450
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Pixels { uint px[]; };
layout(std430, binding = 1) writeonly buffer Input { float x[]; };
layout(push_constant) uniform Frame { uint first; uint count; } pc; // in pixels
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.count) return;
    uint p = pc.first + i;
    x[i] = float((px[p >> 2] >> (8u * (p & 3u))) & 255u) / 255.0;
}
