// The per-weight-type dot-product table of the CPU matmul (one row per weight type, ggml-style
// type traits): which activation format a weight type is multiplied with, how activations are
// converted into it, and the dot-product kernels for each ISA.
//
//   weight          activation   dot product runs on
//   F32, F16, BF16  F32          floats (FMA)
//   Q8_0, Q4_0      Q8_0         int8 x int8 per 32-block, one f32 scale product per block
//   Q4_K,Q5_K,Q6_K  Q8_K         int8 x int8 per 256-block with 6/8-bit sub-block scales
//
// A dot kernel reads ONE weight row of n values and a tile of 1..kMaxTokenTile activation rows
// (x_row_bytes apart) and writes out[j] = w . x_j: each weight block is unpacked once and used
// for every token of the tile, which is what makes prefill faster than n_tokens GEMVs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/matmul.h"
#include "core/types.h"

namespace mvllm {

constexpr int kMaxTokenTile = 4;

// Activation rows as the kernels read them:
//   F32:  [n] f32
//   Q8_K: [n/256] BlockQ8_K
//   Q8_0: [nb] BlockQ8_0 (nb = n/32), zero padding to 32 bytes, then [nb8] f32 d and [nb8] f32
//         d * sum(qs) (nb8 = nb rounded up to 8, zero padded): the block scales once more as
//         floats, so SIMD kernels load 8 of them as one vector, and the block sums that turn an
//         unsigned-nibble dot into the Q4_0 dot (sum (u - 8) x = sum u x - 8 sum x), then [nb8]
//         int32 bias words for the interleaved Q4_0 GEMM (act_q8_0_bias).
size_t act_row_bytes(DType act, int64_t n);
// Where the [nb8] f32 d array of a Q8_0 activation row starts: after the blocks and their padding.
inline size_t act_q8_0_scales_offset(int64_t n) {
    return (static_cast<size_t>(n / QK8_0) * sizeof(BlockQ8_0) + 31) / 32 * 32;
}
// The [nb8] f32 d array of a Q8_0 activation row (the d * sum array follows it).
inline const float* act_q8_0_scales(const void* row, int64_t n) {
    return reinterpret_cast<const float*>(static_cast<const char*>(row) + act_q8_0_scales_offset(n));
}
inline int64_t act_q8_0_n_scales(int64_t n) { return (n / QK8_0 + 7) / 8 * 8; }
// The [nb8] bias words of a Q8_0 activation row: per block, the low i16 is -8 * (sum of q[k] with
// k % 4 in {0, 1}) and the high i16 -8 * (sum of q[k] with k % 4 in {2, 3}). The interleaved Q4_0
// GEMM starts its i16 pair sums of unsigned nibbles there, so they come out as sums of (u - 8) q.
inline const int32_t* act_q8_0_bias(const void* row, int64_t n) {
    return reinterpret_cast<const int32_t*>(act_q8_0_scales(row, n) + 2 * act_q8_0_n_scales(n));
}
// Writes the padding and the f32 arrays of a Q8_0 activation row whose blocks are filled in.
void finish_act_q8_0(void* row, int64_t n);

// out[j] = dot(w[0..n), x_j[0..n)) for j < n_x; w: one weight row; x_j = x + j * x_row_bytes.
using VecDotFn = void (*)(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x,
                          float* out);
// Converts n floats into one activation row of the table's activation type.
using ActQuantizeFn = void (*)(const float* src, void* dst, int64_t n);

// ---- interleaved Q4_0 GEMM (prefill) --------------------------------------------------------------
// A panel holds 8 weight rows of n_blocks Q4_0 blocks, block after block: 8 f32 row scales (32 B),
// then 8 vectors of 32 bytes; vector v (h = v / 4, g = v % 4) has, in its 32-bit lane r, the
// unsigned nibble values 16 h + 4 g .. 16 h + 4 g + 3 of row r as bytes. One maddubs with the
// matching 4 activation bytes broadcast then gives every row's partial dot in its own lane.
constexpr size_t kQ4PanelBlockBytes = 32 + 8 * 32;
// Repacks n_rows (1..8) rows, row_bytes apart, into a panel; missing rows are zero.
using RepackFn = void (*)(const void* w, size_t row_bytes, int n_rows, int64_t n_blocks, void* panel);
// y[j * y_stride + r] = row r . token j for r < n_rows, j < n_x (1..kMaxTokenTile); x as VecDotFn.
using PanelGemmFn = void (*)(int64_t n_blocks, const void* panel, const void* x, size_t x_row_bytes, int n_x,
                             float* y, size_t y_stride, int n_rows);

struct VecDotTraits {
    DType weight;
    DType act;                  // F32, Q8_0 or Q8_K
    VecDotFn dot[3];            // indexed by CpuIsa; nullptr = not implemented for that ISA
    ActQuantizeFn quantize[3];  // indexed by CpuIsa; nullptr = not implemented
    // Batch-invariant twins of dot: out[j] is computed in the same order whatever n_x is (the
    // batch-invariant matmul's requirement). nullptr where dot already has that property.
    VecDotFn dot_fixed_order[3];
};

// The row of a weight type (CHECK-fails when the type has no kernels, e.g. Q8_K weights).
const VecDotTraits& vec_dot_traits(DType weight);
// The dot kernel / activation quantiser used for `isa`: the best implemented one at or below it;
// with fixed_order, a kernel whose out[j] does not depend on n_x.
VecDotFn vec_dot_fn(const VecDotTraits& t, CpuIsa isa, bool fixed_order = false);
ActQuantizeFn act_quantize_fn(const VecDotTraits& t, CpuIsa isa);

// ---- kernels, one set per ISA (vec_dot_scalar.cpp, vec_dot_avx2.cpp, vec_dot_avx512.cpp) ------
namespace scalar {
void dot_f32(int64_t, const void*, const void*, size_t, int, float*);
void dot_f16(int64_t, const void*, const void*, size_t, int, float*);
void dot_bf16(int64_t, const void*, const void*, size_t, int, float*);
void dot_q8_0(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_0(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_K(int64_t, const void*, const void*, size_t, int, float*);
void dot_q5_K(int64_t, const void*, const void*, size_t, int, float*);
void dot_q6_K(int64_t, const void*, const void*, size_t, int, float*);
void quantize_f32(const float* src, void* dst, int64_t n);  // plain copy
void quantize_act_q8_0(const float* src, void* dst, int64_t n);  // quantize_row_q8_0 + finish
}  // namespace scalar

namespace avx2 {
void dot_f32(int64_t, const void*, const void*, size_t, int, float*);
void dot_f16(int64_t, const void*, const void*, size_t, int, float*);
void dot_bf16(int64_t, const void*, const void*, size_t, int, float*);
void dot_q8_0(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_0(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_K(int64_t, const void*, const void*, size_t, int, float*);
void dot_q5_K(int64_t, const void*, const void*, size_t, int, float*);
void dot_q6_K(int64_t, const void*, const void*, size_t, int, float*);
// dot_q8_0 / dot_q4_0 with two FMA chains for every tile size (the tuned kernels use 4, 2 or 1
// chains by n_x, which makes a token's result depend on how many tokens share its tile).
void dot_q8_0_fixed_order(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_0_fixed_order(int64_t, const void*, const void*, size_t, int, float*);
// Same blocks as quantize_row_q8_0 / quantize_row_q8_K (core/quant.h), vectorised.
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_act_q8_0(const float* src, void* dst, int64_t n);  // quantize_q8_0 + finish
void quantize_q8_K(const float* src, void* dst, int64_t n);
void repack_q4_0_x8(const void* w, size_t row_bytes, int n_rows, int64_t n_blocks, void* panel);
void gemm_q4_0_x8(int64_t n_blocks, const void* panel, const void* x, size_t x_row_bytes, int n_x, float* y,
                  size_t y_stride, int n_rows);
// One token (decode): y[0..8) = 8 Q4_0 rows (row_bytes apart) . x, the panel transpose done in
// registers on the fly. With fixed_order, one FMA chain over the blocks: then every output is
// bit-identical to gemm_q4_0_x8's for the same row and token (the batch-invariant decode).
void gemv_q4_0_x8(int64_t n_blocks, const void* w, size_t row_bytes, const void* x, float* y,
                  bool fixed_order = false);
// Converts n f16 values to f32 (F16 activations).
void convert_f16_to_f32(const uint16_t* src, float* dst, int64_t n);
}  // namespace avx2

namespace avx512 {
// avx2::gemm_q4_0_x8 / gemv_q4_0_x8 with VNNI (dpbusd): the same panels and bit-identical results.
void gemm_q4_0_x8(int64_t n_blocks, const void* panel, const void* x, size_t x_row_bytes, int n_x, float* y,
                  size_t y_stride, int n_rows);
void gemv_q4_0_x8(int64_t n_blocks, const void* w, size_t row_bytes, const void* x, float* y,
                  bool fixed_order = false);
void dot_q8_0(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_0(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_K(int64_t, const void*, const void*, size_t, int, float*);
void dot_q6_K(int64_t, const void*, const void*, size_t, int, float*);
}  // namespace avx512

}  // namespace mvllm
