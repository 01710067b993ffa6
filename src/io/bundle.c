/* bundle.c - the inference-bundle container (layout and rules in bundle.h).
 *
 * Does not: interpret sections, cache anything between calls.
 */
#include "io/bundle.h"

#include <unistd.h>

#include "core/wire.h"
#include "io/file.h"
#include "io/text.h"

static mn_status bfail(const bundle_file *b, char *err, size_t cap, mn_status st, const char *fmt, ...) MN_PRINTF(5, 6);
static mn_status bfail(const bundle_file *b, char *err, size_t cap, mn_status st, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mn_fmt(err, cap, "bundle '%s': %s", b->shown, msg);
    return st;
}

static uint64_t align_up(uint64_t v) { return (v + BUNDLE_ALIGN - 1) / BUNDLE_ALIGN * BUNDLE_ALIGN; }

/* A tag: 1..8 bytes of [a-z0-9_], then NUL padding to 8. */
static bool tag_ok(const uint8_t t[8], char out[9]) {
    int len = 0;
    while (len < 8 && t[len]) len++;
    if (len == 0) return false;
    for (int i = 0; i < 8; i++) {
        const uint8_t c = t[i];
        if (i < len ? !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') : c != 0) return false;
    }
    memcpy(out, t, 8);
    out[len] = 0;
    return true;
}

/* The header and the table: everything checked before any section is read. */
static mn_status read_table(bundle_file *b, char *err, size_t cap) {
    uint8_t h[BUNDLE_HEADER];
    const uint64_t size = b->src.size;
    if (size < BUNDLE_HEADER)
        return bfail(b, err, cap, MN_E_FORMAT, "%llu bytes, shorter than the %d-byte header (not a bundle)",
                     (unsigned long long)size, BUNDLE_HEADER);
    mn_status st = b->src.read(b->src.ctx, 0, h, sizeof h, err, cap);
    if (st) return st;
    if (memcmp(h, BUNDLE_MAGIC, 8) != 0)
        return bfail(b, err, cap, MN_E_FORMAT, "no \"%s\" magic: not an inference bundle (`meganeura export` writes "
                     "them)", BUNDLE_MAGIC);
    const uint32_t version = le32_get(h + 8), n = le32_get(h + 12);
    const uint64_t fsize = le64_get(h + 16);
    if (version != BUNDLE_VERSION)
        return bfail(b, err, cap, MN_E_FORMAT, "format version %u; this library reads version %u (export it again "
                     "with this meganeura, %s)", version, BUNDLE_VERSION, MN_VERSION_STRING);
    if (n < 1 || n > BUNDLE_MAX_SECTIONS)
        return bfail(b, err, cap, MN_E_FORMAT, "%u sections (1..%d)", n, BUNDLE_MAX_SECTIONS);
    if (fsize != size)
        return bfail(b, err, cap, MN_E_FORMAT, "the header says %llu bytes, the file has %llu (cut short or "
                     "appended to)", (unsigned long long)fsize, (unsigned long long)size);
    if (le64_get(h + 56) != 0) return bfail(b, err, cap, MN_E_FORMAT, "reserved header bytes are not 0");
    const uint64_t tbytes = (uint64_t)n * BUNDLE_ENTRY;
    if (size < BUNDLE_HEADER + tbytes)
        return bfail(b, err, cap, MN_E_FORMAT, "ends inside the section table");
    uint8_t t[BUNDLE_MAX_SECTIONS * BUNDLE_ENTRY];
    if ((st = b->src.read(b->src.ctx, BUNDLE_HEADER, t, (size_t)tbytes, err, cap))) return st;
    unsigned char d[MN_SHA256_BYTES];
    mn_sha256_digest(d, t, (size_t)tbytes);
    if (memcmp(d, h + 24, MN_SHA256_BYTES) != 0)
        return bfail(b, err, cap, MN_E_FORMAT, "the section table's SHA-256 does not match (the file is damaged)");
    uint64_t at = BUNDLE_HEADER + tbytes;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *e = t + (size_t)i * BUNDLE_ENTRY;
        bundle_section *s = &b->sec[i];
        if (!tag_ok(e, s->tag))
            return bfail(b, err, cap, MN_E_FORMAT, "section %u: the tag is not 1..8 of [a-z0-9_]", i);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(b->sec[j].tag, s->tag) == 0)
                return bfail(b, err, cap, MN_E_FORMAT, "section '%s' appears twice", s->tag);
        s->offset = le64_get(e + 8);
        s->size = le64_get(e + 16);
        memcpy(s->sha, e + 24, MN_SHA256_BYTES);
        if (le64_get(e + 56) != 0)
            return bfail(b, err, cap, MN_E_FORMAT, "section '%s': reserved bytes are not 0", s->tag);
        if (s->offset != at || s->size > size - at)
            return bfail(b, err, cap, MN_E_FORMAT, "section '%s' at %llu, %llu bytes: expected at %llu, within the "
                         "%llu-byte file", s->tag, (unsigned long long)s->offset, (unsigned long long)s->size,
                         (unsigned long long)at, (unsigned long long)size);
        at = i + 1 < n ? align_up(s->offset + s->size) : s->offset + s->size;
        if (at > size) return bfail(b, err, cap, MN_E_FORMAT, "ends inside the padding after section '%s'", s->tag);
    }
    if (at != size)
        return bfail(b, err, cap, MN_E_FORMAT, "%llu bytes after the last section", (unsigned long long)(size - at));
    b->n = (int)n;
    return MN_OK;
}

static mn_status fd_read(void *ctx, uint64_t off, void *dst, size_t n, char *err, size_t cap) {
    const bundle_file *b = ctx;
    char e[300];
    mn_status st = io_read_at(b->fd, off, dst, n, "bundle", e, sizeof e);
    if (st) mn_fmt(err, cap, "bundle '%s': %s", b->shown, e);
    return st;
}


static mn_status mem_read(void *ctx, uint64_t off, void *dst, size_t n, char *err, size_t cap) {
    (void)err, (void)cap;
    memcpy(dst, (const uint8_t *)ctx + off, n);
    return MN_OK;
}

mn_status bundle_open(bundle_file *b, const char *path, char *err, size_t cap) {
    memset(b, 0, sizeof *b);
    b->fd = -1;
    io_esc(b->shown, sizeof b->shown, path ? path : "(null)");
    uint64_t size;
    mn_status st = io_open_read(path, &b->fd, &size, err, cap);
    if (st) return st;
    b->src = (bundle_source){fd_read, b, size};
    if ((st = read_table(b, err, cap))) bundle_close(b);
    return st;
}

mn_status bundle_open_mem(bundle_file *b, const uint8_t *buf, size_t len, char *err, size_t cap) {
    memset(b, 0, sizeof *b);
    b->fd = -1;
    snprintf(b->shown, sizeof b->shown, "(memory)");
    b->src = (bundle_source){mem_read, (void *)buf, len};
    mn_status st = read_table(b, err, cap);
    if (st) bundle_close(b);
    return st;
}

void bundle_close(bundle_file *b) {
    if (!b) return;
    if (b->fd >= 0) close(b->fd);
    b->fd = -1;
    b->n = 0;
}

const bundle_section *bundle_find(const bundle_file *b, const char *tag) {
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->sec[i].tag, tag) == 0) return &b->sec[i];
    return NULL;
}

mn_status bundle_read(bundle_file *b, const char *tag, uint64_t max, uint8_t **data, size_t *n, char *err, size_t cap) {
    *data = NULL;
    *n = 0;
    const bundle_section *s = bundle_find(b, tag);
    if (!s) return bfail(b, err, cap, MN_E_NOT_FOUND, "no '%s' section", tag);
    if (s->size > max || s->size > (uint64_t)SIZE_MAX - 1)
        return bfail(b, err, cap, MN_E_FORMAT, "section '%s' is %llu bytes, above its limit of %llu", tag,
                     (unsigned long long)s->size, (unsigned long long)max);
    uint8_t *p = malloc((size_t)s->size + 1);
    if (!p) return bfail(b, err, cap, MN_E_NOMEM, "out of memory for the %llu-byte section '%s'",
                         (unsigned long long)s->size, tag);
    mn_status st = s->size ? b->src.read(b->src.ctx, s->offset, p, (size_t)s->size, err, cap) : MN_OK;
    /* the padding after it: zeros (the next section's offset was checked) */
    const uint64_t end = s->offset + s->size, pad_end = s == &b->sec[b->n - 1] ? end : align_up(end);
    uint8_t pad[BUNDLE_ALIGN];
    if (!st && pad_end > end && !(st = b->src.read(b->src.ctx, end, pad, (size_t)(pad_end - end), err, cap)))
        for (uint64_t i = 0; i < pad_end - end && !st; i++)
            if (pad[i]) st = bfail(b, err, cap, MN_E_FORMAT, "non-zero padding after section '%s'", tag);
    unsigned char d[MN_SHA256_BYTES];
    if (!st) {
        mn_sha256_digest(d, p, (size_t)s->size);
        if (memcmp(d, s->sha, MN_SHA256_BYTES) != 0)
            st = bfail(b, err, cap, MN_E_FORMAT, "section '%s': its SHA-256 does not match (the file is damaged)", tag);
    }
    if (st) {
        free(p);
        return st;
    }
    p[s->size] = 0;
    *data = p;
    *n = (size_t)s->size;
    return MN_OK;
}

/* ---- writing -------------------------------------------------------------- */

typedef struct pass_sink {
    mn_sha256_ctx sha;
    uint64_t n;
    io_atomic *w; /* NULL: sizes and checksums only */
} pass_sink;

static mn_status sink_put(void *sp, const void *p, uint64_t n, char *err, size_t cap) {
    pass_sink *s = sp;
    s->n += n;
    const uint8_t *b = p;
    for (uint64_t done = 0; done < n;) { /* mn_sha256_update takes a size_t */
        size_t chunk = n - done > ((uint64_t)1 << 30) ? (size_t)1 << 30 : (size_t)(n - done);
        mn_sha256_update(&s->sha, b + done, chunk);
        done += chunk;
    }
    return s->w ? io_atomic_write(s->w, p, n, err, cap) : MN_OK;
}

static mn_status emit_part(const bundle_part *pt, pass_sink *s, char *err, size_t cap) {
    mn_sha256_init(&s->sha);
    s->n = 0;
    if (pt->emit) return pt->emit(pt->ctx, sink_put, s, err, cap);
    return pt->size ? sink_put(s, pt->data, pt->size, err, cap) : MN_OK;
}

mn_status bundle_write(const char *path, const bundle_part *parts, int n, char *err, size_t cap) {
    char shown[IO_ESC_PATH];
    io_esc(shown, sizeof shown, path ? path : "(null)");
    if (!path || n < 1 || n > BUNDLE_MAX_SECTIONS) {
        mn_fmt(err, cap, "bundle '%s': %d sections (1..%d)", shown, n, BUNDLE_MAX_SECTIONS);
        return MN_E_INVALID;
    }
    uint8_t h[BUNDLE_HEADER] = {0}, t[BUNDLE_MAX_SECTIONS * BUNDLE_ENTRY] = {0};
    unsigned char sha[BUNDLE_MAX_SECTIONS][MN_SHA256_BYTES];
    uint64_t at = BUNDLE_HEADER + (uint64_t)n * BUNDLE_ENTRY;
    /* 1. sizes and checksums */
    for (int i = 0; i < n; i++) {
        const size_t tl = strlen(parts[i].tag);
        uint8_t *e = t + (size_t)i * BUNDLE_ENTRY;
        char tag[9];
        memcpy(e, parts[i].tag, tl <= 8 ? tl : 8);
        MN_ASSERT(tl <= 8 && tag_ok(e, tag));
        pass_sink s = {.w = NULL};
        mn_status st = emit_part(&parts[i], &s, err, cap);
        if (st) return st;
        mn_sha256_final(&s.sha, sha[i]);
        if (i) at = align_up(at);
        le64_put(e + 8, at);
        le64_put(e + 16, s.n);
        memcpy(e + 24, sha[i], MN_SHA256_BYTES);
        at += s.n;
    }
    memcpy(h, BUNDLE_MAGIC, 8);
    le32_put(h + 8, BUNDLE_VERSION);
    le32_put(h + 12, (uint32_t)n);
    le64_put(h + 16, at);
    mn_sha256_digest(h + 24, t, (size_t)n * BUNDLE_ENTRY);
    /* 2. the file */
    io_atomic w;
    mn_status st = io_atomic_open(&w, path, err, cap);
    if (st) return st;
    st = io_atomic_write(&w, h, sizeof h, err, cap);
    if (!st) st = io_atomic_write(&w, t, (uint64_t)n * BUNDLE_ENTRY, err, cap);
    static const uint8_t zeros[BUNDLE_ALIGN];
    for (int i = 0; i < n && !st; i++) {
        const uint64_t off = le64_get(t + (size_t)i * BUNDLE_ENTRY + 8), prev_end =
            i ? le64_get(t + (size_t)(i - 1) * BUNDLE_ENTRY + 8) + le64_get(t + (size_t)(i - 1) * BUNDLE_ENTRY + 16)
              : off;
        if (off > prev_end) st = io_atomic_write(&w, zeros, off - prev_end, err, cap);
        pass_sink s = {.w = &w};
        if (!st) st = emit_part(&parts[i], &s, err, cap);
        unsigned char d[MN_SHA256_BYTES];
        if (!st) {
            mn_sha256_final(&s.sha, d);
            if (memcmp(d, sha[i], sizeof d) != 0 || s.n != le64_get(t + (size_t)i * BUNDLE_ENTRY + 16)) {
                mn_fmt(err, cap, "bundle '%s': section '%s' changed between its two passes", shown, parts[i].tag);
                st = MN_E_INVALID;
            }
        }
    }
    if (st) {
        io_atomic_abort(&w);
        return st;
    }
    return io_atomic_commit(&w, err, cap);
}
