// The three CUDA attention variants against the CPU float64 reference on mixed batches: a
// prefill chunk continuing a cached prefix, a first token, long and short decodes, over
// shuffled (scattered) block tables with partly filled last blocks, for F32/F16/BF16 KV and the
// head geometries of the fixtures and of Qwen2.5 0.5B / 7B. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "backend/cpu/attention.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/matmul.cuh"
#include "cuda_test_util.h"

namespace mvllm::test {
namespace {

struct Geometry {
    int32_t n_heads, n_kv_heads, head_dim;
};

struct SeqSpec {
    int32_t context;   // tokens in the cache after this step
    int32_t n_query;   // new (query) tokens at its end
};

// stale_tail: the cache rows past each sequence's context in its last block hold NaN (a block a
// longer sequence used before), which no output may pick up.
// result: where to keep the output (F32 values), if given.
void run_case(CudaAttentionVariant variant, DType kv_dtype, DType out_type, const Geometry& g,
              const std::vector<SeqSpec>& seqs, int32_t block_size, uint64_t seed, bool stale_tail = false,
              std::vector<float>* result = nullptr) {
    auto be = make_cuda(variant);
    ASSERT_TRUE(be);
    // Scattered blocks: each sequence's table draws from one shuffled pool.
    int32_t total_blocks = 0;
    for (const SeqSpec& s : seqs) total_blocks += (s.context + block_size - 1) / block_size;
    total_blocks += 3;
    std::vector<int32_t> pool(total_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::shuffle(pool.begin(), pool.end(), rng);
    KvCacheConfig kc;
    kc.n_layers = 1;
    kc.n_kv_heads = g.n_kv_heads;
    kc.head_dim = g.head_dim;
    kc.block_size = block_size;
    kc.n_blocks = total_blocks;
    kc.dtype = kv_dtype;
    auto cache = be->create_kv_cache(kc);
    ASSERT_TRUE(cache.is_ok()) << cache.status().message();

    Batch fill, step;
    fill.block_size = step.block_size = block_size;
    size_t next = 0;
    std::vector<std::pair<int64_t, int64_t>> stale;  // fill rows [first, last) past a context
    for (const SeqSpec& s : seqs) {
        std::vector<int32_t> table;
        for (int32_t i = 0; i * block_size < s.context; ++i) table.push_back(pool[next++]);
        const int32_t filled = stale_tail ? static_cast<int32_t>(table.size()) * block_size : s.context;
        stale.emplace_back(fill.n_tokens() + s.context, fill.n_tokens() + filled);
        fill.add_sequence(std::vector<int32_t>(filled, 0), 0, table, false);
        step.add_sequence(std::vector<int32_t>(s.n_query, 0), s.context - s.n_query, table, true);
    }
    const int64_t kv_width = static_cast<int64_t>(g.n_kv_heads) * g.head_dim;
    const int64_t q_width = static_cast<int64_t>(g.n_heads) * g.head_dim;
    // Fill the cache: K/V of every position of every sequence (NaN past a context: stale_tail).
    be->begin(fill);
    std::vector<float> kv_k = random_floats(kv_width * fill.n_tokens(), seed + 1);
    std::vector<float> kv_v = random_floats(kv_width * fill.n_tokens(), seed + 2);
    for (const auto& [first, last] : stale) {
        std::fill(kv_k.begin() + first * kv_width, kv_k.begin() + last * kv_width, std::nanf(""));
        std::fill(kv_v.begin() + first * kv_width, kv_v.begin() + last * kv_width, std::nanf(""));
    }
    TensorView k = be->alloc(DType::F32, kv_width, fill.n_tokens());
    TensorView v = be->alloc(DType::F32, kv_width, fill.n_tokens());
    be->upload(kv_k.data(), k);
    be->upload(kv_v.data(), v);
    be->kv_store(**cache, 0, k, v);
    // Attention of the query rows.
    be->begin(step);
    std::vector<float> qv = random_floats(q_width * step.n_tokens(), seed + 3);
    TensorView q = be->alloc(DType::F32, q_width, step.n_tokens());
    be->upload(qv.data(), q);
    TensorView out = be->alloc(out_type, q_width, step.n_tokens());
    const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
    be->attention(**cache, 0, q, out, g.n_heads, scale);
    std::vector<uint8_t> out_bytes(out.n_bytes());
    be->download(out, out_bytes.data());
    const std::vector<float> got = decode_rows(out_type, out_bytes.data(), q_width, step.n_tokens());
    if (result) *result = got;

    // The reference reads the stored cache (BF16 widened to F32: same values).
    const size_t half = (**cache).layer(0).offset(kc.n_blocks, 0, 0);
    std::vector<uint8_t> hk(half), hv(half);
    be->download_kv_layer(**cache, 0, hk.data(), hv.data());
    KvLayerView view = (**cache).layer(0);
    std::vector<float> wk, wv;
    if (kv_dtype == DType::BF16) {
        const int64_t n = static_cast<int64_t>(half / 2);
        wk = decode_rows(DType::BF16, hk.data(), n, 1);
        wv = decode_rows(DType::BF16, hv.data(), n, 1);
        view.k = wk.data();
        view.v = wv.data();
        view.dtype = DType::F32;
    } else {
        view.k = hk.data();
        view.v = hv.data();
    }
    std::vector<float> ref(got.size());
    TensorView qh;
    qh.type = DType::F32;
    qh.ne = {g.head_dim, g.n_heads, step.n_tokens(), 1};
    qh.data = qv.data();
    TensorView rh = qh;
    rh.data = ref.data();
    attention_reference(step, view, qh, rh, g.n_heads, scale);
    // F32 KV: f32 accumulation against float64, ~1e-6. F16/BF16 KV: the tensor-core kernel rounds
    // Q and the probabilities to 11 (F16) or ~16 (BF16, two parts) bits: the 1e-3 bound.
    // An F16/BF16 output adds its own rounding (2^-9 for bf16).
    const double tol = out_type == DType::F32 ? (kv_dtype == DType::F32 ? 1e-4 : 1e-3)
                                              : (out_type == DType::F16 ? 1e-3 : 4e-3);
    const double err = rel_max_error(got, ref);
    // With few rows the fused F16/BF16 decode kernel also writes the output's QX (the GEMV's
    // activation format) for the output projection: a GEMV reading it gives the bits of one that
    // quantises a copy of the output itself. Only where that kernel writes it (elsewhere both GEMVs
    // would quantise and the check could not fail); a matmul takes F32 or F16 input.
    if (variant == CudaAttentionVariant::Fused && kv_dtype != DType::F32 && g.head_dim % 32 == 0 &&
        step.n_tokens() <= cuda::kGemvMaxTokens && out_type != DType::BF16) {
        const int64_t n_out = 48;
        std::vector<uint8_t> wb = encode_rows(DType::Q8_0, random_floats(n_out * q_width, seed + 4, 0.5f), q_width);
        auto w = be->upload_weight(host_view(DType::Q8_0, q_width, n_out, wb.data()));
        ASSERT_TRUE(w.is_ok()) << w.status().message();
        TensorView copy = be->alloc(out_type, q_width, step.n_tokens());
        be->upload(out_bytes.data(), copy);
        TensorView via_attention = be->alloc(DType::F32, n_out, step.n_tokens());
        TensorView via_copy = be->alloc(DType::F32, n_out, step.n_tokens());
        be->matmul(*w, out, TensorView{}, via_attention);
        be->matmul(*w, copy, TensorView{}, via_copy);
        std::vector<float> a(static_cast<size_t>(n_out * step.n_tokens())), b(a.size());
        be->download(via_attention, a.data());
        be->download(via_copy, b.data());
        EXPECT_EQ(a, b) << "GEMV after attention, kv " << type_name(kv_dtype) << " out " << type_name(out_type);
    }
    EXPECT_LE(err, tol) << "variant " << static_cast<int>(variant) << " kv " << type_name(kv_dtype) << " out "
                        << type_name(out_type) << " heads " << g.n_heads << "/" << g.n_kv_heads << " d "
                        << g.head_dim << " block " << block_size;
}

const Geometry kGeometries[] = {
    {14, 2, 64},   // Qwen2.5-0.5B
    {28, 4, 128},  // Qwen2.5-7B
    {8, 2, 32},    // tiny-llama
    {14, 2, 16},   // tiny-qwen2
    {8, 8, 64},    // MHA
    {12, 1, 128},  // group 12: two head tiles in the fused kernel
};

TEST(CudaAttention, MixedBatchesMatchReference) {
    MVLLM_REQUIRE_GPU();
    const std::vector<SeqSpec> mixed = {{35, 5}, {1, 1}, {300, 1}, {17, 1}, {64, 1}, {9, 9}};
    uint64_t seed = 100;
    for (CudaAttentionVariant variant :
         {CudaAttentionVariant::Naive, CudaAttentionVariant::Grouped, CudaAttentionVariant::Fused}) {
        for (DType kv : {DType::F32, DType::F16, DType::BF16}) {
            for (const Geometry& g : kGeometries) {
                if (variant != CudaAttentionVariant::Fused && g.n_heads / g.n_kv_heads > 16) continue;
                run_case(variant, kv, DType::F32, g, mixed, 16, seed++);
            }
        }
    }
}

TEST(CudaAttention, OddBlockSizesLongContextsAndF16Output) {
    MVLLM_REQUIRE_GPU();
    uint64_t seed = 900;
    for (CudaAttentionVariant variant :
         {CudaAttentionVariant::Naive, CudaAttentionVariant::Grouped, CudaAttentionVariant::Fused}) {
        run_case(variant, DType::F16, DType::F16, kGeometries[0], {{3000, 1}, {777, 3}, {2, 2}}, 16, seed++);
        run_case(variant, DType::F32, DType::F32, kGeometries[1], {{1500, 1}, {33, 1}}, 7, seed++);
        run_case(variant, DType::BF16, DType::F32, kGeometries[2], {{130, 40}, {5, 1}}, 32, seed++);
    }
}

// The F16/BF16 decode kernel's two ways of loading tiles: tensor copies (the default where the
// block size is a multiple of 16 and head_dim 64 or 128) and cp.async. A tensor copy takes a whole
// 16-token tile from the cache, rows past the context included; here those rows hold NaN, which
// the kernel must keep out of the result (masked scores, zeroed V).
TEST(CudaAttention, TensorCopyAndCpAsyncTilesIgnoreRowsPastTheContext) {
    MVLLM_REQUIRE_GPU();
    uint64_t seed = 1300;
    const std::vector<SeqSpec> seqs = {{35, 1}, {300, 1}, {17, 1}, {1000, 1}, {9, 1}, {64, 1}, {130, 3}};
    for (int tma : {1, 0}) {
        cuda::force_attention_tma(tma);
        for (DType kv : {DType::F16, DType::BF16})
            for (const Geometry& g : {kGeometries[0], kGeometries[1], kGeometries[5]}) {
                SCOPED_TRACE(tma ? "tensor copies" : "cp.async");
                run_case(CudaAttentionVariant::Fused, kv, DType::F32, g, seqs, 16, seed++, /*stale_tail=*/true);
                run_case(CudaAttentionVariant::Fused, kv, DType::F32, g, seqs, 32, seed++, /*stale_tail=*/true);
            }
    }
    cuda::force_attention_tma(-1);
}

// The decode plan (host rule, no GPU needed), with the H200's slots for the 7B (head_dim 128: 132
// CTAs, 120 in clusters) and 0.5B (264, 240) kernels at 8 warps: clusters where the splits are
// short and the cluster plan fits one wave, the plain plan elsewhere.
TEST(CudaAttention, DecodePlanClustersShortSplitsInOneWave) {
    struct Case {
        int32_t rows, ctas_per_row, context, slots, cluster_slots;
        int32_t want_cluster, want_splits;
    };
    const Case cases[] = {
        {1, 4, 512, 132, 120, 4, 4},     // 7B, 512 tokens: one cluster of the 4 splits
        {1, 4, 640, 132, 120, 8, 8},     // 5 splits padded to a cluster of 8
        {1, 4, 4096, 132, 120, 8, 24},   // 24 splits of 176 tokens, 3 clusters, one wave (96 CTAs)
        {1, 4, 32768, 132, 120, 1, 33},  // long splits: the plain plan, 33 splits in one wave
        {16, 4, 512, 132, 120, 1, 2},    // the cluster plan would take 3 waves (256 CTAs)
        {1, 2, 4096, 264, 240, 8, 32},   // 0.5B at 4K: 4 clusters of 8 per KV head
        {16, 2, 4096, 264, 240, 1, 8},   // 0.5B 16 x 4K: splits of 512 tokens
        {1, 2, 16384, 264, 240, 8, 120}, // 0.5B at 16K: 15 clusters of 8 (the cap reads the plain plan only)
        {1, 2, 32768, 264, 240, 1, 64},  // 0.5B at 32K: 132 splits would fit, the merge caps them at 64
        {4, 2, 32768, 264, 240, 1, 33},  // 4 rows: 33 splits fill the slots
    };
    for (const Case& c : cases) {
        const cuda::DecodePlan p = cuda::plan_decode(c.rows, c.ctas_per_row, c.context, c.slots, c.cluster_slots,
                                                     256, 128, 2, false);
        EXPECT_EQ(p.cluster, c.want_cluster) << c.rows << " x " << c.context;
        EXPECT_EQ(p.split.n_splits, c.want_splits) << c.rows << " x " << c.context;
        EXPECT_EQ(p.split.n_splits % p.cluster, 0);
        EXPECT_GE(static_cast<int64_t>(p.split.n_splits) * p.split.split_tokens, c.context);
        if (p.cluster > 1) {  // one wave of the cluster slots
            EXPECT_LE(static_cast<int64_t>(c.rows) * c.ctas_per_row * p.split.n_splits, c.cluster_slots);
        }
    }
    // Mode 0 never clusters; mode 1 only when one cluster holds a row's splits; batch-invariant
    // plans keep their fixed 512-token splits and no clusters; no cluster slots, no clusters.
    EXPECT_EQ(cuda::plan_decode(1, 4, 512, 132, 120, 256, 128, 0, false).cluster, 1);
    EXPECT_EQ(cuda::plan_decode(1, 4, 512, 132, 120, 256, 128, 1, false).cluster, 4);
    EXPECT_EQ(cuda::plan_decode(1, 4, 4096, 132, 120, 256, 128, 1, false).cluster, 1);
    EXPECT_EQ(cuda::plan_decode(1, 4, 512, 132, 0, 256, 128, 2, false).cluster, 1);
    const cuda::DecodePlan inv = cuda::plan_decode(1, 4, 4096, 132, 120, 256, 128, 2, true);
    EXPECT_EQ(inv.cluster, 1);
    EXPECT_EQ(inv.split.split_tokens, cuda::kInvariantSplitTokens);
    EXPECT_EQ(inv.split.n_splits, 8);
}

// The decode kernel's shape: 4 warps where a batch's (row, KV head) pairs fill the SMs at short
// contexts; for one row at the shortest bucket, 4 warps at head_dim 64 (the 0.5B) and one split at
// head_dim 128 (the 7B), and one split for any batch of two rows or more there; otherwise 8 warps
// and plan_decode's splits.
TEST(CudaAttention, DecodeShapeRulesAtShortContexts) {
    if (std::getenv("MVLLM_ATTN_WARPS") || std::getenv("MVLLM_ATTN_SHORT") || std::getenv("MVLLM_ATTN_SHORT_BATCH"))
        GTEST_SKIP() << "the rules under test are overridden by the environment";
    EXPECT_EQ(cuda::decode_warps(1, 2, 256, 64, 132), 4);     // 0.5B, batch 1, bucket 256
    EXPECT_EQ(cuda::decode_warps(1, 2, 512, 64, 132), 8);     // the next bucket
    EXPECT_EQ(cuda::decode_warps(1, 4, 256, 128, 132), 8);    // 7B: one split instead
    EXPECT_EQ(cuda::decode_warps(2, 2, 256, 64, 132), 8);     // two rows: not measured, the old rule
    EXPECT_EQ(cuda::decode_warps(64, 4, 2048, 128, 132), 4);  // 256 pairs fill the SMs
    EXPECT_EQ(cuda::decode_warps(64, 4, 4096, 128, 132), 8);
    EXPECT_TRUE(cuda::decode_one_split(1, 256, 128));
    EXPECT_TRUE(cuda::decode_one_split(1, 160, 128));
    EXPECT_FALSE(cuda::decode_one_split(1, 512, 128));
    EXPECT_FALSE(cuda::decode_one_split(1, 256, 64));   // one 0.5B row: the 4-warp cluster
    EXPECT_TRUE(cuda::decode_one_split(3, 256, 128));
    EXPECT_TRUE(cuda::decode_one_split(2, 256, 64));
    EXPECT_TRUE(cuda::decode_one_split(16, 256, 64));
    EXPECT_TRUE(cuda::decode_one_split(16, 256, 128));
    EXPECT_FALSE(cuda::decode_one_split(16, 512, 128));  // the next bucket
    EXPECT_TRUE(cuda::decode_one_split(64, 256, 64));
}

// With one_cluster_tokens, a row whose plan would take several clusters (merged again in global
// memory) keeps one cluster of longer splits, while those stay within the limit and the clusters
// fit one wave; every other plan is the one without the rule.
TEST(CudaAttention, DecodePlanKeepsARowInOneClusterUpToTheLimit) {
    struct Case {
        int32_t rows, ctas_per_row, context, slots, cluster_slots;
        int32_t want_split_tokens;  // 0: the plan without the rule
    };
    const Case cases[] = {
        {1, 2, 4096, 264, 240, 512},    // 0.5B, 4,096 bucket: 8 splits of 512, not 4 clusters of 128
        {1, 2, 2048, 264, 240, 256},    // 0.5B, 2,048 bucket
        {1, 4, 4096, 132, 120, 512},    // 7B, 4,096 bucket: 32 CTAs
        {1, 4, 4000, 132, 120, 512},    // split lengths round up to whole 16-token steps (500 -> 512)
        {1, 2, 8192, 264, 240, 1024},   // 0.5B, 8,192 bucket: 8 splits of 1,024
        {8, 2, 4096, 264, 240, 512},    // 8 rows x 2 CTAs x 8: 128 of the 240 cluster slots
        {1, 2, 16384, 264, 240, 0},     // 2,048-token splits: over the limit
        {1, 4, 512, 132, 120, 0},       // already one cluster
        {16, 4, 4096, 132, 120, 0},     // 512 CTAs in clusters: not one wave
        {16, 2, 4096, 264, 240, 0},
        {1, 2, 32768, 264, 240, 0},
    };
    for (const Case& c : cases) {
        const cuda::DecodePlan with = cuda::plan_decode(c.rows, c.ctas_per_row, c.context, c.slots, c.cluster_slots,
                                                        256, 128, 2, false, 1024);
        const cuda::DecodePlan without = cuda::plan_decode(c.rows, c.ctas_per_row, c.context, c.slots,
                                                           c.cluster_slots, 256, 128, 2, false, 0);
        if (c.want_split_tokens == 0) {
            EXPECT_EQ(with.cluster, without.cluster) << c.rows << " x " << c.context;
            EXPECT_EQ(with.split.n_splits, without.split.n_splits) << c.rows << " x " << c.context;
            EXPECT_EQ(with.split.split_tokens, without.split.split_tokens) << c.rows << " x " << c.context;
        } else {
            EXPECT_GT(without.split.n_splits, cuda::kMaxDecodeCluster) << c.rows << " x " << c.context;
            EXPECT_EQ(with.cluster, cuda::kMaxDecodeCluster) << c.rows << " x " << c.context;
            EXPECT_EQ(with.split.n_splits, cuda::kMaxDecodeCluster) << c.rows << " x " << c.context;
            EXPECT_EQ(with.split.split_tokens, c.want_split_tokens) << c.rows << " x " << c.context;
        }
    }
    // Only the default cluster mode takes the rule; batch-invariant plans never do.
    EXPECT_EQ(cuda::plan_decode(1, 2, 4096, 264, 240, 256, 128, 1, false, 1024).cluster, 1);
    EXPECT_EQ(cuda::plan_decode(1, 2, 4096, 264, 240, 256, 128, 2, true, 1024).split.split_tokens,
              cuda::kInvariantSplitTokens);
}

// How the split merge runs and where the kernel lets the next one launch, on the plans of the two
// geometries (F16 KV, 8 warps, the slots of 132 SMs): after 32K tokens the 0.5B (2 CTAs an SM) merges
// ~64 parts spread over its last CTAs and lets the next kernel launch after Q; the 7B (1 CTA an
// SM) merges 33 parts in its last CTA and lets the next kernel launch after that merge; after 2K
// tokens both keep a row in one cluster, with no split merge, and trigger after Q. Larger
// batches trigger on entry; MVLLM_ATTN_SPREAD_MERGE=1 (force_spread_merge(1)) takes any one-wave
// split merge, 0 none.
TEST(CudaAttention, SplitMergeRulesFollowThePlans) {
    if (std::getenv("MVLLM_ATTN_SPREAD_MERGE") || std::getenv("MVLLM_ATTN_TRIGGER"))
        GTEST_SKIP() << "the rules under test are overridden by the environment";
    struct Case {
        int32_t ctas_per_row, context, ctas_per_sm;
        bool want_spread;
        int want_trigger;
    };
    const Case cases[] = {
        {2, 32768, 2, true, 1},   // 0.5B after 32K
        {4, 32768, 1, false, 3},  // 7B after 32K
        {2, 2048, 2, false, 1},   // 0.5B after 2K: one cluster
        {4, 2048, 1, false, 1},   // 7B after 2K: one cluster
    };
    cuda::force_spread_merge(-1);
    for (const Case& c : cases) {
        const int32_t slots = 132 * c.ctas_per_sm, cluster_slots = c.ctas_per_sm == 2 ? 240 : 120;
        const cuda::DecodePlan p = cuda::plan_decode(1, c.ctas_per_row, c.context, slots, cluster_slots, 256, 128, 2,
                                                     false, 1024);
        const int32_t n_parts = p.split.n_splits / p.cluster;
        // As decode_launch counts a wave: in cluster slots for a cluster plan.
        const bool one_wave = static_cast<int64_t>(c.ctas_per_row) * p.split.n_splits <= (p.cluster > 1 ? cluster_slots : slots);
        EXPECT_EQ(cuda::spread_merge(n_parts, one_wave, c.ctas_per_sm), c.want_spread) << c.context;
        EXPECT_EQ(cuda::decode_trigger_mode(1, n_parts, c.ctas_per_sm, cuda::AttentionNext::Matmul), c.want_trigger)
            << c.context;
        // Before another attention launch (B1) the trigger stays after Q.
        EXPECT_EQ(cuda::decode_trigger_mode(1, n_parts, c.ctas_per_sm, cuda::AttentionNext::Attention), 1) << c.context;
    }
    EXPECT_FALSE(cuda::spread_merge(64, false, 2));  // more than one wave: the mergers could wait forever
    EXPECT_EQ(cuda::decode_trigger_mode(8, 33, 1, cuda::AttentionNext::Matmul), 3);
    EXPECT_EQ(cuda::decode_trigger_mode(9, 33, 1, cuda::AttentionNext::Matmul), 0);
    EXPECT_EQ(cuda::decode_trigger_mode(16, 1, 2, cuda::AttentionNext::Matmul), 0);
    cuda::force_spread_merge(1);
    EXPECT_TRUE(cuda::spread_merge(33, true, 1));
    EXPECT_FALSE(cuda::spread_merge(33, false, 1));
    EXPECT_FALSE(cuda::spread_merge(1, true, 2));
    cuda::force_spread_merge(0);
    EXPECT_FALSE(cuda::spread_merge(64, true, 2));
    cuda::force_spread_merge(-1);
}

// Decode rows whose splits merge through thread-block clusters: one cluster per row (the mixed
// batches above; here rows of up to 7,000 tokens, whose plan with one_cluster_tokens = 1,024, the
// default, keeps one cluster of longer splits), and, with that rule off, clusters of 8 whose
// results merge in global memory, with a partly active last cluster (4000 and 1500 tokens: 32 and
// 12 of 32 / 16 splits); F16 / BF16 output.
TEST(CudaAttention, ClusterMergesMatchReference) {
    MVLLM_REQUIRE_GPU();
    uint64_t seed = 1500;
    for (int one_cluster : {1024, 0}) {
        cuda::force_one_cluster_tokens(one_cluster);
        for (DType kv : {DType::F16, DType::BF16}) {
            run_case(CudaAttentionVariant::Fused, kv, DType::F16, kGeometries[0], {{7000, 1}}, 16, seed++);
            run_case(CudaAttentionVariant::Fused, kv, DType::F32, kGeometries[1], {{4000, 1}}, 16, seed++);
            run_case(CudaAttentionVariant::Fused, kv, DType::F16, kGeometries[0], {{2000, 1}, {1500, 1}}, 16, seed++);
            run_case(CudaAttentionVariant::Fused, kv, DType::BF16, kGeometries[1], {{600, 1}, {130, 1}}, 16, seed++);
            run_case(CudaAttentionVariant::Fused, kv, DType::F32, kGeometries[1], {{40, 1}, {17, 1}}, 16, seed++);  // one split
        }
    }
    cuda::force_one_cluster_tokens(-1);
}

// A long context in a plain plan of many splits (the 0.5B geometry at 32K tokens: on the H200, 64
// splits capped from 132 by kMaxPlainSplits) merged in global memory, against the reference. 16 to
// 64 parts take merge_parts_warp: the 0.5B's 7 heads of 64 dims, the 7B's (33 parts at 32K), a
// group of 12 heads in two rounds of warps; shorter rows of a batch spread over all the splits
// (row splits).
TEST(CudaAttention, LongContextPlainPlanMatchesReference) {
    MVLLM_REQUIRE_GPU();
    // The premise on this GPU (8 warps; slots from the occupancy API): a plain plan of 16 or more
    // parts for the 32K row.
    const cuda::DecodePlan plan =
        cuda::plan_decode(1, kGeometries[0].n_kv_heads, 32768, cuda::decode_cluster_slots_f16(64, 8, 1),
                          cuda::decode_cluster_slots_f16(64, 8, cuda::kMaxDecodeCluster), 2 * 8 * 16, 8 * 16, 2, false);
    EXPECT_EQ(plan.cluster, 1);
    EXPECT_GE(plan.split.n_splits, 16);
    EXPECT_LE(plan.split.n_splits, cuda::kMaxPlainSplits);
    run_case(CudaAttentionVariant::Fused, DType::F16, DType::F32, kGeometries[0], {{32768, 1}}, 16, 2200);
    run_case(CudaAttentionVariant::Fused, DType::BF16, DType::F16, kGeometries[0], {{20000, 1}, {9000, 1}}, 16, 2201);
    run_case(CudaAttentionVariant::Fused, DType::F16, DType::F16, kGeometries[1], {{32768, 1}}, 16, 2202);
    run_case(CudaAttentionVariant::Fused, DType::BF16, DType::F32, kGeometries[5], {{20000, 1}, {3000, 1}}, 16, 2203);
}

// The occupancy the plans are tuned for: two CTAs an SM of the 8-warp F16 kernel at head_dim 64
// (the 0.5B's; its register bound, kMinCtasPerSm) and one at head_dim 128 (the 7B's), by tensor
// copies and by cp.async.
TEST(CudaAttention, DecodeKernelKeepsItsCtasPerSm) {
    MVLLM_REQUIRE_GPU();
    int n_sms = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
    for (int tma : {1, 0}) {
        cuda::force_attention_tma(tma);
        EXPECT_EQ(cuda::decode_cluster_slots_f16(64, 8, 1), 2 * n_sms) << "tma " << tma;
        EXPECT_EQ(cuda::decode_cluster_slots_f16(128, 8, 1), n_sms) << "tma " << tma;
    }
    cuda::force_attention_tma(-1);
}

// The split merge spread over a row's last CTAs (a head each, its parts staged in shared memory)
// against the warp merge of the last CTA alone (the plain plans above: the 0.5B's 7 heads at 32K,
// ~63 parts; the 7B's 33): the same arithmetic in the same order, so the same bits, and both within
// the reference's bound (run_case). Two sequences: two rows' mergers wait in one launch.
TEST(CudaAttention, SpreadSplitMergeGivesTheWarpMergesBits) {
    MVLLM_REQUIRE_GPU();
    struct Case {
        DType kv, out;
        Geometry g;
        std::vector<SeqSpec> seqs;
    };
    const Case cases[] = {{DType::F16, DType::F32, kGeometries[0], {{32768, 1}}},
                          {DType::BF16, DType::F16, kGeometries[0], {{20000, 1}, {9000, 1}}},
                          {DType::F16, DType::F16, kGeometries[1], {{32768, 1}}},
                          {DType::BF16, DType::F32, kGeometries[1], {{17000, 1}}}};
    uint64_t seed = 2300;
    for (const Case& c : cases) {
        // The premise on this GPU for the F16 cases (8 warps, the slots the occupancy API gives the
        // F16 kernel; the BF16 kernel's may differ): a plain plan of 16-64 parts whose CTAs fit one
        // wave, so that the launch takes the spread merge.
        const int32_t rows = static_cast<int32_t>(c.seqs.size()), hd = c.g.head_dim;
        const int32_t slots = cuda::decode_cluster_slots_f16(hd, 8, 1);
        const cuda::DecodePlan plan =
            cuda::plan_decode(rows, c.g.n_kv_heads, c.seqs[0].context, slots,
                              cuda::decode_cluster_slots_f16(hd, 8, cuda::kMaxDecodeCluster), 2 * 8 * 16, 8 * 16, 2,
                              false);
        if (c.kv == DType::F16) {
            EXPECT_EQ(plan.cluster, 1);
            EXPECT_GE(plan.split.n_splits, 16);
            EXPECT_LE(plan.split.n_splits, cuda::kMaxPlainSplits);
            EXPECT_LE(static_cast<int64_t>(rows) * c.g.n_kv_heads * plan.split.n_splits, slots);
        }
        std::vector<float> spread, warp;
        cuda::force_spread_merge(1);
        run_case(CudaAttentionVariant::Fused, c.kv, c.out, c.g, c.seqs, 16, seed, false, &spread);
        cuda::force_spread_merge(0);
        run_case(CudaAttentionVariant::Fused, c.kv, c.out, c.g, c.seqs, 16, seed, false, &warp);
        ASSERT_EQ(spread.size(), warp.size());
        EXPECT_EQ(spread, warp) << "heads " << c.g.n_heads << " kv " << type_name(c.kv) << " seed " << seed;
        ++seed;
    }
    cuda::force_spread_merge(-1);
}

// The F32 cache's fused kernel with its copy pipeline (each lane's next tiles copied into shared
// memory ahead) against the same kernel loading each tile's values when it starts it: the same
// bits (and both within the reference's tolerance, run_case's check), at head_dim 64 / 128 / 32 /
// 16 and group 12 (two head tiles), over decode rows, a prefill chunk and one-split rows.
TEST(CudaAttention, F32PipelineGivesTheSameBits) {
    MVLLM_REQUIRE_GPU();
    const std::vector<SeqSpec> seqs = {{4000, 1}, {33, 1}, {130, 40}, {1, 1}};
    uint64_t seed = 2500;
    for (int gi : {0, 1, 2, 3, 5}) {
        std::vector<float> piped, plain;
        cuda::force_f32_pipeline(1);
        run_case(CudaAttentionVariant::Fused, DType::F32, DType::F32, kGeometries[gi], seqs, 16, seed, false, &piped);
        cuda::force_f32_pipeline(0);
        run_case(CudaAttentionVariant::Fused, DType::F32, DType::F32, kGeometries[gi], seqs, 16, seed, false, &plain);
        ASSERT_EQ(piped.size(), plain.size());
        EXPECT_EQ(piped, plain) << "geometry " << gi << " seed " << seed;
        ++seed;
    }
    cuda::force_f32_pipeline(-1);
}

// Prefill chunks long enough for the tiled kernel (a sequence with at least 64 / group query rows):
// fresh prompts, chunks continuing a cached prefix, beside decode rows and short chunks that stay
// with the decode kernel, for every geometry (the MHA one keeps its 17- and 64-row chunks on the
// decode kernel, its tile needing 64 tokens); then a batch of one long chunk (the prefill kernel
// alone, odd block size, F16 output) and a 2K-token prompt with BF16 output.
TEST(CudaAttention, TiledPrefillChunksMatchReference) {
    MVLLM_REQUIRE_GPU();
    const std::vector<SeqSpec> chunks = {{600, 200}, {64, 64}, {5, 1}, {200, 17}, {130, 130}, {1200, 1}};
    uint64_t seed = 2000;
    for (DType kv : {DType::F16, DType::BF16})
        for (const Geometry& g : kGeometries) run_case(CudaAttentionVariant::Fused, kv, DType::F32, g, chunks, 16, seed++);
    run_case(CudaAttentionVariant::Fused, DType::F16, DType::F16, kGeometries[1], {{1500, 1024}}, 7, seed++);
    run_case(CudaAttentionVariant::Fused, DType::BF16, DType::BF16, kGeometries[0], {{2048, 2048}, {40, 3}}, 32, seed++);
}

// Which batches the tiled prefill kernel takes (host rule): a chunk that fills a 64-row tile,
// never in batch-invariant mode (a prompt token's kernel would depend on the scheduler's chunking).
TEST(CudaAttention, TiledPrefillTakesChunksThatFillARowTile) {
    EXPECT_TRUE(cuda::use_tiled_prefill(10, 7, false));     // 70 rows of the 7B / 0.5B group
    EXPECT_FALSE(cuda::use_tiled_prefill(9, 7, false));
    EXPECT_FALSE(cuda::use_tiled_prefill(5, 7, false));     // a speculative verification step
    EXPECT_FALSE(cuda::use_tiled_prefill(32768, 7, true));  // batch-invariant
    EXPECT_TRUE(cuda::use_tiled_prefill(64, 1, false));
    EXPECT_FALSE(cuda::use_tiled_prefill(63, 1, false));
}

// The split planner of the tensor-core kernel (host code, no GPU needed): decode rows that leave
// SMs idle get splits; a batch that fills every slot gets one, so a long prefill chunk does not ask
// for rows x splits partials (a 32K-token 7B prefill once asked for 116 GiB of them).
TEST(CudaAttention, SplitPlanKeepsOneSplitWhenTheRowsFillTheSlots) {
    const int32_t slots = 132 * 2;
    const cuda::FusedSplit decode = cuda::mma_split(1, 4, 32768, slots, 128);
    EXPECT_GT(decode.n_splits, 1);
    EXPECT_GE(static_cast<int64_t>(decode.n_splits) * decode.split_tokens, 32768);
    const cuda::FusedSplit prefill = cuda::mma_split(32768, 4, 32768, slots, 128);
    EXPECT_EQ(prefill.n_splits, 1);
    EXPECT_GE(prefill.split_tokens, 32768);
    const cuda::FusedSplit full = cuda::mma_split(66, 4, 4096, slots, 128);  // 264 CTAs: one wave
    EXPECT_EQ(full.n_splits, 1);
}

// With thread-block clusters of 8, a plan beyond 8 splits takes whole clusters, and stays within
// one wave: 7B at 4K (4 KV heads) and 32K; 0.5B at 3000 tokens on 2 KV heads.
TEST(CudaAttention, SplitPlanTakesWholeClusters) {
    for (const auto& [ctas_per_row, context] : {std::pair{4, 4096}, {4, 32768}, {2, 3000}, {4, 640}}) {
        const cuda::FusedSplit s = cuda::mma_split(1, ctas_per_row, context, 128, 128, 8);
        EXPECT_GE(static_cast<int64_t>(s.n_splits) * s.split_tokens, context);
        const int32_t padded = s.n_splits <= 8 ? s.n_splits : (s.n_splits + 7) / 8 * 8;
        EXPECT_LE(padded * ctas_per_row, 128) << context;  // one wave of the 128 cluster slots
        EXPECT_GT(s.n_splits, 1) << context;
    }
    EXPECT_EQ(cuda::mma_split(1, 4, 4096, 128, 128, 8).n_splits, 32);
    EXPECT_EQ(cuda::mma_split(1, 4, 640, 128, 128, 8).n_splits, 5);
}

// RoPE and the new token's K/V store folded into the decode kernel (matmul_rope_attention at one
// new token per sequence, the QKV GEMV without its RoPE epilogue) against the GEMV, the RoPE + K/V
// store kernel and the attention (the base class's ops): the same output bits and the same cache
// bytes. The 0.5B and 7B head geometries, F16 and BF16 caches, with and without the QKV bias,
// tensor-copy and cp.async tiles, batch 1 and 5, the new token first, inside or last in its tile
// and alone in its split. The new tokens' cache slots start as NaN: each path must write them, and
// a stale row patched in the wrong place would show. The folded path leaves q as it was (it reads
// the raw QKV rows instead), which tells that the fold was taken.
TEST(CudaAttention, RopeFoldedIntoDecodeEqualsRopeKvStoreThenAttention) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda(CudaAttentionVariant::Fused, CudaBackendOptions::QkvRopeEpilogue::Off);
    ASSERT_TRUE(be);
    struct Case {
        Geometry g;
        int64_t n_in;
    };
    const std::vector<std::vector<int32_t>> batches = {{513}, {1, 16, 17, 4096, 300}, {12000}};
    uint64_t seed = 4100;
    for (const Case& c : {Case{{14, 2, 64}, 256}, Case{{28, 4, 128}, 512}}) {
        const Geometry& g = c.g;
        const int32_t block = 16;
        const int64_t q_dim = static_cast<int64_t>(g.n_heads) * g.head_dim, kv_dim = static_cast<int64_t>(g.n_kv_heads) * g.head_dim;
        const int64_t n_out = q_dim + 2 * kv_dim;
        std::vector<float> inv_freq(g.head_dim / 2);
        for (int i = 0; i < g.head_dim / 2; ++i) inv_freq[i] = std::pow(1e6f, -2.0f * i / g.head_dim);
        const RopeParams rope{inv_freq.data(), g.head_dim};
        std::vector<uint8_t> wb = encode_rows(DType::Q8_0, random_floats(c.n_in * n_out, seed++, 0.5f), c.n_in);
        auto w = be->upload_weight(host_view(DType::Q8_0, c.n_in, n_out, wb.data()));
        std::vector<float> bias_v = random_floats(static_cast<size_t>(n_out), seed++, 0.2f);
        auto bias = be->upload_weight(host_view(DType::F32, n_out, 1, bias_v.data()));
        ASSERT_TRUE(w.is_ok() && bias.is_ok());
        for (DType kv_dtype : {DType::F16, DType::BF16}) {
            for (const std::vector<int32_t>& contexts : batches) {
                KvCacheConfig kc;
                kc.n_layers = 1;
                kc.n_kv_heads = g.n_kv_heads;
                kc.head_dim = g.head_dim;
                kc.block_size = block;
                kc.n_blocks = 3;
                for (int32_t ctx : contexts) kc.n_blocks += (ctx + block - 1) / block;
                kc.dtype = kv_dtype;
                auto cache = be->create_kv_cache(kc);
                ASSERT_TRUE(cache.is_ok()) << cache.status().message();
                // Scattered tables; the earlier tokens' K/V random, the new tokens' slots NaN.
                std::vector<int32_t> pool(kc.n_blocks);
                std::iota(pool.begin(), pool.end(), 0);
                std::mt19937 rng(static_cast<uint32_t>(seed++));
                std::shuffle(pool.begin(), pool.end(), rng);
                Batch fill, step;
                fill.block_size = step.block_size = block;
                size_t next = 0;
                for (int32_t ctx : contexts) {
                    std::vector<int32_t> table;
                    for (int32_t i = 0; i * block < ctx; ++i) table.push_back(pool[next++]);
                    fill.add_sequence(std::vector<int32_t>(ctx, 0), 0, table, false);
                    step.add_sequence({0}, ctx - 1, table, true);
                }
                be->begin(fill);
                TensorView fk = be->alloc(DType::F32, kv_dim, fill.n_tokens()), fv = be->alloc(DType::F32, kv_dim, fill.n_tokens());
                be->upload(random_floats(kv_dim * fill.n_tokens(), seed++).data(), fk);
                be->upload(random_floats(kv_dim * fill.n_tokens(), seed++).data(), fv);
                be->kv_store(**cache, 0, fk, fv);
                const int32_t n_rows = step.n_tokens();
                const std::vector<float> xv = random_floats(static_cast<size_t>(c.n_in * n_rows), seed++);
                const std::vector<float> poison_q(static_cast<size_t>(q_dim * n_rows), 7.0f);
                const std::vector<float> poison_kv(static_cast<size_t>(kv_dim * n_rows), std::nanf(""));
                const size_t half = (**cache).layer(0).offset(kc.n_blocks, 0, 0);
                for (int tma : {1, 0}) {
                    cuda::force_attention_tma(tma);
                    for (bool with_bias : {false, true}) {
                        SCOPED_TRACE("heads " + std::to_string(g.n_heads) + "/" + std::to_string(g.n_kv_heads) + "x" +
                                     std::to_string(g.head_dim) + " " + type_name(kv_dtype) + " rows " +
                                     std::to_string(n_rows) + " tma " + std::to_string(tma) + " bias " +
                                     std::to_string(with_bias));
                        std::vector<uint8_t> out_b[2], k_b[2], v_b[2];
                        std::vector<float> q_after[2];
                        for (int folded : {0, 1}) {
                            be->begin(step);
                            TensorView pk = be->alloc(DType::F32, kv_dim, n_rows), pv = be->alloc(DType::F32, kv_dim, n_rows);
                            be->upload(poison_kv.data(), pk);
                            be->upload(poison_kv.data(), pv);
                            be->kv_store(**cache, 0, pk, pv);
                            TensorView x = be->alloc(DType::F32, c.n_in, n_rows);
                            be->upload(xv.data(), x);
                            TensorView qkv = be->alloc(DType::F32, n_out, n_rows), q = be->alloc(DType::F32, q_dim, n_rows);
                            TensorView out = be->alloc(DType::F16, q_dim, n_rows);
                            be->upload(poison_q.data(), q);
                            const TensorView b = with_bias ? *bias : TensorView{};
                            const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
                            if (folded)
                                be->matmul_rope_attention(*w, TensorView{}, x, b, qkv, g.n_heads, g.n_kv_heads, rope, q,
                                                          **cache, 0, out, scale);
                            else
                                be->Backend::matmul_rope_attention(*w, TensorView{}, x, b, qkv, g.n_heads, g.n_kv_heads, rope,
                                                                   q, **cache, 0, out, scale);
                            out_b[folded].resize(out.n_bytes());
                            be->download(out, out_b[folded].data());
                            q_after[folded].resize(poison_q.size());
                            be->to_host(q, q_after[folded].data());
                            k_b[folded].resize(half);
                            v_b[folded].resize(half);
                            be->download_kv_layer(**cache, 0, k_b[folded].data(), v_b[folded].data());
                        }
                        EXPECT_EQ(out_b[1], out_b[0]) << "attention output bytes";
                        EXPECT_TRUE(k_b[1] == k_b[0] && v_b[1] == v_b[0]) << "cache bytes";
                        EXPECT_EQ(q_after[1], poison_q) << "the folded path wrote q: the fold was not taken";
                        EXPECT_NE(q_after[0], poison_q);
                        const std::vector<float> o = decode_rows(DType::F16, out_b[1].data(), q_dim, n_rows);
                        EXPECT_TRUE(std::all_of(o.begin(), o.end(), [](float f) { return std::isfinite(f); }));
                    }
                }
                cuda::force_attention_tma(-1);
            }
        }
    }
}

}  // namespace
}  // namespace mvllm::test
