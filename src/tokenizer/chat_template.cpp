#include "tokenizer/chat_template.h"

#include <utility>
#include <vector>

#include "tokenizer/jinja_template.h"

namespace mvllm {
namespace {

// Whether j nests deeper than max_depth, found without recursion: copying or dumping JSON is
// recursive in nlohmann::json, so a hostile messages file 100k levels deep must be refused first.
template <typename Json>
bool nested_deeper_than(const Json& j, int max_depth) {
    std::vector<std::pair<const Json*, int>> todo = {{&j, 0}};
    while (!todo.empty()) {
        const auto [node, depth] = todo.back();
        todo.pop_back();
        if (depth > max_depth) return true;
        if (node->is_array() || node->is_object())
            for (const auto& child : *node) todo.emplace_back(&child, depth + 1);
    }
    return false;
}

constexpr int kMaxMessagesDepth = 256;

}  // namespace

nlohmann::ordered_json ChatMessage::to_json() const {
    nlohmann::ordered_json j = {{"role", role}, {"content", content}};
    if (!tool_calls.is_null()) j["tool_calls"] = tool_calls;
    if (!tool_call_id.empty()) j["tool_call_id"] = tool_call_id;
    return j;
}

Result<std::string> apply_chat_template(const std::string& template_source, const nlohmann::ordered_json& messages,
                                        const ChatTemplateOptions& options) {
    if (!messages.is_array()) return Status::error("chat messages must be a JSON array");
    if (nested_deeper_than(messages, kMaxMessagesDepth) || nested_deeper_than(options.tools, kMaxMessagesDepth) ||
        nested_deeper_than(options.extra, kMaxMessagesDepth))
        return Status::error("chat messages nest more than 256 levels deep");
    for (const auto& m : messages)
        if (!m.is_object()) return Status::error("each chat message must be a JSON object");
    if (!options.extra.is_null() && !options.extra.is_object())
        return Status::error("extra chat template variables must be a JSON object");
    MVLLM_ASSIGN_OR_RETURN(auto tmpl, jinja::Template::parse(template_source));
    // The variables HF's render_jinja_template passes, in its order; extra ones override.
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    context["messages"] = messages;
    context["tools"] = options.tools;
    context["documents"] = nullptr;
    context["add_generation_prompt"] = options.add_generation_prompt;
    context["bos_token"] = options.bos_token;
    context["eos_token"] = options.eos_token;
    if (options.extra.is_object())
        for (const auto& [k, v] : options.extra.items()) context[k] = v;
    jinja::RenderOptions render_options;
    render_options.limits = options.limits;
    render_options.now_unix = options.now_unix;
    auto rendered = tmpl.render(context, render_options);
    if (!rendered.is_ok()) return rendered.status().with_context("chat template");
    return rendered;
}

Result<std::string> apply_chat_template(const std::string& template_source, const nlohmann::json& messages,
                                        const ChatTemplateOptions& options) {
    if (nested_deeper_than(messages, kMaxMessagesDepth)) return Status::error("chat messages nest more than 256 levels deep");
    return apply_chat_template(template_source, nlohmann::ordered_json::parse(messages.dump()), options);
}

Result<std::string> apply_chat_template(const std::string& template_source, const std::vector<ChatMessage>& messages,
                                        const ChatTemplateOptions& options) {
    nlohmann::ordered_json array = nlohmann::ordered_json::array();
    for (const auto& m : messages) array.push_back(m.to_json());
    return apply_chat_template(template_source, array, options);
}

const std::string& fallback_chat_template() {
    static const std::string kChatML =
        "{%- for message in messages %}"
        "{{- '<|im_start|>' + message['role'] + '\\n' }}"
        "{%- if message['content'] is string %}{{- message['content'] }}"
        "{%- else %}{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] }}"
        "{%- endif %}{%- endfor %}{%- endif %}"
        "{{- '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
    return kChatML;
}

}  // namespace mvllm
