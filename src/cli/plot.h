/* plot.h - line charts as SVG for the training curves of the meganeura CLI
 * (`--plot FILE.svg`, written by metrics.c).
 *
 * A chart is a title and one or more panels stacked vertically that share
 * the x axis (training steps). Each panel has a frame, grid lines, ticks
 * with labels on both axes (1-2-5 steps; a log-scale y axis where the data
 * span 30x or more and are all positive, as a falling loss does), axis
 * labels and a legend. A series is a polyline (broken at non-finite values),
 * optionally faint (the raw per-step values under their moving mean) or
 * with a marker at every point (evaluations). Long series are drawn from at
 * most PLOT_MAX_POINTS bucket means, so a file stays small whatever the
 * number of steps.
 *
 * The SVG is plain SVG 1.1 (shapes, paths and text, no scripts, no external
 * references): browsers, rsvg-convert and Inkscape show it.
 *
 * Does not: read or write files (the caller passes a stream), keep state.
 */
#ifndef MN_CLI_PLOT_H
#define MN_CLI_PLOT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define PLOT_MAX_SERIES 4
#define PLOT_MAX_PANELS 3
#define PLOT_MAX_POINTS 1000
#define PLOT_WIDTH 760

typedef struct plot_series {
    const char *label;   /* legend text */
    const char *color;   /* SVG colour, e.g. "#1f77b4" */
    const double *x, *y; /* n points; x increasing */
    int64_t n;
    bool faint;   /* thin and translucent */
    bool markers; /* a circle at every point */
} plot_series;

typedef struct plot_panel {
    const char *ylabel;
    bool percent;      /* y values are percentages: the axis stays within [0, 100] */
    bool log_allowed;  /* a log y axis when the values span 30x or more */
    bool legend_below; /* prefer the lower right corner for the legend (rising curves) to the
                          upper right; either way it goes where it hides the fewest points */
    plot_series series[PLOT_MAX_SERIES];
    int n_series;
} plot_panel;

/* Writes the chart to f. Panels without any finite point show "no data".
 * Returns false if a write to f failed (ferror). */
bool plot_svg(FILE *f, const char *title, const char *xlabel, const plot_panel *panels, int n_panels);

#endif
