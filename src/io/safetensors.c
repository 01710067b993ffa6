/* safetensors.c - parse, load, save and list safetensors files.
 *
 * Does: treat every file as hostile. The JSON header is parsed by cJSON; each
 * name, dtype, shape, offset and size is then checked (UTF-8, known dtype,
 * integral in-range numbers, byte counts that match, no overlapping ranges, no
 * duplicate names) before an st_file is handed out. Loading reads and checks
 * the header before any tensor byte, then reads only the claimed bytes.
 * Writes are atomic (io/file.h): a temporary file in the same folder, fsync,
 * rename, fsync of the folder; only a regular file is ever replaced.
 *
 * Does not: convert dtypes, map files into memory, look at the tensor bytes
 * themselves (NaNs are the caller's business), or require the tensors to cover
 * the data section without gaps (bytes no tensor claims are ignored and not
 * read).
 *
 * Ownership: an st_file owns its names, its metadata strings and, when it came
 * from st_load, the tensor bytes (owned); st_free releases all of them.
 * st_parse never copies the data section: f->data points into the caller's
 * buffer.
 */
#include "io/safetensors.h"

#include "io/file.h"
#include "io/text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
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

bool st_utf8_valid(const char *s, size_t n) { return io_utf8_valid(s, n); }

static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#define ESC_CAP IO_ESC_NAME /* room for a shown name in a message */

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
    io_esc(nm, sizeof nm, t->name);
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
                nm, io_esc(tmp, sizeof tmp, dt));
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
            set_err(err, cap, "metadata key '%s' is not valid UTF-8", io_esc(tmp, sizeof tmp, k));
            return MN_E_FORMAT;
        }
        const char *v = cJSON_GetStringValue(c);
        if (!v) {
            set_err(err, cap, "metadata '%s': value is not a string", io_esc(tmp, sizeof tmp, k));
            return MN_E_FORMAT;
        }
        if (!st_utf8_valid(v, strlen(v))) {
            set_err(err, cap, "metadata '%s': value is not valid UTF-8", io_esc(tmp, sizeof tmp, k));
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
        set_err(err, cap, "metadata key '%s' appears twice", io_esc(tmp, sizeof tmp, dup));
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
            set_err(err, cap, "tensor '%s': name is not valid UTF-8", io_esc(tmp, sizeof tmp, name));
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
            set_err(err, cap, "tensor '%s': name appears twice", io_esc(tmp, sizeof tmp, dup));
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
                        io_esc(tmp, sizeof tmp, b->name), b->begin, b->end, io_esc(tmp2, sizeof tmp2, a->name),
                        a->begin, a->end);
                return MN_E_FORMAT;
            }
            if (b->end >= a->end) far = i;
        }
    }
    return MN_OK;
}

/* Checks the 8-byte length field of a file of size bytes; *hlen gets it. */
static mn_status check_length_field(const uint8_t lenbuf[8], uint64_t size, uint64_t *hlen, char *err, size_t cap) {
    *hlen = get_le64(lenbuf);
    if (*hlen > ST_MAX_HEADER_BYTES) {
        set_err(err, cap, "header length %" PRIu64 " exceeds the %u-byte limit", *hlen, ST_MAX_HEADER_BYTES);
        return MN_E_FORMAT;
    }
    if (*hlen > size - 8) {
        set_err(err, cap, "header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes follow the length field)",
                *hlen, size - 8);
        return MN_E_FORMAT;
    }
    return MN_OK;
}

/* Parses and checks the header text hdr[0..hlen) against a data section of
 * data_len bytes. out->data stays NULL; on failure out is freed. */
static mn_status parse_header(st_file *out, const char *hdr, uint64_t hlen, uint64_t data_len, char *err, size_t cap) {
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
        out->data_len = data_len;
        s = parse_root(out, root, err, cap);
        if (s == MN_E_NOMEM && err && cap && !err[0]) set_err(err, cap, "out of memory reading the header");
    }
    cJSON_Delete(root);
    free(copy);
    if (s != MN_OK) st_free(out);
    return s;
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
    uint64_t hlen;
    mn_status s = check_length_field(buf, len, &hlen, err, cap);
    if (s == MN_OK) s = parse_header(out, (const char *)buf + 8, hlen, (uint64_t)(len - 8 - (size_t)hlen), err, cap);
    if (s == MN_OK) out->data = buf + 8 + hlen;
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

mn_status st_read(st_file *out, const st_reader *r, bool with_data, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out || !r || !r->read) {
        set_err(err, cap, "st_read: NULL argument");
        return MN_E_INVALID;
    }
    memset(out, 0, sizeof *out);
    char shown[IO_ESC_PATH], msg[1024];
    const char *nm = io_esc(shown, sizeof shown, r->name ? r->name : "(unnamed)");
    if (r->size < 8) {
        set_err(err, cap, "'%s': file is %" PRIu64 " bytes, shorter than the 8-byte header length field", nm, r->size);
        return MN_E_FORMAT;
    }
    uint8_t lenbuf[8];
    mn_status s = r->read(r->ctx, 0, lenbuf, 8, err, cap);
    if (s != MN_OK) return s;
    uint64_t hlen;
    if ((s = check_length_field(lenbuf, r->size, &hlen, msg, sizeof msg)) != MN_OK) {
        set_err(err, cap, "'%s': %s", nm, msg);
        return s;
    }
    /* Only the header is read before it is checked. */
    char *hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        set_err(err, cap, "'%s': out of memory for a %" PRIu64 "-byte header", nm, hlen);
        return MN_E_NOMEM;
    }
    if (hlen && (s = r->read(r->ctx, 8, hdr, (size_t)hlen, err, cap)) != MN_OK) {
        free(hdr);
        return s;
    }
    s = parse_header(out, hdr, hlen, r->size - 8 - hlen, msg, sizeof msg);
    free(hdr);
    if (s != MN_OK) {
        set_err(err, cap, "'%s': %s", nm, msg);
        return s;
    }
    if (!with_data) {
        out->data_len = 0;
        return MN_OK;
    }
    /* Then the bytes the tensors claim, and no more. */
    uint64_t need = 0;
    for (int i = 0; i < out->n; i++)
        if (out->tensors[i].end > need) need = out->tensors[i].end;
    if (need > (uint64_t)SIZE_MAX - 1) {
        set_err(err, cap, "'%s': %" PRIu64 " bytes of tensor data do not fit in memory", nm, need);
        st_free(out);
        return MN_E_NOMEM;
    }
    uint8_t *buf = malloc((size_t)need + 1);
    if (!buf) {
        set_err(err, cap, "'%s': out of memory for %" PRIu64 " bytes of tensor data", nm, need);
        st_free(out);
        return MN_E_NOMEM;
    }
    if (need && (s = r->read(r->ctx, 8 + hlen, buf, (size_t)need, err, cap)) != MN_OK) {
        free(buf);
        st_free(out);
        return s;
    }
    out->owned = buf;
    out->data = buf;
    out->data_len = need;
    return MN_OK;
}

typedef struct fd_source {
    int fd;
    const char *path;
} fd_source;

static mn_status fd_read(void *ctx, uint64_t off, void *dst, size_t n, char *err, size_t cap) {
    const fd_source *src = ctx;
    return io_read_at(src->fd, off, dst, n, src->path, err, cap);
}

static mn_status load_path(st_file *out, const char *path, bool with_data, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!out || !path) {
        set_err(err, cap, "st_load: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    memset(out, 0, sizeof *out);
    fd_source src = {-1, path};
    uint64_t size;
    mn_status s = io_open_read(path, &src.fd, &size, err, cap);
    if (s != MN_OK) return s;
    st_reader r = {fd_read, &src, size, path};
    s = st_read(out, &r, with_data, err, cap);
    close(src.fd); /* read-only: nothing to lose on close */
    return s;
}

mn_status st_load(st_file *out, const char *path, char *err, size_t cap) {
    return load_path(out, path, true, err, cap);
}

mn_status st_load_header(st_file *out, const char *path, char *err, size_t cap) {
    return load_path(out, path, false, err, cap);
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
        const char *nm = io_esc(tmp, sizeof tmp, x->name);
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
            char dt[ESC_CAP];
            set_err(err, cap, "tensor '%s': unknown dtype '%s'", nm, io_esc(dt, sizeof dt, x->dtype));
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
        set_err(err, cap, "tensor '%s': name appears twice", io_esc(tmp, sizeof tmp, dup));
        s = MN_E_INVALID;
    }
    if (s == MN_OK) {
        for (int i = 0; i < nmeta; i++) names[i] = meta_kv[2 * i];
        s = find_duplicate(&dup, names, (size_t)nmeta);
        if (s == MN_OK && dup) {
            set_err(err, cap, "metadata key '%s' appears twice", io_esc(tmp, sizeof tmp, dup));
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

mn_status st_write(st_put put, void *sink, const char *what, const st_entry *e, int n, const char *const *meta_kv,
                   int nmeta, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    char shown[IO_ESC_PATH];
    io_esc(shown, sizeof shown, what ? what : "(unnamed)");
    if (!put || n < 0 || (n > 0 && !e) || nmeta < 0 || (nmeta > 0 && !meta_kv)) {
        set_err(err, cap, "st_write '%s': bad arguments (%d entries, %d metadata pairs)", shown, n, nmeta);
        return MN_E_INVALID;
    }
    uint64_t total;
    mn_status s = validate_entries(e, n, meta_kv, nmeta, &total, err, cap);
    if (s != MN_OK) {
        if (s == MN_E_NOMEM) set_err(err, cap, "out of memory saving '%s'", shown);
        return s;
    }
    char *hdr = build_header(e, n, meta_kv, nmeta);
    if (!hdr) {
        set_err(err, cap, "out of memory building the header of '%s'", shown);
        return MN_E_NOMEM;
    }
    size_t hl = strlen(hdr);
    size_t padded = (hl + 7) & ~(size_t)7; /* 8 + padded is a multiple of 8: data starts aligned */
    if (padded > ST_MAX_HEADER_BYTES) {
        set_err(err, cap, "header of '%s' would be %zu bytes, over the %u-byte limit", shown, padded,
                ST_MAX_HEADER_BYTES);
        cJSON_free(hdr);
        return MN_E_INVALID;
    }
    uint8_t lenbuf[8];
    put_le64(lenbuf, (uint64_t)padded);
    static const char spaces[8] = "        ";
    s = put(sink, lenbuf, 8, err, cap);
    if (s == MN_OK) s = put(sink, hdr, hl, err, cap);
    if (s == MN_OK) s = put(sink, spaces, padded - hl, err, cap);
    for (int i = 0; s == MN_OK && i < n; i++)
        if (e[i].bytes) s = put(sink, e[i].data, e[i].bytes, err, cap);
    cJSON_free(hdr);
    return s;
}

static mn_status atomic_put(void *w, const void *p, uint64_t n, char *err, size_t cap) {
    return io_atomic_write(w, p, n, err, cap);
}

mn_status st_save_atomic(const char *path, const st_entry *e, int n, const char *const *meta_kv, int nmeta,
                         char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!path || !*path || n < 0 || (n > 0 && !e) || nmeta < 0 || (nmeta > 0 && !meta_kv)) {
        set_err(err, cap, "st_save_atomic: bad arguments (path %s, %d entries, %d metadata pairs)",
                path ? (*path ? "set" : "empty") : "NULL", n, nmeta);
        return MN_E_INVALID;
    }
    /* everything st_write refuses is refused before the file is touched */
    uint64_t total;
    char shown[IO_ESC_PATH];
    mn_status s = validate_entries(e, n, meta_kv, nmeta, &total, err, cap);
    if (s != MN_OK) {
        if (s == MN_E_NOMEM) set_err(err, cap, "out of memory saving '%s'", io_esc(shown, sizeof shown, path));
        return s;
    }
    io_atomic w;
    s = io_atomic_open(&w, path, err, cap);
    if (s != MN_OK) return s;
    s = st_write(atomic_put, &w, path, e, n, meta_kv, nmeta, err, cap);
    if (s != MN_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w, err, cap);
}

/* ---- listing ----------------------------------------------------------------- */

void st_print_summary(const st_file *f, FILE *out) {
    if (!out) return;
    int n = f ? f->n : 0, nmeta = f ? f->nmeta : 0;
    for (int i = 0; i < nmeta; i++) {
        io_put_esc(out, f->meta_keys[i]);
        fputs(" = ", out);
        io_put_esc(out, f->meta_vals[i]);
        fputc('\n', out);
    }
    size_t wname = 4, wdtype = 5, wshape = 5;
    char shp[ST_MAX_RANK * 21 + 3];
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &f->tensors[i];
        size_t l = io_esc_len(t->name);
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
        io_put_esc(out, t->name);
        format_shape(shp, sizeof shp, t->shape, t->rank);
        fprintf(out, "%*s  %-*s  %-*s  %" PRIu64 "\n", (int)(wname - io_esc_len(t->name)), "", (int)wdtype, t->dtype,
                (int)wshape, shp, bytes);
    }
    fprintf(out, "%d tensor%s, %" PRIu64 " bytes\n", n, n == 1 ? "" : "s", total);
}
