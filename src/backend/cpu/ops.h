// Element-wise and per-row CPU ops of the decoder. Activations are F32 or F16 rows
// (ne = {width, n_rows}); each op converts on load/store so the math is always f32.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mvllm::cpu {

// Row i of x as f32 into dst[width]; and the reverse.
void load_row(const TensorView& x, int64_t row, float* dst);
void store_row(const TensorView& x, int64_t row, const float* src);

void embed(ThreadPool& pool, const TensorView& table, const int32_t* ids, const TensorView& out);
void rms_norm(ThreadPool& pool, const TensorView& x, const TensorView& weight, float eps,
              const TensorView& out);
void add_bias(const TensorView& x, const TensorView& bias);
// positions[n_rows]; inv_freq[head_dim / 2]; half-split pairing (i, i + head_dim / 2).
void rope(ThreadPool& pool, const TensorView& x, int32_t n_heads, int32_t head_dim,
          const int32_t* positions, const float* inv_freq);
void silu_mul(ThreadPool& pool, const TensorView& gate, const TensorView& up, const TensorView& out);
void add(const TensorView& acc, const TensorView& x);

}  // namespace mvllm::cpu
