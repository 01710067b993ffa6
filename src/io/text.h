/* text.h - untrusted strings made safe to show, and strict number parsing.
 *
 * Names, metadata and paths that come from files (or from the command line)
 * may hold terminal escape sequences, bidirectional overrides or broken
 * UTF-8. Every message or listing that quotes one goes through io_esc /
 * io_put_esc, so what reaches a terminal is plain text. Numbers stored as
 * text in metadata are parsed with io_parse_uint / io_parse_real, which
 * accept only the canonical forms the writers produce.
 *
 * Does not: allocate, or touch files.
 */
#ifndef MN_IO_TEXT_H
#define MN_IO_TEXT_H

#include "core/common.h"

/* Room for a quoted name or value in a message (escaped, with the NUL). */
#define IO_ESC_NAME 80
/* Room for a quoted path in a message: long enough to recognise the file,
 * short enough that the reason after it always fits. */
#define IO_ESC_PATH 200

/* Strict UTF-8 check of s[0..n): rejects overlong forms, surrogates
 * (U+D800..U+DFFF), code points above U+10FFFF and truncated sequences. */
bool io_utf8_valid(const char *s, size_t n);

/* s escaped into dst (cap bytes with the NUL, cap >= 8): printable ASCII and
 * well-formed UTF-8 pass, except C1 controls (U+0080..U+009F) and the
 * line/paragraph separators and bidirectional controls (U+2028..U+202E,
 * U+2066..U+2069); every other byte (control bytes, DEL, broken UTF-8)
 * becomes \xNN. A result too long for dst loses its middle, replaced by
 * "...", so both ends stay visible. s NULL gives "(null)". Returns dst. */
const char *io_esc(char *dst, size_t cap, const char *s);
/* Length of the whole escaped form of s (without the NUL). */
size_t io_esc_len(const char *s);
/* Writes the whole escaped form of s to out. */
void io_put_esc(FILE *out, const char *s);

/* A decimal integer: one or more ASCII digits, nothing else (no sign, space,
 * or leading zero other than "0" itself), value <= max. */
bool io_parse_uint(const char *s, uint64_t max, uint64_t *out);
/* A finite decimal number: optional '-', digits with an optional fraction,
 * optional exponent; no spaces, '+' sign, hex, "inf" or "nan". */
bool io_parse_real(const char *s, double *out);

#endif
