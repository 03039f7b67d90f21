// top_k and top_p on the device (core/draw.h): each truncating row's kept head as one cut in the
// order (logit descending, token id ascending), which the draw kernel (ops.cu) then applies before
// its race. No sort: a radix select over the logits' order keys, four 8-bit digits, one CTA per row.
//   top_k: the key at which the count of the row's tokens from the top reaches k;
//   top_p: the key at which their mass, w_t = exp((x_t - max) / T), reaches top_p of the mass of
//          the tokens top_k kept (all without top_k). Masses are fixed-point integers (2^-43 per
//          unit weight), so the shared-memory sums are the same in any order: the same row gives
//          the same cut on every run.
// Among tokens of equal logit the ids decide, as the host's sort does: the cut keeps the first m of
// them. The host sums exact double weights and the device float ones, so the two can disagree on
// the last token of a top_p head when its mass lies within ~1e-7 of the boundary.
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.cuh"

namespace mvllm::cuda {
namespace {

constexpr int kCutThreads = 1024;
constexpr int kPasses = 4, kDigitBits = 8, kBins = 1 << kDigitBits;  // four 8-bit digits from the top
// Private histograms, one per two warps: a random model's logits (and many real ones) fall in a
// few bins of the first digit, and 1,024 threads adding to one shared counter serialise (the first
// version, one histogram per CTA: ~0.4-0.8 ms per row on the H200).
constexpr int kCopies = kCutThreads / 64;
constexpr double kMassUnit = 0x1p43;  // a weight in [0, 1] in these units; 2^21 tokens fit 64 bits

__device__ __forceinline__ unsigned long long fixed_weight(float v, float max, float inv_t) {
    return __double2ull_rn(static_cast<double>(__expf((v - max) * inv_t)) * kMassUnit);
}

// Every value of row r [width] with its index, in 32-value batches per thread (eight 16-byte loads
// in flight: a vocabulary row is ~150 values per thread, and one load at a time would wait an L2
// round trip for each).
template <typename F>
__device__ __forceinline__ void for_each_value(const float* r, int64_t width, F f) {
    constexpr int kAhead = 8;
    const bool vectors = width % 4 == 0 && reinterpret_cast<uintptr_t>(r) % 16 == 0;
    const int64_t n4 = vectors ? width / 4 : 0;
    const float4* r4 = reinterpret_cast<const float4*>(r);
    for (int64_t base = threadIdx.x; base < n4; base += static_cast<int64_t>(kAhead) * blockDim.x) {
        float4 v[kAhead];
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
            const int64_t q = base + static_cast<int64_t>(j) * blockDim.x;
            v[j] = q < n4 ? __ldcg(r4 + q) : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < kAhead; ++j) {
            const int64_t q = base + static_cast<int64_t>(j) * blockDim.x;
            if (q >= n4) break;
            f(v[j].x, 4 * q);
            f(v[j].y, 4 * q + 1);
            f(v[j].z, 4 * q + 2);
            f(v[j].w, 4 * q + 3);
        }
    }
    for (int64_t i = 4 * n4 + threadIdx.x; i < width; i += blockDim.x) f(__ldcg(r + i), i);
}

__device__ __forceinline__ bool in_cut(uint32_t k, int64_t i, DrawCut c) {
    return k > c.key || (k == c.key && i <= c.last);
}

struct Select {
    uint32_t prefix;            // the key's digits chosen so far
    unsigned long long above;   // the amount (count or mass) of the kept tokens above the prefix's range
    unsigned long long at;      // the amount in the chosen digit's range
    unsigned long long target;  // the amount the head must reach
    bool found;
};

// Warp 0: the first digit, from the top, at which st->above plus the amounts of the digits from
// the top reaches the target; with top_p >= 0 the target is first set to ceil(top_p x the total).
__device__ void choose_digit(const unsigned long long* hist, int n_bins, int shift, float top_p, Select* st) {
    const int lane = threadIdx.x, per = n_bins / 32;  // n_bins: a multiple of 32
    unsigned long long sum = 0;
    for (int j = 0; j < per; ++j) sum += hist[n_bins - 1 - lane * per - j];
    unsigned long long incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
    }
    if (top_p >= 0.0f) {
        const unsigned long long total = __shfl_sync(0xffffffffu, incl, 31);
        if (lane == 0) st->target = static_cast<unsigned long long>(ceil(static_cast<double>(top_p) * static_cast<double>(total)));
        __syncwarp();
    }
    const unsigned long long target = st->target;
    unsigned long long run = st->above + incl - sum;
    int digit = -1;
    unsigned long long h = 0;
    for (int j = 0; j < per; ++j) {
        h = hist[n_bins - 1 - lane * per - j];
        if (h > 0 && run + h >= target) {
            digit = n_bins - 1 - lane * per - j;
            break;
        }
        run += h;
    }
    const unsigned found = __ballot_sync(0xffffffffu, digit >= 0);
    if (found == 0) {
        if (lane == 0) st->found = false;
    } else if (lane == __ffs(found) - 1) {
        st->prefix |= static_cast<uint32_t>(digit) << shift;
        st->above = run;
        st->at = h;
    }
}

// The cut of the tokens in `set` (a previous cut) at which the count (kMass false: target) or the
// mass (kMass: top_p of the set's) from the top is reached; `set` itself when no key reaches it.
template <bool kMass>
__device__ DrawCut select_cut(const float* r, int64_t width, DrawCut set, unsigned long long target, float top_p,
                              float max, float inv_t, unsigned long long* copies, unsigned long long* hist,
                              Select* st) {
    __syncthreads();  // every thread is done with the previous selection's state
    if (threadIdx.x == 0) *st = Select{0u, 0ull, 0ull, target, true};
    int shift = 32;
    for (int pass = 0; pass < kPasses; ++pass) {
        const uint32_t high = shift == 32 ? 0u : ~0u << shift;  // the digits already chosen
        shift -= kDigitBits;
        unsigned long long* mine = copies + (threadIdx.x / 64) * kBins;
        for (int b = threadIdx.x; b < kCopies * kBins; b += blockDim.x) copies[b] = 0;
        __syncthreads();
        const uint32_t prefix = st->prefix;
        for_each_value(r, width, [&](float v, int64_t i) {
            const uint32_t k = order_key(v);
            const bool counted = !isnan(v) && ((k ^ prefix) & high) == 0 && in_cut(k, i, set);
            // The lanes of a warp that share a digit add once: their sum, by the leader.
            const unsigned active = __activemask();
            if (__ballot_sync(active, counted) == 0) return;
            const uint32_t digit = counted ? (k >> shift) & (kBins - 1) : kBins;
            const unsigned same = __match_any_sync(active, digit);
            unsigned long long amount;
            if (kMass) {  // weights < 2^44 in two parts, each part's sum over 32 lanes < 2^32
                const unsigned long long w = counted ? fixed_weight(v, max, inv_t) : 0ull;
                amount = (static_cast<unsigned long long>(__reduce_add_sync(same, static_cast<unsigned>(w >> 22))) << 22) +
                         __reduce_add_sync(same, static_cast<unsigned>(w & 0x3FFFFFu));
            } else {
                amount = __popc(same);
            }
            if (counted && (threadIdx.x & 31) == __ffs(same) - 1) atomicAdd(mine + digit, amount);
        });
        __syncthreads();
        for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
            unsigned long long sum = 0;
            for (int c = 0; c < kCopies; ++c) sum += copies[c * kBins + b];
            hist[b] = sum;
        }
        __syncthreads();
        if (threadIdx.x < 32) choose_digit(hist, kBins, shift, kMass && pass == 0 ? top_p : -1.0f, st);
        __syncthreads();
        if (!st->found) return set;
    }
    // The key is chosen: keep every token above it and the first m at it, by id.
    const uint32_t key = st->prefix;
    const unsigned long long unit = kMass ? fixed_weight(order_key_value(key), max, inv_t) : 1ull;
    const unsigned long long n_at = st->at / unit, m = (st->target - st->above + unit - 1) / unit;
    const int32_t all_at = key == set.key ? set.last : INT_MAX;
    if (m >= n_at) return DrawCut{key, all_at};
    // The m-th token at the key in id order: contiguous id ranges per thread, counted, then scanned.
    __shared__ unsigned long long warp_count[kCutThreads / 32];
    __shared__ int32_t last;
    const int64_t chunk = (width + blockDim.x - 1) / blockDim.x, begin = threadIdx.x * chunk;
    const int64_t end = begin + chunk < width ? begin + chunk : width;
    auto tied = [&](int64_t i) {
        const float v = __ldcg(r + i);
        return !isnan(v) && order_key(v) == key && in_cut(key, i, set);
    };
    if (threadIdx.x == 0) last = all_at;  // (not reached: some thread holds the m-th)
    unsigned long long count = 0;
    for (int64_t i = begin; i < end; ++i) count += tied(i);
    unsigned long long incl = count;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long t = __shfl_up_sync(0xffffffffu, incl, o);
        if ((threadIdx.x & 31) >= o) incl += t;
    }
    if ((threadIdx.x & 31) == 31) warp_count[threadIdx.x >> 5] = incl;
    __syncthreads();
    unsigned long long before = incl - count;
    for (int w = 0; w < static_cast<int>(threadIdx.x >> 5); ++w) before += warp_count[w];
    if (before < m && m <= before + count) {
        unsigned long long seen = before;
        for (int64_t i = begin; i < end; ++i)
            if (tied(i) && ++seen == m) {
                last = static_cast<int32_t>(i);
                break;
            }
    }
    __syncthreads();
    return DrawCut{key, last};
}

// cuts[row] for each row whose draw truncates (temperature > 0 with top_k < width or top_p < 1);
// other rows' entries are left alone. keys: the rows' maxima (argmax_partial_kernel). One CTA per
// row, grid n_rows.
__global__ void __launch_bounds__(kCutThreads) draw_cut_kernel(const float* x, int64_t width, const TokenDraw* draws,
                                                              const unsigned long long* keys, DrawCut* cuts) {
    pdl_begin();
    __shared__ unsigned long long copies[kCopies * kBins], hist[kBins];
    __shared__ Select st;
    const TokenDraw d = draws[blockIdx.x];
    const bool top_k = d.top_k > 0 && d.top_k < width;
    if (!(d.temperature > 0.0f) || !(top_k || d.top_p < 1.0f)) return;
    const float* r = x + blockIdx.x * width;
    const float max = order_key_value(static_cast<uint32_t>(keys[blockIdx.x] >> 32));
    DrawCut cut{0u, INT_MAX};  // every token (NaN aside: the draw never keeps one)
    if (isfinite(max)) {       // otherwise the draw is the argmax, as on the host
        const float inv_t = 1.0f / d.temperature;
        if (top_k) cut = select_cut<false>(r, width, cut, static_cast<unsigned long long>(d.top_k), 0.0f, max, inv_t, copies, hist, &st);
        if (d.top_p < 1.0f) cut = select_cut<true>(r, width, cut, 0ull, d.top_p, max, inv_t, copies, hist, &st);
    }
    if (threadIdx.x == 0) cuts[blockIdx.x] = cut;
}

}  // namespace

void launch_draw_cut(const float* x, int64_t width, int64_t n_rows, const TokenDraw* draws,
                     const unsigned long long* keys, DrawCut* cuts, cudaStream_t stream) {
    if (n_rows == 0) return;
    launch_pdl(draw_cut_kernel, static_cast<unsigned>(n_rows), kCutThreads, 0, stream, x, width, draws, keys, cuts);
    MVLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace mvllm::cuda
