/* device_pick.c - which device a session opens, as a pure function of the
 * device list, MEGANEURA_DEVICE and the local rank (backend.h), so the rule
 * is tested with made-up device lists (tests/test_device_pick.c).
 *
 * Does not: enumerate devices (vk_device.c does and calls this).
 */
#include <ctype.h>
#include <stdlib.h>

#include "backend/backend.h"

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return true;
    }
    return false;
}

int backend_local_rank(void) {
    const char *names[] = {"MEGANEURA_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        const char *v = getenv(names[k]);
        if (!v || !*v) continue;
        char *end;
        long r = strtol(v, &end, 10);
        if (*end == 0 && r >= 0 && r < (1L << 20)) return (int)r;
    }
    return -1;
}

int backend_pick_device(const backend_device_desc *d, int n, const char *want, int local_rank, char *err,
                        size_t cap) {
    if (n <= 0) {
        mn_fmt(err, cap, "no device found");
        return -1;
    }
    if (want && *want) {
        char *end;
        long idx = strtol(want, &end, 10);
        const bool is_index = *end == 0;
        for (int i = 0; i < n; i++)
            if (is_index ? idx == (long)i : contains_nocase(d[i].name, want)) return i;
        mn_fmt(err, cap, "MEGANEURA_DEVICE='%s' matches none of the %d devices (see `meganeura devices`)", want, n);
        return -1;
    }
    int best_rank = d[0].type_rank, count = 0;
    for (int i = 1; i < n; i++)
        if (d[i].type_rank < best_rank) best_rank = d[i].type_rank;
    for (int i = 0; i < n; i++) count += d[i].type_rank == best_rank;
    /* the k-th device of the best kind, k = local rank modulo their count:
     * ranks on one host spread over its GPUs, in enumeration order */
    int k = local_rank >= 0 ? local_rank % count : 0;
    for (int i = 0; i < n; i++)
        if (d[i].type_rank == best_rank && k-- == 0) return i;
    return 0; /* not reached */
}
