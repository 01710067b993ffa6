/* test_vk_cache.c - the on-disk kernel caches (src/backend/vulkan/vk_cache.c):
 * keys change with the source, its defines and the compiler identity; a
 * cached SPIR-V file is used only when it is whole and its own: a truncated,
 * garbled, extended, older-format or foreign file makes the kernel compile
 * again (the same words) and is replaced; the pipeline cache file likewise,
 * keyed by the device and driver. Last, with a device: sessions over a cache
 * folder whose every file was garbled run and give the same results.
 *
 * Runs in a fresh cache folder (XDG_CACHE_HOME = a temporary folder). The
 * SPIR-V part needs no device (shaderc only); the session part is skipped
 * without one.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/vulkan/vk_cache.h"
#include "backend/vulkan/vk_util.h"
#include "harness.h"

static const char *SRC_A = "#version 450\n#define SCALE 2.0\nlayout(local_size_x = 1) in;\n"
                           "layout(std430, binding = 0) buffer B { float v[]; };\n"
                           "void main() { v[gl_GlobalInvocationID.x] *= SCALE; }\n";
static const char *SRC_A3 = "#version 450\n#define SCALE 3.0\nlayout(local_size_x = 1) in;\n"
                            "layout(std430, binding = 0) buffer B { float v[]; };\n"
                            "void main() { v[gl_GlobalInvocationID.x] *= SCALE; }\n";

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

static void spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

/* Compiles src; returns whether the cache answered; *same: the words equal ref. */
static bool compile(const char *src, const uint32_t *ref, size_t nref, bool *same) {
    uint32_t *w = NULL;
    size_t n = 0;
    bool cached = false;
    char err[512] = "";
    CHECK_OK(vk_compile(&w, &n, src, "test_vk_cache", &cached, err, sizeof err), err);
    if (same) *same = ref && n == nref && w && memcmp(w, ref, n * 4) == 0;
    free(w);
    return cached;
}

static void key_tests(void) {
    char cid[512];
    vk_compiler_id(cid, sizeof cid);
    printf("compiler id: %s\n", cid);
    CHECK(strstr(cid, "shaderc ") && strstr(cid, "glslang ") && strstr(cid, "SPIRV-Tools"));
    vk_cache_key a, a2, b, c;
    vk_spirv_key(&a, cid, SRC_A);
    vk_spirv_key(&a2, cid, SRC_A);
    vk_spirv_key(&b, cid, SRC_A3);           /* one define differs */
    vk_spirv_key(&c, "shaderc 0.0", SRC_A); /* another compiler release */
    CHECK(memcmp(a.b, a2.b, sizeof a.b) == 0);
    CHECK(memcmp(a.b, b.b, sizeof a.b) != 0);
    CHECK(memcmp(a.b, c.b, sizeof a.b) != 0);
    /* fields are length-prefixed: moving a byte between them changes the key */
    vk_cache_key d, e;
    vk_spirv_key(&d, "ab", "c");
    vk_spirv_key(&e, "a", "bc");
    CHECK(memcmp(d.b, e.b, sizeof d.b) != 0);
}

typedef enum { FLIP_PAYLOAD, FLIP_KEY, FLIP_MAGIC, FORMAT_1, CUT_0, CUT_10, CUT_HEADER, CUT_HALF, CUT_WORD,
               APPEND, OTHER_KEY, NMUT } mutation;
static const char *MUT_NAME[NMUT] = {"flipped payload byte", "flipped key byte", "bad magic", "format 1 header",
                                     "empty", "10 bytes", "header only", "half the words", "last word cut",
                                     "4 bytes appended", "another kernel's file"};

static void spirv_tests(void) {
    uint32_t *ref = NULL;
    size_t nref = 0;
    bool cached = true;
    char err[512] = "";
    CHECK_OK(vk_compile(&ref, &nref, SRC_A, "a", &cached, err, sizeof err), err);
    CHECK(!cached); /* a fresh folder */
    bool same = false;
    CHECK(compile(SRC_A, ref, nref, &same) && same);
    CHECK(!compile(SRC_A3, NULL, 0, NULL)); /* a define changes the key */

    char cid[512], path[1200], path3[1200];
    vk_compiler_id(cid, sizeof cid);
    vk_cache_key ka, k3;
    vk_spirv_key(&ka, cid, SRC_A);
    vk_spirv_key(&k3, cid, SRC_A3);
    CHECK(vk_spirv_path(path, sizeof path, &ka) && vk_spirv_path(path3, sizeof path3, &k3));
    size_t good_n = 0, other_n = 0;
    unsigned char *good = slurp(path, &good_n), *other = slurp(path3, &other_n);
    CHECK(good && good_n == 76 + nref * 4 && memcmp(good, "MNSV", 4) == 0);
    if (!good || !other || good_n < 80) {
        free(good);
        free(other);
        free(ref);
        return;
    }
    for (int m = 0; m < NMUT; m++) {
        unsigned char *b = malloc(good_n + 4);
        memcpy(b, good, good_n);
        size_t n = good_n;
        switch ((mutation)m) {
        case FLIP_PAYLOAD: b[good_n - 7] ^= 0x10; break;
        case FLIP_KEY: b[20] ^= 1; break;
        case FLIP_MAGIC: b[0] = 'X'; break;
        case FORMAT_1: b[4] = 1; break;
        case CUT_0: n = 0; break;
        case CUT_10: n = 10; break;
        case CUT_HEADER: n = 76; break;
        case CUT_HALF: n = 76 + (good_n - 76) / 2; break;
        case CUT_WORD: n = good_n - 4; break;
        case APPEND: memcpy(b + good_n, "\3\2\43\7", 4), n = good_n + 4; break;
        case OTHER_KEY:
            free(b);
            b = malloc(other_n);
            memcpy(b, other, other_n);
            n = other_n;
            break;
        case NMUT: break;
        }
        spit(path, b, n);
        free(b);
        uint32_t *w = NULL;
        size_t nw = 0;
        CHECK_MSG(!vk_spirv_load(path, &ka, &w, &nw), "%s: the cache file was accepted", MUT_NAME[m]);
        free(w);
        same = false;
        CHECK_MSG(!compile(SRC_A, ref, nref, &same), "%s: the cache answered", MUT_NAME[m]);
        CHECK_MSG(same, "%s: the recompiled kernel differs", MUT_NAME[m]);
        same = false;
        CHECK_MSG(compile(SRC_A, ref, nref, &same) && same, "%s: the file was not replaced", MUT_NAME[m]);
    }
    /* a whole file with a valid checksum over words that are not SPIR-V */
    uint32_t junk[8] = {0xdeadbeef, 0x00010300, 0, 10, 0, 0, 0, 0};
    vk_spirv_store(path, &ka, junk, 8);
    uint32_t *w = NULL;
    size_t nw = 0;
    CHECK(!vk_spirv_load(path, &ka, &w, &nw));
    junk[0] = 0x07230203u, junk[4] = 7; /* SPIR-V magic, schema != 0 */
    vk_spirv_store(path, &ka, junk, 8);
    CHECK(!vk_spirv_load(path, &ka, &w, &nw));
    junk[4] = 0;
    vk_spirv_store(path, &ka, junk, 8);
    CHECK(vk_spirv_load(path, &ka, &w, &nw) && nw == 8); /* the check itself accepts a sane header */
    free(w);
    /* a directory where the file should be: compiles, uncached, no crash */
    unlink(path);
    CHECK(mkdir(path, 0700) == 0);
    same = false;
    CHECK(!compile(SRC_A, ref, nref, &same) && same);
    rmdir(path);
    /* a FIFO there: never opened for reading (no writer would ever come),
     * replaced by the rename of the new file */
    CHECK(mkfifo(path, 0600) == 0);
    same = false;
    CHECK(!compile(SRC_A, ref, nref, &same) && same);
    same = false;
    CHECK(compile(SRC_A, ref, nref, &same) && same);
    free(good);
    free(other);
    free(ref);
}

static void pipeline_tests(void) {
    VkPhysicalDeviceProperties p;
    memset(&p, 0, sizeof p);
    p.vendorID = 0x1234;
    p.deviceID = 0x5678;
    p.driverVersion = 42;
    p.apiVersion = VK_API_VERSION_1_1;
    for (unsigned i = 0; i < VK_UUID_SIZE; i++) p.pipelineCacheUUID[i] = (uint8_t)(i * 7 + 1);
    snprintf(p.deviceName, sizeof p.deviceName, "test device");
    /* driver data: the Vulkan header (32 bytes, little endian), then a body */
    unsigned char data[132];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 13);
    const uint32_t hdr[4] = {32, VK_PIPELINE_CACHE_HEADER_VERSION_ONE, p.vendorID, p.deviceID};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) data[4 * i + k] = (unsigned char)(hdr[i] >> (8 * k));
    memcpy(data + 16, p.pipelineCacheUUID, VK_UUID_SIZE);

    char path[1200], path2[1200];
    CHECK(vk_pipeline_path(path, sizeof path, &p));
    void *got = NULL;
    size_t n = 1;
    vk_pipeline_load(path, &p, &got, &n); /* none yet */
    CHECK(!got && n == 0);
    vk_pipeline_store(path, &p, data, sizeof data);
    vk_pipeline_load(path, &p, &got, &n);
    CHECK(got && n == sizeof data && memcmp(got, data, n) == 0);
    free(got);

    /* another driver version: another file, and this file is not its own */
    VkPhysicalDeviceProperties q = p;
    q.driverVersion = 43;
    CHECK(vk_pipeline_path(path2, sizeof path2, &q) && strcmp(path, path2) != 0);
    vk_pipeline_load(path, &q, &got, &n);
    CHECK(!got && n == 0);

    /* garbled, truncated, extended */
    size_t fn = 0;
    unsigned char *file = slurp(path, &fn);
    CHECK(file && fn == 80 + sizeof data && memcmp(file, "MNPC", 4) == 0);
    if (file && fn == 80 + sizeof data) {
        static const size_t cut[] = {0, 40, 80, 100};
        for (size_t i = 0; i < 4; i++) {
            spit(path, file, cut[i]);
            vk_pipeline_load(path, &p, &got, &n);
            CHECK_MSG(!got && n == 0, "pipeline cache cut to %zu bytes was accepted", cut[i]);
        }
        file[fn - 1] ^= 0x80;
        spit(path, file, fn);
        vk_pipeline_load(path, &p, &got, &n);
        CHECK(!got && n == 0);
    }
    free(file);

    /* driver data whose header names another device is not stored */
    unlink(path);
    data[8] ^= 1; /* vendor id */
    vk_pipeline_store(path, &p, data, sizeof data);
    CHECK(access(path, F_OK) != 0);
    vk_pipeline_store(path, &p, data, 20); /* shorter than a header */
    CHECK(access(path, F_OK) != 0);
}

/* ---- with a device: sessions over a garbled cache folder ---------------- */

static mn_graph *scale_graph(void) {
    mn_graph *g;
    mn_tensor x, w, y;
    mn_graph_create(&g);
    mn_status st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){2, 3});
    st = st ? st : mn_graph_param(g, &w, "w", 2, (int64_t[]){3, 2}, (mn_init){MN_INIT_CONSTANT, 0.5f, 0});
    st = st ? st : mn_matmul(g, &y, x, w);
    st = st ? st : mn_relu(g, &y, y);
    st = st ? st : mn_graph_output(g, y, "y");
    CHECK_OK(st, mn_graph_error(g));
    return g;
}

static bool run_once(const mn_graph *g, float y[4]) {
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    o.mode = MN_MODE_INFERENCE;
    mn_session *s = NULL;
    const float x[6] = {1, -2, 3, 4, 5, -6};
    mn_status st = mn_session_create(&s, g, &o);
    st = st ? st : mn_session_set_input(s, "x", x, sizeof x);
    st = st ? st : mn_session_run(s);
    st = st ? st : mn_session_output(s, "y", y, 4 * sizeof(float));
    CHECK_OK(st, s ? mn_session_error(s) : "no session");
    mn_session_destroy(s); /* saves the pipeline cache */
    return st == MN_OK;
}

/* Garbles every cache file under dir (recursively): flips a byte in the
 * middle and cuts the last 3 bytes. Returns how many. */
static int garble_all(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode)) {
            count += garble_all(p);
            continue;
        }
        size_t n = 0;
        unsigned char *b = slurp(p, &n);
        if (b && n > 8) {
            b[n / 2] ^= 0x55;
            spit(p, b, n - 3);
            count++;
        }
        free(b);
    }
    closedir(d);
    return count;
}

static void session_tests(const char *root) {
    mn_device *dev = th_require_vulkan();
    if (!dev) return;
    mn_device_close(dev);
    mn_graph *g = scale_graph();
    float y1[4] = {0}, y2[4] = {1}, y3[4] = {2};
    CHECK(run_once(g, y1));
    char cdir[1100];
    snprintf(cdir, sizeof cdir, "%s/meganeura", root);
    int n = garble_all(cdir);
    CHECK_MSG(n >= 2, "only %d cache files to garble (expected SPIR-V and a pipeline cache)", n);
    CHECK(run_once(g, y2)); /* every kernel compiles again */
    CHECK(run_once(g, y3)); /* from the rewritten files */
    CHECK(memcmp(y1, y2, sizeof y1) == 0 && memcmp(y1, y3, sizeof y1) == 0);
    /* the driver's own data passed the header check and was written again */
    DIR *d = opendir(cdir);
    int pipelines = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, "pipelines-", 10) != 0) continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", cdir, e->d_name);
        size_t fn = 0;
        unsigned char *b = slurp(p, &fn);
        pipelines += b && fn >= 80 + 32 && memcmp(b, "MNPC", 4) == 0;
        free(b);
    }
    if (d) closedir(d);
    CHECK_MSG(pipelines == 1, "%d valid pipeline cache files", pipelines);
    mn_graph_destroy(g);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(p);
        else unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int main(void) {
    char root[] = "/tmp/mn-vk-cache-XXXXXX";
    if (!mkdtemp(root)) {
        printf("FAIL: mkdtemp\n");
        return 1;
    }
    setenv("XDG_CACHE_HOME", root, 1);
    unsetenv("MEGANEURA_NO_KERNEL_CACHE");
    key_tests();
    spirv_tests();
    pipeline_tests();
    session_tests(root);
    if (!getenv("MN_KEEP_CACHE")) remove_tree(root);
    else printf("kept %s\n", root);
    return th_finish("test_vk_cache");
}
