// Device dequantisation of GGUF blocks, 32 values at a time (a "chunk"), in the device layout of
// weight_layout.h (every quantised type split into a 16-byte aligned body plane and a plane of
// scale records: the f16 d, or Q4_K's 16-byte d, dmin, scales[12]). Q8_0 and Q4_0 blocks are one
// chunk; Q4_K and Q6_K super-blocks of 256 values are eight. Block layouts: core/types.h. Device
// helpers only.
#pragma once

#include "backend/cuda/common.cuh"

namespace mvllm::cuda {

constexpr int kChunk = 32;

__device__ __forceinline__ float load_half_bits(const uint8_t* p) {
    return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

template <DType T> struct QuantTraits;
// kBody: bytes of one block in the body plane, kScale: in the scale plane (weight_layout.h).
template <> struct QuantTraits<DType::Q8_0> { static constexpr int kBytes = 34, kValues = 32, kBody = 32, kScale = 2; };
template <> struct QuantTraits<DType::Q4_0> { static constexpr int kBytes = 18, kValues = 32, kBody = 16, kScale = 2; };
template <> struct QuantTraits<DType::Q4_K> { static constexpr int kBytes = 144, kValues = 256, kBody = 128, kScale = 16; };
template <> struct QuantTraits<DType::Q6_K> { static constexpr int kBytes = 210, kValues = 256, kBody = 208, kScale = 2; };

// A quantised matrix as uploaded (weight_layout.h): block i of the matrix (row-major block order)
// has its body at body + i * kBody and its scale record at scales + i * kScale.
struct QuantMatrix {
    const uint8_t* body = nullptr;
    const uint8_t* scales = nullptr;
    int64_t blocks_per_row = 0;
};

// The device view of an uploaded quantised weight of n_rows rows of n_values each.
template <DType T>
__host__ __device__ inline QuantMatrix quant_matrix(const void* data, int64_t n_values, int64_t n_rows) {
    QuantMatrix m;
    m.body = static_cast<const uint8_t*>(data);
    m.blocks_per_row = n_values / QuantTraits<T>::kValues;
    m.scales = m.body + m.blocks_per_row * n_rows * QuantTraits<T>::kBody;
    return m;
}

// Writes the 32 values of chunk c of row `row` into w.
template <DType T>
__device__ __forceinline__ void dequant_chunk(const QuantMatrix& m, int64_t row, int64_t c, float (&w)[kChunk]);

template <>
__device__ __forceinline__ void dequant_chunk<DType::Q8_0>(const QuantMatrix& m, int64_t row, int64_t c,
                                                           float (&w)[kChunk]) {
    const int64_t i = row * m.blocks_per_row + c;
    const float d = load_half_bits(m.scales + 2 * i);
    const uint4* q4 = reinterpret_cast<const uint4*>(m.body + i * 32);
    const uint4 a = q4[0], b = q4[1];
    const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 32; ++k) w[k] = d * static_cast<float>(static_cast<int8_t>(words[k >> 2] >> (8 * (k & 3))));
}

template <>
__device__ __forceinline__ void dequant_chunk<DType::Q4_0>(const QuantMatrix& m, int64_t row, int64_t c,
                                                           float (&w)[kChunk]) {
    const int64_t i = row * m.blocks_per_row + c;
    const float d = load_half_bits(m.scales + 2 * i);
    const uint4 v = *reinterpret_cast<const uint4*>(m.body + i * 16);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int q = (words[k >> 2] >> (8 * (k & 3))) & 0xFF;
        w[k] = d * static_cast<float>((q & 0xF) - 8);
        w[k + 16] = d * static_cast<float>((q >> 4) - 8);
    }
}

template <>
__device__ __forceinline__ void dequant_chunk<DType::Q4_K>(const QuantMatrix& m, int64_t row, int64_t c,
                                                           float (&w)[kChunk]) {
    const int64_t i = row * m.blocks_per_row + (c >> 3);
    const uint8_t* head = m.scales + i * 16;  // d, dmin, scales[12]
    const int j = static_cast<int>(c & 7);    // sub-block
    const float d = load_half_bits(head);
    const float dmin = load_half_bits(head + 2);
    const uint8_t* s = head + 4;
    int sc, mn;
    if (j < 4) {
        sc = s[j] & 63;
        mn = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    const float d1 = d * sc, m1 = dmin * mn;
    // Sub-blocks 2g and 2g+1 share the 32 bytes of group g (low then high nibbles), whose two
    // halves the device body keeps 64 bytes apart (weight_layout.h).
    const uint8_t* b = m.body + i * 128 + 16 * (j >> 1);
    const uint4 v0 = *reinterpret_cast<const uint4*>(b), v1 = *reinterpret_cast<const uint4*>(b + 64);
    const uint32_t words[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const int q = (words[k >> 2] >> (8 * (k & 3) + shift)) & 0xF;
        w[k] = d1 * static_cast<float>(q) - m1;
    }
}

template <>
__device__ __forceinline__ void dequant_chunk<DType::Q6_K>(const QuantMatrix& m, int64_t row, int64_t c,
                                                           float (&w)[kChunk]) {
    const int64_t i = row * m.blocks_per_row + (c >> 3);
    const uint8_t* b = m.body + i * 208;
    const int j = static_cast<int>(c & 7);
    const int half = j >> 2, k = j & 3;
    const float d = load_half_bits(m.scales + 2 * i);
    const uint4* qlp = reinterpret_cast<const uint4*>(b + 64 * half + 32 * (k & 1));
    const uint4* qhp = reinterpret_cast<const uint4*>(b + 128 + 32 * half);
    const uint4 l0 = qlp[0], l1 = qlp[1], h0 = qhp[0], h1 = qhp[1];
    const uint32_t ql[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
    const uint32_t qh[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * half);
    const float d0 = d * sc[2 * k], d1 = d * sc[2 * k + 1];
    const int lshift = (k >> 1) * 4, hshift = 2 * k;
#pragma unroll
    for (int e = 0; e < 32; ++e) {
        const int lo = (ql[e >> 2] >> (8 * (e & 3) + lshift)) & 0xF;
        const int hi = (qh[e >> 2] >> (8 * (e & 3) + hshift)) & 3;
        w[e] = (e < 16 ? d0 : d1) * static_cast<float>((lo | (hi << 4)) - 32);
    }
}

}  // namespace mvllm::cuda
