// RoPE for the fused QKV projection (included by ops.cu's rope_kv_store kernel and by the QKV
// GEMV that applies it in its epilogue): one rotation, written once, so both give the same bits.
//
// The fused QKV rows come in "RoPE pairs": within each head of the q and k parts, row 2i holds
// dim i and row 2i + 1 dim i + head_dim / 2 (the half-split pair that one rotation mixes); the v
// rows keep their order (Decoder::create permutes the stacked matrix and bias that way).
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/device_batch.h"
#include "core/tensor.h"

namespace mvllm::cuda {

// (cos, sin) of position pos at frequency inv_freq, the angle in double (large positions).
__device__ __forceinline__ float2 rope_cos_sin(int32_t pos, float inv_freq) {
    double sn, cs;
    sincos(static_cast<double>(pos) * inv_freq, &sn, &cs);
    return make_float2(static_cast<float>(cs), static_cast<float>(sn));
}

// The rotation of the pair (x0, x1) = (dim i, dim i + half).
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, float2 cs) {
    return make_float2(__fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y)),
                       __fadd_rn(__fmul_rn(x1, cs.x), __fmul_rn(x0, cs.y)));
}

// Where the QKV outputs of one token go: q [n_tokens][q_dim] f32 rotated, K (rotated) and V into
// the token's cache slot.
struct QkvRopeOut {
    float* q;
    const int32_t* positions;     // [n_tokens]
    const float* inv_freq;        // [head_dim / 2]
    const int64_t* slot_mapping;  // [n_tokens]
    void* kc;
    void* vc;
    DType cache_type;
    int32_t block_size, n_heads, n_kv_heads, head_dim;

    // The head dim of paired row o (even, in the q or the k part): dim i of the pair (i, i + half).
    __device__ __forceinline__ int32_t pair_dim(int64_t o) const {
        const int64_t rel = o < static_cast<int64_t>(n_heads) * head_dim ? o : o - static_cast<int64_t>(n_heads) * head_dim;
        return static_cast<int32_t>(rel % head_dim) / 2;
    }
    // Paired rows (o, o + 1) of token t (o even, in the q or the k part), rotated: r = (dim i, dim
    // i + half). slot: slot_mapping[t] (read by the caller, which may read it early).
    __device__ __forceinline__ void store_rotated(int64_t o, int t, int64_t slot, float2 r) const {
        const int32_t q_dim = n_heads * head_dim, half = head_dim / 2;
        const bool is_q = o < q_dim;
        const int64_t rel = is_q ? o : o - q_dim;
        const int32_t h = static_cast<int32_t>(rel / head_dim), i = static_cast<int32_t>(rel % head_dim) / 2;
        if (is_q) {
            float* dst = q + static_cast<int64_t>(t) * q_dim + static_cast<int64_t>(h) * head_dim;
            dst[i] = r.x;
            dst[i + half] = r.y;
        } else {
            const int64_t base = cache_row(slot, h) * head_dim;
            store_any(kc, cache_type, base + i, r.x);
            store_any(kc, cache_type, base + i + half, r.y);
        }
    }
    // One v row o (in the v part) of the token in cache slot `slot`.
    __device__ __forceinline__ void store_v(int64_t o, int64_t slot, float v) const {
        const int64_t rel = o - static_cast<int64_t>(n_heads + n_kv_heads) * head_dim;
        store_any(vc, cache_type, cache_row(slot, static_cast<int32_t>(rel / head_dim)) * head_dim + rel % head_dim, v);
    }
    // The cache row of KV head kh in cache slot `slot`.
    __device__ __forceinline__ int64_t cache_row(int64_t slot, int32_t kh) const {
        const int64_t block = slot / block_size, offset = slot % block_size;
        return (block * n_kv_heads + kh) * block_size + offset;
    }
};

// The destinations of a step's QKV outputs (ops.cu).
QkvRopeOut qkv_rope_out(const DeviceBatch& batch, const DeviceKvLayer& kv, int32_t n_heads, const float* inv_freq,
                        const TensorView& q);

}  // namespace mvllm::cuda
