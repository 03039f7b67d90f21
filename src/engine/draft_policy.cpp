#include "engine/draft_policy.h"

#include <algorithm>
#include <cmath>

namespace mvllm {

bool parse_draft_policy(const std::string& name, DraftPolicy* out) {
    if (name == "fixed") *out = DraftPolicy::Fixed;
    else if (name == "acceptance-rate") *out = DraftPolicy::AcceptanceRate;
    else if (name == "accepted-length") *out = DraftPolicy::AcceptedLength;
    else return false;
    return true;
}

const char* draft_policy_name(DraftPolicy policy) {
    switch (policy) {
        case DraftPolicy::Fixed: return "fixed";
        case DraftPolicy::AcceptanceRate: return "acceptance-rate";
        case DraftPolicy::AcceptedLength: return "accepted-length";
    }
    return "?";
}

DraftController::DraftController(const SpeculativeOptions& options) : options_(options) {
    k_ = options.draft_tokens;
    accepted_len_ema_ = std::max(0, options.draft_tokens - 1);
    plain_probe_left_ = options.fallback ? kPlainProbeSteps : 0;
}

int32_t DraftController::next_draft_tokens() const {
    if (options_.draft == nullptr || falling_back()) return 0;
    return k_;
}

void DraftController::observe(int32_t drafted, int32_t accepted, double seconds) {
    auto ema = [](double* avg, double x, bool first) { *avg = first ? x : *avg + kEmaWeight * (x - *avg); };
    if (drafted == 0) {  // a plain step
        if (seconds > 0) ema(&plain_seconds_, seconds, plain_seconds_ <= 0);
        if (plain_probe_left_ > 0) --plain_probe_left_;
        else if (backoff_left_ > 0) --backoff_left_;
        return;
    }
    adapt_length(drafted, accepted);
    if (seconds <= 0) return;
    ema(&spec_tokens_, accepted + 1, spec_samples_ == 0);
    ema(&spec_seconds_, seconds, spec_samples_ == 0);
    ++spec_samples_;
    judge_cost();
}

void DraftController::adapt_length(int32_t drafted, int32_t accepted) {
    acceptance_ema_ += kEmaWeight * (double(accepted) / drafted - acceptance_ema_);
    accepted_len_ema_ += kEmaWeight * (accepted - accepted_len_ema_);
    const int32_t lo = std::min(options_.min_draft_tokens, options_.draft_tokens), hi = options_.draft_tokens;
    switch (options_.policy) {
        case DraftPolicy::Fixed: k_ = hi; break;
        case DraftPolicy::AcceptanceRate:
            if (acceptance_ema_ > kRaiseRate) k_ = std::min(hi, k_ + 1);
            else if (acceptance_ema_ < kLowerRate) k_ = std::max(lo, k_ - 1);
            break;
        case DraftPolicy::AcceptedLength:
            k_ = std::clamp(static_cast<int32_t>(std::lround(accepted_len_ema_)) + 1, lo, hi);
            break;
    }
}

void DraftController::judge_cost() {
    if (!options_.fallback || plain_seconds_ <= 0 || spec_samples_ < kMinSpecSamples) return;
    if (spec_tokens_per_second() >= plain_tokens_per_second()) {
        backoff_ = kInitialBackoff;  // speculation pays: the next failure backs off briefly again
        return;
    }
    backoff_left_ = backoff_;
    backoff_ = std::min(kMaxBackoff, backoff_ * 2);
    spec_samples_ = 0;  // the probe after the back-off measures afresh
}

}  // namespace mvllm
