/* cmd_lm.h - the language-model commands of the meganeura CLI (cmd_lm.c):
 * `generate` and `train lm`. argv[0] is the command word ("generate", "lm").
 *
 * Does not: parse the top-level command line (main.c does).
 */
#ifndef MN_CLI_CMD_LM_H
#define MN_CLI_CMD_LM_H

#define MAX_LLAMA_STOP_IDS 32 /* config eos ids (8) + --stop tokens (16) */

int cmd_generate(int argc, char **argv);
int cmd_train_lm(int argc, char **argv);

#endif
