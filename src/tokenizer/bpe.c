/* bpe.c - the BPE model: one pre-token (byte-level text) -> token ids.
 *
 * Does: what the library's BPE::tokenize does without dropout. With
 * ignore_merges a pre-token that is itself in the vocabulary is one token.
 * Otherwise each character becomes a symbol (continuing_subword_prefix on all
 * but the first, end_of_word_suffix on the last; byte_fallback "<0xAB>"
 * tokens or the unknown token for characters outside the vocabulary; a
 * character with neither is dropped, as the library does), then merges are
 * applied lowest rank first, leftmost first among equal ranks, with a binary
 * heap over a linked list of symbols: O(n log n) per pre-token. A queued
 * merge is still applied when the pair at its position now yields the same
 * token through another merge (the library checks only the new id); this
 * keeps results identical when two merges make the same token.
 * Also builds the merge table from tokenizer.json, refusing merges whose parts
 * or result are not in the vocabulary, duplicates, and merges that give back
 * one of their own parts.
 *
 * Does not: BPE dropout (refused at load), caching of repeated words.
 */
#include "tokenizer/tokenizer.h"

#include "io/text.h"

typedef struct tk_sym {
    int32_t c;
    int32_t prev, next; /* -1: none */
    uint32_t len;       /* bytes of input; 0 marks a symbol merged into its left neighbour */
} tk_sym;

typedef struct tk_merge {
    uint32_t rank, pos;
    int32_t new_id;
} tk_merge;

static bool merge_less(const tk_merge *x, const tk_merge *y) {
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static bool heap_push(mn_tokenizer *t, size_t *n, tk_merge m) {
    if (!tk_grow((void **)&t->heap, &t->heap_cap, *n + 1, sizeof *t->heap)) return false;
    tk_merge *h = t->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(&m, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = m;
    return true;
}

static tk_merge heap_pop(mn_tokenizer *t, size_t *n) {
    tk_merge *h = t->heap, top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const tk_merge *best = &last;
        if (l < *n && merge_less(&h[l], best)) m = l, best = &h[l];
        if (r < *n && merge_less(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = last;
    return top;
}

static bool merge_of(const tk_bpe *bpe, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    uint64_t v;
    if (!tk_map_get(&bpe->merges, ((uint64_t)(uint32_t)a << 32) | (uint32_t)b, &v)) return false;
    *rank = (uint32_t)(v >> 32);
    *new_id = (int32_t)(uint32_t)v;
    return true;
}

static bool sym_push(mn_tokenizer *t, size_t *n, int32_t c, uint32_t len) {
    if (*n >= INT32_MAX || !tk_grow((void **)&t->syms, &t->syms_cap, *n + 1, sizeof *t->syms)) return false;
    int32_t i = (int32_t)*n;
    if (i > 0) t->syms[i - 1].next = i;
    t->syms[i] = (tk_sym){c, i - 1, -1, len};
    (*n)++;
    return true;
}

/* The vocabulary key of one character: prefix + char + suffix as configured. */
static bool char_key(mn_tokenizer *t, const char *c, size_t clen, bool first, bool last, size_t *klen) {
    const tk_bpe *bpe = &t->bpe;
    size_t pre = !first && bpe->prefix ? bpe->prefix_len : 0, suf = last && bpe->suffix ? bpe->suffix_len : 0;
    size_t n = pre + clen + suf;
    if (!tk_grow((void **)&t->key, &t->key_cap, n + 1, 1)) return false;
    if (pre) memcpy(t->key, bpe->prefix, pre);
    memcpy(t->key + pre, c, clen);
    if (suf) memcpy(t->key + pre + clen, bpe->suffix, suf);
    t->key[n] = 0;
    *klen = n;
    return true;
}

mn_status tk_bpe_tokenize(mn_tokenizer *t, tk_ids *out, const char *s, size_t n) {
    const tk_bpe *bpe = &t->bpe;
    int32_t id;
    if (n == 0) return MN_OK;
    if (n > INT32_MAX) return tk_fail(t, MN_E_INVALID, "encode: a %zu-byte pre-token is too long for the BPE model", n);
    if (bpe->ignore_merges && tk_smap_get(&bpe->vocab, s, n, &id))
        return tk_ids_push(out, id) ? MN_OK : tk_fail(t, MN_E_NOMEM, "encode: out of memory");

    size_t ns = 0;
    bool unk = false;
    int32_t unk_id = -1;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t clen = tk_utf8_decode(s + i, n - i, &cp), klen;
        if (!char_key(t, s + i, clen, i == 0, i + clen == n, &klen)) goto nomem;
        if (tk_smap_get(&bpe->vocab, t->key, klen, &id)) {
            if (unk && !sym_push(t, &ns, unk_id, unk_len)) goto nomem;
            unk = false;
            if (!sym_push(t, &ns, id, (uint32_t)clen)) goto nomem;
            i += clen;
            continue;
        }
        if (bpe->byte_fallback) {
            bool all = true;
            for (size_t k = 0; k < klen && all; k++) all = bpe->byte_ids[(uint8_t)t->key[k]] >= 0;
            if (all) { /* as the library: a pending unknown token comes after these */
                for (size_t k = 0; k < klen; k++)
                    if (!sym_push(t, &ns, bpe->byte_ids[(uint8_t)t->key[k]], 1)) goto nomem;
                i += clen;
                continue;
            }
        }
        if (bpe->unk_token) {
            if (bpe->unk_id < 0) {
                char name[IO_ESC_NAME];
                return tk_fail(t, MN_E_FORMAT, "encode: the unknown token '%s' is not in the vocabulary",
                               io_esc(name, sizeof name, bpe->unk_token));
            }
            if (unk && bpe->fuse_unk) {
                unk_len += (uint32_t)clen;
            } else {
                if (unk && !sym_push(t, &ns, unk_id, unk_len)) goto nomem;
                unk = true;
                unk_id = bpe->unk_id;
                unk_len = (uint32_t)clen;
            }
        }
        i += clen;
    }
    if (unk && !sym_push(t, &ns, unk_id, unk_len)) goto nomem;

    tk_sym *sy = t->syms;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        uint32_t rank;
        int32_t nid;
        if (merge_of(bpe, sy[i].c, sy[i + 1].c, &rank, &nid) &&
            !heap_push(t, &nh, (tk_merge){rank, (uint32_t)i, nid}))
            goto nomem;
    }
    while (nh) {
        tk_merge top = heap_pop(t, &nh);
        sy = t->syms;
        tk_sym *cur = &sy[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        tk_sym right = sy[cur->next];
        uint32_t rank;
        int32_t nid;
        if (!merge_of(bpe, cur->c, right.c, &rank, &nid) || nid != top.new_id) continue; /* stale */
        sy[cur->next].len = 0;
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        if (right.next >= 0) sy[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0 && merge_of(bpe, sy[cur->prev].c, cur->c, &rank, &nid) &&
            !heap_push(t, &nh, (tk_merge){rank, (uint32_t)cur->prev, nid}))
            goto nomem;
        cur = &t->syms[top.pos];
        if (cur->next >= 0 && merge_of(bpe, cur->c, t->syms[cur->next].c, &rank, &nid) &&
            !heap_push(t, &nh, (tk_merge){rank, top.pos, nid}))
            goto nomem;
    }
    for (size_t i = 0; i < ns; i++)
        if (t->syms[i].len && !tk_ids_push(out, t->syms[i].c)) goto nomem;
    return MN_OK;
nomem:
    return tk_fail(t, MN_E_NOMEM, "encode: out of memory in the BPE model (pre-token of %zu bytes)", n);
}

mn_status tk_bpe_add_merge(mn_tokenizer *t, const char *a, const char *b, size_t rank) {
    tk_bpe *bpe = &t->bpe;
    char ea[IO_ESC_NAME], eb[IO_ESC_NAME];
    size_t la = strlen(a), lb = strlen(b);
    int32_t ia, ib, inew;
    if (rank > UINT32_MAX) return tk_fail(t, MN_E_FORMAT, "model.merges: more than 2^32 merges");
    if (!tk_smap_get(&bpe->vocab, a, la, &ia) || !tk_smap_get(&bpe->vocab, b, lb, &ib))
        return tk_fail(t, MN_E_FORMAT, "model.merges[%zu] ('%s' '%s'): '%s' is not in the vocabulary", rank,
                       io_esc(ea, sizeof ea, a), io_esc(eb, sizeof eb, b),
                       tk_smap_get(&bpe->vocab, a, la, NULL) ? eb : ea);
    if (lb < bpe->prefix_len)
        return tk_fail(t, MN_E_FORMAT, "model.merges[%zu] ('%s' '%s'): the right part is shorter than "
                       "continuing_subword_prefix", rank, io_esc(ea, sizeof ea, a), io_esc(eb, sizeof eb, b));
    /* The merged token: a, then b without the prefix's length (as the library). */
    size_t ln = la + lb - bpe->prefix_len;
    char stackbuf[256], *merged = ln < sizeof stackbuf ? stackbuf : malloc(ln + 1);
    if (!merged) return tk_fail(t, MN_E_NOMEM, "out of memory reading model.merges");
    memcpy(merged, a, la);
    memcpy(merged + la, b + bpe->prefix_len, lb - bpe->prefix_len);
    merged[ln] = 0;
    bool found = io_utf8_valid(merged, ln) && tk_smap_get(&bpe->vocab, merged, ln, &inew);
    char en[IO_ESC_NAME];
    if (!found) io_esc(en, sizeof en, merged);
    if (merged != stackbuf) free(merged);
    if (!found)
        return tk_fail(t, MN_E_FORMAT, "model.merges[%zu] ('%s' '%s'): the merged token '%s' is not in the vocabulary",
                       rank, io_esc(ea, sizeof ea, a), io_esc(eb, sizeof eb, b), en);
    if (inew == ia || inew == ib)
        return tk_fail(t, MN_E_FORMAT, "model.merges[%zu] ('%s' '%s') gives back one of its own parts (a cycle)",
                       rank, io_esc(ea, sizeof ea, a), io_esc(eb, sizeof eb, b));
    uint64_t old;
    int r = tk_map_put(&bpe->merges, ((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib,
                       ((uint64_t)rank << 32) | (uint32_t)inew, &old);
    if (r < 0) return tk_fail(t, MN_E_NOMEM, "out of memory reading model.merges");
    if (r == 0)
        return tk_fail(t, MN_E_FORMAT, "model.merges[%zu] ('%s' '%s') repeats model.merges[%u]", rank,
                       io_esc(ea, sizeof ea, a), io_esc(eb, sizeof eb, b), (unsigned)(old >> 32));
    bpe->n_merges++;
    return MN_OK;
}
