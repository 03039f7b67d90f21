// The 32-value block formats (Q8_0, Q4_0) and the Q8_K activation format. The K-quant weight
// formats (Q4_K, Q5_K, Q6_K) live in quant_k.cpp.
//
// Dequantisers evaluate each value with the same float operations, in the same order, as the
// reference GGUF readers (so results match bit for bit). Quantisers round to nearest.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/quant.h"
#include "core/status.h"
#include "core/types.h"

namespace mvllm {
namespace {

// The value of largest magnitude in x[0..n), keeping its sign (0 for an all-zero range).
float signed_extreme(const float* x, int n) {
    float amax = 0.0f, extreme = 0.0f;
    for (int i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        if (a > amax) {
            amax = a;
            extreme = x[i];
        }
    }
    return extreme;
}


}  // namespace

int round_clamp(float v, int lo, int hi) {
    if (std::isnan(v)) return 0;
    return static_cast<int>(std::nearbyint(std::clamp(v, static_cast<float>(lo), static_cast<float>(hi))));
}

// ---- Q8_0: x = d * q, q in [-127, 127] ----------------------------------------------------------

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
    MVLLM_CHECK(n % QK8_0 == 0) << "q8_0 row of " << n;
    const auto* b = static_cast<const BlockQ8_0*>(src);
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; ++j) dst[i * QK8_0 + j] = b[i].qs[j] * d;
    }
}

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
    MVLLM_CHECK(n % QK8_0 == 0) << "q8_0 row of " << n;
    auto* b = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float* x = src + i * QK8_0;
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_f16(d);
        for (int j = 0; j < QK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(round_clamp(x[j] * id, -127, 127));
    }
}

// ---- Q4_0: x = d * (nibble - 8); low nibbles are values 0..15, high nibbles 16..31 --------------

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
    MVLLM_CHECK(n % QK4_0 == 0) << "q4_0 row of " << n;
    const auto* b = static_cast<const BlockQ4_0*>(src);
    constexpr int kHalf = QK4_0 / 2;
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const float d = f16_to_f32(b[i].d);
        float* y = dst + i * QK4_0;
        for (int j = 0; j < kHalf; ++j) {
            const int lo = (b[i].qs[j] & 0x0F) - 8;
            const int hi = (b[i].qs[j] >> 4) - 8;
            y[j] = lo * d;
            y[j + kHalf] = hi * d;
        }
    }
}

// The signed extreme value maps to -8 (the one level without a positive mirror), so the block uses
// all 16 levels; the opposite end is clamped to 15.
void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
    MVLLM_CHECK(n % QK4_0 == 0) << "q4_0 row of " << n;
    auto* b = static_cast<BlockQ4_0*>(dst);
    constexpr int kHalf = QK4_0 / 2;
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const float* x = src + i * QK4_0;
        const float d = signed_extreme(x, QK4_0) / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_f16(d);
        for (int j = 0; j < kHalf; ++j) {
            const int lo = round_clamp(x[j] * id + 8.0f, 0, 15);
            const int hi = round_clamp(x[j + kHalf] * id + 8.0f, 0, 15);
            b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
    }
}

// ---- Q8_K: x = d * q with a float d; bsums[k] = sum of qs[16k .. 16k+15] -------------------------

void dequantize_row_q8_K(const void* src, float* dst, int64_t n) {
    MVLLM_CHECK(n % QK_K == 0) << "q8_K row of " << n;
    const auto* b = static_cast<const BlockQ8_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        for (int j = 0; j < QK_K; ++j) dst[i * QK_K + j] = b[i].d * b[i].qs[j];
    }
}

void quantize_row_q8_K(const float* src, void* dst, int64_t n) {
    MVLLM_CHECK(n % QK_K == 0) << "q8_K row of " << n;
    auto* b = static_cast<BlockQ8_K*>(dst);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float* x = src + i * QK_K;
        const float d = signed_extreme(x, QK_K) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = d;
        for (int j = 0; j < QK_K; ++j) b[i].qs[j] = static_cast<int8_t>(round_clamp(x[j] * id, -127, 127));
        for (int k = 0; k < QK_K / 16; ++k) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += b[i].qs[k * 16 + j];
            b[i].bsums[k] = static_cast<int16_t>(sum);
        }
    }
}

}  // namespace mvllm
