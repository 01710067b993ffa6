/* cpu.c - the CPU reference backend (the oracle every other backend is
 * compared against).
 *
 * Owns one host allocation per non-empty arena of the program's memory plan
 * (calloc: zero pages the kernel maps on first touch, 64-byte aligned by
 * hand), copies CONST nodes' data into their storage at
 * create (widened to double in f64 mode), moves bytes between the host and a
 * node's slot, and executes nodes by calling the kernel of their op from
 * cpu_kernels_f32 or cpu_kernels_f64 with pointers into the arenas.
 *
 * The fast contract (NODE_F_ROUND_*: mn_session_options.precision): before a
 * node whose flag is set runs, its operands (node_round_ins of them: a
 * contraction's inputs 0 and 1, attention's q, k, v, dout) are rounded
 * (core/round16.h: once, from the stored f32 or f64 value) into scratch
 * buffers allocated at create, and the ordinary kernel runs on the copies;
 * it accumulates in f32 (f64 mode: f64), so the CPU stays the oracle of the
 * fast paths. The attention kernels round their weights too
 * (kernels_transformer.h).
 *
 * Does not: plan memory, order nodes, write PARAM/STATE/INPUT storage (the
 * session does, through write and fill; a zero fill of an arena nothing has
 * written yet touches no memory), or check shapes (the graph did). The program
 * (graph, order, plan) is borrowed: it must outlive the backend.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"

typedef struct cpu_backend {
    program prog;                   /* borrowed pointers */
    const cpu_kernel_fn *kernels;   /* cpu_kernels_f32 or cpu_kernels_f64 */
    char *arena[MP_ARENA_COUNT];    /* NULL for an empty arena; aligned into arena_base */
    void *arena_base[MP_ARENA_COUNT];
    bool clean[MP_ARENA_COUNT];     /* still all zeros: nothing written since create */
    void *rounded[NODE_ROUND_INS_MAX]; /* the fast contract: rounded copies of the leading inputs */
} cpu_backend;

/* "node 12 (matmul)" or "node 3 (param 'fc1.w')" into buf. */
static const char *cpu_node_label(char *buf, size_t cap, const mn_graph *g, int32_t id) {
    if (id < 0 || id >= g->n) {
        mn_fmt(buf, cap, "node %d (out of range)", (int)id);
        return buf;
    }
    const node *n = &g->nodes[id];
    const char *op = (unsigned)n->op < OP_COUNT ? op_table[n->op].name : "?";
    if (n->name) mn_fmt(buf, cap, "node %d (%s '%s')", (int)id, op, n->name);
    else mn_fmt(buf, cap, "node %d (%s)", (int)id, op);
    return buf;
}

/* The slot of node id, or an error naming the node if it has none. user >= 0
 * means id is input `input` of node user (for the message only). */
static mn_status cpu_slot(const cpu_backend *cb, int32_t id, int32_t user, int input, const mp_slot **out,
                          const char *what, char *err, size_t cap) {
    const mn_graph *g = cb->prog.g;
    const mp_slot *s = NULL;
    if (id >= 0 && id < g->n && id < cb->prog.plan->n) s = &cb->prog.plan->slots[id];
    if (s && s->arena >= 0 && s->arena < MP_ARENA_COUNT) {
        *out = s;
        return MN_OK;
    }
    char lab[160], ulab[160] = "";
    if (user >= 0) {
        char tmp[160];
        mn_fmt(ulab, sizeof ulab, " (input %d of %s)", input, cpu_node_label(tmp, sizeof tmp, g, user));
    }
    mn_fmt(err, cap, "cpu: %s: %s%s %s", what, cpu_node_label(lab, sizeof lab, g, id), ulab,
           s ? "has no storage in the memory plan" : "has no slot");
    return MN_E_INVALID;
}

static void *cpu_ptr(const cpu_backend *cb, const mp_slot *s) {
    char *base = cb->arena[s->arena];
    return base ? base + s->offset : NULL; /* NULL only for an empty arena */
}

static void cpu_destroy(void *b) {
    cpu_backend *cb = b;
    if (!cb) return;
    for (int a = 0; a < MP_ARENA_COUNT; a++) free(cb->arena_base[a]);
    for (int j = 0; j < NODE_ROUND_INS_MAX; j++) free(cb->rounded[j]);
    free(cb);
}

/* Copies a CONST node's f32 data into its slot (converted for f64/i32). */
static mn_status cpu_load_const(cpu_backend *cb, int32_t id, char *err, size_t cap) {
    const mn_graph *g = cb->prog.g;
    const node *n = &g->nodes[id];
    const mp_slot *s = &cb->prog.plan->slots[id];
    char lab[160];
    if (s->arena < 0) return MN_OK; /* not live in this program */
    uint64_t cnt = 1, want;
    for (int i = 0; i < n->rank; i++) cnt *= (uint64_t)n->shape[i];
    const size_t es = n->dtype == MN_I32 ? sizeof(int32_t) : cb->prog.f64 ? sizeof(double) : sizeof(float);
    if (!mn_mul_u64(&want, cnt, es) || want != s->bytes || (cnt && !n->data)) {
        mn_fmt(err, cap, "cpu: constant %s: %s (slot %llu bytes, %llu elements)",
               cpu_node_label(lab, sizeof lab, g, id), n->data ? "slot size mismatch" : "no data",
               (unsigned long long)s->bytes, (unsigned long long)cnt);
        return MN_E_INVALID;
    }
    void *dst = cpu_ptr(cb, s);
    cb->clean[s->arena] = false;
    if (n->dtype == MN_I32) {
        for (uint64_t i = 0; i < cnt; i++) ((int32_t *)dst)[i] = (int32_t)n->data[i];
    } else if (cb->prog.f64) {
        for (uint64_t i = 0; i < cnt; i++) ((double *)dst)[i] = n->data[i];
    } else if (cnt) {
        memcpy(dst, n->data, (size_t)want);
    }
    return MN_OK;
}

static mn_status cpu_create(void **out, const program *p, char *err, size_t cap) {
    *out = NULL;
    if (!p || !p->g || !p->plan) {
        mn_fmt(err, cap, "cpu: create: no program");
        return MN_E_INVALID;
    }
    const memplan *plan = p->plan;
    const size_t rs = p->f64 ? sizeof(double) : sizeof(float);
    if (plan->n != p->g->n) {
        mn_fmt(err, cap, "cpu: create: memory plan has %d slots for %d nodes", (int)plan->n, (int)p->g->n);
        return MN_E_INVALID;
    }
    if (plan->real_size != rs) {
        mn_fmt(err, cap, "cpu: create: memory plan assumes %zu-byte floats, backend mode is %s",
               plan->real_size, p->f64 ? "f64" : "f32");
        return MN_E_INVALID;
    }
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) {
        mn_fmt(err, cap, "cpu: create: out of memory");
        return MN_E_NOMEM;
    }
    cb->prog = *p;
    cb->kernels = p->f64 ? cpu_kernels_f64 : cpu_kernels_f32;

    /* Every slot must lie inside its arena. */
    for (int32_t id = 0; id < plan->n; id++) {
        const mp_slot *s = &plan->slots[id];
        uint64_t end;
        char lab[160];
        if (s->arena < 0) continue;
        if (s->arena >= MP_ARENA_COUNT || !mn_add_u64(&end, s->offset, s->bytes) ||
            end > plan->arena_bytes[s->arena]) {
            mn_fmt(err, cap, "cpu: create: %s: slot [%llu, +%llu) outside arena %d",
                   cpu_node_label(lab, sizeof lab, p->g, id), (unsigned long long)s->offset,
                   (unsigned long long)s->bytes, (int)s->arena);
            cpu_destroy(cb);
            return MN_E_INVALID;
        }
    }

    for (int a = 0; a < MP_ARENA_COUNT; a++) {
        const uint64_t bytes = plan->arena_bytes[a];
        uint64_t rounded;
        if (bytes == 0) continue;
        if (!mn_add_u64(&rounded, bytes, 2 * MP_ALIGN - 1) || rounded > SIZE_MAX) {
            mn_fmt(err, cap, "cpu: create: arena %d of %llu bytes is too large", a, (unsigned long long)bytes);
            cpu_destroy(cb);
            return MN_E_NOMEM;
        }
        rounded -= rounded % MP_ALIGN; /* room for the arena after aligning the start */
        cb->arena_base[a] = calloc(1, (size_t)rounded);
        if (!cb->arena_base[a]) {
            mn_fmt(err, cap, "cpu: create: out of memory allocating arena %d (%llu bytes)", a,
                   (unsigned long long)rounded);
            cpu_destroy(cb);
            return MN_E_NOMEM;
        }
        cb->arena[a] = (char *)cb->arena_base[a] + (MP_ALIGN - (uintptr_t)cb->arena_base[a] % MP_ALIGN) % MP_ALIGN;
        cb->clean[a] = true;
    }

    /* scratch for the rounded operands: the largest input j (j <
     * node_round_ins) of a flagged node in the order */
    uint64_t most[NODE_ROUND_INS_MAX] = {0};
    for (int32_t i = 0; i < p->norder; i++) {
        const node *n = &p->g->nodes[p->order[i]];
        if (node_round16(n) == MN_ROUND_NONE) continue;
        for (int j = 0; j < node_round_ins(n) && j < n->nin; j++) {
            const uint64_t b = (uint64_t)node_numel(&p->g->nodes[n->in[j]]) * rs;
            if (b > most[j]) most[j] = b;
        }
    }
    for (int j = 0; j < NODE_ROUND_INS_MAX; j++) {
        if (!most[j]) continue;
        if (most[j] > SIZE_MAX || !(cb->rounded[j] = malloc((size_t)most[j]))) {
            mn_fmt(err, cap, "cpu: create: out of memory for the fast contract's rounded operands (%llu bytes)",
                   (unsigned long long)most[j]);
            cpu_destroy(cb);
            return MN_E_NOMEM;
        }
    }

    for (int32_t id = 0; id < p->g->n; id++) {
        if (p->g->nodes[id].op != OP_CONST) continue;
        mn_status st = cpu_load_const(cb, id, err, cap);
        if (st != MN_OK) {
            cpu_destroy(cb);
            return st;
        }
    }
    *out = cb;
    return MN_OK;
}

/* Shared checks of write/read: the node has storage of exactly bytes. */
static mn_status cpu_io_slot(const cpu_backend *cb, int32_t id, size_t bytes, const char *what,
                             const mp_slot **s, char *err, size_t cap) {
    mn_status st = cpu_slot(cb, id, -1, 0, s, what, err, cap);
    if (st != MN_OK) return st;
    if ((uint64_t)bytes != (*s)->bytes) {
        char lab[160];
        mn_fmt(err, cap, "cpu: %s: %s holds %llu bytes, got %zu", what,
               cpu_node_label(lab, sizeof lab, cb->prog.g, id), (unsigned long long)(*s)->bytes, bytes);
        return MN_E_SHAPE;
    }
    return MN_OK;
}

static mn_status cpu_write(void *b, int32_t id, const void *src, size_t bytes, char *err, size_t cap) {
    cpu_backend *cb = b;
    const mp_slot *s;
    mn_status st = cpu_io_slot(cb, id, bytes, "write", &s, err, cap);
    if (st != MN_OK) return st;
    if (bytes) mn_copy(cpu_ptr(cb, s), src, bytes);
    if (bytes) cb->clean[s->arena] = false;
    return MN_OK;
}

static mn_status cpu_map_write(void *b, int32_t id, size_t bytes, void **ptr, char *err, size_t cap) {
    cpu_backend *cb = b;
    const mp_slot *s;
    *ptr = NULL;
    mn_status st = cpu_io_slot(cb, id, bytes, "write", &s, err, cap);
    if (st != MN_OK || !bytes) return st;
    cb->clean[s->arena] = false;
    *ptr = cpu_ptr(cb, s);
    return MN_OK;
}

static mn_status cpu_read(void *b, int32_t id, void *dst, size_t bytes, char *err, size_t cap) {
    const cpu_backend *cb = b;
    const mp_slot *s;
    mn_status st = cpu_io_slot(cb, id, bytes, "read", &s, err, cap);
    if (st != MN_OK) return st;
    if (bytes) mn_copy(dst, cpu_ptr(cb, s), bytes);
    return MN_OK;
}

static mn_status cpu_fill(void *b, int32_t id, uint32_t pattern, char *err, size_t cap) {
    cpu_backend *cb = b;
    const mp_slot *s;
    mn_status st = cpu_slot(cb, id, -1, 0, &s, "fill", err, cap);
    if (st != MN_OK) return st;
    unsigned char *p = cpu_ptr(cb, s);
    if (!p || !s->bytes || (pattern == 0 && cb->clean[s->arena])) return MN_OK;
    cb->clean[s->arena] = false;
    if (pattern == 0) {
        memset(p, 0, (size_t)s->bytes);
    } else {
        for (uint64_t i = 0; i + 4 <= s->bytes; i += 4) memcpy(p + i, &pattern, 4);
    }
    return MN_OK;
}

static mn_status cpu_execute(void *b, const int32_t *nodes, int32_t count, char *err, size_t cap) {
    cpu_backend *cb = b;
    for (int a = 0; a < MP_ARENA_COUNT; a++) cb->clean[a] = false;
    const mn_graph *g = cb->prog.g;
    for (int32_t k = 0; k < count; k++) {
        const int32_t id = nodes[k];
        const mp_slot *s;
        mn_status st = cpu_slot(cb, id, -1, 0, &s, "execute", err, cap);
        if (st != MN_OK) return st;
        const node *n = &g->nodes[id];
        if ((unsigned)n->op >= OP_COUNT || n->nin < 0 || n->nin > NODE_MAX_IN) {
            char lab[160];
            mn_fmt(err, cap, "cpu: execute: %s: bad op or input count", cpu_node_label(lab, sizeof lab, g, id));
            return MN_E_INVALID;
        }
        void *in[NODE_MAX_IN] = {0};
        for (int i = 0; i < n->nin; i++) {
            const mp_slot *si;
            st = cpu_slot(cb, n->in[i], id, i, &si, "execute", err, cap);
            if (st != MN_OK) return st;
            in[i] = cpu_ptr(cb, si);
        }
        const mn_round16 rnd = node_round16(n);
        for (int i = 0; rnd != MN_ROUND_NONE && i < node_round_ins(n) && i < n->nin; i++) {
            const int64_t cnt = node_numel(&g->nodes[n->in[i]]);
            if (cb->prog.f64) {
                const double *src = in[i];
                double *dst = cb->rounded[i];
                for (int64_t e = 0; e < cnt; e++) dst[e] = mn_round16_d(src[e], rnd);
            } else {
                const float *src = in[i];
                float *dst = cb->rounded[i];
                for (int64_t e = 0; e < cnt; e++) dst[e] = mn_round16_f(src[e], rnd);
            }
            in[i] = cb->rounded[i];
        }
        cb->kernels[n->op](g, n, cpu_ptr(cb, s), in);
    }
    return MN_OK;
}

const backend_vtable backend_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .write = cpu_write,
    .read = cpu_read,
    .fill = cpu_fill,
    .map_write = cpu_map_write,
    .execute = cpu_execute,
};
