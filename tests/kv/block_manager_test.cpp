// Block manager: reference counts, fork, free, prefix index (hits, pending blocks, collisions),
// LRU eviction, randomised invariants; memory-budget helpers.
#include "kv/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace mvllm {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
    std::vector<int32_t> t(n);
    std::iota(t.begin(), t.end(), start);
    return t;
}

// Allocates, marks everything computed and releases: the full blocks stay cached.
void compute_and_release(BlockManager& bm, const std::vector<int32_t>& tokens) {
    BlockTable t;
    ASSERT_TRUE(bm.allocate(&t, tokens.size()));
    bm.commit(&t, tokens.data(), tokens.size(), tokens.size());
    bm.release(&t);
}

TEST(BlockManager, AllocateAndReleaseCountReferences) {
    BlockManager bm(8, 4);
    BlockTable a, b;
    EXPECT_TRUE(bm.allocate(&a, 9));  // 3 blocks
    EXPECT_EQ(a.size(), 3);
    EXPECT_EQ(bm.n_free(), 5);
    EXPECT_TRUE(bm.allocate(&a, 12));  // still 3
    EXPECT_EQ(a.size(), 3);
    EXPECT_FALSE(bm.allocate(&b, 24));  // 6 > 5: no change
    EXPECT_EQ(b.size(), 0);
    EXPECT_EQ(bm.n_free(), 5);
    EXPECT_TRUE(bm.allocate(&b, 20));
    EXPECT_EQ(bm.n_free(), 0);
    for (int32_t id : a.blocks) EXPECT_EQ(bm.ref_count(id), 1);
    EXPECT_EQ(bm.check_consistency({&a, &b}), "");
    bm.release(&a);
    EXPECT_EQ(bm.n_free(), 3);
    bm.release(&b);
    EXPECT_EQ(bm.n_free(), 8);
    EXPECT_EQ(bm.check_consistency({}), "");
}

TEST(BlockManager, ForkSharesFullBlocksAndCopiesTheTail) {
    BlockManager bm(8, 4);
    BlockTable parent, child;
    ASSERT_TRUE(bm.allocate(&parent, 10));  // 2 full + 1 partial
    std::vector<BlockCopy> copies;
    ASSERT_TRUE(bm.fork(parent, 10, &child, &copies));
    ASSERT_EQ(child.size(), 3);
    EXPECT_EQ(child.blocks[0], parent.blocks[0]);
    EXPECT_EQ(child.blocks[1], parent.blocks[1]);
    EXPECT_NE(child.blocks[2], parent.blocks[2]);
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].src, parent.blocks[2]);
    EXPECT_EQ(copies[0].dst, child.blocks[2]);
    EXPECT_EQ(bm.ref_count(parent.blocks[0]), 2);
    EXPECT_EQ(bm.check_consistency({&parent, &child}), "");
    bm.release(&parent);
    EXPECT_EQ(bm.ref_count(child.blocks[0]), 1);
    EXPECT_EQ(bm.n_free(), 5);
    bm.release(&child);
    EXPECT_EQ(bm.n_free(), 8);
    EXPECT_EQ(bm.check_consistency({}), "");
}

TEST(BlockManager, PrefixHitSharesReadyBlocks) {
    BlockManager bm(16, 4);
    const auto prompt = iota_tokens(10);
    compute_and_release(bm, prompt);
    EXPECT_EQ(bm.n_cached_unreferenced(), 2);  // 2 full blocks cached, the partial one freed
    auto other = prompt;
    other.push_back(99);
    const PrefixMatch m = bm.match(other.data(), other.size() - 1);
    EXPECT_EQ(m.n_blocks, 2);
    EXPECT_EQ(m.n_evictable, 2);
    EXPECT_FALSE(m.pending);
    BlockTable a, b;
    EXPECT_EQ(bm.acquire_prefix(&a, other.data(), other.size() - 1), 8);
    EXPECT_EQ(bm.acquire_prefix(&b, other.data(), 7), 4);  // only one full block within 7 tokens
    EXPECT_EQ(a.blocks[0], b.blocks[0]);
    EXPECT_EQ(bm.ref_count(a.blocks[0]), 2);
    EXPECT_EQ(bm.stats().n_hit_blocks, 3);
    EXPECT_EQ(bm.stats().n_tokens_reused, 12);
    EXPECT_EQ(bm.check_consistency({&a, &b}), "");
    // A different first block misses even when the second block's tokens are equal.
    auto diverged = prompt;
    diverged[0] = 500;
    EXPECT_EQ(bm.match(diverged.data(), diverged.size()).n_blocks, 0);
    bm.release(&a);
    bm.release(&b);
    EXPECT_EQ(bm.check_consistency({}), "");
}

TEST(BlockManager, GeneratedTokensArePublished) {
    BlockManager bm(16, 4);
    BlockTable t;
    std::vector<int32_t> tokens = iota_tokens(3);  // prompt of 3
    ASSERT_TRUE(bm.allocate(&t, 3));
    bm.commit(&t, tokens.data(), 3, 3);
    for (int32_t g = 100; g < 106; ++g) {  // decode: each token's KV written one step later
        tokens.push_back(g);
        ASSERT_TRUE(bm.allocate(&t, tokens.size()));
        bm.commit(&t, tokens.data(), tokens.size(), tokens.size());
    }
    bm.release(&t);  // 9 tokens: 2 full blocks, both holding generated tokens
    EXPECT_EQ(bm.match(tokens.data(), tokens.size()).n_blocks, 2);
}

TEST(BlockManager, PendingBlocksMakeTwinsWaitAndAreDroppedWhenAbandoned) {
    BlockManager bm(16, 4);
    const auto prompt = iota_tokens(9);
    BlockTable first;
    ASSERT_TRUE(bm.allocate(&first, 9));
    bm.commit(&first, prompt.data(), 9, 0);  // registered, nothing computed yet
    EXPECT_TRUE(bm.match(prompt.data(), 8).pending);
    EXPECT_EQ(bm.match(prompt.data(), 8).n_blocks, 0);
    bm.commit(&first, prompt.data(), 9, 4);  // first block computed
    PrefixMatch m = bm.match(prompt.data(), 8);
    EXPECT_EQ(m.n_blocks, 1);
    EXPECT_TRUE(m.pending);
    bm.release(&first);  // abandoned (preempted): the pending block is unregistered and freed
    m = bm.match(prompt.data(), 8);
    EXPECT_EQ(m.n_blocks, 1);
    EXPECT_FALSE(m.pending);
    EXPECT_EQ(bm.n_cached_unreferenced(), 1);
    EXPECT_EQ(bm.check_consistency({}), "");
}

TEST(BlockManager, LruEvictsTheOldestUnreferencedBlocksTailFirst) {
    BlockManager bm(4, 2);
    const auto a = iota_tokens(4, 0), b = iota_tokens(4, 10);
    compute_and_release(bm, a);  // 2 cached blocks
    compute_and_release(bm, b);  // 2 more: pool entirely cached
    EXPECT_EQ(bm.n_free(), 4);
    EXPECT_EQ(bm.n_cached_unreferenced(), 4);
    BlockTable t;
    ASSERT_TRUE(bm.allocate(&t, 2));  // evicts a's tail block first
    EXPECT_EQ(bm.stats().n_evictions, 1);
    EXPECT_EQ(bm.match(a.data(), 4).n_blocks, 1);
    EXPECT_EQ(bm.match(b.data(), 4).n_blocks, 2);
    // Touching b's blocks makes them recent; the next eviction takes a's head.
    BlockTable hit;
    bm.acquire_prefix(&hit, b.data(), 4);
    bm.release(&hit);
    ASSERT_TRUE(bm.allocate(&t, 4));
    EXPECT_EQ(bm.stats().n_evictions, 2);
    EXPECT_EQ(bm.match(a.data(), 4).n_blocks, 0);
    EXPECT_EQ(bm.match(b.data(), 4).n_blocks, 2);
    bm.release(&t);
    EXPECT_EQ(bm.check_consistency({}), "");
}

TEST(BlockManager, HashCollisionsAreMisses) {
    // Every key collides: hits must still only return blocks with the same tokens and parent.
    BlockManager bm(16, 2, true, [](PrefixKey, const int32_t*, int32_t) { return PrefixKey{42}; });
    compute_and_release(bm, {1, 2, 3, 4});
    EXPECT_EQ(bm.match(std::vector<int32_t>{1, 2, 3, 4}.data(), 4).n_blocks, 1);
    EXPECT_EQ(bm.match(std::vector<int32_t>{5, 6, 3, 4}.data(), 4).n_blocks, 0);
    BlockTable t;
    const std::vector<int32_t> other{7, 8, 9, 10};
    EXPECT_EQ(bm.acquire_prefix(&t, other.data(), 4), 0);
    EXPECT_EQ(bm.stats().n_collisions, 1);
    EXPECT_EQ(bm.check_consistency({&t}), "");
}

TEST(BlockManager, DisabledPrefixCacheNeverHits) {
    BlockManager bm(8, 2, false);
    compute_and_release(bm, {1, 2, 3, 4});
    EXPECT_EQ(bm.match(std::vector<int32_t>{1, 2, 3, 4}.data(), 4).n_blocks, 0);
    EXPECT_EQ(bm.n_cached_unreferenced(), 0);
    EXPECT_EQ(bm.n_free(), 8);
}

// Random allocate / grow / commit / fork / acquire / release; invariants after every operation.
TEST(BlockManager, RandomisedOperationsKeepInvariants) {
    for (int seed = 0; seed < 300; ++seed) {
        std::mt19937 rng(seed);
        BlockManager bm(12, 4);
        struct Seq { std::vector<int32_t> tokens; BlockTable table; };
        std::vector<Seq> seqs;
        for (int op = 0; op < 60; ++op) {
            const int kind = rng() % 5;
            if (kind == 0 || seqs.empty()) {  // new sequence with a prompt from a small alphabet
                Seq s;
                const int n = 1 + rng() % 14;
                for (int i = 0; i < n; ++i) s.tokens.push_back(rng() % 3);
                const int64_t reused = bm.acquire_prefix(&s.table, s.tokens.data(), s.tokens.size() - 1);
                ASSERT_EQ(reused % 4, 0);
                if (!bm.allocate(&s.table, s.tokens.size())) {
                    bm.release(&s.table);
                } else {
                    bm.commit(&s.table, s.tokens.data(), s.tokens.size(), s.tokens.size());
                    seqs.push_back(std::move(s));
                }
            } else if (kind == 1 || kind == 2) {  // decode one token
                Seq& s = seqs[rng() % seqs.size()];
                s.tokens.push_back(rng() % 3);
                if (bm.allocate(&s.table, s.tokens.size()))
                    bm.commit(&s.table, s.tokens.data(), s.tokens.size(), s.tokens.size());
                else
                    s.tokens.pop_back();
            } else if (kind == 3) {  // fork
                Seq& s = seqs[rng() % seqs.size()];
                Seq c;
                c.tokens = s.tokens;
                std::vector<BlockCopy> copies;
                if (bm.fork(s.table, s.tokens.size(), &c.table, &copies)) seqs.push_back(std::move(c));
            } else {  // finish
                const size_t i = rng() % seqs.size();
                bm.release(&seqs[i].table);
                seqs.erase(seqs.begin() + i);
            }
            std::vector<const BlockTable*> tables;
            for (const Seq& s : seqs) tables.push_back(&s.table);
            ASSERT_EQ(bm.check_consistency(tables), "") << "seed " << seed << " op " << op;
        }
    }
}

TEST(BlockManager, MemorySizes) {
    EXPECT_EQ(*parse_memory_size("4096"), 4096u);
    EXPECT_EQ(*parse_memory_size("512MiB"), size_t(512) << 20);
    EXPECT_EQ(*parse_memory_size("2GiB"), size_t(2) << 30);
    EXPECT_EQ(*parse_memory_size("1.5G"), size_t(3) << 29);
    EXPECT_EQ(*parse_memory_size("64m"), size_t(64) << 20);
    EXPECT_EQ(*parse_memory_size("100KB"), 100000u);
    EXPECT_FALSE(parse_memory_size("lots").is_ok());
    EXPECT_FALSE(parse_memory_size("12 parsecs").is_ok());
    EXPECT_FALSE(parse_memory_size("-1").is_ok());
}

TEST(BlockManager, PoolPlanFromBudget) {
    KvCacheConfig g;
    g.n_layers = 2;
    g.n_kv_heads = 2;
    g.head_dim = 32;
    g.block_size = 16;
    // one block: 2 layers * K,V * 2 heads * 16 tokens * 32 * 4 bytes = 16 KiB
    auto plan = plan_kv_pool(g, size_t(1) << 20, 512);
    ASSERT_TRUE(plan.is_ok()) << plan.status().message();
    EXPECT_EQ(plan->bytes_per_block, 16384u);
    EXPECT_EQ(plan->n_blocks, 64);
    EXPECT_EQ(plan->n_tokens(), 1024);
    EXPECT_EQ(plan->n_full_sequences(), 2);
    EXPECT_NE(plan->report().find("64 blocks"), std::string::npos) << plan->report();
    EXPECT_FALSE(plan_kv_pool(g, 1000, 512).is_ok());
}

}  // namespace
}  // namespace mvllm
