// KV block bookkeeping for many sequences sharing one paged pool (host-only; no device memory is
// touched here). Blocks are reference counted: a block is free, referenced by one or more block
// tables, or cached (unreferenced, kept in the prefix index, evictable in LRU order).
//
// Prefix cache. A full block whose token ids are known is registered under its hash-chain key
// (prefix_cache.h). A registered block is *pending* until its KV is computed and *ready* after.
// A lookup walks the chain of a prompt's full blocks: ready hits are shared (refcount + 1), a
// pending hit makes the caller wait for the block instead of computing it a second time. Every
// hit is verified against the stored token ids and parent block, so a hash collision is a miss.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"

namespace mvllm {

// One sequence's blocks, owned by the sequence, mutated only through the BlockManager.
struct BlockTable {
    std::vector<int32_t> blocks;    // [n_blocks] block ids in position order
    std::vector<PrefixKey> keys;    // [n_keyed] chain keys of the leading full blocks
    int64_t n_computed_blocks = 0;  // leading blocks whose KV is known to be written
    int64_t size() const { return static_cast<int64_t>(blocks.size()); }
};

struct PrefixMatch {
    int64_t n_blocks = 0;     // leading full blocks found ready
    int64_t n_evictable = 0;  // of those, blocks now unreferenced (taking them uses free capacity)
    bool pending = false;     // the next block is being computed by another sequence
};

struct BlockCopy {
    int32_t src = -1;
    int32_t dst = -1;
};

class BlockManager {
public:
    BlockManager(int64_t n_blocks, int32_t block_size, bool enable_prefix_cache = true,
                 PrefixHashFn hash = nullptr);

    int32_t block_size() const { return block_size_; }
    int64_t n_total() const { return static_cast<int64_t>(blocks_.size()); }
    // Blocks an allocation can take: free ones plus cached ones that may be evicted.
    int64_t n_free() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
    int64_t n_cached_unreferenced() const { return static_cast<int64_t>(lru_.size()); }
    bool prefix_cache_enabled() const { return prefix_cache_; }
    const PrefixCacheStats& stats() const { return stats_; }
    int32_t ref_count(int32_t block) const { return blocks_[block].ref_count; }
    void note_pending_wait() { ++stats_.n_pending_waits; }
    void reset_stats() { stats_ = {}; }

    // Blocks that table needs in addition to its own to hold n_tokens tokens.
    int64_t blocks_needed(const BlockTable& table, int64_t n_tokens) const;

    // Looks up the full blocks of tokens[0, n_tokens) (no change to any state).
    PrefixMatch match(const int32_t* tokens, int64_t n_tokens) const;
    // Takes references on the ready prefix of tokens[0, n_tokens) for an empty table and returns
    // the number of tokens whose KV is reused. Counts one query in the telemetry.
    int64_t acquire_prefix(BlockTable* table, const int32_t* tokens, int64_t n_tokens);
    // Grows table to hold n_tokens tokens; false (and no change) when too few blocks are free.
    bool allocate(BlockTable* table, int64_t n_tokens);
    // After a forward: registers the full blocks among tokens[0, n_known) (pending unless inside
    // n_computed) and marks the blocks inside tokens[0, n_computed) ready.
    void commit(BlockTable* table, const int32_t* tokens, int64_t n_known, int64_t n_computed);
    // Drops the table's references. Ready cached blocks stay in the index (evictable, the tail
    // of a sequence first); pending ones are unregistered and freed.
    void release(BlockTable* table);
    // dst (empty) shares src's blocks for n_tokens tokens: full blocks by reference, the partial
    // last block as a fresh copy the caller must fill (returned). False when no block is free.
    bool fork(const BlockTable& src, int64_t n_tokens, BlockTable* dst, std::vector<BlockCopy>* copies);

    // Every block is free, cached or referenced exactly as often as the tables list it.
    // Returns an empty string when consistent, otherwise what is wrong (for tests).
    std::string check_consistency(const std::vector<const BlockTable*>& tables) const;

private:
    struct Block {
        int32_t ref_count = 0;
        uint32_t generation = 0;  // bumped whenever the block gets new contents
        bool cached = false;      // registered in the prefix index under `key`
        bool computed = false;    // KV written (a cached block that is not computed is pending)
        PrefixKey key = 0;
        int32_t parent = -1;      // previous block of the chain (-1: first block)
        uint32_t parent_generation = 0;
        std::vector<int32_t> tokens;  // [block_size] token ids, while cached
        std::list<int32_t>::iterator lru_pos;
        bool in_lru = false;
    };
    int32_t take_block();          // a free block, evicting the least recently used cached one
    void forget(int32_t block);    // removes the block from the prefix index
    // The cached block for key whose tokens and parent match, or -1.
    int32_t find(PrefixKey key, const int32_t* tokens, int32_t parent, bool* collision) const;
    PrefixKey hash(PrefixKey parent, const int32_t* tokens) const;

    int32_t block_size_;
    bool prefix_cache_;
    PrefixHashFn hash_;
    std::vector<Block> blocks_;                       // [n_blocks]
    std::vector<int32_t> free_;                       // never-cached or dropped blocks (a stack)
    std::list<int32_t> lru_;                          // unreferenced cached blocks, oldest first
    std::unordered_map<PrefixKey, int32_t> index_;    // key -> block
    PrefixCacheStats stats_;
};

// "4096", "512MiB", "2GiB", "1.5G", "64M", "100KB": bytes (K/M/G/T and KiB/MiB/GiB/TiB are
// binary; KB/MB/GB/TB decimal). An error for anything else.
Result<size_t> parse_memory_size(std::string_view text);

// The pool a memory budget buys for a KV geometry.
struct KvPoolPlan {
    int64_t n_blocks = 0;
    int32_t block_size = 0;
    size_t bytes_per_block = 0;
    int64_t max_seq_len = 0;
    int64_t n_tokens() const { return n_blocks * block_size; }
    // Sequences of max_seq_len tokens that fit at once.
    int64_t n_full_sequences() const { return max_seq_len > 0 ? n_tokens() / max_seq_len : 0; }
    std::string report() const;  // one line for the start-up log
};

// Errors when the budget does not hold a single block.
Result<KvPoolPlan> plan_kv_pool(const KvCacheConfig& geometry, size_t budget_bytes, int64_t max_seq_len);

}  // namespace mvllm
