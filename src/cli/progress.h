/* progress.h - training progress on stderr for the meganeura CLI.
 *
 * On a terminal: one line redrawn in place (at most ~10 times a second),
 *   epoch 3/10 [=======>     ] 62% loss 0.2345 acc 93.1% 812 steps/s ETA 0:07
 * finished with a newline at the end of each epoch. Otherwise (a log file, a
 * pipe, CI): plain lines with the same fields (no bar) at the end of each
 * epoch, and inside an epoch at its tenths when at least 2 s have passed
 * since the last line. Loss and accuracy are averages over the most recent
 * PROGRESS_WINDOW training batches.
 *
 * Does not: write to stdout (stdout carries results), or time anything but
 * the steps it is told about.
 */
#ifndef MN_CLI_PROGRESS_H
#define MN_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define PROGRESS_WINDOW 50

typedef struct progress {
    FILE *f;
    bool tty;
    int epochs;
    int64_t steps_per_epoch;
    int epoch;          /* 1-based, the epoch under way */
    int64_t step;       /* steps done in this epoch */
    int64_t done;       /* steps done in all epochs */
    double t0;          /* when progress_begin was called */
    double last_draw;   /* time of the last line or redraw */
    int next_tenth;     /* plain mode: next tenth of the epoch to report */
    float win_loss[PROGRESS_WINDOW];
    int win_correct[PROGRESS_WINDOW];
    int win_count[PROGRESS_WINDOW];
    int win_len, win_pos;
} progress;

/* Monotonic clock in seconds. */
double progress_now(void);
/* Formats seconds as m:ss, or h:mm:ss from an hour on. */
void progress_format_duration(char *dst, size_t cap, double seconds);

void progress_begin(progress *p, FILE *f, int epochs, int64_t steps_per_epoch);
void progress_epoch_begin(progress *p, int epoch);
/* One training step done: its batch loss, and how many of its batch
 * predictions were right. */
void progress_step(progress *p, float loss, int correct, int batch);
/* Draws the final state of the epoch (and the newline on a terminal). */
void progress_epoch_end(progress *p);

#endif
