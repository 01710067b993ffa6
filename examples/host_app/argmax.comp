// argmax.comp - the host's own "consume" pass of examples/host_app.c: reads
// the logits the model wrote into the host's buffer and writes each row's
// class (the highest logit, the lowest index on ties).
#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Logits { float l[]; };
layout(std430, binding = 1) writeonly buffer Classes { int cls[]; };
layout(push_constant) uniform Rows { uint rows; } pc;
void main() {
    uint r = gl_GlobalInvocationID.x;
    if (r >= pc.rows) return;
    int best = 0;
    for (int c = 1; c < 10; c++)
        if (l[r * 10u + uint(c)] > l[r * 10u + uint(best)]) best = c;
    cls[r] = best;
}
