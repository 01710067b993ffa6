/* unet.c - the diffusion U-Nets (the paper's simplified one and a
 * conditioned one with a timestep embedding, self- and cross-attention)
 * built through the public API; the noise schedule, forward noising and
 * the DDIM sampling loop on the host.
 *
 * Layout (NCHW; c_l = base << l; the names of meganeura_models.h):
 *   temb = time.2(silu(time.0([cos(t f), sin(t f)])))      // (B,4 base), conditioned only
 *   h = cin(noisy)                                          // (B,base,H,W)
 *   level l = 0..levels-1: h = enc.l(h, temb); [enc_attn.l]; skip_l = h;
 *                          h = down.l(h) (stride 2) but for the last level
 *   h = mid(h, temb); [mid_attn]
 *   i = 0..levels-1, l = levels-1-i: h = up2x(h) if smaller than skip_l;
 *                          h = dec.i(concat(h, skip_l), temb); [dec_attn.i]
 *   pred = out(h)                                           // (B,C,H,W)
 *   ResBlock: r(x) + c2(silu(n2(c1(silu(n1(x))) + t(silu(temb)))))
 *
 * Does not: include anything below meganeura.h, encode text (the context
 * is an input), a VAE (latents in, latents out).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

typedef struct unet {
    mn_unet_config c;
    mn_unet_options o;
    float *x_buf, *t_buf; /* DDIM: the model's input, the timesteps */
} unet;

mn_unet_config mn_unet_config_simple(int64_t base) {
    mn_unet_config c;
    memset(&c, 0, sizeof c);
    c.in_channels = 4;
    c.base = base;
    c.levels = 3;
    c.groups = base >= 64 ? 16 : 8;
    c.head_dim = 32;
    c.eps = 1e-5f;
    return c;
}

mn_unet_config mn_unet_config_conditioned(int64_t base) {
    mn_unet_config c = mn_unet_config_simple(base);
    c.conv_bias = true;
    c.time_embedding = true;
    c.attention_levels = 0x6; /* levels 1 and 2 */
    c.context_dim = 768;
    c.context_len = 77;
    return c;
}

mn_unet_options mn_unet_default_options(void) {
    mn_unet_options o;
    memset(&o, 0, sizeof o);
    o.kind = MN_UNET_TRAIN;
    o.batch = 2;
    o.height = o.width = 32;
    return o;
}

/* ---- building ------------------------------------------------------------------ */

typedef struct ub {
    mb b;
    const unet *u;
    mn_tensor temb_act; /* silu(temb) [B, 4 base], or MN_NONE */
    mn_tensor context;  /* [B*L, Dc], or MN_NONE */
} ub;

static mn_status resblock(ub *x, mn_tensor *out, mn_tensor in, const char *pre, int64_t ci, int64_t co) {
    mb *b = &x->b;
    const mn_unet_config *c = &x->u->c;
    char nm[96];
    mn_tensor h, t, skip = in;
    mb_where(b, "%s", pre);
#define N(s) (snprintf(nm, sizeof nm, "%s.%s", pre, s), nm)
    MB_TRY(mb_group_norm(b, &h, in, N("n1"), c->groups, ci, c->eps));
    MB_TRY(mb_ok(b, mn_silu(b->g, &h, h)));
    MB_TRY(mb_conv2d(b, &h, h, N("c1"), ci, co, 3, 1, 1, c->conv_bias));
    if (x->temb_act != MN_NONE) {
        MB_TRY(mb_linear(b, &t, x->temb_act, N("t"), co, 4 * c->base, true));
        MB_TRY(mb_ok(b, mn_reshape(b->g, &t, t, 4, MB_S(x->u->o.batch, co, 1, 1))));
        MB_TRY(mb_ok(b, mn_add(b->g, &h, h, t)));
    }
    MB_TRY(mb_group_norm(b, &h, h, N("n2"), c->groups, co, c->eps));
    MB_TRY(mb_ok(b, mn_silu(b->g, &h, h)));
    MB_TRY(mb_conv2d(b, &h, h, N("c2"), co, co, 3, 1, 1, c->conv_bias));
    if (ci != co) MB_TRY(mb_conv2d(b, &skip, in, N("r"), ci, co, 1, 1, 0, c->conv_bias));
#undef N
    return mb_ok(b, mn_add(b->g, out, skip, h));
}

/* rows [B*T, C] -> heads [B, C/hd, T, hd] */
static mn_status heads(ub *x, mn_tensor *out, mn_tensor rows, int64_t T, int64_t C) {
    mb *b = &x->b;
    const int64_t hd = x->u->c.head_dim;
    MB_TRY(mb_ok(b, mn_reshape(b->g, out, rows, 4, MB_S(x->u->o.batch, T, C / hd, hd))));
    return mb_ok(b, mn_permute(b->g, out, *out, (const int[]){0, 2, 1, 3}));
}

/* softmax(q k^T / sqrt(hd)) v over heads; q from a [B*T, C], k and v from kv [B*Tk, Ck] */
static mn_status attention(ub *x, mn_tensor *out, mn_tensor a, mn_tensor kv, const char *pre, int64_t T, int64_t C,
                           int64_t Tk, int64_t Ck) {
    mb *b = &x->b;
    char nm[128];
    mn_tensor q, k, v, o;
#define N(s) (snprintf(nm, sizeof nm, "%s.%s", pre, s), nm)
    MB_TRY(mb_linear(b, &q, a, N("to_q"), C, C, false));
    MB_TRY(mb_linear(b, &k, kv, N("to_k"), C, Ck, false));
    MB_TRY(mb_linear(b, &v, kv, N("to_v"), C, Ck, false));
    MB_TRY(heads(x, &q, q, T, C));
    MB_TRY(heads(x, &k, k, Tk, C));
    MB_TRY(heads(x, &v, v, Tk, C));
    MB_TRY(mb_ok(b, mn_attention(b->g, &o, q, k, v, MN_NONE, NULL)));
    MB_TRY(mb_ok(b, mn_permute(b->g, &o, o, (const int[]){0, 2, 1, 3})));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &o, o, 2, MB_S(x->u->o.batch * T, C))));
    MB_TRY(mb_linear(b, out, o, N("to_out"), C, C, true));
#undef N
    return MN_OK;
}

static mn_status transformer(ub *x, mn_tensor *out, mn_tensor in, const char *pre, int64_t C, int64_t H, int64_t W) {
    mb *b = &x->b;
    const mn_unet_config *c = &x->u->c;
    const int64_t B = x->u->o.batch, T = H * W;
    char nm[96];
    mn_tensor h, a, d;
    mb_where(b, "%s", pre);
#define N(s) (snprintf(nm, sizeof nm, "%s.%s", pre, s), nm)
    MB_TRY(mb_group_norm(b, &h, in, N("norm"), c->groups, C, c->eps));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &h, h, 3, MB_S(B, C, T))));
    MB_TRY(mb_ok(b, mn_permute(b->g, &h, h, (const int[]){0, 2, 1})));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &h, h, 2, MB_S(B * T, C))));
    MB_TRY(mb_layer_norm(b, &a, h, N("ln1"), C, c->eps));
    MB_TRY(attention(x, &d, a, a, N("attn1"), T, C, T, C));
    MB_TRY(mb_ok(b, mn_add(b->g, &h, h, d)));
    if (x->context != MN_NONE) {
        MB_TRY(mb_layer_norm(b, &a, h, N("ln2"), C, c->eps));
        MB_TRY(attention(x, &d, a, x->context, N("attn2"), T, C, c->context_len, c->context_dim));
        MB_TRY(mb_ok(b, mn_add(b->g, &h, h, d)));
    }
    MB_TRY(mb_layer_norm(b, &a, h, N("ln3"), C, c->eps));
    MB_TRY(mb_linear(b, &d, a, N("ff.0"), 4 * C, C, true));
    MB_TRY(mb_ok(b, mn_gelu(b->g, &d, d)));
    MB_TRY(mb_linear(b, &d, d, N("ff.2"), C, 4 * C, true));
    MB_TRY(mb_ok(b, mn_add(b->g, &h, h, d)));
#undef N
    MB_TRY(mb_ok(b, mn_reshape(b->g, &h, h, 3, MB_S(B, T, C))));
    MB_TRY(mb_ok(b, mn_permute(b->g, &h, h, (const int[]){0, 2, 1})));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &h, h, 4, MB_S(B, C, H, W))));
    return mb_ok(b, mn_add(b->g, out, in, h));
}

/* cos | sin of t * 10000^(-i/half): the frequencies in double rounded once
 * (the PyTorch module computes them the same way), the angles in f32. */
static mn_status time_embedding(ub *x, mn_tensor *out, mn_tensor t) {
    mb *b = &x->b;
    const mn_unet_config *c = &x->u->c;
    const int64_t B = x->u->o.batch, half = c->base / 2;
    float *f = malloc((size_t)half * sizeof *f);
    if (!f) {
        model_set_err(b->m, "unet: out of memory");
        return MN_E_NOMEM;
    }
    for (int64_t i = 0; i < half; i++) f[i] = (float)exp(-log(10000.0) * (double)i / (double)half);
    mn_tensor fr, tt, arg, cs, sn, e;
    mb_where(b, "the timestep embedding");
    mn_status st = mb_ok(b, mn_graph_constant(b->g, &fr, 2, MB_S(1, half), f));
    free(f);
    MB_TRY(st);
    MB_TRY(mb_ok(b, mn_reshape(b->g, &tt, t, 2, MB_S(B, 1))));
    MB_TRY(mb_ok(b, mn_mul(b->g, &arg, tt, fr)));
    MB_TRY(mb_ok(b, mn_cos(b->g, &cs, arg)));
    MB_TRY(mb_ok(b, mn_sin(b->g, &sn, arg)));
    MB_TRY(mb_ok(b, mn_concat(b->g, &e, (const mn_tensor[]){cs, sn}, 2, 1)));
    MB_TRY(mb_linear(b, &e, e, "time.0", 4 * c->base, c->base, true));
    MB_TRY(mb_ok(b, mn_silu(b->g, &e, e)));
    return mb_linear(b, out, e, "time.2", 4 * c->base, 4 * c->base, true);
}

static mn_status build(mn_model *m, unet *u) {
    const mn_unet_config *c = &u->c;
    const mn_unet_options *o = &u->o;
    ub x;
    mb_init(&x.b, m, o->freeze, o->freeze_user);
    mb *b = &x.b;
    x.u = u;
    x.temb_act = x.context = MN_NONE;
    const int64_t B = o->batch, C = c->in_channels;
    mn_tensor noisy, noise = MN_NONE, t, ctx, h, pred, loss, skips[8];
    int64_t chans[8], ws[8];
    MB_TRY(mb_ok(b, mn_graph_input(b->g, &noisy, "noisy", MN_F32, 4, MB_S(B, C, o->height, o->width))));
    if (o->kind == MN_UNET_TRAIN) MB_TRY(mb_ok(b, mn_graph_input(b->g, &noise, "noise", MN_F32, 4, MB_S(B, C, o->height, o->width))));
    if (c->time_embedding) {
        MB_TRY(mb_ok(b, mn_graph_input(b->g, &t, "timesteps", MN_F32, 1, MB_S(B))));
        MB_TRY(time_embedding(&x, &h, t));
        MB_TRY(mb_ok(b, mn_silu(b->g, &x.temb_act, h)));
    }
    if (c->attention_levels && c->context_dim > 0) {
        MB_TRY(mb_ok(b, mn_graph_input(b->g, &ctx, "context", MN_F32, 3, MB_S(B, c->context_len, c->context_dim))));
        MB_TRY(mb_ok(b, mn_reshape(b->g, &x.context, ctx, 2, MB_S(B * c->context_len, c->context_dim))));
    }
    mb_where(b, "cin");
    MB_TRY(mb_conv2d(b, &h, noisy, "cin", C, c->base, 3, 1, 1, c->conv_bias));
    int64_t ch = c->base, H = o->height, W = o->width;
    char nm[64];
    for (int l = 0; l < c->levels; l++) {
        const int64_t co = c->base << l;
        snprintf(nm, sizeof nm, "enc.%d", l);
        MB_TRY(resblock(&x, &h, h, nm, ch, co));
        ch = co;
        if (c->attention_levels >> l & 1) {
            snprintf(nm, sizeof nm, "enc_attn.%d", l);
            MB_TRY(transformer(&x, &h, h, nm, ch, H, W));
        }
        skips[l] = h, chans[l] = ch, ws[l] = W;
        if (l < c->levels - 1) {
            snprintf(nm, sizeof nm, "down.%d", l);
            mb_where(b, "%s", nm);
            MB_TRY(mb_conv2d(b, &h, h, nm, ch, ch, 3, 2, 1, c->conv_bias));
            H = (H + 1) / 2, W = (W + 1) / 2;
        }
    }
    MB_TRY(resblock(&x, &h, h, "mid", ch, ch));
    if (c->attention_levels >> (c->levels - 1) & 1) MB_TRY(transformer(&x, &h, h, "mid_attn", ch, H, W));
    for (int i = 0; i < c->levels; i++) {
        const int l = c->levels - 1 - i;
        const int64_t co = c->base << l;
        snprintf(nm, sizeof nm, "dec.%d", i);
        mb_where(b, "%s (upsampling, the skip)", nm);
        if (W != ws[l]) {
            MB_TRY(mb_ok(b, mn_upsample_nearest2x(b->g, &h, h)));
            H *= 2, W *= 2;
        }
        MB_TRY(mb_ok(b, mn_concat(b->g, &h, (const mn_tensor[]){h, skips[l]}, 2, 1)));
        MB_TRY(resblock(&x, &h, h, nm, ch + chans[l], co));
        ch = co;
        if (c->attention_levels >> l & 1) {
            snprintf(nm, sizeof nm, "dec_attn.%d", i);
            MB_TRY(transformer(&x, &h, h, nm, ch, H, W));
        }
    }
    mb_where(b, "out");
    MB_TRY(mb_conv2d(b, &pred, h, "out", ch, C, 3, 1, 1, c->conv_bias));
    MB_TRY(mb_ok(b, mn_graph_output(b->g, pred, "pred")));
    model_name(m, "noisy", noisy);
    model_name(m, "pred", pred);
    if (c->time_embedding) model_name(m, "timesteps", t);
    if (x.context != MN_NONE) model_name(m, "context", ctx);
    if (o->kind == MN_UNET_TRAIN) {
        mb_where(b, "the loss");
        MB_TRY(mb_ok(b, mn_mse(b->g, &loss, pred, noise)));
        MB_TRY(mb_ok(b, mn_graph_loss(b->g, loss)));
        model_name(m, "noise", noise);
        model_name(m, "loss", loss);
    }
    return MN_OK;
}

static mn_status check(mn_model *m, const mn_unet_config *c, const mn_unet_options *o) {
    bool good = c->in_channels >= 1 && c->in_channels <= 4096 && c->base >= 2 && c->base % 2 == 0 &&
                c->levels >= 1 && c->levels <= 6 && c->groups >= 1 && c->eps > 0 && c->eps < 1 &&
                (c->base << (c->levels - 1)) <= 65536 && c->attention_levels >> c->levels == 0;
    for (int l = 0; good && l < c->levels; l++) { /* the concatenations are sums of these */
        const int64_t cl = c->base << l;
        good = cl % c->groups == 0;
        if (good && (c->attention_levels >> l & 1)) good = c->head_dim >= 1 && cl % c->head_dim == 0;
    }
    if (good && c->attention_levels && c->context_dim)
        good = c->context_dim >= 1 && c->context_dim <= 65536 && c->context_len >= 1 && c->context_len <= 65536;
    if (!good) {
        model_set_err(m, "unet: the config is not valid: in_channels %lld, base %lld (even), levels %d (1..6), groups %d "
                         "(dividing every level's channels and the concatenations), attention levels 0x%x (below "
                         "levels; head_dim %lld dividing their channels), context %lld x %lld, eps %g",
                      (long long)c->in_channels, (long long)c->base, c->levels, c->groups, c->attention_levels,
                      (long long)c->head_dim, (long long)c->context_len, (long long)c->context_dim, (double)c->eps);
        return MN_E_INVALID;
    }
    const int64_t f = (int64_t)1 << (c->levels - 1);
    if ((o->kind != MN_UNET_TRAIN && o->kind != MN_UNET_INFER) || o->batch < 1 || o->batch > 1 << 16 ||
        o->height < 1 || o->width < 1 || o->height % f || o->width % f || o->height > 1 << 14 || o->width > 1 << 14) {
        model_set_err(m, "unet: options: kind %d, batch %lld, latents %lld x %lld (sides divisible by %lld)",
                      (int)o->kind, (long long)o->batch, (long long)o->height, (long long)o->width, (long long)f);
        return MN_E_INVALID;
    }
    return MN_OK;
}

static void free_unet(void *p) {
    unet *u = p;
    if (u) free(u->x_buf), free(u->t_buf);
    free(u);
}

mn_status mn_unet_create(mn_model **out, mn_graph *g, const mn_unet_config *c, const mn_unet_options *o) {
    if (!out) return MN_E_INVALID;
    mn_model *m = model_new(MODEL_UNET, "unet", g);
    *out = m;
    if (!m) return MN_E_NOMEM;
    unet *u = calloc(1, sizeof *u);
    mn_status st = MN_OK;
    if (!u) {
        model_set_err(m, "unet: out of memory");
        st = MN_E_NOMEM;
    } else {
        m->impl = u;
        m->free_impl = free_unet;
    }
    if (!st && (!g || !c)) {
        model_set_err(m, "unet: %s is NULL", g ? "config" : "graph");
        st = MN_E_INVALID;
    }
    if (!st) {
        u->c = *c;
        u->o = o ? *o : mn_unet_default_options();
        if (!(st = check(m, &u->c, &u->o))) st = build(m, u);
    }
    m->dead = st != MN_OK;
    return st;
}

/* ---- the schedule and the sampler ---------------------------------------------------- */

mn_status mn_diffusion_schedule(double *ac, int64_t T, double beta_start, double beta_end, bool scaled) {
    if (!ac || T < 1 || T > 1 << 20 || !(beta_start > 0) || !(beta_end < 1) || !(beta_start <= beta_end))
        return MN_E_INVALID;
    double prod = 1;
    for (int64_t i = 0; i < T; i++) {
        const double f = T > 1 ? (double)i / (double)(T - 1) : 0;
        double beta;
        if (scaled) {
            const double s = sqrt(beta_start) + f * (sqrt(beta_end) - sqrt(beta_start));
            beta = s * s;
        } else beta = beta_start + f * (beta_end - beta_start);
        prod *= 1 - beta;
        ac[i] = prod;
    }
    return MN_OK;
}

mn_status mn_diffusion_add_noise(float *noisy, const float *x0, const float *noise, const int32_t *t, int64_t batch,
                                 int64_t per, const double *ac, int64_t T) {
    if (!noisy || !x0 || !noise || !t || !ac || batch < 1 || per < 1) return MN_E_INVALID;
    for (int64_t b = 0; b < batch; b++)
        if (t[b] < 0 || t[b] >= T) return MN_E_INVALID;
    for (int64_t b = 0; b < batch; b++) {
        const double a = sqrt(ac[t[b]]), s = sqrt(1 - ac[t[b]]);
        for (int64_t i = 0; i < per; i++)
            noisy[b * per + i] = (float)(a * x0[b * per + i] + s * noise[b * per + i]);
    }
    return MN_OK;
}

mn_status mn_unet_ddim(mn_model *m, mn_session *s, float *x, int64_t steps, const float *context, const double *ac,
                       int64_t T) {
    mn_status st = model_check(m, MODEL_UNET, "unet_ddim");
    if (st) return st;
    unet *u = m->impl;
    const mn_unet_config *c = &u->c;
    const bool has_ctx = c->attention_levels && c->context_dim > 0;
    if (!s || !x || !ac || steps < 1 || T < 1 || steps > T || u->o.kind != MN_UNET_INFER || (has_ctx && !context)) {
        model_set_err(m, "unet_ddim: needs a session of an MN_UNET_INFER model, x, the schedule, 1 <= steps %lld <= "
                         "T %lld%s", (long long)steps, (long long)T, has_ctx ? " and the context" : "");
        return MN_E_INVALID;
    }
    const int64_t B = u->o.batch, per = c->in_channels * u->o.height * u->o.width, stride = T / steps;
    const size_t n = (size_t)(B * per);
    if (!u->x_buf && !(u->x_buf = malloc(n * sizeof *u->x_buf))) return MN_E_NOMEM;
    if (!u->t_buf && !(u->t_buf = malloc((size_t)B * sizeof *u->t_buf))) return MN_E_NOMEM;
    if (has_ctx &&
        (st = mn_session_set_input(s, "context", context, (size_t)(B * c->context_len * c->context_dim) * sizeof(float)))) {
        model_set_err(m, "unet_ddim: %s", mn_session_error(s));
        return st;
    }
    for (int64_t i = steps - 1; i >= 0; i--) {
        const int64_t t = i * stride;
        for (int64_t b = 0; b < B; b++) u->t_buf[b] = (float)t;
        if ((st = mn_session_set_input(s, "noisy", x, n * sizeof *x)) ||
            (c->time_embedding && (st = mn_session_set_input(s, "timesteps", u->t_buf, (size_t)B * sizeof(float)))) ||
            (st = mn_session_run(s)) || (st = mn_session_output(s, "pred", u->x_buf, n * sizeof *x))) {
            model_set_err(m, "unet_ddim: step at t = %lld: %s", (long long)t, mn_session_error(s));
            return st;
        }
        const double a = ac[t], ap = t - stride >= 0 ? ac[t - stride] : 1.0;
        for (size_t k = 0; k < n; k++) {
            const double eps = u->x_buf[k], x0 = (x[k] - sqrt(1 - a) * eps) / sqrt(a);
            x[k] = (float)(sqrt(ap) * x0 + sqrt(1 - ap) * eps);
        }
    }
    return MN_OK;
}
