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
    k->tmpl = "eltwise";
    int64_t dim[4];
    vk_pad4(dim, rn);
    fread_ reads[MAX_READS];
    int nreads = 0;
    *next = 0;
    size_t bl = 0;
    int32_t ids[KIR_MAX_MEMBERS];
    for (int j = 0; j < nm; j++) ids[j] = members[j];
    ids[nm] = root;
    /* a matmul member: the kernel is that matmul (its operands X0, X1) and
     * the group its epilogue, MM_EPILOGUE(i, acc) at output element i */
    int mmj = -1;
    for (int j = 0; j < nm; j++)
        if (g->nodes[ids[j]].op == OP_MATMUL) mmj = j;
    if (mmj >= 0) {
        const node *mn = &g->nodes[ids[mmj]];
        if ((st = vk_codegen_node(scratch, g, ids[mmj], NULL, caps, err, cap))) goto out;
        if (!scratch->tmpl ||
            (strcmp(scratch->tmpl, "matmul") && strcmp(scratch->tmpl, "gemv") && strcmp(scratch->tmpl, "matmul_coopmat")) ||
            node_numel(mn) != node_numel(rn)) {
            st = ffail(g, root, err, cap, "a matmul member that is not a GEMM of the root's shape");
            goto out;
        }
        memcpy(k, scratch, sizeof *k);
        k->expr[0] = 0;
        ext[0] = mn->in[0], ext[1] = mn->in[1];
        *next = 2;
    }
    /* keep[j][d]: member j's coordinate along padded dim d is the root's
     * (else 0: j is broadcast along d on the way to the root) */
    uint8_t keep[KIR_MAX_MEMBERS][4];
    memset(keep, 0, sizeof keep);
    for (int d = 0; d < 4; d++) keep[nm][d] = 1;
    for (int j = nm; j >= 0; j--) {
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
    for (int j = 0; j <= nm && !st; j++) {
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
    if (!st) {
        const int first = mmj >= 0 ? 2 : 0; /* the matmul defined its own operands */
        if (mmj < 0) {
            vk_def(k, "Y_N", "%lluu", (unsigned long long)node_numel(rn));
            vk_def(k, "NIN", "%d", *next);
        }
        for (int b = first; b < *next; b++) {
            char nmx[24];
            snprintf(nmx, sizeof nmx, "X%d_ACCESS", b);
            vk_def(k, nmx, "readonly");
            snprintf(nmx, sizeof nmx, "X%d_N", b);
            vk_def(k, nmx, "%lluu", (unsigned long long)node_numel(&g->nodes[ext[b]]));
        }
        int32_t opnd[1 + KIR_MAX_INPUTS] = {root};
        for (int b = 0; b < *next; b++) opnd[1 + b] = ext[b];
        st = vk_paged_defines(k, g, opnd, 1 + *next, mp, caps, err, cap);
        if (mmj >= 0) {
            vk_line(k, "#define MM_EPILOGUE(i, acc) { \\\n%s    Y(i) = v%d; }", body, nm);
        } else {
            vk_line(k, "#define FUSED_BODY(i) \\\n%s    Y(i) = v%d;", body, nm);
            vk_launch_1d(k, caps, (uint64_t)node_numel(rn), vk_pick_local(caps, 256));
        }
        if (k->overflow) st = ffail(g, root, err, cap, "specialisation text too long");
    }
out:
    free(scratch);
    free(body);
    return st;
}
