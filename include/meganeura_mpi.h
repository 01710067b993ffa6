/* meganeura_mpi.h - the MPI binding of data-parallel training: an mn_dist
 * (meganeura.h) whose sum() runs over an MPI communicator.
 *
 * Built as libmeganeura_mpi.so when CMake finds MPI (Open MPI: Debian's
 * openmpi-bin, libopenmpi-dev); the core library never links MPI. The
 * `meganeura` program loads it with dlopen only when started by an MPI
 * launcher (mpirun), so the program itself runs without MPI installed.
 *
 * sum() is deterministic and equal on every rank: the n values are cut into
 * one contiguous part per rank; every rank sends part p to rank p
 * (MPI_Ialltoallv), rank p adds the parts it received in rank order 0, 1,
 * ..., size-1 in double and rounds once to float, and the sums are gathered
 * back to every rank (MPI_Iallgatherv). MPI_Allreduce's order of summation
 * is the implementation's (it may differ between runs, message sizes and
 * ranks); this one depends only on the rank count. Traffic per rank is
 * 2 (size-1)/size of the buffer each way, as a ring all-reduce.
 *
 * Failure handling: the communicator is a duplicate with MPI_ERRORS_RETURN,
 * so an MPI error becomes a message instead of an abort inside MPI; every
 * collective is non-blocking and polled against a deadline (timeout_s), so
 * a rank that died or hangs makes the others' sum() (and barrier) return an
 * error naming the wait, never block for ever. The communicator is then
 * unusable (MPI cannot cancel a collective): report the error and end the
 * job with mn_mpi_abort, which MPI_Abort's every rank.
 *
 * Threads: the session calls sum() from its communication thread, so MPI is
 * needed at MPI_THREAD_SERIALIZED at least (mn_mpi_create_world asks for
 * MPI_THREAD_MULTIPLE and accepts SERIALIZED); with SERIALIZED, make no MPI
 * call of your own while a data-parallel mn_session_step runs, and step one
 * data-parallel session at a time per mn_mpi.
 */
#ifndef MEGANEURA_MPI_H
#define MEGANEURA_MPI_H

#include "meganeura.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mn_mpi mn_mpi;

typedef struct mn_mpi_options {
    double timeout_s;    /* longest wait in one collective, seconds; 0: 600 */
    size_t bucket_bytes; /* mn_dist.bucket_bytes; 0: the session's default */
} mn_mpi_options;

/* Over MPI_COMM_WORLD, initialising MPI (MPI_Init_thread) unless it is
 * already; mn_mpi_destroy then finalises it. On failure *out is NULL and err
 * says why. */
mn_status mn_mpi_create_world(mn_mpi **out, int *argc, char ***argv, const mn_mpi_options *o, char *err,
                              size_t cap);
#ifdef MPI_VERSION /* include <mpi.h> before this header for it */
/* Over a duplicate of comm (MPI initialised by the caller at
 * MPI_THREAD_SERIALIZED or above). */
mn_status mn_mpi_create(mn_mpi **out, MPI_Comm comm, const mn_mpi_options *o, char *err, size_t cap);
#endif
/* Frees the duplicate communicator (and finalises MPI if create_world
 * initialised it). Accepts NULL. */
void mn_mpi_destroy(mn_mpi *m);
int mn_mpi_rank(const mn_mpi *m);
int mn_mpi_size(const mn_mpi *m);
/* The rank among the ranks on this host (MPI_COMM_TYPE_SHARED). */
int mn_mpi_local_rank(const mn_mpi *m);
/* For mn_session_options.dist; valid until mn_mpi_destroy. */
const mn_dist *mn_mpi_dist(mn_mpi *m);
/* Every rank reaches it, within the timeout. */
mn_status mn_mpi_barrier(mn_mpi *m, char *err, size_t cap);
/* Sums n doubles over the ranks in place (same order and bits on every
 * rank), within the timeout: counters, metrics. */
mn_status mn_mpi_sum_f64(mn_mpi *m, double *v, size_t n, char *err, size_t cap);
/* Ends every rank of the job (MPI_Abort on MPI_COMM_WORLD). Does not return. */
void mn_mpi_abort(mn_mpi *m, int code);

#ifdef __cplusplus
}
#endif
#endif /* MEGANEURA_MPI_H */
