/* test_unet.c - the diffusion U-Net builder (src/models/unet.c).
 *
 * 1. The paper's simplified U-Net at base 64 has the parameters of
 *    bench/torch_anchors.py's UNet(4, 64, 3, 16) (counted here from its
 *    definition: 5,293,952 with GroupNorm affine parameters; WORKLOADS.md says
 *    ~2M for the paper's, which this definition does not give), and the names.
 * 2. Tiny simplified and conditioned U-Nets (time embedding through sin/cos
 *    in the graph, self- and cross-attention): every gradient the backward
 *    rules give agrees with central differences of the f64 CPU session,
 *    through all of it (timesteps up to 999, so the sin/cos arguments are
 *    large).
 * 3. The same models on CPU and Vulkan (lavapipe), same weights and inputs:
 *    prediction and loss rel L2 <= 1e-5, every parameter gradient <= 1e-4.
 * 4. The schedule (Stable Diffusion's scaled-linear betas), forward noising,
 *    and DDIM: mn_unet_ddim gives the documented update bit for bit (a loop
 *    written here over the same session) and steps = T with a model that
 *    predicts the true noise recovers x0.
 * 5. Training: 30 Adam steps on a fixed batch lower the loss (CPU).
 */
#include "models_util.h"

#define B 2

static int64_t resblock_params(int64_t ci, int64_t co, bool bias, int64_t temb) {
    int64_t n = 2 * ci + 9 * ci * co + 2 * co + 9 * co * co + (ci != co ? ci * co : 0);
    if (bias) n += co + co + (ci != co ? co : 0);
    if (temb) n += temb * co + co;
    return n;
}

static void check_counts(void) {
    mn_unet_config c = mn_unet_config_simple(64);
    const int64_t b = 64;
    int64_t want = 4 * 9 * b + 9 * b * 4; /* cin, out */
    want += resblock_params(b, b, false, 0) + resblock_params(b, 2 * b, false, 0) + resblock_params(2 * b, 4 * b, false, 0);
    want += 9 * b * b + 9 * 4 * b * b;                     /* down.0, down.1 */
    want += resblock_params(4 * b, 4 * b, false, 0);       /* mid */
    want += resblock_params(8 * b, 4 * b, false, 0) + resblock_params(6 * b, 2 * b, false, 0) +
            resblock_params(3 * b, b, false, 0);           /* dec */
    mn_graph *g;
    mn_graph_create(&g);
    mn_model *m = NULL;
    mn_unet_options o = mn_unet_default_options();
    CHECK_OK(mn_unet_create(&m, g, &c, &o), mn_model_error(m));
    printf("simplified U-Net, base 64: %lld parameters (formula: %lld)\n", (long long)mn_model_numel(m), (long long)want);
    CHECK_MSG(mn_model_numel(m) == want, "simplified U-Net: %lld parameters, the definition has %lld",
              (long long)mn_model_numel(m), (long long)want);
    CHECK(want == 5293952);
    const mn_hf_param *p = mn_model_params(m);
    bool r = false, down = false;
    for (int i = 0; i < mn_model_param_count(m); i++) {
        r |= !strcmp(p[i].name, "dec.2.r.weight") && p[i].shape[0] == 64 && p[i].shape[1] == 192;
        down |= !strcmp(p[i].name, "down.1.weight");
    }
    CHECK_MSG(r && down, "torch_anchors names missing");
    mn_model_destroy(m);
    mn_graph_destroy(g);
    /* the conditioned one builds at full size too */
    c = mn_unet_config_conditioned(64);
    mn_graph_create(&g);
    CHECK_OK(mn_unet_create(&m, g, &c, &o), mn_model_error(m));
    printf("conditioned U-Net, base 64: %lld parameters\n", (long long)mn_model_numel(m));
    CHECK(mn_model_tensor(m, "context") != MN_NONE && mn_model_tensor(m, "timesteps") != MN_NONE);
    mn_model_destroy(m);
    mn_graph_destroy(g);
    /* bad configs are refused */
    c = mn_unet_config_simple(64);
    c.groups = 7;
    mn_graph_create(&g);
    CHECK(mn_unet_create(&m, g, &c, &o) == MN_E_INVALID && strstr(mn_model_error(m), "groups 7"));
    mn_model_destroy(m);
    o.height = 30; /* not divisible by 4 */
    c = mn_unet_config_simple(64);
    CHECK(mn_unet_create(&m, g, &c, &o) == MN_E_INVALID && strstr(mn_model_error(m), "30 x 32"));
    mn_model_destroy(m);
    mn_graph_destroy(g);
}

typedef struct tiny {
    mn_graph *g;
    mn_model *m;
    mn_unet_config c;
    float noisy[B * 3 * 8 * 8], noise[B * 3 * 8 * 8], t[B], ctx[B * 5 * 6];
    mu_input in[4];
    int nin;
} tiny;

static void tiny_build(tiny *x, bool conditioned, mn_unet_kind kind) {
    memset(x, 0, sizeof *x);
    x->c = conditioned ? mn_unet_config_conditioned(8) : mn_unet_config_simple(8);
    x->c.in_channels = 3;
    x->c.levels = 2;
    x->c.groups = 4;
    x->c.head_dim = 4;
    x->c.attention_levels = conditioned ? 0x2 : 0;
    x->c.context_len = 5;
    x->c.context_dim = 6;
    mn_unet_options o = mn_unet_default_options();
    o.kind = kind;
    o.height = o.width = 8;
    mn_graph_create(&x->g);
    CHECK_OK(mn_unet_create(&x->m, x->g, &x->c, &o), mn_model_error(x->m));
    mu_fill(x->noisy, sizeof x->noisy / 4, 1, -2, 2);
    mu_fill(x->noise, sizeof x->noise / 4, 2, -1, 1);
    mu_fill(x->ctx, sizeof x->ctx / 4, 3, -1, 1);
    x->t[0] = 999, x->t[1] = 37;
    x->in[x->nin++] = (mu_input){"noisy", x->noisy, sizeof x->noisy};
    if (kind == MN_UNET_TRAIN) x->in[x->nin++] = (mu_input){"noise", x->noise, sizeof x->noise};
    if (conditioned) {
        x->in[x->nin++] = (mu_input){"timesteps", x->t, sizeof x->t};
        x->in[x->nin++] = (mu_input){"context", x->ctx, sizeof x->ctx};
    }
}

static void tiny_free(tiny *x) {
    mn_model_destroy(x->m);
    mn_graph_destroy(x->g);
}

static void check_gradients(mn_device *dev) {
    tiny x;
    tiny_build(&x, false, MN_UNET_TRAIN);
    static const char *simple[] = {"cin.weight", "enc.0.n1.weight", "enc.1.r.weight", "down.0.weight",
                                   "mid.c2.weight", "dec.0.c1.weight", "dec.1.n2.bias", "out.weight"};
    mu_gradcheck("simplified", x.g, x.m, x.in, x.nin, simple, 8, 3, 1e-5);
    const char *outs[] = {"pred"};
    const size_t counts[] = {B * 3 * 8 * 8};
    if (dev) mu_compare_backends("simplified", x.g, x.m, dev, x.in, x.nin, outs, counts, 1, 1e-5, 1e-4);
    tiny_free(&x);
    tiny_build(&x, true, MN_UNET_TRAIN);
    static const char *cond[] = {"time.0.weight", "time.2.bias", "enc.0.t.weight", "enc_attn.1.attn1.to_q.weight",
                                 "enc_attn.1.attn2.to_k.weight", "enc_attn.1.attn2.to_v.weight", "mid_attn.ff.0.weight",
                                 "mid_attn.ln2.weight", "dec_attn.0.attn1.to_out.bias", "dec.1.c1.bias", "out.bias"};
    mu_gradcheck("conditioned", x.g, x.m, x.in, x.nin, cond, 11, 3, 1e-5);
    if (dev) mu_compare_backends("conditioned", x.g, x.m, dev, x.in, x.nin, outs, counts, 1, 1e-5, 1e-4);
    tiny_free(&x);
}

static void check_sampling(void) {
    enum { T = 1000 };
    static double ac[T];
    CHECK_OK(mn_diffusion_schedule(ac, T, 0.00085, 0.012, true), "schedule");
    CHECK_NEAR(ac[0], 1 - 0.00085, 1e-15);
    bool down = true;
    for (int i = 1; i < T; i++) down = down && ac[i] < ac[i - 1];
    CHECK(down && ac[T - 1] > 0.004 && ac[T - 1] < 0.0055);
    CHECK(mn_diffusion_schedule(ac, T, 0.5, 0.1, false) == MN_E_INVALID);
    mn_diffusion_schedule(ac, T, 0.00085, 0.012, true);

    tiny x;
    tiny_build(&x, true, MN_UNET_INFER);
    mn_session *s = lu_session(x.g, MN_BACKEND_CPU, NULL, MN_MODE_INFERENCE, NULL);
    if (!s) return;
    enum { N = B * 3 * 8 * 8, STEPS = 4 };
    float a[N], b[N], eps[N], tt[B];
    memcpy(a, x.noisy, sizeof a);
    memcpy(b, x.noisy, sizeof b);
    CHECK_OK(mn_unet_ddim(x.m, s, a, STEPS, x.ctx, ac, T), mn_model_error(x.m));
    /* the documented loop: t = 750, 500, 250, 0 */
    mn_session_set_input(s, "context", x.ctx, sizeof x.ctx);
    for (int i = STEPS - 1; i >= 0; i--) {
        const int t = i * (T / STEPS);
        tt[0] = tt[1] = (float)t;
        mn_session_set_input(s, "noisy", b, sizeof b);
        mn_session_set_input(s, "timesteps", tt, sizeof tt);
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        mn_session_output(s, "pred", eps, sizeof eps);
        const double at = ac[t], ap = t >= T / STEPS ? ac[t - T / STEPS] : 1.0;
        for (int k = 0; k < N; k++) {
            const double x0 = (b[k] - sqrt(1 - at) * eps[k]) / sqrt(at);
            b[k] = (float)(sqrt(ap) * x0 + sqrt(1 - ap) * eps[k]);
        }
    }
    CHECK_MSG(!memcmp(a, b, sizeof a), "mn_unet_ddim differs from the documented update");
    bool finite = true;
    for (int k = 0; k < N; k++) finite = finite && isfinite(a[k]);
    CHECK(finite);
    CHECK(mn_unet_ddim(x.m, s, a, 0, x.ctx, ac, T) == MN_E_INVALID);
    CHECK(mn_unet_ddim(x.m, s, a, 4, NULL, ac, T) == MN_E_INVALID && strstr(mn_model_error(x.m), "context"));
    mn_session_destroy(s);
    tiny_free(&x);
    /* noising: t = 0 keeps nearly all of x0, t = 999 nearly all noise */
    float x0[4] = {1, 2, 3, 4}, nz[4] = {-1, 0, 1, 2}, out[4];
    int32_t ts[2] = {0, 999};
    CHECK_OK(mn_diffusion_add_noise(out, x0, nz, ts, 2, 2, ac, T), "add_noise");
    CHECK_NEAR(out[0], sqrt(ac[0]) * 1 + sqrt(1 - ac[0]) * -1, 1e-6);
    CHECK_NEAR(out[3], sqrt(ac[999]) * 4 + sqrt(1 - ac[999]) * 2, 1e-6);
    ts[1] = 1000;
    CHECK(mn_diffusion_add_noise(out, x0, nz, ts, 2, 2, ac, T) == MN_E_INVALID);
}

static void check_training(void) {
    tiny x;
    tiny_build(&x, true, MN_UNET_TRAIN);
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAM);
    opt.lr = 3e-3f;
    mn_session *s = lu_session(x.g, MN_BACKEND_CPU, NULL, MN_MODE_TRAINING, &opt);
    float first = 0, last = 0;
    for (int i = 0; s && i < 30; i++) {
        mu_set_inputs(s, x.in, x.nin);
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        mn_session_loss(s, i ? &last : &first);
    }
    printf("conditioned U-Net, 30 Adam steps on one batch: loss %.4f -> %.4f\n", first, last);
    CHECK_MSG(last < 0.7f * first, "the loss did not fall: %.4f -> %.4f", first, last);
    mn_session_destroy(s);
    tiny_free(&x);
}

int main(void) {
    check_counts();
    check_sampling();
    check_training();
    mn_device *dev = th_require_vulkan();
    check_gradients(dev);
    mn_device_close(dev);
    return th_finish("test_unet");
}
