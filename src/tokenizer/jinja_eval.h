// Jinja evaluator: walks the syntax tree with jinja2's scoping (a for loop body gets a fresh
// scope each iteration, if does not scope, macros close over the scope they were defined in) and
// its default Undefined (prints empty, iterates empty, tests false; an operation on it or an
// attribute of it is an error). Every limit in RenderLimits is checked as it is approached, so
// no template or input makes rendering run unbounded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace mvllm::jinja {

struct RenderLimits {
    size_t max_output_bytes = size_t(64) << 20;   // also bounds every string built while rendering
    int64_t max_loop_iterations = 1'000'000;      // all loops together
    int64_t max_steps = 50'000'000;               // expression and statement evaluations
    int max_call_depth = 64;                      // nested macro calls
    size_t max_collection_size = 1'000'000;       // range(), list repetition
};

struct RenderOptions {
    RenderLimits limits;
    int64_t now_unix = -1;  // strftime_now's clock (UTC); < 0: the current time
};

class Scope {
public:
    explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
    const Value* find(const std::string& name) const;
    void set(const std::string& name, Value value);
    const std::shared_ptr<Scope>& parent() const { return parent_; }

private:
    std::shared_ptr<Scope> parent_;
    std::vector<std::pair<std::string, Value>> vars_;
};

class Evaluator {
public:
    explicit Evaluator(const RenderOptions& options) : options_(options) {}

    // Renders `body` with `globals` (builtins and the caller's context) as the outermost scope.
    std::string render(const Body& body, std::shared_ptr<Scope> globals);

    Value eval(const Expr& expr, const std::shared_ptr<Scope>& scope);
    Value call(const Value& fn, std::vector<Value>& args, Kwargs& kwargs);
    const RenderOptions& options() const { return options_; }
    // Fails when a string or collection of this size would pass the limits.
    void check_size(size_t bytes) const;
    void count_iterations(int64_t n);

private:
    enum class Flow { Normal, Break, Continue };

    Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out);
    Flow exec(const Stmt& stmt, const std::shared_ptr<Scope>& scope, std::string& out);
    Flow exec_for(const Stmt& stmt, const std::shared_ptr<Scope>& scope, std::string& out);
    void exec_set(const Stmt& stmt, const std::shared_ptr<Scope>& scope, Value value);
    Value define_macro(const Stmt& stmt, const std::shared_ptr<Scope>& scope);
    Value eval_binary(const Expr& expr, const std::shared_ptr<Scope>& scope);
    Value eval_compare(const Expr& expr, const std::shared_ptr<Scope>& scope);
    void append(std::string& out, const std::string& text) const;
    void step();

    RenderOptions options_;
    int64_t steps_ = 0;
    int64_t iterations_ = 0;
    int call_depth_ = 0;
    int eval_depth_ = 0;  // nested expression evaluations (a long a+b+c+... chain nests)
};

// Iterating a value as Python would: list items, dict keys, string code points, nothing for
// Undefined; anything else is an error.
std::vector<Value> iterate(const Value& v);
// Binds for-loop / set targets: one name, or unpacks a sequence over several.
void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& value);
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace mvllm::jinja
