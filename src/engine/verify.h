// Verification of draft tokens against the target model's logits (speculative decoding).
//
// The draft proposed k tokens d_1..d_k after a sequence's context; the target ran the last context
// token and d_1..d_k in one forward and returned k + 1 rows of logits, row i predicting the token
// after d_1..d_i. Both sides apply the request's SamplingParams the same way (penalties over the
// context including the drafts before the row, then temperature, top_k, top_p, min_p):
//   greedy:   accept d_{i+1} while it is the target's argmax of row i; the first disagreement is
//             replaced by the target's own token; when all k agree, row k adds one more token;
//   sampling: accept d_{i+1} with probability min(1, p(d)/q(d)) (p: target, q: draft, both the
//             distributions sampling draws from); on rejection draw from norm(max(0, p - q)) and
//             stop; when all k are accepted, draw one more token from row k's p. The tokens
//             returned are then distributed exactly as plain sampling from the target
//             (Leviathan et al., Chen et al., 2023).
// With k = 0 this is plain sampling of row 0 (sample_token), consuming the RNG the same way.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace mvllm {

using TokenDistribution = std::vector<std::pair<int32_t, float>>;  // (token, p) pairs summing to 1

struct DraftProposal {
    std::vector<int32_t> tokens;        // [k] d_1..d_k
    std::vector<TokenDistribution> q;   // [k] the draft's distribution each was drawn from (sampling)
    void clear() {
        tokens.clear();
        q.clear();
    }
};

struct Verification {
    std::vector<int32_t> tokens;         // the accepted drafts, then one token of the target
    std::vector<TokenLogprob> logprobs;  // [tokens] when params.logprobs >= 0
    int32_t n_accepted = 0;              // drafts accepted (tokens.size() - 1)
};

// target_logits: [k + 1][n_vocab] f32, modified (penalties). context: the sequence's tokens (prompt
// first, n_prompt of them), to which the drafts are appended while verifying.
Verification verify_draft(float* target_logits, int64_t n_vocab, const SamplingParams& params,
                          std::vector<int32_t> context, int64_t n_prompt, const DraftProposal& draft,
                          std::mt19937_64& rng);

// The draft side: penalties over context, then the draft token (argmax when greedy, else a draw
// from the sampling distribution, which is returned in *q). draft_logits [n_vocab] is modified.
int32_t propose_token(float* draft_logits, int64_t n_vocab, const SamplingParams& params,
                      const std::vector<int32_t>& context, int64_t n_prompt, std::mt19937_64& rng,
                      TokenDistribution* q);

// The residual distribution norm(max(0, p - q)) a rejection draws from; p itself when p <= q
// everywhere (only possible up to rounding, since both sum to 1).
TokenDistribution residual_distribution(const TokenDistribution& p, const TokenDistribution& q);

bool is_greedy(const SamplingParams& params);

}  // namespace mvllm
