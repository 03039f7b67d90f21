// Prefix-cache keys and telemetry. A full KV block is identified by a hash chain: the key of block
// k is hash(key of block k-1, the block_size token ids of block k), block 0 chaining from a fixed
// seed. Equal keys mean equal prefixes up to a 64-bit collision, which the block manager rules out
// by comparing the stored token ids and the parent block on every hit.
#pragma once

#include <cstdint>
#include <functional>

namespace mvllm {

using PrefixKey = uint64_t;
inline constexpr PrefixKey kPrefixRootKey = 0x6d766c6c6d2d6b76ull;  // the chain's seed

// A 64-bit hash of (parent, tokens): each token is mixed with a multiply-xorshift round and the
// state goes through a splitmix64-style finaliser, so every input bit affects every output bit.
inline PrefixKey hash_block_tokens(PrefixKey parent, const int32_t* tokens, int32_t n_tokens) {
    auto fmix = [](uint64_t x) {
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        return x;
    };
    uint64_t h = fmix(parent ^ 0x9e3779b97f4a7c15ull) + static_cast<uint64_t>(n_tokens);
    for (int32_t i = 0; i < n_tokens; ++i) {
        h ^= fmix(static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x632be59bd9b4e019ull * (i + 1));
        h = (h << 27 | h >> 37) * 0x9e3779b97f4a7c15ull + 0x165667b19e3779f9ull;
    }
    return fmix(h);
}

// Tests inject a weak hash to exercise collision handling.
using PrefixHashFn = std::function<PrefixKey(PrefixKey parent, const int32_t* tokens, int32_t n_tokens)>;

struct PrefixCacheStats {
    int64_t n_queries = 0;         // prefix lookups of admitted requests
    int64_t n_query_blocks = 0;    // full blocks those lookups asked for
    int64_t n_hit_blocks = 0;      // blocks found computed and reused
    int64_t n_tokens_reused = 0;   // n_hit_blocks * block_size
    int64_t n_evictions = 0;       // cached blocks dropped to make room
    int64_t n_pending_waits = 0;   // admissions deferred because a matching block was being computed
    int64_t n_collisions = 0;      // key hits whose tokens or parent differed
    double hit_rate() const { return n_query_blocks ? double(n_hit_blocks) / n_query_blocks : 0.0; }
};

}  // namespace mvllm
