/* dist.h - data-parallel training in the `meganeura` program: a process
 * started by an MPI launcher (`mpirun -np N meganeura train ...`) is one
 * rank of N.
 *
 * The program does not link MPI: when the launcher's environment is present
 * (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE) the first training command
 * loads libmeganeura_mpi.so with dlopen (MEGANEURA_MPI_LIB, else next to the
 * executable, else the library search path) and initialises MPI through it;
 * without the launcher nothing changes. Environment: MEGANEURA_DIST_TIMEOUT
 * (seconds, default 600): the longest a rank waits for the others in one
 * collective before it reports them lost and ends the job;
 * MEGANEURA_DIST_BUCKET (bytes): gradient bytes per all-reduce call.
 *
 * Roles: every rank trains (its shard of every global batch); rank 0 alone
 * writes checkpoints, results (stdout) and progress; every rank reports
 * its own errors ("meganeura: error: rank R: ..."). A command that fails on
 * one rank ends every rank (MPI_Abort) instead of leaving them waiting; a
 * rank ended by the launcher (SIGTERM, after another rank died) says so.
 *
 * Tests only: MEGANEURA_FAULT_DIST=kill:R:S makes rank R kill itself
 * (SIGKILL) before its step S (0-based, counted from the start of this
 * run), sleep:R:S:SECONDS makes it sleep there.
 *
 * Does not: pick GPUs (the library does, by local rank: backend.h), reduce
 * gradients (the session does, through the binding's mn_dist).
 */
#ifndef MN_CLI_DIST_H
#define MN_CLI_DIST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "meganeura.h"

typedef struct cli_dist {
    bool on;       /* started by an MPI launcher */
    int rank, size, local_rank;
    double timeout_s;
    const mn_dist *dist; /* for mn_session_options.dist; NULL when off */
} cli_dist;

/* The process's context, started on first use (loading the binding and
 * initialising MPI under a launcher). On failure prints why and returns
 * NULL. */
const cli_dist *cli_dist_get(void);
/* True on rank 0 and when not distributed: the rank that writes. */
bool cli_dist_root(void);
/* All ranks reach this point (within the timeout); 0 or EXIT_ERROR after
 * printing why. No-op when not distributed. */
int cli_dist_barrier(const char *what);
/* Sums n doubles over the ranks in place (rank order); 0 or EXIT_ERROR. */
int cli_dist_sum(double *v, int n);
/* main(): the exit status of the command; under a launcher a failure ends
 * every rank (MPI_Abort, does not return), success finalises MPI. */
int cli_dist_end(int rc);
/* Where progress goes: stderr on rank 0, nowhere on the others. */
FILE *cli_dist_progress_stream(void);
/* Rank 0, data parallel: one line on stderr with what the steps spent
 * communicating (mn_session_dist_stats) against secs of training. */
void cli_dist_report(const mn_session *s, double secs);
/* The training loops call this before each step (fault injection). */
void cli_dist_fault(int64_t step);

/* The rows [*lo, *lo + per_rank) of a global batch of per_rank * size rows
 * that this rank trains on. */
static inline int64_t cli_dist_shard_first(const cli_dist *d, int64_t per_rank) {
    return d && d->on ? (int64_t)d->rank * per_rank : 0;
}
static inline int64_t cli_dist_ranks(const cli_dist *d) { return d && d->on ? d->size : 1; }

#endif
