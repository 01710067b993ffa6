/* meganeura_onnx.h - ONNX import: an .onnx model becomes nodes of a
 * meganeura graph, for inference and for training (fine-tuning) of its
 * initializers.
 *
 * The model file is parsed with protobuf-c (code generated at build time
 * from the official onnx.proto) and every size, index and reference in it is
 * checked before use; a file is hostile input like every file. Nodes map to
 * the ops of meganeura.h, most one to one, some as small subgraphs
 * (docs/ONNX.md lists every operator, its opset versions and its limits).
 *
 * What becomes what:
 * - float initializers used by the computation become parameters named after
 *   the initializer (trainable unless opt.freeze; BatchNormalization's
 *   running mean and variance are always frozen); mn_onnx_init_session
 *   writes their values into a session. With opt.constants they become
 *   constants instead (inference only, no init call needed).
 * - integer initializers, Constant nodes and everything computable from them
 *   and from shapes (Shape, Gather on shapes, Concat, Range, ...) are
 *   evaluated at import ("constant folding"): the graph holds only the
 *   computation that depends on inputs and parameters;
 * - graph inputs become mn_graph_input's: float tensors as f32, integer
 *   tensors used as indices (Gather) as i32, booleans used as conditions
 *   (Where) as f32 0/1. mn_onnx_set_input converts from the ONNX type. An
 *   input nothing uses is not declared;
 * - graph outputs become mn_graph_output's under their ONNX names (a loss
 *   can then be added on them: mn_onnx_output_at gives the tensor).
 *
 * Limits (each refused with a message, never guessed): shapes are static
 * (symbolic dimensions get their size from the options); tensors computed at
 * run time are f32 (or i32 indices) of rank at most MN_MAX_RANK; float16,
 * bfloat16 and double initializers and constants are converted to f32;
 * string, complex and external-data tensors are refused; opsets 7 to 21 of
 * the default domain (ai.onnx), no other domain. Everything a model uses that
 * the importer cannot honour - operators, attributes or attribute values,
 * dtypes, opset versions, dynamic shapes - is listed in ONE error
 * (MN_E_UNSUPPORTED), each item naming the op type, the node and the
 * attribute or input.
 *
 * Conventions are meganeura.h's: mn_status returns, results first, the
 * handle keeps its last error message; every destroy accepts NULL.
 */
#ifndef MEGANEURA_ONNX_H
#define MEGANEURA_ONNX_H

#include "meganeura.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from the shared library (built with hidden visibility and a
 * version script generated from the public headers: cmake/exports.cmake). */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* Element types, numbered as ONNX's TensorProto.DataType. */
typedef enum mn_onnx_dtype {
    MN_ONNX_UNDEFINED = 0,
    MN_ONNX_FLOAT = 1,
    MN_ONNX_UINT8 = 2,
    MN_ONNX_INT8 = 3,
    MN_ONNX_UINT16 = 4,
    MN_ONNX_INT16 = 5,
    MN_ONNX_INT32 = 6,
    MN_ONNX_INT64 = 7,
    MN_ONNX_STRING = 8,
    MN_ONNX_BOOL = 9,
    MN_ONNX_FLOAT16 = 10,
    MN_ONNX_DOUBLE = 11,
    MN_ONNX_UINT32 = 12,
    MN_ONNX_UINT64 = 13,
    MN_ONNX_COMPLEX64 = 14,
    MN_ONNX_COMPLEX128 = 15,
    MN_ONNX_BFLOAT16 = 16
} mn_onnx_dtype;
/* "float", "int64", ...; "?" for an unknown number. */
const char *mn_onnx_dtype_name(int dtype);
/* Bytes per element of a numeric type (bool: 1); 0 for string, complex and
 * unknown types. */
size_t mn_onnx_dtype_size(int dtype);
/* Element k of data (at least k + 1 elements of the ONNX type dtype) as a
 * double: floats, bfloat16/float16 (exactly), bool and the integers
 * (64-bit ones rounded to a double); NaN for string, complex and unknown
 * types. */
double mn_onnx_value(const void *data, int dtype, int64_t k);

/* Most dimensions of a tensor held on the host (constants, test data). */
#define MN_ONNX_MAX_RANK 8

/* Size of a symbolic dimension (a dim_param such as "batch"). */
typedef struct mn_onnx_dim {
    const char *name;
    int64_t value; /* >= 1 */
} mn_onnx_dim;

/* What the caller says about one graph input. */
typedef struct mn_onnx_input {
    /* the input's name; NULL: the position-th graph input (counting the
     * model's graph inputs that are not initializers, from 0) */
    const char *name;
    int position;
    /* rank and shape (NULL: the model's declared shape, its symbolic
     * dimensions resolved by the options) */
    int rank;
    const int64_t *shape;
    /* NULL, or the input's value: row-major, in the input's ONNX type,
     * bytes long */
    const void *value;
    size_t bytes;
    /* With a value: false (the default) makes the input a constant of the
     * graph (it is not declared as an input); true keeps it a run-time input
     * and uses the value only where the model needs it at import (the shape
     * operand of a Reshape, the bounds of a Slice, ...): the value fed later
     * must then be the same. */
    bool hint;
} mn_onnx_input;

typedef struct mn_onnx_options {
    const mn_onnx_dim *dims; /* symbolic dimension sizes */
    int n_dims;
    const mn_onnx_input *inputs;
    int n_inputs;
    /* Size of a symbolic or unknown input dimension the options do not give;
     * 0 (the default): such a dimension is an error naming it. */
    int64_t default_dim;
    /* Initializers become frozen parameters (no gradient, no update). */
    bool freeze;
    /* Initializers become constants (copied into the graph; inference only). */
    bool constants;
    /* Prepended to every name declared in the graph (inputs, parameters,
     * outputs), e.g. "enc." to import two models into one graph. NULL: none. */
    const char *prefix;
} mn_onnx_options;

mn_onnx_options mn_onnx_default_options(void);

/* The imported model: which ONNX names became which graph tensors, and the
 * initializers' values. */
typedef struct mn_onnx mn_onnx;

/* Reads the .onnx file at path (a regular file of at most 2 GiB) and records
 * its computation into g. On success *out is the model's handle. On failure
 * *out is NULL, err (may be NULL) receives the message, and g may hold part
 * of the model's nodes and names: destroy it. opt NULL: defaults. */
mn_status mn_onnx_load(mn_onnx **out, mn_graph *g, const char *path, const mn_onnx_options *opt,
                       char *err, size_t errcap);
/* The same from len bytes of a serialized ModelProto in memory (copied as
 * needed; data may be freed after the call). */
mn_status mn_onnx_load_memory(mn_onnx **out, mn_graph *g, const void *data, size_t len,
                              const mn_onnx_options *opt, char *err, size_t errcap);
void mn_onnx_destroy(mn_onnx *m);
/* Message of the last failed call on m ("" if none). */
const char *mn_onnx_error(const mn_onnx *m);

/* Writes the initializers' values into the parameters of a session built
 * from the graph (call it once after mn_session_create, before training or
 * running; again to reset a fine-tuned model to the file's values). Checks
 * that every value is finite. Nothing to do (MN_OK) with opt.constants. */
mn_status mn_onnx_init_session(mn_onnx *m, mn_session *s);

/* A graph input or output of the model. */
typedef struct mn_onnx_io {
    const char *name;       /* ONNX name; valid while m lives */
    const char *graph_name; /* the name in the graph (prefix + sanitised name) */
    int position;           /* inputs: among the model's graph inputs that are not initializers */
    int onnx_dtype;         /* mn_onnx_dtype, as the model declares it */
    mn_dtype dtype;         /* the graph tensor's (f32, or i32 for indices) */
    int rank;
    int64_t shape[MN_ONNX_MAX_RANK];
    mn_tensor tensor;       /* in the graph; MN_NONE for an output computed at import */
} mn_onnx_io;

/* Inputs declared in the graph (those the computation uses), in model order. */
int mn_onnx_input_count(const mn_onnx *m);
mn_status mn_onnx_input_at(const mn_onnx *m, int i, mn_onnx_io *out);
/* Every output of the model, in model order. */
int mn_onnx_output_count(const mn_onnx *m);
mn_status mn_onnx_output_at(const mn_onnx *m, int i, mn_onnx_io *out);
/* The graph tensor of any value the import computed in the graph (an
 * intermediate result, to attach a loss to a hidden layer, say).
 * MN_E_NOT_FOUND when the model has no such value or it was computed at
 * import (a constant). */
mn_status mn_onnx_find(const mn_onnx *m, const char *onnx_name, mn_tensor *out);

/* Feeds a graph input by its ONNX name: data in the type the model declares
 * (int64 ids, bool conditions, float), bytes = elements * that type's size;
 * converted to the graph tensor's type (ids checked to fit in i32). An input
 * the import did not declare (unused, or made a constant) is accepted and
 * ignored. */
mn_status mn_onnx_set_input(mn_onnx *m, mn_session *s, const char *name, const void *data,
                            size_t bytes);
/* Reads an output by its ONNX name in the type the model declares (float as
 * is; integers rounded from f32; bool: value != 0), bytes = elements * that
 * type's size. Outputs computed at import give their exact values. */
mn_status mn_onnx_get_output(mn_onnx *m, mn_session *s, const char *name, void *dst, size_t bytes);

/* A tensor read from a serialized TensorProto (ONNX test data: input_0.pb).
 * data holds numel elements of dtype, row-major (bool as one byte 0/1). */
typedef struct mn_onnx_tensor {
    char *name; /* may be "" */
    int dtype;
    int rank;
    int64_t shape[MN_ONNX_MAX_RANK];
    int64_t numel;
    void *data;
    size_t bytes;
} mn_onnx_tensor;
/* Reads a .pb file holding one TensorProto (every size checked). On failure
 * err (may be NULL) says why and *out is zeroed. */
mn_status mn_onnx_tensor_read(mn_onnx_tensor *out, const char *path, char *err, size_t errcap);
void mn_onnx_tensor_free(mn_onnx_tensor *t);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* MEGANEURA_ONNX_H */
