#include "engine/verify.h"

#include <algorithm>
#include <unordered_map>

#include "engine/sampler.h"

namespace mvllm {

bool is_greedy(const SamplingParams& p) { return p.temperature <= 0.0f || p.top_k == 1; }

namespace {

float probability_of(const TokenDistribution& dist, int32_t token) {
    for (const auto& [t, p] : dist)
        if (t == token) return p;
    return 0.0f;
}

}  // namespace

TokenDistribution residual_distribution(const TokenDistribution& p, const TokenDistribution& q) {
    std::unordered_map<int32_t, float> q_of;
    q_of.reserve(q.size());
    for (const auto& [t, pr] : q) q_of[t] = pr;
    TokenDistribution r;
    double sum = 0;
    for (const auto& [t, pr] : p) {
        auto it = q_of.find(t);
        const double d = double(pr) - (it == q_of.end() ? 0.0 : double(it->second));
        if (d > 0) {
            r.push_back({t, static_cast<float>(d)});
            sum += d;
        }
    }
    if (r.empty() || !(sum > 0)) return p;
    for (auto& e : r) e.second = static_cast<float>(e.second / sum);
    return r;
}

int32_t propose_token(float* logits, int64_t n_vocab, const SamplingParams& params, const std::vector<int32_t>& context,
                      int64_t n_prompt, std::mt19937_64& rng, TokenDistribution* q) {
    apply_penalties(logits, n_vocab, params, context, n_prompt);
    *q = sampling_distribution(logits, n_vocab, params);
    if (is_greedy(params)) return q->front().first;
    return draw_token(*q, rng());
}

Verification verify_draft(float* logits, int64_t n_vocab, const SamplingParams& params, std::vector<int32_t> context,
                          int64_t n_prompt, const DraftProposal& draft, std::mt19937_64& rng) {
    Verification v;
    const bool greedy = is_greedy(params);
    const bool want_logprobs = params.logprobs >= 0;
    auto emit = [&](const float* row, int32_t token) {
        v.tokens.push_back(token);
        if (want_logprobs) {
            v.logprobs.emplace_back();
            token_logprob(row, n_vocab, token, params.logprobs, &v.logprobs.back());
        }
    };
    const size_t k = draft.tokens.size();
    for (size_t i = 0; i < k; ++i) {
        float* row = logits + i * n_vocab;
        const int32_t d = draft.tokens[i];
        if (greedy) {
            const int32_t t = sample_token(row, n_vocab, params, context, n_prompt, rng, nullptr);
            emit(row, t);
            if (t != d) return v;
        } else {
            apply_penalties(row, n_vocab, params, context, n_prompt);
            const TokenDistribution p = sampling_distribution(row, n_vocab, params);
            const double p_d = probability_of(p, d), q_d = probability_of(draft.q[i], d);
            // Accept with probability min(1, p/q): u < p/q, written without the division.
            if (!(uniform01(rng) * q_d < p_d)) {
                emit(row, draw_token(residual_distribution(p, draft.q[i]), rng()));
                return v;
            }
            emit(row, d);
        }
        context.push_back(d);
        ++v.n_accepted;
    }
    // Every draft accepted (or none proposed): the target's own next token from row k.
    float* row = logits + k * n_vocab;
    const int32_t t = sample_token(row, n_vocab, params, context, n_prompt, rng, nullptr);
    emit(row, t);
    return v;
}

}  // namespace mvllm
