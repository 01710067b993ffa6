/* test_dist.c - data-parallel training through mn_session_options.dist,
 * without MPI: N "ranks" are threads of this process, each with its own
 * session, and the all-reduce is a shared-memory sum in rank order with a
 * timeout (what the MPI binding does over a communicator).
 *
 *  - N ranks with shards of B/N rows == one session with B rows (an MLP
 *    with AdamW and warm-up, with and without clipping, N = 2 and 3), to
 *    1e-6 on every parameter after several steps; the ranks' parameters are
 *    bitwise equal; the loss every rank reports is the global batch's;
 *  - one bucket or many (bucket_bytes 64) give the same bits; the stats;
 *  - a NaN in one rank's shard: every rank skips the update (MN_E_NONFINITE);
 *  - dynamic loss scaling: the ranks reduce scaled gradients and equal an
 *    unscaled run bit for bit; overflows (from 2^64, inputs times 1e6) skip
 *    the same steps on every rank, whose scales stay equal;
 *  - a rank that stops stepping: the other's step fails with MN_E_DIST
 *    within the timeout, naming the bucket, and the session is dead;
 *  - sessions that disagree (other hidden sizes) fail at creation;
 *  - bad dist options are refused;
 *  - Vulkan (lavapipe): 2 ranks on Vulkan == one CPU session, NMSE 1e-10.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define MAXR 4
#define IN 24
#define HID 16
#define OUT 5
#define ROWS 12 /* global batch */
#define STEPS 6

/* ---- the fake communicator: threads, shared slots, a timed barrier ------- */

typedef struct comm {
    int size;
    double timeout_s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned gen;
    const float *slot[MAXR];
    size_t n[MAXR];
    int calls[MAXR];
} comm;

typedef struct rank_ctx {
    comm *c;
    int rank;
} rank_ctx;

/* false on timeout */
static bool barrier(comm *c) {
    pthread_mutex_lock(&c->mu);
    unsigned g = c->gen;
    if (++c->arrived == c->size) {
        c->arrived = 0;
        c->gen++;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        return true;
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)c->timeout_s;
    dl.tv_nsec += (long)((c->timeout_s - (double)(time_t)c->timeout_s) * 1e9);
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    while (c->gen == g)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) == ETIMEDOUT && c->gen == g) {
            c->arrived--; /* leave: the communicator is broken from now on */
            pthread_mutex_unlock(&c->mu);
            return false;
        }
    pthread_mutex_unlock(&c->mu);
    return true;
}

/* Sums in rank order in double, like the MPI binding. */
static int fake_sum(void *user, float *buf, size_t n, char *err, size_t cap) {
    rank_ctx *r = user;
    comm *c = r->c;
    c->slot[r->rank] = buf;
    c->n[r->rank] = n;
    c->calls[r->rank]++;
    if (!barrier(c)) {
        snprintf(err, cap, "rank %d: no answer from the other ranks within %g s", r->rank, c->timeout_s);
        return 1;
    }
    for (int k = 0; k < c->size; k++)
        if (c->n[k] != n) {
            snprintf(err, cap, "rank %d sums %zu values, rank %d %zu", r->rank, n, k, c->n[k]);
            barrier(c);
            return 1;
        }
    float *tmp = malloc(n * sizeof *tmp + 1);
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < c->size; k++) s += (double)c->slot[k][i];
        tmp[i] = (float)s;
    }
    bool ok = barrier(c); /* everyone has read every slot */
    memcpy(buf, tmp, n * sizeof *tmp);
    free(tmp);
    if (!ok) {
        snprintf(err, cap, "rank %d: no answer from the other ranks within %g s", r->rank, c->timeout_s);
        return 1;
    }
    return 0;
}

static void comm_init(comm *c, int size, double timeout) {
    memset(c, 0, sizeof *c);
    c->size = size;
    c->timeout_s = timeout;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

/* ---- the model and the data ------------------------------------------------ */

static mn_graph *mlp(int64_t rows, int64_t hid) {
    mn_graph *g;
    mn_tensor x, y, w1, b1, w2, b2, h, a, o, l, loss;
    mn_graph_create(&g);
    mn_graph_input(g, &x, "x", MN_F32, 2, (int64_t[]){rows, IN});
    mn_graph_input(g, &y, "y", MN_I32, 1, (int64_t[]){rows});
    mn_graph_param(g, &w1, "fc1.w", 2, (int64_t[]){IN, hid}, (mn_init){MN_INIT_KAIMING_UNIFORM, 0, 0});
    mn_graph_param(g, &b1, "fc1.b", 1, (int64_t[]){hid}, (mn_init){MN_INIT_UNIFORM, -0.1f, 0.1f});
    mn_graph_param(g, &w2, "fc2.w", 2, (int64_t[]){hid, OUT}, (mn_init){MN_INIT_XAVIER_UNIFORM, 0, 0});
    mn_graph_param(g, &b2, "fc2.b", 1, (int64_t[]){OUT}, (mn_init){MN_INIT_ZEROS, 0, 0});
    mn_matmul(g, &h, x, w1);
    mn_add(g, &a, h, b1);
    mn_relu(g, &a, a);
    mn_matmul(g, &o, a, w2);
    mn_add(g, &l, o, b2);
    mn_cross_entropy(g, &loss, l, y);
    mn_graph_output(g, l, "logits");
    mn_graph_loss(g, loss);
    return g;
}

static float X[STEPS][ROWS * IN];
static int32_t Y[STEPS][ROWS];

static void make_data(void) {
    uint64_t s = 12345;
    for (int t = 0; t < STEPS; t++) {
        for (int i = 0; i < ROWS * IN; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            X[t][i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        }
        for (int i = 0; i < ROWS; i++) Y[t][i] = (int32_t)((i * 7 + t) % OUT);
    }
}

static const char *PARAMS[4] = {"fc1.w", "fc1.b", "fc2.w", "fc2.b"};
static const size_t NUMEL[4] = {IN * HID, HID, HID * OUT, OUT};

static float g_ls_init; /* loss_scale.init of the sessions train_opts makes */

static mn_session_options train_opts(bool clip, mn_backend_kind be) {
    mn_session_options o = mn_session_default_options();
    o.loss_scale = (mn_loss_scale){.init = g_ls_init, .interval = 2};
    o.backend = be;
    o.mode = MN_MODE_TRAINING;
    o.seed = 7;
    o.optim = mn_optimizer_default(MN_OPTIM_ADAMW);
    o.optim.lr = 0.02f;
    o.optim.schedule = MN_LR_WARMUP_COSINE;
    o.optim.warmup_steps = 2;
    o.optim.total_steps = STEPS;
    o.optim.min_lr = 0.001f;
    if (clip) o.optim.clip_norm = 0.5f;
    return o;
}

/* ---- one rank ---------------------------------------------------------------- */

typedef struct job {
    rank_ctx rc;
    mn_dist dist;
    mn_session_options opt;
    int64_t hid;
    int steps;           /* steps to take (a "dead" rank takes fewer) */
    int nan_step;        /* -1, or the step whose shard gets a NaN on this rank */
    mn_status create_st, step_st[STEPS];
    float loss[STEPS];
    float params[4][IN * HID];
    char err[512];
    int64_t step_count;
    float ls_scale;
    int64_t ls_overflows;
    mn_dist_stats stats;
    double fail_after_s; /* time the failing step took */
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *rank_main(void *arg) {
    job *j = arg;
    const int N = j->dist.size;
    const int64_t rows = ROWS / N;
    mn_graph *g = mlp(rows, j->hid);
    j->opt.dist = &j->dist;
    mn_session *s = NULL;
    j->create_st = mn_session_create(&s, g, &j->opt);
    mn_graph_destroy(g);
    snprintf(j->err, sizeof j->err, "%s", mn_session_error(s));
    for (int t = 0; t < STEPS; t++) j->step_st[t] = MN_E_STATE;
    if (!j->create_st) {
        for (int t = 0; t < j->steps; t++) {
            float x[ROWS * IN];
            memcpy(x, X[t] + j->rc.rank * rows * IN, (size_t)(rows * IN) * sizeof *x);
            if (t == j->nan_step) x[3] = NAN;
            mn_session_set_input(s, "x", x, (size_t)(rows * IN) * sizeof *x);
            mn_session_set_input(s, "y", Y[t] + j->rc.rank * rows, (size_t)rows * sizeof(int32_t));
            double t0 = now();
            j->step_st[t] = mn_session_step(s);
            if (j->step_st[t] && j->step_st[t] != MN_E_NONFINITE) {
                j->fail_after_s = now() - t0;
                snprintf(j->err, sizeof j->err, "%s", mn_session_error(s));
                break;
            }
            mn_session_loss(s, &j->loss[t]);
        }
        for (int p = 0; p < 4; p++) mn_session_get_param(s, PARAMS[p], j->params[p], NUMEL[p]);
        j->step_count = mn_session_step_count(s);
        j->ls_scale = mn_session_loss_scale(s, &j->ls_overflows);
        mn_session_dist_stats(s, &j->stats);
    }
    mn_session_destroy(s);
    return NULL;
}

/* Runs N ranks; jobs[r] filled. */
static void run_ranks(job *jobs, int N, bool clip, mn_backend_kind be, size_t bucket, double timeout) {
    static comm c;
    comm_init(&c, N, timeout);
    pthread_t th[MAXR];
    for (int r = 0; r < N; r++) {
        job *j = &jobs[r];
        j->rc = (rank_ctx){&c, r};
        j->dist = (mn_dist){r, N, fake_sum, &j->rc, bucket};
        j->opt = train_opts(clip, be);
        if (!j->hid) j->hid = HID;
        if (!j->steps) j->steps = STEPS;
        if (!j->nan_step) j->nan_step = -1;
        pthread_create(&th[r], NULL, rank_main, j);
    }
    for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
    pthread_mutex_destroy(&c.mu);
    pthread_cond_destroy(&c.cv);
}

/* The reference: one session on the whole batch. */
static void run_single(job *ref, bool clip, mn_backend_kind be) {
    memset(ref, 0, sizeof *ref);
    ref->dist = (mn_dist){0, 1, NULL, NULL, 0};
    ref->opt = train_opts(clip, be);
    ref->hid = HID;
    ref->steps = STEPS;
    ref->nan_step = -1;
    rank_main(ref);
}

static double max_diff(const job *a, const job *b) {
    double m = 0;
    for (int p = 0; p < 4; p++)
        for (size_t i = 0; i < NUMEL[p]; i++) {
            double d = fabs((double)a->params[p][i] - (double)b->params[p][i]);
            if (!(d <= m)) m = d;
        }
    return m;
}

static bool same_bits(const job *a, const job *b) {
    for (int p = 0; p < 4; p++)
        if (memcmp(a->params[p], b->params[p], NUMEL[p] * sizeof(float))) return false;
    return true;
}

static void test_equal_to_single(int N, bool clip) {
    job ref, jobs[MAXR];
    run_single(&ref, clip, MN_BACKEND_CPU);
    CHECK_MSG(ref.create_st == MN_OK && ref.step_count == STEPS, "single: %s", ref.err);
    memset(jobs, 0, sizeof jobs);
    run_ranks(jobs, N, clip, MN_BACKEND_CPU, 0, 20);
    for (int r = 0; r < N; r++) {
        CHECK_MSG(jobs[r].create_st == MN_OK, "N=%d rank %d: %s", N, r, jobs[r].err);
        CHECK_MSG(jobs[r].step_count == STEPS, "N=%d rank %d: %lld steps (%s)", N, r, (long long)jobs[r].step_count,
                  jobs[r].err);
        const double d = max_diff(&jobs[r], &ref);
        CHECK_MSG(d <= 1e-6, "N=%d clip=%d rank %d: parameters differ from one session by %.3g", N, clip, r, d);
        CHECK_MSG(same_bits(&jobs[r], &jobs[0]), "N=%d rank %d: parameters differ from rank 0's", N, r);
        for (int t = 0; t < STEPS; t++)
            CHECK_MSG(fabs(jobs[r].loss[t] - ref.loss[t]) <= 1e-6 * (1 + fabs(ref.loss[t])),
                      "N=%d rank %d step %d: loss %.9g, one session %.9g", N, r, t, jobs[r].loss[t], ref.loss[t]);
        CHECK(jobs[r].stats.steps == STEPS && jobs[r].stats.buckets == 1);
        CHECK(jobs[r].stats.floats == IN * HID + HID + HID * OUT + OUT + 1);
    }
    printf("N=%d clip=%d: max |ranks - one session| %.3g\n", N, clip, max_diff(&jobs[0], &ref));
}

static void test_buckets(void) {
    job one[2], many[2];
    memset(one, 0, sizeof one);
    memset(many, 0, sizeof many);
    run_ranks(one, 2, true, MN_BACKEND_CPU, 0, 20);
    run_ranks(many, 2, true, MN_BACKEND_CPU, 64, 20);
    CHECK_MSG(many[0].create_st == MN_OK && many[0].step_count == STEPS, "%s", many[0].err);
    CHECK_MSG(many[0].stats.buckets == 4, "64-byte buckets: %d buckets (one per gradient)", many[0].stats.buckets);
    CHECK(same_bits(&one[0], &many[0]) && same_bits(&one[1], &many[1]));
    CHECK(many[0].stats.sum_seconds > 0 && many[0].stats.wait_seconds >= 0 && many[0].stats.copy_seconds > 0);
}

static void test_nonfinite(void) {
    job jobs[2];
    memset(jobs, 0, sizeof jobs);
    jobs[1].nan_step = 2;
    run_ranks(jobs, 2, false, MN_BACKEND_CPU, 0, 20);
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(jobs[r].step_st[2] == MN_E_NONFINITE, "rank %d: NaN on rank 1 -> %s", r,
                  mn_status_str(jobs[r].step_st[2]));
        CHECK_MSG(jobs[r].step_count == STEPS - 1, "rank %d: %lld steps counted", r, (long long)jobs[r].step_count);
    }
    CHECK(same_bits(&jobs[0], &jobs[1]));
}

static void test_loss_scale(void) {
    job plain[2], scaled[2], over[2];
    memset(plain, 0, sizeof plain), memset(scaled, 0, sizeof scaled), memset(over, 0, sizeof over);
    run_ranks(plain, 2, true, MN_BACKEND_CPU, 64, 20);
    g_ls_init = 1024;
    run_ranks(scaled, 2, true, MN_BACKEND_CPU, 64, 20);
    g_ls_init = 18446744073709551616.0f; /* inputs a million times larger: the scaled squares overflow */
    for (int t = 0; t < STEPS; t++)
        for (int i = 0; i < ROWS * IN; i++) X[t][i] *= 1e6f;
    run_ranks(over, 2, true, MN_BACKEND_CPU, 64, 20);
    make_data();
    g_ls_init = 0;
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(scaled[r].create_st == MN_OK && scaled[r].step_count == STEPS, "rank %d: %s", r, scaled[r].err);
        CHECK_MSG(same_bits(&scaled[r], &plain[r]), "rank %d: loss-scaled parameters differ from the unscaled run", r);
        CHECK_MSG(scaled[r].ls_scale == 8192.0f && scaled[r].ls_overflows == 0, "rank %d: scale %g, %lld overflows",
                  r, (double)scaled[r].ls_scale, (long long)scaled[r].ls_overflows);
        for (int t = 0; t < STEPS; t++) CHECK(over[r].step_st[t] == MN_OK);
    }
    CHECK_MSG(over[0].ls_overflows >= 1 && over[0].step_count == STEPS - over[0].ls_overflows,
              "from 2^64: %lld overflows, %lld steps", (long long)over[0].ls_overflows, (long long)over[0].step_count);
    CHECK(over[1].ls_overflows == over[0].ls_overflows && over[1].ls_scale == over[0].ls_scale &&
          over[1].step_count == over[0].step_count && same_bits(&over[0], &over[1]));
}

static void test_dead_rank(void) {
    job jobs[2];
    memset(jobs, 0, sizeof jobs);
    jobs[1].steps = 2; /* rank 1 stops after two steps, as if it died */
    run_ranks(jobs, 2, false, MN_BACKEND_CPU, 0, 1.0);
    CHECK_MSG(jobs[0].step_st[1] == MN_OK && jobs[0].step_st[2] == MN_E_DIST, "rank 0 step 3 -> %s",
              mn_status_str(jobs[0].step_st[2]));
    CHECK_MSG(strstr(jobs[0].err, "step 2: all-reduce of bucket 1/1") && strstr(jobs[0].err, "within 1 s"),
              "message: %s", jobs[0].err);
    CHECK_MSG(jobs[0].fail_after_s < 5, "the failing step took %.1f s", jobs[0].fail_after_s);
    CHECK_MSG(jobs[0].step_count == 2, "%lld", (long long)jobs[0].step_count);
}

static void test_mismatch(void) {
    job jobs[2];
    memset(jobs, 0, sizeof jobs);
    jobs[1].hid = HID + 1;
    run_ranks(jobs, 2, false, MN_BACKEND_CPU, 0, 5);
    for (int r = 0; r < 2; r++)
        CHECK_MSG(jobs[r].create_st == MN_E_DIST && strstr(jobs[r].err, "sessions differ"), "rank %d: %s: %s", r,
                  mn_status_str(jobs[r].create_st), jobs[r].err);
}

static void test_bad_options(void) {
    mn_graph *g = mlp(4, HID);
    mn_session_options o = train_opts(false, MN_BACKEND_CPU);
    mn_dist d = {2, 2, fake_sum, NULL, 0};
    o.dist = &d;
    mn_session *s = NULL;
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID && strstr(mn_session_error(s), "rank 2 of size 2"));
    mn_session_destroy(s);
    d = (mn_dist){0, 2, NULL, NULL, 0};
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID && strstr(mn_session_error(s), "no sum()"));
    mn_session_destroy(s);
    o.mode = MN_MODE_INFERENCE;
    d = (mn_dist){0, 1, NULL, NULL, 0};
    CHECK(mn_session_create(&s, g, &o) == MN_E_INVALID && strstr(mn_session_error(s), "training session"));
    mn_session_destroy(s);
    /* size 1: a plain session */
    o = train_opts(false, MN_BACKEND_CPU);
    o.dist = &d;
    CHECK_OK(mn_session_create(&s, g, &o), mn_session_error(s));
    mn_dist_stats st;
    CHECK(mn_session_dist_stats(s, &st) == MN_OK && st.steps == 0 && st.buckets == 0);
    mn_session_destroy(s);
    mn_graph_destroy(g);
}

static void test_vulkan(void) {
    mn_device *dev = th_require_vulkan();
    if (!dev) return;
    mn_device_close(dev);
    job ref, jobs[2];
    run_single(&ref, true, MN_BACKEND_CPU);
    memset(jobs, 0, sizeof jobs);
    run_ranks(jobs, 2, true, MN_BACKEND_VULKAN, 64, 120);
    for (int r = 0; r < 2; r++) {
        CHECK_MSG(jobs[r].create_st == MN_OK && jobs[r].step_count == STEPS, "vulkan rank %d: %s", r, jobs[r].err);
        for (int p = 0; p < 4; p++) {
            double e = th_nmse(jobs[r].params[p], ref.params[p], NUMEL[p]);
            CHECK_MSG(e <= 1e-10, "vulkan rank %d %s: NMSE %.3g vs one CPU session", r, PARAMS[p], e);
        }
    }
    CHECK(same_bits(&jobs[0], &jobs[1]));
}

int main(void) {
    make_data();
    test_equal_to_single(2, false);
    test_equal_to_single(2, true);
    test_equal_to_single(3, true);
    test_buckets();
    test_nonfinite();
    test_loss_scale();
    test_dead_rank();
    test_mismatch();
    test_bad_options();
    test_vulkan();
    return th_finish("test_dist");
}
