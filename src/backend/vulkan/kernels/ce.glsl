// ce.glsl - cross-entropy over logits [ROWS, NC] with i32 labels, in three
// row-parallel kernels (CE_MODE):
//
//   CE_M_ROWS  ce_rows (X0 logits, X1 labels) -> Y [ROWS, 3] = (max, sum of
//              exp(x - max), loss term) per row. One workgroup per row:
//              invocation t reads columns t, t + LOCAL_X, ... (coalesced)
//              keeping an online max and sum of exp (rescaled when the max
//              grows), then a reduction of the (max, sum) pairs: subgroup
//              operations and one pair per subgroup in shared memory
//              (MN_SUBGROUP, the device has them), else a shared-memory
//              tree; invocation 0 writes the row.
//   CE_M_MEAN  cross_entropy (X1 labels, X2 rows) -> Y scalar: the mean of
//              the loss terms over the counted rows. One workgroup; each
//              invocation sums rows t, t + LOCAL_X, ..., then a tree sum.
//   CE_M_BWD   cross_entropy_bwd (X0 logits, X1 labels, X2 dloss, X3 rows[,
//              X4 count]) -> Y [ROWS, NC] = (softmax - target) * dloss /
//              count. One invocation per element, softmax from the rows.
//
// Per-invocation loops run NC / LOCAL_X (rows) or ROWS / LOCAL_X (mean)
// times: far below lavapipe's 65535 iterations for any real vocabulary.
//
// Defines from vk_gen_pointwise.c:
//   CE_MODE    one of the CE_M_* below
//   ROWS, NC   the row view of the logits; ROWS_F = float(ROWS)
//   CE_IGNORE, CE_IGNORE_INDEX  rows with that label contribute nothing and
//              are not counted (the mean divides by the rows counted, 0 if
//              none)
//   CE_HAS_SMOOTH, CE_SMOOTH, CE_ONE_M_SMOOTH, CE_SMOOTH_C  label smoothing
//              s, 1 - s, s / NC: target = (1 - s) onehot + s / NC
//   CE_HAS_COUNT  backward: X4(0) is the row count dividing dloss (else ROWS)
//   MN_SUBGROUP   ce_rows: reduce with subgroup operations (preamble.glsl
//              enables GL_KHR_shader_subgroup_{basic,vote,arithmetic})
//
// Numerics follow the CPU: the row max (first NaN wins) is subtracted before
// exp, the loss term is log(s) + (1 - eps)(m - x[label]) + eps (m - mean x),
// and a label outside [0, NC) gives a zero loss term / zero gradient row
// (still counted). Sums are f32.
//
// Does not: handle more than one row per workgroup.

#define CE_M_ROWS 0
#define CE_M_MEAN 1
#define CE_M_BWD 2

#ifndef CE_IGNORE
#define CE_IGNORE 0
#endif
#ifndef CE_HAS_SMOOTH
#define CE_HAS_SMOOTH 0
#endif
#ifndef CE_HAS_COUNT
#define CE_HAS_COUNT 0
#endif

// MN_INF, MN_NAN, mn_exp and mn_log come from mathlib.glsl.

// label of row b counts in the mean (not ignored)
bool ce_counted(int lab) {
#if CE_IGNORE
    return lab != CE_IGNORE_INDEX;
#else
    return true;
#endif
}

#if CE_MODE == CE_M_ROWS

bool mn_beats(float v, float best) { return isnan(best) ? false : (isnan(v) || v > best); }

shared float sh_m[LOCAL_X];
shared float sh_s[LOCAL_X];
#if CE_HAS_SMOOTH
shared float sh_x[LOCAL_X];
#endif

// (m, s) += (m2, s2): the larger max (first NaN wins), sums rescaled to it.
// s2 == 0 (nothing above -inf seen) adds nothing, so -inf maxima never
// produce exp(-inf - -inf).
void lse_merge(inout float m, inout float s, float m2, float s2) {
    if (mn_beats(m2, m)) {
        s = (s == 0.0 ? 0.0 : s * mn_exp(m - m2)) + s2;
        m = m2;
    } else {
        s += s2 == 0.0 ? 0.0 : s2 * mn_exp(m2 - m);
    }
}

void main() {
    IDX row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (row >= ROWS) return; // uniform over the workgroup
    uint t = gl_LocalInvocationID.x;
    IDX base = row * NC;
    float m = -MN_INF, s = 0.0, sx = 0.0;
    for (IDX j = t; j < NC; j += LOCAL_X) {
        float v = X0(base + j);
        lse_merge(m, s, v, v > -MN_INF || isnan(v) ? 1.0 : 0.0);
        sx += v;
    }
#ifdef MN_SUBGROUP
    // per subgroup: the max (a NaN kept apart: subgroupMax leaves it
    // undefined), the sums rescaled to it; its first invocation stores the
    // pair, invocation 0 merges the gl_NumSubgroups pairs
    bool nan_m = subgroupAny(isnan(m));
    float sm = subgroupMax(isnan(m) ? -MN_INF : m);
    float ss = subgroupAdd(s == 0.0 ? 0.0 : s * mn_exp(m - sm));
#if CE_HAS_SMOOTH
    float sxs = subgroupAdd(sx);
#endif
    if (subgroupElect()) {
        sh_m[gl_SubgroupID] = nan_m ? MN_NAN : sm;
        sh_s[gl_SubgroupID] = nan_m ? MN_NAN : ss;
#if CE_HAS_SMOOTH
        sh_x[gl_SubgroupID] = sxs;
#endif
    }
    memoryBarrierShared();
    barrier();
    if (t != 0u) return;
    m = sh_m[0];
    s = sh_s[0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) {
        lse_merge(m, s, sh_m[i], sh_s[i]);
#if CE_HAS_SMOOTH
        sh_x[0] += sh_x[i];
#endif
    }
#else
    // shared-memory tree of the (max, sum) pairs
    sh_m[t] = m;
    sh_s[t] = s;
#if CE_HAS_SMOOTH
    sh_x[t] = sx;
#endif
    memoryBarrierShared();
    barrier();
    for (uint h = LOCAL_X / 2u; h > 0u; h >>= 1u) {
        if (t < h) {
            float a = sh_m[t], b = sh_s[t];
            lse_merge(a, b, sh_m[t + h], sh_s[t + h]);
            sh_m[t] = a;
            sh_s[t] = b;
#if CE_HAS_SMOOTH
            sh_x[t] += sh_x[t + h];
#endif
        }
        memoryBarrierShared();
        barrier();
    }
    if (t != 0u) return;
    m = sh_m[0];
    s = sh_s[0];
#endif
    int lab = X1I(row);
    float term = 0.0;
    if (ce_counted(lab) && lab >= 0 && lab < int(NC)) {
        float xl = X0(base + IDX(lab));
#if CE_HAS_SMOOTH
        term = mn_log(s) + CE_ONE_M_SMOOTH * (m - xl) + CE_SMOOTH * (m - sh_x[0] / float(NC));
#else
        term = mn_log(s) + (m - xl);
#endif
    }
    Y(row * 3u) = m;
    Y(row * 3u + 1u) = s;
    Y(row * 3u + 2u) = term;
}

#elif CE_MODE == CE_M_MEAN

shared float sh_t[LOCAL_X];
shared float sh_c[LOCAL_X];

void main() {
    uint t = gl_LocalInvocationID.x;
    float tot = 0.0, cnt = 0.0;
    for (IDX b = t; b < ROWS; b += LOCAL_X) {
        if (!ce_counted(X1I(b))) continue;
        tot += X2(b * 3u + 2u);
        cnt += 1.0;
    }
    sh_t[t] = tot;
    sh_c[t] = cnt;
    memoryBarrierShared();
    barrier();
    for (uint h = LOCAL_X / 2u; h > 0u; h >>= 1u) {
        if (t < h) {
            sh_t[t] += sh_t[t + h];
            sh_c[t] += sh_c[t + h];
        }
        memoryBarrierShared();
        barrier();
    }
    if (t != 0u) return;
    cnt = sh_c[0];
    Y(0) = cnt > 0.0 ? sh_t[0] / cnt : 0.0;
}

#else // CE_M_BWD

void main() {
    IDX i = GID;
    if (i >= ROWS * NC) return;
    IDX row = i / NC, j = i - row * NC;
    int lab = X1I(row);
    bool zero = !ce_counted(lab) || lab < 0 || lab >= int(NC);
#if CE_HAS_COUNT
    float cnt = X4(0);
    float scale = cnt > 0.0 ? X2(0) / cnt : 0.0;
#else
    float scale = X2(0) / ROWS_F;
#endif
    float p = mn_exp(X0(i) - X3(row * 3u)) / X3(row * 3u + 1u);
#if CE_HAS_SMOOTH
    float tgt = (j == IDX(lab) ? CE_ONE_M_SMOOTH : 0.0) + CE_SMOOTH_C;
#else
    float tgt = j == IDX(lab) ? 1.0 : 0.0;
#endif
    Y(i) = zero ? 0.0 : (p - tgt) * scale;
}

#endif
