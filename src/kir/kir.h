/* kir.h - the kernel-level plan: which scheduled nodes run as one kernel.
 *
 * Between the schedule (which nodes run, in which order) and the memory plan
 * and code generation. A kernel is a group of nodes computed by one
 * dispatch: its root (the node whose value the kernel stores) and the
 * members folded into it, whose values live only in registers. The first
 * pass fuses pointwise chains: an elementwise node (or a broadcast / permute
 * gather of an input) whose one consumer is in the same group (an
 * elementwise node or a broadcast, not a permute) and whose shape
 * broadcasts to the consumer's is computed inside the root's kernel, for
 * each element of the root, at the index its consumer reads (a member
 * broadcast along a dimension is computed again for each element along it:
 * cheap for pointwise work, and no storage or dispatch; a scalar constant
 * is a literal, no kernel input). A matmul, conv2d, conv2d_bwd_input or row
 * normalisation (kir_epilogue_producer) whose only consumer is in such a
 * group and whose shape is the root's joins it too (one per group): the
 * kernel is then the producer's with the group as its epilogue, applied to
 * each output element before the store (only cheap ops: cheap_in_epilogue).
 * A sum, mean
 * or reduce_to takes the pointwise chain that computes its input the same
 * way (a prologue, KIR_REDUCE): the reduction's kernel computes the chain's
 * value wherever it would read its input.
 *
 * Multi-tensor kernels (fuse_multi): a run of consecutive optimizer updates
 * (sgd_update / adam_update with equal settings but for the learning-rate
 * multiplier and weight decay, each a table entry) becomes one kernel whose
 * root is the run's last update, when every parameter, its state and its
 * gradient's storage can lie in parallel regions of at most multi_bytes
 * (one binding): the memory plan then places the parameters one after
 * another, each state tensor and each gradient at the same offsets from
 * their regions' starts (kir_multi lists the members for it), and the
 * kernel updates all of them over flat indices. A concat tree of block sums
 * of squares (sumsq with a block length) of such gradients becomes one
 * kernel too (the tree's top concat is the root): it writes every block's
 * partial sum straight into the concatenation, reading the gradients
 * through their regions (at most KIR_MAX_INPUTS of them).
 *
 * Head-layout folds (with fuse_matmul): the permute (0, 2, 1, 3) that takes
 * a projection's [B, T, H, D] to the heads' [B, H, T, D] is folded into
 * the rope or kv_append that is its one consumer (KIR_HEADS_IN: the kernel
 * reads the product's storage at the permuted index), and the permute that
 * takes an attention's output back is the attention's own kernel
 * (KIR_HEADS_OUT: the attention writes [B, T, H, D]). Only when the
 * permuted tensor fits one binding (multi_bytes) and nothing between the
 * two writes the storage that is read late.
 *
 * Saved statistics (fuse_saved): the attention_lse that the backward
 * builds from an attention's own inputs (the row log-sum-exp, recomputed by
 * a kernel of its own otherwise) is written by the forward's kernel as a
 * second output. The lse node keeps its storage and its place in the
 * graph; the plan moves it right after the forward's kernel (KIR_SAVED:
 * nothing to dispatch) so that the memory plan gives it storage from that
 * position, and saved[r] names it for the kernel rooted at r (the
 * attention, or the permute its output folds into). Only when no node
 * between the two positions writes a storage the lse reads.
 *
 * The pass regroups the schedule so that each group's
 * members run contiguously right before their root (a dependency order:
 * members feed only their group), and refuses to move a member past a node
 * that writes a tensor in place (optimizer updates, KV-cache appends).
 *
 * Who reads it: memplan (members get no storage; their reads count at the
 * root's position), the Vulkan backend (one dispatch per root, none for
 * members), MEGANEURA_DUMP=kernels. Backends that do not fuse (the CPU
 * reference) get the identity plan. MEGANEURA_FUSION=0 turns fusion off.
 *
 * Does not: decide what is live (passes/), place memory (memplan/),
 * generate code (backends).
 */
#ifndef MN_KIR_H
#define MN_KIR_H

#include <stdio.h>

#include "graph/graph.h"
#include "schedule/schedule.h"

/* Most members of one fused kernel (the root included) and distinct input
 * tensors it binds (the preamble's X0..X5). */
#define KIR_MAX_MEMBERS 24
#define KIR_MAX_INPUTS 6
/* Most tensors one multi-tensor kernel covers (its tables' entries). */
#define KIR_MULTI_MAX 1024

/* What the kernel rooted at a node is. */
typedef enum kir_kind {
    KIR_SINGLE = 0,   /* the node alone, or a pointwise group (a matmul with its epilogue) */
    KIR_REDUCE,       /* a sum, mean or reduce_to whose input its pointwise members compute */
    KIR_MULTI_UPDATE, /* optimizer updates of several parameters over parallel regions */
    KIR_MULTI_SUMSQ,  /* a concat tree of gradients' block sums of squares */
    /* head-layout folds (fuse_matmul): a permute (0, 2, 1, 3) of a rank-4
     * tensor between a [B, T, H, D] product and the heads' [B, H, T, D]
     * ops, or back, computed by the kernel next to it instead of a
     * dispatch of its own */
    KIR_HEADS_IN,  /* a rope or kv_append reading its input (kir_heads_input) through its folded permute */
    KIR_HEADS_OUT, /* a permute whose folded attention writes its output in the permute's layout */
    /* a node whose value another kernel writes beside its own (kir.saved):
     * storage of its own, no dispatch; it directly follows that kernel */
    KIR_SAVED
} kir_kind;

/* A multi-update kernel: its updates (members, then the root) in order. */
typedef struct kir_multi {
    int32_t root;
    int32_t first, n; /* kir.multi_ids[first .. first + n) */
} kir_multi;

typedef struct kir {
    int32_t *root; /* per graph node: the root of the kernel computing it (itself if it is its own kernel) */
    uint8_t *kind; /* per graph node: the kir_kind of the kernel rooted there */
    int32_t n;     /* graph nodes */
    int32_t kernels; /* dispatching kernels per step: roots that are not views (reshape) */
    int32_t fused;   /* nodes folded into another node's kernel */
    kir_multi *multi; /* the multi-update kernels, in order */
    int32_t nmulti;
    int32_t *multi_ids;
    /* per graph node: the KIR_SAVED node that the kernel rooted there also
     * writes (MN_NONE: none); NULL when there is none in the plan */
    int32_t *saved;
    int32_t nsaved;
} kir;

typedef struct kir_options {
    bool fuse_pointwise; /* nodes flagged output, loss or read are never folded */
    /* also fold a matmul into the pointwise group that consumes it (one per
     * group, with the group root's shape): the group becomes the matmul's
     * epilogue (bias, activation, residual add, gradient accumulation) */
    bool fuse_matmul;
    /* multi-tensor optimizer kernels (updates and the gradients' sums of
     * squares) over regions of at most multi_bytes (0: 2^31) */
    bool fuse_multi;
    uint64_t multi_bytes;
    /* saved statistics: an attention's kernel writes the lse its backward
     * reads (KIR_SAVED) instead of a kernel recomputing it */
    bool fuse_saved;
    /* a packed cast (NODE_F_PACK16) may root a pointwise group, its producer
     * included (a product's or a normalisation's epilogue): the kernel
     * stores the cast's 16-bit values itself, so the f32 tensor the cast
     * reads is never written (kir_options_from_env sets it unless
     * MEGANEURA_FUSION=nocast or less; the session clears it where the
     * backend does not store 16-bit elements) */
    bool fuse_store16;
} kir_options;

/* Builds the plan over s and regroups s->order and s->fwd in place (the
 * forward list stays a subsequence of the order). */
mn_status kir_build(kir *k, const mn_graph *g, schedule *s, const kir_options *o);
void kir_free(kir *k);
/* True if node id is folded into another node's kernel. */
static inline bool kir_is_member(const kir *k, int32_t id) { return k && k->root && k->root[id] != id; }
/* The kind of the kernel rooted at id (KIR_SINGLE for a node without one). */
static inline kir_kind kir_kind_of(const kir *k, int32_t id) {
    return k && k->kind ? (kir_kind)k->kind[id] : KIR_SINGLE;
}
/* The KIR_SAVED node that the kernel rooted at id also writes, or MN_NONE. */
static inline int32_t kir_saved_of(const kir *k, int32_t id) { return k && k->saved ? k->saved[id] : MN_NONE; }
/* The options MEGANEURA_FUSION asks for on a backend that fuses (or not):
 * unset, "" or "1" all, "nomulti" all but the multi-tensor optimizer
 * kernels (one update and one sum of squares per parameter), "nosaved" all
 * but the saved statistics (the attention's lse recomputed by a kernel of
 * its own), "pointwise" pointwise chains only (no matmul epilogues,
 * head-layout folds, multi-tensor kernels or saved statistics), "nocast"
 * all but packed casts rooting a group (fuse_store16), "0" none;
 * another value is an error naming it. multi_bytes is left 0. */
mn_status kir_options_from_env(kir_options *o, bool backend_fuses, char *err, size_t cap);
/* The ops the pointwise pass may fold: fusion class ELEMENTWISE and the
 * BCAST gathers, broadcast and permute (whose input then stays a kernel
 * input); ops.def's fuse column. */
bool kir_op_pointwise(op_id op);
/* The ops whose kernels run a fused group as their epilogue (MM_EPILOGUE):
 * matmul, conv2d, conv2d_bwd_input, the row normalisations and their dx. */
bool kir_epilogue_producer(op_id op);
/* The input a KIR_HEADS_IN root reads through its folded permute: 0 for
 * rope, 1 (the new rows) for kv_append; -1 for other ops. */
int kir_heads_input(op_id op);
/* A scalar f32 constant, which the members of a fused pointwise group read
 * as a literal (no binding). */
bool kir_literal_input(const mn_graph *g, int32_t id);
/* MEGANEURA_DUMP=kernels: one line per multi-node kernel. */
void kir_dump(const kir *k, const mn_graph *g, const schedule *s, FILE *f);

#endif
