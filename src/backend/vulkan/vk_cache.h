/* vk_cache.h - the on-disk kernel caches of the Vulkan backend, under
 * $XDG_CACHE_HOME/meganeura (else ~/.cache/meganeura):
 *
 *   spirv/<key>.spv        one compiled kernel; key = SHA-256 of the cache
 *                          format, the compiler identity (vk_compiler_id:
 *                          shaderc, glslang and SPIRV-Tools releases, the
 *                          SPIR-V version, the compile options) and the full
 *                          GLSL source, which holds the kernel's #defines
 *   pipelines-<key>.bin    the driver's VkPipelineCache data; key = SHA-256
 *                          of the cache format, vendor and device id, driver
 *                          and API version, pipelineCacheUUID, device name
 *
 * Every file starts with a magic, a format version and its own key, and
 * carries the SHA-256 of its payload: a file of an older format, of another
 * key, truncated, garbled or with bytes appended is ignored (the kernel is
 * compiled again, the pipeline cache starts empty) and replaced on the next
 * write. Cached SPIR-V must also start with the SPIR-V magic and a sane
 * header; cached pipeline data must carry the Vulkan pipeline-cache header of
 * this very device. Writes go to "<path>.tmp.<pid>" and are renamed over the
 * file, so a reader sees a whole file or none.
 *
 * Does not: compile (vk_compile.c), evict old files, lock against other
 * processes (two writers of one key write the same bytes).
 */
#ifndef MN_VK_CACHE_H
#define MN_VK_CACHE_H

#include <vulkan/vulkan.h>

#include "core/common.h"
#include "core/sha256.h"

typedef struct vk_cache_key {
    unsigned char b[MN_SHA256_BYTES];
} vk_cache_key;

/* The cache folder (created if missing); NULL if none can be made. */
const char *vk_cache_dir(char *buf, size_t cap);

/* ---- SPIR-V ---- */
/* key of the binary that compiler `compiler_id` makes of `source`. */
void vk_spirv_key(vk_cache_key *key, const char *compiler_id, const char *source);
/* The file of key, creating spirv/ if needed; false (path = "") if there is
 * no cache folder. */
bool vk_spirv_path(char *path, size_t cap, const vk_cache_key *key);
/* Reads and checks the file: true with *words malloc'ed (the caller frees
 * it), or false for a missing or invalid file. */
bool vk_spirv_load(const char *path, const vk_cache_key *key, uint32_t **words, size_t *nwords);
/* Writes the file (best effort: a failure leaves no file behind). */
void vk_spirv_store(const char *path, const vk_cache_key *key, const uint32_t *words, size_t nwords);

/* ---- pipeline cache data ---- */
void vk_pipeline_key(vk_cache_key *key, const VkPhysicalDeviceProperties *props);
/* The file for the device; false (path = "") if there is no cache folder. */
bool vk_pipeline_path(char *path, size_t cap, const VkPhysicalDeviceProperties *props);
/* The driver data saved for this device: *data malloc'ed (the caller frees
 * it) and *n > 0, or *data = NULL and *n = 0 if none is valid. */
void vk_pipeline_load(const char *path, const VkPhysicalDeviceProperties *props, void **data, size_t *n);
/* Whether data starts with the Vulkan pipeline-cache header of this device
 * (vendor and device id, pipelineCacheUUID): driver data made for it. */
bool vk_pipeline_data_fits(const void *data, size_t n, const VkPhysicalDeviceProperties *props);
/* Saves the driver data (from vkGetPipelineCacheData) if its Vulkan header
 * is this device's (best effort). */
void vk_pipeline_store(const char *path, const VkPhysicalDeviceProperties *props, const void *data, size_t n);

#endif
