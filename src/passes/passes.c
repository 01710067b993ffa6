/* passes.c - dead-node elimination. */
#include "passes/passes.h"

void passes_mark_live(const mn_graph *g, const int32_t *roots, int32_t nroots, uint8_t *live) {
    memset(live, 0, (size_t)g->n);
    int32_t hi = -1;
    for (int32_t i = 0; i < nroots; i++) {
        live[roots[i]] = 1;
        if (roots[i] > hi) hi = roots[i];
    }
    /* creation order is topological: one backward sweep suffices */
    for (int32_t i = hi; i >= 0; i--)
        if (live[i])
            for (int k = 0; k < g->nodes[i].nin; k++) live[g->nodes[i].in[k]] = 1;
}
