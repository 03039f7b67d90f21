// The interleaved Q4_0 kernels (8 weight rows at a time, vec_dot.h: panels) shared by the AVX2 and
// AVX-512 files. They differ only in how a block's integer dot is formed, a policy `D`:
//   D::start(bias_word)  the accumulator holding the activation's bias word (vec_dot.h)
//   D::add(s, w, x4)     s += the products of 32 unsigned weight bytes w (lane r: 4 bytes of row r)
//                        with 4 activation bytes x4 (broadcast), summed per 32-bit lane
//   D::join(s, t)        two accumulators as one;  D::finish(s): the exact i32 sum per row
// AVX2: maddubs into i16 lanes (never saturating: see the GEMM), madd(1) at the end; AVX-512
// VNNI: dpbusd straight into i32. The integers are the same, so the floats are too.
// Internal linkage on purpose: each kernel file compiles its own copy with its own target flags,
// so an AVX-512 build of these can never be linked into the AVX2 path.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/vec_dot.h"
#include "core/types.h"

namespace mvllm {
namespace {

// qs(r) = the 16 qs bytes of row r's block (r = 0..7). g[k] holds, in 32-bit lane r, qs bytes
// 4k .. 4k + 3 of row r (rows r and r + 4 share a 128-bit lane pair: a 4 x 4 transpose per lane).
template <class Qs>
inline void transpose_q4_0_x8(Qs qs, __m256i (&g)[4]) {
    const __m256i a = _mm256_set_m128i(qs(4), qs(0)), b = _mm256_set_m128i(qs(5), qs(1));
    const __m256i c = _mm256_set_m128i(qs(6), qs(2)), d = _mm256_set_m128i(qs(7), qs(3));
    const __m256i t0 = _mm256_unpacklo_epi32(a, b), t1 = _mm256_unpacklo_epi32(c, d);
    const __m256i t2 = _mm256_unpackhi_epi32(a, b), t3 = _mm256_unpackhi_epi32(c, d);
    g[0] = _mm256_unpacklo_epi64(t0, t1);
    g[1] = _mm256_unpackhi_epi64(t0, t1);
    g[2] = _mm256_unpacklo_epi64(t2, t3);
    g[3] = _mm256_unpackhi_epi64(t2, t3);
}

// The f16 scales of 8 consecutive blocks (stride bytes apart, first at d) as 8 floats; only the
// first n_valid are read (the rest are 0).
inline __m256 gather_f16_scales(const uint8_t* d, size_t stride, int n_valid) {
    uint64_t lo = 0, hi = 0;
    for (int k = 0; k < n_valid; ++k) {
        uint16_t h;
        std::memcpy(&h, d + k * stride, 2);
        (k < 4 ? lo : hi) |= static_cast<uint64_t>(h) << (16 * (k & 3));
    }
    return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)));
}

inline __m256i broadcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// One panel block for N tokens: 8 D::add per token (8 rows x 4 values each), D::finish, a
// convert and an FMA with d_w[8] * d_x per token.
template <class D, int N>
void gemm_q4_0_x8_tile(int64_t n_blocks, const uint8_t* panel, const uint8_t* x, size_t x_row_bytes, float* y,
                       size_t y_stride, int n_rows) {
    const int64_t n = n_blocks * QK4_0;
    const BlockQ8_0* xb[N];
    const float* x_d[N];
    const int32_t* x_bias[N];
    for (int j = 0; j < N; ++j) {
        xb[j] = reinterpret_cast<const BlockQ8_0*>(x + j * x_row_bytes);
        x_d[j] = act_q8_0_scales(xb[j], n);
        x_bias[j] = act_q8_0_bias(xb[j], n);
    }
    __m256 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* p = panel + b * kQ4PanelBlockBytes;
        __m256i s[N];
        for (int j = 0; j < N; ++j) s[j] = D::start(x_bias[j][b]);
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
            const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 + 32 * v));
            for (int j = 0; j < N; ++j) s[j] = D::add(s[j], wv, broadcast4(xb[j][b].qs + 4 * v));
        }
        const __m256 d_w = _mm256_load_ps(reinterpret_cast<const float*>(p));
        for (int j = 0; j < N; ++j)
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(D::finish(s[j])),
                                     _mm256_mul_ps(d_w, _mm256_broadcast_ss(x_d[j] + b)), acc[j]);
    }
    if (n_rows == 8) {
        for (int j = 0; j < N; ++j) _mm256_storeu_ps(y + j * y_stride, acc[j]);
    } else {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int j = 0; j < N; ++j) _mm256_maskstore_ps(y + j * y_stride, mask, acc[j]);
    }
}

// n_x tokens (1 .. kMaxTokenTile): a tile of that many. (Wider VNNI tiles of 8 tokens measured
// slower than 4 on the 2-core EPYC: 590 against 612 prefill tok/s in bench_cpu_matmul.)
template <class D>
void gemm_q4_0_x8_dispatch(int64_t n_blocks, const void* panel, const void* x, size_t x_row_bytes, int n_x, float* y,
                           size_t y_stride, int n_rows) {
    const auto* p = static_cast<const uint8_t*>(panel);
    const auto* xp = static_cast<const uint8_t*>(x);
    switch (n_x) {
        case 1: return gemm_q4_0_x8_tile<D, 1>(n_blocks, p, xp, x_row_bytes, y, y_stride, n_rows);
        case 2: return gemm_q4_0_x8_tile<D, 2>(n_blocks, p, xp, x_row_bytes, y, y_stride, n_rows);
        case 3: return gemm_q4_0_x8_tile<D, 3>(n_blocks, p, xp, x_row_bytes, y, y_stride, n_rows);
        default: return gemm_q4_0_x8_tile<D, 4>(n_blocks, p, xp, x_row_bytes, y, y_stride, n_rows);
    }
}

// Decode: the panel transpose done in registers block by block and used at once. Two
// accumulators per block (low and high nibbles) for two independent chains.
template <class D, bool kFixedOrder>
void gemv_q4_0_x8_impl(int64_t n_blocks, const void* w, size_t row_bytes, const void* x, float* y) {
    const auto* w0 = static_cast<const uint8_t*>(w);
    const auto* xb = static_cast<const BlockQ8_0*>(x);
    const float* x_d = act_q8_0_scales(x, n_blocks * QK8_0);
    const int32_t* x_bias = act_q8_0_bias(x, n_blocks * QK8_0);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    // The 8 rows are one contiguous span read as 8 interleaved streams, which the hardware
    // prefetchers follow poorly: prefetch the span kPrefetchGroups groups ahead linearly, 8 blocks'
    // bytes (144) per block. Prefetches past the matrix are harmless (they never fault).
    constexpr int kPrefetchGroups = 2;
    const uint8_t* pf = w0 + kPrefetchGroups * 8 * row_bytes;
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* blk = w0 + b * sizeof(BlockQ4_0);
        const char* pfb = reinterpret_cast<const char*>(pf + b * 8 * sizeof(BlockQ4_0));
        _mm_prefetch(pfb, _MM_HINT_T0);
        _mm_prefetch(pfb + 64, _MM_HINT_T0);
        _mm_prefetch(pfb + 128, _MM_HINT_T0);
        const __m256 d_w = gather_f16_scales(blk, row_bytes, 8);
        __m256i g[4];
        transpose_q4_0_x8(
            [&](int r) {
                return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + r * row_bytes + offsetof(BlockQ4_0, qs)));
            },
            g);
        __m256i s_lo = D::start(x_bias[b]), s_hi = _mm256_setzero_si256();
        const int8_t* xq = xb[b].qs;
        for (int k = 0; k < 4; ++k) {
            s_lo = D::add(s_lo, _mm256_and_si256(g[k], m4), broadcast4(xq + 4 * k));
            s_hi = D::add(s_hi, _mm256_and_si256(_mm256_srli_epi16(g[k], 4), m4), broadcast4(xq + 16 + 4 * k));
        }
        const __m256 dot = _mm256_cvtepi32_ps(D::finish(D::join(s_lo, s_hi)));
        // The fixed order is gemm_q4_0_x8_tile's: one chain, d_w * d_x then FMA.
        if (!kFixedOrder && (b & 1)) acc1 = _mm256_fmadd_ps(dot, _mm256_mul_ps(d_w, _mm256_broadcast_ss(x_d + b)), acc1);
        else acc0 = _mm256_fmadd_ps(dot, _mm256_mul_ps(d_w, _mm256_broadcast_ss(x_d + b)), acc0);
    }
    _mm256_storeu_ps(y, kFixedOrder ? acc0 : _mm256_add_ps(acc0, acc1));
}

template <class D>
void gemv_q4_0_x8_dispatch(int64_t n_blocks, const void* w, size_t row_bytes, const void* x, float* y,
                           bool fixed_order) {
    if (fixed_order) gemv_q4_0_x8_impl<D, true>(n_blocks, w, row_bytes, x, y);
    else gemv_q4_0_x8_impl<D, false>(n_blocks, w, row_bytes, x, y);
}

}  // namespace
}  // namespace mvllm
