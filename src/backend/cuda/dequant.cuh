// Device dequantisation of GGUF blocks, 32 values at a time (a "chunk"): the unit every CUDA
// kernel on quantised weights works in. Q8_0 and Q4_0 blocks are one chunk; Q4_K and Q6_K
// super-blocks of 256 values are eight. Block layouts: core/types.h. Device helpers only.
#pragma once

#include "backend/cuda/common.cuh"

namespace mvllm::cuda {

constexpr int kChunk = 32;

// n bytes (even) from a 2-byte aligned address, loaded as 16-bit words.
template <int N>
__device__ __forceinline__ void load_bytes_a2(const uint8_t* p, uint8_t (&out)[N]) {
    const uint16_t* w = reinterpret_cast<const uint16_t*>(p);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        const uint16_t v = w[i];
        out[2 * i] = static_cast<uint8_t>(v & 0xff);
        out[2 * i + 1] = static_cast<uint8_t>(v >> 8);
    }
}

__device__ __forceinline__ float load_half_bits(const uint8_t* p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

template <DType T> struct QuantTraits;
template <> struct QuantTraits<DType::Q8_0> { static constexpr int kBytes = 34, kValues = 32; };
template <> struct QuantTraits<DType::Q4_0> { static constexpr int kBytes = 18, kValues = 32; };
template <> struct QuantTraits<DType::Q4_K> { static constexpr int kBytes = 144, kValues = 256; };
template <> struct QuantTraits<DType::Q6_K> { static constexpr int kBytes = 210, kValues = 256; };

// Writes the 32 values of chunk c of a quantised row (row: the row's first block) into w.
template <DType T>
__device__ __forceinline__ void dequant_chunk(const uint8_t* row, int64_t c, float (&w)[kChunk]);

template <>
__device__ __forceinline__ void dequant_chunk<DType::Q8_0>(const uint8_t* row, int64_t c, float (&w)[kChunk]) {
    const uint8_t* b = row + c * 34;
    const float d = load_half_bits(b);
    uint8_t q[32];
    load_bytes_a2(b + 2, q);
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = d * static_cast<float>(static_cast<int8_t>(q[i]));
}

template <>
__device__ __forceinline__ void dequant_chunk<DType::Q4_0>(const uint8_t* row, int64_t c, float (&w)[kChunk]) {
    const uint8_t* b = row + c * 18;
    const float d = load_half_bits(b);
    uint8_t q[16];
    load_bytes_a2(b + 2, q);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        w[i] = d * static_cast<float>((q[i] & 0xF) - 8);
        w[i + 16] = d * static_cast<float>((q[i] >> 4) - 8);
    }
}

template <>
__device__ __forceinline__ void dequant_chunk<DType::Q4_K>(const uint8_t* row, int64_t c, float (&w)[kChunk]) {
    const uint8_t* b = row + (c >> 3) * 144;  // super-blocks are 16-byte aligned in a row
    const int j = static_cast<int>(c & 7);    // sub-block
    const float d = load_half_bits(b);
    const float dmin = load_half_bits(b + 2);
    const uint8_t* s = b + 4;
    int sc, m;
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    const float d1 = d * sc, m1 = dmin * m;
    // Sub-blocks 2g and 2g+1 share qs[32g .. 32g+31]: low then high nibbles.
    const uint4* qs = reinterpret_cast<const uint4*>(b + 16 + 32 * (j >> 1));
    const uint4 v0 = qs[0], v1 = qs[1];
    const uint32_t words[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int q = (words[i >> 2] >> (8 * (i & 3) + shift)) & 0xF;
        w[i] = d1 * static_cast<float>(q) - m1;
    }
}

template <>
__device__ __forceinline__ void dequant_chunk<DType::Q6_K>(const uint8_t* row, int64_t c, float (&w)[kChunk]) {
    const uint8_t* b = row + (c >> 3) * 210;
    const int j = static_cast<int>(c & 7);
    const int half = j >> 2, k = j & 3;
    const float d = load_half_bits(b + 208);
    uint8_t ql[32], qh[32];
    load_bytes_a2(b + 64 * half + 32 * (k & 1), ql);
    load_bytes_a2(b + 128 + 32 * half, qh);
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    const float d0 = d * sc[2 * k], d1 = d * sc[2 * k + 1];
    const int lshift = (k >> 1) * 4, hshift = 2 * k;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int q = (((ql[i] >> lshift) & 0xF) | (((qh[i] >> hshift) & 3) << 4)) - 32;
        w[i] = (i < 16 ? d0 : d1) * static_cast<float>(q);
    }
}

}  // namespace mvllm::cuda
