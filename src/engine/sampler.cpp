#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace mvllm {

void apply_penalties(float* logits, int64_t n_vocab, const SamplingParams& params,
                     const std::vector<int32_t>& tokens, int64_t n_prompt) {
    if (params.repetition_penalty != 1.0f) {
        std::vector<bool> seen(static_cast<size_t>(n_vocab), false);
        for (int32_t t : tokens)
            if (t >= 0 && t < n_vocab && !seen[t]) {
                seen[t] = true;
                logits[t] = logits[t] > 0 ? logits[t] / params.repetition_penalty
                                          : logits[t] * params.repetition_penalty;
            }
    }
    if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
        std::unordered_map<int32_t, int32_t> counts;
        for (size_t i = static_cast<size_t>(n_prompt); i < tokens.size(); ++i) ++counts[tokens[i]];
        for (const auto& [t, c] : counts)
            if (t >= 0 && t < n_vocab) logits[t] -= params.presence_penalty + params.frequency_penalty * c;
    }
}

namespace {

int32_t argmax_row(const float* logits, int64_t n_vocab) {
    return static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
}

}  // namespace

void token_logprob(const float* logits, int64_t n_vocab, int32_t token, int32_t n_top, TokenLogprob* out) {
    const float max = *std::max_element(logits, logits + n_vocab);
    double sum = 0;
    for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - max);
    const double log_z = max + std::log(sum);
    out->token = token;
    out->logprob = static_cast<float>(logits[token] - log_z);
    out->top.clear();
    const int64_t k = std::min<int64_t>(n_top, n_vocab);
    if (k <= 0) return;
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int64_t i = 0; i < k; ++i) out->top.push_back({idx[i], static_cast<float>(logits[idx[i]] - log_z)});
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

namespace {

// SplitMix64's finaliser: a counter-based generator, one independent 64-bit value per input.
uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace

int32_t draw_token(const std::vector<std::pair<int32_t, float>>& dist, uint64_t key) {
    // Exponential race (the Gumbel-max trick): token t gets its own Exp(1) variable e_t from
    // (key, t) and the draw is argmax p_t / e_t, which picks t with probability p_t exactly.
    // Unlike walking a cumulative sum, the choice only changes when the two best scores are
    // within rounding of each other, so float noise in the logits (another batch shape, another
    // kernel) almost never changes a seeded request's text, however large the vocabulary.
    int32_t best = dist.front().first;
    double best_score = -1;
    for (const auto& [t, p] : dist) {
        const double u = (static_cast<double>(mix64(key ^ mix64(static_cast<uint64_t>(t))) >> 11) + 0.5) * 0x1.0p-53;
        const double score = p / -std::log(u);
        if (score > best_score) {
            best_score = score;
            best = t;
        }
    }
    return best;
}

std::vector<std::pair<int32_t, float>> sampling_distribution(const float* logits, int64_t n_vocab,
                                                             const SamplingParams& params) {
    if (params.temperature <= 0.0f || params.top_k == 1) return {{argmax_row(logits, n_vocab), 1.0f}};
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    int64_t n_keep = n_vocab;
    if (params.top_k > 0 && params.top_k < n_vocab) {
        n_keep = params.top_k;
        std::nth_element(idx.begin(), idx.begin() + n_keep - 1, idx.end(), by_logit);
        idx.resize(static_cast<size_t>(n_keep));
    }
    std::sort(idx.begin(), idx.end(), by_logit);
    // Softmax at the temperature over the kept tokens, in double for the cumulative sums.
    std::vector<double> p(idx.size());
    const double inv_t = 1.0 / params.temperature, top = logits[idx[0]];
    double sum = 0;
    for (size_t i = 0; i < idx.size(); ++i) sum += p[i] = std::exp((logits[idx[i]] - top) * inv_t);
    for (double& x : p) x /= sum;
    size_t n = idx.size();
    if (params.top_p < 1.0f) {  // the smallest head whose mass reaches top_p
        double mass = 0;
        for (size_t i = 0; i < n; ++i) {
            mass += p[i];
            if (mass >= params.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (params.min_p > 0.0f) {
        const double floor = params.min_p * p[0];
        size_t m = 1;
        while (m < n && p[m] >= floor) ++m;
        n = m;
    }
    double kept = 0;
    for (size_t i = 0; i < n; ++i) kept += p[i];
    std::vector<std::pair<int32_t, float>> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = {idx[i], static_cast<float>(p[i] / kept)};
    return out;
}

int32_t sample_token(float* logits, int64_t n_vocab, const SamplingParams& params,
                     const std::vector<int32_t>& tokens, int64_t n_prompt, std::mt19937_64& rng,
                     TokenLogprob* logprob) {
    apply_penalties(logits, n_vocab, params, tokens, n_prompt);
    int32_t token;
    if (params.temperature <= 0.0f || params.top_k == 1) {
        token = argmax_row(logits, n_vocab);
    } else {
        token = draw_token(sampling_distribution(logits, n_vocab, params), rng());
    }
    if (logprob != nullptr && params.logprobs >= 0) token_logprob(logits, n_vocab, token, params.logprobs, logprob);
    return token;
}

Status validate_sampling_params(const SamplingParams& p) {
    if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
        return make_error("temperature must be >= 0, got ", p.temperature);
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return make_error("top_p must be in (0, 1], got ", p.top_p);
    if (p.top_k < 0) return make_error("top_k must be >= 0, got ", p.top_k);
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return make_error("min_p must be in [0, 1], got ", p.min_p);
    if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
        return make_error("repetition_penalty must be > 0, got ", p.repetition_penalty);
    if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
        return make_error("presence_penalty and frequency_penalty must be finite");
    if (p.max_tokens == 0 || p.max_tokens < -1) return make_error("max_tokens must be >= 1, got ", p.max_tokens);
    if (p.logprobs > 20) return make_error("logprobs must be <= 20, got ", p.logprobs);
    return Status::ok();
}

}  // namespace mvllm
