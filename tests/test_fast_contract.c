/* test_fast_contract.c - the fast contract on matrix products and attention
 * (mn_session_options.precision = FAST_BF16 / FAST_F16): operand rounding
 * to bf16 / f16 (round to nearest even), f32 accumulation, forward and
 * backward, on the CPU reference and on Vulkan (lavapipe: no cooperative
 * matrices, so the FMA kernels round the operands as they load them).
 *
 * - The rounding functions (core/round16.h) on hand-worked values, every
 *   boundary (ties, subnormals, overflow, NaN, inf), and 2^20 random bit
 *   patterns against a double-precision rounding; the f64 CPU mode rounds
 *   once from double.
 * - The GLSL rounding (mathlib.glsl) gives the C rounding's bits: K = 1
 *   products on Vulkan of every kind of value.
 * - A matmul case table (transposes, batches, a shared operand, odd sizes,
 *   long K) and convolutions (forward, both gradients, groups, stride) on
 *   Vulkan against the CPU emulation; the fast result differs from the
 *   strict one by what bf16 / f16 rounding predicts; a convolution's
 *   output and three gradients, large enough for tensor cores.
 * - A small MLP and CNN: forward and every parameter gradient, Vulkan
 *   against the CPU, the CPU against its f64 mode; the products of the
 *   backward pass round too: dW and dx of an MSE-trained product equal
 *   the products of the rounded operands and rounded dy, summed in double.
 * - Attention (grouped heads, causal, a sliding window): y, dq, dk, dv of
 *   Vulkan's row and tile kernels against the CPU emulation, which rounds
 *   q, k, v, dout and the weights P, dS; in bf16 the fast result is 10x farther
 *   from the strict one than Vulkan is from the emulation.
 * - Training: an MLP trained 120 steps in fast mode keeps its loss within a
 *   few percent of the strict run (CPU and Vulkan).
 * - Operand casts (MEGANEURA_FAST_CAST): A[4096, 64] @ I equals round16(A)
 *   bit for bit on the CPU and on Vulkan with the casts forced on; the
 *   schedule runs both casts right before the product; the CPU never casts;
 *   a 3-step bf16 training run gives the same loss and weights bits with
 *   and without the casts.
 * - The option: an unknown value fails the session, naming it; the dump
 *   marks the rounded contractions.
 * On a GPU with cooperative matrices (run it there: it needs no lavapipe)
 * the larger matmul cases and backward products take the tensor-core
 * kernels; the Vulkan-vs-CPU bounds allow the f32 sums' reordering (1e-5)
 * and stay far below the rounding's size.
 */
#include <stdlib.h>
#include <string.h>

#include "core/round16.h"
#include "graph/attrs.h"
#include "harness.h"
#include "session/session.h"

static mn_device *vk;

/* ---- rounding ------------------------------------------------------------ */

static float bits(uint32_t u) { return mn_f32_of_bits(u); }

static bool same(float a, float b) { return (a != a && b != b) || mn_f32_bits(a) == mn_f32_bits(b); }

static void test_rounding_values(void) {
    static const struct {
        float x, bf16, f16;
    } v[] = {
        {1.0f, 1.0f, 1.0f},
        {-0.0f, -0.0f, -0.0f},
        {1.0f + 0x1p-8f, 1.0f, 1.0f + 0x1p-8f},             /* bf16 tie: to the even 1.0 */
        {1.0f + 0x3p-8f, 1.0f + 0x1p-6f, 1.0f + 0x3p-8f},    /* bf16 tie: up to the even */
        {1.0f + 0x1p-11f, 1.0f, 1.0f},                        /* f16 tie: to even */
        {1.0f + 0x3p-11f, 1.0f, 1.0f + 0x1p-9f},              /* f16 tie: up */
        {1.0f + 0x1.8p-11f, 1.0f, 1.0f + 0x1p-10f},           /* f16: above the tie */
        {65504.0f, 65536.0f, 65504.0f},
        {65519.0f, 65536.0f, 65504.0f},
        {65520.0f, 65536.0f, INFINITY},                       /* f16 overflow by the tie */
        {-70000.0f, -70144.0f, -INFINITY},
        {0x1p-24f, 0x1p-24f, 0x1p-24f},                       /* the smallest f16 subnormal */
        {0x1p-25f, 0x1p-25f, 0.0f},                           /* f16 tie to 0 */
        {0x1.8p-25f, 0x1.8p-25f, 0x1p-24f},                   /* above the tie */
        {0x3p-25f, 0x3p-25f, 0x2p-24f},                       /* 1.5 quanta: to even 2 */
        {0x1.ff8p-15f, 0x1p-14f, 0x1.ff8p-15f},               /* the largest f16 subnormal; a bf16 tie, up */
        {0x1.ffcp-15f, 0x1p-14f, 0x1p-14f},                   /* f16 tie: up to the even 2^-14 */
        {0x1.ffap-15f, 0x1p-14f, 0x1.ff8p-15f},               /* f16: below that tie */
        {3.4028235e38f, INFINITY, INFINITY},                  /* bf16 overflow */
        {0x1.fep127f, 0x1.fep127f, INFINITY},                 /* the largest bf16 */
        {0x1p-130f, 0x1p-130f, 0.0f},                         /* f32 subnormal: bf16 keeps it */
        {INFINITY, INFINITY, INFINITY},
        {-INFINITY, -INFINITY, -INFINITY},
    };
    for (size_t i = 0; i < MN_ARRAY_LEN(v); i++) {
        CHECK_MSG(same(mn_round_bf16f(v[i].x), v[i].bf16), "bf16(%a) = %a, want %a", (double)v[i].x,
                  (double)mn_round_bf16f(v[i].x), (double)v[i].bf16);
        CHECK_MSG(same(mn_round_f16f(v[i].x), v[i].f16), "f16(%a) = %a, want %a", (double)v[i].x,
                  (double)mn_round_f16f(v[i].x), (double)v[i].f16);
        CHECK(same((float)mn_round16_d(v[i].x, MN_ROUND_BF16), v[i].bf16));
        CHECK(same((float)mn_round16_d(v[i].x, MN_ROUND_F16), v[i].f16));
    }
    const float nan = bits(0x7f800001u); /* a NaN whose low bits would round it to inf */
    CHECK(isnan(mn_round_bf16f(nan)) && isnan(mn_round_f16f(nan)) && isnan(mn_round16_d(nan, MN_ROUND_BF16)));
    /* double inputs round once: a double just above a bf16 tie rounds up
     * (rounding it to float first would land on the tie and go to even) */
    CHECK(mn_round16_d(1.0 + 0x1p-8 + 0x1p-40, MN_ROUND_BF16) == 1.0 + 0x1p-7);
    CHECK(mn_round16_d(1.0 + 0x1p-11 + 0x1p-40, MN_ROUND_F16) == 1.0 + 0x1p-10);
    /* random bit patterns: the float functions equal the double rounding */
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int bad_b = 0, bad_h = 0;
    for (int i = 0; i < (1 << 20); i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        const float x = bits((uint32_t)s);
        bad_b += !same(mn_round_bf16f(x), (float)mn_round16_d(x, MN_ROUND_BF16));
        bad_h += !same(mn_round_f16f(x), (float)mn_round16_d(x, MN_ROUND_F16));
        /* idempotent, and the result is representable */
        bad_b += !same(mn_round_bf16f(mn_round_bf16f(x)), mn_round_bf16f(x)) ||
                 (!isnan(x) && (mn_f32_bits(mn_round_bf16f(x)) & 0xffffu) != 0);
        bad_h += !same(mn_round_f16f(mn_round_f16f(x)), mn_round_f16f(x));
    }
    CHECK_MSG(bad_b == 0 && bad_h == 0, "random patterns: %d bf16 and %d f16 disagreements", bad_b, bad_h);
}

/* ---- sessions -------------------------------------------------------------- */

static mn_session *open_s(const mn_graph *g, mn_backend_kind be, mn_precision p, bool f64) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = be == MN_BACKEND_VULKAN ? vk : NULL;
    o.precision = p;
    session_internal_options io = {0};
    io.f64 = f64;
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, g, &o, &io);
    CHECK_MSG(st == MN_OK, "session: %s", mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static float *rnd_vec(size_t n, uint64_t seed, float scale) {
    float *v = malloc(n * sizeof *v);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        v[i] = scale * ((float)(s >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
    }
    return v;
}

static double rel_l2(const float *a, const float *ref, size_t n) { return sqrt(th_nmse(a, ref, n)); }

/* The GLSL rounding's bits: y = x @ [1] (K = 1, N = 1: one product, exact)
 * for values of every kind, and the same through the right operand. */
static void test_glsl_bits(void) {
    if (!vk) return;
    static const uint32_t special[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f801000u, 0x3f803000u,
                                       0x477fe000u, 0x477fefffu, 0x477ff000u, 0xc7800000u, 0x33800000u,
                                       0x33000000u, 0x33400000u, 0x38800000u, 0x387fe000u, 0x387ff000u,
                                       0x7f7fffffu, 0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                       0x80000000u, 0x00000000u, 0x00800000u, 0x3a7fffffu};
    const int M = 4096;
    float *x = rnd_vec(M, 7, 1.0f);
    uint64_t s = 77;
    for (int i = 0; i < M; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        /* normal f32 values of every exponent (lavapipe flushes f32
         * subnormals, which round to 0 in f16 anyway) */
        uint32_t u = (uint32_t)s;
        if (((u >> 23) & 0xffu) == 0) u |= 0x00800000u;
        x[i] = i < (int)MN_ARRAY_LEN(special) ? bits(special[i]) : bits(u);
    }
    for (int p = 1; p <= 2; p++)
        for (int side = 0; side < 2; side++) {
            mn_graph *g;
            mn_graph_create(&g);
            mn_tensor a, b, y;
            CHECK_OK(mn_graph_input(g, &a, "a", MN_F32, 2, side ? (int64_t[]){1, 1} : (int64_t[]){M, 1}), "");
            CHECK_OK(mn_graph_input(g, &b, "b", MN_F32, 2, side ? (int64_t[]){1, M} : (int64_t[]){1, 1}), "");
            CHECK_OK(mn_matmul(g, &y, a, b), mn_graph_error(g));
            CHECK_OK(mn_graph_output(g, y, "y"), "");
            mn_session *sv = open_s(g, MN_BACKEND_VULKAN, (mn_precision)p, false);
            const float one = 1.0f;
            float *out = malloc(M * sizeof *out);
            if (sv) {
                CHECK_OK(mn_session_set_input(sv, "a", side ? &one : x, side ? 4 : M * 4), "");
                CHECK_OK(mn_session_set_input(sv, "b", side ? x : &one, side ? M * 4 : 4), "");
                CHECK_OK(mn_session_run(sv), mn_session_error(sv));
                CHECK_OK(mn_session_output(sv, "y", out, M * 4), "");
                int bad = 0;
                for (int i = 0; i < M; i++) {
                    const float want = mn_round16_f(x[i], (mn_round16)p);
                    /* 0 * x: +0 + (+-0) is +0 */
                    if (!same(out[i], want) && !(out[i] == 0 && want == 0)) {
                        if (bad++ < 4)
                            fprintf(stderr, "  %s side %d: round(%a) = %a on Vulkan, %a on the CPU\n",
                                    p == 1 ? "bf16" : "f16", side, (double)x[i], (double)out[i], (double)want);
                    }
                }
                CHECK_MSG(bad == 0, "GLSL %s rounding differs from the C rounding at %d of %d values",
                          p == 1 ? "bf16" : "f16", bad, M);
            }
            free(out);
            mn_session_destroy(sv);
            mn_graph_destroy(g);
        }
    free(x);
}

/* ---- the operand casts (session.c round_by_cast) --------------------------

 * C = A @ I with A [4096, 64]: large enough for the cooperative-matrix GEMM
 * where the device has it (then its operands are cast nodes and it
 * converts them by the device's conversion), so C's bits show that the
 * rounding is the reference's: every exponent, half the entries on a tie.
 * MEGANEURA_FAST_CAST=1 (the second ctest entry) casts on every device: on
 * lavapipe the schedule then runs each cast right before its product, a
 * parameter's cast before the parameter's update, and a trained step gives
 * the bits of the uncast session. */
/* The casts' memory: a deep MLP's saved activations are product operands
 * that tanh's backward also reads in f32; with one cast for the forward's
 * products and another for the backward's, their copies are transient, so
 * the training peak grows by a few operands at most, not by a copy of every
 * saved activation (L of them here). The parameters' 16-bit copies are
 * kept from the forward to the backward (one cast a step each; L of H x H
 * here). */
static void cast_memory(void) {
    enum { B = 512, H = 256, L = 8 };
    size_t peak[2] = {0, 0};
    for (int run = 0; run < 2; run++) {
        setenv("MEGANEURA_FAST_CAST", run ? "1" : "0", 1);
        mn_graph *g;
        mn_graph_create(&g);
        mn_tensor h, t, loss;
        mn_init un = {MN_INIT_UNIFORM, -0.1f, 0.1f};
        CHECK_OK(mn_graph_input(g, &h, "x", MN_F32, 2, (int64_t[]){B, H}), "");
        CHECK_OK(mn_graph_input(g, &t, "t", MN_F32, 2, (int64_t[]){B, H}), "");
        for (int l = 0; l < L; l++) {
            mn_tensor w;
            char name[16];
            snprintf(name, sizeof name, "w%d", l);
            CHECK_OK(mn_graph_param(g, &w, name, 2, (int64_t[]){H, H}, un), "");
            CHECK_OK(mn_matmul(g, &h, h, w), "");
            CHECK_OK(mn_tanh(g, &h, h), "");
        }
        CHECK_OK(mn_mse(g, &loss, h, t), "");
        CHECK_OK(mn_graph_loss(g, loss), "");
        mn_session_options o = mn_session_default_options();
        o.backend = MN_BACKEND_VULKAN, o.device = vk, o.mode = MN_MODE_TRAINING;
        o.precision = MN_PRECISION_FAST_BF16;
        o.optim = mn_optimizer_default(MN_OPTIM_SGD);
        mn_session *s = NULL;
        CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
        if (s) CHECK_OK(mn_session_memory(s, &peak[run], NULL), mn_session_error(s));
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
    const size_t op = (size_t)B * H * sizeof(float), wcopies = (size_t)L * H * H * 2;
    printf("cast memory: training peak %zu bytes without casts, %zu with (an operand: %zu, the weights' copies: "
           "%zu)\n", peak[0], peak[1], op, wcopies);
    /* packed casts (Vulkan: two values a word) measured +0.75 operands
     * besides the weights' copies; one cast a tensor for both passes,
     * activations included, gave +11.5 */
    CHECK_MSG(peak[0] > 0 && peak[1] <= peak[0] + op + wcopies,
              "the operand casts raise the training peak from %zu to %zu bytes (an operand is %zu, the weights' "
              "copies %zu)", peak[0], peak[1], op, wcopies);
}

static void test_cast_operands(void) {
    enum { M = 4096, K = 64 };
    const char *fc = getenv("MEGANEURA_FAST_CAST");
    const bool forced = fc && !strcmp(fc, "1");
    float *a = malloc(sizeof(float) * M * K), *id = calloc(K * K, sizeof(float)), *c = malloc(sizeof(float) * M * K);
    for (int k = 0; k < K; k++) id[k * K + k] = 1.0f;
    for (int p = 1; p <= 2; p++) {
        const mn_round16 rnd = (mn_round16)p;
        uint64_t s = 5;
        for (int i = 0; i < M * K; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            uint32_t u = (uint32_t)s;
            const uint32_t e = rnd == MN_ROUND_F16 ? 103 + (u >> 24) % 39 : 1 + (u >> 24) % 253;
            u = (u & 0x807fffffu) | (e << 23);
            if (i % 2) u = rnd == MN_ROUND_BF16 ? (u & 0xffff0000u) | 0x8000u : (u & 0xffffe000u) | 0x1000u;
            a[i] = bits(u);
        }
        for (int be = 0; be < 2; be++) {
            if (be && !vk) continue;
            mn_graph *g;
            mn_graph_create(&g);
            mn_tensor ta, tb, tc;
            CHECK_OK(mn_graph_input(g, &ta, "a", MN_F32, 2, (int64_t[]){M, K}), "");
            CHECK_OK(mn_graph_input(g, &tb, "b", MN_F32, 2, (int64_t[]){K, K}), "");
            CHECK_OK(mn_matmul(g, &tc, ta, tb), "");
            CHECK_OK(mn_graph_output(g, tc, "c"), "");
            mn_session *sv = open_s(g, be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, (mn_precision)p, false);
            if (sv) {
                CHECK_OK(mn_session_set_input(sv, "a", a, sizeof(float) * M * K), "");
                CHECK_OK(mn_session_set_input(sv, "b", id, sizeof(float) * K * K), "");
                CHECK_OK(mn_session_run(sv), mn_session_error(sv));
                CHECK_OK(mn_session_output(sv, "c", c, sizeof(float) * M * K), "");
                int bad = 0;
                for (int i = 0; i < M * K; i++) bad += !same(c[i], mn_round16_f(a[i], rnd));
                CHECK_MSG(bad == 0, "%s %s: C = round(A) @ I differs from the reference's rounding at %d of %d",
                          be ? "vulkan" : "cpu", p == 1 ? "bf16" : "f16", bad, M * K);
                char *buf = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&buf, &len);
                CHECK_OK(mn_session_dump(sv, "schedule", f), "");
                fclose(f);
                const char *cast = buf ? strstr(buf, "cast") : NULL, *mm = buf ? strstr(buf, "matmul") : NULL;
                if (forced && be) /* both operands cast, before the product */
                    CHECK_MSG(cast && mm && cast < mm && strstr(cast + 4, "cast") < mm,
                              "MEGANEURA_FAST_CAST=1: no casts before the product:\n%s", buf ? buf : "");
                if (!be) CHECK_MSG(!cast, "the CPU reference casts operands:\n%s", buf ? buf : "");
                free(buf);
            }
            mn_session_destroy(sv);
            mn_graph_destroy(g);
        }
    }
    free(a), free(id), free(c);
    if (!forced || !vk) return;
    /* training steps with and without the casts: the same bits. h2 = h1 @
     * w2 is read only by the next product and by w3's gradient, both
     * through one cast, so its product stores the cast's 16-bit values
     * itself (kir fuse_store16: a matmul epilogue; lavapipe has 16-bit
     * storage); tanh's output, which its backward reads, keeps its cast.
     * R = 1024 rows: autodiff splits each weight gradient over them in two
     * parts (views of the activation: its cast is shared through them) */
    enum { R = 1024 };
    float loss_of[2] = {0, 0}, *wv[2][3] = {{NULL, NULL, NULL}, {NULL, NULL, NULL}};
    const size_t nw[3] = {48 * 96, 96 * 96, 96 * 64};
    for (int run = 0; run < 2; run++) {
        setenv("MEGANEURA_FAST_CAST", run ? "1" : "0", 1);
        mn_graph *g;
        mn_graph_create(&g);
        mn_tensor x, w[3], h, y, t, loss;
        mn_init un = {MN_INIT_UNIFORM, -0.5f, 0.5f};
        CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){R, 48}), "");
        CHECK_OK(mn_graph_input(g, &t, "t", MN_F32, 2, (int64_t[]){R, 64}), "");
        CHECK_OK(mn_graph_param(g, &w[0], "w1", 2, (int64_t[]){48, 96}, un), "");
        CHECK_OK(mn_graph_param(g, &w[1], "w2", 2, (int64_t[]){96, 96}, un), "");
        CHECK_OK(mn_graph_param(g, &w[2], "w3", 2, (int64_t[]){96, 64}, un), "");
        CHECK_OK(mn_matmul(g, &h, x, w[0]), "");
        CHECK_OK(mn_tanh(g, &h, h), "");
        CHECK_OK(mn_matmul(g, &h, h, w[1]), "");
        CHECK_OK(mn_matmul(g, &y, h, w[2]), "");
        CHECK_OK(mn_mse(g, &loss, y, t), "");
        CHECK_OK(mn_graph_loss(g, loss), "");
        mn_session_options o = mn_session_default_options();
        o.backend = MN_BACKEND_VULKAN, o.device = vk, o.mode = MN_MODE_TRAINING, o.seed = 11;
        o.precision = MN_PRECISION_FAST_BF16;
        o.optim = mn_optimizer_default(MN_OPTIM_SGD);
        mn_session *s = NULL;
        CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
        float *xv = rnd_vec(R * 48, 3, 1.0f), *tv = rnd_vec(R * 64, 4, 1.0f);
        for (int j = 0; j < 3; j++) wv[run][j] = calloc(nw[j], sizeof(float));
        if (s) {
            char *buf = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            CHECK_OK(mn_session_dump(s, "kernels", f), "");
            fclose(f);
            bool stored = false; /* a line "kernel %c cast: %p matmul -> %c" */
            for (const char *l = buf ? strstr(buf, " cast: ") : NULL; l && !stored; l = strstr(l + 1, " cast: ")) {
                const char *eol = strchr(l, '\n'), *mm = strstr(l, " matmul -> ");
                stored = mm && (!eol || mm < eol);
            }
            if (run) /* the caps' 16-bit storage decides; lavapipe and the GPUs have it */
                CHECK_MSG(stored, "no product stores its cast's 16-bit values:\n%s", buf ? buf : "");
            free(buf);
            CHECK_OK(mn_session_set_input(s, "x", xv, sizeof(float) * R * 48), "");
            CHECK_OK(mn_session_set_input(s, "t", tv, sizeof(float) * R * 64), "");
            for (int step = 0; step < 3; step++) CHECK_OK(mn_session_step(s), mn_session_error(s));
            CHECK_OK(mn_session_loss(s, &loss_of[run]), "");
            for (int j = 0; j < 3; j++) {
                const char *nm[3] = {"w1", "w2", "w3"};
                CHECK_OK(mn_session_get_param(s, nm[j], wv[run][j], nw[j]), "");
            }
        }
        free(xv), free(tv);
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
    setenv("MEGANEURA_FAST_CAST", "1", 1);
    cast_memory();
    CHECK_MSG(same(loss_of[0], loss_of[1]), "three bf16 steps with casts and without: loss %a and %a",
              (double)loss_of[1], (double)loss_of[0]);
    for (int j = 0; j < 3; j++) {
        size_t bad = 0;
        for (size_t i = 0; i < nw[j]; i++) bad += !same(wv[0][j][i], wv[1][j][i]);
        CHECK_MSG(bad == 0, "three bf16 steps with casts and without: w%d differs at %zu of %zu", j + 1, bad, nw[j]);
        free(wv[0][j]), free(wv[1][j]);
    }
}

/* ---- a matmul case table --------------------------------------------------- */

typedef struct mm_case {
    int ra, rb;
    int64_t B, M, K, N;
    bool ta, tb;
} mm_case;

static void shape_of(int64_t *sh, int r, int64_t B, int64_t rows, int64_t cols, bool t) {
    int i = 0;
    if (r == 3) sh[i++] = B;
    sh[i++] = t ? cols : rows;
    sh[i++] = t ? rows : cols;
}

/* Vulkan vs the CPU emulation; fast vs strict differ by the rounding. */
static void test_matmul_table(void) {
    static const mm_case cases[] = {
        {2, 2, 1, 64, 96, 80, false, false}, {2, 2, 1, 33, 70, 45, true, false},
        {2, 2, 1, 33, 70, 45, true, true},   {3, 3, 3, 17, 40, 24, false, true},  /* batched */
        {3, 2, 4, 20, 48, 36, false, true},  {2, 3, 2, 12, 30, 28, true, false},  /* a shared operand */
        {2, 2, 1, 64, 784, 128, false, false},                                     /* K splits */
        /* large enough for cooperative matrices where the device has them */
        {2, 2, 1, 160, 96, 128, true, false}, {3, 3, 3, 96, 160, 80, false, true},
        {2, 2, 1, 128, 160, 96, true, true},
    };
    for (size_t c = 0; c < MN_ARRAY_LEN(cases); c++) {
        const mm_case *k = &cases[c];
        mn_graph *g;
        mn_graph_create(&g);
        int64_t sa[3], sb[3];
        shape_of(sa, k->ra, k->B, k->M, k->K, k->ta);
        shape_of(sb, k->rb, k->B, k->K, k->N, k->tb);
        mn_tensor a, b, y;
        CHECK_OK(mn_graph_input(g, &a, "a", MN_F32, k->ra, sa), mn_graph_error(g));
        CHECK_OK(mn_graph_input(g, &b, "b", MN_F32, k->rb, sb), mn_graph_error(g));
        CHECK_OK(mn_matmul_ex(g, &y, a, b, k->ta, k->tb), mn_graph_error(g));
        CHECK_OK(mn_graph_output(g, y, "y"), "");
        const size_t na = (size_t)(k->ra == 3 ? k->B : 1) * (size_t)(k->M * k->K);
        const size_t nb = (size_t)(k->rb == 3 ? k->B : 1) * (size_t)(k->K * k->N);
        const size_t ny = (size_t)((k->ra == 3 || k->rb == 3) ? k->B : 1) * (size_t)(k->M * k->N);
        float *xa = rnd_vec(na, 2 * c + 1, 1.0f), *xb = rnd_vec(nb, 2 * c + 2, 1.0f);
        float *res[3][2] = {{0}}; /* precision x backend */
        for (int p = 0; p < 3; p++)
            for (int be = 0; be < 2; be++) {
                if (be && (!vk || p == 0)) continue; /* strict on Vulkan: test_vulkan_ops */
                mn_session *s = open_s(g, be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, (mn_precision)p, false);
                if (!s) continue;
                res[p][be] = malloc(ny * sizeof(float));
                CHECK_OK(mn_session_set_input(s, "a", xa, na * 4), mn_session_error(s));
                CHECK_OK(mn_session_set_input(s, "b", xb, nb * 4), mn_session_error(s));
                CHECK_OK(mn_session_run(s), mn_session_error(s));
                CHECK_OK(mn_session_output(s, "y", res[p][be], ny * 4), mn_session_error(s));
                mn_session_destroy(s);
            }
        for (int p = 1; p < 3; p++) {
            /* one rounding of each operand: rel. error ~ 2 u sqrt-averaged,
             * u = 2^-9 (bf16) or 2^-12 (f16) */
            const double d = res[p][0] && res[0][0] ? rel_l2(res[p][0], res[0][0], ny) : 0;
            const double u = p == 1 ? 0x1p-9 : 0x1p-12;
            CHECK_MSG(d > 0.05 * u && d < 4 * u, "matmul case %zu %s: fast vs strict rel L2 %.3g, want about %.3g", c,
                      p == 1 ? "bf16" : "f16", d, u);
            if (res[p][1]) {
                /* the same rounded operands, summed in another order (and,
                 * on tensor cores, by another adder): the f32 sums' error,
                 * far below the rounding's 2^-9 / 2^-12 (on lavapipe ~1e-7) */
                const double e = rel_l2(res[p][1], res[p][0], ny);
                CHECK_MSG(e < 1e-5, "matmul case %zu %s: Vulkan vs CPU emulation rel L2 %.3g", c,
                          p == 1 ? "bf16" : "f16", e);
            }
        }
        for (int p = 0; p < 3; p++) free(res[p][0]), free(res[p][1]);
        free(xa);
        free(xb);
        mn_graph_destroy(g);
    }
}

/* A convolution large enough for the tensor-core GEMMs where the device
 * has them: y, dx, dw, db on Vulkan against the CPU emulation; with
 * split, a batch and image large enough that autodiff splits the weight
 * gradient into partial sums (wgrad_chunk; checked in the graph), grouped. */
static void test_conv_grads(bool split) {
    if (!vk) return;
    mn_graph *g;
    mn_graph_create(&g);
    mn_tensor x, w, b, y, t, loss;
    mn_init un = {MN_INIT_UNIFORM, -1.0f, 1.0f};
    const int64_t nb = split ? 4 : 2, hw = split ? 24 : 16, groups = split ? 2 : 1;
    CHECK_OK(mn_graph_param(g, &x, "x", 4, (int64_t[]){nb, 32, hw, hw}, un), "");
    CHECK_OK(mn_graph_param(g, &w, "w", 4, (int64_t[]){48, 32 / groups, 3, 3}, un), "");
    CHECK_OK(mn_graph_param(g, &b, "b", 1, (int64_t[]){48}, un), "");
    CHECK_OK(mn_graph_input(g, &t, "t", MN_F32, 4, (int64_t[]){nb, 48, hw, hw}), "");
    mn_conv2d_params cp = {{1, 1}, {1, 1}, {1, 1}, groups};
    CHECK_OK(mn_conv2d(g, &y, x, w, b, &cp), mn_graph_error(g));
    CHECK_OK(mn_mse(g, &loss, y, t), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, y, "y"), "");
    CHECK_OK(mn_graph_loss(g, loss), "");
    const size_t ny = (size_t)(nb * 48 * hw * hw);
    float *tv = rnd_vec(ny, 17, 4.0f);
    static const char *names[] = {"x", "w", "b"};
    for (int p = 1; p < 3; p++) {
        float *out[2][4] = {{0}};
        size_t cnt[4] = {ny, 0, 0, 0};
        for (int be = 0; be < 2; be++) {
            mn_session_options o = mn_session_default_options();
            o.backend = be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, o.device = be ? vk : NULL;
            o.precision = (mn_precision)p, o.mode = MN_MODE_TRAINING, o.seed = 8;
            session_internal_options io = {.grads_only = true};
            mn_session *s = NULL;
            CHECK_OK(session_create_ex(&s, g, &o, &io), mn_session_error(s));
            if (!mn_session_error(s)[0]) {
                bool chunked = false;
                for (int32_t i = 0; i < s->g->n; i++)
                    chunked |= s->g->nodes[i].op == OP_CONV2D_BWD_WEIGHT && wgrad_chunk_of(&s->g->nodes[i]) > 0;
                CHECK_MSG(chunked == split, "conv: the weight gradient is %ssplit", chunked ? "" : "not ");
                CHECK_OK(mn_session_set_input(s, "t", tv, ny * 4), "");
                CHECK_OK(session_forward_backward(s), mn_session_error(s));
                out[be][0] = malloc(ny * 4);
                CHECK_OK(mn_session_output(s, "y", out[be][0], ny * 4), "");
                for (int i = 0; i < 3; i++) {
                    const int32_t id = graph_find(s->g, names[i]);
                    cnt[1 + i] = (size_t)node_numel(&s->g->nodes[id]);
                    out[be][1 + i] = malloc(cnt[1 + i] * 4);
                    CHECK_OK(session_read_f32(s, session_grad_of(s, id), out[be][1 + i], cnt[1 + i]), "");
                }
            }
            mn_session_destroy(s);
        }
        static const char *what[] = {"y", "dx", "dw", "db"};
        /* y multiplies operands both sides hold bit for bit (x, w): only the
         * f32 sums' order differs. The gradients multiply dy, a value each
         * side computed in f32 (from y) and then rounded to 16 bits: where
         * the two f32 values straddle a rounding boundary they round one
         * 16-bit step apart (2^-8 for bf16), so the gate is the models'
         * (1e-4; run AH measured 2.6e-5 for bf16 dx of the grouped case) */
        for (int i = 0; i < 4; i++) {
            if (!out[0][i] || !out[1][i]) continue;
            const double e = rel_l2(out[1][i], out[0][i], cnt[i]);
            CHECK_MSG(e < (i == 0 ? 1e-5 : 1e-4), "conv%s %s %s: Vulkan vs CPU emulation rel L2 %.3g",
                      split ? " (split dw)" : "", p == 1 ? "bf16" : "f16", what[i], e);
        }
        for (int i = 0; i < 4; i++) free(out[0][i]), free(out[1][i]);
    }
    free(tv);
    mn_graph_destroy(g);
}

/* ---- attention: the fast contract's rounding (q, k, v, dout, P, dS) ----- */

/* y = attention(q, k, v) (grouped heads, causal, a window when asked) under
 * an MSE loss: y, dq, dk, dv of every backend and precision. */
typedef struct attn_case {
    int64_t B, Hq, Hkv, T, D, window;
} attn_case;

/* *tc (may be NULL): the device multiplies this rounding on cooperative
 * matrices (then the tensor-core attention kernel runs by default) */
static bool attn_run(float *out[4], size_t cnt[4], const attn_case *c, mn_backend_kind be, mn_precision p, bool *tc) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_tensor q, k, v, y, t, loss;
    mn_init un = {MN_INIT_UNIFORM, -1.0f, 1.0f};
    CHECK_OK(mn_graph_param(g, &q, "q", 4, (int64_t[]){c->B, c->Hq, c->T, c->D}, un), "");
    CHECK_OK(mn_graph_param(g, &k, "k", 4, (int64_t[]){c->B, c->Hkv, c->T, c->D}, un), "");
    CHECK_OK(mn_graph_param(g, &v, "v", 4, (int64_t[]){c->B, c->Hkv, c->T, c->D}, un), "");
    CHECK_OK(mn_graph_input(g, &t, "t", MN_F32, 4, (int64_t[]){c->B, c->Hq, c->T, c->D}), "");
    /* scores of a few units: the weights spread over many keys */
    mn_attention_params ap = {.causal = true, .window = c->window, .scale = 4.0f / sqrtf((float)c->D)};
    CHECK_OK(mn_attention(g, &y, q, k, v, MN_NONE, &ap), mn_graph_error(g));
    CHECK_OK(mn_mse(g, &loss, y, t), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, y, "y"), "");
    CHECK_OK(mn_graph_loss(g, loss), "");
    const size_t ny = (size_t)(c->B * c->Hq * c->T * c->D);
    float *tv = rnd_vec(ny, 23, 1.0f);
    mn_session_options o = mn_session_default_options();
    o.backend = be, o.device = be == MN_BACKEND_VULKAN ? vk : NULL;
    o.precision = p, o.mode = MN_MODE_TRAINING, o.seed = 5;
    session_internal_options io = {.grads_only = true};
    mn_session *s = NULL;
    bool ok = false;
    CHECK_OK(session_create_ex(&s, g, &o, &io), mn_session_error(s));
    if (!mn_session_error(s)[0]) {
        /* every attention kernel of a fast session rounds (the dump's
         * operands=); with the casts forced, q, k, v, dout are casts */
        const char *fc = getenv("MEGANEURA_FAST_CAST");
        const mn_dtype dt = p == MN_PRECISION_FAST_BF16 ? MN_BF16 : MN_F16;
        const int rnd = p == MN_PRECISION_FAST_BF16 ? MN_ROUND_BF16 : MN_ROUND_F16;
        const bool auto_casts = s->device && s->device->impl && s->be->casts_operands &&
                                s->be->casts_operands(s->device->impl, rnd); /* a GPU with tensor cores */
        if (tc) *tc = auto_casts;
        const bool casts = be == MN_BACKEND_VULKAN && p != MN_PRECISION_STRICT &&
                           (fc && *fc ? !strcmp(fc, "1") : auto_casts);
        for (int32_t i = 0; i < s->g->n; i++) {
            const node *n = &s->g->nodes[i];
            if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_BWD_Q && n->op != OP_ATTENTION_BWD_KV) continue;
            CHECK_MSG((node_round16(n) != MN_ROUND_NONE) == (p != MN_PRECISION_STRICT),
                      "attention: node %d rounds %d under precision %d", (int)i, (int)node_round16(n), (int)p);
            for (int j = 0; j < node_round_ins(n); j++) {
                const node *x = &s->g->nodes[n->in[j]];
                CHECK_MSG((x->op == OP_CAST && x->dtype == dt) == casts, "attention: node %d input %d is %sa cast",
                          (int)i, j, casts ? "not " : "");
            }
        }
        CHECK_OK(mn_session_set_input(s, "t", tv, ny * 4), "");
        CHECK_OK(session_forward_backward(s), mn_session_error(s));
        cnt[0] = ny;
        out[0] = malloc(ny * 4);
        CHECK_OK(mn_session_output(s, "y", out[0], ny * 4), "");
        static const char *names[] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++) {
            const int32_t id = graph_find(s->g, names[i]);
            cnt[1 + i] = (size_t)node_numel(&s->g->nodes[id]);
            out[1 + i] = malloc(cnt[1 + i] * 4);
            CHECK_OK(session_read_f32(s, session_grad_of(s, id), out[1 + i], cnt[1 + i]), "");
        }
        ok = true;
    }
    mn_session_destroy(s);
    free(tv);
    mn_graph_destroy(g);
    return ok;
}

/* Vulkan (the row kernel and the tile kernel, forced by MEGANEURA_ATTN; on
 * a GPU with cooperative matrices the tensor-core kernel where it takes the
 * shape) against the CPU emulation, and the emulation against the strict
 * CPU: the fast result differs from the strict one by what the rounding
 * predicts (bf16: about 2^-9 a value), far more than the Vulkan-vs-CPU
 * gate, so a backend that skipped any of the roundings fails. */
static void test_attention(void) {
    static const attn_case cases[] = {
        {2, 4, 2, 80, 64, 0},  /* GQA, causal, a partial last block */
        {1, 3, 1, 136, 32, 48}, /* a sliding window, D 32 */
    };
    /* tiles+casts: the tile kernel on operands the session cast (the GPU's
     * graph, MEGANEURA_FAST_CAST=1): no rounding in its loads, same values;
     * coopmat: the tensor-core kernel required (a session error if any
     * attention node does not take it), on devices that have one */
    static const char *const kern[] = {"auto", "rows", "tiles", "tiles+casts", "coopmat"};
    static const char *const what[] = {"y", "dq", "dk", "dv"};
    for (size_t ci = 0; ci < MN_ARRAY_LEN(cases); ci++) {
        const attn_case *c = &cases[ci];
        float *strict[4] = {0};
        size_t cnt[4] = {0};
        attn_run(strict, cnt, c, MN_BACKEND_CPU, MN_PRECISION_STRICT, NULL);
        for (int p = 1; p < 3; p++) {
            float *cpu[4] = {0};
            if (!attn_run(cpu, cnt, c, MN_BACKEND_CPU, (mn_precision)p, NULL)) continue;
            for (int i = 0; i < 4; i++) {
                if (!strict[i]) continue;
                const double e = rel_l2(cpu[i], strict[i], cnt[i]);
                /* bf16 / f16 operands and weights: measured 2.4e-3 .. 6.1e-3 /
                 * 3.0e-4 .. 1.9e-3 (2026-12-06) */
                const double lo = p == 1 ? 1e-3 : 1e-4, hi = p == 1 ? 2e-2 : 5e-3;
                CHECK_MSG(e > lo && e < hi, "attention case %zu %s %s: fast vs strict CPU rel L2 %.3g (want %.0e .. %.0e)",
                          ci, p == 1 ? "bf16" : "f16", what[i], e, lo, hi);
            }
            bool tc = false;
            for (size_t kk = 0; vk && kk < MN_ARRAY_LEN(kern); kk++) {
                if (kk == 4 && !tc) continue; /* no cooperative matrices (lavapipe) */
                setenv("MEGANEURA_ATTN", kk == 3 ? "tiles" : kern[kk], 1);
                if (kk == 3) setenv("MEGANEURA_FAST_CAST", "1", 1);
                float *gpu[4] = {0};
                size_t gcnt[4] = {0};
                if (attn_run(gpu, gcnt, c, MN_BACKEND_VULKAN, (mn_precision)p, kk == 0 ? &tc : NULL))
                    for (int i = 0; i < 4; i++) {
                        /* the forward's weights are rounded against a running
                         * power of two (the CPU: the row's), which gives the same
                         * values except f16 subnormals (weights below 2^-14 of the
                         * reference); f32 sums against double: measured at most
                         * 2.0e-5 (bf16) and 4.6e-5 (f16) on lavapipe, 1.1e-4
                         * (f16 dq) on an H100; the fast rule itself moves them
                         * 12-300x more in bf16 (the runs that catch a rounding
                         * skipped), 1-40x in f16 */
                        const double e = rel_l2(gpu[i], cpu[i], cnt[i]);
                        CHECK_MSG(e < (p == 1 ? 2e-4 : 3e-4), "attention case %zu %s %s (%s kernel): Vulkan vs CPU emulation rel L2 %.3g",
                                  ci, p == 1 ? "bf16" : "f16", what[i], kern[kk], e);
                    }
                for (int i = 0; i < 4; i++) free(gpu[i]);
            }
            unsetenv("MEGANEURA_ATTN");
            unsetenv("MEGANEURA_FAST_CAST");
            for (int i = 0; i < 4; i++) free(cpu[i]);
        }
        for (int i = 0; i < 4; i++) free(strict[i]);
    }
}

/* ---- models: forward and every gradient --------------------------------- */

/* x [16, 48] -> 64 -> relu -> 32 -> relu -> 10 classes; or a CNN
 * x [4, 3, 12, 12] -> conv 3x3 pad 1 (8, bias) -> relu -> conv 3x3 stride 2
 * in 2 groups (12) -> relu -> flatten [4, 300] -> 10. */
static mn_graph *build_model(bool cnn, const char **params, int *np) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_tensor x, lab, h, loss, w, b;
    mn_init ku = {MN_INIT_KAIMING_UNIFORM, 0, 0}, un = {MN_INIT_UNIFORM, -0.1f, 0.1f};
    *np = 0;
    if (!cnn) {
        CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){16, 48}), "");
        static const char *names[] = {"w1", "b1", "w2", "b2", "w3", "b3"};
        const int64_t dims[] = {48, 64, 32, 10};
        h = x;
        for (int l = 0; l < 3; l++) {
            CHECK_OK(mn_graph_param(g, &w, names[2 * l], 2, (int64_t[]){dims[l], dims[l + 1]}, ku), "");
            CHECK_OK(mn_graph_param(g, &b, names[2 * l + 1], 1, (int64_t[]){dims[l + 1]}, un), "");
            CHECK_OK(mn_matmul(g, &h, h, w), mn_graph_error(g));
            CHECK_OK(mn_add(g, &h, h, b), mn_graph_error(g));
            if (l < 2) CHECK_OK(mn_relu(g, &h, h), "");
            params[(*np)++] = names[2 * l], params[(*np)++] = names[2 * l + 1];
        }
    } else {
        CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 4, (int64_t[]){4, 3, 12, 12}), "");
        mn_tensor w1, b1, w2, w3;
        CHECK_OK(mn_graph_param(g, &w1, "c1.w", 4, (int64_t[]){8, 3, 3, 3}, ku), "");
        CHECK_OK(mn_graph_param(g, &b1, "c1.b", 1, (int64_t[]){8}, un), "");
        CHECK_OK(mn_graph_param(g, &w2, "c2.w", 4, (int64_t[]){12, 4, 3, 3}, ku), "");
        CHECK_OK(mn_graph_param(g, &w3, "fc.w", 2, (int64_t[]){12 * 5 * 5, 10}, ku), "");
        mn_conv2d_params p1 = {{1, 1}, {1, 1}, {1, 1}, 1}, p2 = {{2, 2}, {0, 0}, {1, 1}, 2};
        CHECK_OK(mn_conv2d(g, &h, x, w1, b1, &p1), mn_graph_error(g));
        CHECK_OK(mn_relu(g, &h, h), "");
        CHECK_OK(mn_conv2d(g, &h, h, w2, MN_NONE, &p2), mn_graph_error(g));
        CHECK_OK(mn_relu(g, &h, h), "");
        CHECK_OK(mn_reshape(g, &h, h, 2, (int64_t[]){4, 12 * 5 * 5}), mn_graph_error(g));
        CHECK_OK(mn_matmul(g, &h, h, w3), mn_graph_error(g));
        static const char *names[] = {"c1.w", "c1.b", "c2.w", "fc.w"};
        for (int i = 0; i < 4; i++) params[(*np)++] = names[i];
    }
    const int64_t batch = cnn ? 4 : 16;
    CHECK_OK(mn_graph_input(g, &lab, "labels", MN_I32, 1, (int64_t[]){batch}), "");
    CHECK_OK(mn_cross_entropy(g, &loss, h, lab), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, h, "logits"), "");
    CHECK_OK(mn_graph_loss(g, loss), "");
    return g;
}

typedef struct run_out {
    float loss, logits[160];
    float *grad[8];
    size_t ngrad[8];
} run_out;

static bool grads_run(run_out *r, mn_graph *g, bool cnn, const char **params, int np, mn_backend_kind be,
                      mn_precision p, bool f64) {
    mn_session_options o = mn_session_default_options();
    o.backend = be, o.device = be == MN_BACKEND_VULKAN ? vk : NULL, o.precision = p, o.mode = MN_MODE_TRAINING;
    o.seed = 5;
    session_internal_options io = {.f64 = f64, .grads_only = true};
    mn_session *s = NULL;
    mn_status st = session_create_ex(&s, g, &o, &io);
    CHECK_MSG(st == MN_OK, "grads session: %s", mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return false;
    }
    const size_t nx = cnn ? 4 * 3 * 12 * 12 : 16 * 48, batch = cnn ? 4 : 16;
    float *x = rnd_vec(nx, 99, 1.0f);
    int32_t lab[16];
    for (size_t i = 0; i < batch; i++) lab[i] = (int32_t)(i * 7 % 10);
    CHECK_OK(mn_session_set_input(s, "x", x, nx * 4), mn_session_error(s));
    CHECK_OK(mn_session_set_input(s, "labels", lab, batch * 4), mn_session_error(s));
    CHECK_OK(session_forward_backward(s), mn_session_error(s));
    CHECK_OK(mn_session_loss(s, &r->loss), mn_session_error(s));
    CHECK_OK(mn_session_output(s, "logits", r->logits, batch * 10 * 4), mn_session_error(s));
    for (int i = 0; i < np; i++) {
        const int32_t id = graph_find(s->g, params[i]);
        const int32_t gid = session_grad_of(s, id);
        r->ngrad[i] = (size_t)node_numel(&s->g->nodes[id]);
        r->grad[i] = malloc(r->ngrad[i] * sizeof(float));
        CHECK_MSG(gid != MN_NONE, "no gradient for %s", params[i]);
        if (gid != MN_NONE) CHECK_OK(session_read_f32(s, gid, r->grad[i], r->ngrad[i]), mn_session_error(s));
    }
    free(x);
    mn_session_destroy(s);
    return true;
}

static void free_run(run_out *r, int np) {
    for (int i = 0; i < np; i++) free(r->grad[i]);
}

static void test_models(void) {
    for (int cnn = 0; cnn < 2; cnn++) {
        const char *params[8];
        int np = 0;
        mn_graph *g = build_model(cnn, params, &np);
        const size_t nl = cnn ? 40 : 160;
        run_out strict = {0};
        CHECK(grads_run(&strict, g, cnn, params, np, MN_BACKEND_CPU, MN_PRECISION_STRICT, false));
        for (int p = 1; p < 3; p++) {
            const char *pn = p == 1 ? "bf16" : "f16";
            run_out cpu = {0}, cpu64 = {0}, gpu = {0};
            const bool have_cpu = grads_run(&cpu, g, cnn, params, np, MN_BACKEND_CPU, (mn_precision)p, false);
            const bool have_64 = grads_run(&cpu64, g, cnn, params, np, MN_BACKEND_CPU, (mn_precision)p, true);
            const bool have_vk = vk && grads_run(&gpu, g, cnn, params, np, MN_BACKEND_VULKAN, (mn_precision)p, false);
            /* the fast run is not the strict one: the rounding is there, and small */
            const double d = have_cpu ? rel_l2(cpu.logits, strict.logits, nl) : 0;
            CHECK_MSG(d > 1e-5 && d < (p == 1 ? 2e-2 : 3e-3), "%s %s: logits fast vs strict rel L2 %.3g",
                      cnn ? "cnn" : "mlp", pn, d);
            /* gradients move more (ReLU units whose pre-activation changes
             * sign pass or stop a whole term; test_backward_rounding checks
             * the backward products exactly) */
            for (int i = 0; i < np && have_cpu; i++) {
                const double dg = rel_l2(cpu.grad[i], strict.grad[i], cpu.ngrad[i]);
                CHECK_MSG(dg > 1e-6 && dg < (p == 1 ? 0.3 : 0.05), "%s %s: d%s fast vs strict rel L2 %.3g",
                          cnn ? "cnn" : "mlp", pn, params[i], dg);
                if (have_64) {
                    const double e = rel_l2(cpu.grad[i], cpu64.grad[i], cpu.ngrad[i]);
                    CHECK_MSG(e < 1e-5, "%s %s: d%s f32 vs f64 emulation rel L2 %.3g", cnn ? "cnn" : "mlp", pn,
                              params[i], e);
                }
                if (have_vk) {
                    const double e = rel_l2(gpu.grad[i], cpu.grad[i], cpu.ngrad[i]);
                    CHECK_MSG(e < 1e-4, "%s %s: d%s Vulkan vs CPU rel L2 %.3g", cnn ? "cnn" : "mlp", pn, params[i], e);
                }
            }
            if (have_vk) {
                const double e = rel_l2(gpu.logits, cpu.logits, nl);
                CHECK_MSG(e < 1e-5, "%s %s: logits Vulkan vs CPU rel L2 %.3g", cnn ? "cnn" : "mlp", pn, e);
                CHECK_NEAR(gpu.loss, cpu.loss, 1e-5 * fabs(cpu.loss));
            }
            free_run(&cpu, np), free_run(&cpu64, np), free_run(&gpu, np);
        }
        free_run(&strict, np);
        mn_graph_destroy(g);
    }
}

/* The backward products round their operands: for y = x @ W and the loss
 * mean((y - t)^2), dW = x^T dy and dx = dy W^T with x, W and dy rounded,
 * summed here in double from the session's own y. */
static void backward_rounding(int M, int K, int N) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_tensor x, w, t, y, loss;
    mn_init un = {MN_INIT_UNIFORM, -1.0f, 1.0f};
    CHECK_OK(mn_graph_param(g, &x, "x", 2, (int64_t[]){M, K}, un), "");
    CHECK_OK(mn_graph_param(g, &w, "w", 2, (int64_t[]){K, N}, un), "");
    CHECK_OK(mn_graph_input(g, &t, "t", MN_F32, 2, (int64_t[]){M, N}), "");
    CHECK_OK(mn_matmul(g, &y, x, w), "");
    CHECK_OK(mn_mse(g, &loss, y, t), mn_graph_error(g));
    CHECK_OK(mn_graph_output(g, y, "y"), "");
    CHECK_OK(mn_graph_loss(g, loss), "");
    float *tv = rnd_vec((size_t)(M * N), 41, 3.0f);
    for (int be = 0; be < 2; be++)
        for (int p = 1; p < 3 && (!be || vk); p++) {
            mn_session_options o = mn_session_default_options();
            o.backend = be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, o.device = be ? vk : NULL;
            o.precision = (mn_precision)p, o.mode = MN_MODE_TRAINING, o.seed = 3;
            session_internal_options io = {.grads_only = true};
            mn_session *s = NULL;
            CHECK_OK(session_create_ex(&s, g, &o, &io), mn_session_error(s));
            if (mn_session_error(s)[0]) {
                mn_session_destroy(s);
                continue;
            }
            float *xv = malloc(sizeof(float) * (size_t)(M * K)), *wv = malloc(sizeof(float) * (size_t)(K * N));
            float *yv = malloc(sizeof(float) * (size_t)(M * N)), *gx = malloc(sizeof(float) * (size_t)(M * K));
            float *gw = malloc(sizeof(float) * (size_t)(K * N));
            CHECK_OK(mn_session_set_input(s, "t", tv, sizeof(float) * (size_t)(M * N)), "");
            CHECK_OK(session_forward_backward(s), mn_session_error(s));
            CHECK_OK(mn_session_get_param(s, "x", xv, M * K), "");
            CHECK_OK(mn_session_get_param(s, "w", wv, K * N), "");
            CHECK_OK(mn_session_output(s, "y", yv, sizeof(float) * (size_t)(M * N)), "");
            CHECK_OK(session_read_f32(s, session_grad_of(s, graph_find(s->g, "x")), gx, M * K), "");
            CHECK_OK(session_read_f32(s, session_grad_of(s, graph_find(s->g, "w")), gw, K * N), "");
            const mn_round16 r = (mn_round16)p;
            double ew = 0, nw = 0, ex = 0, nx = 0;
            for (int k = 0; k < K; k++)
                for (int j = 0; j < N; j++) {
                    double acc = 0;
                    for (int i = 0; i < M; i++) {
                        const float dy = 2.0f * (yv[i * N + j] - tv[i * N + j]) / (float)(M * N);
                        acc += (double)mn_round16_f(xv[i * K + k], r) * mn_round16_f(dy, r);
                    }
                    ew += (gw[k * N + j] - acc) * (gw[k * N + j] - acc), nw += acc * acc;
                }
            for (int i = 0; i < M; i++)
                for (int k = 0; k < K; k++) {
                    double acc = 0;
                    for (int j = 0; j < N; j++) {
                        const float dy = 2.0f * (yv[i * N + j] - tv[i * N + j]) / (float)(M * N);
                        acc += (double)mn_round16_f(dy, r) * mn_round16_f(wv[k * N + j], r);
                    }
                    ex += (gx[i * K + k] - acc) * (gx[i * K + k] - acc), nx += acc * acc;
                }
            CHECK_MSG(sqrt(ew / nw) < 1e-5 && sqrt(ex / nx) < 1e-5,
                      "%dx%dx%d %s %s: backward products vs rounded operands: dW rel L2 %.3g, dx %.3g", M, K, N,
                      be ? "vulkan" : "cpu", p == 1 ? "bf16" : "f16", sqrt(ew / nw), sqrt(ex / nx));
            free(xv), free(wv), free(yv), free(gx), free(gw);
            mn_session_destroy(s);
        }
    free(tv);
    mn_graph_destroy(g);
}

/* small (FMA kernels everywhere) and large enough for cooperative matrices
 * where the device has them */
static void test_backward_rounding(void) {
    backward_rounding(24, 40, 20);
    backward_rounding(64, 96, 80);
}

/* ---- training ------------------------------------------------------------- */

/* 120 Adam steps of the MLP on a fixed synthetic task (labels from a random
 * linear teacher); the mean loss of the last 20 steps in fast mode is within
 * 3% of the strict run's. */
static void train_curve(mn_backend_kind be, mn_precision p, double *last, double *first) {
    const char *params[8];
    int np;
    mn_graph *g = build_model(false, params, &np);
    mn_session_options o = mn_session_default_options();
    o.backend = be, o.device = be == MN_BACKEND_VULKAN ? vk : NULL, o.precision = p, o.mode = MN_MODE_TRAINING;
    o.optim = mn_optimizer_default(MN_OPTIM_ADAM);
    o.optim.lr = 3e-3f;
    o.seed = 11;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    float *teacher = rnd_vec(48 * 10, 3, 1.0f);
    *last = *first = 0;
    for (int step = 0; step < 120 && s; step++) {
        float *x = rnd_vec(16 * 48, (uint64_t)(1000 + step % 30), 1.0f);
        int32_t lab[16];
        for (int i = 0; i < 16; i++) {
            int best = 0;
            float bv = -1e30f;
            for (int c = 0; c < 10; c++) {
                float v = 0;
                for (int j = 0; j < 48; j++) v += x[i * 48 + j] * teacher[j * 10 + c];
                if (v > bv) bv = v, best = c;
            }
            lab[i] = best;
        }
        CHECK_OK(mn_session_set_input(s, "x", x, sizeof(float) * 16 * 48), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "labels", lab, sizeof lab), mn_session_error(s));
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        float l = 0;
        mn_session_loss(s, &l);
        if (step < 20) *first += l / 20;
        if (step >= 100) *last += l / 20;
        free(x);
    }
    free(teacher);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void test_training(void) {
    double strict, s0, fast, f0;
    train_curve(MN_BACKEND_CPU, MN_PRECISION_STRICT, &strict, &s0);
    CHECK_MSG(strict < 0.6 * s0, "strict: the loss did not fall (%.4f -> %.4f)", s0, strict);
    /* f16 and bf16 on the CPU, bf16 on Vulkan (against the CPU's strict
     * run: the strict backends agree to ~1e-6, test_vulkan_ops) */
    for (int run = 0; run < 3; run++) {
        const bool gpu = run == 2;
        if (gpu && !vk) continue;
        const mn_precision p = run == 1 ? MN_PRECISION_FAST_F16 : MN_PRECISION_FAST_BF16;
        train_curve(gpu ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, p, &fast, &f0);
        CHECK_MSG(fabs(fast - strict) <= 0.03 * strict, "%s %s: mean loss of the last 20 steps %.5f, strict %.5f",
                  gpu ? "vulkan" : "cpu", mn_precision_name(p), fast, strict);
    }
}

/* ---- the option ----------------------------------------------------------- */

static void test_option(void) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_tensor a, b, y;
    CHECK_OK(mn_graph_input(g, &a, "a", MN_F32, 2, (int64_t[]){4, 4}), "");
    CHECK_OK(mn_graph_input(g, &b, "b", MN_F32, 2, (int64_t[]){4, 4}), "");
    CHECK_OK(mn_matmul(g, &y, a, b), "");
    CHECK_OK(mn_graph_output(g, y, "y"), "");
    mn_session_options o = mn_session_default_options();
    CHECK(o.precision == MN_PRECISION_STRICT);
    o.precision = (mn_precision)7;
    mn_session *s = NULL;
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID && strstr(mn_session_error(s), "unknown precision 7"));
    mn_session_destroy(s);
    CHECK(!strcmp(mn_precision_name(MN_PRECISION_FAST_BF16), "bf16") &&
          !strcmp(mn_precision_name(MN_PRECISION_FAST_F16), "f16") &&
          !strcmp(mn_precision_name(MN_PRECISION_STRICT), "strict") && !strcmp(mn_precision_name((mn_precision)9), "?"));
    o.precision = MN_PRECISION_FAST_F16;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_OK(mn_session_dump(s, "graph", f), "");
    fclose(f);
    CHECK_MSG(buf && strstr(buf, "matmul") && strstr(buf, "operands=f16"), "the dump does not mark the matmul:\n%s",
              buf ? buf : "");
    free(buf);
    mn_session_destroy(s);
    s = NULL;
    /* a malformed MEGANEURA_FAST_CAST fails a fast session, naming it */
    const char *fc = getenv("MEGANEURA_FAST_CAST");
    char *keep = fc ? strdup(fc) : NULL;
    setenv("MEGANEURA_FAST_CAST", "yes", 1);
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID && strstr(mn_session_error(s), "MEGANEURA_FAST_CAST='yes'"));
    mn_session_destroy(s);
    if (keep) setenv("MEGANEURA_FAST_CAST", keep, 1);
    else unsetenv("MEGANEURA_FAST_CAST");
    free(keep);
    /* and a malformed MEGANEURA_CAST_STORAGE, on any backend */
    const char *cs = getenv("MEGANEURA_CAST_STORAGE");
    keep = cs ? strdup(cs) : NULL;
    setenv("MEGANEURA_CAST_STORAGE", "half", 1);
    s = NULL;
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID && strstr(mn_session_error(s), "MEGANEURA_CAST_STORAGE='half'"));
    mn_session_destroy(s);
    if (keep) setenv("MEGANEURA_CAST_STORAGE", keep, 1);
    else unsetenv("MEGANEURA_CAST_STORAGE");
    free(keep);
    mn_graph_destroy(g);
}

int main(void) {
    test_rounding_values();
    test_option();
    vk = th_require_vulkan();
    test_glsl_bits();
    test_cast_operands();
    test_matmul_table();
    test_conv_grads(false);
    test_conv_grads(true);
    test_attention();
    test_models();
    test_backward_rounding();
    test_training();
    mn_device_close(vk);
    return th_finish("test_fast_contract");
}
