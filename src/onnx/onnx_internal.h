/* onnx_internal.h - shared by the files of src/onnx: the protobuf reader
 * (proto.c), host tensors and constant folding (host.c), the importer's
 * values, attributes and messages (import.c) and the operator handlers
 * (ops_*.c).
 *
 * This stage is written against the public API (meganeura.h) like a user
 * program, as src/models is: it records nodes with mn_* calls and never
 * includes a header of another stage. The protobuf structures come from
 * onnx.pb-c.h, which protoc-c generates at build time from Debian's
 * onnx.proto (libonnx-dev).
 */
#ifndef MN_ONNX_INTERNAL_H
#define MN_ONNX_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meganeura_onnx.h"
#include "onnx.pb-c.h"

#if defined(__GNUC__)
#define OX_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define OX_PRINTF(a, b)
#endif

#define OX_MAX_RANK MN_ONNX_MAX_RANK
/* Most elements of a tensor evaluated on the host (constant folding). */
#define OX_HOST_MAX_NUMEL ((int64_t)1 << 26)
/* Most elements of any tensor a file may declare (2^40: far beyond 2 GiB of
 * data, small enough that byte counts never overflow). */
#define OX_MAX_NUMEL ((int64_t)1 << 40)
/* Largest model file (protobuf's own limit). */
#define OX_MAX_FILE ((size_t)2 << 30)
/* Opsets of the default domain the importer knows. */
#define OX_OPSET_MIN 1
#define OX_OPSET_MAX 21

/* ---- messages -------------------------------------------------------------- */

/* A growing NUL-terminated string; after an allocation failure it keeps what
 * it had and sets oom. */
typedef struct ox_str {
    char *p;
    size_t n, cap;
    bool oom;
} ox_str;
void ox_str_add(ox_str *s, const char *fmt, ...) OX_PRINTF(2, 3);
void ox_str_vadd(ox_str *s, const char *fmt, va_list ap);
void ox_str_free(ox_str *s);
void ox_fmt(char *err, size_t cap, const char *fmt, ...) OX_PRINTF(3, 4);

/* ---- protobuf -------------------------------------------------------------- */

/* protobuf-c allocations counted against a limit (a hostile file cannot make
 * the parser allocate more than a fixed multiple of its size). */
typedef struct ox_alloc {
    ProtobufCAllocator base;
    size_t used, limit;
} ox_alloc;
void ox_alloc_init(ox_alloc *a, size_t limit);

/* Parses a serialized message of descriptor d after checking its wire format
 * (every length within its parent, nesting at most 64 messages deep, no
 * groups). NULL with err set on failure. */
ProtobufCMessage *ox_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                            ox_alloc *a, char *err, size_t cap);

/* ---- host tensors ---------------------------------------------------------- */

bool ox_dtype_float(int dtype); /* FLOAT, DOUBLE, FLOAT16, BFLOAT16 */
bool ox_dtype_int(int dtype);   /* integer types and BOOL */
bool ox_dtype_known(int dtype); /* a numeric type the importer handles */

/* A tensor held on the host: float types in f (rounded to the type after
 * every operation), integer and bool types in i. */
typedef struct ox_host {
    int dtype;
    int rank;
    int64_t dims[OX_MAX_RANK];
    int64_t numel;
    double *f;
    int64_t *i;
} ox_host;

/* Element count of dims, or -1 if a dimension is negative or the product
 * exceeds limit. */
int64_t ox_numel(int rank, const int64_t *dims, int64_t limit);
/* Allocates numel elements (zeroed) for dtype and shape; MN_E_NOMEM or
 * MN_E_UNSUPPORTED (too large) with err set. */
mn_status ox_host_alloc(ox_host *h, int dtype, int rank, const int64_t *dims, char *err, size_t cap);
void ox_host_free(ox_host *h);
mn_status ox_host_copy(ox_host *dst, const ox_host *src, char *err, size_t cap);
/* v truncated toward zero, clamped to int64 (NaN: 0). */
int64_t ox_f2i(double v);
/* Element k as a double / as an integer (floats truncated toward zero). */
double ox_host_get_f(const ox_host *h, int64_t k);
int64_t ox_host_get_i(const ox_host *h, int64_t k);
/* Stores v in element k, rounded/converted to the dtype (ONNX Cast rules:
 * float to integer truncates; to bool is v != 0). */
void ox_host_set_f(ox_host *h, int64_t k, double v);
void ox_host_set_i(ox_host *h, int64_t k, int64_t v);
/* v rounded to the precision of a float dtype. */
double ox_round_to(int dtype, double v);

/* Decodes a TensorProto (raw_data or the typed fields) into h, checking the
 * element count against the data; what names it in messages. */
mn_status ox_tensor_decode(ox_host *h, const Onnx__TensorProto *t, const char *what, char *err,
                           size_t cap);
/* Checks a TensorProto (dtype, dims, data size, no external data) and
 * returns its element count without decoding. */
mn_status ox_tensor_check(const Onnx__TensorProto *t, int64_t *numel, const char *what, char *err,
                          size_t cap);
/* Decodes a float TensorProto straight to f32 (parameters). */
mn_status ox_tensor_decode_f32(float *dst, int64_t numel, const Onnx__TensorProto *t, const char *what,
                               char *err, size_t cap);

/* ---- the importer ---------------------------------------------------------- */

typedef enum ox_kind {
    OXV_CONST = 1,  /* known at import: host data (or a TensorProto not yet decoded) */
    OXV_INPUT,      /* a graph input, declared in the graph when first used */
    OXV_TENSOR,     /* computed in the graph */
    OXV_POISON      /* its node failed: nodes reading it are skipped */
} ox_kind;

/* How a graph input is fed (mn_onnx_set_input converts to it). */
typedef enum ox_feed {
    OXF_NONE = 0,
    OXF_F32,     /* float types, and integers used as numbers (Cast) */
    OXF_IDS,     /* integer indices -> i32 */
    OXF_BOOL     /* bool -> f32 0/1 */
} ox_feed;

typedef struct ox_value {
    char *name;
    ox_kind kind;
    int dtype;
    int rank;
    int64_t dims[OX_MAX_RANK];
    /* CONST (and INPUT with a hint): */
    ox_host host;
    bool host_ready;
    const Onnx__TensorProto *proto; /* CONST not yet decoded */
    int init;                       /* initializer index, or -1 */
    /* INPUT: */
    int input;                      /* position among the graph inputs without initializer, or -1 */
    bool hint;
    ox_feed feed;
    /* the graph tensor once materialised (f32, or i32 for OXF_IDS inputs) */
    mn_tensor t;
    bool is_param; /* t is a parameter (an initializer made trainable) */
} ox_value;

typedef struct ox_param {
    char *graph_name;
    const Onnx__TensorProto *src;
    int64_t numel;
} ox_param;

typedef struct ox_io {
    char *name;
    int position;
    char *graph_name;
    int onnx_dtype;
    mn_dtype dtype;
    ox_feed feed;
    int rank;
    int64_t dims[OX_MAX_RANK];
    mn_tensor tensor;
    ox_host host; /* outputs computed at import: their exact value */
    bool is_host;
} ox_io;

struct mn_onnx {
    ox_str err;
    ox_alloc alloc;
    Onnx__ModelProto *model;
    bool constants;
    ox_param *params;
    int n_params, cap_params;
    ox_io *inputs;
    int n_inputs, cap_inputs;
    ox_io *outputs;
    int n_outputs;
    /* every value computed in the graph, by ONNX name (mn_onnx_find) */
    char **names;
    mn_tensor *tensors;
    int n_named, cap_named;
};

typedef struct ox_import {
    mn_onnx *m;
    mn_graph *g;
    mn_onnx_options opt;
    const Onnx__GraphProto *graph;
    int opset;
    ox_value *vals;
    int n_vals, cap_vals;
    int *slots; /* open-addressing hash of value names -> index in vals */
    int n_slots;
    ox_str items; /* unsupported items and errors, one per line */
    int n_items;
    mn_status first; /* status of the first error that is not MN_E_UNSUPPORTED */
    int n_decl;      /* names declared with a generated suffix */
} ox_import;

/* One node being imported. */
typedef struct ox_ctx {
    ox_import *im;
    mn_graph *g;
    const Onnx__NodeProto *node;
    int index;      /* node index in the graph */
    int ver;        /* opset of the default domain */
    int nin, nout;  /* as written (absent optional inputs/outputs have value -1) */
    int *in;
    int *out;
    bool *used;     /* per attribute: read by the handler */
    int failures;   /* items this node recorded */
    char strs[8][256]; /* string attributes read (ox_attr_string) */
    int n_strs;
    ox_value absent;   /* what ox_in returns for an absent input */
} ox_ctx;

/* Records an unsupported item / an error of the node (op type and node name
 * prefixed); returns MN_E_UNSUPPORTED / st. */
mn_status ox_unsup(ox_ctx *c, const char *fmt, ...) OX_PRINTF(2, 3);
mn_status ox_fail(ox_ctx *c, mn_status st, const char *fmt, ...) OX_PRINTF(3, 4);
/* After a failed mn_* graph call: records mn_graph_error. */
mn_status ox_graph_fail(ox_ctx *c, mn_status st);
#define OX_TRY(c, call)                                        \
    do {                                                       \
        mn_status ox_st_ = (call);                             \
        if (ox_st_) return ox_graph_fail((c), ox_st_);         \
    } while (0)
#define OX_CHECK(call)                                         \
    do {                                                       \
        mn_status ox_st_ = (call);                             \
        if (ox_st_) return ox_st_;                             \
    } while (0)

/* Attributes (each read marks the attribute used; attributes a handler does
 * not read are reported as unsupported). */
const Onnx__AttributeProto *ox_attr(ox_ctx *c, const char *name);
mn_status ox_attr_int(ox_ctx *c, const char *name, int64_t def, int64_t *out);
mn_status ox_attr_float(ox_ctx *c, const char *name, float def, float *out);
/* up to cap values; *n = -1 when absent */
mn_status ox_attr_ints(ox_ctx *c, const char *name, int64_t *v, int cap, int *n);
mn_status ox_attr_floats(ox_ctx *c, const char *name, float *v, int cap, int *n);
/* NULL when absent (then *out = def) */
mn_status ox_attr_string(ox_ctx *c, const char *name, const char *def, const char **out);
/* Marks attributes as read without using them (documented no-ops). */
void ox_attr_ignore(ox_ctx *c, const char *name);

/* Inputs. */
bool ox_has_in(const ox_ctx *c, int k); /* present (not an empty optional) */
ox_value *ox_in(ox_ctx *c, int k);
int ox_in_rank(ox_ctx *c, int k);
const int64_t *ox_in_dims(ox_ctx *c, int k);
int ox_in_dtype(ox_ctx *c, int k);
/* Known at import (a constant, or an input with a hint). */
bool ox_in_known(ox_ctx *c, int k);
/* Host value of input k; unsupported ("must be known at import") otherwise. */
mn_status ox_in_host(ox_ctx *c, int k, const ox_host **h);
/* Every present input known at import. */
bool ox_all_known(ox_ctx *c);
/* The graph tensor of input k as f32 (declaring an input, a parameter or a
 * constant as needed). */
mn_status ox_in_f32(ox_ctx *c, int k, mn_tensor *t);
/* As i32 indices (a graph input fed as ids, or a constant). */
mn_status ox_in_ids(ox_ctx *c, int k, mn_tensor *t);
/* A host tensor as a graph constant (f32). */
mn_status ox_const_tensor(ox_ctx *c, const ox_host *h, mn_tensor *t);
mn_status ox_scalar(ox_ctx *c, float v, mn_tensor *t);

/* Outputs. */
bool ox_has_out(const ox_ctx *c, int k);
/* Output k computed in the graph (its dtype: the ONNX type it stands for). */
mn_status ox_set_out(ox_ctx *c, int k, mn_tensor t, int dtype);
/* Output k known at import; takes ownership of h. */
mn_status ox_set_out_host(ox_ctx *c, int k, ox_host *h);

/* Integer inputs fed as f32 numbers (Cast of an integer input). */
mn_status ox_in_f32_cast(ox_ctx *c, int k, mn_tensor *t);
/* Output k carrying i32 indices (a layout op over an indices input). */
mn_status ox_set_out_ids(ox_ctx *c, int k, mn_tensor t, int dtype);

/* Replaces input k of the node by a view of it with another shape (same
 * element count): legacy broadcasting aligns an operand this way. */
mn_status ox_derive(ox_ctx *c, int k, int rank, const int64_t *dims);

/* Shape helpers. */
mn_status ox_shape(ox_ctx *c, mn_tensor t, int *rank, int64_t dims[MN_MAX_RANK]);
/* axis in [-rank, rank) normalised, or an error naming what. */
mn_status ox_axis(ox_ctx *c, int64_t axis, int rank, const char *what, int *out);

/* ---- operators ------------------------------------------------------------- */

typedef mn_status (*ox_op_fn)(ox_ctx *c);
typedef struct ox_op {
    const char *name;
    int since;        /* first opset holding the op */
    int min_in, max_in;
    int min_out, max_out;
    ox_op_fn fn;
} ox_op;

/* Handlers by family; each table ends with a {NULL} entry. */
extern const ox_op ox_ops_math[];
extern const ox_op ox_ops_nn[];
extern const ox_op ox_ops_shape[];
const ox_op *ox_find_op(const char *name);

/* Reshape helper for handlers: out = reshape(x) with the given shape. */
mn_status ox_reshape(ox_ctx *c, mn_tensor *out, mn_tensor x, int rank, const int64_t *dims);
/* Elementwise binary on the host with multidirectional broadcasting. */
mn_status ox_host_broadcast(ox_ctx *c, ox_host *out, int dtype, const ox_host *a, const ox_host *b);
/* The element of an input of shape idims that broadcasts to element k of a
 * result of shape odims. */
int64_t ox_bc_index(int orank, const int64_t *odims, int64_t k, int irank, const int64_t *idims);
/* Row-major coordinates of element k, and back. */
void ox_coords(int rank, const int64_t *dims, int64_t k, int64_t *coords);
int64_t ox_linear(int rank, const int64_t *dims, const int64_t *coords);
/* Numpy broadcast of two shapes (false if they do not broadcast). */
bool ox_broadcast_dims(int *rank, int64_t *out, int ra, const int64_t *a, int rb, const int64_t *b);

#endif
