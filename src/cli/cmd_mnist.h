/* cmd_mnist.h - `meganeura train mnist` and `meganeura eval mnist`
 * (cmd_mnist.c).
 *
 * Does not: parse the top-level command line (main.c does), or handle
 * `train lm` (cmd_lm.h).
 */
#ifndef MN_CLI_CMD_MNIST_H
#define MN_CLI_CMD_MNIST_H

/* argv[0] is "train"; argv[1] should be "mnist" (a usage error otherwise),
 * or a help flag (the help of `train mnist`). */
int cmd_train_mnist(int argc, char **argv);
/* argv[0] is "eval"; argv[1] should be "mnist". */
int cmd_eval_mnist(int argc, char **argv);

#endif
