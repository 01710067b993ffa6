/* import.c - ONNX model -> meganeura graph: the public entry points of
 * meganeura_onnx.h, the table of values (every ONNX name: a constant known
 * at import, a graph input, or a tensor of the graph), attribute access,
 * the collection of unsupported items into one message, and the walk over
 * the nodes that calls the operator handlers (ops_*.c).
 *
 * Values are materialised lazily: an initializer becomes a parameter (or a
 * constant) and a graph input is declared only when a node uses it as a
 * tensor, so initializers and inputs that serve only as shapes never enter
 * the graph.
 *
 * Does not: parse protobuf (proto.c), evaluate constants (host.c) or know
 * any operator (ops_*.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx_internal.h"

/* ---- small helpers ------------------------------------------------------- */

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static const char *esc(char *buf, size_t cap, const char *s) { return mn_escape(buf, cap, s ? s : ""); }

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* ---- the handle -------------------------------------------------------------- */

mn_onnx_options mn_onnx_default_options(void) {
    mn_onnx_options o;
    memset(&o, 0, sizeof o);
    return o;
}

static void io_free(ox_io *io) {
    free(io->name);
    free(io->graph_name);
    ox_host_free(&io->host);
}

void mn_onnx_destroy(mn_onnx *m) {
    if (!m) return;
    if (m->model) protobuf_c_message_free_unpacked(&m->model->base, &m->alloc.base);
    for (int i = 0; i < m->n_params; i++) free(m->params[i].graph_name);
    free(m->params);
    for (int i = 0; i < m->n_inputs; i++) io_free(&m->inputs[i]);
    free(m->inputs);
    for (int i = 0; i < m->n_outputs; i++) io_free(&m->outputs[i]);
    free(m->outputs);
    for (int i = 0; i < m->n_named; i++) free(m->names[i]);
    free(m->names);
    free(m->tensors);
    ox_str_free(&m->err);
    free(m);
}

const char *mn_onnx_error(const mn_onnx *m) {
    if (!m) return "onnx: no model (NULL handle)";
    return m->err.p ? m->err.p : "";
}

static mn_status io_at(const ox_io *list, int n, int i, mn_onnx_io *out) {
    if (!out || i < 0 || i >= n) return MN_E_INVALID;
    const ox_io *io = &list[i];
    memset(out, 0, sizeof *out);
    out->name = io->name;
    out->graph_name = io->graph_name ? io->graph_name : "";
    out->position = io->position;
    out->onnx_dtype = io->onnx_dtype;
    out->dtype = io->dtype;
    out->rank = io->rank;
    for (int k = 0; k < io->rank; k++) out->shape[k] = io->dims[k];
    out->tensor = io->tensor;
    return MN_OK;
}

int mn_onnx_input_count(const mn_onnx *m) { return m ? m->n_inputs : 0; }
int mn_onnx_output_count(const mn_onnx *m) { return m ? m->n_outputs : 0; }
mn_status mn_onnx_input_at(const mn_onnx *m, int i, mn_onnx_io *out) {
    return m ? io_at(m->inputs, m->n_inputs, i, out) : MN_E_INVALID;
}
mn_status mn_onnx_output_at(const mn_onnx *m, int i, mn_onnx_io *out) {
    return m ? io_at(m->outputs, m->n_outputs, i, out) : MN_E_INVALID;
}

mn_status mn_onnx_find(const mn_onnx *m, const char *name, mn_tensor *out) {
    if (!m || !name || !out) return MN_E_INVALID;
    for (int i = 0; i < m->n_named; i++)
        if (strcmp(m->names[i], name) == 0) {
            *out = m->tensors[i];
            return MN_OK;
        }
    return MN_E_NOT_FOUND;
}

static int64_t io_numel(const ox_io *io) {
    int64_t n = 1;
    for (int k = 0; k < io->rank; k++) n *= io->dims[k];
    return n;
}

static void fail_msg(mn_onnx *m, const char *fmt, ...) OX_PRINTF(2, 3);
static void fail_msg(mn_onnx *m, const char *fmt, ...) {
    ox_str_free(&m->err);
    va_list ap;
    va_start(ap, fmt);
    ox_str_vadd(&m->err, fmt, ap);
    va_end(ap);
}

double mn_onnx_value(const void *data, int dt, int64_t k) {
    const uint8_t *p = (const uint8_t *)data + (size_t)k * mn_onnx_dtype_size(dt);
    switch (dt) {
    case MN_ONNX_FLOAT: {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    case MN_ONNX_DOUBLE: {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    case MN_ONNX_FLOAT16:
    case MN_ONNX_BFLOAT16: {
        /* through a one-element TensorProto-free conversion */
        uint16_t u;
        memcpy(&u, p, 2);
        if (dt == MN_ONNX_BFLOAT16) {
            uint32_t w = (uint32_t)u << 16;
            float f;
            memcpy(&f, &w, 4);
            return f;
        }
        int s = u >> 15, e = (u >> 10) & 31, mant = u & 1023;
        double v = e == 0 ? ldexp(mant, -24) : e == 31 ? (mant ? NAN : INFINITY) : ldexp(mant | 1024, e - 25);
        return s ? -v : v;
    }
    case MN_ONNX_BOOL:
    case MN_ONNX_UINT8: return *p;
    case MN_ONNX_INT8: return (int8_t)*p;
    case MN_ONNX_UINT16: {
        uint16_t u;
        memcpy(&u, p, 2);
        return u;
    }
    case MN_ONNX_INT16: {
        int16_t u;
        memcpy(&u, p, 2);
        return u;
    }
    case MN_ONNX_INT32: {
        int32_t u;
        memcpy(&u, p, 4);
        return u;
    }
    case MN_ONNX_UINT32: {
        uint32_t u;
        memcpy(&u, p, 4);
        return u;
    }
    case MN_ONNX_INT64: {
        int64_t u;
        memcpy(&u, p, 8);
        return (double)u;
    }
    case MN_ONNX_UINT64: {
        uint64_t u;
        memcpy(&u, p, 8);
        return (double)u;
    }
    default: return NAN; /* string, complex, unknown */
    }
}

static int64_t raw_get_i(const void *data, int dt, int64_t k) {
    const uint8_t *p = (const uint8_t *)data + (size_t)k * mn_onnx_dtype_size(dt);
    if (dt == MN_ONNX_INT64) {
        int64_t u;
        memcpy(&u, p, 8);
        return u;
    }
    if (dt == MN_ONNX_UINT64) {
        uint64_t u;
        memcpy(&u, p, 8);
        return u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
    }
    return ox_f2i(mn_onnx_value(data, dt, k));
}

static const ox_io *find_io(const ox_io *list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].name, name) == 0) return &list[i];
    return NULL;
}

mn_status mn_onnx_set_input(mn_onnx *m, mn_session *s, const char *name, const void *data, size_t bytes) {
    if (!m) return MN_E_INVALID;
    if (!s || !name || (!data && bytes)) {
        fail_msg(m, "onnx set_input: NULL argument");
        return MN_E_INVALID;
    }
    char nb[160];
    const ox_io *io = find_io(m->inputs, m->n_inputs, name);
    if (!io) {
        /* an input of the model the import did not declare is accepted */
        const Onnx__GraphProto *g = m->model ? m->model->graph : NULL;
        for (size_t i = 0; g && i < g->n_input; i++)
            if (g->input[i]->name && strcmp(g->input[i]->name, name) == 0) return MN_OK;
        fail_msg(m, "onnx set_input: the model has no input '%s'", esc(nb, sizeof nb, name));
        return MN_E_NOT_FOUND;
    }
    int64_t n = io_numel(io);
    size_t es = mn_onnx_dtype_size(io->onnx_dtype);
    if (!es || bytes != (size_t)n * es) {
        fail_msg(m, "onnx set_input '%s': %zu bytes given, %lld %s elements need %zu", esc(nb, sizeof nb, name),
                 bytes, (long long)n, mn_onnx_dtype_name(io->onnx_dtype), (size_t)n * es);
        return MN_E_SHAPE;
    }
    void *buf = malloc((size_t)(n ? n : 1) * 4);
    if (!buf) {
        fail_msg(m, "onnx set_input: out of memory");
        return MN_E_NOMEM;
    }
    mn_status st = MN_OK;
    if (io->feed == OXF_IDS) {
        int32_t *d = buf;
        for (int64_t k = 0; k < n; k++) {
            int64_t v = raw_get_i(data, io->onnx_dtype, k);
            if (v < INT32_MIN || v > INT32_MAX) {
                fail_msg(m, "onnx set_input '%s': index %lld at element %lld does not fit in int32",
                         esc(nb, sizeof nb, name), (long long)v, (long long)k);
                st = MN_E_INVALID;
                break;
            }
            d[k] = (int32_t)v;
        }
    } else {
        float *d = buf;
        for (int64_t k = 0; k < n; k++) {
            double v = mn_onnx_value(data, io->onnx_dtype, k);
            if (io->feed == OXF_BOOL) v = v != 0;
            d[k] = (float)v;
        }
    }
    if (!st) {
        st = mn_session_set_input(s, io->graph_name, buf, (size_t)n * 4);
        if (st) fail_msg(m, "%s", mn_session_error(s));
    }
    free(buf);
    return st;
}

static void store_as(void *dst, int dt, int64_t k, double v) {
    uint8_t *p = (uint8_t *)dst + (size_t)k * mn_onnx_dtype_size(dt);
    switch (dt) {
    case MN_ONNX_FLOAT: {
        float f = (float)v;
        memcpy(p, &f, 4);
        return;
    }
    case MN_ONNX_DOUBLE: memcpy(p, &v, 8); return;
    case MN_ONNX_FLOAT16:
    case MN_ONNX_BFLOAT16: {
        /* f32 -> 16-bit, round to nearest even */
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        uint16_t h;
        if (dt == MN_ONNX_BFLOAT16) {
            h = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
            if (f != f) h = 0x7fc0;
        } else {
            double r = ox_round_to(MN_ONNX_FLOAT16, v);
            int sg = signbit(r) ? 0x8000 : 0;
            double a = fabs(r);
            if (r != r) h = 0x7e00;
            else if (isinf(a)) h = (uint16_t)(sg | 0x7c00);
            else if (a < ldexp(1, -14)) h = (uint16_t)(sg | (int)nearbyint(a * ldexp(1, 24)));
            else {
                int e;
                double fr = frexp(a, &e);
                h = (uint16_t)(sg | ((e + 14) << 10) | ((int)nearbyint((fr * 2 - 1) * 1024) & 1023));
            }
        }
        memcpy(p, &h, 2);
        return;
    }
    case MN_ONNX_BOOL: *p = v != 0; return;
    default: {
        int64_t iv = ox_f2i(nearbyint(v));
        switch (mn_onnx_dtype_size(dt)) {
        case 1: *p = (uint8_t)iv; return;
        case 2: {
            uint16_t u = (uint16_t)iv;
            memcpy(p, &u, 2);
            return;
        }
        case 4: {
            uint32_t u = (uint32_t)iv;
            memcpy(p, &u, 4);
            return;
        }
        default: memcpy(p, &iv, 8); return;
        }
    }
    }
}

mn_status mn_onnx_get_output(mn_onnx *m, mn_session *s, const char *name, void *dst, size_t bytes) {
    if (!m) return MN_E_INVALID;
    char nb[160];
    if (!name || (!dst && bytes)) {
        fail_msg(m, "onnx get_output: NULL argument");
        return MN_E_INVALID;
    }
    const ox_io *io = find_io(m->outputs, m->n_outputs, name);
    if (!io) {
        fail_msg(m, "onnx get_output: the model has no output '%s'", esc(nb, sizeof nb, name));
        return MN_E_NOT_FOUND;
    }
    int64_t n = io_numel(io);
    size_t es = mn_onnx_dtype_size(io->onnx_dtype);
    if (!es || bytes != (size_t)n * es) {
        fail_msg(m, "onnx get_output '%s': %zu bytes given, %lld %s elements need %zu", esc(nb, sizeof nb, name),
                 bytes, (long long)n, mn_onnx_dtype_name(io->onnx_dtype), (size_t)n * es);
        return MN_E_SHAPE;
    }
    if (io->is_host) {
        for (int64_t k = 0; k < n; k++) {
            if (io->host.i && io->onnx_dtype == MN_ONNX_INT64) memcpy((uint8_t *)dst + k * 8, &io->host.i[k], 8);
            else store_as(dst, io->onnx_dtype, k, ox_host_get_f(&io->host, k));
        }
        return MN_OK;
    }
    if (!s) {
        fail_msg(m, "onnx get_output: session is NULL");
        return MN_E_INVALID;
    }
    if (io->onnx_dtype == MN_ONNX_FLOAT && io->dtype == MN_F32) {
        mn_status st = mn_session_output(s, io->graph_name, dst, bytes);
        if (st) fail_msg(m, "%s", mn_session_error(s));
        return st;
    }
    void *buf = malloc((size_t)(n ? n : 1) * 4);
    if (!buf) return MN_E_NOMEM;
    mn_status st = mn_session_output(s, io->graph_name, buf, (size_t)n * 4);
    if (st) fail_msg(m, "%s", mn_session_error(s));
    else
        for (int64_t k = 0; k < n; k++)
            store_as(dst, io->onnx_dtype, k, io->dtype == MN_I32 ? (double)((int32_t *)buf)[k] : (double)((float *)buf)[k]);
    free(buf);
    return st;
}

mn_status mn_onnx_init_session(mn_onnx *m, mn_session *s) {
    if (!m) return MN_E_INVALID;
    if (!s) {
        fail_msg(m, "onnx init_session: session is NULL");
        return MN_E_INVALID;
    }
    for (int i = 0; i < m->n_params; i++) {
        const ox_param *p = &m->params[i];
        float *buf = malloc((size_t)(p->numel ? p->numel : 1) * sizeof(float));
        if (!buf) {
            fail_msg(m, "onnx init_session: out of memory for '%s' (%lld values)", p->graph_name,
                     (long long)p->numel);
            return MN_E_NOMEM;
        }
        char sub[256];
        mn_status st = ox_tensor_decode_f32(buf, p->numel, p->src, p->graph_name, sub, sizeof sub);
        if (st) fail_msg(m, "onnx init_session: %s", sub);
        else if ((st = mn_session_set_param(s, p->graph_name, buf, (size_t)p->numel)))
            fail_msg(m, "%s", mn_session_error(s));
        free(buf);
        if (st) return st;
    }
    return MN_OK;
}

/* ---- values ------------------------------------------------------------------ */

static int find_value(const ox_import *im, const char *name) {
    if (!im->n_slots) return -1;
    size_t mask = (size_t)im->n_slots - 1, h = (size_t)hash_name(name) & mask;
    for (;;) {
        int k = im->slots[h];
        if (k < 0) return -1;
        if (strcmp(im->vals[k].name, name) == 0) return k;
        h = (h + 1) & mask;
    }
}

static mn_status rehash(ox_import *im, int want) {
    int n = 64;
    while (n < want * 2) n *= 2;
    int *s = malloc((size_t)n * sizeof *s);
    if (!s) return MN_E_NOMEM;
    for (int i = 0; i < n; i++) s[i] = -1;
    for (int k = 0; k < im->n_vals; k++) {
        size_t h = (size_t)hash_name(im->vals[k].name) & (size_t)(n - 1);
        while (s[h] >= 0) h = (h + 1) & (size_t)(n - 1);
        s[h] = k;
    }
    free(im->slots);
    im->slots = s;
    im->n_slots = n;
    return MN_OK;
}

/* A new value named name (not yet defined); -1 on out of memory. */
static int add_value(ox_import *im, const char *name, ox_kind kind) {
    if (im->n_vals == im->cap_vals) {
        int cap = im->cap_vals ? im->cap_vals * 2 : 64;
        ox_value *v = realloc(im->vals, (size_t)cap * sizeof *v);
        if (!v) return -1;
        im->vals = v;
        im->cap_vals = cap;
    }
    if ((im->n_vals + 1) * 2 > im->n_slots && rehash(im, im->n_vals + 1)) return -1;
    ox_value *v = &im->vals[im->n_vals];
    memset(v, 0, sizeof *v);
    v->name = dupstr(name);
    if (!v->name) return -1;
    v->kind = kind;
    v->init = -1;
    v->input = -1;
    v->t = MN_NONE;
    int k = im->n_vals++;
    size_t mask = (size_t)im->n_slots - 1, h = (size_t)hash_name(name) & mask;
    while (im->slots[h] >= 0) h = (h + 1) & mask;
    im->slots[h] = k;
    return k;
}

static void free_values(ox_import *im) {
    for (int k = 0; k < im->n_vals; k++) {
        free(im->vals[k].name);
        ox_host_free(&im->vals[k].host);
    }
    free(im->vals);
    free(im->slots);
}

/* ---- messages ------------------------------------------------------------------ */

static void node_label(const ox_ctx *c, char *buf, size_t cap) {
    char nb[128];
    const Onnx__NodeProto *n = c->node;
    if (n->name && n->name[0])
        snprintf(buf, cap, "%s (node '%s')", esc(nb, sizeof nb, n->op_type), esc(nb + 64, 64, n->name));
    else snprintf(buf, cap, "%s (node %d)", esc(nb, sizeof nb, n->op_type), c->index);
}

#define OX_MAX_ITEMS 64

static void item_v(ox_import *im, const char *label, const char *fmt, va_list ap) {
    im->n_items++;
    if (im->n_items > OX_MAX_ITEMS) return;
    ox_str_add(&im->items, "\n  %s: ", label);
    ox_str_vadd(&im->items, fmt, ap);
}

static void item(ox_import *im, mn_status st, const char *label, const char *fmt, ...) OX_PRINTF(4, 5);
static void item(ox_import *im, mn_status st, const char *label, const char *fmt, ...) {
    if (st != MN_E_UNSUPPORTED && !im->first) im->first = st;
    va_list ap;
    va_start(ap, fmt);
    item_v(im, label, fmt, ap);
    va_end(ap);
}

mn_status ox_unsup(ox_ctx *c, const char *fmt, ...) {
    char label[256];
    node_label(c, label, sizeof label);
    va_list ap;
    va_start(ap, fmt);
    item_v(c->im, label, fmt, ap);
    va_end(ap);
    c->failures++;
    return MN_E_UNSUPPORTED;
}

mn_status ox_fail(ox_ctx *c, mn_status st, const char *fmt, ...) {
    char label[256];
    node_label(c, label, sizeof label);
    if (st != MN_E_UNSUPPORTED && !c->im->first) c->im->first = st;
    va_list ap;
    va_start(ap, fmt);
    item_v(c->im, label, fmt, ap);
    va_end(ap);
    c->failures++;
    return st;
}

mn_status ox_graph_fail(ox_ctx *c, mn_status st) {
    if (c->failures) return st; /* the handler already said why */
    return ox_fail(c, st, "%s", mn_graph_error(c->g));
}

/* ---- attributes --------------------------------------------------------------- */

static int attr_index(ox_ctx *c, const char *name) {
    const Onnx__NodeProto *n = c->node;
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && strcmp(n->attribute[i]->name, name) == 0) return (int)i;
    return -1;
}

const Onnx__AttributeProto *ox_attr(ox_ctx *c, const char *name) {
    int i = attr_index(c, name);
    if (i < 0) return NULL;
    c->used[i] = true;
    return c->node->attribute[i];
}

void ox_attr_ignore(ox_ctx *c, const char *name) { (void)ox_attr(c, name); }

/* the attribute's type: as written, or (old files) the field that is set */
static int attr_type(const Onnx__AttributeProto *a) {
    if (a->has_type && a->type) return a->type;
    if (a->n_floats) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    if (a->n_ints) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    if (a->n_strings) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    if (a->t) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    if (a->g) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    if (a->has_s) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    if (a->has_f) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    if (a->has_i) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    return 0;
}

static mn_status attr_typed(ox_ctx *c, const char *name, int type, const char *tname,
                            const Onnx__AttributeProto **out) {
    *out = ox_attr(c, name);
    if (!*out) return MN_OK;
    if ((*out)->ref_attr_name) return ox_unsup(c, "attribute '%s' refers to a function attribute", name);
    if (attr_type(*out) != type) {
        *out = NULL;
        return ox_fail(c, MN_E_FORMAT, "attribute '%s' must be %s", name, tname);
    }
    return MN_OK;
}

mn_status ox_attr_int(ox_ctx *c, const char *name, int64_t def, int64_t *out) {
    const Onnx__AttributeProto *a;
    OX_CHECK(attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an int", &a));
    *out = a ? a->i : def;
    return MN_OK;
}

mn_status ox_attr_float(ox_ctx *c, const char *name, float def, float *out) {
    const Onnx__AttributeProto *a;
    OX_CHECK(attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float", &a));
    *out = a ? a->f : def;
    return MN_OK;
}

mn_status ox_attr_ints(ox_ctx *c, const char *name, int64_t *v, int cap, int *n) {
    const Onnx__AttributeProto *a;
    *n = -1;
    OX_CHECK(attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of ints", &a));
    if (!a) return MN_OK;
    if (a->n_ints > (size_t)cap) return ox_unsup(c, "attribute '%s' holds %zu values (at most %d)", name, a->n_ints, cap);
    for (size_t i = 0; i < a->n_ints; i++) v[i] = a->ints[i];
    *n = (int)a->n_ints;
    return MN_OK;
}

mn_status ox_attr_floats(ox_ctx *c, const char *name, float *v, int cap, int *n) {
    const Onnx__AttributeProto *a;
    *n = -1;
    OX_CHECK(attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS, "a list of floats", &a));
    if (!a) return MN_OK;
    if (a->n_floats > (size_t)cap)
        return ox_unsup(c, "attribute '%s' holds %zu values (at most %d)", name, a->n_floats, cap);
    for (size_t i = 0; i < a->n_floats; i++) v[i] = a->floats[i];
    *n = (int)a->n_floats;
    return MN_OK;
}

mn_status ox_attr_string(ox_ctx *c, const char *name, const char *def, const char **out) {
    const Onnx__AttributeProto *a;
    OX_CHECK(attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &a));
    if (!a) {
        *out = def;
        return MN_OK;
    }
    /* strings are bytes; a NUL inside one is refused */
    if (a->s.len && memchr(a->s.data, 0, a->s.len))
        return ox_fail(c, MN_E_FORMAT, "attribute '%s' holds a NUL byte", name);
    char *b = c->strs[c->n_strs++ & 7];
    size_t k = a->s.len < 255 ? a->s.len : 255;
    if (k) memcpy(b, a->s.data, k);
    b[k] = 0;
    *out = b;
    return MN_OK;
}

/* ---- inputs --------------------------------------------------------------------- */

bool ox_has_in(const ox_ctx *c, int k) { return k < c->nin && c->in[k] >= 0; }
/* an absent optional input reads as an empty placeholder; the accessors
 * below refuse it */
ox_value *ox_in(ox_ctx *c, int k) {
    if (!ox_has_in(c, k)) {
        static const ox_value absent = {.name = "(absent)", .kind = OXV_POISON, .init = -1, .input = -1, .t = MN_NONE};
        c->absent = absent;
        return &c->absent;
    }
    return &c->im->vals[c->in[k]];
}

static mn_status need_in(ox_ctx *c, int k) {
    if (ox_has_in(c, k)) return MN_OK;
    return ox_fail(c, MN_E_FORMAT, "input %d is required", k);
}
int ox_in_rank(ox_ctx *c, int k) { return ox_in(c, k)->rank; }
const int64_t *ox_in_dims(ox_ctx *c, int k) { return ox_in(c, k)->dims; }
int ox_in_dtype(ox_ctx *c, int k) { return ox_in(c, k)->dtype; }

bool ox_in_known(ox_ctx *c, int k) {
    if (!ox_has_in(c, k)) return false;
    ox_value *v = ox_in(c, k);
    return v->kind == OXV_CONST;
}

bool ox_all_known(ox_ctx *c) {
    for (int k = 0; k < c->nin; k++)
        if (c->in[k] >= 0 && c->im->vals[c->in[k]].kind != OXV_CONST) return false;
    return true;
}

static mn_status ensure_host(ox_ctx *c, ox_value *v) {
    if (v->host_ready) return MN_OK;
    if (!v->proto) return ox_fail(c, MN_E_STATE, "value '%s' has no data (internal)", v->name);
    char sub[320], nb[128];
    char what[160];
    snprintf(what, sizeof what, "tensor '%s'", esc(nb, sizeof nb, v->name));
    mn_status st = ox_tensor_decode(&v->host, v->proto, what, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    v->host_ready = true;
    return MN_OK;
}

mn_status ox_in_host(ox_ctx *c, int k, const ox_host **h) {
    OX_CHECK(need_in(c, k));
    ox_value *v = ox_in(c, k);
    char nb[128];
    if (v->kind == OXV_CONST || (v->kind == OXV_INPUT && v->hint)) {
        if (v->kind == OXV_CONST) OX_CHECK(ensure_host(c, v));
        *h = &v->host;
        return MN_OK;
    }
    return ox_unsup(c, "input %d ('%s') must be known at import (an initializer, a Constant, or a value given "
                       "for a graph input in mn_onnx_options.inputs): shapes are static",
                    k, esc(nb, sizeof nb, v->name));
}

static void record_named(ox_import *im, const char *name, mn_tensor t) {
    mn_onnx *m = im->m;
    if (m->n_named == m->cap_named) {
        int cap = m->cap_named ? m->cap_named * 2 : 64;
        char **n = realloc(m->names, (size_t)cap * sizeof *n);
        if (!n) return;
        m->names = n;
        mn_tensor *t2 = realloc(m->tensors, (size_t)cap * sizeof *t2);
        if (!t2) return;
        m->tensors = t2;
        m->cap_named = cap;
    }
    char *s = dupstr(name);
    if (!s) return;
    m->names[m->n_named] = s;
    m->tensors[m->n_named++] = t;
}

/* prefix + name, or NULL on out of memory */
static char *prefixed(const ox_import *im, const char *name) {
    const char *p = im->opt.prefix ? im->opt.prefix : "";
    size_t a = strlen(p), b = strlen(name);
    char *s = malloc(a + b + 1);
    if (!s) return NULL;
    memcpy(s, p, a);
    memcpy(s + a, name, b + 1);
    return s;
}

/* Whether the graph's name rules (meganeura.h) accept s: 1..MN_MAX_NAME
 * bytes of UTF-8 without control characters, not starting with "optim." or
 * "__". */
static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > MN_MAX_NAME || strncmp(s, "optim.", 6) == 0 || strncmp(s, "__", 2) == 0) return false;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c < 0x20 || c == 0x7f) return false;
        int k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (k < 0 || (k == 1 && c < 0xc2) || i + (size_t)k >= n) return false;
        for (int j = 1; j <= k; j++)
            if ((p[i + j] & 0xc0) != 0x80) return false;
        i += (size_t)k + 1;
    }
    return true;
}

/* A graph name for an ONNX name: the name itself (with the prefix), or
 * "onnx.<kind>.<n>" when the graph's rules refuse the name itself (one
 * starting with "__", say). A name already in the graph is an error, except
 * for outputs (an output whose name is taken, by the input it repeats say,
 * gets a generated one: mn_onnx_output_at reports it). decl tries a name. */
typedef mn_status (*decl_fn)(ox_import *im, const char *name, void *arg);
static mn_status declare(ox_import *im, const char *onnx_name, const char *kind, decl_fn fn, void *arg,
                         char **graph_name) {
    char *name = prefixed(im, onnx_name);
    if (!name) return MN_E_NOMEM;
    mn_status st = name_ok(name) ? fn(im, name, arg) : MN_E_INVALID;
    if (st == MN_E_INVALID && (!name_ok(name) || strcmp(kind, "output") == 0)) {
        free(name);
        char gen[64];
        snprintf(gen, sizeof gen, "onnx.%s.%d", kind, im->n_decl++);
        if (!(name = prefixed(im, gen))) return MN_E_NOMEM;
        st = fn(im, name, arg);
    }
    if (st) {
        free(name);
        return st;
    }
    *graph_name = name;
    return MN_OK;
}

typedef struct { mn_dtype dt; int rank; const int64_t *dims; mn_tensor *t; } decl_args;
static mn_status decl_input(ox_import *im, const char *name, void *arg) {
    decl_args *a = arg;
    return mn_graph_input(im->g, a->t, name, a->dt, a->rank, a->dims);
}
static mn_status decl_param(ox_import *im, const char *name, void *arg) {
    decl_args *a = arg;
    return mn_graph_param(im->g, a->t, name, a->rank, a->dims, (mn_init){MN_INIT_ZEROS, 0, 0});
}
static mn_status decl_output(ox_import *im, const char *name, void *arg) {
    decl_args *a = arg;
    return mn_graph_output(im->g, *a->t, name);
}

static mn_status check_runtime_shape(ox_ctx *c, const ox_value *v, const char *what) {
    char nb[128];
    if (v->rank > MN_MAX_RANK)
        return ox_unsup(c, "%s '%s' has rank %d (tensors computed in the graph have rank <= %d)", what,
                        esc(nb, sizeof nb, v->name), v->rank, MN_MAX_RANK);
    for (int i = 0; i < v->rank; i++)
        if (v->dims[i] == 0)
            return ox_unsup(c, "%s '%s' is empty (dimension %d is 0)", what, esc(nb, sizeof nb, v->name), i);
    return MN_OK;
}

mn_status ox_const_tensor(ox_ctx *c, const ox_host *h, mn_tensor *t) {
    if (h->rank > MN_MAX_RANK) return ox_unsup(c, "a constant of rank %d (at most %d)", h->rank, MN_MAX_RANK);
    if (h->numel == 0) return ox_unsup(c, "an empty constant tensor");
    float *buf = malloc((size_t)h->numel * sizeof(float));
    if (!buf) return ox_fail(c, MN_E_NOMEM, "out of memory");
    for (int64_t k = 0; k < h->numel; k++) buf[k] = (float)ox_host_get_f(h, k);
    mn_status st = mn_graph_constant(c->g, t, h->rank, h->dims, buf);
    free(buf);
    if (st) return ox_graph_fail(c, st);
    return MN_OK;
}

mn_status ox_scalar(ox_ctx *c, float v, mn_tensor *t) {
    OX_TRY(c, mn_graph_scalar(c->g, t, v));
    return MN_OK;
}

static mn_status add_input_io(ox_ctx *c, ox_value *v, mn_dtype dt, ox_feed feed) {
    ox_import *im = c->im;
    mn_onnx *m = im->m;
    if (m->n_inputs == m->cap_inputs) {
        int cap = m->cap_inputs ? m->cap_inputs * 2 : 8;
        ox_io *p = realloc(m->inputs, (size_t)cap * sizeof *p);
        if (!p) return ox_fail(c, MN_E_NOMEM, "out of memory");
        m->inputs = p;
        m->cap_inputs = cap;
    }
    ox_io *io = &m->inputs[m->n_inputs];
    memset(io, 0, sizeof *io);
    mn_tensor t = MN_NONE;
    decl_args a = {dt, v->rank, v->dims, &t};
    char *gname = NULL;
    mn_status st = declare(im, v->name, "input", decl_input, &a, &gname);
    if (st) return ox_graph_fail(c, st);
    io->name = dupstr(v->name);
    if (!io->name) {
        free(gname);
        return ox_fail(c, MN_E_NOMEM, "out of memory");
    }
    io->graph_name = gname;
    io->onnx_dtype = v->dtype;
    io->position = v->input;
    io->dtype = dt;
    io->feed = feed;
    io->rank = v->rank;
    for (int i = 0; i < v->rank; i++) io->dims[i] = v->dims[i];
    io->tensor = t;
    m->n_inputs++;
    v->t = t;
    v->feed = feed;
    record_named(im, v->name, t);
    return MN_OK;
}

static bool all_finite(const float *p, int64_t n) {
    for (int64_t k = 0; k < n; k++)
        if (!isfinite(p[k])) return false;
    return true;
}

/* A float initializer as a parameter (finite values only; others become
 * constants). *made = false when it became nothing. */
static mn_status make_param(ox_ctx *c, ox_value *v, bool *made) {
    ox_import *im = c->im;
    mn_onnx *m = im->m;
    *made = false;
    int64_t n = ox_numel(v->rank, v->dims, OX_MAX_NUMEL);
    float *buf = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!buf) return ox_fail(c, MN_E_NOMEM, "out of memory (%lld values of '%s')", (long long)n, v->name);
    char sub[320], nb[128], what[160];
    snprintf(what, sizeof what, "initializer '%s'", esc(nb, sizeof nb, v->name));
    mn_status st = ox_tensor_decode_f32(buf, n, v->proto, what, sub, sizeof sub);
    if (st) {
        free(buf);
        return ox_fail(c, st, "%s", sub);
    }
    if (!im->opt.constants && all_finite(buf, n)) {
        free(buf);
        if (m->n_params == m->cap_params) {
            int cap = m->cap_params ? m->cap_params * 2 : 16;
            ox_param *p = realloc(m->params, (size_t)cap * sizeof *p);
            if (!p) return ox_fail(c, MN_E_NOMEM, "out of memory");
            m->params = p;
            m->cap_params = cap;
        }
        mn_tensor t = MN_NONE;
        decl_args a = {MN_F32, v->rank, v->dims, &t};
        char *gname = NULL;
        if ((st = declare(im, v->name, "param", decl_param, &a, &gname))) return ox_graph_fail(c, st);
        m->params[m->n_params].graph_name = gname;
        m->params[m->n_params].src = v->proto;
        m->params[m->n_params].numel = n;
        m->n_params++;
        if (im->opt.freeze) OX_TRY(c, mn_graph_param_freeze(c->g, t, true));
        v->t = t;
        v->is_param = true;
        record_named(im, v->name, t);
        *made = true;
        return MN_OK;
    }
    st = mn_graph_constant(c->g, &v->t, v->rank, v->dims, buf);
    free(buf);
    if (st) return ox_graph_fail(c, st);
    *made = true;
    return MN_OK;
}

static mn_status value_f32(ox_ctx *c, ox_value *v, mn_tensor *t, bool cast_ints) {
    char nb[128];
    switch (v->kind) {
    case OXV_TENSOR:
        if (v->feed == OXF_IDS)
            return ox_unsup(c, "integer tensor '%s' is used as numbers (run-time integers are only supported "
                               "as Gather indices)", esc(nb, sizeof nb, v->name));
        *t = v->t;
        return MN_OK;
    case OXV_CONST: {
        if (v->t != MN_NONE) {
            *t = v->t;
            return MN_OK;
        }
        OX_CHECK(check_runtime_shape(c, v, "constant"));
        if (v->init >= 0 && ox_dtype_float(v->dtype) && v->proto) {
            bool made;
            OX_CHECK(make_param(c, v, &made));
            *t = v->t;
            return MN_OK;
        }
        OX_CHECK(ensure_host(c, v));
        OX_CHECK(ox_const_tensor(c, &v->host, &v->t));
        *t = v->t;
        return MN_OK;
    }
    case OXV_INPUT: {
        if (v->t != MN_NONE) {
            if (v->feed == OXF_IDS)
                return ox_unsup(c, "input '%s' is used both as indices and as numbers", esc(nb, sizeof nb, v->name));
            *t = v->t;
            return MN_OK;
        }
        OX_CHECK(check_runtime_shape(c, v, "input"));
        ox_feed feed;
        if (ox_dtype_float(v->dtype)) feed = OXF_F32;
        else if (v->dtype == MN_ONNX_BOOL) feed = OXF_BOOL;
        else if (cast_ints) feed = OXF_F32;
        else
            return ox_unsup(c, "%s input '%s' is used as numbers (run-time integers are only supported as Gather "
                               "indices or through Cast to float)",
                            mn_onnx_dtype_name(v->dtype), esc(nb, sizeof nb, v->name));
        OX_CHECK(add_input_io(c, v, MN_F32, feed));
        *t = v->t;
        return MN_OK;
    }
    default: return ox_fail(c, MN_E_STATE, "value '%s' is not available", esc(nb, sizeof nb, v->name));
    }
}

mn_status ox_in_f32(ox_ctx *c, int k, mn_tensor *t) {
    OX_CHECK(need_in(c, k));
    return value_f32(c, ox_in(c, k), t, false);
}

mn_status ox_in_f32_cast(ox_ctx *c, int k, mn_tensor *t) {
    OX_CHECK(need_in(c, k));
    return value_f32(c, ox_in(c, k), t, true);
}

mn_status ox_in_ids(ox_ctx *c, int k, mn_tensor *t) {
    OX_CHECK(need_in(c, k));
    ox_value *v = ox_in(c, k);
    char nb[128];
    if (!ox_dtype_int(v->dtype) || v->dtype == MN_ONNX_BOOL)
        return ox_fail(c, MN_E_DTYPE, "indices '%s' are %s (an integer type is required)", esc(nb, sizeof nb, v->name),
                       mn_onnx_dtype_name(v->dtype));
    if (v->kind == OXV_TENSOR && v->feed == OXF_IDS) {
        *t = v->t;
        return MN_OK;
    }
    if (v->kind == OXV_INPUT) {
        if (v->t != MN_NONE) {
            if (v->feed != OXF_IDS)
                return ox_unsup(c, "input '%s' is used both as indices and as numbers", esc(nb, sizeof nb, v->name));
            *t = v->t;
            return MN_OK;
        }
        OX_CHECK(check_runtime_shape(c, v, "input"));
        OX_CHECK(add_input_io(c, v, MN_I32, OXF_IDS));
        *t = v->t;
        return MN_OK;
    }
    return ox_unsup(c, "indices '%s' computed in the graph as floats", esc(nb, sizeof nb, v->name));
}

mn_status ox_derive(ox_ctx *c, int k, int rank, const int64_t *dims) {
    OX_CHECK(need_in(c, k));
    ox_import *im = c->im;
    ox_value *v = ox_in(c, k);
    if (ox_numel(rank, dims, OX_MAX_NUMEL) != ox_numel(v->rank, v->dims, OX_MAX_NUMEL))
        return ox_fail(c, MN_E_SHAPE, "input %d cannot be viewed with another element count", k);
    char name[64];
    snprintf(name, sizeof name, "\001derived.%d", im->n_vals);
    int dt = v->dtype;
    if (v->kind == OXV_CONST) {
        const ox_host *h;
        OX_CHECK(ox_in_host(c, k, &h));
        ox_host copy;
        char sub[128];
        mn_status st = ox_host_copy(&copy, h, sub, sizeof sub);
        if (st) return ox_fail(c, st, "%s", sub);
        copy.rank = rank;
        for (int i = 0; i < rank; i++) copy.dims[i] = dims[i];
        int nv = add_value(im, name, OXV_CONST);
        if (nv < 0) {
            ox_host_free(&copy);
            return MN_E_NOMEM;
        }
        ox_value *d = &im->vals[nv];
        d->dtype = dt;
        d->rank = rank;
        for (int i = 0; i < rank; i++) d->dims[i] = dims[i];
        d->host = copy;
        d->host_ready = true;
        c->in[k] = nv;
        return MN_OK;
    }
    mn_tensor t, r;
    OX_CHECK(ox_in_f32(c, k, &t));
    OX_CHECK(ox_reshape(c, &r, t, rank, dims));
    int nv = add_value(im, name, OXV_TENSOR);
    if (nv < 0) return MN_E_NOMEM;
    ox_value *d = &im->vals[nv];
    d->dtype = dt;
    d->rank = rank;
    for (int i = 0; i < rank; i++) d->dims[i] = dims[i];
    d->t = r;
    c->in[k] = nv;
    return MN_OK;
}

/* ---- outputs ---------------------------------------------------------------- */

bool ox_has_out(const ox_ctx *c, int k) { return k < c->nout && c->out[k] >= 0; }

mn_status ox_set_out(ox_ctx *c, int k, mn_tensor t, int dtype) {
    if (!ox_has_out(c, k)) return MN_OK;
    ox_value *v = &c->im->vals[c->out[k]];
    int rank;
    int64_t dims[MN_MAX_RANK];
    OX_TRY(c, mn_tensor_shape(c->g, t, &rank, dims));
    v->kind = OXV_TENSOR;
    v->dtype = dtype;
    v->rank = rank;
    for (int i = 0; i < rank; i++) v->dims[i] = dims[i];
    v->t = t;
    record_named(c->im, v->name, t);
    return MN_OK;
}

mn_status ox_set_out_ids(ox_ctx *c, int k, mn_tensor t, int dtype) {
    OX_CHECK(ox_set_out(c, k, t, dtype));
    if (ox_has_out(c, k)) c->im->vals[c->out[k]].feed = OXF_IDS;
    return MN_OK;
}

mn_status ox_set_out_host(ox_ctx *c, int k, ox_host *h) {
    if (!ox_has_out(c, k)) {
        ox_host_free(h);
        return MN_OK;
    }
    ox_value *v = &c->im->vals[c->out[k]];
    ox_host_free(&v->host);
    v->kind = OXV_CONST;
    v->host = *h;
    v->host_ready = true;
    v->dtype = h->dtype;
    v->rank = h->rank;
    for (int i = 0; i < h->rank; i++) v->dims[i] = h->dims[i];
    memset(h, 0, sizeof *h);
    return MN_OK;
}

mn_status ox_shape(ox_ctx *c, mn_tensor t, int *rank, int64_t dims[MN_MAX_RANK]) {
    OX_TRY(c, mn_tensor_shape(c->g, t, rank, dims));
    return MN_OK;
}

mn_status ox_axis(ox_ctx *c, int64_t axis, int rank, const char *what, int *out) {
    if (axis < -rank || axis >= (rank ? rank : 1))
        return ox_fail(c, MN_E_INVALID, "%s %lld is outside [-%d, %d)", what, (long long)axis, rank, rank ? rank : 1);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return MN_OK;
}

mn_status ox_reshape(ox_ctx *c, mn_tensor *out, mn_tensor x, int rank, const int64_t *dims) {
    int xr;
    int64_t xd[MN_MAX_RANK];
    OX_CHECK(ox_shape(c, x, &xr, xd));
    bool same = xr == rank;
    for (int i = 0; same && i < rank; i++) same = xd[i] == dims[i];
    if (same) {
        *out = x;
        return MN_OK;
    }
    if (rank > MN_MAX_RANK) return ox_unsup(c, "a result of rank %d (at most %d)", rank, MN_MAX_RANK);
    OX_TRY(c, mn_reshape(c->g, out, x, rank, dims));
    return MN_OK;
}

/* ---- the op tables ---------------------------------------------------------- */

const ox_op *ox_find_op(const char *name) {
    const ox_op *tables[] = {ox_ops_math, ox_ops_nn, ox_ops_shape};
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
        for (const ox_op *o = tables[t]; o->name; o++)
            if (strcmp(o->name, name) == 0) return o;
    return NULL;
}

/* ---- loading ------------------------------------------------------------------ */

static bool default_domain(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

/* The declared element type and shape of a ValueInfoProto; false if it is not
 * a tensor. Dimensions: dim_value, else the options' size for a dim_param,
 * else default_dim, else -1. */
static bool value_type(const ox_import *im, const Onnx__ValueInfoProto *vi, int *dtype, int *rank,
                       int64_t *dims, const char **unresolved, bool *has_shape) {
    *has_shape = false;
    *unresolved = NULL;
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) return false;
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    *dtype = tt->has_elem_type ? tt->elem_type : 0;
    *rank = 0;
    if (!tt->shape) return true;
    *has_shape = true;
    if (tt->shape->n_dim > OX_MAX_RANK) {
        *rank = (int)tt->shape->n_dim;
        return true;
    }
    *rank = (int)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        dims[i] = -1;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0) {
            dims[i] = d->dim_value;
            continue;
        }
        const char *pname = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? d->dim_param : NULL;
        for (int k = 0; pname && k < im->opt.n_dims; k++)
            if (im->opt.dims[k].name && strcmp(im->opt.dims[k].name, pname) == 0) dims[i] = im->opt.dims[k].value;
        if (dims[i] < 0 && im->opt.default_dim > 0) dims[i] = im->opt.default_dim;
        if (dims[i] < 0 && !*unresolved) *unresolved = pname ? pname : "";
    }
    return true;
}

static const mn_onnx_input *option_input(const ox_import *im, const char *name, int position) {
    for (int k = 0; k < im->opt.n_inputs; k++) {
        const mn_onnx_input *o = &im->opt.inputs[k];
        if (o->name ? strcmp(o->name, name) == 0 : o->position == position) return o;
    }
    return NULL;
}

static mn_status host_from_bytes(ox_host *h, int dt, int rank, const int64_t *dims, const void *data, size_t bytes,
                                 char *err, size_t cap) {
    mn_status st = ox_host_alloc(h, dt, rank, dims, err, cap);
    if (st) return st;
    size_t es = mn_onnx_dtype_size(dt);
    if (bytes != (size_t)h->numel * es) {
        ox_fmt(err, cap, "%zu bytes given, %lld %s elements need %zu", bytes, (long long)h->numel,
               mn_onnx_dtype_name(dt), (size_t)h->numel * es);
        ox_host_free(h);
        return MN_E_SHAPE;
    }
    for (int64_t k = 0; k < h->numel; k++) {
        if (h->f) h->f[k] = ox_round_to(dt, mn_onnx_value(data, dt, k));
        else h->i[k] = raw_get_i(data, dt, k);
    }
    return MN_OK;
}

static mn_status setup_inputs(ox_import *im) {
    const Onnx__GraphProto *g = im->graph;
    char nb[160], sub[256];
    /* initializers first: a graph input with an initializer is the initializer */
    for (size_t i = 0; i < g->n_initializer; i++) {
        const Onnx__TensorProto *t = g->initializer[i];
        if (!t->name || !t->name[0]) {
            item(im, MN_E_FORMAT, "model", "initializer %zu has no name", i);
            continue;
        }
        if (find_value(im, t->name) >= 0) {
            item(im, MN_E_FORMAT, "model", "initializer '%s' is defined twice", esc(nb, sizeof nb, t->name));
            continue;
        }
        int64_t n;
        char what[200];
        snprintf(what, sizeof what, "initializer '%s'", esc(nb, sizeof nb, t->name));
        mn_status st = ox_tensor_check(t, &n, what, sub, sizeof sub);
        int k = add_value(im, t->name, st ? OXV_POISON : OXV_CONST);
        if (k < 0) return MN_E_NOMEM;
        if (st) {
            item(im, st, "model", "%s", sub);
            continue;
        }
        ox_value *v = &im->vals[k];
        v->dtype = t->data_type;
        v->rank = (int)t->n_dims;
        for (size_t d = 0; d < t->n_dims; d++) v->dims[d] = t->dims[d];
        v->proto = t;
        v->init = (int)i;
    }
    for (size_t i = 0; i < g->n_sparse_initializer; i++)
        item(im, MN_E_UNSUPPORTED, "model", "sparse initializers are not supported");
    int position = 0;
    for (size_t i = 0; i < g->n_input; i++) {
        const Onnx__ValueInfoProto *vi = g->input[i];
        if (!vi->name || !vi->name[0]) {
            item(im, MN_E_FORMAT, "model", "graph input %zu has no name", i);
            continue;
        }
        int existing = find_value(im, vi->name);
        if (existing >= 0) {
            if (im->vals[existing].init < 0)
                item(im, MN_E_FORMAT, "model", "graph input '%s' is declared twice", esc(nb, sizeof nb, vi->name));
            continue; /* an initializer (with a default value): stays the initializer */
        }
        int pos = position++;
        int dtype = 0, rank = 0;
        int64_t dims[OX_MAX_RANK] = {0};
        const char *unres;
        bool has_shape;
        const mn_onnx_input *oi = option_input(im, vi->name, pos);
        if (!value_type(im, vi, &dtype, &rank, dims, &unres, &has_shape)) {
            int k = add_value(im, vi->name, OXV_POISON);
            if (k < 0) return MN_E_NOMEM;
            item(im, MN_E_UNSUPPORTED, "model", "graph input '%s' is not a tensor (sequences, maps and optionals are "
                                                "not supported)", esc(nb, sizeof nb, vi->name));
            continue;
        }
        if (oi && oi->shape) {
            if (oi->rank < 0 || oi->rank > OX_MAX_RANK) {
                item(im, MN_E_INVALID, "options", "input '%s': rank %d", esc(nb, sizeof nb, vi->name), oi->rank);
                continue;
            }
            rank = oi->rank;
            for (int d = 0; d < rank; d++) dims[d] = oi->shape[d];
            unres = NULL;
            has_shape = true;
        }
        int k = add_value(im, vi->name, OXV_INPUT);
        if (k < 0) return MN_E_NOMEM;
        ox_value *v = &im->vals[k];
        v->input = pos;
        v->dtype = dtype;
        if (!ox_dtype_known(dtype)) {
            v->kind = OXV_POISON;
            item(im, MN_E_UNSUPPORTED, "model", "graph input '%s': dtype %s is not supported", esc(nb, sizeof nb, vi->name),
                 mn_onnx_dtype_name(dtype));
            continue;
        }
        if (!has_shape || rank > OX_MAX_RANK) {
            v->kind = OXV_POISON;
            item(im, MN_E_UNSUPPORTED, "model", "graph input '%s': %s", esc(nb, sizeof nb, vi->name),
                 has_shape ? "rank above 8" : "no shape declared: give it in mn_onnx_options.inputs");
            continue;
        }
        if (unres) {
            v->kind = OXV_POISON;
            item(im, MN_E_UNSUPPORTED, "model", "graph input '%s': dimension '%s' has no size (give it in "
                                                "mn_onnx_options.dims or default_dim)",
                 esc(nb, sizeof nb, vi->name), esc(sub, sizeof sub, unres));
            continue;
        }
        v->rank = rank;
        for (int d = 0; d < rank; d++) {
            if (dims[d] < 0) {
                v->kind = OXV_POISON;
                item(im, MN_E_INVALID, "model", "graph input '%s': dimension %d is negative", esc(nb, sizeof nb, vi->name), d);
            }
            v->dims[d] = dims[d];
        }
        if (v->kind == OXV_POISON) continue;
        if (oi && oi->value) {
            mn_status st = host_from_bytes(&v->host, dtype, rank, dims, oi->value, oi->bytes, sub, sizeof sub);
            if (st) {
                v->kind = OXV_POISON;
                item(im, st, "options", "input '%s': %s", esc(nb, sizeof nb, vi->name), sub);
                continue;
            }
            v->host_ready = true;
            if (oi->hint) v->hint = true;
            else v->kind = OXV_CONST;
        }
    }
    for (int k = 0; k < im->opt.n_inputs; k++) {
        const char *name = im->opt.inputs[k].name;
        bool found = false;
        if (!name) found = im->opt.inputs[k].position >= 0 && im->opt.inputs[k].position < position;
        for (size_t i = 0; name && i < g->n_input; i++)
            if (g->input[i]->name && strcmp(g->input[i]->name, name) == 0) found = true;
        if (!found && name) item(im, MN_E_NOT_FOUND, "options", "the model has no graph input '%s'", esc(nb, sizeof nb, name));
        if (!found && !name)
            item(im, MN_E_NOT_FOUND, "options", "the model has no graph input at position %d (it has %d)",
                 im->opt.inputs[k].position, position);
    }
    return MN_OK;
}

static void poison_outputs(ox_ctx *c) {
    for (int k = 0; k < c->nout; k++)
        if (c->out[k] >= 0) c->im->vals[c->out[k]].kind = OXV_POISON;
}

static mn_status import_node(ox_import *im, int index) {
    const Onnx__NodeProto *n = im->graph->node[index];
    ox_ctx c;
    memset(&c, 0, sizeof c);
    c.im = im;
    c.g = im->g;
    c.node = n;
    c.index = index;
    c.ver = im->opset;
    if (!n->op_type) {
        item(im, MN_E_FORMAT, "model", "node %d has no op_type", index);
        return MN_OK;
    }
    c.nin = (int)n->n_input;
    c.nout = (int)n->n_output;
    c.in = malloc((size_t)(c.nin + 1) * sizeof *c.in);
    c.out = malloc((size_t)(c.nout + 1) * sizeof *c.out);
    c.used = calloc(n->n_attribute + 1, sizeof *c.used);
    if (!c.in || !c.out || !c.used) {
        free(c.in);
        free(c.out);
        free(c.used);
        return MN_E_NOMEM;
    }
    char nb[160];
    bool skip = false, poisoned = false;
    for (int k = 0; k < c.nin; k++) {
        const char *name = n->input[k];
        c.in[k] = -1;
        if (!name || !name[0]) continue;
        int v = find_value(im, name);
        if (v < 0) {
            ox_fail(&c, MN_E_FORMAT, "input '%s' is not a graph input, an initializer or the output of an earlier node",
                    esc(nb, sizeof nb, name));
            skip = true;
            continue;
        }
        c.in[k] = v;
        if (im->vals[v].kind == OXV_POISON) poisoned = true;
    }
    for (int k = 0; k < c.nout; k++) {
        const char *name = n->output[k];
        c.out[k] = -1;
        if (!name || !name[0]) continue;
        if (find_value(im, name) >= 0) {
            ox_fail(&c, MN_E_FORMAT, "output '%s' is already defined (ONNX values are assigned once)",
                    esc(nb, sizeof nb, name));
            skip = true;
            continue;
        }
        int v = add_value(im, name, OXV_POISON);
        if (v < 0) {
            free(c.in);
            free(c.out);
            free(c.used);
            return MN_E_NOMEM;
        }
        c.out[k] = v;
    }
    for (size_t i = 0; i < n->n_attribute; i++) {
        if (!n->attribute[i]->name) {
            ox_fail(&c, MN_E_FORMAT, "attribute %zu has no name", i);
            skip = true;
        }
        for (size_t j = 0; j < i && !skip; j++)
            if (n->attribute[j]->name && n->attribute[i]->name &&
                strcmp(n->attribute[i]->name, n->attribute[j]->name) == 0) {
                ox_fail(&c, MN_E_FORMAT, "attribute '%s' is given twice", esc(nb, sizeof nb, n->attribute[i]->name));
                skip = true;
            }
    }
    const ox_op *op = NULL;
    if (!skip) {
        if (!default_domain(n->domain)) {
            ox_unsup(&c, "operator domain '%s' is not supported (only ai.onnx)", esc(nb, sizeof nb, n->domain));
            skip = true;
        } else if (im->opset < 0) {
            ox_fail(&c, MN_E_FORMAT, "the model imports no opset of the default domain (ai.onnx)");
            skip = true;
        } else if (!(op = ox_find_op(n->op_type))) {
            ox_unsup(&c, "operator not supported");
            skip = true;
        } else if (op->since > im->opset) {
            ox_fail(&c, MN_E_FORMAT, "the operator does not exist in opset %d (it appeared in opset %d)", im->opset,
                    op->since);
            skip = true;
        } else if (c.nin < op->min_in || c.nin > op->max_in || c.nout < op->min_out || c.nout > op->max_out) {
            ox_fail(&c, MN_E_FORMAT, "%d inputs and %d outputs (the operator takes %d..%d and %d..%d)", c.nin, c.nout,
                    op->min_in, op->max_in, op->min_out, op->max_out);
            skip = true;
        }
        for (int k = 0; !skip && k < op->min_in && k < c.nin; k++)
            if (c.in[k] < 0) {
                ox_fail(&c, MN_E_FORMAT, "input %d is required but empty", k);
                skip = true;
            }
    }
    if (!skip && !poisoned) {
        if (c.ver < 7) ox_attr_ignore(&c, "consumed_inputs"); /* an old memory hint without meaning here */
        mn_status st = op->fn(&c);
        if (st == MN_E_NOMEM) {
            free(c.in);
            free(c.out);
            free(c.used);
            return st;
        }
        if (st && !c.failures) ox_fail(&c, st, "failed (%s)", mn_status_str(st));
        for (size_t i = 0; i < n->n_attribute; i++)
            if (!c.used[i]) ox_unsup(&c, "attribute '%s' is not supported", esc(nb, sizeof nb, n->attribute[i]->name));
        if (!c.failures)
            for (int k = 0; k < c.nout; k++)
                if (c.out[k] >= 0 && im->vals[c.out[k]].kind == OXV_POISON)
                    ox_unsup(&c, "output %d is not computed by this importer", k);
    }
    if (c.failures || skip || poisoned) poison_outputs(&c);
    free(c.in);
    free(c.out);
    free(c.used);
    return MN_OK;
}

static mn_status setup_outputs(ox_import *im) {
    const Onnx__GraphProto *g = im->graph;
    mn_onnx *m = im->m;
    char nb[160];
    m->outputs = calloc(g->n_output + 1, sizeof *m->outputs);
    if (!m->outputs) return MN_E_NOMEM;
    for (size_t i = 0; i < g->n_output; i++) {
        const Onnx__ValueInfoProto *vi = g->output[i];
        if (!vi->name || !vi->name[0]) {
            item(im, MN_E_FORMAT, "model", "graph output %zu has no name", i);
            continue;
        }
        int k = find_value(im, vi->name);
        if (k < 0) {
            item(im, MN_E_FORMAT, "model", "graph output '%s' is computed by no node", esc(nb, sizeof nb, vi->name));
            continue;
        }
        for (int j = 0; j < m->n_outputs; j++)
            if (strcmp(m->outputs[j].name, vi->name) == 0) {
                item(im, MN_E_FORMAT, "model", "graph output '%s' is listed twice", esc(nb, sizeof nb, vi->name));
                k = -1;
            }
        if (k < 0) continue;
        ox_value *v = &im->vals[k];
        if (v->kind == OXV_POISON) continue; /* its node's failure is listed already */
        /* the declared type and shape, where given, must be what the import computed */
        int dtype = 0, rank = 0;
        int64_t dims[OX_MAX_RANK];
        const char *unres;
        bool has_shape;
        if (value_type(im, vi, &dtype, &rank, dims, &unres, &has_shape)) {
            bool bad = has_shape && rank != v->rank;
            for (int d = 0; !bad && has_shape && d < rank; d++) bad = dims[d] >= 0 && dims[d] != v->dims[d];
            if (bad) {
                char a[128] = "", b[128] = "";
                for (int d = 0; d < rank && d < OX_MAX_RANK; d++) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "", (long long)dims[d]);
                for (int d = 0; d < v->rank; d++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "", (long long)v->dims[d]);
                item(im, MN_E_SHAPE, "model", "graph output '%s': the model declares shape [%s], the import computes [%s]",
                     esc(nb, sizeof nb, vi->name), a, b);
                continue;
            }
            if (dtype && dtype != v->dtype && ox_dtype_known(dtype)) {
                item(im, MN_E_DTYPE, "model", "graph output '%s': the model declares %s, the import computes %s",
                     esc(nb, sizeof nb, vi->name), mn_onnx_dtype_name(dtype), mn_onnx_dtype_name(v->dtype));
                continue;
            }
        }
        ox_io *io = &m->outputs[m->n_outputs];
        memset(io, 0, sizeof *io);
        io->tensor = MN_NONE;
        io->name = dupstr(vi->name);
        if (!io->name) return MN_E_NOMEM;
        io->onnx_dtype = v->dtype;
        io->rank = v->rank;
        for (int d = 0; d < v->rank; d++) io->dims[d] = v->dims[d];
        m->n_outputs++;
        if (v->kind == OXV_CONST) {
            ox_ctx c;
            memset(&c, 0, sizeof c);
            c.im = im;
            c.g = im->g;
            Onnx__NodeProto fake = ONNX__NODE_PROTO__INIT;
            fake.op_type = "output";
            c.node = &fake;
            c.index = -1;
            if (ensure_host(&c, v)) continue;
            char sub[128];
            mn_status st = ox_host_copy(&io->host, &v->host, sub, sizeof sub);
            if (st) {
                item(im, st, "model", "graph output '%s': %s", esc(nb, sizeof nb, vi->name), sub);
                continue;
            }
            io->is_host = true;
            io->dtype = MN_F32;
            continue;
        }
        mn_tensor t = v->t;
        io->dtype = v->feed == OXF_IDS ? MN_I32 : MN_F32;
        if (v->kind == OXV_INPUT && t == MN_NONE) {
            ox_ctx c;
            memset(&c, 0, sizeof c);
            c.im = im;
            c.g = im->g;
            Onnx__NodeProto fake = ONNX__NODE_PROTO__INIT;
            fake.op_type = "output";
            c.node = &fake;
            c.index = -1;
            if (value_f32(&c, v, &t, true)) continue;
        }
        decl_args a = {MN_F32, 0, NULL, &t};
        char *gname = NULL;
        /* a tensor carries one name: an output that is an input, a parameter or
         * another output is a copy (x * 1, which passes gradients) */
        char *pname = prefixed(im, vi->name);
        if (!pname) return MN_E_NOMEM;
        mn_status st = mn_graph_output(im->g, t, pname);
        if (st == MN_E_INVALID) {
            mn_tensor copy;
            if (!mn_scale(im->g, &copy, t, 1.0f)) {
                t = copy;
                st = mn_graph_output(im->g, t, pname);
            }
        }
        if (!st) gname = pname;
        else {
            free(pname);
            st = declare(im, vi->name, "output", decl_output, &a, &gname);
        }
        if (st) {
            item(im, st, "model", "graph output '%s': %s", esc(nb, sizeof nb, vi->name), mn_graph_error(im->g));
            continue;
        }
        io->graph_name = gname;
        io->tensor = t;
    }
    return MN_OK;
}

static mn_status import_model(ox_import *im, char *err, size_t errcap) {
    mn_onnx *m = im->m;
    const Onnx__ModelProto *model = m->model;
    char nb[160];
    if (!model->graph) {
        ox_fmt(err, errcap, "the model has no graph");
        return MN_E_FORMAT;
    }
    im->graph = model->graph;
    /* opsets: the default domain must be present and in range; other domains
     * are fine as long as no node uses them */
    im->opset = -1;
    for (size_t i = 0; i < model->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = model->opset_import[i];
        if (default_domain(o->domain)) im->opset = o->has_version ? (int)o->version : 1;
    }
    if (im->opset < 0 && model->n_opset_import == 0 && model->ir_version <= 2) im->opset = 1;
    /* a model without an ai.onnx opset is fine while no node uses the domain */
    if (im->opset >= 0 && (im->opset < OX_OPSET_MIN || im->opset > OX_OPSET_MAX))
        item(im, MN_E_UNSUPPORTED, "model", "opset %d of ai.onnx (supported: %d to %d)", im->opset, OX_OPSET_MIN,
             OX_OPSET_MAX);
    if (model->n_functions)
        for (size_t i = 0; i < model->n_functions; i++) (void)i; /* only an error if a node calls one */
    mn_status st = setup_inputs(im);
    if (st) return st;
    bool opset_ok = im->opset < 0 || (im->opset >= OX_OPSET_MIN && im->opset <= OX_OPSET_MAX);
    if (opset_ok)
        for (size_t i = 0; i < im->graph->n_node; i++)
            if ((st = import_node(im, (int)i))) return st;
    if (opset_ok && (st = setup_outputs(im))) return st;
    if (im->n_items) {
        ox_str msg = {0};
        const char *what = im->first ? "that stop the import" : "the importer does not support";
        ox_str_add(&msg, "%d item%s %s:%s", im->n_items, im->n_items == 1 ? "" : "s", what,
                   im->items.p ? im->items.p : "");
        if (im->n_items > OX_MAX_ITEMS) ox_str_add(&msg, "\n  ... and %d more", im->n_items - OX_MAX_ITEMS);
        ox_fmt(err, errcap, "%s", msg.p ? msg.p : "out of memory");
        ox_str_free(&msg);
        (void)nb;
        return im->first ? im->first : MN_E_UNSUPPORTED;
    }
    return MN_OK;
}

static mn_status load(mn_onnx **out, mn_graph *g, const uint8_t *data, size_t len, const char *label,
                      const mn_onnx_options *opt, char *err, size_t errcap) {
    char sub[1024];
    mn_onnx *m = calloc(1, sizeof *m);
    if (!m) {
        ox_fmt(err, errcap, "%s: out of memory", label);
        return MN_E_NOMEM;
    }
    ox_alloc_init(&m->alloc, ((size_t)64 << 20) + 16 * len);
    m->model = (Onnx__ModelProto *)ox_unpack(&onnx__model_proto__descriptor, data, len, &m->alloc, sub, sizeof sub);
    if (!m->model) {
        ox_fmt(err, errcap, "%s: %s", label, sub);
        mn_onnx_destroy(m);
        return MN_E_FORMAT;
    }
    ox_import im;
    memset(&im, 0, sizeof im);
    im.m = m;
    im.g = g;
    im.opt = opt ? *opt : mn_onnx_default_options();
    if ((im.opt.n_dims && !im.opt.dims) || (im.opt.n_inputs && !im.opt.inputs) || im.opt.n_dims < 0 ||
        im.opt.n_inputs < 0 || im.opt.default_dim < 0) {
        ox_fmt(err, errcap, "%s: bad options (counts without arrays, or negative)", label);
        mn_onnx_destroy(m);
        return MN_E_INVALID;
    }
    for (int k = 0; k < im.opt.n_dims; k++)
        if (!im.opt.dims[k].name || im.opt.dims[k].value < 1) {
            ox_fmt(err, errcap, "%s: options.dims[%d] needs a name and a value >= 1", label, k);
            mn_onnx_destroy(m);
            return MN_E_INVALID;
        }
    m->constants = im.opt.constants;
    char *msg = malloc(1 << 16);
    if (!msg) {
        mn_onnx_destroy(m);
        return MN_E_NOMEM;
    }
    msg[0] = 0;
    mn_status st = import_model(&im, msg, 1 << 16);
    if (st == MN_E_NOMEM && !msg[0]) snprintf(msg, 1 << 16, "out of memory");
    free_values(&im);
    ox_str_free(&im.items);
    if (st) {
        ox_fmt(err, errcap, "%s: %s", label, msg);
        free(msg);
        mn_onnx_destroy(m);
        return st;
    }
    free(msg);
    *out = m;
    return MN_OK;
}

mn_status mn_onnx_load_memory(mn_onnx **out, mn_graph *g, const void *data, size_t len, const mn_onnx_options *opt,
                              char *err, size_t errcap) {
    if (out) *out = NULL;
    if (!out || !g || (!data && len)) {
        ox_fmt(err, errcap, "onnx: NULL argument");
        return MN_E_INVALID;
    }
    if (len > OX_MAX_FILE) {
        ox_fmt(err, errcap, "onnx: %zu bytes (at most 2 GiB)", len);
        return MN_E_FORMAT;
    }
    return load(out, g, data, len, "onnx model", opt, err, errcap);
}

mn_status mn_onnx_load(mn_onnx **out, mn_graph *g, const char *path, const mn_onnx_options *opt, char *err,
                       size_t errcap) {
    if (out) *out = NULL;
    if (!out || !g || !path) {
        ox_fmt(err, errcap, "onnx: NULL argument");
        return MN_E_INVALID;
    }
    char *buf = NULL;
    size_t len = 0;
    mn_status st = mn_read_file(&buf, &len, path, OX_MAX_FILE, err, errcap);
    if (st) return st;
    char label[300];
    mn_escape(label, sizeof label, path);
    st = load(out, g, (const uint8_t *)buf, len, label, opt, err, errcap);
    free(buf);
    return st;
}
