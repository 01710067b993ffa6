/* mpi.c - the MPI binding (include/meganeura_mpi.h): a deterministic sum over
 * a communicator for mn_dist, a barrier, a sum of doubles, abort; every
 * collective non-blocking and polled against a deadline.
 *
 * Built into libmeganeura_mpi.so (MPI linked there only). Does not: know
 * sessions or graphs (it fills an mn_dist), pick devices, shard data.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meganeura_mpi.h"

#define DEFAULT_TIMEOUT_S 600.0
/* counts are ints in MPI: a longer sum goes in pieces of at most this */
#define PIECE_FLOATS ((size_t)1 << 28)

struct mn_mpi {
    MPI_Comm comm;
    int rank, size, local_rank;
    bool finalize; /* create_world initialised MPI */
    double timeout_s;
    mn_dist dist;
    float *recv; /* size * part floats */
    size_t recv_cap;
    int *counts, *displs, *rcounts, *rdispls; /* size entries each */
};

static void fmt(char *err, size_t cap, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void fmt(char *err, size_t cap, const char *f, ...) {
    if (!err || !cap) return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(err, cap, f, ap);
    va_end(ap);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void mpi_msg(char *err, size_t cap, int rank, const char *what, int rc) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, s, &len);
    (void)rank;
    fmt(err, cap, "%s: MPI error %d (%s)", what, rc, s);
}

/* Polls r until it completes or the deadline passes: busy (yielding) for the
 * first millisecond, then sleeping 20 us growing to 200 us between tests, so
 * a waiting rank leaves the cores to the computing ones. Progress of the
 * transfer itself happens inside MPI_Test (a large buffer goes in many
 * fragments), so the naps stay short: with 1 ms naps a 0.4 MB all-reduce
 * took 17 ms on 2 cores. */
static int wait_req(mn_mpi *m, MPI_Request *r, const char *what, size_t n, char *err, size_t cap) {
    const double t0 = now_s(), deadline = t0 + m->timeout_s;
    long nap_ns = 20000;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            mpi_msg(err, cap, m->rank, what, rc);
            return 1;
        }
        if (done) return 0;
        const double t = now_s();
        if (t > deadline) {
            fmt(err, cap, "%s of %zu values: no answer from the other ranks within %g s (a rank died, hangs or "
                "is far behind); the job must end", what, n, m->timeout_s);
            return 1;
        }
        if (t - t0 < 1e-3) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
        if (nap_ns < 200000) nap_ns *= 2;
    }
}

/* One piece of at most PIECE_FLOATS values. */
static int sum_piece(mn_mpi *m, float *buf, size_t n, char *err, size_t cap) {
    const int P = m->size;
    for (int p = 0; p < P; p++) {
        const size_t lo = n * (size_t)p / (size_t)P, hi = n * (size_t)(p + 1) / (size_t)P;
        m->counts[p] = (int)(hi - lo);
        m->displs[p] = (int)lo;
    }
    const size_t mine = (size_t)m->counts[m->rank];
    if (mine * (size_t)P > m->recv_cap) {
        float *r = realloc(m->recv, mine * (size_t)P * sizeof *r + 1);
        if (!r) {
            fmt(err, cap, "rank %d: out of memory for a %zu-value receive buffer", m->rank, mine * (size_t)P);
            return 1;
        }
        m->recv = r;
        m->recv_cap = mine * (size_t)P;
    }
    for (int p = 0; p < P; p++) m->rcounts[p] = (int)mine, m->rdispls[p] = (int)(mine * (size_t)p);
    MPI_Request req;
    int rc = MPI_Ialltoallv(buf, m->counts, m->displs, MPI_FLOAT, m->recv, m->rcounts, m->rdispls, MPI_FLOAT,
                            m->comm, &req);
    if (rc != MPI_SUCCESS) {
        mpi_msg(err, cap, m->rank, "all-reduce (MPI_Ialltoallv)", rc);
        return 1;
    }
    if (wait_req(m, &req, "all-reduce (exchange of parts)", n, err, cap)) return 1;
    float *out = buf + m->displs[m->rank];
    for (size_t i = 0; i < mine; i++) {
        double s = 0;
        for (int p = 0; p < P; p++) s += (double)m->recv[(size_t)p * mine + i]; /* rank order */
        out[i] = (float)s;
    }
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, m->counts, m->displs, MPI_FLOAT, m->comm, &req);
    if (rc != MPI_SUCCESS) {
        mpi_msg(err, cap, m->rank, "all-reduce (MPI_Iallgatherv)", rc);
        return 1;
    }
    return wait_req(m, &req, "all-reduce (gathering the sums)", n, err, cap);
}

static int dist_sum(void *user, float *buf, size_t n, char *err, size_t cap) {
    mn_mpi *m = user;
    for (size_t at = 0; at < n; at += PIECE_FLOATS) {
        const size_t k = n - at < PIECE_FLOATS ? n - at : PIECE_FLOATS;
        if (sum_piece(m, buf + at, k, err, cap)) return 1;
    }
    return 0;
}

static mn_status setup(mn_mpi *m, MPI_Comm comm, const mn_mpi_options *o, char *err, size_t cap) {
    int rc = MPI_Comm_dup(comm, &m->comm);
    if (rc != MPI_SUCCESS) {
        m->comm = MPI_COMM_NULL;
        mpi_msg(err, cap, -1, "MPI_Comm_dup", rc);
        return MN_E_DIST;
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    MPI_Comm local;
    m->local_rank = 0;
    if (MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &m->local_rank);
        MPI_Comm_free(&local);
    }
    m->timeout_s = o && o->timeout_s > 0 ? o->timeout_s : DEFAULT_TIMEOUT_S;
    m->counts = calloc((size_t)m->size * 4, sizeof(int));
    if (!m->counts) {
        fmt(err, cap, "out of memory");
        return MN_E_NOMEM;
    }
    m->displs = m->counts + m->size;
    m->rcounts = m->displs + m->size;
    m->rdispls = m->rcounts + m->size;
    m->dist = (mn_dist){m->rank, m->size, dist_sum, m, o ? o->bucket_bytes : 0};
    return MN_OK;
}

mn_status mn_mpi_create(mn_mpi **out, MPI_Comm comm, const mn_mpi_options *o, char *err, size_t cap) {
    if (!out) return MN_E_INVALID;
    *out = NULL;
    int inited = 0, level = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        fmt(err, cap, "mn_mpi_create: MPI is not initialised (MPI_Init_thread first, or mn_mpi_create_world)");
        return MN_E_STATE;
    }
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_SERIALIZED) {
        fmt(err, cap, "mn_mpi_create: MPI runs at thread level %d; the session's communication thread needs "
            "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE (MPI_Init_thread)", level);
        return MN_E_UNSUPPORTED;
    }
    mn_mpi *m = calloc(1, sizeof *m);
    if (!m) return MN_E_NOMEM;
    mn_status st = setup(m, comm, o, err, cap);
    if (st) {
        mn_mpi_destroy(m);
        return st;
    }
    *out = m;
    return MN_OK;
}

mn_status mn_mpi_create_world(mn_mpi **out, int *argc, char ***argv, const mn_mpi_options *o, char *err,
                              size_t cap) {
    if (!out) return MN_E_INVALID;
    *out = NULL;
    int inited = 0, provided = 0;
    bool mine = false;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            fmt(err, cap, "MPI_Init_thread failed (error %d)", rc);
            return MN_E_DIST;
        }
        mine = true;
    }
    mn_status st = mn_mpi_create(out, MPI_COMM_WORLD, o, err, cap);
    if (st) {
        if (mine) MPI_Finalize();
        return st;
    }
    (*out)->finalize = mine;
    return MN_OK;
}

void mn_mpi_destroy(mn_mpi *m) {
    if (!m) return;
    if (m->comm != MPI_COMM_NULL && m->comm) MPI_Comm_free(&m->comm);
    free(m->counts);
    free(m->recv);
    const bool fin = m->finalize;
    free(m);
    if (fin) MPI_Finalize();
}

int mn_mpi_rank(const mn_mpi *m) { return m ? m->rank : 0; }
int mn_mpi_size(const mn_mpi *m) { return m ? m->size : 1; }
int mn_mpi_local_rank(const mn_mpi *m) { return m ? m->local_rank : 0; }
const mn_dist *mn_mpi_dist(mn_mpi *m) { return m ? &m->dist : NULL; }

mn_status mn_mpi_barrier(mn_mpi *m, char *err, size_t cap) {
    MPI_Request req;
    int rc = MPI_Ibarrier(m->comm, &req);
    if (rc != MPI_SUCCESS) {
        mpi_msg(err, cap, m->rank, "barrier (MPI_Ibarrier)", rc);
        return MN_E_DIST;
    }
    return wait_req(m, &req, "barrier", 0, err, cap) ? MN_E_DIST : MN_OK;
}

mn_status mn_mpi_sum_f64(mn_mpi *m, double *v, size_t n, char *err, size_t cap) {
    if (n == 0) return MN_OK;
    if (n > (size_t)INT_MAX / (size_t)m->size) {
        fmt(err, cap, "rank %d: sum of %zu doubles: too many", m->rank, n);
        return MN_E_INVALID;
    }
    double *all = malloc(n * (size_t)m->size * sizeof *all);
    if (!all) {
        fmt(err, cap, "out of memory");
        return MN_E_NOMEM;
    }
    MPI_Request req;
    int rc = MPI_Iallgather(v, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, m->comm, &req);
    mn_status st = MN_OK;
    if (rc != MPI_SUCCESS) {
        mpi_msg(err, cap, m->rank, "sum (MPI_Iallgather)", rc);
        st = MN_E_DIST;
    } else if (wait_req(m, &req, "sum", n, err, cap)) {
        st = MN_E_DIST;
    } else {
        for (size_t i = 0; i < n; i++) {
            double s = 0;
            for (int p = 0; p < m->size; p++) s += all[(size_t)p * n + i];
            v[i] = s;
        }
    }
    free(all);
    return st;
}

void mn_mpi_abort(mn_mpi *m, int code) {
    (void)m;
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _Exit(code ? code : 1); /* MPI_Abort does not return; in case it does */
}
