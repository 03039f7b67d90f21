#include "kv/block_manager.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace mvllm {

BlockManager::BlockManager(int64_t n_blocks, int32_t block_size, bool enable_prefix_cache, PrefixHashFn hash)
    : block_size_(block_size), prefix_cache_(enable_prefix_cache), hash_(std::move(hash)),
      blocks_(static_cast<size_t>(n_blocks)) {
    MVLLM_CHECK(n_blocks > 0 && block_size > 0) << n_blocks << " blocks of " << block_size;
    free_.reserve(static_cast<size_t>(n_blocks));
    for (int64_t i = n_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

PrefixKey BlockManager::hash(PrefixKey parent, const int32_t* tokens) const {
    return hash_ ? hash_(parent, tokens, block_size_) : hash_block_tokens(parent, tokens, block_size_);
}

int64_t BlockManager::blocks_needed(const BlockTable& table, int64_t n_tokens) const {
    const int64_t total = (n_tokens + block_size_ - 1) / block_size_;
    return std::max<int64_t>(0, total - table.size());
}

int32_t BlockManager::find(PrefixKey key, const int32_t* tokens, int32_t parent, bool* collision) const {
    auto it = index_.find(key);
    if (it == index_.end()) return -1;
    const Block& b = blocks_[it->second];
    const bool same_parent = b.parent == parent &&
                             (parent < 0 || b.parent_generation == blocks_[parent].generation);
    if (!same_parent || std::memcmp(b.tokens.data(), tokens, sizeof(int32_t) * block_size_) != 0) {
        if (collision) *collision = true;
        return -1;
    }
    return it->second;
}

PrefixMatch BlockManager::match(const int32_t* tokens, int64_t n_tokens) const {
    PrefixMatch m;
    if (!prefix_cache_) return m;
    PrefixKey key = kPrefixRootKey;
    int32_t parent = -1;
    for (int64_t i = 0; (i + 1) * block_size_ <= n_tokens; ++i) {
        const int32_t* block_tokens = tokens + i * block_size_;
        key = hash(key, block_tokens);
        const int32_t b = find(key, block_tokens, parent, nullptr);
        if (b < 0) break;
        if (!blocks_[b].computed) {
            m.pending = true;
            break;
        }
        ++m.n_blocks;
        if (blocks_[b].ref_count == 0) ++m.n_evictable;
        parent = b;
    }
    return m;
}

int64_t BlockManager::acquire_prefix(BlockTable* table, const int32_t* tokens, int64_t n_tokens) {
    MVLLM_CHECK(table->blocks.empty()) << "acquire_prefix on a table of " << table->size() << " blocks";
    if (!prefix_cache_) return 0;
    ++stats_.n_queries;
    stats_.n_query_blocks += n_tokens / block_size_;
    PrefixKey key = kPrefixRootKey;
    int32_t parent = -1;
    for (int64_t i = 0; (i + 1) * block_size_ <= n_tokens; ++i) {
        const int32_t* block_tokens = tokens + i * block_size_;
        key = hash(key, block_tokens);
        bool collision = false;
        const int32_t b = find(key, block_tokens, parent, &collision);
        stats_.n_collisions += collision;
        if (b < 0 || !blocks_[b].computed) break;
        Block& info = blocks_[b];
        if (info.ref_count++ == 0 && info.in_lru) {
            lru_.erase(info.lru_pos);
            info.in_lru = false;
        }
        table->blocks.push_back(b);
        table->keys.push_back(key);
        parent = b;
    }
    table->n_computed_blocks = table->size();
    stats_.n_hit_blocks += table->size();
    stats_.n_tokens_reused += table->size() * block_size_;
    return table->size() * block_size_;
}

void BlockManager::forget(int32_t block) {
    Block& b = blocks_[block];
    if (!b.cached) return;
    auto it = index_.find(b.key);
    if (it != index_.end() && it->second == block) index_.erase(it);
    b.cached = false;
    b.tokens.clear();
}

int32_t BlockManager::take_block() {
    int32_t id;
    if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
    } else {
        MVLLM_CHECK(!lru_.empty()) << "take_block with no free block";
        id = lru_.front();
        lru_.pop_front();
        blocks_[id].in_lru = false;
        forget(id);
        ++stats_.n_evictions;
    }
    Block& b = blocks_[id];
    b.ref_count = 1;
    ++b.generation;
    b.computed = false;
    b.parent = -1;
    return id;
}

bool BlockManager::allocate(BlockTable* table, int64_t n_tokens) {
    const int64_t needed = blocks_needed(*table, n_tokens);
    if (needed > n_free()) return false;
    for (int64_t i = 0; i < needed; ++i) table->blocks.push_back(take_block());
    return true;
}

void BlockManager::commit(BlockTable* table, const int32_t* tokens, int64_t n_known, int64_t n_computed) {
    const int64_t n_full_known = std::min(n_known / block_size_, table->size());
    for (int64_t i = static_cast<int64_t>(table->keys.size()); i < n_full_known; ++i) {
        const PrefixKey parent_key = i ? table->keys[i - 1] : kPrefixRootKey;
        const PrefixKey key = hash(parent_key, tokens + i * block_size_);
        table->keys.push_back(key);
        if (!prefix_cache_) continue;
        Block& b = blocks_[table->blocks[i]];
        if (b.cached || index_.count(key)) continue;  // already indexed (here or a twin block)
        b.cached = true;
        b.key = key;
        b.tokens.assign(tokens + i * block_size_, tokens + (i + 1) * block_size_);
        b.parent = i ? table->blocks[i - 1] : -1;
        b.parent_generation = i ? blocks_[b.parent].generation : 0;
        index_.emplace(key, table->blocks[i]);
    }
    const int64_t n_full_computed = std::min(n_computed / block_size_, table->size());
    for (int64_t i = table->n_computed_blocks; i < n_full_computed; ++i) blocks_[table->blocks[i]].computed = true;
    table->n_computed_blocks = std::max(table->n_computed_blocks, n_full_computed);
}

void BlockManager::release(BlockTable* table) {
    for (auto it = table->blocks.rbegin(); it != table->blocks.rend(); ++it) {
        Block& b = blocks_[*it];
        MVLLM_CHECK(b.ref_count > 0) << "block " << *it << " released twice";
        if (--b.ref_count > 0) continue;
        if (b.cached && b.computed) {
            lru_.push_back(*it);
            b.lru_pos = std::prev(lru_.end());
            b.in_lru = true;
        } else {
            forget(*it);
            free_.push_back(*it);
        }
    }
    table->blocks.clear();
    table->keys.clear();
    table->n_computed_blocks = 0;
}

bool BlockManager::fork(const BlockTable& src, int64_t n_tokens, BlockTable* dst, std::vector<BlockCopy>* copies) {
    MVLLM_CHECK(dst->blocks.empty());
    const int64_t n_full = n_tokens / block_size_;
    const bool partial = n_tokens % block_size_ != 0;
    MVLLM_CHECK(src.size() >= n_full + (partial ? 1 : 0)) << "fork beyond the source's blocks";
    if (partial && n_free() == 0) return false;
    for (int64_t i = 0; i < n_full; ++i) {
        ++blocks_[src.blocks[i]].ref_count;
        dst->blocks.push_back(src.blocks[i]);
    }
    dst->keys.assign(src.keys.begin(), src.keys.begin() + std::min<int64_t>(n_full, src.keys.size()));
    dst->n_computed_blocks = std::min(src.n_computed_blocks, n_full);
    if (partial) {
        const int32_t copy = take_block();
        dst->blocks.push_back(copy);
        copies->push_back({src.blocks[n_full], copy});
    }
    return true;
}

std::string BlockManager::check_consistency(const std::vector<const BlockTable*>& tables) const {
    std::vector<int32_t> refs(blocks_.size(), 0);
    for (const BlockTable* t : tables)
        for (int32_t b : t->blocks) {
            if (b < 0 || b >= n_total()) return "block id " + std::to_string(b) + " out of range";
            ++refs[b];
        }
    std::vector<int> where(blocks_.size(), 0);
    for (int32_t b : free_) where[b] |= 1;
    for (int32_t b : lru_) where[b] |= 2;
    std::ostringstream err;
    for (size_t i = 0; i < blocks_.size(); ++i) {
        const Block& b = blocks_[i];
        if (b.ref_count != refs[i]) err << "block " << i << " ref_count " << b.ref_count << " but " << refs[i] << " tables; ";
        if (refs[i] > 0 && where[i] != 0) err << "block " << i << " referenced and free/cached; ";
        if (refs[i] == 0 && where[i] != 1 && where[i] != 2) err << "block " << i << " leaked (where=" << where[i] << "); ";
        if (where[i] == 2 && !(b.cached && b.computed)) err << "block " << i << " in LRU but not a ready cached block; ";
        if (where[i] == 1 && b.cached) err << "block " << i << " free but still indexed; ";
        if (b.cached) {
            auto it = index_.find(b.key);
            if (it == index_.end() || it->second != static_cast<int32_t>(i)) err << "block " << i << " cached but not indexed; ";
        }
    }
    for (const auto& [key, b] : index_)
        if (!blocks_[b].cached || blocks_[b].key != key) err << "index entry for block " << b << " is stale; ";
    return err.str();
}

Result<size_t> parse_memory_size(std::string_view text) {
    std::string s(text);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    char* end = nullptr;
    const double value = std::strtod(s.c_str(), &end);
    if (end == s.c_str() || !(value >= 0) || !std::isfinite(value))
        return make_error("not a memory size: \"", text, "\" (e.g. 4096, 512MiB, 2GiB)");
    std::string unit(end);
    while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
    for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    static const struct { const char* name; double scale; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1024.0}, {"KIB", 1024.0}, {"KB", 1e3}, {"M", 1048576.0}, {"MIB", 1048576.0},
        {"MB", 1e6}, {"G", 1073741824.0}, {"GIB", 1073741824.0}, {"GB", 1e9}, {"T", 1099511627776.0},
        {"TIB", 1099511627776.0}, {"TB", 1e12}};
    for (const auto& u : units)
        if (unit == u.name) {
            const double bytes = value * u.scale;
            if (bytes > 1.8e19) return make_error("memory size too large: \"", text, "\"");
            return static_cast<size_t>(bytes);
        }
    return make_error("unknown memory unit \"", unit, "\" in \"", text, "\" (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
}

std::string KvPoolPlan::report() const {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "KV cache: %lld blocks x %d tokens = %lld tokens, %.1f MiB (%.1f KiB/block); "
                  "%lld sequences of %lld tokens fit",
                  (long long)n_blocks, block_size, (long long)n_tokens(),
                  double(bytes_per_block) * n_blocks / 1048576.0, bytes_per_block / 1024.0,
                  (long long)n_full_sequences(), (long long)max_seq_len);
    return buf;
}

Result<KvPoolPlan> plan_kv_pool(const KvCacheConfig& geometry, size_t budget_bytes, int64_t max_seq_len) {
    KvPoolPlan plan;
    plan.block_size = geometry.block_size;
    plan.max_seq_len = max_seq_len;
    plan.n_blocks = kv_blocks_for_budget(geometry, budget_bytes);
    const size_t elem = geometry.dtype == DType::F32 ? 4 : 2;  // KvCache holds F32 or F16
    plan.bytes_per_block = size_t(2) * std::max(0, geometry.n_layers) * std::max(0, geometry.n_kv_heads) *
                           std::max(0, geometry.block_size) * std::max(0, geometry.head_dim) * elem;
    if (plan.n_blocks <= 0 || plan.bytes_per_block == 0)
        return make_error("--kv-cache-memory of ", budget_bytes, " bytes holds no KV block of ", geometry.block_size,
                          " tokens (", geometry.n_layers, " layers, ", geometry.n_kv_heads, " KV heads, head_dim ",
                          geometry.head_dim, ")");
    return plan;
}

}  // namespace mvllm
