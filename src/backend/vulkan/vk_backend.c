/* vk_backend.c - the Vulkan backend: device-local arenas placed by the memory
 * plan, a staging buffer for uploads and readbacks, one compute pipeline per
 * distinct generated kernel, and command buffers recorded once per node list
 * (the training step, the forward run) and replayed on every execute.
 *
 * Each arena of the plan is split into chunks of at most caps.max_binding
 * bytes (the plan's chunk_bytes), each its own VkBuffer and dedicated
 * allocation; the plan keeps every tensor of at most a chunk inside one, so
 * its binding, copies and readback name one buffer. A larger tensor (paged,
 * memplan_pages) starts at a chunk boundary and spans whole chunks: kernels
 * bind it as an array of one descriptor per chunk (a descriptor-set layout
 * and pipeline layout per distinct page-count signature; kernels without
 * paged operands share the plain one), and uploads, fills and reads of it
 * go chunk by chunk. The whole size is checked against the device's heap
 * (its VK_EXT_memory_budget budget where known) before anything is
 * allocated.
 *
 * Per execute the host does only: copy pending uploads into the staging
 * buffer, one vkQueueSubmit (uploads + the recorded step), one fence wait.
 * Every dispatch has its own descriptor set (made once per node at session
 * build) binding each operand to exactly its tensor's bytes, so the
 * synchronisation validation layer sees what each kernel really touches.
 * Barriers between dispatches (and between upload copies) are placed by
 * vk_hazard_plan from the same byte ranges: only where a later command reads
 * or writes bytes an earlier one since the last barrier wrote, or writes
 * bytes one read.
 *
 * MEGANEURA_FAULT_NO_BARRIERS=1 | host | all (tests only): record no
 * barrier between dispatches | around uploads and readbacks | both, to prove
 * the synchronisation validation sees the hazards.
 *
 * MEGANEURA_PROFILE=1: per-kernel GPU times from timestamp queries, printed
 * as a table when the session ends. MEGANEURA_TRACE=path: a Chrome/Perfetto
 * trace of every dispatch. MEGANEURA_DUMP=glsl: the generated sources to
 * stderr.
 *
 * Does not: generate GLSL (vk_codegen*.c), pick devices (vk_device.c).
 */
#include <time.h>

#include "backend/backend.h"
#include "backend/vulkan/vk_cache.h"
#include "backend/vulkan/vk_hazard.h"
#include "kir/kir.h"
#include "backend/vulkan/vk_util.h"
#include "io/file.h"

#define MAX_RECORDED 4
/* MEGANEURA_FAULT_NO_BARRIERS (tests): 1 or "dispatch" drops the barriers
 * between dispatches; "host" drops those around uploads and readbacks and
 * at the start and end of a recorded step; "all" both. */
#define FAULT_DISPATCH 1u
#define FAULT_HOST 2u
#define STAGING_BYTES (16u << 20)
#define RB_BYTES 4096u /* staging tail for the readback nodes */
#define PENDING_FILL 0x40 /* pending_arena flag: a vkCmdFillBuffer, not a copy (vkb_fill) */

#define MAX_OPERANDS (1 + NODE_MAX_IN) /* descriptor bindings: the output, then each input */

typedef struct node_rt {
    int32_t pipe; /* index into pipes, -1: nothing to dispatch */
    int32_t lay;  /* index into lays: its descriptor-set and pipeline layouts */
    uint32_t groups[3];
    uint32_t push[8];
    VkDescriptorSet set; /* binding j: the tensor opnd[j] */
    /* the dispatch's operands: opnd[0] = the output (the node), then the
     * inputs (the node's, or a fused group's input tensors, kir.h) */
    int32_t opnd[MAX_OPERANDS];
    uint8_t nopnd;
    uint8_t written; /* bit j: operand j >= 1 is written in place too */
} node_rt;

/* Layouts for one signature: descriptors per binding (1, or the pages of a
 * paged operand). lays[0]: all 1, the kernels without paged operands. */
typedef struct layout_entry {
    uint32_t count[MAX_OPERANDS];
    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
} layout_entry;

typedef struct pipe_entry {
    uint64_t key;
    int32_t lay; /* its pipeline layout (lays) */
    VkShaderModule module;
    VkPipeline pipeline;
} pipe_entry;

typedef struct recorded {
    const int32_t *list;
    int32_t n;
    VkCommandBuffer cb;
    uint32_t nqueries;
    uint8_t rb_mask; /* readback nodes (program.readback) copied to the host at its end */
} recorded;

/* Where one operand of a dispatch lives: what its descriptor binds and what
 * the hazard planner tracks. */
typedef struct operand_span {
    uint32_t buf;      /* buffer id for the hazard planner: the arena */
    VkDeviceSize at;   /* the binding's offset in the arena (for the hazard planner) */
    VkBuffer handle;   /* the VkBuffer (arena chunk) holding the tensor */
    VkDeviceSize offset, range; /* the binding: offset aligned to minStorageBufferOffsetAlignment */
    uint64_t elem;     /* the tensor's first element from the binding's start (pc.off) */
    VkDeviceSize span; /* the bytes from `at` the kernel may touch (hazards): range, or all pages */
    uint32_t pages;    /* 0, or the chunks a paged tensor spans (handle..: the first; see page_info) */
    bool live;         /* false: the tensor has no storage (bound to a dummy range, not tracked) */
} operand_span;

typedef struct prof_entry {
    uint64_t calls;
    double total_ns;
} prof_entry;

typedef struct vkb {
    vk_ctx c;       /* a copy of the shared context, or our own */
    bool owns_ctx;  /* destroy c at the end (not shared) */
    const program *p;
    bool lost;
    VkDeviceSize chunk; /* bytes per arena chunk (the plan's chunk_bytes) */
    VkBuffer *bufs[MP_ARENA_COUNT]; /* chunk k of arena a: bufs[a][k] */
    VkDeviceMemory *mems[MP_ARENA_COUNT];
    uint32_t nchunks[MP_ARENA_COUNT];
    VkBuffer staging;
    VkDeviceMemory staging_mem;
    unsigned char *staging_map;
    VkDeviceSize staging_size, staging_used;
    VkBufferCopy *pending; /* uploads waiting in the staging buffer */
    int8_t *pending_arena;
    int npending, cap_pending;
    layout_entry *lays;
    int nlays, cap_lays;
    VkDescriptorPool dpool; /* one set per dispatched node */
    VkPipelineCache pcache;
    pipe_entry *pipes;
    int npipes, cap_pipes;
    node_rt *rt;
    VkCommandPool pool;
    VkCommandBuffer upload_cb, once_cb;
    recorded rec[MAX_RECORDED];
    int nrec;
    /* program.readback: copied by the recorded lists into the tail of the
     * staging buffer (RB_BYTES past staging_size); fresh = the last execute
     * copied it and nothing has written it since */
    VkDeviceSize rb_off[PROGRAM_MAX_READBACK];
    bool rb_ok[PROGRAM_MAX_READBACK], rb_fresh[PROGRAM_MAX_READBACK];
    VkFence fence;
    VkQueryPool qpool;
    uint32_t qcap;
    bool profile;
    prof_entry *prof; /* per node */
    FILE *trace;
    double trace_clock_us;
    bool trace_first;
    double build_ms;
    int kernels_compiled, kernels_cached;
    /* host time per phase of execute (MEGANEURA_PROFILE): staging copies,
     * upload recording, submit, wait; and the number of executes */
    double host_copy_us, host_record_us, host_submit_us, host_wait_us;
    uint64_t executes;
    VkMemoryPropertyFlags staging_flags;
    long fault_submits; /* MEGANEURA_FAULT_DEVICE_LOST=N: the Nth submit reports a lost device (tests) */
    unsigned no_barriers; /* MEGANEURA_FAULT_NO_BARRIERS: FAULT_* classes of barriers not recorded (tests) */
} vkb;

static double now_us(void);

static mn_status vk_fail(vkb *b, VkResult r, const char *call, char *err, size_t cap) {
    if (r == VK_ERROR_DEVICE_LOST) b->lost = true;
    mn_fmt(err, cap, "vulkan: %s: %s%s", call, vk_result_name(r),
           r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? " (the model does not fit in device memory)" : "");
    return r == VK_ERROR_OUT_OF_HOST_MEMORY ? MN_E_NOMEM : MN_E_BACKEND;
}
#define VKCHECK(call, name)                                                                        \
    do {                                                                                           \
        VkResult r_ = (call);                                                                      \
        if (r_ != VK_SUCCESS) return vk_fail(b, r_, name, err, cap);                              \
    } while (0)

static int find_memory(const vk_ctx *c, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags nice) {
    int fallback = -1;
    for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++) {
        if (!(bits & (1u << i))) continue;
        VkMemoryPropertyFlags f = c->mem.memoryTypes[i].propertyFlags;
        if ((f & want) != want) continue;
        if ((f & nice) == nice) return (int)i;
        if (fallback < 0) fallback = (int)i;
    }
    return fallback;
}

static mn_status make_buffer(vkb *b, VkBuffer *buf, VkDeviceMemory *mem, VkDeviceSize size, VkBufferUsageFlags usage,
                             VkMemoryPropertyFlags want, VkMemoryPropertyFlags nice, char *err, size_t cap) {
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    bi.size = size;
    bi.usage = usage;
    VKCHECK(vkCreateBuffer(b->c.device, &bi, NULL, buf), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(b->c.device, *buf, &req);
    int type = find_memory(&b->c, req.memoryTypeBits, want, nice);
    if (type < 0) {
        mn_fmt(err, cap, "vulkan: no memory type for a buffer of %llu bytes", (unsigned long long)size);
        return MN_E_BACKEND;
    }
    if (want & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) b->staging_flags = b->c.mem.memoryTypes[type].propertyFlags;
    /* a dedicated allocation per arena: the driver places each one afresh
     * (large pages) instead of in space left by earlier sessions' buffers */
    VkMemoryDedicatedAllocateInfo ded = {.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO, .buffer = *buf};
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &ded};
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = (uint32_t)type;
    VKCHECK(vkAllocateMemory(b->c.device, &ai, NULL, mem), "vkAllocateMemory");
    VKCHECK(vkBindBufferMemory(b->c.device, *buf, *mem, 0), "vkBindBufferMemory");
    return MN_OK;
}

/* Bytes of arena a's chunk k (every chunk full but the last). */
static VkDeviceSize chunk_size(const vkb *b, int a, uint32_t k) {
    VkDeviceSize size = b->p->plan->arena_bytes[a] < 256 ? 256 : b->p->plan->arena_bytes[a];
    VkDeviceSize rest = size - (VkDeviceSize)k * b->chunk;
    return rest < b->chunk ? rest : b->chunk;
}

/* The chunk of arena a holding arena offset off, and *local: off in it. */
static VkBuffer chunk_at(const vkb *b, int a, VkDeviceSize off, VkDeviceSize *local) {
    uint32_t k = (uint32_t)(off / b->chunk);
    *local = off - (VkDeviceSize)k * b->chunk;
    return b->bufs[a][k];
}

/* Device-local bytes available in heap h: the budget left (VK_EXT_memory_budget)
 * or the heap's size. *how says which. */
static VkDeviceSize heap_room(const vkb *b, uint32_t h, const char **how) {
    VkDeviceSize size = b->c.mem.memoryHeaps[h].size;
    *how = "heap size";
    if (!b->c.caps.memory_budget) return size;
    VkPhysicalDeviceMemoryBudgetPropertiesEXT mb = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 m2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &mb};
    vkGetPhysicalDeviceMemoryProperties2(b->c.phys, &m2);
    if (!mb.heapBudget[h]) return size;
    *how = "heap budget left";
    return mb.heapBudget[h] > mb.heapUsage[h] ? mb.heapBudget[h] - mb.heapUsage[h] : 0;
}

static mn_status make_arenas(vkb *b, char *err, size_t cap) {
    static const char *names[MP_ARENA_COUNT] = {"parameter", "optimizer state", "input/output", "work"};
    const memplan *mp = b->p->plan;
    const uint64_t lim = b->c.caps.max_binding;
    /* the plan's chunks must fit one binding; a plan without chunks must
     * fit each arena in one */
    b->chunk = mp->chunk_bytes ? mp->chunk_bytes : lim;
    for (int a = 0; a < MP_ARENA_COUNT; a++) {
        if (b->chunk <= lim && (mp->chunk_bytes || mp->arena_bytes[a] <= lim)) continue;
        mn_fmt(err, cap,
               "vulkan: the %s arena was planned %s (%llu bytes), above the %llu bytes one binding on '%s' holds",
               names[a], mp->chunk_bytes ? "in chunks" : "without chunks",
               (unsigned long long)(mp->chunk_bytes ? mp->chunk_bytes : mp->arena_bytes[a]), (unsigned long long)lim,
               b->c.props.deviceName);
        return MN_E_UNSUPPORTED;
    }
    /* buffers first (no memory yet), then the total against the heap, then
     * the allocations: too big a model fails here, not at a later submit */
    VkDeviceSize need[VK_MAX_MEMORY_HEAPS] = {0}, total = 0;
    uint32_t nbuf = 0;
    int32_t *types[MP_ARENA_COUNT] = {0};
    mn_status st = MN_OK;
    for (int a = 0; a < MP_ARENA_COUNT && !st; a++) {
        VkDeviceSize size = mp->arena_bytes[a] < 256 ? 256 : mp->arena_bytes[a], nk = (size + b->chunk - 1) / b->chunk;
        if (nk > UINT32_MAX / 2) { /* chunk indices are 32-bit (and the heap check below fails long before) */
            mn_fmt(err, cap, "vulkan: the %s arena (%llu bytes) needs %llu chunks of %llu bytes, more than %u",
                   names[a], (unsigned long long)size, (unsigned long long)nk, (unsigned long long)b->chunk,
                   UINT32_MAX / 2);
            st = MN_E_UNSUPPORTED;
            break;
        }
        uint32_t n = (uint32_t)nk;
        b->bufs[a] = calloc(n, sizeof *b->bufs[a]);
        b->mems[a] = calloc(n, sizeof *b->mems[a]);
        types[a] = calloc(n, sizeof *types[a]);
        if (!b->bufs[a] || !b->mems[a] || !types[a]) {
            st = MN_E_NOMEM;
            break;
        }
        b->nchunks[a] = n;
        for (uint32_t k = 0; k < n && !st; k++) {
            VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
            bi.size = chunk_size(b, a, k);
            bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                       VK_BUFFER_USAGE_TRANSFER_DST_BIT;
            VkResult r = vkCreateBuffer(b->c.device, &bi, NULL, &b->bufs[a][k]);
            if (r != VK_SUCCESS) {
                st = vk_fail(b, r, "vkCreateBuffer", err, cap);
                break;
            }
            VkMemoryRequirements req;
            vkGetBufferMemoryRequirements(b->c.device, b->bufs[a][k], &req);
            int type = find_memory(&b->c, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
            if (type < 0) {
                mn_fmt(err, cap, "vulkan: no device-local memory type for a buffer of %llu bytes",
                       (unsigned long long)bi.size);
                st = MN_E_BACKEND;
                break;
            }
            types[a][k] = type;
            need[b->c.mem.memoryTypes[type].heapIndex] += req.size;
            total += req.size;
            nbuf++;
        }
    }
    for (uint32_t h = 0; h < b->c.mem.memoryHeapCount && !st; h++) {
        const char *how;
        VkDeviceSize room = need[h] ? heap_room(b, h, &how) : 0;
        if (need[h] <= room) continue;
        mn_fmt(err, cap,
               "vulkan: the model needs %llu bytes of device memory (parameters %llu, optimizer state %llu, "
               "inputs/outputs %llu, work %llu; %u allocations of at most %llu bytes), more than '%s' has: "
               "%llu bytes (memory heap %u, %s)",
               (unsigned long long)total, (unsigned long long)mp->arena_bytes[MP_ARENA_PARAM],
               (unsigned long long)mp->arena_bytes[MP_ARENA_STATE], (unsigned long long)mp->arena_bytes[MP_ARENA_IO],
               (unsigned long long)mp->arena_bytes[MP_ARENA_WORK], nbuf, (unsigned long long)b->chunk,
               b->c.props.deviceName, (unsigned long long)room, h, how);
        st = MN_E_NOMEM;
    }
    /* a dedicated allocation per chunk: the driver places each one afresh
     * (large pages) instead of in space left by earlier sessions' buffers */
    for (int a = 0; a < MP_ARENA_COUNT && !st; a++) {
        for (uint32_t k = 0; k < b->nchunks[a] && !st; k++) {
            VkMemoryRequirements req;
            vkGetBufferMemoryRequirements(b->c.device, b->bufs[a][k], &req);
            VkMemoryDedicatedAllocateInfo ded = {.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO,
                                                 .buffer = b->bufs[a][k]};
            VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &ded};
            ai.allocationSize = req.size;
            ai.memoryTypeIndex = (uint32_t)types[a][k];
            VkResult r = vkAllocateMemory(b->c.device, &ai, NULL, &b->mems[a][k]);
            if (r == VK_SUCCESS) r = vkBindBufferMemory(b->c.device, b->bufs[a][k], b->mems[a][k], 0);
            if (r != VK_SUCCESS) {
                st = vk_fail(b, r, "vkAllocateMemory", err, cap);
                if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY) /* the heap check passed: others took the memory */
                    mn_fmt(err, cap, "vulkan: vkAllocateMemory: out of device memory for chunk %u of the %s arena "
                           "(%llu bytes; the model needs %llu in all)", k, names[a],
                           (unsigned long long)req.size, (unsigned long long)total);
            }
        }
    }
    for (int a = 0; a < MP_ARENA_COUNT; a++) free(types[a]);
    if (st) return st;
    b->staging_size = STAGING_BYTES;
    VkDeviceSize rb = 0;
    for (int i = 0; i < b->p->nreadback; i++) {
        const mp_slot *s = &b->p->plan->slots[b->p->readback[i]];
        b->rb_ok[i] = s->arena >= 0 && rb + s->bytes <= RB_BYTES && !memplan_pages(b->p->plan, b->p->readback[i]);
        b->rb_off[i] = rb;
        if (b->rb_ok[i]) rb = (rb + s->bytes + 15) & ~(VkDeviceSize)15;
    }
    st = make_buffer(b, &b->staging, &b->staging_mem, b->staging_size + RB_BYTES,
                    VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                    VK_MEMORY_PROPERTY_HOST_CACHED_BIT, err, cap);
    if (st) return st;
    VKCHECK(vkMapMemory(b->c.device, b->staging_mem, 0, VK_WHOLE_SIZE, 0, (void **)&b->staging_map), "vkMapMemory");
    return MN_OK;
}

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
    VKCHECK(vkCreateDescriptorSetLayout(b->c.device, &li, NULL, &e->dsl), "vkCreateDescriptorSetLayout");
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 8 * sizeof(uint32_t)};
    VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pi.setLayoutCount = 1;
    pi.pSetLayouts = &e->dsl;
    pi.pushConstantRangeCount = 1;
    pi.pPushConstantRanges = &pr;
    VKCHECK(vkCreatePipelineLayout(b->c.device, &pi, NULL, &e->layout), "vkCreatePipelineLayout");
    *out = b->nlays - 1;
    return MN_OK;
}

static mn_status make_layout(vkb *b, char *err, size_t cap) {
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

/* The one place that knows where a tensor lives on the device: its buffer,
 * the binding's offset and range, and the element offset left for pc.off.
 * The tensor lies inside one chunk of its arena (the plan sees to it), or
 * is paged: from a chunk boundary over o.pages chunks (page_info). */
static operand_span operand(const vkb *b, int32_t id) {
    const mp_slot *s = &b->p->plan->slots[id];
    operand_span o = {0};
    uint64_t pages = memplan_pages(b->p->plan, id);
    if (pages) { /* page 0 here; page_info for each */
        o.buf = (uint32_t)s->arena;
        o.pages = (uint32_t)pages;
        o.at = s->offset;
        o.handle = chunk_at(b, s->arena, s->offset, &o.offset);
        o.range = chunk_size(b, s->arena, (uint32_t)(s->offset / b->chunk));
        o.span = (s->bytes + 3) / 4 * 4;
        o.live = true;
        return o;
    }
    VkDeviceSize align = b->c.caps.offset_align < 4 ? 4 : b->c.caps.offset_align;
    if (s->arena < 0 || s->arena >= MP_ARENA_COUNT) { /* no storage: a valid binding nobody uses */
        o.buf = MP_ARENA_WORK;
        o.handle = b->bufs[MP_ARENA_WORK][0];
        o.range = 4;
        return o;
    }
    VkDeviceSize local;
    o.buf = (uint32_t)s->arena;
    o.handle = chunk_at(b, s->arena, s->offset, &local);
    VkDeviceSize size = chunk_size(b, s->arena, (uint32_t)(s->offset / b->chunk));
    o.offset = local / align * align;
    o.at = s->offset - (local - o.offset);
    o.elem = (local - o.offset) / 4;
    o.range = (local - o.offset + s->bytes + 3) / 4 * 4;
    if (o.range < 4) o.range = 4;
    if (o.offset + o.range > size) o.range = size - o.offset;
    o.span = o.range;
    o.live = true;
    return o;
}

/* Page j of paged tensor id: chunk k0 + j of its arena from its start, the
 * tensor's bytes in it. */
static VkDescriptorBufferInfo page_info(const vkb *b, int32_t id, uint32_t j) {
    const mp_slot *s = &b->p->plan->slots[id];
    uint32_t k = (uint32_t)(s->offset / b->chunk) + j;
    VkDeviceSize left = (s->bytes - (VkDeviceSize)j * b->chunk + 3) / 4 * 4, size = chunk_size(b, s->arena, k);
    return (VkDescriptorBufferInfo){b->bufs[s->arena][k], 0, left < size ? left : size};
}

/* One descriptor set per dispatched node, written once: binding 0 = the
 * output, 1 + i = input i, each the tensor's own bytes. Replays bind them;
 * nothing is updated per step. */
static mn_status make_sets(vkb *b, char *err, size_t cap) {
    const program *p = b->p;
    uint32_t nsets = 0, ndesc = 0, most = 0;
    for (int32_t i = 0; i < p->norder; i++) {
        int32_t id = p->order[i];
        if (b->rt[id].pipe < 0) continue;
        nsets++;
        uint32_t nd = 0; /* a set takes every descriptor of its layout, used or not */
        for (int k = 0; k < MAX_OPERANDS; k++) nd += b->lays[b->rt[id].lay].count[k];
        ndesc += nd;
        if (nd > most) most = nd;
    }
    if (!nsets) return MN_OK;
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, ndesc};
    VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dpi.maxSets = nsets;
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    VKCHECK(vkCreateDescriptorPool(b->c.device, &dpi, NULL, &b->dpool), "vkCreateDescriptorPool");
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = b->dpool;
    ai.descriptorSetCount = 1;
    VkDescriptorBufferInfo *info = malloc(((size_t)most + MAX_OPERANDS) * sizeof *info);
    if (!info) return MN_E_NOMEM;
    mn_status st = MN_OK;
    for (int32_t i = 0; i < p->norder && !st; i++) {
        int32_t id = p->order[i];
        node_rt *rt = &b->rt[id];
        if (rt->pipe < 0) continue;
        ai.pSetLayouts = &b->lays[rt->lay].dsl;
        VkResult r = vkAllocateDescriptorSets(b->c.device, &ai, &rt->set);
        if (r != VK_SUCCESS) {
            st = vk_fail(b, r, "vkAllocateDescriptorSets", err, cap);
            break;
        }
        VkWriteDescriptorSet w[MAX_OPERANDS];
        uint32_t at = 0;
        for (int k = 0; k < rt->nopnd; k++) {
            int32_t t = rt->opnd[k];
            operand_span o = operand(b, t);
            w[k] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
            w[k].dstSet = rt->set;
            w[k].dstBinding = (uint32_t)k;
            w[k].descriptorCount = o.pages ? o.pages : 1;
            w[k].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            w[k].pBufferInfo = &info[at];
            if (!o.pages) info[at++] = (VkDescriptorBufferInfo){o.handle, o.offset, o.range};
            for (uint32_t j = 0; j < o.pages; j++) info[at++] = page_info(b, t, j);
        }
        vkUpdateDescriptorSets(b->c.device, rt->nopnd, w, 0, NULL);
    }
    free(info);
    return st;
}

/* ---- pipeline cache (per device and driver, on disk: vk_cache.c) --------- */

static void pcache_load(vkb *b) {
    char path[1200];
    void *data = NULL;
    size_t n = 0;
    if (vk_pipeline_path(path, sizeof path, &b->c.props)) vk_pipeline_load(path, &b->c.props, &data, &n);
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    ci.initialDataSize = n;
    ci.pInitialData = n ? data : NULL;
    /* vk_cache.c checked our header, the checksum and the driver's header */
    if (vkCreatePipelineCache(b->c.device, &ci, NULL, &b->pcache) != VK_SUCCESS) {
        ci.initialDataSize = 0;
        ci.pInitialData = NULL;
        vkCreatePipelineCache(b->c.device, &ci, NULL, &b->pcache);
    }
    free(data);
}

static void pcache_save(vkb *b) {
    char path[1200];
    size_t n = 0;
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

static uint64_t hash_str(const char *s) { return mn_hash_str(s); }

static mn_status get_pipeline(vkb *b, const char *src, const char *label, int32_t lay, int32_t *out, char *err,
                              size_t cap) {
    uint64_t key = hash_str(src);
    for (int i = 0; i < b->npipes; i++)
        if (b->pipes[i].key == key && b->pipes[i].lay == lay) {
            *out = i;
            return MN_OK;
        }
    uint32_t *words = NULL;
    size_t nwords = 0;
    bool cached = false;
    mn_status st = vk_compile(&words, &nwords, src, label, &cached, err, cap);
    if (st) return st;
    cached ? b->kernels_cached++ : b->kernels_compiled++;
    if (b->npipes == b->cap_pipes) {
        int c2 = b->cap_pipes ? 2 * b->cap_pipes : 32;
        pipe_entry *np = realloc(b->pipes, (size_t)c2 * sizeof *np);
        if (!np) {
            free(words);
            return MN_E_NOMEM;
        }
        b->pipes = np;
        b->cap_pipes = c2;
    }
    pipe_entry *e = &b->pipes[b->npipes];
    memset(e, 0, sizeof *e);
    e->key = key;
    e->lay = lay;
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = nwords * 4;
    mi.pCode = words;
    VkResult r = vkCreateShaderModule(b->c.device, &mi, NULL, &e->module);
    free(words);
    if (r != VK_SUCCESS) return vk_fail(b, r, "vkCreateShaderModule", err, cap);
    VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = (VkPipelineShaderStageCreateInfo){.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = e->module;
    ci.stage.pName = "main";
    ci.layout = b->lays[lay].layout;
    r = vkCreateComputePipelines(b->c.device, b->pcache, 1, &ci, NULL, &e->pipeline);
    if (r != VK_SUCCESS) {
        vkDestroyShaderModule(b->c.device, e->module, NULL);
        return vk_fail(b, r, "vkCreateComputePipelines", err, cap);
    }
    *out = b->npipes++;
    return MN_OK;
}

static mn_status build_kernels(vkb *b, char *err, size_t cap) {
    const program *p = b->p;
    const char *dump = getenv("MEGANEURA_DUMP");
    bool dump_glsl = dump && strstr(dump, "glsl");
    vk_kernel *k = malloc(sizeof *k);
    if (!k) return MN_E_NOMEM;
    mn_status st = MN_OK;
    const int32_t *kr = p->kernel_root;
    for (int32_t i = 0; i < p->norder && !st; i++) {
        int32_t id = p->order[i];
        const node *n = &p->g->nodes[id];
        node_rt *rt = &b->rt[id];
        rt->pipe = -1;
        if (kr && kr[id] != id) continue; /* computed by its root's kernel */
        /* the members folded into this node's kernel directly precede it */
        int nm = 0;
        while (kr && nm < i && kr[p->order[i - 1 - nm]] == id) nm++;
        rt->opnd[0] = id;
        rt->written = 0;
        if (nm) {
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
            if ((st = vk_codegen_node(k, p->g, id, p->plan, &b->c.caps, err, cap))) break;
            for (int j = 0; j < n->nin; j++) {
                rt->opnd[1 + j] = n->in[j];
                if (vk_input_written(n, j)) rt->written |= (uint8_t)(1u << (1 + j));
            }
            rt->nopnd = (uint8_t)(1 + n->nin);
        }
        if (!k->tmpl) continue;
        char *src = vk_codegen_source(k);
        if (!src) {
            mn_fmt(err, cap, "vulkan: no kernel template '%s' for %s (%%%d)", k->tmpl, op_table[n->op].name, id);
            st = MN_E_UNSUPPORTED;
            break;
        }
        if (dump_glsl) fprintf(stderr, "// ---- %%%d %s (%s)\n%s\n", id, op_table[n->op].name, k->tmpl, src);
        char label[64];
        snprintf(label, sizeof label, "%s_%d", op_table[n->op].name, id);
        /* one descriptor per binding, or per page of a paged operand (the
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
        if (!st) st = get_pipeline(b, src, label, rt->lay, &rt->pipe, err, cap);
        free(src);
        memcpy(rt->groups, k->groups, sizeof rt->groups);
        for (int j = 0; j < rt->nopnd && !st; j++) { /* pc.off: 32 bits */
            int32_t t = rt->opnd[j];
            operand_span o = operand(b, t);
            if (o.elem > b->c.caps.push_off_max || o.elem > UINT32_MAX) {
                mn_fmt(err, cap, "vulkan: %s (%%%d): the element offset %llu of '%s' (%%%d) does not fit a push "
                       "constant (at most %llu)", op_table[n->op].name, id, (unsigned long long)o.elem,
                       p->g->nodes[t].name ? p->g->nodes[t].name : op_table[p->g->nodes[t].op].name, t,
                       (unsigned long long)b->c.caps.push_off_max);
                st = MN_E_UNSUPPORTED;
            }
            rt->push[j] = (uint32_t)o.elem;
        }
    }
    free(k);
    return st;
}

/* ---- hazards ------------------------------------------------------------- */

/* The byte ranges dispatch `id` reads and writes: every input is read (its
 * binding is readonly unless written), the output and the inputs the kernel
 * updates in place are written. Appends to acc; returns the count. */
static int node_accesses(const vkb *b, int32_t id, vk_access *acc) {
    const node_rt *rt = &b->rt[id];
    int na = 0;
    for (int k = 0; k < rt->nopnd; k++) {
        operand_span o = operand(b, rt->opnd[k]);
        if (!o.live) continue;
        acc[na++] = (vk_access){o.buf, k == 0, o.at, o.at + o.span};
        if (rt->written & (1u << k)) acc[na++] = (vk_access){o.buf, true, o.at, o.at + o.span};
    }
    return na;
}

/* Plans the barriers of a node list: bar[i] != 0 before list[i]. */
static mn_status plan_list(const vkb *b, const int32_t *list, int32_t n, uint8_t *bar, char *err, size_t cap) {
    vk_access *acc = malloc(((size_t)n * 2 * MAX_OPERANDS + 1) * sizeof *acc);
    size_t *first = malloc(((size_t)n + 1) * sizeof *first);
    mn_status st = acc && first ? MN_OK : MN_E_NOMEM;
    if (!st) {
        first[0] = 0;
        for (int32_t i = 0; i < n; i++) {
            bool dispatched = b->rt[list[i]].pipe >= 0;
            first[i + 1] = first[i] + (dispatched ? (size_t)node_accesses(b, list[i], acc + first[i]) : 0);
        }
        st = vk_hazard_plan(acc, first, n, bar, err, cap);
    }
    free(acc);
    free(first);
    return st;
}

/* One global memory barrier; `fault` names the MEGANEURA_FAULT_NO_BARRIERS
 * class it belongs to (skipped when that fault is injected). */
static void barrier(const vkb *b, unsigned fault, VkCommandBuffer cb, VkPipelineStageFlags src, VkAccessFlags sa,
                    VkPipelineStageFlags dst, VkAccessFlags da) {
    if (b->no_barriers & fault) return;
    VkMemoryBarrier mb = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, sa, da};
    vkCmdPipelineBarrier(cb, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

static int rb_index(const vkb *b, int32_t id);

static mn_status record(vkb *b, recorded *rc, char *err, size_t cap) {
    const program *p = b->p;
    uint8_t *bar = malloc((size_t)rc->n + 1);
    if (!bar) return MN_E_NOMEM;
    mn_status st = plan_list(b, rc->list, rc->n, bar, err, cap);
    if (st) {
        free(bar);
        return st;
    }
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = b->pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkResult r = vkAllocateCommandBuffers(b->c.device, &ai, &rc->cb);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if (r == VK_SUCCESS) r = vkBeginCommandBuffer(rc->cb, &bi);
    if (r != VK_SUCCESS) {
        free(bar);
        return vk_fail(b, r, "vkAllocateCommandBuffers / vkBeginCommandBuffer", err, cap);
    }
    VkCommandBuffer cb = rc->cb;
    bool prof = b->profile && b->qpool;
    if (prof) vkCmdResetQueryPool(cb, b->qpool, 0, b->qcap);
    /* earlier submissions (uploads, previous steps) -> this step's kernels */
    barrier(b, FAULT_HOST, cb, VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    int32_t bound = -1;
    uint32_t q = 0;
    for (int32_t i = 0; i < rc->n; i++) {
        int32_t id = rc->list[i];
        const node_rt *rt = &b->rt[id];
        if (rt->pipe < 0) continue;
        if (bar[i]) {
            /* read after write / write after read / write after write between dispatches */
            barrier(b, FAULT_DISPATCH, cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                    VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                    VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
        }
        if (bound != rt->pipe) {
            vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, b->pipes[rt->pipe].pipeline);
            bound = rt->pipe;
        }
        VkPipelineLayout layout = b->lays[rt->lay].layout;
        vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &rt->set, 0, NULL);
        vkCmdPushConstants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof rt->push, rt->push);
        if (prof && q + 2 <= b->qcap) vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, b->qpool, q);
        vkCmdDispatch(cb, rt->groups[0], rt->groups[1], rt->groups[2]);
        if (prof && q + 2 <= b->qcap) {
            vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b->qpool, q + 1);
            q += 2;
        }
    }
    free(bar);
    rc->nqueries = q;
    /* this step's results -> readbacks and the next submission */
    barrier(b, FAULT_HOST, cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
            VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_HOST_READ_BIT);
    /* the readback nodes this list computes -> the staging tail -> the host */
    rc->rb_mask = 0;
    for (int k = 0; k < p->nreadback; k++) {
        if (!b->rb_ok[k]) continue;
        int32_t id = p->readback[k];
        bool in_list = false;
        for (int32_t i = 0; i < rc->n && !in_list; i++) in_list = rc->list[i] == id;
        if (!in_list) continue;
        const mp_slot *s = &p->plan->slots[id];
        VkBufferCopy reg = {0, b->staging_size + b->rb_off[k], s->bytes};
        VkBuffer src = chunk_at(b, s->arena, s->offset, &reg.srcOffset);
        vkCmdCopyBuffer(cb, src, b->staging, 1, &reg);
        rc->rb_mask |= (uint8_t)(1u << k);
    }
    if (rc->rb_mask)
        barrier(b, FAULT_HOST, cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
    VKCHECK(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    return MN_OK;
}

/* The readback slot of node id, or -1. */
static int rb_index(const vkb *b, int32_t id) {
    for (int k = 0; k < b->p->nreadback; k++)
        if (b->p->readback[k] == id && b->rb_ok[k]) return k;
    return -1;
}

/* ---- submission ---------------------------------------------------------- */

static mn_status submit_wait(vkb *b, VkCommandBuffer *cbs, uint32_t n, char *err, size_t cap) {
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = n;
    si.pCommandBuffers = cbs;
    VKCHECK(vkResetFences(b->c.device, 1, &b->fence), "vkResetFences");
    if (b->fault_submits > 0 && --b->fault_submits == 0)
        return vk_fail(b, VK_ERROR_DEVICE_LOST, "vkQueueSubmit (injected fault)", err, cap);
    double t0 = b->profile ? now_us() : 0;
    VKCHECK(vkQueueSubmit(b->c.queue, 1, &si, b->fence), "vkQueueSubmit");
    double t1 = b->profile ? now_us() : 0;
    b->host_submit_us += t1 - t0;
    /* Small steps finish in tens of microseconds: poll the fence for up to
     * 2 ms (as CUDA's default synchronisation spins) so the latency does not
     * depend on how the driver decides to sleep, then block. Not on a CPU
     * device (lavapipe), whose workers need the cores a spin would take. */
    double until = now_us() + (b->c.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0.0 : 2000.0);
    for (;;) {
        VkResult r = vkGetFenceStatus(b->c.device, b->fence);
        if (r == VK_SUCCESS) {
            if (b->profile) b->host_wait_us += now_us() - t1;
            return MN_OK;
        }
        if (r != VK_NOT_READY) return vk_fail(b, r, "vkGetFenceStatus", err, cap);
        if (now_us() > until) break;
    }
    VKCHECK(vkWaitForFences(b->c.device, 1, &b->fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    if (b->profile) b->host_wait_us += now_us() - t1;
    return MN_OK;
}

/* Records the pending uploads into upload_cb (not submitted). Copies to
 * overlapping bytes (a tensor written twice before a step) are ordered by a
 * barrier, placed by the hazard planner like the dispatches' ones. */
static mn_status record_uploads(vkb *b, char *err, size_t cap) {
    vk_access *acc = malloc(((size_t)b->npending * 2 + 1) * sizeof *acc);
    size_t *first = malloc(((size_t)b->npending + 1) * sizeof *first);
    uint8_t *bar = malloc((size_t)b->npending + 1);
    mn_status st = acc && first && bar ? MN_OK : MN_E_NOMEM;
    if (!st) {
        first[0] = 0;
        for (int i = 0; i < b->npending; i++) {
            const VkBufferCopy *c = &b->pending[i];
            const bool fill = b->pending_arena[i] & PENDING_FILL; /* reads no staging bytes */
            acc[2 * i] = (vk_access){MP_ARENA_COUNT, false, c->srcOffset, fill ? c->srcOffset : c->srcOffset + c->size};
            acc[2 * i + 1] = (vk_access){(uint32_t)(b->pending_arena[i] & ~PENDING_FILL), true, c->dstOffset,
                                         c->dstOffset + c->size};
            first[i + 1] = 2 * (size_t)i + 2;
        }
        st = vk_hazard_plan(acc, first, b->npending, bar, err, cap);
    }
    VkResult r = st ? VK_SUCCESS : vkResetCommandBuffer(b->upload_cb, 0);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    if (!st && r == VK_SUCCESS) r = vkBeginCommandBuffer(b->upload_cb, &bi);
    if (!st && r == VK_SUCCESS) {
        /* earlier kernels and copies (previous steps, readbacks) may still
         * read or write what these copies overwrite */
        barrier(b, FAULT_HOST, b->upload_cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_TRANSFER_WRITE_BIT);
        for (int i = 0; i < b->npending; i++) {
            if (bar[i]) /* a later write of the same bytes lands after the earlier one */
                barrier(b, FAULT_HOST, b->upload_cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                        VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
            VkBufferCopy reg = b->pending[i]; /* dstOffset: in the arena, the copy inside one chunk */
            const bool fill = (b->pending_arena[i] & PENDING_FILL) != 0;
            VkBuffer dst = chunk_at(b, (int)(b->pending_arena[i] & ~PENDING_FILL), reg.dstOffset, &reg.dstOffset);
            if (fill) /* a transfer write, ordered like the copies */
                vkCmdFillBuffer(b->upload_cb, dst, reg.dstOffset, reg.size, (uint32_t)reg.srcOffset);
            else
                vkCmdCopyBuffer(b->upload_cb, b->staging, dst, 1, &reg);
        }
        /* copies -> the kernels of this submission and later readbacks */
        barrier(b, FAULT_HOST, b->upload_cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                    VK_ACCESS_TRANSFER_WRITE_BIT);
        r = vkEndCommandBuffer(b->upload_cb);
    }
    free(acc);
    free(first);
    free(bar);
    if (!st && r != VK_SUCCESS) st = vk_fail(b, r, "recording uploads", err, cap);
    return st;
}

static mn_status flush_uploads(vkb *b, char *err, size_t cap) {
    if (!b->npending) return MN_OK;
    mn_status st = record_uploads(b, err, cap);
    if (!st) st = submit_wait(b, &b->upload_cb, 1, err, cap);
    b->npending = 0;
    b->staging_used = 0;
    return st;
}

static mn_status check_usable(vkb *b, char *err, size_t cap) {
    if (!b->lost) return MN_OK;
    mn_fmt(err, cap, "vulkan: the device was lost earlier (VK_ERROR_DEVICE_LOST); this session cannot continue");
    return MN_E_BACKEND;
}

static mn_status vkb_write(void *bp, int32_t id, const void *src, size_t bytes, char *err, size_t cap) {
    vkb *b = bp;
    mn_status st = check_usable(b, err, cap);
    if (st) return st;
    const mp_slot *s = &b->p->plan->slots[id];
    if (s->arena < 0 || bytes != s->bytes) {
        mn_fmt(err, cap, "vulkan: write of %zu bytes to node %d (%s), whose storage is %llu bytes", bytes, id,
               op_table[b->p->g->nodes[id].op].name, (unsigned long long)s->bytes);
        return MN_E_INVALID;
    }
    int k = rb_index(b, id);
    if (k >= 0) b->rb_fresh[k] = false; /* the host overwrites it */
    size_t done = 0;
    while (done < bytes) {
        if (b->staging_used >= b->staging_size || b->npending == b->cap_pending) {
            if (b->npending == b->cap_pending) {
                int c2 = b->cap_pending ? 2 * b->cap_pending : 64;
                VkBufferCopy *np = realloc(b->pending, (size_t)c2 * sizeof *np);
                int8_t *na = np ? realloc(b->pending_arena, (size_t)c2) : NULL;
                if (np) b->pending = np;
                if (!np || !na) return MN_E_NOMEM;
                b->pending_arena = na;
                b->cap_pending = c2;
            }
            if (b->staging_used >= b->staging_size && (st = flush_uploads(b, err, cap))) return st;
        }
        /* one copy per staging window and per arena chunk (a paged tensor) */
        size_t chunk = bytes - done, room = (size_t)(b->staging_size - b->staging_used);
        VkDeviceSize page = b->chunk - (s->offset + done) % b->chunk;
        if (chunk > room) chunk = room;
        if (chunk > page) chunk = (size_t)page;
        double t0 = b->profile ? now_us() : 0;
        memcpy(b->staging_map + b->staging_used, (const unsigned char *)src + done, chunk);
        if (b->profile) b->host_copy_us += now_us() - t0;
        b->pending[b->npending] = (VkBufferCopy){b->staging_used, s->offset + done, chunk};
        b->pending_arena[b->npending++] = s->arena;
        b->staging_used = (b->staging_used + chunk + 15) & ~(VkDeviceSize)15;
        done += chunk;
    }
    return MN_OK;
}

/* Queues a vkCmdFillBuffer of the node's storage into the next upload
 * submission (a pending entry marked PENDING_FILL whose srcOffset holds the
 * pattern): no bytes go through the staging buffer. */
static mn_status vkb_fill(void *bp, int32_t id, uint32_t pattern, char *err, size_t cap) {
    vkb *b = bp;
    mn_status st = check_usable(b, err, cap);
    if (st) return st;
    const mp_slot *s = &b->p->plan->slots[id];
    if (s->arena < 0 || s->bytes % 4 || s->offset % 4) {
        mn_fmt(err, cap, "vulkan: fill of node %d (%s): storage of %llu bytes at %llu is not whole 32-bit words", id,
               op_table[b->p->g->nodes[id].op].name, (unsigned long long)s->bytes, (unsigned long long)s->offset);
        return MN_E_INVALID;
    }
    if (!s->bytes) return MN_OK;
    int k = rb_index(b, id);
    if (k >= 0) b->rb_fresh[k] = false;
    for (VkDeviceSize done = 0; done < s->bytes;) { /* one fill per arena chunk (a paged tensor) */
        if (b->npending == b->cap_pending) {
            int c2 = b->cap_pending ? 2 * b->cap_pending : 64;
            VkBufferCopy *np = realloc(b->pending, (size_t)c2 * sizeof *np);
            int8_t *na = np ? realloc(b->pending_arena, (size_t)c2) : NULL;
            if (np) b->pending = np;
            if (!np || !na) {
                mn_fmt(err, cap, "vulkan: out of memory queueing a fill of node %d", id);
                return MN_E_NOMEM;
            }
            b->pending_arena = na;
            b->cap_pending = c2;
        }
        VkDeviceSize piece = s->bytes - done, page = b->chunk - (s->offset + done) % b->chunk;
        if (piece > page) piece = page;
        b->pending[b->npending] = (VkBufferCopy){pattern, s->offset + done, piece};
        b->pending_arena[b->npending++] = (int8_t)(s->arena | PENDING_FILL);
        done += piece;
    }
    return MN_OK;
}

static mn_status vkb_read(void *bp, int32_t id, void *dst, size_t bytes, char *err, size_t cap) {
    vkb *b = bp;
    mn_status st = check_usable(b, err, cap);
    if (st || (st = flush_uploads(b, err, cap))) return st;
    const mp_slot *s = &b->p->plan->slots[id];
    if (s->arena < 0 || bytes != s->bytes) {
        mn_fmt(err, cap, "vulkan: read of %zu bytes from node %d (%s), whose storage is %llu bytes", bytes, id,
               op_table[b->p->g->nodes[id].op].name, (unsigned long long)s->bytes);
        return MN_E_INVALID;
    }
    int k = rb_index(b, id);
    if (k >= 0 && b->rb_fresh[k]) { /* copied by the last execute: no round trip */
        memcpy(dst, b->staging_map + b->staging_size + b->rb_off[k], bytes);
        return MN_OK;
    }
    for (size_t done = 0; done < bytes;) {
        size_t chunk = bytes - done; /* one staging window and one arena chunk (a paged tensor) at a time */
        VkDeviceSize page = b->chunk - (s->offset + done) % b->chunk;
        if (chunk > b->staging_size) chunk = (size_t)b->staging_size;
        if (chunk > page) chunk = (size_t)page;
        VKCHECK(vkResetCommandBuffer(b->once_cb, 0), "vkResetCommandBuffer");
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        VKCHECK(vkBeginCommandBuffer(b->once_cb, &bi), "vkBeginCommandBuffer");
        /* kernels' and uploads' writes -> this copy's read; earlier copies
         * into the staging buffer -> this copy's write */
        barrier(b, FAULT_HOST, b->once_cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
        VkBufferCopy reg = {0, 0, chunk};
        VkBuffer src = chunk_at(b, s->arena, s->offset + done, &reg.srcOffset);
        vkCmdCopyBuffer(b->once_cb, src, b->staging, 1, &reg);
        barrier(b, FAULT_HOST, b->once_cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
        VKCHECK(vkEndCommandBuffer(b->once_cb), "vkEndCommandBuffer");
        if ((st = submit_wait(b, &b->once_cb, 1, err, cap))) return st;
        memcpy((unsigned char *)dst + done, b->staging_map, chunk);
        done += chunk;
    }
    return MN_OK;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void collect_profile(vkb *b, const recorded *rc) {
    if (!rc->nqueries) return;
    uint64_t *ts = malloc(rc->nqueries * sizeof *ts);
    if (!ts) return;
    if (vkGetQueryPoolResults(b->c.device, b->qpool, 0, rc->nqueries, rc->nqueries * sizeof *ts, ts, sizeof *ts,
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS) {
        double period = b->c.props.limits.timestampPeriod;
        uint32_t q = 0;
        double base = b->trace_clock_us;
        for (int32_t i = 0; i < rc->n && q + 2 <= rc->nqueries; i++) {
            int32_t id = rc->list[i];
            if (b->rt[id].pipe < 0) continue;
            double ns = (double)(ts[q + 1] - ts[q]) * period;
            b->prof[id].calls++;
            b->prof[id].total_ns += ns;
            if (b->trace) {
                double start = base + (double)(ts[q] - ts[0]) * period / 1e3;
                fprintf(b->trace, "%s{\"name\":\"%s\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                        "\"pid\":1,\"tid\":1,\"args\":{\"node\":%d}}",
                        b->trace_first ? "" : ",\n", op_table[b->p->g->nodes[id].op].name, start, ns / 1e3, id);
                b->trace_first = false;
            }
            q += 2;
        }
    }
    free(ts);
}

static mn_status vkb_execute(void *bp, const int32_t *list, int32_t n, char *err, size_t cap) {
    vkb *b = bp;
    mn_status st = check_usable(b, err, cap);
    if (st) return st;
    recorded *rc = NULL;
    for (int i = 0; i < b->nrec; i++)
        if (b->rec[i].list == list && b->rec[i].n == n) rc = &b->rec[i];
    if (!rc) {
        if (b->nrec == MAX_RECORDED) {
            mn_fmt(err, cap, "vulkan: more than %d distinct node lists executed", MAX_RECORDED);
            return MN_E_UNSUPPORTED;
        }
        rc = &b->rec[b->nrec];
        rc->list = list;
        rc->n = n;
        if ((st = record(b, rc, err, cap))) return st;
        b->nrec++;
    }
    VkCommandBuffer cbs[2];
    uint32_t ncb = 0;
    if (b->npending) {
        double t0 = b->profile ? now_us() : 0;
        if ((st = record_uploads(b, err, cap))) return st;
        if (b->profile) b->host_record_us += now_us() - t0;
        cbs[ncb++] = b->upload_cb;
    }
    b->executes++;
    cbs[ncb++] = rc->cb;
    b->trace_clock_us = now_us();
    st = submit_wait(b, cbs, ncb, err, cap);
    b->npending = 0;
    b->staging_used = 0;
    for (int k = 0; k < b->p->nreadback; k++) b->rb_fresh[k] = !st && (rc->rb_mask >> k & 1u);
    if (!st && b->profile) collect_profile(b, rc);
    return st;
}

/* ---- create / destroy ----------------------------------------------------- */

static void print_profile(vkb *b) {
    typedef struct {
        const char *name;
        uint64_t calls;
        double ns;
    } row;
    row rows[OP_COUNT];
    memset(rows, 0, sizeof rows);
    double total = 0;
    for (int32_t i = 0; i < b->p->g->n; i++) {
        if (!b->prof[i].calls) continue;
        op_id op = b->p->g->nodes[i].op;
        rows[op].name = op_table[op].name;
        rows[op].calls += b->prof[i].calls;
        rows[op].ns += b->prof[i].total_ns;
        total += b->prof[i].total_ns;
    }
    fprintf(stderr, "meganeura profile (%s): GPU time per kernel kind\n", b->c.props.deviceName);
    fprintf(stderr, "  %-24s %10s %12s %10s %6s\n", "kernel", "calls", "total us", "mean us", "%");
    for (int op = 0; op < OP_COUNT; op++)
        if (rows[op].calls)
            fprintf(stderr, "  %-24s %10llu %12.1f %10.2f %6.1f\n", rows[op].name, (unsigned long long)rows[op].calls,
                    rows[op].ns / 1e3, rows[op].ns / 1e3 / (double)rows[op].calls,
                    total > 0 ? 100.0 * rows[op].ns / total : 0.0);
    fprintf(stderr, "  session build %.1f ms (%d kernels compiled, %d from the cache)\n", b->build_ms,
            b->kernels_compiled, b->kernels_cached);
    if (b->executes) {
        double n = (double)b->executes;
        fprintf(stderr, "  host per execute: staging copies %.1f us, upload recording %.1f us, submit %.1f us, "
                "wait %.1f us (%llu executes)\n", b->host_copy_us / n, b->host_record_us / n,
                b->host_submit_us / n, b->host_wait_us / n, (unsigned long long)b->executes);
        fprintf(stderr, "  staging memory: host cached %s, device local %s\n",
                b->staging_flags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? "yes" : "no",
                b->staging_flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT ? "yes" : "no");
    }
}

static void vkb_destroy(void *bp) {
    vkb *b = bp;
    if (!b) return;
    VkDevice d = b->c.device;
    if (d) {
        vkDeviceWaitIdle(d);
        if (b->profile && b->prof) print_profile(b);
        pcache_save(b);
        for (int i = 0; i < b->npipes; i++) {
            vkDestroyPipeline(d, b->pipes[i].pipeline, NULL);
            vkDestroyShaderModule(d, b->pipes[i].module, NULL);
        }
        if (b->pcache) vkDestroyPipelineCache(d, b->pcache, NULL);
        if (b->qpool) vkDestroyQueryPool(d, b->qpool, NULL);
        if (b->fence) vkDestroyFence(d, b->fence, NULL);
        if (b->pool) vkDestroyCommandPool(d, b->pool, NULL);
        if (b->dpool) vkDestroyDescriptorPool(d, b->dpool, NULL);
        for (int i = 0; i < b->nlays; i++) {
            if (b->lays[i].layout) vkDestroyPipelineLayout(d, b->lays[i].layout, NULL);
            if (b->lays[i].dsl) vkDestroyDescriptorSetLayout(d, b->lays[i].dsl, NULL);
        }
        if (b->staging) vkDestroyBuffer(d, b->staging, NULL);
        if (b->staging_mem) vkFreeMemory(d, b->staging_mem, NULL);
        for (int a = 0; a < MP_ARENA_COUNT; a++)
            for (uint32_t k = 0; k < b->nchunks[a]; k++) {
                if (b->bufs[a] && b->bufs[a][k]) vkDestroyBuffer(d, b->bufs[a][k], NULL);
                if (b->mems[a] && b->mems[a][k]) vkFreeMemory(d, b->mems[a][k], NULL);
            }
    }
    if (b->trace) {
        fprintf(b->trace, "\n]}\n");
        fclose(b->trace);
    }
    if (b->owns_ctx) {
        if (b->c.validation && b->c.validation_messages)
            mn_logf(MN_LOG_ERROR, "vulkan validation reported %d errors/warnings", b->c.validation_messages);
        vk_ctx_destroy(&b->c);
    }
    for (int a = 0; a < MP_ARENA_COUNT; a++) {
        free(b->bufs[a]);
        free(b->mems[a]);
    }
    free(b->pipes);
    free(b->lays);
    free(b->pending);
    free(b->pending_arena);
    free(b->rt);
    free(b->prof);
    free(b);
}

static mn_status vkb_create(void **out, const program *p, char *err, size_t cap) {
    *out = NULL;
    if (p->f64) {
        mn_fmt(err, cap, "vulkan: the f64 mode exists on the cpu backend only");
        return MN_E_UNSUPPORTED;
    }
    double t0 = now_us();
    vkb *b = calloc(1, sizeof *b);
    if (!b) return MN_E_NOMEM;
    b->p = p;
    b->rt = calloc((size_t)p->g->n + 1, sizeof *b->rt);
    b->prof = calloc((size_t)p->g->n + 1, sizeof *b->prof);
    mn_status st = b->rt && b->prof ? MN_OK : MN_E_NOMEM;
    if (!st && p->device) {
        b->c = *(const vk_ctx *)p->device; /* shared: the device outlives this session */
    } else if (!st) {
        st = vk_ctx_create(&b->c, err, cap);
        b->owns_ctx = true;
    }
    if (!st) st = make_arenas(b, err, cap);
    if (!st) st = make_layout(b, err, cap);
    if (!st) {
        VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pi.queueFamilyIndex = b->c.queue_family;
        VkResult r = vkCreateCommandPool(b->c.device, &pi, NULL, &b->pool);
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        ai.commandPool = b->pool;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        if (r == VK_SUCCESS) r = vkAllocateCommandBuffers(b->c.device, &ai, &b->upload_cb);
        if (r == VK_SUCCESS) r = vkAllocateCommandBuffers(b->c.device, &ai, &b->once_cb);
        VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        if (r == VK_SUCCESS) r = vkCreateFence(b->c.device, &fi, NULL, &b->fence);
        if (r != VK_SUCCESS) st = vk_fail(b, r, "command pool / fence creation", err, cap);
    }
    const char *fault = getenv("MEGANEURA_FAULT_DEVICE_LOST");
    if (fault && *fault) b->fault_submits = strtol(fault, NULL, 10);
    const char *nob = getenv("MEGANEURA_FAULT_NO_BARRIERS");
    if (nob && *nob && strcmp(nob, "0") != 0)
        b->no_barriers = strcmp(nob, "host") == 0 ? FAULT_HOST
                         : strcmp(nob, "all") == 0 ? FAULT_DISPATCH | FAULT_HOST
                                                   : FAULT_DISPATCH;
    const char *pe = getenv("MEGANEURA_PROFILE"), *tr = getenv("MEGANEURA_TRACE");
    b->profile = (pe && *pe && strcmp(pe, "0") != 0) || (tr && *tr);
    if (!st && b->profile) {
        b->qcap = 2 * (uint32_t)p->norder + 2;
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
        qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qi.queryCount = b->qcap;
        if (vkCreateQueryPool(b->c.device, &qi, NULL, &b->qpool) != VK_SUCCESS) b->qpool = VK_NULL_HANDLE;
        if (tr && *tr) {
            b->trace = fopen(tr, "w");
            if (!b->trace) mn_logf(MN_LOG_WARN, "MEGANEURA_TRACE: cannot write '%s'", tr);
            else fprintf(b->trace, "{\"traceEvents\":[\n"), b->trace_first = true;
        }
    }
    if (!st) {
        pcache_load(b);
        st = build_kernels(b, err, cap);
    }
    if (!st) st = make_sets(b, err, cap);
    /* constants live in the io arena: upload them once */
    for (int32_t i = 0; !st && i < p->g->n; i++) {
        const node *n = &p->g->nodes[i];
        if (n->op == OP_CONST && p->plan->slots[i].arena >= 0)
            st = vkb_write(b, i, n->data, (size_t)node_numel(n) * 4, err, cap);
    }
    if (!st) st = flush_uploads(b, err, cap);
    b->build_ms = (now_us() - t0) / 1e3;
    if (st) {
        vkb_destroy(b);
        return st;
    }
    *out = b;
    return MN_OK;
}

static mn_status vk_device_open(void **out, char *err, size_t cap) {
    vk_ctx *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return MN_E_NOMEM;
    mn_status st = vk_ctx_create(c, err, cap);
    if (st) {
        vk_ctx_destroy(c);
        free(c);
        return st;
    }
    *out = c;
    return MN_OK;
}

static uint64_t vk_device_max_binding(void *dev) { return ((const vk_ctx *)dev)->caps.max_binding; }

static void vk_device_close(void *dev) {
    vk_ctx *c = dev;
    if (!c) return;
    if (c->validation && c->validation_messages)
        mn_logf(MN_LOG_ERROR, "vulkan validation reported %d errors/warnings", c->validation_messages);
    vk_ctx_destroy(c);
    free(c);
}

const backend_vtable backend_vulkan = {
    .name = "vulkan",
    .fuse_pointwise = true,
    .create = vkb_create,
    .destroy = vkb_destroy,
    .write = vkb_write,
    .read = vkb_read,
    .fill = vkb_fill,
    .execute = vkb_execute,
    .device_open = vk_device_open,
    .device_close = vk_device_close,
    .max_binding = vk_device_max_binding,
};

/* Used by `meganeura devices` through the public API. */
mn_status mn_list_devices(FILE *f) {
    char err[512];
    mn_status st = vk_list_devices(f ? f : stdout, err, sizeof err);
    if (st) fprintf(stderr, "meganeura: %s\n", err);
    return st;
}
