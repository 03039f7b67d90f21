#include "core/draw.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

namespace mvllm {

std::string picks_error(const TokenPicks& picks, int64_t n_rows, int64_t width, bool logprobs) {
    std::ostringstream why;
    if (!picks.draws.empty()) {
        if (static_cast<int64_t>(picks.draws.size()) != n_rows) {
            why << picks.draws.size() << " token draws for " << n_rows << " logit rows";
            return why.str();
        }
        for (const TokenDraw& d : picks.draws) {
            if (!(d.temperature >= 0.0f) || !(d.min_p >= 0.0f && d.min_p <= 1.0f) || d.top_k < 0 ||
                !(d.top_p > 0.0f && d.top_p <= 1.0f))
                return "a token draw needs temperature >= 0, min_p in [0, 1], top_k >= 0 and top_p in (0, 1]";
            if (d.temperature > 0.0f && logprobs) return "a drawn token has no greedy logprob";
        }
    }
    if (!picks.targets.empty()) {
        if (static_cast<int64_t>(picks.targets.size()) != n_rows) {
            why << picks.targets.size() << " target tokens for " << n_rows << " logit rows";
            return why.str();
        }
        if (!logprobs) return "target tokens need the rows' logprobs";
        for (const int32_t t : picks.targets)
            if (t < -1 || t >= width) {
                why << "target token " << t << " is outside the " << width << " logits";
                return why.str();
            }
    }
    for (size_t i = 0; i < picks.penalties.size(); ++i) {
        const TokenPenalty& p = picks.penalties[i];
        if (p.row < 0 || p.row >= n_rows || p.token < 0 || p.token >= width) {
            why << "a penalty of token " << p.token << " in row " << p.row << " is outside " << n_rows
                << " rows of " << width << " logits";
            return why.str();
        }
        if (!(p.repetition > 0.0f)) return "a penalty needs a positive repetition";
        const TokenPenalty* prev = i > 0 ? &picks.penalties[i - 1] : nullptr;
        if (prev && (prev->row > p.row || (prev->row == p.row && prev->token >= p.token)))
            return "penalties must be ordered by (row, token), each logit once";
    }
    for (size_t i = 0; i < picks.copies.size(); ++i) {
        const int32_t r = picks.copies[i];
        if (r < 0 || r >= n_rows || (i > 0 && picks.copies[i - 1] >= r)) {
            why << "copied row " << r << ": copies must be increasing rows of the " << n_rows;
            return why.str();
        }
    }
    for (size_t i = 0; i < picks.scores.size(); ++i) {
        const ScoreAsk& a = picks.scores[i];
        if (a.row < 0 || a.row >= n_rows || (i > 0 && picks.scores[i - 1].row >= a.row)) {
            why << "scored row " << a.row << ": scores must be increasing rows of the " << n_rows;
            return why.str();
        }
        if (a.token < -1 || a.token >= width || a.n_top < 0 || a.n_top > kMaxTopLogprobs) {
            why << "a score of token " << a.token << " with " << a.n_top << " alternatives is outside " << width
                << " logits and " << kMaxTopLogprobs << " alternatives";
            return why.str();
        }
    }
    return {};
}

RowScore score_row(const float* logits, int64_t n, int32_t token, int32_t n_top) {
    const float max = row_max(logits, n);
    double sum = 0;
    if (std::isfinite(max)) {
        const float cut = max - 4.0f;
        sum = exp_sum_below(logits, n, max, cut);
        for (int64_t i = 0; i < n; ++i)
            if (logits[i] >= cut) sum += std::exp(double(logits[i]) - max);
    } else {
        for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - max);
    }
    RowScore s;
    s.log_z = max + std::log(sum);
    s.token = token;
    s.logit = logits[token];
    const int64_t k = std::min<int64_t>(n_top, n);
    if (k <= 0) return s;
    for (const int32_t t : top_k_tokens(logits, n, k)) s.top.push_back({t, logits[t]});
    return s;
}

void penalise_rows(float* x, int64_t width, const std::vector<TokenPenalty>& penalties) {
    for (const TokenPenalty& p : penalties) {
        float& l = x[p.row * width + p.token];
        l = penalised(l, p.bias, p.repetition, p.subtract);
    }
}

// How the draw stays fast on a vocabulary of 150K tokens: nothing sorts or exponentiates the
// whole row in double. A row is scanned a few times with cheap float work (core/race.h: the max,
// float weights, threshold sums); only the few tokens that can matter (the head that top_k / top_p
// / min_p keep, the tokens that could still win the race) get the exact double arithmetic of the
// definitions in draw.h. Without top_k and top_p the draw is race_row.
namespace {

// Sorting order of the kept tokens: logit descending, then token id ascending.
struct ByLogit {
    const float* logits;
    bool operator()(int32_t a, int32_t b) const { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); }
};

// The indices of the tokens whose logit is >= floor, in ByLogit order.
std::vector<int32_t> tokens_at_least(const float* logits, int64_t n, float floor) {
    std::vector<int32_t> idx;
    for (int64_t i = 0; i < n; ++i)
        if (logits[i] >= floor) idx.push_back(static_cast<int32_t>(i));
    std::sort(idx.begin(), idx.end(), ByLogit{logits});
    return idx;
}

}  // namespace

// One pass that keeps a buffer of candidates at or above the k-th best logit seen so far, trimmed
// to k whenever it holds 4 k.
std::vector<int32_t> top_k_tokens(const float* logits, int64_t n, int64_t k) {
    const ByLogit by{logits};
    if (k >= n) return tokens_at_least(logits, n, -std::numeric_limits<float>::infinity());
    std::vector<int32_t> idx;
    idx.reserve(static_cast<size_t>(4 * k));
    float threshold = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) {
        if (!(logits[i] >= threshold)) continue;
        idx.push_back(static_cast<int32_t>(i));
        if (static_cast<int64_t>(idx.size()) == 4 * k) {
            std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), by);
            idx.resize(static_cast<size_t>(k));
            threshold = logits[idx.back()];
        }
    }
    if (static_cast<int64_t>(idx.size()) > k) {
        std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), by);
        idx.resize(static_cast<size_t>(k));
    }
    std::sort(idx.begin(), idx.end(), by);
    return idx;
}

namespace {

// The tokens a sampled draw keeps (top_k, top_p, min_p) in ByLogit order with their exact weights
// exp((l - max) / T) in double; empty when nothing is truncated (every token is kept). weights_sum
// is the normaliser of those weights: the sum over the tokens top_k keeps (all of them without
// top_k), before top_p and min_p cut the head.
struct Kept {
    std::vector<int32_t> tokens;
    std::vector<double> weights;
    double weights_sum = 0;
    bool over_cap = false;  // top_p's candidates outnumbered max_candidates: tokens left empty
};

Kept kept_tokens(const float* logits, int64_t n_vocab, const TokenDraw& params, float max,
                 std::vector<float>* scratch, size_t max_candidates = SIZE_MAX) {
    Kept k;
    const double inv_t = 1.0 / params.temperature;
    auto exact = [&](int32_t t) { return std::exp((static_cast<double>(logits[t]) - max) * inv_t); };
    const bool top_k = params.top_k > 0 && params.top_k < n_vocab;
    if (!top_k && params.top_p >= 1.0f && params.min_p <= 0.0f) return k;
    if (top_k) {
        k.tokens = top_k_tokens(logits, n_vocab, params.top_k);
        for (const int32_t t : k.tokens) k.weights.push_back(exact(t));
        for (const double w : k.weights) k.weights_sum += w;
    } else {
        // Candidates: at or above min_p's floor (p >= min_p p_max, i.e. w >= min_p, since the top
        // token's weight is 1), and, for top_p, enough of the head to hold top_p of the mass.
        float floor = -std::numeric_limits<float>::infinity();
        // Floors in logits sit 1e-3 (1 + |max|) below the exact one: the cuts below are exact.
        const double margin = 1e-3 * (1.0 + std::fabs(max));
        if (params.min_p > 0.0f) floor = static_cast<float>(max + params.temperature * std::log(params.min_p) - margin);
        if (params.top_p < 1.0f) {
            scratch->resize(static_cast<size_t>(n_vocab));
            float* w = scratch->data();
            k.weights_sum = row_weights(logits, n_vocab, max, static_cast<float>(inv_t), w);
            // The head's weight floor tau: lowered (x 1/4, then squared below 1e-4) until the tokens
            // above it hold top_p of the mass (with room for the float weights' error), or until
            // the min_p floor is the higher one.
            const double need = params.top_p * k.weights_sum * kWeightSlack;
            for (float tau = 0.5f;; tau *= tau < 1e-4f ? tau : 0.25f) {
                const double mass = sum_at_least(w, n_vocab, tau);
                const float head_floor = tau > 1e-30f ? static_cast<float>(max + params.temperature * std::log(tau) - margin)
                                                      : -std::numeric_limits<float>::infinity();
                if (mass >= need || head_floor <= floor || tau <= 1e-30f) {
                    floor = std::max(floor, head_floor);
                    break;
                }
            }
        }
        if (max_candidates < static_cast<size_t>(n_vocab) &&
            std::count_if(logits, logits + n_vocab, [&](float l) { return l >= floor; }) >
                static_cast<std::ptrdiff_t>(max_candidates)) {
            k.over_cap = true;
            return k;
        }
        k.tokens = tokens_at_least(logits, n_vocab, floor);
        for (const int32_t t : k.tokens) k.weights.push_back(exact(t));
        if (params.top_p < 1.0f) {
            // The normaliser again, from the candidates' exact weights and the float weights of the
            // rest only, so that its error is that of the tail (it decides where the head ends).
            k.weights_sum = sum_where_below(logits, scratch->data(), n_vocab, floor);
            for (const double w : k.weights) k.weights_sum += w;
        }
    }
    size_t n = k.tokens.size();
    if (params.top_p < 1.0f) {  // the smallest head whose mass reaches top_p
        double mass = 0;
        for (size_t i = 0; i < n; ++i) {
            mass += k.weights[i] / k.weights_sum;
            if (mass >= params.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (params.min_p > 0.0f) {
        const double floor = params.min_p * k.weights[0];
        size_t m = 1;
        while (m < n && k.weights[m] >= floor) ++m;
        n = m;
    }
    k.tokens.resize(n);
    k.weights.resize(n);
    return k;
}

// top_p without top_k, without sorting the head (which holds most of the vocabulary when the
// logits are flat): the tokens are bucketed by their distance below the max logit (4,096 buckets
// of T / 48 each; the last also takes everything further down), each bucket's float weights summed.
// The buckets before the one where the mass reaches top_p are wholly kept; that bucket and its two
// neighbours (room for the float sums' error) are sorted and walked with exact weights, as
// kept_tokens walks the whole head. The race then runs over the kept tokens, pruned as race_row's.
// Returns -1 where the walk finds no cut (the float mass and the exact one disagree about the
// bucket), for the caller to take the sorting path.
int32_t draw_nucleus(const float* logits, int64_t n, const TokenDraw& p, float max, uint64_t key) {
    constexpr int kBuckets = 4096;
    const double inv_t = 1.0 / p.temperature;
    const float scale = static_cast<float>(48.0 * inv_t);
    thread_local std::vector<float> w;
    thread_local std::vector<uint16_t> bucket;  // kBuckets: NaN, never kept
    w.resize(static_cast<size_t>(n));
    bucket.resize(static_cast<size_t>(n));
    const double total = row_weights(logits, n, max, static_cast<float>(inv_t), w.data());
    if (!std::isfinite(total)) return -1;  // NaN logits: the sorting path, which drops them
    double mass[kBuckets] = {};
    for (int64_t i = 0; i < n; ++i) {
        const float d = (max - logits[i]) * scale;  // >= 0, +inf for -inf logits, NaN for NaN
        const int b = d < kBuckets - 1 ? static_cast<int>(d) : d == d ? kBuckets - 1 : kBuckets;
        bucket[i] = static_cast<uint16_t>(b);
        if (b < kBuckets) mass[b] += w[i];
    }
    const double need = p.top_p * total;
    int crossing = 0;
    double before = 0;  // float mass of the buckets before `crossing`
    while (crossing < kBuckets - 1 && before + mass[crossing] < need) before += mass[crossing++];
    const int first_walked = std::max(0, crossing - 1), last_walked = std::min(kBuckets - 1, crossing + 1);
    double cumulative = 0;
    for (int b = 0; b < first_walked; ++b) cumulative += mass[b];
    thread_local std::vector<int32_t> sure, walked;
    sure.clear();
    walked.clear();
    for (int64_t i = 0; i < n; ++i) {
        const int b = bucket[i];
        if (b < first_walked) sure.push_back(static_cast<int32_t>(i));
        else if (b <= last_walked) walked.push_back(static_cast<int32_t>(i));
    }
    std::sort(walked.begin(), walked.end(), ByLogit{logits});
    auto exact = [&](int32_t t) { return std::exp((static_cast<double>(logits[t]) - max) * inv_t); };
    size_t cut = walked.size();
    for (size_t i = 0; i < walked.size(); ++i)
        if ((cumulative += exact(walked[i])) >= need) {
            cut = i + 1;
            break;
        }
    if (cut == walked.size() && cumulative < need && last_walked < kBuckets - 1) return -1;
    // The race over `sure` and walked[0, cut), min_p applied to the exact weight.
    const int32_t top = row_argmax(logits, n);
    Race race{key};
    race.enter(top, 1.0);
    auto consider = [&](int32_t t) {
        if (t != top) race.offer(t, race_uniform(key, t), w[t], p.min_p, exact);
    };
    for (const int32_t t : sure) consider(t);
    for (size_t i = 0; i < cut; ++i) consider(walked[i]);
    return race.best;
}

}  // namespace

int32_t draw_row(const float* logits, int64_t n, const TokenDraw& d) {
    if (d.temperature <= 0.0f || d.top_k == 1) return row_argmax(logits, n);
    if (!truncates(d, n)) return race_row(logits, n, d.temperature, d.min_p, d.key);
    const float max = row_max(logits, n);
    if (!std::isfinite(max)) return row_argmax(logits, n);
    // top_p: the head sorted when it is short (a trained model's row, mostly), bucketed when long.
    constexpr size_t kSortedHead = 16384;
    const bool top_k = d.top_k > 0 && d.top_k < n;
    thread_local std::vector<float> scratch;
    Kept k = kept_tokens(logits, n, d, max, &scratch, top_k ? SIZE_MAX : kSortedHead);
    if (k.over_cap) {
        if (const int32_t t = draw_nucleus(logits, n, d, max, d.key); t >= 0) return t;
        k = kept_tokens(logits, n, d, max, &scratch);
    }
    Race race{d.key};
    for (size_t i = 0; i < k.tokens.size(); ++i) race.enter(k.tokens[i], k.weights[i]);
    return race.best;
}

std::vector<std::pair<int32_t, double>> kept_distribution(const float* logits, int64_t n, const TokenDraw& d) {
    const float max = row_max(logits, n);
    if (d.temperature <= 0.0f || d.top_k == 1 || !std::isfinite(max)) return {{row_argmax(logits, n), 1.0}};
    thread_local std::vector<float> scratch;
    Kept k = kept_tokens(logits, n, d, max, &scratch);
    if (k.tokens.empty()) {  // nothing truncated: every token, in ByLogit order
        k.tokens = top_k_tokens(logits, n, n);
        const double inv_t = 1.0 / d.temperature;
        for (const int32_t t : k.tokens) k.weights.push_back(std::exp((static_cast<double>(logits[t]) - max) * inv_t));
    }
    std::vector<std::pair<int32_t, double>> out(k.tokens.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = {k.tokens[i], k.weights[i]};
    return out;
}

}  // namespace mvllm
