/* llama_util.h - small helpers shared by the Llama tests (header only):
 * where the fixtures are, relative L2 error, session and device set-up.
 *
 * Does not: check anything itself (the tests do, with harness.h).
 */
#ifndef MN_TESTS_LLAMA_UTIL_H
#define MN_TESTS_LLAMA_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "meganeura_models.h"

/* tests/fixtures: next to this file (CMake compiles with absolute paths),
 * else from MN_FUZZ_CORPUS (ctest sets it to tests/fuzz/corpus). */
static inline void lu_fixtures(char *dst, size_t cap) {
    struct stat sb;
    snprintf(dst, cap, "%s", __FILE__);
    char *slash = strrchr(dst, '/');
    if (slash) snprintf(slash, cap - (size_t)(slash - dst), "/fixtures");
    else snprintf(dst, cap, "fixtures");
    const char *corpus = getenv("MN_FUZZ_CORPUS");
    if ((stat(dst, &sb) != 0 || !S_ISDIR(sb.st_mode)) && corpus) snprintf(dst, cap, "%s/../../fixtures", corpus);
}

/* ||a - b|| / ||b|| over n values (b is the reference); inf if b is zero
 * and a is not. */
static inline double lu_rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

static inline double lu_rel_l2_d(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    if (den == 0) return num == 0 ? 0 : INFINITY;
    return sqrt(num / den);
}

/* A session on backend be (dev may be NULL); NULL (and a failed CHECK) on
 * error. */
static inline mn_session *lu_session(const mn_graph *g, mn_backend_kind be, mn_device *dev, mn_mode mode,
                                     const mn_optimizer *opt) {
    mn_session_options o = mn_session_default_options();
    o.backend = be;
    o.device = be == MN_BACKEND_VULKAN ? dev : NULL;
    o.mode = mode;
    o.seed = 5;
    if (opt) o.optim = *opt;
    mn_session *s = NULL;
    mn_status st = mn_session_create(&s, g, &o);
    CHECK_OK(st, mn_session_error(s));
    if (st) {
        mn_session_destroy(s);
        return NULL;
    }
    return s;
}

/* The Vulkan device, or NULL (with a note) when there is none or the build
 * has no Vulkan backend. */
static inline mn_device *lu_vulkan(void) {
#ifdef MN_HAVE_VULKAN
    mn_device *dev = NULL;
    if (mn_device_open(&dev, MN_BACKEND_VULKAN) == MN_OK) return dev;
    fprintf(stderr, "no Vulkan device (%s): CPU only\n", mn_device_error(dev));
    mn_device_close(dev);
#else
    fprintf(stderr, "built without Vulkan: CPU only\n");
#endif
    return NULL;
}

#endif
