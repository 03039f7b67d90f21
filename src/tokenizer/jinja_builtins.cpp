// Tests, attribute / item / slice access, `in`, and the builtin globals.
#include "tokenizer/jinja_builtins.h"

#include <cctype>
#include <cmath>
#include <ctime>

namespace mvllm::jinja {
namespace {

std::string object_name(const Value& v) {
    if (v.is_none()) return "'None'";
    return "'" + v.type_name() + " object'";
}

Value unsafe_method(const std::string& type, const std::string& name) {
    return Value::callable(type + "." + name, [type, name](Evaluator&, std::vector<Value>&, Kwargs&) -> Value {
        fail("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
    });
}

Value dict_method(const Value& self, const std::string& name) {
    if (name == "get")
        return Value::callable("dict.get", [self](Evaluator&, std::vector<Value>& args, Kwargs&) -> Value {
            if (args.empty()) fail("get expected at least 1 argument, got 0");
            const Value* v = self.dict_data().find(args[0]);
            return v ? *v : (args.size() > 1 ? args[1] : Value::none());
        });
    if (name == "items" || name == "keys" || name == "values")
        return Value::callable("dict." + name, [self, name](Evaluator&, std::vector<Value>&, Kwargs&) -> Value {
            std::vector<Value> out;
            for (const auto& [k, v] : self.dict_data().entries) {
                if (name == "items") out.push_back(Value::list({k, v}, true));
                else out.push_back(name == "keys" ? k : v);
            }
            return Value::list(std::move(out));
        });
    if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" || name == "clear")
        return unsafe_method("dict", name);
    return Value();
}

int64_t normalize_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

bool is_integer_like(const Value& v) { return v.is_int() || v.is_bool(); }

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
    switch (obj.kind()) {
    case ValueKind::Undefined: fail_undefined(obj);
    case ValueKind::Dict: {
        Value method = dict_method(obj, name);
        if (!method.is_undefined()) return method;
        if (const Value* v = obj.dict_data().find(name)) return *v;
        break;
    }
    case ValueKind::Namespace:
        if (const Value* v = obj.dict_data().find(name)) return *v;
        break;
    case ValueKind::String: {
        Value method = string_method(obj, name);
        if (!method.is_undefined()) return method;
        break;
    }
    case ValueKind::List:
        if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
            name == "clear" || name == "sort" || name == "reverse")
            return unsafe_method("list", name);
        break;
    default: break;
    }
    return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
    switch (obj.kind()) {
    case ValueKind::Undefined: fail_undefined(obj);
    case ValueKind::Dict:
        if (const Value* v = obj.dict_data().find(key)) return *v;
        break;
    case ValueKind::List:
        if (is_integer_like(key)) {
            const auto& items = obj.items();
            int64_t i = normalize_index(key.as_int(), int64_t(items.size()));
            if (i >= 0 && i < int64_t(items.size())) return items[size_t(i)];
            return Value::undefined(object_name(obj) + " has no element " + key.to_str());
        }
        break;
    case ValueKind::String:
        if (is_integer_like(key)) {
            const std::string& s = obj.str();
            auto offsets = code_point_offsets(s);
            int64_t i = normalize_index(key.as_int(), int64_t(offsets.size()));
            if (i >= 0 && i < int64_t(offsets.size())) {
                size_t end = size_t(i) + 1 < offsets.size() ? offsets[size_t(i) + 1] : s.size();
                return Value(s.substr(offsets[size_t(i)], end - offsets[size_t(i)]));
            }
            return Value::undefined(object_name(obj) + " has no element " + key.to_str());
        }
        break;
    default: break;
    }
    if (key.is_string()) return get_attr(obj, key.str());
    return Value::undefined(object_name(obj) + " has no element " + key.repr());
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (!obj.is_list() && !obj.is_string()) return Value::undefined(object_name(obj) + " is not subscriptable");
    for (const Value* v : {&start_v, &stop_v, &step_v})
        if (!v->is_none() && !is_integer_like(*v)) fail("slice indices must be integers or None");
    int64_t step = step_v.is_none() ? 1 : step_v.as_int();
    if (step == 0) fail("slice step cannot be zero");
    std::vector<size_t> offsets;
    int64_t n;
    if (obj.is_string()) {
        offsets = code_point_offsets(obj.str());
        n = int64_t(offsets.size());
    } else {
        n = int64_t(obj.items().size());
    }
    // Python's slice.indices().
    auto clamp = [&](const Value& v, int64_t fallback) {
        if (v.is_none()) return fallback;
        int64_t i = v.as_int();
        if (i < 0) {
            i += n;
            if (i < 0) i = step < 0 ? -1 : 0;
        } else if (i >= n) {
            i = step < 0 ? n - 1 : n;
        }
        return i;
    };
    int64_t start = clamp(start_v, step < 0 ? n - 1 : 0);
    int64_t stop = clamp(stop_v, step < 0 ? -1 : n);
    std::vector<int64_t> picks;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
    if (obj.is_string()) {
        const std::string& s = obj.str();
        std::string out;
        for (int64_t i : picks) {
            size_t end = size_t(i) + 1 < offsets.size() ? offsets[size_t(i) + 1] : s.size();
            out.append(s, offsets[size_t(i)], end - offsets[size_t(i)]);
        }
        return Value(std::move(out));
    }
    std::vector<Value> items;
    items.reserve(picks.size());
    for (int64_t i : picks) items.push_back(obj.items()[size_t(i)]);
    return Value::list(std::move(items), obj.is_tuple());
}

bool contains(const Value& container, const Value& item) {
    switch (container.kind()) {
    case ValueKind::Undefined: return false;
    case ValueKind::String:
        if (!item.is_string())
            fail("'in <string>' requires string as left operand, not " + item.type_name());
        return container.str().find(item.str()) != std::string::npos;
    case ValueKind::List:
        for (const auto& v : container.items())
            if (values_equal(v, item)) return true;
        return false;
    case ValueKind::Dict: return container.dict_data().find(item) != nullptr;
    default: fail("argument of type '" + container.type_name() + "' is not iterable");
    }
}

// ---- tests ---------------------------------------------------------------------------------

static const char* const kTests[] = {"defined", "undefined", "none", "boolean", "false", "true", "integer", "float",
                                     "number", "string", "mapping", "iterable", "sequence", "callable", "sameas",
                                     "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
                                     "greaterthan", ">", "ge", ">=", "in", "odd", "even", "divisibleby", "lower",
                                     "upper", "escaped"};

bool has_test(const std::string& name) {
    for (const char* t : kTests)
        if (name == t) return true;
    return false;
}

bool apply_test(Evaluator& ev, const std::string& name, const Value& v, std::vector<Value>& args, Kwargs& kwargs) {
    (void)ev;
    auto arg = [&](size_t i) -> const Value& {
        if (i < args.size()) return args[i];
        if (!kwargs.empty()) return kwargs[0].second;
        fail("test '" + name + "' needs an argument");
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.is_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "callable") return v.is_callable();
    if (name == "escaped") return false;
    if (name == "sameas") {
        const Value& other = arg(0);
        if (v.kind() != other.kind()) return false;
        if (v.is_list() || v.is_dict() || v.is_namespace()) return &v.dict_data() == &other.dict_data();
        return values_equal(v, other);
    }
    if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, arg(0));
    if (name == "ne" || name == "!=") return !values_equal(v, arg(0));
    if (name == "in") return contains(arg(0), v);
    if (name == "lower" || name == "upper") {
        if (!v.is_string()) return false;
        bool has_cased = false, bad = false;
        for (unsigned char c : v.str()) {
            has_cased = has_cased || std::isalpha(c);
            bad = bad || (name == "lower" ? std::isupper(c) : std::islower(c));
        }
        return has_cased && !bad;
    }
    if (v.is_undefined()) fail_undefined(v);
    if (name == "odd" || name == "even" || name == "divisibleby") {
        if (!v.is_number()) fail("unsupported operand type(s) for %: '" + v.type_name() + "' and 'int'");
        int64_t d = name == "divisibleby" ? arg(0).as_int() : 2;
        if (d == 0) fail("integer division or modulo by zero");
        if (v.is_float()) {
            double m = std::fmod(v.as_float(), double(d));
            return name == "odd" ? m != 0 : m == 0;
        }
        int64_t m = v.as_int() % d;
        return name == "odd" ? m != 0 : m == 0;
    }
    const Value& other = arg(0);
    if (other.is_undefined()) fail_undefined(other);
    if (name == "lt" || name == "lessthan" || name == "<") return value_less(v, other);
    if (name == "gt" || name == "greaterthan" || name == ">") return value_less(other, v);
    if (name == "le" || name == "<=") return !value_less(other, v);
    if (name == "ge" || name == ">=") return !value_less(v, other);
    fail("no test named '" + name + "'");
}

// ---- globals -------------------------------------------------------------------------------

std::shared_ptr<Scope> make_builtin_globals() {
    auto g = std::make_shared<Scope>();
    g->set("range", Value::callable("range", [](Evaluator& ev, std::vector<Value>& args, Kwargs&) -> Value {
        if (args.empty() || args.size() > 3) fail("range expected 1 to 3 arguments, got " + std::to_string(args.size()));
        for (const auto& a : args)
            if (!is_integer_like(a)) fail("'" + a.type_name() + "' object cannot be interpreted as an integer");
        int64_t start = args.size() > 1 ? args[0].as_int() : 0;
        int64_t stop = args.size() > 1 ? args[1].as_int() : args[0].as_int();
        int64_t step = args.size() > 2 ? args[2].as_int() : 1;
        if (step == 0) fail("range() arg 3 must not be zero");
        long double count = step > 0 ? (stop > start ? ((long double)stop - start + step - 1) / step : 0)
                                     : (start > stop ? ((long double)start - stop - step - 1) / -step : 0);
        // jinja2's sandbox caps ranges at MAX_RANGE = 100000.
        if (count > 100000)
            fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        ev.count_iterations(0);
        std::vector<Value> items;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.emplace_back(i);
        return Value::list(std::move(items));
    }));
    g->set("namespace", Value::callable("namespace", [](Evaluator&, std::vector<Value>& args, Kwargs& kwargs) -> Value {
        Value ns = Value::namespace_object();
        for (const auto& a : args) {
            if (!a.is_dict()) fail("namespace() positional argument must be a mapping");
            for (const auto& [k, v] : a.dict_data().entries) ns.dict_data().set(k, v);
        }
        for (const auto& [k, v] : kwargs) ns.dict_data().set(Value(k), v);
        return ns;
    }));
    g->set("dict", Value::callable("dict", [](Evaluator&, std::vector<Value>& args, Kwargs& kwargs) -> Value {
        Value d = Value::dict();
        for (const auto& a : args) {
            if (!a.is_dict()) fail("dict() positional argument must be a mapping");
            for (const auto& [k, v] : a.dict_data().entries) d.dict_data().set(k, v);
        }
        for (const auto& [k, v] : kwargs) d.dict_data().set(Value(k), v);
        return d;
    }));
    g->set("raise_exception", Value::callable("raise_exception", [](Evaluator&, std::vector<Value>& args, Kwargs&) -> Value {
        throw JinjaError(args.empty() ? std::string("raise_exception called") : args[0].to_str());
    }));
    g->set("strftime_now", Value::callable("strftime_now", [](Evaluator& ev, std::vector<Value>& args, Kwargs&) -> Value {
        if (args.empty() || !args[0].is_string()) fail("strftime_now expects a format string");
        std::tm tm{};
        if (ev.options().now_unix >= 0) {
            std::time_t t = std::time_t(ev.options().now_unix);
            gmtime_r(&t, &tm);
        } else {
            std::time_t t = std::time(nullptr);
            localtime_r(&t, &tm);
        }
        char buf[512];
        size_t n = std::strftime(buf, sizeof(buf), args[0].str().c_str(), &tm);
        if (n == 0 && !args[0].str().empty()) fail("strftime_now: format too long");
        return Value(std::string(buf, n));
    }));
    g->set("joiner", Value::callable("joiner", [](Evaluator&, std::vector<Value>& args, Kwargs&) -> Value {
        std::string sep = args.empty() ? std::string(", ") : args[0].to_str();
        auto used = std::make_shared<bool>(false);
        return Value::callable("joiner", [sep, used](Evaluator&, std::vector<Value>&, Kwargs&) -> Value {
            if (!*used) {
                *used = true;
                return Value(std::string());
            }
            return Value(sep);
        });
    }));
    return g;
}

}  // namespace mvllm::jinja
