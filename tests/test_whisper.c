/* test_whisper.c - the Whisper builder (src/models/whisper.c).
 *
 * 1. config.json: Whisper-tiny's published config parses (and builds at full
 *    size with its 37,760,640 parameters plus the frozen sinusoids:
 *    transformers counts 37,184,640 + 576,000); unsupported and hostile
 *    configs are refused naming the key.
 * 2. A tiny Whisper (TRAIN kind): every gradient against central
 *    differences of the f64 CPU session, and CPU vs Vulkan (logits, loss
 *    1e-5; every gradient 1e-4).
 * 3. The transcription graph (encoder branch filling the cross-attention
 *    states, one-token decoder over KV caches) loaded by name from the
 *    training graph's weights (a safetensors file with HF names and a tied
 *    proj_out.weight, which is skipped): its greedy tokens are the argmax of
 *    the full teacher-forced forward pass at every position, on CPU and
 *    Vulkan; eos ends it; suppressed tokens never appear.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "models_util.h"

static const char *tiny_json =
    "{\"model_type\":\"whisper\",\"d_model\":16,\"encoder_layers\":2,\"decoder_layers\":2,"
    "\"encoder_attention_heads\":4,\"decoder_attention_heads\":2,\"encoder_ffn_dim\":24,\"decoder_ffn_dim\":20,"
    "\"num_mel_bins\":8,\"max_source_positions\":12,\"max_target_positions\":10,\"vocab_size\":30,"
    "\"decoder_start_token_id\":1,\"eos_token_id\":2,\"activation_function\":\"gelu\",\"scale_embedding\":false}";

static const char *tiny_hf =
    "{\"activation_dropout\":0.0,\"activation_function\":\"gelu\",\"architectures\":[\"WhisperForConditionalGeneration\"],"
    "\"attention_dropout\":0.0,\"bos_token_id\":50257,\"d_model\":384,\"decoder_attention_heads\":6,"
    "\"decoder_ffn_dim\":1536,\"decoder_layerdrop\":0.0,\"decoder_layers\":4,\"decoder_start_token_id\":50258,"
    "\"dropout\":0.0,\"encoder_attention_heads\":6,\"encoder_ffn_dim\":1536,\"encoder_layerdrop\":0.0,"
    "\"encoder_layers\":4,\"eos_token_id\":50257,\"init_std\":0.02,\"is_encoder_decoder\":true,"
    "\"max_source_positions\":1500,\"max_target_positions\":448,\"model_type\":\"whisper\",\"num_hidden_layers\":4,"
    "\"num_mel_bins\":80,\"pad_token_id\":50257,\"scale_embedding\":false,\"torch_dtype\":\"float32\","
    "\"transformers_version\":\"4.27.0.dev0\",\"use_cache\":true,\"vocab_size\":51865}";

static void check_config(void) {
    mn_whisper_config c;
    char err[512];
    CHECK_OK(mn_whisper_config_parse(&c, tiny_hf, strlen(tiny_hf), err, sizeof err), err);
    CHECK(c.d_model == 384 && c.vocab_size == 51865 && c.decoder_start_token_id == 50258 && c.eos_token_id == 50257);
    mn_graph *g;
    mn_graph_create(&g);
    mn_model *m = NULL;
    mn_whisper_options o = mn_whisper_default_options();
    o.kind = MN_WHISPER_TRAIN;
    CHECK_OK(mn_whisper_create(&m, g, &c, &o), mn_model_error(m));
    printf("Whisper-tiny: %lld parameters (with the encoder's 576,000 frozen sinusoids)\n", (long long)mn_model_numel(m));
    CHECK(mn_model_numel(m) == 37184640 + 576000);
    mn_model_destroy(m);
    mn_graph_destroy(g);
    static const struct {
        const char *json, *words;
    } bad[] = {
        {"{\"activation_function\":\"relu\"}", "activation_function relu"},
        {"{\"model_type\":\"llama\"}", "model_type"},
        {"{\"d_model\":10,\"encoder_attention_heads\":4}", "multiple of the attention heads"},
        {"{\"d_model\":16,\"d_model\":32}", "appears twice"},
        {"{\"vocab_size\":-3}", "vocab_size"},
        {"{\"vocab_size\":10,\"eos_token_id\":20}", "eos_token_id"},
        {"[1,2]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(mn_whisper_config_parse(&c, bad[i].json, strlen(bad[i].json), err, sizeof err) != MN_OK &&
                      strstr(err, bad[i].words),
                  "%s: %s", bad[i].json, err);
}

typedef struct tiny {
    mn_graph *g;
    mn_model *m;
    mn_whisper_config c;
    float feat[2 * 8 * 24];
    int32_t ids[2 * 6], labels[2 * 6];
    mu_input in[3];
} tiny;

static void tiny_build(tiny *x, mn_whisper_kind kind, int64_t batch, int64_t T) {
    memset(x, 0, sizeof *x);
    char err[512];
    CHECK_OK(mn_whisper_config_parse(&x->c, tiny_json, strlen(tiny_json), err, sizeof err), err);
    mn_whisper_options o = mn_whisper_default_options();
    o.kind = kind;
    o.batch = batch;
    o.seq_len = T;
    mn_graph_create(&x->g);
    CHECK_OK(mn_whisper_create(&x->m, x->g, &x->c, &o), mn_model_error(x->m));
    mu_fill(x->feat, sizeof x->feat / 4, 1, -1, 1);
    uint64_t s = 9;
    for (int i = 0; i < 12; i++) x->ids[i] = (int32_t)(mu_next(&s) % 30), x->labels[i] = (int32_t)(mu_next(&s) % 30);
    x->labels[5] = -100;
    x->in[0] = (mu_input){"input_features", x->feat, (size_t)(batch * 8 * 24) * 4};
    x->in[1] = (mu_input){"decoder_input_ids", x->ids, (size_t)(batch * T) * 4};
    x->in[2] = (mu_input){"labels", x->labels, (size_t)(batch * T) * 4};
}

static void tiny_free(tiny *x) {
    mn_model_destroy(x->m);
    mn_graph_destroy(x->g);
}

/* Greedy decoding on be against the teacher-forced forward pass. */
static void check_decode(mn_backend_kind be, mn_device *dev, const char *weights) {
    const char *bn = be == MN_BACKEND_VULKAN ? "vulkan" : "cpu";
    tiny d, t;
    tiny_build(&d, MN_WHISPER_DECODE, 1, 1);
    mn_session *s = lu_session(d.g, be, dev, MN_MODE_INFERENCE, NULL);
    char err[512];
    mn_hf_checkpoint *ck = NULL;
    CHECK_OK(mn_hf_checkpoint_open(&ck, weights, err, sizeof err), err);
    if (!s || !ck) return;
    CHECK_OK(mn_model_load(d.m, s, ck, NULL), mn_model_error(d.m));
    const int32_t prompt[2] = {1, 7}, suppress[1] = {3};
    mn_whisper_decode_options o = {prompt, 2, 8, suppress, 1, NULL, 0};
    int32_t out[8];
    int64_t n = 0;
    CHECK_OK(mn_whisper_greedy(d.m, s, d.feat, &o, out, &n), mn_model_error(d.m));
    printf("%s: greedy decoding gave %lld tokens:", bn, (long long)n);
    for (int64_t i = 0; i < n; i++) printf(" %d", out[i]);
    printf("\n");
    /* the same sequence teacher-forced through the training graph (T = 10) */
    tiny_build(&t, MN_WHISPER_TRAIN, 1, 10);
    mn_session *st = lu_session(t.g, be, dev, MN_MODE_INFERENCE, NULL);
    CHECK_OK(mn_model_load(t.m, st, ck, NULL), mn_model_error(t.m));
    int32_t ids[10] = {0}, lab[10];
    for (int i = 0; i < 10; i++) lab[i] = -100;
    ids[0] = prompt[0], ids[1] = prompt[1];
    for (int64_t i = 0; i < n && i + 2 < 10; i++) ids[i + 2] = out[i];
    float *lg = malloc(10 * 30 * sizeof *lg);
    CHECK_OK(mn_session_set_input(st, "input_features", d.feat, 8 * 24 * 4), mn_session_error(st));
    CHECK_OK(mn_session_set_input(st, "decoder_input_ids", ids, sizeof ids), mn_session_error(st));
    CHECK_OK(mn_session_set_input(st, "labels", lab, sizeof lab), mn_session_error(st));
    CHECK_OK(mn_session_run(st), mn_session_error(st));
    CHECK_OK(mn_session_output(st, "logits", lg, 10 * 30 * sizeof *lg), mn_session_error(st));
    for (int64_t i = 0; i <= n && i < 8; i++) { /* position 1 + i predicts new token i (or eos) */
        const float *r = lg + (1 + i) * 30;
        int best = -1;
        for (int v = 0; v < 30; v++)
            if (v != suppress[0] && (best < 0 || r[v] > r[best])) best = v;
        const int want = i < n ? out[i] : 2;
        if (i < n || n < 8) CHECK_MSG(best == want, "%s: new token %lld is %d, the full forward pass says %d", bn, (long long)i, want, best);
    }
    for (int64_t i = 0; i < n; i++) CHECK(out[i] != suppress[0] && out[i] != 2);
    free(lg);
    mn_session_destroy(st);
    tiny_free(&t);
    mn_session_destroy(s);
    mn_hf_checkpoint_close(ck);
    tiny_free(&d);
}

/* The training session's weights as a Hugging Face file (and a tied proj_out.weight). */
static void write_weights(const char *path, mn_session *s, const mn_model *m) {
    const int n = mn_model_param_count(m);
    const mn_hf_param *p = mn_model_params(m);
    st_entry *e = calloc((size_t)n + 1, sizeof *e);
    float **bufs = calloc((size_t)n + 1, sizeof *bufs);
    int k = 0;
    for (int i = 0; i < n; i++) {
        const size_t cnt = mu_numel(&p[i]);
        bufs[i] = malloc(cnt * sizeof(float));
        mn_session_get_param(s, p[i].name, bufs[i], cnt);
        if (!strcmp(p[i].name, "model.encoder.embed_positions.weight")) /* give it values (a fresh one is zero) */
            for (size_t j = 0; j < cnt; j++) bufs[i][j] = (float)sin(0.37 * (double)j);
        e[k++] = (st_entry){p[i].name, "F32", p[i].rank, p[i].shape, bufs[i], cnt * 4};
        if (!strcmp(p[i].name, "model.decoder.embed_tokens.weight"))
            e[k++] = (st_entry){"proj_out.weight", "F32", p[i].rank, p[i].shape, bufs[i], cnt * 4};
    }
    char err[256];
    CHECK_OK(st_save_atomic(path, e, k, NULL, 0, err, sizeof err), err);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs), free(e);
}

/* `test_whisper --write-folder DIR`: a tiny random Whisper that takes real
 * features (80 mels, 1500 positions) as a Hugging Face folder without the
 * tokenizer (cli_transcribe.sh adds one): config.json and model.safetensors. */
static int write_folder(const char *dir) {
    static const char *cfg =
        "{\"model_type\":\"whisper\",\"d_model\":16,\"encoder_layers\":1,\"decoder_layers\":1,"
        "\"encoder_attention_heads\":2,\"decoder_attention_heads\":2,\"encoder_ffn_dim\":32,\"decoder_ffn_dim\":32,"
        "\"num_mel_bins\":80,\"max_source_positions\":1500,\"max_target_positions\":40,\"vocab_size\":700,"
        "\"decoder_start_token_id\":0,\"eos_token_id\":699,\"activation_function\":\"gelu\"}";
    char path[1200], err[512];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fputs(cfg, f);
    fclose(f);
    mn_whisper_config c;
    if (mn_whisper_config_parse(&c, cfg, strlen(cfg), err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    mn_graph *g;
    mn_graph_create(&g);
    mn_model *m = NULL;
    mn_whisper_options o = mn_whisper_default_options();
    o.kind = MN_WHISPER_TRAIN;
    o.seq_len = 4;
    if (mn_whisper_create(&m, g, &c, &o)) return fprintf(stderr, "%s\n", mn_model_error(m)), 1;
    mn_session *s = lu_session(g, MN_BACKEND_CPU, NULL, MN_MODE_INFERENCE, NULL);
    if (!s) return 1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_weights(path, s, m);
    mn_session_destroy(s);
    mn_model_destroy(m);
    mn_graph_destroy(g);
    return th_finish("test_whisper --write-folder");
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-folder")) return write_folder(argv[2]);
    check_config();
    tiny x;
    tiny_build(&x, MN_WHISPER_TRAIN, 2, 6);
    static const char *names[] = {"model.encoder.conv1.weight", "model.encoder.conv2.bias",
                                  "model.encoder.layers.0.self_attn.k_proj.weight",
                                  "model.encoder.layers.1.fc2.weight", "model.encoder.layer_norm.bias",
                                  "model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight",
                                  "model.decoder.layers.0.encoder_attn.v_proj.bias",
                                  "model.decoder.layers.1.self_attn.q_proj.weight",
                                  "model.decoder.layers.1.encoder_attn_layer_norm.weight"};
    mu_gradcheck("whisper", x.g, x.m, x.in, 3, names, 10, 3, 1e-5);
    mn_device *dev = th_require_vulkan();
    const char *outs[] = {"logits"};
    const size_t counts[] = {2 * 6 * 30};
    if (dev) mu_compare_backends("whisper", x.g, x.m, dev, x.in, 3, outs, counts, 1, 1e-5, 1e-4);
    /* weights for the decoding checks: the training graph's fresh ones, larger so the choices are clear */
    mn_session *s = lu_session(x.g, MN_BACKEND_CPU, NULL, MN_MODE_INFERENCE, NULL);
    char dir[] = "/tmp/mn-whisper-XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (s) write_weights(path, s, x.m);
    mn_session_destroy(s);
    check_decode(MN_BACKEND_CPU, NULL, path);
    if (dev) check_decode(MN_BACKEND_VULKAN, dev, path);
    unlink(path);
    rmdir(dir);
    mn_device_close(dev);
    tiny_free(&x);
    return th_finish("test_whisper");
}
