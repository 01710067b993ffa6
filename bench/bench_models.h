/* bench_models.h - the model workloads of meganeura_bench (bench_models.c).
 *
 * Does not: time the MLPs or the GEMM (bench.c does).
 */
#ifndef MN_BENCH_MODELS_H
#define MN_BENCH_MODELS_H

#include <meganeura.h>
#include <stdio.h>

/* One line per workload: its name and what it is (SmolLM2 and Whisper
 * included, with the program that times them or why none does). */
void bench_models_list(FILE *f);
/* Whether workload name matches --only's list: a comma-separated list of
 * parts of names (NULL matches every name). */
bool bench_name_matches(const char *name, const char *only);
/* Runs the model workloads whose name bench_name_matches only (every one
 * when all is true and only is NULL) with matrix products in prec (the fast contract:
 * f16 adds dynamic loss scaling to training); returns how many ran. */
int bench_models_run(const char *only, bool all, mn_backend_kind be, int warmup, int runs, mn_nonfinite nf,
                     mn_precision prec);

#endif
