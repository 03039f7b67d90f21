// One request inside the engine: its tokens (prompt then output), how many of them have KV in the
// cache, its block table, and the per-request state of sampling, text streaming and statistics.
// Owned by the engine; the scheduler reorders pointers to it.
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/draft_policy.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/stop_strings.h"
#include "engine/verify.h"
#include "kv/block_manager.h"

namespace mvllm {

using EngineClock = std::chrono::steady_clock;

struct Sequence {
    RequestId id = 0;
    uint64_t arrival = 0;          // submission order (fcfs, tie-breaks)
    std::vector<int32_t> tokens;   // [n_prompt + n_output] ids
    int64_t n_prompt = 0;
    int64_t n_computed = 0;        // leading tokens whose KV is in the cache
    int64_t max_tokens = 0;        // resolved output limit
    BlockTable blocks;
    SamplingParams params;
    bool scheduled = false;        // scratch flag of the scheduler during one schedule()

    // speculative decoding (engine/speculative.h): the draft model's KV lives in its own cache
    // under the same block table and is valid for tokens [0, n_draft_computed)
    int32_t n_lookahead = 0;       // draft tokens the next decode may verify (scheduler reserves slots)
    int64_t n_draft_computed = 0;
    DraftProposal draft;           // this step's proposal
    DraftController draft_control;
    Verification verified;         // this step's new tokens (accepted drafts + one)

    // sampling
    std::mt19937_64 rng;
    std::vector<TokenLogprob> prompt_logprobs;  // [k]: prompt token k + 1's (params.prompt_logprobs)
    PenaltyCounts penalty_counts;  // kept up to date only while steps pass penalties to the backend

    // streaming
    EventCallback on_event;
    std::unique_ptr<TextStream> text;
    StopStringMatcher stop_matcher;

    // statistics
    EngineClock::time_point t_arrival, t_first_scheduled, t_first_token;
    bool was_scheduled = false;
    RequestStats stats;

    int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
    int64_t n_output() const { return n_tokens() - n_prompt; }
    // Tokens to run before the next token can be sampled (1 for a decode).
    int64_t n_uncomputed() const { return n_tokens() - n_computed; }
    // Whether prompt positions still need their logits for params.prompt_logprobs.
    bool wants_prompt_rows() const {
        return params.prompt_logprobs >= 0 && static_cast<int64_t>(prompt_logprobs.size()) + 1 < n_prompt;
    }
};

}  // namespace mvllm
