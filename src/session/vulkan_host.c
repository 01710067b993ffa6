/* vulkan_host.c - the session side of include/meganeura_vulkan.h: devices over
 * a host application's Vulkan handles, inputs and outputs bound to the
 * host's buffers, and runs ordered by the host's semaphores.
 *
 * Does not: touch Vulkan itself (the backend's device_wrap, bind_external
 * and execute_sync do, src/backend/vulkan/vk_backend.c), or exist in a build
 * without the Vulkan backend.
 */
#ifdef MN_HAVE_VULKAN
#include <stdarg.h>

#include "meganeura_vulkan.h"
#include "session/session.h"

static mn_status hfail(mn_session *s, mn_status st, const char *fmt, ...) MN_PRINTF(3, 4);
static mn_status hfail(mn_session *s, mn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return st;
}

mn_status mn_device_from_vulkan(mn_device **out, const mn_vulkan_device_desc *desc) {
    if (!out) return MN_E_INVALID;
    mn_device *d = calloc(1, sizeof *d);
    *out = d;
    if (!d) return MN_E_NOMEM;
    d->kind = MN_BACKEND_VULKAN;
    d->refs = 1;
    d->be = backend_for(MN_BACKEND_VULKAN);
    if (!d->be || !d->be->device_wrap) {
        mn_fmt(d->err, sizeof d->err, "device: the vulkan backend is not built into this version");
        d->dead = true;
        return MN_E_UNSUPPORTED;
    }
    mn_status st = d->be->device_wrap(&d->impl, desc, d->err, sizeof d->err);
    if (st) d->dead = true;
    return st;
}

/* The named input (not one the library writes itself) or output. */
static int32_t bindable(const mn_session *s, const char *name) {
    int32_t id = graph_find(s->g, name);
    if (id == MN_NONE) return MN_NONE;
    const node *n = &s->g->nodes[id];
    if (n->op == OP_INPUT && !(n->flags & NODE_F_HOST)) return id;
    if (n->flags & NODE_F_OUTPUT) return id;
    return MN_NONE;
}

mn_status mn_session_bind_vulkan_buffer(mn_session *s, const char *name, const mn_vulkan_buffer *buf) {
    if (!s) return MN_E_INVALID;
    if (s->dead) return hfail(s, MN_E_STATE, "bind_vulkan_buffer: the session is not usable");
    if (!s->be->bind_external)
        return hfail(s, MN_E_UNSUPPORTED, "bind_vulkan_buffer: the %s backend has no Vulkan buffers", s->be->name);
    int32_t id = name ? bindable(s, name) : MN_NONE;
    if (id == MN_NONE)
        return hfail(s, MN_E_NOT_FOUND, "bind_vulkan_buffer: no input or output named '%s'", name ? name : "(null)");
    const node *n = &s->g->nodes[id];
    if (n->flags & (NODE_F_LOSS | NODE_F_READ))
        return hfail(s, MN_E_UNSUPPORTED, "bind_vulkan_buffer: '%s' is read by the session itself (the loss)", name);
    if (n->dtype != MN_F32 && n->dtype != MN_I32)
        return hfail(s, MN_E_UNSUPPORTED, "bind_vulkan_buffer: '%s' is %s; host buffers hold f32 or i32", name,
                     mn_dtype_name(n->dtype));
    if (!s->host_bound && !(s->host_bound = calloc((size_t)s->g->n + 1, 1)))
        return hfail(s, MN_E_NOMEM, "bind_vulkan_buffer: out of memory");
    char err[512];
    mn_status st = s->be->bind_external(s->bk, id, buf, err, sizeof err);
    if (st) return hfail(s, st, "bind_vulkan_buffer '%s': %s", name, err);
    s->host_bound[id] = buf && buf->buffer;
    return MN_OK;
}

mn_status mn_session_run_vulkan(mn_session *s, const mn_vulkan_submit *sub) {
    if (!s) return MN_E_INVALID;
    if (s->dead) return hfail(s, MN_E_STATE, "run_vulkan: the session is not usable");
    if (!s->be->execute_sync)
        return hfail(s, MN_E_UNSUPPORTED, "run_vulkan: the %s backend has no Vulkan queue", s->be->name);
    mn_status st = s->be->execute_sync(s->bk, s->sched.fwd, s->sched.nfwd, sub, s->err, sizeof s->err);
    s->have_loss = st == MN_OK;
    return st;
}
#endif
