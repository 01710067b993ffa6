/* graph.c - graph storage, sources (inputs, params, constants), the public op
 * constructors, cloning and the textual dump.
 *
 * Shape rules live in shape.c. Does not: differentiate, schedule, execute.
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
_Static_assert(OP_COUNT == 80, "op table changed: update every stage (autodiff, cpu) and this count");

int64_t node_numel(const node *n) {
    int64_t e = 1;
    for (int i = 0; i < n->rank; i++) e *= n->shape[i];
    return e;
}

size_t node_bytes(const node *n, size_t real_size) {
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

static node proto_op(op_id op, int nin, const mn_tensor *in) {
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
    if (dt != MN_F32 && dt != MN_I32)
        return graph_fail(g, MN_E_DTYPE, "%s '%s': dtype %s is not supported yet (f32, i32)", what,
                          name ? name : "", mn_dtype_name(dt));
    node p = proto_op(op, 0, NULL);
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

mn_status graph_clone(mn_graph **out, const mn_graph *src) {
    mn_graph *g;
    mn_status st = mn_graph_create(&g);
    if (st) return st;
    g->loss = src->loss;
    g->tag = src->tag;
    g->raw_ids = src->raw_ids;
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

/* The op's parameters, only where the op has them (graph_dump_node). */
static void dump_attrs(const node *n, FILE *f) {
    switch (n->op) {
    case OP_MATMUL: {
        const mn_matmul_attrs a = matmul_attrs_of(n);
        if (a.trans_a || a.trans_b) fprintf(f, " trans=%d,%d", a.trans_a, a.trans_b);
        break;
    }
    case OP_SUM: case OP_MEAN: case OP_MAX: case OP_MAX_BWD: {
        const mn_reduce_attrs a = reduce_attrs_of(n);
        if (a.axis == MN_ALL_AXES) fprintf(f, " axis=all");
        else fprintf(f, " axis=%lld keepdim=%d", (long long)a.axis, a.keepdim);
        break;
    }
    case OP_PERMUTE:
        fprintf(f, " perm=");
        for (int i = 0; i < n->rank; i++) fprintf(f, i ? ",%lld" : "%lld", (long long)permute_axis(n, i));
        break;
    case OP_SCALE: fprintf(f, " %.9g", scale_factor(n)); break;
    case OP_CLIP_COEF: fprintf(f, " %.9g", clip_norm(n)); break;
    case OP_CONV2D: case OP_CONV2D_BWD_INPUT: case OP_CONV2D_BWD_WEIGHT: {
        const mn_conv_attrs a = conv_attrs_of(n);
        fprintf(f, " stride=%lld,%lld pad=%lld,%lld dilation=%lld,%lld groups=%lld", (long long)a.stride[0],
                (long long)a.stride[1], (long long)a.pad[0], (long long)a.pad[1], (long long)a.dilation[0],
                (long long)a.dilation[1], (long long)a.groups);
        break;
    }
    case OP_MAXPOOL2D: case OP_MAXPOOL2D_BWD: case OP_AVGPOOL2D: case OP_AVGPOOL2D_BWD: {
        static const char *div[] = {"valid", "area", "none"};
        const mn_pool_attrs a = pool_attrs_of(n);
        fprintf(f, " kernel=%lld,%lld stride=%lld,%lld pad=%lld,%lld", (long long)a.kernel[0], (long long)a.kernel[1],
                (long long)a.stride[0], (long long)a.stride[1], (long long)a.pad[0], (long long)a.pad[1]);
        if (n->op == OP_AVGPOOL2D || n->op == OP_AVGPOOL2D_BWD)
            fprintf(f, " divisor=%s", a.divisor >= 0 && a.divisor <= 2 ? div[a.divisor] : "?");
        break;
    }
    case OP_UNARY_BWD: fprintf(f, " of=%s", op_table[bwd_of(n)].name); break;
    case OP_SLICE: {
        const mn_slice_attrs a = slice_attrs_of(n);
        fprintf(f, " axis=%lld start=%lld length=%lld", (long long)a.axis, (long long)a.start, (long long)a.length);
        break;
    }
    case OP_PAD: {
        const mn_pad_attrs a = pad_attrs_of(n);
        fprintf(f, " pad=");
        for (int i = 0; i < n->rank; i++)
            fprintf(f, i ? ",%lld:%lld" : "%lld:%lld", (long long)a.before[i], (long long)a.after[i]);
        break;
    }
    case OP_CONCAT: fprintf(f, " axis=%lld", (long long)concat_axis(n)); break;
    case OP_UPSAMPLE_NEAREST2D: {
        const mn_upsample_attrs a = upsample_attrs_of(n);
        fprintf(f, " scale=%lld,%lld", (long long)a.scale[0], (long long)a.scale[1]);
        break;
    }
    case OP_EMA_UPDATE: {
        const mn_ema_attrs a = ema_attrs_of(n);
        fprintf(f, " momentum=%.9g scale=%.9g", a.momentum, a.scale);
        break;
    }
    case OP_CROSS_ENTROPY_DENSE_BWD: fprintf(f, " wrt=%s", ce_dense_wrt_targets(n) ? "targets" : "logits"); break;
    case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_BWD: case OP_CE_ROWS: {
        const mn_ce_attrs a = ce_attrs_of(n);
        if (a.use_ignore) fprintf(f, " ignore_index=%lld", (long long)a.ignore_index);
        if (a.smoothing != 0) fprintf(f, " smoothing=%.9g", a.smoothing);
        break;
    }
    case OP_SUMSQ:
        if (sumsq_rows(n)) fprintf(f, " rows");
        break;
    case OP_CE_COUNT: fprintf(f, " ignore_index=%lld", (long long)ce_attrs_of(n).ignore_index); break;
    case OP_RMS_NORM: case OP_RMS_NORM_BWD: case OP_LAYER_NORM_BWD: fprintf(f, " eps=%.9g", norm_attrs_of(n).eps); break;
    case OP_LAYER_NORM: {
        const mn_norm_attrs a = norm_attrs_of(n);
        fprintf(f, " eps=%.9g%s%s", a.eps, a.weight ? " weight" : "", a.bias ? " bias" : "");
        break;
    }
    case OP_RMS_NORM_BWD_W: case OP_LAYER_NORM_BWD_W:
        fprintf(f, " eps=%.9g block=%lld", norm_attrs_of(n).eps, (long long)norm_block(n));
        break;
    case OP_CLAMP: case OP_POW: case OP_PW_BWD: {
        const op_id of = n->op == OP_PW_BWD ? bwd_of(n) : n->op;
        const mn_pw_attrs a = pw_attrs_of(n);
        if (n->op == OP_PW_BWD) fprintf(f, " of=%s", op_table[of].name);
        if (of == OP_CLAMP) fprintf(f, " min=%.9g max=%.9g", a.min, a.max);
        if (of == OP_POW) fprintf(f, " p=%.9g", a.exponent);
        break;
    }
    case OP_DROPOUT: {
        const mn_dropout_attrs a = dropout_attrs_of(n);
        fprintf(f, " p=%.9g seed=%llu", a.p, (unsigned long long)a.seed);
        break;
    }
    case OP_SGD_UPDATE: {
        const mn_optim_attrs a = optim_attrs_of(n);
        fprintf(f, " lr_mult=%.9g momentum=%.9g wd=%.9g nesterov=%d%s", a.lr_mult, a.beta1, a.weight_decay, a.variant,
                a.gated ? " skip_nonfinite" : "");
        break;
    }
    case OP_ADAM_UPDATE: {
        const mn_optim_attrs a = optim_attrs_of(n);
        fprintf(f, " lr_mult=%.9g betas=%.9g,%.9g eps=%.9g wd=%.9g decoupled=%d%s", a.lr_mult, a.beta1, a.beta2,
                a.eps, a.weight_decay, a.variant, a.gated ? " skip_nonfinite" : "");
        break;
    }
    case OP_STEP_GATE: fprintf(f, " clip=%.9g", clip_norm(n)); break;
    case OP_ROPE: {
        const mn_rope_attrs a = rope_attrs_of(n);
        fprintf(f, " theta=%.9g offset=%lld%s", a.theta, (long long)a.offset, a.inverse ? " inverse" : "");
        break;
    }
    case OP_ATTENTION: case OP_ATTENTION_LSE: case OP_ATTENTION_BWD_Q: case OP_ATTENTION_BWD_KV: {
        const mn_attention_attrs a = attention_attrs_of(n);
        fprintf(f, " causal=%lld window=%lld scale=%.9g", (long long)a.causal, (long long)a.window, a.scale);
        if (n->op == OP_ATTENTION_BWD_KV) fprintf(f, " wrt=%s", a.wrt == 2 ? "kv" : a.wrt ? "v" : "k");
        break;
    }
    default: break;
    }
}

void graph_dump_node(const mn_graph *g, int32_t id, FILE *f) {
    const node *n = &g->nodes[id];
    char sb[96];
    fprintf(f, "%%%d = %s", id, op_table[n->op].name);
    if (n->nin) {
        fputc('(', f);
        for (int i = 0; i < n->nin; i++) fprintf(f, i ? ", %%%d" : "%%%d", n->in[i]);
        fputc(')', f);
    }
    fprintf(f, " : %s%s", mn_dtype_name(n->dtype), shape_str(sb, sizeof sb, n->rank, n->shape));
    if (n->name) fprintf(f, " \"%s\"", n->name);
    dump_attrs(n, f);
    if (n->op == OP_PARAM) {
        static const char *kinds[] = {"zeros", "constant", "uniform", "normal", "xavier_uniform",
                                      "xavier_normal", "kaiming_uniform", "kaiming_normal"};
        fprintf(f, " init=%s(%.9g,%.9g)", kinds[n->init.kind], (double)n->init.a, (double)n->init.b);
        if (n->lr_mult != 1.0f) fprintf(f, " lr_mult=%.9g", (double)n->lr_mult);
        if (n->flags & NODE_F_FROZEN) fprintf(f, " frozen");
    }
    if (n->flags & NODE_F_OUTPUT) fprintf(f, " output");
    if (n->flags & NODE_F_LOSS) fprintf(f, " loss");
    fputc('\n', f);
}

mn_status mn_graph_dump(const mn_graph *g, FILE *f) {
    if (!g || !f) return MN_E_INVALID;
    for (int32_t i = 0; i < g->n; i++) graph_dump_node(g, i, f);
    return MN_OK;
}

/* ---- public op constructors ---------------------------------------------- */

static mn_status add_op(mn_graph *g, mn_tensor *out, node *p) {
    if (!g) return MN_E_INVALID;
    if (!out) return graph_fail(g, MN_E_INVALID, "%s: out is NULL", op_table[p->op].name);
    return graph_add(g, out, p);
}

static mn_status binary(mn_graph *g, mn_tensor *out, op_id op, mn_tensor a, mn_tensor b) {
    mn_tensor in[2] = {a, b};
    node p = proto_op(op, 2, in);
    return add_op(g, out, &p);
}

static mn_status unary(mn_graph *g, mn_tensor *out, op_id op, mn_tensor x) {
    node p = proto_op(op, 1, &x);
    return add_op(g, out, &p);
}

mn_status mn_matmul(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) {
    return mn_matmul_ex(g, out, a, b, false, false);
}
mn_status mn_matmul_ex(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b, bool ta, bool tb) {
    mn_tensor in[2] = {a, b};
    node p = proto_op(OP_MATMUL, 2, in);
    matmul_attrs_set(&p, &(mn_matmul_attrs){ta, tb});
    return add_op(g, out, &p);
}
mn_status mn_add(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_ADD, a, b); }
mn_status mn_sub(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_SUB, a, b); }
mn_status mn_mul(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_MUL, a, b); }
mn_status mn_div(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_DIV, a, b); }
mn_status mn_scale(mn_graph *g, mn_tensor *out, mn_tensor x, float s) {
    node p = proto_op(OP_SCALE, 1, &x);
    scale_factor_set(&p, s);
    return add_op(g, out, &p);
}
mn_status mn_neg(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_NEG, x); }
mn_status mn_exp(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_EXP, x); }
mn_status mn_log(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_LOG, x); }
mn_status mn_sqrt(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SQRT, x); }
mn_status mn_rsqrt(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_RSQRT, x); }
mn_status mn_relu(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_RELU, x); }
mn_status mn_sigmoid(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SIGMOID, x); }
mn_status mn_tanh(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_TANH, x); }
mn_status mn_gelu(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_GELU, x); }
mn_status mn_gelu_tanh(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_GELU_TANH, x); }
mn_status mn_silu(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SILU, x); }
mn_status mn_stop_gradient(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_STOP_GRAD, x); }
mn_status mn_softmax(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_SOFTMAX, x); }
mn_status mn_log_softmax(mn_graph *g, mn_tensor *out, mn_tensor x) { return unary(g, out, OP_LOG_SOFTMAX, x); }

static mn_status reduce(mn_graph *g, mn_tensor *out, op_id op, mn_tensor x, int axis, bool keepdim) {
    node p = proto_op(op, 1, &x);
    reduce_attrs_set(&p, &(mn_reduce_attrs){axis, keepdim}); /* axis normalised by the shape rule */
    return add_op(g, out, &p);
}
mn_status mn_sum(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim) { return reduce(g, out, OP_SUM, x, axis, keepdim); }
mn_status mn_mean(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim) { return reduce(g, out, OP_MEAN, x, axis, keepdim); }
mn_status mn_max(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, bool keepdim) { return reduce(g, out, OP_MAX, x, axis, keepdim); }

mn_status mn_reshape(mn_graph *g, mn_tensor *out, mn_tensor x, int rank, const int64_t *shape) {
    node p = proto_op(OP_RESHAPE, 1, &x);
    if (!g) return MN_E_INVALID;
    if (rank < 0 || rank > MN_MAX_RANK || (rank > 0 && !shape))
        return graph_fail(g, MN_E_SHAPE, "reshape: rank %d (supported 0..%d)", rank, MN_MAX_RANK);
    p.rank = rank;
    for (int i = 0; i < rank; i++) p.shape[i] = shape[i];
    return add_op(g, out, &p);
}

mn_status mn_permute(mn_graph *g, mn_tensor *out, mn_tensor x, const int *perm) {
    node p = proto_op(OP_PERMUTE, 1, &x);
    if (!g) return MN_E_INVALID;
    if (!perm) return graph_fail(g, MN_E_INVALID, "permute: perm is NULL");
    int32_t xi = graph_decode(g, x);
    if (xi >= 0)
        for (int i = 0; i < g->nodes[xi].rank; i++) permute_axis_set(&p, i, perm[i]);
    return add_op(g, out, &p);
}

mn_status mn_transpose(mn_graph *g, mn_tensor *out, mn_tensor x, int a0, int a1) {
    if (!g) return MN_E_INVALID;
    int32_t xi = graph_decode(g, x);
    if (xi < 0) {
        if (out) *out = MN_NONE;
        return graph_bad_tensor(g, "transpose", x);
    }
    int r = g->nodes[xi].rank, perm[MN_MAX_RANK];
    if (a0 < 0) a0 += r;
    if (a1 < 0) a1 += r;
    if (a0 < 0 || a0 >= r || a1 < 0 || a1 >= r) {
        char sb[96];
        return graph_fail(g, MN_E_SHAPE, "transpose: axes %d,%d out of range for shape %s", a0, a1,
                          shape_str(sb, sizeof sb, r, g->nodes[xi].shape));
    }
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[a0] = a1;
    perm[a1] = a0;
    return mn_permute(g, out, x, perm);
}

mn_status mn_cross_entropy(mn_graph *g, mn_tensor *out, mn_tensor logits, mn_tensor labels) {
    return mn_cross_entropy_ex(g, out, logits, labels, NULL);
}
mn_status mn_cross_entropy_dense(mn_graph *g, mn_tensor *out, mn_tensor logits, mn_tensor targets) {
    return binary(g, out, OP_CROSS_ENTROPY_DENSE, logits, targets);
}
mn_status mn_mse(mn_graph *g, mn_tensor *out, mn_tensor a, mn_tensor b) { return binary(g, out, OP_MSE, a, b); }

static int or_one(int v) { return v ? v : 1; }

mn_status mn_conv2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                    const mn_conv2d_params *cp) {
    mn_tensor in[3] = {x, w, bias};
    node p = proto_op(OP_CONV2D, bias == MN_NONE ? 2 : 3, in);
    mn_conv2d_params d = {{1, 1}, {0, 0}, {1, 1}, 1};
    if (!cp) cp = &d;
    const mn_conv_attrs a = {{or_one(cp->stride[0]), or_one(cp->stride[1])},
                             {cp->padding[0], cp->padding[1]},
                             {or_one(cp->dilation[0]), or_one(cp->dilation[1])},
                             or_one(cp->groups)};
    conv_attrs_set(&p, &a);
    return add_op(g, out, &p);
}

/* The pooling attributes of public params: a stride of 0 is the kernel. */
static mn_pool_attrs pool_attrs_from(const mn_pool2d_params *pp, int64_t divisor) {
    return (mn_pool_attrs){{pp->kernel[0], pp->kernel[1]},
                           {pp->stride[0] ? pp->stride[0] : pp->kernel[0], pp->stride[1] ? pp->stride[1] : pp->kernel[1]},
                           {pp->padding[0], pp->padding[1]},
                           divisor};
}

mn_status mn_max_pool2d(mn_graph *g, mn_tensor *out, mn_tensor x, const mn_pool2d_params *pp) {
    node p = proto_op(OP_MAXPOOL2D, 1, &x);
    if (!g) return MN_E_INVALID;
    if (!pp) return graph_fail(g, MN_E_INVALID, "max_pool2d: params are NULL");
    const mn_pool_attrs a = pool_attrs_from(pp, 0);
    pool_attrs_set(&p, &a);
    return add_op(g, out, &p);
}

/* ---- layout family: slicing, padding, concatenation, pooling, upsampling,
 * convolution variants, batch norm ------------------------------------------ */

/* Composite constructors add several nodes; on a failure they drop the ones
 * they added (the graph is unchanged) and prefix the message with their name. */
/* The node of a handle already checked (check_args, graph_decode). */
#define NODE(t) (g->nodes[graph_id(t)])

static mn_status composite_fail(mn_graph *g, int32_t n0, mn_status st, const char *what) {
    char msg[sizeof g->err];
    graph_truncate(g, n0);
    memcpy(msg, g->err, sizeof msg);
    return graph_fail(g, st, "%s: %s", what, msg);
}

/* g, out and the tensors are usable; *out = MN_NONE. Afterwards the tensors
 * are known to be handles of g: NODE(ts[i]) reads their nodes. */
static mn_status check_args(mn_graph *g, mn_tensor *out, const char *what, int nt, const mn_tensor *ts) {
    if (!g) return MN_E_INVALID;
    if (!out) return graph_fail(g, MN_E_INVALID, "%s: out is NULL", what);
    *out = MN_NONE;
    for (int i = 0; i < nt; i++)
        if (graph_decode(g, ts[i]) < 0) return graph_bad_tensor(g, what, ts[i]);
    return MN_OK;
}

mn_status mn_slice(mn_graph *g, mn_tensor *out, mn_tensor x, int axis, int64_t start, int64_t length) {
    node p = proto_op(OP_SLICE, 1, &x);
    slice_attrs_set(&p, &(mn_slice_attrs){axis, start, length}); /* axis normalised by the shape rule */
    return add_op(g, out, &p);
}

mn_status mn_pad(mn_graph *g, mn_tensor *out, mn_tensor x, const int64_t *before, const int64_t *after) {
    mn_status st = check_args(g, out, "pad", 1, &x);
    if (st) return st;
    if (!before || !after) return graph_fail(g, MN_E_INVALID, "pad: before and after must not be NULL");
    node p = proto_op(OP_PAD, 1, &x);
    mn_pad_attrs a = {{0}, {0}};
    for (int i = 0; i < NODE(x).rank && i < 4; i++) a.before[i] = before[i], a.after[i] = after[i];
    pad_attrs_set(&p, &a);
    return add_op(g, out, &p);
}

mn_status mn_concat(mn_graph *g, mn_tensor *out, const mn_tensor *xs, int n, int axis) {
    mn_status st = check_args(g, out, "concat", 0, NULL);
    if (st) return st;
    if (!xs || n < 2) return graph_fail(g, MN_E_INVALID, "concat: needs at least 2 inputs, got %d", xs ? n : 0);
    const int32_t n0 = g->n;
    mn_tensor acc = MN_NONE;
    /* up to NODE_MAX_IN inputs per node; longer lists go in a chain whose
     * first input is the previous link */
    for (int done = 0; done < n;) {
        node p = proto_op(OP_CONCAT, 0, NULL);
        if (acc != MN_NONE) p.in[p.nin++] = acc;
        while (p.nin < NODE_MAX_IN && done < n) p.in[p.nin++] = xs[done++];
        concat_axis_set(&p, axis);
        if ((st = graph_add(g, &acc, &p))) return n0 == g->n ? st : composite_fail(g, n0, st, "concat");
    }
    *out = acc;
    return MN_OK;
}

mn_status mn_split(mn_graph *g, mn_tensor *outs, mn_tensor x, int axis, int n, const int64_t *sizes) {
    if (!g) return MN_E_INVALID;
    if (!outs) return graph_fail(g, MN_E_INVALID, "split: outs is NULL");
    for (int i = 0; i < n; i++) outs[i] = MN_NONE;
    int32_t xi = graph_decode(g, x);
    if (xi < 0) return graph_bad_tensor(g, "split", x);
    const node *xn = &g->nodes[xi];
    char sb[96];
    int a = axis < 0 ? axis + xn->rank : axis;
    if (a < 0 || a >= xn->rank)
        return graph_fail(g, MN_E_SHAPE, "split: axis %d out of range for shape %s", axis,
                          shape_str(sb, sizeof sb, xn->rank, xn->shape));
    const int64_t d = xn->shape[a];
    if (n < 1 || n > d)
        return graph_fail(g, MN_E_SHAPE, "split: %d parts of axis %d of %s", n, a, shape_str(sb, sizeof sb, xn->rank, xn->shape));
    if (!sizes && d % n)
        return graph_fail(g, MN_E_SHAPE, "split: axis %d of %s does not divide into %d equal parts", a,
                          shape_str(sb, sizeof sb, xn->rank, xn->shape), n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const int64_t len = sizes ? sizes[i] : d / n;
        if (len < 1 || len > d - total)
            return graph_fail(g, MN_E_SHAPE, "split: sizes do not add up to axis %d of %s (part %d is %lld)", a,
                              shape_str(sb, sizeof sb, xn->rank, xn->shape), i, (long long)len);
        total += len;
    }
    if (total != d)
        return graph_fail(g, MN_E_SHAPE, "split: sizes add up to %lld, axis %d of %s is %lld", (long long)total, a,
                          shape_str(sb, sizeof sb, xn->rank, xn->shape), (long long)d);
    const int32_t n0 = g->n;
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        const int64_t len = sizes ? sizes[i] : d / n;
        mn_status st = mn_slice(g, &outs[i], x, a, start, len);
        if (st) {
            for (int j = 0; j < n; j++) outs[j] = MN_NONE;
            return composite_fail(g, n0, st, "split");
        }
        start += len;
    }
    return MN_OK;
}

mn_status mn_broadcast_to(mn_graph *g, mn_tensor *out, mn_tensor x, int rank, const int64_t *shape) {
    mn_status st = check_args(g, out, "broadcast_to", 1, &x);
    if (st) return st;
    if (rank < 0 || rank > MN_MAX_RANK || (rank > 0 && !shape))
        return graph_fail(g, MN_E_SHAPE, "broadcast_to: rank %d (supported 0..%d)", rank, MN_MAX_RANK);
    node p = proto_op(OP_BROADCAST, 1, &x);
    p.rank = rank;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1) return graph_fail(g, MN_E_SHAPE, "broadcast_to: dimension %d is %lld", i, (long long)shape[i]);
        p.shape[i] = shape[i];
    }
    return add_op(g, out, &p);
}

mn_status mn_avg_pool2d(mn_graph *g, mn_tensor *out, mn_tensor x, const mn_pool2d_params *pp,
                        bool count_include_pad) {
    node p = proto_op(OP_AVGPOOL2D, 1, &x);
    if (!g) return MN_E_INVALID;
    if (!pp) return graph_fail(g, MN_E_INVALID, "avg_pool2d: params are NULL");
    const mn_pool_attrs a = pool_attrs_from(pp, count_include_pad ? POOL_DIV_AREA : POOL_DIV_INSIDE);
    pool_attrs_set(&p, &a);
    return add_op(g, out, &p);
}

mn_status mn_global_avg_pool(mn_graph *g, mn_tensor *out, mn_tensor x) {
    mn_status st = check_args(g, out, "global_avg_pool", 1, &x);
    if (st) return st;
    const node xn = NODE(x);
    char sb[96];
    if (xn.rank != 4)
        return graph_fail(g, MN_E_SHAPE, "global_avg_pool: x must be [N,C,H,W], got %s",
                          shape_str(sb, sizeof sb, xn.rank, xn.shape));
    const int32_t n0 = g->n;
    mn_tensor t;
    int64_t s3[3] = {xn.shape[0], xn.shape[1], xn.shape[2] * xn.shape[3]};
    int64_t s4[4] = {xn.shape[0], xn.shape[1], 1, 1};
    if ((st = mn_reshape(g, &t, x, 3, s3)) || (st = mn_mean(g, &t, t, 2, true)) || (st = mn_reshape(g, &t, t, 4, s4)))
        return composite_fail(g, n0, st, "global_avg_pool");
    *out = t;
    return MN_OK;
}

mn_status mn_upsample_nearest2d(mn_graph *g, mn_tensor *out, mn_tensor x, int scale_h, int scale_w) {
    node p = proto_op(OP_UPSAMPLE_NEAREST2D, 1, &x);
    upsample_attrs_set(&p, &(mn_upsample_attrs){{scale_h, scale_w}});
    return add_op(g, out, &p);
}

mn_status mn_upsample_nearest2x(mn_graph *g, mn_tensor *out, mn_tensor x) {
    return mn_upsample_nearest2d(g, out, x, 2, 2);
}

mn_status mn_conv1d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                    const mn_conv1d_params *cp) {
    mn_tensor ts[3] = {x, w, bias};
    mn_status st = check_args(g, out, "conv1d", bias == MN_NONE ? 2 : 3, ts);
    if (st) return st;
    const node xn = NODE(x), wn = NODE(w);
    char sa[96], sb[96];
    if (xn.rank != 3 || wn.rank != 3)
        return graph_fail(g, MN_E_SHAPE, "conv1d: x must be [N,C,L] and w [O,C/groups,K], got %s and %s",
                          shape_str(sa, sizeof sa, xn.rank, xn.shape), shape_str(sb, sizeof sb, wn.rank, wn.shape));
    mn_conv1d_params d = {1, 0, 1, 1};
    if (!cp) cp = &d;
    mn_conv2d_params p2 = {{1, cp->stride}, {0, cp->padding}, {1, cp->dilation}, cp->groups};
    const int32_t n0 = g->n;
    int64_t x4[4] = {xn.shape[0], xn.shape[1], 1, xn.shape[2]}, w4[4] = {wn.shape[0], wn.shape[1], 1, wn.shape[2]};
    mn_tensor xr, wr, y;
    if ((st = mn_reshape(g, &xr, x, 4, x4)) || (st = mn_reshape(g, &wr, w, 4, w4)) ||
        (st = mn_conv2d(g, &y, xr, wr, bias, &p2)))
        return composite_fail(g, n0, st, "conv1d");
    const node yn = NODE(y);
    int64_t y3[3] = {yn.shape[0], yn.shape[1], yn.shape[3]};
    if ((st = mn_reshape(g, &y, y, 3, y3))) return composite_fail(g, n0, st, "conv1d");
    *out = y;
    return MN_OK;
}

/* (in - 1) * s - 2 * p + d * (k - 1) + op + 1, or -1 when it overflows or
 * is below 1. in, k <= 2^40 (graph limit); s, p, d, op come from ints. */
static int64_t conv_transpose_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) {
    if (in - 1 > INT64_MAX / 4 / s || k - 1 > INT64_MAX / 4 / d) return -1;
    int64_t v = (in - 1) * s + d * (k - 1) + op + 1 - 2 * p;
    return v >= 1 ? v : -1;
}

/* The forward of a transposed convolution is the input gradient of the
 * conv2d whose weight is w: one CONV2D_BWD_INPUT node with the result shape
 * given. The bias is added by broadcasting. */
mn_status mn_conv_transpose2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor w, mn_tensor bias,
                              const mn_conv_transpose2d_params *cp) {
    mn_tensor ts[3] = {x, w, bias};
    mn_status st = check_args(g, out, "conv_transpose2d", bias == MN_NONE ? 2 : 3, ts);
    if (st) return st;
    const node xn = NODE(x), wn = NODE(w);
    char sa[96], sb[96];
    shape_str(sa, sizeof sa, xn.rank, xn.shape);
    shape_str(sb, sizeof sb, wn.rank, wn.shape);
    if (xn.rank != 4 || wn.rank != 4)
        return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: x must be [N,C_in,H,W] and w [C_in,C_out/groups,KH,KW], got %s and %s", sa, sb);
    mn_conv_transpose2d_params d = {{1, 1}, {0, 0}, {0, 0}, {1, 1}, 1};
    if (!cp) cp = &d;
    const int64_t s[2] = {or_one(cp->stride[0]), or_one(cp->stride[1])};
    const int64_t dl[2] = {or_one(cp->dilation[0]), or_one(cp->dilation[1])};
    const int64_t pd[2] = {cp->padding[0], cp->padding[1]}, op[2] = {cp->output_padding[0], cp->output_padding[1]};
    const int64_t groups = or_one(cp->groups);
    for (int i = 0; i < 2; i++) {
        if (s[i] < 1 || dl[i] < 1 || pd[i] < 0)
            return graph_fail(g, MN_E_INVALID, "conv_transpose2d: invalid stride %lld, padding %lld or dilation %lld",
                              (long long)s[i], (long long)pd[i], (long long)dl[i]);
        if (op[i] < 0 || op[i] >= s[i])
            return graph_fail(g, MN_E_INVALID, "conv_transpose2d: output_padding %lld must be in [0, stride %lld)",
                              (long long)op[i], (long long)s[i]);
    }
    if (groups < 1 || xn.shape[1] % groups)
        return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: groups %lld must divide the %lld input channels of x %s",
                          (long long)groups, (long long)xn.shape[1], sa);
    if (wn.shape[0] != xn.shape[1])
        return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: w %s must start with x's %lld input channels (x %s)", sb,
                          (long long)xn.shape[1], sa);
    const int64_t c_out = wn.shape[1] * groups;
    if (bias != MN_NONE) {
        const node *bn = &NODE(bias);
        if (bn->rank != 1 || bn->shape[0] != c_out) {
            char sc[96];
            return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: bias %s must be [%lld] for w %s and groups %lld",
                              shape_str(sc, sizeof sc, bn->rank, bn->shape), (long long)c_out, sb, (long long)groups);
        }
    }
    const int64_t oh = conv_transpose_out(xn.shape[2], wn.shape[2], s[0], pd[0], dl[0], op[0]);
    const int64_t ow = conv_transpose_out(xn.shape[3], wn.shape[3], s[1], pd[1], dl[1], op[1]);
    if (oh < 1 || ow < 1)
        return graph_fail(g, MN_E_SHAPE, "conv_transpose2d: x %s and w %s give an empty output (padding too large)", sa, sb);
    mn_tensor in[2] = {x, w};
    node p = proto_op(OP_CONV2D_BWD_INPUT, 2, in);
    conv_attrs_set(&p, &(mn_conv_attrs){{s[0], s[1]}, {pd[0], pd[1]}, {dl[0], dl[1]}, groups});
    p.rank = 4;
    p.shape[0] = xn.shape[0], p.shape[1] = c_out, p.shape[2] = oh, p.shape[3] = ow;
    const int32_t n0 = g->n;
    mn_tensor y, b4;
    if ((st = graph_add(g, &y, &p))) return composite_fail(g, n0, st, "conv_transpose2d");
    if (bias != MN_NONE) {
        int64_t s4[4] = {1, c_out, 1, 1};
        if ((st = mn_reshape(g, &b4, bias, 4, s4)) || (st = mn_add(g, &y, y, b4)))
            return composite_fail(g, n0, st, "conv_transpose2d");
    }
    *out = y;
    return MN_OK;
}

/* An optional [C] tensor (MN_NONE allowed) for batch_norm2d. */
static mn_status bn_vec(mn_graph *g, mn_tensor t, const char *what, int64_t c, bool optional) {
    char sb[96];
    if (t == MN_NONE && optional) return MN_OK;
    if (graph_decode(g, t) < 0) {
        char w[64];
        mn_fmt(w, sizeof w, "batch_norm2d: %s", what);
        return graph_bad_tensor(g, w, t);
    }
    const node *n = &NODE(t);
    if (n->dtype != MN_F32) return graph_fail(g, MN_E_DTYPE, "batch_norm2d: %s must be f32", what);
    if (n->rank != 1 || n->shape[0] != c)
        return graph_fail(g, MN_E_SHAPE, "batch_norm2d: %s %s must be [%lld]", what,
                          shape_str(sb, sizeof sb, n->rank, n->shape), (long long)c);
    return MN_OK;
}

static mn_status add_ema(mn_graph *g, mn_tensor running, mn_tensor value, double momentum, double scale) {
    mn_tensor in[2] = {running, value};
    node p = proto_op(OP_EMA_UPDATE, 2, in);
    ema_attrs_set(&p, &(mn_ema_attrs){momentum, scale});
    return graph_add(g, NULL, &p);
}

mn_status mn_batch_norm2d(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor weight, mn_tensor bias,
                          mn_tensor running_mean, mn_tensor running_var, float momentum, float eps,
                          bool training) {
    mn_status st = check_args(g, out, "batch_norm2d", 1, &x);
    if (st) return st;
    const node xn = NODE(x);
    char sb[96];
    if (xn.rank != 4 || xn.dtype != MN_F32)
        return graph_fail(g, xn.rank != 4 ? MN_E_SHAPE : MN_E_DTYPE, "batch_norm2d: x must be f32 [N,C,H,W], got %s %s",
                          mn_dtype_name(xn.dtype), shape_str(sb, sizeof sb, xn.rank, xn.shape));
    const int64_t N = xn.shape[0], C = xn.shape[1], HW = xn.shape[2] * xn.shape[3];
    if ((st = bn_vec(g, weight, "weight", C, true)) || (st = bn_vec(g, bias, "bias", C, true)) ||
        (st = bn_vec(g, running_mean, "running_mean", C, false)) || (st = bn_vec(g, running_var, "running_var", C, false)))
        return st;
    if (running_mean == running_var)
        return graph_fail(g, MN_E_INVALID, "batch_norm2d: running_mean and running_var must be different tensors");
    if (!(eps >= 0.0f) || !isfinite(eps)) return graph_fail(g, MN_E_INVALID, "batch_norm2d: eps %g must be >= 0", (double)eps);
    if (training) {
        if (!(momentum >= 0.0f && momentum <= 1.0f))
            return graph_fail(g, MN_E_INVALID, "batch_norm2d: momentum %g must be in [0, 1]", (double)momentum);
        if (NODE(running_mean).op != OP_PARAM || NODE(running_var).op != OP_PARAM)
            return graph_fail(g, MN_E_INVALID, "batch_norm2d: in training the running statistics must be parameters "
                              "(mn_graph_param, zeros and ones)");
        if (N * HW < 2)
            return graph_fail(g, MN_E_SHAPE, "batch_norm2d: training needs more than one value per channel, x is %s",
                              shape_str(sb, sizeof sb, xn.rank, xn.shape));
    }
    const int32_t n0 = g->n;
    mn_tensor y, e, mu, var, scale, t, w, b;
    if ((st = mn_graph_scalar(g, &e, eps))) return composite_fail(g, n0, st, "batch_norm2d");
    if (training) {
        /* x as [N,C,H*W]: mean over the last axis, then over the batch (equal
         * counts: the mean of means is the mean); two passes for the variance */
        const int64_t s3[3] = {N, C, HW}, c3[3] = {1, C, 1};
        mn_tensor xr, d, sq;
        st = mn_reshape(g, &xr, x, 3, s3);
        st = st ? st : mn_mean(g, &t, xr, 2, true);
        st = st ? st : mn_mean(g, &mu, t, 0, true);            /* [1,C,1] */
        st = st ? st : mn_sub(g, &d, xr, mu);                  /* [N,C,HW] */
        st = st ? st : mn_mul(g, &sq, d, d);
        st = st ? st : mn_mean(g, &t, sq, 2, true);
        st = st ? st : mn_mean(g, &var, t, 0, true);           /* biased, [1,C,1] */
        st = st ? st : mn_add(g, &t, var, e);
        st = st ? st : mn_rsqrt(g, &scale, t);
        if (!st && weight != MN_NONE && !(st = mn_reshape(g, &w, weight, 3, c3))) st = mn_mul(g, &scale, scale, w);
        st = st ? st : mn_mul(g, &y, d, scale);
        if (!st && bias != MN_NONE && !(st = mn_reshape(g, &b, bias, 3, c3))) st = mn_add(g, &y, y, b);
        st = st ? st : mn_reshape(g, &y, y, 4, xn.shape);
        /* running statistics, updated in place at each training step */
        const double cnt = (double)N * (double)HW;
        st = st ? st : add_ema(g, running_mean, mu, momentum, 1.0);
        st = st ? st : add_ema(g, running_var, var, momentum, cnt / (cnt - 1.0));
    } else {
        const int64_t c4[4] = {1, C, 1, 1};
        mn_tensor rm, rv, d;
        st = mn_reshape(g, &rm, running_mean, 4, c4);
        st = st ? st : mn_reshape(g, &rv, running_var, 4, c4);
        st = st ? st : mn_sub(g, &d, x, rm);
        st = st ? st : mn_add(g, &t, rv, e);
        st = st ? st : mn_rsqrt(g, &scale, t);
        if (!st && weight != MN_NONE && !(st = mn_reshape(g, &w, weight, 4, c4))) st = mn_mul(g, &scale, scale, w);
        st = st ? st : mn_mul(g, &y, d, scale);
        if (!st && bias != MN_NONE && !(st = mn_reshape(g, &b, bias, 4, c4))) st = mn_add(g, &y, y, b);
    }
    if (st) return composite_fail(g, n0, st, "batch_norm2d");
    /* running statistics are buffers, not trainable parameters */
    if (NODE(running_mean).op == OP_PARAM) NODE(running_mean).flags |= NODE_F_FROZEN;
    if (NODE(running_var).op == OP_PARAM) NODE(running_var).flags |= NODE_F_FROZEN;
    *out = y;
    return MN_OK;
}

mn_status mn_fold_batch_norm(float *w_out, float *b_out, const float *w, const float *b,
                             int64_t out_channels, int64_t per_channel, const float *gamma,
                             const float *beta, const float *mean, const float *var, float eps) {
    if (!w_out || !b_out || !w || !mean || !var || out_channels < 1 || per_channel < 1 ||
        out_channels > INT64_MAX / per_channel)
        return MN_E_INVALID;
    for (int64_t o = 0; o < out_channels; o++) {
        const double v = (double)var[o] + (double)eps;
        if (!(v > 0.0) || !isfinite(v)) return MN_E_INVALID;
    }
    for (int64_t o = 0; o < out_channels; o++) {
        const double sc = (gamma ? (double)gamma[o] : 1.0) / sqrt((double)var[o] + (double)eps);
        for (int64_t k = 0; k < per_channel; k++)
            w_out[o * per_channel + k] = (float)((double)w[o * per_channel + k] * sc);
        b_out[o] = (float)(((b ? (double)b[o] : 0.0) - (double)mean[o]) * sc + (beta ? (double)beta[o] : 0.0));
    }
    return MN_OK;
}
/* ---- transformer family --------------------------------------------------- */

mn_status mn_embedding(mn_graph *g, mn_tensor *out, mn_tensor table, mn_tensor ids) {
    return binary(g, out, OP_EMBEDDING, table, ids);
}

mn_status mn_rope(mn_graph *g, mn_tensor *out, mn_tensor x, mn_tensor pos, float theta, int64_t offset) {
    mn_tensor in[2] = {x, pos};
    node p = proto_op(OP_ROPE, pos == MN_NONE ? 1 : 2, in);
    rope_attrs_set(&p, &(mn_rope_attrs){offset, 0, theta == 0.0f ? 10000.0 : (double)theta});
    return add_op(g, out, &p);
}

mn_status mn_attention(mn_graph *g, mn_tensor *out, mn_tensor q, mn_tensor k, mn_tensor v, mn_tensor pos,
                       const mn_attention_params *ap) {
    mn_tensor in[4] = {q, k, v, pos};
    node p = proto_op(OP_ATTENTION, pos == MN_NONE ? 3 : 4, in);
    mn_attention_params d = {false, 0, 0.0f};
    if (!ap) ap = &d;
    /* the default scale is resolved here, rounded to f32 like a given one, so
     * every backend and precision multiplies by the same number */
    float scale = ap->scale;
    const int32_t qi = graph_decode(g, q);
    if (scale == 0.0f && qi >= 0 && g->nodes[qi].rank == 4 && g->nodes[qi].shape[3] > 0)
        scale = (float)(1.0 / sqrt((double)g->nodes[qi].shape[3]));
    attention_attrs_set(&p, &(mn_attention_attrs){ap->causal, ap->window, scale, 0});
    return add_op(g, out, &p);
}

mn_status mn_graph_state(mn_graph *g, mn_tensor *out, const char *name, int rank, const int64_t *shape) {
    mn_init none = {MN_INIT_ZEROS, 0, 0};
    return add_source(g, out, OP_STATE, name, MN_F32, rank, shape, none);
}

mn_status mn_kv_append(mn_graph *g, mn_tensor *out, mn_tensor cache, mn_tensor x, mn_tensor pos) {
    mn_tensor in[3] = {cache, x, pos};
    node p = proto_op(OP_KV_APPEND, 3, in);
    return add_op(g, out, &p);
}
