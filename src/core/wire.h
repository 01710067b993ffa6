/* wire.h - little-endian byte buffers for the binary formats the project
 * writes to be shipped (inference bundles, src/io/bundle.c): a growing
 * writer and a bounded reader.
 *
 * The writer remembers an allocation failure (oom) and ignores later puts,
 * so a caller checks once at the end. The reader never reads past its end:
 * a get beyond it returns zeros and sets `bad`, so a parser checks once per
 * record instead of before every field. Integers are little endian
 * whatever the host; doubles and floats are their IEEE-754 bits.
 *
 * Does not: know any format (the callers do), touch files.
 */
#ifndef MN_CORE_WIRE_H
#define MN_CORE_WIRE_H

#include "core/common.h"

typedef struct mn_wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} mn_wbuf;

/* Appends n bytes (p may be NULL for n zero bytes). */
void wb_put(mn_wbuf *w, const void *p, size_t n);
void wb_u8(mn_wbuf *w, uint8_t v);
void wb_u16(mn_wbuf *w, uint16_t v);
void wb_u32(mn_wbuf *w, uint32_t v);
void wb_u64(mn_wbuf *w, uint64_t v);
void wb_f32(mn_wbuf *w, float v);
void wb_f64(mn_wbuf *w, double v);
/* Zero bytes up to the next multiple of `align`. */
void wb_align(mn_wbuf *w, size_t align);
void wb_free(mn_wbuf *w);

typedef struct mn_rbuf {
    const uint8_t *p;
    size_t n, at;
    bool bad; /* a get went past the end */
} mn_rbuf;

static inline mn_rbuf rb_of(const void *p, size_t n) { return (mn_rbuf){(const uint8_t *)p, n, 0, false}; }
static inline size_t rb_left(const mn_rbuf *r) { return r->n - r->at; }
/* A pointer to the next n bytes (NULL and bad if fewer are left). */
const uint8_t *rb_take(mn_rbuf *r, size_t n);
uint8_t rb_u8(mn_rbuf *r);
uint16_t rb_u16(mn_rbuf *r);
uint32_t rb_u32(mn_rbuf *r);
uint64_t rb_u64(mn_rbuf *r);
float rb_f32(mn_rbuf *r);
double rb_f64(mn_rbuf *r);

/* The same, on plain memory. */
uint32_t le32_get(const uint8_t *p);
uint64_t le64_get(const uint8_t *p);
void le32_put(uint8_t *p, uint32_t v);
void le64_put(uint8_t *p, uint64_t v);

#endif
