// Which rows of an engine step the backend picks (Backend::argmax_rows), and what comes back
// beside the tokens: the rules of Engine::Impl::run_models, sample and build_batch in one place.
//
// A step whose sampled rows have no drafts, and no penalties where the backend cannot apply them,
// lets the backend pick the tokens: the argmax of greedy rows, draw_row's token of sampled ones
// (core/draw.h: top_k, top_p, min_p), after the penalties. What a row wants scored beside its token
// is scored on the device where it can be (a greedy row's own logprob; a prompt row's target where
// the backend scores_targets(), prompt_logprobs up to 1, in a step without draws), else the row's
// logits come back to the host alone (TokenPicks::copies: top logprobs, a drawn token's logprob),
// up to EngineOptions::max_copied_logits_bytes a step; a step that needs more copies every row to
// the host sampler.
#pragma once

#include <cstdint>
#include <functional>

#include "backend/backend.h"
#include "core/draw.h"
#include "engine/scheduler.h"

namespace mvllm {

// The prompt positions of a scheduled chunk whose logits give prompt logprobs still missing
// (SamplingParams::prompt_logprobs): [first, first + n), which ends where the chunk does or, in the
// prompt's last chunk, at its last position (whose logits sample the first token). So the rows are
// a suffix of the chunk, with the sampling row after them.
struct PromptRows {
    int64_t first = 0, n = 0;
};
PromptRows prompt_rows(const ScheduledSequence& s);

// Which rows of a backend-picked step are scored apart from the picks: from their copied logits on
// the host, or by the backend (TokenPicks::scores).
struct HostScored {
    bool drawn = false;    // some row is drawn: no device logprobs in the step
    bool targets = false;  // prompt rows' targets scored by the backend
    bool prompt_row(const SamplingParams& p) const { return !(targets && p.prompt_logprobs <= 1); }
    bool sampled_row(const SamplingParams& p) const { return p.logprobs > 0 || (p.logprobs == 0 && drawn); }
};
HostScored host_scored(const SchedulerOutput& plan, const Backend& backend);

// Whether the backend picks the step's tokens (the rules above).
bool backend_picks_tokens(const SchedulerOutput& plan, const Backend& backend, int64_t n_vocab,
                          int64_t max_copied_bytes);

// fn(begin, end) over [0, n), on whatever threads the caller has (RowRunner).
using RowRange = std::function<void(int64_t begin, int64_t end)>;
using RowRunner = std::function<void(int64_t n, const RowRange& fn)>;

// The backend's picks for a backend-picked step, row by row: a prompt row's target (the prompt
// token it predicts) or its copy; one value of each drawing request's generator per token, as
// sample_token takes it; the penalties of a sampling row from its sequence's counts, brought up to
// date (listed through run_rows); the score (or the copy) of a sampling row whose logprobs the
// device's argmax does not give. Rows past the sampled ones (n_logit_rows) are padding: argmax. Returns whether the device
// gives greedy logprobs in the step.
bool build_picks(const SchedulerOutput& plan, const Backend& backend, int64_t n_vocab, size_t n_logit_rows,
                 const RowRunner& run_rows, TokenPicks* picks);

}  // namespace mvllm
