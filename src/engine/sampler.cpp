#include "engine/sampler.h"

#include "core/draw.h"
#include "core/race.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace mvllm {

bool has_penalties(const SamplingParams& p) {
    return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
           !p.logit_bias.empty();
}

void normalise_logit_bias(SamplingParams* p) {
    auto& b = p->logit_bias;
    std::stable_sort(b.begin(), b.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    // The last of each token's entries (stable: in the order given).
    size_t n = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        if (i + 1 < b.size() && b[i + 1].first == b[i].first) continue;
        b[n++] = b[i];
    }
    b.resize(n);
}

void PenaltyCounts::update(const std::vector<int32_t>& tokens, int64_t n_prompt) {
    if (tokens.size() < n_counted_) counts_.clear(), n_counted_ = 0, list_valid_ = false;
    if (tokens.size() == n_counted_) return;
    if (tokens.size() - n_counted_ <= 4) {  // a decode step's token (or a few accepted drafts): in place
        for (size_t i = n_counted_; i < tokens.size(); ++i) {
            const int32_t t = tokens[i];
            auto it = std::lower_bound(counts_.begin(), counts_.end(), std::make_pair(t, INT32_MIN));
            if (it == counts_.end() || it->first != t) it = counts_.insert(it, {t, 0});
            it->second += static_cast<int64_t>(i) >= n_prompt ? 1 : 0;
            if (list_valid_) changed_.push_back(t);
        }
        n_counted_ = tokens.size();
        return;
    }
    list_valid_ = false;
    // Many new tokens (a prompt): sorted and counted, then merged into counts_.
    std::vector<std::pair<int32_t, int32_t>> added;
    added.reserve(tokens.size() - n_counted_);
    for (size_t i = n_counted_; i < tokens.size(); ++i)
        added.push_back({tokens[i], static_cast<int64_t>(i) >= n_prompt ? 1 : 0});
    std::sort(added.begin(), added.end());
    std::vector<std::pair<int32_t, int32_t>> merged;
    merged.reserve(counts_.size() + added.size());
    auto a = counts_.begin();
    for (size_t i = 0; i < added.size(); ++i) {
        for (; a != counts_.end() && a->first < added[i].first; ++a) merged.push_back(*a);
        if (a != counts_.end() && a->first == added[i].first) merged.push_back(*a++);
        else if (merged.empty() || merged.back().first != added[i].first) merged.push_back({added[i].first, 0});
        merged.back().second += added[i].second;
    }
    merged.insert(merged.end(), a, counts_.end());
    counts_ = std::move(merged);
    n_counted_ = tokens.size();
}

// Token t's penalty under p (bias: its logit bias; seen: it occurs in the context, count times in
// the output); false when p leaves it alone.
static bool penalty_of(const SamplingParams& p, int32_t row, int32_t t, float bias, bool seen, int32_t count,
                       TokenPenalty* e) {
    const bool repetition = seen && p.repetition_penalty != 1.0f;
    const bool by_count = count > 0 && (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f);
    if (bias == 0.0f && !repetition && !by_count) return false;
    *e = TokenPenalty{row, t, bias};
    if (repetition) e->repetition = p.repetition_penalty;
    if (by_count) e->subtract = p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    return true;
}

// counts_ merged with the logit bias (both by token).
void PenaltyCounts::append_penalties(const SamplingParams& p, int32_t row, int64_t n_vocab,
                                     std::vector<TokenPenalty>* out) const {
    TokenPenalty e;
    const auto add = [&](int32_t t, float bias, bool seen, int32_t count) {
        if (t >= 0 && t < n_vocab && penalty_of(p, row, t, bias, seen, count, &e)) out->push_back(e);
    };
    auto b = p.logit_bias.begin();
    const auto b_end = p.logit_bias.end();
    for (const auto& [t, c] : counts_) {
        for (; b != b_end && b->first < t; ++b) add(b->first, b->second, false, 0);
        const float bias = b != b_end && b->first == t ? (b++)->second : 0.0f;
        add(t, bias, true, c);
    }
    for (; b != b_end; ++b) add(b->first, b->second, false, 0);
}

const std::vector<TokenPenalty>& PenaltyCounts::penalties(const SamplingParams& p, int64_t n_vocab) {
    if (!list_valid_ || n_vocab != list_vocab_ || p.repetition_penalty != list_repetition_ ||
        p.presence_penalty != list_presence_ || p.frequency_penalty != list_frequency_ || p.logit_bias != list_bias_) {
        list_.clear();
        append_penalties(p, 0, n_vocab, &list_);
        list_valid_ = true;
        list_vocab_ = n_vocab;
        list_repetition_ = p.repetition_penalty, list_presence_ = p.presence_penalty;
        list_frequency_ = p.frequency_penalty, list_bias_ = p.logit_bias;
        changed_.clear();
        return list_;
    }
    // Each counted token's entry as append_penalties lists it (it is in counts_ now, so seen).
    for (const int32_t t : changed_) {
        if (t < 0 || t >= n_vocab) continue;
        const auto c = std::lower_bound(counts_.begin(), counts_.end(), std::make_pair(t, INT32_MIN));
        const auto b = std::lower_bound(p.logit_bias.begin(), p.logit_bias.end(), std::make_pair(t, -INFINITY));
        const float bias = b != p.logit_bias.end() && b->first == t ? b->second : 0.0f;
        const auto at = std::lower_bound(list_.begin(), list_.end(), t,
                                         [](const TokenPenalty& e, int32_t token) { return e.token < token; });
        const bool listed = at != list_.end() && at->token == t;
        TokenPenalty e;
        if (penalty_of(p, 0, t, bias, true, c->second, &e)) {
            if (listed) *at = e;
            else list_.insert(at, e);
        } else if (listed) {
            list_.erase(at);
        }
    }
    changed_.clear();
    return list_;
}

// The entries PenaltyCounts would list, from scratch in three passes (the bias list, a bit per
// vocabulary entry over the context, a map of the output's counts), without PenaltyCounts' sort.
// An entry applied as its bias, then its repetition, then its subtraction is the entry applied at
// once, bit for bit: x - 0 == x and (x > 0 ? x / 1 : x * 1) == x.
void apply_penalties(float* logits, int64_t n_vocab, const SamplingParams& params,
                     const std::vector<int32_t>& tokens, int64_t n_prompt) {
    for (const auto& [t, bias] : params.logit_bias)
        if (t >= 0 && t < n_vocab) logits[t] = penalised(logits[t], bias, 1.0f, 0.0f);
    if (params.repetition_penalty != 1.0f) {
        std::vector<bool> seen(static_cast<size_t>(n_vocab), false);
        for (const int32_t t : tokens)
            if (t >= 0 && t < n_vocab && !seen[t]) {
                seen[t] = true;
                logits[t] = penalised(logits[t], 0.0f, params.repetition_penalty, 0.0f);
            }
    }
    if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
        std::unordered_map<int32_t, int32_t> output_count;
        for (size_t i = static_cast<size_t>(std::max<int64_t>(n_prompt, 0)); i < tokens.size(); ++i) ++output_count[tokens[i]];
        TokenPenalty e;
        for (const auto& [t, c] : output_count)
            if (t >= 0 && t < n_vocab && penalty_of(params, 0, t, 0.0f, true, c, &e))
                logits[t] = penalised(logits[t], 0.0f, 1.0f, e.subtract);
    }
}

TokenLogprob row_logprob(const RowScore& s) {
    TokenLogprob out{s.token, static_cast<float>(s.logit - s.log_z), {}};
    out.top.reserve(s.top.size());
    for (const auto& [t, l] : s.top) out.top.push_back({t, static_cast<float>(l - s.log_z)});
    return out;
}

void token_logprob(const float* logits, int64_t n_vocab, int32_t token, int32_t n_top, TokenLogprob* out) {
    // sum_i exp(l_i - max) in double (core/draw.h's score_row), as Backend::argmax_rows computes it
    // for the greedy path, so that the float result rarely differs in its last bit.
    *out = row_logprob(score_row(logits, n_vocab, token, n_top));
}

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

int32_t draw_token(const std::vector<std::pair<int32_t, float>>& dist, uint64_t key) {
    // Exponential race (the Gumbel-max trick): token t gets its own Exp(1) variable e_t from
    // (key, t) and the draw is argmax p_t / e_t, which picks t with probability p_t exactly.
    // Unlike walking a cumulative sum, the choice only changes when the two best scores are
    // within rounding of each other, so float noise in the logits (another batch shape, another
    // kernel) almost never changes a seeded request's text, however large the vocabulary.
    Race race{key};
    for (const auto& [t, p] : dist) race.enter(t, p);
    return race.best < 0 ? dist.front().first : race.best;
}

std::vector<std::pair<int32_t, float>> sampling_distribution(const float* logits, int64_t n_vocab,
                                                             const SamplingParams& params) {
    const std::vector<std::pair<int32_t, double>> kept = kept_distribution(logits, n_vocab, token_draw(params, 0));
    double sum = 0;
    for (const auto& [t, w] : kept) sum += w;
    std::vector<std::pair<int32_t, float>> out(kept.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = {kept[i].first, static_cast<float>(kept[i].second / sum)};
    return out;
}

TokenDraw token_draw(const SamplingParams& p, uint64_t key) {
    if (p.temperature <= 0.0f || p.top_k == 1) return TokenDraw{};
    return TokenDraw{p.temperature, p.min_p, key, p.top_k, p.top_p};
}

int32_t sample_token(float* logits, int64_t n_vocab, const SamplingParams& params,
                     const std::vector<int32_t>& tokens, int64_t n_prompt, std::mt19937_64& rng,
                     TokenLogprob* logprob) {
    apply_penalties(logits, n_vocab, params, tokens, n_prompt);
    const bool greedy = params.temperature <= 0.0f || params.top_k == 1;
    const int32_t token = greedy ? row_argmax(logits, n_vocab) : draw_row(logits, n_vocab, token_draw(params, rng()));
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
    for (const auto& [t, bias] : p.logit_bias)
        if (t < 0 || !std::isfinite(bias)) return make_error("logit_bias needs token ids >= 0 and finite biases, got ", t, ": ", bias);
    if (p.max_tokens == 0 || p.max_tokens < -1) return make_error("max_tokens must be >= 1, got ", p.max_tokens);
    if (p.logprobs > kMaxTopLogprobs) return make_error("logprobs must be <= ", kMaxTopLogprobs, ", got ", p.logprobs);
    if (p.prompt_logprobs > kMaxTopLogprobs)
        return make_error("prompt_logprobs must be <= ", kMaxTopLogprobs, ", got ", p.prompt_logprobs);
    return Status::ok();
}

}  // namespace mvllm
