/* backend.c - the registry of backends compiled into this build. */
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
