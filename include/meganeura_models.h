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
 * Also: torchvision's ResNet (mn_resnet_*), a diffusion U-Net (mn_unet_*),
 * the SmolVLA action expert (mn_vla_*) and Whisper (mn_whisper_*), built
 * under one handle type (mn_model), with the image and audio front ends
 * they need (PNG/JPEG decoding and ImageNet preprocessing, WAV reading and
 * the log-mel spectrogram).
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
    /* Check names, shapes and dtypes only; write nothing (the session may
     * then be NULL). */
    bool check_only;
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


/* ==== the other workloads: ResNet, diffusion U-Net, action expert, Whisper ==== */

/* One handle type for the builders below (mn_resnet_create, ...): it keeps
 * the parameter list under the checkpoint names (torchvision's, Hugging
 * Face's, or the PyTorch modules' of tests/fixtures/gen_workloads.py), the
 * error message, and what the model's helpers need. Destroy it before the
 * graph it was built into is destroyed only if no helper is called after. */
typedef struct mn_model mn_model;
void mn_model_destroy(mn_model *m);
/* Message of the last failed call on m ("" if none); may be long. */
const char *mn_model_error(const mn_model *m);
/* The parameters, in creation order; names live as long as m. */
int mn_model_param_count(const mn_model *m);
const mn_hf_param *mn_model_params(const mn_model *m);
int64_t mn_model_numel(const mn_model *m);
/* A named tensor of the model's graph: its inputs and outputs by their
 * names ("pixels", "logits", "pred", ...) and "loss"; MN_NONE if none. */
mn_tensor mn_model_tensor(const mn_model *m, const char *name);
/* mn_hf_load with the model's parameters (and the model's own ignore list:
 * a ResNet skips "*.num_batches_tracked"); a ResNet built with folded batch
 * norms checks the checkpoint's unfolded tensors (conv weights, batch-norm
 * weight, bias and running statistics) and folds them while loading. Errors
 * are copied into mn_model_error. c may be a single safetensors file. */
mn_status mn_model_load(mn_model *m, mn_session *s, mn_hf_checkpoint *c, const mn_hf_load_options *o);

/* ---- ResNet (torchvision) --------------------------------------------------- */

typedef enum mn_resnet_block {
    MN_RESNET_BASIC = 0,     /* two 3x3 convs (ResNet-18/34), expansion 1 */
    MN_RESNET_BOTTLENECK = 1 /* 1x1, 3x3 (stride here: v1.5), 1x1 (ResNet-50/101/152), expansion 4 */
} mn_resnet_block;

typedef struct mn_resnet_config {
    mn_resnet_block block;
    int layers[4];        /* blocks per stage, each >= 1: {2,2,2,2} for ResNet-18 */
    int64_t width;        /* conv1's channels and layer1's planes (torchvision: 64); stage i has width << i planes */
    int64_t num_classes;  /* fc outputs (1000) */
    int64_t in_channels;  /* 3 */
    float bn_eps;         /* 1e-5 */
    float bn_momentum;    /* 0.1 (PyTorch's convention: new = (1 - m) old + m batch) */
} mn_resnet_config;

#define MN_RESNET_MAX_BLOCKS 64
#define MN_RESNET_MAX_WIDTH 4096

/* torchvision's resnet18/34/50/101/152 (1000 classes); other depths:
 * MN_E_INVALID. */
mn_status mn_resnet_config_preset(mn_resnet_config *out, int depth, char *err, size_t errcap);
/* The architecture a torchvision state_dict holds: block type (conv3
 * present), blocks per stage (the highest layerN.K), width (conv1.weight),
 * classes (fc.weight), input channels. Refuses a checkpoint that is not a
 * torchvision ResNet, naming the tensor. */
mn_status mn_resnet_config_from_checkpoint(mn_resnet_config *out, const mn_hf_checkpoint *c, char *err,
                                           size_t errcap);

typedef enum mn_resnet_kind {
    /* "pixels" f32 [B,C,H,W] and "labels" i32 [B] -> "logits" [B,classes]
     * and the mean cross-entropy; batch norms in training mode (batch
     * statistics; running statistics updated at each mn_session_step). */
    MN_RESNET_TRAIN = 0,
    /* "pixels" -> "logits"; batch norms use the running statistics
     * (torchvision's model.eval()). */
    MN_RESNET_EVAL = 1,
    /* as EVAL, each batch norm folded into the convolution before it: the
     * graph has convs with a bias ("<conv>.bias") and no batch norm;
     * mn_model_load folds the checkpoint's statistics into them. */
    MN_RESNET_FOLDED = 2
} mn_resnet_kind;

typedef struct mn_resnet_options {
    mn_resnet_kind kind;
    int64_t batch;          /* >= 1 */
    int64_t height, width;  /* input images (224 x 224) */
    bool (*freeze)(const char *name, void *user); /* as mn_llama_options */
    void *freeze_user;
} mn_resnet_options;
/* TRAIN, batch 1, 224 x 224. */
mn_resnet_options mn_resnet_default_options(void);

/* Records torchvision's ResNet into g: conv1 (7x7, stride 2, pad 3), bn1,
 * relu, maxpool (3x3, stride 2, pad 1), layer1..layer4 (the first block of
 * layers 2-4 strides by 2 in its 3x3 conv, v1.5, with a downsample branch
 * of a 1x1 conv and a batch norm, "layerN.0.downsample.0/1"), global average
 * pooling, fc. Parameter names and layouts are torchvision's (conv weights
 * [out,in,kh,kw], fc.weight [classes, features]); batch-norm running
 * statistics are frozen parameters "<bn>.running_mean"/".running_var",
 * saved in checkpoints under those names. Fresh values as torchvision's
 * (kaiming normal, fan_out, for convs; batch norm 1 and 0; fc U(+-1/sqrt(in))).
 * On failure *out is a dead handle whose mn_model_error says why. */
mn_status mn_resnet_create(mn_model **out, mn_graph *g, const mn_resnet_config *c, const mn_resnet_options *o);

/* ---- images (PNG, JPEG) and ImageNet preprocessing -------------------------- */

/* 8-bit RGB pixels, row-major, [height][width][3]. */
typedef struct mn_image {
    int64_t width, height;
    uint8_t *rgb; /* malloc'd; mn_image_free */
} mn_image;

/* Largest image decoded (width * height), and largest side. */
#define MN_IMAGE_MAX_PIXELS ((int64_t)1 << 28)
#define MN_IMAGE_MAX_SIDE 65500

/* Decodes a PNG (libpng: gray, palette, alpha, 16 bits, interlaced; alpha
 * dropped and 16-bit samples cut to their high byte, as PIL's convert("RGB")
 * does) or a baseline/progressive JPEG (libjpeg-turbo, gray or YCbCr; CMYK
 * refused) from memory, told apart by their signatures. Truncated or
 * corrupt data, sizes over the limits and anything else are refused with a
 * message in err naming what was wrong (warnings of the decoders count as
 * errors: a truncated JPEG is not filled with grey). */
mn_status mn_image_decode(mn_image *out, const void *data, size_t len, char *err, size_t errcap);
/* The same from a regular file (at most 256 MiB). */
mn_status mn_image_load(mn_image *out, const char *path, char *err, size_t errcap);
void mn_image_free(mn_image *im);
/* Bilinear resizing as PIL's Image.resize(BILINEAR) does it (a triangle
 * filter widened by the scale when shrinking, so it antialiases; fixed-point
 * coefficients; horizontal pass then vertical, each rounded to 8 bits). */
mn_status mn_image_resize(mn_image *out, const mn_image *in, int64_t width, int64_t height);
/* torchvision's ImageNet evaluation transform: Resize(resize) (the shorter
 * side to resize, the longer one int(resize * long / short)), CenterCrop(crop),
 * ToTensor, Normalize(mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225)).
 * out: f32 [3, crop, crop]. resize 256 and crop 224 are the usual values. */
mn_status mn_imagenet_preprocess(float *out, const mn_image *im, int64_t resize, int64_t crop);


/* ---- diffusion U-Net ----------------------------------------------------------- */

/* Two families from one builder (names as the PyTorch modules of
 * tests/fixtures/gen_workloads.py, the paper's simplified U-Net being
 * bench/torch_anchors.py's UNet):
 * - simplified (mn_unet_config_simple): conv "cin", per level l a ResBlock
 *   "enc.l" (GroupNorm, SiLU, 3x3 conv, GroupNorm, SiLU, 3x3 conv, a 1x1
 *   "r" conv on the skip when the channels change) and, but for the last
 *   level, a stride-2 3x3 conv "down.l"; a ResBlock "mid"; per level from
 *   the lowest, nearest 2x upsampling when the sizes differ, concatenation
 *   with the level's skip and a ResBlock "dec.i"; a 3x3 conv "out"; no conv
 *   biases, no timestep.
 * - conditioned (mn_unet_config_conditioned): the same with conv biases, a
 *   sinusoidal timestep embedding computed in the graph (cos | sin of
 *   t * 10000^(-i/half), half = base/2) through an MLP "time.0" (base ->
 *   4 base), SiLU, "time.2" (4 base -> 4 base), added in every ResBlock
 *   through "<block>.t" (SiLU then Linear to the block's channels) after its
 *   first conv; and at the levels of attention_levels (and "mid_attn" when
 *   the lowest level is one) a transformer block "enc_attn.l" / "dec_attn.i":
 *   GroupNorm "norm", then over the H*W positions: LayerNorm "ln1" +
 *   self-attention "attn1" (to_q/to_k/to_v without bias, to_out), LayerNorm
 *   "ln2" + cross-attention "attn2" to the context (keys and values from
 *   context_dim), LayerNorm "ln3" + feed-forward "ff.0" (4x, GELU) "ff.2",
 *   each residual; the block's output is added to its input. */
typedef struct mn_unet_config {
    int64_t in_channels;       /* latent channels (4) */
    int64_t base;              /* channels of level 0 (64); level l has base << l */
    int levels;                /* 3 (multipliers 1, 2, 4) */
    int groups;                /* GroupNorm groups (16) */
    bool conv_bias;
    bool time_embedding;
    unsigned attention_levels; /* bit l: a transformer block after level l's ResBlocks */
    int64_t context_dim;       /* cross-attention keys/values width (768); 0: self-attention only */
    int64_t context_len;       /* context tokens (77) */
    int64_t head_dim;          /* attention head width (32) */
    float eps;                 /* GroupNorm and LayerNorm eps (1e-5) */
} mn_unet_config;

/* The paper's U-Net at base (64: 5.3M parameters as bench/torch_anchors.py's
 * UNet(4, 64, 3, 16); GroupNorm groups 16, or
 * 8 when base < 64, as bench/torch_anchors.py's tiny one). */
mn_unet_config mn_unet_config_simple(int64_t base);
/* The conditioned one: time embedding, attention at levels 1 and 2 (and the
 * middle), context 77 x 768, head dim 32. */
mn_unet_config mn_unet_config_conditioned(int64_t base);

typedef enum mn_unet_kind {
    /* "noisy" [B,C,H,W], "noise" [B,C,H,W] (the target), "timesteps" f32 [B]
     * and "context" [B,L,Dc] when the config has them -> "pred" and the
     * loss mean((pred - noise)^2) (noise prediction). */
    MN_UNET_TRAIN = 0,
    /* the same without "noise" and the loss: "pred", the predicted noise */
    MN_UNET_INFER = 1
} mn_unet_kind;

typedef struct mn_unet_options {
    mn_unet_kind kind;
    int64_t batch;          /* 2 */
    int64_t height, width;  /* 32 x 32; divisible by 2^(levels-1) */
    bool (*freeze)(const char *name, void *user);
    void *freeze_user;
} mn_unet_options;
mn_unet_options mn_unet_default_options(void);

/* Records the U-Net into g; fresh parameters as PyTorch initialises them
 * (convs and linears U(+-1/sqrt(fan_in)), norms 1 and 0). On failure *out
 * is a dead handle whose mn_model_error says why. */
mn_status mn_unet_create(mn_model **out, mn_graph *g, const mn_unet_config *c, const mn_unet_options *o);

/* The noise schedule of Stable Diffusion ("scaled_linear": betas =
 * linspace(sqrt(beta_start), sqrt(beta_end), T)^2; scaled false: linear in
 * beta as DDPM) as the cumulative products of 1 - beta, in double. */
mn_status mn_diffusion_schedule(double *alphas_cumprod, int64_t T, double beta_start, double beta_end, bool scaled);
/* noisy = sqrt(ac[t_b]) x0 + sqrt(1 - ac[t_b]) noise, per sample b of
 * per_sample values (computed in double, rounded once). */
mn_status mn_diffusion_add_noise(float *noisy, const float *x0, const float *noise, const int32_t *t, int64_t batch,
                                 int64_t per_sample, const double *alphas_cumprod, int64_t T);
/* DDIM sampling (eta 0) with an MN_UNET_INFER model in s: timesteps
 * t_i = i * (T / steps) for i = steps-1 .. 0; at each,
 *   eps = unet(x, t_i), x0 = (x - sqrt(1 - a_t) eps) / sqrt(a_t),
 *   x = sqrt(a_prev) x0 + sqrt(1 - a_prev) eps,
 * a_prev = alphas_cumprod[t_i - T/steps], or 1 after the last step. x:
 * [B,C,H,W], the starting noise in, the sample out; context [B,L,Dc] or
 * NULL when the model has none. */
mn_status mn_unet_ddim(mn_model *m, mn_session *s, float *x, int64_t steps, const float *context,
                       const double *alphas_cumprod, int64_t T);


/* ---- SmolVLA action expert ------------------------------------------------------ */

/* The action expert of SmolVLA (a Llama-style transformer over the action
 * chunk; names as tests/fixtures/gen_workloads.py's module, after lerobot):
 *   h = action_in_proj(x_t)                                  // (B*T, hidden)
 *   e = [sin(tau w), cos(tau w)], w = 2 pi / period, period = min_period *
 *       (max_period / min_period)^(i / (half - 1))           // (B, hidden)
 *   h = action_time_mlp_out(silu(action_time_mlp_in([h, e])))
 *   layer l: a = rms_norm(h) * input_layernorm;
 *     even l: self-attention over the chunk (full mask, RoPE on q and k),
 *             k, v = k_proj(a), v_proj(a);
 *     odd l:  cross-attention to the VLM features [B, S, kv_dim], k, v =
 *             k_proj(vlm), v_proj(vlm) (no RoPE);
 *     q_proj to heads * head_dim, grouped-query attention, o_proj, residual;
 *     SwiGLU MLP (gate_proj, up_proj, down_proj) after
 *     post_attention_layernorm, residual
 *   v = action_out_proj(rms_norm(h) * norm)                 // (B, T, action_dim)
 * Flow matching: x_t = tau noise + (1 - tau) actions, target noise - actions. */
typedef struct mn_vla_config {
    int64_t hidden;          /* 720 */
    int layers;              /* 16 */
    int64_t heads, kv_heads; /* 15, 5 */
    int64_t head_dim;        /* 64 */
    int64_t ffn;             /* 2048 */
    int64_t action_dim;      /* 32 */
    int64_t chunk;           /* 50: actions per chunk */
    int64_t vlm_len;         /* 16: VLM tokens */
    int64_t kv_dim;          /* 320: width of the VLM features the cross layers read */
    float rms_eps;           /* 1e-5 */
    float rope_theta;        /* 10000 */
    float min_period, max_period; /* 4e-3, 4.0 */
} mn_vla_config;
mn_vla_config mn_vla_config_smolvla(void);

typedef enum mn_vla_kind {
    /* "actions" [B,T,A], "noise" [B,T,A], "timesteps" f32 [B] (tau in
     * [0,1]), "vlm" [B,S,kv_dim] -> "velocity" [B,T,A] and the flow-matching
     * loss mean((velocity - (noise - actions))^2). */
    MN_VLA_TRAIN = 0,
    /* "x" [B,T,A] (x_tau), "timesteps", "vlm" -> "velocity". */
    MN_VLA_INFER = 1
} mn_vla_kind;

typedef struct mn_vla_options {
    mn_vla_kind kind;
    int64_t batch; /* 1 */
    bool (*freeze)(const char *name, void *user);
    void *freeze_user;
} mn_vla_options;
mn_vla_options mn_vla_default_options(void);

mn_status mn_vla_create(mn_model **out, mn_graph *g, const mn_vla_config *c, const mn_vla_options *o);
/* Euler integration of the flow from tau = 1 (noise) to 0 with an
 * MN_VLA_INFER model: steps steps of dt = -1/steps, x += dt * velocity(x,
 * tau) (SmolVLA's sampler, 10 steps). x: [B,T,A], the noise in, the action
 * chunk out; vlm [B,S,kv_dim]. */
mn_status mn_vla_sample(mn_model *m, mn_session *s, float *x, int64_t steps, const float *vlm);


/* ---- audio (WAV) and Whisper's log-mel front end ------------------------------- */

/* Mono f32 samples, in [-1, 1) for integer formats (float files may exceed
 * it, up to +-1e6: larger samples are refused). */
typedef struct mn_audio {
    int64_t samples;
    int sample_rate;
    float *pcm; /* malloc'd; mn_audio_free */
} mn_audio;
/* A RIFF/WAVE file from memory: PCM 8/16/24/32-bit or IEEE float 32/64,
 * plain or extensible, any number of channels (averaged into one). Hostile
 * files (truncated chunks, inconsistent formats, non-finite samples or
 * float samples beyond +-1e6) are
 * refused with a message in err. */
mn_status mn_wav_decode(mn_audio *out, const void *data, size_t len, char *err, size_t errcap);
mn_status mn_wav_load(mn_audio *out, const char *path, char *err, size_t errcap);
void mn_audio_free(mn_audio *a);
/* Band-limited resampling to rate (a Hann-windowed sinc, 32 zero crossings;
 * not bit-equal to any other library's resampler). */
mn_status mn_audio_resample(mn_audio *out, const mn_audio *in, int rate);

#define MN_WHISPER_SAMPLE_RATE 16000
#define MN_WHISPER_SAMPLES 480000 /* 30 s */
#define MN_WHISPER_FRAMES 3000
/* WhisperFeatureExtractor's log-mel spectrogram of the first 30 s of 16 kHz
 * samples (zero-padded): out [n_mels, 3000] (n_mels 80 for Whisper-tiny),
 * in double with FFTW, rounded once. */
mn_status mn_whisper_log_mel(float *out, const float *pcm, int64_t n, int n_mels);
/* Its mel filter bank, [201 frequency bins][n_mels], Slaney scale and norm. */
mn_status mn_whisper_mel_filters(double *filters, int n_mels);


/* ---- Whisper (Hugging Face WhisperForConditionalGeneration) ----------------------- */

/* What the builder needs from config.json (transformers' WhisperConfig
 * keys). Refused naming the key: activation_function other than gelu,
 * model_type other than whisper, wrong types, duplicated keys, sizes out of
 * range, heads that do not divide d_model. */
typedef struct mn_whisper_config {
    int64_t d_model;                  /* 384 (tiny) */
    int64_t encoder_layers, decoder_layers;     /* 4, 4 */
    int64_t encoder_attention_heads, decoder_attention_heads; /* 6, 6 */
    int64_t encoder_ffn_dim, decoder_ffn_dim;   /* 1536, 1536 */
    int64_t num_mel_bins;             /* 80 */
    int64_t max_source_positions;     /* 1500 (3000 frames / 2) */
    int64_t max_target_positions;     /* 448 */
    int64_t vocab_size;               /* 51865 */
    bool scale_embedding;             /* false: token embeddings times sqrt(d_model) when true */
    int64_t decoder_start_token_id;   /* 50258 */
    int64_t eos_token_id;             /* 50257 */
} mn_whisper_config;

mn_status mn_whisper_config_parse(mn_whisper_config *out, const char *json, size_t len, char *err, size_t errcap);
/* path: a folder holding config.json, or the file. */
mn_status mn_whisper_config_load(mn_whisper_config *out, const char *path, char *err, size_t errcap);
/* Whisper-tiny's configuration. */
mn_whisper_config mn_whisper_config_tiny(void);

typedef enum mn_whisper_kind {
    /* "input_features" [B, mels, 2 S] -> "encoder_hidden" [B, S, d] and the
     * paper's loss, the mean square of it (the encoder benchmark). */
    MN_WHISPER_ENCODER = 0,
    /* "input_features", "decoder_input_ids" i32 [B,T], "labels" i32 [B*T]
     * (-100 ignored) -> "logits" [B*T, V] and the mean token cross-entropy
     * (WhisperForConditionalGeneration's loss; labels are not shifted). */
    MN_WHISPER_TRAIN = 1,
    /* Transcription, batch 1, two branches over one set of weights: the
     * encoder branch ("input_features", "cross_pos" i32 [1] = 0) writes each
     * decoder layer's cross-attention keys and values into state tensors
     * "cache.cross.L.k"/".v" (outputs "cross.L.k"/"cross.L.v"); the one-token
     * decoder branch
     * ("decoder_input_ids" [1,1], "pos" i32 [1]) appends to self-attention
     * caches "cache.self.L.k"/".v" of max_target_positions rows and gives
     * "logits" [1, V].
     * mn_whisper_greedy runs each branch with mn_session_run_outputs. */
    MN_WHISPER_DECODE = 2
} mn_whisper_kind;

typedef struct mn_whisper_options {
    mn_whisper_kind kind;
    int64_t batch;    /* ENCODER, TRAIN: >= 1; DECODE: 1 */
    int64_t seq_len;  /* TRAIN: decoder tokens T <= max_target_positions */
    bool (*freeze)(const char *name, void *user);
    void *freeze_user;
} mn_whisper_options;
mn_whisper_options mn_whisper_default_options(void);

/* Records Whisper into g under Hugging Face's names (model.encoder.conv1,
 * ...layers.N.self_attn.q_proj (k_proj without bias), fc1, fc2, the layer
 * norms, model.decoder.embed_tokens (also the output projection: proj_out
 * is tied and skipped when loading), embed_positions; the encoder's
 * sinusoidal embed_positions is a frozen parameter, as in transformers).
 * Pre-norm layers, GELU (erf), attention scaled by head_dim^-0.5. */
mn_status mn_whisper_create(mn_model **out, mn_graph *g, const mn_whisper_config *c, const mn_whisper_options *o);

typedef struct mn_whisper_decode_options {
    const int32_t *prompt; /* the first tokens: <|startoftranscript|> [<|en|> <|transcribe|>] <|notimestamps|> */
    int n_prompt;
    int64_t max_new;       /* new tokens at most (prompt + new <= max_target_positions) */
    const int32_t *suppress;       /* ids never produced (generation_config's suppress_tokens); may be NULL */
    int n_suppress;
    const int32_t *begin_suppress; /* ids not produced first (begin_suppress_tokens) */
    int n_begin_suppress;
} mn_whisper_decode_options;

/* Greedy decoding with an MN_WHISPER_DECODE model: runs the encoder branch
 * on features [mels, 3000], feeds the prompt one token per run, then takes
 * the highest logit (the lowest id on ties; suppressed ids excluded) until
 * eos_token_id (not emitted) or max_new tokens. out: max_new ids, *n_out
 * the count. */
mn_status mn_whisper_greedy(mn_model *m, mn_session *s, const float *features, const mn_whisper_decode_options *o,
                            int32_t *out, int64_t *n_out);


#if defined(__GNUC__)
#pragma GCC visibility pop
#endif
#ifdef __cplusplus
}
#endif
#endif /* MEGANEURA_MODELS_H */
