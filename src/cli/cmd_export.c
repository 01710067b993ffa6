/* cmd_export.c - `meganeura export --checkpoint FILE --out FILE.mnb`: an
 * inference bundle (docs/BUNDLE.md) of an MNIST model trained by
 * `meganeura train mnist`: the inference graph for --batch images, the
 * checkpoint's parameters and, with --backend vulkan, the kernels of this
 * machine's Vulkan device with its pipeline-cache data. `meganeura eval
 * mnist --bundle` runs one; an application loads it with
 * mn_session_create_from_bundle.
 *
 * Does not: export other models (an application exports its own sessions
 * with mn_session_export_bundle), read MNIST data.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cmd_export.h"
#include "cli/messages.h"
#include "cli/models.h"
#include "meganeura.h"

#define DEFAULT_BATCH 500 /* eval mnist's batch */
#define MAX_BATCH 8000

static void help_export(FILE *f) {
    fprintf(f,
            "Usage: meganeura export --checkpoint FILE --out FILE.mnb [options]\n"
            "\n"
            "Writes an inference bundle of an MNIST model trained by `meganeura train mnist`:\n"
            "one file holding the inference graph for --batch images (input \"x\" [B,784],\n"
            "output \"logits\" [B,10]), the checkpoint's parameters and, with --backend\n"
            "vulkan, the SPIR-V of every kernel made for this machine's Vulkan device with\n"
            "the device's pipeline-cache data, so that a session on the same kind of device\n"
            "starts without compiling (another device compiles what differs). Run it with\n"
            "`meganeura eval mnist --bundle FILE`, inspect it with `meganeura inspect`, load\n"
            "it in an application with mn_session_create_from_bundle (docs/BUNDLE.md).\n"
            "\n"
            "Options:\n"
            "  --checkpoint FILE     checkpoint of `meganeura train mnist` (required)\n"
            "  --out FILE            bundle to write (required); only a regular file is\n"
            "                          replaced, atomically\n"
            "  --model mlp|cnn       the model (default: the checkpoint's \"model\" metadata;\n"
            "                          a different one is an error)\n"
            "  --backend cpu|vulkan  whose kernels to include (default cpu: graph and\n"
            "                          weights only, which run on either backend)\n"
            "  --batch N             images per run, 1..%d (default %d)\n"
            "  -h, --help            show this help\n",
            MAX_BATCH, DEFAULT_BATCH);
}

int cmd_export(int argc, char **argv) {
    args a = {argc, argv, 1, "export", 0};
    const char *ckpt = NULL, *out = NULL, *model = NULL;
    mn_backend_kind backend = MN_BACKEND_CPU;
    int64_t batch = DEFAULT_BATCH;
    while (a.i < argc && !a.status) {
        const char *v = NULL;
        if (is_help(argv[a.i])) {
            help_export(stdout);
            return 0;
        } else if (flag_value(&a, "--checkpoint", &v)) {
            ckpt = v;
        } else if (flag_value(&a, "--out", &v)) {
            out = v;
        } else if (flag_value(&a, "--model", &v)) {
            model = v;
        } else if (flag_value(&a, "--backend", &v)) {
            if (!a.status && !parse_backend(v, &backend))
                return usage_error("export", "--backend must be cpu or vulkan, got '%s'", show(v).s);
        } else if (flag_value(&a, "--batch", &v)) {
            if (!a.status && !parse_int(v, 1, MAX_BATCH, &batch))
                return usage_error("export", "--batch must be an integer in 1..%d, got '%s'", MAX_BATCH, show(v).s);
        } else {
            return usage_error("export", "export: unknown option '%s'", show(argv[a.i]).s);
        }
    }
    if (a.status) return a.status;
    if (!ckpt || !ckpt[0]) return usage_error("export", "export: --checkpoint FILE is required");
    if (!out || !out[0]) return usage_error("export", "export: --out FILE is required");
    cli_model m;
    if (model && !cli_model_parse(&m, model))
        return usage_error("export", "--model must be mlp or cnn, got '%s'", show(model).s);

    char err[1024], kind[64];
    if (mn_checkpoint_check_path(out, err, sizeof err) != MN_OK) return fail("--out: %s", err);
    mn_status ks = mn_checkpoint_meta(ckpt, "model", kind, sizeof kind, err, sizeof err);
    if (ks != MN_OK && ks != MN_E_NOT_FOUND) return fail("%s", err);
    cli_model from_ckpt;
    if (ks == MN_OK && !cli_model_parse(&from_ckpt, kind))
        return fail("%s: metadata model = \"%s\", expected \"mlp\" or \"cnn\"", show(ckpt).s, show(kind).s);
    if (ks == MN_OK && model && from_ckpt != m)
        return fail("--model %s, but %s holds a %s model", model, show(ckpt).s, cli_model_name(from_ckpt));
    if (ks != MN_OK && !model)
        return fail("%s has no \"model\" metadata: say which with --model mlp|cnn", show(ckpt).s);
    if (ks == MN_OK) m = from_ckpt;

    mn_graph *g;
    if (cli_model_build(&g, m, batch, false, err, sizeof err) != MN_OK) return fail("%s", err);
    mn_session_options opt = mn_session_default_options();
    opt.backend = backend;
    mn_session *s = NULL;
    int rc = 0;
    if (mn_session_create(&s, g, &opt) != MN_OK)
        rc = fail("creating the session: %s", s ? mn_session_error(s) : "out of memory");
    else if (mn_session_load(s, ckpt) != MN_OK) rc = fail("loading the checkpoint: %s", mn_session_error(s));
    else if (mn_session_set_meta(s, "model", cli_model_name(m)) != MN_OK ||
             mn_session_export_bundle(s, out) != MN_OK)
        rc = fail("%s", mn_session_error(s));
    mn_graph_destroy(g);
    if (!rc) {
        struct stat sb;
        mn_kernel_stats k = {0};
        mn_session_kernel_stats(s, &k);
        printf("bundle %s: %s model, batch %" PRId64 ", %lld bytes", show(out).s, cli_model_name(m), batch,
               stat(out, &sb) == 0 ? (long long)sb.st_size : -1LL);
        if (backend == MN_BACKEND_VULKAN)
            printf(", kernels for vulkan (%d compiled now, %d from the cache)", k.compiled, k.cached);
        printf("\n");
    }
    mn_session_destroy(s);
    return rc;
}
