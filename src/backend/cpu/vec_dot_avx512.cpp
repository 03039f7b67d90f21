// AVX-512 VNNI dot products (compiled with AVX-512F/BW/VL/DQ/VNNI): the AVX2 kernels with the
// integer multiply-add chains fused by VNNI, on 256-bit vectors (VL encodings, no 512-bit
// frequency penalty, same block-per-vector structure as vec_dot_avx2.cpp):
//   Q8_0 / Q4_0: dpbusd(|w|, sign(x, w)) replaces maddubs + madd(1);
//   Q4_K / Q6_K: dpwssd(maddubs(q, x), scale) replaces madd(scale) + add;
//   the interleaved Q4_0 GEMM / GEMV (8 rows, vec_dot.h panels): dpbusd(nibbles, x) accumulates
//   the exact i32 dot that AVX2's maddubs + adds + madd(1) chain forms, so both give the same bits.
// Q5_K and the float types use the AVX2 kernels.
#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "backend/cpu/q4_0_x8.h"
#include "backend/cpu/vec_dot.h"
#include "core/half.h"

namespace mvllm::avx512 {
namespace {

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float f16(f16_t h) { return _cvtsh_ss(h); }

template <typename T>
inline const T* x_row(const void* x, size_t x_row_bytes, int j) {
    return reinterpret_cast<const T*>(static_cast<const char*>(x) + j * x_row_bytes);
}

inline __m256i unpack_q4_0(const uint8_t* qs) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

inline void unpack_scales_k4(const uint8_t* packed, uint8_t* sc_m) {
    uint32_t a, b, c;
    std::memcpy(&a, packed, 4);
    std::memcpy(&b, packed + 4, 4);
    std::memcpy(&c, packed + 8, 4);
    const uint32_t v[4] = {a & 0x3F3F3F3Fu, (c & 0x0F0F0F0Fu) | (((a >> 6) & 0x03030303u) << 4),
                           b & 0x3F3F3F3Fu, ((c >> 4) & 0x0F0F0F0Fu) | (((b >> 6) & 0x03030303u) << 4)};
    std::memcpy(sc_m, v, 16);
}

// ---- Q4_0 / Q8_0 weights x Q8_0 activations ------------------------------------------------------

template <int N, bool kQ4>
void dot_q_0_tile(int64_t n, const void* w, const void* x, size_t x_row_bytes, float* out) {
    const int64_t n_blocks = n / 32;
    const BlockQ8_0* xb[N];
    for (int j = 0; j < N; ++j) xb[j] = x_row<BlockQ8_0>(x, x_row_bytes, j);
    __m256 acc0[N], acc1[N];
    for (int j = 0; j < N; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();

    auto load_block = [&](int64_t b, __m256i* wq, float* dw) {
        if constexpr (kQ4) {
            const auto& blk = static_cast<const BlockQ4_0*>(w)[b];
            *wq = unpack_q4_0(blk.qs);
            *dw = f16(blk.d);
        } else {
            const auto& blk = static_cast<const BlockQ8_0*>(w)[b];
            *wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
            *dw = f16(blk.d);
        }
    };
    auto accumulate = [&](int64_t b, __m256i wq, float dw, __m256* acc) {
        const __m256i w_abs = _mm256_abs_epi8(wq);
        for (int j = 0; j < N; ++j) {
            const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[j][b].qs));
            const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w_abs, _mm256_sign_epi8(xq, wq));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * f16(xb[j][b].d)), acc[j]);
        }
    };
    int64_t b = 0;
    for (; b + 1 < n_blocks; b += 2) {
        __m256i wq0, wq1;
        float dw0, dw1;
        load_block(b, &wq0, &dw0);
        load_block(b + 1, &wq1, &dw1);
        accumulate(b, wq0, dw0, acc0);
        accumulate(b + 1, wq1, dw1, acc1);
    }
    if (b < n_blocks) {
        __m256i wq;
        float dw;
        load_block(b, &wq, &dw);
        accumulate(b, wq, dw, acc0);
    }
    for (int j = 0; j < N; ++j) out[j] = hsum(_mm256_add_ps(acc0[j], acc1[j]));
}

// ---- Q4_K weights x Q8_K activations -------------------------------------------------------------

template <int N>
void dot_q4_K_tile(int64_t n, const void* w, const void* x, size_t x_row_bytes, float* out) {
    const int64_t n_blocks = n / QK_K;
    const BlockQ8_K* xb[N];
    for (int j = 0; j < N; ++j) xb[j] = x_row<BlockQ8_K>(x, x_row_bytes, j);
    __m256 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);

    for (int64_t b = 0; b < n_blocks; ++b) {
        const BlockQ4_K& blk = static_cast<const BlockQ4_K*>(w)[b];
        alignas(16) uint8_t sc_m[16];
        unpack_scales_k4(blk.scales, sc_m);
        const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc_m + 8));
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        __m256i isum[N];
        for (int j = 0; j < N; ++j) isum[j] = _mm256_setzero_si256();
        for (int g = 0; g < 4; ++g) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * g));
            const __m256i lo = _mm256_and_si256(q, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i sc_lo = _mm256_set1_epi16(sc_m[2 * g]);
            const __m256i sc_hi = _mm256_set1_epi16(sc_m[2 * g + 1]);
            for (int j = 0; j < N; ++j) {
                const int8_t* q8 = xb[j][b].qs + 64 * g;
                const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
                const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32));
                isum[j] = _mm256_dpwssd_epi32(isum[j], _mm256_maddubs_epi16(lo, x_lo), sc_lo);
                isum[j] = _mm256_dpwssd_epi32(isum[j], _mm256_maddubs_epi16(hi, x_hi), sc_hi);
            }
        }
        const float dw = f16(blk.d), dmin = f16(blk.dmin);
        for (int j = 0; j < N; ++j) {
            const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[j][b].bsums));
            const __m256 msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mins16));
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb[j][b].d), _mm256_cvtepi32_ps(isum[j]), acc[j]);
            acc[j] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * xb[j][b].d), msum, acc[j]);
        }
    }
    for (int j = 0; j < N; ++j) out[j] = hsum(acc[j]);
}

// ---- Q6_K weights x Q8_K activations -------------------------------------------------------------

template <int N>
void dot_q6_K_tile(int64_t n, const void* w, const void* x, size_t x_row_bytes, float* out) {
    const int64_t n_blocks = n / QK_K;
    const BlockQ8_K* xb[N];
    for (int j = 0; j < N; ++j) xb[j] = x_row<BlockQ8_K>(x, x_row_bytes, j);
    __m256 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i m2 = _mm256_set1_epi8(0x03);

    for (int64_t b = 0; b < n_blocks; ++b) {
        const BlockQ6_K& blk = static_cast<const BlockQ6_K*>(w)[b];
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
        __m256i isum[N];
        for (int j = 0; j < N; ++j) {
            const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[j][b].bsums));
            isum[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 5));
        }
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            for (int k = 0; k < 4; ++k) {
                const int s = 8 * h + 2 * k;
                const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(blk.scales[s + 1]), _mm_set1_epi16(blk.scales[s]));
                for (int j = 0; j < N; ++j) {
                    const __m256i xq = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i*>(xb[j][b].qs + 128 * h + 32 * k));
                    isum[j] = _mm256_dpwssd_epi32(isum[j], _mm256_maddubs_epi16(q[k], xq), sc);
                }
            }
        }
        const float dw = f16(blk.d);
        for (int j = 0; j < N; ++j)
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb[j][b].d), _mm256_cvtepi32_ps(isum[j]), acc[j]);
    }
    for (int j = 0; j < N; ++j) out[j] = hsum(acc[j]);
}

// The integer dot of the interleaved kernels (q4_0_x8.h) with VNNI: dpbusd into i32 lanes. The
// AVX2 kernels add the bias word as two i16 halves and madd them together at the end; here the
// sum of the halves starts the i32 lane.
struct DotVnni {
    static __m256i start(int32_t bias_word) {
        return _mm256_set1_epi32(static_cast<int16_t>(bias_word & 0xFFFF) + static_cast<int16_t>(bias_word >> 16));
    }
    static __m256i add(__m256i s, __m256i w, __m256i x4) { return _mm256_dpbusd_epi32(s, w, x4); }
    static __m256i join(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
    static __m256i finish(__m256i s) { return s; }
};

}  // namespace

void gemm_q4_0_x8(int64_t n_blocks, const void* panel, const void* x, size_t x_row_bytes, int n_x, float* y,
                  size_t y_stride, int n_rows) {
    gemm_q4_0_x8_dispatch<DotVnni>(n_blocks, panel, x, x_row_bytes, n_x, y, y_stride, n_rows);
}

void gemv_q4_0_x8(int64_t n_blocks, const void* w, size_t row_bytes, const void* x, float* y, bool fixed_order) {
    gemv_q4_0_x8_dispatch<DotVnni>(n_blocks, w, row_bytes, x, y, fixed_order);
}

#define MVLLM_TILE_DISPATCH(KERNEL, ...)                                         \
    switch (n_x) {                                                               \
        case 1: return KERNEL<1, ##__VA_ARGS__>(n, w, x, x_row_bytes, out);      \
        case 2: return KERNEL<2, ##__VA_ARGS__>(n, w, x, x_row_bytes, out);      \
        case 3: return KERNEL<3, ##__VA_ARGS__>(n, w, x, x_row_bytes, out);      \
        default: return KERNEL<4, ##__VA_ARGS__>(n, w, x, x_row_bytes, out);     \
    }
void dot_q8_0(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q_0_tile, false)
}
void dot_q4_0(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q_0_tile, true)
}
void dot_q4_K(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q4_K_tile)
}
void dot_q6_K(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q6_K_tile)
}
#undef MVLLM_TILE_DISPATCH

}  // namespace mvllm::avx512
