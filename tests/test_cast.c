/* test_cast.c - 16-bit dtypes at the graph's edges and mn_cast, on the CPU
 * and on Vulkan (lavapipe here; the Vulkan part is skipped with a SKIP line
 * when no device opens).
 *
 *  - cast to f16 and bf16 of values at the formats' edges (ties, the largest
 *    finite values and the first that overflow, subnormals, -0, inf, NaN)
 *    equals core/round16.h's rounding bit for bit; an f16/bf16 output is
 *    read as 16-bit encodings (2 bytes a value); a cast back to f32 is exact;
 *  - f16 and bf16 inputs take 16-bit encodings (a wrong byte count names the
 *    dtype and the size), and an op on them reads their values and gives f32;
 *  - the gradient through a cast is rounded to the cast's dtype (SGD with
 *    lr 1 moves the weight by exactly the rounded gradient);
 *  - matmul(cast(a, bf16), cast(b, bf16)) in strict f32 equals matmul(a, b)
 *    under the fast bf16 contract, bit for bit (the same operand rounding);
 *  - Vulkan gives the CPU's bits; casts to i32 and casts of i32 are refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/round16.h"
#include "harness.h"
#include "state_util.h"

#define S(...) (const int64_t[]){__VA_ARGS__}

static const float EDGE[] = {
    1.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 65504.0f, 65519.0f,
    65520.0f, 1e5f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 1e-8f, 6.1e-5f, -0.0f, 0.0f, INFINITY, -INFINITY, NAN,
    3.3e38f, 0x1.ffp127f, 1e-40f, 0.1f, -7.77e-3f, 1234.5678f,
};
#define NE ((int)MN_ARRAY_LEN(EDGE))

static bool same_f(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

static mn_device *g_vk;

static mn_session *open_s(const mn_graph *g, mn_backend_kind be, mn_mode mode, mn_precision prec) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = be == MN_BACKEND_VULKAN ? g_vk : NULL;
    o.mode = mode;
    o.precision = prec;
    o.optim = mn_optimizer_default(MN_OPTIM_SGD);
    o.optim.lr = 1.0f;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    CHECK_OK(st, mn_session_error(s));
    if (st) mn_session_destroy(s), s = NULL;
    return s;
}

static const char *bk(mn_backend_kind b) { return b == MN_BACKEND_VULKAN ? "vulkan" : "cpu"; }

/* Casts of the edge values; f16 and bf16 inputs. */
static void forward(mn_backend_kind be) {
    mn_graph *g = NULL;
    mn_tensor x, h, b, z, xh, xb, y, yb;
    mn_status st = mn_graph_create(&g);
    st = st ? st : mn_graph_input(g, &x, "x", MN_F32, 1, S(NE));
    st = st ? st : mn_cast(g, &h, x, MN_F16);
    st = st ? st : mn_cast(g, &b, x, MN_BF16);
    st = st ? st : mn_cast(g, &z, h, MN_F32);
    st = st ? st : mn_graph_input(g, &xh, "xh", MN_F16, 1, S(NE));
    st = st ? st : mn_graph_input(g, &xb, "xb", MN_BF16, 1, S(NE));
    st = st ? st : mn_scale(g, &y, xh, 2.0f);
    st = st ? st : mn_add(g, &yb, xb, x);
    st = st ? st : mn_graph_output(g, h, "h");
    st = st ? st : mn_graph_output(g, b, "b");
    st = st ? st : mn_graph_output(g, z, "z");
    st = st ? st : mn_graph_output(g, y, "y");
    st = st ? st : mn_graph_output(g, yb, "yb");
    CHECK_OK(st, mn_graph_error(g));
    mn_session *s = st ? NULL : open_s(g, be, MN_MODE_INFERENCE, MN_PRECISION_STRICT);
    if (s) {
        uint16_t eh[NE], eb[NE], oh[NE], ob[NE];
        float of[NE], oy[NE], oyb[NE];
        for (int i = 0; i < NE; i++) eh[i] = mn_f16_encode(EDGE[i]), eb[i] = mn_bf16_encode(EDGE[i]);
        CHECK_OK(mn_session_set_input(s, "x", EDGE, sizeof EDGE), mn_session_error(s));
        mn_status bad = mn_session_set_input(s, "xh", EDGE, sizeof EDGE); /* 4 bytes a value: refused */
        CHECK(bad == MN_E_SHAPE);
        char want[64];
        snprintf(want, sizeof want, "f16 [%d] = %d bytes", NE, 2 * NE);
        CHECK_HAS(mn_session_error(s), want);
        CHECK_OK(mn_session_set_input(s, "xh", eh, sizeof eh), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "xb", eb, sizeof eb), mn_session_error(s));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        CHECK(mn_session_output(s, "h", of, sizeof of) == MN_E_SHAPE); /* a 16-bit output is 2 bytes a value */
        CHECK_OK(mn_session_output(s, "h", oh, sizeof oh), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "b", ob, sizeof ob), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "z", of, sizeof of), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "y", oy, sizeof oy), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "yb", oyb, sizeof oyb), mn_session_error(s));
        int wrong = 0;
        for (int i = 0; i < NE; i++) {
            const float rh = mn_round_f16f(EDGE[i]), rb = mn_round_bf16f(EDGE[i]);
            const bool ok = oh[i] == eh[i] && ob[i] == eb[i] && same_f(mn_f16_decode(oh[i]), rh) &&
                            same_f(mn_bf16_decode(ob[i]), rb) && same_f(of[i], rh) && same_f(oy[i], 2.0f * rh) &&
                            same_f(oyb[i], rb + EDGE[i]);
            if (!ok && wrong++ < 4)
                th_fail(__FILE__, __LINE__, "%s: x = %a: f16 %04x (want %04x), bf16 %04x (want %04x), z %a (want %a), "
                        "y %a (want %a), yb %a (want %a)", bk(be), (double)EDGE[i], oh[i], eh[i], ob[i], eb[i],
                        (double)of[i], (double)rh, (double)oy[i], 2.0 * rh, (double)oyb[i], (double)(rb + EDGE[i]));
        }
        CHECK_MSG(wrong == 0, "%s: %d of %d edge values cast wrongly", bk(be), wrong, NE);
        CHECK(oh[8] == 0x7c00 && oh[7] == 0x7bff && oh[10] == 0x0001 && oh[11] == 0 && oh[12] == 1);
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* d/dw sum(cast(w, f16) * c) = c rounded to f16. */
static void backward(mn_backend_kind be) {
    mn_graph *g = NULL;
    mn_tensor c, w, wh, p, loss;
    mn_status st = mn_graph_create(&g);
    st = st ? st : mn_graph_input(g, &c, "c", MN_F32, 1, S(4));
    st = st ? st : mn_graph_param(g, &w, "w", 1, S(4), (mn_init){MN_INIT_CONSTANT, 4.0f, 0});
    st = st ? st : mn_cast(g, &wh, w, MN_F16);
    st = st ? st : mn_mul(g, &p, wh, c);
    st = st ? st : mn_sum(g, &loss, p, MN_ALL_AXES, false);
    st = st ? st : mn_graph_loss(g, loss);
    CHECK_OK(st, mn_graph_error(g));
    mn_session *s = st ? NULL : open_s(g, be, MN_MODE_TRAINING, MN_PRECISION_STRICT);
    if (s) {
        const float cv[4] = {1.0f + 0x1p-12f, 1.0f + 3 * 0x1p-11f, 0x1p-26f, -2.0f - 0x1p-10f};
        float wv[4];
        CHECK_OK(mn_session_set_input(s, "c", cv, sizeof cv), mn_session_error(s));
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        CHECK_OK(mn_session_get_param(s, "w", wv, 4), mn_session_error(s));
        for (int i = 0; i < 4; i++)
            CHECK_MSG(same_f(wv[i], 4.0f - mn_round_f16f(cv[i])), "%s: w[%d] = %a after a step, want 4 - %a", bk(be),
                      i, (double)wv[i], (double)mn_round_f16f(cv[i]));
    }
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

/* The fast bf16 contract is a matmul of bf16 casts. */
static void contract(mn_backend_kind be) {
    enum { M = 5, K = 7, N = 3 };
    float a[M * K], b[K * N], y1[M * N], y2[M * N];
    for (int i = 0; i < M * K; i++) a[i] = sinf(0.37f * (float)i + 0.1f) * 3.0f;
    for (int i = 0; i < K * N; i++) b[i] = cosf(0.91f * (float)i) / 7.0f;
    for (int v = 0; v < 2; v++) {
        mn_graph *g = NULL;
        mn_tensor ta, tb, ca, cb, y;
        mn_status st = mn_graph_create(&g);
        st = st ? st : mn_graph_input(g, &ta, "a", MN_F32, 2, S(M, K));
        st = st ? st : mn_graph_input(g, &tb, "b", MN_F32, 2, S(K, N));
        if (v == 0) {
            st = st ? st : mn_cast(g, &ca, ta, MN_BF16);
            st = st ? st : mn_cast(g, &cb, tb, MN_BF16);
            st = st ? st : mn_matmul(g, &y, ca, cb);
        } else {
            st = st ? st : mn_matmul(g, &y, ta, tb);
        }
        st = st ? st : mn_graph_output(g, y, "y");
        CHECK_OK(st, mn_graph_error(g));
        mn_session *s = st ? NULL : open_s(g, be, MN_MODE_INFERENCE, v ? MN_PRECISION_FAST_BF16 : MN_PRECISION_STRICT);
        if (s) {
            CHECK_OK(mn_session_set_input(s, "a", a, sizeof a), mn_session_error(s));
            CHECK_OK(mn_session_set_input(s, "b", b, sizeof b), mn_session_error(s));
            CHECK_OK(mn_session_run(s), mn_session_error(s));
            CHECK_OK(mn_session_output(s, "y", v ? y2 : y1, sizeof y1), mn_session_error(s));
        }
        mn_session_destroy(s);
        mn_graph_destroy(g);
    }
    CHECK_MSG(!memcmp(y1, y2, sizeof y1), "%s: matmul of bf16 casts differs from the fast bf16 contract's matmul",
              bk(be));
}

static void refusals(void) {
    mn_graph *g = NULL;
    mn_tensor x, ids, t;
    CHECK_OK(mn_graph_create(&g), "create");
    CHECK_OK(mn_graph_input(g, &x, "x", MN_F32, 1, S(3)), mn_graph_error(g));
    CHECK_OK(mn_graph_input(g, &ids, "ids", MN_I32, 1, S(3)), mn_graph_error(g));
    CHECK(mn_cast(g, &t, x, MN_I32) == MN_E_DTYPE);
    CHECK_HAS(mn_graph_error(g), "cast: to i32");
    CHECK(mn_cast(g, &t, x, (mn_dtype)9) == MN_E_DTYPE);
    CHECK(mn_cast(g, &t, ids, MN_F16) == MN_E_DTYPE);
    CHECK_HAS(mn_graph_error(g), "float tensor");
    CHECK(mn_graph_param(g, &t, "w", 1, S(3), (mn_init){MN_INIT_ZEROS, 0, 0}) == MN_OK);
    mn_graph_destroy(g);
}

int main(void) {
    mn_set_log(NULL, NULL);
    refusals();
    const mn_backend_kind bes[2] = {MN_BACKEND_CPU, MN_BACKEND_VULKAN};
    for (int i = 0; i < 2; i++) {
        if (bes[i] == MN_BACKEND_VULKAN && !(g_vk = th_require_vulkan())) break;
        forward(bes[i]);
        backward(bes[i]);
        contract(bes[i]);
    }
    mn_device_close(g_vk);
    return th_finish("test_cast");
}
