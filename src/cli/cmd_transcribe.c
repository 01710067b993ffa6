/* cmd_transcribe.c - `meganeura transcribe`: speech to text with a Hugging
 * Face Whisper folder.
 *
 *   meganeura transcribe --model DIR [--language CODE] [--max-tokens N]
 *                        [--backend cpu|vulkan] FILE.wav...
 *
 * DIR holds config.json, model.safetensors, tokenizer.json and optionally
 * generation_config.json (suppress_tokens, begin_suppress_tokens,
 * is_multilingual). Each WAV file is read (resampled to 16 kHz when it has
 * another rate), its first 30 s turned into the log-mel spectrogram of
 * WhisperFeatureExtractor, and decoded greedily after the prompt
 * <|startoftranscript|> [<|LANG|> <|transcribe|>] <|notimestamps|> (the
 * language and task tokens for multilingual models) until <|endoftext|>;
 * the text (special tokens skipped) goes to stdout, one line per file.
 *
 * Does not: beam search, timestamps, language detection, audio past 30 s
 * (a note says so), formats other than WAV.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cmd_transcribe.h"
#include "cli/messages.h"
#include "meganeura_models.h"

#define MAX_SUPPRESS 1024

static void help_transcribe(FILE *f) {
    fprintf(f,
            "Usage: meganeura transcribe --model DIR [options] FILE.wav...\n"
            "\n"
            "Transcribes speech with a Hugging Face Whisper folder (config.json,\n"
            "model.safetensors, tokenizer.json, optionally generation_config.json): the first\n"
            "30 s of each WAV file (any rate: resampled to 16 kHz), greedy decoding, the text\n"
            "on stdout.\n"
            "\n"
            "Options:\n"
            "  --model DIR           the Whisper folder (required)\n"
            "  --language CODE       the spoken language of a multilingual model (default en)\n"
            "  --max-tokens N        new tokens at most (default 224)\n"
            "  --backend cpu|vulkan  (default cpu)\n"
            "  -h, --help            show this help\n");
}

typedef struct gen_cfg {
    int32_t suppress[MAX_SUPPRESS], begin[MAX_SUPPRESS];
    int ns, nb;
    int multilingual; /* -1 unknown */
} gen_cfg;

static int read_ids(const cJSON *a, int32_t *dst, int *n, const char *key, const char *path) {
    if (!a || cJSON_IsNull(a)) return 0;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > MAX_SUPPRESS)
        return fail("%s: %s must be a list of at most %d token ids", show(path).s, key, MAX_SUPPRESS);
    const cJSON *v;
    cJSON_ArrayForEach(v, a) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1 << 24 || v->valuedouble != (int32_t)v->valuedouble)
            return fail("%s: %s holds something that is not a token id", show(path).s, key);
        dst[(*n)++] = (int32_t)v->valuedouble;
    }
    return 0;
}

static int read_generation_config(gen_cfg *g, const char *dir) {
    char path[4200], err[1024], *text = NULL;
    struct stat sb;
    memset(g, 0, sizeof *g);
    g->multilingual = -1;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (stat(path, &sb) != 0) return 0; /* optional */
    size_t len = 0;
    if (mn_read_file(&text, &len, path, (size_t)16 << 20, err, sizeof err)) return fail("%s", err);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail("%s: not a JSON object", show(path).s);
    }
    int rc = read_ids(cJSON_GetObjectItemCaseSensitive(root, "suppress_tokens"), g->suppress, &g->ns, "suppress_tokens", path);
    if (!rc) rc = read_ids(cJSON_GetObjectItemCaseSensitive(root, "begin_suppress_tokens"), g->begin, &g->nb,
                           "begin_suppress_tokens", path);
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(root, "is_multilingual");
    if (cJSON_IsBool(ml)) g->multilingual = cJSON_IsTrue(ml);
    cJSON_Delete(root);
    return rc;
}

static int token(mn_tokenizer *tk, const char *s, int32_t *id) { return mn_tokenizer_token_to_id(tk, id, s) == MN_OK; }

int cmd_transcribe(int argc, char **argv) {
    args a = {argc, argv, 1, "transcribe", 0};
    const char *dir = NULL, *lang = "en", *v;
    const char **files = calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    int64_t max_new = 224;
    mn_backend_kind be = MN_BACKEND_CPU;
    if (!files) return fail("out of memory");
    while (a.i < argc && !a.status) {
        if (is_help(argv[a.i])) {
            help_transcribe(stdout);
            free(files);
            return 0;
        } else if (flag_value(&a, "--model", &v)) dir = v;
        else if (flag_value(&a, "--language", &v)) lang = v;
        else if (flag_value(&a, "--max-tokens", &v)) {
            if (!a.status && !parse_int(v, 1, 4096, &max_new))
                a.status = usage_error("transcribe", "--max-tokens must be an integer in 1..4096, got '%s'", show(v).s);
        } else if (flag_value(&a, "--backend", &v)) {
            if (!a.status && !parse_backend(v, &be))
                a.status = usage_error("transcribe", "--backend must be cpu or vulkan, got '%s'", show(v).s);
        } else if (argv[a.i][0] == '-' && argv[a.i][1])
            a.status = usage_error("transcribe", "unknown option '%s'", show(argv[a.i]).s);
        else files[nfiles++] = argv[a.i++];
    }
    if (!a.status && !dir) a.status = usage_error("transcribe", "--model DIR is required");
    else if (!a.status && !nfiles) a.status = usage_error("transcribe", "no FILE.wav given");
    else if (!a.status && (strlen(lang) > 16 || !lang[0]))
        a.status = usage_error("transcribe", "--language '%s' is not a language code", show(lang).s);
    if (a.status) {
        free(files);
        return a.status;
    }
    char err[4096], path[4200];
    int rc = EXIT_ERROR;
    mn_whisper_config cfg;
    mn_tokenizer *tk = NULL;
    mn_hf_checkpoint *ck = NULL;
    mn_graph *g = NULL;
    mn_model *m = NULL;
    mn_session *s = NULL;
    float *feat = NULL;
    int32_t *out = NULL;
    char *text = NULL;
    gen_cfg gc;
    if (mn_whisper_config_load(&cfg, dir, err, sizeof err)) {
        fail("%s", err);
        goto done;
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (mn_tokenizer_load(&tk, path, err, sizeof err)) {
        fail("%s", err);
        goto done;
    }
    if (read_generation_config(&gc, dir)) goto done;
    if (mn_hf_checkpoint_open(&ck, dir, err, sizeof err)) {
        fail("%s", err);
        goto done;
    }
    /* the prompt */
    int32_t prompt[4], id;
    int np = 0;
    prompt[np++] = (int32_t)cfg.decoder_start_token_id;
    const bool multi = gc.multilingual >= 0 ? gc.multilingual : cfg.vocab_size >= 51865;
    if (multi) {
        char lt[32];
        snprintf(lt, sizeof lt, "<|%s|>", lang);
        if (!token(tk, lt, &id)) {
            fail("--language %s: the tokenizer has no token %s", show(lang).s, show(lt).s);
            goto done;
        }
        prompt[np++] = id;
        if (token(tk, "<|transcribe|>", &id)) prompt[np++] = id;
    }
    if (token(tk, "<|notimestamps|>", &id)) prompt[np++] = id;
    for (int i = 0; i < np; i++)
        if (prompt[i] >= cfg.vocab_size) {
            fail("%s: the prompt token %d is not below vocab_size %lld", show(dir).s, (int)prompt[i], (long long)cfg.vocab_size);
            goto done;
        }
    if (max_new > cfg.max_target_positions - np) max_new = cfg.max_target_positions - np;
    mn_whisper_options o = mn_whisper_default_options();
    o.kind = MN_WHISPER_DECODE;
    if (mn_graph_create(&g) || mn_whisper_create(&m, g, &cfg, &o)) {
        fail("%s", m ? mn_model_error(m) : "out of memory");
        goto done;
    }
    mn_session_options so = mn_session_default_options();
    so.backend = be;
    if (mn_session_create(&s, g, &so)) {
        fail("cannot create the %s session: %s", be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", mn_session_error(s));
        goto done;
    }
    if (mn_model_load(m, s, ck, NULL)) {
        fail("%s", mn_model_error(m));
        goto done;
    }
    const size_t nf = (size_t)(cfg.num_mel_bins * MN_WHISPER_FRAMES);
    if (cfg.max_source_positions * 2 != MN_WHISPER_FRAMES) {
        fail("%s: max_source_positions %lld: the log-mel front end gives %d frames (1500 positions)", show(dir).s,
             (long long)cfg.max_source_positions, MN_WHISPER_FRAMES);
        goto done;
    }
    feat = malloc(nf * sizeof *feat);
    out = malloc((size_t)max_new * sizeof *out);
    if (!feat || !out) {
        fail("out of memory");
        goto done;
    }
    rc = 0;
    for (int f = 0; f < nfiles; f++) {
        mn_audio au, r;
        if (mn_wav_load(&au, files[f], err, sizeof err)) {
            fail("%s", err);
            rc = EXIT_ERROR;
            continue;
        }
        if (au.sample_rate != MN_WHISPER_SAMPLE_RATE) {
            mn_status st = mn_audio_resample(&r, &au, MN_WHISPER_SAMPLE_RATE);
            mn_audio_free(&au);
            if (st) {
                fail("%s: cannot resample to 16 kHz", show(files[f]).s);
                rc = EXIT_ERROR;
                continue;
            }
            au = r;
        }
        if (au.samples > MN_WHISPER_SAMPLES)
            fprintf(stderr, "meganeura: note: %s is %.1f s long; only its first 30 s are transcribed\n",
                    show(files[f]).s, (double)au.samples / MN_WHISPER_SAMPLE_RATE);
        mn_status st = mn_whisper_log_mel(feat, au.pcm, au.samples, (int)cfg.num_mel_bins);
        mn_audio_free(&au);
        int64_t n = 0;
        mn_whisper_decode_options d = {prompt, np, max_new, gc.suppress, gc.ns, gc.begin, gc.nb};
        if (st || mn_whisper_greedy(m, s, feat, &d, out, &n)) {
            fail("%s: %s", show(files[f]).s, st ? "cannot compute the log-mel spectrogram" : mn_model_error(m));
            rc = EXIT_ERROR;
            continue;
        }
        size_t len = 0;
        mn_tokenizer_decode(tk, NULL, 0, &len, out, (size_t)n, MN_TOKENIZE_SKIP_SPECIAL);
        char *t2 = realloc(text, len + 1);
        if (!t2) {
            fail("out of memory");
            rc = EXIT_ERROR;
            break;
        }
        text = t2;
        mn_tokenizer_decode(tk, text, len + 1, &len, out, (size_t)n, MN_TOKENIZE_SKIP_SPECIAL);
        const char *p = text;
        while (*p == ' ') p++; /* Whisper's text starts with a space */
        printf("%s\n", show(p).s);
        fflush(stdout);
    }
done:
    free(feat), free(out), free(text), free(files);
    mn_session_destroy(s);
    mn_model_destroy(m);
    mn_graph_destroy(g);
    mn_hf_checkpoint_close(ck);
    mn_tokenizer_destroy(tk);
    return rc;
}
