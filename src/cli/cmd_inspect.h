/* cmd_inspect.h - `meganeura inspect FILE.safetensors` (cmd_inspect.c).
 *
 * Does not: parse the top-level command line (main.c does).
 */
#ifndef MN_CLI_CMD_INSPECT_H
#define MN_CLI_CMD_INSPECT_H

/* argv[0] is "inspect". */
int cmd_inspect(int argc, char **argv);

#endif
