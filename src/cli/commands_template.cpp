// `mvllm template`: render a chat template over messages exactly as it will be fed to the model.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/options.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace mvllm::cli {
namespace {

struct TemplateArgs {
    std::string model, template_file, messages_file, bos_token, eos_token;
    bool add_generation_prompt = false;
    bool bos_set = false, eos_set = false;
};

Result<std::string> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(path, ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

int cmd_template(const TemplateArgs& a) {
    ChatTemplateOptions opt;
    opt.add_generation_prompt = a.add_generation_prompt;
    std::string source;
    if (!a.template_file.empty()) {
        auto text = read_file(a.template_file);
        if (!text) return fail(text.status());
        source = *text;
    } else {
        auto path = model_path_or_default(a.model);
        if (!path) return fail(path.status());
        auto tok = Tokenizer::from_path(*path);
        if (!tok) return fail(tok.status());
        source = (*tok)->chat_template.empty() ? fallback_chat_template() : (*tok)->chat_template;
        opt.bos_token = (*tok)->bos_text;
        opt.eos_token = (*tok)->eos_text;
    }
    if (!a.bos_token.empty()) opt.bos_token = a.bos_token;
    if (!a.eos_token.empty()) opt.eos_token = a.eos_token;
    auto text = read_file(a.messages_file);
    if (!text) return fail(text.status());
    auto messages = nlohmann::ordered_json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (messages.is_discarded()) return fail(make_error(a.messages_file, ": not valid JSON"));
    if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];
    if (!messages.is_array()) return fail(make_error(a.messages_file, ": expected a JSON array of messages"));
    auto rendered = apply_chat_template(source, messages, opt);
    if (!rendered) return fail(rendered.status());
    std::fwrite(rendered->data(), 1, rendered->size(), stdout);
    return 0;
}

}  // namespace

void register_template_commands(CLI::App& app) {
    static TemplateArgs t;
    CLI::App* c = app.add_subcommand("template", "Render a chat template over messages (prints the prompt exactly)");
    auto* model = c->add_option("-m,--model", t.model, "GGUF file or folder with tokenizer_config.json (default: the shipped model)");
    auto* file = c->add_option("--template", t.template_file, "a .jinja template file");
    model->excludes(file);
    c->add_option("--messages", t.messages_file, "JSON file: an array of {role, content} (or {\"messages\": [...]})")
        ->required();
    c->add_flag("--add-generation-prompt", t.add_generation_prompt, "end with the assistant's turn header");
    c->add_option("--bos-token", t.bos_token, "bos_token seen by the template");
    c->add_option("--eos-token", t.eos_token, "eos_token seen by the template");
    c->callback([] {
        std::exit(cmd_template(t));
    });
}

}  // namespace mvllm::cli
