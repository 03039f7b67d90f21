// Speculative decoding without a model: the verification rule (greedy and rejection sampling) on
// synthetic logits, against the exact distributions it must reproduce, and the draft-length
// controller (policies and the cost-aware fallback) on synthetic timings.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "engine/draft_policy.h"
#include "engine/sampler.h"
#include "engine/verify.h"

namespace mvllm {
namespace {

SamplingParams sampling(float temperature, int top_k = 0, float top_p = 1.0f) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.top_p = top_p;
    return p;
}

// The chi-square critical value for df degrees of freedom at upper-tail probability 1e-6
// (Wilson-Hilferty: (1 - 2/(9df) + z sqrt(2/(9df)))^3 df, z = 4.753 for 1e-6). A correct rule
// fails a fixed-seed run with probability 1e-6; the same statistic against the draft's own
// distribution is asserted to exceed it (the test can fail).
double chi2_critical(int df) {
    const double a = 2.0 / (9.0 * df), z = 4.753;
    return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Pearson's statistic of counts against probabilities; bins expected below 5 are pooled.
double chi2(const std::map<int, int64_t>& counts, const std::map<int, double>& probs, int64_t n, int* df) {
    double stat = 0, pooled_expected = 0, pooled_observed = 0;
    int bins = 0;
    for (const auto& [key, p] : probs) {
        const double expected = p * n;
        const auto it = counts.find(key);
        const double observed = it == counts.end() ? 0 : double(it->second);
        if (expected < 5) {
            pooled_expected += expected;
            pooled_observed += observed;
            continue;
        }
        stat += (observed - expected) * (observed - expected) / expected;
        ++bins;
    }
    for (const auto& [key, c] : counts)
        if (!probs.count(key)) pooled_observed += double(c);  // outcomes of probability 0
    if (pooled_expected > 0 || pooled_observed > 0) {
        stat += pooled_expected > 0 ? (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected
                                    : 1e9;
        ++bins;
    }
    *df = bins - 1;
    return stat;
}

constexpr int64_t kVocab = 6;

// Position-dependent synthetic models: row t of the target (p_t) and of the draft (q_t), whatever
// the context, so that the exact law of two generated tokens is p_0(x) p_1(y).
const std::vector<std::vector<float>> kTarget = {{2.0f, 1.5f, 0.2f, -1.0f, 0.7f, -3.0f}, {0.1f, -0.5f, 1.8f, 1.2f, -2.0f, 0.4f}};
const std::vector<std::vector<float>> kDraft = {{0.5f, 2.2f, -0.3f, 0.9f, 0.0f, 1.0f}, {1.5f, 0.2f, -1.0f, 2.0f, 0.3f, -0.5f}};

std::vector<std::pair<int32_t, float>> dist_of(const std::vector<float>& logits, const SamplingParams& p) {
    return sampling_distribution(logits.data(), kVocab, p);
}

// Generates two tokens by speculative rounds of up to k drafts from the synthetic models.
std::vector<int32_t> generate_two(const SamplingParams& params, int k, std::mt19937_64& rng) {
    std::vector<int32_t> out;
    while (out.size() < 2) {
        DraftProposal draft;
        const int n_draft = k;  // may run past two tokens: the law of the first two is what counts
        std::vector<int32_t> context = out;
        for (int i = 0; i < n_draft; ++i) {
            std::vector<float> row = kDraft[std::min<size_t>(context.size(), 1)];
            TokenDistribution q;
            draft.tokens.push_back(propose_token(row.data(), kVocab, params, context, 0, rng, &q));
            draft.q.push_back(q);
            context.push_back(draft.tokens.back());
        }
        std::vector<float> rows;
        for (int i = 0; i <= n_draft; ++i) {
            const auto& r = kTarget[std::min<size_t>(out.size() + i, 1)];
            rows.insert(rows.end(), r.begin(), r.end());
        }
        const Verification v = verify_draft(rows.data(), kVocab, params, out, 0, draft, rng);
        EXPECT_EQ(v.tokens.size(), static_cast<size_t>(v.n_accepted) + 1);
        out.insert(out.end(), v.tokens.begin(), v.tokens.end());
    }
    out.resize(2);
    return out;
}

void expect_target_law(const SamplingParams& params, int k) {
    const int64_t n = 60000;
    std::mt19937_64 rng(12345 + k);
    std::map<int, int64_t> counts;
    for (int64_t i = 0; i < n; ++i) {
        const auto t = generate_two(params, k, rng);
        ++counts[t[0] * kVocab + t[1]];
    }
    std::map<int, double> target, draft;
    for (const auto& [x, px] : dist_of(kTarget[0], params))
        for (const auto& [y, py] : dist_of(kTarget[1], params)) target[x * kVocab + y] = double(px) * py;
    for (const auto& [x, px] : dist_of(kDraft[0], params))
        for (const auto& [y, py] : dist_of(kDraft[1], params)) draft[x * kVocab + y] = double(px) * py;
    int df = 0, df_draft = 0;
    const double stat = chi2(counts, target, n, &df);
    const double stat_draft = chi2(counts, draft, n, &df_draft);
    EXPECT_LT(stat, chi2_critical(df)) << "k=" << k << " df=" << df;
    EXPECT_GT(stat_draft, chi2_critical(std::max(df_draft, 1))) << "the draft's law must be told apart";
}

TEST(SpeculativeVerify, RejectionSamplingReproducesTheTargetDistribution) {
    for (int k : {1, 2, 3}) expect_target_law(sampling(1.0f), k);
}

TEST(SpeculativeVerify, RejectionSamplingWithTruncatedDistributions) {
    // top_k and top_p cut both p and q: drafts outside the target's support are always rejected.
    expect_target_law(sampling(0.7f, 3), 2);
    expect_target_law(sampling(1.3f, 0, 0.8f), 3);
}

TEST(SpeculativeVerify, ResidualIsThePositivePartOfPMinusQ) {
    const TokenDistribution p = {{0, 0.5f}, {1, 0.3f}, {2, 0.2f}};
    const TokenDistribution q = {{0, 0.2f}, {1, 0.6f}, {3, 0.2f}};
    const TokenDistribution r = residual_distribution(p, q);  // max(0, p - q) = {0: 0.3, 2: 0.2}
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].first, 0);
    EXPECT_NEAR(r[0].second, 0.6f, 1e-6);
    EXPECT_EQ(r[1].first, 2);
    EXPECT_NEAR(r[1].second, 0.4f, 1e-6);
}

TEST(SpeculativeVerify, GreedyKeepsTheAgreeingPrefixAndTheTargetsToken) {
    const SamplingParams greedy = sampling(0.0f);
    std::mt19937_64 rng(1);
    // Target argmax per row: 2, 4, 1, 5.
    std::vector<float> rows(4 * kVocab, 0.0f);
    const int argmax[4] = {2, 4, 1, 5};
    for (int r = 0; r < 4; ++r) rows[r * kVocab + argmax[r]] = 3.0f;
    DraftProposal all_agree;
    all_agree.tokens = {2, 4, 1};
    std::vector<float> copy = rows;
    Verification v = verify_draft(copy.data(), kVocab, greedy, {0}, 1, all_agree, rng);
    EXPECT_EQ(v.tokens, (std::vector<int32_t>{2, 4, 1, 5}));
    EXPECT_EQ(v.n_accepted, 3);
    DraftProposal second_wrong;
    second_wrong.tokens = {2, 3, 1};
    copy = rows;
    v = verify_draft(copy.data(), kVocab, greedy, {0}, 1, second_wrong, rng);
    EXPECT_EQ(v.tokens, (std::vector<int32_t>{2, 4}));
    EXPECT_EQ(v.n_accepted, 1);
}

TEST(SpeculativeVerify, PenaltiesSeeTheAcceptedDrafts) {
    // Repetition penalty 100: once token 2 is in the context, row 1 must not pick it again.
    SamplingParams p = sampling(0.0f);
    p.repetition_penalty = 100.0f;
    std::vector<float> rows(2 * kVocab, 0.0f);
    rows[2] = 3.0f;                                      // row 0 picks 2
    rows[kVocab + 2] = 3.0f, rows[kVocab + 4] = 2.0f;    // row 1: 2 unless penalised, then 4
    DraftProposal d;
    d.tokens = {2};
    std::mt19937_64 rng(1);
    const Verification v = verify_draft(rows.data(), kVocab, p, {0}, 1, d, rng);
    EXPECT_EQ(v.tokens, (std::vector<int32_t>{2, 4}));
}

TEST(SpeculativeVerify, NoDraftIsPlainSampling) {
    const SamplingParams p = sampling(0.9f, 4);
    for (uint64_t seed = 0; seed < 50; ++seed) {
        std::vector<float> a = kTarget[0], b = kTarget[0];
        std::mt19937_64 r1(seed), r2(seed);
        const Verification v = verify_draft(a.data(), kVocab, p, {1, 2}, 1, DraftProposal{}, r1);
        const int32_t t = sample_token(b.data(), kVocab, p, {1, 2}, 1, r2, nullptr);
        ASSERT_EQ(v.tokens, std::vector<int32_t>{t});
        ASSERT_EQ(r1(), r2()) << "the same random draws";
    }
}

SpeculativeOptions spec_options(DraftPolicy policy, int k, bool fallback) {
    static int fake_decoder_storage;  // any non-null pointer marks speculation as on
    SpeculativeOptions o;
    o.draft = reinterpret_cast<Decoder*>(&fake_decoder_storage);
    o.draft_tokens = k;
    o.min_draft_tokens = 1;
    o.policy = policy;
    o.fallback = fallback;
    return o;
}

TEST(DraftController, FixedPolicyKeepsK) {
    DraftController c(spec_options(DraftPolicy::Fixed, 5, false));
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(c.next_draft_tokens(), 5);
        c.observe(5, i % 3, 0.01);
    }
}

TEST(DraftController, AcceptanceRatePolicyMovesKWithinBounds) {
    DraftController c(spec_options(DraftPolicy::AcceptanceRate, 6, false));
    EXPECT_EQ(c.next_draft_tokens(), 6);
    for (int i = 0; i < 30; ++i) c.observe(c.next_draft_tokens(), 0, 0.01);  // nothing accepted
    EXPECT_EQ(c.next_draft_tokens(), 1);
    for (int i = 0; i < 30; ++i) c.observe(c.next_draft_tokens(), c.next_draft_tokens(), 0.01);  // all accepted
    EXPECT_EQ(c.next_draft_tokens(), 6);
}

TEST(DraftController, AcceptedLengthPolicyFollowsTheAverage) {
    DraftController c(spec_options(DraftPolicy::AcceptedLength, 8, false));
    EXPECT_EQ(c.next_draft_tokens(), 8);
    for (int i = 0; i < 40; ++i) c.observe(c.next_draft_tokens(), 2, 0.01);
    EXPECT_EQ(c.next_draft_tokens(), 3);  // round(2) + 1
    for (int i = 0; i < 40; ++i) c.observe(c.next_draft_tokens(), std::min(c.next_draft_tokens(), 7), 0.01);
    EXPECT_EQ(c.next_draft_tokens(), 8);
}

TEST(DraftController, FallsBackWhenSlowerThanPlainAndProbesAgain) {
    DraftController c(spec_options(DraftPolicy::Fixed, 4, true));
    // Plain probe: 10 ms per token.
    for (int i = 0; i < DraftController::kPlainProbeSteps; ++i) {
        EXPECT_EQ(c.next_draft_tokens(), 0);
        c.observe(0, 0, 0.010);
    }
    // Speculation at 2 tokens per 40 ms = 50 tok/s < 100 tok/s plain.
    int spec_steps = 0;
    while (c.next_draft_tokens() > 0 && spec_steps < 100) {
        c.observe(4, 1, 0.040);
        ++spec_steps;
    }
    EXPECT_EQ(spec_steps, DraftController::kMinSpecSamples);
    int plain_steps = 0;
    while (c.next_draft_tokens() == 0 && plain_steps < 1000) {
        c.observe(0, 0, 0.010);
        ++plain_steps;
    }
    EXPECT_EQ(plain_steps, DraftController::kInitialBackoff);
    // Still slow: the next back-off is twice as long.
    for (int i = 0; i < DraftController::kMinSpecSamples; ++i) c.observe(4, 1, 0.040);
    plain_steps = 0;
    while (c.next_draft_tokens() == 0 && plain_steps < 1000) {
        c.observe(0, 0, 0.010);
        ++plain_steps;
    }
    EXPECT_EQ(plain_steps, 2 * DraftController::kInitialBackoff);
    // Now fast: 5 tokens per 20 ms = 250 tok/s: it keeps drafting.
    for (int i = 0; i < 50; ++i) {
        EXPECT_EQ(c.next_draft_tokens(), 4) << i;
        c.observe(4, 4, 0.020);
    }
}

TEST(DraftController, UnmeasuredStepsNeverTriggerTheFallback) {
    DraftController c(spec_options(DraftPolicy::Fixed, 4, true));
    for (int i = 0; i < DraftController::kPlainProbeSteps; ++i) c.observe(0, 0, -1);  // no clean plain step
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(c.next_draft_tokens(), 4);
        c.observe(4, 0, 1.0);  // very slow, but nothing to compare with
    }
}

}  // namespace
}  // namespace mvllm
