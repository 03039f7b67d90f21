// The draw of a sampled token with truncation, shared by the engine's sampler and the backends
// that pick tokens themselves. Definitions, in this order, over one row of logits l with max m:
//   top_k: keep the k first tokens by (logit descending, token id ascending); 0 or >= n: all;
//   top_p: of those, keep the shortest head in that order whose mass reaches top_p of theirs,
//          each token weighing w_t = exp((l_t - m) / T);
//   min_p: of those, keep the tokens with w_t >= min_p (the top token weighs 1);
// then the race (core/race.h) among the kept tokens. Temperature 0 or top_k 1 is the argmax.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/race.h"

namespace mvllm {

// A change of one token's logit in one row before its token is picked (the engine's logit bias,
// then its repetition, presence and frequency penalties, engine/sampler.h): with b = l + bias,
// l' = (b > 0 ? b / repetition : b * repetition) - subtract. bias 0, repetition 1 and subtract 0
// change nothing, bit for bit.
struct TokenPenalty {
    int32_t row = 0;
    int32_t token = 0;
    float bias = 0.0f;
    float repetition = 1.0f;
    float subtract = 0.0f;
};

// The penalised logit, rounded as the host computes it on every backend (the CUDA build uses fast
// math, so the device spells out its IEEE operations: no FMA, no approximate division). A zero
// bias is not added (-0 + 0 would be +0).
MVLLM_HOST_DEVICE inline float penalised(float l, float bias, float repetition, float subtract) {
#if defined(__CUDA_ARCH__)
    const float b = bias != 0.0f ? __fadd_rn(l, bias) : l;
    return __fsub_rn(b > 0.0f ? __fdiv_rn(b, repetition) : __fmul_rn(b, repetition), subtract);
#else
    const float b = bias != 0.0f ? l + bias : l;
    return (b > 0.0f ? b / repetition : b * repetition) - subtract;
#endif
}

// The most alternatives a scored row lists (OpenAI's top_logprobs limit).
constexpr int32_t kMaxTopLogprobs = 20;

// A row whose logprobs a backend scores (TokenPicks::scores): its token (-1: the token the backend
// picks for the row) and how many of its first tokens beside it.
struct ScoreAsk {
    int32_t row = 0;
    int32_t token = -1;
    int32_t n_top = 0;  // 0..kMaxTopLogprobs
};

// How the logit rows of a step become tokens on a backend (Backend::argmax_rows): first the
// penalties change their rows' logits, then each row gives its argmax, or the token draws[r]
// draws (draw_row) when its temperature is above 0.
struct TokenPicks {
    std::vector<TokenDraw> draws = {};         // empty (every row greedy) or one per row
    std::vector<TokenPenalty> penalties = {};  // (row, token) strictly increasing: each logit once
    // Empty, or one per row: a token whose log-softmax the row also returns (-1: none), beside its
    // argmax's (a prompt position scoring the next prompt token). Greedy rows with logprobs only.
    std::vector<int32_t> targets = {};
    // Rows (increasing) whose logits, after the penalties, also come back to the host: the rows a
    // caller scores there (top logprobs, a drawn token's logprob) while the backend picks the token.
    std::vector<int32_t> copies = {};
    // Rows (increasing) the backend scores where their logits are, after the penalties, instead of
    // copying them back (Backend::scores_rows()): one RowScore each (below).
    std::vector<ScoreAsk> scores = {};
    bool empty() const {
        return draws.empty() && penalties.empty() && targets.empty() && copies.empty() && scores.empty();
    }
};

// What a row's logprobs need from its logits l, so that only this leaves the device: log sum_i
// exp(l_i), the scored token with its logit, and the first n_top tokens by (logit descending, id
// ascending) with theirs. A logprob is then float(logit - log_z).
struct RowScore {
    double log_z = 0.0;
    int32_t token = 0;
    float logit = 0.0f;
    std::vector<std::pair<int32_t, float>> top;  // (id, logit)
};

// The host's RowScore of row [n] (log_z in double: exactly for the terms within 4 of the max, to
// 1-2 ulp for the others).
RowScore score_row(const float* logits, int64_t n, int32_t token, int32_t n_top);

// Why picks cannot serve n_rows rows of width logits (with greedy logprobs when logprobs is
// set), or an empty string: draws or targets of the wrong count or out of range, a drawn row with a
// logprob, targets without logprobs, penalties, copies or scores out of order or out of range, a
// penalty with a repetition that is not positive, a score of more than kMaxTopLogprobs tokens.
std::string picks_error(const TokenPicks& picks, int64_t n_rows, int64_t width, bool logprobs);

// Applies penalties to x [n_rows][width] (rows and tokens in range).
void penalise_rows(float* x, int64_t width, const std::vector<TokenPenalty>& penalties);

// Whether top_k or top_p cut the row (min_p alone does not: race_row applies it).
inline bool truncates(const TokenDraw& d, int64_t n) {
    return (d.top_k > 0 && d.top_k < n) || d.top_p < 1.0f;
}

// The token d draws from row [n] (argmax, race_row, or the race over the kept head).
int32_t draw_row(const float* logits, int64_t n, const TokenDraw& d);

// The tokens d keeps with their weights w_t (not normalised), in (logit descending, id ascending)
// order; the argmax alone (weight 1) when temperature is 0, top_k is 1 or the max is not finite.
std::vector<std::pair<int32_t, double>> kept_distribution(const float* logits, int64_t n, const TokenDraw& d);

// The k first tokens by (logit descending, id ascending), in that order (all n when k >= n).
std::vector<int32_t> top_k_tokens(const float* logits, int64_t n, int64_t k);

}  // namespace mvllm
