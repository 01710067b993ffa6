/* vk_compile.c - GLSL to SPIR-V with libshaderc (linked statically), through
 * the on-disk SPIR-V cache (vk_cache.c), and the compiler's identity that
 * keys that cache.
 *
 * Kernels that ask for it (MN_SPIRV_PASS) go through a SPIR-V pass after
 * glslang (vk_spirv.h: cooperative matrices in the KHR form).
 *
 * Does not: read or write cache files itself (vk_cache.c), create shader
 * modules (vk_backend.c).
 */
#include <shaderc/shaderc.h>
#include <spirv-tools/libspirv.h>

#include "backend/vulkan/vk_cache.h"
#include "backend/vulkan/vk_spirv.h"
#include "backend/vulkan/vk_util.h"

#if __has_include(<glslang/build_info.h>)
#include <glslang/build_info.h>
#endif
#ifndef GLSLANG_VERSION_MAJOR
#define GLSLANG_VERSION_MAJOR 0
#define GLSLANG_VERSION_MINOR 0
#define GLSLANG_VERSION_PATCH 0
#define GLSLANG_VERSION_FLAVOR "unknown"
#endif
/* The shaderc release, from pkg-config at configure time (CMakeLists.txt). */
#ifndef MN_SHADERC_RELEASE
#define MN_SHADERC_RELEASE "unknown"
#endif

/* The options every kernel is compiled with; part of the identity below. */
#define TARGET_ENV shaderc_env_version_vulkan_1_1
#define OPT_LEVEL shaderc_optimization_level_performance

void vk_compiler_id(char *buf, size_t cap) {
    unsigned int ver = 0, rev = 0;
    shaderc_get_spv_version(&ver, &rev);
    snprintf(buf, cap,
             "shaderc %s; glslang %d.%d.%d%s; %s; spv 0x%x rev %u; target vulkan 0x%x; opt %d; glsl compute main",
             MN_SHADERC_RELEASE, GLSLANG_VERSION_MAJOR, GLSLANG_VERSION_MINOR, GLSLANG_VERSION_PATCH,
             GLSLANG_VERSION_FLAVOR, spvSoftwareVersionDetailsString(), ver, rev, (unsigned)TARGET_ENV,
             (int)OPT_LEVEL);
}

/* The SPIR-V pass a kernel asks for with "#define MN_SPIRV_PASS <name>"
 * (vk_codegen.h), applied to glslang's output before it is cached (the
 * name, with its version, is in the source and so in the cache key). */
static mn_status apply_pass(uint32_t **words, size_t *nwords, const char *source, const char *name, char *err,
                            size_t cap) {
    const char *p = strstr(source, "\n#define MN_SPIRV_PASS ");
    if (!p) return MN_OK;
    p += strlen("\n#define MN_SPIRV_PASS ");
    const size_t len = strcspn(p, " \n");
    bool bf16;
    if (len == strlen(VK_SPIRV_PASS_COOPMAT) && !strncmp(p, VK_SPIRV_PASS_COOPMAT, len)) bf16 = false;
    else if (len == strlen(VK_SPIRV_PASS_COOPMAT_BF16) && !strncmp(p, VK_SPIRV_PASS_COOPMAT_BF16, len)) bf16 = true;
    else {
        mn_fmt(err, cap, "vulkan: kernel %s asks for an unknown SPIR-V pass '%.*s'", name, (int)(len < 64 ? len : 64), p);
        return MN_E_INVALID;
    }
    uint32_t *out;
    size_t nout;
    char msg[400];
    mn_status st = vk_spirv_coopmat_khr(&out, &nout, *words, *nwords, bf16, msg, sizeof msg);
    if (st) {
        mn_fmt(err, cap, "vulkan: kernel %s: %s", name, msg);
        return st;
    }
    free(*words);
    *words = out, *nwords = nout;
    return MN_OK;
}

mn_status vk_compile(uint32_t **words, size_t *nwords, const char *source, const char *name, bool *cached,
                     char *err, size_t cap) {
    char cid[512], path[1200];
    vk_compiler_id(cid, sizeof cid);
    vk_cache_key key;
    vk_spirv_key(&key, cid, source);
    const char *nocache = getenv("MEGANEURA_NO_KERNEL_CACHE");
    bool use_cache = !(nocache && *nocache && strcmp(nocache, "0") != 0) && vk_spirv_path(path, sizeof path, &key);
    *cached = false;
    if (use_cache && vk_spirv_load(path, &key, words, nwords)) {
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
    shaderc_compile_options_set_target_env(opt, shaderc_target_env_vulkan, TARGET_ENV);
    shaderc_compile_options_set_optimization_level(opt, OPT_LEVEL);
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
            st = apply_pass(words, nwords, source, name, err, cap);
            if (st) {
                free(*words);
                *words = NULL;
            } else if (use_cache) {
                vk_spirv_store(path, &key, *words, *nwords);
            }
        }
    }
    shaderc_result_release(res);
    shaderc_compile_options_release(opt);
    shaderc_compiler_release(comp);
    return st;
}
