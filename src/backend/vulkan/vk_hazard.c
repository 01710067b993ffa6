/* vk_hazard.c - the barrier planner (see vk_hazard.h).
 *
 * Two interval sets (bytes read, bytes written since the last barrier), each
 * a treap of disjoint, coalesced intervals ordered by (buffer, lo), nodes
 * taken from one pool. A barrier empties both sets at once by resetting the
 * pool, so every node is made once and dropped once: O(log) per access.
 *
 * Does not: call Vulkan, know what a buffer id stands for.
 */
#include "backend/vulkan/vk_hazard.h"

typedef struct hz_node {
    uint64_t lo, hi;
    uint32_t buf, prio;
    int32_t l, r; /* children, -1: none */
} hz_node;

typedef struct hz_pool {
    hz_node *n;
    int32_t used;
    uint32_t rng;
} hz_pool;

static bool key_less(uint32_t abuf, uint64_t alo, uint32_t bbuf, uint64_t blo) {
    return abuf < bbuf || (abuf == bbuf && alo < blo);
}

/* Splits t into the keys before (buf, lo) - or up to and including it when
 * incl - and the rest. */
static void split(hz_pool *p, int32_t t, uint32_t buf, uint64_t lo, bool incl, int32_t *l, int32_t *r) {
    if (t < 0) {
        *l = *r = -1;
        return;
    }
    hz_node *x = &p->n[t];
    bool left = incl ? !key_less(buf, lo, x->buf, x->lo) : key_less(x->buf, x->lo, buf, lo);
    if (left) {
        split(p, x->r, buf, lo, incl, &x->r, r);
        *l = t;
    } else {
        split(p, x->l, buf, lo, incl, l, &x->l);
        *r = t;
    }
}

/* Every key of a is before every key of b. */
static int32_t merge(hz_pool *p, int32_t a, int32_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    if (p->n[a].prio > p->n[b].prio) {
        p->n[a].r = merge(p, p->n[a].r, b);
        return a;
    }
    p->n[b].l = merge(p, a, p->n[b].l);
    return b;
}

static int32_t rightmost(const hz_pool *p, int32_t t) {
    if (t < 0) return -1;
    while (p->n[t].r >= 0) t = p->n[t].r;
    return t;
}

/* Does [lo, hi) of buf overlap an interval of the set? The intervals of one
 * buffer are disjoint and sorted, so the last one starting before hi has the
 * largest end among those that start before hi. */
static bool overlaps(const hz_pool *p, int32_t t, uint32_t buf, uint64_t lo, uint64_t hi) {
    int32_t best = -1;
    while (t >= 0) {
        if (key_less(p->n[t].buf, p->n[t].lo, buf, hi)) best = t, t = p->n[t].r;
        else t = p->n[t].l;
    }
    return best >= 0 && p->n[best].buf == buf && p->n[best].hi > lo;
}

static uint32_t next_prio(hz_pool *p) {
    p->rng ^= p->rng << 13, p->rng ^= p->rng >> 17, p->rng ^= p->rng << 5;
    return p->rng;
}

/* Adds [lo, hi) of buf, merged with every interval it overlaps or touches.
 * Fast paths (one walk): already covered; extends only the interval before
 * it or only the one after it (in place: the order of keys stays); touches
 * nothing (a plain treap insertion). Otherwise the touched intervals are cut
 * out with splits and replaced by their union. */
static void insert(hz_pool *p, int32_t *root, uint32_t buf, uint64_t lo, uint64_t hi) {
    int32_t pred = -1, succ = -1;
    for (int32_t t = *root; t >= 0;) {
        if (key_less(buf, lo, p->n[t].buf, p->n[t].lo)) succ = t, t = p->n[t].l;
        else pred = t, t = p->n[t].r;
    }
    hz_node *pv = pred >= 0 && p->n[pred].buf == buf && p->n[pred].hi >= lo ? &p->n[pred] : NULL;
    hz_node *sv = succ >= 0 && p->n[succ].buf == buf && p->n[succ].lo <= hi ? &p->n[succ] : NULL;
    if (pv && pv->hi >= hi) return;
    if (!sv && pv) {
        pv->hi = hi;
        return;
    }
    if (sv && !pv && sv->hi >= hi) {
        sv->lo = lo;
        return;
    }
    int32_t x = p->used++;
    p->n[x] = (hz_node){lo, hi, buf, next_prio(p), -1, -1};
    if (!sv && !pv) {
        int32_t *link = root;
        while (*link >= 0 && p->n[*link].prio > p->n[x].prio)
            link = key_less(buf, lo, p->n[*link].buf, p->n[*link].lo) ? &p->n[*link].l : &p->n[*link].r;
        split(p, *link, buf, lo, false, &p->n[x].l, &p->n[x].r);
        *link = x;
        return;
    }
    int32_t a, b, mid, c, drop;
    split(p, *root, buf, lo, false, &a, &b);
    if (pv) {
        lo = pv->lo;
        split(p, a, buf, lo, false, &a, &drop); /* drop = pred alone */
    }
    split(p, b, buf, hi, true, &mid, &c); /* mid: the intervals starting in [lo, hi] */
    int32_t last = rightmost(p, mid);
    if (last >= 0 && p->n[last].hi > hi) hi = p->n[last].hi;
    p->n[x].lo = lo, p->n[x].hi = hi;
    *root = merge(p, merge(p, a, x), c);
}

mn_status vk_hazard_plan(const vk_access *acc, const size_t *first, int32_t n, uint8_t *barrier, char *err,
                         size_t cap) {
    if (n <= 0) return MN_OK;
    for (int32_t i = 0; i < n; i++)
        if (first[i + 1] < first[i]) {
            mn_fmt(err, cap, "vulkan hazards: access list of dispatch %d ends before it starts", i);
            return MN_E_INVALID;
        }
    size_t total = first[n] - first[0];
    if (total >= (size_t)INT32_MAX) {
        mn_fmt(err, cap, "vulkan hazards: %zu accesses, more than the planner takes", total);
        return MN_E_UNSUPPORTED;
    }
    hz_pool p = {malloc((total + 1) * sizeof(hz_node)), 0, 2463534242u};
    if (!p.n) {
        mn_fmt(err, cap, "vulkan hazards: out of memory for %zu accesses", total);
        return MN_E_NOMEM;
    }
    int32_t rd = -1, wr = -1;
    for (int32_t i = 0; i < n; i++) {
        uint8_t kinds = 0;
        for (size_t k = first[i]; k < first[i + 1]; k++) {
            const vk_access *a = &acc[k];
            if (a->lo >= a->hi) continue;
            if (overlaps(&p, wr, a->buf, a->lo, a->hi)) kinds |= a->write ? VK_HAZARD_WAW : VK_HAZARD_RAW;
            if (a->write && overlaps(&p, rd, a->buf, a->lo, a->hi)) kinds |= VK_HAZARD_WAR;
        }
        barrier[i] = kinds;
        if (kinds) p.used = 0, rd = wr = -1;
        for (size_t k = first[i]; k < first[i + 1]; k++) {
            const vk_access *a = &acc[k];
            if (a->lo < a->hi) insert(&p, a->write ? &wr : &rd, a->buf, a->lo, a->hi);
        }
    }
    free(p.n);
    return MN_OK;
}
