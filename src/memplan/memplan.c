/* memplan.c - liveness analysis and first-fit placement (see memplan.h).
 * Placement costs O(log n) per tensor (a treap of free intervals), so
 * building a plan is O(n log n) in the nodes of the schedule. */
#include "memplan/memplan.h"

bool memplan_is_alias(op_id op) { return op_has(op, OPF_VIEW | OPF_ALIAS); }

int32_t memplan_root(const mn_graph *g, int32_t id) {
    while (memplan_is_alias(g->nodes[id].op)) id = g->nodes[id].in[0];
    return id;
}

/* Elementwise ops whose kernel may write over input 0 as it reads it. */
static bool op_inplace(op_id op) { return op_has(op, OPF_INPLACE); }

static uint64_t align_up(uint64_t v) { return (v + MP_ALIGN - 1) & ~(uint64_t)(MP_ALIGN - 1); }

/* ---- first fit over free intervals ----------------------------------------
 * The free space of the work arena is a set of maximal free intervals; the
 * last one runs to infinity (len MP_FS_INF), so a request always fits. A
 * treap keyed by offset, each node also holding the longest interval of its
 * subtree, finds the lowest interval that fits in O(log n); releases merge
 * with both neighbours. Same placements as a linear first-fit scan. */

#define MP_FS_INF UINT64_MAX

static uint64_t fs_best(const mp_freeset *fs, int32_t t) { return t < 0 ? 0 : fs->a[t].best; }

static void fs_update(mp_freeset *fs, int32_t t) {
    mp_fnode *x = &fs->a[t];
    uint64_t b = x->len, l = fs_best(fs, x->l), r = fs_best(fs, x->r);
    x->best = b > l ? (b > r ? b : r) : (l > r ? l : r);
}

static int32_t fs_node(mp_freeset *fs, uint64_t off, uint64_t len) {
    int32_t t;
    if (fs->spare >= 0) {
        t = fs->spare;
        fs->spare = fs->a[t].l;
    } else {
        if (fs->n == fs->cap) {
            int32_t cap = fs->cap ? fs->cap * 2 : 64;
            mp_fnode *na = realloc(fs->a, (size_t)cap * sizeof *na);
            if (!na) return -1;
            fs->a = na;
            fs->cap = cap;
        }
        t = fs->n++;
    }
    fs->seed ^= fs->seed << 13, fs->seed ^= fs->seed >> 17, fs->seed ^= fs->seed << 5;
    fs->a[t] = (mp_fnode){off, len, len, fs->seed, -1, -1};
    return t;
}

static void fs_drop(mp_freeset *fs, int32_t t) {
    fs->a[t].l = fs->spare;
    fs->spare = t;
}

/* Trees with every offset of a below every offset of b. */
static int32_t fs_merge(mp_freeset *fs, int32_t a, int32_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    if (fs->a[a].prio > fs->a[b].prio) {
        fs->a[a].r = fs_merge(fs, fs->a[a].r, b);
        fs_update(fs, a);
        return a;
    }
    fs->a[b].l = fs_merge(fs, a, fs->a[b].l);
    fs_update(fs, b);
    return b;
}

/* *lo: offsets below key; *hi: the others. */
static void fs_split(mp_freeset *fs, int32_t t, uint64_t key, int32_t *lo, int32_t *hi) {
    if (t < 0) {
        *lo = *hi = -1;
    } else if (fs->a[t].off < key) {
        fs_split(fs, fs->a[t].r, key, &fs->a[t].r, hi);
        fs_update(fs, t);
        *lo = t;
    } else {
        fs_split(fs, fs->a[t].l, key, lo, &fs->a[t].l);
        fs_update(fs, t);
        *hi = t;
    }
}

/* Removes the lowest (first) or highest interval of t into *out. */
static int32_t fs_pop_end(mp_freeset *fs, int32_t t, bool first, mp_fnode *out) {
    int32_t next = first ? fs->a[t].l : fs->a[t].r;
    if (next < 0) {
        int32_t rest = first ? fs->a[t].r : fs->a[t].l;
        *out = fs->a[t];
        fs_drop(fs, t);
        return rest;
    }
    next = fs_pop_end(fs, next, first, out);
    if (first) fs->a[t].l = next;
    else fs->a[t].r = next;
    fs_update(fs, t);
    return t;
}

static const mp_fnode *fs_end(const mp_freeset *fs, int32_t t, bool first) {
    for (int32_t c; (c = first ? fs->a[t].l : fs->a[t].r) >= 0;) t = c;
    return &fs->a[t];
}

/* Takes size bytes from the lowest interval of t that holds them. */
static int32_t fs_take(mp_freeset *fs, int32_t t, uint64_t size, uint64_t *off) {
    mp_fnode *x = &fs->a[t];
    if (x->l >= 0 && fs->a[x->l].best >= size) {
        int32_t l = fs_take(fs, x->l, size, off);
        fs->a[t].l = l;
    } else if (x->len >= size) {
        *off = x->off;
        if (x->len == size) {
            int32_t m = fs_merge(fs, x->l, x->r);
            fs_drop(fs, t);
            return m;
        }
        x->off += size;
        if (x->len != MP_FS_INF) x->len -= size;
    } else {
        int32_t r = fs_take(fs, x->r, size, off);
        fs->a[t].r = r;
    }
    fs_update(fs, t);
    return t;
}

mn_status mp_fs_init(mp_freeset *fs) {
    memset(fs, 0, sizeof *fs);
    fs->spare = -1;
    fs->seed = 0x9e3779b9u;
    fs->root = fs_node(fs, 0, MP_FS_INF);
    return fs->root < 0 ? MN_E_NOMEM : MN_OK;
}

void mp_fs_destroy(mp_freeset *fs) {
    free(fs->a);
    memset(fs, 0, sizeof *fs);
}

void mp_fs_alloc(mp_freeset *fs, uint64_t size, uint64_t *off) {
    *off = 0;
    fs->root = fs_take(fs, fs->root, size, off); /* the last interval always fits */
    if (*off + size > fs->high) fs->high = *off + size;
}

mn_status mp_fs_release(mp_freeset *fs, uint64_t off, uint64_t size) {
    int32_t lo, hi;
    uint64_t end = off + size;
    /* one node is needed whatever merges: get it before changing the tree */
    int32_t t = fs_node(fs, off, size);
    if (t < 0) return MN_E_NOMEM;
    fs_split(fs, fs->root, off, &lo, &hi);
    mp_fnode nb;
    if (lo >= 0) {
        const mp_fnode *p = fs_end(fs, lo, false);
        if (p->off + p->len == off) {
            lo = fs_pop_end(fs, lo, false, &nb);
            fs->a[t].off = nb.off;
            fs->a[t].len += nb.len;
        }
    }
    if (hi >= 0 && fs_end(fs, hi, true)->off == end) {
        hi = fs_pop_end(fs, hi, true, &nb);
        fs->a[t].len = nb.len == MP_FS_INF ? MP_FS_INF : fs->a[t].len + nb.len;
    }
    fs_update(fs, t);
    fs->root = fs_merge(fs, fs_merge(fs, lo, t), hi);
    return MN_OK;
}

/* The lowest start in [off, off + len) of size bytes inside one chunk (size
 * > chunk: at a chunk boundary), or UINT64_MAX if none. */
static uint64_t chunk_start(uint64_t off, uint64_t len, uint64_t size, uint64_t chunk) {
    uint64_t p = off;
    if (size > chunk ? p % chunk != 0 : p % chunk + size > chunk) p = (p / chunk + 1) * chunk;
    if (len != MP_FS_INF && (p < off || p - off > len || len - (p - off) < size)) return UINT64_MAX;
    return p;
}

/* The lowest fitting start in the subtree t (UINT64_MAX: none); *at: the
 * offset of the interval holding it. */
static uint64_t fs_find_chunked(const mp_freeset *fs, int32_t t, uint64_t size, uint64_t chunk, uint64_t *at) {
    if (t < 0 || fs->a[t].best < size) return UINT64_MAX;
    uint64_t p = fs_find_chunked(fs, fs->a[t].l, size, chunk, at);
    if (p != UINT64_MAX) return p;
    p = chunk_start(fs->a[t].off, fs->a[t].len, size, chunk);
    if (p != UINT64_MAX) {
        *at = fs->a[t].off;
        return p;
    }
    return fs_find_chunked(fs, fs->a[t].r, size, chunk, at);
}

mn_status mp_fs_alloc_chunked(mp_freeset *fs, uint64_t size, uint64_t chunk, uint64_t *off) {
    uint64_t at = 0, p = fs_find_chunked(fs, fs->root, size, chunk, &at);
    *off = p; /* the last interval runs to infinity: always found */
    /* the two pieces left around [p, p + size): nodes first, the tree after */
    int32_t left = fs_node(fs, 0, 0), right = left < 0 ? -1 : fs_node(fs, 0, 0);
    if (left < 0 || right < 0) {
        if (left >= 0) fs_drop(fs, left);
        return MN_E_NOMEM;
    }
    int32_t lo, hi;
    mp_fnode nb;
    fs_split(fs, fs->root, at, &lo, &hi);
    hi = fs_pop_end(fs, hi, true, &nb); /* the interval starting at `at` */
    if (p > nb.off) {
        fs->a[left] = (mp_fnode){nb.off, p - nb.off, p - nb.off, fs->a[left].prio, -1, -1};
        lo = fs_merge(fs, lo, left);
    } else {
        fs_drop(fs, left);
    }
    uint64_t end = p + size;
    if (nb.len == MP_FS_INF || nb.off + nb.len > end) {
        uint64_t len = nb.len == MP_FS_INF ? MP_FS_INF : nb.off + nb.len - end;
        fs->a[right] = (mp_fnode){end, len, len, fs->a[right].prio, -1, -1};
        hi = fs_merge(fs, right, hi);
    } else {
        fs_drop(fs, right);
    }
    fs->root = fs_merge(fs, lo, hi);
    if (end > fs->high) fs->high = end;
    return MN_OK;
}

static int8_t pinned_arena(const node *root, bool io) {
    switch (root->op) {
    case OP_PARAM: return MP_ARENA_PARAM;
    case OP_STATE: return MP_ARENA_STATE;
    case OP_INPUT: case OP_CONST: return MP_ARENA_IO;
    default: return io ? MP_ARENA_IO : MP_ARENA_WORK;
    }
}

uint64_t memplan_chunk(const mn_graph *g, const uint8_t *live, uint64_t chunk, size_t real_size) {
    for (int32_t i = 0; chunk && i < g->n; i++) {
        if (!live[i] || memplan_root(g, i) != i || align_up(node_bytes(&g->nodes[i], real_size)) <= chunk) continue;
        uint64_t p2 = MP_ALIGN;
        while (p2 <= chunk / 2) p2 *= 2;
        return p2;
    }
    return chunk;
}

/* The parallel regions of opt (memplan_parallel), before anything else is
 * placed; *work: the bytes they take at the bottom of the work arena. */
static mn_status place_parallel(memplan *mp, const mn_graph *g, const memplan_options *opt, const int32_t *root,
                                const uint8_t *live, const uint8_t *io, const uint8_t *fused, uint64_t chunk,
                                uint64_t *work, char *err, size_t cap) {
    *work = 0;
    for (int32_t p = 0; p < opt->nparallel; p++) {
        const memplan_parallel *pr = &opt->parallel[p];
        if (pr->lanes < 1 || pr->lanes > MP_MAX_LANES || pr->n < 1) {
            mn_fmt(err, cap, "memplan: parallel region %d: %d lanes of %d tensors", p, pr->lanes, pr->n);
            return MN_E_INVALID;
        }
        for (int l = 0; l < pr->lanes; l++) {
            int8_t arena = -1;
            uint64_t total = 0;
            for (int32_t i = 0; i < pr->n; i++) {
                const int32_t id = pr->ids[(size_t)i * (size_t)pr->lanes + (size_t)l], r = root[id];
                const node *nd = &g->nodes[r];
                const uint64_t bytes = node_bytes(nd, opt->real_size);
                const int8_t a = pinned_arena(nd, false);
                const char *why = !live[r] ? "not live" : fused[r] == 1 ? "folded into a kernel" : io[r] ? "read by the user"
                                  : mp->slots[r].arena >= 0 ? "placed twice" : a == MP_ARENA_IO ? "an input or constant"
                                  : (arena >= 0 && a != arena) ? "in another arena than its lane"
                                  : bytes != node_bytes(&g->nodes[root[pr->ids[(size_t)i * (size_t)pr->lanes]]], opt->real_size)
                                      ? "of another size than lane 0's" : NULL;
                if (why) {
                    mn_fmt(err, cap, "memplan: parallel region %d, lane %d: %%%d %s is %s", p, l, r,
                           op_table[nd->op].name, why);
                    return MN_E_INVALID;
                }
                arena = a;
                mp->slots[r] = (mp_slot){a, total, bytes}; /* offset from the lane's start, for now */
                total += align_up(bytes);
            }
            uint64_t at = arena == MP_ARENA_WORK ? *work : mp->arena_bytes[arena];
            if (chunk && total > chunk) {
                mn_fmt(err, cap, "memplan: parallel region %d: %llu bytes, more than a chunk (%llu)", p,
                       (unsigned long long)total, (unsigned long long)chunk);
                return MN_E_INVALID;
            }
            if (chunk && at % chunk + total > chunk) at = (at / chunk + 1) * chunk;
            for (int32_t i = 0; i < pr->n; i++) mp->slots[root[pr->ids[(size_t)i * (size_t)pr->lanes + (size_t)l]]].offset += at;
            if (arena == MP_ARENA_WORK) *work = at + total;
            else mp->arena_bytes[arena] = at + total;
        }
    }
    return MN_OK;
}

mn_status memplan_build(memplan *mp, const mn_graph *g, const int32_t *order, int32_t norder,
                        const uint8_t *live, const memplan_options *opt, char *err, size_t cap) {
    mn_status st = MN_OK;
    int32_t n = g->n;
    memset(mp, 0, sizeof *mp);
    mp->n = n;
    mp->real_size = opt->real_size;
    mp->chunk_bytes = opt->chunk_bytes;
    uint64_t chunk = opt->chunk_bytes;
    mp->slots = calloc((size_t)n, sizeof *mp->slots);
    int32_t *root = malloc((size_t)n * sizeof *root);
    int32_t *first = malloc((size_t)n * sizeof *first), *last = malloc((size_t)n * sizeof *last);
    uint8_t *io = calloc((size_t)n, 1), *held = calloc((size_t)n, 1), *fused = calloc((size_t)n, 1);
    const int32_t *kr = opt->kernel_root;
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    mp_freeset work;
    mn_status fst = mp_fs_init(&work);
    if (!mp->slots || !root || !first || !last || !io || !held || !fused || !pos || fst) {
        st = MN_E_NOMEM;
        mn_fmt(err, cap, "memplan: out of memory for %d nodes", n);
        goto done;
    }
    for (int32_t i = 0; i < n; i++) {
        mp->slots[i].arena = -1;
        root[i] = memplan_root(g, i);
        first[i] = last[i] = pos[i] = -1;
    }
    /* fused[i]: 1 = a member folded into another kernel (no storage), 2 = a
     * root with members */
    for (int32_t t = 0; t < norder; t++) pos[order[t]] = t;
    if (kr)
        for (int32_t t = 0; t < norder; t++)
            if (kr[order[t]] != order[t]) fused[order[t]] = 1, fused[kr[order[t]]] = 2;
    /* a tensor larger than a chunk spans whole chunks from a chunk boundary
     * (a paged operand): the chunk becomes a power of two so kernels find an
     * element's page with a shift */
    chunk = memplan_chunk(g, live, chunk, opt->real_size);
    mp->chunk_bytes = chunk;
    /* a root is pinned to the io arena if any alias of it is an output or the loss */
    for (int32_t i = 0; i < n; i++)
        if (live[i] && (g->nodes[i].flags & (NODE_F_OUTPUT | NODE_F_LOSS | NODE_F_READ))) io[root[i]] = 1;
    /* liveness of roots over schedule positions */
    for (int32_t t = 0; t < norder; t++) {
        const node *nd = &g->nodes[order[t]];
        int32_t r = root[order[t]];
        /* a member's reads happen when its kernel runs, at the root */
        const int32_t at = fused[order[t]] == 1 ? pos[kr[order[t]]] : t;
        if (fused[order[t]] != 1) {
            if (first[r] < 0) first[r] = t;
            if (last[r] < t) last[r] = t;
        }
        for (int k = 0; k < nd->nin; k++) {
            int32_t ri = root[nd->in[k]];
            if (last[ri] < at) last[ri] = at;
        }
    }
    /* parallel regions first, then the other pinned roots: one range each,
     * for the whole session */
    uint64_t work_fixed = 0;
    if (opt->nparallel && (st = place_parallel(mp, g, opt, root, live, io, fused, chunk, &work_fixed, err, cap)))
        goto done;
    for (int32_t i = 0; i < n; i++) {
        if (!live[i] || root[i] != i || fused[i] == 1) continue;
        const node *nd = &g->nodes[i];
        uint64_t bytes = node_bytes(nd, opt->real_size);
        if (!mn_add_u64(&mp->sum_bytes, mp->sum_bytes, align_up(bytes))) goto overflow;
        if (mp->slots[i].arena >= 0) continue; /* a parallel region's */
        int8_t a = pinned_arena(nd, io[i]);
        if (a == MP_ARENA_WORK) continue;
        uint64_t at = mp->arena_bytes[a];
        if (chunk && (bytes > chunk ? at % chunk != 0 : at % chunk + bytes > chunk)) at = (at / chunk + 1) * chunk;
        mp->slots[i] = (mp_slot){a, at, bytes};
        if (!mn_add_u64(&mp->arena_bytes[a], at, align_up(bytes))) goto overflow;
        mp->tensor_bytes[a] += align_up(bytes); /* below arena_bytes: cannot overflow */
    }
    /* the parallel regions' computed tensors: the bottom of the work arena */
    if (work_fixed) {
        uint64_t off = 0;
        if (opt->reuse && chunk) st = mp_fs_alloc_chunked(&work, work_fixed, chunk, &off);
        else if (opt->reuse) mp_fs_alloc(&work, work_fixed, &off);
        else work.high = work_fixed;
        if (st) goto nomem;
        MN_ASSERT(off == 0);
    }
    /* work roots: first fit in schedule order, in place where allowed. held[r]:
     * root r owns a block of the work arena not yet released (an in-place
     * output takes its input's block over); live_bytes: the aligned bytes
     * of the blocks held (the arena's fullest: tensor_bytes) */
    uint64_t live_bytes = 0;
    for (int32_t t = 0; t < norder; t++) {
        int32_t id = order[t];
        const node *nd = &g->nodes[id];
        if (fused[id] == 1) continue; /* computed (and its reads released) at its root */
        bool place = root[id] == id && mp->slots[id].arena < 0, reused = false;
        uint64_t bytes = node_bytes(nd, opt->real_size), off = 0;
        if (place && opt->reuse && op_inplace(nd->op) && nd->nin > 0 && !fused[id]) {
            int32_t src = root[nd->in[0]];
            const node *sn = &g->nodes[src];
            bool ok = mp->slots[src].arena == MP_ARENA_WORK && held[src] && last[src] == t &&
                      node_bytes(sn, opt->real_size) == bytes && sn->dtype == nd->dtype;
            for (int k = 1; ok && k < nd->nin; k++)
                if (root[nd->in[k]] == src && nd->in[k] != nd->in[0]) ok = false;
            if (ok) {
                off = mp->slots[src].offset;
                held[src] = 0;
                reused = true;
            }
        }
        if (place && !reused) {
            if (opt->reuse && chunk) {
                if ((st = mp_fs_alloc_chunked(&work, align_up(bytes), chunk, &off))) goto nomem;
            } else if (opt->reuse) {
                mp_fs_alloc(&work, align_up(bytes), &off);
            } else {
                off = work.high;
                if (chunk && (bytes > chunk ? off % chunk != 0 : off % chunk + bytes > chunk))
                    off = (off / chunk + 1) * chunk;
                work.high = off;
                if (!mn_add_u64(&work.high, work.high, align_up(bytes))) goto overflow;
            }
        }
        if (place) {
            mp->slots[id] = (mp_slot){MP_ARENA_WORK, off, bytes};
            held[id] = opt->reuse;
            if (!reused) { /* an in-place output takes its input's block: no more bytes */
                live_bytes += align_up(bytes);
                if (live_bytes > mp->tensor_bytes[MP_ARENA_WORK]) mp->tensor_bytes[MP_ARENA_WORK] = live_bytes;
            }
        }
        /* release every work root whose last use is this position */
        if (opt->reuse) {
            /* the inputs of this kernel: the node's and its members' (right before it) */
            for (int32_t j = t; j >= 0 && (j == t || fused[order[j]] == 1); j--) {
                const node *rd = &g->nodes[order[j]];
                for (int k = 0; k < rd->nin; k++) {
                    int32_t r = root[rd->in[k]];
                    if (held[r] && last[r] == t) {
                        held[r] = 0;
                        live_bytes -= align_up(mp->slots[r].bytes);
                        if ((st = mp_fs_release(&work, mp->slots[r].offset, align_up(mp->slots[r].bytes))))
                            goto nomem;
                    }
                }
            }
            if (place && held[id] && last[id] <= t) {
                held[id] = 0;
                live_bytes -= align_up(bytes);
                if ((st = mp_fs_release(&work, off, align_up(bytes)))) goto nomem;
            }
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
    mp_fs_destroy(&work);
    free(held);
    free(fused);
    free(pos);
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
    fprintf(f, "memplan: peak %llu bytes, sum of tensors %llu bytes (each aligned to %d)", (unsigned long long)memplan_peak(mp),
            (unsigned long long)mp->sum_bytes, MP_ALIGN);
    if (mp->chunk_bytes) fprintf(f, ", chunks of %llu bytes", (unsigned long long)mp->chunk_bytes);
    fprintf(f, "\n");
    /* the arena = its tensors at the fullest (aligned) + padding: chunk
     * boundaries skipped and, in the work arena, gaps between live blocks */
    for (int a = 0; a < MP_ARENA_COUNT; a++)
        fprintf(f, "  arena %-5s %llu bytes (tensors %llu%s, padding %llu)\n", names[a],
                (unsigned long long)mp->arena_bytes[a], (unsigned long long)mp->tensor_bytes[a],
                a == MP_ARENA_WORK ? " live at most" : "",
                (unsigned long long)(mp->arena_bytes[a] - mp->tensor_bytes[a]));
    for (int32_t i = 0; i < mp->n; i++) {
        const mp_slot *s = &mp->slots[i];
        if (s->arena < 0) continue;
        fprintf(f, "  %%%d %s %s @%llu +%llu", i, op_table[g->nodes[i].op].name, names[s->arena],
                (unsigned long long)s->offset, (unsigned long long)s->bytes);
        uint64_t pages = memplan_pages(mp, i);
        if (pages) fprintf(f, " (paged: %llu chunks)", (unsigned long long)pages);
        fprintf(f, "\n");
    }
}
