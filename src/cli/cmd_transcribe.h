/* cmd_transcribe.h - `meganeura transcribe --model DIR FILE.wav` (cmd_transcribe.c).
 *
 * Does not: parse the top-level command line (main.c does).
 */
#ifndef MN_CLI_CMD_TRANSCRIBE_H
#define MN_CLI_CMD_TRANSCRIBE_H

/* argv[0] is "transcribe". */
int cmd_transcribe(int argc, char **argv);

#endif
