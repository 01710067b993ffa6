/* run_outputs.c - mn_session_run_outputs: a forward run of only the nodes
 * some named outputs need (one graph holding a prefill and a decoding
 * branch over the same parameters and KV caches runs either).
 *
 * The node list of an output set is computed once (the transitive inputs of
 * the outputs, kept in the order of the session's forward list, so the one
 * memory plan still holds: every node's inputs are computed before it in
 * the same run or are sources) and kept for the session's life, since the
 * Vulkan backend records a list once and keys it by its address.
 *
 * Does not: run backward or optimizer nodes, or change what mn_session_run
 * does.
 */
#include "session/session.h"
#include "passes/passes.h"

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void session_subsets_free(mn_session *s) {
    for (int i = 0; i < s->nsubsets; i++) {
        free(s->subsets[i].outs);
        free(s->subsets[i].list);
    }
    s->nsubsets = 0;
}

static mn_status failf(mn_session *s, mn_status st, const char *fmt, ...) MN_PRINTF(3, 4);
static mn_status failf(mn_session *s, mn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return st;
}

/* The subset for the sorted, duplicate-free outs[0..n), built on first use. */
static mn_status subset_for(mn_session *s, const int32_t *outs, int n, session_subset **out) {
    for (int i = 0; i < s->nsubsets; i++) {
        session_subset *ss = &s->subsets[i];
        if (ss->nouts == n && memcmp(ss->outs, outs, (size_t)n * sizeof *outs) == 0) {
            *out = ss;
            return MN_OK;
        }
    }
    if (s->nsubsets == SESSION_MAX_SUBSETS)
        return failf(s, MN_E_UNSUPPORTED,
                     "run_outputs: a session runs at most %d distinct output sets (each is a recorded node list); "
                     "this is a new one",
                     SESSION_MAX_SUBSETS);
    const mn_graph *g = s->g;
    uint8_t *need = calloc((size_t)g->n + 1, 1);
    session_subset ss = {0};
    ss.outs = malloc((size_t)n * sizeof *ss.outs);
    ss.list = malloc(((size_t)s->sched.nfwd + 1) * sizeof *ss.list);
    if (!need || !ss.outs || !ss.list) {
        free(need);
        free(ss.outs);
        free(ss.list);
        return failf(s, MN_E_NOMEM, "run_outputs: out of memory");
    }
    memcpy(ss.outs, outs, (size_t)n * sizeof *outs);
    ss.nouts = n;
    passes_mark_live(g, outs, n, need); /* what the outputs depend on */
    for (int32_t i = 0; i < s->sched.nfwd; i++)
        if (need[s->sched.fwd[i]]) ss.list[ss.n++] = s->sched.fwd[i];
    ss.has_loss = g->loss != MN_NONE && need[g->loss];
    free(need);
    s->subsets[s->nsubsets] = ss;
    *out = &s->subsets[s->nsubsets++];
    return MN_OK;
}

mn_status mn_session_run_outputs(mn_session *s, const char *const *names, int n) {
    if (!s) return MN_E_INVALID;
    if (s->dead || s->iopt.plan_only) return failf(s, MN_E_STATE, "run_outputs: the session is not usable");
    if (!names || n < 1 || n > 64) return failf(s, MN_E_INVALID, "run_outputs: need 1..64 output names, got %d", n);
    int32_t ids[64];
    for (int i = 0; i < n; i++) {
        const int32_t id = names[i] ? graph_find(s->g, names[i]) : MN_NONE;
        if (id == MN_NONE || !(s->g->nodes[id].flags & (NODE_F_OUTPUT | NODE_F_LOSS)))
            return failf(s, MN_E_NOT_FOUND, "run_outputs: no output named '%s'", names[i] ? names[i] : "(null)");
        ids[i] = id;
    }
    qsort(ids, (size_t)n, sizeof *ids, cmp_i32);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || ids[m - 1] != ids[i]) ids[m++] = ids[i];
    session_subset *ss = NULL;
    mn_status st = subset_for(s, ids, m, &ss);
    if (st) return st;
    st = ss->n ? s->be->execute(s->bk, ss->list, ss->n, s->err, sizeof s->err) : MN_OK;
    s->have_loss = st == MN_OK && ss->has_loss;
    return st;
}
