/* autodiff.h - reverse-mode automatic differentiation as a graph-to-graph
 * transform.
 *
 * autodiff_build() appends the backward nodes for d(loss)/d(node) to the
 * graph (flagged NODE_F_BACKWARD) and returns, per forward node, the id of its
 * gradient node (MN_NONE where no gradient flows: constants, inputs, frozen
 * or unused parameters, stop-gradient). Gradients of a node used several
 * times are summed. An op that needs a gradient but has no backward rule
 * fails with a message naming the op.
 *
 * Does not: add optimizer updates (optim/), decide what runs (passes/).
 */
#ifndef MN_AUTODIFF_H
#define MN_AUTODIFF_H

#include "graph/graph.h"

/* *grads (malloc'ed, g->n entries as of the call; caller frees) maps every
 * node that existed before the call to its gradient. seed: the node that
 * stands for d loss / d loss (an f32 node of the loss's shape, e.g. the loss
 * scale input), or MN_NONE for a constant 1. */
mn_status autodiff_build(mn_graph *g, int32_t loss, int32_t seed, int32_t **grads);
/* True if the op has a backward rule (is differentiable). */
bool autodiff_has_rule(op_id op);

#endif
