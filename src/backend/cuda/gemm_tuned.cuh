// The F16 GEMM of the matmul path through cuBLASLt, with the algorithm chosen by timing:
//
//   C[n_tokens][n_out] f32 (= or +=) X[n_tokens][n_in] f16 . W[n_out][n_in]^T f16
//
// cuBLAS's default heuristic picks one algorithm per shape from a model of the GPU; for the
// decode-sized row counts of a batched step (a few dozen rows against a 7B matrix: the weight read
// is the whole cost) its pick is often not the fastest (split-K with a separate reduction, tiles
// that leave SMs idle). The first call of a (n_out, n_in, n_tokens, accumulate) shape with
// n_tokens <= kTunedMaxTokens times the heuristic's candidates on a scratch output and keeps the
// fastest; later calls (and recorded steps) reuse it, and so do other row counts of the same
// power-of-two bucket when cuBLASLt accepts the algorithm for them. Larger row counts (prefill) take the
// heuristic's first candidate. Tuning needs a free stream (it synchronises), so a shape first
// met while a step is being recorded takes the first candidate and is tuned at its next eager
// call; the engine's first step of every recorded shape is eager.
//
// Tuning happens only while it is switched on (set_tuning), which the engine does during its
// start-up warm-up (engine.cpp): on the H200 it saves 2-3 % of a 7B 64-sequence step (5.73 ->
// 5.58 ms of graph time in the sixth session) but nothing on the 0.5B geometry, and the step that
// tunes a row bucket costs ~100 ms more than an untuned one (mostly, it seems, the first launch of
// each candidate kernel), which a 256-step benchmark or a server whose batch size wanders does not
// earn back when it happens while serving (bench/NOTES.md, sixth session). MVLLM_GEMM_TUNE=1
// tunes every new shape at any time, MVLLM_GEMM_TUNE=0 never.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace mvllm::cuda {

class GemmTuner {
public:
    static constexpr int64_t kTunedMaxTokens = 512;

    GemmTuner(void* workspace, size_t workspace_bytes);
    ~GemmTuner();
    GemmTuner(const GemmTuner&) = delete;
    GemmTuner& operator=(const GemmTuner&) = delete;

    // Whether shapes first met from now on are tuned (MVLLM_GEMM_TUNE overrides it).
    void set_tuning(bool on);
    // Returns false when cuBLASLt has no algorithm for the shape (the caller falls back).
    bool gemm(const void* w_f16, const void* x_f16, float* out, int64_t n_out, int64_t n_in, int64_t n_tokens,
              bool accumulate, cudaStream_t stream);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace mvllm::cuda
