// The builtins a chat template can reach: filters (x | name), tests (x is name), attribute and
// item access with the methods of str / dict (x.strip(), d.items(), ...), and the globals
// (range, namespace, dict, raise_exception, strftime_now) of jinja2 as Hugging Face configures it.
// tojson is Hugging Face's: json.dumps(x, ensure_ascii=False) with insertion key order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_eval.h"
#include "tokenizer/jinja_value.h"

namespace mvllm::jinja {

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(Evaluator& ev, const std::string& name, const Value& operand, std::vector<Value>& args,
                   Kwargs& kwargs);
bool apply_test(Evaluator& ev, const std::string& name, const Value& operand, std::vector<Value>& args,
                Kwargs& kwargs);

Value get_attr(const Value& obj, const std::string& name);  // obj.name
Value get_item(const Value& obj, const Value& key);          // obj[key]
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
bool contains(const Value& container, const Value& item);    // item in container

// Builtin globals, the parent scope of a template's context.
std::shared_ptr<Scope> make_builtin_globals();

// The methods of str (string methods live in jinja_methods.cpp).
Value string_method(const Value& s, const std::string& name);

}  // namespace mvllm::jinja
