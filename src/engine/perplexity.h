// The perplexity of a token sequence as llama.cpp's perplexity tool measures it: the sequence cut
// into windows of ctx tokens, each run as a fresh context, scoring the tokens of each window's
// second half (each given at least ctx / 2 tokens before it); PPL = exp(mean negative
// log-likelihood). The windows are engine requests with prompt_logprobs, so they batch and chunk
// like any other requests.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace mvllm {

struct PerplexityOptions {
    int64_t ctx = 512;        // tokens per window (>= 4)
    int32_t bos = -1;         // >= 0: each window's first token replaced by it (a model that wants BOS)
    int64_t max_windows = 0;  // 0: every whole window of the sequence
};

struct PerplexityResult {
    int64_t n_windows = 0;
    int64_t n_scored = 0;     // tokens scored
    double mean_nll = 0;      // nats per token
    double ppl = 0;
    double ppl_error = 0;     // ppl x the standard error of mean_nll
};

// Errors when tokens hold no whole window or the engine fails a window. progress (optional) is
// called after each window with (windows done, windows in all).
Result<PerplexityResult> perplexity(Engine& engine, const std::vector<int32_t>& tokens, const PerplexityOptions& options,
                                    const std::function<void(int64_t, int64_t)>& progress = {});

// The windows' scored negative log-likelihoods summed up (shared with tests that score windows
// another way): mean, ppl and its error from the per-token values.
PerplexityResult summarise_nll(const std::vector<double>& nll, int64_t n_windows);

}  // namespace mvllm
