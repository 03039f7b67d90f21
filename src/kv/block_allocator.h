// Hands out KV block ids from a fixed pool (host-only bookkeeping, no device memory).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace mvllm {

class BlockAllocator {
public:
    explicit BlockAllocator(int64_t n_blocks);
    int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
    int64_t n_total() const { return n_total_; }
    // Appends blocks to `table` until it covers n_tokens tokens; an error (and no change) when
    // the pool has too few free blocks.
    Status grow(std::vector<int32_t>* table, int64_t n_tokens, int32_t block_size);
    void release(std::vector<int32_t>* table);

private:
    int64_t n_total_;
    std::vector<int32_t> free_;  // a stack: the last freed block is reused first
};

}  // namespace mvllm
