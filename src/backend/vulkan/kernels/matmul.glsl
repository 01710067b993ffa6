// matmul.glsl - tiled f32 GEMM: C[z] = A[z] (MM_M x MM_K) @ B[z] (MM_K x MM_N),
// also the implicit-GEMM core of conv2d and its two backward ops.
//
// Tiling: a workgroup computes an MM_BM x MM_BN tile of C with MM_KS groups
// ("K splits") of LX*LY invocations each (1-D, LOCAL_X = LX*LY*MM_KS);
// invocation (tx, ty) of a split owns an MM_TM x MM_TN micro-tile made of 4x4
// blocks spread LY*4 rows / LX*4 columns apart, so that reading a k-row of
// the shared tiles is a run of consecutive vec4s.
// Split s walks the MM_BK-deep slices t = s, s + KS, s + 2*KS, .. of A and
// B through its own two shared-memory buffers: the global loads of its next
// slice go to registers before the current one is multiplied, then to the
// other buffer; one (workgroup) barrier per step. At the end split 0 adds
// the other splits' sums (in split order, through shared memory) and writes
// C. Splits cut the serial chain of slices, which bounds the latency of a
// small product with a long K (few workgroups, little to hide latency with).
// Shared tiles are k-major (sa[k][m], sb[k][n]) with rows padded by 4 floats
// so a k-contiguous loader writes without bank conflicts.
//
// The generator (vk_gen_linalg.c) bakes every dimension and stride and picks
// the operand map MM_MAP:
//   0  matmul: A(m,k) = X0(z*MM_SAZ + m*MM_SAM + k*MM_SAK), likewise B; C is
//      row-major [batch, M, N]; a shared rank-2 operand has MM_S?Z = 0
//   1  conv2d forward, z = group: A = im2col(x) [N*OH*OW, Cg*KH*KW],
//      B = w^T, C -> y [N,O,OH,OW]; bias (MM_BIAS) starts the accumulators
//   2  conv2d input gradient, z = group: A = the dy patches seen by each input
//      pixel [N*H*W, Og*KH*KW] (zero where the stride skips it), B = w,
//      C -> dx [N,C,H,W]; with MM_SUBPIX (a stride above 1) z = group * SH*SW
//      + stride class and each class multiplies only the taps that reach it
//   3  conv2d weight gradient, z = group: A = dy [Og, N*OH*OW],
//      B = im2col(x) [N*OH*OW, Cg*KH*KW], C -> dw [O, Cg, KH, KW]; split
//      into MM_PARTS partial sums (MM_PARTS > 1), z = part * MM_GROUPS +
//      group, part p sums k in [p*MM_KC, (p+1)*MM_KC) into rows p*O.. of
//      C [MM_PARTS*O, Cg, KH, KW] (the graph adds the parts: the K split
//      across workgroups, with the partial sums in planned memory)
// MM_CT (maps 1 and 2): the channel-major product C^T = B^T A^T, M the
// output channels and N the pixels (b, h, w), so that the invocations of a
// row, which hold consecutive n, store consecutive pixels (coalesced; the
// pixel-major form stores 4 channels apart, a plane apart each) and read
// the image operand along its rows; the bias then goes by row.
// With MM_KS == 1 each output element accumulates over k = 0, 1, .. K-1 in
// order from 0 (or the bias), which is the CPU reference's order; padding
// terms add +0. Splits sum interleaved runs of k and round differently.
//
// The fast contract on devices without cooperative matrices: MM_RND(x)
// (mn_round_bf16 / mn_round_f16 of mathlib.glsl) rounds each operand
// element as it is loaded; the products of rounded values are exact in f32,
// so with MM_KS == 1 the results equal the CPU reference's bit for bit.
//
// A fused group (vk_gen_fused.c) defines MM_EPILOGUE(i, acc): the
// statements that take output element i's value through the group's
// pointwise members and store the group's result at Y(i) instead.
//
// Does not: use atomics or cooperative matrices; vector global loads only
// in plain products (MM_VA, MM_VB).

#ifndef MM_RND
#define MM_RND(x) (x)
#endif
#ifndef MM_CT
#define MM_CT 0
#endif
#ifndef MM_SUBPIX
#define MM_SUBPIX 0
#endif
#define LX (MM_BN / MM_TN)
#define LY (MM_BM / MM_TM)
#define NT (LX * LY) // invocations per split
#define RM (MM_TM / 4)
#define RN (MM_TN / 4)
#define SAW ((MM_BM + 4) / 4)
#define SBW ((MM_BN + 4) / 4)
#define LA ((MM_BM * MM_BK) / NT)
#define LB ((MM_BN * MM_BK) / NT)
#ifndef MM_KC
#define MM_KC MM_K // K of one part
#endif
#ifndef MM_PARTS
#define MM_PARTS 1
#endif
#define KTILES ((MM_KC + MM_BK - 1) / MM_BK)
#define KSTEPS ((KTILES + MM_KS - 1) / MM_KS) // steps of each split
#define TILES_M ((MM_M + MM_BM - 1) / MM_BM)
#define TILES_N ((MM_N + MM_BN - 1) / MM_BN)

shared vec4 sa[2 * MM_KS][MM_BK][SAW]; // [split * 2 + buffer]
shared vec4 sb[2 * MM_KS][MM_BK][SBW];
#if MM_KS > 1
shared vec4 sred[(MM_KS - 1) * NT];
#endif

// ---- operand maps: mm_a/mm_b read an in-range element (0 for padding), ----
// ---- mm_c gives the output index.                                       ----
#if MM_MAP == 0
float mm_a(IDX z, IDX m, IDX k) { return X0(z * MM_SAZ + m * MM_SAM + k * MM_SAK); }
float mm_b(IDX z, IDX k, IDX n) { return X1(z * MM_SBZ + k * MM_SBK + n * MM_SBN); }
IDX mm_c(IDX z, IDX m, IDX n) { return (z * MM_M + m) * MM_N + n; }

#elif MM_MAP == 1
// m = (b, oh, ow), k = (ci, kh, kw), n = o within the group z.
float cv_a(IDX z, IDX m, IDX k) {
    IDX b = m / (CV_OH * CV_OW), p = m % (CV_OH * CV_OW);
    IDX ci = k / (CV_KH * CV_KW), r = k % (CV_KH * CV_KW);
    SIDX ih = SIDX((p / CV_OW) * CV_SH + (r / CV_KW) * CV_DH) - CV_PH;
    SIDX iw = SIDX((p % CV_OW) * CV_SW + (r % CV_KW) * CV_DW) - CV_PW;
    if (uint(ih) >= uint(CV_H) || uint(iw) >= uint(CV_W)) return 0.0;
    return X0(((b * CV_C + z * CV_CG + ci) * CV_H + IDX(ih)) * CV_W + IDX(iw));
}
float cv_b(IDX z, IDX k, IDX n) { return X1((z * CV_OG + n) * (CV_CG * CV_KH * CV_KW) + k); }
IDX cv_c(IDX z, IDX m, IDX n) {
    IDX b = m / (CV_OH * CV_OW), p = m % (CV_OH * CV_OW);
    return (b * CV_O + z * CV_OG + n) * (CV_OH * CV_OW) + p;
}

#elif MM_MAP == 2 && MM_SUBPIX
// Strided input gradient by stride classes: z = group * SH*SW + class q,
// class (qh, qw) = (q / SW, q % SW) the dx pixels h = h'*SH + qh, w = w'*SW
// + qw, m = (b, h', w') over ceil(H / SH) x ceil(W / SW) (a class with fewer
// rows or columns skips the rest: mm_store_ok). A class reaches only the
// taps kh = rh + jh*SH, rh = (qh + PH) % SH, jh < SP_TH (taps past KH read
// 0), from dy row oh = h' + (qh + PH) / SH - jh; likewise w. k = (o, jh,
// jw): the CPU reference's order of the terms that are not 0. A class with
// no tap at all (1x1, stride 2: three classes of four) skips its k loop
// (mm_live) and stores zeros. Dilation 1 only (the generator checks).
#define SP_HC ((CV_H + CV_SH - 1) / CV_SH)
#define SP_WC ((CV_W + CV_SW - 1) / CV_SW)
#define SP_TH ((CV_KH + CV_SH - 1) / CV_SH)
#define SP_TW ((CV_KW + CV_SW - 1) / CV_SW)
#define SP_Q (CV_SH * CV_SW)
SIDX sp_qh(IDX z) { return SIDX((z % SP_Q) / CV_SW); }
SIDX sp_qw(IDX z) { return SIDX((z % SP_Q) % CV_SW); }
bool mm_live(IDX z) { return (sp_qh(z) + CV_PH) % CV_SH < CV_KH && (sp_qw(z) + CV_PW) % CV_SW < CV_KW; }
// the dx pixel m of class z exists (a class of an odd extent is shorter)
bool sp_in(IDX z, IDX m) {
    IDX p = m % (SP_HC * SP_WC);
    return SIDX(p / SP_WC) * CV_SH + sp_qh(z) < CV_H && SIDX(p % SP_WC) * CV_SW + sp_qw(z) < CV_W;
}
float cv_a(IDX z, IDX m, IDX k) {
    IDX b = m / (SP_HC * SP_WC), p = m % (SP_HC * SP_WC);
    IDX o = k / (SP_TH * SP_TW), r = k % (SP_TH * SP_TW);
    SIDX qh = sp_qh(z), qw = sp_qw(z), jh = SIDX(r / SP_TW), jw = SIDX(r % SP_TW);
    SIDX kh = (qh + CV_PH) % CV_SH + jh * CV_SH, kw = (qw + CV_PW) % CV_SW + jw * CV_SW;
    SIDX oh = SIDX(p / SP_WC) + (qh + CV_PH) / CV_SH - jh, ow = SIDX(p % SP_WC) + (qw + CV_PW) / CV_SW - jw;
    if (kh >= CV_KH || kw >= CV_KW || uint(oh) >= uint(CV_OH) || uint(ow) >= uint(CV_OW)) return 0.0;
    return X0(((b * CV_O + (z / SP_Q) * CV_OG + o) * CV_OH + IDX(oh)) * CV_OW + IDX(ow));
}
float cv_b(IDX z, IDX k, IDX n) {
    IDX o = k / (SP_TH * SP_TW), r = k % (SP_TH * SP_TW);
    SIDX kh = (sp_qh(z) + CV_PH) % CV_SH + SIDX(r / SP_TW) * CV_SH;
    SIDX kw = (sp_qw(z) + CV_PW) % CV_SW + SIDX(r % SP_TW) * CV_SW;
    if (kh >= CV_KH || kw >= CV_KW) return 0.0;
    return X1((((z / SP_Q) * CV_OG + o) * CV_CG + n) * (CV_KH * CV_KW) + IDX(kh * CV_KW + kw));
}
IDX cv_c(IDX z, IDX m, IDX n) {
    IDX b = m / (SP_HC * SP_WC), p = m % (SP_HC * SP_WC);
    IDX h = (p / SP_WC) * CV_SH + IDX(sp_qh(z)), w = (p % SP_WC) * CV_SW + IDX(sp_qw(z));
    return (b * CV_C + (z / SP_Q) * CV_CG + n) * (CV_H * CV_W) + h * CV_W + w;
}

#elif MM_MAP == 2
// m = (b, h, w) of dx, k = (o, kh, kw), n = ci within the group z.
float cv_a(IDX z, IDX m, IDX k) {
    IDX b = m / (CV_H * CV_W), p = m % (CV_H * CV_W);
    IDX o = k / (CV_KH * CV_KW), r = k % (CV_KH * CV_KW);
    SIDX th = SIDX(p / CV_W) + CV_PH - SIDX((r / CV_KW) * CV_DH);
    SIDX tw = SIDX(p % CV_W) + CV_PW - SIDX((r % CV_KW) * CV_DW);
    if (th < 0 || tw < 0) return 0.0;
    IDX oh = IDX(th) / CV_SH, ow = IDX(tw) / CV_SW;
    if (oh * CV_SH != IDX(th) || ow * CV_SW != IDX(tw) || oh >= CV_OH || ow >= CV_OW) return 0.0;
    return X0(((b * CV_O + z * CV_OG + o) * CV_OH + oh) * CV_OW + ow);
}
float cv_b(IDX z, IDX k, IDX n) {
    IDX o = k / (CV_KH * CV_KW), r = k % (CV_KH * CV_KW);
    return X1(((z * CV_OG + o) * CV_CG + n) * (CV_KH * CV_KW) + r);
}
IDX cv_c(IDX z, IDX m, IDX n) {
    IDX b = m / (CV_H * CV_W), p = m % (CV_H * CV_W);
    return (b * CV_C + z * CV_CG + n) * (CV_H * CV_W) + p;
}

#elif MM_MAP == 3
// m = o within the group z, k = (b, oh, ow), n = (ci, kh, kw); the group of
// a partial sum's z is z % MM_GROUPS.
float mm_a(IDX z, IDX m, IDX k) {
#if MM_PARTS > 1
    z = z % MM_GROUPS;
#endif
    IDX b = k / (CV_OH * CV_OW), p = k % (CV_OH * CV_OW);
    return X1((b * CV_O + z * CV_OG + m) * (CV_OH * CV_OW) + p);
}
float mm_b(IDX z, IDX k, IDX n) {
#if MM_PARTS > 1
    z = z % MM_GROUPS;
#endif
    IDX b = k / (CV_OH * CV_OW), p = k % (CV_OH * CV_OW);
    IDX ci = n / (CV_KH * CV_KW), r = n % (CV_KH * CV_KW);
    SIDX ih = SIDX((p / CV_OW) * CV_SH + (r / CV_KW) * CV_DH) - CV_PH;
    SIDX iw = SIDX((p % CV_OW) * CV_SW + (r % CV_KW) * CV_DW) - CV_PW;
    if (uint(ih) >= uint(CV_H) || uint(iw) >= uint(CV_W)) return 0.0;
    return X0(((b * CV_C + z * CV_CG + ci) * CV_H + IDX(ih)) * CV_W + IDX(iw));
}
IDX mm_c(IDX z, IDX m, IDX n) { return (z * CV_OG + m) * (CV_CG * CV_KH * CV_KW) + n; }
#endif

#if MM_MAP == 1 || MM_MAP == 2
#if MM_CT // the pixel-major maps above, transposed
float mm_a(IDX z, IDX m, IDX k) { return cv_b(z, k, m); }
float mm_b(IDX z, IDX k, IDX n) { return cv_a(z, n, k); }
IDX mm_c(IDX z, IDX m, IDX n) { return cv_c(z, n, m); }
#define MM_PIXEL(m, n) (n)
#else
float mm_a(IDX z, IDX m, IDX k) { return cv_a(z, m, k); }
float mm_b(IDX z, IDX k, IDX n) { return cv_b(z, k, n); }
IDX mm_c(IDX z, IDX m, IDX n) { return cv_c(z, m, n); }
#define MM_PIXEL(m, n) (m)
#endif
#endif
// the stride classes of MM_SUBPIX: a class without taps, a pixel past its class
#if MM_MAP == 2 && MM_SUBPIX
#define MM_STORE_OK(z, m, n) sp_in(z, MM_PIXEL(m, n))
#else
#define mm_live(z) true
#define MM_STORE_OK(z, m, n) true
#endif

// ---- the image operand's gathers by pixel (MM_PX, from the generator) ----
// B of a convolution is a gather whose address splits into a pixel part and
// a tap part. The pixel an invocation loads is the same for all its
// elements of a slice (MM_PX 1: B k-fast, the pixel is k, kk = lid % BK)
// or of a whole tile (MM_PX 2: B n-fast, the pixel is n, nn = lid % BN),
// since NT is a multiple of BK and BN; so px_of decomposes it once and
// px_tap adds each element's tap (its position and bounds), instead of
// mm_b decomposing both per element. Same values as mm_b.
#ifndef MM_PX
#define MM_PX 0
#endif
#if MM_PX
struct px_t {
    IDX base; // the element of tap 0
    SIDX y, x; // the pixel's row and column before the tap's offset
    bool ok;
};
#if MM_MAP == 1 || MM_MAP == 3
// x [N,C,H,W] at pixel (b, oh, ow) of y, taps (ci, kh, kw) of the group z
px_t px_of(IDX z, IDX pix) {
    IDX b = pix / (CV_OH * CV_OW), p = pix % (CV_OH * CV_OW);
    px_t r;
#if MM_MAP == 3 && MM_PARTS > 1
    z = z % MM_GROUPS;
#endif
    r.base = (b * CV_C + z * CV_CG) * (CV_H * CV_W);
    r.y = SIDX((p / CV_OW) * CV_SH) - CV_PH;
    r.x = SIDX((p % CV_OW) * CV_SW) - CV_PW;
    r.ok = true;
    return r;
}
float px_tap(IDX z, px_t p, IDX t) {
    IDX ci = t / (CV_KH * CV_KW), q = t % (CV_KH * CV_KW);
    SIDX ih = p.y + SIDX(q / CV_KW) * CV_DH, iw = p.x + SIDX(q % CV_KW) * CV_DW;
    if (uint(ih) >= uint(CV_H) || uint(iw) >= uint(CV_W)) return 0.0;
    return X0(p.base + ci * (CV_H * CV_W) + IDX(ih) * CV_W + IDX(iw));
}
#elif MM_MAP == 2 && MM_SUBPIX
// dy [N,O,OH,OW] seen by dx pixel (b, h', w') of class z, taps (o, jh, jw)
px_t px_of(IDX z, IDX pix) {
    IDX b = pix / (SP_HC * SP_WC), p = pix % (SP_HC * SP_WC);
    px_t r;
    r.base = (b * CV_O + (z / SP_Q) * CV_OG) * (CV_OH * CV_OW);
    r.y = SIDX(p / SP_WC) + (sp_qh(z) + CV_PH) / CV_SH;
    r.x = SIDX(p % SP_WC) + (sp_qw(z) + CV_PW) / CV_SW;
    r.ok = true;
    return r;
}
float px_tap(IDX z, px_t p, IDX t) {
    IDX o = t / (SP_TH * SP_TW), q = t % (SP_TH * SP_TW);
    SIDX jh = SIDX(q / SP_TW), jw = SIDX(q % SP_TW);
    SIDX oh = p.y - jh, ow = p.x - jw;
    if ((sp_qh(z) + CV_PH) % CV_SH + jh * CV_SH >= CV_KH || (sp_qw(z) + CV_PW) % CV_SW + jw * CV_SW >= CV_KW ||
        uint(oh) >= uint(CV_OH) || uint(ow) >= uint(CV_OW))
        return 0.0;
    return X0(p.base + o * (CV_OH * CV_OW) + IDX(oh) * CV_OW + IDX(ow));
}
#elif MM_MAP == 2
// stride 1 (the generator checks): dy seen by dx pixel (b, h, w), taps (o, kh, kw)
px_t px_of(IDX z, IDX pix) {
    IDX b = pix / (CV_H * CV_W), p = pix % (CV_H * CV_W);
    px_t r;
    r.base = (b * CV_O + z * CV_OG) * (CV_OH * CV_OW);
    r.y = SIDX(p / CV_W) + CV_PH;
    r.x = SIDX(p % CV_W) + CV_PW;
    r.ok = true;
    return r;
}
float px_tap(IDX z, px_t p, IDX t) {
    IDX o = t / (CV_KH * CV_KW), q = t % (CV_KH * CV_KW);
    SIDX oh = p.y - SIDX(q / CV_KW) * CV_DH, ow = p.x - SIDX(q % CV_KW) * CV_DW;
    if (uint(oh) >= uint(CV_OH) || uint(ow) >= uint(CV_OW)) return 0.0;
    return X0(p.base + o * (CV_OH * CV_OW) + IDX(oh) * CV_OW + IDX(ow));
}
#endif
#endif

// ---- staging of one K slice: global -> registers -> shared ----------------
// Invocation l of a split moves elements e = l + i*NT of the slice, (mm, kk)
// with the contiguous index fastest (MM_A_KFAST: k is contiguous in memory
// for A), so a subgroup reads runs.
float ra[LA], rb[LB];

// Plain products (MM_MAP 0) whose operand runs contiguous in units of 4
// (MM_VA / MM_VB from the generator: the contiguous extent a multiple of 4,
// the tile's elements a multiple of 4 NT; tensors are 64-byte aligned) load
// it as vec4s: unit u = lid + i*NT of the slice covers 4 consecutive
// elements along the contiguous dimension, one global load instead of
// four, and the index arithmetic once. Same values; not for a paged or
// packed (X0_P16: read element by element, decoded) operand or 64-bit
// indices.
#if defined(MM_VA) && MM_VA && MM_MAP == 0 && !defined(X0_PAGES) && !defined(X0_P16) && !defined(MN_IDX64)
#define MM_VEC_A 1
layout(std430, set = 0, binding = 1) readonly buffer BufX0v { vec4 d[]; } bX0v;
#define UA (LA / 4)
vec4 rav[UA];
#else
#define MM_VEC_A 0
#endif
#if defined(MM_VB) && MM_VB && MM_MAP == 0 && !defined(X1_PAGES) && !defined(X1_P16) && !defined(MN_IDX64)
#define MM_VEC_B 1
layout(std430, set = 0, binding = 2) readonly buffer BufX1v { vec4 d[]; } bX1v;
#define UB (LB / 4)
vec4 rbv[UB];
#else
#define MM_VEC_B 0
#endif
#if MM_VEC_A || MM_VEC_B
vec4 mm_rnd4(vec4 v) { return vec4(MM_RND(v.x), MM_RND(v.y), MM_RND(v.z), MM_RND(v.w)); }
#endif

#if MM_PX == 2
px_t tile_px; // the pixel of this invocation's B elements in the current tile
#endif

void load_slice(IDX z, IDX m0, IDX n0, IDX k0, IDX kend, uint lid) {
#if MM_VEC_A
    [[unroll]] for (uint i = 0; i < UA; i++) {
        uint u = lid + i * NT;
#if MM_A_KFAST
        IDX m = m0 + u / (MM_BK / 4), k = k0 + 4u * (u % (MM_BK / 4));
#else
        IDX m = m0 + 4u * (u % (MM_BM / 4)), k = k0 + u / (MM_BM / 4);
#endif
        vec4 v = vec4(0.0);
        if ((MM_EVEN_M != 0 || m < MM_M) && (MM_EVEN_K != 0 || k < kend))
            v = mm_rnd4(bX0v.d[(pc.off[1] + z * MM_SAZ + m * MM_SAM + k * MM_SAK) >> 2]);
        rav[i] = v;
    }
#else
    [[unroll]] for (uint i = 0; i < LA; i++) {
        uint e = lid + i * NT;
#if MM_A_KFAST
        uint kk = e % MM_BK, mm = e / MM_BK;
#else
        uint mm = e % MM_BM, kk = e / MM_BM;
#endif
        IDX m = m0 + mm, k = k0 + kk;
        float v = 0.0;
        if ((MM_EVEN_M != 0 || m < MM_M) && (MM_EVEN_K != 0 || k < kend)) v = MM_RND(mm_a(z, m, k));
        ra[i] = v;
    }
#endif
#if MM_PX == 1
    // the pixel is k = k0 + lid % BK for every element
    const IDX kp = k0 + lid % MM_BK;
    px_t px = px_of(z, kp);
    px.ok = MM_EVEN_K != 0 || kp < kend;
    [[unroll]] for (uint i = 0; i < LB; i++) {
        IDX n = n0 + lid / MM_BK + i * (NT / MM_BK);
        float v = 0.0;
        if ((MM_EVEN_N != 0 || n < MM_N) && px.ok) v = MM_RND(px_tap(z, px, n));
        rb[i] = v;
    }
#elif MM_PX == 2
    // the pixel is n = n0 + lid % BN for every element (tile_px)
    [[unroll]] for (uint i = 0; i < LB; i++) {
        IDX k = k0 + lid / MM_BN + i * (NT / MM_BN);
        float v = 0.0;
        if (tile_px.ok && (MM_EVEN_K != 0 || k < kend)) v = MM_RND(px_tap(z, tile_px, k));
        rb[i] = v;
    }
#elif MM_VEC_B
    [[unroll]] for (uint i = 0; i < UB; i++) {
        uint u = lid + i * NT;
#if MM_B_KFAST
        IDX n = n0 + u / (MM_BK / 4), k = k0 + 4u * (u % (MM_BK / 4));
#else
        IDX n = n0 + 4u * (u % (MM_BN / 4)), k = k0 + u / (MM_BN / 4);
#endif
        vec4 v = vec4(0.0);
        if ((MM_EVEN_N != 0 || n < MM_N) && (MM_EVEN_K != 0 || k < kend))
            v = mm_rnd4(bX1v.d[(pc.off[2] + z * MM_SBZ + k * MM_SBK + n * MM_SBN) >> 2]);
        rbv[i] = v;
    }
#else
    [[unroll]] for (uint i = 0; i < LB; i++) {
        uint e = lid + i * NT;
#if MM_B_KFAST
        uint kk = e % MM_BK, nn = e / MM_BK;
#else
        uint nn = e % MM_BN, kk = e / MM_BN;
#endif
        IDX n = n0 + nn, k = k0 + kk;
        float v = 0.0;
        if ((MM_EVEN_N != 0 || n < MM_N) && (MM_EVEN_K != 0 || k < kend)) v = MM_RND(mm_b(z, k, n));
        rb[i] = v;
    }
#endif
}

void store_slice(uint buf, uint lid) {
#if MM_VEC_A
    [[unroll]] for (uint i = 0; i < UA; i++) {
        uint u = lid + i * NT;
#if MM_A_KFAST
        uint mm = u / (MM_BK / 4), k4 = 4u * (u % (MM_BK / 4));
        [[unroll]] for (uint j = 0; j < 4; j++) sa[buf][k4 + j][mm >> 2][mm & 3u] = rav[i][j];
#else
        sa[buf][u / (MM_BM / 4)][u % (MM_BM / 4)] = rav[i];
#endif
    }
#else
    [[unroll]] for (uint i = 0; i < LA; i++) {
        uint e = lid + i * NT;
#if MM_A_KFAST
        uint kk = e % MM_BK, mm = e / MM_BK;
#else
        uint mm = e % MM_BM, kk = e / MM_BM;
#endif
        sa[buf][kk][mm >> 2][mm & 3u] = ra[i];
    }
#endif
#if MM_VEC_B
    [[unroll]] for (uint i = 0; i < UB; i++) {
        uint u = lid + i * NT;
#if MM_B_KFAST
        uint nn = u / (MM_BK / 4), k4 = 4u * (u % (MM_BK / 4));
        [[unroll]] for (uint j = 0; j < 4; j++) sb[buf][k4 + j][nn >> 2][nn & 3u] = rbv[i][j];
#else
        sb[buf][u / (MM_BN / 4)][u % (MM_BN / 4)] = rbv[i];
#endif
    }
#else
    [[unroll]] for (uint i = 0; i < LB; i++) {
        uint e = lid + i * NT;
#if MM_B_KFAST
        uint kk = e % MM_BK, nn = e / MM_BK;
#else
        uint nn = e % MM_BN, kk = e / MM_BN;
#endif
        sb[buf][kk][nn >> 2][nn & 3u] = rb[i];
    }
#endif
}

void main() {
    uint lid = gl_LocalInvocationIndex;
    uint split = lid / NT, l = lid % NT;
    uint tx = l % LX, ty = l / LX;
    // Uniform loops: a grid smaller than the tile count (device group
    // limits) strides over the remaining tiles.
    for (IDX z = gl_WorkGroupID.z; z < MM_BATCH; z += gl_NumWorkGroups.z)
    for (IDX tm = gl_WorkGroupID.x; tm < TILES_M; tm += gl_NumWorkGroups.x)
    for (IDX tn = gl_WorkGroupID.y; tn < TILES_N; tn += gl_NumWorkGroups.y) {
        IDX m0 = tm * MM_BM, n0 = tn * MM_BN;
#if MM_PARTS > 1
        IDX kb = (z / MM_GROUPS) * MM_KC, ke = kb + MM_KC < MM_K ? kb + MM_KC : MM_K;
#else
        IDX kb = 0, ke = MM_K;
#endif
        vec4 acc[MM_TM][RN];
        [[unroll]] for (uint c = 0; c < RN; c++) {
            vec4 init = vec4(0.0);
#if MM_BIAS && !MM_CT
            // conv2d bias X2[o]: the CPU reference starts each sum from it
            [[unroll]] for (uint j = 0; j < 4; j++) {
                IDX n = n0 + c * LX * 4 + tx * 4 + j;
                if (split == 0 && n < MM_N) init[j] = X2(z * CV_OG + n);
            }
#endif
            [[unroll]] for (uint i = 0; i < MM_TM; i++) acc[i][c] = init;
        }
#if MM_BIAS && MM_CT
        // channel-major: the bias of row m
        [[unroll]] for (uint r = 0; r < RM; r++)
            [[unroll]] for (uint i = 0; i < 4; i++) {
                IDX m = m0 + r * LY * 4 + ty * 4 + i;
                float bv = split == 0 && m < MM_M ? X2(z * CV_OG + m) : 0.0;
                [[unroll]] for (uint c = 0; c < RN; c++) acc[r * 4 + i][c] = vec4(bv);
            }
#endif

#if MM_PX == 2
        {
            const IDX np = n0 + l % MM_BN;
            tile_px = px_of(z, np < MM_N ? np : 0);
            tile_px.ok = MM_EVEN_N != 0 || np < MM_N;
        }
#endif
        const uint ksteps = mm_live(z) ? uint(KSTEPS) : 0u; // uniform in the workgroup
        if (split < KTILES && ksteps > 0u) {
            load_slice(z, m0, n0, kb + IDX(split) * MM_BK, ke, l);
            store_slice(split * 2, l);
        }
        barrier();
        for (uint step = 0; step < ksteps; step++) {
            uint t = step * MM_KS + split; // this split's slice
            uint buf = split * 2 + (step & 1u);
            bool next = t + MM_KS < KTILES;
            if (next) load_slice(z, m0, n0, kb + IDX(t + MM_KS) * MM_BK, ke, l);
            if (t < KTILES) {
                [[unroll]] for (uint kk = 0; kk < MM_BK; kk++) {
                    vec4 a[RM], b[RN];
                    [[unroll]] for (uint r = 0; r < RM; r++) a[r] = sa[buf][kk][r * LY + ty];
                    [[unroll]] for (uint c = 0; c < RN; c++) b[c] = sb[buf][kk][c * LX + tx];
                    [[unroll]] for (uint r = 0; r < RM; r++)
                        [[unroll]] for (uint i = 0; i < 4; i++)
                            [[unroll]] for (uint c = 0; c < RN; c++)
                                acc[r * 4 + i][c] = fma(vec4(a[r][i]), b[c], acc[r * 4 + i][c]);
                }
            }
            // Buffer buf ^ 1 was last read at the previous step, which the
            // previous barrier closed; this barrier publishes the writes to
            // it and closes the reads of buf before the next step refills it.
            if (next) store_slice(buf ^ 1u, l);
            barrier();
        }

#if MM_KS > 1
        // Split 0 adds the other splits' micro-tiles, one vec4 per round.
        [[unroll]] for (uint i = 0; i < MM_TM; i++)
            [[unroll]] for (uint c = 0; c < RN; c++) {
                if (split > 0) sred[(split - 1) * NT + l] = acc[i][c];
                barrier();
                if (split == 0)
                    for (uint s = 1; s < MM_KS; s++) acc[i][c] += sred[(s - 1) * NT + l];
                barrier();
            }
#endif
        [[unroll]] for (uint r = 0; r < RM; r++)
            [[unroll]] for (uint i = 0; i < 4; i++) {
                IDX m = m0 + r * LY * 4 + ty * 4 + i;
                if (split != 0 || (MM_EVEN_M == 0 && m >= MM_M)) continue;
                [[unroll]] for (uint c = 0; c < RN; c++)
                    [[unroll]] for (uint j = 0; j < 4; j++) {
                        IDX n = n0 + c * LX * 4 + tx * 4 + j;
                        if ((MM_EVEN_N == 0 && n >= MM_N) || !MM_STORE_OK(z, m, n)) continue;
#ifdef MM_EPILOGUE
                        MM_EPILOGUE(mm_c(z, m, n), acc[r * 4 + i][c][j])
#else
                        Y(mm_c(z, m, n)) = acc[r * 4 + i][c][j];
#endif
                    }
            }
    }
}
