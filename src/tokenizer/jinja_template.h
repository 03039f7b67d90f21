// A parsed Jinja template, rendered the way Hugging Face's apply_chat_template renders chat
// templates: jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
// loopcontrols extension, raise_exception / strftime_now globals and HF's tojson filter.
//
//   MVLLM_ASSIGN_OR_RETURN(auto tmpl, jinja::Template::parse(source));
//   MVLLM_ASSIGN_OR_RETURN(std::string text, tmpl.render(context));  // context: a JSON object
//
// Errors name the line (and column for syntax errors) and the construct that failed.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja_eval.h"

namespace mvllm::jinja {

class Template {
public:
    static Result<Template> parse(const std::string& source);
    // context: a JSON object whose members become the template's variables. Key order is kept.
    Result<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

private:
    std::shared_ptr<const Body> body_;
};

}  // namespace mvllm::jinja
