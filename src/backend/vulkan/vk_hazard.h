/* vk_hazard.h - the barrier planner of the Vulkan backend, a pure function.
 *
 * Input: a sequence of dispatches (or copies), each with the byte ranges it
 * reads and writes, each range in one buffer (today a memory-plan arena; a
 * buffer id is only a number here). Output: before which dispatches a
 * barrier must go, and why (the hazard kinds).
 *
 * Rule (greedy, as late as possible): a barrier goes before dispatch j when
 * j reads bytes a dispatch since the last barrier wrote (read after write),
 * writes bytes one read (write after read) or wrote (write after write).
 * Accesses of one dispatch never conflict with each other (an in-place
 * kernel reads and writes the same range). Empty ranges (lo >= hi) touch
 * nothing; ranges [a, b) and [b, c) do not overlap. Every barrier placed is
 * needed, and every conflicting pair i < j has a barrier in (i, j]; with one
 * global barrier type this is also the fewest barriers.
 *
 * Cost: O(A log A) for A accesses: the ranges read and written since the
 * last barrier are kept as two sets of disjoint, coalesced intervals ordered
 * by (buffer, lo) in a treap; a barrier empties both.
 *
 * Does not: call Vulkan, choose stages or access masks (vk_backend.c).
 */
#ifndef MN_VK_HAZARD_H
#define MN_VK_HAZARD_H

#include "core/common.h"

typedef struct vk_access {
    uint32_t buf;    /* buffer id */
    bool write;      /* false: read */
    uint64_t lo, hi; /* bytes [lo, hi) */
} vk_access;

enum { VK_HAZARD_RAW = 1, VK_HAZARD_WAR = 2, VK_HAZARD_WAW = 4 };

/* Dispatch i accesses acc[first[i] .. first[i + 1]) (first has n + 1
 * entries, non-decreasing). barrier[i] receives the VK_HAZARD_* kinds that
 * need a barrier between dispatch i and the dispatches before it since the
 * previous barrier; 0: no barrier. barrier[0] is always 0 (what came before
 * the sequence is the caller's business). Errors: MN_E_INVALID for a
 * decreasing first[], MN_E_NOMEM. */
mn_status vk_hazard_plan(const vk_access *acc, const size_t *first, int32_t n, uint8_t *barrier, char *err,
                         size_t cap);

#endif
