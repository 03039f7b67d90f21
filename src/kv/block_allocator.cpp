#include "kv/block_allocator.h"

namespace mvllm {

BlockAllocator::BlockAllocator(int64_t n_blocks) : n_total_(n_blocks) {
    free_.reserve(n_blocks);
    for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

Status BlockAllocator::grow(std::vector<int32_t>* table, int64_t n_tokens, int32_t block_size) {
    const int64_t needed = (n_tokens + block_size - 1) / block_size - static_cast<int64_t>(table->size());
    if (needed <= 0) return Status::ok();
    if (needed > n_free())
        return make_error("KV cache full: ", n_tokens, " tokens need ", needed, " more blocks of ",
                          block_size, ", ", n_free(), " free of ", n_total_);
    for (int64_t i = 0; i < needed; ++i) {
        table->push_back(free_.back());
        free_.pop_back();
    }
    return Status::ok();
}

void BlockAllocator::release(std::vector<int32_t>* table) {
    for (auto it = table->rbegin(); it != table->rend(); ++it) free_.push_back(*it);
    table->clear();
}

}  // namespace mvllm
