// KvCache: geometry, zeroed allocation, per-layer views and the errors a user can trigger.
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace mvllm {
namespace {

KvCacheConfig small_config(DType dtype) {
    KvCacheConfig c;
    c.n_layers = 3;
    c.n_kv_heads = 2;
    c.head_dim = 8;
    c.block_size = 4;
    c.n_blocks = 5;
    c.dtype = dtype;
    return c;
}

TEST(KvCache, BytesPerBlockAndTotal) {
    for (DType t : {DType::F32, DType::F16}) {
        auto cache = KvCache::create(small_config(t));
        ASSERT_TRUE(cache.is_ok()) << cache.status().message();
        const size_t elem = t == DType::F32 ? 4 : 2;
        // n_layers * (K and V) * n_kv_heads * block_size * head_dim * elem
        EXPECT_EQ((*cache)->bytes_per_block(), 3u * 2 * 2 * 4 * 8 * elem);
        EXPECT_EQ((*cache)->total_bytes(), (*cache)->bytes_per_block() * 5);
    }
}

TEST(KvCache, LayerViewsAreDisjointAndZeroed) {
    auto res = KvCache::create(small_config(DType::F16));
    ASSERT_TRUE(res.is_ok());
    KvCache& cache = **res;
    const size_t half = 5u * 2 * 4 * 8 * 2;  // one layer's K: n_blocks * heads * bs * d * 2 bytes
    for (int l = 0; l < 3; ++l) {
        const KvLayerView v = cache.layer(l);
        EXPECT_EQ(v.dtype, DType::F16);
        EXPECT_EQ(v.n_kv_heads, 2);
        EXPECT_EQ(v.head_dim, 8);
        EXPECT_EQ(v.block_size, 4);
        EXPECT_EQ(static_cast<uint8_t*>(v.v) - static_cast<uint8_t*>(v.k),
                  static_cast<ptrdiff_t>(half));
        EXPECT_EQ(static_cast<uint8_t*>(v.k) - static_cast<uint8_t*>(cache.layer(0).k),
                  static_cast<ptrdiff_t>(2 * half * l));
        // HND layout inside a block: (block, head, token) rows of head_dim elements.
        EXPECT_EQ(v.offset(1, 0, 0), 2u * 4 * 8 * 2);
        EXPECT_EQ(v.offset(0, 1, 0), 4u * 8 * 2);
        EXPECT_EQ(v.offset(0, 0, 1), 8u * 2);
        const uint8_t* k = static_cast<const uint8_t*>(v.k);
        for (size_t i = 0; i < 2 * half; ++i) ASSERT_EQ(k[i], 0) << "layer " << l << " byte " << i;
    }
    // The last layer's V ends at the end of the storage.
    const KvLayerView last = cache.layer(2);
    EXPECT_EQ(static_cast<uint8_t*>(last.v) + half,
              static_cast<uint8_t*>(cache.layer(0).k) + cache.total_bytes());
}

TEST(KvCache, RejectsUnsupportedDtype) {
    for (DType t : {DType::BF16, DType::Q8_0, DType::Q4_K}) {
        auto res = KvCache::create(small_config(t));
        ASSERT_FALSE(res.is_ok());
        EXPECT_NE(res.status().message().find("not supported"), std::string::npos)
            << res.status().message();
    }
}

TEST(KvCache, RejectsZeroOrNegativeSizes) {
    for (int field = 0; field < 5; ++field) {
        for (int value : {0, -1}) {
            KvCacheConfig c = small_config(DType::F32);
            if (field == 0) c.n_layers = value;
            if (field == 1) c.n_kv_heads = value;
            if (field == 2) c.head_dim = value;
            if (field == 3) c.block_size = value;
            if (field == 4) c.n_blocks = value;
            auto res = KvCache::create(c);
            ASSERT_FALSE(res.is_ok()) << "field " << field;
            EXPECT_NE(res.status().message().find("positive"), std::string::npos)
                << res.status().message();
        }
    }
}

TEST(KvCache, ReportsAllocationFailure) {
#if defined(__SANITIZE_ADDRESS__)
    GTEST_SKIP() << "AddressSanitizer aborts on a 1 PiB operator new instead of throwing std::bad_alloc";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    GTEST_SKIP() << "AddressSanitizer aborts on a 1 PiB operator new instead of throwing std::bad_alloc";
#endif
#endif
    KvCacheConfig c = small_config(DType::F32);
    c.n_layers = 1;
    c.n_kv_heads = 1;
    c.head_dim = 64;
    c.block_size = 16;
    c.n_blocks = int64_t{1} << 37;  // 8 KiB per block: 1 PiB, beyond any address space
    auto res = KvCache::create(c);
    ASSERT_FALSE(res.is_ok());
    EXPECT_NE(res.status().message().find("KV cache"), std::string::npos) << res.status().message();

    c.n_blocks = std::numeric_limits<int64_t>::max();  // the byte count overflows
    res = KvCache::create(c);
    ASSERT_FALSE(res.is_ok());
    EXPECT_NE(res.status().message().find("does not fit"), std::string::npos)
        << res.status().message();
}

TEST(KvCache, BlocksForBudget) {
    KvCacheConfig g = small_config(DType::F16);  // 3 * 2 * 2 * 4 * 8 * 2 = 768 bytes per block
    EXPECT_EQ(kv_blocks_for_budget(g, 768 * 10), 10);
    EXPECT_EQ(kv_blocks_for_budget(g, 768 * 10 + 767), 10);
    EXPECT_EQ(kv_blocks_for_budget(g, 767), 0);
    g.dtype = DType::F32;
    EXPECT_EQ(kv_blocks_for_budget(g, 1536 * 3), 3);
    g.head_dim = 0;
    EXPECT_EQ(kv_blocks_for_budget(g, 1 << 20), 0);
    // Qwen2.5-0.5B: 24 layers, 2 KV heads, head_dim 64, 16-token blocks, f16: 196608 B/block.
    KvCacheConfig q;
    q.n_layers = 24;
    q.n_kv_heads = 2;
    q.head_dim = 64;
    q.block_size = 16;
    q.dtype = DType::F16;
    EXPECT_EQ(kv_blocks_for_budget(q, size_t{1} << 30), (int64_t{1} << 30) / 196608);
}

}  // namespace
}  // namespace mvllm
