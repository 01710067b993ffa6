/* dist.c - data-parallel training in the `meganeura` program (dist.h): the
 * MPI binding loaded at run time, rank roles, failure handling. */
#include "cli/dist.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/messages.h"
#include "meganeura_mpi.h"

/* the binding's entry points, resolved with dlsym */
typedef struct mpi_api {
    mn_status (*create_world)(mn_mpi **, int *, char ***, const mn_mpi_options *, char *, size_t);
    void (*destroy)(mn_mpi *);
    int (*rank)(const mn_mpi *);
    int (*size)(const mn_mpi *);
    int (*local_rank)(const mn_mpi *);
    const mn_dist *(*dist)(mn_mpi *);
    mn_status (*barrier)(mn_mpi *, char *, size_t);
    mn_status (*sum_f64)(mn_mpi *, double *, size_t, char *, size_t);
    void (*abort_job)(mn_mpi *, int);
} mpi_api;

static struct {
    bool tried, ok;
    cli_dist d;
    void *lib;
    mpi_api api;
    mn_mpi *mpi;
} g;

static char g_term_msg[160];
static size_t g_term_len;

static void on_term(int sig) {
    (void)sig;
    ssize_t w = write(STDERR_FILENO, g_term_msg, g_term_len);
    (void)w;
    _exit(EXIT_ERROR);
}

static bool launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

static void *open_binding(char *why, size_t cap) {
    const char *env = getenv("MEGANEURA_MPI_LIB");
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_GLOBAL);
        if (!h) snprintf(why, cap, "MEGANEURA_MPI_LIB=%s: %s", show(env).s, dlerror());
        return h;
    }
    /* next to the executable (the build folder), then the search path */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            strcpy(slash + 1, "libmeganeura_mpi.so");
            void *h = dlopen(exe, RTLD_NOW | RTLD_GLOBAL);
            if (h) return h;
        }
    }
    void *h = dlopen("libmeganeura_mpi.so", RTLD_NOW | RTLD_GLOBAL);
    if (!h) snprintf(why, cap, "%s", dlerror());
    return h;
}

static bool resolve(void *lib, mpi_api *a, char *why, size_t cap) {
#define SYM(field, name)                                                                                             \
    do {                                                                                                             \
        *(void **)&a->field = dlsym(lib, name);                                                                      \
        if (!a->field) {                                                                                             \
            snprintf(why, cap, "libmeganeura_mpi.so has no %s", name);                                              \
            return false;                                                                                            \
        }                                                                                                            \
    } while (0)
    SYM(create_world, "mn_mpi_create_world");
    SYM(destroy, "mn_mpi_destroy");
    SYM(rank, "mn_mpi_rank");
    SYM(size, "mn_mpi_size");
    SYM(local_rank, "mn_mpi_local_rank");
    SYM(dist, "mn_mpi_dist");
    SYM(barrier, "mn_mpi_barrier");
    SYM(sum_f64, "mn_mpi_sum_f64");
    SYM(abort_job, "mn_mpi_abort");
#undef SYM
    return true;
}

static double env_seconds(const char *name, double dflt, bool *bad) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (*end || errno || !(x > 0) || x > 1e7) {
        *bad = true;
        return dflt;
    }
    return x;
}

const cli_dist *cli_dist_get(void) {
    if (g.tried) return g.ok ? &g.d : NULL;
    g.tried = true;
    g.d.rank = 0;
    g.d.size = 1;
    g.d.local_rank = 0;
    if (!launched_by_mpi()) {
        g.ok = true;
        return &g.d;
    }
    bool bad = false;
    g.d.timeout_s = env_seconds("MEGANEURA_DIST_TIMEOUT", 600, &bad);
    if (bad) {
        fail("MEGANEURA_DIST_TIMEOUT='%s': want seconds > 0", show(getenv("MEGANEURA_DIST_TIMEOUT")).s);
        return NULL;
    }
    double bucket = env_seconds("MEGANEURA_DIST_BUCKET", 0, &bad); /* bytes; the same parser */
    if (bad) {
        fail("MEGANEURA_DIST_BUCKET='%s': want a byte count > 0", show(getenv("MEGANEURA_DIST_BUCKET")).s);
        return NULL;
    }
    char why[1024] = "";
    if (!(g.lib = open_binding(why, sizeof why)) || !resolve(g.lib, &g.api, why, sizeof why)) {
        fail("started by an MPI launcher, but the MPI binding cannot be loaded: %s (build with Open MPI installed: "
             "openmpi-bin, libopenmpi-dev; or set MEGANEURA_MPI_LIB)", why);
        return NULL;
    }
    mn_mpi_options o = {g.d.timeout_s, (size_t)bucket};
    int argc = 0;
    char **argv = NULL;
    if (g.api.create_world(&g.mpi, &argc, &argv, &o, why, sizeof why)) {
        fail("starting MPI: %s", why);
        return NULL;
    }
    g.d.on = true;
    g.d.rank = g.api.rank(g.mpi);
    g.d.size = g.api.size(g.mpi);
    g.d.local_rank = g.api.local_rank(g.mpi);
    g.d.dist = g.api.dist(g.mpi);
    messages_set_rank(g.d.rank);
    /* the launcher ends the other ranks with SIGTERM when one fails */
    snprintf(g_term_msg, sizeof g_term_msg,
             "meganeura: error: rank %d: ended by SIGTERM (the MPI launcher ends every rank when one fails or is "
             "interrupted; see the first error)\n", g.d.rank);
    g_term_len = strlen(g_term_msg);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    /* the library picks the device by local rank (backend_local_rank) */
    char lr[16];
    snprintf(lr, sizeof lr, "%d", g.d.local_rank);
    setenv("MEGANEURA_LOCAL_RANK", lr, 0);
    g.ok = true;
    return &g.d;
}

bool cli_dist_root(void) { return !g.d.on || g.d.rank == 0; }

int cli_dist_barrier(const char *what) {
    if (!g.d.on) return 0;
    char why[1024];
    if (g.api.barrier(g.mpi, why, sizeof why)) return fail("%s: %s", what, why);
    return 0;
}

int cli_dist_sum(double *v, int n) {
    if (!g.d.on) return 0;
    char why[1024];
    if (g.api.sum_f64(g.mpi, v, (size_t)n, why, sizeof why)) return fail("%s", why);
    return 0;
}

int cli_dist_end(int rc) {
    if (!g.d.on) return rc;
    if (rc != 0 && rc != EXIT_INTERRUPTED) {
        fflush(stdout);
        fflush(stderr);
        g.api.abort_job(g.mpi, rc); /* does not return */
    }
    g.api.destroy(g.mpi);
    return rc;
}

FILE *cli_dist_progress_stream(void) {
    static FILE *null;
    if (cli_dist_root()) return stderr;
    if (!null) null = fopen("/dev/null", "w");
    return null ? null : stderr;
}

void cli_dist_report(const mn_session *s, double secs) {
    mn_dist_stats st;
    if (!g.d.on || !cli_dist_root() || mn_session_dist_stats(s, &st) || st.steps <= 0) return;
    const double n = (double)st.steps, ms = 1e3 / n;
    fprintf(stderr, "data parallel: %d ranks, %lld steps of %.1f ms; per step %d all-reduce calls of %.2f MB "
            "in all: %.2f ms communicating, %.2f ms of it not overlapped with the backward pass, %.2f ms "
            "copying gradients\n", g.d.size, (long long)st.steps, secs * ms, st.buckets,
            (double)st.floats * 4 / 1e6, st.sum_seconds * ms, st.wait_seconds * ms, st.copy_seconds * ms);
}

void cli_dist_fault(int64_t step) {
    const char *f = getenv("MEGANEURA_FAULT_DIST");
    if (!f || !g.d.on) return;
    int r = -1;
    long long s = -1;
    double secs = 0;
    if (sscanf(f, "kill:%d:%lld", &r, &s) == 2 && r == g.d.rank && s == step) {
        fprintf(stderr, "meganeura: fault injection: rank %d kills itself before step %lld\n", r, s);
        raise(SIGKILL);
    }
    if (sscanf(f, "sleep:%d:%lld:%lf", &r, &s, &secs) == 3 && r == g.d.rank && s == step) {
        fprintf(stderr, "meganeura: fault injection: rank %d sleeps %g s before step %lld\n", r, secs, s);
        struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
        while (nanosleep(&ts, &ts) && errno == EINTR) {
        }
    }
}
