// The row scores of TokenPicks::scores (cuda::launch_row_scores, ops.cuh): a logit row's
// log-sum-exp and its best values, where the logits are.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/logit_rows.cuh"
#include "backend/cuda/ops.cuh"

namespace mvllm::cuda {
namespace {

// One CTA per asked row reads it once for its log-sum-exp and its n_top best values. Per thread:
// a running (max, rescaled sum), one exponential per value (the max taken over 16 values before
// they are added), and its K best values as argmax keys (value order, then the lower index:
// core/draw.h's order) in a register list kept sorted by an unrolled insertion. Then n_top rounds
// of a CTA-wide maximum of the lists' heads, the winner dropping its head. A list of K =
// kScoreList values is enough unless one thread holds more than K of the best n_top (a thread sees
// every 512th float4 of the row, so logits never ordered that way); the rounds notice when a
// thread that dropped values runs dry before the last one, and a second kernel then redoes that
// row's selection from lists of kMaxTopLogprobs values, which always suffice (measured on the H100:
// lists of 20 for everyone made the kernel compute-bound, 547 us for 256 rows; the second kernel's
// lists in the first would double its registers). NaN never enters a list (the host's
// top_k_tokens skips it) but makes log Z NaN, as on the host.
constexpr int kScoreThreads = 512, kScoreAhead = 4, kScoreList = 4;  // float4 loads in flight per thread

template <int K>
__device__ __forceinline__ void offer_top(unsigned long long (&top)[K], unsigned long long key) {
    if (key <= top[K - 1]) return;
    top[K - 1] = key;
#pragma unroll
    for (int j = K - 1; j > 0; --j)
        if (top[j] > top[j - 1]) {
            const unsigned long long t = top[j];
            top[j] = top[j - 1];
            top[j - 1] = t;
        }
}

// One pass over values [begin, end) of row r [width] (begin a multiple of 4): each thread's K best
// keys (when n_top > 0), how many values it saw, and, when Sum, its (max, sum of exp(x - max)) and
// whether it saw a NaN.
template <int K, bool Sum>
__device__ __forceinline__ void scan_row(const float* r, int64_t width, int64_t begin, int64_t end, int n_top,
                                         unsigned long long (&top)[K], int& n_seen, float& m, float& s, bool& nan) {
#pragma unroll
    for (int j = 0; j < K; ++j) top[j] = 0;
    n_seen = 0;
    const bool vec = width % 4 == 0;  // then every row starts 16-byte aligned
    for (int64_t q0 = begin / 4 + threadIdx.x; 4 * q0 < end; q0 += kScoreAhead * kScoreThreads) {
        float v[kScoreAhead][4];
#pragma unroll
        for (int k = 0; k < kScoreAhead; ++k) {
            const int64_t i = 4 * (q0 + k * kScoreThreads);
            if (vec && i < end) {  // end is the row's or a multiple of 4
                const float4 f = __ldcg(reinterpret_cast<const float4*>(r + i));
                v[k][0] = f.x, v[k][1] = f.y, v[k][2] = f.z, v[k][3] = f.w;
            } else {
#pragma unroll
                for (int c = 0; c < 4; ++c) v[k][c] = i + c < end ? __ldcg(r + i + c) : -INFINITY;
            }
        }
        if constexpr (Sum) {
            float cmax = -INFINITY;
#pragma unroll
            for (int k = 0; k < kScoreAhead; ++k)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    cmax = fmaxf(cmax, v[k][c]);  // -INFINITY past the row's end adds nothing
                    nan |= isnan(v[k][c]);
                }
            const float m_new = fmaxf(m, cmax);
            if (m_new != -INFINITY) {
                float add = 0.0f;
#pragma unroll
                for (int k = 0; k < kScoreAhead; ++k)
#pragma unroll
                    for (int c = 0; c < 4; ++c) add += __expf(v[k][c] - m_new);
                s = s * __expf(m - m_new) + add;
                m = m_new;
            }
        }
        if (n_top == 0) continue;
#pragma unroll
        for (int k = 0; k < kScoreAhead; ++k)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int64_t i = 4 * (q0 + k * kScoreThreads) + c;
                if (i >= end) continue;
                ++n_seen;
                if (!isnan(v[k][c])) offer_top<K>(top, argmax_key(v[k][c], static_cast<uint32_t>(i)));
            }
    }
}

// The n_top best of the threads' lists into o's pairs (fewer where the row has fewer); true when
// a thread that dropped values ran dry before the last round (the pairs are then not the best).
template <int K>
__device__ bool select_top(unsigned long long (&top)[K], int n_seen, int n_top, int32_t* o) {
    constexpr int kWarps = kScoreThreads / 32;
    __shared__ unsigned long long warp_best[kWarps];
    __shared__ unsigned long long best;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int left = K, n = 0;
    bool dry = false;
    for (; n < n_top; ++n) {
        unsigned long long k = top[0];
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) k = max(k, __shfl_xor_sync(0xffffffffu, k, d));
        if (lane == 0) warp_best[warp] = k;
        __syncthreads();
        if (warp == 0) {
            k = lane < kWarps ? warp_best[lane] : 0ull;
#pragma unroll
            for (int d = 16; d > 0; d >>= 1) k = max(k, __shfl_xor_sync(0xffffffffu, k, d));
            if (lane == 0) best = k;
        }
        __syncthreads();
        const unsigned long long b = best;
        if (b == 0) break;  // fewer values than n_top
        if (top[0] == b) {  // keys are unique (the index is in them): one thread drops its head
#pragma unroll
            for (int j = 0; j + 1 < K; ++j) top[j] = top[j + 1];
            top[K - 1] = 0;
            dry |= --left == 0 && n_seen > K && n + 1 < n_top;
        }
        if (threadIdx.x == 0) {
            o[kRowScoreHeader + 2 * n] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(b & 0xFFFFFFFFu));
            o[kRowScoreHeader + 2 * n + 1] = __float_as_int(order_key_value(static_cast<uint32_t>(b >> 32)));
        }
    }
    if (threadIdx.x == 0) o[3] = n;
    return __syncthreads_or(dry);
}

// One CTA's pass over values [begin, end) of row r: its best n_top values into o's pairs and count
// (-1 when a thread's short list ran dry: the pairs are then to be redone), and, in thread 0, the
// range's (max, sum of exp(x - max)) and whether it holds a NaN.
__device__ void score_range(const float* r, int64_t width, int64_t begin, int64_t end, int n_top, int32_t* o,
                            float& m, float& s, bool& nan) {
    constexpr int kWarps = kScoreThreads / 32;
    __shared__ float ms[kWarps], ss[kWarps];
    __shared__ bool any_nan;
    if (threadIdx.x == 0) any_nan = false;
    unsigned long long top[kScoreList];
    int n_seen = 0;
    m = -INFINITY, s = 0.0f, nan = false;
    scan_row<kScoreList, true>(r, width, begin, end, n_top, top, n_seen, m, s, nan);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) merge_max_sum(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) ms[warp] = m, ss[warp] = s;
    __syncthreads();
    if (nan) any_nan = true;
    // (select_top's barriers order ms, ss and any_nan before thread 0 reads them)
    if (select_top<kScoreList>(top, n_seen, n_top, o) && threadIdx.x == 0) o[3] = -1;
    if (threadIdx.x == 0) {
        for (int w = 1; w < kWarps; ++w) merge_max_sum(m, s, ms[w], ss[w]);
        nan = any_nan;
    }
}

// The header of a score (o[0..2]) from its row's (max, sum) and NaN, in thread 0.
__device__ __forceinline__ void write_score_header(const float* r, const ScoreAsk& a, const int32_t* picked, float m,
                                                   float s, bool nan, int32_t* o) {
    const int32_t token = a.token >= 0 ? a.token : picked[a.row];
    o[0] = __float_as_int(nan ? NAN : m + logf(s));
    o[1] = token;
    o[2] = __float_as_int(r[token]);
}

__global__ void __launch_bounds__(kScoreThreads) row_scores_kernel(const float* x, int64_t width, const ScoreAsk* asks,
                                                                   const int32_t* picked, int32_t* out) {
    pdl_begin();
    const ScoreAsk a = asks[blockIdx.x];
    const float* r = x + static_cast<int64_t>(a.row) * width;
    int32_t* o = out + static_cast<int64_t>(blockIdx.x) * kRowScoreWords;
    float m, s;
    bool nan;
    score_range(r, width, 0, width, a.n_top, o, m, s, nan);
    if (threadIdx.x == 0) write_score_header(r, a, picked, m, s, nan, o);
}

// The selection of a row redone from lists of kMaxTopLogprobs values, which always suffice.
__device__ void select_exact(const float* r, int64_t width, int n_top, int32_t* o) {
    unsigned long long top[kMaxTopLogprobs];
    int n_seen = 0;
    float m = -INFINITY, s = 0.0f;
    bool nan = false;
    scan_row<kMaxTopLogprobs, false>(r, width, 0, width, n_top, top, n_seen, m, s, nan);
    select_top<kMaxTopLogprobs>(top, n_seen, n_top, o);
}

// The selection of the rows row_scores_kernel marked (a count of -1: a thread's short list ran
// dry), redone; the other CTAs return at once.
__global__ void __launch_bounds__(kScoreThreads) row_scores_exact_kernel(const float* x, int64_t width,
                                                                         const ScoreAsk* asks, int32_t* out) {
    pdl_begin();
    int32_t* o = out + static_cast<int64_t>(blockIdx.x) * kRowScoreWords;
    if (o[3] >= 0) return;
    select_exact(x + static_cast<int64_t>(asks[blockIdx.x].row) * width, width, asks[blockIdx.x].n_top, o);
}

// Few rows: each row's values in parts of `chunk` (a multiple of one pass's kScoreAhead float4s
// per thread), one CTA per (part, ask), so that a lone row is read by many SMs (one CTA reading
// 152K logits took 41 us a step, bench/NOTES.md, thirtieth session). Part p of ask i is a score's
// record at parts + (i * gridDim.x + p) * kRowScoreWords: its pairs and count as score_range
// leaves them, its max, sum and NaN flag in words 0-2.
__global__ void __launch_bounds__(kScoreThreads) row_scores_part_kernel(const float* x, int64_t width, int64_t chunk,
                                                                        const ScoreAsk* asks, int32_t* parts) {
    pdl_begin();
    const ScoreAsk a = asks[blockIdx.y];
    const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk, end = begin + chunk < width ? begin + chunk : width;
    int32_t* o = parts + (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kRowScoreWords;
    float m, s;
    bool nan;
    score_range(x + static_cast<int64_t>(a.row) * width, width, begin, end, a.n_top, o, m, s, nan);
    if (threadIdx.x == 0) o[0] = __float_as_int(m), o[1] = __float_as_int(s), o[2] = nan;
}

constexpr int kMaxScoreParts = 32;

// Per ask, its n_parts part records merged: the (max, sum)s in part order, the n_top best of the
// parts' best (each part's n_top best are exact unless its count is -1: the row's selection is
// then redone whole, as row_scores_exact_kernel does). The parts' headers and lists are loaded by
// many threads at once into shared memory, then one warp merges the lists.
__global__ void __launch_bounds__(kScoreThreads) row_scores_merge_kernel(const float* x, int64_t width, const ScoreAsk* asks,
                                                                         const int32_t* picked, const int32_t* parts,
                                                                         int n_parts, int32_t* out) {
    pdl_begin();
    __shared__ unsigned long long keys[kMaxScoreParts * kMaxTopLogprobs];
    __shared__ float part_m[kMaxScoreParts], part_s[kMaxScoreParts];
    __shared__ int part_n[kMaxScoreParts], part_nan[kMaxScoreParts];
    __shared__ int n_out;
    const ScoreAsk a = asks[blockIdx.x];
    const float* r = x + static_cast<int64_t>(a.row) * width;
    const int32_t* part = parts + static_cast<int64_t>(blockIdx.x) * n_parts * kRowScoreWords;
    int32_t* o = out + static_cast<int64_t>(blockIdx.x) * kRowScoreWords;
    if (threadIdx.x < n_parts) {
        const int32_t* q = part + threadIdx.x * kRowScoreWords;
        part_m[threadIdx.x] = __int_as_float(q[0]);
        part_s[threadIdx.x] = __int_as_float(q[1]);
        part_nan[threadIdx.x] = q[2];
        part_n[threadIdx.x] = q[3];
    } else if (threadIdx.x == 32) {  // the scored token and its logit, beside
        const int32_t token = a.token >= 0 ? a.token : picked[a.row];
        o[1] = token;
        o[2] = __float_as_int(r[token]);
    }
    __syncthreads();
    const int n_keys = n_parts * kMaxTopLogprobs;
    for (int i = threadIdx.x; i < n_keys; i += blockDim.x) {
        const int p = i / kMaxTopLogprobs, j = i % kMaxTopLogprobs;
        const int32_t* q = part + p * kRowScoreWords + kRowScoreHeader + 2 * j;
        keys[i] = j < part_n[p] ? argmax_key(__int_as_float(q[1]), static_cast<uint32_t>(q[0])) : 0ull;
    }
    bool dry = false;
    if (threadIdx.x == 0) {
        float m = -INFINITY, s = 0.0f;
        bool nan = false;
        int n = 0;
        for (int p = 0; p < n_parts; ++p) {
            merge_max_sum(m, s, part_m[p], part_s[p]);
            nan |= part_nan[p] != 0;
            dry |= part_n[p] < 0;
            n += part_n[p] > 0 ? part_n[p] : 0;
        }
        o[0] = __float_as_int(nan ? NAN : m + logf(s));
        n_out = n < a.n_top ? n : a.n_top;
    }
    if (__syncthreads_or(dry)) return select_exact(r, width, a.n_top, o);
    if (threadIdx.x >= 32) return;
    // Warp 0 merges the parts' lists (each in descending key order; keys are unique, the index is
    // in them): lane p follows part p's, and each round's best head is the next pair. Ranking every
    // candidate against all of them instead (O(n^2) in one CTA) took ~10 us at 19 parts (ncu).
    const int lane = threadIdx.x;
    int pos = 0;
    auto head = [&] { return lane < n_parts && pos < kMaxTopLogprobs ? keys[lane * kMaxTopLogprobs + pos] : 0ull; };
    unsigned long long h = head();
    for (int n = 0; n < n_out; ++n) {
        unsigned long long b = h;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) b = max(b, __shfl_xor_sync(0xffffffffu, b, d));
        if (h == b) ++pos, h = head();
        if (lane == 0) {
            o[kRowScoreHeader + 2 * n] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(b & 0xFFFFFFFFu));
            o[kRowScoreHeader + 2 * n + 1] = __float_as_int(order_key_value(static_cast<uint32_t>(b >> 32)));
        }
    }
    if (lane == 0) o[3] = n_out;
}

}  // namespace

int64_t row_score_parts(int64_t width, int64_t n_asks, int32_t n_sms) {
    constexpr int64_t kPass = int64_t{4} * kScoreAhead * kScoreThreads;  // values one pass reads
    const int64_t passes = (width + kPass - 1) / kPass;
    return std::max<int64_t>(1, std::min<int64_t>({passes, kMaxScoreParts, n_asks > 0 ? n_sms / n_asks : 1}));
}

void launch_row_scores(const TensorView& x, const ScoreAsk* asks, int64_t n_asks, const int32_t* picked, int32_t* out,
                       int32_t* parts, int32_t n_sms, cudaStream_t stream) {
    MVLLM_CHECK(x.type == DType::F32) << "row_scores input " << type_name(x.type);
    if (n_asks == 0) return;
    const float* xs = static_cast<const float*>(x.data);
    const int64_t width = x.ne[0];
    if (const int64_t p = row_score_parts(width, n_asks, n_sms); p > 1) {
        constexpr int64_t kPass = int64_t{4} * kScoreAhead * kScoreThreads;
        const int64_t chunk = ((width + p - 1) / p + kPass - 1) / kPass * kPass;
        const int64_t n_parts = (width + chunk - 1) / chunk;
        launch_pdl(row_scores_part_kernel, dim3(static_cast<unsigned>(n_parts), static_cast<unsigned>(n_asks)),
                   kScoreThreads, 0, stream, xs, width, chunk, asks, parts);
        MVLLM_CUDA_LAUNCH_CHECK();
        launch_pdl(row_scores_merge_kernel, static_cast<unsigned>(n_asks), kScoreThreads, 0, stream, xs, width, asks,
                   picked, static_cast<const int32_t*>(parts), static_cast<int>(n_parts), out);
        MVLLM_CUDA_LAUNCH_CHECK();
        return;
    }
    launch_pdl(row_scores_kernel, static_cast<unsigned>(n_asks), kScoreThreads, 0, stream, xs, width, asks, picked, out);
    MVLLM_CUDA_LAUNCH_CHECK();
    launch_pdl(row_scores_exact_kernel, static_cast<unsigned>(n_asks), kScoreThreads, 0, stream, xs, width, asks, out);
    MVLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace mvllm::cuda
