/* vk_device.c - Vulkan instance, device selection and capabilities,
 * validation-layer reporting, and the `meganeura devices` listing. */
#include <ctype.h>

#include "backend/backend.h"
#include "backend/vulkan/vk_util.h"
#include "meganeura_vulkan.h"

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

/* ---- cooperative matrices ------------------------------------------------
 * VK_KHR_cooperative_matrix and VK_KHR_shader_bfloat16 are newer than the
 * Debian 12 Vulkan headers (1.3.239): their structures and numbers, from
 * the Vulkan specification, under our own names. */
enum {
    MN_VK_STYPE_COOPMAT_FEATURES_KHR = 1000506000,
    MN_VK_STYPE_COOPMAT_PROPERTIES_KHR = 1000506001,
    MN_VK_STYPE_BF16_FEATURES_KHR = 1000141000,
    MN_VK_COMPONENT_F16 = 0,
    MN_VK_COMPONENT_F32 = 1,
    MN_VK_COMPONENT_BF16 = 1000141000,
    MN_VK_SCOPE_SUBGROUP = 3
};
typedef struct mn_vk_coopmat_features_khr {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix, cooperativeMatrixRobustBufferAccess;
} mn_vk_coopmat_features_khr;
typedef struct mn_vk_coopmat_props_khr {
    VkStructureType sType;
    void *pNext;
    uint32_t MSize, NSize, KSize;
    int32_t AType, BType, CType, ResultType; /* VkComponentTypeKHR */
    VkBool32 saturatingAccumulation;
    int32_t scope; /* VkScopeKHR */
} mn_vk_coopmat_props_khr;
typedef struct mn_vk_bf16_features_khr {
    VkStructureType sType;
    void *pNext;
    VkBool32 shaderBFloat16Type, shaderBFloat16DotProduct, shaderBFloat16CooperativeMatrix;
} mn_vk_bf16_features_khr;
typedef VkResult(VKAPI_PTR *mn_pfn_coopmat_props_khr)(VkPhysicalDevice, uint32_t *, mn_vk_coopmat_props_khr *);

/* The device lists 16x16x16 fragments of component type ab with f32
 * accumulators at subgroup scope (KHR, then NV). */
static bool has_khr_shape(VkInstance inst, VkPhysicalDevice d, int32_t ab) {
    mn_pfn_coopmat_props_khr get =
        (mn_pfn_coopmat_props_khr)vkGetInstanceProcAddr(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    uint32_t n = 0;
    if (!get || get(d, &n, NULL) != VK_SUCCESS || n == 0 || n > 4096) return false;
    mn_vk_coopmat_props_khr *p = calloc(n, sizeof *p);
    if (!p) return false;
    for (uint32_t i = 0; i < n; i++) p[i].sType = (VkStructureType)MN_VK_STYPE_COOPMAT_PROPERTIES_KHR;
    bool found = false;
    if (get(d, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            found |= p[i].MSize == 16 && p[i].NSize == 16 && p[i].KSize == 16 && p[i].AType == ab &&
                     p[i].BType == ab && p[i].CType == MN_VK_COMPONENT_F32 && p[i].ResultType == MN_VK_COMPONENT_F32 &&
                     p[i].scope == MN_VK_SCOPE_SUBGROUP;
    free(p);
    return found;
}
static bool has_nv_shape(VkInstance inst, VkPhysicalDevice d) {
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV get = (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)
        vkGetInstanceProcAddr(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
    uint32_t n = 0;
    if (!get || get(d, &n, NULL) != VK_SUCCESS || n == 0 || n > 4096) return false;
    VkCooperativeMatrixPropertiesNV *p = calloc(n, sizeof *p);
    if (!p) return false;
    for (uint32_t i = 0; i < n; i++) p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
    bool found = false;
    if (get(d, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++)
            found |= p[i].MSize == 16 && p[i].NSize == 16 && p[i].KSize == 16 &&
                     p[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV && p[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
                     p[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV && p[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
                     p[i].scope == VK_SCOPE_SUBGROUP_NV;
    free(p);
    return found;
}

/* caps.coopmat_f16 / _bf16 / _nv_f16: what the fast contract's GEMM needs
 * (vk_gen_coopmat.c): the extension, its feature, the 16x16x16 shape, the
 * Vulkan memory model (glslang writes NV cooperative matrices under it),
 * full subgroups of compute (gl_SubgroupID), f16 arithmetic types or the
 * bf16 cooperative-matrix type. Vulkan 1.2 devices only (the feature
 * structures are core there). MEGANEURA_COOPMAT picks among them later. */
static void read_coopmat_caps(VkInstance inst, VkPhysicalDevice d, const VkPhysicalDeviceProperties *p, bool fp16,
                              vk_caps *caps) {
    caps->coopmat_f16 = caps->coopmat_bf16 = caps->coopmat_nv_f16 = false;
    if (!inst || p->apiVersion < VK_API_VERSION_1_2) return;
    const bool khr = has_device_ext(d, "VK_KHR_cooperative_matrix"), nv = has_device_ext(d, "VK_NV_cooperative_matrix");
    const bool bfx = has_device_ext(d, "VK_KHR_shader_bfloat16");
    if (!khr && !nv) return;
    mn_vk_coopmat_features_khr fk = {.sType = (VkStructureType)MN_VK_STYPE_COOPMAT_FEATURES_KHR};
    mn_vk_bf16_features_khr fb = {.sType = (VkStructureType)MN_VK_STYPE_BF16_FEATURES_KHR};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV fn = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    void *chain = &vmm;
    if (khr) fk.pNext = chain, chain = &fk;
    if (bfx) fb.pNext = chain, chain = &fb;
    if (nv) fn.pNext = chain, chain = &fn;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = chain};
    vkGetPhysicalDeviceFeatures2(d, &f2);
    if (!vmm.vulkanMemoryModel || !caps->subgroup_size) return;
    caps->coopmat_f16 = khr && fk.cooperativeMatrix && fp16 && has_khr_shape(inst, d, MN_VK_COMPONENT_F16);
    caps->coopmat_bf16 = khr && fk.cooperativeMatrix && bfx && fb.shaderBFloat16Type &&
                         fb.shaderBFloat16CooperativeMatrix && has_khr_shape(inst, d, MN_VK_COMPONENT_BF16);
    caps->coopmat_nv_f16 = nv && fn.cooperativeMatrix && fp16 && has_nv_shape(inst, d);
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

static void read_caps(VkInstance inst, VkPhysicalDevice d, const VkPhysicalDeviceProperties *p, vk_caps *caps) {
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(d, &p2);
    VkPhysicalDeviceDescriptorIndexingFeatures dix = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DESCRIPTOR_INDEXING_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    bool v12 = p->apiVersion >= VK_API_VERSION_1_2; /* descriptor indexing is core (no extension to enable) */
    f16.pNext = &s16; /* 16-bit storage: core in 1.1 */
    s16.pNext = v12 ? &dix : NULL;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f16};
    vkGetPhysicalDeviceFeatures2(d, &f2);
    caps->dynamic_index = f2.features.shaderStorageBufferArrayDynamicIndexing != 0;
    caps->int64 = f2.features.shaderInt64 != 0;
    caps->store16 = s16.storageBuffer16BitAccess != 0;
    caps->nonuniform = v12 && dix.shaderStorageBufferArrayNonUniformIndexing != 0;
    caps->max_stage_buffers = p->limits.maxPerStageDescriptorStorageBuffers < p->limits.maxDescriptorSetStorageBuffers
                                  ? p->limits.maxPerStageDescriptorStorageBuffers
                                  : p->limits.maxDescriptorSetStorageBuffers;
    caps->subgroup_size = sg.subgroupSize;
    caps->cpu_device = p->deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
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
    read_coopmat_caps(inst, d, p, caps->fp16, caps);
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
    backend_device_desc *desc = calloc(n, sizeof *desc);
    VkPhysicalDeviceProperties *props = calloc(n, sizeof *props);
    if (!desc || !props) {
        free(d), free(desc), free(props);
        return MN_E_NOMEM;
    }
    for (uint32_t i = 0; i < n; i++) {
        vkGetPhysicalDeviceProperties(d[i], &props[i]);
        desc[i] = (backend_device_desc){props[i].deviceName, type_rank(props[i].deviceType)};
    }
    char why[256];
    int best = backend_pick_device(desc, (int)n, want, backend_local_rank(), why, sizeof why);
    free(desc);
    free(props);
    if (best < 0) {
        mn_fmt(err, cap, "vulkan: %s", why);
        free(d);
        return MN_E_NOT_FOUND;
    }
    c->phys = d[best];
    free(d);
    vkGetPhysicalDeviceProperties(c->phys, &c->props);
    vkGetPhysicalDeviceMemoryProperties(c->phys, &c->mem);
    read_caps(c->instance, c->phys, &c->props, &c->caps);
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
    /* 16-bit stores of fused casts (caps.store16) */
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    if (c->caps.store16) {
        s16.storageBuffer16BitAccess = VK_TRUE;
        s16.pNext = f2.pNext, f2.pNext = &s16;
    }
    /* the fast contract's cooperative matrices (read_coopmat_caps): their
     * extensions and features, the Vulkan memory model, f16 types */
    const vk_caps *k = &c->caps;
    const bool cm = k->coopmat_f16 || k->coopmat_bf16 || k->coopmat_nv_f16;
    VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    VkPhysicalDeviceShaderFloat16Int8Features f16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    mn_vk_coopmat_features_khr fk = {.sType = (VkStructureType)MN_VK_STYPE_COOPMAT_FEATURES_KHR};
    mn_vk_bf16_features_khr fb = {.sType = (VkStructureType)MN_VK_STYPE_BF16_FEATURES_KHR};
    VkPhysicalDeviceCooperativeMatrixFeaturesNV fn = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    const char *exts[3];
    uint32_t nexts = 0;
    if (cm) {
        vmm.vulkanMemoryModel = VK_TRUE;
        vmm.pNext = f2.pNext, f2.pNext = &vmm;
        if (k->coopmat_f16 || k->coopmat_nv_f16) {
            f16.shaderFloat16 = VK_TRUE;
            f16.pNext = f2.pNext, f2.pNext = &f16;
        }
        if (k->coopmat_f16 || k->coopmat_bf16) {
            fk.cooperativeMatrix = VK_TRUE;
            fk.pNext = f2.pNext, f2.pNext = &fk;
            exts[nexts++] = "VK_KHR_cooperative_matrix";
        }
        if (k->coopmat_bf16) {
            fb.shaderBFloat16Type = fb.shaderBFloat16CooperativeMatrix = VK_TRUE;
            fb.pNext = f2.pNext, f2.pNext = &fb;
            exts[nexts++] = "VK_KHR_shader_bfloat16";
        }
        if (k->coopmat_nv_f16) {
            fn.cooperativeMatrix = VK_TRUE;
            fn.pNext = f2.pNext, f2.pNext = &fn;
            exts[nexts++] = "VK_NV_cooperative_matrix";
        }
    }
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    di.pNext = &f2;
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    di.enabledExtensionCount = nexts;
    di.ppEnabledExtensionNames = nexts ? exts : NULL;
    VkResult r = vkCreateDevice(c->phys, &di, NULL, &c->device);
    if (r != VK_SUCCESS) {
        mn_fmt(err, cap, "vulkan: vkCreateDevice on '%s': %s", c->props.deviceName, vk_result_name(r));
        return MN_E_BACKEND;
    }
    vkGetDeviceQueue(c->device, c->queue_family, 0, &c->queue);
    return MN_OK;
}

/* Features the host enabled, from the VkPhysicalDeviceFeatures2 chain it gave
 * vkCreateDevice (only the structures the backend reads). */
typedef struct host_features {
    bool dynamic_index, nonuniform, timeline, int64, store16;
    bool memory_model, f16, coopmat_khr, coopmat_nv, bf16; /* the fast contract's GEMM */
} host_features;

static host_features read_host_features(const VkPhysicalDeviceFeatures2 *f2) {
    host_features h = {0};
    if (!f2) return h;
    h.dynamic_index = f2->features.shaderStorageBufferArrayDynamicIndexing != 0;
    h.int64 = f2->features.shaderInt64 != 0;
    for (const VkBaseInStructure *p = f2->pNext; p; p = p->pNext) {
        switch (p->sType) {
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES: {
            const VkPhysicalDeviceVulkan12Features *v = (const void *)p;
            h.nonuniform |= v->shaderStorageBufferArrayNonUniformIndexing != 0;
            h.timeline |= v->timelineSemaphore != 0;
            h.memory_model |= v->vulkanMemoryModel != 0;
            h.f16 |= v->shaderFloat16 != 0;
            break;
        }
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES:
            h.store16 |= ((const VkPhysicalDeviceVulkan11Features *)(const void *)p)->storageBuffer16BitAccess != 0;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES:
            h.store16 |= ((const VkPhysicalDevice16BitStorageFeatures *)(const void *)p)->storageBuffer16BitAccess != 0;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES:
            h.memory_model |= ((const VkPhysicalDeviceVulkanMemoryModelFeatures *)(const void *)p)->vulkanMemoryModel != 0;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES:
            h.f16 |= ((const VkPhysicalDeviceShaderFloat16Int8Features *)(const void *)p)->shaderFloat16 != 0;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV:
            h.coopmat_nv |= ((const VkPhysicalDeviceCooperativeMatrixFeaturesNV *)(const void *)p)->cooperativeMatrix != 0;
            break;
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DESCRIPTOR_INDEXING_FEATURES: {
            const VkPhysicalDeviceDescriptorIndexingFeatures *v = (const void *)p;
            h.nonuniform |= v->shaderStorageBufferArrayNonUniformIndexing != 0;
            break;
        }
        case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES: {
            const VkPhysicalDeviceTimelineSemaphoreFeatures *v = (const void *)p;
            h.timeline |= v->timelineSemaphore != 0;
            break;
        }
        default:
            if ((uint32_t)p->sType == (uint32_t)MN_VK_STYPE_COOPMAT_FEATURES_KHR)
                h.coopmat_khr |= ((const mn_vk_coopmat_features_khr *)(const void *)p)->cooperativeMatrix != 0;
            else if ((uint32_t)p->sType == (uint32_t)MN_VK_STYPE_BF16_FEATURES_KHR)
                h.bf16 |= ((const mn_vk_bf16_features_khr *)(const void *)p)->shaderBFloat16CooperativeMatrix != 0;
            break;
        }
    }
    return h;
}

mn_status vk_ctx_wrap(vk_ctx *c, const void *descp, char *err, size_t cap) {
    const mn_vulkan_device_desc *d = descp;
    memset(c, 0, sizeof *c);
    c->external = true;
    if (!d || !d->instance || !d->physical_device || !d->device || !d->queue) {
        mn_fmt(err, cap, "vulkan: the host device needs instance, physical_device, device and queue (%s is missing)",
               !d ? "the description" : !d->instance ? "instance" : !d->physical_device ? "physical_device"
               : !d->device ? "device" : "queue");
        return MN_E_INVALID;
    }
    c->instance = d->instance, c->phys = d->physical_device, c->device = d->device, c->queue = d->queue;
    c->queue_family = d->queue_family;
    c->alloc = d->allocator;
    c->host_pcache = d->pipeline_cache;
    vkGetPhysicalDeviceProperties(c->phys, &c->props);
    vkGetPhysicalDeviceMemoryProperties(c->phys, &c->mem);
    if (c->props.apiVersion < VK_API_VERSION_1_1) {
        mn_fmt(err, cap, "vulkan: the host device '%s' is Vulkan %u.%u; the backend needs 1.1 (properties2, "
               "dedicated allocations, maintenance3)", c->props.deviceName, VK_API_VERSION_MAJOR(c->props.apiVersion),
               VK_API_VERSION_MINOR(c->props.apiVersion));
        return MN_E_UNSUPPORTED;
    }
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, NULL);
    VkQueueFamilyProperties *q = calloc(nq + 1, sizeof *q);
    if (!q) return MN_E_NOMEM;
    vkGetPhysicalDeviceQueueFamilyProperties(c->phys, &nq, q);
    bool compute = d->queue_family < nq && (q[d->queue_family].queueFlags & VK_QUEUE_COMPUTE_BIT);
    free(q);
    if (!compute) {
        mn_fmt(err, cap, "vulkan: queue family %u of '%s' %s", d->queue_family, c->props.deviceName,
               d->queue_family < nq ? "has no VK_QUEUE_COMPUTE_BIT" : "does not exist");
        return MN_E_UNSUPPORTED;
    }
    read_caps(c->instance, c->phys, &c->props, &c->caps);
    mn_status st = apply_max_allocation(&c->caps, err, cap);
    if (st) return st;
    /* what the kernels may use is what the host enabled, not what the
     * hardware has */
    host_features h = read_host_features(d->enabled_features);
    c->caps.dynamic_index = c->caps.dynamic_index && h.dynamic_index;
    c->caps.nonuniform = c->caps.nonuniform && h.nonuniform;
    c->caps.int64 = c->caps.int64 && h.int64; /* 64-bit index kernels (tensors above 2^31 elements) */
    c->caps.store16 = c->caps.store16 && h.store16; /* fused casts' 16-bit stores */
    /* cooperative matrices only as far as the host enabled them (with the
     * memory model and, for f16, shaderFloat16) */
    c->caps.coopmat_f16 = c->caps.coopmat_f16 && h.coopmat_khr && h.memory_model && h.f16;
    c->caps.coopmat_bf16 = c->caps.coopmat_bf16 && h.coopmat_khr && h.memory_model && h.bf16;
    c->caps.coopmat_nv_f16 = c->caps.coopmat_nv_f16 && h.coopmat_nv && h.memory_model && h.f16;
    c->timeline = h.timeline && c->props.apiVersion >= VK_API_VERSION_1_2;
    return MN_OK;
}

void vk_ctx_destroy(vk_ctx *c) {
    if (c->external) { /* the host's: nothing here is ours */
        memset(c, 0, sizeof *c);
        return;
    }
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
        read_caps(c.instance, d[i], &p, &caps);
        fprintf(f, "%u: %s (%s), Vulkan %u.%u.%u\n", i, p.deviceName, type_name(p.deviceType),
                VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion), VK_API_VERSION_PATCH(p.apiVersion));
        fprintf(f, "   subgroup size %u, shared memory %u bytes, %u invocations per workgroup\n", caps.subgroup_size,
                caps.max_shared_bytes, caps.max_invocations);
        fprintf(f, "   max storage buffer range %u bytes, timestamp period %.3g ns\n", p.limits.maxStorageBufferRange,
                (double)p.limits.timestampPeriod);
        fprintf(f, "   fp16 %s, bf16 %s, cooperative matrix %s\n", caps.fp16 ? "yes" : "no", caps.bf16 ? "yes" : "no",
                caps.coopmat ? "yes" : "no");
        fprintf(f, "   fast-contract GEMM on cooperative matrices: f16 %s, bf16 %s\n",
                caps.coopmat_f16 ? "KHR" : caps.coopmat_nv_f16 ? "NV" : "no", caps.coopmat_bf16 ? "KHR" : "no");
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
