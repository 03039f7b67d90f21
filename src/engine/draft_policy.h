// The per-sequence draft length of speculative decoding and its cost-aware fallback (host-only,
// no model: unit-tested with synthetic timings).
//
// Policies (SpeculativeOptions::policy), within [min_draft_tokens, draft_tokens]:
//   fixed            K = draft_tokens;
//   acceptance-rate  K starts at draft_tokens; after each verification the moving average of
//                    accepted / drafted moves K up by one above kRaiseRate, down by one below
//                    kLowerRate;
//   accepted-length  K = round(moving average of accepted drafts per verification) + 1.
//
// Fallback (SpeculativeOptions::fallback): the controller compares the sequence's measured token
// rate while speculating, (accepted + 1) / (draft + target seconds of the step), with its rate
// decoding plainly, 1 / (target seconds of a plain step). A sequence measures kPlainProbeSteps
// plain steps first; once kMinSpecSamples speculative steps show a lower rate than plain decoding,
// it decodes plainly for a back-off period (kInitialBackoff steps, doubling on every consecutive
// failure up to kMaxBackoff) and then probes speculation again. Steps that include other work
// (prefill chunks, a draft catching up on many tokens) are not measured; without a plain
// measurement a sequence keeps speculating.
#pragma once

#include <cstdint>

#include "engine/engine.h"

namespace mvllm {

class DraftController {
public:
    static constexpr double kRaiseRate = 0.75, kLowerRate = 0.4, kEmaWeight = 0.3;
    static constexpr int32_t kPlainProbeSteps = 2, kMinSpecSamples = 3, kInitialBackoff = 16, kMaxBackoff = 256;

    DraftController() = default;
    explicit DraftController(const SpeculativeOptions& options);

    // Draft tokens to propose at the next decode step; 0: decode plainly.
    int32_t next_draft_tokens() const;
    // After a step in which the sequence decoded: `drafted` tokens verified (0 for a plain step),
    // `accepted` of them kept, and the step's wall seconds (draft + target) when it was a clean
    // measurement, < 0 otherwise.
    void observe(int32_t drafted, int32_t accepted, double seconds);

    bool falling_back() const { return backoff_left_ > 0 || plain_probe_left_ > 0; }
    int32_t current_k() const { return k_; }
    double acceptance_rate() const { return acceptance_ema_; }
    double spec_tokens_per_second() const { return spec_seconds_ > 0 ? spec_tokens_ / spec_seconds_ : 0; }
    double plain_tokens_per_second() const { return plain_seconds_ > 0 ? 1.0 / plain_seconds_ : 0; }

private:
    void adapt_length(int32_t drafted, int32_t accepted);
    void judge_cost();

    SpeculativeOptions options_;
    int32_t k_ = 0;                  // the policy's current draft length
    double acceptance_ema_ = 1.0;    // accepted / drafted
    double accepted_len_ema_ = 0.0;  // accepted per verification
    // cost model
    int32_t plain_probe_left_ = 0;   // plain steps still to measure before speculating
    int32_t backoff_left_ = 0;       // plain steps left in the current back-off
    int32_t backoff_ = kInitialBackoff;
    double plain_seconds_ = 0;       // moving average of a plain step's seconds (0: unknown)
    double spec_tokens_ = 0, spec_seconds_ = 0;  // moving averages per speculative step
    int32_t spec_samples_ = 0;       // speculative steps measured since the last (re)start
};

}  // namespace mvllm
