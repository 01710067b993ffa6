/* generate.c - text generation on a Llama KV-cache graph: token sampling
 * (greedy, temperature, top-k, top-p, seeded), streaming detokenization
 * that holds back incomplete UTF-8, and the prefill + decode loop with stop
 * tokens and timings.
 *
 * Does not: tokenize the prompt or print anything (the caller does), or
 * batch several sequences (mn_llama_greedy does, greedily).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meganeura_models.h"

/* ---- sampling ----------------------------------------------------------------- */

mn_sample_options mn_sample_default_options(void) {
    mn_sample_options o = {1.0f, 0, 1.0f, 0};
    return o;
}

void mn_sampler_init(mn_sampler *s, const mn_sample_options *o) {
    if (!s) return;
    memset(s, 0, sizeof *s);
    s->o = o ? *o : mn_sample_default_options();
    s->state = s->o.seed ^ 0x9e3779b97f4a7c15ull;
}

void mn_sampler_free(mn_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->prob);
    s->idx = NULL;
    s->prob = NULL;
    s->cap = 0;
}

/* splitmix64 */
static uint64_t next_u64(uint64_t *st) {
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 bits */
static double next_unit(uint64_t *st) { return (double)(next_u64(st) >> 11) * (1.0 / 9007199254740992.0); }

static const float *g_sort_logits; /* qsort has no user pointer; one thread per sampler */

/* highest first, lowest id on ties; NaN last */
static int by_logit(const void *a, const void *b) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    const float x = g_sort_logits[i], y = g_sort_logits[j];
    const bool nx = isnan(x), ny = isnan(y);
    if (nx != ny) return nx ? 1 : -1;
    if (!nx && x != y) return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

mn_status mn_sampler_sample(mn_sampler *s, int32_t *out, const float *logits, int64_t V) {
    if (!s || !out || !logits || V < 1 || V > INT32_MAX) return MN_E_INVALID;
    int64_t best = -1;
    for (int64_t i = 0; i < V; i++)
        if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
    if (best < 0) return MN_E_FORMAT;
    if (s->o.temperature <= 0 || s->o.top_k == 1 || !(s->o.top_p > 0) || V == 1) {
        *out = (int32_t)best;
        return MN_OK;
    }
    if (s->cap < V) {
        int32_t *idx = realloc(s->idx, (size_t)V * sizeof *idx);
        if (idx) s->idx = idx;
        float *prob = realloc(s->prob, (size_t)V * sizeof *prob);
        if (prob) s->prob = prob;
        if (!idx || !prob) return MN_E_NOMEM;
        s->cap = V;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
        if (!isnan(logits[i])) s->idx[n++] = (int32_t)i;
    g_sort_logits = logits;
    qsort(s->idx, (size_t)n, sizeof *s->idx, by_logit);
    if (s->o.top_k > 0 && s->o.top_k < n) n = s->o.top_k;
    const double mx = logits[s->idx[0]], inv_t = 1.0 / s->o.temperature;
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        const double p = exp(((double)logits[s->idx[i]] - mx) * inv_t); /* -inf logits give 0 */
        s->prob[i] = (float)p;
        total += p;
    }
    if (s->o.top_p < 1) {
        double cum = 0;
        int64_t keep = 0;
        while (keep < n) {
            cum += s->prob[keep++];
            if (cum >= s->o.top_p * total) break;
        }
        n = keep;
        total = cum;
    }
    const double u = next_unit(&s->state) * total;
    double cum = 0;
    for (int64_t i = 0; i < n; i++) {
        cum += s->prob[i];
        if (u < cum) {
            *out = s->idx[i];
            return MN_OK;
        }
    }
    *out = s->idx[0]; /* rounding at the very top end: the most likely */
    for (int64_t i = n - 1; i >= 0; i--)
        if (s->prob[i] > 0) {
            *out = s->idx[i];
            break;
        }
    return MN_OK;
}

/* ---- streaming detokenization ------------------------------------------------- */

void mn_detok_init(mn_detok *d, mn_tokenizer *tk, unsigned flags) {
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->tk = tk;
    d->flags = flags;
}

void mn_detok_free(mn_detok *d) {
    if (!d) return;
    free(d->ids);
    free(d->text);
    memset(d, 0, sizeof *d);
}

/* Decodes the window into d->text; *len its length. */
static mn_status window_text(mn_detok *d, size_t *len) {
    size_t need = 0;
    mn_status st = mn_tokenizer_decode(d->tk, NULL, 0, &need, d->ids, d->n, d->flags);
    if (st) return st;
    if (need + 1 > d->text_cap) {
        char *t = realloc(d->text, need + 1);
        if (!t) return MN_E_NOMEM;
        d->text = t;
        d->text_cap = need + 1;
    }
    if ((st = mn_tokenizer_decode(d->tk, d->text, d->text_cap, &need, d->ids, d->n, d->flags))) return st;
    *len = need;
    return MN_OK;
}

/* Length of text without its trailing run of U+FFFD (EF BF BD): what a later
 * token may still turn into a character. */
static size_t stable_prefix(const char *t, size_t len) {
    while (len >= 3 && (unsigned char)t[len - 3] == 0xEF && (unsigned char)t[len - 2] == 0xBF &&
           (unsigned char)t[len - 1] == 0xBD)
        len -= 3;
    return len;
}

mn_status mn_detok_push(mn_detok *d, int32_t id, const char **out, size_t *len) {
    if (!d || !d->tk || !out || !len) return MN_E_INVALID;
    *out = "";
    *len = 0;
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 16;
        int32_t *ids = realloc(d->ids, cap * sizeof *ids);
        if (!ids) return MN_E_NOMEM;
        d->ids = ids;
        d->cap = cap;
    }
    d->ids[d->n++] = id;
    size_t tl;
    mn_status st = window_text(d, &tl);
    if (st) return st;
    const size_t keep = stable_prefix(d->text, tl);
    if (keep > d->emitted) {
        *out = d->text + d->emitted;
        *len = keep - d->emitted;
    }
    if (keep == tl) { /* nothing pending: start a new window */
        d->n = 0;
        d->emitted = 0;
    } else if (keep > d->emitted) d->emitted = keep;
    return MN_OK;
}

mn_status mn_detok_finish(mn_detok *d, const char **out, size_t *len) {
    if (!d || !out || !len) return MN_E_INVALID;
    *out = "";
    *len = 0;
    if (!d->n) return MN_OK;
    size_t tl;
    mn_status st = window_text(d, &tl);
    if (st) return st;
    if (tl > d->emitted) {
        *out = d->text + d->emitted;
        *len = tl - d->emitted;
    }
    d->n = 0;
    d->emitted = 0;
    return MN_OK;
}

/* ---- the generation loop -------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

mn_status mn_llama_generate(mn_llama *m, mn_session *s, const int32_t *prompt, int64_t n_prompt,
                            const mn_generate_options *o, int32_t *out, mn_generate_stats *stats) {
    if (!m || !s || !prompt || !o) return MN_E_INVALID;
    const mn_llama_options *lo = mn_llama_get_options(m);
    const mn_llama_config *c = mn_llama_get_config(m);
    mn_generate_stats st0 = {n_prompt, 0, 0, 0, 0, false};
    if (stats) *stats = st0;
    if (lo->kind != MN_LLAMA_DECODE || lo->batch != 1 || n_prompt < 1 || o->max_new < 1 ||
        n_prompt > lo->max_seq || o->max_new - 1 > lo->max_seq - n_prompt)
        return MN_E_INVALID;
    const int64_t T = lo->seq_len, V = c->vocab_size;
    float *lg = malloc((size_t)V * sizeof *lg);
    if (!lg) return MN_E_NOMEM;
    mn_sampler sm;
    mn_sampler_init(&sm, &o->sample);
    mn_status st = MN_OK;
    const double t0 = now_s();
    double t1 = t0;
    for (int64_t p = 0; p < n_prompt && !st; p += T) {
        const int64_t k = n_prompt - p < T ? n_prompt - p : T;
        st = mn_llama_decode(m, s, prompt + p, k, p, p + k == n_prompt ? lg : NULL);
    }
    int64_t made = 0;
    for (int64_t i = 0; i < o->max_new && !st; i++) {
        int32_t id;
        if ((st = mn_sampler_sample(&sm, &id, lg, V))) break;
        if (i == 0) t1 = now_s();
        bool stop = false;
        for (int j = 0; j < o->n_stop && o->stop; j++) stop |= o->stop[j] == id;
        if (stop) {
            st0.stopped = true;
            break;
        }
        if (out) out[i] = id;
        made = i + 1;
        if (o->on_token && !o->on_token(id, o->user)) {
            st0.stopped = i + 1 < o->max_new;
            break;
        }
        if (i + 1 < o->max_new) {
            st = mn_llama_decode(m, s, &id, 1, n_prompt + i, lg);
            st0.decode_runs++;
        }
    }
    const double t2 = now_s();
    st0.new_tokens = made;
    st0.prefill_s = t1 - t0;
    st0.decode_s = made > 0 ? t2 - t1 : 0;
    if (stats) *stats = st0;
    mn_sampler_free(&sm);
    free(lg);
    return st;
}
