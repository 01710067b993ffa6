/* test_vk_hazard.c - the Vulkan barrier planner (vk_hazard.c), no device.
 *
 * Thousands of random programs (random byte ranges in several buffers,
 * overlapping, touching, empty, in-place read+write of one range) checked
 * against a brute-force simulation:
 *   - safety: every pair of dispatches i < j that conflict (read after
 *     write, write after read, write after write on overlapping bytes of one
 *     buffer) has a barrier at some position in (i, j];
 *   - minimality: every barrier placed at j is needed: j conflicts with a
 *     dispatch since the previous barrier, and the kinds reported are exactly
 *     those conflicts' kinds.
 * Plus hand-made edge cases and 100k-dispatch programs (time, and no
 * spurious barriers among many disjoint ranges).
 */
#include <time.h>

#include "backend/vulkan/vk_hazard.h"
#include "harness.h"

#define A(buf, w, lo, hi) ((vk_access){(buf), (w), (lo), (hi)})

/* Runs the planner over dispatches given as access counts. */
static mn_status plan(const vk_access *acc, const int *counts, int32_t n, uint8_t *bar) {
    size_t *first = malloc(((size_t)n + 1) * sizeof *first);
    char err[256] = "";
    if (!first) return MN_E_NOMEM;
    first[0] = 0;
    for (int32_t i = 0; i < n; i++) first[i + 1] = first[i] + (size_t)counts[i];
    mn_status st = vk_hazard_plan(acc, first, n, bar, err, sizeof err);
    if (st) fprintf(stderr, "vk_hazard_plan: %s\n", err);
    free(first);
    return st;
}

/* The conflict kinds between an earlier access x and a later access y. */
static int kind(vk_access x, vk_access y) {
    if (x.buf != y.buf || x.lo >= x.hi || y.lo >= y.hi || x.hi <= y.lo || y.hi <= x.lo) return 0;
    if (x.write && y.write) return VK_HAZARD_WAW;
    if (x.write) return VK_HAZARD_RAW;
    if (y.write) return VK_HAZARD_WAR;
    return 0;
}

/* Brute force: the kinds of all conflicts between dispatches i < j. */
static int pair_kinds(const vk_access *acc, const size_t *first, int32_t i, int32_t j) {
    int k = 0;
    for (size_t a = first[i]; a < first[i + 1]; a++)
        for (size_t b = first[j]; b < first[j + 1]; b++) k |= kind(acc[a], acc[b]);
    return k;
}

/* Checks one program's plan against the simulation; returns failures. */
static int check_plan(const vk_access *acc, const int *counts, int32_t n, const char *what) {
    uint8_t *bar = calloc((size_t)n + 1, 1);
    size_t *first = malloc(((size_t)n + 1) * sizeof *first);
    int32_t *nbar = calloc((size_t)n + 1, sizeof *nbar); /* barriers at positions <= j */
    int fails = 0;
    if (!bar || !first || !nbar || plan(acc, counts, n, bar) != MN_OK) {
        fails++;
        goto done;
    }
    first[0] = 0;
    for (int32_t i = 0; i < n; i++) first[i + 1] = first[i] + (size_t)counts[i];
    for (int32_t j = 0; j < n; j++) nbar[j] = (j ? nbar[j - 1] : 0) + (bar[j] != 0);
    if (n > 0 && bar[0]) fails++, fprintf(stderr, "%s: barrier before the first dispatch\n", what);
    /* safety */
    for (int32_t j = 0; j < n && fails < 5; j++)
        for (int32_t i = 0; i < j; i++)
            if (pair_kinds(acc, first, i, j) && nbar[j] - nbar[i] == 0) {
                fprintf(stderr, "%s: dispatches %d and %d conflict (kinds %d) with no barrier between\n", what, i, j,
                        pair_kinds(acc, first, i, j));
                fails++;
                break;
            }
    /* minimality: the kinds at j are those of conflicts since the previous barrier */
    int32_t prev = 0;
    for (int32_t j = 1; j < n && fails < 5; j++) {
        int want = 0;
        for (int32_t k = prev; k < j; k++) want |= pair_kinds(acc, first, k, j);
        if (want != bar[j]) {
            fprintf(stderr, "%s: at dispatch %d the planner says kinds %d, the simulation %d (previous barrier %d)\n",
                    what, j, bar[j], want, prev);
            fails++;
        }
        if (bar[j]) prev = j;
    }
done:
    free(bar);
    free(first);
    free(nbar);
    return fails;
}

static void edge_cases(void) {
    uint8_t bar[8];
    /* touching ranges do not overlap */
    vk_access t1[] = {A(0, 1, 0, 8), A(0, 0, 8, 16), A(0, 1, 16, 24)};
    CHECK(plan(t1, (int[]){1, 1, 1}, 3, bar) == MN_OK && bar[1] == 0 && bar[2] == 0);
    /* read after write, one byte of overlap */
    vk_access t2[] = {A(0, 1, 0, 8), A(0, 0, 7, 9)};
    CHECK(plan(t2, (int[]){1, 1}, 2, bar) == MN_OK && bar[1] == VK_HAZARD_RAW);
    /* the same range in another buffer is no conflict */
    vk_access t3[] = {A(0, 1, 0, 8), A(1, 1, 0, 8), A(2, 0, 0, 8)};
    CHECK(plan(t3, (int[]){1, 1, 1}, 3, bar) == MN_OK && bar[1] == 0 && bar[2] == 0);
    /* in place: one dispatch reads and writes a range (no barrier for
     * itself); the next reader needs one, a second in-place update too */
    vk_access t4[] = {A(0, 0, 0, 64), A(0, 1, 0, 64), A(0, 0, 0, 64), A(0, 1, 0, 64), A(0, 0, 32, 40)};
    CHECK(plan(t4, (int[]){2, 2, 1}, 3, bar) == MN_OK && bar[0] == 0 &&
          bar[1] == (VK_HAZARD_RAW | VK_HAZARD_WAW | VK_HAZARD_WAR) && bar[2] == VK_HAZARD_RAW);
    /* empty ranges touch nothing */
    vk_access t5[] = {A(0, 1, 5, 5), A(0, 1, 9, 3), A(0, 0, 0, 100), A(0, 1, 0, 0)};
    CHECK(plan(t5, (int[]){2, 1, 1}, 3, bar) == MN_OK && bar[1] == 0 && bar[2] == 0);
    /* read after read is none; write after read is WAR only */
    vk_access t6[] = {A(0, 0, 0, 8), A(0, 0, 0, 8), A(0, 1, 4, 12)};
    CHECK(plan(t6, (int[]){1, 1, 1}, 3, bar) == MN_OK && bar[1] == 0 && bar[2] == VK_HAZARD_WAR);
    /* a barrier forgets what came before it: 0 writes, 1 reads it (barrier),
     * 2 reads it again (no barrier), 3 writes it (WAR with 1 and 2 only) */
    vk_access t7[] = {A(0, 1, 0, 8), A(0, 0, 0, 8), A(0, 0, 0, 8), A(0, 1, 0, 8)};
    CHECK(plan(t7, (int[]){1, 1, 1, 1}, 4, bar) == MN_OK && bar[1] == VK_HAZARD_RAW && bar[2] == 0 &&
          bar[3] == VK_HAZARD_WAR);
    /* coalescing: [0,4) [8,12) then [4,8) joins them; reads inside and
     * across the joined range conflict, one past its end does not */
    vk_access t8[] = {A(3, 1, 0, 4), A(3, 1, 8, 12), A(3, 1, 4, 8), A(3, 0, 12, 16), A(3, 0, 3, 9)};
    CHECK(plan(t8, (int[]){1, 1, 1, 1, 1}, 5, bar) == MN_OK && bar[1] == 0 && bar[2] == 0 && bar[3] == 0 &&
          bar[4] == VK_HAZARD_RAW);
    /* extreme ids and offsets */
    vk_access t9[] = {A(UINT32_MAX, 1, UINT64_MAX - 8, UINT64_MAX), A(0, 0, UINT64_MAX - 8, UINT64_MAX),
                      A(UINT32_MAX, 0, UINT64_MAX - 1, UINT64_MAX)};
    CHECK(plan(t9, (int[]){1, 1, 1}, 3, bar) == MN_OK && bar[1] == 0 && bar[2] == VK_HAZARD_RAW);
    /* dispatches without accesses, and an empty program */
    CHECK(plan(t1, (int[]){0, 0, 1}, 3, bar) == MN_OK && bar[0] == 0 && bar[1] == 0 && bar[2] == 0);
    CHECK(plan(NULL, NULL, 0, bar) == MN_OK);
    /* a malformed access list is an error, not a crash */
    char err[200] = "";
    size_t bad[] = {0, 2, 1};
    CHECK(vk_hazard_plan(t1, bad, 2, bar, err, sizeof err) == MN_E_INVALID && strstr(err, "dispatch 1"));
    CHECK(check_plan(t4, (int[]){2, 2, 1}, 3, "edge t4") == 0);
    CHECK(check_plan(t8, (int[]){1, 1, 1, 1, 1}, 5, "edge t8") == 0);
}

/* Random programs: a few buffers, a small or large address space, ranges
 * that overlap often, touch, are empty, or repeat the previous access with
 * the other direction (in place). */
static void random_programs(int count, uint64_t seed) {
    mn_rng r;
    mn_rng_seed(&r, seed);
    enum { MAXN = 48, MAXA = 6 };
    vk_access acc[MAXN * MAXA];
    int counts[MAXN];
    int failed = 0, barriers = 0, dispatches = 0;
    for (int prog = 0; prog < count && failed < 3; prog++) {
        int32_t n = 1 + (int32_t)(mn_rng_next(&r) % MAXN);
        uint32_t nbuf = 1 + (uint32_t)(mn_rng_next(&r) % 4);
        static const uint64_t spaces[] = {8, 32, 256, 4096, 1ull << 40};
        uint64_t space = spaces[mn_rng_next(&r) % MN_ARRAY_LEN(spaces)];
        size_t na = 0;
        for (int32_t i = 0; i < n; i++) {
            counts[i] = (int)(mn_rng_next(&r) % (MAXA + 1));
            for (int k = 0; k < counts[i]; k++) {
                vk_access a;
                uint64_t u = mn_rng_next(&r) % 100;
                a.buf = (uint32_t)(mn_rng_next(&r) % nbuf) * 977u;
                a.write = mn_rng_next(&r) % 3 == 0;
                a.lo = mn_rng_next(&r) % space;
                a.hi = a.lo + 1 + mn_rng_next(&r) % (space / 4 + 1);
                if (u < 15 && na > 0) { /* in place, or the other direction of an earlier access */
                    a = acc[na - 1 - mn_rng_next(&r) % (na < 8 ? na : 8)];
                    a.write = !a.write;
                } else if (u < 25 && na > 0) { /* touching an earlier range */
                    vk_access b = acc[na - 1];
                    a.buf = b.buf;
                    if (mn_rng_next(&r) % 2) a.lo = b.hi, a.hi = b.hi + 1 + mn_rng_next(&r) % 8;
                    else a.hi = b.lo, a.lo = b.lo > 8 ? b.lo - 1 - mn_rng_next(&r) % 8 : 0;
                } else if (u < 32) { /* empty */
                    a.hi = a.lo - (mn_rng_next(&r) % 2 && a.lo > 0);
                }
                acc[na++] = a;
            }
        }
        char what[64];
        snprintf(what, sizeof what, "random program %d (seed %llu)", prog, (unsigned long long)seed);
        int f = check_plan(acc, counts, n, what);
        failed += f != 0;
        /* count barriers for the summary (and to see the test is not vacuous) */
        uint8_t bar[MAXN];
        if (plan(acc, counts, n, bar) == MN_OK)
            for (int32_t i = 0; i < n; i++) barriers += bar[i] != 0;
        dispatches += n;
    }
    CHECK_MSG(failed == 0, "%d of %d random programs planned wrong", failed, count);
    CHECK_MSG(barriers > dispatches / 10 && barriers < dispatches, "%d barriers in %d dispatches: not a useful mix",
              barriers, dispatches);
    printf("random programs: %d, %d dispatches, %d barriers\n", count, dispatches, barriers);
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 100k dispatches: disjoint ranges in random order need no barrier at all
 * (the old fixed-size range list gave up after 64 and placed one); a chain
 * needs one before every dispatch; a mix is checked against the simulation
 * on a prefix. Each run takes about 0.1 s in a release build (0.5 s under
 * ASan); the limit is loose for loaded machines, a planner quadratic in the
 * live ranges would take minutes. */
static void large_programs(void) {
    enum { N = 100000, PER = 4 };
    const double LIMIT_S = 8.0;
    vk_access *acc = malloc((size_t)N * PER * sizeof *acc);
    int *counts = malloc(N * sizeof *counts);
    uint8_t *bar = malloc(N);
    CHECK(acc && counts && bar);
    if (!acc || !counts || !bar) goto done;
    mn_rng r;
    mn_rng_seed(&r, 7);
    /* disjoint: dispatch i writes slot perm(i) and reads nothing written */
    for (int32_t i = 0; i < N; i++) {
        uint64_t slot = ((uint64_t)i * 48271u) % N; /* a permutation of 0..N-1: 48271 is a prime not dividing N */
        counts[i] = PER;
        acc[PER * i + 0] = A((uint32_t)(slot % 4), 1, slot * 256, slot * 256 + 192);
        acc[PER * i + 1] = A(9, 0, slot * 64, slot * 64 + 64); /* a read-only buffer */
        acc[PER * i + 2] = A(9, 0, 0, 64);
        acc[PER * i + 3] = A((uint32_t)(slot % 4), 1, slot * 256 + 192, slot * 256 + 256);
    }
    double t0 = seconds();
    CHECK(plan(acc, counts, N, bar) == MN_OK);
    double t1 = seconds();
    int nb = 0;
    for (int32_t i = 0; i < N; i++) nb += bar[i] != 0;
    CHECK_MSG(nb == 0, "%d barriers among %d dispatches on disjoint ranges", nb, N);
    printf("100k disjoint dispatches: %.1f ms\n", (t1 - t0) * 1e3);
    CHECK_MSG(t1 - t0 < LIMIT_S, "planning 100k dispatches took %.2f s", t1 - t0);
    /* chain: i reads what i - 1 wrote */
    for (int32_t i = 0; i < N; i++) {
        counts[i] = 2;
        acc[2 * i] = A(0, 0, (uint64_t)i * 64, (uint64_t)i * 64 + 64);
        acc[2 * i + 1] = A(0, 1, (uint64_t)(i + 1) * 64, (uint64_t)(i + 1) * 64 + 64);
    }
    t0 = seconds();
    CHECK(plan(acc, counts, N, bar) == MN_OK);
    t1 = seconds();
    nb = 0;
    for (int32_t i = 0; i < N; i++) nb += bar[i] == VK_HAZARD_RAW;
    CHECK_MSG(nb == N - 1, "%d RAW barriers in a chain of %d", nb, N);
    printf("100k chained dispatches: %.1f ms\n", (t1 - t0) * 1e3);
    CHECK_MSG(t1 - t0 < LIMIT_S, "planning 100k dispatches took %.2f s", t1 - t0);
    /* random mix over a large space: few conflicts, long runs between barriers */
    for (int32_t i = 0; i < N; i++) {
        counts[i] = PER;
        for (int k = 0; k < PER; k++) {
            uint64_t lo = (mn_rng_next(&r) % (1u << 26)) * 4;
            acc[PER * i + k] = A((uint32_t)(mn_rng_next(&r) % 4), k == 0, lo, lo + 4 * (1 + mn_rng_next(&r) % 64));
        }
    }
    t0 = seconds();
    CHECK(plan(acc, counts, N, bar) == MN_OK);
    t1 = seconds();
    nb = 0;
    for (int32_t i = 0; i < N; i++) nb += bar[i] != 0;
    printf("100k random dispatches: %.1f ms, %d barriers\n", (t1 - t0) * 1e3, nb);
    CHECK_MSG(t1 - t0 < LIMIT_S, "planning 100k dispatches took %.2f s", t1 - t0);
    CHECK(check_plan(acc, counts, 1500, "random 100k prefix") == 0);
done:
    free(acc);
    free(counts);
    free(bar);
}

int main(void) {
    edge_cases();
    random_programs(5000, 0x5eed);
    large_programs();
    return th_finish("test_vk_hazard");
}
