/* vk_backend_impl.h - the Vulkan backend's private state (struct vkb) and
 * the functions its files share: vk_backend.c (create, transfers, recording,
 * submission, profiling; the vtable), vk_memory.c (arenas, chunks, where a
 * tensor lives), vk_pipeline.c (descriptor layouts and sets, kernels and
 * pipelines, the pipeline cache).
 *
 * Does not: define anything a caller outside src/backend/vulkan/ may use.
 */
#ifndef MN_VK_BACKEND_IMPL_H
#define MN_VK_BACKEND_IMPL_H

#include <time.h>

#include "backend/backend.h"
#include "backend/vulkan/vk_cache.h"
#include "backend/vulkan/vk_hazard.h"
#include "kir/kir.h"
#include "backend/vulkan/vk_util.h"
#include "io/file.h"

/* node lists recorded per session: the step, the forward run, two output
 * sets (mn_session_run_outputs) and, in data-parallel training, the step's
 * parts between all-reduce points (session/dist.c: at most 32 buckets + 2) */
#define MAX_RECORDED 40
/* MEGANEURA_FAULT_NO_BARRIERS (tests): 1 or "dispatch" drops the barriers
 * between dispatches; "host" drops those around uploads and readbacks and
 * at the start and end of a recorded step; "all" both. */
#define FAULT_DISPATCH 1u
#define FAULT_HOST 2u
#define STAGING_BYTES (16u << 20)
#define STAGING_MAX ((VkDeviceSize)256 << 20) /* the staging buffer grows to the step's inputs up to this */
#define RB_BYTES 4096u /* staging tail for the readback nodes */
#define PENDING_FILL 0x40 /* pending_arena flag: a vkCmdFillBuffer, not a copy (vkb_fill) */

#define MAX_OPERANDS (1 + NODE_MAX_IN) /* descriptor bindings: the output, then each input */
#define EXT_BUF0 (MP_ARENA_COUNT + 1) /* hazard ids of host buffers (MP_ARENA_COUNT: the staging buffer) */

typedef struct node_rt {
    int32_t pipe; /* index into pipes, -1: nothing to dispatch */
    int32_t lay;  /* index into lays: its descriptor-set and pipeline layouts */
    uint32_t groups[3];
    uint32_t push[8 + VK_DIMS]; /* pc.off[8], then pc.dim (vk_hoist_sizes) */
    VkDescriptorSet set; /* binding j: the tensor opnd[j] */
    /* the dispatch's operands: opnd[0] = the output (the node), then the
     * inputs (the node's, or a fused group's input tensors, kir.h) */
    int32_t opnd[MAX_OPERANDS];
    /* bit j: operand j is the range of a parallel region from opnd[j]'s
     * storage to opnd_last[j]'s end (multi-tensor kernels, vk_gen_multi.c) */
    int32_t opnd_last[MAX_OPERANDS];
    uint8_t ranged;
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
    /* program.keep_kernels: the GLSL and SPIR-V, for export_kernels (vk_bundle.c) */
    char *src;
    uint32_t *words;
    size_t nwords;
} pipe_entry;

typedef struct recorded {
    const int32_t *list;
    int32_t n;
    VkCommandBuffer cb;
    uint32_t nqueries;
    uint32_t ndispatch, nbarrier; /* what it records (MEGANEURA_PROFILE prints them) */
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

/* A tensor whose storage is a host VkBuffer range (mn_session_bind_vulkan_buffer). */
typedef struct ext_binding {
    int32_t node; /* the storage root, -1: a free slot */
    VkBuffer buf;
    VkDeviceSize offset, size;
} ext_binding;

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
    /* on a unified-memory device (a CPU implementation such as lavapipe,
     * or an integrated GPU) with host-visible, coherent arena memory: each
     * chunk mapped for the session's life, and writes go straight into it
     * (vkb_write) instead of through the staging buffer; else NULL */
    unsigned char **maps[MP_ARENA_COUNT];
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
    /* host time per build phase, ms (MEGANEURA_PROFILE prints them):
     * context, arenas, layouts + command pool, pipeline cache load, kernel
     * sources, compiles + pipelines, descriptor sets, constants */
    double phase_ms[8];
    int kernels_compiled, kernels_cached, kernels_bundled;
    bool bundle_pipelines; /* program.kernels' pipeline-cache data went into pcache */
    /* host time per phase of execute (MEGANEURA_PROFILE): staging copies,
     * upload recording, submit, wait; and the number of executes */
    double host_copy_us, host_record_us, host_submit_us, host_wait_us;
    uint64_t executes;
    VkMemoryPropertyFlags staging_flags;
    /* host buffers bound to inputs/outputs: ext_of[root] = 1 + index into ext,
     * 0: the arena (NULL until the first binding); hazard buffer id
     * EXT_BUF0 + index */
    int32_t *ext_of;
    ext_binding *ext;
    int next, cap_ext;
    bool inflight; /* a no_wait submission (mn_vulkan_submit) holds the fence */
    long fault_submits; /* MEGANEURA_FAULT_DEVICE_LOST=N: the Nth submit reports a lost device (tests) */
    unsigned no_barriers; /* MEGANEURA_FAULT_NO_BARRIERS: FAULT_* classes of barriers not recorded (tests) */
} vkb;

/* vk_memory.c: the chunk of arena a holding byte off (*local: the offset in it). */
VkBuffer vkb_chunk_at(const vkb *b, int a, VkDeviceSize off, VkDeviceSize *local);
/* vk_memory.c: the arenas' chunks (checked against the heaps first) and the staging buffer. */
mn_status vkb_make_arenas(vkb *b, char *err, size_t cap);
/* vk_memory.c: where a tensor lives: buffer, binding, element offset, hazard span. */
operand_span vkb_operand(const vkb *b, int32_t id);
/* vk_memory.c: operand j of a dispatch: vkb_operand, or a region's range. */
operand_span vkb_operand_of(const vkb *b, const node_rt *rt, int j);
/* vk_memory.c: page j of a paged tensor, as a descriptor. */
VkDescriptorBufferInfo vkb_page_info(const vkb *b, int32_t id, uint32_t j);
/* vk_pipeline.c: generates, compiles (or finds) and lays out every dispatch's kernel. */
mn_status vkb_build_kernels(vkb *b, char *err, size_t cap);
/* vk_pipeline.c: the plain descriptor-set and pipeline layouts (lays[0]). */
mn_status vkb_make_layout(vkb *b, char *err, size_t cap);
/* vk_pipeline.c: one descriptor set per dispatched node, written once. */
mn_status vkb_make_sets(vkb *b, char *err, size_t cap);
/* vk_pipeline.c: (re)writes dispatched node id's descriptor set and push
 * constants from where its operands live now (a host buffer bound later). */
mn_status vkb_write_set(vkb *b, int32_t id, char *err, size_t cap);
/* vk_pipeline.c: the on-disk pipeline cache of this device and driver (vk_cache.c). */
void vkb_pcache_load(vkb *b);
void vkb_pcache_save(vkb *b);
/* vk_bundle.c: the SPIR-V of GLSL src from program.kernels (an inference
 * bundle), checked with spirv-val: true with *words malloc'ed (free it). */
bool vkb_bundle_spirv(const vkb *b, const char *src, uint32_t **words, size_t *nwords);
/* vk_bundle.c: program.kernels' pipeline-cache data merged into pcache
 * when its header is this device's (not into a host's cache). */
void vkb_bundle_pipelines(vkb *b);
/* vk_bundle.c: backend_vtable.export_kernels and .kernel_stats. */
mn_status vkb_export_kernels(void *b, kernel_set *out, char *err, size_t cap);
void vkb_kernel_stats(void *b, mn_kernel_stats *out);
/* Records a failed Vulkan call in err (a lost device marks the backend lost). */
mn_status vkb_fail(vkb *b, VkResult r, const char *call, char *err, size_t cap);

#define VKCHECK(call, name)                                                                        \
    do {                                                                                           \
        VkResult r_ = (call);                                                                      \
        if (r_ != VK_SUCCESS) return vkb_fail(b, r_, name, err, cap);                              \
    } while (0)

#endif
