/* harness.c - see harness.h */
#include "harness.h"

#include <stdarg.h>

int th_failed, th_passed;

void th_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    th_failed++;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int th_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, th_passed, th_failed);
    return th_failed ? 1 : 0;
}
