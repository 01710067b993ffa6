/* text.c - escaping of untrusted strings and strict number parsing.
 *
 * Does: one escaping rule for every message and listing that quotes a name,
 * a metadata value or a path (see text.h), with middle truncation; canonical
 * decimal parsing for numbers kept as metadata strings.
 *
 * Does not: allocate, depend on the locale for integers, or decide what a
 * caller does with a rejected value.
 */
#include "io/text.h"

#include <errno.h>
#include <math.h>

bool io_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) len = 2;                 /* 0xC0, 0xC1: overlong */
        else if (c == 0xE0) len = 3, lo = 0xA0;              /* overlong below U+0800 */
        else if (c == 0xED) len = 3, hi = 0x9F;              /* U+D800..DFFF: surrogates */
        else if (c >= 0xE1 && c <= 0xEF) len = 3;
        else if (c == 0xF0) len = 4, lo = 0x90;              /* overlong below U+10000 */
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else if (c == 0xF4) len = 4, hi = 0x8F;              /* above U+10FFFF */
        else return false;                                   /* continuation or 0xF5.. */
        if (n - i < len) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
        i += len;
    }
    return true;
}

/* Well-formed UTF-8 sequences that a terminal may still act on: C1 controls
 * (U+0080..U+009F: C2 80..C2 9F; 0x9B is CSI), U+2028..U+202E (separators
 * and bidirectional embeddings/overrides: E2 80 A8..AE) and U+2066..U+2069
 * (bidirectional isolates: E2 81 A6..A9). */
static bool utf8_is_control(const unsigned char *p, size_t len) {
    if (len == 2) return p[0] == 0xC2 && p[1] <= 0x9F;
    if (len == 3 && p[0] == 0xE2) {
        if (p[1] == 0x80) return p[2] >= 0xA8 && p[2] <= 0xAE;
        if (p[1] == 0x81) return p[2] >= 0xA6 && p[2] <= 0xA9;
    }
    return false;
}

/* One shown piece of the string at p: a printable ASCII byte, a whole
 * harmless UTF-8 sequence, or "\xNN" for one byte. Writes at most 4 bytes
 * to piece, sets *adv to the input bytes consumed, returns the piece length. */
static size_t esc_piece(const unsigned char *p, char piece[8], size_t *adv) {
    if (*p >= 0x20 && *p < 0x7F) {
        piece[0] = (char)*p;
        *adv = 1;
        return 1;
    }
    if (*p >= 0xC2) {
        size_t len = *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : 2;
        size_t k = 1;
        while (k < len && p[k] >= 0x80 && p[k] <= 0xBF) k++; /* stops at the NUL */
        if (k == len && io_utf8_valid((const char *)p, len) && !utf8_is_control(p, len)) {
            memcpy(piece, p, len);
            *adv = len;
            return len;
        }
    }
    snprintf(piece, 8, "\\x%02X", *p);
    *adv = 1;
    return 4;
}

size_t io_esc_len(const char *s) {
    if (!s) return 6;
    size_t n = 0, adv;
    char piece[8];
    for (const unsigned char *p = (const unsigned char *)s; *p; p += adv) n += esc_piece(p, piece, &adv);
    return n;
}

void io_put_esc(FILE *out, const char *s) {
    if (!out) return;
    if (!s) s = "(null)";
    size_t adv;
    char piece[8];
    for (const unsigned char *p = (const unsigned char *)s; *p; p += adv) {
        size_t k = esc_piece(p, piece, &adv);
        fwrite(piece, 1, k, out);
    }
}

const char *io_esc(char *dst, size_t cap, const char *s) {
    if (!dst || cap == 0) return "";
    if (!s) s = "(null)";
    if (cap < 8) {
        dst[0] = 0;
        return dst;
    }
    const unsigned char *p = (const unsigned char *)s;
    size_t total = io_esc_len(s), o = 0, adv, k;
    char piece[8];
    if (total < cap) {
        for (; *p; p += adv) {
            k = esc_piece(p, piece, &adv);
            memcpy(dst + o, piece, k);
            o += k;
        }
        dst[o] = 0;
        return dst;
    }
    /* Too long: the head, "...", then the shortest tail that fits. */
    size_t budget = cap - 1 - 3, head = budget / 2, tail = budget - head;
    for (; *p; p += adv) {
        k = esc_piece(p, piece, &adv);
        if (o + k > head) break;
        memcpy(dst + o, piece, k);
        o += k;
    }
    memcpy(dst + o, "...", 3);
    o += 3;
    size_t seen = o - 3; /* escaped length of the input consumed so far */
    for (; *p && total - seen > tail; p += adv) seen += esc_piece(p, piece, &adv);
    for (; *p; p += adv) {
        k = esc_piece(p, piece, &adv);
        memcpy(dst + o, piece, k);
        o += k;
    }
    dst[o] = 0;
    return dst;
}

bool io_parse_uint(const char *s, uint64_t max, uint64_t *out) {
    if (!s || !*s || (s[0] == '0' && s[1] != 0)) return false;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        if (!mn_mul_u64(&v, v, 10) || !mn_add_u64(&v, v, (uint64_t)(*p - '0'))) return false;
    }
    if (v > max) return false;
    *out = v;
    return true;
}

static const char *digits(const char *p) {
    const char *q = p;
    while (*q >= '0' && *q <= '9') q++;
    return q;
}

bool io_parse_real(const char *s, double *out) {
    if (!s) return false;
    const char *p = s;
    if (*p == '-') p++;
    const char *q = digits(p);
    if (q == p) return false;
    p = q;
    if (*p == '.') {
        q = digits(p + 1);
        if (q == p + 1) return false;
        p = q;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        q = digits(p);
        if (q == p) return false;
        p = q;
    }
    if (*p) return false;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end != p || !isfinite(v)) return false; /* overflow gives inf; underflow to 0 is fine */
    *out = v;
    return true;
}
