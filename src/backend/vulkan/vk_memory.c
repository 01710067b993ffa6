/* vk_memory.c - device memory of the Vulkan backend: the arenas of the memory
 * plan split into chunks of at most one binding (each its own buffer and
 * allocation, checked against the heaps and VK_EXT_memory_budget first), the
 * staging buffer, and the one place that knows where a tensor lives
 * (vkb_operand, vkb_page_info).
 *
 * Test hooks (tests only, decimal digits): MEGANEURA_FAULT_DEVICE_MEMORY=<bytes>
 * reports every heap as holding at most that many bytes (a small GPU, or a
 * budget others have used up); MEGANEURA_FAULT_ALLOC=<n> makes the n-th
 * chunk allocation (from 1) of a session fail with
 * VK_ERROR_OUT_OF_DEVICE_MEMORY, as when another process takes the memory
 * between the heap check and the allocation.
 *
 * Does not: record or submit commands (vk_backend.c), make pipelines
 * (vk_pipeline.c).
 */
#include <string.h>

#include "backend/vulkan/vk_backend_impl.h"

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
    VKCHECK(vkCreateBuffer(b->c.device, &bi, b->c.alloc, buf), "vkCreateBuffer");
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
    VKCHECK(vkAllocateMemory(b->c.device, &ai, b->c.alloc, mem), "vkAllocateMemory");
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
VkBuffer vkb_chunk_at(const vkb *b, int a, VkDeviceSize off, VkDeviceSize *local) {
    uint32_t k = (uint32_t)(off / b->chunk);
    *local = off - (VkDeviceSize)k * b->chunk;
    return b->bufs[a][k];
}

/* A test hook's decimal value: false when unset; MN_E_INVALID (named) when
 * malformed. */
static mn_status fault_count(const char *name, uint64_t *out, bool *set, char *err, size_t cap) {
    const char *v = getenv(name);
    *set = v && *v;
    if (!*set) return MN_OK;
    uint64_t x = 0;
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9' || x > (UINT64_MAX - 9) / 10) {
            mn_fmt(err, cap, "vulkan: %s='%s': want decimal digits", name, v);
            return MN_E_INVALID;
        }
        x = x * 10 + (uint64_t)(*c - '0');
    }
    *out = x;
    return MN_OK;
}

/* Device-local bytes available in heap h: the budget left (VK_EXT_memory_budget)
 * or the heap's size, at most `fault` (MEGANEURA_FAULT_DEVICE_MEMORY, when
 * has_fault). *how says which. */
static VkDeviceSize heap_room(const vkb *b, uint32_t h, bool has_fault, uint64_t fault, const char **how) {
    VkDeviceSize size = b->c.mem.memoryHeaps[h].size;
    *how = "heap size";
    if (b->c.caps.memory_budget) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT mb = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
        VkPhysicalDeviceMemoryProperties2 m2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                                .pNext = &mb};
        vkGetPhysicalDeviceMemoryProperties2(b->c.phys, &m2);
        if (mb.heapBudget[h]) {
            *how = "heap budget left";
            size = mb.heapBudget[h] > mb.heapUsage[h] ? mb.heapBudget[h] - mb.heapUsage[h] : 0;
        }
    }
    if (has_fault && fault < size) {
        *how = "lowered by MEGANEURA_FAULT_DEVICE_MEMORY";
        size = fault;
    }
    return size;
}

mn_status vkb_make_arenas(vkb *b, char *err, size_t cap) {
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
    uint64_t fault_mem = 0, fault_alloc = 0;
    bool has_fault_mem, has_fault_alloc;
    mn_status st = fault_count("MEGANEURA_FAULT_DEVICE_MEMORY", &fault_mem, &has_fault_mem, err, cap);
    if (!st) st = fault_count("MEGANEURA_FAULT_ALLOC", &fault_alloc, &has_fault_alloc, err, cap);
    if (st) return st;
    /* unified memory: device-local memory that the host can map too; the
     * arenas are written in place (MEGANEURA_VK_DIRECT=0: through the
     * staging buffer, as on a discrete GPU, whose host-visible device
     * memory is a small window or slow to read) */
    const char *direct = getenv("MEGANEURA_VK_DIRECT");
    const bool uma = (b->c.caps.cpu_device || b->c.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU) &&
                     !(direct && strcmp(direct, "0") == 0);
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
            VkResult r = vkCreateBuffer(b->c.device, &bi, b->c.alloc, &b->bufs[a][k]);
            if (r != VK_SUCCESS) {
                st = vkb_fail(b, r, "vkCreateBuffer", err, cap);
                break;
            }
            VkMemoryRequirements req;
            vkGetBufferMemoryRequirements(b->c.device, b->bufs[a][k], &req);
            int type = find_memory(&b->c, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                                   uma ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0);
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
    VkDeviceSize rooms[VK_MAX_MEMORY_HEAPS] = {0};
    const char *hows[VK_MAX_MEMORY_HEAPS] = {0};
    for (uint32_t h = 0; h < b->c.mem.memoryHeapCount && !st; h++) {
        const char *how = "";
        VkDeviceSize room = need[h] ? heap_room(b, h, has_fault_mem, fault_mem, &how) : 0;
        rooms[h] = room, hows[h] = how;
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
    uint64_t nalloc = 0;
    for (int a = 0; a < MP_ARENA_COUNT && !st; a++) {
        for (uint32_t k = 0; k < b->nchunks[a] && !st; k++) {
            VkMemoryRequirements req;
            vkGetBufferMemoryRequirements(b->c.device, b->bufs[a][k], &req);
            VkMemoryDedicatedAllocateInfo ded = {.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO,
                                                 .buffer = b->bufs[a][k]};
            VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &ded};
            ai.allocationSize = req.size;
            ai.memoryTypeIndex = (uint32_t)types[a][k];
            VkResult r = has_fault_alloc && ++nalloc == fault_alloc
                             ? VK_ERROR_OUT_OF_DEVICE_MEMORY
                             : vkAllocateMemory(b->c.device, &ai, b->c.alloc, &b->mems[a][k]);
            if (r == VK_SUCCESS) r = vkBindBufferMemory(b->c.device, b->bufs[a][k], b->mems[a][k], 0);
            if (r != VK_SUCCESS) {
                st = vkb_fail(b, r, "vkAllocateMemory", err, cap);
                if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY) { /* the heap check passed: others took the memory */
                    const uint32_t h = b->c.mem.memoryTypes[types[a][k]].heapIndex;
                    mn_fmt(err, cap, "vulkan: vkAllocateMemory: out of device memory for chunk %u of the %s arena "
                           "(%llu bytes) on '%s'; the model needs %llu bytes in all, and memory heap %u had %llu "
                           "(%s) when the session checked: other programs took memory since", k, names[a],
                           (unsigned long long)req.size, b->c.props.deviceName, (unsigned long long)total, h,
                           (unsigned long long)rooms[h], hows[h] ? hows[h] : "unknown");
                    st = MN_E_NOMEM;
                }
            }
        }
    }
    /* map every chunk of a host-visible, coherent type for direct writes */
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (int a = 0; a < MP_ARENA_COUNT && !st && uma; a++) {
        bool all = b->nchunks[a] > 0;
        for (uint32_t k = 0; k < b->nchunks[a]; k++)
            all &= (b->c.mem.memoryTypes[types[a][k]].propertyFlags & hv) == hv;
        if (!all || !(b->maps[a] = calloc(b->nchunks[a], sizeof *b->maps[a]))) continue;
        for (uint32_t k = 0; k < b->nchunks[a] && b->maps[a]; k++) {
            void *ptr = NULL;
            if (vkMapMemory(b->c.device, b->mems[a][k], 0, VK_WHOLE_SIZE, 0, &ptr) != VK_SUCCESS) {
                for (uint32_t j = 0; j < k; j++) vkUnmapMemory(b->c.device, b->mems[a][j]);
                free(b->maps[a]);
                b->maps[a] = NULL; /* through the staging buffer then */
            } else {
                b->maps[a][k] = ptr;
            }
        }
    }
    for (int a = 0; a < MP_ARENA_COUNT; a++) free(types[a]);
    if (st) return st;
    /* room for every input of a step at once (a batch of images: 19 MB for
     * ResNet-50 at batch 32), so that a step's uploads go in one window
     * instead of a submit-and-wait per 16 MiB; at most STAGING_MAX */
    VkDeviceSize ins = 0;
    for (int32_t i = 0; i < b->p->g->n; i++)
        if (b->p->g->nodes[i].op == OP_INPUT && b->p->plan->slots[i].arena >= 0)
            ins += (b->p->plan->slots[i].bytes + 15) & ~(VkDeviceSize)15;
    b->staging_size = ins > STAGING_BYTES ? (ins < STAGING_MAX ? (ins + 4095) & ~(VkDeviceSize)4095 : STAGING_MAX)
                                          : STAGING_BYTES;
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


/* The one place that knows where a tensor lives on the device: its buffer,
 * the binding's offset and range, and the element offset left for pc.off.
 * The tensor lies inside one chunk of its arena (the plan sees to it), or
 * is paged: from a chunk boundary over o.pages chunks (page_info). */
operand_span vkb_operand(const vkb *b, int32_t id) {
    const mp_slot *s = &b->p->plan->slots[id];
    operand_span o = {0};
    if (b->ext_of) { /* a host buffer (bound whole, from its offset) */
        int32_t k = b->ext_of[memplan_root(b->p->g, id)] - 1;
        if (k >= 0) {
            const ext_binding *e = &b->ext[k];
            o.buf = EXT_BUF0 + (uint32_t)k;
            o.handle = e->buf;
            o.offset = e->offset;
            o.range = (s->bytes + 3) / 4 * 4;
            if (o.range < 4) o.range = 4;
            o.span = o.range;
            o.live = true;
            return o;
        }
    }
    uint64_t pages = memplan_pages(b->p->plan, id);
    if (pages) { /* page 0 here; page_info for each */
        o.buf = (uint32_t)s->arena;
        o.pages = (uint32_t)pages;
        o.at = s->offset;
        o.handle = vkb_chunk_at(b, s->arena, s->offset, &o.offset);
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
    o.handle = vkb_chunk_at(b, s->arena, s->offset, &local);
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

/* Operand j of a dispatch: its tensor, or for a range (a parallel region
 * of a multi-tensor kernel) the binding from the first tensor's start to
 * the last one's end; the plan keeps a region inside one chunk. */
operand_span vkb_operand_of(const vkb *b, const node_rt *rt, int j) {
    operand_span o = vkb_operand(b, rt->opnd[j]);
    if (!(rt->ranged & (1u << j)) || !o.live) return o;
    const mp_slot *z = &b->p->plan->slots[rt->opnd_last[j]];
    const uint32_t k = b->chunk ? (uint32_t)(o.at / b->chunk) : 0;
    const VkDeviceSize end = z->offset + z->bytes, size = chunk_size(b, (int)o.buf, k);
    MN_ASSERT(z->arena == (int8_t)o.buf && end >= o.at && (!b->chunk || end <= (VkDeviceSize)(k + 1) * b->chunk));
    o.range = (end - o.at + 3) / 4 * 4;
    if (o.offset + o.range > size) o.range = size - o.offset;
    o.span = o.range;
    return o;
}

/* Page j of paged tensor id: chunk k0 + j of its arena from its start, the
 * tensor's bytes in it. */
VkDescriptorBufferInfo vkb_page_info(const vkb *b, int32_t id, uint32_t j) {
    const mp_slot *s = &b->p->plan->slots[id];
    uint32_t k = (uint32_t)(s->offset / b->chunk) + j;
    VkDeviceSize left = (s->bytes - (VkDeviceSize)j * b->chunk + 3) / 4 * 4, size = chunk_size(b, s->arena, k);
    return (VkDescriptorBufferInfo){b->bufs[s->arena][k], 0, left < size ? left : size};
}
