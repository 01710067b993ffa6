/* test_llama_config.c - Hugging Face config.json for the Llama builder.
 *
 * Checks:
 * 1. the published configurations (tests/fixtures/configs: SmolLM2
 *    135M/360M/1.7B, TinyLlama 1.1B, Llama 3.2 1B, in the forms transformers
 *    4.x and 5 write) parse to the expected values, and the graphs built
 *    from them hold the published parameter counts (training and decoding
 *    graphs; nothing is allocated);
 * 2. the RoPE inverse frequencies (default, linear, llama3) against a
 *    direct double-precision formula;
 * 3. hostile and unsupported configs are refused with the key named (types,
 *    ranges, overflow, heads that do not divide, duplicated keys, bad
 *    strings, unsupported features), and escape sequences never reach the
 *    message raw;
 * 4. mn_llama_config_load on a folder, a file, a FIFO (refused without
 *    blocking), a missing file; builder option errors and dead handles;
 * 5. every file of tests/fuzz/corpus_hf_config (fuzz findings, if any)
 *    parses or is refused without crashing.
 *
 * Does not: load weights (test_llama_load.c) or compare with PyTorch
 * (test_llama_hf.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llama_util.h"

static char g_fixtures[1024];

/* ---- 1. published configurations ---------------------------------------------- */

typedef struct expect {
    const char *file;
    int64_t vocab, hidden, layers, heads, kv, head_dim, inter, max_pos;
    double theta;
    mn_rope_scaling scaling;
    bool tied;
    const char *dtype;
    int n_eos;
    int64_t params; /* published parameter count */
} expect;

static const expect published[] = {
    {"smollm2-135m.json", 49152, 576, 30, 9, 3, 64, 1536, 8192, 100000, MN_ROPE_SCALING_NONE, true, "bfloat16", 1,
     134515008},
    {"smollm2-135m-v5.json", 49152, 576, 30, 9, 3, 64, 1536, 8192, 100000, MN_ROPE_SCALING_NONE, true, "bfloat16", 1,
     134515008},
    {"smollm2-360m.json", 49152, 960, 32, 15, 5, 64, 2560, 8192, 100000, MN_ROPE_SCALING_NONE, true, "bfloat16", 1,
     361821120},
    {"smollm2-1.7b.json", 49152, 2048, 24, 32, 32, 64, 8192, 8192, 130000, MN_ROPE_SCALING_NONE, true, "bfloat16", 1,
     1711376384},
    {"tinyllama-1.1b-chat-v1.0.json", 32000, 2048, 22, 32, 4, 64, 5632, 2048, 10000, MN_ROPE_SCALING_NONE, false,
     "bfloat16", 1, 1100048384},
    {"tinyllama-head-dim-null-linear-type.json", 32000, 2048, 22, 32, 4, 64, 5632, 4096, 10000,
     MN_ROPE_SCALING_LINEAR, false, "float32", 1, 1100048384},
    {"llama-3.2-1b.json", 128256, 2048, 16, 32, 8, 64, 8192, 131072, 500000, MN_ROPE_SCALING_LLAMA3, true, "bfloat16",
     1, 1235814400},
    {"llama-3.2-1b-instruct-v5.json", 128256, 2048, 16, 32, 8, 64, 8192, 131072, 500000, MN_ROPE_SCALING_LLAMA3, true,
     "bfloat16", 3, 1235814400},
};

static void check_published(void) {
    for (size_t i = 0; i < sizeof published / sizeof *published; i++) {
        const expect *e = &published[i];
        char path[1200], err[512];
        snprintf(path, sizeof path, "%s/configs/%s", g_fixtures, e->file);
        mn_llama_config c;
        mn_status st = mn_llama_config_load(&c, path, err, sizeof err);
        CHECK_OK(st, err);
        if (st) continue;
        CHECK_MSG(c.vocab_size == e->vocab && c.hidden_size == e->hidden && c.num_hidden_layers == e->layers &&
                      c.num_attention_heads == e->heads && c.num_key_value_heads == e->kv &&
                      c.head_dim == e->head_dim && c.intermediate_size == e->inter &&
                      c.max_position_embeddings == e->max_pos,
                  "%s: sizes differ", e->file);
        CHECK_MSG(c.rope_theta == e->theta && c.rope_scaling == e->scaling && c.tie_word_embeddings == e->tied &&
                      strcmp(c.dtype, e->dtype) == 0 && c.n_eos == e->n_eos && c.rms_norm_eps == 1e-5,
                  "%s: theta %g scaling %d tied %d dtype %s eos %d eps %g", e->file, c.rope_theta, (int)c.rope_scaling,
                  (int)c.tie_word_embeddings, c.dtype, c.n_eos, c.rms_norm_eps);
        if (c.rope_scaling == MN_ROPE_SCALING_LLAMA3)
            CHECK(c.rope_factor == 32 && c.rope_low_freq_factor == 1 && c.rope_high_freq_factor == 4 &&
                  c.rope_original_max_position_embeddings == 8192);
        if (e->n_eos == 3) CHECK(c.eos_token_id[0] == 128001 && c.eos_token_id[2] == 128009);

        /* the graphs: a training step of 2 x 64 tokens and a decoding step */
        mn_llama_options o = mn_llama_default_options();
        o.batch = 2;
        o.seq_len = 64;
        for (int kind = 0; kind < 2; kind++) {
            mn_graph *g = NULL;
            mn_llama *m = NULL;
            CHECK_OK(mn_graph_create(&g), "graph");
            if (kind == 1) {
                o.kind = MN_LLAMA_DECODE;
                o.seq_len = 1;
                o.max_seq = 256;
            }
            st = mn_llama_create(&m, g, &c, &o);
            CHECK_MSG(st == MN_OK, "%s: build (%s): %s", e->file, kind ? "decode" : "train", mn_llama_error(m));
            if (!st) {
                CHECK_MSG(mn_llama_numel(m) == e->params, "%s: %lld parameters, published %lld", e->file,
                          (long long)mn_llama_numel(m), (long long)e->params);
                const int np = mn_llama_param_count(m);
                CHECK(np == 2 + 9 * (int)e->layers + (e->tied ? 0 : 1));
                const mn_hf_param *p = mn_llama_params(m);
                CHECK(np > 0 && strcmp(p[0].name, "model.embed_tokens.weight") == 0);
                CHECK(np > 2 && strcmp(p[2].name, "model.layers.0.self_attn.q_proj.weight") == 0 &&
                      p[2].shape[0] == e->heads * e->head_dim && p[2].shape[1] == e->hidden);
                CHECK(np > 3 && strcmp(p[3].name, "model.layers.0.self_attn.k_proj.weight") == 0 &&
                      p[3].shape[0] == e->kv * e->head_dim);
                CHECK(strcmp(p[np - 1].name, e->tied ? "model.norm.weight" : "lm_head.weight") == 0);
                mn_llama_tensors t = mn_llama_get_tensors(m);
                int rank;
                int64_t shape[MN_MAX_RANK];
                CHECK_OK(mn_tensor_shape(g, t.logits, &rank, shape), mn_graph_error(g));
                CHECK(rank == 2 && shape[0] == o.batch * o.seq_len && shape[1] == e->vocab);
                CHECK(kind == 0 ? t.loss != MN_NONE && t.pos == MN_NONE : t.loss == MN_NONE && t.pos != MN_NONE);
                /* rope tables exactly where the op cannot do it */
                CHECK((t.rope_cos != MN_NONE) == (e->scaling != MN_ROPE_SCALING_NONE));
            }
            mn_llama_destroy(m);
            mn_graph_destroy(g);
        }
    }
}

/* ---- 2. RoPE frequencies ------------------------------------------------------- */

static void check_inv_freq(void) {
    mn_llama_config c;
    char err[512];
    const char *json = "{\"vocab_size\":10,\"hidden_size\":2048,\"num_hidden_layers\":1,\"num_attention_heads\":32,"
                       "\"intermediate_size\":8,\"rope_theta\":500000.0,\"rope_scaling\":{\"factor\":32.0,"
                       "\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,\"original_max_position_embeddings\":8192,"
                       "\"rope_type\":\"llama3\"}}";
    CHECK_OK(mn_llama_config_parse(&c, json, strlen(json), err, sizeof err), err);
    float f[32], plain[32];
    CHECK_OK(mn_llama_inv_freq(f, &c), "inv_freq");
    mn_llama_config d = c;
    d.rope_scaling = MN_ROPE_SCALING_NONE;
    CHECK_OK(mn_llama_inv_freq(plain, &d), "inv_freq");
    double worst = 0;
    int low = 0, high = 0, mid = 0;
    for (int i = 0; i < 32; i++) {
        const double inv = pow(500000.0, -2.0 * i / 64.0), wl = 6.283185307179586 / inv;
        double want;
        if (wl < 8192.0 / 4) want = inv, high++;
        else if (wl > 8192.0 / 1) want = inv / 32, low++;
        else {
            const double s = (8192.0 / wl - 1) / (4 - 1);
            want = (1 - s) * inv / 32 + s * inv;
            mid++;
        }
        const double r = fabs(f[i] - want) / want, rp = fabs(plain[i] - inv) / inv;
        if (r > worst) worst = r;
        if (rp > worst) worst = rp;
    }
    printf("  llama3 inv_freq: %d high, %d smoothed, %d low frequencies; worst rel. error vs f64 %.2e\n", high, mid,
           low, worst);
    CHECK(high > 0 && mid > 0 && low > 0);
    CHECK_MSG(worst < 2e-6, "inv_freq off by %g", worst);
    CHECK(f[0] == 1.0f);
    d.rope_scaling = MN_ROPE_SCALING_LINEAR;
    d.rope_factor = 4;
    CHECK_OK(mn_llama_inv_freq(f, &d), "inv_freq");
    CHECK(f[5] == plain[5] / 4.0f);
}

/* ---- 3. hostile and unsupported configs --------------------------------------- */

#define BASE "\"vocab_size\":256,\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":128"

typedef struct bad_case {
    const char *json;
    mn_status st;
    const char *needle; /* must appear in the message */
} bad_case;

static const bad_case bad_cases[] = {
    {"{" BASE ",\"hidden_act\":\"gelu\"}", MN_E_UNSUPPORTED, "hidden_act 'gelu'"},
    {"{" BASE ",\"attention_bias\":true}", MN_E_UNSUPPORTED, "attention_bias"},
    {"{" BASE ",\"mlp_bias\":true}", MN_E_UNSUPPORTED, "mlp_bias"},
    {"{" BASE ",\"rope_interleaved\":true}", MN_E_UNSUPPORTED, "rope_interleaved"},
    {"{" BASE ",\"attention_dropout\":0.1}", MN_E_UNSUPPORTED, "attention_dropout"},
    {"{" BASE ",\"partial_rotary_factor\":0.5}", MN_E_UNSUPPORTED, "partial_rotary_factor"},
    {"{" BASE ",\"quantization_config\":{\"bits\":4}}", MN_E_UNSUPPORTED, "quantization_config"},
    {"{" BASE ",\"model_type\":\"mistral\"}", MN_E_UNSUPPORTED, "model_type 'mistral'"},
    {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}}", MN_E_UNSUPPORTED,
     "rope_scaling.rope_type 'yarn'"},
    {"{" BASE ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":4.0}}", MN_E_UNSUPPORTED,
     "rope_scaling.rope_type 'dynamic'"},
    {"{" BASE ",\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\"}}}", MN_E_UNSUPPORTED,
     "per-layer-type"},
    {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"high_freq_factor\":4.0,"
     "\"original_max_position_embeddings\":8192}}",
     MN_E_FORMAT, "rope_scaling.low_freq_factor is required"},
    {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4.0,"
     "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}}",
     MN_E_FORMAT, "high_freq_factor 4 must be larger"},
    {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":-2}}", MN_E_FORMAT, "rope_scaling.factor"},
    {"{" BASE ",\"rope_scaling\":[1]}", MN_E_FORMAT, "rope_scaling must be an object"},
    {"{" BASE ",\"rope_theta\":10000,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":500000}}",
     MN_E_FORMAT, "rope_theta 10000 and rope_parameters.rope_theta 500000 disagree"},
    {"{" BASE ",\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2},\"rope_scaling\":{\"type\":\"linear\","
     "\"factor\":3}}",
     MN_E_FORMAT, "disagree"},
    {"{" BASE ",\"rope_theta\":-5}", MN_E_FORMAT, "rope_theta"},
    {"{" BASE ",\"rope_theta\":\"big\"}", MN_E_FORMAT, "rope_theta must be a number, got a string"},
    {"{\"vocab_size\":256,\"hidden_size\":-64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
     "\"intermediate_size\":128}",
     MN_E_FORMAT, "hidden_size = -64 is outside"},
    {"{\"vocab_size\":256,\"hidden_size\":\"64\",\"num_hidden_layers\":2,\"num_attention_heads\":4,"
     "\"intermediate_size\":128}",
     MN_E_FORMAT, "hidden_size must be an integer, got a string"},
    {"{\"vocab_size\":256.5,\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
     "\"intermediate_size\":128}",
     MN_E_FORMAT, "vocab_size must be an integer, got 256.5"},
    {"{\"vocab_size\":1e300,\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
     "\"intermediate_size\":128}",
     MN_E_FORMAT, "vocab_size"},
    {"{\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":128}", MN_E_FORMAT,
     "vocab_size is required"},
    {"{\"vocab_size\":256,\"hidden_size\":64,\"num_hidden_layers\":0,\"num_attention_heads\":4,"
     "\"intermediate_size\":128}",
     MN_E_FORMAT, "num_hidden_layers = 0"},
    {"{\"vocab_size\":256,\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":5,"
     "\"intermediate_size\":128}",
     MN_E_FORMAT, "num_attention_heads 5 does not divide hidden_size 64"},
    {"{" BASE ",\"num_key_value_heads\":3}", MN_E_FORMAT, "num_key_value_heads 3 does not divide num_attention_heads 4"},
    {"{" BASE ",\"head_dim\":15}", MN_E_FORMAT, "head_dim 15 must be even"},
    {"{" BASE ",\"head_dim\":0}", MN_E_FORMAT, "head_dim = 0"},
    {"{" BASE ",\"rms_norm_eps\":0}", MN_E_FORMAT, "rms_norm_eps"},
    {"{" BASE ",\"max_position_embeddings\":1099511627776}", MN_E_FORMAT, "max_position_embeddings"},
    {"{\"vocab_size\":16777216,\"hidden_size\":16777216,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
     "\"intermediate_size\":128}",
     MN_E_FORMAT, "more than 2^40"},
    {"{\"vocab_size\":256,\"hidden_size\":65536,\"num_hidden_layers\":1024,\"num_attention_heads\":4,"
     "\"intermediate_size\":16777216}",
     MN_E_FORMAT, "more than 2^40"},
    {"{" BASE ",\"num_attention_heads\":8}", MN_E_FORMAT, "occurs twice"},
    {"{" BASE ",\"rope_scaling\":{\"factor\":2,\"factor\":3,\"rope_type\":\"linear\"}}", MN_E_FORMAT, "occurs twice"},
    {"{" BASE ",\"tie_word_embeddings\":1}", MN_E_FORMAT, "tie_word_embeddings must be true or false"},
    {"{" BASE ",\"dtype\":\"float32\",\"torch_dtype\":\"bfloat16\"}", MN_E_FORMAT, "disagree"},
    {"{" BASE ",\"torch_dtype\":\"int8\"}", MN_E_UNSUPPORTED, "torch_dtype 'int8'"},
    {"{" BASE ",\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", MN_E_FORMAT, "more than 8"},
    {"{" BASE ",\"eos_token_id\":[1,-2]}", MN_E_FORMAT, "eos_token_id[1]"},
    {"{" BASE ",\"eos_token_id\":\"2\"}", MN_E_FORMAT, "eos_token_id must be"},
    {"{" BASE ",\"hidden_act\":\"silu\\u0000x\"}", MN_E_FORMAT, "\\u0000"},
    {"{" BASE ",\"hidden_act\":\"si\001lu\"}", MN_E_FORMAT, "control character"},
    {"[1,2]", MN_E_FORMAT, "top level must be an object"},
    {"{" BASE "", MN_E_FORMAT, "not valid JSON"},
    {"{" BASE "} x", MN_E_FORMAT, "text after the JSON value"},
    {"", MN_E_FORMAT, "not valid JSON"},
};

static void check_bad(void) {
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        const bad_case *b = &bad_cases[i];
        mn_llama_config c;
        memset(&c, 0x5a, sizeof c);
        const mn_llama_config before = c;
        char err[512] = "";
        mn_status st = mn_llama_config_parse(&c, b->json, strlen(b->json), err, sizeof err);
        CHECK_MSG(st == b->st && strstr(err, b->needle) && strncmp(err, "config.json: ", 13) == 0,
                  "case %zu: got %s '%s', want %s with '%s'", i, mn_status_str(st), err, mn_status_str(b->st),
                  b->needle);
        CHECK_MSG(memcmp(&c, &before, sizeof c) == 0, "case %zu: a refused parse changed the output", i);
    }
    /* values from the file are escaped in messages */
    const char *esc = "{" BASE ",\"hidden_act\":\"\\u001b[31mred\\u202e\"}";
    char err[512];
    mn_llama_config c;
    CHECK(mn_llama_config_parse(&c, esc, strlen(esc), err, sizeof err) == MN_E_UNSUPPORTED);
    CHECK_MSG(!strchr(err, 0x1b) && strstr(err, "\\x1B[31mred") && !strstr(err, "\xe2\x80\xae"), "message: %s", err);
    /* a small err buffer is terminated, NULL err is fine */
    char tiny[8];
    CHECK(mn_llama_config_parse(&c, "{}", 2, tiny, sizeof tiny) == MN_E_FORMAT && strlen(tiny) == 7);
    CHECK(mn_llama_config_parse(&c, "{}", 2, NULL, 0) == MN_E_FORMAT);
    CHECK(mn_llama_config_parse(NULL, "{}", 2, NULL, 0) == MN_E_INVALID);
    /* defaults of absent keys (transformers' LlamaConfig) */
    const char *min = "{" BASE "}";
    CHECK_OK(mn_llama_config_parse(&c, min, strlen(min), err, sizeof err), err);
    CHECK(c.num_key_value_heads == 4 && c.head_dim == 16 && c.rms_norm_eps == 1e-6 && c.rope_theta == 10000 &&
          !c.tie_word_embeddings && c.max_position_embeddings == 2048 && c.bos_token_id == -1 && c.n_eos == 0 &&
          c.initializer_range == 0.02 && c.dtype[0] == 0);
    /* not NUL-terminated: only len bytes are read */
    char buf[256];
    snprintf(buf, sizeof buf, "{%s}garbage", BASE);
    CHECK_OK(mn_llama_config_parse(&c, buf, strlen(buf) - 7, err, sizeof err), err);
}

/* ---- 4. files, builder errors -------------------------------------------------- */

static void check_files(void) {
    char dir[] = "/tmp/mn-llama-config-XXXXXX", path[256], err[512];
    if (!mkdtemp(dir)) {
        CHECK_MSG(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    mn_llama_config c;
    /* a folder without config.json */
    CHECK(mn_llama_config_load(&c, dir, err, sizeof err) == MN_E_IO && strstr(err, "config.json"));
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{" BASE ",\"num_key_value_heads\":2}");
    fclose(f);
    CHECK_OK(mn_llama_config_load(&c, dir, err, sizeof err), err);
    CHECK(c.num_key_value_heads == 2);
    CHECK_OK(mn_llama_config_load(&c, path, err, sizeof err), err);
    f = fopen(path, "w");
    fprintf(f, "{" BASE ",\"num_key_value_heads\":3}");
    fclose(f);
    CHECK(mn_llama_config_load(&c, dir, err, sizeof err) == MN_E_FORMAT && strstr(err, path) &&
          strstr(err, "num_key_value_heads 3"));
    /* a FIFO is refused at once, not waited on */
    snprintf(path, sizeof path, "%s/fifo.json", dir);
    if (mkfifo(path, 0600) == 0) {
        CHECK(mn_llama_config_load(&c, path, err, sizeof err) == MN_E_IO && strstr(err, "FIFO"));
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/absent.json", dir);
    CHECK(mn_llama_config_load(&c, path, err, sizeof err) == MN_E_IO && strstr(err, "absent.json"));
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

static void check_builder_errors(void) {
    mn_llama_config c;
    char err[512];
    const char *json = "{" BASE ",\"max_position_embeddings\":32}";
    CHECK_OK(mn_llama_config_parse(&c, json, strlen(json), err, sizeof err), err);
    struct {
        int64_t batch, seq, max_seq;
        mn_llama_kind kind;
        const char *needle;
    } cases[] = {
        {0, 8, 0, MN_LLAMA_TRAIN, "batch 0"},
        {1, 64, 0, MN_LLAMA_FORWARD, "seq_len 64 is larger than max_position_embeddings 32"},
        {1, 1, 0, MN_LLAMA_DECODE, "max_seq >= 1"},
        {1, 1, 33, MN_LLAMA_DECODE, "max_seq 33"},
        {1, 1, 8, (mn_llama_kind)7, "unknown kind"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mn_graph *g;
        mn_llama *m = NULL;
        mn_graph_create(&g);
        mn_llama_options o = mn_llama_default_options();
        o.batch = cases[i].batch;
        o.seq_len = cases[i].seq;
        o.max_seq = cases[i].max_seq;
        o.kind = cases[i].kind;
        CHECK(mn_llama_create(&m, g, &c, &o) == MN_E_INVALID && m);
        CHECK_MSG(strstr(mn_llama_error(m), cases[i].needle), "case %zu: '%s'", i, mn_llama_error(m));
        /* a dead model refuses everything else */
        int32_t tok = 0;
        CHECK(mn_llama_decode(m, NULL, &tok, 1, 0, NULL) == MN_E_STATE);
        mn_llama_destroy(m);
        mn_graph_destroy(g);
    }
    /* a hand-made config that breaks the parser's rules */
    mn_llama_config bad = c;
    bad.num_key_value_heads = 3;
    mn_graph *g;
    mn_llama *m = NULL;
    mn_graph_create(&g);
    CHECK(mn_llama_create(&m, g, &bad, NULL) == MN_E_INVALID && strstr(mn_llama_error(m), "not consistent"));
    mn_llama_destroy(m);
    /* decoding helpers on a training model */
    mn_llama_options o = mn_llama_default_options();
    o.seq_len = 8;
    CHECK_OK(mn_llama_create(&m, g, &c, &o), mn_llama_error(m));
    int32_t tok = 0;
    CHECK(mn_llama_greedy(m, (mn_session *)1, &tok, &tok, 1, 1) == MN_E_STATE &&
          strstr(mn_llama_error(m), "MN_LLAMA_DECODE"));
    mn_llama_destroy(m);
    mn_llama_destroy(NULL);
    mn_graph_destroy(g);
    CHECK(mn_llama_create(NULL, NULL, NULL, NULL) == MN_E_INVALID);
}

/* ---- 5. fuzz findings ------------------------------------------------------------- */

static void replay_corpus(void) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/../fuzz/corpus_hf_config", g_fixtures);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[1500], err[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        mn_llama_config c;
        mn_llama_config_load(&c, path, err, sizeof err); /* any result, no crash */
        n++;
    }
    if (d) closedir(d);
    printf("  replayed %d fuzz corpus files\n", n);
}

int main(void) {
    lu_fixtures(g_fixtures, sizeof g_fixtures);
    check_published();
    check_inv_freq();
    check_bad();
    check_files();
    check_builder_errors();
    replay_corpus();
    return th_finish("test_llama_config");
}
