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
//         unsigned-nibble dot into the Q4_0 dot (sum (u - 8) x = sum u x - 8 sum x).
size_t act_row_bytes(DType act, int64_t n);
// The [nb8] f32 d array of a Q8_0 activation row (the d * sum array follows it).
inline const float* act_q8_0_scales(const void* row, int64_t n) {
    const size_t blocks = (static_cast<size_t>(n / QK8_0) * sizeof(BlockQ8_0) + 31) / 32 * 32;
    return reinterpret_cast<const float*>(static_cast<const char*>(row) + blocks);
}
inline int64_t act_q8_0_n_scales(int64_t n) { return (n / QK8_0 + 7) / 8 * 8; }
// Writes the padding and the f32 arrays of a Q8_0 activation row whose blocks are filled in.
void finish_act_q8_0(void* row, int64_t n);

// out[j] = dot(w[0..n), x_j[0..n)) for j < n_x; w: one weight row; x_j = x + j * x_row_bytes.
using VecDotFn = void (*)(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x,
                          float* out);
// Converts n floats into one activation row of the table's activation type.
using ActQuantizeFn = void (*)(const float* src, void* dst, int64_t n);

struct VecDotTraits {
    DType weight;
    DType act;                  // F32, Q8_0 or Q8_K
    VecDotFn dot[3];            // indexed by CpuIsa; nullptr = not implemented for that ISA
    ActQuantizeFn quantize[3];  // indexed by CpuIsa; nullptr = not implemented
};

// The row of a weight type (CHECK-fails when the type has no kernels, e.g. Q8_K weights).
const VecDotTraits& vec_dot_traits(DType weight);
// The dot kernel / activation quantiser used for `isa`: the best implemented one at or below it.
VecDotFn vec_dot_fn(const VecDotTraits& t, CpuIsa isa);
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
// Same blocks as quantize_row_q8_0 / quantize_row_q8_K (core/quant.h), vectorised.
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_act_q8_0(const float* src, void* dst, int64_t n);  // quantize_q8_0 + finish
void quantize_q8_K(const float* src, void* dst, int64_t n);
// Converts n f16 values to f32 (F16 activations).
void convert_f16_to_f32(const uint16_t* src, float* dst, int64_t n);
}  // namespace avx2

namespace avx512 {
void dot_q8_0(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_0(int64_t, const void*, const void*, size_t, int, float*);
void dot_q4_K(int64_t, const void*, const void*, size_t, int, float*);
void dot_q6_K(int64_t, const void*, const void*, size_t, int, float*);
}  // namespace avx512

}  // namespace mvllm
