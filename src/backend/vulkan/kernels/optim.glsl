// optim.glsl - the optimizer ops: sgd_update, adam_update, clip_coef,
// step_gate.
//
// Updates (one invocation per parameter element i): the node's storage
// aliases the parameter, so the new value goes through Y(i) after X0(i) was
// read; state buffers are updated in place through X2(i) (momentum | m) and
// X3(i) (v). Formulas and evaluation order are those of the CPU kernels
// (torch.optim.SGD with dampening 0, Adam / AdamW); `precise` keeps the
// driver from fusing them into different roundings.
//
// Defines from vk_gen_pointwise.c:
//   OPT_OP            OPT_SGD | OPT_ADAM | OPT_CLIP_COEF | OPT_STEP_GATE
//   HYPER(j)          element j of the hyper tensor {lr, 1 - b1^t, 1 - b2^t}
//   CLIP              the clip coefficient (X4(0) / X5(0)) or 1.0
//   SKIP              0, or the gate's "not finite" flag (X4(1) / X5(1)): when
//                     it is not 0 the invocation returns before writing
//                     anything (a branch: 0 * NaN would be NaN)
//   LR_MULT, WD, HAS_WD (literals; the multi-tensor kernel takes them per
//                     tensor from its table)
//   OPT_MULTI         1: the multi-tensor kernel (vk_gen_multi.c): the
//                     operands are regions holding many parameters, their
//                     gradients and state at equal offsets; workgroup w
//                     updates MT_PER * LOCAL_X elements of one tensor, found
//                     by mt_find(w, at, n, lr_mult, wd, w0) (generated: a
//                     tree of comparisons with constants, no table in memory)
//   SGD:  MOM, HAS_MOM, NESTEROV
//   Adam: B1, B2, ONE_M_B1, ONE_M_B2 (1 - beta rounded in f32), EPS, DECOUPLED
//   clip_coef: MAX_NORM
//   step_gate: HAS_SUMSQ, HAS_CLIP, MAX_NORM, SCALE (the loss scale's
//     element or 1.0); (loss X0(0)[, sumsq X1(0)][, scale]) -> Y(0) = clip
//     coefficient or 1, divided by the scale, Y(1) = 1 (loss) + 2 (sumsq)
//     for each that is NaN or infinite, tested on the exponent bits (immune
//     to fast math)
//
// Does not: compute the hyper values (the session writes them per step).

#define OPT_SGD 0
#define OPT_ADAM 1
#define OPT_CLIP_COEF 2
#define OPT_STEP_GATE 3

bool nonfinite(float x) { return (floatBitsToUint(x) & 0x7f800000u) == 0x7f800000u; }

#if OPT_OP == OPT_SGD || OPT_OP == OPT_ADAM
#ifndef OPT_MULTI
#define OPT_MULTI 0
#endif
// Element i of the parameter, its gradient and state; lrm, wdv: the
// learning-rate multiplier and weight decay (HAS_WD: wdv != 0).
void update(IDX i, float lrm, float wdv) {
    precise float lr = HYPER(0) * lrm;
    precise float pv = X0(i);
    precise float gv = CLIP * X1(i);
#if OPT_OP == OPT_SGD
    if (bool(HAS_WD)) gv = gv + wdv * pv;
#if HAS_MOM
    precise float b = MOM * X2(i) + gv;
    X2_WR(i) = b;
#if NESTEROV
    gv = gv + MOM * b;
#else
    gv = b;
#endif
#endif
    Y(i) = pv - lr * gv;
#else // Adam / AdamW
    precise float bc1 = HYPER(1), bc2 = HYPER(2);
    if (bool(HAS_WD)) {
#if DECOUPLED
        pv = pv * (1.0 - lr * wdv);
#else
        gv = gv + wdv * pv;
#endif
    }
    precise float m = B1 * X2(i) + ONE_M_B1 * gv;
    precise float v = B2 * X3(i) + ONE_M_B2 * gv * gv;
    X2_WR(i) = m;
    X3_WR(i) = v;
    precise float mhat = m / bc1, vhat = v / bc2;
    Y(i) = pv - lr * mhat / (sqrt(vhat) + EPS);
#endif
}
#endif

void main() {
#if OPT_OP == OPT_STEP_GATE
    if (GID != 0u) return;
    float l = X0(0);
#if HAS_SUMSQ
    float s = X1(0);
#else
    float s = 0.0;
#endif
    float c = 1.0, sc = SCALE;
#if HAS_CLIP
    c = MAX_NORM / (sqrt(s) / sc + 1e-6);
    c = (!isnan(c) && c < 1.0) ? c : 1.0;
#endif
    Y(0) = c / sc;
    Y(1) = (nonfinite(l) ? 1.0 : 0.0) + (nonfinite(s) ? 2.0 : 0.0);
#elif OPT_OP == OPT_CLIP_COEF
    // (sum of squared grads) -> min(1, max_norm / (sqrt(x) + 1e-6)); NaN -> 1
    if (GID != 0u) return;
    float c = MAX_NORM / (sqrt(X0(0)) + 1e-6);
    Y(0) = (!isnan(c) && c < 1.0) ? c : 1.0;
#elif OPT_MULTI
    if (SKIP != 0.0) return; // uniform: the gate's flag
    uint w = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (w >= MT_GROUPS) return;
    uint at, n, w0;
    float lrm, wdv;
    mt_find(w, at, n, lrm, wdv, w0);
    uint j0 = (w - w0) * (LOCAL_X * MT_PER) + gl_LocalInvocationID.x;
    [[unroll]] for (uint e = 0u; e < MT_PER; e++) {
        uint j = j0 + e * LOCAL_X;
        if (j < n) update(at + j, lrm, wdv);
    }
#else
    IDX i = GID;
    if (i >= Y_N) return;
    if (SKIP != 0.0) return;
    update(i, LR_MULT, WD);
#endif
}
