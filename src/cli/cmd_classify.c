/* cmd_classify.c - `meganeura classify`: ImageNet-style classification of
 * PNG/JPEG images with a torchvision ResNet state_dict saved as
 * safetensors.
 *
 *   meganeura classify --model FILE.safetensors [--labels FILE] [--top N]
 *                      [--resize N] [--crop N] [--backend cpu|vulkan] IMAGE...
 *
 * The architecture is read from the checkpoint's tensors
 * (mn_resnet_config_from_checkpoint); the graph is the inference ResNet
 * with every batch norm folded into its conv (MN_RESNET_FOLDED), batch 1.
 * Each image is decoded (libpng, libjpeg-turbo), resized, centre-cropped
 * and normalised as torchvision's ImageNet evaluation transform does, and
 * the top classes are printed with their softmax probabilities:
 *
 *   IMAGE
 *     1  0.8731  207  golden retriever
 *
 * An image that cannot be read is reported and skipped (exit status 1 at
 * the end); a model that cannot be read ends the command.
 *
 * Does not: batch images, apply EXIF orientation, read other formats.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cmd_classify.h"
#include "cli/messages.h"
#include "meganeura_models.h"

#define MAX_LABEL_BYTES ((size_t)16 << 20)

static void help_classify(FILE *f) {
    fprintf(f,
            "Usage: meganeura classify --model FILE.safetensors [options] IMAGE...\n"
            "\n"
            "Classifies PNG and JPEG images with a torchvision ResNet (18/34/50/101/152 or any\n"
            "width and depth of the same design) whose state_dict was saved as safetensors\n"
            "(safetensors.torch.save_file(model.state_dict(), FILE)). Each image is resized\n"
            "(shorter side), centre-cropped and normalised as torchvision's ImageNet transform\n"
            "does; the most likely classes are printed with their probabilities.\n"
            "\n"
            "Options:\n"
            "  --model FILE          the state_dict (required)\n"
            "  --labels FILE         class names, one per line, in class order (optional)\n"
            "  --top N               classes shown per image (default 5)\n"
            "  --resize N            shorter side after resizing (default 256)\n"
            "  --crop N              side of the centre crop fed to the model (default 224)\n"
            "  --backend cpu|vulkan  (default cpu)\n"
            "  -h, --help            show this help\n");
}

typedef struct labels {
    char *text;
    char **line;
    int64_t n;
} labels;

static int read_labels(labels *l, const char *path, int64_t classes) {
    char err[1024];
    size_t len = 0;
    memset(l, 0, sizeof *l);
    if (mn_read_file(&l->text, &len, path, MAX_LABEL_BYTES, err, sizeof err)) return fail("--labels: %s", err);
    int64_t n = 0;
    for (size_t i = 0; i < len; i++) n += l->text[i] == '\n';
    if (len && l->text[len - 1] != '\n') n++;
    if (!(l->line = calloc((size_t)n + 1, sizeof *l->line))) return fail("out of memory");
    char *p = l->text;
    for (int64_t k = 0; k < n; k++) {
        l->line[k] = p;
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        size_t m = strlen(p);
        if (m && p[m - 1] == '\r') p[m - 1] = 0;
        p = e ? e + 1 : p + m;
    }
    l->n = n;
    if (n < classes)
        return fail("--labels %s: %lld lines, but the model has %lld classes", show(path).s, (long long)n,
                    (long long)classes);
    return 0;
}

int cmd_classify(int argc, char **argv) {
    args a = {argc, argv, 1, "classify", 0};
    const char *model = NULL, *label_path = NULL, *v;
    const char **images = calloc((size_t)argc, sizeof *images);
    int nimages = 0;
    int64_t top = 5, resize = 256, crop = 224;
    mn_backend_kind be = MN_BACKEND_CPU;
    if (!images) return fail("out of memory");
    while (a.i < argc && !a.status) {
        if (is_help(argv[a.i])) {
            help_classify(stdout);
            free(images);
            return 0;
        } else if (flag_value(&a, "--model", &v)) model = v;
        else if (flag_value(&a, "--labels", &v)) label_path = v;
        else if (flag_value(&a, "--top", &v)) {
            if (!a.status && !parse_int(v, 1, 1 << 20, &top))
                a.status = usage_error("classify", "--top must be an integer >= 1, got '%s'", show(v).s);
        } else if (flag_value(&a, "--resize", &v)) {
            if (!a.status && !parse_int(v, 1, 8192, &resize))
                a.status = usage_error("classify", "--resize must be an integer in 1..8192, got '%s'", show(v).s);
        } else if (flag_value(&a, "--crop", &v)) {
            if (!a.status && !parse_int(v, 1, 8192, &crop))
                a.status = usage_error("classify", "--crop must be an integer in 1..8192, got '%s'", show(v).s);
        } else if (flag_value(&a, "--backend", &v)) {
            if (!a.status && !parse_backend(v, &be))
                a.status = usage_error("classify", "--backend must be cpu or vulkan, got '%s'", show(v).s);
        } else if (argv[a.i][0] == '-' && argv[a.i][1])
            a.status = usage_error("classify", "unknown option '%s'", show(argv[a.i]).s);
        else images[nimages++] = argv[a.i++];
    }
    if (a.status) {
        free(images);
        return a.status;
    }
    if (!model) a.status = usage_error("classify", "--model FILE.safetensors is required");
    else if (!nimages) a.status = usage_error("classify", "no IMAGE given");
    else if (crop > resize) a.status = usage_error("classify", "--crop %lld is larger than --resize %lld", (long long)crop, (long long)resize);
    if (a.status) {
        free(images);
        return a.status;
    }

    char err[4096];
    int rc = EXIT_ERROR;
    mn_hf_checkpoint *ck = NULL;
    mn_graph *g = NULL;
    mn_model *m = NULL;
    mn_session *s = NULL;
    labels lab = {NULL, NULL, 0};
    float *pix = NULL, *logits = NULL;
    double *prob = NULL;
    int64_t *order = NULL;
    mn_resnet_config cfg;
    if (mn_hf_checkpoint_open(&ck, model, err, sizeof err)) {
        fail("--model: %s", err);
        goto done;
    }
    if (mn_resnet_config_from_checkpoint(&cfg, ck, err, sizeof err)) {
        fail("--model %s: %s", show(model).s, err);
        goto done;
    }
    if (cfg.in_channels != 3) {
        fail("--model %s: the model takes %lld input channels; images have 3", show(model).s, (long long)cfg.in_channels);
        goto done;
    }
    if (label_path && read_labels(&lab, label_path, cfg.num_classes)) goto done;
    mn_resnet_options o = mn_resnet_default_options();
    o.kind = MN_RESNET_FOLDED;
    o.height = o.width = crop;
    if (mn_graph_create(&g) || mn_resnet_create(&m, g, &cfg, &o)) {
        fail("%s", m ? mn_model_error(m) : "out of memory");
        goto done;
    }
    mn_session_options so = mn_session_default_options();
    so.backend = be;
    so.mode = MN_MODE_INFERENCE;
    if (mn_session_create(&s, g, &so)) {
        fail("cannot create the %s session: %s", be == MN_BACKEND_VULKAN ? "vulkan" : "cpu", mn_session_error(s));
        goto done;
    }
    if (mn_model_load(m, s, ck, NULL)) {
        fail("%s", mn_model_error(m));
        goto done;
    }
    const int64_t C = cfg.num_classes, k = top < C ? top : C;
    pix = malloc((size_t)(3 * crop * crop) * sizeof *pix);
    logits = malloc((size_t)C * sizeof *logits);
    prob = malloc((size_t)C * sizeof *prob);
    order = malloc((size_t)C * sizeof *order);
    if (!pix || !logits || !prob || !order) {
        fail("out of memory");
        goto done;
    }
    rc = 0;
    for (int i = 0; i < nimages; i++) {
        mn_image im;
        if (mn_image_load(&im, images[i], err, sizeof err)) {
            fail("%s", err);
            rc = EXIT_ERROR;
            continue;
        }
        mn_status st = mn_imagenet_preprocess(pix, &im, resize, crop);
        mn_image_free(&im);
        if (st || mn_session_set_input(s, "pixels", pix, (size_t)(3 * crop * crop) * sizeof *pix) ||
            mn_session_run(s) || mn_session_output(s, "logits", logits, (size_t)C * sizeof *logits)) {
            fail("%s: %s", show(images[i]).s, st ? "cannot preprocess the image" : mn_session_error(s));
            rc = EXIT_ERROR;
            continue;
        }
        double mx = -INFINITY, sum = 0;
        bool finite = true;
        for (int64_t c = 0; c < C; c++) {
            finite = finite && isfinite(logits[c]);
            if (logits[c] > mx) mx = logits[c];
        }
        if (!finite) {
            fail("%s: the model gave non-finite logits", show(images[i]).s);
            rc = EXIT_ERROR;
            continue;
        }
        for (int64_t c = 0; c < C; c++) sum += prob[c] = exp((double)logits[c] - mx);
        /* the k best, highest first, the lower index on ties (a partial selection) */
        for (int64_t r = 0; r < k; r++) {
            int64_t best = -1;
            for (int64_t c = 0; c < C; c++) {
                bool taken = false;
                for (int64_t q = 0; q < r && !taken; q++) taken = order[q] == c;
                if (!taken && (best < 0 || logits[c] > logits[best])) best = c;
            }
            order[r] = best;
        }
        printf("%s\n", show(images[i]).s);
        for (int64_t r = 0; r < k; r++) {
            printf("  %lld  %.4f  %lld", (long long)(r + 1), prob[order[r]] / sum, (long long)order[r]);
            if (lab.line) printf("  %s", show(lab.line[order[r]]).s);
            printf("\n");
        }
        fflush(stdout);
    }
done:
    free(pix), free(logits), free(prob), free(order), free(lab.text), free(lab.line), free(images);
    mn_session_destroy(s);
    mn_model_destroy(m);
    mn_graph_destroy(g);
    mn_hf_checkpoint_close(ck);
    return rc;
}
