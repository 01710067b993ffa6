/* test_llama_load.c - Hugging Face folders made here from C, loaded into the
 * Llama builder's sessions; the builder against an independent reference.
 *
 * Checks:
 * 1. the public safetensors reader: F32/BF16/F16 (subnormals, -0)/F64 to f32
 *    and I32/I64 to i32 exactly; NaN, infinity, i32 overflow, wrong dtype,
 *    wrong count refused with the tensor named; mn_read_file limits;
 * 2. loading folders written in f32, bf16 and f16, single-file and sharded
 *    (index.json), by folder, file and index path: every parameter equals
 *    what was written, bit for bit;
 * 3. one error listing every missing, unexpected (escaped) and mis-shaped
 *    tensor, with nothing loaded; dtypes that do not convert; NaN values;
 *    tied models with and without lm_head.weight; old rotary_emb.inv_freq
 *    buffers; partial loads on purpose (allow_missing, allow_unexpected);
 *    shards that disagree with their index (every disagreement listed),
 *    hostile shard names, duplicated index keys, folders without weights;
 * 4. the forward pass (logits and loss) against a straightforward double
 *    precision Llama written here from the Hugging Face definition (names,
 *    [out,in] layouts, rotate-half RoPE with and without llama3 scaling,
 *    grouped-query causal attention, RMSNorm, SwiGLU, shifted labels with
 *    -100 ignored), rel L2 <= 1e-5, tied and untied;
 * 5. KV-cache decoding (one token per run, and chunks of 4) gives the
 *    full-sequence logits at every position, greedy decoding equals
 *    recomputation, on the CPU and on Vulkan;
 * 6. training a few steps from the loaded weights lowers the loss, CPU and
 *    Vulkan curves agree, and frozen parameters (the freeze option) stay
 *    as loaded.
 *
 * Does not: compare with PyTorch (test_llama_hf.c does, on its fixtures).
 */
#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h" /* writing the folders; the library only reads them */
#include "llama_util.h"

#define S(...) (const int64_t[]){__VA_ARGS__}

static char g_tmp[] = "/tmp/mn-llama-load-XXXXXX";

/* ---- encoding ------------------------------------------------------------------ */

static uint32_t f32_bits(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

static uint16_t to_bf16(float v) {
    uint32_t u = f32_bits(v);
    if (isnan(v)) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* f32 -> f16, round to nearest even, with subnormals, inf and NaN. */
static uint16_t to_f16(float v) {
    uint32_t u = f32_bits(v), sign = (u >> 16) & 0x8000;
    if (isnan(v)) return (uint16_t)(sign | 0x7e00);
    float a = fabsf(v);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    if (a < 0x1p-14f) { /* subnormal: a multiple of 2^-24 */
        float q = a * 0x1p24f, r = nearbyintf(q);
        return (uint16_t)(sign | (uint16_t)r);
    }
    int e;
    float m = frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
    float q = nearbyintf(m * 2048.0f);  /* 11 bits */
    if (q == 2048.0f) q = 1024.0f, e++;
    return (uint16_t)(sign | (uint16_t)((e + 14) << 10) | ((uint16_t)q & 0x3ff));
}

/* ---- folders ---------------------------------------------------------------------- */

typedef struct tspec {
    char name[160];
    const char *dtype; /* "F32", "BF16", "F16", "F64", "I32" */
    int rank;
    int64_t shape[4];
    const float *v;
} tspec;

static size_t numel_of(const tspec *t) {
    size_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= (size_t)t->shape[d];
    return n;
}

static void *encode(const tspec *t, uint64_t *bytes) {
    const size_t n = numel_of(t), es = st_dtype_size(t->dtype);
    uint8_t *b = malloc(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        const float v = t->v[i];
        if (!strcmp(t->dtype, "F32")) memcpy(b + 4 * i, &v, 4);
        else if (!strcmp(t->dtype, "F64")) {
            double d = v;
            memcpy(b + 8 * i, &d, 8);
        } else if (!strcmp(t->dtype, "I32")) {
            int32_t k = (int32_t)v;
            memcpy(b + 4 * i, &k, 4);
        } else {
            uint16_t h = !strcmp(t->dtype, "BF16") ? to_bf16(v) : to_f16(v);
            memcpy(b + 2 * i, &h, 2);
        }
    }
    *bytes = n * es;
    return b;
}

static void write_st(const char *path, const tspec *t, int n) {
    st_entry *e = calloc((size_t)n + 1, sizeof *e);
    void **bufs = calloc((size_t)n + 1, sizeof *bufs);
    for (int i = 0; i < n; i++) {
        bufs[i] = encode(&t[i], &e[i].bytes);
        e[i] = (st_entry){t[i].name, t[i].dtype, t[i].rank, t[i].shape, bufs[i], e[i].bytes};
    }
    char err[512];
    const char *meta[] = {"format", "pt"};
    CHECK_OK(st_save_atomic(path, e, n, meta, 1, err, sizeof err), err);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(e);
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

static void rm_folder(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* dir/config.json (if config) and the tensors: model.safetensors, or
 * `shards` files plus model.safetensors.index.json (tensor i in shard
 * i % shards). */
static void write_folder(const char *dir, const char *config, const tspec *t, int n, int shards) {
    rm_folder(dir);
    mkdir(dir, 0755);
    char path[600];
    if (config) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        fputs(config, f);
        fclose(f);
    }
    if (shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        write_st(path, t, n);
        return;
    }
    tspec *part = calloc((size_t)n + 1, sizeof *part);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *idx = fopen(path, "w");
    fprintf(idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int s = 0; s < shards; s++) {
        int k = 0;
        for (int i = s; i < n; i += shards) part[k++] = t[i];
        snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
        write_st(path, part, k);
    }
    for (int i = 0; i < n; i++) {
        fprintf(idx, "%s", i ? ", " : "");
        json_str(idx, t[i].name);
        fprintf(idx, ": \"model-%05d-of-%05d.safetensors\"", i % shards + 1, shards);
    }
    fprintf(idx, "}}");
    fclose(idx);
    free(part);
}

/* ---- the tiny models ------------------------------------------------------------- */

#define TINY                                                                                                           \
    "\"vocab_size\":48,\"hidden_size\":32,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":" \
    "2,\"intermediate_size\":40,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,\"hidden_act\":\"silu\","       \
    "\"torch_dtype\":\"bfloat16\",\"model_type\":\"llama\""
static const char *cfg_tied = "{" TINY ",\"tie_word_embeddings\":true,\"rope_theta\":10000.0,\"rope_scaling\":null}";
static const char *cfg_untied_llama3 =
    "{" TINY ",\"tie_word_embeddings\":false,\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":\"llama3\","
    "\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":16}}";

static const char *cfg_linear =
    "{" TINY ",\"tie_word_embeddings\":true,\"rope_theta\":500.0,\"rope_scaling\":{\"type\":\"linear\",\"factor\":4.0}}";

static mn_llama_config parse(const char *json) {
    mn_llama_config c;
    char err[512];
    memset(&c, 0, sizeof c);
    CHECK_OK(mn_llama_config_parse(&c, json, strlen(json), err, sizeof err), err);
    return c;
}

/* Weights for every parameter of a model of config c: k/1024 with k in
 * [-40, 40] (exact in bf16 and f16), norms 1 + k/64. */
typedef struct weights {
    int n;
    tspec t[64];
    float *data[64];
} weights;

static uint64_t g_rng;
static int rnd_int(int lo, int hi) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (int)((g_rng >> 33) % (uint64_t)(hi - lo + 1));
}

static void make_weights(weights *w, const mn_llama_config *c, const char *dtype, uint64_t seed) {
    mn_graph *g;
    mn_llama *m = NULL;
    mn_llama_options o = mn_llama_default_options();
    o.seq_len = 4;
    mn_graph_create(&g);
    CHECK_OK(mn_llama_create(&m, g, c, &o), mn_llama_error(m));
    memset(w, 0, sizeof *w);
    g_rng = seed;
    const mn_hf_param *p = mn_llama_params(m);
    for (int i = 0; i < mn_llama_param_count(m) && i < 64; i++) {
        tspec *t = &w->t[w->n];
        snprintf(t->name, sizeof t->name, "%s", p[i].name);
        t->dtype = dtype;
        t->rank = p[i].rank;
        memcpy(t->shape, p[i].shape, sizeof t->shape);
        const size_t n = numel_of(t);
        float *v = malloc(n * sizeof *v);
        const bool is_norm = strstr(t->name, "norm") != NULL;
        for (size_t k = 0; k < n; k++) v[k] = is_norm ? 1.0f + (float)rnd_int(-8, 8) / 64.0f : (float)rnd_int(-40, 40) / 1024.0f;
        w->data[w->n] = v;
        t->v = v;
        w->n++;
    }
    mn_llama_destroy(m);
    mn_graph_destroy(g);
}

static void free_weights(weights *w) {
    for (int i = 0; i < w->n; i++) free(w->data[i]);
    memset(w, 0, sizeof *w);
}

static const float *weight(const weights *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name)) return w->t[i].v;
    CHECK_MSG(0, "reference: no weight named %s", name);
    return NULL;
}

typedef struct built {
    mn_graph *g;
    mn_llama *m;
} built;

static built build(const mn_llama_config *c, mn_llama_kind kind, int64_t B, int64_t T, int64_t max_seq, bool tables,
                   bool (*freeze)(const char *, void *)) {
    built b = {NULL, NULL};
    mn_graph_create(&b.g);
    mn_llama_options o = mn_llama_default_options();
    o.kind = kind;
    o.batch = B;
    o.seq_len = T;
    o.max_seq = max_seq;
    o.rope_tables = tables;
    o.freeze = freeze;
    CHECK_OK(mn_llama_create(&b.m, b.g, c, &o), mn_llama_error(b.m));
    return b;
}

static void unbuild(built *b) {
    mn_llama_destroy(b->m);
    mn_graph_destroy(b->g);
}

static mn_status load_dir(built *b, mn_session *s, const char *dir, const mn_hf_load_options *o, char *msg,
                          size_t cap) {
    mn_hf_checkpoint *ck = NULL;
    mn_status st = mn_hf_checkpoint_open(&ck, dir, msg, cap);
    if (st) return st;
    st = mn_llama_load(b->m, s, ck, o);
    if (st) snprintf(msg, cap, "%s", mn_llama_error(b->m));
    mn_hf_checkpoint_close(ck);
    return st;
}

/* Every parameter of s equals w (bit for bit). */
static bool params_equal(mn_session *s, const weights *w, const char *skip) {
    bool same = true;
    for (int i = 0; i < w->n; i++) {
        if (skip && strstr(w->t[i].name, skip)) continue;
        size_t n = numel_of(&w->t[i]);
        float *v = malloc(n * sizeof *v);
        if (mn_session_get_param(s, w->t[i].name, v, n) != MN_OK || memcmp(v, w->t[i].v, n * sizeof *v) != 0)
            same = false;
        free(v);
    }
    return same;
}

/* ---- 1. the public reader ---------------------------------------------------------- */

static void check_reader(void) {
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/conv.safetensors", g_tmp);
    const float vals[] = {1.5f, -0.0f, 0x1p-24f, 0x1p-14f, 65504.0f, -3.25f, 0x1p-20f, 1e-3f};
    const float nan_vals[] = {1, NAN, INFINITY, 2};
    const float big[] = {1, 3e9f};
    tspec t[] = {
        {"f32", "F32", 2, {2, 4}, vals},   {"bf16", "BF16", 1, {8}, vals}, {"f16", "F16", 1, {8}, vals},
        {"f64", "F64", 1, {8}, vals},      {"i32", "I32", 1, {2}, big},    {"nan", "BF16", 1, {4}, nan_vals},
        {"i64big", "F32", 1, {2}, big},
    };
    write_st(path, t, 7);
    mn_safetensors *f = NULL;
    CHECK_OK(mn_safetensors_open(&f, path, err, sizeof err), err);
    if (!f) return;
    CHECK(mn_safetensors_count(f) == 7);
    CHECK(mn_safetensors_meta(f, "format") && !strcmp(mn_safetensors_meta(f, "format"), "pt"));
    mn_safetensors_tensor info;
    CHECK(mn_safetensors_find(f, "f32", &info) == MN_OK && info.rank == 2 && info.shape[1] == 4 &&
          !strcmp(info.dtype, "F32"));
    CHECK(mn_safetensors_find(f, "absent", &info) == MN_E_NOT_FOUND);
    float out[8];
    CHECK_OK(mn_safetensors_read_f32(f, "f32", out, 8), mn_safetensors_error(f));
    CHECK(memcmp(out, vals, sizeof out) == 0);
    CHECK_OK(mn_safetensors_read_f32(f, "f16", out, 8), mn_safetensors_error(f));
    bool f16_ok = true;
    for (int i = 0; i < 8; i++) f16_ok = f16_ok && (i == 7 ? fabsf(out[i] - vals[i]) < 1e-6f : out[i] == vals[i]);
    CHECK_MSG(f16_ok && signbit(out[1]), "f16 conversion");
    CHECK_OK(mn_safetensors_read_f32(f, "bf16", out, 8), mn_safetensors_error(f));
    bool bf16_ok = true;
    for (int i = 0; i < 8; i++) {
        uint32_t u = (uint32_t)to_bf16(vals[i]) << 16;
        float want;
        memcpy(&want, &u, 4);
        bf16_ok = bf16_ok && out[i] == want && (i != 4 || out[i] == 65536.0f); /* 65504 rounds up in bf16 */
    }
    CHECK_MSG(bf16_ok && signbit(out[1]), "bf16 conversion");
    CHECK_OK(mn_safetensors_read_f32(f, "f64", out, 8), mn_safetensors_error(f));
    CHECK(memcmp(out, vals, sizeof out) == 0);
    int32_t iv[2];
    CHECK_OK(mn_safetensors_read_i32(f, "i32", iv, 2), mn_safetensors_error(f));
    CHECK(iv[0] == 1);
    CHECK(mn_safetensors_read_f32(f, "nan", out, 4) == MN_E_FORMAT && strstr(mn_safetensors_error(f), "'nan'") &&
          strstr(mn_safetensors_error(f), "1 NaN and 1 infinite"));
    CHECK(mn_safetensors_read_f32(f, "f32", out, 7) == MN_E_SHAPE && strstr(mn_safetensors_error(f), "8 elements"));
    CHECK(mn_safetensors_read_f32(f, "i32", out, 2) == MN_E_DTYPE && strstr(mn_safetensors_error(f), "I32"));
    CHECK(mn_safetensors_read_i32(f, "f32", iv, 8) == MN_E_DTYPE);
    CHECK(mn_safetensors_read_i32(f, "f16", iv, 2) != MN_OK);
    CHECK(mn_safetensors_read_f32(f, "nope\x1b[2J", out, 1) == MN_E_NOT_FOUND &&
          strstr(mn_safetensors_error(f), "nope\\x1B[2J"));
    mn_safetensors_close(f);
    mn_safetensors_close(NULL);
    /* I64 values beyond i32 are refused */
    int64_t wide[2] = {7, (int64_t)1 << 40};
    st_entry e = {"ids", "I64", 1, S(2), wide, sizeof wide};
    CHECK_OK(st_save_atomic(path, &e, 1, NULL, 0, err, sizeof err), err);
    CHECK_OK(mn_safetensors_open(&f, path, err, sizeof err), err);
    CHECK(mn_safetensors_read_i32(f, "ids", iv, 2) == MN_E_FORMAT && strstr(mn_safetensors_error(f), "i32 range"));
    mn_safetensors_close(f);
    /* opening: missing file, FIFO */
    snprintf(path, sizeof path, "%s/absent.safetensors", g_tmp);
    f = (mn_safetensors *)1;
    CHECK(mn_safetensors_open(&f, path, err, sizeof err) == MN_E_IO && !f && strstr(err, "absent.safetensors"));
    snprintf(path, sizeof path, "%s/fifo", g_tmp);
    if (mkfifo(path, 0600) == 0) {
        CHECK(mn_safetensors_open(&f, path, err, sizeof err) == MN_E_IO && strstr(err, "FIFO"));
        char *text = NULL;
        CHECK(mn_read_file(&text, NULL, path, 100, err, sizeof err) == MN_E_IO && !text);
        unlink(path);
    }
    /* mn_read_file: the size limit */
    snprintf(path, sizeof path, "%s/text", g_tmp);
    FILE *tf = fopen(path, "w");
    fputs("0123456789", tf);
    fclose(tf);
    char *text = NULL;
    size_t len = 0;
    CHECK(mn_read_file(&text, &len, path, 9, err, sizeof err) == MN_E_FORMAT && strstr(err, "10 bytes"));
    CHECK_OK(mn_read_file(&text, &len, path, 10, err, sizeof err), err);
    CHECK(text && len == 10 && text[10] == 0 && !strcmp(text, "0123456789"));
    free(text);
    char esc[32];
    CHECK(!strcmp(mn_escape(esc, sizeof esc, "a\x1b"), "a\\x1B"));
}

/* ---- 2. and 3. loading ------------------------------------------------------------ */

static void check_loading(void) {
    const mn_llama_config tied = parse(cfg_tied), untied = parse(cfg_untied_llama3);
    char dir[600], msg[8192];
    snprintf(dir, sizeof dir, "%s/tied", g_tmp);
    const char *dtypes[] = {"F32", "BF16", "F16"};
    built b = build(&tied, MN_LLAMA_TRAIN, 2, 8, 0, false, NULL);
    mn_optimizer adam = mn_optimizer_default(MN_OPTIM_ADAMW);
    mn_session *s = lu_session(b.g, MN_BACKEND_CPU, NULL, MN_MODE_TRAINING, &adam);
    if (!s) return;
    for (int d = 0; d < 3; d++)
        for (int shards = 1; shards <= 3; shards += 2) {
            weights w;
            make_weights(&w, &tied, dtypes[d], 100 + (uint64_t)d * 7 + (uint64_t)shards);
            write_folder(dir, cfg_tied, w.t, w.n, shards);
            mn_status st = load_dir(&b, s, dir, NULL, msg, sizeof msg);
            CHECK_MSG(st == MN_OK, "%s, %d shard(s): %s", dtypes[d], shards, msg);
            CHECK_MSG(params_equal(s, &w, NULL), "%s, %d shard(s): parameters differ from the file", dtypes[d], shards);
            /* the file itself, and the index itself */
            char file[700];
            snprintf(file, sizeof file, shards == 1 ? "%s/model.safetensors" : "%s/model.safetensors.index.json", dir);
            CHECK_MSG(load_dir(&b, s, file, NULL, msg, sizeof msg) == MN_OK, "by file: %s", msg);
            free_weights(&w);
        }

    /* one message for every kind of mismatch; nothing loaded */
    weights w, before;
    make_weights(&before, &tied, "F32", 1);
    write_folder(dir, NULL, before.t, before.n, 1);
    CHECK_OK(load_dir(&b, s, dir, NULL, msg, sizeof msg), msg);
    make_weights(&w, &tied, "BF16", 2);
    tspec t[70];
    int n = 0;
    for (int i = 0; i < w.n; i++) {
        if (strstr(w.t[i].name, "layers.1.mlp.up_proj") || strstr(w.t[i].name, "model.norm.weight")) continue;
        t[n] = w.t[i];
        if (strstr(t[n].name, "layers.0.self_attn.k_proj")) t[n].shape[0] = 32, t[n].shape[1] = 16; /* [16,32] */
        n++;
    }
    t[n] = w.t[3];
    snprintf(t[n++].name, sizeof t[0].name, "model.layers.7.mlp.up_proj.weight");
    t[n] = w.t[3];
    snprintf(t[n++].name, sizeof t[0].name, "evil\x1b[2J\xe2\x80\xae.weight");
    write_folder(dir, NULL, t, n, 2);
    mn_status st = load_dir(&b, s, dir, NULL, msg, sizeof msg);
    printf("  mismatch message: %s\n", msg);
    CHECK(st == MN_E_SHAPE);
    CHECK(strstr(msg, "Missing (2): ") && strstr(msg, "'model.layers.1.mlp.up_proj.weight'") &&
          strstr(msg, "'model.norm.weight'"));
    CHECK(strstr(msg, "Unexpected (2): ") && strstr(msg, "'model.layers.7.mlp.up_proj.weight'") &&
          strstr(msg, "evil\\x1B[2J"));
    CHECK(!strchr(msg, 0x1b) && !strstr(msg, "\xe2\x80\xae"));
    CHECK(strstr(msg, "Another shape (1): ") &&
          strstr(msg, "'model.layers.0.self_attn.k_proj.weight' is [32,16] in the checkpoint, [16,32] in the model"));
    CHECK_MSG(params_equal(s, &before, NULL), "a refused load changed parameters");

    /* dtypes that do not convert; non-finite values */
    n = 0;
    for (int i = 0; i < w.n; i++) t[n++] = w.t[i];
    t[4].dtype = "I32";
    write_folder(dir, NULL, t, n, 1);
    CHECK(load_dir(&b, s, dir, NULL, msg, sizeof msg) == MN_E_DTYPE && strstr(msg, "is I32") &&
          strstr(msg, t[4].name));
    CHECK(params_equal(s, &before, NULL));
    t[4].dtype = "BF16";
    float *poisoned = malloc(numel_of(&t[4]) * sizeof *poisoned);
    memcpy(poisoned, t[4].v, numel_of(&t[4]) * sizeof *poisoned);
    poisoned[3] = NAN;
    t[4].v = poisoned;
    write_folder(dir, NULL, t, n, 1);
    CHECK(load_dir(&b, s, dir, NULL, msg, sizeof msg) == MN_E_FORMAT && strstr(msg, "NaN") && strstr(msg, t[4].name));
    free(poisoned);

    /* tied: an lm_head.weight tensor and old rotary buffers are skipped */
    n = 0;
    for (int i = 0; i < w.n; i++) t[n++] = w.t[i];
    t[n] = w.t[0];
    snprintf(t[n++].name, sizeof t[0].name, "lm_head.weight");
    t[n] = w.t[1];
    snprintf(t[n++].name, sizeof t[0].name, "model.layers.0.self_attn.rotary_emb.inv_freq");
    write_folder(dir, NULL, t, n, 1);
    CHECK_MSG(load_dir(&b, s, dir, NULL, msg, sizeof msg) == MN_OK, "%s", msg);
    CHECK(params_equal(s, &w, NULL));
    /* a user's ignore list */
    t[n] = w.t[1];
    snprintf(t[n++].name, sizeof t[0].name, "extra.scale");
    write_folder(dir, NULL, t, n, 1);
    CHECK(load_dir(&b, s, dir, NULL, msg, sizeof msg) == MN_E_NOT_FOUND && strstr(msg, "'extra.scale'"));
    const char *ign[] = {"*.scale", NULL};
    mn_hf_load_options lo = {false, false, ign, false};
    CHECK_MSG(load_dir(&b, s, dir, &lo, msg, sizeof msg) == MN_OK, "%s", msg);
    free_weights(&w);
    mn_session_destroy(s);
    unbuild(&b);

    /* untied: lm_head.weight is required, unless missing is allowed */
    built u = build(&untied, MN_LLAMA_FORWARD, 1, 8, 0, false, NULL);
    s = lu_session(u.g, MN_BACKEND_CPU, NULL, MN_MODE_INFERENCE, NULL);
    make_weights(&w, &untied, "BF16", 3);
    write_folder(dir, NULL, w.t, w.n - 1, 1); /* lm_head is the last parameter */
    CHECK(!strcmp(w.t[w.n - 1].name, "lm_head.weight"));
    CHECK(load_dir(&u, s, dir, NULL, msg, sizeof msg) == MN_E_NOT_FOUND && strstr(msg, "Missing (1): 'lm_head.weight'."));
    size_t hn = numel_of(&w.t[w.n - 1]);
    float *head0 = malloc(hn * sizeof *head0), *head1 = malloc(hn * sizeof *head1);
    mn_session_get_param(s, "lm_head.weight", head0, hn);
    lo = (mn_hf_load_options){true, false, NULL, false};
    CHECK_MSG(load_dir(&u, s, dir, &lo, msg, sizeof msg) == MN_OK, "%s", msg);
    mn_session_get_param(s, "lm_head.weight", head1, hn);
    CHECK_MSG(memcmp(head0, head1, hn * sizeof *head0) == 0 && params_equal(s, &w, "lm_head"),
              "allow_missing: the loaded parameters, and the missing one as it was");
    free(head0);
    free(head1);
    /* a checkpoint of more layers: unexpected, unless allowed */
    mn_llama_config three = untied;
    three.num_hidden_layers = 3;
    weights w3;
    make_weights(&w3, &three, "F16", 4);
    write_folder(dir, NULL, w3.t, w3.n, 2);
    CHECK(load_dir(&u, s, dir, NULL, msg, sizeof msg) == MN_E_NOT_FOUND && strstr(msg, "Unexpected (9): ") &&
          strstr(msg, "model.layers.2."));
    lo = (mn_hf_load_options){false, true, NULL, false};
    CHECK_MSG(load_dir(&u, s, dir, &lo, msg, sizeof msg) == MN_OK, "%s", msg);
    CHECK(params_equal(s, &w3, "layers.2."));
    free_weights(&w3);
    free_weights(&w);
    free_weights(&before);
    mn_session_destroy(s);
    unbuild(&u);
}

/* Writes an index by hand over the shards of a 3-shard folder. */
static void write_index(const char *dir, const char *body) {
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    fputs(body, f);
    fclose(f);
}

static void check_shards(void) {
    char dir[600], err[4096];
    snprintf(dir, sizeof dir, "%s/shards", g_tmp);
    const float v[4] = {1, 2, 3, 4};
    tspec t[] = {{"a", "F32", 1, {4}, v}, {"b", "F32", 1, {4}, v}, {"c", "F32", 1, {4}, v}, {"d", "F32", 1, {4}, v}};
    write_folder(dir, NULL, t, 4, 2); /* a, c in shard 1; b, d in shard 2 */
    mn_hf_checkpoint *ck = NULL;
    CHECK_OK(mn_hf_checkpoint_open(&ck, dir, err, sizeof err), err);
    CHECK(mn_hf_checkpoint_count(ck) == 4);
    mn_safetensors_tensor info;
    CHECK(mn_hf_checkpoint_tensor_at(ck, 2, &info) == MN_OK && !strcmp(info.name, "c"));
    float out[4];
    CHECK_OK(mn_hf_checkpoint_read_f32(ck, "d", out, 4), mn_hf_checkpoint_error(ck));
    CHECK(out[3] == 4);
    CHECK(mn_hf_checkpoint_read_f32(ck, "e", out, 4) == MN_E_NOT_FOUND && strstr(mn_hf_checkpoint_error(ck), "'e'"));
    mn_hf_checkpoint_close(ck);
    const char *S1 = "model-00001-of-00002.safetensors", *S2 = "model-00002-of-00002.safetensors";
    struct {
        const char *fmt;
        mn_status st;
        const char *needles[3];
    } cases[] = {
        /* b put in the wrong shard, c not listed: every disagreement listed */
        {"{\"weight_map\": {\"a\": \"%1$s\", \"b\": \"%1$s\", \"d\": \"%2$s\"}}", MN_E_FORMAT,
         {"disagree (3)", "the index puts 'b' in 'model-00001-of-00002.safetensors', which does not hold it; "
          "'model-00001-of-00002.safetensors' holds 'c', which the index does not list",
          "'model-00002-of-00002.safetensors' holds 'b', which the index puts in 'model-00001-of-00002.safetensors'"}},
        {"{\"weight_map\": {\"a\": \"%1$s\", \"b\": \"%2$s\", \"c\": \"%1$s\", \"d\": \"../x.safetensors\"}}",
         MN_E_FORMAT, {"weight_map['d'] = '../x.safetensors'", "plain file name", NULL}},
        {"{\"weight_map\": {\"a\": \"%1$s\", \"b\": \"%2$s\", \"c\": \"%1$s\", \"d\": \"model.bin\"}}", MN_E_FORMAT,
         {"ending in .safetensors", NULL, NULL}},
        {"{\"weight_map\": {\"a\": \"%1$s\", \"b\": \"%2$s\", \"a\": \"%2$s\", \"d\": \"%2$s\"}}", MN_E_FORMAT,
         {"key 'a' occurs twice", NULL, NULL}},
        {"{\"weight_map\": {\"a\": \"%1$s\", \"b\": \"%2$s\", \"c\": 3, \"d\": \"%2$s\"}}", MN_E_FORMAT,
         {"weight_map['c'] must be a file name, got a number", NULL, NULL}},
        {"{\"weight_map\": [\"%1$s\", \"%2$s\"]}", MN_E_FORMAT, {"weight_map must be an object", NULL, NULL}},
        {"{\"weight_map\": {\"a\": \"model-00003-of-00002.safetensors\"}}", MN_E_IO,
         {"model-00003-of-00002.safetensors", NULL, NULL}},
        {"{\"weight_map\": {\"a\": \"%1$s\",", MN_E_FORMAT, {"not valid JSON", NULL, NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char body[1024];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(body, sizeof body, cases[i].fmt, S1, S2);
#pragma GCC diagnostic pop
        write_index(dir, body);
        ck = (mn_hf_checkpoint *)1;
        mn_status st = mn_hf_checkpoint_open(&ck, dir, err, sizeof err);
        bool found = st == cases[i].st && !ck;
        for (int k = 0; k < 3 && cases[i].needles[k]; k++) found = found && strstr(err, cases[i].needles[k]);
        CHECK_MSG(found, "index case %zu: %s %s", i, mn_status_str(st), err);
    }
    /* no weights at all; a path that does not exist */
    snprintf(dir, sizeof dir, "%s/empty", g_tmp);
    mkdir(dir, 0755);
    CHECK(mn_hf_checkpoint_open(&ck, dir, err, sizeof err) == MN_E_NOT_FOUND && strstr(err, "holds neither"));
    snprintf(dir, sizeof dir, "%s/nowhere", g_tmp);
    CHECK(mn_hf_checkpoint_open(&ck, dir, err, sizeof err) == MN_E_IO && strstr(err, "nowhere"));
}

/* ---- 4. the reference forward ------------------------------------------------------ */

/* HF's LlamaForCausalLM in double: logits [B*T*V], mean CE over targets != -100. */
static void ref_forward(const mn_llama_config *c, const weights *w, const int32_t *ids, const int32_t *targets, int B,
                        int T, double *logits, double *loss) {
    const int H = (int)c->hidden_size, Hq = (int)c->num_attention_heads, Hkv = (int)c->num_key_value_heads,
              Dh = (int)c->head_dim, I = (int)c->intermediate_size, V = (int)c->vocab_size, N = B * T, half = Dh / 2;
    double *h = calloc((size_t)N * H, 8), *a = calloc((size_t)N * H, 8), *q = calloc((size_t)N * Hq * Dh, 8),
           *k = calloc((size_t)N * Hkv * Dh, 8), *v = calloc((size_t)N * Hkv * Dh, 8),
           *o = calloc((size_t)N * Hq * Dh, 8), *g = calloc((size_t)N * I, 8), *u = calloc((size_t)N * I, 8),
           *inv = calloc((size_t)half, 8), *sc = calloc((size_t)T, 8);
    for (int i = 0; i < half; i++) { /* HF's formulas, in double */
        double f = pow(c->rope_theta, -2.0 * i / Dh);
        if (c->rope_scaling == MN_ROPE_SCALING_LINEAR) f /= c->rope_factor;
        if (c->rope_scaling == MN_ROPE_SCALING_LLAMA3) {
            const double orig = (double)c->rope_original_max_position_embeddings, wl = 6.283185307179586 / f;
            const double lo = orig / c->rope_low_freq_factor, hi = orig / c->rope_high_freq_factor;
            if (wl > lo) f /= c->rope_factor;
            else if (wl >= hi) {
                const double s = (orig / wl - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1 - s) * f / c->rope_factor + s * f;
            }
        }
        inv[i] = f;
    }
    const float *E = weight(w, "model.embed_tokens.weight");
    for (int r = 0; r < N; r++)
        for (int j = 0; j < H; j++) h[r * H + j] = E[ids[r] * H + j];
    char nm[128];
#define W(fmt, l) (snprintf(nm, sizeof nm, fmt, l), weight(w, nm))
    /* y[r, o] = sum_i x[r, i] W[o, i] */
#define LINEAR(y, x, Wt, OUT, IN)                                                                                      \
    for (int r = 0; r < N; r++)                                                                                        \
        for (int oo = 0; oo < (OUT); oo++) {                                                                           \
            double s_ = 0;                                                                                             \
            for (int ii = 0; ii < (IN); ii++) s_ += (x)[r * (IN) + ii] * (double)(Wt)[oo * (IN) + ii];                 \
            (y)[r * (OUT) + oo] = s_;                                                                                  \
        }
#define RMS(y, x, gw)                                                                                                  \
    for (int r = 0; r < N; r++) {                                                                                      \
        double ms = 0;                                                                                                 \
        for (int j = 0; j < H; j++) ms += (x)[r * H + j] * (x)[r * H + j];                                             \
        const double rs = 1 / sqrt(ms / H + c->rms_norm_eps);                                                          \
        for (int j = 0; j < H; j++) (y)[r * H + j] = (x)[r * H + j] * rs * (gw)[j];                                    \
    }
    for (int l = 0; l < c->num_hidden_layers; l++) {
        RMS(a, h, W("model.layers.%d.input_layernorm.weight", l));
        LINEAR(q, a, W("model.layers.%d.self_attn.q_proj.weight", l), Hq * Dh, H);
        LINEAR(k, a, W("model.layers.%d.self_attn.k_proj.weight", l), Hkv * Dh, H);
        LINEAR(v, a, W("model.layers.%d.self_attn.v_proj.weight", l), Hkv * Dh, H);
        /* rotate half, position t of each sequence */
        for (int r = 0; r < N; r++)
            for (int hh = 0; hh < Hq + Hkv; hh++) {
                double *x = hh < Hq ? q + (r * Hq + hh) * Dh : k + (r * Hkv + hh - Hq) * Dh;
                for (int i = 0; i < half; i++) {
                    const double an = (r % T) * inv[i], x1 = x[i], x2 = x[i + half];
                    x[i] = x1 * cos(an) - x2 * sin(an);
                    x[i + half] = x2 * cos(an) + x1 * sin(an);
                }
            }
        for (int b = 0; b < B; b++) /* causal attention, query head hh reads kv head hh / (Hq/Hkv) */
            for (int hh = 0; hh < Hq; hh++)
                for (int i = 0; i < T; i++) {
                    const double *qi = q + ((b * T + i) * Hq + hh) * Dh;
                    const int kh = hh / (Hq / Hkv);
                    double m = -INFINITY, z = 0;
                    for (int j = 0; j <= i; j++) {
                        double s = 0;
                        for (int d = 0; d < Dh; d++) s += qi[d] * k[((b * T + j) * Hkv + kh) * Dh + d];
                        sc[j] = s / sqrt((double)Dh);
                        if (sc[j] > m) m = sc[j];
                    }
                    for (int j = 0; j <= i; j++) z += exp(sc[j] - m);
                    double *oi = o + ((b * T + i) * Hq + hh) * Dh;
                    for (int d = 0; d < Dh; d++) {
                        double s = 0;
                        for (int j = 0; j <= i; j++) s += exp(sc[j] - m) / z * v[((b * T + j) * Hkv + kh) * Dh + d];
                        oi[d] = s;
                    }
                }
        LINEAR(a, o, W("model.layers.%d.self_attn.o_proj.weight", l), H, Hq * Dh);
        for (int r = 0; r < N * H; r++) h[r] += a[r];
        RMS(a, h, W("model.layers.%d.post_attention_layernorm.weight", l));
        LINEAR(g, a, W("model.layers.%d.mlp.gate_proj.weight", l), I, H);
        LINEAR(u, a, W("model.layers.%d.mlp.up_proj.weight", l), I, H);
        for (int r = 0; r < N * I; r++) g[r] = g[r] / (1 + exp(-g[r])) * u[r];
        LINEAR(a, g, W("model.layers.%d.mlp.down_proj.weight", l), H, I);
        for (int r = 0; r < N * H; r++) h[r] += a[r];
    }
    RMS(a, h, weight(w, "model.norm.weight"));
    const float *head = c->tie_word_embeddings ? E : weight(w, "lm_head.weight");
    LINEAR(logits, a, head, V, H);
#undef W
#undef LINEAR
#undef RMS
    double total = 0;
    int count = 0;
    for (int r = 0; r < N; r++) {
        if (targets[r] == -100) continue;
        double m = -INFINITY, z = 0;
        for (int j = 0; j < V; j++) m = fmax(m, logits[r * V + j]);
        for (int j = 0; j < V; j++) z += exp(logits[r * V + j] - m);
        total += m + log(z) - logits[r * V + targets[r]];
        count++;
    }
    *loss = count ? total / count : 0;
    free(h), free(a), free(q), free(k), free(v), free(o), free(g), free(u), free(inv), free(sc);
}

static void make_batch(int32_t *ids, int32_t *targets, int B, int T, int V, uint64_t seed) {
    g_rng = seed;
    int32_t *labels = malloc((size_t)(B * T) * sizeof *labels);
    for (int i = 0; i < B * T; i++) ids[i] = labels[i] = rnd_int(0, V - 1);
    labels[T + 1] = -100; /* an ignored label (second sequence) */
    mn_llama_shift_labels(targets, labels, B, T);
    CHECK(targets[T - 1] == -100 && targets[T] == -100 && targets[0] == labels[1]);
    free(labels);
}

static void check_reference(void) {
    enum { B = 2, T = 8 };
    const char *cfgs[] = {cfg_tied, cfg_untied_llama3, cfg_linear};
    const char *names[] = {"tied", "untied, llama3 rope", "tied, linear rope"};
    for (int ci = 0; ci < 3; ci++) {
        const mn_llama_config c = parse(cfgs[ci]);
        const int V = (int)c.vocab_size;
        weights w;
        make_weights(&w, &c, "F32", 40 + (uint64_t)ci);
        int32_t ids[B * T], targets[B * T];
        make_batch(ids, targets, B, T, V, 77);
        double *ref = malloc(sizeof(double) * B * T * V), ref_loss;
        ref_forward(&c, &w, ids, targets, B, T, ref, &ref_loss);
        char dir[600], msg[4096];
        snprintf(dir, sizeof dir, "%s/ref%d", g_tmp, ci);
        write_folder(dir, cfgs[ci], w.t, w.n, 1);
        for (int tables = 0; tables < 2; tables++) {
            built b = build(&c, MN_LLAMA_TRAIN, B, T, 0, tables, NULL);
            mn_session *s = lu_session(b.g, MN_BACKEND_CPU, NULL, MN_MODE_TRAINING, NULL);
            if (!s) continue;
            CHECK_OK(load_dir(&b, s, dir, NULL, msg, sizeof msg), msg);
            CHECK_OK(mn_session_set_input(s, "input_ids", ids, sizeof ids), mn_session_error(s));
            CHECK_OK(mn_session_set_input(s, "targets", targets, sizeof targets), mn_session_error(s));
            CHECK_OK(mn_session_run(s), mn_session_error(s));
            float *lg = malloc(sizeof(float) * B * T * V), loss = NAN;
            CHECK_OK(mn_session_output(s, "logits", lg, sizeof(float) * B * T * V), mn_session_error(s));
            CHECK_OK(mn_session_loss(s, &loss), mn_session_error(s));
            const double e = lu_rel_l2_d(lg, ref, (size_t)B * T * V), el = fabs(loss - ref_loss) / ref_loss;
            printf("  %s, RoPE %s: logits rel L2 %.2e, loss %.6f vs %.6f (rel %.1e) against the f64 reference\n",
                   names[ci], tables ? "tables (forced)" : c.rope_scaling ? "tables (scaling)" : "op", e, loss,
                   ref_loss, el);
            CHECK_MSG(e <= 1e-5 && el <= 1e-5, "the model disagrees with the reference: %g %g", e, el);
            free(lg);
            mn_session_destroy(s);
            unbuild(&b);
        }
        free(ref);
        free_weights(&w);
    }
}

/* ---- 5. decoding ------------------------------------------------------------------ */

enum { DB = 2, PROMPT = 5, NEW = 9, TMAX = PROMPT + NEW - 1 };

static void check_decoding(mn_device *dev) {
    const char *cfgs[] = {cfg_tied, cfg_untied_llama3};
    for (int ci = 0; ci < 2; ci++) {
        const mn_llama_config c = parse(cfgs[ci]);
        const int V = (int)c.vocab_size;
        char dir[600], msg[4096];
        snprintf(dir, sizeof dir, "%s/ref%d", g_tmp, ci); /* written by check_reference */
        for (int be = 0; be < (dev ? 2 : 1); be++) {
            const mn_backend_kind kind = be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU;
            const char *bn = be ? "vulkan" : "cpu";
            built full = build(&c, MN_LLAMA_FORWARD, DB, TMAX, 0, false, NULL);
            built one = build(&c, MN_LLAMA_DECODE, DB, 1, TMAX, false, NULL);
            built chunk = build(&c, MN_LLAMA_DECODE, DB, 4, TMAX, ci == 0, NULL); /* tables on the tied model too */
            mn_session *sf = lu_session(full.g, kind, dev, MN_MODE_INFERENCE, NULL);
            mn_session *s1 = lu_session(one.g, kind, dev, MN_MODE_INFERENCE, NULL);
            mn_session *s4 = lu_session(chunk.g, kind, dev, MN_MODE_INFERENCE, NULL);
            if (!sf || !s1 || !s4) goto next;
            CHECK_OK(load_dir(&full, sf, dir, NULL, msg, sizeof msg), msg);
            CHECK_OK(load_dir(&one, s1, dir, NULL, msg, sizeof msg), msg);
            CHECK_OK(load_dir(&chunk, s4, dir, NULL, msg, sizeof msg), msg);
            /* a fixed sequence: full logits vs one token per run vs chunks of 4 */
            int32_t seq[DB * TMAX];
            g_rng = 9;
            for (int i = 0; i < DB * TMAX; i++) seq[i] = rnd_int(0, V - 1);
            float *lf = malloc(sizeof(float) * DB * TMAX * V), lg[DB * 64];
            CHECK_OK(mn_session_set_input(sf, "input_ids", seq, sizeof seq), mn_session_error(sf));
            CHECK_OK(mn_session_run(sf), mn_session_error(sf));
            CHECK_OK(mn_session_output(sf, "logits", lf, sizeof(float) * DB * TMAX * V), mn_session_error(sf));
            double d1 = 0, d4 = 0;
            for (int t = 0; t < TMAX; t++) {
                int32_t tok[DB] = {seq[t], seq[TMAX + t]};
                CHECK_OK(mn_llama_decode(one.m, s1, tok, 1, t, lg), mn_llama_error(one.m));
                for (int b = 0; b < DB; b++)
                    for (int j = 0; j < V; j++) d1 = fmax(d1, fabs(lg[b * V + j] - lf[(b * TMAX + t) * V + j]));
            }
            for (int p = 0; p < TMAX; p += 4) {
                const int k = TMAX - p < 4 ? TMAX - p : 4;
                int32_t tok[DB * 4];
                for (int b = 0; b < DB; b++) memcpy(tok + b * k, seq + b * TMAX + p, (size_t)k * sizeof *tok);
                CHECK_OK(mn_llama_decode(chunk.m, s4, tok, k, p, lg), mn_llama_error(chunk.m));
                for (int b = 0; b < DB; b++)
                    for (int j = 0; j < V; j++)
                        d4 = fmax(d4, fabs(lg[b * V + j] - lf[(b * TMAX + p + k - 1) * V + j]));
            }
            /* greedy: one token per run, chunked prefill, and recomputation over the padded sequence */
            int32_t prompt[DB * PROMPT], g1[DB * NEW], g4[DB * NEW], gr[DB * NEW], padded[DB * TMAX];
            for (int b = 0; b < DB; b++) memcpy(prompt + b * PROMPT, seq + b * TMAX, sizeof(int32_t) * PROMPT);
            CHECK_OK(mn_llama_greedy(one.m, s1, g1, prompt, PROMPT, NEW), mn_llama_error(one.m));
            CHECK_OK(mn_llama_greedy(chunk.m, s4, g4, prompt, PROMPT, NEW), mn_llama_error(chunk.m));
            memset(padded, 0, sizeof padded);
            for (int b = 0; b < DB; b++) memcpy(padded + b * TMAX, prompt + b * PROMPT, sizeof(int32_t) * PROMPT);
            for (int i = 0; i < NEW; i++) {
                CHECK_OK(mn_session_set_input(sf, "input_ids", padded, sizeof padded), mn_session_error(sf));
                CHECK_OK(mn_session_run(sf), mn_session_error(sf));
                CHECK_OK(mn_session_output(sf, "logits", lf, sizeof(float) * DB * TMAX * V), mn_session_error(sf));
                for (int b = 0; b < DB; b++) {
                    const float *row = lf + (b * TMAX + PROMPT + i - 1) * V;
                    int best = 0;
                    for (int j = 1; j < V; j++)
                        if (row[j] > row[best]) best = j;
                    gr[b * NEW + i] = best;
                    if (PROMPT + i < TMAX) padded[b * TMAX + PROMPT + i] = best;
                }
            }
            printf("  %s %-6s decode vs full logits: max |diff| %.1e (1 token/run), %.1e (chunks of 4); greedy %s\n",
                   ci ? "untied/llama3" : "tied", bn, d1, d4,
                   !memcmp(g1, gr, sizeof g1) && !memcmp(g4, gr, sizeof g4) ? "identical" : "DIFFERS");
            CHECK_MSG(d1 < 1e-5 && d4 < 1e-5, "%s: decoding logits differ from the full pass: %g %g", bn, d1, d4);
            CHECK_MSG(!memcmp(g1, gr, sizeof g1) && !memcmp(g4, gr, sizeof g4), "%s: greedy tokens differ", bn);
            /* argument errors */
            int32_t tok[DB] = {0, 0};
            CHECK(mn_llama_decode(one.m, s1, tok, 1, TMAX, lg) == MN_E_INVALID && strstr(mn_llama_error(one.m), "max_seq"));
            CHECK(mn_llama_decode(one.m, s1, tok, 2, 0, lg) == MN_E_INVALID);
            CHECK(mn_llama_greedy(one.m, s1, g1, prompt, PROMPT, NEW + 1) == MN_E_INVALID);
            free(lf);
        next:
            mn_session_destroy(sf);
            mn_session_destroy(s1);
            mn_session_destroy(s4);
            unbuild(&full);
            unbuild(&one);
            unbuild(&chunk);
        }
    }
}

/* ---- 6. training ------------------------------------------------------------------ */

enum { STEPS = 12 };

static bool freeze_attention(const char *name, void *user) {
    (void)user;
    return strstr(name, "self_attn.") != NULL;
}

static void check_training(mn_device *dev) {
    enum { B = 2, T = 8 };
    const mn_llama_config c = parse(cfg_tied);
    char dir[600], msg[4096];
    snprintf(dir, sizeof dir, "%s/train", g_tmp);
    weights w;
    make_weights(&w, &c, "BF16", 11);
    write_folder(dir, cfg_tied, w.t, w.n, 2);
    int32_t ids[B * T], targets[B * T];
    make_batch(ids, targets, B, T, (int)c.vocab_size, 5);
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAMW);
    opt.lr = 1e-2f;
    float loss[2][2][STEPS]; /* [frozen][backend] */
    for (int fr = 0; fr < 2; fr++)
        for (int be = 0; be < (dev ? 2 : 1); be++) {
            built b = build(&c, MN_LLAMA_TRAIN, B, T, 0, false, fr ? freeze_attention : NULL);
            mn_session *s = lu_session(b.g, be ? MN_BACKEND_VULKAN : MN_BACKEND_CPU, dev, MN_MODE_TRAINING, &opt);
            if (!s) {
                unbuild(&b);
                continue;
            }
            CHECK_OK(load_dir(&b, s, dir, NULL, msg, sizeof msg), msg);
            for (int i = 0; i < STEPS; i++) {
                CHECK_OK(mn_session_set_input(s, "input_ids", ids, sizeof ids), mn_session_error(s));
                CHECK_OK(mn_session_set_input(s, "targets", targets, sizeof targets), mn_session_error(s));
                CHECK_OK(mn_session_step(s), mn_session_error(s));
                CHECK_OK(mn_session_loss(s, &loss[fr][be][i]), mn_session_error(s));
            }
            if (fr) {
                /* frozen attention weights are as loaded; the MLP moved */
                bool att_same = true, mlp_moved = false;
                for (int i = 0; i < w.n; i++) {
                    size_t n = numel_of(&w.t[i]);
                    float *v = malloc(n * sizeof *v);
                    mn_session_get_param(s, w.t[i].name, v, n);
                    const bool same = !memcmp(v, w.t[i].v, n * sizeof *v);
                    if (strstr(w.t[i].name, "self_attn.")) att_same = att_same && same;
                    if (strstr(w.t[i].name, "mlp.")) mlp_moved = mlp_moved || !same;
                    free(v);
                }
                CHECK_MSG(att_same && mlp_moved, "freeze: attention unchanged %d, MLP moved %d", att_same, mlp_moved);
            }
            mn_session_destroy(s);
            unbuild(&b);
        }
    for (int fr = 0; fr < 2; fr++) {
        printf("  training%s: loss %.4f -> %.4f over %d steps (cpu)", fr ? " (attention frozen)" : "", loss[fr][0][0],
               loss[fr][0][STEPS - 1], STEPS);
        CHECK_MSG(loss[fr][0][STEPS - 1] < 0.7 * loss[fr][0][0], "the loss did not fall: %g -> %g", loss[fr][0][0],
                  loss[fr][0][STEPS - 1]);
        if (dev) {
            double worst = 0;
            for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs(loss[fr][0][i] - loss[fr][1][i]));
            printf("; vulkan %.4f -> %.4f, largest difference %.1e", loss[fr][1][0], loss[fr][1][STEPS - 1], worst);
            CHECK_MSG(worst < 1e-4, "CPU and Vulkan losses differ by %g", worst);
        }
        printf("\n");
    }
    free_weights(&w);
}

int main(void) {
    if (!mkdtemp(g_tmp)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    mn_device *dev = lu_vulkan();
    check_reader();
    check_loading();
    check_shards();
    check_reference();
    check_decoding(dev);
    check_training(dev);
    mn_device_close(dev);
    rm_folder(g_tmp);
    return th_finish("test_llama_load");
}
