/* onnx_build.h - builds small ONNX models in memory for the tests (and the
 * fuzzer's seed corpus) with the protobuf-c structures generated from
 * onnx.proto, and serializes them with protobuf-c's packer.
 *
 * Everything a builder allocates lives in its arena and is freed by
 * ob_free. Header-only (static functions); include it from one test file.
 */
#ifndef MN_TEST_ONNX_BUILD_H
#define MN_TEST_ONNX_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

typedef struct ob {
    void **blocks;
    int n_blocks, cap_blocks;
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset;
    Onnx__OperatorSetIdProto *opsets[1];
} ob;

static inline void *ob_alloc(ob *b, size_t n) {
    if (b->n_blocks == b->cap_blocks) {
        b->cap_blocks = b->cap_blocks ? b->cap_blocks * 2 : 64;
        b->blocks = realloc(b->blocks, (size_t)b->cap_blocks * sizeof *b->blocks);
        if (!b->blocks) abort();
    }
    void *p = calloc(1, n ? n : 1);
    if (!p) abort();
    b->blocks[b->n_blocks++] = p;
    return p;
}

static inline char *ob_str(ob *b, const char *s) {
    char *p = ob_alloc(b, strlen(s) + 1);
    strcpy(p, s);
    return p;
}

/* appends p to the array *arr of *n pointers */
static inline void ob_push(ob *b, void ***arr, size_t *n, void *p) {
    void **na = ob_alloc(b, (*n + 1) * sizeof *na);
    if (*n) memcpy(na, *arr, *n * sizeof *na);
    na[(*n)++] = p;
    *arr = na;
}

static inline void ob_init(ob *b, int64_t opset) {
    memset(b, 0, sizeof *b);
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    Onnx__OperatorSetIdProto o = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    b->model = m;
    b->graph = g;
    b->opset = o;
    b->opset.domain = ob_str(b, "");
    b->opset.has_version = 1;
    b->opset.version = opset;
    b->opsets[0] = &b->opset;
    b->model.has_ir_version = 1;
    b->model.ir_version = 8;
    b->model.n_opset_import = 1;
    b->model.opset_import = b->opsets;
    b->model.graph = &b->graph;
    b->graph.name = ob_str(b, "test");
}

static inline void ob_free(ob *b) {
    for (int i = 0; i < b->n_blocks; i++) free(b->blocks[i]);
    free(b->blocks);
    memset(b, 0, sizeof *b);
}

static inline Onnx__ValueInfoProto *ob_value(ob *b, const char *name, int dtype, int rank, const int64_t *dims) {
    Onnx__ValueInfoProto *v = ob_alloc(b, sizeof *v);
    Onnx__ValueInfoProto v0 = ONNX__VALUE_INFO_PROTO__INIT;
    *v = v0;
    v->name = ob_str(b, name);
    Onnx__TypeProto *t = ob_alloc(b, sizeof *t);
    Onnx__TypeProto t0 = ONNX__TYPE_PROTO__INIT;
    *t = t0;
    Onnx__TypeProto__Tensor *tt = ob_alloc(b, sizeof *tt);
    Onnx__TypeProto__Tensor tt0 = ONNX__TYPE_PROTO__TENSOR__INIT;
    *tt = tt0;
    tt->has_elem_type = 1;
    tt->elem_type = dtype;
    if (rank >= 0) {
        Onnx__TensorShapeProto *s = ob_alloc(b, sizeof *s);
        Onnx__TensorShapeProto s0 = ONNX__TENSOR_SHAPE_PROTO__INIT;
        *s = s0;
        for (int i = 0; i < rank; i++) {
            Onnx__TensorShapeProto__Dimension *d = ob_alloc(b, sizeof *d);
            Onnx__TensorShapeProto__Dimension d0 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
            *d = d0;
            if (dims[i] >= 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = dims[i];
            } else {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = ob_str(b, "batch");
            }
            ob_push(b, (void ***)&s->dim, &s->n_dim, d);
        }
        tt->shape = s;
    }
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->type = t;
    return v;
}

static inline void ob_input(ob *b, const char *name, int dtype, int rank, const int64_t *dims) {
    ob_push(b, (void ***)&b->graph.input, &b->graph.n_input, ob_value(b, name, dtype, rank, dims));
}

static inline void ob_output(ob *b, const char *name, int dtype, int rank, const int64_t *dims) {
    ob_push(b, (void ***)&b->graph.output, &b->graph.n_output, ob_value(b, name, dtype, rank, dims));
}

/* a tensor of float (dtype 1) or int64 (7) values, raw_data or typed */
static inline Onnx__TensorProto *ob_tensor(ob *b, const char *name, int dtype, int rank, const int64_t *dims,
                                    const void *data, bool raw) {
    Onnx__TensorProto *t = ob_alloc(b, sizeof *t);
    Onnx__TensorProto t0 = ONNX__TENSOR_PROTO__INIT;
    *t = t0;
    t->name = ob_str(b, name);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)rank;
    t->dims = ob_alloc(b, (size_t)(rank ? rank : 1) * sizeof *t->dims);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        t->dims[i] = dims[i];
        n *= dims[i];
    }
    size_t es = dtype == 7 || dtype == 11 ? 8 : dtype == 9 ? 1 : 4;
    if (raw) {
        t->has_raw_data = 1;
        t->raw_data.len = (size_t)n * es;
        t->raw_data.data = ob_alloc(b, t->raw_data.len);
        memcpy(t->raw_data.data, data, t->raw_data.len);
    } else if (dtype == 1) {
        t->n_float_data = (size_t)n;
        t->float_data = ob_alloc(b, (size_t)n * 4);
        memcpy(t->float_data, data, (size_t)n * 4);
    } else if (dtype == 7) {
        t->n_int64_data = (size_t)n;
        t->int64_data = ob_alloc(b, (size_t)n * 8);
        memcpy(t->int64_data, data, (size_t)n * 8);
    } else {
        t->n_int32_data = (size_t)n;
        t->int32_data = ob_alloc(b, (size_t)n * 4);
        for (int64_t i = 0; i < n; i++) t->int32_data[i] = ((const uint8_t *)data)[i];
    }
    return t;
}

static inline Onnx__TensorProto *ob_init_f32(ob *b, const char *name, int rank, const int64_t *dims, const float *data) {
    Onnx__TensorProto *t = ob_tensor(b, name, 1, rank, dims, data, true);
    ob_push(b, (void ***)&b->graph.initializer, &b->graph.n_initializer, t);
    return t;
}

static inline Onnx__TensorProto *ob_init_i64(ob *b, const char *name, int rank, const int64_t *dims, const int64_t *data) {
    Onnx__TensorProto *t = ob_tensor(b, name, 7, rank, dims, data, false);
    ob_push(b, (void ***)&b->graph.initializer, &b->graph.n_initializer, t);
    return t;
}

/* a node with inputs and outputs given as NULL-terminated lists ("" = absent) */
static inline Onnx__NodeProto *ob_node(ob *b, const char *op, const char *name, const char *const *in,
                                const char *const *out) {
    Onnx__NodeProto *n = ob_alloc(b, sizeof *n);
    Onnx__NodeProto n0 = ONNX__NODE_PROTO__INIT;
    *n = n0;
    n->op_type = ob_str(b, op);
    n->name = ob_str(b, name);
    for (int i = 0; in && in[i]; i++) ob_push(b, (void ***)&n->input, &n->n_input, ob_str(b, in[i]));
    for (int i = 0; out && out[i]; i++) ob_push(b, (void ***)&n->output, &n->n_output, ob_str(b, out[i]));
    ob_push(b, (void ***)&b->graph.node, &b->graph.n_node, n);
    return n;
}

static inline Onnx__AttributeProto *ob_attr(ob *b, Onnx__NodeProto *n, const char *name, int type) {
    Onnx__AttributeProto *a = ob_alloc(b, sizeof *a);
    Onnx__AttributeProto a0 = ONNX__ATTRIBUTE_PROTO__INIT;
    *a = a0;
    a->name = ob_str(b, name);
    a->has_type = 1;
    a->type = type;
    ob_push(b, (void ***)&n->attribute, &n->n_attribute, a);
    return a;
}

static inline void ob_attr_int(ob *b, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *a = ob_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static inline void ob_attr_float(ob *b, Onnx__NodeProto *n, const char *name, float v) {
    Onnx__AttributeProto *a = ob_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
}

static inline void ob_attr_ints(ob *b, Onnx__NodeProto *n, const char *name, int cnt, const int64_t *v) {
    Onnx__AttributeProto *a = ob_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = (size_t)cnt;
    a->ints = ob_alloc(b, (size_t)(cnt ? cnt : 1) * sizeof *a->ints);
    memcpy(a->ints, v, (size_t)cnt * sizeof *v);
}

static inline void ob_attr_string(ob *b, Onnx__NodeProto *n, const char *name, const char *s) {
    Onnx__AttributeProto *a = ob_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = strlen(s);
    a->s.data = (uint8_t *)ob_str(b, s);
}

static inline void ob_attr_tensor(ob *b, Onnx__NodeProto *n, const char *name, Onnx__TensorProto *t) {
    Onnx__AttributeProto *a = ob_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    a->t = t;
}

/* the serialized model; free() it */
static uint8_t *ob_pack(ob *b, size_t *len) {
    *len = protobuf_c_message_get_packed_size(&b->model.base);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (!buf) abort();
    protobuf_c_message_pack(&b->model.base, buf);
    return buf;
}

#endif
