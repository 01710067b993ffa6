/* harness.c - see harness.h */
#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int th_failed, th_passed;
static int th_skipped; /* a required device was missing */

void th_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    th_failed++;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

mn_device *th_require_vulkan(void) {
    mn_device *d = NULL;
    if (mn_device_open(&d, MN_BACKEND_VULKAN) == MN_OK) return d;
    const char *req = getenv("MN_REQUIRE_VULKAN");
    if (req && strcmp(req, "1") == 0)
        th_fail(__FILE__, __LINE__, "no Vulkan device (MN_REQUIRE_VULKAN=1): %s", mn_device_error(d));
    else {
        printf("SKIP: no Vulkan device: %s\n", mn_device_error(d));
        fflush(stdout);
        th_skipped = 1;
    }
    mn_device_close(d);
    return NULL;
}

int th_finish(const char *name) {
    printf("%s: %d passed, %d failed%s\n", name, th_passed, th_failed,
           th_skipped && !th_failed ? " (SKIP: no Vulkan device)" : "");
    return th_failed ? 1 : th_skipped ? TH_SKIP : 0;
}

double th_nmse(const float *v, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)v[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0 ? num / den : num;
}
