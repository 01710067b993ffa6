/* pointwise.h - shared definitions of the parameterised pointwise ops: the
 * dropout mask hash, identical in C (CPU kernels, Vulkan generator) and in
 * GLSL (kernels/eltwise.glsl), and the session rule that makes dropout the
 * identity in inference sessions.
 *
 * The mask: element i of a dropout node is dropped iff
 *   h = mix(mix(key ^ lo32(i)) ^ hi32(i)) < threshold
 * with threshold = p * 2^32 (ip[1]; 2^32 drops everything) and
 *   key = mix(mix(lo32(seed) ^ 0x9e3779b9) ^ hi32(seed))         (no counter)
 *   key = mix(key0 ^ mix((uint32)counter + 0x632be5ab))           (counter)
 * mix is a 32-bit xorshift-multiply finaliser (the multipliers are the
 * "lowbias32" pair published by C. Wellons' hash-prospector). Only uint32
 * arithmetic (wrapping multiply, xor, shifts): the GLSL twin computes the same
 * bits.
 *
 * Does not: build graph nodes (graph/ops_pointwise.c does).
 */
#ifndef MN_GRAPH_POINTWISE_H
#define MN_GRAPH_POINTWISE_H

#include <stdint.h>

#include "graph/graph.h"

static inline uint32_t pw_mix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return h;
}

/* The key of a seed (before any counter). */
static inline uint32_t pw_dropout_key(uint64_t seed) {
    return pw_mix32(pw_mix32((uint32_t)seed ^ 0x9e3779b9u) ^ (uint32_t)(seed >> 32));
}

/* The key for one value of the counter input. */
static inline uint32_t pw_dropout_key_counter(uint32_t key, int32_t counter) {
    return pw_mix32(key ^ pw_mix32((uint32_t)counter + 0x632be5abu));
}

/* The 32-bit hash of element i under key. */
static inline uint32_t pw_dropout_hash(uint32_t key, uint64_t i) {
    return pw_mix32(pw_mix32(key ^ (uint32_t)i) ^ (uint32_t)(i >> 32));
}

/* ip[1] of a dropout node: elements whose hash is below it are dropped. */
static inline int64_t pw_dropout_threshold(float p) {
    return (int64_t)((double)p * 4294967296.0);
}

/* The factor kept elements are multiplied by, rounded once to the storage
 * type by the caller: 1 / (1 - p), 0 when everything is dropped. */
static inline double pw_dropout_scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }

/* Inference sessions: every DROPOUT node of g becomes a view of its input
 * (RESHAPE to the same shape), which dispatches nothing. */
void graph_dropout_to_identity(mn_graph *g);

#endif
