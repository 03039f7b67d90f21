// Tensor-core GEMM on Q4_0 weights for decode batches beyond the GEMV (host launchers only):
//
//   out[t][o] (= or +=) sum_i x[t][i] * W[o][i] (+ bias[o]),   x F16 [n_tokens][n_in], W Q4_0
//
// cuBLAS on the F16 copy of a weight reads 2 bytes per weight; at 16-128 tokens that is the
// memory wall (bench/NOTES.md). This GEMM reads the 0.56 bytes of the Q4_0 blocks instead. A CTA
// of 8 warps takes 64, 128 or 256 rows of W and 16, 32 or 64 tokens (the variant); cp.async stages
// the weight blocks and the token tile in shared memory, four chunks of 128 values of K deep.
// Within each 32-value block the mma.sync path takes K in the order that makes a lane's values
// the nibbles of one 32-bit word of the block (a dot product does not depend on K's order when the
// tokens follow it): one load, one byte permute, four masks and two half2 operations per eight
// values give the A fragments (d * (q - 8) rounded once: the values of the F16 copy), and one
// 8-byte load per token fragment the B side; F32 accumulation. When the tiles alone
// would leave SMs idle, K is split into slices; the last CTA of a tile to finish sums the slices'
// partial tiles in slice order (results do not depend on timing) and runs the epilogue. An sm_90a
// build adds a 256 x 64 shape whose warpgroups multiply with wgmma m64n64k16 (A from the same
// fragments, the tokens read by descriptor from shared memory); it is a variant, not a default.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/tensor.h"

namespace mvllm::cuda {

// True for the weight types this GEMM reads (Q4_0).
bool gemm_tiles_supported(DType weight_type);

// A CTA tile shape: row_warps x k_warps warps; each row warp owns 32 rows of W (two m16 tiles),
// the k_warps warps of a row share a chunk's blocks; n_tiles n8 tiles (8 n_tiles tokens).
struct GemmTilesVariant {
    int row_warps = 4, k_warps = 2, n_tiles = 8;
    bool wgmma = false;  // warpgroups multiply with wgmma (sm_90a builds only)
};
// True when this build has the wgmma shapes (compiled for sm_90a) and the device runs them.
bool gemm_tiles_have_wgmma();
std::vector<GemmTilesVariant> gemm_tiles_variants();  // the shapes this build has (benchmarks, tests)
std::string gemm_tiles_variant_name(const GemmTilesVariant& v);  // "128x64/8w2k"
GemmTilesVariant gemm_tiles_default_variant(int64_t n_tokens);  // what launch_gemm_tiles uses by default
// Tests: every launch without an explicit variant uses *v (nullptr: the default again).
void force_gemm_tiles_variant(const GemmTilesVariant* v);

// Bytes of scratch launch_gemm_tiles needs for this shape (0: no K split): the tiles' arrival
// counters, then the slices' partial tiles. Zero it once when allocated; the kernel leaves the
// counters at zero.
size_t gemm_tiles_scratch_bytes(DType weight_type, int64_t n_in, int64_t n_out, int64_t n_tokens, int32_t n_sms,
                                const GemmTilesVariant* variant = nullptr);

// w: [n_out][n_in] Q4_0 (device layout of weight_layout.h); x: [n_tokens][n_in] F16;
// out: [n_tokens][n_out] F32; bias: [n_out] F32 or nullptr; scratch: gemm_tiles_scratch_bytes;
// variant: nullptr for gemm_tiles_default_variant(n_tokens). w2: a second matrix of the same type
// and row length stacked under w (out: [n_tokens][w.ne[1] + w2.ne[1]]; gate and up in one launch).
void launch_gemm_tiles(const TensorView& w, const TensorView& x, const float* bias, float* out, bool accumulate,
                       void* scratch, int32_t n_sms, cudaStream_t stream, const GemmTilesVariant* variant = nullptr,
                       const TensorView* w2 = nullptr);

}  // namespace mvllm::cuda
