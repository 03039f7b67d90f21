// Sizing the engine's KV pool from the device's memory (--kv-cache-memory 90%,
// --gpu-memory-utilization 0.9): a profiling forward of the largest step the scheduler can build
// grows the backend's activation buffers first, so the pool only takes memory nothing else needs.
#pragma once

#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "kv/kv_cache.h"

namespace mvllm {

class Decoder;

struct KvBudget {
    size_t bytes = 0;
    std::string source;  // how it was derived, for the start-up report
};

// The byte budget of the pool: options.kv_cache_memory, or the fraction / utilization rule of
// options applied to decoder.backend().memory_info() after the profiling forward. An error when
// the rule leaves nothing for the pool or the device cannot report its memory.
Result<KvBudget> kv_pool_budget(Decoder& decoder, const EngineOptions& options, const KvCacheConfig& geometry,
                                int64_t max_model_len);

}  // namespace mvllm
