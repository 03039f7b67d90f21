// Device-side helpers shared by the CUDA kernels of every op family: element loads and stores
// in F32 / F16 / BF16, warp reductions, and the launch-error check. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "core/types.h"

namespace mvllm::cuda {

// Always-on check of a CUDA runtime call: internal invariants (a failing launch is a bug).
#define MVLLM_CUDA_CHECK(expr)                                                         \
    do {                                                                               \
        const cudaError_t mvllm_err_ = (expr);                                         \
        MVLLM_CHECK(mvllm_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(mvllm_err_); \
    } while (0)
#define MVLLM_CUDA_LAUNCH_CHECK() MVLLM_CUDA_CHECK(cudaGetLastError())

__device__ __forceinline__ float load_f(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store_f(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

// One element of an F32/F16/BF16 tensor by runtime type (for small, non-hot kernels).
__device__ __forceinline__ float load_any(const void* p, DType t, int64_t i) {
    if (t == DType::F32) return static_cast<const float*>(p)[i];
    if (t == DType::F16) return __half2float(static_cast<const __half*>(p)[i]);
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
__device__ __forceinline__ void store_any(void* p, DType t, int64_t i, float v) {
    if (t == DType::F32) static_cast<float*>(p)[i] = v;
    else if (t == DType::F16) static_cast<__half*>(p)[i] = __float2half_rn(v);
    else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a CTA of up to 1024 threads; every thread gets the result. scratch: >= 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int n_warps = (blockDim.x + 31) >> 5;
    v = lane < n_warps ? scratch[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    const int n_warps = (blockDim.x + 31) >> 5;
    v = lane < n_warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

// Threads per row of the RMSNorm kernels (one CTA per row): a decode step normalises a few rows,
// so the row's loads and block reductions must spread over many warps to stay short.
constexpr int kRmsThreads = 1024;

// 1 / rms of row x[base .. base + width) plus eps, every thread of the CTA (kRmsThreads) gets it.
// The one reduction order of every RMSNorm kernel: the plain and the QX-writing one must agree
// bit for bit (batch invariance: which one runs depends on the row count).
template <typename XT>
__device__ __forceinline__ float rms_scale(const XT* x, int64_t base, int64_t width, float eps, float* scratch) {
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
        const float v = load_f(x, base + i);
        sum += v * v;
    }
    sum = block_sum(sum, scratch);
    return rsqrtf(sum / static_cast<float>(width) + eps);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace mvllm::cuda
