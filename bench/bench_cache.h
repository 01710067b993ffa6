/* bench_cache.h - an empty kernel cache for a benchmark's cold builds:
 * $XDG_CACHE_HOME pointed at a new folder under /tmp, then the old value
 * back and the folder removed. Shared by meganeura_bench (bench.c,
 * bench_models.c) and meganeura_bench_build. */
#ifndef MN_BENCH_CACHE_H
#define MN_BENCH_CACHE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_cache {
    char dir[64];
    char *saved; /* the caller's $XDG_CACHE_HOME (NULL: unset) */
} bench_cache;

/* False (and nothing changed) if no folder could be made. */
static inline bool bench_cache_enter(bench_cache *c) {
    snprintf(c->dir, sizeof c->dir, "/tmp/mn-bench-cache-XXXXXX");
    if (!mkdtemp(c->dir)) return false;
    const char *old = getenv("XDG_CACHE_HOME");
    c->saved = old ? strdup(old) : NULL;
    setenv("XDG_CACHE_HOME", c->dir, 1);
    return true;
}

static inline void bench_cache_leave(bench_cache *c) {
    if (c->saved) setenv("XDG_CACHE_HOME", c->saved, 1);
    else unsetenv("XDG_CACHE_HOME");
    free(c->saved);
    c->saved = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", c->dir);
    if (system(cmd) != 0) fprintf(stderr, "bench: could not remove %s\n", c->dir);
}

#endif
