// mathlib.glsl - f32 math shared by every generated kernel (inserted after
// the preamble by vk_codegen_source): exp and log to about 1 ulp, because the
// builtins are allowed several ulp (and log 2^-21 absolute near 1), which the
// CPU comparison would see. Unused functions cost nothing (dead code).
//
// Does not: depend on any template's defines.

#define MN_INF uintBitsToFloat(0x7f800000u)
#define MN_NAN uintBitsToFloat(0x7fc00000u)

// exp to about 1 ulp (builtin exp may be off by 3 + 2|x| ulp): k = round(x
// log2 e), r = x - k ln2 in two steps (k LN2_HI is exact), exp(r) by its
// Taylor series to r^7 (|r| <= 0.35), then two exact power-of-two scalings.
float mn_exp(float x) {
    if (isnan(x)) return x;
    if (x > 88.7228394) return MN_INF;
    if (x < -103.972084) return 0.0;
    float k = floor(x * 1.44269504 + 0.5);
    precise float r = (x - k * 0.693115234) - k * 3.19461833e-05;
    precise float p = r * (0.5 + r * (0.166666672 + r * (0.0416666679 + r * (0.00833333377 +
                      r * (0.00138888892 + r * 0.000198412701)))));
    precise float er = 1.0 + (r + r * p);
    int k1 = int(k) / 2, k2 = int(k) - k1; // each 2^k in the normal range
    precise float res = er * uintBitsToFloat(uint(k1 + 127) << 23) * uintBitsToFloat(uint(k2 + 127) << 23);
    return res;
}

// Natural log to about 1 ulp (builtin log may be off by 2^-21 absolute near
// 1): x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact),
// s = f / (2 + f), log(m) = 2 atanh(s) = f - s (f - 2R) with
// R = s^2/3 + s^4/5 + ... (|s| < 0.172), e ln2 split in an exact high part.
// libm results outside the domain: log(0) = -inf, log(<0) = NaN.
float mn_log(float x) {
    if (!(x > 0.0) || isinf(x)) return x == 0.0 ? -MN_INF : (x > 0.0 || isnan(x) ? x : MN_NAN);
    int e = 0;
    if (x < 1.17549435e-38) { // subnormal: scale into the normal range
        x *= 8388608.0;
        e = -23;
    }
    uint b = floatBitsToUint(x);
    e += int(b >> 23) - 127;
    float m = uintBitsToFloat((b & 0x007fffffu) | 0x3f800000u);
    if (m > 1.41421356) {
        m *= 0.5;
        e += 1;
    }
    precise float f = m - 1.0;
    precise float sv = f / (2.0 + f);
    precise float z = sv * sv;
    precise float r = z * (0.333333343 + z * (0.200000003 + z * (0.142857149 + z * 0.111111112)));
    precise float corr = sv * (f - 2.0 * r);
    precise float lo = corr - float(e) * 3.19461833e-05; // ln2 - LN2_HI
    precise float res = float(e) * 0.693115234 + (f - lo); // LN2_HI: float(e) * it is exact
    return res;
}
