/* cmd_devices.h - `meganeura devices` (cmd_devices.c).
 *
 * Does not: parse the top-level command line (main.c does).
 */
#ifndef MN_CLI_CMD_DEVICES_H
#define MN_CLI_CMD_DEVICES_H

/* argv[0] is "devices". */
int cmd_devices(int argc, char **argv);

#endif
