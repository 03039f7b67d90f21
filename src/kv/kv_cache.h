// Paged KV storage in host memory. The model never owns it (DESIGN.md decision 1): the decoder
// receives a KvCache& and writes/reads through the batch's slot mapping and block tables.
//
// Per layer, K and V each: [n_blocks][n_kv_heads][block_size][head_dim] in `dtype` (F32 or F16),
// i.e. inside a block each KV head's tokens are one contiguous run (HND layout), so attention for a
// KV head streams block_size * head_dim contiguous values per block.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace mvllm {

struct KvCacheConfig {
    int32_t n_layers = 0;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t block_size = 16;
    int64_t n_blocks = 0;
    DType dtype = DType::F32;
};

// A view of one layer's K or V blocks.
struct KvLayerView {
    void* k = nullptr;  // [n_blocks][n_kv_heads][block_size][head_dim] dtype
    void* v = nullptr;  // same
    DType dtype = DType::F32;
    int32_t n_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t block_size = 16;

    size_t elem_size() const { return dtype == DType::F32 ? 4 : 2; }
    // Byte offset of (block, head, token-in-block, 0).
    size_t offset(int64_t block, int32_t head, int32_t token) const {
        return ((static_cast<size_t>(block) * n_kv_heads + head) * block_size + token) *
               static_cast<size_t>(head_dim) * elem_size();
    }
};

class KvCache {
public:
    // Allocates (zeroed) host memory for the blocks. Errors when dtype is unsupported or the
    // allocation fails.
    static Result<std::unique_ptr<KvCache>> create(const KvCacheConfig& config);
    // Takes ownership of storage allocated elsewhere (a backend's device memory) that holds
    // storage_bytes(config) bytes in the same layout; `release` frees it when the cache dies.
    static std::unique_ptr<KvCache> wrap(const KvCacheConfig& config, void* storage,
                                         std::function<void(void*)> release, bool on_device);
    // Validates a geometry and returns the bytes its storage needs. `allowed`: the dtypes the
    // backend supports (the host cache: F32, F16).
    static Result<size_t> storage_bytes(const KvCacheConfig& config,
                                        const std::vector<DType>& allowed);
    ~KvCache();
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    const KvCacheConfig& config() const { return config_; }
    // True when layer() views point into device memory (not dereferenceable on the host).
    bool on_device() const { return on_device_; }
    KvLayerView layer(int32_t layer);
    size_t bytes_per_block() const;  // all layers, K and V
    size_t total_bytes() const { return bytes_per_block() * config_.n_blocks; }

private:
    KvCache() = default;
    KvCacheConfig config_;
    std::vector<uint8_t> storage_;  // host cache: [n_layers][2][n_blocks * block bytes]
    uint8_t* base_ = nullptr;       // storage_.data() or the wrapped storage
    std::function<void(void*)> release_;
    bool on_device_ = false;
};

// Blocks of `block_size` tokens that fit in `budget_bytes` for this geometry.
int64_t kv_blocks_for_budget(const KvCacheConfig& geometry, size_t budget_bytes);
// Bytes of one block of this geometry, all layers, K and V (0 for an empty geometry).
size_t kv_block_bytes(const KvCacheConfig& geometry);

}  // namespace mvllm
