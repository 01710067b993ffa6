/* main.c - the `meganeura` command-line program: the top-level help and the
 * dispatch to one command per file.
 *
 *   meganeura train mnist [options]              cmd_mnist.c
 *   meganeura train lm --data FILE.txt ...       cmd_lm.c
 *   meganeura generate --model DIR --prompt TEXT ...   cmd_lm.c
 *   meganeura eval mnist (--checkpoint FILE | --bundle FILE) [options]   cmd_mnist.c
 *   meganeura export --checkpoint FILE --out FILE.mnb [options]   cmd_export.c
 *   meganeura classify --model FILE IMAGE...     cmd_classify.c
 *   meganeura transcribe --model DIR FILE.wav... cmd_transcribe.c
 *   meganeura inspect FILE.safetensors | FILE.mnb      cmd_inspect.c
 *   meganeura data mnist --from DIR [--out FILE] | --check [--data FILE]   cmd_data.c
 *   meganeura devices                            cmd_devices.c
 *   meganeura onnx-run MODEL.onnx [options]      cmd_onnx.c
 *
 * Shared by the commands: option parsing (args.c), error messages and exit
 * statuses (messages.c), training progress (progress.c), the MNIST models
 * (models.c). Results go to stdout; progress, notes and errors go to stderr.
 * Exit status: 0 success, 1 error (`meganeura: error: ...`), 2 bad usage, 130
 * interrupted (after saving a checkpoint).
 *
 * Commands use only the public API (meganeura.h), plus io/safetensors.h and
 * session/bundle.h for `inspect`, io/mnist.h for the data set and io/text.h to escape paths,
 * names and metadata before they reach the terminal.
 *
 * Does not: parse any command's options (each command does).
 */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cmd_classify.h"
#include "cli/cmd_data.h"
#include "cli/cmd_devices.h"
#include "cli/cmd_export.h"
#include "cli/cmd_inspect.h"
#include "cli/cmd_lm.h"
#include "cli/cmd_mnist.h"
#include "cli/cmd_onnx.h"
#include "cli/cmd_transcribe.h"
#include "cli/dist.h"
#include "cli/messages.h"
#include "meganeura.h"

static void help_main(FILE *f) {
    fprintf(f,
            "Usage: meganeura <command> [options]\n"
            "\n"
            "Meganeura %s: a neural-network compiler and runtime.\n"
            "\n"
            "Commands:\n"
            "  train mnist     train a digit classifier on MNIST, evaluate it, save a checkpoint\n"
            "  train lm        train a Llama-family language model on a text file\n"
            "  generate        continue a prompt with a Hugging Face Llama-family model\n"
            "  eval mnist      evaluate a checkpoint or a bundle on the MNIST test images\n"
            "  export          write an inference bundle (graph, weights, kernels) of a checkpoint\n"
            "  classify        classify PNG/JPEG images with a torchvision ResNet\n"
            "  transcribe      speech to text (WAV) with a Hugging Face Whisper model\n"
            "  inspect FILE    list the metadata and tensors of a safetensors file or a bundle\n"
            "  data mnist      convert the MNIST JSON digits into the binary cache\n"
            "  devices         list the Vulkan devices, their limits and extensions\n"
            "  onnx-run MODEL  import an ONNX model, run it, print (or check) its outputs\n"
            "\n"
            "Options:\n"
            "  -h, --help      show this help\n"
            "  --version       print the version\n"
            "\n"
            "`meganeura <command> --help` lists the options of a command; `man meganeura`\n"
            "describes them all. `train mnist` and `train lm` write a JSON-lines log of the\n"
            "run with --log FILE.jsonl and draw its curves with --plot FILE.svg.\n"
            "`mpirun -np N meganeura train ...` trains data-parallel on N processes\n"
            "(--batch per process; rank 0 writes checkpoints and results).\n"
            "\n"
            "Run `make data` once to download MNIST before `train` or `eval`.\n",
            MN_VERSION_STRING);
}


/* `train lm` trains a language model; everything else under `train` (the
 * MNIST options, `train --help`, errors) belongs to `train mnist`. */
static int cmd_train(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "lm") == 0) return cmd_train_lm(argc - 1, argv + 1);
    return cmd_train_mnist(argc, argv);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        help_main(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (is_help(cmd)) {
        help_main(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("meganeura %s\n", MN_VERSION_STRING);
        return 0;
    }
    /* under mpirun a failed training ends every rank (dist.c) */
    if (strcmp(cmd, "train") == 0) return cli_dist_end(cmd_train(argc - 1, argv + 1));
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0) return cmd_eval_mnist(argc - 1, argv + 1);
    if (strcmp(cmd, "export") == 0) return cmd_export(argc - 1, argv + 1);
    if (strcmp(cmd, "classify") == 0) return cmd_classify(argc - 1, argv + 1);
    if (strcmp(cmd, "transcribe") == 0) return cmd_transcribe(argc - 1, argv + 1);
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(cmd, "data") == 0) return cmd_data(argc - 1, argv + 1);
    if (strcmp(cmd, "devices") == 0) return cmd_devices(argc - 1, argv + 1);
    if (strcmp(cmd, "onnx-run") == 0) return cmd_onnx_run(argc - 1, argv + 1);
    if (cmd[0] == '-') return usage_error(NULL, "unknown option '%s'", show(cmd).s);
    return usage_error(NULL, "unknown command '%s'", show(cmd).s);
}

