/* state_util.h - what a training test compares between sessions: every
 * parameter and optimizer state tensor of a session, concatenated in node
 * order (running statistics are frozen parameters); and message checks.
 * Header-only: included by the tests that need it (session internals). */
#ifndef MN_TEST_STATE_UTIL_H
#define MN_TEST_STATE_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "session/session.h"

static inline bool th_has(const char *hay, const char *needle) { return strstr(hay ? hay : "", needle) != NULL; }
#define CHECK_HAS(hay, needle) CHECK_MSG(th_has((hay), (needle)), "message \"%s\" lacks \"%s\"", (hay), (needle))

static inline bool th_saved_state(const node *nd) {
    return nd->op == OP_PARAM || (nd->op == OP_STATE && (nd->flags & NODE_F_OPTIM));
}

/* The values (malloc'ed; *n of them), or NULL when out of memory. */
static inline float *th_snapshot(mn_session *s, size_t *n) {
    size_t total = 0;
    for (int32_t i = 0; i < s->g->n; i++)
        if (th_saved_state(&s->g->nodes[i])) total += (size_t)node_numel(&s->g->nodes[i]);
    float *v = calloc(total + 1, sizeof *v);
    size_t at = 0;
    for (int32_t i = 0; v && i < s->g->n; i++) {
        const node *nd = &s->g->nodes[i];
        if (!th_saved_state(nd)) continue;
        CHECK_OK(session_read_f32(s, i, v + at, (size_t)node_numel(nd)), mn_session_error(s));
        at += (size_t)node_numel(nd);
    }
    *n = total;
    return v;
}

#endif
