// Server metrics in the Prometheus text format (version 0.0.4): gauges read from the engine's
// counters at scrape time, counters and latency histograms recorded as requests stream.
//
//   mvllm:num_requests_running / _waiting          gauges
//   mvllm:kv_blocks_used / _total, mvllm:kv_cache_usage_perc, mvllm:prefix_cache_hit_rate
//   mvllm:time_to_first_token_seconds              histogram
//   mvllm:inter_token_latency_seconds              histogram
//   mvllm:e2e_request_latency_seconds              histogram
//   mvllm:prompt_tokens_total, mvllm:generation_tokens_total, mvllm:request_success_total{finished_reason}
//   speculative decoding, over finished requests: mvllm:spec_decode_num_draft_tokens_total,
//   mvllm:spec_decode_num_accepted_tokens_total, mvllm:spec_decode_num_verifications_total,
//   mvllm:spec_decode_num_fallback_steps_total, mvllm:spec_decode_accepted_length (histogram of
//   drafts accepted per verification)
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mvllm::server {

// A cumulative histogram over fixed upper bounds (le), plus +Inf, sum and count.
class Histogram {
public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double value, int64_t count = 1);
    // Lines "<name>_bucket{le=...} n", "<name>_sum", "<name>_count".
    std::string render(const std::string& name) const;
    int64_t count() const { return count_; }

private:
    std::vector<double> bounds_;
    std::vector<int64_t> counts_;  // [bounds + 1] per bucket (not cumulative)
    double sum_ = 0;
    int64_t count_ = 0;
};

class ServerMetrics {
public:
    ServerMetrics();
    void observe_ttft(double seconds);
    void observe_inter_token(double seconds);
    // A finished engine request (one choice): its e2e latency, tokens and reason.
    void observe_finish(double e2e_seconds, int64_t n_prompt, int64_t n_output, FinishReason reason);
    void count_rejected(int status);  // 4xx/5xx answered before reaching the engine
    void observe_speculation(const RequestStats& stats);  // a finished request's draft statistics
    std::string render(const EngineCounters& engine) const;

private:
    mutable std::mutex mutex_;
    Histogram ttft_, inter_token_, e2e_, accepted_length_;
    int64_t n_draft_tokens_ = 0, n_accepted_tokens_ = 0, n_verifications_ = 0, n_fallback_steps_ = 0;
    int64_t n_prompt_tokens_ = 0, n_generation_tokens_ = 0;
    int64_t n_finished_[4] = {0, 0, 0, 0};  // by FinishReason
    std::vector<std::pair<int, int64_t>> n_rejected_;  // (status, count)
};

}  // namespace mvllm::server
