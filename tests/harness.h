/* harness.h - a tiny test harness: CHECK records a failure with file and line
 * and continues; th_finish() returns non-zero if anything failed, and
 * TH_SKIP (77, ctest's SKIP_RETURN_CODE) if nothing failed but a device the
 * test needs was missing (th_require_vulkan). */
#ifndef MN_TEST_HARNESS_H
#define MN_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>

#include "meganeura.h"

extern int th_failed, th_passed;
void th_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (c) th_passed++;                                                                        \
        else th_fail(__FILE__, __LINE__, "CHECK(%s)", #c);                                          \
    } while (0)
#define CHECK_MSG(c, ...)                                                                          \
    do {                                                                                           \
        if (c) th_passed++;                                                                        \
        else th_fail(__FILE__, __LINE__, __VA_ARGS__);                                              \
    } while (0)
/* Expects an mn_status call to succeed; prints the handle's message if not. */
#define CHECK_OK(call, errstr)                                                                     \
    do {                                                                                           \
        mn_status st_ = (call);                                                                    \
        if (st_ == MN_OK) th_passed++;                                                             \
        else th_fail(__FILE__, __LINE__, "%s -> %s: %s", #call, mn_status_str(st_), (errstr));      \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (fabs(a_ - b_) <= (tol)) th_passed++;                                                   \
        else th_fail(__FILE__, __LINE__, "%s = %.9g, %s = %.9g, |diff| %.3g > %.3g", #a, a_, #b,   \
                     b_, fabs(a_ - b_), (double)(tol));                                            \
    } while (0)

/* Normalised squared error sum((v - ref)^2) / sum(ref^2) over n values
 * (the plain sum when ref is all zero; inf when v has a non-finite value). */
double th_nmse(const float *v, const float *ref, size_t n);

/* The exit code of a skipped test (SKIP_RETURN_CODE in tests/CMakeLists.txt). */
#define TH_SKIP 77

/* Opens the Vulkan device a test needs for its point. Returns it (close it
 * with mn_device_close), or NULL when there is none (no driver, no device, a
 * build without the backend): it then prints "SKIP: no Vulkan device:
 * <reason>" and th_finish() returns TH_SKIP if nothing failed, so a test can
 * still run its CPU checks first. With MN_REQUIRE_VULKAN=1 in the environment
 * (`make test` sets it) a missing device is a failure instead, so that a
 * machine that lost its driver cannot turn every Vulkan test into a skip. */
mn_device *th_require_vulkan(void);

/* Prints "N passed, N failed" and returns the exit code: 1 if anything failed,
 * else TH_SKIP if a required device was missing, else 0. */
int th_finish(const char *name);

#endif
