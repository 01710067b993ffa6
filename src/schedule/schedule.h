/* schedule.h - the ordered list of kernels a step executes.
 *
 * Now: live non-source nodes in creation order (a topological order in which
 * every optimizer update follows every read of the parameter it writes, since
 * the optimizer stage creates its nodes last). The forward-only subset used
 * by run() is a subsequence of the same order, so one memory plan serves
 * both. Nodes a session appends after the rest (g->sched_pre: the fast
 * contract's operand casts, session.c) run right before their first
 * consumer instead, so the order stays topological and a cast of a
 * parameter still precedes the parameter's update. Later: kernel archetypes
 * and specialisations for code generation.
 *
 * Does not: decide what is live (passes/), place memory (memplan/).
 */
#ifndef MN_SCHEDULE_H
#define MN_SCHEDULE_H

#include "graph/graph.h"

typedef struct schedule {
    int32_t *order; /* every live non-source node, in execution order */
    int32_t n;
    int32_t *fwd; /* the nodes run() executes: live for outputs/loss, not backward/optim */
    int32_t nfwd;
} schedule;

mn_status schedule_build(schedule *s, const mn_graph *g, const uint8_t *live, const uint8_t *fwd_live);
void schedule_free(schedule *s);
void schedule_dump(const schedule *s, const mn_graph *g, FILE *f);

#endif
