/* util.c - the tokenizer's small building blocks: a chunked arena, growable
 * arrays, two open-addressing hash maps (string -> int32, uint64 -> uint64),
 * UTF-8 decoding/encoding, the Unicode predicates the library uses (through
 * utf8proc), Rust's lossy UTF-8 conversion, and the GPT-2 byte-level alphabet.
 *
 * Does not: validate UTF-8 (callers pass text checked with io_utf8_valid),
 * or remove map entries (maps only grow, then are freed whole).
 */
#include "tokenizer/tokenizer.h"

#include <utf8proc.h>

/* ---- arena ------------------------------------------------------------------- */

struct tk_block {
    tk_block *next;
    size_t used, cap;
    _Alignas(8) char data[];
};

void *tk_alloc(tk_arena *a, size_t n) {
    n = (n + 7) & ~(size_t)7;
    if (n == 0) n = 8;
    tk_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (cap > SIZE_MAX - sizeof(tk_block)) return NULL;
        b = malloc(sizeof(tk_block) + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

char *tk_strndup(tk_arena *a, const char *s, size_t n) {
    if (n == SIZE_MAX) return NULL;
    char *p = tk_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void tk_arena_free(tk_arena *a) {
    tk_block *b = a->head;
    while (b) {
        tk_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

/* ---- arrays ---------------------------------------------------------------------- */

bool tk_grow(void **v, size_t *cap, size_t need, size_t esz) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) return false;
        c *= 2;
    }
    uint64_t bytes;
    if (!mn_mul_u64(&bytes, c, esz) || bytes > SIZE_MAX) return false;
    void *p = realloc(*v, (size_t)bytes);
    if (!p) return false;
    *v = p;
    *cap = c;
    return true;
}

bool tk_ids_push(tk_ids *a, int32_t id) {
    if (!tk_grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) return false;
    a->v[a->n++] = id;
    return true;
}

bool tk_spans_push(tk_spans *s, size_t a, size_t b, bool match) {
    if (!tk_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) return false;
    s->v[s->n++] = (tk_span){a, b, match};
    return true;
}

bool tk_pieces_push(tk_pieces *p, const char *s, size_t n, int32_t id) {
    if (!tk_grow((void **)&p->v, &p->cap, p->n + 1, sizeof *p->v)) return false;
    p->v[p->n++] = (tk_piece){s, n, id};
    return true;
}

/* ---- string map --------------------------------------------------------------------- */

static uint32_t str_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static bool smap_rehash(tk_smap *m, size_t cap) {
    tk_smap_ent *e = calloc(cap, sizeof *e);
    if (!e) return false;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].s) continue;
        size_t j = m->e[i].hash & (cap - 1);
        while (e[j].s) j = (j + 1) & (cap - 1);
        e[j] = m->e[i];
    }
    free(m->e);
    m->e = e;
    m->cap = cap;
    return true;
}

int tk_smap_put(tk_smap *m, const char *s, size_t n, int32_t v, int32_t *old) {
    if (n > UINT32_MAX) return -1;
    if ((m->count + 1) * 4 > m->cap * 3) {
        if (m->cap > SIZE_MAX / 4 / sizeof(tk_smap_ent)) return -1;
        if (!smap_rehash(m, m->cap ? m->cap * 2 : 64)) return -1;
    }
    uint32_t h = str_hash(s, n);
    size_t j = h & (m->cap - 1);
    while (m->e[j].s) {
        if (m->e[j].hash == h && m->e[j].n == n && memcmp(m->e[j].s, s, n) == 0) {
            if (old) *old = m->e[j].v;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->e[j] = (tk_smap_ent){s, (uint32_t)n, h, v};
    m->count++;
    return 1;
}

bool tk_smap_get(const tk_smap *m, const char *s, size_t n, int32_t *v) {
    if (!m->cap || n > UINT32_MAX) return false;
    uint32_t h = str_hash(s, n);
    size_t j = h & (m->cap - 1);
    while (m->e[j].s) {
        if (m->e[j].hash == h && m->e[j].n == n && memcmp(m->e[j].s, s, n) == 0) {
            if (v) *v = m->e[j].v;
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return false;
}

void tk_smap_free(tk_smap *m) {
    free(m->e);
    memset(m, 0, sizeof *m);
}

/* ---- uint64 map ----------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static bool map_rehash(tk_map *m, size_t cap) {
    uint64_t *k = malloc(cap * sizeof *k), *v = malloc(cap * sizeof *v);
    uint8_t *used = calloc(cap, 1);
    if (!k || !v || !used) {
        free(k);
        free(v);
        free(used);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        size_t j = mix64(m->k[i]) & (cap - 1);
        while (used[j]) j = (j + 1) & (cap - 1);
        used[j] = 1;
        k[j] = m->k[i];
        v[j] = m->v[i];
    }
    free(m->k);
    free(m->v);
    free(m->used);
    m->k = k;
    m->v = v;
    m->used = used;
    m->cap = cap;
    return true;
}

int tk_map_put(tk_map *m, uint64_t k, uint64_t v, uint64_t *old) {
    if ((m->count + 1) * 4 > m->cap * 3) {
        if (m->cap > SIZE_MAX / 4 / sizeof(uint64_t)) return -1;
        if (!map_rehash(m, m->cap ? m->cap * 2 : 64)) return -1;
    }
    size_t j = mix64(k) & (m->cap - 1);
    while (m->used[j]) {
        if (m->k[j] == k) {
            if (old) *old = m->v[j];
            m->v[j] = v;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->used[j] = 1;
    m->k[j] = k;
    m->v[j] = v;
    m->count++;
    return 1;
}

bool tk_map_get(const tk_map *m, uint64_t k, uint64_t *v) {
    if (!m->cap) return false;
    size_t j = mix64(k) & (m->cap - 1);
    while (m->used[j]) {
        if (m->k[j] == k) {
            if (v) *v = m->v[j];
            return true;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return false;
}

void tk_map_free(tk_map *m) {
    free(m->k);
    free(m->v);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* ---- UTF-8 and Unicode -------------------------------------------------------------------- */

size_t tk_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const uint8_t *u = (const uint8_t *)s;
    if (n == 0) {
        *cp = 0;
        return 0;
    }
    if (u[0] < 0x80 || n < 2) {
        *cp = u[0];
        return 1;
    }
    if (u[0] < 0xE0) {
        *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
        return 2;
    }
    if (u[0] < 0xF0 || n < 4) {
        if (n < 3) {
            *cp = u[0];
            return 1;
        }
        *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
          (u[3] & 0x3F);
    return 4;
}

size_t tk_utf8_encode(char *out, uint32_t cp) {
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

bool tk_is_numeric(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool tk_is_white_space(uint32_t cp) {
    if (cp >= 0x09 && cp <= 0x0D) return true;
    switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

bool tk_is_word(uint32_t cp) {
    if (cp == 0x200C || cp == 0x200D) return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

static bool lossy_put(char **out, size_t *len, size_t *cap, const void *p, size_t n) {
    if (*len > SIZE_MAX - n - 1) return false;
    if (!tk_grow((void **)out, cap, *len + n + 1, 1)) return false;
    memcpy(*out + *len, p, n);
    *len += n;
    (*out)[*len] = 0;
    return true;
}

bool tk_utf8_lossy(char **out, size_t *len, size_t *cap, const uint8_t *b, size_t n) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    if (!lossy_put(out, len, cap, "", 0)) return false;
    size_t i = 0;
    while (i < n) {
        size_t run = i; /* a run of valid characters is copied at once */
        for (;;) {
            if (run >= n) break;
            uint8_t c = b[run];
            if (c < 0x80) {
                run++;
                continue;
            }
            size_t need;
            uint8_t lo = 0x80, hi = 0xBF;
            if (c >= 0xC2 && c <= 0xDF) need = 1;
            else if (c == 0xE0) need = 2, lo = 0xA0;
            else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
            else if (c == 0xED) need = 2, hi = 0x9F;
            else if (c == 0xF0) need = 3, lo = 0x90;
            else if (c >= 0xF1 && c <= 0xF3) need = 3;
            else if (c == 0xF4) need = 3, hi = 0x8F;
            else break; /* 0x80..0xC1, 0xF5..0xFF: invalid lead byte */
            size_t j = run + 1;
            if (j >= n || b[j] < lo || b[j] > hi) break;
            j++;
            size_t k = 1;
            while (k < need && j < n && b[j] >= 0x80 && b[j] <= 0xBF) j++, k++;
            if (k < need) break;
            run = j;
        }
        if (run > i && !lossy_put(out, len, cap, b + i, run - i)) return false;
        i = run;
        if (i >= n) break;
        /* The maximal invalid subpart at i: a lead byte and the continuation
         * bytes that were still acceptable, replaced by one U+FFFD. */
        uint8_t c = b[i];
        size_t need = 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) need = 2, lo = 0xA0;
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
        else if (c == 0xED) need = 2, hi = 0x9F;
        else if (c == 0xF0) need = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) need = 3, hi = 0x8F;
        size_t j = i + 1;
        if (need && j < n && b[j] >= lo && b[j] <= hi) {
            j++;
            for (size_t k = 1; k < need && j < n && b[j] >= 0x80 && b[j] <= 0xBF; k++) j++;
        }
        if (!lossy_put(out, len, cap, fffd, 3)) return false;
        i = j;
    }
    return true;
}

/* ---- byte-level alphabet ------------------------------------------------------------------- */

void tk_bytelevel_init(tk_bytelevel *bl) {
    for (size_t i = 0; i < MN_ARRAY_LEN(bl->byte_of); i++) bl->byte_of[i] = -1;
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = printable ? (uint32_t)b : next++;
        bl->len[b] = (uint8_t)tk_utf8_encode(bl->utf8[b], cp);
        bl->utf8[b][bl->len[b]] = 0;
        bl->byte_of[cp] = (int16_t)b;
    }
    MN_ASSERT(next == 256 + 68);
}
