/* test_tokenizer.c - tests of the tokenizer (src/tokenizer, mn_tokenizer_*).
 *
 * Covers:
 * - the API in a few lines (load, encode a chat prompt, decode it back);
 * - hand-checked cases on small tokenizers built here: merge ranks (lowest
 *   first, leftmost on ties, two merges making one token), ignore_merges,
 *   the GPT-2 pattern on whitespace runs (\s+(?!\S)), U+180E (not a space
 *   for the library), contractions, Digits, Split behaviours, legacy "a b"
 *   merges, added tokens (special, lstrip/rstrip, single_word, normalized,
 *   special-as-text), NFC, templates (BOS), byte_fallback and unknown tokens,
 *   decode (skip special, unknown ids, lossy partial UTF-8), buffer sizing;
 * - hostile tokenizer.json texts: each refused with MN_E_FORMAT or
 *   MN_E_UNSUPPORTED and a message naming the field, never a crash;
 * - every file of tests/fuzz/corpus_tokenizer (seeds and past finds) through
 *   the fuzz target's checks;
 * - the fixtures in tests/fixtures/tokenizer: for each NAME.cases.json the
 *   ids and texts the Hugging Face tokenizers library gave for NAME.json
 *   (tests/fixtures/gen_tokenizer_node.js, gen_tokenizer.py). The js-* sets
 *   must be there (a missing one fails); the py-* sets, made by
 *   gen_tokenizer.py on a machine with the Python library, are checked when
 *   present and reported as SKIP otherwise.
 *
 * Does not: compare speed (a long-input case checks the run stays linear
 * enough to finish quickly).
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <libgen.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tokenizer/tokenizer.h"

/* The fuzz target's checks, replayed on its corpus (test_fuzz_corpus). */
#include "fuzz/fuzz_tokenizer.c"

/* ---- helpers -------------------------------------------------------------------- */

typedef struct sb {
    char *p;
    size_t n, cap;
} sb;

static void sb_put(sb *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_puts(sb *b, const char *s) { sb_put(b, s, strlen(s)); }

/* A JSON string literal of s (s is UTF-8). */
static void sb_json_str(sb *b, const char *s) {
    sb_puts(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') sb_put(b, "\\", 1);
        sb_put(b, s, 1);
    }
    sb_puts(b, "\"");
}

/* A tokenizer.json: the 256 byte-level characters with ids 0..255, then
 * extra tokens (comma list of "tok": id pairs, may be ""), merges (a JSON
 * array), and the other parts as JSON texts ("null" when absent). */
static char *make_json(const char *extra_vocab, const char *merges, const char *added, const char *normalizer,
                       const char *pre, const char *post, const char *decoder, const char *model_flags) {
    tk_bytelevel bl;
    tk_bytelevel_init(&bl);
    sb b = {0};
    sb_puts(&b, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":");
    sb_puts(&b, added);
    sb_puts(&b, ",\"normalizer\":");
    sb_puts(&b, normalizer);
    sb_puts(&b, ",\"pre_tokenizer\":");
    sb_puts(&b, pre);
    sb_puts(&b, ",\"post_processor\":");
    sb_puts(&b, post);
    sb_puts(&b, ",\"decoder\":");
    sb_puts(&b, decoder);
    sb_puts(&b, ",\"model\":{\"type\":\"BPE\",");
    sb_puts(&b, model_flags);
    sb_puts(&b, "\"vocab\":{");
    for (int i = 0; i < 256; i++) {
        char num[16];
        sb_json_str(&b, bl.utf8[i]);
        snprintf(num, sizeof num, ":%d,", i);
        sb_puts(&b, num);
    }
    sb_puts(&b, extra_vocab);
    if (b.p[b.n - 1] == ',') b.p[--b.n] = 0;
    sb_puts(&b, "},\"merges\":");
    sb_puts(&b, merges);
    sb_puts(&b, "}}");
    return b.p;
}

static const char *BL_PRE = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}";
static const char *BL_DEC = "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}";

static mn_tokenizer *load_or_fail(const char *json, int line) {
    mn_tokenizer *t = NULL;
    char err[512] = "";
    mn_status s = mn_tokenizer_load_json(&t, json, strlen(json), err, sizeof err);
    if (s != MN_OK) th_fail(__FILE__, line, "load: %s: %s", mn_status_str(s), err);
    else th_passed++;
    return t;
}

/* Encodes text (len bytes) and checks the token strings, given as one string
 * with tokens separated by '|'. */
static void expect_tokens_n(mn_tokenizer *t, const char *text, size_t len, unsigned flags, const char *want,
                            int line) {
    int32_t ids[512];
    size_t n = 0;
    mn_status s = mn_tokenizer_encode(t, ids, 512, &n, text, len, flags);
    if (s != MN_OK) {
        th_fail(__FILE__, line, "encode '%s': %s: %s", text, mn_status_str(s), mn_tokenizer_error(t));
        return;
    }
    sb got = {0};
    sb_puts(&got, "");
    for (size_t i = 0; i < n && i < 512; i++) {
        const char *tok = mn_tokenizer_id_to_token(t, ids[i]);
        if (i) sb_puts(&got, "|");
        sb_puts(&got, tok ? tok : "<?>");
    }
    if (strcmp(got.p, want) == 0) th_passed++;
    else th_fail(__FILE__, line, "encode '%s': got [%s], want [%s]", text, got.p, want);
    free(got.p);
}
#define expect_tokens(t, text, flags, want) expect_tokens_n(t, text, strlen(text), flags, want, __LINE__)

static void expect_decode(mn_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, const char *want,
                          size_t want_len, int line) {
    char out[1024];
    size_t len = 0;
    mn_status s = mn_tokenizer_decode(t, out, sizeof out, &len, ids, n, flags);
    if (s != MN_OK) th_fail(__FILE__, line, "decode: %s: %s", mn_status_str(s), mn_tokenizer_error(t));
    else if (len != want_len || memcmp(out, want, want_len) != 0)
        th_fail(__FILE__, line, "decode: got %zu bytes '%s', want %zu bytes '%s'", len, out, want_len, want);
    else th_passed++;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    sb b = {0};
    char chunk[65536];
    size_t k;
    sb_puts(&b, "");
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) sb_put(&b, chunk, k);
    fclose(f);
    *len = b.n;
    return b.p;
}

/* ---- hand-checked cases ------------------------------------------------------------------ */

/* Merges: ranks, ties, two merges making the same token, ignore_merges. */
static void test_merges(void) {
    const char *extra = "\"Ġw\":256,\"or\":257,\"Ġwor\":258,\"ld\":259,\"Ġworld\":260,\"ll\":261,\"He\":262,"
                        "\"Hell\":263,\"Hello\":264,\"bc\":265,\"ab\":266,\"abc\":267,\"Ġb\":268,\"ĠĠ\":269,"
                        "\"aa\":270,\"xyz\":271";
    const char *merges = "[[\"Ġ\",\"w\"],[\"o\",\"r\"],[\"Ġw\",\"or\"],[\"l\",\"d\"],[\"Ġwor\",\"ld\"],"
                         "[\"l\",\"l\"],[\"H\",\"e\"],[\"He\",\"ll\"],[\"Hell\",\"o\"],[\"b\",\"c\"],[\"a\",\"b\"],"
                         "[\"a\",\"bc\"],[\"Ġ\",\"b\"],[\"Ġ\",\"Ġ\"],[\"a\",\"a\"],[\"ab\",\"c\"]]";
    char *json = make_json(extra, merges, "[]", "null", BL_PRE, "null", BL_DEC, "");
    mn_tokenizer *t = load_or_fail(json, __LINE__);
    if (t) {
        expect_tokens(t, "Hello world", 0, "Hello|Ġworld");
        /* b c (rank 9) before a b (10), then a bc (11). */
        expect_tokens(t, "abc", 0, "abc");
        /* ties: leftmost first, "aaa" -> aa + a, "aaaa" -> aa + aa */
        expect_tokens(t, "aaa", 0, "aa|a");
        expect_tokens(t, "aaaa", 0, "aa|aa");
        /* xyz is in the vocabulary but no merge reaches it */
        expect_tokens(t, "xyz", 0, "x|y|z");
        /* the GPT-2 pattern: a run of spaces leaves its last space to the word */
        expect_tokens(t, "a  b", 0, "a|Ġ|Ġb");
        expect_tokens(t, "a   b", 0, "a|ĠĠ|Ġb");
        expect_tokens(t, "a   ", 0, "a|ĠĠ|Ġ"); /* one pre-token of 3 spaces: ĠĠ + Ġ */
        expect_tokens(t, "a \n b", 0, "a|Ġ|Ċ|Ġb");
        expect_tokens(t, "", 0, "");
        mn_tokenizer_destroy(t);
    }
    free(json);
    /* The same vocabulary with merges in the legacy "a b" form. */
    json = make_json(extra,
                     "[\"Ġ w\",\"o r\",\"Ġw or\",\"l d\",\"Ġwor ld\",\"l l\",\"H e\",\"He ll\",\"Hell o\",\"b c\","
                     "\"a b\",\"a bc\",\"Ġ b\",\"Ġ Ġ\",\"a a\",\"ab c\"]",
                     "[]", "null", BL_PRE, "null", BL_DEC, "");
    t = load_or_fail(json, __LINE__);
    if (t) {
        expect_tokens(t, "Hello world", 0, "Hello|Ġworld");
        expect_tokens(t, "abc", 0, "abc");
        mn_tokenizer_destroy(t);
    }
    free(json);
    /* a b before b c: "abc" -> ab + c -> abc through the other merge. */
    json = make_json("\"ab\":256,\"bc\":257,\"abc\":258,\"xyz\":259,\"xy\":260",
                     "[[\"a\",\"b\"],[\"b\",\"c\"],[\"ab\",\"c\"],[\"x\",\"y\"]]", "[]", "null", BL_PRE, "null",
                     BL_DEC, "\"ignore_merges\":true,");
    t = load_or_fail(json, __LINE__);
    if (t) {
        expect_tokens(t, "abc", 0, "abc");
        expect_tokens(t, "xyz", 0, "xyz"); /* ignore_merges: the whole pre-token is a token */
        expect_tokens(t, "xyzz", 0, "xy|z|z");
        mn_tokenizer_destroy(t);
    }
    free(json);
}

/* Pre-tokenizers: contractions, U+180E, Digits, Split behaviours, prefix space. */
static void test_pretokenizers(void) {
    char *json = make_json("\"'s\":256,\"ĠĠ\":257", "[[\"'\",\"s\"],[\"Ġ\",\"Ġ\"]]", "[]", "null", BL_PRE, "null",
                           BL_DEC, "");
    mn_tokenizer *t = load_or_fail(json, __LINE__);
    if (t) {
        expect_tokens(t, "it's", 0, "i|t|'s");
        expect_tokens(t, "IT'S", 0, "I|T|'|S"); /* the GPT-2 pattern is case-sensitive */
        /* U+180E is no space for the library (Oniguruma): " \u180E" is one
         * pre-token of punctuation, not a space run. */
        expect_tokens(t, "a \xe1\xa0\x8e", 0, "a|Ġ|á|ł|İ");
        expect_tokens(t, "a\xc2\xa0\xc2\xa0" "b", 0, "a|Â|ł|Â|ł|b"); /* NBSP run: \s+(?!\S) keeps the last */
        mn_tokenizer_destroy(t);
    }
    free(json);

    /* Digits + ByteLevel (SmolLM2). */
    const char *seq_digits = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
                             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]}";
    json = make_json("\"12\":256", "[[\"1\",\"2\"]]", "[]", "null", seq_digits, "null", BL_DEC, "");
    t = load_or_fail(json, __LINE__);
    if (t) {
        expect_tokens(t, "a123 x", 0, "a|1|2|3|Ġ|x");
        expect_tokens(t, "\xd9\xa3\xd9\xa4", 0, "Ù|£|Ù|¤"); /* Arabic-Indic digits are numeric too */
        mn_tokenizer_destroy(t);
    }
    free(json);
    const char *runs = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":false},"
                       "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":false}]}";
    json = make_json("\"12\":256", "[[\"1\",\"2\"]]", "[]", "null", runs, "null", BL_DEC, "");
    t = load_or_fail(json, __LINE__);
    if (t) {
        /* digit runs kept together, a space prefixed to every piece */
        expect_tokens(t, "a12b", 0, "Ġ|a|Ġ|12|Ġ|b");
        mn_tokenizer_destroy(t);
    }
    free(json);

    /* Split behaviours on '-' (literal String pattern). */
    static const struct {
        const char *behavior;
        bool invert;
        const char *want;
    } splits[] = {
        {"Removed", false, "a|b|c"},
        {"Isolated", false, "a|-|-|b|-|c"},
        {"MergedWithPrevious", false, "a-|-|b-|c"},
        {"MergedWithNext", false, "a|-|-b|-c"},
        {"Contiguous", false, "a|--|b|-|c"},
        {"Removed", true, "-|-|-"},
    };
    for (size_t i = 0; i < MN_ARRAY_LEN(splits); i++) {
        char pre[256];
        snprintf(pre, sizeof pre,
                 "{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"%s\",\"invert\":%s}",
                 splits[i].behavior, splits[i].invert ? "true" : "false");
        json = make_json("\"a-\":256,\"-b\":257,\"--\":258,\"-c\":259,\"b-\":260",
                         "[[\"a\",\"-\"],[\"-\",\"b\"],[\"-\",\"-\"],[\"-\",\"c\"],[\"b\",\"-\"]]", "[]", "null", pre,
                         "null", "null", "\"ignore_merges\":true,");
        t = load_or_fail(json, __LINE__);
        if (t) {
            expect_tokens(t, "a--b-c", 0, splits[i].want);
            mn_tokenizer_destroy(t);
        }
        free(json);
    }

    /* The Llama-3 pattern: case-insensitive contractions, numbers in threes. */
    const char *llama = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
                        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
                        "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
                        "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                        "\"use_regex\":false}]}";
    json = make_json("\"'S\":256,\"123\":257,\"45\":258", "[[\"'\",\"S\"],[\"4\",\"5\"]]", "[]", "null",
                     llama, "null", BL_DEC, "\"ignore_merges\":true,");
    t = load_or_fail(json, __LINE__);
    if (t) {
        expect_tokens(t, "IT'S", 0, "I|T|'S");
        expect_tokens(t, "12345", 0, "123|45");
        expect_tokens(t, "a\r\n\r\nb", 0, "a|č|Ċ|č|Ċ|b");
        mn_tokenizer_destroy(t);
    }
    free(json);
}

/* Added tokens, templates, normalizer, unknown tokens, decoding. */
static void test_added_and_decode(void) {
    const char *added =
        "[{\"id\":300,\"content\":\"<|im_end|>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
        "\"normalized\":false,\"special\":true},"
        "{\"id\":259,\"content\":\"<t>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":true,"
        "\"special\":false},"
        "{\"id\":260,\"content\":\"@m\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
        "\"special\":false},"
        "{\"id\":261,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
        "\"normalized\":false,\"special\":true}]";
    const char *post = "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
                       "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":"
                       "\"<s>\",\"ids\":[261],\"tokens\":[\"<s>\"]}}}";
    /* vocab: 256 bytes + "ab" 256, "é" (byte-level of U+00E9) 257; the added tokens get 258 <|im_end|>,
     * 259 <t>, 260 @m, 261 <s> */
    char *json = make_json("\"ab\":256,\"Ã©\":257", "[[\"a\",\"b\"],[\"Ã\",\"©\"]]", added, "{\"type\":\"NFC\"}",
                           BL_PRE, post, BL_DEC, "");
    mn_tokenizer *t = load_or_fail(json, __LINE__);
    if (t) {
        int32_t id = -1;
        CHECK_OK(mn_tokenizer_token_to_id(t, &id, "<|im_end|>"), mn_tokenizer_error(t));
        CHECK(id == 258); /* the library's id: after the vocabulary, not the file's 300 (a warning) */
        CHECK(mn_tokenizer_token_to_id(t, &id, "nope") == MN_E_NOT_FOUND);
        CHECK(mn_tokenizer_vocab_size(t) == 262);
        CHECK(mn_tokenizer_is_special(t, 258) && mn_tokenizer_is_special(t, 261));
        CHECK(!mn_tokenizer_is_special(t, 259) && !mn_tokenizer_is_special(t, 0));
        expect_tokens(t, "ab<|im_end|>ab", 0, "ab|<|im_end|>|ab");
        expect_tokens(t, "ab<|im_end|>ab", MN_TOKENIZE_SPECIAL_AS_TEXT, "ab|<|||i|m|_|e|n|d|||>|ab");
        expect_tokens(t, "ab<|im_end|>ab", MN_TOKENIZE_ADD_SPECIAL, "<s>|ab|<|im_end|>|ab");
        expect_tokens(t, "x  <t>  y", 0, "x|<t>|y"); /* lstrip and rstrip take the spaces */
        expect_tokens(t, "a @m b", 0, "a|Ġ|@m|Ġ|b");
        expect_tokens(t, "a@m b", 0, "a|@|m|Ġ|b"); /* single_word: a word character before */
        expect_tokens(t, "e\xcc\x81", 0, "Ã©");    /* NFC composes e + U+0301 */

        /* decode */
        int32_t ids[] = {261, 256, 258, 257, 4000000, -5};
        expect_decode(t, ids, 6, 0, "<s>ab<|im_end|>\xc3\xa9", 17, __LINE__);
        expect_decode(t, ids, 6, MN_TOKENIZE_SKIP_SPECIAL, "ab\xc3\xa9", 4, __LINE__);
        int32_t partial[] = {0xC3, 256}; /* ids 0..255 are the bytes: 0xC3 alone, then "ab" */
        expect_decode(t, partial, 2, 0, "\xef\xbf\xbd" "ab", 5, __LINE__);
        /* sizing: cap 0 gives the length; a small buffer is cut and terminated */
        size_t len = 0;
        char small[4];
        CHECK_OK(mn_tokenizer_decode(t, NULL, 0, &len, ids, 6, 0), mn_tokenizer_error(t));
        CHECK(len == 17);
        CHECK_OK(mn_tokenizer_decode(t, small, sizeof small, &len, ids, 6, 0), mn_tokenizer_error(t));
        CHECK(len == 17 && memcmp(small, "<s>", 4) == 0);
        size_t n = 0;
        int32_t one[1] = {-1};
        CHECK_OK(mn_tokenizer_encode(t, NULL, 0, &n, "abab", 4, 0), mn_tokenizer_error(t));
        CHECK(n == 2);
        CHECK_OK(mn_tokenizer_encode(t, one, 1, &n, "abab", 4, 0), mn_tokenizer_error(t));
        CHECK(n == 2 && one[0] == 256);
        /* bad arguments and text */
        CHECK(mn_tokenizer_encode(t, one, 1, &n, "\xff", 1, 0) == MN_E_INVALID);
        CHECK(strstr(mn_tokenizer_error(t), "UTF-8") != NULL);
        CHECK(mn_tokenizer_encode(t, one, 1, NULL, "a", 1, 0) == MN_E_INVALID);
        CHECK(mn_tokenizer_encode(t, one, 1, &n, "a", 1, 0x80) == MN_E_INVALID);
        CHECK(mn_tokenizer_decode(t, NULL, 0, &len, NULL, 1, 0) == MN_E_INVALID);
        CHECK(mn_tokenizer_id_to_token(t, -1) == NULL && mn_tokenizer_id_to_token(t, 1 << 30) == NULL);
        /* text with a NUL byte */
        expect_tokens_n(t, "a\0b", 3, 0, "a|Ā|b", __LINE__);
        mn_tokenizer_destroy(t);
    }
    free(json);

    /* No decoder: tokens joined by spaces. unk_token with fuse_unk;
     * byte_fallback. */
    json = make_json("\"<unk>\":256,\"<0x41>\":257", "[]", "[]", "null", "null", "null", "null",
                     "\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"continuing_subword_prefix\":null,");
    t = load_or_fail(json, __LINE__);
    if (t) {
        /* no pre-tokenizer: the text reaches the model as is; "€" is not a vocabulary character */
        expect_tokens(t, "a\xe2\x82\xac\xe2\x82\xac" "b", 0, "a|<unk>|b");
        int32_t ids[] = {'a', 256, 'b'};
        expect_decode(t, ids, 3, 0, "a <unk> b", 9, __LINE__);
        mn_tokenizer_destroy(t);
    }
    free(json);
    json = make_json("\"<0xE2>\":256,\"<0x82>\":257,\"<0xAC>\":258", "[]", "[]", "null", "null", "null", "null",
                     "\"byte_fallback\":true,");
    t = load_or_fail(json, __LINE__);
    if (t) {
        expect_tokens(t, "a\xe2\x82\xac", 0, "a|<0xE2>|<0x82>|<0xAC>");
        mn_tokenizer_destroy(t);
    }
    free(json);
    /* unk_token missing from the vocabulary: an error when needed, as the library */
    json = make_json("", "[]", "[]", "null", "null", "null", "null", "\"unk_token\":\"<nope>\",");
    t = load_or_fail(json, __LINE__);
    if (t) {
        size_t n;
        CHECK(mn_tokenizer_encode(t, NULL, 0, &n, "\xe2\x82\xac", 3, 0) == MN_E_FORMAT);
        CHECK(strstr(mn_tokenizer_error(t), "<nope>") != NULL);
        mn_tokenizer_destroy(t);
    }
    free(json);
}

/* A long input stays fast (the merge loop is O(n log n)). */
static void test_long_input(void) {
    char *json = make_json("\"aa\":256,\"aaaa\":257", "[[\"a\",\"a\"],[\"aa\",\"aa\"]]", "[]", "null",
                           "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}", "null", BL_DEC,
                           "");
    mn_tokenizer *t = load_or_fail(json, __LINE__);
    if (t) {
        size_t n = 1 << 20;
        char *text = malloc(n);
        memset(text, 'a', n);
        size_t count = 0;
        clock_t c0 = clock();
        CHECK_OK(mn_tokenizer_encode(t, NULL, 0, &count, text, n, 0), mn_tokenizer_error(t));
        double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
        CHECK(count == n / 4);
        CHECK_MSG(secs < 20, "1 MiB of one pre-token took %.1f s", secs);
        free(text);
        mn_tokenizer_destroy(t);
    }
    free(json);
}

/* ---- hostile files -------------------------------------------------------------------------- */

static void expect_refused(const char *json, size_t len, mn_status want, const char *substr, int line) {
    mn_tokenizer *t = (mn_tokenizer *)1;
    char err[512] = "";
    mn_status s = mn_tokenizer_load_json(&t, json, len, err, sizeof err);
    if (s != want || t != NULL || !err[0] || (substr && !strstr(err, substr)))
        th_fail(__FILE__, line, "want %s containing '%s', got %s: '%s'", mn_status_str(want), substr ? substr : "",
                mn_status_str(s), err);
    else th_passed++;
    if (s == MN_OK) mn_tokenizer_destroy(t);
}
#define REFUSE(json, want, substr) expect_refused(json, strlen(json), want, substr, __LINE__)

static void refuse_model(const char *vocab_extra, const char *merges, const char *flags, const char *substr,
                         int line) {
    char *json = make_json(vocab_extra, merges, "[]", "null", BL_PRE, "null", BL_DEC, flags);
    expect_refused(json, strlen(json), MN_E_FORMAT, substr, line);
    free(json);
}

static void refuse_part(const char *added, const char *normalizer, const char *pre, const char *post,
                        const char *decoder, mn_status want, const char *substr, int line) {
    char *json = make_json("", "[]", added, normalizer, pre, post, decoder, "");
    expect_refused(json, strlen(json), want, substr, line);
    free(json);
}

static void test_hostile(void) {
    REFUSE("", MN_E_FORMAT, "not valid JSON");
    REFUSE("{\"model\":", MN_E_FORMAT, "not valid JSON");
    REFUSE("[1,2]", MN_E_FORMAT, "not a JSON object");
    REFUSE("{} x", MN_E_FORMAT, "after the JSON value");
    REFUSE("{}", MN_E_FORMAT, "model is missing");
    REFUSE("{\"version\":\"2.0\",\"model\":{}}", MN_E_FORMAT, "version");
    REFUSE("{\"model\":[]}", MN_E_FORMAT, "model is an array");
    REFUSE("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", MN_E_UNSUPPORTED, "model.type 'Unigram'");
    REFUSE("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", MN_E_UNSUPPORTED, "model.type 'WordPiece'");
    REFUSE("{\"model\":{\"type\":\"WordLevel\",\"vocab\":{}}}", MN_E_UNSUPPORTED, "'WordLevel'");
    REFUSE("{\"model\":{\"type\":7}}", MN_E_FORMAT, "model.type is a number");
    REFUSE("{\"model\":{\"vocab\":{}}}", MN_E_FORMAT, "model.type is missing");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"merges\":[]}}", MN_E_FORMAT, "model.vocab is missing");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", MN_E_FORMAT, "model.vocab is an array");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}", MN_E_FORMAT, "model.merges is null");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":{}}}", MN_E_FORMAT, "model.merges is an object");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5},\"merges\":[]}}", MN_E_FORMAT, "model.vocab['a'] is 1.5");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", MN_E_FORMAT, "not an id");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1e20},\"merges\":[]}}", MN_E_FORMAT, "not an id");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":2147483648},\"merges\":[]}}", MN_E_FORMAT, "not an id");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"3\"},\"merges\":[]}}", MN_E_FORMAT, "is a string");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1,\"a\":2},\"merges\":[]}}", MN_E_FORMAT, "appears twice");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1,\"b\":1},\"merges\":[]}}", MN_E_FORMAT,
           "has id 1, which 'a' already has");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\\u0000\":1},\"merges\":[]}}", MN_E_FORMAT, "\\u0000");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\xff\":1},\"merges\":[]}}", MN_E_FORMAT, "not valid UTF-8");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[],\"dropout\":0.1}}", MN_E_UNSUPPORTED, "dropout");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[],\"dropout\":7}}", MN_E_FORMAT, "dropout");
    REFUSE("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[],\"fuse_unk\":\"yes\"}}", MN_E_FORMAT,
           "model.fuse_unk is a string");
    expect_refused("{\"model\":{}}\0", 13, MN_E_FORMAT, "NUL byte", __LINE__);

    /* merges */
    refuse_model("", "[[\"a\",\"q\"]]", "", "merged token 'aq' is not in the vocabulary", __LINE__);
    refuse_model("", "[[\"a\",\"zz\"]]", "", "'zz' is not in the vocabulary", __LINE__);
    refuse_model("", "[[\"xx\",\"a\"]]", "", "'xx' is not in the vocabulary", __LINE__);
    refuse_model("", "[\"a b c\"]", "", "model.merges[0] is not two tokens", __LINE__);
    refuse_model("", "[\"ab\"]", "", "model.merges[0] is not two tokens", __LINE__);
    refuse_model("", "[[\"a\"]]", "", "model.merges[0] is an array", __LINE__);
    refuse_model("", "[7]", "", "model.merges[0] is a number", __LINE__);
    refuse_model("\"ab\":256", "[[\"a\",\"b\"],[\"a\",\"b\"]]", "", "model.merges[1] ('a' 'b') repeats model.merges[0]",
                 __LINE__);
    refuse_model("\"\":256", "[[\"a\",\"\"]]", "", "empty part", __LINE__);
    refuse_model("\"ab\":256", "[[\"a\",\"b\"]]", "\"continuing_subword_prefix\":\"##\",", "shorter", __LINE__);

    /* components */
    const char *nul = "null";
    refuse_part("{}", nul, nul, nul, nul, MN_E_FORMAT, "added_tokens is an object", __LINE__);
    refuse_part("[{\"id\":1}]", nul, nul, nul, nul, MN_E_FORMAT, "added_tokens[0].content is missing", __LINE__);
    refuse_part("[{\"content\":\"x\",\"id\":-3}]", nul, nul, nul, nul, MN_E_FORMAT, "added_tokens[0].id", __LINE__);
    refuse_part("[{\"content\":\"x\",\"special\":1}]", nul, nul, nul, nul, MN_E_FORMAT, "added_tokens[0].special",
                __LINE__);
    refuse_part("[]", "{\"type\":\"Lowercase\"}", nul, nul, nul, MN_E_UNSUPPORTED, "normalizer.type 'Lowercase'",
                __LINE__);
    refuse_part("[]", "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Strip\"}]}", nul, nul,
                nul, MN_E_UNSUPPORTED, "normalizer.normalizers[1].type 'Strip'", __LINE__);
    refuse_part("[]", nul, "{\"type\":\"Whitespace\"}", nul, nul, MN_E_UNSUPPORTED, "pre_tokenizer.type 'Whitespace'",
                __LINE__);
    refuse_part("[]", nul, "{\"type\":\"Metaspace\"}", nul, nul, MN_E_UNSUPPORTED, "'Metaspace'", __LINE__);
    refuse_part("[]", nul, "{\"kind\":\"ByteLevel\"}", nul, nul, MN_E_FORMAT, "pre_tokenizer.type is null", __LINE__);
    refuse_part("[]", nul, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}", nul, nul,
                MN_E_FORMAT, "does not compile", __LINE__);
    refuse_part("[]", nul, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\\\\C\"},\"behavior\":\"Isolated\"}", nul,
                nul, MN_E_FORMAT, "does not compile", __LINE__); /* \C could split a character */
    refuse_part("[]", nul, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Sideways\"}", nul, nul,
                MN_E_FORMAT, "behavior 'Sideways'", __LINE__);
    refuse_part("[]", nul, "{\"type\":\"Split\",\"pattern\":\"a\",\"behavior\":\"Isolated\"}", nul, nul, MN_E_FORMAT,
                "pattern is a string", __LINE__);
    refuse_part("[]", nul, "{\"type\":\"Sequence\",\"pretokenizers\":{}}", nul, nul, MN_E_FORMAT,
                "pretokenizers is an object", __LINE__);
    refuse_part("[]", nul, nul, "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],"
                "\"special_tokens\":{}}", nul, MN_E_FORMAT, "special token '<s>' is not in", __LINE__);
    refuse_part("[]", nul, nul, "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],"
                "\"special_tokens\":{\"<s>\":{\"ids\":[1e12]}}}", nul, MN_E_FORMAT, ".ids[0] is 1000000000000", __LINE__);
    refuse_part("[]", nul, nul, "{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"B\"}}]}", nul,
                MN_E_FORMAT, "sequence 'B'", __LINE__);
    refuse_part("[]", nul, nul, "{\"type\":\"Fancy\"}", nul, MN_E_UNSUPPORTED, "post_processor.type 'Fancy'",
                __LINE__);
    refuse_part("[]", nul, nul, nul, "{\"type\":\"WordPiece\"}", MN_E_UNSUPPORTED, "decoder.type 'WordPiece'",
                __LINE__);
    /* Sequences nested deeper than TK_MAX_NESTING */
    sb deep = {0};
    for (int i = 0; i < 12; i++) sb_puts(&deep, "{\"type\":\"Sequence\",\"pretokenizers\":[");
    sb_puts(&deep, BL_PRE);
    for (int i = 0; i < 12; i++) sb_puts(&deep, "]}");
    refuse_part("[]", nul, deep.p, nul, nul, MN_E_FORMAT, "nested too deep", __LINE__);
    free(deep.p);

    /* Files: missing, a directory. */
    mn_tokenizer *t = (mn_tokenizer *)1;
    char err[512];
    CHECK(mn_tokenizer_load(&t, "/nonexistent/tokenizer.json", err, sizeof err) == MN_E_IO && t == NULL);
    CHECK(strstr(err, "/nonexistent/tokenizer.json") != NULL);
    CHECK(mn_tokenizer_load(&t, "/tmp", err, sizeof err) == MN_E_IO && strstr(err, "directory") != NULL);
    CHECK(mn_tokenizer_load(NULL, "/tmp", err, sizeof err) == MN_E_INVALID);
    mn_tokenizer_destroy(NULL);
    /* A 600 MiB (sparse) file is refused by its size, before any read. */
    char big[] = "/tmp/mn-tok-big-XXXXXX";
    int fd = mkstemp(big);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(ftruncate(fd, (off_t)600 << 20) == 0);
        close(fd);
        CHECK(mn_tokenizer_load(&t, big, err, sizeof err) == MN_E_FORMAT && t == NULL);
        CHECK_MSG(strstr(err, "MiB") != NULL, "message: %s", err);
        unlink(big);
    }
}

/* ---- the fixtures (the library's own output) ------------------------------------------------------- */

static char fixture_dir[1024];

static size_t unhex(const char *h, char *out) {
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    out[n] = 0;
    return n;
}

static size_t json_ids(const cJSON *arr, int32_t *out, size_t cap) {
    size_t n = 0;
    for (const cJSON *x = arr ? arr->child : NULL; x && n < cap; x = x->next) out[n++] = (int32_t)x->valuedouble;
    return n;
}

/* Compares ids, reports the first difference. Returns true when equal. */
static bool same_ids(const char *what, const char *name, size_t k, const int32_t *got, size_t ng, const int32_t *want,
                     size_t nw) {
    if (ng == nw && (nw == 0 || memcmp(got, want, nw * sizeof *got) == 0)) return true;
    size_t i = 0;
    while (i < ng && i < nw && got[i] == want[i]) i++;
    fprintf(stderr, "  %s case %zu %s: %zu ids, want %zu; first difference at %zu: got %d, want %d\n", name, k, what,
            ng, nw, i, i < ng ? got[i] : -1, i < nw ? want[i] : -1);
    return false;
}

static void check_decode(mn_tokenizer *t, const char *name, size_t k, const char *what, const int32_t *ids, size_t n,
                         unsigned flags, const char *want_hex) {
    size_t cap = strlen(want_hex) / 2 + 64, len = 0;
    char *want = malloc(cap), *got = malloc(cap * 2);
    size_t wn = unhex(want_hex, want);
    mn_status s = mn_tokenizer_decode(t, got, cap * 2, &len, ids, n, flags);
    if (s == MN_OK && len == wn && memcmp(got, want, wn) == 0) th_passed++;
    else th_fail(__FILE__, __LINE__, "%s case %zu %s: decode gave %zu bytes (%s), want %zu", name, k, what, len,
                 s == MN_OK ? "ok" : mn_tokenizer_error(t), wn);
    free(want);
    free(got);
}

/* Checks one NAME.cases.json against NAME.json. Returns false if missing. */
static bool check_fixture(const char *name) {
    char path[1200];
    size_t len;
    snprintf(path, sizeof path, "%s/%s.cases.json", fixture_dir, name);
    char *text = read_file(path, &len);
    if (!text) return false;
    cJSON *root = cJSON_ParseWithLength(text, len);
    CHECK_MSG(root != NULL, "%s: not JSON", path);
    free(text);
    if (!root) return true;
    snprintf(path, sizeof path, "%s/%s.json", fixture_dir, name);
    mn_tokenizer *t = NULL;
    char err[512];
    mn_status s = mn_tokenizer_load(&t, path, err, sizeof err);
    CHECK_MSG(s == MN_OK, "%s: %s", path, err);
    size_t cap = 1 << 16, ncases = 0, bad = 0;
    int32_t *want = malloc(cap * sizeof *want), *got = malloc(cap * sizeof *got);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    for (const cJSON *c = cases ? cases->child : NULL; c && t; c = c->next, ncases++) {
        const char *hex = cJSON_GetStringValue(cJSON_GetObjectItem(c, "text_hex"));
        char *in = malloc(strlen(hex) / 2 + 1);
        size_t n_in = unhex(hex, in), n;
        static const struct {
            const char *key;
            unsigned flags;
        } variants[] = {{"ids", 0}, {"ids_special", MN_TOKENIZE_ADD_SPECIAL},
                        {"ids_special_as_text", MN_TOKENIZE_SPECIAL_AS_TEXT}};
        for (size_t v = 0; v < MN_ARRAY_LEN(variants); v++) {
            const cJSON *arr = cJSON_GetObjectItem(c, variants[v].key);
            if (!arr) continue;
            size_t nw = json_ids(arr, want, cap);
            s = mn_tokenizer_encode(t, got, cap, &n, in, n_in, variants[v].flags);
            bool ok = s == MN_OK && same_ids(variants[v].key, name, ncases, got, n < cap ? n : cap, want, nw);
            if (s != MN_OK) fprintf(stderr, "  %s case %zu: %s\n", name, ncases, mn_tokenizer_error(t));
            if (ok) th_passed++;
            else bad++, th_fail(__FILE__, __LINE__, "%s case %zu (%zu bytes of text): %s differ", name, ncases, n_in,
                                variants[v].key);
        }
        size_t nw = json_ids(cJSON_GetObjectItem(c, "ids_special"), want, cap);
        check_decode(t, name, ncases, "decoded", want, nw, 0,
                     cJSON_GetStringValue(cJSON_GetObjectItem(c, "decoded_hex")));
        check_decode(t, name, ncases, "decoded_skip", want, nw, MN_TOKENIZE_SKIP_SPECIAL,
                     cJSON_GetStringValue(cJSON_GetObjectItem(c, "decoded_skip_hex")));
        const cJSON *pl = cJSON_GetObjectItem(c, "prefix_len");
        if (pl) {
            nw = json_ids(cJSON_GetObjectItem(c, "ids"), want, cap);
            size_t k = (size_t)pl->valuedouble;
            check_decode(t, name, ncases, "prefix", want, k < nw ? k : nw, 0,
                         cJSON_GetStringValue(cJSON_GetObjectItem(c, "prefix_decoded_hex")));
        }
        free(in);
    }
    CHECK_MSG(ncases >= 60, "%s: only %zu cases", name, ncases);
    const cJSON *lookups = cJSON_GetObjectItem(root, "token_to_id");
    for (const cJSON *l = lookups ? lookups->child : NULL; l && t; l = l->next) {
        const char *tok = cJSON_GetStringValue(l->child);
        int32_t id = -1;
        s = mn_tokenizer_token_to_id(t, &id, tok);
        if (cJSON_IsNull(l->child->next)) CHECK_MSG(s == MN_E_NOT_FOUND, "%s: token_to_id(%s) found %d", name, tok, id);
        else CHECK_MSG(s == MN_OK && id == (int32_t)l->child->next->valuedouble, "%s: token_to_id(%s) = %d, want %d",
                       name, tok, id, (int32_t)l->child->next->valuedouble);
    }
    const cJSON *dcases = cJSON_GetObjectItem(root, "decode_cases");
    size_t k = 0;
    for (const cJSON *d = dcases ? dcases->child : NULL; d && t; d = d->next, k++) {
        size_t nw = json_ids(cJSON_GetObjectItem(d, "ids"), want, cap);
        check_decode(t, name, k, "decode_cases", want, nw, 0, cJSON_GetStringValue(cJSON_GetObjectItem(d, "decoded_hex")));
        check_decode(t, name, k, "decode_cases skip", want, nw, MN_TOKENIZE_SKIP_SPECIAL,
                     cJSON_GetStringValue(cJSON_GetObjectItem(d, "decoded_skip_hex")));
    }
    printf("fixture %s: %zu cases, %zu differ\n", name, ncases, bad);
    free(want);
    free(got);
    mn_tokenizer_destroy(t);
    cJSON_Delete(root);
    return true;
}

static void test_fixtures(void) {
    /* js-*: made with the library's Node binding; py-*: made by
     * gen_tokenizer.py with the Python library (the reference of record, on
     * the GPU machine, tokenizers 0.23.2). All committed: all must be present. */
    static const char *const required[] = {"js-smol", "js-llama3", "js-gpt2", "py-smol", "py-llama3", "py-gpt2"};
    for (size_t i = 0; i < MN_ARRAY_LEN(required); i++)
        CHECK_MSG(check_fixture(required[i]), "fixture %s/%s.cases.json is missing", fixture_dir, required[i]);
    /* Any other NAME.cases.json in the folder is checked too. */
    DIR *d = opendir(fixture_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t n = strlen(e->d_name), k = strlen(".cases.json");
        if (n <= k || strcmp(e->d_name + n - k, ".cases.json") != 0) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(n - k), e->d_name);
        bool known = false;
        for (size_t i = 0; i < MN_ARRAY_LEN(required); i++) known |= strcmp(name, required[i]) == 0;
        if (!known) CHECK(check_fixture(name));
    }
    if (d) closedir(d);
}

/* Seeds and past fuzzer finds: no crash, the fuzz target's promises hold. */
static void test_fuzz_corpus(const char *dir) {
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d) return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[2400];
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *buf = read_file(path, &len);
        if (!buf) continue;
        LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
        free(buf);
        n++;
    }
    closedir(d);
    CHECK_MSG(n >= 5, "%s: only %d inputs", dir, n);
    printf("fuzz corpus: %d inputs replayed\n", n);
}

/* The API in a few lines: load, encode a chat prompt, decode it back. */
static void test_example(void) {
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/js-smol.json", fixture_dir);
    mn_tokenizer *tok = NULL;
    if (mn_tokenizer_load(&tok, path, err, sizeof err) != MN_OK) {
        th_fail(__FILE__, __LINE__, "%s", err);
        return;
    }
    const char *prompt = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
    size_t n = 0;
    CHECK_OK(mn_tokenizer_encode(tok, NULL, 0, &n, prompt, strlen(prompt), MN_TOKENIZE_ADD_SPECIAL),
             mn_tokenizer_error(tok)); /* how many ids */
    int32_t *ids = malloc(n * sizeof *ids);
    CHECK_OK(mn_tokenizer_encode(tok, ids, n, &n, prompt, strlen(prompt), MN_TOKENIZE_ADD_SPECIAL),
             mn_tokenizer_error(tok));
    int32_t im_start = -1, im_end = -1;
    CHECK_OK(mn_tokenizer_token_to_id(tok, &im_start, "<|im_start|>"), mn_tokenizer_error(tok));
    CHECK_OK(mn_tokenizer_token_to_id(tok, &im_end, "<|im_end|>"), mn_tokenizer_error(tok));
    CHECK(n > 4 && ids[0] == im_start && ids[n - 2] == im_end);
    char text[256];
    size_t len = 0;
    CHECK_OK(mn_tokenizer_decode(tok, text, sizeof text, &len, ids, n, 0), mn_tokenizer_error(tok));
    CHECK(len == strlen(prompt) && strcmp(text, prompt) == 0);
    CHECK_OK(mn_tokenizer_decode(tok, text, sizeof text, &len, ids, n, MN_TOKENIZE_SKIP_SPECIAL),
             mn_tokenizer_error(tok));
    CHECK(strcmp(text, "user\nWhat is 2+2?\n") == 0);
    free(ids);
    mn_tokenizer_destroy(tok);
}

int main(void) {
    char here[1024], corpus[1200];
    snprintf(here, sizeof here, "%s", __FILE__);
    const char *tests_dir = dirname(here);
    snprintf(fixture_dir, sizeof fixture_dir, "%s/fixtures/tokenizer", tests_dir);
    snprintf(corpus, sizeof corpus, "%s/fuzz/corpus_tokenizer", tests_dir);
    mn_set_log(NULL, NULL);
    test_merges();
    test_pretokenizers();
    test_added_and_decode();
    test_long_input();
    test_hostile();
    test_fuzz_corpus(corpus);
    test_fixtures();
    test_example();
    return th_finish("test_tokenizer");
}
