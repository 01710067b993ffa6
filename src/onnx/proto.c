/* proto.c - reading ONNX protobuf messages safely: a wire-format check
 * before protobuf-c parses anything, an allocation limit, TensorProto
 * decoding with every size checked, and the public mn_onnx_tensor_read.
 *
 * protobuf-c checks lengths against the buffer but recurses into nested
 * messages without a depth limit and allocates what the file claims, so a
 * hostile file could exhaust the stack or memory: ox_unpack walks the wire
 * format first (schema-aware: only fields declared as messages are entered)
 * and refuses nesting deeper than 64 messages and groups; allocations go
 * through a counting allocator capped at a fixed multiple of the input.
 *
 * Does not: interpret models (import.c) or evaluate tensors (host.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

/* ---- messages ---------------------------------------------------------------- */

void ox_str_vadd(ox_str *s, const char *fmt, va_list ap) {
    if (s->oom) return;
    va_list ap2;
    va_copy(ap2, ap);
    int k = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (k < 0) return;
    if (s->n + (size_t)k + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + (size_t)k + 1) cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) {
            s->oom = true;
            return;
        }
        s->p = p;
        s->cap = cap;
    }
    vsnprintf(s->p + s->n, (size_t)k + 1, fmt, ap);
    s->n += (size_t)k;
}

void ox_str_add(ox_str *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ox_str_vadd(s, fmt, ap);
    va_end(ap);
}

void ox_str_free(ox_str *s) {
    free(s->p);
    memset(s, 0, sizeof *s);
}

void ox_fmt(char *err, size_t cap, const char *fmt, ...) {
    if (!err || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* ---- the counting allocator ------------------------------------------------- */

typedef struct { size_t size; size_t pad; } ox_block; /* keeps 16-byte alignment */

static void *alloc_fn(void *data, size_t size) {
    ox_alloc *a = data;
    if (size > a->limit || a->used > a->limit - size) return NULL;
    ox_block *b = malloc(sizeof *b + size);
    if (!b) return NULL;
    b->size = size;
    a->used += size;
    return b + 1;
}

static void free_fn(void *data, void *p) {
    ox_alloc *a = data;
    if (!p) return;
    ox_block *b = (ox_block *)p - 1;
    a->used -= b->size;
    free(b);
}

void ox_alloc_init(ox_alloc *a, size_t limit) {
    a->base.alloc = alloc_fn;
    a->base.free = free_fn;
    a->base.allocator_data = a;
    a->used = 0;
    a->limit = limit;
}

/* ---- the wire-format check ------------------------------------------------- */

#define OX_MAX_DEPTH 64

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (int i = 0; i < 10; i++) {
        if (*p >= end) return false;
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

static bool wire_ok(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n, int depth,
                    char *err, size_t cap) {
    const uint8_t *end = p + n;
    while (p < end) {
        const uint8_t *at = p;
        uint64_t tag, v;
        if (!read_varint(&p, end, &tag)) {
            ox_fmt(err, cap, "malformed protobuf (%s): a field tag is cut off", d->name);
            return false;
        }
        uint64_t field = tag >> 3;
        unsigned wt = (unsigned)(tag & 7);
        if (field == 0 || field > 0x1fffffff) {
            ox_fmt(err, cap, "malformed protobuf (%s): field number %llu", d->name, (unsigned long long)field);
            return false;
        }
        switch (wt) {
        case 0:
            if (!read_varint(&p, end, &v)) {
                ox_fmt(err, cap, "malformed protobuf (%s): a varint is cut off", d->name);
                return false;
            }
            break;
        case 1:
        case 5: {
            size_t k = wt == 1 ? 8 : 4;
            if ((size_t)(end - p) < k) {
                ox_fmt(err, cap, "malformed protobuf (%s): a fixed-size field is cut off", d->name);
                return false;
            }
            p += k;
            break;
        }
        case 2: {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) {
                ox_fmt(err, cap, "malformed protobuf (%s): field %llu at byte %zu claims more bytes than its message has",
                       d->name, (unsigned long long)field, (size_t)(at - (end - n)));
                return false;
            }
            const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, (unsigned)field);
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (depth + 1 > OX_MAX_DEPTH) {
                    ox_fmt(err, cap, "protobuf messages nested deeper than %d levels (%s)", OX_MAX_DEPTH, d->name);
                    return false;
                }
                if (!wire_ok(f->descriptor, p, (size_t)v, depth + 1, err, cap)) return false;
            }
            p += v;
            break;
        }
        default:
            ox_fmt(err, cap, "malformed protobuf (%s): wire type %u (groups are not used by ONNX)", d->name, wt);
            return false;
        }
    }
    return true;
}

ProtobufCMessage *ox_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                            ox_alloc *a, char *err, size_t cap) {
    if (!wire_ok(d, data, len, 0, err, cap)) return NULL;
    ProtobufCMessage *msg = protobuf_c_message_unpack(d, &a->base, len, data);
    if (!msg) {
        if (a->used >= a->limit / 2)
            ox_fmt(err, cap, "the %s needs more than %zu bytes of memory to parse", d->name, a->limit);
        else
            ox_fmt(err, cap, "malformed protobuf: protobuf-c could not parse the %s", d->name);
    }
    return msg;
}

/* ---- dtypes --------------------------------------------------------------------- */

const char *mn_onnx_dtype_name(int dt) {
    switch (dt) {
    case MN_ONNX_FLOAT: return "float";
    case MN_ONNX_UINT8: return "uint8";
    case MN_ONNX_INT8: return "int8";
    case MN_ONNX_UINT16: return "uint16";
    case MN_ONNX_INT16: return "int16";
    case MN_ONNX_INT32: return "int32";
    case MN_ONNX_INT64: return "int64";
    case MN_ONNX_STRING: return "string";
    case MN_ONNX_BOOL: return "bool";
    case MN_ONNX_FLOAT16: return "float16";
    case MN_ONNX_DOUBLE: return "double";
    case MN_ONNX_UINT32: return "uint32";
    case MN_ONNX_UINT64: return "uint64";
    case MN_ONNX_COMPLEX64: return "complex64";
    case MN_ONNX_COMPLEX128: return "complex128";
    case MN_ONNX_BFLOAT16: return "bfloat16";
    case MN_ONNX_UNDEFINED: return "undefined";
    default: return "?";
    }
}

size_t mn_onnx_dtype_size(int dt) {
    switch (dt) {
    case MN_ONNX_UINT8:
    case MN_ONNX_INT8:
    case MN_ONNX_BOOL: return 1;
    case MN_ONNX_UINT16:
    case MN_ONNX_INT16:
    case MN_ONNX_FLOAT16:
    case MN_ONNX_BFLOAT16: return 2;
    case MN_ONNX_FLOAT:
    case MN_ONNX_INT32:
    case MN_ONNX_UINT32: return 4;
    case MN_ONNX_INT64:
    case MN_ONNX_DOUBLE:
    case MN_ONNX_UINT64: return 8;
    default: return 0;
    }
}

bool ox_dtype_float(int dt) {
    return dt == MN_ONNX_FLOAT || dt == MN_ONNX_DOUBLE || dt == MN_ONNX_FLOAT16 || dt == MN_ONNX_BFLOAT16;
}

bool ox_dtype_int(int dt) {
    switch (dt) {
    case MN_ONNX_UINT8:
    case MN_ONNX_INT8:
    case MN_ONNX_UINT16:
    case MN_ONNX_INT16:
    case MN_ONNX_INT32:
    case MN_ONNX_INT64:
    case MN_ONNX_BOOL:
    case MN_ONNX_UINT32:
    case MN_ONNX_UINT64: return true;
    default: return false;
    }
}

bool ox_dtype_known(int dt) { return ox_dtype_float(dt) || ox_dtype_int(dt); }

/* ---- conversions ------------------------------------------------------------ */

static double half_to_double(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m | 1024), e - 25);
    return s ? -v : v;
}

static double bf16_to_double(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* round to nearest even at 11 (f16) or 8 (bf16) significant bits, with the
 * types' exponent ranges */
static double round_bits(double v, int bits, int emin, double maxv) {
    if (!isfinite(v) || v == 0) return v;
    int e;
    frexp(v, &e); /* v = f * 2^e, 0.5 <= |f| < 1 */
    int q = e - bits;
    if (e - 1 < emin) q = emin - bits + 1; /* subnormal spacing */
    double r = ldexp(nearbyint(ldexp(v, -q)), q);
    if (fabs(r) > maxv) return v > 0 ? INFINITY : -INFINITY;
    return r;
}

double ox_round_to(int dt, double v) {
    switch (dt) {
    case MN_ONNX_FLOAT: return (double)(float)v;
    case MN_ONNX_FLOAT16: return round_bits(v, 11, -14, 65504.0);
    case MN_ONNX_BFLOAT16: return round_bits((double)(float)v, 8, -126, 3.3895313892515355e38);
    default: return v;
    }
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* ---- host tensors ------------------------------------------------------------ */

int64_t ox_numel(int rank, const int64_t *dims, int64_t limit) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return -1;
        if (dims[i] == 0) n = 0;
        else if (n > limit / dims[i]) return -1;
        else n *= dims[i];
    }
    return n <= limit ? n : -1;
}

mn_status ox_host_alloc(ox_host *h, int dtype, int rank, const int64_t *dims, char *err, size_t cap) {
    memset(h, 0, sizeof *h);
    if (rank < 0 || rank > OX_MAX_RANK) {
        ox_fmt(err, cap, "rank %d (at most %d)", rank, OX_MAX_RANK);
        return MN_E_UNSUPPORTED;
    }
    int64_t n = ox_numel(rank, dims, OX_HOST_MAX_NUMEL);
    if (n < 0) {
        ox_fmt(err, cap, "a tensor computed at import holds more than %lld elements", (long long)OX_HOST_MAX_NUMEL);
        return MN_E_UNSUPPORTED;
    }
    h->dtype = dtype;
    h->rank = rank;
    for (int i = 0; i < rank; i++) h->dims[i] = dims[i];
    h->numel = n;
    size_t bytes = (size_t)(n ? n : 1) * 8;
    if (ox_dtype_float(dtype)) h->f = calloc(1, bytes);
    else h->i = calloc(1, bytes);
    if (!h->f && !h->i) {
        ox_fmt(err, cap, "out of memory (%zu bytes)", bytes);
        return MN_E_NOMEM;
    }
    return MN_OK;
}

void ox_host_free(ox_host *h) {
    if (!h) return;
    free(h->f);
    free(h->i);
    memset(h, 0, sizeof *h);
}

mn_status ox_host_copy(ox_host *dst, const ox_host *src, char *err, size_t cap) {
    mn_status st = ox_host_alloc(dst, src->dtype, src->rank, src->dims, err, cap);
    if (st) return st;
    if (src->numel) {
        if (src->f) memcpy(dst->f, src->f, (size_t)src->numel * sizeof(double));
        else memcpy(dst->i, src->i, (size_t)src->numel * sizeof(int64_t));
    }
    return MN_OK;
}

double ox_host_get_f(const ox_host *h, int64_t k) { return h->f ? h->f[k] : (double)h->i[k]; }

int64_t ox_f2i(double v) {
    if (!(v == v)) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

int64_t ox_host_get_i(const ox_host *h, int64_t k) { return h->i ? h->i[k] : ox_f2i(h->f[k]); }

static int64_t wrap_int(int dt, int64_t v) {
    switch (dt) {
    case MN_ONNX_BOOL: return v != 0;
    case MN_ONNX_UINT8: return (uint8_t)v;
    case MN_ONNX_INT8: return (int8_t)v;
    case MN_ONNX_UINT16: return (uint16_t)v;
    case MN_ONNX_INT16: return (int16_t)v;
    case MN_ONNX_INT32: return (int32_t)v;
    case MN_ONNX_UINT32: return (uint32_t)v;
    default: return v;
    }
}

void ox_host_set_f(ox_host *h, int64_t k, double v) {
    if (h->f) {
        h->f[k] = ox_round_to(h->dtype, v);
        return;
    }
    if (h->dtype == MN_ONNX_BOOL) {
        h->i[k] = v != 0;
        return;
    }
    h->i[k] = wrap_int(h->dtype, ox_f2i(v));
}

void ox_host_set_i(ox_host *h, int64_t k, int64_t v) {
    if (h->f) h->f[k] = ox_round_to(h->dtype, (double)v);
    else h->i[k] = wrap_int(h->dtype, v);
}

/* ---- TensorProto ------------------------------------------------------------ */

mn_status ox_tensor_check(const Onnx__TensorProto *t, int64_t *numel, const char *what, char *err,
                          size_t cap) {
    int dt = t->has_data_type ? t->data_type : 0;
    if (!ox_dtype_known(dt)) {
        ox_fmt(err, cap, "%s: dtype %s (%d) is not supported", what, mn_onnx_dtype_name(dt), dt);
        return MN_E_UNSUPPORTED;
    }
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        ox_fmt(err, cap, "%s: external data (a separate file) is not supported", what);
        return MN_E_UNSUPPORTED;
    }
    if (t->segment) {
        ox_fmt(err, cap, "%s: segmented tensors are not supported", what);
        return MN_E_UNSUPPORTED;
    }
    if (t->n_dims > OX_MAX_RANK) {
        ox_fmt(err, cap, "%s: rank %zu (at most %d)", what, t->n_dims, OX_MAX_RANK);
        return MN_E_UNSUPPORTED;
    }
    for (size_t i = 0; i < t->n_dims; i++)
        if (t->dims[i] < 0) {
            ox_fmt(err, cap, "%s: dimension %zu is %lld", what, i, (long long)t->dims[i]);
            return MN_E_FORMAT;
        }
    int64_t n = ox_numel((int)t->n_dims, t->dims, OX_MAX_NUMEL);
    if (n < 0) {
        ox_fmt(err, cap, "%s: more than 2^40 elements", what);
        return MN_E_FORMAT;
    }
    size_t typed = 0;
    int fields = 0;
    const char *field = "";
    switch (dt) {
    case MN_ONNX_FLOAT: typed = t->n_float_data; field = "float_data"; break;
    case MN_ONNX_INT64: typed = t->n_int64_data; field = "int64_data"; break;
    case MN_ONNX_DOUBLE: typed = t->n_double_data; field = "double_data"; break;
    case MN_ONNX_UINT32:
    case MN_ONNX_UINT64: typed = t->n_uint64_data; field = "uint64_data"; break;
    default: typed = t->n_int32_data; field = "int32_data"; break;
    }
    /* data in a field the dtype does not use is malformed */
    size_t others = t->n_float_data + t->n_int64_data + t->n_double_data + t->n_uint64_data + t->n_int32_data +
                    t->n_string_data - typed;
    if (others) {
        ox_fmt(err, cap, "%s: %s tensor with data in a field of another type", what, mn_onnx_dtype_name(dt));
        return MN_E_FORMAT;
    }
    if (t->has_raw_data) fields++;
    if (typed) fields++;
    if (fields > 1) {
        ox_fmt(err, cap, "%s: both raw_data and %s are set", what, field);
        return MN_E_FORMAT;
    }
    if (t->has_raw_data) {
        uint64_t want = (uint64_t)n * mn_onnx_dtype_size(dt);
        if (t->raw_data.len != want) {
            ox_fmt(err, cap, "%s: raw_data holds %zu bytes, %lld %s elements need %llu", what, t->raw_data.len,
                   (long long)n, mn_onnx_dtype_name(dt), (unsigned long long)want);
            return MN_E_FORMAT;
        }
    } else if ((int64_t)typed != n) {
        ox_fmt(err, cap, "%s: %s holds %zu values, the shape needs %lld", what, field, typed, (long long)n);
        return MN_E_FORMAT;
    }
    *numel = n;
    return MN_OK;
}

/* element k of t as a double (float dtypes) or an int64 (others) */
static void elem(const Onnx__TensorProto *t, int dt, int64_t k, double *f, int64_t *iv, bool *big) {
    *big = false;
    if (t->has_raw_data) {
        const uint8_t *p = t->raw_data.data + (size_t)k * mn_onnx_dtype_size(dt);
        switch (dt) {
        case MN_ONNX_FLOAT: {
            uint32_t u = rd32(p);
            float x;
            memcpy(&x, &u, 4);
            *f = x;
            return;
        }
        case MN_ONNX_DOUBLE: {
            uint64_t u = rd64(p);
            memcpy(f, &u, 8);
            return;
        }
        case MN_ONNX_FLOAT16: *f = half_to_double(rd16(p)); return;
        case MN_ONNX_BFLOAT16: *f = bf16_to_double(rd16(p)); return;
        case MN_ONNX_UINT8: *iv = p[0]; return;
        case MN_ONNX_INT8: *iv = (int8_t)p[0]; return;
        case MN_ONNX_BOOL: *iv = p[0] != 0; return;
        case MN_ONNX_UINT16: *iv = rd16(p); return;
        case MN_ONNX_INT16: *iv = (int16_t)rd16(p); return;
        case MN_ONNX_INT32: *iv = (int32_t)rd32(p); return;
        case MN_ONNX_UINT32: *iv = rd32(p); return;
        case MN_ONNX_INT64: *iv = (int64_t)rd64(p); return;
        case MN_ONNX_UINT64: {
            uint64_t u = rd64(p);
            *big = u > (uint64_t)INT64_MAX;
            *iv = (int64_t)(u & (uint64_t)INT64_MAX);
            return;
        }
        default: *iv = 0; return;
        }
    }
    switch (dt) {
    case MN_ONNX_FLOAT: *f = t->float_data[k]; return;
    case MN_ONNX_DOUBLE: *f = t->double_data[k]; return;
    case MN_ONNX_FLOAT16: *f = half_to_double((uint16_t)t->int32_data[k]); return;
    case MN_ONNX_BFLOAT16: *f = bf16_to_double((uint16_t)t->int32_data[k]); return;
    case MN_ONNX_INT64: *iv = t->int64_data[k]; return;
    case MN_ONNX_UINT32: *iv = (uint32_t)t->uint64_data[k]; return;
    case MN_ONNX_UINT64:
        *big = t->uint64_data[k] > (uint64_t)INT64_MAX;
        *iv = (int64_t)(t->uint64_data[k] & (uint64_t)INT64_MAX);
        return;
    default: *iv = wrap_int(dt, t->int32_data[k]); return;
    }
}

mn_status ox_tensor_decode(ox_host *h, const Onnx__TensorProto *t, const char *what, char *err,
                           size_t cap) {
    int64_t n;
    mn_status st = ox_tensor_check(t, &n, what, err, cap);
    if (st) return st;
    int dt = t->data_type;
    if (n > OX_HOST_MAX_NUMEL) {
        ox_fmt(err, cap, "%s: %lld elements (at most %lld are evaluated at import)", what, (long long)n,
               (long long)OX_HOST_MAX_NUMEL);
        return MN_E_UNSUPPORTED;
    }
    char sub[64];
    if ((st = ox_host_alloc(h, dt, (int)t->n_dims, t->dims, sub, sizeof sub))) {
        ox_fmt(err, cap, "%s: %s", what, sub);
        return st;
    }
    for (int64_t k = 0; k < n; k++) {
        double f = 0;
        int64_t iv = 0;
        bool big;
        elem(t, dt, k, &f, &iv, &big);
        if (big) {
            ox_host_free(h);
            ox_fmt(err, cap, "%s: uint64 value above 2^63 is not supported", what);
            return MN_E_UNSUPPORTED;
        }
        if (h->f) h->f[k] = f;
        else h->i[k] = iv;
    }
    return MN_OK;
}

mn_status ox_tensor_decode_f32(float *dst, int64_t numel, const Onnx__TensorProto *t, const char *what,
                               char *err, size_t cap) {
    int64_t n;
    mn_status st = ox_tensor_check(t, &n, what, err, cap);
    if (st) return st;
    int dt = t->data_type;
    if (n != numel) {
        ox_fmt(err, cap, "%s: %lld elements, expected %lld", what, (long long)n, (long long)numel);
        return MN_E_SHAPE;
    }
    if (dt == MN_ONNX_FLOAT && !t->has_raw_data) {
        if (n) memcpy(dst, t->float_data, (size_t)n * sizeof(float));
        return MN_OK;
    }
    for (int64_t k = 0; k < n; k++) {
        double f = 0;
        int64_t iv = 0;
        bool big;
        elem(t, dt, k, &f, &iv, &big);
        dst[k] = ox_dtype_float(dt) ? (float)f : (float)iv;
    }
    return MN_OK;
}

/* ---- mn_onnx_tensor_read -------------------------------------------------------- */

mn_status mn_onnx_tensor_read(mn_onnx_tensor *out, const char *path, char *err, size_t errcap) {
    if (!out) return MN_E_INVALID;
    memset(out, 0, sizeof *out);
    if (!path) {
        ox_fmt(err, errcap, "onnx tensor: path is NULL");
        return MN_E_INVALID;
    }
    char *buf = NULL;
    size_t len = 0;
    mn_status st = mn_read_file(&buf, &len, path, OX_MAX_FILE, err, errcap);
    if (st) return st;
    ox_alloc a;
    ox_alloc_init(&a, ((size_t)64 << 20) + 16 * len);
    char sub[384], pb[256];
    mn_escape(pb, sizeof pb, path);
    Onnx__TensorProto *t =
        (Onnx__TensorProto *)ox_unpack(&onnx__tensor_proto__descriptor, (const uint8_t *)buf, len, &a, sub, sizeof sub);
    free(buf);
    if (!t) {
        ox_fmt(err, errcap, "%s: %s", pb, sub);
        return MN_E_FORMAT;
    }
    int64_t n = 0;
    if ((st = ox_tensor_check(t, &n, "tensor", sub, sizeof sub))) goto done;
    int dt = t->data_type;
    size_t es = mn_onnx_dtype_size(dt);
    /* test data is small; refuse what would not fit in memory comfortably */
    if (n > ((int64_t)1 << 31) / (int64_t)es) {
        ox_fmt(sub, sizeof sub, "tensor of %lld elements is too large", (long long)n);
        st = MN_E_UNSUPPORTED;
        goto done;
    }
    out->data = malloc((size_t)(n ? n : 1) * es);
    if (!out->data) {
        st = MN_E_NOMEM;
        ox_fmt(sub, sizeof sub, "out of memory");
        goto done;
    }
    out->name = malloc(strlen(t->name ? t->name : "") + 1);
    if (!out->name) {
        st = MN_E_NOMEM;
        ox_fmt(sub, sizeof sub, "out of memory");
        goto done;
    }
    strcpy(out->name, t->name ? t->name : "");
    if (t->has_raw_data) {
        /* raw bytes are little-endian, as the host (x86-64, aarch64) */
        if (n) memcpy(out->data, t->raw_data.data, (size_t)n * es);
        if (dt == MN_ONNX_BOOL)
            for (int64_t k = 0; k < n; k++) ((uint8_t *)out->data)[k] = ((uint8_t *)out->data)[k] != 0;
    } else {
        for (int64_t k = 0; k < n; k++) {
            uint8_t *p = (uint8_t *)out->data + (size_t)k * es;
            switch (dt) {
            case MN_ONNX_FLOAT: memcpy(p, &t->float_data[k], 4); break;
            case MN_ONNX_DOUBLE: memcpy(p, &t->double_data[k], 8); break;
            case MN_ONNX_INT64: memcpy(p, &t->int64_data[k], 8); break;
            case MN_ONNX_UINT64: memcpy(p, &t->uint64_data[k], 8); break;
            case MN_ONNX_UINT32: {
                uint32_t u = (uint32_t)t->uint64_data[k];
                memcpy(p, &u, 4);
                break;
            }
            case MN_ONNX_INT32: memcpy(p, &t->int32_data[k], 4); break;
            case MN_ONNX_UINT16:
            case MN_ONNX_INT16:
            case MN_ONNX_FLOAT16:
            case MN_ONNX_BFLOAT16: {
                uint16_t u = (uint16_t)t->int32_data[k];
                memcpy(p, &u, 2);
                break;
            }
            case MN_ONNX_BOOL: *p = t->int32_data[k] != 0; break;
            default: *p = (uint8_t)t->int32_data[k]; break;
            }
        }
    }
    out->dtype = dt;
    out->rank = (int)t->n_dims;
    for (size_t i = 0; i < t->n_dims; i++) out->shape[i] = t->dims[i];
    out->numel = n;
    out->bytes = (size_t)n * es;
done:
    protobuf_c_message_free_unpacked(&t->base, &a.base);
    if (st) {
        ox_fmt(err, errcap, "%s: %s", pb, sub);
        mn_onnx_tensor_free(out);
    }
    return st;
}

void mn_onnx_tensor_free(mn_onnx_tensor *t) {
    if (!t) return;
    free(t->data);
    free(t->name);
    memset(t, 0, sizeof *t);
}
