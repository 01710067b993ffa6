/* test_generate.c - sampling, streaming detokenization, mn_llama_generate and
 * the Hugging Face export:
 * - sampler: temperature 0, top_k 1 and top_p -> 0 are greedy (lowest id on
 *   ties); NaN logits never drawn; top_k 2 draws only the two best; a seed
 *   repeats its draws, another seed differs; the frequencies follow softmax;
 * - detok: a character split over byte tokens is held back until complete,
 *   and the pieces add up to mn_tokenizer_decode of all ids;
 * - generate on tiny-tied-bf16 (one-token decode branch): temperature 0
 *   equals mn_llama_greedy, a seed repeats, a stop token ends it;
 * - export: a model's folder reloads with the same config and equal logits.
 *
 * Does not: test the CLI (cli_lm.sh does).
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "llama_util.h"

static void test_sampler(void) {
    const float lg[6] = {1.0f, 3.0f, NAN, 3.0f, -INFINITY, 2.5f};
    mn_sample_options o = mn_sample_default_options();
    mn_sampler s;
    int32_t id = -1;
    o.temperature = 0;
    mn_sampler_init(&s, &o);
    CHECK(mn_sampler_sample(&s, &id, lg, 6) == MN_OK && id == 1); /* ties: lowest id */
    mn_sampler_free(&s);
    o = mn_sample_default_options();
    o.top_k = 1;
    mn_sampler_init(&s, &o);
    for (int i = 0; i < 20; i++) CHECK(mn_sampler_sample(&s, &id, lg, 6) == MN_OK && id == 1);
    mn_sampler_free(&s);
    o = mn_sample_default_options();
    o.top_p = 1e-6f;
    o.temperature = 5;
    mn_sampler_init(&s, &o);
    for (int i = 0; i < 20; i++) CHECK(mn_sampler_sample(&s, &id, lg, 6) == MN_OK && id == 1);
    mn_sampler_free(&s);
    o.top_p = 0; /* 0 is greedy too */
    mn_sampler_init(&s, &o);
    CHECK(mn_sampler_sample(&s, &id, lg, 6) == MN_OK && id == 1);
    mn_sampler_free(&s);
    /* top_k 2: only ids 1 and 3 (the two 3.0s) */
    o = mn_sample_default_options();
    o.top_k = 2;
    o.temperature = 10;
    mn_sampler_init(&s, &o);
    int seen[6] = {0};
    for (int i = 0; i < 400; i++) {
        CHECK(mn_sampler_sample(&s, &id, lg, 6) == MN_OK);
        if (id >= 0 && id < 6) seen[id]++;
    }
    CHECK_MSG(seen[1] + seen[3] == 400 && seen[1] > 100 && seen[3] > 100, "top_k 2: %d %d %d %d %d %d", seen[0],
              seen[1], seen[2], seen[3], seen[4], seen[5]);
    mn_sampler_free(&s);
    /* no top-k/top-p: frequencies follow softmax; NaN and -inf never drawn */
    o = mn_sample_default_options();
    o.seed = 42;
    mn_sampler_init(&s, &o);
    memset(seen, 0, sizeof seen);
    const int N = 20000;
    for (int i = 0; i < N; i++) {
        mn_sampler_sample(&s, &id, lg, 6);
        seen[id]++;
    }
    const double z = exp(1.0) + 2 * exp(3.0) + exp(2.5);
    CHECK(seen[2] == 0 && seen[4] == 0);
    CHECK_NEAR((double)seen[0] / N, exp(1.0) / z, 0.01);
    CHECK_NEAR((double)seen[5] / N, exp(2.5) / z, 0.015);
    mn_sampler_free(&s);
    /* top_p 0.5: the nucleus is {1, 3} (p(1) = 0.37 < 0.5 <= p(1) + p(3)) */
    o.top_p = 0.5f;
    mn_sampler_init(&s, &o);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 400; i++) {
        mn_sampler_sample(&s, &id, lg, 6);
        seen[id]++;
    }
    CHECK_MSG(seen[1] + seen[3] == 400, "top_p 0.5 drew outside the nucleus");
    mn_sampler_free(&s);
    /* seeds */
    int32_t a[64], b[64], c[64];
    for (int r = 0; r < 3; r++) {
        o = mn_sample_default_options();
        o.seed = r == 2 ? 8 : 7;
        mn_sampler_init(&s, &o);
        for (int i = 0; i < 64; i++) mn_sampler_sample(&s, r == 0 ? &a[i] : r == 1 ? &b[i] : &c[i], lg, 6);
        mn_sampler_free(&s);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    const float nan3[3] = {NAN, NAN, NAN};
    mn_sampler_init(&s, NULL);
    CHECK(mn_sampler_sample(&s, &id, nan3, 3) == MN_E_FORMAT);
    CHECK(mn_sampler_sample(&s, &id, lg, 0) == MN_E_INVALID);
    mn_sampler_free(&s);
}

static void test_detok(const char *fixtures) {
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/tokenizer/js-smol.json", fixtures);
    mn_tokenizer *tk = NULL;
    CHECK_OK(mn_tokenizer_load(&tk, path, err, sizeof err), err);
    if (!tk) return;
    const char *text = "caf\xc3\xa9 \xf0\x9f\x98\x80 ok \xe6\x97\xa5\xe6\x9c\xac";
    int32_t ids[64];
    size_t n = 0;
    CHECK_OK(mn_tokenizer_encode(tk, ids, 64, &n, text, strlen(text), 0), mn_tokenizer_error(tk));
    mn_detok d;
    mn_detok_init(&d, tk, 0);
    char got[256] = {0};
    size_t glen = 0;
    int held = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t len;
        CHECK_OK(mn_detok_push(&d, ids[i], &p, &len), "push");
        /* nothing returned ends inside a character */
        if (len) {
            const unsigned char last = (unsigned char)p[len - 1];
            CHECK_MSG(last < 0x80 || (last & 0xC0) == 0x80, "a piece ends with a lead byte 0x%02x", last);
        }
        if (d.n > 0) held++; /* bytes pending: a character not complete yet */
        if (glen + len < sizeof got) memcpy(got + glen, p, len), glen += len;
    }
    const char *p;
    size_t len;
    CHECK_OK(mn_detok_finish(&d, &p, &len), "finish");
    CHECK(len == 0);
    CHECK_MSG(glen == strlen(text) && memcmp(got, text, glen) == 0, "streamed '%.*s' != '%s'", (int)glen, got, text);
    CHECK_MSG(held > 0, "no token was held back (the fixture should split the emoji into bytes)");
    mn_detok_free(&d);
    /* an incomplete sequence at the end is flushed as U+FFFD */
    mn_detok_init(&d, tk, 0);
    size_t k = 0;
    CHECK_OK(mn_tokenizer_encode(tk, ids, 64, &k, "\xf0\x9f\x98\x80", 4, 0), mn_tokenizer_error(tk));
    if (k > 1) {
        CHECK_OK(mn_detok_push(&d, ids[0], &p, &len), "push");
        CHECK(len == 0);
        CHECK_OK(mn_detok_finish(&d, &p, &len), "finish");
        CHECK(len == 3 && memcmp(p, "\xef\xbf\xbd", 3) == 0);
    }
    mn_detok_free(&d);
    mn_tokenizer_destroy(tk);
}

static mn_llama *decode_model(const char *dir, mn_graph **g, mn_session **s, int64_t T, int64_t max_seq) {
    char err[1024];
    mn_llama_config c;
    mn_llama *m = NULL;
    if (mn_llama_config_load(&c, dir, err, sizeof err)) {
        CHECK_MSG(0, "%s", err);
        return NULL;
    }
    mn_graph_create(g);
    mn_llama_options o = mn_llama_default_options();
    o.kind = MN_LLAMA_DECODE;
    o.seq_len = T;
    o.max_seq = max_seq;
    o.decode_step = true;
    CHECK_OK(mn_llama_create(&m, *g, &c, &o), mn_llama_error(m));
    *s = lu_session(*g, MN_BACKEND_CPU, NULL, MN_MODE_INFERENCE, NULL);
    mn_hf_checkpoint *ck = NULL;
    CHECK_OK(mn_hf_checkpoint_open(&ck, dir, err, sizeof err), err);
    if (*s && ck) CHECK_OK(mn_llama_load(m, *s, ck, NULL), mn_llama_error(m));
    mn_hf_checkpoint_close(ck);
    return m;
}

static void test_generate(const char *fixtures) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/llama/tiny-tied-bf16", fixtures);
    const int32_t prompt[5] = {3, 17, 200, 41, 9};
    enum { NEW = 12 };
    mn_graph *g = NULL;
    mn_session *s = NULL;
    mn_llama *m = decode_model(dir, &g, &s, 2, 5 + NEW);
    int32_t greedy[NEW], a[NEW], b[NEW], c[NEW];
    if (!m || !s) goto out;
    CHECK_OK(mn_llama_greedy(m, s, greedy, prompt, 5, NEW), mn_llama_error(m));
    mn_generate_options go = {mn_sample_default_options(), NEW, NULL, 0, NULL, NULL};
    mn_generate_stats st;
    go.sample.temperature = 0;
    CHECK_OK(mn_llama_generate(m, s, prompt, 5, &go, a, &st), mn_llama_error(m));
    CHECK(memcmp(a, greedy, sizeof a) == 0);
    CHECK(st.new_tokens == NEW && st.decode_runs == NEW - 1 && !st.stopped && st.prompt_tokens == 5);
    go.sample = mn_sample_default_options();
    go.sample.temperature = 1.5f;
    go.sample.seed = 3;
    CHECK_OK(mn_llama_generate(m, s, prompt, 5, &go, b, &st), mn_llama_error(m));
    CHECK_OK(mn_llama_generate(m, s, prompt, 5, &go, c, &st), mn_llama_error(m));
    CHECK_MSG(memcmp(b, c, sizeof b) == 0, "the same seed gave different tokens");
    CHECK_MSG(memcmp(b, greedy, sizeof b) != 0, "temperature 1.5 gave the greedy tokens");
    /* a stop token: the greedy run stops before its 4th token */
    go.sample.temperature = 0;
    go.stop = &greedy[3];
    go.n_stop = 1;
    int first = 3;
    for (int i = 2; i >= 0; i--)
        if (greedy[i] == greedy[3]) first = i;
    CHECK_OK(mn_llama_generate(m, s, prompt, 5, &go, c, &st), mn_llama_error(m));
    CHECK(st.stopped && st.new_tokens == first && memcmp(c, greedy, (size_t)first * sizeof *c) == 0);
    go.max_new = 5 + NEW; /* too long for the cache */
    CHECK(mn_llama_generate(m, s, prompt, 5, &go, NULL, &st) == MN_E_INVALID);
out:
    mn_session_destroy(s);
    mn_llama_destroy(m);
    mn_graph_destroy(g);
}

static void test_export(const char *fixtures) {
    char dir[1200], out[] = "/tmp/mn_test_export_XXXXXX", err[1024];
    snprintf(dir, sizeof dir, "%s/lm/tiny-smol.json", fixtures);
    if (!mkdtemp(out)) {
        CHECK_MSG(0, "mkdtemp failed");
        return;
    }
    mn_llama_config c, c2;
    CHECK_OK(mn_llama_config_load(&c, dir, err, sizeof err), err);
    mn_graph *g1 = NULL, *g2 = NULL;
    mn_llama *m1 = NULL, *m2 = NULL;
    mn_session *s1 = NULL, *s2 = NULL;
    mn_hf_checkpoint *ck = NULL;
    mn_llama_options o = mn_llama_default_options();
    o.kind = MN_LLAMA_FORWARD;
    o.seq_len = 8;
    mn_graph_create(&g1);
    CHECK_OK(mn_llama_create(&m1, g1, &c, &o), mn_llama_error(m1));
    s1 = lu_session(g1, MN_BACKEND_CPU, NULL, MN_MODE_INFERENCE, NULL);
    if (!s1) goto out;
    CHECK_OK(mn_llama_export(m1, s1, out), mn_llama_error(m1));
    CHECK_OK(mn_llama_config_load(&c2, out, err, sizeof err), err);
    CHECK(c2.vocab_size == c.vocab_size && c2.hidden_size == c.hidden_size && c2.head_dim == c.head_dim &&
          c2.tie_word_embeddings && c2.rms_norm_eps == c.rms_norm_eps && c2.rope_theta == c.rope_theta &&
          c2.n_eos == 1 && c2.eos_token_id[0] == 0 && strcmp(c2.dtype, "float32") == 0);
    CHECK_OK(mn_hf_checkpoint_open(&ck, out, err, sizeof err), err);
    mn_safetensors_tensor t;
    if (ck) CHECK(mn_hf_checkpoint_find(ck, "lm_head.weight", &t) == MN_E_NOT_FOUND); /* tied: no head */
    if (ck) CHECK(mn_hf_checkpoint_count(ck) == mn_llama_param_count(m1));
    mn_graph_create(&g2);
    CHECK_OK(mn_llama_create(&m2, g2, &c2, &o), mn_llama_error(m2));
    mn_session_options so = mn_session_default_options();
    so.seed = 99; /* different fresh weights, replaced by the load */
    mn_session_create(&s2, g2, &so);
    if (!ck || !s2) goto out;
    CHECK_OK(mn_llama_load(m2, s2, ck, NULL), mn_llama_error(m2));
    int32_t ids[8] = {5, 100, 7, 300, 685, 0, 42, 9};
    const size_t nl = 8 * (size_t)c.vocab_size;
    float *l1 = malloc(nl * sizeof *l1), *l2 = malloc(nl * sizeof *l2);
    mn_session_set_input(s1, "input_ids", ids, sizeof ids);
    mn_session_set_input(s2, "input_ids", ids, sizeof ids);
    CHECK_OK(mn_session_run(s1), mn_session_error(s1));
    CHECK_OK(mn_session_run(s2), mn_session_error(s2));
    mn_session_output(s1, "logits", l1, nl * sizeof *l1);
    mn_session_output(s2, "logits", l2, nl * sizeof *l2);
    CHECK_MSG(memcmp(l1, l2, nl * sizeof *l1) == 0, "logits differ after export and reload");
    free(l1);
    free(l2);
out:
    mn_hf_checkpoint_close(ck);
    mn_session_destroy(s1);
    mn_session_destroy(s2);
    mn_llama_destroy(m1);
    mn_llama_destroy(m2);
    mn_graph_destroy(g1);
    mn_graph_destroy(g2);
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", out);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    unlink(p);
    rmdir(out);
}

int main(void) {
    char fixtures[1024];
    lu_fixtures(fixtures, sizeof fixtures);
    test_sampler();
    test_detok(fixtures);
    test_generate(fixtures);
    test_export(fixtures);
    return th_finish("test_generate");
}
