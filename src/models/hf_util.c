/* hf_util.c - message formatting and strict JSON helpers for src/models
 * (see hf_util.h).
 *
 * Does not: parse numbers itself (cJSON does; callers check the doubles).
 */
#include "models/hf_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hf_fmt(char *err, size_t cap, const char *fmt, ...) {
    if (!err || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

static void add_v(hf_str *s, const char *fmt, va_list ap) {
    if (s->oom) return;
    va_list ap2;
    va_copy(ap2, ap);
    int k = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (k < 0) return;
    if (s->n + (size_t)k + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + (size_t)k + 1) cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) {
            s->oom = true;
            return;
        }
        s->p = p;
        s->cap = cap;
    }
    vsnprintf(s->p + s->n, (size_t)k + 1, fmt, ap);
    s->n += (size_t)k;
}

void hf_str_add(hf_str *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_v(s, fmt, ap);
    va_end(ap);
}

void hf_str_add_name(hf_str *s, const char *name) {
    char buf[160];
    hf_str_add(s, "'%s'", mn_escape(buf, sizeof buf, name));
}

void hf_str_free(hf_str *s) {
    free(s->p);
    memset(s, 0, sizeof *s);
}

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorting the keys keeps a hostile object of a million keys O(n log n). */
const char *hf_json_duplicate_key(const cJSON *o) {
    if (!cJSON_IsObject(o) && !cJSON_IsArray(o)) return NULL;
    size_t n = 0;
    for (const cJSON *a = o->child; a; a = a->next) {
        const char *d = hf_json_duplicate_key(a);
        if (d) return d;
        n++;
    }
    if (!cJSON_IsObject(o) || n < 2) return NULL;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) return "(out of memory while checking keys)";
    size_t k = 0;
    for (const cJSON *a = o->child; a; a = a->next) keys[k++] = a->string ? a->string : "";
    qsort(keys, n, sizeof *keys, cmp_key);
    const char *dup = NULL;
    for (size_t i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) dup = keys[i];
    free(keys);
    return dup;
}

const char *hf_json_kind(const cJSON *v) {
    if (!v) return "absent";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

bool hf_json_bad_string(const char *t, size_t len) {
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            in_str = t[i] == '"';
            continue;
        }
        if ((unsigned char)t[i] < 0x20) return true;
        if (t[i] == '"') in_str = false;
        else if (t[i] == '\\' && i + 1 < len) {
            if (t[i + 1] == 'u' && i + 5 < len && memcmp(t + i + 2, "0000", 4) == 0) return true;
            i++; /* the escaped character */
        }
    }
    return false;
}
