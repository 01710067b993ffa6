/* test_vk_host.c - sessions on a host application's Vulkan device
 * (include/meganeura_vulkan.h), as an engine would use them: the test creates
 * its own instance and device (with the validation layer and synchronisation
 * validation when MEGANEURA_VALIDATE is set, as under ctest), hands them to
 * mn_device_from_vulkan, binds inputs and outputs to its own buffers and
 * orders runs with its own binary and timeline semaphores.
 *
 * Checks: results equal the CPU backend's; every object the library made
 * went through the host's allocation callbacks and was freed by
 * mn_device_close / mn_session_destroy, while the host's device, queue and
 * pipeline cache still work afterwards; errors name what is wrong (missing
 * handles, a queue family without compute, misaligned or short buffers,
 * set_input / output on bound tensors, timeline values without the feature).
 * examples/host_app.c (its own ctest) is the end-to-end version.
 */
#include <meganeura_vulkan.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static int g_messages;
static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *d, void *user) {
    if (sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        g_messages++;
        fprintf(stderr, "vulkan validation: %s\n", d->pMessage);
    }
    return VK_FALSE;
}

/* The host's allocator: counts what is live (the library must use it). Each
 * block keeps its size and the malloc'ed pointer just below the aligned
 * address it returns. */
static long g_live, g_total;
typedef struct blk {
    void *raw;
    size_t size;
} blk;
static void *VKAPI_CALL h_alloc(void *u, size_t size, size_t align, VkSystemAllocationScope sc) {
    if (align < sizeof(blk)) align = sizeof(blk);
    unsigned char *raw = malloc(size + align + sizeof(blk));
    if (!raw) return NULL;
    uintptr_t at = ((uintptr_t)raw + sizeof(blk) + align - 1) / align * align;
    blk *b = (blk *)at - 1;
    b->raw = raw, b->size = size;
    g_live++, g_total++;
    return (void *)at;
}
static void VKAPI_CALL h_free(void *u, void *p) {
    if (!p) return;
    g_live--;
    free(((blk *)p - 1)->raw);
}
static void *VKAPI_CALL h_realloc(void *u, void *old, size_t size, size_t align, VkSystemAllocationScope sc) {
    if (!old) return h_alloc(u, size, align, sc);
    if (!size) {
        h_free(u, old);
        return NULL;
    }
    void *p = h_alloc(u, size, align, sc);
    size_t keep = ((blk *)old - 1)->size;
    if (p) {
        memcpy(p, old, keep < size ? keep : size);
        h_free(u, old);
    }
    return p;
}

typedef struct host {
    VkInstance inst;
    VkDebugUtilsMessengerEXT msg;
    VkPhysicalDevice phys;
    VkPhysicalDeviceMemoryProperties mem;
    VkDevice dev;
    uint32_t family;
    VkQueue queue;
    VkPhysicalDeviceFeatures2 f2;
    VkPhysicalDeviceVulkan12Features v12;
    VkCommandPool pool;
} host;

static bool host_create(host *h) {
    memset(h, 0, sizeof *h);
    const char *v = getenv("MEGANEURA_VALIDATE");
    bool validate = v && *v && strcmp(v, "0") != 0;
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "test_vk_host", 1, "t", 1, VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    const char *layer = "VK_LAYER_KHRONOS_validation";
    const char *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                  .enabledValidationFeatureCount = 1, .pEnabledValidationFeatures = &sync};
    if (validate) {
        ci.enabledLayerCount = 1, ci.ppEnabledLayerNames = &layer;
        ci.enabledExtensionCount = 2, ci.ppEnabledExtensionNames = exts, ci.pNext = &vf;
    }
    if (vkCreateInstance(&ci, NULL, &h->inst) != VK_SUCCESS) return false;
    if (validate) {
        PFN_vkCreateDebugUtilsMessengerEXT mk =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(h->inst, "vkCreateDebugUtilsMessengerEXT");
        VkDebugUtilsMessengerCreateInfoEXT mi = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
        mi.pfnUserCallback = on_message;
        if (mk) mk(h->inst, &mi, NULL, &h->msg);
    }
    uint32_t n = 1;
    VkResult r = vkEnumeratePhysicalDevices(h->inst, &n, &h->phys);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || !n) return false;
    vkGetPhysicalDeviceMemoryProperties(h->phys, &h->mem);
    VkQueueFamilyProperties q[8];
    uint32_t nq = 8;
    vkGetPhysicalDeviceQueueFamilyProperties(h->phys, &nq, q);
    h->family = UINT32_MAX;
    for (uint32_t i = 0; i < nq && h->family == UINT32_MAX; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) h->family = i;
    h->v12 = (VkPhysicalDeviceVulkan12Features){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                                .timelineSemaphore = VK_TRUE};
    h->f2 = (VkPhysicalDeviceFeatures2){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &h->v12};
    float prio = 1;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = h->family,
                                  .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &h->f2,
                             .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi};
    if (h->family == UINT32_MAX || vkCreateDevice(h->phys, &di, NULL, &h->dev) != VK_SUCCESS) return false;
    vkGetDeviceQueue(h->dev, h->family, 0, &h->queue);
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = h->family,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT};
    return vkCreateCommandPool(h->dev, &pi, NULL, &h->pool) == VK_SUCCESS;
}

static void host_destroy(host *h) {
    if (h->pool) vkDestroyCommandPool(h->dev, h->pool, NULL);
    if (h->dev) vkDestroyDevice(h->dev, NULL);
    if (h->msg) {
        PFN_vkDestroyDebugUtilsMessengerEXT rm =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(h->inst, "vkDestroyDebugUtilsMessengerEXT");
        if (rm) rm(h->inst, h->msg, NULL);
    }
    if (h->inst) vkDestroyInstance(h->inst, NULL);
}

typedef struct hbuf {
    VkBuffer buf;
    VkDeviceMemory mem;
    float *map;
} hbuf;

/* A host-visible storage + transfer buffer (the test reads and writes it directly). */
static hbuf hbuf_make(const host *h, VkDeviceSize size) {
    hbuf b = {0};
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_SRC_BIT};
    vkCreateBuffer(h->dev, &bi, NULL, &b.buf);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(h->dev, b.buf, &req);
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    uint32_t t = 0;
    while (t < h->mem.memoryTypeCount &&
           !((req.memoryTypeBits >> t & 1u) && (h->mem.memoryTypes[t].propertyFlags & want) == want))
        t++;
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                               .memoryTypeIndex = t};
    vkAllocateMemory(h->dev, &ai, NULL, &b.mem);
    vkBindBufferMemory(h->dev, b.buf, b.mem, 0);
    vkMapMemory(h->dev, b.mem, 0, VK_WHOLE_SIZE, 0, (void **)&b.map);
    return b;
}

static void hbuf_free(const host *h, hbuf *b) {
    vkDestroyBuffer(h->dev, b->buf, NULL);
    vkFreeMemory(h->dev, b->mem, NULL);
}

/* y = tanh(x @ w + b): x [4, 33], w [33, 7] */
static mn_graph *model(void) {
    mn_graph *g;
    mn_graph_create(&g);
    mn_tensor x, w, b, h, hb, y;
    mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){4, 33});
    mn_graph_param(g, &w, "w", 2, (int64_t[]){33, 7}, (mn_init){MN_INIT_NORMAL, 0, 0.5f});
    mn_graph_param(g, &b, "b", 1, (int64_t[]){7}, (mn_init){MN_INIT_UNIFORM, -0.5f, 0.5f});
    mn_matmul(g, &h, x, w);
    mn_add(g, &hb, h, b);
    mn_tanh(g, &y, hb);
    mn_graph_output(g, y, "y");
    return g;
}

static mn_session *open_session(mn_graph *g, mn_backend_kind be, mn_device *d) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = d;
    mn_session *s = NULL;
    CHECK_OK(mn_session_create(&s, g, &o), s ? mn_session_error(s) : "");
    return s;
}

/* A host pass before and after the model: copies into the bound input
 * (transfer write), and out of the bound output (transfer read), each its
 * own submission ordered by the semaphores. */
static VkCommandBuffer copy_cb(const host *h, VkBuffer src, VkBuffer dst, VkDeviceSize bytes) {
    VkCommandBuffer cb;
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = h->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    vkAllocateCommandBuffers(h->dev, &ai, &cb);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(cb, &bi);
    VkBufferCopy c = {0, 0, bytes};
    vkCmdCopyBuffer(cb, src, dst, 1, &c);
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    vkEndCommandBuffer(cb);
    return cb;
}

static void submit(const host *h, VkCommandBuffer cb, VkSemaphore wait, const uint64_t *wv, VkSemaphore sig,
                   const uint64_t *sv, VkFence f) {
    VkPipelineStageFlags st = VK_PIPELINE_STAGE_TRANSFER_BIT;
    VkTimelineSemaphoreSubmitInfo ti = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .waitSemaphoreValueCount = wait && wv ? 1 : 0, .pWaitSemaphoreValues = wv,
                                        .signalSemaphoreValueCount = sig && sv ? 1 : 0, .pSignalSemaphoreValues = sv};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = (wv || sv) ? &ti : NULL,
                       .waitSemaphoreCount = wait ? 1 : 0, .pWaitSemaphores = &wait, .pWaitDstStageMask = &st,
                       .commandBufferCount = 1, .pCommandBuffers = &cb, .signalSemaphoreCount = sig ? 1 : 0,
                       .pSignalSemaphores = &sig};
    CHECK(vkQueueSubmit(h->queue, 1, &si, f) == VK_SUCCESS);
}

int main(void) {
    mn_device *probe = th_require_vulkan(); /* skip (or fail under make test) without a device */
    if (!probe) return th_finish("test_vk_host");
    mn_device_close(probe);
    host h;
    if (!host_create(&h)) {
        th_fail(__FILE__, __LINE__, "could not create the host's own Vulkan device");
        host_destroy(&h);
        return th_finish("test_vk_host");
    }
    VkAllocationCallbacks cbk = {NULL, h_alloc, h_realloc, h_free, NULL, NULL};
    VkPipelineCacheCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    VkPipelineCache hcache;
    CHECK(vkCreatePipelineCache(h.dev, &pci, NULL, &hcache) == VK_SUCCESS);
    mn_vulkan_device_desc desc = {h.inst, h.phys, h.dev, h.family, h.queue, &h.f2, &cbk, hcache};

    /* ---- what is missing is named --------------------------------------- */
    mn_device *bad = NULL;
    mn_vulkan_device_desc d2 = desc;
    d2.device = VK_NULL_HANDLE;
    CHECK(mn_device_from_vulkan(&bad, &d2) == MN_E_INVALID);
    CHECK_MSG(strstr(mn_device_error(bad), "device"), "%s", mn_device_error(bad));
    mn_device_close(bad);
    d2 = desc;
    d2.queue_family = 99;
    CHECK(mn_device_from_vulkan(&bad, &d2) == MN_E_UNSUPPORTED);
    CHECK_MSG(strstr(mn_device_error(bad), "queue family 99"), "%s", mn_device_error(bad));
    mn_device_close(bad);

    /* ---- a session on the host's device, inputs and outputs in its buffers */
    mn_device *dev = NULL;
    CHECK_OK(mn_device_from_vulkan(&dev, &desc), mn_device_error(dev));
    mn_graph *g = model();
    mn_session *gs = open_session(g, MN_BACKEND_VULKAN, dev), *cs = open_session(g, MN_BACKEND_CPU, NULL);
    CHECK(g_live > 0); /* the library allocated through the host's callbacks */
    float x[4 * 33], want[4 * 7], got[4 * 7];
    for (int i = 0; i < 4 * 33; i++) x[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
    CHECK_OK(mn_session_set_input(cs, "x", x, sizeof x), mn_session_error(cs));
    CHECK_OK(mn_session_run(cs), mn_session_error(cs));
    CHECK_OK(mn_session_output(cs, "y", want, sizeof want), mn_session_error(cs));
    /* the plain path first: the session's own storage */
    CHECK_OK(mn_session_set_input(gs, "x", x, sizeof x), mn_session_error(gs));
    CHECK_OK(mn_session_run_vulkan(gs, NULL), mn_session_error(gs));
    CHECK_OK(mn_session_output(gs, "y", got, sizeof got), mn_session_error(gs));
    CHECK_MSG(th_nmse(got, want, 28) < 1e-11, "plain run: nmse %g", th_nmse(got, want, 28));

    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(h.phys, &props);
    const VkDeviceSize align = props.limits.minStorageBufferOffsetAlignment;
    hbuf src = hbuf_make(&h, 4096), xin = hbuf_make(&h, 4096), yout = hbuf_make(&h, 4096), dst = hbuf_make(&h, 4096);
    mn_vulkan_buffer bx = {xin.buf, align, sizeof x}, by = {yout.buf, 0, sizeof got};
    /* misaligned, too short, unknown names */
    mn_vulkan_buffer mis = {xin.buf, align > 4 ? align / 2 : 2, sizeof x}, shortb = {xin.buf, 0, sizeof x - 4};
    if (align > 4) CHECK(mn_session_bind_vulkan_buffer(gs, "x", &mis) == MN_E_INVALID);
    CHECK(mn_session_bind_vulkan_buffer(gs, "x", &shortb) == MN_E_INVALID);
    CHECK_MSG(strstr(mn_session_error(gs), "needs"), "%s", mn_session_error(gs));
    CHECK(mn_session_bind_vulkan_buffer(gs, "w", &bx) == MN_E_NOT_FOUND); /* a parameter */
    CHECK(mn_session_bind_vulkan_buffer(gs, "nope", &bx) == MN_E_NOT_FOUND);
    CHECK_OK(mn_session_bind_vulkan_buffer(gs, "x", &bx), mn_session_error(gs));
    CHECK_OK(mn_session_bind_vulkan_buffer(gs, "y", &by), mn_session_error(gs));
    CHECK(mn_session_set_input(gs, "x", x, sizeof x) == MN_E_STATE);
    CHECK(mn_session_output(gs, "y", got, sizeof got) == MN_E_STATE);
    CHECK_MSG(strstr(mn_session_error(gs), "host Vulkan buffer"), "%s", mn_session_error(gs));
    /* cpu sessions have no Vulkan buffers */
    CHECK(mn_session_bind_vulkan_buffer(cs, "x", &bx) == MN_E_UNSUPPORTED);

    /* binary semaphores: host copy -> model -> host copy, the model not waited for */
    VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    VkSemaphore s1, s2;
    vkCreateSemaphore(h.dev, &sci, NULL, &s1);
    vkCreateSemaphore(h.dev, &sci, NULL, &s2);
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence;
    vkCreateFence(h.dev, &fci, NULL, &fence);
    memcpy(src.map, x, sizeof x);
    VkCommandBuffer in_cb, out_cb;
    {
        /* into xin at its offset */
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = h.pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        vkAllocateCommandBuffers(h.dev, &ai, &in_cb);
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        vkBeginCommandBuffer(in_cb, &bi);
        VkBufferCopy c = {0, align, sizeof x};
        vkCmdCopyBuffer(in_cb, src.buf, xin.buf, 1, &c);
        vkEndCommandBuffer(in_cb);
    }
    out_cb = copy_cb(&h, yout.buf, dst.buf, sizeof got);
    submit(&h, in_cb, VK_NULL_HANDLE, NULL, s1, NULL, VK_NULL_HANDLE);
    VkPipelineStageFlags wst = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    mn_vulkan_submit sub = {1, &s1, NULL, &wst, 1, &s2, NULL, true};
    CHECK_OK(mn_session_run_vulkan(gs, &sub), mn_session_error(gs));
    submit(&h, out_cb, s2, NULL, VK_NULL_HANDLE, NULL, fence);
    CHECK(vkWaitForFences(h.dev, 1, &fence, VK_TRUE, UINT64_MAX) == VK_SUCCESS);
    CHECK_MSG(th_nmse(dst.map, want, 28) < 1e-11, "host buffers, binary semaphores: nmse %g", th_nmse(dst.map, want, 28));

    /* timeline semaphores, several frames, the output read by the host */
    VkSemaphoreTypeCreateInfo sti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                     .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE};
    VkSemaphoreCreateInfo tci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &sti};
    VkSemaphore tl;
    vkCreateSemaphore(h.dev, &tci, NULL, &tl);
    for (uint64_t f = 0; f < 3; f++) {
        for (int i = 0; i < 4 * 33; i++) src.map[i] = x[i] * (float)(f + 1) / 3.0f;
        float want_f[28];
        float xf[4 * 33];
        memcpy(xf, src.map, sizeof xf);
        mn_session_set_input(cs, "x", xf, sizeof xf);
        mn_session_run(cs);
        mn_session_output(cs, "y", want_f, sizeof want_f);
        uint64_t v1 = 3 * f + 1, v2 = 3 * f + 2, v3 = 3 * f + 3;
        vkResetFences(h.dev, 1, &fence);
        submit(&h, in_cb, VK_NULL_HANDLE, NULL, tl, &v1, VK_NULL_HANDLE);
        mn_vulkan_submit ts = {1, &tl, &v1, NULL, 1, &tl, &v2, f != 1};
        CHECK_OK(mn_session_run_vulkan(gs, &ts), mn_session_error(gs));
        submit(&h, out_cb, tl, &v2, tl, &v3, fence);
        CHECK(vkWaitForFences(h.dev, 1, &fence, VK_TRUE, UINT64_MAX) == VK_SUCCESS);
        CHECK_MSG(th_nmse(dst.map, want_f, 28) < 1e-11, "frame %d: nmse %g", (int)f, th_nmse(dst.map, want_f, 28));
    }
    /* unbinding gives the session its own storage back */
    CHECK_OK(mn_session_bind_vulkan_buffer(gs, "x", &(mn_vulkan_buffer){VK_NULL_HANDLE, 0, 0}), mn_session_error(gs));
    CHECK_OK(mn_session_bind_vulkan_buffer(gs, "y", NULL), mn_session_error(gs));
    CHECK_OK(mn_session_set_input(gs, "x", x, sizeof x), mn_session_error(gs));
    CHECK_OK(mn_session_run(gs), mn_session_error(gs));
    CHECK_OK(mn_session_output(gs, "y", got, sizeof got), mn_session_error(gs));
    CHECK_MSG(th_nmse(got, want, 28) < 1e-11, "after unbinding: nmse %g", th_nmse(got, want, 28));

    /* a device without timeline semaphores refuses timeline values */
    mn_device *dev2 = NULL;
    d2 = desc;
    d2.enabled_features = NULL;
    CHECK_OK(mn_device_from_vulkan(&dev2, &d2), mn_device_error(dev2));
    mn_session *gs2 = open_session(g, MN_BACKEND_VULKAN, dev2);
    uint64_t v = 1;
    mn_vulkan_submit ts = {0, NULL, NULL, NULL, 1, &tl, &v, false};
    CHECK(mn_session_run_vulkan(gs2, &ts) == MN_E_UNSUPPORTED);
    CHECK_MSG(strstr(mn_session_error(gs2), "timelineSemaphore"), "%s", mn_session_error(gs2));
    mn_session_destroy(gs2);
    mn_device_close(dev2);

    mn_session_destroy(gs);
    mn_session_destroy(cs);
    mn_device_close(dev);
    mn_graph_destroy(g);
    CHECK_MSG(g_live == 0, "%ld of %ld host allocations still live after the library closed", g_live, g_total);
    /* the host's objects still work */
    vkResetFences(h.dev, 1, &fence);
    submit(&h, out_cb, VK_NULL_HANDLE, NULL, VK_NULL_HANDLE, NULL, fence);
    CHECK(vkWaitForFences(h.dev, 1, &fence, VK_TRUE, UINT64_MAX) == VK_SUCCESS);
    size_t csize = 0;
    CHECK(vkGetPipelineCacheData(h.dev, hcache, &csize, NULL) == VK_SUCCESS);
    CHECK(vkQueueWaitIdle(h.queue) == VK_SUCCESS);
    vkDestroyPipelineCache(h.dev, hcache, NULL);
    vkDestroySemaphore(h.dev, s1, NULL);
    vkDestroySemaphore(h.dev, s2, NULL);
    vkDestroySemaphore(h.dev, tl, NULL);
    vkDestroyFence(h.dev, fence, NULL);
    hbuf_free(&h, &src);
    hbuf_free(&h, &xin);
    hbuf_free(&h, &yout);
    hbuf_free(&h, &dst);
    host_destroy(&h);
    CHECK_MSG(g_messages == 0, "%d validation messages", g_messages);
    return th_finish("test_vk_host");
}
