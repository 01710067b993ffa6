/* cmd_lm.c - the language-model commands of the meganeura CLI:
 *
 *   meganeura generate --model DIR --prompt TEXT [sampling options]
 *   meganeura train lm (--model DIR | --config FILE --tokenizer FILE) --data FILE.txt [options]
 *
 * generate: tokenizer.json + config.json + model.safetensors(.index.json)
 * from DIR, one KV-cache graph holding the prefill branch and the one-token
 * decode branch; text streamed to stdout as it is decoded, timings to
 * stderr. train lm: the text tokenized, packed into windows of seq+1
 * tokens, the last 5% of windows held out for the evaluation loss, AdamW
 * with warm-up + cosine and gradient clipping, checkpoints (resumable), an
 * export to a Hugging Face folder, and with --log / --plot a JSON-lines log
 * and an SVG chart of the curves (metrics.c). Under mpirun each rank trains
 * on its shard of every global batch (--batch per rank), rank 0 alone
 * writes, and checkpoints keep the data position (data_cursor) for --resume
 * on any number of ranks (dist.h).
 *
 * Does not: chat templates, batched generation, data sets larger than
 * memory.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cmd_lm.h"
#include "cli/args.h"
#include "cli/dist.h"
#include "cli/messages.h"
#include "cli/metrics.h"
#include "cli/progress.h"
#include "io/text.h"
#include "meganeura_models.h"

#define MAX_STOP 16
#define MAX_TEXT_BYTES ((size_t)1 << 30)


static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static double now_s(void) { return progress_now(); }

/* ---- model folder ---------------------------------------------------------- */

/* Checks DIR for config.json, weights and (unless tok_given) tokenizer.json,
 * naming every missing file. */
static int check_model_dir(const char *dir, bool need_tokenizer, bool need_weights) {
    char p[4200];
    if (!is_dir(dir)) return fail("--model %s: not a folder", show(dir).s);
    int bad = 0;
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (!is_file(p)) bad = fail("%s: missing (the model's Hugging Face config)", show(p).s);
    if (need_weights) {
        char q[4200];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        snprintf(q, sizeof q, "%s/model.safetensors.index.json", dir);
        if (!is_file(p) && !is_file(q))
            bad = fail("%s: missing (nor model.safetensors.index.json): the weights", show(p).s);
    }
    if (need_tokenizer) {
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        if (!is_file(p)) bad = fail("%s: missing (give another with --tokenizer FILE)", show(p).s);
    }
    return bad;
}

static mn_session *new_session(const mn_graph *g, mn_backend_kind be, mn_mode mode, const mn_optimizer *opt,
                               uint64_t seed, const mn_dist *dist, mn_precision prec, float loss_scale) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.mode = mode;
    o.seed = seed;
    o.precision = prec;
    o.loss_scale.init = loss_scale;
    if (opt) o.optim = *opt;
    o.dist = dist;
    mn_session *s = NULL;
    if (mn_session_create(&s, g, &o) != MN_OK) {
        fail("cannot create the %s session: %s", be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", mn_session_error(s));
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

/* ---- generate ---------------------------------------------------------------- */

static void help_generate(FILE *f) {
    fprintf(f,
            "Usage: meganeura generate --model DIR --prompt TEXT [options]\n"
            "\n"
            "Continues TEXT with a Llama-family model from a Hugging Face folder (config.json,\n"
            "model.safetensors or model.safetensors.index.json + shards, tokenizer.json).\n"
            "The prompt and then the new text are written to stdout as they are decoded;\n"
            "prefill and decode speeds (tokens/s) go to stderr.\n"
            "\n"
            "Options:\n"
            "  --model DIR           the model folder (required)\n"
            "  --prompt TEXT         the text to continue (required)\n"
            "  --tokenizer FILE      tokenizer.json to use instead of DIR/tokenizer.json\n"
            "  --max-tokens N        new tokens at most (default 64)\n"
            "  --temperature T       0 = greedy (default 0.8)\n"
            "  --top-k K             sample among the K most likely tokens; 0 = all (default 40)\n"
            "  --top-p P             nucleus: the smallest set of probability >= P (default 0.95)\n"
            "  --seed S              sampling seed (default 0): same seed, same text\n"
            "  --stop TOKEN          an extra token that ends generation (repeatable); the\n"
            "                        config's eos_token_id always does\n"
            "  --chunk N             prompt tokens per prefill run (default 64)\n"
            "  --backend cpu|vulkan  (default cpu)\n"
            "  -h, --help            show this help\n");
}

typedef struct stream_ctx {
    mn_detok dt;
    bool failed;
} stream_ctx;

static bool on_token(int32_t id, void *user) {
    stream_ctx *c = user;
    const char *p;
    size_t n;
    if (mn_detok_push(&c->dt, id, &p, &n) != MN_OK) {
        c->failed = true;
        return false;
    }
    if (n) {
        fwrite(p, 1, n, stdout);
        fflush(stdout);
    }
    return true;
}

int cmd_generate(int argc, char **argv) {
    args a = {argc, argv, 1, "generate", 0};
    const char *dir = NULL, *prompt = NULL, *tok_path = NULL, *v;
    const char *stops[MAX_STOP];
    int nstops = 0;
    int64_t max_new = 64, chunk = 64;
    double temp = 0.8, top_p = 0.95;
    int64_t top_k = 40;
    uint64_t seed = 0;
    mn_backend_kind be = MN_BACKEND_CPU;
    while (a.i < argc && !a.status) {
        if (is_help(argv[a.i])) {
            help_generate(stdout);
            return 0;
        } else if (flag_value(&a, "--model", &v)) dir = v;
        else if (flag_value(&a, "--prompt", &v)) prompt = v;
        else if (flag_value(&a, "--tokenizer", &v)) tok_path = v;
        else if (flag_value(&a, "--max-tokens", &v)) {
            if (!a.status && !parse_int(v, 1, 1 << 20, &max_new))
                return usage_error("generate", "--max-tokens must be an integer in 1..%d, got '%s'", 1 << 20, show(v).s);
        } else if (flag_value(&a, "--chunk", &v)) {
            if (!a.status && !parse_int(v, 1, 4096, &chunk))
                return usage_error("generate", "--chunk must be an integer in 1..4096, got '%s'", show(v).s);
        } else if (flag_value(&a, "--temperature", &v)) {
            if (!a.status && !parse_real(v, 0, 100, &temp))
                return usage_error("generate", "--temperature must be a number in 0..100, got '%s'", show(v).s);
        } else if (flag_value(&a, "--top-k", &v)) {
            if (!a.status && !parse_int(v, 0, INT32_MAX, &top_k))
                return usage_error("generate", "--top-k must be an integer >= 0, got '%s'", show(v).s);
        } else if (flag_value(&a, "--top-p", &v)) {
            if (!a.status && !parse_real(v, 0, 1, &top_p))
                return usage_error("generate", "--top-p must be a number in 0..1, got '%s'", show(v).s);
        } else if (flag_value(&a, "--seed", &v)) {
            int64_t sd = 0;
            if (!a.status && !parse_int(v, 0, INT64_MAX, &sd))
                return usage_error("generate", "--seed must be a non-negative integer, got '%s'", show(v).s);
            seed = (uint64_t)sd;
        } else if (flag_value(&a, "--stop", &v)) {
            if (!a.status && nstops == MAX_STOP) return usage_error("generate", "at most %d --stop tokens", MAX_STOP);
            stops[nstops++] = v;
        } else if (flag_value(&a, "--backend", &v)) {
            if (!a.status && !parse_backend(v, &be))
                return usage_error("generate", "--backend must be cpu or vulkan, got '%s'", show(v).s);
        } else return usage_error("generate", "unknown option '%s'", show(argv[a.i]).s);
    }
    if (a.status) return a.status;
    if (!dir) return usage_error("generate", "--model DIR is required");
    if (!prompt) return usage_error("generate", "--prompt TEXT is required");
    if (check_model_dir(dir, !tok_path, true)) return EXIT_ERROR;
    char tpath[4200], err[2048];
    if (!tok_path) {
        snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);
        tok_path = tpath;
    }
    mn_llama_config cfg;
    if (mn_llama_config_load(&cfg, dir, err, sizeof err)) return fail("%s", err);
    mn_tokenizer *tk = NULL;
    if (mn_tokenizer_load(&tk, tok_path, err, sizeof err)) return fail("%s", err);
    int rc = EXIT_ERROR;
    mn_graph *g = NULL;
    mn_llama *m = NULL;
    mn_session *s = NULL;
    mn_hf_checkpoint *ck = NULL;
    int32_t *ids = NULL;
    size_t nids = 0;
    stream_ctx sc;
    mn_detok_init(&sc.dt, tk, MN_TOKENIZE_SKIP_SPECIAL);
    sc.failed = false;
    int32_t stop_ids[MAX_LLAMA_STOP_IDS];
    int nstop = 0;
    for (int i = 0; i < cfg.n_eos; i++) stop_ids[nstop++] = (int32_t)cfg.eos_token_id[i];
    for (int i = 0; i < nstops; i++) {
        int32_t id;
        size_t n = 0;
        if (mn_tokenizer_token_to_id(tk, &id, stops[i]) != MN_OK) {
            if (mn_tokenizer_encode(tk, &id, 1, &n, stops[i], strlen(stops[i]), 0) != MN_OK || n != 1) {
                fail("--stop '%s' is not one token of %s (it encodes to %zu tokens)", show(stops[i]).s,
                     show(tok_path).s, n);
                goto done;
            }
        }
        stop_ids[nstop++] = id;
    }
    if (mn_tokenizer_encode(tk, NULL, 0, &nids, prompt, strlen(prompt), MN_TOKENIZE_ADD_SPECIAL) != MN_OK) {
        fail("--prompt: %s", mn_tokenizer_error(tk));
        goto done;
    }
    if (nids == 0) {
        fail("--prompt gives no tokens; give some text");
        goto done;
    }
    if (!(ids = malloc(nids * sizeof *ids)) ||
        mn_tokenizer_encode(tk, ids, nids, &nids, prompt, strlen(prompt), MN_TOKENIZE_ADD_SPECIAL) != MN_OK) {
        fail("--prompt: %s", ids ? mn_tokenizer_error(tk) : "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nids; i++)
        if (ids[i] < 0 || ids[i] >= cfg.vocab_size) {
            fail("prompt token %d (%s) is outside the model's vocabulary of %" PRId64
                 " tokens: tokenizer and model do not match",
                 ids[i], show(mn_tokenizer_id_to_token(tk, ids[i])).s, cfg.vocab_size);
            goto done;
        }
    if ((int64_t)nids >= cfg.max_position_embeddings) {
        fail("the prompt has %zu tokens; the model takes at most %" PRId64, nids, cfg.max_position_embeddings);
        goto done;
    }
    if ((int64_t)nids + max_new - 1 > cfg.max_position_embeddings) {
        max_new = cfg.max_position_embeddings - (int64_t)nids + 1;
        fprintf(stderr, "note: --max-tokens lowered to %" PRId64 " (max_position_embeddings %" PRId64 ")\n", max_new,
                cfg.max_position_embeddings);
    }
    mn_llama_options lo = mn_llama_default_options();
    lo.kind = MN_LLAMA_DECODE;
    lo.batch = 1;
    lo.seq_len = (int64_t)nids < chunk ? (int64_t)nids : chunk;
    lo.max_seq = (int64_t)nids + max_new - 1;
    lo.decode_step = true;
    if (mn_graph_create(&g) != MN_OK) {
        fail("out of memory");
        goto done;
    }
    if (mn_llama_create(&m, g, &cfg, &lo) != MN_OK) {
        fail("%s", mn_llama_error(m));
        goto done;
    }
    if (!(s = new_session(g, be, MN_MODE_INFERENCE, NULL, 0, NULL, MN_PRECISION_STRICT, 0))) goto done;
    if (mn_hf_checkpoint_open(&ck, dir, err, sizeof err) != MN_OK) {
        fail("%s", err);
        goto done;
    }
    if (mn_llama_load(m, s, ck, NULL) != MN_OK) {
        fail("loading %s: %s", show(dir).s, mn_llama_error(m));
        goto done;
    }
    fputs(prompt, stdout);
    fflush(stdout);
    mn_generate_options go = {{(float)temp, top_k, (float)top_p, seed}, max_new, stop_ids, nstop, on_token, &sc};
    mn_generate_stats st;
    if (mn_llama_generate(m, s, ids, (int64_t)nids, &go, NULL, &st) != MN_OK) {
        fail("generation: %s", mn_llama_error(m));
        goto done;
    }
    if (sc.failed) {
        fail("decoding the output: %s", mn_tokenizer_error(tk));
        goto done;
    }
    const char *p;
    size_t n;
    if (mn_detok_finish(&sc.dt, &p, &n) == MN_OK && n) fwrite(p, 1, n, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    fprintf(stderr, "prefill: %" PRId64 " tokens in %.3f s (%.1f tokens/s); decode: %" PRId64
                    " tokens in %.3f s (%.1f tokens/s)%s\n",
            st.prompt_tokens, st.prefill_s, st.prefill_s > 0 ? (double)st.prompt_tokens / st.prefill_s : 0.0,
            st.decode_runs, st.decode_s, st.decode_s > 0 ? (double)st.decode_runs / st.decode_s : 0.0,
            st.stopped ? ", stopped at a stop token" : "");
    rc = 0;
done:
    mn_detok_free(&sc.dt);
    free(ids);
    mn_hf_checkpoint_close(ck);
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
    mn_tokenizer_destroy(tk);
    return rc;
}

/* ---- train lm ------------------------------------------------------------------ */

static void help_train_lm(FILE *f) {
    fprintf(f,
            "Usage: meganeura train lm (--model DIR | --config FILE --tokenizer FILE) --data FILE.txt [options]\n"
            "\n"
            "Trains a Llama-family causal language model on a UTF-8 text file: the text is\n"
            "tokenized, packed into windows of seq+1 tokens (inputs and next-token labels),\n"
            "the last 5%% of windows are held out for the evaluation loss, AdamW with linear\n"
            "warm-up and cosine decay (to lr/10) and gradient clipping trains the rest.\n"
            "--model DIR fine-tunes a Hugging Face folder (config.json, weights, tokenizer.json);\n"
            "--config FILE trains from scratch (random init; --tokenizer is then required).\n"
            "\n"
            "Options:\n"
            "  --data FILE           the training text (required)\n"
            "  --tokenizer FILE      tokenizer.json (default DIR/tokenizer.json)\n"
            "  --seq N               tokens per sequence (default 128)\n"
            "  --batch N             sequences per step (default 8); under mpirun per rank:\n"
            "                        N ranks train on global batches of N x batch sequences\n"
            "  --steps N | --epochs N  length of training (default: 1 epoch)\n"
            "  --lr X                peak learning rate (default 1e-3)\n"
            "  --weight-decay X      AdamW decoupled weight decay (default 0.01)\n"
            "  --warmup N            warm-up steps (default: 5%% of the steps)\n"
            "  --clip X              clip gradients to global L2 norm X; 0 = off (default 1)\n"
            "  --precision P         matrix products and attention: strict (f32, default), bf16\n"
            "                        or f16 (the fast contract: operands rounded, f32 sums)\n"
            "  --loss-scale X|off    dynamic loss scaling from X (a power of two >= 1): skips\n"
            "                        and halves on overflow, doubles after 2000 good steps\n"
            "                        (default 65536 with --precision f16, else off)\n"
            "  --eval-every N        evaluation loss every N steps (default: 10 times per run)\n"
            "  --checkpoint FILE     save the training state (safetensors) at each evaluation\n"
            "  --resume              continue from --checkpoint (same data and options; the\n"
            "                        step count and the data position are kept, also on\n"
            "                        another number of ranks)\n"
            "  --out DIR             export a Hugging Face folder at the end (config.json,\n"
            "                        model.safetensors in f32, tokenizer.json)\n"
            "  --seed S              initialisation and shuffling seed (default 0)\n"
            "  --backend cpu|vulkan  (default cpu)\n"
            "  --log FILE.jsonl      write a JSON-lines log: one object per step (loss, token\n"
            "                        accuracy, lr, tokens/s, time) and per evaluation (eval\n"
            "                        loss, perplexity); fields in docs/METRICS.md\n"
            "  --plot FILE.svg       draw the loss and accuracy curves as an SVG chart,\n"
            "                        rewritten at each evaluation\n"
            "  -h, --help            show this help\n");
}

/* i-th step's batch: windows of a per-epoch permutation (seeded by epoch). */
static void epoch_perm(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch) {
    uint64_t st = seed * 0x9e3779b97f4a7c15ull + (uint64_t)epoch * 0xbf58476d1ce4e5b9ull + 1;
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        st ^= st << 13;
        st ^= st >> 7;
        st ^= st << 17;
        const int64_t j = (int64_t)(st % (uint64_t)(i + 1));
        const int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static void fill_batch(int32_t *in, int32_t *tg, const int32_t *toks, const int64_t *win, int64_t B, int64_t T) {
    for (int64_t b = 0; b < B; b++) {
        const int32_t *w = toks + win[b] * T;
        memcpy(in + b * T, w, (size_t)T * sizeof *in);
        memcpy(tg + b * T, w + 1, (size_t)T * sizeof *tg);
    }
}

/* Mean loss over the held-out windows (batches of B; a last partial batch
 * is padded with targets -100, which the loss ignores). */
static int eval_loss(mn_session *s, const int32_t *toks, int64_t first, int64_t n, int64_t B, int64_t T,
                     int32_t *in, int32_t *tg, double *out) {
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t w = first; w < first + n; w += B) {
        int64_t win[4096];
        const int64_t k = first + n - w < B ? first + n - w : B;
        for (int64_t b = 0; b < B; b++) win[b] = w + (b < k ? b : 0);
        fill_batch(in, tg, toks, win, B, T);
        for (int64_t b = k; b < B; b++)
            for (int64_t t = 0; t < T; t++) tg[b * T + t] = -100;
        float loss;
        if (mn_session_set_input(s, "input_ids", in, (size_t)(B * T) * sizeof *in) ||
            mn_session_set_input(s, "targets", tg, (size_t)(B * T) * sizeof *tg) || mn_session_run(s) ||
            mn_session_loss(s, &loss))
            return fail("evaluation: %s", mn_session_error(s));
        sum += (double)loss * (double)k;
        cnt += k;
    }
    *out = cnt ? sum / (double)cnt : NAN;
    return 0;
}

/* Where the data stream is: the windows of epoch `epoch`'s permutation
 * from `offset` on. A step takes the next G windows (the global batch,
 * batch x ranks), rank r the r-th B of them; an epoch ends when fewer than
 * G windows are left (they are dropped). Saved in checkpoints as
 * "lm.data_epoch" / "lm.data_offset", so a resumed run, on any number of
 * ranks, goes on with the next window; a checkpoint without them (older)
 * gives the position of its step count at the present G. */
typedef struct data_cursor {
    int64_t epoch, offset;
} data_cursor;

static void cursor_next(data_cursor *c, int64_t G, int64_t ntrain) {
    c->offset += G;
    if (c->offset + G > ntrain) c->epoch++, c->offset = 0;
}

static int cursor_save_meta(mn_session *s, const data_cursor *c) {
    char e[32], o[32];
    snprintf(e, sizeof e, "%" PRId64, c->epoch);
    snprintf(o, sizeof o, "%" PRId64, c->offset);
    if (mn_session_set_meta(s, "lm.data_epoch", e) || mn_session_set_meta(s, "lm.data_offset", o))
        return fail("checkpoint metadata: %s", mn_session_error(s));
    return 0;
}

static int cursor_load(data_cursor *c, const char *ckpt, int64_t step, int64_t G, int64_t ntrain) {
    const int64_t per_epoch = ntrain / G;
    c->epoch = step / per_epoch;
    c->offset = step % per_epoch * G;
    char e[32], o[32], err[1024];
    if (mn_checkpoint_meta(ckpt, "lm.data_epoch", e, sizeof e, err, sizeof err) ||
        mn_checkpoint_meta(ckpt, "lm.data_offset", o, sizeof o, err, sizeof err))
        return 0; /* an older checkpoint */
    int64_t ep, off;
    if (!parse_int(e, 0, INT64_MAX / 2, &ep) || !parse_int(o, 0, ntrain, &off))
        return fail("--resume: %s: lm.data_epoch '%s' / lm.data_offset '%s' are not a position in %" PRId64
                    " windows", show(ckpt).s, show(e).s, show(o).s, ntrain);
    c->epoch = ep;
    c->offset = off;
    if (c->offset + G > ntrain) c->epoch++, c->offset = 0;
    return 0;
}

static int copy_file(const char *from, const char *to) {
    char *buf = NULL;
    size_t len = 0;
    char err[1024];
    if (mn_read_file(&buf, &len, from, MAX_TEXT_BYTES, err, sizeof err)) return fail("%s", err);
    FILE *f = fopen(to, "wb");
    bool good = f && fwrite(buf, 1, len, f) == len;
    if (f && fclose(f) != 0) good = false;
    free(buf);
    return good ? 0 : fail("cannot write %s: %s", show(to).s, strerror(errno));
}

int cmd_train_lm(int argc, char **argv) {
    args a = {argc, argv, 1, "train lm", 0};
    const char *dir = NULL, *cfg_path = NULL, *tok_path = NULL, *data = NULL, *ckpt = NULL, *out = NULL, *v;
    const char *log_path = NULL, *plot_path = NULL;
    int64_t T = 128, B = 8, steps = 0, epochs = 0, warmup = -1, eval_every = 0;
    double lr = 1e-3, clip = 1.0, wd = 0.01, loss_scale = -1; /* -1: by the precision */
    uint64_t seed = 0;
    bool resume = false;
    mn_precision prec = MN_PRECISION_STRICT;
    mn_backend_kind be = MN_BACKEND_CPU;
    while (a.i < argc && !a.status) {
        if (is_help(argv[a.i])) {
            help_train_lm(stdout);
            return 0;
        } else if (strcmp(argv[a.i], "--resume") == 0) {
            resume = true;
            a.i++;
        } else if (flag_value(&a, "--model", &v)) dir = v;
        else if (flag_value(&a, "--config", &v)) cfg_path = v;
        else if (flag_value(&a, "--tokenizer", &v)) tok_path = v;
        else if (flag_value(&a, "--data", &v)) data = v;
        else if (flag_value(&a, "--checkpoint", &v)) ckpt = v;
        else if (flag_value(&a, "--out", &v)) out = v;
        else if (flag_value(&a, "--log", &v)) {
            if (!a.status && !v[0]) return usage_error("train lm", "--log needs a file name");
            log_path = v;
        } else if (flag_value(&a, "--plot", &v)) {
            if (!a.status && !v[0]) return usage_error("train lm", "--plot needs a file name");
            plot_path = v;
        }
#define INTOPT(name, var, lo, hi)                                                                                      \
    else if (flag_value(&a, name, &v)) {                                                                                     \
        if (!a.status && !parse_int(v, lo, hi, &var))                                                                     \
            return usage_error("train lm", name " must be an integer in %lld..%lld, got '%s'", (long long)(lo),            \
                         (long long)(hi), show(v).s);                                                                  \
    }
        INTOPT("--seq", T, 1, 1 << 16)
        INTOPT("--batch", B, 1, 4096)
        INTOPT("--steps", steps, 1, INT32_MAX)
        INTOPT("--epochs", epochs, 1, 1000000)
        INTOPT("--warmup", warmup, 0, INT32_MAX)
        INTOPT("--eval-every", eval_every, 1, INT32_MAX)
#undef INTOPT
        else if (flag_value(&a, "--lr", &v)) {
            if (!a.status && (!parse_real(v, 0, 10, &lr) || lr <= 0))
                return usage_error("train lm", "--lr must be a number in (0, 10], got '%s'", show(v).s);
        } else if (flag_value(&a, "--clip", &v)) {
            if (!a.status && !parse_real(v, 0, 1e9, &clip))
                return usage_error("train lm", "--clip must be a number >= 0, got '%s'", show(v).s);
        } else if (flag_value(&a, "--precision", &v)) {
            if (!a.status && !strcmp(v, "strict")) prec = MN_PRECISION_STRICT;
            else if (!a.status && !strcmp(v, "bf16")) prec = MN_PRECISION_FAST_BF16;
            else if (!a.status && !strcmp(v, "f16")) prec = MN_PRECISION_FAST_F16;
            else if (!a.status) return usage_error("train lm", "--precision must be strict, bf16 or f16, got '%s'", show(v).s);
        } else if (flag_value(&a, "--loss-scale", &v)) {
            int e;
            if (!a.status && !strcmp(v, "off")) loss_scale = 0;
            else if (!a.status && (!parse_real(v, 1, 18446744073709551616.0, &loss_scale) || frexp(loss_scale, &e) != 0.5))
                return usage_error("train lm", "--loss-scale must be off or a power of two in 1..2^64, got '%s'",
                                   show(v).s);
        } else if (flag_value(&a, "--weight-decay", &v)) {
            if (!a.status && !parse_real(v, 0, 10, &wd))
                return usage_error("train lm", "--weight-decay must be a number in 0..10, got '%s'", show(v).s);
        } else if (flag_value(&a, "--seed", &v)) {
            int64_t sd = 0;
            if (!a.status && !parse_int(v, 0, INT64_MAX, &sd))
                return usage_error("train lm", "--seed must be a non-negative integer, got '%s'", show(v).s);
            seed = (uint64_t)sd;
        } else if (flag_value(&a, "--backend", &v)) {
            if (!a.status && !parse_backend(v, &be))
                return usage_error("train lm", "--backend must be cpu or vulkan, got '%s'", show(v).s);
        } else return usage_error("train lm", "unknown option '%s'", show(argv[a.i]).s);
    }
    if (a.status) return a.status;
    if (loss_scale < 0) loss_scale = prec == MN_PRECISION_FAST_F16 ? 65536 : 0;
    if (!dir == !cfg_path) return usage_error("train lm", "give exactly one of --model DIR and --config FILE");
    const cli_dist *dd = cli_dist_get();
    if (!dd) return EXIT_ERROR;
    const bool root = cli_dist_root();
    const int64_t ranks = cli_dist_ranks(dd);
    if (!data) return usage_error("train lm", "--data FILE.txt is required");
    if (cfg_path && !tok_path) return usage_error("train lm", "--config needs --tokenizer FILE (tokenizer.json)");
    if (steps && epochs) return usage_error("train lm", "give --steps or --epochs, not both");
    if (resume && !ckpt) return usage_error("train lm", "--resume needs --checkpoint FILE");
    if (dir && check_model_dir(dir, !tok_path, true)) return EXIT_ERROR;
    if (!is_file(data)) return fail("--data %s: no such file", show(data).s);
    char tpath[4200], err[2048];
    if (!tok_path) {
        snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);
        tok_path = tpath;
    }
    if (ckpt && !resume && mn_checkpoint_check_path(ckpt, err, sizeof err)) return fail("--checkpoint: %s", err);
    if (resume && !is_file(ckpt)) return fail("--resume: %s does not exist", show(ckpt).s);
    mn_llama_config cfg;
    if (mn_llama_config_load(&cfg, dir ? dir : cfg_path, err, sizeof err)) return fail("%s", err);
    if (T > cfg.max_position_embeddings)
        return fail("--seq %" PRId64 " is longer than the model's max_position_embeddings %" PRId64, T,
                    cfg.max_position_embeddings);
    mn_tokenizer *tk = NULL;
    if (mn_tokenizer_load(&tk, tok_path, err, sizeof err)) return fail("%s", err);
    if (mn_tokenizer_vocab_size(tk) > cfg.vocab_size) {
        fail("%s has %d tokens, more than the model's vocab_size %" PRId64, show(tok_path).s,
             mn_tokenizer_vocab_size(tk), cfg.vocab_size);
        mn_tokenizer_destroy(tk);
        return EXIT_ERROR;
    }
    int rc = EXIT_ERROR;
    char *text = NULL;
    size_t tlen = 0, ntok = 0;
    int32_t *toks = NULL, *in = NULL, *tg = NULL;
    int64_t *perm = NULL;
    float *logits = NULL;
    mn_graph *g = NULL;
    mn_llama *m = NULL;
    mn_session *s = NULL;
    mn_hf_checkpoint *ck = NULL;
    metrics mt;
    int64_t last_step = 0; /* for the log's end record */
    if (ckpt && ((log_path && strcmp(log_path, ckpt) == 0) || (plot_path && strcmp(plot_path, ckpt) == 0))) {
        memset(&mt, 0, sizeof mt);
        fail("--log and --plot must not name the checkpoint %s", show(ckpt).s);
        goto done;
    }
    /* data parallel: rank 0 alone logs and draws */
    if (metrics_open(&mt, root ? log_path : NULL, root ? plot_path : NULL, "tokens_per_s", "eval")) goto done;
    double t0 = now_s();
    if (mn_read_file(&text, &tlen, data, MAX_TEXT_BYTES, err, sizeof err)) {
        fail("%s", err);
        goto done;
    }
    if (mn_tokenizer_encode(tk, NULL, 0, &ntok, text, tlen, MN_TOKENIZE_SPECIAL_AS_TEXT) ||
        !(toks = malloc((ntok + 1) * sizeof *toks)) ||
        mn_tokenizer_encode(tk, toks, ntok, &ntok, text, tlen, MN_TOKENIZE_SPECIAL_AS_TEXT)) {
        fail("tokenizing %s: %s", show(data).s, toks ? mn_tokenizer_error(tk) : "out of memory or not UTF-8");
        goto done;
    }
    const int64_t nwin = ntok > 0 ? ((int64_t)ntok - 1) / T : 0;
    const int64_t neval = nwin >= 2 ? (nwin + 19) / 20 : 0, ntrain = nwin - neval;
    if (ntrain < 1) {
        fail("%s gives %zu tokens: fewer than one window of --seq %" PRId64 " + 1 to train on", show(data).s, ntok,
             T);
        goto done;
    }
    if (B * ranks > ntrain && ranks > 1) {
        fail("--batch %" PRId64 " x %" PRId64 " ranks is more than the %" PRId64 " training windows", B, ranks,
             ntrain);
        goto done;
    }
    if (B > ntrain) {
        fprintf(stderr, "note: --batch lowered to %" PRId64 " (the training windows)\n", ntrain);
        B = ntrain;
    }
    const int64_t G = B * ranks; /* the global batch */
    const int64_t per_epoch = ntrain / G;
    if (!steps) steps = (epochs ? epochs : 1) * per_epoch;
    if (warmup < 0) warmup = steps / 20;
    if (warmup >= steps) {
        fprintf(stderr, "note: --warmup lowered to %" PRId64 " (below --steps)\n", steps - 1);
        warmup = steps - 1;
    }
    if (!eval_every) eval_every = steps >= 10 ? steps / 10 : 1;
    if (root && ranks > 1)
        fprintf(stderr, "data parallel: %" PRId64 " ranks, batch %" PRId64 " per rank, global batch %" PRId64 "\n",
                ranks, B, G);
    if (root)
        fprintf(stderr, "data: %zu bytes -> %zu tokens (%.2f bytes/token), %" PRId64 " windows of %" PRId64
                        ": %" PRId64 " train, %" PRId64 " eval; %" PRId64 " steps of batch %" PRId64 " (%.2f epochs)\n",
                tlen, ntok, ntok ? (double)tlen / (double)ntok : 0.0, nwin, T + 1, ntrain, neval, steps, G,
                (double)steps / (double)per_epoch);
    free(text);
    text = NULL;

    mn_llama_options lo = mn_llama_default_options();
    lo.kind = MN_LLAMA_TRAIN;
    lo.batch = B;
    lo.seq_len = T;
    mn_optimizer opt = mn_optimizer_default(MN_OPTIM_ADAMW);
    opt.lr = (float)lr;
    opt.weight_decay = (float)wd;
    opt.clip_norm = (float)clip;
    opt.schedule = MN_LR_WARMUP_COSINE;
    opt.warmup_steps = warmup;
    opt.total_steps = steps;
    opt.min_lr = (float)(lr / 10);
    if (mn_graph_create(&g) != MN_OK) {
        fail("out of memory");
        goto done;
    }
    if (mn_llama_create(&m, g, &cfg, &lo) != MN_OK) {
        fail("%s", mn_llama_error(m));
        goto done;
    }
    if (root)
        fprintf(stderr, "model: %d layers, hidden %" PRId64 ", %" PRId64 " heads (%" PRId64 " kv), vocab %" PRId64
                    ", %.2fM parameters%s\n",
            (int)cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.vocab_size, (double)mn_llama_numel(m) / 1e6, dir ? "" : " (random init)");
    if (!(s = new_session(g, be, MN_MODE_TRAINING, &opt, seed, dd->dist, prec, (float)loss_scale))) goto done;
    if (dir) {
        if (mn_hf_checkpoint_open(&ck, dir, err, sizeof err) != MN_OK) {
            fail("%s", err);
            goto done;
        }
        if (mn_llama_load(m, s, ck, NULL) != MN_OK) {
            fail("loading %s: %s", show(dir).s, mn_llama_error(m));
            goto done;
        }
    }
    if (resume) {
        if (mn_session_load(s, ckpt) != MN_OK) {
            fail("--resume: %s", mn_session_error(s));
            goto done;
        }
        if (root) fprintf(stderr, "resumed from %s at step %" PRId64 "\n", show(ckpt).s, mn_session_step_count(s));
    }
    data_cursor cur = {0, 0};
    if (resume && cursor_load(&cur, ckpt, mn_session_step_count(s), G, ntrain)) goto done;
    in = malloc((size_t)(B * T) * sizeof *in);
    tg = malloc((size_t)(B * T) * sizeof *tg);
    perm = malloc((size_t)ntrain * sizeof *perm);
    logits = malloc((size_t)(B * T) * (size_t)cfg.vocab_size * sizeof *logits);
    if (!in || !tg || !perm || !logits) {
        fail("out of memory for the batches");
        goto done;
    }
    progress pg;
    const double t_train = now_s();
    const int64_t start = mn_session_step_count(s);
    metrics_title(&mt, "meganeura train lm: %d layers, hidden %" PRId64 ", %.2fM parameters, batch %" PRId64
                       " x %" PRId64 ", lr %g",
                  (int)cfg.num_hidden_layers, cfg.hidden_size, (double)mn_llama_numel(m) / 1e6, G, T, lr);
    metrics_start_clock(&mt);
    metrics_begin(&mt, "run");
    metrics_str(&mt, "command", "train lm");
    metrics_str(&mt, "model", dir ? dir : cfg_path);
    metrics_str(&mt, "backend", be == MN_BACKEND_VULKAN ? "vulkan" : "cpu");
    metrics_int(&mt, "parameters", mn_llama_numel(m));
    metrics_int(&mt, "steps", steps);
    metrics_int(&mt, "first_step", start + 1);
    metrics_int(&mt, "batch", G); /* global: ranks x --batch */
    metrics_int(&mt, "seq", T);
    metrics_num(&mt, "lr", lr);
    metrics_int(&mt, "warmup", warmup);
    metrics_num(&mt, "clip", clip);
    metrics_str(&mt, "precision", mn_precision_name(prec));
    metrics_num(&mt, "loss_scale", loss_scale);
    metrics_num(&mt, "weight_decay", wd);
    metrics_u64(&mt, "seed", seed);
    metrics_int(&mt, "tokens", (int64_t)ntok);
    metrics_int(&mt, "train_windows", ntrain);
    metrics_int(&mt, "eval_windows", neval);
    if (metrics_end(&mt)) goto done;
    double seg_t0 = now_s();
    int64_t seg_steps = 0;
    last_step = start;
    progress_begin(&pg, cli_dist_progress_stream(), 1, steps - start > 0 ? steps - start : 1);
    progress_epoch_begin(&pg, 1);
    int64_t cur_epoch = -1;
    double first_eval = NAN, last_eval = NAN;
    for (int64_t k = start; k < steps; k++) {
        if (cur.epoch != cur_epoch) {
            epoch_perm(perm, ntrain, seed, cur.epoch);
            cur_epoch = cur.epoch;
        }
        /* this rank's shard of the global batch */
        fill_batch(in, tg, toks, perm + cur.offset + cli_dist_shard_first(dd, B), B, T);
        const int64_t ep = cur.epoch; /* this step's epoch (0-based) */
        cursor_next(&cur, G, ntrain);
        cli_dist_fault(k - start);
        float loss = NAN;
        const double lr_used = (double)mn_session_lr(s);
        mn_status st = mn_session_set_input(s, "input_ids", in, (size_t)(B * T) * sizeof *in);
        if (!st) st = mn_session_set_input(s, "targets", tg, (size_t)(B * T) * sizeof *tg);
        if (!st) st = mn_session_step(s);
        if (st == MN_E_NONFINITE) {
            if (root) fprintf(stderr, "\nwarning: %s\n", mn_session_error(s));
        }
        else if (st) {
            fail("step %" PRId64 ": %s", k, mn_session_error(s));
            goto done;
        }
        mn_session_loss(s, &loss);
        int correct = 0;
        if (mn_session_output(s, "logits", logits, (size_t)(B * T * cfg.vocab_size) * sizeof *logits) == MN_OK)
            for (int64_t r = 0; r < B * T; r++) {
                const float *row = logits + r * cfg.vocab_size;
                int64_t best = 0;
                for (int64_t c = 1; c < cfg.vocab_size; c++)
                    if (row[c] > row[best]) best = c;
                correct += best == tg[r];
            }
        progress_step(&pg, loss, correct, (int)(B * T));
        last_step = k + 1;
        seg_steps++;
        const double seg_s = now_s() - seg_t0;
        if (metrics_train(&mt, k + 1, ep + 1, loss, (double)correct / (double)(B * T), lr_used,
                          seg_s > 0 ? (double)(seg_steps * G * T) / seg_s : NAN))
            goto done;
        if ((k + 1) % eval_every == 0 || k + 1 == steps) {
            double el = NAN;
            if (neval && eval_loss(s, toks, ntrain, neval, B, T, in, tg, &el)) goto done;
            if (metrics_eval(&mt, k + 1, ep + 1, el, NAN, true)) goto done;
            if (isnan(first_eval)) first_eval = el;
            last_eval = el;
            if (pg.tty && root) fputc('\n', stderr);
            if (root)
                fprintf(stderr, "step %" PRId64 "/%" PRId64 ": train loss %.4f, eval loss %.4f (perplexity %.2f), lr %.3g\n",
                        k + 1, steps, (double)loss, el, exp(el), (double)mn_session_lr(s));
            if (ckpt && cursor_save_meta(s, &cur)) goto done;
            if (ckpt && root && mn_session_save(s, ckpt) != MN_OK) {
                fail("saving %s: %s", show(ckpt).s, mn_session_error(s));
                goto done;
            }
            seg_t0 = now_s();
            seg_steps = 0;
        }
    }
    progress_epoch_end(&pg);
    cli_dist_report(s, now_s() - t_train);
    const int brc = cli_dist_barrier("after training");
    if (brc || !root) { /* rank 0 alone prints and exports */
        rc = brc;
        goto done;
    }
    printf("trained %" PRId64 " steps in %.1f s; eval loss %.4f -> %.4f\n", steps - start, now_s() - t0, first_eval,
           last_eval);
    int64_t overflows = 0;
    const float scale_now = mn_session_loss_scale(s, &overflows);
    if (scale_now > 0)
        printf("loss scale %g at the end; %" PRId64 " steps skipped because the scaled gradients overflowed\n",
               (double)scale_now, overflows);
    if (out) {
        if (mn_llama_export(m, s, out) != MN_OK) {
            fail("export to %s: %s", show(out).s, mn_llama_error(m));
            goto done;
        }
        char dst[4200];
        snprintf(dst, sizeof dst, "%s/tokenizer.json", out);
        if (copy_file(tok_path, dst)) goto done;
        printf("exported %s (config.json, model.safetensors, tokenizer.json)\n", show(out).s);
    }
    rc = 0;
done:
    if (mt.on && metrics_finish(&mt, last_step, rc == 0 ? "ok" : "failed") && rc == 0) rc = EXIT_ERROR;
    metrics_close(&mt);
    free(text);
    free(toks);
    free(in);
    free(tg);
    free(perm);
    free(logits);
    mn_hf_checkpoint_close(ck);
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
    mn_tokenizer_destroy(tk);
    return rc;
}
