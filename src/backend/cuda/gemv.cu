#include "backend/cuda/gemv.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/env.h"
#include "backend/cuda/gemv_items.cuh"
#include "backend/cuda/gemv_stream.cuh"
#include "backend/cuda/qx.cuh"
#include "backend/cuda/rope.cuh"

namespace mvllm::cuda {
namespace {

constexpr int kGemvWarps = 4;  // warps per CTA; each warp owns R output rows
// GemvQxArgs::early bits: the first weights load before the PDL wait; the accumulate target loads
// right after it.
// kLateTriggerFlag: the next kernel may launch once the first activation loads after the wait have
// returned, not on entry (pdl_trigger_after); see gemv_late_trigger.
constexpr int kEarlyWeightsFlag = 1, kEarlyResidualFlag = 2, kLateTriggerFlag = 4;

// Rows per warp: enough independent 16-byte loads in flight per lane without spilling.
template <DType T, int NT, bool kPair>
__host__ __device__ constexpr int rows_per_warp() {
    if (kPair) return NT <= 2 ? 2 : 1;
    if (T == DType::Q4_0) return NT <= 2 ? 4 : 2;
    return NT <= 4 ? 2 : 1;
}

// Items per loop iteration whose loads are issued together (unrolled), within the register file.
template <DType T, int NT, bool kPair>
__host__ __device__ constexpr int items_unrolled() {
    const bool k_quant = T == DType::Q4_K || T == DType::Q6_K;
    return k_quant && (NT > 1 || kPair) ? 1 : 2;
}

// The items `it` of R rows of w (and of w2 for the second half, NS == 2) into registers.
template <DType T, int NS, int R>
__device__ __forceinline__ void load_items(Item<T> (&wv)[NS][R], const QuantMatrix& w, const QuantMatrix& w2,
                                           const int64_t (&rows)[R], int64_t it) {
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int r = 0; r < R; ++r) wv[s][r].load(s ? w2 : w, rows[r], it);
}

// acc[s][r][t] += the dot product of item `it` of each row with the same values of token t.
template <DType T, int NT, int NS, int R>
__device__ __forceinline__ void dot_items(const Item<T> (&wv)[NS][R], const QxView& x, int n_tokens, int64_t it,
                                          float (&acc)[NS][R][NT]) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        if (t >= n_tokens) break;
#pragma unroll
        for (int p = 0; p < Item<T>::kParts; ++p) {
            const typename Item<T>::X xv = Item<T>::load_x(x, t, it, p);
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int r = 0; r < R; ++r) acc[s][r][t] += wv[s][r].dot(xv, p);
        }
    }
}

// Reads: R rows of w (and of w2 when kPair) from row (cta * (kGemvWarps / ks) + warp / ks) * R, the
// n_tokens <= NT QX rows of x, bias. Writes: out [n_tokens][n_out] (F32; kPair: out_type); with
// kRope, q and the cache instead. row_base: the first row of w in the stacked QKV order (kRope: the
// rows' q / k / v part and their bias; 0 for a lone matrix). Launch: ceil(n_out / (kGemvWarps / ks *
// R)) CTAs (cta: their index), kGemvWarps * 32 threads, ks in {1, 2, 4}.
// The ks warps of a row group split its items: lane l of K-part k takes items 32 k + l,
// 32 (k + ks) + l, ...; each weight byte is loaded once and dotted with every column. The parts
// are summed in a fixed order (warp sums, then part 0 + 1 + ...), so a column's result depends
// neither on the other columns nor on which CTA ran it.
template <DType T, int NT, bool kPair, bool kRope = false>
__device__ __forceinline__ void gemv_qx(const QuantMatrix& w, const QuantMatrix& w2, const QxView& x, const float* bias,
                                        void* out, DType out_type, int64_t n_out, int n_tokens, int accumulate, int ks,
                                        int early, const QkvRopeOut& rope, int64_t cta, int64_t row_base) {
    using I = Item<T>;
    constexpr int R = rows_per_warp<T, NT, kPair>();
    constexpr int NS = kPair ? 2 : 1;
    __shared__ float partial[kGemvWarps][NS * R * NT];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int part = warp % ks;
    const int64_t row0 = (cta * (kGemvWarps / ks) + warp / ks) * R;  // of w
    // No early exit (the parts meet at a barrier): rows past the end repeat the last row, unwritten.
    int64_t rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = min(row0 + r, n_out - 1);
    float acc[NS][R][NT];
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[s][r][t] = 0.0f;
    const int64_t n_items = x.n_in / I::kValues, it0 = 32 * part + lane, stride = 32 * ks;
    // The weights are no kernel's output: while the previous kernel drains (programmatic dependent
    // launch), the first kFirst items of every row load into registers (Q4_0: the loop's whole
    // first step; Q8_0 and Q4_K: one item), then the wait; they are dotted in the loop's order, so
    // the sums are the same. (Q4_K's first item before the wait: 7B Q4_K_M decode +1.2 % on an
    // H100, bench/NOTES.md, forty-fourth session.) Q6_K loads its whole first loop step (two
    // items) early at one column outside a pair and the RoPE epilogue: the one-column matrices under
    // the streaming GEMV's floor, as the 0.5B's down projection (0.5B Q4_K_M decode +10 % on an
    // H100; one item: +6.6 %; forty-fifth session). In the 7B's stacked QKV with the epilogue the
    // early items cost registers (96 -> 138) and 2.7 % of 7B Q4_K_M decode: there, and otherwise,
    // Q6_K's items (three 16-byte loads and the scales) go to L2 before the wait.
    constexpr int kUnroll = items_unrolled<T, NT, kPair>();
    constexpr int kFirst = T == DType::Q4_0                                  ? kUnroll
                           : T == DType::Q8_0 || T == DType::Q4_K            ? 1
                           : T == DType::Q6_K && NT == 1 && !kPair && !kRope ? kUnroll
                                                                             : 0;
    const bool late_trigger = (early & kLateTriggerFlag) != 0;
    if (!late_trigger) pdl_trigger();
    // kRope: the rotation depends only on the step's metadata (uploaded before the first kernel),
    // and the bias is a weight, so the writer lane's (cos, sin), bias pair and cache slot are read
    // before the wait, once the early weight loads are in flight. Lane r * NT + t stores rows
    // (r, r + 1) of token t (the epilogue's writer lane).
    [[maybe_unused]] float2 rot = make_float2(1.0f, 0.0f), bias_pair = make_float2(0.0f, 0.0f);
    [[maybe_unused]] int64_t slot = 0;
    auto rotation = [&] {
        if constexpr (kRope) {
            static_assert(R * NT <= 32, "one writer lane per (row, token)");
            const int r = lane / NT, t = lane % NT;
            const int64_t o = row_base + row0 + r;
            if (lane < R * NT && r % 2 == 0 && t < n_tokens && row0 + r < n_out) {
                if (bias) bias_pair = make_float2(bias[o], bias[o + 1]);
                if (o >= static_cast<int64_t>(rope.n_heads) * rope.head_dim) slot = rope.slot_mapping[t];
                if (o < static_cast<int64_t>(rope.n_heads + rope.n_kv_heads) * rope.head_dim)
                    rot = rope_cos_sin(rope.positions[t], rope.inv_freq[rope.pair_dim(o)]);
            }
        }
    };
    if constexpr (kFirst > 0) {
        if (!(early & kEarlyWeightsFlag)) pdl_wait();  // MVLLM_EARLY_LOADS without bit 2, for A/B
        I first[kFirst][NS][R];
#pragma unroll
        for (int u = 0; u < kFirst; ++u)
            if (it0 + u * stride < n_items) load_items(first[u], w, w2, rows, it0 + u * stride);
        rotation();
        pdl_wait();
#pragma unroll
        for (int u = 0; u < kFirst; ++u)
            if (it0 + u * stride < n_items) dot_items(first[u], x, n_tokens, it0 + u * stride, acc);
        if (late_trigger) pdl_trigger_after(acc[0][0][0]);
    } else {
        if (it0 < n_items)
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int r = 0; r < R; ++r) I::prefetch(s ? w2 : w, rows[r], it0);
        rotation();
        pdl_wait();
        if (late_trigger) pdl_trigger();
    }
    // Accumulate: the writer lane's current out value (the residual) loads now, beside the first
    // activation loads, instead of after the dot products (one dependent round trip less at the
    // end). Every earlier kernel has finished at the wait, so the value is final.
    static_assert(R * NT <= 32, "one writer lane per (row, token)");
    [[maybe_unused]] float resid = 0.0f;
    if (!kPair && !kRope && accumulate && (early & kEarlyResidualFlag) && part == 0 && lane < R * NT) {
        const int r = lane / NT, t = lane % NT;
        if (row0 + r < n_out && t < n_tokens) resid = static_cast<const float*>(out)[t * n_out + row0 + r];
    }
#pragma unroll kUnroll
    for (int64_t it = it0 + kFirst * stride; it < n_items; it += stride) {
        I wv[NS][R];
        load_items(wv, w, w2, rows, it);
        dot_items(wv, x, n_tokens, it, acc);
    }
#pragma unroll
    for (int s = 0; s < NS; ++s)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int t = 0; t < NT; ++t) acc[s][r][t] = warp_sum(acc[s][r][t]);
    if (ks > 1) {  // uniform across the CTA
        if (lane == 0)
#pragma unroll
            for (int s = 0; s < NS; ++s)
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int t = 0; t < NT; ++t) partial[warp][(s * R + r) * NT + t] = acc[s][r][t];
        __syncthreads();
        if (part != 0) return;
#pragma unroll
        for (int s = 0; s < NS; ++s)
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int t = 0; t < NT; ++t)
                    for (int k = 1; k < ks; ++k) acc[s][r][t] += partial[warp + k][(s * R + r) * NT + t];
    }
    if constexpr (kRope) {  // the fused QKV rows: pairs (r, r + 1), RoPE'd into q and the cache
        static_assert(R % 2 == 0 && !kPair, "RoPE pairs lie within a warp's rows");
        const int64_t qk_rows = static_cast<int64_t>(rope.n_heads + rope.n_kv_heads) * rope.head_dim;
#pragma unroll
        for (int r = 0; r < R; r += 2) {
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const int64_t o = row_base + row0 + r;
                if (lane != ((r * NT + t) & 31) || row0 + r >= n_out || t >= n_tokens) continue;
                float x0 = acc[0][r][t], x1 = acc[0][r + 1][t];
                if (bias) x0 += bias_pair.x, x1 += bias_pair.y;
                if (o < qk_rows) {
                    rope.store_rotated(o, t, slot, rope_rotate(x0, x1, rot));
                } else {
                    rope.store_v(o, slot, x0);
                    rope.store_v(o + 1, slot, x1);
                }
            }
        }
    } else {
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                float v = acc[0][r][t];
                if (kPair) v = silu(v) * acc[NS - 1][r][t];
                const int64_t o = row0 + r;
                // Every lane holds the sum: lane (r * NT + t) % 32 writes it.
                if (lane == ((r * NT + t) & 31) && o < n_out && t < n_tokens) {
                    if (kPair) {
                        store_any(out, out_type, t * n_out + o, v);
                    } else {
                        float* dst = static_cast<float*>(out) + t * n_out + o;
                        if (bias) v += bias[o];
                        if (accumulate) v = (early & kEarlyResidualFlag ? resid : *dst) + v;
                        *dst = v;
                    }
                }
            }
        }
    }
}

// The kernels' arguments (one struct: the kernels below take the same).
struct GemvQxArgs {
    QuantMatrix w, w2;
    QxView x;
    const float* bias;
    void* out;
    DType out_type;
    int64_t n_out;
    int n_tokens, accumulate, ks, early;  // early: kEarly*Flag bits
    QkvRopeOut rope;  // kRope: where the fused QKV rows go
    // gemv_qx_stack_kernel: w2's rows (its own type, K split ks2 and output out2) after w's, whose
    // launch is the first ctas1 CTAs.
    void* out2 = nullptr;
    int64_t n_out2 = 0;
    int ks2 = 0;
    unsigned ctas1 = 0;
};
template <DType T, int NT, bool kPair, bool kRope = false>
__device__ __forceinline__ void gemv_qx(const GemvQxArgs& a) {
    gemv_qx<T, NT, kPair, kRope>(a.w, a.w2, a.x, a.bias, a.out, a.out_type, a.n_out, a.n_tokens, a.accumulate, a.ks,
                                 a.early, a.rope, blockIdx.x, 0);
}
template <DType T, int NT, bool kPair, bool kRope = false>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_qx_kernel(GemvQxArgs a) { gemv_qx<T, NT, kPair, kRope>(a); }
// Two matrices of different types stacked by rows in one launch: the QKV projection of a file
// whose V is not of Q and K's type (a Q4_K_M file's Q6_K V beside Q4_K Q and K, stacked as one
// matrix). The first ctas1 CTAs are w's lone launch (type T, rows 0 .. n_out - 1, out), the rest
// w2's (type T2, rows n_out .. in the stacked order, out2), each with its own K split, so every
// row's sum is the one a lone launch of its matrix gives. kRope: q and the cache, as gemv_qx.
template <DType T, DType T2, int NT, bool kRope>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_qx_stack_kernel(GemvQxArgs a) {
    if (blockIdx.x < a.ctas1)
        gemv_qx<T, NT, false, kRope>(a.w, a.w, a.x, a.bias, a.out, DType::F32, a.n_out, a.n_tokens, 0, a.ks, a.early,
                                     a.rope, blockIdx.x, 0);
    else
        gemv_qx<T2, NT, false, kRope>(a.w2, a.w2, a.x, a.bias, a.out2, DType::F32, a.n_out2, a.n_tokens, 0, a.ks2,
                                      a.early, a.rope, blockIdx.x - a.ctas1, a.n_out);
}
// Batch-1 Q4_0 (every matmul of a decode step but the LM head): 7 CTAs per SM (72 registers),
// which its first items loaded before the wait would otherwise push to 6. (A minimum CTA count
// on every instantiation makes ptxas spend far more registers on the others.) The QKV + RoPE form
// takes 6 (80 registers): its double-precision sincos runs while the first items are held, and its
// launches (7B: 576 CTAs, 0.5B: 72) are one wave at 6 CTAs per SM anyway.
template <bool kPair, bool kRope = false>
__global__ void __launch_bounds__(kGemvWarps * 32, kRope ? 6 : 7) gemv_q4_0_b1_kernel(GemvQxArgs a) {
    gemv_qx<DType::Q4_0, 1, kPair, kRope>(a);
}

// 16 bytes of a float weight row as f32 values (4 for F32, 8 for F16 / BF16).
__device__ __forceinline__ void to_floats(const uint4& v, float (&f)[4]) {
    f[0] = __uint_as_float(v.x); f[1] = __uint_as_float(v.y); f[2] = __uint_as_float(v.z); f[3] = __uint_as_float(v.w);
}
__device__ __forceinline__ void to_floats(const uint4& v, const __half*, float (&f)[8]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t u = word(v, j);
        const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&u));
        f[2 * j] = p.x;
        f[2 * j + 1] = p.y;
    }
}
__device__ __forceinline__ void to_floats(const uint4& v, const __nv_bfloat16*, float (&f)[8]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t u = word(v, j);
        f[2 * j] = __uint_as_float(u << 16);
        f[2 * j + 1] = __uint_as_float(u & 0xFFFF0000u);
    }
}

template <typename WT> struct FloatItem {
    static constexpr int E = 16 / sizeof(WT);
    float f[E];
    __device__ __forceinline__ void load(const WT* w, int64_t n_in, int64_t row, int64_t it) {
        const uint4 v = __ldcs(reinterpret_cast<const uint4*>(w + row * n_in + it * E));
        if constexpr (E == 4) to_floats(v, f);
        else to_floats(v, static_cast<const WT*>(nullptr), f);
    }
};

// E consecutive activations (F32 or F16) from a 16-byte (F32: E * 4 bytes) aligned address.
template <int E>
__device__ __forceinline__ void load_x_floats(const float* p, float (&f)[E]) {
#pragma unroll
    for (int j = 0; j < E / 4; ++j) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p) + j);
        f[4 * j] = v.x; f[4 * j + 1] = v.y; f[4 * j + 2] = v.z; f[4 * j + 3] = v.w;
    }
}
template <int E>
__device__ __forceinline__ void load_x_floats(const __half* p, float (&f)[E]) {
    if constexpr (E == 8) {
        to_floats(__ldg(reinterpret_cast<const uint4*>(p)), p, f);
    } else {
        const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
        const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
        const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
        f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y;
    }
}

// Reads: 2 rows of w from row (blockIdx.x * kGemvWarps + warp) * 2, x [n_tokens][n_in], bias.
// Writes: out [n_tokens][n_out] f32. Launch: grid ceil(n_out / (kGemvWarps * 2)), 128 threads;
// lane l takes the 16-byte pieces l, l + 32, ... of its rows (n_in % 8 == 0).
template <typename WT, typename XT, int NT>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_float_kernel(const WT* w, const XT* x, int64_t n_in, int64_t n_out, int n_tokens, const float* bias,
                      float* out, int accumulate) {
    constexpr int R = 2;
    using I = FloatItem<WT>;
    constexpr int E = I::E;
    pdl_begin();
    const int lane = threadIdx.x & 31;
    const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5)) * R;
    if (row0 >= n_out) return;
    int64_t rows[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = min(row0 + r, n_out - 1);
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
    // The writer lane's residual (accumulate) loads now, not after the dot products (gemv_qx).
    float resid = 0.0f;
    if (accumulate && lane < R * NT && row0 + lane / NT < n_out && lane % NT < n_tokens)
        resid = out[(lane % NT) * n_out + row0 + lane / NT];
    const int64_t n_items = n_in / E;
#pragma unroll 2
    for (int64_t it = lane; it < n_items; it += 32) {
        I wv[R];
#pragma unroll
        for (int r = 0; r < R; ++r) wv[r].load(w, n_in, rows[r], it);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t >= n_tokens) break;
            float xv[E];
            load_x_floats<E>(x + t * n_in + it * E, xv);
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int e = 0; e < E; ++e) acc[r][t] += wv[r].f[e] * xv[e];
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            float v = warp_sum(acc[r][t]);
            const int64_t o = row0 + r;
            if (lane == ((r * NT + t) & 31) && o < n_out && t < n_tokens) {
                if (bias) v += bias[o];
                out[t * n_out + o] = accumulate ? resid + v : v;
            }
        }
    }
}

// Warps that split one row group's items (1, 2 or 4): the fewest that give the launch about 16
// warps per SM (a short matrix of long rows would otherwise have few loads in flight), as long as
// every lane keeps a whole item or more. The 7B O projection (112 items per row) thus takes 2
// warps and 448 CTAs, which all fit beside the attention's CTAs in the decode step: 3.54 against
// 3.74 us alone at 4 warps, the 7B step +2 % (bench/NOTES.md, twenty-third session). Measured on
// the H200. MVLLM_GEMV_KSPLIT=1|2|4 forces it, for the kernel benchmark; MVLLM_GEMV_HALF_ITEM=1
// keeps the earlier half-item bound (measurements only).
std::atomic<int> g_k_split{-1};

int gemv_k_split(int64_t n_items, int64_t n_row_groups, bool k_quant) {
    static const int from_env = [] {
        const int v = env_int("MVLLM_GEMV_KSPLIT", 0);
        return v == 1 || v == 2 || v == 4 ? v : 0;
    }();
    const int hook = g_k_split.load(std::memory_order_relaxed);
    if (const int forced = hook >= 0 ? hook : from_env) return forced;
    // K-quant items (64 values, 2-4 parts) keep more loads in flight per lane: they split only
    // below half the warps (splitting 18944x3584 made them 10-15 % slower). MVLLM_GEMV_TARGET_WARPS
    // replaces the 2048 (measurements only).
    static const int64_t target_env = std::max(0, env_int("MVLLM_GEMV_TARGET_WARPS", 0));
    const int64_t target_warps = k_quant ? 1024 : target_env ? target_env : 2048;
    // Half items each lane keeps at the doubled split: 2 (a whole item; 1 with MVLLM_GEMV_HALF_ITEM=1).
    static const int64_t lane_halves = env_int("MVLLM_GEMV_HALF_ITEM", 0) == 1 ? 1 : 2;
    int ks = 1;
    while (ks < kGemvWarps && n_row_groups * ks < target_warps && 2 * n_items >= lane_halves * 32 * (2 * ks)) ks *= 2;
    return ks;
}

// The K split and grid of gemv_qx_kernel for n_out rows of n_in values.
struct GemvGrid {
    int ks;
    unsigned grid;
};
template <DType T, int NT, bool kPair>
GemvGrid gemv_qx_grid(int64_t n_in, int64_t n_out) {
    constexpr int R = rows_per_warp<T, NT, kPair>();
    const int ks = gemv_k_split(n_in / Item<T>::kValues, ceil_div(n_out, R), Item<T>::kParts > 1);
    return {ks, static_cast<unsigned>(ceil_div(n_out, kGemvWarps / ks * R))};
}

// Whether a GEMV over `weight_bytes` of weights triggers late: those of at least 6 MB, or
// MVLLM_GEMV_TRIGGER_MB=n (measurements) MB (0: every one; negative: none). Measured in batch-1
// decode (bench/NOTES.md, thirty-third session): every GEMV of the 7B geometry late (its smallest,
// the O projection, is 7.2 MB in q4_0) +4.2 %, the O projection left early no gain; every GEMV of
// the 0.5B late -5 % (its kernels are too short for the next one's weights to load after the
// trigger), only its LM head late even. So the big GEMVs let the kernels after them become resident
// only once their own first activation loads are back, and the small ones on entry.
int gemv_late_trigger(size_t weight_bytes) {
    static const int min_mb = env_int("MVLLM_GEMV_TRIGGER_MB", 6);
    return min_mb >= 0 && weight_bytes >= static_cast<size_t>(min_mb) * 1000000 ? kLateTriggerFlag : 0;
}

// GemvQxArgs::early for a launch over `weight_bytes` of weights.
int gemv_early_flags(size_t weight_bytes) {
    return (early_loads() & kEarlyGemv ? kEarlyWeightsFlag : 0) | (early_loads() & kEarlyResidual ? kEarlyResidualFlag : 0) |
           gemv_late_trigger(weight_bytes);
}

// With `rope` (kRope): the fused QKV rows, RoPE'd and stored by the epilogue (no `out`).
template <DType T, int NT, bool kPair, bool kRope = false>
void gemv_qx_launch(const TensorView& w, const TensorView* w2, const QxView& x, const float* bias, void* out,
                    DType out_type, int64_t n_out, int accumulate, cudaStream_t stream, const QkvRopeOut* rope = nullptr) {
    const auto [ks, grid] = gemv_qx_grid<T, NT, kPair>(x.n_in, n_out);
    const QuantMatrix m = quant_matrix<T>(w.data, w.ne[0], w.ne[1]);
    const QuantMatrix m2 = w2 ? quant_matrix<T>(w2->data, w2->ne[0], w2->ne[1]) : m;
    GemvQxArgs args{m, m2, x, bias, out, out_type, n_out, static_cast<int>(x.n_rows), accumulate, ks,
                    gemv_early_flags(w.n_bytes() + (w2 ? w2->n_bytes() : 0)), {}};
    if (rope) args.rope = *rope;
    if constexpr (T == DType::Q4_0 && NT == 1)
        launch_pdl(gemv_q4_0_b1_kernel<kPair, kRope>, grid, kGemvWarps * 32, 0, stream, args);
    else
        launch_pdl(gemv_qx_kernel<T, NT, kPair, kRope>, grid, kGemvWarps * 32, 0, stream, args);
}

// gemv_qx_stack_kernel over wqk (type T: the q and k rows) then wv (T2): with `rope`, the QKV
// epilogue; without, qk = wqk x and v = wv x (no bias).
template <DType T, DType T2, int NT, bool kRope>
void gemv_qx_stack_launch(const TensorView& wqk, const TensorView& wv, const QxView& x, const float* bias, void* qk,
                          void* v, cudaStream_t stream, const QkvRopeOut* rope) {
    const GemvGrid g1 = gemv_qx_grid<T, NT, false>(x.n_in, wqk.ne[1]), g2 = gemv_qx_grid<T2, NT, false>(x.n_in, wv.ne[1]);
    GemvQxArgs args{quant_matrix<T>(wqk.data, wqk.ne[0], wqk.ne[1]), quant_matrix<T2>(wv.data, wv.ne[0], wv.ne[1]), x,
                    bias, qk, DType::F32, wqk.ne[1], static_cast<int>(x.n_rows), 0, g1.ks,
                    gemv_early_flags(wqk.n_bytes() + wv.n_bytes()), {}};
    if (rope) args.rope = *rope;
    args.out2 = v;
    args.n_out2 = wv.ne[1];
    args.ks2 = g2.ks;
    args.ctas1 = g1.grid;
    launch_pdl(gemv_qx_stack_kernel<T, T2, NT, kRope>, g1.grid + g2.grid, kGemvWarps * 32, 0, stream, args);
}

// The weight type pairs of gemv_qx_stack_kernel (q | k, v): a Q4_K_M file's, where rows of 256k
// values take Q4_K and Q6_K, and other rows (the 0.5B's 896) Q4_0 and Q8_0 (model/export.cpp).
bool qkv_stack_types(DType qk, DType v) {
    return (qk == DType::Q4_K && v == DType::Q6_K) || (qk == DType::Q4_0 && v == DType::Q8_0);
}

template <int NT, bool kRope>
void gemv_qx_stack_dispatch(const TensorView& wqk, const TensorView& wv, const QxView& x, const float* bias, void* qk,
                            void* v, cudaStream_t stream, const QkvRopeOut* rope) {
    MVLLM_CHECK(qkv_stack_types(wqk.type, wv.type)) << "stacked QKV GEMV: " << type_name(wqk.type) << " q | k, "
                                                     << type_name(wv.type) << " v";
    if (wqk.type == DType::Q4_K) gemv_qx_stack_launch<DType::Q4_K, DType::Q6_K, NT, kRope>(wqk, wv, x, bias, qk, v, stream, rope);
    else gemv_qx_stack_launch<DType::Q4_0, DType::Q8_0, NT, kRope>(wqk, wv, x, bias, qk, v, stream, rope);
}

// The fused QKV projection with RoPE and the K/V store in the epilogue, up to kQkvRopeMaxRows rows
// (where every weight type's warp holds an even number of rows: whole RoPE pairs).
constexpr int64_t kQkvRopeMaxRows = 4;
template <int NT>
void qkv_rope_dispatch_type(const TensorView& w, const QxView& x, const float* bias, const QkvRopeOut& rope,
                            cudaStream_t stream) {
    const int64_t n_out = w.ne[1];
    switch (w.type) {
        case DType::Q4_0: gemv_qx_launch<DType::Q4_0, NT, false, true>(w, nullptr, x, bias, nullptr, DType::F32, n_out, 0, stream, &rope); break;
        case DType::Q8_0: gemv_qx_launch<DType::Q8_0, NT, false, true>(w, nullptr, x, bias, nullptr, DType::F32, n_out, 0, stream, &rope); break;
        case DType::Q4_K: gemv_qx_launch<DType::Q4_K, NT, false, true>(w, nullptr, x, bias, nullptr, DType::F32, n_out, 0, stream, &rope); break;
        case DType::Q6_K: gemv_qx_launch<DType::Q6_K, NT, false, true>(w, nullptr, x, bias, nullptr, DType::F32, n_out, 0, stream, &rope); break;
        default: MVLLM_CHECK(false) << "qkv_rope GEMV weight " << type_name(w.type);
    }
}

template <int NT, bool kPair>
void gemv_qx_dispatch_type(const TensorView& w, const TensorView* w2, const QxView& x, const float* bias, void* out,
                           DType out_type, int64_t n_out, int accumulate, cudaStream_t stream) {
    switch (w.type) {
        case DType::Q4_0: gemv_qx_launch<DType::Q4_0, NT, kPair>(w, w2, x, bias, out, out_type, n_out, accumulate, stream); break;
        case DType::Q8_0: gemv_qx_launch<DType::Q8_0, NT, kPair>(w, w2, x, bias, out, out_type, n_out, accumulate, stream); break;
        case DType::Q4_K: gemv_qx_launch<DType::Q4_K, NT, kPair>(w, w2, x, bias, out, out_type, n_out, accumulate, stream); break;
        case DType::Q6_K: gemv_qx_launch<DType::Q6_K, NT, kPair>(w, w2, x, bias, out, out_type, n_out, accumulate, stream); break;
        default: MVLLM_CHECK(false) << "integer GEMV: weight type " << type_name(w.type);
    }
}

// Slices of kGemvMaxColumns columns (more only in batch-invariant mode: every slice computes its
// columns exactly as a lone launch would).
// One column outside batch-invariant mode may take the streaming GEMV (gemv_stream.cuh), whose
// sums differ in order from the register GEMV's at other column counts.
template <bool kPair>
void gemv_qx_dispatch(const TensorView& w, const TensorView* w2, const QxView& x, const float* bias, void* out,
                      DType out_type, int64_t n_out, int accumulate, cudaStream_t stream, bool batch_invariant) {
    if (x.n_rows == 1 && !batch_invariant && launch_gemv_stream(w, w2, x, bias, out, out_type, accumulate, stream)) {
        MVLLM_CUDA_LAUNCH_CHECK();
        return;
    }
    const size_t out_elem = out_type == DType::F32 ? 4 : 2;
    for (int64_t t0 = 0; t0 < x.n_rows; t0 += kGemvMaxColumns) {
        const int64_t n = std::min<int64_t>(kGemvMaxColumns, x.n_rows - t0);
        QxView xs = x;
        xs.hi = x.hi + t0 * x.n_in;
        xs.lo = x.lo + t0 * x.n_in;
        xs.meta = x.meta + t0 * (x.n_in / 32);
        xs.n_rows = n;
        void* os = static_cast<uint8_t*>(out) + static_cast<size_t>(t0 * n_out) * out_elem;
        if (n == 1) gemv_qx_dispatch_type<1, kPair>(w, w2, xs, bias, os, out_type, n_out, accumulate, stream);
        else if (n == 2) gemv_qx_dispatch_type<2, kPair>(w, w2, xs, bias, os, out_type, n_out, accumulate, stream);
        else if (n <= 4) gemv_qx_dispatch_type<4, kPair>(w, w2, xs, bias, os, out_type, n_out, accumulate, stream);
        else gemv_qx_dispatch_type<8, kPair>(w, w2, xs, bias, os, out_type, n_out, accumulate, stream);
        MVLLM_CUDA_LAUNCH_CHECK();
    }
}

template <typename WT, typename XT>
void gemv_float_columns(const TensorView& w, const TensorView& x, const float* bias, float* out, int accumulate,
                        cudaStream_t stream) {
    const int64_t n_in = w.ne[0], n_out = w.ne[1];
    const unsigned grid = static_cast<unsigned>(ceil_div(n_out, kGemvWarps * 2));
    const auto* wp = static_cast<const WT*>(w.data);
    for (int64_t t0 = 0; t0 < x.ne[1]; t0 += kGemvMaxColumns) {  // slices, as gemv_qx_dispatch
        const int n = static_cast<int>(std::min<int64_t>(kGemvMaxColumns, x.ne[1] - t0));
        const auto* xp = static_cast<const XT*>(x.data) + t0 * n_in;
        float* op = out + t0 * n_out;
#define MVLLM_FLOAT_GEMV(NT) \
    launch_pdl(gemv_float_kernel<WT, XT, NT>, grid, kGemvWarps * 32, 0, stream, wp, xp, n_in, n_out, n, bias, op, accumulate)
        if (n == 1) MVLLM_FLOAT_GEMV(1);
        else if (n == 2) MVLLM_FLOAT_GEMV(2);
        else if (n <= 4) MVLLM_FLOAT_GEMV(4);
        else MVLLM_FLOAT_GEMV(8);
#undef MVLLM_FLOAT_GEMV
    }
}

template <typename XT>
void gemv_float_dispatch(const TensorView& w, const TensorView& x, const float* bias, float* out, int accumulate,
                         cudaStream_t stream) {
    switch (w.type) {
        case DType::F32: gemv_float_columns<float, XT>(w, x, bias, out, accumulate, stream); break;
        case DType::F16: gemv_float_columns<__half, XT>(w, x, bias, out, accumulate, stream); break;
        case DType::BF16: gemv_float_columns<__nv_bfloat16, XT>(w, x, bias, out, accumulate, stream); break;
        default: MVLLM_CHECK(false) << "float GEMV: weight type " << type_name(w.type);
    }
}

}  // namespace

int gemv_one_column_k_split(DType type, int64_t n_in, int64_t n_out, bool pair) {
    auto split = [&]<DType T>() {
        return pair ? gemv_qx_grid<T, 1, true>(n_in, n_out).ks : gemv_qx_grid<T, 1, false>(n_in, n_out).ks;
    };
    switch (type) {
        case DType::Q4_0: return split.template operator()<DType::Q4_0>();
        case DType::Q8_0: return split.template operator()<DType::Q8_0>();
        case DType::Q4_K: return split.template operator()<DType::Q4_K>();
        case DType::Q6_K: return split.template operator()<DType::Q6_K>();
        default: MVLLM_CHECK(false) << "integer GEMV: weight type " << type_name(type); return 0;
    }
}

void set_gemv_k_split(int ks) { g_k_split.store(ks == 1 || ks == 2 || ks == 4 ? ks : -1, std::memory_order_relaxed); }

bool gemv_uses_qx(DType t) { return t == DType::Q4_0 || t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q6_K; }

void launch_gemv_qx(const TensorView& w, const QxView& qx, const TensorView& bias, const TensorView& out,
                    GemvEpilogue epilogue, cudaStream_t stream, bool batch_invariant) {
    MVLLM_CHECK(w.ne[0] == qx.n_in && out.ne[0] == w.ne[1] && out.ne[1] == qx.n_rows && out.type == DType::F32)
        << "gemv_qx shapes";
    const float* b = bias.data ? static_cast<const float*>(bias.data) : nullptr;
    gemv_qx_dispatch<false>(w, nullptr, qx, b, out.data, DType::F32, w.ne[1],
                            epilogue == GemvEpilogue::Accumulate ? 1 : 0, stream, batch_invariant);
}

void launch_gemv_qx_swiglu(const TensorView& w_gate, const TensorView& w_up, const QxView& qx,
                           const TensorView& out, cudaStream_t stream, bool batch_invariant) {
    MVLLM_CHECK(w_gate.type == w_up.type && w_gate.ne == w_up.ne && w_gate.ne[0] == qx.n_in &&
                out.ne[0] == w_gate.ne[1] && out.ne[1] == qx.n_rows)
        << "gemv_qx_swiglu shapes";
    gemv_qx_dispatch<true>(w_gate, &w_up, qx, nullptr, out.data, out.type, w_gate.ne[1], 0, stream, batch_invariant);
}

void launch_gemv_float(const TensorView& w, const TensorView& x, const TensorView& bias, const TensorView& out,
                       GemvEpilogue epilogue, cudaStream_t stream) {
    MVLLM_CHECK(w.ne[0] == x.ne[0] && w.ne[0] % 8 == 0 && out.ne[0] == w.ne[1] && out.ne[1] == x.ne[1] &&
                out.type == DType::F32 && x.ne[1] >= 1)
        << "gemv_float shapes";
    const float* b = bias.data ? static_cast<const float*>(bias.data) : nullptr;
    const int acc = epilogue == GemvEpilogue::Accumulate ? 1 : 0;
    float* o = static_cast<float*>(out.data);
    if (x.type == DType::F32) gemv_float_dispatch<float>(w, x, b, o, acc, stream);
    else if (x.type == DType::F16) gemv_float_dispatch<__half>(w, x, b, o, acc, stream);
    else MVLLM_CHECK(false) << "float GEMV input " << type_name(x.type);
    MVLLM_CUDA_LAUNCH_CHECK();
}

bool qkv_rope_gemv_supported(const TensorView& wqkv, const TensorView& wv, int64_t n_rows) {
    return gemv_uses_qx(wqkv.type) && n_rows >= 1 && n_rows <= kQkvRopeMaxRows &&
           (!wv.data || qkv_stack_types(wqkv.type, wv.type));
}

int64_t qkv_rope_gemv_ctas(const TensorView& wqkv, const TensorView& wv, int64_t n_rows) {
    MVLLM_CHECK(qkv_rope_gemv_supported(wqkv, wv, n_rows)) << "qkv_rope GEMV: " << type_name(wqkv.type);
    const int64_t n_in = wqkv.ne[0];
    auto grid = [&]<int NT>(const TensorView& w) -> int64_t {
        switch (w.type) {
            case DType::Q4_0: return gemv_qx_grid<DType::Q4_0, NT, false>(n_in, w.ne[1]).grid;
            case DType::Q8_0: return gemv_qx_grid<DType::Q8_0, NT, false>(n_in, w.ne[1]).grid;
            case DType::Q4_K: return gemv_qx_grid<DType::Q4_K, NT, false>(n_in, w.ne[1]).grid;
            default: return gemv_qx_grid<DType::Q6_K, NT, false>(n_in, w.ne[1]).grid;
        }
    };
    auto ctas = [&]<int NT>() { return grid.template operator()<NT>(wqkv) + (wv.data ? grid.template operator()<NT>(wv) : 0); };
    return n_rows == 1 ? ctas.template operator()<1>() : n_rows == 2 ? ctas.template operator()<2>() : ctas.template operator()<4>();
}

void launch_qkv_rope_gemv(const TensorView& wqkv, const TensorView& wv, const QxView& qx, const TensorView& bias,
                          const DeviceBatch& batch, const DeviceKvLayer& kv, int32_t n_heads, const float* inv_freq,
                          const TensorView& q, cudaStream_t stream) {
    const int64_t q_dim = static_cast<int64_t>(n_heads) * kv.head_dim, kv_dim = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
    const int64_t n_stacked = wqkv.ne[1] + (wv.data ? wv.ne[1] : 0);
    MVLLM_CHECK(qkv_rope_gemv_supported(wqkv, wv, qx.n_rows) && wqkv.ne[0] == qx.n_in &&
                (!wv.data || (wv.ne[0] == qx.n_in && wqkv.ne[1] == q_dim + kv_dim)) && n_stacked == q_dim + 2 * kv_dim &&
                q.type == DType::F32 && q.ne[0] == q_dim && q.ne[1] == qx.n_rows && qx.n_rows == batch.n_tokens)
        << "qkv_rope GEMV shapes";
    MVLLM_CHECK(!bias.data || (bias.type == DType::F32 && bias.ne[0] == n_stacked)) << "qkv_rope GEMV bias";
    const QkvRopeOut rope = qkv_rope_out(batch, kv, n_heads, inv_freq, q);
    const float* b = bias.data ? static_cast<const float*>(bias.data) : nullptr;
    if (wv.data) {
        if (qx.n_rows == 1) gemv_qx_stack_dispatch<1, true>(wqkv, wv, qx, b, nullptr, nullptr, stream, &rope);
        else if (qx.n_rows == 2) gemv_qx_stack_dispatch<2, true>(wqkv, wv, qx, b, nullptr, nullptr, stream, &rope);
        else gemv_qx_stack_dispatch<4, true>(wqkv, wv, qx, b, nullptr, nullptr, stream, &rope);
    } else if (qx.n_rows == 1) {
        qkv_rope_dispatch_type<1>(wqkv, qx, b, rope, stream);
    } else if (qx.n_rows == 2) {
        qkv_rope_dispatch_type<2>(wqkv, qx, b, rope, stream);
    } else {
        qkv_rope_dispatch_type<4>(wqkv, qx, b, rope, stream);
    }
    MVLLM_CUDA_LAUNCH_CHECK();
}

bool qkv_stack_gemv_supported(const TensorView& wqk, const TensorView& wv, int64_t n_rows) {
    return qkv_stack_types(wqk.type, wv.type) && n_rows >= 1 && n_rows <= kGemvMaxColumns;
}

void launch_qkv_stack_gemv(const TensorView& wqk, const TensorView& wv, const QxView& qx, const TensorView& qk,
                           const TensorView& v, cudaStream_t stream) {
    MVLLM_CHECK(qkv_stack_gemv_supported(wqk, wv, qx.n_rows) && wqk.ne[0] == qx.n_in && wv.ne[0] == qx.n_in &&
                qk.type == DType::F32 && v.type == DType::F32 && qk.ne[0] == wqk.ne[1] && v.ne[0] == wv.ne[1] &&
                qk.ne[1] == qx.n_rows && v.ne[1] == qx.n_rows)
        << "stacked QKV GEMV shapes";
    const int64_t n = qx.n_rows;
    if (n == 1) gemv_qx_stack_dispatch<1, false>(wqk, wv, qx, nullptr, qk.data, v.data, stream, nullptr);
    else if (n == 2) gemv_qx_stack_dispatch<2, false>(wqk, wv, qx, nullptr, qk.data, v.data, stream, nullptr);
    else if (n <= 4) gemv_qx_stack_dispatch<4, false>(wqk, wv, qx, nullptr, qk.data, v.data, stream, nullptr);
    else gemv_qx_stack_dispatch<8, false>(wqk, wv, qx, nullptr, qk.data, v.data, stream, nullptr);
    MVLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace mvllm::cuda
