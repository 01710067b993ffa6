/* vk_pipeline.c - kernels of the Vulkan backend: descriptor-set and
 * pipeline layouts per page-count signature, one descriptor set per
 * dispatched node, the generated GLSL of every node or fused group compiled
 * (or found in the caches) into pipelines on all cores (MEGANEURA_THREADS),
 * and the on-disk pipeline cache.
 *
 * Does not: generate GLSL (vk_codegen*.c, vk_gen_*.c), record or submit
 * (vk_backend.c).
 */
#include "backend/vulkan/vk_backend_impl.h"

#include <pthread.h>
#include <stdatomic.h>

/* The layouts for descriptor counts count[] (found or made): *out indexes
 * b->lays. */
static mn_status get_layout(vkb *b, const uint32_t *count, int32_t *out, char *err, size_t cap) {
    for (int i = 0; i < b->nlays; i++)
        if (memcmp(b->lays[i].count, count, sizeof b->lays[i].count) == 0) {
            *out = i;
            return MN_OK;
        }
    if (b->nlays == b->cap_lays) {
        int c2 = b->cap_lays ? 2 * b->cap_lays : 4;
        layout_entry *nl = realloc(b->lays, (size_t)c2 * sizeof *nl);
        if (!nl) return MN_E_NOMEM;
        b->lays = nl;
        b->cap_lays = c2;
    }
    layout_entry *e = &b->lays[b->nlays];
    memset(e, 0, sizeof *e);
    memcpy(e->count, count, sizeof e->count);
    VkDescriptorSetLayoutBinding bind[MAX_OPERANDS];
    for (uint32_t i = 0; i < MAX_OPERANDS; i++)
        bind[i] = (VkDescriptorSetLayoutBinding){i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, count[i],
                                                 VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    li.bindingCount = MAX_OPERANDS;
    li.pBindings = bind;
    b->nlays++; /* destroyed with the rest, made or not */
    VKCHECK(vkCreateDescriptorSetLayout(b->c.device, &li, b->c.alloc, &e->dsl), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, (8 + VK_DIMS) * sizeof(uint32_t)};
    VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pi.setLayoutCount = 1;
    pi.pSetLayouts = &e->dsl;
    pi.pushConstantRangeCount = 1;
    pi.pPushConstantRanges = &pr;
    VKCHECK(vkCreatePipelineLayout(b->c.device, &pi, b->c.alloc, &e->layout), "vkCreatePipelineLayout");
    *out = b->nlays - 1;
    return MN_OK;
}

mn_status vkb_make_layout(vkb *b, char *err, size_t cap) {
    if (b->c.props.limits.maxPerStageDescriptorStorageBuffers < MAX_OPERANDS) {
        mn_fmt(err, cap, "vulkan: '%s' allows %u storage buffers per shader stage; kernels bind up to %d",
               b->c.props.deviceName, b->c.props.limits.maxPerStageDescriptorStorageBuffers, MAX_OPERANDS);
        return MN_E_UNSUPPORTED;
    }
    uint32_t ones[MAX_OPERANDS];
    for (int i = 0; i < MAX_OPERANDS; i++) ones[i] = 1;
    int32_t idx;
    return get_layout(b, ones, &idx, err, cap); /* lays[0] */
}

/* One descriptor set per dispatched node, written once: binding 0 = the
 * output, 1 + i = input i, each the tensor's own bytes. Replays bind them;
 * nothing is updated per step. */
mn_status vkb_make_sets(vkb *b, char *err, size_t cap) {
    const program *p = b->p;
    uint32_t nsets = 0, ndesc = 0;
    for (int32_t i = 0; i < p->norder; i++) {
        int32_t id = p->order[i];
        if (b->rt[id].pipe < 0) continue;
        nsets++;
        uint32_t nd = 0; /* a set takes every descriptor of its layout, used or not */
        for (int k = 0; k < MAX_OPERANDS; k++) nd += b->lays[b->rt[id].lay].count[k];
        ndesc += nd;
    }
    if (!nsets) return MN_OK;
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, ndesc};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dpi.maxSets = nsets;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    VKCHECK(vkCreateDescriptorPool(b->c.device, &dpi, b->c.alloc, &b->dpool), "vkCreateDescriptorPool");
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = b->dpool;
    ai.descriptorSetCount = 1;
    mn_status st = MN_OK;
    for (int32_t i = 0; i < p->norder && !st; i++) {
        int32_t id = p->order[i];
        node_rt *rt = &b->rt[id];
        if (rt->pipe < 0) continue;
        ai.pSetLayouts = &b->lays[rt->lay].dsl;
        VkResult r = vkAllocateDescriptorSets(b->c.device, &ai, &rt->set);
        if (r != VK_SUCCESS) {
            st = vkb_fail(b, r, "vkAllocateDescriptorSets", err, cap);
            break;
        }
        st = vkb_write_set(b, id, err, cap);
    }
    return st;
}

mn_status vkb_write_set(vkb *b, int32_t id, char *err, size_t cap) {
    node_rt *rt = &b->rt[id];
    uint32_t most = 0;
    for (int k = 0; k < MAX_OPERANDS; k++) most += b->lays[rt->lay].count[k];
    VkDescriptorBufferInfo *info = malloc(((size_t)most + MAX_OPERANDS) * sizeof *info);
    if (!info) return MN_E_NOMEM;
    VkWriteDescriptorSet w[MAX_OPERANDS];
    uint32_t at = 0;
    mn_status st = MN_OK;
    for (int k = 0; k < rt->nopnd; k++) {
        int32_t t = rt->opnd[k];
        operand_span o = vkb_operand_of(b, rt, k);
        w[k] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        w[k].dstSet = rt->set;
        w[k].dstBinding = (uint32_t)k;
        w[k].descriptorCount = o.pages ? o.pages : 1;
        w[k].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        w[k].pBufferInfo = &info[at];
        if (!o.pages) info[at++] = (VkDescriptorBufferInfo){o.handle, o.offset, o.range};
        for (uint32_t j = 0; j < o.pages; j++) info[at++] = vkb_page_info(b, t, j);
        /* pc.off: 32 bits */
        if (o.elem > b->c.caps.push_off_max || o.elem > UINT32_MAX) {
            const node *tn = &b->p->g->nodes[t];
            mn_fmt(err, cap, "vulkan: %s (%%%d): the element offset %llu of '%s' (%%%d) does not fit a push "
                   "constant (at most %llu)", op_table[b->p->g->nodes[id].op].name, id, (unsigned long long)o.elem,
                   tn->name ? tn->name : op_table[tn->op].name, t, (unsigned long long)b->c.caps.push_off_max);
            st = MN_E_UNSUPPORTED;
        }
        rt->push[k] = (uint32_t)o.elem;
    }
    if (!st) vkUpdateDescriptorSets(b->c.device, rt->nopnd, w, 0, NULL);
    free(info);
    return st;
}

/* ---- pipeline cache (per device and driver, on disk: vk_cache.c) --------- */

void vkb_pcache_load(vkb *b) {
    if (b->c.host_pcache) { /* the host's cache: used, never saved or destroyed here */
        b->pcache = b->c.host_pcache;
        return;
    }
    char path[1200];
    void *data = NULL;
    size_t n = 0;
    if (vk_pipeline_path(path, sizeof path, &b->c.props)) vk_pipeline_load(path, &b->c.props, &data, &n);
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = n;
    ci.pInitialData = n ? data : NULL;
    /* vk_cache.c checked our header, the checksum and the driver's header */
    if (vkCreatePipelineCache(b->c.device, &ci, b->c.alloc, &b->pcache) != VK_SUCCESS) {
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        vkCreatePipelineCache(b->c.device, &ci, b->c.alloc, &b->pcache);
    }
    free(data);
}

void vkb_pcache_save(vkb *b) {
    char path[1200];
    size_t n = 0;
    if (b->c.host_pcache) return;
    if (!vk_pipeline_path(path, sizeof path, &b->c.props) || !b->pcache ||
        vkGetPipelineCacheData(b->c.device, b->pcache, &n, NULL) != VK_SUCCESS || !n)
        return;
    void *data = malloc(n);
    if (!data) return;
    if (vkGetPipelineCacheData(b->c.device, b->pcache, &n, data) == VK_SUCCESS)
        vk_pipeline_store(path, &b->c.props, data, n);
    free(data);
}

/* ---- kernels ------------------------------------------------------------ */

/* One distinct kernel to make: its source and layout, and what making it
 * gave (filled by a worker thread). */
typedef struct kjob {
    char *src;
    char label[64];
    uint64_t key; /* mn_hash_str(src): found first, then compared in full */
    int32_t lay;
    int32_t pipe; /* index into b->pipes once made, or an existing entry */
    bool cached, bundled;
    uint32_t *words; /* kept for the pipe (program.keep_kernels) */
    size_t nwords;
    mn_status st;
    char err[512];     /* vk_compile's message */
    const char *call;  /* the Vulkan call that failed (reported with vr by vkb_fail) */
    VkResult vr;
    VkShaderModule module;
    VkPipeline pipeline;
} kjob;

typedef struct kpool {
    vkb *b;
    kjob *jobs;
    int32_t njobs;
    atomic_int next;
} kpool;

/* GLSL -> SPIR-V (through the SPIR-V cache) -> module -> pipeline for one
 * job. Called from several threads at once: vk_compile keeps no state
 * between calls (a shaderc compiler per call), module and pipeline creation
 * are free-threaded on one VkDevice, and the VkPipelineCache is internally
 * synchronised (created without EXTERNALLY_SYNCHRONIZED). */
static void make_kernel(vkb *b, kjob *j) {
    uint32_t *words = NULL;
    size_t nwords = 0;
    /* an inference bundle's binary first, then the SPIR-V cache or shaderc */
    j->bundled = vkb_bundle_spirv(b, j->src, &words, &nwords);
    if (!j->bundled) j->st = vk_compile(&words, &nwords, j->src, j->label, &j->cached, j->err, sizeof j->err);
    if (j->st) return;
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = nwords * 4;
    mi.pCode = words;
    VkResult r = vkCreateShaderModule(b->c.device, &mi, b->c.alloc, &j->module);
    if (b->p->keep_kernels && r == VK_SUCCESS) j->words = words, j->nwords = nwords;
    else free(words);
    if (r != VK_SUCCESS) {
        j->module = VK_NULL_HANDLE;
        j->call = "vkCreateShaderModule", j->vr = r, j->st = MN_E_BACKEND;
        return;
    }
    VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = (VkPipelineShaderStageCreateInfo){.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = j->module;
    ci.stage.pName = "main";
    ci.layout = b->lays[j->lay].layout;
    r = vkCreateComputePipelines(b->c.device, b->pcache, 1, &ci, b->c.alloc, &j->pipeline);
    if (r != VK_SUCCESS) {
        vkDestroyShaderModule(b->c.device, j->module, b->c.alloc);
        j->module = VK_NULL_HANDLE;
        j->pipeline = VK_NULL_HANDLE;
        j->call = "vkCreateComputePipelines", j->vr = r, j->st = MN_E_BACKEND;
    }
}

static void *kpool_worker(void *arg) {
    kpool *pl = arg;
    for (;;) {
        int32_t i = (int32_t)atomic_fetch_add(&pl->next, 1);
        if (i >= pl->njobs) break;
        if (pl->jobs[i].pipe < 0) make_kernel(pl->b, &pl->jobs[i]);
    }
    return NULL;
}

/* Makes every job that has no pipeline yet on up to mn_thread_count()
 * threads (the calling one included); a thread that cannot start leaves its
 * share to the others. */
static void make_kernels(vkb *b, kjob *jobs, int32_t njobs) {
    enum { MAX_THREADS = 32 };
    int32_t todo = 0;
    for (int32_t i = 0; i < njobs; i++) todo += jobs[i].pipe < 0;
    int nt = mn_thread_count();
    if (nt > MAX_THREADS) nt = MAX_THREADS;
    if (nt > todo) nt = todo > 0 ? (int)todo : 1;
    kpool pl = {.b = b, .jobs = jobs, .njobs = njobs};
    atomic_init(&pl.next, 0);
    pthread_t th[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int t = 1; t < nt; t++) started[t] = pthread_create(&th[t], NULL, kpool_worker, &pl) == 0;
    kpool_worker(&pl);
    for (int t = 1; t < nt; t++)
        if (started[t]) pthread_join(th[t], NULL);
}

/* The job for (src, lay): an existing pipeline of b->pipes, an earlier job
 * of this build, or a new job (which takes src). -1: out of memory. */
static int32_t find_job(vkb *b, kjob **jobs, int32_t *njobs, int32_t *capj, char *src, const char *label,
                        int32_t lay) {
    uint64_t key = mn_hash_str(src);
    for (int32_t i = 0; i < *njobs; i++)
        if ((*jobs)[i].key == key && (*jobs)[i].lay == lay && strcmp((*jobs)[i].src, src) == 0) {
            free(src);
            return i;
        }
    if (*njobs == *capj) {
        int32_t c2 = *capj ? 2 * *capj : 64;
        kjob *nj = realloc(*jobs, (size_t)c2 * sizeof *nj);
        if (!nj) {
            free(src);
            return -1;
        }
        *jobs = nj, *capj = c2;
    }
    kjob *j = &(*jobs)[*njobs];
    memset(j, 0, sizeof *j);
    j->src = src, j->key = key, j->lay = lay, j->pipe = -1;
    snprintf(j->label, sizeof j->label, "%s", label);
    for (int i = 0; i < b->npipes; i++)
        if (b->pipes[i].key == key && b->pipes[i].lay == lay) j->pipe = i;
    return (*njobs)++;
}

/* The gradient regions of the multi-update kernels (kir.h): region_of[r]
 * = the kernel's index for a gradient's storage r (-1: none), and each
 * kernel's first and last gradient. NULLs when there is none. */
static mn_status grad_regions(const program *p, int32_t **region_of, int32_t **first, int32_t **last) {
    *region_of = *first = *last = NULL;
    if (!p->kernel_kind || !p->kernel_root) return MN_OK;
    int32_t nmulti = 0;
    for (int32_t i = 0; i < p->norder; i++) nmulti += p->kernel_kind[p->order[i]] == KIR_MULTI_UPDATE;
    if (!nmulti) return MN_OK;
    *region_of = malloc(((size_t)p->g->n + 1) * sizeof **region_of);
    *first = malloc((size_t)nmulti * sizeof **first);
    *last = malloc((size_t)nmulti * sizeof **last);
    if (!*region_of || !*first || !*last) return MN_E_NOMEM;
    for (int32_t i = 0; i < p->g->n; i++) (*region_of)[i] = -1;
    int32_t q = 0;
    for (int32_t i = 0; i < p->norder; i++) {
        const int32_t id = p->order[i];
        if (p->kernel_kind[id] != KIR_MULTI_UPDATE || p->kernel_root[id] != id) continue;
        int32_t nm = 0; /* its updates directly precede it */
        while (nm < i && p->kernel_root[p->order[i - 1 - nm]] == id) nm++;
        for (int32_t j = i - nm; j <= i; j++) {
            const int32_t grad = p->g->nodes[p->order[j]].in[1];
            (*region_of)[memplan_root(p->g, grad)] = q;
            if (j == i - nm) (*first)[q] = grad;
            (*last)[q] = grad;
        }
        q++;
    }
    return MN_OK;
}

mn_status vkb_build_kernels(vkb *b, char *err, size_t cap) {
    const double t0 = mn_now_us();
    const program *p = b->p;
    const char *dump = getenv("MEGANEURA_DUMP");
    bool dump_glsl = dump && strstr(dump, "glsl");
    vk_kernel *k = calloc(1, sizeof *k);
    int32_t *job_of = malloc((size_t)(p->norder > 0 ? p->norder : 1) * sizeof *job_of);
    kjob *jobs = NULL;
    int32_t njobs = 0, capj = 0;
    int32_t *region_of = NULL, *first_grad = NULL, *last_grad = NULL;
    if (!k || !job_of) {
        free(k);
        free(job_of);
        return MN_E_NOMEM;
    }
    mn_status st = grad_regions(p, &region_of, &first_grad, &last_grad);
    const int32_t *kr = p->kernel_root;
    /* 1. generate every kernel's source (serial, cheap), one job per
     * distinct (source, layout); 2. compile and create the pipelines of the
     * jobs on all cores; 3. hand each node its pipeline */
    for (int32_t i = 0; i < p->norder && !st; i++) {
        int32_t id = p->order[i];
        const node *n = &p->g->nodes[id];
        node_rt *rt = &b->rt[id];
        rt->pipe = -1;
        job_of[i] = -1;
        if (kr && kr[id] != id) continue; /* computed by its root's kernel */
        if (p->kernel_kind && p->kernel_kind[id] == KIR_SAVED) continue; /* written by the kernel before it */
        /* a saved value (kir.h) this kernel writes beside its own: bound
         * after the inputs, written */
        const int32_t saved = p->kernel_saved ? p->kernel_saved[id] : MN_NONE;
        /* the members folded into this node's kernel directly precede it */
        int nm = 0;
        while (kr && nm < i && kr[p->order[i - 1 - nm]] == id) nm++;
        rt->opnd[0] = id;
        rt->written = 0;
        rt->ranged = 0;
        vk_kernel_clear(k);
        const kir_kind kind = nm && p->kernel_kind ? (kir_kind)p->kernel_kind[id] : KIR_SINGLE;
        if (saved != MN_NONE && nm && kind != KIR_HEADS_OUT) { /* kir saves only beside these */
            mn_fmt(err, cap, "vulkan: the fused kernel of %%%d cannot write the saved %%%d", id, (int)saved);
            st = MN_E_INVALID;
            break;
        }
        if (kind == KIR_MULTI_UPDATE || kind == KIR_MULTI_SUMSQ) {
            vk_operands ops;
            if (kind == KIR_MULTI_UPDATE)
                st = vk_codegen_multi_update(k, p->g, id, p->order + i - nm, nm, &ops, p->plan, &b->c.caps, err, cap);
            else if (!region_of)
                st = MN_E_INVALID; /* a sum-of-squares tree without gradient regions */
            else
                st = vk_codegen_multi_sumsq(k, p->g, id, kr, region_of, first_grad, last_grad, &ops, p->plan,
                                            &b->c.caps, err, cap);
            if (st) break;
            for (int j = 0; j < ops.n; j++) {
                rt->opnd[j] = ops.first[j];
                rt->opnd_last[j] = ops.last[j];
                if (ops.last[j] != ops.first[j]) rt->ranged |= (uint8_t)(1u << j);
            }
            rt->nopnd = (uint8_t)ops.n;
            rt->written = ops.written;
        } else if (kind == KIR_HEADS_IN || kind == KIR_HEADS_OUT) {
            /* a permute folded into its consumer (rope, kv_append) or its
             * producer (attention) writing the permute's output: the
             * kernel of the non-permute node, bound to what it reads or
             * writes through the permute */
            const int32_t m = p->order[i - 1], kid = kind == KIR_HEADS_IN ? id : m;
            const node *kn = &p->g->nodes[kid];
            const int hin = kind == KIR_HEADS_IN ? kir_heads_input(n->op) : -1;
            int32_t opnd[1 + NODE_MAX_IN];
            opnd[0] = id;
            for (int j = 0; j < kn->nin; j++) opnd[1 + j] = j == hin ? p->g->nodes[m].in[0] : kn->in[j];
            if ((st = vk_codegen_saving(k, p->g, kid, opnd, hin + 1, kind == KIR_HEADS_OUT, saved, p->plan,
                                        &b->c.caps, err, cap)))
                break;
            for (int j = 0; j < kn->nin; j++) {
                rt->opnd[1 + j] = opnd[1 + j];
                if (vk_input_written(kn, j)) rt->written |= (uint8_t)(1u << (1 + j));
            }
            rt->nopnd = (uint8_t)(1 + kn->nin);
            if (saved != MN_NONE) {
                rt->opnd[rt->nopnd] = saved;
                rt->written |= (uint8_t)(1u << rt->nopnd);
                rt->nopnd++;
            }
        } else if (nm) {
            int32_t members[KIR_MAX_MEMBERS], ext[KIR_MAX_INPUTS];
            int next = 0;
            if (nm >= KIR_MAX_MEMBERS) {
                mn_fmt(err, cap, "vulkan: fused kernel of %%%d has %d members", id, nm);
                st = MN_E_INVALID;
                break;
            }
            for (int j = 0; j < nm; j++) members[j] = p->order[i - nm + j];
            if ((st = vk_codegen_fused(k, p->g, id, members, nm, ext, &next, p->plan, &b->c.caps, err, cap))) break;
            for (int j = 0; j < next; j++) rt->opnd[1 + j] = ext[j];
            rt->nopnd = (uint8_t)(1 + next);
        } else {
            if ((st = vk_codegen_saving(k, p->g, id, NULL, 0, false, saved, p->plan, &b->c.caps, err, cap))) break;
            for (int j = 0; j < n->nin; j++) {
                rt->opnd[1 + j] = n->in[j];
                if (vk_input_written(n, j)) rt->written |= (uint8_t)(1u << (1 + j));
            }
            rt->nopnd = (uint8_t)(1 + n->nin);
            if (saved != MN_NONE) {
                rt->opnd[rt->nopnd] = saved;
                rt->written |= (uint8_t)(1u << rt->nopnd);
                rt->nopnd++;
            }
        }
        if (!k->tmpl) continue;
        vk_hoist_sizes(k); /* sizes in push constants where it costs nothing */
        for (int j = 0; j < VK_DIMS; j++) rt->push[8 + j] = j < k->ndims ? k->dims[j] : 0;
        char *src = vk_codegen_source(k);
        free(k->code);
        k->code = NULL;
        if (!src) {
            mn_fmt(err, cap, "vulkan: no kernel template '%s' for %s (%%%d)", k->tmpl, op_table[n->op].name, id);
            st = MN_E_UNSUPPORTED;
            break;
        }
        if (dump_glsl) fprintf(stderr, "// ---- %%%d %s (%s)\n%s\n", id, op_table[n->op].name, k->tmpl, src);
        char label[64];
        snprintf(label, sizeof label, "%s%s_%d", op_table[n->op].name,
                 kind == KIR_MULTI_UPDATE || kind == KIR_MULTI_SUMSQ ? "_multi" : "", id);
        /* one descriptor per binding, or per page of a paged vkb_operand (the
         * source names the page counts: one source, one layout); a layout
         * with a paged operand leaves the bindings past the node's inputs
         * empty, so its descriptors are those vk_codegen_node counted
         * against the device's per-stage limit */
        uint32_t count[MAX_OPERANDS];
        bool paged = false;
        for (int j = 0; j < MAX_OPERANDS; j++) {
            uint64_t pg = j < rt->nopnd ? memplan_pages(p->plan, rt->opnd[j]) : 0;
            count[j] = pg ? (uint32_t)pg : 1;
            paged |= pg > 0;
        }
        for (int j = rt->nopnd; paged && j < MAX_OPERANDS; j++) count[j] = 0;
        st = get_layout(b, count, &rt->lay, err, cap);
        if (st) {
            free(src);
            break;
        }
        job_of[i] = find_job(b, &jobs, &njobs, &capj, src, label, rt->lay); /* takes src */
        if (job_of[i] < 0) {
            st = MN_E_NOMEM;
            break;
        }
        memcpy(rt->groups, k->groups, sizeof rt->groups);
    }
    vk_kernel_clear(k);
    free(k);
    const double t1 = mn_now_us();
    b->phase_ms[4] += (t1 - t0) / 1e3;
    if (!st && njobs) make_kernels(b, jobs, njobs);
    b->phase_ms[5] += (mn_now_us() - t1) / 1e3;
    /* the first failure in schedule order is the one reported; every
     * pipeline made goes to b->pipes (destroyed with the backend) */
    for (int32_t i = 0; i < njobs; i++) {
        kjob *j = &jobs[i];
        if (j->pipe >= 0 || (!j->module && !j->pipeline)) {
            if (!st && j->pipe < 0 && j->st) {
                if (j->call) st = vkb_fail(b, j->vr, j->call, err, cap);
                else st = j->st, mn_fmt(err, cap, "%s", j->err);
            }
            continue;
        }
        if (b->npipes == b->cap_pipes) {
            int c2 = b->cap_pipes ? 2 * b->cap_pipes : 32;
            pipe_entry *np = realloc(b->pipes, (size_t)c2 * sizeof *np);
            if (!np) {
                vkDestroyPipeline(b->c.device, j->pipeline, b->c.alloc);
                vkDestroyShaderModule(b->c.device, j->module, b->c.alloc);
                if (!st) st = MN_E_NOMEM;
                continue;
            }
            b->pipes = np;
            b->cap_pipes = c2;
        }
        pipe_entry *e = &b->pipes[b->npipes];
        memset(e, 0, sizeof *e);
        e->key = j->key, e->lay = j->lay, e->module = j->module, e->pipeline = j->pipeline;
        if (j->words) { /* kept for export_kernels: the pipe's now */
            e->src = j->src, e->words = j->words, e->nwords = j->nwords;
            j->src = NULL, j->words = NULL;
        }
        j->bundled ? b->kernels_bundled++ : j->cached ? b->kernels_cached++ : b->kernels_compiled++;
        j->pipe = b->npipes++;
    }
    for (int32_t i = 0; i < p->norder && !st; i++)
        if (job_of[i] >= 0) b->rt[p->order[i]].pipe = jobs[job_of[i]].pipe;
    for (int32_t i = 0; i < njobs; i++) free(jobs[i].src), free(jobs[i].words);
    free(jobs);
    free(job_of);
    free(region_of);
    free(first_grad);
    free(last_grad);
    return st;
}
