/* memplan.h - liveness-based placement of tensors at offsets in arenas.
 *
 * Parameters, optimizer state, inputs/outputs/constants are pinned: each gets
 * its own range for the session's life. Everything else is placed in the
 * work arena by first-fit over the schedule (the lowest free range that
 * holds it, found in O(log n)), reusing space of tensors whose last use has
 * passed, and in place (the output takes its first input's
 * range) where the op allows it and the input dies at that node. Views
 * (RESHAPE) and in-place updates (optimizer ops) share their input's range.
 *
 * Chunking (memplan_options.chunk_bytes, set by backends whose one binding
 * or allocation holds less than an arena): every tensor of at most a chunk
 * lies inside one chunk [k * chunk_bytes, (k + 1) * chunk_bytes) of its
 * arena. Pinned arenas skip to the next chunk boundary when a tensor would
 * straddle one; work placement takes the lowest free range that straddles
 * none. A tensor larger than a chunk starts at a chunk boundary and spans
 * consecutive chunks (a paged tensor, memplan_pages); when the graph has
 * one, the plan's chunk is the option's rounded down to a power of two (so
 * a kernel maps an element to its page with a shift). chunk_bytes 0: no
 * chunking (the placements are exactly those without the option).
 *
 * Does not: allocate memory (backends do), decide the order (schedule does).
 */
#ifndef MN_MEMPLAN_H
#define MN_MEMPLAN_H

#include "graph/graph.h"

enum { MP_ARENA_PARAM = 0, MP_ARENA_STATE, MP_ARENA_IO, MP_ARENA_WORK, MP_ARENA_COUNT };
#define MP_ALIGN 64

typedef struct mp_slot {
    int8_t arena; /* -1: the node has no storage (not live) */
    uint64_t offset;
    uint64_t bytes;
} mp_slot;

typedef struct memplan {
    mp_slot *slots; /* one per graph node */
    int32_t n;
    uint64_t arena_bytes[MP_ARENA_COUNT];
    uint64_t sum_bytes; /* sum of all tensors' sizes, each aligned to MP_ALIGN (no reuse, no chunk padding) */
    /* per arena, the bytes its tensors hold at its fullest, each aligned to
     * MP_ALIGN: the pinned arenas' sums, the work arena's largest live set;
     * arena_bytes - tensor_bytes is padding (chunk boundaries skipped, and
     * in the work arena free gaps between live tensors) */
    uint64_t tensor_bytes[MP_ARENA_COUNT];
    uint64_t chunk_bytes; /* the option's, a power of two if a tensor is larger (0: none) */
    size_t real_size;   /* bytes per f32 element: 4, or 8 for the CPU f64 mode */
} memplan;

/* Parallel regions, for kernels that treat many tensors as one flat range
 * (kir.h's multi-tensor optimizer): `lanes` lanes of n tensors each, member
 * i of the same size in every lane. Each lane's tensors are placed one
 * after another (each aligned to MP_ALIGN, in member order) in one range of
 * their arena that lies inside one chunk, so member i sits at the same
 * offset from its lane's start in every lane. Lane tensors are storage
 * roots: parameters, optimizer state, or computed tensors (gradients),
 * which are then pinned at the bottom of the work arena for the session's
 * life instead of living from their first write to their last read. */
#define MP_MAX_LANES 4
typedef struct memplan_parallel {
    int32_t n;
    int lanes;          /* 1 .. MP_MAX_LANES */
    const int32_t *ids; /* n * lanes node ids: member i of lane l at ids[i * lanes + l] */
} memplan_parallel;

typedef struct memplan_options {
    size_t real_size; /* 4 or 8 */
    bool reuse;       /* false: every tensor gets its own range (the reference for tests) */
    uint64_t chunk_bytes; /* 0, or a multiple of MP_ALIGN: the most bytes of one binding (see above) */
    /* The kernel plan (kir.h): kernel_root[i] != i marks a node folded into
     * kernel_root[i]'s kernel, which must directly follow it and its fellow
     * members in the order: it gets no storage and its reads count at the
     * root's position; a root with members is never placed in place. NULL:
     * every node is its own kernel. */
    const int32_t *kernel_root;
    const memplan_parallel *parallel; /* the parallel regions, placed first */
    int32_t nparallel;
} memplan_options;

/* order: the executed non-source nodes in execution order; live[i] != 0 for
 * every node (source or not) that exists at run time. */
mn_status memplan_build(memplan *mp, const mn_graph *g, const int32_t *order, int32_t norder,
                        const uint8_t *live, const memplan_options *opt, char *err, size_t cap);
void memplan_free(memplan *mp);
/* The chunk a plan over g uses for the option chunk (live as for
 * memplan_build): chunk, or a power of two below it when a live tensor is
 * larger than a chunk (then paged). 0: 0. */
uint64_t memplan_chunk(const mn_graph *g, const uint8_t *live, uint64_t chunk, size_t real_size);
uint64_t memplan_peak(const memplan *mp);
void memplan_dump(const memplan *mp, const mn_graph *g, FILE *f);

/* The free space of an arena for first-fit placement (internal; exposed for
 * tests): maximal free intervals in a treap by offset, each node holding the
 * longest interval of its subtree. Starts as one interval [0, inf). */
typedef struct mp_fnode {
    uint64_t off, len, best; /* len UINT64_MAX: runs to infinity */
    uint32_t prio;
    int32_t l, r;
} mp_fnode;
typedef struct mp_freeset {
    mp_fnode *a;
    int32_t n, cap, root, spare; /* spare: free list of nodes through .l */
    uint32_t seed;
    uint64_t high; /* highest end ever allocated: the arena size */
} mp_freeset;
mn_status mp_fs_init(mp_freeset *fs);
void mp_fs_destroy(mp_freeset *fs);
/* The lowest offset with size free bytes, now taken. O(log n) expected. */
void mp_fs_alloc(mp_freeset *fs, uint64_t size, uint64_t *off);
/* Gives [off, off + size) back (it must have been taken), merging with the
 * free neighbours. MN_E_NOMEM only if a node cannot be allocated. */
mn_status mp_fs_release(mp_freeset *fs, uint64_t off, uint64_t size);
/* The lowest offset with size free bytes inside one chunk [k * chunk, (k + 1)
 * * chunk), now taken (size > chunk: the lowest chunk boundary with size
 * free bytes). Searches past intervals that are long
 * enough but straddle a boundary at the wrong place, so not O(log n) in the
 * worst case. MN_E_NOMEM only if a node cannot be allocated. */
mn_status mp_fs_alloc_chunked(mp_freeset *fs, uint64_t size, uint64_t chunk, uint64_t *off);

/* The number of chunks node id's storage spans when it is larger than one
 * (a paged tensor, starting at a chunk boundary); 0 when it fits one chunk,
 * has no storage or the plan has no chunks. */
static inline uint64_t memplan_pages(const memplan *mp, int32_t id) {
    const mp_slot *s = &mp->slots[id];
    if (!mp->chunk_bytes || s->arena < 0 || s->bytes <= mp->chunk_bytes) return 0;
    return (s->bytes + mp->chunk_bytes - 1) / mp->chunk_bytes;
}

/* Storage root of a node: follows views/in-place aliases to the owner. */
int32_t memplan_root(const mn_graph *g, int32_t id);
/* True if op's output is a view/alias of input 0: OPF_VIEW or OPF_ALIAS in
 * ops.def (RESHAPE, optimizer updates, EMA_UPDATE, KV_APPEND). */
bool memplan_is_alias(op_id op);

#endif
