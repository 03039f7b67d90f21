#include "engine/kv_pool_sizing.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "kv/batch.h"
#include "model/decoder.h"

namespace mvllm {
namespace {

double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

// One forward of n_tokens prompt tokens (one sequence) with logits for min(max_seqs, n_tokens)
// rows: the largest activations a step of the scheduler can need.
Status profiling_forward(Decoder& decoder, const KvCacheConfig& geometry, int64_t n_tokens, int32_t max_seqs) {
    KvCacheConfig config = geometry;
    config.n_blocks = (n_tokens + geometry.block_size - 1) / geometry.block_size;
    MVLLM_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> cache, decoder.backend().create_kv_cache(config));
    std::vector<int32_t> table(config.n_blocks);
    for (int32_t b = 0; b < static_cast<int32_t>(table.size()); ++b) table[b] = b;
    Batch batch;
    batch.block_size = geometry.block_size;
    batch.add_sequence(std::vector<int32_t>(n_tokens, 0), 0, table, false);
    const int64_t n_logits = std::min<int64_t>(std::max(max_seqs, 1), n_tokens);
    for (int64_t r = n_tokens - n_logits; r < n_tokens; ++r) batch.logit_rows.push_back(static_cast<int32_t>(r));
    std::vector<float> logits;
    return decoder.forward(batch, *cache, &logits);
}

}  // namespace

Result<KvBudget> kv_pool_budget(Decoder& decoder, const EngineOptions& o, const KvCacheConfig& geometry,
                                int64_t max_model_len) {
    KvBudget budget;
    const bool fraction = o.kv_cache_memory_fraction > 0, utilization = o.gpu_memory_utilization > 0;
    if (!fraction && !utilization) {
        budget.bytes = o.kv_cache_memory;
        return budget;
    }
    if (fraction && utilization) return make_error("give --kv-cache-memory N% or --gpu-memory-utilization, not both");
    const double f = fraction ? o.kv_cache_memory_fraction : o.gpu_memory_utilization;
    if (!(f > 0 && f <= 1)) return make_error(fraction ? "--kv-cache-memory" : "--gpu-memory-utilization",
                                              " must be a fraction in (0, 1], got ", f);
    const int64_t n_profile = std::max<int64_t>(1, std::min<int64_t>(o.max_batched_tokens, max_model_len));
    if (Status st = profiling_forward(decoder, geometry, n_profile, o.max_seqs); !st)
        return st.with_context("profiling forward of " + std::to_string(n_profile) + " tokens");
    MVLLM_ASSIGN_OR_RETURN(const DeviceMemory mem, decoder.backend().memory_info());
    char buf[256];
    if (fraction) {
        budget.bytes = static_cast<size_t>(f * static_cast<double>(mem.free));
        std::snprintf(buf, sizeof(buf), "%.0f%% of the %.2f GiB free (of %.2f GiB) after the weights and a %lld-token "
                      "profiling forward", 100 * f, gib(mem.free), gib(mem.total), (long long)n_profile);
    } else {
        const double allowed = f * static_cast<double>(mem.total);
        const double used = static_cast<double>(mem.total - mem.free);
        if (allowed <= used)
            return make_error("--gpu-memory-utilization ", f, " allows ", gib(static_cast<size_t>(allowed)),
                              " GiB but ", gib(static_cast<size_t>(used)), " GiB of the device's ", gib(mem.total),
                              " GiB are already in use (weights, activations, other processes): nothing is left for "
                              "the KV cache; raise it or use --kv-cache-memory");
        budget.bytes = static_cast<size_t>(allowed - used);
        std::snprintf(buf, sizeof(buf), "--gpu-memory-utilization %.2f of %.2f GiB, minus %.2f GiB in use after the "
                      "weights and a %lld-token profiling forward", f, gib(mem.total), gib(static_cast<size_t>(used)),
                      (long long)n_profile);
    }
    budget.source = buf;
    return budget;
}

}  // namespace mvllm
