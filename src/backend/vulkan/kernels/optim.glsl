// optim.glsl - the optimizer ops: sgd_update, adam_update, clip_coef.
//
// Updates (one invocation per parameter element i): the node's storage
// aliases the parameter, so the new value goes through Y(i) after X0(i) was
// read; state buffers are updated in place through X2(i) (momentum | m) and
// X3(i) (v). Formulas and evaluation order are those of the CPU kernels
// (torch.optim.SGD with dampening 0, Adam / AdamW); `precise` keeps the
// driver from fusing them into different roundings.
//
// Defines from vk_gen_pointwise.c:
//   OPT_OP            OPT_SGD | OPT_ADAM | OPT_CLIP_COEF
//   HYPER(j)          element j of the hyper tensor {lr, 1 - b1^t, 1 - b2^t}
//   CLIP              the clip coefficient (X4(0) / X5(0)) or 1.0
//   LR_MULT, WD, HAS_WD
//   SGD:  MOM, HAS_MOM, NESTEROV
//   Adam: B1, B2, ONE_M_B1, ONE_M_B2 (1 - beta rounded in f32), EPS, DECOUPLED
//   clip_coef: MAX_NORM
//
// Does not: compute the hyper values (the session writes them per step).

#define OPT_SGD 0
#define OPT_ADAM 1
#define OPT_CLIP_COEF 2

void main() {
#if OPT_OP == OPT_CLIP_COEF
    // (sum of squared grads) -> min(1, max_norm / (sqrt(x) + 1e-6)); NaN -> 1
    if (GID != 0u) return;
    float c = MAX_NORM / (sqrt(X0(0)) + 1e-6);
    Y(0) = (!isnan(c) && c < 1.0) ? c : 1.0;
#else
    uint i = GID;
    if (i >= Y_N) return;
    precise float lr = HYPER(0) * LR_MULT;
    precise float pv = X0(i);
    precise float gv = CLIP * X1(i);
#if OPT_OP == OPT_SGD
#if HAS_WD
    gv = gv + WD * pv;
#endif
#if HAS_MOM
    precise float b = MOM * X2(i) + gv;
    X2(i) = b;
#if NESTEROV
    gv = gv + MOM * b;
#else
    gv = b;
#endif
#endif
    Y(i) = pv - lr * gv;
#else // Adam / AdamW
    precise float bc1 = HYPER(1), bc2 = HYPER(2);
#if HAS_WD
#if DECOUPLED
    pv = pv * (1.0 - lr * WD);
#else
    gv = gv + WD * pv;
#endif
#endif
    precise float m = B1 * X2(i) + ONE_M_B1 * gv;
    precise float v = B2 * X3(i) + ONE_M_B2 * gv * gv;
    X2(i) = m;
    X3(i) = v;
    precise float mhat = m / bc1, vhat = v / bc2;
    Y(i) = pv - lr * mhat / (sqrt(vhat) + EPS);
#endif
#endif
}
