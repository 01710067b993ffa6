/* serial.c - the graph section of an inference bundle (see serial.h).
 *
 * Layout (little endian; docs/BUNDLE.md is the reference):
 *   "MNGR", u32 version (1), u32 node count N, u32 loss (node index, or
 *   0xffffffff for none), u32 0; then N records in node order:
 *     u8 L, L bytes     op name as in ops.def ("matmul"): stable across
 *                       library versions, unlike the enum's numbers
 *     u8 dtype          mn_dtype (f32 0, i32 3)
 *     u8 rank (0..4), u8 nin (0..6), u8 flags (1 output, 2 frozen)
 *     i64 shape[rank]   the node's shape (checked against the shape rule)
 *     u32 in[nin]       earlier nodes only
 *     i64 ip[8], f64 fp[6]   the attributes, every slot (unused ones 0)
 *     u16 len, bytes    the name (sources) or the output name; 0: none
 *     param: u8 init kind, f32 a, f32 b, f32 lr multiplier
 *     const: f32 values[numel]
 *
 * Reading re-creates every node through the library's validation and then
 * compares the node the library made with the record: a record whose
 * attributes are not in the form the constructors give them (a boolean 2,
 * an unused slot set, a dropout threshold that does not match its
 * probability, a cross_entropy whose row statistics are not the ce_rows
 * node of its logits) is refused. That keeps a hand-made file from
 * building a node no public constructor could.
 *
 * Does not: know the bundle container or weights.
 */
#include "graph/serial.h"

#include <limits.h>
#include <math.h>

#include "graph/attrs.h"
#include "graph/pointwise.h"
#include "io/text.h"

enum { REC_OUTPUT = 1u, REC_FROZEN = 2u };
#define OPNAME_MAX 32
#define NO_LOSS 0xffffffffu
/* The smallest record: a 1-byte op name, 5 bytes of sizes and flags, the
 * attributes and an empty name. Bounds N against the section's size. */
#define MIN_RECORD (1 + 1 + 5 + 8 * NODE_MAX_IP + 8 * NODE_MAX_FP + 2)

/* What a record of op may hold: the ip and fp slots it uses (bit k: slot
 * k), the ip slots that are booleans, the ip slots the constructor takes as
 * a C int (the shape rules rely on that range: a stride near 2^63 would
 * overflow their arithmetic), and whether its shape is given by the record
 * (the constructor sets it) rather than inferred. */
typedef struct op_rule {
    uint8_t ip, fp, bools, ints;
    bool shape_given;
} op_rule;

/* The ops a public constructor makes (ops.c, ops_pointwise.c, graph.c). */
static bool rule_of(op_id op, op_rule *r) {
    *r = (op_rule){0, 0, 0, 0, false};
    switch (op) {
    case OP_INPUT: case OP_PARAM: case OP_STATE: case OP_CONST:
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV:
    case OP_NEG: case OP_EXP: case OP_LOG: case OP_SQRT: case OP_RSQRT: case OP_RELU: case OP_SIGMOID:
    case OP_TANH: case OP_GELU: case OP_GELU_TANH: case OP_SILU: case OP_STOP_GRAD: case OP_SIN: case OP_COS:
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_CROSS_ENTROPY_DENSE: case OP_MSE:
    case OP_ABS: case OP_WHERE: case OP_EMBEDDING: case OP_KV_APPEND: case OP_BN_MEAN: case OP_BN_MEANSQ:
        return true;
    case OP_MATMUL: *r = (op_rule){0x3, 0, 0x3, 0, false}; return true;
    case OP_SCALE: case OP_POW: *r = (op_rule){0, 0x1, 0, 0, false}; return true;
    case OP_CLAMP: *r = (op_rule){0, 0x3, 0, 0, false}; return true;
    case OP_SUM: case OP_MEAN: case OP_MAX: *r = (op_rule){0x3, 0, 0x2, 0x1, false}; return true;
    case OP_RESHAPE: case OP_BROADCAST: *r = (op_rule){0, 0, 0, 0, true}; return true;
    case OP_PERMUTE: *r = (op_rule){0xf, 0, 0, 0xf, false}; return true; /* narrowed to x's rank below */
    case OP_CROSS_ENTROPY: case OP_CE_ROWS: *r = (op_rule){0x3, 0x1, 0, 0, false}; return true;
    case OP_CONV2D: case OP_AVGPOOL2D: *r = (op_rule){0x7f, 0, 0, 0x7f, false}; return true;
    case OP_CONV2D_BWD_INPUT: *r = (op_rule){0x7f, 0, 0, 0x7f, true}; return true; /* conv_transpose2d */
    case OP_MAXPOOL2D: *r = (op_rule){0x3f, 0, 0, 0x3f, false}; return true;
    case OP_DROPOUT: *r = (op_rule){0x3, 0x1, 0, 0, false}; return true;
    case OP_SLICE: *r = (op_rule){0x7, 0, 0, 0x1, false}; return true;
    case OP_PAD: *r = (op_rule){0xff, 0, 0, 0, false}; return true;
    case OP_CONCAT: *r = (op_rule){0x1, 0, 0, 0x1, false}; return true;
    case OP_UPSAMPLE_NEAREST2D: *r = (op_rule){0x3, 0, 0, 0x3, false}; return true;
    case OP_EMA_UPDATE: *r = (op_rule){0, 0x3, 0, 0, false}; return true; /* batch_norm2d (training) */
    case OP_ROPE: *r = (op_rule){0x3, 0x1, 0, 0, false}; return true;
    case OP_ATTENTION: *r = (op_rule){0x3, 0x1, 0, 0, false}; return true;
    case OP_RMS_NORM: case OP_LAYER_NORM: *r = (op_rule){0x3, 0x1, 0x3, 0, false}; return true;
    default:
        return false; /* backward helpers, optimizer ops, library-internal nodes */
    }
}

bool graph_serial_op_allowed(op_id op) {
    op_rule r;
    return op >= 0 && op < OP_COUNT && rule_of(op, &r);
}

static mn_status fail(char *err, size_t cap, mn_status st, const char *fmt, ...) MN_PRINTF(4, 5);
static mn_status fail(char *err, size_t cap, mn_status st, const char *fmt, ...) {
    char msg[448];
    va_list ap;
    va_start(ap, fmt);
    mn_vfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mn_fmt(err, cap, "graph section: %s", msg);
    return st;
}

/* ---- writing -------------------------------------------------------------- */

mn_status graph_serialize(const mn_graph *g, mn_wbuf *w, char *err, size_t cap) {
    if (!g || g->n < 1) return fail(err, cap, MN_E_INVALID, "the graph is empty");
    wb_put(w, GRAPH_SERIAL_MAGIC, 4);
    wb_u32(w, GRAPH_SERIAL_VERSION);
    wb_u32(w, (uint32_t)g->n);
    wb_u32(w, g->loss == MN_NONE ? NO_LOSS : (uint32_t)g->loss);
    wb_u32(w, 0);
    for (int32_t i = 0; i < g->n; i++) {
        const node *n = &g->nodes[i];
        op_rule r;
        const char *on = op_table[n->op].name;
        if (!rule_of(n->op, &r) || (n->op == OP_EMA_UPDATE && n->nin != 2))
            return fail(err, cap, MN_E_UNSUPPORTED, "node %d: op %s is not made by a public constructor (a bundle "
                        "holds the forward graph a user builds, not backward or optimizer nodes)", i, on);
        if (n->dtype != MN_F32 && n->dtype != MN_I32) /* the reader takes f32 and i32 only (a bundle that would not load) */
            return fail(err, cap, MN_E_UNSUPPORTED, "node %d (%s): dtype %s; a bundle holds f32 and i32 tensors only "
                        "(16-bit inputs and casts are not in the format yet)", i, on, mn_dtype_name(n->dtype));
        if (n->flags & ~(uint32_t)(NODE_F_OUTPUT | NODE_F_LOSS | NODE_F_FROZEN))
            return fail(err, cap, MN_E_UNSUPPORTED, "node %d (%s): added by the library (autodiff, the optimizer: "
                        "flags 0x%x), not by a public constructor", i, on, (unsigned)n->flags);
        const size_t oplen = strlen(on), namelen = n->name ? strlen(n->name) : 0;
        MN_ASSERT(oplen >= 1 && oplen <= OPNAME_MAX && namelen <= MN_MAX_NAME + 64);
        wb_u8(w, (uint8_t)oplen);
        wb_put(w, on, oplen);
        wb_u8(w, (uint8_t)n->dtype);
        wb_u8(w, (uint8_t)n->rank);
        wb_u8(w, (uint8_t)n->nin);
        wb_u8(w, (uint8_t)((n->flags & NODE_F_OUTPUT ? REC_OUTPUT : 0) | (n->flags & NODE_F_FROZEN ? REC_FROZEN : 0)));
        for (int d = 0; d < n->rank; d++) wb_u64(w, (uint64_t)n->shape[d]);
        for (int k = 0; k < n->nin; k++) wb_u32(w, (uint32_t)n->in[k]);
        for (int k = 0; k < NODE_MAX_IP; k++) wb_u64(w, (uint64_t)n->ip[k]);
        for (int k = 0; k < NODE_MAX_FP; k++) wb_f64(w, n->fp[k]);
        wb_u16(w, (uint16_t)namelen);
        wb_put(w, n->name, namelen);
        if (n->op == OP_PARAM) {
            wb_u8(w, (uint8_t)n->init.kind);
            wb_f32(w, n->init.a);
            wb_f32(w, n->init.b);
            wb_f32(w, n->lr_mult);
        } else if (n->op == OP_CONST) {
            const int64_t numel = node_numel(n);
            for (int64_t k = 0; k < numel; k++) wb_f32(w, n->data[k]);
        }
    }
    return w->oom ? fail(err, cap, MN_E_NOMEM, "out of memory") : MN_OK;
}

/* ---- reading -------------------------------------------------------------- */

typedef struct record {
    op_id op;
    mn_dtype dtype;
    int rank, nin;
    unsigned flags;
    int64_t shape[MN_MAX_RANK];
    int32_t in[NODE_MAX_IN];
    int64_t ip[NODE_MAX_IP];
    double fp[NODE_MAX_FP];
    char name[MN_MAX_NAME + 1];
    bool named;
    mn_init init;
    float lr_mult;
    const uint8_t *data; /* const: numel little-endian f32 */
    uint64_t numel;
} record;

/* The op whose ops.def name is s[0..n) and that a bundle may hold. */
static bool op_by_name(op_id *out, const uint8_t *s, size_t n) {
    for (int k = 0; k < OP_COUNT; k++) {
        const char *nm = op_table[k].name;
        if (strlen(nm) == n && memcmp(nm, s, n) == 0 && graph_serial_op_allowed((op_id)k)) {
            *out = (op_id)k;
            return true;
        }
    }
    return false;
}

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Reads record i (its fields; nothing is built). */
static mn_status read_record(mn_rbuf *r, int32_t i, record *rec, char *err, size_t cap) {
    memset(rec, 0, sizeof *rec);
    const size_t oplen = rb_u8(r);
    const uint8_t *opname = rb_take(r, oplen);
    if (r->bad) return fail(err, cap, MN_E_FORMAT, "ends inside node %d", i);
    if (oplen < 1 || oplen > OPNAME_MAX || !op_by_name(&rec->op, opname, oplen)) {
        char shown[IO_ESC_NAME], raw[OPNAME_MAX + 1] = "";
        if (oplen <= OPNAME_MAX) memcpy(raw, opname, oplen), raw[oplen] = 0;
        return fail(err, cap, MN_E_FORMAT, "node %d: op '%s' is not an op a bundle may hold (the sources and the "
                    "forward ops of the public constructors)", i, io_esc(shown, sizeof shown, raw));
    }
    const char *on = op_table[rec->op].name;
    const unsigned dt = rb_u8(r);
    rec->rank = rb_u8(r);
    rec->nin = rb_u8(r);
    rec->flags = rb_u8(r);
    if (r->bad) return fail(err, cap, MN_E_FORMAT, "ends inside node %d (%s)", i, on);
    if (dt != MN_F32 && dt != MN_I32) return fail(err, cap, MN_E_FORMAT, "node %d (%s): dtype %u", i, on, dt);
    rec->dtype = (mn_dtype)dt;
    if (rec->rank > MN_MAX_RANK)
        return fail(err, cap, MN_E_SHAPE, "node %d (%s): rank %d (at most %d)", i, on, rec->rank, MN_MAX_RANK);
    if (rec->nin > NODE_MAX_IN || rec->nin < op_table[rec->op].min_in || rec->nin > op_table[rec->op].max_in)
        return fail(err, cap, MN_E_FORMAT, "node %d (%s): %d inputs (the op takes %d..%d)", i, on, rec->nin,
                    op_table[rec->op].min_in, op_table[rec->op].max_in);
    if (rec->flags & ~(REC_OUTPUT | REC_FROZEN))
        return fail(err, cap, MN_E_FORMAT, "node %d (%s): unknown flags 0x%x", i, on, rec->flags);
    for (int d = 0; d < rec->rank; d++) rec->shape[d] = (int64_t)rb_u64(r);
    for (int k = 0; k < rec->nin; k++) {
        const uint32_t in = rb_u32(r);
        if (!r->bad && in >= (uint32_t)i)
            return fail(err, cap, MN_E_FORMAT, "node %d (%s): input %d refers to node %u, not an earlier node (a "
                        "forward reference or a cycle)", i, on, k, in);
        rec->in[k] = (int32_t)in;
    }
    for (int k = 0; k < NODE_MAX_IP; k++) rec->ip[k] = (int64_t)rb_u64(r);
    for (int k = 0; k < NODE_MAX_FP; k++) rec->fp[k] = rb_f64(r);
    const size_t namelen = rb_u16(r);
    const uint8_t *name = rb_take(r, namelen);
    if (r->bad) return fail(err, cap, MN_E_FORMAT, "ends inside node %d (%s)", i, on);
    if (namelen > MN_MAX_NAME)
        return fail(err, cap, MN_E_INVALID, "node %d (%s): a name of %zu bytes (at most %d)", i, on, namelen,
                    MN_MAX_NAME);
    if (namelen && memchr(name, 0, namelen))
        return fail(err, cap, MN_E_INVALID, "node %d (%s): the name holds a NUL byte", i, on);
    memcpy(rec->name, name, namelen);
    rec->name[namelen] = 0;
    rec->named = namelen > 0;
    if (rec->op == OP_PARAM) {
        rec->init.kind = (mn_init_kind)rb_u8(r);
        rec->init.a = rb_f32(r);
        rec->init.b = rb_f32(r);
        rec->lr_mult = rb_f32(r);
    } else if (rec->op == OP_CONST) {
        /* the values' count from the shape, checked before anything is read */
        uint64_t numel = 1;
        for (int d = 0; d < rec->rank; d++)
            if (rec->shape[d] < 1 || !mn_mul_u64(&numel, numel, (uint64_t)rec->shape[d]) || numel > ((uint64_t)1 << 40))
                return fail(err, cap, MN_E_SHAPE, "node %d (const): dimension %d is %lld or the shape has too many "
                            "elements", i, d, (long long)rec->shape[d]);
        if (numel > rb_left(r) / 4)
            return fail(err, cap, MN_E_FORMAT, "node %d (const): %llu values, more than the section holds", i,
                        (unsigned long long)numel);
        rec->numel = numel;
        rec->data = rb_take(r, (size_t)numel * 4);
    }
    if (r->bad) return fail(err, cap, MN_E_FORMAT, "ends inside node %d (%s)", i, on);
    return MN_OK;
}

/* The attribute rules no shape rule checks: slots the op does not use are
 * 0, booleans are 0 or 1, and the values the constructors derive are the
 * ones they would derive. Inputs are known to be earlier nodes of g. */
static mn_status check_attrs(const mn_graph *g, int32_t i, const record *rec, char *err, size_t cap) {
    op_rule r;
    rule_of(rec->op, &r);
    const char *on = op_table[rec->op].name;
    uint32_t ipmask = r.ip;
    if (rec->op == OP_PERMUTE) ipmask = (1u << g->nodes[rec->in[0]].rank) - 1u;
    for (int k = 0; k < NODE_MAX_IP; k++) {
        if (!(ipmask >> k & 1u) && rec->ip[k] != 0)
            return fail(err, cap, MN_E_FORMAT, "node %d (%s): ip[%d] = %lld, a slot the op does not use", i, on, k,
                        (long long)rec->ip[k]);
        if ((r.bools >> k & 1u) && rec->ip[k] != 0 && rec->ip[k] != 1)
            return fail(err, cap, MN_E_FORMAT, "node %d (%s): ip[%d] = %lld is a flag (0 or 1)", i, on, k,
                        (long long)rec->ip[k]);
        if ((r.ints >> k & 1u) && (rec->ip[k] < INT_MIN || rec->ip[k] > INT_MAX))
            return fail(err, cap, MN_E_FORMAT, "node %d (%s): ip[%d] = %lld is beyond what the constructor takes (an "
                        "int)", i, on, k, (long long)rec->ip[k]);
    }
    for (int k = 0; k < NODE_MAX_FP; k++)
        if (!(r.fp >> k & 1u) && !same_bits(rec->fp[k], 0.0))
            return fail(err, cap, MN_E_FORMAT, "node %d (%s): fp[%d] = %g, a slot the op does not use", i, on, k,
                        rec->fp[k]);
    const node *in0 = rec->nin > 0 ? &g->nodes[rec->in[0]] : NULL;
    if ((rec->op == OP_CE_ROWS || rec->op == OP_CROSS_ENTROPY) && rec->ip[0] == 0 && rec->ip[1] != 0)
        return fail(err, cap, MN_E_FORMAT, "node %d (%s): an ignore_index (%lld) without use_ignore_index", i, on,
                    (long long)rec->ip[1]);
    switch (rec->op) {
    case OP_CROSS_ENTROPY: { /* its rows are the ce_rows node of the same logits, labels and options */
        const node *rows = &g->nodes[rec->in[2]];
        if (rows->op != OP_CE_ROWS || rows->in[0] != rec->in[0] || rows->in[1] != rec->in[1] ||
            rows->ip[0] != rec->ip[0] || rows->ip[1] != rec->ip[1] || !same_bits(rows->fp[0], rec->fp[0]))
            return fail(err, cap, MN_E_FORMAT, "node %d (cross_entropy): input 2 (node %d, %s) is not the ce_rows "
                        "node of its logits and labels", i, rec->in[2], op_table[rows->op].name);
        break;
    }
    case OP_DROPOUT: {
        const double p = rec->fp[0];
        if (p >= 0 && p <= 1 &&
            ((double)(float)p != p || rec->ip[1] != pw_dropout_threshold((float)p)))
            return fail(err, cap, MN_E_FORMAT, "node %d (dropout): probability %g and threshold %lld disagree", i, p,
                        (long long)rec->ip[1]);
        break; /* a probability outside [0, 1]: the shape rule refuses it */
    }
    case OP_EMA_UPDATE: /* batch_norm2d's running statistics: frozen parameters */
        if (rec->nin != 2 || in0->op != OP_PARAM || !(in0->flags & NODE_F_FROZEN))
            return fail(err, cap, MN_E_FORMAT, "node %d (ema_update): needs 2 inputs, the first a frozen parameter", i);
        break;
    case OP_RMS_NORM:
        if (rec->ip[0] != (rec->nin == 2) || rec->ip[1] != 0)
            return fail(err, cap, MN_E_FORMAT, "node %d (rms_norm): weight/bias flags %lld,%lld for %d inputs", i,
                        (long long)rec->ip[0], (long long)rec->ip[1], rec->nin);
        break;
    case OP_ROPE:
        if (rec->ip[1] != 0) return fail(err, cap, MN_E_FORMAT, "node %d (rope): the inverse rotation is autodiff's", i);
        break;
    default:
        break;
    }
    return MN_OK;
}

/* Builds the source of record i through the public calls. */
static mn_status add_source(mn_graph *g, const record *rec, int32_t i, char *err, size_t cap) {
    mn_tensor t = MN_NONE;
    mn_status st = check_attrs(g, i, rec, err, cap); /* no attributes at all */
    if (st) return st;
    const char *name = rec->named ? rec->name : NULL;
    if (rec->op != OP_PARAM && (rec->flags & REC_FROZEN))
        return fail(err, cap, MN_E_FORMAT, "node %d (%s): only parameters can be frozen", i, op_table[rec->op].name);
    if (rec->op != OP_INPUT && rec->dtype != MN_F32)
        return fail(err, cap, MN_E_DTYPE, "node %d (%s): dtype %s (f32 only)", i, op_table[rec->op].name,
                    mn_dtype_name(rec->dtype));
    switch (rec->op) {
    case OP_INPUT: st = mn_graph_input(g, &t, name, rec->dtype, rec->rank, rec->shape); break;
    case OP_STATE: st = mn_graph_state(g, &t, name, rec->rank, rec->shape); break;
    case OP_PARAM:
        st = mn_graph_param(g, &t, name, rec->rank, rec->shape, rec->init);
        if (!st && !same_bits(rec->lr_mult, 1.0f)) st = mn_graph_param_lr_mult(g, t, rec->lr_mult);
        if (!st && (rec->flags & REC_FROZEN)) st = mn_graph_param_freeze(g, t, true);
        break;
    case OP_CONST: {
        float *v = malloc((size_t)rec->numel * 4 + 4);
        if (!v) return fail(err, cap, MN_E_NOMEM, "node %d (const): out of memory for %llu values", i,
                            (unsigned long long)rec->numel);
        for (uint64_t k = 0; k < rec->numel; k++) {
            const uint32_t u = le32_get(rec->data + 4 * k);
            memcpy(&v[k], &u, 4);
        }
        st = mn_graph_constant(g, &t, rec->rank, rec->shape, v);
        free(v);
        /* a constant's only name is an output's */
        if (!st && name && !(rec->flags & REC_OUTPUT))
            return fail(err, cap, MN_E_FORMAT, "node %d (const): named but not an output", i);
        break;
    }
    default:
        MN_ASSERT(0);
    }
    if (st) return fail(err, cap, st, "node %d (%s): %s", i, op_table[rec->op].name, mn_graph_error(g));
    return MN_OK;
}

/* Builds op record i through graph_add and checks the node it made. */
static mn_status add_op(mn_graph *g, const record *rec, int32_t i, char *err, size_t cap) {
    const char *on = op_table[rec->op].name;
    mn_status st = check_attrs(g, i, rec, err, cap);
    if (st) return st;
    if (rec->named && !(rec->flags & REC_OUTPUT))
        return fail(err, cap, MN_E_FORMAT, "node %d (%s): named but not an output", i, on);
    if (rec->flags & REC_FROZEN)
        return fail(err, cap, MN_E_FORMAT, "node %d (%s): only parameters can be frozen", i, on);
    mn_tensor in[NODE_MAX_IN];
    for (int k = 0; k < rec->nin; k++) in[k] = graph_handle(g, rec->in[k]);
    node p = graph_proto(rec->op, rec->nin, in);
    memcpy(p.ip, rec->ip, sizeof p.ip);
    memcpy(p.fp, rec->fp, sizeof p.fp);
    op_rule r;
    rule_of(rec->op, &r);
    if (r.shape_given) { /* dimensions as the constructors check them (>= 1) */
        for (int d = 0; d < rec->rank; d++)
            if (rec->shape[d] < 1 || rec->shape[d] > ((int64_t)1 << 40))
                return fail(err, cap, MN_E_SHAPE, "node %d (%s): dimension %d is %lld (1..2^40)", i, on, d,
                            (long long)rec->shape[d]);
        p.rank = rec->rank;
        memcpy(p.shape, rec->shape, sizeof p.shape);
    }
    mn_tensor t;
    if ((st = graph_add(g, &t, &p))) return fail(err, cap, st, "node %d: %s", i, mn_graph_error(g));
    /* the node the library made is the node recorded */
    const node *n = &g->nodes[i];
    bool same = n->dtype == rec->dtype && n->rank == rec->rank;
    for (int d = 0; same && d < n->rank; d++) same = n->shape[d] == rec->shape[d];
    char sa[96], sb[96];
    if (!same)
        return fail(err, cap, MN_E_SHAPE, "node %d (%s): recorded %s %s, the shape rule gives %s %s", i, on,
                    mn_dtype_name(rec->dtype), shape_str(sa, sizeof sa, rec->rank, rec->shape),
                    mn_dtype_name(n->dtype), shape_str(sb, sizeof sb, n->rank, n->shape));
    for (int k = 0; k < NODE_MAX_IP; k++)
        if (n->ip[k] != rec->ip[k])
            return fail(err, cap, MN_E_FORMAT, "node %d (%s): ip[%d] is %lld, the library's form is %lld", i, on, k,
                        (long long)rec->ip[k], (long long)n->ip[k]);
    for (int k = 0; k < NODE_MAX_FP; k++)
        if (!same_bits(n->fp[k], rec->fp[k]))
            return fail(err, cap, MN_E_FORMAT, "node %d (%s): fp[%d] is %g, the library's form is %g", i, on, k,
                        rec->fp[k], n->fp[k]);
    return MN_OK;
}

mn_status graph_deserialize(mn_graph **out, const uint8_t *p, size_t n, char *err, size_t cap) {
    *out = NULL;
    mn_rbuf r = rb_of(p, n);
    const uint8_t *magic = rb_take(&r, 4);
    const uint32_t version = rb_u32(&r), count = rb_u32(&r), loss = rb_u32(&r), zero = rb_u32(&r);
    if (r.bad || memcmp(magic, GRAPH_SERIAL_MAGIC, 4) != 0)
        return fail(err, cap, MN_E_FORMAT, "not a graph section (no \"%s\" header)", GRAPH_SERIAL_MAGIC);
    if (version != GRAPH_SERIAL_VERSION)
        return fail(err, cap, MN_E_FORMAT, "format version %u; this library reads version %u (export the bundle "
                    "again with this version)", version, GRAPH_SERIAL_VERSION);
    if (zero != 0) return fail(err, cap, MN_E_FORMAT, "reserved field is %u, not 0", zero);
    if (count < 1 || count > MN_MAX_NODES || count > rb_left(&r) / MIN_RECORD)
        return fail(err, cap, MN_E_FORMAT, "%u nodes in %zu bytes (1..%d nodes of at least %d bytes each)", count,
                    rb_left(&r), MN_MAX_NODES, MIN_RECORD);
    if (loss != NO_LOSS && loss >= count)
        return fail(err, cap, MN_E_FORMAT, "the loss is node %u of %u", loss, count);
    mn_graph *g;
    if (mn_graph_create(&g)) return fail(err, cap, MN_E_NOMEM, "out of memory");
    record *rec = malloc(sizeof *rec);
    mn_status st = rec ? MN_OK : fail(err, cap, MN_E_NOMEM, "out of memory");
    for (int32_t i = 0; !st && i < (int32_t)count; i++) {
        if ((st = read_record(&r, i, rec, err, cap))) break;
        st = op_has(rec->op, OPF_SOURCE) ? add_source(g, rec, i, err, cap) : add_op(g, rec, i, err, cap);
        if (st) break;
        MN_ASSERT(g->n == i + 1); /* one record, one node */
        if ((rec->flags & REC_OUTPUT) &&
            (st = mn_graph_output(g, graph_handle(g, i), rec->named ? rec->name : NULL)))
            st = fail(err, cap, st, "node %d (%s): %s", i, op_table[rec->op].name, mn_graph_error(g));
    }
    free(rec);
    if (!st && loss != NO_LOSS && (st = mn_graph_loss(g, graph_handle(g, (int32_t)loss))))
        st = fail(err, cap, st, "node %u: %s", loss, mn_graph_error(g));
    if (!st && rb_left(&r))
        st = fail(err, cap, MN_E_FORMAT, "%zu bytes after the last node", rb_left(&r));
    if (st) {
        mn_graph_destroy(g);
        return st;
    }
    *out = g;
    return MN_OK;
}
