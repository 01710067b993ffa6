/* init.c - initial values of a new session's tensors (the last build step).
 *
 * Value i of parameter P is a pure function of (seed, name of P, i): a
 * counter-based generator (core/common.h mn_ctr_*: the SplitMix64 stream
 * keyed by mn_ctr_key(seed, FNV-1a(name)), indexed by i), so the values do
 * not depend on the thread count, on how a tensor is split among threads,
 * or on the backend: the host computes them for every backend.
 *   uniform kinds  x = lo + (hi - lo) * u,  u = mn_ctr_uniform(key, i)
 *                  (24 bits, in double, rounded once to float: in [lo, hi])
 *   normal kinds   x = mean + std * z,  z = one of the Box-Muller pair of
 *                  counters 2*(i/2), 2*(i/2)+1 (mn_ctr_normal2, float)
 * Random parameters are computed in batches of about BATCH_VALUES values,
 * each batch split into equal ranges of values across mn_thread_count()
 * threads (MEGANEURA_THREADS), straight into the backend's memory where it
 * offers it (map_write: the CPU arenas, a unified-memory Vulkan device's
 * mapped arenas), else into a buffer then written through the backend (one
 * copy into its upload path). Zeros (ZEROS parameters, optimizer state, other
 * state such as KV caches, inputs) and CONSTANT parameters are filled by
 * the backend (vkCmdFillBuffer on Vulkan): no bytes move from the host.
 *
 * Does not: choose init kinds (the graph builder does), read checkpoints.
 */
#include <math.h>
#include <pthread.h>

#include "session/session.h"

#define BATCH_VALUES (8 << 20)      /* values per batch (32 MiB of f32) */
#define MIN_VALUES_PER_THREAD 65536 /* below this a thread costs more than it saves */

typedef struct init_job {
    int32_t id;
    bool normal;   /* else uniform */
    uint64_t key;  /* mn_ctr_key(seed, hash(name)) */
    double a, b;   /* uniform: lo, hi - lo; normal: mean, std */
    int64_t count; /* values */
    int64_t first; /* offset of its values in the batch buffer */
    float *dst;    /* the backend's memory for them (map_write), or NULL: the batch buffer, then write */
} init_job;

typedef struct init_slice {
    const init_job *jobs;
    int njobs;
    float *buf;
    int64_t lo, hi; /* the batch's values [lo, hi) */
} init_slice;

static void fans(const node *n, double *fan_in, double *fan_out) {
    if (n->rank == 2) {
        *fan_in = (double)n->shape[0];
        *fan_out = (double)n->shape[1];
    } else if (n->rank >= 3) {
        double rf = 1;
        for (int i = 2; i < n->rank; i++) rf *= (double)n->shape[i];
        *fan_in = (double)n->shape[1] * rf;
        *fan_out = (double)n->shape[0] * rf;
    } else {
        *fan_in = *fan_out = (double)node_numel(n);
    }
}

/* The job of a random parameter; false for ZEROS and CONSTANT. */
static bool make_job(const node *n, uint64_t seed, init_job *j) {
    double fi, fo, a = n->init.a, b = n->init.b, gain = a != 0.0 ? a : 1.0, l;
    fans(n, &fi, &fo);
    memset(j, 0, sizeof *j);
    switch (n->init.kind) {
    case MN_INIT_UNIFORM: j->a = a, j->b = b - a; break;
    case MN_INIT_NORMAL: j->normal = true, j->a = a, j->b = b; break;
    case MN_INIT_XAVIER_UNIFORM: l = gain * sqrt(6.0 / (fi + fo)), j->a = -l, j->b = 2 * l; break;
    case MN_INIT_XAVIER_NORMAL: j->normal = true, j->b = gain * sqrt(2.0 / (fi + fo)); break;
    case MN_INIT_KAIMING_UNIFORM: l = sqrt(6.0 / fi), j->a = -l, j->b = 2 * l; break;
    case MN_INIT_KAIMING_NORMAL: j->normal = true, j->b = sqrt(2.0 / fi); break;
    default: return false;
    }
    j->key = mn_ctr_key(seed, mn_hash_str(n->name));
    j->count = node_numel(n);
    return true;
}

/* Values [lo, hi) of job j into out[0 .. hi - lo). */
static void gen_range(const init_job *j, int64_t lo, int64_t hi, float *out) {
    if (!j->normal) {
        for (int64_t i = lo; i < hi; i++)
            out[i - lo] = (float)(j->a + j->b * (double)mn_ctr_uniform(j->key, (uint64_t)i));
        return;
    }
    float z[2];
    int64_t i = lo;
    if (i < hi && (i & 1)) { /* the second of a pair */
        mn_ctr_normal2(j->key, (uint64_t)i / 2, z);
        out[0] = (float)(j->a + j->b * (double)z[1]);
        i++;
    }
    for (; i + 1 < hi; i += 2) {
        mn_ctr_normal2(j->key, (uint64_t)i / 2, z);
        out[i - lo] = (float)(j->a + j->b * (double)z[0]);
        out[i + 1 - lo] = (float)(j->a + j->b * (double)z[1]);
    }
    if (i < hi) {
        mn_ctr_normal2(j->key, (uint64_t)i / 2, z);
        out[i - lo] = (float)(j->a + j->b * (double)z[0]);
    }
}

static void *run_slice(void *arg) {
    const init_slice *sl = arg;
    for (int k = 0; k < sl->njobs; k++) {
        const init_job *j = &sl->jobs[k];
        int64_t lo = sl->lo > j->first ? sl->lo : j->first;
        int64_t hi = sl->hi < j->first + j->count ? sl->hi : j->first + j->count;
        if (lo < hi) gen_range(j, lo - j->first, hi - j->first, j->dst ? j->dst + (lo - j->first) : sl->buf + lo);
    }
    return NULL;
}

/* Computes a batch's values into buf on up to nthreads threads (the caller
 * is one of them). A thread that cannot start leaves its range to the
 * caller: the values are the same either way. */
static void gen_batch(const init_job *jobs, int njobs, int64_t total, float *buf, int nthreads) {
    enum { MAX_THREADS = 256 };
    int64_t useful = total / MIN_VALUES_PER_THREAD;
    int t = nthreads < useful ? nthreads : (int)(useful < 1 ? 1 : useful);
    if (t > MAX_THREADS) t = MAX_THREADS;
    init_slice sl[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    bool started[MAX_THREADS] = {0};
    for (int k = 0; k < t; k++)
        sl[k] = (init_slice){jobs, njobs, buf, total * k / t, total * (k + 1) / t};
    for (int k = 1; k < t; k++) started[k] = pthread_create(&th[k], NULL, run_slice, &sl[k]) == 0;
    run_slice(&sl[0]);
    for (int k = 1; k < t; k++) {
        if (started[k]) pthread_join(th[k], NULL);
        else run_slice(&sl[k]);
    }
}

static mn_status fill_node(mn_session *s, int32_t id, uint32_t pattern) {
    if (s->be->fill) return s->be->fill(s->bk, id, pattern, s->err, sizeof s->err);
    /* a backend without fill: zeros through write */
    size_t bytes = node_bytes(&s->g->nodes[id], s->iopt.f64 ? 8 : 4);
    uint32_t *v = calloc(1, bytes + 4);
    if (!v) {
        mn_fmt(s->err, sizeof s->err, "out of memory (%zu bytes) initialising node %d", bytes, (int)id);
        return MN_E_NOMEM;
    }
    for (size_t i = 0; pattern && i < bytes / 4; i++) v[i] = pattern;
    mn_status st = session_write_node(s, id, v, bytes);
    free(v);
    return st;
}

/* Random parameters jobs[0..n) in batches: compute, then write. */
static mn_status write_random(mn_session *s, init_job *jobs, int n) {
    const int nthreads = mn_thread_count();
    float *buf = NULL;
    size_t cap = 0;
    mn_status st = MN_OK;
    for (int k = 0; k < n && !st;) {
        int e = k;
        int64_t total = 0;
        while (e < n && (e == k || total + jobs[e].count <= BATCH_VALUES)) {
            jobs[e].first = total;
            total += jobs[e++].count;
        }
        if ((size_t)total > cap) {
            free(buf);
            cap = (size_t)total;
            buf = malloc(cap * sizeof *buf + 1);
            if (!buf) {
                mn_fmt(s->err, sizeof s->err, "out of memory initialising '%s' (%lld values)",
                       s->g->nodes[jobs[k].id].name, (long long)total);
                return MN_E_NOMEM;
            }
        }
        double t0 = mn_now_us();
        /* straight into the backend's memory where it lets us (the CPU's
         * arenas, a unified-memory GPU's): computed and placed by the same
         * threads, no copy */
        for (int j = k; j < e && !st; j++) {
            void *p = NULL;
            jobs[j].dst = NULL;
            if (!s->iopt.f64 && s->be->map_write &&
                !(st = s->be->map_write(s->bk, jobs[j].id, (size_t)jobs[j].count * sizeof(float), &p, s->err,
                                        sizeof s->err)))
                jobs[j].dst = p;
        }
        if (!st) gen_batch(jobs + k, e - k, total, buf, nthreads);
        double t1 = mn_now_us();
        for (; k < e && !st; k++)
            if (!jobs[k].dst) st = session_write_f32(s, jobs[k].id, buf + jobs[k].first, (size_t)jobs[k].count);
        s->phase_ms[6] += (t1 - t0) / 1e3;
        s->phase_ms[7] += (mn_now_us() - t1) / 1e3;
    }
    free(buf);
    return st;
}

mn_status session_init_values(mn_session *s) {
    const double t0 = mn_now_us();
    const mn_graph *g = s->g;
    init_job *jobs = malloc(((size_t)g->n + 1) * sizeof *jobs);
    if (!jobs) {
        mn_fmt(s->err, sizeof s->err, "out of memory initialising parameters");
        return MN_E_NOMEM;
    }
    int njobs = 0;
    mn_status st = MN_OK;
    for (int32_t i = 0; i < g->n && !st; i++) {
        const node *n = &g->nodes[i];
        if (n->op == OP_STATE || n->op == OP_INPUT) {
            st = fill_node(s, i, 0);
        } else if (n->op == OP_PARAM && make_job(n, s->opt.seed, &jobs[njobs])) {
            jobs[njobs++].id = i;
        } else if (n->op == OP_PARAM) { /* ZEROS or CONSTANT */
            float c = n->init.kind == MN_INIT_CONSTANT ? (float)n->init.a : 0.0f;
            uint32_t bits;
            memcpy(&bits, &c, 4);
            if (c == 0.0f && !signbit(c)) {
                st = fill_node(s, i, 0);
            } else if (!s->iopt.f64) {
                st = fill_node(s, i, bits);
            } else { /* a double's bits are not a repeated 32-bit word */
                size_t cnt = (size_t)node_numel(n);
                float *v = malloc(cnt * sizeof *v + 1);
                if (!v) {
                    mn_fmt(s->err, sizeof s->err, "out of memory initialising '%s'", n->name);
                    st = MN_E_NOMEM;
                    break;
                }
                for (size_t k = 0; k < cnt; k++) v[k] = c;
                st = session_write_f32(s, i, v, cnt);
                free(v);
            }
        }
    }
    s->phase_ms[7] += (mn_now_us() - t0) / 1e3; /* fills */
    if (!st) st = write_random(s, jobs, njobs);
    free(jobs);
    return st;
}
