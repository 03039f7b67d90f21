// The draw of a sampled token with truncation, shared by the engine's sampler and the backends
// that pick tokens themselves. Definitions, in this order, over one row of logits l with max m:
//   top_k: keep the k first tokens by (logit descending, token id ascending); 0 or >= n: all;
//   top_p: of those, keep the shortest head in that order whose mass reaches top_p of theirs,
//          each token weighing w_t = exp((l_t - m) / T);
//   min_p: of those, keep the tokens with w_t >= min_p (the top token weighs 1);
// then the race (core/race.h) among the kept tokens. Temperature 0 or top_k 1 is the argmax.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/race.h"

namespace mvllm {

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
