#include "backend/cuda/attention.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <string>
#include <cstdint>
#include <type_traits>

#include "backend/backend.h"
#include "backend/cuda/attention_mma.cuh"
#include "backend/cuda/attention_prefill.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/env.h"

namespace mvllm::cuda {
namespace {

// Reads: positions[blockIdx.x], inv_freq. Writes: table row blockIdx.x, (cos, sin) of each
// frequency (threadIdx.x). It reads no kernel's output, so it computes before its wait (for the
// chain of completions every kernel of a step keeps).
__global__ void rope_table_kernel(const int32_t* positions, const float* inv_freq, float2* table) {
    pdl_trigger();
    const float2 r = rope_cos_sin(positions[blockIdx.x], inv_freq[threadIdx.x]);
    pdl_wait();
    table[static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x] = r;
}

// How the decode kernel may merge its splits through thread-block clusters (MVLLM_ATTN_CLUSTER,
// for A/B measurements): 0 never (global memory and the split counter only), 1 when one cluster
// holds all of a row's splits, 2 (default) also clusters of 8 whose results merge in global memory,
// 3 as 2 but for splits of any length (measurements only: slower, see decode_launch). Needs a
// device that launches clusters (sm_90).
static_assert(mma_decode::kMaxClusterSplits == kMaxDecodeCluster, "one cluster limit");
static_assert(kMaxPlainSplits == mma_decode::kMergeChunk, "a plain plan's parts merge in one chunk");

int cluster_merge_mode() {
    static const int mode = [] {
        int device = 0, can = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&can, cudaDevAttrClusterLaunch, device);
        return can ? std::clamp(env_int("MVLLM_ATTN_CLUSTER", 2), 0, 3) : 0;
    }();
    return mode;
}

// The fewest context tokens per split of the decode kernel: one tile per warp, or
// MVLLM_ATTN_MIN_SPLIT_TOKENS (a multiple of 16, for measurements).
int32_t min_split_tokens(int warps) {
    static const int32_t forced = [] {
        const int32_t v = env_int("MVLLM_ATTN_MIN_SPLIT_TOKENS", 0);
        return v > 0 && v % mma_decode::kTile == 0 ? v : 0;
    }();
    return forced ? forced : warps * mma_decode::kTile;
}

// The decode kernel's flags: its first tiles before the PDL wait (MVLLM_EARLY_LOADS), the chunked
// split merge in place of the warp merge (MVLLM_ATTN_MERGE=chunked) or its 8-part groups
// (MVLLM_ATTN_MERGE=x8), the split count's earlier fences (MVLLM_ATTN_FENCE=sc), the cluster
// merge's full exit barrier (MVLLM_ATTN_CLUSTER_EXIT=full), its first barrier's full release
// arrival (MVLLM_ATTN_CLUSTER_FENCE=0), where it lets
// the next kernel launch (decode_trigger_mode), and each row's context spread over all the splits
// unless batch-invariant (MVLLM_ATTN_ROW_SPLITS=0: fixed positions; measurements only), L2
// prefetches of Q's inputs before the wait (on by default; MVLLM_ATTN_PREFETCH_Q=0 turns them off:
// the 0.5B +1-2 %, B1 7B F16 32K -5 % on the H200, NOTES, thirty-eighth session).
int decode_flags(bool batch_invariant, int32_t n_rows, int32_t n_parts, int ctas_per_sm, AttentionNext next) {
    static const int merge = [] {
        const char* v = std::getenv("MVLLM_ATTN_MERGE");
        if (v && std::strcmp(v, "chunked") == 0) return mma_decode::kChunkedMerge;
        if (v && std::strcmp(v, "x8") == 0) return mma_decode::kMergeGroup8Flag;
        return 0;
    }();
    static const int fence = [] {
        const char* v = std::getenv("MVLLM_ATTN_FENCE");
        return v && std::strcmp(v, "sc") == 0 ? mma_decode::kScFence : 0;
    }();
    static const int cluster_exit = [] {
        const char* v = std::getenv("MVLLM_ATTN_CLUSTER_EXIT");
        return v && std::strcmp(v, "full") == 0 ? mma_decode::kClusterFullExit : 0;
    }();
    static const int cluster_sync = env_int("MVLLM_ATTN_CLUSTER_FENCE", 1) ? mma_decode::kClusterSharedFence : 0;
    static const bool row_splits = env_on("MVLLM_ATTN_ROW_SPLITS");
    static const bool prefetch_q = env_int("MVLLM_ATTN_PREFETCH_Q", 1) != 0;
    constexpr int kTriggers[] = {0, mma_decode::kTriggerAfterQ, mma_decode::kTriggerAfterTiles,
                                 mma_decode::kTriggerAfterMerge, mma_decode::kTriggerAtExit};
    const int mode = decode_trigger_mode(n_rows, n_parts, ctas_per_sm, next);
    const int trigger = mode >= 0 && mode < 5 ? kTriggers[mode] : 0;
    return (early_loads() & kEarlyAttention ? mma_decode::kEarlyTiles : 0) | merge | fence | cluster_exit | cluster_sync |
           trigger |
           (prefetch_q ? mma_decode::kPrefetchQ : 0) |
           (row_splits && !batch_invariant ? mma_decode::kRowSplits : 0);
}

// The decode kernel's launch attributes, set once; returns its CTAs per SM.
template <int HD, typename KT, int W, bool Tma>
int decode_ctas_per_sm() {
    static const int n = [] {
        constexpr size_t kShared = mma_decode::shared_bytes<HD, KT, W, Tma>();
        MVLLM_CUDA_CHECK(cudaFuncSetAttribute(mma_decode::decode_kernel<HD, KT, W, Tma>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kShared)));
        // All of L1 as shared memory: otherwise the driver may configure just enough for one CTA
        // per SM while the occupancy query (and the split plan) counts on two.
        MVLLM_CUDA_CHECK(cudaFuncSetAttribute(mma_decode::decode_kernel<HD, KT, W, Tma>,
                                              cudaFuncAttributePreferredSharedMemoryCarveout,
                                              cudaSharedmemCarveoutMaxShared));
        int ctas = 0;
        MVLLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, mma_decode::decode_kernel<HD, KT, W, Tma>,
                                                                      W * 32, kShared));
        return std::max(ctas, 1);
    }();
    return n;
}

// How many of the decode kernel's CTAs can be resident at once in clusters of `size` (0: none).
template <int HD, typename KT, int W, bool Tma>
int decode_cluster_slots(int size) {
    decode_ctas_per_sm<HD, KT, W, Tma>();
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(1, 1, size);
    config.blockDim = dim3(W * 32);
    config.dynamicSmemBytes = mma_decode::shared_bytes<HD, KT, W, Tma>();
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = size;
    config.attrs = &attr;
    config.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, mma_decode::decode_kernel<HD, KT, W, Tma>, &config) != cudaSuccess) n = 0;
    cudaGetLastError();
    return n * size;
}

// F16/BF16 KV: the tensor-core kernels. Sequences with a prefill chunk of at least a row tile go
// to the tiled prefill kernel (attention_prefill.cuh); the other rows to the decode kernel
// (attention_mma.cuh), one launch with its splits merged in-kernel.
// The decode kernel with W warps per CTA over `decode_rows` rows (all rows, or `rows`).
template <int HD, typename KT, int W, bool Tma>
void decode_launch(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                   int32_t n_heads, float scale_log2, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream,
                   bool batch_invariant, const int32_t* rows, int32_t decode_rows, const QxView& qx,
                   const KvTensorMaps& maps, const RawQkv& raw, AttentionNext next) {
    constexpr size_t kShared = mma_decode::shared_bytes<HD, KT, W, Tma>();
    static const int ctas_per_sm = decode_ctas_per_sm<HD, KT, W, Tma>();
    const int32_t group = n_heads / kv.n_kv_heads;
    const int32_t n_tiles = (group + mma_decode::kHeadTile - 1) / mma_decode::kHeadTile;
    static const int cluster_slots = decode_cluster_slots<HD, KT, W, Tma>(mma_decode::kMaxClusterSplits);
    DecodePlan plan = plan_decode(decode_rows, kv.n_kv_heads * n_tiles, batch.max_context, n_sms * ctas_per_sm,
                                  cluster_slots, 2 * W * mma_decode::kTile, min_split_tokens(W),
                                  cluster_merge_mode(), batch_invariant, one_cluster_tokens());
    if (!batch_invariant && decode_one_split(decode_rows, batch.max_context, HD)) {
        plan.cluster = 1;
        plan.split.split_tokens = static_cast<int32_t>(ceil_div(batch.max_context, mma_decode::kTile) * mma_decode::kTile);
        plan.split.n_splits = 1;
    }
    // MVLLM_ATTN_SPLITS=n (measurements only): n splits of whole tiles per row, no clusters.
    static const int32_t forced_splits = env_int("MVLLM_ATTN_SPLITS", 0);
    if (forced_splits > 0 && !batch_invariant) {
        plan.cluster = 1;
        plan.split.split_tokens = static_cast<int32_t>(
            ceil_div(ceil_div(batch.max_context, forced_splits), mma_decode::kTile) * mma_decode::kTile);
        plan.split.n_splits = static_cast<int32_t>(ceil_div(batch.max_context, plan.split.split_tokens));
    }
    const FusedSplit split = plan.split;
    const int32_t cluster = plan.cluster;
    const int32_t n_parts = split.n_splits / cluster;
    float* part_o = nullptr;
    float* part_ml = nullptr;
    int32_t* counters = nullptr;
    if (n_parts > 1) {
        split_partials(scratch, batch.n_tokens, n_heads, n_parts, HD, &part_o, &part_ml);
        const size_t n_counters = static_cast<size_t>(batch.n_tokens) * kv.n_kv_heads * n_tiles;
        if (scratch.counters_bytes < n_counters * sizeof(int32_t)) {
            grow_attention_scratch(&scratch.counters, &scratch.counters_bytes, n_counters * sizeof(int32_t), "split counters");
            // On `stream`: a legacy-stream memset would not be ordered before the kernel.
            MVLLM_CUDA_CHECK(cudaMemsetAsync(scratch.counters, 0, scratch.counters_bytes, stream));  // kernels reset their own
        }
        counters = static_cast<int32_t*>(scratch.counters);
    }
    const dim3 grid(decode_rows, kv.n_kv_heads * n_tiles, split.n_splits);
    // The spread merge's CTAs wait for the rest of their row: only where the launch fits one wave.
    const int64_t n_ctas = static_cast<int64_t>(grid.x) * grid.y * grid.z;
    const bool one_wave = n_ctas <= (cluster > 1 ? cluster_slots : static_cast<int64_t>(n_sms) * ctas_per_sm);
    const int flags = decode_flags(batch_invariant, batch.n_tokens, n_parts, ctas_per_sm, next) |
                      (spread_merge(n_parts, one_wave, ctas_per_sm) ? mma_decode::kSpreadMerge : 0);
    launch_pdl_clustered(mma_decode::decode_kernel<HD, KT, W, Tma>, grid, W * 32, kShared, stream, dim3(1, 1, cluster),
                         batch, static_cast<const KT*>(kv.k), static_cast<const KT*>(kv.v), kv.n_kv_heads,
                         static_cast<const float*>(q.data), n_heads, scale_log2, split.split_tokens, split.n_splits,
                         out.data, out.type, part_o, part_ml, counters, rows, flags, cluster, qx, maps, raw);
    MVLLM_CUDA_LAUNCH_CHECK();
}

// The decode kernel with W warps, by tensor copies where the layer allows them.
template <int HD, typename KT, int W>
void decode_dispatch(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                     int32_t n_heads, float scale_log2, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream,
                     bool batch_invariant, const int32_t* rows, int32_t decode_rows, const QxView& qx,
                     const RawQkv& raw, AttentionNext next) {
    KvTensorMaps maps;
    if constexpr (tma_head_dim(HD)) {
        if (kv_tensor_maps(kv, &maps)) {
            decode_launch<HD, KT, W, true>(batch, kv, q, out, n_heads, scale_log2, scratch, n_sms, stream,
                                           batch_invariant, rows, decode_rows, qx, maps, raw, next);
            return;
        }
    }
    std::memset(&maps, 0, sizeof(maps));
    decode_launch<HD, KT, W, false>(batch, kv, q, out, n_heads, scale_log2, scratch, n_sms, stream, batch_invariant,
                                    rows, decode_rows, qx, maps, raw, next);
}

// F16/BF16 KV: the tensor-core kernels. Sequences with a prefill chunk of at least a row tile go
// to the tiled prefill kernel (attention_prefill.cuh); the other rows to the decode kernel
// (attention_mma.cuh), one launch with its splits merged in-kernel.
// Returns whether it wrote `qx` too (every row on the decode kernel; qx given, head_dim % 32 == 0).
template <int HD, typename KT>
bool fused_mma_launch(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                      int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream,
                      bool batch_invariant, const QxView* qx, const RawQkv* raw, AttentionNext next) {
    const int32_t group = n_heads / kv.n_kv_heads;
    const float scale_log2 = scale * kLog2e;
    const int32_t* rows = nullptr;         // the decode kernel's rows: all (nullptr), or the short sequences'
    int32_t decode_rows = batch.n_tokens;  // how many
    constexpr int32_t kMaxGridZ = 65535;  // the prefill grid's z walks the multi-row sequences
    if (!raw && use_tiled_prefill(batch.max_seq_tokens, group, batch_invariant) && batch.n_multi_row_seqs <= kMaxGridZ) {
        constexpr size_t kPrefillShared = mma_prefill::shared_bytes<HD, KT>();
        static const bool configured = [] {
            MVLLM_CUDA_CHECK(cudaFuncSetAttribute(mma_prefill::prefill_kernel<HD, KT>,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(kPrefillShared)));
            return true;
        }();
        (void)configured;
        const int32_t min_tokens = mma_prefill::min_query_tokens(group);
        const dim3 grid(static_cast<unsigned>(ceil_div(static_cast<int64_t>(batch.max_seq_tokens) * group,
                                                       mma_prefill::kRows)),
                        kv.n_kv_heads, batch.n_multi_row_seqs);
        launch_pdl(mma_prefill::prefill_kernel<HD, KT>, grid, mma_prefill::kWarps * 32, kPrefillShared, stream, batch,
                   static_cast<const KT*>(kv.k), static_cast<const KT*>(kv.v), kv.n_kv_heads,
                   static_cast<const float*>(q.data), n_heads, scale_log2, min_tokens, out.data, out.type);
        MVLLM_CUDA_LAUNCH_CHECK();
        // The rest: the rows of sequences shorter than a tile (a prefix of rows_by_query_len).
        const int32_t* lens = batch.host_query_len_by_row;
        decode_rows = static_cast<int32_t>(std::lower_bound(lens, lens + batch.n_tokens, min_tokens) - lens);
        if (decode_rows == 0) return false;
        rows = batch.rows_by_query_len;
    }
    const bool with_qx = qx && HD % 32 == 0 && rows == nullptr;
    const QxView q_out = with_qx ? *qx : QxView{};
    // Batch-invariant mode keeps one fixed kernel shape (its split positions are fixed anyway).
    if (!batch_invariant && decode_warps(decode_rows, kv.n_kv_heads, batch.max_context, HD, n_sms) == 4)
        decode_dispatch<HD, KT, 4>(batch, kv, q, out, n_heads, scale_log2, scratch, n_sms, stream, batch_invariant, rows,
                                   decode_rows, q_out, raw ? *raw : RawQkv{}, next);
    else
        decode_dispatch<HD, KT, 8>(batch, kv, q, out, n_heads, scale_log2, scratch, n_sms, stream, batch_invariant, rows,
                                   decode_rows, q_out, raw ? *raw : RawQkv{}, next);
    return with_qx;
}

template <typename KT>
bool fused_dispatch_dim(const DeviceBatch& batch, const DeviceKvLayer& kv, const TensorView& q, const TensorView& out,
                        int32_t n_heads, float scale, AttentionScratch& scratch, int32_t n_sms, cudaStream_t stream,
                        bool bi, const QxView* qx, const RawQkv* raw, AttentionNext next) {
    switch (kv.head_dim) {
        case 16: return fused_mma_launch<16, KT>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, bi, qx, raw, next);
        case 32: return fused_mma_launch<32, KT>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, bi, qx, raw, next);
        case 64: return fused_mma_launch<64, KT>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, bi, qx, raw, next);
        case 128: return fused_mma_launch<128, KT>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, bi, qx, raw, next);
        default: MVLLM_CHECK(false) << "fused attention: head_dim " << kv.head_dim;
    }
    return false;
}

}  // namespace

int decode_cluster_slots_f16(int head_dim, int warps, int size) {
    const bool eight = warps == 8, tma = attention_tma_enabled();
    auto slots = [&]<int HD>() {
        if (tma) return eight ? decode_cluster_slots<HD, __half, 8, true>(size) : decode_cluster_slots<HD, __half, 4, true>(size);
        return eight ? decode_cluster_slots<HD, __half, 8, false>(size) : decode_cluster_slots<HD, __half, 4, false>(size);
    };
    switch (head_dim) {
        case 64: return slots.template operator()<64>();
        case 128: return slots.template operator()<128>();
        default: return 0;
    }
}

void attention_timeline_reset() {
#ifdef MVLLM_ATTN_TIMELINE
    const unsigned long long zero = 0;
    MVLLM_CUDA_CHECK(cudaMemcpyToSymbol(mma_decode::g_timeline_n, &zero, sizeof(zero)));
#endif
}

size_t attention_timeline_dump(const char* path) {
#ifdef MVLLM_ATTN_TIMELINE
    using mma_decode::kTimelineCap;
    using mma_decode::kTimelineMarks;
    unsigned long long n = 0;
    MVLLM_CUDA_CHECK(cudaDeviceSynchronize());
    MVLLM_CUDA_CHECK(cudaMemcpyFromSymbol(&n, mma_decode::g_timeline_n, sizeof(n)));
    std::vector<mma_decode::TimelineRecord> r(kTimelineCap);
    MVLLM_CUDA_CHECK(cudaMemcpyFromSymbol(r.data(), mma_decode::g_timeline, r.size() * sizeof(r[0])));
    FILE* f = std::fopen(path, "w");
    if (!f) return 0;
    std::fprintf(f, "kc,sm,x,y,z");
    for (int i = 0; i < kTimelineMarks; ++i) std::fprintf(f, ",ns%d", i);
    for (int i = 0; i < kTimelineMarks; ++i) std::fprintf(f, ",clk%d", i);
    std::fprintf(f, "\n");
    const unsigned long long first = n > kTimelineCap ? n - kTimelineCap : 0;
    for (unsigned long long k = first; k < n; ++k) {
        const auto& e = r[k % kTimelineCap];
        std::fprintf(f, "%llu,%u,%u,%u,%u", static_cast<unsigned long long>(e.kc), e.sm, e.x, e.y, e.z);
        for (int i = 0; i < kTimelineMarks; ++i) std::fprintf(f, ",%llu", static_cast<unsigned long long>(e.ns[i]));
        for (int i = 0; i < kTimelineMarks; ++i) std::fprintf(f, ",%llu", static_cast<unsigned long long>(e.clk[i]));
        std::fprintf(f, "\n");
    }
    std::fclose(f);
    return n - first;
#else
    (void)path;
    return 0;
#endif
}

AttentionScratch::~AttentionScratch() {
    if (scores) cudaFree(scores);
    if (repeated) cudaFree(repeated);
    if (partial) cudaFree(partial);
    if (counters) cudaFree(counters);
    if (rope_table) cudaFree(rope_table);
}

bool cuda_attention_supported(int32_t head_dim, DType kv_dtype) {
    const bool dim_ok = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
    const bool type_ok = kv_dtype == DType::F32 || kv_dtype == DType::F16 || kv_dtype == DType::BF16;
    return dim_ok && type_ok;
}

bool use_tiled_prefill(int32_t max_seq_tokens, int32_t group, bool batch_invariant) {
    static const bool enabled = env_on("MVLLM_CUDA_TILED_PREFILL");
    // Batch-invariant mode keeps every row on the decode kernel's fixed splits: which kernel a
    // prompt token meets would otherwise depend on how the scheduler chunked the batch.
    return enabled && !batch_invariant && max_seq_tokens >= mma_prefill::min_query_tokens(group);
}

const float2* launch_rope_table(const DeviceBatch& batch, const float* inv_freq, int32_t head_dim,
                                AttentionScratch& scratch, cudaStream_t stream) {
    const int32_t half = head_dim / 2;
    MVLLM_CHECK(half >= 1 && half <= 1024 && batch.n_tokens > 0) << "rope table: head_dim " << head_dim;
    grow_attention_scratch(&scratch.rope_table, &scratch.rope_table_bytes,
           static_cast<size_t>(batch.n_tokens) * half * sizeof(float2), "RoPE table");
    auto* table = static_cast<float2*>(scratch.rope_table);
    launch_pdl(rope_table_kernel, static_cast<unsigned>(batch.n_tokens), static_cast<unsigned>(half), 0, stream,
               batch.positions, inv_freq, table);
    MVLLM_CUDA_LAUNCH_CHECK();
    return table;
}

bool attention_folds_rope(CudaAttention variant, const DeviceBatch& batch, const DeviceKvLayer& kv) {
    static const bool enabled = env_on("MVLLM_ATTN_ROPE");
    const DType t = static_cast<DType>(kv.dtype);
    // One new token per sequence, the last of its context: every row is the decode kernel's.
    return enabled && variant == CudaAttention::Fused && (t == DType::F16 || t == DType::BF16) &&
           cuda_attention_supported(kv.head_dim, t) && batch.n_tokens > 0 && batch.max_seq_tokens == 1;
}

bool launch_attention(CudaAttention variant, const DeviceBatch& batch, const int64_t* seq_ctx_offset,
                      int64_t total_context, const DeviceKvLayer& kv, const TensorView& q,
                      const TensorView& out, int32_t n_heads, float scale, AttentionScratch& scratch,
                      int32_t n_sms, cudaStream_t stream, bool batch_invariant, const QxView* qx,
                      const RawQkv* raw, AttentionNext next) {
    MVLLM_CHECK(!raw || attention_folds_rope(variant, batch, kv)) << "attention: RoPE cannot be folded into this batch";
    MVLLM_CHECK(q.type == DType::F32) << "attention q must be f32, got " << type_name(q.type);
    MVLLM_CHECK(q.ne[0] == static_cast<int64_t>(n_heads) * kv.head_dim && out.ne[0] == q.ne[0]) << "attention width";
    MVLLM_CHECK(n_heads % kv.n_kv_heads == 0) << "n_heads " << n_heads << " vs n_kv_heads " << kv.n_kv_heads;
    MVLLM_CHECK(cuda_attention_supported(kv.head_dim, static_cast<DType>(kv.dtype)))
        << "attention: head_dim " << kv.head_dim << " / KV dtype";
    if (variant != CudaAttention::Fused)
        MVLLM_CHECK(n_heads / kv.n_kv_heads <= kMaxGroupThreeOps)
            << "naive/grouped attention support up to " << kMaxGroupThreeOps << " query heads per KV head";
    if (batch.n_tokens == 0) return false;
    if (qx) MVLLM_CHECK(qx->n_in == out.ne[0] && qx->n_rows == batch.n_tokens) << "attention qx shape";
    if (variant != CudaAttention::Fused) {
        launch_three_ops(variant, batch, seq_ctx_offset, total_context, kv, q, out, n_heads, scale, scratch, n_sms, stream);
        return false;
    }
    switch (static_cast<DType>(kv.dtype)) {
        case DType::F32: launch_fused_f32(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, batch_invariant); return false;
        case DType::F16: return fused_dispatch_dim<__half>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, batch_invariant, qx, raw, next);
        case DType::BF16: return fused_dispatch_dim<__nv_bfloat16>(batch, kv, q, out, n_heads, scale, scratch, n_sms, stream, batch_invariant, qx, raw, next);
        default: MVLLM_CHECK(false) << "attention: KV dtype " << type_name(static_cast<DType>(kv.dtype));
    }
    return false;
}

}  // namespace mvllm::cuda
