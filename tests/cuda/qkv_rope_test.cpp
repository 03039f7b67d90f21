// The fused QKV projection's RoPE and K/V store on CUDA against the paths it replaces: in the GEMV
// epilogue (QkvRopeGemv...), with V apart from a stacked q | k (QkvWithVApart...), and the unfused
// projections' one kernel (RopeQkKvStore...). Skips without a GPU.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/thread_pool.h"
#include "cuda_test_util.h"

namespace mvllm::test {
namespace {

// A one-layer cache of 2,400 blocks (room for scattered_rows' positions up to 38K).
KvCacheConfig one_layer_cache(int32_t n_kv_heads, int32_t head_dim, int32_t block, DType type) {
    KvCacheConfig kc;
    kc.n_layers = 1;
    kc.n_kv_heads = n_kv_heads;
    kc.head_dim = head_dim;
    kc.block_size = block;
    kc.n_blocks = 2400;
    kc.dtype = type;
    return kc;
}

// RoPE frequencies of base 1e6 (Qwen2's) for head_dim hd.
std::vector<float> test_inv_freq(int32_t hd) {
    std::vector<float> inv_freq(hd / 2);
    for (int i = 0; i < hd / 2; ++i) inv_freq[i] = std::pow(1e6f, -2.0f * i / hd);
    return inv_freq;
}

// One sequence per row, at scattered positions (the last far into the context, up to 38K: the
// rotation's angle in double) with shuffled block tables over a cache of n_blocks blocks.
Batch scattered_rows(int32_t n_rows, int32_t block, int64_t n_blocks) {
    Batch batch;
    batch.block_size = block;
    for (int32_t r = 0; r < n_rows; ++r) {
        const int32_t pos = r == n_rows - 1 ? 37000 + r : 17 * r + 5;
        std::vector<int32_t> table;
        for (int32_t b = 0; b * block <= pos; ++b) table.push_back(static_cast<int32_t>((b * 7 + r * 601) % n_blocks));
        batch.add_sequence({0}, pos, table, true);
    }
    return batch;
}

// The fused QKV projection with RoPE and the K/V store in the GEMV's epilogue (1..4 rows) gives
// the bits of the two-kernel path (the matmul, then rope_kv_store): q and the cache, for every
// quantised type, the 0.5B head geometry (14 / 2 heads of 64) and the 7B one (28 / 4 heads of 128,
// 3,584 inputs, the launch of 576 CTAs the decode step runs), with and without bias, positions far
// into the context (the rotation's angle in double).
TEST(CudaOps, QkvRopeGemvEqualsMatmulThenRopeKvStore) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda(CudaAttentionVariant::Fused, CudaBackendOptions::QkvRopeEpilogue::On);
    ASSERT_TRUE(be);
    struct Geometry {
        int32_t n_heads, n_kv, hd;
        int64_t n_in;
    };
    for (const Geometry& geo : {Geometry{14, 2, 64, 256}, Geometry{28, 4, 128, 3584}}) {
        SCOPED_TRACE("heads " + std::to_string(geo.n_heads) + " / " + std::to_string(geo.n_kv) + " x " + std::to_string(geo.hd));
        const int32_t n_heads = geo.n_heads, n_kv = geo.n_kv, hd = geo.hd, block = 16;
        const int64_t n_in = geo.n_in, q_dim = n_heads * hd, kv_dim = n_kv * hd, n_out = q_dim + 2 * kv_dim;
        const std::vector<float> inv_freq = test_inv_freq(hd);
        const RopeParams rope{inv_freq.data(), hd};
        const KvCacheConfig kc = one_layer_cache(n_kv, hd, block, DType::F16);
        auto cache = be->create_kv_cache(kc);
        ASSERT_TRUE(cache.is_ok()) << cache.status().message();
        const size_t half_bytes = (**cache).layer(0).offset(kc.n_blocks, 0, 0);
        uint64_t seed = 700;
        for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
            std::vector<uint8_t> wb = encode_rows(type, random_floats(n_in * n_out, seed++, 0.5f), n_in);
            auto w = be->upload_weight(host_view(type, n_in, n_out, wb.data()));
            std::vector<float> bias_v = random_floats(static_cast<size_t>(n_out), seed++, 0.2f);
            auto bias = be->upload_weight(host_view(DType::F32, n_out, 1, bias_v.data()));
            ASSERT_TRUE(w.is_ok() && bias.is_ok());
            for (int32_t n_rows : {1, 2, 3, 4}) {
                for (bool with_bias : {false, true}) {
                    const Batch batch = scattered_rows(n_rows, block, kc.n_blocks);
                    const std::vector<float> xv = random_floats(static_cast<size_t>(n_in * n_rows), seed++);
                    std::vector<float> q_two(static_cast<size_t>(q_dim * n_rows)), q_one(q_two.size());
                    std::vector<uint8_t> k_two(half_bytes), v_two(half_bytes), k_one(half_bytes), v_one(half_bytes);
                    for (bool fused : {false, true}) {
                        be->begin(batch);
                        TensorView x = be->alloc(DType::F32, n_in, n_rows);
                        be->upload(xv.data(), x);
                        TensorView qkv = be->alloc(DType::F32, n_out, n_rows), q = be->alloc(DType::F32, q_dim, n_rows);
                        // Poison q and the rows' cache slots: each path must write them all itself.
                        const std::vector<float> poison_q(static_cast<size_t>(q_dim * n_rows), 7.0f);
                        const std::vector<float> poison_kv(static_cast<size_t>(kv_dim * n_rows), -3.0f);
                        TensorView pk = be->alloc(DType::F32, kv_dim, n_rows), pv = be->alloc(DType::F32, kv_dim, n_rows);
                        be->upload(poison_q.data(), q);
                        be->upload(poison_kv.data(), pk);
                        be->upload(poison_kv.data(), pv);
                        be->kv_store(**cache, 0, pk, pv);
                        const TensorView b = with_bias ? *bias : TensorView{};
                        if (fused) be->matmul_rope_kv_store(*w, TensorView{}, x, b, qkv, n_heads, n_kv, rope, q, **cache, 0);
                        else be->Backend::matmul_rope_kv_store(*w, TensorView{}, x, b, qkv, n_heads, n_kv, rope, q, **cache, 0);
                        be->to_host(q, fused ? q_one.data() : q_two.data());
                        be->download_kv_layer(**cache, 0, fused ? k_one.data() : k_two.data(), fused ? v_one.data() : v_two.data());
                    }
                    EXPECT_EQ(q_one, q_two) << type_name(type) << " rows " << n_rows << " bias " << with_bias;
                    EXPECT_TRUE(k_one == k_two && v_one == v_two) << type_name(type) << " rows " << n_rows << " bias " << with_bias;
                }
            }
        }
    }
}

// Q and K stacked as one matrix with V apart (backend.h; a Q4_K_M file: Q4_K q | k beside Q6_K v on
// 3,584 inputs, Q4_0 beside Q8_0 on the 0.5B's 896): the GEMV whose epilogue takes RoPE and the K/V
// store over both matrices (1 and 3 rows), the same bits as the path without it (one GEMV launch
// into the two planes, then rope_kv_store); and, with 1, 3, 6 (that path) and 12 rows (a matmul
// each), q and the cache against the unfused projections on the same backend (three matmuls, then
// rope_qk_kv_store), with and without bias.
TEST(CudaOps, QkvWithVApartEqualsUnfusedProjections) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda(CudaAttentionVariant::Fused, CudaBackendOptions::QkvRopeEpilogue::On);
    ASSERT_TRUE(be);
    struct Geometry {
        int32_t n_heads, n_kv, hd;
        int64_t n_in;
        DType qk_type, v_type;
    };
    uint64_t seed = 1100;
    constexpr float kPoison = 60000.0f;
    for (const Geometry& geo : {Geometry{14, 2, 64, 896, DType::Q4_0, DType::Q8_0},
                                Geometry{28, 4, 128, 3584, DType::Q4_K, DType::Q6_K}}) {
        const int32_t n_heads = geo.n_heads, n_kv = geo.n_kv, hd = geo.hd, block = 16, half = hd / 2;
        const int64_t n_in = geo.n_in, q_dim = n_heads * hd, kv_dim = n_kv * hd, n_qk = q_dim + kv_dim;
        SCOPED_TRACE(std::string(type_name(geo.qk_type)) + " q | k, " + type_name(geo.v_type) + " v");
        const std::vector<float> inv_freq = test_inv_freq(hd);
        const RopeParams rope{inv_freq.data(), hd};
        const KvCacheConfig kc = one_layer_cache(n_kv, hd, block, DType::F16);
        auto cache = be->create_kv_cache(kc);
        ASSERT_TRUE(cache.is_ok()) << cache.status().message();
        const size_t layer_bytes = (**cache).layer(0).offset(kc.n_blocks, 0, 0);
        // q and k rows in head-dim order (the unfused matrices), and stacked in RoPE pairs: row 2i of
        // a head is dim i, row 2i + 1 dim i + half (backend.h's fuses_qkv order).
        const size_t row_bytes = row_size(geo.qk_type, n_in);
        std::vector<uint8_t> wq_b = random_blocks(geo.qk_type, n_in, q_dim, seed++);
        std::vector<uint8_t> wk_b = random_blocks(geo.qk_type, n_in, kv_dim, seed++);
        std::vector<uint8_t> wv_b = random_blocks(geo.v_type, n_in, kv_dim, seed++);
        std::vector<float> bias_q = random_floats(q_dim, seed++, 0.2f), bias_k = random_floats(kv_dim, seed++, 0.2f),
                           bias_v = random_floats(kv_dim, seed++, 0.2f);
        auto pair_of = [&](int64_t r) {  // the head-dim row that stacked row r of the q | k part holds
            const int64_t head = r / hd, i = (r % hd) / 2;
            return head * hd + i + (r % 2) * half;
        };
        std::vector<uint8_t> wqk_b(row_bytes * n_qk);
        std::vector<float> bias_stacked(n_qk + kv_dim);
        for (int64_t r = 0; r < n_qk; ++r) {
            const int64_t src = pair_of(r < q_dim ? r : r - q_dim);
            const uint8_t* from = r < q_dim ? wq_b.data() + src * row_bytes : wk_b.data() + src * row_bytes;
            std::memcpy(wqk_b.data() + r * row_bytes, from, row_bytes);
            bias_stacked[r] = r < q_dim ? bias_q[src] : bias_k[src];
        }
        std::copy(bias_v.begin(), bias_v.end(), bias_stacked.begin() + n_qk);
        auto wq = be->upload_weight(host_view(geo.qk_type, n_in, q_dim, wq_b.data()));
        auto wk = be->upload_weight(host_view(geo.qk_type, n_in, kv_dim, wk_b.data()));
        auto wv = be->upload_weight(host_view(geo.v_type, n_in, kv_dim, wv_b.data()));
        auto wqk = be->upload_weight(host_view(geo.qk_type, n_in, n_qk, wqk_b.data()));
        auto bq = be->upload_weight(host_view(DType::F32, q_dim, 1, bias_q.data()));
        auto bk = be->upload_weight(host_view(DType::F32, kv_dim, 1, bias_k.data()));
        auto bv = be->upload_weight(host_view(DType::F32, kv_dim, 1, bias_v.data()));
        auto bqkv = be->upload_weight(host_view(DType::F32, n_qk + kv_dim, 1, bias_stacked.data()));
        ASSERT_TRUE(wq.is_ok() && wk.is_ok() && wv.is_ok() && wqk.is_ok() && bq.is_ok() && bk.is_ok() && bv.is_ok() &&
                    bqkv.is_ok());
        for (int32_t n_rows : {1, 3, 6, 12}) {
            for (bool with_bias : {false, true}) {
                SCOPED_TRACE("rows " + std::to_string(n_rows) + (with_bias ? ", bias" : ""));
                const Batch batch = scattered_rows(n_rows, block, kc.n_blocks);
                const std::vector<float> xv = random_floats(static_cast<size_t>(n_in * n_rows), seed++);
                std::vector<float> q_out[3];
                std::vector<uint8_t> k_cache[3], v_cache[3];
                for (int path = 0; path < 3; ++path) {  // 0: unfused, 1: matmul_rope_kv_store, 2: its two-step form
                    if (path == 2 && n_rows > 4) continue;
                    be->begin(batch);
                    TensorView x = be->alloc(DType::F32, n_in, n_rows);
                    be->upload(xv.data(), x);
                    TensorView q = be->alloc(DType::F32, q_dim, n_rows), k = be->alloc(DType::F32, kv_dim, n_rows),
                               v = be->alloc(DType::F32, kv_dim, n_rows), qkv = be->alloc(DType::F32, n_qk + kv_dim, n_rows);
                    // Poison q and the rows' cache slots: each path must write them all itself. (The
                    // poison is exact in F16 and far beyond these projections' values, which
                    // reach the tens: F16 rounding makes values such as -3 possible.)
                    const std::vector<float> poison_q(static_cast<size_t>(q_dim * n_rows), kPoison);
                    const std::vector<float> poison_kv(static_cast<size_t>(kv_dim * n_rows), kPoison);
                    be->upload(poison_q.data(), q);
                    be->upload(poison_kv.data(), k);
                    be->upload(poison_kv.data(), v);
                    be->kv_store(**cache, 0, k, v);
                    const TensorView none;
                    if (path == 0) {
                        be->matmul(*wq, x, with_bias ? *bq : none, q);
                        be->matmul(*wk, x, with_bias ? *bk : none, k);
                        be->matmul(*wv, x, with_bias ? *bv : none, v);
                        be->rope_qk_kv_store(q, k, v, n_heads, n_kv, rope, **cache, 0);
                    } else if (path == 1) {
                        be->matmul_rope_kv_store(*wqk, *wv, x, with_bias ? *bqkv : none, qkv, n_heads, n_kv, rope, q, **cache, 0);
                    } else {
                        be->Backend::matmul_rope_kv_store(*wqk, *wv, x, with_bias ? *bqkv : none, qkv, n_heads, n_kv, rope, q,
                                                          **cache, 0);
                    }
                    q_out[path].resize(static_cast<size_t>(q_dim * n_rows));
                    be->to_host(q, q_out[path].data());
                    k_cache[path].resize(layer_bytes);
                    v_cache[path].resize(layer_bytes);
                    be->download_kv_layer(**cache, 0, k_cache[path].data(), v_cache[path].data());
                }
                if (n_rows <= 4) {
                    EXPECT_EQ(q_out[1], q_out[2]) << "q: the GEMV epilogue against the GEMV, then rope_kv_store";
                    EXPECT_TRUE(k_cache[1] == k_cache[2] && v_cache[1] == v_cache[2]) << "cache: the same two paths";
                }
                EXPECT_LE(rel_max_error(q_out[1], q_out[0]), 1e-5) << "q against the unfused projections";
                const int64_t n_values = static_cast<int64_t>(layer_bytes / 2);
                const std::vector<float> k1 = decode_rows(DType::F16, k_cache[1].data(), n_values, 1);
                const std::vector<float> k0 = decode_rows(DType::F16, k_cache[0].data(), n_values, 1);
                const std::vector<float> v1 = decode_rows(DType::F16, v_cache[1].data(), n_values, 1);
                const std::vector<float> v0 = decode_rows(DType::F16, v_cache[0].data(), n_values, 1);
                EXPECT_LE(rel_max_error(k1, k0), 1e-3) << "K in the cache";
                EXPECT_LE(rel_max_error(v1, v0), 1e-3) << "V in the cache";
                int64_t poisoned = 0;
                for (size_t i = 0; i < k1.size(); ++i) poisoned += (k1[i] == kPoison) + (v1[i] == kPoison);
                for (float x : q_out[1]) poisoned += x == kPoison;
                EXPECT_EQ(poisoned, 0) << "q values or K / V slots left unwritten";
            }
        }
    }
}

// The unfused projections' RoPE and K/V store in one kernel (rope_qk_kv_store: what a Q4_K_M file,
// whose V is Q6_K, runs) against the ops it replaces (rope of q, rope of k, kv_store) on the same
// backend, and q against the CPU reference: both head geometries, decode and prefill row counts,
// F16 and F32 caches, positions far into the context. The rotation rounds each product alone (no
// fused multiply-add, as the fused QKV path and the CPU reference), so q and K may differ from the
// separate kernels in the last bit; V is copied, so its bytes must match.
TEST(CudaOps, RopeQkKvStoreEqualsRopeThenKvStore) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    ThreadPool pool(2);
    struct Geometry {
        int32_t n_heads, n_kv, hd;
    };
    uint64_t seed = 900;
    for (const Geometry& geo : {Geometry{14, 2, 64}, Geometry{28, 4, 128}}) {
        const int32_t n_heads = geo.n_heads, n_kv = geo.n_kv, hd = geo.hd, block = 16;
        const int64_t q_dim = n_heads * hd, kv_dim = n_kv * hd;
        const std::vector<float> inv_freq = test_inv_freq(hd);
        const RopeParams rope{inv_freq.data(), hd};
        for (DType cache_type : {DType::F16, DType::F32}) {
            const KvCacheConfig kc = one_layer_cache(n_kv, hd, block, cache_type);
            auto cache = be->create_kv_cache(kc);
            ASSERT_TRUE(cache.is_ok()) << cache.status().message();
            const size_t layer_bytes = (**cache).layer(0).offset(kc.n_blocks, 0, 0);
            for (int32_t n_rows : {1, 3, 40}) {
                SCOPED_TRACE(std::to_string(n_heads) + " / " + std::to_string(n_kv) + " heads of " + std::to_string(hd) +
                             ", " + type_name(cache_type) + " cache, rows " + std::to_string(n_rows));
                const Batch batch = scattered_rows(n_rows, block, kc.n_blocks);
                const std::vector<float> qv = random_floats(static_cast<size_t>(q_dim * n_rows), seed++);
                const std::vector<float> kv = random_floats(static_cast<size_t>(kv_dim * n_rows), seed++);
                const std::vector<float> vv = random_floats(static_cast<size_t>(kv_dim * n_rows), seed++);
                std::vector<float> q_out[2];
                std::vector<uint8_t> k_cache[2], v_cache[2];
                for (int fused = 0; fused < 2; ++fused) {
                    be->begin(batch);
                    TensorView q = be->alloc(DType::F32, q_dim, n_rows), k = be->alloc(DType::F32, kv_dim, n_rows),
                               v = be->alloc(DType::F32, kv_dim, n_rows);
                    // Poison the rows' cache slots first: each path must write them all itself.
                    const std::vector<float> poison(static_cast<size_t>(kv_dim * n_rows), -3.0f);
                    be->upload(poison.data(), k);
                    be->upload(poison.data(), v);
                    be->kv_store(**cache, 0, k, v);
                    be->upload(qv.data(), q);
                    be->upload(kv.data(), k);
                    be->upload(vv.data(), v);
                    if (fused) be->rope_qk_kv_store(q, k, v, n_heads, n_kv, rope, **cache, 0);
                    else be->Backend::rope_qk_kv_store(q, k, v, n_heads, n_kv, rope, **cache, 0);
                    q_out[fused].resize(qv.size());
                    be->to_host(q, q_out[fused].data());
                    k_cache[fused].resize(layer_bytes);
                    v_cache[fused].resize(layer_bytes);
                    be->download_kv_layer(**cache, 0, k_cache[fused].data(), v_cache[fused].data());
                }
                std::vector<float> q_ref = qv;
                cpu::rope(pool, host_view(DType::F32, q_dim, n_rows, q_ref.data()), n_heads, hd, batch.positions.data(),
                          inv_freq.data());
                EXPECT_LE(rel_max_error(q_out[1], q_ref), 1e-6) << "q against the CPU reference";
                EXPECT_LE(rel_max_error(q_out[1], q_out[0]), 1e-6) << "q against rope";
                const int64_t n_values = static_cast<int64_t>(layer_bytes / type_traits(cache_type).type_size);
                const std::vector<float> k_one = decode_rows(cache_type, k_cache[1].data(), n_values, 1);
                const std::vector<float> k_two = decode_rows(cache_type, k_cache[0].data(), n_values, 1);
                EXPECT_LE(rel_max_error(k_one, k_two), cache_type == DType::F16 ? 1e-3 : 1e-6) << "K in the cache";
                EXPECT_TRUE(v_cache[1] == v_cache[0]) << "V in the cache";
                int64_t poisoned = 0;
                for (float x : k_one) poisoned += x == -3.0f;
                EXPECT_EQ(poisoned, 0) << "K slots left unwritten";
            }
        }
    }
}

}  // namespace
}  // namespace mvllm::test
