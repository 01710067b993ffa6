/* whisper.c - Whisper (Hugging Face WhisperForConditionalGeneration) built
 * through the public API: config.json, the encoder (the paper's benchmark),
 * training with the token cross-entropy, and transcription: an encoder
 * branch that fills per-layer cross-attention key/value states and a
 * one-token decoder branch over self-attention KV caches, run separately
 * (mn_session_run_outputs), with greedy decoding.
 *
 * Layout (d = d_model, S = max_source_positions, Dh = d / heads):
 *   encoder: x = gelu(conv2_s2(gelu(conv1(features))))^T + embed_positions   // (B,S,d)
 *            layer: x += out_proj(attn(self_attn_layer_norm(x)));
 *                   x += fc2(gelu(fc1(final_layer_norm(x))));  x = layer_norm(x)
 *   decoder: h = embed_tokens[ids] (* sqrt(d) if scale_embedding) + embed_positions[pos..]
 *            layer: h += self_attn (causal) ; h += encoder_attn (keys/values from x) ; h += MLP
 *            logits = layer_norm(h) embed_tokens^T
 *   attention: q = q_proj(x) (bias), k = k_proj(x) (no bias), v = v_proj(x) (bias),
 *              softmax(q k^T / sqrt(Dh)) v, out_proj (bias)
 *
 * Does not: include anything below meganeura.h, timestamps, beam search,
 * long-form (> 30 s) transcription, language detection.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

typedef struct whisper {
    mn_whisper_config c;
    mn_whisper_options o;
    char **cross_names; /* DECODE: the encoder branch's outputs */
    mn_tensor *cross;   /* DECODE: the cross-attention key/value states */
    float *logits;
} whisper;

/* ---- config.json ------------------------------------------------------------------- */

mn_whisper_config mn_whisper_config_tiny(void) {
    mn_whisper_config c;
    memset(&c, 0, sizeof c);
    c.d_model = 384;
    c.encoder_layers = c.decoder_layers = 4;
    c.encoder_attention_heads = c.decoder_attention_heads = 6;
    c.encoder_ffn_dim = c.decoder_ffn_dim = 1536;
    c.num_mel_bins = 80;
    c.max_source_positions = 1500;
    c.max_target_positions = 448;
    c.vocab_size = 51865;
    c.decoder_start_token_id = 50258;
    c.eos_token_id = 50257;
    return c;
}

static mn_status get_int(const cJSON *root, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err,
                         size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return MN_OK; /* the default */
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi) {
        hf_fmt(err, cap, "config.json: %s must be an integer in %lld..%lld, got %s", key, (long long)lo, (long long)hi,
               cJSON_IsNumber(v) ? "another number" : hf_json_kind(v));
        return MN_E_FORMAT;
    }
    *out = (int64_t)v->valuedouble;
    return MN_OK;
}

mn_status mn_whisper_config_parse(mn_whisper_config *out, const char *json, size_t len, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out || !json) {
        hf_fmt(err, cap, "config.json: %s is NULL", out ? "text" : "out");
        return MN_E_INVALID;
    }
    if (hf_json_bad_string(json, len)) {
        hf_fmt(err, cap, "config.json: a string holds a control character or \\u0000");
        return MN_E_FORMAT;
    }
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        hf_fmt(err, cap, "config.json: not a JSON object");
        return MN_E_FORMAT;
    }
    mn_status st = MN_OK;
    const char *dup = hf_json_duplicate_key(root);
    mn_whisper_config c = mn_whisper_config_tiny();
    c.decoder_start_token_id = 50257, c.eos_token_id = 50256; /* WhisperConfig's defaults for absent keys */
    const int64_t M = (int64_t)1 << 20;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type"),
                *act = cJSON_GetObjectItemCaseSensitive(root, "activation_function"),
                *se = cJSON_GetObjectItemCaseSensitive(root, "scale_embedding");
    if (dup) {
        hf_fmt(err, cap, "config.json: key '%s' appears twice", dup);
        st = MN_E_FORMAT;
    } else if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "whisper"))) {
        hf_fmt(err, cap, "config.json: model_type must be \"whisper\"");
        st = MN_E_UNSUPPORTED;
    } else if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "gelu"))) {
        hf_fmt(err, cap, "config.json: activation_function %s is not supported (gelu only)",
               cJSON_IsString(act) ? act->valuestring : hf_json_kind(act));
        st = MN_E_UNSUPPORTED;
    } else if (se && !cJSON_IsBool(se) && !cJSON_IsNull(se)) {
        hf_fmt(err, cap, "config.json: scale_embedding must be true or false");
        st = MN_E_FORMAT;
    }
    if (!st && se) c.scale_embedding = cJSON_IsTrue(se);
    struct {
        const char *k;
        int64_t *v, lo, hi;
    } ints[] = {{"d_model", &c.d_model, 1, M},
                {"encoder_layers", &c.encoder_layers, 1, 1024},
                {"decoder_layers", &c.decoder_layers, 1, 1024},
                {"encoder_attention_heads", &c.encoder_attention_heads, 1, 4096},
                {"decoder_attention_heads", &c.decoder_attention_heads, 1, 4096},
                {"encoder_ffn_dim", &c.encoder_ffn_dim, 1, M},
                {"decoder_ffn_dim", &c.decoder_ffn_dim, 1, M},
                {"num_mel_bins", &c.num_mel_bins, 1, 512},
                {"max_source_positions", &c.max_source_positions, 1, 1 << 16},
                {"max_target_positions", &c.max_target_positions, 1, 1 << 16},
                {"vocab_size", &c.vocab_size, 1, 1 << 24},
                {"decoder_start_token_id", &c.decoder_start_token_id, 0, (1 << 24) - 1},
                {"eos_token_id", &c.eos_token_id, 0, (1 << 24) - 1}};
    for (size_t i = 0; !st && i < sizeof ints / sizeof ints[0]; i++)
        st = get_int(root, ints[i].k, ints[i].lo, ints[i].hi, ints[i].v, err, cap);
    if (!st && (c.d_model % c.encoder_attention_heads || c.d_model % c.decoder_attention_heads)) {
        hf_fmt(err, cap, "config.json: d_model %lld is not a multiple of the attention heads (%lld, %lld)",
               (long long)c.d_model, (long long)c.encoder_attention_heads, (long long)c.decoder_attention_heads);
        st = MN_E_FORMAT;
    }
    if (!st && (c.decoder_start_token_id >= c.vocab_size || c.eos_token_id >= c.vocab_size)) {
        hf_fmt(err, cap, "config.json: decoder_start_token_id %lld or eos_token_id %lld is not below vocab_size %lld",
               (long long)c.decoder_start_token_id, (long long)c.eos_token_id, (long long)c.vocab_size);
        st = MN_E_FORMAT;
    }
    cJSON_Delete(root);
    if (!st) *out = c;
    return st;
}

mn_status mn_whisper_config_load(mn_whisper_config *out, const char *path, char *err, size_t cap) {
    if (!path) return MN_E_INVALID;
    char p[4200], *text = NULL, e[1024], pb[200];
    size_t n = 0;
    snprintf(p, sizeof p, "%s/config.json", path);
    mn_status st = mn_read_file(&text, &n, p, (size_t)1 << 24, e, sizeof e);
    if (st) st = mn_read_file(&text, &n, path, (size_t)1 << 24, e, sizeof e);
    if (st) {
        hf_fmt(err, cap, "%s", e);
        return st;
    }
    st = mn_whisper_config_parse(out, text, n, e, sizeof e);
    free(text);
    if (st) hf_fmt(err, cap, "'%s': %s", mn_escape(pb, sizeof pb, path), e);
    return st;
}

mn_whisper_options mn_whisper_default_options(void) {
    mn_whisper_options o;
    memset(&o, 0, sizeof o);
    o.kind = MN_WHISPER_ENCODER;
    o.batch = 1;
    o.seq_len = 16;
    return o;
}

/* ---- building -------------------------------------------------------------------------- */

typedef struct wb {
    mb b;
    whisper *w;
} wb;

static mn_status heads(wb *x, mn_tensor *out, mn_tensor rows, int64_t B, int64_t T, int64_t H) {
    const int64_t Dh = x->w->c.d_model / H;
    MB_TRY(mb_ok(&x->b, mn_reshape(x->b.g, out, rows, 4, MB_S(B, T, H, Dh))));
    return mb_ok(&x->b, mn_permute(x->b.g, out, *out, (const int[]){0, 2, 1, 3}));
}

/* [B,H,T,Dh] -> rows [B*T, d] -> out_proj */
static mn_status merge(wb *x, mn_tensor *out, mn_tensor o, const char *pre, int64_t B, int64_t T) {
    const int64_t d = x->w->c.d_model;
    char nm[160];
    MB_TRY(mb_ok(&x->b, mn_permute(x->b.g, &o, o, (const int[]){0, 2, 1, 3})));
    MB_TRY(mb_ok(&x->b, mn_reshape(x->b.g, &o, o, 2, MB_S(B * T, d))));
    snprintf(nm, sizeof nm, "%s.out_proj", pre);
    return mb_linear(&x->b, out, o, nm, d, d, true);
}

static mn_status kv_proj(wb *x, mn_tensor *k, mn_tensor *v, mn_tensor rows, const char *pre, int64_t B, int64_t T,
                         int64_t H) {
    const int64_t d = x->w->c.d_model;
    char nm[160];
    snprintf(nm, sizeof nm, "%s.k_proj", pre);
    MB_TRY(mb_linear(&x->b, k, rows, nm, d, d, false));
    snprintf(nm, sizeof nm, "%s.v_proj", pre);
    MB_TRY(mb_linear(&x->b, v, rows, nm, d, d, true));
    MB_TRY(heads(x, k, *k, B, T, H));
    return heads(x, v, *v, B, T, H);
}

static mn_status q_proj(wb *x, mn_tensor *q, mn_tensor rows, const char *pre, int64_t B, int64_t T, int64_t H) {
    char nm[160];
    snprintf(nm, sizeof nm, "%s.q_proj", pre);
    MB_TRY(mb_linear(&x->b, q, rows, nm, x->w->c.d_model, x->w->c.d_model, true));
    return heads(x, q, *q, B, T, H);
}

static mn_status mlp(wb *x, mn_tensor *h, const char *pre, int64_t ffn) {
    const int64_t d = x->w->c.d_model;
    char nm[160];
    mn_tensor a;
    snprintf(nm, sizeof nm, "%s.final_layer_norm", pre);
    MB_TRY(mb_layer_norm(&x->b, &a, *h, nm, d, 1e-5f));
    snprintf(nm, sizeof nm, "%s.fc1", pre);
    MB_TRY(mb_linear(&x->b, &a, a, nm, ffn, d, true));
    MB_TRY(mb_ok(&x->b, mn_gelu(x->b.g, &a, a)));
    snprintf(nm, sizeof nm, "%s.fc2", pre);
    MB_TRY(mb_linear(&x->b, &a, a, nm, d, ffn, true));
    return mb_ok(&x->b, mn_add(x->b.g, h, *h, a));
}

/* features [B, mels, 2S] -> rows [B*S, d] after the final layer norm */
static mn_status encoder(wb *x, mn_tensor *out, mn_tensor feat, int64_t B) {
    mb *b = &x->b;
    const mn_whisper_config *c = &x->w->c;
    const int64_t d = c->d_model, S = c->max_source_positions, H = c->encoder_attention_heads;
    mn_tensor w1, b1, w2, b2, h, pos;
    const float bound1 = 1.0f / sqrtf((float)(c->num_mel_bins * 3)), bound2 = 1.0f / sqrtf((float)(d * 3));
    mb_where(b, "the encoder's convolutions");
    MB_TRY(mb_param(b, &w1, "model.encoder.conv1.weight", 3, MB_S(d, c->num_mel_bins, 3), (mn_init){MN_INIT_UNIFORM, -bound1, bound1}));
    MB_TRY(mb_param(b, &b1, "model.encoder.conv1.bias", 1, MB_S(d), (mn_init){MN_INIT_UNIFORM, -bound1, bound1}));
    MB_TRY(mb_param(b, &w2, "model.encoder.conv2.weight", 3, MB_S(d, d, 3), (mn_init){MN_INIT_UNIFORM, -bound2, bound2}));
    MB_TRY(mb_param(b, &b2, "model.encoder.conv2.bias", 1, MB_S(d), (mn_init){MN_INIT_UNIFORM, -bound2, bound2}));
    const mn_conv1d_params p1 = {1, 1, 1, 1}, p2 = {2, 1, 1, 1};
    MB_TRY(mb_ok(b, mn_conv1d(b->g, &h, feat, w1, b1, &p1)));
    MB_TRY(mb_ok(b, mn_gelu(b->g, &h, h)));
    MB_TRY(mb_ok(b, mn_conv1d(b->g, &h, h, w2, b2, &p2)));
    MB_TRY(mb_ok(b, mn_gelu(b->g, &h, h)));
    MB_TRY(mb_ok(b, mn_permute(b->g, &h, h, (const int[]){0, 2, 1}))); /* (B,S,d) */
    /* frozen, as transformers keeps it (its sinusoids come with the checkpoint; a fresh model has zeros) */
    MB_TRY(mb_param(b, &pos, "model.encoder.embed_positions.weight", 2, MB_S(S, d), (mn_init){MN_INIT_ZEROS, 0, 0}));
    MB_TRY(mb_ok(b, mn_graph_param_freeze(b->g, pos, true)));
    MB_TRY(mb_ok(b, mn_add(b->g, &h, h, pos)));
    MB_TRY(mb_ok(b, mn_reshape(b->g, &h, h, 2, MB_S(B * S, d))));
    for (int64_t l = 0; l < c->encoder_layers; l++) {
        char pre[96], nm[160];
        mn_tensor a, q, k, v, o;
        snprintf(pre, sizeof pre, "model.encoder.layers.%lld", (long long)l);
        mb_where(b, "%s", pre);
        snprintf(nm, sizeof nm, "%s.self_attn_layer_norm", pre);
        MB_TRY(mb_layer_norm(b, &a, h, nm, d, 1e-5f));
        snprintf(nm, sizeof nm, "%s.self_attn", pre);
        MB_TRY(q_proj(x, &q, a, nm, B, S, H));
        MB_TRY(kv_proj(x, &k, &v, a, nm, B, S, H));
        MB_TRY(mb_ok(b, mn_attention(b->g, &o, q, k, v, MN_NONE, NULL)));
        MB_TRY(merge(x, &o, o, nm, B, S));
        MB_TRY(mb_ok(b, mn_add(b->g, &h, h, o)));
        MB_TRY(mlp(x, &h, pre, c->encoder_ffn_dim));
    }
    mb_where(b, "the encoder's layer norm");
    return mb_layer_norm(b, out, h, "model.encoder.layer_norm", d, 1e-5f);
}

/* token embedding + positions: rows [B*T, d] */
static mn_status embed(wb *x, mn_tensor *out, mn_tensor *table, mn_tensor ids, mn_tensor posrows, int64_t B, int64_t T) {
    mb *b = &x->b;
    const mn_whisper_config *c = &x->w->c;
    const int64_t d = c->d_model;
    mn_tensor pos, e;
    mb_where(b, "the decoder's embeddings");
    MB_TRY(mb_param(b, table, "model.decoder.embed_tokens.weight", 2, MB_S(c->vocab_size, d), (mn_init){MN_INIT_NORMAL, 0, 1}));
    MB_TRY(mb_param(b, &pos, "model.decoder.embed_positions.weight", 2, MB_S(c->max_target_positions, d),
                    (mn_init){MN_INIT_NORMAL, 0, 1}));
    MB_TRY(mb_ok(b, mn_embedding(b->g, &e, *table, ids))); /* (B,T,d) */
    if (c->scale_embedding) MB_TRY(mb_ok(b, mn_scale(b->g, &e, e, sqrtf((float)d))));
    mn_tensor p;
    if (posrows == MN_NONE) MB_TRY(mb_ok(b, mn_slice(b->g, &p, pos, 0, 0, T))); /* positions 0..T-1 */
    else MB_TRY(mb_ok(b, mn_embedding(b->g, &p, pos, posrows)));                /* (1,d) at pos */
    MB_TRY(mb_ok(b, mn_add(b->g, &e, e, p)));
    return mb_ok(b, mn_reshape(b->g, out, e, 2, MB_S(B * T, d)));
}

static mn_status build_train(wb *x, mn_model *m) {
    mb *b = &x->b;
    const mn_whisper_config *c = &x->w->c;
    const mn_whisper_options *o = &x->w->o;
    const int64_t B = o->batch, T = o->seq_len, S = c->max_source_positions, d = c->d_model,
                  H = c->decoder_attention_heads;
    mn_tensor feat, ids, labels, enc, table, h, logits, loss;
    MB_TRY(mb_ok(b, mn_graph_input(b->g, &feat, "input_features", MN_F32, 3, MB_S(B, c->num_mel_bins, 2 * S))));
    model_name(m, "input_features", feat);
    MB_TRY(encoder(x, &enc, feat, B));
    if (o->kind == MN_WHISPER_ENCODER) {
        mn_tensor h3, sq;
        MB_TRY(mb_ok(b, mn_reshape(b->g, &h3, enc, 3, MB_S(B, S, d))));
        MB_TRY(mb_ok(b, mn_graph_output(b->g, h3, "encoder_hidden")));
        mb_where(b, "the loss");
        MB_TRY(mb_ok(b, mn_mul(b->g, &sq, h3, h3)));
        MB_TRY(mb_ok(b, mn_mean(b->g, &loss, sq, MN_ALL_AXES, false)));
        MB_TRY(mb_ok(b, mn_graph_loss(b->g, loss)));
        model_name(m, "encoder_hidden", h3);
        model_name(m, "loss", loss);
        return MN_OK;
    }
    MB_TRY(mb_ok(b, mn_graph_input(b->g, &ids, "decoder_input_ids", MN_I32, 2, MB_S(B, T))));
    MB_TRY(mb_ok(b, mn_graph_input(b->g, &labels, "labels", MN_I32, 1, MB_S(B * T))));
    MB_TRY(embed(x, &h, &table, ids, MN_NONE, B, T));
    for (int64_t l = 0; l < c->decoder_layers; l++) {
        char pre[96], nm[160];
        mn_tensor a, q, k, v, att;
        snprintf(pre, sizeof pre, "model.decoder.layers.%lld", (long long)l);
        mb_where(b, "%s", pre);
        const mn_attention_params causal = {true, 0, 0};
        snprintf(nm, sizeof nm, "%s.self_attn_layer_norm", pre);
        MB_TRY(mb_layer_norm(b, &a, h, nm, d, 1e-5f));
        snprintf(nm, sizeof nm, "%s.self_attn", pre);
        MB_TRY(q_proj(x, &q, a, nm, B, T, H));
        MB_TRY(kv_proj(x, &k, &v, a, nm, B, T, H));
        MB_TRY(mb_ok(b, mn_attention(b->g, &att, q, k, v, MN_NONE, &causal)));
        MB_TRY(merge(x, &att, att, nm, B, T));
        MB_TRY(mb_ok(b, mn_add(b->g, &h, h, att)));
        snprintf(nm, sizeof nm, "%s.encoder_attn_layer_norm", pre);
        MB_TRY(mb_layer_norm(b, &a, h, nm, d, 1e-5f));
        snprintf(nm, sizeof nm, "%s.encoder_attn", pre);
        MB_TRY(q_proj(x, &q, a, nm, B, T, H));
        MB_TRY(kv_proj(x, &k, &v, enc, nm, B, S, H));
        MB_TRY(mb_ok(b, mn_attention(b->g, &att, q, k, v, MN_NONE, NULL)));
        MB_TRY(merge(x, &att, att, nm, B, T));
        MB_TRY(mb_ok(b, mn_add(b->g, &h, h, att)));
        MB_TRY(mlp(x, &h, pre, c->decoder_ffn_dim));
    }
    mb_where(b, "the head");
    MB_TRY(mb_layer_norm(b, &h, h, "model.decoder.layer_norm", d, 1e-5f));
    MB_TRY(mb_ok(b, mn_matmul_ex(b->g, &logits, h, table, false, true)));
    MB_TRY(mb_ok(b, mn_graph_output(b->g, logits, "logits")));
    const mn_cross_entropy_params ce = {true, -100, 0};
    MB_TRY(mb_ok(b, mn_cross_entropy_ex(b->g, &loss, logits, labels, &ce)));
    MB_TRY(mb_ok(b, mn_graph_loss(b->g, loss)));
    model_name(m, "decoder_input_ids", ids);
    model_name(m, "labels", labels);
    model_name(m, "logits", logits);
    model_name(m, "loss", loss);
    return MN_OK;
}

static mn_status build_decode(wb *x, mn_model *m) {
    mb *b = &x->b;
    whisper *w = x->w;
    const mn_whisper_config *c = &w->c;
    const int64_t S = c->max_source_positions, d = c->d_model, H = c->decoder_attention_heads, Dh = d / H,
                  L = c->decoder_layers, Tmax = c->max_target_positions;
    mn_tensor feat, cpos, ids, pos, enc, table, h, logits;
    MB_TRY(mb_ok(b, mn_graph_input(b->g, &feat, "input_features", MN_F32, 3, MB_S(1, c->num_mel_bins, 2 * S))));
    MB_TRY(mb_ok(b, mn_graph_input(b->g, &cpos, "cross_pos", MN_I32, 1, MB_S(1))));
    MB_TRY(encoder(x, &enc, feat, 1));
    if (!(w->cross_names = calloc((size_t)(2 * L), sizeof *w->cross_names))) {
        model_set_err(m, "whisper: out of memory");
        return MN_E_NOMEM;
    }
    mn_tensor *cross = w->cross = malloc((size_t)(2 * L) * sizeof *cross);
    if (!cross) {
        model_set_err(m, "whisper: out of memory");
        return MN_E_NOMEM;
    }
    mn_status st = MN_OK;
    for (int64_t l = 0; l < L && !st; l++) { /* the encoder branch: cross keys and values into state */
        char nm[160], sn[64];
        mn_tensor k, v, ka, va;
        snprintf(nm, sizeof nm, "model.decoder.layers.%lld.encoder_attn", (long long)l);
        mb_where(b, "%s (keys and values of the encoder output)", nm);
        st = kv_proj(x, &k, &v, enc, nm, 1, S, H);
        for (int kk = 0; !st && kk < 2; kk++) {
            snprintf(sn, sizeof sn, "cache.cross.%lld.%c", (long long)l, kk ? 'v' : 'k');
            st = mb_ok(b, mn_graph_state(b->g, &cross[2 * l + kk], sn, 4, MB_S(1, H, S, Dh)));
            if (!st) st = mb_ok(b, mn_kv_append(b->g, kk ? &va : &ka, cross[2 * l + kk], kk ? v : k, cpos));
            snprintf(sn, sizeof sn, "cross.%lld.%c", (long long)l, kk ? 'v' : 'k');
            if (!st) st = mb_ok(b, mn_graph_output(b->g, kk ? va : ka, sn));
            if (!st && !(w->cross_names[2 * l + kk] = strdup(sn))) st = MN_E_NOMEM;
        }
    }
    /* the one-token decoder branch */
    if (!st) st = mb_ok(b, mn_graph_input(b->g, &ids, "decoder_input_ids", MN_I32, 2, MB_S(1, 1)));
    if (!st) st = mb_ok(b, mn_graph_input(b->g, &pos, "pos", MN_I32, 1, MB_S(1)));
    if (!st) st = embed(x, &h, &table, ids, pos, 1, 1);
    for (int64_t l = 0; l < L && !st; l++) {
        char pre[96], nm[160], sn[64];
        mn_tensor a, q, k, v, att, ck, cv;
        snprintf(pre, sizeof pre, "model.decoder.layers.%lld", (long long)l);
        mb_where(b, "%s", pre);
        const mn_attention_params causal = {true, 0, 0};
        snprintf(nm, sizeof nm, "%s.self_attn_layer_norm", pre);
        MB_TRY(mb_layer_norm(b, &a, h, nm, d, 1e-5f));
        snprintf(nm, sizeof nm, "%s.self_attn", pre);
        MB_TRY(q_proj(x, &q, a, nm, 1, 1, H));
        MB_TRY(kv_proj(x, &k, &v, a, nm, 1, 1, H));
        snprintf(sn, sizeof sn, "cache.self.%lld.k", (long long)l);
        MB_TRY(mb_ok(b, mn_graph_state(b->g, &ck, sn, 4, MB_S(1, H, Tmax, Dh))));
        snprintf(sn, sizeof sn, "cache.self.%lld.v", (long long)l);
        MB_TRY(mb_ok(b, mn_graph_state(b->g, &cv, sn, 4, MB_S(1, H, Tmax, Dh))));
        MB_TRY(mb_ok(b, mn_kv_append(b->g, &k, ck, k, pos)));
        MB_TRY(mb_ok(b, mn_kv_append(b->g, &v, cv, v, pos)));
        MB_TRY(mb_ok(b, mn_attention(b->g, &att, q, k, v, pos, &causal)));
        MB_TRY(merge(x, &att, att, nm, 1, 1));
        MB_TRY(mb_ok(b, mn_add(b->g, &h, h, att)));
        snprintf(nm, sizeof nm, "%s.encoder_attn_layer_norm", pre);
        MB_TRY(mb_layer_norm(b, &a, h, nm, d, 1e-5f));
        snprintf(nm, sizeof nm, "%s.encoder_attn", pre);
        MB_TRY(q_proj(x, &q, a, nm, 1, 1, H));
        MB_TRY(mb_ok(b, mn_attention(b->g, &att, q, cross[2 * l], cross[2 * l + 1], MN_NONE, NULL)));
        MB_TRY(merge(x, &att, att, nm, 1, 1));
        MB_TRY(mb_ok(b, mn_add(b->g, &h, h, att)));
        MB_TRY(mlp(x, &h, pre, c->decoder_ffn_dim));
    }
    MB_TRY(st);
    mb_where(b, "the head");
    MB_TRY(mb_layer_norm(b, &h, h, "model.decoder.layer_norm", d, 1e-5f));
    MB_TRY(mb_ok(b, mn_matmul_ex(b->g, &logits, h, table, false, true)));
    MB_TRY(mb_ok(b, mn_graph_output(b->g, logits, "logits")));
    model_name(m, "logits", logits);
    if (!(w->logits = malloc((size_t)c->vocab_size * sizeof *w->logits))) {
        model_set_err(m, "whisper: out of memory");
        return MN_E_NOMEM;
    }
    return MN_OK;
}

static void free_whisper(void *p) {
    whisper *w = p;
    if (!w) return;
    for (int64_t i = 0; w->cross_names && i < 2 * w->c.decoder_layers; i++) free(w->cross_names[i]);
    free(w->cross_names);
    free(w->cross);
    free(w->logits);
    free(w);
}

mn_status mn_whisper_create(mn_model **out, mn_graph *g, const mn_whisper_config *c, const mn_whisper_options *o) {
    if (!out) return MN_E_INVALID;
    mn_model *m = model_new(MODEL_WHISPER, "whisper", g);
    *out = m;
    if (!m) return MN_E_NOMEM;
    whisper *w = calloc(1, sizeof *w);
    mn_status st = MN_OK;
    if (!w) {
        model_set_err(m, "whisper: out of memory");
        st = MN_E_NOMEM;
    } else {
        m->impl = w;
        m->free_impl = free_whisper;
    }
    if (!st && (!g || !c)) {
        model_set_err(m, "whisper: %s is NULL", g ? "config" : "graph");
        st = MN_E_INVALID;
    }
    if (!st) {
        w->c = *c;
        w->o = o ? *o : mn_whisper_default_options();
        const mn_whisper_options *op = &w->o;
        if ((op->kind != MN_WHISPER_ENCODER && op->kind != MN_WHISPER_TRAIN && op->kind != MN_WHISPER_DECODE) ||
            op->batch < 1 || op->batch > 4096 || (op->kind == MN_WHISPER_DECODE && op->batch != 1) ||
            (op->kind == MN_WHISPER_TRAIN && (op->seq_len < 1 || op->seq_len > c->max_target_positions)) ||
            c->d_model < 1 || c->encoder_attention_heads < 1 || c->decoder_attention_heads < 1 ||
            c->d_model % c->encoder_attention_heads || c->d_model % c->decoder_attention_heads) {
            model_set_err(m, "whisper: options: kind %d, batch %lld (DECODE: 1), seq_len %lld (TRAIN: 1..%lld); or "
                             "heads that do not divide d_model %lld",
                          (int)op->kind, (long long)op->batch, (long long)op->seq_len,
                          (long long)c->max_target_positions, (long long)c->d_model);
            st = MN_E_INVALID;
        }
        if (!st) st = model_add_ignore(m, "proj_out.weight"); /* tied to embed_tokens */
        wb x;
        mb_init(&x.b, m, op->freeze, op->freeze_user);
        x.w = w;
        if (!st) st = op->kind == MN_WHISPER_DECODE ? build_decode(&x, m) : build_train(&x, m);
    }
    m->dead = st != MN_OK;
    return st;
}

/* ---- greedy decoding ------------------------------------------------------------------- */

static mn_status run_token(mn_model *m, mn_session *s, int32_t tok, int64_t pos) {
    whisper *w = m->impl;
    const int32_t p = (int32_t)pos;
    const char *out = "logits";
    mn_status st;
    if ((st = mn_session_set_input(s, "decoder_input_ids", &tok, sizeof tok)) ||
        (st = mn_session_set_input(s, "pos", &p, sizeof p)) || (st = mn_session_run_outputs(s, &out, 1)) ||
        (st = mn_session_output(s, "logits", w->logits, (size_t)w->c.vocab_size * sizeof *w->logits)))
        model_set_err(m, "whisper_greedy: token at position %lld: %s", (long long)pos, mn_session_error(s));
    return st;
}

mn_status mn_whisper_greedy(mn_model *m, mn_session *s, const float *features, const mn_whisper_decode_options *o,
                            int32_t *out, int64_t *n_out) {
    mn_status st = model_check(m, MODEL_WHISPER, "whisper_greedy");
    if (st) return st;
    whisper *w = m->impl;
    const mn_whisper_config *c = &w->c;
    if (n_out) *n_out = 0;
    if (!s || !features || !o || !o->prompt || o->n_prompt < 1 || o->max_new < 1 || !out ||
        o->n_prompt + o->max_new > c->max_target_positions || w->o.kind != MN_WHISPER_DECODE) {
        model_set_err(m, "whisper_greedy: needs a session of an MN_WHISPER_DECODE model, features, a prompt and out, "
                         "with prompt + max_new <= %lld",
                      (long long)c->max_target_positions);
        return MN_E_INVALID;
    }
    for (int i = 0; i < o->n_prompt; i++)
        if (o->prompt[i] < 0 || o->prompt[i] >= c->vocab_size) {
            model_set_err(m, "whisper_greedy: prompt token %d is outside the vocabulary", (int)o->prompt[i]);
            return MN_E_INVALID;
        }
    const int32_t zero = 0;
    const size_t nf = (size_t)(c->num_mel_bins * 2 * c->max_source_positions);
    if ((st = mn_session_set_input(s, "input_features", features, nf * sizeof *features)) ||
        (st = mn_session_set_input(s, "cross_pos", &zero, sizeof zero)) ||
        (st = mn_session_run_outputs(s, (const char *const *)w->cross_names, (int)(2 * c->decoder_layers)))) {
        model_set_err(m, "whisper_greedy: the encoder: %s", mn_session_error(s));
        return st;
    }
    for (int i = 0; i < o->n_prompt; i++)
        if ((st = run_token(m, s, o->prompt[i], i))) return st;
    int64_t n = 0;
    for (; n < o->max_new; n++) {
        float *lg = w->logits;
        for (int i = 0; o->suppress && i < o->n_suppress; i++)
            if (o->suppress[i] >= 0 && o->suppress[i] < c->vocab_size) lg[o->suppress[i]] = -INFINITY;
        for (int i = 0; n == 0 && o->begin_suppress && i < o->n_begin_suppress; i++)
            if (o->begin_suppress[i] >= 0 && o->begin_suppress[i] < c->vocab_size) lg[o->begin_suppress[i]] = -INFINITY;
        int64_t best = -1;
        for (int64_t v = 0; v < c->vocab_size; v++)
            if (!isnan(lg[v]) && (best < 0 || lg[v] > lg[best])) best = v;
        if (best < 0 || !isfinite(lg[best])) {
            model_set_err(m, "whisper_greedy: no finite logit at new token %lld", (long long)n);
            return MN_E_FORMAT;
        }
        if (best == c->eos_token_id) break;
        out[n] = (int32_t)best;
        if (n + 1 < o->max_new && (st = run_token(m, s, (int32_t)best, o->n_prompt + n))) return st;
    }
    if (n_out) *n_out = n;
    return MN_OK;
}
