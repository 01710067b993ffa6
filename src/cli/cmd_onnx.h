/* cmd_onnx.h - `meganeura onnx-run MODEL.onnx` (cmd_onnx.c).
 *
 * Does not: parse the top-level command line (main.c does).
 */
#ifndef MN_CLI_CMD_ONNX_H
#define MN_CLI_CMD_ONNX_H

/* argv[0] is "onnx-run". */
int cmd_onnx_run(int argc, char **argv);

#endif
