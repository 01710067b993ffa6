/* test_vla.c - the SmolVLA action-expert builder (src/models/vla.c).
 *
 * 1. SmolVLA's configuration (hidden 720, 16 layers, 15/5 heads of 64, FFN
 *    2048, KV dim 320, chunk 50, VLM 16) builds with the parameter count of
 *    its definition and the names (layers.1.self_attn.k_proj reads 320).
 * 2. A tiny expert: every gradient against central differences of the f64
 *    CPU session (through the time embedding, RoPE, self- and
 *    cross-attention, the flow-matching interpolation and loss).
 * 3. The same model on CPU and Vulkan: velocity and loss rel L2 <= 1e-5,
 *    every parameter gradient <= 1e-4.
 * 4. mn_vla_sample equals the documented Euler loop bit for bit; bad calls
 *    are refused; training on one batch lowers the loss.
 */
#include "models_util.h"

static void check_full_size(void) {
    mn_vla_config c = mn_vla_config_smolvla();
    mn_graph *g;
    mn_graph_create(&g);
    mn_model *m = NULL;
    mn_vla_options o = mn_vla_default_options();
    CHECK_OK(mn_vla_create(&m, g, &c, &o), mn_model_error(m));
    const int64_t H = 720, Q = 15 * 64, KV = 5 * 64, F = 2048, A = 32;
    int64_t want = (A * H + H) + (2 * H * H + H) + (H * H + H) + H + (H * A + A);
    for (int l = 0; l < 16; l++) want += 2 * H + 2 * H * Q + 2 * KV * (l % 2 ? 320 : H) + 3 * H * F;
    printf("SmolVLA action expert: %lld parameters (definition: %lld)\n", (long long)mn_model_numel(m), (long long)want);
    CHECK(mn_model_numel(m) == want);
    const mn_hf_param *p = mn_model_params(m);
    bool cross = false, self = false;
    for (int i = 0; i < mn_model_param_count(m); i++) {
        cross |= !strcmp(p[i].name, "layers.1.self_attn.k_proj.weight") && p[i].shape[0] == 320 && p[i].shape[1] == 320;
        self |= !strcmp(p[i].name, "layers.0.self_attn.v_proj.weight") && p[i].shape[0] == 320 && p[i].shape[1] == 720;
    }
    CHECK_MSG(cross && self, "k/v projections of the self and cross layers have the wrong shapes");
    mn_model_destroy(m);
    c.heads = 7; /* not a multiple of the kv heads */
    CHECK(mn_vla_create(&m, g, &c, &o) == MN_E_INVALID && strstr(mn_model_error(m), "heads 7"));
    mn_model_destroy(m);
    mn_graph_destroy(g);
}

typedef struct tiny {
    mn_graph *g;
    mn_model *m;
    float actions[2 * 5 * 3], noise[2 * 5 * 3], t[2], vlm[2 * 4 * 6];
    mu_input in[4];
} tiny;

static mn_vla_config tiny_config(void) {
    mn_vla_config c = mn_vla_config_smolvla();
    c.hidden = 16, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.ffn = 24, c.action_dim = 3;
    c.chunk = 5, c.vlm_len = 4, c.kv_dim = 6;
    return c;
}

static void tiny_build(tiny *x, mn_vla_kind kind) {
    memset(x, 0, sizeof *x);
    mn_vla_config c = tiny_config();
    mn_vla_options o = mn_vla_default_options();
    o.kind = kind;
    o.batch = 2;
    mn_graph_create(&x->g);
    CHECK_OK(mn_vla_create(&x->m, x->g, &c, &o), mn_model_error(x->m));
    mu_fill(x->actions, 30, 1, -1, 1);
    mu_fill(x->noise, 30, 2, -1, 1);
    mu_fill(x->vlm, 48, 3, -2, 2);
    x->t[0] = 0.9f, x->t[1] = 0.25f;
    x->in[0] = (mu_input){"actions", x->actions, sizeof x->actions};
    x->in[1] = (mu_input){"noise", x->noise, sizeof x->noise};
    x->in[2] = (mu_input){"timesteps", x->t, sizeof x->t};
    x->in[3] = (mu_input){"vlm", x->vlm, sizeof x->vlm};
}

static void check_sampling(void) {
    tiny x;
    tiny_build(&x, MN_VLA_INFER);
    mn_session *s = lu_session(x.g, MN_BACKEND_CPU, NULL, MN_MODE_INFERENCE, NULL);
    if (!s) return;
    float a[30], b[30], v[30], tt[2];
    memcpy(a, x.noise, sizeof a);
    memcpy(b, x.noise, sizeof b);
    CHECK_OK(mn_vla_sample(x.m, s, a, 10, x.vlm), mn_model_error(x.m));
    mn_session_set_input(s, "vlm", x.vlm, sizeof x.vlm);
    const float dt = -1.0f / 10;
    for (int i = 0; i < 10; i++) {
        tt[0] = tt[1] = 1.0f + (float)i * dt;
        mn_session_set_input(s, "x", b, sizeof b);
        mn_session_set_input(s, "timesteps", tt, sizeof tt);
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        mn_session_output(s, "velocity", v, sizeof v);
        for (int k = 0; k < 30; k++) b[k] += dt * v[k];
    }
    CHECK_MSG(!memcmp(a, b, sizeof a), "mn_vla_sample differs from the documented Euler loop");
    CHECK(mn_vla_sample(x.m, s, a, 0, x.vlm) == MN_E_INVALID);
    CHECK(mn_vla_sample(x.m, s, a, 10, NULL) == MN_E_INVALID && strstr(mn_model_error(x.m), "VLM"));
    mn_session_destroy(s);
    mn_model_destroy(x.m);
    mn_graph_destroy(x.g);
    /* the sampler refuses a training model, and a model of another kind */
    tiny_build(&x, MN_VLA_TRAIN);
    CHECK(mn_vla_sample(x.m, (mn_session *)1, a, 10, x.vlm) == MN_E_INVALID);
    CHECK(mn_unet_ddim(x.m, (mn_session *)1, a, 1, NULL, (const double[]){1}, 1) == MN_E_STATE &&
          strstr(mn_model_error(x.m), "not a U-Net"));
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAMW);
    opt.lr = 3e-3f;
    s = lu_session(x.g, MN_BACKEND_CPU, NULL, MN_MODE_TRAINING, &opt);
    float first = 0, last = 0;
    for (int i = 0; s && i < 30; i++) {
        mu_set_inputs(s, x.in, 4);
        CHECK_OK(mn_session_step(s), mn_session_error(s));
        mn_session_loss(s, i ? &last : &first);
    }
    printf("action expert, 30 AdamW steps on one batch: loss %.4f -> %.4f\n", first, last);
    CHECK_MSG(last < 0.5f * first, "the loss did not fall: %.4f -> %.4f", first, last);
    mn_session_destroy(s);
    mn_model_destroy(x.m);
    mn_graph_destroy(x.g);
}

int main(void) {
    check_full_size();
    check_sampling();
    tiny x;
    tiny_build(&x, MN_VLA_TRAIN);
    static const char *names[] = {"action_in_proj.weight",          "action_time_mlp_in.weight",
                                  "action_time_mlp_out.bias",       "layers.0.self_attn.q_proj.weight",
                                  "layers.0.self_attn.k_proj.weight", "layers.1.self_attn.k_proj.weight",
                                  "layers.1.self_attn.v_proj.weight", "layers.2.mlp.gate_proj.weight",
                                  "layers.1.post_attention_layernorm.weight", "norm.weight",
                                  "action_out_proj.weight"};
    mu_gradcheck("action expert", x.g, x.m, x.in, 4, names, 11, 3, 1e-5);
    mn_device *dev = th_require_vulkan();
    const char *outs[] = {"velocity"};
    const size_t counts[] = {30};
    if (dev) mu_compare_backends("action expert", x.g, x.m, dev, x.in, 4, outs, counts, 1, 1e-5, 1e-4);
    mn_device_close(dev);
    mn_model_destroy(x.m);
    mn_graph_destroy(x.g);
    return th_finish("test_vla");
}
