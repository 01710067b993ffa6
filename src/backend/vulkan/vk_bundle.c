/* vk_bundle.c - the Vulkan backend's side of inference bundles
 * (docs/BUNDLE.md): kernels taken from a bundle before the SPIR-V cache and
 * shaderc, its pipeline-cache data merged when it was made on this device,
 * and the kernels of a session written into one.
 *
 * A kernel is taken from the bundle when the GLSL this session generates is
 * byte for byte the GLSL the bundle holds under the key
 * SHA-256(bundle's compiler identity, GLSL) - the key of the on-disk cache
 * - and its SPIR-V passes spirv-val (SPIRV-Tools, linked with shaderc; the
 * cooperative-matrix pass's own check for the kernels it rewrote):
 * the words go to the driver, so a damaged or hand-made binary is refused
 * here (and the kernel compiled) rather than handed to it. A device whose
 * limits change the generated GLSL (workgroup sizes, binding sizes, paging)
 * simply finds no entry for those kernels.
 *
 * Does not: read or write bundle files (src/session/bundle.c), compile.
 */
#include "backend/vulkan/vk_backend_impl.h"

static int cmp_key(const void *key, const void *e) { return memcmp(key, ((const kernel_entry *)e)->key, 32); }

bool vkb_bundle_spirv(const vkb *b, const char *src, uint32_t **words, size_t *nwords) {
    const kernel_set *ks = b->p->kernels;
    if (!ks || ks->n < 1 || !ks->compiler_id) return false;
    vk_cache_key key;
    vk_spirv_key(&key, ks->compiler_id, src);
    const kernel_entry *e = bsearch(key.b, ks->k, (size_t)ks->n, sizeof *ks->k, cmp_key);
    if (!e || strcmp(e->src, src) != 0) return false;
    char msg[256];
    if (!vk_spirv_valid(e->words, e->nwords, src, b->c.props.apiVersion >= VK_API_VERSION_1_2, msg, sizeof msg)) {
        mn_logf(MN_LOG_WARN, "vulkan: a kernel of the bundle fails SPIR-V validation (%s); compiling it instead", msg);
        return false;
    }
    uint32_t *w = malloc(e->nwords * 4);
    if (!w) return false;
    memcpy(w, e->words, e->nwords * 4);
    *words = w;
    *nwords = e->nwords;
    return true;
}

void vkb_bundle_pipelines(vkb *b) {
    const kernel_set *ks = b->p->kernels;
    /* a host's cache is the host's: nothing is merged into it */
    if (!ks || !ks->pipeline_bytes || !b->pcache || b->pcache == b->c.host_pcache ||
        !vk_pipeline_data_fits(ks->pipeline, ks->pipeline_bytes, &b->c.props))
        return;
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = ks->pipeline_bytes;
    ci.pInitialData = ks->pipeline;
    VkPipelineCache tmp;
    if (vkCreatePipelineCache(b->c.device, &ci, b->c.alloc, &tmp) != VK_SUCCESS) return;
    b->bundle_pipelines = vkMergePipelineCaches(b->c.device, b->pcache, 1, &tmp) == VK_SUCCESS;
    vkDestroyPipelineCache(b->c.device, tmp, b->c.alloc);
}

/* The driver data of exactly this session's pipelines: each made again in
 * an empty cache (the session's own cache also holds what the on-disk
 * cache brought from other sessions). Best effort: none on a failure. */
static void export_pipelines(vkb *b, kernel_set *out) {
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    VkPipelineCache pc;
    if (vkCreatePipelineCache(b->c.device, &ci, b->c.alloc, &pc) != VK_SUCCESS) return;
    bool ok = true;
    for (int i = 0; i < b->npipes && ok; i++) {
        VkComputePipelineCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
        pi.stage = (VkPipelineShaderStageCreateInfo){.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
        pi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
        pi.stage.module = b->pipes[i].module;
        pi.stage.pName = "main";
        pi.layout = b->lays[b->pipes[i].lay].layout;
        VkPipeline p;
        ok = vkCreateComputePipelines(b->c.device, pc, 1, &pi, b->c.alloc, &p) == VK_SUCCESS;
        if (ok) vkDestroyPipeline(b->c.device, p, b->c.alloc);
    }
    size_t n = 0;
    void *data = NULL;
    if (ok && vkGetPipelineCacheData(b->c.device, pc, &n, NULL) == VK_SUCCESS && n && (data = malloc(n)) &&
        vkGetPipelineCacheData(b->c.device, pc, &n, data) == VK_SUCCESS && vk_pipeline_data_fits(data, n, &b->c.props)) {
        out->pipeline = data;
        out->pipeline_bytes = n;
    } else {
        free(data);
    }
    vkDestroyPipelineCache(b->c.device, pc, b->c.alloc);
}

mn_status vkb_export_kernels(void *bp, kernel_set *out, char *err, size_t cap) {
    vkb *b = bp;
    memset(out, 0, sizeof *out);
    if (!b->p->keep_kernels) {
        mn_fmt(err, cap, "vulkan: this session did not keep its kernels (inference sessions do)");
        return MN_E_STATE;
    }
    if (b->lost) {
        mn_fmt(err, cap, "vulkan: the device was lost");
        return MN_E_BACKEND;
    }
    char cid[512];
    vk_compiler_id(cid, sizeof cid);
    const VkPhysicalDeviceProperties *pr = &b->c.props;
    out->compiler_id = mn_strdup(cid);
    out->vendor_id = pr->vendorID, out->device_id = pr->deviceID;
    out->driver_version = pr->driverVersion, out->api_version = pr->apiVersion;
    snprintf(out->device_name, sizeof out->device_name, "%s", pr->deviceName);
    out->k = calloc((size_t)b->npipes + 1, sizeof *out->k);
    if (!out->compiler_id || !out->k) goto nomem;
    for (int i = 0; i < b->npipes; i++) {
        const pipe_entry *e = &b->pipes[i];
        MN_ASSERT(e->src && e->words); /* keep_kernels: every pipe kept both */
        kernel_entry *k = &out->k[out->n++];
        vk_cache_key key;
        vk_spirv_key(&key, cid, e->src);
        memcpy(k->key, key.b, sizeof k->key);
        k->src = mn_strdup(e->src);
        k->words = malloc(e->nwords * 4);
        k->nwords = e->nwords;
        if (!k->src || !k->words) goto nomem;
        memcpy(k->words, e->words, e->nwords * 4);
    }
    kernel_set_sort(out); /* one entry per source (layouts share the binary) */
    export_pipelines(b, out);
    return MN_OK;
nomem:
    kernel_set_free(out);
    mn_fmt(err, cap, "vulkan: out of memory exporting the kernels");
    return MN_E_NOMEM;
}

void vkb_kernel_stats(void *bp, mn_kernel_stats *out) {
    const vkb *b = bp;
    out->compiled = b->kernels_compiled;
    out->cached = b->kernels_cached;
    out->bundled = b->kernels_bundled;
    out->bundle_pipelines = b->bundle_pipelines;
}
