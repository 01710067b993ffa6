/* load.c - reads a Hugging Face tokenizer.json into an mn_tokenizer.
 *
 * Does: treats the file as hostile. cJSON parses it; every field the
 * encoder uses is then checked for its JSON type, every id for being an
 * integer in [0, 2^31), every string for valid UTF-8, the vocabulary for
 * duplicate tokens and ids, the merges for parts and results outside the
 * vocabulary, duplicates and cycles (a merge giving back one of its parts),
 * templates for special tokens they do not define, patterns for compiling.
 * Component types the encoder does not implement are refused by name
 * (MN_E_UNSUPPORTED: "model.type 'Unigram' is not supported ..."), never
 * silently approximated. Messages name the field ("model.merges[12]").
 * Added tokens get their ids as the library gives them: the id of the same
 * string in the vocabulary, else the next id after the vocabulary's size,
 * in file order; an id in the file that disagrees is logged as a warning,
 * as the library does.
 *
 * Does not: read files (tokenizer.c does), keep the JSON tree, apply
 * truncation or padding (logged as ignored), support BPE dropout.
 */
#include "tokenizer/tokenizer.h"

#include "io/text.h"

#include <cjson/cJSON.h>
#include <math.h>

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

#define WHERE 160 /* room for a field path in messages */

static const char *kind_of(const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "invalid";
}

static const cJSON *field(const cJSON *obj, const char *key) { return cJSON_GetObjectItemCaseSensitive(obj, key); }
static bool absent(const cJSON *j) { return !j || cJSON_IsNull(j); }

static mn_status get_bool(mn_tokenizer *t, const cJSON *obj, const char *key, const char *where, bool def,
                          bool *out) {
    const cJSON *j = field(obj, key);
    *out = def;
    if (absent(j)) return MN_OK;
    if (!cJSON_IsBool(j)) return tk_fail(t, MN_E_FORMAT, "%s.%s is %s, not a boolean", where, key, kind_of(j));
    *out = cJSON_IsTrue(j);
    return MN_OK;
}

/* A string field copied into the arena; absent or null gives NULL unless required. */
static mn_status get_str(mn_tokenizer *t, const cJSON *obj, const char *key, const char *where, bool required,
                         const char **out) {
    const cJSON *j = field(obj, key);
    *out = NULL;
    if (absent(j)) {
        if (required) return tk_fail(t, MN_E_FORMAT, "%s.%s is missing", where, key);
        return MN_OK;
    }
    if (!cJSON_IsString(j)) return tk_fail(t, MN_E_FORMAT, "%s.%s is %s, not a string", where, key, kind_of(j));
    size_t n = strlen(j->valuestring);
    if (!io_utf8_valid(j->valuestring, n)) return tk_fail(t, MN_E_FORMAT, "%s.%s is not valid UTF-8", where, key);
    *out = tk_strndup(&t->arena, j->valuestring, n);
    return *out ? MN_OK : tk_fail(t, MN_E_NOMEM, "out of memory reading %s.%s", where, key);
}

static mn_status get_id(mn_tokenizer *t, const cJSON *j, const char *where, int32_t *out) {
    if (!cJSON_IsNumber(j)) return tk_fail(t, MN_E_FORMAT, "%s is %s, not an id", where, kind_of(j));
    double d = j->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < 0 || d > (double)INT32_MAX)
        return tk_fail(t, MN_E_FORMAT, "%s is %.17g, not an id (an integer in [0, %d])", where, d, INT32_MAX);
    *out = (int32_t)d;
    return MN_OK;
}

/* The "type" of a component object. */
static mn_status get_type(mn_tokenizer *t, const cJSON *obj, const char *where, const char **type) {
    if (!cJSON_IsObject(obj)) return tk_fail(t, MN_E_FORMAT, "%s is %s, not an object", where, kind_of(obj));
    const cJSON *j = field(obj, "type");
    if (!cJSON_IsString(j)) return tk_fail(t, MN_E_FORMAT, "%s.type is %s, not a string", where, kind_of(j));
    *type = j->valuestring;
    return MN_OK;
}

static mn_status unsupported(mn_tokenizer *t, const char *where, const char *type, const char *supported) {
    char e[IO_ESC_NAME];
    return tk_fail(t, MN_E_UNSUPPORTED, "%s.type '%s' is not supported (supported: %s)", where,
                   io_esc(e, sizeof e, type), supported);
}

static const cJSON *get_array(mn_tokenizer *t, const cJSON *obj, const char *key, const char *where) {
    const cJSON *j = field(obj, key);
    if (!cJSON_IsArray(j)) {
        tk_fail(t, MN_E_FORMAT, "%s.%s is %s, not an array", where, key, kind_of(j));
        return NULL;
    }
    return j;
}

/* ---- model ------------------------------------------------------------------------------ */

static mn_status load_vocab(mn_tokenizer *t, const cJSON *vocab) {
    tk_bpe *bpe = &t->bpe;
    if (!cJSON_IsObject(vocab))
        return tk_fail(t, MN_E_FORMAT, "model.vocab is %s, not an object of token: id", kind_of(vocab));
    size_t n = (size_t)cJSON_GetArraySize(vocab);
    bpe->tokens = tk_alloc(&t->arena, (n ? n : 1) * sizeof *bpe->tokens);
    bpe->token_len = tk_alloc(&t->arena, (n ? n : 1) * sizeof *bpe->token_len);
    if (!bpe->tokens || !bpe->token_len) return tk_fail(t, MN_E_NOMEM, "out of memory reading model.vocab");
    char e[IO_ESC_NAME], where[WHERE];
    for (const cJSON *j = vocab->child; j; j = j->next) {
        const char *key = j->string ? j->string : "";
        size_t len = strlen(key);
        if (!io_utf8_valid(key, len)) return tk_fail(t, MN_E_FORMAT, "model.vocab has a token that is not valid UTF-8");
        mn_fmt(where, sizeof where, "model.vocab['%s']", io_esc(e, sizeof e, key));
        int32_t id;
        mn_status s = get_id(t, j, where, &id);
        if (s != MN_OK) return s;
        if (id > t->max_id) t->max_id = id;
        char *tok = tk_strndup(&t->arena, key, len);
        if (!tok) return tk_fail(t, MN_E_NOMEM, "out of memory reading model.vocab");
        int32_t old;
        int r = tk_smap_put(&bpe->vocab, tok, len, id, &old);
        if (r < 0) return tk_fail(t, MN_E_NOMEM, "out of memory reading model.vocab");
        if (r == 0) return tk_fail(t, MN_E_FORMAT, "%s appears twice", where);
        uint64_t prev;
        r = tk_map_put(&bpe->vocab_r, (uint64_t)id, bpe->n_tokens, &prev);
        if (r < 0) return tk_fail(t, MN_E_NOMEM, "out of memory reading model.vocab");
        if (r == 0) {
            char e2[IO_ESC_NAME];
            return tk_fail(t, MN_E_FORMAT, "%s has id %d, which '%s' already has", where, id,
                           io_esc(e2, sizeof e2, bpe->tokens[prev]));
        }
        bpe->tokens[bpe->n_tokens] = tok;
        bpe->token_len[bpe->n_tokens] = (uint32_t)len;
        bpe->n_tokens++;
    }
    return MN_OK;
}

static mn_status load_merges(mn_tokenizer *t, const cJSON *merges) {
    size_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        char *split = NULL;
        const char *a = NULL, *b = NULL;
        if (cJSON_IsString(m)) { /* legacy "a b": exactly one space */
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return tk_fail(t, MN_E_FORMAT, "model.merges[%zu] is not two tokens separated by one space", rank);
            split = mn_strdup(s);
            if (!split) return tk_fail(t, MN_E_NOMEM, "out of memory reading model.merges");
            split[sp - s] = 0;
            a = split;
            b = split + (sp - s) + 1;
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            a = m->child->valuestring;
            b = m->child->next->valuestring;
        } else {
            return tk_fail(t, MN_E_FORMAT, "model.merges[%zu] is %s, not \"a b\" or [\"a\", \"b\"]", rank,
                           kind_of(m));
        }
        mn_status s = MN_OK;
        if (!*a || !*b)
            s = tk_fail(t, MN_E_FORMAT, "model.merges[%zu] has an empty part", rank);
        else
            s = tk_bpe_add_merge(t, a, b, rank);
        free(split);
        if (s != MN_OK) return s;
    }
    return MN_OK;
}

static mn_status load_model(mn_tokenizer *t, const cJSON *model) {
    tk_bpe *bpe = &t->bpe;
    if (!cJSON_IsObject(model)) return tk_fail(t, MN_E_FORMAT, "model is %s, not an object", kind_of(model));
    const cJSON *type = field(model, "type");
    if (!absent(type)) {
        if (!cJSON_IsString(type))
            return tk_fail(t, MN_E_FORMAT, "model.type is %s, not a string", kind_of(type));
        if (strcmp(type->valuestring, "BPE") != 0)
            return unsupported(t, "model", type->valuestring, "BPE (byte-level BPE as GPT-2, Llama-3, SmolLM2)");
    } else if (!field(model, "merges")) {
        return tk_fail(t, MN_E_FORMAT, "model.type is missing (and the model has no merges: not BPE)");
    }
    const cJSON *dropout = field(model, "dropout");
    if (!absent(dropout)) {
        if (!cJSON_IsNumber(dropout))
            return tk_fail(t, MN_E_FORMAT, "model.dropout is %s, not a number", kind_of(dropout));
        double d = dropout->valuedouble;
        if (!(d >= 0 && d <= 1)) return tk_fail(t, MN_E_FORMAT, "model.dropout %g is not in [0, 1]", d);
        if (d > 0)
            return tk_fail(t, MN_E_UNSUPPORTED, "model.dropout %g: BPE dropout is not supported (it makes "
                           "encoding random; set it to null for inference)", d);
    }
    mn_status s;
    if ((s = get_str(t, model, "unk_token", "model", false, &bpe->unk_token)) != MN_OK ||
        (s = get_str(t, model, "continuing_subword_prefix", "model", false, &bpe->prefix)) != MN_OK ||
        (s = get_str(t, model, "end_of_word_suffix", "model", false, &bpe->suffix)) != MN_OK ||
        (s = get_bool(t, model, "fuse_unk", "model", false, &bpe->fuse_unk)) != MN_OK ||
        (s = get_bool(t, model, "byte_fallback", "model", false, &bpe->byte_fallback)) != MN_OK ||
        (s = get_bool(t, model, "ignore_merges", "model", false, &bpe->ignore_merges)) != MN_OK)
        return s;
    bpe->prefix_len = bpe->prefix ? strlen(bpe->prefix) : 0;
    bpe->suffix_len = bpe->suffix ? strlen(bpe->suffix) : 0;
    const cJSON *vocab = field(model, "vocab");
    if (absent(vocab)) return tk_fail(t, MN_E_FORMAT, "model.vocab is missing");
    if ((s = load_vocab(t, vocab)) != MN_OK) return s;
    const cJSON *merges = get_array(t, model, "merges", "model");
    if (!merges) return MN_E_FORMAT;
    if ((s = load_merges(t, merges)) != MN_OK) return s;
    bpe->unk_id = -1;
    if (bpe->unk_token) tk_smap_get(&bpe->vocab, bpe->unk_token, strlen(bpe->unk_token), &bpe->unk_id);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        bpe->byte_ids[b] = -1;
        tk_smap_get(&bpe->vocab, name, strlen(name), &bpe->byte_ids[b]);
    }
    return MN_OK;
}

/* ---- added tokens ------------------------------------------------------------------------- */

static mn_status load_added(mn_tokenizer *t, const cJSON *arr) {
    if (absent(arr)) return MN_OK;
    if (!cJSON_IsArray(arr)) return tk_fail(t, MN_E_FORMAT, "added_tokens is %s, not an array", kind_of(arr));
    size_t n = (size_t)cJSON_GetArraySize(arr);
    t->added = tk_alloc(&t->arena, (n ? n : 1) * sizeof *t->added);
    if (!t->added) return tk_fail(t, MN_E_NOMEM, "out of memory reading added_tokens");
    /* Ids as the library gives them (AddedVocabulary::add_tokens). */
    int64_t next_id = (int64_t)t->bpe.vocab.count;
    size_t i = 0;
    for (const cJSON *j = arr->child; j; j = j->next, i++) {
        char where[WHERE];
        mn_fmt(where, sizeof where, "added_tokens[%zu]", i);
        if (!cJSON_IsObject(j)) return tk_fail(t, MN_E_FORMAT, "%s is %s, not an object", where, kind_of(j));
        tk_added a = {0};
        mn_status s;
        if ((s = get_str(t, j, "content", where, true, &a.content)) != MN_OK ||
            (s = get_bool(t, j, "single_word", where, false, &a.single_word)) != MN_OK ||
            (s = get_bool(t, j, "lstrip", where, false, &a.lstrip)) != MN_OK ||
            (s = get_bool(t, j, "rstrip", where, false, &a.rstrip)) != MN_OK ||
            (s = get_bool(t, j, "normalized", where, true, &a.normalized)) != MN_OK ||
            (s = get_bool(t, j, "special", where, false, &a.special)) != MN_OK)
            return s;
        const cJSON *jid = field(j, "id");
        int32_t file_id = -1;
        if (!absent(jid)) {
            char w2[WHERE + 8];
            mn_fmt(w2, sizeof w2, "%s.id", where);
            if ((s = get_id(t, jid, w2, &file_id)) != MN_OK) return s;
        }
        size_t len = strlen(a.content);
        if (len == 0) continue; /* the library ignores empty tokens */
        if (a.special) {
            int r = tk_smap_put(&t->special, a.content, len, 0, NULL);
            if (r < 0) return tk_fail(t, MN_E_NOMEM, "out of memory reading added_tokens");
        }
        int32_t idx;
        if (tk_smap_get(&t->added_by_content, a.content, len, &idx)) {
            /* The same string again: it keeps its id, takes the new flags. */
            a.id = t->added[idx].id;
        } else if (!tk_smap_get(&t->bpe.vocab, a.content, len, &a.id)) {
            if (next_id > INT32_MAX) return tk_fail(t, MN_E_FORMAT, "%s: too many added tokens", where);
            a.id = (int32_t)next_id++;
        }
        if (file_id >= 0 && file_id != a.id) {
            char e[IO_ESC_NAME];
            mn_logf(MN_LOG_WARN, "tokenizer: %s '%s' has id %d in the file but gets id %d (as in the tokenizers "
                    "library)", where, io_esc(e, sizeof e, a.content), file_id, a.id);
        }
        if (a.id > t->max_id) t->max_id = a.id;
        /* What is matched (and decoded): the normalized form for normalized tokens. */
        a.match = a.content;
        a.match_len = len;
        if (a.normalized && t->n_norms) {
            tk_arena tmp = {0};
            const char *ns;
            size_t nn;
            s = tk_normalize(t, &tmp, a.content, len, &ns, &nn);
            if (s == MN_OK && (nn != len || memcmp(ns, a.content, len) != 0)) {
                a.match = tk_strndup(&t->arena, ns, nn);
                a.match_len = nn;
                if (!a.match) s = tk_fail(t, MN_E_NOMEM, "out of memory reading added_tokens");
            }
            tk_arena_free(&tmp);
            if (s != MN_OK) return s;
        }
        if (tk_smap_get(&t->added_by_content, a.content, len, &idx)) {
            t->added[idx] = a;
        } else {
            idx = (int32_t)t->n_added++;
            t->added[idx] = a;
            if (tk_smap_put(&t->added_by_content, a.content, len, idx, NULL) < 0)
                return tk_fail(t, MN_E_NOMEM, "out of memory reading added_tokens");
        }
        if (tk_map_put(&t->added_by_id, (uint64_t)a.id, (uint64_t)idx, NULL) < 0)
            return tk_fail(t, MN_E_NOMEM, "out of memory reading added_tokens");
    }
    /* Special-ness is by string, and only the token owning an id is matched
     * (the library keys its tables that way). */
    for (size_t k = 0; k < t->n_added; k++) {
        tk_added *a = &t->added[k];
        a->special = tk_smap_get(&t->special, a->content, strlen(a->content), NULL);
        uint64_t owner;
        if (tk_map_get(&t->added_by_id, (uint64_t)a->id, &owner) && owner != k) a->match_len = 0;
    }
    return MN_OK;
}

/* ---- normalizer, pre-tokenizer ------------------------------------------------------------ */

static mn_status load_normalizer(mn_tokenizer *t, const cJSON *j, const char *where, int depth) {
    if (absent(j) && depth == 0) return MN_OK;
    if (depth > TK_MAX_NESTING) return tk_fail(t, MN_E_FORMAT, "%s: Sequences nested too deep", where);
    const char *type;
    mn_status s = get_type(t, j, where, &type);
    if (s != MN_OK) return s;
    static const struct {
        const char *name;
        tk_norm_kind kind;
    } forms[] = {{"NFC", TK_NORM_NFC}, {"NFD", TK_NORM_NFD}, {"NFKC", TK_NORM_NFKC}, {"NFKD", TK_NORM_NFKD}};
    for (size_t k = 0; k < MN_ARRAY_LEN(forms); k++) {
        if (strcmp(type, forms[k].name) != 0) continue;
        tk_norm_kind *v = realloc(t->norms, ((size_t)t->n_norms + 1) * sizeof *v);
        if (!v) return tk_fail(t, MN_E_NOMEM, "out of memory reading %s", where);
        t->norms = v;
        t->norms[t->n_norms++] = forms[k].kind;
        return MN_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = get_array(t, j, "normalizers", where);
        if (!arr) return MN_E_FORMAT;
        int i = 0;
        for (const cJSON *c = arr->child; c; c = c->next, i++) {
            char w[WHERE];
            mn_fmt(w, sizeof w, "%s.normalizers[%d]", where, i);
            if ((s = load_normalizer(t, c, w, depth + 1)) != MN_OK) return s;
        }
        return MN_OK;
    }
    return unsupported(t, where, type, "NFC, NFD, NFKC, NFKD, Sequence");
}

void tk_pre_free(tk_pre *p) {
    if (!p) return;
    for (int i = 0; i < p->n_items; i++) tk_pre_free(p->items[i]);
    free(p->items);
    tk_regex_free(p->re);
    free(p);
}

static mn_status load_pre(mn_tokenizer *t, const cJSON *j, const char *where, int depth, tk_pre **out) {
    *out = NULL;
    if (depth > TK_MAX_NESTING) return tk_fail(t, MN_E_FORMAT, "%s: Sequences nested too deep", where);
    const char *type;
    mn_status s = get_type(t, j, where, &type);
    if (s != MN_OK) return s;
    tk_pre *p = calloc(1, sizeof *p);
    if (!p) return tk_fail(t, MN_E_NOMEM, "out of memory reading %s", where);
    if (strcmp(type, "ByteLevel") == 0) {
        p->kind = TK_PRE_BYTELEVEL;
        if ((s = get_bool(t, j, "add_prefix_space", where, true, &p->add_prefix_space)) == MN_OK &&
            (s = get_bool(t, j, "use_regex", where, true, &p->use_regex)) == MN_OK && p->use_regex && !t->gpt2_re)
            s = tk_regex_compile(&t->gpt2_re, GPT2_PATTERN, strlen(GPT2_PATTERN), false, t->err, sizeof t->err);
    } else if (strcmp(type, "Digits") == 0) {
        p->kind = TK_PRE_DIGITS;
        s = get_bool(t, j, "individual_digits", where, false, &p->individual_digits);
    } else if (strcmp(type, "Split") == 0) {
        static const char *const behaviors[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                                "Contiguous"};
        p->kind = TK_PRE_SPLIT;
        const cJSON *pat = field(j, "pattern"), *beh = field(j, "behavior");
        const cJSON *str = cJSON_IsObject(pat) ? field(pat, "String") : NULL;
        const cJSON *re = cJSON_IsObject(pat) ? field(pat, "Regex") : NULL;
        s = get_bool(t, j, "invert", where, false, &p->invert);
        if (s == MN_OK && !cJSON_IsString(str) && !cJSON_IsString(re))
            s = tk_fail(t, MN_E_FORMAT, "%s.pattern is %s, not {\"Regex\": ...} or {\"String\": ...}", where,
                        kind_of(pat));
        if (s == MN_OK && !cJSON_IsString(beh))
            s = tk_fail(t, MN_E_FORMAT, "%s.behavior is %s, not a string", where, kind_of(beh));
        if (s == MN_OK) {
            size_t k = 0;
            while (k < MN_ARRAY_LEN(behaviors) && strcmp(beh->valuestring, behaviors[k]) != 0) k++;
            if (k == MN_ARRAY_LEN(behaviors)) {
                char e[IO_ESC_NAME];
                s = tk_fail(t, MN_E_FORMAT, "%s.behavior '%s' is not one of Removed, Isolated, MergedWithPrevious, "
                            "MergedWithNext, Contiguous", where, io_esc(e, sizeof e, beh->valuestring));
            } else {
                p->behavior = (tk_behavior)k;
            }
        }
        if (s == MN_OK) {
            const char *text = cJSON_IsString(re) ? re->valuestring : str->valuestring;
            char msg[400];
            s = tk_regex_compile(&p->re, text, strlen(text), !cJSON_IsString(re), msg, sizeof msg);
            if (s != MN_OK) tk_fail(t, s, "%s: %s", where, msg);
        }
    } else if (strcmp(type, "Sequence") == 0) {
        p->kind = TK_PRE_SEQUENCE;
        const cJSON *arr = get_array(t, j, "pretokenizers", where);
        if (!arr) s = MN_E_FORMAT;
        int n = arr ? cJSON_GetArraySize(arr) : 0, i = 0;
        if (s == MN_OK && n > 0 && !(p->items = calloc((size_t)n, sizeof *p->items)))
            s = tk_fail(t, MN_E_NOMEM, "out of memory reading %s", where);
        for (const cJSON *c = arr ? arr->child : NULL; c && s == MN_OK; c = c->next, i++) {
            char w[WHERE];
            mn_fmt(w, sizeof w, "%s.pretokenizers[%d]", where, i);
            s = load_pre(t, c, w, depth + 1, &p->items[i]);
            if (s == MN_OK) p->n_items = i + 1;
        }
    } else {
        s = unsupported(t, where, type, "ByteLevel, Split, Digits, Sequence");
    }
    if (s != MN_OK) {
        tk_pre_free(p);
        return s;
    }
    *out = p;
    return MN_OK;
}

/* ---- post-processor, decoder ---------------------------------------------------------------- */

static mn_status add_template(mn_tokenizer *t, tk_tpl_piece *pieces, size_t n, const char *where) {
    tk_template *v = realloc(t->post, ((size_t)t->n_post + 1) * sizeof *v);
    if (!v) return tk_fail(t, MN_E_NOMEM, "out of memory reading %s", where);
    t->post = v;
    t->post[t->n_post++] = (tk_template){pieces, n};
    return MN_OK;
}

static mn_status load_template(mn_tokenizer *t, const cJSON *j, const char *where) {
    const cJSON *single = get_array(t, j, "single", where);
    if (!single) return MN_E_FORMAT;
    const cJSON *specials = field(j, "special_tokens");
    if (!absent(specials) && !cJSON_IsObject(specials))
        return tk_fail(t, MN_E_FORMAT, "%s.special_tokens is %s, not an object", where, kind_of(specials));
    size_t n = (size_t)cJSON_GetArraySize(single), i = 0;
    tk_tpl_piece *pieces = tk_alloc(&t->arena, (n ? n : 1) * sizeof *pieces);
    if (!pieces) return tk_fail(t, MN_E_NOMEM, "out of memory reading %s", where);
    for (const cJSON *p = single->child; p; p = p->next, i++) {
        char w[WHERE], e[IO_ESC_NAME];
        mn_fmt(w, sizeof w, "%s.single[%zu]", where, i);
        const cJSON *seq = cJSON_IsObject(p) ? field(p, "Sequence") : NULL;
        const cJSON *sp = cJSON_IsObject(p) ? field(p, "SpecialToken") : NULL;
        const cJSON *id = field(seq ? seq : sp, "id");
        if ((!seq && !sp) || !cJSON_IsString(id))
            return tk_fail(t, MN_E_FORMAT, "%s is not {\"Sequence\": {\"id\": ...}} or {\"SpecialToken\": {\"id\": "
                           "...}}", w);
        if (seq) {
            if (strcmp(id->valuestring, "A") != 0)
                return tk_fail(t, MN_E_FORMAT, "%s: the single-sequence template uses sequence '%s', not 'A'", w,
                               io_esc(e, sizeof e, id->valuestring));
            pieces[i] = (tk_tpl_piece){true, NULL, 0};
            continue;
        }
        const cJSON *def = specials ? field(specials, id->valuestring) : NULL;
        io_esc(e, sizeof e, id->valuestring);
        if (!def) return tk_fail(t, MN_E_FORMAT, "%s: special token '%s' is not in %s.special_tokens", w, e, where);
        char w2[WHERE + IO_ESC_NAME];
        mn_fmt(w2, sizeof w2, "%s.special_tokens['%s']", where, e);
        const cJSON *ids = cJSON_IsObject(def) ? get_array(t, def, "ids", w2) : NULL;
        if (!ids) return cJSON_IsObject(def) ? MN_E_FORMAT : tk_fail(t, MN_E_FORMAT, "%s is not an object", w2);
        size_t m = (size_t)cJSON_GetArraySize(ids), k = 0;
        int32_t *v = tk_alloc(&t->arena, (m ? m : 1) * sizeof *v);
        if (!v) return tk_fail(t, MN_E_NOMEM, "out of memory reading %s", w2);
        for (const cJSON *x = ids->child; x; x = x->next, k++) {
            char w3[WHERE * 2];
            mn_fmt(w3, sizeof w3, "%s.ids[%zu]", w2, k);
            mn_status s = get_id(t, x, w3, &v[k]);
            if (s != MN_OK) return s;
            if (v[k] > t->max_id) t->max_id = v[k];
        }
        pieces[i] = (tk_tpl_piece){false, v, m};
    }
    return add_template(t, pieces, n, where);
}

/* RobertaProcessing / BertProcessing: cls $A sep. */
static mn_status load_cls_sep(mn_tokenizer *t, const cJSON *j, const char *where) {
    tk_tpl_piece *pieces = tk_alloc(&t->arena, 3 * sizeof *pieces);
    int32_t *ids = tk_alloc(&t->arena, 2 * sizeof *ids);
    if (!pieces || !ids) return tk_fail(t, MN_E_NOMEM, "out of memory reading %s", where);
    static const char *const keys[2] = {"cls", "sep"};
    for (int k = 0; k < 2; k++) {
        const cJSON *pair = field(j, keys[k]);
        char w[WHERE];
        mn_fmt(w, sizeof w, "%s.%s[1]", where, keys[k]);
        if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2)
            return tk_fail(t, MN_E_FORMAT, "%s.%s is not [token, id]", where, keys[k]);
        mn_status s = get_id(t, pair->child->next, w, &ids[k]);
        if (s != MN_OK) return s;
        if (ids[k] > t->max_id) t->max_id = ids[k];
    }
    pieces[0] = (tk_tpl_piece){false, &ids[0], 1};
    pieces[1] = (tk_tpl_piece){true, NULL, 0};
    pieces[2] = (tk_tpl_piece){false, &ids[1], 1};
    return add_template(t, pieces, 3, where);
}

static mn_status load_post(mn_tokenizer *t, const cJSON *j, const char *where, int depth) {
    if (absent(j) && depth == 0) return MN_OK;
    if (depth > TK_MAX_NESTING) return tk_fail(t, MN_E_FORMAT, "%s: Sequences nested too deep", where);
    const char *type;
    mn_status s = get_type(t, j, where, &type);
    if (s != MN_OK) return s;
    if (strcmp(type, "ByteLevel") == 0) return MN_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") == 0) return load_template(t, j, where);
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0)
        return load_cls_sep(t, j, where);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = get_array(t, j, "processors", where);
        if (!arr) return MN_E_FORMAT;
        int i = 0;
        for (const cJSON *c = arr->child; c; c = c->next, i++) {
            char w[WHERE];
            mn_fmt(w, sizeof w, "%s.processors[%d]", where, i);
            if ((s = load_post(t, c, w, depth + 1)) != MN_OK) return s;
        }
        return MN_OK;
    }
    return unsupported(t, where, type, "ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing, Sequence");
}

static mn_status load_decoder(mn_tokenizer *t, const cJSON *j) {
    if (absent(j)) return MN_OK;
    const char *type;
    mn_status s = get_type(t, j, "decoder", &type);
    if (s != MN_OK) return s;
    if (strcmp(type, "Sequence") == 0) { /* accepted when it holds exactly one ByteLevel */
        const cJSON *arr = get_array(t, j, "decoders", "decoder");
        if (!arr) return MN_E_FORMAT;
        if (cJSON_GetArraySize(arr) != 1)
            return tk_fail(t, MN_E_UNSUPPORTED, "decoder: a Sequence of %d decoders is not supported (only one "
                           "ByteLevel)", cJSON_GetArraySize(arr));
        j = arr->child;
        if ((s = get_type(t, j, "decoder.decoders[0]", &type)) != MN_OK) return s;
        if (strcmp(type, "ByteLevel") != 0) return unsupported(t, "decoder.decoders[0]", type, "ByteLevel");
    }
    if (strcmp(type, "ByteLevel") != 0) return unsupported(t, "decoder", type, "ByteLevel, Sequence[ByteLevel]");
    t->decode_bytelevel = true;
    return MN_OK;
}

/* ---- the file ------------------------------------------------------------------------------------ */

/* cJSON turns "\u0000" into a NUL that would cut a string short: refused. */
static bool has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 5 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && s[i + 2] == '0' && s[i + 3] == '0' && s[i + 4] == '0' && s[i + 5] == '0') return true;
        i++; /* skip the escaped character ("\\\\u0000" is text) */
    }
    return false;
}

mn_status tk_load_json(mn_tokenizer *t, const char *json, size_t n) {
    tk_bytelevel_init(&t->bl);
    t->max_id = -1;
    if (memchr(json, 0, n)) return tk_fail(t, MN_E_FORMAT, "contains a NUL byte at offset %zu",
                                          (size_t)((const char *)memchr(json, 0, n) - json));
    if (has_nul_escape(json, n))
        return tk_fail(t, MN_E_FORMAT, "has a \\u0000 escape: NUL characters in strings are not supported");
    char *copy = malloc(n + 1);
    if (!copy) return tk_fail(t, MN_E_NOMEM, "out of memory copying %zu bytes of JSON", n);
    memcpy(copy, json, n);
    copy[n] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, n, &end, false);
    mn_status s = MN_OK;
    if (!root) {
        size_t at = end && end >= copy && end <= copy + n ? (size_t)(end - copy) : 0;
        s = tk_fail(t, MN_E_FORMAT, "is not valid JSON (error near byte %zu of %zu)", at, n);
    } else {
        for (const char *p = end; p && p < copy + n && s == MN_OK; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
                s = tk_fail(t, MN_E_FORMAT, "has bytes after the JSON value (at byte %zu)", (size_t)(p - copy));
        if (s == MN_OK && !cJSON_IsObject(root)) s = tk_fail(t, MN_E_FORMAT, "is %s, not a JSON object",
                                                               kind_of(root));
    }
    if (s == MN_OK) {
        const cJSON *version = field(root, "version");
        if (!absent(version) && !(cJSON_IsString(version) && strcmp(version->valuestring, "1.0") == 0))
            s = tk_fail(t, MN_E_FORMAT, "version is not \"1.0\" (the only tokenizer.json version)");
    }
    if (s == MN_OK) {
        const cJSON *model = field(root, "model");
        s = absent(model) ? tk_fail(t, MN_E_FORMAT, "model is missing: not a tokenizer.json?") : load_model(t, model);
    }
    if (s == MN_OK) s = load_normalizer(t, field(root, "normalizer"), "normalizer", 0);
    if (s == MN_OK) s = load_added(t, field(root, "added_tokens"));
    if (s == MN_OK && !absent(field(root, "pre_tokenizer")))
        s = load_pre(t, field(root, "pre_tokenizer"), "pre_tokenizer", 0, &t->pre);
    if (s == MN_OK) s = load_post(t, field(root, "post_processor"), "post_processor", 0);
    if (s == MN_OK) s = load_decoder(t, field(root, "decoder"));
    if (s == MN_OK) {
        static const char *const ignored[] = {"truncation", "padding"};
        for (size_t k = 0; k < MN_ARRAY_LEN(ignored); k++)
            if (!absent(field(root, ignored[k])))
                mn_logf(MN_LOG_WARN, "tokenizer: %s is set in the file and ignored (encode returns every token)",
                        ignored[k]);
    }
    if (s == MN_OK) s = tk_added_index(t);
    cJSON_Delete(root);
    free(copy);
    return s;
}

void tk_free_contents(mn_tokenizer *t) {
    tk_smap_free(&t->bpe.vocab);
    tk_map_free(&t->bpe.vocab_r);
    tk_map_free(&t->bpe.merges);
    tk_smap_free(&t->added_by_content);
    tk_map_free(&t->added_by_id);
    tk_smap_free(&t->special);
    free(t->norms);
    tk_pre_free(t->pre);
    tk_regex_free(t->gpt2_re);
    free(t->post);
    free(t->syms);
    free(t->heap);
    free(t->key);
    tk_arena_free(&t->arena);
}
