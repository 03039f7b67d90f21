#include "server/metrics.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace mvllm::server {
namespace {

std::string number(double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.9g", v);
    return buf;
}

void gauge(std::ostringstream& out, const char* name, const char* help, double value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << number(value) << "\n";
}

std::vector<double> latency_bounds() {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value, int64_t count) {
    const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
    counts_[bucket] += count;
    sum_ += value * count;
    count_ += count;
}

std::string Histogram::render(const std::string& name) const {
    std::ostringstream out;
    int64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += counts_[i];
        out << name << "_bucket{le=\"" << number(bounds_[i]) << "\"} " << cumulative << "\n";
    }
    out << name << "_bucket{le=\"+Inf\"} " << count_ << "\n";
    out << name << "_sum " << number(sum_) << "\n" << name << "_count " << count_ << "\n";
    return out.str();
}

ServerMetrics::ServerMetrics()
    : ttft_(latency_bounds()), inter_token_(latency_bounds()), e2e_(latency_bounds()),
      accepted_length_({0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32}) {}

void ServerMetrics::observe_speculation(const RequestStats& st) {
    std::lock_guard<std::mutex> lock(mutex_);
    n_draft_tokens_ += st.n_draft_tokens;
    n_accepted_tokens_ += st.n_draft_accepted;
    n_verifications_ += st.n_spec_steps;
    n_fallback_steps_ += st.n_fallback_steps;
    for (size_t len = 0; len < st.accepted_lengths.size(); ++len)
        if (st.accepted_lengths[len] > 0) accepted_length_.observe(double(len), st.accepted_lengths[len]);
}

void ServerMetrics::observe_ttft(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    ttft_.observe(seconds);
}

void ServerMetrics::observe_inter_token(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    inter_token_.observe(seconds);
}

void ServerMetrics::observe_finish(double e2e_seconds, int64_t n_prompt, int64_t n_output, FinishReason reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    e2e_.observe(e2e_seconds);
    n_prompt_tokens_ += n_prompt;
    n_generation_tokens_ += n_output;
    ++n_finished_[static_cast<int>(reason)];
}

void ServerMetrics::count_rejected(int status) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [s, n] : n_rejected_)
        if (s == status) {
            ++n;
            return;
        }
    n_rejected_.emplace_back(status, 1);
}

std::string ServerMetrics::render(const EngineCounters& c) const {
    std::ostringstream out;
    gauge(out, "mvllm:num_requests_running", "Requests in the running batch.", double(c.n_running));
    gauge(out, "mvllm:num_requests_waiting", "Requests waiting to be scheduled.", double(c.n_waiting));
    gauge(out, "mvllm:kv_blocks_total", "KV cache blocks in the pool.", double(c.n_total_blocks));
    gauge(out, "mvllm:kv_blocks_used", "KV cache blocks held by requests.", double(c.n_total_blocks - c.n_free_blocks));
    gauge(out, "mvllm:kv_cache_usage_perc", "Fraction of KV cache blocks held by requests.",
          c.n_total_blocks ? double(c.n_total_blocks - c.n_free_blocks) / double(c.n_total_blocks) : 0.0);
    gauge(out, "mvllm:prefix_cache_hit_rate", "Prefix cache hits over queried blocks.",
          c.prefix_query_blocks ? double(c.prefix_hit_blocks) / double(c.prefix_query_blocks) : 0.0);
    out << "# HELP mvllm:num_preemptions_total Preempted (recomputed) requests.\n"
        << "# TYPE mvllm:num_preemptions_total counter\nmvllm:num_preemptions_total " << c.n_preemptions << "\n";
    out << "# HELP mvllm:decode_padding_rows_total Throw-away rows that padded decode steps to a recorded batch size.\n"
        << "# TYPE mvllm:decode_padding_rows_total counter\nmvllm:decode_padding_rows_total " << c.n_padding_rows << "\n";
    std::lock_guard<std::mutex> lock(mutex_);
    out << "# HELP mvllm:prompt_tokens_total Prompt tokens of finished requests.\n"
        << "# TYPE mvllm:prompt_tokens_total counter\nmvllm:prompt_tokens_total " << n_prompt_tokens_ << "\n";
    out << "# HELP mvllm:generation_tokens_total Generated tokens of finished requests.\n"
        << "# TYPE mvllm:generation_tokens_total counter\nmvllm:generation_tokens_total " << n_generation_tokens_ << "\n";
    out << "# HELP mvllm:request_success_total Finished engine requests by finish reason.\n"
        << "# TYPE mvllm:request_success_total counter\n";
    for (FinishReason r : {FinishReason::Stop, FinishReason::Length, FinishReason::Abort, FinishReason::Error})
        out << "mvllm:request_success_total{finished_reason=\"" << finish_reason_name(r) << "\"} "
            << n_finished_[static_cast<int>(r)] << "\n";
    out << "# HELP mvllm:request_rejected_total Requests answered with an error status before the engine.\n"
        << "# TYPE mvllm:request_rejected_total counter\n";
    for (const auto& [status, n] : n_rejected_)
        out << "mvllm:request_rejected_total{status=\"" << status << "\"} " << n << "\n";
    auto counter = [&out](const char* name, const char* help, int64_t value) {
        out << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << " " << value << "\n";
    };
    counter("mvllm:spec_decode_num_draft_tokens_total", "Draft tokens verified (finished requests).", n_draft_tokens_);
    counter("mvllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted (finished requests).", n_accepted_tokens_);
    counter("mvllm:spec_decode_num_verifications_total", "Verification steps with drafts (finished requests).",
            n_verifications_);
    counter("mvllm:spec_decode_num_fallback_steps_total",
            "Decode steps without drafts while speculation was on (finished requests).", n_fallback_steps_);
    out << "# HELP mvllm:spec_decode_accepted_length Draft tokens accepted per verification.\n"
        << "# TYPE mvllm:spec_decode_accepted_length histogram\n" << accepted_length_.render("mvllm:spec_decode_accepted_length");
    out << "# HELP mvllm:time_to_first_token_seconds Arrival to first token.\n"
        << "# TYPE mvllm:time_to_first_token_seconds histogram\n"
        << ttft_.render("mvllm:time_to_first_token_seconds");
    out << "# HELP mvllm:inter_token_latency_seconds Time between streamed tokens of a request.\n"
        << "# TYPE mvllm:inter_token_latency_seconds histogram\n"
        << inter_token_.render("mvllm:inter_token_latency_seconds");
    out << "# HELP mvllm:e2e_request_latency_seconds Arrival to finish.\n"
        << "# TYPE mvllm:e2e_request_latency_seconds histogram\n"
        << e2e_.render("mvllm:e2e_request_latency_seconds");
    return out.str();
}

}  // namespace mvllm::server
