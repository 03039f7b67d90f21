// Fuzz target: the Jinja parser and renderer, template and context both from the input:
//   template source [kSeparator context JSON]
// A context that is not a JSON object is replaced by a small conversation, so a template alone
// still renders against messages. Rendering runs under tight limits (a template may loop for as
// long as it likes; the limits must stop it), and every failure is a Status, never a crash.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tokenizer/jinja_template.h"

using namespace mvllm;
using nlohmann::ordered_json;

namespace {

const ordered_json& default_context() {
    static const ordered_json context = ordered_json::parse(R"({
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello <b>there</b>!"},
            {"role": "assistant", "content": "Hi.", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
            {"role": "tool", "content": [{"type": "text", "text": "42"}]}
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
    })");
    return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::Input in(data, size);
    const std::string source(in.until(fuzz::kSeparator));
    const std::string_view context_text = in.rest();

    auto tmpl = jinja::Template::parse(source);
    if (!tmpl) {
        FUZZ_REQUIRE(!tmpl.status().message().empty(), "a syntax error has a message");
        return 0;
    }
    ordered_json context = ordered_json::parse(context_text, nullptr, /*allow_exceptions=*/false);
    if (!context.is_object()) context = default_context();

    jinja::RenderOptions options;
    options.now_unix = 1721995200;
    options.limits.max_output_bytes = size_t(1) << 20;
    options.limits.max_loop_iterations = 20'000;
    options.limits.max_steps = 200'000;
    options.limits.max_collection_size = 20'000;
    auto text = tmpl->render(context, options);
    if (text) FUZZ_REQUIRE(text->size() <= options.limits.max_output_bytes, "output within the limit");
    else FUZZ_REQUIRE(!text.status().message().empty(), "a render error has a message");
    return 0;
}
