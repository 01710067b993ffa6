/* cmd_export.h - `meganeura export` (cmd_export.c).
 *
 * Does not: parse the top-level command line (main.c does).
 */
#ifndef MN_CLI_CMD_EXPORT_H
#define MN_CLI_CMD_EXPORT_H

/* argv[0] is "export". */
int cmd_export(int argc, char **argv);

#endif
