/* cmd_inspect.c - `meganeura inspect FILE`: validates the file, then prints
 * for a safetensors file its metadata, one line per tensor and the totals
 * (through io/safetensors.h, which escapes names and metadata), and for an
 * inference bundle (its first bytes are "MNBUNDLE") its sections, info,
 * inputs, outputs, weights and kernels (session/bundle.h).
 *
 * Does not: change the file, or read tensor data beyond validating it.
 */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cmd_inspect.h"
#include "cli/messages.h"
#include "io/bundle.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "session/bundle.h"

static void help_inspect(FILE *f) {
    fprintf(f, "Usage: meganeura inspect FILE.safetensors | FILE.mnb\n"
               "\n"
               "Prints the metadata of a safetensors file, then one line per tensor (name,\n"
               "dtype, shape, bytes), then totals. For an inference bundle (`meganeura\n"
               "export`): its sections, info, inputs and outputs, weights and kernels.\n"
               "The file is fully validated first.\n"
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
    char err[1024];
    /* a bundle by its magic (a file that cannot be read is st_load's to report) */
    FILE *peek = io_fopen_read(path);
    char magic[8] = {0};
    bool bundle = peek && fread(magic, 1, 8, peek) == 8 && memcmp(magic, BUNDLE_MAGIC, 8) == 0;
    if (peek) fclose(peek);
    if (bundle) return bundle_print_summary(path, stdout, err, sizeof err) == MN_OK ? 0 : fail("%s", err);
    st_file f;
    memset(&f, 0, sizeof f);
    if (st_load(&f, path, err, sizeof err) != MN_OK) {
        st_free(&f);
        return fail("%s", err);
    }
    st_print_summary(&f, stdout);
    st_free(&f);
    return 0;
}

