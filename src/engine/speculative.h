// Speculative decoding with a draft model (SpeculativeOptions in include/mvllm/engine.h).
//
// The Speculator owns the draft's KV cache, made with the target pool's block count and size, so
// that a sequence's one block table addresses both caches: blocks are allocated, shared by prefix
// and freed once, for both models. Per sequence the draft's KV is valid for tokens
// [0, n_draft_computed); the draft catches up lazily on tokens it has not seen (the prompt at the
// first proposal, a reused prefix, tokens decoded while falling back, the target's last token) in
// the first draft forward of a proposal. Stale draft KV can only lower acceptance, never change
// the output: every emitted token comes from the target's verification.
//
// One engine step with speculation:
//   plan()     per running sequence, n_lookahead = its DraftController's K (0: decode plainly),
//              capped so that no draft runs past max_tokens;
//   schedule   reserves the draft slots (ScheduledSequence::n_draft) when budget and blocks allow;
//   propose()  K batched draft forwards over every speculating sequence (the first feeds each
//              sequence's unseen tokens, the next ones the previous draft token); each row gives a
//              draft token by the request's own SamplingParams (propose_token);
//   forward    the target runs each sequence's last token and its drafts in the one flat batch,
//              with logits for every drafted position and one more;
//   verify     verify_draft (engine/verify.h): accepted drafts + one target token. The KV of
//              rejected drafts, in both caches, lies beyond n_computed / n_draft_computed: it is
//              never read, the next tokens overwrite it, and the prefix cache never publishes it
//              (only blocks whose tokens are known and computed are);
//   observe()  each sequence's DraftController sees drafted / accepted and the step's seconds.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "model/decoder.h"
#include "model/model.h"

namespace mvllm {

// The draft must share the target's vocabulary: the same size and, when both models carry a
// tokenizer, the same token at every id. The error says what differs.
Status check_draft_vocabulary(const Model& target, const Model& draft);

class Speculator {
public:
    // target_cache: the geometry of the target's KV pool (block count and size, dtype).
    static Result<std::unique_ptr<Speculator>> create(const SpeculativeOptions& options, const Decoder& target,
                                                      const KvCacheConfig& target_cache);

    const SpeculativeOptions& options() const { return options_; }
    // Sets n_lookahead of the running sequences before the scheduler runs.
    void plan(const std::deque<Sequence*>& running) const;
    // Clears every scheduled sequence's proposal, then drafts s.n_draft tokens for each decode
    // that got draft slots.
    Status propose(const SchedulerOutput& plan);
    // After verification: per-request statistics and the controllers' observations. step_seconds:
    // draft + target time of the step.
    void observe(const SchedulerOutput& plan, double step_seconds);
    double last_propose_seconds() const { return last_propose_seconds_; }
    std::string report() const;  // one line for the start-up log

private:
    Speculator(const SpeculativeOptions& options, std::unique_ptr<KvCache> cache)
        : options_(options), cache_(std::move(cache)) {}

    SpeculativeOptions options_;
    std::unique_ptr<KvCache> cache_;  // the draft's KV, [target blocks] of the draft's geometry
    std::vector<float> logits_;       // [n_rows][n_vocab] f32 of one draft forward
    double last_propose_seconds_ = 0;
    int64_t max_catch_up_ = 0;        // most unseen tokens one sequence fed in the last proposal
};

}  // namespace mvllm
