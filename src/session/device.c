/* device.c - mn_device: a backend's device shared by sessions, reference
 * counted (the caller's reference plus one per live session). */
#include "session/session.h"

mn_status mn_device_open(mn_device **out, mn_backend_kind backend) {
    if (!out) return MN_E_INVALID;
    mn_device *d = calloc(1, sizeof *d);
    *out = d;
    if (!d) return MN_E_NOMEM;
    d->kind = backend;
    d->refs = 1;
    d->be = backend_for(backend);
    if (!d->be) {
        mn_fmt(d->err, sizeof d->err, "device: backend %d is not built into this version", (int)backend);
        d->dead = true;
        return (int)backend == MN_BACKEND_VULKAN ? MN_E_UNSUPPORTED : MN_E_INVALID;
    }
    if (!d->be->device_open) return MN_OK; /* nothing to share (cpu) */
    mn_status st = d->be->device_open(&d->impl, d->err, sizeof d->err);
    if (st) d->dead = true;
    return st;
}

void device_release(mn_device *d) {
    if (!d || --d->refs > 0) return;
    if (d->impl && d->be && d->be->device_close) d->be->device_close(d->impl);
    free(d);
}

void mn_device_close(mn_device *d) { device_release(d); }

const char *mn_device_error(const mn_device *d) { return d ? d->err : "no device (out of memory?)"; }
