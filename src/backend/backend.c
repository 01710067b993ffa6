/* backend.c - the registry of backends compiled into this build, and the
 * kernel sets of inference bundles (backend.h). */
#include "backend/backend.h"

const backend_vtable *backend_for(mn_backend_kind kind) {
    switch (kind) {
    case MN_BACKEND_CPU: return &backend_cpu;
#ifdef MN_HAVE_VULKAN
    case MN_BACKEND_VULKAN: return &backend_vulkan;
#endif
    default: return NULL;
    }
}

void kernel_set_free(kernel_set *ks) {
    if (!ks) return;
    for (int i = 0; i < ks->n; i++) {
        free(ks->k[i].src);
        free(ks->k[i].words);
    }
    free(ks->k);
    free(ks->compiler_id);
    free(ks->pipeline);
    memset(ks, 0, sizeof *ks);
}

static int cmp_entry(const void *a, const void *b) {
    return memcmp(((const kernel_entry *)a)->key, ((const kernel_entry *)b)->key, 32);
}

void kernel_set_sort(kernel_set *ks) {
    if (ks->n < 2) return;
    qsort(ks->k, (size_t)ks->n, sizeof *ks->k, cmp_entry);
    int m = 1;
    for (int i = 1; i < ks->n; i++) {
        if (memcmp(ks->k[i].key, ks->k[m - 1].key, 32) == 0) { /* the same source, twice */
            free(ks->k[i].src);
            free(ks->k[i].words);
            continue;
        }
        ks->k[m++] = ks->k[i];
    }
    ks->n = m;
}
