/* passes.h - graph simplification before scheduling.
 *
 * Now: dead-node elimination, as a liveness mask (nodes are never removed, so
 * ids stay stable for every later stage). Fusion of pointwise chains and
 * epilogues belongs here when the Vulkan code generator needs it.
 *
 * Does not: reorder (schedule/), place memory (memplan/).
 */
#ifndef MN_PASSES_H
#define MN_PASSES_H

#include "graph/graph.h"

/* live[i] = 1 for every node the roots depend on (roots included). */
void passes_mark_live(const mn_graph *g, const int32_t *roots, int32_t nroots, uint8_t *live);

#endif
