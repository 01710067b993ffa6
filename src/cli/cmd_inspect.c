/* cmd_inspect.c - `meganeura inspect FILE.safetensors`: validates the file,
 * then prints its metadata, one line per tensor and the totals (through
 * io/safetensors.h, which escapes names and metadata).
 *
 * Does not: change the file, or read tensor data beyond validating it.
 */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cmd_inspect.h"
#include "cli/messages.h"
#include "io/safetensors.h"

static void help_inspect(FILE *f) {
    fprintf(f, "Usage: meganeura inspect FILE.safetensors\n"
               "\n"
               "Prints the metadata of a safetensors file, then one line per tensor (name,\n"
               "dtype, shape, bytes), then totals. The file is fully validated first.\n"
               "\n"
               "Options:\n"
               "  -h, --help  show this help\n");
}


int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (is_help(argv[i])) {
            help_inspect(stdout);
            return 0;
        }
        if (argv[i][0] == '-' && argv[i][1] != 0)
            return usage_error("inspect", "inspect: unknown option '%s'", show(argv[i]).s);
        if (path) return usage_error("inspect", "inspect: expected one file, got '%s' too", show(argv[i]).s);
        path = argv[i];
    }
    if (!path) return usage_error("inspect", "inspect: expected a .safetensors file");
    st_file f;
    memset(&f, 0, sizeof f);
    char err[1024];
    if (st_load(&f, path, err, sizeof err) != MN_OK) {
        st_free(&f);
        return fail("%s", err);
    }
    st_print_summary(&f, stdout);
    st_free(&f);
    return 0;
}

