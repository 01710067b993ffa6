/* passes.c - dead-node elimination. */
#include "passes/passes.h"

void passes_mark_live(const mn_graph *g, const int32_t *roots, int32_t nroots, uint8_t *live) {
    memset(live, 0, (size_t)g->n);
    int32_t hi = -1;
    for (int32_t i = 0; i < nroots; i++) {
        live[roots[i]] = 1;
        if (roots[i] > hi) hi = roots[i];
    }
    /* creation order is topological but for the nodes a session appended
     * (g->sched_pre): a sweep that marks a node above its own position
     * sweeps again */
    bool again = true;
    while (again) {
        again = false;
        for (int32_t i = hi; i >= 0; i--)
            if (live[i])
                for (int k = 0; k < g->nodes[i].nin; k++) {
                    const int32_t a = g->nodes[i].in[k];
                    if (!live[a] && a > i) again = true, hi = a > hi ? a : hi;
                    live[a] = 1;
                }
    }
}
