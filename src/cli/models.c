/* models.c - MNIST MLP and CNN graphs for the CLI; see models.h.
 *
 * Layout conventions of the public API: a linear layer is x @ W + b with W
 * [in, out]; convolutions are NCHW with weights [out, in, kh, kw].
 * Weights use Kaiming-uniform initialisation, biases start at zero.
 *
 * Does not: create sessions or touch data.
 */
#include "cli/models.h"

#include <stdio.h>
#include <string.h>

const char *cli_model_name(cli_model m) { return m == CLI_MODEL_CNN ? "cnn" : "mlp"; }

bool cli_model_parse(cli_model *out, const char *name) {
    if (strcmp(name, "mlp") == 0) *out = CLI_MODEL_MLP;
    else if (strcmp(name, "cnn") == 0) *out = CLI_MODEL_CNN;
    else return false;
    return true;
}

const char *cli_model_summary(cli_model m) {
    if (m == CLI_MODEL_CNN)
        return "conv3x3 1->" CLI_STR(CLI_CNN_C1) ", relu, maxpool2, conv3x3 " CLI_STR(
            CLI_CNN_C1) "->" CLI_STR(CLI_CNN_C2) ", relu, maxpool2, linear " CLI_STR(CLI_CNN_FLAT) "->10";
    return "linear 784->128, relu, linear 128->10";
}

/* Bails out of a builder function on the first failed call. */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        st = (call);                                                                               \
        if (st != MN_OK) goto done;                                                                \
    } while (0)

static const mn_init KAIMING = {MN_INIT_KAIMING_UNIFORM, 0, 0};
static const mn_init ZEROS = {MN_INIT_ZEROS, 0, 0};

/* out = x @ W + b with W [in, out] named <name>.weight, b [out] named <name>.bias. */
static mn_status linear(mn_graph *g, mn_tensor *out, mn_tensor x, const char *name, int64_t in,
                        int64_t nout) {
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    mn_tensor w, b, xw;
    mn_status st;
    TRY(mn_graph_param(g, &w, wn, 2, (const int64_t[]){in, nout}, KAIMING));
    TRY(mn_graph_param(g, &b, bn, 1, (const int64_t[]){nout}, ZEROS));
    TRY(mn_matmul(g, &xw, x, w));
    TRY(mn_add(g, out, xw, b)); /* b [out] broadcasts over the batch */
done:
    return st;
}

/* out = maxpool2(relu(conv3x3(x, pad 1) + bias)); x [B,cin,H,W] -> [B,cout,H/2,W/2]. */
static mn_status conv_block(mn_graph *g, mn_tensor *out, mn_tensor x, const char *name,
                            int64_t cin, int64_t cout) {
    char wn[64], bn[64];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    mn_tensor w, b, c, r;
    mn_status st;
    const mn_conv2d_params cp = {.padding = {1, 1}};
    const mn_pool2d_params pp = {.kernel = {2, 2}};
    TRY(mn_graph_param(g, &w, wn, 4, (const int64_t[]){cout, cin, 3, 3}, KAIMING));
    TRY(mn_graph_param(g, &b, bn, 1, (const int64_t[]){cout}, ZEROS));
    TRY(mn_conv2d(g, &c, x, w, b, &cp));
    TRY(mn_relu(g, &r, c));
    TRY(mn_max_pool2d(g, out, r, &pp));
done:
    return st;
}

static mn_status build_mlp(mn_graph *g, mn_tensor *logits, mn_tensor x) {
    mn_tensor h, a;
    mn_status st;
    TRY(linear(g, &h, x, "fc1", 784, 128)); /* [B,128] */
    TRY(mn_relu(g, &a, h));
    TRY(linear(g, logits, a, "fc2", 128, 10)); /* [B,10] */
done:
    return st;
}

_Static_assert(CLI_CNN_FLAT == CLI_CNN_C2 * 7 * 7, "CLI_CNN_FLAT must be C2 * 7 * 7");

static mn_status build_cnn(mn_graph *g, mn_tensor *logits, mn_tensor x, int64_t batch) {
    mn_tensor img, p1, p2, flat;
    mn_status st;
    TRY(mn_reshape(g, &img, x, 4, (const int64_t[]){batch, 1, 28, 28})); /* [B,1,28,28] */
    TRY(conv_block(g, &p1, img, "conv1", 1, CLI_CNN_C1));                     /* [B,C1,14,14] */
    TRY(conv_block(g, &p2, p1, "conv2", CLI_CNN_C1, CLI_CNN_C2));             /* [B,C2,7,7] */
    TRY(mn_reshape(g, &flat, p2, 2, (const int64_t[]){batch, CLI_CNN_FLAT})); /* [B,C2*49] */
    TRY(linear(g, logits, flat, "fc", CLI_CNN_FLAT, 10));                     /* [B,10] */
done:
    return st;
}

mn_status cli_model_build(mn_graph **out, cli_model m, int64_t batch, bool training, char *err,
                          size_t cap) {
    *out = NULL;
    mn_graph *g = NULL;
    mn_status st = mn_graph_create(&g);
    if (st != MN_OK) {
        snprintf(err, cap, "cannot create a graph: %s", mn_status_str(st));
        return st;
    }
    mn_tensor x, logits, y, loss;
    TRY(mn_graph_input(g, &x, "x", MN_F32, 2, (const int64_t[]){batch, 784}));
    if (m == CLI_MODEL_CNN) TRY(build_cnn(g, &logits, x, batch));
    else TRY(build_mlp(g, &logits, x));
    TRY(mn_graph_output(g, logits, "logits"));
    if (training) {
        TRY(mn_graph_input(g, &y, "y", MN_I32, 1, (const int64_t[]){batch}));
        TRY(mn_cross_entropy(g, &loss, logits, y));
        TRY(mn_graph_loss(g, loss));
    }
done:
    if (st != MN_OK) {
        snprintf(err, cap, "building the %s model: %s", cli_model_name(m), mn_graph_error(g));
        mn_graph_destroy(g);
        return st;
    }
    *out = g;
    return MN_OK;
}
