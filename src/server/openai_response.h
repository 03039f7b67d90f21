// OpenAI response bodies and server-sent events, built from what the engine streamed. Pure
// functions over plain structs, so each shape is unit-tested without a network.
//
//   completion:       {id, object: "text_completion", created, model, choices: [{index, text,
//                      logprobs: null | {tokens, token_logprobs, top_logprobs, text_offset},
//                      finish_reason}], usage: {prompt_tokens, completion_tokens, total_tokens}}
//   chat.completion:  {..., choices: [{index, message: {role, content}, logprobs: null |
//                      {content: [{token, logprob, bytes, top_logprobs: [...]}]}, finish_reason}]}
//   streaming:        "data: <chunk json>\n\n" ... "data: [DONE]\n\n"; chunks carry choices[].text
//                     (completions) or choices[].delta (chat); the usage chunk has choices: [].
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/openai_request.h"

namespace mvllm::server {

using json = nlohmann::ordered_json;

// Token id -> its text for logprobs ("token_id:N" when the model has no tokenizer).
using TokenText = std::function<std::string(int32_t)>;

struct ResponseMeta {
    std::string id;      // cmpl-... / chatcmpl-...
    int64_t created = 0; // unix seconds
    std::string model;
};

// One choice, or the delta of one choice in a streaming chunk.
struct ChoiceOutput {
    int32_t index = 0;
    std::string text;
    std::vector<TokenLogprob> logprobs;  // empty unless requested
    bool has_logprobs = false;
    const char* finish_reason = nullptr; // nullptr -> null
};

struct Usage {
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
};

json error_body(const ApiError& error);
json usage_json(const Usage& usage);
// "stop" for stop strings, stop tokens and EOS; "length" for max_tokens or the context;
// "abort" and "error" otherwise (not OpenAI values, seen only on aborted streams).
const char* openai_finish_reason(FinishReason reason);

// Legacy completions logprobs; text_offset counts bytes from text_start. An entry whose logprob is
// NaN (an echoed prompt's first token) has null token_logprobs and top_logprobs.
json completion_logprobs_json(const std::vector<TokenLogprob>& logprobs, const TokenText& token_text,
                              size_t text_start = 0);
// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}.
json chat_logprobs_json(const std::vector<TokenLogprob>& logprobs, const TokenText& token_text);

json completion_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices, const Usage& usage,
                         const TokenText& token_text);
json chat_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices, const Usage& usage,
                   const TokenText& token_text);

json completion_chunk(const ResponseMeta& meta, const ChoiceOutput& choice, const TokenText& token_text,
                      size_t text_start = 0);
// first: the delta carries role "assistant".
json chat_chunk(const ResponseMeta& meta, const ChoiceOutput& choice, bool first, const TokenText& token_text);
// The final chunk of stream_options.include_usage: choices [] and the usage.
json usage_chunk(const ResponseMeta& meta, const char* object, const Usage& usage);

std::string sse_event(const json& data);
inline const char* sse_done() { return "data: [DONE]\n\n"; }

std::string random_id(const char* prefix);  // prefix + 24 hex digits

}  // namespace mvllm::server
