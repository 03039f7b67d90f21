// Batch-invariant CPU kernels: with batch_invariant, a token's matmul row and a query row's
// attention output are bit-identical whatever else shares the call (other tokens, other
// sequences, prefill chunk or single-token decode), for every weight type and ISA. The default
// kernels are checked to really differ (Q4_0 GEMV vs panel GEMM, fused attention's thread-count
// split), so that the equalities below are not vacuous.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/types.h"

namespace mvllm {
namespace {

std::vector<CpuIsa> isas() {
    std::vector<CpuIsa> v = {CpuIsa::Scalar};
    if (cpu_isa() != CpuIsa::Scalar) v.push_back(CpuIsa::Avx2);
    if (cpu_isa() == CpuIsa::Avx512) v.push_back(CpuIsa::Avx512);
    return v;
}

std::vector<float> normal(int64_t n, uint32_t seed, float sd) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (float& f : v) f = d(rng);
    return v;
}

struct Matrix {
    DType type;
    int64_t cols, rows;
    std::vector<uint8_t> bytes;
    TensorView view() { return TensorView{type, {cols, rows, 1, 1}, bytes.data()}; }
};

Matrix make_matrix(DType type, int64_t cols, int64_t rows, uint32_t seed) {
    Matrix m{type, cols, rows, std::vector<uint8_t>(row_size(type, cols) * rows)};
    const std::vector<float> f = normal(cols * rows, seed, 0.5f);
    for (int64_t r = 0; r < rows; ++r)
        quantize_row(type, f.data() + r * cols, m.bytes.data() + r * row_size(type, cols), cols);
    return m;
}

// out rows of matmul(w, x[tokens]) for the given token indices of x, as one call.
std::vector<float> run_matmul(ThreadPool& pool, Matrix& w, Matrix& x, const std::vector<int64_t>& tokens,
                              CpuIsa isa, bool invariant) {
    Matrix sub{x.type, x.cols, static_cast<int64_t>(tokens.size()), {}};
    const size_t rb = row_size(x.type, x.cols);
    for (int64_t t : tokens) sub.bytes.insert(sub.bytes.end(), x.bytes.begin() + t * rb, x.bytes.begin() + (t + 1) * rb);
    std::vector<float> y(w.rows * tokens.size());
    TensorView out{DType::F32, {w.rows, static_cast<int64_t>(tokens.size()), 1, 1}, y.data()};
    MatmulScratch scratch;
    matmul(pool, w.view(), sub.view(), out, scratch, isa, invariant);
    return y;
}

// Token t's row of a run over `tokens`.
std::vector<float> row_of(const std::vector<float>& y, int64_t n_out, const std::vector<int64_t>& tokens, int64_t t) {
    for (size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] == t) return std::vector<float>(y.begin() + i * n_out, y.begin() + (i + 1) * n_out);
    return {};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(BatchInvariance, MatmulRowsDoNotDependOnTheOtherTokens) {
    ThreadPool pool(3);
    const int64_t n_in = 512, n_out = 8 * 9 + 3;  // 3 leftover rows after the 8-row groups
    const int64_t n_tokens = 13;                  // tiles of 4, 4, 4, 1
    for (DType wt : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::F32}) {
        for (DType xt : {DType::F32, DType::F16}) {
            Matrix w = make_matrix(wt, n_in, n_out, 7);
            Matrix x = make_matrix(xt, n_in, n_tokens, 8);
            for (CpuIsa isa : isas()) {
                SCOPED_TRACE(std::string(type_name(wt)) + " x " + type_name(xt) + " " + cpu_isa_name(isa));
                std::vector<int64_t> all(n_tokens);
                for (int64_t t = 0; t < n_tokens; ++t) all[t] = t;
                const std::vector<float> full = run_matmul(pool, w, x, all, isa, true);
                // Each token alone (the decode kernels), in prefixes of every length (every tile
                // size and kernel switch), and reordered among others.
                std::vector<std::vector<int64_t>> calls;
                for (int64_t t = 0; t < n_tokens; ++t) calls.push_back({t});
                for (int64_t n = 2; n < n_tokens; ++n) calls.push_back(std::vector<int64_t>(all.begin(), all.begin() + n));
                calls.push_back({12, 5, 0});
                calls.push_back({3, 9});
                for (const auto& call : calls) {
                    const std::vector<float> y = run_matmul(pool, w, x, call, isa, true);
                    for (int64_t t : call)
                        ASSERT_TRUE(same_bits(row_of(y, n_out, call, t), row_of(full, n_out, all, t)))
                            << "token " << t << " in a call of " << call.size();
                }
            }
        }
    }
}

// Not vacuous: the default Q4_0 kernels (GEMV at one token, dot tiles at 2-3, panel GEMM from 4)
// round differently, so without the flag a token's row does depend on its batch.
TEST(BatchInvariance, DefaultQ4_0KernelsDependOnTheBatchSize) {
    if (cpu_isa() == CpuIsa::Scalar) GTEST_SKIP() << "no SIMD kernels on this CPU";
    ThreadPool pool(2);
    Matrix w = make_matrix(DType::Q4_0, 896, 64, 3);
    Matrix x = make_matrix(DType::F32, 896, 4, 4);
    const std::vector<int64_t> one = {0}, four = {0, 1, 2, 3};
    EXPECT_FALSE(same_bits(row_of(run_matmul(pool, w, x, one, cpu_isa(), false), 64, one, 0),
                           row_of(run_matmul(pool, w, x, four, cpu_isa(), false), 64, four, 0)));
    EXPECT_TRUE(same_bits(row_of(run_matmul(pool, w, x, one, cpu_isa(), true), 64, one, 0),
                          row_of(run_matmul(pool, w, x, four, cpu_isa(), true), 64, four, 0)));
}

// ---- attention ------------------------------------------------------------------------------------

constexpr int32_t kHeadDim = 64, kKvHeads = 2, kHeads = 14, kBlock = 16;

// A cache of n_blocks filled with random K/V, shared by the calls below.
std::unique_ptr<KvCache> random_cache(int64_t n_blocks, DType dtype, uint32_t seed) {
    KvCacheConfig c;
    c.n_layers = 1;
    c.n_kv_heads = kKvHeads;
    c.head_dim = kHeadDim;
    c.block_size = kBlock;
    c.n_blocks = n_blocks;
    c.dtype = dtype;
    auto cache = KvCache::create(c);
    MVLLM_CHECK(cache.is_ok()) << cache.status().message();
    const KvLayerView v = cache.value()->layer(0);
    const size_t n = static_cast<size_t>(n_blocks) * kKvHeads * kBlock * kHeadDim;
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (void* base : {v.k, v.v})
        for (size_t i = 0; i < n; ++i) {
            if (dtype == DType::F32) static_cast<float*>(base)[i] = d(rng);
            else static_cast<uint16_t*>(base)[i] = f32_to_f16(d(rng));
        }
    return std::move(cache.value());
}

// One sequence of the call: its blocks, its context after the call, and its query rows (the last
// n_query positions). q rows come from a per-(sequence, position) generator, so the same row has
// the same q in every call.
struct SeqCall {
    int32_t seq;
    int32_t context;
    int32_t n_query;
};

std::vector<float> q_row(int32_t seq, int32_t pos) { return normal(kHeads * kHeadDim, 1000u * seq + pos, 1.0f); }

// Attention outputs [rows][kHeads * kHeadDim] f32 of one call; sequence s owns blocks
// [s * blocks_per_seq, (s + 1) * blocks_per_seq).
std::vector<float> run_attention(ThreadPool& pool, AttentionVariant variant, KvCache& cache, int32_t blocks_per_seq,
                                 const std::vector<SeqCall>& calls, bool invariant) {
    Batch batch;
    batch.block_size = kBlock;
    std::vector<float> q;
    for (const SeqCall& c : calls) {
        std::vector<int32_t> table(blocks_per_seq);
        for (int32_t b = 0; b < blocks_per_seq; ++b) table[b] = c.seq * blocks_per_seq + b;
        batch.add_sequence(std::vector<int32_t>(c.n_query, 0), c.context - c.n_query, table, false);
        for (int32_t p = c.context - c.n_query; p < c.context; ++p) {
            const std::vector<float> r = q_row(c.seq, p);
            q.insert(q.end(), r.begin(), r.end());
        }
    }
    const int64_t rows = batch.n_tokens();
    std::vector<float> out(q.size());
    TensorView qv{DType::F32, {kHeadDim, kHeads, rows, 1}, q.data()};
    TensorView ov{DType::F32, {kHeadDim, kHeads, rows, 1}, out.data()};
    AttentionScratch scratch;
    attention(pool, variant, batch, cache.layer(0), qv, ov, kHeads, 0.125f, scratch, invariant);
    return out;
}

// The output rows of sequence `seq` at positions [from, to) in a call's result.
std::vector<float> rows_of(const std::vector<float>& out, const std::vector<SeqCall>& calls, int32_t seq, int32_t from,
                           int32_t to) {
    const int64_t w = kHeads * kHeadDim;
    int64_t row = 0;
    for (const SeqCall& c : calls) {
        const int32_t first = c.context - c.n_query;
        if (c.seq == seq) {
            EXPECT_TRUE(from >= first && to <= c.context);
            return std::vector<float>(out.begin() + (row + from - first) * w, out.begin() + (row + to - first) * w);
        }
        row += c.n_query;
    }
    ADD_FAILURE() << "sequence " << seq << " not in the call";
    return {};
}

TEST(BatchInvariance, AttentionRowsDoNotDependOnTheBatch) {
    const int32_t blocks_per_seq = 80;  // 1280 positions: three fixed splits of 512
    for (DType dtype : {DType::F32, DType::F16}) {
        auto cache = random_cache(6 * blocks_per_seq, dtype, 5);
        for (AttentionVariant variant : {AttentionVariant::Fused, AttentionVariant::Grouped, AttentionVariant::Naive}) {
            for (int threads : {1, 4}) {
                SCOPED_TRACE(std::string(attention_variant_name(variant)) + " " + type_name(dtype) + " threads " +
                             std::to_string(threads));
                ThreadPool pool(threads);
                // Sequence 0 decodes position 1100 alone, among 5 others, and as the last row of a
                // 40-token prefill chunk; its prefill rows 1061..1099 also appear in a 16-row chunk.
                const std::vector<SeqCall> alone = {{0, 1101, 1}};
                const std::vector<SeqCall> crowd = {{1, 300, 1}, {2, 700, 17}, {0, 1101, 1}, {3, 40, 40}, {4, 1200, 1},
                                                    {5, 530, 3}};
                const std::vector<SeqCall> chunk = {{0, 1101, 40}, {5, 900, 1}};
                const std::vector<SeqCall> small = {{0, 1077, 16}};
                const auto a = run_attention(pool, variant, *cache, blocks_per_seq, alone, true);
                const auto b = run_attention(pool, variant, *cache, blocks_per_seq, crowd, true);
                const auto c = run_attention(pool, variant, *cache, blocks_per_seq, chunk, true);
                const auto d = run_attention(pool, variant, *cache, blocks_per_seq, small, true);
                EXPECT_TRUE(same_bits(rows_of(a, alone, 0, 1100, 1101), rows_of(b, crowd, 0, 1100, 1101)));
                EXPECT_TRUE(same_bits(rows_of(a, alone, 0, 1100, 1101), rows_of(c, chunk, 0, 1100, 1101)));
                EXPECT_TRUE(same_bits(rows_of(c, chunk, 0, 1061, 1077), rows_of(d, small, 0, 1061, 1077)));
            }
        }
    }
}

// Not vacuous: without the flag, the fused decode of one long sequence on 4 threads is split over
// the threads, which rounds differently from the same row in a batch of many sequences.
TEST(BatchInvariance, DefaultFusedSplitDependsOnTheBatch) {
    const int32_t blocks_per_seq = 80;
    auto cache = random_cache(6 * blocks_per_seq, DType::F32, 5);
    ThreadPool pool(4);
    const std::vector<SeqCall> alone = {{0, 1101, 1}};
    const std::vector<SeqCall> crowd = {{1, 300, 1}, {2, 700, 17}, {0, 1101, 1}, {3, 40, 40}, {4, 1200, 1}};
    const auto a = run_attention(pool, AttentionVariant::Fused, *cache, blocks_per_seq, alone, false);
    const auto b = run_attention(pool, AttentionVariant::Fused, *cache, blocks_per_seq, crowd, false);
    EXPECT_FALSE(same_bits(rows_of(a, alone, 0, 1100, 1101), rows_of(b, crowd, 0, 1100, 1101)));
}

}  // namespace
}  // namespace mvllm
