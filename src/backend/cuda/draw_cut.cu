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
#include <algorithm>
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

// The binned first step (CudaBackendOptions::binned_cut): a histogram of the values' distances
// below the row's max, many CTAs per row, picks the bin where top_k's count or top_p's mass is
// reached, and only that bin's values (with top_k: and those above it) go through the exact
// selection; a row's cut is the same as the whole row's selection gives.
constexpr int kDistBins = 2048;  // 32 octaves of 64 bins (dist_bin)
constexpr int kBinThreads = 256, kBinPer = 16;  // a CTA's step: 4,096 values
constexpr unsigned kBinMembers = 16384;          // candidates kept per row; more: the row path

struct CutMember {
    float v;
    int32_t i;
};
// A row's scratch. hist and n_members are zero between steps (allocated zeroed, left zeroed by
// draw_cut_kernel); the rest is written by cut_compact_kernel before it is read.
struct BinnedRow {
    unsigned long long hist[kDistBins];
    unsigned n_members;
    int chosen;  // the bin, -1: none reached the target
    unsigned long long above, target;
    CutMember members[kBinMembers];
};

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
// mass (kMass: top_p of the set's when top_p >= 0, else target) from the top is reached; `set`
// itself when no key reaches it. values(f) calls f(v, i) for the candidates: every value of row r
// [width], or (the binned cut) those of its highest bins, whose amount above them is `above`. The
// ties at the key are resolved over the whole row.
template <bool kMass, typename Values>
__device__ DrawCut select_cut(const float* r, int64_t width, Values values, DrawCut set, unsigned long long target,
                              float top_p, unsigned long long above, float max, float inv_t,
                              unsigned long long* copies, unsigned long long* hist, Select* st) {
    __syncthreads();  // every thread is done with the previous selection's state
    if (threadIdx.x == 0) *st = Select{0u, above, 0ull, target, true};
    int shift = 32;
    for (int pass = 0; pass < kPasses; ++pass) {
        const uint32_t high = shift == 32 ? 0u : ~0u << shift;  // the digits already chosen
        shift -= kDigitBits;
        unsigned long long* mine = copies + (threadIdx.x / 64) * kBins;
        for (int b = threadIdx.x; b < kCopies * kBins; b += blockDim.x) copies[b] = 0;
        __syncthreads();
        const uint32_t prefix = st->prefix;
        values([&](float v, int64_t i) {
            const uint32_t k = order_key(v);
            const bool counted = !isnan(v) && ((k ^ prefix) & high) == 0 && set.keeps(k, i);
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
    // A thread's range (~150 values of a vocabulary row) is read kTieAhead values at a time, so
    // that its loads wait for L2 together (one at a time: ~90 us a row on the H100).
    constexpr int kTieAhead = 8;
    __shared__ unsigned long long warp_count[kCutThreads / 32];
    __shared__ int32_t last;
    const int64_t chunk = (width + blockDim.x - 1) / blockDim.x, begin = threadIdx.x * chunk;
    const int64_t end = begin + chunk < width ? begin + chunk : width;
    // f(i, tied) for i in [begin, end) in order while it returns true.
    const auto each_in_range = [&](auto f) {
        for (int64_t i0 = begin; i0 < end; i0 += kTieAhead) {
            float v[kTieAhead];
#pragma unroll
            for (int j = 0; j < kTieAhead; ++j) v[j] = i0 + j < end ? __ldcg(r + i0 + j) : __int_as_float(0x7fffffff);
#pragma unroll
            for (int j = 0; j < kTieAhead; ++j)
                if (!f(i0 + j, !isnan(v[j]) && order_key(v[j]) == key && set.keeps(key, i0 + j))) return;
        }
    };
    if (threadIdx.x == 0) last = all_at;  // (not reached: some thread holds the m-th)
    unsigned long long count = 0;
    each_in_range([&](int64_t, bool tied) {
        count += tied;
        return true;
    });
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
        each_in_range([&](int64_t i, bool tied) {
            if (!tied || ++seen != m) return true;
            last = static_cast<int32_t>(i);
            return false;
        });
    }
    __syncthreads();
    return DrawCut{key, last};
}

// cuts[row] for each row whose draw truncates (temperature > 0 with top_k < width or top_p < 1);
// other rows' entries are left alone. keys: the rows' maxima (argmax_partial_kernel). One CTA per
// row, grid n_rows.
__global__ void __launch_bounds__(kCutThreads) draw_cut_kernel(const float* x, int64_t width, const TokenDraw* draws,
                                                              const unsigned long long* keys, DrawCut* cuts,
                                                              BinnedCutStats* stats, BinnedRow* binned) {
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
        const float inv_t = 1.0f / d.temperature;  // as binned_row's (one instruction: the same in every kernel)
        const auto row = [&](auto f) { for_each_value(r, width, f); };
        BinnedRow* b = binned ? binned + blockIdx.x : nullptr;
        const int chosen = b ? b->chosen : -1;
        const unsigned n = b ? b->n_members : 0u;
        if (b && threadIdx.x == 0) atomicAdd(chosen >= 0 && n <= kBinMembers ? &stats->binned : &stats->whole, 1ull);
        if (chosen >= 0 && n <= kBinMembers) {  // the binned first step found the candidates
            const auto members = [&](auto f) {
                for (unsigned j = threadIdx.x; j < n; j += blockDim.x) f(b->members[j].v, b->members[j].i);
            };
            if (top_k) {  // the members: every bin down to top_k's; then top_p among them
                cut = select_cut<false>(r, width, members, cut, static_cast<unsigned long long>(d.top_k), -1.0f, 0ull,
                                        max, inv_t, copies, hist, &st);
                if (d.top_p < 1.0f)
                    cut = select_cut<true>(r, width, members, cut, 0ull, d.top_p, 0ull, max, inv_t, copies, hist, &st);
            } else {  // the members: top_p's bin; the mass above it and the target from the bins
                cut = select_cut<true>(r, width, members, cut, b->target, -1.0f, b->above, max, inv_t, copies, hist, &st);
            }
        } else {  // the whole row: no binned step, no bin reached the target, or too many members
            if (top_k)
                cut = select_cut<false>(r, width, row, cut, static_cast<unsigned long long>(d.top_k), -1.0f, 0ull, max,
                                        inv_t, copies, hist, &st);
            if (d.top_p < 1.0f) cut = select_cut<true>(r, width, row, cut, 0ull, d.top_p, 0ull, max, inv_t, copies, hist, &st);
        }
    }
    if (threadIdx.x == 0) cuts[blockIdx.x] = cut;
    if (binned) {  // left zeroed for the next step (the histogram is read: the compaction has ended)
        BinnedRow* b = binned + blockIdx.x;
        for (int i = threadIdx.x; i < kDistBins; i += blockDim.x) b->hist[i] = 0;
        if (threadIdx.x == 0) b->n_members = 0;
    }
}

// ---- The binned first step ----------------------------------------------------------------------
// A value's bin: its distance below the row's max in units of the temperature, d = (max - x) / T,
// on a logarithmic scale: the exponent and top 6 mantissa bits of d for d in [2^-24, 2^8), 64 bins
// per octave, numbered from the bottom (a higher bin holds higher values, as choose_digit reads
// digits); d below 2^-24 (the max itself, and values a float cannot tell from it at |max| <= 2) in
// the top bin, d from 2^8 (weights below e^-256, and -inf) in the lowest. The bins are relative
// (each 1/64 of its distance wide), so a row's candidates in one bin are about as many whatever the
// spread of its logits (normal rows of 151,936 values: at most ~2,600-4,300 in a bin, at sigma 1e-4
// to 6, T 0.6 and 1), and a nearly flat row (a random model's) still spreads over ~200 bins; the
// first version's range began at 2^-8 and put a row of sigma 1e-4 in one bin (on the H200 the
// random models' rows fell back to the whole-row select). Monotone: a larger value never
// gets a lower bin (d >= 0, whose bits order as its values), so each bin is a range of order keys
// and the exact selection can start inside one.
__device__ __forceinline__ int dist_bin(float v, float max, float inv_t) {
    const int d = __float_as_int((max - v) * inv_t);
    const int at = (d - __float_as_int(0x1p-24f)) >> 17;  // 2^17: one of 64 steps of an octave
    return kDistBins - 1 - (at < 0 ? 0 : at < kDistBins - 1 ? at : kDistBins - 1);
}

// Whether row d truncates, and the row's max (finite) and 1 / temperature.
__device__ __forceinline__ bool binned_row(const TokenDraw& d, int64_t width, const unsigned long long* keys, int row,
                                           float* max, float* inv_t) {
    if (!(d.temperature > 0.0f) || !((d.top_k > 0 && d.top_k < width) || d.top_p < 1.0f)) return false;
    *max = order_key_value(static_cast<uint32_t>(keys[row] >> 32));
    *inv_t = 1.0f / d.temperature;  // as draw_cut_kernel's: the same weights and bins in every kernel
    return isfinite(*max);
}

// The values of CTA blockIdx.x's range of row r, kBinPer at a time per thread (loads in flight
// together), NaN past the end (every thread runs the same number of steps: the compaction's warp
// votes need whole warps).
template <typename F>
__device__ __forceinline__ void for_each_in_chunk(const float* r, int64_t width, int64_t chunk, F f) {
    const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
    const int64_t end = begin + chunk < width ? begin + chunk : width;
    for (int64_t base = begin + threadIdx.x; base - threadIdx.x < end; base += kBinPer * kBinThreads) {
        float v[kBinPer];
#pragma unroll
        for (int j = 0; j < kBinPer; ++j) {
            const int64_t i = base + j * kBinThreads;
            v[j] = i < end ? __ldcg(r + i) : __int_as_float(0x7fffffff);
        }
#pragma unroll
        for (int j = 0; j < kBinPer; ++j) f(v[j], base + j * kBinThreads);
    }
}

// Per truncating row, the histogram of its values' bins (counts when it has top_k, else
// fixed-point masses): a CTA's range into shared memory, then its non-zero bins added to the row's.
// Grid (parts, n_rows).
__global__ void __launch_bounds__(kBinThreads) cut_hist_kernel(const float* x, int64_t width, int64_t chunk,
                                                               const TokenDraw* draws, const unsigned long long* keys,
                                                               BinnedRow* binned) {
    pdl_begin();
    __shared__ unsigned long long hist[kDistBins];
    const TokenDraw d = draws[blockIdx.y];
    float max, inv_t;
    if (!binned_row(d, width, keys, blockIdx.y, &max, &inv_t)) return;
    const bool counts = d.top_k > 0 && d.top_k < width;
    for (int b = threadIdx.x; b < kDistBins; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    for_each_in_chunk(x + blockIdx.y * width, width, chunk, [&](float v, int64_t) {
        const int bin = isnan(v) ? -1 : dist_bin(v, max, inv_t);
        const unsigned long long w = bin < 0 ? 0ull : counts ? 1ull : fixed_weight(v, max, inv_t);
        // A warp whose 32 values share a bin (a flat stretch of the row) adds once: 1,024 threads
        // adding to one shared counter serialise (session 27's first cut kernel).
        const int first = __shfl_sync(0xffffffffu, bin, 0);
        if (__all_sync(0xffffffffu, bin == first)) {
            if (first < 0) return;
            const unsigned long long sum =  // weights < 2^44 in two parts, each part's sum < 2^32
                counts ? 32ull
                       : (static_cast<unsigned long long>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(w >> 22))) << 22) +
                             __reduce_add_sync(0xffffffffu, static_cast<unsigned>(w & 0x3FFFFFu));
            if ((threadIdx.x & 31) == 0) atomicAdd(hist + first, sum);
        } else if (bin >= 0) {
            atomicAdd(hist + bin, w);
        }
    });
    __syncthreads();
    unsigned long long* row = binned[blockIdx.y].hist;
    for (int b = threadIdx.x; b < kDistBins; b += blockDim.x)
        if (hist[b] != 0) atomicAdd(row + b, hist[b]);
}

// Per truncating row, the bin at which the count (top_k) or the mass (top_p: its target from the
// row's total) from the top is reached, then the candidates copied out: with top_k every value of
// that bin and above (top_p, if any, is then selected among them), else the values of that bin
// (the mass above it is known). Every CTA of a row chooses the same bin from the same histogram;
// CTA 0 records it. Members past kBinMembers are counted, not stored (the cut then reads the row).
__global__ void __launch_bounds__(kBinThreads) cut_compact_kernel(const float* x, int64_t width, int64_t chunk,
                                                                  const TokenDraw* draws,
                                                                  const unsigned long long* keys, BinnedRow* binned) {
    pdl_begin();
    __shared__ unsigned long long hist[kDistBins];
    __shared__ Select st;
    const TokenDraw d = draws[blockIdx.y];
    float max, inv_t;
    if (!binned_row(d, width, keys, blockIdx.y, &max, &inv_t)) return;
    const bool top_k = d.top_k > 0 && d.top_k < width;
    BinnedRow* b = binned + blockIdx.y;
    for (int i = threadIdx.x; i < kDistBins; i += blockDim.x) hist[i] = __ldcg(b->hist + i);
    if (threadIdx.x == 0) st = Select{0u, 0ull, 0ull, top_k ? static_cast<unsigned long long>(d.top_k) : 0ull, true};
    __syncthreads();
    if (threadIdx.x < 32) choose_digit(hist, kDistBins, 0, top_k ? -1.0f : d.top_p, &st);
    __syncthreads();
    const int chosen = st.found ? static_cast<int>(st.prefix) : -1;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        b->chosen = chosen;
        b->above = st.above;
        b->target = st.target;
    }
    if (chosen < 0) return;
    const int lane = threadIdx.x & 31;
    for_each_in_chunk(x + blockIdx.y * width, width, chunk, [&](float v, int64_t i) {
        int bin = isnan(v) ? -1 : dist_bin(v, max, inv_t);
        const bool keep = top_k ? bin >= chosen : bin == chosen;
        const unsigned votes = __ballot_sync(0xffffffffu, keep);
        if (votes == 0) return;
        const int leader = __ffs(votes) - 1;
        unsigned base = 0;
        if (lane == leader) base = atomicAdd(&b->n_members, static_cast<unsigned>(__popc(votes)));
        base = __shfl_sync(0xffffffffu, base, leader);
        const unsigned pos = base + __popc(votes & ((1u << lane) - 1u));
        if (keep && pos < kBinMembers) b->members[pos] = CutMember{v, static_cast<int32_t>(i)};
    });
}

}  // namespace

// The scratch: the statistics, then the rows.
constexpr int64_t kRowsOffset = 256;
static_assert(sizeof(BinnedCutStats) <= kRowsOffset);

int64_t binned_cut_bytes(int64_t n_rows) { return kRowsOffset + n_rows * static_cast<int64_t>(sizeof(BinnedRow)); }

void launch_draw_cut(const float* x, int64_t width, int64_t n_rows, const TokenDraw* draws,
                     const unsigned long long* keys, DrawCut* cuts, void* binned_scratch, int n_sms,
                     cudaStream_t stream) {
    if (n_rows == 0) return;
    BinnedCutStats* stats = static_cast<BinnedCutStats*>(binned_scratch);
    BinnedRow* binned = binned_scratch ? reinterpret_cast<BinnedRow*>(static_cast<char*>(binned_scratch) + kRowsOffset)
                                       : nullptr;
    if (binned) {
        // About four CTAs per SM over all rows, each at least one 4,096-value step of a row.
        const int64_t step = static_cast<int64_t>(kBinThreads) * kBinPer;
        const int64_t max_parts = ceil_div(width, step);
        const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(max_parts, ceil_div(4 * n_sms, n_rows)));
        const int64_t chunk = ceil_div(ceil_div(width, parts), step) * step;
        const dim3 grid(static_cast<unsigned>(ceil_div(width, chunk)), static_cast<unsigned>(n_rows));
        launch_pdl(cut_hist_kernel, grid, kBinThreads, 0, stream, x, width, chunk, draws, keys, binned);
        MVLLM_CUDA_LAUNCH_CHECK();
        launch_pdl(cut_compact_kernel, grid, kBinThreads, 0, stream, x, width, chunk, draws, keys, binned);
        MVLLM_CUDA_LAUNCH_CHECK();
    }
    launch_pdl(draw_cut_kernel, static_cast<unsigned>(n_rows), kCutThreads, 0, stream, x, width, draws, keys, cuts,
               stats, binned);
    MVLLM_CUDA_LAUNCH_CHECK();
}

}  // namespace mvllm::cuda
