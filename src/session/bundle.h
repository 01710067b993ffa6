/* bundle.h - what src/session/bundle.c offers besides the public calls
 * (mn_session_export_bundle, mn_session_create_from_bundle): the listing of
 * `meganeura inspect` and the fuzzer's way in.
 *
 * Does not: expose the sections' formats (docs/BUNDLE.md describes them).
 */
#ifndef MN_SESSION_BUNDLE_H
#define MN_SESSION_BUNDLE_H

#include <stdio.h>

#include "meganeura.h"

/* The bundle in buf[0..len) checked as mn_session_create_from_bundle
 * checks a file (every section, the kernels too); with out and opt, and if
 * its tensors hold at most max_bytes in all, a session made from it (*out
 * stays NULL otherwise). err gets the message (the fuzzer's way in). */
mn_status session_bundle_mem(mn_session **out, const uint8_t *buf, size_t len, const mn_session_options *opt,
                             uint64_t max_bytes, char *err, size_t cap);
/* `meganeura inspect` of a bundle: every section checked as
 * mn_session_create_from_bundle checks them, then the sections, the info,
 * inputs and outputs, weights and kernels printed to f (names escaped); or
 * the reason it is refused in err. */
mn_status bundle_print_summary(const char *path, FILE *f, char *err, size_t cap);

#endif
