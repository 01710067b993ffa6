/* messages.c - error reporting of the `meganeura` program (see messages.h). */
#include "cli/messages.h"

#include <stdarg.h>
#include <stdio.h>

cli_shown show(const char *p) {
    cli_shown r;
    io_esc(r.s, sizeof r.s, p ? p : "(null)");
    return r;
}

static int g_rank = -1;

void messages_set_rank(int rank) { g_rank = rank; }

int fail(const char *fmt, ...) {
    va_list ap;
    fputs("meganeura: error: ", stderr);
    if (g_rank >= 0) fprintf(stderr, "rank %d: ", g_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_ERROR;
}

int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "meganeura: %s%s", cmd ? cmd : "", cmd ? ": " : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'meganeura%s%s --help' for more information.\n", cmd ? " " : "", cmd ? cmd : "");
    return EXIT_USAGE;
}
