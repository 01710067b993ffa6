/* test_op_props.c - the property columns of ops.def agree with each other.
 *
 * Each rule below is one way a new op line could be wrong (a source with
 * inputs, an aliasing op that writes nothing, a side effect that autodiff
 * would differentiate, ...). The counts at the end pin how many ops have
 * each property: adding an op changes one, and the author decides there
 * whether memplan may run it in place, kir may fuse it, and so on.
 */
#include <ctype.h>
#include <string.h>

#include "autodiff/autodiff.h"
#include "graph/attrs.h"
#include "graph/graph.h"
#include "harness.h"

static const char *const op_enum[OP_COUNT] = {
#define MN_OP(E, n, lo, hi, bwd, fl, wr, fu) [OP_##E] = #E,
#include "graph/ops.def"
#undef MN_OP
};

/* name is ENUM in lower case */
static bool name_matches(const char *e, const char *name) {
    size_t i = 0;
    for (; e[i] && name[i]; i++)
        if (tolower((unsigned char)e[i]) != name[i]) return false;
    return e[i] == 0 && name[i] == 0;
}

static void check_op(op_id op) {
    const op_info *o = &op_table[op];
    const char *nm = o->name;
    const bool bwd = autodiff_has_rule(op);
    const uint32_t all_flags = OPF_SOURCE | OPF_VIEW | OPF_ALIAS | OPF_INPLACE | OPF_ROOT | OPF_ROOT_RUN;
    CHECK_MSG(nm && name_matches(op_enum[op], nm), "op %d: name '%s' is not OP_%s in lower case", (int)op,
              nm ? nm : "(null)", op_enum[op]);
    CHECK_MSG(o->min_in >= 0 && o->min_in <= o->max_in && o->max_in <= NODE_MAX_IN, "%s: arity %d..%d", nm,
              o->min_in, o->max_in);
    CHECK_MSG((o->flags & ~all_flags) == 0, "%s: unknown flag bits 0x%x", nm, o->flags & ~all_flags);
    CHECK_MSG(o->fuse >= 0 && o->fuse < FUSE_COUNT, "%s: fuse class %d", nm, (int)o->fuse);
    CHECK_MSG(o->writes >> o->max_in == 0, "%s: writes 0x%x names an input past max_inputs %d", nm, o->writes,
              o->max_in);
    /* sources */
    CHECK_MSG(op_has(op, OPF_SOURCE) == (o->max_in == 0), "%s: OPF_SOURCE iff no inputs (max_inputs %d)", nm,
              o->max_in);
    if (op_has(op, OPF_SOURCE))
        CHECK_MSG(o->flags == OPF_SOURCE && !o->writes && !bwd && o->fuse == FUSE_OPAQUE,
                  "%s: a source has no other flag, writes nothing, has no backward and is opaque", nm);
    /* views and aliases: storage of input 0 */
    if (op_has(op, OPF_VIEW))
        CHECK_MSG(!op_has(op, OPF_ALIAS | OPF_INPLACE | OPF_ROOT) && !o->writes && o->min_in >= 1,
                  "%s: a view reads input 0 and writes nothing", nm);
    if (op_has(op, OPF_ALIAS))
        CHECK_MSG(op_writes_input(op, 0) && o->min_in >= 1 && !op_has(op, OPF_INPLACE),
                  "%s: OPF_ALIAS updates input 0: writes must hold OPW(0)", nm);
    /* writes are side effects: they must stay live and never be differentiated */
    if (o->writes)
        CHECK_MSG(op_has(op, OPF_ALIAS) && op_has(op, OPF_ROOT),
                  "%s: writes an input, so it aliases input 0 and is a root (else liveness drops it)", nm);
    if (op_has(op, OPF_ROOT)) CHECK_MSG(!bwd && o->writes, "%s: a root has a side effect and no backward rule", nm);
    if (op_has(op, OPF_ROOT_RUN)) CHECK_MSG(op_has(op, OPF_ROOT), "%s: OPF_ROOT_RUN without OPF_ROOT", nm);
    /* in place: elementwise reads of input 0 at the output's own index */
    if (op_has(op, OPF_INPLACE))
        CHECK_MSG(o->min_in >= 1 && !o->writes && (o->fuse == FUSE_ELEMENTWISE || o->fuse == FUSE_OPAQUE),
                  "%s: OPF_INPLACE needs an elementwise op that writes no input", nm);
    if (o->fuse == FUSE_ELEMENTWISE)
        CHECK_MSG(op_has(op, OPF_INPLACE), "%s: elementwise but not OPF_INPLACE", nm);
    /* what kir fuses computes a value and nothing else */
    if (o->fuse == FUSE_ELEMENTWISE || o->fuse == FUSE_BCAST)
        CHECK_MSG(!op_has(op, OPF_SOURCE | OPF_VIEW | OPF_ALIAS | OPF_ROOT) && !o->writes,
                  "%s: a fusible op has no side effect and storage of its own", nm);
    CHECK_MSG(strcmp(op_fuse_name(o->fuse), "?") != 0, "%s: fuse class without a name", nm);
}

static int count_flag(uint32_t f) {
    int c = 0;
    for (int op = 0; op < OP_COUNT; op++) c += op_has((op_id)op, f);
    return c;
}

static int count_fuse(op_fuse f) {
    int c = 0;
    for (int op = 0; op < OP_COUNT; op++) c += op_fuse_class((op_id)op) == f;
    return c;
}

static int count_writes(void) {
    int c = 0;
    for (int op = 0; op < OP_COUNT; op++) c += op_writes_any((op_id)op);
    return c;
}

/* Each family's _set(_of(n)) writes back exactly the slots it read: a node
 * with distinct values in every slot, copied through the struct into a
 * zeroed node, agrees with the original on the slots the family owns and
 * leaves the others zero. */
#define ROUND_TRIP(OP, FAMILY, TYPE, IPMASK, FPMASK)                                                 \
    do {                                                                                             \
        node a, b;                                                                                   \
        memset(&a, 0, sizeof a);                                                                     \
        memset(&b, 0, sizeof b);                                                                     \
        a.op = b.op = OP;                                                                            \
        for (int i = 0; i < NODE_MAX_IP; i++) a.ip[i] = (IPMASK) >> i & 1 ? i + 2 : 0;                 \
        for (int i = 0; i < NODE_MAX_FP; i++) a.fp[i] = (FPMASK) >> i & 1 ? 0.5 + i : 0;             \
        const TYPE t = FAMILY##_attrs_of(&a);                                                        \
        FAMILY##_attrs_set(&b, &t);                                                                  \
        CHECK_MSG(memcmp(a.ip, b.ip, sizeof a.ip) == 0 && memcmp(a.fp, b.fp, sizeof a.fp) == 0,      \
                  "%s: %s_attrs_set(%s_attrs_of(n)) is not n", #OP, #FAMILY, #FAMILY);               \
    } while (0)

static void check_attrs(void) {
    /* the bool families read a slot as != 0 */
    node m;
    memset(&m, 0, sizeof m);
    m.ip[0] = 1, m.ip[1] = 0;
    CHECK(matmul_attrs_of(&m).trans_a && !matmul_attrs_of(&m).trans_b);
    ROUND_TRIP(OP_CONV2D, conv, mn_conv_attrs, 0x7f, 0);
    ROUND_TRIP(OP_AVGPOOL2D, pool, mn_pool_attrs, 0x7f, 0);
    ROUND_TRIP(OP_CROSS_ENTROPY, ce, mn_ce_attrs, 0x3, 0x1);
    ROUND_TRIP(OP_ATTENTION_BWD_KV, attention, mn_attention_attrs, 0x7, 0x1);
    ROUND_TRIP(OP_ROPE, rope, mn_rope_attrs, 0x3, 0x1);
    ROUND_TRIP(OP_SLICE, slice, mn_slice_attrs, 0x7, 0);
    ROUND_TRIP(OP_PAD, pad, mn_pad_attrs, 0xff, 0);
    ROUND_TRIP(OP_UPSAMPLE_NEAREST2D, upsample, mn_upsample_attrs, 0x3, 0);
    ROUND_TRIP(OP_EMA_UPDATE, ema, mn_ema_attrs, 0, 0x3);
    { /* norm flags are bools: through the struct and back */
        node n;
        memset(&n, 0, sizeof n);
        n.op = OP_LAYER_NORM;
        const mn_norm_attrs a = {1e-5, false, true};
        norm_attrs_set(&n, &a);
        const mn_norm_attrs b = norm_attrs_of(&n);
        CHECK(b.eps == a.eps && !b.weight && b.bias && n.ip[0] == 0 && n.ip[1] == 1);
        n.op = OP_RMS_NORM_BWD_W;
        norm_block_set(&n, 512);
        CHECK(norm_block(&n) == 512);
    }
    ROUND_TRIP(OP_DROPOUT, dropout, mn_dropout_attrs, 0x3, 0x1);
    ROUND_TRIP(OP_CLAMP, pw, mn_pw_attrs, 0, 0x3);
    ROUND_TRIP(OP_POW, pw, mn_pw_attrs, 0, 0x1);
    ROUND_TRIP(OP_SUM, reduce, mn_reduce_attrs, 0x1, 0);
    ROUND_TRIP(OP_ADAM_UPDATE, optim, mn_optim_attrs, 0, 0x1f);
    /* PW_BWD reads the slots of the op in its ip[0] */
    memset(&m, 0, sizeof m);
    m.op = OP_PW_BWD;
    bwd_of_set(&m, OP_CLAMP);
    pw_attrs_set(&m, &(mn_pw_attrs){.min = -1, .max = 2});
    CHECK(m.fp[0] == -1 && m.fp[1] == 2 && pw_attrs_of(&m).max == 2 && bwd_of(&m) == OP_CLAMP);
}

int main(void) {
    for (int op = 0; op < OP_COUNT; op++) check_op((op_id)op);
    check_attrs();
    /* the pins: a new op that takes one of these properties changes a count here */
    static const struct {
        const char *what;
        int want;
    } pins[] = {
        {"OPF_SOURCE", 4},   {"OPF_VIEW", 1}, {"OPF_ALIAS", 4},  {"OPF_INPLACE", 27}, {"OPF_ROOT", 4},
        {"OPF_ROOT_RUN", 1}, {"writes", 4},   {"elementwise", 26}, {"bcast", 2},      {"reduce", 9},
        {"row", 15},         {"matmul", 4},   {"layout", 5},     {"opaque", 24},
    };
    const int got[] = {count_flag(OPF_SOURCE),  count_flag(OPF_VIEW),         count_flag(OPF_ALIAS),
                       count_flag(OPF_INPLACE), count_flag(OPF_ROOT),         count_flag(OPF_ROOT_RUN),
                       count_writes(),          count_fuse(FUSE_ELEMENTWISE), count_fuse(FUSE_BCAST),
                       count_fuse(FUSE_REDUCE), count_fuse(FUSE_ROW),         count_fuse(FUSE_MATMUL),
                       count_fuse(FUSE_LAYOUT), count_fuse(FUSE_OPAQUE)};
    _Static_assert(MN_ARRAY_LEN(got) == MN_ARRAY_LEN(pins), "one count per pin");
    for (size_t i = 0; i < MN_ARRAY_LEN(pins); i++)
        CHECK_MSG(got[i] == pins[i].want,
                  "%d ops are %s, the pin says %d: decide the new op's properties in ops.def, then update this pin",
                  got[i], pins[i].what, pins[i].want);
    /* the readers agree with the table */
    CHECK(op_writes_input(OP_ADAM_UPDATE, 3) && !op_writes_input(OP_ADAM_UPDATE, 1));
    CHECK(!op_writes_input(OP_ADD, -1) && !op_writes_input(OP_ADD, 40));
    CHECK(strcmp(op_fuse_name(FUSE_ELEMENTWISE), "elementwise") == 0 && strcmp(op_fuse_name(FUSE_COUNT), "?") == 0);
    printf("op table: %d ops, properties consistent\n", OP_COUNT);
    return th_finish("test_op_props");
}
