/* leak_canary.c - sanitizer builds only: proves that LeakSanitizer still
 * reports a leak of the project's code while tests/lsan/keep_icd.c keeps the
 * Vulkan driver loaded. It opens and closes a Vulkan device (an instance
 * created and destroyed: the driver's own block would show up as an
 * "<unknown module>" leak without keep_icd.c), then drops a graph without
 * destroying it. The ctest lsan_canary passes only if the report names a
 * direct leak and no unknown module.
 *
 * Does not: fail by itself (LeakSanitizer's report and exit code are the
 * result), or need a Vulkan device (without one only the graph leaks).
 */
#include <stdio.h>

#include "meganeura.h"

/* The graph's only pointer dies with this frame: a direct leak. */
__attribute__((noinline)) static void leak_a_graph(void) {
    mn_graph *g = NULL;
    if (mn_graph_create(&g) == MN_OK) printf("leak_canary: dropped a graph without mn_graph_destroy\n");
}

int main(void) {
    mn_device *d = NULL;
    mn_status st = mn_device_open(&d, MN_BACKEND_VULKAN);
    printf("leak_canary: Vulkan device %s\n", st == MN_OK ? "opened and closed" : mn_device_error(d));
    mn_device_close(d);
    leak_a_graph();
    return 0;
}
