// Internal to the CPU attention: the small row kernels the three variants are built from, one
// table per ISA (scalar reference, AVX2+FMA+F16C). All matrices are row-major f32 with explicit
// row strides in elements; nothing here knows about blocks, heads or batches.
#pragma once

#include <cstdint>

namespace mvllm {

struct AttentionKernels {
    const char* name;
    // dst[n] f32 = src[n] f16
    void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
    // dst[n] f16 = src[n] f32 (round to nearest even)
    void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
    // Reads q [n_q][d] (contiguous rows) and k [n_k] rows of d at stride k_stride; writes
    // s[r * s_stride + j] = dot(q_r, k_j) for r < n_q, j < n_k.
    void (*scores)(const float* q, int64_t n_q, int64_t d, const float* k, int64_t k_stride,
                   int64_t n_k, float* s, int64_t s_stride);
    // Largest of s[0..n), n >= 1.
    float (*max)(const float* s, int64_t n);
    // s[j] = exp(s[j] - m) for j < n; returns the sum of the new values.
    float (*exp_sum)(float* s, int64_t n, float m);
    // Reads p [n_k] and v [n_k] rows of d at stride v_stride; o[d] += sum_j p[j] * v_j.
    void (*pv)(const float* p, int64_t n_k, const float* v, int64_t v_stride, int64_t d, float* o);
    // x[n] *= a
    void (*scale)(float* x, int64_t n, float a);
};

const AttentionKernels& attention_kernels_scalar();
// The AVX2 table (needs d % 8 == 0 for scores/pv), or nullptr when this build has none.
const AttentionKernels* attention_kernels_avx2();

}  // namespace mvllm
