/* schedule.c - execution order. */
#include "schedule/schedule.h"

mn_status schedule_build(schedule *s, const mn_graph *g, const uint8_t *live, const uint8_t *fwd_live) {
    memset(s, 0, sizeof *s);
    size_t cap = (size_t)g->n + 1;
    s->order = malloc(cap * sizeof *s->order);
    s->fwd = malloc(cap * sizeof *s->fwd);
    if (!s->order || !s->fwd) {
        schedule_free(s);
        return MN_E_NOMEM;
    }
    for (int32_t i = 0; i < g->n; i++) {
        if (op_is_source(g->nodes[i].op)) continue;
        if (live[i]) s->order[s->n++] = i;
        if (fwd_live && fwd_live[i] && live[i]) s->fwd[s->nfwd++] = i;
    }
    return MN_OK;
}

void schedule_free(schedule *s) {
    free(s->order);
    free(s->fwd);
    memset(s, 0, sizeof *s);
}

void schedule_dump(const schedule *s, const mn_graph *g, FILE *f) {
    fprintf(f, "schedule: %d kernels per step, %d per forward run\n", s->n, s->nfwd);
    for (int32_t i = 0; i < s->n; i++) {
        fprintf(f, "%4d  ", i);
        graph_dump_node(g, s->order[i], f);
    }
}
