// Sampler transforms on exact logits, and statistical checks with fixed seeds.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

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

// PenaltyCounts grown a few tokens at a time lists what the definition gives, counted here from
// scratch: every token of prompt + output once (repetition), presence + frequency x its output
// count for the output's tokens, the logit bias (the last given for a token), nothing for tokens
// the parameters leave unchanged or outside the vocabulary; by token, with the row given; and
// applied to a row, what apply_penalties does. The list penalties() keeps from step to step (and
// lists again after the counts start over) is the same.
TEST(Sampler, PenaltyCountsGrownStepByStepFollowTheDefinition) {
    std::mt19937 gen(3);
    const int64_t n_vocab = 50;
    for (int trial = 0; trial < 40; ++trial) {
        std::vector<int32_t> tokens;
        const int64_t n_prompt = 1 + gen() % 30;
        for (int64_t i = 0; i < n_prompt; ++i) tokens.push_back(static_cast<int32_t>(gen() % 60) - 3);  // some outside
        SamplingParams p;
        p.repetition_penalty = trial % 3 == 0 ? 1.0f : 1.25f;
        p.presence_penalty = trial % 3 == 1 ? 0.0f : 0.5f;
        p.frequency_penalty = trial % 4 == 0 ? 0.0f : 0.3f;
        if (trial % 2 == 1) {  // a logit bias on some tokens, in and out of the context and the vocabulary
            for (int k = 0; k < 6; ++k) p.logit_bias.push_back({static_cast<int32_t>(gen() % 56), k % 3 ? 2.5f : -100.0f});
            p.logit_bias.push_back({p.logit_bias[0].first, 0.75f});  // listed twice: the last bias counts
            normalise_logit_bias(&p);
        }
        PenaltyCounts counts;
        for (int step = 0; step < 12; ++step) {
            counts.update(tokens, n_prompt);
            std::vector<TokenPenalty> got;
            counts.append_penalties(p, 7, n_vocab, &got);
            std::vector<TokenPenalty> want;
            for (int32_t t = 0; t < n_vocab; ++t) {
                const auto in_all = std::count(tokens.begin(), tokens.end(), t);
                const auto in_output = std::count(tokens.begin() + n_prompt, tokens.end(), t);
                TokenPenalty e{7, t};
                bool changes = false;
                for (const auto& [bt, bias] : p.logit_bias)
                    if (bt == t && bias != 0.0f) e.bias = bias, changes = true;
                if (in_all > 0 && p.repetition_penalty != 1.0f) e.repetition = p.repetition_penalty, changes = true;
                if (in_output > 0 && (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)) {
                    e.subtract = p.presence_penalty + p.frequency_penalty * static_cast<float>(in_output);
                    changes = true;
                }
                if (changes) want.push_back(e);
            }
            ASSERT_EQ(got.size(), want.size()) << "trial " << trial << " step " << step;
            const std::vector<TokenPenalty>& kept = counts.penalties(p, n_vocab);
            ASSERT_EQ(kept.size(), got.size()) << "trial " << trial << " step " << step;
            for (size_t i = 0; i < got.size(); ++i) {
                EXPECT_EQ(kept[i].row, 0);
                EXPECT_EQ(kept[i].token, got[i].token);
                EXPECT_EQ(kept[i].bias, got[i].bias);
                EXPECT_EQ(kept[i].repetition, got[i].repetition);
                EXPECT_EQ(kept[i].subtract, got[i].subtract) << "token " << got[i].token;
            }
            for (size_t i = 0; i < got.size(); ++i) {
                EXPECT_EQ(got[i].row, 7);
                EXPECT_EQ(got[i].token, want[i].token);
                EXPECT_EQ(got[i].bias, want[i].bias) << "token " << got[i].token;
                EXPECT_EQ(got[i].repetition, want[i].repetition);
                EXPECT_EQ(got[i].subtract, want[i].subtract) << "token " << got[i].token;
            }
            // The list applied to a row is the host sampler's apply_penalties, bit for bit.
            std::vector<float> row(n_vocab), direct;
            for (float& l : row) l = static_cast<float>(static_cast<int>(gen() % 2001) - 1000) / 97.0f;
            direct = row;
            std::vector<TokenPenalty> row0 = got;
            for (TokenPenalty& e : row0) e.row = 0;
            penalise_rows(row.data(), n_vocab, row0);
            apply_penalties(direct.data(), n_vocab, p, tokens, n_prompt);
            EXPECT_EQ(std::memcmp(row.data(), direct.data(), row.size() * sizeof(float)), 0) << "trial " << trial;
            const int n_new = 1 + static_cast<int>(gen() % 3);
            for (int k = 0; k < n_new; ++k) tokens.push_back(static_cast<int32_t>(gen() % 20));  // repeats
        }
        tokens.resize(static_cast<size_t>(n_prompt));  // shorter than what was counted: starts over
        counts.update(tokens, n_prompt);
        std::vector<TokenPenalty> got;
        counts.append_penalties(p, 0, n_vocab, &got);
        for (const TokenPenalty& e : got) EXPECT_EQ(e.subtract, 0.0f) << "token " << e.token;  // no output left
        EXPECT_EQ(counts.penalties(p, n_vocab).size(), got.size());
    }
}

TEST(Sampler, LogitBiasIsSortedWithTheLastBiasOfEachToken) {
    SamplingParams p;
    p.logit_bias = {{9, 1.0f}, {3, -2.0f}, {9, 4.0f}, {0, 0.5f}, {3, 7.0f}};
    normalise_logit_bias(&p);
    const std::vector<std::pair<int32_t, float>> want = {{0, 0.5f}, {3, 7.0f}, {9, 4.0f}};
    EXPECT_EQ(p.logit_bias, want);
    p.logit_bias = {{2, std::numeric_limits<float>::infinity()}};
    EXPECT_FALSE(validate_sampling_params(p).is_ok());
    p.logit_bias = {{-1, 1.0f}};
    EXPECT_FALSE(validate_sampling_params(p).is_ok());
}

// penalised() leaves a logit bit for bit alone under the neutral parameters, including -0, inf
// and NaN, and applies the definition otherwise.
TEST(Sampler, NeutralPenaltiesChangeNoBits) {
    const float inf = std::numeric_limits<float>::infinity();
    for (const float l : {0.0f, -0.0f, 1.5f, -2.25f, inf, -inf, 3e38f, -1e-40f}) {
        const float got = penalised(l, 0.0f, 1.0f, 0.0f);
        EXPECT_EQ(std::memcmp(&got, &l, sizeof l), 0) << l;
    }
    EXPECT_TRUE(std::isnan(penalised(std::numeric_limits<float>::quiet_NaN(), 1.0f, 1.3f, 0.5f)));
    EXPECT_EQ(penalised(3.0f, 0.0f, 2.0f, 0.25f), 1.25f);
    EXPECT_EQ(penalised(-3.0f, 0.0f, 2.0f, 0.25f), -6.25f);
    EXPECT_EQ(penalised(-3.0f, 5.0f, 2.0f, 0.25f), 0.75f);   // the bias first: 2 > 0 is divided
    EXPECT_EQ(penalised(1.0f, -100.0f, 2.0f, 0.0f), -198.0f);  // -99 is multiplied
}

// picks_error names what is wrong with a step's picks; well-formed picks pass.
TEST(Sampler, MalformedPicksAreRefused) {
    const auto error = [](const TokenPicks& p, bool logprobs = false) { return picks_error(p, 3, 10, logprobs); };
    EXPECT_EQ(error({}), "");
    EXPECT_EQ(error({{}, {{0, 1, 0.0f, 1.2f, 0.0f}, {0, 4}, {2, 0, -100.0f, 0.5f, 3.0f}}}), "");
    EXPECT_EQ(error({{{}, {0.8f, 0.0f, 1}, {}}, {{1, 9, 0.0f, 1.0f, -2.0f}}}), "");
    EXPECT_NE(error({{{0.8f, 0.0f, 1}}, {}}).find("3 logit rows"), std::string::npos);
    EXPECT_NE(error({{{}, {0.8f, 0.0f, 1}, {}}, {}}, true).find("logprob"), std::string::npos);
    EXPECT_NE(error({{}, {{3, 1}}}).find("outside"), std::string::npos);   // row
    EXPECT_NE(error({{}, {{0, 10}}}).find("outside"), std::string::npos);  // token
    EXPECT_NE(error({{}, {{0, -1}}}).find("outside"), std::string::npos);
    EXPECT_NE(error({{}, {{0, 2, 0.0f, 0.0f, 0.0f}}}).find("positive"), std::string::npos);
    EXPECT_NE(error({{}, {{0, 2}, {0, 2}}}).find("ordered"), std::string::npos);  // twice
    EXPECT_NE(error({{}, {{1, 2}, {0, 5}}}).find("ordered"), std::string::npos);
    const auto copies = [](std::vector<int32_t> rows) {
        TokenPicks p;
        p.copies = std::move(rows);
        return p;
    };
    EXPECT_EQ(error(copies({0, 2})), "");
    EXPECT_NE(error(copies({2, 1})).find("increasing"), std::string::npos);
    EXPECT_NE(error(copies({1, 1})).find("increasing"), std::string::npos);
    EXPECT_NE(error(copies({3})).find("increasing"), std::string::npos);
    EXPECT_NE(error(copies({-1})).find("increasing"), std::string::npos);
    const auto scores = [](std::vector<ScoreAsk> asks) {
        TokenPicks p;
        p.scores = std::move(asks);
        return p;
    };
    EXPECT_EQ(error(scores({{0, -1, 0}, {2, 9, kMaxTopLogprobs}})), "");
    EXPECT_NE(error(scores({{2, -1, 1}, {1, -1, 1}})).find("increasing"), std::string::npos);
    EXPECT_NE(error(scores({{3, -1, 1}})).find("increasing"), std::string::npos);
    EXPECT_NE(error(scores({{0, 10, 1}})).find("outside"), std::string::npos);  // token
    EXPECT_NE(error(scores({{0, -2, 1}})).find("outside"), std::string::npos);
    EXPECT_NE(error(scores({{0, -1, kMaxTopLogprobs + 1}})).find("alternatives"), std::string::npos);
    EXPECT_NE(error(scores({{0, -1, -1}})).find("alternatives"), std::string::npos);
}

// score_row (what a backend returns for TokenPicks::scores) against a reference written here: its
// alternatives are the row's ids sorted by (logit descending, id ascending) with their logits, its
// log Z the double log-sum-exp, and row_logprob's logprobs (the host sampler's token_logprob) are
// the logits less that log Z; never more alternatives than the row holds.
TEST(Sampler, RowScoresGiveTheTokenLogprobs) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> row(1000);
    for (float& v : row) v = std::round(normal(rng) * 4.0f) / 4.0f;  // many ties
    std::vector<int32_t> order(row.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    double z = 0;
    for (const float v : row) z += std::exp(static_cast<double>(v));
    const double log_z = std::log(z);
    for (const int32_t n_top : {0, 1, 7, kMaxTopLogprobs}) {
        const RowScore s = score_row(row.data(), 1000, 17, n_top);
        EXPECT_EQ(s.token, 17);
        EXPECT_EQ(s.logit, row[17]);
        EXPECT_NEAR(s.log_z, log_z, 1e-7);  // the terms below e^-4 of the max summed in float
        ASSERT_EQ(s.top.size(), static_cast<size_t>(n_top));
        const TokenLogprob got = row_logprob(s);
        EXPECT_EQ(got.token, 17);
        EXPECT_NEAR(got.logprob, row[17] - log_z, 1e-6);
        ASSERT_EQ(got.top.size(), s.top.size());
        for (size_t j = 0; j < s.top.size(); ++j) {
            EXPECT_EQ(s.top[j].first, order[j]) << "place " << j;
            EXPECT_EQ(s.top[j].second, row[order[j]]);
            EXPECT_EQ(got.top[j].first, order[j]);
            EXPECT_NEAR(got.top[j].second, row[order[j]] - log_z, 1e-6);
        }
    }
    EXPECT_EQ(score_row(row.data(), 5, 0, kMaxTopLogprobs).top.size(), 5u);
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

// The definitions of sampler.h written the plain way (every token sorted, every weight in double),
// as the reference for the sampler's fast paths.
std::vector<std::pair<int32_t, float>> reference_distribution(const std::vector<float>& l, const SamplingParams& p) {
    const int64_t n = static_cast<int64_t>(l.size());
    std::vector<int32_t> idx(l.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    if (p.temperature <= 0 || p.top_k == 1) return {{idx[0], 1.0f}};
    if (p.top_k > 0 && p.top_k < n) idx.resize(static_cast<size_t>(p.top_k));
    std::vector<double> w(idx.size());
    double sum = 0;
    for (size_t i = 0; i < idx.size(); ++i) sum += w[i] = std::exp((double(l[idx[i]]) - l[idx[0]]) / p.temperature);
    size_t keep = idx.size();
    if (p.top_p < 1.0f) {
        double mass = 0;
        for (size_t i = 0; i < keep; ++i)
            if ((mass += w[i] / sum) >= p.top_p) {
                keep = i + 1;
                break;
            }
    }
    if (p.min_p > 0.0f) {
        size_t m = 1;
        while (m < keep && w[m] >= p.min_p * w[0]) ++m;
        keep = m;
    }
    double kept = 0;
    for (size_t i = 0; i < keep; ++i) kept += w[i];
    std::vector<std::pair<int32_t, float>> out(keep);
    for (size_t i = 0; i < keep; ++i) out[i] = {idx[i], static_cast<float>(w[i] / kept)};
    return out;
}

struct Case {
    const char* name;
    float temperature, top_p;
    int32_t top_k;
    float min_p;
};

SamplingParams params_of(const Case& c) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_p = c.top_p;
    p.top_k = c.top_k;
    p.min_p = c.min_p;
    return p;
}

const Case kCases[] = {
    {"temperature 1", 1.0f, 1.0f, 0, 0.0f},        {"hot", 2.5f, 1.0f, 0, 0.0f},
    {"cold", 0.2f, 1.0f, 0, 0.0f},                 {"top_p 0.9", 0.7f, 0.9f, 0, 0.0f},
    {"top_p 0.999", 1.0f, 0.999f, 0, 0.0f},        {"top_p tiny", 1.0f, 1e-6f, 0, 0.0f},
    {"top_k 40", 0.8f, 1.0f, 40, 0.0f},            {"top_k 40 + top_p + min_p", 0.8f, 0.95f, 40, 0.05f},
    {"min_p 0.1", 1.0f, 1.0f, 0, 0.1f},            {"min_p 1", 1.0f, 1.0f, 0, 1.0f},
    {"top_p 0.5 + min_p 0.001", 1.3f, 0.5f, 0, 0.001f},
    {"top_k beyond the vocabulary", 1.0f, 1.0f, 1 << 30, 0.0f},
};

// Rows like a model's (a normal body, a few tokens far above it), a flat row, and rows with ties and
// -inf entries (a logit masked out).
std::vector<std::vector<float>> test_rows(int64_t n_vocab, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> body(-2.0f, 2.5f);
    std::uniform_int_distribution<int64_t> pick(0, n_vocab - 1);
    std::vector<std::vector<float>> rows;
    std::vector<float> r(static_cast<size_t>(n_vocab));
    for (float& x : r) x = body(gen);
    for (int i = 0; i < 30; ++i) r[pick(gen)] = 9.0f + body(gen);
    rows.push_back(r);
    for (float& x : r) x = 0.01f * body(gen);
    rows.push_back(r);
    for (float& x : r) x = std::round(body(gen));  // many equal logits
    for (int64_t i = 0; i < n_vocab / 20; ++i) r[pick(gen)] = -std::numeric_limits<float>::infinity();
    rows.push_back(r);
    return rows;
}

// The fast distribution is the reference's: the same tokens in the same order, the same
// probabilities up to float rounding.
TEST(Sampler, DistributionEqualsTheReferenceDefinition) {
    for (const int64_t n_vocab : {int64_t{7}, int64_t{5000}, int64_t{151936}}) {
        for (const auto& row : test_rows(n_vocab, 11 + n_vocab)) {
            for (const Case& c : kCases) {
                const auto want = reference_distribution(row, params_of(c));
                const auto got = sampling_distribution(row.data(), n_vocab, params_of(c));
                ASSERT_EQ(got.size(), want.size()) << c.name << ", vocabulary " << n_vocab;
                for (size_t i = 0; i < got.size(); ++i) {
                    ASSERT_EQ(got[i].first, want[i].first) << c.name << ", rank " << i;
                    ASSERT_NEAR(got[i].second, want[i].second, 1e-6 * want[i].second + 1e-12)
                        << c.name << ", rank " << i;
                }
            }
        }
    }
}

// sample_token's draw (which neither sorts nor normalises the row) picks what draw_token picks from
// the reference distribution with the same key, draw after draw.
TEST(Sampler, DrawEqualsTheRaceOverTheReferenceDistribution) {
    for (const int64_t n_vocab : {int64_t{7}, int64_t{5000}, int64_t{151936}}) {
        const int n_draws = n_vocab > 10000 ? 10 : 100;
        for (const auto& row : test_rows(n_vocab, 5 + n_vocab)) {
            for (const Case& c : kCases) {
                const auto dist = reference_distribution(row, params_of(c));
                std::mt19937_64 rng(17), keys(17);
                std::set<int32_t> seen;
                for (int i = 0; i < n_draws; ++i) {
                    std::vector<float> logits = row;
                    const int32_t got = sample_token(logits.data(), n_vocab, params_of(c), {}, 0, rng, nullptr);
                    ASSERT_EQ(got, draw_token(dist, keys())) << c.name << ", vocabulary " << n_vocab << ", draw " << i;
                    seen.insert(got);
                }
                if (dist.size() > 5 && dist[0].second < 0.5f) {
                    EXPECT_GT(seen.size(), 1u) << c.name;  // really drawn
                }
            }
        }
    }
}

TEST(Sampler, LogprobsEqualTheReferenceOnALargeRow) {
    const int64_t n_vocab = 151936;
    for (const auto& row : test_rows(n_vocab, 3)) {
        double max = -std::numeric_limits<double>::infinity(), sum = 0;
        for (const float x : row) max = std::max<double>(max, x);
        for (const float x : row) sum += std::exp(double(x) - max);
        const double log_z = max + std::log(sum);
        TokenLogprob lp;
        token_logprob(row.data(), n_vocab, 1234, 20, &lp);
        EXPECT_NEAR(lp.logprob, row[1234] - log_z, 1e-5);
        SamplingParams top20;
        top20.top_k = 20;
        const auto top = reference_distribution(row, top20);
        ASSERT_EQ(lp.top.size(), 20u);
        for (size_t i = 0; i < 20; ++i) {
            EXPECT_EQ(lp.top[i].first, top[i].first) << "rank " << i;
            EXPECT_NEAR(lp.top[i].second, row[top[i].first] - log_z, 1e-5) << "rank " << i;
        }
    }
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
