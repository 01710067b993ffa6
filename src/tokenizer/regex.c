/* regex.c - the pre-tokenizer patterns, on PCRE2 (UTF + UCP).
 *
 * The library compiles its patterns with Oniguruma (Ruby syntax, UTF-8).
 * PCRE2 agrees with it on the constructs tokenizer files use (\p{..}
 * classes, lookahead, possessive and lazy repeats, (?i:...)) except for a
 * few escapes, which are rewritten before compiling:
 *   \s  Oniguruma: the White_Space property. PCRE2 10.42 adds U+180E.
 *   \w  Oniguruma: letters, marks, Nd, Pc. PCRE2: letters, N, '_'.
 *   \h  Oniguruma: a hexadecimal digit. PCRE2: horizontal space.
 * Outside a character class \s \S \w \W \h \H become explicit classes;
 * inside one only the positive forms can be spelled out (\S \W \H stay, and
 * may differ on the characters above). ^ and $ match at line breaks, as in
 * Ruby (PCRE2_MULTILINE). Matching follows onig's find_iter: an empty match
 * right where the previous match ended is skipped by one character.
 *
 * Does not: emulate Oniguruma's nested classes or && intersections, or the
 * Ruby meaning of (?m) (dot matches newline); patterns using them compile
 * with PCRE2's meaning.
 */
#include "tokenizer/tokenizer.h"

#include "io/text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Steps one match may take before it fails with an error (catastrophic
 * backtracking in a hostile pattern) rather than running for minutes. */
#define TK_MATCH_LIMIT 5000000u

struct tk_regex {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
};

static const char WS_INNER[] =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";
static const char WORD_INNER[] = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
static const char HEX_INNER[] = "0-9a-fA-F";

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static bool put(buf *b, const char *s, size_t n) {
    if (b->n > SIZE_MAX - n - 1 || !tk_grow((void **)&b->p, &b->cap, b->n + n + 1, 1)) return false;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}
static bool puts_(buf *b, const char *s) { return put(b, s, strlen(s)); }

/* Rewrites the escapes whose meaning differs (see the banner). */
static bool rewrite(buf *out, const char *p, size_t n) {
    bool in_class = false;
    size_t i = 0;
    if (!put(out, "", 0)) return false;
    while (i < n) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            if (d == 'Q') { /* \Q...\E: literal text, copied as is */
                size_t j = i + 2;
                while (j + 1 < n && !(p[j] == '\\' && p[j + 1] == 'E')) j++;
                j = j + 1 < n ? j + 2 : n;
                if (!put(out, p + i, j - i)) return false;
                i = j;
                continue;
            }
            const char *inner = NULL;
            if (d == 's' || d == 'S') inner = WS_INNER;
            else if (d == 'w' || d == 'W') inner = WORD_INNER;
            else if (d == 'h' || d == 'H') inner = HEX_INNER;
            bool neg = d == 'S' || d == 'W' || d == 'H';
            bool ok;
            if (inner && !in_class) ok = puts_(out, neg ? "[^" : "[") && puts_(out, inner) && puts_(out, "]");
            else if (inner && !neg) ok = puts_(out, inner);
            else ok = put(out, p + i, 2);
            if (!ok) return false;
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            size_t j = i + 1;
            if (j < n && p[j] == '^') j++;
            if (j < n && p[j] == ']') j++; /* a ']' first in a class is literal */
            if (!put(out, p + i, j - i)) return false;
            i = j;
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') { /* [:alpha:] */
            size_t j = i + 2;
            while (j + 1 < n && !(p[j] == ':' && p[j + 1] == ']')) j++;
            j = j + 1 < n ? j + 2 : i + 1;
            if (!put(out, p + i, j - i)) return false;
            i = j;
            continue;
        }
        if (in_class && c == ']') in_class = false;
        if (!put(out, p + i, 1)) return false;
        i++;
    }
    return true;
}

void tk_regex_free(tk_regex *re) {
    if (!re) return;
    pcre2_match_data_free(re->md);
    pcre2_match_context_free(re->mctx);
    pcre2_code_free(re->code);
    free(re);
}

mn_status tk_regex_compile(tk_regex **out, const char *pattern, size_t n, bool literal, char *err, size_t cap) {
    *out = NULL;
    char shown[IO_ESC_NAME];
    {
        /* The pattern as text for messages (it may hold anything). */
        char tmp[IO_ESC_NAME * 2];
        size_t k = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
        memcpy(tmp, pattern, k);
        tmp[k] = 0;
        io_esc(shown, sizeof shown, tmp);
    }
    if (!io_utf8_valid(pattern, n)) {
        mn_fmt(err, cap, "pattern '%s' is not valid UTF-8", shown);
        return MN_E_FORMAT;
    }
    buf b = {0};
    if (literal ? !put(&b, pattern, n) : !rewrite(&b, pattern, n)) {
        free(b.p);
        mn_fmt(err, cap, "out of memory compiling pattern '%s'", shown);
        return MN_E_NOMEM;
    }
    tk_regex *re = calloc(1, sizeof *re);
    if (!re) {
        free(b.p);
        mn_fmt(err, cap, "out of memory compiling pattern '%s'", shown);
        return MN_E_NOMEM;
    }
    int ec = 0;
    PCRE2_SIZE eo = 0;
    /* \C (one byte in UTF mode) could split a character: refused. */
    uint32_t opts = PCRE2_UTF | PCRE2_NO_UTF_CHECK |
                    (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C);
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    bool have_cc = cc != NULL;
    if (cc) pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    re->code = cc ? pcre2_compile((PCRE2_SPTR)b.p, b.n, opts, &ec, &eo, cc) : NULL;
    pcre2_compile_context_free(cc);
    free(b.p);
    if (!re->code) {
        tk_regex_free(re);
        if (!have_cc) {
            mn_fmt(err, cap, "out of memory compiling pattern '%s'", shown);
            return MN_E_NOMEM;
        }
        PCRE2_UCHAR msg[160];
        if (pcre2_get_error_message(ec, msg, sizeof msg) < 0) strcpy((char *)msg, "unknown error");
        mn_fmt(err, cap, "pattern '%s' does not compile: %s", shown, (const char *)msg);
        return MN_E_FORMAT;
    }
    (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* the interpreter runs it otherwise */
    re->md = pcre2_match_data_create_from_pattern(re->code, NULL);
    re->mctx = pcre2_match_context_create(NULL);
    if (!re->md || !re->mctx) {
        tk_regex_free(re);
        mn_fmt(err, cap, "out of memory compiling pattern '%s'", shown);
        return MN_E_NOMEM;
    }
    pcre2_set_match_limit(re->mctx, TK_MATCH_LIMIT);
    *out = re;
    return MN_OK;
}

mn_status tk_regex_spans(tk_regex *re, tk_spans *out, const char *s, size_t n, char *err, size_t cap) {
    out->n = 0;
    if (n == 0) return tk_spans_push(out, 0, 0, false) ? MN_OK : MN_E_NOMEM;
    size_t prev = 0, last_end = 0, last_match = 0;
    bool have_last = false;
    while (last_end <= n) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, last_end, PCRE2_NO_UTF_CHECK, re->md, re->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, last_end, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, re->md,
                             re->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            if (pcre2_get_error_message(rc, msg, sizeof msg) < 0) strcpy((char *)msg, "unknown error");
            mn_fmt(err, cap, "pre-tokenizer pattern failed on a %zu-byte piece of text: %s", n, (const char *)msg);
            return rc == PCRE2_ERROR_NOMEMORY ? MN_E_NOMEM : MN_E_FORMAT;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
        size_t a = ov[0], b = ov[1];
        if (a > b || b > n || a < last_end) { /* \K tricks: a match that is not a forward span */
            mn_fmt(err, cap, "pre-tokenizer pattern gave a match [%zu, %zu) that is not a span after byte %zu", a,
                   b, last_end);
            return MN_E_FORMAT;
        }
        if (a == b && have_last && last_match == b) {
            uint32_t cp;
            last_end += last_end < n ? tk_utf8_decode(s + last_end, n - last_end, &cp) : 1;
            continue;
        }
        last_end = b;
        last_match = b;
        have_last = true;
        if (prev != a && !tk_spans_push(out, prev, a, false)) return MN_E_NOMEM;
        if (!tk_spans_push(out, a, b, true)) return MN_E_NOMEM;
        prev = b;
    }
    if (prev != n && !tk_spans_push(out, prev, n, false)) return MN_E_NOMEM;
    return MN_OK;
}
