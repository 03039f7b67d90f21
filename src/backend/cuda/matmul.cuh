// CUDA matrix multiplication on weights kept in their stored type (host launchers only).
//
//   out[n_tokens][n_out] f32 = x[n_tokens][n_in] (F32 or F16) . W[n_out][n_in]^T (+ bias[n_out])
//
// W: F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K (device layout: weight_layout.h). The path is a
// short predicate chain (choose_matmul_path): up to kGemvMaxTokens rows the GEMV of gemv.cuh
// (each weight read once, 16-byte loads, dp4a on the QX activation for quantised weights); beyond
// that the weight's F16 copy (or, without one, the weight dequantised into scratch) and cuBLAS run
// the GEMM (or, up to gemm_tiles_max_tokens() rows of Q4_0, the quantised tensor-core GEMM of
// gemm_tiles.cuh) (F16 operands with
// F32 accumulation for F16 and quantised weights; F32 throughout for F32 and BF16 weights, so F32
// models stay exact). The epilogue may add the product to out (the residual add).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemm_tuned.cuh"
#include "backend/cuda/gemv.cuh"
#include "core/tensor.h"

namespace mvllm::cuda {

constexpr int64_t kGemvMaxTokens = kGemvMaxColumns;

enum class MatmulPath { Gemv, GemmTiles, GemmF16, GemmF32 };
// When Q4_0 weights take the quantised tile GEMM instead of cuBLAS on their F16 copies: up to
// kGemmTilesMaxTokens rows, on matrices of at least kGemmTilesMinWeights weights. At 9-16 rows
// the tile GEMM beats cuBLAS on the 7B gate/up and down matrices (18944 x 3584: 30 against 38 us)
// and loses on the smaller ones (QKV, O, every 0.5B matrix); from 32 rows on cuBLAS wins
// everywhere (bench/NOTES.md, eighth session). MVLLM_GEMM_TILES_MAX_ROWS=N (or the setter)
// replaces the rule: up to N rows, every matrix size (0: never).
constexpr int64_t kGemmTilesMaxTokens = 16;
constexpr int64_t kGemmTilesMinWeights = int64_t{32} << 20;
int64_t gemm_tiles_max_tokens();
int64_t gemm_tiles_min_weights();
void set_gemm_tiles_max_tokens(int64_t n, int64_t min_weights = 0);  // tests and benchmarks
// batch_invariant: the GEMV for every n_tokens (in slices of kGemvMaxTokens columns), whose
// per-column reduction order does not depend on the column count; cuBLAS picks its algorithm
// (and split-K) by shape, so a row's rounding would depend on the batch. n_weights: n_in x n_out
// of the product (both matrices when gate and up are one product).
MatmulPath choose_matmul_path(DType weight_type, int64_t n_tokens, bool batch_invariant = false,
                              int64_t n_weights = INT64_MAX);
const char* matmul_path_name(MatmulPath path);

// Device scratch of the GEMM paths, grown on demand (growth synchronises the device).
struct MatmulScratch {
    void* weight = nullptr;  // [n_out][n_in] f16 or f32: the dequantised weight
    size_t weight_bytes = 0;
    void* input = nullptr;   // [n_tokens][n_in] f16 or f32: x in the GEMM's operand type
    size_t input_bytes = 0;
    void* qx = nullptr;      // QX of the GEMV input (gemv.cuh)
    size_t qx_bytes = 0;
    void* partial = nullptr;  // split-K partial tiles of the quantised GEMM (gemm_tiles.cuh)
    size_t partial_bytes = 0;
    GemmTuner* tuner = nullptr;  // the F16 GEMMs through cuBLASLt (gemm_tuned.cuh); null: cublasGemmEx
    ~MatmulScratch();
};

// Weight types the CUDA matmul and embedding kernels support.
bool cuda_weight_type_supported(DType type);

// qx: x already quantised (e.g. by launch_rms_norm_qx), or nullptr (quantised here if needed).
// w_f16: W dequantised to F16 once (same ne), used by the F16 GEMM path, or nullptr.
// n_sms: the device's SM count (sizes the quantised GEMM's K split).
void launch_matmul(const TensorView& w, const void* w_f16, const TensorView& x, const TensorView& bias, const TensorView& out,
                   GemvEpilogue epilogue, const QxView* qx, MatmulScratch& scratch, cublasHandle_t cublas,
                   cudaStream_t stream, int32_t n_sms, bool batch_invariant = false);

// out[n_tokens][n1 + n2] = x . [W1; W2]^T: two matrices of one type and row length as one product
// (gate and up), for row counts whose path is MatmulPath::GemmTiles.
void launch_matmul_stacked(const TensorView& w1, const TensorView& w2, const TensorView& x, const TensorView& out,
                           MatmulScratch& scratch, cudaStream_t stream, int32_t n_sms);

// The scratch QX buffer for n_rows x n_in (grown on demand; growth synchronises the device).
QxView ensure_qx(MatmulScratch& scratch, int64_t n_in, int64_t n_rows);

// Dequantises a whole weight matrix (any supported type) to F16 or F32 rows (out: same ne).
void launch_dequantize(const TensorView& w, const TensorView& out, cudaStream_t stream);

}  // namespace mvllm::cuda
