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

}  // namespace mvllm::cuda
