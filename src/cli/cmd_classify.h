/* cmd_classify.h - `meganeura classify --model FILE IMAGE...` (cmd_classify.c).
 *
 * Does not: parse the top-level command line (main.c does).
 */
#ifndef MN_CLI_CMD_CLASSIFY_H
#define MN_CLI_CMD_CLASSIFY_H

/* argv[0] is "classify". */
int cmd_classify(int argc, char **argv);

#endif
