/* vla.c - SmolVLA's action expert built through the public API: a
 * Llama-style transformer over the action chunk whose odd layers attend to
 * the VLM's features, trained by flow matching and sampled by Euler steps
 * (layout in meganeura_models.h; N = B*T rows, T the chunk, S the VLM
 * tokens).
 *
 * Does not: include anything below meganeura.h, run the VLM (its features
 * are an input), normalise actions or states.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

typedef struct vla {
    mn_vla_config c;
    mn_vla_options o;
    float *v_buf, *t_buf;
} vla;

mn_vla_config mn_vla_config_smolvla(void) {
    mn_vla_config c;
    memset(&c, 0, sizeof c);
    c.hidden = 720;
    c.layers = 16;
    c.heads = 15;
    c.kv_heads = 5;
    c.head_dim = 64;
    c.ffn = 2048;
    c.action_dim = 32;
    c.chunk = 50;
    c.vlm_len = 16;
    c.kv_dim = 320;
    c.rms_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.min_period = 4e-3f;
    c.max_period = 4.0f;
    return c;
}

mn_vla_options mn_vla_default_options(void) {
    mn_vla_options o;
    memset(&o, 0, sizeof o);
    o.kind = MN_VLA_TRAIN;
    o.batch = 1;
    return o;
}

typedef struct vb {
    mb b;
    const vla *v;
    mn_tensor vlm; /* [B*S, kv_dim] */
} vb;

static mn_status rms(vb *x, mn_tensor *out, mn_tensor h, const char *name) {
    mn_tensor w;
    MB_TRY(mb_param(&x->b, &w, name, 1, MB_S(x->v->c.hidden), (mn_init){MN_INIT_CONSTANT, 1, 0}));
    return mb_ok(&x->b, mn_rms_norm(x->b.g, out, h, w, x->v->c.rms_eps));
}

/* rows [B*T, heads*Dh] -> [B, heads, T, Dh] */
static mn_status to_heads(vb *x, mn_tensor *out, mn_tensor rows, int64_t T, int64_t heads) {
    mb *b = &x->b;
    MB_TRY(mb_ok(b, mn_reshape(b->g, out, rows, 4, MB_S(x->v->o.batch, T, heads, x->v->c.head_dim))));
    return mb_ok(b, mn_permute(b->g, out, *out, (const int[]){0, 2, 1, 3}));
}

static mn_status layer(vb *x, mn_tensor *h, int l) {
    mb *b = &x->b;
    const mn_vla_config *c = &x->v->c;
    const int64_t B = x->v->o.batch, T = c->chunk, N = B * T, H = c->hidden, Dh = c->head_dim;
    const bool cross = l % 2 == 1;
    char nm[96];
    mn_tensor a, q, k, v, o, mm, gate, up, act, down;
#define N_(s) (snprintf(nm, sizeof nm, "layers.%d.%s", l, s), nm)
    mb_where(b, "layer %d (%s-attention)", l, cross ? "cross" : "self");
    MB_TRY(rms(x, &a, *h, N_("input_layernorm.weight")));
    MB_TRY(mb_linear(b, &q, a, N_("self_attn.q_proj"), c->heads * Dh, H, false));
    if (cross) {
        MB_TRY(mb_linear(b, &k, x->vlm, N_("self_attn.k_proj"), c->kv_heads * Dh, c->kv_dim, false));
        MB_TRY(mb_linear(b, &v, x->vlm, N_("self_attn.v_proj"), c->kv_heads * Dh, c->kv_dim, false));
    } else {
        MB_TRY(mb_linear(b, &k, a, N_("self_attn.k_proj"), c->kv_heads * Dh, H, false));
        MB_TRY(mb_linear(b, &v, a, N_("self_attn.v_proj"), c->kv_heads * Dh, H, false));
    }
    const int64_t Tk = cross ? c->vlm_len : T;
    MB_TRY(to_heads(x, &q, q, T, c->heads));
    MB_TRY(to_heads(x, &k, k, Tk, c->kv_heads));
    MB_TRY(to_heads(x, &v, v, Tk, c->kv_heads));
    if (!cross) {
        MB_TRY(mb_ok(b, mn_rope(b->g, &q, q, MN_NONE, c->rope_theta, 0)));
        MB_TRY(mb_ok(b, mn_rope(b->g, &k, k, MN_NONE, c->rope_theta, 0)));
    }
    MB_TRY(mb_ok(b, mn_attention(b->g, &o, q, k, v, MN_NONE, NULL)));
    MB_TRY(mb_ok(b, mn_permute(b->g, &o, o, (const int[]){0, 2, 1, 3})));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &o, o, 2, MB_S(N, c->heads * Dh))));
    MB_TRY(mb_linear(b, &o, o, N_("self_attn.o_proj"), H, c->heads * Dh, false));
    MB_TRY(mb_ok(b, mn_add(b->g, h, *h, o)));
    mb_where(b, "layer %d (the MLP)", l);
    MB_TRY(rms(x, &mm, *h, N_("post_attention_layernorm.weight")));
    MB_TRY(mb_linear(b, &gate, mm, N_("mlp.gate_proj"), c->ffn, H, false));
    MB_TRY(mb_linear(b, &up, mm, N_("mlp.up_proj"), c->ffn, H, false));
    MB_TRY(mb_ok(b, mn_swiglu(b->g, &act, gate, up)));
    MB_TRY(mb_linear(b, &down, act, N_("mlp.down_proj"), H, c->ffn, false));
#undef N_
    return mb_ok(b, mn_add(b->g, h, *h, down));
}

static mn_status build(mn_model *m, vla *v) {
    const mn_vla_config *c = &v->c;
    const mn_vla_options *o = &v->o;
    vb x;
    mb_init(&x.b, m, o->freeze, o->freeze_user);
    x.v = v;
    mb *b = &x.b;
    const int64_t B = o->batch, T = c->chunk, A = c->action_dim, H = c->hidden, N = B * T, half = H / 2;
    mn_tensor actions = MN_NONE, noise = MN_NONE, xt, tau, vlm, h, e, w, t3, one_m, a1, a2, vel, loss;
    if (o->kind == MN_VLA_TRAIN) {
        MB_TRY(mb_ok(b, mn_graph_input(b->g, &actions, "actions", MN_F32, 3, MB_S(B, T, A))));
        MB_TRY(mb_ok(b, mn_graph_input(b->g, &noise, "noise", MN_F32, 3, MB_S(B, T, A))));
    } else MB_TRY(mb_ok(b, mn_graph_input(b->g, &xt, "x", MN_F32, 3, MB_S(B, T, A))));
    MB_TRY(mb_ok(b, mn_graph_input(b->g, &tau, "timesteps", MN_F32, 1, MB_S(B))));
    MB_TRY(mb_ok(b, mn_graph_input(b->g, &vlm, "vlm", MN_F32, 3, MB_S(B, c->vlm_len, c->kv_dim))));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &x.vlm, vlm, 2, MB_S(B * c->vlm_len, c->kv_dim))));
    if (o->kind == MN_VLA_TRAIN) { /* x_t = tau noise + (1 - tau) actions */
        mb_where(b, "the flow-matching interpolation");
        mn_tensor one;
        MB_TRY(mb_ok(b, mn_reshape(b->g, &t3, tau, 3, MB_S(B, 1, 1))));
        MB_TRY(mb_ok(b, mn_mul(b->g, &a1, noise, t3)));
        MB_TRY(mb_ok(b, mn_graph_scalar(b->g, &one, 1.0f)));
        MB_TRY(mb_ok(b, mn_sub(b->g, &one_m, one, t3)));
        MB_TRY(mb_ok(b, mn_mul(b->g, &a2, actions, one_m)));
        MB_TRY(mb_ok(b, mn_add(b->g, &xt, a1, a2)));
    }
    /* the time embedding: sin | cos of tau * 2 pi / period */
    mb_where(b, "the time embedding");
    float *wv = malloc((size_t)half * sizeof *wv);
    if (!wv) {
        model_set_err(m, "vla: out of memory");
        return MN_E_NOMEM;
    }
    for (int64_t i = 0; i < half; i++) {
        const double f = half > 1 ? (double)i / (double)(half - 1) : 0;
        const double period = c->min_period * pow((double)c->max_period / c->min_period, f);
        wv[i] = (float)(1.0 / period * 2.0 * 3.14159265358979323846);
    }
    mn_status st = mb_ok(b, mn_graph_constant(b->g, &w, 2, MB_S(1, half), wv));
    free(wv);
    MB_TRY(st);
    mn_tensor tt, arg, sn, cs;
    MB_TRY(mb_ok(b, mn_reshape(b->g, &tt, tau, 2, MB_S(B, 1))));
    MB_TRY(mb_ok(b, mn_mul(b->g, &arg, tt, w)));
    MB_TRY(mb_ok(b, mn_sin(b->g, &sn, arg)));
    MB_TRY(mb_ok(b, mn_cos(b->g, &cs, arg)));
    MB_TRY(mb_ok(b, mn_concat(b->g, &e, (const mn_tensor[]){sn, cs}, 2, 1)));                /* (B, H) */
    MB_TRY(mb_ok(b, mn_reshape(b->g, &e, e, 3, MB_S(B, 1, H))));
    MB_TRY(mb_ok(b, mn_broadcast_to(b->g, &e, e, 3, MB_S(B, T, H))));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &e, e, 2, MB_S(N, H))));
    mb_where(b, "the action projections");
    MB_TRY(mb_ok(b, mn_reshape(b->g, &h, xt, 2, MB_S(N, A))));
    MB_TRY(mb_linear(b, &h, h, "action_in_proj", H, A, true));
    MB_TRY(mb_ok(b, mn_concat(b->g, &h, (const mn_tensor[]){h, e}, 2, 1)));                  /* (N, 2H) */
    MB_TRY(mb_linear(b, &h, h, "action_time_mlp_in", H, 2 * H, true));
    MB_TRY(mb_ok(b, mn_silu(b->g, &h, h)));
    MB_TRY(mb_linear(b, &h, h, "action_time_mlp_out", H, H, true));
    for (int l = 0; l < c->layers; l++) MB_TRY(layer(&x, &h, l));
    mb_where(b, "the head");
    MB_TRY(rms(&x, &h, h, "norm.weight"));
    MB_TRY(mb_linear(b, &vel, h, "action_out_proj", A, H, true));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &vel, vel, 3, MB_S(B, T, A))));
    MB_TRY(mb_ok(b, mn_graph_output(b->g, vel, "velocity")));
    model_name(m, "velocity", vel);
    model_name(m, "timesteps", tau);
    model_name(m, "vlm", vlm);
    if (o->kind == MN_VLA_TRAIN) {
        mb_where(b, "the loss");
        mn_tensor u;
        MB_TRY(mb_ok(b, mn_sub(b->g, &u, noise, actions)));
        MB_TRY(mb_ok(b, mn_mse(b->g, &loss, vel, u)));
        MB_TRY(mb_ok(b, mn_graph_loss(b->g, loss)));
        model_name(m, "actions", actions);
        model_name(m, "noise", noise);
        model_name(m, "loss", loss);
    } else model_name(m, "x", xt);
    return MN_OK;
}

static mn_status check(mn_model *m, const mn_vla_config *c, const mn_vla_options *o) {
    const int64_t M = (int64_t)1 << 20;
    bool good = c->hidden >= 2 && c->hidden % 2 == 0 && c->hidden <= M && c->layers >= 1 && c->layers <= 1024 &&
                c->heads >= 1 && c->kv_heads >= 1 && c->heads % c->kv_heads == 0 && c->head_dim >= 2 &&
                c->head_dim % 2 == 0 && c->heads * c->head_dim <= M && c->ffn >= 1 && c->ffn <= M &&
                c->action_dim >= 1 && c->action_dim <= M && c->chunk >= 1 && c->chunk <= M && c->vlm_len >= 1 &&
                c->vlm_len <= M && c->kv_dim >= 1 && c->kv_dim <= M && c->rms_eps > 0 && c->rms_eps < 1 &&
                c->rope_theta > 1 && c->min_period > 0 && c->max_period > c->min_period;
    if (!good) {
        model_set_err(m, "vla: the config is not valid (hidden %lld even, layers %d, heads %lld / kv heads %lld "
                         "dividing, head_dim %lld even, ffn %lld, action_dim %lld, chunk %lld, vlm_len %lld, kv_dim %lld, "
                         "eps %g, theta %g, periods %g..%g)",
                      (long long)c->hidden, c->layers, (long long)c->heads, (long long)c->kv_heads,
                      (long long)c->head_dim, (long long)c->ffn, (long long)c->action_dim, (long long)c->chunk,
                      (long long)c->vlm_len, (long long)c->kv_dim, (double)c->rms_eps, (double)c->rope_theta,
                      (double)c->min_period, (double)c->max_period);
        return MN_E_INVALID;
    }
    if ((o->kind != MN_VLA_TRAIN && o->kind != MN_VLA_INFER) || o->batch < 1 || o->batch * c->chunk > M) {
        model_set_err(m, "vla: options: kind %d, batch %lld", (int)o->kind, (long long)o->batch);
        return MN_E_INVALID;
    }
    return MN_OK;
}

static void free_vla(void *p) {
    vla *v = p;
    if (v) free(v->v_buf), free(v->t_buf);
    free(v);
}

mn_status mn_vla_create(mn_model **out, mn_graph *g, const mn_vla_config *c, const mn_vla_options *o) {
    if (!out) return MN_E_INVALID;
    mn_model *m = model_new(MODEL_VLA, "vla", g);
    *out = m;
    if (!m) return MN_E_NOMEM;
    vla *v = calloc(1, sizeof *v);
    mn_status st = MN_OK;
    if (!v) {
        model_set_err(m, "vla: out of memory");
        st = MN_E_NOMEM;
    } else {
        m->impl = v;
        m->free_impl = free_vla;
    }
    if (!st && (!g || !c)) {
        model_set_err(m, "vla: %s is NULL", g ? "config" : "graph");
        st = MN_E_INVALID;
    }
    if (!st) {
        v->c = *c;
        v->o = o ? *o : mn_vla_default_options();
        if (!(st = check(m, &v->c, &v->o))) st = build(m, v);
    }
    m->dead = st != MN_OK;
    return st;
}

mn_status mn_vla_sample(mn_model *m, mn_session *s, float *x, int64_t steps, const float *vlm) {
    mn_status st = model_check(m, MODEL_VLA, "vla_sample");
    if (st) return st;
    vla *v = m->impl;
    const mn_vla_config *c = &v->c;
    if (!s || !x || !vlm || steps < 1 || steps > 1 << 20 || v->o.kind != MN_VLA_INFER) {
        model_set_err(m, "vla_sample: needs a session of an MN_VLA_INFER model, x, the VLM features and steps >= 1 "
                         "(got %lld)", (long long)steps);
        return MN_E_INVALID;
    }
    const int64_t B = v->o.batch;
    const size_t n = (size_t)(B * c->chunk * c->action_dim);
    if (!v->v_buf && !(v->v_buf = malloc(n * sizeof *v->v_buf))) return MN_E_NOMEM;
    if (!v->t_buf && !(v->t_buf = malloc((size_t)B * sizeof *v->t_buf))) return MN_E_NOMEM;
    if ((st = mn_session_set_input(s, "vlm", vlm, (size_t)(B * c->vlm_len * c->kv_dim) * sizeof(float)))) {
        model_set_err(m, "vla_sample: %s", mn_session_error(s));
        return st;
    }
    const float dt = -1.0f / (float)steps;
    for (int64_t i = 0; i < steps; i++) {
        const float tau = 1.0f + (float)i * dt;
        for (int64_t b = 0; b < B; b++) v->t_buf[b] = tau;
        if ((st = mn_session_set_input(s, "x", x, n * sizeof *x)) ||
            (st = mn_session_set_input(s, "timesteps", v->t_buf, (size_t)B * sizeof(float))) ||
            (st = mn_session_run(s)) || (st = mn_session_output(s, "velocity", v->v_buf, n * sizeof *x))) {
            model_set_err(m, "vla_sample: step %lld (tau %g): %s", (long long)i, (double)tau, mn_session_error(s));
            return st;
        }
        for (size_t k = 0; k < n; k++) x[k] += dt * v->v_buf[k];
    }
    return MN_OK;
}
