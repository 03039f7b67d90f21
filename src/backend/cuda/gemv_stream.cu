#include "backend/cuda/gemv_stream.cuh"

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/env.h"
#include "backend/cuda/gemv_items.cuh"
#include "backend/cuda/mma_ptx.cuh"
#include "backend/cuda/weight_layout.h"

namespace mvllm::cuda {
namespace {

// 16 warps: with 8, a warp's chain per row (shared loads, dp4a, shuffles) left the schedulers
// idle ~60 % of cycles (ncu, bench/NOTES.md). No warp of its own issues the copies: a 17th warp
// would put 5 warps on one SM quarter and cap registers at 96 (16 KiB registers per quarter).
constexpr int kStreamWarps = 16;
constexpr int kRowsAtOnce = 2;  // rows a consumer warp dots together
constexpr int64_t kMaxPassBytes = 32 << 10;         // one pass (16 / wpr rows, both matrices of a pair)
constexpr int64_t kStageTarget = 32 << 10;          // bytes a stage aims at (whole passes)
constexpr int64_t kRingBytes = 128 << 10;           // beyond ~64 KiB in flight per SM the rate is flat
// MVLLM_GEMV_STREAM_PROBE=1: the consumers release each stage without dotting it, so the kernel
// measures the ring's copy rate alone (its output is then garbage: measurements only).
int probe() {
    static const int v = env_int("MVLLM_GEMV_STREAM_PROBE", 0);
    return v;
}
// MVLLM_GEMV_STREAM_RING=KiB overrides the ring budget (measurements).
int64_t ring_bytes() {
    static const int64_t v = [] {
        const int kib = env_int("MVLLM_GEMV_STREAM_RING", 0);
        return kib >= 32 && kib <= 200 ? int64_t{kib} << 10 : kRingBytes;
    }();
    return v;
}
constexpr int64_t kMaxPartialBytes = 16 << 10;      // per-row partial sums of one CTA
constexpr int64_t kMinWeightBytes = int64_t{8} << 20;  // smaller matrices keep the register GEMV
constexpr double kMaxImbalance = 1.06;              // most passes of a CTA over the mean

// The device layout of a weight type (weight_layout.h) and the values of one lane's item.
struct TypeInfo {
    SplitLayout layout;
    int item_values = 0;
};
TypeInfo type_info(DType t) {
    switch (t) {
        case DType::Q4_0: return {split_layout(t), Item<DType::Q4_0>::kValues};
        case DType::Q8_0: return {split_layout(t), Item<DType::Q8_0>::kValues};
        case DType::Q4_K: return {split_layout(t), Item<DType::Q4_K>::kValues};
        case DType::Q6_K: return {split_layout(t), Item<DType::Q6_K>::kValues};
        default: return {};
    }
}

std::atomic<int> g_mode{-1};

struct StreamArgs {
    QuantMatrix w[2];
    QxView x;
    const float* bias;
    void* out;
    DType out_type;
    int accumulate;
    int wpr, rows_per_stage, n_stages;
    uint32_t body_area, scale_area, stage_bytes;
    int64_t units;
    int probe;  // PROBE: 1 = the consumers skip the dot products (copy rate of the ring alone)
};

// Reads: the rows of w[0] (and w[1] when kPair) given to this CTA, x (one QX row), bias.
// Writes: out[o] for those rows. Launch: grid n_ctas, kStreamWarps * 32 threads, dynamic
// shared memory: the ring (n_stages x stage_bytes), 2 x n_stages mbarriers, the partial sums.
// Stage layout: [body of w[0]][body of w[1]][scales of w[0]][scales of w[1]]; a stage's scales are
// copied from the 16-byte boundary at or below its first row's (the plane has 16 bytes of slack
// after it, weight_layout.h), so row r's scales sit at (r * scale_row - that boundary).
template <DType T, bool kPair, int KI>
__global__ void __launch_bounds__(kStreamWarps * 32, 1) gemv_stream_kernel(StreamArgs a) {
    using I = Item<T>;
    using Q = QuantTraits<T>;
    constexpr int NS = kPair ? 2 : 1;
    extern __shared__ __align__(128) uint8_t smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int upp = kStreamWarps / a.wpr;
    const int64_t u0 = blockIdx.x * a.units / gridDim.x, u1 = (blockIdx.x + 1) * a.units / gridDim.x;
    const int64_t row_begin = u0 * upp, n_rows = (u1 - u0) * upp;
    const int rs = a.rows_per_stage, n_st = static_cast<int>((n_rows + rs - 1) / rs);
    const int64_t bpr = a.w[0].blocks_per_row;
    const uint32_t row_body = static_cast<uint32_t>(bpr * Q::kBody), row_scale = static_cast<uint32_t>(bpr * Q::kScale);
    auto* full = reinterpret_cast<uint64_t*>(smem + static_cast<size_t>(a.n_stages) * a.stage_bytes);
    uint64_t* empty = full + a.n_stages;
    float* partial = reinterpret_cast<float*>(empty + a.n_stages);
    if (threadIdx.x == 0) {
        for (int i = 0; i < a.n_stages; ++i) {
            mbar_init(&full[i], 1);
            mbar_init(&empty[i], kStreamWarps);
        }
        mbar_init_fence();
    }
    __syncthreads();
    pdl_trigger();
    // The scale bytes [first, end) of stage s's rows, first rounded down to 16.
    auto scale_span = [&](int64_t r0, int nr, uint32_t* first, uint32_t* bytes) {
        const int64_t lo = r0 * row_scale, hi = (r0 + nr) * row_scale;
        const int64_t lo16 = lo & ~int64_t{15}, hi16 = (hi + 15) & ~int64_t{15};
        *first = static_cast<uint32_t>(lo16);  // the plane offset, < 4 GiB for any real matrix
        *bytes = static_cast<uint32_t>(hi16 - lo16);
    };
    // Stage s's rows into its slot (thread 0 only). The first n_stages go before the wait: the
    // weights are no kernel's output.
    const uint64_t policy = l2_evict_first_policy();
    auto issue = [&](int s) {
        const int slot = s % a.n_stages;
        const int64_t r0 = row_begin + static_cast<int64_t>(s) * rs;
        const int nr = static_cast<int>(min(static_cast<int64_t>(rs), row_begin + n_rows - r0));
        const uint32_t body = nr * row_body;
        uint32_t s_first = 0, s_bytes = 0;
        scale_span(r0, nr, &s_first, &s_bytes);
        uint8_t* stage = smem + static_cast<size_t>(slot) * a.stage_bytes;
        mbar_arrive_expect_tx(&full[slot], NS * (body + s_bytes));
#pragma unroll
        for (int m = 0; m < NS; ++m) {
            bulk_load(stage + m * a.body_area, a.w[m].body + r0 * row_body, body, &full[slot], policy);
            bulk_load(stage + NS * a.body_area + m * a.scale_area, a.w[m].scales + s_first, s_bytes, &full[slot], policy);
        }
    };
    if (threadIdx.x == 0)
        for (int s = 0; s < min(n_st, a.n_stages); ++s) issue(s);
    // The epilogue's first row per thread: its bias (a weight) before the wait, the value an
    // accumulating launch adds to right after it, not as dependent loads at the end.
    const bool first_row = threadIdx.x < n_rows;
    const float bias0 = !kPair && first_row && a.bias ? a.bias[row_begin + threadIdx.x] : 0.0f;
    pdl_wait();
    const float resid0 = !kPair && first_row && a.accumulate ? static_cast<const float*>(a.out)[row_begin + threadIdx.x] : 0.0f;
    // A lane's items are the same in every row (part * 32 + lane + k * 32 * wpr, k < KI): their QX
    // values load once, into registers, and stay for the whole matrix.
    const int part = warp % a.wpr;
    const int n_items = static_cast<int>(a.x.n_in / I::kValues);
    typename I::X xr[KI][I::kParts];
#pragma unroll
    for (int k = 0; k < KI; ++k) {
        const int it = part * 32 + lane + k * 32 * a.wpr;
        if (it < n_items)
#pragma unroll
            for (int p = 0; p < I::kParts; ++p) xr[k][p] = I::load_x(a.x, 0, it, p);
    }
    for (int s = 0; s < n_st; ++s) {
        const int slot = s % a.n_stages;
        mbar_wait(&full[slot], (s / a.n_stages) & 1);
        const int64_t r0 = row_begin + static_cast<int64_t>(s) * rs;
        const int nr = static_cast<int>(min(static_cast<int64_t>(rs), row_begin + n_rows - r0));
        uint32_t s_first = 0, s_bytes = 0;
        scale_span(r0, nr, &s_first, &s_bytes);
        const uint32_t stage = smem_addr(smem + static_cast<size_t>(slot) * a.stage_bytes);
        // kRowsAtOnce rows per warp at a time (lr, lr + upp, ...), their loads, dot products and
        // shuffles interleaved: independent chains for the schedulers. A missing last row repeats
        // row lr and is not stored.
        const uint32_t scale_base = stage + NS * a.body_area - s_first;
        for (int lr = warp / a.wpr; lr < nr && !a.probe; lr += kRowsAtOnce * upp) {
            I wv[kRowsAtOnce][KI][NS];
#pragma unroll
            for (int g = 0; g < kRowsAtOnce; ++g) {
                const int r = lr + g * upp < nr ? lr + g * upp : lr;
#pragma unroll
                for (int m = 0; m < NS; ++m) {
                    const uint32_t body = stage + m * a.body_area + r * row_body;
                    const uint32_t scales = scale_base + m * a.scale_area + static_cast<uint32_t>((r0 + r) * row_scale);
#pragma unroll
                    for (int k = 0; k < KI; ++k) {
                        const int it = part * 32 + lane + k * 32 * a.wpr;
                        if (it < n_items) wv[g][k][m].load_shared(body, scales, it);
                    }
                }
            }
            float acc[kRowsAtOnce][NS];
#pragma unroll
            for (int g = 0; g < kRowsAtOnce; ++g)
#pragma unroll
                for (int m = 0; m < NS; ++m) acc[g][m] = 0.0f;
#pragma unroll
            for (int k = 0; k < KI; ++k) {
                const int it = part * 32 + lane + k * 32 * a.wpr;
                if (it < n_items)
#pragma unroll
                    for (int p = 0; p < I::kParts; ++p)
#pragma unroll
                        for (int g = 0; g < kRowsAtOnce; ++g)
#pragma unroll
                            for (int m = 0; m < NS; ++m) acc[g][m] += wv[g][k][m].dot(xr[k][p], p);
            }
            // warp_sum's order for each value, the rows' shuffles side by side.
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
#pragma unroll
                for (int g = 0; g < kRowsAtOnce; ++g)
#pragma unroll
                    for (int m = 0; m < NS; ++m) acc[g][m] += __shfl_xor_sync(0xffffffffu, acc[g][m], o);
            if (lane == 0)
#pragma unroll
                for (int g = 0; g < kRowsAtOnce; ++g) {
                    if (lr + g * upp >= nr) break;
                    const int64_t i = (r0 - row_begin + lr + g * upp) * a.wpr + part;
#pragma unroll
                    for (int m = 0; m < NS; ++m) partial[i * NS + m] = acc[g][m];
                }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);
        // Thread 0 refills the slot once every warp has released it (the other warps go on with
        // the stages already landed).
        if (threadIdx.x == 0 && s + a.n_stages < n_st) {
            mbar_wait(&empty[slot], (s / a.n_stages) & 1);
            issue(s + a.n_stages);
        }
    }
    __syncthreads();  // every partial written
    for (int64_t i = threadIdx.x; i < n_rows; i += kStreamWarps * 32) {
        float v[NS];
#pragma unroll
        for (int m = 0; m < NS; ++m) {
            v[m] = partial[i * a.wpr * NS + m];
            for (int k = 1; k < a.wpr; ++k) v[m] += partial[(i * a.wpr + k) * NS + m];
        }
        const int64_t o = row_begin + i;
        if constexpr (kPair) {
            store_any(a.out, a.out_type, o, silu(v[0]) * v[NS - 1]);
        } else {
            const bool first = i == threadIdx.x;
            float r = v[0];
            if (a.bias) r += first ? bias0 : a.bias[o];
            float* dst = static_cast<float*>(a.out) + o;
            *dst = a.accumulate ? (first ? resid0 : *dst) + r : r;
        }
    }
}

int sm_count_now() {
    static const int n = [] {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        return v;
    }();
    return n;
}

template <DType T, bool kPair, int KI>
void launch_typed(const GemvStreamPlan& p, const TensorView& wv, const TensorView& wv2, const QxView& x,
                  const float* bias, void* out, DType out_type, int accumulate, cudaStream_t stream) {
    const QuantMatrix w = quant_matrix<T>(wv.data, wv.ne[0], wv.ne[1]), w2 = quant_matrix<T>(wv2.data, wv2.ne[0], wv2.ne[1]);
    static const bool attr_set = [&] {
        MVLLM_CUDA_CHECK(cudaFuncSetAttribute(gemv_stream_kernel<T, kPair, KI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           227 << 10));
        return true;
    }();
    (void)attr_set;
    StreamArgs a{{w, w2},
                 x,
                 bias,
                 out,
                 out_type,
                 accumulate,
                 p.wpr,
                 p.rows_per_stage,
                 p.n_stages,
                 static_cast<uint32_t>(p.body_area),
                 static_cast<uint32_t>(p.scale_area),
                 static_cast<uint32_t>(p.stage_bytes),
                 p.units,
                 probe()};
    launch_pdl(gemv_stream_kernel<T, kPair, KI>, p.n_ctas, kStreamWarps * 32, static_cast<size_t>(p.smem_bytes),
               stream, a);
}

// Items per lane held with their QX values in registers (16 warps of at most 128 registers):
// Q4_0 / Q8_0 up to 2 (20 registers each), the K-quants 1 (40).
constexpr int max_items_per_lane(DType t) { return t == DType::Q4_0 || t == DType::Q8_0 ? 2 : 1; }

template <DType T, bool kPair>
void launch_ki(const GemvStreamPlan& p, const TensorView& w, const TensorView& w2, const QxView& x, const float* bias,
               void* out, DType out_type, int accumulate, cudaStream_t stream) {
    MVLLM_CHECK(p.items_per_lane <= max_items_per_lane(T)) << "streaming GEMV: " << p.items_per_lane << " items per lane";
    launch_typed<T, kPair, max_items_per_lane(T)>(p, w, w2, x, bias, out, out_type, accumulate, stream);
}

template <bool kPair>
void launch_pair(const GemvStreamPlan& p, const TensorView& w, const TensorView& w2, const QxView& x, const float* bias,
                 void* out, DType out_type, int accumulate, cudaStream_t stream) {
    switch (w.type) {
        case DType::Q4_0: launch_ki<DType::Q4_0, kPair>(p, w, w2, x, bias, out, out_type, accumulate, stream); break;
        case DType::Q8_0: launch_ki<DType::Q8_0, kPair>(p, w, w2, x, bias, out, out_type, accumulate, stream); break;
        case DType::Q4_K: launch_ki<DType::Q4_K, kPair>(p, w, w2, x, bias, out, out_type, accumulate, stream); break;
        case DType::Q6_K: launch_ki<DType::Q6_K, kPair>(p, w, w2, x, bias, out, out_type, accumulate, stream); break;
        default: MVLLM_CHECK(false) << "streaming GEMV: weight type " << type_name(w.type);
    }
}

}  // namespace

GemvStreamPlan gemv_stream_plan(DType type, int64_t n_in, int64_t n_out, bool pair, int n_sms, bool forced) {
    const TypeInfo ti = type_info(type);
    GemvStreamPlan p;
    const SplitLayout& l = ti.layout;
    if (ti.item_values == 0 || n_in % l.block_values != 0 || n_out % kStreamWarps != 0 || n_out <= 0 || n_sms <= 0)
        return p;
    const int ns = pair ? 2 : 1;
    const int64_t bpr = n_in / l.block_values, n_items = n_in / ti.item_values;
    const int64_t row_body = bpr * l.body_bytes, row_scale = bpr * l.scale_bytes;
    if (!forced && ns * n_out * (row_body + row_scale) < kMinWeightBytes) return p;
    for (int wpr = 1; wpr <= kStreamWarps; wpr *= 2) {
        // More warps per row only while every lane keeps half an item or more.
        if (wpr > 1 && n_items < 16 * wpr) break;
        const int64_t upp = kStreamWarps / wpr, pass = ns * upp * (row_body + row_scale);
        const int64_t items_per_lane = ceil_div(n_items, 32 * wpr);
        if (pass > (forced ? ring_bytes() / 2 : kMaxPassBytes) || items_per_lane > max_items_per_lane(type)) continue;
        const int64_t units = n_out / upp, ctas = std::min<int64_t>(n_sms, units);
        const int64_t per = ceil_div(units, ctas);
        if (!forced && static_cast<double>(per) * ctas / static_cast<double>(units) > kMaxImbalance) continue;
        p.wpr = wpr;
        p.items_per_lane = static_cast<int>(items_per_lane);
        p.units = units;
        p.n_ctas = static_cast<int>(ctas);
        // Whole passes, kRowsAtOnce of them at least where two such stages fit the ring.
        int64_t k = std::max<int64_t>(kRowsAtOnce, kStageTarget / pass);
        while (k > 1 && 2 * k * pass > ring_bytes()) --k;
        p.rows_per_stage = static_cast<int>(std::min(upp * k, per * upp));
        p.body_area = p.rows_per_stage * row_body;
        // Up to 15 bytes before the first row's scales and 15 after the last row's.
        p.scale_area = ceil_div(p.rows_per_stage * row_scale, 16) * 16 + 32;
        p.stage_bytes = ns * (p.body_area + p.scale_area);
        p.n_stages = static_cast<int>(std::clamp<int64_t>(ring_bytes() / p.stage_bytes, 2, 12));
        const int64_t partial_bytes = per * upp * wpr * ns * 4;
        if (partial_bytes > kMaxPartialBytes) return GemvStreamPlan{};
        p.smem_bytes = p.n_stages * p.stage_bytes + 2 * p.n_stages * 8 + partial_bytes;
        if (p.smem_bytes > (227 << 10)) return GemvStreamPlan{};
        p.ok = true;
        return p;
    }
    return p;
}

bool gemv_stream_preferred(DType type) {
    // Measured on the H200 (bench kernels, one column, % of the copy rate, register GEMV -> streaming):
    // Q6_K gains on every 7B shape (LM head 58 -> 79 %, 3584x18944 50 -> 62 %, 18944x3584 46 -> 50 %);
    // Q4_0 and Q4_K lose (Q4_0 down 80 -> 48 %), Q8_0 ties on the LM head and loses elsewhere: their
    // dot products are cheap enough for the register GEMV's 28 warps per SM to stream at 70-100 %,
    // and here the 16 warps spend more of each row on the shuffles of 1-2 items per lane
    // (bench/NOTES.md, eighteenth session).
    return type == DType::Q6_K;
}

int gemv_stream_mode() {
    const int m = g_mode.load(std::memory_order_relaxed);
    if (m >= 0) return m;
    static const int from_env = [] {
        const int v = env_int("MVLLM_GEMV_STREAM", 1);
        return v >= 0 && v <= 2 ? v : 1;
    }();
    return from_env;
}

void set_gemv_stream_mode(int mode) { g_mode.store(mode, std::memory_order_relaxed); }

bool launch_gemv_stream(const TensorView& w, const TensorView* w2, const QxView& x, const float* bias, void* out,
                        DType out_type, int accumulate, cudaStream_t stream) {
    const int mode = gemv_stream_mode();
    if (mode == 0 || x.n_rows != 1 || w.ne[0] != x.n_in || w.ne[2] != 1 || w.ne[3] != 1) return false;
    if (mode == 1 && !gemv_stream_preferred(w.type)) return false;
    const GemvStreamPlan p = gemv_stream_plan(w.type, x.n_in, w.ne[1], w2 != nullptr, sm_count_now(), mode == 2);
    if (!p.ok) return false;
    if (w2) launch_pair<true>(p, w, *w2, x, bias, out, out_type, accumulate, stream);
    else launch_pair<false>(p, w, w, x, bias, out, out_type, accumulate, stream);
    return true;
}

}  // namespace mvllm::cuda
