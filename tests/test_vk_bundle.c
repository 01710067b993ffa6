/* test_vk_bundle.c - inference bundles on the Vulkan backend (lavapipe):
 * a session's bundle reloaded with empty kernel caches and the compiler
 * forbidden (MEGANEURA_FAULT_NO_SHADERC) takes every kernel from the
 * bundle, uses its pipeline-cache data and computes the exporting session's
 * bits; a bundle "from another device" still loads: with the pipeline
 * cache's UUID changed (the data is ignored, the SPIR-V still used), with a
 * device limit that changes the generated code (MEGANEURA_VK_MAX_ALLOCATION:
 * the kernels that differ are compiled, the others taken), with a SPIR-V
 * binary that fails validation (compiled instead); a CPU bundle (no kernels)
 * on Vulkan and a Vulkan bundle on the CPU; what the models stage builds (a
 * tiny conditioned U-Net: sin/cos, group norms, attention on the tile
 * kernels, upsampling); a bundle of 64-bit index kernels (MN_IDX64).
 */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/wire.h"
#include "harness.h"
#include "io/bundle.h"
#include "meganeura_models.h"

#define N 8
#define C 4
#define H 8
#define K 10
#define FLAT (C * (H / 2) * (H / 2))

static char g_dir[64];

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%.40s/%s", g_dir, name); }

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)len + 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) free(b), b = NULL;
    fclose(f);
    *n = b ? (size_t)len : 0;
    return b;
}

/* conv 3x3 -> relu -> maxpool 2 -> linear -> layer norm -> softmax */
static mn_graph *model(void) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_tensor x, w, b, fw, fb, c, r, p, f, l, l2, n, y;
    const mn_conv2d_params cp = {.padding = {1, 1}};
    const mn_pool2d_params pp = {.kernel = {2, 2}};
    mn_status s = mn_graph_input(g, &x, "x", MN_F32, 4, (int64_t[]){N, 1, H, H});
    s = s ? s : mn_graph_param(g, &w, "conv.weight", 4, (int64_t[]){C, 1, 3, 3}, (mn_init){MN_INIT_KAIMING_UNIFORM, 0, 0});
    s = s ? s : mn_graph_param(g, &b, "conv.bias", 1, (int64_t[]){C}, (mn_init){MN_INIT_ZEROS, 0, 0});
    s = s ? s : mn_graph_param(g, &fw, "fc.weight", 2, (int64_t[]){FLAT, K}, (mn_init){MN_INIT_KAIMING_UNIFORM, 0, 0});
    s = s ? s : mn_graph_param(g, &fb, "fc.bias", 1, (int64_t[]){K}, (mn_init){MN_INIT_ZEROS, 0, 0});
    s = s ? s : mn_conv2d(g, &c, x, w, b, &cp);
    s = s ? s : mn_relu(g, &r, c);
    s = s ? s : mn_max_pool2d(g, &p, r, &pp);
    s = s ? s : mn_reshape(g, &f, p, 2, (int64_t[]){N, FLAT});
    s = s ? s : mn_matmul(g, &l, f, fw);
    s = s ? s : mn_add(g, &l2, l, fb);
    s = s ? s : mn_layer_norm(g, &n, l2, MN_NONE, MN_NONE, 1e-5f);
    s = s ? s : mn_softmax(g, &y, n);
    s = s ? s : mn_graph_output(g, y, "probs");
    CHECK_MSG(s == MN_OK, "model: %s", mn_graph_error(g));
    return g;
}

static float g_x[N * H * H];

static void set_params(mn_session *s) {
    static const struct {
        const char *name;
        int n;
    } ps[] = {{"conv.weight", C * 9}, {"conv.bias", C}, {"fc.weight", FLAT * K}, {"fc.bias", K}};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        float v[FLAT * K];
        for (int k = 0; k < ps[i].n; k++) v[k] = (float)((k * 7 + (int)i * 3) % 17 - 8) / 16.0f;
        CHECK_OK(mn_session_set_param(s, ps[i].name, v, (size_t)ps[i].n), mn_session_error(s));
    }
}

/* probs of s for g_x */
static void run(mn_session *s, float out[N * K]) {
    CHECK_OK(mn_session_set_input(s, "x", g_x, sizeof g_x), mn_session_error(s));
    CHECK_OK(mn_session_run(s), mn_session_error(s));
    CHECK_OK(mn_session_output(s, "probs", out, N * K * 4), mn_session_error(s));
}

static mn_session *from_bundle(const char *path, mn_backend_kind be, mn_device *dev) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = dev;
    mn_session *s = NULL;
    mn_status st = mn_session_create_from_bundle(&s, path, &o);
    CHECK_MSG(st == MN_OK, "%s: %s", path, s ? mn_session_error(s) : "no session");
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

static mn_kernel_stats stats_of(const mn_session *s) {
    mn_kernel_stats k = {-1, -1, -1, false};
    CHECK(mn_session_kernel_stats(s, &k) == MN_OK);
    return k;
}

/* Section tag of bundle b (n bytes) rewritten by edit(), checksums valid
 * again; written to path. */
static void rewrite(const uint8_t *b, size_t n, const char *tag, void (*edit)(uint8_t *, size_t), const char *path) {
    bundle_file bf;
    char err[512];
    CHECK_OK(bundle_open_mem(&bf, b, n, err, sizeof err), err);
    bundle_part parts[BUNDLE_MAX_SECTIONS];
    uint8_t *data[BUNDLE_MAX_SECTIONS];
    for (int i = 0; i < bf.n; i++) {
        size_t len;
        CHECK_OK(bundle_read(&bf, bf.sec[i].tag, UINT64_MAX, &data[i], &len, err, sizeof err), err);
        if (!strcmp(bf.sec[i].tag, tag)) edit(data[i], len);
        parts[i] = (bundle_part){bf.sec[i].tag, data[i], len, NULL, NULL};
    }
    CHECK_OK(bundle_write(path, parts, bf.n, err, sizeof err), err);
    for (int i = 0; i < bf.n; i++) free(data[i]);
    bundle_close(&bf);
}

/* The Vulkan pipeline-cache header: bytes 16..31 are pipelineCacheUUID. */
static void flip_uuid(uint8_t *p, size_t n) {
    CHECK(n >= 32);
    if (n >= 32) p[20] ^= 0xff;
}

/* The first kernel's SPIR-V: its ID bound (word 3) cut to 1, which
 * spirv-val refuses. Layout: docs/BUNDLE.md. */
static void break_spirv(uint8_t *p, size_t n) {
    size_t at = 8;
    at += 2 + (p[at] | (size_t)p[at + 1] << 8); /* compiler identity */
    at += 16;
    at += 2 + (p[at] | (size_t)p[at + 1] << 8); /* device name */
    at += 4;                                     /* count */
    const uint32_t sl = le32_get(p + at + 32);
    at += 32 + 8 + sl + (4 - sl % 4) % 4; /* key, lengths, GLSL, padding */
    CHECK(at + 20 <= n && le32_get(p + at) == 0x07230203u);
    if (at + 20 <= n) le32_put(p + at + 12, 1);
}

static void set_empty_caches(bool compiler) {
    char p[128];
    path_in(p, sizeof p, "empty-cache");
    mkdir(p, 0755);
    setenv("XDG_CACHE_HOME", p, 1);
    setenv("MEGANEURA_NO_KERNEL_CACHE", "1", 1);
    if (compiler) unsetenv("MEGANEURA_FAULT_NO_SHADERC");
    else setenv("MEGANEURA_FAULT_NO_SHADERC", "1", 1);
}

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[512];
        snprintf(p, sizeof p, "%.200s/%.200s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) rm_tree(p);
        else unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* Whether the n bytes at b hold the string str. */
static bool holds(const uint8_t *b, size_t n, const char *str) {
    const size_t k = strlen(str);
    for (size_t i = 0; b && i + k <= n; i++)
        if (!memcmp(b + i, str, k)) return true;
    return false;
}

/* The tiny conditioned U-Net of test_unet in inference (the models stage:
 * sin/cos time embedding, group norms, self- and cross-attention with the
 * tile kernels forced, upsampling, concatenation), on dev: exported with the
 * usual kernel caches (home), reloaded with empty caches and no compiler:
 * every kernel from the bundle, the same bits. The bundle's GLSL must hold
 * each string of want (the attention tile kernel). */
static void unet_case(mn_device *dev, const char *tag, const char *home, const char *const *want, int nwant) {
    enum { UB = 2, UC = 3, UH = 8, UL = 5, UD = 6 };
    static float noisy[UB * UC * UH * UH], t[UB] = {999, 37}, ctx[UB * UL * UD];
    for (size_t i = 0; i < MN_ARRAY_LEN(noisy); i++) noisy[i] = (float)((int)(i * 37 % 29) - 14) / 7.0f;
    for (size_t i = 0; i < MN_ARRAY_LEN(ctx); i++) ctx[i] = (float)((int)(i * 11 % 13) - 6) / 6.0f;
    mn_unet_config c = mn_unet_config_conditioned(8);
    c.in_channels = UC, c.levels = 2, c.groups = 4, c.head_dim = 4, c.attention_levels = 0x2;
    c.context_len = UL, c.context_dim = UD;
    mn_unet_options uo = mn_unet_default_options();
    uo.kind = MN_UNET_INFER, uo.batch = UB, uo.height = uo.width = UH;
    mn_graph *g;
    mn_graph_create(&g);
    mn_model *m = NULL;
    CHECK_OK(mn_unet_create(&m, g, &c, &uo), mn_model_error(m));
    char path[128];
    path_in(path, sizeof path, "unet.mnb");
    if (home) setenv("XDG_CACHE_HOME", home, 1);
    else unsetenv("XDG_CACHE_HOME");
    unsetenv("MEGANEURA_NO_KERNEL_CACHE");
    unsetenv("MEGANEURA_FAULT_NO_SHADERC");
    setenv("MEGANEURA_ATTN", "tiles", 1);
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    o.device = dev;
    o.seed = 5;
    static float ref[UB * UC * UH * UH], out[UB * UC * UH * UH];
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    CHECK_OK(st, mn_session_error(s));
    int nk = 0;
    if (!st) {
        CHECK_OK(mn_session_set_input(s, "noisy", noisy, sizeof noisy), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "timesteps", t, sizeof t), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "context", ctx, sizeof ctx), mn_session_error(s));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "pred", ref, sizeof ref), mn_session_error(s));
        const mn_kernel_stats k0 = stats_of(s);
        nk = k0.compiled + k0.cached;
        CHECK_OK(mn_session_export_bundle(s, path), mn_session_error(s));
    }
    mn_session_destroy(s);
    size_t n;
    uint8_t *b = slurp(path, &n);
    for (int i = 0; i < nwant; i++) CHECK_MSG(holds(b, n, want[i]), "%s: the bundle has no kernel with '%s'", tag, want[i]);
    free(b);
    set_empty_caches(false);
    s = from_bundle(path, MN_BACKEND_VULKAN, dev);
    if (s) {
        const mn_kernel_stats k = stats_of(s);
        printf("  %s: %d kernels from the bundle, %d compiled\n", tag, k.bundled, k.compiled);
        CHECK_MSG(nk >= 10 && k.bundled == nk && k.compiled == 0 && k.cached == 0, "%s: %d kernels, bundled %d compiled %d",
                  tag, nk, k.bundled, k.compiled);
        CHECK_OK(mn_session_set_input(s, "noisy", noisy, sizeof noisy), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "timesteps", t, sizeof t), mn_session_error(s));
        CHECK_OK(mn_session_set_input(s, "context", ctx, sizeof ctx), mn_session_error(s));
        CHECK_OK(mn_session_run(s), mn_session_error(s));
        CHECK_OK(mn_session_output(s, "pred", out, sizeof out), mn_session_error(s));
        CHECK_MSG(!memcmp(out, ref, sizeof ref), "%s: the bundle's session computes other bits", tag);
        mn_session_destroy(s);
    }
    unsetenv("MEGANEURA_ATTN");
    mn_model_destroy(m);
    mn_graph_destroy(g);
}

int main(void) {
    mn_device *dev = th_require_vulkan();
    if (!dev) return th_finish("test_vk_bundle");
    snprintf(g_dir, sizeof g_dir, "/tmp/mn-vk-bundle-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    const char *home0 = getenv("XDG_CACHE_HOME");
    char *home = home0 ? strdup(home0) : NULL;
    for (int i = 0; i < N * H * H; i++) g_x[i] = (float)((i * 31) % 23) / 23.0f;
    char a[128], p[128];
    path_in(a, sizeof a, "vk.mnb");

    /* 1. the exporting session (the usual caches) */
    mn_graph *g = model();
    mn_session_options o = mn_session_default_options();
    o.backend = MN_BACKEND_VULKAN;
    o.device = dev;
    mn_session *s;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    set_params(s);
    float ref[N * K], out[N * K];
    run(s, ref);
    const mn_kernel_stats k0 = stats_of(s);
    const int nk = k0.compiled + k0.cached;
    CHECK(nk >= 4 && k0.bundled == 0);
    CHECK_OK(mn_session_export_bundle(s, a), mn_session_error(s));
    mn_session_destroy(s);
    /* the CPU computes the same probabilities to rounding */
    o.backend = MN_BACKEND_CPU;
    o.device = NULL;
    float cpu[N * K];
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    set_params(s);
    run(s, cpu);
    path_in(p, sizeof p, "cpu.mnb");
    CHECK_OK(mn_session_export_bundle(s, p), mn_session_error(s));
    mn_session_destroy(s);
    CHECK_MSG(th_nmse(ref, cpu, N * K) < 1e-10, "vulkan vs cpu nmse %g", th_nmse(ref, cpu, N * K));

    /* 2. empty caches and no compiler: every kernel from the bundle */
    set_empty_caches(false);
    s = from_bundle(a, MN_BACKEND_VULKAN, dev);
    if (s) {
        mn_kernel_stats k = stats_of(s);
        printf("  same device: %d kernels from the bundle, %d compiled, %d cached, pipeline cache %s\n", k.bundled,
               k.compiled, k.cached, k.bundle_pipelines ? "used" : "not used");
        CHECK(k.bundled == nk && k.compiled == 0 && k.cached == 0 && k.bundle_pipelines);
        run(s, out);
        CHECK_MSG(!memcmp(out, ref, sizeof ref), "the bundle's session computes other bits");
        path_in(p, sizeof p, "again.mnb");
        CHECK_OK(mn_session_export_bundle(s, p), mn_session_error(s));
        size_t n1, n2;
        uint8_t *b1 = slurp(a, &n1), *b2 = slurp(p, &n2);
        CHECK_MSG(b1 && b2 && n1 == n2 && !memcmp(b1, b2, n1), "exported again, the bundle differs");
        free(b1), free(b2);
        mn_session_destroy(s);
    }
    /* a plain session of the same graph cannot start like that */
    o.backend = MN_BACKEND_VULKAN;
    o.device = dev;
    CHECK(mn_session_create(&s, g, &o) == MN_E_UNSUPPORTED && strstr(mn_session_error(s), "NO_SHADERC"));
    mn_session_destroy(s);

    size_t n;
    uint8_t *b = slurp(a, &n);
    /* 3. another device's pipeline cache (its UUID): ignored, the SPIR-V still used */
    path_in(p, sizeof p, "uuid.mnb");
    rewrite(b, n, "pipeline", flip_uuid, p);
    s = from_bundle(p, MN_BACKEND_VULKAN, dev);
    if (s) {
        mn_kernel_stats k = stats_of(s);
        CHECK(k.bundled == nk && k.compiled == 0 && !k.bundle_pipelines);
        run(s, out);
        CHECK(!memcmp(out, ref, sizeof ref));
        mn_session_destroy(s);
    }

    /* 4. a binary that fails spirv-val: compiled instead (the compiler allowed) */
    set_empty_caches(true);
    path_in(p, sizeof p, "badspv.mnb");
    rewrite(b, n, "kernels", break_spirv, p);
    s = from_bundle(p, MN_BACKEND_VULKAN, dev);
    if (s) {
        mn_kernel_stats k = stats_of(s);
        CHECK_MSG(k.bundled == nk - 1 && k.compiled == 1, "bundled %d compiled %d", k.bundled, k.compiled);
        run(s, out);
        CHECK(!memcmp(out, ref, sizeof ref));
        mn_session_destroy(s);
    }

    /* 5. a device whose limits change the generated code: 4 KiB bindings page
     * the convolution's tensors; its kernels are compiled, the rest taken */
    setenv("MEGANEURA_VK_MAX_ALLOCATION", "4096", 1);
    mn_device *dev2 = NULL;
    CHECK_OK(mn_device_open(&dev2, MN_BACKEND_VULKAN), mn_device_error(dev2));
    s = from_bundle(a, MN_BACKEND_VULKAN, dev2);
    if (s) {
        mn_kernel_stats k = stats_of(s);
        printf("  4 KiB bindings: %d kernels from the bundle, %d compiled\n", k.bundled, k.compiled);
        CHECK(k.bundled >= 1 && k.compiled >= 1 && k.cached == 0);
        run(s, out);
        float plain[N * K];
        mn_session *s2;
        o.device = dev2;
        CHECK_OK(mn_session_create(&s2, g, &o), mn_session_error(s2));
        set_params(s2);
        run(s2, plain);
        mn_session_destroy(s2);
        CHECK_MSG(!memcmp(out, plain, sizeof out), "the bundle's session and a plain one differ on the paged device");
        CHECK(th_nmse(out, cpu, N * K) < 1e-10);
        mn_session_destroy(s);
    }
    mn_device_close(dev2);
    unsetenv("MEGANEURA_VK_MAX_ALLOCATION");

    /* 6. a CPU bundle (no kernels) on Vulkan, a Vulkan bundle on the CPU */
    path_in(p, sizeof p, "cpu.mnb");
    s = from_bundle(p, MN_BACKEND_VULKAN, dev);
    if (s) {
        mn_kernel_stats k = stats_of(s);
        CHECK(k.bundled == 0 && k.compiled == nk);
        run(s, out);
        CHECK(!memcmp(out, ref, sizeof ref));
        mn_session_destroy(s);
    }
    s = from_bundle(a, MN_BACKEND_CPU, NULL);
    if (s) {
        mn_kernel_stats k = stats_of(s);
        CHECK(k.bundled == 0 && k.compiled == 0);
        run(s, out);
        CHECK(!memcmp(out, cpu, sizeof cpu));
        mn_session_destroy(s);
    }

    /* 7. the models stage's U-Net (the attention tile kernels) */
    static const char *const tile[] = {"#define AT_TM "};
    unet_case(dev, "U-Net", home, tile, 1);

    /* 8. 64-bit indexing (MEGANEURA_VK_INDEX_MAX=1: every kernel in its
     * MN_IDX64 form): exported and reloaded with no compiler, the same bits
     * as the 32-bit kernels */
    setenv("MEGANEURA_VK_INDEX_MAX", "1", 1);
    mn_device *dev3 = NULL;
    CHECK_OK(mn_device_open(&dev3, MN_BACKEND_VULKAN), mn_device_error(dev3));
    unsetenv("MEGANEURA_VK_INDEX_MAX");
    if (home) setenv("XDG_CACHE_HOME", home, 1);
    else unsetenv("XDG_CACHE_HOME");
    unsetenv("MEGANEURA_NO_KERNEL_CACHE");
    unsetenv("MEGANEURA_FAULT_NO_SHADERC");
    o.backend = MN_BACKEND_VULKAN;
    o.device = dev3;
    path_in(p, sizeof p, "idx64.mnb");
    if (dev3 && mn_session_create(&s, g, &o) == MN_OK) {
        set_params(s);
        run(s, out);
        CHECK_MSG(!memcmp(out, ref, sizeof ref), "64-bit kernels compute other bits than 32-bit ones");
        CHECK_OK(mn_session_export_bundle(s, p), mn_session_error(s));
        mn_session_destroy(s);
        size_t n64;
        uint8_t *b64 = slurp(p, &n64);
        CHECK_MSG(holds(b64, n64, "#define MN_IDX64 ") && !holds(b, n, "#define MN_IDX64 "),
                  "only the 64-bit bundle holds MN_IDX64 kernels");
        free(b64);
        set_empty_caches(false);
        s = from_bundle(p, MN_BACKEND_VULKAN, dev3);
        if (s) {
            mn_kernel_stats k = stats_of(s);
            printf("  64-bit indexing: %d kernels from the bundle, %d compiled\n", k.bundled, k.compiled);
            CHECK(k.bundled == nk && k.compiled == 0 && k.cached == 0);
            run(s, out);
            CHECK(!memcmp(out, ref, sizeof ref));
            mn_session_destroy(s);
        }
    } else {
        CHECK_MSG(0, "a session on the 64-bit device: %s", s ? mn_session_error(s) : "no device");
        mn_session_destroy(s);
    }
    mn_device_close(dev3);

    free(b);
    mn_graph_destroy(g);
    mn_device_close(dev);
    unsetenv("MEGANEURA_FAULT_NO_SHADERC");
    unsetenv("MEGANEURA_NO_KERNEL_CACHE");
    if (home) setenv("XDG_CACHE_HOME", home, 1);
    else unsetenv("XDG_CACHE_HOME");
    free(home);
    rm_tree(g_dir);
    return th_finish("test_vk_bundle");
}
