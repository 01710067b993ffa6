/* vk_codegen.h - GLSL compute source for each scheduled node.
 *
 * A kernel is a template (kernels/<name>.glsl, embedded into the binary at
 * build time) specialised by #define lines: shapes, strides, which inputs are
 * read-only, the expression of a pointwise op. The full source is
 *   #version + LOCAL_X/Y/Z + the node's defines + kernels/preamble.glsl
 *   + kernels/mathlib.glsl (exp, log to ~1 ulp) + the template.
 *
 * Conventions every template relies on (set up by the preamble):
 * - one storage buffer of floats per operand: binding 0 = the output, 1 + i
 *   = input i, each bound by the runtime to exactly its tensor's bytes;
 *   X<i>_ACCESS is `readonly` for every input the kernel does not write
 *   (vk_input_written), so validation sees reads as reads;
 * - push constants pc.off[0] = output offset, pc.off[1 + i] = input i's
 *   offset, in 4-byte elements from the start of its binding (0 unless the
 *   tensor's offset is finer than minStorageBufferOffsetAlignment);
 * - Y(i) = v writes element i of the output (Y is never read), X0(i) ..
 *   X5(i) read element i of input k, X<k>_WR(i) = v writes an input the
 *   kernel updates in place; X<i>I(i) reads an int32 tensor element; Y_N,
 *   X<i>_N are element counts (IDX: uint, or uint64_t with MN_IDX64);
 * - a paged operand (larger than one binding: memplan_pages) is an array of
 *   <op>_PAGES bindings of 2^<op>_SHIFT elements each (Y_PAGES, X0_PAGES ..);
 *   the macros above hide it (preamble.glsl); MN_NONUNIFORM when the device
 *   indexes descriptor arrays non-uniformly. Defined only when paged;
 * - GID is the flattened global invocation index over a 2-D grid (so more
 *   than 65535 workgroups work), NTHREADS the total invocation count;
 * - IDX / SIDX are the types of element indices and offsets: uint / int, or
 *   uint64_t / int64_t in a kernel of 64-bit indexing (MN_IDX64: an operand
 *   has more than vk_caps.index_max elements, vk_codegen_node); the
 *   generators write sizes, strides and dimensions with the literal suffix
 *   of that type (vk_def_u, vk_def_i), so products of them do not wrap;
 * - mathlib.glsl provides MN_INF, MN_NAN, mn_exp and mn_log (about 1 ulp).
 *
 * Does not: compile (vk_compile.c), record or run anything (vk_backend.c).
 */
#ifndef MN_VK_CODEGEN_H
#define MN_VK_CODEGEN_H

#include "graph/attrs.h"
#include "graph/graph.h"
#include "memplan/memplan.h"

/* The device's capabilities and limits: the one place that defines every
 * limit the generators and the runtime obey. Filled once when the device is
 * opened (vk_device.c read_caps); tests fill the fields they need (0 in a
 * limit field means the default noted). */
typedef struct vk_caps {
    uint32_t subgroup_size;
    uint32_t max_shared_bytes;
    uint32_t max_invocations;
    uint32_t max_groups[3];
    bool fp16, bf16, coopmat;
    /* cooperative matrices the fast contract's GEMM uses (vk_gen_coopmat.c):
     * 16x16x16 fragments at subgroup scope with f32 accumulators, f16 or
     * bf16 operands, through VK_KHR_cooperative_matrix (+ shaderFloat16, or
     * VK_KHR_shader_bfloat16's cooperative-matrix types), or f16 through
     * VK_NV_cooperative_matrix; the Vulkan memory model enabled */
    bool coopmat_f16, coopmat_bf16, coopmat_nv_f16;
    bool memory_budget; /* VK_EXT_memory_budget: heap budgets known */
    /* bytes one storage binding, one buffer and one allocation may hold: the
     * least of maxStorageBufferRange, maxMemoryAllocationSize, maxBufferSize
     * (maintenance4), aligned down to 256, and MEGANEURA_VK_MAX_ALLOCATION
     * (aligned down to 64).
     * Arenas are split into chunks of this size (a power of two when a
     * tensor is larger: it is paged over several, see memplan_pages). */
    uint64_t max_binding;
    uint64_t device_binding; /* the same from the device alone (messages) */
    uint32_t offset_align;   /* minStorageBufferOffsetAlignment, at least 4 */
    /* the most elements an operand of a kernel with 32-bit index arithmetic
     * may have (2^31 - 1: signed 32-bit, or lower with MEGANEURA_VK_INDEX_MAX);
     * a kernel with a larger operand is generated with 64-bit indices
     * (MN_IDX64), which needs int64 (shaderInt64). 0: VK_INDEX_MAX_DEFAULT */
    int64_t index_max;
    bool int64; /* shaderInt64, enabled on the device when present */
    /* storageBuffer16BitAccess, enabled on the device when present: a fused
     * kernel may store a packed cast's elements one 16-bit value each
     * (Y_S16, preamble.glsl; kir_options.fuse_store16) */
    bool store16;
    /* the largest element offset a push constant pc.off holds (uint) */
    uint64_t push_off_max;
    /* storage-buffer descriptors one kernel may bind (a paged operand takes
     * one per page): the least of maxPerStageDescriptorStorageBuffers and
     * maxDescriptorSetStorageBuffers. 0: 32 */
    uint32_t max_stage_buffers;
    /* descriptor-array indexing, enabled on the device when present: by a
     * dynamically uniform index (shaderStorageBufferArrayDynamicIndexing)
     * and by any index (shaderStorageBufferArrayNonUniformIndexing). Paged
     * operands need one of the two. */
    bool dynamic_index, nonuniform;
    /* compute shaders have the subgroup basic, vote and arithmetic
     * operations (GL_KHR_shader_subgroup_*): reductions may use them */
    bool subgroup_arith;
    /* the driver's loop limiter: one per-invocation counter shared by every
     * loop of a shader that is not unrolled, beyond which the loops silently
     * end (lavapipe: 65535). Generators keep the serial iterations of an
     * invocation below it or refuse the node. 0: no limit */
    uint32_t loop_limit;
    /* a CPU implementation (lavapipe): every pipeline becomes machine code
     * at each session build, even from a warm cache, so kernels whose
     * size-generic form runs slower on a GPU take it here (bn_moment) */
    bool cpu_device;
} vk_caps;

#define VK_INDEX_MAX_DEFAULT ((int64_t)INT32_MAX)
static inline int64_t vk_index_max(const vk_caps *c) { return c->index_max > 0 ? c->index_max : VK_INDEX_MAX_DEFAULT; }
/* The most elements one operand may have in a kernel of 64-bit indexing:
 * element indices stay below 2^62 (signed 64-bit coordinates with room for
 * the offsets a kernel adds). */
#define VK_INDEX64_MAX ((int64_t)1 << 62)

/* True if a kernel whose invocations each run `iterations` loop iterations
 * (every loop not unrolled, nested ones multiplied) stays within the
 * driver's loop limiter. */
static inline bool vk_loops_fit(const vk_caps *c, uint64_t iterations) {
    return c->loop_limit == 0 || iterations <= c->loop_limit;
}

#define VK_DEFINES_CAP 16384
#define VK_DIMS 4 /* pc.dim: sizes of size-generic kernels (vk_hoist_sizes) */

typedef struct vk_kernel {
    const char *tmpl;   /* template name; NULL = nothing to dispatch (views) */
    const char *lib;    /* a template placed right before tmpl's (helpers two templates share), or NULL */
    char defines[VK_DEFINES_CAP];
    size_t dlen;
    uint32_t local[3];  /* workgroup size */
    uint32_t groups[3]; /* dispatch size */
    bool overflow;      /* defines did not fit: an error at vk_codegen_node's end */
    bool idx64;         /* 64-bit indexing (MN_IDX64): an operand exceeds vk_caps.index_max */
    char expr[512];     /* eltwise kernels: EXPR(a, b, c)'s text (fused kernels reuse it) */
    /* GLSL placed right before the template (multi-tensor kernels' search
     * functions), malloc'ed by vk_codegen_multi_*; NULL for other kernels.
     * Generators zero k first: its owner frees code before that
     * (vk_kernel_clear). */
    char *code;
    /* head-layout folds (kir.h KIR_HEADS_IN / KIR_HEADS_OUT), read by the
     * rope, kv_append and attention generators: input heads_in - 1 (0:
     * none) is bound as the [B, T, H, D] tensor that its logical
     * [B, H, T, D] permutes; heads_out: the [B, H, T, D] result is stored
     * as [B, T, H, D] */
    int heads_in;
    bool heads_out;
    /* a size-generic kernel's sizes (vk_hoist_sizes): pushed as pc.dim[j],
     * per node, by the runtime; ndims 0 for other kernels */
    uint32_t dims[VK_DIMS];
    int ndims;
    bool generic; /* vk_hoist_sizes rewrote the defines */
    /* a saved value (kir.h KIR_SAVED) written beside the output: bound as
     * input saved_in - 1 (0: none), writable; the generator sets
     * saved_done when its kernel writes it (the attention forward: the
     * rows' lse), else the node cannot save it and codegen fails */
    int saved_in;
    bool saved_done;
    /* a fused group rooted at a packed cast: the kernel stores the 16-bit
     * values (Y_S16 instead of Y_P16: vk_codegen_fused, preamble.glsl) */
    bool store16;
} vk_kernel;

/* Makes k size-generic where that costs nothing at run time: an eltwise
 * (pointwise, fused pointwise) or ema_update kernel with 32-bit indices, no
 * paged operand and every input read at the output's index (IX<k>(i) is
 * (i): no broadcast or permute strides) depends on its size only through
 * its bounds check (bn_moment's generator does the same for its sizes). Its Y_N becomes pc.dim[0] (k->dims[0] = the element
 * count) and the unused X<k>_N and NTHREADS defines go, so kernels that
 * differ only in their size share one source, one SPIR-V binary and one
 * pipeline (ResNet-50 training: 267 -> 213 pipelines). Kernels with
 * broadcast strides keep their literals (a division by a run-time value
 * costs more than the compile it saves). MEGANEURA_VK_GENERIC=0 turns it
 * off. Returns true if it rewrote k. */
bool vk_hoist_sizes(vk_kernel *k);
/* False when MEGANEURA_VK_GENERIC=0: generators that make their own kernels
 * size-generic ask it too (bn_moment: sizes in pc.dim, one pipeline per
 * workgroup size; on CPU devices only, as the H200 ran it at 24 us a call
 * against 15 for the literal form, run Q of docs/PERF.md). */
bool vk_generic_on(void);
/* Whether the generators take their GPU tables (the convolutions' tiles,
 * vk_gen_linalg.c conv_pick): on a GPU, and on a CPU device (lavapipe)
 * under MEGANEURA_VK_GPU_TABLES=1, so that CI runs the kernels a GPU
 * would (tests/CMakeLists.txt, the _literal tests). */
bool vk_gpu_tables(const vk_caps *caps);

/* Frees k->code and zeroes k. */
void vk_kernel_clear(vk_kernel *k);

/* Appends "#define NAME VALUE\n" (printf-style value). */
void vk_def(vk_kernel *k, const char *name, const char *fmt, ...) MN_PRINTF(3, 4);
/* "#define NAME v" as an unsigned (vk_def_u: "123u", or "123ul" in a kernel
 * of 64-bit indexing) or signed (vk_def_i: "123" / "123l") literal of the
 * kernel's index type: element counts, sizes, strides, dimensions. */
void vk_def_u(vk_kernel *k, const char *name, uint64_t v);
void vk_def_i(vk_kernel *k, const char *name, int64_t v);
/* The literal suffixes of the kernel's index type: "u" / "ul", "" / "l". */
static inline const char *vk_usfx(const vk_kernel *k) { return k->idx64 ? "ul" : "u"; }
static inline const char *vk_isfx(const vk_kernel *k) { return k->idx64 ? "l" : ""; }
/* Decides the kernel's index width from its operands' element counts
 * (opnd[0] the output, then the inputs): 64-bit when one exceeds
 * vk_caps.index_max; sets k->idx64 and defines MN_IDX64. Refuses (naming
 * the op, the operand's shape and the reason) a kernel that needs 64-bit
 * indexing on a device without shaderInt64, or an operand beyond
 * VK_INDEX64_MAX. */
mn_status vk_index_width(vk_kernel *k, const mn_graph *g, int32_t id, const int32_t *opnd, int nopnd,
                         const vk_caps *caps, char *err, size_t cap);
/* Appends a raw line (e.g. a multi-line macro). */
void vk_line(vk_kernel *k, const char *fmt, ...) MN_PRINTF(2, 3);
/* 1-D launch of n invocations with the given workgroup size, folded into a
 * 2-D grid when n / local exceeds the device's group limit. Defines NTHREADS. */
void vk_launch_1d(vk_kernel *k, const vk_caps *caps, uint64_t n, uint32_t local);

/* Per-op generators: one per op of ops.def (vkgen_<name>), split by family
 * over vk_gen_*.c. They set k->tmpl, the op's defines and the launch; the
 * buffer/offset defines common to all are added by vk_codegen_node. */
typedef mn_status (*vk_gen_fn)(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps,
                               char *err, size_t cap);
#define MN_OP(E, name, lo, hi, bwd, fl, wr, fu) \
    mn_status vkgen_##name(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, char *err, size_t cap);
#include "graph/ops.def"
#undef MN_OP

/* True if the kernel of n writes input i (besides its output): the writes
 * column of ops.def (optimizer state) less the aliased input 0. Every other
 * input is `readonly`. */
bool vk_input_written(const node *n, int i);

/* The eltwise gather of vk_gen_pointwise.c (NIN, IX0..IX2 with the inputs
 * broadcast to the node's shape, EXPR(a, b, c), a 1-D launch) for another
 * template following eltwise.glsl's contract. */
mn_status vk_gen_bcast_expr(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, const char *tmpl,
                            const char *expr, char *err, size_t cap);
/* A GLSL float literal that reads back as exactly v (cap >= 48). */
void vk_float_literal(char *out, size_t cap, float v);

mn_status vk_codegen_node(vk_kernel *k, const mn_graph *g, int32_t id, const memplan *mp, const vk_caps *caps,
                          char *err, size_t cap);
/* vk_codegen_node for a head-layout fold (kir.h): opnd[0] the tensor the
 * kernel stores, opnd[1 + i] what it binds as node id's input i; heads_in
 * and heads_out as in vk_kernel. */
mn_status vk_codegen_heads(vk_kernel *k, const mn_graph *g, int32_t id, const int32_t *opnd, int heads_in,
                           bool heads_out, const memplan *mp, const vk_caps *caps, char *err, size_t cap);
/* vk_codegen_node or vk_codegen_heads (opnd NULL: the node's own operands)
 * whose kernel also writes node saved (kir.h KIR_SAVED), bound after the
 * node's inputs (MN_NONE: none, as the two above). */
mn_status vk_codegen_saving(vk_kernel *k, const mn_graph *g, int32_t id, const int32_t *opnd, int heads_in,
                            bool heads_out, int32_t saved, const memplan *mp, const vk_caps *caps, char *err,
                            size_t cap);
/* Only node id's generator (vkgen_<op>), into k as it is: no buffer
 * defines (a fused kernel's caller writes its own). */
mn_status vk_codegen_op(vk_kernel *k, const mn_graph *g, int32_t id, const vk_caps *caps, char *err, size_t cap);
/* One kernel for a fused group (kir.h): members[0..nm) (in order) and
 * root, computed per element of root's output in registers (the eltwise
 * kernel, or a matmul member's kernel with the rest as its epilogue); for a
 * reduction root (KIR_REDUCE) the reduction's kernel, the members computed
 * at each input element it reads. Writes the kernel's input tensors, in
 * binding order, to ext (*next of them, at most KIR_MAX_INPUTS). */
mn_status vk_codegen_fused(vk_kernel *k, const mn_graph *g, int32_t root, const int32_t *members, int nm,
                           int32_t *ext, int *next, const memplan *mp, const vk_caps *caps, char *err, size_t cap);
/* A multi-tensor kernel's operand j: one tensor, or the range of a
 * parallel region from first's storage to last's end (memplan_parallel). */
typedef struct vk_operands {
    int32_t first[1 + NODE_MAX_IN], last[1 + NODE_MAX_IN]; /* last == first: one tensor */
    int n;
    uint8_t written; /* bit j: operand j >= 1 is written in place too */
} vk_operands;
/* The kernel of a multi-update group (kir.h): members[0..nm) and root,
 * consecutive updates whose parameters, gradients and state lie in parallel
 * regions of the plan. */
mn_status vk_codegen_multi_update(vk_kernel *k, const mn_graph *g, int32_t root, const int32_t *members, int32_t nm,
                                  vk_operands *ops, const memplan *mp, const vk_caps *caps, char *err, size_t cap);
/* The kernel of a multi sum-of-squares tree rooted at concat root (its
 * members: kernel_root[i] == root): region_of[r] gives, for a gradient's
 * storage r, its multi-update group (-1: none), first_grad / last_grad
 * [group] the group's gradient region; inputs of the tree that are not
 * members are copied into their place. */
mn_status vk_codegen_multi_sumsq(vk_kernel *k, const mn_graph *g, int32_t root, const int32_t *kernel_root,
                                 const int32_t *region_of,
                                 const int32_t *first_grad, const int32_t *last_grad, vk_operands *ops,
                                 const memplan *mp, const vk_caps *caps, char *err, size_t cap);
/* The per-update defines of optim.glsl for update n (multi: without the
 * learning-rate multiplier and weight decay, which the table gives). */
mn_status vk_update_defs(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, bool multi, char *err,
                         size_t cap);
/* The workgroup size of a sumsq over blocks of `block` elements, and its
 * reduce.glsl defines (NOUT outputs, one workgroup each). */
uint32_t vk_sumsq_local(const vk_caps *caps, int64_t block);
mn_status vk_sumsq_block_defs(vk_kernel *k, const mn_graph *g, const node *n, const vk_caps *caps, int64_t block,
                              uint64_t nout, char *err, size_t cap);

/* <op>_PAGES / <op>_SHIFT for the operands opnd[0] (the output) and
 * opnd[1..nopnd) (the inputs, in binding order) that span several chunks
 * (memplan_pages), and the check that their descriptors fit the device;
 * <op>_P16 for those stored packed (NODE_F_PACK16). */
mn_status vk_paged_defines(vk_kernel *k, const mn_graph *g, const int32_t *opnd, int nopnd, const memplan *mp,
                           const vk_caps *caps, char *err, size_t cap);
/* Helpers of vk_gen_pointwise.c shared with vk_gen_fused.c: the output's
 * shape padded to 4 dims, numpy broadcast strides of x over it, the offset
 * macro NAME(i), a workgroup size. */
void vk_pad4(int64_t out[4], const node *n);
void vk_bcast_strides(int64_t st[4], const node *x);
mn_status vk_def_offset(vk_kernel *k, const mn_graph *g, const node *n, const char *name, const int64_t dim[4],
                        const int64_t st[4], char *err, size_t cap);
uint32_t vk_pick_local(const vk_caps *caps, uint64_t want);
/* The error of a node whose kernel would exceed the driver's loop limiter:
 * names the op, its output shape, the iterations and the limit. Returns
 * MN_E_UNSUPPORTED. */
mn_status vk_loop_fail(const mn_graph *g, const node *n, const vk_caps *caps, uint64_t iterations, char *err,
                       size_t cap);

/* A GEMM's problem: map 0 (matmul): op(A) [M,K] at z*saz + m*sam + k*sak,
 * op(B) [K,N] at z*sbz + k*sbk + n*sbn (elements), C [batch, M, N]
 * row-major; maps 1-3: a convolution's implicit GEMM (matmul.glsl's MM_MAP,
 * the CV_* defines already emitted; the strides unused). a_kfast: A's
 * consecutive k are (nearly) consecutive in memory; b_nfast: B's
 * consecutive n are. */
typedef struct vk_gemm_shape {
    int64_t M, N, K, batch, saz, sam, sak, sbz, sbk, sbn;
    int map;
    bool a_kfast, b_nfast;
    int64_t kc; /* a weight gradient's K of one part (map 3, MM_PARTS > 1), or 0: K */
} vk_gemm_shape;
/* The fast contract's GEMM on cooperative matrices (vk_gen_coopmat.c):
 * *used says whether it generated n (operands rounded, the device has the
 * fragments, the problem large enough); if not, matmul.glsl runs it. */
/* Whether this device and MEGANEURA_COOPMAT give products of rounding rnd
 * cooperative matrices (at sizes the generator takes them). */
bool vk_coopmat_available(const vk_caps *caps, mn_round16 rnd);
/* The same, and if so defines in k the MN_SPIRV_PASS that the device's form
 * needs (KHR: vk_compile rewrites glslang's NV SPIR-V; NV: none), for a
 * kernel written as kernels/matmul_coopmat.glsl is (attention_coopmat). */
bool vk_coopmat_def_pass(vk_kernel *k, const vk_caps *caps, mn_round16 rnd);
/* Whether input j of n is already rounded as the fast contract rounds it: a
 * cast to that dtype (the session's round_by_cast), so that any conversion
 * to 16 bits, or the rounding itself, is exact on it (vk_gen_coopmat.c). */
bool vk_pre_rounded(const mn_graph *g, const node *n, int j, mn_round16 rnd);
mn_status vk_gen_coopmat_gemm(vk_kernel *k, bool *used, const mn_graph *g, const node *n, const vk_caps *caps,
                              const vk_gemm_shape *s, char *err, size_t cap);
/* SPIR-V passes a kernel asks for by defining MN_SPIRV_PASS (vk_compile
 * applies them after glslang; vk_spirv_coopmat.c): NV cooperative matrices
 * to KHR, with the 16-bit float type f16 or bf16. The version is part of
 * the name, hence of the kernel cache key. */
#define VK_SPIRV_PASS_COOPMAT "coopmat_khr_f16_v1"
#define VK_SPIRV_PASS_COOPMAT_BF16 "coopmat_khr_bf16_v1"

/* Full GLSL source, malloc'ed (caller frees); NULL if the template is unknown. */
char *vk_codegen_source(const vk_kernel *k);
/* The embedded text of kernels/<name>.glsl, or NULL. */
const char *vk_template(const char *name);

#endif
