/* vk_spirv.h - passes over the SPIR-V that glslang writes, for what Debian
 * 12's glslang (12.0) cannot express: cooperative matrices in the KHR form
 * (VK_KHR_cooperative_matrix: AMD, Intel and NVIDIA expose it; glslang 12
 * knows only GL_NV_cooperative_matrix) and bf16 (SPV_KHR_bfloat16: glslang
 * 12 has no bf16 type).
 *
 * Does not: compile GLSL (vk_compile.c), know about kernels or devices.
 */
#ifndef MN_VK_SPIRV_H
#define MN_VK_SPIRV_H

#include "core/common.h"

/* Rewrites a module using SPV_NV_cooperative_matrix into one using
 * SPV_KHR_cooperative_matrix: the capability and extension, each
 * OpTypeCooperativeMatrixNV into OpTypeCooperativeMatrixKHR with its
 * MatrixA / MatrixB / MatrixAccumulator use (a type that serves as both A
 * and B, as a 16x16 f16 one does, is split in two, and every value,
 * variable and pointer of it is retyped by how its value flows into the
 * products), loads and stores with a RowMajor / ColumnMajor layout constant
 * in place of the column-major bool, the multiply-add and the length. With
 * bf16 every 16-bit float type becomes SPV_KHR_bfloat16's (which allows only
 * conversions, memory, composite and cooperative-matrix instructions on it:
 * anything else is refused), the Float16 capability goes and the
 * BFloat16TypeKHR and BFloat16CooperativeMatrixKHR capabilities come.
 * *out is malloc'ed (*nout words). A module it cannot type (a value used as
 * both A and B, a cooperative matrix passed to a function, an instruction it
 * does not know on one) is refused with a message; nothing is guessed. */
mn_status vk_spirv_coopmat_khr(uint32_t **out, size_t *nout, const uint32_t *in, size_t nin, bool bf16, char *err,
                               size_t cap);

/* A check of what vk_spirv_coopmat_khr writes (tests; the spirv-val of
 * Debian 12, SPIRV-Tools 2023.1, predates both extensions): the header and
 * instruction stream are well formed, every id is defined once, no NV
 * cooperative matrix is left, the KHR capability and extension are there,
 * every KHR matrix type has a float component, subgroup scope, constant
 * dimensions and a use, every load and store a constant layout and a stride,
 * every multiply-add an A, a B and accumulators of matching shapes; with
 * bf16 the bf16 capabilities and extension, the encoding on every 16-bit
 * float type, and bf16 values only in the instructions SPV_KHR_bfloat16
 * allows. */
mn_status vk_spirv_check_khr(const uint32_t *w, size_t n, bool bf16, char *err, size_t cap);

#endif
