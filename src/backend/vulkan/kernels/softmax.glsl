// softmax.glsl - last-axis row operations and the softmax-based losses.
//
// x is viewed as [ROWS, NC] (NC = size of the last axis). Row ops write a
// tensor of x's shape: softmax, log_softmax, softmax_bwd, log_softmax_bwd,
// cross_entropy_dense_bwd. The loss cross_entropy_dense writes one scalar
// from a single workgroup. (cross_entropy with class labels: ce.glsl.)
//
// Defines from vk_gen_pointwise.c:
//   SM_OP      one of the SM_* below
//   ROWS, NC   the row view; NC_F = float(NC), ROWS_F = float(ROWS)
//   ROW_COOP   1: a row is handled by a whole workgroup (threads stride over
//                 it, statistics reduced in shared memory);
//              0: a row is handled by one invocation
//   CE_WRT_T   cross_entropy_dense_bwd only: 1 = gradient wrt the targets
//
// Row ops: one workgroup per row (ROW_COOP) or one invocation per row.
// Loss: one workgroup; with ROW_COOP it walks the rows one after another,
// otherwise each invocation takes rows t, t + LOCAL_X, ... and the per-row
// losses are summed in shared memory.
//
// Numerics follow the CPU: the row max (first NaN wins) is subtracted before
// exp, log_softmax is (x - m) - log(s). Sums are f32.
//
// Does not: write any element of another row; every output element is
// written once, after the row's inputs have been read.

#define SM_SOFTMAX 0
#define SM_LOG_SOFTMAX 1
#define SM_SOFTMAX_BWD 2
#define SM_LOG_SOFTMAX_BWD 3
#define SM_CE_DENSE_BWD 5
#define SM_CE_DENSE 7

#define SM_LOSS (SM_OP == SM_CE_DENSE)

// MN_INF, MN_NAN, mn_exp and mn_log come from mathlib.glsl.

bool mn_beats(float v, float best) { return isnan(best) ? false : (isnan(v) || v > best); }

shared float sh_v[LOCAL_X];

// Workgroup sum / max of one value per invocation; every invocation gets the
// result. Must be reached by the whole workgroup (uniform control flow).
float wg_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    sh_v[t] = v;
    memoryBarrierShared();
    barrier();
    for (uint h = LOCAL_X / 2u; h > 0u; h >>= 1u) {
        if (t < h) sh_v[t] += sh_v[t + h];
        memoryBarrierShared();
        barrier();
    }
    float r = sh_v[0];
    barrier(); // sh_v is reused by the next call
    return r;
}

float wg_max(float v) {
    uint t = gl_LocalInvocationID.x;
    sh_v[t] = v;
    memoryBarrierShared();
    barrier();
    for (uint h = LOCAL_X / 2u; h > 0u; h >>= 1u) {
        if (t < h && mn_beats(sh_v[t + h], sh_v[t])) sh_v[t] = sh_v[t + h];
        memoryBarrierShared();
        barrier();
    }
    float r = sh_v[0];
    barrier();
    return r;
}

#if ROW_COOP
#define LANE gl_LocalInvocationID.x
#define STEP LOCAL_X
#define ROW_SUM(v) wg_sum(v)
#define ROW_MAX(v) wg_max(v)
#else
#define LANE 0u
#define STEP 1u
#define ROW_SUM(v) (v)
#define ROW_MAX(v) (v)
#endif

// Row statistics of X0 at [base, base + NC): max, and sum of exp(x - max).
float row_max(IDX base) {
    float m = -MN_INF;
    for (IDX j = LANE; j < NC; j += STEP) {
        float v = X0(base + j);
        if (mn_beats(v, m)) m = v;
    }
    return ROW_MAX(m);
}

float row_sumexp(IDX base, float m) {
    float s = 0.0;
    for (IDX j = LANE; j < NC; j += STEP) s += mn_exp(X0(base + j) - m);
    return ROW_SUM(s);
}

#if SM_LOSS

// Loss term of row b: sum t * log_softmax.
float row_loss(IDX b) {
    IDX base = b * NC;
    float m = row_max(base);
    float ls = mn_log(row_sumexp(base, m));
    float acc = 0.0;
    for (IDX j = LANE; j < NC; j += STEP) acc += X1(base + j) * ((X0(base + j) - m) - ls);
    return ROW_SUM(acc);
}

void main() {
    uint t = gl_LocalInvocationID.x;
    float tot = 0.0;
#if ROW_COOP
    for (IDX b = 0u; b < ROWS; b++) tot += row_loss(b); // same value in every invocation
#else
    for (IDX b = t; b < ROWS; b += LOCAL_X) tot += row_loss(b);
    tot = wg_sum(tot);
#endif
    if (t != 0u) return;
    Y(0) = -tot / ROWS_F;
}

#else // row ops

void row_op(IDX row) {
    IDX base = row * NC;
#if SM_OP == SM_SOFTMAX_BWD
    // (y, dy) -> y * (dy - sum(dy * y))
    float s = 0.0;
    for (IDX j = LANE; j < NC; j += STEP) s += X1(base + j) * X0(base + j);
    s = ROW_SUM(s);
    for (IDX j = LANE; j < NC; j += STEP) {
        float y = X0(base + j), dy = X1(base + j);
        Y(base + j) = y * (dy - s);
    }
#elif SM_OP == SM_LOG_SOFTMAX_BWD
    // (y, dy) -> dy - exp(y) * sum(dy)
    float s = 0.0;
    for (IDX j = LANE; j < NC; j += STEP) s += X1(base + j);
    s = ROW_SUM(s);
    for (IDX j = LANE; j < NC; j += STEP) {
        float y = X0(base + j), dy = X1(base + j);
        Y(base + j) = dy - mn_exp(y) * s;
    }
#else
    float m = row_max(base);
    float s = row_sumexp(base, m);
#if SM_OP == SM_SOFTMAX
    float inv = 1.0 / s;
    for (IDX j = LANE; j < NC; j += STEP) Y(base + j) = mn_exp(X0(base + j) - m) * inv;
#elif SM_OP == SM_LOG_SOFTMAX
    float ls = mn_log(s);
    for (IDX j = LANE; j < NC; j += STEP) Y(base + j) = (X0(base + j) - m) - ls;
#elif SM_OP == SM_CE_DENSE_BWD
    float scale = X2(0) / ROWS_F;
#if CE_WRT_T
    // dtargets = -log_softmax * dloss / B
    float ls = mn_log(s);
    for (IDX j = LANE; j < NC; j += STEP) Y(base + j) = -((X0(base + j) - m) - ls) * scale;
#else
    // dlogits = (softmax * sum(t) - t) * dloss / B
    float ts = 0.0;
    for (IDX j = LANE; j < NC; j += STEP) ts += X1(base + j);
    ts = ROW_SUM(ts);
    for (IDX j = LANE; j < NC; j += STEP) {
        float p = mn_exp(X0(base + j) - m) / s;
        Y(base + j) = (p * ts - X1(base + j)) * scale;
    }
#endif
#endif
#endif
}

void main() {
#if ROW_COOP
    IDX row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
#else
    IDX row = GID;
#endif
    if (row >= ROWS) return; // uniform over the workgroup with ROW_COOP
    row_op(row);
}

#endif
