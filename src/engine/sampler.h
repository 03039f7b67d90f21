// Next-token sampling from one row of logits with a request's SamplingParams. Order of the
// transforms: penalties (repetition over prompt + output, presence and frequency over output) ->
// logprobs (log-softmax of the penalised logits) -> greedy when temperature == 0, otherwise
// temperature -> top_k -> top_p -> min_p -> a draw from the request's own RNG.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/draw.h"
#include "core/race.h"
#include "engine/engine.h"

namespace mvllm {

// Whether params change logits before the pick (a logit bias, a repetition, presence or frequency
// penalty).
bool has_penalties(const SamplingParams& params);
// Sorts params' logit_bias by token, keeping the last bias given for a token (what PenaltyCounts
// and apply_penalties expect; Engine::submit does it).
void normalise_logit_bias(SamplingParams* params);

// What a sequence's penalties read, brought up to date as it grows: each distinct token of its
// prompt and output, with how often it occurs in the output (0: in the prompt only).
class PenaltyCounts {
public:
    // Counts the tokens added since the last update (those before n_prompt as prompt); starts
    // over when tokens is shorter than what was counted.
    void update(const std::vector<int32_t>& tokens, int64_t n_prompt);
    // Appends row's penalties under params to out, by token (tokens outside [0, n_vocab) and
    // tokens that params leave unchanged are skipped): the logit bias (params.logit_bias
    // normalised), repetition over prompt + output, presence and frequency (subtract = presence +
    // frequency * count) over the output.
    void append_penalties(const SamplingParams& params, int32_t row, int64_t n_vocab,
                          std::vector<TokenPenalty>* out) const;
    // The same entries (row 0) kept from call to call: only the tokens update() counted since are
    // listed again (a decode step changes one entry of ~1,000), unless params or n_vocab differ
    // from the last call's or update() started over or took a prompt (then listed whole).
    const std::vector<TokenPenalty>& penalties(const SamplingParams& params, int64_t n_vocab);

private:
    std::vector<std::pair<int32_t, int32_t>> counts_;  // (token, count in the output), by token
    size_t n_counted_ = 0;
    // penalties()' list, what it was listed for, and the tokens counted since (kept valid while
    // update() only adds a few tokens).
    std::vector<TokenPenalty> list_;
    bool list_valid_ = false;
    int64_t list_vocab_ = 0;
    float list_repetition_ = 1.0f, list_presence_ = 0.0f, list_frequency_ = 0.0f;
    std::vector<std::pair<int32_t, float>> list_bias_;
    std::vector<int32_t> changed_;
};

// Applies the penalties in place: logits [n_vocab] f32 (the entries PenaltyCounts lists for
// tokens, computed from scratch, with core/draw.h's penalised(): the arithmetic of every backend).
void apply_penalties(float* logits, int64_t n_vocab, const SamplingParams& params,
                     const std::vector<int32_t>& tokens, int64_t n_prompt);

// The distribution sampling draws from after temperature, top_k, top_p and min_p: (token,
// probability) pairs by decreasing probability, summing to 1. Greedy gives one pair.
std::vector<std::pair<int32_t, float>> sampling_distribution(const float* logits, int64_t n_vocab,
                                                             const SamplingParams& params);

// The draw of a request's row keyed by key (core/draw.h): TokenDraw{} (the argmax) when greedy.
TokenDraw token_draw(const SamplingParams& params, uint64_t key);

// Samples the next token of a sequence whose ids are tokens (prompt first). logits [n_vocab] f32
// is modified (penalties). logprob receives the sampled token's logprob (and the top
// params.logprobs) when params.logprobs >= 0.
int32_t sample_token(float* logits, int64_t n_vocab, const SamplingParams& params,
                     const std::vector<int32_t>& tokens, int64_t n_prompt, std::mt19937_64& rng,
                     TokenLogprob* logprob);

// A uniform draw in [0, 1) from 53 random bits (reproducible across platforms for one seed).
double uniform01(std::mt19937_64& rng);
// A draw from dist (pairs summing to 1) by an exponential race keyed by key (one fresh random
// 64-bit value per draw): the same key gives the same token, and rounding noise in dist almost
// never changes it.
int32_t draw_token(const std::vector<std::pair<int32_t, float>>& dist, uint64_t key);
// The logprob of token under the (penalised) logits, and the n_top best ones.
void token_logprob(const float* logits, int64_t n_vocab, int32_t token, int32_t n_top, TokenLogprob* out);
// The same from a row's score (a backend's, TokenPicks::scores).
TokenLogprob row_logprob(const RowScore& score);

// Checks ranges (temperature >= 0, 0 < top_p <= 1, ...); an error message names the field.
Status validate_sampling_params(const SamplingParams& params);

}  // namespace mvllm
