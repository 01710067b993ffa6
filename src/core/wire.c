/* wire.c - little-endian byte buffers (see wire.h). */
#include "core/wire.h"

void wb_put(mn_wbuf *w, const void *p, size_t n) {
    if (w->oom || !n) return;
    if (n > SIZE_MAX / 2 - w->n) {
        w->oom = true;
        return;
    }
    if (w->n + n > w->cap) {
        size_t c = w->cap ? w->cap : 256;
        while (c < w->n + n) c *= 2;
        uint8_t *q = realloc(w->p, c);
        if (!q) {
            w->oom = true;
            return;
        }
        w->p = q, w->cap = c;
    }
    if (p) memcpy(w->p + w->n, p, n);
    else memset(w->p + w->n, 0, n);
    w->n += n;
}

void le32_put(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void le64_put(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t le32_get(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

uint64_t le64_get(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

void wb_u8(mn_wbuf *w, uint8_t v) { wb_put(w, &v, 1); }

void wb_u16(mn_wbuf *w, uint16_t v) {
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    wb_put(w, b, 2);
}

void wb_u32(mn_wbuf *w, uint32_t v) {
    uint8_t b[4];
    le32_put(b, v);
    wb_put(w, b, 4);
}

void wb_u64(mn_wbuf *w, uint64_t v) {
    uint8_t b[8];
    le64_put(b, v);
    wb_put(w, b, 8);
}

void wb_f32(mn_wbuf *w, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    wb_u32(w, u);
}

void wb_f64(mn_wbuf *w, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    wb_u64(w, u);
}

void wb_align(mn_wbuf *w, size_t align) {
    if (align > 1 && w->n % align) wb_put(w, NULL, align - w->n % align);
}

void wb_free(mn_wbuf *w) {
    free(w->p);
    *w = (mn_wbuf){0};
}

const uint8_t *rb_take(mn_rbuf *r, size_t n) {
    if (r->bad || n > r->n - r->at) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->at;
    r->at += n;
    return p;
}

uint8_t rb_u8(mn_rbuf *r) {
    const uint8_t *p = rb_take(r, 1);
    return p ? p[0] : 0;
}

uint16_t rb_u16(mn_rbuf *r) {
    const uint8_t *p = rb_take(r, 2);
    return p ? (uint16_t)(p[0] | p[1] << 8) : 0;
}

uint32_t rb_u32(mn_rbuf *r) {
    const uint8_t *p = rb_take(r, 4);
    return p ? le32_get(p) : 0;
}

uint64_t rb_u64(mn_rbuf *r) {
    const uint8_t *p = rb_take(r, 8);
    return p ? le64_get(p) : 0;
}

float rb_f32(mn_rbuf *r) {
    uint32_t u = rb_u32(r);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double rb_f64(mn_rbuf *r) {
    uint64_t u = rb_u64(r);
    double d;
    memcpy(&d, &u, 8);
    return d;
}
