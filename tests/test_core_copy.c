/* test_core_copy.c - mn_copy (src/core/common.c), the copy that uploads and
 * readbacks take: the same bytes as memcpy for sizes below, at and above
 * the parallel threshold, sizes that do not divide into whole cache-line
 * slices, unaligned ends, MEGANEURA_THREADS=1 and 3, and the bytes around
 * the destination untouched. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "harness.h"

static void check_size(size_t n, size_t dst_off, size_t src_off) {
    unsigned char *src = malloc(n + 64), *dst = malloc(n + 128);
    CHECK(src && dst);
    if (!src || !dst) goto done;
    uint64_t s = n * 0x9e3779b97f4a7c15ull + dst_off + 1;
    for (size_t i = 0; i < n + 64; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        src[i] = (unsigned char)s;
    }
    memset(dst, 0xa5, n + 128);
    mn_copy(dst + dst_off, src + src_off, n);
    CHECK_MSG(memcmp(dst + dst_off, src + src_off, n) == 0, "%zu bytes (+%zu, +%zu): copy differs", n, dst_off,
              src_off);
    bool guard = true;
    for (size_t i = 0; i < dst_off; i++) guard = guard && dst[i] == 0xa5;
    for (size_t i = dst_off + n; i < n + 128; i++) guard = guard && dst[i] == 0xa5;
    CHECK_MSG(guard, "%zu bytes (+%zu): a byte outside the destination changed", n, dst_off);
done:
    free(src);
    free(dst);
}

static void sizes(void) {
    const size_t mib = (size_t)1 << 20;
    const size_t ns[] = {0, 1, 63, 4096, MN_COPY_PARALLEL_MIN - 1, MN_COPY_PARALLEL_MIN, MN_COPY_PARALLEL_MIN + 1,
                         12 * mib + 7, 19267584 /* a batch of 32 images 3 x 224 x 224 */, 33 * mib + 3};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        check_size(ns[i], 0, 0);
        check_size(ns[i], 3, 5);
    }
}

int main(void) {
    sizes();
    setenv("MEGANEURA_THREADS", "1", 1);
    sizes();
    setenv("MEGANEURA_THREADS", "3", 1);
    sizes();
    unsetenv("MEGANEURA_THREADS");
    return th_finish("test_core_copy");
}
