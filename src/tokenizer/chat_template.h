// Chat templates: render a model's Jinja chat template (GGUF tokenizer.chat_template or
// tokenizer_config.json) over a conversation exactly as Hugging Face's
// tokenizer.apply_chat_template(messages, tokenize=False, ...) does. The template sees
// messages, tools (none unless given), documents (none), add_generation_prompt, bos_token,
// eos_token and every member of `extra` (e.g. enable_thinking, date_string).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja_eval.h"

namespace mvllm {

// One message with string content (pass JSON to use content as a list of parts).
struct ChatMessage {
    std::string role;
    std::string content;
    nlohmann::ordered_json tool_calls;   // null when absent
    std::string tool_call_id;            // empty when absent
    nlohmann::ordered_json to_json() const;
};

struct ChatTemplateOptions {
    bool add_generation_prompt = false;
    std::string bos_token;
    std::string eos_token;
    nlohmann::ordered_json tools;              // null: the template sees tools = none
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more template variables
    int64_t now_unix = -1;                     // strftime_now's clock; < 0: now
    jinja::RenderLimits limits;
};

// messages: a JSON array of message objects (role, content as a string or a list of parts,
// optional tool_calls, ...). Key order matters to tojson, hence ordered_json; an overload takes
// plain nlohmann::json.
Result<std::string> apply_chat_template(const std::string& template_source, const nlohmann::ordered_json& messages,
                                        const ChatTemplateOptions& options = {});
Result<std::string> apply_chat_template(const std::string& template_source, const nlohmann::json& messages,
                                        const ChatTemplateOptions& options = {});
Result<std::string> apply_chat_template(const std::string& template_source, const std::vector<ChatMessage>& messages,
                                        const ChatTemplateOptions& options = {});

// ChatML (<|im_start|>role\ncontent<|im_end|>\n ...), for models that ship no template.
const std::string& fallback_chat_template();

}  // namespace mvllm
