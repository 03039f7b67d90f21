// Fuzz target: the messages side of chat templates. The real templates of tests/data/chat/
// templates (Qwen, Llama 3.x, Gemma, Mistral, Phi, SmolLM) and the ChatML fallback render
// conversations from the input, with the default render limits the server uses.
// Input: selector byte (template, add_generation_prompt, tools, enable_thinking) then the
// messages as JSON (an array of message objects, or anything else, which must be refused).
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tokenizer/chat_template.h"

using namespace mvllm;
using nlohmann::ordered_json;

namespace {

std::vector<std::string> load_templates() {
    std::vector<std::string> paths;
    for (const auto& entry : std::filesystem::directory_iterator(fuzz::data_path("chat/templates")))
        if (entry.path().extension() == ".jinja") paths.push_back(entry.path().string());
    std::sort(paths.begin(), paths.end());
    std::vector<std::string> sources;
    for (const std::string& p : paths) sources.push_back(fuzz::read_file(p));
    sources.push_back(fallback_chat_template());
    return sources;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::vector<std::string> templates = load_templates();
    fuzz::Input in(data, size);
    const uint8_t selector = in.byte();
    const std::string& source = templates[(selector & 15) % templates.size()];
    const ordered_json messages = ordered_json::parse(in.rest(), nullptr, /*allow_exceptions=*/false);
    if (messages.is_discarded()) return 0;

    ChatTemplateOptions options;
    options.add_generation_prompt = selector & 16;
    options.bos_token = "<s>";
    options.eos_token = "</s>";
    options.now_unix = 1721995200;
    if (selector & 32)
        options.tools = ordered_json::parse(
            R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    if (selector & 64) options.extra["enable_thinking"] = static_cast<bool>(selector & 128);
    auto text = apply_chat_template(source, messages, options);
    if (!text) FUZZ_REQUIRE(!text.status().message().empty(), "a render error has a message");
    if (!messages.is_array()) FUZZ_REQUIRE(!text, "messages that are not a list are refused");
    return 0;
}
