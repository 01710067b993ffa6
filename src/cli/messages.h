/* messages.h - how the `meganeura` program reports errors: one prefix, exit
 * statuses, untrusted strings (paths, names from files) escaped and shortened
 * in the middle before they reach the terminal.
 *
 * Does not: print results (stdout belongs to each command) or progress
 * (progress.h). */
#ifndef MN_CLI_MESSAGES_H
#define MN_CLI_MESSAGES_H

#include "io/text.h"

#define EXIT_ERROR 1
#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

/* An untrusted string as shown in messages (a value, so it can be used
 * inside one printf call: show(a).s, show(b).s). */
typedef struct cli_shown {
    char s[IO_ESC_PATH];
} cli_shown;
cli_shown show(const char *p);

/* Data-parallel runs (dist.c): errors then read "meganeura: error: rank R: ...". */
void messages_set_rank(int rank);
/* "meganeura: error: ..." on stderr; returns EXIT_ERROR. */
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "meganeura: [cmd: ]..." plus the --help hint on stderr; returns EXIT_USAGE.
 * cmd: "train", "generate", ... or NULL for the top level. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
