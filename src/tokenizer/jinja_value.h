// Values of the Jinja renderer: the Python objects a chat template sees (None, bool, int, float,
// str, list, tuple, dict, jinja2's Undefined, namespace(), macros and bound methods), with Python
// semantics for truthiness, equality, ordering, str() and repr(), and json.dumps as Hugging Face's
// tojson filter calls it (ensure_ascii=False, insertion key order).
//
// Lists and dicts are shared by reference like Python objects; the sandbox never mutates them
// (jinja2's ImmutableSandboxedEnvironment), only namespace() objects change in place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mvllm::jinja {

// An error while parsing or rendering; line/column 0 means "not known yet" (the evaluator
// fills in the position of the statement that failed).
class JinjaError : public std::runtime_error {
public:
    explicit JinjaError(const std::string& message, int line = 0, int column = 0)
        : std::runtime_error(message), line(line), column(column) {}
    int line;
    int column;
};

[[noreturn]] void fail(const std::string& message);

enum class ValueKind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

class Value;
class Evaluator;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using NativeFn = std::function<Value(Evaluator&, std::vector<Value>& args, Kwargs& kwargs)>;

struct ListData;
struct DictData;
struct CallableData;

class Value {
public:
    Value() = default;  // Undefined
    static Value undefined(std::string name = {});
    static Value none();
    Value(bool b);  // NOLINT: implicit on purpose, like the Python literal
    Value(int v) : Value(int64_t(v)) {}  // NOLINT
    Value(int64_t v);                    // NOLINT
    Value(double v);                     // NOLINT
    Value(std::string s);                // NOLINT
    Value(const char* s) : Value(std::string(s)) {}  // NOLINT
    static Value list(std::vector<Value> items = {}, bool is_tuple = false);
    static Value dict();
    static Value namespace_object();
    static Value callable(std::string name, NativeFn fn);
    static Value from_json(const nlohmann::ordered_json& j);  // JinjaError beyond 512 levels of nesting

    ValueKind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == ValueKind::Undefined; }
    bool is_none() const { return kind_ == ValueKind::None; }
    bool is_bool() const { return kind_ == ValueKind::Bool; }
    bool is_int() const { return kind_ == ValueKind::Int; }
    bool is_float() const { return kind_ == ValueKind::Float; }
    bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
    bool is_string() const { return kind_ == ValueKind::String; }
    bool is_list() const { return kind_ == ValueKind::List; }
    bool is_tuple() const;
    bool is_dict() const { return kind_ == ValueKind::Dict; }
    bool is_namespace() const { return kind_ == ValueKind::Namespace; }
    bool is_callable() const { return kind_ == ValueKind::Callable; }

    bool as_bool() const { return b_; }
    // bool -> 0/1; a float is truncated as Python's int(), and a JinjaError when it is NaN or
    // beyond the int64 range (Python would make a big integer).
    int64_t as_int() const { return kind_ == ValueKind::Float ? float_to_int(f_) : i_; }
    static int64_t float_to_int(double f);
    double as_float() const { return kind_ == ValueKind::Float ? f_ : double(i_); }
    const std::string& str() const { return s_; }      // String only
    const std::string& undefined_name() const { return s_; }
    std::vector<Value>& items() const;                 // List only
    DictData& dict_data() const;                       // Dict and Namespace
    const CallableData& callable_data() const;

    bool truthy() const;
    std::string to_str() const;   // Python str()
    std::string repr() const;     // Python repr()
    std::string type_name() const;  // Python type name for error messages

private:
    static Value from_json_at(const nlohmann::ordered_json& j, int depth);
    ValueKind kind_ = ValueKind::Undefined;
    bool b_ = false;
    int64_t i_ = 0;
    double f_ = 0;
    std::string s_;  // the string, or the name an Undefined stands for
    std::shared_ptr<void> ref_;  // ListData, DictData or CallableData
};

struct ListData {
    std::vector<Value> items;
    bool is_tuple = false;
};

// Insertion-ordered like a Python dict; keys are hashable Values (strings in practice).
struct DictData {
    std::vector<std::pair<Value, Value>> entries;
    const Value* find(const Value& key) const;
    const Value* find(const std::string& key) const;
    void set(const Value& key, Value value);
};

struct CallableData {
    std::string name;
    NativeFn fn;
};

bool values_equal(const Value& a, const Value& b);
// Python ordering (<): numbers, strings, lists; a TypeError otherwise.
bool value_less(const Value& a, const Value& b);

std::string format_float(double v);  // Python repr(float)

struct DumpOptions {
    std::string indent;  // empty: one line
    bool has_indent = false;
    std::string item_separator = ", ";
    std::string key_separator = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;  // escape non-ASCII as \uXXXX
};
// json.dumps(value, ensure_ascii=False, ...) as Python writes it.
std::string dump_json(const Value& v, const DumpOptions& options);

// UTF-8 helpers: Python strings index code points.
std::vector<size_t> code_point_offsets(const std::string& s);  // start offset of each code point
size_t code_point_count(const std::string& s);
void append_utf8(std::string& out, uint32_t cp);
// Python str.strip / lstrip / rstrip: Unicode whitespace when chars is null, else any code point
// of *chars.
std::string py_strip(const std::string& s, bool left, bool right, const std::string* chars = nullptr);

}  // namespace mvllm::jinja
