#include "server/openai_response.h"

#include <cmath>
#include <random>

namespace mvllm::server {
namespace {

json logprob_value(float lp) {
    // -inf (a token the sampler ruled out) is not JSON; OpenAI clients accept a large negative.
    return std::isfinite(lp) ? json(lp) : json(-9999.0);
}

json bytes_json(const std::string& s) {
    json out = json::array();
    for (unsigned char c : s) out.push_back(static_cast<int>(c));
    return out;
}

json meta_fields(const ResponseMeta& meta, const char* object) {
    return json{{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

json finish_json(const char* reason) { return reason ? json(reason) : json(nullptr); }

}  // namespace

json error_body(const ApiError& e) {
    return json{{"error",
                 {{"message", e.message},
                  {"type", e.type},
                  {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                  {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

json usage_json(const Usage& u) {
    return json{{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

const char* openai_finish_reason(FinishReason reason) {
    switch (reason) {
        case FinishReason::Stop: return "stop";
        case FinishReason::Length: return "length";
        case FinishReason::Abort: return "abort";
        case FinishReason::Error: return "error";
    }
    return "error";
}

json completion_logprobs_json(const std::vector<TokenLogprob>& logprobs, const TokenText& token_text,
                              size_t text_start) {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    size_t offset = text_start;
    for (const TokenLogprob& t : logprobs) {
        const std::string text = token_text(t.token);
        tokens.push_back(text);
        if (std::isnan(t.logprob)) {  // an echoed prompt's first token: nothing predicts it
            token_logprobs.push_back(nullptr);
            top.push_back(nullptr);
        } else {
            token_logprobs.push_back(logprob_value(t.logprob));
            json alternatives = json::object();
            for (const auto& [id, lp] : t.top) alternatives[token_text(id)] = logprob_value(lp);
            top.push_back(std::move(alternatives));
        }
        offsets.push_back(offset);
        offset += text.size();
    }
    return json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json chat_logprobs_json(const std::vector<TokenLogprob>& logprobs, const TokenText& token_text) {
    json content = json::array();
    for (const TokenLogprob& t : logprobs) {
        const std::string text = token_text(t.token);
        json top = json::array();
        for (const auto& [id, lp] : t.top) {
            const std::string alt = token_text(id);
            top.push_back({{"token", alt}, {"logprob", logprob_value(lp)}, {"bytes", bytes_json(alt)}});
        }
        content.push_back(
            {{"token", text}, {"logprob", logprob_value(t.logprob)}, {"bytes", bytes_json(text)}, {"top_logprobs", top}});
    }
    return json{{"content", content}};
}

json completion_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices, const Usage& usage,
                         const TokenText& token_text) {
    json out = meta_fields(meta, "text_completion");
    json list = json::array();
    for (const ChoiceOutput& c : choices)
        list.push_back({{"index", c.index},
                        {"text", c.text},
                        {"logprobs", c.has_logprobs ? completion_logprobs_json(c.logprobs, token_text) : json(nullptr)},
                        {"finish_reason", finish_json(c.finish_reason)}});
    out["choices"] = std::move(list);
    out["usage"] = usage_json(usage);
    return out;
}

json chat_response(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices, const Usage& usage,
                   const TokenText& token_text) {
    json out = meta_fields(meta, "chat.completion");
    json list = json::array();
    for (const ChoiceOutput& c : choices)
        list.push_back({{"index", c.index},
                        {"message", {{"role", "assistant"}, {"content", c.text}}},
                        {"logprobs", c.has_logprobs ? chat_logprobs_json(c.logprobs, token_text) : json(nullptr)},
                        {"finish_reason", finish_json(c.finish_reason)}});
    out["choices"] = std::move(list);
    out["usage"] = usage_json(usage);
    return out;
}

json completion_chunk(const ResponseMeta& meta, const ChoiceOutput& c, const TokenText& token_text, size_t text_start) {
    json out = meta_fields(meta, "text_completion");
    out["choices"] = json::array(
        {{{"index", c.index},
          {"text", c.text},
          {"logprobs", c.has_logprobs ? completion_logprobs_json(c.logprobs, token_text, text_start) : json(nullptr)},
          {"finish_reason", finish_json(c.finish_reason)}}});
    return out;
}

json chat_chunk(const ResponseMeta& meta, const ChoiceOutput& c, bool first, const TokenText& token_text) {
    json out = meta_fields(meta, "chat.completion.chunk");
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !c.text.empty()) delta["content"] = c.text;
    out["choices"] = json::array({{{"index", c.index},
                                   {"delta", delta},
                                   {"logprobs", c.has_logprobs ? chat_logprobs_json(c.logprobs, token_text) : json(nullptr)},
                                   {"finish_reason", finish_json(c.finish_reason)}}});
    return out;
}

json usage_chunk(const ResponseMeta& meta, const char* object, const Usage& usage) {
    json out = meta_fields(meta, object);
    out["choices"] = json::array();
    out["usage"] = usage_json(usage);
    return out;
}

std::string sse_event(const json& data) {
    return "data: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

std::string random_id(const char* prefix) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char* kHex = "0123456789abcdef";
    std::string out = prefix;
    for (int i = 0; i < 24; ++i) out += kHex[rng() & 15];
    return out;
}

}  // namespace mvllm::server
