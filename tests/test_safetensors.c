/* test_safetensors.c - unit tests for src/io/safetensors.c.
 *
 * Covers: the strict UTF-8 check; save/load round trips (F32, I32, a rank-0
 * scalar, metadata, an empty file); every rejection st_parse promises, built
 * as hostile buffers in memory; argument checks of st_save_atomic; the atomic
 * write property (a save that fails mid-write, forced with RLIMIT_FSIZE, leaves
 * the old file byte-identical and no temporary file behind); I/O errors; and
 * every file in $MN_FUZZ_CORPUS (seeds and past fuzzer finds) as a regression
 * input that must not crash.
 *
 * Does not: test the session's use of checkpoints (that is the session's test).
 * All files live in a mkdtemp folder under /tmp, removed at the end.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "io/safetensors.h"

/* ---- helpers ---------------------------------------------------------------- */

/* A file image: 8-byte little-endian header length, the header text (hlen
 * bytes, may hold NULs), then data_len bytes of 0xAB. Caller frees. */
static uint8_t *image(size_t *len, const char *hdr, size_t hlen, size_t data_len) {
    *len = 8 + hlen + data_len;
    uint8_t *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(b + 8, hdr, hlen);
    memset(b + 8 + hlen, 0xAB, data_len);
    return b;
}

/* Parses a header that must be rejected with MN_E_FORMAT, a non-empty
 * message containing want (if not NULL), and a zeroed st_file. */
static void expect_reject(const char *hdr, size_t data_len, const char *want) {
    size_t len;
    uint8_t *b = image(&len, hdr, strlen(hdr), data_len);
    st_file f;
    char err[512] = "";
    mn_status s = st_parse(&f, b, len, err, sizeof err);
    CHECK_MSG(s == MN_E_FORMAT, "header %s: want MN_E_FORMAT, got %s (%s)", hdr, mn_status_str(s), err);
    CHECK_MSG(err[0] != 0, "header %s: empty message", hdr);
    if (want) CHECK_MSG(strstr(err, want) != NULL, "header %s: message \"%s\" lacks \"%s\"", hdr, err, want);
    CHECK_MSG(f.n == 0 && f.tensors == NULL && f.nmeta == 0 && f.data == NULL, "header %s: out not cleared", hdr);
    st_free(&f);
    free(b);
}

/* Parses a header that must be accepted; returns the tensor count. */
static int expect_accept(const char *hdr, size_t data_len) {
    size_t len;
    uint8_t *b = image(&len, hdr, strlen(hdr), data_len);
    st_file f;
    char err[512] = "";
    mn_status s = st_parse(&f, b, len, err, sizeof err);
    CHECK_MSG(s == MN_OK, "header %s: want MN_OK, got %s (%s)", hdr, mn_status_str(s), err);
    int n = f.n;
    CHECK(f.data_len == data_len);
    st_free(&f);
    free(b);
    return n;
}

/* Whole file into memory; NULL if it cannot be read. */
static uint8_t *slurp(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    size_t got;
    while ((got = fread(b + n, 1, cap - n, fp)) > 0) {
        n += got;
        if (n == cap) b = realloc(b, cap *= 2);
    }
    fclose(fp);
    *len = n;
    return b;
}

/* Entries in dir whose name contains ".tmp." (left-over temporary files). */
static int count_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    char p[4096];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static char g_dir[64];

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

/* ---- tests ---------------------------------------------------------------- */

static void test_utf8(void) {
    static const char *good[] = {"", "abc", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF",
                                 "\xEF\xBF\xBF", "\xED\x9F\xBF", "\xEE\x80\x80", "\xC2\x80", "\xE0\xA0\x80",
                                 "\xF0\x90\x80\x80"};
    static const char *bad[] = {
        "\xC0\x80",         "\xC1\xBF",         /* overlong 2-byte */
        "\xE0\x80\xAF",     "\xE0\x9F\xBF",     /* overlong 3-byte */
        "\xF0\x8F\xBF\xBF",                     /* overlong 4-byte */
        "\xED\xA0\x80",     "\xED\xBF\xBF",     /* surrogates */
        "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", /* above U+10FFFF */
        "\xFF",             "\xFE",             "\x80", "\xBF", /* not a lead byte */
        "\xE2\x82",         "\xC3",             "\xF0\x9F\x98", /* truncated */
        "\xC3\x41",         "\xE2\x28\xA1",     "a\xF8\x88\x80\x80\x80"};
    for (size_t i = 0; i < MN_ARRAY_LEN(good); i++)
        CHECK_MSG(st_utf8_valid(good[i], strlen(good[i])), "good UTF-8 #%zu rejected", i);
    for (size_t i = 0; i < MN_ARRAY_LEN(bad); i++)
        CHECK_MSG(!st_utf8_valid(bad[i], strlen(bad[i])), "bad UTF-8 #%zu accepted", i);
    CHECK(st_dtype_size("F32") == 4 && st_dtype_size("BF16") == 2 && st_dtype_size("F8_E5M2") == 1);
    CHECK(st_dtype_size("I64") == 8 && st_dtype_size("BOOL") == 1 && st_dtype_size("f32") == 0);
    CHECK(st_dtype_size(NULL) == 0 && st_dtype_size("") == 0);
}

static void test_rejections(void) {
    st_file f;
    char err[512];
    size_t len;
    uint8_t *b;

    /* too short for the length field */
    static const uint8_t seven[7] = {2, 0, 0, 0, 0, 0, 0};
    CHECK(st_parse(&f, seven, 7, err, sizeof err) == MN_E_FORMAT && strstr(err, "shorter"));
    CHECK(st_parse(&f, NULL, 0, err, sizeof err) == MN_E_FORMAT && err[0]);

    /* header length past the end, over 100 MiB, or absurd */
    b = image(&len, "{}", 2, 0);
    b[0] = 3;
    CHECK(st_parse(&f, b, len, err, sizeof err) == MN_E_FORMAT && strstr(err, "past the end"));
    uint64_t lens[] = {ST_MAX_HEADER_BYTES + 1ull, UINT64_MAX, 1ull << 63};
    for (size_t i = 0; i < MN_ARRAY_LEN(lens); i++) {
        for (int k = 0; k < 8; k++) b[k] = (uint8_t)(lens[i] >> (8 * k));
        CHECK(st_parse(&f, b, len, err, sizeof err) == MN_E_FORMAT && strstr(err, "limit"));
    }
    free(b);

    /* header not JSON, not an object, trailing junk, NUL bytes */
    expect_reject("", 0, "not valid JSON");
    expect_reject("{", 0, "not valid JSON");
    expect_reject("{\"a\":", 0, "not valid JSON");
    expect_reject("{\"a\" 1}", 0, "not valid JSON");
    expect_reject("[]", 0, "not a JSON object");
    expect_reject("3", 0, "not a JSON object");
    expect_reject("\"x\"", 0, "not a JSON object");
    expect_reject("null", 0, "not a JSON object");
    expect_reject("{} x", 0, "trailing");
    expect_reject("{}{}", 0, "trailing");
    b = image(&len, "{}\0 ", 4, 0);
    CHECK(st_parse(&f, b, len, err, sizeof err) == MN_E_FORMAT && strstr(err, "NUL"));
    free(b);
    b = image(&len, "{\"a\0b\":{}}", 10, 0);
    CHECK(st_parse(&f, b, len, err, sizeof err) == MN_E_FORMAT && strstr(err, "NUL"));
    free(b);

    /* entry not an object */
    expect_reject("{\"w1\":3}", 0, "'w1': entry is not a JSON object");
    expect_reject("{\"w1\":[]}", 0, "'w1'");
    expect_reject("{\"w1\":\"F32\"}", 0, "'w1'");

    /* dtype */
    expect_reject("{\"w1\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'w1': missing \"dtype\"");
    expect_reject("{\"w1\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "not a string");
    expect_reject("{\"w1\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype 'F33'");
    expect_reject("{\"w1\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
    expect_reject("{\"w1\":{\"dtype\":\"F32F32F32F32F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown");
    expect_reject("{\"w1\":{\"dtype\":\"\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                  "appears twice");

    /* shape */
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "'w1': missing \"shape\"");
    static const char *bad_shapes[] = {"\"1\"", "1",       "{}",          "[-1]",   "[1.5]",
                                       "[\"2\"]", "[null]", "[true]",     "[1e300]", "[9007199254740992]",
                                       "[[1]]", "[-0.5]", "[1,1,1,1,1,1,1,1,1]"};
    for (size_t i = 0; i < MN_ARRAY_LEN(bad_shapes); i++) {
        char h[256];
        snprintf(h, sizeof h, "{\"w1\":{\"dtype\":\"U8\",\"shape\":%s,\"data_offsets\":[0,1]}}", bad_shapes[i]);
        expect_reject(h, 1, "'w1'");
    }
    expect_reject("{\"w1\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "rank 9");

    /* data_offsets */
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "'w1': missing \"data_offsets\"");
    static const char *bad_offs[] = {"[0]", "[0,4,8]", "[-4,0]", "[0,-4]", "[0.5,4]", "[\"0\",4]", "{\"0\":0}",
                                     "4",   "[]",      "[0,4.000001]", "[0,9007199254740992]", "[null,4]"};
    for (size_t i = 0; i < MN_ARRAY_LEN(bad_offs); i++) {
        char h[256];
        snprintf(h, sizeof h, "{\"w1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":%s}}", bad_offs[i]);
        expect_reject(h, 8, "'w1'");
    }
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "begin > end");
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 7, "past the data section");
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 0, "past the data section");

    /* size agreement and overflow */
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8, "needs 8 bytes");
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, "needs 4 bytes");
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,4]}}", 8, "needs 0 bytes");
    expect_reject("{\"w1\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
                  "overflows");
    expect_reject("{\"w1\":{\"dtype\":\"I64\",\"shape\":[4611686018427387],\"data_offsets\":[0,8]}}", 8, "'w1'");

    /* overlapping ranges, including an empty range inside another */
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                  12, "overlap");
    expect_reject("{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                  12, "'b'");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[16,17]},"
                  "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[8,9]}}",
                  17, "overlap tensor 'a'");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
                  8, "overlap");
    expect_reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                  8, "overlap");

    /* names that are not UTF-8 */
    static const char *bad_names[] = {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "w\x80", "\xFF"};
    for (size_t i = 0; i < MN_ARRAY_LEN(bad_names); i++) {
        char h[256];
        snprintf(h, sizeof h, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", bad_names[i]);
        expect_reject(h, 1, "not valid UTF-8");
    }

    /* duplicate names */
    expect_reject("{\"w1\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"w1\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                  2, "'w1': name appears twice");

    /* metadata */
    expect_reject("{\"__metadata__\":3}", 0, "__metadata__");
    expect_reject("{\"__metadata__\":[\"a\"]}", 0, "__metadata__");
    expect_reject("{\"__metadata__\":{\"epoch\":3}}", 0, "'epoch': value is not a string");
    expect_reject("{\"__metadata__\":{\"a\":null}}", 0, "not a string");
    expect_reject("{\"__metadata__\":{\"a\":{}}}", 0, "not a string");
    expect_reject("{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "appears twice");
    expect_reject("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "appears twice");
    expect_reject("{\"__metadata__\":{\"\xC0\x80\":\"x\"}}", 0, "not valid UTF-8");
    expect_reject("{\"__metadata__\":{\"k\":\"\xED\xA0\x80\"}}", 0, "not valid UTF-8");

    /* a NULL err buffer is allowed */
    b = image(&len, "[]", 2, 0);
    CHECK(st_parse(&f, b, len, NULL, 0) == MN_E_FORMAT);
    free(b);
}

static void test_accepts(void) {
    CHECK(expect_accept("{}", 0) == 0);
    CHECK(expect_accept("{}      ", 0) == 0);
    CHECK(expect_accept(" \n{ }\t\r ", 5) == 0); /* bytes no tensor claims are ignored */
    CHECK(expect_accept("{\"__metadata__\":{}}", 0) == 0);
    CHECK(expect_accept("{\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]}}", 0) == 1);
    CHECK(expect_accept("{\"e\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496,0],"
                        "\"data_offsets\":[0,0]}}",
                        0) == 1);
    CHECK(expect_accept("{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4],\"extra\":1}}", 4) == 1);
    CHECK(expect_accept("{\"\xCF\x80.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                        "\"\\u00e9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                        2) == 2);
    CHECK(expect_accept("{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8) == 1);
    CHECK(expect_accept("{\"s\":{\"dtype\":\"F64\",\"shape\":[1e0],\"data_offsets\":[0,8.0]}}", 8) == 1);
    /* empty ranges next to others are fine */
    CHECK(expect_accept("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
                        "\"y\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                        12) == 4);

    /* tensors come back sorted by begin; names, metadata and data are reachable */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    size_t len;
    uint8_t *buf = image(&len, h, strlen(h), 8);
    st_file f;
    char err[256];
    CHECK_OK(st_parse(&f, buf, len, err, sizeof err), err);
    CHECK(f.n == 2 && !strcmp(f.tensors[0].name, "a") && !strcmp(f.tensors[1].name, "b"));
    CHECK(f.data == buf + 8 + strlen(h) && f.data_len == 8);
    CHECK(st_find(&f, "b") == &f.tensors[1] && st_find(&f, "c") == NULL && st_find(NULL, "a") == NULL);
    CHECK(st_meta(&f, "format") && !strcmp(st_meta(&f, "format"), "pt") && st_meta(&f, "x") == NULL);
    CHECK(st_meta(NULL, "format") == NULL && st_find(&f, NULL) == NULL);
    st_free(&f);
    st_free(&f); /* a freed st_file may be freed again */
    st_file z;
    memset(&z, 0, sizeof z);
    st_free(&z);
    st_free(NULL);
    free(buf);
}

static void test_round_trip(void) {
    char p[256], err[512];
    path_in(p, sizeof p, "model.safetensors");
    float w[6] = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
    int32_t lab[4] = {3, -1, 7, 2147483647};
    float scale = 0.125f;
    int64_t ws[2] = {2, 3}, ls[1] = {4};
    st_entry e[3] = {{"w", "F32", 2, ws, w, sizeof w},
                     {"labels", "I32", 1, ls, lab, sizeof lab},
                     {"scale", "F32", 0, NULL, &scale, sizeof scale}};
    const char *meta[] = {"format", "pt", "note", "line one\nline two \xE2\x82\xAC"};
    CHECK_OK(st_save_atomic(p, e, 3, meta, 2, err, sizeof err), err);

    st_file f;
    CHECK_OK(st_load(&f, p, err, sizeof err), err);
    CHECK(f.n == 3 && f.nmeta == 2 && f.owned != NULL);
    const st_tensor *t = st_find(&f, "w");
    CHECK(t && !strcmp(t->dtype, "F32") && t->elem_size == 4 && t->rank == 2 && t->shape[0] == 2 && t->shape[1] == 3);
    CHECK(t && t->end - t->begin == sizeof w && !memcmp(f.data + t->begin, w, sizeof w));
    t = st_find(&f, "labels");
    CHECK(t && !strcmp(t->dtype, "I32") && t->rank == 1 && t->shape[0] == 4);
    CHECK(t && t->end - t->begin == sizeof lab && !memcmp(f.data + t->begin, lab, sizeof lab));
    t = st_find(&f, "scale");
    CHECK(t && t->rank == 0 && t->end - t->begin == 4 && !memcmp(f.data + t->begin, &scale, 4));
    CHECK(st_meta(&f, "format") && !strcmp(st_meta(&f, "format"), "pt"));
    CHECK(st_meta(&f, "note") && !strcmp(st_meta(&f, "note"), meta[3]));
    for (int i = 1; i < f.n; i++) CHECK(f.tensors[i - 1].begin <= f.tensors[i].begin);

    /* layout: header padded with spaces so the data section is 8-aligned */
    size_t ilen;
    uint8_t *img = slurp(p, &ilen);
    uint64_t hlen = 0;
    for (int i = 7; img && ilen >= 8 && i >= 0; i--) hlen = hlen << 8 | img[i];
    CHECK(img && (8 + hlen) % 8 == 0 && 8 + hlen < ilen);
    CHECK(img && img[8] == '{' && (img[8 + hlen - 1] == ' ' || img[8 + hlen - 1] == '}'));
    free(img);
    CHECK(f.data_len == sizeof w + sizeof lab + sizeof scale);

    /* listing */
    char *txt = NULL;
    size_t tlen = 0;
    FILE *ms = open_memstream(&txt, &tlen);
    st_print_summary(&f, ms);
    fclose(ms);
    CHECK(txt && strstr(txt, "format = pt\n"));
    CHECK(txt && strstr(txt, "note = line one\\x0Aline two \xE2\x82\xAC\n")); /* newline escaped */
    CHECK(txt && strstr(txt, "[2,3]") && strstr(txt, "[4]") && strstr(txt, "[]"));
    CHECK(txt && strstr(txt, "labels") && strstr(txt, "I32") && strstr(txt, " 24\n"));
    CHECK(txt && strstr(txt, "3 tensors, 44 bytes\n"));
    free(txt);
    st_free(&f);
    st_free(&f);

    /* a new file gets mode 0644 (not mkstemp's 0600) */
    struct stat sb;
    CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0644);

    /* overwrite in place with other content; the mode of the old file stays */
    char q0[256];
    chmod(p, 0640);
    int64_t ss[1] = {2};
    int32_t two[2] = {5, 6};
    st_entry e2 = {"only", "I32", 1, ss, two, sizeof two};
    CHECK_OK(st_save_atomic(p, &e2, 1, NULL, 0, err, sizeof err), err);
    CHECK_OK(st_load(&f, p, err, sizeof err), err);
    CHECK(f.n == 1 && f.nmeta == 0 && st_find(&f, "w") == NULL && st_find(&f, "only"));
    CHECK(f.n == 1 && !memcmp(f.data + f.tensors[0].begin, two, sizeof two));
    st_free(&f);
    CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0640);

    /* a relative path with no folder part syncs "." */
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) != NULL && chdir(g_dir) == 0);
    CHECK_OK(st_save_atomic("rel.safetensors", &e2, 1, NULL, 0, err, sizeof err), err);
    CHECK(chdir(cwd) == 0);
    path_in(q0, sizeof q0, "rel.safetensors");
    CHECK_OK(st_load(&f, q0, err, sizeof err), err);
    CHECK(f.n == 1);
    st_free(&f);

    /* empty file: "{}" padded to 8 bytes */
    char q[256];
    path_in(q, sizeof q, "empty.safetensors");
    CHECK_OK(st_save_atomic(q, NULL, 0, NULL, 0, err, sizeof err), err);
    size_t len;
    uint8_t *raw = slurp(q, &len);
    CHECK(raw && len == 16 && raw[0] == 8 && !memcmp(raw + 8, "{}      ", 8));
    free(raw);
    CHECK_OK(st_load(&f, q, err, sizeof err), err);
    CHECK(f.n == 0 && f.data_len == 0);
    ms = open_memstream(&txt, &tlen);
    st_print_summary(&f, ms);
    fclose(ms);
    CHECK(txt && !strcmp(txt, "0 tensors, 0 bytes\n"));
    free(txt);
    st_free(&f);
    CHECK(count_temps(g_dir) == 0);
}

static void test_save_invalid(void) {
    char p[256], err[512];
    path_in(p, sizeof p, "invalid.safetensors");
    float d[4] = {0};
    int64_t s2[1] = {2}, sneg[1] = {-1}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    struct {
        st_entry e[2];
        int n;
        const char *want;
    } cases[] = {
        {{{"a", "F33", 1, s2, d, 8}}, 1, "unknown dtype"},
        {{{"a", NULL, 1, s2, d, 8}}, 1, "unknown dtype"},
        {{{"a", "F32", 1, s2, d, 12}}, 1, "does not match"},
        {{{"a", "F32", 1, sneg, d, 8}}, 1, "shape[0]"},
        {{{"a", "U8", 9, s9, d, 1}}, 1, "rank 9"},
        {{{"a", "F32", 1, NULL, d, 8}}, 1, "shape is NULL"},
        {{{"a", "F32", 1, s2, NULL, 8}}, 1, "data is NULL"},
        {{{NULL, "F32", 1, s2, d, 8}}, 1, "name is NULL"},
        {{{"\xC0\xAF", "F32", 1, s2, d, 8}}, 1, "UTF-8"},
        {{{"__metadata__", "F32", 1, s2, d, 8}}, 1, "reserved"},
        {{{"a", "F32", 1, s2, d, 8}, {"a", "F32", 1, s2, d, 8}}, 2, "'a': name appears twice"},
    };
    for (size_t i = 0; i < MN_ARRAY_LEN(cases); i++) {
        mn_status s = st_save_atomic(p, cases[i].e, cases[i].n, NULL, 0, err, sizeof err);
        CHECK_MSG(s == MN_E_INVALID, "save case %zu: got %s (%s)", i, mn_status_str(s), err);
        CHECK_MSG(strstr(err, cases[i].want), "save case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].want);
        CHECK_MSG(access(p, F_OK) != 0, "save case %zu: file was created", i);
    }
    const char *dup_meta[] = {"k", "1", "k", "2"};
    CHECK(st_save_atomic(p, NULL, 0, dup_meta, 2, err, sizeof err) == MN_E_INVALID && strstr(err, "twice"));
    const char *null_meta[] = {"k", NULL};
    CHECK(st_save_atomic(p, NULL, 0, null_meta, 1, err, sizeof err) == MN_E_INVALID && strstr(err, "NULL"));
    CHECK(st_save_atomic(NULL, NULL, 0, NULL, 0, err, sizeof err) == MN_E_INVALID && err[0]);
    CHECK(st_save_atomic(p, NULL, 1, NULL, 0, err, sizeof err) == MN_E_INVALID);
    CHECK(st_save_atomic(p, NULL, -1, NULL, 0, err, sizeof err) == MN_E_INVALID);
    CHECK(access(p, F_OK) != 0 && count_temps(g_dir) == 0);
}

static void test_atomic(void) {
    char p[256], err[512];
    path_in(p, sizeof p, "ckpt.safetensors");
    float small[3] = {1, 2, 3};
    int64_t s3[1] = {3};
    st_entry old = {"w", "F32", 1, s3, small, sizeof small};
    const char *meta[] = {"step", "1"};
    CHECK_OK(st_save_atomic(p, &old, 1, meta, 1, err, sizeof err), err);
    size_t len0, len1;
    uint8_t *before = slurp(p, &len0);
    CHECK(before != NULL);

    /* A bigger save under a 4 KiB file-size limit: write() fails with EFBIG
     * part-way through the data (SIGXFSZ ignored so the process lives). */
    enum { N = 16384 };
    float *big = calloc(N, sizeof *big);
    int64_t sN[1] = {N};
    st_entry next = {"w", "F32", 1, sN, big, N * sizeof *big};
    struct rlimit saved, lim;
    CHECK(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = saved;
    lim.rlim_cur = 4096;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    mn_status s = st_save_atomic(p, &next, 1, meta, 1, err, sizeof err);
    CHECK(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    signal(SIGXFSZ, old_handler);
    CHECK_MSG(s == MN_E_IO, "save under RLIMIT_FSIZE: got %s (%s)", mn_status_str(s), err);
    CHECK_MSG(strstr(err, p) && strstr(err, strerror(EFBIG)), "message \"%s\" lacks the path or EFBIG", err);

    uint8_t *after = slurp(p, &len1);
    CHECK(after && len1 == len0 && !memcmp(before, after, len0));
    CHECK(count_temps(g_dir) == 0);
    free(after);

    /* the same save without the limit works */
    CHECK_OK(st_save_atomic(p, &next, 1, meta, 1, err, sizeof err), err);
    st_file f;
    CHECK_OK(st_load(&f, p, err, sizeof err), err);
    CHECK(f.n == 1 && f.tensors[0].shape[0] == N);
    st_free(&f);
    free(big);
    free(before);

    /* a folder that does not exist: an error naming the path, nothing created */
    char q[256];
    path_in(q, sizeof q, "no/such/folder/x.safetensors");
    s = st_save_atomic(q, &old, 1, NULL, 0, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && strstr(err, q) && strstr(err, strerror(ENOENT)), "missing folder: %s (%s)",
              mn_status_str(s), err);

    /* the target is a folder: rename fails, the folder stays, no temp left */
    path_in(q, sizeof q, "a_folder");
    CHECK(mkdir(q, 0755) == 0);
    s = st_save_atomic(q, &old, 1, NULL, 0, err, sizeof err);
    CHECK_MSG(s == MN_E_IO && strstr(err, q), "folder target: %s (%s)", mn_status_str(s), err);
    struct stat sb;
    CHECK(stat(q, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK(count_temps(g_dir) == 0);
}

static void test_load_errors(void) {
    char p[256], err[512];
    st_file f;
    path_in(p, sizeof p, "missing.safetensors");
    CHECK(st_load(&f, p, err, sizeof err) == MN_E_IO && strstr(err, p) && strstr(err, strerror(ENOENT)));
    CHECK(f.n == 0 && f.owned == NULL);
    CHECK(st_load(&f, g_dir, err, sizeof err) == MN_E_IO && strstr(err, g_dir));
    path_in(p, sizeof p, "short.safetensors");
    FILE *fp = fopen(p, "wb");
    fwrite("abcde", 1, 5, fp);
    fclose(fp);
    CHECK(st_load(&f, p, err, sizeof err) == MN_E_FORMAT && strstr(err, p) && strstr(err, "shorter"));
    CHECK(f.owned == NULL);
    CHECK(st_load(&f, NULL, err, sizeof err) == MN_E_INVALID);
    CHECK(st_load(NULL, p, err, sizeof err) == MN_E_INVALID);
}

/* Every file in $MN_FUZZ_CORPUS must load without crashing. Seeds named
 * valid-* must parse; bad-* must be rejected as MN_E_FORMAT; anything else
 * (crash-*, fuzzer finds) may do either. */
static void test_corpus(void) {
    const char *dir = getenv("MN_FUZZ_CORPUS");
    if (!dir || !*dir) {
        printf("test_safetensors: MN_FUZZ_CORPUS not set, corpus skipped\n");
        return;
    }
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open MN_FUZZ_CORPUS=%s", dir);
    if (!d) return;
    FILE *devnull = fopen("/dev/null", "w");
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[4096], err[1024];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        st_file f;
        mn_status s = st_load(&f, p, err, sizeof err);
        files++;
        CHECK_MSG(s == MN_OK || s == MN_E_FORMAT, "%s: %s (%s)", de->d_name, mn_status_str(s), err);
        if (!strncmp(de->d_name, "valid-", 6)) CHECK_MSG(s == MN_OK, "%s: %s", de->d_name, err);
        if (!strncmp(de->d_name, "bad-", 4)) CHECK_MSG(s == MN_E_FORMAT && err[0], "%s: accepted", de->d_name);
        if (s == MN_OK) st_print_summary(&f, devnull);
        st_free(&f);
    }
    closedir(d);
    if (devnull) fclose(devnull);
    CHECK_MSG(files > 0, "corpus %s is empty", dir);
    printf("test_safetensors: %d corpus files\n", files);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mn-st-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_utf8();
    test_rejections();
    test_accepts();
    test_round_trip();
    test_save_invalid();
    test_atomic();
    test_load_errors();
    test_corpus();
    remove_tree(g_dir);
    return th_finish("test_safetensors");
}
