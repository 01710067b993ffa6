// embedding_bwd.glsl - the table gradient of an embedding without atomics:
// one workgroup per table row v (workgroup index over a 2-D grid, TR_NWG =
// V). The workgroup walks the ids in chunks of LOCAL_X, marks the positions
// holding v in shared memory, and every invocation adds those dy rows for
// its columns d = t, t + LOCAL_X, ... in position order, the CPU
// reference's order, so the sums match it exactly. Out-of-range ids match no
// row.
// Loop iterations (the driver's loop limit): the walk over the chunks, and
// per chunk LOCAL_X / EB_UNROLL runs of unrolled positions (an invocation's
// columns unrolled too); the generator checks the count.
// Inputs: X0 = ids (i32) [N], X1 = dy [N, D]. Defines: EB_V, EB_D, EB_N,
// EB_PER (columns per invocation), EB_UNROLL (divides LOCAL_X), TR_NWG.
// Does not: sort, scatter or touch another row's gradient.

shared uint sh_hit[LOCAL_X];

void main() {
    uint v = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (v >= TR_NWG) return; // uniform over the workgroup
    uint t = gl_LocalInvocationID.x;
    float acc[EB_PER];
    [[unroll]] for (uint e = 0u; e < EB_PER; e++) acc[e] = 0.0;
    for (IDX base = 0u; base < EB_N; base += LOCAL_X) {
        IDX p = base + t;
        sh_hit[t] = (p < EB_N && X0I(p) == int(v)) ? 1u : 0u;
        memoryBarrierShared();
        barrier();
        // positions past EB_N were marked 0
        for (uint u0 = 0u; u0 < uint(LOCAL_X); u0 += EB_UNROLL) {
            [[unroll]] for (uint uu = 0u; uu < EB_UNROLL; uu++) {
                uint u = u0 + uu;
                if (sh_hit[u] != 0u) {
                    IDX row = (base + u) * EB_D;
                    [[unroll]] for (uint e = 0u; e < EB_PER; e++) {
                        uint d = t + e * LOCAL_X;
                        if (d < EB_D) acc[e] += X1(row + d);
                    }
                }
            }
        }
        barrier(); // sh_hit is rewritten by the next chunk
    }
    [[unroll]] for (uint e = 0u; e < EB_PER; e++) {
        uint d = t + e * LOCAL_X;
        if (d < EB_D) Y(IDX(v) * EB_D + d) = acc[e];
    }
}
