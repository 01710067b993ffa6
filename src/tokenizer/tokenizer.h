/* tokenizer.h - internal types of the text tokenizer (mn_tokenizer).
 *
 * The stage turns text into token ids and back, the way the Hugging Face
 * `tokenizers` library does for a tokenizer.json holding a byte-level BPE
 * model (GPT-2, Llama-3, SmolLM2, Qwen2 style). Pipeline of one encode:
 *   added tokens (not normalized) -> normalizer -> added tokens (normalized)
 *   -> pre-tokenizer -> BPE model -> post-processor (template)
 * Files: load.c reads tokenizer.json; split.c the added tokens, normalizer
 * and pre-tokenizers; regex.c the PCRE2 patterns; bpe.c the model;
 * tokenizer.c the public calls (encode, decode, look-ups); util.c arenas,
 * hash maps, UTF-8 and the byte-level alphabet.
 *
 * Does not: WordPiece, Unigram or WordLevel models, normalizers other than
 * the Unicode normal forms, truncation or padding, offsets, pairs of
 * sequences (see docs/ARCHITECTURE.md, "Tokenizer").
 */
#ifndef MN_TOKENIZER_H
#define MN_TOKENIZER_H

#include "core/common.h"

/* ---- arena: chunked, pointers stay valid until tk_arena_free ------------- */

typedef struct tk_block tk_block;
typedef struct tk_arena {
    tk_block *head;
} tk_arena;
void *tk_alloc(tk_arena *a, size_t n); /* 8-aligned; NULL when out of memory */
/* A NUL-terminated copy of s[0..n). */
char *tk_strndup(tk_arena *a, const char *s, size_t n);
void tk_arena_free(tk_arena *a);

/* ---- growable arrays ------------------------------------------------------ */

/* Grows *v (element size esz) so that it holds at least need elements. */
bool tk_grow(void **v, size_t *cap, size_t need, size_t esz);

typedef struct tk_ids {
    int32_t *v;
    size_t n, cap;
} tk_ids;
bool tk_ids_push(tk_ids *a, int32_t id);

/* ---- hash maps -------------------------------------------------------------- */

/* String -> int32. Keys are not copied: they must outlive the map. */
typedef struct tk_smap_ent {
    const char *s;
    uint32_t n, hash;
    int32_t v;
} tk_smap_ent;
typedef struct tk_smap {
    tk_smap_ent *e;
    size_t cap, count; /* cap: 0 or a power of two */
} tk_smap;
/* 1 inserted, 0 already there (*old gets its value, nothing changes), -1 out of memory. */
int tk_smap_put(tk_smap *m, const char *s, size_t n, int32_t v, int32_t *old);
bool tk_smap_get(const tk_smap *m, const char *s, size_t n, int32_t *v);
void tk_smap_free(tk_smap *m);

/* uint64 -> uint64. */
typedef struct tk_map {
    uint64_t *k, *v;
    uint8_t *used;
    size_t cap, count;
} tk_map;
/* 1 inserted, 0 replaced (*old gets the previous value when old != NULL), -1 out of memory. */
int tk_map_put(tk_map *m, uint64_t k, uint64_t v, uint64_t *old);
bool tk_map_get(const tk_map *m, uint64_t k, uint64_t *v);
void tk_map_free(tk_map *m);

/* ---- UTF-8 and Unicode ------------------------------------------------------ */

/* Length of the (valid) UTF-8 character starting at s[0]; *cp gets its code point. */
size_t tk_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 into out (4 bytes room); returns the length. */
size_t tk_utf8_encode(char *out, uint32_t cp);
/* Unicode general category N (Nd, Nl, No): Rust's char::is_numeric. */
bool tk_is_numeric(uint32_t cp);
/* The White_Space property: Rust's char::is_whitespace and regex \s. */
bool tk_is_white_space(uint32_t cp);
/* A word character as the Rust regex \w (letters, marks, Nd, Nl, Pc, ZWJ/ZWNJ). */
bool tk_is_word(uint32_t cp);
/* Appends to *out the lossy UTF-8 form of b[0..n) (Rust's
 * String::from_utf8_lossy: each maximal invalid subpart -> U+FFFD). */
bool tk_utf8_lossy(char **out, size_t *len, size_t *cap, const uint8_t *b, size_t n);

/* The GPT-2 byte-level alphabet: byte b <-> a printable code point. */
typedef struct tk_bytelevel {
    char utf8[256][3]; /* byte -> its character, UTF-8, NUL-terminated */
    uint8_t len[256];
    int16_t byte_of[324]; /* code point -> byte, -1 if not in the alphabet */
} tk_bytelevel;
void tk_bytelevel_init(tk_bytelevel *bl);

/* ---- regular expressions (PCRE2, UTF + UCP, Oniguruma-compatible classes) --- */

typedef struct tk_regex tk_regex;
/* Compiles pattern (n bytes). literal: match the text as is (Split's String
 * pattern). \s \S \w \W \h \H outside classes (and \s \w \h inside) are
 * rewritten to Oniguruma's meaning first. Errors name the pattern. */
mn_status tk_regex_compile(tk_regex **out, const char *pattern, size_t n, bool literal, char *err, size_t cap);
void tk_regex_free(tk_regex *re);

typedef struct tk_span {
    size_t a, b; /* [a, b) */
    bool match;
} tk_span;
typedef struct tk_spans {
    tk_span *v;
    size_t n, cap;
} tk_spans;
bool tk_spans_push(tk_spans *s, size_t a, size_t b, bool match);
/* Covers s[0..n) with the matches of re and the gaps between them, as the
 * library's find_matches does with onig's find_iter (an empty match right
 * after the previous match is skipped). n == 0 gives one empty gap. */
mn_status tk_regex_spans(tk_regex *re, tk_spans *out, const char *s, size_t n, char *err, size_t cap);

/* ---- the tokenizer ------------------------------------------------------------ */

#define TK_MAX_NESTING 8 /* Sequence inside Sequence, in tokenizer.json */

typedef enum tk_norm_kind { TK_NORM_NFC, TK_NORM_NFD, TK_NORM_NFKC, TK_NORM_NFKD } tk_norm_kind;

typedef enum tk_behavior {
    TK_SPLIT_REMOVED,
    TK_SPLIT_ISOLATED,
    TK_SPLIT_MERGED_WITH_PREVIOUS,
    TK_SPLIT_MERGED_WITH_NEXT,
    TK_SPLIT_CONTIGUOUS
} tk_behavior;

typedef enum tk_pre_kind { TK_PRE_BYTELEVEL, TK_PRE_SPLIT, TK_PRE_DIGITS, TK_PRE_SEQUENCE } tk_pre_kind;
typedef struct tk_pre {
    tk_pre_kind kind;
    bool add_prefix_space, use_regex; /* ByteLevel */
    tk_regex *re;                     /* Split (owned) */
    tk_behavior behavior;             /* Split */
    bool invert;                      /* Split */
    bool individual_digits;           /* Digits */
    struct tk_pre **items;            /* Sequence (owned) */
    int n_items;
} tk_pre;

typedef struct tk_added {
    const char *content; /* as in the file */
    const char *match;   /* what is searched: the normalized content for normalized tokens */
    size_t match_len;
    int32_t id;
    bool single_word, lstrip, rstrip, normalized, special;
} tk_added;

/* One step of the post-processor: a template of special-token id lists and
 * the sequence itself (TemplateProcessing, RobertaProcessing, BertProcessing). */
typedef struct tk_tpl_piece {
    bool is_sequence;
    const int32_t *ids; /* special: its ids (arena) */
    size_t n_ids;
} tk_tpl_piece;
typedef struct tk_template {
    tk_tpl_piece *pieces;
    size_t n;
} tk_template;

typedef struct tk_bpe {
    tk_smap vocab;   /* token -> id */
    tk_map vocab_r;  /* id -> index into tokens */
    const char **tokens;
    uint32_t *token_len;
    size_t n_tokens;
    tk_map merges;   /* (a_id << 32 | b_id) -> (rank << 32 | new_id) */
    size_t n_merges;
    const char *unk_token; /* NULL: none */
    int32_t unk_id;        /* -1 when unk_token is not in the vocabulary */
    bool fuse_unk, byte_fallback, ignore_merges;
    const char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix (NULL: none) */
    size_t prefix_len, suffix_len;
    int32_t byte_ids[256]; /* byte_fallback: id of "<0xAB>", -1 if absent */
} tk_bpe;

struct mn_tokenizer {
    char err[512];
    tk_arena arena; /* every string and table of the loaded file */
    tk_bytelevel bl;
    tk_bpe bpe;

    tk_added *added;
    size_t n_added;
    tk_smap added_by_content; /* content -> index into added */
    tk_map added_by_id;       /* id -> index into added */
    tk_smap special;          /* contents of the special tokens (value unused) */
    /* Matching: for each first byte, the indices of the added tokens of that
     * set (raw: normalized == false, norm: normalized == true), longest first. */
    uint32_t *raw_first[256], *norm_first[256];
    uint32_t n_raw_first[256], n_norm_first[256];

    tk_norm_kind *norms;
    int n_norms;
    tk_pre *pre;        /* NULL: none */
    tk_regex *gpt2_re;  /* the ByteLevel pattern, when a ByteLevel uses its regex */
    tk_template *post;  /* applied in order when special tokens are added */
    int n_post;
    bool decode_bytelevel; /* decoder ByteLevel (else: tokens joined by spaces) */
    int32_t max_id;

    /* Scratch of the BPE model, reused across calls (bpe.c). */
    struct tk_sym *syms;
    size_t syms_cap;
    struct tk_merge *heap;
    size_t heap_cap;
    char *key;
    size_t key_cap;
};

/* load.c: parses tokenizer.json text (n bytes) into t (zeroed by the caller);
 * on failure t->err says why (the caller adds the file's name). */
mn_status tk_load_json(mn_tokenizer *t, const char *json, size_t n);
void tk_free_contents(mn_tokenizer *t);
void tk_pre_free(tk_pre *p);

/* bpe.c: appends the ids of one pre-token (byte-level text) to out. */
mn_status tk_bpe_tokenize(mn_tokenizer *t, tk_ids *out, const char *s, size_t n);
/* Builds the merge table from pairs of token strings; errors name the merge. */
mn_status tk_bpe_add_merge(mn_tokenizer *t, const char *a, const char *b, size_t rank);

/* split.c: the encode pipeline up to the model. */
typedef struct tk_piece {
    const char *s;
    size_t n;
    int32_t id; /* >= 0: an added token, final */
} tk_piece;
typedef struct tk_pieces {
    tk_piece *v;
    size_t n, cap;
} tk_pieces;
bool tk_pieces_push(tk_pieces *p, const char *s, size_t n, int32_t id);
/* Text (valid UTF-8) -> pieces: added tokens found, normalized, pre-tokenized. */
mn_status tk_split_text(mn_tokenizer *t, tk_pieces *out, tk_arena *scratch, const char *text, size_t len,
                        bool special_as_text);
/* Indexes the added tokens for matching (after load). */
mn_status tk_added_index(mn_tokenizer *t);
/* Applies the normalizers to s[0..n); *out lives in scratch. */
mn_status tk_normalize(mn_tokenizer *t, tk_arena *scratch, const char *s, size_t n, const char **out,
                       size_t *out_n);

mn_status tk_fail(mn_tokenizer *t, mn_status s, const char *fmt, ...) MN_PRINTF(3, 4);

#endif
