// Scalar reference dot products: one weight row (n values) against 1..kMaxTokenTile activation
// rows. Integer products are summed exactly in int32 per block, then scaled in f32: the SIMD
// kernels do the same sums, so they agree with these up to f32 summation order.
#include <cstring>

#include "backend/cpu/vec_dot.h"
#include "core/half.h"
#include "core/quant.h"

namespace mvllm::scalar {
namespace {

template <typename RowDot>
inline void for_each_token(const void* x, size_t x_row_bytes, int n_x, float* out, RowDot row_dot) {
    for (int j = 0; j < n_x; ++j) out[j] = row_dot(static_cast<const char*>(x) + j * x_row_bytes);
}

// The 6-bit scales sc[8] and mins m[8] of a Q4_K / Q5_K block.
inline void unpack_scales_k4(const uint8_t* packed, uint8_t* sc, uint8_t* m) {
    for (int j = 0; j < 8; ++j) get_scale_min_k4(j, packed, &sc[j], &m[j]);
}

}  // namespace

void quantize_f32(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, n * sizeof(float)); }

void quantize_act_q8_0(const float* src, void* dst, int64_t n) {
    quantize_row_q8_0(src, dst, n);
    finish_act_q8_0(dst, n);
}

// w: [n] f32, x: [n] f32.
void dot_f32(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    const auto* wf = static_cast<const float*>(w);
    for_each_token(x, x_row_bytes, n_x, out, [&](const void* xr) {
        const auto* xf = static_cast<const float*>(xr);
        float sum = 0.0f;
        for (int64_t i = 0; i < n; ++i) sum += wf[i] * xf[i];
        return sum;
    });
}

// w: [n] f16, x: [n] f32.
void dot_f16(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    const auto* wh = static_cast<const f16_t*>(w);
    for_each_token(x, x_row_bytes, n_x, out, [&](const void* xr) {
        const auto* xf = static_cast<const float*>(xr);
        float sum = 0.0f;
        for (int64_t i = 0; i < n; ++i) sum += f16_to_f32(wh[i]) * xf[i];
        return sum;
    });
}

// w: [n] bf16, x: [n] f32.
void dot_bf16(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    const auto* wh = static_cast<const bf16_t*>(w);
    for_each_token(x, x_row_bytes, n_x, out, [&](const void* xr) {
        const auto* xf = static_cast<const float*>(xr);
        float sum = 0.0f;
        for (int64_t i = 0; i < n; ++i) sum += bf16_to_f32(wh[i]) * xf[i];
        return sum;
    });
}

// w: [n/32] BlockQ8_0, x: [n/32] BlockQ8_0.
void dot_q8_0(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    const auto* wb = static_cast<const BlockQ8_0*>(w);
    for_each_token(x, x_row_bytes, n_x, out, [&](const void* xr) {
        const auto* xb = static_cast<const BlockQ8_0*>(xr);
        float sum = 0.0f;
        for (int64_t b = 0; b < n / QK8_0; ++b) {
            int32_t isum = 0;
            for (int i = 0; i < QK8_0; ++i) isum += wb[b].qs[i] * xb[b].qs[i];
            sum += f16_to_f32(wb[b].d) * f16_to_f32(xb[b].d) * static_cast<float>(isum);
        }
        return sum;
    });
}

// w: [n/32] BlockQ4_0, x: [n/32] BlockQ8_0.
void dot_q4_0(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    const auto* wb = static_cast<const BlockQ4_0*>(w);
    for_each_token(x, x_row_bytes, n_x, out, [&](const void* xr) {
        const auto* xb = static_cast<const BlockQ8_0*>(xr);
        float sum = 0.0f;
        for (int64_t b = 0; b < n / QK4_0; ++b) {
            int32_t isum = 0;
            for (int i = 0; i < QK4_0 / 2; ++i) {
                isum += ((wb[b].qs[i] & 0x0F) - 8) * xb[b].qs[i];
                isum += ((wb[b].qs[i] >> 4) - 8) * xb[b].qs[i + QK4_0 / 2];
            }
            sum += f16_to_f32(wb[b].d) * f16_to_f32(xb[b].d) * static_cast<float>(isum);
        }
        return sum;
    });
}

// w: [n/256] BlockQ4_K, x: [n/256] BlockQ8_K. Sub-block s (32 values) of a 64-value group g:
// low nibbles of qs[32g..32g+32) for s = 2g, high nibbles for s = 2g+1.
void dot_q4_K(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    const auto* wb = static_cast<const BlockQ4_K*>(w);
    for_each_token(x, x_row_bytes, n_x, out, [&](const void* xr) {
        const auto* xb = static_cast<const BlockQ8_K*>(xr);
        float sum = 0.0f;
        for (int64_t b = 0; b < n / QK_K; ++b) {
            uint8_t sc[8], m[8];
            unpack_scales_k4(wb[b].scales, sc, m);
            int32_t isum = 0, msum = 0;
            for (int g = 0; g < 4; ++g) {
                int32_t lo = 0, hi = 0;
                for (int l = 0; l < 32; ++l) {
                    lo += (wb[b].qs[32 * g + l] & 0x0F) * xb[b].qs[64 * g + l];
                    hi += (wb[b].qs[32 * g + l] >> 4) * xb[b].qs[64 * g + 32 + l];
                }
                isum += sc[2 * g] * lo + sc[2 * g + 1] * hi;
            }
            for (int s = 0; s < 8; ++s) msum += m[s] * (xb[b].bsums[2 * s] + xb[b].bsums[2 * s + 1]);
            sum += xb[b].d * (f16_to_f32(wb[b].d) * isum - f16_to_f32(wb[b].dmin) * msum);
        }
        return sum;
    });
}

// w: [n/256] BlockQ5_K, x: [n/256] BlockQ8_K. As Q4_K; bit 2g (low) / 2g+1 (high) of qh[l] is
// the fifth bit of value l of sub-block 2g / 2g+1.
void dot_q5_K(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    const auto* wb = static_cast<const BlockQ5_K*>(w);
    for_each_token(x, x_row_bytes, n_x, out, [&](const void* xr) {
        const auto* xb = static_cast<const BlockQ8_K*>(xr);
        float sum = 0.0f;
        for (int64_t b = 0; b < n / QK_K; ++b) {
            uint8_t sc[8], m[8];
            unpack_scales_k4(wb[b].scales, sc, m);
            int32_t isum = 0, msum = 0;
            for (int g = 0; g < 4; ++g) {
                int32_t lo = 0, hi = 0;
                for (int l = 0; l < 32; ++l) {
                    const int q_lo = (wb[b].qs[32 * g + l] & 0x0F) | (((wb[b].qh[l] >> (2 * g)) & 1) << 4);
                    const int q_hi = (wb[b].qs[32 * g + l] >> 4) | (((wb[b].qh[l] >> (2 * g + 1)) & 1) << 4);
                    lo += q_lo * xb[b].qs[64 * g + l];
                    hi += q_hi * xb[b].qs[64 * g + 32 + l];
                }
                isum += sc[2 * g] * lo + sc[2 * g + 1] * hi;
            }
            for (int s = 0; s < 8; ++s) msum += m[s] * (xb[b].bsums[2 * s] + xb[b].bsums[2 * s + 1]);
            sum += xb[b].d * (f16_to_f32(wb[b].d) * isum - f16_to_f32(wb[b].dmin) * msum);
        }
        return sum;
    });
}

// w: [n/256] BlockQ6_K, x: [n/256] BlockQ8_K. Value v of half h (128 values): 4 low bits from
// ql[64h + v % 64] (low nibble for v < 64, else high), 2 high bits from qh[32h + v % 32] bits
// 2 * (v / 32); scale scales[8h + v / 16]; x = d * scale * (q6 - 32).
void dot_q6_K(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    const auto* wb = static_cast<const BlockQ6_K*>(w);
    for_each_token(x, x_row_bytes, n_x, out, [&](const void* xr) {
        const auto* xb = static_cast<const BlockQ8_K*>(xr);
        float sum = 0.0f;
        for (int64_t b = 0; b < n / QK_K; ++b) {
            int32_t isum = 0;
            for (int h = 0; h < 2; ++h) {
                const uint8_t* ql = wb[b].ql + 64 * h;
                const uint8_t* qh = wb[b].qh + 32 * h;
                const int8_t* sc = wb[b].scales + 8 * h;
                const int8_t* q8 = xb[b].qs + 128 * h;
                for (int v = 0; v < 128; ++v) {
                    const int low = v < 64 ? (ql[v % 64] & 0x0F) : (ql[v % 64] >> 4);
                    const int high = (qh[v % 32] >> (2 * (v / 32))) & 3;
                    isum += sc[v / 16] * ((low | (high << 4)) - 32) * q8[v];
                }
            }
            sum += xb[b].d * f16_to_f32(wb[b].d) * static_cast<float>(isum);
        }
        return sum;
    });
}

}  // namespace mvllm::scalar

namespace mvllm {

size_t act_row_bytes(DType act, int64_t n) {
    if (act != DType::Q8_0) return row_size(act, n);
    return act_q8_0_scales_offset(n) + 3 * act_q8_0_n_scales(n) * sizeof(float);
}

void finish_act_q8_0(void* row, int64_t n) {
    const int64_t nb = n / QK8_0, nb8 = act_q8_0_n_scales(n);
    auto* blocks = static_cast<BlockQ8_0*>(row);
    auto* d = const_cast<float*>(act_q8_0_scales(row, n));
    float* d_sum = d + nb8;
    auto* bias = reinterpret_cast<int32_t*>(d_sum + nb8);
    uint8_t* pad = reinterpret_cast<uint8_t*>(blocks + nb);
    std::memset(pad, 0, reinterpret_cast<uint8_t*>(d) - pad);
    for (int64_t b = 0; b < nb8; ++b) {
        if (b >= nb) {
            d[b] = d_sum[b] = 0.0f;
            bias[b] = 0;
            continue;
        }
        int32_t s01 = 0, s23 = 0;
        for (int i = 0; i < QK8_0; i += 4) {
            s01 += blocks[b].qs[i] + blocks[b].qs[i + 1];
            s23 += blocks[b].qs[i + 2] + blocks[b].qs[i + 3];
        }
        d[b] = f16_to_f32(blocks[b].d);
        d_sum[b] = d[b] * static_cast<float>(s01 + s23);
        const uint32_t lo = static_cast<uint16_t>(static_cast<int16_t>(-8 * s01));
        const uint32_t hi = static_cast<uint16_t>(static_cast<int16_t>(-8 * s23));
        bias[b] = static_cast<int32_t>(lo | (hi << 16));
    }
}

}  // namespace mvllm
