/* dist.c - data-parallel training steps (mn_session_options.dist): the step
 * split at the all-reduce point, gradient buckets, the communication thread.
 *
 * The set that is reduced is "the gradient tensors of the trained
 * parameters": the distinct storage roots of session_grad_of(param) over the
 * parameters that have a gradient (views followed to their root, so a
 * gradient that is a reshape of another node, or several parameters whose
 * gradients are one tensor, is read once). A root that is a source other
 * than an input (a constant, a parameter) holds the same bits on every rank
 * and is left out. The roots are flagged NODE_F_SYNC before kernels are
 * planned, so none is folded into another kernel: each has storage the host
 * can read and rewrite between the backward pass and the updates.
 *
 * The step order (sched.order) is split at `split`, the first node created
 * by the optimizer stage (NODE_F_OPTIM: sums of squares, the step gate,
 * updates, gated batch-norm updates): order[0, split) is the forward and
 * backward pass, order[split, n) the update part. Every gradient root lies
 * before the split (checked). Roots are sorted by their position in the
 * order, i.e. by when the backward pass finishes them (the last layers'
 * first), and cut into buckets of about mn_dist.bucket_bytes (at most
 * DIST_MAX_BUCKETS: larger buckets for larger models; a tensor larger than a
 * bucket is a bucket of its own). A step then executes the order up to the
 * last root of bucket 0, copies bucket 0 to the host and posts it to the
 * communication thread, executes up to the last root of bucket 1, ... and
 * finally the rest of the backward pass. The thread calls sum() on each
 * bucket in posting order and divides by the rank count; meanwhile the
 * caller's thread executes the next part of the backward pass (on the CPU
 * backend it computes the next kernels; on Vulkan it waits for the device,
 * whose next part runs while the bucket crosses the network). What does not
 * overlap: the copy of each bucket to the host (the caller's thread), the
 * last bucket's sum() (nothing is left to compute), the write-back and the
 * update part. Each part is its own node list, so the Vulkan backend records
 * it once (DIST_MAX_BUCKETS + 2 lists) and replays it.
 *
 * The loss rides in the last bucket (its last float): every rank's step
 * gate, run in the update part, then sees the same gradients and the same
 * loss and makes the same decision (skip, clip coefficient).
 *
 * A flat gradient region (a multi-tensor optimizer) would be one root: one
 * bucket per region, fewer and larger sum() calls, no other change here.
 *
 * Does not: talk to any transport (the sum() callback does), shard data
 * (the caller feeds each rank its shard).
 */
#include <math.h>
#include <pthread.h>
#include <time.h>

#include "session/session.h"

#define DIST_DEFAULT_BUCKET ((size_t)4 << 20)
#define DIST_MAX_BUCKETS 32

typedef struct dist_grad {
    int32_t node; /* storage root of a gradient */
    int32_t pos;  /* its position in sched.order */
    size_t off;   /* first float in the host buffer */
    size_t n;     /* floats */
} dist_grad;

typedef struct dist_bucket {
    int g0, g1;   /* grads[g0, g1) */
    int32_t end;  /* order position after its last root */
    size_t off, n; /* host floats (the last bucket also holds the loss) */
} dist_bucket;

struct session_dist {
    mn_dist d;
    int32_t split;
    dist_grad *grads;
    int ngrads;
    dist_bucket *buckets;
    int nbuckets;
    float *host; /* every gradient, then the loss */
    size_t total;
    /* the communication thread */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int posted, done; /* buckets of this step handed over / finished */
    bool quit;
    bool failed;
    char err[512];
    double sum_s; /* written by the thread under mu */
    /* statistics (caller's thread) */
    int64_t steps;
    double wait_s, copy_s;
};

static double now_s(void) { return mn_now_us() * 1e-6; }

static int32_t storage_root(const mn_graph *g, int32_t id) {
    while (op_has(g->nodes[id].op, OPF_VIEW)) id = g->nodes[id].in[0];
    return id;
}

static bool is_reduced_root(const mn_graph *g, int32_t r) {
    const node *n = &g->nodes[r];
    return !op_has(n->op, OPF_SOURCE) || n->op == OP_INPUT;
}

mn_status session_dist_mark(mn_session *s) {
    const mn_dist *d = s->opt.dist;
    if (!d || s->opt.mode != MN_MODE_TRAINING) return MN_OK;
    mn_graph *g = s->g;
    for (int32_t i = 0; i < s->nuser; i++) {
        const int32_t gr = session_grad_of(s, i);
        if (g->nodes[i].op != OP_PARAM || gr == MN_NONE) continue;
        const int32_t r = storage_root(g, gr);
        if (is_reduced_root(g, r)) g->nodes[r].flags |= NODE_F_SYNC;
    }
    return MN_OK;
}

mn_status session_dist_validate(mn_session *s, char *err, size_t cap) {
    const mn_dist *d = s->opt.dist;
    if (!d) return MN_OK;
    if (s->opt.mode != MN_MODE_TRAINING) {
        mn_fmt(err, cap, "session: dist (data-parallel training) needs a training session");
        return MN_E_INVALID;
    }
    if (d->size < 1 || d->rank < 0 || d->rank >= d->size) {
        mn_fmt(err, cap, "session: dist: rank %d of size %d (want 0 <= rank < size)", d->rank, d->size);
        return MN_E_INVALID;
    }
    if (d->size > 1 && !d->sum) {
        mn_fmt(err, cap, "session: dist: size %d but no sum() callback", d->size);
        return MN_E_INVALID;
    }
    return MN_OK;
}

static void *comm_main(void *arg) {
    session_dist *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->quit && x->done == x->posted) pthread_cond_wait(&x->cv, &x->mu);
        if (x->quit) break;
        const int k = x->done;
        const bool failed = x->failed;
        pthread_mutex_unlock(&x->mu);
        char err[sizeof x->err] = "";
        int rc = 0;
        double t = now_s();
        if (!failed) {
            const dist_bucket *b = &x->buckets[k];
            float *v = x->host + b->off;
            rc = x->d.sum(x->d.user, v, b->n, err, sizeof err);
            if (!rc) {
                const float ranks = (float)x->d.size;
                for (size_t i = 0; i < b->n; i++) v[i] /= ranks;
            }
        }
        t = now_s() - t;
        pthread_mutex_lock(&x->mu);
        x->sum_s += t;
        if (rc && !x->failed) {
            x->failed = true;
            mn_fmt(x->err, sizeof x->err, "all-reduce of bucket %d/%d (%zu floats): %s", k + 1, x->nbuckets,
                   x->buckets[k].n, err[0] ? err : "sum() failed without a message");
        }
        x->done++;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

static int cmp_pos(const void *a, const void *b) {
    const dist_grad *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

void session_dist_free(session_dist *x) {
    if (!x) return;
    if (x->started) {
        pthread_mutex_lock(&x->mu);
        x->quit = true;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->thread, NULL);
        pthread_mutex_destroy(&x->mu);
        pthread_cond_destroy(&x->cv);
    }
    free(x->grads);
    free(x->buckets);
    free(x->host);
    free(x);
}

/* FNV-1a over the step's shape: what every rank must agree on. */
static uint32_t fnv(uint32_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ (uint32_t)((v >> (8 * i)) & 0xff)) * 16777619u;
    return h;
}

mn_status session_dist_build(mn_session *s) {
    const mn_dist *d = s->opt.dist;
    if (!d || d->size <= 1) return MN_OK;
    mn_graph *g = s->g;
    session_dist *x = calloc(1, sizeof *x);
    if (!x) return MN_E_NOMEM;
    s->dist = x;
    x->d = *d;
    const int32_t n = s->sched.n;
    const int32_t *order = s->sched.order;
    int32_t *pos = malloc((size_t)g->n * sizeof *pos);
    x->grads = malloc(((size_t)s->nuser + 1) * sizeof *x->grads);
    if (!pos || !x->grads) {
        free(pos);
        mn_fmt(s->err, sizeof s->err, "session: out of memory");
        return MN_E_NOMEM;
    }
    for (int32_t i = 0; i < g->n; i++) pos[i] = -1;
    x->split = n;
    for (int32_t t = 0; t < n; t++) {
        pos[order[t]] = t;
        const int32_t kr = s->kernels.root ? s->kernels.root[order[t]] : order[t];
        if (x->split == n && ((g->nodes[order[t]].flags | g->nodes[kr].flags) & NODE_F_OPTIM)) x->split = t;
    }
    for (int32_t t = x->split; t < n; t++) {
        const int32_t kr = s->kernels.root ? s->kernels.root[order[t]] : order[t];
        if (!((g->nodes[order[t]].flags | g->nodes[kr].flags) & NODE_F_OPTIM)) {
            free(pos);
            mn_fmt(s->err, sizeof s->err, "session: dist: node %d (%s) of the backward pass is scheduled after the "
                   "first update node: cannot split the step at the all-reduce", order[t],
                   op_table[g->nodes[order[t]].op].name);
            return MN_E_UNSUPPORTED;
        }
    }
    for (int32_t r = 0; r < g->n; r++) {
        if (!(g->nodes[r].flags & NODE_F_SYNC)) continue;
        if (pos[r] < 0 || pos[r] >= x->split) {
            mn_fmt(s->err, sizeof s->err, "session: dist: gradient node %d (%s) is not computed before the "
                   "updates (position %d, updates from %d)", r, op_table[g->nodes[r].op].name, pos[r], x->split);
            free(pos);
            return MN_E_UNSUPPORTED;
        }
        x->grads[x->ngrads++] = (dist_grad){r, pos[r], 0, (size_t)node_numel(&g->nodes[r])};
    }
    free(pos);
    qsort(x->grads, (size_t)x->ngrads, sizeof *x->grads, cmp_pos);
    size_t total = 0;
    for (int i = 0; i < x->ngrads; i++) x->grads[i].off = total, total += x->grads[i].n;
    /* bucket size: the option, raised so that at most DIST_MAX_BUCKETS are cut */
    size_t per = (d->bucket_bytes ? d->bucket_bytes : DIST_DEFAULT_BUCKET) / sizeof(float);
    if (per < 1) per = 1;
    if (total / per + 1 > DIST_MAX_BUCKETS) per = total / (DIST_MAX_BUCKETS - 1) + 1;
    x->buckets = calloc(DIST_MAX_BUCKETS + 1, sizeof *x->buckets);
    x->total = total + 1; /* + the loss */
    x->host = malloc(x->total * sizeof *x->host);
    if (!x->buckets || !x->host) {
        mn_fmt(s->err, sizeof s->err, "session: dist: out of memory for %zu host gradient values", x->total);
        return MN_E_NOMEM;
    }
    /* greedy cut in order of production; a bucket's whole tensors may stay
     * below half of `per`, so the count is checked and `per` doubled */
    for (;;) {
        x->nbuckets = 0;
        for (int i = 0; i < x->ngrads && x->nbuckets <= DIST_MAX_BUCKETS;) {
            dist_bucket *b = &x->buckets[x->nbuckets++];
            b->g0 = i;
            b->off = x->grads[i].off;
            size_t fl = 0;
            while (i < x->ngrads && (fl == 0 || fl + x->grads[i].n <= per)) fl += x->grads[i++].n;
            b->g1 = i;
            b->n = fl;
            b->end = x->grads[i - 1].pos + 1;
        }
        if (x->nbuckets <= DIST_MAX_BUCKETS) break;
        per *= 2;
    }
    if (!x->nbuckets) { /* nothing trained: the loss alone */
        x->buckets[0] = (dist_bucket){0, 0, 0, 0, 0};
        x->nbuckets = 1;
    }
    x->buckets[x->nbuckets - 1].n++; /* the loss */
    /* handshake: every rank must cut the same buckets (same graph, same
     * options), or the sum() calls would pair unequal buffers */
    uint32_t h = 2166136261u;
    h = fnv(h, (uint64_t)x->total);
    h = fnv(h, (uint64_t)x->nbuckets);
    for (int i = 0; i < x->nbuckets; i++) h = fnv(h, x->buckets[i].n);
    float hs[4] = {1.0f, (float)(h & 0xfff), (float)((h >> 12) & 0xfff), (float)(h >> 24)};
    float mine[4];
    memcpy(mine, hs, sizeof hs);
    char err[512] = "";
    if (d->sum(d->user, hs, 4, err, sizeof err)) {
        mn_fmt(s->err, sizeof s->err, "session: dist: the start-up all-reduce failed: %s", err[0] ? err : "sum() failed");
        return MN_E_DIST;
    }
    if (hs[0] != (float)d->size) {
        mn_fmt(s->err, sizeof s->err, "session: dist: the all-reduce over %d ranks summed %g ones", d->size, (double)hs[0]);
        return MN_E_DIST;
    }
    for (int i = 1; i < 4; i++)
        if (hs[i] != mine[i] * (float)d->size) {
            mn_fmt(s->err, sizeof s->err, "session: dist: the ranks' sessions differ (rank %d reduces %zu values in "
                   "%d buckets; another rank does not): build the same graph with the same options on every rank",
                   d->rank, x->total, x->nbuckets);
            return MN_E_DIST;
        }
    if (pthread_mutex_init(&x->mu, NULL)) return MN_E_NOMEM;
    if (pthread_cond_init(&x->cv, NULL)) {
        pthread_mutex_destroy(&x->mu);
        return MN_E_NOMEM;
    }
    if (pthread_create(&x->thread, NULL, comm_main, x)) {
        pthread_mutex_destroy(&x->mu);
        pthread_cond_destroy(&x->cv);
        mn_fmt(s->err, sizeof s->err, "session: dist: cannot start the communication thread");
        return MN_E_NOMEM;
    }
    x->started = true;
    return MN_OK;
}

static void post(session_dist *x) {
    pthread_mutex_lock(&x->mu);
    x->posted++;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

/* Waits for every posted bucket; true when all succeeded. */
static bool wait_all(session_dist *x, char *err, size_t cap) {
    pthread_mutex_lock(&x->mu);
    while (x->done < x->posted) pthread_cond_wait(&x->cv, &x->mu);
    const bool ok = !x->failed;
    if (!ok) mn_fmt(err, cap, "%s", x->err);
    x->posted = x->done = 0;
    pthread_mutex_unlock(&x->mu);
    return ok;
}

static mn_status exec_range(mn_session *s, int32_t from, int32_t to) {
    if (to <= from) return MN_OK;
    return s->be->execute(s->bk, s->sched.order + from, to - from, s->err, sizeof s->err);
}

mn_status session_dist_step(mn_session *s) {
    session_dist *x = s->dist;
    mn_status st = MN_OK;
    int32_t at = 0;
    double copy = 0;
    for (int k = 0; k < x->nbuckets && !st; k++) {
        const dist_bucket *b = &x->buckets[k];
        if (b->g1 > b->g0) {
            if ((st = exec_range(s, at, b->end))) break;
            at = b->end;
        }
        const double t = now_s();
        for (int i = b->g0; i < b->g1 && !st; i++)
            st = session_read_f32(s, x->grads[i].node, x->host + x->grads[i].off, x->grads[i].n);
        if (!st && k == x->nbuckets - 1) {
            /* the loss: computed by the forward pass, long done */
            if ((st = exec_range(s, at, x->split))) break;
            at = x->split;
            st = session_read_f32(s, s->g->loss, x->host + x->total - 1, 1);
        }
        copy += now_s() - t;
        if (!st) post(x);
    }
    const double t0 = now_s();
    char err[512];
    const bool ok = wait_all(x, err, sizeof err);
    x->wait_s += now_s() - t0;
    if (st) return st;
    if (!ok) {
        mn_fmt(s->err, sizeof s->err, "step %lld: %s", (long long)s->step, err);
        s->dead = true;
        return MN_E_DIST;
    }
    const double t1 = now_s();
    for (int i = 0; i < x->ngrads && !st; i++)
        st = session_write_f32(s, x->grads[i].node, x->host + x->grads[i].off, x->grads[i].n);
    if (!st) st = session_write_f32(s, s->g->loss, x->host + x->total - 1, 1);
    x->copy_s += copy + now_s() - t1;
    if (!st) st = exec_range(s, x->split, s->sched.n);
    if (!st) x->steps++;
    return st;
}

mn_status mn_session_dist_stats(const mn_session *s, mn_dist_stats *out) {
    if (!s || !out) return MN_E_INVALID;
    memset(out, 0, sizeof *out);
    const session_dist *x = s->dist;
    if (!x) return MN_OK;
    out->steps = x->steps;
    out->buckets = x->nbuckets;
    out->floats = x->total;
    if (x->started) pthread_mutex_lock((pthread_mutex_t *)&x->mu);
    out->sum_seconds = x->sum_s;
    if (x->started) pthread_mutex_unlock((pthread_mutex_t *)&x->mu);
    out->wait_seconds = x->wait_s;
    out->copy_seconds = x->copy_s;
    return MN_OK;
}
