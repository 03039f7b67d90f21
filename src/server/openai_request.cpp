#include "server/openai_request.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <sstream>

namespace mvllm::server {
namespace {

using json = nlohmann::json;
using Error = std::optional<ApiError>;

std::string type_name(const json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

Error wrong_type(const std::string& key, const json& v, const char* expected) {
    return invalid_field(key, "'" + key + "' must be " + expected + ", got " + type_name(v));
}

std::string fmt(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

// A present, non-null field, or nullptr.
const json* field(const json& body, const char* key) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

Error read_number(const json& body, const char* key, double lo, double hi, bool lo_open, float* out) {
    const json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_number()) return wrong_type(key, *v, "a number");
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return invalid_field(key, "'" + std::string(key) + "' must be in " + (lo_open ? "(" : "[") + fmt(lo) + ", " +
                                      fmt(hi) + "], got " + fmt(x));
    *out = static_cast<float>(x);
    return std::nullopt;
}

Error read_int(const json& body, const char* key, int64_t lo, int64_t hi, int64_t* out) {
    const json* v = field(body, key);
    if (!v) return std::nullopt;
    // 3.0 is accepted as 3 (JSON writers in some languages emit integral floats).
    int64_t x = 0;
    if (v->is_number_integer()) {
        x = v->get<int64_t>();
    } else if (v->is_number_unsigned()) {
        x = v->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(v->get<uint64_t>());
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e18) {
        x = static_cast<int64_t>(v->get<double>());
    } else {
        return wrong_type(key, *v, "an integer");
    }
    if (x < lo || x > hi)
        return invalid_field(key, "'" + std::string(key) + "' must be in [" + std::to_string(lo) + ", " +
                                      std::to_string(hi) + "], got " + std::to_string(x));
    *out = x;
    return std::nullopt;
}

Error read_bool(const json& body, const char* key, bool* out) {
    const json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return wrong_type(key, *v, "a boolean");
    *out = v->get<bool>();
    return std::nullopt;
}

Error read_string(const json& body, const char* key, std::string* out) {
    const json* v = field(body, key);
    if (!v) return std::nullopt;
    if (!v->is_string()) return wrong_type(key, *v, "a string");
    *out = v->get<std::string>();
    return std::nullopt;
}

// OpenAI's logit_bias: an object from token ids (as strings) to biases in [-100, 100]. Ids beyond
// the vocabulary are refused by the engine at submit.
Error read_logit_bias(const json& body, std::vector<std::pair<int32_t, float>>* out) {
    const json* v = field(body, "logit_bias");
    if (!v) return std::nullopt;
    if (!v->is_object()) return wrong_type("logit_bias", *v, "an object of token ids to biases");
    for (auto it = v->begin(); it != v->end(); ++it) {
        const std::string& key = it.key();
        const bool digits = !key.empty() && key.size() <= 10 &&
                            std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
        const long long id = digits ? std::stoll(key) : -1;
        if (id < 0 || id > INT32_MAX)
            return invalid_field("logit_bias", "'logit_bias' keys must be token ids, got \"" + key + "\"");
        if (!it->is_number()) return wrong_type("logit_bias", *it, "an object of token ids to numbers");
        const double bias = it->get<double>();
        if (!(bias >= -100 && bias <= 100))
            return invalid_field("logit_bias", "'logit_bias' values must be in [-100, 100], got " + fmt(bias));
        out->push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
    }
    return std::nullopt;
}

Error parse_body(const std::string& text, json* body) {
    *body = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (body->is_discarded()) return invalid_field("", "the request body is not valid JSON");
    if (!body->is_object()) return invalid_field("", "the request body must be a JSON object");
    return std::nullopt;
}

// The sampling fields both endpoints share; max_tokens is read by the caller.
Error parse_common(const json& body, GenerationParams* p) {
    SamplingParams& s = p->sampling;
    s.temperature = 1.0f;  // OpenAI's default
    int64_t v = 0;
    if (auto e = read_string(body, "model", &p->model)) return e;
    if (auto e = read_number(body, "temperature", 0, 2, false, &s.temperature)) return e;
    if (auto e = read_number(body, "top_p", 0, 1, true, &s.top_p)) return e;
    v = 0;
    if (auto e = read_int(body, "top_k", -1, 1 << 30, &v)) return e;
    s.top_k = static_cast<int32_t>(v < 0 ? 0 : v);  // -1: off (vLLM's spelling)
    if (auto e = read_number(body, "min_p", 0, 1, false, &s.min_p)) return e;
    if (auto e = read_number(body, "repetition_penalty", 0, 2, true, &s.repetition_penalty)) return e;
    if (auto e = read_number(body, "presence_penalty", -2, 2, false, &s.presence_penalty)) return e;
    if (auto e = read_number(body, "frequency_penalty", -2, 2, false, &s.frequency_penalty)) return e;
    if (auto e = read_logit_bias(body, &s.logit_bias)) return e;
    v = -1;
    if (auto e = read_int(body, "seed", INT64_MIN, INT64_MAX, &v)) return e;
    // Negative seeds are valid in OpenAI's API; the engine reserves -1 for "derived from the id".
    s.seed = field(body, "seed") ? (v & INT64_MAX) : -1;
    v = 1;
    if (auto e = read_int(body, "n", 1, kMaxChoices, &v)) return e;
    p->n = static_cast<int32_t>(v);
    if (auto e = read_bool(body, "ignore_eos", &s.ignore_eos)) return e;
    if (auto e = read_bool(body, "stream", &p->stream)) return e;
    if (auto e = read_string(body, "user", &p->user)) return e;
    if (const json* so = field(body, "stream_options")) {
        if (!so->is_object()) return wrong_type("stream_options", *so, "an object");
        if (const json* iu = field(*so, "include_usage")) {
            if (!iu->is_boolean()) return wrong_type("stream_options.include_usage", *iu, "a boolean");
            p->include_usage = iu->get<bool>();
        }
    }
    if (const json* stop = field(body, "stop")) {
        if (stop->is_string()) {
            if (!stop->get<std::string>().empty()) s.stop.push_back(stop->get<std::string>());
        } else if (stop->is_array()) {
            for (const json& item : *stop) {
                if (!item.is_string()) return invalid_field("stop", "'stop' must be a string or a list of strings");
                if (!item.get<std::string>().empty()) s.stop.push_back(item.get<std::string>());
            }
        } else {
            return wrong_type("stop", *stop, "a string or a list of strings");
        }
    }
    return std::nullopt;
}

Error read_max_tokens(const json& body, const char* key, int32_t* out) {
    int64_t v = *out;
    if (auto e = read_int(body, key, 1, INT32_MAX, &v)) return e;
    *out = static_cast<int32_t>(v);
    return std::nullopt;
}

Error read_ids(const json& list, const char* key, std::vector<int32_t>* ids) {
    for (const json& t : list) {
        if (!t.is_number_integer() && !t.is_number_unsigned())
            return invalid_field(key, "'" + std::string(key) + "' token ids must be integers");
        const int64_t id = t.get<int64_t>();
        if (id < 0 || id > INT32_MAX) return invalid_field(key, "token id " + std::to_string(id) + " is out of range");
        ids->push_back(static_cast<int32_t>(id));
    }
    return std::nullopt;
}

Error parse_prompt(const json& body, std::vector<PromptInput>* prompts) {
    const json* p = field(body, "prompt");
    if (!p) return invalid_field("prompt", "'prompt' is required");
    const Error bad = invalid_field(
        "prompt", "'prompt' must be a string, a list of strings, a list of token ids or a list of token id lists");
    auto add_text = [&](const json& t) {
        PromptInput in;
        in.is_text = true;
        in.text = t.get<std::string>();
        prompts->push_back(std::move(in));
    };
    if (p->is_string()) {
        add_text(*p);
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
        PromptInput in;
        if (auto e = read_ids(*p, "prompt", &in.ids)) return e;
        prompts->push_back(std::move(in));
    } else if (p->is_array()) {
        for (const json& item : *p) {
            if (item.is_string()) {
                add_text(item);
            } else if (item.is_array()) {
                PromptInput in;
                if (auto e = read_ids(item, "prompt", &in.ids)) return e;
                prompts->push_back(std::move(in));
            } else {
                return bad;
            }
        }
    } else {
        return bad;
    }
    if (prompts->empty()) return invalid_field("prompt", "'prompt' must not be empty");
    for (const PromptInput& in : *prompts)
        if (in.is_text ? in.text.empty() : in.ids.empty()) return invalid_field("prompt", "'prompt' must not be empty");
    return std::nullopt;
}

Error normalize_messages(const json& list, nlohmann::ordered_json* out) {
    if (!list.is_array()) return wrong_type("messages", list, "a list of messages");
    if (list.empty()) return invalid_field("messages", "'messages' must not be empty");
    for (size_t i = 0; i < list.size(); ++i) {
        const json& m = list[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return wrong_type(where, m, "an object");
        const json* role = field(m, "role");
        if (!role || !role->is_string()) return invalid_field(where + ".role", "'" + where + ".role' must be a string");
        std::string r = role->get<std::string>();
        if (r == "developer") r = "system";
        if (r != "system" && r != "user" && r != "assistant")
            return invalid_field(where + ".role", "unsupported role '" + r + "' (system, user or assistant)");
        std::string content;
        const json* c = field(m, "content");
        if (!c) {
            if (r != "assistant") return invalid_field(where + ".content", "'" + where + ".content' is required");
        } else if (c->is_string()) {
            content = c->get<std::string>();
        } else if (c->is_array()) {
            for (const json& part : *c) {
                const json* type = part.is_object() ? field(part, "type") : nullptr;
                const json* text = part.is_object() ? field(part, "text") : nullptr;
                if (!type || *type != "text" || !text || !text->is_string())
                    return invalid_field(where + ".content", "content parts must be {\"type\": \"text\", \"text\": string}");
                if (!content.empty()) content += "\n";
                content += text->get<std::string>();
            }
        } else {
            return wrong_type(where + ".content", *c, "a string or a list of text parts");
        }
        out->push_back({{"role", r}, {"content", content}});
    }
    return std::nullopt;
}

}  // namespace

ApiError invalid_field(const std::string& param, const std::string& message) {
    ApiError e;
    e.message = message;
    e.param = param;
    return e;
}

std::optional<ApiError> parse_completion_request(const std::string& text, CompletionRequest* out) {
    json body;
    if (auto e = parse_body(text, &body)) return e;
    if (auto e = parse_common(body, &out->params)) return e;
    out->params.sampling.max_tokens = kDefaultCompletionMaxTokens;
    if (auto e = read_max_tokens(body, "max_tokens", &out->params.sampling.max_tokens)) return e;
    int64_t logprobs = -1;
    if (auto e = read_int(body, "logprobs", 0, kMaxLogprobs, &logprobs)) return e;
    out->params.sampling.logprobs = static_cast<int32_t>(logprobs);
    // echo: the prompt comes back before the completion, with its tokens' logprobs when logprobs
    // are asked for (the first token's null), as loglikelihood evaluations read them.
    if (auto e = read_bool(body, "echo", &out->params.echo)) return e;
    if (out->params.echo) out->params.sampling.prompt_logprobs = out->params.sampling.logprobs;
    return parse_prompt(body, &out->prompts);
}

std::optional<ApiError> parse_chat_request(const std::string& text, ChatRequest* out) {
    json body;
    if (auto e = parse_body(text, &body)) return e;
    if (auto e = parse_common(body, &out->params)) return e;
    out->params.sampling.max_tokens = -1;
    if (auto e = read_max_tokens(body, "max_tokens", &out->params.sampling.max_tokens)) return e;
    if (auto e = read_max_tokens(body, "max_completion_tokens", &out->params.sampling.max_tokens)) return e;
    bool logprobs = false;
    if (auto e = read_bool(body, "logprobs", &logprobs)) return e;
    int64_t top = 0;
    if (auto e = read_int(body, "top_logprobs", 0, kMaxLogprobs, &top)) return e;
    if (field(body, "top_logprobs") && !logprobs)
        return invalid_field("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    out->params.sampling.logprobs = logprobs ? static_cast<int32_t>(top) : -1;
    const json* messages = field(body, "messages");
    if (!messages) return invalid_field("messages", "'messages' is required");
    return normalize_messages(*messages, &out->messages);
}

std::optional<ApiError> parse_tokenize_request(const std::string& text, TokenizeRequest* out) {
    json body;
    if (auto e = parse_body(text, &body)) return e;
    if (auto e = read_bool(body, "add_special_tokens", &out->add_special_tokens)) return e;
    if (const json* messages = field(body, "messages")) {
        out->is_chat = true;
        out->messages = nlohmann::ordered_json::array();
        return normalize_messages(*messages, &out->messages);
    }
    if (!field(body, "prompt")) return invalid_field("prompt", "'prompt' or 'messages' is required");
    return read_string(body, "prompt", &out->prompt);
}

std::optional<ApiError> parse_detokenize_request(const std::string& text, std::vector<int32_t>* tokens) {
    json body;
    if (auto e = parse_body(text, &body)) return e;
    const json* t = field(body, "tokens");
    if (!t) return invalid_field("tokens", "'tokens' is required");
    if (!t->is_array()) return wrong_type("tokens", *t, "a list of token ids");
    return read_ids(*t, "tokens", tokens);
}

bool constant_time_equal(const std::string& a, const std::string& b) {
    // Every byte of the longer string is visited whatever the contents; lengths are compared last.
    const size_t n = std::max(a.size(), b.size());
    unsigned char diff = 0;
    for (size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
        const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
        diff |= static_cast<unsigned char>(x ^ y);
    }
    return (diff == 0) & (a.size() == b.size());
}

bool bearer_matches(const std::string& header, const std::string& api_key) {
    static const std::string kPrefix = "Bearer ";
    const std::string given = header.compare(0, kPrefix.size(), kPrefix) == 0 ? header.substr(kPrefix.size()) : "";
    return constant_time_equal(given, api_key) && !api_key.empty();
}

}  // namespace mvllm::server
