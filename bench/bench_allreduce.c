/* bench_allreduce.c - the MPI binding's deterministic all-reduce alone
 * (docs/PERF.md, "Data-parallel training"): for each size, REPS calls of
 * mn_dist.sum on a buffer of that many floats, under mpirun:
 *
 *   mpirun -np 2 meganeura_bench_allreduce [floats...]
 *
 * Rank 0 prints one JSON line per size: floats, MB, ms per call (median),
 * GB/s of buffer reduced. Checks the result (every rank adds rank+1 at
 * each position: the sum is size*(size+1)/2 everywhere).
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "meganeura_mpi.h"

#define REPS 9

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    char err[512];
    mn_mpi *m;
    if (mn_mpi_create_world(&m, &argc, &argv, NULL, err, sizeof err)) return fprintf(stderr, "%s\n", err), 1;
    const mn_dist *d = mn_mpi_dist(m);
    size_t sizes[16] = {1024, 102400, 1048576, 16777216};
    int ns = 4;
    if (argc > 1) {
        ns = 0;
        for (int i = 1; i < argc && ns < 16; i++) sizes[ns++] = (size_t)strtoull(argv[i], NULL, 10);
    }
    int bad = 0;
    for (int k = 0; k < ns; k++) {
        const size_t n = sizes[k];
        float *buf = malloc(n * sizeof *buf + 1);
        double t[REPS];
        for (int r = 0; r < REPS && !bad; r++) {
            for (size_t i = 0; i < n; i++) buf[i] = (float)(d->rank + 1);
            mn_mpi_barrier(m, err, sizeof err);
            const double t0 = now_s();
            if (d->sum(d->user, buf, n, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                bad = 1;
            }
            t[r] = now_s() - t0;
            const float want = (float)(d->size * (d->size + 1) / 2);
            for (size_t i = 0; i < n && !bad; i++)
                if (buf[i] != want) bad = fprintf(stderr, "wrong sum at %zu: %g\n", i, (double)buf[i]) > 0;
        }
        qsort(t, REPS, sizeof *t, cmp);
        if (d->rank == 0 && !bad)
            printf("{\"ranks\":%d,\"floats\":%zu,\"MB\":%.3f,\"ms\":%.3f,\"GBps\":%.3f}\n", d->size, n,
                   (double)n * 4 / 1e6, t[REPS / 2] * 1e3, (double)n * 4 / 1e9 / t[REPS / 2]);
        free(buf);
    }
    mn_mpi_destroy(m);
    return bad;
}
