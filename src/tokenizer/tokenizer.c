/* tokenizer.c - the public tokenizer calls: load, encode, decode, look-ups.
 *
 * Does: reads tokenizer.json through io_open_read (regular files only, size
 * checked before reading), hands the text to load.c; encode checks the text
 * is UTF-8, splits it (split.c), runs the BPE model on each piece (bpe.c),
 * applies the post-processor templates; decode maps ids to token strings
 * (added tokens first, unknown ids skipped, special tokens skipped on
 * request), then through the ByteLevel decoder (byte-level characters ->
 * bytes -> lossy UTF-8) or, without a decoder, joins them with spaces: the
 * library's Tokenizer::decode.
 *
 * Does not: share a handle between threads (encode and decode reuse scratch
 * memory of the handle and set its error message).
 */
#include "tokenizer/tokenizer.h"

#include "io/file.h"
#include "io/text.h"

#include <inttypes.h>
#include <unistd.h>

/* Larger than any real tokenizer.json (Gemma's is about 33 MB). */
#define TK_MAX_FILE_BYTES ((uint64_t)512 << 20)

mn_status tk_fail(mn_tokenizer *t, mn_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return s;
}

static void set_err(char *err, size_t cap, const char *fmt, ...) MN_PRINTF(3, 4);
static void set_err(char *err, size_t cap, const char *fmt, ...) {
    if (!err || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(err, cap, fmt, ap);
    va_end(ap);
}

static mn_status load_text(mn_tokenizer **out, const char *json, size_t len, const char *path, char *err,
                           size_t errcap) {
    mn_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        set_err(err, errcap, "out of memory loading a tokenizer");
        return MN_E_NOMEM;
    }
    mn_status s = tk_load_json(t, json, len);
    if (s != MN_OK) {
        if (path) {
            char p[IO_ESC_PATH];
            set_err(err, errcap, "tokenizer '%s': %s", io_esc(p, sizeof p, path), t->err);
        } else {
            set_err(err, errcap, "tokenizer.json: %s", t->err);
        }
        mn_tokenizer_destroy(t);
        return s;
    }
    *out = t;
    return MN_OK;
}

mn_status mn_tokenizer_load_json(mn_tokenizer **out, const char *json, size_t len, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!out || (!json && len)) {
        set_err(err, errcap, "mn_tokenizer_load_json: %s is NULL", out ? "json" : "out");
        return MN_E_INVALID;
    }
    *out = NULL;
    return load_text(out, json ? json : "", len, NULL, err, errcap);
}

mn_status mn_tokenizer_load(mn_tokenizer **out, const char *path, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!out || !path) {
        set_err(err, errcap, "mn_tokenizer_load: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    *out = NULL;
    int fd;
    uint64_t size;
    mn_status s = io_open_read(path, &fd, &size, err, errcap);
    if (s != MN_OK) return s;
    char p[IO_ESC_PATH];
    if (size > TK_MAX_FILE_BYTES) {
        close(fd);
        set_err(err, errcap, "tokenizer '%s' is %" PRIu64 " bytes, more than the %" PRIu64 " MiB a tokenizer.json "
                "may have", io_esc(p, sizeof p, path), size, TK_MAX_FILE_BYTES >> 20);
        return MN_E_FORMAT;
    }
    char *buf = malloc(size ? (size_t)size : 1);
    if (!buf) {
        close(fd);
        set_err(err, errcap, "out of memory reading tokenizer '%s' (%" PRIu64 " bytes)", io_esc(p, sizeof p, path),
                size);
        return MN_E_NOMEM;
    }
    s = io_read_at(fd, 0, buf, (size_t)size, path, err, errcap);
    close(fd);
    if (s == MN_OK) s = load_text(out, buf, (size_t)size, path, err, errcap);
    free(buf);
    return s;
}

void mn_tokenizer_destroy(mn_tokenizer *t) {
    if (!t) return;
    tk_free_contents(t);
    free(t);
}

const char *mn_tokenizer_error(const mn_tokenizer *t) { return t ? t->err : "mn_tokenizer is NULL"; }

mn_status mn_tokenizer_encode(mn_tokenizer *t, int32_t *ids, size_t cap, size_t *n_ids, const char *text, size_t len,
                              unsigned flags) {
    if (!t) return MN_E_INVALID;
    t->err[0] = 0;
    if (n_ids) *n_ids = 0;
    if (!n_ids || (!ids && cap) || (!text && len))
        return tk_fail(t, MN_E_INVALID, "mn_tokenizer_encode: %s is NULL", !n_ids ? "n_ids" : !text ? "text" : "ids");
    if (flags & ~(unsigned)(MN_TOKENIZE_ADD_SPECIAL | MN_TOKENIZE_SPECIAL_AS_TEXT))
        return tk_fail(t, MN_E_INVALID, "mn_tokenizer_encode: unknown flags 0x%x", flags);
    if (!text) text = "";
    if (!io_utf8_valid(text, len))
        return tk_fail(t, MN_E_INVALID, "encode: the %zu-byte text is not valid UTF-8", len);

    tk_arena scratch = {0};
    tk_pieces pieces = {0};
    tk_ids res = {0}, tmp = {0};
    mn_status s = tk_split_text(t, &pieces, &scratch, text, len, flags & MN_TOKENIZE_SPECIAL_AS_TEXT);
    for (size_t k = 0; k < pieces.n && s == MN_OK; k++) {
        if (pieces.v[k].id >= 0) {
            if (!tk_ids_push(&res, pieces.v[k].id)) s = tk_fail(t, MN_E_NOMEM, "encode: out of memory");
        } else {
            s = tk_bpe_tokenize(t, &res, pieces.v[k].s, pieces.v[k].n);
        }
    }
    /* Post-processors in order; special pieces only when asked for (the
     * library's apply_template with add_special_tokens). */
    for (int p = 0; p < t->n_post && s == MN_OK; p++) {
        tmp.n = 0;
        const tk_template *tpl = &t->post[p];
        for (size_t i = 0; i < tpl->n && s == MN_OK; i++) {
            const tk_tpl_piece *pc = &tpl->pieces[i];
            const int32_t *v = pc->is_sequence ? res.v : pc->ids;
            size_t m = pc->is_sequence ? res.n : (flags & MN_TOKENIZE_ADD_SPECIAL) ? pc->n_ids : 0;
            for (size_t j = 0; j < m && s == MN_OK; j++)
                if (!tk_ids_push(&tmp, v[j])) s = tk_fail(t, MN_E_NOMEM, "encode: out of memory");
        }
        tk_ids swap = res;
        res = tmp;
        tmp = swap;
    }
    if (s == MN_OK) {
        *n_ids = res.n;
        if (cap && res.n) memcpy(ids, res.v, (res.n < cap ? res.n : cap) * sizeof *ids);
    }
    free(res.v);
    free(tmp.v);
    free(pieces.v);
    tk_arena_free(&scratch);
    return s;
}

/* The string decode uses for id (added tokens first); NULL if none. */
static const char *token_of(const mn_tokenizer *t, int32_t id, size_t *len) {
    uint64_t k;
    if (id < 0) return NULL;
    if (tk_map_get(&t->added_by_id, (uint64_t)id, &k)) {
        const tk_added *a = &t->added[k];
        *len = a->match == a->content ? strlen(a->content) : a->match_len;
        return a->match;
    }
    if (tk_map_get(&t->bpe.vocab_r, (uint64_t)id, &k)) {
        *len = t->bpe.token_len[k];
        return t->bpe.tokens[k];
    }
    return NULL;
}

mn_status mn_tokenizer_decode(mn_tokenizer *t, char *text, size_t cap, size_t *len, const int32_t *ids, size_t n_ids,
                              unsigned flags) {
    if (!t) return MN_E_INVALID;
    t->err[0] = 0;
    if (len) *len = 0;
    if (text && cap) text[0] = 0;
    if (!len || (!text && cap) || (!ids && n_ids))
        return tk_fail(t, MN_E_INVALID, "mn_tokenizer_decode: %s is NULL", !len ? "len" : !ids ? "ids" : "text");
    if (flags & ~(unsigned)MN_TOKENIZE_SKIP_SPECIAL)
        return tk_fail(t, MN_E_INVALID, "mn_tokenizer_decode: unknown flags 0x%x", flags);
    char *bytes = NULL, *out = NULL;
    size_t nb = 0, bcap = 0, nout = 0, ocap = 0;
    bool first = true, ok = true;
    for (size_t i = 0; i < n_ids && ok; i++) {
        size_t tl;
        const char *tok = token_of(t, ids[i], &tl);
        if (!tok) continue; /* unknown ids are skipped, as in the library */
        if ((flags & MN_TOKENIZE_SKIP_SPECIAL) && tk_smap_get(&t->special, tok, tl, NULL)) continue;
        if (!t->decode_bytelevel) { /* no decoder: tokens joined by spaces */
            ok = tk_grow((void **)&bytes, &bcap, nb + tl + 2, 1);
            if (ok && !first) bytes[nb++] = ' ';
            if (ok) memcpy(bytes + nb, tok, tl), nb += tl;
            first = false;
            continue;
        }
        /* ByteLevel: a token made only of byte-level characters gives their
         * bytes; any other token gives its own UTF-8. */
        ok = tk_grow((void **)&bytes, &bcap, nb + tl + 1, 1);
        size_t start = nb;
        bool all = true;
        for (size_t j = 0; j < tl && ok;) {
            uint32_t cp;
            j += tk_utf8_decode(tok + j, tl - j, &cp);
            if (cp >= MN_ARRAY_LEN(t->bl.byte_of) || t->bl.byte_of[cp] < 0) {
                all = false;
                break;
            }
            bytes[nb++] = (char)t->bl.byte_of[cp];
        }
        if (ok && !all) {
            nb = start;
            memcpy(bytes + nb, tok, tl);
            nb += tl;
        }
    }
    if (ok && t->decode_bytelevel) ok = tk_utf8_lossy(&out, &nout, &ocap, (const uint8_t *)bytes, nb);
    if (!ok) {
        free(bytes);
        free(out);
        return tk_fail(t, MN_E_NOMEM, "decode: out of memory decoding %zu ids", n_ids);
    }
    const char *res = t->decode_bytelevel ? out : bytes;
    size_t rn = t->decode_bytelevel ? nout : nb;
    *len = rn;
    if (cap) {
        size_t k = rn < cap - 1 ? rn : cap - 1;
        if (k) memcpy(text, res, k);
        text[k] = 0;
    }
    free(bytes);
    free(out);
    return MN_OK;
}

mn_status mn_tokenizer_token_to_id(mn_tokenizer *t, int32_t *id, const char *token) {
    if (!t) return MN_E_INVALID;
    t->err[0] = 0;
    if (!id || !token) return tk_fail(t, MN_E_INVALID, "mn_tokenizer_token_to_id: %s is NULL", id ? "token" : "id");
    *id = -1;
    size_t n = strlen(token);
    int32_t idx;
    if (tk_smap_get(&t->added_by_content, token, n, &idx)) {
        *id = t->added[idx].id;
        return MN_OK;
    }
    if (tk_smap_get(&t->bpe.vocab, token, n, id)) return MN_OK;
    char e[IO_ESC_NAME];
    return tk_fail(t, MN_E_NOT_FOUND, "token '%s' is not in the vocabulary", io_esc(e, sizeof e, token));
}

const char *mn_tokenizer_id_to_token(const mn_tokenizer *t, int32_t id) {
    size_t n;
    return t ? token_of(t, id, &n) : NULL;
}

int32_t mn_tokenizer_vocab_size(const mn_tokenizer *t) { return t ? t->max_id + 1 : 0; }

bool mn_tokenizer_is_special(const mn_tokenizer *t, int32_t id) {
    size_t n;
    const char *tok = t ? token_of(t, id, &n) : NULL;
    return tok && tk_smap_get(&t->special, tok, n, NULL);
}
