/* safetensors_api.c - the public read-only safetensors handle
 * (mn_safetensors_*), mn_read_file and mn_escape: what code above the public
 * API (src/models, user programs) needs to read checkpoints written by
 * others.
 *
 * Does: open a file with io_open_read, read and check its header with
 * st_read (no tensor bytes), keep the descriptor, and read one tensor at a
 * time with bounded preads in chunks of CHUNK bytes, converting BF16, F16
 * and F64 to f32 (I64 to i32 with a range check) and refusing NaN or
 * infinite values, named. Byte order: the file's little-endian values are
 * assembled byte by byte, so the host's order does not matter.
 *
 * Does not: write files (st_save_atomic does), map files into memory, or
 * keep tensor bytes after a read.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <unistd.h>

#include "io/file.h"
#include "io/safetensors.h"
#include "io/text.h"

#define CHUNK ((size_t)1 << 20)

struct mn_safetensors {
    st_file st;      /* header: names, dtypes, shapes, ranges (data NULL) */
    int fd;
    uint64_t base;   /* file offset of the data section: 8 + header length */
    char *path;
    char err[1024];
};

static mn_status fail(mn_safetensors *f, mn_status st, const char *fmt, ...) MN_PRINTF(3, 4);
static mn_status fail(mn_safetensors *f, mn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
    return st;
}

typedef struct hdr_source {
    int fd;
    const char *path;
    uint64_t hlen; /* the length field, captured when st_read reads it */
} hdr_source;

static mn_status hdr_read(void *ctx, uint64_t off, void *dst, size_t n, char *err, size_t cap) {
    hdr_source *src = ctx;
    mn_status st = io_read_at(src->fd, off, dst, n, src->path, err, cap);
    if (st == MN_OK && off == 0 && n == 8) {
        const uint8_t *p = dst;
        uint64_t v = 0;
        for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
        src->hlen = v;
    }
    return st;
}

mn_status mn_safetensors_open(mn_safetensors **out, const char *path, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!out || !path) {
        mn_fmt(err, errcap, "safetensors_open: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    *out = NULL;
    mn_safetensors *f = calloc(1, sizeof *f);
    char *p = mn_strdup(path);
    if (!f || !p) {
        free(f);
        free(p);
        mn_fmt(err, errcap, "safetensors_open: out of memory");
        return MN_E_NOMEM;
    }
    f->path = p;
    uint64_t size;
    mn_status st = io_open_read(path, &f->fd, &size, err, errcap);
    if (st) {
        free(p);
        free(f);
        return st;
    }
    hdr_source src = {f->fd, path, 0};
    st_reader r = {hdr_read, &src, size, path};
    if ((st = st_read(&f->st, &r, false, err, errcap))) {
        close(f->fd);
        free(p);
        free(f);
        return st;
    }
    f->base = 8 + src.hlen; /* st_read checked 8 + hlen + every tensor end <= size */
    *out = f;
    return MN_OK;
}

void mn_safetensors_close(mn_safetensors *f) {
    if (!f) return;
    st_free(&f->st);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

const char *mn_safetensors_error(const mn_safetensors *f) { return f ? f->err : "safetensors: NULL handle"; }

int mn_safetensors_count(const mn_safetensors *f) { return f ? f->st.n : 0; }

static void fill(mn_safetensors_tensor *out, const st_tensor *t) {
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = t->dtype;
    out->rank = t->rank;
    for (int d = 0; d < t->rank && d < MN_SAFETENSORS_MAX_RANK; d++) out->shape[d] = t->shape[d];
}

mn_status mn_safetensors_tensor_at(const mn_safetensors *f, int i, mn_safetensors_tensor *out) {
    if (!f || !out || i < 0 || i >= f->st.n) return MN_E_INVALID;
    fill(out, &f->st.tensors[i]);
    return MN_OK;
}

mn_status mn_safetensors_find(const mn_safetensors *f, const char *name, mn_safetensors_tensor *out) {
    if (!f || !name) return MN_E_INVALID;
    const st_tensor *t = st_find(&f->st, name);
    if (!t) return MN_E_NOT_FOUND;
    if (out) fill(out, t);
    return MN_OK;
}

const char *mn_safetensors_meta(const mn_safetensors *f, const char *key) { return f ? st_meta(&f->st, key) : NULL; }

/* ---- conversions ----------------------------------------------------------- */

static float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    uint32_t bits;
    if (e == 0x1f) bits = sign | 0x7f800000u | (m << 13); /* inf, NaN */
    else if (e) bits = sign | ((e + 112) << 23) | (m << 13);
    else { /* zero or subnormal: m * 2^-24, exact in f32 */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Checks name, count and dtype; *t gets the tensor. */
static mn_status lookup(mn_safetensors *f, const char *name, size_t count, const char *what, const st_tensor **t) {
    char nb[IO_ESC_NAME], pb[IO_ESC_PATH];
    if (!f) return MN_E_INVALID;
    f->err[0] = 0;
    if (!name) return fail(f, MN_E_INVALID, "%s: name is NULL", what);
    *t = st_find(&f->st, name);
    if (!*t)
        return fail(f, MN_E_NOT_FOUND, "'%s': no tensor named '%s'", io_esc(pb, sizeof pb, f->path),
                    io_esc(nb, sizeof nb, name));
    uint64_t numel = ((*t)->end - (*t)->begin) / ((*t)->elem_size ? (*t)->elem_size : 1);
    if (numel != count)
        return fail(f, MN_E_SHAPE, "'%s': tensor '%s' has %" PRIu64 " elements, %zu asked for",
                    io_esc(pb, sizeof pb, f->path), io_esc(nb, sizeof nb, name), numel, count);
    return MN_OK;
}

/* Reads tensor t in chunks; conv(dst_index, bytes, n) converts n elements. */
typedef mn_status (*convert_fn)(mn_safetensors *f, const st_tensor *t, void *dst, size_t at, const uint8_t *src,
                                size_t n, uint64_t *bad);

static mn_status read_chunks(mn_safetensors *f, const st_tensor *t, void *dst, convert_fn conv, uint64_t *bad) {
    const size_t es = t->elem_size;
    const uint64_t total = t->end - t->begin;
    uint8_t *buf = malloc(total < CHUNK ? (size_t)total + 1 : CHUNK);
    if (!buf) return fail(f, MN_E_NOMEM, "read: out of memory");
    mn_status st = MN_OK;
    for (uint64_t done = 0; done < total && !st;) {
        size_t n = total - done < CHUNK ? (size_t)(total - done) : CHUNK - CHUNK % es;
        if ((st = io_read_at(f->fd, f->base + t->begin + done, buf, n, f->path, f->err, sizeof f->err))) break;
        st = conv(f, t, dst, (size_t)(done / es), buf, n / es, bad);
        done += n;
    }
    free(buf);
    return st;
}

static mn_status conv_f32(mn_safetensors *f, const st_tensor *t, void *dst, size_t at, const uint8_t *src, size_t n,
                          uint64_t *bad) {
    float *y = (float *)dst + at;
    const int kind = t->elem_size == 8 ? 8 : t->elem_size == 4 ? 4 : strcmp(t->dtype, "BF16") == 0 ? 2 : 1;
    for (size_t i = 0; i < n; i++) {
        float v;
        if (kind == 4) { /* F32 */
            uint32_t b = (uint32_t)le(src + 4 * i, 4);
            memcpy(&v, &b, 4);
        } else if (kind == 2) { /* BF16: the top half of an f32 */
            uint32_t b = (uint32_t)le(src + 2 * i, 2) << 16;
            memcpy(&v, &b, 4);
        } else if (kind == 1) { /* F16 */
            v = f16_to_f32((uint16_t)le(src + 2 * i, 2));
        } else { /* F64, rounded; beyond the f32 range it becomes infinite and is refused */
            uint64_t b = le(src + 8 * i, 8);
            double d;
            memcpy(&d, &b, 8);
            v = isnan(d) ? NAN : d > FLT_MAX ? INFINITY : d < -FLT_MAX ? -INFINITY : (float)d;
        }
        if (!isfinite(v)) bad[isnan(v) ? 0 : 1]++;
        y[i] = v;
    }
    return MN_OK;
}

mn_status mn_safetensors_read_f32(mn_safetensors *f, const char *name, float *dst, size_t count) {
    const st_tensor *t;
    mn_status st = lookup(f, name, count, "read_f32", &t);
    if (st) return st;
    char nb[IO_ESC_NAME], pb[IO_ESC_PATH];
    if (strcmp(t->dtype, "F32") && strcmp(t->dtype, "BF16") && strcmp(t->dtype, "F16") && strcmp(t->dtype, "F64"))
        return fail(f, MN_E_DTYPE, "'%s': tensor '%s' is %s; only F32, BF16, F16 and F64 convert to f32",
                    io_esc(pb, sizeof pb, f->path), io_esc(nb, sizeof nb, name), t->dtype);
    if (!dst && count) return fail(f, MN_E_INVALID, "read_f32: dst is NULL");
    uint64_t bad[2] = {0, 0};
    if ((st = read_chunks(f, t, dst, conv_f32, bad))) return st;
    if (bad[0] || bad[1])
        return fail(f, MN_E_FORMAT, "'%s': tensor '%s' (%s) holds %" PRIu64 " NaN and %" PRIu64 " infinite values%s",
                    io_esc(pb, sizeof pb, f->path), io_esc(nb, sizeof nb, name), t->dtype, bad[0], bad[1],
                    strcmp(t->dtype, "F64") == 0 ? " (or values beyond the f32 range)" : "");
    return MN_OK;
}

static mn_status conv_i32(mn_safetensors *f, const st_tensor *t, void *dst, size_t at, const uint8_t *src, size_t n,
                          uint64_t *bad) {
    int32_t *y = (int32_t *)dst + at;
    const bool wide = strcmp(t->dtype, "I64") == 0;
    for (size_t i = 0; i < n; i++) {
        int64_t v = wide ? (int64_t)le(src + 8 * i, 8) : (int64_t)(int32_t)(uint32_t)le(src + 4 * i, 4);
        if (v < INT32_MIN || v > INT32_MAX) {
            bad[0]++;
            v = 0;
        }
        y[i] = (int32_t)v;
    }
    return MN_OK;
}

mn_status mn_safetensors_read_i32(mn_safetensors *f, const char *name, int32_t *dst, size_t count) {
    const st_tensor *t;
    mn_status st = lookup(f, name, count, "read_i32", &t);
    if (st) return st;
    char nb[IO_ESC_NAME], pb[IO_ESC_PATH];
    if (strcmp(t->dtype, "I32") && strcmp(t->dtype, "I64"))
        return fail(f, MN_E_DTYPE, "'%s': tensor '%s' is %s; only I32 and I64 read as i32",
                    io_esc(pb, sizeof pb, f->path), io_esc(nb, sizeof nb, name), t->dtype);
    if (!dst && count) return fail(f, MN_E_INVALID, "read_i32: dst is NULL");
    uint64_t bad[2] = {0, 0};
    if ((st = read_chunks(f, t, dst, conv_i32, bad))) return st;
    if (bad[0])
        return fail(f, MN_E_FORMAT, "'%s': tensor '%s' holds %" PRIu64 " values outside the i32 range",
                    io_esc(pb, sizeof pb, f->path), io_esc(nb, sizeof nb, name), bad[0]);
    return MN_OK;
}

/* ---- whole files, escaping ------------------------------------------------- */

mn_status mn_read_file(char **out, size_t *len, const char *path, size_t max_bytes, char *err, size_t errcap) {
    if (err && errcap) err[0] = 0;
    if (!out || !path) {
        mn_fmt(err, errcap, "read_file: %s is NULL", out ? "path" : "out");
        return MN_E_INVALID;
    }
    *out = NULL;
    if (len) *len = 0;
    int fd;
    uint64_t size;
    mn_status st = io_open_read(path, &fd, &size, err, errcap);
    if (st) return st;
    char pb[IO_ESC_PATH];
    if (size > max_bytes || size >= SIZE_MAX) {
        close(fd);
        mn_fmt(err, errcap, "'%s' is %" PRIu64 " bytes, more than the %zu allowed", io_esc(pb, sizeof pb, path), size,
               max_bytes);
        return MN_E_FORMAT;
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        mn_fmt(err, errcap, "'%s': out of memory for %" PRIu64 " bytes", io_esc(pb, sizeof pb, path), size);
        return MN_E_NOMEM;
    }
    st = io_read_at(fd, 0, buf, (size_t)size, path, err, errcap);
    close(fd);
    if (st) {
        free(buf);
        return st;
    }
    buf[size] = 0;
    *out = buf;
    if (len) *len = (size_t)size;
    return MN_OK;
}

const char *mn_escape(char *dst, size_t cap, const char *s) { return io_esc(dst, cap, s); }
