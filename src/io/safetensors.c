/* safetensors.c - parse, load, save and list safetensors files.
 *
 * Does: treat every file as hostile. The JSON header is parsed by cJSON; each
 * name, dtype, shape, offset and size is then checked (UTF-8, known dtype,
 * integral in-range numbers, byte counts that match, no overlapping ranges, no
 * duplicate names) before an st_file is handed out. Writes are atomic: a
 * temporary file in the same folder, fsync, rename, fsync of the folder.
 *
 * Does not: convert dtypes, map files into memory, look at the tensor bytes
 * themselves (NaNs are the caller's business), or require the tensors to cover
 * the data section without gaps (bytes no tensor claims are ignored).
 *
 * Ownership: an st_file owns its names, its metadata strings and, when it came
 * from st_load, the file image (owned); st_free releases all of them. st_parse
 * never copies the data section: f->data points into the caller's buffer.
 */
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers ------------------------------------------------------- */

static void set_err(char *err, size_t cap, const char *fmt, ...) MN_PRINTF(3, 4);
static void set_err(char *err, size_t cap, const char *fmt, ...) {
    if (!err || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(err, cap, fmt, ap);
    va_end(ap);
}

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"U16", 2}, {"I16", 2},     {"F16", 2},     {"BF16", 2}, {"U32", 4},
    {"I32", 4},  {"F32", 4}, {"F64", 8}, {"U64", 8}, {"I64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};
/* Every name above must fit st_tensor.dtype with its NUL. */
_Static_assert(sizeof("F8_E4M3") <= sizeof(((st_tensor *)0)->dtype), "dtype field too small");

size_t st_dtype_size(const char *dtype) {
    if (!dtype) return 0;
    for (size_t i = 0; i < MN_ARRAY_LEN(st_dtypes); i++)
        if (strcmp(st_dtypes[i].name, dtype) == 0) return st_dtypes[i].size;
    return 0;
}

bool st_utf8_valid(const char *str, size_t n) {
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

static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* One printable piece of s at p: control bytes (and bytes >= 0x80 unless
 * keep_utf8 and they start a well-formed sequence) become \xNN. Writes at
 * most 5 bytes to piece, sets *adv to the input bytes consumed, returns the
 * piece length. */
static size_t esc_piece(const unsigned char *p, char piece[8], size_t *adv, bool keep_utf8) {
    if (*p >= 0x20 && *p < 0x7F) {
        piece[0] = (char)*p;
        *adv = 1;
        return 1;
    }
    if (*p >= 0x80 && keep_utf8) {
        size_t len = *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : *p >= 0xC0 ? 2 : 0;
        size_t k = 1;
        while (len && k < len && p[k] >= 0x80 && p[k] <= 0xBF) k++;
        if (len && k == len && st_utf8_valid((const char *)p, len)) {
            memcpy(piece, p, len);
            *adv = len;
            return len;
        }
    }
    snprintf(piece, 8, "\\x%02X", *p);
    *adv = 1;
    return 4;
}

/* s made safe to show in a message: escaped as above, cut with "..." to fit
 * dst (cap >= 8). Returns dst. */
static const char *esc(char *dst, size_t cap, const char *s, bool keep_utf8) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p) {
        char piece[8];
        size_t adv, k = esc_piece(p, piece, &adv, keep_utf8);
        if (o + k + 4 > cap) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(dst + o, piece, k);
        o += k;
        p += adv;
    }
    dst[o] = 0;
    return dst;
}

#define ESC_CAP 80 /* room for a shown name in a message */

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Finds a name that occurs twice among names[0..n). Returns MN_OK with
 * *dup = NULL when all differ, MN_OK with *dup set to the repeated name, or
 * MN_E_NOMEM. The array itself is not reordered. */
static mn_status find_duplicate(const char **dup, const char *const *names, size_t n) {
    *dup = NULL;
    if (n < 2) return MN_OK;
    const char **sorted = malloc(n * sizeof *sorted);
    if (!sorted) return MN_E_NOMEM;
    memcpy(sorted, names, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_str_ptr);
    for (size_t i = 1; i < n && !*dup; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) *dup = sorted[i];
    free(sorted);
    return MN_OK;
}

/* Product of dims times elem_size with overflow checks; a zero dim makes the
 * product 0 whatever the other dims are. Returns false on overflow. */
static bool tensor_bytes(uint64_t *out, const int64_t *shape, int rank, size_t elem_size) {
    uint64_t n = 1;
    for (int i = 0; i < rank; i++)
        if (shape[i] == 0) {
            *out = 0;
            return true;
        }
    for (int i = 0; i < rank; i++)
        if (!mn_mul_u64(&n, n, (uint64_t)shape[i])) return false;
    return mn_mul_u64(out, n, elem_size);
}

static void format_shape(char *buf, size_t cap, const int64_t *shape, int rank) {
    size_t o = 0;
    buf[o++] = '[';
    for (int i = 0; i < rank && o < cap; i++) {
        int w = snprintf(buf + o, cap - o, "%s%" PRId64, i ? "," : "", shape[i]);
        if (w < 0) break;
        o += (size_t)w;
    }
    if (o + 2 <= cap) {
        buf[o++] = ']';
        buf[o] = 0;
    } else {
        buf[cap - 1] = 0;
    }
}

/* ---- parsing -------------------------------------------------------------- */

/* A JSON number that is an integer in [0, 2^53): exact as a double. */
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = cJSON_GetNumberValue(j);
    if (!isfinite(d) || d < 0.0 || d >= ST_MAX_JSON_INT || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

/* Checks one tensor entry j (name already validated, in t->name) against a
 * data section of data_len bytes and fills t. */
static mn_status parse_entry(st_tensor *t, const cJSON *j, uint64_t data_len, char *err, size_t cap) {
    char nm[ESC_CAP], tmp[ESC_CAP];
    esc(nm, sizeof nm, t->name, true);
    if (!cJSON_IsObject(j)) {
        set_err(err, cap, "tensor '%s': entry is not a JSON object", nm);
        return MN_E_FORMAT;
    }
    const cJSON *jd = NULL, *js = NULL, *jo = NULL, *c;
    cJSON_ArrayForEach(c, j) {
        const cJSON **slot;
        if (!c->string) continue;
        if (strcmp(c->string, "dtype") == 0) slot = &jd;
        else if (strcmp(c->string, "shape") == 0) slot = &js;
        else if (strcmp(c->string, "data_offsets") == 0) slot = &jo;
        else continue; /* unknown keys are ignored, as other readers do */
        if (*slot) {
            set_err(err, cap, "tensor '%s': key \"%s\" appears twice", nm, c->string);
            return MN_E_FORMAT;
        }
        *slot = c;
    }

    /* dtype */
    if (!jd) {
        set_err(err, cap, "tensor '%s': missing \"dtype\"", nm);
        return MN_E_FORMAT;
    }
    const char *dt = cJSON_GetStringValue(jd);
    if (!dt) {
        set_err(err, cap, "tensor '%s': \"dtype\" is not a string", nm);
        return MN_E_FORMAT;
    }
    t->elem_size = st_dtype_size(dt);
    if (!t->elem_size) {
        set_err(err, cap,
                "tensor '%s': unknown dtype '%s' (expected BOOL, U8, I8, U16, I16, F16, BF16, U32, "
                "I32, F32, F64, U64, I64, F8_E4M3 or F8_E5M2)",
                nm, esc(tmp, sizeof tmp, dt, false));
        return MN_E_FORMAT;
    }
    memcpy(t->dtype, dt, strlen(dt) + 1); /* known names fit (static assert above) */

    /* shape */
    if (!js) {
        set_err(err, cap, "tensor '%s': missing \"shape\"", nm);
        return MN_E_FORMAT;
    }
    if (!cJSON_IsArray(js)) {
        set_err(err, cap, "tensor '%s': \"shape\" is not an array", nm);
        return MN_E_FORMAT;
    }
    int rank = 0;
    cJSON_ArrayForEach(c, js) {
        uint64_t d;
        if (rank >= ST_MAX_RANK) {
            set_err(err, cap, "tensor '%s': rank %d exceeds the maximum %d", nm,
                    cJSON_GetArraySize(js), ST_MAX_RANK);
            return MN_E_FORMAT;
        }
        if (!json_uint(c, &d)) {
            set_err(err, cap, "tensor '%s': shape[%d] is not an integer in [0, 2^53)", nm, rank);
            return MN_E_FORMAT;
        }
        t->shape[rank++] = (int64_t)d;
    }
    t->rank = rank;

    /* data_offsets */
    if (!jo) {
        set_err(err, cap, "tensor '%s': missing \"data_offsets\"", nm);
        return MN_E_FORMAT;
    }
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2) {
        set_err(err, cap, "tensor '%s': \"data_offsets\" is not an array [begin, end]", nm);
        return MN_E_FORMAT;
    }
    if (!json_uint(cJSON_GetArrayItem(jo, 0), &t->begin) || !json_uint(cJSON_GetArrayItem(jo, 1), &t->end)) {
        set_err(err, cap, "tensor '%s': data_offsets are not integers in [0, 2^53)", nm);
        return MN_E_FORMAT;
    }
    if (t->begin > t->end) {
        set_err(err, cap, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] has begin > end", nm,
                t->begin, t->end);
        return MN_E_FORMAT;
    }
    if (t->end > data_len) {
        set_err(err, cap,
                "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the data section (%" PRIu64
                " bytes)",
                nm, t->begin, t->end, data_len);
        return MN_E_FORMAT;
    }

    /* size agreement */
    uint64_t need;
    char shp[ST_MAX_RANK * 21 + 3];
    format_shape(shp, sizeof shp, t->shape, t->rank);
    if (!tensor_bytes(&need, t->shape, t->rank, t->elem_size)) {
        set_err(err, cap, "tensor '%s': shape %s of %s overflows 64-bit byte count", nm, shp, t->dtype);
        return MN_E_FORMAT;
    }
    if (need != t->end - t->begin) {
        set_err(err, cap,
                "tensor '%s': shape %s of %s needs %" PRIu64 " bytes but data_offsets [%" PRIu64 ", %" PRIu64
                "] hold %" PRIu64,
                nm, shp, t->dtype, need, t->begin, t->end, t->end - t->begin);
        return MN_E_FORMAT;
    }
    return MN_OK;
}

/* "__metadata__": an object of string -> string, kept in file order. */
static mn_status parse_meta(st_file *f, const cJSON *j, char *err, size_t cap) {
    char tmp[ESC_CAP];
    if (!cJSON_IsObject(j)) {
        set_err(err, cap, "\"__metadata__\" is not a JSON object");
        return MN_E_FORMAT;
    }
    int count = cJSON_GetArraySize(j);
    if (count == 0) return MN_OK;
    f->meta_keys = calloc((size_t)count, sizeof *f->meta_keys);
    f->meta_vals = calloc((size_t)count, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals) return MN_E_NOMEM;
    const cJSON *c;
    cJSON_ArrayForEach(c, j) {
        const char *k = c->string ? c->string : "";
        if (!st_utf8_valid(k, strlen(k))) {
            set_err(err, cap, "metadata key '%s' is not valid UTF-8", esc(tmp, sizeof tmp, k, false));
            return MN_E_FORMAT;
        }
        const char *v = cJSON_GetStringValue(c);
        if (!v) {
            set_err(err, cap, "metadata '%s': value is not a string", esc(tmp, sizeof tmp, k, true));
            return MN_E_FORMAT;
        }
        if (!st_utf8_valid(v, strlen(v))) {
            set_err(err, cap, "metadata '%s': value is not valid UTF-8", esc(tmp, sizeof tmp, k, true));
            return MN_E_FORMAT;
        }
        if (f->nmeta >= count) break; /* cannot happen: count came from the same list */
        f->meta_keys[f->nmeta] = mn_strdup(k);
        f->meta_vals[f->nmeta] = mn_strdup(v);
        f->nmeta++; /* counted before the check so st_free releases a half-made pair */
        if (!f->meta_keys[f->nmeta - 1] || !f->meta_vals[f->nmeta - 1]) return MN_E_NOMEM;
    }
    const char *dup;
    if (find_duplicate(&dup, (const char *const *)f->meta_keys, (size_t)f->nmeta) != MN_OK) return MN_E_NOMEM;
    if (dup) {
        set_err(err, cap, "metadata key '%s' appears twice", esc(tmp, sizeof tmp, dup, true));
        return MN_E_FORMAT;
    }
    return MN_OK;
}

static int cmp_tensor_begin(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Walks the header object; fills f (f->data, f->data_len already set). */
static mn_status parse_root(st_file *f, const cJSON *root, char *err, size_t cap) {
    char tmp[ESC_CAP], tmp2[ESC_CAP];
    int count = cJSON_GetArraySize(root);
    if (count > 0) {
        f->tensors = calloc((size_t)count, sizeof *f->tensors);
        if (!f->tensors) return MN_E_NOMEM;
    }
    bool seen_meta = false;
    const cJSON *c;
    cJSON_ArrayForEach(c, root) {
        const char *name = c->string ? c->string : "";
        if (strcmp(name, "__metadata__") == 0) {
            if (seen_meta) {
                set_err(err, cap, "\"__metadata__\" appears twice");
                return MN_E_FORMAT;
            }
            seen_meta = true;
            mn_status s = parse_meta(f, c, err, cap);
            if (s != MN_OK) return s;
            continue;
        }
        if (!st_utf8_valid(name, strlen(name))) {
            set_err(err, cap, "tensor '%s': name is not valid UTF-8", esc(tmp, sizeof tmp, name, false));
            return MN_E_FORMAT;
        }
        if (f->n >= count) break; /* cannot happen: count came from the same list */
        st_tensor *t = &f->tensors[f->n];
        t->name = mn_strdup(name);
        if (!t->name) return MN_E_NOMEM;
        f->n++;
        mn_status s = parse_entry(t, c, f->data_len, err, cap);
        if (s != MN_OK) return s;
    }

    /* Duplicate names: cJSON keeps repeated keys, so look for them. */
    if (f->n > 1) {
        const char **names = malloc((size_t)f->n * sizeof *names);
        if (!names) return MN_E_NOMEM;
        for (int i = 0; i < f->n; i++) names[i] = f->tensors[i].name;
        const char *dup;
        mn_status s = find_duplicate(&dup, names, (size_t)f->n);
        if (s == MN_OK && dup) {
            set_err(err, cap, "tensor '%s': name appears twice", esc(tmp, sizeof tmp, dup, true));
            s = MN_E_FORMAT;
        }
        free(names);
        if (s != MN_OK) return s;

        /* Overlaps: sorted by begin, each range must start at or after the
         * furthest end seen so far. An empty range inside another counts too:
         * no writer produces one. */
        qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_tensor_begin);
        int far = 0;
        for (int i = 1; i < f->n; i++) {
            const st_tensor *a = &f->tensors[far], *b = &f->tensors[i];
            if (b->begin < a->end) {
                set_err(err, cap,
                        "tensor '%s': bytes [%" PRIu64 ", %" PRIu64 ") overlap tensor '%s' [%" PRIu64 ", %" PRIu64 ")",
                        esc(tmp, sizeof tmp, b->name, true), b->begin, b->end, esc(tmp2, sizeof tmp2, a->name, true),
                        a->begin, a->end);
                return MN_E_FORMAT;
            }
            if (b->end >= a->end) far = i;
        }
    }
    return MN_OK;
}

mn_status st_parse(st_file *out, const uint8_t *buf, size_t len, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out) {
        set_err(err, cap, "st_parse: out is NULL");
        return MN_E_INVALID;
    }
    memset(out, 0, sizeof *out);
    if (!buf && len) {
        set_err(err, cap, "st_parse: buffer is NULL");
        return MN_E_INVALID;
    }
    if (len < 8) {
        set_err(err, cap, "file is %zu bytes, shorter than the 8-byte header length field", len);
        return MN_E_FORMAT;
    }
    uint64_t hlen = get_le64(buf);
    if (hlen > ST_MAX_HEADER_BYTES) {
        set_err(err, cap, "header length %" PRIu64 " exceeds the %u-byte limit", hlen, ST_MAX_HEADER_BYTES);
        return MN_E_FORMAT;
    }
    if (hlen > len - 8) {
        set_err(err, cap, "header length %" PRIu64 " runs past the end of the file (%zu bytes follow the length field)",
                hlen, len - 8);
        return MN_E_FORMAT;
    }
    const char *hdr = (const char *)buf + 8;
    const char *nul = memchr(hdr, 0, (size_t)hlen);
    if (nul) {
        set_err(err, cap, "header contains a NUL byte at offset %zu", (size_t)(nul - hdr));
        return MN_E_FORMAT;
    }
    /* cJSON gets its own NUL-terminated copy: defence in depth should the
     * library ever look one byte past the length it was given. */
    char *copy = malloc((size_t)hlen + 1);
    if (!copy) {
        set_err(err, cap, "out of memory copying a %" PRIu64 "-byte header", hlen);
        return MN_E_NOMEM;
    }
    if (hlen) memcpy(copy, hdr, (size_t)hlen);
    copy[hlen] = 0;

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, (size_t)hlen, &end, false);
    mn_status s = MN_OK;
    if (!root) {
        size_t at = end && end >= copy && end <= copy + hlen ? (size_t)(end - copy) : 0;
        set_err(err, cap, "header is not valid JSON (error near byte %zu of %" PRIu64 ")", at, hlen);
        s = MN_E_FORMAT;
    } else {
        /* Only JSON whitespace may follow the object (writers pad with spaces). */
        for (const char *p = end; p && p < copy + hlen; p++)
            if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
                set_err(err, cap, "header has trailing bytes after the JSON value (at byte %zu)", (size_t)(p - copy));
                s = MN_E_FORMAT;
                break;
            }
        if (s == MN_OK && !cJSON_IsObject(root)) {
            set_err(err, cap, "header is not a JSON object");
            s = MN_E_FORMAT;
        }
    }
    if (s == MN_OK) {
        out->data = buf + 8 + hlen;
        out->data_len = (uint64_t)(len - 8 - (size_t)hlen);
        s = parse_root(out, root, err, cap);
        if (s == MN_E_NOMEM && err && cap && !err[0]) set_err(err, cap, "out of memory reading the header");
    }
    cJSON_Delete(root);
    free(copy);
    if (s != MN_OK) st_free(out);
    return s;
}

void st_free(st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->owned);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

/* ---- loading --------------------------------------------------------------- */

_Static_assert(LONG_MAX <= SIZE_MAX, "a file size from ftell must fit size_t");

mn_status st_load(st_file *out, const char *path, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out || !path) {
        set_err(err, cap, "st_load: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        set_err(err, cap, "cannot open '%s': %s", path, strerror(errno));
        return MN_E_IO;
    }
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0) {
        set_err(err, cap, "cannot read '%s': %s", path, strerror(errno));
        fclose(fp);
        return MN_E_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        set_err(err, cap, "cannot read '%s': %s", path, S_ISDIR(sb.st_mode) ? strerror(EISDIR) : "not a regular file");
        fclose(fp);
        return MN_E_IO;
    }
    long size = -1;
    if (fseek(fp, 0, SEEK_END) != 0 || (size = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        set_err(err, cap, "cannot find the size of '%s': %s", path, strerror(errno));
        fclose(fp);
        return MN_E_IO;
    }
    size_t n = (size_t)size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        set_err(err, cap, "out of memory reading '%s' (%zu bytes)", path, n);
        fclose(fp);
        return MN_E_NOMEM;
    }
    errno = 0;
    size_t got = fread(buf, 1, n, fp);
    if (got != n) {
        int e = errno;
        set_err(err, cap, "cannot read '%s': %s", path,
                ferror(fp) ? strerror(e ? e : EIO) : "file shrank while being read");
        fclose(fp);
        free(buf);
        return MN_E_IO;
    }
    fclose(fp); /* read-only stream: nothing to lose on close */

    char msg[1024];
    mn_status s = st_parse(out, buf, n, msg, sizeof msg);
    if (s != MN_OK) {
        set_err(err, cap, "'%s': %s", path, msg);
        free(buf);
        return s;
    }
    out->owned = buf;
    return MN_OK;
}

/* ---- saving ------------------------------------------------------------------ */

/* Checks what st_save_atomic is given; MN_E_INVALID names the entry. */
static mn_status validate_entries(const st_entry *e, int n, const char *const *meta_kv, int nmeta,
                                  uint64_t *total, char *err, size_t cap) {
    char tmp[ESC_CAP];
    *total = 0;
    for (int i = 0; i < n; i++) {
        const st_entry *x = &e[i];
        if (!x->name) {
            set_err(err, cap, "entry %d: name is NULL", i);
            return MN_E_INVALID;
        }
        const char *nm = esc(tmp, sizeof tmp, x->name, false);
        if (!st_utf8_valid(x->name, strlen(x->name))) {
            set_err(err, cap, "tensor '%s': name is not valid UTF-8", nm);
            return MN_E_INVALID;
        }
        if (strcmp(x->name, "__metadata__") == 0) {
            set_err(err, cap, "tensor '__metadata__': name is reserved for metadata");
            return MN_E_INVALID;
        }
        size_t es = st_dtype_size(x->dtype);
        if (!es) {
            set_err(err, cap, "tensor '%s': unknown dtype '%s'", nm, x->dtype ? x->dtype : "(null)");
            return MN_E_INVALID;
        }
        if (x->rank < 0 || x->rank > ST_MAX_RANK || (x->rank > 0 && !x->shape)) {
            set_err(err, cap, "tensor '%s': rank %d is not in [0, %d] or shape is NULL", nm, x->rank, ST_MAX_RANK);
            return MN_E_INVALID;
        }
        for (int d = 0; d < x->rank; d++)
            if (x->shape[d] < 0 || (double)x->shape[d] >= ST_MAX_JSON_INT) {
                set_err(err, cap, "tensor '%s': shape[%d] = %" PRId64 " is not in [0, 2^53)", nm, d, x->shape[d]);
                return MN_E_INVALID;
            }
        uint64_t need;
        if (!tensor_bytes(&need, x->shape, x->rank, es) || need != x->bytes) {
            char shp[ST_MAX_RANK * 21 + 3];
            format_shape(shp, sizeof shp, x->shape, x->rank);
            set_err(err, cap, "tensor '%s': shape %s of %s does not match %" PRIu64 " bytes", nm, shp, x->dtype,
                    x->bytes);
            return MN_E_INVALID;
        }
        if (x->bytes && !x->data) {
            set_err(err, cap, "tensor '%s': data is NULL", nm);
            return MN_E_INVALID;
        }
        if (!mn_add_u64(total, *total, x->bytes) || (double)*total >= ST_MAX_JSON_INT) {
            set_err(err, cap, "tensor '%s': data section would exceed 2^53 bytes", nm);
            return MN_E_INVALID;
        }
    }
    for (int i = 0; i < 2 * nmeta; i++) {
        const char *s = meta_kv[i];
        if (!s || !st_utf8_valid(s, strlen(s))) {
            set_err(err, cap, "metadata %s %d is %s", i % 2 ? "value" : "key", i / 2,
                    s ? "not valid UTF-8" : "NULL");
            return MN_E_INVALID;
        }
    }

    const char *dup = NULL;
    size_t m = (size_t)(n > nmeta ? n : nmeta);
    const char **names = malloc((m ? m : 1) * sizeof *names);
    if (!names) return MN_E_NOMEM;
    for (int i = 0; i < n; i++) names[i] = e[i].name;
    mn_status s = find_duplicate(&dup, names, (size_t)n);
    if (s == MN_OK && dup) {
        set_err(err, cap, "tensor '%s': name appears twice", esc(tmp, sizeof tmp, dup, false));
        s = MN_E_INVALID;
    }
    if (s == MN_OK) {
        for (int i = 0; i < nmeta; i++) names[i] = meta_kv[2 * i];
        s = find_duplicate(&dup, names, (size_t)nmeta);
        if (s == MN_OK && dup) {
            set_err(err, cap, "metadata key '%s' appears twice", esc(tmp, sizeof tmp, dup, false));
            s = MN_E_INVALID;
        }
    }
    free(names);
    return s;
}

/* An integer node printed exactly (cJSON would print doubles >= 1e15 with an
 * exponent, which strict readers reject as an offset). */
static cJSON *json_int(uint64_t v) {
    char num[24];
    snprintf(num, sizeof num, "%" PRIu64, v);
    return cJSON_CreateRaw(num);
}

/* The unpadded header text; caller frees with cJSON_free. NULL = out of memory. */
static char *build_header(const st_entry *e, int n, const char *const *meta_kv, int nmeta) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    bool ok = true;
    if (nmeta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        ok = m != NULL;
        for (int i = 0; ok && i < nmeta; i++) ok = cJSON_AddStringToObject(m, meta_kv[2 * i], meta_kv[2 * i + 1]) != NULL;
    }
    uint64_t off = 0;
    for (int i = 0; ok && i < n; i++) {
        cJSON *t = cJSON_AddObjectToObject(root, e[i].name);
        cJSON *shape = t ? cJSON_AddArrayToObject(t, "shape") : NULL;
        cJSON *offs = t ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
        ok = t && cJSON_AddStringToObject(t, "dtype", e[i].dtype) && shape && offs;
        for (int d = 0; ok && d < e[i].rank; d++) {
            cJSON *v = json_int((uint64_t)e[i].shape[d]);
            ok = v && cJSON_AddItemToArray(shape, v);
            if (!ok) cJSON_Delete(v);
        }
        uint64_t range[2] = {off, off + e[i].bytes}; /* no overflow: total checked */
        for (int k = 0; ok && k < 2; k++) {
            cJSON *v = json_int(range[k]);
            ok = v && cJSON_AddItemToArray(offs, v);
            if (!ok) cJSON_Delete(v);
        }
        off += e[i].bytes;
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

static mn_status write_all(FILE *fp, const void *p, uint64_t n) {
    const uint8_t *b = p;
    while (n) {
        size_t chunk = n > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)n;
        if (fwrite(b, 1, chunk, fp) != chunk) return MN_E_IO;
        b += chunk;
        n -= chunk;
    }
    return MN_OK;
}

/* fsync of the folder holding path, so the rename itself is durable. path is
 * a writable copy (cut at its last '/'), so nothing here can run out of memory
 * after the old file was replaced. Returns 0 or an errno value. */
static int fsync_parent(char *path) {
    char *slash = strrchr(path, '/');
    const char *d = path;
    if (!slash) d = ".";
    else if (slash == path) path[1] = 0;
    else *slash = 0;
    int rc = 0;
    int fd = open(d, O_RDONLY | O_DIRECTORY);
    if (fd < 0) rc = errno;
    else {
        /* EINVAL: this file system cannot sync a folder; nothing more to do. */
        if (fsync(fd) != 0 && errno != EINVAL) rc = errno;
        if (close(fd) != 0 && !rc) rc = errno;
    }
    return rc;
}

mn_status st_save_atomic(const char *path, const st_entry *e, int n, const char *const *meta_kv, int nmeta,
                         char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!path || !*path || n < 0 || (n > 0 && !e) || nmeta < 0 || (nmeta > 0 && !meta_kv)) {
        set_err(err, cap, "st_save_atomic: bad arguments (path %s, %d entries, %d metadata pairs)",
                path ? "set" : "NULL", n, nmeta);
        return MN_E_INVALID;
    }
    uint64_t total;
    mn_status s = validate_entries(e, n, meta_kv, nmeta, &total, err, cap);
    if (s != MN_OK) {
        if (s == MN_E_NOMEM) set_err(err, cap, "out of memory saving '%s'", path);
        return s;
    }
    char *hdr = build_header(e, n, meta_kv, nmeta);
    if (!hdr) {
        set_err(err, cap, "out of memory building the header of '%s'", path);
        return MN_E_NOMEM;
    }
    size_t hl = strlen(hdr);
    size_t padded = (hl + 7) & ~(size_t)7; /* 8 + padded is a multiple of 8: data starts aligned */
    if (padded > ST_MAX_HEADER_BYTES) {
        set_err(err, cap, "header of '%s' would be %zu bytes, over the %u-byte limit", path, padded,
                ST_MAX_HEADER_BYTES);
        cJSON_free(hdr);
        return MN_E_INVALID;
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + sizeof ".tmp.XXXXXX");
    if (!tmp) {
        cJSON_free(hdr);
        set_err(err, cap, "out of memory saving '%s'", path);
        return MN_E_NOMEM;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");

    const char *step = "create a temporary file for";
    int fd = mkstemp(tmp);
    FILE *fp = NULL;
    int e_no = 0;
    if (fd < 0) {
        e_no = errno;
        goto fail_nofile;
    }
    /* mkstemp makes 0600; keep the mode of the file being replaced, else 0644. */
    struct stat sb;
    mode_t mode = stat(path, &sb) == 0 && S_ISREG(sb.st_mode) ? (sb.st_mode & 07777) : 0644;
    step = "set the mode of the temporary file for";
    if (fchmod(fd, mode) != 0) {
        e_no = errno;
        close(fd);
        goto fail;
    }
    step = "open a stream on the temporary file for";
    fp = fdopen(fd, "wb");
    if (!fp) {
        e_no = errno;
        close(fd);
        goto fail;
    }

    uint8_t lenbuf[8];
    put_le64(lenbuf, (uint64_t)padded);
    static const char spaces[8] = "        ";
    step = "write";
    errno = 0;
    if (write_all(fp, lenbuf, 8) != MN_OK || write_all(fp, hdr, hl) != MN_OK ||
        write_all(fp, spaces, padded - hl) != MN_OK)
        goto fail_stream;
    for (int i = 0; i < n; i++)
        if (e[i].bytes && write_all(fp, e[i].data, e[i].bytes) != MN_OK) goto fail_stream;
    step = "flush";
    if (fflush(fp) != 0) goto fail_stream;
    step = "fsync";
    if (fsync(fileno(fp)) != 0) goto fail_stream;
    step = "close";
    {
        int rc = fclose(fp);
        fp = NULL; /* the stream is gone even when fclose fails */
        if (rc != 0) {
            e_no = errno;
            goto fail;
        }
    }
    step = "rename the temporary file over";
    if (rename(tmp, path) != 0) {
        e_no = errno;
        goto fail;
    }
    cJSON_free(hdr);
    tmp[plen] = 0; /* tmp becomes a copy of path */
    int rc = fsync_parent(tmp);
    free(tmp);
    if (rc) {
        set_err(err, cap, "'%s' was replaced but syncing its folder failed: %s", path, strerror(rc));
        return MN_E_IO;
    }
    return MN_OK;

fail_stream:
    e_no = errno ? errno : EIO;
fail:
    if (fp) fclose(fp);
    unlink(tmp);
fail_nofile:
    set_err(err, cap, "cannot %s '%s': %s", step, path, strerror(e_no ? e_no : EIO));
    cJSON_free(hdr);
    free(tmp);
    return MN_E_IO;
}

/* ---- listing ----------------------------------------------------------------- */

static size_t esc_len(const char *s) {
    size_t n = 0, adv;
    char piece[8];
    for (const unsigned char *p = (const unsigned char *)s; *p; p += adv) n += esc_piece(p, piece, &adv, true);
    return n;
}

static void put_esc(FILE *out, const char *s) {
    size_t adv;
    char piece[8];
    for (const unsigned char *p = (const unsigned char *)s; *p; p += adv) {
        size_t k = esc_piece(p, piece, &adv, true);
        fwrite(piece, 1, k, out);
    }
}

void st_print_summary(const st_file *f, FILE *out) {
    if (!out) return;
    int n = f ? f->n : 0, nmeta = f ? f->nmeta : 0;
    for (int i = 0; i < nmeta; i++) {
        put_esc(out, f->meta_keys[i]);
        fputs(" = ", out);
        put_esc(out, f->meta_vals[i]);
        fputc('\n', out);
    }
    size_t wname = 4, wdtype = 5, wshape = 5;
    char shp[ST_MAX_RANK * 21 + 3];
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &f->tensors[i];
        size_t l = esc_len(t->name);
        if (l > wname) wname = l;
        if (strlen(t->dtype) > wdtype) wdtype = strlen(t->dtype);
        format_shape(shp, sizeof shp, t->shape, t->rank);
        if (strlen(shp) > wshape) wshape = strlen(shp);
    }
    uint64_t total = 0;
    if (n) fprintf(out, "%-*s  %-*s  %-*s  %s\n", (int)wname, "name", (int)wdtype, "dtype", (int)wshape, "shape", "bytes");
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &f->tensors[i];
        uint64_t bytes = t->end - t->begin;
        total += bytes; /* ranges do not overlap and lie in the buffer: no overflow */
        put_esc(out, t->name);
        format_shape(shp, sizeof shp, t->shape, t->rank);
        fprintf(out, "%*s  %-*s  %-*s  %" PRIu64 "\n", (int)(wname - esc_len(t->name)), "", (int)wdtype, t->dtype,
                (int)wshape, shp, bytes);
    }
    fprintf(out, "%d tensor%s, %" PRIu64 " bytes\n", n, n == 1 ? "" : "s", total);
}
