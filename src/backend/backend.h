/* backend.h - the interface every backend implements (a small vtable).
 *
 * A backend receives a program: the session's final graph, the execution order
 * and the memory plan. It owns the device memory for the plan's arenas, moves
 * bytes between host and a node's storage, and executes a list of nodes.
 * Bytes are in the storage format: f32 (or f64 in the CPU's f64 mode) for
 * float tensors, int32 for i32 tensors.
 *
 * Does not: build graphs, differentiate, plan memory, parse files.
 */
#ifndef MN_BACKEND_H
#define MN_BACKEND_H

#include "graph/graph.h"
#include "memplan/memplan.h"

#define PROGRAM_MAX_READBACK 4

/* Precompiled kernels (an inference bundle, src/session/bundle.c): SPIR-V
 * keyed as the on-disk SPIR-V cache keys it (SHA-256 of the compiler
 * identity and the GLSL source), with that source, and the exporting
 * device's pipeline-cache data. A backend that compiles kernels asks it
 * before its caches and its compiler; one exporting fills it. */
typedef struct kernel_entry {
    uint8_t key[32];
    char *src;       /* the GLSL, NUL-terminated */
    uint32_t *words; /* its SPIR-V */
    size_t nwords;
} kernel_entry;

typedef struct kernel_set {
    char *compiler_id; /* of the compiler that made the words (vk_compiler_id) */
    uint32_t vendor_id, device_id, driver_version, api_version;
    char device_name[256];
    kernel_entry *k; /* sorted by key, no two alike */
    int n;
    void *pipeline; /* the device's VkPipelineCache data (its own header first), or NULL */
    size_t pipeline_bytes;
} kernel_set;
/* Frees what a kernel_set owns (a zeroed one is fine). */
void kernel_set_free(kernel_set *ks);
/* Sorts ks->k by key and drops repeated keys (the export's dedup). */
void kernel_set_sort(kernel_set *ks);

typedef struct program {
    const mn_graph *g;
    const int32_t *order; /* every non-source node that runs in a step, in order */
    int32_t norder;
    const memplan *plan;
    bool f64; /* CPU only: float tensors are stored and computed as double */
    void *device; /* a shared device from device_open, or NULL: the backend opens its own */
    /* Small computed nodes the session reads after most executes (the loss,
     * the non-finite gate): a backend may copy them to host memory as part
     * of the execute so that reading them costs no extra round trip. */
    int32_t readback[PROGRAM_MAX_READBACK];
    int nreadback;
    /* The kernel plan (kir.h): kernel_root[i] != i for a node folded into
     * kernel_root[i]'s kernel (no storage, nothing to dispatch; its root,
     * later in order, computes it). NULL: every node is its own kernel.
     * Only for backends with fuse_pointwise. */
    const int32_t *kernel_root;
    /* kernel_kind[r]: the kir_kind of the kernel rooted at r (kir.h), or NULL */
    const uint8_t *kernel_kind;
    /* kernel_saved[r]: the node (kind KIR_SAVED) whose value the kernel
     * rooted at r writes beside its own, or MN_NONE; NULL: none anywhere */
    const int32_t *kernel_saved;
    /* Optional: kernels to take before compiling (kernel_set above; the
     * backend may use it only while create runs). */
    const kernel_set *kernels;
    /* Keep every kernel's source and binary after create, for
     * export_kernels (inference sessions). */
    bool keep_kernels;
} program;

typedef struct backend_vtable {
    const char *name;
    /* Generates one kernel for a group of pointwise nodes (kir.h). */
    bool fuse_pointwise;
    mn_status (*create)(void **out, const program *p, char *err, size_t cap);
    void (*destroy)(void *b);
    mn_status (*write)(void *b, int32_t node, const void *src, size_t bytes, char *err, size_t cap);
    mn_status (*read)(void *b, int32_t node, void *dst, size_t bytes, char *err, size_t cap);
    /* Sets every 32-bit word of the node's storage to pattern (0: zeros, in
     * any storage format) without moving its bytes from the host; ordered
     * with write like another write. */
    mn_status (*fill)(void *b, int32_t node, uint32_t pattern, char *err, size_t cap);
    /* Optional: *ptr = host memory holding the node's bytes (bytes of them,
     * contiguous), which the caller may fill instead of calling write, until
     * its next call into the backend; ordered after earlier writes and
     * fills. *ptr NULL (MN_OK) when the backend cannot: write then. The CPU
     * arenas, and on Vulkan a unified-memory device's mapped arenas. */
    mn_status (*map_write)(void *b, int32_t node, size_t bytes, void **ptr, char *err, size_t cap);
    /* Runs nodes[0..n) (a subsequence of program.order) in that order. */
    mn_status (*execute)(void *b, const int32_t *nodes, int32_t n, char *err, size_t cap);
    /* Optional (NULL for backends without a device to share). */
    mn_status (*device_open)(void **dev, char *err, size_t cap);
    void (*device_close)(void *dev);
    /* Optional: the most bytes one tensor may occupy on dev (a device from
     * device_open), known before the memory plan is built: the session plans
     * in chunks of this size (memplan_options.chunk_bytes). NULL: no limit. */
    uint64_t (*max_binding)(void *dev);
    /* Optional: whether dev multiplies the fast contract's operands of this
     * rounding (mn_round16) on cooperative matrices, where operands already
     * rounded by cast nodes save the GEMM's own per-element rounding: the
     * session then casts them (session.c, round_by_cast). NULL: never. */
    bool (*casts_operands)(void *dev, int rounding);
    /* Whether the backend's kernels store those casts packed, two 16-bit
     * values a 32-bit word (NODE_F_PACK16: the cast writes that form, the
     * products read it), so that an operand copy takes half an f32
     * tensor's bytes and the GEMM half its reads. */
    bool packs_operands;
    /* Optional: whether dev's kernels may store a packed cast's 16-bit
     * values themselves (kir_options.fuse_store16: the cast folds into the
     * kernel of its producer). NULL: never. */
    bool (*stores16)(void *dev);
    /* Optional (Vulkan, include/meganeura_vulkan.h): a device over a host's
     * handles (desc: const mn_vulkan_device_desc *), closed by device_close;
     * storage root `node` bound to a host buffer (const mn_vulkan_buffer *);
     * execute with the host's semaphores (const mn_vulkan_submit *, NULL: as
     * execute). */
    mn_status (*device_wrap)(void **dev, const void *desc, char *err, size_t cap);
    mn_status (*bind_external)(void *b, int32_t node, const void *buf, char *err, size_t cap);
    mn_status (*execute_sync)(void *b, const int32_t *nodes, int32_t n, const void *sub, char *err, size_t cap);
    /* Optional (Vulkan): the program's kernels (program.keep_kernels) and
     * this device's pipeline-cache data for an inference bundle, into *out
     * (zeroed; kernel_set_free it); where the kernels came from. NULL: the
     * backend has no kernels to ship (cpu) and counts nothing. */
    mn_status (*export_kernels)(void *b, kernel_set *out, char *err, size_t cap);
    void (*kernel_stats)(void *b, mn_kernel_stats *out);
} backend_vtable;

/* Device choice (device_pick.c). type_rank: 0 discrete GPU, 1 integrated,
 * 2 virtual, 3 CPU, 4 other. want (MEGANEURA_DEVICE): an index, or a name
 * substring (case-insensitive; the first match). Else the best kind present
 * and, with local_rank >= 0 (a process started by an MPI launcher), the
 * (local_rank mod count)-th device of that kind, so the ranks on one host
 * take different GPUs. Returns the index, or -1 with a message in err. */
typedef struct backend_device_desc {
    const char *name;
    int type_rank;
} backend_device_desc;
int backend_pick_device(const backend_device_desc *d, int n, const char *want, int local_rank, char *err,
                        size_t cap);
/* The process's rank among those on its host as the launcher tells it:
 * MEGANEURA_LOCAL_RANK, else OMPI_COMM_WORLD_LOCAL_RANK (Open MPI's mpirun);
 * -1 when neither is set. */
int backend_local_rank(void);

/* The vtable of a backend kind, or NULL if this build lacks it. */
const backend_vtable *backend_for(mn_backend_kind kind);

extern const backend_vtable backend_cpu;
#ifdef MN_HAVE_VULKAN
extern const backend_vtable backend_vulkan;
#endif

#endif
