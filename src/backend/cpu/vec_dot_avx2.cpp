// AVX2 + FMA + F16C dot products and activation quantisers (compiled with -mavx2 -mfma -mf16c).
//
// Each kernel reads one weight row and a tile of N = 1..4 activation rows, unpacks every weight
// block once and multiplies it with the N activation blocks (out[j] = w . x_j). Integer kernels:
//   Q8_0: maddubs(|w|, sign(x, w)) -> i16 pairs, madd(1) -> i32 per block, one FMA with d_w * d_x;
//   Q4_0: maddubs(nibble, x) (unsigned x signed, no sign trick), the -8 offset from the activation's
//     per-block sums;
//   unsigned x signed (K-quants): maddubs(q, x) -> i16, madd(sub-block scale) -> i32 accumulated
//     over the 256-block; the mins / the -32 offset of Q6_K use the activation's 16-sums (bsums).
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "backend/cpu/q4_0_x8.h"
#include "backend/cpu/vec_dot.h"
#include "core/half.h"

namespace mvllm::avx2 {
namespace {

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

inline float f16(f16_t h) { return _cvtsh_ss(h); }

template <typename T>
inline const T* x_row(const void* x, size_t x_row_bytes, int j) {
    return reinterpret_cast<const T*>(static_cast<const char*>(x) + j * x_row_bytes);
}

// The Q4_K / Q5_K packed 6-bit scales: sc[8] then m[8] as 16 bytes.
inline void unpack_scales_k4(const uint8_t* packed, uint8_t* sc_m) {
    uint32_t a, b, c;
    std::memcpy(&a, packed, 4);
    std::memcpy(&b, packed + 4, 4);
    std::memcpy(&c, packed + 8, 4);
    const uint32_t sc_lo = a & 0x3F3F3F3Fu;
    const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | (((a >> 6) & 0x03030303u) << 4);
    const uint32_t m_lo = b & 0x3F3F3F3Fu;
    const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | (((b >> 6) & 0x03030303u) << 4);
    std::memcpy(sc_m, &sc_lo, 4);
    std::memcpy(sc_m + 4, &sc_hi, 4);
    std::memcpy(sc_m + 8, &m_lo, 4);
    std::memcpy(sc_m + 12, &m_hi, 4);
}

// ---- Q4_0 / Q8_0 weights x Q8_0 activations ------------------------------------------------------

// The 16 nibbles of a Q4_0 block as 32 unsigned bytes 0..15 in value order (low nibbles first).
inline __m256i unpack_u4(const uint8_t* qs) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

// Weight blocks go in groups of 8: their 8 scales are converted as one vector and multiplied by
// the activation's 8 f32 scales (act_q8_0_scales), so a block costs one broadcast-load and one
// FMA on top of its integer dot. Q4_0 multiplies unsigned nibbles u (maddubs(u, x), no sign
// trick) and subtracts 8 * d_w * (d_x * sum x) per block at the end; Q8_0 uses the sign trick.
template <int N, bool kQ4, bool kFixedOrder = false>
void dot_q_0_tile(int64_t n, const void* w, const void* x, size_t x_row_bytes, float* out) {
    using Block = std::conditional_t<kQ4, BlockQ4_0, BlockQ8_0>;
    const auto* wb = static_cast<const Block*>(w);
    const int64_t n_blocks = n / 32;
    const BlockQ8_0* xb[N];
    const float* x_d[N];      // [nb8] f32 activation scales
    const float* x_dsum[N];   // [nb8] f32 activation scale * block sum
    for (int j = 0; j < N; ++j) {
        xb[j] = x_row<BlockQ8_0>(x, x_row_bytes, j);
        x_d[j] = act_q8_0_scales(xb[j], n);
        x_dsum[j] = x_d[j] + act_q8_0_n_scales(n);
    }
    // Independent FMA chains: >= 4 in all (FMA latency 4), within 16 ymm registers. Block k goes
    // to chain k % kChains, so the fixed-order variant keeps one chain count for every N.
    constexpr int kChains = kFixedOrder ? 2 : (N == 1 ? 4 : (N == 2 ? 2 : 1));
    __m256 acc[kChains][N], corr[N];
    for (int j = 0; j < N; ++j) {
        corr[j] = _mm256_setzero_ps();
        for (int c = 0; c < kChains; ++c) acc[c][j] = _mm256_setzero_ps();
    }
    alignas(32) float d_prod[N][8];  // d_w * d_x of the group's 8 blocks, per token
    const __m256i ones = _mm256_set1_epi16(1);

    // One group of kValid (<= 8) blocks starting at block b; compile-time sizes keep every
    // accumulator in a register.
    auto group = [&]<int kValid>(int64_t b) {
        const __m256 d_w = gather_f16_scales(reinterpret_cast<const uint8_t*>(&wb[b].d), sizeof(Block), kValid);
        for (int j = 0; j < N; ++j) {
            _mm256_store_ps(d_prod[j], _mm256_mul_ps(d_w, _mm256_loadu_ps(x_d[j] + b)));
            if constexpr (kQ4) corr[j] = _mm256_fmadd_ps(d_w, _mm256_loadu_ps(x_dsum[j] + b), corr[j]);
        }
#pragma GCC unroll 8
        for (int k = 0; k < kValid; ++k) {
            __m256i wq, w_abs;
            if constexpr (kQ4) {
                wq = unpack_u4(wb[b + k].qs);
            } else {
                wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[b + k].qs));
                w_abs = _mm256_sign_epi8(wq, wq);
            }
#pragma GCC unroll 4
            for (int j = 0; j < N; ++j) {
                const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[j][b + k].qs));
                __m256i p16;
                if constexpr (kQ4) p16 = _mm256_maddubs_epi16(wq, xq);
                else p16 = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(xq, wq));
                const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                __m256& a = acc[k % kChains][j];
                a = _mm256_fmadd_ps(s, _mm256_broadcast_ss(&d_prod[j][k]), a);
            }
        }
    };
    int64_t b = 0;
    for (; b + 8 <= n_blocks; b += 8) group.template operator()<8>(b);
    switch (n_blocks - b) {
        case 1: group.template operator()<1>(b); break;
        case 2: group.template operator()<2>(b); break;
        case 3: group.template operator()<3>(b); break;
        case 4: group.template operator()<4>(b); break;
        case 5: group.template operator()<5>(b); break;
        case 6: group.template operator()<6>(b); break;
        case 7: group.template operator()<7>(b); break;
        default: break;
    }

    for (int j = 0; j < N; ++j) {
        __m256 sum = acc[0][j];
        for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c][j]);
        if constexpr (kQ4) sum = _mm256_fnmadd_ps(_mm256_set1_ps(8.0f), corr[j], sum);
        out[j] = hsum(sum);
    }
}

// ---- interleaved Q4_0 panels (prefill GEMM) ------------------------------------------------------

// The integer dot of the interleaved kernels (q4_0_x8.h) on AVX2: maddubs into i16 lanes that start
// at the activation's bias words (each lane ends as a sum of 16 (u - 8) q products, |sum| <= 16 *
// 8 * 128 = 16384 at every step: no overflow), then one madd(1) to i32. adds (saturating, never
// saturating here) is not associative, so GCC keeps the running sums instead of re-associating
// them into a tree that spills.
struct DotMaddubs {
    static __m256i start(int32_t bias_word) { return _mm256_set1_epi32(bias_word); }
    static __m256i add(__m256i s, __m256i w, __m256i x4) { return _mm256_adds_epi16(s, _mm256_maddubs_epi16(w, x4)); }
    static __m256i join(__m256i a, __m256i b) { return _mm256_adds_epi16(a, b); }
    static __m256i finish(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
};

// ---- Q4_K / Q5_K weights x Q8_K activations ------------------------------------------------------

template <int N, bool kQ5>
void dot_q45_K_tile(int64_t n, const void* w, const void* x, size_t x_row_bytes, float* out) {
    const int64_t n_blocks = n / QK_K;
    const BlockQ8_K* xb[N];
    for (int j = 0; j < N; ++j) xb[j] = x_row<BlockQ8_K>(x, x_row_bytes, j);
    __m256 acc[N];
    for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F);

    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* qs;
        const uint8_t* scales;
        f16_t d_bits, dmin_bits;
        __m256i qh = _mm256_setzero_si256();
        if constexpr (kQ5) {
            const auto& blk = static_cast<const BlockQ5_K*>(w)[b];
            qs = blk.qs, scales = blk.scales, d_bits = blk.d, dmin_bits = blk.dmin;
            qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
        } else {
            const auto& blk = static_cast<const BlockQ4_K*>(w)[b];
            qs = blk.qs, scales = blk.scales, d_bits = blk.d, dmin_bits = blk.dmin;
        }
        alignas(16) uint8_t sc_m[16];
        unpack_scales_k4(scales, sc_m);
        // [m0 m0 m1 m1 ... m7 m7] as i16: pairs of bsums belong to one 32-value sub-block.
        const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc_m + 8));
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));

        __m256i isum[N];
        for (int j = 0; j < N; ++j) isum[j] = _mm256_setzero_si256();
        for (int g = 0; g < 4; ++g) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * g));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if constexpr (kQ5) {
                const __m256i one = _mm256_set1_epi8(1);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g + 1), one), 4));
            }
            const __m256i sc_lo = _mm256_set1_epi16(sc_m[2 * g]);
            const __m256i sc_hi = _mm256_set1_epi16(sc_m[2 * g + 1]);
            for (int j = 0; j < N; ++j) {
                const int8_t* q8 = xb[j][b].qs + 64 * g;
                const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
                const __m256i x_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32));
                const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), sc_lo);
                const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), sc_hi);
                isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(p_lo, p_hi));
            }
        }
        const float dw = f16(d_bits), dmin = f16(dmin_bits);
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
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);  // 16 sub-block scales as i16
        __m256i isum[N];
        for (int j = 0; j < N; ++j) {
            // The -32 offset: sum over sub-blocks of scale * 32 * (sum of its 16 activations).
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
                const int s = 8 * h + 2 * k;  // values 0..15 of q[k] use scale s, 16..31 scale s+1
                const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(blk.scales[s + 1]), _mm_set1_epi16(blk.scales[s]));
                for (int j = 0; j < N; ++j) {
                    const __m256i xq = _mm256_loadu_si256(
                        reinterpret_cast<const __m256i*>(xb[j][b].qs + 128 * h + 32 * k));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xq), sc));
                }
            }
        }
        const float dw = f16(blk.d);
        for (int j = 0; j < N; ++j)
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xb[j][b].d), _mm256_cvtepi32_ps(isum[j]), acc[j]);
    }
    for (int j = 0; j < N; ++j) out[j] = hsum(acc[j]);
}

// ---- float weights x F32 activations -------------------------------------------------------------

template <typename W>
inline __m256 load8(const W* p);
template <>
inline __m256 load8<float>(const float* p) { return _mm256_loadu_ps(p); }
template <>
inline __m256 load8<uint16_t>(const uint16_t* p) {  // f16
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
struct Bf16 {
    uint16_t bits;
};
template <>
inline __m256 load8<Bf16>(const Bf16* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
template <typename W>
inline float to_f32(W v);
template <>
inline float to_f32<float>(float v) { return v; }
template <>
inline float to_f32<uint16_t>(uint16_t v) { return f16_to_f32(v); }
template <>
inline float to_f32<Bf16>(Bf16 v) { return bf16_to_f32(v.bits); }

template <int N, typename W>
void dot_float_tile(int64_t n, const void* w, const void* x, size_t x_row_bytes, float* out) {
    const W* wp = static_cast<const W*>(w);
    const float* xf[N];
    for (int j = 0; j < N; ++j) xf[j] = x_row<float>(x, x_row_bytes, j);
    __m256 acc0[N], acc1[N];
    for (int j = 0; j < N; ++j) acc0[j] = acc1[j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = load8(wp + i), w1 = load8(wp + i + 8);
        for (int j = 0; j < N; ++j) {
            acc0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xf[j] + i), acc0[j]);
            acc1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xf[j] + i + 8), acc1[j]);
        }
    }
    for (int j = 0; j < N; ++j) {
        float sum = hsum(_mm256_add_ps(acc0[j], acc1[j]));
        for (int64_t t = i; t < n; ++t) sum += to_f32(wp[t]) * xf[j][t];
        out[j] = sum;
    }
}

}  // namespace

// n_x (1..kMaxTokenTile) becomes the template parameter N here, once per kernel.
#define MVLLM_TILE_DISPATCH(KERNEL, ...)                                         \
    switch (n_x) {                                                               \
        case 1: return KERNEL<1, ##__VA_ARGS__>(n, w, x, x_row_bytes, out);      \
        case 2: return KERNEL<2, ##__VA_ARGS__>(n, w, x, x_row_bytes, out);      \
        case 3: return KERNEL<3, ##__VA_ARGS__>(n, w, x, x_row_bytes, out);      \
        default: return KERNEL<4, ##__VA_ARGS__>(n, w, x, x_row_bytes, out);     \
    }

void dot_f32(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_float_tile, float)
}
void dot_f16(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_float_tile, uint16_t)
}
void dot_bf16(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_float_tile, Bf16)
}
void dot_q8_0(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q_0_tile, false)
}
void dot_q4_0(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q_0_tile, true)
}
void dot_q8_0_fixed_order(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q_0_tile, false, true)
}
void dot_q4_0_fixed_order(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q_0_tile, true, true)
}
void dot_q4_K(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q45_K_tile, false)
}
void dot_q5_K(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q45_K_tile, true)
}
void dot_q6_K(int64_t n, const void* w, const void* x, size_t x_row_bytes, int n_x, float* out) {
    MVLLM_TILE_DISPATCH(dot_q6_K_tile)
}
#undef MVLLM_TILE_DISPATCH

// 8 rows' 16 qs bytes are transposed as 8 x 4 32-bit words (rows r and r + 4 share a ymm, a 4 x 4
// transpose per 128-bit lane), then split into low and high nibbles.
void repack_q4_0_x8(const void* w, size_t row_bytes, int n_rows, int64_t n_blocks, void* panel) {
    static const BlockQ4_0 kZero{};
    const BlockQ4_0* rows[8];
    size_t step[8];
    for (int r = 0; r < 8; ++r) {
        rows[r] = r < n_rows ? reinterpret_cast<const BlockQ4_0*>(static_cast<const char*>(w) + r * row_bytes) : &kZero;
        step[r] = r < n_rows ? 1 : 0;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    auto* out = static_cast<uint8_t*>(panel);
    for (int64_t b = 0; b < n_blocks; ++b, out += kQ4PanelBlockBytes) {
        const BlockQ4_0* blk[8];
        for (int r = 0; r < 8; ++r) blk[r] = rows[r] + b * step[r];
        alignas(16) uint16_t d16[8];
        for (int r = 0; r < 8; ++r) std::memcpy(&d16[r], &blk[r]->d, 2);
        _mm256_store_ps(reinterpret_cast<float*>(out),
                        _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d16))));
        __m256i g[4];
        transpose_q4_0_x8([&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[r]->qs)); }, g);
        auto* v = reinterpret_cast<__m256i*>(out + 32);
        for (int k = 0; k < 4; ++k) {
            _mm256_store_si256(v + k, _mm256_and_si256(g[k], m4));
            _mm256_store_si256(v + 4 + k, _mm256_and_si256(_mm256_srli_epi16(g[k], 4), m4));
        }
    }
}

void gemv_q4_0_x8(int64_t n_blocks, const void* w, size_t row_bytes, const void* x, float* y, bool fixed_order) {
    gemv_q4_0_x8_dispatch<DotMaddubs>(n_blocks, w, row_bytes, x, y, fixed_order);
}

void gemm_q4_0_x8(int64_t n_blocks, const void* panel, const void* x, size_t x_row_bytes, int n_x, float* y,
                  size_t y_stride, int n_rows) {
    gemm_q4_0_x8_dispatch<DotMaddubs>(n_blocks, panel, x, x_row_bytes, n_x, y, y_stride, n_rows);
}

// ---- activation quantisers -----------------------------------------------------------------------

namespace {
// max |v| over the 8 lanes.
inline float hmax_abs(__m256 v) {
    v = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// 32 floats * id rounded to nearest even -> 32 int8 in order (|v * id| <= 127 by construction).
inline __m256i round_pack_32(const float* v, __m256 id, __m256i* i32_out = nullptr) {
    __m256i i[4];
    for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * k), id));
    if (i32_out)
        for (int k = 0; k < 4; ++k) i32_out[k] = i[k];
    const __m256i p01 = _mm256_packs_epi32(i[0], i[1]);  // lanes interleaved per 128 bits
    const __m256i p23 = _mm256_packs_epi32(i[2], i[3]);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
}  // namespace

// src: [n] f32 -> dst: [n/32] BlockQ8_0 (as quantize_row_q8_0: d = amax/127, q = rint(x / d)).
void quantize_q8_0(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ8_0*>(dst);
    for (int64_t b = 0; b < n / QK8_0; ++b) {
        const float* v = src + b * QK8_0;
        __m256 m = abs_ps(_mm256_loadu_ps(v));
        for (int k = 1; k < 4; ++k) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(v + 8 * k)));
        const float amax = hmax_abs(m);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = f32_to_f16(d);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), round_pack_32(v, _mm256_set1_ps(id)));
    }
}

void quantize_act_q8_0(const float* src, void* dst, int64_t n) {
    quantize_q8_0(src, dst, n);
    finish_act_q8_0(dst, n);
}

// src: [n] f32 -> dst: [n/256] BlockQ8_K (as quantize_row_q8_K: d = (the value of largest
// magnitude, first one on ties) / 127; bsums = sums of 16 q).
void quantize_q8_K(const float* src, void* dst, int64_t n) {
    auto* out = static_cast<BlockQ8_K*>(dst);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float* v = src + b * QK_K;
        __m256 m = abs_ps(_mm256_loadu_ps(v));
        for (int k = 1; k < QK_K / 8; ++k) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(v + 8 * k)));
        const float amax = hmax_abs(m);
        float extreme = 0.0f;
        if (amax > 0.0f) {
            const __m256 target = _mm256_set1_ps(amax);
            for (int k = 0; k < QK_K / 8; ++k) {
                const int mask = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(v + 8 * k)), target, _CMP_EQ_OQ));
                if (mask) {
                    extreme = v[8 * k + __builtin_ctz(mask)];
                    break;
                }
            }
        }
        const float d = extreme / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        out[b].d = d;
        const __m256 vid = _mm256_set1_ps(id);
        for (int c = 0; c < QK_K / 32; ++c) {
            __m256i i32[4];
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs + 32 * c), round_pack_32(v + 32 * c, vid, i32));
            out[b].bsums[2 * c] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(i32[0], i32[1])));
            out[b].bsums[2 * c + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(i32[2], i32[3])));
        }
    }
}

// src: [n] f16 -> dst: [n] f32.
void convert_f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

}  // namespace mvllm::avx2
