// Paged KV storage in host memory: one zeroed allocation holding, per layer, the K blocks then the
// V blocks ([n_blocks][n_kv_heads][block_size][head_dim] dtype each).
#include "kv/kv_cache.h"

#include <limits>
#include <new>
#include <stdexcept>
#include <string>

namespace mvllm {
namespace {

size_t dtype_bytes(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

// Bytes of one block of one layer's K (or V): n_kv_heads * block_size * head_dim elements.
// Returns 0 when the product overflows size_t.
size_t block_bytes_one(const KvCacheConfig& c) {
    const unsigned __int128 b = static_cast<unsigned __int128>(c.n_kv_heads) *
                                static_cast<unsigned __int128>(c.block_size) *
                                static_cast<unsigned __int128>(c.head_dim) * dtype_bytes(c.dtype);
    if (b > std::numeric_limits<size_t>::max()) return 0;
    return static_cast<size_t>(b);
}

// All layers, K and V, of one block. 0 on overflow.
size_t block_bytes_all(const KvCacheConfig& c) {
    const unsigned __int128 b =
        static_cast<unsigned __int128>(block_bytes_one(c)) * 2u * static_cast<uint32_t>(c.n_layers);
    if (b > std::numeric_limits<size_t>::max()) return 0;
    return static_cast<size_t>(b);
}

}  // namespace

Result<size_t> KvCache::storage_bytes(const KvCacheConfig& config, const std::vector<DType>& allowed) {
    bool ok = false;
    for (DType t : allowed) ok = ok || t == config.dtype;
    if (!ok) {
        std::string names;
        for (DType t : allowed) names += (names.empty() ? "" : " or ") + std::string(type_name(t));
        const uint32_t id = static_cast<uint32_t>(config.dtype);
        const TypeTraits* t = find_type_traits(id);
        if (t != nullptr) {
            return make_error("KV cache dtype ", t->name, " is not supported (use ", names, ")");
        }
        return make_error("KV cache dtype id ", id, " is not supported (use ", names, ")");
    }
    if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 ||
        config.block_size <= 0 || config.n_blocks <= 0) {
        return make_error("KV cache geometry must be positive: n_layers=", config.n_layers,
                          " n_kv_heads=", config.n_kv_heads, " head_dim=", config.head_dim,
                          " block_size=", config.block_size, " n_blocks=", config.n_blocks);
    }
    const size_t per_block = block_bytes_all(config);
    const unsigned __int128 total =
        static_cast<unsigned __int128>(per_block) * static_cast<uint64_t>(config.n_blocks);
    if (per_block == 0 || total > static_cast<unsigned __int128>(std::vector<uint8_t>().max_size())) {
        return make_error("KV cache of ", config.n_blocks, " blocks (", config.n_layers,
                          " layers, ", config.n_kv_heads, " KV heads, head_dim ", config.head_dim,
                          ", block_size ", config.block_size, ") does not fit in memory");
    }
    return static_cast<size_t>(total);
}

Result<std::unique_ptr<KvCache>> KvCache::create(const KvCacheConfig& config) {
    MVLLM_ASSIGN_OR_RETURN(const size_t total, storage_bytes(config, {DType::F32, DType::F16}));
    std::unique_ptr<KvCache> cache(new KvCache());
    cache->config_ = config;
    try {
        cache->storage_.resize(total);  // zero-initialised
    } catch (const std::bad_alloc&) {
        return make_error("could not allocate ", static_cast<double>(total) / (1 << 20),
                          " MiB of host memory for the KV cache (", config.n_blocks, " blocks)");
    } catch (const std::length_error&) {
        return make_error("KV cache of ", static_cast<double>(total) / (1 << 20),
                          " MiB exceeds the maximum allocation size");
    }
    cache->base_ = cache->storage_.data();
    return cache;
}

std::unique_ptr<KvCache> KvCache::wrap(const KvCacheConfig& config, void* storage,
                                       std::function<void(void*)> release, bool on_device) {
    std::unique_ptr<KvCache> cache(new KvCache());
    cache->config_ = config;
    cache->base_ = static_cast<uint8_t*>(storage);
    cache->release_ = std::move(release);
    cache->on_device_ = on_device;
    return cache;
}

KvCache::~KvCache() {
    if (release_ && base_ != nullptr) release_(base_);
}

KvLayerView KvCache::layer(int32_t layer) {
    MVLLM_CHECK(layer >= 0 && layer < config_.n_layers)
        << "layer " << layer << " of " << config_.n_layers;
    const size_t half = block_bytes_one(config_) * static_cast<size_t>(config_.n_blocks);
    uint8_t* base = base_ + static_cast<size_t>(layer) * 2 * half;
    KvLayerView v;
    v.k = base;
    v.v = base + half;
    v.dtype = config_.dtype;
    v.n_kv_heads = config_.n_kv_heads;
    v.head_dim = config_.head_dim;
    v.block_size = config_.block_size;
    return v;
}

size_t KvCache::bytes_per_block() const { return block_bytes_all(config_); }

size_t kv_block_bytes(const KvCacheConfig& geometry) {
    if (geometry.n_layers <= 0 || geometry.n_kv_heads <= 0 || geometry.head_dim <= 0 || geometry.block_size <= 0)
        return 0;
    return block_bytes_all(geometry);
}

int64_t kv_blocks_for_budget(const KvCacheConfig& geometry, size_t budget_bytes) {
    if (geometry.n_layers <= 0 || geometry.n_kv_heads <= 0 || geometry.head_dim <= 0 ||
        geometry.block_size <= 0) {
        return 0;
    }
    const size_t per_block = block_bytes_all(geometry);
    if (per_block == 0) return 0;
    return static_cast<int64_t>(budget_bytes / per_block);
}

}  // namespace mvllm
