/* llama.c - the Llama causal language model built through the public API:
 * graph construction (training, forward, KV-cache decoding), loading Hugging
 * Face weights by name, and the decoding helpers (positions, one decoding
 * run, greedy decoding).
 *
 * Layout (Hugging Face's LlamaForCausalLM; N = B*T rows, H hidden, Dh head
 * dim, Hq/Hkv query/KV heads, I intermediate, V vocab):
 *   h = embed_tokens[input_ids]                          // (N,H)
 *   per layer l:
 *     a = rms_norm(h) * input_layernorm                  // (N,H)
 *     q = a Wq^T, k = a Wk^T, v = a Wv^T                 // (N,Hq*Dh), (N,Hkv*Dh)
 *     -> (B,heads,T,Dh); RoPE on q, k (rotate half)
 *     [DECODE: k, v appended to the caches at pos]
 *     o = attention(q, k, v; causal, grouped)            // (B,Hq,T,Dh)
 *     h = h + (o -> (N,Hq*Dh)) Wo^T
 *     m = rms_norm(h) * post_attention_layernorm
 *     h = h + (silu(m Wg^T) * (m Wu^T)) Wd^T             // (N,I) inside
 *   logits = (rms_norm(h) * norm) W^T, W = lm_head or embed_tokens (tied)  // (N,V)
 * RoPE is the mn_rope op when it computes what transformers computes (no
 * rope scaling), otherwise x cos + rotate_half(x) sin with cos/sin tables
 * computed on the host in f32 like transformers (constants for TRAIN and
 * FORWARD, inputs written per run for DECODE).
 *
 * Does not: include anything below meganeura.h, tokenize, sample, or save.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/hf_util.h"

struct mn_llama {
    mn_llama_config c;
    mn_llama_options o;
    mn_llama_tensors t;
    bool dead;
    bool tables;    /* RoPE through cos/sin tables */
    float *inv_freq; /* head_dim/2 */
    mn_hf_param *params;
    int nparams, capparams;
    mn_tensor *caches; /* DECODE: per layer k, v state tensors */
    int32_t *rows_buf; /* DECODE: B, the last_rows input */
    int32_t *tok_buf;  /* DECODE: B*T */
    hf_str err;
};

static void set_err(mn_llama *m, const char *fmt, ...) HF_PRINTF(2, 3);
static void set_err(mn_llama *m, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    hf_str_free(&m->err);
    hf_str_add(&m->err, "%s", buf);
}

void hf_llama_set_error(mn_llama *m, const char *msg) {
    if (m) set_err(m, "%s", msg);
}

mn_llama_options mn_llama_default_options(void) {
    mn_llama_options o;
    memset(&o, 0, sizeof o);
    o.kind = MN_LLAMA_TRAIN;
    o.batch = 1;
    o.seq_len = 128;
    return o;
}

/* ---- building --------------------------------------------------------------- */

typedef struct builder {
    mn_llama *m;
    mn_graph *g;
    int64_t B, T, N;
    const char *what; /* the part being built, for messages */
    int layer;        /* -1 outside the layers */
    bool reuse;       /* the decode-step branch: parameters already exist, taken in creation order */
    int next;         /* reuse: the next parameter */
    mn_tensor cos, sin; /* RoPE tables of this branch (tables) */
} builder;

/* Wraps a graph call: on failure, the message names the part and layer. */
static mn_status ok(builder *b, mn_status st) {
    if (st && !b->m->err.n) {
        if (b->layer >= 0)
            set_err(b->m, "llama: building %s of layer %d: %s", b->what, b->layer, mn_graph_error(b->g));
        else set_err(b->m, "llama: building %s: %s", b->what, mn_graph_error(b->g));
    }
    return st;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        mn_status st_ = (x);                                                                                           \
        if (st_) return st_;                                                                                           \
    } while (0)

static mn_status add_param(builder *b, mn_tensor *out, const char *name, int rank, const int64_t *shape,
                           mn_init init) {
    mn_llama *m = b->m;
    if (b->reuse) { /* same names, same order as the first branch */
        if (b->next >= m->nparams || strcmp(m->params[b->next].name, name) != 0) {
            set_err(m, "llama: the decode-step branch asks for parameter %s out of order", name);
            return MN_E_STATE;
        }
        (void)rank, (void)shape, (void)init;
        *out = m->params[b->next++].tensor;
        return MN_OK;
    }
    if (m->nparams == m->capparams) {
        int cap = m->capparams ? 2 * m->capparams : 32;
        mn_hf_param *p = realloc(m->params, (size_t)cap * sizeof *p);
        if (!p) {
            set_err(m, "llama: out of memory");
            return MN_E_NOMEM;
        }
        m->params = p;
        m->capparams = cap;
    }
    char *nm = strdup(name);
    if (!nm) {
        set_err(m, "llama: out of memory");
        return MN_E_NOMEM;
    }
    mn_status st = ok(b, mn_graph_param(b->g, out, name, rank, shape, init));
    if (!st && m->o.freeze && m->o.freeze(name, m->o.freeze_user)) st = ok(b, mn_graph_param_freeze(b->g, *out, true));
    if (st) {
        free(nm);
        return st;
    }
    mn_hf_param *p = &m->params[m->nparams++];
    memset(p, 0, sizeof *p);
    p->name = nm;
    p->rank = rank;
    for (int d = 0; d < rank; d++) p->shape[d] = shape[d];
    p->tensor = *out;
    return MN_OK;
}

#define S(...) (const int64_t[]){__VA_ARGS__}

/* x (N,in) W^T with W (out,in): Hugging Face's nn.Linear without bias. */
static mn_status linear(builder *b, mn_tensor *out, mn_tensor x, const char *name, int64_t out_f, int64_t in_f) {
    mn_tensor w;
    mn_init init = {MN_INIT_NORMAL, 0, (float)b->m->c.initializer_range};
    TRY(add_param(b, &w, name, 2, S(out_f, in_f), init));
    return ok(b, mn_matmul_ex(b->g, out, x, w, false, true));
}

static mn_status norm(builder *b, mn_tensor *out, mn_tensor x, const char *name) {
    mn_tensor w;
    mn_init one = {MN_INIT_CONSTANT, 1, 0};
    TRY(add_param(b, &w, name, 1, S(b->m->c.hidden_size), one));
    return ok(b, mn_rms_norm(b->g, out, x, w, (float)b->m->c.rms_norm_eps));
}

/* (N, heads*Dh) -> (B, heads, T, Dh) */
static mn_status to_heads(builder *b, mn_tensor *out, mn_tensor x, int64_t heads) {
    mn_tensor r;
    TRY(ok(b, mn_reshape(b->g, &r, x, 4, S(b->B, b->T, heads, b->m->c.head_dim))));
    return ok(b, mn_permute(b->g, out, r, (const int[]){0, 2, 1, 3}));
}

/* x cos + rotate_half(x) sin; rotate_half(x) = concat(-x2, x1). */
static mn_status rope(builder *b, mn_tensor *out, mn_tensor x) {
    mn_llama *m = b->m;
    if (!m->tables)
        return ok(b, mn_rope(b->g, out, x, m->t.pos, (float)m->c.rope_theta, 0));
    mn_tensor halves[2], neg, rot, a, c;
    TRY(ok(b, mn_split(b->g, halves, x, -1, 2, NULL)));
    TRY(ok(b, mn_neg(b->g, &neg, halves[1])));
    TRY(ok(b, mn_concat(b->g, &rot, (const mn_tensor[]){neg, halves[0]}, 2, -1)));
    TRY(ok(b, mn_mul(b->g, &a, x, b->cos)));
    TRY(ok(b, mn_mul(b->g, &c, rot, b->sin)));
    return ok(b, mn_add(b->g, out, a, c));
}

/* cos/sin of positions pos..pos+T-1: rows of Dh values, the half repeated
 * (transformers: emb = cat(freqs, freqs)); the angle is one f32 product. */
static void rope_rows(const mn_llama *m, float *cosv, float *sinv, int64_t pos, int64_t T) {
    const int64_t Dh = m->c.head_dim, half = Dh / 2;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            const float a = m->inv_freq[i] * (float)(pos + t);
            const float cv = (float)cos((double)a), sv = (float)sin((double)a);
            cosv[t * Dh + i] = cosv[t * Dh + i + half] = cv;
            sinv[t * Dh + i] = sinv[t * Dh + i + half] = sv;
        }
}

static mn_status layer(builder *b, mn_tensor *h, int l) {
    mn_llama *m = b->m;
    const mn_llama_config *c = &m->c;
    const int64_t H = c->hidden_size, Dh = c->head_dim, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    char nm[128];
    mn_tensor a, q, k, v, o, op, flat, proj, mm, gate, up, act, down;
    b->layer = l;
#define NAME(s) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, s), nm)
    b->what = "the attention";
    TRY(norm(b, &a, *h, NAME("input_layernorm.weight")));
    TRY(linear(b, &q, a, NAME("self_attn.q_proj.weight"), Hq * Dh, H));
    TRY(linear(b, &k, a, NAME("self_attn.k_proj.weight"), Hkv * Dh, H));
    TRY(linear(b, &v, a, NAME("self_attn.v_proj.weight"), Hkv * Dh, H));
    TRY(to_heads(b, &q, q, Hq));
    TRY(to_heads(b, &k, k, Hkv));
    TRY(to_heads(b, &v, v, Hkv));
    b->what = "RoPE";
    TRY(rope(b, &q, q));
    TRY(rope(b, &k, k));
    if (m->o.kind == MN_LLAMA_DECODE) {
        b->what = "the KV cache";
        mn_tensor *ck = &m->caches[2 * l], *cv = &m->caches[2 * l + 1];
        if (!b->reuse) {
            snprintf(nm, sizeof nm, "cache.layers.%d.k", l);
            TRY(ok(b, mn_graph_state(b->g, ck, nm, 4, S(b->B, Hkv, m->o.max_seq, Dh))));
            snprintf(nm, sizeof nm, "cache.layers.%d.v", l);
            TRY(ok(b, mn_graph_state(b->g, cv, nm, 4, S(b->B, Hkv, m->o.max_seq, Dh))));
        }
        TRY(ok(b, mn_kv_append(b->g, &k, *ck, k, m->t.pos)));
        TRY(ok(b, mn_kv_append(b->g, &v, *cv, v, m->t.pos)));
    }
    b->what = "the attention";
    mn_attention_params causal = {true, 0, 0};
    TRY(ok(b, mn_attention(b->g, &o, q, k, v, m->t.pos, &causal)));
    TRY(ok(b, mn_permute(b->g, &op, o, (const int[]){0, 2, 1, 3})));
    TRY(ok(b, mn_reshape(b->g, &flat, op, 2, S(b->N, Hq * Dh))));
    TRY(linear(b, &proj, flat, NAME("self_attn.o_proj.weight"), H, Hq * Dh));
    TRY(ok(b, mn_add(b->g, h, *h, proj)));
    b->what = "the MLP";
    TRY(norm(b, &mm, *h, NAME("post_attention_layernorm.weight")));
    TRY(linear(b, &gate, mm, NAME("mlp.gate_proj.weight"), c->intermediate_size, H));
    TRY(linear(b, &up, mm, NAME("mlp.up_proj.weight"), c->intermediate_size, H));
    TRY(ok(b, mn_swiglu(b->g, &act, gate, up)));
    TRY(linear(b, &down, act, NAME("mlp.down_proj.weight"), H, c->intermediate_size));
    TRY(ok(b, mn_add(b->g, h, *h, down)));
#undef NAME
    return MN_OK;
}

static mn_status check_options(mn_llama *m) {
    const mn_llama_options *o = &m->o;
    const mn_llama_config *c = &m->c;
    if (o->kind != MN_LLAMA_TRAIN && o->kind != MN_LLAMA_FORWARD && o->kind != MN_LLAMA_DECODE) {
        set_err(m, "llama: unknown kind %d", (int)o->kind);
        return MN_E_INVALID;
    }
    if (o->batch < 1 || o->seq_len < 1 || o->batch > MN_LLAMA_MAX_SIZE || o->seq_len > MN_LLAMA_MAX_POSITIONS ||
        o->batch * o->seq_len > MN_LLAMA_MAX_SIZE) {
        set_err(m, "llama: batch %lld x seq_len %lld: each must be >= 1 and the product at most %lld",
                (long long)o->batch, (long long)o->seq_len, (long long)MN_LLAMA_MAX_SIZE);
        return MN_E_INVALID;
    }
    const int64_t limit = o->kind == MN_LLAMA_DECODE ? o->max_seq : o->seq_len;
    if (o->kind == MN_LLAMA_DECODE && o->max_seq < 1) {
        set_err(m, "llama: DECODE needs max_seq >= 1 (the KV-cache length), got %lld", (long long)o->max_seq);
        return MN_E_INVALID;
    }
    if (limit > c->max_position_embeddings) {
        set_err(m, "llama: %s %lld is larger than max_position_embeddings %lld",
                o->kind == MN_LLAMA_DECODE ? "max_seq" : "seq_len", (long long)limit,
                (long long)c->max_position_embeddings);
        return MN_E_INVALID;
    }
    return MN_OK;
}

/* Checks a config that did not come from the parser (the parser's rules). */
static mn_status check_config(mn_llama *m) {
    const mn_llama_config *c = &m->c;
    const int64_t M = MN_LLAMA_MAX_SIZE;
    bool good = c->vocab_size >= 1 && c->vocab_size <= M && c->hidden_size >= 1 && c->hidden_size <= M &&
                c->num_hidden_layers >= 1 && c->num_hidden_layers <= MN_LLAMA_MAX_LAYERS &&
                c->num_attention_heads >= 1 && c->num_attention_heads <= M && c->num_key_value_heads >= 1 &&
                c->num_key_value_heads <= M && c->num_attention_heads % c->num_key_value_heads == 0 &&
                c->head_dim >= 2 && c->head_dim % 2 == 0 && c->head_dim <= M &&
                c->num_attention_heads * c->head_dim <= M && c->intermediate_size >= 1 && c->intermediate_size <= M &&
                c->max_position_embeddings >= 1 && c->max_position_embeddings <= MN_LLAMA_MAX_POSITIONS &&
                c->rms_norm_eps > 0 && c->rms_norm_eps < 1 && c->rope_theta > 1 && c->rope_theta <= 1e12 &&
                c->initializer_range >= 0 && c->initializer_range <= 1e3;
    if (good && c->rope_scaling == MN_ROPE_SCALING_LINEAR) good = c->rope_factor > 0 && c->rope_factor <= 1e6;
    else if (good && c->rope_scaling == MN_ROPE_SCALING_LLAMA3)
        good = c->rope_factor > 0 && c->rope_factor <= 1e6 && c->rope_low_freq_factor > 0 &&
               c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_high_freq_factor <= 1e6 &&
               c->rope_original_max_position_embeddings >= 1;
    else if (good) good = c->rope_scaling == MN_ROPE_SCALING_NONE;
    if (!good) {
        set_err(m, "llama: the config is not consistent (sizes, heads, eps, rope); parse it with mn_llama_config_parse "
                   "to learn which key");
        return MN_E_INVALID;
    }
    return MN_OK;
}

/* embedding -> layers -> norm -> head over ids [B,T] (b->T); the decode-step
 * branch (b->reuse) takes the first branch's parameters and caches. With
 * rows (i32 [B], indices into the B*T positions), only those positions go
 * through the final norm and the head: a prefill needs the logits of each
 * sequence's last token, not B*T*V of them. */
static mn_status branch(builder *b, mn_tensor ids, mn_tensor rows, mn_tensor *hidden, mn_tensor *logits) {
    mn_llama *m = b->m;
    const mn_llama_config *c = &m->c;
    const int64_t H = c->hidden_size, V = c->vocab_size;
    b->what = "the embedding";
    b->layer = -1;
    mn_tensor emb, h, h3;
    mn_init init = {MN_INIT_NORMAL, 0, (float)c->initializer_range};
    TRY(add_param(b, &emb, "model.embed_tokens.weight", 2, S(V, H), init));
    TRY(ok(b, mn_embedding(b->g, &h3, emb, ids)));
    TRY(ok(b, mn_reshape(b->g, &h, h3, 2, S(b->N, H))));
    for (int l = 0; l < c->num_hidden_layers; l++) TRY(layer(b, &h, l));
    b->layer = -1;
    b->what = "the head";
    if (rows != MN_NONE) TRY(ok(b, mn_embedding(b->g, &h, h, rows))); /* gather [B,H] */
    TRY(norm(b, hidden, h, "model.norm.weight"));
    mn_tensor head = emb;
    if (!c->tie_word_embeddings) TRY(add_param(b, &head, "lm_head.weight", 2, S(V, H), init));
    return ok(b, mn_matmul_ex(b->g, logits, *hidden, head, false, true));
}

static mn_status build(mn_llama *m, mn_graph *g) {
    const mn_llama_config *c = &m->c;
    builder b = {m, g, m->o.batch, m->o.seq_len, m->o.batch * m->o.seq_len, "the inputs", -1, false, 0,
                 MN_NONE, MN_NONE};
    mn_llama_tensors *t = &m->t;
    const int64_t Dh = c->head_dim;
    const bool decode = m->o.kind == MN_LLAMA_DECODE;
    m->tables = m->o.rope_tables || c->rope_scaling != MN_ROPE_SCALING_NONE;
    if (!(m->inv_freq = malloc((size_t)(Dh / 2) * sizeof *m->inv_freq)) ||
        (decode && !(m->caches = malloc((size_t)(2 * c->num_hidden_layers) * sizeof *m->caches)))) {
        set_err(m, "llama: out of memory");
        return MN_E_NOMEM;
    }
    mn_llama_inv_freq(m->inv_freq, c);

    TRY(ok(&b, mn_graph_input(g, &t->input_ids, "input_ids", MN_I32, 2, S(b.B, b.T))));
    if (m->o.kind == MN_LLAMA_TRAIN) TRY(ok(&b, mn_graph_input(g, &t->targets, "targets", MN_I32, 1, S(b.N))));
    if (decode) {
        TRY(ok(&b, mn_graph_input(g, &t->pos, "pos", MN_I32, 1, S(1))));
        TRY(ok(&b, mn_graph_input(g, &t->last_rows, "last_rows", MN_I32, 1, S(b.B))));
    }
    if (m->tables && decode) {
        TRY(ok(&b, mn_graph_input(g, &t->rope_cos, "rope_cos", MN_F32, 2, S(b.T, Dh))));
        TRY(ok(&b, mn_graph_input(g, &t->rope_sin, "rope_sin", MN_F32, 2, S(b.T, Dh))));
    } else if (m->tables) {
        const size_t n = (size_t)(b.T * Dh);
        float *cv = malloc(n * sizeof *cv), *sv = malloc(n * sizeof *sv);
        mn_status st = MN_E_NOMEM;
        if (cv && sv) {
            rope_rows(m, cv, sv, 0, b.T);
            st = ok(&b, mn_graph_constant(g, &t->rope_cos, 2, S(b.T, Dh), cv));
            if (!st) st = ok(&b, mn_graph_constant(g, &t->rope_sin, 2, S(b.T, Dh), sv));
        } else set_err(m, "llama: out of memory for the RoPE tables");
        free(cv);
        free(sv);
        TRY(st);
    }
    b.cos = t->rope_cos;
    b.sin = t->rope_sin;
    TRY(branch(&b, t->input_ids, decode ? t->last_rows : MN_NONE, &t->hidden, &t->logits));
    TRY(ok(&b, mn_graph_output(g, t->logits, "logits")));
    if (m->o.kind == MN_LLAMA_TRAIN) {
        b.what = "the loss";
        mn_cross_entropy_params ce = {true, -100, 0};
        TRY(ok(&b, mn_cross_entropy_ex(g, &t->loss, t->logits, t->targets, &ce)));
        TRY(ok(&b, mn_graph_loss(g, t->loss)));
    }
    if (decode && m->o.decode_step && b.T > 1) { /* the one-token branch, same parameters and caches */
        builder d = {m, g, b.B, 1, b.B, "the decode-step inputs", -1, true, 0, MN_NONE, MN_NONE};
        mn_tensor hid;
        TRY(ok(&d, mn_graph_input(g, &t->step_input_ids, "step.input_ids", MN_I32, 2, S(d.B, 1))));
        if (m->tables) {
            TRY(ok(&d, mn_graph_input(g, &t->step_rope_cos, "step.rope_cos", MN_F32, 2, S(1, Dh))));
            TRY(ok(&d, mn_graph_input(g, &t->step_rope_sin, "step.rope_sin", MN_F32, 2, S(1, Dh))));
        }
        d.cos = t->step_rope_cos;
        d.sin = t->step_rope_sin;
        TRY(branch(&d, t->step_input_ids, MN_NONE, &hid, &t->step_logits));
        TRY(ok(&d, mn_graph_output(g, t->step_logits, "step.logits")));
    }
    if (decode) {
        m->tok_buf = malloc((size_t)b.N * sizeof *m->tok_buf);
        m->rows_buf = malloc((size_t)b.B * sizeof *m->rows_buf);
        if (!m->tok_buf || !m->rows_buf) {
            set_err(m, "llama: out of memory for the decoding buffers");
            return MN_E_NOMEM;
        }
    }
    return MN_OK;
}

mn_status mn_llama_create(mn_llama **out, mn_graph *g, const mn_llama_config *c, const mn_llama_options *o) {
    if (!out) return MN_E_INVALID;
    mn_llama *m = calloc(1, sizeof *m);
    *out = m;
    if (!m) return MN_E_NOMEM;
    m->t = (mn_llama_tensors){MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE};
    mn_status st = MN_OK;
    if (!g || !c) {
        set_err(m, "llama: %s is NULL", g ? "config" : "graph");
        st = MN_E_INVALID;
    } else {
        m->c = *c;
        m->o = o ? *o : mn_llama_default_options();
        if (!(st = check_config(m)) && !(st = check_options(m))) st = build(m, g);
    }
    m->dead = st != MN_OK;
    return st;
}

void mn_llama_destroy(mn_llama *m) {
    if (!m) return;
    for (int i = 0; i < m->nparams; i++) free((char *)m->params[i].name);
    free(m->params);
    free(m->inv_freq);
    free(m->caches);
    free(m->rows_buf);
    free(m->tok_buf);
    hf_str_free(&m->err);
    free(m);
}

const char *mn_llama_error(const mn_llama *m) {
    if (!m) return "llama: NULL handle";
    return m->err.p ? m->err.p : "";
}

const mn_llama_config *mn_llama_get_config(const mn_llama *m) { return m ? &m->c : NULL; }
const mn_llama_options *mn_llama_get_options(const mn_llama *m) { return m ? &m->o : NULL; }

mn_llama_tensors mn_llama_get_tensors(const mn_llama *m) {
    if (m) return m->t;
    return (mn_llama_tensors){MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE, MN_NONE};
}

int mn_llama_param_count(const mn_llama *m) { return m ? m->nparams : 0; }
const mn_hf_param *mn_llama_params(const mn_llama *m) { return m ? m->params : NULL; }

int64_t mn_llama_numel(const mn_llama *m) {
    int64_t total = 0;
    for (int i = 0; m && i < m->nparams; i++) {
        int64_t n = 1;
        for (int d = 0; d < m->params[i].rank; d++) n *= m->params[i].shape[d];
        total += n;
    }
    return total;
}

/* ---- loading ------------------------------------------------------------------ */

static mn_status alive(mn_llama *m) {
    if (!m) return MN_E_INVALID;
    if (m->dead) {
        if (!m->err.n) set_err(m, "llama: the model failed to build");
        return MN_E_STATE;
    }
    return MN_OK;
}

mn_status mn_llama_load(mn_llama *m, mn_session *s, mn_hf_checkpoint *c, const mn_hf_load_options *o) {
    mn_status st = alive(m);
    if (st) return st;
    if (!s || !c) {
        set_err(m, "llama_load: %s is NULL", s ? "checkpoint" : "session");
        return MN_E_INVALID;
    }
    mn_hf_load_options lo = o ? *o : (mn_hf_load_options){false, false, NULL, false};
    const char *ignore[64];
    int n = 0;
    if (m->c.tie_word_embeddings) ignore[n++] = "lm_head.weight";
    ignore[n++] = "*.rotary_emb.inv_freq";
    for (const char *const *p = o ? o->ignore : NULL; p && *p; p++) {
        if (n == 63) {
            set_err(m, "llama_load: more than 60 ignore entries");
            return MN_E_INVALID;
        }
        ignore[n++] = *p;
    }
    ignore[n] = NULL;
    lo.ignore = ignore;
    if ((st = mn_hf_load(s, c, m->params, m->nparams, &lo))) { /* a listing may be long: all of it */
        hf_str_free(&m->err);
        hf_str_add(&m->err, "%s", mn_hf_checkpoint_error(c));
    }
    return st;
}

/* ---- decoding ------------------------------------------------------------------- */

void mn_llama_shift_labels(int32_t *targets, const int32_t *labels, int64_t batch, int64_t seq_len) {
    if (!targets || !labels) return;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t t = 0; t < seq_len; t++)
            targets[b * seq_len + t] = t + 1 < seq_len ? labels[b * seq_len + t + 1] : -100;
}

static mn_status need_decode(mn_llama *m, mn_session *s, const char *what) {
    mn_status st = alive(m);
    if (st) return st;
    if (!s) {
        set_err(m, "%s: session is NULL", what);
        return MN_E_INVALID;
    }
    if (m->o.kind != MN_LLAMA_DECODE) {
        set_err(m, "%s: the model was not built with kind MN_LLAMA_DECODE", what);
        return MN_E_STATE;
    }
    return MN_OK;
}

static mn_status session_call(mn_llama *m, mn_session *s, mn_status st, const char *what) {
    if (st) set_err(m, "%s: %s", what, mn_session_error(s));
    return st;
}

/* pos, and the RoPE tables of T rows under the names given. */
static mn_status set_position(mn_llama *m, mn_session *s, int64_t pos, int64_t T, const char *cos_name,
                              const char *sin_name) {
    mn_status st;
    if (pos < 0 || pos >= m->o.max_seq) {
        set_err(m, "llama_set_position: position %lld is outside the cache [0, %lld)", (long long)pos,
                (long long)m->o.max_seq);
        return MN_E_INVALID;
    }
    const int32_t p = (int32_t)pos;
    TRY(session_call(m, s, mn_session_set_input(s, "pos", &p, sizeof p), "llama_set_position"));
    if (!m->tables) return MN_OK;
    const int64_t Dh = m->c.head_dim;
    const size_t n = (size_t)(T * Dh);
    float *cv = malloc(2 * n * sizeof *cv);
    if (!cv) {
        set_err(m, "llama_set_position: out of memory");
        return MN_E_NOMEM;
    }
    rope_rows(m, cv, cv + n, pos, T);
    st = session_call(m, s, mn_session_set_input(s, cos_name, cv, n * sizeof *cv), "llama_set_position");
    if (!st) st = session_call(m, s, mn_session_set_input(s, sin_name, cv + n, n * sizeof *cv), "llama_set_position");
    free(cv);
    return st;
}

mn_status mn_llama_set_position(mn_llama *m, mn_session *s, int64_t pos) {
    mn_status st = need_decode(m, s, "llama_set_position");
    if (st) return st;
    return set_position(m, s, pos, m->o.seq_len, "rope_cos", "rope_sin");
}

mn_status mn_llama_decode(mn_llama *m, mn_session *s, const int32_t *tokens, int64_t n, int64_t pos,
                          float *logits) {
    mn_status st = need_decode(m, s, "llama_decode");
    if (st) return st;
    const int64_t B = m->o.batch, T = m->o.seq_len, V = m->c.vocab_size;
    if (!tokens || n < 1 || n > T || pos < 0 || pos > m->o.max_seq - n) {
        set_err(m, "llama_decode: %lld tokens at position %lld: need 1 <= n <= seq_len %lld and pos + n <= max_seq %lld",
                (long long)n, (long long)pos, (long long)T, (long long)m->o.max_seq);
        return MN_E_INVALID;
    }
    if (n == 1 && m->t.step_logits != MN_NONE) { /* the one-token branch */
        TRY(session_call(m, s, mn_session_set_input(s, "step.input_ids", tokens, (size_t)B * sizeof *tokens),
                         "llama_decode"));
        TRY(set_position(m, s, pos, 1, "step.rope_cos", "step.rope_sin"));
        const char *out = "step.logits";
        TRY(session_call(m, s, mn_session_run_outputs(s, &out, 1), "llama_decode"));
        if (!logits) return MN_OK;
        return session_call(m, s, mn_session_output(s, out, logits, (size_t)(B * V) * sizeof *logits),
                            "llama_decode");
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) m->tok_buf[b * T + t] = t < n ? tokens[b * n + t] : 0;
    TRY(session_call(m, s, mn_session_set_input(s, "input_ids", m->tok_buf, (size_t)(B * T) * sizeof *m->tok_buf),
                     "llama_decode"));
    for (int64_t b = 0; b < B; b++) m->rows_buf[b] = (int32_t)(b * T + n - 1);
    TRY(session_call(m, s, mn_session_set_input(s, "last_rows", m->rows_buf, (size_t)B * sizeof *m->rows_buf),
                     "llama_decode"));
    TRY(mn_llama_set_position(m, s, pos));
    if (m->t.step_logits != MN_NONE) {
        const char *out = "logits";
        TRY(session_call(m, s, mn_session_run_outputs(s, &out, 1), "llama_decode"));
    } else TRY(session_call(m, s, mn_session_run(s), "llama_decode"));
    if (!logits) return MN_OK;
    return session_call(m, s, mn_session_output(s, "logits", logits, (size_t)(B * V) * sizeof *logits), "llama_decode");
}

/* The highest logit, the lowest id on ties; -1 if every logit is NaN. */
static int64_t argmax(const float *v, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i]) && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

mn_status mn_llama_greedy(mn_llama *m, mn_session *s, int32_t *out, const int32_t *prompt, int64_t n_prompt,
                          int64_t n_new) {
    mn_status st = need_decode(m, s, "llama_greedy");
    if (st) return st;
    const int64_t B = m->o.batch, T = m->o.seq_len, V = m->c.vocab_size;
    if (!out || !prompt || n_prompt < 1 || n_new < 1 || n_prompt > m->o.max_seq ||
        n_new - 1 > m->o.max_seq - n_prompt) {
        set_err(m, "llama_greedy: prompt of %lld and %lld new tokens: need both >= 1 and prompt + new - 1 <= max_seq %lld",
                (long long)n_prompt, (long long)n_new, (long long)m->o.max_seq);
        return MN_E_INVALID;
    }
    int32_t *chunk = malloc((size_t)(B * T) * sizeof *chunk);
    float *lg = malloc((size_t)(B * V) * sizeof *lg);
    if (!chunk || !lg) {
        free(chunk);
        free(lg);
        set_err(m, "llama_greedy: out of memory");
        return MN_E_NOMEM;
    }
    for (int64_t p = 0; p < n_prompt && !st; p += T) {
        const int64_t k = n_prompt - p < T ? n_prompt - p : T;
        for (int64_t b = 0; b < B; b++) memcpy(chunk + b * k, prompt + b * n_prompt + p, (size_t)k * sizeof *chunk);
        st = mn_llama_decode(m, s, chunk, k, p, p + k == n_prompt ? lg : NULL);
    }
    for (int64_t i = 0; i < n_new && !st; i++) {
        if (i > 0) {
            for (int64_t b = 0; b < B; b++) chunk[b] = out[b * n_new + i - 1];
            if ((st = mn_llama_decode(m, s, chunk, 1, n_prompt + i - 1, lg))) break;
        }
        for (int64_t b = 0; b < B && !st; b++) {
            const int64_t id = argmax(lg + b * V, V);
            if (id < 0) {
                set_err(m, "llama_greedy: every logit of sequence %lld is NaN at new token %lld", (long long)b,
                        (long long)i);
                st = MN_E_FORMAT;
            } else out[b * n_new + i] = (int32_t)id;
        }
    }
    free(chunk);
    free(lg);
    return st;
}
