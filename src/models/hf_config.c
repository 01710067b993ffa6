/* hf_config.c - Llama config.json: parsing, validation, RoPE frequencies.
 *
 * Does: parse with cJSON, refuse duplicated keys, read each key the builder
 * uses with its type and range checked, accept the forms different
 * transformers versions write (see mn_llama_config in meganeura_models.h),
 * refuse by name every key whose value the builder cannot honour, and check
 * that the sizes fit together (heads divide, parameter counts do not
 * overflow). Computes the inverse RoPE frequencies the way transformers does
 * (f32 arithmetic, llama3 and linear scaling).
 *
 * Does not: look at keys that do not change the computation
 * (architectures, use_cache, transformers_version, ...), or at tokenizer
 * files.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/hf_util.h"

/* Largest config.json read (published ones are about 1 KB). */
#define CONFIG_MAX_BYTES ((size_t)16 << 20)

typedef struct pctx {
    char *err;
    size_t cap;
} pctx;

static mn_status bad(pctx *p, mn_status st, const char *fmt, ...) HF_PRINTF(3, 4);
static mn_status bad(pctx *p, mn_status st, const char *fmt, ...) {
    if (p->err && p->cap) {
        int k = snprintf(p->err, p->cap, "config.json: ");
        if (k > 0 && (size_t)k < p->cap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + k, p->cap - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return st;
}

static const cJSON *item(const cJSON *o, const char *key) {
    return o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

/* An integer in [lo, hi]; absent (or null when null_ok) leaves *out and
 * *present false. */
static mn_status get_int(pctx *p, const cJSON *o, const char *prefix, const char *key, bool required, bool null_ok,
                         int64_t lo, int64_t hi, int64_t *out, bool *present) {
    const cJSON *v = item(o, key);
    if (present) *present = false;
    if (!v || (null_ok && cJSON_IsNull(v))) {
        if (required) return bad(p, MN_E_FORMAT, "%s%s is required (an integer)", prefix, key);
        return MN_OK;
    }
    if (!cJSON_IsNumber(v)) return bad(p, MN_E_FORMAT, "%s%s must be an integer, got %s", prefix, key, hf_json_kind(v));
    const double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return bad(p, MN_E_FORMAT, "%s%s must be an integer, got %.17g", prefix, key, d);
    if (d < (double)lo || d > (double)hi)
        return bad(p, MN_E_FORMAT, "%s%s = %.17g is outside [%lld, %lld]", prefix, key, d, (long long)lo,
                   (long long)hi);
    *out = (int64_t)d;
    if (present) *present = true;
    return MN_OK;
}

/* A finite number in (lo, hi] (lo_open) or [lo, hi]. */
static mn_status get_real(pctx *p, const cJSON *o, const char *prefix, const char *key, bool required, double lo,
                          bool lo_open, double hi, double *out, bool *present) {
    const cJSON *v = item(o, key);
    if (present) *present = false;
    if (!v) {
        if (required) return bad(p, MN_E_FORMAT, "%s%s is required (a number)", prefix, key);
        return MN_OK;
    }
    if (!cJSON_IsNumber(v)) return bad(p, MN_E_FORMAT, "%s%s must be a number, got %s", prefix, key, hf_json_kind(v));
    const double d = v->valuedouble;
    if (!isfinite(d) || (lo_open ? d <= lo : d < lo) || d > hi)
        return bad(p, MN_E_FORMAT, "%s%s = %.17g is outside %s%g, %g]", prefix, key, d, lo_open ? "(" : "[", lo, hi);
    *out = d;
    if (present) *present = true;
    return MN_OK;
}

/* A boolean; absent leaves *out. */
static mn_status get_bool(pctx *p, const cJSON *o, const char *key, bool *out, bool *present) {
    const cJSON *v = item(o, key);
    if (present) *present = false;
    if (!v) return MN_OK;
    if (!cJSON_IsBool(v)) return bad(p, MN_E_FORMAT, "%s must be true or false, got %s", key, hf_json_kind(v));
    *out = cJSON_IsTrue(v);
    if (present) *present = true;
    return MN_OK;
}

/* A string or absent/null (NULL). */
static mn_status get_str(pctx *p, const cJSON *o, const char *prefix, const char *key, const char **out) {
    const cJSON *v = item(o, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return MN_OK;
    if (!cJSON_IsString(v) || !v->valuestring)
        return bad(p, MN_E_FORMAT, "%s%s must be a string, got %s", prefix, key, hf_json_kind(v));
    *out = v->valuestring;
    return MN_OK;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        mn_status st_ = (x);                                                                                           \
        if (st_) return st_;                                                                                           \
    } while (0)

/* ---- the parts ------------------------------------------------------------- */

static mn_status parse_unsupported(pctx *p, const cJSON *root) {
    const char *s;
    char eb[96];
    TRY(get_str(p, root, "", "model_type", &s));
    if (s && strcmp(s, "llama") != 0)
        return bad(p, MN_E_UNSUPPORTED, "model_type '%s' is not supported (only llama)", mn_escape(eb, sizeof eb, s));
    TRY(get_str(p, root, "", "hidden_act", &s));
    if (s && strcmp(s, "silu") != 0 && strcmp(s, "swish") != 0)
        return bad(p, MN_E_UNSUPPORTED, "hidden_act '%s' is not supported (only silu)", mn_escape(eb, sizeof eb, s));
    static const char *const off[] = {"attention_bias", "mlp_bias", "rope_interleaved"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
        bool v = false;
        TRY(get_bool(p, root, off[i], &v, NULL));
        if (v) return bad(p, MN_E_UNSUPPORTED, "%s true is not supported", off[i]);
    }
    double d = 0;
    TRY(get_real(p, root, "", "attention_dropout", false, 0, false, 1, &d, NULL));
    if (d != 0) return bad(p, MN_E_UNSUPPORTED, "attention_dropout %g is not supported (only 0)", d);
    d = 1;
    TRY(get_real(p, root, "", "partial_rotary_factor", false, 0, true, 1, &d, NULL));
    if (d != 1) return bad(p, MN_E_UNSUPPORTED, "partial_rotary_factor %g is not supported (only 1)", d);
    const cJSON *q = item(root, "quantization_config");
    if (q && !cJSON_IsNull(q))
        return bad(p, MN_E_UNSUPPORTED, "quantization_config: quantized checkpoints are not supported");
    int64_t tp = 1;
    TRY(get_int(p, root, "", "pretraining_tp", false, true, 1, 1 << 20, &tp, NULL)); /* any value: the same math */
    return MN_OK;
}

static mn_status parse_dtype(pctx *p, const cJSON *root, mn_llama_config *c) {
    const char *a, *b;
    char ea[64], eb[64];
    TRY(get_str(p, root, "", "dtype", &a));
    TRY(get_str(p, root, "", "torch_dtype", &b));
    if (a && b && strcmp(a, b) != 0)
        return bad(p, MN_E_FORMAT, "dtype '%s' and torch_dtype '%s' disagree", mn_escape(ea, sizeof ea, a),
                   mn_escape(eb, sizeof eb, b));
    const char *s = a ? a : b;
    if (!s) return MN_OK;
    static const char *const ok[] = {"float32", "bfloat16", "float16", "float64", "auto"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (strcmp(s, ok[i]) == 0) {
            snprintf(c->dtype, sizeof c->dtype, "%s", s);
            return MN_OK;
        }
    return bad(p, MN_E_UNSUPPORTED, "%s '%s' is not supported (float32, bfloat16, float16, float64)",
               a ? "dtype" : "torch_dtype", mn_escape(ea, sizeof ea, s));
}

/* The scaling part of a rope object (rope_scaling or rope_parameters). */
typedef struct rope_desc {
    bool present;
    const char *type; /* "default", "linear", "llama3", ... */
    double factor, low, high;
    int64_t orig;
} rope_desc;

static mn_status parse_rope_obj(pctx *p, const cJSON *o, const char *key, rope_desc *r) {
    char prefix[40], eb[64];
    memset(r, 0, sizeof *r);
    if (!o || cJSON_IsNull(o)) return MN_OK;
    if (!cJSON_IsObject(o)) return bad(p, MN_E_FORMAT, "%s must be an object or null, got %s", key, hf_json_kind(o));
    snprintf(prefix, sizeof prefix, "%s.", key);
    r->present = true;
    const char *t1, *t2;
    TRY(get_str(p, o, prefix, "rope_type", &t1));
    TRY(get_str(p, o, prefix, "type", &t2));
    if (t1 && t2 && strcmp(t1, t2) != 0)
        return bad(p, MN_E_FORMAT, "%srope_type and %stype disagree", prefix, prefix);
    r->type = t1 ? t1 : t2 ? t2 : "default";
    if (!t1 && !t2) {
        /* transformers 5 may key rope parameters by layer type (Gemma) */
        for (const cJSON *c = o->child; c; c = c->next)
            if (cJSON_IsObject(c))
                return bad(p, MN_E_UNSUPPORTED, "%s%s: per-layer-type rope parameters are not supported", prefix,
                           mn_escape(eb, sizeof eb, c->string));
    }
    if (strcmp(r->type, "default") == 0) return MN_OK;
    if (strcmp(r->type, "linear") == 0)
        return get_real(p, o, prefix, "factor", true, 0, true, 1e6, &r->factor, NULL);
    if (strcmp(r->type, "llama3") == 0) {
        TRY(get_real(p, o, prefix, "factor", true, 0, true, 1e6, &r->factor, NULL));
        TRY(get_real(p, o, prefix, "low_freq_factor", true, 0, true, 1e6, &r->low, NULL));
        TRY(get_real(p, o, prefix, "high_freq_factor", true, 0, true, 1e6, &r->high, NULL));
        TRY(get_int(p, o, prefix, "original_max_position_embeddings", true, false, 1, MN_LLAMA_MAX_POSITIONS,
                    &r->orig, NULL));
        if (!(r->high > r->low))
            return bad(p, MN_E_FORMAT, "%shigh_freq_factor %g must be larger than low_freq_factor %g", prefix,
                       r->high, r->low);
        return MN_OK;
    }
    return bad(p, MN_E_UNSUPPORTED, "%srope_type '%s' is not supported (default, linear, llama3)", prefix,
               mn_escape(eb, sizeof eb, r->type));
}

static bool rope_same(const rope_desc *a, const rope_desc *b) {
    return strcmp(a->type, b->type) == 0 && a->factor == b->factor && a->low == b->low && a->high == b->high &&
           a->orig == b->orig;
}

static mn_status parse_rope(pctx *p, const cJSON *root, mn_llama_config *c) {
    const cJSON *params = item(root, "rope_parameters"), *scaling = item(root, "rope_scaling");
    rope_desc rp, rs;
    TRY(parse_rope_obj(p, params, "rope_parameters", &rp));
    TRY(parse_rope_obj(p, scaling, "rope_scaling", &rs));
    if (rp.present && rs.present && !rope_same(&rp, &rs))
        return bad(p, MN_E_FORMAT, "rope_parameters and rope_scaling disagree (rope_type '%s' vs '%s' or factors)",
                   rp.type, rs.type);
    const rope_desc *r = rp.present ? &rp : &rs;
    double theta_top = 0, theta_par = 0;
    bool has_top, has_par = false;
    TRY(get_real(p, root, "", "rope_theta", false, 1, true, 1e12, &theta_top, &has_top));
    if (rp.present) TRY(get_real(p, params, "rope_parameters.", "rope_theta", false, 1, true, 1e12, &theta_par, &has_par));
    if (has_top && has_par && theta_top != theta_par)
        return bad(p, MN_E_FORMAT, "rope_theta %.17g and rope_parameters.rope_theta %.17g disagree", theta_top,
                   theta_par);
    c->rope_theta = has_par ? theta_par : has_top ? theta_top : 10000.0;
    c->rope_scaling = MN_ROPE_SCALING_NONE;
    if (r->present && strcmp(r->type, "linear") == 0) {
        c->rope_scaling = MN_ROPE_SCALING_LINEAR;
        c->rope_factor = r->factor;
    } else if (r->present && strcmp(r->type, "llama3") == 0) {
        c->rope_scaling = MN_ROPE_SCALING_LLAMA3;
        c->rope_factor = r->factor;
        c->rope_low_freq_factor = r->low;
        c->rope_high_freq_factor = r->high;
        c->rope_original_max_position_embeddings = r->orig;
    }
    return MN_OK;
}

static mn_status parse_tokens(pctx *p, const cJSON *root, mn_llama_config *c) {
    bool has;
    c->bos_token_id = -1;
    TRY(get_int(p, root, "", "bos_token_id", false, true, 0, INT32_MAX, &c->bos_token_id, &has));
    const cJSON *e = item(root, "eos_token_id");
    c->n_eos = 0;
    if (!e || cJSON_IsNull(e)) return MN_OK;
    if (cJSON_IsNumber(e)) {
        c->n_eos = 1;
        return get_int(p, root, "", "eos_token_id", true, false, 0, INT32_MAX, &c->eos_token_id[0], NULL);
    }
    if (!cJSON_IsArray(e))
        return bad(p, MN_E_FORMAT, "eos_token_id must be an integer or a list of integers, got %s", hf_json_kind(e));
    for (const cJSON *v = e->child; v; v = v->next) {
        if (c->n_eos == MN_LLAMA_MAX_EOS)
            return bad(p, MN_E_FORMAT, "eos_token_id lists more than %d ids", MN_LLAMA_MAX_EOS);
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
            v->valuedouble < 0 || v->valuedouble > INT32_MAX)
            return bad(p, MN_E_FORMAT, "eos_token_id[%d] must be an integer in [0, %d]", c->n_eos, INT32_MAX);
        c->eos_token_id[c->n_eos++] = (int64_t)v->valuedouble;
    }
    return MN_OK;
}

/* Element counts of every parameter, checked against MN_LLAMA_MAX_PARAMS. */
static mn_status check_counts(pctx *p, const mn_llama_config *c) {
    const int64_t H = c->hidden_size, q = c->num_attention_heads * c->head_dim,
                  kv = c->num_key_value_heads * c->head_dim, I = c->intermediate_size, V = c->vocab_size,
                  L = c->num_hidden_layers;
    /* every factor is <= 2^24 (q and kv <= 2^48), so each product of two fits */
    const int64_t layer_parts[] = {H * q, H * kv, H * kv, q * H, H * I, H * I, I * H, H, H};
    int64_t layer = 0;
    for (size_t i = 0; i < sizeof layer_parts / sizeof *layer_parts; i++) {
        if (layer_parts[i] > MN_LLAMA_MAX_PARAMS)
            return bad(p, MN_E_FORMAT, "a layer tensor would hold %lld elements, more than 2^40",
                       (long long)layer_parts[i]);
        layer += layer_parts[i];
    }
    const int64_t emb = V * H;
    if (layer > MN_LLAMA_MAX_PARAMS / L || emb > MN_LLAMA_MAX_PARAMS ||
        layer * L + emb * (c->tie_word_embeddings ? 1 : 2) + H > MN_LLAMA_MAX_PARAMS)
        return bad(p, MN_E_FORMAT,
                   "the model would hold more than 2^40 parameters (vocab_size %lld, hidden_size %lld, "
                   "intermediate_size %lld, num_hidden_layers %lld)",
                   (long long)V, (long long)H, (long long)I, (long long)L);
    return MN_OK;
}

static mn_status parse_root(pctx *p, const cJSON *root, mn_llama_config *c) {
    if (!cJSON_IsObject(root)) return bad(p, MN_E_FORMAT, "the top level must be an object, got %s", hf_json_kind(root));
    const char *dup = hf_json_duplicate_key(root);
    if (dup) {
        char eb[96];
        return bad(p, MN_E_FORMAT, "key '%s' occurs twice (readers disagree on which one counts)",
                   mn_escape(eb, sizeof eb, dup));
    }
    TRY(parse_unsupported(p, root));
    const int64_t M = MN_LLAMA_MAX_SIZE;
    TRY(get_int(p, root, "", "vocab_size", true, false, 1, M, &c->vocab_size, NULL));
    TRY(get_int(p, root, "", "hidden_size", true, false, 1, M, &c->hidden_size, NULL));
    TRY(get_int(p, root, "", "num_hidden_layers", true, false, 1, MN_LLAMA_MAX_LAYERS, &c->num_hidden_layers, NULL));
    TRY(get_int(p, root, "", "num_attention_heads", true, false, 1, M, &c->num_attention_heads, NULL));
    TRY(get_int(p, root, "", "intermediate_size", true, false, 1, M, &c->intermediate_size, NULL));
    bool has_kv, has_hd;
    c->num_key_value_heads = c->num_attention_heads;
    TRY(get_int(p, root, "", "num_key_value_heads", false, true, 1, M, &c->num_key_value_heads, &has_kv));
    TRY(get_int(p, root, "", "head_dim", false, true, 1, M, &c->head_dim, &has_hd));
    c->max_position_embeddings = 2048;
    TRY(get_int(p, root, "", "max_position_embeddings", false, false, 1, MN_LLAMA_MAX_POSITIONS,
                &c->max_position_embeddings, NULL));
    c->rms_norm_eps = 1e-6;
    TRY(get_real(p, root, "", "rms_norm_eps", false, 0, true, 1, &c->rms_norm_eps, NULL));
    c->initializer_range = 0.02;
    TRY(get_real(p, root, "", "initializer_range", false, 0, false, 1e3, &c->initializer_range, NULL));
    c->tie_word_embeddings = false;
    TRY(get_bool(p, root, "tie_word_embeddings", &c->tie_word_embeddings, NULL));
    TRY(parse_dtype(p, root, c));
    TRY(parse_rope(p, root, c));
    TRY(parse_tokens(p, root, c));

    /* how the sizes fit together */
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return bad(p, MN_E_FORMAT, "num_key_value_heads %lld does not divide num_attention_heads %lld",
                   (long long)c->num_key_value_heads, (long long)c->num_attention_heads);
    if (!has_hd) {
        if (c->hidden_size % c->num_attention_heads != 0)
            return bad(p, MN_E_FORMAT, "num_attention_heads %lld does not divide hidden_size %lld (and head_dim is absent)",
                       (long long)c->num_attention_heads, (long long)c->hidden_size);
        c->head_dim = c->hidden_size / c->num_attention_heads;
    }
    if (c->head_dim % 2 != 0)
        return bad(p, MN_E_FORMAT, "head_dim %lld must be even (RoPE turns pairs of dimensions)", (long long)c->head_dim);
    if (c->num_attention_heads * c->head_dim > M)
        return bad(p, MN_E_FORMAT, "num_attention_heads %lld x head_dim %lld is larger than %lld",
                   (long long)c->num_attention_heads, (long long)c->head_dim, (long long)M);
    return check_counts(p, c);
}

mn_status mn_llama_config_parse(mn_llama_config *out, const char *json, size_t len, char *err, size_t errcap) {
    pctx p = {err, errcap};
    if (err && errcap) err[0] = 0;
    if (!out || (!json && len)) return bad(&p, MN_E_INVALID, "%s is NULL", out ? "json" : "out");
    mn_llama_config c;
    memset(&c, 0, sizeof c);
    if (json && hf_json_bad_string(json, len))
        return bad(&p, MN_E_FORMAT, "a string holds a control character or \\u0000");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json ? json : "", len, &end, false);
    if (!root) {
        size_t at = end && json && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return bad(&p, MN_E_FORMAT, "not valid JSON (near byte %zu of %zu)", at, len);
    }
    /* only whitespace may follow the value */
    for (const char *q = end; q && q < json + len; q++)
        if (*q != ' ' && *q != '\t' && *q != '\r' && *q != '\n' && *q != 0) {
            cJSON_Delete(root);
            return bad(&p, MN_E_FORMAT, "text after the JSON value (byte %zu of %zu)", (size_t)(q - json), len);
        }
    mn_status st = parse_root(&p, root, &c);
    cJSON_Delete(root);
    if (st == MN_OK) *out = c;
    return st;
}

mn_status mn_llama_config_load(mn_llama_config *out, const char *path, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!out || !path) {
        hf_fmt(err, errcap, "llama_config_load: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    struct stat sb;
    char *file = NULL;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t n = strlen(path) + sizeof "/config.json";
        if (!(file = malloc(n))) {
            hf_fmt(err, errcap, "llama_config_load: out of memory");
            return MN_E_NOMEM;
        }
        snprintf(file, n, "%s/config.json", path);
    }
    const char *f = file ? file : path;
    char *text = NULL, msg[512];
    size_t len = 0;
    mn_status st = mn_read_file(&text, &len, f, CONFIG_MAX_BYTES, msg, sizeof msg);
    if (st == MN_OK) {
        st = mn_llama_config_parse(out, text, len, msg, sizeof msg);
        if (st) {
            char pb[200];
            /* "config.json: key ..." becomes "'PATH': key ..." */
            const char *m = strncmp(msg, "config.json: ", 13) == 0 ? msg + 13 : msg;
            hf_fmt(err, errcap, "'%s': %s", mn_escape(pb, sizeof pb, f), m);
        }
    } else {
        hf_fmt(err, errcap, "%s", msg);
    }
    free(text);
    free(file);
    return st;
}

/* ---- RoPE frequencies ----------------------------------------------------- */

/* transformers computes these in f32 (torch float tensors, Python scalars
 * rounded to f32); every step below is one f32 operation in the same order. */
mn_status mn_llama_inv_freq(float *out, const mn_llama_config *c) {
    if (!out || !c || c->head_dim < 2 || c->head_dim % 2) return MN_E_INVALID;
    const int64_t half = c->head_dim / 2;
    const float theta = (float)c->rope_theta, dim = (float)c->head_dim;
    for (int64_t i = 0; i < half; i++) {
        const float e = (float)(2 * i) / dim;
        float inv = 1.0f / powf(theta, e);
        if (c->rope_scaling == MN_ROPE_SCALING_LINEAR) {
            inv = inv / (float)c->rope_factor;
        } else if (c->rope_scaling == MN_ROPE_SCALING_LLAMA3) {
            const double orig = (double)c->rope_original_max_position_embeddings;
            const float factor = (float)c->rope_factor, low = (float)c->rope_low_freq_factor;
            const float low_wl = (float)(orig / c->rope_low_freq_factor);
            const float high_wl = (float)(orig / c->rope_high_freq_factor);
            const float wl = (float)6.283185307179586 / inv;
            const float scaled = wl > low_wl ? inv / factor : inv;
            const float smooth = ((float)orig / wl - low) / (float)(c->rope_high_freq_factor - c->rope_low_freq_factor);
            const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
            const bool medium = !(wl < high_wl) && !(wl > low_wl);
            inv = medium ? smoothed : scaled;
        }
        out[i] = inv;
    }
    return MN_OK;
}
