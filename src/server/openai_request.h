// OpenAI request bodies -> engine requests. Pure: JSON text in, a validated request or an
// OpenAI-style error out (no tokenizer, no engine). Unknown fields are ignored; a field of the
// wrong type or out of range is an ApiError naming it.
//
//   POST /v1/completions       {model, prompt, max_tokens, temperature, ..., logprobs: int, echo}
//   POST /v1/chat/completions  {model, messages, max_tokens | max_completion_tokens, ...,
//                               logprobs: bool, top_logprobs: int}
//   prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...]
//   messages: [{role: system|user|assistant|developer, content: "text" | [{type: "text", text}]}]
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/draw.h"
#include "engine/engine.h"

namespace mvllm::server {

// {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // the offending field ("" when none)
    std::string code;   // "" -> null
};

ApiError invalid_field(const std::string& param, const std::string& message);

// One prompt of a completions request: token ids, or text to encode.
struct PromptInput {
    bool is_text = false;
    std::string text;
    std::vector<int32_t> ids;
};

// Fields shared by both endpoints.
struct GenerationParams {
    std::string model;  // "" when absent
    SamplingParams sampling;
    int32_t n = 1;                 // choices per prompt
    bool stream = false;
    bool include_usage = false;    // stream_options.include_usage
    bool echo = false;             // completions: the prompt precedes the output (text and logprobs)
    std::string user;
};

struct CompletionRequest {
    GenerationParams params;
    std::vector<PromptInput> prompts;  // one choice group per prompt
};

struct ChatRequest {
    GenerationParams params;
    // Normalized: [{role, content: string}] (text parts joined with "\n").
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
};

// Defaults that differ per endpoint: completions default to 16 tokens like OpenAI's legacy API,
// chat to "until the context is full" (-1).
inline constexpr int32_t kDefaultCompletionMaxTokens = 16;
inline constexpr int32_t kMaxChoices = 16;
inline constexpr int32_t kMaxLogprobs = kMaxTopLogprobs;  // what a backend scores (core/draw.h)

std::optional<ApiError> parse_completion_request(const std::string& body, CompletionRequest* out);
std::optional<ApiError> parse_chat_request(const std::string& body, ChatRequest* out);

// POST /tokenize {prompt | messages, add_special_tokens} and POST /detokenize {tokens}.
struct TokenizeRequest {
    bool is_chat = false;
    std::string prompt;
    nlohmann::ordered_json messages;
    bool add_special_tokens = true;
};
std::optional<ApiError> parse_tokenize_request(const std::string& body, TokenizeRequest* out);
std::optional<ApiError> parse_detokenize_request(const std::string& body, std::vector<int32_t>* tokens);

// "Bearer <key>" against the configured key, in time independent of where they differ.
bool bearer_matches(const std::string& authorization_header, const std::string& api_key);
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace mvllm::server
