// Sampler transforms on exact logits, and statistical checks with fixed seeds.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/stop_strings.h"

namespace mvllm {
namespace {

SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0;
    return p;
}

TEST(Sampler, GreedyAndTopKOneAreArgmax) {
    std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.9f};
    std::mt19937_64 rng(1);
    EXPECT_EQ(sample_token(logits.data(), 4, greedy(), {}, 0, rng, nullptr), 1);
    SamplingParams k1;
    k1.top_k = 1;
    k1.temperature = 5.0f;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits.data(), 4, k1, {}, 0, rng, nullptr), 1);
}

TEST(Sampler, PenaltiesChangeExactLogits) {
    SamplingParams p;
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    std::vector<float> logits{1.0f, -1.0f, 3.0f, 4.0f};
    // prompt {0, 1}; output {2, 2}
    apply_penalties(logits.data(), 4, p, {0, 1, 2, 2}, 2);
    EXPECT_FLOAT_EQ(logits[0], 0.5f);               // positive: divided
    EXPECT_FLOAT_EQ(logits[1], -2.0f);              // negative: multiplied
    EXPECT_FLOAT_EQ(logits[2], 1.5f - 0.5f - 0.5f); // repetition, presence, 2 x frequency
    EXPECT_FLOAT_EQ(logits[3], 4.0f);               // unseen
}

TEST(Sampler, TopKTopPMinPFilters) {
    std::vector<float> logits(8);
    for (int i = 0; i < 8; ++i) logits[i] = std::log(static_cast<float>(8 - i));  // p ~ 8:7:...:1
    SamplingParams p;
    p.top_k = 3;
    auto d = sampling_distribution(logits.data(), 8, p);
    ASSERT_EQ(d.size(), 3u);
    EXPECT_NEAR(d[0].second, 8.0 / 21, 1e-6);
    p = SamplingParams();
    p.top_p = 0.5f;  // masses 8/36, 15/36, 21/36 >= 0.5 -> three tokens
    d = sampling_distribution(logits.data(), 8, p);
    ASSERT_EQ(d.size(), 3u);
    p = SamplingParams();
    p.min_p = 0.45f;  // keep p >= 0.45 * 8/36: tokens with weight >= 3.6
    d = sampling_distribution(logits.data(), 8, p);
    ASSERT_EQ(d.size(), 5u);
    double sum = 0;
    for (auto& [t, q] : d) sum += q;
    EXPECT_NEAR(sum, 1.0, 1e-6);
    p = SamplingParams();
    p.temperature = 0.5f;  // p ~ w^2
    d = sampling_distribution(logits.data(), 8, p);
    EXPECT_NEAR(d[0].second / d[1].second, 64.0 / 49.0, 1e-4);
}

TEST(Sampler, DrawsFollowTheDistributionAndSeedsReproduce) {
    std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    SamplingParams p;
    std::mt19937_64 rng(1234);
    std::map<int32_t, int> counts;
    const int n = 20000;
    for (int i = 0; i < n; ++i) ++counts[sample_token(logits.data(), 3, p, {}, 0, rng, nullptr)];
    EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
    EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
    EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
    p.top_p = 0.75f;  // keeps {0, 1}: 0.5/0.8 and 0.3/0.8
    counts.clear();
    for (int i = 0; i < n; ++i) ++counts[sample_token(logits.data(), 3, p, {}, 0, rng, nullptr)];
    EXPECT_EQ(counts[2], 0);
    EXPECT_NEAR(counts[0] / double(n), 0.625, 0.02);
    std::mt19937_64 a(7), b(7);
    for (int i = 0; i < 100; ++i)
        EXPECT_EQ(sample_token(logits.data(), 3, p, {}, 0, a, nullptr), sample_token(logits.data(), 3, p, {}, 0, b, nullptr));
}

// A seeded draw must not hinge on rounding: logits that differ by float noise (another batch
// shape, another kernel) give the same token for nearly every draw. Walking the cumulative sum
// (sorted by probability or not) changes about 1-3% of these draws; the exponential race none.
TEST(Sampler, DrawIsStableUnderRoundingNoise) {
    const int64_t n_vocab = 4096;
    std::mt19937_64 gen(99);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> noise(-1e-4f, 1e-4f);
    std::vector<float> a(n_vocab), b(n_vocab);
    for (int64_t i = 0; i < n_vocab; ++i) {
        a[i] = normal(gen);
        b[i] = a[i] + noise(gen);
    }
    const SamplingParams p;  // temperature 1, nothing truncated: the whole tail is drawable
    const auto da = sampling_distribution(a.data(), n_vocab, p), db = sampling_distribution(b.data(), n_vocab, p);
    int differ = 0;
    const int n = 2000;
    for (int i = 0; i < n; ++i) {
        const uint64_t key = gen();
        differ += draw_token(da, key) != draw_token(db, key);
    }
    EXPECT_LE(differ, 2) << "of " << n << " draws";
}

TEST(Sampler, Logprobs) {
    std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    SamplingParams p = greedy();
    p.logprobs = 2;
    std::mt19937_64 rng(1);
    TokenLogprob lp;
    EXPECT_EQ(sample_token(logits.data(), 3, p, {}, 0, rng, &lp), 0);
    EXPECT_NEAR(lp.logprob, std::log(0.5), 1e-5);
    ASSERT_EQ(lp.top.size(), 2u);
    EXPECT_EQ(lp.top[1].first, 1);
    EXPECT_NEAR(lp.top[1].second, std::log(0.3), 1e-5);
}

TEST(Sampler, Validation) {
    SamplingParams p;
    EXPECT_TRUE(validate_sampling_params(p).is_ok());
    p.top_p = 0;
    EXPECT_FALSE(validate_sampling_params(p).is_ok());
    p = SamplingParams();
    p.temperature = -1;
    EXPECT_FALSE(validate_sampling_params(p).is_ok());
    p = SamplingParams();
    p.max_tokens = 0;
    EXPECT_FALSE(validate_sampling_params(p).is_ok());
}

TEST(StopStrings, HoldsBackPartialMatchesAndCutsAtTheStop) {
    StopStringMatcher m({"END", "\n\n"});
    bool stopped = false;
    EXPECT_EQ(m.push("hello E", &stopped), "hello ");
    EXPECT_FALSE(stopped);
    EXPECT_EQ(m.push("N", &stopped), "");
    EXPECT_EQ(m.push("X", &stopped), "ENX");  // not a stop after all
    EXPECT_EQ(m.push(" more\n", &stopped), " more");
    EXPECT_EQ(m.push("\nignored", &stopped), "");
    EXPECT_TRUE(stopped);
    StopStringMatcher n({"xyz"});
    EXPECT_EQ(n.push("abx", &stopped), "ab");
    EXPECT_EQ(n.flush(), "x");
}

}  // namespace
}  // namespace mvllm
