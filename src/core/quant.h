// Reference (scalar) quantisers and dequantisers for the block formats described in core/types.h.
// Dequantisation is bit-exact to the GGUF layouts; quantisers minimise the error of each block.
#pragma once

#include <cstdint>

namespace mvllm {

void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void dequantize_row_q4_K(const void* src, float* dst, int64_t n);
void dequantize_row_q5_K(const void* src, float* dst, int64_t n);
void dequantize_row_q6_K(const void* src, float* dst, int64_t n);
void dequantize_row_q8_K(const void* src, float* dst, int64_t n);

void quantize_row_q8_0(const float* src, void* dst, int64_t n);
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
void quantize_row_q4_K(const float* src, void* dst, int64_t n);
void quantize_row_q5_K(const float* src, void* dst, int64_t n);
void quantize_row_q6_K(const float* src, void* dst, int64_t n);
void quantize_row_q8_K(const float* src, void* dst, int64_t n);

// v rounded to the nearest integer and clamped to [lo, hi], in float before the conversion: a
// quantiser's v can be +-inf (the inverse of a denormal block scale) or NaN (0 * inf, which
// quantises to 0), and converting those to int is undefined.
int round_clamp(float v, int lo, int hi);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's packed scales[12].
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
    if (j < 4) {
        *scale = q[j] & 63;
        *min = q[j + 4] & 63;
    } else {
        *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

}  // namespace mvllm
