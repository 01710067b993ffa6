/* kir.c - the kernel-level plan and its pointwise-chain fusion (kir.h). */
#include <stdlib.h>
#include <string.h>

#include "kir/kir.h"

mn_status kir_options_from_env(kir_options *o, bool backend_fuses, char *err, size_t cap) {
    const char *e = getenv("MEGANEURA_FUSION");
    const bool all = !e || !*e || strcmp(e, "1") == 0, pw = strcmp(e ? e : "", "pointwise") == 0;
    if (!all && !pw && strcmp(e, "0") != 0) {
        mn_fmt(err, cap, "MEGANEURA_FUSION='%s': want 0 (no fusion), pointwise (no matmul epilogues) or 1 (all)", e);
        return MN_E_INVALID;
    }
    o->fuse_pointwise = backend_fuses && (all || pw);
    o->fuse_matmul = backend_fuses && all;
    return MN_OK;
}

/* The fusion classes kir folds into a consumer's kernel (ops.def's fuse column). */
bool kir_op_pointwise(op_id op) {
    const op_fuse f = op_fuse_class(op);
    return f == FUSE_ELEMENTWISE || f == FUSE_BCAST;
}

/* Ops that write a tensor other than their output's own fresh storage: no
 * read may be moved past them. */
static bool writes_in_place(op_id op) { return op_writes_any(op); }

/* Gathers read their input at another index than their own. */
static bool is_gather(op_id op) { return op_fuse_class(op) == FUSE_BCAST; }

/* Pointwise, f32 in and out, rank <= 4 (the eltwise kernel's index space). */
static bool fusible(const mn_graph *g, int32_t id) {
    const node *n = &g->nodes[id];
    if (!kir_op_pointwise(n->op) || n->dtype != MN_F32 || n->rank > 4) return false;
    for (int i = 0; i < n->nin; i++)
        if (g->nodes[n->in[i]].dtype != MN_F32 || g->nodes[n->in[i]].rank > 4) return false;
    return true;
}

/* m reaches c's shape by numpy broadcasting (dims equal or 1, right-aligned):
 * c reads m at a broadcast index, and the fused kernel computes m there. */
static bool broadcasts_to(const node *m, const node *c) {
    if (m->rank > c->rank) return false;
    for (int d = 1; d <= m->rank; d++) {
        const int64_t a = m->shape[m->rank - d], b = c->shape[c->rank - d];
        if (a != b && a != 1) return false;
    }
    return true;
}

typedef struct group {
    int32_t ext[KIR_MAX_INPUTS]; /* distinct input tensors of the kernel */
    int8_t next;
    int8_t members; /* the root included */
    bool matmul;    /* a matmul member: the kernel is that matmul with the rest as its epilogue */
    bool costly;    /* a member (or the root) that is not cheap_in_epilogue */
} group;

/* Ops cheap enough to run in a matmul's epilogue, which is unrolled over
 * every element of an invocation's micro-tile (64 copies): arithmetic and
 * moves. A transcendental there (silu's exp) made the SwiGLU projection of
 * a 512-token prefill 10x slower on an H200 (code size, registers). */
static bool cheap_in_epilogue(op_id op) {
    switch (op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_SCALE: case OP_NEG: case OP_RELU: case OP_STOP_GRAD:
    case OP_BROADCAST:
        return true;
    default:
        return false;
    }
}

/* A matmul may join a pointwise group as its producer when it has the
 * root's shape exactly (the epilogue runs once per output element, at the
 * matmul's output index) and the group has no matmul yet. */
static bool matmul_member(const mn_graph *g, int32_t m, int32_t root, const group *gr) {
    const node *n = &g->nodes[m], *r = &g->nodes[root];
    if (op_fuse_class(n->op) != FUSE_MATMUL || n->op != OP_MATMUL || gr->matmul || gr->costly || n->dtype != MN_F32 || n->rank != r->rank) return false;
    for (int i = 0; i < 2; i++)
        if (g->nodes[n->in[i]].dtype != MN_F32) return false;
    for (int d = 0; d < n->rank; d++)
        if (n->shape[d] != r->shape[d]) return false;
    return true;
}

static bool has(const group *gr, int32_t t) {
    for (int i = 0; i < gr->next; i++)
        if (gr->ext[i] == t) return true;
    return false;
}

/* The group of root r as it would be with m folded in; false if it would
 * bind too many tensors. */
static bool fold(group *out, const group *gr, const mn_graph *g, int32_t m) {
    group t = *gr;
    int w = 0;
    for (int i = 0; i < t.next; i++)
        if (t.ext[i] != m) t.ext[w++] = t.ext[i];
    t.next = (int8_t)w;
    const node *n = &g->nodes[m];
    for (int i = 0; i < n->nin; i++) {
        if (has(&t, n->in[i])) continue;
        if (t.next == KIR_MAX_INPUTS) return false;
        t.ext[t.next++] = n->in[i];
    }
    t.members++;
    *out = t;
    return true;
}

/* Rewrites list[0..n) so that each group's members run right before their
 * root, in their original order. */
static mn_status regroup(const kir *k, int32_t *list, int32_t n) {
    int32_t *out = malloc(((size_t)n + 1) * sizeof *out), *head = malloc((size_t)k->n * sizeof *head),
            *tail = malloc((size_t)k->n * sizeof *tail), *next = malloc((size_t)k->n * sizeof *next);
    mn_status st = out && head && tail && next ? MN_OK : MN_E_NOMEM;
    int32_t w = 0;
    if (!st) {
        for (int32_t i = 0; i < k->n; i++) head[i] = tail[i] = MN_NONE;
        for (int32_t i = 0; i < n; i++) { /* members of each root, in list order */
            const int32_t id = list[i], r = k->root[id];
            if (r == id) continue;
            next[id] = MN_NONE;
            if (head[r] == MN_NONE) head[r] = id;
            else next[tail[r]] = id;
            tail[r] = id;
        }
        for (int32_t i = 0; i < n; i++) {
            const int32_t id = list[i];
            if (k->root[id] != id) continue;
            for (int32_t m = head[id]; m != MN_NONE; m = next[m]) out[w++] = m;
            out[w++] = id;
        }
        if (w == n) memcpy(list, out, (size_t)n * sizeof *out);
        else st = MN_E_INVALID; /* a member without its root in the list */
    }
    free(out);
    free(head);
    free(tail);
    free(next);
    return st;
}

mn_status kir_build(kir *k, const mn_graph *g, schedule *s, const kir_options *o) {
    memset(k, 0, sizeof *k);
    const int32_t n = g->n;
    k->n = n;
    k->root = malloc(((size_t)n + 1) * sizeof *k->root);
    if (!k->root) return MN_E_NOMEM;
    for (int32_t i = 0; i < n; i++) k->root[i] = i;
    int32_t views = 0; /* reshapes share their input's storage: no kernel */
    for (int32_t t = 0; t < s->n; t++) views += g->nodes[s->order[t]].op == OP_RESHAPE;
    k->kernels = s->n - views;
    if (!o || !o->fuse_pointwise || s->n == 0) return MN_OK;
    int32_t *pos = malloc((size_t)n * sizeof *pos), *nuse = calloc((size_t)n, sizeof *nuse),
            *user = malloc((size_t)n * sizeof *user), *writers = calloc((size_t)s->n + 1, sizeof *writers);
    group *gr = malloc((size_t)n * sizeof *gr);
    mn_status st = pos && nuse && user && writers && gr ? MN_OK : MN_E_NOMEM;
    if (st) goto done;
    for (int32_t i = 0; i < n; i++) pos[i] = -1, user[i] = MN_NONE;
    /* positions, distinct consumers, and writers[t] = in-place writers before position t */
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        const node *nd = &g->nodes[id];
        pos[id] = t;
        writers[t + 1] = writers[t] + (writes_in_place(nd->op) ? 1 : 0);
        for (int i = 0; i < nd->nin; i++) {
            bool seen = false;
            for (int j = 0; j < i; j++) seen |= nd->in[j] == nd->in[i];
            if (seen) continue;
            nuse[nd->in[i]]++;
            user[nd->in[i]] = id;
        }
    }
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        const node *nd = &g->nodes[id];
        gr[id].next = 0;
        gr[id].members = 1;
        gr[id].matmul = false;
        gr[id].costly = !cheap_in_epilogue(nd->op);
        for (int i = 0; i < nd->nin; i++)
            if (!has(&gr[id], nd->in[i]) && gr[id].next < KIR_MAX_INPUTS) gr[id].ext[gr[id].next++] = nd->in[i];
    }
    /* consumers before producers: a node's group is final when its inputs are visited */
    for (int32_t t = s->n - 1; t >= 0; t--) {
        const int32_t c = s->order[t];
        const node *cn = &g->nodes[c];
        if (!fusible(g, c) || is_gather(cn->op) || cn->nin > KIR_MAX_INPUTS) continue;
        const int32_t r = k->root[c];
        for (int i = 0; i < cn->nin; i++) {
            const int32_t m = cn->in[i];
            const node *mn = &g->nodes[m];
            group next;
            const bool mm = o->fuse_matmul && matmul_member(g, m, r, &gr[r]);
            if (pos[m] < 0 || k->root[m] != m || !(mm || fusible(g, m))) continue;
            if (gr[r].matmul && !mm && !cheap_in_epilogue(mn->op)) continue;
            if (mn->flags & (NODE_F_OUTPUT | NODE_F_LOSS | NODE_F_READ | NODE_F_SYNC)) continue;
            if (nuse[m] != 1 || user[m] != c || !broadcasts_to(mn, cn)) continue;
            if (writers[pos[r]] != writers[pos[m] + 1]) continue; /* an in-place write between them */
            if (gr[r].members >= KIR_MAX_MEMBERS || !fold(&next, &gr[r], g, m)) continue;
            next.matmul = next.matmul || mm;
            next.costly = next.costly || (!mm && !cheap_in_epilogue(mn->op));
            gr[r] = next;
            k->root[m] = r;
            k->fused++;
        }
    }
    k->kernels = s->n - views - k->fused;
    if (k->fused) {
        st = regroup(k, s->order, s->n);
        if (!st) st = regroup(k, s->fwd, s->nfwd);
    }
done:
    free(pos);
    free(nuse);
    free(user);
    free(writers);
    free(gr);
    if (st) kir_free(k);
    return st;
}

void kir_free(kir *k) {
    free(k->root);
    memset(k, 0, sizeof *k);
}

void kir_dump(const kir *k, const mn_graph *g, const schedule *s, FILE *f) {
    fprintf(f, "kernels: %d dispatching kernels for %d scheduled nodes (%d folded into others, reshapes "
               "dispatch nothing)\n", k->kernels, s->n, k->fused);
    for (int32_t t = 0; t < s->n; t++) {
        const int32_t id = s->order[t];
        if (k->root[id] != id) continue;
        int members = 0;
        for (int32_t j = 0; j < t; j++) members += k->root[s->order[j]] == id && s->order[j] != id;
        if (!members) continue;
        fprintf(f, "  kernel %%%d %s:", id, op_table[g->nodes[id].op].name);
        for (int32_t j = 0; j < t; j++)
            if (k->root[s->order[j]] == id && s->order[j] != id)
                fprintf(f, " %%%d %s", s->order[j], op_table[g->nodes[s->order[j]].op].name);
        fprintf(f, " -> %%%d\n", id);
    }
}
