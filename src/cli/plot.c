/* plot.c - training curves as SVG line charts; see plot.h.
 *
 * Layout (pixels): a title band, then one band of PANEL_H per panel. Inside a
 * band the frame leaves room on the left for the y tick labels and the
 * rotated y label, and below for the x tick labels; the x label sits under
 * the last panel. Curves are clipped to their frame.
 *
 * Does not: allocate, or read anything but its arguments.
 */
#include "cli/plot.h"

#include <math.h>
#include <string.h>

#define TITLE_H 40
#define PANEL_H 290
#define XLABEL_H 26
#define FRAME_LEFT 82
#define FRAME_RIGHT (PLOT_WIDTH - 24)
#define FRAME_TOP_PAD 10   /* band top to frame top */
#define FRAME_BOTTOM_PAD 40 /* frame bottom to band bottom: the x tick labels */
#define MAX_TICKS 40
#define CHAR_W 6.8 /* mean width of a 12 px sans-serif character, for the legend box */

typedef struct axis {
    double lo, hi;
    bool log;
    double ticks[MAX_TICKS];
    int n_ticks;
    int decimals; /* linear: digits after the point in tick labels */
} axis;

/* 1, 2 or 5 times a power of ten, near span / target. */
static double nice_step(double span, int target) {
    double raw = span / target;
    double p = pow(10, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void axis_linear(axis *a, double lo, double hi, int target, bool percent) {
    if (!(hi > lo)) {
        double d = fabs(lo) > 1e-12 ? fabs(lo) * 0.1 : 1;
        lo -= d;
        hi += d;
    }
    double st = nice_step(hi - lo, target);
    a->log = false;
    a->lo = floor(lo / st) * st;
    a->hi = ceil(hi / st) * st;
    if (percent) {
        if (a->lo < 0) a->lo = 0;
        if (a->hi > 100) a->hi = 100;
        if (!(a->hi > a->lo)) a->lo = 0, a->hi = 100;
    }
    a->n_ticks = 0;
    for (double k = ceil(a->lo / st - 1e-9); k * st <= a->hi + st * 1e-9 && a->n_ticks < MAX_TICKS; k++)
        a->ticks[a->n_ticks++] = k * st;
    a->decimals = 0;
    while (a->decimals < 8) {
        double sc = st * pow(10, a->decimals);
        if (fabs(sc - round(sc)) < 1e-6 * sc) break;
        a->decimals++;
    }
}

/* A log axis over [lo, hi] (both > 0) padded a little, ticks at 1, 2 and 5
 * times powers of ten (only powers of ten beyond three decades). False when
 * fewer than two ticks would show. */
static bool axis_log(axis *a, double lo, double hi) {
    double l0 = log10(lo), l1 = log10(hi), pad = (l1 - l0) * 0.04;
    l0 -= pad;
    l1 += pad;
    a->log = true;
    a->lo = pow(10, l0);
    a->hi = pow(10, l1);
    a->n_ticks = 0;
    static const double mult[3] = {1, 2, 5};
    int nm = l1 - l0 > 3 ? 1 : 3;
    for (double k = floor(l0); k <= ceil(l1) && a->n_ticks < MAX_TICKS; k++)
        for (int m = 0; m < nm && a->n_ticks < MAX_TICKS; m++) {
            double v = mult[m] * pow(10, k);
            if (v >= a->lo && v <= a->hi) a->ticks[a->n_ticks++] = v;
        }
    return a->n_ticks >= 2;
}

/* Position of v along the axis, 0 at lo and 1 at hi (NaN outside a log
 * axis's domain). */
static double axis_frac(const axis *a, double v) {
    if (a->log) return v > 0 ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo)) : NAN;
    return (v - a->lo) / (a->hi - a->lo);
}

static void tick_label(char *buf, size_t cap, const axis *a, double v) {
    if (a->log) snprintf(buf, cap, "%g", v);
    else snprintf(buf, cap, "%.*f", a->decimals, fabs(v) < 1e-12 ? 0.0 : v);
}

/* Text content: XML's five specials escaped, control characters dropped. */
static void put_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else if (c == '\'') fputs("&apos;", f);
        else if (c >= 0x20 && c != 0x7f) fputc(c, f);
    }
}

/* Point i of s after bucketing to at most PLOT_MAX_POINTS points (the mean
 * of the finite points of the bucket; false when it has none). */
static bool series_point(const plot_series *s, int64_t i, int64_t npts, double *x, double *y) {
    if (s->n <= PLOT_MAX_POINTS) {
        *x = s->x[i];
        *y = s->y[i];
        return isfinite(*x) && isfinite(*y);
    }
    int64_t b0 = i * s->n / npts, b1 = (i + 1) * s->n / npts;
    double sx = 0, sy = 0;
    int64_t k = 0;
    for (int64_t j = b0; j < b1; j++)
        if (isfinite(s->x[j]) && isfinite(s->y[j])) sx += s->x[j], sy += s->y[j], k++;
    if (!k) return false;
    *x = sx / (double)k;
    *y = sy / (double)k;
    return true;
}

static int64_t series_npts(const plot_series *s) { return s->n <= PLOT_MAX_POINTS ? s->n : PLOT_MAX_POINTS; }

typedef struct frame {
    double x0, y0, x1, y1; /* left, top, right, bottom */
} frame;

static double px(const frame *fr, const axis *ax, double v) { return fr->x0 + axis_frac(ax, v) * (fr->x1 - fr->x0); }
static double py(const frame *fr, const axis *ay, double v) { return fr->y1 - axis_frac(ay, v) * (fr->y1 - fr->y0); }

static void draw_series(FILE *f, const plot_series *s, const frame *fr, const axis *ax, const axis *ay) {
    int64_t np = series_npts(s);
    bool pen = false;
    fprintf(f, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" stroke-linejoin=\"round\"%s d=\"", s->color,
            s->faint ? "1" : "2", s->faint ? " stroke-opacity=\"0.35\"" : "");
    for (int64_t i = 0; i < np; i++) {
        double x, y;
        if (!series_point(s, i, np, &x, &y) || !isfinite(py(fr, ay, y))) {
            pen = false;
            continue;
        }
        fprintf(f, "%s%.1f %.1f", pen ? " L" : (i ? " M" : "M"), px(fr, ax, x), py(fr, ay, y));
        pen = true;
    }
    fputs("\"/>\n", f);
    if (!s->markers) return;
    for (int64_t i = 0; i < np; i++) {
        double x, y;
        if (!series_point(s, i, np, &x, &y) || !isfinite(py(fr, ay, y))) continue;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"1\"/>\n",
                px(fr, ax, x), py(fr, ay, y), s->color);
    }
}

/* Points of the panel's series (as drawn) inside the box [x0,x1] x [y0,y1]. */
static int64_t points_inside(const plot_panel *p, const frame *fr, const axis *ax, const axis *ay, double x0,
                             double y0, double x1, double y1) {
    int64_t k = 0;
    for (int i = 0; i < p->n_series; i++) {
        const plot_series *s = &p->series[i];
        int64_t np = series_npts(s);
        for (int64_t j = 0; j < np; j++) {
            double x, y;
            if (!series_point(s, j, np, &x, &y)) continue;
            double X = px(fr, ax, x), Y = py(fr, ay, y);
            k += X >= x0 && X <= x1 && Y >= y0 && Y <= y1;
        }
    }
    return k;
}

/* The legend goes into the corner of the frame that hides the fewest
 * points; the panel's preference (upper or lower right) wins ties. */
static void draw_legend(FILE *f, const plot_panel *p, const frame *fr, const axis *ax, const axis *ay) {
    size_t longest = 0;
    int n = 0;
    for (int i = 0; i < p->n_series; i++) {
        if (!p->series[i].label) continue;
        size_t l = strlen(p->series[i].label);
        if (l > longest) longest = l;
        n++;
    }
    if (!n) return;
    double w = 44 + CHAR_W * (double)longest, h = 18.0 * n + 8;
    double top = fr->y0 + 8, bottom = fr->y1 - h - 8, right = fr->x1 - w - 8, left = fr->x0 + 8;
    double cand[4][2] = {{right, p->legend_below ? bottom : top}, {right, p->legend_below ? top : bottom},
                         {left, p->legend_below ? bottom : top}, {left, p->legend_below ? top : bottom}};
    int best = 0;
    int64_t best_n = INT64_MAX;
    for (int c = 0; c < 4; c++) {
        int64_t k = points_inside(p, fr, ax, ay, cand[c][0], cand[c][1], cand[c][0] + w, cand[c][1] + h);
        if (k < best_n) best_n = k, best = c;
    }
    double x = cand[best][0], y = cand[best][1];
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#ffffff\" fill-opacity=\"0.9\" "
               "stroke=\"#999999\"/>\n", x, y, w, h);
    int row = 0;
    for (int i = 0; i < p->n_series; i++) {
        const plot_series *s = &p->series[i];
        if (!s->label) continue;
        double cy = y + 13 + 18.0 * row++;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%s\"%s/>\n",
                x + 8, cy, x + 32, cy, s->color, s->faint ? "1" : "2", s->faint ? " stroke-opacity=\"0.35\"" : "");
        if (s->markers) fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", x + 20, cy, s->color);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 38, cy + 4);
        put_text(f, s->label);
        fputs("</text>\n", f);
    }
}

/* The finite range of the panel's y values (positive ones only in *pos_lo). */
static bool panel_range(const plot_panel *p, double *lo, double *hi, double *pos_lo) {
    *lo = INFINITY, *hi = -INFINITY, *pos_lo = INFINITY;
    for (int i = 0; i < p->n_series; i++)
        for (int64_t j = 0; j < p->series[i].n; j++) {
            double v = p->series[i].y[j];
            if (!isfinite(v) || !isfinite(p->series[i].x[j])) continue;
            if (v < *lo) *lo = v;
            if (v > *hi) *hi = v;
            if (v > 0 && v < *pos_lo) *pos_lo = v;
        }
    return *lo <= *hi;
}

static void draw_panel(FILE *f, int idx, const plot_panel *p, double band_top, const axis *ax, bool last,
                       const char *xlabel) {
    frame fr = {FRAME_LEFT, band_top + FRAME_TOP_PAD, FRAME_RIGHT, band_top + PANEL_H - FRAME_BOTTOM_PAD};
    double lo, hi, pos_lo;
    bool any = panel_range(p, &lo, &hi, &pos_lo);
    axis ay;
    if (!any) axis_linear(&ay, 0, 1, 5, false);
    else if (!(p->log_allowed && lo > 0 && hi / lo >= 30 && axis_log(&ay, lo, hi))) axis_linear(&ay, lo, hi, 6, p->percent);
    /* grid and ticks */
    char lab[64];
    for (int i = 0; i < ay.n_ticks; i++) {
        double y = py(&fr, &ay, ay.ticks[i]);
        tick_label(lab, sizeof lab, &ay, ay.ticks[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", fr.x0, y, fr.x1, y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333333\"/>\n", fr.x0 - 5, y, fr.x0,
                y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", fr.x0 - 8, y + 4, lab);
    }
    for (int i = 0; i < ax->n_ticks; i++) {
        double x = px(&fr, ax, ax->ticks[i]);
        tick_label(lab, sizeof lab, ax, ax->ticks[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", x, fr.y0, x, fr.y1);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333333\"/>\n", x, fr.y1, x,
                fr.y1 + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, fr.y1 + 19, lab);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333333\"/>\n",
            fr.x0, fr.y0, fr.x1 - fr.x0, fr.y1 - fr.y0);
    fprintf(f, "<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\">", (fr.y0 + fr.y1) / 2);
    put_text(f, p->ylabel);
    if (ay.log) fputs(" (log scale)", f);
    fputs("</text>\n", f);
    if (last) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (fr.x0 + fr.x1) / 2, fr.y1 + 38);
        put_text(f, xlabel);
        fputs("</text>\n", f);
    }
    if (!any) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#777777\">no data</text>\n",
                (fr.x0 + fr.x1) / 2, (fr.y0 + fr.y1) / 2);
        return;
    }
    /* curves, clipped to the frame */
    fprintf(f, "<clipPath id=\"frame%d\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
            idx, fr.x0, fr.y0 - 4, fr.x1 - fr.x0, fr.y1 - fr.y0 + 8);
    fprintf(f, "<g clip-path=\"url(#frame%d)\">\n", idx);
    for (int i = 0; i < p->n_series; i++) draw_series(f, &p->series[i], &fr, ax, &ay);
    fputs("</g>\n", f);
    draw_legend(f, p, &fr, ax, &ay);
}

bool plot_svg(FILE *f, const char *title, const char *xlabel, const plot_panel *panels, int n_panels) {
    if (n_panels < 1) n_panels = 1;
    if (n_panels > PLOT_MAX_PANELS) n_panels = PLOT_MAX_PANELS;
    double xlo = INFINITY, xhi = -INFINITY;
    for (int p = 0; p < n_panels; p++)
        for (int i = 0; i < panels[p].n_series; i++)
            for (int64_t j = 0; j < panels[p].series[i].n; j++) {
                double v = panels[p].series[i].x[j];
                if (!isfinite(v)) continue;
                if (v < xlo) xlo = v;
                if (v > xhi) xhi = v;
            }
    axis ax;
    if (xlo > xhi) axis_linear(&ax, 0, 1, 8, false);
    else axis_linear(&ax, xlo > 0 && xlo <= xhi / 4 ? 0 : xlo, xhi, 8, false);
    int height = TITLE_H + n_panels * PANEL_H + XLABEL_H;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Liberation Sans, Arial, sans-serif\" "
            "font-size=\"12\" fill=\"#222222\">\n",
            PLOT_WIDTH, height, PLOT_WIDTH, height);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", PLOT_WIDTH, height);
    fprintf(f, "<text x=\"%d\" y=\"26\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">",
            PLOT_WIDTH / 2);
    put_text(f, title);
    fputs("</text>\n", f);
    for (int p = 0; p < n_panels; p++)
        draw_panel(f, p, &panels[p], TITLE_H + (double)p * PANEL_H, &ax, p == n_panels - 1, xlabel);
    fputs("</svg>\n", f);
    return !ferror(f);
}
