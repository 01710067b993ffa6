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
#include "core/round16.h"

typedef enum op_id {
#define MN_OP(E, n, lo, hi, bwd, fl, wr, fu) OP_##E,
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
    NODE_F_HOST = 1u << 5,      /* written by the session from the host (hyper) */
    NODE_F_READ = 1u << 6,      /* read by the session after each step (the step gate): pinned like an output */
    NODE_F_SYNC = 1u << 7,      /* read and rewritten by the session between the backward pass and the
                                   updates (a gradient all-reduced in data-parallel training): never
                                   folded into another node's kernel, so it has storage */
    /* a contraction (fuse class MATMUL) of the fast contract: its operands
     * (inputs 0 and 1; never a bias) are rounded to bf16 / f16 before the
     * products, which accumulate in f32 (core/round16.h). Set by the
     * session from mn_session_options.precision. */
    NODE_F_ROUND_BF16 = 1u << 8,
    NODE_F_ROUND_F16 = 1u << 9,
    /* an f16 / bf16 tensor stored packed, two values a 32-bit word (element
     * i in word i / 2, the low half for even i; 2 bytes a value, the last
     * word's high half 0 for an odd count) instead of in f32 containers:
     * the operand casts of the fast contract on a backend whose kernels read
     * and write that form (session.c round_by_cast, backend
     * packs_operands). Set on casts (and reshapes of them) only, never on a tensor the host reads
     * or writes. */
    NODE_F_PACK16 = 1u << 10
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

/* Public tensor handles (mn_tensor) carry their graph: bits 23..30 hold the
 * graph's tag (1..255, drawn from a process-wide counter by mn_graph_create;
 * graph_clone keeps it), bits 0..22 the node index. Inside the library node
 * ids are plain indices: public entry points decode handles with
 * graph_decode() and encode results with graph_handle(). While a library
 * stage (autodiff, optim) builds nodes with the public constructors it sets
 * raw_ids, and handles are then plain indices (tag 0). */
#define GRAPH_ID_BITS 23
#define GRAPH_ID_MASK ((int32_t)((1u << GRAPH_ID_BITS) - 1))
_Static_assert(MN_MAX_NODES == (1 << GRAPH_ID_BITS), "MN_MAX_NODES must match the handle layout");

struct mn_graph {
    node *nodes;
    int32_t n, cap;
    int32_t loss;    /* node index, MN_NONE if unset */
    uint8_t tag;     /* 1..255: the high bits of this graph's handles */
    bool raw_ids;    /* handles are plain node indices (library stages) */
    /* 0, or the first of the nodes a session appended after the rest (the
     * fast contract's operand casts): the schedule runs each of them right
     * before its first consumer, not in creation order (schedule.h) */
    int32_t sched_pre;
    int32_t *names;  /* hash index of named nodes: node index or -1 (open addressing) */
    uint32_t names_cap, names_used;
    char err[512];
};

/* ---- the op table (ops.def: what each column means) ---- */

/* op flags: the properties later stages read instead of lists of ops */
enum {
    OPF_SOURCE = 1u << 0,   /* no inputs: input, param, state, const */
    OPF_VIEW = 1u << 1,     /* input 0 reinterpreted: no kernel, no storage */
    OPF_ALIAS = 1u << 2,    /* storage = input 0, updated by the kernel */
    OPF_INPLACE = 1u << 3,  /* may take input 0's storage at its last read */
    OPF_ROOT = 1u << 4,     /* side effect: live in training steps */
    OPF_ROOT_RUN = 1u << 5  /* side effect of inference too: live in runs */
};
/* the writes column: bit i = input i is written by the kernel */
#define OPW(i) (1u << (i))

/* The fusion classes (kir); ops.def's fuse column names them without prefix. */
typedef enum op_fuse {
    FUSE_ELEMENTWISE, /* out[i] = f(in[i]) with numpy broadcasting */
    FUSE_BCAST,       /* out[i] = one input element at a remapped index */
    FUSE_REDUCE,      /* sums or maxima over axes */
    FUSE_ROW,         /* one last-axis row at a time */
    FUSE_MATMUL,      /* contractions: matmul, convolutions */
    FUSE_LAYOUT,      /* copies that move elements (slice, pad, concat, ...) */
    FUSE_OPAQUE,      /* a kernel of its own */
    FUSE_COUNT
} op_fuse;

typedef struct op_info {
    const char *name;
    int min_in, max_in;
    uint32_t flags;  /* OPF_* */
    uint32_t writes; /* OPW(i) of each written input */
    op_fuse fuse;
} op_info;
extern const op_info op_table[OP_COUNT];

static inline bool op_has(op_id op, uint32_t flag) { return (op_table[op].flags & flag) != 0; }
static inline bool op_writes_input(op_id op, int i) { return i >= 0 && i < 32 && (op_table[op].writes >> i & 1u); }
static inline bool op_writes_any(op_id op) { return op_table[op].writes != 0; }
static inline op_fuse op_fuse_class(op_id op) { return op_table[op].fuse; }
/* "elementwise", "bcast", ... (the fuse column in lower case). */
const char *op_fuse_name(op_fuse f);

/* The operand rounding of a contraction (NODE_F_ROUND_*), MN_ROUND_NONE if
 * none. */
static inline mn_round16 node_round16(const node *n) {
    return (n->flags & NODE_F_ROUND_BF16) ? MN_ROUND_BF16 : (n->flags & NODE_F_ROUND_F16) ? MN_ROUND_F16 : MN_ROUND_NONE;
}

/* The fast contract's rounded nodes (NODE_F_ROUND_*, docs/ARCHITECTURE.md
 * "Precision"): every contraction, and attention's forward, log-sum-exp and
 * the two backward kernels (their products run on tensor cores too). */
static inline bool op_rounds16(op_id op) {
    return op_fuse_class(op) == FUSE_MATMUL || op == OP_ATTENTION || op == OP_ATTENTION_LSE ||
           op == OP_ATTENTION_BWD_Q || op == OP_ATTENTION_BWD_KV;
}
/* How many leading inputs a rounded node reads rounded: a contraction's two
 * operands; attention's q, k, v (the log-sum-exp too, which reads no v:
 * its inputs stay the forward's, kir's saved lse) and dout (the backward),
 * never the prep rows or the position. */
#define NODE_ROUND_INS_MAX 4
static inline int node_round_ins(const node *n) {
    switch (n->op) {
    case OP_ATTENTION:
    case OP_ATTENTION_LSE: return 3;
    case OP_ATTENTION_BWD_Q:
    case OP_ATTENTION_BWD_KV: return 4;
    default: return 2;
    }
}

/* Element count (1 for rank 0). */
int64_t node_numel(const node *n);
/* f32, f16 or bf16: a float tensor (16-bit ones held in f32 containers,
 * or packed two a word: NODE_F_PACK16). */
static inline bool dtype_is_float(mn_dtype d) { return d == MN_F32 || d == MN_F16 || d == MN_BF16; }
/* Bytes of a node's storage: elem_f32_size a float element (4, or 8 in the
 * CPU's f64 mode), 4 an i32, 2 a packed 16-bit value (NODE_F_PACK16,
 * rounded up to whole words). */
size_t node_bytes(const node *n, size_t elem_f32_size);
bool op_is_source(op_id op);

/* Appends a node whose fields the caller filled (op, nin, in, ip, fp, rank and
 * shape where the op needs them); checks arity, dtypes and shapes and fills
 * dtype/rank/shape. The inputs are handles (graph_decode: a bad one fails
 * naming the op and the input) and *out (out may be NULL) receives the new
 * node's handle; in raw-id mode both are node indices. A named proto
 * (optimizer state) enters the name index. On error the graph is unchanged
 * and g->err names the op and shapes. */
mn_status graph_add(mn_graph *g, int32_t *out, node *proto);
/* A zeroed node of op over the handles in[0..nin) (lr_mult 1), to fill and
 * pass to graph_add. */
node graph_proto(op_id op, int nin, const mn_tensor *in);
/* Shape inference for one node (graph/shape.c). */
mn_status graph_infer(mn_graph *g, node *n);

/* Deep copy (names, data, the tag and the name index). */
mn_status graph_clone(mn_graph **out, const mn_graph *src);
/* The node named name, or MN_NONE; a hash lookup (O(1) expected). */
int32_t graph_find(const mn_graph *g, const char *name);

/* ---- handles (see struct mn_graph) ---- */

/* The node index inside a handle already validated (or a plain index);
 * MN_NONE for negative values. */
static inline int32_t graph_id(mn_tensor t) { return t < 0 ? MN_NONE : (t & GRAPH_ID_MASK); }
/* The handle of node id (MN_NONE for a negative id). */
mn_tensor graph_handle(const mn_graph *g, int32_t id);
/* The one decode/validate of handles: the node index of t, or -1 when t is
 * not a tensor of g (MN_NONE or another negative value, another graph's
 * handle, an index past the last node). */
int32_t graph_decode(const mn_graph *g, mn_tensor t);
/* Writes why t is not a tensor of g ("<what>: tensor handle ... belongs to
 * another graph", ...) into g->err; returns MN_E_INVALID. */
mn_status graph_bad_tensor(mn_graph *g, const char *what, mn_tensor t);
/* Drops the nodes from n0 on (a failed composite); names leave the index. */
void graph_truncate(mn_graph *g, int32_t n0);

/* ---- names ---- */

/* The rules of public names (mn_graph_input/param/state/output): 1 to
 * MN_MAX_NAME bytes of valid UTF-8 without control characters, not starting
 * with the reserved prefixes "optim." or "__", unused in g. library = true
 * (names the library makes: "__hyper", "optim.<kind>.<slot>.<param>") skips
 * the prefix rule. On failure g->err names what and the name. */
mn_status graph_check_name(mn_graph *g, const char *what, const char *name, bool library);
/* A named source node (INPUT, PARAM, STATE) or an anonymous CONST, in node
 * indices; name rules as graph_check_name(library). */
mn_status graph_source(mn_graph *g, int32_t *out, op_id op, const char *name, mn_dtype dt, int rank,
                       const int64_t *shape, bool library);
/* "[2,3,4]" into buf. */
const char *shape_str(char *buf, size_t cap, int rank, const int64_t *shape);
/* One line per node; used by mn_graph_dump and session dumps. */
void graph_dump_node(const mn_graph *g, int32_t id, FILE *f);

/* printf into g->err; returns st. */
mn_status graph_fail(mn_graph *g, mn_status st, const char *fmt, ...) MN_PRINTF(3, 4);

/* Broadcast helpers: out shape of numpy broadcasting, or false. */
bool broadcast_shape(int *rank, int64_t *out, int ra, const int64_t *a, int rb, const int64_t *b);

#endif
