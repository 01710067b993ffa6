/* cpu_kernels.h - the naive CPU reference kernels, one per op of ops.def.
 *
 * Every kernel has the same signature: it reads the node's inputs through
 * in[i] (storage of g->nodes[n->in[i]], laid out row-major in the storage
 * format) and writes the node's output through out. Input shapes come from
 * g->nodes[n->in[i]], the output shape from n. Two tables exist: float tensors
 * stored as float (cpu_kernels_f32) or as double (cpu_kernels_f64, the
 * oracle's high-precision mode). Tensors of dtype MN_I32 (class labels) are
 * int32_t in both modes. Reductions (SUM, MEAN, REDUCE_TO, softmax sums,
 * losses, SUMSQ) accumulate in double in both modes; matmul and convolution
 * accumulate in the storage type.
 *
 * Aliasing (for in-place planning): out may be exactly the storage of any
 * input that has out's shape for ADD/SUB/MUL/DIV, the unary ops (SCALE ..
 * SILU, STOP_GRAD), UNARY_BWD, SOFTMAX, LOG_SOFTMAX, SOFTMAX_BWD,
 * LOG_SOFTMAX_BWD, CROSS_ENTROPY_BWD and CROSS_ENTROPY_DENSE_BWD (each
 * element, or row, is read before it is written), and the pointwise family's
 * ABS, CLAMP, POW, WHERE, DROPOUT, PW_BWD (kernels_pointwise.h). RESHAPE expects out ==
 * in[0] (it copies otherwise). SGD_UPDATE/ADAM_UPDATE write the new
 * parameter through out, normally the storage of in[0], and their state
 * through in[2]/in[3]; EMA_UPDATE likewise writes the running statistic
 * through out, normally in[0]'s storage. Every other kernel (MATMUL, PERMUTE, BROADCAST,
 * REDUCE_TO, SUM/MEAN/MAX, MAX_BWD, losses, CE_COUNT, CONV2D*, MAXPOOL2D*) needs out
 * distinct from its inputs.
 *
 * Does not: check shapes (the graph's shape rules did), allocate memory,
 * know about arenas or the memory plan (cpu.c does).
 */
#ifndef MN_CPU_KERNELS_H
#define MN_CPU_KERNELS_H

#include "graph/graph.h"

typedef void (*cpu_kernel_fn)(const mn_graph *g, const node *n, void *out,
                              void *const in[NODE_MAX_IN]);

/* Indexed by op_id; every entry is non-NULL (sources are no-ops). */
extern const cpu_kernel_fn cpu_kernels_f32[OP_COUNT], cpu_kernels_f64[OP_COUNT];

#endif
