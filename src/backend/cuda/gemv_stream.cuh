// The streaming decode GEMV (one token column): a persistent kernel, one CTA per SM, whose weight
// rows arrive in shared memory by bulk copies (the copy engine, not the load units) through a
// ring of stages, while 16 warps dot the landed stages with the QX activation, two rows per warp
// at a time. Thread 0 issues the copies. (Host side; the kernel is in gemv_stream.cu.)
//
// Each lane dots the same items of every row, so their QX values load once into registers.
//
// Why: the register GEMV (gemv.cu) keeps its bytes in flight in registers, so each lane holds a
// few items and each CTA lives for about one memory latency; a 38 MB matrix then runs as ~2-3
// waves of short CTAs, each paying a ramp and a tail (70-80 % of the copy rate on the 7B's FFN
// matrices, bench/NOTES.md). Here each SM keeps ~128 KB of weights in flight for the whole matrix,
// with no register cost, and the ring starts filling before the PDL wait: weights are no kernel's
// output. With the dot products skipped (MVLLM_GEMV_STREAM_PROBE=1) the ring alone streams at
// 83-94 % of the copy rate on the 7B's matrices.
//
// Where it runs: by default Q6_K only (the 7B's LM head of a q4_0 file, the Q6_K layers of Q4_K_M),
// whose dot product is the most instruction-heavy per byte: 58 -> 79 % of the copy rate on the LM
// head. The register GEMV stays faster for Q4_0, Q8_0 and Q4_K (gemv_stream_preferred).
//
// Work split: rows in passes of 16 / wpr rows (one pass = every consumer warp busy: warp w takes
// row w / wpr of the pass and its items part w % wpr, lanes striding as in the register GEMV with
// ks = wpr), passes dealt to CTAs in contiguous ranges. The per-row sum order is the register
// GEMV's at ks = wpr: (lane items in order, warp_sum, parts 0 + 1 + ...).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv.cuh"
#include "core/tensor.h"

namespace mvllm::cuda {

struct GemvStreamPlan {
    bool ok = false;
    int wpr = 0;              // warps per row: 1, 2, 4, 8 or 16
    int items_per_lane = 0;   // items of each row a lane dots (their QX values in registers)
    int rows_per_stage = 0;   // a multiple of 16 / wpr
    int n_stages = 0;         // ring depth
    int64_t body_area = 0;    // bytes of one matrix's rows in a stage
    int64_t scale_area = 0;   // bytes of one matrix's scale records in a stage
    int64_t stage_bytes = 0;
    int64_t units = 0;        // passes of the matrix
    int n_ctas = 0;
    int64_t smem_bytes = 0;
};

// The plan for n_out rows of n_in values of `type` (both gate and up when pair), on n_sms SMs;
// ok = false where the kernel does not apply (see gemv_stream.cu). `forced` drops the size and
// balance rules (tests, MVLLM_GEMV_STREAM=2).
GemvStreamPlan gemv_stream_plan(DType type, int64_t n_in, int64_t n_out, bool pair, int n_sms, bool forced);

// The weight types it runs by default (where it measured faster than the register GEMV): Q6_K.
bool gemv_stream_preferred(DType type);

// MVLLM_GEMV_STREAM: 0 never, 1 preferred types where the plan's rules say (default), 2 every
// quantised type wherever it applies.
int gemv_stream_mode();
// Test hook: the mode for later launches (-1: back to the environment's).
void set_gemv_stream_mode(int mode);

// Launches the streaming GEMV for one token column if the mode and plan allow; false if not (the
// caller then runs the register GEMV). w2: the up matrix of a SwiGLU pair (out = silu(w x) * (w2
// x), out_type F32/F16/BF16), else null (out F32, + bias, stored or accumulated).
bool launch_gemv_stream(const TensorView& w, const TensorView* w2, const QxView& x, const float* bias, void* out,
                        DType out_type, int accumulate, cudaStream_t stream);

}  // namespace mvllm::cuda
