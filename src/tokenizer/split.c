/* split.c - text -> pieces for the model: added tokens, normalizer,
 * pre-tokenizers. Mirrors the library's AddedVocabulary::extract_and_normalize
 * followed by the pre-tokenizer.
 *
 * Does:
 * - Added tokens are found leftmost-longest (as the library's Aho-Corasick
 *   automaton), first those with normalized=false on the raw text, then, in
 *   each remaining piece after normalization, those with normalized=true.
 *   single_word (no \w character on either side), lstrip/rstrip (White_Space
 *   around the token joins it) and "special tokens as text" behave as there;
 *   a match refused by single_word is not retried shorter.
 * - Normalizers: the Unicode normal forms NFC, NFD, NFKC, NFKD (utf8proc).
 * - Pre-tokenizers: ByteLevel (add_prefix_space, the GPT-2 pattern when
 *   use_regex, then bytes -> the byte-level alphabet), Split (pattern or
 *   literal string, the five delimiter behaviours, invert), Digits
 *   (individual or runs of Unicode numeric characters), Sequence.
 * Empty pieces are dropped after every split, as in the library.
 *
 * Does not: keep offsets into the original text.
 */
#include "tokenizer/tokenizer.h"

#include <utf8proc.h>

/* ---- added tokens --------------------------------------------------------------- */

static int by_length_desc(const void *x, const void *y, void *ctx) {
    const mn_tokenizer *t = ctx;
    size_t a = t->added[*(const uint32_t *)x].match_len, b = t->added[*(const uint32_t *)y].match_len;
    if (a != b) return a > b ? -1 : 1;
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    return i < j ? -1 : i > j;
}

/* Insertion sort with a context (qsort_r is not C17); buckets are small. */
static void sort_bucket(uint32_t *v, size_t n, const mn_tokenizer *t) {
    for (size_t i = 1; i < n; i++) {
        uint32_t x = v[i];
        size_t j = i;
        while (j > 0 && by_length_desc(&x, &v[j - 1], (void *)t) < 0) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

mn_status tk_added_index(mn_tokenizer *t) {
    for (int set = 0; set < 2; set++) {
        uint32_t **first = set ? t->norm_first : t->raw_first;
        uint32_t *count = set ? t->n_norm_first : t->n_raw_first;
        memset(count, 0, 256 * sizeof *count);
        for (size_t i = 0; i < t->n_added; i++)
            if (t->added[i].normalized == (set == 1) && t->added[i].match_len)
                count[(uint8_t)t->added[i].match[0]]++;
        for (int b = 0; b < 256; b++) {
            first[b] = NULL;
            if (!count[b]) continue;
            first[b] = tk_alloc(&t->arena, count[b] * sizeof(uint32_t));
            if (!first[b]) return tk_fail(t, MN_E_NOMEM, "out of memory indexing the added tokens");
            count[b] = 0;
        }
        for (size_t i = 0; i < t->n_added; i++) {
            const tk_added *a = &t->added[i];
            if (a->normalized != (set == 1) || !a->match_len) continue;
            uint8_t b = (uint8_t)a->match[0];
            first[b][count[b]++] = (uint32_t)i;
        }
        for (int b = 0; b < 256; b++) sort_bucket(first[b], count[b], t);
    }
    return MN_OK;
}

/* Start of the character before s[i] (i > 0, valid UTF-8). */
static size_t prev_char(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80);
    return i;
}

/* Finds the added tokens of one set in s[0..n) and appends the pieces. */
static mn_status find_added(mn_tokenizer *t, tk_pieces *out, const char *s, size_t n, bool normalized_set,
                            bool special_as_text) {
    uint32_t **first = normalized_set ? t->norm_first : t->raw_first;
    const uint32_t *count = normalized_set ? t->n_norm_first : t->n_raw_first;
    size_t start_offset = 0, pos = 0;
    while (pos < n) {
        const tk_added *tok = NULL;
        size_t p = pos;
        for (; p < n && !tok; p++) {
            uint8_t b = (uint8_t)s[p];
            for (uint32_t k = 0; k < count[b]; k++) {
                const tk_added *a = &t->added[first[b][k]];
                if (a->match_len <= n - p && memcmp(s + p, a->match, a->match_len) == 0) {
                    tok = a;
                    break;
                }
            }
        }
        if (!tok) break;
        size_t start = p - 1, stop = start + tok->match_len;
        pos = stop; /* the next search starts after this match, used or not */
        if (special_as_text && tok->special) continue;
        uint32_t cp;
        if (tok->single_word) {
            bool word_before = start > 0 && (tk_utf8_decode(s + prev_char(s, start), n, &cp), tk_is_word(cp));
            bool word_after = stop < n && (tk_utf8_decode(s + stop, n - stop, &cp), tk_is_word(cp));
            if (word_before || word_after) continue;
        }
        if (tok->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t q = prev_char(s, ns);
                tk_utf8_decode(s + q, n - q, &cp);
                if (!tk_is_white_space(cp)) break;
                ns = q;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (tok->rstrip) {
            while (stop < n) {
                size_t l = tk_utf8_decode(s + stop, n - stop, &cp);
                if (!tk_is_white_space(cp)) break;
                stop += l;
            }
        }
        if (start > stop) start = stop; /* overlapping strips: the library would panic here */
        if (start_offset < start && !tk_pieces_push(out, s + start_offset, start - start_offset, -1))
            return MN_E_NOMEM;
        if (!tk_pieces_push(out, s + start, stop - start, tok->id)) return MN_E_NOMEM;
        start_offset = stop;
    }
    if (start_offset < n && !tk_pieces_push(out, s + start_offset, n - start_offset, -1)) return MN_E_NOMEM;
    return MN_OK;
}

/* ---- normalizer ------------------------------------------------------------------------ */

mn_status tk_normalize(mn_tokenizer *t, tk_arena *scratch, const char *s, size_t n, const char **out,
                       size_t *out_n) {
    *out = s;
    *out_n = n;
    for (int i = 0; i < t->n_norms; i++) {
        int opts = UTF8PROC_STABLE;
        switch (t->norms[i]) {
        case TK_NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
        case TK_NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
        case TK_NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        case TK_NORM_NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        }
        if (*out_n > (size_t)PTRDIFF_MAX / 16)
            return tk_fail(t, MN_E_INVALID, "encode: %zu bytes of text are too many to normalize", *out_n);
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)*out, (utf8proc_ssize_t)*out_n, &dst,
                                          (utf8proc_option_t)opts);
        if (r < 0) {
            free(dst);
            return tk_fail(t, r == UTF8PROC_ERROR_NOMEM ? MN_E_NOMEM : MN_E_INVALID, "encode: normalizer: %s",
                           utf8proc_errmsg(r));
        }
        char *copy = tk_strndup(scratch, (const char *)dst, (size_t)r);
        free(dst);
        if (!copy) return tk_fail(t, MN_E_NOMEM, "encode: out of memory in the normalizer");
        *out = copy;
        *out_n = (size_t)r;
    }
    return MN_OK;
}

/* ---- pre-tokenizers ----------------------------------------------------------------------- */

/* Digits: each numeric character a match (Rust char::is_numeric). */
static mn_status digit_spans(tk_spans *sp, const char *s, size_t n) {
    sp->n = 0;
    if (n == 0) return tk_spans_push(sp, 0, 0, false) ? MN_OK : MN_E_NOMEM;
    size_t last = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tk_utf8_decode(s + i, n - i, &cp);
        if (tk_is_numeric(cp)) {
            if (last < i && !tk_spans_push(sp, last, i, false)) return MN_E_NOMEM;
            if (!tk_spans_push(sp, i, i + l, true)) return MN_E_NOMEM;
            last = i + l;
        }
        i += l;
    }
    if (n > last && !tk_spans_push(sp, last, n, false)) return MN_E_NOMEM;
    return MN_OK;
}

/* Applies a delimiter behaviour to sp (as NormalizedString::split) and
 * appends the non-empty pieces of s. acc is scratch. */
static mn_status split_by(tk_pieces *out, tk_spans *acc, const char *s, const tk_spans *sp, tk_behavior beh,
                          bool invert) {
    acc->n = 0;
    bool prev = false;
    size_t n = sp->n;
    for (size_t k = 0; k < n; k++) {
        size_t i = beh == TK_SPLIT_MERGED_WITH_NEXT ? n - 1 - k : k;
        tk_span x = sp->v[i];
        bool m = x.match != invert;
        bool ok = true;
        switch (beh) {
        case TK_SPLIT_ISOLATED: ok = tk_spans_push(acc, x.a, x.b, false); break;
        case TK_SPLIT_REMOVED: ok = tk_spans_push(acc, x.a, x.b, m); break;
        case TK_SPLIT_CONTIGUOUS:
            if (m == prev && acc->n) acc->v[acc->n - 1].b = x.b;
            else ok = tk_spans_push(acc, x.a, x.b, false);
            break;
        case TK_SPLIT_MERGED_WITH_PREVIOUS:
            if (m && !prev && acc->n) acc->v[acc->n - 1].b = x.b;
            else ok = tk_spans_push(acc, x.a, x.b, false);
            break;
        case TK_SPLIT_MERGED_WITH_NEXT:
            if (m && !prev && acc->n) acc->v[acc->n - 1].a = x.a;
            else ok = tk_spans_push(acc, x.a, x.b, false);
            break;
        }
        if (!ok) return MN_E_NOMEM;
        prev = m;
    }
    for (size_t k = 0; k < acc->n; k++) {
        size_t i = beh == TK_SPLIT_MERGED_WITH_NEXT ? acc->n - 1 - k : k;
        const tk_span *x = &acc->v[i];
        if (x->match || x->b <= x->a) continue; /* removed, or empty */
        if (!tk_pieces_push(out, s + x->a, x->b - x->a, -1)) return MN_E_NOMEM;
    }
    return MN_OK;
}

typedef struct pre_ctx {
    mn_tokenizer *t;
    tk_arena *scratch;
    tk_spans spans, acc;
} pre_ctx;

static mn_status bytelevel_piece(pre_ctx *c, const tk_pre *p, tk_pieces *out, const char *s, size_t n) {
    mn_tokenizer *t = c->t;
    if (n == 0) return MN_OK;
    if (p->add_prefix_space && s[0] != ' ') {
        char *x = tk_alloc(c->scratch, n + 1);
        if (!x) return MN_E_NOMEM;
        x[0] = ' ';
        memcpy(x + 1, s, n);
        s = x;
        n++;
    }
    size_t first = out->n;
    if (p->use_regex) {
        mn_status st = tk_regex_spans(t->gpt2_re, &c->spans, s, n, t->err, sizeof t->err);
        if (st != MN_OK) return st;
        st = split_by(out, &c->acc, s, &c->spans, TK_SPLIT_ISOLATED, false);
        if (st != MN_OK) return st;
    } else if (!tk_pieces_push(out, s, n, -1)) {
        return MN_E_NOMEM;
    }
    for (size_t k = first; k < out->n; k++) { /* bytes -> the byte-level alphabet */
        tk_piece *pc = &out->v[k];
        size_t len = 0;
        for (size_t i = 0; i < pc->n; i++) len += t->bl.len[(uint8_t)pc->s[i]];
        char *x = tk_alloc(c->scratch, len + 1), *w = x;
        if (!x) return MN_E_NOMEM;
        for (size_t i = 0; i < pc->n; i++) {
            uint8_t b = (uint8_t)pc->s[i];
            memcpy(w, t->bl.utf8[b], t->bl.len[b]);
            w += t->bl.len[b];
        }
        *w = 0;
        pc->s = x;
        pc->n = len;
    }
    return MN_OK;
}

static mn_status pre_apply(pre_ctx *c, const tk_pre *p, const tk_pieces *in, tk_pieces *out) {
    mn_status st = MN_OK;
    out->n = 0;
    if (p->kind == TK_PRE_SEQUENCE) {
        tk_pieces a = {0}, b = {0};
        const tk_pieces *cur = in;
        for (int i = 0; i < p->n_items && st == MN_OK; i++) {
            tk_pieces *dst = i == p->n_items - 1 ? out : (i % 2 ? &b : &a);
            st = pre_apply(c, p->items[i], cur, dst);
            cur = dst;
        }
        if (st == MN_OK && p->n_items == 0)
            for (size_t k = 0; k < in->n && st == MN_OK; k++)
                if (!tk_pieces_push(out, in->v[k].s, in->v[k].n, in->v[k].id)) st = MN_E_NOMEM;
        free(a.v);
        free(b.v);
        return st;
    }
    for (size_t k = 0; k < in->n && st == MN_OK; k++) {
        const tk_piece *pc = &in->v[k];
        if (pc->id >= 0) {
            if (!tk_pieces_push(out, pc->s, pc->n, pc->id)) st = MN_E_NOMEM;
            continue;
        }
        switch (p->kind) {
        case TK_PRE_BYTELEVEL: st = bytelevel_piece(c, p, out, pc->s, pc->n); break;
        case TK_PRE_SPLIT:
            st = tk_regex_spans(p->re, &c->spans, pc->s, pc->n, c->t->err, sizeof c->t->err);
            if (st == MN_OK) st = split_by(out, &c->acc, pc->s, &c->spans, p->behavior, p->invert);
            break;
        case TK_PRE_DIGITS:
            st = digit_spans(&c->spans, pc->s, pc->n);
            if (st == MN_OK)
                st = split_by(out, &c->acc, pc->s, &c->spans,
                              p->individual_digits ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS, false);
            break;
        case TK_PRE_SEQUENCE: break; /* handled above */
        }
    }
    return st;
}

/* ---- the whole split ---------------------------------------------------------------------- */

mn_status tk_split_text(mn_tokenizer *t, tk_pieces *out, tk_arena *scratch, const char *text, size_t len,
                        bool special_as_text) {
    tk_pieces a = {0}, b = {0};
    mn_status st = find_added(t, &a, text, len, false, special_as_text);
    for (size_t k = 0; k < a.n && st == MN_OK; k++) {
        if (a.v[k].id >= 0) {
            if (!tk_pieces_push(&b, a.v[k].s, a.v[k].n, a.v[k].id)) st = MN_E_NOMEM;
            continue;
        }
        const char *ns;
        size_t nn;
        st = tk_normalize(t, scratch, a.v[k].s, a.v[k].n, &ns, &nn);
        if (st == MN_OK) st = find_added(t, &b, ns, nn, true, special_as_text);
    }
    if (st == MN_OK) {
        if (t->pre) {
            pre_ctx c = {t, scratch, {0}, {0}};
            st = pre_apply(&c, t->pre, &b, out);
            free(c.spans.v);
            free(c.acc.v);
        } else {
            out->n = 0;
            for (size_t k = 0; k < b.n && st == MN_OK; k++)
                if (!tk_pieces_push(out, b.v[k].s, b.v[k].n, b.v[k].id)) st = MN_E_NOMEM;
        }
    }
    free(a.v);
    free(b.v);
    if (st == MN_E_NOMEM) return tk_fail(t, st, "encode: out of memory splitting %zu bytes of text", len);
    return st;
}
