/* models.h - the MNIST models of the meganeura CLI, built with the public API.
 *
 * Every model reads input "x" f32 [B,784] (pixels / 255) and marks output
 * "logits" f32 [B,10]. A training graph also reads input "y" i32 [B] (class
 * labels) and has loss = mn_cross_entropy(logits, y). Parameter names are the
 * same in both, so a training checkpoint loads into an inference session.
 *
 * Does not: create sessions, train, or know about data files.
 */
#ifndef MN_CLI_MODELS_H
#define MN_CLI_MODELS_H

#include <stdbool.h>
#include <stddef.h>

#include "meganeura.h"

/* The CNN: two blocks conv3x3 (pad 1) -> relu -> maxpool 2 with CLI_CNN_C1
 * and CLI_CNN_C2 channels, then a linear layer from [B, C2*7*7] to 10. */
#define CLI_CNN_C1 8
#define CLI_CNN_C2 16
#define CLI_CNN_FLAT 784 /* CLI_CNN_C2 * 7 * 7 */
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)

typedef enum cli_model { CLI_MODEL_MLP = 0, CLI_MODEL_CNN = 1 } cli_model;

/* "mlp" / "cnn". */
const char *cli_model_name(cli_model m);
/* Parses "mlp" or "cnn"; false for anything else. */
bool cli_model_parse(cli_model *out, const char *name);
/* One line describing the architecture, for logs. */
const char *cli_model_summary(cli_model m);

/* Builds the graph for batch size `batch`. On failure *out is NULL and err
 * holds the graph's error message. The caller destroys *out. */
mn_status cli_model_build(mn_graph **out, cli_model m, int64_t batch, bool training, char *err,
                          size_t cap);

#endif
