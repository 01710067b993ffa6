/* schedule.c - execution order. */
#include "schedule/schedule.h"

/* Appends node i to the lists it belongs to. */
static void emit(schedule *s, const mn_graph *g, int32_t i, const uint8_t *live, const uint8_t *fwd_live) {
    if (op_is_source(g->nodes[i].op)) return;
    if (live[i]) s->order[s->n++] = i;
    if (fwd_live && fwd_live[i] && live[i]) s->fwd[s->nfwd++] = i;
}

mn_status schedule_build(schedule *s, const mn_graph *g, const uint8_t *live, const uint8_t *fwd_live) {
    memset(s, 0, sizeof *s);
    size_t cap = (size_t)g->n + 1;
    s->order = malloc(cap * sizeof *s->order);
    s->fwd = malloc(cap * sizeof *s->fwd);
    /* the appended nodes (g->sched_pre): each runs right before its first
     * consumer among the nodes before it (anchor[]); first[i] starts the
     * chain of those anchored at i, next[] links it in id order */
    const int32_t pre = g->sched_pre > 0 && g->sched_pre < g->n ? g->sched_pre : g->n;
    int32_t *anchor = NULL, *first = NULL, *next = NULL;
    if (pre < g->n) {
        anchor = malloc(cap * sizeof *anchor);
        first = malloc(cap * sizeof *first);
        next = malloc(cap * sizeof *next);
    }
    if (!s->order || !s->fwd || (pre < g->n && (!anchor || !first || !next))) {
        free(anchor), free(first), free(next);
        schedule_free(s);
        return MN_E_NOMEM;
    }
    if (pre < g->n) {
        for (int32_t i = 0; i < g->n; i++) first[i] = next[i] = anchor[i] = MN_NONE;
        for (int32_t i = 0; i < pre; i++)
            for (int j = 0; j < g->nodes[i].nin; j++) {
                const int32_t a = g->nodes[i].in[j];
                if (a >= pre && a < g->n && anchor[a] == MN_NONE) anchor[a] = i;
            }
        /* an appended node read only by later appended ones (a cast that
         * a view reads) runs before the earliest of them: inputs have
         * smaller ids, so one pass from the end carries the anchors down */
        for (int32_t a = g->n - 1; a >= pre; a--)
            for (int j = 0; anchor[a] != MN_NONE && j < g->nodes[a].nin; j++) {
                const int32_t b = g->nodes[a].in[j];
                if (b >= pre && b < a && (anchor[b] == MN_NONE || anchor[b] > anchor[a])) anchor[b] = anchor[a];
            }
        for (int32_t a = g->n - 1; a >= pre; a--) /* reverse: the chains come out in id order */
            if (anchor[a] != MN_NONE) next[a] = first[anchor[a]], first[anchor[a]] = a;
    }
    for (int32_t i = 0; i < pre; i++) {
        if (first)
            for (int32_t a = first[i]; a != MN_NONE; a = next[a]) emit(s, g, a, live, fwd_live);
        emit(s, g, i, live, fwd_live);
    }
    /* appended nodes that no earlier node reads, in creation order */
    for (int32_t a = pre; a < g->n; a++)
        if (anchor[a] == MN_NONE) emit(s, g, a, live, fwd_live);
    free(anchor), free(first), free(next);
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
