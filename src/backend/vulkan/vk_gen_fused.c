/* vk_gen_fused.c - one eltwise kernel for a group of pointwise nodes that
 * the kernel plan fused (kir.h): every member has the root's shape and is
 * computed once per element of the root, in registers, at the index its
 * consumer reads it (members broadcast along a dimension read their inputs
 * with that dimension's stride zeroed).
 *
 * Each member's expression is the one its own generator would use (the
 * generator runs on a scratch kernel and leaves its EXPR text in k->expr),
 * so fused and unfused kernels compute the same thing; member values are
 * `precise` so the compiler cannot contract a product of one member into a
 * sum of the next (which would round differently). Kernel inputs: the
 * distinct tensors the members read from outside the group, each read as
 * its member reads it (numpy broadcast strides, or a permutation's), one
 * register per distinct (tensor, strides) read.
 *
 * A group with a matmul member (kir.h) is that matmul's kernel
 * (matmul.glsl, gemv.glsl for a few rows, or matmul_coopmat.glsl; its
 * operands bound first) with the rest of the group as MM_EPILOGUE(i, acc):
 * the matmul's value `acc` of output element i goes through the members, in
 * registers, and only the root is stored.
 *
 * Does not: fuse across shapes (reductions), or decide what to fuse
 * (kir.c).
 */
#include "backend/vulkan/vk_codegen.h"
#include "kir/kir.h"

#define MAX_READS (KIR_MAX_MEMBERS * 3)

typedef struct fread_ {
    int32_t t;       /* the tensor */
    int64_t st[4];   /* its strides over the root's padded index space */
} fread_;

static mn_status ffail(const mn_graph *g, int32_t root, char *err, size_t cap, const char *what) {
    mn_fmt(err, cap, "vulkan codegen: fused kernel of %s (%%%d): %s", op_table[g->nodes[root].op].name, (int)root,
           what);
    return MN_E_UNSUPPORTED;
}

/* Strides with which member m reads its input slot s over the root's space. */
static void read_strides(int64_t st[4], const mn_graph *g, const node *m, int s) {
    const node *x = &g->nodes[m->in[s]];
    if (m->op != OP_PERMUTE) {
        vk_bcast_strides(st, x);
        return;
    }
    int64_t xs[MN_MAX_RANK], acc = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
        xs[i] = acc;
        acc *= x->shape[i];
    }
    for (int d = 0; d < 4; d++) st[d] = 0;
    for (int i = 0; i < m->rank; i++) st[4 - m->rank + i] = xs[permute_axis(m, i)];
}

/* The members' values in registers: for ids[0..n) (in order; ids[n - 1]
 * is the kernel's "root": the value stored or passed on, vroot's index
 * space), lines "precise float v<j> = ...;" into body, their E<j> macros
 * and IX<r> read offsets into k, their input tensors into ext. mmj: the
 * index of a matmul member (its value is `acc`), or -1. */
static mn_status member_body(vk_kernel *k, vk_kernel *scratch, const mn_graph *g, int32_t root, const int32_t *ids,
                             int n, int mmj, int32_t *ext, int *next, char *body, size_t *blen, const vk_caps *caps,
                             char *err, size_t cap) {
    const node *rn = &g->nodes[ids[n - 1]];
    int64_t dim[4];
    vk_pad4(dim, rn);
    fread_ reads[MAX_READS];
    int nreads = 0;
    size_t bl = *blen;
    mn_status st = MN_OK;
    /* keep[j][d]: member j's coordinate along padded dim d is the root's
     * (else 0: j is broadcast along d on the way to the root) */
    uint8_t keep[KIR_MAX_MEMBERS][4];
    memset(keep, 0, sizeof keep);
    for (int d = 0; d < 4; d++) keep[n - 1][d] = 1;
    for (int j = n - 1; j >= 0; j--) {
        const node *c = &g->nodes[ids[j]];
        int64_t cd[4];
        vk_pad4(cd, c);
        for (int s = 0; s < c->nin; s++)
            for (int q = 0; q < j; q++) {
                if (ids[q] != c->in[s]) continue;
                int64_t md[4];
                vk_pad4(md, &g->nodes[ids[q]]);
                for (int d = 0; d < 4; d++) keep[q][d] = keep[j][d] && md[d] == cd[d];
            }
    }
    for (int j = 0; j < n && !st; j++) {
        const node *m = &g->nodes[ids[j]];
        char opnd[3][48] = {"0.0", "0.0", "0.0"};
        if (j == mmj) { /* its inputs are the GEMM's operands, not reads */
            bl += (size_t)snprintf(body + bl, 16384 - bl, "    precise float v%d = acc; \\\n", j);
            continue;
        }
        for (int s = 0; s < m->nin && !st; s++) {
            const int32_t src = m->in[s];
            int from = -1;
            for (int q = 0; q < j; q++)
                if (ids[q] == src) from = q;
            if (from >= 0) { /* a member: computed at the index this member reads it */
                snprintf(opnd[s], sizeof opnd[s], "v%d", from);
                continue;
            }
            if (kir_literal_input(g, src)) { /* a scalar constant: its exact value, no binding */
                vk_float_literal(opnd[s], sizeof opnd[s], g->nodes[src].data[0]);
                continue;
            }
            int b = -1;
            for (int q = 0; q < *next; q++)
                if (ext[q] == src) b = q;
            if (b < 0) {
                if (*next == KIR_MAX_INPUTS) {
                    st = ffail(g, root, err, cap, "more than 6 input tensors");
                    break;
                }
                b = (*next)++;
                ext[b] = src;
            }
            fread_ r = {src, {0, 0, 0, 0}};
            read_strides(r.st, g, m, s);
            for (int d = 0; d < 4; d++)
                if (!keep[j][d]) r.st[d] = 0;
            int ri = -1;
            for (int q = 0; q < nreads; q++)
                if (reads[q].t == src && !memcmp(reads[q].st, r.st, sizeof r.st)) ri = q;
            if (ri < 0) {
                if (nreads == MAX_READS) {
                    st = ffail(g, root, err, cap, "too many reads");
                    break;
                }
                ri = nreads++;
                reads[ri] = r;
                char nmx[16];
                snprintf(nmx, sizeof nmx, "IX%d", ri);
                if ((st = vk_def_offset(k, g, rn, nmx, dim, r.st, err, cap))) break;
                bl += (size_t)snprintf(body + bl, 16384 - bl, "    float r%d = X%d(IX%d(i)); \\\n", ri, b, ri);
            }
            snprintf(opnd[s], sizeof opnd[s], "r%d", ri);
        }
        if (st) break;
        if (j == n - 1 && m->op == OP_CAST && (m->flags & NODE_F_PACK16)) {
            /* a packed cast rooting the group: its value is its input's,
             * rounded by the store (Y_SET16: the cast's own bits) */
            bl += (size_t)snprintf(body + bl, 16384 - bl, "    precise float v%d = %s; \\\n", j, opnd[0]);
            continue;
        }
        /* the member's own expression, from its generator */
        if ((st = vk_codegen_node(scratch, g, ids[j], NULL, caps, err, cap))) break;
        if (!scratch->expr[0] || !scratch->tmpl || strcmp(scratch->tmpl, "eltwise") != 0) {
            st = ffail(g, root, err, cap, "a member has no pointwise expression");
            break;
        }
        vk_line(k, "#define E%d(a, b, c) (%s)", j, scratch->expr);
        bl += (size_t)snprintf(body + bl, 16384 - bl, "    precise float v%d = E%d(%s, %s, %s); \\\n", j, j, opnd[0],
                               opnd[1], opnd[2]);
        if (bl >= 16000) st = ffail(g, root, err, cap, "kernel text too long");
    }
    *blen = bl;
    return st;
}

/* X<b>_ACCESS / X<b>_N of the kernel inputs ext[from..next), and the
 * paged defines of root and every input. */
static mn_status input_defs(vk_kernel *k, const mn_graph *g, int32_t root, const int32_t *ext, int from, int next,
                            const memplan *mp, const vk_caps *caps, char *err, size_t cap) {
    for (int b = from; b < next; b++) {
        char nmx[24];
        snprintf(nmx, sizeof nmx, "X%d_ACCESS", b);
        vk_def(k, nmx, "readonly");
        snprintf(nmx, sizeof nmx, "X%d_N", b);
        vk_def_u(k, nmx, (uint64_t)node_numel(&g->nodes[ext[b]]));
    }
    int32_t opnd[1 + KIR_MAX_INPUTS] = {root};
    for (int b = 0; b < next; b++) opnd[1 + b] = ext[b];
    return vk_paged_defines(k, g, opnd, 1 + next, mp, caps, err, cap);
}

mn_status vk_codegen_fused(vk_kernel *k, const mn_graph *g, int32_t root, const int32_t *members, int nm,
                           int32_t *ext, int *next, const memplan *mp, const vk_caps *caps, char *err, size_t cap) {
    const node *rn = &g->nodes[root];
    if (nm + 1 > KIR_MAX_MEMBERS) return ffail(g, root, err, cap, "too many members");
    vk_kernel *scratch = malloc(sizeof *scratch);
    char *body = malloc(16384);
    if (!scratch || !body) {
        free(scratch);
        free(body);
        return MN_E_NOMEM;
    }
    mn_status st = MN_OK;
    memset(k, 0, sizeof *k);
    *next = 0;
    size_t bl = 0;
    body[0] = 0;
    /* the index width from the group's operands: the root and every tensor
     * read from outside the group (members have the root's shape or less) */
    {
        int32_t opnd[1 + KIR_MAX_MEMBERS * NODE_MAX_IN] = {root};
        int no = 1;
        for (int j = 0; j <= nm; j++) {
            const node *m = &g->nodes[j < nm ? members[j] : root];
            for (int s = 0; s < m->nin; s++) opnd[no++] = m->in[s];
        }
        if ((st = vk_index_width(k, g, root, opnd, no, caps, err, cap))) goto out;
    }
    const bool idx64 = k->idx64;
    int32_t ids[KIR_MAX_MEMBERS];
    for (int j = 0; j < nm; j++) ids[j] = members[j];
    ids[nm] = root;
    if (op_fuse_class(rn->op) == FUSE_REDUCE) {
        /* a reduction whose input the members compute (kir.h KIR_REDUCE):
         * its own kernel, reading red_in(i) (the members' value at input
         * element i) where it would read x */
        if (nm < 1 || rn->in[0] != members[nm - 1]) {
            st = ffail(g, root, err, cap, "a reduction whose input is not its last member");
            goto out;
        }
        if (!(st = member_body(k, scratch, g, root, ids, nm, -1, ext, next, body, &bl, caps, err, cap))) {
            vk_def_u(k, "Y_N", (uint64_t)node_numel(rn));
            st = input_defs(k, g, root, ext, 0, *next, mp, caps, err, cap);
        }
        if (!st) st = vk_codegen_op(k, g, root, caps, err, cap);
        if (!st && (!k->tmpl || strcmp(k->tmpl, "reduce") != 0))
            st = ffail(g, root, err, cap, "a reduction without a reduce kernel");
        if (!st) {
            vk_line(k, "#define RED_PROLOGUE(i) \\\n%s", body);
            vk_def(k, "RED_PROLOGUE_OUT", "v%d", nm - 1);
        }
        if (!st && k->overflow) st = ffail(g, root, err, cap, "specialisation text too long");
        goto out;
    }
    k->tmpl = "eltwise";
    /* a packed cast's group (kir_options.fuse_store16): the kernel stores
     * the cast's 16-bit values, Y_SET16 */
    const bool s16 = rn->op == OP_CAST && (rn->flags & NODE_F_PACK16);
    if (s16 && !caps->store16) {
        st = ffail(g, root, err, cap, "a packed cast's group on a device without 16-bit storage");
        goto out;
    }
    k->store16 = s16;
    /* a matmul member: the kernel is that matmul (its operands X0, X1) and
     * the group its epilogue, MM_EPILOGUE(i, acc) at output element i */
    int mmj = -1;
    for (int j = 0; j < nm; j++)
        if (kir_epilogue_producer(g->nodes[ids[j]].op)) mmj = j;
    if (mmj >= 0) { /* matmul.glsl (GEMMs, convolutions as implicit GEMMs), a direct convolution, norm.glsl */
        const node *mn = &g->nodes[ids[mmj]];
        if ((st = vk_codegen_node(scratch, g, ids[mmj], NULL, caps, err, cap))) goto out;
        const bool hook = scratch->tmpl && (!strcmp(scratch->tmpl, "matmul") || !strcmp(scratch->tmpl, "gemv") ||
                                            !strcmp(scratch->tmpl, "matmul_coopmat") || !strcmp(scratch->tmpl, "conv2d") ||
                                            !strcmp(scratch->tmpl, "conv2d_bwd_input") || !strcmp(scratch->tmpl, "norm"));
        if (!hook || node_numel(mn) != node_numel(rn) || mn->nin > KIR_MAX_INPUTS) {
            st = ffail(g, root, err, cap, "a product member without an epilogue of the root's shape");
            goto out;
        }
        if (scratch->idx64 != idx64) { /* the group's width rules: the product again at it */
            st = ffail(g, root, err, cap, idx64 ? "an epilogue reads a tensor larger than the product"
                                                 : "a product member wider than its group");
            goto out;
        }
        memcpy(k, scratch, sizeof *k);
        k->expr[0] = 0;
        k->store16 = s16;
        for (int i = 0; i < mn->nin; i++) ext[i] = mn->in[i];
        *next = mn->nin;
    }
    st = member_body(k, scratch, g, root, ids, nm + 1, mmj, ext, next, body, &bl, caps, err, cap);
    if (!st) {
        const int first = mmj >= 0 ? g->nodes[ids[mmj]].nin : 0; /* the product defined its own operands */
        if (mmj < 0) {
            vk_def_u(k, "Y_N", (uint64_t)node_numel(rn));
            vk_def(k, "NIN", "%d", *next);
        }
        st = input_defs(k, g, root, ext, first, *next, mp, caps, err, cap);
        char store[32];
        snprintf(store, sizeof store, s16 ? "Y_SET16(i, v%d)" : "Y(i) = v%d", nm);
        if (mmj >= 0) {
            vk_line(k, "#define MM_EPILOGUE(i, acc) { \\\n%s    %s; }", body, store);
        } else {
            vk_line(k, "#define FUSED_BODY(i) \\\n%s    %s;", body, store);
            vk_launch_1d(k, caps, (uint64_t)node_numel(rn), vk_pick_local(caps, 256));
        }
        if (k->overflow) st = ffail(g, root, err, cap, "specialisation text too long");
    }
out:
    free(scratch);
    free(body);
    return st;
}
