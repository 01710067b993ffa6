/* meganeura_models.h - models built on the public API: Hugging Face
 * checkpoints (config.json, safetensors, sharded folders) and the Llama
 * family of causal language models (SmolLM2, TinyLlama, Llama 3.x).
 *
 * This layer sits above meganeura.h and uses nothing else, like a user
 * program: the builder records ops with mn_* calls into a caller's graph, the
 * loader reads tensors with mn_safetensors_* and writes them with
 * mn_session_set_param. Parameter names and layouts are Hugging Face's
 * (model.layers.N.self_attn.q_proj.weight, [out, in]), so a published
 * checkpoint loads as it is and a trained model saves under the same names.
 *
 * Conventions are meganeura.h's: mn_status returns, results first, errors
 * kept by the handle (mn_hf_checkpoint_error, mn_llama_error) or written to
 * an err buffer where there is no handle yet; every destroy accepts NULL.
 *
 * Does not: tokenize text (meganeura.h's mn_tokenizer_* does).
 */
#ifndef MEGANEURA_MODELS_H
#define MEGANEURA_MODELS_H

#include "meganeura.h"

#ifdef __cplusplus
extern "C" {
#endif
/* The functions declared here are the ones libmeganeura.so exports: the
 * library is built with hidden visibility (-fvisibility=hidden) and a
 * version script (cmake/exports.cmake) made from these headers. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ---- Hugging Face checkpoints ---------------------------------------------- */

/* The tensors of a checkpoint: path is a folder holding model.safetensors
 * (preferred, as transformers does) or model.safetensors.index.json and its
 * shards, or one of those files itself. Opening reads every header, not the
 * data. A sharded folder must agree with its index: every tensor the
 * weight_map names is in the shard it names, every shard tensor is in the
 * weight_map under that shard, no tensor is in two shards, and shard names
 * are plain file names in the folder (no '/'); anything else is refused with
 * every disagreement listed. */
typedef struct mn_hf_checkpoint mn_hf_checkpoint;
/* On failure *out is NULL and err (may be NULL) says why. */
mn_status mn_hf_checkpoint_open(mn_hf_checkpoint **out, const char *path, char *err, size_t errcap);
void mn_hf_checkpoint_close(mn_hf_checkpoint *c);
/* Message of the last failed call on c ("" if none); may be long (a load
 * error lists every missing, unexpected and mis-shaped tensor). */
const char *mn_hf_checkpoint_error(const mn_hf_checkpoint *c);
int mn_hf_checkpoint_count(const mn_hf_checkpoint *c);
/* The i-th tensor, by name order. */
mn_status mn_hf_checkpoint_tensor_at(const mn_hf_checkpoint *c, int i, mn_safetensors_tensor *out);
/* MN_E_NOT_FOUND (no message) when absent. */
mn_status mn_hf_checkpoint_find(const mn_hf_checkpoint *c, const char *name, mn_safetensors_tensor *out);
/* mn_safetensors_read_f32 on the shard that holds name (F32, BF16, F16, F64). */
mn_status mn_hf_checkpoint_read_f32(mn_hf_checkpoint *c, const char *name, float *dst, size_t count);

/* A parameter a model expects, by its Hugging Face name. */
typedef struct mn_hf_param {
    const char *name;
    int rank;
    int64_t shape[MN_MAX_RANK];
    mn_tensor tensor; /* in the graph the model was built into */
} mn_hf_param;

typedef struct mn_hf_load_options {
    /* Parameters the checkpoint lacks keep their values (a partial load,
     * e.g. a new head on a pretrained body); otherwise they are an error. */
    bool allow_missing;
    /* Checkpoint tensors the model lacks are skipped (e.g. a model of fewer
     * layers); otherwise they are an error. */
    bool allow_unexpected;
    /* NULL-terminated list of checkpoint names to skip silently; an entry
     * "*suffix" matches every name ending in suffix. May be NULL. */
    const char *const *ignore;
} mn_hf_load_options;

/* Copies the n parameters from the checkpoint into the session (f32 under
 * the strict contract: BF16/F16 converted exactly, F64 rounded). Everything
 * is checked before any value is written: missing, unexpected and
 * mis-shaped tensors and unsupported dtypes give one error (MN_E_NOT_FOUND,
 * MN_E_SHAPE or MN_E_DTYPE) listing all of them, names escaped. Then each
 * tensor is read, checked for NaN and infinity, and written; a failure at
 * that stage (I/O, a non-finite value) leaves the parameters before it
 * written. Memory: one tensor at a time. o NULL: strict defaults. */
mn_status mn_hf_load(mn_session *s, mn_hf_checkpoint *c, const mn_hf_param *params, int n,
                     const mn_hf_load_options *o);

/* ---- Llama configuration (config.json) ------------------------------------- */

typedef enum mn_rope_scaling {
    MN_ROPE_SCALING_NONE = 0,  /* rope_type "default" (or none) */
    MN_ROPE_SCALING_LINEAR = 1,/* inverse frequencies divided by factor */
    MN_ROPE_SCALING_LLAMA3 = 2 /* Llama 3.1+: long wavelengths divided by factor, a smooth ramp between */
} mn_rope_scaling;

#define MN_LLAMA_MAX_EOS 8

/* What the builder needs from config.json. The parser accepts the forms
 * transformers versions write (torch_dtype or dtype; a top-level rope_theta
 * with rope_scaling, or rope_parameters {rope_theta, rope_type, ...};
 * rope_type or the older type; head_dim present, null or implied; eos_token_id
 * a number or a list) and refuses, naming the key, what the builder cannot
 * honour: hidden_act other than silu, attention_bias or mlp_bias true,
 * rope types other than default/linear/llama3, rope_interleaved true,
 * partial_rotary_factor != 1, attention_dropout != 0, quantization_config,
 * model_type other than llama; as well as wrong types, duplicated keys,
 * non-integral or out-of-range sizes, heads that do not divide, and sizes
 * whose parameter count overflows. Absent keys take transformers' LlamaConfig
 * defaults, except the five sizes, which are required. */
typedef struct mn_llama_config {
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;     /* absent: num_attention_heads */
    int64_t head_dim;                /* absent or null: hidden_size / num_attention_heads */
    int64_t intermediate_size;
    int64_t max_position_embeddings; /* absent: 2048 */
    double rms_norm_eps;             /* absent: 1e-6 */
    double rope_theta;               /* absent: 10000 */
    mn_rope_scaling rope_scaling;
    double rope_factor;              /* linear, llama3 */
    double rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int64_t rope_original_max_position_embeddings;      /* llama3 */
    bool tie_word_embeddings;        /* absent: false */
    double initializer_range;        /* absent: 0.02 (std of fresh weights) */
    char dtype[16];                  /* dtype or torch_dtype ("bfloat16", ...); "" absent. Informational:
                                        weights load as f32 whatever they were stored as */
    int64_t bos_token_id;            /* -1 absent */
    int n_eos;                       /* eos_token_id: 0..MN_LLAMA_MAX_EOS ids */
    int64_t eos_token_id[MN_LLAMA_MAX_EOS];
} mn_llama_config;

/* Limits the parser enforces (each size, and every parameter tensor's and
 * the whole model's element count). */
#define MN_LLAMA_MAX_SIZE ((int64_t)1 << 24)
#define MN_LLAMA_MAX_LAYERS 1024
#define MN_LLAMA_MAX_POSITIONS ((int64_t)1 << 29)
#define MN_LLAMA_MAX_PARAMS ((int64_t)1 << 40)

/* Parses config.json text (len bytes; need not be NUL-terminated). */
mn_status mn_llama_config_parse(mn_llama_config *out, const char *json, size_t len, char *err, size_t errcap);
/* path: a folder holding config.json, or the file. */
mn_status mn_llama_config_load(mn_llama_config *out, const char *path, char *err, size_t errcap);
/* RoPE inverse frequencies of the config, head_dim/2 values, computed as
 * transformers does (in f32, scaling included). */
mn_status mn_llama_inv_freq(float *out, const mn_llama_config *c);

/* ---- the Llama builder ------------------------------------------------------- */

typedef enum mn_llama_kind {
    /* input_ids i32 [B,T] and targets i32 [B*T] (next-token labels, -100
     * ignored: mn_llama_shift_labels) -> logits [B*T,V] and the loss, the
     * mean cross-entropy over the targets that are not -100 (Hugging Face's
     * LlamaForCausalLM loss). */
    MN_LLAMA_TRAIN = 0,
    /* input_ids [B,T] -> logits [B*T,V], positions 0..T-1. */
    MN_LLAMA_FORWARD = 1,
    /* input_ids [B,T] at positions pos..pos+T-1 (pos: an i32 [1] input)
     * over per-layer KV caches of max_seq rows (state tensors, kept between
     * runs) -> logits [B,V] of the rows last_rows (an i32 [B] input: indices
     * into the B*T positions; only those rows pass the final norm and the
     * head). One graph serves prefill (T prompt tokens per run) and decoding
     * (the new token, padded to T): mn_llama_decode sets all three inputs. */
    MN_LLAMA_DECODE = 2
} mn_llama_kind;

typedef struct mn_llama_options {
    mn_llama_kind kind;
    int64_t batch;   /* B >= 1 */
    int64_t seq_len; /* T >= 1: tokens per run */
    int64_t max_seq; /* DECODE: KV-cache rows (longest sequence), <= max_position_embeddings */
    /* Build RoPE from cos/sin tables (f32, computed like transformers) even
     * where the mn_rope op would do (rope scaling needs the tables). */
    bool rope_tables;
    /* Parameters for which freeze(name, user) is true get no gradient and
     * no update (mn_graph_param_freeze). NULL: every parameter trains. */
    bool (*freeze)(const char *name, void *user);
    void *freeze_user;
    /* DECODE with seq_len > 1: the graph also holds a one-token branch
     * (inputs "step.input_ids" [B,1], "step.rope_cos"/"step.rope_sin",
     * output "step.logits" [B,V]) over the same parameters, position input
     * and caches. mn_llama_decode runs only the branch a call needs
     * (mn_session_run_outputs), so a decoding step costs one token, not
     * seq_len; mn_session_run would run both branches (do not). */
    bool decode_step;
} mn_llama_options;

/* TRAIN, batch 1, seq_len 128, no tables, nothing frozen. */
mn_llama_options mn_llama_default_options(void);

typedef struct mn_llama mn_llama;

/* Records the model into g: embed_tokens, per layer RMSNorm -> q/k/v
 * projections (y = x W^T) -> RoPE (rotate half) -> causal grouped-query
 * attention -> o_proj -> residual, RMSNorm -> SwiGLU MLP (gate, up, down) ->
 * residual; the final norm and lm_head (the embedding matrix when
 * tie_word_embeddings). Parameters carry the Hugging Face names; fresh ones
 * are N(0, initializer_range), norms 1. Named tensors: inputs "input_ids",
 * "targets" (TRAIN), "pos" (DECODE), "rope_cos"/"rope_sin" (DECODE with
 * tables: written by mn_llama_set_position), output "logits", state
 * "cache.layers.N.k"/".v" (DECODE). On failure *out is a dead handle
 * whose mn_llama_error says why (destroy it) and g may hold part of the
 * model: destroy it too. */
mn_status mn_llama_create(mn_llama **out, mn_graph *g, const mn_llama_config *c, const mn_llama_options *o);
void mn_llama_destroy(mn_llama *m);
const char *mn_llama_error(const mn_llama *m);
const mn_llama_config *mn_llama_get_config(const mn_llama *m);
const mn_llama_options *mn_llama_get_options(const mn_llama *m);

/* Tensors of the graph (MN_NONE where the kind has none). */
typedef struct mn_llama_tensors {
    mn_tensor input_ids, targets, pos, rope_cos, rope_sin;
    mn_tensor hidden; /* the final norm's output [B*T, hidden_size] ([B, hidden_size] for DECODE) */
    mn_tensor logits, loss;
    /* DECODE with decode_step: the one-token branch */
    mn_tensor step_input_ids, step_rope_cos, step_rope_sin, step_logits;
    mn_tensor last_rows; /* DECODE: i32 [B], the positions the head reads */
} mn_llama_tensors;
mn_llama_tensors mn_llama_get_tensors(const mn_llama *m);

/* The parameters, in creation order; names live as long as m. */
int mn_llama_param_count(const mn_llama *m);
const mn_hf_param *mn_llama_params(const mn_llama *m);
/* Total element count of the parameters. */
int64_t mn_llama_numel(const mn_llama *m);

/* mn_hf_load with the model's parameters; a tied model also accepts (and
 * skips) an lm_head.weight tensor, and rotary_emb.inv_freq buffers of old
 * checkpoints are skipped. o's ignore list adds to these. Errors are copied
 * into mn_llama_error. */
mn_status mn_llama_load(mn_llama *m, mn_session *s, mn_hf_checkpoint *c, const mn_hf_load_options *o);

/* targets[b*T + t] = labels[b*T + t + 1] for t < T-1 and -100 at t = T-1:
 * the shift Hugging Face applies to the labels of a causal LM. */
void mn_llama_shift_labels(int32_t *targets, const int32_t *labels, int64_t batch, int64_t seq_len);

/* DECODE: writes pos (and the RoPE tables when the model has them) for a
 * run whose first token is at position pos. */
mn_status mn_llama_set_position(mn_llama *m, mn_session *s, int64_t pos);
/* DECODE: one run over n <= seq_len new tokens per sequence (tokens
 * [B, n], padded to seq_len inside) at positions pos..pos+n-1, with
 * pos + n <= max_seq; the caches keep rows 0..pos+n-1. logits (may be
 * NULL) gets [B, V]: the logits after each sequence's last token. */
mn_status mn_llama_decode(mn_llama *m, mn_session *s, const int32_t *tokens, int64_t n, int64_t pos,
                          float *logits);
/* DECODE: greedy decoding of n_new tokens after each prompt (prompt
 * [B, n_prompt] fed in runs of seq_len tokens, then one token per run; the
 * highest logit wins, the lowest id on ties) into out [B, n_new];
 * n_prompt + n_new - 1 <= max_seq. */
mn_status mn_llama_greedy(mn_llama *m, mn_session *s, int32_t *out, const int32_t *prompt, int64_t n_prompt,
                          int64_t n_new);

/* ---- sampling and generation (generate.c) ---------------------------------- */

/* How the next token is drawn from a row of logits: temperature <= 0 or
 * top_k == 1 is greedy (the highest logit, the lowest id on ties);
 * otherwise softmax(logits / temperature) restricted to the top_k highest
 * (top_k <= 0: all) and then to the smallest prefix of those, highest
 * first, whose probability reaches top_p (nucleus; at least one token, so
 * top_p -> 0 is greedy; top_p >= 1: all), renormalised, drawn with a
 * generator seeded by seed (same seed, same logits: same tokens). NaN
 * logits are never drawn. */
typedef struct mn_sample_options {
    float temperature; /* 1 */
    int64_t top_k;     /* 0: off */
    float top_p;       /* 1: off */
    uint64_t seed;     /* 0 */
} mn_sample_options;
mn_sample_options mn_sample_default_options(void);

typedef struct mn_sampler {
    mn_sample_options o;
    uint64_t state;
    int64_t cap;   /* scratch size (vocabulary) */
    int32_t *idx;  /* scratch */
    float *prob;   /* scratch */
} mn_sampler;
/* o NULL: defaults. mn_sampler_free releases the scratch. */
void mn_sampler_init(mn_sampler *s, const mn_sample_options *o);
void mn_sampler_free(mn_sampler *s);
/* One token from logits[0..V). MN_E_FORMAT if every logit is NaN,
 * MN_E_NOMEM, MN_E_INVALID for V < 1 or NULLs. */
mn_status mn_sampler_sample(mn_sampler *s, int32_t *out, const float *logits, int64_t V);

/* Incremental detokenization for streaming: push ids one at a time, get
 * back the bytes that are now final. Bytes of an incomplete UTF-8 sequence
 * at the end (a character split across tokens) are held back until a later
 * token completes it or mn_detok_finish flushes them (as U+FFFD). */
typedef struct mn_detok {
    mn_tokenizer *tk;
    unsigned flags;      /* decode flags (MN_TOKENIZE_SKIP_SPECIAL) */
    int32_t *ids;        /* the pending window */
    size_t n, cap;
    size_t emitted;      /* bytes of the window's text already returned */
    char *text;          /* the window's text */
    size_t text_cap;
} mn_detok;
void mn_detok_init(mn_detok *d, mn_tokenizer *tk, unsigned flags);
void mn_detok_free(mn_detok *d);
/* out, len: the new final bytes (they belong to d, valid until the next call). */
mn_status mn_detok_push(mn_detok *d, int32_t id, const char **out, size_t *len);
mn_status mn_detok_finish(mn_detok *d, const char **out, size_t *len);

typedef struct mn_generate_options {
    mn_sample_options sample;
    int64_t max_new;       /* >= 1 */
    const int32_t *stop;   /* ids that end generation (not emitted); may be NULL */
    int n_stop;
    /* Called for each new token (not stop tokens); returning false stops. May be NULL. */
    bool (*on_token)(int32_t id, void *user);
    void *user;
} mn_generate_options;

typedef struct mn_generate_stats {
    int64_t prompt_tokens, new_tokens;
    int64_t decode_runs;        /* one-token decoding runs (decode tokens/s = decode_runs / decode_s) */
    double prefill_s, decode_s; /* prefill: the prompt runs and the first token; decode: the rest */
    bool stopped;               /* a stop token (or on_token) ended it before max_new */
} mn_generate_stats;

/* DECODE, batch 1: runs the prompt (in runs of seq_len), then samples up to
 * max_new tokens, one decoding run each (the one-token branch with
 * decode_step), into out (may be NULL; max_new ids); n_prompt + max_new - 1
 * <= max_seq. stats may be NULL. */
mn_status mn_llama_generate(mn_llama *m, mn_session *s, const int32_t *prompt, int64_t n_prompt,
                            const mn_generate_options *o, int32_t *out, mn_generate_stats *stats);

/* ---- exporting a Hugging Face folder (export.c) ----------------------------- */

/* Writes dir/config.json (LlamaForCausalLM, model_type llama, dtype float32,
 * the config's sizes, RoPE and token ids) and DIR/model.safetensors (every
 * parameter of m read from s, F32, Hugging Face names; a tied model has no
 * lm_head.weight, as transformers saves it), creating dir if needed; both
 * written to a temporary name and renamed. transformers'
 * LlamaForCausalLM.from_pretrained(dir) loads it. */
mn_status mn_llama_export(mn_llama *m, mn_session *s, const char *dir);
/* config.json text for c (malloc'd, free() it); NULL when out of memory. */
char *mn_llama_config_json(const mn_llama_config *c);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* MEGANEURA_MODELS_H */
