// The K-quant weight formats: Q4_K, Q5_K (asymmetric, 8 sub-blocks of 32 with 6-bit scale and min)
// and Q6_K (symmetric, 16 sub-blocks of 16 with int8 scales). Layouts: core/types.h.
//
// Dequantisers evaluate each value with the same float operations, in the same order, as the
// reference GGUF readers, so results match bit for bit.
//
// Quantisers work in two levels. First each sub-block gets the float scale (and min) that
// minimises a weighted squared error, searched over a few candidate scales with a least-squares
// refit for each. Then the sub-block scales are themselves quantised against a super-block scale,
// and the values are re-rounded against the scales actually stored.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/quant.h"
#include "core/status.h"
#include "core/types.h"

namespace mvllm {
namespace {

constexpr int kSearchSteps = 10;       // candidate scales on each side of the starting one
constexpr float kSearchDelta = 0.1f;   // candidate spacing, in quantisation levels

// Per-value weights of a super-block: magnitude matters, but small values still count.
void importance_weights(const float* x, float* w) {
    float sum_sq = 0.0f;
    for (int i = 0; i < QK_K; ++i) sum_sq += x[i] * x[i];
    const float rms = std::sqrt(sum_sq / QK_K);
    for (int i = 0; i < QK_K; ++i) w[i] = rms + std::fabs(x[i]);
}

// Asymmetric fit of n values to levels 0..nmax: x ~ scale * l - min with scale >= 0, min >= 0.
// Returns scale; writes min. Weighted least squares over candidate roundings.
float fit_scale_min(const float* x, const float* w, int n, int nmax, float* min_out) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    lo = std::min(lo, 0.0f);  // the offset only ever shifts down (min >= 0)
    if (hi <= lo) {
        *min_out = -lo;
        return 0.0f;
    }
    float best_scale = (hi - lo) / nmax, best_off = lo;
    float best_err = INFINITY;
    auto error_of = [&](float scale, float off) {
        float err = 0.0f;
        const float iscale = scale > 0.0f ? 1.0f / scale : 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = round_clamp((x[i] - off) * iscale, 0, nmax);
            const float diff = scale * l + off - x[i];
            err += w[i] * diff * diff;
        }
        return err;
    };
    best_err = error_of(best_scale, best_off);
    for (int step = -kSearchSteps; step <= kSearchSteps; ++step) {
        const float iscale = (nmax + kSearchDelta * step) / (hi - lo);
        float sw = 0, sl = 0, sl2 = 0, sx = 0, slx = 0;
        for (int i = 0; i < n; ++i) {
            const float l = static_cast<float>(round_clamp((x[i] - lo) * iscale, 0, nmax));
            sw += w[i];
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sx += w[i] * x[i];
            slx += w[i] * l * x[i];
        }
        const float det = sw * sl2 - sl * sl;
        if (det <= 0.0f) continue;
        float scale = (sw * slx - sx * sl) / det;
        float off = (sl2 * sx - sl * slx) / det;
        if (off > 0.0f) {  // a positive offset is not representable: refit the scale alone
            off = 0.0f;
            scale = slx / sl2;
        }
        if (scale <= 0.0f) continue;
        const float err = error_of(scale, off);
        if (err < best_err) {
            best_err = err;
            best_scale = scale;
            best_off = off;
        }
    }
    *min_out = -best_off;
    return best_scale;
}

// Symmetric fit of n values to levels -nneg..npos: x ~ scale * l (scale may be negative so the
// extreme value can use the extra negative level). Returns scale.
float fit_scale_signed(const float* x, const float* w, int n, int nneg, int npos) {
    float amax = 0.0f, ext = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            ext = x[i];
        }
    }
    if (amax == 0.0f) return 0.0f;
    float best_scale = 0.0f, best_err = INFINITY;
    for (const float base : {-static_cast<float>(nneg), static_cast<float>(npos)}) {
        for (int step = -kSearchSteps; step <= kSearchSteps; ++step) {
            const float iscale = (base + (base < 0 ? -1.0f : 1.0f) * kSearchDelta * step) / ext;
            float slx = 0, sl2 = 0;
            for (int i = 0; i < n; ++i) {
                const float l = static_cast<float>(round_clamp(x[i] * iscale, -nneg, npos));
                slx += w[i] * l * x[i];
                sl2 += w[i] * l * l;
            }
            if (sl2 <= 0.0f) continue;
            const float scale = slx / sl2;
            const float iscale_fit = 1.0f / scale;
            float err = 0.0f;
            for (int i = 0; i < n; ++i) {
                const int l = round_clamp(x[i] * iscale_fit, -nneg, npos);
                const float diff = scale * l - x[i];
                err += w[i] * diff * diff;
            }
            if (err < best_err) {
                best_err = err;
                best_scale = scale;
            }
        }
    }
    return best_scale;
}

// Packs 6-bit scale/min pairs of 8 sub-blocks: the inverse of get_scale_min_k4.
void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
    for (int j = 0; j < 4; ++j) {
        q[j] = static_cast<uint8_t>(ls[j] | ((ls[j + 4] >> 4) << 6));
        q[j + 4] = static_cast<uint8_t>(lm[j] | ((lm[j + 4] >> 4) << 6));
        q[j + 8] = static_cast<uint8_t>((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
    }
}

// Shared first half of Q4_K / Q5_K: fits one super-block, stores d, dmin and scales, and writes the
// level (0..nmax) of every value into L.
void quantize_super_block_k4(const float* x, int nmax, f16_t* d_out, f16_t* dmin_out,
                             uint8_t* scales_out, uint8_t* L) {
    constexpr int kSub = 32;
    constexpr int kNumSub = QK_K / kSub;
    float w[QK_K];
    importance_weights(x, w);
    float scales[kNumSub], mins[kNumSub];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < kNumSub; ++j) {
        scales[j] = fit_scale_min(x + j * kSub, w + j * kSub, kSub, nmax, &mins[j]);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    uint8_t ls[kNumSub], lm[kNumSub];
    for (int j = 0; j < kNumSub; ++j) {
        ls[j] = static_cast<uint8_t>(round_clamp(inv_scale * scales[j], 0, 63));
        lm[j] = static_cast<uint8_t>(round_clamp(inv_min * mins[j], 0, 63));
    }
    *d_out = f32_to_f16(max_scale / 63.0f);
    *dmin_out = f32_to_f16(max_min / 63.0f);
    pack_scale_min_k4(ls, lm, scales_out);

    // Re-round every value against the scale and min as the dequantiser will see them.
    const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
    for (int j = 0; j < kNumSub; ++j) {
        const float dl = d * ls[j];
        const float ml = dmin * lm[j];
        for (int i = 0; i < kSub; ++i) {
            const int k = j * kSub + i;
            L[k] = dl != 0.0f ? static_cast<uint8_t>(round_clamp((x[k] + ml) / dl, 0, nmax)) : 0;
        }
    }
}

}  // namespace

// ---- Q4_K --------------------------------------------------------------------------------------
// Each 64-value chunk shares 32 bytes of qs: low nibbles are sub-block 2c, high nibbles 2c+1.

void dequantize_row_q4_K(const void* src, float* dst, int64_t n) {
    MVLLM_CHECK(n % QK_K == 0) << "q4_K row of " << n;
    const auto* b = static_cast<const BlockQ4_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = f16_to_f32(b[i].d);
        const float dmin = f16_to_f32(b[i].dmin);
        const uint8_t* q = b[i].qs;
        float* y = dst + i * QK_K;
        for (int c = 0; c < QK_K / 64; ++c) {
            uint8_t sc, m;
            get_scale_min_k4(2 * c, b[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(2 * c + 1, b[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l) y[l] = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) y[l + 32] = d2 * (q[l] >> 4) - m2;
            q += 32;
            y += 64;
        }
    }
}

void quantize_row_q4_K(const float* src, void* dst, int64_t n) {
    MVLLM_CHECK(n % QK_K == 0) << "q4_K row of " << n;
    auto* b = static_cast<BlockQ4_K*>(dst);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        quantize_super_block_k4(src + i * QK_K, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
        for (int c = 0; c < QK_K / 64; ++c) {
            for (int l = 0; l < 32; ++l) {
                b[i].qs[c * 32 + l] = static_cast<uint8_t>(L[c * 64 + l] | (L[c * 64 + l + 32] << 4));
            }
        }
    }
}

// ---- Q5_K --------------------------------------------------------------------------------------
// As Q4_K, plus qh: bit 2c of qh[l] is the fifth bit of value l of sub-block 2c, bit 2c+1 that of
// value l of sub-block 2c+1.

void dequantize_row_q5_K(const void* src, float* dst, int64_t n) {
    MVLLM_CHECK(n % QK_K == 0) << "q5_K row of " << n;
    const auto* b = static_cast<const BlockQ5_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = f16_to_f32(b[i].d);
        const float dmin = f16_to_f32(b[i].dmin);
        const uint8_t* ql = b[i].qs;
        const uint8_t* qh = b[i].qh;
        float* y = dst + i * QK_K;
        for (int c = 0; c < QK_K / 64; ++c) {
            uint8_t sc, m;
            get_scale_min_k4(2 * c, b[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            get_scale_min_k4(2 * c + 1, b[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c));
            const uint8_t u2 = static_cast<uint8_t>(2u << (2 * c));
            for (int l = 0; l < 32; ++l) y[l] = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) y[l + 32] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            y += 64;
        }
    }
}

void quantize_row_q5_K(const float* src, void* dst, int64_t n) {
    MVLLM_CHECK(n % QK_K == 0) << "q5_K row of " << n;
    auto* b = static_cast<BlockQ5_K*>(dst);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        quantize_super_block_k4(src + i * QK_K, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
        std::memset(b[i].qh, 0, sizeof(b[i].qh));
        for (int c = 0; c < QK_K / 64; ++c) {
            for (int l = 0; l < 32; ++l) {
                const int l1 = L[c * 64 + l], l2 = L[c * 64 + l + 32];
                b[i].qs[c * 32 + l] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
                b[i].qh[l] |= static_cast<uint8_t>(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
            }
        }
    }
}

// ---- Q6_K --------------------------------------------------------------------------------------
// Each 128-value half uses 64 bytes of ql and 32 of qh. For l in 0..31 of the half:
//   value l      low 4 bits ql[l]      & 0xF, high 2 bits qh[l] bits 0-1
//   value l+32   low 4 bits ql[l+32]   & 0xF, high 2 bits qh[l] bits 2-3
//   value l+64   low 4 bits ql[l]      >> 4,  high 2 bits qh[l] bits 4-5
//   value l+96   low 4 bits ql[l+32]   >> 4,  high 2 bits qh[l] bits 6-7
// and value v of the half has scale index v / 16 (of that half's 8 scales).

void dequantize_row_q6_K(const void* src, float* dst, int64_t n) {
    MVLLM_CHECK(n % QK_K == 0) << "q6_K row of " << n;
    const auto* b = static_cast<const BlockQ6_K*>(src);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = f16_to_f32(b[i].d);
        const uint8_t* ql = b[i].ql;
        const uint8_t* qh = b[i].qh;
        const int8_t* sc = b[i].scales;
        float* y = dst + i * QK_K;
        for (int half = 0; half < 2; ++half) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void quantize_row_q6_K(const float* src, void* dst, int64_t n) {
    MVLLM_CHECK(n % QK_K == 0) << "q6_K row of " << n;
    constexpr int kSub = 16;
    constexpr int kNumSub = QK_K / kSub;
    auto* b = static_cast<BlockQ6_K*>(dst);
    float w[QK_K];
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float* x = src + i * QK_K;
        importance_weights(x, w);
        float scales[kNumSub];
        float amax = 0.0f, ext = 0.0f;
        for (int j = 0; j < kNumSub; ++j) {
            scales[j] = fit_scale_signed(x + j * kSub, w + j * kSub, kSub, 32, 31);
            if (std::fabs(scales[j]) > amax) {
                amax = std::fabs(scales[j]);
                ext = scales[j];
            }
        }
        // The extreme sub-block scale maps to -128, the one int8 level without a positive mirror.
        const float iscale = ext != 0.0f ? -128.0f / ext : 0.0f;
        b[i].d = f32_to_f16(iscale != 0.0f ? 1.0f / iscale : 0.0f);
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < kNumSub; ++j) {
            b[i].scales[j] = static_cast<int8_t>(round_clamp(iscale * scales[j], -128, 127));
            const float dl = d * b[i].scales[j];
            for (int k = j * kSub; k < (j + 1) * kSub; ++k) {
                L[k] = static_cast<uint8_t>(dl != 0.0f ? round_clamp(x[k] / dl, -32, 31) + 32 : 32);
            }
        }
        for (int half = 0; half < 2; ++half) {
            uint8_t* ql = b[i].ql + 64 * half;
            uint8_t* qh = b[i].qh + 32 * half;
            const uint8_t* Lh = L + 128 * half;
            for (int l = 0; l < 32; ++l) {
                const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
                ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

}  // namespace mvllm
