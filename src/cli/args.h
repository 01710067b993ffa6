/* args.h - command-line option parsing shared by the `meganeura` commands:
 * `--name VALUE` / `--name=VALUE`, help flags, strict numbers.
 *
 * Does not: know any command's options (each command loops over argv and
 * asks for its own), print anything but the usage error of a missing value. */
#ifndef MN_CLI_ARGS_H
#define MN_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "meganeura.h"

typedef struct args {
    int argc;
    char **argv;
    int i;           /* the argument under examination */
    const char *cmd; /* "train", "generate", ... for messages */
    int status;      /* EXIT_USAGE once a usage error has been printed */
} args;

bool is_help(const char *a);
/* If argv[i] is `--name VALUE` or `--name=VALUE`, stores VALUE, advances past
 * it and returns true. A missing value prints a usage error (a->status). */
bool flag_value(args *a, const char *name, const char **val);
/* Whole-string decimal integer / finite real within [lo, hi]. */
bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool parse_real(const char *s, double lo, double hi, double *out);
/* Whole-string unsigned decimal (no sign, no "-1" wrapping to 2^64-1). */
bool parse_u64(const char *s, uint64_t *out);
/* "cpu" or "vulkan"; false for anything else. */
bool parse_backend(const char *s, mn_backend_kind *out);

#endif
