// Device helpers that write the QX activation format of gemv.cuh (included by the kernels that
// produce a GEMV's input: the quantiser, RMSNorm, the decode attention's output). Every writer
// gives the same bits for the same 32 values, whichever way its threads hold them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv.cuh"

namespace mvllm::cuda {

// v as stored in a tensor of type t (the value a later load of it returns).
__device__ __forceinline__ float round_to(DType t, float v) {
    if (t == DType::F16) return __half2float(__float2half_rn(v));
    if (t == DType::BF16) return __bfloat162float(__float2bfloat16_rn(v));
    return v;
}

__device__ __forceinline__ int qx_value(float v, float inv) { return max(-32767, min(32767, __float2int_rn(v * inv))); }

// Quantises a QX block (global block index row * n_in / 32 + block) held as N consecutive values
// per lane by 32 / N aligned lanes (lane % (32 / N) = which N); those lanes call it together. The
// block's maximum and its two 16-value sums are exact (a maximum, integer sums), so every N gives
// the same bits.
template <int N>
__device__ __forceinline__ void write_qx_block_n(const QxView& q, int64_t b, int lane, const float (&v)[N]) {
    static_assert(N == 1 || N == 2 || N == 4, "1, 2 or 4 values per lane");
    constexpr int kLanes = 32 / N;
    const int first = lane & ~(kLanes - 1) & 31, sub = lane & (kLanes - 1);
    const unsigned group = kLanes == 32 ? 0xffffffffu : ((1u << (kLanes & 31)) - 1) << first;
    float amax = 0.0f;
#pragma unroll
    for (int n = 0; n < N; ++n) amax = fmaxf(amax, fabsf(v[n]));
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(group, amax, o));
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    uint32_t hi = 0, lo = 0;
    int s = 0;
#pragma unroll
    for (int n = 0; n < N; ++n) {
        const int X = qx_value(v[n], inv);
        hi |= static_cast<uint32_t>(static_cast<uint8_t>(X >> 8)) << (8 * n);
        lo |= static_cast<uint32_t>(X & 0xFF) << (8 * n);
        s += X;
    }
    int8_t* h = q.hi + b * 32 + sub * N;
    uint8_t* l = q.lo + b * 32 + sub * N;
    if constexpr (N == 4) {
        *reinterpret_cast<uint32_t*>(h) = hi;
        *reinterpret_cast<uint32_t*>(l) = lo;
    } else if constexpr (N == 2) {
        *reinterpret_cast<uint16_t*>(h) = static_cast<uint16_t>(hi);
        *reinterpret_cast<uint16_t*>(l) = static_cast<uint16_t>(lo);
    } else {
        *h = static_cast<int8_t>(hi);
        *l = static_cast<uint8_t>(lo);
    }
#pragma unroll
    for (int o = 1; o < kLanes / 2; o <<= 1) s += __shfl_xor_sync(group, s, o);  // within each 16-value half
    const int s1 = __shfl_sync(group, s, first + kLanes / 2);
    if (sub == 0) q.meta[b] = make_int4(__float_as_int(amax / 32767.0f), s, s1, 0);
}

// One value per lane, the whole warp.
__device__ __forceinline__ void write_qx_block(const QxView& q, int64_t b, int lane, float v) {
    const float one[1] = {v};
    write_qx_block_n<1>(q, b, lane, one);
}

}  // namespace mvllm::cuda
