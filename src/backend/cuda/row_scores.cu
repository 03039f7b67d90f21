// The row scores of TokenPicks::scores (cuda::launch_row_scores, ops.cuh): a logit row's
// log-sum-exp and its best values, where the logits are.
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

// One pass over row r [width]: each thread's K best keys (when n_top > 0), how many values it saw,
// and, when Sum, its (max, sum of exp(x - max)) and whether it saw a NaN.
template <int K, bool Sum>
__device__ __forceinline__ void scan_row(const float* r, int64_t width, int n_top, unsigned long long (&top)[K],
                                         int& n_seen, float& m, float& s, bool& nan) {
#pragma unroll
    for (int j = 0; j < K; ++j) top[j] = 0;
    n_seen = 0;
    const bool vec = width % 4 == 0;  // then every row starts 16-byte aligned
    for (int64_t q0 = threadIdx.x; 4 * q0 < width; q0 += kScoreAhead * kScoreThreads) {
        float v[kScoreAhead][4];
#pragma unroll
        for (int k = 0; k < kScoreAhead; ++k) {
            const int64_t i = 4 * (q0 + k * kScoreThreads);
            if (vec && i < width) {
                const float4 f = __ldcg(reinterpret_cast<const float4*>(r + i));
                v[k][0] = f.x, v[k][1] = f.y, v[k][2] = f.z, v[k][3] = f.w;
            } else {
#pragma unroll
                for (int c = 0; c < 4; ++c) v[k][c] = i + c < width ? __ldcg(r + i + c) : -INFINITY;
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
                if (i >= width) continue;
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

__global__ void __launch_bounds__(kScoreThreads) row_scores_kernel(const float* x, int64_t width, const ScoreAsk* asks,
                                                                   const int32_t* picked, int32_t* out) {
    pdl_begin();
    constexpr int kWarps = kScoreThreads / 32;
    __shared__ float ms[kWarps], ss[kWarps];
    __shared__ bool any_nan;
    const ScoreAsk a = asks[blockIdx.x];
    const float* r = x + static_cast<int64_t>(a.row) * width;
    if (threadIdx.x == 0) any_nan = false;
    unsigned long long top[kScoreList];
    int n_seen = 0;
    float m = -INFINITY, s = 0.0f;
    bool nan = false;
    scan_row<kScoreList, true>(r, width, a.n_top, top, n_seen, m, s, nan);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) merge_max_sum(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0) ms[warp] = m, ss[warp] = s;
    __syncthreads();
    if (nan) any_nan = true;
    int32_t* o = out + static_cast<int64_t>(blockIdx.x) * kRowScoreWords;
    // (select_top's barriers order ms, ss and any_nan before thread 0 reads them)
    if (select_top<kScoreList>(top, n_seen, a.n_top, o) && threadIdx.x == 0) o[3] = -1;  // row_scores_exact_kernel's
    if (threadIdx.x == 0) {
        for (int w = 1; w < kWarps; ++w) merge_max_sum(m, s, ms[w], ss[w]);
        const int32_t token = a.token >= 0 ? a.token : picked[a.row];
        o[0] = __float_as_int(any_nan ? NAN : m + logf(s));
        o[1] = token;
        o[2] = __float_as_int(r[token]);
    }
}

// The selection of the rows row_scores_kernel marked (a count of -1: a thread's short list ran
// dry), redone from lists of kMaxTopLogprobs values; the other CTAs return at once.
__global__ void __launch_bounds__(kScoreThreads) row_scores_exact_kernel(const float* x, int64_t width,
                                                                         const ScoreAsk* asks, int32_t* out) {
    pdl_begin();
    int32_t* o = out + static_cast<int64_t>(blockIdx.x) * kRowScoreWords;
    if (o[3] >= 0) return;
    const ScoreAsk a = asks[blockIdx.x];
    unsigned long long top[kMaxTopLogprobs];
    int n_seen = 0;
    float m = -INFINITY, s = 0.0f;
    bool nan = false;
    scan_row<kMaxTopLogprobs, false>(x + static_cast<int64_t>(a.row) * width, width, a.n_top, top, n_seen, m, s, nan);
    select_top<kMaxTopLogprobs>(top, n_seen, a.n_top, o);
}

}  // namespace

void launch_row_scores(const TensorView& x, const ScoreAsk* asks, int64_t n_asks, const int32_t* picked, int32_t* out,
                       cudaStream_t stream) {
    MVLLM_CHECK(x.type == DType::F32) << "row_scores input " << type_name(x.type);
    if (n_asks == 0) return;
    launch_pdl(row_scores_kernel, static_cast<unsigned>(n_asks), kScoreThreads, 0, stream,
               static_cast<const float*>(x.data), x.ne[0], asks, picked, out);
    MVLLM_CUDA_LAUNCH_CHECK();
    launch_pdl(row_scores_exact_kernel, static_cast<unsigned>(n_asks), kScoreThreads, 0, stream,
               static_cast<const float*>(x.data), x.ne[0], asks, out);
    MVLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace mvllm::cuda
