/* vk_device.c - Vulkan instance, device selection and capabilities,
 * validation-layer reporting, and the `meganeura devices` listing. */
#include <ctype.h>

#include "backend/vulkan/vk_util.h"

const char *vk_result_name(VkResult r) {
    switch (r) {
#define R(x) case x: return #x;
    R(VK_SUCCESS) R(VK_NOT_READY) R(VK_TIMEOUT) R(VK_INCOMPLETE)
    R(VK_ERROR_OUT_OF_HOST_MEMORY) R(VK_ERROR_OUT_OF_DEVICE_MEMORY) R(VK_ERROR_INITIALIZATION_FAILED)
    R(VK_ERROR_DEVICE_LOST) R(VK_ERROR_MEMORY_MAP_FAILED) R(VK_ERROR_LAYER_NOT_PRESENT)
    R(VK_ERROR_EXTENSION_NOT_PRESENT) R(VK_ERROR_FEATURE_NOT_PRESENT) R(VK_ERROR_INCOMPATIBLE_DRIVER)
    R(VK_ERROR_TOO_MANY_OBJECTS) R(VK_ERROR_FORMAT_NOT_SUPPORTED) R(VK_ERROR_FRAGMENTED_POOL)
    R(VK_ERROR_OUT_OF_POOL_MEMORY) R(VK_ERROR_INVALID_SHADER_NV) R(VK_ERROR_UNKNOWN)
#undef R
    default: return "VK_ERROR_(unnamed)";
    }
}

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    vk_ctx *c = user;
    if (sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        c->validation_messages++;
        mn_logf(sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? MN_LOG_ERROR : MN_LOG_WARN,
                "vulkan validation: %s", data->pMessage);
    }
    return VK_FALSE;
}

static bool has_layer(const char *name) {
    uint32_t n = 0;
    vkEnumerateInstanceLayerProperties(&n, NULL);
    VkLayerProperties *p = calloc(n + 1, sizeof *p);
    if (!p) return false;
    vkEnumerateInstanceLayerProperties(&n, p);
    bool found = false;
    for (uint32_t i = 0; i < n; i++) found |= strcmp(p[i].layerName, name) == 0;
    free(p);
    return found;
}

static bool has_device_ext(VkPhysicalDevice d, const char *name) {
    uint32_t n = 0;
    vkEnumerateDeviceExtensionProperties(d, NULL, &n, NULL);
    VkExtensionProperties *p = calloc(n + 1, sizeof *p);
    if (!p) return false;
    vkEnumerateDeviceExtensionProperties(d, NULL, &n, p);
    bool found = false;
    for (uint32_t i = 0; i < n; i++) found |= strcmp(p[i].extensionName, name) == 0;
    free(p);
    return found;
}

static bool has_layer_ext(const char *layer, const char *name) {
    uint32_t n = 0;
    vkEnumerateInstanceExtensionProperties(layer, &n, NULL);
    VkExtensionProperties *p = calloc(n + 1, sizeof *p);
    if (!p) return false;
    vkEnumerateInstanceExtensionProperties(layer, &n, p);
    bool found = false;
    for (uint32_t i = 0; i < n; i++) found |= strcmp(p[i].extensionName, name) == 0;
    free(p);
    return found;
}

/* validation: 0 off, 1 the Khronos layer, 2 the layer with synchronisation
 * validation (hazards between commands). */
static mn_status make_instance(vk_ctx *c, int validation, char *err, size_t cap) {
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "meganeura", 1, "meganeura", 1,
                             VK_API_VERSION_1_2};
    const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
    vf.enabledValidationFeatureCount = 1;
    vf.pEnabledValidationFeatures = &sync;
    if (validation) {
        if (!has_layer(layers[0])) {
            mn_fmt(err, cap, "vulkan: MEGANEURA_VALIDATE is set but VK_LAYER_KHRONOS_validation is not installed "
                             "(Debian: vulkan-validationlayers)");
            return MN_E_UNSUPPORTED;
        }
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = layers;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = exts;
    }
    if (validation > 1) {
        if (!has_layer_ext(layers[0], exts[1])) {
            mn_fmt(err, cap, "vulkan: MEGANEURA_VALIDATE=sync but the validation layer lacks %s", exts[1]);
            return MN_E_UNSUPPORTED;
        }
        ci.enabledExtensionCount = 2;
        ci.pNext = &vf;
    }
    VkResult r = vkCreateInstance(&ci, NULL, &c->instance);
    if (r != VK_SUCCESS) {
        mn_fmt(err, cap, "vulkan: vkCreateInstance: %s (is a Vulkan driver installed? lavapipe: mesa-vulkan-drivers)",
               vk_result_name(r));
        return MN_E_BACKEND;
    }
    c->validation = validation != 0;
    c->sync_validation = validation > 1;
    if (validation) {
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(c->instance, "vkCreateDebugUtilsMessengerEXT");
        VkDebugUtilsMessengerCreateInfoEXT mi = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
        mi.pfnUserCallback = on_message;
        mi.pUserData = c;
        if (create) create(c->instance, &mi, NULL, &c->messenger);
    }
    return MN_OK;
}

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return true;
    }
    return false;
}

static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

static const char *type_name(VkPhysicalDeviceType t) {
    static const char *n[] = {"discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"};
    return n[type_rank(t)];
}

/* The loop limiter of the driver: llvmpipe (lavapipe) stops every loop of an
 * invocation after 65535 iterations in all (gallivm's loop limiter). */
static uint32_t driver_loop_limit(VkPhysicalDevice d, const VkPhysicalDeviceProperties *p) {
    if (p->apiVersion < VK_API_VERSION_1_2) return 0;
    VkPhysicalDeviceDriverProperties dp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &dp};
    vkGetPhysicalDeviceProperties2(d, &p2);
    return dp.driverID == VK_DRIVER_ID_MESA_LLVMPIPE ? 65535u : 0u;
}

static void read_caps(VkPhysicalDevice d, const VkPhysicalDeviceProperties *p, vk_caps *caps) {
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(d, &p2);
    VkPhysicalDeviceDescriptorIndexingFeatures dix = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DESCRIPTOR_INDEXING_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    bool v12 = p->apiVersion >= VK_API_VERSION_1_2; /* descriptor indexing is core (no extension to enable) */
    f16.pNext = v12 ? &dix : NULL;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f16};
    vkGetPhysicalDeviceFeatures2(d, &f2);
    caps->dynamic_index = f2.features.shaderStorageBufferArrayDynamicIndexing != 0;
    caps->int64 = f2.features.shaderInt64 != 0;
    caps->nonuniform = v12 && dix.shaderStorageBufferArrayNonUniformIndexing != 0;
    caps->max_stage_buffers = p->limits.maxPerStageDescriptorStorageBuffers < p->limits.maxDescriptorSetStorageBuffers
                                  ? p->limits.maxPerStageDescriptorStorageBuffers
                                  : p->limits.maxDescriptorSetStorageBuffers;
    caps->subgroup_size = sg.subgroupSize;
    const VkSubgroupFeatureFlags sg_need =
        VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
    caps->subgroup_arith =
        (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (sg.supportedOperations & sg_need) == sg_need;
    caps->max_shared_bytes = p->limits.maxComputeSharedMemorySize;
    caps->max_invocations = p->limits.maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; i++) caps->max_groups[i] = p->limits.maxComputeWorkGroupCount[i];
    caps->fp16 = f16.shaderFloat16 != 0;
    caps->bf16 = has_device_ext(d, "VK_KHR_shader_bfloat16");
    caps->coopmat = has_device_ext(d, "VK_KHR_cooperative_matrix");
    caps->memory_budget = has_device_ext(d, "VK_EXT_memory_budget");
    /* memory limits: one binding, one allocation, one buffer */
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceMaintenance4Properties m4 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
    bool have_m4 = p->apiVersion >= VK_API_VERSION_1_3 || has_device_ext(d, "VK_KHR_maintenance4");
    m3.pNext = have_m4 ? &m4 : NULL;
    p2 = (VkPhysicalDeviceProperties2){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    vkGetPhysicalDeviceProperties2(d, &p2);
    uint64_t lim = p->limits.maxStorageBufferRange;
    if (m3.maxMemoryAllocationSize && m3.maxMemoryAllocationSize < lim) lim = m3.maxMemoryAllocationSize;
    if (have_m4 && m4.maxBufferSize && m4.maxBufferSize < lim) lim = m4.maxBufferSize;
    caps->device_binding = lim / 256 * 256;
    caps->max_binding = caps->device_binding;
    caps->offset_align = p->limits.minStorageBufferOffsetAlignment < 4 ? 4 : (uint32_t)p->limits.minStorageBufferOffsetAlignment;
    caps->index_max = VK_INDEX_MAX_DEFAULT;
    caps->push_off_max = UINT32_MAX;
    caps->loop_limit = driver_loop_limit(d, p);
}

/* A decimal count of environment variable `name` (digits only, no sign or
 * space): false if malformed. */
static bool env_count(const char *v, uint64_t *out) {
    uint64_t x = 0;
    bool ok = *v != 0;
    for (const char *c = v; *c && ok; c++) {
        ok = *c >= '0' && *c <= '9' && x <= (UINT64_MAX - 9) / 10;
        x = x * 10 + (uint64_t)(*c - '0');
    }
    *out = x;
    return ok;
}

/* MEGANEURA_VK_INDEX_MAX=<n> (decimal digits, 1 .. 2^31 - 1): lowers
 * caps.index_max, the element count above which a kernel is generated with
 * 64-bit indices (tests run the 64-bit kernels on small tensors with it). */
static mn_status apply_index_max(vk_caps *caps, char *err, size_t cap) {
    const char *v = getenv("MEGANEURA_VK_INDEX_MAX");
    if (!v || !*v) return MN_OK;
    uint64_t x = 0;
    if (!env_count(v, &x) || x < 1 || x > (uint64_t)VK_INDEX_MAX_DEFAULT) {
        mn_fmt(err, cap, "vulkan: MEGANEURA_VK_INDEX_MAX='%s': want an element count (decimal digits) from 1 to %lld",
               v, (long long)VK_INDEX_MAX_DEFAULT);
        return MN_E_INVALID;
    }
    if ((int64_t)x < caps->index_max) caps->index_max = (int64_t)x;
    return MN_OK;
}

/* MEGANEURA_VK_MAX_ALLOCATION=<bytes> (decimal digits, at least 64 = MP_ALIGN,
 * aligned down to 64): lowers caps.max_binding (tests make every tensor of
 * a small graph paged with it). */
static mn_status apply_max_allocation(vk_caps *caps, char *err, size_t cap) {
    const char *v = getenv("MEGANEURA_VK_MAX_ALLOCATION");
    if (!v || !*v) return MN_OK;
    uint64_t x = 0;
    bool ok = env_count(v, &x);
    if (!ok || x < 64) {
        mn_fmt(err, cap, "vulkan: MEGANEURA_VK_MAX_ALLOCATION='%s': want a byte count (decimal digits) of at least 64",
               v);
        return MN_E_INVALID;
    }
    x = x / 64 * 64;
    if (x < caps->max_binding) caps->max_binding = x;
    return MN_OK;
}

/* Orders devices: discrete first, ... CPU last; MEGANEURA_DEVICE overrides. */
static mn_status pick_device(vk_ctx *c, char *err, size_t cap) {
    uint32_t n = 0;
    VkResult r = vkEnumeratePhysicalDevices(c->instance, &n, NULL);
    if (r != VK_SUCCESS || n == 0) {
        mn_fmt(err, cap, "vulkan: no device found (vkEnumeratePhysicalDevices: %s)", vk_result_name(r));
        return MN_E_BACKEND;
    }
    VkPhysicalDevice *d = calloc(n, sizeof *d);
    if (!d) return MN_E_NOMEM;
    vkEnumeratePhysicalDevices(c->instance, &n, d);
    const char *want = getenv("MEGANEURA_DEVICE");
    int best = -1, best_rank = 99;
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(d[i], &p);
        if (want && *want) {
            char *end;
            long idx = strtol(want, &end, 10);
            bool match = *end == 0 ? idx == (long)i : contains_nocase(p.deviceName, want);
            if (match && best < 0) best = (int)i;
            continue;
        }
        if (type_rank(p.deviceType) < best_rank) best = (int)i, best_rank = type_rank(p.deviceType);
    }
    if (best < 0) {
        mn_fmt(err, cap, "vulkan: MEGANEURA_DEVICE='%s' matches none of the %u devices (see `meganeura devices`)", want, n);
        free(d);
        return MN_E_NOT_FOUND;
    }
    c->phys = d[best];
    free(d);
    vkGetPhysicalDeviceProperties(c->phys, &c->props);
    vkGetPhysicalDeviceMemoryProperties(c->phys, &c->mem);
    read_caps(c->phys, &c->props, &c->caps);
    return MN_OK;
}

mn_status vk_ctx_create(vk_ctx *c, char *err, size_t cap) {
    memset(c, 0, sizeof *c);
    /* MEGANEURA_VALIDATE: unset, empty or 0 = off; sync or 2 = with
     * synchronisation validation; anything else = the layer's defaults */
    const char *v = getenv("MEGANEURA_VALIDATE");
    int level = !v || !*v || strcmp(v, "0") == 0 ? 0 : strcmp(v, "sync") == 0 || strcmp(v, "2") == 0 ? 2 : 1;
    mn_status st = make_instance(c, level, err, cap);
    if (st) return st;
    if ((st = pick_device(c, err, cap))) return st;
    if ((st = apply_max_allocation(&c->caps, err, cap))) return st;
    if ((st = apply_index_max(&c->caps, err, cap))) return st;
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, NULL);
    VkQueueFamilyProperties *q = calloc(nq + 1, sizeof *q);
    if (!q) return MN_E_NOMEM;
    vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, q);
    int fam = -1;
    for (uint32_t i = 0; i < nq && fam < 0; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = (int)i;
    free(q);
    if (fam < 0) {
        mn_fmt(err, cap, "vulkan: device '%s' has no compute queue", c->props.deviceName);
        return MN_E_UNSUPPORTED;
    }
    c->queue_family = (uint32_t)fam;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qi.queueFamilyIndex = c->queue_family;
    qi.queueCount = 1;
    qi.pQueuePriorities = &prio;
    /* the descriptor-array indexing paged operands use, and 64-bit integers
     * (caps.int64: kernels with an operand above caps.index_max elements),
     * where present; nothing else is enabled */
    VkPhysicalDeviceDescriptorIndexingFeatures dix = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DESCRIPTOR_INDEXING_FEATURES};
    dix.shaderStorageBufferArrayNonUniformIndexing = c->caps.nonuniform;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    f2.features.shaderStorageBufferArrayDynamicIndexing = c->caps.dynamic_index;
    f2.features.shaderInt64 = c->caps.int64;
    f2.pNext = c->caps.nonuniform ? &dix : NULL;
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    di.pNext = &f2;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    VkResult r = vkCreateDevice(c->phys, &di, NULL, &c->device);
    if (r != VK_SUCCESS) {
        mn_fmt(err, cap, "vulkan: vkCreateDevice on '%s': %s", c->props.deviceName, vk_result_name(r));
        return MN_E_BACKEND;
    }
    vkGetDeviceQueue(c->device, c->queue_family, 0, &c->queue);
    return MN_OK;
}

void vk_ctx_destroy(vk_ctx *c) {
    if (c->device) vkDestroyDevice(c->device, NULL);
    if (c->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(c->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (destroy) destroy(c->instance, c->messenger, NULL);
    }
    if (c->instance) vkDestroyInstance(c->instance, NULL);
    memset(c, 0, sizeof *c);
}

mn_status vk_list_devices(FILE *f, char *err, size_t cap) {
    vk_ctx c;
    memset(&c, 0, sizeof c);
    mn_status st = make_instance(&c, 0, err, cap);
    if (st) return st;
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(c.instance, &n, NULL);
    VkPhysicalDevice *d = calloc(n + 1, sizeof *d);
    if (!d) {
        vk_ctx_destroy(&c);
        return MN_E_NOMEM;
    }
    vkEnumeratePhysicalDevices(c.instance, &n, d);
    for (uint32_t i = 0; i < n; i++) {
        VkPhysicalDeviceProperties p;
        vk_caps caps;
        vkGetPhysicalDeviceProperties(d[i], &p);
        read_caps(d[i], &p, &caps);
        fprintf(f, "%u: %s (%s), Vulkan %u.%u.%u\n", i, p.deviceName, type_name(p.deviceType),
                VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion), VK_API_VERSION_PATCH(p.apiVersion));
        fprintf(f, "   subgroup size %u, shared memory %u bytes, %u invocations per workgroup\n", caps.subgroup_size,
                caps.max_shared_bytes, caps.max_invocations);
        fprintf(f, "   max storage buffer range %u bytes, timestamp period %.3g ns\n", p.limits.maxStorageBufferRange,
                (double)p.limits.timestampPeriod);
        fprintf(f, "   fp16 %s, bf16 %s, cooperative matrix %s\n", caps.fp16 ? "yes" : "no", caps.bf16 ? "yes" : "no",
                caps.coopmat ? "yes" : "no");
        fprintf(f, "   largest binding/allocation %llu bytes (the arena chunk), memory budget %s\n",
                (unsigned long long)caps.device_binding, caps.memory_budget ? "yes" : "no");
        fprintf(f, "   64-bit indexing (tensors over %lld elements): %s\n", (long long)caps.index_max,
                caps.int64 ? "yes (shaderInt64)" : "no (no shaderInt64: such tensors are refused)");
        fprintf(f, "   paged tensors: %u storage buffers per kernel, descriptor arrays indexed %s\n",
                caps.max_stage_buffers,
                caps.nonuniform ? "non-uniformly" : caps.dynamic_index ? "uniformly only (page loops)" : "not at all");
        if (caps.loop_limit)
            fprintf(f, "   shader loop limit %u iterations per invocation (all loops together; kernels keep below)\n",
                    caps.loop_limit);
        else
            fprintf(f, "   shader loop limit none\n");
    }
    if (n == 0) fprintf(f, "no Vulkan devices\n");
    free(d);
    vk_ctx_destroy(&c);
    return MN_OK;
}
