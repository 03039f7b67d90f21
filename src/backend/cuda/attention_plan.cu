// The decode attention's split plans (host rules, no GPU needed): how many context splits a
// batch's rows take, when the splits of a row merge through a thread-block cluster, how the split
// merge runs and where the kernel lets the next one launch.
#include <algorithm>
#include <bit>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/env.h"
#include "backend/cuda/gemv.cuh"

namespace mvllm::cuda {

FusedSplit fused_split(int32_t n_rows, int32_t n_kv_heads, int32_t n_head_tiles, int32_t max_context,
                       int32_t n_sms, bool batch_invariant, int32_t min_split_tokens) {
    if (batch_invariant) return {static_cast<int32_t>(ceil_div(max_context, kInvariantSplitTokens)), kInvariantSplitTokens};
    // Aim for about four CTAs per SM (the F32 kernel's residency), in splits of at least
    // min_split_tokens (the kernel's tile a warp: 16 tokens at head_dim 128, 32 at 64;
    // MVLLM_ATTN_F32_MIN_SPLIT: another floor, for measurements), but no more than 64 splits
    // while they would be shorter than 128 tokens: below that the CTAs are their fixed latency and
    // the merge's cost grows with the count. On an H100 (bench/NOTES.md, fortieth session) the 7B
    // geometry's best split count at 1K, 2K and 4K tokens was 64 each (7.15 / 9.15 / 11.7 µs,
    // against 8.65 / 11.3 with 64-token splits at 1K / 2K and 14.6 with 128 splits at 4K).
    static const int32_t env_min = env_int("MVLLM_ATTN_F32_MIN_SPLIT", 0);
    const int32_t min_tokens = std::max({16, min_split_tokens, env_min});
    constexpr int64_t kShortSplitMost = 64, kShortSplitTokens = 128;
    const int64_t base = static_cast<int64_t>(n_rows) * n_kv_heads * n_head_tiles;
    const int64_t want = ceil_div(4LL * std::max(n_sms, 1), std::max<int64_t>(base, 1));
    const int64_t most = std::max<int64_t>(1, std::min(ceil_div(max_context, min_tokens),
                                                       std::max(kShortSplitMost, ceil_div(max_context, kShortSplitTokens))));
    FusedSplit s;
    s.n_splits = static_cast<int32_t>(std::clamp<int64_t>(want, 1, most));
    s.split_tokens = static_cast<int32_t>(ceil_div(ceil_div(max_context, s.n_splits), 16) * 16);
    s.n_splits = static_cast<int32_t>(ceil_div(max_context, s.split_tokens));
    return s;
}

FusedSplit mma_split(int32_t n_rows, int32_t n_ctas_per_row, int32_t max_context, int32_t n_slots,
                     int32_t min_split_tokens, int32_t granule) {
    // The fewest splits that minimise (waves of CTAs) x (tokens per split): every CTA runs about
    // as long as its split, and a partial last wave costs as much as a full one.
    const int64_t base = std::max<int64_t>(1, static_cast<int64_t>(n_rows) * n_ctas_per_row);
    // A batch that fills every slot already (a long prefill chunk, many decodes) gains nothing
    // from splitting, and its split partials would grow with rows x splits (116 GiB for a
    // 32K-token prefill of the 7B geometry): one split.
    const int64_t most = base >= n_slots ? 1 : std::max<int64_t>(1, ceil_div(max_context, min_split_tokens));
    int64_t best_n = 1, best_cost = INT64_MAX;
    for (int64_t n = 1; n <= most; ++n) {
        if (n > granule && n % granule != 0) continue;
        const int64_t cost = ceil_div(base * n, std::max(n_slots, 1)) * ceil_div(max_context, n);
        if (cost < best_cost) best_cost = cost, best_n = n;
    }
    FusedSplit s;
    s.split_tokens = static_cast<int32_t>(ceil_div(ceil_div(max_context, best_n), 16) * 16);
    s.n_splits = static_cast<int32_t>(ceil_div(max_context, s.split_tokens));
    return s;
}

namespace {
int32_t g_forced_one_cluster_tokens = -1;
}  // namespace

void force_one_cluster_tokens(int32_t tokens) { g_forced_one_cluster_tokens = tokens; }

int32_t one_cluster_tokens() {
    static const int32_t tokens = std::max(0, env_int("MVLLM_ATTN_ONE_CLUSTER_TOKENS", 1024));
    return g_forced_one_cluster_tokens >= 0 ? g_forced_one_cluster_tokens : tokens;
}

namespace {
int g_forced_spread_merge = -1;
}  // namespace

void force_spread_merge(int on) { g_forced_spread_merge = on; }

bool spread_merge(int32_t n_parts, bool one_wave, int ctas_per_sm) {
    static const int setting = env_int("MVLLM_ATTN_SPREAD_MERGE", -1);
    const int on = g_forced_spread_merge >= 0 ? g_forced_spread_merge : setting;
    if (on == 0 || n_parts <= 1 || !one_wave) return false;
    return on > 0 || ctas_per_sm >= 2;
}

// MVLLM_ATTN_WARPS=4|8 forces the warps; MVLLM_ATTN_SHORT=0 turns the one-row rules at the
// shortest bucket off (A/B measurements).
namespace {
bool short_rules_on() {
    static const bool on = env_int("MVLLM_ATTN_SHORT", 1) != 0;
    return on;
}
}  // namespace

int decode_warps(int32_t n_rows, int32_t n_kv_heads, int32_t max_context, int32_t head_dim, int32_t n_sms) {
    static const int forced = env_int("MVLLM_ATTN_WARPS", 0);
    if (forced == 4 || forced == 8) return forced;
    if (static_cast<int64_t>(n_rows) * n_kv_heads >= n_sms && max_context <= kFourWarpsMaxContext) return 4;
    if (short_rules_on() && n_rows == 1 && head_dim <= 64 && max_context <= kShortBucket) return 4;
    return 8;
}

bool decode_one_split(int32_t n_rows, int32_t max_context, int32_t head_dim) {
    static const bool batches = env_int("MVLLM_ATTN_SHORT_BATCH", 1) != 0;
    if (!short_rules_on() || max_context > kShortBucket || n_rows < 1) return false;
    return n_rows >= 2 ? batches : head_dim >= 128;
}

int decode_trigger_mode(int32_t n_rows, int32_t n_parts, int ctas_per_sm, AttentionNext next) {
    static const int forced = env_int("MVLLM_ATTN_TRIGGER", -1);
    if (forced >= 0) return forced;
    if (n_rows > kGemvMaxColumns) return 0;
    return n_parts > 1 && ctas_per_sm == 1 && next == AttentionNext::Matmul ? 3 : 1;
}

DecodePlan plan_decode(int32_t n_rows, int32_t n_ctas_per_row, int32_t max_context, int32_t n_slots,
                       int32_t cluster_slots, int32_t short_split, int32_t min_split_tokens, int mode,
                       bool batch_invariant, int32_t one_cluster_tokens) {
    DecodePlan plan;
    // Batch-invariant: the fixed split positions of fused_split (the in-kernel merges walk a row's
    // active splits in order, so a row's result depends on its own context only).
    if (batch_invariant) {
        plan.split = fused_split(n_rows, n_ctas_per_row, 1, max_context, n_slots, true);
        return plan;
    }
    plan.split = mma_split(n_rows, n_ctas_per_row, max_context, n_slots, min_split_tokens);
    // A plain plan (no clusters) of at most kMaxPlainSplits splits, one chunk of the split merge:
    // more parts cost the merge more than their shorter streams save. On the H200 the 0.5B
    // geometry with F16 KV (2 KV heads, 264 slots) at 32K tokens took 17.9 us per layer in 132
    // splits and 13.7 in 64 (MVLLM_ATTN_SPLITS; bench/NOTES.md, nineteenth session); the 7B's
    // slots give it 33 at most, BF16's (132) the 0.5B 64. Applied only where the plan stays plain:
    // the cluster rule below reads the uncapped plan.
    auto plain = [&] {
        if (plan.split.n_splits > kMaxPlainSplits) {
            const int32_t capped = static_cast<int32_t>(ceil_div(ceil_div(max_context, kMaxPlainSplits), 16) * 16);
            plan.split = mma_split(n_rows, n_ctas_per_row, max_context, n_slots, std::max(min_split_tokens, capped));
        }
        return plan;
    };
    // Clusters where the CTAs are short (the merge then being much of the kernel's time: 7B at
    // 512 tokens 6.2 -> 5.3 us, 0.5B 4.8 -> 3.9) and the cluster plan runs in one wave of the slots
    // that clusters leave (120 CTAs of 8-CTA clusters at head_dim 128 on the H200, against 132
    // single CTAs): plans of several waves of clusters measured up to three times slower (7B at
    // 32K 25.8 -> 49.3 us, 16 x 4K 42 -> 125; bench/NOTES.md, thirteenth session).
    const bool any_plan = mode == 3;  // measurements only: clusters for any split length and wave count
    // One cluster of longer splits where the plan would take more splits than a cluster holds (so
    // several clusters a row, merged again in global memory), as long as a split stays within
    // one_cluster_tokens and the clusters fit one wave: the global merge (fence, counter, the last
    // CTA's pass over the parts) costs more than a few more tiles a warp. 0.5B after 2,048 tokens
    // (the 4,096 bucket: 32 splits of 128, four clusters, or 8 of 512 in one) on the H100:
    // 1,540 -> 1,696 tok/s; batch-1 decode on the H100 at the 2K / 4K / 8K buckets, 0.5B +12 / +10
    // / +6 %, 7B +4 % each (bench/NOTES.md, thirty-fifth session). Splits of 2,048 (the 16K
    // bucket) lose: B1 7B at 16K 17.0 -> 25.7 us.
    if (mode == 2 && one_cluster_tokens > 0 && cluster_slots > 0 && plan.split.n_splits > kMaxDecodeCluster) {
        const int32_t tokens = static_cast<int32_t>(ceil_div(ceil_div(max_context, kMaxDecodeCluster), 16) * 16);
        if (tokens <= one_cluster_tokens &&
            static_cast<int64_t>(n_rows) * n_ctas_per_row * kMaxDecodeCluster <= cluster_slots) {
            plan.split.split_tokens = tokens;
            plan.split.n_splits = kMaxDecodeCluster;
            plan.cluster = kMaxDecodeCluster;
            return plan;
        }
    }
    if (mode == 0 || cluster_slots <= 0 || plan.split.n_splits <= 1 ||
        (plan.split.split_tokens > short_split && !any_plan))
        return plain();
    const FusedSplit c = mma_split(n_rows, n_ctas_per_row, max_context, cluster_slots, min_split_tokens,
                                   kMaxDecodeCluster);
    // Clusters come in powers of two; splits past the plan's last one idle.
    const int32_t size = std::min<int32_t>(static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(c.n_splits))),
                                           kMaxDecodeCluster);
    const int32_t padded = static_cast<int32_t>(ceil_div(c.n_splits, size) * size);
    const bool one_wave = static_cast<int64_t>(n_rows) * n_ctas_per_row * padded <= cluster_slots;
    if (c.n_splits > 1 && ((c.split_tokens <= short_split && one_wave) || any_plan) &&
        (mode != 1 || c.n_splits <= kMaxDecodeCluster)) {
        plan.split.n_splits = padded;
        plan.split.split_tokens = c.split_tokens;
        plan.cluster = size;
        return plan;
    }
    return plain();
}

}  // namespace mvllm::cuda
