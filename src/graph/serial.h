/* serial.h - a user's graph as bytes (the graph section of an inference
 * bundle, docs/BUNDLE.md) and back.
 *
 * Only graphs a user can build are written: the sources (inputs,
 * parameters with their initialiser, learning-rate multiplier and frozen
 * flag, state tensors, constants with their values) and the forward ops of
 * the public constructors, with the outputs and the loss. Nodes of
 * autodiff and the optimizer (backward helpers, updates, the step gate) are
 * refused when writing and when reading.
 *
 * Reading treats the bytes as hostile: every count, index, size, string and
 * value is checked against the buffer; every node is re-created through the
 * library's own validation (sources and outputs through the public
 * mn_graph_* calls with their name rules, ops through graph_add and their
 * shape rules), may refer only to earlier nodes (no cycles, no forward
 * references), and must come out exactly as recorded (shape, dtype,
 * attributes), so the graph read is the graph written.
 *
 * Does not: hold weights (the bundle's safetensors section does), know the
 * bundle container (io/bundle.c), build sessions.
 */
#ifndef MN_GRAPH_SERIAL_H
#define MN_GRAPH_SERIAL_H

#include "core/wire.h"
#include "graph/graph.h"

#define GRAPH_SERIAL_MAGIC "MNGR"
#define GRAPH_SERIAL_VERSION 1u

/* Appends g's encoding to out. MN_E_UNSUPPORTED (naming the node and op)
 * for a node no public constructor makes; MN_E_NOMEM. */
mn_status graph_serialize(const mn_graph *g, mn_wbuf *out, char *err, size_t cap);
/* Builds a new graph from p[0..n). On failure *out is NULL and err names
 * the node, its op and what is wrong (MN_E_FORMAT for malformed bytes, the
 * graph's own status for a node its rules refuse). */
mn_status graph_deserialize(mn_graph **out, const uint8_t *p, size_t n, char *err, size_t cap);
/* Whether graph_serialize writes nodes of op (the forward ops of the
 * public constructors and the sources). */
bool graph_serial_op_allowed(op_id op);

#endif
