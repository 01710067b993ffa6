/* host.c - host-tensor helpers for constant folding: numpy broadcasting of
 * shapes, allocation of broadcast results, index maps.
 *
 * Constant folding evaluates on the host what depends only on constants
 * (shape arithmetic above all: Shape -> Gather -> Concat -> Reshape), in
 * double for float types (rounded to the type after each operation, which
 * for + - * / and sqrt equals the type's own arithmetic) and in int64 for
 * integer types (wrapped to the type).
 *
 * Does not: decode protobuf (proto.c) or know operators (ops_*.c).
 */
#include <string.h>

#include "onnx/onnx_internal.h"

bool ox_broadcast_dims(int *rank, int64_t *out, int ra, const int64_t *a, int rb, const int64_t *b) {
    int r = ra > rb ? ra : rb;
    for (int i = 0; i < r; i++) {
        int64_t da = i < r - ra ? 1 : a[i - (r - ra)];
        int64_t db = i < r - rb ? 1 : b[i - (r - rb)];
        if (da != db && da != 1 && db != 1) return false;
        out[i] = da == 1 ? db : da;
    }
    *rank = r;
    return true;
}

mn_status ox_host_broadcast(ox_ctx *c, ox_host *out, int dtype, const ox_host *a, const ox_host *b) {
    int r;
    int64_t d[OX_MAX_RANK];
    if (!ox_broadcast_dims(&r, d, a->rank, a->dims, b->rank, b->dims))
        return ox_fail(c, MN_E_SHAPE, "shapes of rank %d and %d do not broadcast", a->rank, b->rank);
    char sub[128];
    mn_status st = ox_host_alloc(out, dtype, r, d, sub, sizeof sub);
    if (st) return ox_fail(c, st, "%s", sub);
    return MN_OK;
}

int64_t ox_bc_index(int orank, const int64_t *odims, int64_t k, int irank, const int64_t *idims) {
    int64_t idx = 0, stride = 1;
    for (int i = orank - 1, j = irank - 1; i >= 0; i--, j--) {
        int64_t coord = k % odims[i];
        k /= odims[i];
        if (j >= 0) {
            if (idims[j] != 1) idx += coord * stride;
            stride *= idims[j];
        }
    }
    return idx;
}

void ox_coords(int rank, const int64_t *dims, int64_t k, int64_t *coords) {
    for (int i = rank - 1; i >= 0; i--) {
        coords[i] = dims[i] ? k % dims[i] : 0;
        k = dims[i] ? k / dims[i] : 0;
    }
}

int64_t ox_linear(int rank, const int64_t *dims, const int64_t *coords) {
    int64_t k = 0;
    for (int i = 0; i < rank; i++) k = k * dims[i] + coords[i];
    return k;
}
