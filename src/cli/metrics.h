/* metrics.h - the training log (`--log FILE.jsonl`) and curves
 * (`--plot FILE.svg`) of `meganeura train mnist` and `meganeura train lm`.
 *
 * The log is JSON lines: one object per line, written and flushed as
 * training goes (tail -f works), every object with "type" and "time_s"
 * (seconds since training started, monotonic clock) first:
 *   {"type":"run", ...}    once: the command and its settings
 *   {"type":"train", "step", "epoch", "loss", "accuracy", "lr", "<unit>_per_s"}
 *                          every step: step counts optimizer steps from 1,
 *                          epoch from 1; loss and accuracy (a fraction) of
 *                          that step's batch; lr the learning rate the step
 *                          used; throughput since the previous eval record
 *                          (or the start): images/s or tokens/s
 *   {"type":"eval", "step", "epoch", "eval_loss", "eval_accuracy", ...}
 *                          at each evaluation
 *   {"type":"end", "steps", "status"}    when training ends ("ok",
 *                          "interrupted" or "failed")
 * Non-finite numbers are written as null. docs/METRICS.md lists every field.
 *
 * The plot keeps the train and eval points in memory and is rewritten
 * (atomically: temporary file and rename) at each evaluation and at the end,
 * so an interrupted run leaves a chart of what it did. Panels: loss (per
 * step, their moving mean, eval loss) and, when there is any, accuracy.
 *
 * Both paths are checked before training starts, like --checkpoint: only a
 * regular file is replaced (a directory, FIFO, device or symbolic link is
 * refused, links are not followed) and the folder must be writable.
 *
 * Does not: decide when to evaluate (the commands do), or read a log back.
 */
#ifndef MN_CLI_METRICS_H
#define MN_CLI_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Steps in the moving mean of the plotted training curves (as the progress
 * line averages). */
#define METRICS_SMOOTH 50

typedef struct metrics_series {
    double *x, *y;
    int64_t n, cap;
} metrics_series;

typedef struct metrics {
    bool on;               /* a log or a plot was asked for */
    FILE *log;             /* NULL without --log */
    const char *log_path;  /* the caller's strings, outliving the writer */
    const char *plot_path; /* NULL without --plot */
    const char *rate_key;  /* "images_per_s" or "tokens_per_s" */
    const char *eval_name; /* the evaluations in the chart's legend: "test", "eval" */
    char title[160];
    double t0;
    int fields; /* fields of the record being written */
    bool started; /* the run record was begun: finish writes the end record and the final plot */
    bool failed;
    metrics_series train_loss, train_acc, eval_loss, eval_acc;
} metrics;

/* Checks both paths (either may be NULL) and opens the log, truncating it.
 * Returns 0, or EXIT_ERROR after an error message naming the flag; m is then
 * off (nothing is written to either path). */
int metrics_open(metrics *m, const char *log_path, const char *plot_path, const char *rate_key,
                 const char *eval_name);
/* The title of the chart. */
void metrics_title(metrics *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Restarts the clock (time_s 0): just before the run record. */
void metrics_start_clock(metrics *m);
double metrics_time(const metrics *m);

/* A record: begin, fields, end. Without a log only the plot's points are
 * kept. end writes the line; it returns 0, or EXIT_ERROR after an error
 * message when the log cannot be written (disk full). */
void metrics_begin(metrics *m, const char *type);
void metrics_int(metrics *m, const char *key, int64_t v);
void metrics_u64(metrics *m, const char *key, uint64_t v);
void metrics_num(metrics *m, const char *key, double v);
void metrics_str(metrics *m, const char *key, const char *v);
int metrics_end(metrics *m);

/* One training step: writes the "train" record (accuracy NaN: none) and
 * keeps the points. rate: samples (images or tokens) per second. */
int metrics_train(metrics *m, int64_t step, int64_t epoch, double loss, double accuracy, double lr, double rate);
/* One evaluation: the "eval" record with eval_loss and eval_accuracy (NaN:
 * left out) plus, for a language model, eval_perplexity (exp of the loss;
 * with_perplexity). Then the plot is rewritten. */
int metrics_eval(metrics *m, int64_t step, int64_t epoch, double loss, double accuracy, bool with_perplexity);
/* The "end" record and the final plot, if the run record was written (a
 * command that failed before training writes neither). status: "ok",
 * "interrupted", "failed". */
int metrics_finish(metrics *m, int64_t steps, const char *status);
/* Writes the plot now (no-op without --plot). */
int metrics_plot(metrics *m);
/* Closes the log and frees the points; accepts a closed or zeroed m. */
void metrics_close(metrics *m);

#endif
