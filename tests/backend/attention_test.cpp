// CPU attention: kv_store writes exactly its slots; the three variants (AVX2 and scalar kernels)
// agree with the double-precision reference over head_dim x GQA geometry x KV dtype x q dtype x
// block size, on batches that mix prefill chunks (from position 0 and from mid-sequence) with
// single-token decodes, over scattered block ids whose unused slots hold large garbage values.
//
// Tolerance. The reference reads the same cache and q values (F16 ones already rounded), so the
// only differences are f32 accumulation and the vector exp (relative error < 2e-7): the outputs,
// convex combinations of V rows with |v| <= 1, must agree to 1e-5 absolute. F16 outputs are
// additionally rounded once: half an F16 ulp, 2^-11 |ref| (plus the subnormal step).
#include "backend/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/half.h"

namespace mvllm {
namespace {

// Host tensor of f32 or f16 values with ne = {d, heads, tokens}.
struct HostTensor {
    DType type = DType::F32;
    std::vector<float> f32;
    std::vector<uint16_t> f16;
    TensorView view;

    HostTensor(DType t, int64_t d, int64_t heads, int64_t tokens) : type(t) {
        const size_t n = static_cast<size_t>(d * heads * tokens);
        if (t == DType::F32) f32.assign(n, 0.0f); else f16.assign(n, 0);
        view.type = t;
        view.ne = {d, heads, tokens, 1};
        view.data = t == DType::F32 ? static_cast<void*>(f32.data()) : static_cast<void*>(f16.data());
    }
    size_t size() const { return type == DType::F32 ? f32.size() : f16.size(); }
    float get(size_t i) const { return type == DType::F32 ? f32[i] : f16_to_f32(f16[i]); }
    void set(size_t i, float x) {
        if (type == DType::F32) f32[i] = x; else f16[i] = f32_to_f16(x);
    }
    void fill_uniform(std::mt19937& rng, float amp) {
        std::uniform_real_distribution<float> u(-amp, amp);
        for (size_t i = 0; i < size(); ++i) set(i, u(rng));
    }
};

// Every cache element set to a large random value: slots outside a sequence's context must never
// influence its output.
void fill_garbage(KvCache& cache, std::mt19937& rng) {
    const KvCacheConfig& c = cache.config();
    const KvLayerView v = cache.layer(0);
    const size_t n = static_cast<size_t>(c.n_blocks) * c.n_kv_heads * c.block_size * c.head_dim;
    std::uniform_real_distribution<float> u(-60.0f, 60.0f);
    for (void* base : {v.k, v.v}) {
        for (size_t i = 0; i < n; ++i) {
            if (c.dtype == DType::F32) static_cast<float*>(base)[i] = u(rng);
            else static_cast<uint16_t*>(base)[i] = f32_to_f16(u(rng));
        }
    }
}

struct SeqSpec {
    int32_t start;     // tokens already cached
    int32_t n_tokens;  // new tokens in this step
};

struct Scenario {
    std::unique_ptr<KvCache> cache;
    Batch batch;
    std::vector<HostTensor> q;  // one
    int32_t n_heads = 0;
};

// Builds a cache whose sequences hold `start` earlier tokens (written through kv_store of an
// earlier step) and a batch of their new tokens (also stored). Block ids are a shuffled
// permutation, so every table is scattered.
Scenario make_scenario(int d, int n_heads, int n_kv, DType kv_dtype, DType act_dtype, int bs,
                       const std::vector<SeqSpec>& specs, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::vector<int32_t>> tables(specs.size());
    int64_t blocks_needed = 0;
    for (const SeqSpec& s : specs) blocks_needed += (s.start + s.n_tokens + bs - 1) / bs + 1;
    KvCacheConfig cfg;
    cfg.n_layers = 1;
    cfg.n_kv_heads = n_kv;
    cfg.head_dim = d;
    cfg.block_size = bs;
    cfg.n_blocks = blocks_needed + 3;
    cfg.dtype = kv_dtype;
    auto created = KvCache::create(cfg);
    MVLLM_CHECK(created.is_ok()) << created.status().message();
    Scenario sc;
    sc.cache = std::move(created).value();
    sc.n_heads = n_heads;
    fill_garbage(*sc.cache, rng);

    std::vector<int32_t> ids(cfg.n_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        const int64_t nb = (specs[i].start + specs[i].n_tokens + bs - 1) / bs + 1;
        tables[i].assign(ids.begin() + next, ids.begin() + next + nb);
        next += nb;
    }
    const KvLayerView layer = sc.cache->layer(0);
    // Earlier steps: the cached history of each sequence.
    Batch history;
    history.block_size = bs;
    for (size_t i = 0; i < specs.size(); ++i) {
        if (specs[i].start > 0) {
            history.add_sequence(std::vector<int32_t>(specs[i].start, 1), 0, tables[i], false);
        }
    }
    if (history.n_tokens() > 0) {
        HostTensor k(act_dtype, d, n_kv, history.n_tokens()), v(act_dtype, d, n_kv, history.n_tokens());
        k.fill_uniform(rng, 1.0f);
        v.fill_uniform(rng, 1.0f);
        kv_store(history, k.view, v.view, layer);
    }
    // This step.
    sc.batch.block_size = bs;
    for (size_t i = 0; i < specs.size(); ++i) {
        sc.batch.add_sequence(std::vector<int32_t>(specs[i].n_tokens, 2), specs[i].start, tables[i],
                              true);
    }
    const int64_t n = sc.batch.n_tokens();
    HostTensor k(act_dtype, d, n_kv, n), v(act_dtype, d, n_kv, n);
    k.fill_uniform(rng, 1.0f);
    v.fill_uniform(rng, 1.0f);
    kv_store(sc.batch, k.view, v.view, layer);
    sc.q.emplace_back(act_dtype, d, n_heads, n);
    sc.q[0].fill_uniform(rng, 3.0f);  // |scores| up to ~3 sqrt(d)/3: peaked softmax rows
    return sc;
}

// Largest |got - ref| beyond the tolerance; 0 when within it. `where` names the first violation.
double excess_error(const HostTensor& got, const HostTensor& ref, std::string* where) {
    double worst = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double r = ref.get(i), g = got.get(i);
        double tol = 1e-5;
        if (got.type == DType::F16) tol += std::ldexp(std::fabs(r), -11) + 6e-8;
        const double err = std::fabs(g - r);
        if (!(err <= tol) && err - tol > worst) {  // NaN counts as a failure
            worst = std::isnan(err) ? 1e30 : err - tol;
            *where = "element " + std::to_string(i) + ": got " + std::to_string(g) + ", reference " +
                     std::to_string(r);
        }
    }
    return worst;
}

// The batch of the parity table: a decode, a prefill chunk from position 0 (three query-token
// chunks), a decode early in its sequence, a prefill chunk starting mid-sequence.
const std::vector<SeqSpec> kMixedBatch = {{70, 1}, {0, 37}, {3, 1}, {45, 21}};

using ParityParam = std::tuple<int, std::pair<int, int>, DType, DType, int>;

class AttentionParity : public ::testing::TestWithParam<ParityParam> {};

TEST_P(AttentionParity, AllVariantsMatchReference) {
    const auto [d, heads, kv_dtype, act_dtype, bs] = GetParam();
    const auto [n_heads, n_kv] = heads;
    Scenario sc = make_scenario(d, n_heads, n_kv, kv_dtype, act_dtype, bs, kMixedBatch,
                                1234u + d * 7 + n_heads * 13 + bs);
    const KvLayerView layer = sc.cache->layer(0);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const int64_t n = sc.batch.n_tokens();
    HostTensor ref(DType::F32, d, n_heads, n);
    attention_reference(sc.batch, layer, sc.q[0].view, ref.view, n_heads, scale);

    ThreadPool pool(3);
    AttentionScratch scratch;
    for (const char* isa : {"native", "scalar"}) {
        if (std::strcmp(isa, "scalar") == 0) setenv("MVLLM_CPU_ISA", "scalar", 1);
        else unsetenv("MVLLM_CPU_ISA");
        for (AttentionVariant var :
             {AttentionVariant::Naive, AttentionVariant::Grouped, AttentionVariant::Fused}) {
            HostTensor out(act_dtype, d, n_heads, n);
            for (size_t i = 0; i < out.size(); ++i) out.set(i, NAN);
            attention(pool, var, sc.batch, layer, sc.q[0].view, out.view, n_heads, scale, scratch);
            std::string where;
            EXPECT_EQ(excess_error(out, ref, &where), 0.0)
                << attention_variant_name(var) << " (" << isa << "): " << where;
        }
    }
    unsetenv("MVLLM_CPU_ISA");
}

std::string parity_name(const ::testing::TestParamInfo<ParityParam>& info) {
    const auto [d, heads, kv_dtype, act_dtype, bs] = info.param;
    return "d" + std::to_string(d) + "_h" + std::to_string(heads.first) + "kv" +
           std::to_string(heads.second) + "_kv" + type_name(kv_dtype) + "_q" +
           type_name(act_dtype) + "_bs" + std::to_string(bs);
}

INSTANTIATE_TEST_SUITE_P(
    Table, AttentionParity,
    ::testing::Combine(::testing::Values(16, 64, 128),
                       ::testing::Values(std::pair{4, 4}, std::pair{8, 2}, std::pair{14, 2}),
                       ::testing::Values(DType::F32, DType::F16),
                       ::testing::Values(DType::F32, DType::F16), ::testing::Values(4, 16, 32)),
    parity_name);

// One long decode on a wide pool: the fused path splits the context over threads and merges the
// partial softmaxes; a long prefill chunk exercises many query-token chunks.
TEST(AttentionSplit, LongDecodeAndPrefillOnWidePool) {
    for (DType kv_dtype : {DType::F32, DType::F16}) {
        for (const std::vector<SeqSpec>& specs :
             {std::vector<SeqSpec>{{1000, 1}}, std::vector<SeqSpec>{{300, 1}, {17, 150}}}) {
            Scenario sc = make_scenario(64, 14, 2, kv_dtype, DType::F32, 16, specs, 99);
            const KvLayerView layer = sc.cache->layer(0);
            const int64_t n = sc.batch.n_tokens();
            HostTensor ref(DType::F32, 64, 14, n);
            attention_reference(sc.batch, layer, sc.q[0].view, ref.view, 14, 0.125f);
            ThreadPool pool(8);
            AttentionScratch scratch;
            for (AttentionVariant var :
                 {AttentionVariant::Naive, AttentionVariant::Grouped, AttentionVariant::Fused}) {
                HostTensor out(DType::F32, 64, 14, n);
                attention(pool, var, sc.batch, layer, sc.q[0].view, out.view, 14, 0.125f, scratch);
                std::string where;
                EXPECT_EQ(excess_error(out, ref, &where), 0.0)
                    << attention_variant_name(var) << " kv " << type_name(kv_dtype) << ": " << where;
            }
        }
    }
}

// kv_store converts into exactly the slots of slot_mapping and leaves every other byte alone.
TEST(AttentionKvStore, WritesExactlyTheMappedSlots) {
    for (DType kv_dtype : {DType::F32, DType::F16}) {
        for (DType in_dtype : {DType::F32, DType::F16}) {
            const int d = 8, n_kv = 2, bs = 4;
            KvCacheConfig cfg{1, n_kv, d, bs, 6, kv_dtype};
            auto cache = std::move(KvCache::create(cfg)).value();
            const KvLayerView layer = cache->layer(0);
            const size_t bytes = static_cast<size_t>(cfg.n_blocks) * n_kv * bs * d * layer.elem_size();
            std::memset(layer.k, 0xA5, bytes);
            std::memset(layer.v, 0x5A, bytes);
            Batch batch;
            batch.block_size = bs;
            batch.add_sequence({1, 2, 3}, 2, {4, 1}, false);  // positions 2,3 -> block 4; 4 -> block 1
            batch.add_sequence({7}, 9, {5, 0, 3}, false);      // position 9 -> block 3, offset 1
            std::mt19937 rng(5);
            HostTensor k(in_dtype, d, n_kv, batch.n_tokens()), v(in_dtype, d, n_kv, batch.n_tokens());
            k.fill_uniform(rng, 2.0f);
            v.fill_uniform(rng, 2.0f);
            kv_store(batch, k.view, v.view, layer);

            std::vector<bool> written(bytes, false);
            for (int64_t i = 0; i < batch.n_tokens(); ++i) {
                const int64_t slot = batch.slot_mapping[i];
                for (int h = 0; h < n_kv; ++h) {
                    const size_t off = layer.offset(slot / bs, h, static_cast<int32_t>(slot % bs));
                    for (int e = 0; e < d; ++e) {
                        const size_t src = (static_cast<size_t>(i) * n_kv + h) * d + e;
                        for (int which = 0; which < 2; ++which) {
                            const HostTensor& t = which == 0 ? k : v;
                            const uint8_t* base = static_cast<const uint8_t*>(which ? layer.v : layer.k);
                            float expect = t.get(src), got;
                            if (kv_dtype == DType::F16) {
                                expect = f16_to_f32(f32_to_f16(expect));
                                uint16_t h16;
                                std::memcpy(&h16, base + off + e * 2, 2);
                                got = f16_to_f32(h16);
                            } else {
                                std::memcpy(&got, base + off + e * 4, 4);
                            }
                            EXPECT_EQ(got, expect) << "token " << i << " head " << h << " e " << e;
                        }
                        for (size_t b = 0; b < layer.elem_size(); ++b) {
                            written[off + e * layer.elem_size() + b] = true;
                        }
                    }
                }
            }
            for (size_t b = 0; b < bytes; ++b) {
                if (written[b]) continue;
                ASSERT_EQ(static_cast<const uint8_t*>(layer.k)[b], 0xA5) << "K byte " << b;
                ASSERT_EQ(static_cast<const uint8_t*>(layer.v)[b], 0x5A) << "V byte " << b;
            }
        }
    }
}

TEST(AttentionVariantNames, RoundTrip) {
    for (AttentionVariant v :
         {AttentionVariant::Naive, AttentionVariant::Grouped, AttentionVariant::Fused}) {
        AttentionVariant parsed = AttentionVariant::Naive;
        ASSERT_TRUE(parse_attention_variant(attention_variant_name(v), &parsed));
        EXPECT_EQ(parsed, v);
    }
    AttentionVariant parsed;
    EXPECT_TRUE(parse_attention_variant("Fused", &parsed));
    EXPECT_EQ(parsed, AttentionVariant::Fused);
    EXPECT_FALSE(parse_attention_variant("flash", &parsed));
    EXPECT_STREQ(attention_variant_name(AttentionVariant::Naive), "naive");
    EXPECT_STREQ(attention_variant_name(AttentionVariant::Grouped), "grouped");
}

}  // namespace
}  // namespace mvllm
