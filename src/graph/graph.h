/* graph.h - the typed static graph IR (internal).
 *
 * A graph is an array of nodes in creation order, which is always a
 * topological order (a node only refers to earlier nodes). Sources (inputs,
 * parameters, optimizer state, constants) are nodes too. Later stages
 * (autodiff, optim) append nodes to a session-owned copy; nothing is removed
 * in place (passes build a liveness mask instead).
 *
 * Does not: execute anything, know about backends, plan memory.
 */
#ifndef MN_GRAPH_H
#define MN_GRAPH_H

#include "meganeura.h"
#include "core/common.h"

typedef enum op_id {
#define MN_OP(E, n, lo, hi, bwd) OP_##E,
#include "graph/ops.def"
#undef MN_OP
    OP_COUNT
} op_id;

#define NODE_MAX_IN 6
#define NODE_MAX_IP 8
#define NODE_MAX_FP 6

/* node flags */
enum {
    NODE_F_FROZEN = 1u << 0,    /* parameter: no gradient, no update */
    NODE_F_OUTPUT = 1u << 1,    /* named output: pinned, readable */
    NODE_F_LOSS = 1u << 2,      /* the loss: pinned, readable */
    NODE_F_BACKWARD = 1u << 3,  /* created by autodiff */
    NODE_F_OPTIM = 1u << 4,     /* created by the optimizer stage */
    NODE_F_HOST = 1u << 5       /* written by the session from the host (hyper) */
};

typedef struct node {
    op_id op;
    mn_dtype dtype;
    uint32_t flags;
    int rank;
    int64_t shape[MN_MAX_RANK];
    int nin;
    int32_t in[NODE_MAX_IN];
    int64_t ip[NODE_MAX_IP];
    double fp[NODE_MAX_FP];
    char *name;     /* inputs, params, state, outputs; owned */
    mn_init init;   /* params */
    float lr_mult;  /* params */
    float *data;    /* CONST: numel f32 values; owned */
} node;

struct mn_graph {
    node *nodes;
    int32_t n, cap;
    int32_t loss; /* MN_NONE if unset */
    char err[512];
};

typedef struct op_info {
    const char *name;
    int min_in, max_in;
} op_info;
extern const op_info op_table[OP_COUNT];

/* Element count (1 for rank 0). */
int64_t node_numel(const node *n);
size_t node_bytes(const node *n, size_t elem_f32_size);
bool op_is_source(op_id op);

/* Appends a node whose fields the caller filled (op, nin, in, ip, fp, rank and
 * shape where the op needs them); checks arity, dtypes and shapes and fills
 * dtype/rank/shape. On error the graph is unchanged and g->err names the op
 * and shapes. */
mn_status graph_add(mn_graph *g, int32_t *out, node *proto);
/* Shape inference for one node (graph/shape.c). */
mn_status graph_infer(mn_graph *g, node *n);

/* Deep copy (names, data). */
mn_status graph_clone(mn_graph **out, const mn_graph *src);
int32_t graph_find(const mn_graph *g, const char *name);
/* "[2,3,4]" into buf. */
const char *shape_str(char *buf, size_t cap, int rank, const int64_t *shape);
/* One line per node; used by mn_graph_dump and session dumps. */
void graph_dump_node(const mn_graph *g, int32_t id, FILE *f);

/* printf into g->err; returns st. */
mn_status graph_fail(mn_graph *g, mn_status st, const char *fmt, ...) MN_PRINTF(3, 4);

/* Broadcast helpers: out shape of numpy broadcasting, or false. */
bool broadcast_shape(int *rank, int64_t *out, int ra, const int64_t *a, int rb, const int64_t *b);

#endif
