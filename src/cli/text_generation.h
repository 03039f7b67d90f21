// Text generation through the engine for the CLI: the sampling flags, a prompt (ids, text, or a
// conversation rendered with the model's chat template), and one streamed request.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/options.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace mvllm::cli {

struct SamplingFlags {
    float temperature = -1;  // < 0: greedy for --prompt-ids, 0.8 for text
    float top_p = 1.0f, min_p = 0.0f, repeat_penalty = 1.0f, presence_penalty = 0, frequency_penalty = 0;
    int top_k = 0;
    int64_t seed = -1;
    std::vector<std::string> stop;
    std::vector<std::string> logit_bias;  // TOKEN=BIAS
    bool ignore_eos = false;
};
void add_sampling_flags(CLI::App* cmd, SamplingFlags* f);
// --repeat-penalty, --presence-penalty, --frequency-penalty (part of add_sampling_flags).
void add_penalty_flags(CLI::App* cmd, float* repeat, float* presence, float* frequency);
SamplingParams to_sampling_params(const SamplingFlags& f, bool greedy_default, int n_predict);

// The prompt ids of a conversation rendered with the model's chat template (ChatML when none).
Result<std::vector<int32_t>> encode_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages);

struct GenerationResult {
    std::vector<int32_t> ids;
    std::string text;
    RequestStats stats;
    FinishReason reason = FinishReason::Stop;
};

// Runs one request to the end on a fresh engine over rt's decoder; on_text/on_ids stream it.
Result<GenerationResult> run_request(Engine& engine, Request request,
                                     const std::function<void(const EngineEvent&)>& on_token);
// An engine sized for a single conversation of up to max_tokens tokens.
Result<std::unique_ptr<Engine>> make_cli_engine(Runtime& rt, const RunOptions& o, int64_t max_tokens);

std::string stats_line(const RequestStats& s);

}  // namespace mvllm::cli
