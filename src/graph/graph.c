/* graph.c - graph storage, handles and names, sources (inputs, params,
 * constants, state), outputs and the loss, cloning.
 *
 * Shape rules live in shape.c, the public op constructors in ops.c (and
 * ops_pointwise.c), the textual dump in dump.c. Does not: differentiate,
 * schedule, execute.
 */
#include "graph/graph.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>

#include "graph/attrs.h"
#include "io/safetensors.h" /* st_utf8_valid: names must fit a checkpoint header */

const op_info op_table[OP_COUNT] = {
#define MN_OP(E, n, lo, hi, bwd, fl, wr, fu) [OP_##E] = {#n, lo, hi, fl, wr, FUSE_##fu},
#include "graph/ops.def"
#undef MN_OP
};
/* Adding an op means touching every stage's table; this pin makes it loud. */
_Static_assert(OP_COUNT == 85, "op table changed: update every stage (autodiff, cpu) and this count");

int64_t node_numel(const node *n) {
    int64_t e = 1;
    for (int i = 0; i < n->rank; i++) e *= n->shape[i];
    return e;
}

size_t node_bytes(const node *n, size_t real_size) {
    if (n->flags & NODE_F_PACK16) return ((size_t)node_numel(n) + 1) / 2 * 4;
    size_t es = n->dtype == MN_I32 ? 4 : real_size;
    return (size_t)node_numel(n) * es;
}

/* Most elements a tensor may have (sources and op results alike). */
#define GRAPH_MAX_NUMEL ((uint64_t)1 << 40)

bool op_is_source(op_id op) { return op_has(op, OPF_SOURCE); }

const char *op_fuse_name(op_fuse f) {
    static const char *const names[FUSE_COUNT] = {"elementwise", "bcast", "reduce", "row",
                                                  "matmul", "layout", "opaque"};
    return f >= 0 && f < FUSE_COUNT ? names[f] : "?";
}

mn_status graph_fail(mn_graph *g, mn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    return st;
}

const char *shape_str(char *buf, size_t cap, int rank, const int64_t *shape) {
    size_t k = 0;
    if (cap < 3) return "";
    buf[k++] = '[';
    for (int i = 0; i < rank && k + 24 < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    buf[k++] = ']';
    buf[k] = 0;
    return buf;
}

/* Tags 1..255, round robin over the process (0 is never a tag, so a plain
 * node index is never a valid public handle). */
static atomic_uint graph_tag_counter;

mn_status mn_graph_create(mn_graph **out) {
    if (!out) return MN_E_INVALID;
    mn_graph *g = calloc(1, sizeof *g);
    *out = g;
    if (!g) return MN_E_NOMEM;
    g->loss = MN_NONE;
    g->tag = (uint8_t)(atomic_fetch_add(&graph_tag_counter, 1u) % 255u + 1u);
    return MN_OK;
}

static void node_release(node *n) {
    free(n->name);
    free(n->data);
}

void mn_graph_destroy(mn_graph *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n; i++) node_release(&g->nodes[i]);
    free(g->nodes);
    free(g->names);
    free(g);
}

const char *mn_graph_error(const mn_graph *g) { return g ? g->err : "no graph"; }

/* ---- handles ---------------------------------------------------------------- */

static uint32_t codec_tag(const mn_graph *g) { return g->raw_ids ? 0u : g->tag; }

mn_tensor graph_handle(const mn_graph *g, int32_t id) {
    if (id < 0) return MN_NONE;
    return (mn_tensor)((codec_tag(g) << GRAPH_ID_BITS) | (uint32_t)id);
}

int32_t graph_decode(const mn_graph *g, mn_tensor t) {
    if (!g || t < 0 || ((uint32_t)t >> GRAPH_ID_BITS) != codec_tag(g)) return -1;
    int32_t id = t & GRAPH_ID_MASK;
    return id < g->n ? id : -1;
}

mn_status graph_bad_tensor(mn_graph *g, const char *what, mn_tensor t) {
    const uint32_t tag = t < 0 ? 0u : (uint32_t)t >> GRAPH_ID_BITS;
    if (t >= 0 && tag != 0 && tag != codec_tag(g))
        return graph_fail(g, MN_E_INVALID, "%s: tensor handle 0x%08x belongs to another graph", what, (unsigned)t);
    const char *why = "";
    char buf[96];
    if (t == MN_NONE) why = " (MN_NONE where a tensor is required)";
    else if (t < 0) why = " (not a handle)";
    else if (tag != codec_tag(g)) why = " (use the handles its constructors return, not node numbers)";
    else {
        mn_fmt(buf, sizeof buf, " (no node %d: the graph has %d)", (int)(t & GRAPH_ID_MASK), (int)g->n);
        why = buf;
    }
    return graph_fail(g, MN_E_INVALID, "%s %d is not a tensor of this graph%s", what, t, why);
}

/* ---- the name index (open addressing, linear probing) ----------------------- */

static uint32_t name_slot(const mn_graph *g, const char *name) {
    return (uint32_t)mn_hash_str(name) & (g->names_cap - 1);
}

/* Inserts node id (named) into a table known to have room. */
static void names_put(mn_graph *g, int32_t id) {
    uint32_t h = name_slot(g, g->nodes[id].name);
    while (g->names[h] >= 0) h = (h + 1) & (g->names_cap - 1);
    g->names[h] = id;
    g->names_used++;
}

/* Rebuilds the index for the current nodes with at least cap slots. */
static mn_status names_rebuild(mn_graph *g, uint32_t cap) {
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return MN_E_NOMEM;
    free(g->names);
    g->names = t;
    g->names_cap = cap;
    g->names_used = 0;
    for (uint32_t i = 0; i < cap; i++) t[i] = -1;
    for (int32_t i = 0; i < g->n; i++)
        if (g->nodes[i].name) names_put(g, i);
    return MN_OK;
}

/* Room for one more name (load at most 1/2). */
static mn_status names_reserve(mn_graph *g) {
    if (g->names && (g->names_used + 1) * 2 <= g->names_cap) return MN_OK;
    uint32_t cap = g->names_cap ? g->names_cap : 64;
    while ((g->names_used + 1) * 2 > cap) cap *= 2;
    if (names_rebuild(g, cap)) return graph_fail(g, MN_E_NOMEM, "out of memory indexing names");
    return MN_OK;
}

int32_t graph_find(const mn_graph *g, const char *name) {
    if (!name) return MN_NONE;
    if (!g->names) { /* a graph assembled by hand (tests) */
        for (int32_t i = 0; i < g->n; i++)
            if (g->nodes[i].name && strcmp(g->nodes[i].name, name) == 0) return i;
        return MN_NONE;
    }
    for (uint32_t h = name_slot(g, name);; h = (h + 1) & (g->names_cap - 1)) {
        int32_t id = g->names[h];
        if (id < 0) return MN_NONE;
        if (strcmp(g->nodes[id].name, name) == 0) return id;
    }
}

void graph_truncate(mn_graph *g, int32_t n0) {
    bool named = false;
    for (int32_t i = n0; i < g->n; i++) {
        named |= g->nodes[i].name != NULL;
        node_release(&g->nodes[i]);
    }
    g->n = n0;
    /* composites add anonymous nodes: the index rarely changes; a rebuild at
     * the same size cannot fail for want of room, only of memory, and then
     * the (stale) index is dropped and graph_find scans */
    if (named && g->names && names_rebuild(g, g->names_cap)) {
        free(g->names);
        g->names = NULL;
        g->names_cap = g->names_used = 0;
    }
}

/* ---- names ---------------------------------------------------------------------- */

static bool utf8_valid(const char *s, size_t n) { return st_utf8_valid(s, n); }

mn_status graph_check_name(mn_graph *g, const char *what, const char *name, bool library) {
    if (!name || !*name) return graph_fail(g, MN_E_INVALID, "%s: empty name", what);
    size_t len = strlen(name);
    /* library names extend a user's ("optim.adamw.m." + a parameter name) */
    const size_t max = library ? MN_MAX_NAME + 64 : MN_MAX_NAME;
    if (len > max)
        return graph_fail(g, MN_E_INVALID, "%s '%.40s...': name of %zu bytes is longer than %zu bytes", what, name,
                          len, max);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f)
            return graph_fail(g, MN_E_INVALID, "%s: name has a control character (byte 0x%02x at offset %zu)", what,
                              c, i);
    }
    if (!utf8_valid(name, len)) return graph_fail(g, MN_E_INVALID, "%s: name is not valid UTF-8", what);
    if (!library && (strncmp(name, "optim.", 6) == 0 || strncmp(name, "__", 2) == 0))
        return graph_fail(g, MN_E_INVALID, "%s '%s': names starting with \"%s\" are reserved for the library%s", what,
                          name, name[0] == '_' ? "__" : "optim.",
                          name[0] == '_' ? "" : " (optimizer state is saved as optim.<kind>.<slot>.<param>)");
    if (graph_find(g, name) != MN_NONE)
        return graph_fail(g, MN_E_INVALID, "%s: the name '%s' is already used", what, name);
    return MN_OK;
}

/* ---- nodes ------------------------------------------------------------------ */

static mn_status graph_reserve(mn_graph *g) {
    if (g->n >= MN_MAX_NODES)
        return graph_fail(g, MN_E_INVALID, "graph: more than %d nodes (MN_MAX_NODES), counting the nodes a training "
                          "session adds", MN_MAX_NODES);
    if (g->n < g->cap) return MN_OK;
    int32_t cap = g->cap ? g->cap * 2 : 64;
    if (cap > MN_MAX_NODES) cap = MN_MAX_NODES;
    node *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
    if (!nn) return graph_fail(g, MN_E_NOMEM, "out of memory growing the graph to %d nodes", cap);
    g->nodes = nn;
    g->cap = cap;
    return MN_OK;
}

static bool tensor_ok(const mn_graph *g, int32_t id) { return id >= 0 && id < g->n; }

static mn_status add_node(mn_graph *g, int32_t *out, node *proto) {
    const op_info *oi = &op_table[proto->op];
    if (out) *out = MN_NONE;
    if (proto->nin < oi->min_in || proto->nin > oi->max_in)
        return graph_fail(g, MN_E_INVALID, "%s: takes %d..%d inputs, got %d", oi->name, oi->min_in,
                          oi->max_in, proto->nin);
    for (int i = 0; i < proto->nin; i++)
        if (!tensor_ok(g, proto->in[i]))
            return graph_fail(g, MN_E_INVALID, "%s: input %d is not a tensor of this graph (id %d)",
                              oi->name, i, proto->in[i]);
    mn_status st = graph_infer(g, proto);
    if (st) return st;
    /* the result obeys the same element limit as sources, so node_numel and
     * every size computed from it (memory plan, kernels) cannot overflow */
    uint64_t total = 1;
    for (int i = 0; i < proto->rank; i++)
        if (!mn_mul_u64(&total, total, (uint64_t)proto->shape[i]) || total > GRAPH_MAX_NUMEL) {
            char sb[96];
            return graph_fail(g, MN_E_SHAPE, "%s: result shape %s has too many elements (limit 2^40)",
                              oi->name, shape_str(sb, sizeof sb, proto->rank, proto->shape));
        }
    if (proto->name) { /* optimizer state: library names, unique by construction */
        if (graph_find(g, proto->name) != MN_NONE)
            return graph_fail(g, MN_E_INVALID, "%s: the name '%s' is already used", oi->name, proto->name);
        if ((st = names_reserve(g))) return st;
    }
    st = graph_reserve(g);
    if (st) return st;
    g->nodes[g->n] = *proto;
    if (proto->name) names_put(g, g->n);
    if (out) *out = g->n;
    g->n++;
    return MN_OK;
}

mn_status graph_add(mn_graph *g, mn_tensor *out, node *proto) {
    if (out) *out = MN_NONE;
    for (int i = 0; i < proto->nin && i < NODE_MAX_IN; i++) {
        int32_t id = graph_decode(g, proto->in[i]);
        if (id < 0) {
            char what[64];
            mn_fmt(what, sizeof what, "%s: input %d", op_table[proto->op].name, i);
            return graph_bad_tensor(g, what, proto->in[i]);
        }
        proto->in[i] = id;
    }
    int32_t id;
    mn_status st = add_node(g, &id, proto);
    if (!st && out) *out = graph_handle(g, id);
    return st;
}

node graph_proto(op_id op, int nin, const mn_tensor *in) {
    node p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.nin = nin;
    for (int i = 0; i < nin; i++) p.in[i] = in[i];
    p.lr_mult = 1.0f;
    return p;
}

static mn_status check_shape(mn_graph *g, const char *what, const char *name, int rank,
                             const int64_t *shape) {
    if (rank < 0 || rank > MN_MAX_RANK)
        return graph_fail(g, MN_E_SHAPE, "%s '%s': rank %d (supported 0..%d)", what, name, rank,
                          MN_MAX_RANK);
    if (rank > 0 && !shape) return graph_fail(g, MN_E_INVALID, "%s '%s': shape is NULL", what, name);
    uint64_t total = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] <= 0)
            return graph_fail(g, MN_E_SHAPE, "%s '%s': dimension %d is %lld (must be >= 1)", what,
                              name, i, (long long)shape[i]);
        if (!mn_mul_u64(&total, total, (uint64_t)shape[i]) || total > GRAPH_MAX_NUMEL)
            return graph_fail(g, MN_E_SHAPE, "%s '%s': too many elements", what, name);
    }
    return MN_OK;
}

static const char *source_what(op_id op) {
    switch (op) {
    case OP_INPUT: return "input";
    case OP_PARAM: return "param";
    case OP_STATE: return "state";
    default: return "constant";
    }
}

mn_status graph_source(mn_graph *g, int32_t *out, op_id op, const char *name, mn_dtype dt, int rank,
                       const int64_t *shape, bool library) {
    const char *what = source_what(op);
    mn_status st;
    *out = MN_NONE;
    /* inputs and parameters are found by name (set_input, checkpoints, the
     * init hash); only constants are anonymous */
    if ((op != OP_CONST || name) && (st = graph_check_name(g, what, name, library))) return st;
    if ((st = check_shape(g, what, name ? name : "", rank, shape))) return st;
    if (dt != MN_F32 && dt != MN_I32 && !(op == OP_INPUT && (dt == MN_F16 || dt == MN_BF16)))
        return graph_fail(g, MN_E_DTYPE, "%s '%s': dtype %s is not supported (f32, i32%s)", what, name ? name : "",
                          mn_dtype_name(dt), op == OP_INPUT ? ", f16, bf16" : "; 16-bit values come from inputs and mn_cast");
    node p = graph_proto(op, 0, NULL);
    p.dtype = dt;
    p.rank = rank;
    for (int i = 0; i < rank; i++) p.shape[i] = shape[i];
    if ((st = graph_reserve(g)) || (name && (st = names_reserve(g)))) return st;
    if (name && !(p.name = mn_strdup(name))) return graph_fail(g, MN_E_NOMEM, "out of memory");
    g->nodes[g->n] = p;
    if (name) names_put(g, g->n);
    *out = g->n;
    g->n++;
    return MN_OK;
}

/* The public source constructors: g and out checked, the result a handle. */
static mn_status add_source(mn_graph *g, mn_tensor *out, op_id op, const char *name, mn_dtype dt, int rank,
                            const int64_t *shape, mn_init init) {
    if (!g) return MN_E_INVALID;
    if (!out) return graph_fail(g, MN_E_INVALID, "%s '%s': out is NULL", source_what(op), name ? name : "");
    *out = MN_NONE;
    int32_t id;
    mn_status st = graph_source(g, &id, op, name, dt, rank, shape, false);
    if (st) return st;
    g->nodes[id].init = init;
    *out = graph_handle(g, id);
    return MN_OK;
}

mn_status mn_graph_input(mn_graph *g, mn_tensor *out, const char *name, mn_dtype dt, int rank,
                         const int64_t *shape) {
    mn_init none = {MN_INIT_ZEROS, 0, 0};
    return add_source(g, out, OP_INPUT, name, dt, rank, shape, none);
}

mn_status mn_graph_param(mn_graph *g, mn_tensor *out, const char *name, int rank,
                         const int64_t *shape, mn_init init) {
    if (g && ((int)init.kind < MN_INIT_ZEROS || init.kind > MN_INIT_KAIMING_NORMAL)) {
        if (out) *out = MN_NONE;
        return graph_fail(g, MN_E_INVALID, "param '%s': unknown initializer %d", name ? name : "",
                          (int)init.kind);
    }
    return add_source(g, out, OP_PARAM, name, MN_F32, rank, shape, init);
}

mn_status mn_graph_state(mn_graph *g, mn_tensor *out, const char *name, int rank, const int64_t *shape) {
    mn_init none = {MN_INIT_ZEROS, 0, 0};
    return add_source(g, out, OP_STATE, name, MN_F32, rank, shape, none);
}

static mn_status param_node(mn_graph *g, mn_tensor p, node **out, const char *what) {
    if (!g) return MN_E_INVALID;
    int32_t id = graph_decode(g, p);
    if (id < 0) return graph_bad_tensor(g, what, p);
    if (g->nodes[id].op != OP_PARAM)
        return graph_fail(g, MN_E_INVALID, "%s: tensor %%%d (%s) is not a parameter", what, id,
                          op_table[g->nodes[id].op].name);
    *out = &g->nodes[id];
    return MN_OK;
}

mn_status mn_graph_param_lr_mult(mn_graph *g, mn_tensor p, float mult) {
    node *n = NULL;
    mn_status st = param_node(g, p, &n, "param_lr_mult");
    if (st) return st;
    if (!(mult >= 0.0f) || mult > 1e6f)
        return graph_fail(g, MN_E_INVALID, "param '%s': lr multiplier %g must be in [0, 1e6]",
                          n->name, (double)mult);
    n->lr_mult = mult;
    return MN_OK;
}

mn_status mn_graph_param_freeze(mn_graph *g, mn_tensor p, bool frozen) {
    node *n = NULL;
    mn_status st = param_node(g, p, &n, "param_freeze");
    if (st) return st;
    if (frozen) n->flags |= NODE_F_FROZEN;
    else n->flags &= ~(uint32_t)NODE_F_FROZEN;
    return MN_OK;
}

/* A CONST node holding a copy of data, in node indices. */
static mn_status constant_id(mn_graph *g, int32_t *out, int rank, const int64_t *shape, const float *data) {
    int32_t t = MN_NONE;
    mn_status st = graph_source(g, &t, OP_CONST, NULL, MN_F32, rank, shape, true);
    if (st) return st;
    node *n = &g->nodes[t];
    size_t bytes = (size_t)node_numel(n) * sizeof(float);
    n->data = malloc(bytes ? bytes : 1);
    if (!n->data) {
        g->n--;
        return graph_fail(g, MN_E_NOMEM, "constant: out of memory for %zu bytes", bytes);
    }
    memcpy(n->data, data, bytes);
    *out = t;
    return MN_OK;
}

mn_status mn_graph_constant(mn_graph *g, mn_tensor *out, int rank, const int64_t *shape,
                            const float *data) {
    if (!g) return MN_E_INVALID;
    if (!out) return graph_fail(g, MN_E_INVALID, "constant: out is NULL");
    *out = MN_NONE;
    if (!data) return graph_fail(g, MN_E_INVALID, "constant: data is NULL");
    int32_t t = MN_NONE;
    mn_status st = constant_id(g, &t, rank, shape, data);
    if (!st) *out = graph_handle(g, t);
    return st;
}

mn_status mn_graph_scalar(mn_graph *g, mn_tensor *out, float value) {
    return mn_graph_constant(g, out, 0, NULL, &value);
}

mn_status mn_graph_output(mn_graph *g, mn_tensor t, const char *name) {
    if (!g) return MN_E_INVALID;
    int32_t id = graph_decode(g, t);
    if (id < 0) return graph_bad_tensor(g, "output", t);
    node *n = &g->nodes[id];
    if (n->name) {
        if (name && strcmp(n->name, name) != 0)
            return graph_fail(g, MN_E_INVALID, "output '%s': tensor already named '%s'", name, n->name);
    } else {
        mn_status st = graph_check_name(g, "output", name, false);
        if (st) return st;
        if ((st = names_reserve(g))) return st;
        if (!(n->name = mn_strdup(name))) return graph_fail(g, MN_E_NOMEM, "out of memory");
        names_put(g, id);
    }
    n->flags |= NODE_F_OUTPUT;
    return MN_OK;
}

mn_status mn_graph_loss(mn_graph *g, mn_tensor t) {
    if (!g) return MN_E_INVALID;
    int32_t id = graph_decode(g, t);
    if (id < 0) return graph_bad_tensor(g, "loss", t);
    node *n = &g->nodes[id];
    if (node_numel(n) != 1 || n->dtype != MN_F32) {
        char sb[64];
        return graph_fail(g, node_numel(n) != 1 ? MN_E_SHAPE : MN_E_DTYPE, "loss: must be an f32 scalar, got %s %s",
                          mn_dtype_name(n->dtype), shape_str(sb, sizeof sb, n->rank, n->shape));
    }
    if (g->loss != MN_NONE) g->nodes[g->loss].flags &= ~(uint32_t)NODE_F_LOSS;
    g->loss = id;
    n->flags |= NODE_F_LOSS;
    return MN_OK;
}

mn_status mn_tensor_shape(const mn_graph *g, mn_tensor t, int *rank, int64_t shape[MN_MAX_RANK]) {
    int32_t id = graph_decode(g, t);
    if (id < 0 || !rank) return MN_E_INVALID;
    const node *n = &g->nodes[id];
    *rank = n->rank;
    if (shape)
        for (int i = 0; i < MN_MAX_RANK; i++) shape[i] = i < n->rank ? n->shape[i] : 0;
    return MN_OK;
}

mn_status mn_tensor_dtype(const mn_graph *g, mn_tensor t, mn_dtype *dtype) {
    int32_t id = graph_decode(g, t);
    if (id < 0 || !dtype) return MN_E_INVALID;
    *dtype = g->nodes[id].dtype;
    return MN_OK;
}

mn_status graph_clone(mn_graph **out, const mn_graph *src) {
    mn_graph *g;
    mn_status st = mn_graph_create(&g);
    if (st) return st;
    g->loss = src->loss;
    g->tag = src->tag;
    g->raw_ids = src->raw_ids;
    g->sched_pre = src->sched_pre;
    g->cap = src->n + 64;
    g->nodes = calloc((size_t)g->cap, sizeof *g->nodes);
    if (!g->nodes) goto nomem;
    for (int32_t i = 0; i < src->n; i++) {
        node *d = &g->nodes[i];
        *d = src->nodes[i];
        d->name = NULL;
        d->data = NULL;
        g->n = i + 1;
        if (src->nodes[i].name && !(d->name = mn_strdup(src->nodes[i].name))) goto nomem;
        if (src->nodes[i].data) {
            size_t bytes = (size_t)node_numel(d) * sizeof(float);
            if (!(d->data = malloc(bytes ? bytes : 1))) goto nomem;
            memcpy(d->data, src->nodes[i].data, bytes);
        }
    }
    if (src->names && names_rebuild(g, src->names_cap)) goto nomem;
    *out = g;
    return MN_OK;
nomem:
    mn_graph_destroy(g);
    *out = NULL;
    return MN_E_NOMEM;
}

/* ---- dump ---------------------------------------------------------------- */
