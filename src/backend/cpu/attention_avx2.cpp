// AVX2 + FMA + F16C row kernels of the CPU attention (compiled with -mavx2 -mfma -mf16c; called
// only after a run-time check). scores and pv need d % 8 == 0; the caller falls back to the
// scalar table otherwise.
#include "backend/cpu/attention_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"

namespace mvllm {
namespace {

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// e^x for x in [-87, 88] (inputs outside are clamped): x = n ln2 + r with |r| <= ln2 / 2, e^r by a
// degree-6 Taylor polynomial (relative error < 2e-7), 2^n put into the exponent bits.
inline __m256 exp_ps(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.4286068203094172e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Lane mask with the first n (0..8) lanes set.
inline __m256i first_lanes(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

void f16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(dst + i,
                         _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

// Eight dot products of q (d values) with the rows k0..k7, returned as the lanes of one vector.
inline __m256 dot8(const float* q, const float* const* k, int64_t d) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t i = 0; i < d; i += 8) {
        const __m256 x = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k[0] + i), a0);
        a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k[1] + i), a1);
        a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k[2] + i), a2);
        a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k[3] + i), a3);
        a4 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k[4] + i), a4);
        a5 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k[5] + i), a5);
        a6 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k[6] + i), a6);
        a7 = _mm256_fmadd_ps(x, _mm256_loadu_ps(k[7] + i), a7);
    }
    // Transpose-and-add: lane j of the result is the sum of the lanes of a_j.
    const __m256 h01 = _mm256_hadd_ps(a0, a1), h23 = _mm256_hadd_ps(a2, a3);
    const __m256 h45 = _mm256_hadd_ps(a4, a5), h67 = _mm256_hadd_ps(a6, a7);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(h0123, h4567, 0x20),
                         _mm256_permute2f128_ps(h0123, h4567, 0x31));
}

void scores_avx2(const float* q, int64_t n_q, int64_t d, const float* k, int64_t k_stride,
                 int64_t n_k, float* s, int64_t s_stride) {
    for (int64_t j0 = 0; j0 < n_k; j0 += 8) {
        // Rows past n_k repeat the last row (valid memory); their lanes are not stored.
        const float* rows[8];
        for (int i = 0; i < 8; ++i) rows[i] = k + std::min(j0 + i, n_k - 1) * k_stride;
        const int64_t take = std::min<int64_t>(8, n_k - j0);
        for (int64_t r = 0; r < n_q; ++r) {
            const __m256 v = dot8(q + r * d, rows, d);
            float* dst = s + r * s_stride + j0;
            if (take == 8) {
                _mm256_storeu_ps(dst, v);
            } else {
                _mm256_maskstore_ps(dst, first_lanes(take), v);
            }
        }
    }
}

float max_avx2(const float* s, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + i));
    float r = hmax(m);
    for (; i < n; ++i) r = std::max(r, s[i]);
    return r;
}

float exp_sum_avx2(float* s, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
        _mm256_storeu_ps(s + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        const __m256i mask = first_lanes(n - i);
        const __m256 e = _mm256_and_ps(exp_ps(_mm256_sub_ps(_mm256_maskload_ps(s + i, mask), mv)),
                                       _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(s + i, mask, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum(sum);
}

// o[0 .. 8 NR) += sum_j p[j] v_j[0 .. 8 NR): the accumulators stay in registers over all n_k rows.
template <int NR>
inline void pv_cols(const float* p, int64_t n_k, const float* v, int64_t v_stride, float* o) {
    __m256 acc[NR];
    for (int i = 0; i < NR; ++i) acc[i] = _mm256_loadu_ps(o + 8 * i);
    for (int64_t j = 0; j < n_k; ++j) {
        const __m256 pj = _mm256_broadcast_ss(p + j);
        const float* vj = v + j * v_stride;
        for (int i = 0; i < NR; ++i) acc[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), acc[i]);
    }
    for (int i = 0; i < NR; ++i) _mm256_storeu_ps(o + 8 * i, acc[i]);
}

void pv_avx2(const float* p, int64_t n_k, const float* v, int64_t v_stride, int64_t d, float* o) {
    int64_t c = 0;
    for (; c + 64 <= d; c += 64) pv_cols<8>(p, n_k, v + c, v_stride, o + c);
    if (c + 32 <= d) { pv_cols<4>(p, n_k, v + c, v_stride, o + c); c += 32; }
    if (c + 16 <= d) { pv_cols<2>(p, n_k, v + c, v_stride, o + c); c += 16; }
    if (c + 8 <= d) { pv_cols<1>(p, n_k, v + c, v_stride, o + c); c += 8; }
}

void scale_avx2(float* x, int64_t n, float a) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), av));
    for (; i < n; ++i) x[i] *= a;
}

const AttentionKernels kAvx2 = {
    "avx2", f16_to_f32_avx2, f32_to_f16_avx2, scores_avx2, max_avx2, exp_sum_avx2, pv_avx2,
    scale_avx2,
};

}  // namespace

const AttentionKernels* attention_kernels_avx2() { return &kAvx2; }

}  // namespace mvllm

#else

namespace mvllm {
const AttentionKernels* attention_kernels_avx2() { return nullptr; }
}  // namespace mvllm

#endif
