#include "backend/cuda/ops.cuh"

#include "backend/backend.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_set>

#include "backend/cuda/common.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/env.h"
#include "backend/cuda/logit_rows.cuh"

namespace mvllm::cuda {
namespace {

bool is_float_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// The vocabulary id of a row: ids[row], or for fed_token(r) (negative) fed[r].
__device__ __forceinline__ int32_t row_token(const int32_t* ids, const int32_t* fed, int64_t row) {
    const int32_t id = ids[row];
    return id < 0 ? fed[-1 - id] : id;
}

// Reads: table rows row_token(row) (quantised, one 32-value chunk per thread). Writes: out row.
// Launch: grid (ceil(chunks / 128), n_rows), 128 threads.
template <DType T>
__global__ void embed_quant_kernel(QuantMatrix table, const int32_t* ids, const int32_t* fed, void* out, DType out_type,
                                   int64_t width) {
    pdl_begin();
    const int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (c * kChunk >= width) return;
    const int64_t row = blockIdx.x;
    float w[kChunk];
    dequant_chunk<T>(table, row_token(ids, fed, row), c, w);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) store_any(out, out_type, row * width + c * kChunk + i, w[i]);
}

// Reads: table rows row_token(row) (F32/F16/BF16). Writes: out row. Grid (n_rows, ceil(width / 256)).
__global__ void embed_float_kernel(const void* table, DType table_type, const int32_t* ids, const int32_t* fed,
                                   void* out, DType out_type, int64_t width) {
    pdl_begin();
    const int64_t i = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i >= width) return;
    const int64_t row = blockIdx.x;
    const int64_t id = row_token(ids, fed, row);
    store_any(out, out_type, row * width + i, load_any(table, table_type, id * width + i));
}

// Reads: x row, weight. Writes: out row. One CTA (rms_threads()) per row.
template <typename XT, typename OT>
__global__ void rms_norm_kernel(const XT* x, const void* weight, DType weight_type, float eps, OT* out,
                                int64_t width) {
    pdl_begin();
    __shared__ float scratch[32];
    const int64_t base = blockIdx.x * width;
    const float scale = rms_scale(x, base, width, eps, scratch);
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
        store_f(out, base + i, load_f(x, base + i) * scale * load_any(weight, weight_type, i));
}

// Reads/writes x in place. One thread per (row, pair i); loops over heads.
// Grid (n_rows, ceil(half / 64)), 64 threads.
__global__ void rope_kernel(float* x, int32_t n_heads, int32_t head_dim, int64_t width,
                            const int32_t* positions, const float* inv_freq) {
    pdl_begin();
    const int32_t half = head_dim / 2;
    const int32_t i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= half) return;
    const int64_t row = blockIdx.x;
    const double angle = static_cast<double>(positions[row]) * inv_freq[i];
    double s, c;
    sincos(angle, &s, &c);
    const float cs = static_cast<float>(c), sn = static_cast<float>(s);
    float* r = x + row * width;
    for (int32_t h = 0; h < n_heads; ++h) {
        float* v = r + static_cast<int64_t>(h) * head_dim;
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cs - x1 * sn;
        v[i + half] = x1 * cs + x0 * sn;
    }
}

// Reads gate, up; writes out. Grid-stride, 256 threads.
__global__ void silu_mul_kernel(const void* gate, DType gt, const void* up, DType ut, void* out, DType ot,
                                int64_t n) {
    pdl_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float g = load_any(gate, gt, i);
        store_any(out, ot, i, g / (1.0f + expf(-g)) * load_any(up, ut, i));
    }
}

// Reads gu [n_rows][2 * n_ff] f32 (gate columns, then up columns); writes out [n_rows][n_ff]
// = silu(gate) * up, as silu_mul_kernel. Grid (n_rows, ceil(n_ff / (4 * 256))), 256 threads, four
// columns per thread (16-byte loads; n_ff % 4 == 0).
template <typename OT>
__global__ void silu_mul_stacked_kernel(const float* gu, int64_t n_ff, OT* out) {
    pdl_begin();
    const int64_t j = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 4;
    if (j >= n_ff) return;
    const int64_t r = blockIdx.x;
    const float4 g = *reinterpret_cast<const float4*>(gu + r * 2 * n_ff + j);
    const float4 u = *reinterpret_cast<const float4*>(gu + r * 2 * n_ff + n_ff + j);
    const float gs[4] = {g.x, g.y, g.z, g.w}, us[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) store_f(out, r * n_ff + j + k, gs[k] / (1.0f + expf(-gs[k])) * us[k]);
}

// acc[i] += x[i]. Grid-stride, 256 threads.
__global__ void add_kernel(float* acc, const void* x, DType xt, int64_t n) {
    pdl_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        acc[i] += load_any(x, xt, i);
}

// x[r][i] += bias[i]. Grid (n_rows, ceil(width / 256)).
__global__ void add_bias_kernel(float* x, const void* bias, DType bt, int64_t width) {
    pdl_begin();
    const int64_t i = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < width) x[blockIdx.x * width + i] += load_any(bias, bt, i);
}

// out row j = x row rows[j] (bytes). Grid (n_out_rows, ceil(row_bytes / 4 / 256)).
__global__ void gather_rows_kernel(const uint8_t* x, const int32_t* rows, uint8_t* out, size_t row_bytes) {
    pdl_begin();
    const size_t i = (blockIdx.y * static_cast<size_t>(blockDim.x) + threadIdx.x) * 4;
    if (i >= row_bytes) return;
    const uint8_t* src = x + static_cast<size_t>(rows[blockIdx.x]) * row_bytes;
    uint8_t* dst = out + blockIdx.x * row_bytes;
    if (i + 4 <= row_bytes) {
        *reinterpret_cast<uint32_t*>(dst + i) = *reinterpret_cast<const uint32_t*>(src + i);
    } else {
        for (size_t b = i; b < row_bytes; ++b) dst[b] = src[b];
    }
}

// dst[i] = src[i] converted. Grid-stride.
__global__ void convert_kernel(const void* src, DType st, void* dst, DType dt, int64_t n) {
    pdl_begin();
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        store_any(dst, dt, i, load_any(src, st, i));
}

// Reads row blockIdx.y of x, elements [blockIdx.x * kArgmaxChunk, +kArgmaxChunk); merges its
// (max, first index) into keys[row] (zeroed before). Grid (ceil(width / kArgmaxChunk), n_rows),
// kArgmaxThreads threads. Each thread issues all its loads before it compares (a loop that compared
// as it went waited an L2 round trip per value: 16 in a row); the maximum does not depend on order.
constexpr int kArgmaxThreads = 256, kArgmaxChunk = 4096, kArgmaxPer = kArgmaxChunk / kArgmaxThreads;
__global__ void __launch_bounds__(kArgmaxThreads) argmax_partial_kernel(const float* x, int64_t width,
                                                                       unsigned long long* keys) {
    pdl_begin();
    __shared__ unsigned long long best[kArgmaxThreads / 32];
    const float* r = x + blockIdx.y * width;
    const int64_t begin = static_cast<int64_t>(blockIdx.x) * kArgmaxChunk + threadIdx.x;
    float v[kArgmaxPer];
#pragma unroll
    for (int j = 0; j < kArgmaxPer; ++j) {
        const int64_t i = begin + j * kArgmaxThreads;
        v[j] = i < width ? __ldcg(r + i) : 0.0f;
    }
    unsigned long long k = 0;
#pragma unroll
    for (int j = 0; j < kArgmaxPer; ++j) {
        const int64_t i = begin + j * kArgmaxThreads;
        if (i < width) k = max(k, argmax_key(v[j], static_cast<uint32_t>(i)));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) k = max(k, __shfl_xor_sync(0xffffffffu, k, o));
    if ((threadIdx.x & 31) == 0) best[threadIdx.x >> 5] = k;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kArgmaxThreads / 32; ++w) k = max(k, best[w]);
        atomicMax(keys + blockIdx.y, k);
    }
}

// out[blockIdx.x] = -log sum_i exp(x[row][i] - max) for row blockIdx.x. 1024 threads. A thread
// merges its values i = tid, tid + 1024, ... in that order, loading eight ahead (a vocabulary row
// is ~150 values per thread, each an L2 round trip when loaded one at a time).
__global__ void max_logprob_kernel(const float* x, int64_t width, float* out) {
    pdl_begin();
    __shared__ float ms[32], ss[32];
    const float* r = x + blockIdx.x * width;
    float m = -INFINITY, s = 0.0f;
    constexpr int kAhead = 8;
    const int64_t stride = blockDim.x;
    for (int64_t i0 = threadIdx.x; i0 < width; i0 += kAhead * stride) {
        float v[kAhead];
#pragma unroll
        for (int k = 0; k < kAhead; ++k) v[k] = i0 + k * stride < width ? __ldcg(r + i0 + k * stride) : 0.0f;
#pragma unroll
        for (int k = 0; k < kAhead; ++k)
            if (i0 + k * stride < width) merge_max_sum(m, s, v[k], 1.0f);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) merge_max_sum(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if ((threadIdx.x & 31) == 0) {
        ms[threadIdx.x >> 5] = m;
        ss[threadIdx.x >> 5] = s;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) merge_max_sum(m, s, ms[w], ss[w]);
        out[blockIdx.x] = -logf(s);
    }
}

// out[row] (and fed[row], when not null) = the index packed in keys[row]. One thread per row.
// Also resets the keys to zero for the next launch (so no memset precedes the partial kernel).
__global__ void argmax_finish_kernel(unsigned long long* keys, int32_t* out, int32_t* fed, int64_t n_rows) {
    pdl_begin();
    const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (r >= n_rows) return;
    const int32_t id = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(keys[r] & 0xFFFFFFFFu));
    out[r] = id;
    if (fed) fed[r] = id;
    keys[r] = 0;
}

// ---- The sampled draw on the device (core/race.h): race_row's race in log space. Token t of a
// drawn row scores x_t / T - log(-log u_t), a monotone function of race_row's w_t / -log(u_t), so the
// winner is the host's up to rounding ties; a row with temperature 0 scores x_t (its argmax).
// Ties and NaN as the host: the first index wins, NaN never does.
constexpr int kDrawThreads = 256, kDrawChunk = 4096, kDrawPer = kDrawChunk / kDrawThreads;

__device__ __forceinline__ bool draw_beats(double s, int32_t i, double best, int32_t best_i) {
    return s > best || (s == best && i < best_i);
}

// The (score, index) of a warp's best, in every lane.
__device__ __forceinline__ void draw_warp_best(double& best, int32_t& best_i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const double s = __shfl_xor_sync(0xffffffffu, best, o);
        const int32_t i = __shfl_xor_sync(0xffffffffu, best_i, o);
        if (draw_beats(s, i, best, best_i)) best = s, best_i = i;
    }
}

// Token i's race score, x / T - log(-log u_i), or NaN where min_p drops it, in one function that is
// not inlined: the double logarithms and the hash, inlined into each of the kDrawPer unrolled
// steps, make a kernel whose warps waited on instruction fetch 60 % of the time (ncu, twenty-seventh
// session). Used when DrawScratch::outlined_score (not yet measured).
__device__ __noinline__ double draw_score(float x, int32_t i, const TokenDraw& d, float max, double inv_t) {
    if (d.min_p > 0.0f && !(exp((static_cast<double>(x) - max) * inv_t) >= d.min_p))
        return __longlong_as_double(0x7ff8000000000000LL);
    return x * inv_t - log(-log(race_uniform(d.key, i)));
}

// A race score's upper bound from its token's uniform u: -log u >= 1 - u, so x / T - log(-log u) <=
// t - log(1 - u) with t = x / T. Its logarithm is a float one (fast math: an absolute error below
// ~4e-5 for any 1 - u of a 53-bit uniform), which kPruneSlack covers with the rounding of 1 - u: a
// token whose bound is below a score some token reaches cannot win the race.
constexpr double kPruneSlack = 1e-3;
__device__ __forceinline__ double race_bound(double t, double u) {
    return t - static_cast<double>(__logf(static_cast<float>(1.0 - u))) + kPruneSlack;
}

// Row blockIdx.y of x, elements [blockIdx.x * kDrawChunk, +kDrawChunk): the best (score, index)
// into part_score / part_index [row][gridDim.x]. keys: the rows' maxima (argmax_partial_kernel),
// read only for rows with min_p > 0, which keep the tokens with exp((x_t - max) / T) >= min_p as
// race_row does. Grid (ceil(width / kDrawChunk), n_rows), kDrawThreads threads. kOutlined: the
// score by draw_score (the same arithmetic).
template <bool kOutlined>
__global__ void __launch_bounds__(kDrawThreads) draw_partial_kernel(const float* x, int64_t width, const TokenDraw* draws,
                                                                   const unsigned long long* keys, const DrawCut* cuts,
                                                                   double* part_score, int32_t* part_index) {
    pdl_begin();
    __shared__ TokenDraw row_draw;
    __shared__ DrawCut row_cut;
    __shared__ double warp_score[kDrawThreads / 32];
    __shared__ int32_t warp_index[kDrawThreads / 32];
    if (threadIdx.x == 0) {
        row_draw = draws[blockIdx.y];
        const TokenDraw& d = row_draw;
        const bool cut = d.temperature > 0.0f && ((d.top_k > 0 && d.top_k < width) || d.top_p < 1.0f);
        row_cut = cut ? cuts[blockIdx.y] : DrawCut{0u, INT_MAX};  // (every order key is above 0)
    }
    const float* r = x + blockIdx.y * width;
    const int64_t begin = static_cast<int64_t>(blockIdx.x) * kDrawChunk + threadIdx.x;
    float v[kDrawPer];
#pragma unroll
    for (int j = 0; j < kDrawPer; ++j) {
        const int64_t i = begin + j * kDrawThreads;
        v[j] = i < width ? __ldcg(r + i) : 0.0f;
    }
    __syncthreads();
    const TokenDraw d = row_draw;
    const DrawCut c = row_cut;
    const float max = d.min_p > 0.0f ? order_key_value(static_cast<uint32_t>(keys[blockIdx.y] >> 32)) : 0.0f;
    // race_row draws when the row's maximum is finite (min_p needs it; without min_p the log-space
    // score ranks infinities as the argmax would)
    const bool drawn = d.temperature > 0.0f && (d.min_p <= 0.0f || isfinite(max));
    const double inv_t = drawn ? 1.0 / d.temperature : 0.0;
    double best = -INFINITY;
    int32_t best_i = INT_MAX;
    const auto kept = [&](int j, int64_t i) {  // in the row, not NaN, and not cut by top_k / top_p
        return i < width && !isnan(v[j]) && (!drawn || c.keeps(order_key(v[j]), i));
    };
    // A kept token's exact score (x / T - log(-log u): two double logarithms, most of what this
    // kernel executed before the pruning below), unless min_p drops it.
    const auto race = [&](float xv, int32_t i, double u) {
        if (d.min_p > 0.0f && !(exp((static_cast<double>(xv) - max) * inv_t) >= d.min_p)) return;
        const double s = static_cast<double>(xv) * inv_t - log(-log(u));
        if (draw_beats(s, i, best, best_i)) best = s, best_i = i;
    };
    if (drawn && !kOutlined) {
        // The race pruned warp by warp: every lane scores its first token exactly, then the other
        // tokens whose race_bound reaches the warp's best so far are listed (warp votes, in shared
        // memory) and scored 32 at a time, so that the lanes of a warp run the exact score together
        // on the few that can still win (a few per cent of a flat row's, by bench/NOTES.md's budget). Skipping lane by lane instead left
        // the warp running the exact path for whichever lane needed it, and was slower (thirty-first
        // session, call 3).
        __shared__ int32_t listed[kDrawThreads / 32][(kDrawPer - 1) * 32];
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (kept(0, begin)) race(v[0], static_cast<int32_t>(begin), race_uniform(d.key, static_cast<int32_t>(begin)));
        double bar = best;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) bar = fmax(bar, __shfl_xor_sync(0xffffffffu, bar, o));
        int n = 0;  // the warp's listed tokens
#pragma unroll
        for (int j = 1; j < kDrawPer; ++j) {
            const int64_t i = begin + j * kDrawThreads;
            const bool may_win =
                kept(j, i) && race_bound(v[j] * inv_t, race_uniform(d.key, static_cast<int32_t>(i))) >= bar;
            const unsigned votes = __ballot_sync(0xffffffffu, may_win);
            if (may_win) listed[warp][n + __popc(votes & ((1u << lane) - 1u))] = static_cast<int32_t>(i);
            n += __popc(votes);
        }
        __syncwarp();
        for (int k = lane; k < n; k += 32) {
            const int32_t i = listed[warp][k];
            race(__ldcg(r + i), i, race_uniform(d.key, i));
        }
    } else {
#pragma unroll
        for (int j = 0; j < kDrawPer; ++j) {
            const int64_t i = begin + j * kDrawThreads;
            if (!kept(j, i)) continue;
            double s = v[j];
            if constexpr (kOutlined) {
                if (drawn) {
                    s = draw_score(v[j], static_cast<int32_t>(i), d, max, inv_t);
                    if (isnan(s)) continue;  // min_p drops it
                }
            }
            if (draw_beats(s, static_cast<int32_t>(i), best, best_i)) best = s, best_i = static_cast<int32_t>(i);
        }
    }
    draw_warp_best(best, best_i);
    if ((threadIdx.x & 31) == 0) {
        warp_score[threadIdx.x >> 5] = best;
        warp_index[threadIdx.x >> 5] = best_i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kDrawThreads / 32; ++w)
            if (draw_beats(warp_score[w], warp_index[w], best, best_i)) best = warp_score[w], best_i = warp_index[w];
        const int64_t p = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
        part_score[p] = best;
        part_index[p] = best_i;
    }
}

// out[row] (and fed[row]) = the best of the row's n_parts partials (0 when none: every value
// NaN); keys[row] back to zero. One warp per row.
__global__ void draw_finish_kernel(const double* part_score, const int32_t* part_index, int n_parts,
                                   unsigned long long* keys, int32_t* out, int32_t* fed, int64_t n_rows) {
    pdl_begin();
    const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + (threadIdx.x >> 5);
    if (row >= n_rows) return;
    double best = -INFINITY;
    int32_t best_i = INT_MAX;
    for (int p = threadIdx.x & 31; p < n_parts; p += 32) {
        const double s = part_score[row * n_parts + p];
        const int32_t i = part_index[row * n_parts + p];
        if (draw_beats(s, i, best, best_i)) best = s, best_i = i;
    }
    draw_warp_best(best, best_i);
    if ((threadIdx.x & 31) != 0) return;
    const int32_t id = best_i == INT_MAX ? 0 : best_i;
    out[row] = id;
    if (fed) fed[row] = id;
    keys[row] = 0;
}

// Where rope_kv_store_kernel reads a token's projections. FusedQkvRows: the fused QKV rows (q and
// k rows in RoPE pairs, rope.cuh): a token's q | k part at qk + row * qk_width and its v part at
// v_rows + row * v_width (one [q_dim | kv_dim | kv_dim] row, or with V apart two planes, ops.cuh),
// plus bias ([q_dim + 2 kv_dim] in the stacked order, or null: added first, as a matmul with bias
// would). SplitQkvRows: separate q, k, v rows in head-dim order (unfused projections, no bias).
// pair(row, idx): the pair (dim i, dim i + half) of q / k head idx / half (q heads first), i = idx
// % half; v(row, idx): value idx of the row's v part.
struct FusedQkvRows {
    const float* qk;
    const float* v_rows;
    const float* bias;
    int32_t qk_width, v_width, v_offset;  // v_offset: q_dim + kv_dim, the v part's first bias index
    __device__ __forceinline__ float2 pair(int row, int32_t idx, int32_t) const {
        const float* src = qk + static_cast<int64_t>(row) * qk_width;
        const int64_t c = 2 * static_cast<int64_t>(idx);  // the pair's rows
        return bias ? make_float2(src[c] + bias[c], src[c + 1] + bias[c + 1]) : make_float2(src[c], src[c + 1]);
    }
    __device__ __forceinline__ float v(int row, int32_t idx) const {
        const float x = v_rows[static_cast<int64_t>(row) * v_width + idx];
        return bias ? x + bias[v_offset + idx] : x;
    }
};
struct SplitQkvRows {
    const float *q, *k, *v_rows;
    int32_t n_heads, n_kv_heads, head_dim;
    __device__ __forceinline__ float2 pair(int row, int32_t idx, int32_t half) const {
        const int32_t h = idx / half, i = idx % half;
        const float* src = h < n_heads ? q + (static_cast<int64_t>(row) * n_heads + h) * head_dim
                                       : k + (static_cast<int64_t>(row) * n_kv_heads + h - n_heads) * head_dim;
        return make_float2(src[i], src[i + half]);
    }
    __device__ __forceinline__ float v(int row, int32_t idx) const {
        return v_rows[static_cast<int64_t>(row) * n_kv_heads * head_dim + idx];
    }
};

// Reads a token's projections (Rows, above). Writes q (rotated) and the row's cache slot: K
// (rotated) and V. The row's head_dim / 2 (cos, sin) pairs are computed once per CTA into shared
// memory, then every head uses them. Grid (n_tokens, CTAs per row), 256 threads; head_dim <= 2 *
// kMaxRopePairs.
constexpr int kMaxRopePairs = 128;
template <typename Rows>
__global__ void rope_kv_store_kernel(Rows rows, QkvRopeOut out) {
    // The rotation depends only on the step's metadata (uploaded before the first kernel), so its
    // double-precision sincos runs while the QKV matmul before this kernel drains.
    pdl_trigger();
    __shared__ float2 rot[kMaxRopePairs];
    const int32_t half = out.head_dim / 2;
    const int32_t q_dim = out.n_heads * out.head_dim, kv_dim = out.n_kv_heads * out.head_dim;
    const int row = static_cast<int>(blockIdx.x);
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) rot[i] = rope_cos_sin(out.positions[row], out.inv_freq[i]);
    const int64_t slot = out.slot_mapping[row];
    __syncthreads();
    pdl_wait();
    // One (head, pair) per thread step: q heads first, then k heads; the gridDim.y CTAs of a row
    // share its work (a decode step has few rows).
    const int32_t first = blockIdx.y * blockDim.x + threadIdx.x, stride = blockDim.x * gridDim.y;
    for (int32_t idx = first; idx < (out.n_heads + out.n_kv_heads) * half; idx += stride) {
        const float2 x = rows.pair(row, idx, half);
        out.store_rotated(2 * static_cast<int64_t>(idx), row, slot, rope_rotate(x.x, x.y, rot[idx % half]));
    }
    for (int32_t idx = first; idx < kv_dim; idx += stride) out.store_v(q_dim + kv_dim + idx, slot, rows.v(row, idx));
}
// rope_kv_store_kernel's grid: a row per token, spread over 4 CTAs while the batch is small.
dim3 rope_kv_store_grid(const DeviceBatch& batch) {
    return dim3(static_cast<unsigned>(batch.n_tokens), batch.n_tokens < 512 ? 4u : 1u);
}

// Reads k, v rows of token blockIdx.x; writes them to the token's cache slot.
// Grid (n_tokens, ceil(n_kv_heads * head_dim / 256)), 256 threads. (Rows go in x: a step may
// have more than 65535 of them.)
__global__ void kv_store_kernel(const int64_t* slot_mapping, const void* k, const void* v, DType in_type,
                                void* kc, void* vc, DType cache_type, int32_t n_kv_heads, int32_t head_dim,
                                int32_t block_size) {
    pdl_begin();
    const int32_t width = n_kv_heads * head_dim;
    const int32_t i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= width) return;
    const int64_t token = blockIdx.x;
    const int64_t slot = slot_mapping[token];
    const int64_t block = slot / block_size, offset = slot % block_size;
    const int32_t h = i / head_dim, d = i % head_dim;
    const int64_t dst = ((block * n_kv_heads + h) * block_size + offset) * head_dim + d;
    store_any(kc, cache_type, dst, load_any(k, in_type, token * width + i));
    store_any(vc, cache_type, dst, load_any(v, in_type, token * width + i));
}

int grid_stride_blocks(int64_t n) { return static_cast<int>(std::min<int64_t>(ceil_div(n, 256), 4096)); }

template <typename XT>
void rms_norm_dispatch_out(const TensorView& x, const TensorView& weight, float eps, const TensorView& out,
                           cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>(x.ne[1]));
    const XT* xp = static_cast<const XT*>(x.data);
    switch (out.type) {
        case DType::F32: launch_pdl(rms_norm_kernel<XT, float>, grid, rms_threads(), 0, stream, xp, weight.data, weight.type, eps, static_cast<float*>(out.data), x.ne[0]); break;
        case DType::F16: launch_pdl(rms_norm_kernel<XT, __half>, grid, rms_threads(), 0, stream, xp, weight.data, weight.type, eps, static_cast<__half*>(out.data), x.ne[0]); break;
        case DType::BF16: launch_pdl(rms_norm_kernel<XT, __nv_bfloat16>, grid, rms_threads(), 0, stream, xp, weight.data, weight.type, eps, static_cast<__nv_bfloat16*>(out.data), x.ne[0]); break;
        default: MVLLM_CHECK(false) << "rms_norm output " << type_name(out.type);
    }
}

}  // namespace

// 256: with the row's loads in flight together (rms_scale), 1,024 threads no longer pay; smaller CTAs
// find room on SMs still running the previous GEMV's CTAs. Batch-1 decode on the H200 (bench/NOTES.md,
// twenty-first session, one call): 7B 546.9 / 548.1 tok/s against 541.8 / 541.0 with 1,024,
// 0.5B 1,852.9 / 1,852.7 against 1,741.7 / 1,769.5.
int rms_threads() {
    static const int threads = [] {
        const int v = env_int("MVLLM_RMS_THREADS", 256);
        return v == 128 || v == 256 || v == 512 || v == 1024 ? v : 256;
    }();
    return threads;
}

void launch_embed(const TensorView& table, const int32_t* ids, const int32_t* fed, const TensorView& out,
                  cudaStream_t stream) {
    const int64_t width = table.ne[0];
    const int64_t n_rows = out.ne[1];
    if (n_rows == 0) return;
    MVLLM_CHECK(is_float_type(out.type) && out.ne[0] == width) << "embed output";
    if (is_float_type(table.type)) {
        const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>(ceil_div(width, 256)));
        launch_pdl(embed_float_kernel, grid, 256, 0, stream, table.data, table.type, ids, fed, out.data, out.type,
                   width);
    } else {
        const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>(ceil_div(width / kChunk, 128)));
        const int64_t n_vocab = table.n_rows();
#define MVLLM_EMBED(T)                                                                                   \
    launch_pdl(embed_quant_kernel<T>, grid, 128, 0, stream, quant_matrix<T>(table.data, width, n_vocab), ids, fed, out.data, \
                                                    out.type, width)
        switch (table.type) {
            case DType::Q8_0: MVLLM_EMBED(DType::Q8_0); break;
            case DType::Q4_0: MVLLM_EMBED(DType::Q4_0); break;
            case DType::Q4_K: MVLLM_EMBED(DType::Q4_K); break;
            case DType::Q6_K: MVLLM_EMBED(DType::Q6_K); break;
            default: MVLLM_CHECK(false) << "embed: table type " << type_name(table.type);
        }
#undef MVLLM_EMBED
    }
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_rms_norm(const TensorView& x, const TensorView& weight, float eps, const TensorView& out,
                     cudaStream_t stream) {
    if (x.ne[1] == 0) return;
    MVLLM_CHECK(is_float_type(weight.type)) << "rms_norm weight " << type_name(weight.type);
    switch (x.type) {
        case DType::F32: rms_norm_dispatch_out<float>(x, weight, eps, out, stream); break;
        case DType::F16: rms_norm_dispatch_out<__half>(x, weight, eps, out, stream); break;
        case DType::BF16: rms_norm_dispatch_out<__nv_bfloat16>(x, weight, eps, out, stream); break;
        default: MVLLM_CHECK(false) << "rms_norm input " << type_name(x.type);
    }
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_rope(const TensorView& x, int32_t n_heads, int32_t head_dim, const int32_t* positions,
                 const float* inv_freq, cudaStream_t stream) {
    MVLLM_CHECK(x.type == DType::F32 && x.ne[0] == static_cast<int64_t>(n_heads) * head_dim) << "rope input";
    if (x.ne[1] == 0) return;
    const dim3 grid(static_cast<unsigned>(x.ne[1]), static_cast<unsigned>(ceil_div(head_dim / 2, 64)));
    launch_pdl(rope_kernel, grid, 64, 0, stream, static_cast<float*>(x.data), n_heads, head_dim, x.ne[0], positions, inv_freq);
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out, cudaStream_t stream) {
    const int64_t n = gate.n_elements();
    if (n == 0) return;
    launch_pdl(silu_mul_kernel, grid_stride_blocks(n), 256, 0, stream, gate.data, gate.type, up.data, up.type, out.data,
                                                               out.type, n);
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_silu_mul_stacked(const TensorView& gate_up, const TensorView& out, cudaStream_t stream) {
    const int64_t n_ff = out.ne[0], n = out.n_elements();
    MVLLM_CHECK(gate_up.type == DType::F32 && gate_up.ne[0] == 2 * n_ff && gate_up.ne[1] == out.ne[1] && n_ff % 4 == 0)
        << "silu_mul_stacked shapes";
    if (n == 0) return;
    const float* gu = static_cast<const float*>(gate_up.data);
    const dim3 grid(static_cast<unsigned>(out.ne[1]), static_cast<unsigned>(ceil_div(n_ff, 4 * 256)));
    switch (out.type) {
        case DType::F32: launch_pdl(silu_mul_stacked_kernel<float>, grid, 256, 0, stream, gu, n_ff, static_cast<float*>(out.data)); break;
        case DType::F16: launch_pdl(silu_mul_stacked_kernel<__half>, grid, 256, 0, stream, gu, n_ff, static_cast<__half*>(out.data)); break;
        case DType::BF16: launch_pdl(silu_mul_stacked_kernel<__nv_bfloat16>, grid, 256, 0, stream, gu, n_ff, static_cast<__nv_bfloat16*>(out.data)); break;
        default: MVLLM_CHECK(false) << "silu_mul_stacked output " << type_name(out.type);
    }
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_add(const TensorView& acc, const TensorView& x, cudaStream_t stream) {
    MVLLM_CHECK(acc.type == DType::F32 && acc.n_elements() == x.n_elements()) << "add";
    const int64_t n = acc.n_elements();
    if (n == 0) return;
    launch_pdl(add_kernel, grid_stride_blocks(n), 256, 0, stream, static_cast<float*>(acc.data), x.data, x.type, n);
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_add_bias(const TensorView& x, const TensorView& bias, cudaStream_t stream) {
    MVLLM_CHECK(x.type == DType::F32 && bias.ne[0] == x.ne[0]) << "add_bias";
    if (x.ne[1] == 0) return;
    const dim3 grid(static_cast<unsigned>(x.ne[1]), static_cast<unsigned>(ceil_div(x.ne[0], 256)));
    launch_pdl(add_bias_kernel, grid, 256, 0, stream, static_cast<float*>(x.data), bias.data, bias.type, x.ne[0]);
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_gather_rows(const TensorView& x, const int32_t* rows, const TensorView& out, cudaStream_t stream) {
    MVLLM_CHECK(x.type == out.type && x.ne[0] == out.ne[0]) << "gather_rows";
    if (out.ne[1] == 0) return;
    const size_t rb = x.row_bytes();
    const dim3 grid(static_cast<unsigned>(out.ne[1]),
                    static_cast<unsigned>(ceil_div(static_cast<int64_t>(ceil_div(rb, 4)), 256)));
    launch_pdl(gather_rows_kernel, grid, 256, 0, stream, static_cast<const uint8_t*>(x.data), rows,
               static_cast<uint8_t*>(out.data), rb);
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_convert(const TensorView& src, const TensorView& dst, cudaStream_t stream) {
    MVLLM_CHECK(is_float_type(src.type) && is_float_type(dst.type) && src.n_elements() == dst.n_elements())
        << "convert " << type_name(src.type) << " -> " << type_name(dst.type);
    const int64_t n = src.n_elements();
    if (n == 0) return;
    launch_pdl(convert_kernel, grid_stride_blocks(n), 256, 0, stream, src.data, src.type, dst.data, dst.type, n);
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_argmax(const TensorView& x, unsigned long long* keys, int32_t* out, int32_t* fed, cudaStream_t stream) {
    MVLLM_CHECK(x.type == DType::F32) << "argmax input " << type_name(x.type);
    const int64_t n_rows = x.ne[1];
    if (n_rows == 0) return;
    const dim3 grid(static_cast<unsigned>(ceil_div(x.ne[0], kArgmaxChunk)), static_cast<unsigned>(n_rows));
    launch_pdl(argmax_partial_kernel, grid, kArgmaxThreads, 0, stream, static_cast<const float*>(x.data), x.ne[0], keys);
    MVLLM_CUDA_LAUNCH_CHECK();
    launch_pdl(argmax_finish_kernel, static_cast<unsigned>(ceil_div(n_rows, 128)), 128, 0, stream, keys, out, fed, n_rows);
    MVLLM_CUDA_LAUNCH_CHECK();
}

// One thread per penalty: the (row, token) pairs are distinct, so no two threads share a logit.
__global__ void penalties_kernel(float* x, int64_t width, const TokenPenalty* penalties, int64_t n) {
    pdl_begin();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const TokenPenalty p = penalties[i];
    float& l = x[p.row * width + p.token];
    l = penalised(l, p.bias, p.repetition, p.subtract);
}

void launch_penalties(const TensorView& x, const TokenPenalty* penalties, int64_t n, cudaStream_t stream) {
    MVLLM_CHECK(x.type == DType::F32) << "penalised logits " << type_name(x.type);
    if (n == 0) return;
    launch_pdl(penalties_kernel, static_cast<unsigned>(ceil_div(n, 256)), 256, 0, stream, static_cast<float*>(x.data),
               x.ne[0], penalties, n);
    MVLLM_CUDA_LAUNCH_CHECK();
}

int64_t draw_parts(int64_t width) { return ceil_div(width, kDrawChunk); }

void launch_draw(const TensorView& x, const TokenDraw* draws, bool any_max, bool any_cut, const DrawScratch& scratch,
                 int32_t* out, int32_t* fed, cudaStream_t stream) {
    unsigned long long* keys = scratch.keys;
    MVLLM_CHECK(x.type == DType::F32) << "draw input " << type_name(x.type);
    const int64_t n_rows = x.ne[1], parts = draw_parts(x.ne[0]);
    if (n_rows == 0) return;
    const dim3 grid(static_cast<unsigned>(parts), static_cast<unsigned>(n_rows));
    const float* xs = static_cast<const float*>(x.data);
    if (any_max || any_cut) {  // the rows' maxima into keys, for min_p's test and the weights of top_p
        launch_pdl(argmax_partial_kernel, dim3(static_cast<unsigned>(ceil_div(x.ne[0], kArgmaxChunk)), grid.y),
                   kArgmaxThreads, 0, stream, xs, x.ne[0], keys);
        MVLLM_CUDA_LAUNCH_CHECK();
    }
    if (any_cut) launch_draw_cut(xs, x.ne[0], n_rows, draws, keys, scratch.cuts, scratch.binned, scratch.n_sms, stream);
    launch_pdl(scratch.outlined_score ? draw_partial_kernel<true> : draw_partial_kernel<false>, grid, kDrawThreads, 0,
               stream, xs, x.ne[0], draws, static_cast<const unsigned long long*>(keys),
               static_cast<const DrawCut*>(scratch.cuts), scratch.part_score, scratch.part_index);
    MVLLM_CUDA_LAUNCH_CHECK();
    launch_pdl(draw_finish_kernel, static_cast<unsigned>(ceil_div(n_rows, 4)), 128, 0, stream, scratch.part_score,
               scratch.part_index, static_cast<int>(parts), keys, out, fed, n_rows);
    MVLLM_CUDA_LAUNCH_CHECK();
}

__global__ void target_logprob_kernel(const float* x, int64_t width, const int32_t* targets, const int32_t* argmax,
                                      const float* max_logprob, float* out, int64_t n_rows) {
    pdl_begin();
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= n_rows) return;
    const float* row = x + r * width;
    out[r] = targets[r] < 0 ? 0.0f : __fsub_rn(row[targets[r]], __fsub_rn(row[argmax[r]], max_logprob[r]));
}

void launch_target_logprob(const TensorView& x, const int32_t* targets, const int32_t* argmax,
                           const float* max_logprob, float* out, cudaStream_t stream) {
    MVLLM_CHECK(x.type == DType::F32) << "target_logprob input " << type_name(x.type);
    const int64_t n_rows = x.ne[1];
    if (n_rows == 0) return;
    launch_pdl(target_logprob_kernel, static_cast<unsigned>(ceil_div(n_rows, 128)), 128, 0, stream,
               static_cast<const float*>(x.data), x.ne[0], targets, argmax, max_logprob, out, n_rows);
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_max_logprob(const TensorView& x, float* out, cudaStream_t stream) {
    MVLLM_CHECK(x.type == DType::F32) << "max_logprob input " << type_name(x.type);
    if (x.ne[1] == 0) return;
    launch_pdl(max_logprob_kernel, static_cast<unsigned>(x.ne[1]), 1024, 0, stream, static_cast<const float*>(x.data), x.ne[0], out);
    MVLLM_CUDA_LAUNCH_CHECK();
}

QkvRopeOut qkv_rope_out(const DeviceBatch& batch, const DeviceKvLayer& kv, int32_t n_heads, const float* inv_freq,
                        const TensorView& q) {
    return QkvRopeOut{static_cast<float*>(q.data), batch.positions, inv_freq, batch.slot_mapping, kv.k, kv.v,
                      static_cast<DType>(kv.dtype), kv.block_size, n_heads, kv.n_kv_heads, kv.head_dim};
}

void launch_rope_kv_store(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& qkv,
                          const TensorView& bias, int32_t n_heads, const float* inv_freq, const TensorView& q,
                          bool v_apart, cudaStream_t stream) {
    const int64_t q_dim = static_cast<int64_t>(n_heads) * kv.head_dim, kv_dim = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
    MVLLM_CHECK(qkv.type == DType::F32 && q.type == DType::F32 && qkv.ne[0] == q_dim + 2 * kv_dim && q.ne[0] == q_dim &&
                qkv.ne[1] == batch.n_tokens)
        << "rope_kv_store shapes";
    MVLLM_CHECK(!bias.data || (bias.type == DType::F32 && bias.ne[0] == qkv.ne[0])) << "rope_kv_store bias";
    if (batch.n_tokens == 0) return;
    MVLLM_CHECK(kv.head_dim <= 2 * kMaxRopePairs) << "rope_kv_store head_dim " << kv.head_dim;
    const QkvPlanes planes = qkv_planes(static_cast<const float*>(qkv.data), q_dim, kv_dim, batch.n_tokens, v_apart);
    const FusedQkvRows rows{planes.qk, planes.v, static_cast<const float*>(bias.data), static_cast<int32_t>(planes.qk_width),
                            static_cast<int32_t>(planes.v_width), static_cast<int32_t>(q_dim + kv_dim)};
    launch_pdl(rope_kv_store_kernel<FusedQkvRows>, rope_kv_store_grid(batch), 256, 0, stream, rows,
               qkv_rope_out(batch, kv, n_heads, inv_freq, q));
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_rope_qk_kv_store(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q,
                             const TensorView& k, const TensorView& v, int32_t n_heads, const float* inv_freq,
                             cudaStream_t stream) {
    const int64_t q_dim = static_cast<int64_t>(n_heads) * kv.head_dim, kv_dim = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
    MVLLM_CHECK(q.type == DType::F32 && k.type == DType::F32 && v.type == DType::F32 && q.ne[0] == q_dim &&
                k.ne[0] == kv_dim && v.ne[0] == kv_dim && q.ne[1] == batch.n_tokens && k.ne[1] == batch.n_tokens &&
                v.ne[1] == batch.n_tokens)
        << "rope_qk_kv_store shapes";
    if (batch.n_tokens == 0) return;
    MVLLM_CHECK(kv.head_dim <= 2 * kMaxRopePairs) << "rope_qk_kv_store head_dim " << kv.head_dim;
    const SplitQkvRows rows{static_cast<const float*>(q.data), static_cast<const float*>(k.data),
                            static_cast<const float*>(v.data), n_heads, kv.n_kv_heads, kv.head_dim};
    launch_pdl(rope_kv_store_kernel<SplitQkvRows>, rope_kv_store_grid(batch), 256, 0, stream, rows,
               qkv_rope_out(batch, kv, n_heads, inv_freq, q));
    MVLLM_CUDA_LAUNCH_CHECK();
}

void launch_kv_store(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& k,
                     const TensorView& v, cudaStream_t stream) {
    MVLLM_CHECK(k.type == v.type && is_float_type(k.type)) << "kv_store input";
    MVLLM_CHECK(k.ne[0] == static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim) << "kv_store width";
    if (batch.n_tokens == 0) return;
    const dim3 grid(static_cast<unsigned>(batch.n_tokens), static_cast<unsigned>(ceil_div(k.ne[0], 256)));
    launch_pdl(kv_store_kernel, grid, 256, 0, stream, batch.slot_mapping, k.data, v.data, k.type, kv.k, kv.v,
                                              static_cast<DType>(kv.dtype), kv.n_kv_heads, kv.head_dim,
                                              kv.block_size);
    MVLLM_CUDA_LAUNCH_CHECK();
}

int early_loads() {
    static const int mask = env_int("MVLLM_EARLY_LOADS", 7);
    return mask;
}

void grow_device_buffer(void** ptr, size_t* have, size_t need, const char* what) {
    if (*have >= need) return;
    MVLLM_CUDA_CHECK(cudaDeviceSynchronize());  // the old buffer may still be in use
    if (*ptr) MVLLM_CUDA_CHECK(cudaFree(*ptr));
    *ptr = nullptr;
    *have = 0;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    if (cudaMalloc(ptr, need) != cudaSuccess) {
        cudaGetLastError();
        *ptr = nullptr;
        throw DeviceOutOfMemory(make_error("out of GPU memory: ", what, " of ", need / 1048576.0, " MiB did not fit (",
                                           free_b / 1048576.0, " MiB free)")
                                    .message());
    }
    *have = need;
}

bool pdl_enabled() {
    static const bool on = env_on("MVLLM_CUDA_PDL");
    return on;
}

void apply_carveout(const void* kernel) {
    static const int percent = env_int("MVLLM_CUDA_CARVEOUT", -1);
    if (percent < 0) return;
    static std::mutex mu;
    static std::unordered_set<const void*> done;
    const std::lock_guard<std::mutex> lock(mu);
    if (done.insert(kernel).second)
        MVLLM_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, std::min(percent, 100)));
}

}  // namespace mvllm::cuda
