/* vk_spirv_coopmat.c - NV cooperative matrices to KHR (and f16 to bf16) in
 * SPIR-V modules glslang 12 writes for kernels/matmul_coopmat.glsl, and a
 * structural check of the result (vk_spirv.h says what each does).
 *
 * How a matrix type gets its use: a union-find over the ids whose type is
 * a cooperative matrix or built on one (arrays of them, pointers to them:
 * glslang keeps the fragments in Function variables), joined through
 * loads, stores, access chains, phis, copies, selects and composites;
 * each multiply-add labels its A operand's class MatrixA, its B operand's
 * MatrixB and its C operand's and result's MatrixAccumulator. A class with
 * two labels is refused; a class with none (a fragment never multiplied)
 * takes its type's label where the type has one, else Accumulator for f32
 * and A otherwise. Every (type, label) pair in use becomes one KHR type:
 * the first keeps the NV type's id, the others are new ids declared right
 * after it (pointer and array types likewise, after theirs).
 *
 * The numbers below (opcodes, capabilities, enumerants) are those of the
 * SPIR-V specification and its SPV_KHR_cooperative_matrix and
 * SPV_KHR_bfloat16 extensions, which the Debian 12 headers predate; the
 * older NV ones and the result/type layout of every other instruction come
 * from Debian's spirv-headers.
 *
 * Does not: optimise, or handle cooperative matrices in function
 * parameters, structs or specialisation constants (refused).
 */
#define SPV_ENABLE_UTILITY_CODE
#include <spirv/unified1/spirv.h>

#include "backend/vulkan/vk_spirv.h"

/* spirv.h defines this as a C99 inline function: this translation unit
 * provides its external definition. */
extern void SpvHasResultAndType(SpvOp opcode, bool *hasResult, bool *hasResultType);

enum {
    OP_TYPE_COOPMAT_KHR = 4456,
    OP_COOPMAT_LOAD_KHR = 4457,
    OP_COOPMAT_STORE_KHR = 4458,
    OP_COOPMAT_MULADD_KHR = 4459,
    OP_COOPMAT_LENGTH_KHR = 4460,
    CAP_COOPMAT_KHR = 6022,
    CAP_BF16_TYPE = 5116,
    CAP_BF16_COOPMAT = 5118,
    FP_ENCODING_BF16 = 0,
    USE_A = 0,
    USE_B = 1,
    USE_ACC = 2,
    LAYOUT_ROW = 0,
    LAYOUT_COL = 1,
    SCOPE_SUBGROUP = 3
};
#define EXT_NV "SPV_NV_cooperative_matrix"
#define EXT_KHR "SPV_KHR_cooperative_matrix"
#define EXT_BF16 "SPV_KHR_bfloat16"

/* ---- module parsing ---------------------------------------------------- */

typedef struct sp_ins {
    size_t at;   /* word offset */
    uint32_t wc; /* word count */
    uint32_t op;
} sp_ins;

typedef struct sp_mod {
    const uint32_t *w;
    size_t n;
    sp_ins *ins;
    size_t nins;
    uint32_t bound;
    int32_t *def;   /* per id: the defining instruction, -1 */
    uint32_t *type; /* per id: its result type, 0 */
} sp_mod;

static void sp_free(sp_mod *m) {
    free(m->ins);
    free(m->def);
    free(m->type);
    memset(m, 0, sizeof *m);
}

static mn_status sp_fail(char *err, size_t cap, const char *what, const char *fmt, ...) MN_PRINTF(4, 5);
static mn_status sp_fail(char *err, size_t cap, const char *what, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    mn_fmt(err, cap, "spirv %s: %s", what, msg);
    return MN_E_BACKEND;
}

/* Whether op has a result id and a result type (words 1 and 2, or 1). The
 * KHR cooperative-matrix opcodes are newer than Debian's table. */
static void sp_result(uint32_t op, bool *res, bool *rtype) {
    switch (op) {
    case OP_TYPE_COOPMAT_KHR: *res = true, *rtype = false; return;
    case OP_COOPMAT_LOAD_KHR:
    case OP_COOPMAT_MULADD_KHR:
    case OP_COOPMAT_LENGTH_KHR: *res = *rtype = true; return;
    case OP_COOPMAT_STORE_KHR: *res = *rtype = false; return;
    default: SpvHasResultAndType((SpvOp)op, res, rtype);
    }
}

static mn_status sp_parse(sp_mod *m, const uint32_t *w, size_t n, const char *what, char *err, size_t cap) {
    memset(m, 0, sizeof *m);
    if (n < 5 || w[0] != SpvMagicNumber) return sp_fail(err, cap, what, "not a SPIR-V module (%zu words)", n);
    if (w[3] == 0 || w[3] > (1u << 22)) return sp_fail(err, cap, what, "id bound %u out of range", w[3]);
    m->w = w, m->n = n, m->bound = w[3];
    size_t capn = 256;
    m->ins = malloc(capn * sizeof *m->ins);
    m->def = malloc(m->bound * sizeof *m->def);
    m->type = calloc(m->bound, sizeof *m->type);
    if (!m->ins || !m->def || !m->type) {
        sp_free(m);
        return MN_E_NOMEM;
    }
    for (uint32_t i = 0; i < m->bound; i++) m->def[i] = -1;
    for (size_t at = 5; at < n;) {
        const uint32_t wc = w[at] >> 16, op = w[at] & 0xffffu;
        if (wc == 0 || at + wc > n) {
            sp_free(m);
            return sp_fail(err, cap, what, "instruction at word %zu has word count %u past the end", at, wc);
        }
        if (m->nins == capn) {
            capn *= 2;
            sp_ins *ni = realloc(m->ins, capn * sizeof *ni);
            if (!ni) {
                sp_free(m);
                return MN_E_NOMEM;
            }
            m->ins = ni;
        }
        bool res, rt;
        sp_result(op, &res, &rt);
        const uint32_t need = 1 + (uint32_t)res + (uint32_t)rt;
        if (wc < need) {
            sp_free(m);
            return sp_fail(err, cap, what, "opcode %u at word %zu is shorter (%u words) than its result", op, at, wc);
        }
        if (res) {
            const uint32_t id = w[at + 1 + (rt ? 1 : 0)];
            if (id == 0 || id >= m->bound || m->def[id] >= 0) {
                sp_free(m);
                return sp_fail(err, cap, what, "id %u (opcode %u) is out of the bound %u or defined twice", id, op,
                               m->bound);
            }
            m->def[id] = (int32_t)m->nins;
            if (rt) m->type[id] = w[at + 1];
        }
        m->ins[m->nins++] = (sp_ins){at, wc, op};
        at += wc;
    }
    return MN_OK;
}

static const uint32_t *sp_at(const sp_mod *m, uint32_t id) {
    return id < m->bound && m->def[id] >= 0 ? m->w + m->ins[m->def[id]].at : NULL;
}
static uint32_t sp_op(const sp_mod *m, uint32_t id) {
    const uint32_t *p = sp_at(m, id);
    return p ? (p[0] & 0xffffu) : 0;
}
/* Value of an OpConstant of a 32-bit integer type, or -1. */
static int64_t sp_const_u32(const sp_mod *m, uint32_t id) {
    const uint32_t *p = sp_at(m, id);
    if (!p || (p[0] & 0xffffu) != SpvOpConstant || (p[0] >> 16) != 4) return -1;
    const uint32_t *t = sp_at(m, p[1]);
    if (!t || (t[0] & 0xffffu) != SpvOpTypeInt || t[2] != 32) return -1;
    return p[3];
}
static bool sp_is_string(const sp_ins *in, const uint32_t *w, const char *s) {
    const size_t len = strlen(s), words = len / 4 + 1;
    return in->wc == 1 + words && memcmp(w + in->at + 1, s, len) == 0 && ((const char *)(w + in->at + 1))[len] == 0;
}

/* Words of a literal string operand (nul-terminated, padded). */
static size_t str_words(const char *s) { return strlen(s) / 4 + 1; }

/* ---- output buffer ----------------------------------------------------- */

typedef struct sp_out {
    uint32_t *w;
    size_t n, cap;
    bool oom;
} sp_out;

static void out_word(sp_out *o, uint32_t v) {
    if (o->oom) return;
    if (o->n == o->cap) {
        size_t c2 = o->cap ? o->cap * 2 : 4096;
        uint32_t *nw = realloc(o->w, c2 * sizeof *nw);
        if (!nw) {
            o->oom = true;
            return;
        }
        o->w = nw, o->cap = c2;
    }
    o->w[o->n++] = v;
}
static void out_ins(sp_out *o, uint32_t op, const uint32_t *ops, uint32_t nops) {
    out_word(o, ((1 + nops) << 16) | op);
    for (uint32_t i = 0; i < nops; i++) out_word(o, ops[i]);
}
static void out_string_ins(sp_out *o, uint32_t op, const char *s) {
    const size_t words = str_words(s);
    out_word(o, (uint32_t)((1 + words) << 16) | op);
    for (size_t i = 0; i < words; i++) {
        uint32_t v = 0;
        for (size_t b = 0; b < 4; b++) {
            const size_t c = i * 4 + b;
            if (c < strlen(s)) v |= (uint32_t)(unsigned char)s[c] << (8 * b);
        }
        out_word(o, v);
    }
}

/* ---- the rewrite ------------------------------------------------------- */

/* Types built on an NV matrix type: the matrix itself, arrays of such,
 * pointers to such. root[t] = the matrix type at the bottom, 0 if t is not
 * one; elem[t] = the type it is built on. */
typedef struct cm_types {
    uint32_t *root, *elem;
    uint8_t *mask; /* labels (1 << USE_*) wanted for each such type */
    uint32_t *tid; /* [t * 3 + use]: the KHR type's id */
} cm_types;

static uint32_t uf_find(uint32_t *p, uint32_t x) {
    while (p[x] != x) x = p[x] = p[p[x]];
    return x;
}
/* The union-find's arrays have one slot per id below the module's bound. */
static void uf_join(uint32_t *p, uint8_t *lab, uint32_t bound, uint32_t a, uint32_t b) {
    if (a >= bound || b >= bound) return; /* cm_constrain refuses such ids first */
    a = uf_find(p, a), b = uf_find(p, b);
    if (a == b) return;
    p[a] = b;
    lab[b] |= lab[a];
}

static bool cm_valued(const sp_mod *m, const cm_types *t, uint32_t id) {
    return id < m->bound && m->type[id] && m->type[id] < m->bound && t->root[m->type[id]];
}

/* Opcodes whose words are ignored when looking for uses of a matrix value:
 * debug and annotation instructions name ids without using them. */
static bool cm_inert(uint32_t op) {
    switch (op) {
    case SpvOpNop: case SpvOpSource: case SpvOpSourceContinued: case SpvOpSourceExtension: case SpvOpName:
    case SpvOpMemberName: case SpvOpString: case SpvOpLine: case SpvOpNoLine: case SpvOpModuleProcessed:
    case SpvOpDecorate: case SpvOpMemberDecorate: case SpvOpDecorateString: case SpvOpMemberDecorateString:
    case SpvOpExtension: case SpvOpCapability: case SpvOpExtInstImport: case SpvOpMemoryModel:
    case SpvOpEntryPoint: case SpvOpExecutionMode: case SpvOpExecutionModeId:
        return true;
    default: return false;
    }
}

/* Joins the classes an instruction connects and labels the products.
 * Returns false for an instruction that touches a matrix value in a way
 * this pass does not know. */
static bool cm_constrain(const sp_mod *m, const cm_types *t, const sp_ins *in, uint32_t *uf, uint8_t *lab,
                         uint32_t *bad_op) {
    const uint32_t *w = m->w + in->at;
    const uint32_t op = in->op, wc = in->wc;
    bool res, rt;
    sp_result(op, &res, &rt);
    const uint32_t r = res ? w[rt ? 2 : 1] : 0;
    const bool rv = res && rt && cm_valued(m, t, r);
    /* the operands this pass reads must exist and name ids of the module */
    static const struct {
        uint32_t op, min_wc;
    } shapes[] = {{SpvOpCooperativeMatrixMulAddNV, 6}, {SpvOpCooperativeMatrixLoadNV, 6},
                  {SpvOpCooperativeMatrixStoreNV, 5}, {SpvOpCooperativeMatrixLengthNV, 4},
                  {SpvOpLoad, 4}, {SpvOpStore, 3}, {SpvOpAccessChain, 4}, {SpvOpInBoundsAccessChain, 4},
                  {SpvOpCopyObject, 4}, {SpvOpSelect, 6}, {SpvOpCompositeExtract, 4}, {SpvOpCompositeInsert, 5}};
    for (size_t i = 0; i < MN_ARRAY_LEN(shapes); i++)
        if (op == shapes[i].op && wc < shapes[i].min_wc) return *bad_op = op, false;
    if (op == SpvOpLoad || op == SpvOpAccessChain || op == SpvOpInBoundsAccessChain || op == SpvOpCopyObject ||
        op == SpvOpCompositeExtract || op == SpvOpCompositeInsert)
        if (w[3] >= m->bound || (op == SpvOpCompositeInsert && w[4] >= m->bound)) return *bad_op = op, false;
    if (op == SpvOpStore && (w[1] >= m->bound || w[2] >= m->bound)) return *bad_op = op, false;
    if (op == SpvOpSelect && (w[4] >= m->bound || w[5] >= m->bound)) return *bad_op = op, false;
    if (op == SpvOpPhi)
        for (uint32_t i = 3; i < wc; i++)
            if (w[i] >= m->bound) return *bad_op = op, false;
#define V(i) (cm_valued(m, t, w[i]))
    switch (op) {
    case SpvOpCooperativeMatrixMulAddNV:
        if (wc != 6 || !V(3) || !V(4) || !V(5) || !rv) break;
        lab[uf_find(uf, w[3])] |= 1u << USE_A;
        lab[uf_find(uf, w[4])] |= 1u << USE_B;
        uf_join(uf, lab, m->bound, w[5], r);
        lab[uf_find(uf, r)] |= 1u << USE_ACC;
        return true;
    case SpvOpCooperativeMatrixLoadNV: return !V(3) && !V(4) && !V(5);
    case SpvOpCooperativeMatrixStoreNV: return !V(1) && !V(3) && !V(4);
    case SpvOpCooperativeMatrixLengthNV: return true; /* a type operand: checked when retyping */
    case SpvOpLoad:
        if (rv) uf_join(uf, lab, m->bound, r, w[3]);
        return true;
    case SpvOpStore:
        if (V(2)) uf_join(uf, lab, m->bound, w[1], w[2]);
        return true;
    case SpvOpAccessChain:
    case SpvOpInBoundsAccessChain:
        if (rv) uf_join(uf, lab, m->bound, r, w[3]);
        for (uint32_t i = 4; i < wc; i++)
            if (V(i)) return *bad_op = op, false;
        return true;
    case SpvOpPhi:
        if (!rv) return true;
        for (uint32_t i = 3; i + 1 < wc; i += 2) uf_join(uf, lab, m->bound, r, w[i]);
        return true;
    case SpvOpCopyObject:
        if (rv) uf_join(uf, lab, m->bound, r, w[3]);
        return true;
    case SpvOpSelect:
        if (rv) uf_join(uf, lab, m->bound, r, w[4]), uf_join(uf, lab, m->bound, r, w[5]);
        return true;
    case SpvOpCompositeConstruct:
    case SpvOpFNegate: case SpvOpFAdd: case SpvOpFSub: case SpvOpFMul: case SpvOpFDiv: case SpvOpMatrixTimesScalar:
        for (uint32_t i = 3; i < wc; i++)
            if (V(i)) {
                if (!rv) return *bad_op = op, false;
                uf_join(uf, lab, m->bound, r, w[i]);
            }
        return true;
    case SpvOpCompositeExtract: /* an element of a matrix is a scalar; of an array of them, a matrix */
        if (rv) uf_join(uf, lab, m->bound, r, w[3]);
        return true;
    case SpvOpCompositeInsert:
        if (rv) {
            uf_join(uf, lab, m->bound, r, w[4]);
            if (V(3)) uf_join(uf, lab, m->bound, r, w[3]);
        }
        return true;
    case SpvOpVariable:
    case SpvOpConstantComposite:
    case SpvOpConstantNull:
    case SpvOpUndef:
        return true; /* a class of their own (constants: one label, checked when retyping) */
    default: break;
    }
#undef V
    if (cm_inert(op) || (op >= SpvOpTypeVoid && op <= SpvOpTypeForwardPointer) || op == SpvOpTypeCooperativeMatrixNV)
        return true;
    if (rv) return *bad_op = op, false;
    if (op == SpvOpConstant || op == SpvOpSpecConstant) return true; /* literal operands */
    /* any other instruction: none of its operand words may name a matrix
     * value (a literal that happens to equal one is refused too: safe) */
    for (uint32_t i = 1 + (uint32_t)res + (uint32_t)rt; i < wc; i++)
        if (cm_valued(m, t, w[i]) && !(op == SpvOpExtInst && i == 4)) return *bad_op = op, false;
    return true;
}

/* Instructions SPV_KHR_bfloat16 allows on bf16 values: constants, memory,
 * functions, conversions, composites, annotations, debug, miscellaneous,
 * extensions, modes, the cooperative-matrix ones, OpSelect, OpPhi, OpDot,
 * OpReturnValue. */
static bool bf16_allowed(uint32_t op) {
    switch (op) {
    case SpvOpUndef: case SpvOpConstantTrue: case SpvOpConstantFalse: case SpvOpConstant:
    case SpvOpConstantComposite: case SpvOpConstantNull: case SpvOpVariable: case SpvOpLoad: case SpvOpStore:
    case SpvOpCopyMemory: case SpvOpAccessChain: case SpvOpInBoundsAccessChain: case SpvOpFunctionParameter:
    case SpvOpFunctionCall: case SpvOpFunction: case SpvOpConvertFToU: case SpvOpConvertFToS:
    case SpvOpConvertSToF: case SpvOpConvertUToF: case SpvOpFConvert: case SpvOpBitcast:
    case SpvOpVectorExtractDynamic: case SpvOpVectorInsertDynamic: case SpvOpVectorShuffle:
    case SpvOpCompositeConstruct: case SpvOpCompositeExtract: case SpvOpCompositeInsert: case SpvOpCopyObject:
    case SpvOpSelect: case SpvOpPhi: case SpvOpDot: case SpvOpReturnValue: case SpvOpExtInst:
    case SpvOpCooperativeMatrixLoadNV: case SpvOpCooperativeMatrixStoreNV: case SpvOpCooperativeMatrixMulAddNV:
    case SpvOpCooperativeMatrixLengthNV: case OP_COOPMAT_LOAD_KHR: case OP_COOPMAT_STORE_KHR:
    case OP_COOPMAT_MULADD_KHR: case OP_COOPMAT_LENGTH_KHR:
        return true;
    default: return cm_inert(op) || (op >= SpvOpTypeVoid && op <= SpvOpTypeForwardPointer) ||
                    op == SpvOpTypeCooperativeMatrixNV || op == OP_TYPE_COOPMAT_KHR;
    }
}

/* Types that hold a 16-bit float (the type itself, vectors, arrays,
 * pointers, structs, matrices of it): h[t]. */
static bool half_types(const sp_mod *m, uint8_t *h) {
    bool any = false;
    for (size_t i = 0; i < m->nins; i++) {
        const uint32_t *w = m->w + m->ins[i].at;
        const uint32_t op = m->ins[i].op, wc = m->ins[i].wc;
        if (op == SpvOpTypeFloat && wc >= 3 && w[2] == 16) h[w[1]] = 1, any = true;
        else if ((op == SpvOpTypeVector || op == SpvOpTypeArray || op == SpvOpTypeRuntimeArray ||
                  op == SpvOpTypeMatrix) && wc >= 3 && w[2] < m->bound && h[w[2]])
            h[w[1]] = 1;
        else if (op == SpvOpTypePointer && wc >= 4 && w[3] < m->bound && h[w[3]]) h[w[1]] = 1;
        else if ((op == SpvOpTypeCooperativeMatrixNV || op == OP_TYPE_COOPMAT_KHR) && wc >= 3 && w[2] < m->bound &&
                 h[w[2]])
            h[w[1]] = 1;
        else if (op == SpvOpTypeStruct)
            for (uint32_t k = 2; k < wc; k++)
                if (w[k] < m->bound && h[w[k]]) h[w[1]] = 1;
    }
    return any;
}

/* Every instruction that has a bf16 value (result or operand) is one that
 * SPV_KHR_bfloat16 allows, and every 16-bit constant is a zero. */
static mn_status bf16_uses(const sp_mod *m, const uint8_t *h, const char *what, char *err, size_t cap) {
    for (size_t i = 0; i < m->nins; i++) {
        const uint32_t *w = m->w + m->ins[i].at;
        const uint32_t op = m->ins[i].op, wc = m->ins[i].wc;
        bool res, rt;
        sp_result(op, &res, &rt);
        bool touches = rt && w[1] < m->bound && h[w[1]];
        const bool literals = op == SpvOpConstant || op == SpvOpSpecConstant || cm_inert(op);
        for (uint32_t k = 1 + (uint32_t)res + (uint32_t)rt; k < wc && !touches && !literals; k++)
            touches = w[k] < m->bound && m->type[w[k]] && m->type[w[k]] < m->bound && h[m->type[w[k]]];
        if (!touches) continue;
        if (!bf16_allowed(op))
            return sp_fail(err, cap, what, "opcode %u at word %zu computes on a 16-bit float, which bf16 (SPV_KHR_bfloat16) "
                           "allows only in conversions, memory, composite and cooperative-matrix instructions", op,
                           m->ins[i].at);
        if (op == SpvOpConstant && wc == 4 && (w[3] & 0x7fffu) != 0)
            return sp_fail(err, cap, what, "16-bit constant %%%u = 0x%04x: only +-0 means the same in f16 and bf16", w[2],
                           w[3] & 0xffffu);
        if (op == SpvOpExtInst && rt && h[w[1]])
            return sp_fail(err, cap, what, "extended instruction %u at word %zu returns a 16-bit float", w[4],
                           m->ins[i].at);
    }
    return MN_OK;
}

mn_status vk_spirv_coopmat_khr(uint32_t **out, size_t *nout, const uint32_t *words, size_t nwords, bool bf16,
                               char *err, size_t cap) {
    static const char *what = "coopmat rewrite";
    *out = NULL, *nout = 0;
    sp_mod m;
    mn_status st = sp_parse(&m, words, nwords, what, err, cap);
    if (st) return st;
    const uint32_t B = m.bound;
    cm_types t = {calloc(B, 4), calloc(B, 4), calloc(B, 1), calloc((size_t)B * 3, 4)};
    uint32_t *uf = malloc((size_t)B * 4);
    uint8_t *lab = calloc(B, 1), *half = calloc(B, 1);
    sp_out o = {0};
    if (!t.root || !t.elem || !t.mask || !t.tid || !uf || !lab || !half) {
        st = MN_E_NOMEM;
        goto done;
    }
    /* the matrix types and the types built on them */
    bool any_nv = false;
    for (size_t i = 0; i < m.nins; i++) {
        const uint32_t *w = m.w + m.ins[i].at;
        const uint32_t op = m.ins[i].op, wc = m.ins[i].wc;
        if (op == SpvOpTypeCooperativeMatrixNV && wc == 6) t.root[w[1]] = w[1], any_nv = true;
        else if ((op == SpvOpTypeArray || op == SpvOpTypeRuntimeArray) && wc >= 3 && w[2] < B && t.root[w[2]])
            t.root[w[1]] = t.root[w[2]], t.elem[w[1]] = w[2];
        else if (op == SpvOpTypePointer && wc == 4 && w[3] < B && t.root[w[3]])
            t.root[w[1]] = t.root[w[3]], t.elem[w[1]] = w[3];
        else if (op == SpvOpTypeStruct || op == SpvOpTypeFunction)
            for (uint32_t k = 2; k < wc; k++)
                if (w[k] < B && t.root[w[k]]) {
                    st = sp_fail(err, cap, what, "%%%u (a struct or function type) holds a cooperative matrix", w[1]);
                    goto done;
                }
    }
    if (!any_nv) {
        st = sp_fail(err, cap, what, "the module has no NV cooperative matrix type");
        goto done;
    }
    /* classes and labels */
    for (uint32_t i = 0; i < B; i++) uf[i] = i;
    for (size_t i = 0; i < m.nins; i++) {
        uint32_t bad = 0;
        if (!cm_constrain(&m, &t, &m.ins[i], uf, lab, &bad)) {
            st = sp_fail(err, cap, what, "opcode %u at word %zu uses a cooperative matrix in a way this pass does "
                         "not type", bad, m.ins[i].at);
            goto done;
        }
    }
    /* labels each type has somewhere (for unlabelled classes) */
    uint8_t *tl = calloc(B, 1);
    if (!tl) {
        st = MN_E_NOMEM;
        goto done;
    }
    for (uint32_t id = 1; id < B; id++)
        if (cm_valued(&m, &t, id)) tl[t.root[m.type[id]]] |= lab[uf_find(uf, id)];
    /* the label of what is never multiplied: its matrix type's, if that
     * has one; else accumulator for f32, A for the rest */
    for (uint32_t ty = 1; ty < B; ty++) {
        if (t.root[ty] != ty) continue;
        const uint8_t r = tl[ty];
        const uint32_t *nt = sp_at(&m, ty), *ct = nt ? sp_at(&m, nt[2]) : NULL;
        const bool f32 = ct && (ct[0] & 0xffffu) == SpvOpTypeFloat && (ct[0] >> 16) >= 3 && ct[2] == 32;
        tl[ty] = r && !(r & (r - 1)) ? r : (uint8_t)(f32 ? 1u << USE_ACC : 1u << USE_A);
        tl[ty] |= (uint8_t)(r & (r - 1) ? 0x80u : 0u); /* two labels: constants of it are refused */
    }
    for (uint32_t id = 1; id < B && !st; id++) {
        if (!cm_valued(&m, &t, id)) continue;
        const uint32_t c = uf_find(uf, id), root = t.root[m.type[id]];
        uint8_t l = lab[c];
        if (l & (l - 1)) {
            st = sp_fail(err, cap, what, "%%%u is used both as %s", id,
                         (l & 1) && (l & 2) ? "matrix A and matrix B" : "an operand and an accumulator");
            break;
        }
        if (!l) lab[c] = l = tl[root] & 7u; /* never multiplied */
        const uint32_t op = sp_op(&m, id);
        if ((op == SpvOpConstantComposite || op == SpvOpConstantNull || op == SpvOpUndef) && (tl[root] & 0x80u)) {
            st = sp_fail(err, cap, what, "constant %%%u of a matrix type used with two uses", id);
            break;
        }
        t.mask[m.type[id]] |= l;
    }
    /* a type no value has: its matrix type's label (one declaration) */
    for (uint32_t ty = 1; ty < B; ty++)
        if (t.root[ty] && !t.mask[ty]) t.mask[ty] = tl[t.root[ty]] & 7u;
    free(tl);
    if (st) goto done;
    /* a derived type wants the labels its users want of what it is built on */
    for (size_t i = m.nins; i-- > 0;) {
        const uint32_t *w = m.w + m.ins[i].at;
        const uint32_t op = m.ins[i].op;
        if (op < SpvOpTypeVoid || op > SpvOpTypeForwardPointer) continue;
        const uint32_t ty = w[1];
        if (ty < B && t.elem[ty]) t.mask[t.elem[ty]] |= t.mask[ty];
    }
    /* ids: the first label keeps the type's id */
    uint32_t bound = B;
    for (uint32_t ty = 1; ty < B; ty++) {
        if (!t.root[ty]) continue;
        bool first = true;
        for (int u = 0; u < 3; u++) {
            if (!(t.mask[ty] & (1u << u))) continue;
            t.tid[ty * 3 + (uint32_t)u] = first ? ty : bound++;
            first = false;
        }
    }
    /* the 32-bit integer constants 0, 1, 2 (uses and layouts), by the type
     * of the first matrix's row count */
    uint32_t itype = 0, cst[3] = {0, 0, 0};
    size_t first_nv = 0;
    for (size_t i = 0; i < m.nins; i++)
        if (m.ins[i].op == SpvOpTypeCooperativeMatrixNV) {
            const uint32_t *rows = sp_at(&m, m.w[m.ins[i].at + 4]);
            if (!rows || (rows[0] & 0xffffu) != SpvOpConstant) {
                st = sp_fail(err, cap, what, "matrix type %%%u: its row count is not a constant", m.w[m.ins[i].at + 1]);
                goto done;
            }
            itype = rows[1];
            first_nv = i;
            break;
        }
    for (uint32_t id = 1; id < B; id++) {
        const int64_t v = sp_const_u32(&m, id);
        if (v >= 0 && v < 3 && m.type[id] == itype && !cst[v] && (size_t)m.def[id] < first_nv) cst[v] = id;
    }
    uint32_t newc[3] = {0, 0, 0};
    for (int v = 0; v < 3; v++)
        if (!cst[v]) cst[v] = newc[v] = bound++;
    if (bf16 && !half_types(&m, half)) {
        st = sp_fail(err, cap, what, "bf16 asked for, but the module has no 16-bit float type");
        goto done;
    }
    if (bf16 && (st = bf16_uses(&m, half, what, err, cap))) goto done;

    /* ---- emit ---- */
    for (int i = 0; i < 5; i++) out_word(&o, m.w[i]);
    bool have_khr_ext = false, wrote_caps = false;
    for (size_t i = 0; i < m.nins && !st; i++) {
        const sp_ins *in = &m.ins[i];
        const uint32_t *w = m.w + in->at;
        const uint32_t op = in->op, wc = in->wc;
        if (op == SpvOpCapability && wc >= 2) {
            const uint32_t c = w[1];
            if (c == SpvCapabilityCooperativeMatrixNV) out_ins(&o, op, (uint32_t[]){CAP_COOPMAT_KHR}, 1);
            else if (!(bf16 && c == SpvCapabilityFloat16)) out_ins(&o, op, w + 1, wc - 1);
            if (bf16 && !wrote_caps && c == SpvCapabilityCooperativeMatrixNV) {
                out_ins(&o, op, (uint32_t[]){CAP_BF16_TYPE}, 1);
                out_ins(&o, op, (uint32_t[]){CAP_BF16_COOPMAT}, 1);
                wrote_caps = true;
            }
            continue;
        }
        if (op == SpvOpExtension) {
            if (sp_is_string(in, m.w, EXT_NV)) {
                out_string_ins(&o, op, EXT_KHR);
                if (bf16) out_string_ins(&o, op, EXT_BF16);
                have_khr_ext = true;
            } else {
                out_ins(&o, op, w + 1, wc - 1);
            }
            continue;
        }
        if (i == first_nv)
            for (int v = 0; v < 3; v++)
                if (newc[v]) out_ins(&o, SpvOpConstant, (uint32_t[]){itype, newc[v], (uint32_t)v}, 3);
        if (op == SpvOpTypeFloat && bf16 && wc == 3 && w[2] == 16) {
            out_ins(&o, op, (uint32_t[]){w[1], 16, FP_ENCODING_BF16}, 3);
            continue;
        }
        if (op >= SpvOpTypeVoid && op <= SpvOpTypeForwardPointer && t.root[w[1]]) {
            /* a type built on a matrix: one declaration per label */
            for (uint32_t u = 0; u < 3; u++) {
                const uint32_t id = t.tid[w[1] * 3 + u];
                if (!id) continue;
                if (op == SpvOpTypePointer) out_ins(&o, op, (uint32_t[]){id, w[2], t.tid[w[3] * 3 + u]}, 3);
                else if (op == SpvOpTypeArray) out_ins(&o, op, (uint32_t[]){id, t.tid[w[2] * 3 + u], w[3]}, 3);
                else if (op == SpvOpTypeRuntimeArray) out_ins(&o, op, (uint32_t[]){id, t.tid[w[2] * 3 + u]}, 2);
                else st = sp_fail(err, cap, what, "type %%%u (opcode %u) built on a matrix", w[1], op);
            }
            continue;
        }
        if (op == SpvOpTypeCooperativeMatrixNV) {
            for (uint32_t u = 0; u < 3; u++) {
                const uint32_t id = t.tid[w[1] * 3 + u];
                if (id) out_ins(&o, OP_TYPE_COOPMAT_KHR, (uint32_t[]){id, w[2], w[3], w[4], w[5], cst[u]}, 6);
            }
            continue;
        }
        /* an instruction: its result type by its class's label */
        bool res, rt;
        sp_result(op, &res, &rt);
        uint32_t rtype = rt ? w[1] : 0;
        if (rt && w[1] < B && t.root[w[1]]) {
            const uint32_t r = w[2], u = (uint32_t)__builtin_ctz(lab[uf_find(uf, r)]);
            rtype = t.tid[w[1] * 3 + u];
        }
        if (op == SpvOpCooperativeMatrixLoadNV || op == SpvOpCooperativeMatrixStoreNV) {
            const bool load = op == SpvOpCooperativeMatrixLoadNV;
            const uint32_t base = load ? 3 : 1, si = load ? 4 : 3; /* pointer, stride (then column-major) */
            if (wc < si + 2) {
                st = sp_fail(err, cap, what, "cooperative-matrix %s at word %zu has %u words", load ? "load" : "store",
                             in->at, wc);
                break;
            }
            const uint32_t stride = w[si], colmaj = w[si + 1], cop = sp_op(&m, colmaj);
            if (cop != SpvOpConstantTrue && cop != SpvOpConstantFalse) {
                st = sp_fail(err, cap, what, "cooperative-matrix %s at word %zu: its column-major operand %%%u is "
                             "not a constant bool", load ? "load" : "store", in->at, colmaj);
                break;
            }
            out_word(&o, (wc << 16) | (load ? OP_COOPMAT_LOAD_KHR : OP_COOPMAT_STORE_KHR));
            if (load) out_word(&o, rtype), out_word(&o, w[2]);
            out_word(&o, w[base]);
            if (!load) out_word(&o, w[2]);
            out_word(&o, cst[cop == SpvOpConstantTrue ? LAYOUT_COL : LAYOUT_ROW]);
            out_word(&o, stride);
            for (uint32_t k = si + 2; k < wc; k++) out_word(&o, w[k]); /* memory operands */
            continue;
        }
        if (op == SpvOpCooperativeMatrixMulAddNV) {
            out_ins(&o, OP_COOPMAT_MULADD_KHR, (uint32_t[]){rtype, w[2], w[3], w[4], w[5]}, 5);
            continue;
        }
        if (op == SpvOpCooperativeMatrixLengthNV) {
            const uint32_t ty = wc >= 4 ? w[3] : 0;
            if (ty >= B || !t.root[ty] || (t.mask[ty] & (t.mask[ty] - 1))) {
                st = sp_fail(err, cap, what, "the length of %%%u, a matrix type of two uses", ty);
                break;
            }
            out_ins(&o, OP_COOPMAT_LENGTH_KHR, (uint32_t[]){w[1], w[2], t.tid[ty * 3 + (uint32_t)__builtin_ctz(t.mask[ty])]},
                    3);
            continue;
        }
        out_word(&o, w[0]);
        for (uint32_t k = 1; k < wc; k++) out_word(&o, k == 1 && rt ? rtype : w[k]);
    }
    if (!st && !have_khr_ext) st = sp_fail(err, cap, what, "no OpExtension \"%s\" in the module", EXT_NV);
    if (!st && o.oom) st = MN_E_NOMEM;
    if (!st) {
        o.w[3] = bound;
        *out = o.w, *nout = o.n;
        o.w = NULL;
    }
done:
    free(o.w);
    free(t.root), free(t.elem), free(t.mask), free(t.tid);
    free(uf), free(lab), free(half);
    sp_free(&m);
    return st;
}

/* ---- the check --------------------------------------------------------- */

typedef struct km {
    uint32_t comp, rows, cols, use; /* use: 0..2 */
} km;

static bool km_of(const sp_mod *m, uint32_t ty, km *k) {
    const uint32_t *p = sp_at(m, ty);
    if (!p || (p[0] & 0xffffu) != OP_TYPE_COOPMAT_KHR || (p[0] >> 16) != 7) return false;
    const int64_t sc = sp_const_u32(m, p[3]), r = sp_const_u32(m, p[4]), c = sp_const_u32(m, p[5]),
                  u = sp_const_u32(m, p[6]);
    if (sc < 0 || r <= 0 || c <= 0 || u < 0) return false;
    *k = (km){p[2], (uint32_t)r, (uint32_t)c, (uint32_t)u};
    return true;
}

mn_status vk_spirv_check_khr(const uint32_t *w, size_t n, bool bf16, char *err, size_t cap) {
    static const char *what = "coopmat check";
    sp_mod m;
    mn_status st = sp_parse(&m, w, n, what, err, cap);
    if (st) return st;
    bool cap_khr = false, cap_bt = false, cap_bc = false, cap_f16 = false, ext_khr = false, ext_bf = false;
    bool ieee_half = false, any = false;
    uint8_t *half = calloc(m.bound, 1);
    if (!half) {
        sp_free(&m);
        return MN_E_NOMEM;
    }
    for (size_t i = 0; i < m.nins && !st; i++) {
        const sp_ins *in = &m.ins[i];
        const uint32_t *p = w + in->at;
        const uint32_t op = in->op, wc = in->wc;
        static const struct {
            uint32_t op, min_wc;
        } shapes[] = {{SpvOpCapability, 2},    {SpvOpTypeFloat, 3},        {OP_TYPE_COOPMAT_KHR, 7},
                      {OP_COOPMAT_LOAD_KHR, 6}, {OP_COOPMAT_STORE_KHR, 5}, {OP_COOPMAT_MULADD_KHR, 6}};
        for (size_t k = 0; k < MN_ARRAY_LEN(shapes) && !st; k++)
            if (op == shapes[k].op && wc < shapes[k].min_wc)
                st = sp_fail(err, cap, what, "opcode %u at word %zu has only %u words", op, in->at, wc);
        if (st) break;
        switch (op) {
        case SpvOpCapability:
            cap_khr |= p[1] == CAP_COOPMAT_KHR, cap_bt |= p[1] == CAP_BF16_TYPE, cap_bc |= p[1] == CAP_BF16_COOPMAT;
            cap_f16 |= p[1] == SpvCapabilityFloat16;
            if (p[1] == SpvCapabilityCooperativeMatrixNV) st = sp_fail(err, cap, what, "the NV capability is left");
            break;
        case SpvOpExtension:
            ext_khr |= sp_is_string(in, w, EXT_KHR), ext_bf |= sp_is_string(in, w, EXT_BF16);
            if (sp_is_string(in, w, EXT_NV)) st = sp_fail(err, cap, what, "the NV extension is left");
            break;
        case SpvOpTypeCooperativeMatrixNV: case SpvOpCooperativeMatrixLoadNV: case SpvOpCooperativeMatrixStoreNV:
        case SpvOpCooperativeMatrixMulAddNV: case SpvOpCooperativeMatrixLengthNV:
            st = sp_fail(err, cap, what, "NV cooperative-matrix opcode %u at word %zu", op, in->at);
            break;
        case SpvOpTypeFloat:
            if (wc == 3 && p[2] == 16) ieee_half = true;
            if (wc == 4 && (p[2] != 16 || p[3] != FP_ENCODING_BF16 || !bf16))
                st = sp_fail(err, cap, what, "float type %%%u: width %u, encoding %u", p[1], p[2], p[3]);
            if (bf16 && wc == 3 && p[2] == 16) st = sp_fail(err, cap, what, "an IEEE f16 type %%%u is left", p[1]);
            break;
        case OP_TYPE_COOPMAT_KHR: {
            km k;
            any = true;
            const uint32_t *ct = sp_at(&m, wc == 7 ? p[2] : 0);
            if (!km_of(&m, p[1], &k) || k.use > USE_ACC || sp_const_u32(&m, p[3]) != SCOPE_SUBGROUP || !ct ||
                (ct[0] & 0xffffu) != SpvOpTypeFloat)
                st = sp_fail(err, cap, what, "matrix type %%%u: want a float component, subgroup scope, constant "
                             "rows, columns and a use in 0..2", p[1]);
            break;
        }
        case OP_COOPMAT_LOAD_KHR:
        case OP_COOPMAT_STORE_KHR: {
            const bool load = op == OP_COOPMAT_LOAD_KHR;
            const uint32_t ptr = p[load ? 3 : 1], lay = p[load ? 4 : 3];
            const uint32_t *pt = wc >= 5 ? sp_at(&m, m.type[ptr < m.bound ? ptr : 0]) : NULL;
            const uint32_t *pointee = pt && (pt[0] & 0xffffu) == SpvOpTypePointer ? sp_at(&m, pt[3]) : NULL;
            const uint32_t pop = pointee ? (pointee[0] & 0xffffu) : 0;
            km k;
            const int64_t l = wc >= 5 ? sp_const_u32(&m, lay) : -1;
            if (wc < (load ? 6u : 5u) || (l != LAYOUT_ROW && l != LAYOUT_COL) ||
                (pop != SpvOpTypeInt && pop != SpvOpTypeFloat && pop != SpvOpTypeVector) ||
                !km_of(&m, load ? p[1] : m.type[p[2] < m.bound ? p[2] : 0], &k))
                st = sp_fail(err, cap, what, "%s at word %zu: want a matrix, a pointer to a scalar or vector, a "
                             "constant layout and a stride", load ? "load" : "store", in->at);
            break;
        }
        case OP_COOPMAT_MULADD_KHR: {
            km a, b, c, r;
            const uint32_t ta = m.type[p[3] < m.bound ? p[3] : 0], tb = m.type[p[4] < m.bound ? p[4] : 0],
                           tc = m.type[p[5] < m.bound ? p[5] : 0];
            if (wc < 6 || !km_of(&m, p[1], &r) || !km_of(&m, ta, &a) || !km_of(&m, tb, &b) || !km_of(&m, tc, &c) ||
                a.use != USE_A || b.use != USE_B || c.use != USE_ACC || r.use != USE_ACC || tc != p[1] ||
                a.rows != r.rows || b.cols != r.cols || a.cols != b.rows || a.comp != b.comp)
                st = sp_fail(err, cap, what, "multiply-add at word %zu: want A (MxK), B (KxN) of one component type "
                             "and accumulators C = result (MxN)", in->at);
            break;
        }
        default: break;
        }
    }
    if (!st && !any) st = sp_fail(err, cap, what, "no KHR cooperative matrix type");
    if (!st && (!cap_khr || !ext_khr)) st = sp_fail(err, cap, what, "the KHR capability or extension is missing");
    if (!st && ieee_half && !cap_f16) st = sp_fail(err, cap, what, "an f16 type without the Float16 capability");
    if (!st && bf16 && (!cap_bt || !cap_bc || !ext_bf))
        st = sp_fail(err, cap, what, "bf16 types without the BFloat16TypeKHR / BFloat16CooperativeMatrixKHR "
                     "capabilities or the SPV_KHR_bfloat16 extension");
    if (!st && bf16 && half_types(&m, half)) st = bf16_uses(&m, half, what, err, cap);
    /* every id an instruction names past its result is defined (types and
     * constants before use; forward references only to labels, functions
     * and phi values, which the stream order allows) */
    for (size_t i = 0; i < m.nins && !st; i++) {
        const sp_ins *in = &m.ins[i];
        if (in->op != OP_COOPMAT_LOAD_KHR && in->op != OP_COOPMAT_STORE_KHR && in->op != OP_COOPMAT_MULADD_KHR &&
            in->op != OP_TYPE_COOPMAT_KHR)
            continue;
        const uint32_t *p = w + in->at;
        const uint32_t last = in->op == OP_COOPMAT_LOAD_KHR ? 6 : in->op == OP_COOPMAT_STORE_KHR ? 5 : in->wc;
        for (uint32_t k = 1; k < in->wc && k < last; k++)
            if (p[k] >= m.bound || m.def[p[k]] < 0 || (in->op == OP_TYPE_COOPMAT_KHR && k > 1 && (size_t)m.def[p[k]] >= i))
                st = sp_fail(err, cap, what, "opcode %u at word %zu names %%%u before (or without) its definition",
                             in->op, in->at, p[k]);
    }
    free(half);
    sp_free(&m);
    return st;
}
