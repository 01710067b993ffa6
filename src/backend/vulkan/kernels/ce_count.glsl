// ce_count.glsl - labels i32 [X0_N] -> f32 scalar: how many differ from
// CE_IGNORE_INDEX (the rows cross_entropy with ignore_index averages over).
//
// One workgroup (LOCAL_X a power of two): invocation t counts labels t,
// t + LOCAL_X, ...; a tree sum of uint counts in shared memory (exact);
// invocation 0 writes float(count).
//
// Defines from vk_gen_pointwise_param.c: CE_IGNORE_INDEX (int literal).
//
// Does not: check the labels' range (cross_entropy does).

shared uint sh_c[LOCAL_X];

void main() {
    uint t = gl_LocalInvocationID.x;
    uint cnt = 0u;
    for (IDX j = t; j < X0_N; j += LOCAL_X) cnt += X0I(j) != CE_IGNORE_INDEX ? 1u : 0u;
    sh_c[t] = cnt;
    memoryBarrierShared();
    barrier();
    for (uint h = LOCAL_X / 2u; h > 0u; h >>= 1u) {
        if (t < h) sh_c[t] += sh_c[t + h];
        memoryBarrierShared();
        barrier();
    }
    if (t == 0u) Y(0) = float(sh_c[0]);
}
