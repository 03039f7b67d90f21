#include "tokenizer/jinja_eval.h"

#include <cmath>

#include "tokenizer/jinja_builtins.h"

namespace mvllm::jinja {

const Value* Scope::find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent_.get())
        for (const auto& [k, v] : s->vars_)
            if (k == name) return &v;
    return nullptr;
}

void Scope::set(const std::string& name, Value value) {
    for (auto& [k, v] : vars_) {
        if (k == name) {
            v = std::move(value);
            return;
        }
    }
    vars_.emplace_back(name, std::move(value));
}

void fail_undefined(const Value& v) {
    fail(v.undefined_name().empty() ? std::string("value is undefined") : v.undefined_name());
}

std::vector<Value> iterate(const Value& v) {
    switch (v.kind()) {
    case ValueKind::Undefined: return {};
    case ValueKind::List: return v.items();
    case ValueKind::Dict: {
        std::vector<Value> keys;
        for (const auto& [k, e] : v.dict_data().entries) keys.push_back(k);
        return keys;
    }
    case ValueKind::String: {
        std::vector<Value> chars;
        const std::string& s = v.str();
        auto offsets = code_point_offsets(s);
        for (size_t i = 0; i < offsets.size(); ++i) {
            size_t end = i + 1 < offsets.size() ? offsets[i + 1] : s.size();
            chars.emplace_back(s.substr(offsets[i], end - offsets[i]));
        }
        return chars;
    }
    default: fail("'" + v.type_name() + "' object is not iterable");
    }
}

void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
        scope.set(targets[0], value);
        return;
    }
    std::vector<Value> parts = iterate(value);
    if (parts.size() != targets.size())
        fail(parts.size() < targets.size() ? "not enough values to unpack (expected " + std::to_string(targets.size()) +
                                                 ", got " + std::to_string(parts.size()) + ")"
                                           : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], parts[i]);
}

std::string Evaluator::render(const Body& body, std::shared_ptr<Scope> globals) {
    auto root = std::make_shared<Scope>(std::move(globals));
    std::string out;
    exec_body(body, root, out);
    return out;
}

void Evaluator::check_size(size_t bytes) const {
    if (bytes > options_.limits.max_output_bytes)
        fail("output or string larger than the limit of " + std::to_string(options_.limits.max_output_bytes) + " bytes");
}

void Evaluator::count_iterations(int64_t n) {
    iterations_ += n;
    if (iterations_ > options_.limits.max_loop_iterations)
        fail("more than " + std::to_string(options_.limits.max_loop_iterations) + " loop iterations");
}

void Evaluator::step() {
    if (++steps_ > options_.limits.max_steps)
        fail("template evaluation exceeded " + std::to_string(options_.limits.max_steps) + " steps");
}

void Evaluator::append(std::string& out, const std::string& text) const {
    check_size(out.size() + text.size());
    out += text;
}

Evaluator::Flow Evaluator::exec_body(const Body& body, const std::shared_ptr<Scope>& scope, std::string& out) {
    for (const auto& stmt : body) {
        Flow flow = exec(*stmt, scope, out);
        if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
}

Evaluator::Flow Evaluator::exec(const Stmt& stmt, const std::shared_ptr<Scope>& scope, std::string& out) {
    step();
    try {
        switch (stmt.kind) {
        case StmtKind::Text: append(out, stmt.text); return Flow::Normal;
        case StmtKind::Output: append(out, eval(*stmt.expr, scope).to_str()); return Flow::Normal;
        case StmtKind::If:
            for (const auto& [cond, body] : stmt.branches)
                if (eval(*cond, scope).truthy()) return exec_body(body, scope, out);
            return exec_body(stmt.else_body, scope, out);
        case StmtKind::For: return exec_for(stmt, scope, out);
        case StmtKind::Set: exec_set(stmt, scope, eval(*stmt.expr, scope)); return Flow::Normal;
        case StmtKind::SetBlock: {
            std::string captured;
            exec_body(stmt.body, scope, captured);
            Value value(std::move(captured));
            if (stmt.expr) {  // {% set x | filter %}: the chain's innermost operand is the body
                std::vector<const Expr*> chain;
                for (const Expr* f = stmt.expr.get(); f; f = f->args[0].get()) chain.push_back(f);
                for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
                    std::vector<Value> args;
                    for (size_t i = 1; i < (*it)->args.size(); ++i) args.push_back(eval(*(*it)->args[i], scope));
                    Kwargs kwargs;
                    for (const auto& [k, e] : (*it)->kwargs) kwargs.emplace_back(k, eval(*e, scope));
                    value = apply_filter(*this, (*it)->name, value, args, kwargs);
                }
            }
            scope->set(stmt.targets[0], value);
            return Flow::Normal;
        }
        case StmtKind::FilterBlock: {
            std::string captured;
            exec_body(stmt.body, scope, captured);
            Value value(std::move(captured));
            std::vector<const Expr*> chain;
            for (const Expr* f = stmt.expr.get(); f; f = f->args[0].get()) chain.push_back(f);
            for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
                std::vector<Value> args;
                for (size_t i = 1; i < (*it)->args.size(); ++i) args.push_back(eval(*(*it)->args[i], scope));
                Kwargs kwargs;
                for (const auto& [k, e] : (*it)->kwargs) kwargs.emplace_back(k, eval(*e, scope));
                value = apply_filter(*this, (*it)->name, value, args, kwargs);
            }
            append(out, value.to_str());
            return Flow::Normal;
        }
        case StmtKind::Macro: scope->set(stmt.targets[0], define_macro(stmt, scope)); return Flow::Normal;
        case StmtKind::Break: return Flow::Break;
        case StmtKind::Continue: return Flow::Continue;
        case StmtKind::Scope: return exec_body(stmt.body, scope, out);
        }
    } catch (JinjaError& e) {
        if (e.line == 0) {
            e.line = stmt.line;
            e.column = stmt.column;
        }
        throw;
    }
    return Flow::Normal;
}

Evaluator::Flow Evaluator::exec_for(const Stmt& stmt, const std::shared_ptr<Scope>& scope, std::string& out) {
    std::vector<Value> all = iterate(eval(*stmt.expr, scope));
    std::vector<Value> items;
    if (stmt.cond) {
        count_iterations(int64_t(all.size()));
        for (auto& item : all) {
            auto probe = std::make_shared<Scope>(scope);
            bind_targets(*probe, stmt.targets, item);
            if (eval(*stmt.cond, probe).truthy()) items.push_back(std::move(item));
        }
    } else {
        items = std::move(all);
    }
    const int64_t n = int64_t(items.size());
    Value previous = Value::undefined("'loop.previtem' is undefined");
    for (int64_t i = 0; i < n; ++i) {
        count_iterations(1);
        auto iteration = std::make_shared<Scope>(scope);
        bind_targets(*iteration, stmt.targets, items[size_t(i)]);
        Value loop = Value::dict();
        DictData& d = loop.dict_data();
        d.set("index", Value(i + 1));
        d.set("index0", Value(i));
        d.set("revindex", Value(n - i));
        d.set("revindex0", Value(n - i - 1));
        d.set("first", Value(i == 0));
        d.set("last", Value(i == n - 1));
        d.set("length", Value(n));
        d.set("depth", Value(1));
        d.set("depth0", Value(0));
        d.set("previtem", previous);
        d.set("nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("'loop.nextitem' is undefined"));
        d.set("cycle", Value::callable("loop.cycle", [i](Evaluator&, std::vector<Value>& args, Kwargs&) {
                  if (args.empty()) fail("no items for cycling given");
                  return args[size_t(i) % args.size()];
              }));
        iteration->set("loop", loop);
        previous = items[size_t(i)];
        Flow flow = exec_body(stmt.body, iteration, out);
        if (flow == Flow::Break) break;
    }
    if (n == 0) return exec_body(stmt.else_body, scope, out);
    return Flow::Normal;
}

void Evaluator::exec_set(const Stmt& stmt, const std::shared_ptr<Scope>& scope, Value value) {
    if (!stmt.attribute.empty()) {
        const Value* target = scope->find(stmt.targets[0]);
        if (!target || !target->is_namespace())
            fail("cannot assign attribute '" + stmt.attribute + "' on non-namespace object '" + stmt.targets[0] + "'");
        target->dict_data().set(Value(stmt.attribute), std::move(value));
        return;
    }
    bind_targets(*scope, stmt.targets, value);
}

Value Evaluator::define_macro(const Stmt& stmt, const std::shared_ptr<Scope>& scope) {
    const Stmt* def = &stmt;
    std::weak_ptr<Scope> weak_scope = scope;  // a macro stored in its own scope must not keep it alive
    return Value::callable(stmt.targets[0], [def, weak_scope](Evaluator& ev, std::vector<Value>& args, Kwargs& kwargs) {
        auto defining = weak_scope.lock();
        if (!defining) fail("macro '" + def->targets[0] + "' called after its scope ended");
        if (args.size() > def->params.size())
            fail("macro '" + def->targets[0] + "' takes not more than " + std::to_string(def->params.size()) +
                 " argument(s)");
        if (++ev.call_depth_ > ev.options_.limits.max_call_depth) {
            --ev.call_depth_;
            fail("macro calls nested deeper than " + std::to_string(ev.options_.limits.max_call_depth));
        }
        auto local = std::make_shared<Scope>(defining);
        for (size_t i = 0; i < def->params.size(); ++i) {
            const MacroParam& p = def->params[i];
            const Value* kw = nullptr;
            for (const auto& [k, v] : kwargs)
                if (k == p.name) kw = &v;
            if (i < args.size()) local->set(p.name, args[i]);
            else if (kw) local->set(p.name, *kw);
            else if (p.default_value) local->set(p.name, ev.eval(*p.default_value, local));
            else local->set(p.name, Value::undefined("parameter '" + p.name + "' was not provided"));
        }
        for (const auto& [k, v] : kwargs) {
            bool known = false;
            for (const auto& p : def->params) known = known || p.name == k;
            if (!known) {
                --ev.call_depth_;
                fail("macro '" + def->targets[0] + "' was invoked with an unknown keyword argument '" + k + "'");
            }
        }
        std::string out;
        try {
            ev.exec_body(def->body, local, out);
        } catch (...) {
            --ev.call_depth_;
            throw;
        }
        --ev.call_depth_;
        return Value(std::move(out));
    });
}

Value Evaluator::call(const Value& fn, std::vector<Value>& args, Kwargs& kwargs) {
    if (fn.is_undefined()) fail_undefined(fn);
    if (!fn.is_callable()) fail("'" + fn.type_name() + "' object is not callable");
    return fn.callable_data().fn(*this, args, kwargs);
}

Value Evaluator::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
    step();
    struct DepthGuard {
        explicit DepthGuard(int& d) : d(d) {
            if (++d > 512) {
                --d;
                fail("expression nested too deeply (more than 512 levels)");
            }
        }
        ~DepthGuard() { --d; }
        int& d;
    } guard(eval_depth_);
    try {
        switch (e.kind) {
        case ExprKind::Literal: return e.literal;
        case ExprKind::Name: {
            const Value* v = scope->find(e.name);
            return v ? *v : Value::undefined("'" + e.name + "' is undefined");
        }
        case ExprKind::List:
        case ExprKind::Tuple: {
            std::vector<Value> items;
            for (const auto& a : e.args) items.push_back(eval(*a, scope));
            return Value::list(std::move(items), e.kind == ExprKind::Tuple);
        }
        case ExprKind::Dict: {
            Value d = Value::dict();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                Value key = eval(*e.args[i], scope);
                if (key.is_list() && !key.is_tuple()) fail("unhashable type: 'list'");
                if (key.is_dict()) fail("unhashable type: 'dict'");
                d.dict_data().set(key, eval(*e.args[i + 1], scope));
            }
            return d;
        }
        case ExprKind::GetAttr: return get_attr(eval(*e.args[0], scope), e.name);
        case ExprKind::GetItem: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
        case ExprKind::Slice: {
            Value obj = eval(*e.args[0], scope);
            auto opt = [&](size_t i) { return e.args[i] ? eval(*e.args[i], scope) : Value::none(); };
            Value start = opt(1), stop = opt(2), stride = opt(3);
            return get_slice(obj, start, stop, stride);
        }
        case ExprKind::Call: {
            Value fn = eval(*e.args[0], scope);
            std::vector<Value> args;
            for (size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i], scope));
            Kwargs kwargs;
            for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v, scope));
            return call(fn, args, kwargs);
        }
        case ExprKind::Filter:
        case ExprKind::Test: {
            Value operand = eval(*e.args[0], scope);
            std::vector<Value> args;
            for (size_t i = 1; i < e.args.size(); ++i) args.push_back(eval(*e.args[i], scope));
            Kwargs kwargs;
            for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v, scope));
            if (e.kind == ExprKind::Filter) return apply_filter(*this, e.name, operand, args, kwargs);
            return Value(apply_test(*this, e.name, operand, args, kwargs) != e.negated);
        }
        case ExprKind::Unary: {
            Value v = eval(*e.args[0], scope);
            if (e.name == "not") return Value(!v.truthy());
            if (v.is_undefined()) fail_undefined(v);
            if (!v.is_number()) fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
            if (e.name == "+") return v.is_float() ? Value(v.as_float()) : Value(v.as_int());
            if (v.is_float()) return Value(-v.as_float());
            if (v.as_int() == INT64_MIN) fail("integer overflow");
            return Value(-v.as_int());
        }
        case ExprKind::Binary: return eval_binary(e, scope);
        case ExprKind::Compare: return eval_compare(e, scope);
        case ExprKind::CondExpr:
            if (eval(*e.args[1], scope).truthy()) return eval(*e.args[0], scope);
            if (e.args[2]) return eval(*e.args[2], scope);
            return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
        }
    } catch (JinjaError& err) {
        if (err.line == 0) {
            err.line = e.line;
            err.column = e.column;
        }
        throw;
    }
    return Value();
}

Value Evaluator::eval_compare(const Expr& e, const std::shared_ptr<Scope>& scope) {
    Value lhs = eval(*e.args[0], scope);
    for (size_t i = 0; i < e.ops.size(); ++i) {
        Value rhs = eval(*e.args[i + 1], scope);
        const std::string& op = e.ops[i];
        bool result;
        if (op == "==") result = values_equal(lhs, rhs);
        else if (op == "!=") result = !values_equal(lhs, rhs);
        else if (op == "in") result = contains(rhs, lhs);
        else if (op == "not in") result = !contains(rhs, lhs);
        else {
            if (lhs.is_undefined()) fail_undefined(lhs);
            if (rhs.is_undefined()) fail_undefined(rhs);
            if (op == "<") result = value_less(lhs, rhs);
            else if (op == ">") result = value_less(rhs, lhs);
            else if (op == "<=") result = !value_less(rhs, lhs);
            else result = !value_less(lhs, rhs);
        }
        if (!result) return Value(false);
        lhs = std::move(rhs);
    }
    return Value(true);
}

static void check_overflow(bool overflow) {
    if (overflow) fail("integer overflow");
}

static int64_t floor_div(int64_t a, int64_t b) {
    if (b == 0) fail("integer division or modulo by zero");
    if (a == INT64_MIN && b == -1) fail("integer overflow");
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

Value Evaluator::eval_binary(const Expr& e, const std::shared_ptr<Scope>& scope) {
    const std::string& op = e.name;
    Value lhs = eval(*e.args[0], scope);
    if (op == "and") return lhs.truthy() ? eval(*e.args[1], scope) : lhs;
    if (op == "or") return lhs.truthy() ? lhs : eval(*e.args[1], scope);
    Value rhs = eval(*e.args[1], scope);
    if (op == "~") {
        std::string a = lhs.to_str(), b = rhs.to_str();
        check_size(a.size() + b.size());
        return Value(a + b);
    }
    if (lhs.is_undefined()) fail_undefined(lhs);
    if (rhs.is_undefined()) fail_undefined(rhs);
    auto type_error = [&]() -> Value {
        fail("unsupported operand type(s) for " + op + ": '" + lhs.type_name() + "' and '" + rhs.type_name() + "'");
    };
    if (lhs.is_number() && rhs.is_number()) {
        bool floats = lhs.is_float() || rhs.is_float();
        double x = lhs.as_float(), y = rhs.as_float();
        const int64_t a = floats ? 0 : lhs.as_int(), b = floats ? 0 : rhs.as_int();  // only read when !floats
        int64_t r = 0;
        if (op == "+" || op == "-" || op == "*") {
            if (floats) return Value(op == "+" ? x + y : op == "-" ? x - y : x * y);
            check_overflow(op == "+"   ? __builtin_add_overflow(a, b, &r)
                           : op == "-" ? __builtin_sub_overflow(a, b, &r)
                                       : __builtin_mul_overflow(a, b, &r));
            return Value(r);
        }
        if (op == "/") {
            if (y == 0) fail("division by zero");
            return Value(x / y);
        }
        if (op == "//") {
            if (!floats) return Value(floor_div(a, b));
            if (y == 0) fail("float floor division by zero");
            return Value(std::floor(x / y));
        }
        if (op == "%") {
            if (!floats) {
                int64_t q = floor_div(a, b);
                return Value(a - q * b);
            }
            if (y == 0) fail("float modulo");
            double m = std::fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return Value(m);
        }
        if (op == "**") {
            if (!floats && b >= 0) {
                int64_t result = 1, base = a;
                for (int64_t k = b; k > 0; k >>= 1) {
                    if (k & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
                    if (k > 1) check_overflow(__builtin_mul_overflow(base, base, &base));
                }
                return Value(result);
            }
            if (x == 0 && y < 0) fail("0.0 cannot be raised to a negative power");
            return Value(std::pow(x, y));
        }
    }
    if (op == "+") {
        if (lhs.is_string() && rhs.is_string()) {
            check_size(lhs.str().size() + rhs.str().size());
            return Value(lhs.str() + rhs.str());
        }
        if (lhs.is_list() && rhs.is_list() && lhs.is_tuple() == rhs.is_tuple()) {
            check_size(lhs.items().size() + rhs.items().size());
            std::vector<Value> items = lhs.items();
            items.insert(items.end(), rhs.items().begin(), rhs.items().end());
            return Value::list(std::move(items), lhs.is_tuple());
        }
    }
    if (op == "*") {
        const Value& seq = lhs.is_number() ? rhs : lhs;
        const Value& count = lhs.is_number() ? lhs : rhs;
        if ((seq.is_string() || seq.is_list()) && (count.is_int() || count.is_bool())) {
            int64_t n = std::max<int64_t>(0, count.as_int());
            size_t unit = seq.is_string() ? seq.str().size() : seq.items().size();
            if (unit > 0 && uint64_t(n) > options_.limits.max_output_bytes / unit) check_size(SIZE_MAX);
            if (seq.is_list() && uint64_t(n) * unit > options_.limits.max_collection_size)
                fail("list repetition larger than the limit");
            if (seq.is_string()) {
                std::string out;
                out.reserve(unit * size_t(n));
                for (int64_t k = 0; k < n; ++k) out += seq.str();
                return Value(std::move(out));
            }
            std::vector<Value> items;
            for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq.items().begin(), seq.items().end());
            return Value::list(std::move(items), seq.is_tuple());
        }
    }
    if (op == "%" && lhs.is_string()) fail("printf-style string formatting ('%') is not supported");
    return type_error();
}

}  // namespace mvllm::jinja
