// Tensor-core GEMM on quantised weights, for prefill chunks and decode batches beyond the GEMV
// (host launchers only):
//
//   out[t][o] (= or +=) sum_i x[t][i] * W[o][i] (+ bias[o]),   x F16 [n_tokens][n_in], W Q4_0 / Q8_0
//
// A CTA of 4 or 8 warps takes up to 256 rows of W and 16, 32 or 64 token columns (the variant);
// every warp dequantises its 16-64 rows block by block straight into mma.sync A fragments (F16:
// d * q rounded once, the values of the F16 weight copy) and multiplies them with the token tile,
// which cp.async stages in shared memory (three stages, 128 values of K each) together with the
// weight blocks; each token fragment loaded serves all the warp's rows. F32 accumulation. When the tiles alone
// would leave SMs idle, K is split into slices whose partial tiles a second kernel sums in a fixed
// order, so results do not depend on timing. The weights are read once per 64 token columns:
// 0.56 bytes per weight for Q4_0 instead of the 2 of the F16 copy. Not yet faster than cuBLAS on
// the F16 copies, so off by default (matmul.cuh: gemm_tiles_max_tokens; bench/NOTES.md).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/tensor.h"

namespace mvllm::cuda {

// True for the weight types this GEMM reads (Q4_0, Q8_0).
bool gemm_tiles_supported(DType weight_type);

// A CTA tile shape: `warps` warps of `m_tiles` m16 tiles each (16 m_tiles warps rows of W) and
// n_tiles n8 tiles (8 n_tiles tokens).
struct GemmTilesVariant {
    int m_tiles = 2, warps = 8, n_tiles = 8;
};
std::vector<GemmTilesVariant> gemm_tiles_variants();  // the shapes this build has (benchmarks, tests)
std::string gemm_tiles_variant_name(const GemmTilesVariant& v);  // "256x64/8w2m"
GemmTilesVariant gemm_tiles_default_variant(int64_t n_tokens);  // what launch_gemm_tiles uses by default
// Tests: every launch without an explicit variant uses *v (nullptr: the default again).
void force_gemm_tiles_variant(const GemmTilesVariant* v);

// Bytes of split-K partials launch_gemm_tiles needs for this shape (0: no split).
size_t gemm_tiles_scratch_bytes(DType weight_type, int64_t n_in, int64_t n_out, int64_t n_tokens, int32_t n_sms,
                                const GemmTilesVariant* variant = nullptr);

// w: [n_out][n_in] Q4_0 / Q8_0 (device layout of weight_layout.h); x: [n_tokens][n_in] F16;
// out: [n_tokens][n_out] F32; bias: [n_out] F32 or nullptr; scratch: gemm_tiles_scratch_bytes;
// variant: nullptr for gemm_tiles_default_variant(n_tokens).
void launch_gemm_tiles(const TensorView& w, const TensorView& x, const float* bias, float* out, bool accumulate,
                       void* scratch, int32_t n_sms, cudaStream_t stream, const GemmTilesVariant* variant = nullptr);

}  // namespace mvllm::cuda
