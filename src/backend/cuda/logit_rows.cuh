// What the kernels that read whole logit rows share (the argmax, the greedy logprob, the row
// scores): a value's 64-bit key in (value, then lower index) order, and the online (max, sum of
// exponentials) merge.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace mvllm::cuda {

// A float's order key (common.cuh) packed above the complement of its index, so that one 64-bit
// atomicMax keeps the maximum and, on ties, the first index. NaN takes key 0, below every number
// (the host's argmax skips NaN; a row of NaN alone gives its first index).
__device__ __forceinline__ unsigned long long argmax_key(float v, uint32_t i) {
    return (static_cast<unsigned long long>(isnan(v) ? 0u : order_key(v)) << 32) | (0xFFFFFFFFu - i);
}

// (m, s) merged with (m2, s2): the running maximum and the sum of exp(x - m) over both.
__device__ __forceinline__ void merge_max_sum(float& m, float& s, float m2, float s2) {
    const float m_new = fmaxf(m, m2);
    s = (m == -INFINITY ? 0.0f : s * __expf(m - m_new)) + (m2 == -INFINITY ? 0.0f : s2 * __expf(m2 - m_new));
    m = m_new;
}

}  // namespace mvllm::cuda
