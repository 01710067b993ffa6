/* memplan.c - liveness analysis and first-fit placement (see memplan.h). */
#include "memplan/memplan.h"

bool memplan_is_alias(op_id op) {
    return op == OP_RESHAPE || op == OP_SGD_UPDATE || op == OP_ADAM_UPDATE || op == OP_EMA_UPDATE ||
           op == OP_KV_APPEND;
}

int32_t memplan_root(const mn_graph *g, int32_t id) {
    while (memplan_is_alias(g->nodes[id].op)) id = g->nodes[id].in[0];
    return id;
}

/* Elementwise ops whose kernel may write over input 0 as it reads it. */
static bool op_inplace(op_id op) {
    switch (op) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_SCALE: case OP_NEG:
    case OP_EXP: case OP_LOG: case OP_SQRT: case OP_RSQRT: case OP_RELU: case OP_SIGMOID:
    case OP_TANH: case OP_GELU: case OP_GELU_TANH: case OP_SILU: case OP_STOP_GRAD:
    case OP_UNARY_BWD:
    case OP_ABS: case OP_CLAMP: case OP_POW: case OP_WHERE: case OP_DROPOUT: case OP_PW_BWD: /* pointwise family */
        return true;
    default:
        return false;
    }
}

static uint64_t align_up(uint64_t v) { return (v + MP_ALIGN - 1) & ~(uint64_t)(MP_ALIGN - 1); }

typedef struct block {
    uint64_t off, size;
    int32_t owner; /* root node id */
} block;

/* Live blocks of the work arena, sorted by offset. */
typedef struct arena {
    block *b;
    int32_t n, cap;
    uint64_t high;
} arena;

static mn_status arena_place(arena *a, uint64_t size, int32_t owner, uint64_t *off) {
    uint64_t at = 0;
    int32_t pos = 0;
    for (; pos < a->n; pos++) {
        if (a->b[pos].off >= at + size) break;
        uint64_t end = a->b[pos].off + a->b[pos].size;
        if (end > at) at = end;
    }
    if (a->n == a->cap) {
        int32_t cap = a->cap ? a->cap * 2 : 64;
        block *nb = realloc(a->b, (size_t)cap * sizeof *nb);
        if (!nb) return MN_E_NOMEM;
        a->b = nb;
        a->cap = cap;
    }
    memmove(&a->b[pos + 1], &a->b[pos], (size_t)(a->n - pos) * sizeof *a->b);
    a->b[pos] = (block){at, size, owner};
    a->n++;
    if (at + size > a->high) a->high = at + size;
    *off = at;
    return MN_OK;
}

static void arena_release(arena *a, int32_t owner) {
    for (int32_t i = 0; i < a->n; i++)
        if (a->b[i].owner == owner) {
            memmove(&a->b[i], &a->b[i + 1], (size_t)(a->n - i - 1) * sizeof *a->b);
            a->n--;
            return;
        }
}

static void arena_rename(arena *a, int32_t from, int32_t to) {
    for (int32_t i = 0; i < a->n; i++)
        if (a->b[i].owner == from) a->b[i].owner = to;
}

static int8_t pinned_arena(const node *root, bool io) {
    switch (root->op) {
    case OP_PARAM: return MP_ARENA_PARAM;
    case OP_STATE: return MP_ARENA_STATE;
    case OP_INPUT: case OP_CONST: return MP_ARENA_IO;
    default: return io ? MP_ARENA_IO : MP_ARENA_WORK;
    }
}

mn_status memplan_build(memplan *mp, const mn_graph *g, const int32_t *order, int32_t norder,
                        const uint8_t *live, const memplan_options *opt, char *err, size_t cap) {
    mn_status st = MN_OK;
    int32_t n = g->n;
    memset(mp, 0, sizeof *mp);
    mp->n = n;
    mp->real_size = opt->real_size;
    mp->slots = calloc((size_t)n, sizeof *mp->slots);
    int32_t *root = malloc((size_t)n * sizeof *root);
    int32_t *first = malloc((size_t)n * sizeof *first), *last = malloc((size_t)n * sizeof *last);
    uint8_t *io = calloc((size_t)n, 1);
    arena work = {0};
    if (!mp->slots || !root || !first || !last || !io) {
        st = MN_E_NOMEM;
        mn_fmt(err, cap, "memplan: out of memory for %d nodes", n);
        goto done;
    }
    for (int32_t i = 0; i < n; i++) {
        mp->slots[i].arena = -1;
        root[i] = memplan_root(g, i);
        first[i] = last[i] = -1;
    }
    /* a root is pinned to the io arena if any alias of it is an output or the loss */
    for (int32_t i = 0; i < n; i++)
        if (live[i] && (g->nodes[i].flags & (NODE_F_OUTPUT | NODE_F_LOSS))) io[root[i]] = 1;
    /* liveness of roots over schedule positions */
    for (int32_t t = 0; t < norder; t++) {
        const node *nd = &g->nodes[order[t]];
        int32_t r = root[order[t]];
        if (first[r] < 0) first[r] = t;
        if (last[r] < t) last[r] = t;
        for (int k = 0; k < nd->nin; k++) {
            int32_t ri = root[nd->in[k]];
            if (last[ri] < t) last[ri] = t;
        }
    }
    /* pinned roots: one range each, for the whole session */
    for (int32_t i = 0; i < n; i++) {
        if (!live[i] || root[i] != i) continue;
        const node *nd = &g->nodes[i];
        uint64_t bytes = node_bytes(nd, opt->real_size);
        if (!mn_add_u64(&mp->sum_bytes, mp->sum_bytes, bytes)) goto overflow;
        int8_t a = pinned_arena(nd, io[i]);
        if (a == MP_ARENA_WORK) continue;
        mp->slots[i] = (mp_slot){a, mp->arena_bytes[a], bytes};
        if (!mn_add_u64(&mp->arena_bytes[a], mp->arena_bytes[a], align_up(bytes))) goto overflow;
    }
    /* work roots: first fit in schedule order, in place where allowed */
    for (int32_t t = 0; t < norder; t++) {
        int32_t id = order[t];
        const node *nd = &g->nodes[id];
        bool place = root[id] == id && mp->slots[id].arena < 0, reused = false;
        uint64_t bytes = node_bytes(nd, opt->real_size), off = 0;
        if (place && opt->reuse && op_inplace(nd->op) && nd->nin > 0) {
            int32_t src = root[nd->in[0]];
            const node *sn = &g->nodes[src];
            bool ok = mp->slots[src].arena == MP_ARENA_WORK && last[src] == t &&
                      node_bytes(sn, opt->real_size) == bytes && sn->dtype == nd->dtype;
            for (int k = 1; ok && k < nd->nin; k++)
                if (root[nd->in[k]] == src && nd->in[k] != nd->in[0]) ok = false;
            if (ok) {
                off = mp->slots[src].offset;
                arena_rename(&work, src, id);
                reused = true;
            }
        }
        if (place && !reused) {
            if (opt->reuse) {
                if ((st = arena_place(&work, align_up(bytes), id, &off))) goto nomem;
            } else {
                off = work.high;
                if (!mn_add_u64(&work.high, work.high, align_up(bytes))) goto overflow;
            }
        }
        if (place) mp->slots[id] = (mp_slot){MP_ARENA_WORK, off, bytes};
        /* release every work root whose last use is this position */
        if (opt->reuse) {
            for (int k = 0; k < nd->nin; k++) {
                int32_t r = root[nd->in[k]];
                if (mp->slots[r].arena == MP_ARENA_WORK && last[r] == t && !(reused && r == root[nd->in[0]]))
                    arena_release(&work, r);
            }
            if (place && last[id] <= t) arena_release(&work, id);
        }
    }
    mp->arena_bytes[MP_ARENA_WORK] = work.high;
    /* aliases share their root's range */
    for (int32_t i = 0; i < n; i++) {
        if (!live[i] || root[i] == i) continue;
        mp->slots[i] = mp->slots[root[i]];
        mp->slots[i].bytes = node_bytes(&g->nodes[i], opt->real_size);
    }
    goto done;
overflow:
    st = MN_E_NOMEM;
    mn_fmt(err, cap, "memplan: total size overflows");
    goto done;
nomem:
    mn_fmt(err, cap, "memplan: out of memory");
done:
    free(work.b);
    free(root);
    free(first);
    free(last);
    free(io);
    if (st) memplan_free(mp);
    return st;
}

void memplan_free(memplan *mp) {
    free(mp->slots);
    memset(mp, 0, sizeof *mp);
}

uint64_t memplan_peak(const memplan *mp) {
    uint64_t s = 0;
    for (int a = 0; a < MP_ARENA_COUNT; a++) s += mp->arena_bytes[a];
    return s;
}

void memplan_dump(const memplan *mp, const mn_graph *g, FILE *f) {
    static const char *names[MP_ARENA_COUNT] = {"param", "state", "io", "work"};
    fprintf(f, "memplan: peak %llu bytes, sum of tensors %llu bytes\n",
            (unsigned long long)memplan_peak(mp), (unsigned long long)mp->sum_bytes);
    for (int a = 0; a < MP_ARENA_COUNT; a++)
        fprintf(f, "  arena %-5s %llu bytes\n", names[a], (unsigned long long)mp->arena_bytes[a]);
    for (int32_t i = 0; i < mp->n; i++) {
        const mp_slot *s = &mp->slots[i];
        if (s->arena < 0) continue;
        fprintf(f, "  %%%d %s %s @%llu +%llu\n", i, op_table[g->nodes[i].op].name, names[s->arena],
                (unsigned long long)s->offset, (unsigned long long)s->bytes);
    }
}
