/* progress.c - training progress display; see progress.h.
 *
 * Does not: write to stdout.
 */
#include "cli/progress.h"

#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 24
/* Seconds between redraws on a terminal, and between plain lines inside an
 * epoch (plain lines come at tenths of an epoch, and at its end). */
#define TTY_MIN_INTERVAL 0.1
#define PLAIN_MIN_INTERVAL 2.0

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void progress_format_duration(char *dst, size_t cap, double seconds) {
    if (!(seconds >= 0) || seconds > 1e7) {
        snprintf(dst, cap, "?");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(dst, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(dst, cap, "%ld:%02ld", s / 60, s % 60);
}

void progress_begin(progress *p, FILE *f, int epochs, int64_t steps_per_epoch) {
    memset(p, 0, sizeof *p);
    p->f = f;
    p->tty = isatty(fileno(f)) != 0;
    p->epochs = epochs;
    p->steps_per_epoch = steps_per_epoch > 0 ? steps_per_epoch : 1;
    p->t0 = progress_now();
    p->last_draw = p->t0;
}

void progress_epoch_begin(progress *p, int epoch) {
    p->epoch = epoch;
    p->step = 0;
    p->next_tenth = 1;
}

/* Writes the status line (without a line ending) into buf. */
static void format_line(const progress *p, char *buf, size_t cap, bool bar) {
    double frac = (double)p->step / (double)p->steps_per_epoch;
    if (frac > 1) frac = 1;
    size_t n = 0;
    int w = snprintf(buf, cap, "epoch %d/%d ", p->epoch, p->epochs);
    n = w > 0 ? (size_t)w : 0;
    if (bar && n + BAR_WIDTH + 3 < cap) {
        int fill = (int)(frac * BAR_WIDTH);
        buf[n++] = '[';
        /* "=======>     ": '=' for the part done, '>' at the head. */
        for (int i = 0; i < BAR_WIDTH; i++) buf[n++] = i < fill ? '=' : i == fill ? '>' : ' ';
        buf[n++] = ']';
        buf[n++] = ' ';
        buf[n] = 0;
    }
    if (n >= cap) return;
    float loss = 0;
    long correct = 0, count = 0;
    for (int i = 0; i < p->win_len; i++) {
        loss += p->win_loss[i];
        correct += p->win_correct[i];
        count += p->win_count[i];
    }
    double elapsed = progress_now() - p->t0;
    double rate = elapsed > 0 ? (double)p->done / elapsed : 0;
    int64_t total = (int64_t)p->epochs * p->steps_per_epoch;
    char eta[32];
    if (rate > 0) progress_format_duration(eta, sizeof eta, (double)(total - p->done) / rate);
    else snprintf(eta, sizeof eta, "?");
    if (p->win_len > 0)
        snprintf(buf + n, cap - n, "%3d%% loss %.4f acc %.1f%% %.0f steps/s ETA %s",
                 (int)(frac * 100), loss / (float)p->win_len,
                 count ? 100.0 * (double)correct / (double)count : 0.0, rate, eta);
    else snprintf(buf + n, cap - n, "%3d%%", (int)(frac * 100));
}

static void draw(progress *p, bool final) {
    char line[256];
    p->last_draw = progress_now();
    if (p->tty) {
        format_line(p, line, sizeof line, true);
        /* \r and erase-to-end-of-line redraw the line in place. */
        fprintf(p->f, "\r%s\033[K%s", line, final ? "\n" : "");
    } else {
        format_line(p, line, sizeof line, false);
        fprintf(p->f, "%s\n", line);
    }
    fflush(p->f);
}

void progress_step(progress *p, float loss, int correct, int batch) {
    p->step++;
    p->done++;
    p->win_loss[p->win_pos] = loss;
    p->win_correct[p->win_pos] = correct;
    p->win_count[p->win_pos] = batch;
    p->win_pos = (p->win_pos + 1) % PROGRESS_WINDOW;
    if (p->win_len < PROGRESS_WINDOW) p->win_len++;
    if (p->step >= p->steps_per_epoch) return; /* progress_epoch_end draws the last state */
    if (p->tty) {
        if (progress_now() - p->last_draw >= TTY_MIN_INTERVAL) draw(p, false);
    } else if (p->next_tenth < 10 && p->step * 10 >= p->next_tenth * p->steps_per_epoch) {
        while (p->next_tenth < 10 && p->step * 10 >= p->next_tenth * p->steps_per_epoch)
            p->next_tenth++;
        /* A tenth of a short epoch is not worth a line of its own. */
        double now = progress_now();
        if (now - p->last_draw >= PLAIN_MIN_INTERVAL) draw(p, false);
    }
}

void progress_epoch_end(progress *p) { draw(p, true); }
