/* metrics.c - the JSON-lines training log and the SVG curves; see metrics.h.
 *
 * Does not: know the commands' loops; draw (plot.c does).
 */
#include "cli/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/messages.h"
#include "cli/plot.h"
#include "cli/progress.h"
#include "io/file.h"
#include "io/text.h"

#define CLI_METRICS_STR_(x) #x
#define CLI_METRICS_STR(x) CLI_METRICS_STR_(x)

/* Opens path for writing from its start without following a link, without
 * blocking and only if it is (or becomes) a regular file. */
static FILE *open_log(const char *path, char *err, size_t cap) {
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd < 0) {
        snprintf(err, cap, "cannot write '%s': %s", show(path).s, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, cap, "'%s' is %s, not a regular file", show(path).s, io_kind(sb.st_mode));
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 || ftruncate(fd, 0) != 0) {
        snprintf(err, cap, "cannot write '%s': %s", show(path).s, strerror(errno));
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        snprintf(err, cap, "cannot write '%s': %s", show(path).s, strerror(errno));
        close(fd);
    }
    return f;
}

static int open_paths(metrics *m, const char *log_path, const char *plot_path) {
    char err[1024];
    if (log_path && !log_path[0]) return fail("--log needs a file name");
    if (plot_path && !plot_path[0]) return fail("--plot needs a file name");
    if (log_path && plot_path && strcmp(log_path, plot_path) == 0)
        return fail("--log and --plot name the same file %s", show(log_path).s);
    if (plot_path && io_probe_save_path(plot_path, err, sizeof err) != MN_OK) return fail("--plot: %s", err);
    if (log_path) {
        if (io_probe_save_path(log_path, err, sizeof err) != MN_OK) return fail("--log: %s", err);
        if (!(m->log = open_log(log_path, err, sizeof err))) return fail("--log: %s", err);
    }
    return 0;
}

int metrics_open(metrics *m, const char *log_path, const char *plot_path, const char *rate_key,
                 const char *eval_name) {
    memset(m, 0, sizeof *m);
    m->rate_key = rate_key;
    m->eval_name = eval_name;
    m->log_path = log_path;
    m->plot_path = plot_path;
    m->on = log_path || plot_path;
    m->t0 = progress_now();
    snprintf(m->title, sizeof m->title, "training");
    int rc = open_paths(m, log_path, plot_path);
    if (rc) {
        metrics_close(m);
        memset(m, 0, sizeof *m);
    }
    return rc;
}

void metrics_title(metrics *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->title, sizeof m->title, fmt, ap);
    va_end(ap);
}

void metrics_start_clock(metrics *m) { m->t0 = progress_now(); }
double metrics_time(const metrics *m) { return progress_now() - m->t0; }

/* ---- records ------------------------------------------------------------- */

static void put_json_string(FILE *f, const char *s) {
    /* escaped for a terminal first (broken UTF-8 and controls become \xNN,
     * plain ASCII), then for JSON */
    size_t n = io_esc_len(s) + 8; /* io_esc needs cap >= 8 */
    char *e = malloc(n);
    if (e) io_esc(e, n, s);
    fputc('"', f);
    for (const char *p = e ? e : "?"; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
    free(e);
}

static void key(metrics *m, const char *k) {
    fprintf(m->log, "%s\"%s\":", m->fields++ ? "," : "", k);
}

void metrics_begin(metrics *m, const char *type) {
    if (strcmp(type, "run") == 0) m->started = true;
    if (!m->log) return;
    m->fields = 0;
    fputc('{', m->log);
    key(m, "type");
    put_json_string(m->log, type);
    key(m, "time_s");
    fprintf(m->log, "%.3f", metrics_time(m));
}

void metrics_int(metrics *m, const char *k, int64_t v) {
    if (!m->log) return;
    key(m, k);
    fprintf(m->log, "%" PRId64, v);
}

void metrics_u64(metrics *m, const char *k, uint64_t v) {
    if (!m->log) return;
    key(m, k);
    fprintf(m->log, "%" PRIu64, v);
}

void metrics_num(metrics *m, const char *k, double v) {
    if (!m->log) return;
    key(m, k);
    if (isfinite(v)) fprintf(m->log, "%.7g", v);
    else fputs("null", m->log);
}

void metrics_str(metrics *m, const char *k, const char *v) {
    if (!m->log) return;
    key(m, k);
    put_json_string(m->log, v ? v : "");
}

int metrics_end(metrics *m) {
    if (!m->log || m->failed) return 0;
    fputs("}\n", m->log);
    if (fflush(m->log) != 0 || ferror(m->log)) {
        m->failed = true;
        return fail("--log: cannot write %s: %s", show(m->log_path).s, strerror(errno));
    }
    return 0;
}

/* ---- points -------------------------------------------------------------- */

static bool push(metrics_series *s, double x, double y) {
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 1024;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx) return false;
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny) return false;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return true;
}

static int keep(metrics *m, metrics_series *s, double x, double y) {
    if (!m->plot_path) return 0;
    return push(s, x, y) ? 0 : fail("out of memory for the --plot points");
}

int metrics_train(metrics *m, int64_t step, int64_t epoch, double loss, double accuracy, double lr, double rate) {
    if (!m->on) return 0;
    metrics_begin(m, "train");
    metrics_int(m, "step", step);
    metrics_int(m, "epoch", epoch);
    metrics_num(m, "loss", loss);
    if (!isnan(accuracy)) metrics_num(m, "accuracy", accuracy);
    metrics_num(m, "lr", lr);
    metrics_num(m, m->rate_key, rate);
    int rc = metrics_end(m);
    if (!rc) rc = keep(m, &m->train_loss, (double)step, loss);
    if (!rc && !isnan(accuracy)) rc = keep(m, &m->train_acc, (double)step, 100 * accuracy);
    return rc;
}

int metrics_eval(metrics *m, int64_t step, int64_t epoch, double loss, double accuracy, bool with_perplexity) {
    if (!m->on) return 0;
    metrics_begin(m, "eval");
    metrics_int(m, "step", step);
    metrics_int(m, "epoch", epoch);
    metrics_num(m, "eval_loss", loss);
    if (with_perplexity) metrics_num(m, "eval_perplexity", exp(loss));
    if (!isnan(accuracy)) metrics_num(m, "eval_accuracy", accuracy);
    int rc = metrics_end(m);
    if (!rc && !isnan(loss)) rc = keep(m, &m->eval_loss, (double)step, loss);
    if (!rc && !isnan(accuracy)) rc = keep(m, &m->eval_acc, (double)step, 100 * accuracy);
    if (!rc) rc = metrics_plot(m);
    return rc;
}

int metrics_finish(metrics *m, int64_t steps, const char *status) {
    if (!m->on || !m->started) return 0;
    metrics_begin(m, "end");
    metrics_int(m, "steps", steps);
    metrics_str(m, "status", status);
    int rc = metrics_end(m);
    int rp = metrics_plot(m);
    return rc ? rc : rp;
}

/* ---- the plot ------------------------------------------------------------ */

/* Trailing mean over METRICS_SMOOTH points of s (finite values only) into
 * out (allocated, s->n values). */
static bool moving_mean(const metrics_series *s, double **out) {
    double *y = malloc((size_t)(s->n ? s->n : 1) * sizeof *y);
    if (!y) return false;
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t i = 0; i < s->n; i++) {
        if (isfinite(s->y[i])) sum += s->y[i], cnt++;
        if (i >= METRICS_SMOOTH && isfinite(s->y[i - METRICS_SMOOTH])) sum -= s->y[i - METRICS_SMOOTH], cnt--;
        y[i] = cnt ? sum / (double)cnt : NAN;
    }
    *out = y;
    return true;
}

static plot_series series(const char *label, const char *color, const metrics_series *s, const double *y) {
    plot_series p = {label, color, s->x, y ? y : s->y, s->n, false, false};
    return p;
}

#define COLOR_TRAIN "#1f77b4"
#define COLOR_EVAL "#d62728"

int metrics_plot(metrics *m) {
    if (!m->plot_path || m->failed) return 0;
    /* a curve long enough to be noisy is drawn faint, under its moving mean */
    bool smooth_loss = m->train_loss.n >= 2 * METRICS_SMOOTH, smooth_acc = m->train_acc.n >= 2 * METRICS_SMOOTH;
    double *mean_loss = NULL, *mean_acc = NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = 0;
    char eval_loss[48], eval_acc[48];
    snprintf(eval_loss, sizeof eval_loss, "%s loss", m->eval_name);
    snprintf(eval_acc, sizeof eval_acc, "%s accuracy", m->eval_name);
    if ((smooth_loss && !moving_mean(&m->train_loss, &mean_loss)) ||
        (smooth_acc && !moving_mean(&m->train_acc, &mean_acc))) {
        rc = fail("out of memory for the plot");
        goto done;
    }
    plot_panel panels[2];
    memset(panels, 0, sizeof panels);
    plot_panel *lp = &panels[0], *ap = &panels[1];
    lp->ylabel = "loss";
    lp->log_allowed = true;
    if (smooth_loss) {
        lp->series[lp->n_series] = series("train loss (per step)", COLOR_TRAIN, &m->train_loss, NULL);
        lp->series[lp->n_series++].faint = true;
        lp->series[lp->n_series++] =
            series("train loss (mean of " CLI_METRICS_STR(METRICS_SMOOTH) " steps)", COLOR_TRAIN, &m->train_loss,
                   mean_loss);
    } else if (m->train_loss.n) {
        lp->series[lp->n_series++] = series("train loss", COLOR_TRAIN, &m->train_loss, NULL);
    }
    if (m->eval_loss.n) {
        lp->series[lp->n_series] = series(eval_loss, COLOR_EVAL, &m->eval_loss, NULL);
        lp->series[lp->n_series++].markers = true;
    }
    int npanels = 1;
    if (m->train_acc.n || m->eval_acc.n) {
        npanels = 2;
        ap->ylabel = "accuracy (%)";
        ap->percent = true;
        ap->legend_below = true;
        if (m->train_acc.n)
            ap->series[ap->n_series++] =
                smooth_acc ? series("train accuracy (mean of " CLI_METRICS_STR(METRICS_SMOOTH) " steps)",
                                    COLOR_TRAIN, &m->train_acc, mean_acc)
                           : series("train accuracy", COLOR_TRAIN, &m->train_acc, NULL);
        if (m->eval_acc.n) {
            ap->series[ap->n_series] = series(eval_acc, COLOR_EVAL, &m->eval_acc, NULL);
            ap->series[ap->n_series++].markers = true;
        }
    }
    FILE *mem = open_memstream(&buf, &len);
    bool ok = mem && plot_svg(mem, m->title, "step", panels, npanels);
    if (mem && fclose(mem) != 0) ok = false;
    if (!ok) {
        rc = fail("out of memory for the plot");
        goto done;
    }
    char err[1024];
    io_atomic w;
    if (io_atomic_open(&w, m->plot_path, err, sizeof err) != MN_OK ||
        io_atomic_write(&w, buf, len, err, sizeof err) != MN_OK || io_atomic_commit(&w, err, sizeof err) != MN_OK) {
        io_atomic_abort(&w);
        m->plot_path = NULL; /* reported once */
        rc = fail("--plot: %s", err);
    }
done:
    free(buf);
    free(mean_loss);
    free(mean_acc);
    return rc;
}

void metrics_close(metrics *m) {
    if (m->log) fclose(m->log);
    m->log = NULL;
    metrics_series *all[4] = {&m->train_loss, &m->train_acc, &m->eval_loss, &m->eval_acc};
    for (int i = 0; i < 4; i++) {
        free(all[i]->x);
        free(all[i]->y);
        memset(all[i], 0, sizeof *all[i]);
    }
}
