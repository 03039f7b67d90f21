// Device helpers that write the QX activation format of gemv.cuh (included by the kernels that
// produce a GEMV's input: the quantiser, RMSNorm, the decode attention's output). Every writer
// gives the same bits for the same 32 values, whichever way its threads hold them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/mma_ptx.cuh"

namespace mvllm::cuda {

// v as stored in a tensor of type t (the value a later load of it returns).
__device__ __forceinline__ float round_to(DType t, float v) {
    if (t == DType::F16) return __half2float(__float2half_rn(v));
    if (t == DType::BF16) return __bfloat162float(__float2bfloat16_rn(v));
    return v;
}

__device__ __forceinline__ int qx_value(float v, float inv) { return max(-32767, min(32767, __float2int_rn(v * inv))); }

// Quantises value v of lane `lane` into QX block b (global block index row * n_in / 32 + block);
// the whole warp calls it.
__device__ __forceinline__ void write_qx_block(const QxView& q, int64_t b, int lane, float v) {
    const float amax = warp_max(fabsf(v));
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    const int X = qx_value(v, inv);
    q.hi[b * 32 + lane] = static_cast<int8_t>(X >> 8);
    q.lo[b * 32 + lane] = static_cast<uint8_t>(X & 0xFF);
    int s = X;
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);  // within each 16-lane half
    const int s1 = __shfl_sync(0xffffffffu, s, 16);
    if (lane == 0) q.meta[b] = make_int4(__float_as_int(amax / 32767.0f), s, s1, 0);
}

// The same for a block held as four values per lane by eight aligned lanes (lane & 7 = which
// four); those eight lanes call it together.
__device__ __forceinline__ void write_qx_block4(const QxView& q, int64_t b, int lane, float4 v) {
    const unsigned group = 0xFFu << (lane & 24);
    const int sub = lane & 7;
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(group, amax, o));
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    const int X[4] = {qx_value(v.x, inv), qx_value(v.y, inv), qx_value(v.z, inv), qx_value(v.w, inv)};
    char4 hi;
    uchar4 lo;
    hi.x = static_cast<int8_t>(X[0] >> 8), hi.y = static_cast<int8_t>(X[1] >> 8);
    hi.z = static_cast<int8_t>(X[2] >> 8), hi.w = static_cast<int8_t>(X[3] >> 8);
    lo.x = static_cast<uint8_t>(X[0] & 0xFF), lo.y = static_cast<uint8_t>(X[1] & 0xFF);
    lo.z = static_cast<uint8_t>(X[2] & 0xFF), lo.w = static_cast<uint8_t>(X[3] & 0xFF);
    reinterpret_cast<char4*>(q.hi + b * 32)[sub] = hi;
    reinterpret_cast<uchar4*>(q.lo + b * 32)[sub] = lo;
    int s = X[0] + X[1] + X[2] + X[3];
    s += __shfl_xor_sync(group, s, 1);  // values 0-15 are lanes 0-3 of the eight, 16-31 lanes 4-7
    s += __shfl_xor_sync(group, s, 2);
    const int s1 = __shfl_sync(group, s, (lane & 24) + 4);
    if (sub == 0) q.meta[b] = make_int4(__float_as_int(amax / 32767.0f), s, s1, 0);
}

// ---- QxView::norm made by each CTA of a GEMV (gemv.cu's kNorm kernels, one row) ----
// Shared memory: the QX (qx_bytes(n_in, 1), meta first as in qx_view), then the row x as F32.
// Reads: norm.x, norm.weight (F32). Writes: the shared QX; from the CTA of blockIdx.x 0 also the
// view's own buffers and norm.xn, as launch_rms_norm_qx would. The values, the scale and every QX
// field are those of rms_norm_qx_kernel, bit for bit.

// Before the PDL wait: the norm weight (no kernel's output) into L1, one 128-byte line per block.
__device__ __forceinline__ void norm_prefetch(const QxView& x) {
    const auto* w = static_cast<const float*>(x.norm.weight);
    for (int64_t b = threadIdx.x; b < x.n_in / 32; b += blockDim.x) prefetch_l1(w + b * 32);
}

// rms_scale's result (the same bits) from a CTA of kThreads threads, x already in shared memory:
// thread j * kThreads + threadIdx.x of rms_scale's kRmsThreads is played by this thread, its warp
// reduces the played warps as they would, and the 32 warp sums meet in the same order.
template <int kThreads>
__device__ __forceinline__ float rms_scale_shared(const float* xs, int64_t width, float eps, float* scratch) {
    static_assert(kThreads % 32 == 0 && kRmsThreads % kThreads == 0, "threads played per thread");
    constexpr int kPlay = kRmsThreads / kThreads, kWarps = kThreads / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float sum[kPlay];
#pragma unroll
    for (int j = 0; j < kPlay; ++j) {
        sum[j] = 0.0f;
        for (int64_t i = j * kThreads + threadIdx.x; i < width; i += kRmsThreads) {
            const float v = xs[i];
            sum[j] += v * v;
        }
    }
#pragma unroll
    for (int j = 0; j < kPlay; ++j) sum[j] = warp_sum(sum[j]);
    if (lane == 0)
#pragma unroll
        for (int j = 0; j < kPlay; ++j) scratch[j * kWarps + warp] = sum[j];
    __syncthreads();
    return rsqrtf(warp_sum(scratch[lane]) / static_cast<float>(width) + eps);
}

// After the PDL wait: the whole norm, one 32-value block per thread (no shuffles: a thread holds
// its block's maximum and sums itself). Returns the view of the shared QX.
template <int kThreads>
__device__ __forceinline__ QxView norm_qx_shared(const QxView& x, uint8_t* smem) {
    __shared__ float scratch[32];
    const QxNorm& n = x.norm;
    const int64_t width = x.n_in, n_blocks = width / 32;
    QxView s;
    s.meta = reinterpret_cast<int4*>(smem);
    s.hi = reinterpret_cast<int8_t*>(smem + n_blocks * sizeof(int4));
    s.lo = reinterpret_cast<uint8_t*>(s.hi + width);
    s.n_in = width;
    s.n_rows = 1;
    float* xs = reinterpret_cast<float*>(s.lo + width);
    for (int64_t i = threadIdx.x; i < width / 4; i += kThreads) cp_async16(xs + 4 * i, n.x + 4 * i, true);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    const float scale = rms_scale_shared<kThreads>(xs, width, n.eps, scratch);
    const auto* w = static_cast<const float*>(n.weight);
    const bool first_cta = blockIdx.x == 0;
    for (int64_t b = threadIdx.x; b < n_blocks; b += kThreads) {
        const int rot = threadIdx.x & 7;  // the 16-byte pieces in a rotated order: no bank conflicts
        auto values = [&](int k) {        // values 4k .. 4k + 3 of the block, as rms_norm_qx_kernel
            const float4 xv = reinterpret_cast<const float4*>(xs + b * 32)[k];
            const float4 wv = __ldg(reinterpret_cast<const float4*>(w + b * 32) + k);
            return make_float4(round_to(n.xn_type, xv.x * scale * wv.x), round_to(n.xn_type, xv.y * scale * wv.y),
                               round_to(n.xn_type, xv.z * scale * wv.z), round_to(n.xn_type, xv.w * scale * wv.w));
        };
        float amax = 0.0f;
#pragma unroll 2
        for (int kk = 0; kk < 8; ++kk) {
            const float4 v = values((kk + rot) & 7);
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        }
        const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
        int sums[2] = {0, 0};
#pragma unroll 2
        for (int kk = 0; kk < 8; ++kk) {
            const int k = (kk + rot) & 7;
            const float4 v = values(k);
            const int X[4] = {qx_value(v.x, inv), qx_value(v.y, inv), qx_value(v.z, inv), qx_value(v.w, inv)};
            uint32_t hi = 0, lo = 0;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                hi |= static_cast<uint32_t>((X[e] >> 8) & 0xFF) << (8 * e);
                lo |= static_cast<uint32_t>(X[e] & 0xFF) << (8 * e);
            }
            const int64_t at = b * 32 + 4 * k;
            reinterpret_cast<uint32_t*>(s.hi + at)[0] = hi;
            reinterpret_cast<uint32_t*>(s.lo + at)[0] = lo;
            (k < 4 ? sums[0] : sums[1]) += X[0] + X[1] + X[2] + X[3];
            if (first_cta) {
                reinterpret_cast<uint32_t*>(x.hi + at)[0] = hi;
                reinterpret_cast<uint32_t*>(x.lo + at)[0] = lo;
                store_any(n.xn, n.xn_type, at, v.x);
                store_any(n.xn, n.xn_type, at + 1, v.y);
                store_any(n.xn, n.xn_type, at + 2, v.z);
                store_any(n.xn, n.xn_type, at + 3, v.w);
            }
        }
        const int4 meta = make_int4(__float_as_int(amax / 32767.0f), sums[0], sums[1], 0);
        s.meta[b] = meta;
        if (first_cta) x.meta[b] = meta;
    }
    __syncthreads();
    return s;
}

}  // namespace mvllm::cuda
