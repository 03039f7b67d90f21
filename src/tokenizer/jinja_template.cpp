#include "tokenizer/jinja_template.h"

#include <functional>

#include "tokenizer/jinja_builtins.h"

namespace mvllm::jinja {
namespace {

std::string position(int line, int column) {
    if (line <= 0) return "";
    return column > 0 ? "line " + std::to_string(line) + ", column " + std::to_string(column) + ": "
                      : "line " + std::to_string(line) + ": ";
}

// jinja2 rejects unknown filters and tests when it compiles a template, not when it runs it.
void check_names(const Expr& e) {
    if (e.kind == ExprKind::Filter && !has_filter(e.name))
        throw JinjaError("unknown filter '" + e.name + "'", e.line, e.column);
    if (e.kind == ExprKind::Test && !has_test(e.name))
        throw JinjaError("unknown test '" + e.name + "'", e.line, e.column);
    for (const auto& a : e.args)
        if (a) check_names(*a);
    for (const auto& [k, v] : e.kwargs) check_names(*v);
}

void check_names(const Body& body) {
    for (const auto& s : body) {
        if (s->expr) check_names(*s->expr);
        if (s->cond) check_names(*s->cond);
        for (const auto& [cond, branch] : s->branches) {
            check_names(*cond);
            check_names(branch);
        }
        for (const auto& p : s->params)
            if (p.default_value) check_names(*p.default_value);
        check_names(s->body);
        check_names(s->else_body);
    }
}

}  // namespace

Result<Template> Template::parse(const std::string& source) {
    try {
        auto body = std::make_shared<Body>(parse_template(source));
        check_names(*body);
        Template t;
        t.body_ = std::move(body);
        return t;
    } catch (const JinjaError& e) {
        return Status::error("template syntax error: " + position(e.line, e.column) + e.what());
    }
}

Result<std::string> Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
    if (!context.is_object()) return Status::error("template context must be a JSON object");
    try {
        auto globals = std::make_shared<Scope>(make_builtin_globals());
        for (const auto& [key, value] : context.items()) globals->set(key, Value::from_json(value));
        Evaluator evaluator(options);
        return evaluator.render(*body_, globals);
    } catch (const JinjaError& e) {
        return Status::error("template error: " + position(e.line, 0) + e.what());
    }
}

}  // namespace mvllm::jinja
