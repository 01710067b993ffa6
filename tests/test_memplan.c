/* test_memplan.c - property test of the memory planner on random graphs.
 *
 * For each random graph (elementwise chains, broadcasting, matmul, views,
 * reductions, softmax; trained with AdamW for two steps):
 *  1. no two work tensors that are live at the same time overlap in memory
 *     (liveness is recomputed here from the schedule, independently of the
 *     planner; an in-place pair may touch at the node where one dies and
 *     the other is born);
 *  2. outputs, loss and parameters match a planner-less run bit for bit;
 *  3. the planned peak never exceeds the planner-less sum (both aligned);
 *  4. plans of the same graph with chunking (memplan_options.chunk_bytes, the
 *     tightest chunk and twice it) keep every tensor inside one chunk, still
 *     without overlaps; with a chunk smaller than the largest tensors (64
 *     and 96 bytes) those start at a chunk boundary (of a power-of-two
 *     chunk: 96 becomes 64) and span whole chunks, every other tensor
 *     stays inside one, still without overlaps;
 *  5. the memory report is true (issue 8): the peak is the sum of the
 *     arenas; each arena's tensor_bytes (what memplan_dump and
 *     MEGANEURA_DUMP=memplan print beside the padding) is, recomputed here,
 *     the sum of its pinned tensors' aligned sizes, or for the work arena
 *     the largest total of aligned blocks live at one position (the union
 *     of their ranges); pinned arenas without chunks have no padding; the
 *     planner-less plan's peak is exactly sum_bytes (every tensor aligned),
 *     and chunked plans keep the same tensor bytes, adding only padding.
 * And the first-fit structure itself (mp_freeset, a treap of free
 * intervals): random takes and releases place every block exactly where a
 * linear first-fit scan over the live blocks does (the planner's placements
 * and peaks are unchanged from that scan); chunked takes against a scan
 * that skips starts straddling a chunk boundary (and, for blocks larger
 * than a chunk, starts off a boundary). Build times are measured by
 * bench/bench_build.c, not here.
 */
#include <string.h>

#include "harness.h"
#include "memplan/memplan.h"
#include "session/session.h"

#define GRAPHS 150

static unsigned rnd(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

typedef struct pool {
    mn_tensor t[128];
    int n;
} pool;

/* Random tensor of the pool whose shape is [4,8] (all but views/reductions). */
static mn_tensor pick(const mn_graph *g, const pool *p, unsigned *s, int rank0, int64_t d0) {
    for (int tries = 0; tries < 32; tries++) {
        mn_tensor t = p->t[rnd(s) % (unsigned)p->n];
        int r;
        int64_t sh[MN_MAX_RANK];
        mn_tensor_shape(g, t, &r, sh);
        if (r == rank0 && sh[0] == d0) return t;
    }
    return p->t[0];
}

static mn_graph *random_graph(unsigned seed, mn_tensor *loss_out) {
    unsigned s = seed;
    mn_graph *g;
    mn_graph_create(&g);
    pool p = {{0}, 0};
    mn_tensor x, w, v, bias;
    mn_init un = {MN_INIT_UNIFORM, -0.5f, 0.5f};
    mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){4, 8});
    mn_graph_param(g, &w, "w", 2, (int64_t[]){8, 8}, un);
    mn_graph_param(g, &v, "v", 2, (int64_t[]){4, 8}, un);
    mn_graph_param(g, &bias, "bias", 1, (int64_t[]){8}, un);
    p.t[p.n++] = x;
    p.t[p.n++] = v;
    int nops = 8 + (int)(rnd(&s) % 24);
    for (int i = 0; i < nops; i++) {
        mn_tensor a = pick(g, &p, &s, 2, 4), b = pick(g, &p, &s, 2, 4), y = MN_NONE, t1, t2;
        switch (rnd(&s) % 12) {
        case 0: mn_add(g, &y, a, b); break;
        case 1: mn_mul(g, &y, a, b); break;
        case 2: mn_sub(g, &y, a, bias); break; /* broadcast */
        case 3: mn_matmul(g, &y, a, w); break;
        case 4: mn_tanh(g, &y, a); break;
        case 5: mn_relu(g, &y, a); break;
        case 6: mn_scale(g, &y, a, 0.5f); break;
        case 7: /* view round trip */
            mn_reshape(g, &t1, a, 2, (int64_t[]){8, 4});
            mn_transpose(g, &t2, t1, 0, 1);
            mn_reshape(g, &y, t2, 2, (int64_t[]){4, 8});
            break;
        case 8: /* reduce and broadcast back */
            mn_sum(g, &t1, a, 1, true);
            mn_add(g, &y, b, t1);
            break;
        case 9: mn_softmax(g, &y, a); break;
        case 10: mn_sigmoid(g, &y, a); break;
        case 11: mn_mul(g, &y, a, a); break;
        }
        if (y != MN_NONE && p.n < 128) p.t[p.n++] = y;
    }
    /* loss: mean of squares of the last few tensors */
    mn_tensor acc = MN_NONE;
    for (int i = p.n - 1; i >= 0 && i >= p.n - 3; i--) {
        mn_tensor sq, m;
        mn_mul(g, &sq, p.t[i], p.t[i]);
        mn_mean(g, &m, sq, MN_ALL_AXES, false);
        if (acc == MN_NONE) acc = m;
        else mn_add(g, &acc, acc, m);
    }
    mn_graph_output(g, p.t[p.n - 1], "out");
    mn_graph_loss(g, acc);
    *loss_out = acc;
    return g;
}

/* Overlap check with liveness computed from the schedule. */
static void check_no_overlap(const mn_session *s, const memplan *mp, unsigned seed) {
    const mn_graph *g = s->g;
    int32_t n = g->n, *first = malloc((size_t)n * 4), *last = malloc((size_t)n * 4);
    for (int32_t i = 0; i < n; i++) first[i] = last[i] = -1;
    for (int32_t t = 0; t < s->sched.n; t++) {
        int32_t id = s->sched.order[t], r = memplan_root(g, id);
        if (first[r] < 0) first[r] = t;
        if (last[r] < t) last[r] = t;
        for (int k = 0; k < g->nodes[id].nin; k++) {
            int32_t ri = memplan_root(g, g->nodes[id].in[k]);
            if (last[ri] < t) last[ri] = t;
        }
    }
    int bad = 0;
    for (int32_t a = 0; a < n; a++) {
        const mp_slot *sa = &mp->slots[a];
        if (sa->arena != MP_ARENA_WORK || memplan_root(g, a) != a) continue;
        CHECK_MSG(sa->offset + sa->bytes <= mp->arena_bytes[MP_ARENA_WORK], "seed %u: %%%d beyond the arena", seed, a);
        for (int32_t b = a + 1; b < n; b++) {
            const mp_slot *sb = &mp->slots[b];
            if (sb->arena != MP_ARENA_WORK || memplan_root(g, b) != b) continue;
            bool mem = sa->offset < sb->offset + sb->bytes && sb->offset < sa->offset + sa->bytes;
            if (!mem) continue;
            bool time = first[a] <= last[b] && first[b] <= last[a];
            /* in place: b is born at the node where a dies, and reads a as input 0 */
            bool inplace = first[b] == last[a] && memplan_root(g, g->nodes[b].in[0]) == a;
            if (time && !inplace && bad++ < 3)
                th_fail(__FILE__, __LINE__, "seed %u: %%%d [%d,%d] and %%%d [%d,%d] overlap in memory while live",
                        seed, a, first[a], last[a], b, first[b], last[b]);
        }
    }
    if (!bad) th_passed++;
    free(first);
    free(last);
}

static int cmp_range(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* The report of mp (a plan of s's graph and schedule): tensor bytes per
 * arena recomputed from the slots and the schedule; padding = the rest. */
static void check_report(const mn_session *s, const memplan *mp, bool reuse, unsigned seed) {
    const mn_graph *g = s->g;
    const int32_t n = g->n;
    int32_t *first = malloc((size_t)n * 4), *last = malloc((size_t)n * 4);
    uint64_t *rg = malloc((size_t)n * 2 * sizeof *rg), pinned[MP_ARENA_COUNT] = {0}, all_work = 0, most = 0;
    if (!first || !last || !rg) {
        free(first), free(last), free(rg);
        return;
    }
    for (int32_t i = 0; i < n; i++) first[i] = last[i] = -1;
    for (int32_t t = 0; t < s->sched.n; t++) {
        int32_t id = s->sched.order[t], r = memplan_root(g, id);
        if (first[r] < 0) first[r] = t;
        if (last[r] < t) last[r] = t;
        for (int k = 0; k < g->nodes[id].nin; k++) {
            int32_t ri = memplan_root(g, g->nodes[id].in[k]);
            if (last[ri] < t) last[ri] = t;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        const mp_slot *sl = &mp->slots[i];
        if (sl->arena < 0 || memplan_root(g, i) != i) continue;
        const uint64_t al = (sl->bytes + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN;
        if (sl->arena == MP_ARENA_WORK) all_work += al;
        else pinned[sl->arena] += al;
    }
    /* the work arena at its fullest: the union of the live blocks' ranges */
    for (int32_t t = 0; t < s->sched.n; t++) {
        int nr = 0;
        for (int32_t i = 0; i < n; i++) {
            const mp_slot *sl = &mp->slots[i];
            if (sl->arena != MP_ARENA_WORK || memplan_root(g, i) != i || first[i] > t || last[i] < t) continue;
            rg[2 * nr] = sl->offset;
            rg[2 * nr + 1] = sl->offset + (sl->bytes + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN;
            nr++;
        }
        qsort(rg, (size_t)nr, 2 * sizeof *rg, cmp_range);
        uint64_t len = 0, hi = 0;
        for (int j = 0; j < nr; j++) {
            const uint64_t lo = rg[2 * j] > hi ? rg[2 * j] : hi;
            if (rg[2 * j + 1] > lo) len += rg[2 * j + 1] - lo;
            if (rg[2 * j + 1] > hi) hi = rg[2 * j + 1];
        }
        if (len > most) most = len;
    }
    uint64_t peak = 0, tensors = 0;
    bool ok = true;
    for (int a = 0; a < MP_ARENA_COUNT; a++) {
        peak += mp->arena_bytes[a];
        tensors += mp->tensor_bytes[a];
        ok = ok && mp->tensor_bytes[a] <= mp->arena_bytes[a];
        if (a != MP_ARENA_WORK) ok = ok && mp->tensor_bytes[a] == pinned[a] && (mp->chunk_bytes || mp->arena_bytes[a] == pinned[a]);
    }
    ok = ok && mp->tensor_bytes[MP_ARENA_WORK] == (reuse ? most : all_work) && memplan_peak(mp) == peak &&
         tensors <= mp->sum_bytes && pinned[0] + pinned[1] + pinned[2] + all_work == mp->sum_bytes;
    CHECK_MSG(ok, "seed %u: report: work tensors %llu (recomputed %llu), sum %llu, peak %llu", seed,
              (unsigned long long)mp->tensor_bytes[MP_ARENA_WORK], (unsigned long long)(reuse ? most : all_work),
              (unsigned long long)mp->sum_bytes, (unsigned long long)peak);
    free(first), free(last), free(rg);
}

/* ---- the free-interval set against a linear first-fit scan ------------------- */

typedef struct ref_block {
    uint64_t off, size;
} ref_block;

/* The lowest offset where size fits between live blocks (sorted by offset). */
static uint64_t ref_first_fit(const ref_block *b, int n, uint64_t size, int *pos) {
    uint64_t at = 0;
    int i = 0;
    for (; i < n; i++) {
        if (b[i].off >= at + size) break;
        if (b[i].off + b[i].size > at) at = b[i].off + b[i].size;
    }
    *pos = i;
    return at;
}

/* The same, with [at, at + size) inside one chunk. */
static uint64_t ref_first_fit_chunked(const ref_block *b, int n, uint64_t size, uint64_t chunk, int *pos) {
    uint64_t at = 0;
    int i = 0;
    for (;; i++) {
        bool skip = size > chunk ? at % chunk != 0 : at % chunk + size > chunk;
        uint64_t p = skip ? (at / chunk + 1) * chunk : at;
        if (i == n || b[i].off >= p + size) {
            at = p;
            break;
        }
        if (b[i].off + b[i].size > at) at = b[i].off + b[i].size;
    }
    /* pos: where the block goes in offset order */
    for (*pos = 0; *pos < n && b[*pos].off < at; (*pos)++) {}
    return at;
}

static void test_freeset_chunked(void) {
    enum { OPS = 20000, MAXLIVE = 300 };
    static ref_block live[MAXLIVE];
    int nlive = 0, bad = 0;
    unsigned s = 777;
    const uint64_t chunk = 1024;
    mp_freeset fs;
    CHECK_OK(mp_fs_init(&fs), "init");
    for (int op = 0; op < OPS; op++) {
        bool take = nlive == 0 || (nlive < MAXLIVE && rnd(&s) % 100 < 55);
        if (take) {
            /* up to the whole chunk; one in 16 spans several */
            uint64_t size = rnd(&s) % 16 ? 64 * (1 + rnd(&s) % 16) : 64 * (17 + rnd(&s) % 48);
            int pos;
            uint64_t want = ref_first_fit_chunked(live, nlive, size, chunk, &pos), got = 1;
            CHECK_OK(mp_fs_alloc_chunked(&fs, size, chunk, &got), "alloc");
            if (got != want && bad++ < 5) th_fail(__FILE__, __LINE__, "op %d: chunked take %llu at %llu, want %llu",
                                                  op, (unsigned long long)size, (unsigned long long)got,
                                                  (unsigned long long)want);
            if ((size > chunk ? want % chunk != 0 : want % chunk + size > chunk) && bad++ < 5)
                th_fail(__FILE__, __LINE__, "op %d: straddles", op);
            memmove(&live[pos + 1], &live[pos], (size_t)(nlive - pos) * sizeof *live);
            live[pos] = (ref_block){want, size};
            nlive++;
        } else {
            int i = (int)(rnd(&s) % (unsigned)nlive);
            CHECK_OK(mp_fs_release(&fs, live[i].off, live[i].size), "release");
            memmove(&live[i], &live[i + 1], (size_t)(nlive - i - 1) * sizeof *live);
            nlive--;
        }
    }
    while (nlive > 0) {
        nlive--;
        CHECK_OK(mp_fs_release(&fs, live[nlive].off, live[nlive].size), "release");
    }
    CHECK(fs.root >= 0 && fs.a[fs.root].off == 0 && fs.a[fs.root].l < 0 && fs.a[fs.root].r < 0);
    if (!bad) th_passed++;
    mp_fs_destroy(&fs);
}

static int paged_plans; /* plans with a chunk below the largest tensor */

/* Re-plans s's graph with chunks: every tensor inside one chunk (or, when
 * larger, from a chunk boundary), no overlap. */
static void check_chunked(const mn_session *s, unsigned seed) {
    const mn_graph *g = s->g;
    uint8_t *live = malloc((size_t)g->n);
    uint64_t most = 0;
    for (int32_t i = 0; i < g->n; i++) {
        live[i] = s->plan.slots[i].arena >= 0;
        uint64_t b = (s->plan.slots[i].bytes + MP_ALIGN - 1) / MP_ALIGN * MP_ALIGN;
        if (live[i] && b > most) most = b;
    }
    uint64_t tight = (most + 255) / 256 * 256;
    /* the tightest chunk and twice it; then 64 and 96 bytes, below the
     * largest tensors (paged: 96 becomes the power of two 64) */
    for (int k = 0; k < 5; k++) {
        memplan mp;
        char err[512] = "";
        memplan_options mo = {4, true, k == 2 ? tight * 2 : k == 3 ? 64 : k == 4 ? 96 : tight, NULL, NULL, 0};
        if (k == 1) mo.reuse = false;
        if (k >= 3 && most <= 64) break;
        if (k >= 3) paged_plans++;
        mn_status st = memplan_build(&mp, g, s->sched.order, s->sched.n, live, &mo, err, sizeof err);
        CHECK_OK(st, err);
        if (st) break;
        const uint64_t c = mp.chunk_bytes;
        CHECK_MSG(c == (k >= 3 ? 64 : mo.chunk_bytes), "seed %u: chunk %llu for option %llu", seed,
                  (unsigned long long)c, (unsigned long long)mo.chunk_bytes);
        int bad = 0;
        for (int32_t i = 0; i < g->n; i++) {
            const mp_slot *sl = &mp.slots[i];
            if (sl->arena < 0) continue;
            bool paged = memplan_pages(&mp, i) > 0;
            if (paged != (sl->bytes > c) || (paged ? sl->offset % c != 0 : sl->offset % c + sl->bytes > c)) {
                if (bad++ < 3)
                    th_fail(__FILE__, __LINE__, "seed %u: %%%d at %llu +%llu %s a %llu-byte chunk", seed, i,
                            (unsigned long long)sl->offset, (unsigned long long)sl->bytes,
                            paged ? "is paged but does not start" : "straddles", (unsigned long long)c);
            }
        }
        if (!bad) th_passed++;
        check_no_overlap(s, &mp, seed);
        check_report(s, &mp, mo.reuse, seed);
        for (int a = 0; a < MP_ARENA_COUNT; a++) /* chunks add padding only */
            CHECK_MSG(mp.tensor_bytes[a] == (mo.reuse ? s->plan.tensor_bytes[a] : mp.tensor_bytes[a]) &&
                          mp.sum_bytes == s->plan.sum_bytes,
                      "seed %u: chunks of %llu changed the tensor bytes of arena %d", seed,
                      (unsigned long long)mo.chunk_bytes, a);
        memplan_free(&mp);
    }
    free(live);
}

static void test_freeset(void) {
    enum { OPS = 20000, MAXLIVE = 400 };
    static ref_block live[MAXLIVE];
    int nlive = 0, bad = 0;
    uint64_t high = 0;
    unsigned s = 12345;
    mp_freeset fs;
    CHECK_OK(mp_fs_init(&fs), "init");
    for (int op = 0; op < OPS; op++) {
        bool take = nlive == 0 || (nlive < MAXLIVE && rnd(&s) % 100 < 55);
        if (take) {
            /* sizes from one alignment unit to 64 units, small ones common */
            uint64_t size = 64 * (1 + (rnd(&s) % 4 == 0 ? rnd(&s) % 64 : rnd(&s) % 4));
            int pos;
            uint64_t want = ref_first_fit(live, nlive, size, &pos), got = 1;
            mp_fs_alloc(&fs, size, &got);
            if (got != want && bad++ < 5) th_fail(__FILE__, __LINE__, "op %d: take %llu at %llu, first fit %llu", op,
                                                  (unsigned long long)size, (unsigned long long)got,
                                                  (unsigned long long)want);
            memmove(&live[pos + 1], &live[pos], (size_t)(nlive - pos) * sizeof *live);
            live[pos] = (ref_block){want, size};
            nlive++;
            if (want + size > high) high = want + size;
        } else {
            int i = (int)(rnd(&s) % (unsigned)nlive);
            CHECK_OK(mp_fs_release(&fs, live[i].off, live[i].size), "release");
            memmove(&live[i], &live[i + 1], (size_t)(nlive - i - 1) * sizeof *live);
            nlive--;
        }
        if (fs.high != high && bad++ < 5) th_fail(__FILE__, __LINE__, "op %d: high %llu, want %llu", op,
                                                  (unsigned long long)fs.high, (unsigned long long)high);
    }
    /* everything released: one interval from 0 to infinity again */
    while (nlive > 0) {
        nlive--;
        CHECK_OK(mp_fs_release(&fs, live[nlive].off, live[nlive].size), "release");
    }
    CHECK(fs.root >= 0 && fs.a[fs.root].off == 0 && fs.a[fs.root].l < 0 && fs.a[fs.root].r < 0);
    uint64_t off = 1;
    mp_fs_alloc(&fs, 1u << 20, &off);
    CHECK(off == 0);
    if (!bad) th_passed++;
    mp_fs_destroy(&fs);
}

int main(void) {
    test_freeset();
    test_freeset_chunked();
    long reused_total = 0, sum_total = 0;
    for (unsigned seed = 1; seed <= GRAPHS; seed++) {
        mn_tensor loss;
        mn_graph *g = random_graph(seed, &loss);
        mn_session_options o = mn_session_default_options();
        o.mode = MN_MODE_TRAINING;
        o.seed = seed;
        mn_session *sp = NULL, *su = NULL;
        session_internal_options unplanned = {.no_reuse = true};
        CHECK_OK(session_create_ex(&sp, g, &o, NULL), mn_session_error(sp));
        CHECK_OK(session_create_ex(&su, g, &o, &unplanned), mn_session_error(su));
        if (!sp || !su || sp->dead || su->dead) {
            fprintf(stderr, "seed %u: %s\n", seed, mn_graph_error(g));
            mn_session_destroy(sp);
            mn_session_destroy(su);
            mn_graph_destroy(g);
            continue;
        }
        check_no_overlap(sp, &sp->plan, seed);
        check_report(sp, &sp->plan, true, seed);
        check_report(su, &su->plan, false, seed);
        /* planner-less: every tensor its own aligned range, so the peak is the sum */
        CHECK_MSG(memplan_peak(&su->plan) == su->plan.sum_bytes && sp->plan.sum_bytes == su->plan.sum_bytes,
                  "seed %u: unplanned peak %llu, sum %llu (planned sum %llu)", seed,
                  (unsigned long long)memplan_peak(&su->plan), (unsigned long long)su->plan.sum_bytes,
                  (unsigned long long)sp->plan.sum_bytes);
        check_chunked(sp, seed);
        float xin[32];
        unsigned s = seed * 7;
        for (int i = 0; i < 32; i++) xin[i] = (float)(rnd(&s) % 1000) / 500.0f - 1.0f;
        for (int step = 0; step < 2; step++) {
            CHECK_OK(mn_session_set_input(sp, "x", xin, sizeof xin), mn_session_error(sp));
            CHECK_OK(mn_session_set_input(su, "x", xin, sizeof xin), mn_session_error(su));
            CHECK_OK(mn_session_step(sp), mn_session_error(sp));
            CHECK_OK(mn_session_step(su), mn_session_error(su));
        }
        float lp, lu, op[32], ou[32], wp[64], wu[64];
        mn_session_loss(sp, &lp);
        mn_session_loss(su, &lu);
        CHECK_MSG(memcmp(&lp, &lu, 4) == 0, "seed %u: loss %.9g planned vs %.9g unplanned", seed, lp, lu);
        CHECK_OK(mn_session_output(sp, "out", op, sizeof op), mn_session_error(sp));
        CHECK_OK(mn_session_output(su, "out", ou, sizeof ou), mn_session_error(su));
        CHECK_MSG(memcmp(op, ou, sizeof op) == 0, "seed %u: outputs differ", seed);
        mn_session_get_param(sp, "w", wp, 64);
        mn_session_get_param(su, "w", wu, 64);
        CHECK_MSG(memcmp(wp, wu, sizeof wp) == 0, "seed %u: parameters differ after training", seed);
        size_t peak, sum;
        mn_session_memory(sp, &peak, &sum);
        CHECK(peak <= sum);
        reused_total += (long)sp->plan.arena_bytes[MP_ARENA_WORK];
        sum_total += (long)su->plan.arena_bytes[MP_ARENA_WORK];
        mn_session_destroy(sp);
        mn_session_destroy(su);
        mn_graph_destroy(g);
    }
    printf("work arenas over %d graphs: planned %ld bytes, unplanned %ld bytes (%.1f%%)\n", GRAPHS, reused_total,
           sum_total, 100.0 * (double)reused_total / (double)sum_total);
    CHECK(reused_total < sum_total);
    printf("plans with tensors larger than a chunk: %d\n", paged_plans);
    CHECK(paged_plans > GRAPHS / 2);
    return th_finish("test_memplan");
}
