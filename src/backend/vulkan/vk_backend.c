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
 * This file: create and destroy, transfers (write, fill, read), hazards and
 * recording, submission, profiling, the vtable. Arenas and where a tensor
 * lives: vk_memory.c; layouts, descriptor sets, kernels and pipelines:
 * vk_pipeline.c; the shared state: vk_backend_impl.h.
 *
 * Does not: generate GLSL (vk_codegen*.c), pick devices (vk_device.c).
 */
#include "backend/vulkan/vk_backend_impl.h"
#include "meganeura_vulkan.h"


mn_status vkb_fail(vkb *b, VkResult r, const char *call, char *err, size_t cap) {
    if (r == VK_ERROR_DEVICE_LOST) b->lost = true;
    mn_fmt(err, cap, "vulkan: %s: %s%s", call, vk_result_name(r),
           r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? " (the model does not fit in device memory)" : "");
    return r == VK_ERROR_OUT_OF_HOST_MEMORY ? MN_E_NOMEM : MN_E_BACKEND;
}

/* ---- hazards ------------------------------------------------------------- */

/* The byte ranges dispatch `id` reads and writes: every input is read (its
 * binding is readonly unless written), the output and the inputs the kernel
 * updates in place are written. Appends to acc; returns the count. */
static int node_accesses(const vkb *b, int32_t id, vk_access *acc) {
    const node_rt *rt = &b->rt[id];
    int na = 0;
    for (int k = 0; k < rt->nopnd; k++) {
        operand_span o = vkb_operand_of(b, rt, k);
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
        return vkb_fail(b, r, "vkAllocateCommandBuffers / vkBeginCommandBuffer", err, cap);
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
        rc->ndispatch++;
        if (bar[i]) {
            rc->nbarrier++;
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
        VkBuffer src = vkb_chunk_at(b, s->arena, s->offset, &reg.srcOffset);
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

/* Waits for the fence of the last submission (spinning briefly first). */
static mn_status wait_fence(vkb *b, double t1, char *err, size_t cap) {
    /* Small steps finish in tens of microseconds: poll the fence for up to
     * 2 ms (as CUDA's default synchronisation spins) so the latency does not
     * depend on how the driver decides to sleep, then block. Not on a CPU
     * device (lavapipe), whose workers need the cores a spin would take. */
    double until = mn_now_us() + (b->c.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0.0 : 2000.0);
    for (;;) {
        VkResult r = vkGetFenceStatus(b->c.device, b->fence);
        if (r == VK_SUCCESS) {
            if (b->profile) b->host_wait_us += mn_now_us() - t1;
            return MN_OK;
        }
        if (r != VK_NOT_READY) return vkb_fail(b, r, "vkGetFenceStatus", err, cap);
        if (mn_now_us() > until) break;
    }
    VKCHECK(vkWaitForFences(b->c.device, 1, &b->fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    if (b->profile) b->host_wait_us += mn_now_us() - t1;
    return MN_OK;
}

/* An earlier no_wait submission (mn_vulkan_submit) done: its fence, command
 * buffers and staging bytes are free again. */
static mn_status settle(vkb *b, char *err, size_t cap) {
    if (!b->inflight) return MN_OK;
    b->inflight = false;
    return wait_fence(b, mn_now_us(), err, cap);
}

/* Submits cbs on the session's queue with the host's semaphores (sub, may
 * be NULL), then waits for it unless sub->no_wait. */
static mn_status submit_sync(vkb *b, VkCommandBuffer *cbs, uint32_t n, const mn_vulkan_submit *sub, char *err,
                             size_t cap) {
    mn_status st = settle(b, err, cap);
    if (st) return st;
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = n;
    si.pCommandBuffers = cbs;
    VkPipelineStageFlags stages[16];
    VkTimelineSemaphoreSubmitInfo ti = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    if (sub) {
        si.waitSemaphoreCount = sub->wait_count;
        si.pWaitSemaphores = sub->wait_semaphores;
        si.pWaitDstStageMask = sub->wait_stages ? sub->wait_stages : stages;
        for (uint32_t i = 0; i < sub->wait_count && !sub->wait_stages; i++)
            stages[i] = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
        si.signalSemaphoreCount = sub->signal_count;
        si.pSignalSemaphores = sub->signal_semaphores;
        if (sub->wait_values || sub->signal_values) {
            ti.waitSemaphoreValueCount = sub->wait_values ? sub->wait_count : 0;
            ti.pWaitSemaphoreValues = sub->wait_values;
            ti.signalSemaphoreValueCount = sub->signal_values ? sub->signal_count : 0;
            ti.pSignalSemaphoreValues = sub->signal_values;
            si.pNext = &ti;
        }
    }
    VKCHECK(vkResetFences(b->c.device, 1, &b->fence), "vkResetFences");
    if (b->fault_submits > 0 && --b->fault_submits == 0)
        return vkb_fail(b, VK_ERROR_DEVICE_LOST, "vkQueueSubmit (injected fault)", err, cap);
    double t0 = b->profile ? mn_now_us() : 0;
    VKCHECK(vkQueueSubmit(b->c.queue, 1, &si, b->fence), "vkQueueSubmit");
    double t1 = b->profile ? mn_now_us() : 0;
    b->host_submit_us += t1 - t0;
    if (sub && sub->no_wait) {
        b->inflight = true;
        return MN_OK;
    }
    return wait_fence(b, t1, err, cap);
}

static mn_status submit_wait(vkb *b, VkCommandBuffer *cbs, uint32_t n, char *err, size_t cap) {
    return submit_sync(b, cbs, n, NULL, err, cap);
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
            VkBuffer dst = vkb_chunk_at(b, (int)(b->pending_arena[i] & ~PENDING_FILL), reg.dstOffset, &reg.dstOffset);
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
    if (!st && r != VK_SUCCESS) st = vkb_fail(b, r, "recording uploads", err, cap);
    return st;
}

static mn_status flush_uploads(vkb *b, char *err, size_t cap) {
    if (!b->npending) return MN_OK;
    mn_status st = settle(b, err, cap); /* upload_cb may be pending */
    if (!st) st = record_uploads(b, err, cap);
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
    if (st || (st = settle(b, err, cap))) return st; /* the staging bytes may still be read */
    const mp_slot *s = &b->p->plan->slots[id];
    if (s->arena < 0 || bytes != s->bytes) {
        mn_fmt(err, cap, "vulkan: write of %zu bytes to node %d (%s), whose storage is %llu bytes", bytes, id,
               op_table[b->p->g->nodes[id].op].name, (unsigned long long)s->bytes);
        return MN_E_INVALID;
    }
    int k = rb_index(b, id);
    if (k >= 0) b->rb_fresh[k] = false; /* the host overwrites it */
    if (b->maps[s->arena]) {
        /* unified memory: straight into the mapped arena, after the uploads
         * and fills queued before (they must not land later); the device is
         * idle (settled), and a coherent write before the next submission
         * is visible to it */
        if ((st = flush_uploads(b, err, cap))) return st;
        double t0 = b->profile ? mn_now_us() : 0;
        for (size_t done = 0; done < bytes;) { /* one piece per arena chunk (a paged tensor) */
            const VkDeviceSize at = s->offset + done, in = at % b->chunk;
            size_t piece = bytes - done;
            if (piece > b->chunk - in) piece = (size_t)(b->chunk - in);
            mn_copy(b->maps[s->arena][at / b->chunk] + in, (const unsigned char *)src + done, piece);
            done += piece;
        }
        if (b->profile) b->host_copy_us += mn_now_us() - t0;
        return MN_OK;
    }
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
        double t0 = b->profile ? mn_now_us() : 0;
        mn_copy(b->staging_map + b->staging_used, (const unsigned char *)src + done, chunk);
        if (b->profile) b->host_copy_us += mn_now_us() - t0;
        b->pending[b->npending] = (VkBufferCopy){b->staging_used, s->offset + done, chunk};
        b->pending_arena[b->npending++] = s->arena;
        b->staging_used = (b->staging_used + chunk + 15) & ~(VkDeviceSize)15;
        done += chunk;
    }
    return MN_OK;
}

/* The mapped arena bytes of a node that lies in one chunk of a mapped
 * arena (unified memory), after the uploads and fills queued before; NULL
 * otherwise. */
static mn_status vkb_map_write(void *bp, int32_t id, size_t bytes, void **ptr, char *err, size_t cap) {
    vkb *b = bp;
    *ptr = NULL;
    mn_status st = check_usable(b, err, cap);
    if (st || (st = settle(b, err, cap))) return st;
    const mp_slot *s = &b->p->plan->slots[id];
    if (s->arena < 0 || bytes != s->bytes || !bytes || !b->maps[s->arena] ||
        s->offset % b->chunk + bytes > b->chunk)
        return MN_OK;
    if ((st = flush_uploads(b, err, cap))) return st;
    int k = rb_index(b, id);
    if (k >= 0) b->rb_fresh[k] = false;
    *ptr = b->maps[s->arena][s->offset / b->chunk] + s->offset % b->chunk;
    return MN_OK;
}

/* Queues a vkCmdFillBuffer of the node's storage into the next upload
 * submission (a pending entry marked PENDING_FILL whose srcOffset holds the
 * pattern): no bytes go through the staging buffer. */
static mn_status vkb_fill(void *bp, int32_t id, uint32_t pattern, char *err, size_t cap) {
    vkb *b = bp;
    mn_status st = check_usable(b, err, cap);
    if (st || (st = settle(b, err, cap))) return st;
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
    if (st || (st = settle(b, err, cap)) || (st = flush_uploads(b, err, cap))) return st;
    const mp_slot *s = &b->p->plan->slots[id];
    if (s->arena < 0 || bytes != s->bytes) {
        mn_fmt(err, cap, "vulkan: read of %zu bytes from node %d (%s), whose storage is %llu bytes", bytes, id,
               op_table[b->p->g->nodes[id].op].name, (unsigned long long)s->bytes);
        return MN_E_INVALID;
    }
    int k = rb_index(b, id);
    if (k >= 0 && b->rb_fresh[k]) { /* copied by the last execute: no round trip */
        mn_copy(dst, b->staging_map + b->staging_size + b->rb_off[k], bytes);
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
        VkBuffer src = vkb_chunk_at(b, s->arena, s->offset + done, &reg.srcOffset);
        vkCmdCopyBuffer(b->once_cb, src, b->staging, 1, &reg);
        barrier(b, FAULT_HOST, b->once_cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
        VKCHECK(vkEndCommandBuffer(b->once_cb), "vkEndCommandBuffer");
        if ((st = submit_wait(b, &b->once_cb, 1, err, cap))) return st;
        mn_copy((unsigned char *)dst + done, b->staging_map, chunk);
        done += chunk;
    }
    return MN_OK;
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
                        "\"pid\":1,\"tid\":1,\"args\":{\"node\":%d,\"execute\":%llu}}",
                        b->trace_first ? "" : ",\n", op_table[b->p->g->nodes[id].op].name, start, ns / 1e3, id,
                        (unsigned long long)b->executes);
                b->trace_first = false;
            }
            q += 2;
        }
    }
    free(ts);
}

static mn_status execute_sync(vkb *b, const int32_t *list, int32_t n, const mn_vulkan_submit *sub, char *err,
                              size_t cap) {
    mn_status st = check_usable(b, err, cap);
    if (st || (st = settle(b, err, cap))) return st; /* its command buffers may be pending */
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
        double t0 = b->profile ? mn_now_us() : 0;
        if ((st = record_uploads(b, err, cap))) return st;
        if (b->profile) b->host_record_us += mn_now_us() - t0;
        cbs[ncb++] = b->upload_cb;
    }
    b->executes++;
    cbs[ncb++] = rc->cb;
    b->trace_clock_us = mn_now_us();
    st = submit_sync(b, cbs, ncb, sub, err, cap);
    b->npending = 0;
    b->staging_used = 0;
    /* a no_wait submission's readbacks are not there yet: read them the slow way */
    for (int k = 0; k < b->p->nreadback; k++) b->rb_fresh[k] = !st && !b->inflight && (rc->rb_mask >> k & 1u);
    if (!st && !b->inflight && b->profile) collect_profile(b, rc);
    return st;
}

static mn_status vkb_execute(void *bp, const int32_t *list, int32_t n, char *err, size_t cap) {
    return execute_sync(bp, list, n, NULL, err, cap);
}

static mn_status vkb_execute_sync(void *bp, const int32_t *list, int32_t n, const void *sub, char *err, size_t cap) {
    vkb *b = bp;
    const mn_vulkan_submit *su = sub;
    if (su && (su->wait_count > 16 || (su->wait_count && !su->wait_semaphores) ||
               (su->signal_count && !su->signal_semaphores))) {
        mn_fmt(err, cap, "vulkan: run_vulkan: %s", su->wait_count > 16 ? "at most 16 wait semaphores"
                                                   : "a semaphore count without its array");
        return MN_E_INVALID;
    }
    if (su && (su->wait_values || su->signal_values) && !b->c.timeline) {
        mn_fmt(err, cap, "vulkan: run_vulkan: timeline semaphore values given, but the device %s",
               b->c.external ? "was not described with timelineSemaphore enabled (Vulkan 1.2)"
                             : "is the library's own (it enables no timeline semaphores)");
        return MN_E_UNSUPPORTED;
    }
    return execute_sync(b, list, n, su, err, cap);
}

/* ---- host buffers (meganeura_vulkan.h) ------------------------------------ */

/* Binds storage root `id` to the host's buffer range (NULL handle: unbinds),
 * rewrites the descriptor sets that use it and drops the recorded command
 * buffers (recorded again at the next execute). */
static mn_status vkb_bind_external(void *bp, int32_t id, const void *bufp, char *err, size_t cap) {
    vkb *b = bp;
    const mn_vulkan_buffer *hb = bufp;
    mn_status st = check_usable(b, err, cap);
    if (st || (st = settle(b, err, cap))) return st;
    const mp_slot *sl = &b->p->plan->slots[id];
    const node *n = &b->p->g->nodes[id];
    const char *name = n->name ? n->name : op_table[n->op].name;
    if (memplan_root(b->p->g, id) != id || sl->arena != MP_ARENA_IO) {
        mn_fmt(err, cap, "vulkan: '%s' has no storage of its own (a view of another tensor): it cannot be bound to "
               "a host buffer", name);
        return MN_E_UNSUPPORTED;
    }
    if (hb && hb->buffer) {
        if (hb->offset % b->c.caps.offset_align) {
            mn_fmt(err, cap, "vulkan: '%s': host buffer offset %llu is not a multiple of minStorageBufferOffsetAlignment "
                   "(%u)", name, (unsigned long long)hb->offset, b->c.caps.offset_align);
            return MN_E_INVALID;
        }
        if (hb->size < sl->bytes) {
            mn_fmt(err, cap, "vulkan: '%s': host buffer range of %llu bytes, the tensor needs %llu", name,
                   (unsigned long long)hb->size, (unsigned long long)sl->bytes);
            return MN_E_INVALID;
        }
        if (sl->bytes > b->c.props.limits.maxStorageBufferRange) {
            mn_fmt(err, cap, "vulkan: '%s': %llu bytes, more than one storage binding on '%s' holds (%u)", name,
                   (unsigned long long)sl->bytes, b->c.props.deviceName, b->c.props.limits.maxStorageBufferRange);
            return MN_E_UNSUPPORTED;
        }
    }
    if (!b->ext_of && !(b->ext_of = calloc((size_t)b->p->g->n + 1, sizeof *b->ext_of))) return MN_E_NOMEM;
    int32_t k = b->ext_of[id] - 1;
    if (hb && hb->buffer) {
        if (k < 0) {
            for (int i = 0; i < b->next && k < 0; i++)
                if (b->ext[i].node < 0) k = i;
            if (k < 0) {
                if (b->next == b->cap_ext) {
                    int c2 = b->cap_ext ? 2 * b->cap_ext : 8;
                    ext_binding *ne = realloc(b->ext, (size_t)c2 * sizeof *ne);
                    if (!ne) return MN_E_NOMEM;
                    b->ext = ne, b->cap_ext = c2;
                }
                k = b->next++;
            }
        }
        b->ext[k] = (ext_binding){id, hb->buffer, hb->offset, hb->size};
        b->ext_of[id] = k + 1;
    } else if (k >= 0) {
        b->ext[k].node = -1;
        b->ext_of[id] = 0;
    } else {
        return MN_OK; /* not bound: nothing changes */
    }
    /* every dispatch with an operand stored in id */
    for (int32_t i = 0; i < b->p->norder && !st; i++) {
        int32_t d = b->p->order[i];
        const node_rt *rt = &b->rt[d];
        if (rt->pipe < 0) continue;
        bool uses = false;
        for (int j = 0; j < rt->nopnd && !uses; j++) uses = memplan_root(b->p->g, rt->opnd[j]) == id;
        if (uses) st = vkb_write_set(b, d, err, cap);
    }
    for (int i = 0; i < b->nrec; i++)
        if (b->rec[i].cb) vkFreeCommandBuffers(b->c.device, b->pool, 1, &b->rec[i].cb);
    b->nrec = 0;
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
    fprintf(stderr, "  session build %.1f ms (%d kernels compiled, %d from the cache, %d from the bundle%s)\n",
            b->build_ms, b->kernels_compiled, b->kernels_cached, b->kernels_bundled,
            b->bundle_pipelines ? ", with its pipeline cache" : "");
    for (int i = 0; i < b->nrec; i++)
        fprintf(stderr, "  command buffer %d: %u dispatches, %u barriers between them\n", i, b->rec[i].ndispatch,
                b->rec[i].nbarrier);
    const double *ph = b->phase_ms;
    fprintf(stderr, "  backend build phases, ms: context %.1f, arenas %.1f, layouts %.1f, pipeline cache %.1f, "
            "kernel sources %.1f, compiles and pipelines %.1f, descriptor sets %.1f, constants %.1f\n",
            ph[0], ph[1], ph[2], ph[3], ph[4], ph[5], ph[6], ph[7]);
    if (b->executes) {
        double n = (double)b->executes;
        fprintf(stderr, "  host per execute: staging copies %.1f us, upload recording %.1f us, submit %.1f us, "
                "wait %.1f us (%llu executes)\n", b->host_copy_us / n, b->host_record_us / n,
                b->host_submit_us / n, b->host_wait_us / n, (unsigned long long)b->executes);
        int mapped = 0;
        for (int a = 0; a < MP_ARENA_COUNT; a++) mapped += b->maps[a] != NULL;
        fprintf(stderr, "  staging memory: host cached %s, device local %s; arenas written in place (unified "
                "memory): %d of %d\n",
                b->staging_flags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? "yes" : "no",
                b->staging_flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT ? "yes" : "no", mapped, MP_ARENA_COUNT);
    }
}

static void vkb_destroy(void *bp) {
    vkb *b = bp;
    if (!b) return;
    VkDevice d = b->c.device;
    if (d) {
        /* a host's device: wait for our own submissions only (waiting for the
         * device would need every queue of the host externally synchronised) */
        if (b->c.external) {
            char e[8];
            settle(b, e, sizeof e);
        } else {
            vkDeviceWaitIdle(d);
        }
        if (b->profile && b->prof) print_profile(b);
        vkb_pcache_save(b);
        for (int i = 0; i < b->npipes; i++) {
            vkDestroyPipeline(d, b->pipes[i].pipeline, b->c.alloc);
            vkDestroyShaderModule(d, b->pipes[i].module, b->c.alloc);
        }
        for (int i = 0; i < b->npipes; i++) free(b->pipes[i].src), free(b->pipes[i].words);
        if (b->pcache && b->pcache != b->c.host_pcache) vkDestroyPipelineCache(d, b->pcache, b->c.alloc);
        if (b->qpool) vkDestroyQueryPool(d, b->qpool, b->c.alloc);
        if (b->fence) vkDestroyFence(d, b->fence, b->c.alloc);
        if (b->pool) vkDestroyCommandPool(d, b->pool, b->c.alloc);
        if (b->dpool) vkDestroyDescriptorPool(d, b->dpool, b->c.alloc);
        for (int i = 0; i < b->nlays; i++) {
            if (b->lays[i].layout) vkDestroyPipelineLayout(d, b->lays[i].layout, b->c.alloc);
            if (b->lays[i].dsl) vkDestroyDescriptorSetLayout(d, b->lays[i].dsl, b->c.alloc);
        }
        if (b->staging) vkDestroyBuffer(d, b->staging, b->c.alloc);
        if (b->staging_mem) vkFreeMemory(d, b->staging_mem, b->c.alloc);
        for (int a = 0; a < MP_ARENA_COUNT; a++)
            for (uint32_t k = 0; k < b->nchunks[a]; k++) {
                if (b->bufs[a] && b->bufs[a][k]) vkDestroyBuffer(d, b->bufs[a][k], b->c.alloc);
                if (b->mems[a] && b->mems[a][k]) vkFreeMemory(d, b->mems[a][k], b->c.alloc);
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
        free(b->maps[a]); /* unmapped by vkFreeMemory */
    }
    free(b->ext_of);
    free(b->ext);
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
    double t0 = mn_now_us();
    vkb *b = calloc(1, sizeof *b);
    if (!b) return MN_E_NOMEM;
    b->p = p;
    b->rt = calloc((size_t)p->g->n + 1, sizeof *b->rt);
    b->prof = calloc((size_t)p->g->n + 1, sizeof *b->prof);
    mn_status st = b->rt && b->prof ? MN_OK : MN_E_NOMEM;
    double tp = t0;
#define PHASE(k) (b->phase_ms[k] += (mn_now_us() - tp) / 1e3, tp = mn_now_us())
    if (!st && p->device) {
        b->c = *(const vk_ctx *)p->device; /* shared: the device outlives this session */
    } else if (!st) {
        st = vk_ctx_create(&b->c, err, cap);
        b->owns_ctx = true;
    }
    PHASE(0);
    if (!st) st = vkb_make_arenas(b, err, cap);
    PHASE(1);
    if (!st) st = vkb_make_layout(b, err, cap);
    if (!st) {
        VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pi.queueFamilyIndex = b->c.queue_family;
        VkResult r = vkCreateCommandPool(b->c.device, &pi, b->c.alloc, &b->pool);
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        ai.commandPool = b->pool;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        if (r == VK_SUCCESS) r = vkAllocateCommandBuffers(b->c.device, &ai, &b->upload_cb);
        if (r == VK_SUCCESS) r = vkAllocateCommandBuffers(b->c.device, &ai, &b->once_cb);
        VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        if (r == VK_SUCCESS) r = vkCreateFence(b->c.device, &fi, b->c.alloc, &b->fence);
        if (r != VK_SUCCESS) st = vkb_fail(b, r, "command pool / fence creation", err, cap);
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
        if (vkCreateQueryPool(b->c.device, &qi, b->c.alloc, &b->qpool) != VK_SUCCESS) b->qpool = VK_NULL_HANDLE;
        if (tr && *tr) {
            b->trace = fopen(tr, "w");
            if (!b->trace) mn_logf(MN_LOG_WARN, "MEGANEURA_TRACE: cannot write '%s'", tr);
            else fprintf(b->trace, "{\"traceEvents\":[\n"), b->trace_first = true;
        }
    }
    PHASE(2);
    if (!st) {
        vkb_pcache_load(b);
        vkb_bundle_pipelines(b);
        PHASE(3);
        st = vkb_build_kernels(b, err, cap); /* phases 4 and 5 */
        tp = mn_now_us();
    }
    if (!st) st = vkb_make_sets(b, err, cap);
    PHASE(6);
    /* constants live in the io arena: upload them once */
    for (int32_t i = 0; !st && i < p->g->n; i++) {
        const node *n = &p->g->nodes[i];
        if (n->op == OP_CONST && p->plan->slots[i].arena >= 0)
            st = vkb_write(b, i, n->data, (size_t)node_numel(n) * 4, err, cap);
    }
    if (!st) st = flush_uploads(b, err, cap);
    PHASE(7);
#undef PHASE
    b->build_ms = (mn_now_us() - t0) / 1e3;
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

static mn_status vk_device_wrap(void **out, const void *desc, char *err, size_t cap) {
    vk_ctx *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return MN_E_NOMEM;
    mn_status st = vk_ctx_wrap(c, desc, err, cap);
    if (st) {
        free(c);
        return st;
    }
    *out = c;
    return MN_OK;
}

static uint64_t vk_device_max_binding(void *dev) { return ((const vk_ctx *)dev)->caps.max_binding; }

static bool vk_device_casts_operands(void *dev, int rounding) {
    return vk_coopmat_available(&((const vk_ctx *)dev)->caps, (mn_round16)rounding);
}

static bool vk_device_stores16(void *dev) { return ((const vk_ctx *)dev)->caps.store16; }

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
    .map_write = vkb_map_write,
    .execute = vkb_execute,
    .device_open = vk_device_open,
    .device_close = vk_device_close,
    .device_wrap = vk_device_wrap,
    .bind_external = vkb_bind_external,
    .execute_sync = vkb_execute_sync,
    .max_binding = vk_device_max_binding,
    .casts_operands = vk_device_casts_operands,
    .packs_operands = true,
    .stores16 = vk_device_stores16,
    .export_kernels = vkb_export_kernels,
    .kernel_stats = vkb_kernel_stats,
};

/* Used by `meganeura devices` through the public API. */
mn_status mn_list_devices(FILE *f) {
    char err[512];
    mn_status st = vk_list_devices(f ? f : stdout, err, sizeof err);
    if (st) fprintf(stderr, "meganeura: %s\n", err);
    return st;
}
