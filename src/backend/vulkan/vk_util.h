/* vk_util.h - shared pieces of the Vulkan backend: VkResult names, the
 * instance/device with its capabilities, and the SPIR-V compiler with its
 * on-disk cache.
 *
 * Does not: generate GLSL (vk_codegen), record or run work (vk_backend.c).
 */
#ifndef MN_VK_UTIL_H
#define MN_VK_UTIL_H

#include <vulkan/vulkan.h>

#include "backend/vulkan/vk_codegen.h"
#include "core/common.h"

const char *vk_result_name(VkResult r);

typedef struct vk_ctx {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    vk_caps caps;
    bool validation;
    bool sync_validation;    /* MEGANEURA_VALIDATE=sync: hazards between commands too */
    /* a host application's instance and device (mn_device_from_vulkan,
     * vk_ctx_wrap): vk_ctx_destroy leaves them alone */
    bool external;
    const VkAllocationCallbacks *alloc; /* the host's callbacks for every object we create, or NULL */
    VkPipelineCache host_pcache;        /* the host's pipeline cache, used instead of ours */
    bool timeline;                      /* timeline semaphores may be waited and signalled */
    int validation_messages; /* errors and warnings reported by the layers */
} vk_ctx;

/* Creates the instance (with the Khronos validation layer when
 * MEGANEURA_VALIDATE=1, and its synchronisation validation when
 * MEGANEURA_VALIDATE=sync or 2), picks a device (discrete, then integrated, then
 * virtual, then CPU; MEGANEURA_DEVICE = index or name substring), creates the
 * logical device and its compute queue. */
mn_status vk_ctx_create(vk_ctx *c, char *err, size_t cap);
/* The same over a host's handles (desc: a const mn_vulkan_device_desc *, from
 * include/meganeura_vulkan.h): checks the API version, the queue family and
 * the features the backend reads, and limits caps to what the host enabled. */
mn_status vk_ctx_wrap(vk_ctx *c, const void *desc, char *err, size_t cap);
void vk_ctx_destroy(vk_ctx *c);
/* Lists every device with its limits and the extensions the project uses. */
mn_status vk_list_devices(FILE *f, char *err, size_t cap);

/* GLSL -> SPIR-V through libshaderc, cached on disk under
 * $XDG_CACHE_HOME/meganeura/spirv (vk_cache.h: key = SHA-256 of the source
 * and vk_compiler_id). *words is malloc'ed. *cached says whether the cache
 * answered. MEGANEURA_NO_KERNEL_CACHE=1 bypasses the cache. */
mn_status vk_compile(uint32_t **words, size_t *nwords, const char *source, const char *name, bool *cached,
                     char *err, size_t cap);
/* The compiler's identity: the shaderc, glslang and SPIRV-Tools releases,
 * the SPIR-V version and the compile options (one line, cut at cap). */
void vk_compiler_id(char *buf, size_t cap);

#endif
