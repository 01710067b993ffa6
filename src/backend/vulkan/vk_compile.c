/* vk_compile.c - GLSL to SPIR-V with libshaderc (linked statically), and the
 * on-disk SPIR-V cache.
 *
 * Cache file: <cache>/spirv/<key>.spv where key = 64-bit FNV-1a of the
 * source and the compiler version. Layout: "MNSV" magic, u32 format version,
 * u64 key, u32 word count, words. A file that fails any check is ignored
 * (and rewritten); writes go through a temporary file and rename.
 */
#include <errno.h>
#include <shaderc/shaderc.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/vulkan/vk_util.h"
#include "io/file.h"

#define SPV_MAGIC "MNSV"
#define SPV_VERSION 1u

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static int mkdir_p(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            *p = '/';
            return -1;
        }
        *p = '/';
    }
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

const char *vk_cache_dir(char *buf, size_t cap) {
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (x && *x) snprintf(buf, cap, "%s/meganeura", x);
    else if (home && *home) snprintf(buf, cap, "%s/.cache/meganeura", home);
    else return NULL;
    return mkdir_p(buf) == 0 ? buf : NULL;
}

static const char *compiler_version(void) {
    static char v[64];
    if (!v[0]) {
        unsigned int ver = 0, rev = 0;
        shaderc_get_spv_version(&ver, &rev);
        snprintf(v, sizeof v, "shaderc-spv%u.%u-mn%u", ver, rev, SPV_VERSION);
    }
    return v;
}

static bool cache_read(const char *path, uint64_t key, uint32_t **words, size_t *nwords) {
    FILE *f = io_fopen_read(path); /* regular files only: a FIFO never blocks */
    if (!f) return false;
    unsigned char hdr[20];
    bool ok = fread(hdr, 1, sizeof hdr, f) == sizeof hdr && memcmp(hdr, SPV_MAGIC, 4) == 0;
    uint32_t ver = 0, n = 0;
    uint64_t k = 0;
    if (ok) {
        memcpy(&ver, hdr + 4, 4);
        memcpy(&k, hdr + 8, 8);
        memcpy(&n, hdr + 16, 4);
        ok = ver == SPV_VERSION && k == key && n > 5 && n < (1u << 24);
    }
    uint32_t *w = ok ? malloc((size_t)n * 4) : NULL;
    ok = ok && w && fread(w, 4, n, f) == n && w[0] == 0x07230203u && fgetc(f) == EOF;
    fclose(f);
    if (!ok) {
        free(w);
        return false;
    }
    *words = w;
    *nwords = n;
    return true;
}

static void cache_write(const char *path, uint64_t key, const uint32_t *words, size_t n) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%.1100s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    uint32_t ver = SPV_VERSION, cnt = (uint32_t)n;
    bool ok = fwrite(SPV_MAGIC, 1, 4, f) == 4 && fwrite(&ver, 4, 1, f) == 1 && fwrite(&key, 8, 1, f) == 1 &&
              fwrite(&cnt, 4, 1, f) == 1 && fwrite(words, 4, n, f) == n;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

mn_status vk_compile(uint32_t **words, size_t *nwords, const char *source, const char *name, bool *cached,
                     char *err, size_t cap) {
    const char *cv = compiler_version();
    uint64_t key = fnv(fnv(0xcbf29ce484222325ull, cv, strlen(cv)), source, strlen(source));
    char dir[1024], path[1100];
    const char *nocache = getenv("MEGANEURA_NO_KERNEL_CACHE");
    bool use_cache = !(nocache && *nocache && strcmp(nocache, "0") != 0) && vk_cache_dir(dir, sizeof dir - 8);
    if (use_cache) {
        strcat(dir, "/spirv");
        use_cache = mkdir_p(dir) == 0;
        snprintf(path, sizeof path, "%s/%016llx.spv", dir, (unsigned long long)key);
    }
    *cached = false;
    if (use_cache && cache_read(path, key, words, nwords)) {
        *cached = true;
        return MN_OK;
    }
    shaderc_compiler_t comp = shaderc_compiler_initialize();
    shaderc_compile_options_t opt = shaderc_compile_options_initialize();
    if (!comp || !opt) {
        if (comp) shaderc_compiler_release(comp);
        if (opt) shaderc_compile_options_release(opt);
        mn_fmt(err, cap, "vulkan: cannot initialise shaderc");
        return MN_E_NOMEM;
    }
    shaderc_compile_options_set_target_env(opt, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_1);
    shaderc_compile_options_set_optimization_level(opt, shaderc_optimization_level_performance);
    shaderc_compilation_result_t res =
        shaderc_compile_into_spv(comp, source, strlen(source), shaderc_glsl_compute_shader, name, "main", opt);
    mn_status st = MN_OK;
    if (shaderc_result_get_compilation_status(res) != shaderc_compilation_status_success) {
        mn_fmt(err, cap, "vulkan: compiling kernel %s: %.400s", name, shaderc_result_get_error_message(res));
        st = MN_E_BACKEND;
    } else {
        size_t len = shaderc_result_get_length(res);
        *nwords = len / 4;
        *words = malloc(len);
        if (!*words) st = MN_E_NOMEM;
        else {
            memcpy(*words, shaderc_result_get_bytes(res), len);
            if (use_cache) cache_write(path, key, *words, *nwords);
        }
    }
    shaderc_result_release(res);
    shaderc_compile_options_release(opt);
    shaderc_compiler_release(comp);
    return st;
}
