/* export.c - writes a Llama model as a Hugging Face folder: config.json
 * (LlamaForCausalLM, float32) and model.safetensors (every parameter by its
 * Hugging Face name, F32, little-endian; tied models without lm_head.weight,
 * as transformers saves them). Files are written under a temporary name and
 * renamed into place.
 *
 * Does not: write shards, bf16/f16, the tokenizer (the caller copies
 * tokenizer.json) or optimizer state (mn_session_save does).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/hf_util.h"

char *mn_llama_config_json(const mn_llama_config *c) {
    if (!c) return NULL;
    cJSON *r = cJSON_CreateObject(), *arch = cJSON_CreateArray();
    if (!r || !arch) {
        cJSON_Delete(r);
        cJSON_Delete(arch);
        return NULL;
    }
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddItemToObject(r, "architectures", arch);
    cJSON_AddStringToObject(r, "model_type", "llama");
    cJSON_AddBoolToObject(r, "attention_bias", 0);
    cJSON_AddNumberToObject(r, "attention_dropout", 0.0);
    cJSON_AddBoolToObject(r, "mlp_bias", 0);
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    cJSON_AddNumberToObject(r, "vocab_size", (double)c->vocab_size);
    cJSON_AddNumberToObject(r, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(r, "intermediate_size", (double)c->intermediate_size);
    cJSON_AddNumberToObject(r, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(r, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(r, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddNumberToObject(r, "head_dim", (double)c->head_dim);
    cJSON_AddNumberToObject(r, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddNumberToObject(r, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(r, "rope_theta", c->rope_theta);
    if (c->rope_scaling == MN_ROPE_SCALING_NONE) cJSON_AddNullToObject(r, "rope_scaling");
    else {
        cJSON *rs = cJSON_AddObjectToObject(r, "rope_scaling");
        if (rs && c->rope_scaling == MN_ROPE_SCALING_LINEAR) {
            cJSON_AddStringToObject(rs, "rope_type", "linear");
            cJSON_AddNumberToObject(rs, "factor", c->rope_factor);
        } else if (rs) {
            cJSON_AddStringToObject(rs, "rope_type", "llama3");
            cJSON_AddNumberToObject(rs, "factor", c->rope_factor);
            cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_low_freq_factor);
            cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_high_freq_factor);
            cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                                    (double)c->rope_original_max_position_embeddings);
        }
    }
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddNumberToObject(r, "initializer_range", c->initializer_range);
    cJSON_AddStringToObject(r, "torch_dtype", "float32");
    cJSON_AddStringToObject(r, "dtype", "float32");
    cJSON_AddBoolToObject(r, "use_cache", 1);
    if (c->bos_token_id >= 0) cJSON_AddNumberToObject(r, "bos_token_id", (double)c->bos_token_id);
    else cJSON_AddNullToObject(r, "bos_token_id");
    if (c->n_eos == 1) cJSON_AddNumberToObject(r, "eos_token_id", (double)c->eos_token_id[0]);
    else if (c->n_eos > 1) {
        cJSON *e = cJSON_AddArrayToObject(r, "eos_token_id");
        for (int i = 0; e && i < c->n_eos; i++) cJSON_AddItemToArray(e, cJSON_CreateNumber((double)c->eos_token_id[i]));
    } else cJSON_AddNullToObject(r, "eos_token_id");
    char *txt = cJSON_Print(r);
    cJSON_Delete(r);
    return txt;
}

static mn_status fail(mn_llama *m, mn_status st, const char *fmt, ...) HF_PRINTF(3, 4);
static mn_status fail(mn_llama *m, mn_status st, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hf_llama_set_error(m, buf);
    return st;
}

static mn_status write_config(mn_llama *m, const char *dir) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *txt = mn_llama_config_json(mn_llama_get_config(m));
    if (!txt) return fail(m, MN_E_NOMEM, "llama_export: out of memory for config.json");
    FILE *f = fopen(tmp, "wb");
    bool good = f && fputs(txt, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) good = false;
    free(txt);
    if (!good || rename(tmp, path) != 0) {
        const int e = errno;
        remove(tmp);
        return fail(m, MN_E_IO, "llama_export: cannot write %s: %s", path, strerror(e));
    }
    return MN_OK;
}

static mn_status write_weights(mn_llama *m, mn_session *s, const char *dir) {
    const int n = mn_llama_param_count(m);
    const mn_hf_param *ps = mn_llama_params(m);
    hf_str h = {0};
    hf_str_add(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0, maxn = 0;
    for (int i = 0; i < n; i++) {
        uint64_t cnt = 1;
        hf_str_add(&h, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", ps[i].name); /* HF names: plain ASCII */
        for (int d = 0; d < ps[i].rank; d++) {
            hf_str_add(&h, "%s%lld", d ? "," : "", (long long)ps[i].shape[d]);
            cnt *= (uint64_t)ps[i].shape[d];
        }
        hf_str_add(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                   (unsigned long long)(off + 4 * cnt));
        off += 4 * cnt;
        if (cnt > maxn) maxn = cnt;
    }
    hf_str_add(&h, "}");
    while (!h.oom && h.n % 8) hf_str_add(&h, " ");
    if (h.oom) {
        hf_str_free(&h);
        return fail(m, MN_E_NOMEM, "llama_export: out of memory for the safetensors header");
    }
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    float *buf = malloc((size_t)(maxn ? maxn : 1) * sizeof *buf);
    FILE *f = fopen(tmp, "wb");
    mn_status st = MN_OK;
    if (!buf || !f) st = !buf ? MN_E_NOMEM : MN_E_IO;
    unsigned char len8[8];
    for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)h.n >> (8 * b));
    if (!st && (fwrite(len8, 1, 8, f) != 8 || fwrite(h.p, 1, h.n, f) != h.n)) st = MN_E_IO;
    for (int i = 0; i < n && !st; i++) {
        size_t cnt = 1;
        for (int d = 0; d < ps[i].rank; d++) cnt *= (size_t)ps[i].shape[d];
        if ((st = mn_session_get_param(s, ps[i].name, buf, cnt))) {
            fail(m, st, "llama_export: %s", mn_session_error(s));
            break;
        }
        /* little-endian f32 (the host's layout on every supported machine) */
        if (fwrite(buf, sizeof *buf, cnt, f) != cnt) st = MN_E_IO;
    }
    const int e = errno;
    if (f && fclose(f) != 0 && !st) st = MN_E_IO;
    free(buf);
    hf_str_free(&h);
    if (!st && rename(tmp, path) != 0) st = MN_E_IO;
    if (st) {
        remove(tmp);
        if (st == MN_E_IO) return fail(m, st, "llama_export: cannot write %s: %s", path, strerror(e ? e : errno));
        return st;
    }
    return MN_OK;
}

mn_status mn_llama_export(mn_llama *m, mn_session *s, const char *dir) {
    if (!m || !s || !dir || !dir[0]) return MN_E_INVALID;
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (mkdir(dir, 0777) != 0) return fail(m, MN_E_IO, "llama_export: cannot create %s: %s", dir, strerror(errno));
    } else if (!S_ISDIR(sb.st_mode)) return fail(m, MN_E_IO, "llama_export: %s is not a folder", dir);
    mn_status st = write_weights(m, s, dir);
    if (!st) st = write_config(m, dir);
    return st;
}
